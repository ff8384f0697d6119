//! The Docker sandbox: a warm pool of hardened containers per language, each with the
//! fork-server runner inside, through the Docker Engine API (bollard).
//!
//! Wiring: [`DockerSandbox::build`] returns the cheap-to-clone handle (the [`Sandbox`]) and the
//! [`PoolService`], whose `run(cancel)` removes orphans of dead workers, starts the warm
//! containers, keeps the pools topped up and, once cancelled, removes every container. Without
//! the service the handle still works: it starts containers on demand.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, ContainerSummaryStateEnum, ContainerUpdateBody, HostConfig,
    HostConfigLogConfig, ResourcesUlimits,
};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptions, InspectContainerOptions,
    ListContainersOptionsBuilder, RemoveContainerOptionsBuilder, StartContainerOptions,
};
use proto::harness::{HarnessRequest, HarnessRun};
use proto::{ExecutionRequest, ExecutionResult, Language};
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::harness::{harness_execution, harness_outcome};
use crate::pool::{Counters, Pool};
use crate::protocol::{is_breach, verdict};
use crate::runner::{Failure, Runner};
use crate::{Error, HarnessOutcome, LABEL_SANDBOX, Options, Sandbox};

/// Label naming the process that created a container (`host:pid`), so orphans of a dead
/// worker can be told from containers of a live one on the same engine.
pub const LABEL_OWNER: &str = "org.codegen.owner";
/// Label naming the session a session's container holds.
pub const LABEL_SESSION: &str = "org.codegen.session";
/// Label naming the container's language.
pub const LABEL_LANGUAGE: &str = "org.codegen.language";

/// The runner starts as root in the container with only these capabilities: SETUID/SETGID to
/// become the program's uid, KILL to kill every process of that uid after a run. It refuses
/// to start with more or fewer.
const RUNNER_CAPABILITIES: [&str; 3] = ["SETUID", "SETGID", "KILL"];
/// The uid programs run as (the runner's `PROGRAM_UID`); owns the writable tmpfs mounts.
const PROGRAM_UID: u32 = 10002;

/// The longest `sandbox.prepare_delay` honoured: a longer one would only keep a container
/// out of the pool's ready count (and its gauge) for nothing.
const MAX_PREPARE_DELAY: Duration = Duration::from_secs(10);

/// A cheap-to-clone handle to the pools.
#[derive(Debug, Clone)]
pub struct DockerSandbox {
    inner: Arc<Inner>,
}

/// Keeps the pools warm; see the module docs.
#[derive(Debug)]
pub struct PoolService {
    inner: Arc<Inner>,
}

/// One language's pool (or, added up, every language's): its counters since start, and its
/// size now.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PoolStats {
    /// Containers started (warm and fresh).
    pub containers_started: u64,
    /// Pool containers removed (breach, protocol error, run limit, failure, shutdown).
    pub containers_retired: u64,
    /// Executions run in a warm container.
    pub pooled_runs: u64,
    /// Executions run in a container of their own (requested, or as a retry).
    pub fresh_runs: u64,
    /// Executions retried in a fresh container after their warm one failed.
    pub retries: u64,
    /// `docker update`s of a warm container's memory limit.
    pub memory_updates: u64,
    /// Time runs spent waiting for a warm container, all together.
    pub wait_seconds: f64,
    /// Warm containers the pool keeps (`sandbox.pools.<language>.size`).
    pub size: usize,
    /// Warm containers idle now.
    pub idle: usize,
    /// Pool containers existing now (idle, busy or starting).
    pub live: usize,
    /// Runs waiting for a warm container now.
    pub waiting: usize,
}

impl std::ops::Add for PoolStats {
    type Output = Self;

    fn add(self, other: Self) -> Self {
        Self {
            containers_started: self.containers_started + other.containers_started,
            containers_retired: self.containers_retired + other.containers_retired,
            pooled_runs: self.pooled_runs + other.pooled_runs,
            fresh_runs: self.fresh_runs + other.fresh_runs,
            retries: self.retries + other.retries,
            memory_updates: self.memory_updates + other.memory_updates,
            wait_seconds: self.wait_seconds + other.wait_seconds,
            size: self.size + other.size,
            idle: self.idle + other.idle,
            live: self.live + other.live,
            waiting: self.waiting + other.waiting,
        }
    }
}

#[derive(Debug)]
struct Inner {
    options: Options,
    docker: OnceCell<Docker>,
    owner: String,
    pools: HashMap<Language, Pool>,
    closing: CancellationToken,
    tasks: TaskTracker,
    /// Why the last warm container could not be started, for `/readyz`; cleared on success.
    start_error: Mutex<Option<String>>,
}

fn unavailable(e: bollard::errors::Error) -> Error {
    Error::Unavailable(e.to_string())
}

impl DockerSandbox {
    pub fn build(options: Options) -> (Self, PoolService) {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_else(|_| "unknown".into());
        let inner = Arc::new(Inner {
            options: options.clone(),
            docker: OnceCell::new(),
            owner: format!("{host}:{}", std::process::id()),
            pools: options
                .served()
                .iter()
                .map(|l| {
                    let pool = Pool::new(*l, options.pool_size_of(*l), options.is_lazy(*l));
                    (*l, pool)
                })
                .collect(),
            closing: CancellationToken::new(),
            tasks: TaskTracker::new(),
            start_error: Mutex::new(None),
        });
        (
            Self {
                inner: inner.clone(),
            },
            PoolService { inner },
        )
    }

    /// Removes containers of this cluster whose creating process on this host is gone, and
    /// containers of any host still only created (never started) after `orphan_age` (by
    /// default twice `start_timeout`).
    pub async fn reap_orphans(&self) -> Result<usize, Error> {
        self.inner.reap_orphans().await
    }

    /// Every language's pool, added up.
    pub fn stats(&self) -> PoolStats {
        self.stats_by_language()
            .into_iter()
            .fold(PoolStats::default(), |all, (_, one)| all + one)
    }

    /// Each served language's pool, by language name.
    pub fn stats_by_language(&self) -> Vec<(Language, PoolStats)> {
        let mut stats: Vec<_> = self
            .inner
            .pools
            .iter()
            .map(|(language, pool)| (*language, pool.stats()))
            .collect();
        stats.sort_by_key(|(language, _)| language.as_str());
        stats
    }

    /// Starts the warm containers now and waits until each pool that is not lazy has its
    /// size of them idle (or `within` passes). The service does the same in the background.
    pub async fn warm_up(&self, within: Duration) -> Result<(), Error> {
        self.inner.top_up();
        let deadline = tokio::time::Instant::now() + within;
        for pool in self.inner.pools.values().filter(|p| p.is_active()) {
            // Warm means every container ready: a resting one prepares at once.
            let _waiting = pool.wait();
            loop {
                let notified = pool.changed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if pool.counts().0 >= pool.size {
                    break;
                }
                if let Some(e) = self.inner.start_error() {
                    return Err(Error::Unavailable(e));
                }
                if tokio::time::timeout_at(deadline, notified).await.is_err() {
                    return Err(Error::Unavailable(format!(
                        "the {} pool is not warm after {within:?}",
                        pool.language
                    )));
                }
            }
        }
        Ok(())
    }
}

impl PoolService {
    /// Reaps orphans, warms the pools, keeps them topped up; on `cancel`, removes every
    /// container of this process (waiting for executions still holding one).
    pub async fn run(self, cancel: CancellationToken) {
        let inner = self.inner;
        match inner.reap_orphans().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(containers = n, "removed orphaned sandbox containers"),
            Err(e) => tracing::warn!(error = %e, "cannot look for orphaned sandbox containers"),
        }
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tick.tick() => inner.top_up(),
            }
        }
        inner.shutdown().await;
    }
}

impl Inner {
    /// Connects on first use and negotiates the API version (the engine may be older than
    /// bollard's default); a failed attempt is retried on the next call.
    async fn docker(&self) -> Result<&Docker, Error> {
        self.docker
            .get_or_try_init(|| async {
                let docker = if self.options.docker_host.is_empty() {
                    Docker::connect_with_local_defaults()
                } else {
                    Docker::connect_with_host(&self.options.docker_host)
                }
                .map_err(unavailable)?;
                docker.negotiate_version().await.map_err(unavailable)
            })
            .await
    }

    fn image(&self, language: Language) -> String {
        self.options.image(language)
    }

    /// `language`'s counters; a language this worker does not serve counts in a set of its
    /// own that nothing reads (its runs fail before they count).
    fn counters(&self, language: Language) -> &Counters {
        static UNSERVED: std::sync::LazyLock<Counters> =
            std::sync::LazyLock::new(Counters::default);
        self.pools
            .get(&language)
            .map_or(&*UNSERVED, |pool| &pool.counters)
    }

    /// The pool of `language`, or why this sandbox runs none.
    fn pool(&self, language: Language) -> Result<&Pool, Error> {
        self.pools.get(&language).ok_or_else(|| {
            Error::Config(format!(
                "this worker runs no {language} programs (sandbox.languages is {:?})",
                self.options.languages
            ))
        })
    }

    fn start_error(&self) -> Option<String> {
        self.start_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn set_start_error(&self, error: Option<String>) {
        *self.start_error.lock().unwrap_or_else(|e| e.into_inner()) = error;
    }

    /// Bound on one runner frame: two captured streams JSON-escaped (up to 6 bytes a byte),
    /// returned files, and room for the rest.
    fn max_frame(&self) -> usize {
        usize::try_from(self.options.max_output_bytes)
            .unwrap_or(usize::MAX / 32)
            .saturating_mul(18)
            .saturating_add(64 << 20)
    }

    /// The container's memory (and memory + swap) limit for a program limit of `memory_mb`:
    /// the runner's reserve on top.
    fn container_memory(&self, language: Language, memory_mb: u64) -> i64 {
        let mib = memory_mb.saturating_add(self.options.runner_memory_of(language));
        i64::try_from(mib.saturating_mul(1 << 20)).unwrap_or(i64::MAX)
    }

    fn container_config(&self, language: Language, memory_mb: u64) -> ContainerCreateBody {
        let memory = self.container_memory(language, memory_mb);
        let tmpfs_opts = format!(
            "rw,nosuid,nodev,noexec,size={}m,uid={PROGRAM_UID},gid={PROGRAM_UID},mode=0700",
            self.options.tmpfs_mb
        );
        let ulimit = |name: &str, value: i64| ResourcesUlimits {
            name: Some(name.into()),
            soft: Some(value),
            hard: Some(value),
        };
        let mut tmpfs = HashMap::from([
            ("/work".to_string(), tmpfs_opts.clone()),
            ("/tmp".to_string(), tmpfs_opts.clone()),
            // The absolute place `files` may name (proto::DATA_DIR), scrubbed like /work.
            (proto::DATA_DIR.to_string(), tmpfs_opts.clone()),
        ]);
        if language.spec().compiled {
            // The compiled program: the one place a program may exec from that is not the
            // image's (it is the program's own code either way). Docker mounts a tmpfs
            // noexec unless told `exec`.
            tmpfs.insert("/build".into(), tmpfs_opts.replace(",noexec", ",exec"));
        }
        let host_config = HostConfig {
            network_mode: Some("none".into()),
            readonly_rootfs: Some(true),
            tmpfs: Some(tmpfs),
            shm_size: Some(i64::try_from(self.options.tmpfs_mb << 20).unwrap_or(64 << 20)),
            memory: Some(memory),
            // Equal to `memory`: no swap on top, so the limit is the real limit.
            memory_swap: Some(memory),
            nano_cpus: Some((self.options.cpus * 1e9) as i64),
            pids_limit: Some(self.options.pids_limit),
            cap_drop: Some(vec!["ALL".into()]),
            cap_add: Some(RUNNER_CAPABILITIES.iter().map(|c| c.to_string()).collect()),
            security_opt: Some(vec!["no-new-privileges".into()]),
            init: Some(true),
            ulimits: Some(vec![
                ulimit("nofile", self.options.nofile),
                ulimit("fsize", self.options.fsize_mb * 1024 * 1024),
                ulimit("core", 0),
            ]),
            ipc_mode: Some("private".into()),
            auto_remove: Some(true),
            // Runner frames are not logs: nothing of an execution lands on the host's disk.
            log_config: Some(HostConfigLogConfig {
                typ: Some("none".into()),
                config: None,
            }),
            ..Default::default()
        };
        ContainerCreateBody {
            image: Some(self.image(language)),
            // The runner starts as root with three capabilities and runs every program as
            // PROGRAM_UID without any (see runner.py).
            user: Some("0:0".into()),
            // Nothing of the worker's environment leaks in.
            env: Some(vec![]),
            working_dir: Some("/work".into()),
            network_disabled: Some(true),
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            open_stdin: Some(true),
            // The stdin closes when our one attach connection does: if this worker dies, its
            // runners read EOF, exit, and (auto_remove) their containers disappear.
            stdin_once: Some(true),
            tty: Some(false),
            labels: Some(HashMap::from([
                (LABEL_SANDBOX.to_string(), self.options.cluster.clone()),
                (LABEL_OWNER.to_string(), self.owner.clone()),
                (LABEL_LANGUAGE.to_string(), language.as_str().to_owned()),
            ])),
            host_config: Some(host_config),
            ..Default::default()
        }
    }

    /// Creates a container of `config`, attaches to its stdin and output, and starts it.
    /// The container exists once this returns `Ok` (the caller removes it if it cannot use
    /// it); on an error it is already removed.
    async fn start_attached(
        &self,
        language: Language,
        config: ContainerCreateBody,
    ) -> Result<(String, crate::session::Input, crate::session::Output), Error> {
        let docker = self.docker().await?;
        let created = docker
            .create_container(None::<CreateContainerOptions>, config)
            .await
            .map_err(|e| match e {
                bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                } => Error::Config(format!(
                    "image {} not found: build it with sandbox-images/build {language}",
                    self.image(language)
                )),
                e => unavailable(e),
            })?;
        self.counters(language)
            .started
            .fetch_add(1, Ordering::Relaxed);
        let id = created.id;
        let started = async {
            let attached = docker
                .attach_container(
                    &id,
                    Some(
                        AttachContainerOptionsBuilder::default()
                            .stdin(true)
                            .stdout(true)
                            .stderr(true)
                            .stream(true)
                            .build(),
                    ),
                )
                .await
                .map_err(unavailable)?;
            docker
                .start_container(&id, None::<StartContainerOptions>)
                .await
                .map_err(unavailable)?;
            Ok((attached.input, attached.output))
        }
        .await;
        match started {
            Ok((input, output)) => Ok((id, input, output)),
            Err(e) => {
                self.remove(&id).await;
                Err(e)
            }
        }
    }

    /// Creates and starts a container, attaches to it and waits for its runner's `ready`.
    async fn spawn_runner(&self, language: Language, memory_mb: u64) -> Result<Runner, Error> {
        let (id, input, output) = self
            .start_attached(language, self.container_config(language, memory_mb))
            .await?;
        let mut runner = Runner::new(
            id.clone(),
            language,
            memory_mb,
            input,
            output,
            self.max_frame(),
        );
        let ready = match runner.wait_ready(self.options.start_timeout).await {
            Ok(()) => Ok(runner),
            Err(Failure::Fatal { message, .. }) => Err(Error::Config(format!(
                "the runner refuses to start: {message}"
            ))),
            Err(Failure::Protocol(message)) => Err(Error::Config(message)),
            Err(e) => Err(Error::Unavailable(format!(
                "the runner did not start: {e} {}",
                runner.diagnostics()
            ))),
        };
        if ready.is_err() {
            self.remove(&id).await;
        }
        ready
    }

    /// Starts session `session`'s container: the pool's hardening, its own kernel
    /// (`session.py`) instead of the runner, never pooled.
    async fn open_session(
        self: &Arc<Self>,
        language: Language,
        memory_mb: u64,
        session: &str,
        packages: Option<&std::path::Path>,
    ) -> Result<crate::session::Kernel, Error> {
        let mut config = self.container_config(language, memory_mb);
        if let (Some(dir), Some(host)) = (packages, config.host_config.as_mut()) {
            // Read-only and the engine's own path: the program imports them, never writes
            // them; compiled modules load (the mount is not noexec, the root is read-only).
            host.binds = Some(vec![format!(
                "{}:{}:ro",
                dir.display(),
                crate::PACKAGES_DIR
            )]);
        }
        config.cmd = Some(
            ["python3", "-I", "/opt/codegen/session.py"]
                .map(String::from)
                .to_vec(),
        );
        if let Some(labels) = config.labels.as_mut() {
            labels.insert(LABEL_SESSION.to_string(), session.to_owned());
        }
        let (id, input, output) = self.start_attached(language, config).await?;
        let inner = self.clone();
        let mut kernel = crate::session::Kernel::new(
            id.clone(),
            language,
            input,
            output,
            self.max_frame(),
            Box::new(move |id: String| {
                Box::pin(async move { inner.remove(&id).await })
                    as futures::future::BoxFuture<'static, ()>
            }),
        );
        if let Err(why) = kernel.wait_ready(self.options.start_timeout).await {
            self.remove(&id).await;
            return Err(Error::Config(format!(
                "the session container did not start: {why}"
            )));
        }
        Ok(kernel)
    }

    async fn remove(&self, id: &str) {
        let Ok(docker) = self.docker().await else {
            return;
        };
        match docker
            .remove_container(
                id,
                Some(RemoveContainerOptionsBuilder::default().force(true).build()),
            )
            .await
        {
            // Already gone.
            Ok(())
            | Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => {}
            // Being removed already (auto_remove, or another call): it still exists until the
            // engine is done, and whoever asked for the removal counts on it being gone.
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409, ..
            }) => {
                let removed = docker.wait_container(
                    id,
                    Some(
                        bollard::query_parameters::WaitContainerOptionsBuilder::new()
                            .condition("removed")
                            .build(),
                    ),
                );
                // Whatever the wait answers (gone already, an exit code) the removal is done
                // or will be; only a stuck engine makes it time out.
                let mut removed = std::pin::pin!(removed);
                let _ = tokio::time::timeout(
                    Duration::from_secs(10),
                    futures::StreamExt::next(&mut removed),
                )
                .await;
            }
            Err(e) => {
                tracing::warn!(container = %id, error = %e, "cannot remove sandbox container")
            }
        }
    }

    /// Starts containers in the background until every active pool has its size.
    fn top_up(self: &Arc<Self>) {
        for (language, pool) in self.pools.iter().filter(|(_, p)| p.is_active()) {
            while !self.closing.is_cancelled() && pool.reserve(pool.size) {
                let this = self.clone();
                let language = *language;
                self.tasks.spawn(async move {
                    let pool = &this.pools[&language];
                    match this
                        .spawn_runner(language, this.options.pool_memory_mb)
                        .await
                    {
                        Ok(runner) if !this.closing.is_cancelled() => {
                            this.set_start_error(None);
                            tracing::debug!(container = runner.short_id(), %language, "warm sandbox container ready");
                            pool.put_idle(runner);
                        }
                        Ok(mut runner) => {
                            runner.close().await;
                            this.remove(&runner.id).await;
                            pool.unreserve();
                        }
                        Err(e) => {
                            let message = e.to_string();
                            if this.start_error().as_deref() != Some(message.as_str()) {
                                tracing::warn!(%language, error = %message, "cannot start a warm sandbox container");
                            }
                            this.set_start_error(Some(message));
                            pool.unreserve();
                        }
                    }
                });
            }
        }
    }

    /// Removes a pool container in the background and starts its replacement.
    fn retire(self: &Arc<Self>, runner: Runner, why: &str) {
        tracing::debug!(
            container = runner.short_id(),
            runs = runner.runs,
            why,
            "retiring sandbox container"
        );
        self.counters(runner.language)
            .retired
            .fetch_add(1, Ordering::Relaxed);
        // The replacement starts right away, in parallel with the removal.
        self.pools[&runner.language].unreserve();
        self.top_up();
        let this = self.clone();
        self.tasks
            .spawn(async move { this.remove(&runner.id).await });
    }

    /// Returns a runner to its pool once it says `ready` again (it scrubs the container
    /// first); retires it instead after a breach, at its run limit, or at shutdown. While
    /// another container is ready and no run waits, it rests for `prepare_delay` before it
    /// prepares: the result it just gave sets off work elsewhere (the verdict stored, the
    /// next task published and started), and its housekeeping would take the cores from it.
    fn release(self: &Arc<Self>, mut runner: Runner, breach: bool) {
        if breach {
            return self.retire(runner, "limit breach");
        }
        if runner.runs >= self.options.max_runs_per_container {
            return self.retire(runner, "run limit");
        }
        if self.closing.is_cancelled() {
            return self.retire(runner, "shutdown");
        }
        let this = self.clone();
        self.tasks.spawn(async move {
            let pool = &this.pools[&runner.language];
            if runner.unprepared() {
                if pool.counts().1 > pool.size {
                    return this.retire(runner, "over the pool size");
                }
                let demand = pool.demand.notified();
                tokio::pin!(demand);
                demand.as_mut().enable();
                let delay = this.options.prepare_delay.min(MAX_PREPARE_DELAY);
                if !delay.is_zero() && pool.can_rest() {
                    let _resting = pool.rest();
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = demand => {}
                        () = this.closing.cancelled() => {}
                    }
                }
                if this.closing.is_cancelled() {
                    return this.retire(runner, "shutdown");
                }
            }
            match runner.wait_ready(this.options.start_timeout).await {
                Ok(()) if pool.counts().1 > pool.size => this.retire(runner, "over the pool size"),
                Ok(()) => pool.put_idle(runner),
                Err(e) => {
                    tracing::warn!(container = runner.short_id(), error = %e, diagnostics = %runner.diagnostics(), "sandbox container not clean after a run");
                    this.retire(runner, "not ready after a run");
                }
            }
        });
    }

    /// A warm runner for `language`, with its memory limit set to `memory_mb`, and whether
    /// its run may let it rest after the result ([`Pool::may_rest`]). Starts one when the
    /// pool is below its size; waits when every container is busy.
    async fn checkout(
        self: &Arc<Self>,
        language: Language,
        memory_mb: u64,
    ) -> Result<(Runner, bool), Error> {
        let pool = self.pool(language)?;
        // A lazy pool's first run: this run starts its own container, the rest of the pool
        // starts beside it.
        let mut first_run = pool.activate();
        if first_run {
            tracing::info!(%language, size = pool.size, "first run of the language: its pool starts");
        }
        let deadline = tokio::time::Instant::now() + self.options.checkout_timeout;
        // After a failed `docker update`, start a container with the right limit even above
        // the pool size (it is retired when it comes back to a full pool).
        let mut size = pool.size;
        let mut waiting = None;
        loop {
            let notified = pool.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.closing.is_cancelled() {
                return Err(Error::Unavailable("the sandbox is shutting down".into()));
            }
            let idle = if size > pool.size {
                None
            } else {
                pool.take_idle(memory_mb)
            };
            if let Some((mut runner, rest)) = idle {
                // No longer waiting while the limit is updated: releases may rest again.
                drop(waiting.take());
                if runner.memory_mb == memory_mb {
                    return Ok((runner, rest));
                }
                match self.set_memory(&runner.id, language, memory_mb).await {
                    Ok(()) => {
                        runner.memory_mb = memory_mb;
                        return Ok((runner, rest));
                    }
                    Err(e) => {
                        tracing::debug!(container = runner.short_id(), error = %e, "cannot change the memory limit; replacing the container");
                        self.retire(runner, "memory update failed");
                        size = pool.size + 1;
                        continue;
                    }
                }
            }
            if pool.reserve(size) {
                drop(waiting.take());
                if std::mem::take(&mut first_run) {
                    self.top_up();
                }
                return match self.spawn_runner(language, memory_mb).await {
                    Ok(runner) => Ok((runner, pool.may_rest())),
                    Err(e) => {
                        pool.unreserve();
                        Err(e)
                    }
                };
            }
            // Counted from the first wait on: a resting container prepares at once.
            waiting.get_or_insert_with(|| pool.wait());
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(Error::Unavailable(format!(
                    "no {language} sandbox container became free within {:?}",
                    self.options.checkout_timeout
                )));
            }
        }
    }

    async fn set_memory(&self, id: &str, language: Language, memory_mb: u64) -> Result<(), Error> {
        let memory = self.container_memory(language, memory_mb);
        self.docker()
            .await?
            .update_container(
                id,
                ContainerUpdateBody {
                    memory: Some(memory),
                    memory_swap: Some(memory),
                    ..Default::default()
                },
            )
            .await
            .map_err(unavailable)?;
        self.counters(language)
            .memory_updates
            .fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The verdict when a runner died mid-execution because the program exhausted the
    /// container's memory (the OOM killer took a runner process too).
    async fn death_verdict(
        &self,
        id: &str,
        failure: &Failure,
        memory_mb: u64,
    ) -> Option<ExecutionResult> {
        let oom = match failure {
            Failure::Fatal { oom_killed, .. } => *oom_killed,
            Failure::Closed | Failure::Docker(_) => {
                let docker = self.docker().await.ok()?;
                // The container may take a moment to be marked as stopped.
                let mut oom = false;
                for _ in 0..20 {
                    let state = docker
                        .inspect_container(id, None::<InspectContainerOptions>)
                        .await
                        .ok()?
                        .state
                        .unwrap_or_default();
                    if state.running != Some(true) {
                        oom = state.oom_killed == Some(true);
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
                oom
            }
            _ => false,
        };
        oom.then(|| ExecutionResult {
            status: proto::Status::MemoryLimit,
            reason: Some(format!(
                "killed at the memory limit of {memory_mb} MiB (the sandbox's own processes too)"
            )),
            ..ExecutionResult::error(proto::Status::MemoryLimit, "")
        })
    }

    /// One execution in a warm container; a failed container is retired and the execution
    /// retried once in a fresh one.
    async fn run_pooled(
        self: &Arc<Self>,
        request: &ExecutionRequest,
        harness: Option<&HarnessRequest>,
    ) -> Result<Ran, Error> {
        let asked = tokio::time::Instant::now();
        let (runner, rest) = self.checkout(request.language, request.memory_mb).await?;
        if let Ok(pool) = self.pool(request.language) {
            pool.waited(asked.elapsed());
        }
        let mut lease = Lease {
            inner: self.clone(),
            runner: Some(runner),
        };
        self.counters(request.language)
            .pooled_runs
            .fetch_add(1, Ordering::Relaxed);
        let outcome = lease
            .runner_mut()
            .execute(
                request,
                harness,
                self.options.max_output_bytes,
                self.options.output_limit_bytes,
                self.options.grace,
                rest,
            )
            .await;
        let runner = lease.take();
        match outcome {
            Ok(mut raw) => {
                let report = raw.harness.take();
                let result = verdict(raw, self.options.output_limit_bytes, request);
                self.release(runner, is_breach(result.status));
                Ok((result, report))
            }
            Err(Failure::NoHarness(mode)) => {
                self.release(runner, false);
                Err(Error::NoHarness(mode))
            }
            Err(Failure::Refused(message)) => {
                self.release(runner, false);
                Err(Error::Runner(format!(
                    "the runner refused the request: {message}"
                )))
            }
            Err(failure) => {
                let death = self
                    .death_verdict(&runner.id, &failure, request.memory_mb)
                    .await;
                let diagnostics = runner.diagnostics();
                let id = runner.short_id().to_owned();
                self.retire(runner, "runner failure");
                if let Some(result) = death {
                    return Ok((result, None));
                }
                tracing::warn!(container = %id, error = %failure, %diagnostics, "sandbox container failed; retrying in a fresh one");
                self.counters(request.language)
                    .retries
                    .fetch_add(1, Ordering::Relaxed);
                self.run_fresh(request, harness).await
            }
        }
    }

    /// One execution in a container of its own, removed afterwards.
    async fn run_fresh(
        &self,
        request: &ExecutionRequest,
        harness: Option<&HarnessRequest>,
    ) -> Result<Ran, Error> {
        self.counters(request.language)
            .fresh_runs
            .fetch_add(1, Ordering::Relaxed);
        let mut runner = self
            .spawn_runner(request.language, request.memory_mb)
            .await?;
        let outcome = runner
            .execute(
                request,
                harness,
                self.options.max_output_bytes,
                self.options.output_limit_bytes,
                self.options.grace,
                // Removed after this run: nothing to rest for.
                false,
            )
            .await;
        let result = match outcome {
            Ok(mut raw) => {
                let report = raw.harness.take();
                Ok((
                    verdict(raw, self.options.output_limit_bytes, request),
                    report,
                ))
            }
            Err(Failure::NoHarness(mode)) => Err(Error::NoHarness(mode)),
            Err(Failure::Refused(message)) => Err(Error::Runner(format!(
                "the runner refused the request: {message}"
            ))),
            Err(failure) => match self
                .death_verdict(&runner.id, &failure, request.memory_mb)
                .await
            {
                Some(result) => Ok((result, None)),
                None => Err(Error::Runner(format!("{failure} {}", runner.diagnostics()))),
            },
        };
        self.remove(&runner.id).await;
        result
    }

    async fn reap_orphans(&self) -> Result<usize, Error> {
        let docker = self.docker().await?;
        let filters = HashMap::from([(
            "label".to_string(),
            vec![format!("{LABEL_SANDBOX}={}", self.options.cluster)],
        )]);
        let containers = docker
            .list_containers(Some(
                ListContainersOptionsBuilder::default()
                    .all(true)
                    .filters(&filters)
                    .build(),
            ))
            .await
            .map_err(unavailable)?;
        let host = self.owner.split(':').next().unwrap_or_default();
        // Docker reports creation in seconds since the epoch.
        let now = i64::try_from(proto::now_ms() / 1000).unwrap_or(i64::MAX);
        let abandoned_after = i64::try_from(self.options.orphan_age_secs()).unwrap_or(i64::MAX);
        let mut reaped = 0;
        for container in containers {
            let owner = container
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_OWNER))
                .cloned()
                .unwrap_or_default();
            let (owner_host, owner_pid) = owner.split_once(':').unwrap_or(("", ""));
            let ours = owner_pid == std::process::id().to_string();
            let alive = ours || std::path::Path::new(&format!("/proc/{owner_pid}")).exists();
            // A creator starts its container right after creating it; one still only created
            // long after is a creator that died in between (any host: started containers
            // remove themselves when their worker goes, created ones never would).
            let abandoned = container.state == Some(ContainerSummaryStateEnum::CREATED)
                && container
                    .created
                    .is_some_and(|at| now.saturating_sub(at) > abandoned_after);
            let Some(id) = container.id else { continue };
            if (owner_host == host && !alive) || abandoned {
                self.remove(&id).await;
                reaped += 1;
            }
        }
        Ok(reaped)
    }

    async fn shutdown(&self) {
        self.closing.cancel();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        // Background tasks (a runner settling after its last run, a container starting) may
        // still hand a runner back to its pool: drain until nothing is left or running.
        loop {
            let mut drained = 0;
            for pool in self.pools.values() {
                pool.changed.notify_waiters();
                for mut runner in pool.drain_idle() {
                    drained += 1;
                    runner.close().await;
                    self.remove(&runner.id).await;
                    pool.counters.retired.fetch_add(1, Ordering::Relaxed);
                    pool.unreserve();
                }
            }
            self.tasks.close();
            if tokio::time::timeout_at(deadline, self.tasks.wait())
                .await
                .is_err()
            {
                tracing::warn!("sandbox containers still being removed at shutdown");
                break;
            }
            if drained == 0 && self.pools.values().all(|p| p.counts().0 == 0) {
                break;
            }
        }
        tracing::info!("sandbox pools stopped");
    }
}

/// A runner taken out of its pool for one execution. Dropped while still holding it (the
/// execution was cancelled), it retires the container: its state is unknown.
struct Lease {
    inner: Arc<Inner>,
    runner: Option<Runner>,
}

impl Lease {
    fn runner_mut(&mut self) -> &mut Runner {
        self.runner
            .as_mut()
            .expect("a lease holds its runner until taken")
    }

    fn take(&mut self) -> Runner {
        self.runner.take().expect("a lease is taken once")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(runner) = self.runner.take() {
            self.inner.retire(runner, "execution abandoned");
        }
    }
}

impl DockerSandbox {
    /// One execution (a harness run when `harness` is given) in a warm container, or in a
    /// fresh one retried once.
    async fn ran(
        &self,
        request: &ExecutionRequest,
        harness: Option<&HarnessRequest>,
    ) -> Result<Ran, Error> {
        use tracing::Instrument;
        // One span per run (a pooled or fresh container's), with its verdict.
        let span = tracing::info_span!(
            "sandbox run",
            language = request.language.as_str(),
            harness = harness.is_some(),
            pooled =
                self.inner.options.pool_size_of(request.language) > 0 && !request.fresh_container,
            verdict = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        let ran = self
            .ran_unspanned(request, harness)
            .instrument(span.clone())
            .await;
        // A run whose program did not pass (failed, timed out, killed at a limit) is a failed
        // span, its verdict the error's kind, as OpenTelemetry's conventions have it.
        let failure = match &ran {
            Ok((result, _)) => {
                span.record("verdict", result.status.as_str());
                (result.status != proto::Status::Passed).then(|| result.status.as_str())
            }
            Err(e) => Some(e.kind()),
        };
        if let Some(kind) = failure {
            span.record("otel.status_code", "error");
            span.record("error.type", kind);
        }
        ran
    }

    async fn ran_unspanned(
        &self,
        request: &ExecutionRequest,
        harness: Option<&HarnessRequest>,
    ) -> Result<Ran, Error> {
        if self.inner.options.pool_size_of(request.language) > 0 && !request.fresh_container {
            return self.inner.run_pooled(request, harness).await;
        }
        match self.inner.run_fresh(request, harness).await {
            Err(Error::Runner(e)) => {
                tracing::warn!(error = %e, "fresh sandbox container failed; retrying once");
                self.inner
                    .counters(request.language)
                    .retries
                    .fetch_add(1, Ordering::Relaxed);
                self.inner.run_fresh(request, harness).await
            }
            outcome => outcome,
        }
    }
}

/// What a run gave: its result, and the harness's raw report for a harness run (when the
/// harness answered).
type Ran = (ExecutionResult, Option<serde_json::Value>);

#[async_trait]
impl Sandbox for DockerSandbox {
    async fn run(&self, request: &ExecutionRequest) -> Result<ExecutionResult, Error> {
        Ok(self.ran(request, None).await?.0)
    }

    async fn run_harness(&self, run: &HarnessRun) -> Result<HarnessOutcome, Error> {
        let (result, report) = self
            .ran(&harness_execution(run), Some(&run.request))
            .await?;
        harness_outcome(&run.request, result, report)
    }

    async fn open_session(
        &self,
        language: Language,
        memory_mb: u64,
        session: &str,
        packages: Option<&std::path::Path>,
    ) -> Result<Box<dyn crate::Session>, Error> {
        Ok(Box::new(
            self.inner
                .open_session(language, memory_mb, session, packages)
                .await?,
        ))
    }

    async fn health(&self) -> Result<(), String> {
        let docker = self
            .inner
            .docker()
            .await
            .map_err(|e| format!("docker: {e}"))?;
        docker.ping().await.map_err(|e| format!("docker: {e}"))?;
        for (language, pool) in &self.inner.pools {
            let image = self.inner.image(*language);
            // A lazy pool's image is needed at its first execution, which then answers
            // `sandbox_error` naming the build command: the other languages are served
            // meanwhile, e.g. while `scripts/demo` builds the rest in the background.
            if self.inner.options.is_lazy(*language) {
                continue;
            }
            if docker.inspect_image(&image).await.is_err() {
                return Err(format!(
                    "docker: sandbox image {image} missing (build it with sandbox-images/build, \
                     or leave {language} out of sandbox.languages)"
                ));
            }
            let (_, live) = pool.counts();
            if live == 0
                && pool.size > 0
                && pool.is_active()
                && let Some(e) = self.inner.start_error()
            {
                return Err(format!("docker: no warm {language} container: {e}"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_is_hardened() {
        let (sandbox, _) = DockerSandbox::build(Options::default());
        let config = sandbox.inner.container_config(Language::Python, 128);
        let host = config.host_config.unwrap();
        assert_eq!(host.network_mode.as_deref(), Some("none"));
        assert_eq!(config.network_disabled, Some(true));
        assert_eq!(host.readonly_rootfs, Some(true));
        assert_eq!(
            host.memory,
            Some((128 + 32) * 1024 * 1024),
            "the runner's reserve on top"
        );
        assert_eq!(host.memory_swap, host.memory);
        assert_eq!(host.cap_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(
            host.cap_add,
            Some(vec!["SETUID".into(), "SETGID".into(), "KILL".into()])
        );
        assert_eq!(
            host.security_opt,
            Some(vec!["no-new-privileges".to_string()])
        );
        assert_eq!(host.pids_limit, Some(64));
        assert_eq!(host.init, Some(true));
        assert_eq!(host.ipc_mode.as_deref(), Some("private"));
        assert!(host.binds.is_none() && host.mounts.is_none());
        assert!(host.privileged.is_none() && host.devices.is_none());
        let tmpfs = host.tmpfs.unwrap();
        assert!(tmpfs["/work"].contains("uid=10002") && tmpfs["/work"].contains("size=64m"));
        assert_eq!(host.log_config.and_then(|l| l.typ).as_deref(), Some("none"));
        assert_eq!(config.env, Some(vec![]));
        assert_eq!(config.stdin_once, Some(true));
        assert_eq!(host.auto_remove, Some(true));
        let labels = config.labels.unwrap();
        assert_eq!(labels[LABEL_SANDBOX], "codegen");
        assert!(labels[LABEL_OWNER].ends_with(&format!(":{}", std::process::id())));
    }

    #[test]
    fn runner_errors_are_not_retried_by_callers() {
        assert!(Error::Unavailable("x".into()).is_retryable());
        assert!(!Error::Runner("x".into()).is_retryable());
        assert!(!Error::Config("x".into()).is_retryable());
    }
}
