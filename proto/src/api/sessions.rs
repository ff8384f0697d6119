//! `/v1/sessions`: stateful sessions, a container of their own whose interpreter keeps its
//! names, imports, open files and working directory between cells.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::Language;

/// The languages a session can be opened in (their images carry a session kernel).
pub const SESSION_LANGUAGES: [Language; 4] = [
    Language::Python,
    Language::PythonSci,
    Language::Javascript,
    Language::Bash,
];

/// `POST /v1/sessions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionCreate {
    /// One of python, python-sci, javascript, bash.
    pub language: Language,
    /// The session container's memory limit (default and bounds: `sessions.*memory_mb`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub memory_mb: Option<u64>,
    /// Seconds without a call after which the session ends (default and bound:
    /// `sessions.*idle_timeout_s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub idle_timeout_s: Option<u64>,
    /// Packages to install before the first cell: pip requirements (`sympy==1.12`) for
    /// python and python-sci, from the operator's index, names it allows
    /// (`worker.sessions.packages.allow`); other languages take none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 50)]
    pub packages: Vec<String>,
}

/// Where a session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// Its container is up; it takes calls.
    Live,
    /// Ended: deleted, idle past its timeout, past its lifetime, or its kernel died.
    Ended,
    /// Its worker was lost and there was nothing to restore it from (no checkpoint, or the
    /// last one could not be taken).
    Lost,
}

impl SessionState {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Live => "live",
            SessionState::Ended => "ended",
            SessionState::Lost => "lost",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Self::Live, Self::Ended, Self::Lost]
            .into_iter()
            .find(|s| s.as_str() == text)
    }
}

/// What ended a session (state `ended` or `lost`); `ended_reason` says it in words, with the
/// limit or the error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionEndedBy {
    /// `DELETE /v1/sessions/{id}`, or the `/run_jupyter` request it served was answered.
    Deleted,
    /// Idle past its `idle_timeout_s`.
    Idle,
    /// Past its lifetime (`coordinator.sessions.max_lifetime`).
    Lifetime,
    /// Its kernel was killed at the session's memory limit.
    MemoryLimit,
    /// Its kernel died otherwise: a signal, `exit` in bash, a cell that did not stop at its
    /// deadline, a container that stopped answering.
    KernelDied,
    /// No worker could start it.
    NotStarted,
    /// Its worker was lost or stopped and there was nothing to restore it from (state `lost`).
    WorkerLost,
}

impl SessionEndedBy {
    pub const ALL: [Self; 7] = [
        Self::Deleted,
        Self::Idle,
        Self::Lifetime,
        Self::MemoryLimit,
        Self::KernelDied,
        Self::NotStarted,
        Self::WorkerLost,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deleted => "deleted",
            Self::Idle => "idle",
            Self::Lifetime => "lifetime",
            Self::MemoryLimit => "memory_limit",
            Self::KernelDied => "kernel_died",
            Self::NotStarted => "not_started",
            Self::WorkerLost => "worker_lost",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// The state a session ends in for this cause.
    pub fn state(self) -> SessionState {
        match self {
            Self::WorkerLost => SessionState::Lost,
            Self::Deleted
            | Self::Idle
            | Self::Lifetime
            | Self::MemoryLimit
            | Self::KernelDied
            | Self::NotStarted => SessionState::Ended,
        }
    }
}

/// A session, as `GET /v1/sessions/{id}` and the listing answer it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SessionView {
    pub id: String,
    pub language: Language,
    pub state: SessionState,
    pub memory_mb: u64,
    pub idle_timeout_s: u64,
    /// The packages installed for it, as asked.
    #[serde(default)]
    pub packages: Vec<String>,
    /// Milliseconds since the epoch.
    pub created_ms: u64,
    pub last_used_ms: u64,
    /// When it ends at the latest (its maximum lifetime), ms since the epoch.
    pub expires_ms: u64,
    /// Cells run.
    pub cells: u64,
    /// Why it ended (state `ended` or `lost`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub ended_reason: Option<String>,
    /// What ended it (state `ended` or `lost`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub ended_by: Option<SessionEndedBy>,
    /// Times it was restored on another worker after its worker was lost.
    #[serde(default)]
    pub restores: u64,
    /// The last of those restores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub last_restore: Option<Restore>,
}

/// `GET /v1/sessions`: the tenant's sessions, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SessionList {
    pub sessions: Vec<SessionView>,
}

/// `POST /v1/sessions/{id}/run`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CellRequest {
    pub code: String,
    /// The cell's deadline (default and bound: `sessions.*cell_timeout_ms`). At it the cell
    /// is interrupted; a cell that does not stop at the interrupt ends the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub timeout_ms: Option<u64>,
}

/// How a cell ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CellStatus {
    /// It ran to its end without an uncaught error.
    Ok,
    /// An uncaught error (Python, JavaScript), or a last command that exited non-zero (bash).
    Error,
    /// Interrupted at its deadline; the session lives on.
    Timeout,
}

/// The uncaught error that ended a cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CellError {
    #[serde(rename = "type")]
    pub ty: String,
    pub message: String,
    #[serde(default)]
    pub traceback: String,
}

/// A rich output of a cell: an image it displayed (e.g. a matplotlib figure), or a text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DisplayOutput {
    /// `image/png` or `text/plain`.
    pub mime: String,
    /// The bytes of an image, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub base64: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub text: Option<String>,
}

/// What a cell did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CellResult {
    pub status: CellStatus,
    pub stdout: String,
    pub stderr: String,
    #[serde(default)]
    pub stdout_truncated: bool,
    #[serde(default)]
    pub stderr_truncated: bool,
    /// The value of the cell's final expression (Python's repr, JavaScript's util.inspect).
    #[serde(default)]
    pub value: Option<String>,
    #[serde(default)]
    pub error: Option<CellError>,
    /// Bash: the last command's exit status.
    #[serde(default)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub display: Vec<DisplayOutput>,
    /// Files below the working directory the cell created or changed.
    #[serde(default)]
    pub files_changed: Vec<String>,
    pub duration_ms: u64,
    /// CPU time of the session's container over the cell.
    #[serde(default)]
    pub cpu_ms: Option<u64>,
    /// The session's resident memory high-water mark so far.
    #[serde(default)]
    pub peak_memory_kb: Option<u64>,
    /// The checkpoint taken after this cell: what a restore would bring back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub checkpoint: Option<CheckpointNote>,
    /// Set on the first call after the session's worker was lost: the session was restored
    /// on another worker before this cell ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub restored: Option<Restore>,
}

/// A name of the session's state that a checkpoint does not hold (so a restore does not bring
/// it back), and why: an open file, a running thread, a value that cannot be serialized.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Unrestorable {
    pub name: String,
    pub reason: String,
}

/// The checkpoint after a cell (taken when the cell may have changed the session's state).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CheckpointNote {
    /// Whether the session can be restored from the state after this cell.
    pub saved: bool,
    /// Bytes the session's checkpoint holds (its kernel's state and its files).
    pub bytes: u64,
    /// What it does not hold.
    #[serde(default)]
    pub unrestorable: Vec<Unrestorable>,
    /// Why it could not be saved (too large, Redis unavailable): until a later one is, the
    /// session is lost with its worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub error: Option<String>,
}

/// How a session came back after its worker was lost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Restore {
    /// The worker that was lost, and why the cluster thinks so.
    pub lost_worker: String,
    pub reason: String,
    /// The cells the restored state is the state after (the session's cells before the loss).
    pub after_cell: u64,
    /// What did not come back (it was not in the checkpoint, or could not be restored).
    pub unrestorable: Vec<Unrestorable>,
    /// Milliseconds since the epoch.
    pub restored_ms: u64,
}

/// A file of a session's working directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SessionFile {
    /// Relative to the working directory.
    pub path: String,
    pub size: u64,
    pub modified_ms: u64,
}

/// `GET /v1/sessions/{id}/files`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SessionFiles {
    pub files: Vec<SessionFile>,
}
