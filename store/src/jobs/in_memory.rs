//! [`JobStore`] in memory, for unit tests: every effect of the Redis scripts, the same
//! completion semantics.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use proto::job::{Batch, FunctionOutcome, JobMeta, JobResult, JobStatus, Plan};
use proto::{Progress, TaskId};

use super::{Completion, Finished, JobStore, Saved, Spent, Started, StepRecorded, StoredEvent};
use crate::Error;
use crate::dag::{Effects, Integrate};

/// In-memory job state for unit tests, with the same completion semantics.
#[derive(Debug, Clone, Default)]
pub struct MemoryJobs {
    state: Arc<Mutex<MemoryState>>,
    /// Watches of batches (`JobStore::watch_batch`), woken when one of their jobs ends.
    watchers: Arc<dashmap::DashMap<TaskId, Vec<Arc<tokio::sync::Notify>>>>,
}

#[derive(Debug, Default)]
pub(crate) struct MemoryState {
    meta: HashMap<TaskId, JobMeta>,
    status: HashMap<TaskId, JobStatus>,
    plans: HashMap<TaskId, Plan>,
    pending: HashMap<(TaskId, String), i64>,
    done: HashMap<TaskId, std::collections::BTreeSet<String>>,
    functions: HashMap<(TaskId, String), FunctionOutcome>,
    published: HashMap<TaskId, std::collections::BTreeSet<String>>,
    unfinished: HashMap<TaskId, u64>,
    results: HashMap<TaskId, JobResult>,
    /// What each job's model calls have spent ([`JobStore::spend_tokens`]).
    tokens: HashMap<TaskId, u64>,
    events: HashMap<TaskId, Vec<Progress>>,
    /// Agent jobs' transcripts ([`JobStore::record_step`]).
    steps: HashMap<TaskId, Vec<proto::agent::AgentStep>>,
    batches: HashMap<TaskId, Batch>,
    /// What finished jobs and executions cost, by tenant and hour (the charge of Redis's
    /// finishing scripts).
    usage: HashMap<(Option<String>, u64), proto::api::UsageTotals>,
    /// Quotas and webhooks (`crate::memory_tenancy`).
    pub(crate) tenancy: crate::memory_tenancy::Tenancy,
}

impl MemoryState {
    /// `tenant`'s charge of `totals` in the hour of `now` (`lua/usage_charge.lua`).
    fn charge(&mut self, tenant: Option<&str>, now: u64, totals: &proto::api::UsageTotals) {
        let hour = now - now % crate::usage::BUCKET_MS;
        let charged = self
            .usage
            .entry((tenant.map(str::to_owned), hour))
            .or_default();
        for (field, value) in crate::usage::increments(totals) {
            charged.add(field, value);
        }
    }

    /// The completion script's semantics (`lua/job_completion.lua`): `name` of `plan` done,
    /// `dependants` the ones its completion takes down, `integrate` when that starts the
    /// integration.
    fn complete(
        &mut self,
        id: TaskId,
        plan: &Plan,
        name: &str,
        dependants: &[String],
        integrate: Integrate,
        event: Option<&Progress>,
    ) -> Completion {
        let first = self.done.entry(id).or_default().insert(name.to_owned());
        if let (true, Some(event)) = (first, event) {
            self.events.entry(id).or_default().push(event.clone());
        }
        let mut ready = Vec::new();
        for d in dependants {
            let done = self.done.get(&id).is_some_and(|set| set.contains(d));
            if first {
                // HINCRBY on a missing counter starts from 0.
                let counter = self.pending.entry((id, d.clone())).or_insert(0);
                *counter -= 1;
                if *counter == 0 {
                    ready.push(d.clone());
                }
            } else if self.pending.get(&(id, d.clone())).is_some_and(|n| *n <= 0) && !done {
                // A missing counter reads as 1: not ready.
                ready.push(d.clone());
            }
        }
        let all_done = self.done.get(&id).map_or(0, |d| d.len()) >= plan.specs.len();
        Completion {
            ready,
            all_done,
            first,
            integrate: integrate.starts(all_done),
        }
    }
}

impl MemoryJobs {
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn state(&self) -> std::sync::MutexGuard<'_, MemoryState> {
        self.state.lock().expect("poisoned")
    }
}

#[async_trait]
impl JobStore for MemoryJobs {
    async fn create_job(&self, meta: &JobMeta) -> Result<(), Error> {
        let mut s = self.state();
        s.meta.insert(meta.id, meta.clone());
        s.status.insert(meta.id, JobStatus::Queued);
        s.unfinished.insert(meta.id, meta.submitted_at_ms);
        Ok(())
    }
    async fn unfinished_before(&self, before_ms: u64, limit: usize) -> Result<Vec<TaskId>, Error> {
        let s = self.state();
        let mut old: Vec<(u64, TaskId)> = s
            .unfinished
            .iter()
            .filter(|(_, at)| **at < before_ms)
            .map(|(id, at)| (*at, *id))
            .collect();
        old.sort();
        Ok(old.into_iter().take(limit).map(|(_, id)| id).collect())
    }
    async fn forget_job(&self, id: TaskId) -> Result<(), Error> {
        self.state().unfinished.remove(&id);
        Ok(())
    }
    async fn job_meta(&self, id: TaskId) -> Result<Option<JobMeta>, Error> {
        Ok(self.state().meta.get(&id).cloned())
    }
    async fn put_job_meta(&self, meta: &JobMeta) -> Result<(), Error> {
        self.state().meta.insert(meta.id, meta.clone());
        Ok(())
    }
    async fn set_status(&self, id: TaskId, status: JobStatus) -> Result<(), Error> {
        let mut s = self.state();
        if !s.status.get(&id).is_some_and(|current| current.is_final()) {
            s.status.insert(id, status);
        }
        Ok(())
    }
    async fn status(&self, id: TaskId) -> Result<Option<JobStatus>, Error> {
        Ok(self.state().status.get(&id).copied())
    }
    async fn spend_tokens(&self, id: TaskId, tokens: u64) -> Result<Spent, Error> {
        let mut s = self.state();
        let spent = s.tokens.entry(id).or_default();
        *spent += tokens;
        let tokens = *spent;
        Ok(Spent {
            status: s.status.get(&id).copied(),
            tokens,
        })
    }
    async fn start_job(
        &self,
        meta: &JobMeta,
        plan: &Plan,
        event: Option<&Progress>,
    ) -> Result<Started, Error> {
        let mut s = self.state();
        let id = meta.id;
        if s.plans.contains_key(&id) {
            return Ok(Started {
                first: false,
                status: s.status.get(&id).copied(),
            });
        }
        s.plans.insert(id, plan.clone());
        s.done.remove(&id);
        for spec in &plan.specs {
            let unique: std::collections::BTreeSet<&String> = spec.dependencies.iter().collect();
            s.pending
                .insert((id, spec.name.clone()), unique.len() as i64);
        }
        s.meta.insert(id, meta.clone());
        if !s.status.get(&id).is_some_and(|status| status.is_final()) {
            s.status.insert(id, JobStatus::Running);
        }
        if let Some(event) = event {
            s.events.entry(id).or_default().push(event.clone());
        }
        Ok(Started {
            first: true,
            status: s.status.get(&id).copied(),
        })
    }
    async fn plan(&self, id: TaskId) -> Result<Option<Plan>, Error> {
        Ok(self.state().plans.get(&id).cloned())
    }
    async fn save_function(
        &self,
        id: TaskId,
        outcome: &FunctionOutcome,
        event: Option<&Progress>,
    ) -> Result<Saved, Error> {
        let mut s = self.state();
        let status = s.status.get(&id).copied();
        let key = (id, outcome.name.clone());
        if s.functions.get(&key).is_some_and(|o| o.done) {
            return Ok(Saved {
                stored: false,
                status,
            });
        }
        s.functions.insert(key, outcome.clone());
        if let Some(event) = event {
            s.events.entry(id).or_default().push(event.clone());
        }
        Ok(Saved {
            stored: true,
            status,
        })
    }
    async fn function(&self, id: TaskId, name: &str) -> Result<Option<FunctionOutcome>, Error> {
        Ok(self.state().functions.get(&(id, name.to_owned())).cloned())
    }
    async fn finish_function(
        &self,
        id: TaskId,
        plan: &Plan,
        outcome: &FunctionOutcome,
        attempt: Option<&Progress>,
        done: Option<&Progress>,
    ) -> Result<Finished, Error> {
        let mut s = self.state();
        let status = s.status.get(&id).copied();
        let key = (id, outcome.name.clone());
        if s.functions.get(&key).is_some_and(|o| o.done) {
            return Ok(Finished {
                stored: false,
                status,
                completion: None,
            });
        }
        s.functions.insert(key, outcome.clone());
        if let Some(attempt) = attempt {
            s.events.entry(id).or_default().push(attempt.clone());
        }
        if status.is_some_and(JobStatus::is_final) {
            return Ok(Finished {
                stored: true,
                status,
                completion: None,
            });
        }
        let integrating = status == Some(JobStatus::Integrating);
        let effects = Effects::of(plan, outcome);
        let released = if integrating {
            &[][..]
        } else {
            effects.release
        };
        let completion = s.complete(id, plan, &outcome.name, released, effects.integrate, done);
        let mut status = status;
        if !integrating && completion.integrate {
            s.status.insert(id, JobStatus::Integrating);
            status = Some(JobStatus::Integrating);
        }
        Ok(Finished {
            stored: true,
            status,
            completion: Some(completion),
        })
    }
    async fn complete_function(
        &self,
        id: TaskId,
        plan: &Plan,
        outcome: &FunctionOutcome,
        event: Option<&Progress>,
    ) -> Result<Completion, Error> {
        let effects = Effects::of(plan, outcome);
        let name = &outcome.name;
        Ok(self
            .state()
            .complete(id, plan, name, effects.release, effects.integrate, event))
    }
    async fn mark_published(&self, id: TaskId, names: &[String]) -> Result<(), Error> {
        self.state()
            .published
            .entry(id)
            .or_default()
            .extend(names.iter().cloned());
        Ok(())
    }
    async fn unpublished(&self, id: TaskId, names: Vec<String>) -> Result<Vec<String>, Error> {
        let s = self.state();
        let published = s.published.get(&id);
        Ok(names
            .into_iter()
            .filter(|n| !published.is_some_and(|p| p.contains(n)))
            .collect())
    }
    async fn finish_job(
        &self,
        id: TaskId,
        tenant: Option<&str>,
        result: &JobResult,
    ) -> Result<bool, Error> {
        let mut s = self.state();
        let now = proto::now_ms();
        s.unfinished.remove(&id);
        if s.results.contains_key(&id) {
            s.tenancy.job_ended(id, tenant, false, now);
            return Ok(false);
        }
        s.results.insert(id, result.clone());
        s.charge(tenant, now, &proto::api::UsageTotals::of_job(result));
        s.tenancy.job_ended(id, tenant, true, now);
        // The batch notice (Redis: published on the batches' channel).
        if let Some(batch) = s.tenancy.batch_of_job.get(&id)
            && let Some(watches) = self.watchers.get(batch)
        {
            watches.iter().for_each(|notify| notify.notify_waiters());
        }
        s.events
            .entry(id)
            .or_default()
            .push(Progress::finished(result));
        s.status.insert(id, result.status);
        Ok(true)
    }
    async fn result(&self, id: TaskId) -> Result<Option<JobResult>, Error> {
        Ok(self.state().results.get(&id).cloned())
    }
    async fn record_step(
        &self,
        id: TaskId,
        step: &proto::agent::AgentStep,
    ) -> Result<StepRecorded, Error> {
        let mut s = self.state();
        if let Some(status) = s.status.get(&id).copied().filter(|s| s.is_final()) {
            return Ok(StepRecorded::Ended(status));
        }
        let steps = s.steps.entry(id).or_default();
        let length = u32::try_from(steps.len()).unwrap_or(u32::MAX);
        if length != step.index() {
            return Ok(StepRecorded::Taken { length });
        }
        steps.push(step.clone());
        s.events
            .entry(id)
            .or_default()
            .push(Progress::AgentStep { step: step.clone() });
        Ok(StepRecorded::Yes)
    }

    async fn steps(&self, id: TaskId) -> Result<Vec<proto::agent::AgentStep>, Error> {
        Ok(self.state().steps.get(&id).cloned().unwrap_or_default())
    }

    async fn push_event(&self, id: TaskId, event: &Progress) -> Result<(), Error> {
        self.state()
            .events
            .entry(id)
            .or_default()
            .push(event.clone());
        Ok(())
    }
    async fn events(&self, id: TaskId, after: Option<&str>) -> Result<Vec<StoredEvent>, Error> {
        let skip = after
            .and_then(|a| a.parse::<usize>().ok())
            .map_or(0, |n| n + 1);
        Ok(self
            .state()
            .events
            .get(&id)
            .map(|events| {
                events
                    .iter()
                    .enumerate()
                    .skip(skip)
                    .map(|(i, event)| StoredEvent {
                        id: i.to_string(),
                        event: event.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default())
    }
    async fn put_batch(&self, batch: &Batch) -> Result<(), Error> {
        let mut s = self.state();
        s.batches.insert(batch.id, batch.clone());
        for job in &batch.jobs {
            s.tenancy.batch_of_job.insert(*job, batch.id);
        }
        Ok(())
    }
    fn watch_batch(&self, id: TaskId) -> Option<crate::Watch> {
        let notify = Arc::new(tokio::sync::Notify::new());
        self.watchers
            .entry(id)
            .or_default()
            .push(Arc::clone(&notify));
        Some(crate::Watch {
            notify,
            ids: vec![id],
            watchers: Arc::clone(&self.watchers),
        })
    }
    async fn batch(&self, id: TaskId) -> Result<Option<Batch>, Error> {
        Ok(self.state().batches.get(&id).cloned())
    }
}

#[async_trait]
impl crate::usage::Usage for MemoryJobs {
    async fn hourly(
        &self,
        tenant: Option<&str>,
        from_ms: u64,
        to_ms: u64,
    ) -> Result<Vec<(u64, proto::api::UsageTotals)>, Error> {
        let s = self.state();
        Ok(crate::usage::hours(from_ms, to_ms)
            .filter_map(|hour| {
                let charged = s.usage.get(&(tenant.map(str::to_owned), hour))?;
                Some((hour, *charged))
            })
            .collect())
    }
}

impl MemoryJobs {
    /// `tenant`'s totals over the hours that overlap `[from_ms, to_ms)`.
    pub(crate) fn usage_of(
        &self,
        tenant: Option<&str>,
        from_ms: u64,
        to_ms: u64,
    ) -> proto::api::UsageTotals {
        let s = self.state();
        let mut totals = proto::api::UsageTotals::default();
        for hour in crate::usage::hours(from_ms, to_ms) {
            if let Some(charged) = s.usage.get(&(tenant.map(str::to_owned), hour)) {
                for (field, value) in charged.fields() {
                    totals.add(field, value);
                }
            }
        }
        totals
    }

    /// What an execution's verdict does beside storing it (`lua/execution_complete.lua`):
    /// its place back and, when `stored`, its tenant charged and its batch one item closer.
    pub(crate) fn execution_ended(
        &self,
        id: TaskId,
        tenant: Option<&str>,
        result: &proto::ExecutionResult,
        stored: bool,
    ) {
        let now = proto::now_ms();
        let mut s = self.state();
        if stored {
            s.charge(tenant, now, &proto::api::UsageTotals::of_execution(result));
        }
        s.tenancy.execution_ended(id, tenant, stored, now);
    }
}
