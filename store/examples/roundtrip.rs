//! Raw Redis round trip, the other baseline for the pipeline's orchestration overhead (beside
//! the broker's `roundtrip` example): one `GET` at a time through the same client the store
//! uses (a `ConnectionManager`), `N` of them, each sent `GAP_MS` after the previous answer (0:
//! back to back). With a gap, the round trip is timed as an idle cluster's tasks meet it: on a
//! machine whose cores idle between requests, waking them is part of every hop.
//!
//! `cargo run --release -p store --example roundtrip -- [N] [GAP_MS]` against the Redis of
//! `CODEGEN__STORE__URL` (default loopback). Prints p50/p99 latency.

use std::time::{Duration, Instant};

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let gap = Duration::from_millis(args.next().and_then(|a| a.parse().ok()).unwrap_or(0));
    let url =
        std::env::var("CODEGEN__STORE__URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let client = redis::Client::open(url.as_str()).expect("a valid Redis URL");
    let mut connection = redis::aio::ConnectionManager::new(client)
        .await
        .expect("Redis reachable");
    let mut latencies = Vec::with_capacity(n);
    for _ in 0..n {
        if !gap.is_zero() {
            tokio::time::sleep(gap).await;
        }
        let started = Instant::now();
        let _: Option<Vec<u8>> = redis::cmd("GET")
            .arg("codegen-bench:roundtrip:absent")
            .query_async(&mut connection)
            .await
            .expect("GET answered");
        latencies.push(started.elapsed());
    }
    latencies.sort();
    let at = |p: usize| latencies[(latencies.len() * p / 100).min(latencies.len() - 1)];
    println!(
        "raw redis round trip: {n} GETs, {} ms apart: p50 {:.3} ms, p99 {:.3} ms",
        gap.as_millis(),
        at(50).as_secs_f64() * 1e3,
        at(99).as_secs_f64() * 1e3,
    );
}
