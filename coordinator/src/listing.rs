//! Listing a tenant's work: `GET /v1/jobs`, `GET /v1/batches`, `GET /v1/executions`.
//!
//! Newest first from the tenant's index (`store::index`), filtered by submission time in
//! the index itself and by status as each page is read. A status filter can skip many items,
//! so one answer reads at most [`MAX_SCAN`] of them and may hold fewer than `limit`: its
//! `next_cursor` carries on from where it stopped, and only the last page has none.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Query, State};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use proto::api::ErrorCode;
use proto::api::{
    BatchList, BatchStatus, BatchSummary, ErrorBody, ExecutionList, ExecutionState,
    ExecutionSummary, JobList, JobSummary,
};
use serde::Deserialize;
use store::index::{Entry, Kind, Query as IndexQuery};

use crate::Coordinator;
use crate::auth::Tenant;
use crate::error::{ApiError, unavailable};

/// Items of one page unless `limit` says otherwise, and the most it may say.
const DEFAULT_LIMIT: usize = 20;
pub(crate) const MAX_LIMIT: usize = 100;
/// Items one answer reads at most while a status filter skips them.
const MAX_SCAN: usize = 1000;
/// Items summarized at once (their state read from Redis in parallel).
const PARALLEL: usize = 16;
/// Characters of an instruction shown in a job list.
const INSTRUCTION_CHARS: usize = 200;

/// The query of a listing route, with its kind's status type. Every value the document
/// allows is accepted: statuses are enums, times are RFC 3339 `date-time`s, and the cursor
/// has the pattern of the cursors pages give.
macro_rules! list_params {
    ($name:ident, $status:ty) => {
        #[derive(Debug, Deserialize, utoipa::IntoParams)]
        #[serde(deny_unknown_fields)]
        #[into_params(parameter_in = Query)]
        pub(crate) struct $name {
            /// Only items in this status.
            status: Option<$status>,
            /// Only items submitted at or after this time (RFC 3339).
            #[param(format = DateTime)]
            since: Option<String>,
            /// Only items submitted before this time (RFC 3339).
            #[param(format = DateTime)]
            until: Option<String>,
            /// The `next_cursor` of the page before.
            #[param(pattern = r"^[0-9]{13}:[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")]
            cursor: Option<String>,
            /// Items per page, 1 to 100 (default 20).
            #[param(minimum = 1, maximum = 100, default = 20)]
            limit: Option<usize>,
        }

        impl $name {
            fn window(&self, tenant: &Tenant) -> Result<(IndexQuery, usize), ApiError> {
                window(
                    tenant,
                    self.status.is_some(),
                    self.since.as_deref(),
                    self.until.as_deref(),
                    self.cursor.as_deref(),
                    self.limit,
                )
            }
        }
    };
}

list_params!(JobParams, proto::job::JobStatus);
list_params!(BatchParams, BatchStatus);
list_params!(ExecutionParams, ExecutionState);

/// An RFC 3339 time as milliseconds since the epoch (earlier times as 0); 422 naming `field`.
pub(crate) fn parse_time(field: &str, value: &str) -> Result<u64, ApiError> {
    let at = time::OffsetDateTime::parse(value, &time::format_description::well_known::Rfc3339)
        .map_err(|e| ApiError::invalid(field, format!("not an RFC 3339 time: {e}")))?;
    Ok(u64::try_from(at.unix_timestamp_nanos() / 1_000_000).unwrap_or(0))
}

/// The index query of a listing and the items wanted.
fn window(
    tenant: &Tenant,
    filtered: bool,
    since: Option<&str>,
    until: Option<&str>,
    cursor: Option<&str>,
    limit: Option<usize>,
) -> Result<(IndexQuery, usize), ApiError> {
    let limit = limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::invalid(
            "limit",
            format!("must be between 1 and {MAX_LIMIT}"),
        ));
    }
    if let Some(cursor) = cursor
        && !store::index::valid_cursor(cursor)
    {
        return Err(ApiError::invalid(
            "cursor",
            "not a cursor this API gave (pass a page's next_cursor unchanged)",
        ));
    }
    let query = IndexQuery {
        tenant: tenant.0.clone(),
        since_ms: since.map(|v| parse_time("since", v)).transpose()?,
        until_ms: until.map(|v| parse_time("until", v)).transpose()?,
        cursor: cursor.map(str::to_owned),
        // With a status filter, read pages larger than the answer: most may be skipped.
        limit: if filtered { MAX_LIMIT } else { limit },
    };
    Ok((query, limit))
}

/// Reads the index from `query` on, summarizing each entry (`None`: filtered out, or its
/// state has expired), until `limit` items, the end, or [`MAX_SCAN`] entries read.
async fn scan<T, F, Fut>(
    c: &Coordinator,
    kind: Kind,
    mut query: IndexQuery,
    limit: usize,
    summarize: F,
) -> Result<(Vec<T>, Option<String>), ApiError>
where
    F: Fn(Entry) -> Fut,
    Fut: Future<Output = Result<Option<T>, ApiError>>,
{
    let Some(index) = &c.stores.index else {
        return Err(ApiError::new(
            ErrorCode::NotKept,
            "this coordinator keeps no index of submitted work (it runs without Redis)",
        ));
    };
    let mut items = Vec::new();
    let mut scanned = 0;
    loop {
        let page = index.page(kind, &query).await.map_err(unavailable)?;
        let entries = page.entries.clone();
        let summaries: Vec<Result<Option<T>, ApiError>> = futures::stream::iter(entries.clone())
            .map(&summarize)
            .buffered(PARALLEL)
            .collect()
            .await;
        for (i, (entry, summary)) in entries.iter().zip(summaries).enumerate() {
            scanned += 1;
            if let Some(item) = summary? {
                items.push(item);
            }
            let more = i + 1 < entries.len() || page.next.is_some();
            if items.len() == limit || (scanned >= MAX_SCAN && more) {
                return Ok((items, more.then(|| store::index::cursor_after(entry))));
            }
        }
        match page.next {
            Some(next) => query.cursor = Some(next),
            None => return Ok((items, None)),
        }
    }
}

/// The caller's jobs, newest first.
#[utoipa::path(
    get,
    path = "/v1/jobs",
    operation_id = "list_jobs",
    tag = "jobs",
    params(JobParams),
    responses(
        (status = 200, description = "A page of jobs, newest first.", body = JobList),
        (status = 400, description = "An unknown query parameter.", body = ErrorBody),
        (status = 422, description = "A parameter out of range; the message names it.", body = ErrorBody),
        (status = 429, description = "Over the tenant's request rate (`coordinator.tenants.<name>.requests_per_second`); `Retry-After` says when to retry.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable.", body = ErrorBody),
    )
)]
pub(crate) async fn jobs(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    params: Result<Query<JobParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(params) = params.map_err(crate::error::query_rejected)?;
    let (query, limit) = params.window(&tenant)?;
    let wanted = params.status;
    let (jobs, next_cursor) = scan(&c, Kind::Jobs, query, limit, |entry| {
        let c = c.clone();
        async move {
            let meta = c
                .stores
                .jobs
                .job_meta(entry.id)
                .await
                .map_err(unavailable)?;
            let status = c.stores.jobs.status(entry.id).await.map_err(unavailable)?;
            let (Some(meta), Some(status)) = (meta, status) else {
                return Ok(None);
            };
            if wanted.is_some_and(|w| w != status) {
                return Ok(None);
            }
            Ok(Some(JobSummary {
                job_id: entry.id,
                status,
                submitted_at_ms: meta.submitted_at_ms,
                language: meta.request.language,
                instruction: meta
                    .request
                    .instruction
                    .chars()
                    .take(INSTRUCTION_CHARS)
                    .collect(),
            }))
        }
    })
    .await?;
    Ok(axum::Json(JobList { jobs, next_cursor }).into_response())
}

/// The caller's batches, newest first.
#[utoipa::path(
    get,
    path = "/v1/batches",
    operation_id = "list_batches",
    tag = "batches",
    params(BatchParams),
    responses(
        (status = 200, description = "A page of batches, newest first.", body = BatchList),
        (status = 400, description = "An unknown query parameter.", body = ErrorBody),
        (status = 422, description = "A parameter out of range; the message names it.", body = ErrorBody),
        (status = 429, description = "Over the tenant's request rate (`coordinator.tenants.<name>.requests_per_second`); `Retry-After` says when to retry.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable.", body = ErrorBody),
    )
)]
pub(crate) async fn batches(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    params: Result<Query<BatchParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(params) = params.map_err(crate::error::query_rejected)?;
    let (query, limit) = params.window(&tenant)?;
    let wanted = params.status;
    let (batches, next_cursor) = scan(&c, Kind::Batches, query, limit, |entry| {
        let c = c.clone();
        async move {
            let Some(batch) = c.stores.jobs.batch(entry.id).await.map_err(unavailable)? else {
                return Ok(None);
            };
            let view = crate::batches::view(&c, &batch).await?;
            if wanted.is_some_and(|w| w != view.status) {
                return Ok(None);
            }
            Ok(Some(BatchSummary {
                batch_id: batch.id,
                status: view.status,
                submitted_at_ms: batch.submitted_at_ms,
                jobs: batch.jobs.len(),
            }))
        }
    })
    .await?;
    Ok(axum::Json(BatchList {
        batches,
        next_cursor,
    })
    .into_response())
}

/// The caller's executions, newest first.
#[utoipa::path(
    get,
    path = "/v1/executions",
    operation_id = "list_executions",
    tag = "executions",
    params(ExecutionParams),
    responses(
        (status = 200, description = "A page of executions, newest first.", body = ExecutionList),
        (status = 400, description = "An unknown query parameter.", body = ErrorBody),
        (status = 422, description = "A parameter out of range; the message names it.", body = ErrorBody),
        (status = 429, description = "Over the tenant's request rate (`coordinator.tenants.<name>.requests_per_second`); `Retry-After` says when to retry.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable.", body = ErrorBody),
    )
)]
pub(crate) async fn executions(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    params: Result<Query<ExecutionParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(params) = params.map_err(crate::error::query_rejected)?;
    let (query, limit) = params.window(&tenant)?;
    let wanted = params.status;
    let (executions, next_cursor) = scan(&c, Kind::Executions, query, limit, |entry| {
        let c = c.clone();
        async move {
            let Some(meta) = c
                .stores
                .executions
                .execution_meta(entry.id)
                .await
                .map_err(unavailable)?
            else {
                return Ok(None);
            };
            let result = c
                .stores
                .executions
                .execution_result(entry.id)
                .await
                .map_err(unavailable)?;
            let status = ExecutionState::from(result.map(|r| r.status));
            if wanted.is_some_and(|w| w != status) {
                return Ok(None);
            }
            Ok(Some(ExecutionSummary {
                id: entry.id,
                status,
                submitted_at_ms: meta.submitted_at_ms,
                language: meta.language,
            }))
        }
    })
    .await?;
    Ok(axum::Json(ExecutionList {
        executions,
        next_cursor,
    })
    .into_response())
}
