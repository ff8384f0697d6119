//! The handle to Redis (`redis::aio::ConnectionManager`) that every Redis-backed trait of the
//! store is implemented on, and the listener that turns pub/sub notices into wake-ups.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use proto::TaskId;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, IntoConnectionInfo, ProtocolVersion, PushInfo, PushKind, Value};
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::keys;
use crate::pauses::Pauses;
use crate::{Error, Options};

/// Handle to Redis; cheap to clone.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    options: Options,
    connection: ConnectionManager,
    waiters: DashMap<TaskId, Arc<Notify>>,
    /// Watches of many executions at once (`Store::watch`), by execution.
    watchers: Arc<DashMap<TaskId, Vec<Arc<Notify>>>>,
    /// Woken when a model limit's lease is released anywhere (`limits::RedisLimits::freed`).
    lease_freed: Arc<Notify>,
    /// Pauses of the model's limits heard of (`limits::RedisLimits::paused_until`), and
    /// whether that is all there is to know.
    pauses: Pauses,
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
    /// Also wake waiters for jobs' progress events (`JobStore::wait_events`).
    job_events: bool,
    /// Also wake waiters for a model limit's lease (`limits::RedisLimits::freed`).
    lease_notices: bool,
    /// Wake waiters for executions' verdicts (the default; a worker waits for none).
    execution_notices: bool,
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
        let store = Self {
            inner: Arc::new(Inner {
                options,
                connection,
                waiters: DashMap::new(),
                watchers: Arc::default(),
                lease_freed: Arc::default(),
                pauses: Pauses::default(),
            }),
        };
        Ok((
            store.clone(),
            Listener {
                store: store.clone(),
                pushes,
                job_events: false,
                lease_notices: false,
                execution_notices: true,
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

    /// Waits (at most `nap`) for a notice about `id`, or returns at once when `ready` says
    /// there is something already; registered before `ready` reads, so a notice between the
    /// read and the wait is not missed. Shared by result waits and event waits.
    pub(crate) async fn after_notice<T, F, Fut>(
        &self,
        id: TaskId,
        timeout: Duration,
        nap: Duration,
        ready: F,
    ) -> Result<Option<T>, Error>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Option<T>, Error>>,
    {
        let notify = self.inner.waiters.entry(id).or_default().clone();
        let deadline = Instant::now() + timeout;
        let outcome = loop {
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let read = ready().await;
            let now = Instant::now();
            match read {
                Ok(Some(value)) => break Ok(Some(value)),
                Ok(None) if now >= deadline => break Ok(None),
                Err(e) if now >= deadline || !e.is_retryable() => break Err(e),
                Ok(None) => {}
                Err(e) => tracing::debug!(error = %e, %id, "not readable yet"),
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep(nap.min(deadline - now)) => {}
            }
        };
        // Another waiter for the same id may still hold the Notify; it then polls, which is fine.
        if Arc::strong_count(&notify) <= 2 {
            self.inner.waiters.remove(&id);
        }
        outcome
    }

    /// Woken by the notice each released lease publishes (with the listener's
    /// [`Listener::with_lease_notices`]).
    pub(crate) fn lease_freed(&self) -> &Arc<Notify> {
        &self.inner.lease_freed
    }

    /// Until when the callers of the model's limits of `scope` pause, as last heard.
    pub(crate) fn pauses(&self) -> &Pauses {
        &self.inner.pauses
    }

    /// The settings it was built with.
    pub fn options(&self) -> &Options {
        &self.inner.options
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.inner.options.prefix
    }

    pub(crate) fn usage_ttl_secs(&self) -> u64 {
        self.inner.options.usage_retention.as_secs().max(1)
    }

    pub(crate) fn ttl_secs(&self) -> u64 {
        self.inner.options.result_ttl.as_secs().max(1)
    }

    /// How often a waiter re-reads a result it has not been notified about.
    pub(crate) fn poll_interval(&self) -> Duration {
        self.inner.options.poll_interval
    }

    pub(crate) async fn get_bytes(&self, key: &str) -> Result<Option<Vec<u8>>, Error> {
        self.connection().get(key).await.map_err(backend)
    }

    /// A watch of `ids`, woken by the listener at each notice about any of them.
    pub(crate) fn watch_ids(&self, ids: &[TaskId]) -> crate::Watch {
        let notify = Arc::new(Notify::new());
        for id in ids {
            self.inner
                .watchers
                .entry(*id)
                .or_default()
                .push(notify.clone());
        }
        crate::Watch {
            notify,
            ids: ids.to_vec(),
            watchers: self.inner.watchers.clone(),
        }
    }

    /// `Ok` when Redis answers a `PING` in time; otherwise why not (the URL without its
    /// password).
    pub(crate) async fn ping(&self) -> Result<(), String> {
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

impl Listener {
    /// Also subscribes to the notices of jobs' progress events, for event streams, and of
    /// batches' finished jobs, for batch long polls (a process that serves neither leaves them
    /// out: every job's events would reach it).
    pub fn with_job_events(mut self) -> Self {
        self.job_events = true;
        self
    }

    /// Also subscribes to the notices of released model-limit leases, so that a call waiting
    /// for a lease asks again as one frees rather than on a timer.
    pub fn with_lease_notices(mut self) -> Self {
        self.lease_notices = true;
        self
    }

    /// Leaves out the notices of finished executions: a process that waits for no verdict (a
    /// worker) would receive one for every execution of the cluster.
    pub fn without_execution_notices(mut self) -> Self {
        self.execution_notices = false;
        self
    }

    /// Subscribes to completion notices (retrying until Redis answers) and dispatches them to
    /// waiters until `cancel` fires. Resubscription after a reconnect is automatic.
    pub async fn run(mut self, cancel: CancellationToken) {
        let prefix = self.store.prefix();
        let mut channels = Vec::new();
        if self.execution_notices {
            channels.push(keys::execution_done_channel(prefix));
        }
        if self.job_events {
            channels.push(keys::job_events_channel(prefix));
            channels.push(keys::batch_finished_channel(prefix));
        }
        let lease_freed = keys::lease_freed_channel(prefix);
        let paused = keys::limits_paused_channel(prefix);
        if self.lease_notices {
            channels.push(lease_freed.clone());
            channels.push(paused.clone());
        }
        if channels.is_empty() {
            return; // nothing to wait for
        }
        let channel = channels.join(", ");
        loop {
            let mut connection = self.store.connection();
            match connection.subscribe(&channels).await {
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
        if self.lease_notices {
            self.store.inner.pauses.subscribed();
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
                PushKind::Message
                    if push.data.first().and_then(value_str).as_deref()
                        == Some(lease_freed.as_str()) =>
                {
                    self.store.inner.lease_freed.notify_waiters();
                }
                PushKind::Message
                    if push.data.first().and_then(value_str).as_deref()
                        == Some(paused.as_str()) =>
                {
                    // "{scope} {ms left}": from now here, whatever this host's clock says.
                    let message = push.data.get(1).and_then(value_str).unwrap_or_default();
                    if let Some((scope, ms)) = message.rsplit_once(' ')
                        && let Ok(ms) = ms.parse::<u64>()
                    {
                        let until = Instant::now() + Duration::from_millis(ms);
                        self.store.inner.pauses.hear(scope, until);
                    }
                }
                PushKind::Message => {
                    let id: Option<TaskId> = push
                        .data
                        .get(1)
                        .and_then(value_str)
                        .and_then(|s| s.parse().ok());
                    if let Some(id) = id {
                        if let Some(notify) = self.store.inner.waiters.get(&id) {
                            notify.notify_waiters();
                        }
                        if let Some(watches) = self.store.inner.watchers.get(&id) {
                            watches.iter().for_each(|notify| notify.notify_waiters());
                        }
                    }
                }
                // Resubscribed after a reconnection (announcements in between are lost:
                // `Pauses` has readers read them).
                PushKind::Subscribe
                    if push.data.first().and_then(value_str).as_deref()
                        == Some(paused.as_str()) =>
                {
                    self.store.inner.pauses.subscribed();
                }
                PushKind::Disconnection => {
                    self.store.inner.pauses.disconnected();
                    // Notices sent while disconnected are lost: wake everyone to re-read.
                    for entry in self.store.inner.waiters.iter() {
                        entry.value().notify_waiters();
                    }
                    for entry in self.store.inner.watchers.iter() {
                        entry
                            .value()
                            .iter()
                            .for_each(|notify| notify.notify_waiters());
                    }
                    self.store.inner.lease_freed.notify_waiters();
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

fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}
