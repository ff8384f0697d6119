//! HTTP routes of the public API, and the OpenAPI document that describes them.
//!
//! The document (`GET /openapi.json`) is generated from the handlers' `#[utoipa::path]`
//! attributes and the body types' `ToSchema` derives, then given the configured limits, so it
//! cannot drift from what the routes accept and answer. [`routes`] is the one list the router
//! is built from; a test checks that every entry is in the document.

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, MatchedPath, Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, post};
use broker::Outgoing;
use proto::api::{
    BatchItemView, ErrorBody, ExecutionBatch, ExecutionBatchView, ExecutionSubmission,
    ExecutionView, Outcome, Pending, StreamedItemView,
};
use proto::{
    Envelope, ExecutionMeta, ExecutionRequest, ExecutionResult, Language, Status, Task, TaskId,
};
use serde::Deserialize;
use serde_json::{Value, json};
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;

use crate::auth::Tenant;
use crate::{Coordinator, now_ms};
use axum::Extension;

/// An API error: a status and a message for the caller.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    #[cfg(test)]
    pub(crate) fn message(&self) -> &str {
        &self.message
    }

    #[cfg(test)]
    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }

    pub(crate) fn invalid(field: &str, message: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("{field}: {message}"),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            axum::Json(ErrorBody {
                error: self.message,
            }),
        )
            .into_response()
    }
}

/// Every API route: method, path (as in the OpenAPI document) and handler. The router is
/// built from this list and nothing else, so [`routes`] is exactly what it serves.
fn endpoints() -> Vec<(&'static str, &'static str, MethodRouter<Coordinator>)> {
    vec![
        ("POST", "/v1/executions", post(submit)),
        ("POST", "/v1/executions/batch", post(submit_batch)),
        ("GET", "/v1/executions/{id}", get(fetch)),
        ("POST", "/v1/jobs", post(crate::jobs::submit)),
        ("GET", "/v1/jobs/{id}", get(crate::jobs::fetch)),
        ("GET", "/v1/jobs/{id}/events", get(crate::jobs::events)),
        ("POST", "/v1/batches", post(crate::batches::submit)),
        ("GET", "/v1/batches/{id}", get(crate::batches::fetch)),
        ("GET", "/v1/cache/stats", get(crate::jobs::cache_stats)),
        ("DELETE", "/v1/cache", delete(crate::jobs::cache_clear)),
        ("POST", "/run_code", post(crate::fusion::run_code)),
        ("GET", "/openapi.json", get(openapi_json)),
    ]
}

/// The routes [`router`] serves, as (method, path). `/healthz`, `/readyz` and `/metrics`
/// come from `telemetry::ops_router`, merged in by [`Coordinator::run`].
pub fn routes() -> Vec<(&'static str, &'static str)> {
    endpoints()
        .into_iter()
        .map(|(method, path, _)| (method, path))
        .collect()
}

/// Routes whose body limit is `max_batch_body_bytes`.
const BATCH_ROUTES: &[&str] = &["/v1/executions/batch"];

/// Routes that need no API key.
const OPEN_ROUTES: &[&str] = &["/openapi.json"];

/// The API routes, with request metrics and tracing.
pub fn router(coordinator: Coordinator) -> Router {
    let document: Arc<str> = openapi_document(&coordinator.options).to_string().into();
    let (open, tenanted): (Vec<_>, Vec<_>) = endpoints()
        .into_iter()
        .partition(|(_, path, _)| OPEN_ROUTES.contains(path));
    let mut api = Router::new();
    for (_, path, endpoint) in tenanted {
        // Batches of thousands of programs are bigger than any single request.
        let endpoint = if BATCH_ROUTES.contains(&path) {
            endpoint.layer(DefaultBodyLimit::max(
                coordinator.options.max_batch_body_bytes,
            ))
        } else {
            endpoint
        };
        api = api.route(path, endpoint);
    }
    let mut router = api
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such route") })
        .layer(DefaultBodyLimit::max(coordinator.options.max_body_bytes))
        .layer(middleware::from_fn_with_state(
            coordinator.clone(),
            crate::auth::authenticate,
        ));
    for (_, path, endpoint) in open {
        router = router.route(path, endpoint);
    }
    router
        .layer(Extension(Document(document)))
        .layer(middleware::from_fn_with_state(coordinator.clone(), observe))
        .layer(TraceLayer::new_for_http())
        .with_state(coordinator)
}

async fn observe(State(c): State<Coordinator>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".into());
    let started = Instant::now();
    let response = next.run(request).await;
    c.metrics
        .http_requests
        .with_label_values(&[route.as_str(), response.status().as_str()])
        .inc();
    c.metrics
        .http_seconds
        .with_label_values(&[route.as_str()])
        .observe(started.elapsed().as_secs_f64());
    response
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct SubmitParams {
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
struct BatchParams {
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
    let code_bytes =
        submission.code.len() + test_bytes + files.values().map(String::len).sum::<usize>();
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
        (status = 401, description = "API keys are configured and none (or an unknown one) was given.", body = ErrorBody),
        (status = 413, description = "Body over `coordinator.max_body_bytes`.", body = ErrorBody),
        (status = 422, description = "A value out of range; the message names the field.", body = ErrorBody),
        (status = 503, description = "Redis or the broker is unavailable; nothing was queued.", body = ErrorBody),
    )
)]
async fn submit(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    params: Result<Query<SubmitParams>, QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let Query(params) =
        params.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
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
    enqueue(&c, &tenant, id, now_ms(), request).await?;
    tracing::debug!(%id, %language, "execution queued");

    let result = if params.wait {
        match c.store.wait_execution(id, c.options.wait).await {
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
        Some(result) => {
            c.metrics
                .executions
                .with_label_values(&[language.as_str(), result.status.as_str()])
                .inc();
            (StatusCode::OK, view(id, Outcome::Done(result))).into_response()
        }
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
        (status = 401, description = "API keys are configured and none (or an unknown one) was given.", body = ErrorBody),
        (status = 413, description = "Body over `coordinator.max_batch_body_bytes`.", body = ErrorBody),
        (status = 422, description = "An item out of range (`items[i].field`), no items or too many.", body = ErrorBody),
        (status = 503, description = "Redis or the broker is unavailable; nothing was queued.", body = ErrorBody),
    )
)]
async fn submit_batch(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    params: Result<Query<BatchParams>, QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    use futures::StreamExt;

    let Query(params) =
        params.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    let batch: ExecutionBatch = read_body(body)?;
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
        let request = validate(&c.options, item).map_err(|e| ApiError {
            status: e.status,
            message: format!("items[{i}].{}", e.message),
        })?;
        let id = TaskId::new();
        prepared.push((label.unwrap_or_else(|| id.to_string()), id, request));
    }
    let submitted_at_ms = now_ms();
    let work: Vec<(TaskId, ExecutionRequest)> = prepared
        .iter()
        .map(|(_, id, request)| (*id, request.clone()))
        .collect();
    let queued: Vec<Result<(), ApiError>> = futures::stream::iter(work)
        .map(|(id, request)| {
            let (c, tenant) = (c.clone(), tenant.clone());
            async move { enqueue(&c, &tenant, id, submitted_at_ms, request).await }
        })
        .buffered(64)
        .collect()
        .await;
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
        let mut nap = std::time::Duration::from_millis(2);
        loop {
            poll_results(&c, &items, &mut results).await;
            if results.iter().all(Option::is_some) || tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(nap.min(deadline - tokio::time::Instant::now())).await;
            nap = (nap * 2).min(std::time::Duration::from_millis(50));
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
    let found = match c.store.execution_results(&pending_ids).await {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read batch results yet");
            return vec![];
        }
    };
    let mut arrived = Vec::new();
    for (i, result) in pending.into_iter().zip(found) {
        if let Some(result) = result {
            c.metrics
                .executions
                .with_label_values(&[items[i].2.as_str(), result.status.as_str()])
                .inc();
            results[i] = Some(result);
            arrived.push(i);
        }
    }
    arrived
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
        let mut nap = std::time::Duration::from_millis(2);
        while results.iter().any(Option::is_none) && tokio::time::Instant::now() < idle_until {
            let arrived = poll_results(&c, &items, &mut results).await;
            if !arrived.is_empty() {
                idle_until = tokio::time::Instant::now() + c.options.wait;
                // While verdicts flow, one read per 10 ms at most: each read is an MGET of
                // every pending id of the batch.
                nap = std::time::Duration::from_millis(10);
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
            tokio::time::sleep(nap).await;
            nap = (nap * 2).min(std::time::Duration::from_millis(50));
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
const MAX_LABEL_CHARS: usize = 256;

/// Records an execution and publishes its task. When publishing fails the record says so
/// (`error`, "not queued"), so that nothing waits on a task no worker will ever see.
pub(crate) async fn enqueue(
    c: &Coordinator,
    tenant: &Tenant,
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
    c.store
        .create_execution(id, &meta)
        .await
        .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    let envelope = Envelope::new(
        id,
        tenant.0.clone(),
        submitted_at_ms,
        Task::Execute(request),
    );
    let published = c
        .broker
        .publish_execution(Outgoing {
            message_id: id.to_string(),
            body: envelope.encode(),
        })
        .await;
    if let Err(e) = published {
        let reason = format!("not queued: {e}");
        let _ = c
            .store
            .complete_execution(id, &ExecutionResult::error(Status::Error, reason.clone()))
            .await;
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, reason));
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
        (status = 401, description = "API keys are configured and none (or an unknown one) was given.", body = ErrorBody),
        (status = 404, description = "No such execution (or another tenant's).", body = ErrorBody),
        (status = 503, description = "Redis is unavailable.", body = ErrorBody),
    )
)]
async fn fetch(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(id) = id.map_err(path_rejected)?;
    let id: TaskId = id.parse().map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("id: not an execution id: {e}"),
        )
    })?;
    let unavailable =
        |e: store::Error| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string());
    // Another tenant's execution is as unknown as a missing one.
    let owner = c.store.execution_meta(id).await.map_err(unavailable)?;
    let hidden = match &owner {
        Some(meta) => !tenant.sees(&meta.tenant),
        None => tenant.0.is_some(),
    };
    if hidden {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no execution {id}"),
        ));
    }
    if let Some(result) = c.store.execution_result(id).await.map_err(unavailable)? {
        return Ok(view(id, Outcome::Done(result)).into_response());
    }
    match c.store.execution_meta(id).await.map_err(unavailable)? {
        Some(_) => Ok(view(
            id,
            Outcome::Pending {
                status: Pending::Queued,
            },
        )
        .into_response()),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no execution {id}"),
        )),
    }
}

fn view(id: TaskId, outcome: Outcome) -> axum::Json<ExecutionView> {
    axum::Json(ExecutionView { id, outcome })
}

/// Reads a JSON request body. A number with a zero fraction (`10.0`) counts as an integer, as
/// JSON Schema (and so the OpenAPI document) counts it. Errors name the field they are about
/// (`items[3].timeout_ms: invalid type: …`).
pub(crate) fn from_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let error =
        match serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_slice(bytes)) {
            Ok(value) => return Ok(value),
            Err(e)
                if e.inner()
                    .to_string()
                    .starts_with("invalid type: floating point") =>
            {
                e
            }
            Err(e) => return Err(describe(&e)),
        };
    let mut value: Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    integral(&mut value);
    serde_path_to_error::deserialize(value).map_err(|_| describe(&error))
}

fn describe<E: std::fmt::Display>(e: &serde_path_to_error::Error<E>) -> String {
    match e.path().to_string().as_str() {
        "." => e.inner().to_string(),
        path => format!("{path}: {}", e.inner()),
    }
}

/// A JSON body, or the 4xx that says what is wrong with it.
pub(crate) fn read_body<T: serde::de::DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let body = body.map_err(|e| ApiError::new(e.status(), e.body_text()))?;
    from_json(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("invalid request body: {e}"),
        )
    })
}

/// Rewrites integral floats that are exact (|x| <= 2^53) as integers.
fn integral(value: &mut Value) {
    const EXACT: f64 = 9_007_199_254_740_992.0;
    match value {
        Value::Number(n) => {
            if let Some(f) = n
                .as_f64()
                .filter(|f| n.is_f64() && f.fract() == 0.0 && f.abs() <= EXACT)
            {
                *value = Value::from(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral),
        Value::Object(fields) => fields.values_mut().for_each(integral),
        _ => {}
    }
}

/// A path that cannot be read (e.g. not UTF-8 once percent-decoded) is a 400 like any other.
pub(crate) fn path_rejected(rejection: PathRejection) -> ApiError {
    ApiError::new(rejection.status(), rejection.body_text())
}

/// The served document, rendered once when the router is built.
#[derive(Debug, Clone)]
struct Document(Arc<str>);

/// This document: every route of the API, generated from the handlers and body types.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    security(()),
    responses((status = 200, description = "The OpenAPI document.", body = Object))
)]
async fn openapi_json(Extension(Document(document)): Extension<Document>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        document.to_string(),
    )
        .into_response()
}

/// The OpenAPI document of the API. Generated from the `#[utoipa::path]` attributes of the
/// handlers and the `ToSchema` derives of the body types; [`openapi_document`] adds the
/// configured limits.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "codegen-cluster",
        description = "Runs untrusted code in a sandbox and turns natural-language requests into tested code. \
            With API keys configured (`CODEGEN__COORDINATOR__API_KEYS__<TENANT>`), every `/v1/*` request \
            needs `Authorization: Bearer <key>` (or `X-API-Key`) and sees only its tenant's work; \
            without keys the API is open. Every 4xx/5xx answer is an `ErrorBody` \
            (except `/readyz`, whose 503 is a readiness report)."
    ),
    paths(
        submit,
        submit_batch,
        fetch,
        crate::jobs::submit,
        crate::jobs::fetch,
        crate::jobs::events,
        crate::batches::submit,
        crate::batches::fetch,
        crate::jobs::cache_stats,
        crate::jobs::cache_clear,
        crate::fusion::run_code,
        openapi_json,
        ops::healthz,
        ops::readyz,
        ops::metrics,
    ),
    modifiers(&Security),
    security((), ("bearer" = []), ("api_key" = [])),
    tags(
        (name = "executions", description = "Run a program in the sandbox."),
        (name = "jobs", description = "Generate tested code from an instruction."),
        (name = "sandbox-fusion", description = "SandboxFusion's `/run_code`, for its clients and the tools built on them."),
        (name = "batches", description = "Many jobs in one request."),
        (name = "cache", description = "The solution and function-level caches."),
        (name = "operations", description = "Health, readiness, metrics and this document; never need a key."),
    )
)]
#[derive(Debug)]
pub struct ApiDoc;

/// The API key, as a bearer token or an `X-API-Key` header (see [`openapi_document`]).
struct Security;

impl utoipa::Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            utoipa::openapi::security::SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("The tenant's API key; only when keys are configured."))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "api_key",
            utoipa::openapi::security::SecurityScheme::ApiKey(ApiKey::Header(
                ApiKeyValue::with_description(
                    "X-API-Key",
                    "The tenant's API key; only when keys are configured.",
                ),
            )),
        );
    }
}

/// The document as served: [`ApiDoc`] plus this coordinator's configuration: its limits, so
/// that a request the document allows is one `validate` accepts (byte-size limits excepted:
/// JSON Schema counts characters), and the API key as required when keys are configured
/// (optional otherwise).
pub fn openapi_document(options: &crate::Options) -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).expect("the document serializes");
    if !options.api_keys.is_empty() {
        let Value::Array(requirements) = &mut doc["security"] else {
            panic!("the document has global security requirements")
        };
        requirements.retain(|r| r != &json!({}));
    }
    let schemas = &mut doc["components"]["schemas"];
    let path_pattern = json!(file_path_pattern());
    let execution = &mut schemas["ExecutionSubmission"]["properties"];
    let languages: Vec<&str> = Language::ALL
        .iter()
        .flat_map(|l| std::iter::once(l.as_str()).chain(l.spec().aliases.iter().copied()))
        .collect();
    limit(&mut execution["language"], json!({"enum": languages}));
    limit(
        &mut execution["timeout_ms"],
        json!({"minimum": 1, "maximum": options.max_timeout_ms}),
    );
    limit(
        &mut execution["memory_mb"],
        json!({"minimum": options.min_memory_mb, "maximum": options.max_memory_mb}),
    );
    limit(
        &mut execution["files"],
        json!({"maxProperties": proto::execution::MAX_FILES,
               "propertyNames": {"minLength": 1, "pattern": path_pattern}}),
    );
    limit(
        &mut execution["return_files"],
        json!({"maxItems": proto::execution::MAX_FILES}),
    );
    limit(
        &mut execution["return_files"]["items"],
        json!({"minLength": 1, "pattern": path_pattern}),
    );
    limit(
        &mut schemas["ExecutionBatch"]["properties"]["items"],
        json!({"minItems": 1, "maxItems": options.max_batch_executions}),
    );
    // Only batch items take an `id`: the single route gets the submission without it.
    let mut item = schemas["ExecutionSubmission"].clone();
    item["description"] =
        json!("An item of `POST /v1/executions/batch`: a submission plus its label.");
    limit(
        &mut item["properties"]["id"],
        json!({"maxLength": MAX_LABEL_CHARS}),
    );
    schemas["ExecutionBatchItem"] = item;
    schemas["ExecutionBatch"]["properties"]["items"]["items"] =
        json!({"$ref": "#/components/schemas/ExecutionBatchItem"});
    if let Value::Object(properties) = &mut schemas["ExecutionSubmission"]["properties"] {
        properties.remove("id");
    }
    let run_code = &mut schemas["RunCodeRequest"]["properties"];
    limit(
        &mut run_code["language"],
        json!({"enum": crate::fusion::LANGUAGES}),
    );
    limit(
        &mut run_code["run_timeout"],
        json!({"exclusiveMinimum": 0, "maximum": options.max_timeout_ms as f64 / 1000.0}),
    );
    limit(
        &mut run_code["memory_limit_MB"],
        json!({"anyOf": [{"maximum": 0},
                         {"minimum": options.min_memory_mb, "maximum": options.max_memory_mb}]}),
    );
    limit(
        &mut run_code["files"],
        json!({"maxProperties": proto::execution::MAX_FILES,
               "propertyNames": {"minLength": 1, "pattern": path_pattern}}),
    );
    limit(
        &mut run_code["fetch_files"],
        json!({"maxItems": proto::execution::MAX_FILES,
               "items": {"type": "string", "minLength": 1, "pattern": path_pattern}}),
    );
    let job = &mut schemas["JobSubmission"]["properties"];
    let generation_languages: Vec<&str> = Language::ALL
        .iter()
        .filter(|l| l.spec().generation)
        .flat_map(|l| std::iter::once(l.as_str()).chain(l.spec().aliases.iter().copied()))
        .collect();
    job["language"] = json!({"type": "string", "enum": generation_languages, "default": "python",
        "description": "The language of the generated code (generation jobs: Python)."});
    limit(
        &mut job["instruction"],
        json!({"pattern": NOT_BLANK_PATTERN}),
    );
    limit(
        &mut job["max_iterations"],
        json!({"minimum": 1, "maximum": options.max_iterations_limit}),
    );
    limit(
        &mut doc["paths"]["/v1/batches"]["post"]["requestBody"]["content"]["application/x-ndjson"]
            ["schema"],
        json!({"minItems": 1, "maxItems": options.max_batch_jobs}),
    );
    doc
}

/// Adds `constraints` to a generated schema; for a nullable one (`type: [.., "null"]` or a
/// `oneOf` with `null`), to its non-null part.
fn limit(schema: &mut Value, constraints: Value) {
    assert!(
        schema.is_object(),
        "no schema to limit: the document changed"
    );
    let target = match schema.get_mut("oneOf") {
        Some(Value::Array(variants)) => variants
            .iter_mut()
            .find(|v| v.get("type") != Some(&json!("null")))
            .expect("a non-null variant"),
        _ => schema,
    };
    let (Value::Object(target), Value::Object(constraints)) = (target, constraints) else {
        unreachable!("schemas and constraints are objects")
    };
    target.extend(constraints);
}

/// `proto::execution::check_file_path` as a regular expression: `/`-separated components,
/// none empty, `.` or `..`, no NUL, not a reserved program or test file name (the 1024-byte
/// limit is not expressed).
fn file_path_pattern() -> String {
    let reserved: Vec<String> = Language::reserved_files()
        .map(|f| f.replace('.', "\\."))
        .collect();
    format!(
        r"^(?!(?:{})$)(?!(?:[^/]*/)*\.{{1,2}}(?:/|$))[^/\x00]+(?:/[^/\x00]+)*$",
        reserved.join("|")
    )
}

/// An instruction is trimmed (Unicode white space) and must not be empty.
const NOT_BLANK_PATTERN: &str =
    r"[^\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]";

/// The `/readyz` body as the document shows it; `telemetry::ReadinessReport` is what is sent
/// (a test checks that the two agree).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct ReadinessReport {
    ready: bool,
    /// `"ok"` or the reason, per dependency (`broker`, `redis`, `process` while shutting down).
    checks: std::collections::BTreeMap<String, String>,
}

/// The operations routes of `telemetry::ops_router`, served next to the API without a key.
/// Only their documentation lives here.
#[allow(dead_code)]
mod ops {
    use super::ReadinessReport;

    /// 200 while the process runs.
    #[utoipa::path(
        get,
        path = "/healthz",
        tag = "operations",
        security(()),
        responses((status = 200, description = "`ok`", body = String, content_type = "text/plain"))
    )]
    pub(super) fn healthz() {}

    /// 200 when every dependency answers; otherwise 503 naming each failing one.
    #[utoipa::path(
        get,
        path = "/readyz",
        tag = "operations",
        security(()),
        responses(
            (status = 200, description = "Ready.", body = ReadinessReport),
            (status = 503, description = "Not ready (or shutting down); `checks` says why.", body = ReadinessReport),
        )
    )]
    pub(super) fn readyz() {}

    /// Prometheus metrics in the text exposition format.
    #[utoipa::path(
        get,
        path = "/metrics",
        tag = "operations",
        security(()),
        responses(
            (status = 200, description = "The metrics.", body = String, content_type = "text/plain"),
            (status = 500, description = "The metrics could not be encoded.", body = String, content_type = "text/plain"),
        )
    )]
    pub(super) fn metrics() {}
}

#[cfg(test)]
mod tests;
