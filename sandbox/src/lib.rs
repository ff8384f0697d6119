//! Running untrusted code.
//!
//! [`Sandbox`] runs one [`ExecutionRequest`] and returns its verdict. [`docker::DockerSandbox`]
//! is the real implementation: a hardened container per execution (no network, read-only root,
//! size-limited tmpfs, memory = memory + swap, CPU quota, pids limit, all capabilities dropped,
//! no-new-privileges, non-root user, init, ulimits) with the runner from `sandbox-images/`
//! inside. [`scripted::ScriptedSandbox`] is a fake for unit tests that runs nothing.
//!
//! Invariants:
//! - what the program does is always a verdict (`passed`, `failed`, `timeout`, `memory_limit`),
//!   never an `Err`; `Err` means the sandbox itself failed and says whether a retry may help.
//! - every container this crate creates carries the [`LABEL_SANDBOX`] label and is removed
//!   after its run, also when the run fails half-way.

pub mod docker;
pub mod scripted;

use std::time::Duration;

use async_trait::async_trait;
use proto::{ExecutionRequest, ExecutionResult};
use serde::{Deserialize, Serialize};

pub use docker::DockerSandbox;
pub use scripted::ScriptedSandbox;

/// Label put on every sandbox container; its value is the cluster prefix.
pub const LABEL_SANDBOX: &str = "org.codegen.sandbox";

/// Sandbox settings (`[sandbox]` in `codegen.toml`, `CODEGEN__SANDBOX__*` in the environment).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// Docker endpoint; empty means the local default (`DOCKER_HOST` or the Unix socket).
    pub docker_host: String,
    /// Image with the Python runner (built by `sandbox-images/build`).
    pub python_image: String,
    /// Value of the sandbox label, so clusters sharing a Docker engine reap only their own.
    pub cluster: String,
    /// CPU quota per container, in CPUs.
    pub cpus: f64,
    /// Maximum number of processes and threads per container.
    pub pids_limit: i64,
    /// Size of the writable `/work` and `/tmp` tmpfs, in MiB.
    pub tmpfs_mb: u64,
    /// Open files per process.
    pub nofile: i64,
    /// Largest file a process may write, in MiB.
    pub fsize_mb: i64,
    /// Bytes of stdout and of stderr kept per execution; the rest is read and discarded.
    pub max_output_bytes: u64,
    /// Extra time over the program's timeout before the container itself is killed.
    #[serde(with = "humantime_serde")]
    pub grace: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            docker_host: String::new(),
            python_image: "codegen-sandbox-python:latest".into(),
            cluster: "codegen".into(),
            cpus: 1.0,
            pids_limit: 64,
            tmpfs_mb: 64,
            nofile: 256,
            fsize_mb: 32,
            max_output_bytes: 1 << 20,
            grace: Duration::from_secs(5),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Docker cannot be reached or failed transiently; the same run may work later.
    #[error("sandbox unavailable: {0}")]
    Unavailable(String),
    /// The sandbox is misconfigured (e.g. its image is missing); retrying will not help.
    #[error("sandbox misconfigured: {0}")]
    Config(String),
    /// The runner in the container broke its protocol.
    #[error("sandbox runner failed: {0}")]
    Runner(String),
}

impl Error {
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Unavailable(_) | Error::Runner(_))
    }
}

/// Runs code in isolation.
#[async_trait]
pub trait Sandbox: Send + Sync + 'static {
    async fn run(&self, request: &ExecutionRequest) -> Result<ExecutionResult, Error>;

    /// `Ok` when executions can run; otherwise why not, for `/readyz`.
    async fn health(&self) -> Result<(), String>;
}
