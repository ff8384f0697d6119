//! Redis through `redis::aio::ConnectionManager`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use dashmap::DashMap;
use proto::keys::Keys;
use proto::{ExecutionMeta, ExecutionResult, TaskId};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, IntoConnectionInfo, ProtocolVersion, PushInfo, PushKind, Value};
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::{Error, Options, Store};

/// Handle to Redis; cheap to clone.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    options: Options,
    keys: Keys,
    connection: ConnectionManager,
    waiters: DashMap<TaskId, Arc<Notify>>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.inner.options.prefix)
            .finish()
    }
}

/// Receives completion notices and wakes local waiters; run it for as long as the handle is
/// used for waiting.
#[derive(Debug)]
pub struct Listener {
    store: RedisStore,
    pushes: mpsc::UnboundedReceiver<PushInfo>,
}

pub(crate) fn backend(e: redis::RedisError) -> Error {
    Error::Unavailable(e.to_string())
}

impl RedisStore {
    /// Creates the handle without connecting: a process started while Redis is down comes up
    /// and reports it in `/readyz`.
    pub fn build(options: Options) -> Result<(Self, Listener), Error> {
        let info = options
            .url
            .as_str()
            .into_connection_info()
            .map_err(|e| Error::Config(e.to_string()))?;
        // RESP3 lets one multiplexed connection carry both commands and pub/sub pushes.
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let client = redis::Client::open(info.set_redis_settings(settings))
            .map_err(|e| Error::Config(e.to_string()))?;
        let (tx, pushes) = mpsc::unbounded_channel();
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(options.response_timeout))
            .set_connection_timeout(Some(options.response_timeout))
            // Fail fast while Redis is down: callers retry at their level, `/readyz` shows why.
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500))
            .set_push_sender(tx)
            .set_automatic_resubscription();
        let connection = client
            .get_connection_manager_lazy(config)
            .map_err(|e| Error::Config(e.to_string()))?;
        let keys = Keys::new(options.prefix.clone());
        let store = Self {
            inner: Arc::new(Inner {
                options,
                keys,
                connection,
                waiters: DashMap::new(),
            }),
        };
        Ok((
            store.clone(),
            Listener {
                store: store.clone(),
                pushes,
            },
        ))
    }

    pub(crate) fn connection(&self) -> ConnectionManager {
        self.inner.connection.clone()
    }

    /// Reads a MessagePack value; a value that does not decode is `Error::Corrupt`.
    pub(crate) async fn get_msgpack<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<Option<T>, Error> {
        let bytes: Option<Vec<u8>> = self.connection().get(key).await.map_err(backend)?;
        bytes
            .map(|b| {
                proto::codec::decode(&b).map_err(|e| Error::Corrupt {
                    key: key.to_owned(),
                    reason: e.to_string(),
                })
            })
            .transpose()
    }

    /// Writes a MessagePack value (named fields) with the configured time to live.
    pub(crate) async fn set_msgpack<T: serde::Serialize + ?Sized>(
        &self,
        key: &str,
        value: &T,
    ) -> Result<(), Error> {
        let bytes = proto::codec::encode(value);
        self.connection()
            .set_ex::<_, _, ()>(key, bytes, self.ttl_secs())
            .await
            .map_err(backend)
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.inner.options.prefix
    }

    pub(crate) fn ttl_secs(&self) -> u64 {
        self.inner.options.result_ttl.as_secs().max(1)
    }

    async fn get_bytes(&self, key: &str) -> Result<Option<Vec<u8>>, Error> {
        self.connection().get(key).await.map_err(backend)
    }
}

impl Listener {
    /// Subscribes to completion notices (retrying until Redis answers) and dispatches them to
    /// waiters until `cancel` fires. Resubscription after a reconnect is automatic.
    pub async fn run(mut self, cancel: CancellationToken) {
        let channel = self.store.inner.keys.execution_done_channel();
        loop {
            let mut connection = self.store.connection();
            match connection.subscribe(&channel).await {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot subscribe to completion notices; retrying");
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
            }
        }
        tracing::debug!(%channel, "subscribed to completion notices");
        loop {
            let push = tokio::select! {
                _ = cancel.cancelled() => return,
                push = self.pushes.recv() => match push {
                    Some(push) => push,
                    None => return,
                },
            };
            match push.kind {
                PushKind::Message => {
                    let id: Option<TaskId> = push
                        .data
                        .get(1)
                        .and_then(value_str)
                        .and_then(|s| s.parse().ok());
                    if let Some(notify) = id.and_then(|id| self.store.inner.waiters.get(&id)) {
                        notify.notify_waiters();
                    }
                }
                PushKind::Disconnection => {
                    // Notices sent while disconnected are lost: wake everyone to re-read.
                    for entry in self.store.inner.waiters.iter() {
                        entry.value().notify_waiters();
                    }
                }
                _ => {}
            }
        }
    }
}

fn value_str(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

#[async_trait]
impl Store for RedisStore {
    async fn create_execution(&self, id: TaskId, meta: &ExecutionMeta) -> Result<(), Error> {
        let key = self.inner.keys.execution_meta(id);
        let ttl = self.inner.options.result_ttl.as_secs().max(1);
        self.connection()
            .set_ex::<_, _, ()>(key, meta.encode(), ttl)
            .await
            .map_err(backend)
    }

    async fn execution_meta(&self, id: TaskId) -> Result<Option<ExecutionMeta>, Error> {
        let key = self.inner.keys.execution_meta(id);
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
        let key = self.inner.keys.execution_result(id);
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
                .map(|id| self.inner.keys.execution_result(*id))
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
        result: &ExecutionResult,
    ) -> Result<bool, Error> {
        let key = self.inner.keys.execution_result(id);
        let ttl = self.inner.options.result_ttl.as_secs().max(1);
        let (stored,): (Option<String>,) = redis::pipe()
            .cmd("SET")
            .arg(&key)
            .arg(result.encode())
            .arg("NX")
            .arg("EX")
            .arg(ttl)
            .cmd("PUBLISH")
            .arg(self.inner.keys.execution_done_channel())
            .arg(id.to_string())
            .ignore()
            .query_async(&mut self.connection())
            .await
            .map_err(backend)?;
        Ok(stored.is_some())
    }

    async fn wait_execution(
        &self,
        id: TaskId,
        timeout: Duration,
    ) -> Result<Option<ExecutionResult>, Error> {
        let notify = self.inner.waiters.entry(id).or_default().clone();
        let deadline = Instant::now() + timeout;
        let poll = self.inner.options.poll_interval;
        let outcome = loop {
            let notified = notify.notified();
            tokio::pin!(notified);
            // Register before reading, so a notice between the read and the wait is not missed.
            notified.as_mut().enable();
            let read = self.execution_result(id).await;
            let now = Instant::now();
            match read {
                Ok(Some(result)) => break Ok(Some(result)),
                Ok(None) if now >= deadline => break Ok(None),
                Err(e) if now >= deadline || !e.is_retryable() => break Err(e),
                Ok(None) => {}
                Err(e) => tracing::debug!(error = %e, %id, "result not readable yet"),
            }
            let nap = poll.min(deadline - now);
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep(nap) => {}
            }
        };
        // Another waiter for the same id may still hold the Notify; it then polls, which is fine.
        if Arc::strong_count(&notify) <= 2 {
            self.inner.waiters.remove(&id);
        }
        outcome
    }

    async fn health(&self) -> Result<(), String> {
        let mut connection = self.connection();
        let url = redact(&self.inner.options.url);
        let command = redis::cmd("PING");
        let ping = command.query_async::<String>(&mut connection);
        match tokio::time::timeout(self.inner.options.response_timeout, ping).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("redis at {url}: {e}")),
            Err(_) => Err(format!(
                "redis at {url}: no answer within {:?}",
                self.inner.options.response_timeout
            )),
        }
    }
}

fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}
