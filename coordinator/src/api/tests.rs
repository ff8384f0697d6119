//! API tests with the in-memory broker and store.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use broker::{Broker, MemoryBroker, Queue};
use futures::StreamExt;
use http_body_util::BodyExt;
use proto::{Envelope, ExecutionResult, Status, Task};
use serde_json::{Value, json};
use store::{MemoryStore, Store};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::{Coordinator, Options};

fn coordinator(broker: &MemoryBroker, store: &MemoryStore) -> Coordinator {
    let options = Options {
        wait: Duration::from_secs(5),
        ..Options::default()
    };
    Coordinator::build(
        options,
        Arc::new(broker.clone()),
        Arc::new(store.clone()),
        Arc::new(store::MemoryJobs::new()),
        &prometheus::Registry::new(),
    )
    .unwrap()
}

async fn call(c: &Coordinator, method: &str, uri: &str, body: &str) -> (StatusCode, Value) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap();
    let response = crate::router(c.clone()).oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, value)
}

/// Plays a worker: takes one task and stores a verdict derived from the code.
async fn fake_worker(broker: MemoryBroker, store: MemoryStore) {
    let mut tasks = broker.consume(Queue::Tasks, 1, CancellationToken::new());
    let delivery = tasks.next().await.unwrap();
    let envelope = Envelope::decode(&delivery.body).unwrap();
    let Task::Execute(request) = envelope.task else {
        panic!("not an execution task")
    };
    let result = ExecutionResult {
        status: Status::Passed,
        exit_code: Some(0),
        stdout: format!("ran {} bytes", request.code.len()),
        stderr: String::new(),
        truncated: false,
        duration_ms: 3,
        reason: None,
        error_kind: None,
        files: Default::default(),
        file_errors: Default::default(),
    };
    store
        .complete_execution(envelope.task_id, &result)
        .await
        .unwrap();
    delivery.ack().await.unwrap();
}

#[tokio::test]
async fn submit_waits_for_the_verdict() {
    let (broker, store) = (MemoryBroker::new(5), MemoryStore::new());
    let c = coordinator(&broker, &store);
    tokio::spawn(fake_worker(broker.clone(), store.clone()));
    let (status, body) = call(
        &c,
        "POST",
        "/v1/executions",
        r#"{"language":"python","code":"print(1)"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "passed");
    assert_eq!(body["stdout"], "ran 8 bytes");
    assert_eq!(body["exit_code"], 0);
    let id = body["id"].as_str().unwrap();
    let (status, again) = call(&c, "GET", &format!("/v1/executions/{id}"), "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(again, body);
}

#[tokio::test]
async fn submit_without_wait_is_queued_with_defaults_filled_in() {
    let (broker, store) = (MemoryBroker::new(5), MemoryStore::new());
    let c = coordinator(&broker, &store);
    let (status, body) = call(
        &c,
        "POST",
        "/v1/executions?wait=false",
        r#"{"language":"python","code":"x = 1"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(body["status"], "queued");
    let id = body["id"].as_str().unwrap();
    let (status, view) = call(&c, "GET", &format!("/v1/executions/{id}"), "").await;
    assert_eq!(
        (status, &view["status"]),
        (StatusCode::OK, &json!("queued"))
    );

    let delivery = broker
        .consume(Queue::Tasks, 1, CancellationToken::new())
        .next()
        .await
        .unwrap();
    let envelope = Envelope::decode(&delivery.body).unwrap();
    assert_eq!(envelope.task_id.to_string(), id);
    assert_eq!(delivery.message_id.as_deref(), Some(id));
    let Task::Execute(request) = envelope.task else {
        panic!("not an execution task")
    };
    assert_eq!(request.timeout_ms, Options::default().default_timeout_ms);
    assert_eq!(request.memory_mb, Options::default().default_memory_mb);
    assert!(!request.fresh_container && request.files.is_empty());
}

#[tokio::test]
async fn files_and_fresh_container_are_passed_on() {
    let (broker, store) = (MemoryBroker::new(5), MemoryStore::new());
    let c = coordinator(&broker, &store);
    let body = json!({
        "language": "python", "code": "import helper", "fresh_container": true,
        "files": {"helper.py": "X = 1", "data/in.txt": "abc"},
        "return_files": ["out.txt"],
    });
    let (status, answer) = call(&c, "POST", "/v1/executions?wait=false", &body.to_string()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    let delivery = broker
        .consume(Queue::Tasks, 1, CancellationToken::new())
        .next()
        .await
        .unwrap();
    let Task::Execute(request) = Envelope::decode(&delivery.body).unwrap().task else {
        panic!("not an execution task")
    };
    assert!(request.fresh_container);
    assert_eq!(request.files.len(), 2);
    assert_eq!(request.files["data/in.txt"], "abc");
    assert_eq!(request.return_files, vec!["out.txt".to_string()]);
}

#[tokio::test]
async fn bad_requests_get_a_4xx_that_names_the_problem() {
    let (broker, store) = (MemoryBroker::new(5), MemoryStore::new());
    let c = coordinator(&broker, &store);
    let cases = [
        ("{not json", StatusCode::BAD_REQUEST, "invalid request body"),
        (r#"{"language":"python"}"#, StatusCode::BAD_REQUEST, "code"),
        (
            r#"{"language":"python","code":"1","timeout":3}"#,
            StatusCode::BAD_REQUEST,
            "timeout",
        ),
        (
            r#"{"language":"cobol","code":"1"}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "language",
        ),
        (
            r#"{"language":"python","code":"1","timeout_ms":999999999}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "timeout_ms",
        ),
        (
            r#"{"language":"python","code":"1","memory_mb":1}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "memory_mb",
        ),
        (
            r#"{"language":"python","code":"1","files":{"../escape.py":"x"}}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "files",
        ),
        (
            r#"{"language":"python","code":"1","files":{"main.py":"x"}}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "files",
        ),
        (
            r#"{"language":"python","code":"1","return_files":["/etc/passwd"]}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "return_files",
        ),
        (
            r#"{"language":"python","code":"1","fresh_container":"yes"}"#,
            StatusCode::BAD_REQUEST,
            "expected a boolean",
        ),
    ];
    for (body, expected, needle) in cases {
        let (status, answer) = call(&c, "POST", "/v1/executions", body).await;
        assert_eq!(status, expected, "{body} -> {answer}");
        let message = answer["error"].as_str().unwrap();
        assert!(message.contains(needle), "{body} -> {message}");
    }
    let huge = format!(
        r#"{{"language":"python","code":"{}"}}"#,
        "x".repeat(Options::default().max_body_bytes + 1)
    );
    let (status, _) = call(&c, "POST", "/v1/executions", &huge).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let too_many: serde_json::Map<String, Value> = (0..=proto::execution::MAX_FILES)
        .map(|i| (format!("f{i}.txt"), json!("")))
        .collect();
    let body = json!({"language": "python", "code": "1", "files": too_many}).to_string();
    let (status, answer) = call(&c, "POST", "/v1/executions", &body).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    let half = "x".repeat(Options::default().max_code_bytes / 2 + 1);
    let body = json!({"language": "python", "code": half, "files": {"big.txt": half}}).to_string();
    let (status, answer) = call(&c, "POST", "/v1/executions", &body).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("files"),
        "{answer}"
    );
    assert_eq!(broker.len(Queue::Tasks), 0, "nothing invalid was published");
}

#[tokio::test]
async fn unknown_and_malformed_ids() {
    let (broker, store) = (MemoryBroker::new(5), MemoryStore::new());
    let c = coordinator(&broker, &store);
    let (status, _) = call(&c, "GET", "/v1/executions/not-a-uuid", "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, body) = call(
        &c,
        "GET",
        &format!("/v1/executions/{}", proto::TaskId::new()),
        "",
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body["error"].as_str().unwrap().contains("no execution"));
}

#[tokio::test]
async fn outages_answer_503_and_leave_no_phantom_queued_execution() {
    let (broker, store) = (MemoryBroker::new(5), MemoryStore::new());
    let c = coordinator(&broker, &store);
    store.set_down("redis stopped");
    let (status, body) = call(
        &c,
        "POST",
        "/v1/executions",
        r#"{"language":"python","code":"1"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body["error"].as_str().unwrap().contains("redis"));
    store.set_up();

    broker.set_down("broker stopped");
    let (status, body) = call(
        &c,
        "POST",
        "/v1/executions",
        r#"{"language":"python","code":"1"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        body["error"].as_str().unwrap().contains("not queued"),
        "{body}"
    );
}

#[tokio::test]
async fn a_dead_letter_becomes_the_executions_error_result() {
    let (broker, store) = (MemoryBroker::new(1), MemoryStore::new());
    let c = coordinator(&broker, &store);
    let (_, body) = call(
        &c,
        "POST",
        "/v1/executions?wait=false",
        r#"{"language":"python","code":"1"}"#,
    )
    .await;
    let id: proto::TaskId = body["id"].as_str().unwrap().parse().unwrap();
    let cancel = CancellationToken::new();
    let mut tasks = broker.consume(Queue::Tasks, 1, cancel.clone());
    // A worker that keeps crashing: the task comes back until the delivery limit.
    tasks.next().await.unwrap().requeue().await.unwrap();
    tasks.next().await.unwrap().requeue().await.unwrap();
    let dead = broker
        .consume(Queue::DeadLetters, 1, cancel.clone())
        .next()
        .await
        .unwrap();
    c.dead_letter(dead).await;
    let result = store.execution_result(id).await.unwrap().unwrap();
    assert_eq!(result.status, Status::Error);
    assert!(result.reason.unwrap().contains("delivery limit"));
}

#[test]
fn print_openapi_tmp() {
    let doc = crate::openapi_document(&Options::default());
    std::fs::write(
        "/tmp/helper-openapi/openapi.json",
        serde_json::to_string_pretty(&doc).unwrap(),
    )
    .unwrap();
}
