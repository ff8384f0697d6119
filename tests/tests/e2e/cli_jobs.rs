//! The job CLI end to end: `codegen submit` and `codegen batch` as processes against a cluster
//! of their own (real RabbitMQ, Redis and Docker sandbox) with the scripted (fake) model of
//! `examples/` served over the real OpenAI-compatible API.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::time::Duration;

use serde_json::Value;
use tests::{Cluster, codegen_cli, root};

/// Jobs of seconds, ten times slower on a slow machine: only a failure waits this out.
const LONG: Duration = Duration::from_secs(600);

fn function_names(result: &Value) -> Vec<&str> {
    result["function_specs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn submit_and_batch_through_the_cli() {
    let mut cluster = Cluster::new();
    let _model = cluster
        .scripted_model(&root().join("examples/scripted-model.json"))
        .await;
    let _coordinator = cluster.coordinator().await;
    let (_w1, _) = cluster.worker("worker-1").await;
    let (_w2, _) = cluster.worker("worker-2").await;
    let url = cluster.url();

    // One attempt is not enough for the scripted sum_primes (its first version is wrong).
    // First, so that no function of it is in the function cache yet.
    let run = codegen_cli(
        &[
            "submit",
            "Add up the primes that are at most n.",
            "--max-iterations",
            "1",
            "--wait",
            "--format",
            "markdown",
            "--url",
            &url,
        ],
        LONG,
    )
    .await;
    assert_eq!(run.code, Some(1), "a failed job exits 1: {run}");
    let first = run.stdout.lines().next().unwrap_or_default();
    assert!(first.starts_with("❌ failed: sum_primes"), "{run}");
    // sieve(n - 1) raises for n = 0.
    assert!(
        run.stdout
            .contains("- ✗ `zero` (runtime): ValueError: n must be non-negative"),
        "{run}"
    );

    // With room to repair it: the report shows the repair attempt by attempt.
    let run = codegen_cli(
        &[
            "submit",
            "Find all primes up to n with a sieve and return their sum.",
            "--wait",
            "--format",
            "markdown",
            "--url",
            &url,
        ],
        LONG,
    )
    .await;
    assert_eq!(run.code, Some(0), "{run}");
    let md = &run.stdout;
    let first = md.lines().next().unwrap_or_default();
    assert!(first.starts_with("✅ succeeded: 9/9 tests pass"), "{run}");
    for needle in [
        "## `sieve(n: int) -> list[int]`",
        "## `sum_primes(n: int) -> int`",
        "```python\ndef sum_primes(n: int) -> int:",
        "return sum(sieve(n))",
        "- ✓ `hundred`",
        "- ✓ `negative`",
        "## Timings",
        "| generation | execution | total |",
        "## Quality",
        "Score **",
        "## Improvement history",
        "`sum_primes`:",
        "- attempt 1 ✗ runtime: 1 of 4 cases failed",
        "  - fix: call sieve(n) and raise ValueError for negative n",
        "- attempt 2 ✓ passed all 4 tests",
    ] {
        assert!(md.contains(needle), "{needle:?} missing from:\n{run}");
    }
    assert!(md.find("## `sieve").unwrap() < md.find("## `sum_primes").unwrap());
    // Live progress on stderr, one line per event.
    for needle in [
        "accepted",
        "planned 2 functions: sieve, sum_primes",
        "sum_primes: attempt 1 ✗ runtime",
        "sum_primes: attempt 2 ✓ tests pass",
        "finished: succeeded",
    ] {
        assert!(
            run.stderr.contains(needle),
            "{needle:?} missing from:\n{run}"
        );
    }

    // The batch: one result per line, in input order.
    let out = cluster.dir.path().join("results.jsonl");
    let run = codegen_cli(
        &[
            "batch",
            "examples/requests.jsonl",
            "-o",
            out.to_str().unwrap(),
            "--url",
            &url,
        ],
        LONG,
    )
    .await;
    assert_eq!(run.code, Some(0), "{run}");
    assert!(run.stderr.contains(": 3 jobs in "), "{run}");
    assert!(run.stderr.contains("3 succeeded"), "{run}");
    // Not a terminal: periodic progress lines instead of a bar.
    assert!(run.stderr.contains("3/3 finished"), "{run}");
    let inputs: Vec<Value> = std::fs::read_to_string(root().join("examples/requests.jsonl"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let results: Vec<Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(results.len(), inputs.len());
    for (input, result) in inputs.iter().zip(&results) {
        assert_eq!(result["instruction"], input["instruction"], "input order");
        assert_eq!(result["status"], "succeeded", "{result:#}");
        assert_eq!(result["all_tests_passed"], true, "{result:#}");
    }
    assert_eq!(function_names(&results[0]), ["sieve", "sum_primes"]);
    assert_eq!(function_names(&results[1]), ["normalize", "is_palindrome"]);
    let stats = function_names(&results[2]);
    assert_eq!(stats.len(), 3);
    assert_eq!(
        stats[2], "describe",
        "after both its dependencies: {stats:?}"
    );
    assert!(
        results[1]["implementations"]["is_palindrome"]
            .as_str()
            .unwrap()
            .contains("normalize(text)")
    );

    // `codegen status` of a batch job, in the other formats.
    let id = results[1]["job_id"].as_str().unwrap();
    let run = codegen_cli(&["status", id, "--format", "plain", "--url", &url], LONG).await;
    assert_eq!(run.code, Some(0), "{run}");
    assert!(
        run.stdout.starts_with("def normalize(text: str) -> str:"),
        "{run}"
    );
    assert!(run.stdout.contains("\n\n\ndef is_palindrome("), "{run}");
    assert!(run.stderr.contains("status=succeeded"), "{run}");
    let run = codegen_cli(&["status", id, "--format", "json", "--url", &url], LONG).await;
    assert_eq!(run.code, Some(0), "{run}");
    let json: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(json, results[1]);

    // Client errors exit 2 with the coordinator's message.
    let bad = cluster.dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"instruction\": \"x\"}\n{\"instruction\": \"y\", \"language\": \"cobol\"}\n",
    )
    .unwrap();
    let run = codegen_cli(
        &["batch", bad.to_str().unwrap(), "-o", "-", "--url", &url],
        LONG,
    )
    .await;
    assert_eq!(run.code, Some(2), "{run}");
    assert!(run.stderr.contains("422"), "{run}");
    assert!(run.stderr.contains("line 2: language"), "{run}");
    let run = codegen_cli(
        &["status", &proto::TaskId::new().to_string(), "--url", &url],
        LONG,
    )
    .await;
    assert_eq!(run.code, Some(2), "{run}");
    assert!(run.stderr.contains("404"), "{run}");

    // `codegen cache`: the batch filled both caches; clearing empties them.
    let run = codegen_cli(&["cache", "stats", "--url", &url], LONG).await;
    assert_eq!(run.code, Some(0), "{run}");
    let stats: Value = serde_json::from_str(&run.stdout).unwrap();
    assert!(stats["solutions"].as_u64().unwrap() >= 3, "{run}");
    assert!(stats["functions"].as_u64().unwrap() >= 7, "{run}");
    let run = codegen_cli(&["cache", "clear", "--url", &url], LONG).await;
    assert_eq!(run.code, Some(0), "{run}");
    let cleared: Value = serde_json::from_str(&run.stdout).unwrap();
    let removed = cleared["removed"].as_u64().unwrap();
    let before = stats["solutions"].as_u64().unwrap() + stats["functions"].as_u64().unwrap();
    // Every entry went (the count also takes in the hit/miss counters).
    assert!(removed >= before, "{removed} < {before}: {run}");
    let run = codegen_cli(&["cache", "stats", "--url", &url], LONG).await;
    let stats: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(
        (stats["solutions"].as_u64(), stats["functions"].as_u64()),
        (Some(0), Some(0))
    );
    cluster.cleanup().await;
}

/// `submit --wait` follows its job through a coordinator's death: the event stream breaks, the
/// CLI opens it again once a coordinator answers on that address (with `Last-Event-ID`), and
/// every event is shown once.
#[tokio::test]
async fn submit_wait_resumes_its_event_stream_across_a_coordinator_restart() {
    let dir = tempfile::tempdir().unwrap();
    // Each model answer takes 1.5 s, so the job is still running when the coordinator dies.
    let script_file = tests::slow_scripted_model(dir.path(), 1500);
    let cluster = Cluster::new()
        .with_env("CODEGEN__MODEL__PROVIDER", "scripted")
        .with_env("CODEGEN__MODEL__SCRIPT_FILE", script_file.to_str().unwrap());
    let mut coordinator = cluster.coordinator().await;
    let (_worker, _) = cluster.worker("worker-1").await;
    let url = cluster.url();
    let cli = {
        let url = url.clone();
        tokio::spawn(async move {
            codegen_cli(
                &[
                    "submit",
                    "Add up the primes that are at most n.",
                    "--wait",
                    "--format",
                    "json",
                    "--url",
                    &url,
                ],
                LONG,
            )
            .await
        })
    };
    // The job is planned (its stream has events) before the coordinator goes.
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let (_, listed) = tests::get_json(&cluster.http, &format!("{url}/v1/jobs")).await;
        let running = listed["jobs"]
            .as_array()
            .is_some_and(|jobs| jobs.iter().any(|j| j["status"] == "running"));
        if running {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no job ran: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    coordinator.signal("KILL");
    coordinator.wait_exit(LONG).expect("the coordinator died");
    let _coordinator = cluster.coordinator().await;
    let run = cli.await.unwrap();
    assert_eq!(run.code, Some(0), "{run}");
    assert!(
        run.stderr.contains("progress stream broke off"),
        "the stream did break: {run}"
    );
    for needle in [
        "planned 2 functions: sieve, sum_primes",
        "sum_primes: attempt 1 ✗ runtime",
        "sum_primes: attempt 2 ✓ tests pass",
        "finished: succeeded",
    ] {
        assert_eq!(
            run.stderr.matches(needle).count(),
            1,
            "{needle:?} shown once:\n{run}"
        );
    }
    let result: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(result["status"], "succeeded", "{result:#}");
    cluster.cleanup().await;
}
