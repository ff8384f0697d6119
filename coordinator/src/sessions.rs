//! `/v1/sessions`: stateful sessions. A session lives in one worker's container; this
//! coordinator keeps its record (`store::Sessions`), checks the caller may see it, and
//! carries each call to that worker's session API ([`proto::session`]). Any coordinator
//! serves any session: the record names the worker.
//!
//! A session ends once (the record's state moves from `live` once, whoever ends it): deleted,
//! idle past its timeout or past its lifetime (the [`Sweeper`] of any coordinator), its kernel
//! died (the worker says so), or its worker was lost and it had no checkpoint to be restored
//! from (`lost`).
//!
//! A call that finds the session's worker gone (the connection refused or broken, or a worker
//! that no longer holds it) restores the session on another live worker from its last
//! checkpoint ([`Coordinator::recover`]) and goes on there; a call the loss interrupted is
//! answered `session_restored` (it is not run twice).
//!
//! The module by seam: [`routes`] (the HTTP handlers and their documentation), [`records`]
//! (finding a tenant's session, the 409 of an ended one, ending one), [`open`], [`cells`] and
//! [`files`] (what a call does, shared with SandboxFusion's `/run_jupyter`), [`host`] (the
//! calls to the worker holding a session), [`restore`] (moving it to another when that worker
//! is lost) and [`sweeper`] (ending sessions past their deadline).

use std::time::Duration;

use serde::{Deserialize, Serialize};

mod cells;
mod files;
mod host;
mod open;
mod records;
mod restore;
pub(crate) mod routes;
mod sweeper;

pub(crate) use cells::CellRun;
pub(crate) use files::check_path;
pub(crate) use host::host_client;
pub(crate) use sweeper::Sweeper;

/// Session settings (`[coordinator.sessions]`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionLimits {
    /// A session's memory when it asks for none, and the most it may ask, in MiB.
    pub default_memory_mb: u64,
    pub max_memory_mb: u64,
    /// Seconds without a call after which a session ends, when it asks for none; the most it
    /// may ask.
    pub default_idle_timeout_s: u64,
    pub max_idle_timeout_s: u64,
    /// A session ends this long after it was opened, called or not.
    #[serde(with = "humantime_serde")]
    pub max_lifetime: Duration,
    /// A cell's deadline when it gives none, and the most it may ask, in milliseconds.
    pub default_cell_timeout_ms: u64,
    pub max_cell_timeout_ms: u64,
    /// Bytes of a cell's stdout and of its stderr kept; the rest is read and dropped.
    pub max_output_bytes: u64,
    /// How often sessions past their deadline are ended.
    #[serde(with = "humantime_serde")]
    pub check_interval: Duration,
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self {
            default_memory_mb: 512,
            max_memory_mb: 4096,
            default_idle_timeout_s: 600,
            max_idle_timeout_s: 24 * 3600,
            max_lifetime: Duration::from_secs(12 * 3600),
            default_cell_timeout_ms: 30_000,
            max_cell_timeout_ms: 600_000,
            max_output_bytes: 1 << 20,
            check_interval: Duration::from_secs(5),
        }
    }
}
