//! The walking skeleton, end to end: HTTP → RabbitMQ → worker → hardened container → Redis,
//! against the real services (see the crate docs for what must be running).

use std::time::Duration;

use serde_json::json;
use tests::{Cluster, LONG_WAIT, PrivateRedis, metric};

/// Waits until the worker at `ops` holds a task (it took it from the queue and has not
/// settled it), up to minutes: a deadline that only bounds a failure.
async fn wait_holding_a_task(cluster: &Cluster, ops: &str, worker: &tests::Process) {
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    while metric(&cluster.http, ops, "codegen_worker_tasks_in_flight").await < 1.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the worker never took the task: {}",
            worker.log_text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn round_trip_passes_fails_and_reports_limits() {
    let cluster = Cluster::new();
    let _coordinator = cluster.coordinator().await;
    let (_worker, worker_url) = cluster.worker("worker").await;

    let (status, body) = cluster
        .execute(
            "",
            json!({"language": "python", "code": "import sys\nprint(sys.stdin.read().upper())", "stdin": "shout"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "passed");
    assert_eq!(body["exit_code"], 0);
    assert_eq!(body["stdout"], "SHOUT\n");
    assert!(body["duration_ms"].is_u64());

    let (_, body) = cluster
        .execute(
            "",
            json!({"language": "python", "code": "import sys\nprint('bad', file=sys.stderr)\nsys.exit(3)"}),
        )
        .await;
    assert_eq!(body["status"], "failed", "{body}");
    assert_eq!(body["exit_code"], 3);
    assert_eq!(body["stderr"], "bad\n");

    let (_, body) = cluster
        .execute(
            "",
            json!({"language": "python", "code": "while True: pass", "timeout_ms": 500}),
        )
        .await;
    assert_eq!(body["status"], "timeout", "{body}");

    // One big allocation, far over the limit: the container's memory cgroup stops it.
    let (_, body) = cluster
        .execute(
            "",
            json!({"language": "python", "code": "x = bytearray(512 * 1024 * 1024)\nprint('allocated')", "memory_mb": 64}),
        )
        .await;
    assert_eq!(body["status"], "memory_limit", "{body}");
    assert_ne!(body["stdout"], "allocated\n");

    // No network inside the sandbox.
    let (_, body) = cluster
        .execute(
            "",
            json!({"language": "python", "code": "import socket\nsocket.create_connection(('127.0.0.1', 80), timeout=2)"}),
        )
        .await;
    assert_eq!(body["status"], "failed", "{body}");
    assert!(body["stderr"].as_str().unwrap().contains("Error"), "{body}");

    // The worker counted what it ran.
    let passed = metric(
        &cluster.http,
        &worker_url,
        "codegen_sandbox_runs_total{language=\"python\",status=\"passed\",work=\"execution\"}",
    )
    .await;
    assert_eq!(passed, 1.0);
    let timeouts = metric(
        &cluster.http,
        &worker_url,
        "codegen_sandbox_runs_total{language=\"python\",status=\"timeout\",work=\"execution\"}",
    )
    .await;
    assert_eq!(timeouts, 1.0);
    // The pool reports itself too: every run above went through it.
    let pooled = metric(
        &cluster.http,
        &worker_url,
        "codegen_sandbox_pooled_runs_total{language=\"python\"}",
    )
    .await;
    assert!(pooled >= 5.0, "pooled runs: {pooled}");
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_task_published_while_no_worker_runs_waits_for_one() {
    let cluster = Cluster::new();
    let _coordinator = cluster.coordinator().await;
    let (status, body) = cluster
        .execute(
            "?wait=false",
            json!({"language": "python", "code": "print('finally')"}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["status"], "queued");
    let id = body["id"].as_str().unwrap().to_owned();

    tokio::time::sleep(Duration::from_secs(1)).await;
    let (_, body) = cluster.execution(&id).await;
    assert_eq!(body["status"], "queued", "no worker yet: {body}");

    let (_worker, _) = cluster.worker("late-worker").await;
    let body = cluster.wait_verdict(&id, Duration::from_secs(300)).await;
    assert_eq!(body["status"], "passed", "{body}");
    assert_eq!(body["stdout"], "finally\n");
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_malformed_message_is_dead_lettered_and_the_worker_keeps_serving() {
    // Published to the tasks queue, which only a worker that can generate consumes: the
    // scripted model makes it one, whatever model the environment names (or none).
    let script = tests::root().join("examples/scripted-model.json");
    let cluster = Cluster::new()
        .with_env("CODEGEN__MODEL__PROVIDER", "scripted")
        .with_env("CODEGEN__MODEL__SCRIPT_FILE", script.to_str().unwrap());
    let _coordinator = cluster.coordinator().await;
    let (mut worker, worker_url) = cluster.worker("worker").await;

    let id = proto::TaskId::new().to_string();
    cluster
        .publish_raw(&id, b"\xc1 this is not a messagepack envelope")
        .await;
    // The worker rejects it, RabbitMQ dead-letters it, the coordinator records why.
    let body = cluster.wait_verdict(&id, Duration::from_secs(300)).await;
    assert_eq!(body["status"], "error", "{body}");
    assert!(
        body["reason"].as_str().unwrap().contains("rejected"),
        "{body}"
    );
    let malformed = metric(
        &cluster.http,
        &worker_url,
        "codegen_worker_tasks_total{kind=\"unknown\",outcome=\"malformed\"}",
    )
    .await;
    assert_eq!(malformed, 1.0);
    let dead = metric(
        &cluster.http,
        &cluster.url(),
        "codegen_dead_letters_total{reason=\"rejected\"}",
    )
    .await;
    assert_eq!(dead, 1.0);

    assert!(worker.is_running(), "worker died: {}", worker.log_text());
    let (status, body) = cluster
        .execute("", json!({"language": "python", "code": "print(2 + 2)"}))
        .await;
    assert_eq!(
        (status, body["stdout"].as_str()),
        (200, Some("4\n")),
        "{body}"
    );
    cluster.cleanup().await;
}

#[tokio::test]
async fn readyz_names_redis_while_it_is_down_and_recovers() {
    let mut redis = PrivateRedis::start();
    let cluster = Cluster::new().with_redis(redis.url());
    let _coordinator = cluster.coordinator().await;
    let (_worker, worker_url) = cluster.worker("worker").await;

    redis.stop();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let body = loop {
        let (status, body) = cluster.readyz(&cluster.url()).await;
        if status == 503 {
            break body;
        }
        assert!(std::time::Instant::now() < deadline, "still ready: {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(body["ready"], false);
    assert_eq!(body["checks"]["broker"], "ok");
    let reason = body["checks"]["redis"].as_str().unwrap();
    assert!(reason.starts_with("redis at"), "{body}");
    let (status, worker_body) = cluster.readyz(&worker_url).await;
    assert_eq!(status, 503, "{worker_body}");
    assert_ne!(worker_body["checks"]["redis"], "ok");

    // Requests fail fast with the reason instead of hanging.
    let (status, body) = cluster
        .execute("", json!({"language": "python", "code": "print(1)"}))
        .await;
    assert_eq!(status, 503, "{body}");
    assert!(body["error"].as_str().unwrap().contains("redis"), "{body}");
    assert_eq!(body["code"], "store_unavailable", "{body}");

    redis.restart();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let (status, body) = cluster.readyz(&cluster.url()).await;
        if status == 200 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not back: {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, body) = cluster
        .execute("", json!({"language": "python", "code": "print('back')"}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["stdout"], "back\n");
    cluster.cleanup().await;
}

#[tokio::test]
async fn sigterm_lets_the_running_task_finish() {
    let cluster = Cluster::new();
    let _coordinator = cluster.coordinator().await;
    let (mut worker, ops) = cluster.worker("worker").await;
    let (_, body) = cluster
        .execute(
            "?wait=false",
            json!({"language": "python", "code": "import time\ntime.sleep(2)\nprint('done')"}),
        )
        .await;
    let id = body["id"].as_str().unwrap().to_owned();
    // Wait until the worker has the task, then ask it to stop.
    wait_holding_a_task(&cluster, &ops, &worker).await;
    worker.signal("TERM");
    // The program's 2 s, then the worker's shutdown (its warm containers removed): seconds
    // here, minutes on a slow machine.
    let code = worker.wait_exit(Duration::from_secs(180));
    assert_eq!(code, Some(0), "log:\n{}", worker.log_text());
    assert!(
        worker.log_text().contains("draining in-flight tasks"),
        "the stop came while the task ran: {}",
        worker.log_text()
    );
    let (_, body) = cluster.execution(&id).await;
    assert_eq!(body["status"], "passed", "drained, not dropped: {body}");
    assert_eq!(body["stdout"], "done\n");
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_killed_worker_loses_no_task() {
    let cluster = Cluster::new();
    let _coordinator = cluster.coordinator().await;
    let (mut first, first_ops) = cluster.worker("first").await;
    let (_, body) = cluster
        .execute(
            "?wait=false",
            json!({"language": "python", "code": "import time\ntime.sleep(3)\nprint('survived')"}),
        )
        .await;
    let id = body["id"].as_str().unwrap().to_owned();
    wait_holding_a_task(&cluster, &first_ops, &first).await;
    first.signal("KILL");
    first.wait_exit(Duration::from_secs(60));
    let (_second, second_ops) = cluster.worker("second").await;
    let body = cluster.wait_verdict(&id, Duration::from_secs(300)).await;
    assert_eq!(body["status"], "passed", "{body}");
    assert_eq!(body["stdout"], "survived\n");
    // The second worker ran it again: the first was killed holding it.
    let redelivered = metric(
        &cluster.http,
        &second_ops,
        "codegen_worker_redeliveries_total{kind=\"execute\"}",
    )
    .await;
    assert_eq!(redelivered, 1.0, "the task was redelivered once");
    cluster.cleanup().await;
}

/// Calls of `command` Redis has served so far (`INFO commandstats`).
fn redis_calls(redis: &PrivateRedis, command: &str) -> u64 {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &redis.port.to_string(), "INFO", "commandstats"])
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// A batch answer waits for its verdicts' notices instead of polling Redis: three programs
/// that each take two seconds cost a handful of reads of their results, not one every few
/// milliseconds (the poll without notices backs off to 50 ms: about 40 reads a second).
#[tokio::test]
async fn a_batch_waits_for_notices_not_by_polling() {
    let redis = PrivateRedis::start();
    // The answer must be the verdicts, however slow the machine.
    let cluster = Cluster::new()
        .with_redis(redis.url())
        .with_coordinator_wait(LONG_WAIT);
    let _coordinator = cluster.coordinator().await;
    let (_worker, _) = cluster.worker("worker").await;
    let items: Vec<serde_json::Value> = (0..3)
        .map(|i| json!({"id": i.to_string(), "language": "python", "code": "import time\ntime.sleep(2)\nprint('ok')"}))
        .collect();
    let before = redis_calls(&redis, "mget");
    let started = std::time::Instant::now();
    let response = cluster
        .http
        .post(format!("{}/v1/executions/batch", cluster.url()))
        .json(&json!({ "items": items }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!(body["done"], 3, "{body}");
    let reads = redis_calls(&redis, "mget") - before;
    assert!(elapsed >= Duration::from_secs(2), "{elapsed:?}");
    // One read up front, one per notice (three, or fewer when they land together), one per
    // 500 ms safety poll.
    let bound = 4 + 2 * elapsed.as_secs() + 2;
    assert!(
        reads <= bound,
        "{reads} reads of the results in {elapsed:?} (at most {bound})"
    );
    cluster.cleanup().await;
}
