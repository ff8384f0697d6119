//! Shared state in Redis.
//!
//! [`Store`] is what the rest of the system needs from Redis: execution metadata and results,
//! and a way to wait for a result. [`redis::RedisStore`] is the real implementation (a lazy,
//! self-reconnecting `ConnectionManager`; completion notices over RESP3 pub/sub with automatic
//! resubscription); [`memory::MemoryStore`] is an in-process fake for unit tests.
//!
//! Every Redis name (key or channel) is built in [`keys`]; every Lua script is a file of
//! `src/lua/`, included by the module that runs it.
//!
//! Invariants:
//! - a result is written once (`SET NX`): a task delivered twice cannot overwrite the first
//!   verdict, so at-least-once delivery still has one effect.
//! - a completion notice is only a hint; waiters re-read the key on every wake-up and poll it
//!   at a fixed interval, so a notice lost during a Redis reconnect delays an answer but never
//!   loses it.

pub mod cache;
pub mod dag;
mod executions;
pub mod idempotency;
pub mod index;
pub mod jobs;
pub mod keys;
pub mod lessons;
pub mod limits;
pub mod memory;
mod memory_tenancy;
mod pauses;
pub mod presence;
pub mod quotas;
pub mod redis;
pub mod sessions;
mod stores;
pub mod tenants;
pub mod usage;
pub mod webhooks;

use std::time::Duration;

use async_trait::async_trait;
use proto::{ExecutionMeta, ExecutionResult, TaskId};
use serde::{Deserialize, Serialize};

pub use crate::redis::RedisStore;
pub use cache::{CacheStats, CacheStore, MemoryCache};
pub use idempotency::{Answer, Claimed, Idempotency, MemoryIdempotency};
pub use index::{Index, MemoryIndex};
pub use jobs::{
    Completion, Finished, IntegrationView, JobStore, JobView, MemoryJobs, Saved, Spent, Started,
    StepRecorded, StoredEvent,
};
pub use lessons::{Added, Bounds, LessonSet, Lessons, Snapshot, Stored, Used};
pub use limits::{Decision, Meters, RedisLimits};
pub use memory::MemoryStore;
pub use presence::{Generators, LiveWorker, MemoryPresence, Presence};
pub use quotas::Quotas;
pub use sessions::{Checkpoint, Created, Kept, KeptCheckpoint, NewCheckpoint, Sessions};
pub use stores::Stores;
pub use tenants::{MemoryTenants, Tenants};
pub use usage::Usage;
pub use webhooks::Webhooks;

/// Store settings (`[store]` in `codegen.toml`, `CODEGEN__STORE__*` in the environment).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// Redis URL.
    pub url: String,
    /// Prefix of every key, so clusters can share a Redis.
    pub prefix: String,
    /// How long execution metadata and results are kept.
    #[serde(with = "humantime_serde")]
    pub result_ttl: Duration,
    /// Per-command timeout; a command past it counts as Redis being unavailable.
    #[serde(with = "humantime_serde")]
    pub response_timeout: Duration,
    /// How often a waiter re-reads a result it has not been notified about.
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    /// How long each tenant's hourly usage totals are kept (`GET /v1/usage`).
    #[serde(with = "humantime_serde")]
    pub usage_retention: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379/".into(),
            prefix: "codegen".into(),
            result_ttl: Duration::from_secs(24 * 3600),
            response_timeout: Duration::from_secs(2),
            poll_interval: Duration::from_millis(500),
            usage_retention: usage::DEFAULT_RETENTION,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Redis cannot be reached or did not answer in time; worth retrying.
    #[error("redis unavailable: {0}")]
    Unavailable(String),
    /// A stored value could not be decoded; retrying will not help.
    #[error("corrupt value at {key}: {reason}")]
    Corrupt { key: String, reason: String },
    /// The configuration is unusable (e.g. a malformed URL).
    #[error("invalid redis configuration: {0}")]
    Config(String),
}

impl Error {
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Unavailable(_))
    }
}

/// What the rest of the system needs from the shared state store.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Records an accepted execution before its task is published.
    async fn create_execution(&self, id: TaskId, meta: &ExecutionMeta) -> Result<(), Error>;

    async fn execution_meta(&self, id: TaskId) -> Result<Option<ExecutionMeta>, Error>;

    async fn execution_result(&self, id: TaskId) -> Result<Option<ExecutionResult>, Error>;

    /// The results of many executions at once (`None` where there is none yet), in order.
    async fn execution_results(
        &self,
        ids: &[TaskId],
    ) -> Result<Vec<Option<ExecutionResult>>, Error> {
        let mut results = Vec::with_capacity(ids.len());
        for id in ids {
            results.push(self.execution_result(*id).await?);
        }
        Ok(results)
    }

    /// Stores `result` unless a result already exists and notifies waiters; the one call that
    /// stores it charges `tenant`'s usage with it. Returns whether this call stored it (false:
    /// an earlier delivery of the same task got there first).
    async fn complete_execution(
        &self,
        id: TaskId,
        tenant: Option<&str>,
        result: &ExecutionResult,
    ) -> Result<bool, Error>;

    /// Waits up to `timeout` for the result of `id`.
    async fn wait_execution(
        &self,
        id: TaskId,
        timeout: Duration,
    ) -> Result<Option<ExecutionResult>, Error>;

    /// `Ok` when the store answers; otherwise why not, for `/readyz`.
    async fn health(&self) -> Result<(), String>;

    /// Watches the verdicts of `ids`: the watch is woken whenever one of them may have been
    /// stored, so a caller waiting for many re-reads on a notice instead of polling. `None`:
    /// this store sends no notices (the caller polls).
    fn watch(&self, _ids: &[TaskId]) -> Option<Watch> {
        None
    }
}

/// A watch on many executions' verdicts (`Store::watch`), or on a batch's finished jobs
/// (`JobStore::watch_batch`); dropping it stops watching.
#[derive(Debug)]
pub struct Watch {
    notify: std::sync::Arc<tokio::sync::Notify>,
    ids: Vec<TaskId>,
    /// Every watch of an id: two watches of the same id (two clients of one batch) both wake.
    watchers: std::sync::Arc<dashmap::DashMap<TaskId, Vec<std::sync::Arc<tokio::sync::Notify>>>>,
}

impl Watch {
    /// Woken by the next notice for any watched id (create it before reading, so a notice
    /// between the read and the wait is not missed: `enable` it, then read, then await).
    pub fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        for id in &self.ids {
            if let Some(mut watches) = self.watchers.get_mut(id) {
                watches.retain(|notify| !std::sync::Arc::ptr_eq(notify, &self.notify));
            }
            self.watchers.remove_if(id, |_, watches| watches.is_empty());
        }
    }
}
