"""The synchronous client: ``Client`` (on ``httpx.Client``)."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

import httpx
import httpx_sse

from . import _base as b
from . import models as m
from ._retry import RetryPolicy
from .errors import error_from_response

T = TypeVar("T")

__all__ = ["Client", "Session"]


class Client:
    """A client of one coordinator.

    ``base_url`` defaults to ``$CODEGEN_URL``, else ``http://127.0.0.1:8080``; ``api_key`` to
    ``$CODEGEN_API_KEY`` (sent as ``Authorization: Bearer KEY``). 429 and 503 answers are
    sent again after their ``Retry-After`` (see ``RetryPolicy``; ``max_attempts=1`` turns
    retries off). Every call that creates work carries an ``Idempotency-Key`` (a new UUID per
    call unless given), the same on each of its retries.

    Use as a context manager, or call ``close()``::

        with Client() as client:
            print(client.executions.run("python", "print(6 * 7)").stdout)
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
        transport: httpx.BaseTransport | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        if max_attempts is not None:
            retry = dataclasses.replace(retry or RetryPolicy(), max_attempts=max_attempts)
        self.settings = b.Settings.resolve(base_url, api_key, retry, timeout, headers)
        self._own_http = http_client is None
        self._http = http_client or httpx.Client(timeout=self.settings.timeout, transport=transport)
        self.executions = Executions(self)
        self.jobs = Jobs(self)
        self.batches = Batches(self)
        self.sessions = Sessions(self)
        self.lessons = Lessons(self)

    @property
    def base_url(self) -> str:
        return self.settings.base_url

    def close(self) -> None:
        if self._own_http:
            self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- plumbing -----------------------------------------------------------------------

    def _send(self, call: b.Call[Any], *, stream: bool = False) -> httpx.Response:
        def attempt() -> httpx.Response:
            request = call.request(self._http, self.settings)
            try:
                response = self._http.send(request, stream=stream)
            except httpx.TransportError as e:
                raise b.transport_error(e, request) from e
            if response.status_code >= 400:
                try:
                    body = response.read()
                except httpx.TransportError as e:
                    raise b.transport_error(e, request) from e
                finally:
                    response.close()
                raise error_from_response(response, body)
            return response

        return self.settings.retry.call(attempt, safe=call.safe)

    def _call(self, call: b.Call[T]) -> T:
        return call.parse(self._send(call))

    def _sleep(self, seconds: float) -> None:
        self.settings.retry.sleep(seconds)

    # --- the API's small routes ---------------------------------------------------------

    def usage(
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
        return self._call(b.get_usage(from_, to, tenant, per))

    def languages(self) -> m.Languages:
        """``GET /v1/languages``."""
        return self._call(b.get_languages())

    def cache_stats(self) -> m.CacheStats:
        """``GET /v1/cache/stats``: entries and hit/miss counters of the caches."""
        return self._call(b.cache_stats())

    def cluster(self) -> m.ClusterView:
        """``GET /v1/cluster`` (admin tenants): the live workers (what each announces: in
        flight, sessions, pools, its model's calls against the limit, counters) and the
        broker's queues."""
        return self._call(b.get_cluster())

    def clear_cache(self) -> m.CacheCleared:
        """``DELETE /v1/cache``: empties the solution and function caches (admin tenants)."""
        return self._call(b.clear_cache())

    def openapi(self) -> dict[str, Any]:
        """The coordinator's OpenAPI document (``GET /openapi.json``)."""
        return self._call(b.get_openapi())


def _pages(fetch: Callable[[str | None], Any], items: str) -> Iterator[Any]:
    cursor: str | None = None
    while True:
        page = fetch(cursor)
        yield from getattr(page, items)
        cursor = page.next_cursor
        if not cursor:
            return


class _Deadline:
    def __init__(self, timeout: float | None) -> None:
        self.end = None if timeout is None else time.monotonic() + timeout

    def check(self, what: str) -> None:
        if self.end is not None and time.monotonic() >= self.end:
            raise TimeoutError(f"{what}: still not done after the timeout")


class Executions:
    """Programs run in the sandbox: ``client.executions``."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def submit(
        self,
        request: m.ExecutionSubmission,
        *,
        wait: bool = True,
        idempotency_key: str | None = None,
    ) -> m.ExecutionView:
        """``POST /v1/executions``: the verdict (the server waits up to its
        ``coordinator.wait``), or ``status == "queued"`` with ``wait=False`` or past that wait."""
        return self._c._call(
            b.submit_execution(request, wait=wait, idempotency_key=idempotency_key)
        )

    def run(
        self,
        language: str,
        code: str,
        *,
        timeout: float | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> m.ExecutionView:
        """Runs one program and returns its verdict, polling if the server answered before
        it was in. ``fields``: the other fields of ``ExecutionSubmission`` (``test``,
        ``stdin``, ``timeout_ms``, ``memory_mb``, ``files``, ``return_files``...)."""
        view = self.submit(b.execution(language, code, fields), idempotency_key=idempotency_key)
        return view if view.done else self.wait(view.id, timeout=timeout)

    def get(self, execution_id: str) -> m.ExecutionView:
        """``GET /v1/executions/{id}``: the verdict, or ``status == "queued"``."""
        return self._c._call(b.get_execution(execution_id))

    def wait(
        self, execution_id: str, *, timeout: float | None = None, poll_interval: float = 0.25
    ) -> m.ExecutionView:
        """Polls an execution until its verdict is in."""
        deadline = _Deadline(timeout)
        nap = poll_interval
        while True:
            view = self.get(execution_id)
            if view.done:
                return view
            deadline.check(f"execution {execution_id}")
            self._c._sleep(nap)
            nap = min(nap * 2, 2.0)

    def submit_batch(
        self,
        items: Iterable[m.ExecutionBatchItem | m.ExecutionSubmission | Mapping[str, Any]],
        *,
        callback_url: str | None = None,
        wait: bool = True,
        idempotency_key: str | None = None,
    ) -> m.ExecutionBatchView:
        """``POST /v1/executions/batch``: every result in input order (``queued`` for those
        without a verdict yet; ``done`` counts the others)."""
        body = b.batch_body(items, callback_url)
        return self._c._call(
            b.submit_execution_batch(body, wait=wait, stream=False, idempotency_key=idempotency_key)
        )

    def get_batch(self, batch_id: str) -> m.ExecutionBatchView:
        """``GET /v1/executions/batches/{id}`` (only batches given a ``callback_url`` are
        kept)."""
        return self._c._call(b.get_execution_batch(batch_id))

    def stream_batch(
        self,
        items: Iterable[m.ExecutionBatchItem | m.ExecutionSubmission | Mapping[str, Any]],
        *,
        callback_url: str | None = None,
        idempotency_key: str | None = None,
        follow: bool = True,
        timeout: float | None = None,
    ) -> Iterator[m.StreamedItemView]:
        """Submits a batch and yields each item's result as soon as its verdict is in
        (completion order; ``index`` is its place in ``items``), from the server's streamed
        answer (``?stream=true``). Items the stream ends without (it stops after
        ``coordinator.wait`` without a verdict) are polled and yielded as they finish, unless
        ``follow=False`` (then they are yielded as ``queued``)."""
        body = b.batch_body(items, callback_url)
        call = b.submit_execution_batch(
            body, wait=True, stream=True, idempotency_key=idempotency_key
        )
        response = self._c._send(call, stream=True)
        pending: list[m.StreamedItemView] = []
        try:
            for line in response.iter_lines():
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
            response.close()
        yield from self._follow(pending, timeout)

    def _follow(
        self, pending: list[m.StreamedItemView], timeout: float | None
    ) -> Iterator[m.StreamedItemView]:
        deadline = _Deadline(timeout)
        nap = 0.25
        while pending:
            still = []
            for item in pending:
                view = self.get(item.execution_id)
                if view.done:
                    yield _streamed(item, view)
                else:
                    still.append(item)
            pending = still
            if pending:
                deadline.check(f"{len(pending)} items of the batch")
                self._c._sleep(nap)
                nap = min(nap * 2, 2.0)

    def list(
        self,
        *,
        status: str | None = None,
        since: str | _dt.datetime | None = None,
        until: str | _dt.datetime | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> m.ExecutionList:
        """``GET /v1/executions``: one page, newest first; pass ``next_cursor`` as ``cursor``."""
        return self._c._call(b.list_executions(status, since, until, cursor, limit))

    def iter(
        self,
        *,
        status: str | None = None,
        since: str | _dt.datetime | None = None,
        until: str | _dt.datetime | None = None,
        page_size: int | None = None,
    ) -> Iterator[m.ExecutionSummary]:
        """Every execution, newest first, page after page."""
        return _pages(
            lambda cursor: self.list(
                status=status, since=since, until=until, limit=page_size, cursor=cursor
            ),
            "executions",
        )


def _streamed(item: m.StreamedItemView, view: m.ExecutionView) -> m.StreamedItemView:
    data = view.model_dump(exclude={"id"})
    return m.StreamedItemView.model_validate(
        {**data, "index": item.index, "id": item.id, "execution_id": item.execution_id}
    )


class Jobs:
    """Generation and agent jobs: ``client.jobs``."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def submit(
        self,
        request: m.JobSubmission | str | Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> m.JobAccepted | m.JobResult:
        """``POST /v1/jobs``: ``JobAccepted`` (202), or the ``JobResult`` at once when the
        solution cache answered (200). Both have ``job_id``. ``request``: a ``JobSubmission``,
        its fields as a mapping, or the instruction (with the other fields as keywords)."""
        body = b.job_body(request, fields)
        return self._c._call(b.submit_job(body, idempotency_key=idempotency_key))

    def submit_agent(
        self,
        instruction: str,
        *,
        language: str | None = None,
        files: Mapping[str, str] | None = None,
        agent: m.AgentSettings | Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> m.JobAccepted | m.JobResult:
        """``POST /v1/jobs`` with ``mode: "agent"``: a tool-using agent on a session of its
        own works at ``instruction`` until it calls ``finish`` or a budget ends the run.
        ``files``: put into its working directory first (path → UTF-8 text). ``fields``: the
        run's settings (``AgentSettings``: ``max_steps``, ``max_seconds``, ``max_cpu_ms``,
        ``stuck_repeats``, ``stuck_errors``, ``max_observation_chars``, ``seed``,
        ``temperature``), over those of ``agent``, and the job's others (``max_tokens_total``,
        ``callback_url``)."""
        body = b.agent_job_body(
            instruction, language=language, files=files, agent=agent, fields=fields
        )
        return self._c._call(b.submit_job(body, idempotency_key=idempotency_key))

    def run_agent(
        self,
        instruction: str,
        *,
        language: str | None = None,
        files: Mapping[str, str] | None = None,
        agent: m.AgentSettings | Mapping[str, Any] | None = None,
        on_progress: Callable[[m.JobEvent], None] | None = None,
        timeout: float | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> m.JobResult:
        """Submits an agent job (see ``submit_agent``) and waits for its result, whose
        ``agent`` says how the run ended; ``on_progress`` gets each event (an
        ``agent_step`` per recorded step)."""
        accepted = self.submit_agent(
            instruction,
            language=language,
            files=files,
            agent=agent,
            idempotency_key=idempotency_key,
            **fields,
        )
        if isinstance(accepted, m.JobResult):
            return accepted
        return self.wait(accepted.job_id, on_progress=on_progress, timeout=timeout)

    def get(self, job_id: str) -> m.JobResult | m.JobProgress:
        """``GET /v1/jobs/{id}``: the result once the job ended, its progress before."""
        return self._c._call(b.get_job(job_id))

    def transcript(self, job_id: str) -> list[dict[str, Any]]:
        """``GET /v1/jobs/{id}/transcript``: an agent job's steps as OpenAI chat messages (the
        system prompt, the task, each answer with its ``tool_calls``, each call's ``tool``
        result), those recorded so far while it runs. ``NotAnAgentJob`` for another job."""
        return self._c._call(b.job_transcript(job_id))

    def cancel(self, job_id: str) -> m.JobResult:
        """``DELETE /v1/jobs/{id}``: the job's result, ``cancelled``, with what it had
        produced (``AlreadyEnded`` when it had succeeded or failed)."""
        return self._c._call(b.cancel_job(job_id))

    def events(
        self,
        job_id: str,
        *,
        last_event_id: str | None = None,
        max_reconnects: int = 5,
    ) -> Iterator[m.JobEvent]:
        """The job's progress as it happens (``GET /v1/jobs/{id}/events``, server-sent
        events), ending with its ``finished`` event. A stream that breaks is opened again with
        ``Last-Event-ID`` (the last event received), so no event is lost or repeated; after
        ``max_reconnects`` failures in a row without an event the error is raised. Start
        after an event with ``last_event_id``."""
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
            response = self._c._send(call, stream=True)
            retry_ms: int | None = None
            try:
                for sse in httpx_sse.EventSource(response).iter_sse():
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
                return  # ended by the server without `finished`: the job's state is gone
            except httpx.TransportError as e:
                failures += 1
                if failures > max_reconnects:
                    raise b.transport_error(e, response.request) from e
                wait = (
                    retry_ms / 1000 if retry_ms else self._c.settings.retry.wait_for(None, failures)
                )
                self._c._sleep(wait)
            finally:
                response.close()

    def wait(
        self,
        job_id: str,
        *,
        on_progress: Callable[[m.JobEvent], None] | None = None,
        timeout: float | None = None,
    ) -> m.JobResult:
        """Follows the job's events until it ends (calling ``on_progress`` with each) and
        returns its result. ``timeout`` (seconds) is checked as each event arrives, raising
        ``TimeoutError``."""
        deadline = _Deadline(timeout)
        for event in self.events(job_id):
            if on_progress is not None:
                on_progress(event)
            deadline.check(f"job {job_id}")
        nap = 0.25
        while True:  # the result is stored with the `finished` event; poll in case it lags
            view = self.get(job_id)
            if isinstance(view, m.JobResult):
                return view
            deadline.check(f"job {job_id}")
            self._c._sleep(nap)
            nap = min(nap * 2, 2.0)

    def run(
        self,
        request: m.JobSubmission | str | Mapping[str, Any],
        *,
        on_progress: Callable[[m.JobEvent], None] | None = None,
        timeout: float | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> m.JobResult:
        """Submits a job and waits for its result."""
        accepted = self.submit(request, idempotency_key=idempotency_key, **fields)
        if isinstance(accepted, m.JobResult):
            return accepted
        return self.wait(accepted.job_id, on_progress=on_progress, timeout=timeout)

    def list(
        self,
        *,
        status: str | None = None,
        since: str | _dt.datetime | None = None,
        until: str | _dt.datetime | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> m.JobList:
        """``GET /v1/jobs``: one page, newest first; pass ``next_cursor`` as ``cursor``."""
        return self._c._call(b.list_jobs(status, since, until, cursor, limit))

    def iter(
        self,
        *,
        status: str | None = None,
        since: str | _dt.datetime | None = None,
        until: str | _dt.datetime | None = None,
        page_size: int | None = None,
    ) -> Iterator[m.JobSummary]:
        """Every job, newest first, page after page."""
        return _pages(
            lambda cursor: self.list(
                status=status, since=since, until=until, limit=page_size, cursor=cursor
            ),
            "jobs",
        )


class Batches:
    """Batches of jobs: ``client.batches``."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def submit(
        self,
        jobs: Iterable[m.JobSubmission | str | Mapping[str, Any]],
        *,
        callback_url: str | None = None,
        idempotency_key: str | None = None,
    ) -> m.BatchAccepted:
        """``POST /v1/batches`` (one NDJSON line per job): the batch id and its jobs' ids."""
        return self._c._call(
            b.submit_batch(jobs, callback_url=callback_url, idempotency_key=idempotency_key)
        )

    def get(
        self, batch_id: str, *, wait_ms: int | None = None, finished: int | None = None
    ) -> m.BatchView:
        """``GET /v1/batches/{id}``; with ``wait_ms``, a long poll that answers once the
        number of finished jobs differs from ``finished`` (or the batch is done)."""
        return self._c._call(b.get_batch(batch_id, wait_ms, finished))

    def wait(
        self,
        batch_id: str,
        *,
        on_update: Callable[[m.BatchView], None] | None = None,
        timeout: float | None = None,
        poll_ms: int = 25_000,
    ) -> m.BatchView:
        """Long-polls the batch until every job has ended, calling ``on_update`` with each
        view that differs from the last."""
        deadline = _Deadline(timeout)
        view = self.get(batch_id)
        while True:
            if on_update is not None:
                on_update(view)
            if view.done:
                return view
            deadline.check(f"batch {batch_id}")
            view = self.get(batch_id, wait_ms=poll_ms, finished=view.finished_jobs)

    def results(
        self, batch_id: str, *, cursor: str | None = None, limit: int | None = None
    ) -> m.BatchResults:
        """``GET /v1/batches/{id}/results``: one page of the batch's jobs in input order
        (``limit`` 1 to 200, the server's default 50), each as ``jobs.get`` answers it
        (``JobResult`` once it ended, ``JobProgress`` before) or ``ExpiredJob`` once its
        state has expired; pass ``next_cursor`` as ``cursor`` for the next page."""
        return self._c._call(b.get_batch_results(batch_id, cursor, limit))

    def iter_results(
        self, batch_id: str, *, page_size: int | None = None
    ) -> Iterator[m.JobResult | m.JobProgress | m.ExpiredJob]:
        """Every job of the batch in input order, page after page (``page_size`` up to 200):
        a finished batch of N jobs in N / ``page_size`` requests instead of N."""
        return _pages(
            lambda cursor: self.results(batch_id, cursor=cursor, limit=page_size), "results"
        )

    def cancel(self, batch_id: str) -> m.BatchView:
        """``DELETE /v1/batches/{id}``: cancels every unfinished job of the batch."""
        return self._c._call(b.cancel_batch(batch_id))

    def list(
        self,
        *,
        status: str | None = None,
        since: str | _dt.datetime | None = None,
        until: str | _dt.datetime | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> m.BatchList:
        """``GET /v1/batches``: one page, newest first."""
        return self._c._call(b.list_batches(status, since, until, cursor, limit))

    def iter(
        self,
        *,
        status: str | None = None,
        since: str | _dt.datetime | None = None,
        until: str | _dt.datetime | None = None,
        page_size: int | None = None,
    ) -> Iterator[m.BatchSummary]:
        return _pages(
            lambda cursor: self.list(
                status=status, since=since, until=until, limit=page_size, cursor=cursor
            ),
            "batches",
        )


class Sessions:
    """Stateful sessions: ``client.sessions``."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def open(
        self,
        language: str,
        *,
        memory_mb: int | None = None,
        idle_timeout_s: int | None = None,
        packages: Iterable[str] | None = None,
    ) -> Session:
        """``POST /v1/sessions``: a live session, as a ``Session`` handle (a context manager
        that deletes it on exit)."""
        create = b.session_create(language, memory_mb, idle_timeout_s, packages)
        return Session(self, self._c._call(b.open_session(create)))

    def get(self, session_id: str) -> m.SessionView:
        return self._c._call(b.get_session(session_id))

    def list(self) -> m.SessionList:
        """``GET /v1/sessions``: the tenant's sessions, live and ended, newest first."""
        return self._c._call(b.list_sessions())

    def delete(self, session_id: str) -> m.SessionView:
        """``DELETE /v1/sessions/{id}``: ends the session (its container and files go)."""
        return self._c._call(b.delete_session(session_id))

    def run(self, session_id: str, code: str, *, timeout_ms: int | None = None) -> m.CellResult:
        """``POST /v1/sessions/{id}/run``: runs a cell after the ones before it."""
        return self._c._call(b.run_cell(session_id, code, timeout_ms))

    def files(self, session_id: str) -> m.SessionFiles:
        return self._c._call(b.list_session_files(session_id))

    def upload(self, session_id: str, path: str, data: bytes | str) -> None:
        """``PUT /v1/sessions/{id}/files/{path}`` (relative to the working directory)."""
        self._c._call(b.upload_session_file(session_id, path, data))

    def download(self, session_id: str, path: str) -> bytes:
        return self._c._call(b.download_session_file(session_id, path))


class Lessons:
    """The memory of repairs: ``client.lessons``. Each call names a set: the caller's own
    (the default), another tenant's (``tenant``, for ``coordinator.admin_tenants``) or the
    operators' shared one (``shared=True``; changed by admins only)."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def list(
        self,
        q: str | None = None,
        *,
        language: str | None = None,
        limit: int | None = None,
        tenant: str | None = None,
        shared: bool = False,
    ) -> m.LessonList:
        """``GET /v1/lessons``: newest first, or with ``q`` (words searched for in the
        signature, case, analysis and diff) nearest first; ``limit`` 1 to 500 (default
        100)."""
        return self._c._call(b.list_lessons(q, language, limit, tenant, shared))

    def get(
        self, lesson_id: str, *, tenant: str | None = None, shared: bool = False
    ) -> m.LessonView:
        """``GET /v1/lessons/{id}``: the lesson with its latest uses (``NotFound`` when the
        set has no such lesson)."""
        return self._c._call(b.get_lesson(lesson_id, tenant, shared))

    def delete(self, lesson_id: str, *, tenant: str | None = None, shared: bool = False) -> None:
        """``DELETE /v1/lessons/{id}``: later repairs are no longer shown it."""
        self._c._call(b.delete_lesson(lesson_id, tenant, shared))

    def export(self, *, tenant: str | None = None, shared: bool = False) -> list[m.Lesson]:
        """``GET /v1/lessons/export``: every lesson of the set (JSON Lines, newest first),
        without counts: what ``import_`` takes."""
        return self._c._call(b.export_lessons(tenant, shared))

    def import_(
        self,
        lessons: Iterable[m.Lesson | Mapping[str, Any]],
        *,
        tenant: str | None = None,
        shared: bool = False,
    ) -> m.LessonImport:
        """``POST /v1/lessons/import`` (one JSON line per lesson): adds them to the set within
        its bounds, the least useful evicted. Every line is checked before any is added (an
        ``InvalidField`` whose ``param`` names the line refuses them all)."""
        return self._c._call(b.import_lessons(lessons, tenant, shared))


class Session:
    """One open session: ``run`` cells, ``upload``/``download``/``files``, ``delete``."""

    def __init__(self, sessions: Sessions, view: m.SessionView) -> None:
        self._sessions = sessions
        self.view = view

    @property
    def id(self) -> str:
        return self.view.id

    def run(self, code: str, *, timeout_ms: int | None = None) -> m.CellResult:
        return self._sessions.run(self.id, code, timeout_ms=timeout_ms)

    def upload(self, path: str, data: bytes | str) -> None:
        self._sessions.upload(self.id, path, data)

    def download(self, path: str) -> bytes:
        return self._sessions.download(self.id, path)

    def files(self) -> m.SessionFiles:
        return self._sessions.files(self.id)

    def refresh(self) -> m.SessionView:
        self.view = self._sessions.get(self.id)
        return self.view

    def delete(self) -> m.SessionView:
        self.view = self._sessions.delete(self.id)
        return self.view

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.delete()

    def __repr__(self) -> str:
        return (
            f"Session(id={self.id!r}, language={self.view.language!r}, state={self.view.state!r})"
        )
