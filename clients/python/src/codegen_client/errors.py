"""Typed exceptions for the coordinator's error answers.

Every 4xx/5xx answer of the API is an ``ErrorBody``: ``{"error", "code", "param"?, "limit"?}``.
``code`` comes from a fixed list (the ``ErrorCode`` schema of ``/openapi.json``) and always comes
with the same HTTP status. Each code maps to one exception class below; the classes are grouped
in families (``InvalidRequest``, ``Unauthorized``, ``NotFound``, ``Conflict``, ``RateLimited``,
``Unavailable``, ...) so a caller can catch as broadly or as narrowly as it likes::

    try:
        client.jobs.get(job_id)
    except codegen_client.NotFound:
        ...
    except codegen_client.InvalidRequest as e:
        print(e.field, e.message)

A code this client does not know yet (a newer server) maps to its status's family, with
``.code`` still set to what the server said.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Mapping
from typing import Any

import httpx

__all__ = [
    "ERROR_CODES",
    "AlreadyEnded",
    "NotAnAgentJob",
    "ApiKeyRequired",
    "ApiKeyUnknown",
    "BrokerUnavailable",
    "CachingDisabled",
    "CodegenError",
    "Conflict",
    "Forbidden",
    "IdempotencyConflict",
    "IdempotencyInProgress",
    "InternalError",
    "InvalidField",
    "InvalidHeader",
    "InvalidId",
    "InvalidQuery",
    "InvalidRequest",
    "MalformedBody",
    "MethodNotAllowed",
    "NoGenerator",
    "NoSessionHost",
    "NoSuchRoute",
    "NotFound",
    "NotKept",
    "NotQueued",
    "PayloadTooLarge",
    "QuotaExceeded",
    "RateLimited",
    "SessionEnded",
    "SessionLost",
    "SessionRestored",
    "StoreUnavailable",
    "TransportError",
    "Unauthorized",
    "Unavailable",
    "UnknownLanguage",
    "UnsupportedMediaType",
    "error_from_response",
    "parse_retry_after",
]


_UNSET: Any = object()


class CodegenError(Exception):
    """Base of every error this client raises.

    ``code``: the server's machine-readable code (``None`` when the answer carried none, e.g.
    a proxy's error page, or for a transport failure); ``status``: the HTTP status (``None``
    when no answer came); ``message``: the server's ``error`` text; ``request_id``: the
    answer's ``x-request-id`` (quote it to the operator: every log line of the request
    carries it); ``param``: the field, query parameter or header the error is about;
    ``limit``: the setting a 429 went over; ``retry_after``: seconds the server asked to wait.
    """

    #: The code this class stands for (``None`` for the family classes).
    error_code: str | None = None
    #: The status every answer with this code has.
    http_status: int | None = None

    def __init__(
        self,
        message: str,
        *,
        code: Any = _UNSET,
        status: Any = _UNSET,
        request_id: str | None = None,
        param: str | None = None,
        limit: str | None = None,
        retry_after: float | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code: str | None = self.error_code if code is _UNSET else code
        self.status: int | None = self.http_status if status is _UNSET else status
        self.request_id = request_id
        self.param = param
        self.limit = limit
        self.retry_after = retry_after
        self.body = body
        self.headers = dict(headers or {})

    def __str__(self) -> str:
        head = " ".join(str(p) for p in (self.status, self.code) if p is not None)
        text = f"{head}: {self.message}" if head else self.message
        if self.request_id:
            text += f" (request {self.request_id})"
        return text

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(status={self.status!r}, code={self.code!r}, "
            f"message={self.message!r}, param={self.param!r}, request_id={self.request_id!r})"
        )


class TransportError(CodegenError):
    """No (complete) answer came: the connection failed, timed out or broke."""


# --- 400, 413, 415, 422: the request is wrong --------------------------------------------


class InvalidRequest(CodegenError):
    """The request is wrong; ``field`` (== ``param``) names what, when the server said."""

    @property
    def field(self) -> str | None:
        return self.param


class MalformedBody(InvalidRequest):
    error_code, http_status = "malformed_body", 400


class InvalidQuery(InvalidRequest):
    error_code, http_status = "invalid_query", 400


class InvalidId(InvalidRequest):
    error_code, http_status = "invalid_id", 400


class InvalidHeader(InvalidRequest):
    error_code, http_status = "invalid_header", 400


class PayloadTooLarge(InvalidRequest):
    error_code, http_status = "payload_too_large", 413


class UnsupportedMediaType(InvalidRequest):
    error_code, http_status = "unsupported_media_type", 415


class InvalidField(InvalidRequest):
    error_code, http_status = "invalid_field", 422


class UnknownLanguage(InvalidField):
    error_code, http_status = "unknown_language", 422


# --- 401, 403 ------------------------------------------------------------------------------


class Unauthorized(CodegenError):
    """API keys are configured and the request carried none, or an unknown one."""


class ApiKeyRequired(Unauthorized):
    error_code, http_status = "api_key_required", 401


class ApiKeyUnknown(Unauthorized):
    error_code, http_status = "api_key_unknown", 401


class Forbidden(CodegenError):
    error_code, http_status = "forbidden", 403


# --- 404, 405 ------------------------------------------------------------------------------


class NotFound(CodegenError):
    """No such job, batch, execution or session for this tenant (code ``not_found``), and the
    family of the other 404s."""

    error_code, http_status = "not_found", 404


class NoSuchRoute(NotFound):
    error_code, http_status = "no_such_route", 404


class CachingDisabled(NotFound):
    error_code, http_status = "caching_disabled", 404


class MethodNotAllowed(CodegenError):
    error_code, http_status = "method_not_allowed", 405


# --- 409 -----------------------------------------------------------------------------------


class Conflict(CodegenError):
    """409: the request conflicts with the state of what it names."""


class IdempotencyConflict(Conflict):
    error_code, http_status = "idempotency_conflict", 409


class IdempotencyInProgress(Conflict):
    """The first request with this key is still being handled (retried by the client)."""

    error_code, http_status = "idempotency_in_progress", 409


class AlreadyEnded(Conflict):
    error_code, http_status = "already_ended", 409


class NotAnAgentJob(Conflict):
    """Only agent jobs have a transcript."""

    error_code, http_status = "not_an_agent_job", 409


class SessionEnded(Conflict):
    error_code, http_status = "session_ended", 409


class SessionLost(Conflict):
    error_code, http_status = "session_lost", 409


# --- 429 -----------------------------------------------------------------------------------


class RateLimited(CodegenError):
    """429: over the tenant's request rate (``rate_limited``) or a quota (``QuotaExceeded``);
    ``limit`` names the setting, ``retry_after`` the wait."""

    error_code, http_status = "rate_limited", 429


class QuotaExceeded(RateLimited):
    error_code, http_status = "quota_exceeded", 429


# --- 500, 503 ------------------------------------------------------------------------------


class InternalError(CodegenError):
    error_code, http_status = "internal", 500


class Unavailable(CodegenError):
    """503: a dependency of the cluster is unavailable; ``retry_after`` says when to retry."""


class BrokerUnavailable(Unavailable):
    error_code, http_status = "broker_unavailable", 503


class NotQueued(Unavailable):
    error_code, http_status = "not_queued", 503


class StoreUnavailable(Unavailable):
    error_code, http_status = "store_unavailable", 503


class NotKept(Unavailable):
    error_code, http_status = "not_kept", 503


class NoGenerator(Unavailable):
    error_code, http_status = "no_generator", 503


class NoSessionHost(Unavailable):
    error_code, http_status = "no_session_host", 503


class SessionRestored(Unavailable):
    """The cell ran, its effects are in the (restored) session, its output is lost: never
    sent again by the client."""

    error_code, http_status = "session_restored", 503


def _leaves() -> dict[str, type[CodegenError]]:
    found: dict[str, type[CodegenError]] = {}
    stack: list[type[CodegenError]] = [CodegenError]
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        code = cls.__dict__.get("error_code")
        if code is not None:
            found[code] = cls
    return found


#: Every error code this client knows, and its exception class (a test checks this against
#: the ``ErrorCode`` enum of the server's ``/openapi.json``).
ERROR_CODES: dict[str, type[CodegenError]] = _leaves()

#: The family of an answer whose code is unknown to this client (or absent).
_BY_STATUS: dict[int, type[CodegenError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    422: InvalidRequest,
    429: RateLimited,
    500: InternalError,
    503: Unavailable,
}


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` in seconds: delta-seconds (what this API sends) or an HTTP date."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def error_class(code: str | None, status: int) -> type[CodegenError]:
    """The exception class of an answer: by its code, else by its status's family."""
    if code is not None and code in ERROR_CODES:
        return ERROR_CODES[code]
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if 400 <= status < 500:
        return InvalidRequest
    if status >= 500:
        return Unavailable if status in (502, 504) else InternalError
    return CodegenError


def error_from_response(response: httpx.Response, body: bytes | None = None) -> CodegenError:
    """The typed exception for an error answer (its body already read, or given)."""
    raw = response.content if body is None else body
    parsed: Any = None
    code = param = limit = None
    message = ""
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        code = parsed.get("code") if isinstance(parsed.get("code"), str) else None
        message = str(parsed.get("error") or "")
        param = parsed.get("param") if isinstance(parsed.get("param"), str) else None
        limit = parsed.get("limit") if isinstance(parsed.get("limit"), str) else None
    if not message:
        text = raw.decode("utf-8", "replace").strip() if raw else ""
        message = text[:500] or response.reason_phrase or f"HTTP {response.status_code}"
    cls = error_class(code, response.status_code)
    return cls(
        message,
        code=code,
        status=response.status_code,
        request_id=response.headers.get("x-request-id"),
        param=param,
        limit=limit,
        retry_after=parse_retry_after(response.headers.get("retry-after")),
        body=parsed if parsed is not None else raw,
        headers=response.headers,
    )
