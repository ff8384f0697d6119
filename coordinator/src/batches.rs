//! Batches: many jobs in one request, followed together.
//!
//! `POST /v1/batches` takes a JSONL body, one job submission per line (the body of
//! `POST /v1/jobs`). Every line is validated before anything is created, so a bad line answers
//! 4xx naming its line number and field and creates nothing. The jobs are then created like
//! single jobs (in parallel, keeping their order; a solution-cache hit is a job that is
//! finished at once) and the batch (its job ids in input order) is
//! stored in Redis with the caller's tenant. `GET /v1/batches/{id}` reads the jobs' statuses;
//! only the batch's tenant sees it.

use proto::api::ErrorCode;
use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{Extension, Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use proto::TaskId;
use proto::api::{
    BatchAccepted, BatchJob, BatchJobStatus, BatchResult, BatchResults, BatchStatus, BatchView,
    ErrorBody, ExpiredJob, ExpiredStatus,
};
use proto::job::{Batch, JobRequest, JobSubmission};
use serde::Deserialize;

use crate::auth::Tenant;
use crate::body::from_json;
use crate::error::{ApiError, path_rejected, unavailable};
use crate::jobs::{Created, create_job, refuse_without_generators, register_callback, validate};
use crate::request_id::RequestIdOf;
use crate::{Coordinator, now_ms};
use store::index::Kind;
use store::webhooks::HookKind;

/// Jobs created (or statuses read) at once.
const PARALLEL: usize = 16;

/// Parses and validates every line; the first bad one is the error.
/// A line of a batch: the job and its own webhook.
type Line = (JobRequest, Option<String>);

async fn parse(c: &Coordinator, tenant: &Tenant, body: &[u8]) -> Result<Vec<Line>, ApiError> {
    let text = std::str::from_utf8(body).map_err(|e| {
        ApiError::new(
            ErrorCode::MalformedBody,
            format!("invalid request body: not UTF-8: {e}"),
        )
    })?;
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .map(|(i, line)| (i + 1, line))
        .filter(|(_, line)| !line.trim().is_empty())
        .collect();
    if lines.is_empty() {
        return Err(ApiError::invalid(
            "body",
            "no jobs: send one JSON job submission per line",
        ));
    }
    if lines.len() > c.options.max_batch_jobs {
        return Err(ApiError::invalid(
            "body",
            format!(
                "{} jobs is over the limit of {} per batch",
                lines.len(),
                c.options.max_batch_jobs
            ),
        ));
    }
    let mut requests = Vec::with_capacity(lines.len());
    for (number, line) in lines {
        let mut submission: JobSubmission = from_json(line.as_bytes())
            .map_err(|e| e.into_api(&format!("line {number}: invalid job: ")))?;
        let callback = submission.callback_url.take();
        if let Some(url) = &callback {
            c.check_callback("callback_url", tenant.0.as_deref(), url)
                .await
                .map_err(|e| e.prefixed(&format!("line {number}: ")))?;
        }
        match validate(&c.options, submission) {
            Ok(request) => requests.push((request, callback)),
            Err(e) => return Err(e.prefixed(&format!("line {number}: "))),
        }
    }
    Ok(requests)
}

/// The query of `POST /v1/batches`.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct SubmitParams {
    /// Where to POST the batch once every job of it has ended (signed; an `http(s)` URL the
    /// operator allows, `coordinator.webhook_allow`). Each line may carry its own
    /// `callback_url` for its job.
    callback_url: Option<String>,
}

/// Submits many jobs at once: a JSONL body, one `JobSubmission` per line (blank lines are
/// skipped).
///
/// Every line is validated before anything is created: a bad line answers 400 or 422 naming
/// the line and the field, and no job is created. Each job is then an ordinary job.
#[utoipa::path(
    post,
    path = "/v1/batches",
    operation_id = "submit_batch",
    tag = "batches",
    params(SubmitParams),
    request_body(
        content = Vec<JobSubmission>,
        content_type = "application/x-ndjson",
        description = "One `JobSubmission` JSON object per line (the array's items, one per line; \
            not a JSON array), at most `coordinator.max_batch_jobs` lines."
    ),
    responses(
        (status = 202, description = "Every job was created.", body = BatchAccepted,
            headers(("Location" = String, description = "The batch."))),
        (status = 400, description = "A line is not a job (not JSON, unknown field) or not UTF-8.", body = ErrorBody),
        (status = 413, description = "Body over `coordinator.max_body_bytes`.", body = ErrorBody),
        (status = 422, description = "No jobs, too many, or a value out of range; names the line and field.", body = ErrorBody),
        (status = 503, description = "Redis or the broker failed (names the jobs already accepted: they run on), or no worker can generate (nothing was created).", body = ErrorBody),
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
    let body = body.map_err(|e| crate::error::body_rejected(e.status(), e.body_text()))?;
    let requests = parse(&c, &tenant, &body).await?;
    if let Some(url) = &params.callback_url {
        c.check_callback("callback_url", tenant.0.as_deref(), url)
            .await?;
    }
    c.refuse_without_broker()?;
    refuse_without_generators(&c).await?;
    let total = requests.len();
    let ids: Vec<TaskId> = (0..total).map(|_| TaskId::new()).collect();
    // The whole batch or nothing: a batch past a quota queues none of its jobs.
    crate::quotas::admit(&c, Kind::Jobs, &tenant, &ids).await?;
    let batch_id = TaskId::new();
    // Before any job exists: a job answered from the cache ends as it is created.
    if let (Some(url), Some((store, _))) = (&params.callback_url, c.webhooks())
        && let Err(e) = store
            .register_batch(batch_id, &ids, url, tenant.0.as_deref())
            .await
    {
        crate::quotas::release(&c, Kind::Jobs, &tenant, &ids).await;
        return Err(unavailable(e));
    }
    let created: Vec<Result<Created, ApiError>> =
        futures::stream::iter(ids.iter().copied().zip(requests))
            .map(|(id, (request, callback))| {
                let (c, tenant, request_id) = (c.clone(), tenant.clone(), request_id.clone());
                async move {
                    register_callback(&c, id, &tenant, callback.as_deref()).await?;
                    create_job(&c, id, request, tenant.0.clone(), request_id.as_deref()).await
                }
            })
            .buffered(PARALLEL)
            .collect()
            .await;
    let uncreated: Vec<TaskId> = ids
        .iter()
        .zip(&created)
        .filter_map(|(id, created)| created.is_err().then_some(*id))
        .collect();
    crate::quotas::release(&c, Kind::Jobs, &tenant, &uncreated).await;
    let mut jobs = Vec::with_capacity(total);
    let mut failure = None;
    for result in created {
        match result {
            Ok(job) => jobs.push(job.id()),
            Err(e) => failure = failure.or(Some(e)),
        }
    }
    if let Some(e) = failure {
        // The jobs created so far run on; say which, so nothing is submitted twice blindly.
        let ids: Vec<String> = jobs.iter().map(ToString::to_string).collect();
        let prefix = format!(
            "batch not created: {} of {total} jobs were accepted (they run on: [{}]); the first error: ",
            jobs.len(),
            ids.join(", ")
        );
        return Err(e.prefixed(&prefix));
    }
    let batch = Batch {
        id: batch_id,
        tenant: tenant.0.clone(),
        jobs,
        submitted_at_ms: now_ms(),
    };
    c.list(
        Kind::Batches,
        batch.tenant.as_deref(),
        batch.submitted_at_ms,
        &[batch.id],
    )
    .await
    .map_err(|e| {
        e.prefixed(&format!(
            "batch not stored; its {total} jobs were created and run on: "
        ))
    })?;
    c.stores.jobs.put_batch(&batch).await.map_err(|e| {
        unavailable(format!(
            "batch not stored ({e}); its {total} jobs were created and run on"
        ))
    })?;
    tracing::info!(batch = %batch.id, jobs = total, "batch accepted");
    Ok((
        StatusCode::ACCEPTED,
        [(header::LOCATION, format!("/v1/batches/{}", batch.id))],
        axum::Json(BatchAccepted {
            batch_id: batch.id,
            jobs: batch.jobs,
        }),
    )
        .into_response())
}

/// `GET /v1/batches/{id}`: a long poll instead of a tight one.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct FetchParams {
    /// Wait up to this many milliseconds (at most `coordinator.wait`) for a change: the answer
    /// comes as soon as the number of finished jobs differs from `finished` or the batch is
    /// done. 0 (the default) answers at once.
    #[serde(default)]
    #[param(default = 0, minimum = 0, maximum = 600000)]
    wait_ms: u64,
    /// With `wait_ms`: how many of the batch's jobs had finished when the caller last looked.
    #[serde(default)]
    #[param(default = 0, minimum = 0, maximum = 1000000)]
    finished: u64,
}

/// The largest `wait_ms` and `finished` taken (the document's maxima).
const MAX_WAIT_MS: u64 = 600_000;
const MAX_FINISHED: u64 = 1_000_000;

/// Without notices (an in-memory store), a long poll reads again this often.
const BATCH_REREAD: std::time::Duration = std::time::Duration::from_millis(500);
/// With notices, it reads again this often in case one was lost (a disconnection from Redis
/// wakes every watch anyway).
const BATCH_SAFETY_REREAD: std::time::Duration = std::time::Duration::from_secs(5);

/// A batch: its jobs in input order with their statuses, and counts by status.
///
/// A job whose state has expired counts as `unknown` (and as done). Another tenant's batch is
/// 404, as an unknown one. With `wait_ms`, a long poll: the answer waits until another job of
/// the batch finishes (or the batch is done, or the wait ends), so a client follows a batch
/// with one request per change instead of one per interval.
#[utoipa::path(
    get,
    path = "/v1/batches/{id}",
    operation_id = "get_batch",
    tag = "batches",
    params(("id" = TaskId, Path, description = "Batch id."), FetchParams),
    responses(
        (status = 200, description = "The batch's jobs and their statuses.", body = BatchView),
        (status = 400, description = "Not a batch id, or a malformed query.", body = ErrorBody),
        (status = 422, description = "`wait_ms` or `finished` out of range; the message names it.", body = ErrorBody),
        (status = 404, description = "No such batch (or another tenant's).", body = ErrorBody),
        (status = 503, description = "Redis is unavailable.", body = ErrorBody),
    )
)]
pub(crate) async fn fetch(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    id: Result<Path<String>, PathRejection>,
    params: Result<Query<FetchParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Path(id) = id.map_err(path_rejected)?;
    let Query(params) = params.map_err(crate::error::query_rejected)?;
    if params.wait_ms > MAX_WAIT_MS {
        return Err(ApiError::invalid(
            "wait_ms",
            format!("at most {MAX_WAIT_MS} (a wait is held to coordinator.wait anyway)"),
        ));
    }
    if params.finished > MAX_FINISHED {
        return Err(ApiError::invalid(
            "finished",
            format!("at most {MAX_FINISHED}"),
        ));
    }
    let batch = visible(&c, &tenant, parse_id(&id)?).await?;
    let wait = std::time::Duration::from_millis(params.wait_ms).min(c.options.wait);
    if wait.is_zero() {
        return Ok(axum::Json(view(&c, &batch).await?).into_response());
    }
    let deadline = tokio::time::Instant::now() + wait;
    let watch = c.stores.jobs.watch_batch(batch.id);
    loop {
        // Enabled before the read: a job finishing between the read and the wait wakes it.
        let notified = watch.as_ref().map(|w| {
            let mut notified = Box::pin(w.notified());
            notified.as_mut().enable();
            notified
        });
        let view = view(&c, &batch).await?;
        let finished = view.jobs.iter().filter(|j| j.status.is_final()).count() as u64;
        let now = tokio::time::Instant::now();
        if view.status == BatchStatus::Done || finished != params.finished || now >= deadline {
            return Ok(axum::Json(view).into_response());
        }
        match notified {
            Some(notified) => {
                let nap = BATCH_SAFETY_REREAD.min(deadline - now);
                let _ = tokio::time::timeout(nap, notified).await;
            }
            None => tokio::time::sleep(BATCH_REREAD.min(deadline - now)).await,
        }
    }
}

/// The batch's jobs with their statuses, read in one round trip (clients poll this).
pub(crate) async fn view(c: &Coordinator, batch: &Batch) -> Result<BatchView, ApiError> {
    let statuses = c
        .stores
        .jobs
        .statuses(&batch.jobs)
        .await
        .map_err(unavailable)?;
    let mut counts = BTreeMap::new();
    let mut done = true;
    let mut jobs = Vec::with_capacity(batch.jobs.len());
    for (job, status) in batch.jobs.iter().zip(&statuses) {
        let status = BatchJobStatus::from(*status);
        done &= status.is_final();
        *counts.entry(status).or_default() += 1;
        jobs.push(BatchJob {
            job_id: *job,
            status,
        });
    }
    Ok(BatchView {
        batch_id: batch.id,
        status: if done {
            BatchStatus::Done
        } else {
            BatchStatus::Running
        },
        counts,
        jobs,
        webhook: c.webhook_view(HookKind::Batch, batch.id).await,
    })
}

/// Query of `GET /v1/batches/{id}/results`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ResultsParams {
    /// The `next_cursor` of the page before.
    #[param(pattern = "^[0-9]{1,7}$")]
    cursor: Option<String>,
    /// Jobs on this page (default 50).
    #[param(minimum = 1, maximum = 200)]
    limit: Option<usize>,
}

/// Jobs on one page of a batch's results unless `limit` says otherwise, and the most.
const RESULTS_LIMIT: usize = 50;
const MAX_RESULTS_LIMIT: usize = 200;
/// Jobs of a page read from Redis at once.
const RESULTS_PARALLEL: usize = 16;

/// A page of the batch's jobs, in input order, each as `GET /v1/jobs/{id}` answers it: a
/// finished batch's results in `total / limit` requests instead of one per job.
#[utoipa::path(
    get,
    path = "/v1/batches/{id}/results",
    operation_id = "get_batch_results",
    tag = "batches",
    params(("id" = TaskId, Path, description = "Batch id."), ResultsParams),
    responses(
        (status = 200, description = "A page of the batch's jobs with their results (or progress).", body = BatchResults),
        (status = 400, description = "Not a batch id, or a malformed query.", body = ErrorBody),
        (status = 422, description = "`limit` out of range, or a `cursor` that is not one; the message names it.", body = ErrorBody),
        (status = 404, description = "No such batch (or another tenant's).", body = ErrorBody),
        (status = 503, description = "Redis is unavailable.", body = ErrorBody),
    )
)]
pub(crate) async fn results(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    id: Result<Path<String>, PathRejection>,
    params: Result<Query<ResultsParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Path(id) = id.map_err(path_rejected)?;
    let Query(params) = params.map_err(crate::error::query_rejected)?;
    let limit = params.limit.unwrap_or(RESULTS_LIMIT);
    if !(1..=MAX_RESULTS_LIMIT).contains(&limit) {
        return Err(ApiError::invalid(
            "limit",
            format!("from 1 to {MAX_RESULTS_LIMIT}"),
        ));
    }
    let batch = visible(&c, &tenant, parse_id(&id)?).await?;
    let total = batch.jobs.len();
    // A cursor past the end is an empty last page, as a page's cursor is after the batch's
    // last job.
    let start = match params.cursor.as_deref() {
        None => 0,
        Some(cursor) => cursor
            .parse::<usize>()
            .map_err(|_| {
                ApiError::invalid(
                    "cursor",
                    "not a cursor of this batch's results (pass a page's next_cursor unchanged)",
                )
            })?
            .min(total),
    };
    let end = (start + limit).min(total);
    let page: Vec<TaskId> = batch.jobs[start..end].to_vec();
    let results: Vec<BatchResult> = futures::stream::iter(page)
        .map(|job| {
            let c = &c;
            async move {
                Ok::<_, ApiError>(match crate::jobs::view(c, job).await? {
                    Some(view) => BatchResult::Job(view),
                    None => BatchResult::Expired(ExpiredJob {
                        job_id: job,
                        status: ExpiredStatus::Unknown,
                    }),
                })
            }
        })
        .buffered(RESULTS_PARALLEL)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    Ok(axum::Json(BatchResults {
        batch_id: batch.id,
        total,
        results,
        next_cursor: (end < total).then(|| end.to_string()),
    })
    .into_response())
}

/// The batch `id` if `tenant` sees it, else 404 (as an unknown one).
pub(crate) async fn visible(
    c: &Coordinator,
    tenant: &Tenant,
    id: TaskId,
) -> Result<Batch, ApiError> {
    let batch = c.stores.jobs.batch(id).await.map_err(unavailable)?;
    batch
        .filter(|b| tenant.sees(&b.tenant))
        .ok_or_else(|| crate::error::not_found(format!("no batch {id}")))
}

pub(crate) fn parse_id(id: &str) -> Result<TaskId, ApiError> {
    id.parse().map_err(|e| crate::error::invalid_id("batch", e))
}

#[cfg(test)]
mod tests;
