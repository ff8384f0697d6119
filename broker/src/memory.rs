//! An in-process broker for unit tests. It keeps RabbitMQ's delivery semantics that the rest of
//! the system relies on: unsettled messages are redelivered, every return counts towards the
//! delivery limit, and a message past the limit or rejected goes to the dead-letter queue.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::{Acker, Broker, Delivery, Error, Outgoing, Queue, QueueDepth, Settle};

#[derive(Debug, Clone)]
struct Message {
    message_id: String,
    body: Vec<u8>,
    delivery_count: u32,
    death_reason: Option<String>,
    headers: std::collections::BTreeMap<String, String>,
}

/// A queue and, for tasks and executions, a tenant's lane of it.
type Key = (Queue, Option<String>);

#[derive(Debug, Default)]
struct State {
    queues: HashMap<Key, VecDeque<Message>>,
    down: Option<String>,
}

/// In-memory broker; cheap to clone, clones share the queues.
#[derive(Debug, Clone)]
pub struct MemoryBroker {
    state: Arc<Mutex<State>>,
    notify: Arc<Notify>,
    delivery_limit: u32,
}

impl MemoryBroker {
    pub fn new(delivery_limit: u32) -> Self {
        Self {
            state: Arc::default(),
            notify: Arc::new(Notify::new()),
            delivery_limit,
        }
    }

    /// Simulates an outage: publishes fail and `health` reports `reason` until `set_up`.
    pub fn set_down(&self, reason: &str) {
        self.state.lock().expect("poisoned").down = Some(reason.into());
    }

    pub fn set_up(&self) {
        self.state.lock().expect("poisoned").down = None;
        self.notify.notify_waiters();
    }

    /// Messages waiting in `queue`, every lane of it (not counting those handed out).
    pub fn len(&self, queue: Queue) -> usize {
        let state = self.state.lock().expect("poisoned");
        state
            .queues
            .iter()
            .filter(|((q, _), _)| *q == queue)
            .map(|(_, messages)| messages.len())
            .sum()
    }

    /// Puts raw bytes on the task queue, as a misbehaving producer would.
    pub fn inject(&self, message_id: &str, body: Vec<u8>) {
        self.push(
            (Queue::Tasks, None),
            Message {
                message_id: message_id.into(),
                body,
                delivery_count: 0,
                death_reason: None,
                headers: Default::default(),
            },
        );
    }

    fn push(&self, key: Key, message: Message) {
        self.state
            .lock()
            .expect("poisoned")
            .queues
            .entry(key)
            .or_default()
            .push_back(message);
        self.notify.notify_waiters();
    }

    fn publish_on(&self, queue: Queue, message: Outgoing) -> Result<(), Error> {
        let lane = match queue {
            Queue::Tasks | Queue::Executions => message.lane,
            Queue::DeadLetters => None,
        };
        if let Some(reason) = &self.state.lock().expect("poisoned").down {
            return Err(Error::Unavailable(reason.clone()));
        }
        self.push(
            (queue, lane),
            Message {
                message_id: message.message_id,
                body: message.body,
                delivery_count: 0,
                death_reason: None,
                headers: message.headers,
            },
        );
        Ok(())
    }

    fn pop(&self, key: &Key) -> Option<Message> {
        let mut state = self.state.lock().expect("poisoned");
        if state.down.is_some() {
            return None;
        }
        state.queues.get_mut(key)?.pop_front()
    }
}

struct MemoryAcker {
    broker: MemoryBroker,
    key: Key,
    message: Message,
}

#[async_trait]
impl Acker for MemoryAcker {
    async fn settle(&self, how: Settle) -> Result<(), Error> {
        let mut message = self.message.clone();
        match how {
            Settle::Ack => {}
            Settle::DeadLetter => {
                message.death_reason = Some("rejected".into());
                self.broker.push((Queue::DeadLetters, None), message);
            }
            Settle::DeadLetterLimit => {
                message.death_reason = Some("delivery_limit".into());
                self.broker.push((Queue::DeadLetters, None), message);
            }
            // Back at the end of the queue with the count it had: not one more return.
            Settle::HandBack => self.broker.push(self.key.clone(), message),
            Settle::Requeue => {
                message.delivery_count += 1;
                if self.key.0 != Queue::DeadLetters
                    && message.delivery_count > self.broker.delivery_limit
                {
                    message.death_reason = Some("delivery_limit".into());
                    self.broker.push((Queue::DeadLetters, None), message);
                } else {
                    self.broker.push(self.key.clone(), message);
                }
            }
        }
        Ok(())
    }
}

#[async_trait]
impl Broker for MemoryBroker {
    async fn publish(&self, message: Outgoing) -> Result<(), Error> {
        self.publish_on(Queue::Tasks, message)
    }

    async fn publish_execution(&self, message: Outgoing) -> Result<(), Error> {
        self.publish_on(Queue::Executions, message)
    }

    fn consume_lane(
        &self,
        queue: Queue,
        lane: Option<String>,
        _prefetch: u16,
        cancel: CancellationToken,
    ) -> BoxStream<'static, Delivery> {
        let broker = self.clone();
        let key: Key = (queue, lane);
        futures::stream::unfold((broker, cancel, key), |(broker, cancel, key)| async move {
            let notify = broker.notify.clone();
            loop {
                let notified = notify.notified();
                if cancel.is_cancelled() {
                    return None;
                }
                if let Some(message) = broker.pop(&key) {
                    let delivery = Delivery::new(
                        message.body.clone(),
                        Some(message.message_id.clone()),
                        message.delivery_count > 0,
                        message.delivery_count,
                        message.death_reason.clone(),
                        message.headers.clone(),
                        Box::new(MemoryAcker {
                            broker: broker.clone(),
                            key: key.clone(),
                            message,
                        }),
                    );
                    return Some((delivery, (broker, cancel, key)));
                }
                tokio::select! {
                    _ = cancel.cancelled() => return None,
                    _ = notified => {}
                }
            }
        })
        .boxed()
    }

    /// The queues by their `Queue` names and lanes (`tasks.tenant.acme`); consumers are
    /// not counted.
    async fn depths(&self, tenants: &[String]) -> Result<Vec<QueueDepth>, Error> {
        let state = self.state.lock().expect("poisoned");
        if let Some(reason) = &state.down {
            return Err(Error::Unavailable(reason.clone()));
        }
        let mut depths = Vec::new();
        for (queue, name) in [
            (Queue::Tasks, "tasks"),
            (Queue::Executions, "executions"),
            (Queue::DeadLetters, "tasks.dead"),
        ] {
            // Dead letters have no lanes.
            let lanes = std::iter::once(None)
                .chain(tenants.iter().map(Some))
                .filter(|lane| lane.is_none() || queue != Queue::DeadLetters);
            for lane in lanes {
                let key = (queue, lane.cloned());
                if lane.is_some() && !state.queues.contains_key(&key) {
                    continue;
                }
                let ready = state.queues.get(&key).map_or(0, VecDeque::len);
                depths.push(QueueDepth {
                    name: proto::queues::Topology::lane(name, lane.map(String::as_str)),
                    ready: u32::try_from(ready).unwrap_or(u32::MAX),
                    consumers: 0,
                });
            }
        }
        Ok(depths)
    }

    fn health(&self) -> Result<(), String> {
        match &self.state.lock().expect("poisoned").down {
            Some(reason) => Err(reason.clone()),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outgoing(id: &str) -> Outgoing {
        Outgoing {
            message_id: id.into(),
            body: id.as_bytes().to_vec(),
            lane: None,
            headers: Default::default(),
        }
    }

    #[tokio::test]
    async fn requeued_past_the_limit_goes_to_dead_letters() {
        let broker = MemoryBroker::new(2);
        broker.publish(outgoing("a")).await.unwrap();
        let cancel = CancellationToken::new();
        let mut stream = broker.consume(Queue::Tasks, 1, cancel.clone());
        for expected_count in 0..=2 {
            let d = stream.next().await.unwrap();
            assert_eq!(d.delivery_count, expected_count);
            d.requeue().await.unwrap();
        }
        assert_eq!(broker.len(Queue::Tasks), 0);
        assert_eq!(broker.len(Queue::DeadLetters), 1);
        let mut dead = broker.consume(Queue::DeadLetters, 1, cancel.clone());
        let d = dead.next().await.unwrap();
        assert_eq!(d.death_reason.as_deref(), Some("delivery_limit"));
        assert_eq!(d.message_id.as_deref(), Some("a"));
    }

    #[tokio::test]
    async fn a_delivery_dropped_unsettled_comes_back_and_counts() {
        let broker = MemoryBroker::new(5);
        broker.publish(outgoing("p")).await.unwrap();
        let mut stream = broker.consume(Queue::Tasks, 1, CancellationToken::new());
        // A handler that panics drops its delivery without settling it.
        let d = stream.next().await.unwrap();
        let handler = tokio::spawn(async move {
            let _held = d;
            panic!("handler bug");
        });
        assert!(handler.await.unwrap_err().is_panic());
        let again = tokio::time::timeout(std::time::Duration::from_secs(5), stream.next())
            .await
            .expect("requeued at once")
            .unwrap();
        assert_eq!(again.message_id.as_deref(), Some("p"));
        assert_eq!(again.delivery_count, 1);
        again.ack().await.unwrap();
        assert_eq!(broker.len(Queue::Tasks), 0);
    }

    #[tokio::test]
    async fn handing_back_does_not_count_towards_the_limit() {
        let broker = MemoryBroker::new(1);
        broker.publish(outgoing("h")).await.unwrap();
        broker.publish(outgoing("next")).await.unwrap();
        let mut stream = broker.consume(Queue::Tasks, 1, CancellationToken::new());
        let d = stream.next().await.unwrap();
        d.requeue().await.unwrap();
        // Handed back many times (an outage): it goes to the end of the queue, its count
        // unchanged, and is never dead-lettered for it.
        let mut order = Vec::new();
        for _ in 0..6 {
            let d = stream.next().await.unwrap();
            order.push(d.message_id.clone().unwrap());
            if d.message_id.as_deref() == Some("h") {
                assert_eq!(d.delivery_count, 1);
                d.hand_back().await.unwrap();
            } else {
                d.ack().await.unwrap();
            }
        }
        assert_eq!(order[..2], ["next".to_string(), "h".to_string()]);
        assert_eq!(broker.len(Queue::DeadLetters), 0);
        // One more return of its own is past the limit of 1.
        let d = stream.next().await.unwrap();
        assert_eq!(d.delivery_count, 1);
        d.requeue().await.unwrap();
        assert_eq!(broker.len(Queue::DeadLetters), 1);
    }

    #[tokio::test]
    async fn dead_letter_skips_the_limit_and_ack_removes() {
        let broker = MemoryBroker::new(5);
        broker.publish(outgoing("x")).await.unwrap();
        broker.publish(outgoing("y")).await.unwrap();
        let mut stream = broker.consume(Queue::Tasks, 1, CancellationToken::new());
        stream.next().await.unwrap().dead_letter().await.unwrap();
        stream.next().await.unwrap().ack().await.unwrap();
        assert_eq!(broker.len(Queue::Tasks), 0);
        assert_eq!(broker.len(Queue::DeadLetters), 1);
    }

    #[tokio::test]
    async fn stream_ends_on_cancel_and_outage_fails_publish() {
        let broker = MemoryBroker::new(5);
        let cancel = CancellationToken::new();
        let mut stream = broker.consume(Queue::Tasks, 1, cancel.clone());
        cancel.cancel();
        assert!(stream.next().await.is_none());
        broker.set_down("maintenance");
        assert!(broker.health().is_err());
        let err = broker.publish(outgoing("z")).await.unwrap_err();
        assert!(err.is_retryable());
    }
}
