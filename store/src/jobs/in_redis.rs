//! [`JobStore`] on Redis: each operation that must not be split (a job's start, a function's
//! finish or completion, a job's end) is one Lua script.

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use proto::agent::AgentStep;
use proto::job::{Batch, FunctionOutcome, JobMeta, JobResult, JobStatus, Plan};
use proto::{Progress, TaskId};
use redis::AsyncCommands;

use super::{
    Completion, Finished, IntegrationView, JobStore, JobView, Saved, Spent, Started, StepRecorded,
    StoredEvent,
};
use crate::dag::Effects;
use crate::keys::{self, JobKeys};
use crate::redis::backend;
use crate::webhooks::HookKind;
use crate::{Error, RedisStore};

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
const COMPLETION: &str = include_str!("../lua/job_completion.lua");

/// Completes a function whose final outcome is stored (through [`complete_function_call`]).
static COMPLETE_FUNCTION: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(&format!(
        "{COMPLETION}{}",
        include_str!("../lua/job_complete_function.lua")
    ))
});

/// Stores a final outcome and completes its function (through [`finish_function_call`]).
static FINISH_FUNCTION: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(&format!(
        "{COMPLETION}{}",
        include_str!("../lua/job_finish_function.lua")
    ))
});

/// The integration's reads: meta, status, plan, result, then (function, outcome) for every
/// function of the plan (`pending` has one field per function, kept once its counter is
/// down to 0). KEYS: meta, status, plan, result, pending. ARGV: the function outcomes' key
/// prefix (the script learns the names from `pending`, so it completes the keys).
static INTEGRATION_VIEW: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("../lua/job_integration_view.lua")));

/// Starts a planned job, once (through [`start_job_call`]).
static PUT_PLAN: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("../lua/job_put_plan.lua")));

/// Sets a status unless the current one is final. KEYS: status. ARGV: status, ttl, the final
/// statuses ([`JobStatus::FINAL`])...
static SET_STATUS: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("../lua/job_set_status.lua")));

/// Stores the result once, with its `finished` event and final status, and charges the
/// tenant's usage with it (`crate::usage`); makes the job's webhooks due (through
/// [`finish_job_call`]).
static FINISH_JOB: LazyLock<redis::Script> =
    LazyLock::new(|| crate::usage::charging(include_str!("../lua/job_finish.lua")));

/// Records an agent job's step at its index, once, with its event.
static RECORD_STEP: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("../lua/job_record_step.lua")));

/// Stores a partial outcome unless the final one is stored, with its progress event if any;
/// answers whether it stored it and the job's status.
static PUT_FUNCTION: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("../lua/job_put_function.lua")));

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

    async fn record_step(&self, id: TaskId, step: &AgentStep) -> Result<StepRecorded, Error> {
        let keys = JobKeys::new(self.prefix(), id);
        let event = Progress::AgentStep { step: step.clone() };
        let (done, length, status): (i64, u32, String) = RECORD_STEP
            .key(keys.steps())
            .key(keys.status())
            .key(keys.events())
            .arg(step.index())
            .arg(proto::codec::encode(step))
            .arg(self.ttl_secs())
            .arg(event.to_json())
            .arg(EVENTS_MAX_LEN)
            .arg(keys::job_events_channel(self.prefix()))
            .arg(id.to_string())
            .arg(&JobStatus::FINAL.map(JobStatus::as_str)[..])
            .invoke_async(&mut self.connection())
            .await
            .map_err(backend)?;
        Ok(match done {
            1 => StepRecorded::Yes,
            0 => StepRecorded::Taken { length },
            _ => match parse_status(&keys.status(), Some(status))? {
                Some(status) => StepRecorded::Ended(status),
                None => return Err(corrupt(&keys.status(), "an ended job without a status")),
            },
        })
    }

    async fn steps(&self, id: TaskId) -> Result<Vec<AgentStep>, Error> {
        let key = JobKeys::new(self.prefix(), id).steps();
        let items: Vec<Vec<u8>> = self
            .connection()
            .lrange(&key, 0, -1)
            .await
            .map_err(backend)?;
        items
            .iter()
            .map(|b| proto::codec::decode(b).map_err(|e| corrupt(&key, e)))
            .collect()
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
