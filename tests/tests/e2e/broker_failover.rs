//! A client given every node of a RabbitMQ cluster connects to the first that answers and
//! moves to the next when its node goes away, consumers included. Two nodes of the test's own
//! (real servers, not clustered: what is checked here is the client's failover, not the
//! cluster's replication, which the compose stack's tests cover).

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::time::{Duration, Instant};

use broker::{AmqpBroker, Broker, Options, Outgoing, Queue};
use futures::StreamExt;
use tests::{PrivateRabbit, free_port};
use tokio_util::sync::CancellationToken;

async fn wait_healthy(broker: &AmqpBroker, within: Duration) {
    let deadline = Instant::now() + within;
    while let Err(e) = broker.health() {
        assert!(Instant::now() < deadline, "never connected: {e}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn message(id: &str) -> Outgoing {
    Outgoing {
        message_id: id.into(),
        body: id.as_bytes().to_vec(),
        lane: None,
        headers: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_given_every_node_skips_a_dead_one_and_fails_over_when_its_node_stops() {
    let mut first = tokio::task::block_in_place(PrivateRabbit::start);
    let second = tokio::task::block_in_place(PrivateRabbit::start);
    let closed = format!("amqp://127.0.0.1:{}/%2f", free_port());
    let options = Options {
        url: format!("{closed},{},{}", first.url(), second.url()),
        prefix: format!("failover-{}", uuid::Uuid::new_v4().simple()),
        reconnect_max_delay: Duration::from_secs(1),
        // A publish waits for the failover (two or three seconds here, more on a slow
        // machine): a limit that only bounds a failure.
        publish_timeout: Duration::from_secs(120),
        ..Options::default()
    };
    let cancel = CancellationToken::new();
    let (broker, supervisor) = AmqpBroker::build(options);
    tokio::spawn(supervisor.run(cancel.clone()));
    // The closed address costs a refused connection, not a backoff. (Deadlines here only
    // bound failures: each step takes a second or two, more on a slow machine.)
    wait_healthy(&broker, Duration::from_secs(120)).await;
    broker.publish(message("before")).await.unwrap();
    let mut tasks = broker.consume(Queue::Tasks, 4, cancel.clone());
    let got = tokio::time::timeout(Duration::from_secs(120), tasks.next())
        .await
        .expect("a delivery from the first node")
        .unwrap();
    assert_eq!(got.body, b"before");
    got.ack().await.unwrap();

    tokio::task::block_in_place(|| first.stop());
    let stopped = Instant::now();
    // lapin retries the lost node a few times, then the supervisor moves on; publish waits
    // for the new connection (within publish_timeout).
    broker.publish(message("after")).await.unwrap();
    let failover = stopped.elapsed();
    wait_healthy(&broker, Duration::from_secs(120)).await;
    // The consumer followed the connection to the second node.
    let got = tokio::time::timeout(Duration::from_secs(120), tasks.next())
        .await
        .expect("a delivery from the second node")
        .unwrap();
    assert_eq!(got.body, b"after");
    got.ack().await.unwrap();
    println!("failover to the second node took {failover:?}");
    cancel.cancel();
}

/// A node that stops answering without an error (frozen: its connections stay open) is seen by
/// the probes: the handle reports it within the silence limit, a publish fails at once rather
/// than after `publish_timeout`, and once the node answers again the handle is healthy and
/// publishes as before; nothing published before the silence is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_node_is_reported_and_a_publish_does_not_wait_for_it() {
    let node = tokio::task::block_in_place(PrivateRabbit::start);
    let options = Options {
        url: node.url(),
        prefix: format!("silent-{}", uuid::Uuid::new_v4().simple()),
        reconnect_max_delay: Duration::from_secs(1),
        // Far longer than anything below may take: a publish that ends sooner did not wait.
        publish_timeout: Duration::from_secs(3600),
        ..Options::default()
    };
    let silence_limit = options.silence_limit;
    let cancel = CancellationToken::new();
    let (broker, supervisor) = AmqpBroker::build(options);
    tokio::spawn(supervisor.run(cancel.clone()));
    wait_healthy(&broker, Duration::from_secs(120)).await;
    broker.publish(message("before")).await.unwrap();

    node.freeze();
    let frozen = Instant::now();
    // The deadline only bounds a failure (the probes see it within seconds).
    let deadline = frozen + Duration::from_secs(600);
    let reason = loop {
        if let Err(reason) = broker.health() {
            break reason;
        }
        assert!(Instant::now() < deadline, "a frozen node is still healthy");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let seen = frozen.elapsed();
    assert!(
        reason.contains("no answer") || reason.contains("connect"),
        "{reason}"
    );
    let publishing = Instant::now();
    let refused = tokio::time::timeout(Duration::from_secs(600), broker.publish(message("lost")))
        .await
        .expect("a publish to a silent broker ends before its publish_timeout");
    assert!(
        matches!(refused, Err(broker::Error::Unavailable(_))),
        "{refused:?}"
    );
    println!(
        "silent node seen after {seen:?} (silence limit {silence_limit:?}); publish refused in {:?}",
        publishing.elapsed()
    );

    node.thaw();
    wait_healthy(&broker, Duration::from_secs(600)).await;
    broker.publish(message("after")).await.unwrap();
    // The refused publish may still arrive: its frames were on their way when the node froze,
    // and a publish that failed is one that may have happened (at least once, never lost).
    let mut tasks = broker.consume(Queue::Tasks, 4, cancel.clone());
    let mut got = Vec::new();
    while !(got.contains(&"before".to_owned()) && got.contains(&"after".to_owned())) {
        let delivery = tokio::time::timeout(Duration::from_secs(600), tasks.next())
            .await
            .expect("the messages published around the silence")
            .unwrap();
        got.push(String::from_utf8(delivery.body.clone()).unwrap());
        delivery.ack().await.unwrap();
    }
    for name in ["before", "after"] {
        assert_eq!(got.iter().filter(|g| *g == name).count(), 1, "{got:?}");
    }
    assert!(
        got.iter()
            .all(|g| ["before", "after", "lost"].contains(&g.as_str())),
        "{got:?}"
    );
    cancel.cancel();
}

/// What `GET /v1/cluster` shows of the broker: each queue's messages ready and consumers, the
/// lanes that exist, and a tenant's lane that does not yet (the broker answers 404 and closes
/// the channel) left out without failing the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queues_depths_count_ready_messages_and_consumers_and_skip_absent_lanes() {
    let prefix = format!("depths-{}", uuid::Uuid::new_v4().simple());
    let options = Options {
        url: tests::amqp_url(),
        prefix: prefix.clone(),
        ..Options::default()
    };
    let cancel = CancellationToken::new();
    let (broker, supervisor) = AmqpBroker::build(options);
    tokio::spawn(supervisor.run(cancel.clone()));
    wait_healthy(&broker, Duration::from_secs(120)).await;
    for id in ["a", "b", "c"] {
        let mut m = message(id);
        m.lane = Some("acme".into());
        broker.publish(m).await.unwrap();
    }
    broker.publish(message("plain")).await.unwrap();
    // One consumer on the executions queue, holding nothing.
    let _executions = broker.consume(Queue::Executions, 1, cancel.clone());
    let tenants = ["absent".to_owned(), "acme".to_owned()];
    let depth = |depths: &[broker::QueueDepth], name: &str| {
        depths
            .iter()
            .find(|d| d.name == name)
            .map(|d| (d.ready, d.consumers))
    };
    // The consumer registers in the background: asked until it shows (a slow machine
    // takes longer; the deadline only bounds a failure).
    let deadline = Instant::now() + Duration::from_secs(120);
    let depths = loop {
        let depths = broker.depths(&tenants).await.unwrap();
        if depth(&depths, &format!("{prefix}.executions")) == Some((0, 1)) {
            break depths;
        }
        assert!(Instant::now() < deadline, "{depths:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(depth(&depths, &format!("{prefix}.tasks")), Some((1, 0)));
    assert_eq!(
        depth(&depths, &format!("{prefix}.tasks.tenant.acme")),
        Some((3, 0))
    );
    assert_eq!(
        depth(&depths, &format!("{prefix}.tasks.dead")),
        Some((0, 0))
    );
    assert_eq!(
        depth(&depths, &format!("{prefix}.tasks.tenant.absent")),
        None
    );
    assert_eq!(
        depth(&depths, &format!("{prefix}.executions.tenant.acme")),
        None
    );
    assert_eq!(depths.len(), 4, "{depths:?}");
    // Asked again on the same connection: the closed channels cost nothing.
    assert_eq!(broker.depths(&tenants).await.unwrap().len(), 4);
    cancel.cancel();
}
