//! A dependency that stops answering without an error (a silent partition: packets dropped, no
//! connection refused or reset) takes the processes that need it out of rotation within
//! seconds, and a coordinator that cannot reach RabbitMQ refuses new work at once, with a
//! reason a program can act on, having recorded nothing; once RabbitMQ answers again all is as
//! before. The RabbitMQ node is the test's own, frozen (SIGSTOP): its connections stay open and
//! nothing answers. The compose stack's tests drop packets for real (`stack_faults`).

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tests::{Cluster, PrivateRabbit};

/// Bounds a wait that takes seconds (minutes on a slow machine): only a failure reaches it.
const WITHIN: Duration = Duration::from_secs(600);

async fn wait_readyz(cluster: &Cluster, base: &str, ready: bool) -> Value {
    let deadline = Instant::now() + WITHIN;
    loop {
        let (status, body) = cluster.readyz(base).await;
        if (status == 200) == ready {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{base}/readyz still {status}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn executions_listed(cluster: &Cluster) -> usize {
    let (status, list) = tests::get_json(
        &cluster.http,
        &format!("{}/v1/executions?limit=100", cluster.url()),
    )
    .await;
    assert_eq!(status, 200, "{list}");
    list["executions"].as_array().unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_cut_off_from_rabbitmq_leaves_rotation_and_refuses_at_once_recording_nothing() {
    let rabbit = tokio::task::block_in_place(PrivateRabbit::start);
    // A publish would wait an hour: an answer sooner than that did not wait for one.
    let cluster = Cluster::new()
        .with_broker(rabbit.url())
        .with_env("CODEGEN__BROKER__PUBLISH_TIMEOUT", "1h");
    let coordinator = cluster.coordinator().await;
    let (worker, worker_url) = cluster.worker("worker-1").await;
    let program = json!({"language": "python", "code": "print(6 * 7)"});
    let (status, before) = cluster.execute("", program.clone()).await;
    assert_eq!(
        (status, before["stdout"].as_str()),
        (200, Some("42\n")),
        "{before}"
    );
    let listed = executions_listed(&cluster).await;

    rabbit.freeze();
    let frozen = Instant::now();
    let report = wait_readyz(&cluster, &cluster.url(), false).await;
    let coordinator_out = frozen.elapsed();
    assert!(
        report["checks"]["broker"]
            .as_str()
            .is_some_and(|b| b.contains("rabbitmq")),
        "{report}"
    );
    let report = wait_readyz(&cluster, &worker_url, false).await;
    assert!(report["checks"]["broker"].is_string(), "{report}");
    println!(
        "out of rotation after {coordinator_out:?} (coordinator), {:?} (worker)",
        frozen.elapsed()
    );

    for (path, body) in [
        ("/v1/executions", program.clone()),
        ("/v1/jobs", json!({"instruction": "add two numbers"})),
        (
            "/v1/executions/batch",
            json!({"items": [program.clone(), program.clone()]}),
        ),
    ] {
        let asked = Instant::now();
        let response = cluster
            .http
            .post(format!("{}{path}", cluster.url()))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned());
        let answer: Value = response.json().await.unwrap();
        assert_eq!(status, 503, "{path}: {answer}");
        assert_eq!(answer["code"], "broker_unavailable", "{path}: {answer}");
        assert!(
            answer["error"].as_str().unwrap().contains("broker"),
            "{answer}"
        );
        assert!(retry_after.is_some(), "{path}: no Retry-After");
        println!("{path} refused in {:?}", asked.elapsed());
    }
    // Nothing of the refused requests was recorded (Redis answers: the listing is read).
    assert_eq!(executions_listed(&cluster).await, listed);

    rabbit.thaw();
    wait_readyz(&cluster, &cluster.url(), true).await;
    wait_readyz(&cluster, &worker_url, true).await;
    let (status, after) = cluster.execute("", program).await;
    assert_eq!(
        (status, after["stdout"].as_str()),
        (200, Some("42\n")),
        "{after}"
    );
    assert_eq!(executions_listed(&cluster).await, listed + 1);
    drop((coordinator, worker));
}

/// The CLI sends a request refused for a broker it cannot reach again, with the key it made,
/// until it is accepted: `codegen exec` started while RabbitMQ is silent ends with the program's
/// output once RabbitMQ answers again, and one execution was created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_retries_through_a_silent_broker_and_creates_one_execution() {
    let rabbit = tokio::task::block_in_place(PrivateRabbit::start);
    let cluster = Cluster::new().with_broker(rabbit.url());
    let _coordinator = cluster.coordinator().await;
    let _worker = cluster.worker("worker-1").await;
    let program = cluster.dir.path().join("answer.py");
    std::fs::write(&program, "print(6 * 7)\n").unwrap();
    let listed = executions_listed(&cluster).await;

    rabbit.freeze();
    wait_readyz(&cluster, &cluster.url(), false).await;
    let url = cluster.url();
    let path = program.display().to_string();
    let cli =
        tokio::spawn(
            async move { tests::codegen_cli(&["exec", &path, "--url", &url], WITHIN).await },
        );
    // Thawed once the coordinator has refused the CLI at least once.
    // (The exposition sorts labels by name.)
    let refused = "http_server_request_duration_seconds_count{http_request_method=\"POST\",http_response_status_code=\"503\",http_route=\"/v1/executions\"}";
    let deadline = Instant::now() + WITHIN;
    while tests::metric(&cluster.http, &cluster.url(), refused).await < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the CLI never reached the coordinator"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    rabbit.thaw();
    let run = cli.await.unwrap();
    assert_eq!(run.code, Some(0), "{run}");
    assert_eq!(run.stdout, "42\n", "{run}");
    assert!(run.stderr.contains("trying again"), "{run}");
    assert_eq!(executions_listed(&cluster).await, listed + 1);
}
