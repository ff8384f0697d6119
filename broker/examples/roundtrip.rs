//! Raw broker round trip, the baseline for the pipeline's orchestration overhead: publish with
//! a confirm to the task queue, consume, ack; `N` messages, `IN_FLIGHT` at a time, each
//! published `GAP_MS` after the previous one (0: back to back). With a gap, the hop is timed
//! as an idle cluster's tasks see it: the broker's log then waits for a disk that has gone idle.
//!
//! `cargo run --release -p broker --example roundtrip -- [N] [IN_FLIGHT] [GAP_MS]` against the broker of
//! `CODEGEN__BROKER__URL` (default loopback). Prints p50/p99 latency and messages per second.

use std::sync::Arc;
use std::time::{Duration, Instant};

use broker::{AmqpBroker, Broker, Options, Outgoing, Queue};
use futures::StreamExt;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let in_flight: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(8);
    let gap = Duration::from_millis(args.next().and_then(|a| a.parse().ok()).unwrap_or(0));
    let options = Options {
        url: std::env::var("CODEGEN__BROKER__URL")
            .unwrap_or_else(|_| "amqp://127.0.0.1:5672/%2f".into()),
        prefix: format!("bench{}", std::process::id()),
        ..Options::default()
    };
    let (broker, supervisor) = AmqpBroker::build(options);
    let cancel = CancellationToken::new();
    tokio::spawn(supervisor.run(cancel.clone()));
    let started_at: Arc<dashmap_free::Map> = Arc::new(dashmap_free::Map::default());

    let mut deliveries = broker.consume(Queue::Tasks, 64, cancel.clone());
    // Warm up: one message through, so the queue and the consumer exist.
    broker
        .publish(Outgoing {
            message_id: "warmup".into(),
            body: vec![0],
            lane: None,
            headers: Default::default(),
        })
        .await
        .expect("broker reachable");
    deliveries
        .next()
        .await
        .expect("warm-up delivery")
        .ack()
        .await
        .ok();

    let consumer = {
        let started_at = started_at.clone();
        tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(n);
            while latencies.len() < n {
                let delivery = deliveries.next().await.expect("delivery");
                let id = delivery.message_id.clone().unwrap_or_default();
                delivery.ack().await.expect("ack");
                if let Some(t) = started_at.take(&id) {
                    latencies.push(t.elapsed());
                }
            }
            latencies
        })
    };
    let permits = Arc::new(Semaphore::new(in_flight));
    let begin = Instant::now();
    let mut publishers = Vec::new();
    for i in 0..n {
        if !gap.is_zero() && i > 0 {
            tokio::time::sleep(gap).await;
        }
        let permit = permits.clone().acquire_owned().await.expect("semaphore");
        let broker = broker.clone();
        let started_at = started_at.clone();
        publishers.push(tokio::spawn(async move {
            let id = format!("m{i}");
            started_at.put(id.clone(), Instant::now());
            broker
                .publish(Outgoing {
                    message_id: id,
                    body: vec![0; 64],
                    lane: None,
                    headers: Default::default(),
                })
                .await
                .expect("publish");
            drop(permit);
        }));
    }
    for p in publishers {
        p.await.expect("publisher");
    }
    let mut latencies = consumer.await.expect("consumer");
    let wall = begin.elapsed();
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    println!(
        "raw broker round trip: {n} messages, {in_flight} in flight, {} ms apart: p50 {:.2} ms, p99 {:.2} ms, {:.0} msg/s",
        gap.as_millis(),
        ms(pct(0.5)),
        ms(pct(0.99)),
        n as f64 / wall.as_secs_f64()
    );
    cancel.cancel();
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A tiny mutex map, enough for a benchmark.
mod dashmap_free {
    use std::collections::HashMap;
    use std::sync::Mutex;
    use std::time::Instant;

    #[derive(Default)]
    pub struct Map(Mutex<HashMap<String, Instant>>);

    impl Map {
        pub fn put(&self, k: String, v: Instant) {
            self.0.lock().expect("poisoned").insert(k, v);
        }
        pub fn take(&self, k: &str) -> Option<Instant> {
            self.0.lock().expect("poisoned").remove(k)
        }
    }
}
