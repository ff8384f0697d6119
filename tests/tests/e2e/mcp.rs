//! The cluster's MCP tools (docs/mcp.md) driven by a real MCP client, the PyPI `mcp` package
//! (`tests/mcp/mcp_client.py`, in `.cluster/venv`, where scripts/test installs it), against a
//! cluster of its own with two tenants' keys (real RabbitMQ, Redis and Docker): `/mcp` over
//! streamable HTTP (the tools, a program, a session's cells and files, the other tenant's
//! refusals, the 401 without a key) and `codegen mcp` over stdio.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tests::{Cluster, Process};

/// Bounds a failure only: the script's calls take seconds (a session's container starts in
/// about a second), more on a slow or busy machine.
const WITHIN: Duration = Duration::from_secs(600);

/// The Python with the `mcp` package: scripts/test installs it into `.cluster/venv`.
fn python() -> PathBuf {
    let python = tests::root().join(".cluster/venv/bin/python");
    let found = std::process::Command::new(&python)
        .args(["-c", "import mcp"])
        .stdin(Stdio::null())
        .output();
    assert!(
        found.as_ref().is_ok_and(|o| o.status.success()),
        "no {} with the `mcp` package: run scripts/test once, or `python3 -m venv .cluster/venv && \
         .cluster/venv/bin/pip install 'mcp>=2.3,<3'` ({found:?})",
        python.display()
    );
    python
}

/// `tests/mcp/mcp_client.py ARGS`; its output, which must be a success.
async fn client(args: &[&str]) -> String {
    let script = tests::root().join("tests/mcp/mcp_client.py");
    let child = tokio::process::Command::new(python())
        .arg(&script)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the MCP client starts");
    let output = tokio::time::timeout(WITHIN, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("the MCP client {args:?} did not finish within {WITHIN:?}"))
        .expect("the MCP client's output");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    println!("{stdout}");
    assert!(
        output.status.success(),
        "the MCP client {args:?} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// A coordinator and a worker of a cluster with the keys of tenants `acme` and `globex`.
async fn cluster() -> (Cluster, Process, Process) {
    // run_code waits for its verdict as long as POST /v1/executions does: long enough for a
    // slow machine, and within the MCP client's 300 s for an answer.
    let cluster = Cluster::new()
        .with_coordinator_wait(Duration::from_secs(240))
        .with_env("CODEGEN__COORDINATOR__API_KEYS__ACME", "key-acme")
        .with_env("CODEGEN__COORDINATOR__API_KEYS__GLOBEX", "key-globex");
    let coordinator = cluster.coordinator().await;
    let (worker, _) = cluster.worker("worker").await;
    (cluster, coordinator, worker)
}

/// The ids of the executions `key`'s tenant lists.
async fn executions_of(cluster: &Cluster, key: &str) -> Vec<Value> {
    let response = cluster
        .http
        .get(format!("{}/v1/executions?limit=100", cluster.url()))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let listing: Value = response.json().await.unwrap();
    listing["executions"].as_array().unwrap().clone()
}

#[tokio::test]
async fn the_tools_over_streamable_http_each_tenant_its_own() {
    let (cluster, _coordinator, _worker) = cluster().await;
    let out = client(&["http", &cluster.url(), "key-acme", "key-globex"]).await;
    for check in [
        "ok: 8 tools listed",
        "ok: run_code python printed 42",
        "ok: run_cell set x, and the next cell read it (value 40)",
        "ok: write_file (text and base64), read_file (text and binary) and list_files",
        "ok: the other tenant's client gets not_found for the session, which lives on",
        "ok: close_session ended it",
        "ok: a handshake-era client (initialize) lists the tools and runs code",
        "ok: no key or a wrong key: 401",
    ] {
        assert!(out.contains(check), "{check:?} missing:\n{out}");
    }
    // Both ways in: the protocol without a handshake, and the initialize handshake of the
    // versions before it.
    assert!(out.contains("(protocol 2026-07-28)"), "{out}");
    assert!(out.contains("runs code (protocol 2025-"), "{out}");
    // The programs ran as POST /v1/executions runs them: acme's, listed for acme alone.
    let acme = executions_of(&cluster, "key-acme").await;
    assert_eq!(
        acme.len(),
        3,
        "run_code's executions (python twice, bash): {acme:?}"
    );
    assert!(executions_of(&cluster, "key-globex").await.is_empty());
    let metrics = tests::metrics_text(&cluster.http, &cluster.url()).await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("codegen_executions_submitted_total{")
                && l.contains("route=\"/mcp\"")),
        "executions counted under route /mcp:\n{metrics}"
    );
}

#[tokio::test]
async fn codegen_mcp_serves_the_tools_over_stdio() {
    let (cluster, _coordinator, _worker) = cluster().await;
    let codegen = tests::binary();
    let out = client(&[
        "stdio",
        codegen.to_str().unwrap(),
        &cluster.url(),
        "key-acme",
    ])
    .await;
    assert!(
        out.contains("ok: codegen mcp over stdio: the tools listed, run_code printed"),
        "{out}"
    );
    assert_eq!(executions_of(&cluster, "key-acme").await.len(), 1);
}
