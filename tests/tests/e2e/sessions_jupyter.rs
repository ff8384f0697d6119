//! SandboxFusion's `POST /run_jupyter` through the real cluster (RabbitMQ, Redis, Docker),
//! answered by a stateful session: state persists from cell to cell, a cell's error comes
//! back in SandboxFusion's (Jupyter's) shape without stopping the next cells, files go in and
//! come back base64, a cell past its deadline fails the run, the keyed route serves a tenant,
//! and in every case the request's session is ended and its container gone once it answered.

use std::time::{Duration, Instant};

use proto::FileContent;
use proto::file::decode_base64;
use serde_json::{Value, json};
use tests::Cluster;

/// Bounds a failure only: a session's container starts in about a second, more on a slow or
/// busy machine.
const WITHIN: Duration = Duration::from_secs(300);

/// `bytes` in base64 (standard alphabet, padded), as SandboxFusion's `files` carry them.
fn base64(bytes: &[u8]) -> String {
    let wire = serde_json::to_value(FileContent::Bytes(bytes.to_vec())).expect("serializes");
    wire["base64"].as_str().expect("bytes as base64").to_owned()
}

/// POSTs `body` to `path`; while no worker has announced itself as a session host yet (the
/// route waits a few seconds for one, then answers 503 `no_session_host`), again.
async fn post(cluster: &Cluster, path: &str, key: Option<&str>, body: &Value) -> (u16, Value) {
    let deadline = Instant::now() + WITHIN;
    loop {
        let mut request = cluster
            .http
            .post(format!("{}{path}", cluster.url()))
            .json(body);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.expect("the coordinator answers");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        let answer = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if status == 503 && answer["code"] == "no_session_host" && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        return (status, answer);
    }
}

/// The tenant's sessions (`GET /v1/sessions`), newest first.
async fn sessions(cluster: &Cluster, key: Option<&str>) -> Vec<Value> {
    let mut request = cluster.http.get(format!("{}/v1/sessions", cluster.url()));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.expect("the coordinator answers");
    assert_eq!(response.status(), 200);
    let list: Value = response.json().await.expect("a session list");
    list["sessions"].as_array().expect("sessions").clone()
}

/// The one session a request opened is ended, and its container gone.
async fn assert_only_session_ended(cluster: &Cluster, key: Option<&str>) {
    let listed = sessions(cluster, key).await;
    assert_eq!(listed.len(), 1, "one session for the request: {listed:?}");
    let session = &listed[0];
    assert_eq!(session["state"], "ended", "{session}");
    assert_eq!(session["ended_by"], "deleted", "{session}");
    assert_eq!(session["language"], "python", "{session}");
    let reason = session["ended_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("run_jupyter"), "{session}");
    tests::wait_session_containers_gone(session["id"].as_str().expect("an id")).await;
}

#[tokio::test]
async fn state_persists_between_cells_an_error_comes_back_in_jupyter_shape_and_the_session_goes() {
    let cluster = Cluster::new();
    let _coordinator = cluster.coordinator().await;
    let (_worker, _) = cluster.worker("worker").await;

    let bytes: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
    let request = json!({
        "cells": ["x = 5", "print(x * 2)", "x / 0"],
        "kernel": "python3",
        "cell_timeout": 30,
        "total_timeout": 120,
        "files": {"data/in.bin": base64(&bytes)},
        "fetch_files": ["data/in.bin", "not-there.txt"],
    });
    let (status, answer) = post(&cluster, "/run_jupyter", None, &request).await;
    assert_eq!(status, 200, "{answer}");

    // A cell's error is the cell's: the run itself succeeded, as in SandboxFusion.
    assert_eq!(answer["status"], "Success", "{answer}");
    assert_eq!(answer["message"], "", "{answer}");
    assert_eq!(answer["driver"]["status"], "Finished", "{answer}");
    assert_eq!(answer["driver"]["return_code"], 0, "{answer}");
    assert!(answer["driver"]["execution_time"].is_number(), "{answer}");
    assert!(answer.get("executor_pod_name").is_some(), "{answer}");
    let cells = answer["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 3, "{answer}");
    for cell in cells {
        for field in ["stdout", "stderr"] {
            assert!(cell[field].is_string(), "{cell}");
        }
        for field in ["display", "error"] {
            assert!(cell[field].is_array(), "{cell}");
        }
    }
    // The first cell's name is the second's.
    assert_eq!(cells[0]["stdout"], "", "{}", cells[0]);
    assert_eq!(cells[0]["error"], json!([]), "{}", cells[0]);
    assert_eq!(cells[1]["stdout"], "10\n", "{}", cells[1]);
    assert_eq!(cells[1]["error"], json!([]), "{}", cells[1]);
    // The third's error, as Jupyter's `error` message.
    let errors = cells[2]["error"].as_array().expect("errors");
    assert_eq!(errors.len(), 1, "{}", cells[2]);
    assert_eq!(errors[0]["ename"], "ZeroDivisionError", "{}", cells[2]);
    assert_eq!(errors[0]["evalue"], "division by zero", "{}", cells[2]);
    let traceback = errors[0]["traceback"].as_array().expect("traceback lines");
    assert!(
        traceback.iter().any(|line| line
            .as_str()
            .unwrap_or_default()
            .contains("ZeroDivisionError")),
        "{}",
        cells[2]
    );
    assert_eq!(cells[2]["display"], json!([]), "{}", cells[2]);

    // The uploaded file comes back base64, byte for byte; a missing one is left out.
    let files = answer["files"].as_object().expect("files");
    assert_eq!(files.len(), 1, "{answer}");
    let fetched = decode_base64(files["data/in.bin"].as_str().expect("base64")).expect("base64");
    assert_eq!(fetched, bytes);

    // Nothing of the request is left: its session ended, its container gone.
    assert_only_session_ended(&cluster, None).await;

    // The last expression's value is displayed as Jupyter's text/plain.
    let (status, answer) = post(
        &cluster,
        "/run_jupyter",
        None,
        &json!({"cells": ["a = 'hello'", "a"]}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["status"], "Success", "{answer}");
    assert_eq!(
        answer["cells"][1]["display"],
        json!([{"text/plain": "'hello'"}]),
        "{answer}"
    );
    assert_eq!(answer["files"], json!({}), "{answer}");
    let listed = sessions(&cluster, None).await;
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(listed.iter().all(|s| s["state"] == "ended"), "{listed:?}");
    for session in &listed {
        tests::wait_session_containers_gone(session["id"].as_str().expect("an id")).await;
    }

    // A request that is not SandboxFusion's is refused before any session opens.
    let (status, refused) = post(
        &cluster,
        "/run_jupyter",
        None,
        &json!({"cells": ["1"], "kernel": "ir"}),
    )
    .await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["param"], "kernel", "{refused}");
    assert_eq!(sessions(&cluster, None).await.len(), 2);
    cluster.cleanup().await;
}

/// With keys configured, SandboxFusion's client calls `/fusion/KEY/run_jupyter`; a cell past
/// its `cell_timeout` stops the run (`Failed`, `TimeLimitExceeded`) and the session still goes.
#[tokio::test]
async fn a_cell_past_its_deadline_fails_the_run_through_the_keyed_route_and_the_session_goes() {
    let cluster = Cluster::new()
        .with_env("CODEGEN__COORDINATOR__API_KEYS__ACME", "key-acme")
        .with_env("CODEGEN__COORDINATOR__API_KEYS__GLOBEX", "key-globex");
    let _coordinator = cluster.coordinator().await;
    let (_worker, _) = cluster.worker("worker").await;

    let request = json!({
        "cells": [
            "open('out.txt', 'w').write('written before the slow cell')",
            "import time\nwhile True:\n    time.sleep(0.05)",
            "print('never run')",
        ],
        "cell_timeout": 5,
        "fetch_files": ["out.txt"],
    });
    let (status, _) = post(&cluster, "/fusion/wrong/run_jupyter", None, &request).await;
    assert_eq!(status, 401);
    let (status, answer) = post(&cluster, "/fusion/key-acme/run_jupyter", None, &request).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["status"], "Failed", "{answer}");
    assert_eq!(answer["driver"]["status"], "TimeLimitExceeded", "{answer}");
    let message = answer["message"].as_str().unwrap_or_default();
    assert!(message.contains("cell 1"), "{answer}");
    // The cells that ran, the one past its deadline included; not the one after it.
    let cells = answer["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 2, "{answer}");
    assert_eq!(
        cells[1]["error"][0]["ename"], "KeyboardInterrupt",
        "{answer}"
    );
    let written = decode_base64(
        answer["files"]["out.txt"]
            .as_str()
            .expect("out.txt fetched"),
    )
    .expect("base64");
    assert_eq!(written, b"written before the slow cell");

    // The session was acme's, and it is over.
    assert_only_session_ended(&cluster, Some("key-acme")).await;
    assert!(sessions(&cluster, Some("key-globex")).await.is_empty());
    cluster.cleanup().await;
}
