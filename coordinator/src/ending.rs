//! How work ends in the coordinator: the store's one finishing operation for a job or an
//! execution, and this process's usage counter charged once, by the call that ended it.

use proto::job::JobResult;
use proto::{ExecutionResult, TaskId};

use crate::Coordinator;

impl Coordinator {
    /// Ends a job with `result` (the store's one finishing operation), and counts the tenant's
    /// usage in this process's metrics when this call is the one that ended it.
    pub(crate) async fn finish_job(
        &self,
        tenant: Option<&str>,
        result: &JobResult,
    ) -> Result<bool, store::Error> {
        let finished = self.jobs.finish_job(result.job_id, tenant, result).await?;
        if finished {
            self.metrics
                .usage
                .charge(tenant, &proto::api::UsageTotals::of_job(result).fields());
        }
        Ok(finished)
    }

    /// Ends an execution with `result`, as [`Coordinator::finish_job`] ends a job.
    pub(crate) async fn finish_execution(
        &self,
        id: TaskId,
        tenant: Option<&str>,
        result: &ExecutionResult,
    ) -> Result<bool, store::Error> {
        let stored = self.store.complete_execution(id, tenant, result).await?;
        if stored {
            self.metrics.usage.charge(
                tenant,
                &proto::api::UsageTotals::of_execution(result).fields(),
            );
        }
        Ok(stored)
    }
}
