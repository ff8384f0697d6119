//! The web console (`GET /console`, docs/console.md): served without a key under a strict
//! Content-Security-Policy, and driven in a real headless browser (Debian's `chromium`, by
//! Playwright from PyPI: tests/console/) against a coordinator and a worker with three
//! tenants' keys and a scripted (FAKE) model: a job and a batch submitted and watched to their
//! end in the page (its graph and its timeline by worker), programs run in the playground, a
//! session's cells, the usage and its charts, the cluster page for an admin tenant's key only,
//! every page at a phone's width, and one tenant's console showing none of another's work.
//! Screenshots of every page (at 1280 px and at a phone's width) go to
//! `.cluster/logs/console/`. An agent job's page, opened while its run is held at a step,
//! shows its transcript as it grows (every text from the run as text), then its outcome;
//! its screenshots go to `.cluster/logs/console/agent/`.

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
        .with_env("CODEGEN__COORDINATOR__API_KEYS__OPS", "key-ops")
        .with_env("CODEGEN__COORDINATOR__ADMIN_TENANTS", "ops")
        .with_env(
            "CODEGEN__COORDINATOR__TENANTS__SLOW__REQUESTS_PER_SECOND",
            "1",
        );
    let coordinator = cluster.coordinator().await;
    let (worker, _) = cluster.worker("worker").await;
    // The name it announces itself by (codegen's `worker`: host name and process id).
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let worker_name = format!("{}-{}", hostname.trim(), worker.pid());

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
        .args(["--key-ops", "key-ops", "--worker", &worker_name])
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
    assert!(summary["passed"].as_u64().unwrap_or(0) >= 15, "{summary}");
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
        "cluster",
        "phone-jobs",
        "phone-job",
        "phone-usage",
        "phone-cluster",
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

/// The browser half of the agent job's test: opens the job's page while its run is held at
/// its third step, checks the steps shown so far (each as text: the hostile ones too), says so
/// by creating `--release` (the test then lets the held command end), and checks the outcome
/// once the job has ended. Its last line is a JSON summary, as tests/console/console_test.py's.
const AGENT_PAGE_TEST: &str = r##"
import argparse
import json
import re
import sys
import time
import traceback
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

# Each wait only bounds a failure: a slow machine, not a failure, may take minutes.
STEP_MS = 120_000
JOB_WAIT_MS = 600_000
HOSTILE = "<img src=x onerror=alert(1)>"
FINAL = ("succeeded", "failed", "cancelled")

parser = argparse.ArgumentParser()
for name in ("--url", "--key", "--job", "--release", "--out", "--chromium"):
    parser.add_argument(name, required=True)
ARGS = parser.parse_args()
PROBLEMS = []
RESULTS = []


def shot(page, name):
    text = "\n" + page.inner_text("#view") + "\n"
    for stray in ["[object ", "undefined", "\nnull\n", "NaN"]:
        assert stray not in text, f"{name}: the page shows {stray.strip()!r}:\n{text}"
    page.screenshot(path=str(Path(ARGS.out) / f"{name}.png"), full_page=True)


def steps(page, kind=None):
    selector = "#agent-steps > li" + (f"[data-kind='{kind}']" if kind else "")
    return page.locator(selector)


def no_markup_from_the_run(page):
    # Nothing the model or the sandbox wrote became an element.
    assert page.locator("#view img").count() == 0, "an <img> from the run's text is in the page"
    assert page.locator("#view script").count() == 0, "a <script> from the run's text is in the page"


def check_the_transcript_grows_while_the_job_runs(page):
    page.goto(f"{ARGS.url}/console#/usage")
    page.fill("#api-key", ARGS.key)
    page.click("#key-save")
    expect(page.locator("#key-state")).to_have_text("a key is set for this tab")
    page.evaluate("h => { location.hash = h; }", f"#/jobs/{ARGS.job}")
    expect(page.locator("#agent-transcript")).to_be_visible()
    expect(page.locator("#job-progress-section")).to_be_hidden()
    start = steps(page, "start")
    expect(start).to_have_count(1)
    expect(page.locator("#agent-start-model")).to_have_text(re.compile(r".+/.+"))
    expect(page.locator("#agent-start-tools")).to_have_text(re.compile(r"^[1-9][0-9]* tools$"))
    first = page.locator("#agent-steps > li[data-kind='model'][data-step='1']")
    expect(first.locator(".model-text")).to_contain_text("I will write notes")
    expect(first.locator(".agent-call")).to_have_count(3)
    command = first.locator(".agent-call[data-tool='run_shell'] tr[data-argument='command']")
    expect(command).to_contain_text(f"echo '{HOSTILE}'")
    # The run holds at its third step's command until the test lets it go: the page shows the
    # steps so far while the job is still running.
    held = page.locator("#agent-steps > li[data-kind='model'][data-step='3']")
    expect(held.locator("tr[data-argument='command']")).to_contain_text("/tmp/go")
    status = page.locator("#job-status").get_attribute("data-status")
    assert status == "running", f"the job is {status} while its third step's command is held"
    expect(page.locator("#agent-outcome")).to_have_count(0)
    expect(steps(page, "observation")).to_have_count(5)
    expect(page.locator(".observation-content", has_text="released")).to_have_count(0)
    # A failed call is marked; an observation over max_observation_chars says what was cut.
    missing = page.locator("#agent-steps > li[data-kind='observation'][data-tool='read_file']")
    expect(missing).to_have_attribute("data-error", "true")
    expect(missing.locator(".observation-error")).to_have_text("error")
    cut = page.locator("#agent-steps > li[data-kind='observation']", has=page.locator(".observation-cut"))
    expect(cut).to_have_count(1)
    expect(cut.locator(".observation-cut")).to_contain_text(re.compile(r"Cut: [0-9,]+ of [0-9,]+ characters"))
    expect(cut.locator(".observation-content")).to_contain_text("3000")
    expect(page.locator("#agent-transcript-count")).to_have_text("(3 model steps, 5 observations)")
    # A long argument is shown in part, and says how much is left out.
    long = page.locator(".agent-call[data-tool='write_file']", has_text="long.txt")
    expect(long.locator("tr[data-argument='content'] .cut-note")).to_have_text(
        "… 3,000 more characters not shown")
    expect(long.locator("tr[data-argument='content'] pre")).to_have_text("x" * 2000)
    shot(page, "agent-job-running")
    RESULTS.append({"note": f"{steps(page).count()} steps shown while the job was {status}"})


def check_the_runs_text_is_shown_as_text(page):
    echoed = page.locator("#agent-steps > li[data-kind='observation'][data-tool='run_shell']").first
    expect(echoed.locator(".observation-content")).to_contain_text(HOSTILE)
    expect(page.locator("#agent-steps .model-text").first).to_contain_text("<script>alert(2)</script>")
    written = page.locator(".agent-call[data-tool='write_file']", has_text="notes.txt").locator(
        "tr[data-argument='content']")
    expect(written).to_contain_text(HOSTILE)
    no_markup_from_the_run(page)


def check_the_outcome_when_the_job_ends(page):
    expect(page.locator("#job-status")).to_have_attribute("data-status", "succeeded", timeout=JOB_WAIT_MS)
    expect(page.locator("#agent-ended-by")).to_have_text("finished")
    expect(page.locator("#agent-answer")).to_have_text("Done: the notes are written. <script>alert(3)</script>")
    # The held command's observation came, then finish's.
    expect(page.locator(".observation-content", has_text="released")).to_have_count(1)
    expect(steps(page, "model")).to_have_count(4)
    expect(steps(page, "observation")).to_have_count(7)
    expect(steps(page)).to_have_count(12)
    expect(page.locator("#agent-total-steps")).to_have_text("4")
    expect(page.locator("#agent-total-tool-calls")).to_have_text("7")
    expect(page.locator("#agent-total-resumed")).to_have_text("0")
    expect(page.locator("#agent-missing tr[data-file='absent.txt']")).to_have_count(1)
    events = page.locator("#job-events li").evaluate_all("items => items.map(i => i.dataset.event)")
    assert events[-1] == "finished" and events.count("agent_step") == 12, events
    # A file's content is collapsed until opened.
    notes = page.locator("#agent-files details[data-file='notes.txt']")
    expect(notes.locator(".file-content")).to_be_hidden()
    notes.locator("summary").click()
    expect(notes.locator(".file-content")).to_be_visible()
    expect(notes.locator(".file-content")).to_have_text(f"notes {HOSTILE}\nsecond line\n")
    no_markup_from_the_run(page)
    shot(page, "agent-job")
    # Opened again once it has ended: the whole transcript, from the stream's replay.
    page.reload()
    page.wait_for_selector("#view > .page[data-view='jobs'][data-ready]", state="attached")
    expect(steps(page)).to_have_count(12)
    expect(page.locator("#agent-ended-by")).to_have_text("finished")
    expect(page.locator("#job-progress-section")).to_be_hidden()
    no_markup_from_the_run(page)


def main():
    Path(ARGS.out).mkdir(parents=True, exist_ok=True)
    expect.set_options(timeout=STEP_MS)
    passed = failed = 0
    origin = ARGS.url.rstrip("/")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=ARGS.chromium, headless=True,
            args=["--no-sandbox", "--disable-dev-shm-usage"],
        )
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.set_default_timeout(STEP_MS)

        def on_console(message):
            if "Content Security Policy" in message.text or "Refused to" in message.text:
                PROBLEMS.append(f"CSP: {message.text}")

        def on_request(request):
            if not (request.url.startswith(origin + "/") or request.url.startswith("data:")
                    or request.url == "about:blank"):
                PROBLEMS.append(f"a request to another origin: {request.url}")

        def on_dialog(dialog):
            PROBLEMS.append(f"a dialog opened (the run's text ran as script): {dialog.message}")
            dialog.dismiss()

        page.on("console", on_console)
        page.on("pageerror", lambda error: PROBLEMS.append(f"uncaught: {error}"))
        page.on("request", on_request)
        page.on("dialog", on_dialog)
        for check in [check_the_transcript_grows_while_the_job_runs,
                      check_the_runs_text_is_shown_as_text,
                      None,
                      check_the_outcome_when_the_job_ends]:
            if check is None:
                # Whatever the checks above found, the held command may end now.
                Path(ARGS.release).write_text("seen\n")
                continue
            name = check.__name__.removeprefix("check_")
            started = time.monotonic()
            try:
                check(page)
            except Exception as error:  # noqa: BLE001 - every failure is reported
                failed += 1
                detail = "".join(traceback.format_exception_only(type(error), error)).strip()
                print(f"FAIL {name} ({time.monotonic() - started:.1f} s): {detail}", flush=True)
                traceback.print_exc()
                try:
                    page.screenshot(path=str(Path(ARGS.out) / f"failure-{name}.png"), full_page=True)
                except Exception:  # noqa: BLE001 - the page may be gone
                    pass
                RESULTS.append({"check": name, "passed": False, "error": detail})
            else:
                passed += 1
                print(f"PASS {name} ({time.monotonic() - started:.1f} s)", flush=True)
                RESULTS.append({"check": name, "passed": True})
        browser.close()
    if PROBLEMS:
        failed += 1
        print("FAIL browser_problems: " + "; ".join(PROBLEMS), flush=True)
    print(f"{passed} passed, {failed} failed")
    print(json.dumps({"passed": passed, "failed": failed, "results": RESULTS}))
    return 0 if failed == 0 else 1


sys.exit(main())
"##;

/// The checks of [`AGENT_PAGE_TEST`], every one of which must pass.
const AGENT_PAGE_CHECKS: u64 = 3;

fn agent_call(name: &str, arguments: Value) -> Value {
    serde_json::json!({"name": name, "arguments": arguments})
}

/// Lets the held command of agent job `id` end: creates `/tmp/go` in its session's
/// containers. True when it was created in one.
fn release_agent_command(id: &str) -> bool {
    tests::session_containers(id).iter().any(|container| {
        Command::new("docker")
            .args(["exec", container, "touch", "/tmp/go"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

#[tokio::test]
async fn a_browser_watches_an_agent_jobs_transcript_grow_and_sees_its_outcome() {
    use serde_json::json;
    let chromium = chromium();
    let python = playwright_python();
    let dir = tempfile::tempdir().unwrap();
    // Four steps; the third's command waits for a file the test creates only once the page
    // has shown the steps before it: the run cannot end before the browser has seen them.
    let hostile = "<img src=x onerror=alert(1)>";
    let answers: Vec<Value> = vec![
        json!({"text": "I will write notes, echo a tag and read a file that is not there. <script>alert(2)</script>",
               "tool_calls": [
                   agent_call("write_file", json!({"path": "notes.txt", "content": format!("notes {hostile}\nsecond line\n")})),
                   agent_call("run_shell", json!({"command": format!("echo '{hostile}'")})),
                   agent_call("read_file", json!({"path": "absent.txt"})),
               ]}),
        json!({"tool_calls": [
            agent_call("run_shell", json!({"command": "seq 1 3000"})),
            agent_call("write_file", json!({"path": "long.txt", "content": "x".repeat(5000)})),
        ]}),
        json!({"tool_calls": [agent_call("run_shell", json!({
            "command": "while [ ! -f /tmp/go ]; do sleep 0.1; done; echo released",
            "timeout_ms": 3_600_000}))]}),
        json!({"tool_calls": [agent_call("finish", json!({
            "answer": "Done: the notes are written. <script>alert(3)</script>",
            "files": ["notes.txt", "absent.txt"]}))]}),
    ]
    .into_iter()
    .map(|mut answer| {
        answer["phase"] = json!("agent");
        answer
    })
    .collect();
    let script = dir.path().join("agent-model.json");
    std::fs::write(&script, json!({ "answers": answers }).to_string()).unwrap();
    let mut cluster = Cluster::new().with_env("CODEGEN__COORDINATOR__API_KEYS__ACME", "key-acme");
    let _model = cluster.scripted_model(&script).await;
    let coordinator = cluster.coordinator().await;
    let (worker, _) = cluster.worker("worker").await;

    let jobs = format!("{}/v1/jobs", cluster.url());
    let (status, _, accepted) = cluster
        .request_as(
            reqwest::Method::POST,
            &jobs,
            "key-acme",
            Some(json!({
                "instruction": "Write notes, look around, wait for the go-ahead, then finish.",
                "mode": "agent",
                "language": "python",
                "agent": {"max_observation_chars": 1000, "max_seconds": 3600},
            })),
        )
        .await;
    assert_eq!(status, 202, "{accepted}");
    let id = accepted["job_id"].as_str().unwrap().to_owned();

    // Beside the others' screenshots, in a folder of its own (that test clears its folder's).
    let out = tests::root().join(".cluster/logs/console/agent");
    std::fs::create_dir_all(&out).unwrap();
    for old in std::fs::read_dir(&out).unwrap().flatten() {
        let _ = std::fs::remove_file(old.path());
    }
    let page_test = dir.path().join("agent_page_test.py");
    std::fs::write(&page_test, AGENT_PAGE_TEST).unwrap();
    let release = dir.path().join("release");
    let mut run = tokio::process::Command::new(&python)
        .arg(&page_test)
        .args(["--url", &cluster.url(), "--key", "key-acme", "--job", &id])
        .arg("--release")
        .arg(&release)
        .arg("--out")
        .arg(&out)
        .arg("--chromium")
        .arg(&chromium)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the agent page's test script starts");
    let read = |pipe: Option<Box<dyn tokio::io::AsyncRead + Unpin + Send>>| {
        tokio::spawn(async move {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let _ = tokio::io::AsyncReadExt::read_to_string(&mut pipe, &mut text).await;
            }
            text
        })
    };
    let stdout = read(run.stdout.take().map(|p| Box::new(p) as _));
    let stderr = read(run.stderr.take().map(|p| Box::new(p) as _));
    // Until the script ends: once it says the page has shown the first steps, the held
    // command is let go (the job must still be running then). Minutes at most here; only a
    // failure waits out the deadline.
    let deadline = std::time::Instant::now() + Duration::from_secs(1800);
    let mut status_when_released = None;
    let exit = loop {
        if let Some(exit) = run.try_wait().unwrap() {
            break exit;
        }
        if release.exists() && status_when_released.is_none() {
            let url = format!("{jobs}/{id}");
            let (_, _, view) = cluster
                .request_as(reqwest::Method::GET, &url, "key-acme", None)
                .await;
            if release_agent_command(&id) {
                status_when_released = Some(view["status"].clone());
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the agent page's test script did not finish within 30 minutes"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let stdout = stdout.await.unwrap();
    let stderr = stderr.await.unwrap();
    println!("{stdout}");
    eprintln!("{stderr}");
    let summary: Value = stdout
        .lines()
        .last()
        .and_then(|line| serde_json::from_str(line).ok())
        .unwrap_or(Value::Null);
    assert!(
        exit.success() && summary["failed"] == 0,
        "the agent page's browser checks failed (screenshots in {}):\n{stdout}\n{stderr}\n\
         --- coordinator log\n{}\n--- worker log\n{}",
        out.display(),
        coordinator.log_text(),
        worker.log_text()
    );
    assert_eq!(summary["passed"], AGENT_PAGE_CHECKS, "{summary}");
    assert_eq!(
        status_when_released,
        Some(json!("running")),
        "the page had shown the first steps while the job ran"
    );
    for page in ["agent-job-running", "agent-job"] {
        assert!(
            out.join(format!("{page}.png")).exists(),
            "no screenshot of {page}"
        );
    }
    // What the page showed is what the API answers.
    let result = cluster.wait_ended_as(&id, "key-acme").await;
    assert_eq!(result["status"], "succeeded", "{result:#}");
    assert_eq!(result["agent"]["ended_by"], "finished", "{result:#}");
    assert_eq!(result["agent"]["totals"]["steps"], 4, "{result:#}");
    assert_eq!(result["agent"]["totals"]["tool_calls"], 7, "{result:#}");
    cluster.cleanup().await;
}
