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

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use proto::Language;
use proto::api::sessions::{
    CellRequest, CellResult, Restore, SESSION_LANGUAGES, SessionCreate, SessionEndedBy,
    SessionFiles, SessionList, SessionState, SessionView,
};
use proto::api::{ErrorBody, ErrorCode};
use proto::session::{
    CellOutcome, HostError, HostErrorCode, INTERNAL_PREFIX, OpenSession, RestoreSession, RunCell,
    SessionEnd, SessionHost, SessionRecord,
};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::auth::Tenant;
use crate::body::read_body;
use crate::error::{ApiError, unavailable};
use crate::{Coordinator, now_ms};

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

/// The client of the workers' session APIs: no egress guard (workers are the cluster's own),
/// connections kept alive (a cell is a round trip, not a connection).
pub(crate) fn host_client() -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .pool_idle_timeout(Duration::from_secs(90))
        .tcp_nodelay(true)
        .build()
        .expect("a plain HTTP client builds")
}

/// What a call to a session's worker gave.
enum HostAnswer {
    Ok(reqwest::Response),
    /// The worker answered with an error of its own.
    Refused(StatusCode, HostError),
    /// The worker could not be reached, or the connection broke: it is gone.
    Unreachable {
        error: String,
    },
    /// The worker answered something that is not its answer (or not in time).
    Garbled(String),
}

impl Coordinator {
    fn sessions(&self) -> Result<&std::sync::Arc<dyn store::Sessions>, ApiError> {
        self.stores.sessions.as_ref().ok_or_else(|| {
            ApiError::new(
                ErrorCode::NotKept,
                "this coordinator runs without Redis and keeps no sessions",
            )
        })
    }

    async fn call_host(
        &self,
        url: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<reqwest::Body>,
        json: bool,
        timeout: Duration,
    ) -> Result<HostAnswer, ApiError> {
        let secret = self.sessions()?.secret().await.map_err(unavailable)?;
        let mut request = self
            .session_client
            .request(method, format!("{url}{INTERNAL_PREFIX}{path}"))
            .bearer_auth(secret)
            .timeout(timeout);
        if let Some(body) = body {
            request = request
                .header(
                    header::CONTENT_TYPE,
                    if json {
                        "application/json"
                    } else {
                        "application/octet-stream"
                    },
                )
                .body(body);
        }
        Ok(match request.send().await {
            Err(e) if e.is_timeout() => {
                HostAnswer::Garbled(format!("the session's worker did not answer in time: {e}"))
            }
            Err(e) => HostAnswer::Unreachable {
                error: e.to_string(),
            },
            Ok(response) if response.status().is_success() => HostAnswer::Ok(response),
            Ok(response) => {
                let status = StatusCode::from_u16(response.status().as_u16())
                    .unwrap_or(StatusCode::BAD_GATEWAY);
                match response.json::<HostError>().await {
                    Ok(error) => HostAnswer::Refused(status, error),
                    Err(e) => HostAnswer::Garbled(format!(
                        "the session's worker answered {status} without its error: {e}"
                    )),
                }
            }
        })
    }

    /// Session `id` of `tenant`, or 404 (another tenant's is as unknown as none).
    async fn session_of(&self, tenant: &Tenant, id: &str) -> Result<SessionRecord, ApiError> {
        let id = canonical_id(id)?;
        let id = id.as_str();
        match self.sessions()?.session(id).await.map_err(unavailable)? {
            Some(record) if tenant.sees(&record.tenant) => Ok(record),
            _ => Err(crate::error::not_found(format!("no session {id}"))),
        }
    }

    /// Session `id`, live: else the 409 that says how it ended.
    async fn live_session(&self, tenant: &Tenant, id: &str) -> Result<SessionRecord, ApiError> {
        let record = self.session_of(tenant, id).await?;
        match record.state {
            SessionState::Live => Ok(record),
            state => Err(ended(state, record.ended_reason.as_deref())),
        }
    }

    /// Ends `record` (if still live) as `end` says (`flow::SessionEnds`, as a worker does),
    /// and tells its worker to drop it.
    async fn end(&self, record: &SessionRecord, end: &SessionEnd) {
        let Some(ends) = &self.session_ends else {
            return;
        };
        if let Err(e) = ends.end(record, end).await {
            tracing::warn!(session = %record.id, error = %e, "cannot end a session");
        }
        let holds_it = match end.by() {
            // Its worker is gone, or never started it (and may not answer: no wait for it).
            SessionEndedBy::WorkerLost | SessionEndedBy::NotStarted => false,
            SessionEndedBy::Deleted
            | SessionEndedBy::Idle
            | SessionEndedBy::Lifetime
            | SessionEndedBy::MemoryLimit
            | SessionEndedBy::KernelDied => true,
        };
        if holds_it {
            // Best effort: a worker that missed it finds the record ended at its next check.
            let _ = self
                .call_host(
                    &record.host_url,
                    reqwest::Method::DELETE,
                    &format!("/{}", record.id),
                    None,
                    false,
                    Duration::from_secs(10),
                )
                .await;
        }
    }

    /// The answer for a call its worker refused (a loss of the worker is [`Self::recover`]ed
    /// before it gets here).
    fn host_failed(&self, answer: HostAnswer) -> ApiError {
        match answer {
            HostAnswer::Refused(
                _,
                HostError {
                    code: HostErrorCode::NoFile,
                    message,
                },
            ) => ApiError::new(ErrorCode::NotFound, message),
            HostAnswer::Refused(status, error) if status.is_client_error() => {
                ApiError::new(ErrorCode::InvalidField, error.message)
            }
            HostAnswer::Refused(_, error) => ApiError::new(
                ErrorCode::NoSessionHost,
                format!("the session's worker refused the call: {}", error.message),
            ),
            HostAnswer::Unreachable { error, .. } => ApiError::new(
                ErrorCode::NoSessionHost,
                format!("the session's worker could not be reached: {error}"),
            ),
            HostAnswer::Garbled(e) => ApiError::new(ErrorCode::NoSessionHost, e),
            HostAnswer::Ok(_) => ApiError::new(ErrorCode::Internal, "not a failure"),
        }
    }

    /// Carries `call` to session `record`'s worker. A worker found lost (unreachable, or no
    /// longer holding the session) has the session restored on another one, where the call
    /// goes on, unless the loss interrupted it (`session_restored`: it is never run twice).
    async fn on_host(
        &self,
        mut record: SessionRecord,
        call: &HostCall,
    ) -> Result<Reached, ApiError> {
        let mut restored = None;
        // A restored session's new worker may be lost too: a few times, then 503.
        for _ in 0..3 {
            let answer = self
                .call_host(
                    &record.host_url,
                    call.method.clone(),
                    &format!("/{}{}", record.id, call.path),
                    call.body.clone().map(reqwest::Body::from),
                    call.json,
                    call.timeout,
                )
                .await?;
            let why = match answer {
                HostAnswer::Ok(response) => {
                    return Ok(Reached {
                        record,
                        response,
                        restored,
                    });
                }
                HostAnswer::Unreachable { error, .. } => {
                    format!("its worker {} was lost ({error})", record.host)
                }
                HostAnswer::Refused(
                    _,
                    HostError {
                        code: HostErrorCode::NoSession,
                        message,
                    },
                ) => format!("its worker {} no longer holds it ({message})", record.host),
                // It may have been acted on: a 503 would invite sending it again.
                HostAnswer::Garbled(e) if !call.repeatable => {
                    return Err(ApiError::new(
                        ErrorCode::Internal,
                        format!("the call's outcome is unknown (it may have run): {e}"),
                    ));
                }
                answer => return Err(self.host_failed(answer)),
            };
            let (now, restore) = self.recover(&record, &why).await?;
            // A call the loss interrupted goes on like the others: whatever it did on the lost
            // worker went with it (the session came back from before it), and a cell that ran
            // there to its end is in the checkpoint with its call's id, so the new worker
            // answers `AlreadyRan` instead of running it twice.
            record = now;
            restored = Some(restore);
        }
        Err(ApiError::new(
            ErrorCode::NoSessionHost,
            "the session's workers were lost one after another; send the call again",
        ))
    }

    /// Session `record`'s worker is lost (`why`): restores the session on another live worker
    /// from its last checkpoint (the first restore wins; a session without one ends `lost`).
    /// The session's record after the restore, and the restore.
    async fn recover(
        &self,
        record: &SessionRecord,
        why: &str,
    ) -> Result<(SessionRecord, Restore), ApiError> {
        let sessions = self.sessions()?;
        if let Err(none) = sessions
            .checkpoint_kept(&record.id)
            .await
            .map_err(unavailable)?
        {
            let end = SessionEnd::WorkerLost {
                why: format!("{why} and it could not be restored: {none}"),
            };
            self.end(record, &end).await;
            return Err(ended(end.state(), Some(&end.reason())));
        }
        let mut hosts: Vec<SessionHost> = sessions
            .hosts()
            .await
            .map_err(unavailable)?
            .into_iter()
            .filter(|h| h.sessions < h.capacity && h.id != record.host)
            .collect();
        hosts.sort_by_key(|h| (std::cmp::Reverse(h.capacity - h.sessions), h.id.clone()));
        let request = RestoreSession {
            open: OpenSession {
                language: record.language,
                memory_mb: record.memory_mb,
                tenant: record.tenant.clone(),
                packages: record.packages.clone(),
            },
            lost_host: record.host.clone(),
            reason: why.to_owned(),
        };
        let body = serde_json::to_vec(&request).expect("serializes");
        let mut last_error = "no other worker hosts sessions".to_owned();
        for host in hosts {
            let answer = self
                .call_host(
                    &host.url,
                    reqwest::Method::POST,
                    &format!("/{}/restore", record.id),
                    Some(body.clone().into()),
                    true,
                    Duration::from_secs(300),
                )
                .await?;
            match answer {
                HostAnswer::Ok(response) => {
                    let restore: Option<Restore> = response.json().await.map_err(|e| {
                        ApiError::new(ErrorCode::Internal, format!("the worker's answer: {e}"))
                    })?;
                    let now = self.live_session_record(&record.id).await?;
                    let Some(restore) = restore.or_else(|| now.last_restore.clone()) else {
                        return Err(ApiError::new(
                            ErrorCode::Internal,
                            "the worker restored the session without saying how",
                        ));
                    };
                    tracing::info!(session = %record.id, lost = %record.host, host = %now.host, after_cell = restore.after_cell, "session restored");
                    return Ok((now, restore));
                }
                HostAnswer::Refused(
                    _,
                    HostError {
                        code: HostErrorCode::NoCheckpoint,
                        message,
                    },
                ) => {
                    let end = SessionEnd::WorkerLost {
                        why: format!("{why} and it could not be restored: {message}"),
                    };
                    self.end(record, &end).await;
                    return Err(ended(end.state(), Some(&end.reason())));
                }
                HostAnswer::Refused(
                    _,
                    HostError {
                        code: HostErrorCode::Moved,
                        ..
                    },
                ) => {
                    // Another call found the loss first and restored it (or it ended).
                    let now = self.live_session_record(&record.id).await?;
                    if now.host == record.host {
                        last_error = format!("worker {}: refused to take it over", host.id);
                        continue;
                    }
                    let restore = now.last_restore.clone().ok_or_else(|| {
                        ApiError::new(
                            ErrorCode::Internal,
                            "a restored session without its restore",
                        )
                    })?;
                    return Ok((now, restore));
                }
                HostAnswer::Refused(_, error) => {
                    last_error = format!("worker {}: {}", host.id, error.message);
                }
                HostAnswer::Unreachable { error, .. } | HostAnswer::Garbled(error) => {
                    last_error = format!("worker {}: {error}", host.id);
                }
            }
        }
        Err(ApiError::new(
            ErrorCode::NoSessionHost,
            format!("{why}; no worker could restore the session yet ({last_error})"),
        ))
    }

    /// Session `id`'s record, live: else the 409 that says how it ended.
    async fn live_session_record(&self, id: &str) -> Result<SessionRecord, ApiError> {
        match self.sessions()?.session(id).await.map_err(unavailable)? {
            Some(record) if record.state == SessionState::Live => Ok(record),
            Some(record) => Err(ended(record.state, record.ended_reason.as_deref())),
            None => Err(crate::error::not_found(format!("no session {id}"))),
        }
    }
}

/// A call for a session's worker (its path after `/internal/sessions/{id}`).
struct HostCall {
    method: reqwest::Method,
    path: String,
    body: Option<Bytes>,
    json: bool,
    timeout: Duration,
    /// Sending it twice does what sending it once does (a read, an upload of the same bytes).
    repeatable: bool,
}

/// A call that reached the session's worker: its answer, and the restore it took first.
struct Reached {
    record: SessionRecord,
    response: reqwest::Response,
    restored: Option<Restore>,
}

/// ` (not restored: a (why), b (why))`, or nothing.
fn unrestorable_note(restore: &Restore) -> String {
    if restore.unrestorable.is_empty() {
        return String::new();
    }
    format!(
        " (not restored: {})",
        restore
            .unrestorable
            .iter()
            .map(|u| format!("{} ({})", u.name, u.reason))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn ended(state: SessionState, reason: Option<&str>) -> ApiError {
    let code = if state == SessionState::Lost {
        ErrorCode::SessionLost
    } else {
        ErrorCode::SessionEnded
    };
    ApiError::new(
        code,
        format!(
            "the session is {}: {}",
            state.as_str(),
            reason.unwrap_or("no reason recorded")
        ),
    )
}

/// Session ids are UUIDs, kept in their lowercase hyphenated form.
fn canonical_id(id: &str) -> Result<String, ApiError> {
    uuid::Uuid::parse_str(id)
        .map(|id| id.to_string())
        .map_err(|e| crate::error::invalid_id("session", e))
}

/// Requirements one session may ask for (`packages`), at most.
const MAX_PACKAGES: usize = 50;

fn check(limits: &SessionLimits, create: &SessionCreate) -> Result<(u64, u64), ApiError> {
    if !SESSION_LANGUAGES.contains(&create.language) {
        return Err(ApiError::new(
            ErrorCode::UnknownLanguage,
            format!(
                "sessions are offered in {}, not {}",
                SESSION_LANGUAGES
                    .iter()
                    .map(|l| l.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                create.language
            ),
        )
        .about("language"));
    }
    let memory_mb = create.memory_mb.unwrap_or(limits.default_memory_mb);
    if !(16..=limits.max_memory_mb).contains(&memory_mb) {
        return Err(ApiError::invalid(
            "memory_mb",
            format!(
                "must be between 16 and {} (coordinator.sessions.max_memory_mb)",
                limits.max_memory_mb
            ),
        ));
    }
    let idle = create
        .idle_timeout_s
        .unwrap_or(limits.default_idle_timeout_s);
    if !(1..=limits.max_idle_timeout_s).contains(&idle) {
        return Err(ApiError::invalid(
            "idle_timeout_s",
            format!(
                "must be between 1 and {} (coordinator.sessions.max_idle_timeout_s)",
                limits.max_idle_timeout_s
            ),
        ));
    }
    if !create.packages.is_empty()
        && !matches!(create.language, Language::Python | Language::PythonSci)
    {
        return Err(ApiError::invalid(
            "packages",
            format!(
                "packages are not offered in {}: it has no offline package source (python and python-sci take pip requirements)",
                create.language
            ),
        ));
    }
    if create.packages.len() > MAX_PACKAGES {
        return Err(ApiError::invalid(
            "packages",
            format!("at most {MAX_PACKAGES} requirements"),
        ));
    }
    Ok((memory_mb, idle))
}

/// Opens a session: a container of its own on a worker, its interpreter kept between cells.
#[utoipa::path(
    post,
    path = "/v1/sessions",
    operation_id = "open_session",
    tag = "sessions",
    request_body = SessionCreate,
    responses(
        (status = 201, description = "The session, live.", body = SessionView),
        (status = 400, description = "The body is not a session request; `param` names the field.", body = ErrorBody),
        (status = 401, description = "API keys are configured and none (or an unknown one) was given.", body = ErrorBody),
        (status = 422, description = "A field out of range (`param`), or a language sessions are not offered in.", body = ErrorBody),
        (status = 429, description = "The tenant's live sessions are at its quota (`limit`: `coordinator.tenants.<name>.sessions`), or its request rate.", body = ErrorBody),
        (status = 503, description = "No worker can take a session now (`no_session_host`), or Redis is unavailable; `Retry-After` says when to retry.", body = ErrorBody),
    )
)]
pub(crate) async fn open(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let create: SessionCreate = read_body(body)?;
    let record = c.open_session(&tenant, &create).await?;
    Ok((StatusCode::CREATED, axum::Json(record.view())).into_response())
}

impl Coordinator {
    /// Opens a session for `tenant`: `create` checked against `coordinator.sessions`, the
    /// record kept (within the tenant's quota), its container started on the emptiest worker
    /// that takes it. `POST /v1/sessions` and SandboxFusion's `/run_jupyter`.
    pub(crate) async fn open_session(
        &self,
        tenant: &Tenant,
        create: &SessionCreate,
    ) -> Result<SessionRecord, ApiError> {
        let limits = &self.options.sessions;
        let (memory_mb, idle_timeout_s) = check(limits, create)?;
        let sessions = self.sessions()?;
        let mut hosts: Vec<SessionHost> = sessions
            .hosts()
            .await
            .map_err(unavailable)?
            .into_iter()
            .filter(|h| h.sessions < h.capacity)
            .collect();
        // The emptiest first: sessions spread over the workers.
        hosts.sort_by_key(|h| (std::cmp::Reverse(h.capacity - h.sessions), h.id.clone()));
        if hosts.is_empty() {
            return Err(ApiError::new(
                ErrorCode::NoSessionHost,
                "no live worker can take another session (none announced, or all at worker.sessions.max_per_worker)",
            ));
        }
        let quota = self.options.tenant(tenant.0.as_deref()).sessions;
        let now = now_ms();
        let mut last_error = String::new();
        for host in hosts {
            let record = SessionRecord {
                id: uuid::Uuid::now_v7().to_string(),
                tenant: tenant.0.clone(),
                language: create.language,
                memory_mb,
                idle_timeout_s,
                packages: create.packages.clone(),
                created_ms: now,
                expires_ms: now.saturating_add(
                    u64::try_from(limits.max_lifetime.as_millis()).unwrap_or(u64::MAX),
                ),
                last_used_ms: now,
                busy_until_ms: 0,
                cells: 0,
                state: SessionState::Live,
                ended_reason: None,
                ended_by: None,
                host: host.id.clone(),
                host_url: host.url.clone(),
                restores: 0,
                last_restore: None,
            };
            match sessions
                .create_session(&record, quota)
                .await
                .map_err(unavailable)?
            {
                store::Created::Yes => {}
                store::Created::OverQuota { live } => {
                    return Err(ApiError::new(
                        ErrorCode::QuotaExceeded,
                        format!("the tenant has {live} live sessions, its quota: end one first"),
                    )
                    .over(
                        self.options
                            .setting(tenant.0.as_deref(), "sessions", |o| o.sessions.is_some()),
                    )
                    .with_retry_after(limits.check_interval.as_secs().max(1)));
                }
            }
            let open = OpenSession {
                language: create.language,
                memory_mb,
                tenant: tenant.0.clone(),
                packages: create.packages.clone(),
            };
            let answer = self
                .call_host(
                    &host.url,
                    reqwest::Method::POST,
                    &format!("/{}", record.id),
                    Some(serde_json::to_vec(&open).expect("serializes").into()),
                    true,
                    // Packages may be downloaded first.
                    Duration::from_secs(if create.packages.is_empty() { 120 } else { 900 }),
                )
                .await?;
            match answer {
                HostAnswer::Ok(_) => {
                    tracing::info!(session = %record.id, host = %host.id, language = %create.language, "session opened");
                    self.metrics
                        .sessions_opened
                        .with_label_values(&[create.language.as_str()])
                        .inc();
                    return Ok(record);
                }
                HostAnswer::Refused(_, error) => {
                    last_error = format!("worker {}: {}", host.id, error.message);
                    let why = last_error.clone();
                    self.end(&record, &SessionEnd::NotStarted { why }).await;
                    if error.code == HostErrorCode::Package {
                        return Err(ApiError::invalid("packages", error.message));
                    }
                    if error.code == HostErrorCode::Sandbox {
                        // Docker or the image: another worker of the same build fails alike.
                        break;
                    }
                }
                HostAnswer::Unreachable { error: e, .. } | HostAnswer::Garbled(e) => {
                    last_error = format!("worker {}: {e}", host.id);
                    let why = last_error.clone();
                    self.end(&record, &SessionEnd::NotStarted { why }).await;
                }
            }
        }
        Err(ApiError::new(
            ErrorCode::NoSessionHost,
            format!("no worker could start the session: {last_error}"),
        ))
    }
}

/// The tenant's sessions, newest first (at most 100), live and ended.
#[utoipa::path(
    get,
    path = "/v1/sessions",
    operation_id = "list_sessions",
    tag = "sessions",
    responses(
        (status = 200, description = "The sessions.", body = SessionList),
        (status = 401, description = "API keys are configured and none (or an unknown one) was given.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable.", body = ErrorBody),
    )
)]
pub(crate) async fn list(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
) -> Result<Response, ApiError> {
    let sessions = c
        .sessions()?
        .list_sessions(tenant.0.as_deref(), 100)
        .await
        .map_err(unavailable)?;
    Ok(axum::Json(SessionList {
        sessions: sessions.iter().map(SessionRecord::view).collect(),
    })
    .into_response())
}

/// A session.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}",
    operation_id = "get_session",
    tag = "sessions",
    params(("id" = String, Path, description = "The session's id.")),
    responses(
        (status = 200, description = "The session.", body = SessionView),
        (status = 400, description = "Not a session id.", body = ErrorBody),
        (status = 401, description = "API keys are configured and none (or an unknown one) was given.", body = ErrorBody),
        (status = 404, description = "No such session for this tenant.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable.", body = ErrorBody),
    )
)]
pub(crate) async fn fetch(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let record = c.session_of(&tenant, &id).await?;
    Ok(axum::Json(record.view()).into_response())
}

/// Ends a session: its container and everything in it are removed.
#[utoipa::path(
    delete,
    path = "/v1/sessions/{id}",
    operation_id = "delete_session",
    tag = "sessions",
    params(("id" = String, Path, description = "The session's id.")),
    responses(
        (status = 200, description = "The session, ended (or as it had ended before).", body = SessionView),
        (status = 400, description = "Not a session id.", body = ErrorBody),
        (status = 401, description = "API keys are configured and none (or an unknown one) was given.", body = ErrorBody),
        (status = 404, description = "No such session for this tenant.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable.", body = ErrorBody),
    )
)]
pub(crate) async fn delete(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let record = c.end_session(&tenant, &id, "deleted").await?;
    Ok(axum::Json(record.view()).into_response())
}

impl Coordinator {
    /// Deletes session `id` of `tenant` (when still live); `how` is its reason (`deleted`,
    /// ...). Its record as it then stands. `DELETE /v1/sessions/{id}` and SandboxFusion's
    /// `/run_jupyter`.
    pub(crate) async fn end_session(
        &self,
        tenant: &Tenant,
        id: &str,
        how: &str,
    ) -> Result<SessionRecord, ApiError> {
        let record = self.session_of(tenant, id).await?;
        if record.state == SessionState::Live {
            let end = SessionEnd::Deleted {
                how: how.to_owned(),
            };
            self.end(&record, &end).await;
        }
        self.session_of(tenant, id).await
    }
}

/// Runs a cell in the session, after the calls before it: its output, the value of its final
/// expression (Python, JavaScript), its rich outputs and the files it changed. Names,
/// imports, open files and the working directory stay for the next cell.
#[utoipa::path(
    post,
    path = "/v1/sessions/{id}/run",
    operation_id = "run_cell",
    tag = "sessions",
    params(("id" = String, Path, description = "The session's id.")),
    request_body = CellRequest,
    responses(
        (status = 200, description = "The cell's result (`status` ok, error or timeout: the session lives on).", body = CellResult),
        (status = 400, description = "The body is not a cell; `param` names the field.", body = ErrorBody),
        (status = 401, description = "API keys are configured and none (or an unknown one) was given.", body = ErrorBody),
        (status = 404, description = "No such session for this tenant.", body = ErrorBody),
        (status = 409, description = "The session has ended (`session_ended`: this cell killed its kernel, or it ended before) or was lost with its worker (`session_lost`); the message says why.", body = ErrorBody),
        (status = 422, description = "`timeout_ms` out of range, or code too large.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable, or the session's worker refused the call.", body = ErrorBody),
    )
)]
pub(crate) async fn run(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let cell: CellRequest = read_body(body)?;
    match c.run_cell(&tenant, &id, cell).await? {
        CellRun::Ran(result) => Ok(axum::Json(*result).into_response()),
        CellRun::Died { reason, .. } => Err(ended(SessionState::Ended, Some(&reason))),
    }
}

/// What a cell gave: its result, or the death of its kernel (the session has ended).
pub(crate) enum CellRun {
    Ran(Box<CellResult>),
    Died {
        /// Why, as the session's `ended_reason` says.
        reason: String,
        /// At the session's memory limit.
        oom_killed: bool,
    },
}

impl Coordinator {
    /// Runs `cell` in session `id` of `tenant`, after the calls before it (its timeout
    /// checked against `coordinator.sessions`). A kernel that died ends the session here.
    /// `POST /v1/sessions/{id}/run` and SandboxFusion's `/run_jupyter`.
    pub(crate) async fn run_cell(
        &self,
        tenant: &Tenant,
        id: &str,
        cell: CellRequest,
    ) -> Result<CellRun, ApiError> {
        let limits = &self.options.sessions;
        let timeout_ms = cell.timeout_ms.unwrap_or(limits.default_cell_timeout_ms);
        if !(1..=limits.max_cell_timeout_ms).contains(&timeout_ms) {
            return Err(ApiError::invalid(
                "timeout_ms",
                format!(
                    "must be between 1 and {} (coordinator.sessions.max_cell_timeout_ms)",
                    limits.max_cell_timeout_ms
                ),
            ));
        }
        if cell.code.len() > self.options.max_code_bytes {
            return Err(ApiError::invalid(
                "code",
                format!(
                    "is {} bytes, over coordinator.max_code_bytes ({})",
                    cell.code.len(),
                    self.options.max_code_bytes
                ),
            ));
        }
        let record = self.live_session(tenant, id).await?;
        let request = RunCell {
            code: cell.code,
            timeout_ms,
            max_output_bytes: limits.max_output_bytes,
            call: uuid::Uuid::new_v4().to_string(),
        };
        // The session cannot idle out under this cell (at least until its deadline).
        let now = now_ms();
        let _ = self
            .sessions()?
            .touch_session(&record.id, now, false, now.saturating_add(timeout_ms))
            .await;
        // Calls before this one on the same session may hold it for their own deadlines.
        let call = HostCall {
            method: reqwest::Method::POST,
            path: "/run".into(),
            body: Some(serde_json::to_vec(&request).expect("serializes").into()),
            json: true,
            timeout: Duration::from_millis(limits.max_cell_timeout_ms) * 2
                + Duration::from_secs(60),
            repeatable: false,
        };
        let Reached {
            record,
            response,
            restored,
        } = self.on_host(record, &call).await?;
        let outcome: CellOutcome = response
            .json()
            .await
            .map_err(|e| ApiError::new(ErrorCode::Internal, format!("the worker's answer: {e}")))?;
        let outcome = match outcome {
            CellOutcome::Ran(mut result) => {
                result.restored = restored.clone();
                CellOutcome::Ran(result)
            }
            other => other,
        };
        match outcome {
            CellOutcome::Ran(result) => {
                let _ = self
                    .sessions()?
                    .touch_session(&record.id, now_ms(), true, 0)
                    .await;
                self.metrics
                    .session_cells
                    .with_label_values(&[record.language.as_str(), cell_status(&result)])
                    .inc();
                Ok(CellRun::Ran(result))
            }
            CellOutcome::Died { reason, oom_killed } => {
                // Its worker has ended it the same way; this ends it if that failed.
                let end = SessionEnd::KernelDied {
                    detail: reason,
                    oom_killed,
                    memory_mb: record.memory_mb,
                };
                self.end(&record, &end).await;
                let reason = end.reason();
                self.metrics
                    .session_cells
                    .with_label_values(&[record.language.as_str(), "died"])
                    .inc();
                Ok(CellRun::Died { reason, oom_killed })
            }
            CellOutcome::AlreadyRan => {
                let _ = self
                    .sessions()?
                    .touch_session(&record.id, now_ms(), true, 0)
                    .await;
                let restore = restored.as_ref().or(record.last_restore.as_ref());
                Err(ApiError::new(
                    ErrorCode::SessionRestored,
                    format!(
                        "the session's worker {} was lost after this cell ran and before its answer came back; the session was restored on worker {} with this cell's effects{}; its output is lost: do not send it again",
                        restore.map_or("-", |r| r.lost_worker.as_str()),
                        record.host,
                        restore.map(unrestorable_note).unwrap_or_default(),
                    ),
                ))
            }
        }
    }
}

fn cell_status(result: &CellResult) -> &'static str {
    match result.status {
        proto::api::sessions::CellStatus::Ok => "ok",
        proto::api::sessions::CellStatus::Error => "error",
        proto::api::sessions::CellStatus::Timeout => "timeout",
    }
}

/// The files of the session's working directory.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/files",
    operation_id = "list_session_files",
    tag = "sessions",
    params(("id" = String, Path, description = "The session's id.")),
    responses(
        (status = 400, description = "Not a session id.", body = ErrorBody),
        (status = 200, description = "Regular files below the working directory, by path.", body = SessionFiles),
        (status = 401, description = "API keys are configured and none (or an unknown one) was given.", body = ErrorBody),
        (status = 404, description = "No such session for this tenant.", body = ErrorBody),
        (status = 409, description = "The session has ended or was lost.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable, or the session's worker refused the call.", body = ErrorBody),
    )
)]
pub(crate) async fn files(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let record = c.live_session(&tenant, &id).await?;
    let call = HostCall {
        method: reqwest::Method::GET,
        path: "/files".into(),
        body: None,
        json: false,
        timeout: Duration::from_secs(120),
        repeatable: true,
    };
    let Reached {
        record, response, ..
    } = c.on_host(record, &call).await?;
    let files = response
        .json()
        .await
        .map_err(|e| ApiError::new(ErrorCode::Internal, format!("the worker's answer: {e}")))?;
    let _ = c
        .sessions()?
        .touch_session(&record.id, now_ms(), false, 0)
        .await;
    Ok(axum::Json(SessionFiles { files }).into_response())
}

#[derive(Debug, Deserialize)]
pub(crate) struct FilePath {
    id: String,
    path: String,
}

/// Downloads a file of the session's working directory, its bytes as they are.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/files/{path}",
    operation_id = "get_session_file",
    tag = "sessions",
    params(
        ("id" = String, Path, description = "The session's id."),
        ("path" = String, Path, description = "The file, relative to the working directory."),
    ),
    responses(
        (status = 400, description = "Not a session id.", body = ErrorBody),
        (status = 200, description = "The file's bytes.", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 401, description = "API keys are configured and none (or an unknown one) was given.", body = ErrorBody),
        (status = 404, description = "No such session for this tenant, or no such file (`param`: `path`).", body = ErrorBody),
        (status = 409, description = "The session has ended or was lost.", body = ErrorBody),
        (status = 422, description = "No such file, a folder, a path leaving the working directory, or a file over `worker.sessions.max_file_bytes`.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable, or the session's worker refused the call.", body = ErrorBody),
    )
)]
pub(crate) async fn download(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    Path(FilePath { id, path }): Path<FilePath>,
) -> Result<Response, ApiError> {
    let bytes = c.get_session_file(&tenant, &id, &path).await?;
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response())
}

impl Coordinator {
    /// The bytes of file `path` (relative to the working directory) of session `id` of
    /// `tenant`. `GET /v1/sessions/{id}/files/{path}` and SandboxFusion's `/run_jupyter`.
    pub(crate) async fn get_session_file(
        &self,
        tenant: &Tenant,
        id: &str,
        path: &str,
    ) -> Result<Bytes, ApiError> {
        check_path(path)?;
        let record = self.live_session(tenant, id).await?;
        // A name longer than a file system allows names no file: not found, as any other
        // missing file (asking the kernel would only get its "name too long").
        if path.split('/').any(|name| name.len() > MAX_NAME_BYTES) {
            return Err(crate::error::not_found(format!(
                "no file {path} in the session (a name of it is over {MAX_NAME_BYTES} bytes)"
            ))
            .about("path"));
        }
        let call = HostCall {
            method: reqwest::Method::GET,
            path: format!("/files/{}", encode_path(path)),
            body: None,
            json: false,
            timeout: Duration::from_secs(120),
            repeatable: true,
        };
        let Reached {
            record, response, ..
        } = self
            .on_host(record, &call)
            .await
            .map_err(|e| e.about("path"))?;
        let bytes = response
            .bytes()
            .await
            .map_err(|e| ApiError::new(ErrorCode::Internal, format!("the worker's answer: {e}")))?;
        let _ = self
            .sessions()?
            .touch_session(&record.id, now_ms(), false, 0)
            .await;
        Ok(bytes)
    }

    /// Writes `bytes` to file `path` (relative to the working directory, folders made as
    /// needed) of session `id` of `tenant`. `PUT /v1/sessions/{id}/files/{path}` and
    /// SandboxFusion's `/run_jupyter`.
    pub(crate) async fn put_session_file(
        &self,
        tenant: &Tenant,
        id: &str,
        path: &str,
        bytes: Bytes,
    ) -> Result<(), ApiError> {
        check_path(path)?;
        let record = self.live_session(tenant, id).await?;
        let call = HostCall {
            method: reqwest::Method::PUT,
            path: format!("/files/{}", encode_path(path)),
            body: Some(bytes),
            json: false,
            timeout: Duration::from_secs(120),
            repeatable: true,
        };
        let Reached { record, .. } = self
            .on_host(record, &call)
            .await
            .map_err(|e| e.about("path"))?;
        let _ = self
            .sessions()?
            .touch_session(&record.id, now_ms(), false, 0)
            .await;
        Ok(())
    }
}

/// Uploads a file into the session's working directory (folders made as needed), written as
/// the session's program user.
#[utoipa::path(
    put,
    path = "/v1/sessions/{id}/files/{path}",
    operation_id = "put_session_file",
    tag = "sessions",
    params(
        ("id" = String, Path, description = "The session's id."),
        ("path" = String, Path, description = "The file, relative to the working directory."),
    ),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses(
        (status = 400, description = "Not a session id.", body = ErrorBody),
        (status = 204, description = "Written."),
        (status = 401, description = "API keys are configured and none (or an unknown one) was given.", body = ErrorBody),
        (status = 404, description = "No such session for this tenant.", body = ErrorBody),
        (status = 409, description = "The session has ended or was lost.", body = ErrorBody),
        (status = 413, description = "Over `coordinator.max_body_bytes`.", body = ErrorBody),
        (status = 422, description = "A path leaving the working directory, or a file over `worker.sessions.max_file_bytes`.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable, or the session's worker refused the call.", body = ErrorBody),
    )
)]
pub(crate) async fn upload(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    Path(FilePath { id, path }): Path<FilePath>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|e| crate::error::body_rejected(e.status(), e.body_text()))?;
    c.put_session_file(&tenant, &id, &path, body).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// A file's path as a session takes it: relative to its working directory, without `.`,
/// `..` or empty segments.
/// The longest file or folder name a session's file system takes (Linux's `NAME_MAX`).
const MAX_NAME_BYTES: usize = 255;

pub(crate) fn check_path(path: &str) -> Result<(), ApiError> {
    let bad = path.is_empty()
        || path.len() > 1024
        || path.contains('\0')
        || path
            .split('/')
            .any(|segment| segment.is_empty() || segment == "." || segment == "..");
    if bad {
        return Err(ApiError::invalid(
            "path",
            "must be a relative path below the working directory, without `.`, `..` or empty segments (at most 1024 bytes)",
        ));
    }
    Ok(())
}

/// A relative path as one URL path of segments, each percent-encoded.
fn encode_path(path: &str) -> String {
    path.split('/')
        .map(|segment| {
            segment
                .bytes()
                .map(|b| {
                    if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                        (b as char).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Ends the sessions past their deadline (idle past their timeout, or past their lifetime),
/// whichever coordinator gets there first.
pub(crate) struct Sweeper {
    coordinator: Coordinator,
}

impl Sweeper {
    pub(crate) fn build(coordinator: &Coordinator) -> Option<Self> {
        coordinator.stores.sessions.as_ref()?;
        Some(Self {
            coordinator: coordinator.clone(),
        })
    }

    pub(crate) async fn run(self, cancel: CancellationToken) {
        let c = self.coordinator;
        let mut tick = tokio::time::interval(c.options.sessions.check_interval);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            let Some(sessions) = c.stores.sessions.clone() else {
                return;
            };
            let now = now_ms();
            let due = match sessions.due_sessions(now, 100).await {
                Ok(due) => due,
                Err(e) => {
                    tracing::debug!(error = %e, "cannot read the sessions' deadlines");
                    continue;
                }
            };
            for id in due {
                let Ok(Some(record)) = sessions.session(&id).await else {
                    continue;
                };
                if record.state != SessionState::Live || record.deadline_ms() > now {
                    continue;
                }
                let end = if record.expires_ms <= now {
                    SessionEnd::Lifetime
                } else {
                    SessionEnd::Idle {
                        idle_timeout_s: record.idle_timeout_s,
                    }
                };
                c.end(&record, &end).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_leaving_the_working_directory_is_refused_before_it_is_sent() {
        for bad in [
            "../etc/passwd",
            "a/../../b",
            "/etc/passwd",
            "a//b",
            "./a",
            "",
            "a\0b",
        ] {
            assert_eq!(
                check_path(bad).unwrap_err().body().param.as_deref(),
                Some("path"),
                "{bad:?}"
            );
        }
        for good in ["a.txt", "data/blob.bin", "..hidden", "a..b/c"] {
            assert!(check_path(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn paths_are_sent_segment_by_segment_and_escaped() {
        assert_eq!(encode_path("a/b c.txt"), "a/b%20c.txt");
        assert_eq!(encode_path("..%2F"), "..%252F");
    }

    #[test]
    fn only_the_session_languages_and_bounded_fields_pass() {
        let limits = SessionLimits::default();
        let ok = SessionCreate {
            language: Language::Python,
            memory_mb: None,
            idle_timeout_s: None,
            packages: vec![],
        };
        assert_eq!(check(&limits, &ok).unwrap(), (512, 600));
        let go = SessionCreate {
            language: Language::Go,
            ..ok.clone()
        };
        assert_eq!(
            check(&limits, &go).unwrap_err().body().param.as_deref(),
            Some("language")
        );
        let huge = SessionCreate {
            memory_mb: Some(1 << 20),
            ..ok.clone()
        };
        assert_eq!(
            check(&limits, &huge).unwrap_err().body().param.as_deref(),
            Some("memory_mb")
        );
        assert!(
            check(
                &limits,
                &SessionCreate {
                    packages: vec!["sympy".into()],
                    ..ok.clone()
                }
            )
            .is_ok()
        );
        let packages = SessionCreate {
            language: Language::Bash,
            packages: vec!["jq".into()],
            ..ok
        };
        assert_eq!(
            check(&limits, &packages)
                .unwrap_err()
                .body()
                .param
                .as_deref(),
            Some("packages")
        );
    }
}
