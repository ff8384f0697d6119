//! The model as the cluster sees it, on real processes: four workers holding one cluster-wide
//! limit against a FAKE server that answers 429 above its own, a cluster without a model that
//! says so, and a job whose model stays unreachable failing with the model's error.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use model::scripted::{Script, Scripted};
use serde_json::json;
use tests::{Cluster, free_port};

/// Chat calls in flight now, the most seen at once, and how many were turned away with 429.
#[derive(Default)]
struct Counter {
    now: AtomicUsize,
    peak: AtomicUsize,
    served: AtomicUsize,
    throttled: AtomicUsize,
    /// Above this many calls at once the server answers 429.
    capacity: usize,
}

async fn count(State(counter): State<Arc<Counter>>, request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let now = counter.now.fetch_add(1, Ordering::SeqCst) + 1;
    counter.peak.fetch_max(now, Ordering::SeqCst);
    if now > counter.capacity {
        counter.now.fetch_sub(1, Ordering::SeqCst);
        counter.throttled.fetch_add(1, Ordering::SeqCst);
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after-ms", "100")],
            axum::Json(json!({"error": {"message": "Rate limit reached", "type": "requests"}})),
        )
            .into_response();
    }
    let response = next.run(request).await;
    counter.now.fetch_sub(1, Ordering::SeqCst);
    counter.served.fetch_add(1, Ordering::SeqCst);
    response
}

/// `jobs` jobs of `width` distinct functions (nothing is cached), every answer after
/// `latency_ms`, as `bench/tasks.py` writes them.
fn script(jobs: usize, width: usize, latency_ms: u64) -> (Script, Vec<String>) {
    let mut answers = vec![];
    let mut instructions = vec![];
    for j in 0..jobs {
        let tag = format!("limits job {j}:");
        let names: Vec<String> = (0..width).map(|k| format!("l{j}_f{k}")).collect();
        answers.push(
            json!({"phase": "plan", "prompt_contains": tag, "latency_ms": latency_ms,
            "answer": {"functions": names.iter().enumerate().map(|(k, n)| json!({
                "name": n, "purpose": format!("return x plus {}", k + 1),
                "inputs": [{"name": "x", "type": "int"}],
                "outputs": {"type": "int", "description": "the sum"},
                "dependencies": [], "complexity": "simple"})).collect::<Vec<_>>()}}),
        );
        for (k, name) in names.iter().enumerate() {
            answers.push(
                json!({"phase": "tests", "function": name, "latency_ms": latency_ms,
                "answer": {"cases": [
                    {"name": "zero", "kind": "edge", "inputs": {"x": 0}, "expected_output": k + 1,
                     "expected_error": null},
                    {"name": "ten", "kind": "normal", "inputs": {"x": 10},
                     "expected_output": 11 + k, "expected_error": null}]}}),
            );
            answers.push(json!({"phase": "implement", "function": name, "latency_ms": latency_ms,
                "answer": {"code": format!(
                    "def {name}(x: int) -> int:\n    \"\"\"Return x plus {}.\"\"\"\n    return x + {}\n",
                    k + 1, k + 1), "analysis": null}}));
        }
        instructions.push(format!("{tag} {width} functions that add constants"));
    }
    (
        serde_json::from_value(json!({ "answers": answers })).unwrap(),
        instructions,
    )
}

/// Serves `script` as an OpenAI-compatible FAKE model on loopback behind the counter.
async fn counting_server(script: Script, counter: Arc<Counter>) -> u16 {
    let port = free_port();
    let app = model::server::router(Arc::new(Scripted::new(script).unwrap()))
        .layer(axum::middleware::from_fn_with_state(counter, count));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

/// Runs 8 jobs of 4 functions on four workers configured for 4 model calls at once in all
/// (each could hold 8 tasks in flight: 32 together) against a server that answers 429 above
/// `capacity` calls at once; every job must succeed. Each answer takes 500 ms, long enough
/// for the calls to meet at the server on a slow machine too. Returns the most calls the
/// server saw at once and how many it turned away.
async fn four_workers_against(capacity: usize) -> (usize, usize) {
    let counter = Arc::new(Counter {
        capacity,
        ..Counter::default()
    });
    let (script, instructions) = script(8, 4, 500);
    let port = counting_server(script, counter.clone()).await;
    let cluster = Cluster::new()
        .with_env("CODEGEN__MODEL__PROVIDER", "openai")
        .with_env(
            "CODEGEN__MODEL__BASE_URL",
            &format!("http://127.0.0.1:{port}/v1"),
        )
        .with_env("CODEGEN__MODEL__API_KEY", "not-a-real-key")
        .with_env("CODEGEN__MODEL__MAX_CONCURRENCY", "4")
        .with_env("CODEGEN__MODEL__MAX_ATTEMPTS", "1")
        .with_env("CODEGEN__WORKER__CONCURRENCY", "8")
        .with_env("CODEGEN__SANDBOX__POOL_SIZE", "1");
    let _coordinator = cluster.coordinator().await;
    let mut workers = vec![];
    for i in 0..4 {
        workers.push(cluster.worker(&format!("worker-{i}")).await);
    }
    let mut ids = vec![];
    for instruction in &instructions {
        let (status, body) = cluster
            .submit_job(json!({"instruction": instruction, "language": "python"}))
            .await;
        assert_eq!(status, 202, "{body}");
        ids.push(body["job_id"].as_str().unwrap().to_owned());
    }
    for id in &ids {
        let result = cluster.wait_job(id, Duration::from_secs(600)).await;
        assert_eq!(result["status"], "succeeded", "{result:#}");
    }
    // 8 jobs × (1 plan + 4 × (tests + implement)) answers, each exactly once.
    assert_eq!(counter.served.load(Ordering::SeqCst), 8 * 9);
    cluster.cleanup().await;
    (
        counter.peak.load(Ordering::SeqCst),
        counter.throttled.load(Ordering::SeqCst),
    )
}

#[tokio::test]
async fn four_workers_together_never_exceed_the_cluster_model_limit() {
    // The server takes exactly the cluster's limit: one call more at any moment (a worker
    // holding its limit alone) would be seen, and turned away.
    let (peak, throttled) = four_workers_against(4).await;
    assert!(
        peak <= 4,
        "{peak} calls at once reached the server; the cluster limit is 4"
    );
    assert_eq!(
        throttled, 0,
        "calls above the cluster limit reached the server"
    );
    assert!(peak >= 3, "the test never loaded the limit (peak {peak})");
}

#[tokio::test]
async fn a_server_answering_429_slows_the_cluster_and_fails_no_task() {
    // The server takes fewer than the cluster allows: its 429s shrink the shared limit, and
    // every job still succeeds (`max_attempts` is 1: a 429 counted as a failed attempt would
    // fail its task).
    let (peak, throttled) = four_workers_against(2).await;
    assert!(
        throttled > 0,
        "the server never answered 429: the test proves nothing"
    );
    assert!(
        peak <= 4,
        "{peak} calls at once reached the server; the cluster limit is 4"
    );
}

#[tokio::test]
async fn a_cluster_without_a_model_says_so_and_refuses_jobs_but_runs_executions() {
    // No base URL and no key anywhere: the worker would call the public endpoint without a key.
    let cluster = Cluster::new()
        .with_env("CODEGEN__MODEL__PROVIDER", "openai")
        .with_env("CODEGEN__MODEL__BASE_URL", "")
        .with_env("CODEGEN__MODEL__API_KEY", "")
        .with_env("OPENAI_BASE_URL", "")
        .with_env("OPENAI_API_KEY", "")
        .with_env("CODEGEN__SANDBOX__POOL_SIZE", "1");
    let _coordinator = cluster.coordinator().await;
    let (_worker, worker_url) = cluster.worker("worker-1").await;

    let (status, ready) = cluster.readyz(&worker_url).await;
    assert_eq!(
        status, 200,
        "a worker without a model still runs executions: {ready}"
    );
    assert_eq!(ready["checks"]["model"], "not configured", "{ready}");

    // The coordinator learns it from the worker's announcement (within a second or two; the
    // deadline only bounds a failure).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let (status, body) = loop {
        let (status, body) = cluster
            .submit_job(json!({"instruction": "add two numbers", "language": "python"}))
            .await;
        if status != 202 || tokio::time::Instant::now() > deadline {
            break (status, body);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["code"], "no_generator", "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("no worker can generate") && error.contains("model not configured"),
        "{error}"
    );
    let (status, ready) = cluster.readyz(&cluster.url()).await;
    assert_eq!(status, 200, "{ready}");
    assert!(
        ready["checks"]["generation"]
            .as_str()
            .unwrap()
            .contains("no worker can generate"),
        "{ready}"
    );
    // A batch is refused whole: nothing created.
    let response = cluster
        .http
        .post(format!("{}/v1/batches", cluster.url()))
        .body("{\"instruction\": \"add two numbers\"}\n")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 503);
    // Executions do not need a model.
    let (status, verdict) = cluster
        .execute("", json!({"language": "python", "code": "print(6 * 7)"}))
        .await;
    assert_eq!(status, 200, "{verdict}");
    assert_eq!(verdict["status"], "passed", "{verdict}");
    assert_eq!(verdict["stdout"], "42\n", "{verdict}");
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_job_whose_model_stays_unreachable_fails_with_the_models_last_error() {
    // Nothing listens on this port.
    let port = free_port();
    let cluster = Cluster::new()
        .with_env("CODEGEN__MODEL__PROVIDER", "openai")
        .with_env(
            "CODEGEN__MODEL__BASE_URL",
            &format!("http://127.0.0.1:{port}/v1"),
        )
        .with_env("CODEGEN__MODEL__API_KEY", "not-a-real-key")
        .with_env("CODEGEN__MODEL__MAX_ATTEMPTS", "2")
        .with_env("CODEGEN__MODEL__MIN_BACKOFF", "10ms")
        .with_env("CODEGEN__MODEL__MAX_BACKOFF", "20ms")
        .with_env("CODEGEN__WORKER__OUTAGE_WAIT", "1s")
        .with_env("CODEGEN__WORKER__PROBE_INTERVAL", "200ms")
        .with_env("CODEGEN__WORKER__PIPELINE__MODEL_WAIT", "3s")
        .with_env("CODEGEN__SANDBOX__POOL_SIZE", "1");
    let _coordinator = cluster.coordinator().await;
    let (_worker, _) = cluster.worker("worker-1").await;
    let (status, body) = cluster
        .submit_job(json!({"instruction": "add two numbers", "language": "python"}))
        .await;
    assert_eq!(status, 202, "{body}");
    let id = body["job_id"].as_str().unwrap();
    let result = cluster.wait_job(id, Duration::from_secs(600)).await;
    assert_eq!(result["status"], "failed", "{result:#}");
    let failure = result["failure"].as_str().unwrap();
    assert!(
        failure.contains(&format!("model at openai http://127.0.0.1:{port}/v1"))
            && failure.contains("cannot connect")
            && failure.contains("model_wait"),
        "{failure}"
    );
    assert!(!failure.contains("dead-lettered"), "{failure}");
    cluster.cleanup().await;
}
