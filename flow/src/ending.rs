//! How a job ends, whoever ends it: the worker that integrates it, the worker whose plan was
//! refused, a coordinator cancelling it, failing an overdue one or reading a dead letter.

use std::collections::BTreeMap;

use proto::ending::Ending;
use proto::generation::FunctionSpec;
use proto::job::{JobMeta, JobResult, JobStatus};

use crate::Flow;

/// A job's result, and whether this call ended the job with it (false: it had ended already,
/// and `result` is the one it ended with).
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    pub result: JobResult,
    pub now: bool,
}

impl Flow {
    /// Ends a job with `result` (the store's one finishing operation); when this call is the
    /// one that ended it, counts the tenant's usage and the job's time in this process's
    /// metrics.
    pub async fn finish(
        &self,
        tenant: Option<&str>,
        result: &JobResult,
    ) -> Result<bool, store::Error> {
        let finished = self.jobs.finish_job(result.job_id, tenant, result).await?;
        if finished && let Some(ends) = &self.ends {
            ends.usage
                .charge(tenant, &proto::api::UsageTotals::of_job(result).fields());
            ends.job_seconds
                .with_label_values(&[result.status.as_str()])
                .observe(result.metrics.total_ms as f64 / 1000.0);
            ends.jobs_finished
                .with_label_values(&[result.status.as_str()])
                .inc();
        }
        Ok(finished)
    }

    /// Ends a job before its integration with `status` (`failed`, `cancelled`) and `reason`,
    /// keeping what it produced: the functions finished so far, their tests and their
    /// history. `specs`: the plan the job was refused with, when it has no stored plan.
    pub async fn end_early(
        &self,
        meta: &JobMeta,
        status: JobStatus,
        reason: &str,
        specs: &[FunctionSpec],
    ) -> Result<Ended, store::Error> {
        if meta.request.agent.is_some() {
            return self.end_agent_early(meta, status, reason).await;
        }
        let plan = self.jobs.plan(meta.id).await?;
        let specs = plan.as_ref().map_or(specs, |plan| &plan.specs[..]);
        let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
        let outcomes: BTreeMap<_, _> = match &plan {
            Some(_) => names
                .iter()
                .cloned()
                .zip(self.jobs.functions(meta.id, &names).await?)
                .filter_map(|(name, outcome)| Some((name, outcome?)))
                .collect(),
            None => BTreeMap::new(),
        };
        let ending = Ending::Early {
            status,
            reason: reason.to_owned(),
        };
        let mut result = JobResult::assemble(meta, specs, &outcomes, ending, proto::now_ms());
        if let Some(plan) = &plan {
            result.plan_source = plan.source();
        }
        if self.finish(meta.tenant.as_deref(), &result).await? {
            tracing::info!(job = %meta.id, status = status.as_str(), %reason, "job ended");
            return Ok(Ended { result, now: true });
        }
        self.ended_before(meta, reason, result).await
    }

    /// [`Self::end_early`] of an agent job: what its recorded steps spent, no answer. Its
    /// run, wherever it is, stops at its next step (the job's status says so); its session
    /// ends with it there, or at its idle timeout if no run takes the job again.
    async fn end_agent_early(
        &self,
        meta: &JobMeta,
        status: JobStatus,
        reason: &str,
    ) -> Result<Ended, store::Error> {
        use proto::agent::{AgentEnd, AgentOutcome, AgentTotals};
        let steps = self.jobs.steps(meta.id).await?;
        let now = proto::now_ms();
        let mut totals = AgentTotals::of(&steps);
        totals.wall_ms = now.saturating_sub(meta.submitted_at_ms);
        let outcome = AgentOutcome {
            ended_by: if status == JobStatus::Cancelled {
                AgentEnd::Cancelled
            } else {
                AgentEnd::Failed
            },
            answer: None,
            files: Default::default(),
            missing: Default::default(),
            totals,
            session_id: proto::agent::session_id(meta.id),
        };
        let ending = Ending::Agent {
            outcome,
            failure: Some(reason.to_owned()),
        };
        let result = JobResult::assemble(meta, &[], &BTreeMap::new(), ending, now);
        if self.finish(meta.tenant.as_deref(), &result).await? {
            tracing::info!(job = %meta.id, status = status.as_str(), %reason, "agent job ended");
            return Ok(Ended { result, now: true });
        }
        self.ended_before(meta, reason, result).await
    }

    /// A job that had finished before this end: its own result.
    async fn ended_before(
        &self,
        meta: &JobMeta,
        reason: &str,
        result: JobResult,
    ) -> Result<Ended, store::Error> {
        tracing::info!(job = %meta.id, %reason, "job had finished already; its result stands");
        Ok(Ended {
            result: self.jobs.result(meta.id).await?.unwrap_or(result),
            now: false,
        })
    }
}
