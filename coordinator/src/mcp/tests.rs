//! `/mcp` through the coordinator's router on the in-memory broker and store: the key's 401
//! before any MCP, the tools and their schemas, a program run on the executions path as the
//! key's tenant, refusals as tool errors with the API's code. (With a real MCP client, the
//! sessions and `codegen mcp`: tests/tests/e2e/mcp.rs.)

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
        wait: Duration::from_secs(30),
        api_keys: [
            ("acme".to_owned(), "key-acme".to_owned()),
            ("globex".to_owned(), "key-globex".to_owned()),
        ]
        .into(),
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

/// One JSON-RPC request to `/mcp` with `key` (none: no key): the HTTP status and the answer.
async fn mcp(
    c: &Coordinator,
    key: Option<&str>,
    method: &str,
    params: Value,
) -> (StatusCode, Value) {
    let mut request = Request::builder()
        .method("POST")
        .uri("/mcp")
        // Any name: a coordinator is reached by whatever name its operator gives it.
        .header("host", "codegen.example.com:8443")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18");
    if let Some(key) = key {
        request = request.header("authorization", format!("Bearer {key}"));
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let request = request.body(Body::from(body.to_string())).unwrap();
    let response = crate::router(c.clone()).oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// A tool's result (`tools/call`).
async fn tool(c: &Coordinator, key: &str, name: &str, arguments: Value) -> Value {
    let (status, answer) = mcp(
        c,
        Some(key),
        "tools/call",
        json!({"name": name, "arguments": arguments}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer["result"].clone()
}

fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap()
}

#[tokio::test]
async fn a_missing_or_unknown_key_is_the_apis_401_before_any_mcp() {
    let (broker, store) = (MemoryBroker::new(5), MemoryStore::new());
    let c = coordinator(&broker, &store);
    let (status, answer) = mcp(&c, None, "tools/list", json!({})).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("api_key_required"))
    );
    let (status, answer) = mcp(&c, Some("wrong"), "tools/list", json!({})).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("api_key_unknown"))
    );
}

#[tokio::test]
async fn the_tools_and_their_schemas() {
    let (broker, store) = (MemoryBroker::new(5), MemoryStore::new());
    let c = coordinator(&broker, &store);
    let (status, answer) = mcp(&c, Some("key-acme"), "tools/list", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let tools = answer["result"]["tools"].as_array().unwrap();
    let mut names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "close_session",
            "create_session",
            "list_files",
            "list_languages",
            "read_file",
            "run_cell",
            "run_code",
            "write_file"
        ]
    );
    let schema =
        |name: &str| tools.iter().find(|t| t["name"] == name).unwrap()["inputSchema"].clone();
    let run_code = schema("run_code");
    assert_eq!(run_code["required"], json!(["language", "code"]));
    assert_eq!(run_code["additionalProperties"], json!(false));
    for field in ["stdin", "timeout_ms"] {
        assert!(run_code["properties"][field].is_object(), "{run_code}");
    }
    assert_eq!(
        schema("run_cell")["required"],
        json!(["session_id", "code"])
    );
    assert_eq!(
        schema("write_file")["required"],
        json!(["session_id", "path", "content"])
    );
}

#[tokio::test]
async fn run_code_runs_on_the_executions_path_as_the_keys_tenant() {
    let (broker, store) = (MemoryBroker::new(5), MemoryStore::new());
    let c = coordinator(&broker, &store);
    // Plays a worker on acme's lane of the executions queue.
    let worker = {
        let (broker, store) = (broker.clone(), store.clone());
        tokio::spawn(async move {
            let mut tasks = broker.consume_lane(
                Queue::Executions,
                Some("acme".to_owned()),
                1,
                CancellationToken::new(),
            );
            let delivery = tasks.next().await.unwrap();
            let envelope = Envelope::decode(&delivery.body).unwrap();
            let Task::Execute(request) = envelope.task else {
                panic!("not an execution task")
            };
            assert_eq!(envelope.tenant.as_deref(), Some("acme"));
            assert_eq!(request.stdin.as_deref(), Some("in"));
            assert_eq!(request.timeout_ms, 7000);
            let mut result = ExecutionResult::error(Status::Failed, "boom");
            result.exit_code = Some(3);
            result.stdout = format!("ran {} bytes\n", request.code.len());
            store
                .complete_execution(envelope.task_id, Some("acme"), &result)
                .await
                .unwrap();
            delivery.ack().await.unwrap();
        })
    };
    let result = tool(
        &c,
        "key-acme",
        "run_code",
        json!({"language": "py", "code": "print(1)", "stdin": "in", "timeout_ms": 7000}),
    )
    .await;
    worker.await.unwrap();
    assert_eq!(result["isError"], json!(false), "{result}");
    let answer = text(&result);
    for line in [
        "status: failed\n",
        "reason: boom\n",
        "exit_code: 3\n",
        "--- stdout ---\nran 8 bytes\n",
        "--- stderr: empty ---\n",
    ] {
        assert!(answer.contains(line), "{line:?} in {answer}");
    }
    assert_eq!(result["structuredContent"]["stdout"], "ran 8 bytes\n");
    // The execution is acme's, as POST /v1/executions makes it.
    let id: proto::TaskId = result["structuredContent"]["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let meta = store.execution_meta(id).await.unwrap().unwrap();
    assert_eq!(meta.tenant.as_deref(), Some("acme"));
    assert_eq!(meta.language, proto::Language::Python);
}

#[tokio::test]
async fn refusals_are_tool_errors_with_the_apis_code() {
    let (broker, store) = (MemoryBroker::new(5), MemoryStore::new());
    let c = coordinator(&broker, &store);
    for (name, arguments, code) in [
        (
            "run_code",
            json!({"language": "cobol", "code": "x"}),
            "unknown_language",
        ),
        (
            "run_code",
            json!({"language": "python", "code": "x", "timeout_ms": 0}),
            "invalid_field",
        ),
        (
            "create_session",
            json!({"language": "rust"}),
            "unknown_language",
        ),
        (
            "create_session",
            json!({"language": "klingon"}),
            "unknown_language",
        ),
        (
            "write_file",
            json!({"session_id": "x", "path": "a", "content": "%%", "encoding": "base64"}),
            "invalid_field",
        ),
    ] {
        let result = tool(&c, "key-acme", name, arguments.clone()).await;
        assert_eq!(
            result["isError"],
            json!(true),
            "{name} {arguments}: {result}"
        );
        assert!(
            text(&result).starts_with(&format!("{code}: ")),
            "{name} {arguments}: {result}"
        );
        assert_eq!(result["structuredContent"]["code"], code, "{result}");
    }
    // Nothing was queued for any of them.
    assert_eq!(broker.len(Queue::Executions), 0);
}
