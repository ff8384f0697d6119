"""Error answers become typed exceptions (no network: answers are built by hand)."""

from __future__ import annotations

import re

import httpx
import pytest

import codegen_client as cc
from codegen_client.errors import error_from_response, parse_retry_after


def answer(status: int, body=None, headers=None, content=None) -> httpx.Response:
    request = httpx.Request("GET", "http://coordinator.test/v1/jobs/x")
    if content is not None:
        return httpx.Response(status, content=content, headers=headers, request=request)
    return httpx.Response(status, json=body, headers=headers, request=request)


def test_every_code_of_the_server_maps_to_its_class_and_status(snapshot):
    description = snapshot["components"]["schemas"]["ErrorCode"]["description"]
    listed = dict(re.findall(r"^- `([a-z_]+)` \((\d{3})\)", description, re.MULTILINE))
    assert set(listed) == set(snapshot["components"]["schemas"]["ErrorCode"]["enum"])
    for code, status in listed.items():
        error = error_from_response(
            answer(int(status), {"error": f"it went {code}", "code": code}, {"x-request-id": "r-1"})
        )
        assert type(error) is cc.ERROR_CODES[code], code
        assert (error.code, error.status, error.message, error.request_id) == (
            code,
            int(status),
            f"it went {code}",
            "r-1",
        )
        assert isinstance(error, cc.CodegenError)


@pytest.mark.parametrize(
    "code, family",
    [
        ("malformed_body", cc.InvalidRequest),
        ("invalid_field", cc.InvalidRequest),
        ("unknown_language", cc.InvalidField),
        ("api_key_unknown", cc.Unauthorized),
        ("no_such_route", cc.NotFound),
        ("already_ended", cc.Conflict),
        ("session_lost", cc.Conflict),
        ("quota_exceeded", cc.RateLimited),
        ("no_session_host", cc.Unavailable),
        ("session_restored", cc.Unavailable),
    ],
)
def test_codes_belong_to_their_family(code, family):
    assert issubclass(cc.ERROR_CODES[code], family)


def test_field_limit_and_retry_after_are_kept():
    error = error_from_response(
        answer(
            422,
            {
                "error": "items[1].memory_mb: must be between 16 and 4096",
                "code": "invalid_field",
                "param": "items[1].memory_mb",
            },
        )
    )
    assert isinstance(error, cc.InvalidField)
    assert error.field == error.param == "items[1].memory_mb"
    limited = error_from_response(
        answer(
            429,
            {
                "error": "quota",
                "code": "quota_exceeded",
                "limit": "coordinator.tenants.acme.jobs_in_flight",
            },
            {"retry-after": "5"},
        )
    )
    assert isinstance(limited, cc.QuotaExceeded) and isinstance(limited, cc.RateLimited)
    assert limited.limit == "coordinator.tenants.acme.jobs_in_flight"
    assert limited.retry_after == 5.0
    assert "429 quota_exceeded: quota" in str(limited)


def test_an_unknown_code_falls_back_to_its_status_family():
    error = error_from_response(answer(409, {"error": "new", "code": "brand_new_conflict"}))
    assert type(error) is cc.Conflict and error.code == "brand_new_conflict"
    error = error_from_response(answer(503, {"error": "new", "code": "brand_new_outage"}))
    assert type(error) is cc.Unavailable


def test_an_answer_that_is_not_an_error_body():
    error = error_from_response(answer(502, content=b"<html>bad gateway</html>"))
    assert isinstance(error, cc.Unavailable)
    assert error.code is None and error.status == 502
    assert "bad gateway" in error.message
    error = error_from_response(answer(404, content=b""))
    assert type(error) is cc.NotFound and error.code is None


def test_retry_after_forms():
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(" 0 ") == 0.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10.0
