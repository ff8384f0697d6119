"""What the sync and async clients share: configuration, and every API call as a value (method,
path, query, body, headers, how to read the answer), so each client only sends them."""

from __future__ import annotations

import datetime as _dt
import json
import os
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from . import models as m
from ._retry import RetryPolicy
from .errors import TransportError

__version__ = "0.1.0"

DEFAULT_URL = "http://127.0.0.1:8080"
#: Read timeout above the coordinator's own wait for a verdict (`coordinator.wait`, 60 s).
DEFAULT_TIMEOUT = httpx.Timeout(90.0, connect=10.0)
#: An event stream sends a keep-alive comment every 15 s: a minute of silence is a dead stream.
EVENTS_TIMEOUT = httpx.Timeout(60.0, connect=10.0)

T = TypeVar("T")

#: Every route this client calls (a test checks each is in the server's document) and the
#: ones among them it sends an ``Idempotency-Key`` on (checked against the routes whose
#: document takes one).
ROUTES: tuple[tuple[str, str], ...] = (
    ("POST", "/v1/executions"),
    ("GET", "/v1/executions/{id}"),
    ("POST", "/v1/executions/batch"),
    ("GET", "/v1/executions/batches/{id}"),
    ("GET", "/v1/executions"),
    ("POST", "/v1/jobs"),
    ("GET", "/v1/jobs/{id}"),
    ("GET", "/v1/jobs/{id}/events"),
    ("GET", "/v1/jobs/{id}/transcript"),
    ("DELETE", "/v1/jobs/{id}"),
    ("GET", "/v1/jobs"),
    ("POST", "/v1/batches"),
    ("GET", "/v1/batches/{id}"),
    ("GET", "/v1/batches/{id}/results"),
    ("DELETE", "/v1/batches/{id}"),
    ("GET", "/v1/batches"),
    ("POST", "/v1/sessions"),
    ("GET", "/v1/sessions"),
    ("GET", "/v1/sessions/{id}"),
    ("DELETE", "/v1/sessions/{id}"),
    ("POST", "/v1/sessions/{id}/run"),
    ("GET", "/v1/sessions/{id}/files"),
    ("GET", "/v1/sessions/{id}/files/{path}"),
    ("PUT", "/v1/sessions/{id}/files/{path}"),
    ("GET", "/v1/usage"),
    ("GET", "/v1/cluster"),
    ("GET", "/v1/languages"),
    ("GET", "/v1/cache/stats"),
    ("DELETE", "/v1/cache"),
    ("GET", "/v1/lessons"),
    ("GET", "/v1/lessons/{id}"),
    ("DELETE", "/v1/lessons/{id}"),
    ("GET", "/v1/lessons/export"),
    ("POST", "/v1/lessons/import"),
    ("GET", "/openapi.json"),
)
#: Routes of the document this client leaves to others: SandboxFusion's (its own client,
#: PyPI ``sandbox-fusion``, works against the coordinator) and the operations endpoints.
NOT_COVERED: tuple[tuple[str, str], ...] = (
    ("POST", "/run_code"),
    ("POST", "/fusion/{key}/run_code"),
    ("POST", "/run_jupyter"),
    ("POST", "/fusion/{key}/run_jupyter"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
)
IDEMPOTENT_CREATES: tuple[tuple[str, str], ...] = (
    ("POST", "/v1/executions"),
    ("POST", "/v1/executions/batch"),
    ("POST", "/v1/jobs"),
    ("POST", "/v1/batches"),
)


def new_idempotency_key() -> str:
    return str(uuid.uuid4())


@dataclass
class Settings:
    base_url: str
    api_key: str | None
    retry: RetryPolicy
    timeout: httpx.Timeout
    headers: dict[str, str]

    @classmethod
    def resolve(
        cls,
        base_url: str | None,
        api_key: str | None,
        retry: RetryPolicy | None,
        timeout: float | httpx.Timeout | None,
        headers: Mapping[str, str] | None,
    ) -> Settings:
        url = (base_url or os.environ.get("CODEGEN_URL") or DEFAULT_URL).rstrip("/")
        key = api_key if api_key is not None else os.environ.get("CODEGEN_API_KEY") or None
        all_headers = {"User-Agent": f"codegen-cluster-python/{__version__}"}
        if key:
            all_headers["Authorization"] = f"Bearer {key}"
        all_headers.update(headers or {})
        if timeout is None:
            timeout = DEFAULT_TIMEOUT
        elif not isinstance(timeout, httpx.Timeout):
            timeout = httpx.Timeout(timeout)
        return cls(url, key, retry or RetryPolicy(), timeout, all_headers)


@dataclass
class Call(Generic[T]):
    """One API call: what to send and how to read a successful answer."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: dict[str, Any] | None = None
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    idempotency_key: str | None = None
    timeout: httpx.Timeout | None = None

    def __post_init__(self) -> None:
        if self.idempotency_key is not None:
            self.headers["Idempotency-Key"] = self.idempotency_key
        if self.params:
            self.params = {k: v for k, v in self.params.items() if v is not None}

    @property
    def safe(self) -> bool:
        """Sending it twice does no more than sending it once."""
        return self.method in ("GET", "HEAD", "PUT", "DELETE") or self.idempotency_key is not None

    def request(self, http: httpx.Client | httpx.AsyncClient, settings: Settings) -> httpx.Request:
        kwargs: dict[str, Any] = {
            "params": self.params or None,
            "headers": {**settings.headers, **self.headers},
        }
        if self.json is not None:
            kwargs["json"] = self.json
        if self.content is not None:
            kwargs["content"] = self.content
        if self.timeout is not None:
            kwargs["timeout"] = self.timeout
        return http.build_request(self.method, settings.base_url + self.path, **kwargs)


def transport_error(error: httpx.TransportError, request: httpx.Request | None) -> TransportError:
    """An httpx failure as this client's error; ``not_sent`` when no byte reached the server
    (the connection could not be made), which makes any request safe to send again."""
    where = f" ({request.method} {request.url})" if request is not None else ""
    wrapped = TransportError(f"{type(error).__name__}: {error}{where}", code=None, status=None)
    wrapped.not_sent = isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout))  # type: ignore[attr-defined]
    return wrapped


# --- reading answers ------------------------------------------------------------------------


def _model(cls: type[T]) -> Callable[[httpx.Response], T]:
    return lambda r: cls.model_validate_json(r.content)  # type: ignore[attr-defined]


def _job_view(data: dict[str, Any]) -> m.JobResult | m.JobProgress:
    if "function_specs" in data:
        return m.JobResult.model_validate(data)
    return m.JobProgress.model_validate(data)


def _job_submitted(r: httpx.Response) -> m.JobAccepted | m.JobResult:
    data = r.json()
    if r.status_code == 200 or "function_specs" in data:
        return m.JobResult.model_validate(data)
    return m.JobAccepted.model_validate(data)


def _nothing(r: httpx.Response) -> None:
    return None


def _bytes(r: httpx.Response) -> bytes:
    return r.content


def _json(r: httpx.Response) -> Any:
    return r.json()


def _jsonl(r: httpx.Response) -> list[Any]:
    """A JSON Lines body: one value per non-blank line."""
    return [json.loads(line) for line in r.text.splitlines() if line.strip()]


def _segment(value: str) -> str:
    return quote(str(value), safe="")


def _file_path(path: str) -> str:
    return "/".join(quote(part, safe="") for part in path.strip("/").split("/"))


def _time(value: str | _dt.datetime | None) -> str | None:
    """An RFC 3339 time (a naive datetime is taken as UTC)."""
    if value is None or isinstance(value, str):
        return value
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.timezone.utc)
    return value.isoformat()


def _list_params(status, since, until, cursor, limit) -> dict[str, Any]:
    return {
        "status": status,
        "since": _time(since),
        "until": _time(until),
        "cursor": cursor,
        "limit": limit,
    }


def _bool(value: bool) -> str:
    return "true" if value else "false"


# --- the calls ------------------------------------------------------------------------------


def submit_execution(
    request: m.ExecutionSubmission, *, wait: bool, idempotency_key: str | None
) -> Call[m.ExecutionView]:
    return Call(
        "POST",
        "/v1/executions",
        _model(m.ExecutionView),
        params={"wait": None if wait else "false"},
        json=request.to_json(),
        idempotency_key=idempotency_key or new_idempotency_key(),
    )


def get_execution(execution_id: str) -> Call[m.ExecutionView]:
    return Call("GET", f"/v1/executions/{_segment(execution_id)}", _model(m.ExecutionView))


def batch_body(
    items: Iterable[m.ExecutionBatchItem | m.ExecutionSubmission | Mapping[str, Any]],
    callback_url: str | None,
) -> dict[str, Any]:
    parsed = []
    for item in items:
        if isinstance(item, m.ExecutionBatchItem):
            parsed.append(item)
        elif isinstance(item, m.ExecutionSubmission):
            parsed.append(m.ExecutionBatchItem.model_validate(item.model_dump(exclude_none=True)))
        else:
            parsed.append(m.ExecutionBatchItem.model_validate(dict(item)))
    return m.ExecutionBatch(items=parsed, callback_url=callback_url).to_json()


def submit_execution_batch(
    body: dict[str, Any], *, wait: bool, stream: bool, idempotency_key: str | None
) -> Call[m.ExecutionBatchView]:
    params: dict[str, Any] = {}
    if stream:
        params["stream"] = "true"
    elif not wait:
        params["wait"] = "false"
    return Call(
        "POST",
        "/v1/executions/batch",
        _model(m.ExecutionBatchView),
        params=params,
        json=body,
        idempotency_key=idempotency_key or new_idempotency_key(),
    )


def get_execution_batch(batch_id: str) -> Call[m.ExecutionBatchView]:
    return Call("GET", f"/v1/executions/batches/{_segment(batch_id)}", _model(m.ExecutionBatchView))


def list_executions(status, since, until, cursor, limit) -> Call[m.ExecutionList]:
    return Call(
        "GET",
        "/v1/executions",
        _model(m.ExecutionList),
        params=_list_params(status, since, until, cursor, limit),
    )


def job_body(
    request: m.JobSubmission | str | Mapping[str, Any], fields: dict[str, Any]
) -> m.JobSubmission:
    if isinstance(request, m.JobSubmission):
        return request.model_copy(update=fields) if fields else request
    if isinstance(request, str):
        return m.JobSubmission(instruction=request, **fields)
    return m.JobSubmission.model_validate({**dict(request), **fields})


#: The fields of ``AgentSettings``: ``agent_job_body`` takes them as keywords.
AGENT_SETTINGS = tuple(m.AgentSettings.model_fields)


def agent_job_body(
    instruction: str,
    *,
    language: str | None,
    files: Mapping[str, str] | None,
    agent: m.AgentSettings | Mapping[str, Any] | None,
    fields: dict[str, Any],
) -> m.JobSubmission:
    """An agent job (``mode: "agent"``): ``fields`` are ``AgentSettings``' (``max_steps``,
    ``seed``, ``temperature``...) over ``agent``, and the other fields of ``JobSubmission``
    (``max_tokens_total``, ``callback_url``...)."""
    settings = {k: fields.pop(k) for k in list(fields) if k in AGENT_SETTINGS}
    if isinstance(agent, m.AgentSettings):
        agent = agent.model_dump(exclude_none=True)
    settings = {**dict(agent or {}), **{k: v for k, v in settings.items() if v is not None}}
    return m.JobSubmission(
        instruction=instruction,
        mode="agent",
        language=language,
        files=dict(files) if files is not None else None,
        agent=m.AgentSettings(**settings) if settings else None,
        **fields,
    )


def submit_job(
    request: m.JobSubmission, *, idempotency_key: str | None
) -> Call[m.JobAccepted | m.JobResult]:
    return Call(
        "POST",
        "/v1/jobs",
        _job_submitted,
        json=request.to_json(),
        idempotency_key=idempotency_key or new_idempotency_key(),
    )


def get_job(job_id: str) -> Call[m.JobResult | m.JobProgress]:
    return Call("GET", f"/v1/jobs/{_segment(job_id)}", lambda r: _job_view(r.json()))


def cancel_job(job_id: str) -> Call[m.JobResult]:
    return Call("DELETE", f"/v1/jobs/{_segment(job_id)}", _model(m.JobResult))


def job_transcript(job_id: str) -> Call[list[dict[str, Any]]]:
    return Call(
        "GET",
        f"/v1/jobs/{_segment(job_id)}/transcript",
        _jsonl,
        headers={"Accept": "application/x-ndjson"},
    )


def job_events_path(job_id: str) -> str:
    return f"/v1/jobs/{_segment(job_id)}/events"


def list_jobs(status, since, until, cursor, limit) -> Call[m.JobList]:
    return Call(
        "GET",
        "/v1/jobs",
        _model(m.JobList),
        params=_list_params(status, since, until, cursor, limit),
    )


def submit_batch(
    jobs: Iterable[m.JobSubmission | str | Mapping[str, Any]],
    *,
    callback_url: str | None,
    idempotency_key: str | None,
) -> Call[m.BatchAccepted]:
    lines = [json.dumps(job_body(job, {}).to_json(), separators=(",", ":")) for job in jobs]
    return Call(
        "POST",
        "/v1/batches",
        _model(m.BatchAccepted),
        params={"callback_url": callback_url},
        content=("\n".join(lines) + "\n").encode("utf-8"),
        headers={"Content-Type": "application/x-ndjson"},
        idempotency_key=idempotency_key or new_idempotency_key(),
    )


def get_batch(
    batch_id: str, wait_ms: int | None = None, finished: int | None = None
) -> Call[m.BatchView]:
    timeout = None
    if wait_ms:
        timeout = httpx.Timeout(wait_ms / 1000 + 30.0, connect=10.0)
    return Call(
        "GET",
        f"/v1/batches/{_segment(batch_id)}",
        _model(m.BatchView),
        params={"wait_ms": wait_ms, "finished": finished},
        timeout=timeout,
    )


def get_batch_results(
    batch_id: str, cursor: str | None = None, limit: int | None = None
) -> Call[m.BatchResults]:
    return Call(
        "GET",
        f"/v1/batches/{_segment(batch_id)}/results",
        _model(m.BatchResults),
        params={"cursor": cursor, "limit": limit},
    )


def cancel_batch(batch_id: str) -> Call[m.BatchView]:
    return Call("DELETE", f"/v1/batches/{_segment(batch_id)}", _model(m.BatchView))


def list_batches(status, since, until, cursor, limit) -> Call[m.BatchList]:
    return Call(
        "GET",
        "/v1/batches",
        _model(m.BatchList),
        params=_list_params(status, since, until, cursor, limit),
    )


def open_session(request: m.SessionCreate) -> Call[m.SessionView]:
    # The server does not take an Idempotency-Key on sessions (not a "creating route").
    return Call("POST", "/v1/sessions", _model(m.SessionView), json=request.to_json())


def get_session(session_id: str) -> Call[m.SessionView]:
    return Call("GET", f"/v1/sessions/{_segment(session_id)}", _model(m.SessionView))


def list_sessions() -> Call[m.SessionList]:
    return Call("GET", "/v1/sessions", _model(m.SessionList))


def delete_session(session_id: str) -> Call[m.SessionView]:
    return Call("DELETE", f"/v1/sessions/{_segment(session_id)}", _model(m.SessionView))


def run_cell(session_id: str, code: str, timeout_ms: int | None) -> Call[m.CellResult]:
    timeout = None
    if timeout_ms is not None:
        timeout = httpx.Timeout(timeout_ms / 1000 + 60.0, connect=10.0)
    else:
        # The default cell deadline is 30 s (at most 10 min): a cell is not a quick call.
        timeout = httpx.Timeout(660.0, connect=10.0)
    return Call(
        "POST",
        f"/v1/sessions/{_segment(session_id)}/run",
        _model(m.CellResult),
        json=m.CellRequest(code=code, timeout_ms=timeout_ms).to_json(),
        timeout=timeout,
    )


def list_session_files(session_id: str) -> Call[m.SessionFiles]:
    return Call("GET", f"/v1/sessions/{_segment(session_id)}/files", _model(m.SessionFiles))


def download_session_file(session_id: str, path: str) -> Call[bytes]:
    return Call("GET", f"/v1/sessions/{_segment(session_id)}/files/{_file_path(path)}", _bytes)


def upload_session_file(session_id: str, path: str, data: bytes | str) -> Call[None]:
    content = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    return Call(
        "PUT",
        f"/v1/sessions/{_segment(session_id)}/files/{_file_path(path)}",
        _nothing,
        content=content,
        headers={"Content-Type": "application/octet-stream"},
    )


def get_usage(from_, to, tenant, per=None) -> Call[m.Usage]:
    return Call(
        "GET",
        "/v1/usage",
        _model(m.Usage),
        params={"from": _time(from_), "to": _time(to), "per": per, "tenant": tenant},
    )


def get_cluster() -> Call[m.ClusterView]:
    return Call("GET", "/v1/cluster", _model(m.ClusterView))


def get_languages() -> Call[m.Languages]:
    return Call("GET", "/v1/languages", _model(m.Languages))


def cache_stats() -> Call[m.CacheStats]:
    return Call("GET", "/v1/cache/stats", _model(m.CacheStats))


def clear_cache() -> Call[m.CacheCleared]:
    return Call("DELETE", "/v1/cache", _model(m.CacheCleared))


def _lesson_set(tenant: str | None, shared: bool) -> dict[str, Any]:
    """The set a lessons route names: the caller's own (neither), another tenant's
    (``tenant``, admins only) or the operators' shared one (``shared``)."""
    return {"tenant": tenant, "shared": "true" if shared else None}


def list_lessons(
    q: str | None, language: str | None, limit: int | None, tenant: str | None, shared: bool
) -> Call[m.LessonList]:
    return Call(
        "GET",
        "/v1/lessons",
        _model(m.LessonList),
        params={"q": q, "language": language, "limit": limit, **_lesson_set(tenant, shared)},
    )


def get_lesson(lesson_id: str, tenant: str | None, shared: bool) -> Call[m.LessonView]:
    return Call(
        "GET",
        f"/v1/lessons/{_segment(lesson_id)}",
        _model(m.LessonView),
        params=_lesson_set(tenant, shared),
    )


def delete_lesson(lesson_id: str, tenant: str | None, shared: bool) -> Call[None]:
    return Call(
        "DELETE",
        f"/v1/lessons/{_segment(lesson_id)}",
        _nothing,
        params=_lesson_set(tenant, shared),
    )


def _lessons(r: httpx.Response) -> list[m.Lesson]:
    return [m.Lesson.model_validate(line) for line in _jsonl(r)]


def export_lessons(tenant: str | None, shared: bool) -> Call[list[m.Lesson]]:
    return Call(
        "GET",
        "/v1/lessons/export",
        _lessons,
        params=_lesson_set(tenant, shared),
        headers={"Accept": "application/x-ndjson"},
    )


def import_lessons(
    lessons: Iterable[m.Lesson | Mapping[str, Any]], tenant: str | None, shared: bool
) -> Call[m.LessonImport]:
    lines = [json.dumps(m.lesson_json(lesson), separators=(",", ":")) for lesson in lessons]
    return Call(
        "POST",
        "/v1/lessons/import",
        _model(m.LessonImport),
        params=_lesson_set(tenant, shared),
        content="".join(line + "\n" for line in lines).encode("utf-8"),
        headers={"Content-Type": "application/x-ndjson"},
    )


def get_openapi() -> Call[dict]:
    return Call("GET", "/openapi.json", _json)


def session_create(language: str, memory_mb, idle_timeout_s, packages) -> m.SessionCreate:
    return m.SessionCreate(
        language=language,
        memory_mb=memory_mb,
        idle_timeout_s=idle_timeout_s,
        packages=list(packages) if packages else None,
    )


def execution(language: str, code: str, fields: dict[str, Any]) -> m.ExecutionSubmission:
    return m.ExecutionSubmission(language=language, code=code, **fields)


def event_of(sse: Any) -> m.JobEvent:
    """An httpx-sse ``ServerSentEvent`` as a ``JobEvent`` (its data parsed as ``Progress``)."""
    try:
        data = json.loads(sse.data) if sse.data else {}
    except ValueError:
        data = {"event": sse.event, "raw": sse.data}
    if isinstance(data, dict):
        data.setdefault("event", sse.event)
        progress: Any = m.parse_progress(data)
    else:
        progress = data
    return m.JobEvent(id=sse.id or None, event=sse.event or "message", data=progress)
