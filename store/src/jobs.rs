//! Job state of the generation pipeline.
//!
//! Keys: a job's under `{p}:job:{id}:` ([`crate::keys::JobKeys`]), a batch's
//! ([`crate::keys::batch`]), the unfinished jobs ([`crate::keys::unfinished_jobs`]).
//!
//! Invariant: a function's final outcome is stored and the function completed in one Lua
//! script: the function joins `done` and each dependant's counter drops by one; the
//! dependants that reach zero are returned to exactly one caller. A repeated completion (a
//! task taken again after its run stored the outcome) changes nothing and returns the
//! dependants that are ready but not done, so a caller that stopped before publishing them is
//! followed by one that publishes them (workers skip a function whose outcome is final).
//!
//! Starting a job (its plan, dependency counters, meta and `running` status) is one script
//! too, so a crash cannot leave a plan without counters. A function's final outcome is
//! written once: whichever run of a (redelivered, duplicated) task finishes first is the
//! outcome its dependants were built on, and a later run cannot replace it.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use proto::agent::AgentStep;
use proto::job::{Batch, FunctionOutcome, JobMeta, JobResult, JobStatus, Plan};
use proto::{Progress, TaskId};

use crate::Error;

/// What completing a function made ready.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Completion {
    /// Functions whose last dependency this was.
    pub ready: Vec<String>,
    /// Every function of the plan is done.
    pub all_done: bool,
    /// False when this function was already done (a repeated event).
    pub first: bool,
    /// The completion starts the job's integration ([`crate::dag::Integrate::starts`]): the
    /// function failed, or every function is done.
    pub integrate: bool,
}

/// What a step of a job reads before it starts, in one round trip (Redis: one `MGET`).
#[derive(Debug, Clone, Default)]
pub struct JobView {
    pub meta: Option<JobMeta>,
    pub status: Option<JobStatus>,
    pub plan: Option<Plan>,
    /// The outcome of the function asked for, if any.
    pub function: Option<FunctionOutcome>,
}

/// What the integration of a job reads before it starts, in one round trip (Redis: one
/// script): the job's view, its result if it has one already (a redelivery), and the
/// outcome of every function of its plan there is.
#[derive(Debug, Clone, Default)]
pub struct IntegrationView {
    pub view: JobView,
    pub result: Option<JobResult>,
    /// By function name.
    pub functions: HashMap<String, FunctionOutcome>,
}

/// What starting a job did ([`JobStore::start_job`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    /// False when a plan was stored already (a task taken again), which then stands.
    pub first: bool,
    /// The job's status after it: `running`, or the final one it had.
    pub status: Option<JobStatus>,
}

/// What finishing a function did ([`JobStore::finish_function`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// False when a final outcome was stored already (which then stands, and whose run
    /// completes it).
    pub stored: bool,
    /// The job's status as the write saw it.
    pub status: Option<JobStatus>,
    /// What completing the function made ready; `None` when nothing was completed (not
    /// stored, or the job had ended).
    pub completion: Option<Completion>,
}

/// What storing an outcome did ([`JobStore::save_function`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Saved {
    /// False when a final outcome was stored already (which then stands).
    pub stored: bool,
    /// The job's status as the write saw it: a worker learns that its job ended without
    /// another read.
    pub status: Option<JobStatus>,
}

/// What [`JobStore::record_step`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepRecorded {
    Yes,
    /// The transcript holds `length` steps, not the step's index: another run records it.
    Taken {
        length: u32,
    },
    /// The job has ended (`status`): nothing more is recorded.
    Ended(JobStatus),
}

/// What a job has spent, as a charge to it answered ([`JobStore::spend_tokens`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spent {
    /// The job's status as the charge saw it.
    pub status: Option<JobStatus>,
    /// Every token its tasks have charged, this charge included.
    pub tokens: u64,
}

/// A progress event for SSE, with its stream id.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub id: String,
    pub event: Progress,
}

#[async_trait]
pub trait JobStore: Send + Sync + 'static {
    /// Records a new job, `queued`, among the unfinished ones.
    async fn create_job(&self, meta: &JobMeta) -> Result<(), Error>;
    /// Unfinished jobs submitted before `before_ms`, oldest first, at most `limit`.
    async fn unfinished_before(&self, before_ms: u64, limit: usize) -> Result<Vec<TaskId>, Error>;
    /// Drops `id` from the unfinished jobs (its state expired: nothing left to finish).
    async fn forget_job(&self, id: TaskId) -> Result<(), Error>;
    async fn job_meta(&self, id: TaskId) -> Result<Option<JobMeta>, Error>;
    async fn put_job_meta(&self, meta: &JobMeta) -> Result<(), Error>;
    /// Sets the status unless it is final already (`succeeded`, `failed`): a late writer
    /// cannot revive a finished job.
    async fn set_status(&self, id: TaskId, status: JobStatus) -> Result<(), Error>;
    async fn status(&self, id: TaskId) -> Result<Option<JobStatus>, Error>;
    /// Adds `tokens` to what the job's model calls have spent and answers the total with the
    /// job's status (Redis: one round trip). Every task of a job charges its calls here, so
    /// the job's budget is one count across the workers running its functions at once.
    async fn spend_tokens(&self, id: TaskId, tokens: u64) -> Result<Spent, Error>;
    /// The statuses of many jobs, in order (one round trip in Redis: a batch's answer).
    async fn statuses(&self, ids: &[TaskId]) -> Result<Vec<Option<JobStatus>>, Error> {
        let mut statuses = Vec::with_capacity(ids.len());
        for id in ids {
            statuses.push(self.status(*id).await?);
        }
        Ok(statuses)
    }
    /// Starts a planned job, once: stores `plan` and its dependency counters with `meta`
    /// (what planning spent), sets the status `running` unless it is final, and records the
    /// progress event `event` (Redis: one script). A plan stored already stands.
    async fn start_job(
        &self,
        meta: &JobMeta,
        plan: &Plan,
        event: Option<&Progress>,
    ) -> Result<Started, Error>;
    async fn plan(&self, id: TaskId) -> Result<Option<Plan>, Error>;
    /// Stores a partial outcome (a function's attempts so far) unless its final one is stored
    /// already, with the progress event `event`; answers the job's status too (Redis: one
    /// script). A final outcome goes through [`JobStore::finish_function`].
    async fn save_function(
        &self,
        id: TaskId,
        outcome: &FunctionOutcome,
        event: Option<&Progress>,
    ) -> Result<Saved, Error>;
    /// Stores a function's final outcome (unless one stands) with `attempt`, its last
    /// attempt's progress event, and completes the function in `plan` in the same step, as
    /// [`JobStore::complete_function`] does with `done` (Redis: one script), applying the
    /// outcome's [`Effects`] while the job runs: a completion that starts the integration
    /// sets `integrating` in the same step. Nothing is completed when another outcome stood
    /// (its run completes it) or the job has ended. `Finished::status` is the status after it.
    async fn finish_function(
        &self,
        id: TaskId,
        plan: &Plan,
        outcome: &FunctionOutcome,
        attempt: Option<&Progress>,
        done: Option<&Progress>,
    ) -> Result<Finished, Error>;
    async fn function(&self, id: TaskId, name: &str) -> Result<Option<FunctionOutcome>, Error>;
    /// The outcomes of `names`, in order (Redis: one `MGET`).
    async fn functions(
        &self,
        id: TaskId,
        names: &[String],
    ) -> Result<Vec<Option<FunctionOutcome>>, Error> {
        let mut outcomes = Vec::with_capacity(names.len());
        for name in names {
            outcomes.push(self.function(id, name).await?);
        }
        Ok(outcomes)
    }
    /// The job's meta, status and plan and the outcome of `function`, together.
    async fn view(&self, id: TaskId, function: Option<&str>) -> Result<JobView, Error> {
        Ok(JobView {
            meta: self.job_meta(id).await?,
            status: self.status(id).await?,
            plan: self.plan(id).await?,
            function: match function {
                Some(name) => self.function(id, name).await?,
                None => None,
            },
        })
    }
    /// The job's view, its result, and the outcomes of its plan's functions, together.
    async fn integration_view(&self, id: TaskId) -> Result<IntegrationView, Error> {
        let view = self.view(id, None).await?;
        let names: Vec<String> = view
            .plan
            .iter()
            .flat_map(|plan| plan.specs.iter().map(|s| s.name.clone()))
            .collect();
        let outcomes = self.functions(id, &names).await?;
        Ok(IntegrationView {
            view,
            result: self.result(id).await?,
            functions: names
                .into_iter()
                .zip(outcomes)
                .filter_map(|(name, outcome)| Some((name, outcome?)))
                .collect(),
        })
    }
    /// Marks `outcome`'s function of `plan` done, applying its [`Effects`], and returns what
    /// became ready (see the module docs); on the first completion, records the progress
    /// event `event` with it. For a function whose final outcome is stored
    /// ([`JobStore::finish_function`] completed it the first time); the status is the
    /// caller's to set.
    async fn complete_function(
        &self,
        id: TaskId,
        plan: &Plan,
        outcome: &FunctionOutcome,
        event: Option<&Progress>,
    ) -> Result<Completion, Error>;
    /// Records that the tasks of `names` were published (after the broker confirmed them).
    async fn mark_published(&self, id: TaskId, names: &[String]) -> Result<(), Error>;
    /// Of `names`, those not recorded as published: what a repeated completion may publish
    /// again.
    async fn unpublished(&self, id: TaskId, names: Vec<String>) -> Result<Vec<String>, Error>;
    /// Finishes the job, atomically: stores `result` unless one exists, and with it appends
    /// its `finished` progress event, sets the final status and charges `tenant`'s usage with
    /// what the result reports. Returns whether this call finished it; a job finishes once,
    /// with one result, one `finished` event, the status of that result and one charge.
    async fn finish_job(
        &self,
        id: TaskId,
        tenant: Option<&str>,
        result: &JobResult,
    ) -> Result<bool, Error>;
    async fn result(&self, id: TaskId) -> Result<Option<JobResult>, Error>;
    /// Records agent job `id`'s `step` at its index, with its `agent_step` progress event, in
    /// one step: only when the transcript holds exactly `step.index()` steps and the job has
    /// not ended. Two runs of one job (a redelivery while the first still runs) cannot both
    /// record a step: the second is told, and stops.
    async fn record_step(&self, id: TaskId, step: &AgentStep) -> Result<StepRecorded, Error>;
    /// Agent job `id`'s transcript, in order.
    async fn steps(&self, id: TaskId) -> Result<Vec<AgentStep>, Error>;
    async fn push_event(&self, id: TaskId, event: &Progress) -> Result<(), Error>;
    /// Events after `after` (stream id; `None`: from the start). An event this process cannot
    /// read (written by a newer one) is left out.
    async fn events(&self, id: TaskId, after: Option<&str>) -> Result<Vec<StoredEvent>, Error>;
    /// The events after `after` as soon as there are any, waiting up to `timeout` (then
    /// none). The default polls; Redis wakes on the notice each new event publishes.
    async fn wait_events(
        &self,
        id: TaskId,
        after: Option<&str>,
        timeout: Duration,
    ) -> Result<Vec<StoredEvent>, Error> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let events = self.events(id, after).await?;
            if !events.is_empty() || tokio::time::Instant::now() >= deadline {
                return Ok(events);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    /// Stores a batch (kept as long as its jobs).
    async fn put_batch(&self, batch: &Batch) -> Result<(), Error>;
    async fn batch(&self, id: TaskId) -> Result<Option<Batch>, Error>;
    /// Woken when a job of batch `id` may have finished (create the watch before reading the
    /// batch, as [`crate::Watch::notified`] says); `None` when this store sends no such notices
    /// (the caller reads again on a timer).
    fn watch_batch(&self, _id: TaskId) -> Option<crate::Watch> {
        None
    }
}

mod in_memory;
mod in_redis;

pub use in_memory::MemoryJobs;
