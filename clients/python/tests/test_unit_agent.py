"""Agent jobs (``"mode": "agent"``) against respx's mocked httpx transport: the body
``jobs.submit_agent`` sends, the steps of the ``agent_step`` events read by their ``kind``, the
outcome in ``JobResult.agent``, and ``jobs.transcript``'s JSON Lines, with both clients."""

from __future__ import annotations

import json

import httpx
import pydantic
import pytest
import respx

import codegen_client as cc
from codegen_client import AsyncClient, Client, RetryPolicy, models

BASE = "http://coordinator.test"
JOB_ID = "01a223cc-c559-7349-99f4-12774c2b45b7"
ACCEPTED = {"job_id": JOB_ID, "status": "queued"}

TOOL = {
    "name": "write_file",
    "description": "Write a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
}
START = {
    "kind": "start",
    "index": 0,
    "system": "You are an agent.",
    "task": "Write hello.py.",
    "tools": [TOOL],
    "model": "scripted/fake",
    "at_ms": 1,
    "worker": "worker-1",
}
MODEL = {
    "kind": "model",
    "index": 1,
    "step": 1,
    "text": "",
    "calls": [
        {
            "id": "call_0_0_0",
            "tool": "write_file",
            "arguments": '{"path": "hello.py", "content": "print(1)\\n"}',
        }
    ],
    "prompt_tokens": 10,
    "completion_tokens": 3,
    "model_calls": 1,
    "token_ids": [1, 2, 3],
    "duration_ms": 5,
    "at_ms": 2,
    "worker": "worker-1",
}
OBSERVATION = {
    "kind": "observation",
    "index": 2,
    "call_id": "call_0_0_0",
    "tool": "write_file",
    "content": "wrote hello.py (9 bytes)",
    "error": False,
    "cut": {"total_chars": 30000, "omitted_chars": 20000},
    "cpu_ms": 4,
    "duration_ms": 6,
    "at_ms": 3,
    "worker": "worker-1",
}
TOTALS = {
    "steps": 2,
    "tool_calls": 2,
    "model_calls": 2,
    "prompt_tokens": 20,
    "completion_tokens": 6,
    "sandbox_cpu_ms": 4,
    "wall_ms": 900,
    "resumed": 0,
}


def result(ended_by: str = "finished", status: str = "succeeded") -> dict:
    """An agent job's `JobResult`: the pipeline's fields empty, its outcome in `agent`."""
    outcome = {
        "ended_by": ended_by,
        "totals": TOTALS,
        "session_id": JOB_ID,
        "files": {"hello.py": "print(1)\n"},
    }
    if ended_by == "finished":
        outcome["answer"] = "done"
        outcome["missing"] = {"notes.txt": "no such file"}
    return {
        "job_id": JOB_ID,
        "status": status,
        "instruction": "Write hello.py.",
        "language": "python",
        "function_specs": [],
        "implementations": {},
        "tests": {},
        "test_results": [],
        "all_tests_passed": False,
        "improvement_history": [],
        "documentation": "",
        "quality": {
            "score": 0.0,
            "tests_passed": 0,
            "tests_total": 0,
            "coverage": None,
            "complexity": {},
            "docstrings": None,
            "dangerous_calls": [],
        },
        "metrics": {
            "generation_ms": 0,
            "execution_ms": 0,
            "total_ms": 900,
            "model_calls": 2,
            "tokens": {"prompt": 20, "completion": 6},
            "cache": "bypass",
        },
        "failure": None if status == "succeeded" else f"the agent's run ended: {ended_by}",
        "validation": "not_validated",
        "manual_review_recommended": True,
        "agent": outcome,
    }


def sse(event_id: str, name: str, data: dict) -> bytes:
    payload = json.dumps({"event": name, **data})
    return f"id: {event_id}\nevent: {name}\ndata: {payload}\n\n".encode()


EVENTS = b"".join(
    [
        sse("1-0", "queued", {"job_id": JOB_ID}),
        sse("2-0", "agent_step", {"step": START}),
        sse("3-0", "agent_step", {"step": MODEL}),
        sse("4-0", "agent_step", {"step": OBSERVATION}),
        sse(
            "5-0",
            "finished",
            {
                "status": "succeeded",
                "all_tests_passed": False,
                "validation": "not_validated",
                "cache": "bypass",
            },
        ),
    ]
)

TRANSCRIPT = [
    {"role": "system", "content": "You are an agent."},
    {"role": "user", "content": "Write hello.py."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_0_0_0",
                "type": "function",
                "function": {"name": "write_file", "arguments": MODEL["calls"][0]["arguments"]},
            }
        ],
        "token_ids": [1, 2, 3],
    },
    {"role": "tool", "tool_call_id": "call_0_0_0", "content": "wrote hello.py (9 bytes)"},
]


def jsonl(messages: list[dict]) -> bytes:
    return "".join(json.dumps(m) + "\n" for m in messages).encode()


@pytest.fixture
def mock():
    with respx.mock(base_url=BASE, assert_all_called=False) as router:
        yield router


def no_sleep(seconds: float) -> None:
    return None


async def no_async_sleep(seconds: float) -> None:
    return None


def sent(route: respx.Route, k: int = 0) -> dict:
    return json.loads(route.calls[k].request.content)


# --- submitting -----------------------------------------------------------------------------


def test_submit_agent_sends_mode_files_and_settings_with_an_idempotency_key(mock):
    route = mock.post("/v1/jobs").mock(return_value=httpx.Response(202, json=ACCEPTED))
    with Client(BASE) as client:
        accepted = client.jobs.submit_agent(
            "Sum the numbers in data/numbers.txt with a script.",
            language="python",
            files={"data/numbers.txt": "1 2 3 4\n"},
            max_steps=10,
            seed=7,
            temperature=0.0,
            max_tokens_total=5000,
        )
    assert isinstance(accepted, cc.JobAccepted) and accepted.job_id == JOB_ID
    assert sent(route) == {
        "instruction": "Sum the numbers in data/numbers.txt with a script.",
        "mode": "agent",
        "language": "python",
        "files": {"data/numbers.txt": "1 2 3 4\n"},
        "agent": {"max_steps": 10, "seed": 7, "temperature": 0.0},
        "max_tokens_total": 5000,
    }
    assert route.calls[0].request.headers["idempotency-key"]


def test_settings_as_keywords_go_over_an_agent_block_and_nothing_unset_is_sent(mock):
    route = mock.post("/v1/jobs").mock(return_value=httpx.Response(202, json=ACCEPTED))
    with Client(BASE) as client:
        client.jobs.submit_agent("Go.")
        client.jobs.submit_agent(
            "Go.",
            agent=cc.AgentSettings(max_steps=50, stuck_repeats=5),
            max_steps=3,
            max_seconds=None,
        )
        client.jobs.submit_agent("Go.", agent={"max_observation_chars": 500, "seed": 1})
    assert sent(route, 0) == {"instruction": "Go.", "mode": "agent"}
    assert sent(route, 1)["agent"] == {"max_steps": 3, "stuck_repeats": 5}
    assert sent(route, 2)["agent"] == {"max_observation_chars": 500, "seed": 1}


def test_jobs_submit_takes_an_agent_job_as_it_takes_debug_and_refactor(mock):
    route = mock.post("/v1/jobs").mock(return_value=httpx.Response(202, json=ACCEPTED))
    with Client(BASE) as client:
        client.jobs.submit(
            "Go.", mode="agent", files={"a.py": "x = 1\n"}, agent=cc.AgentSettings(max_cpu_ms=9)
        )
        client.jobs.submit(
            cc.JobSubmission(instruction="Go.", mode="agent", agent={"stuck_errors": 2})
        )
    assert sent(route, 0) == {
        "instruction": "Go.",
        "mode": "agent",
        "files": {"a.py": "x = 1\n"},
        "agent": {"max_cpu_ms": 9},
    }
    assert sent(route, 1)["agent"] == {"stuck_errors": 2}


def test_an_unknown_setting_is_refused_before_anything_is_sent(mock):
    route = mock.post("/v1/jobs").mock(return_value=httpx.Response(202, json=ACCEPTED))
    with Client(BASE) as client:
        with pytest.raises(pydantic.ValidationError):
            client.jobs.submit_agent("Go.", max_stepz=3)
        with pytest.raises(pydantic.ValidationError):
            client.jobs.submit_agent("Go.", agent={"budget": 3})
    assert route.call_count == 0


def test_the_servers_refusal_of_a_setting_names_its_field(mock):
    mock.post("/v1/jobs").mock(
        return_value=httpx.Response(
            422,
            json={
                "error": "agent.max_steps: must be between 1 and 500",
                "code": "invalid_field",
                "param": "agent.max_steps",
            },
        )
    )
    with Client(BASE) as client:
        with pytest.raises(cc.InvalidField) as raised:
            client.jobs.submit_agent("Go.", max_steps=0)
    assert raised.value.field == "agent.max_steps"


# --- following a run ------------------------------------------------------------------------


def test_run_agent_yields_each_step_by_its_kind_and_returns_the_outcome(mock):
    mock.post("/v1/jobs").mock(return_value=httpx.Response(202, json=ACCEPTED))
    mock.get(f"/v1/jobs/{JOB_ID}/events").mock(
        return_value=httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=EVENTS
        )
    )
    mock.get(f"/v1/jobs/{JOB_ID}").mock(return_value=httpx.Response(200, json=result()))
    seen: list[cc.JobEvent] = []
    with Client(BASE) as client:
        done = client.jobs.run_agent("Write hello.py.", on_progress=seen.append, timeout=60)
    assert [e.event for e in seen] == [
        "queued",
        "agent_step",
        "agent_step",
        "agent_step",
        "finished",
    ]
    steps = [e.data.step for e in seen if isinstance(e.data, models.ProgressAgentStep)]
    start, answer, observation = steps
    assert isinstance(start, cc.AgentStepStart)
    assert start.tools[0].name == "write_file" and start.tools[0].parameters["type"] == "object"
    assert start.model == "scripted/fake"
    assert isinstance(answer, cc.AgentStepModel)
    assert (answer.step, answer.token_ids, answer.problem) == (1, [1, 2, 3], None)
    assert answer.calls[0].parsed_arguments() == {"path": "hello.py", "content": "print(1)\n"}
    assert isinstance(observation, cc.AgentStepObservation)
    assert observation.call_id == "call_0_0_0" and not observation.malformed
    assert observation.cut == models.Cut(total_chars=30000, omitted_chars=20000)

    assert isinstance(done, cc.JobResult) and done.status == "succeeded"
    agent = done.agent
    assert isinstance(agent, cc.AgentOutcome) and agent.finished
    assert (agent.ended_by, agent.answer, agent.session_id) == ("finished", "done", JOB_ID)
    assert agent.files == {"hello.py": "print(1)\n"}
    assert agent.missing == {"notes.txt": "no such file"}
    assert agent.totals.steps == 2 and agent.totals.resumed == 0


def test_a_run_ended_by_a_budget_and_a_pipeline_job_read_as_they_are():
    ended = models.JobResult.model_validate(result("max_steps", "failed"))
    assert ended.agent is not None and not ended.agent.finished
    assert ended.agent.ended_by in models.AGENT_ENDS
    assert (ended.agent.answer, ended.agent.missing) == (None, {})
    assert ended.failure == "the agent's run ended: max_steps"
    pipeline = {k: v for k, v in result().items() if k != "agent"}
    assert models.JobResult.model_validate(pipeline).agent is None


def test_malformed_answers_and_a_step_of_an_unknown_kind_are_read():
    malformed = models.parse_progress(
        {
            "event": "agent_step",
            "step": {
                **MODEL,
                "calls": [{"id": "c1", "tool": "run_shell", "arguments": '{"command": '}],
                "problem": "the arguments of run_shell are not JSON",
                "token_ids": None,
            },
        }
    )
    assert isinstance(malformed, models.ProgressAgentStep)
    step = malformed.step
    assert isinstance(step, cc.AgentStepModel) and step.problem and step.token_ids is None
    with pytest.raises(ValueError):
        step.calls[0].parsed_arguments()
    feedback = {**OBSERVATION, "malformed": True, "error": True}
    del feedback["call_id"], feedback["cut"]
    read = models.parse_progress({"event": "agent_step", "step": feedback})
    assert isinstance(read.step, cc.AgentStepObservation)
    assert read.step.call_id is None and read.step.malformed and read.step.cut is None
    # A newer server's kind: kept, readable, not an error.
    newer = models.parse_progress(
        {"event": "agent_step", "step": {"kind": "plan", "index": 3, "goal": "x"}}
    )
    assert isinstance(newer.step, models.AgentStepOther)
    assert (newer.step.kind, newer.step.goal) == ("plan", "x")


# --- the transcript -------------------------------------------------------------------------


def test_transcript_reads_one_openai_message_a_line(mock):
    route = mock.get(f"/v1/jobs/{JOB_ID}/transcript").mock(
        return_value=httpx.Response(
            200,
            headers={"content-type": "application/x-ndjson"},
            content=jsonl(TRANSCRIPT) + b"\n",
        )
    )
    with Client(BASE) as client:
        messages = client.jobs.transcript(JOB_ID)
    assert messages == TRANSCRIPT
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]
    assert messages[2]["tool_calls"][0]["function"]["name"] == "write_file"
    assert route.calls[0].request.headers["accept"] == "application/x-ndjson"


def test_a_run_with_no_steps_yet_has_an_empty_transcript(mock):
    mock.get(f"/v1/jobs/{JOB_ID}/transcript").mock(
        return_value=httpx.Response(200, headers={"content-type": "application/x-ndjson"})
    )
    with Client(BASE) as client:
        assert client.jobs.transcript(JOB_ID) == []


def test_another_jobs_transcript_is_not_an_agent_job(mock):
    mock.get(f"/v1/jobs/{JOB_ID}/transcript").mock(
        return_value=httpx.Response(
            409,
            json={
                "error": f"job {JOB_ID} is a `generate` job, not an `agent` one",
                "code": "not_an_agent_job",
            },
        )
    )
    with Client(BASE, retry=RetryPolicy(sleep=no_sleep)) as client:
        with pytest.raises(cc.NotAnAgentJob) as raised:
            client.jobs.transcript(JOB_ID)
    assert isinstance(raised.value, cc.Conflict) and raised.value.status == 409


def test_a_job_id_is_one_path_segment_of_the_transcript(mock):
    route = mock.get(url__regex=r".*/transcript$").mock(
        return_value=httpx.Response(200, content=b"")
    )
    with Client(BASE) as client:
        client.jobs.transcript("a/b")
    assert route.calls[0].request.url.raw_path == b"/v1/jobs/a%2Fb/transcript"


# --- the async client -----------------------------------------------------------------------


async def test_the_async_client_submits_follows_and_reads_the_transcript(mock):
    submit = mock.post("/v1/jobs").mock(return_value=httpx.Response(202, json=ACCEPTED))
    mock.get(f"/v1/jobs/{JOB_ID}/events").mock(
        return_value=httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=EVENTS
        )
    )
    mock.get(f"/v1/jobs/{JOB_ID}").mock(return_value=httpx.Response(200, json=result()))
    mock.get(f"/v1/jobs/{JOB_ID}/transcript").mock(
        return_value=httpx.Response(200, content=jsonl(TRANSCRIPT))
    )
    kinds: list[str] = []

    async def on_progress(event: cc.JobEvent) -> None:
        if isinstance(event.data, models.ProgressAgentStep):
            kinds.append(event.data.step.kind)

    async with AsyncClient(BASE, retry=RetryPolicy(async_sleep=no_async_sleep)) as client:
        accepted = await client.jobs.submit_agent("Write hello.py.", files={"a": "b"}, seed=3)
        done = await client.jobs.run_agent("Write hello.py.", on_progress=on_progress)
        messages = await client.jobs.transcript(JOB_ID)
    assert accepted.job_id == JOB_ID
    assert sent(submit, 0) == {
        "instruction": "Write hello.py.",
        "mode": "agent",
        "files": {"a": "b"},
        "agent": {"seed": 3},
    }
    assert kinds == ["start", "model", "observation"]
    assert done.agent is not None and done.agent.finished
    assert messages == TRANSCRIPT
