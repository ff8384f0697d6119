//! A session whose worker is lost, restored on another live worker from its last checkpoint,
//! or ended `lost` when it has none.

use std::time::Duration;

use proto::api::ErrorCode;
use proto::api::sessions::Restore;
use proto::session::{
    HostError, HostErrorCode, OpenSession, RestoreSession, SessionEnd, SessionHost, SessionRecord,
};

use super::host::HostAnswer;
use super::records::ended;
use crate::Coordinator;
use crate::error::{ApiError, unavailable};

impl Coordinator {
    /// Session `record`'s worker is lost (`why`): restores the session on another live worker
    /// from its last checkpoint (the first restore wins; a session without one ends `lost`).
    /// The session's record after the restore, and the restore.
    pub(super) async fn recover(
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
}

/// ` (not restored: a (why), b (why))`, or nothing.
pub(super) fn unrestorable_note(restore: &Restore) -> String {
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
