//! Answers of the batch routes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::TaskId;
use crate::job::JobStatus;

/// The 202 answer of `POST /v1/batches`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BatchAccepted {
    pub batch_id: TaskId,
    /// The jobs' ids, in the order of the lines.
    pub jobs: Vec<TaskId>,
}

/// `GET /v1/batches/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BatchView {
    pub batch_id: TaskId,
    pub status: BatchStatus,
    /// Jobs by status.
    pub counts: BTreeMap<BatchJobStatus, usize>,
    /// Every job, in input order.
    pub jobs: Vec<BatchJob>,
    /// The batch's webhook (`callback_url`) and its delivery attempts, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub webhook: Option<crate::api::Webhook>,
}

/// `GET /v1/batches/{id}/results`: a page of the batch's jobs in input order, each as
/// `GET /v1/jobs/{id}` answers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BatchResults {
    pub batch_id: TaskId,
    /// The batch's jobs in all.
    pub total: usize,
    pub results: Vec<BatchResult>,
    /// Pass as `cursor` for the next page; absent on the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub next_cursor: Option<String>,
}

/// One job of a batch's results: its result or progress, or `unknown` once its state has
/// expired.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum BatchResult {
    Job(crate::api::JobView),
    Expired(ExpiredJob),
}

/// A job of a batch whose state has expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ExpiredJob {
    pub job_id: TaskId,
    pub status: ExpiredStatus,
}

/// The status of a job whose state has expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExpiredStatus {
    Unknown,
}

/// `done` once every job is final or `unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BatchStatus {
    Running,
    Done,
}

/// One job of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BatchJob {
    pub job_id: TaskId,
    pub status: BatchJobStatus,
}

/// A job's status, or `unknown` once its state has expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BatchJobStatus {
    Queued,
    Planning,
    Running,
    Integrating,
    Succeeded,
    Failed,
    Cancelled,
    Unknown,
}

impl BatchJobStatus {
    pub fn job_status(self) -> Option<JobStatus> {
        match self {
            Self::Queued => Some(JobStatus::Queued),
            Self::Planning => Some(JobStatus::Planning),
            Self::Running => Some(JobStatus::Running),
            Self::Integrating => Some(JobStatus::Integrating),
            Self::Succeeded => Some(JobStatus::Succeeded),
            Self::Failed => Some(JobStatus::Failed),
            Self::Cancelled => Some(JobStatus::Cancelled),
            Self::Unknown => None,
        }
    }

    /// Nothing more will happen to the job: it is final, or its state is gone.
    pub fn is_final(self) -> bool {
        self.job_status().is_none_or(JobStatus::is_final)
    }
}

impl From<Option<JobStatus>> for BatchJobStatus {
    fn from(status: Option<JobStatus>) -> Self {
        match status {
            Some(JobStatus::Queued) => Self::Queued,
            Some(JobStatus::Planning) => Self::Planning,
            Some(JobStatus::Running) => Self::Running,
            Some(JobStatus::Integrating) => Self::Integrating,
            Some(JobStatus::Succeeded) => Self::Succeeded,
            Some(JobStatus::Failed) => Self::Failed,
            Some(JobStatus::Cancelled) => Self::Cancelled,
            None => Self::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_maps_back_and_only_ends_count_as_final() {
        let all = [
            None,
            Some(JobStatus::Queued),
            Some(JobStatus::Planning),
            Some(JobStatus::Running),
            Some(JobStatus::Integrating),
            Some(JobStatus::Succeeded),
            Some(JobStatus::Failed),
            Some(JobStatus::Cancelled),
        ];
        for status in all {
            let batch = BatchJobStatus::from(status);
            assert_eq!(batch.job_status(), status);
            assert_eq!(batch.is_final(), status.is_none_or(JobStatus::is_final));
        }
    }
}
