//! Per-tenant quotas on submitted work: how much may be in flight, and how many model tokens
//! and sandbox CPU seconds a period's finished work may have used.
//!
//! | key | value |
//! | --- | --- |
//! | `{p}:inflight:{kind}:{tenant}` | sorted set: the tenant's admitted, unfinished jobs (or executions) by admission time (ms) |
//!
//! Admission is one script: it drops members older than the caller's horizon (work that can
//! no longer be running: a job past `job_deadline`, an execution past its result's time to
//! live), refuses when the new work would pass the in-flight limit or when the period's usage
//! (`crate::usage`'s hourly hashes) has reached a limit, and otherwise adds the new ids, so two
//! coordinators admitting at once cannot both take the last place. The scripts that finish a
//! job or store a verdict remove its id (`finish_job`, `complete_execution`).
//!
//! Only tenants with an in-flight limit are tracked, so a limit configured later counts the
//! work admitted after it.

use async_trait::async_trait;
use proto::TaskId;

use crate::Error;
use crate::index::Kind;

pub(crate) fn in_flight_key(prefix: &str, kind: Kind, tenant: Option<&str>) -> String {
    format!(
        "{prefix}:inflight:{}:{}",
        kind.as_str(),
        tenant.unwrap_or("#")
    )
}

/// What one admission checks; `None`: no such limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub in_flight: Option<u64>,
    /// Prompt plus completion tokens of the period's finished work.
    pub tokens: Option<u64>,
    /// Sandbox CPU milliseconds of the period's finished work.
    pub cpu_ms: Option<u64>,
    /// The period's start (ms); usage is read from there to now.
    pub period_start_ms: u64,
    /// In-flight members admitted before this (ms) are dropped first.
    pub horizon_ms: u64,
}

/// Which limit refused, and where the tenant stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `current` in flight already; the new work would pass the limit.
    InFlight {
        current: u64,
    },
    Tokens {
        used: u64,
    },
    Cpu {
        used_ms: u64,
    },
}

#[async_trait]
pub trait Quotas: Send + Sync + 'static {
    /// Admits `ids` (all or none) for `tenant`, or says which limit refuses them.
    async fn admit(
        &self,
        kind: Kind,
        tenant: Option<&str>,
        ids: &[TaskId],
        limits: &Limits,
    ) -> Result<Result<(), Refusal>, Error>;

    /// Gives back the places of `ids` that were admitted but never created.
    async fn release(&self, kind: Kind, tenant: Option<&str>, ids: &[TaskId]) -> Result<(), Error>;
}

/// KEYS: in-flight set, then the period's usage hashes. ARGV: now ms, horizon ms, in-flight
/// limit (-1: none), token limit (-1), CPU ms limit (-1), time to live, ids...
const ADMIT: &str = r#"
local limit, tokens_limit, cpu_limit = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
if limit >= 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[2])
  local n = redis.call('ZCARD', KEYS[1])
  if n + (#ARGV - 6) > limit then return {'in_flight', n} end
end
if tokens_limit >= 0 or cpu_limit >= 0 then
  local tokens, cpu = 0, 0
  for i = 2, #KEYS do
    local v = redis.call('HMGET', KEYS[i], 'prompt_tokens', 'completion_tokens', 'sandbox_cpu_ms')
    tokens = tokens + (tonumber(v[1]) or 0) + (tonumber(v[2]) or 0)
    cpu = cpu + (tonumber(v[3]) or 0)
  end
  if tokens_limit >= 0 and tokens >= tokens_limit then return {'tokens', tokens} end
  if cpu_limit >= 0 and cpu >= cpu_limit then return {'cpu', cpu} end
end
if limit >= 0 then
  for i = 7, #ARGV do redis.call('ZADD', KEYS[1], ARGV[1], ARGV[i]) end
  redis.call('EXPIRE', KEYS[1], ARGV[6])
end
return {'ok', 0}
"#;

fn limit_arg(limit: Option<u64>) -> i64 {
    limit.map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX))
}

#[async_trait]
impl Quotas for crate::RedisStore {
    async fn admit(
        &self,
        kind: Kind,
        tenant: Option<&str>,
        ids: &[TaskId],
        limits: &Limits,
    ) -> Result<Result<(), Refusal>, Error> {
        static SCRIPT: std::sync::LazyLock<redis::Script> =
            std::sync::LazyLock::new(|| redis::Script::new(ADMIT));
        let now = proto::now_ms();
        let mut invocation = SCRIPT.prepare_invoke();
        invocation.key(in_flight_key(self.prefix(), kind, tenant));
        if limits.tokens.is_some() || limits.cpu_ms.is_some() {
            for hour in crate::usage::hours(limits.period_start_ms, now + 1) {
                invocation.key(crate::usage::bucket_key(self.prefix(), tenant, hour));
            }
        }
        invocation
            .arg(now)
            .arg(limits.horizon_ms)
            .arg(limit_arg(limits.in_flight))
            .arg(limit_arg(limits.tokens))
            .arg(limit_arg(limits.cpu_ms))
            .arg(self.ttl_secs());
        for id in ids {
            invocation.arg(id.to_string());
        }
        let (verdict, amount): (String, u64) = invocation
            .invoke_async(&mut self.connection())
            .await
            .map_err(crate::redis::backend)?;
        Ok(match verdict.as_str() {
            "in_flight" => Err(Refusal::InFlight { current: amount }),
            "tokens" => Err(Refusal::Tokens { used: amount }),
            "cpu" => Err(Refusal::Cpu { used_ms: amount }),
            _ => Ok(()),
        })
    }

    async fn release(&self, kind: Kind, tenant: Option<&str>, ids: &[TaskId]) -> Result<(), Error> {
        if ids.is_empty() {
            return Ok(());
        }
        let members: Vec<String> = ids.iter().map(ToString::to_string).collect();
        redis::cmd("ZREM")
            .arg(in_flight_key(self.prefix(), kind, tenant))
            .arg(members)
            .query_async::<()>(&mut self.connection())
            .await
            .map_err(crate::redis::backend)
    }
}
