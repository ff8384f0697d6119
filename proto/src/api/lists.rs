//! Answers of the listing routes (`GET /v1/jobs`, `/v1/batches`, `/v1/executions`): a tenant's
//! work newest first, one page at a time.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::{BatchStatus, Pending};
use crate::job::JobStatus;
use crate::{Language, Status, TaskId};

/// `GET /v1/jobs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JobList {
    pub jobs: Vec<JobSummary>,
    /// Pass as `cursor` for the next page; absent on the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub next_cursor: Option<String>,
}

/// One job of a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JobSummary {
    pub job_id: TaskId,
    pub status: JobStatus,
    /// Milliseconds since the Unix epoch.
    pub submitted_at_ms: u64,
    pub language: Language,
    /// The instruction, cut to its first 200 characters.
    pub instruction: String,
}

/// `GET /v1/batches`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BatchList {
    pub batches: Vec<BatchSummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub next_cursor: Option<String>,
}

/// One batch of a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BatchSummary {
    pub batch_id: TaskId,
    pub status: BatchStatus,
    pub submitted_at_ms: u64,
    /// How many jobs it has.
    pub jobs: usize,
}

/// `GET /v1/executions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ExecutionList {
    pub executions: Vec<ExecutionSummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub next_cursor: Option<String>,
}

/// One execution of a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ExecutionSummary {
    pub id: TaskId,
    pub status: ExecutionState,
    pub submitted_at_ms: u64,
    pub language: Language,
}

/// `queued` until a worker stored the verdict, then the verdict's status: [`Status`] itself,
/// so that a new verdict is a state with no edit here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ExecutionState {
    Pending(Pending),
    Done(Status),
}

impl From<Option<Status>> for ExecutionState {
    fn from(status: Option<Status>) -> Self {
        status.map_or(Self::Pending(Pending::Queued), Self::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn execution_states_are_named_as_verdicts_are() {
        for status in [
            Status::Passed,
            Status::Failed,
            Status::Timeout,
            Status::CpuTimeLimit,
            Status::MemoryLimit,
            Status::CompileError,
            Status::OutputLimit,
            Status::SandboxError,
            Status::Error,
        ] {
            let state = ExecutionState::from(Some(status));
            assert_eq!(
                serde_json::to_value(state).unwrap(),
                serde_json::json!(status.as_str())
            );
            let read: ExecutionState =
                serde_json::from_value(serde_json::json!(status.as_str())).unwrap();
            assert_eq!(read, state);
        }
        let queued = ExecutionState::from(None);
        assert_eq!(serde_json::to_value(queued).unwrap(), "queued");
        assert_eq!(
            serde_json::from_value::<ExecutionState>("queued".into()).unwrap(),
            queued
        );
        assert!(serde_json::from_value::<ExecutionState>("running".into()).is_err());
    }
}
