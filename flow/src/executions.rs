//! The one way an execution ends, for both kinds of process: the worker that ran it, and a
//! coordinator that answers for it (a dead letter, a refusal, one overdue).

use std::sync::Arc;

use proto::{ExecutionResult, Language, TaskId};

/// Ends executions in the store and counts each once, in the process whose call ended it;
/// cheap to clone.
#[derive(Clone)]
pub struct ExecutionEnds {
    executions: Arc<dyn store::Store>,
    /// `codegen_executions_finished_total`.
    finished: prometheus::IntCounterVec,
    /// `codegen_usage_total`.
    usage: telemetry::TenantUsage,
}

impl std::fmt::Debug for ExecutionEnds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutionEnds").finish_non_exhaustive()
    }
}

impl ExecutionEnds {
    pub fn new(
        executions: Arc<dyn store::Store>,
        finished: prometheus::IntCounterVec,
        usage: telemetry::TenantUsage,
    ) -> Self {
        Self {
            executions,
            finished,
            usage,
        }
    }

    /// Ends execution `id` of `tenant` in `language` (`None`: its task could not be read)
    /// with `result` (the store's one
    /// finishing operation: one result, one charge to the tenant's stored usage); when this
    /// call is the one that ended it, counts it and the tenant's usage in this process's
    /// metrics. Whether this call ended it.
    pub async fn finish(
        &self,
        id: TaskId,
        tenant: Option<&str>,
        language: Option<Language>,
        result: &ExecutionResult,
    ) -> Result<bool, store::Error> {
        let first = self
            .executions
            .complete_execution(id, tenant, result)
            .await?;
        if first {
            self.finished
                .with_label_values(&[
                    language.map_or("unknown", Language::as_str),
                    result.status.as_str(),
                ])
                .inc();
            self.usage.charge(
                tenant,
                &proto::api::UsageTotals::of_execution(result).fields(),
            );
        }
        Ok(first)
    }
}
