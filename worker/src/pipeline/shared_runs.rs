//! Cases runs of one job that wait for a container together go in one sandbox run.
//!
//! A busy worker's runs wait for one of its few warm containers (`SandboxTurns`), and a job's
//! functions are published together, so their cases runs often wait side by side. A run costs
//! the container a program process (fork, preparation, exit), several times the cases of a
//! small function; the run that gets the turn takes every run of its job still waiting and
//! sends them as one harness request (`many_cases`: each function in a module of its own,
//! what it changed for the whole interpreter put back before the next). The others get
//! their verdicts from it.
//!
//! Nothing waits to be shared: a run that finds a container free runs at once, alone. Only
//! runs of the same job (one tenant's, one request's functions, which integration runs in one
//! module anyway) share a process. When the shared run breaks before the harness answers (a
//! timeout, the memory limit, a crash: one function's fault) or fails, every member runs
//! again alone, so a verdict never depends on a sibling's misbehaviour.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use proto::TaskId;
use proto::harness::{CasesReport, CasesRequest};
use tokio::sync::oneshot;

use crate::gate::Dependency;

/// What a member gets from the run that took it.
#[derive(Debug)]
pub(super) enum Shared {
    /// Its report, and its share of the run's wall and CPU time.
    Report(SharedReport),
    /// The shared run broke, or ended before this member's turn in it: run alone.
    Alone,
    /// A dependency failed the shared run (Docker stayed down for as long as a run waits for
    /// it): the member does not wait again.
    Down(Dependency, String),
}

#[derive(Debug)]
pub(super) struct SharedReport {
    pub(super) report: CasesReport,
    pub(super) duration_ms: u64,
    pub(super) cpu_ms: u64,
}

/// A cases run waiting for a container.
#[derive(Debug)]
pub(super) struct Member {
    id: u64,
    /// The harness request: the cases, the function and its module as `code`.
    pub(super) run: CasesRequest,
    /// The longest its cases may take (their count × the case timeout), in milliseconds.
    budget_ms: u64,
    pub(super) reply: oneshot::Sender<Shared>,
}

/// The waiting cases runs of this worker, by job.
#[derive(Debug)]
pub(crate) struct SharedRuns {
    waiting: Mutex<HashMap<TaskId, Vec<Member>>>,
    next: AtomicU64,
    /// What one shared run may take at most: the budgets of its members add up to at most
    /// this (a run's timeout), so that slow cases that fit alone are not cut off together.
    budget_ms: u64,
    /// Cleared when the image's harness does not know shared runs (an older image).
    enabled: AtomicBool,
}

impl SharedRuns {
    pub(crate) fn new(budget_ms: u64) -> Self {
        Self {
            waiting: Mutex::default(),
            next: AtomicU64::new(0),
            budget_ms,
            enabled: AtomicBool::new(true),
        }
    }

    pub(super) fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Runs go alone from now on; true the first time.
    pub(super) fn disable(&self) -> bool {
        self.enabled.swap(false, Ordering::Relaxed)
    }

    /// Registers a run of `job` as waiting, its cases taking at most `budget_ms`; the
    /// receiver answers when another run took it.
    pub(super) fn wait(
        &self,
        job: TaskId,
        run: CasesRequest,
        budget_ms: u64,
    ) -> (Waiting<'_>, oneshot::Receiver<Shared>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (reply, answer) = oneshot::channel();
        self.waiting
            .lock()
            .expect("poisoned")
            .entry(job)
            .or_default()
            .push(Member {
                id,
                run,
                budget_ms,
                reply,
            });
        (
            Waiting {
                runs: self,
                job,
                id,
            },
            answer,
        )
    }

    /// Takes the run `id` of `job` out, if it is still waiting.
    fn leave(&self, job: TaskId, id: u64) {
        let mut waiting = self.waiting.lock().expect("poisoned");
        let Some(members) = waiting.get_mut(&job) else {
            return;
        };
        members.retain(|m| m.id != id);
        if members.is_empty() {
            waiting.remove(&job);
        }
    }
}

/// A run's place among the waiting ones; dropped, it leaves (a cancelled task's run is not
/// run for nobody).
#[derive(Debug)]
pub(super) struct Waiting<'a> {
    runs: &'a SharedRuns,
    job: TaskId,
    id: u64,
}

impl Waiting<'_> {
    /// This run got the turn: it and the runs of its job still waiting, in the order they
    /// came, as many as the shared budget holds (the rest wait for a turn of their own).
    /// `None` when another run took it meanwhile (its answer comes on the receiver).
    pub(super) fn lead(self) -> Option<(Member, Vec<Member>)> {
        let mut waiting = self.runs.waiting.lock().expect("poisoned");
        let members = waiting.get_mut(&self.job)?;
        let at = members.iter().position(|m| m.id == self.id)?;
        let mine = members.remove(at);
        let mut spent = mine.budget_ms;
        let mut others = Vec::new();
        let mut left = Vec::new();
        let enabled = self.runs.enabled();
        for member in members.drain(..) {
            if enabled && spent.saturating_add(member.budget_ms) <= self.runs.budget_ms {
                spent += member.budget_ms;
                others.push(member);
            } else {
                left.push(member);
            }
        }
        if left.is_empty() {
            waiting.remove(&self.job);
        } else {
            *members = left;
        }
        drop(waiting);
        std::mem::forget(self);
        Some((mine, others))
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.runs.leave(self.job, self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cases run of function `name` (no cases: what they are does not matter here).
    fn run(name: &str) -> CasesRequest {
        CasesRequest {
            function: Some(name.into()),
            code: None,
            cases: vec![],
            case_timeout_ms: 100,
            max_output_bytes: 1024,
            nonce: None,
        }
    }

    #[test]
    fn the_leader_takes_its_jobs_waiting_runs_and_no_others() {
        let runs = SharedRuns::new(60_000);
        let (job, other) = (TaskId::new(), TaskId::new());
        let (a, _) = runs.wait(job, run("a"), 1_000);
        let (b, mut b_answer) = runs.wait(job, run("b"), 1_000);
        let (c, _) = runs.wait(other, run("c"), 1_000);
        let (mine, others) = a.lead().expect("a is still waiting");
        assert_eq!(mine.run, run("a"));
        assert_eq!(
            others.iter().map(|m| m.run.clone()).collect::<Vec<_>>(),
            vec![run("b")]
        );
        // b was taken: when its turn comes it follows instead of leading.
        assert!(b.lead().is_none());
        for member in others {
            let _ = member.reply.send(Shared::Alone);
        }
        assert!(matches!(b_answer.try_recv(), Ok(Shared::Alone)));
        // The other job's run is still there, alone.
        let (mine, others) = c.lead().expect("c is still waiting");
        assert_eq!((mine.run, others.len()), (run("c"), 0));
        assert!(runs.waiting.lock().unwrap().is_empty());
    }

    #[test]
    fn a_shared_run_takes_no_more_than_its_budget() {
        let runs = SharedRuns::new(10_000);
        let job = TaskId::new();
        let (a, _) = runs.wait(job, run("a"), 6_000);
        let (_b, _) = runs.wait(job, run("b"), 5_000);
        let (_c, _) = runs.wait(job, run("c"), 4_000);
        let (d, _) = runs.wait(job, run("d"), 1_000);
        let (mine, others) = a.lead().expect("a is waiting");
        let taken: Vec<CasesRequest> = others.iter().map(|m| m.run.clone()).collect();
        // With a, b would pass the budget (11 s), c fits (10 s), d no longer does.
        assert_eq!((mine.run, taken), (run("a"), vec![run("c")]));
        // b and d still wait for a turn of their own.
        assert_eq!(runs.waiting.lock().unwrap()[&job].len(), 2);
        drop(others);
        drop(d);
    }

    #[test]
    fn a_dropped_run_leaves() {
        let runs = SharedRuns::new(60_000);
        let job = TaskId::new();
        let (a, _) = runs.wait(job, run("a"), 1_000);
        let (b, _) = runs.wait(job, run("b"), 1_000);
        drop(a);
        let (mine, others) = b.lead().expect("b is waiting");
        assert_eq!((mine.run, others.len()), (run("b"), 0));
        assert!(runs.waiting.lock().unwrap().is_empty());
    }
}
