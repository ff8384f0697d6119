"""``client.lessons`` (``/v1/lessons``) against respx's mocked httpx transport: the query each
call sends (which set, the search), the views read with their uses, the export's JSON Lines
read as lessons and the import's sent as them, and a delete's empty 204, with both clients."""

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


def lesson(n: int = 1, **fields) -> dict:
    return {
        "id": f"lesson-{n}",
        "language": "python",
        "error_kind": "wrong_output",
        "signature": "wrong answer: int for list",
        "case": "inputs {'xs': [1, 2]}, expected [2, 4], got 6",
        "diff": "--- before\n+++ after\n-    return sum(xs)\n+    return [2 * x for x in xs]\n",
        "analysis": "It summed the list instead of doubling each item.",
        "model": "scripted/fake",
        "job": JOB_ID,
        "function": "double_all",
        "source": "repair",
        "created_ms": 1_700_000_000_000 + n,
        **fields,
    }


USE = {"lesson": "lesson-1", "job": JOB_ID, "function": "double_all", "passed": True, "at_ms": 5}


def view(n: int = 1, **fields) -> dict:
    return {**lesson(n), "shared": False, "retrieved": 3, "helped": 2, "uses": [USE], **fields}


def jsonl(values: list[dict]) -> bytes:
    return "".join(json.dumps(v) + "\n" for v in values).encode()


def lines(route: respx.Route, k: int = 0) -> list[dict]:
    body = route.calls[k].request.content.decode()
    assert body.endswith("\n")
    return [json.loads(line) for line in body.splitlines()]


def params(route: respx.Route, k: int = 0) -> dict[str, str]:
    return dict(route.calls[k].request.url.params)


IMPORTED = {"added": 1, "already": 1, "too_large": 0, "evicted": 0}


@pytest.fixture
def mock():
    with respx.mock(base_url=BASE, assert_all_called=False) as router:
        yield router


def no_sleep(seconds: float) -> None:
    return None


# --- listing and reading --------------------------------------------------------------------


def test_list_sends_the_search_and_the_set_and_reads_the_views(mock):
    route = mock.get("/v1/lessons").mock(
        return_value=httpx.Response(200, json={"lessons": [view(1), view(2, shared=True)]})
    )
    with Client(BASE) as client:
        listed = client.lessons.list("summed list", language="python", limit=20, tenant="acme")
        client.lessons.list(shared=True)
        client.lessons.list()
    assert params(route, 0) == {
        "q": "summed list",
        "language": "python",
        "limit": "20",
        "tenant": "acme",
    }
    assert params(route, 1) == {"shared": "true"}
    assert params(route, 2) == {}  # nothing unset is sent: the caller's own set
    assert isinstance(listed, models.LessonList)
    first, second = listed.lessons
    assert isinstance(first, cc.LessonView) and isinstance(first, cc.Lesson)
    assert (first.id, first.source, first.given) == ("lesson-1", "repair", False)
    assert not first.shared
    assert (first.retrieved, first.helped) == (3, 2)
    assert first.uses == [models.LessonUse(**USE)]
    assert second.shared and first.source in models.LESSON_SOURCES


def test_get_reads_one_lesson_and_its_id_is_one_path_segment(mock):
    route = mock.get(url__regex=r".*/v1/lessons/.+").mock(
        return_value=httpx.Response(200, json=view(given=True, source="agent"))
    )
    with Client(BASE) as client:
        got = client.lessons.get("lesson-1", shared=True)
        client.lessons.get("a/b", tenant="acme")
    assert route.calls[0].request.url.raw_path == b"/v1/lessons/lesson-1?shared=true"
    assert route.calls[1].request.url.raw_path == b"/v1/lessons/a%2Fb?tenant=acme"
    assert isinstance(got, cc.LessonView) and got.given and got.source == "agent"
    # The lesson alone, as export writes it and import takes it.
    alone = got.as_lesson()
    assert type(alone) is cc.Lesson and alone.model_dump() == lesson(given=True, source="agent")


def test_a_missing_lesson_is_not_found(mock):
    mock.get("/v1/lessons/nope").mock(
        return_value=httpx.Response(
            404, json={"error": "no lesson nope in the set", "code": "not_found"}
        )
    )
    with Client(BASE) as client:
        with pytest.raises(cc.NotFound):
            client.lessons.get("nope")


# --- deleting -------------------------------------------------------------------------------


def test_delete_takes_an_empty_204(mock):
    route = mock.delete("/v1/lessons/lesson-1").mock(return_value=httpx.Response(204))
    with Client(BASE) as client:
        assert client.lessons.delete("lesson-1") is None
        assert client.lessons.delete("lesson-1", tenant="acme") is None
    assert route.call_count == 2
    assert params(route, 0) == {} and params(route, 1) == {"tenant": "acme"}


def test_deleting_from_the_shared_set_needs_an_admin(mock):
    mock.delete("/v1/lessons/lesson-1").mock(
        return_value=httpx.Response(
            403,
            json={
                "error": "the shared lessons are changed by coordinator.admin_tenants only",
                "code": "forbidden",
            },
        )
    )
    with Client(BASE, retry=RetryPolicy(sleep=no_sleep)) as client:
        with pytest.raises(cc.Forbidden):
            client.lessons.delete("lesson-1", shared=True)


# --- export and import ----------------------------------------------------------------------


def test_export_reads_one_lesson_a_line(mock):
    route = mock.get("/v1/lessons/export").mock(
        return_value=httpx.Response(
            200,
            headers={"content-type": "application/x-ndjson"},
            content=jsonl([lesson(2), lesson(1, given=True, tags=["newer"])]) + b"\n",
        )
    )
    with Client(BASE) as client:
        exported = client.lessons.export(tenant="acme")
    assert params(route) == {"tenant": "acme"}
    assert route.calls[0].request.headers["accept"] == "application/x-ndjson"
    assert [type(x) for x in exported] == [cc.Lesson, cc.Lesson]
    assert [x.id for x in exported] == ["lesson-2", "lesson-1"]
    assert exported[0].given is False and exported[1].given is True
    assert exported[1].tags == ["newer"]  # a newer server's field is kept


def test_an_empty_set_exports_nothing(mock):
    mock.get("/v1/lessons/export").mock(return_value=httpx.Response(200, content=b""))
    with Client(BASE) as client:
        assert client.lessons.export() == []


def test_import_sends_json_lines_of_lessons(mock):
    route = mock.post("/v1/lessons/import").mock(
        return_value=httpx.Response(200, json=IMPORTED)
    )
    as_model = cc.Lesson.model_validate(lesson(1))
    as_view = cc.LessonView.model_validate(view(2))  # its counts are not sent
    as_dict = lesson(3, given=True)
    with Client(BASE) as client:
        report = client.lessons.import_(iter([as_model, as_view, as_dict]), shared=True)
    request = route.calls[0].request
    assert request.headers["content-type"] == "application/x-ndjson"
    assert "idempotency-key" not in request.headers
    assert params(route) == {"shared": "true"}
    assert lines(route) == [lesson(1, given=False), lesson(2, given=False), lesson(3, given=True)]
    assert isinstance(report, cc.LessonImport)
    assert (report.added, report.already, report.too_large, report.evicted) == (1, 1, 0, 0)


def test_export_then_import_is_the_same_lines(mock):
    exported = jsonl([lesson(1, tags=["newer"]), lesson(2)])
    mock.get("/v1/lessons/export").mock(return_value=httpx.Response(200, content=exported))
    route = mock.post("/v1/lessons/import").mock(
        return_value=httpx.Response(200, json=IMPORTED)
    )
    with Client(BASE) as client:
        client.lessons.import_(client.lessons.export(), tenant="other")
    assert lines(route) == [lesson(1, tags=["newer"], given=False), lesson(2, given=False)]
    assert params(route) == {"tenant": "other"}


def test_a_line_that_is_not_a_lesson_is_refused_before_anything_is_sent(mock):
    route = mock.post("/v1/lessons/import").mock(
        return_value=httpx.Response(200, json=IMPORTED)
    )
    broken = {k: v for k, v in lesson(1).items() if k != "diff"}
    with Client(BASE) as client:
        with pytest.raises(pydantic.ValidationError):
            client.lessons.import_([lesson(2), broken])
    assert route.call_count == 0


def test_the_servers_refusal_of_a_line_names_it(mock):
    mock.post("/v1/lessons/import").mock(
        return_value=httpx.Response(
            422,
            json={
                "error": "line 1: its id is not 1 to 64 letters, digits, '-' or '_'",
                "code": "invalid_field",
                "param": "line 1",
            },
        )
    )
    with Client(BASE) as client:
        with pytest.raises(cc.InvalidField) as raised:
            client.lessons.import_([lesson(1, id="no spaces")])
    assert raised.value.field == "line 1"


# --- the async client -----------------------------------------------------------------------


async def test_the_async_client_lists_reads_exports_imports_and_deletes(mock):
    listing = mock.get("/v1/lessons").mock(
        return_value=httpx.Response(200, json={"lessons": [view(1)]})
    )
    mock.get("/v1/lessons/lesson-1").mock(return_value=httpx.Response(200, json=view(1)))
    mock.get("/v1/lessons/export").mock(
        return_value=httpx.Response(200, content=jsonl([lesson(1), lesson(2)]))
    )
    imported = mock.post("/v1/lessons/import").mock(
        return_value=httpx.Response(200, json=IMPORTED)
    )
    deleted = mock.delete("/v1/lessons/lesson-1").mock(return_value=httpx.Response(204))
    async with AsyncClient(BASE) as client:
        listed = await client.lessons.list("sum", limit=5, shared=True)
        got = await client.lessons.get("lesson-1")
        exported = await client.lessons.export()
        report = await client.lessons.import_(exported, tenant="acme")
        assert await client.lessons.delete("lesson-1") is None
    assert params(listing) == {"q": "sum", "limit": "5", "shared": "true"}
    assert listed.lessons[0].id == got.id == "lesson-1" and got.uses[0].passed
    assert [x.id for x in exported] == ["lesson-1", "lesson-2"]
    assert imported.calls[0].request.headers["content-type"] == "application/x-ndjson"
    assert [x["id"] for x in lines(imported)] == ["lesson-1", "lesson-2"]
    assert params(imported) == {"tenant": "acme"}
    assert report.added == 1 and deleted.call_count == 1
