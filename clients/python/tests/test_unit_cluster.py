"""``client.cluster()`` (``GET /v1/cluster``), ``client.usage(per=...)`` and the progress
events' ``worker`` and ``dependencies``, against respx's mocked httpx transport, with both
clients."""

from __future__ import annotations

import httpx
import pytest
import respx

import codegen_client as cc
from codegen_client import AsyncClient, Client, RetryPolicy, models

BASE = "http://coordinator.test"

STATUS = {
    "started_ms": 1_700_000_000_000,
    "at_ms": 1_700_000_060_000,
    "in_flight": 2,
    "sessions": 1,
    "pools": [{"language": "python", "size": 2, "idle": 1, "live": 2, "waiting": 0}],
    "model": {
        "provider": "openai",
        "model": "scripted/fake",
        "limit": 8,
        "in_flight": 1,
        "calls": {"ok": 40, "retryable": 2},
    },
    "tasks": {"completed": 12, "requeued": 1},
    "sandbox_runs": {"success": 30, "timeout": 1},
}
CLUSTER = {
    "at_ms": 1_700_000_061_000,
    "workers": [
        {"name": "worker-a", "generates": True, "status": STATUS},
        {"name": "worker-old", "generates": False},
    ],
    "queues": [{"name": "tasks", "ready": 3, "consumers": 2}],
}
TOTALS = {
    "jobs": 1,
    "executions": 4,
    "model_calls": 6,
    "prompt_tokens": 100,
    "completion_tokens": 50,
    "sandbox_ms": 900,
    "sandbox_cpu_ms": 300,
}


@pytest.fixture
def mock():
    with respx.mock(base_url=BASE, assert_all_called=False) as router:
        yield router


def no_sleep(seconds: float) -> None:
    return None


def check_cluster(view: models.ClusterView) -> None:
    assert isinstance(view, cc.ClusterView) and view.at_ms == CLUSTER["at_ms"]
    busy, old = view.workers
    assert busy.name == "worker-a" and busy.generates and old.status is None
    status = busy.status
    assert isinstance(status, cc.WorkerStatus) and status.unable is None
    assert status.pools == [cc.PoolStatus(language="python", size=2, idle=1, live=2, waiting=0)]
    assert isinstance(status.model, cc.ModelStatus) and status.model.limit == 8
    assert status.model.calls == {"ok": 40, "retryable": 2}
    assert status.tasks["completed"] == 12 and status.sandbox_runs["timeout"] == 1
    assert view.queues == [cc.QueueView(name="tasks", ready=3, consumers=2)]
    assert view.queues_error is None


def test_cluster_reads_the_workers_and_the_queues(mock):
    route = mock.get("/v1/cluster").mock(return_value=httpx.Response(200, json=CLUSTER))
    with Client(BASE) as client:
        check_cluster(client.cluster())
    assert route.calls[0].request.method == "GET"


def test_a_worker_status_may_say_little_and_the_broker_may_not_answer(mock):
    bare = {"started_ms": 1, "at_ms": 2, "in_flight": 0, "sessions": 0, "unable": "no model"}
    mock.get("/v1/cluster").mock(
        return_value=httpx.Response(
            200,
            json={
                "at_ms": 3,
                "workers": [{"name": "w", "generates": False, "status": bare}],
                "queues": [],
                "queues_error": "broker down",
            },
        )
    )
    with Client(BASE) as client:
        view = client.cluster()
    status = view.workers[0].status
    assert status is not None and status.unable == "no model" and status.model is None
    assert status.pools == [] and status.tasks == {} and status.sandbox_runs == {}
    assert view.queues == [] and view.queues_error == "broker down"


def test_cluster_is_forbidden_to_a_tenant_not_an_admin(mock):
    mock.get("/v1/cluster").mock(
        return_value=httpx.Response(
            403,
            json={"error": "the cluster's page is for admins", "code": "forbidden"},
        )
    )
    with (
        Client(BASE, retry=RetryPolicy(sleep=no_sleep)) as client,
        pytest.raises(cc.Forbidden) as raised,
    ):
        client.cluster()
    assert raised.value.status == 403 and raised.value.code == "forbidden"


async def test_the_async_cluster(mock):
    mock.get("/v1/cluster").mock(return_value=httpx.Response(200, json=CLUSTER))
    async with AsyncClient(BASE) as client:
        check_cluster(await client.cluster())


USAGE = {
    "from_ms": 1_700_000_000_000,
    "to_ms": 1_700_172_800_000,
    **TOTALS,
    "series": [
        {"from_ms": 1_699_920_000_000, **TOTALS},
        {"from_ms": 1_700_006_400_000, **TOTALS, "jobs": 0},
    ],
}


def test_usage_per_day_sends_per_and_reads_the_series(mock):
    route = mock.get("/v1/usage").mock(return_value=httpx.Response(200, json=USAGE))
    with Client(BASE) as client:
        usage = client.usage("2023-11-14T22:00:00Z", per="day")
        plain = client.usage()
    assert dict(route.calls[0].request.url.params) == {"from": "2023-11-14T22:00:00Z", "per": "day"}
    assert "per" not in route.calls[1].request.url.params
    assert usage.series is not None and len(usage.series) == 2
    first = usage.series[0]
    assert isinstance(first, cc.UsagePeriod) and first.from_ms == 1_699_920_000_000
    assert first.sandbox_cpu_ms == 300 and usage.series[1].jobs == 0
    assert plain.jobs == usage.jobs
    without = models.Usage.model_validate({k: v for k, v in USAGE.items() if k != "series"})
    assert without.series is None


async def test_the_async_usage_per_hour(mock):
    route = mock.get("/v1/usage").mock(return_value=httpx.Response(200, json=USAGE))
    async with AsyncClient(BASE) as client:
        usage = await client.usage(per="hour", tenant="acme")
    assert dict(route.calls[0].request.url.params) == {"per": "hour", "tenant": "acme"}
    assert usage.series and usage.series[0].executions == 4


def test_progress_events_name_their_worker_and_the_plans_dependencies():
    planned = models.parse_progress(
        {
            "event": "planned",
            "functions": ["sieve", "sum_primes"],
            "dependencies": {"sum_primes": ["sieve"]},
        }
    )
    assert isinstance(planned, models.ProgressPlanned)
    assert planned.dependencies == {"sum_primes": ["sieve"]}
    bare = models.parse_progress({"event": "planned", "functions": ["sieve"]})
    assert isinstance(bare, models.ProgressPlanned) and bare.dependencies == {}
    started = models.parse_progress(
        {"event": "function_started", "function": "sieve", "worker": "worker-a"}
    )
    assert isinstance(started, models.ProgressFunctionStarted) and started.worker == "worker-a"
    attempt = models.parse_progress(
        {"event": "attempt", "function": "sieve", "attempt": 1, "passed": True, "worker": "w"}
    )
    assert isinstance(attempt, models.ProgressAttempt) and attempt.worker == "w"
    older = models.parse_progress({"event": "function_started", "function": "sieve"})
    assert isinstance(older, models.ProgressFunctionStarted) and older.worker is None
