"""The sync client against a REAL coordinator at $CODEGEN_URL (skipped when none is ready).

Generation jobs are answered by the cluster's scripted FAKE model (examples/scripted-model.json:
its sieve plan answers every instruction it has no better entry for). Each job's instruction
carries a nonce, so no test is answered from another run's solution cache.
"""

from __future__ import annotations

import itertools
import os
import time
import uuid

import httpx
import pytest
from conftest import SIEVE, URL

import codegen_client as cc
from codegen_client import Client, models

pytestmark = pytest.mark.cluster


def unique_job(nonce: str) -> str:
    return f"{SIEVE} (client test {nonce})"


# --- executions ------------------------------------------------------------------------


def test_an_execution_answers_its_output(client: Client):
    view = client.executions.run(
        "python", "import sys\nprint(input() * 2)\nprint('e', file=sys.stderr)", stdin="hi"
    )
    assert isinstance(view, cc.ExecutionView)
    assert view.passed and view.exit_code == 0
    assert view.stdout == "hihi\n" and view.stderr == "e\n"
    assert view.duration_ms is not None and view.duration_ms >= 0
    again = client.executions.get(view.id)
    assert again.id == view.id and again.stdout == "hihi\n"


def test_a_failing_test_and_files_come_back(client: Client):
    failed = client.executions.run("python", "def f():\n    return 1\n", test="assert f() == 2")
    assert failed.status == "failed" and failed.error_kind == "assertion"
    view = client.executions.run(
        "python",
        "data = open('in.bin', 'rb').read()\nopen('out.bin', 'wb').write(data[::-1])\nprint(open('note.txt').read())",
        files={"in.bin": cc.FileBytes.of(b"\x00\x01\xff"), "note.txt": "plain text"},
        return_files=["out.bin", "missing.txt"],
    )
    assert view.passed, view
    assert view.stdout == "plain text\n"
    assert view.file("out.bin") == b"\xff\x01\x00"
    assert "missing.txt" in (view.file_errors or {})


def test_an_execution_submitted_without_waiting_is_waited_for(client: Client):
    queued = client.executions.submit(
        models.ExecutionSubmission(language="bash", code="sleep 0.3; echo done"), wait=False
    )
    assert queued.status == "queued" and not queued.done
    view = client.executions.wait(queued.id, timeout=60)
    assert view.passed and view.stdout == "done\n"


def test_an_execution_batch_answers_every_item_in_input_order(client: Client):
    batch = client.executions.submit_batch(
        [
            {"id": "first", "language": "python", "code": "print(1)"},
            models.ExecutionBatchItem(language="bash", code="echo two"),
            models.ExecutionSubmission(language="javascript", code="console.log(3)"),
        ]
    )
    assert batch.total == 3 and batch.done == 3
    assert [r.status for r in batch.results] == ["passed"] * 3
    assert [r.stdout for r in batch.results] == ["1\n", "two\n", "3\n"]
    assert batch.results[0].id == "first"
    assert batch.results[1].id == batch.results[1].execution_id  # no label: its execution id
    assert client.executions.get(batch.results[2].execution_id).stdout == "3\n"


def test_a_streamed_batch_yields_each_result_as_it_finishes(client: Client):
    # The slow program says when it ended (the sandbox shares the host's clock): the fast one
    # must have been yielded before that, however fast or slow the machine.
    slow = "import time\ntime.sleep(5)\nprint(repr(time.time()))"
    items = [
        {"id": "slow", "language": "python", "code": slow},
        {"id": "fast", "language": "bash", "code": "echo fast"},
    ]
    seen = []
    for item in client.executions.stream_batch(items):
        seen.append((item.id, item.index, time.time(), item.stdout))
        assert isinstance(item, models.StreamedItemView) and item.passed
    assert [s[0] for s in seen] == ["fast", "slow"], seen  # completion order
    assert sorted(s[1] for s in seen) == [0, 1]
    assert seen[0][3] == "fast\n"
    slow_ended = float(seen[1][3])
    assert seen[0][2] < slow_ended, f"the fast one came before the slow one ended: {seen}"


def test_listing_executions_by_pages(client: Client):
    ours = [client.executions.run("bash", f"echo {i}").id for i in range(3)]
    first = client.executions.list(limit=2)
    assert len(first.executions) == 2 and first.next_cursor
    second = client.executions.list(limit=2, cursor=first.next_cursor)
    ids = [e.id for e in first.executions + second.executions]
    assert len(ids) == len(set(ids)), "pages neither skip nor repeat"
    times = [e.submitted_at_ms for e in first.executions + second.executions]
    assert times == sorted(times, reverse=True), "newest first"
    listed = []
    for summary in client.executions.iter(page_size=2):
        listed.append(summary.id)
        if set(ours) <= set(listed):
            break
    assert set(ours) <= set(listed)
    passed = client.executions.list(status="passed", limit=5)
    assert all(e.status == "passed" for e in passed.executions)


# --- jobs --------------------------------------------------------------------------------


def test_a_job_is_waited_for_with_progress_from_its_event_stream(client: Client, nonce):
    accepted = client.jobs.submit(unique_job(nonce), language="python", max_iterations=3)
    assert isinstance(accepted, cc.JobAccepted) and accepted.status == "queued"
    events: list[cc.JobEvent] = []
    result = client.jobs.wait(accepted.job_id, on_progress=events.append, timeout=300)
    assert isinstance(result, cc.JobResult)
    assert result.job_id == accepted.job_id and result.status == "succeeded"
    assert result.all_tests_passed and result.validation == "tested"
    assert set(result.implementations) == {"sieve", "sum_primes"}
    names = [e.event for e in events]
    assert names[0] == "queued" and names[-1] == "finished"
    assert "planned" in names and "function_done" in names
    assert all(e.id for e in events) and len({e.id for e in events}) == len(events)
    finished = events[-1].data
    assert isinstance(finished, models.ProgressFinished) and finished.status == "succeeded"
    planned = next(e.data for e in events if e.event == "planned")
    assert isinstance(planned, models.ProgressPlanned) and planned.functions == [
        "sieve",
        "sum_primes",
    ]
    # The stream replays from the start, and from just after any event it gave.
    replay = list(client.jobs.events(accepted.job_id))
    assert [e.id for e in replay] == [e.id for e in events]
    after = list(client.jobs.events(accepted.job_id, last_event_id=events[1].id))
    assert [e.id for e in after] == [e.id for e in events[2:]]
    # GET answers the result now.
    fetched = client.jobs.get(accepted.job_id)
    assert isinstance(fetched, cc.JobResult) and fetched.status == "succeeded"


class CutFirstEventStream(httpx.HTTPTransport):
    """The real transport, except that the first event stream breaks after its first event
    (what a dropped connection does): the client must resume with Last-Event-ID."""

    def __init__(self) -> None:
        super().__init__()
        self.event_requests: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if not request.url.path.endswith("/events"):
            return response
        self.event_requests.append(request)
        if len(self.event_requests) > 1:
            return response
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_CutAfterFirstEvent(response.stream),
            extensions=response.extensions,
        )


class _CutAfterFirstEvent(httpx.SyncByteStream):
    def __init__(self, inner) -> None:
        self.inner = inner

    def __iter__(self):
        buffered = b""
        for chunk in self.inner:
            buffered += chunk
            end = buffered.find(b"\n\n")
            if end >= 0:
                yield buffered[: end + 2]
                break
        self.inner.close()
        raise httpx.ReadError("connection cut by the test after the first event")

    def close(self) -> None:
        self.inner.close()


def test_a_broken_event_stream_resumes_with_last_event_id(nonce):
    transport = CutFirstEventStream()
    with Client(URL, transport=transport) as client:
        accepted = client.jobs.submit(unique_job(nonce))
        events = list(client.jobs.events(accepted.job_id))
        uncut = list(client.jobs.events(accepted.job_id))
    assert events[-1].event == "finished"
    assert [e.id for e in events] == [e.id for e in uncut[: len(events)]], (
        "nothing lost, nothing twice"
    )
    assert len(transport.event_requests) >= 3
    assert "last-event-id" not in transport.event_requests[0].headers
    assert transport.event_requests[1].headers["last-event-id"] == events[0].id


def test_a_repeated_job_may_be_answered_from_the_solution_cache(client: Client, nonce):
    first = client.jobs.run(unique_job(nonce), timeout=300)
    assert first.status == "succeeded" and first.metrics.cache == "miss"
    again = client.jobs.submit(unique_job(nonce))  # a new job of the same request
    if isinstance(again, cc.JobAccepted):  # caching is off on this cluster
        assert client.jobs.wait(again.job_id, timeout=300).status == "succeeded"
        return
    assert isinstance(again, cc.JobResult) and again.job_id != first.job_id
    assert again.metrics.cache == "hit" and again.implementations == first.implementations


def test_cancelling_a_job(client: Client, nonce):
    accepted = client.jobs.submit(unique_job(nonce))
    try:
        cancelled = client.jobs.cancel(accepted.job_id)
    except cc.AlreadyEnded as e:  # the FAKE model is fast: the job may have ended already
        assert e.status == 409 and e.code == "already_ended"
        pytest.skip(f"the job ended before its cancel arrived: {e.message}")
    assert isinstance(cancelled, cc.JobResult) and cancelled.status == "cancelled"
    assert cancelled.failure and "cancel" in cancelled.failure
    again = client.jobs.cancel(accepted.job_id)  # cancelling again answers it again
    assert again.status == "cancelled"
    events = list(client.jobs.events(accepted.job_id))
    assert events[-1].event == "finished" and events[-1].data.status == "cancelled"


def test_cancelling_an_ended_job_is_already_ended(client: Client, nonce):
    result = client.jobs.run(unique_job(nonce), timeout=300)
    assert result.status == "succeeded"
    with pytest.raises(cc.AlreadyEnded) as raised:
        client.jobs.cancel(result.job_id)
    assert raised.value.status == 409 and isinstance(raised.value, cc.Conflict)


def ordered_subsequence(listed: list[str], ours: list[str]) -> list[str]:
    """``ours`` as they appear in ``listed`` (others may share the cluster and list between)."""
    return [item for item in listed if item in ours]


def test_listing_jobs_by_pages(client: Client, nonce):
    ids = [client.jobs.submit(f"{unique_job(nonce)} #{i}").job_id for i in range(3)]
    page = client.jobs.list(limit=2)
    assert len(page.jobs) == 2 and page.next_cursor
    rest = client.jobs.list(limit=2, cursor=page.next_cursor)
    both = [j.job_id for j in page.jobs + rest.jobs]
    assert len(both) == len(set(both)), "pages neither skip nor repeat"
    times = [j.submitted_at_ms for j in page.jobs + rest.jobs]
    assert times == sorted(times, reverse=True), "newest first"
    seen = []
    for job in client.jobs.iter(page_size=1):
        seen.append(job.job_id)
        if set(ids) <= set(seen) or len(seen) > 200:
            break
    assert ordered_subsequence(seen, ids) == ids[::-1]
    assert len(seen) == len(set(seen))
    mine = next(j for j in client.jobs.list(limit=20).jobs if j.job_id == ids[0])
    assert nonce in mine.instruction and mine.language == "python"
    for job_id in ids:
        client.jobs.wait(job_id, timeout=300)
    assert all(j.status == "succeeded" for j in client.jobs.list(status="succeeded", limit=5).jobs)


# --- batches -----------------------------------------------------------------------------


def test_a_batch_of_jobs(client: Client, nonce):
    accepted = client.batches.submit(
        [
            unique_job(nonce + "-a"),
            models.JobSubmission(instruction=unique_job(nonce + "-b"), language="python"),
            {"instruction": unique_job(nonce + "-c"), "max_iterations": 3},
        ]
    )
    assert isinstance(accepted, cc.BatchAccepted) and len(accepted.jobs) == 3
    updates: list[cc.BatchView] = []
    done = client.batches.wait(accepted.batch_id, on_update=updates.append, timeout=300)
    assert done.done and done.status == "done"
    assert [j.job_id for j in done.jobs] == accepted.jobs
    assert done.counts == {"succeeded": 3}
    assert updates[-1] is done
    for job_id in accepted.jobs:
        assert client.jobs.get(job_id).status == "succeeded"
    # Its results, page by page in input order, each as GET /v1/jobs/{id} answers it.
    first = client.batches.results(accepted.batch_id, limit=2)
    assert isinstance(first, cc.BatchResults)
    assert first.batch_id == accepted.batch_id and first.total == 3
    assert [r.job_id for r in first.results] == accepted.jobs[:2] and first.next_cursor
    last = client.batches.results(accepted.batch_id, cursor=first.next_cursor, limit=2)
    assert [r.job_id for r in last.results] == accepted.jobs[2:] and last.next_cursor is None
    results = list(client.batches.iter_results(accepted.batch_id, page_size=1))
    assert [r.job_id for r in results] == accepted.jobs
    assert all(isinstance(r, cc.JobResult) and r.status == "succeeded" for r in results)
    fetched = client.jobs.get(accepted.jobs[1])
    assert results[1].model_dump() == fetched.model_dump()
    whole = client.batches.results(accepted.batch_id)  # the default page holds all three
    assert [r.job_id for r in whole.results] == accepted.jobs and whole.next_cursor is None
    listed = client.batches.list(limit=5)
    assert accepted.batch_id in [b.batch_id for b in listed.batches]
    summary = next(b for b in listed.batches if b.batch_id == accepted.batch_id)
    assert summary.jobs == 3 and summary.status == "done"
    # Cancelling a batch that ended cancels nothing: the jobs keep their results.
    assert client.batches.cancel(accepted.batch_id).counts == {"succeeded": 3}


def test_batch_results_refuse_a_bad_page(client: Client, nonce):
    accepted = client.batches.submit([unique_job(nonce)])
    with pytest.raises(cc.InvalidField) as raised:
        client.batches.results(accepted.batch_id, limit=201)
    assert raised.value.status == 422 and raised.value.field == "limit"
    with pytest.raises(cc.InvalidField) as raised:
        client.batches.results(accepted.batch_id, limit=0)
    assert raised.value.field == "limit"
    # A cursor past its one job is an empty last page.
    past = client.batches.results(accepted.batch_id, cursor="2")
    assert (past.total, past.results, past.next_cursor) == (1, [], None)
    with pytest.raises(cc.NotFound):
        client.batches.results(str(uuid.uuid4()))
    with pytest.raises(cc.InvalidId):
        client.batches.results("not-a-batch")
    # Once the job ended, its entry is its result.
    client.batches.wait(accepted.batch_id, timeout=300)
    (job,) = client.batches.iter_results(accepted.batch_id)
    assert isinstance(job, cc.JobResult) and job.job_id == accepted.jobs[0]


def test_cancelling_a_batch(client: Client, nonce):
    accepted = client.batches.submit([unique_job(f"{nonce}-{i}") for i in range(4)])
    view = client.batches.cancel(accepted.batch_id)
    assert view.done, view
    assert set(view.counts) <= {"cancelled", "succeeded", "failed"}
    assert sum(view.counts.values()) == 4
    assert client.batches.get(accepted.batch_id).counts == view.counts


def test_listing_batches_by_pages(client: Client, nonce):
    ids = [client.batches.submit([unique_job(f"{nonce}-{i}")]).batch_id for i in range(3)]
    page = client.batches.list(limit=2)
    assert len(page.batches) == 2 and page.next_cursor
    seen = [b.batch_id for b in itertools.islice(client.batches.iter(page_size=2), 200)]
    assert ordered_subsequence(seen, ids) == ids[::-1]
    assert len(seen) == len(set(seen))
    for batch_id in ids:
        client.batches.wait(batch_id, timeout=300)
    assert all(b.status == "done" for b in client.batches.list(status="done", limit=5).batches)


# --- sessions ----------------------------------------------------------------------------


def test_a_session_keeps_its_state_and_its_files(client: Client):
    with client.sessions.open("python", idle_timeout_s=120) as session:
        assert isinstance(session, cc.Session) and session.view.state == "live"
        first = session.run("import json\nx = 41")
        assert first.ok and first.value is None
        second = session.run("x + 1")
        assert second.ok and second.value == "42"
        broken = session.run("1 / 0")
        assert (
            broken.status == "error" and broken.error and broken.error.type == "ZeroDivisionError"
        )
        assert session.run("x").value == "41", "an error does not end the session"

        payload = bytes(range(256)) * 4
        session.upload("data/in.bin", payload)
        cell = session.run(
            "d = open('data/in.bin', 'rb').read()\n"
            "open('out.json', 'w').write(json.dumps({'n': len(d), 'x': x}))\n"
            "len(d)"
        )
        assert cell.ok and cell.value == "1024"
        assert "out.json" in cell.files_changed
        assert session.download("data/in.bin") == payload
        assert session.download("out.json") == b'{"n": 1024, "x": 41}'
        files = session.files()
        assert {"data/in.bin", "out.json"} <= set(files.paths())
        assert next(f for f in files.files if f.path == "data/in.bin").size == 1024
        with pytest.raises(cc.CodegenError) as missing:
            session.download("no/such/file")
        assert missing.value.status in (404, 422)

        view = session.refresh()
        assert view.cells >= 5
        assert session.id in [s.id for s in client.sessions.list().sessions]
    ended = client.sessions.get(session.id)
    assert ended.state == "ended" and ended.ended_reason
    with pytest.raises(cc.SessionEnded) as raised:
        client.sessions.run(session.id, "x")
    assert raised.value.status == 409


# --- agent jobs --------------------------------------------------------------------------


def agent_scripted_or_skip(result: cc.JobResult) -> None:
    """Skips when the cluster's scripted model has no agent answers (a script without
    ``"phase": "agent"`` entries): the run then fails at its first model call."""
    assert result.agent is not None, result
    if result.agent.ended_by == "failed" and "no answer for phase agent" in (result.failure or ""):
        pytest.skip(f"the cluster's scripted model answers no agent step: {result.failure}")


def test_an_agent_job_runs_its_steps_to_finish_and_has_a_transcript(client: Client, nonce):
    # examples/scripted-model.json answers agent steps in order, the last one repeating: the
    # first agent job a worker runs writes hello.py and finishes, the next ones only finish
    # (hello.py then `missing`). So the run is asserted on, not on its files.
    events: list[cc.JobEvent] = []
    result = client.jobs.run_agent(
        f"Write hello.py, which prints hello (client test {nonce}).",
        language="python",
        files={"data/numbers.txt": "1 2 3\n"},
        max_steps=5,
        seed=7,
        temperature=0.0,
        on_progress=events.append,
        timeout=300,
    )
    agent_scripted_or_skip(result)
    assert isinstance(result, cc.JobResult) and result.status == "succeeded", result
    agent = result.agent
    assert isinstance(agent, cc.AgentOutcome) and agent.finished and agent.answer == "done"
    assert set(agent.files) | set(agent.missing) == {"hello.py"}, agent
    assert agent.totals.steps >= 1 and agent.totals.tool_calls >= 1 and agent.session_id
    names = [e.event for e in events]
    assert names[0] == "queued" and names[-1] == "finished", names
    steps = [e.data.step for e in events if isinstance(e.data, models.ProgressAgentStep)]
    assert isinstance(steps[0], cc.AgentStepStart) and "data/numbers.txt" in steps[0].task
    assert {tool.name for tool in steps[0].tools} >= {"write_file", "finish"}
    answers = [s for s in steps if isinstance(s, cc.AgentStepModel)]
    assert len(answers) == agent.totals.steps
    assert answers[-1].calls[-1].tool == "finish"
    assert answers[-1].calls[-1].parsed_arguments()["answer"] == "done"
    assert [s.index for s in steps] == list(range(len(steps)))
    # The transcript: the same run as OpenAI chat messages.
    messages = client.jobs.transcript(result.job_id)
    assert [m["role"] for m in messages[:2]] == ["system", "user"]
    assert messages[0]["content"] == steps[0].system
    calls = [c for m in messages if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    assert calls[-1]["function"]["name"] == "finish" and calls[-1]["type"] == "function"
    results = [m for m in messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == [c["id"] for c in calls]


def test_only_an_agent_job_has_a_transcript_and_takes_agent_fields(client: Client, nonce):
    accepted = client.jobs.submit(unique_job(nonce))
    with pytest.raises(cc.NotAnAgentJob) as raised:
        client.jobs.transcript(accepted.job_id)
    assert (raised.value.status, raised.value.code) == (409, "not_an_agent_job")
    assert isinstance(raised.value, cc.Conflict)
    with pytest.raises(cc.InvalidField) as raised:
        client.jobs.submit(unique_job(nonce), files={"a.py": ""})
    assert raised.value.field == "files"
    with pytest.raises(cc.InvalidField) as raised:
        client.jobs.submit_agent(f"Go ({nonce}).", max_steps=0)
    assert raised.value.field == "agent.max_steps"
    with pytest.raises(cc.InvalidField) as raised:
        client.jobs.submit_agent(f"Go ({nonce}).", files={"../x": ""})
    assert raised.value.field == "files"


# --- errors ------------------------------------------------------------------------------


def test_an_unknown_id_is_not_found(client: Client):
    unknown = str(uuid.uuid4())
    for fetch in (client.executions.get, client.jobs.get, client.batches.get, client.sessions.get):
        with pytest.raises(cc.NotFound) as raised:
            fetch(unknown)
        error = raised.value
        assert (error.status, error.code) == (404, "not_found")
        assert error.request_id and error.message
    with pytest.raises(cc.NotFound):
        list(client.jobs.events(unknown))


def test_a_bad_value_names_its_field(client: Client):
    with pytest.raises(cc.InvalidField) as raised:
        client.executions.run("python", "print(1)", timeout_ms=0)
    assert raised.value.status == 422 and raised.value.field == "timeout_ms"
    with pytest.raises(cc.UnknownLanguage) as raised:
        client.executions.run("cobol", "DISPLAY 'HI'.")
    assert raised.value.field == "language" and raised.value.code == "unknown_language"
    with pytest.raises(cc.InvalidField) as raised:
        client.executions.submit_batch(
            [
                {"language": "python", "code": "1"},
                {"language": "python", "code": "1", "memory_mb": 1},
            ]
        )
    # docs/api.md says `param` names `items[1].memory_mb`; the server (at the time of writing)
    # sends the bare field in `param` and the item's path in the message only.
    assert raised.value.message.startswith("items[1].memory_mb:")
    assert raised.value.field in ("items[1].memory_mb", "memory_mb")
    with pytest.raises(cc.InvalidRequest) as raised:
        client.jobs.submit("   ")
    assert raised.value.status == 422 and raised.value.field == "instruction"
    with pytest.raises(cc.InvalidId) as raised:
        client.executions.get("not-an-id")
    assert raised.value.status == 400 and raised.value.field == "id"
    with pytest.raises(cc.InvalidRequest) as raised:
        client.jobs.list(limit=1000)
    assert raised.value.field == "limit"


# --- idempotency -------------------------------------------------------------------------


def test_the_same_idempotency_key_gives_the_same_work(client: Client, nonce):
    key = f"client-test-{nonce}"
    first = client.executions.run("python", f"print('{nonce}')", idempotency_key=key)
    second = client.executions.run("python", f"print('{nonce}')", idempotency_key=key)
    assert first.id == second.id and second.stdout == f"{nonce}\n"
    with pytest.raises(cc.IdempotencyConflict) as raised:
        client.executions.run("python", "print('another body')", idempotency_key=key)
    assert raised.value.status == 409

    job_a = client.jobs.submit(unique_job(nonce), idempotency_key=key)
    job_b = client.jobs.submit(unique_job(nonce), idempotency_key=key)  # keys are per route
    assert job_a.job_id == job_b.job_id
    batch_a = client.batches.submit([unique_job(nonce + "-batch")], idempotency_key=key)
    batch_b = client.batches.submit([unique_job(nonce + "-batch")], idempotency_key=key)
    assert batch_a.batch_id == batch_b.batch_id and batch_a.jobs == batch_b.jobs
    items = [{"language": "bash", "code": f"echo {nonce}"}]
    exec_a = client.executions.submit_batch(items, idempotency_key=key)
    exec_b = client.executions.submit_batch(items, idempotency_key=key)
    assert [r.execution_id for r in exec_a.results] == [r.execution_id for r in exec_b.results]
    client.batches.wait(batch_a.batch_id, timeout=300)


# --- the small routes --------------------------------------------------------------------


def test_languages_usage_and_caches(client: Client):
    languages = client.languages()
    assert {"python", "javascript", "bash"} <= set(languages.names())
    python = next(lang for lang in languages.languages if lang.name == "python")
    assert "py" in python.aliases and not python.compiled
    client.executions.run("bash", "true")
    usage = client.usage()
    assert usage.from_ms < usage.to_ms and usage.executions >= 1
    try:
        stats = client.cache_stats()
    except cc.CachingDisabled:
        return
    assert stats.model and stats.solutions >= 0 and stats.functions >= 0


def test_usage_per_hour_answers_a_series(client: Client):
    client.executions.run("bash", "true")
    usage = client.usage(per="hour")
    assert usage.series, "the execution just run charged this hour"
    assert all(usage.from_ms <= p.from_ms < usage.to_ms for p in usage.series)
    assert [p.from_ms for p in usage.series] == sorted(p.from_ms for p in usage.series)
    assert sum(p.executions for p in usage.series) == usage.executions
    assert client.usage().series is None


def test_the_cluster_is_for_admins(client: Client):
    """An open API (no keys) makes every caller an admin; with keys, only
    ``coordinator.admin_tenants``' may read it."""
    client.executions.run("bash", "true")  # a worker is live
    try:
        view = client.cluster()
    except cc.Forbidden:
        assert os.environ.get("CODEGEN_API_KEY"), "an open API answers the cluster to anyone"
        return
    except cc.NotKept as e:
        pytest.skip(f"this coordinator keeps no presence: {e.message}")
    assert isinstance(view, models.ClusterView) and view.at_ms > 0
    assert view.workers, "a ready coordinator has live workers"
    for worker in view.workers:
        assert worker.name
        if worker.status is not None:
            assert worker.status.started_ms <= worker.status.at_ms
            assert all(pool.idle <= pool.live for pool in worker.status.pools)
    assert view.queues or view.queues_error
