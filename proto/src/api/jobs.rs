//! Answers of the job routes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::TaskId;
use crate::api::Pending;
use crate::job::{JobResult, JobStatus};

/// The 202 answer of `POST /v1/jobs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JobAccepted {
    pub job_id: TaskId,
    pub status: Pending,
}

/// `GET /v1/jobs/{id}`: the result once the job is done, its progress before.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum JobView {
    Done(Box<JobResult>),
    Running(JobProgress),
}

/// A job that is not done yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JobProgress {
    pub job_id: TaskId,
    pub status: JobStatus,
    /// Every planned function (none before the plan is accepted).
    pub functions: BTreeMap<String, FunctionProgress>,
    /// The job's webhook (`callback_url`), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub webhook: Option<crate::api::Webhook>,
}

/// Where one function of a running job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FunctionProgress {
    /// Final: no more attempts will be made.
    pub done: bool,
    /// Its tests pass.
    pub passed: bool,
    /// Implementation attempts so far.
    pub attempts: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_view_reads_back_as_running() {
        let view = JobView::Running(JobProgress {
            job_id: TaskId::new(),
            status: JobStatus::Running,
            functions: BTreeMap::from([(
                "sieve".to_owned(),
                FunctionProgress {
                    done: false,
                    passed: false,
                    attempts: 1,
                },
            )]),
            webhook: None,
        });
        let json = serde_json::to_string(&view).unwrap();
        assert_eq!(serde_json::from_str::<JobView>(&json).unwrap(), view);
    }
}
