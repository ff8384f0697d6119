//! Webhooks waiting for their resource to end, due for delivery, and their attempts.
//!
//! Keys: a webhook's ([`crate::keys::hook`], [`crate::keys::hook_attempts`]), the due ones
//! ([`crate::keys::hooks_due`], members [`crate::keys::due_member`]), the links from the
//! resources a batch's webhook waits for ([`crate::keys::JobKeys::batch_link`],
//! [`crate::keys::execution_batch_link`]) and an execution batch's record
//! ([`crate::keys::execution_batch`]).
//!
//! A webhook becomes due in the same script that finishes its job (`JobStore::finish_job`):
//! a job's own at once; a batch's when the last of its jobs ends (a counter the script
//! decrements through the job's link). An execution batch's, likewise, in the script that
//! stores the verdict of its last execution (`Store::complete_execution`). So whoever ends a job (a worker integrating, a
//! coordinator failing or cancelling it) makes its webhooks due, and a crash cannot end a job
//! without them. Coordinators take due webhooks with a lease (the member's score moves to the
//! lease's end in the same script), so one delivers each attempt and a coordinator that dies
//! mid-attempt leaves it to another when the lease runs out.

use std::time::Duration;

use async_trait::async_trait;
use proto::TaskId;
use proto::api::{ExecutionBatchRecord, Webhook, WebhookAttempt, WebhookState};

use crate::{Error, RedisStore, keys};

/// What a webhook reports the end of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookKind {
    Job,
    Batch,
    ExecutionBatch,
}

impl HookKind {
    pub fn as_str(self) -> &'static str {
        match self {
            HookKind::Job => "job",
            HookKind::Batch => "batch",
            HookKind::ExecutionBatch => "execution_batch",
        }
    }
}

/// A stored webhook: where, for whom, how far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    pub tenant: Option<String>,
    /// When its resource ended (ms), once it has.
    pub since_ms: Option<u64>,
    pub view: Webhook,
}

#[async_trait]
pub trait Webhooks: Send + Sync + 'static {
    /// Records the webhook of job `id`, waiting for the job to end.
    async fn register_job(&self, id: TaskId, url: &str, tenant: Option<&str>) -> Result<(), Error>;
    /// Records the webhook of batch `id`, waiting for every one of `jobs` to end. Call it
    /// before any of the jobs exists: a job that ends at once (a cache hit) must find it.
    async fn register_batch(
        &self,
        id: TaskId,
        jobs: &[TaskId],
        url: &str,
        tenant: Option<&str>,
    ) -> Result<(), Error>;
    /// Records an execution batch and its webhook, waiting for every execution's verdict.
    /// Call it before any of them is queued.
    async fn register_execution_batch(
        &self,
        batch: &ExecutionBatchRecord,
        url: &str,
    ) -> Result<(), Error>;
    async fn execution_batch(&self, id: TaskId) -> Result<Option<ExecutionBatchRecord>, Error>;
    /// Up to `max` webhooks due now, each leased for `lease` (due again after it unless its
    /// attempt is recorded first).
    async fn claim_due(
        &self,
        lease: Duration,
        max: usize,
    ) -> Result<Vec<(HookKind, TaskId)>, Error>;
    async fn hook(&self, kind: HookKind, id: TaskId) -> Result<Option<Hook>, Error>;
    /// Forgets a due entry whose webhook is gone (expired with its resource).
    async fn drop_due(&self, kind: HookKind, id: TaskId) -> Result<(), Error>;
    /// Records an attempt; `next_ms` schedules the next one, or without it the webhook ends
    /// `delivered` or `failed`.
    async fn record_attempt(
        &self,
        kind: HookKind,
        id: TaskId,
        attempt: &WebhookAttempt,
        outcome: AttemptOutcome,
    ) -> Result<(), Error>;
}

/// What follows an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    Delivered,
    /// Try again at this time (ms).
    RetryAt(u64),
    Failed,
}

/// KEYS: due set. ARGV: now ms, lease ms, max.
static CLAIM: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("lua/webhooks_claim_due.lua")));

impl RedisStore {
    /// Records the webhook of `kind` `id`, waiting: for its own end (no `links`), or for each
    /// of the resources whose `links` (keys the end-of-work scripts read) point to it, counted
    /// in `left`. `pipe` carries what else goes in the same transaction.
    async fn register(
        &self,
        kind: HookKind,
        id: TaskId,
        url: &str,
        tenant: Option<&str>,
        links: &[String],
        mut pipe: redis::Pipeline,
    ) -> Result<(), Error> {
        let key = keys::hook(self.prefix(), kind.as_str(), id);
        let ttl = self.ttl_secs();
        let mut fields = vec![
            ("url", url.to_owned()),
            ("tenant", tenant.unwrap_or("").to_owned()),
            ("state", "waiting".to_owned()),
        ];
        if !links.is_empty() {
            fields.push(("left", links.len().to_string()));
        }
        pipe.atomic()
            .hset_multiple(&key, &fields)
            .ignore()
            .expire(&key, ttl as i64)
            .ignore();
        for link in links {
            pipe.set_ex(link, id.to_string(), ttl).ignore();
        }
        pipe.query_async::<()>(&mut self.connection())
            .await
            .map_err(crate::redis::backend)
    }
}

#[async_trait]
impl Webhooks for RedisStore {
    async fn register_job(&self, id: TaskId, url: &str, tenant: Option<&str>) -> Result<(), Error> {
        self.register(HookKind::Job, id, url, tenant, &[], redis::pipe())
            .await
    }

    async fn register_batch(
        &self,
        id: TaskId,
        jobs: &[TaskId],
        url: &str,
        tenant: Option<&str>,
    ) -> Result<(), Error> {
        let links: Vec<String> = jobs
            .iter()
            .map(|job| keys::JobKeys::new(self.prefix(), *job).batch_link())
            .collect();
        self.register(HookKind::Batch, id, url, tenant, &links, redis::pipe())
            .await
    }

    async fn register_execution_batch(
        &self,
        batch: &ExecutionBatchRecord,
        url: &str,
    ) -> Result<(), Error> {
        let links: Vec<String> = batch
            .items
            .iter()
            .map(|(_, execution)| keys::execution_batch_link(self.prefix(), *execution))
            .collect();
        let mut record = redis::pipe();
        record
            .set_ex(
                keys::execution_batch(self.prefix(), batch.id),
                proto::codec::encode(batch),
                self.ttl_secs(),
            )
            .ignore();
        self.register(
            HookKind::ExecutionBatch,
            batch.id,
            url,
            batch.tenant.as_deref(),
            &links,
            record,
        )
        .await
    }

    async fn execution_batch(&self, id: TaskId) -> Result<Option<ExecutionBatchRecord>, Error> {
        self.get_msgpack(&keys::execution_batch(self.prefix(), id))
            .await
    }

    async fn claim_due(
        &self,
        lease: Duration,
        max: usize,
    ) -> Result<Vec<(HookKind, TaskId)>, Error> {
        let members: Vec<String> = CLAIM
            .key(keys::hooks_due(self.prefix()))
            .arg(proto::now_ms())
            .arg(u64::try_from(lease.as_millis()).unwrap_or(u64::MAX))
            .arg(max)
            .invoke_async(&mut self.connection())
            .await
            .map_err(crate::redis::backend)?;
        Ok(members
            .iter()
            .filter_map(|m| {
                let (kind, id) = keys::split_due_member(m)?;
                let kind = match kind {
                    "job" => HookKind::Job,
                    "batch" => HookKind::Batch,
                    "execution_batch" => HookKind::ExecutionBatch,
                    _ => return None,
                };
                Some((kind, id.parse().ok()?))
            })
            .collect())
    }

    async fn hook(&self, kind: HookKind, id: TaskId) -> Result<Option<Hook>, Error> {
        let key = keys::hook(self.prefix(), kind.as_str(), id);
        let (fields, attempts): (std::collections::HashMap<String, String>, Vec<String>) =
            redis::pipe()
                .hgetall(&key)
                .lrange(keys::hook_attempts(self.prefix(), kind.as_str(), id), 0, -1)
                .query_async(&mut self.connection())
                .await
                .map_err(crate::redis::backend)?;
        let Some(url) = fields.get("url") else {
            return Ok(None);
        };
        let state = match fields.get("state").map(String::as_str) {
            Some("pending") => WebhookState::Pending,
            Some("delivered") => WebhookState::Delivered,
            Some("failed") => WebhookState::Failed,
            _ => WebhookState::Waiting,
        };
        Ok(Some(Hook {
            tenant: fields.get("tenant").filter(|t| !t.is_empty()).cloned(),
            since_ms: fields.get("since").and_then(|s| s.parse().ok()),
            view: Webhook {
                url: url.clone(),
                state,
                attempts: attempts
                    .iter()
                    .filter_map(|a| serde_json::from_str(a).ok())
                    .collect(),
            },
        }))
    }

    async fn drop_due(&self, kind: HookKind, id: TaskId) -> Result<(), Error> {
        redis::cmd("ZREM")
            .arg(keys::hooks_due(self.prefix()))
            .arg(keys::due_member(kind.as_str(), id))
            .query_async::<()>(&mut self.connection())
            .await
            .map_err(crate::redis::backend)
    }

    async fn record_attempt(
        &self,
        kind: HookKind,
        id: TaskId,
        attempt: &WebhookAttempt,
        outcome: AttemptOutcome,
    ) -> Result<(), Error> {
        let key = keys::hook(self.prefix(), kind.as_str(), id);
        let attempts = keys::hook_attempts(self.prefix(), kind.as_str(), id);
        let member = keys::due_member(kind.as_str(), id);
        let ttl = self.ttl_secs() as i64;
        let mut pipe = redis::pipe();
        pipe.atomic()
            .rpush(
                &attempts,
                serde_json::to_string(attempt).unwrap_or_default(),
            )
            .ignore()
            .expire(&attempts, ttl)
            .ignore();
        match outcome {
            AttemptOutcome::RetryAt(at) => {
                pipe.zadd(keys::hooks_due(self.prefix()), &member, at)
                    .ignore();
            }
            AttemptOutcome::Delivered | AttemptOutcome::Failed => {
                let state = if outcome == AttemptOutcome::Delivered {
                    "delivered"
                } else {
                    "failed"
                };
                pipe.hset(&key, "state", state)
                    .ignore()
                    .zrem(keys::hooks_due(self.prefix()), &member)
                    .ignore();
            }
        }
        pipe.query_async::<()>(&mut self.connection())
            .await
            .map_err(crate::redis::backend)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_keep_the_names_their_keys_and_due_members_carry() {
        // Part of `keys::hook` and `keys::due_member`, and read back by `claim_due`.
        let names =
            [HookKind::Job, HookKind::Batch, HookKind::ExecutionBatch].map(HookKind::as_str);
        assert_eq!(names, ["job", "batch", "execution_batch"]);
    }
}
