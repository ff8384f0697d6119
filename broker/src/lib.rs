//! The task transport.
//!
//! [`Broker`] is what coordinators and workers need from RabbitMQ: publish a task with a
//! publisher confirm, consume the task queue with manual acks, and consume the dead-letter
//! queue. [`amqp::AmqpBroker`] is the real implementation (lapin, its connection and
//! topology replaced by a supervisor of our own: see `amqp`); [`memory::MemoryBroker`] is an
//! in-process fake for unit tests.
//!
//! Invariants:
//! - `publish` returns `Ok` only after the broker confirmed the message (it is on disk in a
//!   durable quorum queue).
//! - the task queue is a durable quorum queue with an explicit `x-delivery-limit` and a
//!   dead-letter exchange; a rejected message or one delivered more often than the limit goes
//!   to the dead-letter queue, never silently away.
//! - a [`Delivery`] is settled exactly once, by the consumer, with `ack`, `dead_letter`,
//!   `requeue` or `hand_back`; dropping it unsettled gives it back like `requeue`.
//! - only a task's own failures count towards the delivery limit: `requeue` (and a crash, which
//!   closes the channel) counts; `hand_back`, for a task that could not run because a dependency
//!   was down, republishes it with the count it had so far (header [`RETURNS_HEADER`]), so an
//!   outage never brings a task closer to the dead-letter queue. A delivery whose carried and
//!   broker counts together pass the limit is dead-lettered by the consumer with the reason
//!   `delivery_limit`, as the broker would have.

pub mod amqp;
pub mod memory;

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

pub use amqp::AmqpBroker;
pub use memory::MemoryBroker;

/// Broker settings (`[broker]` in `codegen.toml`, `CODEGEN__BROKER__*` in the environment).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// AMQP URL of the RabbitMQ node, or of every node of one cluster as a comma-separated
    /// list: the client connects to the first that answers and moves to the next when its
    /// node is lost.
    pub url: String,
    /// Prefix of every exchange and queue name, so clusters can share a broker.
    pub prefix: String,
    /// Deliveries of one task before it is dead-lettered (`x-delivery-limit`).
    pub delivery_limit: u32,
    /// How long `publish` waits for a connection and a confirm before it gives up. It stops
    /// waiting sooner once the broker is known unreachable (see `silence_limit`).
    #[serde(with = "humantime_serde")]
    pub publish_timeout: Duration,
    /// Upper bound of the reconnect backoff.
    #[serde(with = "humantime_serde")]
    pub reconnect_max_delay: Duration,
    /// Bound of one connection attempt (TCP, AMQP handshake, topology): a node whose packets
    /// are dropped costs this, not the operating system's minutes-long TCP timeout.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// AMQP heartbeat asked of the broker (unless the URL sets `heartbeat`, whole seconds): a
    /// connection silent for twice this is closed by both ends, so the deliveries a cut-off
    /// process held go back to the queue for the others.
    #[serde(with = "humantime_serde")]
    pub heartbeat: Duration,
    /// How often the connection is probed with a round trip to its node.
    #[serde(with = "humantime_serde")]
    pub probe_interval: Duration,
    /// A connection whose node has answered nothing for this long is taken for cut off, as a
    /// silent partition (packets dropped, no error) leaves it: `/readyz` says so and publishes
    /// fail at once, until the node answers again. The connection itself is kept until the
    /// heartbeats run out (twice `heartbeat`), so a shorter silence redelivers nothing.
    #[serde(with = "humantime_serde")]
    pub silence_limit: Duration,
}

impl Options {
    /// The node addresses in `url`, in the order they are tried.
    pub fn urls(&self) -> Vec<String> {
        self.url
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(str::to_owned)
            .collect()
    }
}

impl Default for Options {
    fn default() -> Self {
        Self {
            url: "amqp://127.0.0.1:5672/%2f".into(),
            prefix: "codegen".into(),
            delivery_limit: 5,
            publish_timeout: Duration::from_secs(10),
            reconnect_max_delay: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            heartbeat: Duration::from_secs(10),
            probe_interval: Duration::from_secs(1),
            silence_limit: Duration::from_secs(3),
        }
    }
}

/// Which queue to consume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Queue {
    /// Pipeline tasks (plan, implement, integrate).
    Tasks,
    /// Plain executions.
    Executions,
    DeadLetters,
}

/// A message to publish on the task queue.
#[derive(Debug, Clone, Default)]
pub struct Outgoing {
    /// Carried as the AMQP `message-id`, so even an undecodable body can be traced to its task.
    pub message_id: String,
    pub body: Vec<u8>,
    /// The tenant whose lane of the tasks or executions queue it goes to (`None`: work of no
    /// tenant).
    pub lane: Option<String>,
    /// Application headers (the W3C trace context: `traceparent`, `tracestate`), carried as
    /// AMQP headers and kept when the message is handed back or dead-lettered. Names must
    /// not start with `x-` (the broker's and ours).
    pub headers: BTreeMap<String, String>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No connection to the broker right now; worth retrying later.
    #[error("broker unavailable: {0}")]
    Unavailable(String),
    /// The broker refused the message (negative confirm or unroutable).
    #[error("broker refused the message: {0}")]
    Refused(String),
    /// A protocol or channel failure; the connection recovers by itself.
    #[error("broker error: {0}")]
    Protocol(String),
}

impl Error {
    /// Whether the same call may succeed later without any change on the caller's side.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Unavailable(_) | Error::Protocol(_))
    }
}

/// One received message. Settle it with exactly one of the consuming methods.
pub struct Delivery {
    pub body: Vec<u8>,
    pub message_id: Option<String>,
    pub redelivered: bool,
    /// Earlier deliveries of this message (quorum queues count them in `x-delivery-count`).
    pub delivery_count: u32,
    /// For dead letters: why the broker dead-lettered it (`rejected`, `delivery_limit`, ...).
    pub death_reason: Option<String>,
    /// The headers it was published with ([`Outgoing::headers`]).
    pub headers: BTreeMap<String, String>,
    /// `None` once settled.
    acker: Option<Box<dyn Acker>>,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("message_id", &self.message_id)
            .field("bytes", &self.body.len())
            .field("redelivered", &self.redelivered)
            .field("delivery_count", &self.delivery_count)
            .field("death_reason", &self.death_reason)
            .finish()
    }
}

impl Delivery {
    pub(crate) fn new(
        body: Vec<u8>,
        message_id: Option<String>,
        redelivered: bool,
        delivery_count: u32,
        death_reason: Option<String>,
        headers: BTreeMap<String, String>,
        acker: Box<dyn Acker>,
    ) -> Self {
        Self {
            body,
            message_id,
            redelivered,
            delivery_count,
            death_reason,
            headers,
            acker: Some(acker),
        }
    }

    /// Done: the broker forgets the message.
    pub async fn ack(self) -> Result<(), Error> {
        self.settle(Settle::Ack).await
    }

    /// Never processable: route it to the dead-letter queue now.
    pub async fn dead_letter(self) -> Result<(), Error> {
        self.settle(Settle::DeadLetter).await
    }

    /// Not processed because of the task itself: give it back for another delivery (counts
    /// towards the delivery limit).
    pub async fn requeue(self) -> Result<(), Error> {
        self.settle(Settle::Requeue).await
    }

    /// Not processed because infrastructure was down: put it back at the end of its queue
    /// without counting this delivery towards the limit (the message is republished with its
    /// count so far, then this delivery is acked). A crash between the two leaves a duplicate,
    /// never a loss; results are written once, so a duplicate is harmless.
    pub async fn hand_back(self) -> Result<(), Error> {
        self.settle(Settle::HandBack).await
    }

    /// Whether this delivery's returns (carried and the broker's) are past `limit`.
    pub(crate) fn past_limit(&self, limit: u32) -> bool {
        self.delivery_count > limit
    }

    pub(crate) async fn settle(mut self, how: Settle) -> Result<(), Error> {
        match self.acker.take() {
            Some(acker) => acker.settle(how).await,
            None => Ok(()),
        }
    }
}

/// A delivery dropped unsettled (its handler panicked or was aborted) goes back to the queue
/// at once instead of staying unacked until the connection closes: a task that keeps
/// crashing its handler is then dead-lettered by the delivery limit like any poison message.
impl Drop for Delivery {
    fn drop(&mut self) {
        let Some(acker) = self.acker.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if let Err(e) = acker.settle(Settle::Requeue).await {
                        tracing::warn!(error = %e, "cannot requeue a dropped delivery; the broker will redeliver it");
                    }
                });
            }
            Err(_) => {
                tracing::warn!("delivery dropped outside a runtime; the broker will redeliver it")
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settle {
    Ack,
    DeadLetter,
    Requeue,
    HandBack,
    /// Past the delivery limit counting carried returns: to the dead-letter queue, named so.
    DeadLetterLimit,
}

#[async_trait]
pub(crate) trait Acker: Send + Sync {
    async fn settle(&self, how: Settle) -> Result<(), Error>;
}

/// Header carrying the returns a task had before it was handed back (republished), so
/// the delivery limit still counts them: the broker's own count restarts at 0 on a republish.
pub const RETURNS_HEADER: &str = "x-codegen-returns";

/// Header naming why a consumer dead-lettered a message itself (the broker's `x-death` headers
/// name the broker's reasons).
pub const DEATH_REASON_HEADER: &str = "x-codegen-death-reason";

/// What the rest of the system needs from a message broker.
#[async_trait]
pub trait Broker: Send + Sync + 'static {
    /// Publishes one task durably; returns once the broker has confirmed it.
    async fn publish(&self, message: Outgoing) -> Result<(), Error>;

    /// Publishes one plain execution durably (confirmed) to the executions queue.
    async fn publish_execution(&self, message: Outgoing) -> Result<(), Error>;

    /// Consumes `queue` with at most `prefetch` unsettled deliveries. The stream waits through
    /// broker outages and ends once `cancel` fires (the broker stops sending at that point;
    /// deliveries already handed out can still be settled).
    fn consume(
        &self,
        queue: Queue,
        prefetch: u16,
        cancel: CancellationToken,
    ) -> BoxStream<'static, Delivery> {
        self.consume_lane(queue, None, prefetch, cancel)
    }

    /// [`Broker::consume`] for one tenant's lane of the tasks or executions queue
    /// (`proto::queues::Topology::lane`); `None` is the lane of work of no tenant.
    fn consume_lane(
        &self,
        queue: Queue,
        lane: Option<String>,
        prefetch: u16,
        cancel: CancellationToken,
    ) -> BoxStream<'static, Delivery>;

    /// `Ok` when connected; otherwise why not, for `/readyz`.
    fn health(&self) -> Result<(), String>;

    /// What waits in the work queues and who consumes them: the tasks, executions and
    /// dead-letter queues, and the tasks' and executions' lanes of `tenants` that exist (a
    /// lane is made when first used).
    async fn depths(&self, tenants: &[String]) -> Result<Vec<QueueDepth>, Error>;
}

/// One queue's messages ready for a consumer (not those delivered and unsettled) and its
/// consumers, as the broker counts them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueDepth {
    pub name: String,
    pub ready: u32,
    pub consumers: u32,
}
