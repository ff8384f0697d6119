//! Running a cell in a session: its timeout and size checked, carried to the session's worker
//! (after a restore if that worker was lost), a kernel's death ending the session.

use std::time::Duration;

use proto::api::ErrorCode;
use proto::api::sessions::{CellRequest, CellResult};
use proto::session::{CellOutcome, RunCell, SessionEnd};

use super::host::{HostCall, Reached};
use super::restore::unrestorable_note;
use crate::auth::Tenant;
use crate::error::ApiError;
use crate::{Coordinator, now_ms};

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

/// A cell's status as `codegen_session_cells_total` labels it.
fn cell_status(result: &CellResult) -> &'static str {
    match result.status {
        proto::api::sessions::CellStatus::Ok => "ok",
        proto::api::sessions::CellStatus::Error => "error",
        proto::api::sessions::CellStatus::Timeout => "timeout",
    }
}
