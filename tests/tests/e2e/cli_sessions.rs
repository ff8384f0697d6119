//! The session CLI end to end: `codegen session …` as processes against a cluster of its own
//! (real RabbitMQ, Redis and Docker): state kept between cells, each cell's output, value and
//! exit status, files in and out byte for byte, the listings, and a session that has ended.

use std::time::{Duration, Instant};

use serde_json::Value;
use tests::{CliRun, Cluster, codegen_cli};

/// Bounds a failure only: a session's container starts in about a second, a cell takes
/// milliseconds; more on a slow or busy machine.
const LONG: Duration = Duration::from_secs(300);

/// `codegen session ARGS --url URL`.
async fn session(url: &str, args: &[&str]) -> CliRun {
    let mut all = vec!["session"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--url", url]);
    codegen_cli(&all, LONG).await
}

#[tokio::test]
async fn a_session_through_the_cli() {
    let cluster = Cluster::new();
    let _coordinator = cluster.coordinator().await;
    let url = cluster.url();

    // No worker yet: 503 no_session_host, sent once more after its Retry-After, then the
    // coordinator's message and exit 2. (python is the default language.)
    let run = session(&url, &["open"]).await;
    assert_eq!(run.code, Some(2), "{run}");
    assert_eq!(run.stdout, "", "{run}");
    assert_eq!(run.stderr.matches("trying again").count(), 1, "{run}");
    assert!(
        run.stderr
            .contains("codegen: the coordinator answered 503 Service Unavailable: "),
        "{run}"
    );

    let (_worker, _) = cluster.worker("worker").await;

    // Right after the worker starts, the coordinator may not know it yet (503
    // no_session_host, which the CLI retries once): open again until it does.
    let deadline = Instant::now() + LONG;
    let id = loop {
        let run = session(&url, &["open", "--language", "python"]).await;
        if run.code == Some(0) {
            break run.stdout.trim().to_owned();
        }
        assert!(
            run.code == Some(2) && run.stderr.contains("503") && Instant::now() < deadline,
            "{run}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        uuid::Uuid::parse_str(&id).is_ok_and(|u| u.to_string() == id),
        "the id alone on stdout: {id:?}"
    );

    // State between cells; the value of a final expression on stdout.
    let run = session(&url, &["run", &id, "x = 20"]).await;
    assert_eq!(run.code, Some(0), "{run}");
    assert_eq!(run.stdout, "", "{run}");
    let run = session(&url, &["run", &id, "x * 2"]).await;
    assert_eq!(run.code, Some(0), "{run}");
    assert_eq!(run.stdout, "40\n", "{run}");

    // From a file: the cell's stdout, then its value; its stderr on stderr.
    let cell = cluster.dir.path().join("cell.py");
    std::fs::write(
        &cell,
        "import sys\nprint('half', x // 2)\nprint('to stderr', file=sys.stderr)\nx + 1\n",
    )
    .unwrap();
    let run = session(&url, &["run", &id, "--file", cell.to_str().unwrap()]).await;
    assert_eq!(run.code, Some(0), "{run}");
    assert_eq!(run.stdout, "half 10\n21\n", "{run}");
    assert_eq!(run.stderr, "to stderr\n", "{run}");

    // --json: the cell's result as the API gives it.
    let run = session(&url, &["run", &id, "x * 3", "--json"]).await;
    assert_eq!(run.code, Some(0), "{run}");
    let result: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(result["status"], "ok", "{run}");
    assert_eq!(result["value"], "60", "{run}");

    // An uncaught error exits 1 with its traceback and says so; the session lives on.
    let run = session(&url, &["run", &id, "x / 0"]).await;
    assert_eq!(run.code, Some(1), "{run}");
    assert!(
        run.stderr.contains("ZeroDivisionError: division by zero"),
        "{run}"
    );
    assert!(run.stderr.contains("status=error"), "{run}");
    // A cell past its deadline is interrupted: exit 1, and it says it was a timeout.
    let run = session(
        &url,
        &[
            "run",
            &id,
            "import time\ntime.sleep(600)",
            "--timeout-ms",
            "500",
        ],
    )
    .await;
    assert_eq!(run.code, Some(1), "{run}");
    assert!(run.stderr.contains("status=timeout"), "{run}");
    let run = session(&url, &["run", &id, "x"]).await;
    assert_eq!((run.code, run.stdout.as_str()), (Some(0), "20\n"), "{run}");

    // A file in and out, byte for byte (every byte value, past any buffer size).
    let bytes: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    let local = cluster.dir.path().join("blob.bin");
    std::fs::write(&local, &bytes).unwrap();
    let run = session(
        &url,
        &["put", &id, local.to_str().unwrap(), "data/blob.bin"],
    )
    .await;
    assert_eq!(run.code, Some(0), "{run}");
    let back = cluster.dir.path().join("back.bin");
    let run = session(&url, &["get", &id, "data/blob.bin", back.to_str().unwrap()]).await;
    assert_eq!(run.code, Some(0), "{run}");
    assert!(std::fs::read(&back).unwrap() == bytes, "not the bytes put");
    // The cells see it too.
    let run = session(
        &url,
        &["run", &id, "len(open('data/blob.bin', 'rb').read())"],
    )
    .await;
    assert_eq!(run.stdout, "70000\n", "{run}");
    // A path a URL would change is refused before it is sent.
    let run = session(&url, &["get", &id, "../etc/passwd", "-"]).await;
    assert_eq!(run.code, Some(2), "{run}");
    assert_eq!(run.stdout, "", "{run}");

    let run = session(&url, &["files", &id]).await;
    assert_eq!(run.code, Some(0), "{run}");
    let line = run
        .stdout
        .lines()
        .find(|l| l.ends_with("  data/blob.bin"))
        .unwrap_or_else(|| panic!("data/blob.bin not listed: {run}"));
    assert!(line.trim_start().starts_with("70000 "), "{run}");
    let run = session(&url, &["files", &id, "--json"]).await;
    let listing: Value = serde_json::from_str(&run.stdout).unwrap();
    assert!(
        listing["files"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["path"] == "data/blob.bin" && f["size"] == 70_000),
        "{run}"
    );

    // The listing: the session, live, with its cells counted.
    let run = session(&url, &["ls"]).await;
    assert_eq!(run.code, Some(0), "{run}");
    let row: Vec<&str> = run
        .stdout
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap_or_else(|| panic!("{id} not listed: {run}"))
        .split_whitespace()
        .collect();
    assert_eq!(&row[..4], [id.as_str(), "python", "live", "8"], "{run}");
    assert!(run.stdout.starts_with("ID "), "a header: {run}");
    let run = session(&url, &["show", &id, "--json"]).await;
    assert_eq!(run.code, Some(0), "{run}");
    let view: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(
        (view["id"].as_str(), view["state"].as_str()),
        (Some(id.as_str()), Some("live"))
    );

    // `rm` ends it; a cell after that exits 2 with the coordinator's message.
    let run = session(&url, &["rm", &id]).await;
    assert_eq!(run.code, Some(0), "{run}");
    assert!(
        run.stdout.contains(&format!("session {id}: ended")),
        "{run}"
    );
    let run = session(&url, &["run", &id, "x"]).await;
    assert_eq!(run.code, Some(2), "{run}");
    assert_eq!(run.stdout, "", "{run}");
    assert!(run.stderr.contains("409"), "{run}");
    assert!(
        run.stderr.contains("the session is ended: deleted"),
        "{run}"
    );
    let run = session(&url, &["show", &id]).await;
    assert_eq!(run.code, Some(0), "{run}");
    assert!(run.stdout.contains("state         ended"), "{run}");

    // An unknown session is a client error too.
    let run = session(&url, &["run", &"0".repeat(32), "1"]).await;
    assert_eq!(run.code, Some(2), "{run}");
    assert!(run.stderr.contains("404"), "{run}");
    cluster.cleanup().await;
}
