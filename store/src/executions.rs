//! Executions in Redis: [`RedisStore`]'s [`Store`] implementation (each execution's
//! metadata and verdict, and the wait for a verdict).
//!
//! A verdict is stored once, in a script that also charges the tenant's usage
//! (`crate::usage`), frees the tenant's place in flight (`crate::quotas`) and, after an
//! execution batch's last verdict, makes the batch's webhook due (`crate::webhooks`).

use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use proto::{ExecutionMeta, ExecutionResult, TaskId};
use redis::AsyncCommands;

use crate::index::Kind;
use crate::keys;
use crate::redis::backend;
use crate::webhooks::HookKind;
use crate::{Error, RedisStore, Store};

/// Stores a verdict once, charging its tenant when it does, and notifies waiters either way
/// (through [`complete_execution_call`]).
static COMPLETE_EXECUTION: LazyLock<redis::Script> =
    LazyLock::new(|| crate::usage::charging(include_str!("lua/execution_complete.lua")));

/// [`COMPLETE_EXECUTION`] for `id`'s verdict `result`, its arguments in the script's order.
/// KEYS: result, usage bucket, the tenant's executions in flight, the execution's batch
/// link, the due webhooks. ARGV: result bytes, ttl, the done channel, id, usage ttl, now
/// (ms), the execution batch webhooks' key prefix and their due members' prefix (the script
/// reads the batch's id from the link, so it completes both names), then (field, n) of the
/// charge.
fn complete_execution_call(
    store: &RedisStore,
    id: TaskId,
    tenant: Option<&str>,
    result: &ExecutionResult,
) -> redis::ScriptInvocation<'static> {
    let prefix = store.prefix();
    let now = proto::now_ms();
    let hook = HookKind::ExecutionBatch.as_str();
    let mut invocation = COMPLETE_EXECUTION.prepare_invoke();
    invocation
        .key(keys::execution_result(prefix, id))
        .key(keys::usage(prefix, tenant, now))
        .key(keys::in_flight(prefix, Kind::Executions.as_str(), tenant))
        .key(keys::execution_batch_link(prefix, id))
        .key(keys::hooks_due(prefix))
        .arg(result.encode())
        .arg(store.ttl_secs())
        .arg(keys::execution_done_channel(prefix))
        .arg(id.to_string())
        .arg(store.usage_ttl_secs())
        .arg(now)
        .arg(keys::hook_prefix(prefix, hook))
        .arg(keys::due_member_prefix(hook));
    for (field, value) in crate::usage::increments(&proto::api::UsageTotals::of_execution(result)) {
        invocation.arg(field).arg(value);
    }
    invocation
}

#[async_trait]
impl Store for RedisStore {
    async fn create_execution(&self, id: TaskId, meta: &ExecutionMeta) -> Result<(), Error> {
        let key = keys::execution_meta(self.prefix(), id);
        self.connection()
            .set_ex::<_, _, ()>(key, meta.encode(), self.ttl_secs())
            .await
            .map_err(backend)
    }

    async fn execution_meta(&self, id: TaskId) -> Result<Option<ExecutionMeta>, Error> {
        let key = keys::execution_meta(self.prefix(), id);
        match self.get_bytes(&key).await? {
            None => Ok(None),
            Some(bytes) => ExecutionMeta::decode(&bytes)
                .map(Some)
                .map_err(|e| Error::Corrupt {
                    key,
                    reason: e.to_string(),
                }),
        }
    }

    async fn execution_result(&self, id: TaskId) -> Result<Option<ExecutionResult>, Error> {
        let key = keys::execution_result(self.prefix(), id);
        match self.get_bytes(&key).await? {
            None => Ok(None),
            Some(bytes) => ExecutionResult::decode(&bytes)
                .map(Some)
                .map_err(|e| Error::Corrupt {
                    key,
                    reason: e.to_string(),
                }),
        }
    }

    async fn execution_results(
        &self,
        ids: &[TaskId],
    ) -> Result<Vec<Option<ExecutionResult>>, Error> {
        let mut results = Vec::with_capacity(ids.len());
        // One round trip per chunk instead of one per execution.
        for chunk in ids.chunks(512) {
            let keys: Vec<String> = chunk
                .iter()
                .map(|id| keys::execution_result(self.prefix(), *id))
                .collect();
            let values: Vec<Option<Vec<u8>>> = redis::cmd("MGET")
                .arg(&keys)
                .query_async(&mut self.connection())
                .await
                .map_err(backend)?;
            for (key, value) in keys.into_iter().zip(values) {
                results.push(match value {
                    None => None,
                    Some(bytes) => {
                        Some(ExecutionResult::decode(&bytes).map_err(|e| Error::Corrupt {
                            key,
                            reason: e.to_string(),
                        })?)
                    }
                });
            }
        }
        Ok(results)
    }

    async fn complete_execution(
        &self,
        id: TaskId,
        tenant: Option<&str>,
        result: &ExecutionResult,
    ) -> Result<bool, Error> {
        let stored: i64 = complete_execution_call(self, id, tenant, result)
            .invoke_async(&mut self.connection())
            .await
            .map_err(backend)?;
        Ok(stored == 1)
    }

    async fn wait_execution(
        &self,
        id: TaskId,
        timeout: Duration,
    ) -> Result<Option<ExecutionResult>, Error> {
        self.after_notice(id, timeout, self.poll_interval(), || {
            self.execution_result(id)
        })
        .await
    }

    fn watch(&self, ids: &[TaskId]) -> Option<crate::Watch> {
        Some(self.watch_ids(ids))
    }

    async fn health(&self) -> Result<(), String> {
        self.ping().await
    }
}
