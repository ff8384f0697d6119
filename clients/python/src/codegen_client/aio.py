"""The asynchronous client: ``AsyncClient`` (on ``httpx.AsyncClient``), the same API as
``Client`` with ``await`` (and ``async for`` for the iterators)."""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

import httpx
import httpx_sse

from . import _base as b
from . import models as m
from ._retry import RetryPolicy
from .client import _Deadline, _streamed
from .errors import error_from_response

T = TypeVar("T")

__all__ = ["AsyncClient", "AsyncSession"]

#: A progress callback: a plain function or a coroutine function.
OnEvent = Callable[[m.JobEvent], None | Awaitable[None]]


async def _maybe_await(value: Any) -> None:
    if hasattr(value, "__await__"):
        await value


class AsyncClient:
    """The asynchronous twin of ``Client``::

    async with AsyncClient() as client:
        view = await client.executions.run("python", "print(6 * 7)")
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        retry: RetryPolicy | None = None,
        max_attempts: int | None = None,
        timeout: float | httpx.Timeout | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        if max_attempts is not None:
            retry = dataclasses.replace(retry or RetryPolicy(), max_attempts=max_attempts)
        self.settings = b.Settings.resolve(base_url, api_key, retry, timeout, headers)
        self._own_http = http_client is None
        self._http = http_client or httpx.AsyncClient(
            timeout=self.settings.timeout, transport=transport
        )
        self.executions = AsyncExecutions(self)
        self.jobs = AsyncJobs(self)
        self.batches = AsyncBatches(self)
        self.sessions = AsyncSessions(self)
        self.lessons = AsyncLessons(self)

    @property
    def base_url(self) -> str:
        return self.settings.base_url

    async def aclose(self) -> None:
        if self._own_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _send(self, call: b.Call[Any], *, stream: bool = False) -> httpx.Response:
        async def attempt() -> httpx.Response:
            request = call.request(self._http, self.settings)
            try:
                response = await self._http.send(request, stream=stream)
            except httpx.TransportError as e:
                raise b.transport_error(e, request) from e
            if response.status_code >= 400:
                try:
                    body = await response.aread()
                except httpx.TransportError as e:
                    raise b.transport_error(e, request) from e
                finally:
                    await response.aclose()
                raise error_from_response(response, body)
            return response

        return await self.settings.retry.acall(attempt, safe=call.safe)

    async def _call(self, call: b.Call[T]) -> T:
        return call.parse(await self._send(call))

    async def _sleep(self, seconds: float) -> None:
        await self.settings.retry.async_sleep(seconds)

    async def usage(
        self,
        from_: str | _dt.datetime | None = None,
        to: str | _dt.datetime | None = None,
        *,
        tenant: str | None = None,
        per: str | None = None,
    ) -> m.Usage:
        """``GET /v1/usage``: what the tenant's work that ended in ``[from_, to)`` cost
        (default: the last day); ``per`` (``"hour"`` or ``"day"``, UTC) also answers the
        totals per period as ``series``."""
        return await self._call(b.get_usage(from_, to, tenant, per))

    async def languages(self) -> m.Languages:
        return await self._call(b.get_languages())

    async def cache_stats(self) -> m.CacheStats:
        """``GET /v1/cache/stats``: entries and hit/miss counters of the caches."""
        return await self._call(b.cache_stats())

    async def cluster(self) -> m.ClusterView:
        """``GET /v1/cluster`` (admin tenants): the live workers and the broker's queues."""
        return await self._call(b.get_cluster())

    async def clear_cache(self) -> m.CacheCleared:
        """``DELETE /v1/cache``: empties the solution and function caches (admin tenants)."""
        return await self._call(b.clear_cache())

    async def openapi(self) -> dict[str, Any]:
        return await self._call(b.get_openapi())


async def _pages(fetch: Callable[[str | None], Awaitable[Any]], items: str) -> AsyncIterator[Any]:
    cursor: str | None = None
    while True:
        page = await fetch(cursor)
        for item in getattr(page, items):
            yield item
        cursor = page.next_cursor
        if not cursor:
            return


class AsyncExecutions:
    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def submit(
        self,
        request: m.ExecutionSubmission,
        *,
        wait: bool = True,
        idempotency_key: str | None = None,
    ) -> m.ExecutionView:
        return await self._c._call(
            b.submit_execution(request, wait=wait, idempotency_key=idempotency_key)
        )

    async def run(
        self,
        language: str,
        code: str,
        *,
        timeout: float | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> m.ExecutionView:
        view = await self.submit(
            b.execution(language, code, fields), idempotency_key=idempotency_key
        )
        return view if view.done else await self.wait(view.id, timeout=timeout)

    async def get(self, execution_id: str) -> m.ExecutionView:
        return await self._c._call(b.get_execution(execution_id))

    async def wait(
        self, execution_id: str, *, timeout: float | None = None, poll_interval: float = 0.25
    ) -> m.ExecutionView:
        deadline = _Deadline(timeout)
        nap = poll_interval
        while True:
            view = await self.get(execution_id)
            if view.done:
                return view
            deadline.check(f"execution {execution_id}")
            await self._c._sleep(nap)
            nap = min(nap * 2, 2.0)

    async def submit_batch(
        self,
        items: Iterable[m.ExecutionBatchItem | m.ExecutionSubmission | Mapping[str, Any]],
        *,
        callback_url: str | None = None,
        wait: bool = True,
        idempotency_key: str | None = None,
    ) -> m.ExecutionBatchView:
        body = b.batch_body(items, callback_url)
        return await self._c._call(
            b.submit_execution_batch(body, wait=wait, stream=False, idempotency_key=idempotency_key)
        )

    async def get_batch(self, batch_id: str) -> m.ExecutionBatchView:
        return await self._c._call(b.get_execution_batch(batch_id))

    async def stream_batch(
        self,
        items: Iterable[m.ExecutionBatchItem | m.ExecutionSubmission | Mapping[str, Any]],
        *,
        callback_url: str | None = None,
        idempotency_key: str | None = None,
        follow: bool = True,
        timeout: float | None = None,
    ) -> AsyncIterator[m.StreamedItemView]:
        """``async for item in client.executions.stream_batch(items)``: each result as its
        verdict comes in (see ``Client.executions.stream_batch``)."""
        body = b.batch_body(items, callback_url)
        call = b.submit_execution_batch(
            body, wait=True, stream=True, idempotency_key=idempotency_key
        )
        response = await self._c._send(call, stream=True)
        pending: list[m.StreamedItemView] = []
        try:
            async for line in response.aiter_lines():
                if not line.strip():
                    continue
                item = m.StreamedItemView.model_validate_json(line)
                if item.done or not follow:
                    yield item
                else:
                    pending.append(item)
        except httpx.TransportError as e:
            raise b.transport_error(e, response.request) from e
        finally:
            await response.aclose()
        deadline = _Deadline(timeout)
        nap = 0.25
        while pending:
            still = []
            for item in pending:
                view = await self.get(item.execution_id)
                if view.done:
                    yield _streamed(item, view)
                else:
                    still.append(item)
            pending = still
            if pending:
                deadline.check(f"{len(pending)} items of the batch")
                await self._c._sleep(nap)
                nap = min(nap * 2, 2.0)

    async def list(
        self,
        *,
        status: str | None = None,
        since: str | _dt.datetime | None = None,
        until: str | _dt.datetime | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> m.ExecutionList:
        return await self._c._call(b.list_executions(status, since, until, cursor, limit))

    def iter(
        self,
        *,
        status: str | None = None,
        since: str | _dt.datetime | None = None,
        until: str | _dt.datetime | None = None,
        page_size: int | None = None,
    ) -> AsyncIterator[m.ExecutionSummary]:
        return _pages(
            lambda cursor: self.list(
                status=status, since=since, until=until, limit=page_size, cursor=cursor
            ),
            "executions",
        )


class AsyncJobs:
    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def submit(
        self,
        request: m.JobSubmission | str | Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> m.JobAccepted | m.JobResult:
        body = b.job_body(request, fields)
        return await self._c._call(b.submit_job(body, idempotency_key=idempotency_key))

    async def submit_agent(
        self,
        instruction: str,
        *,
        language: str | None = None,
        files: Mapping[str, str] | None = None,
        agent: m.AgentSettings | Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> m.JobAccepted | m.JobResult:
        """An agent job (see ``Client.jobs.submit_agent``)."""
        body = b.agent_job_body(
            instruction, language=language, files=files, agent=agent, fields=fields
        )
        return await self._c._call(b.submit_job(body, idempotency_key=idempotency_key))

    async def run_agent(
        self,
        instruction: str,
        *,
        language: str | None = None,
        files: Mapping[str, str] | None = None,
        agent: m.AgentSettings | Mapping[str, Any] | None = None,
        on_progress: OnEvent | None = None,
        timeout: float | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> m.JobResult:
        accepted = await self.submit_agent(
            instruction,
            language=language,
            files=files,
            agent=agent,
            idempotency_key=idempotency_key,
            **fields,
        )
        if isinstance(accepted, m.JobResult):
            return accepted
        return await self.wait(accepted.job_id, on_progress=on_progress, timeout=timeout)

    async def get(self, job_id: str) -> m.JobResult | m.JobProgress:
        return await self._c._call(b.get_job(job_id))

    async def transcript(self, job_id: str) -> list[dict[str, Any]]:
        """An agent job's steps as OpenAI chat messages (see ``Client.jobs.transcript``)."""
        return await self._c._call(b.job_transcript(job_id))

    async def cancel(self, job_id: str) -> m.JobResult:
        return await self._c._call(b.cancel_job(job_id))

    async def events(
        self,
        job_id: str,
        *,
        last_event_id: str | None = None,
        max_reconnects: int = 5,
    ) -> AsyncIterator[m.JobEvent]:
        """``async for event in client.jobs.events(job_id)``: resumes a broken stream with
        ``Last-Event-ID`` (see ``Client.jobs.events``)."""
        last = last_event_id
        failures = 0
        path = b.job_events_path(job_id)
        while True:
            headers = {"Accept": "text/event-stream", "Cache-Control": "no-store"}
            if last:
                headers["Last-Event-ID"] = last
            call: b.Call[None] = b.Call(
                "GET", path, lambda r: None, headers=headers, timeout=b.EVENTS_TIMEOUT
            )
            response = await self._c._send(call, stream=True)
            retry_ms: int | None = None
            try:
                async for sse in httpx_sse.EventSource(response).aiter_sse():
                    if sse.retry is not None:
                        retry_ms = sse.retry
                    if not sse.data and not sse.event:
                        continue
                    event = b.event_of(sse)
                    if event.id:
                        last = event.id
                    failures = 0
                    yield event
                    if event.finished:
                        return
                return
            except httpx.TransportError as e:
                failures += 1
                if failures > max_reconnects:
                    raise b.transport_error(e, response.request) from e
                wait = (
                    retry_ms / 1000 if retry_ms else self._c.settings.retry.wait_for(None, failures)
                )
                await self._c._sleep(wait)
            finally:
                await response.aclose()

    async def wait(
        self,
        job_id: str,
        *,
        on_progress: OnEvent | None = None,
        timeout: float | None = None,
    ) -> m.JobResult:
        deadline = _Deadline(timeout)
        async for event in self.events(job_id):
            if on_progress is not None:
                await _maybe_await(on_progress(event))
            deadline.check(f"job {job_id}")
        nap = 0.25
        while True:
            view = await self.get(job_id)
            if isinstance(view, m.JobResult):
                return view
            deadline.check(f"job {job_id}")
            await self._c._sleep(nap)
            nap = min(nap * 2, 2.0)

    async def run(
        self,
        request: m.JobSubmission | str | Mapping[str, Any],
        *,
        on_progress: OnEvent | None = None,
        timeout: float | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> m.JobResult:
        accepted = await self.submit(request, idempotency_key=idempotency_key, **fields)
        if isinstance(accepted, m.JobResult):
            return accepted
        return await self.wait(accepted.job_id, on_progress=on_progress, timeout=timeout)

    async def list(
        self,
        *,
        status: str | None = None,
        since: str | _dt.datetime | None = None,
        until: str | _dt.datetime | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> m.JobList:
        return await self._c._call(b.list_jobs(status, since, until, cursor, limit))

    def iter(
        self,
        *,
        status: str | None = None,
        since: str | _dt.datetime | None = None,
        until: str | _dt.datetime | None = None,
        page_size: int | None = None,
    ) -> AsyncIterator[m.JobSummary]:
        return _pages(
            lambda cursor: self.list(
                status=status, since=since, until=until, limit=page_size, cursor=cursor
            ),
            "jobs",
        )


class AsyncBatches:
    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def submit(
        self,
        jobs: Iterable[m.JobSubmission | str | Mapping[str, Any]],
        *,
        callback_url: str | None = None,
        idempotency_key: str | None = None,
    ) -> m.BatchAccepted:
        return await self._c._call(
            b.submit_batch(jobs, callback_url=callback_url, idempotency_key=idempotency_key)
        )

    async def get(
        self, batch_id: str, *, wait_ms: int | None = None, finished: int | None = None
    ) -> m.BatchView:
        return await self._c._call(b.get_batch(batch_id, wait_ms, finished))

    async def wait(
        self,
        batch_id: str,
        *,
        on_update: Callable[[m.BatchView], Any] | None = None,
        timeout: float | None = None,
        poll_ms: int = 25_000,
    ) -> m.BatchView:
        deadline = _Deadline(timeout)
        view = await self.get(batch_id)
        while True:
            if on_update is not None:
                await _maybe_await(on_update(view))
            if view.done:
                return view
            deadline.check(f"batch {batch_id}")
            view = await self.get(batch_id, wait_ms=poll_ms, finished=view.finished_jobs)

    async def results(
        self, batch_id: str, *, cursor: str | None = None, limit: int | None = None
    ) -> m.BatchResults:
        """``GET /v1/batches/{id}/results``: one page (see ``Client.batches.results``)."""
        return await self._c._call(b.get_batch_results(batch_id, cursor, limit))

    def iter_results(
        self, batch_id: str, *, page_size: int | None = None
    ) -> AsyncIterator[m.JobResult | m.JobProgress | m.ExpiredJob]:
        """``async for job in client.batches.iter_results(batch_id)``: every job of the
        batch in input order, page after page."""
        return _pages(
            lambda cursor: self.results(batch_id, cursor=cursor, limit=page_size), "results"
        )

    async def cancel(self, batch_id: str) -> m.BatchView:
        return await self._c._call(b.cancel_batch(batch_id))

    async def list(
        self,
        *,
        status: str | None = None,
        since: str | _dt.datetime | None = None,
        until: str | _dt.datetime | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> m.BatchList:
        return await self._c._call(b.list_batches(status, since, until, cursor, limit))

    def iter(
        self,
        *,
        status: str | None = None,
        since: str | _dt.datetime | None = None,
        until: str | _dt.datetime | None = None,
        page_size: int | None = None,
    ) -> AsyncIterator[m.BatchSummary]:
        return _pages(
            lambda cursor: self.list(
                status=status, since=since, until=until, limit=page_size, cursor=cursor
            ),
            "batches",
        )


class AsyncSessions:
    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def open(
        self,
        language: str,
        *,
        memory_mb: int | None = None,
        idle_timeout_s: int | None = None,
        packages: Iterable[str] | None = None,
    ) -> AsyncSession:
        create = b.session_create(language, memory_mb, idle_timeout_s, packages)
        return AsyncSession(self, await self._c._call(b.open_session(create)))

    async def get(self, session_id: str) -> m.SessionView:
        return await self._c._call(b.get_session(session_id))

    async def list(self) -> m.SessionList:
        return await self._c._call(b.list_sessions())

    async def delete(self, session_id: str) -> m.SessionView:
        return await self._c._call(b.delete_session(session_id))

    async def run(
        self, session_id: str, code: str, *, timeout_ms: int | None = None
    ) -> m.CellResult:
        return await self._c._call(b.run_cell(session_id, code, timeout_ms))

    async def files(self, session_id: str) -> m.SessionFiles:
        return await self._c._call(b.list_session_files(session_id))

    async def upload(self, session_id: str, path: str, data: bytes | str) -> None:
        await self._c._call(b.upload_session_file(session_id, path, data))

    async def download(self, session_id: str, path: str) -> bytes:
        return await self._c._call(b.download_session_file(session_id, path))


class AsyncLessons:
    """``client.lessons``: the memory of repairs (see ``Lessons``)."""

    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def list(
        self,
        q: str | None = None,
        *,
        language: str | None = None,
        limit: int | None = None,
        tenant: str | None = None,
        shared: bool = False,
    ) -> m.LessonList:
        return await self._c._call(b.list_lessons(q, language, limit, tenant, shared))

    async def get(
        self, lesson_id: str, *, tenant: str | None = None, shared: bool = False
    ) -> m.LessonView:
        return await self._c._call(b.get_lesson(lesson_id, tenant, shared))

    async def delete(
        self, lesson_id: str, *, tenant: str | None = None, shared: bool = False
    ) -> None:
        await self._c._call(b.delete_lesson(lesson_id, tenant, shared))

    async def export(self, *, tenant: str | None = None, shared: bool = False) -> list[m.Lesson]:
        return await self._c._call(b.export_lessons(tenant, shared))

    async def import_(
        self,
        lessons: Iterable[m.Lesson | Mapping[str, Any]],
        *,
        tenant: str | None = None,
        shared: bool = False,
    ) -> m.LessonImport:
        return await self._c._call(b.import_lessons(lessons, tenant, shared))


class AsyncSession:
    """One open session (``async with`` deletes it on exit)."""

    def __init__(self, sessions: AsyncSessions, view: m.SessionView) -> None:
        self._sessions = sessions
        self.view = view

    @property
    def id(self) -> str:
        return self.view.id

    async def run(self, code: str, *, timeout_ms: int | None = None) -> m.CellResult:
        return await self._sessions.run(self.id, code, timeout_ms=timeout_ms)

    async def upload(self, path: str, data: bytes | str) -> None:
        await self._sessions.upload(self.id, path, data)

    async def download(self, path: str) -> bytes:
        return await self._sessions.download(self.id, path)

    async def files(self) -> m.SessionFiles:
        return await self._sessions.files(self.id)

    async def refresh(self) -> m.SessionView:
        self.view = await self._sessions.get(self.id)
        return self.view

    async def delete(self) -> m.SessionView:
        self.view = await self._sessions.delete(self.id)
        return self.view

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.delete()

    def __repr__(self) -> str:
        return f"AsyncSession(id={self.id!r}, language={self.view.language!r}, state={self.view.state!r})"
