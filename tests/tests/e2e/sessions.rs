//! Stateful sessions across the cluster (real RabbitMQ, Redis, Docker): state that persists
//! between cells called through different coordinators, calls queued one at a time, files in
//! and out byte for byte, each tenant's own sessions and quota, a hostile cell that kills its
//! own session and nothing else, a lost worker's sessions answered as lost, and nothing left
//! behind (containers, live records) after a delete, an idle timeout or a worker's death.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tests::{Cluster, Process};

/// Bounds a failure only: a session's container starts in about a second, more on a slow or
/// busy machine.
pub(crate) const WITHIN: Duration = Duration::from_secs(300);

/// A coordinator and a worker of a cluster whose sessions idle out after `idle` seconds when
/// they ask for no timeout of their own.
pub(crate) async fn cluster_with(env: &[(&str, &str)]) -> (Cluster, Process, Process, String) {
    let mut cluster =
        Cluster::new().with_env("CODEGEN__COORDINATOR__SESSIONS__CHECK_INTERVAL", "1s");
    for (key, value) in env {
        cluster = cluster.with_env(key, value);
    }
    let coordinator = cluster.coordinator().await;
    let (worker, ops) = cluster.worker("worker").await;
    (cluster, coordinator, worker, ops)
}

pub(crate) async fn call(
    cluster: &Cluster,
    method: reqwest::Method,
    url: String,
    key: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = cluster.http.request(method, url);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("the coordinator answers");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Opens a session through `base` (retrying while no worker has announced itself yet).
pub(crate) async fn open(
    cluster: &Cluster,
    base: &str,
    key: Option<&str>,
    body: Value,
) -> (u16, Value) {
    let deadline = Instant::now() + WITHIN;
    loop {
        let (status, answer) = call(
            cluster,
            reqwest::Method::POST,
            format!("{base}/v1/sessions"),
            key,
            Some(body.clone()),
        )
        .await;
        if status == 503 && answer["code"] == "no_session_host" && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        return (status, answer);
    }
}

pub(crate) async fn run(
    cluster: &Cluster,
    base: &str,
    key: Option<&str>,
    id: &str,
    code: &str,
) -> (u16, Value) {
    call(
        cluster,
        reqwest::Method::POST,
        format!("{base}/v1/sessions/{id}/run"),
        key,
        Some(json!({"code": code})),
    )
    .await
}

/// A call's answer is the 409 `session_ended`: the session it named had ended (or the call
/// ended it).
#[track_caller]
pub(crate) fn assert_session_ended(status: u16, answer: &Value) {
    assert_eq!(
        (status, answer["code"].as_str()),
        (409, Some("session_ended")),
        "{answer}"
    );
}

#[tokio::test]
async fn names_imports_open_files_and_the_working_directory_persist_across_coordinators() {
    let (cluster, _coordinator, _worker, _) = cluster_with(&[]).await;
    let (_other, other) = cluster.another_coordinator("coordinator-2").await;
    let first = cluster.url();
    let (status, session) = open(&cluster, &first, None, json!({"language": "python"})).await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();
    assert_eq!(session["state"], "live");
    assert_eq!(
        tests::session_containers(&id).len(),
        1,
        "a container of its own"
    );

    // Each cell through the other coordinator than the one before.
    let cells = [
        (
            first.as_str(),
            "import math\nx = 41\nlog = open('log.txt', 'w')\nimport os\nos.makedirs('sub', exist_ok=True)\nos.chdir('sub')",
        ),
        (
            other.as_str(),
            "log.write('kept open\\n')\nlog.flush()\nprint(math.pi > 3, os.getcwd())",
        ),
        (first.as_str(), "def twice(v):\n    return 2 * v\nx + 1"),
        (other.as_str(), "twice(x)"),
    ];
    let mut answers = Vec::new();
    for (base, code) in cells {
        let (status, result) = run(&cluster, base, None, &id, code).await;
        assert_eq!(status, 200, "{code}: {result}");
        assert_eq!(result["status"], "ok", "{code}: {result}");
        answers.push(result);
    }
    assert_eq!(answers[1]["stdout"], "True /work/sub\n", "{}", answers[1]);
    assert_eq!(answers[2]["value"], "42");
    assert_eq!(answers[3]["value"], "82");
    assert!(
        answers[0]["files_changed"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "log.txt"),
        "{}",
        answers[0]
    );

    // An error is the cell's; the session goes on with what it had.
    let (status, failed) = run(&cluster, &other, None, &id, "1 / 0").await;
    assert_eq!(status, 200);
    assert_eq!(failed["status"], "error", "{failed}");
    assert_eq!(failed["error"]["type"], "ZeroDivisionError", "{failed}");
    let (_, still) = run(&cluster, &first, None, &id, "x").await;
    assert_eq!(still["value"], "41", "{still}");

    // Files: in and out byte for byte, listed.
    let bytes: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    let put = cluster
        .http
        .put(format!("{other}/v1/sessions/{id}/files/data/blob.bin"))
        .body(bytes.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 204, "{:?}", put.text().await);
    let (_, read) = run(
        &cluster,
        &first,
        None,
        &id,
        "import hashlib\nhashlib.sha256(open('/work/data/blob.bin', 'rb').read()).hexdigest()",
    )
    .await;
    let expected = format!("'{}'", sha256_hex(&bytes));
    assert_eq!(read["value"], expected.as_str(), "{read}");
    let got = cluster
        .http
        .get(format!("{first}/v1/sessions/{id}/files/data/blob.bin"))
        .send()
        .await
        .unwrap();
    assert_eq!(got.status(), 200);
    assert_eq!(got.bytes().await.unwrap().as_ref(), bytes.as_slice());
    let (status, listing) = call(
        &cluster,
        reqwest::Method::GET,
        format!("{other}/v1/sessions/{id}/files"),
        None,
        None,
    )
    .await;
    assert_eq!(status, 200, "{listing}");
    let paths: Vec<&str> = listing["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert!(
        paths.contains(&"data/blob.bin") && paths.contains(&"log.txt"),
        "{listing}"
    );
    let escape = cluster
        .http
        .get(format!(
            "{first}/v1/sessions/{id}/files/..%2F..%2Fetc%2Fpasswd"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(escape.status(), 422, "a path out of the working directory");
    let (_, linked) = run(
        &cluster,
        &other,
        None,
        &id,
        "os.symlink('/etc/passwd', '/work/link')",
    )
    .await;
    assert_eq!(linked["status"], "ok", "{linked}");
    let through = cluster
        .http
        .get(format!("{first}/v1/sessions/{id}/files/link"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        through.status(),
        422,
        "a symlink out of the working directory"
    );
    let (_, alive) = run(&cluster, &first, None, &id, "x").await;
    assert_eq!(
        alive["value"], "41",
        "refused paths leave the session as it was: {alive}"
    );

    // The view counts the cells; the listing has it; a delete ends it and removes everything.
    let (_, view) = call(
        &cluster,
        reqwest::Method::GET,
        format!("{other}/v1/sessions/{id}"),
        None,
        None,
    )
    .await;
    assert_eq!(view["cells"], 9, "{view}");
    let (_, list) = call(
        &cluster,
        reqwest::Method::GET,
        format!("{first}/v1/sessions"),
        None,
        None,
    )
    .await;
    assert!(
        list["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["id"] == id.as_str()),
        "{list}"
    );
    let (status, deleted) = call(
        &cluster,
        reqwest::Method::DELETE,
        format!("{other}/v1/sessions/{id}"),
        None,
        None,
    )
    .await;
    assert_eq!(
        (
            status,
            deleted["state"].as_str(),
            deleted["ended_by"].as_str()
        ),
        (200, Some("ended"), Some("deleted")),
        "{deleted}"
    );
    let (status, gone) = run(&cluster, &first, None, &id, "x").await;
    assert_session_ended(status, &gone);
    tests::wait_session_containers_gone(&id).await;
    cluster.cleanup().await;
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

#[tokio::test]
async fn concurrent_calls_on_one_session_run_one_at_a_time_in_turn() {
    let (cluster, _coordinator, _worker, _) = cluster_with(&[]).await;
    let base = cluster.url();
    let (status, session) = open(&cluster, &base, None, json!({"language": "python"})).await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();
    let (_, ready) = run(&cluster, &base, None, &id, "import time\nevents = []").await;
    assert_eq!(ready["status"], "ok", "{ready}");
    // Eight cells at once, each marking its start and end around a pause: run one at a time,
    // every start is followed by its own end.
    let calls: Vec<_> = (0..8)
        .map(|n| {
            let (cluster_http, base, id) = (cluster.http.clone(), base.clone(), id.clone());
            tokio::spawn(async move {
                let code = format!(
                    "events.append(('start', {n}))\ntime.sleep(0.05)\nevents.append(('end', {n}))"
                );
                cluster_http
                    .post(format!("{base}/v1/sessions/{id}/run"))
                    .json(&json!({"code": code}))
                    .send()
                    .await
                    .unwrap()
                    .json::<Value>()
                    .await
                    .unwrap()
            })
        })
        .collect();
    for call in calls {
        let result = call.await.unwrap();
        assert_eq!(result["status"], "ok", "{result}");
    }
    let (_, events) = run(&cluster, &base, None, &id, "events").await;
    let text = events["value"].as_str().unwrap().to_owned();
    let pairs: Vec<(String, u32)> = text
        .trim_matches(['[', ']'])
        .split("), (")
        .map(|e| {
            let e = e.trim_matches(['(', ')']);
            let (kind, n) = e.split_once(", ").unwrap();
            (kind.trim_matches('\'').to_owned(), n.parse().unwrap())
        })
        .collect();
    assert_eq!(pairs.len(), 16, "{text}");
    for chunk in pairs.chunks(2) {
        assert_eq!(chunk[0].0, "start", "{text}");
        assert_eq!(
            chunk[1],
            ("end".to_owned(), chunk[0].1),
            "interleaved: {text}"
        );
    }
    cluster.cleanup().await;
}

/// When the engine created and started a container (`docker inspect`).
fn created_and_started(container: &str) -> (time::OffsetDateTime, time::OffsetDateTime) {
    let output = std::process::Command::new("docker")
        .args([
            "inspect",
            "--format",
            "{{.Created}} {{.State.StartedAt}}",
            container,
        ])
        .output()
        .expect("docker CLI");
    let text = String::from_utf8_lossy(&output.stdout);
    let parse = |s: &str| {
        time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
            .unwrap_or_else(|e| panic!("{s}: {e}"))
    };
    let (created, started) = text.trim().split_once(' ').expect("two times");
    (parse(created), parse(started))
}

#[tokio::test]
async fn a_worker_starts_its_session_containers_max_opening_at_a_time_in_turn() {
    let (cluster, _coordinator, _worker, _) =
        cluster_with(&[("CODEGEN__WORKER__SESSIONS__MAX_OPENING", "1")]).await;
    let base = cluster.url();
    // Wait for the worker's announcement, so the four below reach it together.
    let (status, first) = open(&cluster, &base, None, json!({"language": "python"})).await;
    assert_eq!(status, 201, "{first}");
    let opens: Vec<_> = (0..4)
        .map(|_| {
            let (http, base) = (cluster.http.clone(), base.clone());
            tokio::spawn(async move {
                let response = http
                    .post(format!("{base}/v1/sessions"))
                    .json(&json!({"language": "python"}))
                    .send()
                    .await
                    .unwrap();
                (
                    response.status().as_u16(),
                    response.json::<Value>().await.unwrap(),
                )
            })
        })
        .collect();
    let mut times = Vec::new();
    for open in opens {
        let (status, session) = open.await.unwrap();
        assert_eq!(
            status, 201,
            "every open waits its turn and opens: {session}"
        );
        let id = session["id"].as_str().unwrap();
        let containers = tests::session_containers(id);
        assert_eq!(containers.len(), 1, "{id}: {containers:?}");
        times.push(created_and_started(&containers[0]));
        let (_, ran) = run(&cluster, &base, None, id, "1 + 1").await;
        assert_eq!(ran["value"], "2", "{ran}");
    }
    // One at a time: each container was created only after the one before it had started.
    times.sort();
    for pair in times.windows(2) {
        assert!(
            pair[1].0 > pair[0].1,
            "a container was created while another was starting: {times:?}"
        );
    }
    cluster.cleanup().await;
}

#[tokio::test]
async fn bash_and_javascript_sessions_keep_their_state() {
    let (cluster, _coordinator, _worker, _) = cluster_with(&[]).await;
    let base = cluster.url();
    let (status, bash) = open(&cluster, &base, None, json!({"language": "bash"})).await;
    assert_eq!(status, 201, "{bash}");
    let bash = bash["id"].as_str().unwrap().to_owned();
    let (_, first) = run(
        &cluster,
        &base,
        None,
        &bash,
        "greet() { echo \"hi $1\"; }\nN=7\ncd /tmp",
    )
    .await;
    assert_eq!(first["status"], "ok", "{first}");
    let (_, second) = run(&cluster, &base, None, &bash, "greet $N; pwd").await;
    assert_eq!(second["stdout"], "hi 7\n/tmp\n", "{second}");
    let (_, failed) = run(&cluster, &base, None, &bash, "false").await;
    assert_eq!(
        (failed["status"].as_str(), failed["exit_code"].as_i64()),
        (Some("error"), Some(1)),
        "{failed}"
    );

    let (status, js) = open(&cluster, &base, None, json!({"language": "javascript"})).await;
    assert_eq!(status, 201, "{js}");
    let js = js["id"].as_str().unwrap().to_owned();
    let (_, first) = run(
        &cluster,
        &base,
        None,
        &js,
        "const xs = [1, 2, 3];\nfunction sum(a) { return a.reduce((p, q) => p + q, 0); }",
    )
    .await;
    assert_eq!(first["status"], "ok", "{first}");
    let (_, second) = run(&cluster, &base, None, &js, "sum(xs) * 2").await;
    assert_eq!(second["value"], "12", "{second}");
    let (_, awaited) = run(&cluster, &base, None, &js, "Promise.resolve(sum(xs) + 1)").await;
    assert_eq!(awaited["value"], "7", "{awaited}");
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_tenant_sees_only_its_own_sessions_and_its_quota_is_named() {
    let (cluster, _coordinator, _worker, _) = cluster_with(&[
        ("CODEGEN__COORDINATOR__API_KEYS__ACME", "k-acme"),
        ("CODEGEN__COORDINATOR__API_KEYS__GLOBEX", "k-globex"),
        ("CODEGEN__COORDINATOR__TENANT_DEFAULTS__SESSIONS", "1"),
    ])
    .await;
    let base = cluster.url();
    let (status, mine) = open(
        &cluster,
        &base,
        Some("k-acme"),
        json!({"language": "python"}),
    )
    .await;
    assert_eq!(status, 201, "{mine}");
    let id = mine["id"].as_str().unwrap().to_owned();
    let (status, secret) = run(&cluster, &base, Some("k-acme"), &id, "secret = 'acme only'").await;
    assert_eq!(status, 200, "{secret}");

    // The other tenant cannot see, call, read or end it.
    for (method, path) in [
        (reqwest::Method::GET, format!("/v1/sessions/{id}")),
        (reqwest::Method::POST, format!("/v1/sessions/{id}/run")),
        (reqwest::Method::GET, format!("/v1/sessions/{id}/files")),
        (reqwest::Method::DELETE, format!("/v1/sessions/{id}")),
    ] {
        let body = (method == reqwest::Method::POST).then(|| json!({"code": "secret"}));
        let (status, answer) = call(
            &cluster,
            method.clone(),
            format!("{base}{path}"),
            Some("k-globex"),
            body,
        )
        .await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (404, Some("not_found")),
            "{method} {path}: {answer}"
        );
    }
    let (_, theirs) = call(
        &cluster,
        reqwest::Method::GET,
        format!("{base}/v1/sessions"),
        Some("k-globex"),
        None,
    )
    .await;
    assert_eq!(theirs["sessions"], json!([]), "{theirs}");

    // A second live session is over the quota of one: 429 naming the setting, nothing opened.
    let (status, over) = open(
        &cluster,
        &base,
        Some("k-acme"),
        json!({"language": "python"}),
    )
    .await;
    assert_eq!(status, 429, "{over}");
    assert_eq!(over["code"], "quota_exceeded");
    assert_eq!(over["limit"], "coordinator.tenant_defaults.sessions");
    // Bad requests name their field.
    let (status, bad) = open(&cluster, &base, Some("k-globex"), json!({"language": "go"})).await;
    assert_eq!(
        (status, bad["param"].as_str()),
        (422, Some("language")),
        "{bad}"
    );
    let (status, bad) = open(
        &cluster,
        &base,
        Some("k-globex"),
        json!({"language": "python", "memory_mb": 1_000_000}),
    )
    .await;
    assert_eq!(
        (status, bad["param"].as_str()),
        (422, Some("memory_mb")),
        "{bad}"
    );
    // Once it ends, the quota has room again.
    let (status, _) = call(
        &cluster,
        reqwest::Method::DELETE,
        format!("{base}/v1/sessions/{id}"),
        Some("k-acme"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let (status, again) = open(
        &cluster,
        &base,
        Some("k-acme"),
        json!({"language": "python"}),
    )
    .await;
    assert_eq!(status, 201, "{again}");
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_memory_bomb_or_a_cell_that_ignores_its_deadline_ends_only_its_own_session() {
    let (cluster, _coordinator, _worker, worker_ops) = cluster_with(&[]).await;
    let base = cluster.url();
    let (_, bystander) = open(&cluster, &base, None, json!({"language": "python"})).await;
    let bystander = bystander["id"].as_str().unwrap().to_owned();
    let (_, kept) = run(&cluster, &base, None, &bystander, "kept = 'still here'").await;
    assert_eq!(kept["status"], "ok", "{kept}");

    // Memory: the container's limit (confirmed first from inside) kills the kernel.
    let (status, session) = open(
        &cluster,
        &base,
        None,
        json!({"language": "python", "memory_mb": 128}),
    )
    .await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();
    let (_, limit) = run(
        &cluster,
        &base,
        None,
        &id,
        "int(open('/sys/fs/cgroup/memory/memory.limit_in_bytes').read()) // (1 << 20)",
    )
    .await;
    let limit_mb: u64 = limit["value"].as_str().unwrap().parse().unwrap();
    assert!(
        limit_mb <= 512,
        "the session's container is limited ({limit_mb} MiB)"
    );
    let (status, bomb) = run(
        &cluster,
        &base,
        None,
        &id,
        "hog = []\nwhile True:\n    hog.append(bytearray(1 << 24))",
    )
    .await;
    assert_session_ended(status, &bomb);
    assert!(bomb["error"].as_str().unwrap().contains("memory"), "{bomb}");
    tests::wait_session_containers_gone(&id).await;
    // The record says what ended it, with the limit.
    let record = session_record(&cluster, &id).await;
    assert_eq!(
        (&record["state"], &record["ended_by"]),
        (&json!("ended"), &json!("memory_limit")),
        "{record}"
    );
    let reason = record["ended_reason"].as_str().unwrap();
    assert!(reason.contains("memory limit of 128 MiB"), "{reason}");

    // A kernel killed by a signal: its session ends naming the signal, not the memory.
    let (_, killed) = open(&cluster, &base, None, json!({"language": "python"})).await;
    let killed = killed["id"].as_str().unwrap().to_owned();
    let (status, answer) = run(
        &cluster,
        &base,
        None,
        &killed,
        "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
    )
    .await;
    assert_session_ended(status, &answer);
    let record = session_record(&cluster, &killed).await;
    assert_eq!(record["ended_by"], "kernel_died", "{record}");
    let reason = record["ended_reason"].as_str().unwrap();
    assert!(
        reason.contains("signal 9") && !reason.contains("memory"),
        "{reason}"
    );
    tests::wait_session_containers_gone(&killed).await;

    // A cell that ignores the interrupt at its deadline: everything of it is killed.
    let (_, stubborn) = open(&cluster, &base, None, json!({"language": "python"})).await;
    let stubborn = stubborn["id"].as_str().unwrap().to_owned();
    let (status, stuck) = call(
        &cluster,
        reqwest::Method::POST,
        format!("{base}/v1/sessions/{stubborn}/run"),
        None,
        Some(json!({"code": "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass", "timeout_ms": 1000})),
    )
    .await;
    assert_session_ended(status, &stuck);
    tests::wait_session_containers_gone(&stubborn).await;

    // A cell past its deadline that stops at the interrupt keeps the session.
    let (_, timed) = call(
        &cluster,
        reqwest::Method::POST,
        format!("{base}/v1/sessions/{bystander}/run"),
        None,
        Some(json!({"code": "while True:\n    pass", "timeout_ms": 1000})),
    )
    .await;
    assert_eq!(timed["status"], "timeout", "{timed}");
    let (_, after) = run(&cluster, &base, None, &bystander, "kept").await;
    assert_eq!(after["value"], "'still here'", "{after}");

    // Each end counted once, by its cause, over the coordinator and the worker (whichever
    // ended it): the bomb at the memory limit; the signal and the stubborn cell otherwise.
    let ended = |reason: &'static str| {
        let (http, pages) = (cluster.http.clone(), [base.clone(), worker_ops.clone()]);
        async move {
            let pages: Vec<&str> = pages.iter().map(String::as_str).collect();
            tests::metric_sum(
                &http,
                &pages,
                "codegen_sessions_ended_total",
                &[("state", "ended"), ("reason", reason)],
            )
            .await
        }
    };
    assert_eq!(ended("memory_limit").await, 1.0);
    assert_eq!(ended("kernel_died").await, 2.0);
    assert_eq!(ended("deleted").await, 0.0);
    cluster.cleanup().await;
}

async fn session_record(cluster: &Cluster, id: &str) -> Value {
    let url = format!("{}/v1/sessions/{id}", cluster.url());
    let (status, record) = call(cluster, reqwest::Method::GET, url, None, None).await;
    assert_eq!(status, 200, "{record}");
    record
}

#[tokio::test]
async fn a_killed_workers_sessions_without_a_checkpoint_are_lost_and_an_idle_one_ends_with_nothing_left_behind()
 {
    // Checkpoints of at most 64 KiB: a session holding more has none to be restored from.
    let (cluster, _coordinator, mut worker, _) =
        cluster_with(&[("CODEGEN__WORKER__SESSIONS__CHECKPOINT_MAX_BYTES", "65536")]).await;
    let base = cluster.url();
    // Idle: ends once its timeout passes with no call, whichever coordinator's sweep finds it.
    let (_, idle) = open(
        &cluster,
        &base,
        None,
        json!({"language": "python", "idle_timeout_s": 1}),
    )
    .await;
    let idle = idle["id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + WITHIN;
    loop {
        let (_, view) = call(
            &cluster,
            reqwest::Method::GET,
            format!("{base}/v1/sessions/{idle}"),
            None,
            None,
        )
        .await;
        if view["state"] == "ended" {
            assert!(
                view["ended_reason"].as_str().unwrap().contains("idle"),
                "{view}"
            );
            assert_eq!(view["ended_by"], "idle", "{view}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the idle session did not end: {view}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tests::wait_session_containers_gone(&idle).await;
    // Its checkpoint (taken when it opened) went with it.
    let mut redis = redis::Client::open(cluster.redis_url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let kept: bool = redis::AsyncCommands::exists(
        &mut redis,
        format!("{}:session:{idle}:checkpoint", cluster.prefix),
    )
    .await
    .unwrap();
    assert!(!kept, "an ended session's checkpoint is left");

    // Each cell's answer says its checkpoint could not be taken, and why.
    let mut ids = Vec::new();
    for _ in 0..3 {
        let (status, session) = open(&cluster, &base, None, json!({"language": "python"})).await;
        assert_eq!(status, 201, "{session}");
        let id = session["id"].as_str().unwrap().to_owned();
        let (_, set) = run(&cluster, &base, None, &id, "state = bytes(200_000)").await;
        assert_eq!(set["status"], "ok", "{set}");
        assert_eq!(set["checkpoint"]["saved"], false, "{set}");
        assert!(
            set["checkpoint"]["error"]
                .as_str()
                .unwrap()
                .contains("checkpoint_max_bytes"),
            "{set}"
        );
        ids.push(id);
    }
    // The worker dies between two cells: the next call says the session is lost and why,
    // never answers from a fresh kernel; its containers go with it.
    worker.signal("KILL");
    worker.wait_exit(Duration::from_secs(60));
    for id in &ids {
        let (status, lost) = run(&cluster, &base, None, id, "state").await;
        assert_eq!(
            (status, lost["code"].as_str()),
            (409, Some("session_lost")),
            "{lost}"
        );
        assert!(
            lost["error"]
                .as_str()
                .unwrap()
                .contains("checkpoint_max_bytes"),
            "{lost}"
        );
        let (_, view) = call(
            &cluster,
            reqwest::Method::GET,
            format!("{base}/v1/sessions/{id}"),
            None,
            None,
        )
        .await;
        assert_eq!(view["state"], "lost", "{view}");
        assert_eq!(view["ended_by"], "worker_lost", "{view}");
        tests::wait_session_containers_gone(id).await;
    }
    cluster.cleanup().await;
}

/// What a session's kernel sees of its container: pids and memory limits, its uid, its
/// effective capabilities and no_new_privs (read before any bomb goes off).
const PROBE: &str = r#"
import os
def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError as e:
        return 'error: %s' % e
status = dict(l.split(':', 1) for l in read('/proc/self/status').splitlines() if ':' in l)
(read('/sys/fs/cgroup/pids/pids.max'), int(read('/sys/fs/cgroup/memory/memory.limit_in_bytes')) >> 20,
 os.getuid(), status['CapEff'].strip(), status['NoNewPrivs'].strip())
"#;

#[tokio::test]
async fn hostile_cells_are_contained_and_no_session_sees_another() {
    let (cluster, _coordinator, worker, _) = cluster_with(&[]).await;
    let base = cluster.url();
    // A neighbour with a secret in its files and its memory.
    let (_, neighbour) = open(&cluster, &base, None, json!({"language": "python"})).await;
    let neighbour = neighbour["id"].as_str().unwrap().to_owned();
    let (_, kept) = run(&cluster, &base, None, &neighbour, "secret = 'n-7f3a'\nopen('/work/secret.txt', 'w').write(secret)\nopen('/tmp/secret.txt', 'w').write(secret)").await;
    assert_eq!(kept["status"], "ok", "{kept}");

    let (status, session) = open(
        &cluster,
        &base,
        None,
        json!({"language": "python", "memory_mb": 256}),
    )
    .await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();
    // The limits, confirmed from inside before anything hostile runs.
    let (_, probe) = run(&cluster, &base, None, &id, PROBE).await;
    let probe = probe["value"].as_str().unwrap().to_owned();
    let fields: Vec<&str> = probe.trim_matches(['(', ')']).split(", ").collect();
    let pids: u64 = fields[0].trim_matches('\'').parse().unwrap_or(u64::MAX);
    let memory_mb: u64 = fields[1].parse().unwrap();
    assert!(
        pids > 0 && pids <= 1024,
        "refusing to run a bomb: pids.max {probe}"
    );
    assert!(memory_mb <= 1024, "refusing to run a bomb: memory {probe}");
    assert!(
        fields[2] != "0" && fields[3] == "'0000000000000000'" && fields[4] == "'1'",
        "refusing to run a bomb: the kernel is privileged: {probe}"
    );

    // Escapes: no network, no other session's files, nothing of the host's processes.
    let escapes = r#"
import os, socket, glob
found = []
for path in ['/work/secret.txt', '/tmp/secret.txt'] + glob.glob('/proc/*/root/work/secret.txt'):
    try:
        found.append(open(path).read())
    except OSError:
        pass
try:
    socket.create_connection(('10.0.0.1', 80), timeout=2)
    net = 'connected'
except OSError as e:
    net = type(e).__name__
try:
    os.setuid(0)
    root = 'became root'
except OSError:
    root = 'refused'
(found, net, root, sorted(os.listdir('/proc'))[:0])
"#;
    let (_, escaped) = run(&cluster, &base, None, &id, escapes).await;
    assert_eq!(escaped["status"], "ok", "{escaped}");
    let value = escaped["value"].as_str().unwrap();
    assert!(
        value.starts_with("([], "),
        "another session's secret was read: {value}"
    );
    assert!(
        !value.contains("'connected'") && value.contains("'refused'"),
        "{value}"
    );

    // A fork bomb: contained by the pids limit, ended at its deadline with everything of the
    // program killed; the neighbour and the worker go on.
    let bomb =
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass";
    let (status, bombed) = call(
        &cluster,
        reqwest::Method::POST,
        format!("{base}/v1/sessions/{id}/run"),
        None,
        Some(json!({"code": bomb, "timeout_ms": 2000})),
    )
    .await;
    assert!(
        (status == 200 && bombed["status"] == "timeout")
            || (status == 409 && bombed["code"] == "session_ended"),
        "{status} {bombed}"
    );
    let (_, after) = run(&cluster, &base, None, &neighbour, "secret").await;
    assert_eq!(
        after["value"], "'n-7f3a'",
        "the neighbour lost its state: {after}"
    );
    let mut worker = worker;
    assert!(
        worker.is_running(),
        "the worker died: {}",
        worker.log_text()
    );
    let (status, fresh) = open(&cluster, &base, None, json!({"language": "bash"})).await;
    assert_eq!(status, 201, "the worker still opens sessions: {fresh}");
    cluster.cleanup().await;
}
