//! The in-memory store's quotas and webhooks (`MemoryJobs`), with the effects the scripts that
//! end work have on them in Redis: a job's or execution's end gives its place back, charges its
//! tenant and makes its (batch's) webhook due. One lock holds all of it, as one script does.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use async_trait::async_trait;
use proto::TaskId;
use proto::api::{ExecutionBatchRecord, UsageTotals, Webhook, WebhookAttempt, WebhookState};

use crate::index::Kind;
use crate::quotas::{Limits, Quotas, Refusal};
use crate::webhooks::{AttemptOutcome, Hook, HookKind, Webhooks};
use crate::{Error, MemoryJobs};

/// What the in-memory store keeps of quotas and webhooks (inside `MemoryJobs`' state).
#[derive(Debug, Default)]
pub(crate) struct Tenancy {
    /// Admitted, unfinished work by kind and tenant: id → admitted at (ms).
    in_flight: HashMap<(&'static str, Option<String>), BTreeMap<TaskId, u64>>,
    hooks: HashMap<(&'static str, TaskId), MemoryHook>,
    /// Due webhooks: when each is due (ms; a claimed one, when its lease ends).
    due: HashMap<(&'static str, TaskId), u64>,
    /// A job's batch, an execution's batch (for their batches' webhooks).
    pub(crate) batch_of_job: HashMap<TaskId, TaskId>,
    batch_of_execution: HashMap<TaskId, TaskId>,
    execution_batches: HashMap<TaskId, ExecutionBatchRecord>,
}

#[derive(Debug, Clone)]
struct MemoryHook {
    url: String,
    tenant: Option<String>,
    state: WebhookState,
    since_ms: Option<u64>,
    /// For a batch: its items whose end is still to come.
    left: Option<usize>,
    attempts: Vec<WebhookAttempt>,
}

fn kind_of(name: &str) -> Option<HookKind> {
    [HookKind::Job, HookKind::Batch, HookKind::ExecutionBatch]
        .into_iter()
        .find(|k| k.as_str() == name)
}

impl Tenancy {
    /// What the end of job `id` does here (`lua/job_finish.lua`): its place back and, when
    /// `stored` (this call ended it), its webhook due and its batch one item closer.
    pub(crate) fn job_ended(&mut self, id: TaskId, tenant: Option<&str>, stored: bool, now: u64) {
        self.release(Kind::Jobs, tenant, &[id]);
        if !stored {
            return;
        }
        self.make_due(HookKind::Job, id, now);
        if let Some(batch) = self.batch_of_job.get(&id).copied() {
            self.item_ended(HookKind::Batch, batch, now);
        }
    }

    /// What an execution's verdict does here (`lua/execution_complete.lua`); `stored`: this
    /// call stored it.
    pub(crate) fn execution_ended(
        &mut self,
        id: TaskId,
        tenant: Option<&str>,
        stored: bool,
        now: u64,
    ) {
        self.release(Kind::Executions, tenant, &[id]);
        if let (true, Some(batch)) = (stored, self.batch_of_execution.get(&id).copied()) {
            self.item_ended(HookKind::ExecutionBatch, batch, now);
        }
    }

    fn release(&mut self, kind: Kind, tenant: Option<&str>, ids: &[TaskId]) {
        if let Some(set) = self
            .in_flight
            .get_mut(&(kind.as_str(), tenant.map(str::to_owned)))
        {
            for id in ids {
                set.remove(id);
            }
        }
    }

    fn make_due(&mut self, kind: HookKind, id: TaskId, now: u64) {
        if let Some(hook) = self.hooks.get_mut(&(kind.as_str(), id)) {
            hook.state = WebhookState::Pending;
            hook.since_ms = Some(now);
            self.due.insert((kind.as_str(), id), now);
        }
    }

    fn item_ended(&mut self, kind: HookKind, batch: TaskId, now: u64) {
        let last = match self.hooks.get_mut(&(kind.as_str(), batch)) {
            Some(MemoryHook {
                left: Some(left), ..
            }) => {
                *left = left.saturating_sub(1);
                *left == 0
            }
            _ => false,
        };
        if last {
            self.make_due(kind, batch, now);
        }
    }

    fn register(
        &mut self,
        kind: HookKind,
        id: TaskId,
        url: &str,
        tenant: Option<&str>,
        items: Option<usize>,
    ) {
        self.hooks.insert(
            (kind.as_str(), id),
            MemoryHook {
                url: url.to_owned(),
                tenant: tenant.map(str::to_owned),
                state: WebhookState::Waiting,
                since_ms: None,
                left: items,
                attempts: Vec::new(),
            },
        );
    }
}

#[async_trait]
impl Quotas for MemoryJobs {
    async fn admit(
        &self,
        kind: Kind,
        tenant: Option<&str>,
        ids: &[TaskId],
        limits: &Limits,
    ) -> Result<Result<(), Refusal>, Error> {
        let now = proto::now_ms();
        let used = if limits.tokens.is_some() || limits.cpu_ms.is_some() {
            self.usage_of(tenant, limits.period_start_ms, now + 1)
        } else {
            UsageTotals::default()
        };
        let mut state = self.state();
        let tenancy = &mut state.tenancy;
        if let Some(limit) = limits.in_flight {
            let set = tenancy
                .in_flight
                .entry((kind.as_str(), tenant.map(str::to_owned)))
                .or_default();
            set.retain(|_, at| *at >= limits.horizon_ms);
            let current = set.len() as u64;
            if current + ids.len() as u64 > limit {
                return Ok(Err(Refusal::InFlight { current }));
            }
        }
        let tokens = used.prompt_tokens + used.completion_tokens;
        if limits.tokens.is_some_and(|limit| tokens >= limit) {
            return Ok(Err(Refusal::Tokens { used: tokens }));
        }
        if limits
            .cpu_ms
            .is_some_and(|limit| used.sandbox_cpu_ms >= limit)
        {
            return Ok(Err(Refusal::Cpu {
                used_ms: used.sandbox_cpu_ms,
            }));
        }
        if limits.in_flight.is_some() {
            let set = tenancy
                .in_flight
                .entry((kind.as_str(), tenant.map(str::to_owned)))
                .or_default();
            for id in ids {
                set.insert(*id, now);
            }
        }
        Ok(Ok(()))
    }

    async fn release(&self, kind: Kind, tenant: Option<&str>, ids: &[TaskId]) -> Result<(), Error> {
        self.state().tenancy.release(kind, tenant, ids);
        Ok(())
    }
}

#[async_trait]
impl Webhooks for MemoryJobs {
    async fn register_job(&self, id: TaskId, url: &str, tenant: Option<&str>) -> Result<(), Error> {
        self.state()
            .tenancy
            .register(HookKind::Job, id, url, tenant, None);
        Ok(())
    }

    async fn register_batch(
        &self,
        id: TaskId,
        jobs: &[TaskId],
        url: &str,
        tenant: Option<&str>,
    ) -> Result<(), Error> {
        let mut state = self.state();
        let tenancy = &mut state.tenancy;
        tenancy.register(HookKind::Batch, id, url, tenant, Some(jobs.len()));
        for job in jobs {
            tenancy.batch_of_job.insert(*job, id);
        }
        Ok(())
    }

    async fn register_execution_batch(
        &self,
        batch: &ExecutionBatchRecord,
        url: &str,
    ) -> Result<(), Error> {
        let mut state = self.state();
        let tenancy = &mut state.tenancy;
        tenancy.register(
            HookKind::ExecutionBatch,
            batch.id,
            url,
            batch.tenant.as_deref(),
            Some(batch.items.len()),
        );
        for (_, execution) in &batch.items {
            tenancy.batch_of_execution.insert(*execution, batch.id);
        }
        tenancy.execution_batches.insert(batch.id, batch.clone());
        Ok(())
    }

    async fn execution_batch(&self, id: TaskId) -> Result<Option<ExecutionBatchRecord>, Error> {
        Ok(self.state().tenancy.execution_batches.get(&id).cloned())
    }

    async fn claim_due(
        &self,
        lease: Duration,
        max: usize,
    ) -> Result<Vec<(HookKind, TaskId)>, Error> {
        let now = proto::now_ms();
        let mut state = self.state();
        let due = &mut state.tenancy.due;
        let mut ready: Vec<((&'static str, TaskId), u64)> = due
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(key, at)| (*key, *at))
            .collect();
        ready.sort_by_key(|(_, at)| *at);
        ready.truncate(max);
        let lease_end = now + u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
        Ok(ready
            .into_iter()
            .filter_map(|(key, _)| {
                due.insert(key, lease_end);
                Some((kind_of(key.0)?, key.1))
            })
            .collect())
    }

    async fn hook(&self, kind: HookKind, id: TaskId) -> Result<Option<Hook>, Error> {
        Ok(self
            .state()
            .tenancy
            .hooks
            .get(&(kind.as_str(), id))
            .map(|hook| Hook {
                tenant: hook.tenant.clone(),
                since_ms: hook.since_ms,
                view: Webhook {
                    url: hook.url.clone(),
                    state: hook.state,
                    attempts: hook.attempts.clone(),
                },
            }))
    }

    async fn drop_due(&self, kind: HookKind, id: TaskId) -> Result<(), Error> {
        self.state().tenancy.due.remove(&(kind.as_str(), id));
        Ok(())
    }

    async fn record_attempt(
        &self,
        kind: HookKind,
        id: TaskId,
        attempt: &WebhookAttempt,
        outcome: AttemptOutcome,
    ) -> Result<(), Error> {
        let mut state = self.state();
        let tenancy = &mut state.tenancy;
        let key = (kind.as_str(), id);
        if let Some(hook) = tenancy.hooks.get_mut(&key) {
            hook.attempts.push(attempt.clone());
            match outcome {
                AttemptOutcome::RetryAt(at) => {
                    tenancy.due.insert(key, at);
                }
                AttemptOutcome::Delivered | AttemptOutcome::Failed => {
                    hook.state = if outcome == AttemptOutcome::Delivered {
                        WebhookState::Delivered
                    } else {
                        WebhookState::Failed
                    };
                    tenancy.due.remove(&key);
                }
            }
        }
        Ok(())
    }
}
