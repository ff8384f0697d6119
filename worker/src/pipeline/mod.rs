//! The generation pipeline: plan, implement (tests → code → run → repair), integrate. Every
//! step reads its inputs from Redis, writes its outputs there, and publishes the tasks it
//! made ready (`flow`) before its task is acked.

use std::sync::Arc;
use std::time::Duration;

use model::Model;
use proto::job::{FunctionOutcome, ImplementTask, IntegrateTask, PlanTask};
use proto::{Progress, TaskId};
use sandbox::Sandbox;
use serde::{Deserialize, Serialize};
use store::{CacheStore, JobStore};

use crate::gate::Dependency;

mod candidates;
mod cases;
mod ctx;
mod forms;
pub use ctx::TaskCtx;
mod implement;
mod integrate;
mod lessons;
mod plan;
mod quality;
mod seat_ahead;
mod shared_runs;

/// Pipeline settings (`[worker.pipeline]`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// Everything one task may spend on model calls.
    #[serde(with = "humantime_serde")]
    pub task_deadline: Duration,
    /// Limit per test case, in milliseconds.
    pub case_timeout_ms: u64,
    /// Limit per sandbox run (all cases of a function), in milliseconds.
    pub run_timeout_ms: u64,
    /// Limit of a compiled language's compile in a sandbox run, in milliseconds: apart from
    /// the run's, and longer, since a compile shares the machine's cores with every other
    /// (rustc -O of a job's whole module under load took past a minute on two cores).
    pub compile_timeout_ms: u64,
    /// Memory per sandbox run, in MiB.
    pub memory_mb: u64,
    /// How many test cases to ask for.
    pub min_cases: u32,
    pub max_cases: u32,
    /// Repairs in a row that pass no more cases than the best attempt before them (and fix
    /// no syntax or import error), after which a function stops (`stopped_by: no_progress`)
    /// with attempts left; 0 repairs until `max_iterations`. Measured on a weak model
    /// (`bench/quality`), a repair after one that did not help never passed, and every
    /// repair costs about twice the first call.
    pub repair_patience: u32,
    /// When no sandbox is available for `sandbox_wait`, finish with syntax and lint checks
    /// only (results marked `static_analysis_only`, never as tested) instead of waiting longer.
    pub static_fallback: bool,
    /// How long a sandbox run waits for an unreachable Docker engine before it gives up
    /// (static checks with `static_fallback`, else the task waits at the worker's level).
    #[serde(with = "humantime_serde")]
    pub sandbox_wait: Duration,
    /// How long tasks wait for an unreachable model (counted from when this worker found it
    /// down) before their jobs fail with the model's last error. A shorter outage costs time,
    /// not a job.
    #[serde(with = "humantime_serde")]
    pub model_wait: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            task_deadline: Duration::from_secs(15 * 60),
            case_timeout_ms: 5_000,
            run_timeout_ms: 60_000,
            compile_timeout_ms: 300_000,
            memory_mb: 512,
            min_cases: 4,
            max_cases: 12,
            repair_patience: 1,
            static_fallback: true,
            sandbox_wait: Duration::from_secs(60),
            model_wait: Duration::from_secs(10 * 60),
        }
    }
}

/// Why a pipeline step did not finish.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A dependency (Redis, the broker, Docker, the model) failed: the task is worth running
    /// again once it answers. The worker asks the [`Gate`] whether it is down (then the task
    /// waits for it) or answers (then the failure is the task's own).
    #[error("retry later ({dependency}): {reason}")]
    Retry {
        dependency: Dependency,
        reason: String,
    },
    /// The task refers to something that is gone or settled (an expired job, a function not in
    /// the plan, an outcome another run of the task stored first): acked, nothing stored.
    #[error("stale task: {0}")]
    Stale(String),
    /// The step failed for good (the model refused, the tests still fail after every attempt,
    /// the harness cannot run it): plan and implement record it as the plan's or the
    /// function's failure, integrate ends the job with it. Never retried.
    #[error("failed: {0}")]
    Failed(String),
    /// The task's job has ended (cancelled by its tenant, failed by a coordinator): nothing
    /// more is spent on it and nothing is stored.
    #[error("its job has ended: {0}")]
    Ended(proto::job::JobStatus),
    /// The job's token budget is spent: no more model calls. Implement ends its function
    /// with its best attempt, plan refuses the plan it has; never retried.
    #[error("{0}")]
    Budget(String),
    /// The worker is draining: the task stopped at a step's boundary (what it finished is
    /// stored) and goes back to its queue, not counted, for another worker to go on with.
    #[error("the worker is stopping")]
    Stopped,
}

impl crate::gate::Blame for Error {
    fn blamed(&self) -> Option<Dependency> {
        match self {
            Error::Retry { dependency, .. } => Some(*dependency),
            Error::Stale(_)
            | Error::Failed(_)
            | Error::Ended(_)
            | Error::Budget(_)
            | Error::Stopped => None,
        }
    }
    fn retryable(&self) -> bool {
        matches!(self, Error::Retry { .. })
    }
}

/// A store (Redis) failure.
fn redis(e: impl std::fmt::Display) -> Error {
    Error::Retry {
        dependency: Dependency::Redis,
        reason: e.to_string(),
    }
}

/// A failure to store a step's outcome or publish what it made ready: the task is taken again
/// once the dependency answers, and publishes what was not (`flow`'s invariant).
fn advancing(e: flow::Error) -> Error {
    match e {
        flow::Error::Store(e) => redis(e),
        flow::Error::Broker(e) => Error::Retry {
            dependency: Dependency::Broker,
            reason: e.to_string(),
        },
    }
}

/// A model that is unreachable (or too slow) may answer later: the task is handed back and
/// the broker's delivery limit bounds how long the job waits. Anything else fails for good.
fn model_error(what: Option<&str>, e: &model::Error) -> Error {
    let reason = match what {
        Some(what) => format!("{what} failed: {e}"),
        None => e.to_string(),
    };
    if e.is_retryable() {
        Error::Retry {
            dependency: Dependency::Model,
            reason,
        }
    } else {
        Error::Failed(reason)
    }
}

/// A pipeline task (`proto::Task` without `Execute`).
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Plan(PlanTask),
    Implement(ImplementTask),
    Integrate(IntegrateTask),
}

impl Step {
    /// The task's kind, as `proto::Task::kind` names it in logs and metric labels.
    pub fn kind(&self) -> &'static str {
        match self {
            Step::Plan(_) => "plan",
            Step::Implement(_) => "implement",
            Step::Integrate(_) => "integrate",
        }
    }

    pub fn job_id(&self) -> TaskId {
        match self {
            Step::Plan(t) => t.job_id,
            Step::Implement(t) => t.job_id,
            Step::Integrate(t) => t.job_id,
        }
    }

    /// The function an implement task is for.
    pub fn function(&self) -> Option<&str> {
        match self {
            Step::Implement(t) => Some(&t.function),
            Step::Plan(_) | Step::Integrate(_) => None,
        }
    }
}

/// Handles plan, implement and integrate tasks.
#[derive(Clone)]
pub struct Pipeline {
    pub(crate) options: Options,
    pub(crate) jobs: Arc<dyn JobStore>,
    /// Stores each step's end and publishes what it made ready; ends jobs.
    pub(crate) flow: flow::Flow,
    pub(crate) model: Option<Model>,
    pub(crate) sandbox: Arc<dyn Sandbox>,
    /// The function-level and solution caches, and the model identity that keys them.
    pub(crate) cache: Option<(Arc<dyn CacheStore>, String)>,
    /// The caches, before the model identity is known.
    caches: Option<Arc<dyn CacheStore>>,
    /// The worker's sandbox runs (its gate, its pools' turns, its run counter), once the
    /// pipeline belongs to a worker.
    pub(crate) sandboxed: crate::sandboxed::Sandboxed,
    /// Why there is no model (when there is none), for `/readyz`, presence and failures.
    pub(crate) no_model: String,
    /// Cases runs waiting for a container, which the first to get one runs together.
    pub(crate) shared_runs: Arc<shared_runs::SharedRuns>,
    /// `codegen_sandbox_shared_cases_total`, once the pipeline belongs to a worker.
    pub(crate) shared_cases: Option<prometheus::IntCounterVec>,
    /// Lessons from repairs that worked (`None`: no memory).
    pub(crate) memory: Option<memory::Memory>,
    /// The worker's name, on the events of the work it runs (`None` until it belongs to one).
    pub(crate) worker: Option<String>,
}

/// What a worker gives its pipeline ([`Pipeline::in_worker`]).
pub(crate) struct InWorker {
    pub sandboxed: crate::sandboxed::Sandboxed,
    /// `codegen_sandbox_shared_cases_total`.
    pub shared_cases: prometheus::IntCounterVec,
    pub ends: flow::Ends,
    /// Its name (`parts.name`).
    pub name: String,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("model", &self.model.as_ref().map(Model::describe))
            .finish()
    }
}

impl Pipeline {
    /// A pipeline on `stores.jobs`, reusing verified work from `stores.cache` once it knows
    /// the model's identity ([`Pipeline::with_model`]).
    pub fn new(
        options: Options,
        stores: &store::Stores,
        broker: Arc<dyn broker::Broker>,
        model: Option<Model>,
        sandbox: Arc<dyn Sandbox>,
    ) -> Self {
        let run_timeout_ms = options.run_timeout_ms;
        let jobs = Arc::clone(&stores.jobs);
        Self {
            options,
            flow: flow::Flow::new(Arc::clone(&jobs), broker),
            caches: stores.cache.clone(),
            jobs,
            model,
            sandbox,
            cache: None,
            sandboxed: crate::sandboxed::Sandboxed::default(),
            shared_runs: Arc::new(shared_runs::SharedRuns::new(run_timeout_ms)),
            shared_cases: None,
            memory: None,
            worker: None,
            no_model: "no model is configured for this worker ([model] settings)".into(),
        }
    }

    /// The pipeline of a worker, on its sandbox runs and counting its ends in its metrics
    /// (`Worker::build` calls it once, before anything runs).
    pub(crate) fn in_worker(mut self, worker: InWorker) -> Self {
        self.sandboxed = worker.sandboxed;
        self.shared_cases = Some(worker.shared_cases);
        self.flow = self.flow.with_ends(worker.ends);
        self.worker = Some(worker.name);
        self
    }

    /// Shows repairs the tenant's lessons and keeps the lessons of repairs that worked.
    pub fn with_memory(mut self, memory: memory::Memory) -> Self {
        self.memory = Some(memory);
        self
    }

    /// Why `model` is `None` (e.g. `model not configured: …`), said wherever it matters.
    pub fn without_model_because(mut self, reason: String) -> Self {
        self.no_model = reason;
        self
    }

    /// Whether this pipeline can generate; `Err` says why not.
    pub fn can_generate(&self) -> Result<(), &str> {
        match &self.model {
            Some(_) => Ok(()),
            None => Err(&self.no_model),
        }
    }

    /// `Some(why)` once the model has been unreachable for `model_wait`: tasks stop waiting
    /// for it and fail with its last error.
    pub(crate) fn model_given_up(&self) -> Option<String> {
        let down = self.sandboxed.gate().down(Dependency::Model)?;
        let waited = down.since.elapsed();
        (waited >= self.options.model_wait).then(|| {
            format!(
                "the model stayed unreachable for {} (worker.pipeline.model_wait): {}",
                humantime_serde::re::humantime::format_duration(Duration::from_secs(
                    waited.as_secs()
                )),
                down.cause
            )
        })
    }

    /// Reuses verified functions and stores finished solutions (`stores.cache`), keyed by
    /// `model` (`model::identity`).
    pub fn with_model(mut self, model: String) -> Self {
        self.cache = self.caches.clone().map(|cache| (cache, model));
        self
    }

    /// Runs one task of `step`, unless its job has ended (a queued task of a cancelled job is
    /// dropped as it arrives).
    pub async fn run(&self, ctx: &TaskCtx, step: &Step) -> Result<(), Error> {
        // Each step's first read carries the job's status, which it checks (`ctx.seen`).
        match step {
            Step::Plan(task) => self.plan(ctx, task).await,
            Step::Implement(task) => self.implement(ctx, task).await,
            Step::Integrate(task) => self.integrate(ctx, task).await,
        }
    }

    /// `Err(Ended)` once the current task's job has ended, `Err(Stopped)` once the worker
    /// drains: called before every model call and sandbox run, so a cancelled job stops
    /// spending, and a stopping worker lets go of its tasks, at their next step. One
    /// `GET` per check, against a model call or a run that costs a thousand times more.
    pub(crate) async fn go_on(&self, ctx: &TaskCtx) -> Result<(), Error> {
        ctx.going_on()?;
        if ctx.fresh() {
            return Ok(());
        }
        let status = self.jobs.status(ctx.job).await.map_err(redis)?;
        ctx.seen(status)
    }

    /// [`Pipeline::go_on`] before a model call, which also charges the job what this task's
    /// calls spent since its last charge and checks the job's budget: `Err(Budget)` once it is
    /// spent. A call in flight on another worker when the budget is reached still finishes,
    /// so a job can pass its budget by what its running calls spend.
    pub(crate) async fn may_ask(&self, ctx: &TaskCtx) -> Result<(), Error> {
        ctx.going_on()?;
        let uncharged = ctx.uncharged();
        if uncharged > 0 || !ctx.fresh() {
            let spent = self
                .jobs
                .spend_tokens(ctx.job, uncharged)
                .await
                .map_err(redis)?;
            ctx.charged(uncharged, spent.tokens);
            ctx.seen(spent.status)?;
        }
        ctx.within_budget()
    }

    /// Charges the job what this task's calls spent since its last charge, as the task ends
    /// (tasks that follow it check the budget against it). A failure costs only that charge.
    pub(crate) async fn charge_rest(&self, ctx: &TaskCtx) {
        let uncharged = ctx.uncharged();
        if uncharged == 0 {
            return;
        }
        match self.jobs.spend_tokens(ctx.job, uncharged).await {
            Ok(spent) => ctx.charged(uncharged, spent.tokens),
            Err(e) => {
                tracing::warn!(job = %ctx.job, error = %e, "cannot charge the job's spending")
            }
        }
    }

    /// The job's meta (it must exist), status (checked as [`TaskCtx::seen`] does), plan and
    /// the outcome of `function`, in one read.
    async fn view(&self, ctx: &TaskCtx, function: Option<&str>) -> Result<store::JobView, Error> {
        let view = self.jobs.view(ctx.job, function).await.map_err(redis)?;
        Self::checked(ctx, view)
    }

    /// A job's view, if the job is there and has not ended.
    fn checked(ctx: &TaskCtx, view: store::JobView) -> Result<store::JobView, Error> {
        if view.meta.is_none() {
            return Err(Error::Stale(format!(
                "job {} not found (expired?)",
                ctx.job
            )));
        }
        ctx.seen(view.status)?;
        ctx.set_budget(view.meta.as_ref().and_then(|m| m.request.max_tokens_total));
        Ok(view)
    }

    async fn progress(&self, job: TaskId, event: Progress) {
        if let Err(e) = self.jobs.push_event(job, &event).await {
            tracing::debug!(%job, error = %e, "cannot record a progress event");
        }
    }

    /// Stores a partial outcome, with the progress event `event` if any; `Drop` when another
    /// run of the task (a redelivery or a duplicate) already stored the final one, which then
    /// stands; `Ended` when the job has ended meanwhile.
    async fn save(
        &self,
        ctx: &TaskCtx,
        outcome: &FunctionOutcome,
        event: Option<Progress>,
    ) -> Result<(), Error> {
        let saved = self
            .jobs
            .save_function(ctx.job, outcome, event.as_ref())
            .await
            .map_err(redis)?;
        if !saved.stored {
            return Err(Error::Stale(format!(
                "{} was finished by another run of its task",
                outcome.name
            )));
        }
        ctx.seen(saved.status)
    }

    /// A seat for the task's first model call, taken from now on (none when
    /// [`Pipeline::model`] has no model to give).
    fn seat_ahead<'a>(&'a self, ctx: &'a TaskCtx) -> seat_ahead::SeatAhead<'a> {
        seat_ahead::SeatAhead::new(self.model().ok(), &ctx.call.lane)
    }

    /// The model, unless there is none or it has been unreachable for `model_wait`.
    fn model(&self) -> Result<&Model, String> {
        let model = self.model.as_ref().ok_or_else(|| self.no_model.clone())?;
        match self.model_given_up() {
            Some(reason) => Err(reason),
            None => Ok(model),
        }
    }

    fn deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + self.options.task_deadline
    }
}

/// What every prompt of a `debug` or `refactor` job is given.
fn rework_prompt<'a>(
    request: &'a proto::job::JobRequest,
    rework: &'a proto::job::Rework,
) -> model::prompts::Rework<'a> {
    model::prompts::Rework {
        mode: rework.mode,
        instruction: &request.instruction,
        language: request.language.as_str(),
        code: &rework.code,
        error: rework.error.as_deref(),
        goals: &rework.goals,
    }
}
