//! Webhooks waiting for their resource to end, due for delivery, and their attempts.
//!
//! | key | value |
//! | --- | --- |
//! | `{p}:hook:{kind}:{id}` | hash: `url`, `tenant`, `state` (`waiting` → `pending` → `delivered` / `failed`), `since` (ms the resource ended), for a batch `left` (jobs not ended) |
//! | `{p}:hook:{kind}:{id}:attempts` | list of attempts (JSON `WebhookAttempt`), oldest first |
//! | `{p}:job:{id}:batch` | the batch of this job (written with the batch, and by a batch webhook's registration): its webhook waits for the job, its long polls for the job's end |
//! | `{p}:exec:{id}:batch` | the execution batch whose webhook waits for this execution |
//! | `{p}:ebatch:{id}` | MessagePack `ExecutionBatchRecord`: an execution batch with a webhook |
//! | `{p}:hooks:due` | sorted set: `{kind}:{id}` by when its next attempt is due (ms) |
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

use crate::Error;

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

pub(crate) fn due_key(prefix: &str) -> String {
    format!("{prefix}:hooks:due")
}

pub(crate) fn hook_key(prefix: &str, kind: HookKind, id: TaskId) -> String {
    format!("{prefix}:hook:{}:{id}", kind.as_str())
}

pub(crate) fn batch_link_key(prefix: &str, job: TaskId) -> String {
    format!("{prefix}:job:{job}:batch")
}

pub(crate) fn execution_link_key(prefix: &str, execution: TaskId) -> String {
    format!("{prefix}:exec:{execution}:batch")
}

fn execution_batch_key(prefix: &str, id: TaskId) -> String {
    format!("{prefix}:ebatch:{id}")
}

/// KEYS: due set. ARGV: now ms, lease ms, max.
const CLAIM: &str = r#"
local due = redis.call('ZRANGE', KEYS[1], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, ARGV[3])
for _, member in ipairs(due) do
  redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + tonumber(ARGV[2]), member)
end
return due
"#;

impl crate::RedisStore {
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
        let key = hook_key(self.prefix(), kind, id);
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
impl Webhooks for crate::RedisStore {
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
            .map(|job| batch_link_key(self.prefix(), *job))
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
            .map(|(_, execution)| execution_link_key(self.prefix(), *execution))
            .collect();
        let mut record = redis::pipe();
        record
            .set_ex(
                execution_batch_key(self.prefix(), batch.id),
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
        self.get_msgpack(&execution_batch_key(self.prefix(), id))
            .await
    }

    async fn claim_due(
        &self,
        lease: Duration,
        max: usize,
    ) -> Result<Vec<(HookKind, TaskId)>, Error> {
        static SCRIPT: std::sync::LazyLock<redis::Script> =
            std::sync::LazyLock::new(|| redis::Script::new(CLAIM));
        let members: Vec<String> = SCRIPT
            .key(due_key(self.prefix()))
            .arg(proto::now_ms())
            .arg(u64::try_from(lease.as_millis()).unwrap_or(u64::MAX))
            .arg(max)
            .invoke_async(&mut self.connection())
            .await
            .map_err(crate::redis::backend)?;
        Ok(members
            .iter()
            .filter_map(|m| {
                let (kind, id) = m.split_once(':')?;
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
        let key = hook_key(self.prefix(), kind, id);
        let (fields, attempts): (std::collections::HashMap<String, String>, Vec<String>) =
            redis::pipe()
                .hgetall(&key)
                .lrange(format!("{key}:attempts"), 0, -1)
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
            .arg(due_key(self.prefix()))
            .arg(format!("{}:{id}", kind.as_str()))
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
        let key = hook_key(self.prefix(), kind, id);
        let member = format!("{}:{id}", kind.as_str());
        let ttl = self.ttl_secs() as i64;
        let mut pipe = redis::pipe();
        pipe.atomic()
            .rpush(
                format!("{key}:attempts"),
                serde_json::to_string(attempt).unwrap_or_default(),
            )
            .ignore()
            .expire(format!("{key}:attempts"), ttl)
            .ignore();
        match outcome {
            AttemptOutcome::RetryAt(at) => {
                pipe.zadd(due_key(self.prefix()), &member, at).ignore();
            }
            AttemptOutcome::Delivered | AttemptOutcome::Failed => {
                let state = if outcome == AttemptOutcome::Delivered {
                    "delivered"
                } else {
                    "failed"
                };
                pipe.hset(&key, "state", state)
                    .ignore()
                    .zrem(due_key(self.prefix()), &member)
                    .ignore();
            }
        }
        pipe.query_async::<()>(&mut self.connection())
            .await
            .map_err(crate::redis::backend)
    }
}
