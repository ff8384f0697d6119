//! How work ends in the coordinator: a job through [`flow::Flow`], an execution through
//! [`flow::ExecutionEnds`] (the one way each ends, shared with the workers); this process's
//! counters charged once, by the call that ended it.

use proto::job::{JobMeta, JobResult, JobStatus};
use proto::{ExecutionResult, Language, TaskId};

use crate::Coordinator;

impl Coordinator {
    /// Ends a job with `result` ([`flow::Flow::finish`]); whether this call ended it.
    pub(crate) async fn finish_job(
        &self,
        tenant: Option<&str>,
        result: &JobResult,
    ) -> Result<bool, store::Error> {
        self.flow.finish(tenant, result).await
    }

    /// Ends a job before its integration with `status` (`failed`, `cancelled`) and `reason`,
    /// keeping what it produced. Returns the job's result: this one, or the one it had
    /// finished with already.
    pub(crate) async fn end_job(
        &self,
        meta: &JobMeta,
        status: JobStatus,
        reason: &str,
    ) -> Result<JobResult, store::Error> {
        Ok(self.flow.end_early(meta, status, reason, &[]).await?.result)
    }

    /// Ends a job as failed with `reason`; a job that already finished keeps its result.
    pub(crate) async fn fail_job(&self, meta: &JobMeta, reason: &str) -> Result<(), store::Error> {
        self.end_job(meta, JobStatus::Failed, reason)
            .await
            .map(drop)
    }

    /// Ends an execution with `result` ([`flow::ExecutionEnds::finish`]); whether this call
    /// ended it.
    pub(crate) async fn finish_execution(
        &self,
        id: TaskId,
        tenant: Option<&str>,
        language: Option<Language>,
        result: &ExecutionResult,
    ) -> Result<bool, store::Error> {
        self.execution_ends
            .finish(id, tenant, language, result)
            .await
    }
}
