//! The coordinators' inbox: the pipeline's events (`proto::job::Event`: a plan stored, a
//! function final) from the workers, in a Redis stream that a consumer group shares out, so
//! that each event is handled by one coordinator and leaves the stream once handled.
//!
//! Names: the stream ([`crate::keys::pipeline_events`], `data` = MessagePack `Event`, group
//! `coordinators`) and a channel published with every event, so readers wake at once
//! ([`crate::keys::pipeline_notice_channel`]).
//!
//! Delivery is at least once. An event a coordinator took but never settled (it died, or a
//! dependency stayed down) stays pending in the group; any coordinator claims it once it has
//! been idle for a while, and each claim counts as a delivery. One given back (an outage
//! outlasted the wait) goes to the end of the stream as a new entry, not counted.
//!
//! Why a stream and not the broker's quorum queue (which carried them before): a confirmed
//! publish to a quorum queue waits for the broker's log to reach the disk, 1–2 ms on an idle
//! machine, and costs the broker about half a millisecond of CPU per message; a worker waited
//! for that after every step. The event only points at state the worker has just stored in
//! Redis: appending it to Redis costs one command, and it is exactly as durable as that state.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use proto::job::Event;
use redis::streams::{StreamClaimReply, StreamId, StreamPendingCountReply, StreamReadReply};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::{Error, keys};

/// The consumer group of every coordinator.
const GROUP: &str = "coordinators";

/// An event taken from the inbox, to settle with [`PipelineEvents::pipeline_event_done`]
/// (or [`PipelineEvents::return_pipeline_event`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxEntry {
    /// The stream entry's id.
    pub id: String,
    /// The MessagePack `Event`, as sent (decoded by the reader, which decides what an
    /// undecodable one becomes).
    pub body: Vec<u8>,
    /// How many times the event has been taken, this time included.
    pub deliveries: u64,
}

#[async_trait]
pub trait PipelineEvents: Send + Sync + 'static {
    /// Appends `event` for the coordinators and wakes their readers.
    async fn send_pipeline_event(&self, event: &Event) -> Result<(), Error>;
    /// Up to `max` events no coordinator has taken yet, now `consumer`'s; when there are
    /// none, waits up to `wait` for one.
    async fn receive_pipeline_events(
        &self,
        consumer: &str,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<InboxEntry>, Error>;
    /// Up to `max` events taken (by anyone) at least `idle` ago and never settled, now
    /// `consumer`'s; each claim counts as a delivery.
    async fn claim_pipeline_events(
        &self,
        consumer: &str,
        idle: Duration,
        max: usize,
    ) -> Result<Vec<InboxEntry>, Error>;
    /// The event is handled: it leaves the inbox.
    async fn pipeline_event_done(&self, id: &str) -> Result<(), Error>;
    /// The event goes back to the end of the inbox as a new entry, its deliveries not
    /// counted (a dependency it needs stayed down).
    async fn return_pipeline_event(&self, entry: &InboxEntry) -> Result<(), Error>;
    /// Forgets the readers that hold no event and have not read for `idle` (coordinators
    /// that stopped: each start reads under a new name), except `consumer`; returns how many
    /// went. A reader that holds events is kept until they are claimed from it.
    async fn forget_idle_readers(&self, consumer: &str, idle: Duration) -> Result<u64, Error> {
        let _ = (consumer, idle);
        Ok(0)
    }
}

/// KEYS: the stream. ARGV: the group, idle ms, the caller's name. One script, so a reader
/// cannot take an event between the check that it holds none and its removal.
static FORGET_IDLE: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("lua/inbox_forget_idle.lua")));

fn entry(id: StreamId, deliveries: u64) -> Option<InboxEntry> {
    let body = match id.map.get("data")? {
        redis::Value::BulkString(bytes) => bytes.clone(),
        _ => return None,
    };
    Some(InboxEntry {
        id: id.id,
        body,
        deliveries,
    })
}

/// Adds to `pipe` the appending of `body` to the stream `key` and the notice that wakes its
/// readers.
pub(crate) fn append<'a>(
    pipe: &'a mut redis::Pipeline,
    key: &str,
    channel: &str,
    body: &[u8],
) -> &'a mut redis::Pipeline {
    pipe.cmd("XADD")
        .arg(key)
        .arg("*")
        .arg("data")
        .arg(body)
        .ignore()
        .cmd("PUBLISH")
        .arg(channel)
        .arg("1")
        .ignore()
}

/// Adds to `pipe` the settling of entry `id`: acknowledged in the group and deleted, so the
/// stream holds only unsettled events.
fn settle<'a>(pipe: &'a mut redis::Pipeline, key: &str, id: &str) -> &'a mut redis::Pipeline {
    pipe.cmd("XACK")
        .arg(key)
        .arg(GROUP)
        .arg(id)
        .ignore()
        .cmd("XDEL")
        .arg(key)
        .arg(id)
        .ignore()
}

impl crate::RedisStore {
    /// Creates the group (from the stream's start, so that nothing sent before the first
    /// coordinator is missed); an existing group is left as it is.
    async fn ensure_group(&self, key: &str) -> Result<(), Error> {
        let created: Result<(), redis::RedisError> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(key)
            .arg(GROUP)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(&mut self.connection())
            .await;
        match created {
            Err(e) if e.code() != Some("BUSYGROUP") => Err(crate::redis::backend(e)),
            _ => Ok(()),
        }
    }

    async fn read_new(
        &self,
        key: &str,
        consumer: &str,
        max: usize,
    ) -> Result<Vec<InboxEntry>, Error> {
        let read = || {
            redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg(GROUP)
                .arg(consumer)
                .arg("COUNT")
                .arg(max.max(1))
                .arg("STREAMS")
                .arg(key)
                .arg(">")
                .clone()
        };
        let mut connection = self.connection();
        let reply = match read()
            .query_async::<Option<StreamReadReply>>(&mut connection)
            .await
        {
            // The stream or its group is gone (a new Redis, a flush): made again, read again.
            Err(e) if e.code() == Some("NOGROUP") => {
                self.ensure_group(key).await?;
                read().query_async(&mut connection).await
            }
            other => other,
        }
        .map_err(crate::redis::backend)?;
        Ok(reply
            .into_iter()
            .flat_map(|r| r.keys)
            .flat_map(|k| k.ids)
            .filter_map(|id| entry(id, 1))
            .collect())
    }
}

#[async_trait]
impl PipelineEvents for crate::RedisStore {
    async fn send_pipeline_event(&self, event: &Event) -> Result<(), Error> {
        append(
            &mut redis::pipe(),
            &keys::pipeline_events(self.prefix()),
            &keys::pipeline_notice_channel(self.prefix()),
            &event.encode(),
        )
        .query_async::<()>(&mut self.connection())
        .await
        .map_err(crate::redis::backend)
    }

    async fn receive_pipeline_events(
        &self,
        consumer: &str,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<InboxEntry>, Error> {
        let key = keys::pipeline_events(self.prefix());
        // Registered before the read, so an event sent between the read and the wait wakes it.
        let notice = self.pipeline_notice().clone();
        let notified = notice.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let entries = self.read_new(&key, consumer, max).await?;
        if !entries.is_empty() {
            return Ok(entries);
        }
        let _ = tokio::time::timeout(wait, notified).await;
        self.read_new(&key, consumer, max).await
    }

    async fn claim_pipeline_events(
        &self,
        consumer: &str,
        idle: Duration,
        max: usize,
    ) -> Result<Vec<InboxEntry>, Error> {
        let key = keys::pipeline_events(self.prefix());
        let idle_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
        let pending: Result<StreamPendingCountReply, redis::RedisError> = redis::cmd("XPENDING")
            .arg(&key)
            .arg(GROUP)
            .arg("IDLE")
            .arg(idle_ms)
            .arg("-")
            .arg("+")
            .arg(max.max(1))
            .query_async(&mut self.connection())
            .await;
        let pending = match pending {
            Err(e) if e.code() == Some("NOGROUP") => {
                self.ensure_group(&key).await?;
                return Ok(vec![]);
            }
            other => other.map_err(crate::redis::backend)?,
        };
        if pending.ids.is_empty() {
            return Ok(vec![]);
        }
        let before: std::collections::HashMap<String, u64> = pending
            .ids
            .iter()
            .map(|p| (p.id.clone(), u64::try_from(p.times_delivered).unwrap_or(0)))
            .collect();
        // Claimed only if still idle that long: two coordinators claiming at once get each
        // entry once between them.
        let claimed: StreamClaimReply = redis::cmd("XCLAIM")
            .arg(&key)
            .arg(GROUP)
            .arg(consumer)
            .arg(idle_ms)
            .arg(
                pending
                    .ids
                    .iter()
                    .map(|p| p.id.as_str())
                    .collect::<Vec<_>>(),
            )
            .query_async(&mut self.connection())
            .await
            .map_err(crate::redis::backend)?;
        Ok(claimed
            .ids
            .into_iter()
            .filter_map(|id| {
                let deliveries = before.get(&id.id).copied().unwrap_or(0) + 1;
                entry(id, deliveries)
            })
            .collect())
    }

    async fn pipeline_event_done(&self, id: &str) -> Result<(), Error> {
        settle(
            redis::pipe().atomic(),
            &keys::pipeline_events(self.prefix()),
            id,
        )
        .query_async::<()>(&mut self.connection())
        .await
        .map_err(crate::redis::backend)
    }

    async fn forget_idle_readers(&self, consumer: &str, idle: Duration) -> Result<u64, Error> {
        FORGET_IDLE
            .key(keys::pipeline_events(self.prefix()))
            .arg(GROUP)
            .arg(u64::try_from(idle.as_millis()).unwrap_or(u64::MAX))
            .arg(consumer)
            .invoke_async(&mut self.connection())
            .await
            .map_err(crate::redis::backend)
    }

    async fn return_pipeline_event(&self, entry: &InboxEntry) -> Result<(), Error> {
        let key = keys::pipeline_events(self.prefix());
        let channel = keys::pipeline_notice_channel(self.prefix());
        let mut pipe = redis::pipe();
        append(pipe.atomic(), &key, &channel, &entry.body);
        settle(&mut pipe, &key, &entry.id)
            .query_async::<()>(&mut self.connection())
            .await
            .map_err(crate::redis::backend)
    }
}

/// The inbox of [`crate::MemoryJobs`], with the same semantics.
#[derive(Debug, Default)]
pub(crate) struct MemoryInbox {
    state: Mutex<MemoryInboxState>,
    notice: Notify,
}

#[derive(Debug, Default)]
struct MemoryInboxState {
    next: u64,
    entries: BTreeMap<u64, MemoryEntry>,
}

#[derive(Debug)]
struct MemoryEntry {
    body: Vec<u8>,
    deliveries: u64,
    /// Its consumer and when it took it; `None` until taken.
    taken: Option<(String, Instant)>,
}

impl MemoryInbox {
    fn push(&self, body: Vec<u8>) {
        {
            let mut s = self.state.lock().expect("poisoned");
            s.next += 1;
            let id = s.next;
            s.entries.insert(
                id,
                MemoryEntry {
                    body,
                    deliveries: 0,
                    taken: None,
                },
            );
        }
        self.notice.notify_waiters();
    }

    fn take(&self, consumer: &str, max: usize, idle: Option<Duration>) -> Vec<InboxEntry> {
        let mut s = self.state.lock().expect("poisoned");
        let now = Instant::now();
        s.entries
            .iter_mut()
            .filter(|(_, e)| match (&e.taken, idle) {
                (None, None) => true,
                (Some((_, at)), Some(idle)) => now.duration_since(*at) >= idle,
                _ => false,
            })
            .take(max.max(1))
            .map(|(id, e)| {
                e.deliveries += 1;
                e.taken = Some((consumer.to_owned(), now));
                InboxEntry {
                    id: id.to_string(),
                    body: e.body.clone(),
                    deliveries: e.deliveries,
                }
            })
            .collect()
    }

    fn remove(&self, id: &str) {
        if let Ok(id) = id.parse::<u64>() {
            self.state.lock().expect("poisoned").entries.remove(&id);
        }
    }
}

#[async_trait]
impl PipelineEvents for crate::MemoryJobs {
    async fn send_pipeline_event(&self, event: &Event) -> Result<(), Error> {
        self.inbox().push(event.encode());
        Ok(())
    }

    async fn receive_pipeline_events(
        &self,
        consumer: &str,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<InboxEntry>, Error> {
        let inbox: Arc<MemoryInbox> = self.inbox();
        let notified = inbox.notice.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let entries = inbox.take(consumer, max, None);
        if !entries.is_empty() {
            return Ok(entries);
        }
        let _ = tokio::time::timeout(wait, notified).await;
        Ok(inbox.take(consumer, max, None))
    }

    async fn claim_pipeline_events(
        &self,
        consumer: &str,
        idle: Duration,
        max: usize,
    ) -> Result<Vec<InboxEntry>, Error> {
        Ok(self.inbox().take(consumer, max, Some(idle)))
    }

    async fn pipeline_event_done(&self, id: &str) -> Result<(), Error> {
        self.inbox().remove(id);
        Ok(())
    }

    async fn return_pipeline_event(&self, entry: &InboxEntry) -> Result<(), Error> {
        let inbox = self.inbox();
        inbox.remove(&entry.id);
        inbox.push(entry.body.clone());
        Ok(())
    }
}
