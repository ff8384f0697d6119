//! Bodies of the HTTP API, shared by the coordinator (server) and the CLI (client).

mod batches;
mod cluster;
mod errors;
mod jobs;
mod languages;
mod lists;
pub mod sessions;
mod usage;
mod webhooks;

pub use batches::{
    BatchAccepted, BatchJob, BatchJobStatus, BatchResult, BatchResults, BatchStatus, BatchView,
    ExpiredJob, ExpiredStatus,
};
pub use cluster::{ClusterView, ModelStatus, PoolStatus, QueueView, WorkerStatus, WorkerView};
pub use errors::{ErrorBody, ErrorCode};
pub use jobs::{FunctionProgress, JobAccepted, JobProgress, JobView};
pub use languages::{LanguageInfo, Languages};
pub use lists::{
    BatchList, BatchSummary, ExecutionList, ExecutionState, ExecutionSummary, JobList, JobSummary,
};
use serde::{Deserialize, Serialize};
pub use usage::{Usage, UsagePer, UsagePeriod, UsageTotals};
use utoipa::ToSchema;
pub use webhooks::{Webhook, WebhookAttempt, WebhookState};

use crate::{ExecutionResult, TaskId};

/// `POST /v1/executions` body. Optional limits take the coordinator's configured defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecutionSubmission {
    /// Your label for a batch item, echoed back as its result's `id` (only in batches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// A language of `GET /v1/languages`, by name or alias (`python`, `javascript`, `bash`,
    /// `c`, `cpp`, `go`, `rust`, `java`, `typescript`; `nodejs`, `ts`, …).
    #[schema(value_type = String)]
    pub language: String,
    pub code: String,
    /// A test run after the code in the same namespace (HumanEval style); the verdict is
    /// `passed` only when both ran to their end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// CPU-time limit in milliseconds (the program and every process it starts), beside the
    /// wall-clock `timeout_ms`; past it the verdict is `cpu_time_limit`. None by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_time_ms: Option<u64>,
    /// Compiled languages: the compile's own wall-clock limit in milliseconds (default
    /// `coordinator.default_compile_timeout_ms`); `timeout_ms` counts from the compile's end.
    /// Past it the verdict is `compile_error`. Ignored for the other languages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile_timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// Run in a container of its own instead of a warm one (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fresh_container: Option<bool>,
    /// Files to put next to the program, by relative path, or below `/mnt/data/` by absolute
    /// path: UTF-8 text as a string, any bytes as `{"base64": "..."}`. Their decoded sizes
    /// count against the code size limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<std::collections::BTreeMap<String, crate::file::FileContentWire>>)]
    pub files: Option<std::collections::BTreeMap<String, crate::FileContent>>,
    /// Files to send back after the run: relative to the work directory, or below
    /// `/mnt/data/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_files: Option<Vec<String>>,
}

/// An execution as the API shows it: its id plus either the verdict or `"status": "queued"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ExecutionView {
    pub id: TaskId,
    #[serde(flatten)]
    pub outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum Outcome {
    Done(ExecutionResult),
    Pending { status: Pending },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Pending {
    /// Accepted and published; no worker has stored a result yet.
    Queued,
}

/// `POST /v1/executions/batch` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecutionBatch {
    pub items: Vec<ExecutionSubmission>,
    /// Where to POST the batch once every item has its verdict (signed; an `http(s)` URL the
    /// operator allows, `coordinator.webhook_allow`). The answer then carries a `batch_id`
    /// (`GET /v1/executions/batches/{batch_id}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback_url: Option<String>,
}

/// One item of a batch: its label, its execution and the verdict (or `queued`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BatchItemView {
    /// The item's `id`, or its execution id when it had none.
    pub id: String,
    /// Where the verdict can be polled: `GET /v1/executions/{execution_id}`.
    pub execution_id: TaskId,
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// One line of a streamed batch answer (`?stream=true`, `application/x-ndjson`): an item's
/// result as soon as it is in, with its place in the input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StreamedItemView {
    /// The item's position in `items` (from 0).
    pub index: usize,
    #[serde(flatten)]
    pub item: BatchItemView,
}

/// The answer to a batch: every item's result in input order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ExecutionBatchView {
    /// Items with a verdict.
    pub done: usize,
    pub total: usize,
    pub results: Vec<BatchItemView>,
    /// The batch, when it was given a `callback_url` (and so is kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub batch_id: Option<TaskId>,
    /// Its webhook and every delivery attempt, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub webhook: Option<Webhook>,
}

/// An execution batch as kept for its webhook: its tenant and its items (label, execution).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionBatchRecord {
    pub id: TaskId,
    #[serde(default)]
    pub tenant: Option<String>,
    pub items: Vec<(String, TaskId)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Status;

    #[test]
    fn done_view_is_flat() {
        let view = ExecutionView {
            id: TaskId::new(),
            outcome: Outcome::Done(ExecutionResult {
                status: Status::Failed,
                exit_code: Some(3),
                stdout: String::new(),
                stderr: "boom".into(),
                truncated: false,
                duration_ms: 5,
                cpu_ms: None,
                peak_memory_kb: None,
                reason: None,
                error_kind: Some(crate::ErrorKind::Runtime),
                files: Default::default(),
                file_errors: Default::default(),
                compile: None,
            }),
        };
        let json = serde_json::to_value(&view).unwrap();
        assert_eq!(json["status"], "failed");
        assert_eq!(json["exit_code"], 3);
        let back: ExecutionView = serde_json::from_value(json).unwrap();
        assert_eq!(back, view);
    }

    #[test]
    fn pending_view_round_trips() {
        let view = ExecutionView {
            id: TaskId::new(),
            outcome: Outcome::Pending {
                status: Pending::Queued,
            },
        };
        let json = serde_json::to_value(&view).unwrap();
        assert_eq!(json["status"], "queued");
        assert_eq!(serde_json::from_value::<ExecutionView>(json).unwrap(), view);
    }

    #[test]
    fn submission_rejects_unknown_fields() {
        let err = serde_json::from_str::<ExecutionSubmission>(
            r#"{"language":"python","code":"1","timeout":5}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("timeout"), "{err}");
    }
}
