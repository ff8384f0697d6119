"""Schemathesis hooks for the coordinator's API (loaded by scripts/test).

`POST /v1/batches` takes JSON Lines (`application/x-ndjson`): the document describes the body
as an array of job submissions, one per line. Schemathesis has no serializer for that media
type, so this one writes an array as one JSON value per line and anything else (what negative
testing makes of it) as a single line.

Every job a valid batch holds is real work for the cluster under test (a plan task for the
workers), and generated batches go up to the document's `maxItems` (1000). A valid batch is
therefore cut to its first few jobs before it is sent: still valid, and the run stays cheap.
Invalid batches go out whole; they are refused before any job is created. Execution batches
(`POST /v1/executions/batch`, up to 10 000 programs) are cut the same way.

Streamed execution batches answer JSON Lines too; the deserializer below reads them as the
array of their lines, which is how the document describes them.
"""

import json

import schemathesis
from schemathesis import GenerationMode

MAX_JOBS_PER_VALID_BATCH = 3


@schemathesis.serializer("application/x-ndjson")
def ndjson(ctx, value):
    if isinstance(value, list):
        return "".join(json.dumps(item) + "\n" for item in value).encode()
    return (json.dumps(value) + "\n").encode()


@schemathesis.deserializer("application/x-ndjson")
def ndjson_response(ctx, response):
    """A streamed answer (`POST /v1/executions/batch?stream=true`) is described as the array of
    its lines, as a JSON Lines request body is."""
    text = response.content.decode(response.encoding or "utf-8")
    # Lines end at "\n" only: str.splitlines() would also split inside strings at U+2028,
    # U+0085 and the like, which JSON leaves unescaped.
    return [json.loads(line) for line in text.split("\n") if line.strip()]


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    if (
        case.method.upper() == "POST"
        and case.path == "/v1/batches"
        and case.meta is not None
        and case.meta.generation.mode == GenerationMode.POSITIVE
        and isinstance(case.body, list)
    ):
        case.body = case.body[:MAX_JOBS_PER_VALID_BATCH]
    # The same for execution batches: up to `maxItems` (10 000) programs each otherwise.
    if (
        case.method.upper() == "POST"
        and case.path == "/v1/executions/batch"
        and case.meta is not None
        and case.meta.generation.mode == GenerationMode.POSITIVE
        and isinstance(case.body, dict)
        and isinstance(case.body.get("items"), list)
    ):
        case.body["items"] = case.body["items"][:MAX_JOBS_PER_VALID_BATCH]
    # A `callback_url` is valid only for hosts the operator allows (`coordinator.webhook_allow`,
    # empty in this cluster), which no schema can say: valid requests go out without one
    # (tests/tests/e2e/webhooks.rs covers webhooks against a real receiver).
    if case.meta is not None and case.meta.generation.mode == GenerationMode.POSITIVE:
        if case.method.upper() == "POST" and case.path in ("/v1/jobs", "/v1/executions/batch"):
            if isinstance(case.body, dict):
                case.body.pop("callback_url", None)
        if case.method.upper() == "POST" and case.path == "/v1/batches":
            if isinstance(case.query, dict):
                case.query.pop("callback_url", None)
            if isinstance(case.body, list):
                for line in case.body:
                    if isinstance(line, dict):
                        line.pop("callback_url", None)
        # A job's `code`, `error` and `goals` belong to its `mode` (`debug`: code and error;
        # `refactor`: code and goals; `generate`: none of them), `files` and `agent` to `agent`
        # jobs, which the schema does not say: valid jobs go out with the fields of their mode
        # only.
        jobs = []
        if case.method.upper() == "POST" and case.path == "/v1/jobs" and isinstance(case.body, dict):
            jobs = [case.body]
        if case.method.upper() == "POST" and case.path == "/v1/batches" and isinstance(case.body, list):
            jobs = [line for line in case.body if isinstance(line, dict)]
        for job in jobs:
            fit_mode(job)
        # A lessons route names one set: a tenant's (`tenant`) or the shared one (`shared`),
        # never both, which the schema does not say: valid requests name the shared set alone.
        if case.path.startswith("/v1/lessons") and isinstance(case.query, dict):
            if case.query.get("shared") in (True, "true") and "tenant" in case.query:
                case.query.pop("tenant")


#: What an agent job's session may be in (the server's `SESSION_LANGUAGES`, by their names).
SESSION_LANGUAGES = ("python", "python-sci", "javascript", "bash")


def fit_mode(job):
    """`job` with the fields its `mode` takes, and those non-empty and within their limits."""
    mode = job.get("mode") or "generate"
    if mode == "agent":
        # The agent decides its own steps: no pipeline fields; a session language.
        for field in ("code", "error", "goals", "candidates", "max_iterations"):
            job.pop(field, None)
        if job.get("language") not in SESSION_LANGUAGES:
            job["language"] = "python"
        return
    # `files` and `agent` belong to agent jobs alone.
    job.pop("files", None)
    job.pop("agent", None)
    if mode == "generate":
        for field in ("code", "error", "goals"):
            job.pop(field, None)
        return
    if not isinstance(job.get("code"), str) or not job["code"].strip():
        job["code"] = "def f(x):\n    return x\n"
    if mode == "debug":
        job.pop("goals", None)
        if not isinstance(job.get("error"), str) or not job["error"].strip():
            job["error"] = "f(1) returned 1, expected 2"
    else:
        job.pop("error", None)
        if isinstance(job.get("goals"), list):
            job["goals"] = [g[:200] for g in job["goals"][:10] if isinstance(g, str)]
