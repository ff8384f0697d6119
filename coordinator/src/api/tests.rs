//! API tests with the in-memory broker and store.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use broker::{Broker, MemoryBroker, Queue};
use futures::StreamExt;
use proto::{Envelope, ExecutionResult, Status, Task};
use serde_json::{Value, json};
use store::{MemoryStore, Store};
use tokio_util::sync::CancellationToken;

use store::JobStore;

use crate::{Coordinator, Options};

fn coordinator(broker: &MemoryBroker, store: &MemoryStore) -> Coordinator {
    let options = Options {
        wait: Duration::from_secs(5),
        ..Options::default()
    };
    Coordinator::build(
        options,
        Arc::new(broker.clone()),
        store::Stores::bare(Arc::new(store.clone()), Arc::new(store::MemoryJobs::new())),
        &prometheus::Registry::new(),
    )
    .unwrap()
}

use crate::testing::call;

/// Plays a worker: takes one task and stores a verdict derived from the code.
async fn fake_worker(broker: MemoryBroker, store: MemoryStore) {
    let mut tasks = broker.consume(Queue::Executions, 1, CancellationToken::new());
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
        cpu_ms: None,
        peak_memory_kb: None,
        reason: None,
        error_kind: None,
        files: Default::default(),
        file_errors: Default::default(),
        compile: None,
    };
    store
        .complete_execution(envelope.task_id, None, &result)
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
        .consume(Queue::Executions, 1, CancellationToken::new())
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
        .consume(Queue::Executions, 1, CancellationToken::new())
        .next()
        .await
        .unwrap();
    let Task::Execute(request) = Envelope::decode(&delivery.body).unwrap().task else {
        panic!("not an execution task")
    };
    assert!(request.fresh_container);
    assert_eq!(request.files.len(), 2);
    assert_eq!(request.files["data/in.txt"], "abc".into());
    assert_eq!(request.return_files, vec!["out.txt".to_string()]);
}

#[tokio::test]
async fn bad_requests_get_a_4xx_that_names_the_problem() {
    let (broker, store) = (MemoryBroker::new(5), MemoryStore::new());
    let c = coordinator(&broker, &store);
    // (body, code, the field named as `param`, a word of the message)
    let cases = [
        ("{not json", "malformed_body", None, "invalid request body"),
        (
            r#"{"language":"python"}"#,
            "malformed_body",
            Some("code"),
            "code",
        ),
        (
            r#"{"language":"python","code":"1","timeout":3}"#,
            "malformed_body",
            Some("timeout"),
            "timeout",
        ),
        (
            r#"{"language":"cobol","code":"1"}"#,
            "unknown_language",
            Some("language"),
            "language",
        ),
        (
            r#"{"language":"python","code":"1","timeout_ms":999999999}"#,
            "invalid_field",
            Some("timeout_ms"),
            "timeout_ms",
        ),
        (
            r#"{"language":"python","code":"1","cpu_time_ms":0}"#,
            "invalid_field",
            Some("cpu_time_ms"),
            "cpu_time_ms",
        ),
        (
            r#"{"language":"python","code":"1","memory_mb":1}"#,
            "invalid_field",
            Some("memory_mb"),
            "memory_mb",
        ),
        (
            r#"{"language":"python","code":"1","files":{"../escape.py":"x"}}"#,
            "invalid_field",
            Some("files"),
            "files",
        ),
        (
            r#"{"language":"python","code":"1","files":{"main.py":"x"}}"#,
            "invalid_field",
            Some("files"),
            "files",
        ),
        (
            r#"{"language":"python","code":"1","return_files":["/etc/passwd"]}"#,
            "invalid_field",
            Some("return_files"),
            "return_files",
        ),
        (
            r#"{"language":"python","code":"1","fresh_container":"yes"}"#,
            "malformed_body",
            Some("fresh_container"),
            "expected a boolean",
        ),
    ];
    for (body, code, param, needle) in cases {
        let (status, answer) = call(&c, "POST", "/v1/executions", body).await;
        let expected: proto::api::ErrorCode = serde_json::from_value(json!(code)).unwrap();
        assert_eq!(status.as_u16(), expected.status(), "{body} -> {answer}");
        assert_eq!(answer["code"], code, "{body} -> {answer}");
        assert_eq!(answer["param"].as_str(), param, "{body} -> {answer}");
        let message = answer["error"].as_str().unwrap();
        assert!(message.contains(needle), "{body} -> {message}");
    }
    // A batch item's field is named with its place.
    let (_, answer) = call(
        &c,
        "POST",
        "/v1/executions/batch",
        r#"{"items":[{"language":"python","code":"1"},{"language":"python","code":"1","memory_mb":"x"}]}"#,
    )
    .await;
    assert_eq!(answer["code"], "malformed_body", "{answer}");
    assert_eq!(answer["param"], "items[1].memory_mb", "{answer}");
    // So is one that reads but is out of range, in `param` as in the message.
    let (_, answer) = call(
        &c,
        "POST",
        "/v1/executions/batch",
        r#"{"items":[{"language":"python","code":"1"},{"language":"cobol","code":"1"}]}"#,
    )
    .await;
    assert_eq!(answer["code"], "unknown_language", "{answer}");
    assert_eq!(answer["param"], "items[1].language", "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .starts_with("items[1].language: "),
        "{answer}"
    );
    let huge = format!(
        r#"{{"language":"python","code":"{}"}}"#,
        "x".repeat(Options::default().max_body_bytes + 1)
    );
    let (status, answer) = call(&c, "POST", "/v1/executions", &huge).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(answer["code"], "payload_too_large", "{answer}");
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
    assert_eq!(
        broker.len(Queue::Executions),
        0,
        "nothing invalid was published"
    );
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
async fn routes_methods_and_ids_that_do_not_exist_have_codes_of_their_own() {
    let (broker, store) = (MemoryBroker::new(5), MemoryStore::new());
    let c = coordinator(&broker, &store);
    let job = proto::TaskId::new();
    for (method, uri, status, code, param) in [
        ("GET", "/v1/nothing", 404, "no_such_route", None),
        ("PUT", "/v1/jobs", 405, "method_not_allowed", None),
        ("GET", "/v1/jobs/42", 400, "invalid_id", Some("id")),
        ("GET", "/v1/batches/x", 400, "invalid_id", Some("id")),
        ("GET", &format!("/v1/jobs/{job}"), 404, "not_found", None),
        ("GET", "/v1/jobs?limit=x", 400, "invalid_query", None),
    ] {
        let (got, answer) = call(&c, method, uri, "").await;
        assert_eq!(got.as_u16(), status, "{method} {uri}: {answer}");
        assert_eq!(answer["code"], code, "{method} {uri}: {answer}");
        assert_eq!(answer["param"].as_str(), param, "{method} {uri}: {answer}");
    }
}

#[tokio::test]
async fn a_usable_request_id_is_kept_and_carried_by_the_task_and_any_other_is_made_anew() {
    use axum::body::Body;
    use tower::ServiceExt;
    let (broker, store) = (MemoryBroker::new(5), MemoryStore::new());
    let c = coordinator(&broker, &store);
    let send = |id: Option<String>| {
        let mut request = axum::http::Request::builder()
            .method("POST")
            .uri("/v1/executions?wait=false")
            .header("content-type", "application/json");
        if let Some(id) = id {
            request = request.header("x-request-id", id);
        }
        let request = request
            .body(Body::from(r#"{"language":"python","code":"1"}"#))
            .unwrap();
        let router = crate::router(c.clone());
        async move {
            let response = router.oneshot(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::ACCEPTED);
            response.headers()["x-request-id"]
                .to_str()
                .unwrap()
                .to_owned()
        }
    };
    let mut tasks = broker.consume(Queue::Executions, 1, CancellationToken::new());
    assert_eq!(send(Some("trace-me-1".into())).await, "trace-me-1");
    let carried = Envelope::decode(&tasks.next().await.unwrap().body).unwrap();
    assert_eq!(carried.request_id.as_deref(), Some("trace-me-1"));
    for unusable in [None, Some("x".repeat(129)), Some("two words".into())] {
        let made = send(unusable.clone()).await;
        assert!(made.parse::<uuid::Uuid>().is_ok(), "{unusable:?} -> {made}");
        let carried = Envelope::decode(&tasks.next().await.unwrap().body).unwrap();
        assert_eq!(carried.request_id, Some(made));
    }
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
    assert_eq!(body["code"], "store_unavailable", "{body}");
    store.set_up();

    // A broker this coordinator cannot reach: refused before anything is recorded, with a
    // reason a client acts on (send it again, here or elsewhere).
    broker.set_down("broker stopped");
    for (uri, body) in [
        ("/v1/executions", r#"{"language":"python","code":"1"}"#),
        (
            "/v1/executions/batch",
            r#"{"items":[{"language":"python","code":"1"}]}"#,
        ),
        ("/v1/jobs", r#"{"instruction":"add two numbers"}"#),
    ] {
        let (status, answer) = call(&c, "POST", uri, body).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{uri}: {answer}");
        assert_eq!(answer["code"], "broker_unavailable", "{uri}: {answer}");
        assert!(
            answer["error"].as_str().unwrap().contains("broker stopped"),
            "{answer}"
        );
    }
    // Nothing of them was queued: the first task the broker holds is the next submission's.
    broker.set_up();
    let (_, accepted) = call(
        &c,
        "POST",
        "/v1/executions?wait=false",
        r#"{"language":"python","code":"2"}"#,
    )
    .await;
    let mut tasks = broker.consume(Queue::Executions, 1, CancellationToken::new());
    let first = Envelope::decode(&tasks.next().await.unwrap().body).unwrap();
    assert_eq!(first.task_id.to_string(), accepted["id"].as_str().unwrap());
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
    let mut tasks = broker.consume(Queue::Executions, 1, cancel.clone());
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

// The OpenAPI document.

/// Checks `body`, answered by `method path` with `status`, against the document.
fn conforms(doc: &Value, method: &str, path: &str, status: StatusCode, body: &Value) {
    let response = &doc["paths"][path][method.to_lowercase()]["responses"][status.as_str()];
    let schema = &response["content"]["application/json"]["schema"];
    assert!(
        schema.is_object(),
        "{method} {path} does not document a JSON {status}"
    );
    let root = json!({"components": doc["components"], "allOf": [schema]});
    let validator = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .should_validate_formats(true)
        .build(&root)
        .unwrap();
    let errors: Vec<String> = validator.iter_errors(body).map(|e| e.to_string()).collect();
    assert!(
        errors.is_empty(),
        "{method} {path} {status}: {body} breaks the document: {errors:?}"
    );
}

/// Whether `body` is valid for the document's component `schema`.
fn valid(doc: &Value, schema: &str, body: &Value) -> bool {
    let root = json!({
        "components": doc["components"],
        "$ref": format!("#/components/schemas/{schema}"),
    });
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .build(&root)
        .unwrap()
        .is_valid(body)
}

#[test]
fn the_document_lists_every_route_once_with_its_answers() {
    let doc = crate::openapi_document(&Options::default());
    assert_eq!(doc["openapi"], "3.1.0");
    let ops = [("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics")];
    let mut served: Vec<(String, String)> = crate::routes()
        .into_iter()
        .chain(ops.map(|(m, p)| (m, p.to_owned())))
        .map(|(m, p)| (m.to_lowercase(), p))
        .collect();
    let mut documented = Vec::new();
    let mut operation_ids = std::collections::BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            documented.push((method.clone(), path.clone()));
            let id = operation["operationId"].as_str().unwrap();
            assert!(
                operation_ids.insert(id.to_owned()),
                "operationId {id} twice"
            );
            let responses = operation["responses"].as_object().unwrap();
            // Every route behind the key answers 401 and 429 (each written once, in
            // `openapi_document`); the operations routes and this document answer neither.
            let keyed = path.starts_with("/v1/")
                || path.ends_with("/run_code")
                || path.ends_with("/run_jupyter");
            for status in ["401", "429"] {
                assert_eq!(
                    responses.contains_key(status),
                    keyed,
                    "{method} {path}: {status}"
                );
            }
            if keyed {
                let own_key = path.starts_with("/fusion/{key}/");
                let unauthorized = responses["401"]["description"].as_str().unwrap();
                assert_eq!(
                    unauthorized.contains("the path's key"),
                    own_key,
                    "{method} {path}: {unauthorized}"
                );
            }
            if !path.starts_with("/v1/") {
                continue;
            }
            assert!(responses.contains_key("503"), "{method} {path}: no 503");
            for (status, response) in responses {
                if status.starts_with('4') || status.starts_with('5') {
                    assert_eq!(
                        response["content"]["application/json"]["schema"]["$ref"],
                        "#/components/schemas/ErrorBody",
                        "{method} {path} {status}"
                    );
                }
            }
        }
    }
    served.sort();
    documented.sort();
    assert_eq!(
        documented, served,
        "documented routes differ from served ones"
    );

    let media_types = |path: &str, method: &str, status: &str| {
        doc["paths"][path][method]["responses"][status]["content"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        media_types("/v1/jobs/{id}/events", "get", "200"),
        ["text/event-stream"]
    );
    assert_eq!(media_types("/metrics", "get", "200"), ["text/plain"]);
    let batches = &doc["paths"]["/v1/batches"]["post"]["requestBody"]["content"];
    assert!(batches["application/x-ndjson"].is_object());
    let wait = &doc["paths"]["/v1/executions"]["post"]["parameters"][0];
    assert_eq!(
        (&wait["name"], &wait["in"]),
        (&json!("wait"), &json!("query"))
    );
    // The key is optional: the empty requirement comes first.
    assert_eq!(doc["security"][0], json!({}));
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
}

#[test]
fn the_document_carries_the_configured_limits() {
    let options = Options {
        max_timeout_ms: 5000,
        min_memory_mb: 32,
        max_memory_mb: 512,
        max_iterations_limit: 4,
        max_batch_jobs: 7,
        ..Options::default()
    };
    let doc = crate::openapi_document(&options);
    let execution = &doc["components"]["schemas"]["ExecutionSubmission"]["properties"];
    assert_eq!(execution["timeout_ms"]["maximum"], 5000);
    assert_eq!(execution["memory_mb"]["minimum"], 32);
    assert_eq!(execution["memory_mb"]["maximum"], 512);
    let job = &doc["components"]["schemas"]["JobSubmission"]["properties"];
    assert_eq!(job["max_iterations"]["maximum"], 4);
    let batch = &doc["paths"]["/v1/batches"]["post"]["requestBody"]["content"]["application/x-ndjson"]
        ["schema"];
    assert_eq!(
        (&batch["minItems"], &batch["maxItems"]),
        (&json!(1), &json!(7))
    );
    // Open without keys, a key required with them.
    assert_eq!(doc["security"][0], json!({}));
    let keyed = crate::openapi_document(&Options {
        api_keys: [("acme".to_owned(), "k1".to_owned())].into(),
        ..Options::default()
    });
    assert_eq!(keyed["security"], json!([{"bearer": []}, {"api_key": []}]));
    assert_eq!(keyed["paths"]["/healthz"]["get"]["security"], json!([{}]));
}

#[test]
fn the_documented_limits_agree_with_validation() {
    let options = Options::default();
    let doc = crate::openapi_document(&options);
    let submission = |extra: Value| {
        let mut body = json!({"language": "python", "code": "print(1)"});
        let fields = body.as_object_mut().unwrap();
        fields.extend(extra.as_object().unwrap().clone());
        body
    };
    let cases = [
        json!({}),
        json!({"timeout_ms": 0}),
        json!({"timeout_ms": 1}),
        json!({"timeout_ms": options.max_timeout_ms}),
        json!({"timeout_ms": options.max_timeout_ms + 1}),
        json!({"cpu_time_ms": 0}),
        json!({"cpu_time_ms": 1}),
        json!({"cpu_time_ms": options.max_timeout_ms}),
        json!({"cpu_time_ms": options.max_timeout_ms + 1}),
        json!({"memory_mb": options.min_memory_mb - 1}),
        json!({"memory_mb": options.max_memory_mb}),
        json!({"memory_mb": options.max_memory_mb + 1}),
        json!({"language": "cobol"}),
        json!({"stdin": null, "files": null, "return_files": null}),
    ];
    let paths = [
        "a.txt",
        "pkg/mod.py",
        ".hidden",
        "a..b",
        "...",
        "main.py/x",
        "",
        "/etc/passwd",
        "../x",
        "a/../b",
        "a//b",
        "./a",
        "a/",
        "a/.",
        "main.py",
        "a\0b",
    ];
    let with_paths = paths.iter().flat_map(|path| {
        [
            json!({"files": {*path: "x"}}),
            json!({"return_files": [path]}),
        ]
    });
    for extra in cases.into_iter().chain(with_paths) {
        let body = submission(extra);
        let request = serde_json::from_value(body.clone()).unwrap();
        assert_eq!(
            valid(&doc, "ExecutionSubmission", &body),
            crate::executions::validate(&options, request).is_ok(),
            "{body}"
        );
    }
    for (instruction, max_iterations) in [
        ("sum the primes", 3),
        (" \t\n\u{3000}", 3),
        ("x", 0),
        ("x", options.max_iterations_limit),
        ("x", options.max_iterations_limit + 1),
    ] {
        let body = json!({"instruction": instruction, "max_iterations": max_iterations});
        let request = serde_json::from_value(body.clone()).unwrap();
        assert_eq!(
            valid(&doc, "JobSubmission", &body),
            crate::jobs::validate(&options, request).is_ok(),
            "{body}"
        );
    }
}

#[test]
fn the_readiness_report_is_documented_as_telemetry_sends_it() {
    let doc = crate::openapi_document(&Options::default());
    let report = telemetry::ReadinessReport {
        ready: false,
        checks: [("redis".to_owned(), "refused".to_owned())].into(),
    };
    let body = serde_json::to_value(&report).unwrap();
    conforms(
        &doc,
        "GET",
        "/readyz",
        StatusCode::SERVICE_UNAVAILABLE,
        &body,
    );
    // Every field the document names is sent, and nothing else.
    let _: super::ReadinessReport = serde_json::from_value(body).unwrap();
}

#[test]
fn integral_numbers_count_as_integers() {
    let body = br#"{"language": "python", "code": "1", "timeout_ms": 500.0}"#;
    let submission: proto::api::ExecutionSubmission = crate::body::from_json(body).unwrap();
    assert_eq!(submission.timeout_ms, Some(500));
    let fractional = br#"{"language": "python", "code": "1", "timeout_ms": 500.5}"#;
    let error = crate::body::from_json::<proto::api::ExecutionSubmission>(fractional).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("`500.5`, expected u64 at line 1"),
        "{error}"
    );
    let twice = br#"{"language": "python", "code": "1", "code": "2"}"#;
    assert!(crate::body::from_json::<proto::api::ExecutionSubmission>(twice).is_err());
}

#[tokio::test]
async fn the_api_answers_as_documented() {
    let doc = crate::openapi_document(&Options::default());
    let (broker, store) = (MemoryBroker::new(5), MemoryStore::new());
    let jobs = store::MemoryJobs::new();
    let c = Coordinator::build(
        Options {
            wait: Duration::from_secs(5),
            ..Options::default()
        },
        Arc::new(broker.clone()),
        store::Stores::bare(Arc::new(store.clone()), Arc::new(jobs.clone())),
        &prometheus::Registry::new(),
    )
    .unwrap();

    // Executions: a verdict, a queued one, one with every optional field, errors.
    tokio::spawn(fake_worker(broker.clone(), store.clone()));
    let body = r#"{"language": "python", "code": "print(1)"}"#;
    let (status, answer) = call(&c, "POST", "/v1/executions", body).await;
    assert_eq!(status, StatusCode::OK);
    conforms(&doc, "POST", "/v1/executions", status, &answer);
    let (status, answer) = call(&c, "POST", "/v1/executions?wait=false", body).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    conforms(&doc, "POST", "/v1/executions", status, &answer);
    let id = answer["id"].as_str().unwrap().to_owned();
    let (status, answer) = call(&c, "GET", &format!("/v1/executions/{id}"), "").await;
    conforms(&doc, "GET", "/v1/executions/{id}", status, &answer);
    let failed = ExecutionResult {
        error_kind: Some(proto::ErrorKind::Runtime),
        files: [("out.txt".to_owned(), "x".into())].into(),
        file_errors: [("gone.txt".to_owned(), "missing".to_owned())].into(),
        ..ExecutionResult::error(Status::Failed, "ValueError: nope")
    };
    let task: proto::TaskId = id.parse().unwrap();
    store.complete_execution(task, None, &failed).await.unwrap();
    let (status, answer) = call(&c, "GET", &format!("/v1/executions/{id}"), "").await;
    assert_eq!(answer["error_kind"], "runtime");
    conforms(&doc, "GET", "/v1/executions/{id}", status, &answer);
    let unknown = format!("/v1/executions/{}", proto::TaskId::new());
    let cobol = r#"{"language": "cobol", "code": ""}"#;
    for (method, uri, body, path) in [
        ("POST", "/v1/executions", "{", "/v1/executions"),
        ("POST", "/v1/executions?wait=maybe", body, "/v1/executions"),
        ("POST", "/v1/executions", cobol, "/v1/executions"),
        ("GET", "/v1/executions/nope", "", "/v1/executions/{id}"),
        ("GET", "/v1/executions/%FF", "", "/v1/executions/{id}"),
        ("GET", &unknown, "", "/v1/executions/{id}"),
        ("GET", "/v1/jobs/%FF/events", "", "/v1/jobs/{id}/events"),
        ("GET", "/v1/batches/%FF", "", "/v1/batches/{id}"),
        ("GET", "/v1/cache/stats", "", "/v1/cache/stats"),
        ("POST", "/v1/batches", "", "/v1/batches"),
    ] {
        let (status, answer) = call(&c, method, uri, body).await;
        assert!(status.is_client_error(), "{method} {uri}: {status}");
        conforms(&doc, method, path, status, &answer);
    }

    // Jobs and batches: accepted, in progress, finished.
    let instruction = r#"{"instruction": "sum primes"}"#;
    let (status, answer) = call(&c, "POST", "/v1/jobs", instruction).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    conforms(&doc, "POST", "/v1/jobs", status, &answer);
    let job: proto::TaskId = answer["job_id"].as_str().unwrap().parse().unwrap();
    let (status, answer) = call(&c, "GET", &format!("/v1/jobs/{job}"), "").await;
    assert_eq!(answer["status"], "queued");
    conforms(&doc, "GET", "/v1/jobs/{id}", status, &answer);
    let spec = json!({
        "name": "sieve", "purpose": "primes up to n", "inputs": [{"name": "n", "type": "int"}],
        "outputs": {"type": "list[int]", "description": "the primes"}, "dependencies": [],
        "complexity": "simple"});
    let plan = proto::job::Plan {
        specs: vec![serde_json::from_value(spec.clone()).unwrap()],
        dependants: Default::default(),
        refused: None,
        request_code: None,
    };
    let meta = jobs.job_meta(job).await.unwrap().unwrap();
    jobs.start_job(&meta, &plan, None).await.unwrap();
    let (status, answer) = call(&c, "GET", &format!("/v1/jobs/{job}"), "").await;
    assert_eq!(answer["functions"]["sieve"]["attempts"], 0);
    conforms(&doc, "GET", "/v1/jobs/{id}", status, &answer);
    let result = json!({
        "job_id": job, "status": "failed", "instruction": "sum primes", "language": "python",
        "function_specs": [spec], "implementations": {"sieve": "def sieve(n): ..."},
        "tests": {"sieve": [{"name": "ten", "kind": "normal", "inputs": {"n": 10},
                             "expected_output": [2, 3, 5, 7], "expected_error": null}]},
        "test_results": [
            {"function": "sieve", "test": "ten", "passed": true, "actual_output": [2, 3, 5, 7],
             "duration_ms": 0.5},
            {"function": "sieve", "test": "one", "passed": false, "actual_output": null,
             "error": "boom", "error_kind": "runtime", "duration_ms": 1.0}],
        "all_tests_passed": false,
        "improvement_history": [{"function": "sieve", "attempt": 1, "error_kind": "runtime",
            "error": "boom", "fix": "guard n < 2",
            "analysis": {"error_kind": "runtime", "root_cause": "n < 2", "changes": "guard"}}],
        "documentation": "# Solution",
        "quality": {"score": 0.5, "tests_passed": 1, "tests_total": 2, "coverage": 0.9,
            "complexity": {"sieve": 3}, "docstrings": 1.0, "dangerous_calls": ["eval"]},
        "metrics": {"generation_ms": 1, "execution_ms": 2, "total_ms": 3, "model_calls": 4,
            "tokens": {"prompt": 5, "completion": 6}, "cache": "miss"},
        "failure": "sieve: 1 of 2 cases failed", "validation": "tested",
        "manual_review_recommended": true});
    let result = serde_json::from_value(result).unwrap();
    jobs.finish_job(job, None, &result).await.unwrap();
    let (status, answer) = call(&c, "GET", &format!("/v1/jobs/{job}"), "").await;
    assert_eq!(answer["failure"], "sieve: 1 of 2 cases failed");
    conforms(&doc, "GET", "/v1/jobs/{id}", status, &answer);

    let lines = "{\"instruction\": \"a\"}\n\n{\"instruction\": \"b\"}\n";
    let (status, answer) = call(&c, "POST", "/v1/batches", lines).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    conforms(&doc, "POST", "/v1/batches", status, &answer);
    let batch = answer["batch_id"].as_str().unwrap();
    let (status, answer) = call(&c, "GET", &format!("/v1/batches/{batch}"), "").await;
    assert_eq!(answer["counts"]["queued"], 2);
    conforms(&doc, "GET", "/v1/batches/{id}", status, &answer);
}

#[test]
fn the_event_stream_is_documented_as_frames_whose_data_is_a_progress_event() {
    let doc = crate::openapi_document(&Options::default());
    let frame = &doc["components"]["schemas"]["JobEvent"]["properties"];
    assert_eq!(
        frame["data"]["contentSchema"],
        json!({"$ref": "#/components/schemas/Progress"})
    );
    let names: Vec<&str> = frame["event"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for name in [
        "queued",
        "planned",
        "attempt",
        "function_done",
        "agent_step",
        "finished",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    assert_eq!(names.len(), 10, "{names:?}");
}
