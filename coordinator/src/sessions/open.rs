//! Opening a session: the request checked against `coordinator.sessions`, its record kept
//! within the tenant's quota, its container started on the emptiest worker that takes it.

use std::time::Duration;

use proto::Language;
use proto::api::ErrorCode;
use proto::api::sessions::{SESSION_LANGUAGES, SessionCreate, SessionState};
use proto::session::{HostErrorCode, OpenSession, SessionEnd, SessionHost, SessionRecord};

use super::SessionLimits;
use super::host::HostAnswer;
use crate::auth::Tenant;
use crate::error::{ApiError, unavailable};
use crate::{Coordinator, now_ms};

/// Requirements one session may ask for (`packages`), at most.
const MAX_PACKAGES: usize = 50;

/// A session request checked against `limits`: its memory and idle timeout, defaults applied.
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

#[cfg(test)]
mod tests {
    use super::*;

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
