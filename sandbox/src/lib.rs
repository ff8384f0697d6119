//! Running untrusted code.
//!
//! [`Sandbox`] runs one [`ExecutionRequest`] and returns its verdict. [`docker::DockerSandbox`]
//! is the real implementation: a warm pool of hardened containers per language (no network,
//! read-only root, size-limited tmpfs, memory = memory + swap, CPU quota, pids limit, all
//! capabilities dropped but the runner's SETUID/SETGID/KILL, no-new-privileges, init, ulimits,
//! no mounts, no environment), each with the fork-server runner of `sandbox-images/` inside,
//! which runs every program as an unprivileged uid in a process forked from a zygote that never
//! saw a request, and scrubs the container after it. [`scripted::ScriptedSandbox`] is a fake
//! for unit tests that runs nothing.
//!
//! Invariants:
//! - what the program does is always a verdict (`passed`, `failed` with an error kind,
//!   `timeout`, `memory_limit`, `output_limit`), never an `Err`; `Err` means the sandbox itself
//!   failed, after one retry in a fresh container, and says whether a later retry may help.
//! - a container that saw a limit breach, a runner protocol error or `max_runs_per_container`
//!   executions is removed and replaced in the background; a container whose runner cannot
//!   vouch for a clean state removes itself.
//! - every container this crate creates carries the [`LABEL_SANDBOX`] label and the owner label,
//!   so a starting worker removes those of dead workers, and is removed at shutdown.

pub mod docker;
mod harness;
mod pool;
pub mod protocol;
mod runner;
pub mod scripted;
pub mod session;

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use proto::harness::HarnessRun;
use proto::{ExecutionRequest, ExecutionResult, Language};
use serde::{Deserialize, Serialize};

pub use docker::{DockerSandbox, PoolService, PoolStats};
pub use harness::HarnessOutcome;
pub use scripted::ScriptedSandbox;
pub use session::{CellDone, CheckpointAsk, Session, SessionError, Snapshot};

/// Label put on every sandbox container; its value is the cluster prefix.
pub const LABEL_SANDBOX: &str = "org.codegen.sandbox";

/// Sandbox settings (`[sandbox]` in `codegen.toml`, `CODEGEN__SANDBOX__*` in the environment).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// Docker endpoint; empty means the local default (`DOCKER_HOST` or the Unix socket).
    pub docker_host: String,
    /// Languages this worker runs, comma-separated (`python,javascript,bash`); each needs its
    /// image, `{image_prefix}{language}:{image_tag}` (built by `sandbox-images/build`).
    pub languages: String,
    pub image_prefix: String,
    pub image_tag: String,
    /// Value of the sandbox label, so clusters sharing a Docker engine reap only their own.
    pub cluster: String,
    /// CPU quota per container, in CPUs.
    pub cpus: f64,
    /// Maximum number of processes and threads per container (the runner uses 3 of them).
    pub pids_limit: i64,
    /// Size of each writable tmpfs (`/work`, `/tmp`, `/dev/shm`), in MiB.
    pub tmpfs_mb: u64,
    /// Open files per process.
    pub nofile: i64,
    /// Largest file a process may write, in MiB.
    pub fsize_mb: i64,
    /// Bytes of stdout and of stderr kept per execution; the rest is read and discarded and
    /// the result says `truncated`. Also the cap on returned files, all together.
    pub max_output_bytes: u64,
    /// Hard cap on stdout + stderr of one execution: past it the program is killed and the
    /// verdict is `output_limit`.
    pub output_limit_bytes: u64,
    /// Extra time over the program's timeout before the runner is considered wedged.
    #[serde(with = "humantime_serde")]
    pub grace: Duration,
    /// Warm containers kept per language (unless `pools` says otherwise). 0 runs every
    /// execution in a fresh container.
    pub pool_size: usize,
    /// Per-language pools (`[sandbox.pools.<language>]`): `size` (default `pool_size`),
    /// `lazy` (default: true but for Python, JavaScript and Bash): a lazy pool starts no
    /// container until the language's first execution, so an idle language costs nothing;
    /// `runner_memory_mb` (default `runner_memory_mb` plus the language's own need).
    pub pools: BTreeMap<Language, PoolOptions>,
    /// Executions a container serves before it is replaced.
    pub max_runs_per_container: u64,
    /// Memory limit warm containers start with, in MiB (keep it equal to the coordinator's
    /// `default_memory_mb`: another limit costs a `docker update` at checkout).
    pub pool_memory_mb: u64,
    /// MiB added to every container's memory limit for the runner's own processes (a Python
    /// zygote and supervisor, ~25 MiB), so that a program gets the memory it asked for.
    pub runner_memory_mb: u64,
    /// How long creating a container and starting its runner may take.
    #[serde(with = "humantime_serde")]
    pub start_timeout: Duration,
    /// How old a container still only created (never started) must be before a starting
    /// worker removes it as abandoned, whichever worker created it; absent: twice
    /// `start_timeout`.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub orphan_age: Option<Duration>,
    /// How long an execution waits for a warm container when all of them are busy.
    #[serde(with = "humantime_serde")]
    pub checkout_timeout: Duration,
    /// How long a container that just answered waits before it prepares for its next run
    /// (forks the next program process and scrubs), while another container of its language
    /// is ready and no run waits; a run that starts waiting ends the wait. The housekeeping
    /// (about 3 ms of a core) then runs after the work a result sets off instead of beside
    /// it. `0s` prepares at once; at most 10 s is honoured.
    #[serde(with = "humantime_serde")]
    pub prepare_delay: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            docker_host: String::new(),
            languages: Language::ALL
                .iter()
                .map(|l| l.as_str())
                .collect::<Vec<_>>()
                .join(","),
            image_prefix: "codegen-sandbox-".into(),
            image_tag: "latest".into(),
            cluster: "codegen".into(),
            cpus: 1.0,
            pids_limit: 64,
            tmpfs_mb: 64,
            nofile: 256,
            fsize_mb: 32,
            max_output_bytes: 1 << 20,
            output_limit_bytes: 100 << 20,
            grace: Duration::from_secs(5),
            pool_size: 2,
            pools: Language::ALL
                .iter()
                .map(|l| {
                    let pool = PoolOptions {
                        size: None,
                        lazy: Some(!l.spec().warm_at_start),
                        runner_memory_mb: None,
                    };
                    (*l, pool)
                })
                .collect(),
            max_runs_per_container: 200,
            pool_memory_mb: 256,
            runner_memory_mb: 32,
            start_timeout: Duration::from_secs(30),
            orphan_age: None,
            checkout_timeout: Duration::from_secs(120),
            prepare_delay: Duration::from_millis(20),
        }
    }
}

/// One language's pool (`[sandbox.pools.<language>]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PoolOptions {
    /// Warm containers; absent: `sandbox.pool_size`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<usize>,
    /// Start no container before the language's first execution; absent: true but for
    /// Python, JavaScript and Bash.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lazy: Option<bool>,
    /// MiB on top of each request's memory for the runner's own processes in this
    /// language's containers; absent: `sandbox.runner_memory_mb` plus what the language's
    /// preloaded packages need (`LanguageSpec::runner_extra_mb`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runner_memory_mb: Option<u64>,
}

impl Options {
    /// Warm containers kept for `language`.
    pub fn pool_size_of(&self, language: Language) -> usize {
        self.pools
            .get(&language)
            .and_then(|p| p.size)
            .unwrap_or(self.pool_size)
    }

    /// MiB added to every request's memory in `language`'s containers for the runner.
    pub fn runner_memory_of(&self, language: Language) -> u64 {
        self.pools
            .get(&language)
            .and_then(|p| p.runner_memory_mb)
            .unwrap_or(self.runner_memory_mb + language.spec().runner_extra_mb)
    }

    /// Whether `language`'s pool waits for its first execution before it starts containers.
    pub fn is_lazy(&self, language: Language) -> bool {
        self.pools
            .get(&language)
            .and_then(|p| p.lazy)
            .unwrap_or(!language.spec().warm_at_start)
    }

    /// Age past which a container still only created is abandoned ([`Options::orphan_age`]),
    /// in whole seconds (Docker's creation times are).
    pub fn orphan_age_secs(&self) -> u64 {
        self.orphan_age
            .map_or(2 * self.start_timeout.as_secs().max(1), |age| {
                age.as_secs().max(1)
            })
    }

    /// The languages of `languages`, or which entry is not one.
    pub fn languages(&self) -> Result<Vec<Language>, Error> {
        let mut languages = Vec::new();
        for name in self
            .languages
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
        {
            let language: Language = name
                .parse()
                .map_err(|e| Error::Config(format!("sandbox.languages: {e}")))?;
            if !languages.contains(&language) {
                languages.push(language);
            }
        }
        Ok(languages)
    }

    /// The languages served; an unreadable list serves none (the worker refuses to start
    /// with one, see [`Options::languages`]).
    pub(crate) fn served(&self) -> Vec<Language> {
        self.languages().unwrap_or_default()
    }

    /// The image of `language`.
    pub fn image(&self, language: Language) -> String {
        format!(
            "{}{}:{}",
            self.image_prefix,
            language.as_str(),
            self.image_tag
        )
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
    /// The runner failed, also on the retry in a fresh container.
    #[error("sandbox runner failed: {0}")]
    Runner(String),
    /// The image's test harness does not offer this mode (the runner's `ready` did not list
    /// it: an image without a harness, or one of another build); nothing ran.
    #[error(
        "the sandbox image's test harness does not offer `{0}` (rebuild the image with \
         sandbox-images/build)"
    )]
    NoHarness(&'static str),
    /// The harness answered something that is not a report of the mode asked.
    #[error(
        "the sandbox image's test harness answered a `{mode}` run with no such report: {error}"
    )]
    HarnessReport { mode: &'static str, error: String },
}

impl Error {
    /// The failure's kind, as a span's `error.type` names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Unavailable(_) => "sandbox_unavailable",
            Error::Config(_) => "sandbox_misconfigured",
            Error::Runner(_) => "runner_failed",
            Error::NoHarness(_) => "no_harness",
            Error::HarnessReport { .. } => "harness_report",
        }
    }

    /// Only an unreachable Docker is worth another attempt later: a runner failure has
    /// already been retried once in a fresh container.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Unavailable(_))
    }
}

/// Where a session's packages are, in its container (read-only; on the kernel's `sys.path`).
pub const PACKAGES_DIR: &str = "/opt/packages";

/// Runs code in isolation.
#[async_trait]
pub trait Sandbox: Send + Sync + 'static {
    async fn run(&self, request: &ExecutionRequest) -> Result<ExecutionResult, Error>;

    /// Runs the image's test harness (see [`proto::harness`]).
    async fn run_harness(&self, run: &HarnessRun) -> Result<HarnessOutcome, Error>;

    /// Starts a session's container ([`session`]): its own, never pooled. `packages`: a
    /// folder of installed packages, mounted read-only at [`PACKAGES_DIR`].
    async fn open_session(
        &self,
        language: Language,
        memory_mb: u64,
        session: &str,
        packages: Option<&std::path::Path>,
    ) -> Result<Box<dyn Session>, Error> {
        let _ = (memory_mb, session, packages);
        Err(Error::Config(format!(
            "this sandbox holds no sessions ({language})"
        )))
    }

    /// `Ok` when executions can run; otherwise why not, for `/readyz`.
    async fn health(&self) -> Result<(), String>;
}
