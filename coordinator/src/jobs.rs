//! The job routes: submit a job, read its result or its progress, follow its events.

use proto::api::ErrorCode;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use proto::api::{ErrorBody, FunctionProgress, JobAccepted, JobProgress, JobView, Pending};
use proto::job::{JobMeta, JobRequest, JobResult, JobStatus, JobSubmission, Mode, ReworkMode};
use proto::{Language, Progress, Task, TaskId};

use crate::auth::Tenant;
use crate::body::from_json;
use crate::error::{ApiError, path_rejected, unavailable};
use crate::request_id::RequestIdOf;
use crate::{Coordinator, now_ms};
use axum::Extension;
use store::index::Kind;
use store::webhooks::HookKind;

/// Longest an event stream waits for a new event before it checks the job's status again (the
/// `finished` event ends it; this is the safety net for a job that ended without one).
const EVENTS_WAIT: Duration = Duration::from_secs(15);

/// Checks a job submission against the configured limits.
pub(crate) fn validate(
    options: &crate::Options,
    submission: JobSubmission,
) -> Result<JobRequest, ApiError> {
    let instruction = submission.instruction.trim().to_owned();
    if instruction.is_empty() {
        return Err(ApiError::invalid("instruction", "must not be empty"));
    }
    if instruction.len() > options.max_instruction_bytes {
        return Err(ApiError::invalid(
            "instruction",
            format!(
                "{} bytes is over the limit of {} bytes",
                instruction.len(),
                options.max_instruction_bytes
            ),
        ));
    }
    let (language, language_reason) = match &submission.language {
        Some(named) => (
            named
                .parse::<Language>()
                .map_err(|e| ApiError::invalid("language", e))?,
            "named in the request's `language`".to_owned(),
        ),
        None => {
            let texts = [
                submission.instruction.as_str(),
                submission.constraints.as_deref().unwrap_or_default(),
            ];
            match proto::detect::named_language(&texts) {
                Some((language, words)) => {
                    (language, format!("the request names it (\"{words}\")"))
                }
                None => (
                    Language::Python,
                    "the default: the request names no language".to_owned(),
                ),
            }
        }
    };
    let agent = crate::agent_jobs::agent_request(options, &submission, language)?;
    if agent.is_none() && !language.spec().generation {
        let supported: Vec<&str> = Language::ALL
            .iter()
            .filter(|l| l.spec().generation)
            .map(|l| l.as_str())
            .collect();
        let chosen = match &submission.language {
            Some(_) => language.to_string(),
            None => format!("{language} ({language_reason}; set `language` to choose another)"),
        };
        return Err(ApiError::invalid(
            "language",
            format!(
                "generation jobs are written in {} only; {chosen} runs as plain executions \
                 (POST /v1/executions)",
                supported.join(", ")
            ),
        ));
    }
    let max_iterations = submission
        .max_iterations
        .unwrap_or(options.default_max_iterations);
    if max_iterations == 0 || max_iterations > options.max_iterations_limit {
        return Err(ApiError::invalid(
            "max_iterations",
            format!("must be between 1 and {}", options.max_iterations_limit),
        ));
    }
    let candidates = submission.candidates.unwrap_or(1);
    if !(1..=MAX_CANDIDATES).contains(&candidates) {
        return Err(ApiError::invalid(
            "candidates",
            format!("must be between 1 and {MAX_CANDIDATES}"),
        ));
    }
    let max_tokens_total = submission
        .max_tokens_total
        .unwrap_or(options.default_max_tokens_total);
    if max_tokens_total == 0 || max_tokens_total > options.max_tokens_total_limit {
        return Err(ApiError::invalid(
            "max_tokens_total",
            format!("must be between 1 and {}", options.max_tokens_total_limit),
        ));
    }
    for (field, value) in [
        ("constraints", &submission.constraints),
        ("test_requirements", &submission.test_requirements),
    ] {
        if value
            .as_ref()
            .is_some_and(|v| v.len() > options.max_instruction_bytes)
        {
            return Err(ApiError::invalid(
                field,
                format!("over the limit of {} bytes", options.max_instruction_bytes),
            ));
        }
    }
    let rework = rework(options, &submission)?;
    Ok(JobRequest {
        instruction,
        language,
        language_reason,
        constraints: submission.constraints,
        test_requirements: submission.test_requirements,
        max_iterations,
        candidates,
        max_tokens_total: Some(max_tokens_total),
        rework,
        agent,
        memory: submission.memory.unwrap_or_default(),
    })
}

/// Most implementations a function's first attempt asks for.
pub const MAX_CANDIDATES: u32 = 10;

/// Most goals a refactor takes, and the longest one.
const MAX_GOALS: usize = 10;
const MAX_GOAL_BYTES: usize = 200;

/// A `debug` or `refactor` submission's given code and what to do with it; `None` for a
/// generating one, which must not carry them.
fn rework(
    options: &crate::Options,
    submission: &JobSubmission,
) -> Result<Option<proto::job::Rework>, ApiError> {
    let mode = submission.mode.unwrap_or_default();
    let only = |field: &str, modes: &str| {
        ApiError::invalid(field, format!("only a {modes} job takes it (`mode`)"))
    };
    if mode != Mode::Debug && submission.error.is_some() {
        return Err(only("error", "`debug`"));
    }
    if mode != Mode::Refactor && submission.goals.is_some() {
        return Err(only("goals", "`refactor`"));
    }
    let Some(rework_mode) = mode.rework() else {
        return match submission.code {
            Some(_) => Err(only("code", "`debug` or `refactor`")),
            None => Ok(None),
        };
    };
    let code = submission
        .code
        .as_deref()
        .filter(|c| !c.trim().is_empty())
        .ok_or_else(|| {
            ApiError::invalid(
                "code",
                format!("a `{}` job needs the code to work on", mode.as_str()),
            )
        })?;
    if code.len() > options.max_code_bytes {
        return Err(ApiError::invalid(
            "code",
            format!("over the limit of {} bytes", options.max_code_bytes),
        ));
    }
    let error = match rework_mode {
        ReworkMode::Debug => {
            let error = submission
                .error
                .as_deref()
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .ok_or_else(|| {
                    ApiError::invalid(
                        "error",
                        "a `debug` job needs the error the code raised or how it misbehaves",
                    )
                })?;
            if error.len() > options.max_instruction_bytes {
                return Err(ApiError::invalid(
                    "error",
                    format!("over the limit of {} bytes", options.max_instruction_bytes),
                ));
            }
            Some(error.to_owned())
        }
        ReworkMode::Refactor => None,
    };
    let goals: Vec<String> = submission
        .goals
        .iter()
        .flatten()
        .map(|g| g.trim().to_owned())
        .filter(|g| !g.is_empty())
        .collect();
    if goals.len() > MAX_GOALS || goals.iter().any(|g| g.len() > MAX_GOAL_BYTES) {
        return Err(ApiError::invalid(
            "goals",
            format!("at most {MAX_GOALS} goals of at most {MAX_GOAL_BYTES} bytes each"),
        ));
    }
    let goals = if rework_mode == ReworkMode::Refactor && goals.is_empty() {
        vec!["readability".to_owned()]
    } else {
        goals
    };
    Ok(Some(proto::job::Rework {
        mode: rework_mode,
        code: code.to_owned(),
        error,
        goals,
    }))
}

/// Submits a generation job.
///
/// Accepted jobs answer 202 with their id at once (and a `Location`); a solution-cache hit
/// answers 200 with the finished result (`metrics.cache: hit`).
#[utoipa::path(
    post,
    path = "/v1/jobs",
    operation_id = "submit_job",
    tag = "jobs",
    request_body = JobSubmission,
    responses(
        (status = 200, description = "Answered from the solution cache.", body = JobResult),
        (status = 202, description = "Accepted.", body = JobAccepted,
            headers(("Location" = String, description = "The job."))),
        (status = 400, description = "Malformed body (not JSON, unknown field).", body = ErrorBody),
        (status = 413, description = "Body over `coordinator.max_body_bytes`.", body = ErrorBody),
        (status = 422, description = "A value out of range; the message names the field.", body = ErrorBody),
        (status = 503, description = "Redis or the broker is unavailable, or no worker can generate (every live worker runs without a model), or (an agent job) no live worker can take a session; the message says which.", body = ErrorBody),
    )
)]
pub(crate) async fn submit(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    RequestIdOf(request_id): RequestIdOf,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|e| crate::error::body_rejected(e.status(), e.body_text()))?;
    let mut submission: JobSubmission =
        from_json(&body).map_err(|e| e.into_api("invalid request body: "))?;
    let callback = submission.callback_url.take();
    let request = validate(&c.options, submission)?;
    if let Some(url) = &callback {
        c.check_callback("callback_url", tenant.0.as_deref(), url)
            .await?;
    }
    let id = TaskId::new();
    crate::quotas::admit(&c, Kind::Jobs, &tenant, &[id]).await?;
    let created = async {
        register_callback(&c, id, &tenant, callback.as_deref()).await?;
        create_job(&c, id, request, tenant.0.clone(), request_id.as_deref()).await
    }
    .await;
    if created.is_err() {
        crate::quotas::release(&c, Kind::Jobs, &tenant, &[id]).await;
    }
    let created = created?;
    tracing::info!(
        job = %id,
        cached = matches!(created, Created::Cached(_)),
        "job accepted"
    );
    Ok(match created {
        Created::Cached(result) => (StatusCode::OK, axum::Json(result)).into_response(),
        Created::Queued(id) => (
            StatusCode::ACCEPTED,
            [(header::LOCATION, format!("/v1/jobs/{id}"))],
            axum::Json(JobAccepted {
                job_id: id,
                status: Pending::Queued,
            }),
        )
            .into_response(),
    })
}

/// Records job `id`'s webhook, if it has one, before the job exists (a job answered from the
/// cache ends as it is created, and its end must find the webhook).
pub(crate) async fn register_callback(
    c: &Coordinator,
    id: TaskId,
    tenant: &Tenant,
    url: Option<&str>,
) -> Result<(), ApiError> {
    match (url, c.webhooks()) {
        (Some(url), Some((store, _))) => store
            .register_job(id, url, tenant.0.as_deref())
            .await
            .map_err(unavailable),
        _ => Ok(()),
    }
}

/// A job [`create_job`] made.
#[derive(Debug)]
pub(crate) enum Created {
    /// Recorded, and its plan task published.
    Queued(TaskId),
    /// Answered from the solution cache: already finished with this result.
    Cached(Box<JobResult>),
}

impl Created {
    pub(crate) fn id(&self) -> TaskId {
        match self {
            Created::Queued(id) => *id,
            Created::Cached(result) => result.job_id,
        }
    }
}

/// Creates a validated job: from the solution cache when it has the answer, else recorded and
/// its plan task published. Used by `POST /v1/jobs` and `POST /v1/batches`. A job whose task
/// cannot be published is stored as failed (its id never stays "queued") and answers 503.
pub(crate) async fn create_job(
    c: &Coordinator,
    id: TaskId,
    request: JobRequest,
    tenant: Option<String>,
    request_id: Option<&str>,
) -> Result<Created, ApiError> {
    // An agent's run is not a function of its request (its tools' results are the sandbox's).
    let cache_key = c
        .cache()
        .as_ref()
        .filter(|_| request.agent.is_none())
        .map(|(_, model)| proto::job::solution_cache_key(&request, model));
    if let (Some((cache, _)), Some(key)) = (c.cache(), &cache_key) {
        match cache.cached_solution(key).await {
            Ok(Some(cached)) => {
                let _ = cache.count_lookup("solution", true).await;
                let result = answer_from_cache(c, id, request, tenant, request_id, cached).await?;
                return Ok(Created::Cached(Box::new(result)));
            }
            Ok(None) => {
                let _ = cache.count_lookup("solution", false).await;
            }
            Err(e) => tracing::warn!(error = %e, "solution cache unavailable; generating"),
        }
    }
    c.refuse_without_broker()?;
    refuse_without_generators(c).await?;
    if request.agent.is_some() {
        crate::agent_jobs::refuse_without_session_hosts(c).await?;
    }
    let meta = JobMeta {
        id,
        tenant,
        request,
        submitted_at_ms: now_ms(),
        replans: 0,
        plan_tokens: Default::default(),
        plan_model_calls: 0,
        cache_key,
        max_functions: u32::try_from(c.options.max_functions).unwrap_or(u32::MAX),
        request_id: request_id.map(str::to_owned),
    };
    c.list(
        Kind::Jobs,
        meta.tenant.as_deref(),
        meta.submitted_at_ms,
        &[id],
    )
    .await?;
    c.stores.jobs.create_job(&meta).await.map_err(unavailable)?;
    let _ = c
        .stores
        .jobs
        .push_event(id, &Progress::Queued { job_id: id })
        .await;
    let first = match meta.request.agent {
        Some(_) => Task::Agent(proto::agent::AgentTask { job_id: id }),
        None => Task::Plan(proto::job::PlanTask {
            job_id: id,
            problem: None,
        }),
    };
    if let Err(e) = c.flow.publish(first, &meta).await {
        let reason = format!("not queued: {e}");
        if let Err(e) = c.fail_job(&meta, &reason).await {
            tracing::warn!(job = %id, error = %e, "cannot record that the job was not queued");
        }
        return Err(ApiError::new(ErrorCode::NotQueued, reason));
    }
    c.metrics.jobs_submitted.with_label_values(&["miss"]).inc();
    Ok(Created::Queued(id))
}

/// 503 naming why while workers are alive and none of them can generate.
pub(crate) async fn refuse_without_generators(c: &Coordinator) -> Result<(), ApiError> {
    match &c.generators {
        Some(generators) => match generators.refusal().await {
            Some(reason) => Err(ApiError::new(ErrorCode::NoGenerator, reason)),
            None => Ok(()),
        },
        None => Ok(()),
    }
}

/// A cache hit becomes a finished job of its own; returns its result.
async fn answer_from_cache(
    c: &Coordinator,
    id: TaskId,
    request: JobRequest,
    tenant: Option<String>,
    request_id: Option<&str>,
    cached: JobResult,
) -> Result<JobResult, ApiError> {
    let meta = JobMeta {
        id,
        tenant,
        request,
        submitted_at_ms: now_ms(),
        replans: 0,
        plan_tokens: Default::default(),
        plan_model_calls: 0,
        cache_key: None,
        max_functions: u32::try_from(c.options.max_functions).unwrap_or(u32::MAX),
        request_id: request_id.map(str::to_owned),
    };
    let result = JobResult::from_cache(cached, id);
    c.list(
        Kind::Jobs,
        meta.tenant.as_deref(),
        meta.submitted_at_ms,
        &[id],
    )
    .await?;
    c.stores.jobs.create_job(&meta).await.map_err(unavailable)?;
    c.finish_job(meta.tenant.as_deref(), &result)
        .await
        .map_err(unavailable)?;
    c.metrics.jobs_submitted.with_label_values(&["hit"]).inc();
    Ok(result)
}
pub(crate) fn parse_id(id: &str) -> Result<TaskId, ApiError> {
    id.parse().map_err(|e| crate::error::invalid_id("job", e))
}

/// 404 unless the job exists and belongs to `tenant`.
pub(crate) async fn visible(c: &Coordinator, tenant: &Tenant, id: TaskId) -> Result<(), ApiError> {
    match c.stores.jobs.job_meta(id).await.map_err(unavailable)? {
        Some(meta) if tenant.sees(&meta.tenant) => Ok(()),
        _ => Err(crate::error::not_found(format!("no job {id}"))),
    }
}

/// A job: its result when done, else its status and per-function progress.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}",
    operation_id = "get_job",
    tag = "jobs",
    params(("id" = TaskId, Path, description = "Job id.")),
    responses(
        (status = 200, description = "The result, or the progress while it runs.", body = JobView),
        (status = 400, description = "Not a job id.", body = ErrorBody),
        (status = 404, description = "No such job (or another tenant's).", body = ErrorBody),
        (status = 503, description = "Redis is unavailable.", body = ErrorBody),
    )
)]
pub(crate) async fn fetch(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(id) = id.map_err(path_rejected)?;
    let id = parse_id(&id)?;
    visible(&c, &tenant, id).await?;
    match view(&c, id).await? {
        Some(view) => Ok(axum::Json(view).into_response()),
        None => Err(crate::error::not_found(format!("no job {id}"))),
    }
}

/// Job `id` as `GET /v1/jobs/{id}` answers it (`None`: its state is gone).
pub(crate) async fn view(c: &Coordinator, id: TaskId) -> Result<Option<JobView>, ApiError> {
    // The status before the result: a job finishes atomically (result and final status
    // together), so a final status read here always finds its result below, and a job that
    // finishes in between is answered with its result, never as a final status without one.
    let status = c.stores.jobs.status(id).await.map_err(unavailable)?;
    if let Some(mut result) = c.stores.jobs.result(id).await.map_err(unavailable)? {
        result.webhook = c.webhook_view(HookKind::Job, id).await;
        return Ok(Some(JobView::Done(Box::new(result))));
    }
    let Some(status) = status else {
        return Ok(None);
    };
    let mut functions = BTreeMap::new();
    if let Some(plan) = c.stores.jobs.plan(id).await.map_err(unavailable)? {
        for spec in &plan.specs {
            let outcome = c
                .stores
                .jobs
                .function(id, &spec.name)
                .await
                .map_err(unavailable)?;
            functions.insert(
                spec.name.clone(),
                match outcome {
                    Some(o) => FunctionProgress {
                        done: o.done,
                        passed: o.passed,
                        attempts: o.attempts,
                    },
                    None => FunctionProgress {
                        done: false,
                        passed: false,
                        attempts: 0,
                    },
                },
            );
        }
    }
    Ok(Some(JobView::Running(JobProgress {
        job_id: id,
        status,
        functions,
        webhook: c.webhook_view(HookKind::Job, id).await,
    })))
}

/// What a tenant reads for a worker's name in its job's events: the same within the job (so
/// its timeline's lanes are the workers'), unlinkable across jobs, and no host or pod name.
fn worker_alias(job: TaskId, name: &str) -> String {
    use sha2::Digest;
    let mut hash = sha2::Sha256::new();
    hash.update(job.to_string());
    hash.update([0]);
    hash.update(name);
    format!("worker-{}", &hex::encode(hash.finalize())[..6])
}

/// The `Last-Event-ID` header: an event id as this API writes them (a Redis stream id,
/// `<ms>-<seq>`), or 400 naming the header.
fn last_event_id(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(None);
    };
    let invalid = || {
        ApiError::new(
            ErrorCode::InvalidHeader,
            "Last-Event-ID: not an event id of this stream (expected <ms>-<seq>, the id of an \
             event received)",
        )
        .about("Last-Event-ID")
    };
    // An empty value is refused like any other non-id: `EventSource` never sends one, and
    // the document's pattern does not admit it.
    let value = value.to_str().map_err(|_| invalid())?.trim();
    let digits = |s: &str| !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit());
    match value.split_once('-') {
        Some((ms, seq)) if digits(ms) && digits(seq) => Ok(Some(value.to_owned())),
        None if digits(value) => Ok(Some(value.to_owned())),
        _ => Err(invalid()),
    }
}

/// One server-sent event of `GET /v1/jobs/{id}/events` (documentation only: the handler writes
/// these fields as SSE lines). `data` is a `Progress` as JSON; the served document says so
/// with `contentSchema`.
#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)]
pub(crate) struct JobEvent {
    /// Position in the job's progress stream.
    id: String,
    /// The event's name: the `event` field of its data.
    event: String,
    /// A `Progress` object as JSON.
    #[schema(content_media_type = "application/json")]
    data: String,
}

/// A job's progress as server-sent events, replayed from the start (or after `Last-Event-ID`)
/// and ending with the job.
///
/// Each event's data is one `Progress` object; the event's name is its `event` field
/// (`queued`, `planning`, `planned`, `replanning`, `function_started`, `attempt`, `agent_step`,
/// `function_cached`, `function_done`, `finished`), its id the position in the job's stream.
/// `finished` is always the last event. A client whose stream broke sends the last id it
/// received as `Last-Event-ID` (as browsers' `EventSource` does) and gets the events after it.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/events",
    operation_id = "job_events",
    tag = "jobs",
    params(
        ("id" = TaskId, Path, description = "Job id."),
        ("Last-Event-ID" = Option<String>, Header, nullable = false, pattern = r"^[0-9]{1,20}(-[0-9]{1,20})?$",
            description = "Resume after this event id (the `id` of an event already received)."),
    ),
    responses(
        (status = 200, description = "The event stream; the schema is that of one event.",
            body = JobEvent, content_type = "text/event-stream"),
        (status = 400, description = "Not a job id, or a `Last-Event-ID` that is not an event id.", body = ErrorBody),
        (status = 404, description = "No such job (or another tenant's).", body = ErrorBody),
        (status = 503, description = "Redis is unavailable.", body = ErrorBody),
    )
)]
pub(crate) async fn events(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let Path(id) = id.map_err(path_rejected)?;
    let id = parse_id(&id)?;
    let after = last_event_id(&headers)?;
    visible(&c, &tenant, id).await?;
    let admin = c.options.is_admin(&tenant);
    if c.stores
        .jobs
        .status(id)
        .await
        .map_err(unavailable)?
        .is_none()
    {
        return Err(crate::error::not_found(format!("no job {id}")));
    }
    struct Cursor {
        after: Option<String>,
        pending: std::collections::VecDeque<store::StoredEvent>,
        finished: bool,
    }
    let start = Cursor {
        after,
        pending: Default::default(),
        finished: false,
    };
    let stream = futures::stream::unfold((c, start), move |(c, mut cursor)| async move {
        loop {
            if let Some(event) = cursor.pending.pop_front() {
                cursor.after = Some(event.id.clone());
                let shown = match admin {
                    true => event.event,
                    false => event.event.map_worker(|name| worker_alias(id, name)),
                };
                let sse = SseEvent::default()
                    .id(event.id)
                    .event(shown.name())
                    .data(shown.to_json());
                return Some((Ok(sse), (c, cursor)));
            }
            if cursor.finished {
                return None;
            }
            // Woken by each new event's notice; `finished` is always the last event.
            match c
                .stores
                .jobs
                .wait_events(id, cursor.after.as_deref(), EVENTS_WAIT)
                .await
            {
                Ok(events) if !events.is_empty() => {
                    cursor.finished = events
                        .iter()
                        .any(|e| matches!(e.event, Progress::Finished { .. }));
                    cursor.pending.extend(events);
                }
                // Nothing new for a while (or Redis away): a job that ended without its event
                // (expired state) ends the stream; the status is read before the events, so
                // the last events are not missed.
                _ => {
                    let status = c.stores.jobs.status(id).await;
                    if let Ok(status) = status
                        && status.is_none_or(JobStatus::is_final)
                    {
                        if let Ok(events) = c.stores.jobs.events(id, cursor.after.as_deref()).await
                        {
                            cursor.pending.extend(events);
                        }
                        cursor.finished = true;
                    }
                }
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workers_alias_is_the_same_within_a_job_and_tells_nothing_of_its_host() {
        let (job, other) = (TaskId::new(), TaskId::new());
        let a = worker_alias(job, "node-7-4242");
        assert_eq!(a, worker_alias(job, "node-7-4242"));
        assert_ne!(
            a,
            worker_alias(job, "node-8-4242"),
            "two workers, two lanes"
        );
        assert_ne!(
            a,
            worker_alias(other, "node-7-4242"),
            "unlinkable across jobs"
        );
        assert!(a.starts_with("worker-") && !a.contains("node"), "{a}");
    }
}
