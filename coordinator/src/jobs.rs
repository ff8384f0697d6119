//! Generation jobs: the API, and the coordinator's side of the pipeline (turning worker
//! events into the next tasks).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use broker::{Delivery, Outgoing, Queue};
use futures::{Stream, StreamExt};
use proto::api::{ErrorBody, FunctionProgress, JobAccepted, JobProgress, JobView, Pending};
use proto::job::{
    CacheOutcome, Event, JobMeta, JobMetrics, JobRequest, JobResult, JobStatus, JobSubmission,
    JobTask, Quality, Validation,
};
use proto::{Envelope, Language, Progress, Task, TaskId};
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;

use crate::api::{ApiError, from_json, path_rejected};
use crate::auth::Tenant;
use crate::planning::plan;
use crate::{Coordinator, now_ms};
use axum::Extension;
use backon::{ExponentialBuilder, Retryable};

/// Why an event could not be applied, with the retry decision in the type.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EventError {
    #[error(transparent)]
    Store(#[from] store::Error),
    #[error(transparent)]
    Broker(#[from] broker::Error),
    /// The stored state contradicts the event; waiting will not change it.
    #[error("{0}")]
    Invalid(&'static str),
}

impl EventError {
    /// Redis or the broker unreachable: the same event applies once it is back.
    fn is_retryable(&self) -> bool {
        match self {
            EventError::Store(e) => e.is_retryable(),
            EventError::Broker(e) => e.is_retryable(),
            EventError::Invalid(_) => false,
        }
    }
}

/// The integrate task's name in the job's published set (not an identifier, so it cannot be
/// a function's name).
const INTEGRATE: &str = "#integrate";

fn unavailable(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
}

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
    let language: Language = submission
        .language
        .parse()
        .map_err(|e| ApiError::invalid("language", e))?;
    if !language.spec().generation {
        let supported: Vec<&str> = Language::ALL
            .iter()
            .filter(|l| l.spec().generation)
            .map(|l| l.as_str())
            .collect();
        return Err(ApiError::invalid(
            "language",
            format!(
                "generation jobs are written in {} only; {language} runs as plain executions \
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
    Ok(JobRequest {
        instruction,
        language,
        constraints: submission.constraints,
        test_requirements: submission.test_requirements,
        max_iterations,
    })
}

/// `GET /v1/cache/stats`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CacheStats {
    /// The model identity the cache is keyed on (provider/model@prompt version).
    model: String,
    /// Cached solutions.
    solutions: u64,
    /// Cached verified functions.
    functions: u64,
    /// `solution_hits`, `solution_misses`, `function_hits`, `function_misses`.
    counters: BTreeMap<String, u64>,
}

/// `DELETE /v1/cache`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CacheCleared {
    /// Entries removed (solutions and functions).
    removed: u64,
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
        (status = 401, description = "API keys are configured and none (or an unknown one) was given.", body = ErrorBody),
        (status = 413, description = "Body over `coordinator.max_body_bytes`.", body = ErrorBody),
        (status = 422, description = "A value out of range; the message names the field.", body = ErrorBody),
        (status = 503, description = "Redis or the broker is unavailable.", body = ErrorBody),
    )
)]
pub(crate) async fn submit(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|e| ApiError::new(e.status(), e.body_text()))?;
    let submission: JobSubmission = from_json(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("invalid request body: {e}"),
        )
    })?;
    let request = validate(&c.options, submission)?;
    Ok(match create_job(&c, request, tenant.0).await? {
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
    request: JobRequest,
    tenant: Option<String>,
) -> Result<Created, ApiError> {
    let id = TaskId::new();
    let cache_key = c
        .cache
        .as_ref()
        .map(|(_, model)| proto::job::solution_cache_key(&request, model));
    if let (Some((cache, _)), Some(key)) = (&c.cache, &cache_key) {
        match cache.cached_solution(key).await {
            Ok(Some(cached)) => {
                let _ = cache.count_lookup("solution", true).await;
                let result = answer_from_cache(c, id, request, tenant, cached).await?;
                return Ok(Created::Cached(Box::new(result)));
            }
            Ok(None) => {
                let _ = cache.count_lookup("solution", false).await;
            }
            Err(e) => tracing::warn!(error = %e, "solution cache unavailable; generating"),
        }
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
    };
    c.jobs.create_job(&meta).await.map_err(unavailable)?;
    let _ = c
        .jobs
        .push_event(id, &Progress::Queued { job_id: id })
        .await;
    if let Err(e) = c
        .publish_task(Task::Plan(task(id, None, None)), meta.tenant.clone())
        .await
    {
        let reason = format!("not queued: {e}");
        if let Err(e) = c.fail_job(&meta, &reason).await {
            tracing::warn!(job = %id, error = %e, "cannot record that the job was not queued");
        }
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, reason));
    }
    c.metrics.jobs.with_label_values(&["accepted"]).inc();
    Ok(Created::Queued(id))
}

/// A cache hit becomes a finished job of its own; returns its result.
async fn answer_from_cache(
    c: &Coordinator,
    id: TaskId,
    request: JobRequest,
    tenant: Option<String>,
    mut result: JobResult,
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
    };
    result.job_id = id;
    result.metrics = JobMetrics {
        cache: CacheOutcome::Hit,
        ..JobMetrics::default()
    };
    c.jobs.create_job(&meta).await.map_err(unavailable)?;
    c.jobs.finish_job(id, &result).await.map_err(unavailable)?;
    c.metrics.jobs.with_label_values(&["cache_hit"]).inc();
    Ok(result)
}

/// Entry counts and hit/miss counters of the solution and function-level caches.
#[utoipa::path(
    get,
    path = "/v1/cache/stats",
    operation_id = "cache_stats",
    tag = "cache",
    responses(
        (status = 200, description = "The counts.", body = CacheStats),
        (status = 401, description = "API keys are configured and none (or an unknown one) was given.", body = ErrorBody),
        (status = 404, description = "This coordinator runs without a cache.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable.", body = ErrorBody),
    )
)]
pub(crate) async fn cache_stats(State(c): State<Coordinator>) -> Result<Response, ApiError> {
    let Some((cache, model)) = &c.cache else {
        return Err(ApiError::new(StatusCode::NOT_FOUND, "caching is off"));
    };
    let stats = cache.cache_stats().await.map_err(unavailable)?;
    Ok(axum::Json(CacheStats {
        model: model.clone(),
        solutions: stats.solutions,
        functions: stats.functions,
        counters: stats.counters,
    })
    .into_response())
}

/// Empties the solution and function-level caches.
#[utoipa::path(
    delete,
    path = "/v1/cache",
    operation_id = "clear_cache",
    tag = "cache",
    responses(
        (status = 200, description = "Emptied.", body = CacheCleared),
        (status = 401, description = "API keys are configured and none (or an unknown one) was given.", body = ErrorBody),
        (status = 403, description = "The caches are shared by every tenant: only `coordinator.admin_tenants` may empty them.", body = ErrorBody),
        (status = 404, description = "This coordinator runs without a cache.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable.", body = ErrorBody),
    )
)]
pub(crate) async fn cache_clear(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
) -> Result<Response, ApiError> {
    if !c.options.is_admin(&tenant) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "the caches are shared by every tenant: only coordinator.admin_tenants may empty them",
        ));
    }
    let Some((cache, _)) = &c.cache else {
        return Err(ApiError::new(StatusCode::NOT_FOUND, "caching is off"));
    };
    let removed = cache.clear_cache().await.map_err(unavailable)?;
    Ok(axum::Json(CacheCleared { removed }).into_response())
}

fn task(job_id: TaskId, function: Option<String>, problem: Option<String>) -> JobTask {
    JobTask {
        job_id,
        function,
        problem,
    }
}

fn parse_id(id: &str) -> Result<TaskId, ApiError> {
    id.parse()
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("id: not a job id: {e}")))
}

/// 404 unless the job exists and belongs to `tenant`.
pub(crate) async fn visible(c: &Coordinator, tenant: &Tenant, id: TaskId) -> Result<(), ApiError> {
    match c.jobs.job_meta(id).await.map_err(unavailable)? {
        Some(meta) if tenant.sees(&meta.tenant) => Ok(()),
        _ => Err(ApiError::new(StatusCode::NOT_FOUND, format!("no job {id}"))),
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
        (status = 401, description = "API keys are configured and none (or an unknown one) was given.", body = ErrorBody),
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
    // The status before the result: a job finishes atomically (result and final status
    // together), so a final status read here always finds its result below, and a job that
    // finishes in between is answered with its result, never as a final status without one.
    let status = c.jobs.status(id).await.map_err(unavailable)?;
    if let Some(result) = c.jobs.result(id).await.map_err(unavailable)? {
        return Ok(axum::Json(JobView::Done(Box::new(result))).into_response());
    }
    let Some(status) = status else {
        return Err(ApiError::new(StatusCode::NOT_FOUND, format!("no job {id}")));
    };
    let mut functions = BTreeMap::new();
    if let Some(plan) = c.jobs.plan(id).await.map_err(unavailable)? {
        for spec in &plan.specs {
            let outcome = c.jobs.function(id, &spec.name).await.map_err(unavailable)?;
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
    Ok(axum::Json(JobView::Running(JobProgress {
        job_id: id,
        status,
        functions,
    }))
    .into_response())
}

/// A job's progress as server-sent events, replayed from the start and ending with the job.
///
/// Each event's data is one `Progress` object; the event's name is its `event` field
/// (`queued`, `planning`, `planned`, `replanning`, `function_started`, `attempt`,
/// `function_cached`, `function_done`, `finished`), its id the position in the job's stream.
/// `finished` is always the last event.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/events",
    operation_id = "job_events",
    tag = "jobs",
    params(("id" = TaskId, Path, description = "Job id.")),
    responses(
        (status = 200, description = "The event stream; the schema is that of one event's data.",
            body = Progress, content_type = "text/event-stream"),
        (status = 400, description = "Not a job id.", body = ErrorBody),
        (status = 401, description = "API keys are configured and none (or an unknown one) was given.", body = ErrorBody),
        (status = 404, description = "No such job (or another tenant's).", body = ErrorBody),
        (status = 503, description = "Redis is unavailable.", body = ErrorBody),
    )
)]
pub(crate) async fn events(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let Path(id) = id.map_err(path_rejected)?;
    let id = parse_id(&id)?;
    visible(&c, &tenant, id).await?;
    if c.jobs.status(id).await.map_err(unavailable)?.is_none() {
        return Err(ApiError::new(StatusCode::NOT_FOUND, format!("no job {id}")));
    }
    struct Cursor {
        after: Option<String>,
        pending: std::collections::VecDeque<store::StoredEvent>,
        finished: bool,
    }
    let start = Cursor {
        after: None,
        pending: Default::default(),
        finished: false,
    };
    let stream = futures::stream::unfold((c, start), move |(c, mut cursor)| async move {
        loop {
            if let Some(event) = cursor.pending.pop_front() {
                cursor.after = Some(event.id.clone());
                let sse = SseEvent::default()
                    .id(event.id)
                    .event(event.event.name())
                    .data(event.event.to_json());
                return Some((Ok(sse), (c, cursor)));
            }
            if cursor.finished {
                return None;
            }
            // Read the status before the events, so the last events are not missed.
            let status = c.jobs.status(id).await.ok().flatten();
            if let Ok(events) = c.jobs.events(id, cursor.after.as_deref()).await {
                cursor.pending.extend(events);
            }
            if status.is_some_and(JobStatus::is_final) {
                cursor.finished = true;
                continue;
            }
            if cursor.pending.is_empty() {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

fn event_function(event: &Event) -> String {
    match event {
        Event::FunctionDone { function, .. } => function.clone(),
        _ => String::new(),
    }
}

impl Coordinator {
    pub(crate) async fn publish_task(
        &self,
        task: Task,
        tenant: Option<String>,
    ) -> Result<(), broker::Error> {
        let id = TaskId::new();
        let envelope = Envelope::new(id, tenant, now_ms(), task);
        self.broker
            .publish(Outgoing {
                message_id: id.to_string(),
                body: envelope.encode(),
            })
            .await
    }

    /// Ends a job as failed with `reason`, keeping whatever it produced; a job that already
    /// finished keeps its result.
    pub(crate) async fn fail_job(&self, meta: &JobMeta, reason: &str) -> Result<(), store::Error> {
        let specs = match self.jobs.plan(meta.id).await {
            Ok(Some(plan)) => plan.specs,
            _ => self
                .jobs
                .specs(meta.id)
                .await
                .ok()
                .flatten()
                .unwrap_or_default(),
        };
        let result = JobResult {
            job_id: meta.id,
            status: JobStatus::Failed,
            instruction: meta.request.instruction.clone(),
            language: meta.request.language,
            function_specs: specs,
            implementations: BTreeMap::new(),
            tests: BTreeMap::new(),
            test_results: vec![],
            all_tests_passed: false,
            improvement_history: vec![],
            documentation: String::new(),
            quality: Quality::default(),
            metrics: JobMetrics {
                total_ms: now_ms().saturating_sub(meta.submitted_at_ms),
                cache: CacheOutcome::Miss,
                ..JobMetrics::default()
            },
            failure: Some(reason.to_owned()),
            validation: Validation::NotValidated,
            manual_review_recommended: true,
        };
        let finished = self.jobs.finish_job(meta.id, &result).await?;
        if finished {
            self.metrics.jobs.with_label_values(&["failed"]).inc();
            self.metrics
                .job_seconds
                .with_label_values(&["failed"])
                .observe(result.metrics.total_ms as f64 / 1000.0);
            tracing::info!(job = %meta.id, %reason, "job failed");
        } else {
            tracing::info!(job = %meta.id, %reason, "job had finished already; its result stands");
        }
        Ok(())
    }

    /// Fails every job still unfinished `job_deadline` after its submission, until `cancel`
    /// fires. Every coordinator runs it; a job finishes once, so two doing the same is harmless.
    pub(crate) async fn reap_overdue_jobs(self, cancel: CancellationToken) {
        let period = (self.options.job_deadline / 10)
            .clamp(Duration::from_millis(200), Duration::from_secs(30));
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(period) => {}
            }
            if let Err(e) = self.reap_overdue_once().await {
                tracing::debug!(error = %e, "cannot look for overdue jobs now");
            }
        }
    }

    /// One pass of [`Self::reap_overdue_jobs`]; returns how many jobs it failed.
    pub(crate) async fn reap_overdue_once(&self) -> Result<usize, store::Error> {
        let deadline = self.options.job_deadline;
        let cutoff =
            now_ms().saturating_sub(u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX));
        let mut failed = 0;
        for id in self.jobs.unfinished_before(cutoff, 100).await? {
            match self.jobs.job_meta(id).await? {
                Some(meta) => {
                    let reason = format!(
                        "deadline exceeded: not finished within {} of its submission \
                         (coordinator.job_deadline)",
                        humantime_serde::re::humantime::format_duration(deadline)
                    );
                    self.fail_job(&meta, &reason).await?;
                    failed += 1;
                }
                None => self.jobs.forget_job(id).await?,
            }
        }
        Ok(failed)
    }

    /// Consumes pipeline events until `cancel` fires.
    pub(crate) async fn consume_events(self, cancel: CancellationToken) {
        let mut deliveries = self.broker.consume(Queue::Events, 16, cancel);
        while let Some(delivery) = deliveries.next().await {
            self.handle_event(delivery).await;
        }
    }

    pub(crate) async fn handle_event(&self, delivery: Delivery) {
        let event = match Event::decode(&delivery.body) {
            Ok(event) => event,
            Err(e) => {
                tracing::warn!(error = %e, "dead-lettering undecodable event");
                let _ = delivery.dead_letter().await;
                return;
            }
        };
        // Redis or the broker down: wait it out here, retrying with backoff, so the event
        // neither cycles through its queue (towards the delivery limit) nor lets later events
        // overtake it. Events are handled one at a time, so this also pauses the consumer.
        let applied = (|| self.apply(&event))
            .retry(
                ExponentialBuilder::default()
                    .with_min_delay(Duration::from_millis(100))
                    .with_max_delay(Duration::from_secs(2))
                    .with_jitter()
                    .with_total_delay(Some(self.options.outage_wait))
                    .without_max_times(),
            )
            .when(EventError::is_retryable)
            .notify(|e, after| {
                tracing::warn!(job = %event.job_id(), error = %e, retry_in = ?after, "cannot apply event yet; waiting");
            })
            .await;
        match applied {
            Ok(()) => {
                let _ = delivery.ack().await;
            }
            Err(e) if e.is_retryable() => {
                tracing::warn!(job = %event.job_id(), error = %e, "dependency still down: event back to its queue (not counted)");
                let _ = delivery.hand_back().await;
            }
            Err(e) => {
                tracing::warn!(job = %event.job_id(), error = %e, "cannot apply event; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                let _ = delivery.requeue().await;
            }
        }
    }

    /// What an event changes. Idempotent: a redelivered event publishes at most what a crash
    /// may have left unpublished, and workers skip finished functions.
    async fn apply(&self, event: &Event) -> Result<(), EventError> {
        let id = event.job_id();
        let Some(meta) = self.jobs.job_meta(id).await? else {
            tracing::warn!(job = %id, "event for an unknown job; dropped");
            return Ok(());
        };
        let status = self.jobs.status(id).await?;
        if status.is_some_and(JobStatus::is_final) {
            return Ok(());
        }
        if status == Some(JobStatus::Integrating) && matches!(event, Event::Planned { .. }) {
            return Ok(()); // a redelivered plan event: the job is past planning
        }
        if status == Some(JobStatus::Integrating) && matches!(event, Event::FunctionDone { .. }) {
            // Integration is already under way (a function failed): start nothing new.
            let _ = self
                .jobs
                .complete_function(id, &event_function(event))
                .await;
            return Ok(());
        }
        match event {
            Event::Planned {
                failure: Some(failure),
                ..
            } => {
                self.fail_job(&meta, &format!("planning failed: {failure}"))
                    .await?;
            }
            Event::Planned { failure: None, .. } => self.planned(meta).await?,
            Event::FunctionDone { function, .. } => self.function_done(&meta, function).await?,
            Event::Integrated { .. } => {}
        }
        Ok(())
    }

    async fn planned(&self, mut meta: JobMeta) -> Result<(), EventError> {
        let id = meta.id;
        let specs = self
            .jobs
            .specs(id)
            .await?
            .ok_or(EventError::Invalid("planned event without stored specs"))?;
        match plan(specs, self.options.max_functions) {
            Ok(plan) => {
                let first = self.jobs.put_plan(id, &plan).await?;
                let _ = self.jobs.set_status(id, JobStatus::Running).await;
                if first {
                    let names = plan.specs.iter().map(|s| s.name.clone()).collect();
                    let _ = self
                        .jobs
                        .push_event(id, &Progress::Planned { functions: names })
                        .await;
                }
                // Functions without dependencies start now; the rest as dependencies finish.
                let roots = plan
                    .specs
                    .iter()
                    .filter(|s| s.dependencies.is_empty())
                    .map(|s| s.name.clone())
                    .collect();
                self.publish_functions(&meta, roots, !first).await
            }
            Err(problem) if meta.replans < 1 => {
                meta.replans += 1;
                self.jobs.put_job_meta(&meta).await?;
                tracing::info!(job = %id, %problem, "plan rejected; asking for another");
                let _ = self
                    .jobs
                    .push_event(
                        id,
                        &Progress::Replanning {
                            problem: problem.to_string(),
                        },
                    )
                    .await;
                self.publish_task(
                    Task::Plan(task(id, None, Some(problem.to_string()))),
                    meta.tenant.clone(),
                )
                .await?;
                Ok(())
            }
            Err(problem) => Ok(self
                .fail_job(&meta, &format!("the plan was rejected: {problem}"))
                .await?),
        }
    }

    async fn function_done(&self, meta: &JobMeta, function: &str) -> Result<(), EventError> {
        let id = meta.id;
        let outcome = self
            .jobs
            .function(id, function)
            .await?
            .ok_or(EventError::Invalid(
                "function event without a stored outcome",
            ))?;
        let completion = self.jobs.complete_function(id, function).await?;
        if completion.first {
            let _ = self
                .jobs
                .push_event(
                    id,
                    &Progress::FunctionDone {
                        function: function.to_owned(),
                        passed: outcome.passed,
                        attempts: outcome.attempts,
                    },
                )
                .await;
        }
        if !outcome.passed || completion.all_done {
            // Either everything is done, or a function cannot be made to pass and its
            // dependants cannot be built on it: integrate what there is.
            let _ = self.jobs.set_status(id, JobStatus::Integrating).await;
            let integrate = vec![INTEGRATE.to_owned()];
            if self
                .jobs
                .unpublished(id, integrate.clone())
                .await?
                .is_empty()
            {
                return Ok(());
            }
            self.publish_task(Task::Integrate(task(id, None, None)), meta.tenant.clone())
                .await?;
            return Ok(self.jobs.mark_published(id, &integrate).await?);
        }
        self.publish_functions(meta, completion.ready, !completion.first)
            .await
    }

    /// Publishes an implement task for each of `names` and records them as published. The
    /// store hands a first completion's ready functions to exactly one caller; a repeated
    /// event (`repeated`) publishes only what a crash left unpublished.
    async fn publish_functions(
        &self,
        meta: &JobMeta,
        names: Vec<String>,
        repeated: bool,
    ) -> Result<(), EventError> {
        let names = if repeated {
            self.jobs.unpublished(meta.id, names).await?
        } else {
            names
        };
        for name in names {
            self.publish_task(
                Task::Implement(task(meta.id, Some(name.clone()), None)),
                meta.tenant.clone(),
            )
            .await?;
            // After its confirm: a crash (or a failed publish of the next one) before this
            // line re-publishes it on redelivery, which the worker absorbs (a finished
            // function is not run again, a duplicate run cannot replace its outcome);
            // recording first could lose the task.
            self.jobs.mark_published(meta.id, &[name]).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
