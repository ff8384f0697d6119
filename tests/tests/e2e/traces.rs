//! One trace per request across HTTP → RabbitMQ → workers → model and sandbox, exported over
//! OTLP/HTTP to a collector in the test (`tests::otlp`), with the real broker, Redis, Docker
//! and two workers.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tests::Cluster;
use tests::otlp::{Collector, Span};

const SERVER: u64 = 2;
const PRODUCER: u64 = 4;
const CONSUMER: u64 = 5;
const STATUS_ERROR: u64 = 2;

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

/// A failed execution's spans say so as OpenTelemetry's conventions do: error status and the
/// verdict as `error.type`, on the worker's task span and its sandbox run; a passing one's
/// status stays unset.
#[tokio::test]
async fn an_execution_that_timed_out_or_failed_has_error_spans_and_a_passing_one_does_not() {
    let (collector, endpoint) = Collector::start().await;
    let cluster = Cluster::new().with_env("CODEGEN__TELEMETRY__OTLP_ENDPOINT", &endpoint);
    let _coordinator = cluster.coordinator().await;
    let (_worker, _) = cluster.worker("worker").await;
    let mut ids = BTreeMap::new();
    // Only the loop's limit is short: it times out on any machine, and the others have far
    // more time than a slow machine needs.
    for (verdict, code, timeout_ms) in [
        ("timeout", "while True: pass", 500),
        ("failed", "raise SystemExit(3)", 60_000),
        ("passed", "print('fine')", 60_000),
    ] {
        let (status, body) = cluster
            .execute(
                "",
                json!({"language": "python", "code": code, "timeout_ms": timeout_ms}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["status"], verdict, "{body}");
        ids.insert(verdict, body["id"].as_str().unwrap().to_owned());
    }
    // Each execution's task span and its sandbox run below it; spans leave in batches. The
    // deadline only bounds a failure.
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let spans = collector.spans();
        let by_id: HashMap<&str, &Span> = spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
        let found: Vec<(&str, &Span, &Span)> = ids
            .iter()
            .filter_map(|(verdict, id)| {
                let task = spans
                    .iter()
                    .find(|s| s.kind == CONSUMER && s.attribute("task") == Some(id.as_str()))?;
                let run = spans.iter().find(|s| {
                    s.name == "sandbox run" && {
                        let mut at = *s;
                        loop {
                            match by_id.get(at.parent_span_id.as_str()) {
                                Some(p) if p.span_id == task.span_id => break true,
                                Some(p) => at = p,
                                None => break false,
                            }
                        }
                    }
                })?;
                Some((*verdict, task, run))
            })
            .collect();
        if found.len() == ids.len() {
            for (verdict, task, run) in found {
                assert_eq!(task.attribute("verdict"), Some(verdict), "{task:#?}");
                assert_eq!(run.attribute("verdict"), Some(verdict), "{run:#?}");
                if verdict == "passed" {
                    assert_eq!(task.status_code, 0, "{task:#?}");
                    assert_eq!(run.status_code, 0, "{run:#?}");
                    assert_eq!(task.attribute("error.type"), None, "{task:#?}");
                } else {
                    for span in [task, run] {
                        assert_eq!(span.status_code, STATUS_ERROR, "{span:#?}");
                        assert_eq!(span.attribute("error.type"), Some(verdict), "{span:#?}");
                    }
                }
            }
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} executions' spans exported: {spans:#?}",
            found.len(),
            ids.len()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    cluster.cleanup().await;
}
