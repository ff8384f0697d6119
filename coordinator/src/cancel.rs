//! Cancelling work: `DELETE /v1/jobs/{id}` and `DELETE /v1/batches/{id}`.
//!
//! A cancelled job is finished like any other, atomically, with status `cancelled`, what it
//! had produced, and a `finished` event. That one step is the whole mechanism: coordinators
//! publish nothing for a finished job (its events are dropped), and workers check the status
//! when a task arrives and before every model call and sandbox run, so queued tasks are
//! dropped as they arrive and a running one stops at its next step.

use axum::extract::rejection::PathRejection;
use axum::extract::{Extension, Path, State};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use proto::TaskId;
use proto::api::ErrorCode;
use proto::api::{BatchView, ErrorBody};
use proto::job::{JobResult, JobStatus};

use crate::Coordinator;
use crate::auth::Tenant;
use crate::error::{ApiError, path_rejected, unavailable};

/// Jobs of a batch cancelled at once.
const PARALLEL: usize = 16;

/// Cancels `id` (already visible to the caller). `Ok` with the job's result when it is
/// cancelled (now or before); `Err(status)` when it had ended otherwise.
async fn cancel(c: &Coordinator, id: TaskId, reason: &str) -> Result<JobResult, CancelError> {
    let meta = c
        .stores
        .jobs
        .job_meta(id)
        .await
        .map_err(|e| CancelError::Api(unavailable(e)))?
        .ok_or_else(|| CancelError::Api(crate::error::not_found(format!("no job {id}"))))?;
    let result = c
        .end_job(&meta, JobStatus::Cancelled, reason)
        .await
        .map_err(|e| CancelError::Api(unavailable(e)))?;
    match result.status {
        JobStatus::Cancelled => Ok(result),
        other => Err(CancelError::Ended(other)),
    }
}

enum CancelError {
    /// The job had ended with this status before the cancel.
    Ended(JobStatus),
    Api(ApiError),
}

/// Cancels a job: nothing more is published or run for it, and it ends `cancelled` with the
/// functions it had finished.
///
/// Tasks already queued are dropped as they reach a worker; a task in flight stops before its
/// next model call or sandbox run. Its event stream ends with a `finished` event whose status
/// is `cancelled`. Cancelling a cancelled job answers its result again.
#[utoipa::path(
    delete,
    path = "/v1/jobs/{id}",
    operation_id = "cancel_job",
    tag = "jobs",
    params(("id" = TaskId, Path, description = "Job id.")),
    responses(
        (status = 200, description = "Cancelled: the job's result, status `cancelled`, with what it had produced.", body = JobResult),
        (status = 400, description = "Not a job id.", body = ErrorBody),
        (status = 404, description = "No such job (or another tenant's).", body = ErrorBody),
        (status = 409, description = "The job had already ended (succeeded or failed); the message says how.", body = ErrorBody),
        (status = 429, description = "Over the tenant's request rate (`coordinator.tenants.<name>.requests_per_second`); `Retry-After` says when to retry.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable.", body = ErrorBody),
    )
)]
pub(crate) async fn cancel_job(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(id) = id.map_err(path_rejected)?;
    let id = crate::jobs::parse_id(&id)?;
    crate::jobs::visible(&c, &tenant, id).await?;
    match cancel(&c, id, &format!("cancelled (DELETE /v1/jobs/{id})")).await {
        Ok(result) => {
            tracing::info!(job = %id, "job cancelled");
            Ok(axum::Json(result).into_response())
        }
        Err(CancelError::Ended(status)) => Err(ApiError::new(
            ErrorCode::AlreadyEnded,
            format!("job {id} had already ended: {status}"),
        )),
        Err(CancelError::Api(e)) => Err(e),
    }
}

/// Cancels every unfinished job of a batch (as `DELETE /v1/jobs/{id}` does each); jobs that had
/// ended keep their results. Answers the batch as `GET /v1/batches/{id}` would.
#[utoipa::path(
    delete,
    path = "/v1/batches/{id}",
    operation_id = "cancel_batch",
    tag = "batches",
    params(("id" = TaskId, Path, description = "Batch id.")),
    responses(
        (status = 200, description = "Every job of the batch has ended; those that were running are `cancelled`.", body = BatchView),
        (status = 400, description = "Not a batch id.", body = ErrorBody),
        (status = 404, description = "No such batch (or another tenant's).", body = ErrorBody),
        (status = 429, description = "Over the tenant's request rate (`coordinator.tenants.<name>.requests_per_second`); `Retry-After` says when to retry.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable; the jobs cancelled so far stay cancelled and a retry cancels the rest.", body = ErrorBody),
    )
)]
pub(crate) async fn cancel_batch(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(id) = id.map_err(path_rejected)?;
    let batch = crate::batches::visible(&c, &tenant, crate::batches::parse_id(&id)?).await?;
    let statuses = c
        .stores
        .jobs
        .statuses(&batch.jobs)
        .await
        .map_err(unavailable)?;
    let running: Vec<TaskId> = batch
        .jobs
        .iter()
        .zip(statuses)
        .filter(|(_, status)| status.is_some_and(|s| !s.is_final()))
        .map(|(job, _)| *job)
        .collect();
    let reason = format!("cancelled with its batch (DELETE /v1/batches/{})", batch.id);
    let outcomes: Vec<Result<JobResult, CancelError>> = futures::stream::iter(running)
        .map(|job| {
            let (c, reason) = (c.clone(), reason.clone());
            async move { cancel(&c, job, &reason).await }
        })
        .buffer_unordered(PARALLEL)
        .collect()
        .await;
    let mut cancelled = 0;
    for outcome in outcomes {
        match outcome {
            Ok(_) => cancelled += 1,
            Err(CancelError::Ended(_)) => {}
            Err(CancelError::Api(e)) => return Err(e),
        }
    }
    tracing::info!(batch = %batch.id, cancelled, "batch cancelled");
    Ok(axum::Json(crate::batches::view(&c, &batch).await?).into_response())
}
