//! HTTP routes of the public API.

use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, MatchedPath, Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use broker::Outgoing;
use proto::api::{ErrorBody, ExecutionSubmission, ExecutionView, Outcome, Pending};
use proto::{
    Envelope, ExecutionMeta, ExecutionRequest, ExecutionResult, Language, Status, Task, TaskId,
};
use serde::Deserialize;
use tower_http::trace::TraceLayer;

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

/// The API routes, with request metrics and tracing.
pub fn router(coordinator: Coordinator) -> Router {
    Router::new()
        .route("/v1/executions", post(submit))
        .route("/v1/executions/{id}", get(fetch))
        .route("/v1/jobs", post(crate::jobs::submit))
        .route("/v1/jobs/{id}", get(crate::jobs::fetch))
        .route("/v1/jobs/{id}/events", get(crate::jobs::events))
        .route("/v1/batches", post(crate::batches::submit))
        .route("/v1/batches/{id}", get(crate::batches::fetch))
        .route("/v1/cache/stats", get(crate::jobs::cache_stats))
        .route("/v1/cache", axum::routing::delete(crate::jobs::cache_clear))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such route") })
        .layer(DefaultBodyLimit::max(coordinator.options.max_body_bytes))
        .layer(middleware::from_fn_with_state(
            coordinator.clone(),
            crate::auth::authenticate,
        ))
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SubmitParams {
    /// Wait for the verdict (default) or answer 202 with the id at once.
    #[serde(default = "yes")]
    wait: bool,
}

fn yes() -> bool {
    true
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
    // Files are code too: the program and its files share the code size limit.
    let code_bytes = submission.code.len() + files.values().map(String::len).sum::<usize>();
    if code_bytes > options.max_code_bytes {
        return Err(ApiError::invalid(
            "files",
            format!(
                "code and files together are {code_bytes} bytes, over the limit of {} bytes",
                options.max_code_bytes
            ),
        ));
    }
    Ok(ExecutionRequest {
        language,
        code: submission.code,
        stdin: submission.stdin,
        timeout_ms,
        memory_mb,
        fresh_container: submission.fresh_container.unwrap_or(false),
        files,
        return_files,
    })
}

async fn submit(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    params: Result<Query<SubmitParams>, QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let Query(params) =
        params.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    let body = body.map_err(|e| ApiError::new(e.status(), e.body_text()))?;
    let submission: ExecutionSubmission = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("invalid request body: {e}"),
        )
    })?;
    let request = validate(&c.options, submission)?;
    let language = request.language;
    let id = TaskId::new();
    let submitted_at_ms = now_ms();

    // Record first, so whatever a worker does with the task is visible under this id.
    let meta = ExecutionMeta {
        tenant: tenant.0.clone(),
        submitted_at_ms,
        language,
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
        .publish(Outgoing {
            message_id: id.to_string(),
            body: envelope.encode(),
        })
        .await;
    if let Err(e) = published {
        let reason = format!("not queued: {e}");
        // Leave no "queued" record behind for a task that no worker will ever see.
        let _ = c
            .store
            .complete_execution(id, &ExecutionResult::error(Status::Error, reason.clone()))
            .await;
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, reason));
    }
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

async fn fetch(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
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

#[cfg(test)]
mod tests;
