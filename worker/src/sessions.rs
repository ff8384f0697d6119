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
//! them: deleted, idle, past their lifetime). At shutdown it removes every session's
//! container and records the sessions as lost (nothing restores them yet).

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
use proto::api::sessions::SessionState;
use proto::session::{
    CellOutcome, HostError, HostErrorCode, INTERNAL_PREFIX, OpenSession, RunCell, SessionHost,
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
    /// Largest file a session call uploads or downloads, in bytes.
    pub max_file_bytes: u64,
    /// How often the worker announces itself; it counts as gone after five times this.
    #[serde(with = "humantime_serde")]
    pub announce_interval: Duration,
    /// How often held sessions are checked against their records.
    #[serde(with = "humantime_serde")]
    pub check_interval: Duration,
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            enabled: true,
            listen: ([127, 0, 0, 1], 0).into(),
            advertise_url: String::new(),
            max_per_worker: 256,
            max_file_bytes: 16 << 20,
            announce_interval: Duration::from_secs(2),
            check_interval: Duration::from_secs(10),
        }
    }
}

/// One held session: its kernel while it lives.
struct Held {
    kernel: Option<Box<dyn Session>>,
    language: proto::Language,
}

/// The sessions this worker holds, shared by its API and its loops.
struct Inner {
    options: SessionOptions,
    id: String,
    sandbox: Arc<dyn Sandbox>,
    store: Arc<dyn store::Sessions>,
    /// The bearer token coordinators must present.
    secret: String,
    held: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Held>>>>,
    metrics: SessionMetrics,
}

/// The worker's session metrics.
#[derive(Debug, Clone)]
struct SessionMetrics {
    /// `codegen_sessions_held`: sessions this worker holds now.
    held: prometheus::IntGauge,
    /// `codegen_session_cell_seconds`: a cell's time in this worker, waiting for the calls
    /// before it included, by language.
    cell_seconds: prometheus::HistogramVec,
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
        };
        registry.register(Box::new(metrics.held.clone()))?;
        registry.register(Box::new(metrics.cell_seconds.clone()))?;
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
        let metrics =
            SessionMetrics::register(registry).map_err(|e| crate::Error::Config(e.to_string()))?;
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
                options,
                id,
                sandbox,
                store,
                secret,
                held: Mutex::default(),
                metrics,
            }),
            listener,
            url,
        })
    }

    /// Where coordinators reach this worker's sessions.
    pub fn url(&self) -> &str {
        &self.url
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
            match self.store.session(&id).await {
                Ok(Some(record))
                    if record.state == SessionState::Live && record.host == self.id => {}
                Ok(_) => {
                    tracing::info!(session = %id, "session ended elsewhere; removing its container");
                    self.close(&id).await;
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
            if let Ok(Some(record)) = self.store.session(&id).await
                && let Err(e) = self
                    .store
                    .end_session(
                        &record,
                        SessionState::Lost,
                        "its worker stopped; a session does not outlive its worker yet",
                    )
                    .await
            {
                tracing::warn!(error = %e, session = %id, "cannot record a session as lost");
            }
            self.close(&id).await;
        }
        tracing::info!("sessions closed");
    }

    /// A session's kernel died: its container is gone, its record ends here.
    async fn died(&self, id: &str, reason: &str) {
        self.held.lock().expect("poisoned").remove(id);
        self.recount();
        if let Ok(Some(record)) = self.store.session(id).await {
            let _ = self
                .store
                .end_session(&record, SessionState::Ended, reason)
                .await;
        }
    }
}

fn refuse(status: StatusCode, code: HostErrorCode, message: impl Into<String>) -> Response {
    (
        status,
        axum::Json(HostError {
            code,
            message: message.into(),
        }),
    )
        .into_response()
}

fn no_session(id: &str) -> Response {
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
    if inner.lookup(&id).is_some() {
        return StatusCode::NO_CONTENT.into_response();
    }
    if inner.count() >= inner.options.max_per_worker {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            HostErrorCode::Full,
            format!(
                "this worker holds {} sessions, its limit (worker.sessions.max_per_worker)",
                inner.options.max_per_worker
            ),
        );
    }
    // Counted while it starts, so concurrent opens cannot pass the limit together.
    let slot = Arc::new(tokio::sync::Mutex::new(Held {
        kernel: None,
        language: open.language,
    }));
    let mut guard = slot.clone().lock_owned().await;
    inner
        .held
        .lock()
        .expect("poisoned")
        .insert(id.clone(), slot);
    inner.recount();
    match inner
        .sandbox
        .open_session(open.language, open.memory_mb, &id)
        .await
    {
        Ok(kernel) => {
            tracing::info!(session = %id, language = %open.language, container = kernel.container(), tenant = open.tenant.as_deref().unwrap_or("-"), "session opened");
            guard.kernel = Some(kernel);
            StatusCode::CREATED.into_response()
        }
        Err(e) => {
            inner.held.lock().expect("poisoned").remove(&id);
            inner.recount();
            tracing::warn!(session = %id, error = %e, "cannot open a session");
            refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                HostErrorCode::Sandbox,
                e.to_string(),
            )
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
}

/// Runs `op` on session `id`'s kernel, after the calls before it; a dead kernel ends the
/// session.
async fn with_kernel(
    inner: &Inner,
    id: &str,
    op: Op,
) -> Result<Result<Done, SessionError>, Response> {
    let started = std::time::Instant::now();
    let held = inner.lookup(id).ok_or_else(|| no_session(id))?;
    let mut held = held.lock().await;
    let language = held.language;
    let Some(kernel) = held.kernel.as_mut() else {
        return Err(no_session(id));
    };
    let cell = matches!(op, Op::Cell(_));
    let outcome = match op {
        Op::Cell(cell) => kernel
            .run_cell(
                &cell.code,
                Duration::from_millis(cell.timeout_ms),
                cell.max_output_bytes,
            )
            .await
            .map(|result| Done::Cell(Box::new(result))),
        Op::Put(path, bytes) => kernel.put_file(&path, &bytes).await.map(|()| Done::Put),
        Op::Get(path, max) => kernel.get_file(&path, max).await.map(Done::Get),
        Op::List => kernel.list_files().await.map(Done::List),
    };
    if cell {
        inner
            .metrics
            .cell_seconds
            .with_label_values(&[language.as_str()])
            .observe(started.elapsed().as_secs_f64());
    }
    if let Err(SessionError::Dead { reason, .. }) = &outcome {
        tracing::info!(session = %id, reason = %reason, "session died");
        if let Some(kernel) = held.kernel.take() {
            kernel.close().await;
        }
        drop(held);
        inner.died(id, reason).await;
    }
    Ok(outcome)
}

fn refused(outcome: SessionError) -> Response {
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
        Err(response) => return response,
        Ok(Ok(Done::Cell(result))) => CellOutcome::Ran(result),
        Ok(Ok(_)) => unreachable!("a cell is answered with its result"),
        Ok(Err(SessionError::Dead { reason, oom_killed })) => {
            CellOutcome::Died { reason, oom_killed }
        }
        Ok(Err(refusal)) => return refused(refusal),
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
        );
    }
    match with_kernel(&inner, &id, Op::Put(path, body)).await {
        Err(response) => response,
        Ok(Ok(_)) => StatusCode::NO_CONTENT.into_response(),
        Ok(Err(e)) => refused(e),
    }
}

async fn get_file(
    State(inner): State<Arc<Inner>>,
    Path((id, path)): Path<(String, String)>,
) -> Response {
    let max = inner.options.max_file_bytes;
    match with_kernel(&inner, &id, Op::Get(path, max)).await {
        Err(response) => response,
        Ok(Ok(Done::Get(bytes))) => {
            ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response()
        }
        Ok(Ok(_)) => unreachable!("a file request is answered with its bytes"),
        Ok(Err(e)) => refused(e),
    }
}

async fn list_files(State(inner): State<Arc<Inner>>, Path(id): Path<String>) -> Response {
    match with_kernel(&inner, &id, Op::List).await {
        Err(response) => response,
        Ok(Ok(Done::List(files))) => axum::Json(files).into_response(),
        Ok(Ok(_)) => unreachable!("a listing is answered with the files"),
        Ok(Err(e)) => refused(e),
    }
}
