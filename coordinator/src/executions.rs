//! The execution routes: run a program, many programs, read a verdict.

use proto::api::ErrorCode;
use std::pin::Pin;
use tracing::Instrument;

use tokio::sync::futures::Notified;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use broker::Outgoing;
use proto::api::{
    BatchItemView, ErrorBody, ExecutionBatch, ExecutionBatchRecord, ExecutionBatchView,
    ExecutionSubmission, ExecutionView, Outcome, Pending, StreamedItemView,
};
use proto::{
    Envelope, ExecutionMeta, ExecutionRequest, ExecutionResult, Language, Status, Task, TaskId,
};
use serde::Deserialize;

use crate::auth::Tenant;
use crate::body::read_body;
use crate::error::{ApiError, path_rejected, unavailable};
use crate::request_id::RequestIdOf;
use crate::{Coordinator, now_ms};
use store::index::Kind;
use store::webhooks::HookKind;

/// With notices (Redis), a batch's verdicts are read when one is stored, a moment later so that
/// those landing together are read together, and at least every `NOTICE_SAFETY_POLL`.
const NOTICE_COALESCE: std::time::Duration = std::time::Duration::from_millis(2);
const NOTICE_SAFETY_POLL: std::time::Duration = std::time::Duration::from_millis(500);
/// Without notices (the in-memory store), waiting for verdicts polls: first after
/// `POLL_FIRST`, doubling up to `POLL_MAX`.
const POLL_FIRST: std::time::Duration = std::time::Duration::from_millis(2);
const POLL_MAX: std::time::Duration = std::time::Duration::from_millis(50);
/// While a streamed batch's verdicts flow, one read per this at most: each read is an MGET of
/// every pending id of the batch.
const POLL_FLOWING: std::time::Duration = std::time::Duration::from_millis(10);

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct SubmitParams {
    /// Wait for the verdict (default, up to `coordinator.wait`) or answer 202 with the id at
    /// once.
    #[serde(default = "yes")]
    #[param(default = true)]
    wait: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct BatchParams {
    /// Wait for the verdicts (default, up to `coordinator.wait`) or answer 202 at once.
    #[serde(default = "yes")]
    #[param(default = true)]
    wait: bool,
    /// Answer `application/x-ndjson`: one line per item as its verdict comes in (completion
    /// order, each with its `index`), until every item has one or none came for
    /// `coordinator.wait`; items still without one then follow as `queued`.
    #[serde(default)]
    #[param(default = false)]
    stream: bool,
}

/// Checks a submission against the configured limits and fills in defaults.
pub(crate) fn validate(
    options: &crate::Options,
    submission: ExecutionSubmission,
) -> Result<ExecutionRequest, ApiError> {
    let language: Language = submission
        .language
        .parse()
        .map_err(|e| ApiError::invalid("language", e))?;
    if submission.code.len() > options.max_code_bytes {
        return Err(ApiError::invalid(
            "code",
            format!(
                "{} bytes is over the limit of {} bytes",
                submission.code.len(),
                options.max_code_bytes
            ),
        ));
    }
    let stdin_len = submission.stdin.as_ref().map_or(0, String::len);
    if stdin_len > options.max_stdin_bytes {
        return Err(ApiError::invalid(
            "stdin",
            format!(
                "{stdin_len} bytes is over the limit of {} bytes",
                options.max_stdin_bytes
            ),
        ));
    }
    let timeout_ms = submission.timeout_ms.unwrap_or(options.default_timeout_ms);
    if timeout_ms == 0 || timeout_ms > options.max_timeout_ms {
        return Err(ApiError::invalid(
            "timeout_ms",
            format!("must be between 1 and {}", options.max_timeout_ms),
        ));
    }
    if let Some(cpu) = submission.cpu_time_ms
        && (cpu == 0 || cpu > options.max_timeout_ms)
    {
        return Err(ApiError::invalid(
            "cpu_time_ms",
            format!("must be between 1 and {}", options.max_timeout_ms),
        ));
    }
    if let Some(compile) = submission.compile_timeout_ms
        && (compile == 0 || compile > options.max_timeout_ms)
    {
        return Err(ApiError::invalid(
            "compile_timeout_ms",
            format!("must be between 1 and {}", options.max_timeout_ms),
        ));
    }
    // Only a compiled language compiles; the others take none.
    let compile_timeout_ms = language.spec().compiled.then(|| {
        submission
            .compile_timeout_ms
            .unwrap_or(options.default_compile_timeout_ms)
    });
    let memory_mb = submission.memory_mb.unwrap_or(options.default_memory_mb);
    if !(options.min_memory_mb..=options.max_memory_mb).contains(&memory_mb) {
        return Err(ApiError::invalid(
            "memory_mb",
            format!(
                "must be between {} and {}",
                options.min_memory_mb, options.max_memory_mb
            ),
        ));
    }
    let files = submission.files.unwrap_or_default();
    let return_files = submission.return_files.unwrap_or_default();
    for (field, count) in [("files", files.len()), ("return_files", return_files.len())] {
        if count > proto::execution::MAX_FILES {
            return Err(ApiError::invalid(
                field,
                format!(
                    "{count} files is over the limit of {}",
                    proto::execution::MAX_FILES
                ),
            ));
        }
    }
    for path in files.keys() {
        proto::execution::check_file_path(path).map_err(|e| ApiError::invalid("files", e))?;
    }
    for path in &return_files {
        proto::execution::check_file_path(path)
            .map_err(|e| ApiError::invalid("return_files", e))?;
    }
    // Files and the test are code too: all of it shares the code size limit.
    let test_bytes = submission.test.as_ref().map_or(0, String::len);
    let code_bytes = submission.code.len()
        + test_bytes
        + files.values().map(proto::FileContent::len).sum::<usize>();
    if code_bytes > options.max_code_bytes {
        let field = if test_bytes > 0 { "test" } else { "files" };
        return Err(ApiError::invalid(
            field,
            format!(
                "code, test and files together are {code_bytes} bytes, over the limit of {} bytes",
                options.max_code_bytes
            ),
        ));
    }
    Ok(ExecutionRequest {
        language,
        code: submission.code,
        stdin: submission.stdin,
        test: submission.test,
        timeout_ms,
        compile_timeout_ms,
        cpu_time_ms: submission.cpu_time_ms,
        memory_mb,
        fresh_container: submission.fresh_container.unwrap_or(false),
        files,
        return_files,
    })
}

/// Runs a program in the sandbox.
///
/// Answers with the verdict once a worker stored it, or 202 with the id (and a `Location` to
/// poll) with `?wait=false` or when the verdict takes longer than `coordinator.wait`.
#[utoipa::path(
    post,
    path = "/v1/executions",
    operation_id = "submit_execution",
    tag = "executions",
    params(SubmitParams),
    request_body = ExecutionSubmission,
    responses(
        (status = 200, description = "The verdict.", body = ExecutionView),
        (status = 202, description = "Queued: no verdict yet (`status` is `queued`).",
            body = ExecutionView, headers(("Location" = String, description = "Where to poll."))),
        (status = 400, description = "Malformed body or query (not JSON, unknown field).", body = ErrorBody),
        (status = 413, description = "Body over `coordinator.max_body_bytes`.", body = ErrorBody),
        (status = 422, description = "A value out of range; the message names the field.", body = ErrorBody),
        (status = 503, description = "Redis or the broker is unavailable; nothing was queued.", body = ErrorBody),
    )
)]
pub(crate) async fn submit(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    RequestIdOf(request_id): RequestIdOf,
    params: Result<Query<SubmitParams>, QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let Query(params) = params.map_err(crate::error::query_rejected)?;
    let submission: ExecutionSubmission = read_body(body)?;
    if submission.id.is_some() {
        return Err(ApiError::invalid(
            "id",
            "only items of POST /v1/executions/batch take an id",
        ));
    }
    let request = validate(&c.options, submission)?;
    let language = request.language;
    let id = TaskId::new();
    accept(
        &c,
        &tenant,
        request_id.as_deref(),
        "/v1/executions",
        id,
        request,
    )
    .await?;
    tracing::debug!(%id, %language, "execution queued");

    let result = if params.wait {
        match c.stores.executions.wait_execution(id, c.options.wait).await {
            Ok(result) => result,
            Err(e) => {
                tracing::warn!(%id, error = %e, "cannot wait for the result; answering 202");
                None
            }
        }
    } else {
        None
    };
    Ok(match result {
        Some(result) => (StatusCode::OK, view(id, Outcome::Done(result))).into_response(),
        None => (
            StatusCode::ACCEPTED,
            [(header::LOCATION, format!("/v1/executions/{id}"))],
            view(
                id,
                Outcome::Pending {
                    status: Pending::Queued,
                },
            ),
        )
            .into_response(),
    })
}

/// Runs many programs at once, fanned out across every worker.
///
/// Every item is checked before anything is queued (a bad item is a 422 naming
/// `items[i].field`). Answers with every result in input order once all are in, or 202 with
/// the results so far (the rest `queued`, each pollable at `/v1/executions/{execution_id}`)
/// with `?wait=false` or when they take longer than `coordinator.wait`. With `?stream=true`
/// the answer is `application/x-ndjson`, one `StreamedItemView` line per item as soon as its
/// verdict is in.
#[utoipa::path(
    post,
    path = "/v1/executions/batch",
    operation_id = "submit_execution_batch",
    tag = "executions",
    params(BatchParams),
    request_body = ExecutionBatch,
    responses(
        (status = 200, description = "Every verdict, in input order; with `?stream=true`, one line per item as its verdict comes in.",
         content((ExecutionBatchView = "application/json"), (Vec<StreamedItemView> = "application/x-ndjson"))),
        (status = 202, description = "Not all verdicts yet: the others are `queued`.", body = ExecutionBatchView),
        (status = 400, description = "Malformed body or query; the message names the field.", body = ErrorBody),
        (status = 413, description = "Body over `coordinator.max_batch_body_bytes`.", body = ErrorBody),
        (status = 422, description = "An item out of range (`items[i].field`), no items or too many.", body = ErrorBody),
        (status = 503, description = "Redis or the broker is unavailable; nothing was queued.", body = ErrorBody),
    )
)]
pub(crate) async fn submit_batch(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    RequestIdOf(request_id): RequestIdOf,
    params: Result<Query<BatchParams>, QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    use futures::StreamExt;

    let Query(params) = params.map_err(crate::error::query_rejected)?;
    let batch: ExecutionBatch = read_body(body)?;
    if let Some(url) = &batch.callback_url {
        c.check_callback("callback_url", tenant.0.as_deref(), url)
            .await?;
    }
    let callback = batch.callback_url;
    let total = batch.items.len();
    if total == 0 || total > c.options.max_batch_executions {
        return Err(ApiError::invalid(
            "items",
            format!(
                "{total} items: a batch holds 1 to {}",
                c.options.max_batch_executions
            ),
        ));
    }
    // Check everything first: a bad item queues nothing.
    let mut prepared = Vec::with_capacity(total);
    for (i, mut item) in batch.items.into_iter().enumerate() {
        let label = item.id.take();
        if label
            .as_ref()
            .is_some_and(|l| l.chars().count() > MAX_LABEL_CHARS)
        {
            return Err(ApiError::invalid(
                &format!("items[{i}].id"),
                format!("longer than {MAX_LABEL_CHARS} characters"),
            ));
        }
        let request = validate(&c.options, item).map_err(|e| e.within(&format!("items[{i}]")))?;
        let id = TaskId::new();
        prepared.push((label.unwrap_or_else(|| id.to_string()), id, request));
    }
    let submitted_at_ms = now_ms();
    let ids: Vec<TaskId> = prepared.iter().map(|(_, id, _)| *id).collect();
    c.refuse_without_broker()?;
    crate::quotas::admit(&c, Kind::Executions, &tenant, &ids).await?;
    let batch_id = callback.as_ref().map(|_| TaskId::new());
    let recorded = async {
        c.list(Kind::Executions, tenant.0.as_deref(), submitted_at_ms, &ids)
            .await?;
        // Before anything is queued: the last verdict must find the webhook waiting.
        if let (Some(id), Some(url), Some((store, _))) = (batch_id, &callback, c.webhooks()) {
            let record = ExecutionBatchRecord {
                id,
                tenant: tenant.0.clone(),
                items: prepared
                    .iter()
                    .map(|(label, id, _)| (label.clone(), *id))
                    .collect(),
            };
            store
                .register_execution_batch(&record, url)
                .await
                .map_err(unavailable)?;
        }
        Ok::<(), ApiError>(())
    }
    .await;
    if let Err(e) = recorded {
        crate::quotas::release(&c, Kind::Executions, &tenant, &ids).await;
        return Err(e);
    }
    let work: Vec<(TaskId, ExecutionRequest)> = prepared
        .iter()
        .map(|(_, id, request)| (*id, request.clone()))
        .collect();
    let queued: Vec<Result<(), ApiError>> = futures::stream::iter(work)
        .map(|(id, request)| {
            let (c, tenant, request_id) = (c.clone(), tenant.clone(), request_id.clone());
            async move {
                enqueue(
                    &c,
                    &tenant,
                    request_id.as_deref(),
                    "/v1/executions/batch",
                    id,
                    submitted_at_ms,
                    request,
                )
                .await
            }
        })
        .buffered(64)
        .collect()
        .await;
    let unqueued: Vec<TaskId> = ids
        .iter()
        .zip(&queued)
        .filter_map(|(id, queued)| queued.is_err().then_some(*id))
        .collect();
    crate::quotas::release(&c, Kind::Executions, &tenant, &unqueued).await;
    if queued.iter().all(Result::is_err)
        && let Some(Err(e)) = queued.into_iter().next()
    {
        return Err(e);
    }
    tracing::debug!(items = total, "execution batch queued");
    let items: Vec<(String, TaskId, Language)> = prepared
        .into_iter()
        .map(|(label, id, request)| (label, id, request.language))
        .collect();
    if params.stream {
        return Ok(stream_batch(c, items));
    }

    let mut results: Vec<Option<ExecutionResult>> = vec![None; total];
    if params.wait {
        let deadline = tokio::time::Instant::now() + c.options.wait;
        let watch = c.stores.executions.watch(&ids);
        let mut nap = POLL_FIRST;
        loop {
            let notified = enabled(watch.as_ref());
            poll_results(&c, &items, &mut results).await;
            if results.iter().all(Option::is_some) || tokio::time::Instant::now() >= deadline {
                break;
            }
            next_read(notified, nap, deadline).await;
            nap = (nap * 2).min(POLL_MAX);
        }
    }
    let done = results.iter().filter(|r| r.is_some()).count();
    let views: Vec<BatchItemView> = items
        .into_iter()
        .zip(results)
        .map(|((label, id, _), result)| item_view(label, id, result))
        .collect();
    let status = if done == total {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok((
        status,
        axum::Json(ExecutionBatchView {
            done,
            total,
            results: views,
            batch_id,
            webhook: match batch_id {
                Some(id) => c.webhook_view(HookKind::ExecutionBatch, id).await,
                None => None,
            },
        }),
    )
        .into_response())
}

/// Reads the verdicts of the items still without one (one MGET); returns the indexes that got
/// theirs, each counted in the executions metric once.
async fn poll_results(
    c: &Coordinator,
    items: &[(String, TaskId, Language)],
    results: &mut [Option<ExecutionResult>],
) -> Vec<usize> {
    let pending: Vec<usize> = (0..items.len()).filter(|i| results[*i].is_none()).collect();
    if pending.is_empty() {
        return pending;
    }
    let pending_ids: Vec<TaskId> = pending.iter().map(|i| items[*i].1).collect();
    let found = match c.stores.executions.execution_results(&pending_ids).await {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read batch results yet");
            return vec![];
        }
    };
    let mut arrived = Vec::new();
    for (i, result) in pending.into_iter().zip(found) {
        if let Some(result) = result {
            results[i] = Some(result);
            arrived.push(i);
        }
    }
    arrived
}

/// An execution batch kept for its webhook, as `GET /v1/executions/batches/{id}` and its
/// webhook show it.
pub(crate) async fn execution_batch_view(
    c: &Coordinator,
    record: &ExecutionBatchRecord,
) -> Result<ExecutionBatchView, store::Error> {
    let ids: Vec<TaskId> = record.items.iter().map(|(_, id)| *id).collect();
    let results = c.stores.executions.execution_results(&ids).await?;
    let done = results.iter().filter(|r| r.is_some()).count();
    Ok(ExecutionBatchView {
        done,
        total: ids.len(),
        results: record
            .items
            .iter()
            .zip(results)
            .map(|((label, id), result)| item_view(label.clone(), *id, result))
            .collect(),
        batch_id: Some(record.id),
        webhook: c.webhook_view(HookKind::ExecutionBatch, record.id).await,
    })
}

/// An execution batch that was given a `callback_url`: its items' verdicts so far and its
/// webhook's attempts.
#[utoipa::path(
    get,
    path = "/v1/executions/batches/{id}",
    operation_id = "get_execution_batch",
    tag = "executions",
    params(("id" = TaskId, Path, description = "The `batch_id` of `POST /v1/executions/batch`.")),
    responses(
        (status = 200, description = "Every item, in input order, and the webhook.", body = ExecutionBatchView),
        (status = 404, description = "No such batch (not a batch id, another tenant's, or one without a `callback_url`: only those are kept).", body = ErrorBody),
        (status = 503, description = "Redis is unavailable.", body = ErrorBody),
    )
)]
pub(crate) async fn fetch_batch(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(id) = id.map_err(path_rejected)?;
    // Not an id is no such batch: what an item's label (`results[].id`, which tools may take
    // for this path's `id`) finds here.
    let Ok(id) = id.parse::<TaskId>() else {
        return Err(crate::error::not_found(format!("no execution batch {id}")));
    };
    let record = match c.webhooks() {
        Some((store, _)) => store.execution_batch(id).await.map_err(unavailable)?,
        None => None,
    };
    let Some(record) = record.filter(|r| tenant.sees(&r.tenant)) else {
        return Err(crate::error::not_found(format!("no execution batch {id}")));
    };
    let view = execution_batch_view(&c, &record)
        .await
        .map_err(unavailable)?;
    Ok(axum::Json(view).into_response())
}

/// A wake-up for the next read of a batch's verdicts, registered before the read it follows
/// (so a verdict stored in between is not missed); `None` without notices.
fn enabled(watch: Option<&store::Watch>) -> Option<Pin<Box<Notified<'_>>>> {
    watch.map(|watch| {
        let mut notified = Box::pin(watch.notified());
        notified.as_mut().enable();
        notified
    })
}

/// Until the next read of a batch's verdicts: a verdict's notice (then a moment more, so
/// verdicts landing together are read in one round trip), else `nap` (the safety net, or the
/// poll of a store that sends no notices); never past `until`.
async fn next_read(
    notified: Option<Pin<Box<Notified<'_>>>>,
    nap: std::time::Duration,
    until: tokio::time::Instant,
) {
    let nap = if notified.is_some() {
        NOTICE_SAFETY_POLL
    } else {
        nap
    }
    .min(until.saturating_duration_since(tokio::time::Instant::now()));
    match notified {
        Some(notified) => tokio::select! {
            () = notified => tokio::time::sleep(NOTICE_COALESCE).await,
            () = tokio::time::sleep(nap) => {}
        },
        None => tokio::time::sleep(nap).await,
    }
}

fn item_view(label: String, id: TaskId, result: Option<ExecutionResult>) -> BatchItemView {
    BatchItemView {
        id: label,
        execution_id: id,
        outcome: match result {
            Some(result) => Outcome::Done(result),
            None => Outcome::Pending {
                status: Pending::Queued,
            },
        },
    }
}

/// The `?stream=true` answer: a line per item as its verdict arrives; when none arrived for
/// `coordinator.wait`, the rest as `queued` (a client polls those by `execution_id`).
fn stream_batch(c: Coordinator, items: Vec<(String, TaskId, Language)>) -> Response {
    let (lines, rx) = tokio::sync::mpsc::channel::<Bytes>(256);
    tokio::spawn(async move {
        let line = |index: usize, label: &str, id: TaskId, result: Option<ExecutionResult>| {
            let view = StreamedItemView {
                index,
                item: item_view(label.to_owned(), id, result),
            };
            let mut text = serde_json::to_vec(&view).expect("a view serializes");
            text.push(b'\n');
            Bytes::from(text)
        };
        let mut results: Vec<Option<ExecutionResult>> = vec![None; items.len()];
        let mut idle_until = tokio::time::Instant::now() + c.options.wait;
        let ids: Vec<TaskId> = items.iter().map(|(_, id, _)| *id).collect();
        let watch = c.stores.executions.watch(&ids);
        let mut nap = POLL_FIRST;
        while results.iter().any(Option::is_none) && tokio::time::Instant::now() < idle_until {
            let notified = enabled(watch.as_ref());
            let arrived = poll_results(&c, &items, &mut results).await;
            if !arrived.is_empty() {
                idle_until = tokio::time::Instant::now() + c.options.wait;
                nap = POLL_FLOWING;
            }
            for i in arrived {
                let (label, id, _) = &items[i];
                if lines
                    .send(line(i, label, *id, results[i].clone()))
                    .await
                    .is_err()
                {
                    return; // the client went away; the executions run on regardless
                }
            }
            if results.iter().all(Option::is_some) {
                break;
            }
            next_read(notified, nap, idle_until).await;
            nap = (nap * 2).min(POLL_MAX);
        }
        for (i, (label, id, _)) in items.iter().enumerate() {
            if results[i].is_none() && lines.send(line(i, label, *id, None)).await.is_err() {
                return;
            }
        }
    });
    let body = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|bytes| (Ok::<_, std::convert::Infallible>(bytes), rx))
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        axum::body::Body::from_stream(body),
    )
        .into_response()
}

/// Longest `id` of a batch item, in characters (as the document's `maxLength` counts).
pub(crate) const MAX_LABEL_CHARS: usize = 256;

/// Admits one execution against its tenant's quotas, lists it, records it and publishes its
/// task: `POST /v1/executions` and `/run_code`. A place admitted for nothing is given back.
pub(crate) async fn accept(
    c: &Coordinator,
    tenant: &Tenant,
    request_id: Option<&str>,
    route: &'static str,
    id: TaskId,
    request: ExecutionRequest,
) -> Result<(), ApiError> {
    let at = now_ms();
    c.refuse_without_broker()?;
    crate::quotas::admit(c, Kind::Executions, tenant, &[id]).await?;
    let queued = async {
        c.list(Kind::Executions, tenant.0.as_deref(), at, &[id])
            .await?;
        enqueue(c, tenant, request_id, route, id, at, request).await
    }
    .await;
    if queued.is_err() {
        crate::quotas::release(c, Kind::Executions, tenant, &[id]).await;
    }
    queued
}

/// Records an execution and publishes its task. When publishing fails the record says so
/// (`error`, "not queued"), so that nothing waits on a task no worker will ever see.
pub(crate) async fn enqueue(
    c: &Coordinator,
    tenant: &Tenant,
    request_id: Option<&str>,
    route: &'static str,
    id: TaskId,
    submitted_at_ms: u64,
    request: ExecutionRequest,
) -> Result<(), ApiError> {
    // Record first, so whatever a worker does with the task is visible under this id.
    let meta = ExecutionMeta {
        tenant: tenant.0.clone(),
        submitted_at_ms,
        language: request.language,
    };
    c.stores
        .executions
        .create_execution(id, &meta)
        .await
        .map_err(unavailable)?;
    // Counted once recorded: from here it ends with a verdict, a worker's or ours.
    let language = request.language;
    c.metrics
        .executions_submitted
        .with_label_values(&[language.as_str(), route])
        .inc();
    let envelope = Envelope::new(
        id,
        tenant.0.clone(),
        submitted_at_ms,
        Task::Execute(request),
    )
    .with_request_id(request_id.map(str::to_owned));
    let span = telemetry::publish_span(&id.to_string(), "execute", None);
    let headers = telemetry::inject(&span);
    let published = c
        .broker
        .publish_execution(Outgoing {
            message_id: id.to_string(),
            body: envelope.encode(),
            lane: tenant.0.clone(),
            headers,
        })
        .instrument(span)
        .await;
    if let Err(e) = published {
        let reason = format!("not queued: {e}");
        let result = ExecutionResult::error(Status::Error, reason.clone());
        let _ = c
            .finish_execution(id, tenant.0.as_deref(), Some(language), &result)
            .await;
        return Err(ApiError::new(ErrorCode::NotQueued, reason));
    }
    Ok(())
}

/// An execution: its verdict, or `queued` while no worker has finished it.
#[utoipa::path(
    get,
    path = "/v1/executions/{id}",
    operation_id = "get_execution",
    tag = "executions",
    params(("id" = TaskId, Path, description = "Execution id.")),
    responses(
        (status = 200, description = "The verdict, or `status: queued`.", body = ExecutionView),
        (status = 400, description = "Not an execution id.", body = ErrorBody),
        (status = 404, description = "No such execution (or another tenant's).", body = ErrorBody),
        (status = 503, description = "Redis is unavailable.", body = ErrorBody),
    )
)]
pub(crate) async fn fetch(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(id) = id.map_err(path_rejected)?;
    let id: TaskId = id
        .parse()
        .map_err(|e| crate::error::invalid_id("execution", e))?;
    // Another tenant's execution is as unknown as a missing one.
    let owner = c
        .stores
        .executions
        .execution_meta(id)
        .await
        .map_err(unavailable)?;
    let hidden = match &owner {
        Some(meta) => !tenant.sees(&meta.tenant),
        None => tenant.0.is_some(),
    };
    if hidden {
        return Err(crate::error::not_found(format!("no execution {id}")));
    }
    if let Some(result) = c
        .stores
        .executions
        .execution_result(id)
        .await
        .map_err(unavailable)?
    {
        return Ok(view(id, Outcome::Done(result)).into_response());
    }
    match c
        .stores
        .executions
        .execution_meta(id)
        .await
        .map_err(unavailable)?
    {
        Some(_) => Ok(view(
            id,
            Outcome::Pending {
                status: Pending::Queued,
            },
        )
        .into_response()),
        None => Err(crate::error::not_found(format!("no execution {id}"))),
    }
}

fn view(id: TaskId, outcome: Outcome) -> axum::Json<ExecutionView> {
    axum::Json(ExecutionView { id, outcome })
}
