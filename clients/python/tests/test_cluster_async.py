"""The async client against a REAL coordinator at $CODEGEN_URL (skipped when none is ready)."""

from __future__ import annotations

import asyncio
import os
import time
import uuid

import pytest
from conftest import SIEVE

import codegen_client as cc
from codegen_client import AsyncClient, models

pytestmark = pytest.mark.cluster


async def test_executions_run_concurrently(aclient: AsyncClient):
    views = await asyncio.gather(
        *(aclient.executions.run("python", f"print({i} * {i})") for i in range(5))
    )
    assert [v.stdout for v in views] == [f"{i * i}\n" for i in range(5)]
    assert all(isinstance(v, cc.ExecutionView) and v.passed for v in views)
    again = await aclient.executions.get(views[0].id)
    assert again.stdout == "0\n"


async def test_an_async_streamed_batch(aclient: AsyncClient):
    items = [
        {"id": "slow", "language": "python",
         "code": "import time\ntime.sleep(5)\nprint(repr(time.time()))"},
        {"id": "fast", "language": "bash", "code": "echo fast"},
    ]
    # The slow program says when it ended (the host's clock): the fast one came before.
    seen, arrived = [], []
    async for item in aclient.executions.stream_batch(items):
        seen.append(item)
        arrived.append(time.time())
    assert [s.id for s in seen] == ["fast", "slow"]
    assert {s.index for s in seen} == {0, 1}
    assert arrived[0] < float(seen[1].stdout), (arrived, seen[1].stdout)
    batch = await aclient.executions.submit_batch(items, wait=False)
    assert batch.total == 2
    for result in batch.results:
        view = await aclient.executions.wait(result.execution_id, timeout=60)
        assert view.passed


async def test_an_async_job_with_progress_and_its_listing(aclient: AsyncClient):
    nonce = uuid.uuid4().hex[:12]
    seen: list[str] = []

    async def on_progress(event: cc.JobEvent) -> None:
        seen.append(event.event)

    result = await aclient.jobs.run(
        f"{SIEVE} (async {nonce})", on_progress=on_progress, timeout=300
    )
    assert isinstance(result, cc.JobResult) and result.status == "succeeded"
    assert seen[0] == "queued" and seen[-1] == "finished"
    listed = [job.job_id async for job in _take(aclient.jobs.iter(page_size=5), 50)]
    assert result.job_id in listed
    events = [e async for e in aclient.jobs.events(result.job_id)]
    assert [e.event for e in events] == seen
    with pytest.raises(cc.AlreadyEnded):
        await aclient.jobs.cancel(result.job_id)


async def test_an_async_agent_job_and_its_transcript(aclient: AsyncClient):
    nonce = uuid.uuid4().hex[:12]
    kinds: list[str] = []

    async def on_progress(event: cc.JobEvent) -> None:
        if isinstance(event.data, models.ProgressAgentStep):
            kinds.append(event.data.step.kind)

    result = await aclient.jobs.run_agent(
        f"Write hello.py (async {nonce}).", max_steps=5, on_progress=on_progress, timeout=300
    )
    assert result.agent is not None, result
    if result.agent.ended_by == "failed" and "no answer for phase agent" in (result.failure or ""):
        pytest.skip(f"the cluster's scripted model answers no agent step: {result.failure}")
    assert result.status == "succeeded" and result.agent.finished, result
    assert kinds[0] == "start" and "model" in kinds and kinds[-1] == "observation", kinds
    messages = await aclient.jobs.transcript(result.job_id)
    assert messages[0]["role"] == "system" and messages[-1]["role"] == "tool"


async def test_an_async_batch_of_jobs(aclient: AsyncClient):
    nonce = uuid.uuid4().hex[:12]
    accepted = await aclient.batches.submit(
        [f"{SIEVE} (async batch {nonce} {i})" for i in range(2)]
    )
    view = await aclient.batches.wait(accepted.batch_id, timeout=300)
    assert view.done and sum(view.counts.values()) == 2
    page = await aclient.batches.results(accepted.batch_id, limit=1)
    assert page.total == 2 and page.next_cursor and page.results[0].job_id == accepted.jobs[0]
    results = [job async for job in aclient.batches.iter_results(accepted.batch_id)]
    assert [r.job_id for r in results] == accepted.jobs
    assert all(isinstance(r, cc.JobResult) and r.finished for r in results)
    page = await aclient.batches.list(limit=10)
    assert accepted.batch_id in [b.batch_id for b in page.batches]


async def test_an_async_session(aclient: AsyncClient):
    async with await aclient.sessions.open("python", idle_timeout_s=120) as session:
        assert isinstance(session, cc.AsyncSession)
        await session.run("total = 0")
        for i in range(3):
            await session.run(f"total += {i}")
        assert (await session.run("total")).value == "3"
        await session.upload("notes/a.txt", "héllo")
        assert (
            await session.run("open('notes/a.txt', encoding='utf-8').read()")
        ).value == "'héllo'"
        assert await session.download("notes/a.txt") == "héllo".encode()
        assert "notes/a.txt" in (await session.files()).paths()
    view = await aclient.sessions.get(session.id)
    assert view.state == "ended"


async def test_async_errors_are_typed(aclient: AsyncClient):
    with pytest.raises(cc.NotFound) as raised:
        await aclient.jobs.get(str(uuid.uuid4()))
    assert raised.value.status == 404 and raised.value.request_id
    with pytest.raises(cc.InvalidField) as raised:
        await aclient.sessions.open("python", memory_mb=1)
    assert raised.value.field == "memory_mb"
    with pytest.raises(cc.UnknownLanguage):
        await aclient.executions.submit(models.ExecutionSubmission(language="cobol", code="x"))
    usage = await aclient.usage()
    assert usage.to_ms > usage.from_ms
    assert "python" in (await aclient.languages()).names()


async def test_the_async_cluster_and_usage_per_day(aclient: AsyncClient):
    await aclient.executions.run("bash", "true")  # charged to this day; a worker is live
    usage = await aclient.usage(per="day")
    assert usage.series is not None
    assert sum(p.jobs for p in usage.series) == usage.jobs
    try:
        view = await aclient.cluster()
    except cc.Forbidden:
        assert os.environ.get("CODEGEN_API_KEY"), "an open API answers the cluster to anyone"
        return
    except cc.NotKept as e:
        pytest.skip(f"this coordinator keeps no presence: {e.message}")
    assert isinstance(view, models.ClusterView) and view.workers


async def _take(iterator, n):
    count = 0
    async for item in iterator:
        yield item
        count += 1
        if count >= n:
            return
