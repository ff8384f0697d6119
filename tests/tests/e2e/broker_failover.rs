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
