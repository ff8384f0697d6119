//! The web console (`GET /console`, docs/console.md): served without a key under a strict
//! Content-Security-Policy, and driven in a real headless browser (Debian's `chromium`, by
//! Playwright from PyPI: tests/console/) against a coordinator and a worker with three
//! tenants' keys and a scripted (FAKE) model: a job and a batch submitted and watched to their
//! end in the page, programs run in the playground, a session's cells, the usage, and one
//! tenant's console showing none of another's work. Screenshots of every page go to
//! `.cluster/logs/console/`.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tests::Cluster;

/// The browser: Debian's package, never one Playwright downloads.
fn chromium() -> PathBuf {
    let path = std::env::var_os("CODEGEN_TEST_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    assert!(
        path.exists(),
        "{} not found: the console's browser test needs Debian's chromium \
         (`apt-get install -y chromium`), or CODEGEN_TEST_CHROMIUM naming another",
        path.display()
    );
    path
}

/// The Python of `.cluster/console-venv`, with Playwright: `tests/console/setup` makes it when
/// it is missing (pip, from PyPI).
fn playwright_python() -> PathBuf {
    let setup = tests::root().join("tests/console/setup");
    let output = Command::new(&setup)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", setup.display()));
    assert!(
        output.status.success(),
        "no Python venv with Playwright for the console's browser test, and `tests/console/setup` \
         could not make one (it runs `python3 -m venv .cluster/console-venv` and \
         `.cluster/console-venv/bin/pip install playwright`):\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    tests::root().join(".cluster/console-venv/bin/python")
}

#[tokio::test]
async fn the_console_is_served_without_a_key_under_a_strict_policy() {
    let cluster = Cluster::new().with_env("CODEGEN__COORDINATOR__API_KEYS__ACME", "key-acme");
    let _coordinator = cluster.coordinator().await;
    for (path, media_type) in [
        ("/console", "text/html"),
        ("/console/", "text/html"),
        ("/console/console.js", "text/javascript"),
        ("/console/console.css", "text/css"),
    ] {
        let response = cluster
            .http
            .get(format!("{}{path}", cluster.url()))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let headers = response.headers();
        let header = |name: &str| headers[name].to_str().unwrap().to_owned();
        assert!(
            header("content-type").starts_with(media_type),
            "{path}: {headers:?}"
        );
        assert_eq!(header("x-content-type-options"), "nosniff", "{path}");
        let policy = header("content-security-policy");
        for directive in [
            "default-src 'none'",
            "script-src 'self'",
            "connect-src 'self'",
        ] {
            assert!(policy.contains(directive), "{path}: {policy}");
        }
        assert!(!policy.contains("unsafe-inline"), "{policy}");
    }
    let missing = cluster
        .http
        .get(format!("{}/console/missing.js", cluster.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    // The page holds no data: the API still wants the key.
    let (status, body) =
        tests::get_json(&cluster.http, &format!("{}/v1/jobs", cluster.url())).await;
    assert_eq!(status, 401, "{body}");
    // And it is not part of the API's document.
    let (_, doc) = tests::get_json(&cluster.http, &format!("{}/openapi.json", cluster.url())).await;
    assert!(
        doc["paths"]
            .as_object()
            .unwrap()
            .keys()
            .all(|p| !p.starts_with("/console")),
        "the console is in /openapi.json"
    );
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_browser_drives_the_console_and_each_tenant_sees_only_its_own_work() {
    let chromium = chromium();
    let python = playwright_python();
    let dir = tempfile::tempdir().unwrap();
    let script = tests::slow_scripted_model(dir.path(), 700);
    let cluster = Cluster::new()
        .with_env("CODEGEN__MODEL__PROVIDER", "scripted")
        .with_env("CODEGEN__MODEL__SCRIPT_FILE", script.to_str().unwrap())
        .with_env("CODEGEN__COORDINATOR__API_KEYS__ACME", "key-acme")
        .with_env("CODEGEN__COORDINATOR__API_KEYS__GLOBEX", "key-globex")
        .with_env("CODEGEN__COORDINATOR__API_KEYS__SLOW", "key-slow")
        .with_env(
            "CODEGEN__COORDINATOR__TENANTS__SLOW__REQUESTS_PER_SECOND",
            "1",
        );
    let coordinator = cluster.coordinator().await;
    let (worker, _) = cluster.worker("worker").await;

    let out = tests::root().join(".cluster/logs/console");
    std::fs::create_dir_all(&out).unwrap();
    for old in std::fs::read_dir(&out).unwrap().flatten() {
        if old.path().extension().is_some_and(|e| e == "png") {
            let _ = std::fs::remove_file(old.path());
        }
    }
    let run = tokio::process::Command::new(&python)
        .arg(tests::root().join("tests/console/console_test.py"))
        .args(["--url", &cluster.url()])
        .args(["--key-a", "key-acme", "--key-b", "key-globex"])
        .args(["--tenant-b", "globex", "--key-slow", "key-slow"])
        .arg("--out")
        .arg(&out)
        .arg("--chromium")
        .arg(&chromium)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the console test script starts");
    // Minutes here; a slow machine may take many more. Only a failure waits it out.
    let output = tokio::time::timeout(Duration::from_secs(1800), run.wait_with_output())
        .await
        .expect("the console test script finished within 30 minutes")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    let summary: Value = stdout
        .lines()
        .last()
        .and_then(|line| serde_json::from_str(line).ok())
        .unwrap_or(Value::Null);
    assert!(
        output.status.success() && summary["failed"] == 0,
        "the console's browser checks failed (screenshots in {}):\n{stdout}\n{stderr}\n\
         --- coordinator log\n{}\n--- worker log\n{}",
        out.display(),
        coordinator.log_text(),
        worker.log_text()
    );
    assert!(summary["passed"].as_u64().unwrap_or(0) >= 13, "{summary}");
    for page in [
        "docs",
        "jobs",
        "job",
        "batches",
        "batch",
        "executions",
        "execution",
        "playground",
        "sessions",
        "session",
        "session-ended",
        "usage",
        "error-401",
        "error-429",
        "tenant-b-jobs",
    ] {
        assert!(
            out.join(format!("{page}.png")).exists(),
            "no screenshot of {page}"
        );
    }
    cluster.cleanup().await;
}
