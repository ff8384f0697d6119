//! Calls to the worker holding a session (its `/internal/sessions` API): one call
//! ([`Coordinator::call_host`]), and a call that follows the session when its worker is lost
//! ([`Coordinator::on_host`], restoring it through [`super::restore`]).

use std::time::Duration;

use axum::body::Bytes;
use axum::http::{StatusCode, header};
use proto::api::ErrorCode;
use proto::api::sessions::Restore;
use proto::session::{HostError, HostErrorCode, INTERNAL_PREFIX, SessionRecord};

use crate::Coordinator;
use crate::error::{ApiError, unavailable};

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
pub(super) enum HostAnswer {
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

/// A call for a session's worker (its path after `/internal/sessions/{id}`).
pub(super) struct HostCall {
    pub(super) method: reqwest::Method,
    pub(super) path: String,
    pub(super) body: Option<Bytes>,
    pub(super) json: bool,
    pub(super) timeout: Duration,
    /// Sending it twice does what sending it once does (a read, an upload of the same bytes).
    pub(super) repeatable: bool,
}

impl HostCall {
    /// A call on the session's files (`path`: `/files...`): its bytes as they are, and
    /// repeatable (a read, or a write of the same bytes).
    pub(super) fn on_files(method: reqwest::Method, path: String, body: Option<Bytes>) -> Self {
        Self {
            method,
            path,
            body,
            json: false,
            timeout: Duration::from_secs(120),
            repeatable: true,
        }
    }
}

/// A call that reached the session's worker: its answer, and the restore it took first.
pub(super) struct Reached {
    pub(super) record: SessionRecord,
    pub(super) response: reqwest::Response,
    pub(super) restored: Option<Restore>,
}

impl Coordinator {
    /// One call to the session API of the worker at `url` (`path` after
    /// `/internal/sessions`), with the cluster's session secret, as a [`HostAnswer`].
    pub(super) async fn call_host(
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

    /// The answer for a call its worker refused (a loss of the worker is [`Self::recover`]ed
    /// before it gets here).
    pub(super) fn host_failed(&self, answer: HostAnswer) -> ApiError {
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
    pub(super) async fn on_host(
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
}
