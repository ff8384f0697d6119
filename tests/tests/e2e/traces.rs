//! One trace per request across HTTP → RabbitMQ → workers → model and sandbox, exported over
//! OTLP/HTTP to a collector in the test (`tests::otlp`), with the real broker, Redis, Docker
//! and two workers.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tests::Cluster;
use tests::otlp::{Collector, Span};

const SERVER: u64 = 2;
const PRODUCER: u64 = 4;
const CONSUMER: u64 = 5;

#[tokio::test]
async fn a_job_is_one_trace_from_its_request_through_two_workers() {
    let dir = tempfile::tempdir().unwrap();
    let (collector, endpoint) = Collector::start().await;
    let mut cluster = Cluster::new().with_env("CODEGEN__TELEMETRY__OTLP_ENDPOINT", &endpoint);
    // a → (b, c, d) → e: b, c and d are published together, and each answer takes a while,
    // so the two workers share them.
    let _model = cluster
        .scripted_model(&tests::diamond_script(dir.path(), 150))
        .await;
    let _coordinator = cluster.coordinator().await;
    let mut workers = Vec::new();
    for name in ["worker-1", "worker-2"] {
        let instance = format!("service.instance.id={name}");
        let (worker, url) = cluster.worker_with(name, &[("OTEL_RESOURCE_ATTRIBUTES", &instance)]);
        cluster.wait_ready(&url, &worker).await;
        workers.push(worker);
    }

    let response = cluster
        .http
        .post(format!("{}/v1/jobs", cluster.url()))
        .json(&json!({"instruction": "a diamond of adders"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let body: Value = response.json().await.unwrap();
    let job = body["job_id"].as_str().unwrap().to_owned();
    let result = cluster.wait_job(&job, Duration::from_secs(600)).await;
    assert_eq!(result["status"], "succeeded", "{result:#}");

    // Spans leave in batches every few seconds: wait for the seven tasks' (plan, five
    // functions, integrate). The deadline only bounds a failure.
    let deadline = Instant::now() + Duration::from_secs(300);
    let of_job = |s: &Span| s.attribute("job") == Some(job.as_str());
    let spans = loop {
        let spans = collector.spans();
        let tasks = spans
            .iter()
            .filter(|s| s.kind == CONSUMER && s.name.starts_with("process ") && of_job(s))
            .count();
        if tasks >= 7 {
            break spans;
        }
        assert!(
            Instant::now() < deadline,
            "{tasks} task spans of 7 exported: {spans:#?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let by_id: HashMap<&str, &Span> = spans.iter().map(|s| (s.span_id.as_str(), s)).collect();

    // The request is the root; everything of the job is in its trace.
    let request = spans
        .iter()
        .find(|s| s.name == "POST /v1/jobs" && s.kind == SERVER)
        .expect("the request's span");
    assert_eq!(request.resource["service.name"], "codegen-coordinator");
    assert_eq!(request.attribute("http.response.status_code"), Some("202"));
    let trace = request.trace_id.clone();
    let in_trace: Vec<&Span> = spans.iter().filter(|s| s.trace_id == trace).collect();
    for span in spans.iter().filter(|s| of_job(s)) {
        assert_eq!(span.trace_id, trace, "{span:#?}");
    }

    // Each task continues the publish that sent it, in whichever process published it.
    let tasks: Vec<&Span> = in_trace
        .iter()
        .copied()
        .filter(|s| s.kind == CONSUMER && s.name.starts_with("process "))
        .collect();
    let kinds: Vec<&str> = tasks.iter().filter_map(|s| s.attribute("kind")).collect();
    assert_eq!(tasks.len(), 7, "{kinds:?}");
    for task in &tasks {
        let publish = by_id
            .get(task.parent_span_id.as_str())
            .unwrap_or_else(|| panic!("the parent of {task:#?}"));
        assert_eq!(publish.kind, PRODUCER, "{publish:#?}");
        assert_eq!(
            publish.attribute("messaging.message.id"),
            task.attribute("messaging.message.id"),
        );
        // The plan was published by the request; the rest by the tasks before them.
        let publisher = by_id
            .get(publish.parent_span_id.as_str())
            .unwrap_or_else(|| panic!("the parent of {publish:#?}"));
        match task.attribute("kind") {
            Some("plan") => assert_eq!(publisher.span_id, request.span_id),
            _ => assert!(
                publisher.kind == CONSUMER && publisher.name.starts_with("process "),
                "{publisher:#?}"
            ),
        }
        assert_eq!(task.resource["service.name"], "codegen-worker");
    }
    let instances: BTreeSet<&str> = tasks
        .iter()
        .map(|t| t.resource["service.instance.id"].as_str())
        .collect();
    assert_eq!(
        instances,
        BTreeSet::from(["worker-1", "worker-2"]),
        "the functions ran on both workers"
    );

    // Below each task: its wait in the queue, its model calls and its sandbox runs.
    let task_of = |span: &Span| {
        let mut at = span;
        while let Some(parent) = by_id.get(at.parent_span_id.as_str()) {
            if tasks.iter().any(|t| t.span_id == parent.span_id) {
                return Some(parent.span_id.clone());
            }
            at = parent;
        }
        None
    };
    let waits: Vec<&Span> = in_trace
        .iter()
        .copied()
        .filter(|s| s.name == "queue wait")
        .collect();
    assert_eq!(waits.len(), 7);
    assert!(waits.iter().all(|w| task_of(w).is_some()));
    let calls: Vec<&Span> = in_trace
        .iter()
        .copied()
        .filter(|s| s.name.starts_with("chat "))
        .collect();
    assert!(calls.len() >= 6, "a plan and five implementations at least");
    for call in &calls {
        assert!(task_of(call).is_some(), "{call:#?}");
        assert!(
            call.attribute("phase").is_some() && call.attribute("gen_ai.request.model").is_some()
        );
    }
    let runs: Vec<&Span> = in_trace
        .iter()
        .copied()
        .filter(|s| s.name == "sandbox run")
        .collect();
    assert!(!runs.is_empty());
    for run in &runs {
        assert!(task_of(run).is_some(), "{run:#?}");
        assert_eq!(run.attribute("language"), Some("python"));
        assert!(run.attribute("verdict").is_some(), "{run:#?}");
    }

    // The log lines of the tasks name the trace.
    let logs: String = workers.iter().map(|w| w.log_text()).collect();
    let finished = logs
        .lines()
        .filter(|l| l.contains("task finished") && l.contains(&format!("job={job}")))
        .collect::<Vec<_>>();
    assert_eq!(finished.len(), 7, "{finished:#?}");
    assert!(
        finished
            .iter()
            .all(|l| l.contains(&format!("trace_id={trace}"))),
        "{finished:#?}"
    );
    cluster.cleanup().await;
}
