//! The coordinator's calls to the worker that holds a session, and the workers' announcement
//! of themselves as session hosts.
//!
//! A session's state lives in one process (its kernel, in a container one worker started), so
//! its calls cannot go through a work queue that any worker may take: a coordinator looks up
//! the session's host and calls it over HTTP (`POST {host.url}/internal/sessions/{id}/...`),
//! with the cluster's session secret as a bearer token. Bodies are JSON.

use serde::{Deserialize, Serialize};

use crate::Language;
use crate::api::sessions::{CellResult, Restore, SessionEndedBy, SessionFile, SessionState};

/// Path prefix of the worker's session API.
pub const INTERNAL_PREFIX: &str = "/internal/sessions";

/// A worker able to hold sessions, as it announces itself (`store::sessions`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionHost {
    /// The worker's id.
    pub id: String,
    /// Where coordinators reach its session API (`sessions.advertise_url`).
    pub url: String,
    /// Sessions it holds now.
    pub sessions: u64,
    /// Sessions it takes at most (`sessions.max_per_worker`).
    pub capacity: u64,
}

/// `POST /internal/sessions/{id}`: start the session's container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenSession {
    pub language: Language,
    pub memory_mb: u64,
    /// The tenant, for the container's labels and logs only (the coordinator checks access).
    #[serde(default)]
    pub tenant: Option<String>,
    /// Requirements to install before the first cell (pip's, Python only).
    #[serde(default)]
    pub packages: Vec<String>,
}

/// `POST /internal/sessions/{id}/run`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunCell {
    pub code: String,
    pub timeout_ms: u64,
    pub max_output_bytes: u64,
    /// The call's own id: a cell sent again after its worker was lost (its answer lost) is
    /// not run again if the session's checkpoint holds it (the last cells' ids are kept).
    #[serde(default)]
    pub call: String,
}

/// `POST /internal/sessions/{id}/restore`: start the session's container on this worker from
/// the session's last checkpoint (in Redis), then take it over from `lost_host` (the record's
/// host must still be that one: the first restore wins). Answered with a [`Restore`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreSession {
    #[serde(flatten)]
    pub open: OpenSession,
    /// The worker the session's record names, which was lost.
    pub lost_host: String,
    /// Why the coordinator thinks it is lost.
    pub reason: String,
}

/// `PUT /internal/sessions/{id}/files/{path}` carries the bytes as its body;
/// `GET` answers them. Listing: [`crate::api::sessions::SessionFiles`].
pub type ListedFiles = Vec<SessionFile>;

/// What a worker answers to a cell: its result, or that the session is over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum CellOutcome {
    Ran(Box<CellResult>),
    /// The kernel died (the memory limit, a cell that did not stop at its deadline, `exit` in
    /// bash): the session has ended, its container is gone.
    Died {
        reason: String,
        oom_killed: bool,
    },
    /// This call's cell ran before (on a worker that was lost before its answer reached the
    /// coordinator): it is in the restored state and is not run again.
    AlreadyRan,
}

/// A worker's error answer (any non-2xx status).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostError {
    pub code: HostErrorCode,
    pub message: String,
}

/// Why a worker could not do what a coordinator asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostErrorCode {
    /// The worker holds no such session (it ended, or the worker restarted).
    NoSession,
    /// The worker holds as many sessions as it takes.
    Full,
    /// The request itself is wrong (a bad path, a file too large).
    Invalid,
    /// The file asked for does not exist.
    NoFile,
    /// The sandbox could not start the container (Docker down, image missing).
    Sandbox,
    /// The token was missing or wrong.
    Unauthorized,
    /// The session has no checkpoint to restore from (the message says why).
    NoCheckpoint,
    /// Another worker restored the session first: its record names that one now.
    Moved,
    /// The session's packages cannot be installed (the message names the package).
    Package,
}

/// A session as the cluster keeps it (`store::Sessions`): who owns it, where it lives, its
/// limits and how far it got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub id: String,
    pub tenant: Option<String>,
    pub language: Language,
    pub memory_mb: u64,
    pub idle_timeout_s: u64,
    /// Installed before its first cell (and again where it is restored).
    #[serde(default)]
    pub packages: Vec<String>,
    pub created_ms: u64,
    /// Its end at the latest (`sessions.max_lifetime`).
    pub expires_ms: u64,
    pub last_used_ms: u64,
    /// Until when a cell that started may run (its deadline): it does not idle out before.
    #[serde(default)]
    pub busy_until_ms: u64,
    pub cells: u64,
    pub state: SessionState,
    pub ended_reason: Option<String>,
    #[serde(default)]
    pub ended_by: Option<SessionEndedBy>,
    /// The worker holding it, and where that worker takes calls.
    pub host: String,
    pub host_url: String,
    /// Times it was restored on another worker, and the last of those restores.
    #[serde(default)]
    pub restores: u64,
    #[serde(default)]
    pub last_restore: Option<Restore>,
}

impl SessionRecord {
    /// When it ends unless called before: idle past its timeout, or at its lifetime's end.
    pub fn deadline_ms(&self) -> u64 {
        self.last_used_ms
            .max(self.busy_until_ms)
            .saturating_add(self.idle_timeout_s.saturating_mul(1000))
            .min(self.expires_ms)
    }

    pub fn view(&self) -> crate::api::sessions::SessionView {
        crate::api::sessions::SessionView {
            id: self.id.clone(),
            language: self.language,
            state: self.state,
            memory_mb: self.memory_mb,
            idle_timeout_s: self.idle_timeout_s,
            packages: self.packages.clone(),
            created_ms: self.created_ms,
            last_used_ms: self.last_used_ms,
            expires_ms: self.expires_ms,
            cells: self.cells,
            ended_reason: self.ended_reason.clone(),
            ended_by: self.ended_by,
            restores: self.restores,
            last_restore: self.last_restore.clone(),
        }
    }
}

/// Why a session ends, with what its reason names: the state it ends in, the words its record
/// keeps and the label it is counted under all come from here, whichever process ends it
/// (`flow::SessionEnds::end`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionEnd {
    /// Deleted; `how` says by what (`deleted`, a `/run_jupyter` request answered).
    Deleted {
        how: String,
    },
    Idle {
        idle_timeout_s: u64,
    },
    Lifetime,
    /// The kernel died; `oom_killed` when the memory limit killed it.
    KernelDied {
        detail: String,
        oom_killed: bool,
        memory_mb: u64,
    },
    /// No worker could start it; `why` names the last one's refusal.
    NotStarted {
        why: String,
    },
    /// Its worker was lost or stopped (`why`) with nothing to restore the session from.
    WorkerLost {
        why: String,
    },
}

impl SessionEnd {
    pub fn by(&self) -> SessionEndedBy {
        match self {
            Self::Deleted { .. } => SessionEndedBy::Deleted,
            Self::Idle { .. } => SessionEndedBy::Idle,
            Self::Lifetime => SessionEndedBy::Lifetime,
            Self::KernelDied {
                oom_killed: true, ..
            } => SessionEndedBy::MemoryLimit,
            Self::KernelDied { .. } => SessionEndedBy::KernelDied,
            Self::NotStarted { .. } => SessionEndedBy::NotStarted,
            Self::WorkerLost { .. } => SessionEndedBy::WorkerLost,
        }
    }

    pub fn state(&self) -> SessionState {
        self.by().state()
    }

    /// The record's `ended_reason`.
    pub fn reason(&self) -> String {
        match self {
            Self::Deleted { how } => how.clone(),
            Self::Idle { idle_timeout_s } => {
                format!("idle for {idle_timeout_s} s, its idle_timeout_s")
            }
            Self::Lifetime => "past its lifetime (coordinator.sessions.max_lifetime)".to_owned(),
            Self::KernelDied {
                detail,
                oom_killed: true,
                memory_mb,
            } => format!("its kernel was killed at the memory limit of {memory_mb} MiB ({detail})"),
            Self::KernelDied { detail, .. } => format!("its kernel died: {detail}"),
            Self::NotStarted { why } => format!("it could not start: {why}"),
            Self::WorkerLost { why } => why.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_killed_at_its_memory_limit_says_so_and_the_limit() {
        let died = |oom_killed| SessionEnd::KernelDied {
            detail: "the kernel was killed by signal 9".into(),
            oom_killed,
            memory_mb: 128,
        };
        assert_eq!(died(true).by(), SessionEndedBy::MemoryLimit);
        assert!(died(true).reason().contains("memory limit of 128 MiB"));
        assert_eq!(died(false).by(), SessionEndedBy::KernelDied);
        assert!(died(false).reason().contains("signal 9"));
        assert!(!died(false).reason().contains("memory limit"));
        let lost = SessionEnd::WorkerLost {
            why: "its worker stopped".into(),
        };
        assert_eq!(lost.state(), SessionState::Lost);
        assert_eq!(SessionEnd::Lifetime.state(), SessionState::Ended);
        for by in SessionEndedBy::ALL {
            assert_eq!(SessionEndedBy::parse(by.as_str()), Some(by));
        }
    }
}
