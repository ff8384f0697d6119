"""``batches.results`` and ``batches.iter_results`` (``GET /v1/batches/{id}/results``) against
respx's mocked httpx transport: the query sent, each member of the union read as its model,
and the pages followed by their cursor."""

from __future__ import annotations

import httpx
import pytest
import respx

import codegen_client as cc
from codegen_client import AsyncClient, Client, models

BASE = "http://coordinator.test"
BATCH = "01a223cc-c559-7349-99f4-000000000000"
JOBS = [f"01a223cc-c559-7349-99f4-00000000000{i}" for i in range(5)]
PATH = f"/v1/batches/{BATCH}/results"


def result(job_id: str, status: str = "succeeded") -> dict:
    """A `JobResult` as `GET /v1/jobs/{id}` answers it once the job ended."""
    quality = {
        "score": 1.0,
        "tests_passed": 1,
        "tests_total": 1,
        "coverage": 1.0,
        "complexity": {"f": 1},
        "docstrings": 1.0,
        "dangerous_calls": [],
    }
    metrics = {
        "generation_ms": 1,
        "execution_ms": 1,
        "total_ms": 2,
        "model_calls": 1,
        "tokens": {"prompt": 1, "completion": 1},
        "cache": "miss",
    }
    return {
        "job_id": job_id,
        "status": status,
        "instruction": "Sum a list.",
        "language": "python",
        "function_specs": [],
        "implementations": {"f": "def f(xs):\n    return sum(xs)\n"},
        "tests": {},
        "test_results": [],
        "all_tests_passed": status == "succeeded",
        "improvement_history": [],
        "documentation": "",
        "quality": quality,
        "metrics": metrics,
        "validation": "tested",
        "manual_review_recommended": False,
    }


def progress(job_id: str) -> dict:
    functions = {"f": {"done": False, "passed": False, "attempts": 1}}
    return {"job_id": job_id, "status": "running", "functions": functions}


def expired(job_id: str) -> dict:
    return {"job_id": job_id, "status": "unknown"}


PAGES = {
    None: {
        "batch_id": BATCH,
        "total": 5,
        "results": [result(JOBS[0]), progress(JOBS[1])],
        "next_cursor": "2",
    },
    "2": {
        "batch_id": BATCH,
        "total": 5,
        "results": [expired(JOBS[2]), result(JOBS[3], "failed")],
        "next_cursor": "4",
    },
    "4": {"batch_id": BATCH, "total": 5, "results": [result(JOBS[4], "cancelled")]},
}


def paged(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json=PAGES[request.url.params.get("cursor")])


@pytest.fixture
def mock():
    with respx.mock(base_url=BASE, assert_all_called=False) as router:
        yield router


def test_a_page_reads_each_job_as_its_model(mock):
    route = mock.get(PATH).mock(return_value=httpx.Response(200, json=PAGES[None]))
    with Client(BASE) as client:
        page = client.batches.results(BATCH)
    assert isinstance(page, cc.BatchResults)
    assert (page.batch_id, page.total, page.next_cursor) == (BATCH, 5, "2")
    done, running = page.results
    assert isinstance(done, cc.JobResult) and done.status == "succeeded" and done.finished
    assert isinstance(running, cc.JobProgress) and not running.finished
    assert running.functions["f"].attempts == 1
    assert route.calls[0].request.url.query == b"", "no cursor or limit unless given"


def test_the_cursor_and_limit_are_sent_and_an_expired_job_is_read(mock):
    route = mock.get(PATH).mock(return_value=httpx.Response(200, json=PAGES["2"]))
    with Client(BASE) as client:
        page = client.batches.results(BATCH, cursor="2", limit=2)
    params = route.calls[0].request.url.params
    assert (params["cursor"], params["limit"]) == ("2", "2")
    gone, failed = page.results
    assert isinstance(gone, models.ExpiredJob) and gone.status == "unknown" and gone.finished
    assert gone.job_id == JOBS[2]
    assert isinstance(failed, cc.JobResult) and failed.status == "failed"


def test_the_last_page_has_no_cursor(mock):
    mock.get(PATH).mock(return_value=httpx.Response(200, json=PAGES["4"]))
    with Client(BASE) as client:
        page = client.batches.results(BATCH, cursor="4")
    assert page.next_cursor is None and len(page.results) == 1


def test_iter_results_follows_every_page_in_input_order(mock):
    route = mock.get(PATH).mock(side_effect=paged)
    with Client(BASE) as client:
        jobs = list(client.batches.iter_results(BATCH, page_size=2))
    assert [j.job_id for j in jobs] == JOBS
    assert [type(j).__name__ for j in jobs] == [
        "JobResult",
        "JobProgress",
        "ExpiredJob",
        "JobResult",
        "JobResult",
    ]
    sent = [
        (c.request.url.params.get("cursor"), c.request.url.params["limit"]) for c in route.calls
    ]
    assert sent == [(None, "2"), ("2", "2"), ("4", "2")]


def test_an_unknown_batch_and_a_bad_limit_are_typed(mock):
    mock.get(PATH).mock(
        side_effect=[
            httpx.Response(404, json={"error": "no such batch", "code": "not_found"}),
            httpx.Response(
                422,
                json={"error": "limit: from 1 to 200", "code": "invalid_field", "param": "limit"},
            ),
        ]
    )
    with Client(BASE) as client:
        with pytest.raises(cc.NotFound):
            client.batches.results(BATCH)
        with pytest.raises(cc.InvalidField) as raised:
            client.batches.results(BATCH, limit=500)
    assert raised.value.field == "limit"


def test_a_batch_id_is_one_path_segment(mock):
    route = mock.get(url__regex=r".*/results$").mock(
        return_value=httpx.Response(200, json={"batch_id": BATCH, "total": 0, "results": []})
    )
    with Client(BASE) as client:
        client.batches.results("a/b")
    assert route.calls[0].request.url.raw_path.startswith(b"/v1/batches/a%2Fb/results")


async def test_the_async_client_pages_the_same_way(mock):
    route = mock.get(PATH).mock(side_effect=paged)
    async with AsyncClient(BASE) as client:
        first = await client.batches.results(BATCH, limit=2)
        jobs = [job async for job in client.batches.iter_results(BATCH, page_size=2)]
    assert isinstance(first, cc.BatchResults) and first.next_cursor == "2"
    assert [j.job_id for j in jobs] == JOBS
    assert isinstance(jobs[2], cc.ExpiredJob) and isinstance(jobs[1], cc.JobProgress)
    assert route.call_count == 4


def test_a_results_page_validates_from_python_objects_too():
    page = models.BatchResults.model_validate(
        {
            "batch_id": BATCH,
            "total": 1,
            "results": [models.ExpiredJob(job_id=JOBS[0], status="unknown")],
        }
    )
    assert isinstance(page.results[0], models.ExpiredJob)
