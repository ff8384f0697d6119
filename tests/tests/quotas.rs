//! Per-tenant request rates hold for the whole cluster (two real coordinators sharing Redis):
//! past the rate, 429 naming the limit with `Retry-After`, and nothing is done; another tenant
//! is not affected.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::time::Instant;

use serde_json::{Value, json};
use tests::Cluster;

const RATE: usize = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_request_rate_holds_across_two_coordinators() {
    let cluster = Cluster::new()
        .with_env("CODEGEN__COORDINATOR__API_KEYS__ACME", "key-acme")
        .with_env("CODEGEN__COORDINATOR__API_KEYS__GLOBEX", "key-globex")
        .with_env(
            "CODEGEN__COORDINATOR__TENANTS__ACME__REQUESTS_PER_SECOND",
            &RATE.to_string(),
        )
        .with_env(
            "CODEGEN__COORDINATOR__TENANT_DEFAULTS__REQUESTS_PER_SECOND",
            "1000",
        );
    let _first = cluster.coordinator().await;
    let (_second, second) = cluster.another_coordinator("coordinator-2").await;
    let bases = [cluster.url(), second];
    let unknown = "/v1/jobs/01a20fab-2097-7099-a90f-950cccee2065";

    // 40 requests as fast as they go, alternating between the coordinators.
    let started = Instant::now();
    let mut admitted = 0;
    let mut refused = None;
    for i in 0..40 {
        let response = cluster
            .http
            .get(format!("{}{unknown}", bases[i % 2]))
            .bearer_auth("key-acme")
            .send()
            .await
            .unwrap();
        match response.status().as_u16() {
            404 => admitted += 1,
            429 => {
                let retry = response.headers()["retry-after"]
                    .to_str()
                    .unwrap()
                    .to_owned();
                let body: Value = response.json().await.unwrap();
                refused.get_or_insert((retry, body));
            }
            other => panic!("unexpected {other}"),
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    // A second's burst plus the rate over the time taken, for the whole cluster: with a limit
    // per coordinator, twice that would pass.
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let most = RATE + (RATE as f64 * elapsed).ceil() as usize;
    assert!(
        (RATE..=most).contains(&admitted),
        "{admitted} of 40 admitted in {elapsed:.2}s at {RATE}/s (at most {most})"
    );
    let (retry, body) = refused.expect("some requests were refused");
    assert!(retry.parse::<u64>().unwrap() >= 1, "{retry}");
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("coordinator.tenants.acme.requests_per_second")
            && error.contains("5 requests per second"),
        "{error}"
    );

    // Another tenant has its own meter.
    let response = cluster
        .http
        .get(format!("{}{unknown}", bases[0]))
        .bearer_auth("key-globex")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 404);

    // Refused work is not done: drain acme's burst, then a refused execution leaves nothing.
    let mut refused_post = None;
    for _ in 0..2 * RATE {
        let response = cluster
            .http
            .post(format!("{}/v1/executions?wait=false", bases[1]))
            .bearer_auth("key-acme")
            .json(&json!({"language": "python", "code": "print(1)"}))
            .send()
            .await
            .unwrap();
        if response.status().as_u16() == 429 {
            refused_post = Some(response.json::<Value>().await.unwrap());
            break;
        }
    }
    let body = refused_post.expect("a burst of posts was refused");
    assert!(
        body.get("id").is_none() && body["error"].is_string(),
        "{body}"
    );
    cluster.cleanup().await;
}
