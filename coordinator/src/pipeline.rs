//! The coordinator's half of the generation pipeline: it turns worker events into the next
//! tasks (the functions a finished one unblocks, then integration), fails jobs that cannot go
//! on, and fails the overdue ones. Handlers call into it; it knows no HTTP.

use std::collections::BTreeMap;
use std::time::Duration;

use broker::{Delivery, Outgoing, Queue};
use futures::StreamExt;
use proto::ending::Ending;
use proto::job::{
    Event, FunctionOutcome, ImplementTask, IntegrateTask, JobMeta, JobResult, JobStatus, Plan,
    PlanTask,
};
use proto::{Envelope, Progress, Task, TaskId};
use tokio_util::sync::CancellationToken;

use crate::planning::plan;
use crate::{Coordinator, now_ms};
use backon::{ExponentialBuilder, Retryable};

/// Events taken from the queue at once (they are applied one at a time, in order).
const EVENTS_PREFETCH: u16 = 16;
/// Backoff while Redis or the broker does not answer an event's changes.
const RETRY_MIN_DELAY: Duration = Duration::from_millis(100);
const RETRY_MAX_DELAY: Duration = Duration::from_secs(2);
/// Before an event goes back to its queue: a failing store is not hammered.
const REQUEUE_PAUSE: Duration = Duration::from_millis(500);
/// Times a rejected plan (a cycle, a missing dependency) is asked for again before the job
/// fails with the problem.
pub(crate) const MAX_REPLANS: u32 = 1;
/// The overdue-job reaper runs every tenth of `job_deadline`, within these bounds.
const REAP_PERIOD_MIN: Duration = Duration::from_millis(200);
const REAP_PERIOD_MAX: Duration = Duration::from_secs(30);

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

/// What became of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handled {
    /// Applied, or its job failed with the reason: the event is settled.
    Done,
    /// A dependency stayed down past `outage_wait`: the event goes back, not counted as a
    /// delivery.
    Later,
    /// Its job could not even be failed: the event goes back, counted.
    Again,
}

/// The integrate task's name in the job's published set (not an identifier, so it cannot be
/// a function's name).
const INTEGRATE: &str = "#integrate";

impl Coordinator {
    pub(crate) async fn publish_task(
        &self,
        task: Task,
        tenant: Option<String>,
    ) -> Result<(), broker::Error> {
        let id = TaskId::new();
        let envelope = Envelope::new(id, tenant.clone(), now_ms(), task);
        self.broker
            .publish(Outgoing {
                message_id: id.to_string(),
                body: envelope.encode(),
                lane: tenant,
            })
            .await
    }

    /// Ends a job as failed with `reason`, keeping whatever it produced; a job that already
    /// finished keeps its result.
    pub(crate) async fn fail_job(&self, meta: &JobMeta, reason: &str) -> Result<(), store::Error> {
        self.end_job(meta, JobStatus::Failed, reason)
            .await
            .map(drop)
    }

    /// Ends a job before its integration with `status` (`failed`, `cancelled`) and `reason`,
    /// keeping what it produced: the functions finished so far, their tests and their
    /// history. Returns the job's result: this one, or the one it had finished with already.
    pub(crate) async fn end_job(
        &self,
        meta: &JobMeta,
        status: JobStatus,
        reason: &str,
    ) -> Result<JobResult, store::Error> {
        let plan = self.jobs.plan(meta.id).await.ok().flatten();
        let specs = match &plan {
            Some(plan) => plan.specs.clone(),
            None => self
                .jobs
                .specs(meta.id)
                .await
                .ok()
                .flatten()
                .unwrap_or_default(),
        };
        let mut outcomes = BTreeMap::new();
        if plan.is_some() {
            for spec in &specs {
                if let Some(outcome) = self.jobs.function(meta.id, &spec.name).await? {
                    outcomes.insert(spec.name.clone(), outcome);
                }
            }
        }
        let ending = Ending::Early {
            status,
            reason: reason.to_owned(),
        };
        let result = JobResult::assemble(meta, &specs, &outcomes, ending, now_ms());
        let finished = self.finish_job(meta.tenant.as_deref(), &result).await?;
        if finished {
            self.metrics
                .jobs
                .with_label_values(&[status.as_str()])
                .inc();
            self.metrics
                .job_seconds
                .with_label_values(&[status.as_str()])
                .observe(result.metrics.total_ms as f64 / 1000.0);
            tracing::info!(job = %meta.id, status = status.as_str(), %reason, "job ended");
            Ok(result)
        } else {
            tracing::info!(job = %meta.id, %reason, "job had finished already; its result stands");
            Ok(self.jobs.result(meta.id).await?.unwrap_or(result))
        }
    }

    /// Fails every job still unfinished `job_deadline` after its submission, until `cancel`
    /// fires. Every coordinator runs it; a job finishes once, so two doing the same is harmless.
    pub(crate) async fn reap_overdue_jobs(self, cancel: CancellationToken) {
        let period = (self.options.job_deadline / 10).clamp(REAP_PERIOD_MIN, REAP_PERIOD_MAX);
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

    /// Consumes the broker's events queue until `cancel` fires: where workers of earlier
    /// versions still send their events during an upgrade (workers now send them to the
    /// inbox in Redis, `crate::inbox`).
    pub(crate) async fn consume_broker_events(self, cancel: CancellationToken) {
        let mut deliveries = self.broker.consume(Queue::Events, EVENTS_PREFETCH, cancel);
        while let Some(delivery) = deliveries.next().await {
            self.handle_event(delivery).await;
        }
    }

    /// One event from the broker's events queue, settled there.
    pub(crate) async fn handle_event(&self, delivery: Delivery) {
        let event = match Event::decode(&delivery.body) {
            Ok(event) => event,
            Err(e) => {
                tracing::warn!(error = %e, "dead-lettering undecodable event");
                let _ = delivery.dead_letter().await;
                return;
            }
        };
        match self.process_event(&event).await {
            Handled::Done => {
                let _ = delivery.ack().await;
            }
            Handled::Later => {
                let _ = delivery.hand_back().await;
            }
            Handled::Again => {
                let _ = delivery.requeue().await;
            }
        }
    }

    /// Applies an event: retried with backoff while Redis or the broker is down (up to
    /// `outage_wait`), so that the event neither cycles towards a delivery limit nor lets
    /// later events overtake it (events are handled one at a time, so this also pauses the
    /// reader). An event that cannot apply fails its job, with the reason.
    pub(crate) async fn process_event(&self, event: &Event) -> Handled {
        let applied = (|| self.apply(event))
            .retry(
                ExponentialBuilder::default()
                    .with_min_delay(RETRY_MIN_DELAY)
                    .with_max_delay(RETRY_MAX_DELAY)
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
            Ok(()) => Handled::Done,
            Err(e) if e.is_retryable() => {
                tracing::warn!(job = %event.job_id(), error = %e, "dependency still down: event back to its queue (not counted)");
                Handled::Later
            }
            // Waiting will not change it (a corrupt stored value, state that contradicts the
            // event): the job cannot go on, and says why now rather than after the event has
            // cycled to the delivery limit.
            Err(e) => {
                let job = event.job_id();
                tracing::warn!(%job, error = %e, "cannot apply event; failing its job");
                match self
                    .fail_job_of(job, &format!("cannot apply a pipeline event: {e}"))
                    .await
                {
                    Ok(()) => Handled::Done,
                    Err(_) => {
                        tokio::time::sleep(REQUEUE_PAUSE).await;
                        Handled::Again
                    }
                }
            }
        }
    }

    /// Fails job `id` (if it still exists) with `reason`.
    pub(crate) async fn fail_job_of(&self, id: TaskId, reason: &str) -> Result<(), store::Error> {
        match self.jobs.job_meta(id).await? {
            Some(meta) => self.fail_job(&meta, reason).await,
            None => Ok(()),
        }
    }

    /// What an event changes. Idempotent: a redelivered event publishes at most what a crash
    /// may have left unpublished, and workers skip finished functions.
    async fn apply(&self, event: &Event) -> Result<(), EventError> {
        let id = event.job_id();
        // Everything the event needs, in one read: a function's event also needs the plan
        // and the function's outcome.
        let function = match event {
            Event::FunctionDone { function, .. } => Some(function.as_str()),
            _ => None,
        };
        let view = self.jobs.view(id, function).await?;
        let Some(meta) = view.meta else {
            tracing::warn!(job = %id, "event for an unknown job; dropped");
            return Ok(());
        };
        let status = view.status;
        if status.is_some_and(JobStatus::is_final) {
            return Ok(());
        }
        if status == Some(JobStatus::Integrating) && matches!(event, Event::Planned { .. }) {
            return Ok(()); // a redelivered plan event: the job is past planning
        }
        if status == Some(JobStatus::Integrating)
            && let (Event::FunctionDone { function, .. }, Some(plan)) = (event, &view.plan)
        {
            // Integration is already under way (a function failed): start nothing new. The
            // status is written before the integrate task's publish, so this may be the retry
            // of the event that wrote it, after that publish failed: publish what was not
            // confirmed (nothing, when it was).
            let _ = self.jobs.complete_function(id, plan, function, None).await;
            return self.publish_integrate(&meta).await;
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
            Event::FunctionDone { function, .. } => {
                let plan = view.plan.ok_or(EventError::Invalid(
                    "function event for a job without a plan",
                ))?;
                let outcome = view.function.ok_or(EventError::Invalid(
                    "function event without a stored outcome",
                ))?;
                self.function_done(&meta, &plan, function, &outcome).await?;
            }
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
            // The count is written before the replan's publish, so this may be the retry of
            // the event that wrote it, after that publish failed: the replan it counted is
            // published now, not taken for one that already ran.
            Err(problem) if meta.replans > 0 && self.replan_unpublished(&meta).await? => {
                self.publish_replan(&meta, &problem.to_string()).await
            }
            Err(problem) if meta.replans < MAX_REPLANS => {
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
                self.publish_replan(&meta, &problem.to_string()).await
            }
            Err(problem) => Ok(self
                .fail_job(&meta, &format!("the plan was rejected: {problem}"))
                .await?),
        }
    }

    /// The name of the job's `meta.replans`-th replan in its published set (not an
    /// identifier, so it cannot be a function's name).
    fn replan_name(meta: &JobMeta) -> String {
        format!("#replan-{}", meta.replans)
    }

    /// Whether the replan that `meta.replans` counts has no confirmed publish yet.
    async fn replan_unpublished(&self, meta: &JobMeta) -> Result<bool, EventError> {
        let name = Self::replan_name(meta);
        Ok(!self.jobs.unpublished(meta.id, vec![name]).await?.is_empty())
    }

    /// Publishes the plan task of the replan that `meta.replans` counts, then records it.
    async fn publish_replan(&self, meta: &JobMeta, problem: &str) -> Result<(), EventError> {
        self.publish_task(
            Task::Plan(PlanTask {
                job_id: meta.id,
                problem: Some(problem.to_owned()),
            }),
            meta.tenant.clone(),
        )
        .await?;
        Ok(self
            .jobs
            .mark_published(meta.id, &[Self::replan_name(meta)])
            .await?)
    }

    async fn function_done(
        &self,
        meta: &JobMeta,
        plan: &Plan,
        function: &str,
        outcome: &FunctionOutcome,
    ) -> Result<(), EventError> {
        let id = meta.id;
        let done = Progress::FunctionDone {
            function: function.to_owned(),
            passed: outcome.passed,
            attempts: outcome.attempts,
        };
        let completion = self
            .jobs
            .complete_function(id, plan, function, Some(&done))
            .await?;
        if !outcome.passed || completion.all_done {
            // Either everything is done, or a function cannot be made to pass and its
            // dependants cannot be built on it: integrate what there is.
            let _ = self.jobs.set_status(id, JobStatus::Integrating).await;
            return self.publish_integrate(meta).await;
        }
        self.publish_functions(meta, completion.ready, !completion.first)
            .await
    }

    /// Publishes the job's integrate task unless its publish was confirmed already.
    async fn publish_integrate(&self, meta: &JobMeta) -> Result<(), EventError> {
        let integrate = vec![INTEGRATE.to_owned()];
        if self
            .jobs
            .unpublished(meta.id, integrate.clone())
            .await?
            .is_empty()
        {
            return Ok(());
        }
        self.publish_task(
            Task::Integrate(IntegrateTask { job_id: meta.id }),
            meta.tenant.clone(),
        )
        .await?;
        Ok(self.jobs.mark_published(meta.id, &integrate).await?)
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
        // All at once: the broker writes (and syncs) them to its log together, where one at a
        // time each waited for a sync of its own, and cost the broker several times the CPU.
        futures::future::try_join_all(names.iter().map(|name| {
            self.publish_task(
                Task::Implement(ImplementTask {
                    job_id: meta.id,
                    function: name.clone(),
                }),
                meta.tenant.clone(),
            )
        }))
        .await?;
        // After every confirm, in one write: a crash (or a failed publish) before this line
        // re-publishes them on redelivery, which the workers absorb (a finished function is
        // not run again, a duplicate run cannot replace its outcome); recording first could
        // lose a task.
        Ok(self.jobs.mark_published(meta.id, &names).await?)
    }
}

#[cfg(test)]
mod tests;
