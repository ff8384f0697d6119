//! What a pipeline task carries through its step, as an argument: its job, when it last saw
//! the job unfinished, the time its sandbox runs took, and its model calls' context (its
//! tenant's lane, the time of its exchanges). Nothing of it is implicit (no
//! task-local), so a function that checks the job or counts sandbox time says so in its
//! signature, and one called outside a task cannot skip the check unnoticed.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use proto::TaskId;
use proto::job::JobStatus;
use tokio_util::sync::CancellationToken;

use super::Error;

/// How long a read of a job's status that found it unfinished answers [`TaskCtx::fresh`]:
/// reads that land this close together (a step's first read, then its first model call; a
/// stored attempt, then the next call) would tell nothing new, while a cancel is still seen
/// before anything that costs (a model call or a sandbox run) starts later than this.
const STATUS_FRESH: Duration = Duration::from_millis(100);

/// One pipeline task's context.
#[derive(Debug)]
pub struct TaskCtx {
    /// The job of the task: checked before each model call and sandbox run, wherever in the
    /// step they happen (and cases runs share a run by it).
    pub job: TaskId,
    /// When the task last read its job's status and found it unfinished.
    status_seen: Mutex<Option<Instant>>,
    /// Microseconds the task spent in sandbox runs, for its `task finished` log line.
    sandbox_us: AtomicU64,
    /// Its model calls' context: the task's tenant's lane (also its turn at a sandbox pool),
    /// and the time of its model exchanges.
    pub call: model::Call,
    /// The job's token budget, as far as this task knows what the job has spent.
    budget: Mutex<Budget>,
    /// The worker's: cancelled when it drains, and the task stops at its next step.
    stop: CancellationToken,
}

/// A job's token budget, seen from one of its tasks.
#[derive(Debug, Default, Clone, Copy)]
struct Budget {
    /// `max_tokens_total`, once the task has read its job (`None`: unbounded).
    limit: Option<u64>,
    /// This task's tokens charged to the job so far.
    charged: u64,
    /// The job's total as of the task's last charge (every task's, this one's included).
    job_spent: u64,
}

impl TaskCtx {
    /// A task of `job` in `lane`, which stops at its next step once `stop` is cancelled.
    pub fn new(job: TaskId, lane: model::Lane, stop: CancellationToken) -> Self {
        Self {
            job,
            status_seen: Mutex::new(None),
            sandbox_us: AtomicU64::new(0),
            call: model::Call::new(lane),
            budget: Mutex::new(Budget::default()),
            stop,
        }
    }

    /// `Err(Stopped)` once the worker drains.
    pub(crate) fn going_on(&self) -> Result<(), Error> {
        match self.stop.is_cancelled() {
            true => Err(Error::Stopped),
            false => Ok(()),
        }
    }

    /// The job's token budget, as its meta gives it.
    pub(crate) fn set_budget(&self, limit: Option<u64>) {
        self.budget.lock().expect("poisoned").limit = limit;
    }

    /// Tokens this task's calls spent that are not yet charged to the job.
    pub(crate) fn uncharged(&self) -> u64 {
        let (_, usage) = self.call.spent();
        let spent = usage.prompt_tokens + usage.completion_tokens;
        spent.saturating_sub(self.budget.lock().expect("poisoned").charged)
    }

    /// Records a charge of `tokens` that brought the job's total to `job_spent`.
    pub(crate) fn charged(&self, tokens: u64, job_spent: u64) {
        let mut budget = self.budget.lock().expect("poisoned");
        budget.charged += tokens;
        budget.job_spent = job_spent;
    }

    /// `Err(Budget)` once the job's spending (its last known total and what this task spent
    /// since) has reached its budget: no more model calls.
    pub(crate) fn within_budget(&self) -> Result<(), Error> {
        let uncharged = self.uncharged();
        let budget = *self.budget.lock().expect("poisoned");
        let spent = budget.job_spent + uncharged;
        match budget.limit {
            Some(limit) if spent >= limit => Err(Error::Budget(format!(
                "the job's token budget is spent: {spent} tokens of max_tokens_total {limit}"
            ))),
            _ => Ok(()),
        }
    }

    /// Microseconds spent in sandbox runs so far.
    pub fn sandbox_us(&self) -> u64 {
        self.sandbox_us.load(Ordering::Relaxed)
    }

    /// Adds the wall time since `started` to the task's sandbox time.
    pub(crate) fn add_sandbox_time(&self, started: Instant) {
        let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.sandbox_us.fetch_add(us, Ordering::Relaxed);
    }

    /// Whether the job was seen unfinished within [`STATUS_FRESH`]: no need to read it again.
    pub(crate) fn fresh(&self) -> bool {
        self.fresh_at(Instant::now())
    }

    /// [`TaskCtx::fresh`] as of `now`.
    fn fresh_at(&self, now: Instant) -> bool {
        self.status_seen
            .lock()
            .expect("poisoned")
            .is_some_and(|at| now.saturating_duration_since(at) < STATUS_FRESH)
    }

    /// Checks a status the task has just read (with its job's state, or as a write's answer):
    /// `Err(Ended)` when final; otherwise it is [`TaskCtx::fresh`] for a while.
    pub(crate) fn seen(&self, status: Option<JobStatus>) -> Result<(), Error> {
        match status {
            Some(status) if status.is_final() => Err(Error::Ended(status)),
            _ => {
                *self.status_seen.lock().expect("poisoned") = Some(Instant::now());
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_final_status_ends_the_task_and_an_unfinished_one_is_fresh_for_a_while() {
        let ctx = TaskCtx::new(
            TaskId::new(),
            model::Lane::default(),
            CancellationToken::new(),
        );
        assert!(!ctx.fresh(), "nothing read yet");
        ctx.seen(Some(JobStatus::Running)).unwrap();
        // Judged as of the read's own instant and just past the window: no race with the
        // machine's speed.
        let read = ctx.status_seen.lock().unwrap().expect("a read recorded");
        assert!(ctx.fresh_at(read));
        assert!(ctx.fresh_at(read + STATUS_FRESH / 2));
        assert!(
            !ctx.fresh_at(read + STATUS_FRESH),
            "an old read must be made again"
        );
        assert!(matches!(
            ctx.seen(Some(JobStatus::Cancelled)),
            Err(Error::Ended(JobStatus::Cancelled))
        ));
    }

    #[test]
    fn the_budget_counts_the_jobs_total_and_what_the_task_has_not_charged_yet() {
        let ctx = TaskCtx::new(
            TaskId::new(),
            model::Lane::default(),
            CancellationToken::new(),
        );
        ctx.within_budget()
            .expect("no budget known: nothing to stop");
        ctx.set_budget(Some(100));
        ctx.within_budget().expect("nothing spent");
        // Other tasks of the job spent 99 (this one nothing yet).
        ctx.charged(0, 99);
        ctx.within_budget().expect("one token left");
        ctx.charged(0, 100);
        let Err(Error::Budget(reason)) = ctx.within_budget() else {
            panic!("the budget is spent");
        };
        assert!(
            reason.contains("100 tokens of max_tokens_total 100"),
            "{reason}"
        );
        ctx.set_budget(None);
        ctx.within_budget().expect("unbounded");
    }

    #[test]
    fn sandbox_time_adds_up() {
        let ctx = TaskCtx::new(
            TaskId::new(),
            model::Lane::default(),
            CancellationToken::new(),
        );
        let started = Instant::now() - Duration::from_millis(5);
        ctx.add_sandbox_time(started);
        ctx.add_sandbox_time(started);
        assert!(ctx.sandbox_us() >= 10_000, "{}", ctx.sandbox_us());
    }
}
