//! A generation job's course through the cluster, in the one place both kinds of process take
//! it from: the plan checked and ordered ([`planning`]), each step's successors published by
//! the worker that finished the step ([`Flow::start`], [`Flow::finish_function`]), and the one
//! way a job ends ([`Flow::finish`], [`Flow::end_early`]); and the one way a session ends
//! ([`SessionEnds::end`]).
//!
//! A job with one function crosses four hops: the coordinator publishes its plan task; the
//! worker that plans it publishes its implement task; the worker that implements it publishes
//! its integrate task; the worker that integrates it stores the result. No process sits
//! between two tasks.
//!
//! Invariants:
//! - a worker publishes what its step made ready *before* it acks the task, and records each
//!   publish in the job's published set only after the broker confirmed it. A step taken again
//!   (the worker died, or the broker was down) repeats the store's completion, which answers
//!   what is ready and not done, and publishes what the set lacks: nothing lost. A publish
//!   repeated before its record is absorbed by the workers (a function whose outcome is final
//!   is not run again, and a later run cannot replace it): nothing doubled.
//! - no status written before the publish it announces is read back by a retry as proof of
//!   that publish (`integrating` is set before the integrate task goes out; a retry asks the
//!   published set, not the status).
//! - a job ends once: the store's finishing operation stores the one result, and the call it
//!   answers "first" to charges the tenant's usage in this process's metrics.

mod ending;
mod executions;
pub mod planning;
mod sessions;

use std::sync::Arc;

use broker::{Broker, Outgoing};
use proto::job::{FunctionOutcome, ImplementTask, IntegrateTask, JobMeta, JobStatus, Plan};
use proto::{Envelope, Progress, Task, TaskId};
use store::{Completion, Finished, JobStore};

pub use ending::Ended;
pub use executions::ExecutionEnds;
pub use planning::{MAX_REPLANS, PlanError, plan};
pub use sessions::SessionEnds;

/// The integrate task's name in the job's published set (not an identifier, so it cannot be
/// a function's name).
const INTEGRATE: &str = "#integrate";

/// Why a step's successors could not be published, with the retry decision in the type.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] store::Error),
    #[error(transparent)]
    Broker(#[from] broker::Error),
}

impl Error {
    /// Redis or the broker unreachable: the same step goes on once it is back.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Store(e) => e.is_retryable(),
            Error::Broker(e) => e.is_retryable(),
        }
    }
}

/// The metrics a process counts a job's end in, when it ends one.
#[derive(Debug, Clone)]
pub struct Ends {
    /// `codegen_usage_total`.
    pub usage: telemetry::TenantUsage,
    /// `codegen_job_seconds`.
    pub job_seconds: prometheus::HistogramVec,
    /// `codegen_jobs_finished_total`.
    pub jobs_finished: prometheus::IntCounterVec,
}

/// A job's course, over the job store and the broker; cheap to clone.
#[derive(Clone)]
pub struct Flow {
    jobs: Arc<dyn JobStore>,
    broker: Arc<dyn Broker>,
    ends: Option<Ends>,
}

impl std::fmt::Debug for Flow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flow").finish_non_exhaustive()
    }
}

impl Flow {
    pub fn new(jobs: Arc<dyn JobStore>, broker: Arc<dyn Broker>) -> Self {
        Self {
            jobs,
            broker,
            ends: None,
        }
    }

    /// Counts the jobs this process ends in `ends`.
    pub fn with_ends(mut self, ends: Ends) -> Self {
        self.ends = Some(ends);
        self
    }

    pub fn jobs(&self) -> &Arc<dyn JobStore> {
        &self.jobs
    }

    /// Publishes `task` of the job of `meta` to its tenant's lane of the task queue, carrying
    /// the job's request id; returns once the broker confirmed it.
    pub async fn publish(&self, task: Task, meta: &JobMeta) -> Result<(), broker::Error> {
        use tracing::Instrument;
        let id = TaskId::new();
        let span =
            telemetry::publish_span(&id.to_string(), task.kind(), Some(&meta.id.to_string()));
        let envelope = Envelope::new(id, meta.tenant.clone(), proto::now_ms(), task)
            .with_request_id(meta.request_id.clone());
        // The task's span becomes a child of this one, in whichever worker takes it.
        let headers = telemetry::inject(&span);
        self.broker
            .publish(Outgoing {
                message_id: id.to_string(),
                body: envelope.encode(),
                lane: meta.tenant.clone(),
                headers,
            })
            .instrument(span)
            .await
    }

    /// Starts the job of `meta` on `plan` (checked by [`plan`], or refused: `Plan::refused`):
    /// stores it with `meta`, once, and publishes the functions without dependencies. Called
    /// again once a plan is stored (this task taken again, or a second run of it that planned
    /// alongside), it goes on with the stored plan, not `plan`: it publishes the roots the
    /// first call did not. A stored refused plan ends the job failed with its reason instead,
    /// so whichever run stored first decides. Answers the job's status: a final one means the
    /// job has ended and nothing was published.
    pub async fn start(&self, meta: &JobMeta, plan: &Plan) -> Result<Option<JobStatus>, Error> {
        let planned = Progress::Planned {
            functions: plan.specs.iter().map(|s| s.name.clone()).collect(),
            dependencies: plan
                .specs
                .iter()
                .filter(|s| !s.dependencies.is_empty())
                .map(|s| (s.name.clone(), s.dependencies.clone()))
                .collect(),
        };
        let event = plan.refused.is_none().then_some(&planned);
        let started = self.jobs.start_job(meta, plan, event).await?;
        if started.status.is_some_and(JobStatus::is_final) {
            return Ok(started.status);
        }
        // The plan that stands is the first one stored, which may not be this one.
        let stored;
        let plan = match started.first {
            true => plan,
            false => {
                stored = self.jobs.plan(meta.id).await?;
                stored.as_ref().unwrap_or(plan)
            }
        };
        if let Some(reason) = &plan.refused {
            let ended = self
                .end_early(meta, JobStatus::Failed, reason, &plan.specs)
                .await?;
            return Ok(Some(ended.result.status));
        }
        let roots = plan
            .specs
            .iter()
            .filter(|s| s.dependencies.is_empty())
            .map(|s| s.name.clone())
            .collect();
        self.publish_functions(meta, roots, !started.first).await?;
        Ok(started.status)
    }

    /// Stores `outcome`, a function's final one, with `attempt` (its last attempt's progress
    /// event) and completes the function in `plan` in the same step; then publishes what that
    /// made ready: its dependants whose last dependency it was, or the integrate task once
    /// every function is done, or at once when it failed (its dependants cannot be built on
    /// it). Nothing is published when another run's outcome stood (that run publishes) or the
    /// job had ended.
    pub async fn finish_function(
        &self,
        meta: &JobMeta,
        plan: &Plan,
        outcome: &FunctionOutcome,
        attempt: Option<&Progress>,
    ) -> Result<Finished, Error> {
        let done = Self::done_event(outcome);
        let finished = self
            .jobs
            .finish_function(meta.id, plan, outcome, attempt, Some(&done))
            .await?;
        if let Some(completion) = &finished.completion {
            self.advance(meta, completion, finished.status).await?;
        }
        Ok(finished)
    }

    /// Publishes what the completion of `outcome` (final and stored, by an earlier run of this
    /// task) made ready and is not yet published: a task taken again after its step stored the
    /// outcome, because the run that stored it stopped or the broker did not confirm.
    /// `status` is the job's, as just read.
    pub async fn resume_function(
        &self,
        meta: &JobMeta,
        plan: &Plan,
        outcome: &FunctionOutcome,
        status: Option<JobStatus>,
    ) -> Result<(), Error> {
        if status.is_some_and(JobStatus::is_final) {
            return Ok(());
        }
        let done = Self::done_event(outcome);
        let completion = self
            .jobs
            .complete_function(meta.id, plan, outcome, Some(&done))
            .await?;
        self.advance(meta, &completion, status).await
    }

    fn done_event(outcome: &FunctionOutcome) -> Progress {
        Progress::FunctionDone {
            function: outcome.name.clone(),
            passed: outcome.passed,
            attempts: outcome.attempts,
        }
    }

    /// What a completion starts: nothing new once integration is under way (a function failed
    /// earlier) but the integrate task, should its publish not have been confirmed; the
    /// integrate task when the completion starts it (`store::dag`); else the dependants
    /// that became ready.
    async fn advance(
        &self,
        meta: &JobMeta,
        completion: &Completion,
        status: Option<JobStatus>,
    ) -> Result<(), Error> {
        if status == Some(JobStatus::Integrating) {
            return self.publish_integrate(meta).await;
        }
        if completion.integrate {
            // A finishing store sets `integrating` with the completion; this is a resumed one
            // (the first run stopped before it published). The published set, not the
            // status, says whether the integrate task went out.
            let _ = self.jobs.set_status(meta.id, JobStatus::Integrating).await;
            return self.publish_integrate(meta).await;
        }
        self.publish_functions(meta, completion.ready.clone(), !completion.first)
            .await
    }

    /// Publishes the job's integrate task unless its publish was confirmed already.
    async fn publish_integrate(&self, meta: &JobMeta) -> Result<(), Error> {
        let integrate = vec![INTEGRATE.to_owned()];
        if self
            .jobs
            .unpublished(meta.id, integrate.clone())
            .await?
            .is_empty()
        {
            return Ok(());
        }
        self.publish(Task::Integrate(IntegrateTask { job_id: meta.id }), meta)
            .await?;
        Ok(self.jobs.mark_published(meta.id, &integrate).await?)
    }

    /// Publishes an implement task for each of `names` and records them as published. The
    /// store hands a first completion's ready functions to exactly one caller; a repeated one
    /// (`repeated`) publishes only what a stopped run left unpublished.
    async fn publish_functions(
        &self,
        meta: &JobMeta,
        names: Vec<String>,
        repeated: bool,
    ) -> Result<(), Error> {
        let names = if repeated {
            self.jobs.unpublished(meta.id, names).await?
        } else {
            names
        };
        if names.is_empty() {
            return Ok(());
        }
        // All at once: the broker writes (and syncs) them to its log together, where one at a
        // time each waited for a sync of its own.
        futures::future::try_join_all(names.iter().map(|name| {
            self.publish(
                Task::Implement(ImplementTask {
                    job_id: meta.id,
                    function: name.clone(),
                }),
                meta,
            )
        }))
        .await?;
        // After every confirm, in one write: a stop (or a failed publish) before this line
        // publishes them again when the task is taken again, which the workers absorb;
        // recording first could lose a task.
        Ok(self.jobs.mark_published(meta.id, &names).await?)
    }
}

#[cfg(test)]
mod tests;
