//! The cluster against a real model server: llama.cpp's OpenAI-compatible server
//! (llama-cpp-python) with SmolLM2-135M-Instruct, as `scripts/cluster model-server --real`
//! starts it; its base URL in `CODEGEN_TEST_REAL_MODEL`. Part of the documented longer run
//! (`scripts/test --real-model`), not of the default one: the default keeps the scripted FAKE
//! model, fast and deterministic, and this one needs the server built (minutes).
//!
//! A model that small writes weak code and half-valid JSON; what is asserted is the cluster's
//! side: every job ends (succeeded, or failed with a reason that says what happened), the
//! server's refusal of `json_schema` is met by the fallback (no call fails as an error answer),
//! and nothing is dead-lettered.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::time::{Duration, Instant};

use serde_json::Value;
use tests::Cluster;

/// A 135M model on two cores answers a call in about a second; a batch of four jobs is tens
/// of calls. Only a failure waits this out.
const BATCH_DEADLINE: Duration = Duration::from_secs(3600);

const REQUESTS: &str = r#"{"instruction": "Write a function add(a, b) that returns the sum of two integers.", "max_iterations": 2}
{"instruction": "Write a function reverse_string(s) that returns the string s reversed.", "max_iterations": 2}
{"instruction": "Write a function is_even(n) that returns True when the integer n is even.", "max_iterations": 2}
{"instruction": "Write a function largest(xs) that returns the largest number of a non-empty list.", "max_iterations": 2}
"#;

fn real_model() -> String {
    std::env::var("CODEGEN_TEST_REAL_MODEL").unwrap_or_else(|_| {
        panic!(
            "CODEGEN_TEST_REAL_MODEL is not set: run `scripts/test --real-model`, or start \
             `scripts/cluster model-server --real` and set it to the base URL it prints"
        )
    })
}

async fn text(cluster: &Cluster, url: &str) -> String {
    let response = cluster.http.get(url).send().await.unwrap();
    response.text().await.unwrap()
}

/// A labelled sample's value from a Prometheus text page, summed over the lines that match.
fn metric_sum(page: &str, name: &str, label: &str) -> f64 {
    page.lines()
        .filter(|l| l.starts_with(name) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
#[ignore = "needs the real model server: scripts/test --real-model"]
async fn a_batch_against_a_real_model_ends_every_job_with_a_reason_and_nothing_dead_lettered() {
    let base = real_model();
    let cluster = Cluster::new()
        .with_env("CODEGEN__MODEL__PROVIDER", "openai")
        .with_env("CODEGEN__MODEL__BASE_URL", &base)
        .with_env("CODEGEN__MODEL__API_KEY", "not-needed")
        .with_env("CODEGEN__MODEL__MODEL", "SmolLM2-135M-Instruct")
        .with_env("CODEGEN__MODEL__CONTEXT_WINDOW", "8192")
        .with_env("CODEGEN__MODEL__MAX_TOKENS", "1024")
        .with_env("CODEGEN__MODEL__MAX_CONCURRENCY", "1")
        .with_env("CODEGEN__MODEL__TIMEOUT", "10m");
    let coordinator = cluster.coordinator().await;
    let (_worker, worker_url) = cluster.worker("worker-1").await;
    let response = cluster
        .http
        .post(format!("{}/v1/batches", cluster.url()))
        .header("content-type", "application/x-ndjson")
        .body(REQUESTS)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let accepted: Value = response.json().await.unwrap();
    let batch = format!(
        "{}/v1/batches/{}",
        cluster.url(),
        accepted["batch_id"].as_str().unwrap()
    );

    let started = Instant::now();
    loop {
        let (status, view) = tests::get_json(&cluster.http, &batch).await;
        assert_eq!(status, 200, "{view}");
        if view["status"] == "done" {
            break;
        }
        assert!(started.elapsed() < BATCH_DEADLINE, "{view}");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }

    let mut succeeded = 0;
    for id in accepted["jobs"].as_array().unwrap() {
        let id = id.as_str().unwrap();
        let (status, job) =
            tests::get_json(&cluster.http, &format!("{}/v1/jobs/{id}", cluster.url())).await;
        assert_eq!(status, 200, "{job}");
        match job["status"].as_str().unwrap() {
            "succeeded" => {
                succeeded += 1;
                assert_eq!(job["all_tests_passed"], true, "{job:#}");
            }
            "failed" => {
                let reason = job["failure"].as_str().unwrap_or_default();
                assert!(!reason.is_empty(), "a failure without a reason: {job:#}");
                assert!(!reason.contains("dead-lettered"), "{reason}");
                assert!(!reason.contains("unreachable"), "{reason}");
            }
            other => panic!("job {id} ended {other}: {job:#}"),
        }
        println!(
            "{id}: {} {}",
            job["status"],
            job["failure"].as_str().unwrap_or_default()
        );
    }
    println!("{succeeded} of 4 jobs succeeded");

    // Every call was answered: parsed, or counted invalid and asked again (the evidence a
    // repair or a failure quotes); none failed as an error answer or an outage.
    let page = text(&cluster, &format!("{worker_url}/metrics")).await;
    let calls = |outcome: &str| {
        metric_sum(
            &page,
            "codegen_model_calls_total",
            &format!("outcome=\"{outcome}\""),
        )
    };
    assert!(calls("ok") > 0.0, "{page}");
    for outcome in ["server_error", "rejected", "retryable"] {
        assert_eq!(calls(outcome), 0.0, "{outcome}: {page}");
    }
    let page = text(&cluster, &format!("{}/metrics", cluster.url())).await;
    assert_eq!(
        metric_sum(&page, "codegen_dead_letters_total", ""),
        0.0,
        "{page}"
    );
    drop(coordinator);
    cluster.cleanup().await;
}
