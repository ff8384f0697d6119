//! `GET /v1/jobs/{id}/transcript`: an agent job's recorded steps as OpenAI chat messages,
//! one JSON object a line, for RL and evaluation pipelines that train or score on them.

use axum::Extension;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use proto::api::{ErrorBody, ErrorCode};

use crate::Coordinator;
use crate::auth::Tenant;
use crate::error::{ApiError, path_rejected, unavailable};

/// An agent job's transcript: its system prompt, its task, then each model answer (with its
/// `tool_calls`, and `token_ids` where the model server returned them) and each call's
/// `tool` result, as JSON Lines of OpenAI chat messages. A run still going answers the steps
/// recorded so far.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/transcript",
    operation_id = "job_transcript",
    tag = "jobs",
    params(("id" = proto::TaskId, Path, description = "Job id.")),
    responses(
        (status = 200, description = "One OpenAI chat message (JSON) per line.",
            body = String, content_type = "application/x-ndjson"),
        (status = 400, description = "Not a job id.", body = ErrorBody),
        (status = 404, description = "No such job (or another tenant's).", body = ErrorBody),
        (status = 409, description = "The job is not an agent job: it has no transcript.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable.", body = ErrorBody),
    )
)]
pub(crate) async fn transcript(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(id) = id.map_err(path_rejected)?;
    let id = crate::jobs::parse_id(&id)?;
    let meta = match c.stores.jobs.job_meta(id).await.map_err(unavailable)? {
        Some(meta) if tenant.sees(&meta.tenant) => meta,
        _ => return Err(crate::error::not_found(format!("no job {id}"))),
    };
    if meta.request.agent.is_none() {
        return Err(ApiError::new(
            ErrorCode::NotAnAgentJob,
            format!(
                "job {id} is a `{}` job, not an `agent` one: it has no transcript",
                meta.request.mode().as_str()
            ),
        ));
    }
    let steps = c.stores.jobs.steps(id).await.map_err(unavailable)?;
    let mut body = String::new();
    for message in proto::agent::chat_messages(&steps) {
        body.push_str(&message.to_string());
        body.push('\n');
    }
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response())
}
