//! `codegen agent` end to end: the real binary against a cluster of its own (real RabbitMQ,
//! Redis and Docker sessions) whose model is a scripted FAKE over the real OpenAI-compatible
//! API. It sends a folder's files, shows each step live as the job's events arrive, sums the
//! run up, writes the files it finished with, and exits 0 only for a run that finished.

use serde_json::{Value, json};
use tests::{Cluster, codegen_cli};

use crate::agent::{WITHIN, call, script};

/// Where `needle` is in `text`, or a failure showing the run.
fn at(text: &str, needle: &str, run: &tests::CliRun) -> usize {
    text.find(needle)
        .unwrap_or_else(|| panic!("{needle:?} missing from:\n{run}"))
}

const SUM: &str = "print('total', sum(int(x) for x in open('data/numbers.txt').read().split()))\n";

#[tokio::test]
async fn codegen_agent_shows_the_run_live_sums_it_up_and_writes_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = script(
        dir.path(),
        vec![
            json!({"text": "I will look first.", "tool_calls": [call("list_files", json!({}))]}),
            json!({"tool_calls": [
                call("read_file", json!({"path": "data/numbers.txt"})),
                call("write_file", json!({"path": "sum.py", "content": SUM})),
            ]}),
            json!({"tool_calls": [call("run_shell", json!({"command": "python3 sum.py"}))]}),
            json!({"tool_calls": [call("finish", json!({"answer": "the total is 10", "files": ["sum.py", "data/numbers.txt"]}))]}),
        ],
    );
    // The folder the agent starts with: a file below a folder, and a link that is not sent.
    let given = dir.path().join("given");
    std::fs::create_dir_all(given.join("data")).unwrap();
    std::fs::write(given.join("data/numbers.txt"), "1 2 3 4\n").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", given.join("passwd")).unwrap();
    let out = dir.path().join("out");

    let mut cluster = Cluster::new();
    let _model = cluster.scripted_model(&path).await;
    let _coordinator = cluster.coordinator().await;
    let _worker = cluster.worker("worker-1").await;
    let url = cluster.url();
    let run = codegen_cli(
        &[
            "agent",
            "Sum the numbers in data/numbers.txt with a script.",
            "--language",
            "python",
            "--files",
            given.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--max-steps",
            "10",
            "--max-seconds",
            "300",
            "--seed",
            "7",
            "--temperature",
            "0",
            "--url",
            &url,
        ],
        WITHIN,
    )
    .await;
    assert_eq!(run.code, Some(0), "a finished run exits 0: {run}");

    // What was sent, and what was not.
    let err = &run.stderr;
    at(err, "warning: passwd: a symbolic link, skipped", &run);
    at(err, "sending 1 files (8 bytes) from", &run);
    // The live transcript, in the order of the steps, as their events came.
    let mut last = at(err, "accepted", &run);
    for needle in [
        "started with ",
        "step 1: I will look first.",
        "→ list_files {}",
        "← list_files: data/numbers.txt (8 bytes)",
        "step 2",
        "→ read_file",
        "→ write_file",
        "← read_file: 1 2 3 4",
        "← write_file:",
        "step 3",
        "→ run_shell",
        "← run_shell:",
        "step 4",
        "→ finish",
        "finished: succeeded",
    ] {
        let found = last + at(&err[last..], needle, &run);
        last = found;
    }
    assert!(
        err.lines()
            .any(|l| l.contains("← run_shell:") && l.contains("total 10")),
        "the command's output: {run}"
    );
    // The summary.
    let summary = &run.stdout;
    for needle in [
        "✅ finished: ended_by finished",
        "answer:\n  the total is 10\n",
        "files (2):\n",
        "  data/numbers.txt (8 bytes)\n",
        &format!("  sum.py ({} bytes)\n", SUM.len()),
        "totals: 4 steps, 5 tool calls, 4 model calls, ",
        "resumed 0",
        "session: ",
    ] {
        at(summary, needle, &run);
    }
    // The files it finished with, under --out.
    assert_eq!(std::fs::read_to_string(out.join("sum.py")).unwrap(), SUM);
    assert_eq!(
        std::fs::read_to_string(out.join("data/numbers.txt")).unwrap(),
        "1 2 3 4\n"
    );
    at(err, "wrote 2 of 2 files to", &run);
    cluster.cleanup().await;
}

#[tokio::test]
async fn codegen_agent_exits_1_for_a_run_that_did_not_finish_and_2_when_refused() {
    let dir = tempfile::tempdir().unwrap();
    // The same command over and over, never `finish`.
    let path = script(
        dir.path(),
        vec![json!({"tool_calls": [call("run_shell", json!({"command": "echo again"}))]})],
    );
    let mut cluster = Cluster::new();
    let _model = cluster.scripted_model(&path).await;
    let _coordinator = cluster.coordinator().await;
    let _worker = cluster.worker("worker-1").await;
    let url = cluster.url();

    let run = codegen_cli(
        &["agent", "Loop.", "--max-steps", "2", "--url", &url],
        WITHIN,
    )
    .await;
    assert_eq!(
        run.code,
        Some(1),
        "a run that did not finish exits 1: {run}"
    );
    let step1 = at(&run.stderr, "step 1\n  → run_shell", &run);
    let step2 = at(&run.stderr, "step 2\n  → run_shell", &run);
    assert!(step1 < step2, "{run}");
    assert_eq!(run.stderr.matches("← run_shell: ").count(), 2, "{run}");
    at(&run.stdout, "ended_by max_steps", &run);
    at(&run.stdout, "answer: none", &run);
    at(&run.stdout, "files (0):", &run);
    at(&run.stdout, "totals: 2 steps, 2 tool calls", &run);

    // --json: the result as the API answers it, on stdout; the transcript still on stderr.
    let run = codegen_cli(
        &[
            "agent",
            "Loop.",
            "--max-steps",
            "1",
            "--json",
            "--url",
            &url,
        ],
        WITHIN,
    )
    .await;
    assert_eq!(run.code, Some(1), "{run}");
    at(&run.stderr, "step 1\n  → run_shell", &run);
    let result: Value = serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {run}"));
    assert_eq!(result["agent"]["ended_by"], "max_steps", "{result:#}");
    assert_eq!(result["agent"]["totals"]["steps"], 1, "{result:#}");

    // Refused by the coordinator: exit 2, its message, code and field named.
    let run = codegen_cli(
        &["agent", "Loop.", "--temperature", "5", "--url", &url],
        WITHIN,
    )
    .await;
    assert_eq!(run.code, Some(2), "{run}");
    at(&run.stderr, "422", &run);
    at(
        &run.stderr,
        "agent.temperature: must be between 0 and 2 [invalid_field, param `agent.temperature`]",
        &run,
    );
    cluster.cleanup().await;
}
