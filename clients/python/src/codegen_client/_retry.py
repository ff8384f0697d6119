"""When and how long to wait before sending a request again: the one place retries are decided.

Built on tenacity. A request is sent again when the server answered

* 429 (``rate_limited``, ``quota_exceeded``) or 503 (``broker_unavailable``,
  ``store_unavailable``, ``no_session_host``, ...), after its ``Retry-After`` seconds; except
  ``session_restored`` (the cell ran, sending it again would run it twice), ``not_kept``
  (a coordinator configured without Redis) and a
  ``Retry-After`` longer than ``max_wait`` (a quota that comes back at the end of the day:
  raised at once rather than slept through);
* 409 ``idempotency_in_progress`` (the first request with the key is still being handled);

or when no answer came: a connection that could not be made (nothing was sent) always; any
other transport failure only for a request that is safe to send again (``GET``, ``PUT``,
``DELETE``, and a ``POST`` that carries an ``Idempotency-Key``). At most ``max_attempts``
sends in all.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import tenacity

from .errors import CodegenError, IdempotencyInProgress, TransportError

T = TypeVar("T")

#: Codes never retried although their status is 429/503: ``session_restored`` (the cell ran:
#: sending it again would run it twice) and ``not_kept`` (a coordinator without Redis: waiting
#: does not change that).
NOT_RETRIED = frozenset({"session_restored", "not_kept"})


@dataclass(frozen=True)
class RetryPolicy:
    """How a client retries. ``max_attempts``: sends in all (1: never retry); ``max_wait``:
    the longest ``Retry-After`` (seconds) waited out; ``backoff``/``max_backoff``: the wait
    when the server named none (doubling, jittered). ``sleep``/``async_sleep`` are what waits
    (tests replace them)."""

    max_attempts: int = 5
    max_wait: float = 60.0
    backoff: float = 0.5
    max_backoff: float = 8.0
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    async_sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep, repr=False)

    def should_retry(self, error: BaseException, safe: bool) -> bool:
        if isinstance(error, TransportError):
            return safe or bool(getattr(error, "not_sent", False))
        if not isinstance(error, CodegenError):
            return False
        if isinstance(error, IdempotencyInProgress):
            return True
        if error.status not in (429, 503) or error.code in NOT_RETRIED:
            return False
        return error.retry_after is None or error.retry_after <= self.max_wait

    def wait_for(self, error: BaseException | None, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (from 1)."""
        retry_after = getattr(error, "retry_after", None)
        if retry_after is not None:
            return float(retry_after)
        base = min(self.max_backoff, self.backoff * (2 ** (attempt - 1)))
        return base * (0.5 + random.random() / 2)

    def _kwargs(self, safe: bool) -> dict[str, Any]:
        def wait(state: tenacity.RetryCallState) -> float:
            error = state.outcome.exception() if state.outcome else None
            return self.wait_for(error, state.attempt_number)

        return dict(
            retry=tenacity.retry_if_exception(lambda e: self.should_retry(e, safe)),
            wait=wait,
            stop=tenacity.stop_after_attempt(max(1, self.max_attempts)),
            reraise=True,
        )

    def call(self, send: Callable[[], T], *, safe: bool) -> T:
        """``send()`` until it returns, or raises what is not retried, or attempts run out."""
        retrying = tenacity.Retrying(sleep=self.sleep, **self._kwargs(safe))
        return retrying(send)

    async def acall(self, send: Callable[[], Awaitable[T]], *, safe: bool) -> T:
        retrying = tenacity.AsyncRetrying(sleep=self.async_sleep, **self._kwargs(safe))
        return await retrying(send)
