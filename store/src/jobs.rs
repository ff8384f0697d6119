//! Job state of the generation pipeline.
//!
//! Keys: a job's under `{p}:job:{id}:` ([`crate::keys::JobKeys`]), a batch's
//! ([`crate::keys::batch`]), the unfinished jobs ([`crate::keys::unfinished_jobs`]).
//!
//! Invariant: a function's final outcome is stored and the function completed in one Lua
//! script: the function joins `done` and each dependant's counter drops by one; the
//! dependants that reach zero are returned to exactly one caller. A repeated completion (a
//! task taken again after its run stored the outcome) changes nothing and returns the
//! dependants that are ready but not done, so a caller that stopped before publishing them is
//! followed by one that publishes them (workers skip a function whose outcome is final).
//!
//! Starting a job (its plan, dependency counters, meta and `running` status) is one script
//! too, so a crash cannot leave a plan without counters. A function's final outcome is
//! written once: whichever run of a (redelivered, duplicated) task finishes first is the
//! outcome its dependants were built on, and a later run cannot replace it.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use proto::job::{Batch, FunctionOutcome, JobMeta, JobResult, JobStatus, Plan};
use proto::{Progress, TaskId};
use redis::AsyncCommands;

use crate::dag::{Effects, Integrate};
use crate::keys::{self, JobKeys};
use crate::redis::backend;
use crate::webhooks::HookKind;
use crate::{Error, RedisStore};

/// What completing a function made ready.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Completion {
    /// Functions whose last dependency this was.
    pub ready: Vec<String>,
    /// Every function of the plan is done.
    pub all_done: bool,
    /// False when this function was already done (a repeated event).
    pub first: bool,
    /// The completion starts the job's integration ([`crate::dag::Integrate::starts`]): the
    /// function failed, or every function is done.
    pub integrate: bool,
}

/// What a step of a job reads before it starts, in one round trip (Redis: one `MGET`).
#[derive(Debug, Clone, Default)]
pub struct JobView {
    pub meta: Option<JobMeta>,
    pub status: Option<JobStatus>,
    pub plan: Option<Plan>,
    /// The outcome of the function asked for, if any.
    pub function: Option<FunctionOutcome>,
}

/// What the integration of a job reads before it starts, in one round trip (Redis: one
/// script): the job's view, its result if it has one already (a redelivery), and the
/// outcome of every function of its plan there is.
#[derive(Debug, Clone, Default)]
pub struct IntegrationView {
    pub view: JobView,
    pub result: Option<JobResult>,
    /// By function name.
    pub functions: HashMap<String, FunctionOutcome>,
}

/// What starting a job did ([`JobStore::start_job`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    /// False when a plan was stored already (a task taken again), which then stands.
    pub first: bool,
    /// The job's status after it: `running`, or the final one it had.
    pub status: Option<JobStatus>,
}

/// What finishing a function did ([`JobStore::finish_function`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// False when a final outcome was stored already (which then stands, and whose run
    /// completes it).
    pub stored: bool,
    /// The job's status as the write saw it.
    pub status: Option<JobStatus>,
    /// What completing the function made ready; `None` when nothing was completed (not
    /// stored, or the job had ended).
    pub completion: Option<Completion>,
}

/// What storing an outcome did ([`JobStore::save_function`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Saved {
    /// False when a final outcome was stored already (which then stands).
    pub stored: bool,
    /// The job's status as the write saw it: a worker learns that its job ended without
    /// another read.
    pub status: Option<JobStatus>,
}

/// What a job has spent, as a charge to it answered ([`JobStore::spend_tokens`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spent {
    /// The job's status as the charge saw it.
    pub status: Option<JobStatus>,
    /// Every token its tasks have charged, this charge included.
    pub tokens: u64,
}

/// A progress event for SSE, with its stream id.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub id: String,
    pub event: Progress,
}

#[async_trait]
pub trait JobStore: Send + Sync + 'static {
    /// Records a new job, `queued`, among the unfinished ones.
    async fn create_job(&self, meta: &JobMeta) -> Result<(), Error>;
    /// Unfinished jobs submitted before `before_ms`, oldest first, at most `limit`.
    async fn unfinished_before(&self, before_ms: u64, limit: usize) -> Result<Vec<TaskId>, Error>;
    /// Drops `id` from the unfinished jobs (its state expired: nothing left to finish).
    async fn forget_job(&self, id: TaskId) -> Result<(), Error>;
    async fn job_meta(&self, id: TaskId) -> Result<Option<JobMeta>, Error>;
    async fn put_job_meta(&self, meta: &JobMeta) -> Result<(), Error>;
    /// Sets the status unless it is final already (`succeeded`, `failed`): a late writer
    /// cannot revive a finished job.
    async fn set_status(&self, id: TaskId, status: JobStatus) -> Result<(), Error>;
    async fn status(&self, id: TaskId) -> Result<Option<JobStatus>, Error>;
    /// Adds `tokens` to what the job's model calls have spent and answers the total with the
    /// job's status (Redis: one round trip). Every task of a job charges its calls here, so
    /// the job's budget is one count across the workers running its functions at once.
    async fn spend_tokens(&self, id: TaskId, tokens: u64) -> Result<Spent, Error>;
    /// The statuses of many jobs, in order (one round trip in Redis: a batch's answer).
    async fn statuses(&self, ids: &[TaskId]) -> Result<Vec<Option<JobStatus>>, Error> {
        let mut statuses = Vec::with_capacity(ids.len());
        for id in ids {
            statuses.push(self.status(*id).await?);
        }
        Ok(statuses)
    }
    /// Starts a planned job, once: stores `plan` and its dependency counters with `meta`
    /// (what planning spent), sets the status `running` unless it is final, and records the
    /// progress event `event` (Redis: one script). A plan stored already stands.
    async fn start_job(
        &self,
        meta: &JobMeta,
        plan: &Plan,
        event: Option<&Progress>,
    ) -> Result<Started, Error>;
    async fn plan(&self, id: TaskId) -> Result<Option<Plan>, Error>;
    /// Stores a partial outcome (a function's attempts so far) unless its final one is stored
    /// already, with the progress event `event`; answers the job's status too (Redis: one
    /// script). A final outcome goes through [`JobStore::finish_function`].
    async fn save_function(
        &self,
        id: TaskId,
        outcome: &FunctionOutcome,
        event: Option<&Progress>,
    ) -> Result<Saved, Error>;
    /// Stores a function's final outcome (unless one stands) with `attempt`, its last
    /// attempt's progress event, and completes the function in `plan` in the same step, as
    /// [`JobStore::complete_function`] does with `done` (Redis: one script), applying the
    /// outcome's [`Effects`] while the job runs: a completion that starts the integration
    /// sets `integrating` in the same step. Nothing is completed when another outcome stood
    /// (its run completes it) or the job has ended. `Finished::status` is the status after it.
    async fn finish_function(
        &self,
        id: TaskId,
        plan: &Plan,
        outcome: &FunctionOutcome,
        attempt: Option<&Progress>,
        done: Option<&Progress>,
    ) -> Result<Finished, Error>;
    async fn function(&self, id: TaskId, name: &str) -> Result<Option<FunctionOutcome>, Error>;
    /// The outcomes of `names`, in order (Redis: one `MGET`).
    async fn functions(
        &self,
        id: TaskId,
        names: &[String],
    ) -> Result<Vec<Option<FunctionOutcome>>, Error> {
        let mut outcomes = Vec::with_capacity(names.len());
        for name in names {
            outcomes.push(self.function(id, name).await?);
        }
        Ok(outcomes)
    }
    /// The job's meta, status and plan and the outcome of `function`, together.
    async fn view(&self, id: TaskId, function: Option<&str>) -> Result<JobView, Error> {
        Ok(JobView {
            meta: self.job_meta(id).await?,
            status: self.status(id).await?,
            plan: self.plan(id).await?,
            function: match function {
                Some(name) => self.function(id, name).await?,
                None => None,
            },
        })
    }
    /// The job's view, its result, and the outcomes of its plan's functions, together.
    async fn integration_view(&self, id: TaskId) -> Result<IntegrationView, Error> {
        let view = self.view(id, None).await?;
        let names: Vec<String> = view
            .plan
            .iter()
            .flat_map(|plan| plan.specs.iter().map(|s| s.name.clone()))
            .collect();
        let outcomes = self.functions(id, &names).await?;
        Ok(IntegrationView {
            view,
            result: self.result(id).await?,
            functions: names
                .into_iter()
                .zip(outcomes)
                .filter_map(|(name, outcome)| Some((name, outcome?)))
                .collect(),
        })
    }
    /// Marks `outcome`'s function of `plan` done, applying its [`Effects`], and returns what
    /// became ready (see the module docs); on the first completion, records the progress
    /// event `event` with it. For a function whose final outcome is stored
    /// ([`JobStore::finish_function`] completed it the first time); the status is the
    /// caller's to set.
    async fn complete_function(
        &self,
        id: TaskId,
        plan: &Plan,
        outcome: &FunctionOutcome,
        event: Option<&Progress>,
    ) -> Result<Completion, Error>;
    /// Records that the tasks of `names` were published (after the broker confirmed them).
    async fn mark_published(&self, id: TaskId, names: &[String]) -> Result<(), Error>;
    /// Of `names`, those not recorded as published: what a repeated completion may publish
    /// again.
    async fn unpublished(&self, id: TaskId, names: Vec<String>) -> Result<Vec<String>, Error>;
    /// Finishes the job, atomically: stores `result` unless one exists, and with it appends
    /// its `finished` progress event, sets the final status and charges `tenant`'s usage with
    /// what the result reports. Returns whether this call finished it; a job finishes once,
    /// with one result, one `finished` event, the status of that result and one charge.
    async fn finish_job(
        &self,
        id: TaskId,
        tenant: Option<&str>,
        result: &JobResult,
    ) -> Result<bool, Error>;
    async fn result(&self, id: TaskId) -> Result<Option<JobResult>, Error>;
    async fn push_event(&self, id: TaskId, event: &Progress) -> Result<(), Error>;
    /// Events after `after` (stream id; `None`: from the start). An event this process cannot
    /// read (written by a newer one) is left out.
    async fn events(&self, id: TaskId, after: Option<&str>) -> Result<Vec<StoredEvent>, Error>;
    /// The events after `after` as soon as there are any, waiting up to `timeout` (then
    /// none). The default polls; Redis wakes on the notice each new event publishes.
    async fn wait_events(
        &self,
        id: TaskId,
        after: Option<&str>,
        timeout: Duration,
    ) -> Result<Vec<StoredEvent>, Error> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let events = self.events(id, after).await?;
            if !events.is_empty() || tokio::time::Instant::now() >= deadline {
                return Ok(events);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    /// Stores a batch (kept as long as its jobs).
    async fn put_batch(&self, batch: &Batch) -> Result<(), Error>;
    async fn batch(&self, id: TaskId) -> Result<Option<Batch>, Error>;
    /// Woken when a job of batch `id` may have finished (create the watch before reading the
    /// batch, as [`crate::Watch::notified`] says); `None` when this store sends no such notices
    /// (the caller reads again on a timer).
    fn watch_batch(&self, _id: TaskId) -> Option<crate::Watch> {
        None
    }
}

fn corrupt(key: &str, e: impl std::fmt::Display) -> Error {
    Error::Corrupt {
        key: key.to_owned(),
        reason: e.to_string(),
    }
}

/// How often an event wait reads the stream without a notice.
const EVENTS_SAFETY_POLL: Duration = Duration::from_secs(5);

/// Progress events kept per job (about: Redis trims streams lazily); a job's whole history
/// is far shorter, so nothing is lost but a runaway writer is bounded.
const EVENTS_MAX_LEN: usize = 1000;

/// `complete(k, a, dependants)`: marking a function done, in the scripts that do it (the one
/// place where the dependants' counters go down).
const COMPLETION: &str = include_str!("lua/job_completion.lua");

/// Completes a function whose final outcome is stored (through [`complete_function_call`]).
static COMPLETE_FUNCTION: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(&format!(
        "{COMPLETION}{}",
        include_str!("lua/job_complete_function.lua")
    ))
});

/// Stores a final outcome and completes its function (through [`finish_function_call`]).
static FINISH_FUNCTION: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(&format!(
        "{COMPLETION}{}",
        include_str!("lua/job_finish_function.lua")
    ))
});

/// The integration's reads: meta, status, plan, result, then (function, outcome) for every
/// function of the plan (`pending` has one field per function, kept once its counter is
/// down to 0). KEYS: meta, status, plan, result, pending. ARGV: the function outcomes' key
/// prefix (the script learns the names from `pending`, so it completes the keys).
static INTEGRATION_VIEW: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("lua/job_integration_view.lua")));

/// Starts a planned job, once (through [`start_job_call`]).
static PUT_PLAN: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("lua/job_put_plan.lua")));

/// Sets a status unless the current one is final. KEYS: status. ARGV: status, ttl, the final
/// statuses ([`JobStatus::FINAL`])...
static SET_STATUS: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("lua/job_set_status.lua")));

/// Stores the result once, with its `finished` event and final status, and charges the
/// tenant's usage with it (`crate::usage`); makes the job's webhooks due (through
/// [`finish_job_call`]).
static FINISH_JOB: LazyLock<redis::Script> =
    LazyLock::new(|| crate::usage::charging(include_str!("lua/job_finish.lua")));

/// Stores a partial outcome unless the final one is stored, with its progress event if any;
/// answers whether it stored it and the job's status.
static PUT_FUNCTION: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("lua/job_put_function.lua")));

/// [`COMPLETE_FUNCTION`] of `name` of `plan`, its arguments in the script's order.
/// KEYS: done, pending, events. ARGV: function, the plan's size, ttl, event JSON or "",
/// [`EVENTS_MAX_LEN`], the job events channel, job id, dependants...
fn complete_function_call(
    store: &RedisStore,
    id: TaskId,
    name: &str,
    size: usize,
    effects: Effects<'_>,
    event: Option<&Progress>,
) -> redis::ScriptInvocation<'static> {
    let keys = JobKeys::new(store.prefix(), id);
    let mut invocation = COMPLETE_FUNCTION.prepare_invoke();
    invocation
        .key(keys.done())
        .key(keys.pending())
        .key(keys.events())
        .arg(name)
        .arg(size)
        .arg(store.ttl_secs())
        .arg(event.map(Progress::to_json).unwrap_or_default())
        .arg(EVENTS_MAX_LEN)
        .arg(keys::job_events_channel(store.prefix()))
        .arg(id.to_string());
    for dependant in effects.release {
        invocation.arg(dependant);
    }
    invocation
}

/// [`FINISH_FUNCTION`] of `outcome` of `plan`, its arguments in the script's order.
/// KEYS: outcome, final marker, status, events, done, pending. ARGV: outcome bytes, ttl,
/// attempt event JSON or "", done event JSON or "", [`EVENTS_MAX_LEN`], the job events
/// channel, job id, function, the plan's size, when it integrates ([`Integrate::as_str`]), the
/// integrating status, how many final statuses follow, the final statuses..., the dependants
/// it releases...
fn finish_function_call(
    store: &RedisStore,
    id: TaskId,
    size: usize,
    outcome: &FunctionOutcome,
    effects: Effects<'_>,
    attempt: Option<&Progress>,
    done: Option<&Progress>,
) -> redis::ScriptInvocation<'static> {
    let prefix = store.prefix();
    let keys = JobKeys::new(prefix, id);
    let name = &outcome.name;
    let mut invocation = FINISH_FUNCTION.prepare_invoke();
    invocation
        .key(keys.function(name))
        .key(keys.function_final(name))
        .key(keys.status())
        .key(keys.events())
        .key(keys.done())
        .key(keys.pending())
        .arg(proto::codec::encode(outcome))
        .arg(store.ttl_secs())
        .arg(attempt.map(Progress::to_json).unwrap_or_default())
        .arg(done.map(Progress::to_json).unwrap_or_default())
        .arg(EVENTS_MAX_LEN)
        .arg(keys::job_events_channel(prefix))
        .arg(id.to_string())
        .arg(name)
        .arg(size)
        .arg(effects.integrate.as_str())
        .arg(JobStatus::Integrating.as_str())
        .arg(JobStatus::FINAL.len())
        .arg(&JobStatus::FINAL.map(JobStatus::as_str)[..]);
    for dependant in effects.release {
        invocation.arg(dependant);
    }
    invocation
}

/// [`PUT_PLAN`] of `plan` for the job of `meta`, its arguments in the script's order.
/// KEYS: plan, pending, done, meta, status, events. ARGV: plan bytes, ttl, meta bytes, event
/// JSON or "", [`EVENTS_MAX_LEN`], the job events channel, job id, the running status, how
/// many final statuses follow, the final statuses..., then (function, dependency count)...
fn start_job_call(
    store: &RedisStore,
    meta: &JobMeta,
    plan: &Plan,
    event: Option<&Progress>,
) -> redis::ScriptInvocation<'static> {
    let prefix = store.prefix();
    let keys = JobKeys::new(prefix, meta.id);
    let mut invocation = PUT_PLAN.prepare_invoke();
    invocation
        .key(keys.plan())
        .key(keys.pending())
        .key(keys.done())
        .key(keys.meta())
        .key(keys.status())
        .key(keys.events())
        .arg(proto::codec::encode(plan))
        .arg(store.ttl_secs())
        .arg(proto::codec::encode(meta))
        .arg(event.map(Progress::to_json).unwrap_or_default())
        .arg(EVENTS_MAX_LEN)
        .arg(keys::job_events_channel(prefix))
        .arg(meta.id.to_string())
        .arg(JobStatus::Running.as_str())
        .arg(JobStatus::FINAL.len())
        .arg(&JobStatus::FINAL.map(JobStatus::as_str)[..]);
    for spec in &plan.specs {
        let unique: std::collections::BTreeSet<&String> = spec.dependencies.iter().collect();
        invocation.arg(&spec.name).arg(unique.len());
    }
    invocation
}

/// [`FINISH_JOB`] of job `id` with `result`, charged to `tenant`, its arguments in the
/// script's order.
/// KEYS: result, events, status, unfinished jobs, usage bucket, the tenant's jobs in flight
/// (`crate::quotas`), the job's webhook, the due webhooks, the job's batch link
/// (`crate::webhooks`). ARGV: result bytes, ttl, event JSON, status, id, [`EVENTS_MAX_LEN`],
/// usage ttl, now (ms), the batch webhooks' key prefix, the job events channel, the batches'
/// channel, the job's due member, the batches' due member prefix, then (field, n) of the
/// charge.
///
/// A job of a batch announces its batch on the batches' channel (`JobStore::watch_batch`).
/// The batch's webhook key and due member are completed with the link's value: names the
/// caller cannot know, as only the script reads the link (Redis standalone, as every
/// multi-key script here), so it gets their beginnings.
fn finish_job_call(
    store: &RedisStore,
    id: TaskId,
    tenant: Option<&str>,
    result: &JobResult,
) -> redis::ScriptInvocation<'static> {
    let prefix = store.prefix();
    let now = proto::now_ms();
    let keys = JobKeys::new(prefix, id);
    let (job, batch) = (HookKind::Job.as_str(), HookKind::Batch.as_str());
    let mut invocation = FINISH_JOB.prepare_invoke();
    invocation
        .key(keys.result())
        .key(keys.events())
        .key(keys.status())
        .key(keys::unfinished_jobs(prefix))
        .key(keys::usage(prefix, tenant, now))
        .key(keys::in_flight(
            prefix,
            crate::index::Kind::Jobs.as_str(),
            tenant,
        ))
        .key(keys::hook(prefix, job, id))
        .key(keys::hooks_due(prefix))
        .key(keys.batch_link())
        .arg(result.encode())
        .arg(store.ttl_secs())
        .arg(Progress::finished(result).to_json())
        .arg(result.status.as_str())
        .arg(id.to_string())
        .arg(EVENTS_MAX_LEN)
        .arg(store.usage_ttl_secs())
        .arg(now)
        .arg(keys::hook_prefix(prefix, batch))
        .arg(keys::job_events_channel(prefix))
        .arg(keys::batch_finished_channel(prefix))
        .arg(keys::due_member(job, id))
        .arg(keys::due_member_prefix(batch));
    for (field, value) in crate::usage::increments(&proto::api::UsageTotals::of_job(result)) {
        invocation.arg(field).arg(value);
    }
    invocation
}

/// A job status as stored (its name), or `Error::Corrupt` naming `key`.
fn parse_status(key: &str, name: Option<String>) -> Result<Option<JobStatus>, Error> {
    name.map(|n| serde_json::from_value(serde_json::Value::String(n)).map_err(|e| corrupt(key, e)))
        .transpose()
}

/// A job's meta, status and plan from the next three values read of `names` (their keys,
/// in that order); no function.
fn parse_view(
    names: &[String],
    next: &mut impl FnMut() -> Option<Vec<u8>>,
) -> Result<JobView, Error> {
    Ok(JobView {
        meta: parse_msgpack(&names[0], next())?,
        status: parse_status(
            &names[1],
            next().map(|b| String::from_utf8_lossy(&b).into_owned()),
        )?,
        plan: parse_msgpack(&names[2], next())?,
        function: None,
    })
}

/// A MessagePack value as stored, or `Error::Corrupt` naming `key`.
fn parse_msgpack<T: serde::de::DeserializeOwned>(
    key: &str,
    bytes: Option<Vec<u8>>,
) -> Result<Option<T>, Error> {
    bytes
        .map(|b| proto::codec::decode(&b).map_err(|e| corrupt(key, e)))
        .transpose()
}

#[async_trait]
impl JobStore for RedisStore {
    async fn create_job(&self, meta: &JobMeta) -> Result<(), Error> {
        let keys = JobKeys::new(self.prefix(), meta.id);
        let ttl = self.ttl_secs();
        redis::pipe()
            .atomic()
            .set_ex(keys.meta(), proto::codec::encode(meta), ttl)
            .ignore()
            .set_ex(keys.status(), JobStatus::Queued.as_str(), ttl)
            .ignore()
            .zadd(
                keys::unfinished_jobs(self.prefix()),
                meta.id.to_string(),
                meta.submitted_at_ms,
            )
            .ignore()
            .query_async::<()>(&mut self.connection())
            .await
            .map_err(backend)
    }

    async fn unfinished_before(&self, before_ms: u64, limit: usize) -> Result<Vec<TaskId>, Error> {
        let key = keys::unfinished_jobs(self.prefix());
        let ids: Vec<String> = redis::cmd("ZRANGE")
            .arg(&key)
            .arg("-inf")
            .arg(format!("({before_ms}"))
            .arg("BYSCORE")
            .arg("LIMIT")
            .arg(0)
            .arg(limit)
            .query_async(&mut self.connection())
            .await
            .map_err(backend)?;
        ids.iter()
            .map(|id| id.parse().map_err(|e| corrupt(&key, e)))
            .collect()
    }

    async fn forget_job(&self, id: TaskId) -> Result<(), Error> {
        self.connection()
            .zrem::<_, _, ()>(keys::unfinished_jobs(self.prefix()), id.to_string())
            .await
            .map_err(backend)
    }

    async fn job_meta(&self, id: TaskId) -> Result<Option<JobMeta>, Error> {
        let key = JobKeys::new(self.prefix(), id).meta();
        self.get_msgpack(&key).await
    }

    async fn put_job_meta(&self, meta: &JobMeta) -> Result<(), Error> {
        let key = JobKeys::new(self.prefix(), meta.id).meta();
        self.set_msgpack(&key, meta).await
    }

    async fn set_status(&self, id: TaskId, status: JobStatus) -> Result<(), Error> {
        let key = JobKeys::new(self.prefix(), id).status();
        SET_STATUS
            .key(key)
            .arg(status.as_str())
            .arg(self.ttl_secs())
            .arg(&JobStatus::FINAL.map(JobStatus::as_str)[..])
            .invoke_async::<i64>(&mut self.connection())
            .await
            .map(drop)
            .map_err(backend)
    }

    async fn status(&self, id: TaskId) -> Result<Option<JobStatus>, Error> {
        let key = JobKeys::new(self.prefix(), id).status();
        let name: Option<String> = self.connection().get(&key).await.map_err(backend)?;
        parse_status(&key, name)
    }

    async fn spend_tokens(&self, id: TaskId, tokens: u64) -> Result<Spent, Error> {
        let keys = JobKeys::new(self.prefix(), id);
        let (spent, name): (u64, Option<String>) = redis::pipe()
            .incr(keys.tokens(), tokens)
            .expire(
                keys.tokens(),
                i64::try_from(self.ttl_secs()).unwrap_or(i64::MAX),
            )
            .ignore()
            .get(keys.status())
            .query_async(&mut self.connection())
            .await
            .map_err(backend)?;
        Ok(Spent {
            status: parse_status(&keys.status(), name)?,
            tokens: spent,
        })
    }

    async fn statuses(&self, ids: &[TaskId]) -> Result<Vec<Option<JobStatus>>, Error> {
        if ids.is_empty() {
            return Ok(vec![]);
        }
        let keys: Vec<String> = ids
            .iter()
            .map(|id| JobKeys::new(self.prefix(), *id).status())
            .collect();
        let names: Vec<Option<String>> = redis::cmd("MGET")
            .arg(&keys)
            .query_async(&mut self.connection())
            .await
            .map_err(backend)?;
        keys.iter()
            .zip(names)
            .map(|(key, name)| {
                name.map(|n| {
                    serde_json::from_value(serde_json::Value::String(n))
                        .map_err(|e| corrupt(key, e))
                })
                .transpose()
            })
            .collect()
    }

    async fn start_job(
        &self,
        meta: &JobMeta,
        plan: &Plan,
        event: Option<&Progress>,
    ) -> Result<Started, Error> {
        let (first, status): (i64, Option<String>) = start_job_call(self, meta, plan, event)
            .invoke_async(&mut self.connection())
            .await
            .map_err(backend)?;
        Ok(Started {
            first: first == 1,
            status: parse_status(&JobKeys::new(self.prefix(), meta.id).status(), status)?,
        })
    }

    async fn plan(&self, id: TaskId) -> Result<Option<Plan>, Error> {
        let key = JobKeys::new(self.prefix(), id).plan();
        self.get_msgpack(&key).await
    }

    async fn save_function(
        &self,
        id: TaskId,
        outcome: &FunctionOutcome,
        event: Option<&Progress>,
    ) -> Result<Saved, Error> {
        let keys = JobKeys::new(self.prefix(), id);
        let (stored, status): (i64, Option<String>) = PUT_FUNCTION
            .key(keys.function(&outcome.name))
            .key(keys.function_final(&outcome.name))
            .key(keys.status())
            .key(keys.events())
            .arg(proto::codec::encode(outcome))
            .arg(self.ttl_secs())
            .arg(event.map(Progress::to_json).unwrap_or_default())
            .arg(EVENTS_MAX_LEN)
            .arg(keys::job_events_channel(self.prefix()))
            .arg(id.to_string())
            .invoke_async(&mut self.connection())
            .await
            .map_err(backend)?;
        Ok(Saved {
            stored: stored == 1,
            status: parse_status(&keys.status(), status)?,
        })
    }

    async fn finish_function(
        &self,
        id: TaskId,
        plan: &Plan,
        outcome: &FunctionOutcome,
        attempt: Option<&Progress>,
        done: Option<&Progress>,
    ) -> Result<Finished, Error> {
        debug_assert!(outcome.done, "only a final outcome finishes a function");
        let effects = Effects::of(plan, outcome);
        let call =
            finish_function_call(self, id, plan.specs.len(), outcome, effects, attempt, done);
        let (stored, status, first, all, ready): (i64, Option<String>, i64, i64, Vec<String>) =
            call.invoke_async(&mut self.connection())
                .await
                .map_err(backend)?;
        Ok(Finished {
            stored: stored == 1,
            status: parse_status(&JobKeys::new(self.prefix(), id).status(), status)?,
            completion: (first >= 0).then_some(Completion {
                ready,
                all_done: all == 1,
                first: first == 1,
                integrate: effects.integrate.starts(all == 1),
            }),
        })
    }

    async fn function(&self, id: TaskId, name: &str) -> Result<Option<FunctionOutcome>, Error> {
        let key = JobKeys::new(self.prefix(), id).function(name);
        self.get_msgpack(&key).await
    }

    async fn functions(
        &self,
        id: TaskId,
        names: &[String],
    ) -> Result<Vec<Option<FunctionOutcome>>, Error> {
        if names.is_empty() {
            return Ok(vec![]);
        }
        let keys = JobKeys::new(self.prefix(), id);
        let names: Vec<String> = names.iter().map(|name| keys.function(name)).collect();
        let values: Vec<Option<Vec<u8>>> = redis::cmd("MGET")
            .arg(&names)
            .query_async(&mut self.connection())
            .await
            .map_err(backend)?;
        names
            .iter()
            .zip(values)
            .map(|(key, bytes)| parse_msgpack(key, bytes))
            .collect()
    }

    async fn view(&self, id: TaskId, function: Option<&str>) -> Result<JobView, Error> {
        let keys = JobKeys::new(self.prefix(), id);
        let mut names = vec![keys.meta(), keys.status(), keys.plan()];
        if let Some(name) = function {
            names.push(keys.function(name));
        }
        let mut values: Vec<Option<Vec<u8>>> = redis::cmd("MGET")
            .arg(&names)
            .query_async(&mut self.connection())
            .await
            .map_err(backend)?;
        values.resize(names.len(), None);
        let mut values = values.into_iter();
        let mut next = || values.next().flatten();
        let mut view = parse_view(&names, &mut next)?;
        if function.is_some() {
            view.function = parse_msgpack(&names[3], next())?;
        }
        Ok(view)
    }

    async fn integration_view(&self, id: TaskId) -> Result<IntegrationView, Error> {
        let keys = JobKeys::new(self.prefix(), id);
        let names = [keys.meta(), keys.status(), keys.plan(), keys.result()];
        let values: Vec<Option<Vec<u8>>> = INTEGRATION_VIEW
            .key(&names[..])
            .key(keys.pending())
            .arg(keys.function_prefix())
            .invoke_async(&mut self.connection())
            .await
            .map_err(backend)?;
        let mut values = values.into_iter();
        let mut next = || values.next().flatten();
        let view = parse_view(&names, &mut next)?;
        let result = parse_msgpack(&names[3], next())?;
        let mut functions = HashMap::new();
        while let Some(name) = next() {
            let name = String::from_utf8_lossy(&name).into_owned();
            let key = keys.function(&name);
            if let Some(outcome) = parse_msgpack(&key, next())? {
                functions.insert(name, outcome);
            }
        }
        Ok(IntegrationView {
            view,
            result,
            functions,
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
        let call =
            complete_function_call(self, id, &outcome.name, plan.specs.len(), effects, event);
        let (first, all, ready): (i64, i64, Vec<String>) = call
            .invoke_async(&mut self.connection())
            .await
            .map_err(backend)?;
        Ok(Completion {
            ready,
            all_done: all == 1,
            first: first == 1,
            integrate: effects.integrate.starts(all == 1),
        })
    }

    async fn mark_published(&self, id: TaskId, names: &[String]) -> Result<(), Error> {
        if names.is_empty() {
            return Ok(());
        }
        let key = JobKeys::new(self.prefix(), id).published();
        redis::pipe()
            .sadd(&key, names)
            .ignore()
            .expire(&key, self.ttl_secs() as i64)
            .ignore()
            .query_async::<()>(&mut self.connection())
            .await
            .map_err(backend)
    }

    async fn unpublished(&self, id: TaskId, names: Vec<String>) -> Result<Vec<String>, Error> {
        if names.is_empty() {
            return Ok(names);
        }
        let key = JobKeys::new(self.prefix(), id).published();
        let member: Vec<bool> = redis::cmd("SMISMEMBER")
            .arg(&key)
            .arg(&names)
            .query_async(&mut self.connection())
            .await
            .map_err(backend)?;
        Ok(names
            .into_iter()
            .zip(member)
            .filter_map(|(name, published)| (!published).then_some(name))
            .collect())
    }

    async fn finish_job(
        &self,
        id: TaskId,
        tenant: Option<&str>,
        result: &JobResult,
    ) -> Result<bool, Error> {
        let finished: i64 = finish_job_call(self, id, tenant, result)
            .invoke_async(&mut self.connection())
            .await
            .map_err(backend)?;
        Ok(finished == 1)
    }

    async fn result(&self, id: TaskId) -> Result<Option<JobResult>, Error> {
        let key = JobKeys::new(self.prefix(), id).result();
        let bytes: Option<Vec<u8>> = self.connection().get(&key).await.map_err(backend)?;
        bytes
            .map(|b| JobResult::decode(&b).map_err(|e| corrupt(&key, e)))
            .transpose()
    }

    async fn push_event(&self, id: TaskId, event: &Progress) -> Result<(), Error> {
        let key = JobKeys::new(self.prefix(), id).events();
        let mut connection = self.connection();
        redis::pipe()
            .cmd("XADD")
            .arg(&key)
            .arg("MAXLEN")
            .arg("~")
            .arg(EVENTS_MAX_LEN)
            .arg("*")
            .arg("data")
            .arg(event.to_json())
            .ignore()
            .expire(&key, self.ttl_secs() as i64)
            .ignore()
            .publish(keys::job_events_channel(self.prefix()), id.to_string())
            .ignore()
            .query_async::<()>(&mut connection)
            .await
            .map_err(backend)
    }

    async fn events(&self, id: TaskId, after: Option<&str>) -> Result<Vec<StoredEvent>, Error> {
        let key = JobKeys::new(self.prefix(), id).events();
        let start = after.map_or_else(|| "-".to_owned(), |a| format!("({a}"));
        let reply: redis::streams::StreamRangeReply = self
            .connection()
            .xrange(&key, start, "+")
            .await
            .map_err(backend)?;
        Ok(reply
            .ids
            .into_iter()
            .filter_map(|entry| {
                let data = entry.get::<String>("data").unwrap_or_default();
                match serde_json::from_str(&data) {
                    Ok(event) => Some(StoredEvent {
                        id: entry.id,
                        event,
                    }),
                    Err(e) => {
                        tracing::debug!(%id, error = %e, "skipping a progress event this process cannot read");
                        None
                    }
                }
            })
            .collect())
    }

    async fn wait_events(
        &self,
        id: TaskId,
        after: Option<&str>,
        timeout: Duration,
    ) -> Result<Vec<StoredEvent>, Error> {
        // Woken by the notice each event publishes; the poll is only the safety net for a
        // notice lost in a reconnect (which wakes every waiter anyway).
        let events = self
            .after_notice(id, timeout, EVENTS_SAFETY_POLL, || async {
                let events = self.events(id, after).await?;
                Ok((!events.is_empty()).then_some(events))
            })
            .await?;
        Ok(events.unwrap_or_default())
    }

    async fn put_batch(&self, batch: &Batch) -> Result<(), Error> {
        // Each job's link to its batch: the finish script announces the batch with it
        // (`watch_batch`), and finds the batch's webhook through it.
        let ttl = self.ttl_secs();
        let mut pipe = redis::pipe();
        pipe.set_ex(
            keys::batch(self.prefix(), batch.id),
            proto::codec::encode(batch),
            ttl,
        )
        .ignore();
        let id = batch.id.to_string();
        for job in &batch.jobs {
            pipe.set_ex(JobKeys::new(self.prefix(), *job).batch_link(), &id, ttl)
                .ignore();
        }
        pipe.query_async::<()>(&mut self.connection())
            .await
            .map_err(backend)
    }

    fn watch_batch(&self, id: TaskId) -> Option<crate::Watch> {
        Some(self.watch_ids(&[id]))
    }

    async fn batch(&self, id: TaskId) -> Result<Option<Batch>, Error> {
        let key = keys::batch(self.prefix(), id);
        self.get_msgpack(&key).await
    }
}

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

/// How long job state is kept by default.
pub const DEFAULT_JOB_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

#[async_trait]
impl crate::usage::Usage for MemoryJobs {
    async fn usage(
        &self,
        tenant: Option<&str>,
        from_ms: u64,
        to_ms: u64,
    ) -> Result<proto::api::UsageTotals, Error> {
        Ok(self.usage_of(tenant, from_ms, to_ms))
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
