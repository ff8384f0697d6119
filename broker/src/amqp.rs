//! RabbitMQ through lapin.
//!
//! One connection per process, kept up by a small supervisor: it connects with backoff, and a
//! connection that fails stays failed and is replaced by a new one (on the next node, when
//! `broker.url` lists several), on which every consumer subscribes again and every waiting
//! publish is retried. lapin's own automatic recovery is not used: under load it was seen to
//! stall in `Reconnecting` for minutes with its node back, and to revive a connection the
//! supervisor had already abandoned, whose consumers then each held a prefetch of deliveries
//! that nobody read. A connection that cannot come back cannot hold anything.

use std::collections::BTreeMap;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use backon::{BackoffBuilder, ExponentialBuilder};
use futures::StreamExt;
use futures::stream::BoxStream;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions,
    BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions, ExchangeDeclareOptions,
    QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::uri::AMQPUri;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use proto::queues::Topology;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::{
    Acker, Broker, DEATH_REASON_HEADER, Delivery, Error, Options, Outgoing, Queue, QueueDepth,
    RETURNS_HEADER, Settle,
};

/// Handle to the broker; cheap to clone.
#[derive(Clone)]
pub struct AmqpBroker {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for AmqpBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpBroker")
            .field("url", &redact_all(&self.inner.options.url))
            .field("topology", &self.inner.topology)
            .finish()
    }
}

struct Inner {
    options: Options,
    topology: Topology,
    live: watch::Sender<Option<Arc<Live>>>,
    last_error: Mutex<Option<String>>,
    /// `false` once the broker is known unreachable: every node refused or timed out in one
    /// round, or the connection fell silent. A publish then fails at once instead of waiting
    /// for a connection that is not coming; `true` again with the next connection.
    reachable: watch::Sender<bool>,
}

struct Live {
    connection: Connection,
    publisher: Channel,
    /// The channel of the supervisor's probes (`basic.qos`, answered by the node itself).
    probe: Channel,
    /// When the node last answered a probe (or the connection was made).
    answered: Mutex<Instant>,
    /// Queues declared on this connection: the fixed ones, and tenants' lanes once first used.
    declared: Mutex<HashSet<String>>,
}

impl Live {
    fn silent_for(&self) -> Duration {
        self.answered.lock().expect("poisoned").elapsed()
    }
}

/// Keeps the connection up; run it for as long as the handle is used.
#[derive(Debug)]
pub struct Supervisor {
    broker: AmqpBroker,
}

impl AmqpBroker {
    /// Creates the handle and its supervisor. Nothing connects until the supervisor runs.
    pub fn build(options: Options) -> (Self, Supervisor) {
        let topology = Topology::new(&options.prefix);
        let (live, _) = watch::channel(None);
        let (reachable, _) = watch::channel(true);
        let broker = Self {
            inner: Arc::new(Inner {
                options,
                topology,
                live,
                last_error: Mutex::new(Some("not connected yet".into())),
                reachable,
            }),
        };
        (
            broker.clone(),
            Supervisor {
                broker: broker.clone(),
            },
        )
    }

    pub fn topology(&self) -> &Topology {
        &self.inner.topology
    }

    fn set_error(&self, error: impl Into<String>) {
        *self.inner.last_error.lock().expect("poisoned") = Some(error.into());
    }

    /// The broker is known unreachable (`why`), until the next connection.
    fn set_unreachable(&self, why: String) {
        self.set_error(why);
        self.inner.reachable.send_replace(false);
    }

    /// Waits until a connection is up (or `cancel` fires).
    async fn wait_live(&self, cancel: &CancellationToken) -> Option<Arc<Live>> {
        let mut rx = self.inner.live.subscribe();
        tokio::select! {
            _ = cancel.cancelled() => None,
            live = rx.wait_for(|l| l.is_some()) => live.ok().and_then(|l| l.clone()),
        }
    }

    /// Declares `queue` (a tenant's lane) on `channel` unless this connection already has.
    async fn ensure_declared(
        &self,
        live: &Live,
        channel: &Channel,
        queue: &str,
    ) -> Result<(), lapin::Error> {
        if live.declared.lock().expect("poisoned").contains(queue) {
            return Ok(());
        }
        declare_lane(channel, &self.inner.options, &self.inner.topology, queue).await?;
        live.declared
            .lock()
            .expect("poisoned")
            .insert(queue.to_owned());
        Ok(())
    }

    async fn publish_once(
        &self,
        live: &Live,
        queue: &str,
        message: &Outgoing,
        headers: &FieldTable,
    ) -> Result<(), lapin::Error> {
        self.ensure_declared(live, &live.publisher, queue).await?;
        let mut headers = headers.clone();
        for (name, value) in &message.headers {
            headers.insert(
                name.as_str().into(),
                AMQPValue::LongString(value.as_str().into()),
            );
        }
        let properties = BasicProperties::default()
            .with_message_id(ShortString::from(message.message_id.clone()))
            .with_content_type("application/msgpack".into())
            .with_delivery_mode(2)
            .with_headers(headers);
        let confirm = live
            .publisher
            .basic_publish(
                ShortString::from(""),
                ShortString::from(queue.to_owned()),
                BasicPublishOptions {
                    mandatory: true,
                    ..Default::default()
                },
                &message.body,
                properties,
            )
            .await?
            .await?;
        if !confirm.is_ack() {
            // A nack means the broker could not take it (e.g. a quorum queue without quorum).
            return Err(lapin::Error::from(lapin::ErrorKind::InvalidChannelState(
                lapin::ChannelState::Error,
                "basic.publish nacked",
            )));
        }
        if confirm.take_message().is_some() {
            return Err(lapin::Error::from(lapin::ErrorKind::InvalidChannelState(
                lapin::ChannelState::Error,
                "basic.publish returned: no queue bound",
            )));
        }
        Ok(())
    }
}

impl Supervisor {
    /// Connects, declares the topology and keeps a connection up until `cancel` fires.
    pub async fn run(self, cancel: CancellationToken) {
        let broker = self.broker;
        let options = &broker.inner.options;
        let urls = options.urls();
        if urls.is_empty() {
            broker.set_error("broker.url names no node");
            tracing::error!("broker.url names no node");
            cancel.cancelled().await;
            return;
        }
        let mut delays = backoff(options.reconnect_max_delay).build();
        // Index of the next node to try; a failed node passes the turn without a delay until
        // every node failed once.
        let mut next = 0usize;
        let mut failed_in_round = 0usize;
        loop {
            if cancel.is_cancelled() {
                break;
            }
            let url = &urls[next % urls.len()];
            next += 1;
            let connected = tokio::time::timeout(
                options.connect_timeout,
                connect(url, options, &broker.inner.topology),
            )
            .await
            .unwrap_or_else(|_| {
                Err(lapin::Error::from(lapin::ErrorKind::IOError(Arc::new(
                    std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no connection within {:?}", options.connect_timeout),
                    ),
                ))))
            });
            match connected {
                Ok(live) => {
                    tracing::info!(url = %redact(url), "connected to broker");
                    failed_in_round = 0;
                    delays = backoff(options.reconnect_max_delay).build();
                    *broker.inner.last_error.lock().expect("poisoned") = None;
                    let live = Arc::new(live);
                    broker.inner.reachable.send_replace(true);
                    broker.inner.live.send_replace(Some(live.clone()));
                    let prober = tokio::spawn(probe(
                        broker.clone(),
                        live.clone(),
                        options.probe_interval,
                        options.silence_limit,
                    ));
                    // A failed connection stays failed (no automatic recovery): replace it. A
                    // connection that is neither up nor failed for long is replaced as well.
                    let mut away_since: Option<Instant> = None;
                    loop {
                        tokio::select! {
                            _ = cancel.cancelled() => break,
                            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                        }
                        let status = live.connection.status();
                        if status.errored() || status.closed() {
                            break;
                        }
                        // A channel the broker closed (a channel-level error) is not recovered
                        // on a healthy connection, and every publish would fail on it: start
                        // over on a new connection.
                        let publisher = live.publisher.status();
                        if status.connected()
                            && !(publisher.connected()
                                || publisher.initializing()
                                || publisher.closing())
                        {
                            tracing::warn!("publisher channel closed by the broker; reconnecting");
                            break;
                        }
                        // Packets dropped without an error leave the connection "connected" until
                        // the heartbeats run out (twice `heartbeat`: then lapin fails it and it is
                        // replaced); the probes see the silence sooner. The connection is kept
                        // meanwhile: a short silence costs no redelivery.
                        let silent = live.silent_for();
                        let reachable = *broker.inner.reachable.borrow();
                        if status.connected() && silent >= options.silence_limit && reachable {
                            tracing::warn!(url = %redact(url), silent = ?silent, "broker node silent: taking no work that needs it");
                            broker.set_unreachable(format!(
                                "{}: no answer for {:.1}s",
                                redact(url),
                                silent.as_secs_f64()
                            ));
                        }
                        if status.connected() {
                            away_since = None;
                        } else if away_since.get_or_insert_with(Instant::now).elapsed()
                            >= CONNECTION_AWAY_LIMIT
                        {
                            tracing::warn!(url = %redact(url), "broker connection neither up nor failed; replacing it");
                            break;
                        }
                    }
                    prober.abort();
                    broker.inner.live.send_replace(None);
                    if cancel.is_cancelled() {
                        let _ = live.connection.close(200, "shutdown".into()).await;
                        break;
                    }
                    // Close what is left of it (nothing, once it failed); it may never answer.
                    let abandoned = live.clone();
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(
                            Duration::from_secs(2),
                            abandoned.connection.close(200, "failing over".into()),
                        )
                        .await;
                    });
                    if *broker.inner.reachable.borrow() {
                        broker.set_error(format!("{}: connection lost", redact(url)));
                    }
                    tracing::warn!(url = %redact(url), "broker connection lost for good; reconnecting");
                }
                Err(e) => {
                    broker.set_error(format!("{}: {e}", redact(url)));
                    failed_in_round += 1;
                    if failed_in_round < urls.len() {
                        tracing::warn!(url = %redact(url), error = %e, "cannot connect to broker node; trying the next");
                        continue;
                    }
                    failed_in_round = 0;
                    broker.set_unreachable(format!("{}: {e}", redact(url)));
                    let delay = delays.next().unwrap_or(options.reconnect_max_delay);
                    tracing::warn!(url = %redact(url), error = %e, retry_in = ?delay, "cannot connect to broker");
                    tokio::select! {
                        _ = cancel.cancelled() => break,
                        _ = tokio::time::sleep(delay) => {}
                    }
                }
            }
        }
    }
}

fn backoff(max_delay: Duration) -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(max_delay)
        .with_jitter()
        .without_max_times()
}

/// How long a connection may be neither connected nor failed before the supervisor replaces it.
const CONNECTION_AWAY_LIMIT: Duration = Duration::from_secs(3);

/// Probes `live` every `every` with a round trip its node answers itself (`basic.qos` on a
/// channel of its own: no queue, no quorum, only the connection and the node), and records
/// each answer. The supervisor judges the silence; an answer after one ends it.
async fn probe(broker: AmqpBroker, live: Arc<Live>, every: Duration, limit: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let asked = live.probe.basic_qos(0, BasicQosOptions::default());
        match tokio::time::timeout(limit, asked).await {
            Ok(Ok(())) => {
                *live.answered.lock().expect("poisoned") = Instant::now();
                if !*broker.inner.reachable.borrow() {
                    tracing::info!("broker node answers again");
                    *broker.inner.last_error.lock().expect("poisoned") = None;
                    broker.inner.reachable.send_replace(true);
                }
            }
            // The channel or its connection failed: the supervisor sees that in their status.
            Ok(Err(_)) => return,
            Err(_) => {} // no answer yet: the silence grows
        }
    }
}

async fn connect(url: &str, options: &Options, topology: &Topology) -> Result<Live, lapin::Error> {
    // No automatic recovery and no retry inside lapin: the supervisor owns both.
    let properties = ConnectionProperties::default().with_connection_name("codegen-cluster".into());
    let mut uri: AMQPUri = url.parse().map_err(|e: String| {
        lapin::Error::from(lapin::ErrorKind::IOError(Arc::new(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            e,
        ))))
    })?;
    if uri.query.heartbeat.is_none() {
        let seconds = options.heartbeat.as_secs().clamp(1, u64::from(u16::MAX));
        uri.query.heartbeat = Some(u16::try_from(seconds).unwrap_or(u16::MAX));
    }
    let connection = Connection::connect_uri(uri, properties).await?;
    let channel = connection.create_channel().await?;
    let probe = connection.create_channel().await?;
    declare(&channel, options, topology).await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    let declared = [
        &topology.tasks,
        &topology.executions,
        &topology.dead_letters,
    ]
    .into_iter()
    .cloned()
    .collect();
    Ok(Live {
        connection,
        publisher: channel,
        probe,
        answered: Mutex::new(Instant::now()),
        declared: Mutex::new(declared),
    })
}

/// Declares the queues and the dead-letter route. Declaring is idempotent as long as the
/// arguments match; a queue declared earlier with other arguments fails loudly here.
async fn declare(
    channel: &Channel,
    options: &Options,
    topology: &Topology,
) -> Result<(), lapin::Error> {
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    channel
        .exchange_declare(
            ShortString::from(topology.dead_letter_exchange.clone()),
            ExchangeKind::Direct,
            ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await?;
    let mut dead_args = FieldTable::default();
    dead_args.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("quorum".into()),
    );
    channel
        .queue_declare(
            ShortString::from(topology.dead_letters.clone()),
            durable,
            dead_args,
        )
        .await?;
    channel
        .queue_bind(
            ShortString::from(topology.dead_letters.clone()),
            ShortString::from(topology.dead_letter_exchange.clone()),
            ShortString::from(topology.dead_letters.clone()),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
    let task_args = work_queue_args(options, topology);
    channel
        .queue_declare(
            ShortString::from(topology.tasks.clone()),
            durable,
            task_args.clone(),
        )
        .await?;
    channel
        .queue_declare(
            ShortString::from(topology.executions.clone()),
            durable,
            task_args,
        )
        .await?;
    Ok(())
}

/// Declares a tenant's lane of a work queue, with the same arguments as the queue itself.
async fn declare_lane(
    channel: &Channel,
    options: &Options,
    topology: &Topology,
    name: &str,
) -> Result<(), lapin::Error> {
    channel
        .queue_declare(
            ShortString::from(name.to_owned()),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            work_queue_args(options, topology),
        )
        .await?;
    Ok(())
}

/// The arguments of every work queue (tasks, executions, their lanes).
fn work_queue_args(options: &Options, topology: &Topology) -> FieldTable {
    let mut task_args = FieldTable::default();
    task_args.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("quorum".into()),
    );
    // Quorum queues in RabbitMQ 3.10 have no default delivery limit: a poison message would
    // otherwise be redelivered forever.
    task_args.insert(
        "x-delivery-limit".into(),
        AMQPValue::LongInt(i32::try_from(options.delivery_limit).unwrap_or(i32::MAX)),
    );
    task_args.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString(topology.dead_letter_exchange.clone().into()),
    );
    task_args.insert(
        "x-dead-letter-routing-key".into(),
        AMQPValue::LongString(topology.dead_letters.clone().into()),
    );
    // At-least-once dead-lettering: the message leaves the task queue only once the
    // dead-letter queue has it. It requires reject-publish overflow.
    task_args.insert(
        "x-dead-letter-strategy".into(),
        AMQPValue::LongString("at-least-once".into()),
    );
    task_args.insert(
        "x-overflow".into(),
        AMQPValue::LongString("reject-publish".into()),
    );
    task_args
}

/// The URL without its password, for logs and `/readyz`.
/// [`redact`] for each address of a comma-separated list.
fn redact_all(urls: &str) -> String {
    urls.split(',')
        .map(|u| redact(u.trim()))
        .collect::<Vec<_>>()
        .join(",")
}

fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{}:***{}", &url[..scheme + 3], user, &url[at..])
        }
        _ => url.to_string(),
    }
}

impl AmqpBroker {
    /// Publishes to `queue` with a confirm, through reconnects, within `publish_timeout`.
    async fn publish_to(&self, queue: &str, message: Outgoing) -> Result<(), Error> {
        self.publish_with(queue, message, FieldTable::default())
            .await
    }

    /// [`Self::publish_to`] with headers.
    async fn publish_with(
        &self,
        queue: &str,
        message: Outgoing,
        headers: FieldTable,
    ) -> Result<(), Error> {
        let unreachable =
            || Error::Unavailable(self.health().err().unwrap_or_else(|| "unreachable".into()));
        let attempt = async {
            let never = CancellationToken::new();
            loop {
                // A broker known unreachable: no waiting for a connection that is not coming,
                // nor for the confirm of one that fell silent (the message may still arrive:
                // a failed publish is one that may have happened).
                let mut reachable = self.inner.reachable.subscribe();
                let live = tokio::select! {
                    live = self.wait_live(&never) => live,
                    _ = reachable.wait_for(|r| !*r) => return Err(unreachable()),
                };
                let Some(live) = live else {
                    continue;
                };
                // A connection the supervisor gave up on may never answer again: whatever
                // waits on it stops once the supervisor replaced it, and the next turn
                // publishes on the new one.
                let mut current = self.inner.live.subscribe();
                let replaced =
                    current.wait_for(|l| !l.as_ref().is_some_and(|l| Arc::ptr_eq(l, &live)));
                let once = async {
                    match self.publish_once(&live, queue, &message, &headers).await {
                        Ok(()) => true,
                        Err(e) => {
                            self.set_error(e.to_string());
                            tracing::warn!(error = %e, message_id = %message.message_id, "publish failed; retrying");
                            // A failed connection is replaced (`replaced` below ends the wait);
                            // a nack or a return on a healthy one is retried after a pause.
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            false
                        }
                    }
                };
                tokio::select! {
                    published = once => if published { return Ok(()) },
                    _ = replaced => {}
                    _ = reachable.wait_for(|r| !*r) => return Err(unreachable()),
                }
            }
        };
        match tokio::time::timeout(self.inner.options.publish_timeout, attempt).await {
            Ok(result) => result,
            Err(_) => Err(Error::Unavailable(format!(
                "no confirmed publish within {:?}: {}",
                self.inner.options.publish_timeout,
                self.health()
                    .err()
                    .unwrap_or_else(|| "broker did not confirm".into())
            ))),
        }
    }
}

#[async_trait]
impl Broker for AmqpBroker {
    async fn publish(&self, message: Outgoing) -> Result<(), Error> {
        let queue = Topology::lane(&self.inner.topology.tasks, message.lane.as_deref());
        self.publish_to(&queue, message).await
    }

    async fn publish_execution(&self, message: Outgoing) -> Result<(), Error> {
        let queue = Topology::lane(&self.inner.topology.executions, message.lane.as_deref());
        self.publish_to(&queue, message).await
    }

    fn consume_lane(
        &self,
        queue: Queue,
        lane: Option<String>,
        prefetch: u16,
        cancel: CancellationToken,
    ) -> BoxStream<'static, Delivery> {
        let (tx, rx) = mpsc::channel(usize::from(prefetch.max(1)));
        let broker = self.clone();
        let topology = &broker.inner.topology;
        let name = match queue {
            Queue::Tasks => Topology::lane(&topology.tasks, lane.as_deref()),
            Queue::Executions => Topology::lane(&topology.executions, lane.as_deref()),
            Queue::DeadLetters => topology.dead_letters.clone(),
        };
        tokio::spawn(async move {
            let mut live_rx = broker.inner.live.subscribe();
            'connection: loop {
                let Some(live) = broker.wait_live(&cancel).await else {
                    break;
                };
                let current = live_rx.borrow_and_update().clone();
                if !current.is_some_and(|c| Arc::ptr_eq(&c, &live)) {
                    continue 'connection; // replaced while we were getting it
                }
                let channel = match open_consumer_channel(&live, prefetch).await {
                    Ok(channel) => channel,
                    Err(e) => {
                        tracing::warn!(error = %e, queue = %name, "cannot open consumer channel");
                        tokio::select! {
                            _ = cancel.cancelled() => break,
                            _ = live_rx.changed() => continue,
                            _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        }
                    }
                };
                if let Err(e) = broker.ensure_declared(&live, &channel, &name).await {
                    tracing::warn!(error = %e, queue = %name, "cannot declare the queue");
                    tokio::select! {
                        _ = cancel.cancelled() => break,
                        _ = live_rx.changed() => continue,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    }
                }
                let mut consumer = match channel
                    .basic_consume(
                        ShortString::from(name.clone()),
                        ShortString::from(""),
                        BasicConsumeOptions::default(),
                        FieldTable::default(),
                    )
                    .await
                {
                    Ok(consumer) => consumer,
                    Err(e) => {
                        tracing::warn!(error = %e, queue = %name, "cannot start consuming");
                        tokio::select! {
                            _ = cancel.cancelled() => break,
                            _ = live_rx.changed() => continue,
                            _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        }
                    }
                };
                tracing::info!(queue = %name, prefetch, "consuming");
                loop {
                    tokio::select! {
                        _ = cancel.cancelled() => {
                            let _ = channel
                                .basic_cancel(consumer.tag(), BasicCancelOptions::default())
                                .await;
                            // Deliveries the broker sent before the cancel still reach the
                            // stream, so the consumer can settle them (e.g. hand them back)
                            // rather than leave them to a channel close, which counts.
                            let drained = tokio::time::timeout(Duration::from_secs(2), async {
                                while let Some(Ok(delivery)) = consumer.next().await {
                                    let delivery = convert(delivery, channel.clone(), &broker, &name);
                                    if tx.send(delivery).await.is_err() {
                                        break;
                                    }
                                }
                            })
                            .await;
                            if drained.is_err() {
                                // Its channel stays open for the deliveries already handed out;
                                // they are settled on it.
                                tracing::debug!(queue = %name, "consumer still open after cancel");
                            }
                            tracing::info!(queue = %name, "stopped consuming");
                            break 'connection;
                        }
                        changed = live_rx.changed() => {
                            // The supervisor replaced this connection: consume on the new one.
                            // The old consumer may never end on its own; its unacked
                            // deliveries go back to the queue with its connection.
                            let current = live_rx.borrow_and_update().clone();
                            let same = current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &live));
                            if changed.is_err() {
                                break 'connection;
                            }
                            if !same {
                                tracing::warn!(queue = %name, "broker connection replaced; consuming on the new one");
                                continue 'connection;
                            }
                        }
                        item = consumer.next() => match item {
                            Some(Ok(delivery)) => {
                                let delivery = convert(delivery, channel.clone(), &broker, &name);
                                let limit = broker.inner.options.delivery_limit;
                                if queue != Queue::DeadLetters && delivery.past_limit(limit) {
                                    // Returns carried over a hand-back plus the broker's own:
                                    // past the limit, as the broker would have decided.
                                    tracing::warn!(queue = %name, message_id = ?delivery.message_id, count = delivery.delivery_count, "dead-lettering: delivery limit reached");
                                    if let Err(e) = delivery.settle(Settle::DeadLetterLimit).await {
                                        tracing::warn!(error = %e, "cannot dead-letter; the broker will redeliver");
                                    }
                                    continue;
                                }
                                if tx.send(delivery).await.is_err() {
                                    break 'connection;
                                }
                            }
                            Some(Err(e)) => {
                                // The channel or its connection failed and stays failed: a new
                                // channel (on a new connection, once the supervisor has one).
                                tracing::warn!(error = %e, queue = %name, "consumer interrupted");
                                tokio::time::sleep(Duration::from_millis(200)).await;
                                continue 'connection;
                            }
                            None => {
                                tokio::time::sleep(Duration::from_millis(200)).await;
                                continue 'connection;
                            }
                        }
                    }
                }
            }
        });
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|d| (d, rx)) })
            .boxed()
    }

    async fn depths(&self, tenants: &[String]) -> Result<Vec<QueueDepth>, Error> {
        let Some(live) = self.inner.live.borrow().clone() else {
            return Err(Error::Unavailable(self.health().err().unwrap_or_default()));
        };
        let t = &self.inner.topology;
        let mut names = vec![
            t.tasks.clone(),
            t.executions.clone(),
            t.dead_letters.clone(),
        ];
        for tenant in tenants {
            names.push(Topology::lane(&t.tasks, Some(tenant)));
            names.push(Topology::lane(&t.executions, Some(tenant)));
        }
        let protocol = |e: lapin::Error| Error::Protocol(e.to_string());
        let mut channel = live.connection.create_channel().await.map_err(protocol)?;
        let mut depths = Vec::new();
        for name in names {
            // A passive declare answers the counts without creating anything; for a lane
            // that does not exist (404) the broker closes the channel, so the next one opens
            // another. Any other refusal is the answer's failure, not an absent queue.
            let passive = QueueDeclareOptions {
                passive: true,
                durable: true,
                ..Default::default()
            };
            match channel
                .queue_declare(
                    ShortString::from(name.clone()),
                    passive,
                    FieldTable::default(),
                )
                .await
            {
                Ok(queue) => depths.push(QueueDepth {
                    name,
                    ready: queue.message_count(),
                    consumers: queue.consumer_count(),
                }),
                Err(e) if matches!(e.kind(), lapin::ErrorKind::ProtocolError(amqp) if amqp.get_id() == 404) =>
                {
                    channel = live.connection.create_channel().await.map_err(protocol)?;
                }
                Err(e) => return Err(protocol(e)),
            }
        }
        let _ = channel.close(200, ShortString::from("counted")).await;
        Ok(depths)
    }

    fn health(&self) -> Result<(), String> {
        let live = self.inner.live.borrow().clone();
        match live {
            Some(live) if live.connection.status().connected() => {
                let silent = live.silent_for();
                if silent >= self.inner.options.silence_limit || !*self.inner.reachable.borrow() {
                    Err(format!(
                        "rabbitmq at {}: no answer for {:.1}s",
                        redact_all(&self.inner.options.url),
                        silent.as_secs_f64()
                    ))
                } else {
                    Ok(())
                }
            }
            Some(_) => Err(format!(
                "rabbitmq at {}: reconnecting",
                redact_all(&self.inner.options.url)
            )),
            None => Err(format!(
                "rabbitmq at {}: {}",
                redact_all(&self.inner.options.url),
                self.inner
                    .last_error
                    .lock()
                    .expect("poisoned")
                    .clone()
                    .unwrap_or_else(|| "not connected".into())
            )),
        }
    }
}

async fn open_consumer_channel(live: &Live, prefetch: u16) -> Result<Channel, lapin::Error> {
    let channel = live.connection.create_channel().await?;
    channel
        .basic_qos(prefetch.max(1), BasicQosOptions::default())
        .await?;
    Ok(channel)
}

fn convert(
    delivery: lapin::message::Delivery,
    channel: Channel,
    broker: &AmqpBroker,
    queue: &str,
) -> Delivery {
    let headers = delivery.properties.headers().clone().unwrap_or_default();
    let count = |name: &str| headers.inner().get(name).and_then(as_u32).unwrap_or(0);
    let carried = count(RETURNS_HEADER);
    let delivery_count = count("x-delivery-count").saturating_add(carried);
    let text = |name: &str| {
        headers.inner().get(name).and_then(|v| match v {
            AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
            AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
            _ => None,
        })
    };
    let death_reason = text(DEATH_REASON_HEADER).or_else(|| text("x-first-death-reason"));
    // The application's headers; `x-` ones are the broker's and ours.
    let carried_headers: BTreeMap<String, String> = headers
        .inner()
        .keys()
        .map(|name| name.as_str())
        .filter(|name| !name.starts_with("x-"))
        .filter_map(|name| Some((name.to_owned(), text(name)?)))
        .collect();
    let message_id = delivery
        .properties
        .message_id()
        .as_ref()
        .map(|m| m.as_str().to_owned());
    Delivery::new(
        delivery.data.clone(),
        message_id.clone(),
        delivery.redelivered,
        delivery_count,
        death_reason,
        carried_headers.clone(),
        Box::new(LapinAcker {
            acker: delivery.acker.clone(),
            _channel: channel,
            republish: Republish {
                broker: broker.clone(),
                queue: queue.to_owned(),
                message_id: message_id.unwrap_or_default(),
                body: delivery.data,
                headers: carried_headers,
                returns: delivery_count,
            },
        }),
    )
}

fn as_u32(value: &AMQPValue) -> Option<u32> {
    let n: i64 = match *value {
        AMQPValue::ShortShortInt(n) => n.into(),
        AMQPValue::ShortShortUInt(n) => n.into(),
        AMQPValue::ShortInt(n) => n.into(),
        AMQPValue::ShortUInt(n) => n.into(),
        AMQPValue::LongInt(n) => n.into(),
        AMQPValue::LongUInt(n) => n.into(),
        AMQPValue::LongLongInt(n) => n,
        _ => return None,
    };
    u32::try_from(n).ok()
}

struct LapinAcker {
    acker: lapin::Acker,
    /// Settling needs the channel open; it closes when its last handle is dropped.
    _channel: Channel,
    republish: Republish,
}

/// What a hand-back needs to put the message back as a new one.
struct Republish {
    broker: AmqpBroker,
    queue: String,
    message_id: String,
    body: Vec<u8>,
    headers: BTreeMap<String, String>,
    /// The returns the message had so far (carried and the broker's).
    returns: u32,
}

impl LapinAcker {
    /// Publishes a copy of the message to `queue` with `headers`, confirmed, then acks the
    /// original. If the copy cannot be published, the original goes back to its queue.
    async fn move_to(&self, queue: &str, headers: FieldTable) -> Result<bool, lapin::Error> {
        // Straight to the queue it came from (its lane included).
        let message = Outgoing {
            message_id: self.republish.message_id.clone(),
            body: self.republish.body.clone(),
            lane: None,
            headers: self.republish.headers.clone(),
        };
        if let Err(e) = self
            .republish
            .broker
            .publish_with(queue, message, headers)
            .await
        {
            tracing::warn!(error = %e, %queue, "cannot republish; returning the delivery instead");
            return self
                .acker
                .nack(BasicNackOptions {
                    requeue: true,
                    ..Default::default()
                })
                .await;
        }
        self.acker.ack(BasicAckOptions::default()).await
    }
}

#[async_trait]
impl Acker for LapinAcker {
    async fn settle(&self, how: Settle) -> Result<(), Error> {
        let result = match how {
            Settle::Ack => self.acker.ack(BasicAckOptions::default()).await,
            Settle::HandBack => {
                let mut headers = FieldTable::default();
                headers.insert(
                    RETURNS_HEADER.into(),
                    AMQPValue::LongLongInt(self.republish.returns.into()),
                );
                self.move_to(&self.republish.queue, headers).await
            }
            Settle::DeadLetterLimit => {
                let mut headers = FieldTable::default();
                headers.insert(
                    DEATH_REASON_HEADER.into(),
                    AMQPValue::LongString("delivery_limit".into()),
                );
                let dead = self.republish.broker.inner.topology.dead_letters.clone();
                self.move_to(&dead, headers).await
            }
            Settle::DeadLetter => {
                self.acker
                    .nack(BasicNackOptions {
                        requeue: false,
                        ..Default::default()
                    })
                    .await
            }
            Settle::Requeue => {
                self.acker
                    .nack(BasicNackOptions {
                        requeue: true,
                        ..Default::default()
                    })
                    .await
            }
        };
        result
            .map(|_| ())
            .map_err(|e| Error::Protocol(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_node_of_a_list_is_tried_and_redacted() {
        let options = Options {
            url: "amqp://u:p@a:5672/%2f, amqp://b:5672/%2f,".into(),
            ..Options::default()
        };
        assert_eq!(
            options.urls(),
            vec!["amqp://u:p@a:5672/%2f", "amqp://b:5672/%2f"]
        );
        assert_eq!(
            redact_all(&options.url),
            "amqp://u:***@a:5672/%2f,amqp://b:5672/%2f,"
        );
    }

    #[test]
    fn redact_hides_the_password_only() {
        assert_eq!(
            redact("amqp://user:secret@host:5672/%2f"),
            "amqp://user:***@host:5672/%2f"
        );
        assert_eq!(redact("amqp://127.0.0.1:5672"), "amqp://127.0.0.1:5672");
    }

    #[test]
    fn delivery_count_reads_any_integer_width() {
        assert_eq!(as_u32(&AMQPValue::LongLongInt(3)), Some(3));
        assert_eq!(as_u32(&AMQPValue::LongInt(2)), Some(2));
        assert_eq!(as_u32(&AMQPValue::LongLongInt(-1)), None);
        assert_eq!(as_u32(&AMQPValue::Boolean(true)), None);
    }
}
