"""Retries, Retry-After, Idempotency-Key, auth headers and event-stream resumption, against
respx's mocked httpx transport (no server, no real sleeping)."""

from __future__ import annotations

import json

import httpx
import pytest
import respx

import codegen_client as cc
from codegen_client import AsyncClient, Client, RetryPolicy

BASE = "http://coordinator.test"

JOB_ID = "01a223cc-c559-7349-99f4-12774c2b45b7"
ACCEPTED = {"job_id": JOB_ID, "status": "queued"}
VERDICT = {
    "id": "01a223cc-c2cc-7004-9c62-cb8e1907aba5",
    "status": "passed",
    "exit_code": 0,
    "stdout": "hi\n",
    "stderr": "",
    "truncated": False,
    "duration_ms": 1,
}


def error(status: int, code: str, retry_after: str | None = None, **extra) -> httpx.Response:
    headers = {"retry-after": retry_after} if retry_after is not None else {}
    return httpx.Response(
        status, json={"error": code.replace("_", " "), "code": code, **extra}, headers=headers
    )


class Sleeps(list):
    """Records the waits instead of waiting."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)

    async def asleep(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def client(sleeps):
    with Client(BASE, retry=RetryPolicy(sleep=sleeps, async_sleep=sleeps.asleep)) as c:
        yield c


@pytest.fixture
def mock():
    with respx.mock(base_url=BASE, assert_all_called=False) as router:
        yield router


def test_429_then_503_are_retried_after_retry_after_with_one_idempotency_key(client, mock, sleeps):
    route = mock.post("/v1/jobs").mock(
        side_effect=[
            error(
                429, "rate_limited", "2", limit="coordinator.tenant_defaults.requests_per_second"
            ),
            error(503, "broker_unavailable", "1"),
            httpx.Response(202, json=ACCEPTED),
        ]
    )
    accepted = client.jobs.submit("sum the primes", max_iterations=3)
    assert isinstance(accepted, cc.JobAccepted) and accepted.job_id == JOB_ID
    assert route.call_count == 3
    assert sleeps == [2.0, 1.0]
    keys = {call.request.headers["idempotency-key"] for call in route.calls}
    assert len(keys) == 1, "every retry of one call carries the same key"
    assert json.loads(route.calls[0].request.content) == {
        "instruction": "sum the primes",
        "max_iterations": 3,
    }


def test_each_call_gets_its_own_key_and_a_given_key_is_used(client, mock):
    route = mock.post("/v1/executions").mock(return_value=httpx.Response(200, json=VERDICT))
    client.executions.run("python", "print(1)")
    client.executions.run("python", "print(1)")
    client.executions.run("python", "print(1)", idempotency_key="my-key-1")
    keys = [call.request.headers["idempotency-key"] for call in route.calls]
    assert keys[0] != keys[1] and keys[2] == "my-key-1"


def test_every_creating_route_sends_a_key_and_sessions_do_not(client, mock):
    mock.post("/v1/executions/batch").mock(
        return_value=httpx.Response(200, json={"done": 0, "total": 0, "results": []})
    )
    mock.post("/v1/batches").mock(
        return_value=httpx.Response(202, json={"batch_id": JOB_ID, "jobs": [JOB_ID]})
    )
    session = {
        "id": "s1",
        "language": "python",
        "state": "live",
        "memory_mb": 512,
        "idle_timeout_s": 600,
        "created_ms": 1,
        "last_used_ms": 1,
        "expires_ms": 2,
        "cells": 0,
    }
    mock.post("/v1/sessions").mock(return_value=httpx.Response(201, json=session))
    client.executions.submit_batch([{"language": "bash", "code": "echo hi"}])
    batch = client.batches.submit(["one", {"instruction": "two", "language": "python"}])
    assert batch.batch_id == JOB_ID
    client.sessions.open("python")
    sent = {call.request.url.path: call.request for call in mock.calls}
    assert "idempotency-key" in sent["/v1/executions/batch"].headers
    assert "idempotency-key" in sent["/v1/batches"].headers
    assert sent["/v1/batches"].headers["content-type"] == "application/x-ndjson"
    lines = sent["/v1/batches"].content.decode().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"instruction": "one"},
        {"instruction": "two", "language": "python"},
    ]
    assert "idempotency-key" not in sent["/v1/sessions"].headers


def test_attempts_are_bounded(mock, sleeps):
    route = mock.get(f"/v1/jobs/{JOB_ID}").mock(return_value=error(503, "store_unavailable", "1"))
    with Client(BASE, retry=RetryPolicy(max_attempts=3, sleep=sleeps)) as client:
        with pytest.raises(cc.StoreUnavailable) as raised:
            client.jobs.get(JOB_ID)
    assert route.call_count == 3 and sleeps == [1.0, 1.0]
    assert raised.value.retry_after == 1.0 and raised.value.status == 503


def test_a_wait_longer_than_max_wait_is_not_slept_through(client, mock, sleeps):
    route = mock.post("/v1/jobs").mock(
        return_value=error(
            429, "quota_exceeded", "3600", limit="coordinator.tenants.acme.model_tokens_per_period"
        )
    )
    with pytest.raises(cc.QuotaExceeded) as raised:
        client.jobs.submit("x")
    assert route.call_count == 1 and sleeps == []
    assert raised.value.retry_after == 3600.0
    assert raised.value.limit == "coordinator.tenants.acme.model_tokens_per_period"


def test_session_restored_is_never_sent_again(client, mock, sleeps):
    route = mock.post("/v1/sessions/s1/run").mock(return_value=error(503, "session_restored", "1"))
    with pytest.raises(cc.SessionRestored):
        client.sessions.run("s1", "x += 1")
    assert route.call_count == 1 and sleeps == []


def test_idempotency_in_progress_is_retried_without_retry_after(client, mock, sleeps):
    route = mock.post("/v1/executions").mock(
        side_effect=[error(409, "idempotency_in_progress"), httpx.Response(200, json=VERDICT)]
    )
    assert client.executions.run("python", "print(1)").passed
    assert route.call_count == 2 and len(sleeps) == 1 and 0 < sleeps[0] <= 0.5


def test_client_errors_are_not_retried(client, mock):
    route = mock.post("/v1/executions").mock(
        return_value=error(422, "invalid_field", param="timeout_ms")
    )
    with pytest.raises(cc.InvalidField) as raised:
        client.executions.run("python", "1", timeout_ms=0)
    assert raised.value.field == "timeout_ms" and route.call_count == 1


def test_transport_failures_are_retried_only_when_safe(client, mock, sleeps):
    # A connection that could not be made: nothing was sent, any request may go again.
    opened = mock.post("/v1/sessions/s1/run").mock(
        side_effect=[httpx.ConnectError("refused"), httpx.ReadTimeout("slow")]
    )
    with pytest.raises(cc.TransportError):
        client.sessions.run("s1", "x += 1")  # the read timeout is not retried: it may have run
    assert opened.call_count == 2
    # A POST with an Idempotency-Key is safe to send again after any failure.
    keyed = mock.post("/v1/jobs").mock(
        side_effect=[httpx.ReadTimeout("slow"), httpx.Response(202, json=ACCEPTED)]
    )
    assert client.jobs.submit("x").job_id == JOB_ID
    assert keyed.call_count == 2
    assert (
        keyed.calls[0].request.headers["idempotency-key"]
        == keyed.calls[1].request.headers["idempotency-key"]
    )


def test_key_and_url_come_from_the_environment(monkeypatch, mock):
    monkeypatch.setenv("CODEGEN_URL", BASE + "/")
    monkeypatch.setenv("CODEGEN_API_KEY", "sekrit")
    route = mock.get("/v1/languages").mock(return_value=httpx.Response(200, json={"languages": []}))
    with Client() as client:
        assert client.base_url == BASE
        client.languages()
    assert route.calls[0].request.headers["authorization"] == "Bearer sekrit"
    with Client(api_key="other") as client:
        client.languages()
    assert route.calls[1].request.headers["authorization"] == "Bearer other"


async def test_the_async_client_retries_the_same_way(mock, sleeps):
    route = mock.post("/v1/executions").mock(
        side_effect=[error(429, "rate_limited", "3"), httpx.Response(200, json=VERDICT)]
    )
    async with AsyncClient(
        BASE, retry=RetryPolicy(sleep=sleeps, async_sleep=sleeps.asleep)
    ) as client:
        view = await client.executions.run("python", "print(1)")
    assert view.stdout == "hi\n" and sleeps == [3.0]
    assert len({c.request.headers["idempotency-key"] for c in route.calls}) == 1


# --- event streams ---------------------------------------------------------------------


def sse(event_id: str, name: str, data: dict) -> bytes:
    return (
        f"id: {event_id}\nevent: {name}\ndata: {json.dumps({'event': name, **data})}\n\n".encode()
    )


EVENTS = [
    sse("1-0", "queued", {"job_id": JOB_ID}),
    sse("2-0", "planning", {}),
    sse("3-0", "planned", {"functions": ["f"]}),
    sse(
        "4-0",
        "finished",
        {"status": "succeeded", "all_tests_passed": True, "validation": "tested", "cache": "miss"},
    ),
]


class Breaks(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A body that sends ``chunks`` and then fails as a dropped connection does."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def __iter__(self):
        yield from self.chunks
        raise httpx.ReadError("connection reset by peer")

    async def __aiter__(self):
        for chunk in self.chunks:
            yield chunk
        raise httpx.ReadError("connection reset by peer")


def events_answers():
    """First the stream breaks after two events and half of the third; then it resumes."""
    half = EVENTS[2][: len(EVENTS[2]) // 2]
    return [
        httpx.Response(
            200,
            headers={"content-type": "text/event-stream"},
            stream=Breaks([EVENTS[0], EVENTS[1], half]),
        ),
        httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=b"".join(EVENTS[2:])
        ),
    ]


def test_a_broken_event_stream_resumes_after_the_last_event(client, mock, sleeps):
    route = mock.get(f"/v1/jobs/{JOB_ID}/events").mock(side_effect=events_answers())
    events = list(client.jobs.events(JOB_ID))
    assert [e.id for e in events] == ["1-0", "2-0", "3-0", "4-0"]
    assert [e.event for e in events] == ["queued", "planning", "planned", "finished"]
    assert isinstance(events[2].data, cc.models.ProgressPlanned) and events[2].data.functions == [
        "f"
    ]
    assert (
        isinstance(events[3].data, cc.models.ProgressFinished)
        and events[3].data.status == "succeeded"
    )
    assert "last-event-id" not in route.calls[0].request.headers
    assert route.calls[1].request.headers["last-event-id"] == "2-0"
    assert len(sleeps) == 1


def test_a_stream_that_keeps_breaking_is_given_up(client, mock):
    mock.get(f"/v1/jobs/{JOB_ID}/events").mock(
        side_effect=lambda request: httpx.Response(
            200, headers={"content-type": "text/event-stream"}, stream=Breaks([])
        )
    )
    with pytest.raises(cc.TransportError):
        list(client.jobs.events(JOB_ID, max_reconnects=2))


async def test_the_async_stream_resumes_too(mock, sleeps):
    route = mock.get(f"/v1/jobs/{JOB_ID}/events").mock(side_effect=events_answers())
    async with AsyncClient(
        BASE, retry=RetryPolicy(sleep=sleeps, async_sleep=sleeps.asleep)
    ) as client:
        events = [e async for e in client.jobs.events(JOB_ID)]
    assert [e.id for e in events] == ["1-0", "2-0", "3-0", "4-0"]
    assert route.calls[1].request.headers["last-event-id"] == "2-0"


def test_an_events_error_answer_is_typed(client, mock):
    mock.get(f"/v1/jobs/{JOB_ID}/events").mock(return_value=error(404, "not_found"))
    with pytest.raises(cc.NotFound):
        list(client.jobs.events(JOB_ID))


# --- following what a stream or an event stream left unfinished --------------------------


def test_items_a_streamed_batch_ended_without_are_polled(client, mock, sleeps):
    done = {**VERDICT, "index": 1, "id": "fast", "execution_id": VERDICT["id"]}
    queued = {"index": 0, "id": "slow", "execution_id": JOB_ID, "status": "queued"}
    body = (json.dumps(done) + "\n" + json.dumps(queued) + "\n").encode()
    posted = mock.post("/v1/executions/batch").mock(
        return_value=httpx.Response(
            200, content=body, headers={"content-type": "application/x-ndjson"}
        )
    )
    polled = mock.get(f"/v1/executions/{JOB_ID}").mock(
        side_effect=[
            httpx.Response(200, json={"id": JOB_ID, "status": "queued"}),
            httpx.Response(200, json={**VERDICT, "id": JOB_ID, "stdout": "slow\n"}),
        ]
    )
    items = [
        {"id": "slow", "language": "python", "code": "..."},
        {"id": "fast", "language": "bash", "code": "..."},
    ]
    seen = list(client.executions.stream_batch(items))
    assert posted.calls[0].request.url.params["stream"] == "true"
    assert [(s.index, s.id, s.status, s.stdout) for s in seen] == [
        (1, "fast", "passed", "hi\n"),
        (0, "slow", "passed", "slow\n"),
    ]
    assert seen[1].execution_id == JOB_ID and polled.call_count == 2 and len(sleeps) == 1
    mock.post("/v1/executions/batch").mock(
        return_value=httpx.Response(
            200, content=body, headers={"content-type": "application/x-ndjson"}
        )
    )
    unfollowed = list(client.executions.stream_batch(items, follow=False))
    assert [s.status for s in unfollowed] == ["passed", "queued"]


def test_a_job_whose_stream_ends_without_finished_is_fetched(client, mock):
    mock.get(f"/v1/jobs/{JOB_ID}/events").mock(
        return_value=httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=EVENTS[0]
        )
    )
    result = {
        "job_id": JOB_ID,
        "status": "failed",
        "instruction": "x",
        "language": "python",
        "function_specs": [],
        "implementations": {},
        "tests": {},
        "test_results": [],
        "all_tests_passed": False,
        "improvement_history": [],
        "documentation": "",
        "quality": {
            "score": 0,
            "tests_passed": 0,
            "tests_total": 0,
            "coverage": 0,
            "complexity": {},
            "docstrings": 0,
            "dangerous_calls": [],
        },
        "metrics": {
            "generation_ms": 0,
            "execution_ms": 0,
            "total_ms": 1,
            "model_calls": 0,
            "tokens": {"prompt": 0, "completion": 0},
            "cache": "miss",
        },
        "failure": "deadline exceeded",
        "validation": "none",
        "manual_review_recommended": True,
    }
    mock.get(f"/v1/jobs/{JOB_ID}").mock(return_value=httpx.Response(200, json=result))
    seen = []
    job = client.jobs.wait(JOB_ID, on_progress=seen.append)
    assert isinstance(job, cc.JobResult) and job.failure == "deadline exceeded"
    assert [e.event for e in seen] == ["queued"]
