//! Per-tenant quotas on submitted work: how much may be in flight, and how many model tokens
//! and sandbox CPU seconds a period's finished work may have used.
//!
//! In Redis: one sorted set per kind and tenant, its admitted, unfinished jobs (or executions)
//! by admission time ([`crate::keys::in_flight`]).
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

use std::sync::LazyLock;

use async_trait::async_trait;
use proto::TaskId;

use crate::index::Kind;
use crate::{Error, RedisStore, keys};

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

/// Admits ids, all or none, or names the limit that refuses them (through [`admit_call`]).
static ADMIT: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("lua/quotas_admit.lua")));

/// [`ADMIT`] of `ids` for `tenant`'s `kind`, its arguments in the script's order.
/// KEYS: the in-flight set, then the period's usage hashes (only when a usage limit is set).
/// ARGV: now ms, horizon ms, in-flight limit (-1: none), token limit (-1), CPU ms limit (-1),
/// time to live, ids...
fn admit_call(
    store: &RedisStore,
    kind: Kind,
    tenant: Option<&str>,
    ids: &[TaskId],
    limits: &Limits,
) -> redis::ScriptInvocation<'static> {
    let prefix = store.prefix();
    let now = proto::now_ms();
    let mut invocation = ADMIT.prepare_invoke();
    invocation.key(keys::in_flight(prefix, kind.as_str(), tenant));
    if limits.tokens.is_some() || limits.cpu_ms.is_some() {
        for hour in crate::usage::hours(limits.period_start_ms, now + 1) {
            invocation.key(keys::usage(prefix, tenant, hour));
        }
    }
    invocation
        .arg(now)
        .arg(limits.horizon_ms)
        .arg(limit_arg(limits.in_flight))
        .arg(limit_arg(limits.tokens))
        .arg(limit_arg(limits.cpu_ms))
        .arg(store.ttl_secs());
    for id in ids {
        invocation.arg(id.to_string());
    }
    invocation
}

fn limit_arg(limit: Option<u64>) -> i64 {
    limit.map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX))
}

#[async_trait]
impl Quotas for RedisStore {
    async fn admit(
        &self,
        kind: Kind,
        tenant: Option<&str>,
        ids: &[TaskId],
        limits: &Limits,
    ) -> Result<Result<(), Refusal>, Error> {
        let (verdict, amount): (String, u64) = admit_call(self, kind, tenant, ids, limits)
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
            .arg(keys::in_flight(self.prefix(), kind.as_str(), tenant))
            .arg(members)
            .query_async::<()>(&mut self.connection())
            .await
            .map_err(crate::redis::backend)
    }
}
