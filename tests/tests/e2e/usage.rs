//! Usage accounting on the real cluster (RabbitMQ, Redis, Docker, the codegen processes, a
//! scripted FAKE model server): what `GET /v1/usage` answers a tenant is the sum of the
//! figures its jobs' and executions' own results report, cancelled work included; other
//! tenants' work is not in it; only admins read another tenant's; Prometheus carries the same
//! totals under a `tenant` label.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use reqwest::Method;
use serde_json::{Value, json};
use tests::Cluster;
use tests::faults::{ModelServer, distinct_job, distinct_jobs_script};

async fn call(
    cluster: &Cluster,
    method: Method,
    path: &str,
    key: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let url = format!("{}{path}", cluster.url());
    let (status, _, answer) = cluster.request_as(method, &url, key, body).await;
    (status, answer)
}

/// Polls job `job` as the tenant of `key` until it has ended. Jobs of seconds, ten times
/// slower on a slow machine: only a failure waits the deadline out.
async fn wait_final(cluster: &Cluster, job: &str, key: &str) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(600);
    loop {
        let (status, body) =
            call(cluster, Method::GET, &format!("/v1/jobs/{job}"), key, None).await;
        assert_eq!(status, 200, "{body}");
        if ["succeeded", "failed", "cancelled"].contains(&body["status"].as_str().unwrap_or("")) {
            return body;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "job {job} never finished: {body}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// `codegen_usage_total{tenant=…,resource=…}` summed over the processes at `urls`.
async fn counted(cluster: &Cluster, urls: &[&str], tenant: &str, resource: &str) -> f64 {
    let mut sum = 0.0;
    for url in urls {
        sum += tests::metric(
            &cluster.http,
            url,
            &format!("codegen_usage_total{{resource=\"{resource}\",tenant=\"{tenant}\"}}"),
        )
        .await;
    }
    sum
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_adds_up_to_the_results_of_each_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let model = ModelServer::start(&distinct_jobs_script(dir.path(), 4, 400), dir.path());
    let cluster = Cluster::new()
        .use_model(&model)
        .with_env("CODEGEN__COORDINATOR__API_KEYS__ACME", "key-acme")
        .with_env("CODEGEN__COORDINATOR__API_KEYS__GLOBEX", "key-globex")
        .with_env("CODEGEN__COORDINATOR__API_KEYS__OPS", "key-ops")
        .with_env("CODEGEN__COORDINATOR__ADMIN_TENANTS", "ops");
    let coordinator = cluster.coordinator().await;
    let (_worker, worker_url) = cluster.worker("worker-1").await;
    let coordinator_url = cluster.url();

    // acme: three jobs to their end, one cancelled while it plans, four executions.
    let mut jobs = Vec::new();
    for i in 0..4 {
        let (status, body) = call(
            &cluster,
            Method::POST,
            "/v1/jobs",
            "key-acme",
            Some(json!({"instruction": distinct_job(i)})),
        )
        .await;
        assert_eq!(status, 202, "{body}");
        jobs.push(body["job_id"].as_str().unwrap().to_owned());
    }
    let (status, body) = call(
        &cluster,
        Method::DELETE,
        &format!("/v1/jobs/{}", jobs[3]),
        "key-acme",
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let burn =
        "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2:\n    pass";
    let programs = [
        burn,
        "print(1)",
        "import sys\nsys.exit(3)",
        "print(sum(range(10**6)))",
    ];
    // A limit far above what the burn needs on a starved machine (it ends at 0.2 s of CPU).
    let run = |code: &str| json!({"language": "python", "code": code, "timeout_ms": 120_000});
    let mut executions = Vec::new();
    for code in programs {
        let (status, body) = call(
            &cluster,
            Method::POST,
            "/v1/executions",
            "key-acme",
            Some(run(code)),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        executions.push(body);
    }
    // globex: two executions of its own.
    for _ in 0..2 {
        let (status, body) = call(
            &cluster,
            Method::POST,
            "/v1/executions",
            "key-globex",
            Some(run(burn)),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }

    let mut results = Vec::new();
    for job in &jobs {
        results.push(wait_final(&cluster, job, "key-acme").await);
    }
    assert_eq!(results[3]["status"], "cancelled");
    assert!(
        results[..3].iter().all(|r| r["status"] == "succeeded"),
        "{results:?}"
    );

    // The sum of what the results say.
    let field = |v: &Value, path: &[&str]| -> u64 {
        path.iter().fold(v, |v, k| &v[*k]).as_u64().unwrap_or(0)
    };
    let mut expected = json!({"jobs": 4, "executions": 4});
    let mut sums = [0u64; 5];
    for r in &results {
        sums[0] += field(r, &["metrics", "model_calls"]);
        sums[1] += field(r, &["metrics", "tokens", "prompt"]);
        sums[2] += field(r, &["metrics", "tokens", "completion"]);
        sums[3] += field(r, &["metrics", "execution_ms"]);
        sums[4] += field(r, &["metrics", "sandbox_cpu_ms"]);
    }
    for e in &executions {
        sums[3] += field(e, &["duration_ms"]);
        sums[4] += field(e, &["cpu_ms"]);
    }
    for (name, sum) in [
        "model_calls",
        "prompt_tokens",
        "completion_tokens",
        "sandbox_ms",
        "sandbox_cpu_ms",
    ]
    .iter()
    .zip(sums)
    {
        expected[*name] = json!(sum);
    }
    assert!(
        sums[0] >= 15,
        "three jobs of five model calls each: {sums:?}"
    );
    assert!(
        sums[1] > 0 && sums[2] > 0,
        "the FAKE model reports tokens: {sums:?}"
    );
    assert!(
        sums[4] >= 200,
        "the CPU burn is in the sandbox CPU: {sums:?}"
    );

    let (status, usage) = call(&cluster, Method::GET, "/v1/usage", "key-acme", None).await;
    assert_eq!(status, 200, "{usage}");
    assert_eq!(usage["tenant"], "acme");
    for (name, value) in expected.as_object().unwrap() {
        assert_eq!(
            &usage[name], value,
            "{name}: usage {usage}, results {expected}"
        );
    }

    // Per hour and per day: periods that add up to the same totals, oldest first, each on
    // its period's boundary.
    for (per, length) in [("hour", 3_600_000u64), ("day", 86_400_000)] {
        let (status, divided) = call(
            &cluster,
            Method::GET,
            &format!("/v1/usage?per={per}"),
            "key-acme",
            None,
        )
        .await;
        assert_eq!(status, 200, "{divided}");
        let series = divided["series"].as_array().expect("a series");
        assert!(!series.is_empty(), "{divided}");
        let starts: Vec<u64> = series
            .iter()
            .map(|p| p["from_ms"].as_u64().unwrap())
            .collect();
        assert!(starts.windows(2).all(|w| w[0] < w[1]), "{per}: {starts:?}");
        assert!(starts.iter().all(|s| s % length == 0), "{per}: {starts:?}");
        for (name, value) in expected.as_object().unwrap() {
            let summed: u64 = series.iter().map(|p| p[name].as_u64().unwrap()).sum();
            assert_eq!(summed, value.as_u64().unwrap(), "{per} {name}: {divided}");
        }
    }
    assert!(
        usage.get("series").is_none(),
        "no series unless asked: {usage}"
    );
    let (status, body) = call(
        &cluster,
        Method::GET,
        "/v1/usage?per=week",
        "key-acme",
        None,
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "invalid_query", "{body}");
    assert!(body.to_string().contains("per"), "{body}");

    // Another tenant's work is apart; only an admin reads another tenant's usage.
    let (_, globex) = call(&cluster, Method::GET, "/v1/usage", "key-globex", None).await;
    assert_eq!(globex["executions"], 2, "{globex}");
    assert_eq!(globex["jobs"], 0, "{globex}");
    assert!(
        globex["sandbox_cpu_ms"].as_u64().unwrap() >= 400,
        "{globex}"
    );
    let (status, body) = call(
        &cluster,
        Method::GET,
        "/v1/usage?tenant=globex",
        "key-acme",
        None,
    )
    .await;
    assert_eq!(status, 403, "{body}");
    let (status, seen_by_admin) = call(
        &cluster,
        Method::GET,
        "/v1/usage?tenant=acme",
        "key-ops",
        None,
    )
    .await;
    assert_eq!(status, 200, "{seen_by_admin}");
    for (name, value) in expected.as_object().unwrap() {
        assert_eq!(&seen_by_admin[name], value, "{name}: {seen_by_admin}");
    }
    assert_eq!(seen_by_admin["tenant"], "acme");
    // A window that ended before any of it: nothing.
    let (_, before) = call(
        &cluster,
        Method::GET,
        "/v1/usage?to=2020-01-01T00:00:00Z",
        "key-acme",
        None,
    )
    .await;
    assert_eq!(before["jobs"], 0, "{before}");

    // Prometheus: the same totals, by tenant, summed over the processes that ended the work
    // (the coordinator ended the cancelled job, the worker the rest).
    let urls = [coordinator_url.as_str(), worker_url.as_str()];
    assert_eq!(counted(&cluster, &urls, "acme", "jobs").await, 4.0);
    assert_eq!(counted(&cluster, &urls, "acme", "executions").await, 4.0);
    assert_eq!(
        counted(&cluster, &urls, "acme", "model_calls").await,
        sums[0] as f64
    );
    assert_eq!(
        counted(&cluster, &urls, "acme", "sandbox_cpu_ms").await,
        sums[4] as f64
    );
    assert_eq!(counted(&cluster, &urls, "globex", "executions").await, 2.0);
    drop(coordinator);
    cluster.cleanup().await;
}
