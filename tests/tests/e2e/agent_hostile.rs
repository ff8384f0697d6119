//! An agent's tool calls are hostile code like any other (real Docker): the hostile suite's
//! programs issued as `run_shell` calls are contained as executions are (a fork bomb by the
//! pids limit, a memory bomb by the memory limit, no network), the file tools cannot leave
//! the working directory (absolute paths, `..`, symbolic links), nothing a command starts
//! outlives it, and a tenant sees none of
//! another's runs, transcripts or sessions. The bombs run only after the run's first call has
//! shown the test the limits of the very container they run in.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tests::Cluster;

use crate::agent::{WITHIN, recorded, script, session_containers};

/// A step that makes one call.
fn call(name: &str, arguments: Value) -> Value {
    json!({"tool_calls": [crate::agent::call(name, arguments)]})
}

/// What the first call prints: the container's pids and memory limits, the uid, the
/// effective capabilities, no_new_privs, and the network interfaces.
const PROBE: &str = "echo pids=$(cat /sys/fs/cgroup/pids/pids.max); \
    echo memory=$(( $(cat /sys/fs/cgroup/memory/memory.limit_in_bytes) >> 20 )); \
    echo uid=$(id -u); \
    grep -E '^(CapEff|NoNewPrivs)' /proc/self/status | sed 's/:[[:space:]]*/=/'; \
    echo net=$(ls /sys/class/net | tr '\\n' ,)";

fn field<'a>(probe: &'a str, name: &str) -> &'a str {
    probe
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("the probe says nothing of {name}: {probe}"))
        .trim()
}

#[tokio::test]
async fn hostile_calls_are_contained_and_the_files_stay_inside_and_tenants_apart() {
    let dir = tempfile::tempdir().unwrap();
    let steps = vec![
        call("run_shell", json!({"command": PROBE})),
        // Held until the test has read the probe.
        call(
            "run_shell",
            json!({"command": "while [ ! -f /tmp/go ]; do sleep 0.1; done; timeout 10 bash -c 'b(){ b|b& }; b'; echo after the fork bomb", "timeout_ms": 3_600_000}),
        ),
        call(
            "run_shell",
            json!({"command": "python3 -c 'a = []\nwhile True: a.append(bytearray(64 << 20))'; echo exit=$?"}),
        ),
        call(
            "run_shell",
            json!({"command": "python3 -c \"import socket; socket.create_connection(('10.255.255.1', 80), timeout=3)\" 2>&1 | tail -1"}),
        ),
        call("read_file", json!({"path": "../../etc/passwd"})),
        call("read_file", json!({"path": "/etc/passwd"})),
        call(
            "run_shell",
            json!({"command": "ln -s /etc/passwd link && ln -s / everything && echo linked"}),
        ),
        call("read_file", json!({"path": "link"})),
        call(
            "write_file",
            json!({"path": "everything/tmp/planted", "content": "x"}),
        ),
        call(
            "edit_file",
            json!({"path": "link", "old": "root", "new": "toor"}),
        ),
        // Left running in the background, in and out of its process group.
        call(
            "run_shell",
            json!({"command": "nohup sleep 1000 >/dev/null 2>&1 & setsid sleep 1000 & echo started"}),
        ),
        call(
            "run_shell",
            json!({"command": "echo alive; ls /tmp/planted 2>&1; echo left=$(grep -la '[1]000' /proc/[0-9]*/cmdline 2>/dev/null | wc -l)"}),
        ),
        call(
            "finish",
            json!({"answer": "done", "files": ["link", "../outside", "/etc/hostname"]}),
        ),
    ];
    let path = script(dir.path(), steps);
    let mut cluster = Cluster::new()
        .with_env("CODEGEN__COORDINATOR__API_KEYS__ACME", "key-acme")
        .with_env("CODEGEN__COORDINATOR__API_KEYS__GLOBEX", "key-globex");
    let _model = cluster.scripted_model(&path).await;
    let _coordinator = cluster.coordinator().await;
    let _worker = cluster.worker("worker-1").await;
    let base = cluster.url();
    let (status, _, body) = cluster
        .request_as(
            reqwest::Method::POST,
            &format!("{base}/v1/jobs"),
            "key-acme",
            Some(
                json!({"instruction": "Try everything.", "mode": "agent", "language": "python",
                        "agent": {"max_steps": 20}}),
            ),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let id = body["job_id"].as_str().unwrap().to_owned();

    // The probe, read where the run records its steps.
    let probe = wait_observation(&cluster, &id, 0).await;
    let pids: u64 = field(&probe, "pids").parse().unwrap_or(u64::MAX);
    let memory: u64 = field(&probe, "memory").parse().unwrap();
    assert!(
        pids > 0 && pids <= 1024,
        "refusing to run a fork bomb: {probe}"
    );
    assert!(memory <= 4096, "refusing to run a memory bomb: {probe}");
    assert_ne!(
        field(&probe, "uid"),
        "0",
        "refusing: the calls run as root: {probe}"
    );
    assert_eq!(field(&probe, "CapEff"), "0000000000000000", "{probe}");
    assert_eq!(field(&probe, "NoNewPrivs"), "1", "{probe}");
    assert_eq!(
        field(&probe, "net"),
        "lo,",
        "no network but loopback: {probe}"
    );
    // Confirmed: release the bombs in that container.
    let containers = session_containers(&id);
    assert_eq!(containers.len(), 1, "{containers:?}");
    let touched = std::process::Command::new("docker")
        .args(["exec", &containers[0], "touch", "/tmp/go"])
        .output()
        .unwrap();
    assert!(touched.status.success(), "{touched:?}");

    let result = cluster.wait_ended_as(&id, "key-acme").await;
    assert_eq!(result["status"], "succeeded", "{result:#}");
    let observations = observations(&cluster, &id).await;
    let said = |i: usize| observations[i]["content"].as_str().unwrap().to_owned();
    assert!(said(1).contains("after the fork bomb"), "{}", said(1));
    assert!(
        said(2).contains("exit=137"),
        "the memory bomb was killed: {}",
        said(2)
    );
    assert!(
        said(3).contains("unreachable") || said(3).contains("timed out"),
        "no route out: {}",
        said(3)
    );
    assert!(said(4).contains("goes through `..`"), "{}", said(4));
    assert!(said(5).contains("is absolute"), "{}", said(5));
    assert!(said(6).contains("linked"), "{}", said(6));
    for i in [7, 8, 9] {
        assert_eq!(observations[i]["error"], true, "{:#}", observations[i]);
        assert!(!said(i).contains("root:x:0:0"), "{}", said(i));
    }
    assert!(said(10).contains("started"), "{}", said(10));
    assert!(said(11).contains("alive"), "{}", said(11));
    assert!(
        said(11).contains("No such file"),
        "nothing was planted: {}",
        said(11)
    );
    assert!(
        said(11).contains("left=0"),
        "nothing a command started outlived it: {}",
        said(11)
    );
    let agent = &result["agent"];
    assert_eq!(agent["files"], json!({}), "{agent:#}");
    for path in ["link", "../outside", "/etc/hostname"] {
        assert!(agent["missing"][path].is_string(), "{path}: {agent:#}");
    }

    // Another tenant sees nothing of it.
    for path in [
        format!("/v1/jobs/{id}"),
        format!("/v1/jobs/{id}/transcript"),
        format!("/v1/sessions/{id}"),
    ] {
        let (status, _, body) = cluster
            .request_as(
                reqwest::Method::GET,
                &format!("{base}{path}"),
                "key-globex",
                None,
            )
            .await;
        assert_eq!(status, 404, "{path}: {body}");
    }
    let (status, _, _) = cluster
        .request_as(
            reqwest::Method::GET,
            &format!("{base}/v1/jobs/{id}/transcript"),
            "key-acme",
            None,
        )
        .await;
    assert_eq!(status, 200);
    cluster.cleanup().await;
}

async fn observations(cluster: &Cluster, id: &str) -> Vec<Value> {
    recorded(cluster, id)
        .await
        .into_iter()
        .filter(|s| s["kind"] == "observation")
        .collect()
}

/// The content of the run's observation `n` (from 0), once it is recorded.
async fn wait_observation(cluster: &Cluster, id: &str, n: usize) -> String {
    let deadline = Instant::now() + WITHIN;
    loop {
        if let Some(o) = observations(cluster, id).await.get(n) {
            return o["content"].as_str().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "no observation {n}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
