//! Per-tenant request rates hold for the whole cluster (two real coordinators sharing Redis):
//! past the rate, 429 naming the limit with `Retry-After`, and nothing is done; another tenant
//! is not affected.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::time::{Duration, Instant};

use futures::future::join_all;
use serde_json::{Value, json};
use tests::{Cluster, LONG_WAIT};

const RATE: usize = 5;

/// Requests sent together, then twice as many, and so on, until one is refused (at most
/// `rounds` rounds): at any speed they come faster than the meter refills, which a sequence of
/// requests does not on a machine where one takes more than `1 / RATE` s. `request(i)` sends
/// the i-th and answers whether it was refused, with what it wants kept; the answers in
/// order, and the time the whole took.
async fn until_refused<F, Fut, T>(first: usize, rounds: u32, request: F) -> (Vec<(bool, T)>, f64)
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = (bool, T)>,
{
    let started = Instant::now();
    let mut answers = Vec::new();
    let mut size = first;
    for _ in 0..rounds {
        let round = join_all((answers.len()..answers.len() + size).map(&request)).await;
        answers.extend(round);
        if answers.iter().any(|(refused, _)| *refused) {
            break;
        }
        size *= 2;
    }
    (answers, started.elapsed().as_secs_f64())
}

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

    // 40 requests at once, alternating between the coordinators (more if none was refused).
    let (answers, elapsed) = until_refused(40, 6, |i| {
        let request = cluster
            .http
            .get(format!("{}{unknown}", bases[i % 2]))
            .bearer_auth("key-acme");
        async move {
            let response = request.send().await.unwrap();
            match response.status().as_u16() {
                404 => (false, None),
                429 => {
                    let retry = response.headers()["retry-after"]
                        .to_str()
                        .unwrap()
                        .to_owned();
                    let body: Value = response.json().await.unwrap();
                    (true, Some((retry, body)))
                }
                other => panic!("unexpected {other}"),
            }
        }
    })
    .await;
    let sent = answers.len();
    let admitted = answers.iter().filter(|(refused, _)| !refused).count();
    let refused = answers.into_iter().find_map(|(_, r)| r);
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
        "{admitted} of {sent} admitted in {elapsed:.2}s at {RATE}/s (at most {most})"
    );
    let (retry, body) = refused.expect("some requests were refused");
    assert!(retry.parse::<u64>().unwrap() >= 1, "{retry}");
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("coordinator.tenants.acme.requests_per_second")
            && error.contains("5 requests per second"),
        "{error}"
    );
    assert_eq!(body["code"], "rate_limited", "{body}");
    assert_eq!(
        body["limit"], "coordinator.tenants.acme.requests_per_second",
        "{body}"
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
    let (answers, _) = until_refused(2 * RATE, 6, |_| {
        let request = cluster
            .http
            .post(format!("{}/v1/executions?wait=false", bases[1]))
            .bearer_auth("key-acme")
            .json(&json!({"language": "python", "code": "print(1)"}));
        async move {
            let response = request.send().await.unwrap();
            let refused = response.status().as_u16() == 429;
            (refused, response.json::<Value>().await.unwrap())
        }
    })
    .await;
    let body = answers
        .into_iter()
        .find_map(|(refused, body)| refused.then_some(body))
        .expect("a burst of posts was refused");
    assert!(
        body.get("id").is_none() && body["error"].is_string(),
        "{body}"
    );
    cluster.cleanup().await;
}

/// The CLI waits out a tenant's request rate instead of failing: `exec-batch` with one
/// program per request, several at once, against a rate far below what it sends, gets every
/// program run once (its 429s retried after their `Retry-After`), and `codegen batch` reads
/// its results through the same limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_waits_out_a_request_rate() {
    let mut cluster = Cluster::new()
        .with_coordinator_wait(LONG_WAIT)
        .with_env("CODEGEN__COORDINATOR__API_KEYS__ACME", "key-acme")
        .with_env(
            "CODEGEN__COORDINATOR__TENANTS__ACME__REQUESTS_PER_SECOND",
            "2",
        );
    let _model = cluster
        .scripted_model(&tests::root().join("examples/scripted-model.json"))
        .await;
    let _coordinator = cluster.coordinator().await;
    let (_worker, _) = cluster.worker("worker-1").await;
    let url = cluster.url();
    let input = cluster.dir.path().join("programs.jsonl");
    let programs: Vec<String> = (0..12)
        .map(|i| {
            json!({"id": format!("p{i}"), "language": "python", "code": format!("print({i})")})
                .to_string()
        })
        .collect();
    std::fs::write(&input, programs.join("\n")).unwrap();
    let output = cluster.dir.path().join("results.jsonl");
    let run = tests::codegen_cli(
        &[
            "exec-batch",
            input.to_str().unwrap(),
            "-o",
            output.to_str().unwrap(),
            "--chunk",
            "1",
            "--in-flight",
            "6",
            "--api-key",
            "key-acme",
            "--url",
            &url,
        ],
        LONG_WAIT,
    )
    .await;
    assert_eq!(run.code, Some(0), "{run}");
    assert!(
        run.stderr
            .contains("answered 429 Too Many Requests; trying again"),
        "the rate was met: {run}"
    );
    let results: Vec<Value> = std::fs::read_to_string(&output)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(results.len(), 12);
    for (i, result) in results.iter().enumerate() {
        assert_eq!(
            (&result["id"], &result["status"], &result["stdout"]),
            (
                &json!(format!("p{i}")),
                &json!("passed"),
                &json!(format!("{i}\n"))
            ),
            "{result:#}"
        );
    }
    // Each program ran once: the tenant's executions are exactly these twelve. (This read
    // is under the same rate: it too waits out a 429.)
    let listed = loop {
        let (status, retry_after, listed) = cluster
            .request_as(
                reqwest::Method::GET,
                &format!("{url}/v1/executions?limit=100"),
                "key-acme",
                None,
            )
            .await;
        if status == 429 {
            tokio::time::sleep(Duration::from_secs(retry_after.unwrap_or(1))).await;
            continue;
        }
        assert_eq!(status, 200, "{listed}");
        break listed;
    };
    assert_eq!(
        listed["executions"].as_array().unwrap().len(),
        12,
        "{listed}"
    );

    // A batch of jobs: submitted, followed and its results read, all under the same rate.
    let out = cluster.dir.path().join("jobs.jsonl");
    let run = tests::codegen_cli(
        &[
            "batch",
            "examples/requests.jsonl",
            "-o",
            out.to_str().unwrap(),
            "--poll-ms",
            "50",
            "--api-key",
            "key-acme",
            "--url",
            &url,
        ],
        LONG_WAIT,
    )
    .await;
    assert_eq!(run.code, Some(0), "{run}");
    let jobs: Vec<Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(jobs.len(), 3, "{run}");
    assert!(jobs.iter().all(|j| j["status"] == "succeeded"), "{run}");
    cluster.cleanup().await;
}

/// A 429 whose error names `quota`.
fn assert_over(status: u16, body: &Value, quota: &str) {
    assert_eq!(status, 429, "{body}");
    assert!(body["error"].as_str().unwrap().contains(quota), "{body}");
    assert_eq!(body["code"], "quota_exceeded", "{body}");
    assert!(
        body["limit"].as_str().unwrap().ends_with(quota),
        "the setting is named for a program: {body}"
    );
}

/// `method path` on `base` as `key`: status, `Retry-After` and the JSON answer.
async fn send(
    cluster: &Cluster,
    method: reqwest::Method,
    url: String,
    key: &str,
    body: Option<Value>,
) -> (u16, Option<u64>, Value) {
    cluster.request_as(method, &url, key, body).await
}

/// Quotas on work hold across two coordinators: jobs and executions in flight, model tokens
/// and sandbox CPU per period. Past one: 429 naming the setting, `Retry-After`, nothing queued
/// (the listing shows it); a place comes back when the work ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_on_work_hold_across_two_coordinators() {
    use reqwest::Method;
    use tests::faults::{ModelServer, distinct_job, distinct_jobs_script};
    let dir = tempfile::tempdir().unwrap();
    let model = ModelServer::start(&distinct_jobs_script(dir.path(), 10, 1500), dir.path());
    // Its synchronous executions are answered with their verdicts, however slow the machine.
    let cluster = Cluster::new()
        .use_model(&model)
        .with_coordinator_wait(LONG_WAIT)
        .with_env("CODEGEN__COORDINATOR__API_KEYS__ACME", "key-acme")
        .with_env("CODEGEN__COORDINATOR__API_KEYS__GLOBEX", "key-globex")
        .with_env("CODEGEN__COORDINATOR__TENANTS__ACME__JOBS_IN_FLIGHT", "3")
        .with_env(
            "CODEGEN__COORDINATOR__TENANTS__ACME__EXECUTIONS_IN_FLIGHT",
            "2",
        )
        .with_env(
            "CODEGEN__COORDINATOR__TENANTS__GLOBEX__MODEL_TOKENS_PER_PERIOD",
            "1",
        )
        .with_env(
            "CODEGEN__COORDINATOR__TENANTS__GLOBEX__SANDBOX_CPU_SECONDS_PER_PERIOD",
            "1",
        );
    let _first = cluster.coordinator().await;
    let (_second, second) = cluster.another_coordinator("coordinator-2").await;
    let (_worker, _) = cluster.worker("worker-1").await;
    let bases = [cluster.url(), second];

    // Jobs in flight: three, whichever coordinator takes them.
    let mut jobs = Vec::new();
    for i in 0..3 {
        let (status, _, body) = send(
            &cluster,
            Method::POST,
            format!("{}/v1/jobs", bases[i % 2]),
            "key-acme",
            Some(json!({"instruction": distinct_job(i)})),
        )
        .await;
        assert_eq!(status, 202, "{body}");
        jobs.push(body["job_id"].as_str().unwrap().to_owned());
    }
    let (status, retry, body) = send(
        &cluster,
        Method::POST,
        format!("{}/v1/jobs", bases[1]),
        "key-acme",
        Some(json!({"instruction": distinct_job(3)})),
    )
    .await;
    assert_eq!(status, 429, "{body}");
    assert!(retry.unwrap() >= 1);
    let message = body["error"].as_str().unwrap();
    assert!(
        message.contains("coordinator.tenants.acme.jobs_in_flight") && message.contains("3"),
        "{message}"
    );
    // A batch that would pass it queues none of its jobs.
    let response = cluster
        .http
        .post(format!("{}/v1/batches", bases[0]))
        .bearer_auth("key-acme")
        .header("content-type", "application/x-ndjson")
        .body(format!(
            "{}\n{}\n",
            json!({"instruction": distinct_job(4)}),
            json!({"instruction": distinct_job(5)})
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    let (_, _, listed) = send(
        &cluster,
        Method::GET,
        format!("{}/v1/jobs?limit=100", bases[1]),
        "key-acme",
        None,
    )
    .await;
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 3, "{listed}");
    // Another tenant is not held back by acme's quota.
    let (status, _, body) = send(
        &cluster,
        Method::POST,
        format!("{}/v1/jobs", bases[0]),
        "key-globex",
        Some(json!({"instruction": distinct_job(6)})),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let globex_job = body["job_id"].as_str().unwrap().to_owned();
    // Ending one gives its place back.
    let (status, _, body) = send(
        &cluster,
        Method::DELETE,
        format!("{}/v1/jobs/{}", bases[0], jobs[0]),
        "key-acme",
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = send(
        &cluster,
        Method::POST,
        format!("{}/v1/jobs", bases[1]),
        "key-acme",
        Some(json!({"instruction": distinct_job(7)})),
    )
    .await;
    assert_eq!(status, 202, "{body}");

    // Executions in flight: two sleeping programs, then 429 for a third.
    let sleeper = json!({"language": "python", "code": "import time\ntime.sleep(3)"});
    for base in &bases {
        let (status, _, body) = send(
            &cluster,
            Method::POST,
            format!("{base}/v1/executions?wait=false"),
            "key-acme",
            Some(sleeper.clone()),
        )
        .await;
        assert_eq!(status, 202, "{body}");
    }
    let (status, _, body) = send(
        &cluster,
        Method::POST,
        format!("{}/v1/executions?wait=false", bases[0]),
        "key-acme",
        Some(sleeper.clone()),
    )
    .await;
    assert_over(
        status,
        &body,
        "coordinator.tenants.acme.executions_in_flight",
    );
    // Once they have their verdicts, their places are free again (seconds here; the deadline
    // only bounds a failure).
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let (status, _, body) = send(
            &cluster,
            Method::POST,
            format!("{}/v1/executions", bases[1]),
            "key-acme",
            Some(json!({"language": "python", "code": "print(1)", "timeout_ms": 120_000})),
        )
        .await;
        if status == 200 {
            assert_eq!(body["status"], "passed", "{body}");
            break;
        }
        assert_eq!(status, 429, "{body}");
        assert!(Instant::now() < deadline, "no place came back: {body}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // Sandbox CPU per period: a second and a bit of CPU, then 429 until the period ends. The
    // loop ends at its CPU; the wall limit is far off, for a machine that gives it little of a
    // core.
    let burn = json!({"language": "python", "timeout_ms": 120_000,
        "code": "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.2:\n    pass"});
    let (status, _, body) = send(
        &cluster,
        Method::POST,
        format!("{}/v1/executions", bases[0]),
        "key-globex",
        Some(burn.clone()),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body["cpu_ms"].as_u64().unwrap() >= 1200, "{body}");
    let (status, retry, body) = send(
        &cluster,
        Method::POST,
        format!("{}/v1/executions", bases[1]),
        "key-globex",
        Some(burn),
    )
    .await;
    assert_over(
        status,
        &body,
        "coordinator.tenants.globex.sandbox_cpu_seconds_per_period",
    );
    assert!(retry.unwrap() >= 1);

    // Model tokens per period: once globex's job ended with its tokens, its next job is 429.
    // Seconds here; the deadline only bounds a failure.
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let (_, _, job) = send(
            &cluster,
            Method::GET,
            format!("{}/v1/jobs/{globex_job}", bases[0]),
            "key-globex",
            None,
        )
        .await;
        if job["status"] == "succeeded" {
            assert!(job["metrics"]["tokens"]["prompt"].as_u64().unwrap() > 0);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "globex's job never finished: {job}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let (status, _, body) = send(
        &cluster,
        Method::POST,
        format!("{}/v1/jobs", bases[1]),
        "key-globex",
        Some(json!({"instruction": distinct_job(8)})),
    )
    .await;
    assert_over(
        status,
        &body,
        "coordinator.tenants.globex.model_tokens_per_period",
    );
    cluster.cleanup().await;
}
