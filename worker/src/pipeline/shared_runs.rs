//! Cases runs of one job that wait for a container together go in one sandbox run.
//!
//! A busy worker's runs wait for one of its few warm containers (`SandboxTurns`), and a job's
//! functions are published together, so their cases runs often wait side by side. A run costs
//! the container a program process (fork, preparation, exit), several times the cases of a
//! small function; the run that gets the turn takes every run of its job still waiting and
//! sends them as one harness request (`many_cases`: each function in a module of its own,
//! the builtins restored between them). The others get their verdicts from it.
//!
//! Nothing waits to be shared: a run that finds a container free runs at once, alone. Only
//! runs of the same job (one tenant's, one request's functions, which integration runs in one
//! module anyway) share a process. When the shared run breaks before the harness answers (a
//! timeout, the memory limit, a crash: one function's fault) or fails, every member runs
//! again alone, so a verdict never depends on a sibling's misbehaviour.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use proto::TaskId;
use proto::harness::CasesReport;
use serde_json::Value;
use tokio::sync::oneshot;

/// What a member gets from the run that took it: its report and the shared run's wall and CPU
/// time, divided among the members; `None`: run alone.
pub(super) type Shared = Option<SharedReport>;

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
    pub(super) run: Value,
    pub(super) reply: oneshot::Sender<Shared>,
}

/// The waiting cases runs of this worker, by job.
#[derive(Debug, Default)]
pub(crate) struct SharedRuns {
    waiting: Mutex<HashMap<TaskId, Vec<Member>>>,
    next: AtomicU64,
}

impl SharedRuns {
    /// Registers a run of `job` as waiting; the receiver answers when another run took it.
    pub(super) fn wait(&self, job: TaskId, run: Value) -> (Waiting<'_>, oneshot::Receiver<Shared>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (reply, answer) = oneshot::channel();
        self.waiting
            .lock()
            .expect("poisoned")
            .entry(job)
            .or_default()
            .push(Member { id, run, reply });
        (
            Waiting {
                runs: self,
                job,
                id,
            },
            answer,
        )
    }

    fn remove(&self, job: TaskId, id: u64) -> Option<Member> {
        let mut waiting = self.waiting.lock().expect("poisoned");
        let members = waiting.get_mut(&job)?;
        let at = members.iter().position(|m| m.id == id)?;
        let member = members.swap_remove(at);
        if members.is_empty() {
            waiting.remove(&job);
        }
        Some(member)
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
    /// This run got the turn: it and every run of its job still waiting, itself first.
    /// `None` when another run took it meanwhile (its answer comes on the receiver).
    pub(super) fn lead(self) -> Option<(Member, Vec<Member>)> {
        let mut waiting = self.runs.waiting.lock().expect("poisoned");
        let members = waiting.remove(&self.job)?;
        let (mine, others): (Vec<Member>, Vec<Member>) =
            members.into_iter().partition(|m| m.id == self.id);
        let Some(mine) = mine.into_iter().next() else {
            waiting.insert(self.job, others);
            return None;
        };
        drop(waiting);
        std::mem::forget(self);
        Some((mine, others))
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.runs.remove(self.job, self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_leader_takes_its_jobs_waiting_runs_and_no_others() {
        let runs = SharedRuns::default();
        let (job, other) = (TaskId::new(), TaskId::new());
        let (a, _) = runs.wait(job, json!("a"));
        let (b, mut b_answer) = runs.wait(job, json!("b"));
        let (c, _) = runs.wait(other, json!("c"));
        let (mine, others) = a.lead().expect("a is still waiting");
        assert_eq!(mine.run, json!("a"));
        assert_eq!(
            others.iter().map(|m| m.run.clone()).collect::<Vec<_>>(),
            vec![json!("b")]
        );
        // b was taken: when its turn comes it follows instead of leading.
        assert!(b.lead().is_none());
        others.into_iter().for_each(|m| {
            let _ = m.reply.send(None);
        });
        assert!(matches!(b_answer.try_recv(), Ok(None)));
        // The other job's run is still there, alone.
        let (mine, others) = c.lead().expect("c is still waiting");
        assert_eq!((mine.run, others.len()), (json!("c"), 0));
        assert!(runs.waiting.lock().unwrap().is_empty());
    }

    #[test]
    fn a_dropped_run_leaves() {
        let runs = SharedRuns::default();
        let job = TaskId::new();
        let (a, _) = runs.wait(job, json!("a"));
        let (b, _) = runs.wait(job, json!("b"));
        drop(a);
        let (mine, others) = b.lead().expect("b is waiting");
        assert_eq!((mine.run, others.len()), (json!("b"), 0));
        assert!(runs.waiting.lock().unwrap().is_empty());
    }
}
