//! A session's record as a call finds it: the tenant's own or none, live or the 409 that says
//! how it ended; and the coordinator's one way to end a session.

use std::time::Duration;

use proto::api::ErrorCode;
use proto::api::sessions::{SessionEndedBy, SessionState};
use proto::session::{SessionEnd, SessionRecord};

use crate::Coordinator;
use crate::auth::Tenant;
use crate::error::{ApiError, unavailable};

impl Coordinator {
    /// The sessions' store, or `not_kept` on a coordinator without Redis.
    pub(crate) fn sessions(&self) -> Result<&std::sync::Arc<dyn store::Sessions>, ApiError> {
        self.stores.sessions.as_ref().ok_or_else(|| {
            ApiError::new(
                ErrorCode::NotKept,
                "this coordinator runs without Redis and keeps no sessions",
            )
        })
    }

    /// Session `id` of `tenant`, or 404 (another tenant's is as unknown as none).
    pub(super) async fn session_of(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<SessionRecord, ApiError> {
        let id = canonical_id(id)?;
        let id = id.as_str();
        match self.sessions()?.session(id).await.map_err(unavailable)? {
            Some(record) if tenant.sees(&record.tenant) => Ok(record),
            _ => Err(crate::error::not_found(format!("no session {id}"))),
        }
    }

    /// Session `id`, live: else the 409 that says how it ended.
    pub(super) async fn live_session(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<SessionRecord, ApiError> {
        let record = self.session_of(tenant, id).await?;
        match record.state {
            SessionState::Live => Ok(record),
            state => Err(ended(state, record.ended_reason.as_deref())),
        }
    }

    /// Ends `record` (if still live) as `end` says (`flow::SessionEnds`, as a worker does),
    /// and tells its worker to drop it.
    pub(super) async fn end(&self, record: &SessionRecord, end: &SessionEnd) {
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

    /// Session `id`'s record, live: else the 409 that says how it ended.
    pub(super) async fn live_session_record(&self, id: &str) -> Result<SessionRecord, ApiError> {
        match self.sessions()?.session(id).await.map_err(unavailable)? {
            Some(record) if record.state == SessionState::Live => Ok(record),
            Some(record) => Err(ended(record.state, record.ended_reason.as_deref())),
            None => Err(crate::error::not_found(format!("no session {id}"))),
        }
    }

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

/// The 409 of a call to a session that has ended: `session_lost` when its worker took it
/// along, else `session_ended`, with the reason its record gives.
pub(super) fn ended(state: SessionState, reason: Option<&str>) -> ApiError {
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
