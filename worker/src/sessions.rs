//! Holding sessions: each one a container of its own ([`sandbox::Session`]) that this worker
//! started and talks to. Coordinators reach a session's worker directly, over HTTP
//! ([`proto::session`], bearer token: the cluster's session secret), because a session's
//! state lives in this one process: a work queue that any worker may take from cannot carry
//! its calls, and a lost worker must show at once (a refused connection) rather than as a
//! call waiting in a queue.
//!
//! Calls on one session run one at a time, in the order they arrive (a fair lock per
//! session); calls on different sessions run side by side. The worker announces itself as a
//! session host (how many it holds, how many it takes) every `announce_interval`; every
//! `check_interval` it closes the sessions whose record is no longer live (a coordinator ended
//! them: deleted, idle, past their lifetime, or restored on another worker). A session whose
//! kernel dies ends here, through the same [`flow::SessionEnds`] a coordinator uses.
//!
//! After every call that may have changed a session (a cell, an upload) the worker takes the
//! session's checkpoint (its kernel's state and a tar of its working directory, at most
//! `checkpoint_max_bytes`, the parts unchanged since the last one left out) and keeps it in
//! Redis before it answers: a session whose worker is lost is restored from it on another
//! worker (`POST /internal/sessions/{id}/restore`, asked by the coordinator that found the
//! loss), with every cell its caller saw. A checkpoint that cannot be taken drops the one
//! before it, so a restore never goes back past a cell a caller saw: such a session is lost
//! with its worker. At shutdown the worker removes every session's container and leaves the
//! checkpointed sessions live, for the next call to restore elsewhere.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use proto::api::sessions::{CheckpointNote, Restore, SessionState, Unrestorable};
use proto::session::{
    CellOutcome, HostError, HostErrorCode, INTERNAL_PREFIX, OpenSession, RestoreSession, RunCell,
    SessionEnd, SessionHost,
};
use sandbox::{Sandbox, Session, SessionError};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// Session hosting settings (`[worker.sessions]`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionOptions {
    /// Whether this worker holds sessions.
    pub enabled: bool,
    /// Address of the session API coordinators call. Port 0: any free port (one host, the
    /// local cluster); a fixed port where coordinators reach workers over a network.
    pub listen: SocketAddr,
    /// The URL coordinators use to reach `listen` (empty: `http://{listen}`, or
    /// `http://{hostname}:{port}` when `listen` is a wildcard address).
    pub advertise_url: String,
    /// Sessions this worker holds at most.
    pub max_per_worker: u64,
    /// Session containers this worker starts at once (opens and restores); the rest wait
    /// their turn in order. Many containers started together each take far longer than
    /// the same ones started a few at a time, so a burst of opens is served sooner this way.
    pub max_opening: u32,
    /// Largest file a session call uploads or downloads, in bytes.
    pub max_file_bytes: u64,
    /// How often the worker announces itself; it counts as gone after five times this.
    #[serde(with = "humantime_serde")]
    pub announce_interval: Duration,
    /// How often held sessions are checked against their records.
    #[serde(with = "humantime_serde")]
    pub check_interval: Duration,
    /// Largest checkpoint (a kernel's state and the tar of its files) kept for a session, in
    /// bytes, at most 48 MiB; 0: no checkpoints (a lost worker's sessions are lost).
    pub checkpoint_max_bytes: u64,
    /// Package installs into sessions.
    pub packages: crate::packages::PackageOptions,
}

/// The most `checkpoint_max_bytes` may be: a checkpoint comes from the container in one frame
/// (base64), within the frame bound of the sandbox.
pub const MAX_CHECKPOINT_BYTES: u64 = 48 << 20;

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            enabled: true,
            listen: ([127, 0, 0, 1], 0).into(),
            advertise_url: String::new(),
            max_per_worker: 256,
            max_opening: 4,
            max_file_bytes: 16 << 20,
            announce_interval: Duration::from_secs(2),
            check_interval: Duration::from_secs(10),
            checkpoint_max_bytes: 32 << 20,
            packages: crate::packages::PackageOptions::default(),
        }
    }
}

/// Calls of a session's last cells kept (in its checkpoint too): more than a coordinator
/// can have in flight on one session when its worker is lost.
const RECENT_CALLS: usize = 64;

/// One held session: its kernel while it lives, and where its checkpoints stand.
struct Held {
    kernel: Option<Box<dyn Session>>,
    language: proto::Language,
    /// Cells run (restored: the cells of the checkpoint it came from), and the calls of the
    /// last [`RECENT_CALLS`] (a cell sent again after a restore is not run twice).
    cells: u64,
    calls: std::collections::VecDeque<String>,
    /// The next checkpoint must carry every part: the last one was not kept.
    full: bool,
    /// Sizes of the kept checkpoint's parts.
    state_bytes: u64,
    files_bytes: u64,
    /// The kernel died while it was checkpointed: why, and whether at its memory limit.
    died_at_checkpoint: Option<(String, bool)>,
}

impl Held {
    fn new(language: proto::Language) -> Self {
        Self {
            kernel: None,
            language,
            cells: 0,
            calls: std::collections::VecDeque::new(),
            full: true,
            state_bytes: 0,
            files_bytes: 0,
            died_at_checkpoint: None,
        }
    }
}

/// The sessions this worker holds, shared by its API and its loops.
struct Inner {
    options: SessionOptions,
    id: String,
    sandbox: Arc<dyn Sandbox>,
    store: Arc<dyn store::Sessions>,
    /// The bearer token coordinators must present.
    secret: String,
    /// Where coordinators reach this worker's sessions.
    url: String,
    packages: crate::packages::Packages,
    held: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Held>>>>,
    /// Turns to start a session container (`max_opening`; tokio's semaphore is fair).
    opening: tokio::sync::Semaphore,
    metrics: SessionMetrics,
    /// Ends sessions, as a coordinator does (`flow`).
    ends: flow::SessionEnds,
}

/// The worker's session metrics.
#[derive(Debug, Clone)]
struct SessionMetrics {
    /// `codegen_sessions_held`: sessions this worker holds now.
    held: prometheus::IntGauge,
    /// `codegen_session_cell_seconds`: a cell's time in this worker, waiting for the calls
    /// before it included, by language.
    cell_seconds: prometheus::HistogramVec,
    /// `codegen_session_checkpoints_total{result}`: checkpoints taken (`saved`), found too
    /// large (`too_large`) or not kept (`failed`: Redis, a kernel that died).
    checkpoints: prometheus::IntCounterVec,
    /// `codegen_session_checkpoint_seconds`: taking and keeping one.
    checkpoint_seconds: prometheus::Histogram,
    /// `codegen_session_checkpoint_bytes`: a kept checkpoint's whole size.
    checkpoint_bytes: prometheus::Histogram,
    /// `codegen_session_restores_total{result}`: sessions restored here (`restored`), or not
    /// (`no_checkpoint`, `failed`, `moved`: another worker restored it first).
    restores: prometheus::IntCounterVec,
    /// `codegen_session_restore_seconds`: a restore, its container's start included.
    restore_seconds: prometheus::Histogram,
    /// `codegen_session_package_installs_total{result}`: sessions' package sets installed
    /// (`installed`), found in the cache (`cached`), or refused (`refused`).
    package_installs: prometheus::IntCounterVec,
}

impl SessionMetrics {
    fn register(registry: &prometheus::Registry) -> prometheus::Result<Self> {
        let metrics = Self {
            held: prometheus::IntGauge::new(
                "codegen_sessions_held",
                "Sessions this worker holds now (containers of their own)",
            )?,
            cell_seconds: prometheus::HistogramVec::new(
                prometheus::HistogramOpts::new(
                    "codegen_session_cell_seconds",
                    "Time of a session call in the worker, waiting for the calls before it included, by language",
                )
                .buckets(telemetry::latency_buckets()),
                &["language"],
            )?,
            checkpoints: prometheus::IntCounterVec::new(
                prometheus::Opts::new(
                    "codegen_session_checkpoints_total",
                    "Session checkpoints by result: saved, too_large, failed",
                ),
                &["result"],
            )?,
            checkpoint_seconds: prometheus::Histogram::with_opts(
                prometheus::HistogramOpts::new(
                    "codegen_session_checkpoint_seconds",
                    "Time to take a session's checkpoint and keep it in Redis",
                )
                .buckets(telemetry::latency_buckets()),
            )?,
            checkpoint_bytes: prometheus::Histogram::with_opts(
                prometheus::HistogramOpts::new(
                    "codegen_session_checkpoint_bytes",
                    "Size of a kept session checkpoint (kernel state and files), bytes",
                )
                .buckets(prometheus::exponential_buckets(1024.0, 4.0, 10)?),
            )?,
            restores: prometheus::IntCounterVec::new(
                prometheus::Opts::new(
                    "codegen_session_restores_total",
                    "Sessions restored on this worker after theirs was lost, by result: restored, no_checkpoint, failed, moved",
                ),
                &["result"],
            )?,
            restore_seconds: prometheus::Histogram::with_opts(
                prometheus::HistogramOpts::new(
                    "codegen_session_restore_seconds",
                    "Time to restore a session from its checkpoint, its container's start included",
                )
                .buckets(telemetry::latency_buckets()),
            )?,
            package_installs: prometheus::IntCounterVec::new(
                prometheus::Opts::new(
                    "codegen_session_package_installs_total",
                    "Package sets for sessions by result: installed, cached, refused",
                ),
                &["result"],
            )?,
        };
        registry.register(Box::new(metrics.held.clone()))?;
        registry.register(Box::new(metrics.cell_seconds.clone()))?;
        registry.register(Box::new(metrics.checkpoints.clone()))?;
        registry.register(Box::new(metrics.checkpoint_seconds.clone()))?;
        registry.register(Box::new(metrics.checkpoint_bytes.clone()))?;
        registry.register(Box::new(metrics.restores.clone()))?;
        registry.register(Box::new(metrics.restore_seconds.clone()))?;
        registry.register(Box::new(metrics.package_installs.clone()))?;
        for result in ["installed", "cached", "refused"] {
            metrics.package_installs.with_label_values(&[result]);
        }
        for result in ["saved", "too_large", "failed"] {
            metrics.checkpoints.with_label_values(&[result]);
        }
        for result in ["restored", "no_checkpoint", "failed", "moved"] {
            metrics.restores.with_label_values(&[result]);
        }
        Ok(metrics)
    }
}

/// The session host: `run` serves the API on `listener` and keeps the announcements going.
pub struct SessionHosting {
    inner: Arc<Inner>,
    listener: tokio::net::TcpListener,
    url: String,
}

impl std::fmt::Debug for SessionHosting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionHosting")
            .field("id", &self.inner.id)
            .field("url", &self.url)
            .finish()
    }
}

impl SessionHosting {
    /// Binds the API's listener and reads (or makes) the cluster's session secret.
    pub async fn build(
        options: SessionOptions,
        id: String,
        sandbox: Arc<dyn Sandbox>,
        store: Arc<dyn store::Sessions>,
        registry: &prometheus::Registry,
    ) -> Result<Self, crate::Error> {
        if options.checkpoint_max_bytes > MAX_CHECKPOINT_BYTES {
            return Err(crate::Error::Config(format!(
                "worker.sessions.checkpoint_max_bytes is {}, over the most a checkpoint may be ({MAX_CHECKPOINT_BYTES})",
                options.checkpoint_max_bytes
            )));
        }
        if options.max_opening == 0 {
            return Err(crate::Error::Config(
                "worker.sessions.max_opening is 0: no session could ever start".to_owned(),
            ));
        }
        let opening = options.max_opening as usize;
        let metrics =
            SessionMetrics::register(registry).map_err(|e| crate::Error::Config(e.to_string()))?;
        let ended = flow::SessionEnds::counter();
        registry
            .register(Box::new(ended.clone()))
            .map_err(|e| crate::Error::Config(e.to_string()))?;
        let ends = flow::SessionEnds::new(Arc::clone(&store), ended);
        let listener = tokio::net::TcpListener::bind(options.listen)
            .await
            .map_err(|e| {
                crate::Error::Config(format!("worker.sessions.listen {}: {e}", options.listen))
            })?;
        let bound = listener
            .local_addr()
            .map_err(|e| crate::Error::Config(e.to_string()))?;
        let url = if !options.advertise_url.is_empty() {
            options.advertise_url.trim_end_matches('/').to_owned()
        } else if bound.ip().is_unspecified() {
            format!("http://{}:{}", hostname(), bound.port())
        } else {
            format!("http://{bound}")
        };
        let secret = store
            .secret()
            .await
            .map_err(|e| crate::Error::Config(format!("the session secret: {e}")))?;
        Ok(Self {
            inner: Arc::new(Inner {
                packages: crate::packages::Packages::build(options.packages.clone()),
                options,
                id,
                sandbox,
                store,
                secret,
                url: url.clone(),
                held: Mutex::default(),
                opening: tokio::sync::Semaphore::new(opening),
                metrics,
                ends,
            }),
            listener,
            url,
        })
    }

    /// Where coordinators reach this worker's sessions.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The sessions as callers in this process reach them.
    pub fn local(&self) -> LocalSessions {
        LocalSessions(Arc::clone(&self.inner))
    }

    /// Serves until `cancel`; then ends every held session.
    pub async fn run(self, cancel: CancellationToken) {
        let Self {
            inner,
            listener,
            url,
        } = self;
        tracing::info!(url = %url, "session api listening");
        let router = router(inner.clone());
        let server = tokio::spawn(telemetry::serve(listener, router, cancel.clone()));
        let mut announce = tokio::time::interval(inner.options.announce_interval);
        let mut check = tokio::time::interval(inner.options.check_interval);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = announce.tick() => inner.announce(&url).await,
                _ = check.tick() => inner.close_ended().await,
            }
        }
        if let Err(e) = inner.store.withdraw_host(&inner.id).await {
            tracing::warn!(error = %e, "cannot withdraw as a session host");
        }
        let _ = server.await;
        inner.close_all().await;
    }
}

/// This worker's sessions for a caller in this process (an agent's run, whose session is held
/// where its loop runs): the session API's operations without HTTP, answered and refused
/// alike. Cheap to clone.
#[derive(Clone)]
pub struct LocalSessions(Arc<Inner>);

impl std::fmt::Debug for LocalSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalSessions")
            .field("host", &self.0.id)
            .finish()
    }
}

impl LocalSessions {
    /// This worker's id as a session host (what a record's `host` names).
    pub fn host(&self) -> &str {
        &self.0.id
    }

    /// Where coordinators reach this worker's sessions.
    pub fn url(&self) -> &str {
        &self.0.url
    }

    pub fn store(&self) -> &Arc<dyn store::Sessions> {
        &self.0.store
    }

    /// Whether this worker holds session `id` now.
    pub fn holds(&self, id: &str) -> bool {
        self.0.lookup(id).is_some()
    }

    /// The largest file a call may carry (`worker.sessions.max_file_bytes`).
    pub fn max_file_bytes(&self) -> u64 {
        self.0.options.max_file_bytes
    }

    /// Opens session `id` (its record already made): `true` when this call opened it.
    pub async fn open(&self, id: &str, open: &OpenSession) -> Result<bool, Refusal> {
        self.0.open(id, open).await
    }

    /// Restores session `id` here from its checkpoint, taking it over from `lost_host`.
    pub async fn restore(
        &self,
        id: &str,
        request: &RestoreSession,
    ) -> Result<Option<Restore>, Refusal> {
        self.0.restore(id, request).await
    }

    pub async fn cell(&self, id: &str, cell: RunCell) -> Result<CellOutcome, Refusal> {
        match with_kernel(&self.0, id, Op::Cell(cell)).await? {
            Ok(Done::Cell(result)) => Ok(CellOutcome::Ran(result)),
            Ok(Done::AlreadyRan) => Ok(CellOutcome::AlreadyRan),
            Ok(_) => unreachable!("a cell is answered with its result"),
            Err(SessionError::Dead { reason, oom_killed }) => {
                Ok(CellOutcome::Died { reason, oom_killed })
            }
            Err(refusal) => Err(refused(refusal)),
        }
    }

    pub async fn put_file(&self, id: &str, path: &str, bytes: Vec<u8>) -> Result<(), Refusal> {
        match with_kernel(&self.0, id, Op::Put(path.to_owned(), bytes.into())).await? {
            Ok(_) => Ok(()),
            Err(e) => Err(refused(e)),
        }
    }

    /// A file's bytes, at most `max_bytes` of them (more is refused).
    pub async fn get_file(&self, id: &str, path: &str, max_bytes: u64) -> Result<Vec<u8>, Refusal> {
        match with_kernel(&self.0, id, Op::Get(path.to_owned(), max_bytes)).await? {
            Ok(Done::Get(bytes)) => Ok(bytes),
            Ok(_) => unreachable!("a file request is answered with its bytes"),
            Err(e) => Err(refused(e)),
        }
    }

    pub async fn list_files(
        &self,
        id: &str,
    ) -> Result<Vec<proto::api::sessions::SessionFile>, Refusal> {
        match with_kernel(&self.0, id, Op::List).await? {
            Ok(Done::List(files)) => Ok(files),
            Ok(_) => unreachable!("a listing is answered with the files"),
            Err(e) => Err(refused(e)),
        }
    }

    /// Session `id` again, in a container with `open.packages` mounted: its state and files
    /// come back from its checkpoint, taken after its last call, as a restore brings them
    /// (its record counts it as one). Allowed names are checked and installed before anything
    /// changes: a refusal leaves the session as it was.
    pub async fn reinstall(&self, id: &str, open: &OpenSession) -> Result<(), Refusal> {
        let inner = &self.0;
        if inner.options.checkpoint_max_bytes == 0 {
            return Err(refuse(
                StatusCode::CONFLICT,
                HostErrorCode::NoCheckpoint,
                "packages are installed into a running session through its checkpoint, and checkpoints are off (worker.sessions.checkpoint_max_bytes = 0)",
            ));
        }
        inner.install(open).await?;
        match inner.store.checkpoint(id).await {
            Ok(store::Checkpoint::Kept(_)) => {}
            Ok(store::Checkpoint::Unavailable(why)) => {
                return Err(refuse(
                    StatusCode::CONFLICT,
                    HostErrorCode::NoCheckpoint,
                    why,
                ));
            }
            Ok(store::Checkpoint::None) => {
                return Err(refuse(
                    StatusCode::CONFLICT,
                    HostErrorCode::NoCheckpoint,
                    "the session has no checkpoint",
                ));
            }
            Err(e) => {
                return Err(refuse(
                    StatusCode::SERVICE_UNAVAILABLE,
                    HostErrorCode::Sandbox,
                    format!("its checkpoint could not be read: {e}"),
                ));
            }
        }
        inner.close(id).await;
        let again = RestoreSession {
            open: open.clone(),
            lost_host: inner.id.clone(),
            reason: format!("reopened with the packages {}", open.packages.join(", ")),
        };
        inner.restore(id, &again).await.map(|_| ())
    }

    /// Removes session `id`'s container (its record is ended by whoever ends it).
    pub async fn close(&self, id: &str) {
        self.0.close(id).await;
    }

    /// Ends session `id`'s record as `end` says (the first end wins), through the one place
    /// sessions end.
    pub async fn end(&self, record: &proto::session::SessionRecord, end: &SessionEnd) {
        if let Err(e) = self.0.ends.end(record, end).await {
            tracing::warn!(error = %e, session = %record.id, "cannot record a session's end");
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

impl Inner {
    fn count(&self) -> u64 {
        self.held.lock().expect("poisoned").len() as u64
    }

    /// The held sessions changed: the gauge follows.
    fn recount(&self) {
        let held = self.held.lock().expect("poisoned").len();
        self.metrics
            .held
            .set(i64::try_from(held).unwrap_or(i64::MAX));
    }

    async fn announce(&self, url: &str) {
        let host = SessionHost {
            id: self.id.clone(),
            url: url.to_owned(),
            sessions: self.count(),
            capacity: self.options.max_per_worker,
        };
        if let Err(e) = self
            .store
            .announce_host(&host, self.options.announce_interval * 5)
            .await
        {
            tracing::warn!(error = %e, "cannot announce this worker as a session host");
        }
    }

    fn lookup(&self, id: &str) -> Option<Arc<tokio::sync::Mutex<Held>>> {
        self.held.lock().expect("poisoned").get(id).cloned()
    }

    /// Closes the held sessions whose record is no longer live.
    async fn close_ended(&self) {
        let ids: Vec<String> = self
            .held
            .lock()
            .expect("poisoned")
            .keys()
            .cloned()
            .collect();
        for id in ids {
            let Some(slot) = self.lookup(&id) else {
                continue;
            };
            // A session being opened, restored or called is left for the next round: the
            // record is read under its lock, so a restore that moves the record here is seen
            // whole (never the record before it with the kernel after it).
            let Ok(mut guard) = slot.clone().try_lock_owned() else {
                continue;
            };
            match self.store.session(&id).await {
                Ok(Some(record))
                    if record.state == SessionState::Live && record.host == self.id => {}
                Ok(_) => {
                    tracing::info!(session = %id, "session ended elsewhere; removing its container");
                    let kernel = guard.kernel.take();
                    drop(guard);
                    {
                        let mut held = self.held.lock().expect("poisoned");
                        if held.get(&id).is_some_and(|s| Arc::ptr_eq(s, &slot)) {
                            held.remove(&id);
                        }
                    }
                    self.recount();
                    if let Some(kernel) = kernel {
                        kernel.close().await;
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, session = %id, "cannot check a session's record");
                }
            }
        }
    }

    /// Removes session `id`'s container (if held).
    async fn close(&self, id: &str) {
        let Some(held) = self.held.lock().expect("poisoned").remove(id) else {
            return;
        };
        self.recount();
        let kernel = held.lock().await.kernel.take();
        if let Some(kernel) = kernel {
            kernel.close().await;
        }
    }

    async fn close_all(&self) {
        let ids: Vec<String> = self
            .held
            .lock()
            .expect("poisoned")
            .keys()
            .cloned()
            .collect();
        for id in ids {
            // A checkpointed session stays live: the next call restores it on another
            // worker. One without a checkpoint ends here, with the reason it has none.
            let why = match self.store.checkpoint(&id).await {
                Ok(store::Checkpoint::Kept(_)) => None,
                Ok(store::Checkpoint::Unavailable(why)) => Some(why),
                Ok(store::Checkpoint::None) => Some("it has no checkpoint".to_owned()),
                Err(e) => Some(format!("its checkpoint could not be read: {e}")),
            };
            if let Some(why) = why
                && let Ok(Some(record)) = self.store.session(&id).await
                && record.host == self.id
                && let Err(e) = self
                    .ends
                    .end(
                        &record,
                        &SessionEnd::WorkerLost {
                            why: format!("its worker stopped and {why}"),
                        },
                    )
                    .await
            {
                tracing::warn!(error = %e, session = %id, "cannot record a session as lost");
            }
            self.close(&id).await;
        }
        tracing::info!("sessions closed");
    }

    /// A session's kernel died (`detail`; `oom_killed` at its memory limit): its container
    /// is gone, its record ends here.
    async fn died(&self, id: &str, detail: &str, oom_killed: bool) {
        self.held.lock().expect("poisoned").remove(id);
        self.recount();
        if let Ok(Some(record)) = self.store.session(id).await {
            let end = SessionEnd::KernelDied {
                detail: detail.to_owned(),
                oom_killed,
                memory_mb: record.memory_mb,
            };
            if let Err(e) = self.ends.end(&record, &end).await {
                // The coordinator that carried the call ends it the same way.
                tracing::warn!(error = %e, session = %id, "cannot record a session's end");
            }
        }
    }
}

/// A session call refused: what the session API answers, and what a caller in this process
/// (an agent's run) reads.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub status: StatusCode,
    pub error: HostError,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.error)).into_response()
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.error.message)
    }
}

fn refuse(status: StatusCode, code: HostErrorCode, message: impl Into<String>) -> Refusal {
    Refusal {
        status,
        error: HostError {
            code,
            message: message.into(),
        },
    }
}

fn no_session(id: &str) -> Refusal {
    refuse(
        StatusCode::NOT_FOUND,
        HostErrorCode::NoSession,
        format!("this worker holds no session {id}"),
    )
}

fn authorized(inner: &Inner, headers: &HeaderMap) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|token| constant_time_eq(token.as_bytes(), inner.secret.as_bytes()))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn router(inner: Arc<Inner>) -> Router {
    let limit = usize::try_from(inner.options.max_file_bytes)
        .unwrap_or(usize::MAX)
        .saturating_add(1 << 20);
    Router::new()
        .route(
            &format!("{INTERNAL_PREFIX}/{{id}}"),
            post(open).delete(delete),
        )
        .route(&format!("{INTERNAL_PREFIX}/{{id}}/run"), post(run_cell))
        .route(&format!("{INTERNAL_PREFIX}/{{id}}/restore"), post(restore))
        .route(&format!("{INTERNAL_PREFIX}/{{id}}/files"), get(list_files))
        .route(
            &format!("{INTERNAL_PREFIX}/{{id}}/files/{{*path}}"),
            get(get_file).put(put_file),
        )
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            inner.clone(),
            |State(inner): State<Arc<Inner>>,
             request: axum::extract::Request,
             next: axum::middleware::Next| async move {
                if authorized(&inner, request.headers()) {
                    next.run(request).await
                } else {
                    refuse(
                        StatusCode::UNAUTHORIZED,
                        HostErrorCode::Unauthorized,
                        "the session secret is missing or wrong",
                    )
                    .into_response()
                }
            },
        ))
        .with_state(inner)
}

async fn open(
    State(inner): State<Arc<Inner>>,
    Path(id): Path<String>,
    axum::Json(open): axum::Json<OpenSession>,
) -> Response {
    match inner.open(&id, &open).await {
        Ok(true) => StatusCode::CREATED.into_response(),
        Ok(false) => StatusCode::NO_CONTENT.into_response(),
        Err(refusal) => refusal.into_response(),
    }
}

impl Inner {
    /// Opens session `id` here: `true` when this call opened it, `false` when it was held
    /// already.
    async fn open(&self, id: &str, open: &OpenSession) -> Result<bool, Refusal> {
        let inner = self;
        let id = id.to_owned();
        if inner.lookup(&id).is_some() {
            return Ok(false);
        }
        if inner.count() >= inner.options.max_per_worker {
            return Err(refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                HostErrorCode::Full,
                format!(
                    "this worker holds {} sessions, its limit (worker.sessions.max_per_worker)",
                    inner.options.max_per_worker
                ),
            ));
        }
        // Counted while it starts, so concurrent opens cannot pass the limit together.
        let slot = Arc::new(tokio::sync::Mutex::new(Held::new(open.language)));
        let mut guard = slot.clone().lock_owned().await;
        inner
            .held
            .lock()
            .expect("poisoned")
            .insert(id.clone(), slot);
        inner.recount();
        let packages = match inner.install(open).await {
            Ok(packages) => packages,
            Err(refusal) => {
                inner.held.lock().expect("poisoned").remove(&id);
                inner.recount();
                return Err(refusal);
            }
        };
        let turn = inner.opening.acquire().await.expect("never closed");
        let opened = inner
            .sandbox
            .open_session(open.language, open.memory_mb, &id, packages.as_deref())
            .await;
        drop(turn);
        match opened {
            Ok(kernel) => {
                tracing::info!(session = %id, language = %open.language, container = kernel.container(), tenant = open.tenant.as_deref().unwrap_or("-"), "session opened");
                guard.kernel = Some(kernel);
                // Checkpointed from the start (an empty session restores as one), unless off.
                inner.checkpoint(&id, &mut guard, None).await;
                Ok(true)
            }
            Err(e) => {
                inner.held.lock().expect("poisoned").remove(&id);
                inner.recount();
                tracing::warn!(session = %id, error = %e, "cannot open a session");
                Err(refuse(
                    StatusCode::SERVICE_UNAVAILABLE,
                    HostErrorCode::Sandbox,
                    e.to_string(),
                ))
            }
        }
    }
}

async fn delete(State(inner): State<Arc<Inner>>, Path(id): Path<String>) -> Response {
    inner.close(&id).await;
    StatusCode::NO_CONTENT.into_response()
}

/// What a call asks of a kernel.
enum Op {
    Cell(RunCell),
    Put(String, Bytes),
    Get(String, u64),
    List,
}

/// What a kernel answered.
enum Done {
    Cell(Box<proto::api::sessions::CellResult>),
    Put,
    Get(Vec<u8>),
    List(Vec<proto::api::sessions::SessionFile>),
    /// The cell's call ran before this worker restored the session.
    AlreadyRan,
}

/// Runs `op` on session `id`'s kernel, after the calls before it, and checkpoints the session
/// when `op` may have changed it; a dead kernel ends the session.
async fn with_kernel(
    inner: &Inner,
    id: &str,
    op: Op,
) -> Result<Result<Done, SessionError>, Refusal> {
    let started = std::time::Instant::now();
    let held = inner.lookup(id).ok_or_else(|| no_session(id))?;
    let mut held = held.lock().await;
    let language = held.language;
    let cell = matches!(op, Op::Cell(_));
    let call = match &op {
        Op::Cell(cell) => Some(cell.call.clone()),
        _ => None,
    };
    if let Some(call) = &call
        && !call.is_empty()
        && held.calls.contains(call)
    {
        return Ok(Ok(Done::AlreadyRan));
    }
    let then = inner.checkpoint_ask(&held);
    let Some(kernel) = held.kernel.as_mut() else {
        return Err(no_session(id));
    };
    let mut taken = None;
    let outcome = match op {
        Op::Cell(cell) => kernel
            .run_cell(
                &cell.code,
                Duration::from_millis(cell.timeout_ms),
                cell.max_output_bytes,
                then,
            )
            .await
            .map(|done| {
                taken = done.checkpoint;
                Done::Cell(Box::new(done.result))
            }),
        Op::Put(path, bytes) => kernel.put_file(&path, &bytes).await.map(|()| Done::Put),
        Op::Get(path, max) => kernel.get_file(&path, max).await.map(Done::Get),
        Op::List => kernel.list_files().await.map(Done::List),
    };
    let outcome = match outcome {
        Ok(Done::Cell(mut result)) => {
            held.cells += 1;
            if let Some(call) = call.filter(|c| !c.is_empty()) {
                held.calls.push_back(call);
                if held.calls.len() > RECENT_CALLS {
                    held.calls.pop_front();
                }
            }
            result.checkpoint = Some(inner.checkpoint(id, &mut held, taken).await);
            Ok(Done::Cell(result))
        }
        Ok(Done::Put) => {
            inner.checkpoint(id, &mut held, None).await;
            Ok(Done::Put)
        }
        other => other,
    };
    if cell {
        inner
            .metrics
            .cell_seconds
            .with_label_values(&[language.as_str()])
            .observe(started.elapsed().as_secs_f64());
    }
    if let Err(SessionError::Dead { reason, oom_killed }) = &outcome {
        tracing::info!(session = %id, reason = %reason, "session died");
        if let Some(kernel) = held.kernel.take() {
            kernel.close().await;
        }
        drop(held);
        inner.died(id, reason, *oom_killed).await;
    } else if held.kernel.is_none() {
        // The kernel died while it was checkpointed: the call's own answer stands, the
        // session has ended (the checkpoint's note says why).
        let (reason, oom_killed) = held
            .died_at_checkpoint
            .take()
            .unwrap_or_else(|| ("its container is gone".to_owned(), false));
        drop(held);
        let detail = format!("while its state was checkpointed ({reason})");
        inner.died(id, &detail, oom_killed).await;
    }
    Ok(outcome)
}

impl Inner {
    /// Installs the packages `open` asks for (from the cache when they are there): the folder
    /// the session's container mounts, or the refusal naming the package.
    async fn install(&self, open: &OpenSession) -> Result<Option<std::path::PathBuf>, Refusal> {
        if open.packages.is_empty() {
            return Ok(None);
        }
        let started = std::time::Instant::now();
        match self.packages.install(open.language, &open.packages).await {
            Ok(installed) => {
                tracing::info!(packages = ?open.packages, wheels = installed.wheels.len(), cached = installed.cached, seconds = started.elapsed().as_secs_f64(), "session packages ready");
                self.metrics
                    .package_installs
                    .with_label_values(&[if installed.cached {
                        "cached"
                    } else {
                        "installed"
                    }])
                    .inc();
                Ok(Some(installed.dir))
            }
            Err(e) => {
                tracing::info!(packages = ?open.packages, error = %e, "session packages refused");
                self.metrics
                    .package_installs
                    .with_label_values(&["refused"])
                    .inc();
                Err(refuse(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    HostErrorCode::Package,
                    e.to_string(),
                ))
            }
        }
    }

    /// The checkpoint a cell of `held` asks for with it; `None` when checkpoints are off.
    fn checkpoint_ask(&self, held: &Held) -> Option<sandbox::CheckpointAsk> {
        let max_bytes = self.options.checkpoint_max_bytes;
        (max_bytes > 0).then_some(sandbox::CheckpointAsk {
            max_bytes,
            full: held.full,
        })
    }

    /// Takes session `id`'s checkpoint (`taken`: the one its cell already answered with) and
    /// keeps it in Redis (or, when it cannot be taken, drops the one before): what the
    /// caller's answer says of it.
    async fn checkpoint(
        &self,
        id: &str,
        held: &mut Held,
        mut taken: Option<Result<sandbox::Snapshot, SessionError>>,
    ) -> CheckpointNote {
        let max = self.options.checkpoint_max_bytes;
        let not_saved = |error: String| CheckpointNote {
            saved: false,
            bytes: 0,
            unrestorable: Vec::new(),
            error: Some(error),
        };
        if max == 0 {
            let why = "checkpoints are off (worker.sessions.checkpoint_max_bytes = 0)";
            let _ = self.store.checkpoint_unavailable(id, &self.id, why).await;
            return not_saved(why.to_owned());
        }
        let started = std::time::Instant::now();
        // Twice at most: a save that finds a part it left out missing (an earlier save was
        // lost) is taken again whole.
        for _ in 0..2 {
            let Some(kernel) = held.kernel.as_mut() else {
                return not_saved("the session has ended".into());
            };
            let snapshot = match taken.take() {
                Some(snapshot) => snapshot,
                None => kernel.checkpoint(max, held.full).await,
            };
            let snapshot = match snapshot {
                Ok(snapshot) => snapshot,
                Err(SessionError::Dead { reason, oom_killed }) => {
                    self.metrics
                        .checkpoints
                        .with_label_values(&["failed"])
                        .inc();
                    tracing::info!(session = %id, reason = %reason, "session died while checkpointed");
                    held.died_at_checkpoint = Some((reason.clone(), oom_killed));
                    if let Some(kernel) = held.kernel.take() {
                        kernel.close().await;
                    }
                    return not_saved(format!(
                        "its kernel died while its state was checkpointed ({reason}): the session has ended"
                    ));
                }
                Err(SessionError::Refused(why) | SessionError::NoFile(why)) => {
                    self.metrics
                        .checkpoints
                        .with_label_values(&["too_large"])
                        .inc();
                    held.full = true;
                    let why = format!(
                        "its checkpoint could not be taken: {why}; until one is, the session is lost with its worker"
                    );
                    if let Err(e) = self.store.checkpoint_unavailable(id, &self.id, &why).await {
                        tracing::warn!(session = %id, error = %e, "cannot drop a stale checkpoint");
                    }
                    return not_saved(why);
                }
            };
            let state_bytes = snapshot
                .state
                .as_ref()
                .map_or(held.state_bytes, |s| s.len() as u64);
            let files_bytes = snapshot
                .files
                .as_ref()
                .map_or(held.files_bytes, |f| f.len() as u64);
            let bytes = state_bytes + files_bytes;
            let kept = self
                .store
                .save_checkpoint(
                    id,
                    &self.id,
                    store::NewCheckpoint {
                        cells: held.cells,
                        state: snapshot.state.as_deref(),
                        files: snapshot.files.as_deref(),
                        unrestorable: &snapshot.unrestorable,
                        bytes,
                        calls: held.calls.make_contiguous(),
                    },
                )
                .await;
            match kept {
                Ok(store::Kept::Yes) => {
                    held.full = false;
                    held.state_bytes = state_bytes;
                    held.files_bytes = files_bytes;
                    self.metrics.checkpoints.with_label_values(&["saved"]).inc();
                    self.metrics
                        .checkpoint_seconds
                        .observe(started.elapsed().as_secs_f64());
                    self.metrics.checkpoint_bytes.observe(bytes as f64);
                    return CheckpointNote {
                        saved: true,
                        bytes,
                        unrestorable: snapshot.unrestorable,
                        error: None,
                    };
                }
                Ok(store::Kept::Incomplete) => held.full = true,
                Ok(store::Kept::NotHere) => {
                    return not_saved(
                        "the session is no longer held by this worker (it ended, or was restored elsewhere)"
                            .into(),
                    );
                }
                Err(e) => {
                    held.full = true;
                    self.metrics
                        .checkpoints
                        .with_label_values(&["failed"])
                        .inc();
                    tracing::warn!(session = %id, error = %e, "cannot keep a session's checkpoint");
                    return not_saved(format!(
                        "its checkpoint could not be kept ({e}); until one is, a restore would go back to an earlier one"
                    ));
                }
            }
        }
        self.metrics
            .checkpoints
            .with_label_values(&["failed"])
            .inc();
        not_saved("its checkpoint could not be kept whole".into())
    }
}

fn refused(outcome: SessionError) -> Refusal {
    match outcome {
        SessionError::Refused(message) => {
            refuse(StatusCode::BAD_REQUEST, HostErrorCode::Invalid, message)
        }
        SessionError::NoFile(message) => {
            refuse(StatusCode::NOT_FOUND, HostErrorCode::NoFile, message)
        }
        SessionError::Dead { reason, .. } => {
            refuse(StatusCode::GONE, HostErrorCode::NoSession, reason)
        }
    }
}

async fn run_cell(
    State(inner): State<Arc<Inner>>,
    Path(id): Path<String>,
    axum::Json(cell): axum::Json<RunCell>,
) -> Response {
    let answer = match with_kernel(&inner, &id, Op::Cell(cell)).await {
        Err(refusal) => return refusal.into_response(),
        Ok(Ok(Done::Cell(result))) => CellOutcome::Ran(result),
        Ok(Ok(Done::AlreadyRan)) => CellOutcome::AlreadyRan,
        Ok(Ok(_)) => unreachable!("a cell is answered with its result"),
        Ok(Err(SessionError::Dead { reason, oom_killed })) => {
            CellOutcome::Died { reason, oom_killed }
        }
        Ok(Err(refusal)) => return refused(refusal).into_response(),
    };
    axum::Json(answer).into_response()
}

async fn put_file(
    State(inner): State<Arc<Inner>>,
    Path((id, path)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    if body.len() as u64 > inner.options.max_file_bytes {
        return refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            HostErrorCode::Invalid,
            format!(
                "the file is {} bytes, over worker.sessions.max_file_bytes ({})",
                body.len(),
                inner.options.max_file_bytes
            ),
        )
        .into_response();
    }
    match with_kernel(&inner, &id, Op::Put(path, body)).await {
        Err(refusal) => refusal.into_response(),
        Ok(Ok(_)) => StatusCode::NO_CONTENT.into_response(),
        Ok(Err(e)) => refused(e).into_response(),
    }
}

async fn get_file(
    State(inner): State<Arc<Inner>>,
    Path((id, path)): Path<(String, String)>,
) -> Response {
    let max = inner.options.max_file_bytes;
    match with_kernel(&inner, &id, Op::Get(path, max)).await {
        Err(refusal) => refusal.into_response(),
        Ok(Ok(Done::Get(bytes))) => {
            ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response()
        }
        Ok(Ok(_)) => unreachable!("a file request is answered with its bytes"),
        Ok(Err(e)) => refused(e).into_response(),
    }
}

async fn list_files(State(inner): State<Arc<Inner>>, Path(id): Path<String>) -> Response {
    match with_kernel(&inner, &id, Op::List).await {
        Err(refusal) => refusal.into_response(),
        Ok(Ok(Done::List(files))) => axum::Json(files).into_response(),
        Ok(Ok(_)) => unreachable!("a listing is answered with the files"),
        Ok(Err(e)) => refused(e).into_response(),
    }
}

/// Takes over session `id` whose worker was lost: a container of its own here, restored from
/// the session's last checkpoint, then the record moved to this worker (the first restore
/// wins). Answers what came back.
async fn restore(
    State(inner): State<Arc<Inner>>,
    Path(id): Path<String>,
    axum::Json(request): axum::Json<RestoreSession>,
) -> Response {
    match inner.restore(&id, &request).await {
        Ok(restore) => axum::Json(restore).into_response(),
        Err(refusal) => refusal.into_response(),
    }
}

impl Inner {
    /// Takes over session `id` (see the handler): what came back (`None`: a restore that
    /// had nothing to restore, answered as before).
    async fn restore(
        &self,
        id: &str,
        request: &RestoreSession,
    ) -> Result<Option<Restore>, Refusal> {
        let inner = self;
        let id = id.to_owned();
        let started = std::time::Instant::now();
        let count = |result: &str| inner.metrics.restores.with_label_values(&[result]).inc();
        if let Some(slot) = inner.lookup(&id) {
            // Restored here already (a concurrent call found the loss too): answer that restore.
            let alive = slot.lock().await.kernel.is_some();
            return match inner.store.session(&id).await {
                Ok(Some(record)) if alive && record.host == inner.id => Ok(record.last_restore),
                _ => Err(no_session(&id)),
            };
        }
        if inner.count() >= inner.options.max_per_worker {
            return Err(refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                HostErrorCode::Full,
                format!(
                    "this worker holds {} sessions, its limit (worker.sessions.max_per_worker)",
                    inner.options.max_per_worker
                ),
            ));
        }
        let checkpoint = match inner.store.checkpoint(&id).await {
            Ok(store::Checkpoint::Kept(checkpoint)) => checkpoint,
            Ok(store::Checkpoint::Unavailable(why)) => {
                count("no_checkpoint");
                return Err(refuse(
                    StatusCode::CONFLICT,
                    HostErrorCode::NoCheckpoint,
                    why,
                ));
            }
            Ok(store::Checkpoint::None) => {
                count("no_checkpoint");
                return Err(refuse(
                    StatusCode::CONFLICT,
                    HostErrorCode::NoCheckpoint,
                    "it has no checkpoint",
                ));
            }
            Err(e) => {
                count("failed");
                return Err(refuse(
                    StatusCode::SERVICE_UNAVAILABLE,
                    HostErrorCode::Sandbox,
                    format!("its checkpoint could not be read: {e}"),
                ));
            }
        };
        let slot = Arc::new(tokio::sync::Mutex::new(Held::new(request.open.language)));
        let mut guard = slot.clone().lock_owned().await;
        inner
            .held
            .lock()
            .expect("poisoned")
            .insert(id.clone(), slot);
        inner.recount();
        let forget = |inner: &Inner| {
            inner.held.lock().expect("poisoned").remove(&id);
            inner.recount();
        };
        let packages = match inner.install(&request.open).await {
            Ok(packages) => packages,
            Err(refusal) => {
                forget(inner);
                count("failed");
                return Err(refusal);
            }
        };
        let turn = inner.opening.acquire().await.expect("never closed");
        let opened = inner
            .sandbox
            .open_session(
                request.open.language,
                request.open.memory_mb,
                &id,
                packages.as_deref(),
            )
            .await;
        drop(turn);
        let mut kernel = match opened {
            Ok(kernel) => kernel,
            Err(e) => {
                forget(inner);
                count("failed");
                return Err(refuse(
                    StatusCode::SERVICE_UNAVAILABLE,
                    HostErrorCode::Sandbox,
                    e.to_string(),
                ));
            }
        };
        let skipped = match kernel
            .restore(
                &checkpoint.state,
                checkpoint.files.as_deref(),
                checkpoint.cells,
            )
            .await
        {
            Ok(skipped) => skipped,
            Err(e) => {
                kernel.close().await;
                forget(inner);
                count("failed");
                return Err(refuse(
                    StatusCode::CONFLICT,
                    HostErrorCode::NoCheckpoint,
                    format!("its checkpoint could not be restored: {e}"),
                ));
            }
        };
        let mut unrestorable: Vec<Unrestorable> = checkpoint.unrestorable;
        unrestorable.extend(skipped);
        let restore = Restore {
            lost_worker: request.lost_host.clone(),
            reason: request.reason.clone(),
            after_cell: checkpoint.cells,
            unrestorable,
            restored_ms: u64::try_from(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_millis(),
            )
            .unwrap_or(u64::MAX),
        };
        match inner
            .store
            .rehost_session(&id, &request.lost_host, &inner.id, &inner.url, &restore)
            .await
        {
            Ok(true) => {
                tracing::info!(session = %id, lost = %request.lost_host, after_cell = checkpoint.cells, container = kernel.container(), "session restored");
                guard.kernel = Some(kernel);
                guard.cells = checkpoint.cells;
                guard.calls = checkpoint.calls.into();
                count("restored");
                inner
                    .metrics
                    .restore_seconds
                    .observe(started.elapsed().as_secs_f64());
                // The restored kernel has no checkpoint of its own yet: its first one is whole.
                Ok(Some(restore))
            }
            Ok(false) => {
                kernel.close().await;
                forget(inner);
                count("moved");
                Err(refuse(
                    StatusCode::CONFLICT,
                    HostErrorCode::Moved,
                    "another worker restored the session first, or it ended",
                ))
            }
            Err(e) => {
                kernel.close().await;
                forget(inner);
                count("failed");
                Err(refuse(
                    StatusCode::SERVICE_UNAVAILABLE,
                    HostErrorCode::Sandbox,
                    format!("the restored session could not be recorded: {e}"),
                ))
            }
        }
    }
}
