//! The one way a session ends, for both kinds of process: a coordinator (deleted, idle, past
//! its lifetime, not started, its worker lost) and the worker that holds it (its kernel died,
//! the worker stopped with nothing to restore it from).

use std::sync::Arc;

use proto::api::sessions::SessionEndedBy;
use proto::session::{SessionEnd, SessionRecord};

/// Ends sessions in the store and counts each once, in the process that ended it; cheap to
/// clone.
#[derive(Clone)]
pub struct SessionEnds {
    sessions: Arc<dyn store::Sessions>,
    ended: prometheus::IntCounterVec,
}

impl std::fmt::Debug for SessionEnds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionEnds").finish_non_exhaustive()
    }
}

impl SessionEnds {
    /// `ended`: this process's `codegen_sessions_ended_total` ([`Self::counter`]).
    pub fn new(sessions: Arc<dyn store::Sessions>, ended: prometheus::IntCounterVec) -> Self {
        Self { sessions, ended }
    }

    /// `codegen_sessions_ended_total`, by final state and cause; each process that ends
    /// sessions registers one, and a session is counted by the one that ended it.
    pub fn counter() -> prometheus::IntCounterVec {
        let counter = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                "codegen_sessions_ended_total",
                "Sessions this process ended, by final state (ended, lost) and cause (deleted, idle, lifetime, memory_limit, kernel_died, not_started, worker_lost)",
            ),
            &["state", "reason"],
        )
        .expect("a valid metric");
        // Every series exists from the start, so a rate over it is never empty.
        for by in SessionEndedBy::ALL {
            counter.with_label_values(&[by.state().as_str(), by.as_str()]);
        }
        counter
    }

    /// Ends `record` (if still live) as `end` says; true when this call ended it (the first
    /// ending wins: a kernel's death the worker recorded stands over the coordinator's). The
    /// worker holding it drops its container when it finds the record ended (a coordinator
    /// also tells it at once).
    pub async fn end(
        &self,
        record: &SessionRecord,
        end: &SessionEnd,
    ) -> Result<bool, store::Error> {
        let ended = self.sessions.end_session(record, end).await?;
        if ended {
            let (state, by) = (end.state().as_str(), end.by().as_str());
            tracing::info!(session = %record.id, state, by, reason = %end.reason(), "session ended");
            self.ended.with_label_values(&[state, by]).inc();
        }
        Ok(ended)
    }
}
