//! The execution service for evaluation users, end to end against the real RabbitMQ, Redis and
//! Docker: every language, the program + test form, and `POST /v1/executions/batch`.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::time::Duration;

use serde_json::{Value, json};
use tests::{Cluster, LONG_WAIT};

async fn batch(cluster: &Cluster, body: Value) -> (u16, Value) {
    let response = cluster
        .http
        .post(format!("{}/v1/executions/batch", cluster.url()))
        .json(&body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test]
async fn every_language_runs_programs_and_tests_with_their_own_verdicts() {
    let cluster = Cluster::new();
    let _coordinator = cluster.coordinator().await;
    let (_worker, _) = cluster.worker("worker").await;

    // (language, code, test, expected status, expected error kind, stdout starts with)
    type Case<'a> = (
        &'a str,
        &'a str,
        Option<&'a str>,
        &'a str,
        Option<&'a str>,
        &'a str,
    );
    let cases: Vec<Case> = vec![
        (
            "javascript",
            "console.log(6 * 7)",
            None,
            "passed",
            None,
            "42",
        ),
        (
            "nodejs",
            "process.exit(3)",
            None,
            "failed",
            Some("runtime"),
            "",
        ),
        (
            "javascript",
            "function add(a, b) { return a + b }",
            Some("const assert = require('node:assert');\nassert.strictEqual(add(2, 3), 5);"),
            "passed",
            None,
            "",
        ),
        (
            "javascript",
            "function add(a, b) { return a - b }",
            Some("const assert = require('node:assert');\nassert.strictEqual(add(2, 3), 5);"),
            "failed",
            Some("assertion"),
            "",
        ),
        (
            "javascript",
            "function add(a, b) { return a + }",
            Some("add(1, 2)"),
            "failed",
            Some("syntax"),
            "",
        ),
        // Exiting 0 before the test runs is not a pass.
        (
            "javascript",
            "function add() { return 0 }\nprocess.exit(0)",
            Some("throw new Error('never reached')"),
            "failed",
            Some("runtime"),
            "",
        ),
        (
            "bash",
            "echo hello; echo oops >&2",
            None,
            "passed",
            None,
            "hello",
        ),
        (
            "bash",
            "greet() { echo \"hi $1\"; }",
            Some("[ \"$(greet bob)\" = \"hi bob\" ] || exit 1"),
            "passed",
            None,
            "",
        ),
        (
            "bash",
            "greet() { echo \"bye $1\"; }",
            Some("[ \"$(greet bob)\" = \"hi bob\" ] || exit 1"),
            "failed",
            Some("runtime"),
            "",
        ),
        (
            "bash",
            "greet() { echo hi; }\nexit 0",
            Some("exit 1"),
            "failed",
            Some("runtime"),
            "",
        ),
        ("bash", "if then fi", None, "failed", Some("syntax"), ""),
        (
            "python",
            "def inc(x):\n    return x + 1",
            Some("assert inc(1) == 2"),
            "passed",
            None,
            "",
        ),
        (
            "python",
            "def inc(x):\n    return x",
            Some("assert inc(1) == 2"),
            "failed",
            Some("assertion"),
            "",
        ),
        (
            "python",
            "import os\ndef inc(x):\n    return x\nos._exit(0)",
            Some("assert inc(1) == 2"),
            "failed",
            Some("runtime"),
            "",
        ),
    ];
    for (language, code, test, status, kind, stdout) in &cases {
        // Programs of milliseconds: a limit far above their cost on any machine.
        let mut body = json!({"language": language, "code": code, "timeout_ms": 120_000});
        if let Some(test) = test {
            body["test"] = json!(test);
        }
        let (got, answer) = cluster.execute("", body).await;
        assert_eq!(got, 200, "{answer}");
        assert_eq!(answer["status"], *status, "{language} {code:?}: {answer:#}");
        assert_eq!(
            answer["error_kind"].as_str(),
            *kind,
            "{language} {code:?}: {answer:#}"
        );
        assert!(
            answer["stdout"].as_str().unwrap().starts_with(stdout),
            "{answer:#}"
        );
    }

    // A JS program that never ends is killed at its limit like any other.
    let (_, answer) = cluster
        .execute(
            "",
            json!({"language": "javascript", "code": "while (true) {}", "timeout_ms": 500}),
        )
        .await;
    assert_eq!(answer["status"], "timeout", "{answer:#}");

    // Bytes in and out over HTTP (base64), in a language that execs its program; a CPU limit
    // stops a busy loop with its own verdict; every verdict says what it used.
    let (got, answer) = cluster
        .execute(
            "",
            json!({"language": "bash", "timeout_ms": 120_000,
                   "code": "head -c 3 in.bin | od -An -tu1 | tr -s ' '; printf '\\377\\000' > out.bin",
                   "files": {"in.bin": {"base64": "AP+A"}}, "return_files": ["out.bin"]}),
        )
        .await;
    assert_eq!(got, 200, "{answer}");
    assert_eq!(answer["status"], "passed", "{answer:#}");
    assert_eq!(answer["stdout"], " 0 255 128\n", "{answer:#}");
    assert_eq!(
        answer["files"]["out.bin"],
        json!({"base64": "/wA="}),
        "{answer:#}"
    );
    assert!(answer["peak_memory_kb"].as_u64().unwrap() > 0, "{answer:#}");
    // The wall limit is far off, so that only the CPU limit can stop it, however little of a
    // core a loaded machine gives the loop: stopped by it, the run ends before the wall limit.
    let (_, answer) = cluster
        .execute(
            "",
            json!({"language": "javascript", "code": "while (true) {}",
                   "cpu_time_ms": 300, "timeout_ms": 60_000}),
        )
        .await;
    assert_eq!(answer["status"], "cpu_time_limit", "{answer:#}");
    assert!(
        answer["duration_ms"].as_u64().unwrap() < 60_000,
        "{answer:#}"
    );

    // Files reserved for the program or its test are refused, naming the field.
    let (got, answer) = cluster
        .execute(
            "",
            json!({"language": "bash", "code": "true", "files": {"test.sh": "x"}}),
        )
        .await;
    assert_eq!(got, 422, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().starts_with("files:"),
        "{answer}"
    );
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_batch_fans_out_and_answers_in_input_order() {
    // 200 programs in one synchronous request: seconds here, minutes on a slow machine, and
    // the answer must hold every verdict.
    let cluster = Cluster::new().with_coordinator_wait(LONG_WAIT);
    let _coordinator = cluster.coordinator().await;
    let (_w1, _) = cluster.worker("worker-1").await;
    let (_w2, _) = cluster.worker("worker-2").await;

    // 200 programs that each print their index after a short sleep, so they finish out of
    // order and only run in reasonable time in parallel.
    let items: Vec<Value> = (0..200)
        .map(|i| {
            let code = format!(
                "import time\ntime.sleep({})\nprint({i})",
                (i % 5) as f64 * 0.01
            );
            let mut item = json!({"language": "python", "code": code, "timeout_ms": 120_000});
            if i % 2 == 0 {
                item["id"] = json!(format!("task-{i}"));
            }
            if i % 50 == 7 {
                item["test"] = json!("assert False, 'planted failure'");
            }
            item
        })
        .collect();
    let (got, answer) = batch(&cluster, json!({ "items": items })).await;
    assert_eq!(got, 200, "{answer}");
    assert_eq!(
        (answer["done"].as_u64(), answer["total"].as_u64()),
        (Some(200), Some(200))
    );
    let results = answer["results"].as_array().unwrap();
    for (i, result) in results.iter().enumerate() {
        if i % 2 == 0 {
            assert_eq!(result["id"], format!("task-{i}"));
        } else {
            assert_eq!(
                result["id"], result["execution_id"],
                "no label: the execution id"
            );
        }
        assert_eq!(result["stdout"], format!("{i}\n"), "input order: {result}");
        let expected = if i % 50 == 7 { "failed" } else { "passed" };
        assert_eq!(result["status"], expected, "{result}");
    }
    assert_eq!(results[7]["error_kind"], "assertion");
    // Each result can also be read on its own.
    let id = results[3]["execution_id"].as_str().unwrap();
    let (status, single) = cluster.execution(id).await;
    assert_eq!(status, 200);
    assert_eq!(single["stdout"], "3\n");

    // A bad item queues nothing and is named.
    let (got, answer) = batch(
        &cluster,
        json!({"items": [{"language": "python", "code": "1"}, {"language": "cobol", "code": "1"}]}),
    )
    .await;
    assert_eq!(got, 422, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .starts_with("items[1].language:"),
        "{answer}"
    );
    let (got, answer) = batch(
        &cluster,
        json!({"items": [{"language": "python", "code": "1", "timeout_ms": "soon"}]}),
    )
    .await;
    assert_eq!(got, 400, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("items[0].timeout_ms"),
        "{answer}"
    );
    let (got, _) = batch(&cluster, json!({"items": []})).await;
    assert_eq!(got, 422);

    // Without waiting: 202, every item queued, each pollable.
    let (got, answer) = cluster
        .http
        .post(format!("{}/v1/executions/batch?wait=false", cluster.url()))
        .json(&json!({"items": [{"language": "bash", "code": "echo later"}]}))
        .send()
        .await
        .map(|r| (r.status().as_u16(), r))
        .unwrap();
    assert_eq!(got, 202);
    let answer: Value = answer.json().await.unwrap();
    assert_eq!(answer["results"][0]["status"], "queued");
    let verdict = cluster
        .wait_verdict(
            answer["results"][0]["execution_id"].as_str().unwrap(),
            Duration::from_secs(300),
        )
        .await;
    assert_eq!(verdict["stdout"], "later\n");
    cluster.cleanup().await;
}

#[tokio::test]
async fn thousands_of_programs_in_one_request_stream_back_from_every_worker() {
    // A verdict is streamed as it comes; a gap of `coordinator.wait` without one ends the
    // stream: give a slow machine room for it.
    let cluster = Cluster::new().with_coordinator_wait(LONG_WAIT);
    let _coordinator = cluster.coordinator().await;
    let (_w1, ops1) = cluster.worker("worker-1").await;
    let (_w2, ops2) = cluster.worker("worker-2").await;

    const N: usize = 2000;
    let items: Vec<Value> = (0..N)
        .map(|i| {
            json!({"id": format!("p{i}"), "language": "python", "code": format!("print({i})"),
                        "timeout_ms": 120_000})
        })
        .collect();
    // About a minute of CPU in all (the runs, and the coordinator, workers, Redis and RabbitMQ
    // around them), ten on a slow machine: the whole answer gets an hour.
    let response = cluster
        .http
        .post(format!("{}/v1/executions/batch?stream=true", cluster.url()))
        .timeout(Duration::from_secs(3600))
        .json(&json!({ "items": items }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "application/x-ndjson",
        "one line per verdict"
    );
    let text = response.text().await.unwrap();
    let mut seen = vec![false; N];
    for line in text.lines() {
        let view: Value = serde_json::from_str(line).unwrap();
        let index = usize::try_from(view["index"].as_u64().unwrap()).unwrap();
        assert!(!seen[index], "index {index} streamed twice");
        seen[index] = true;
        assert_eq!(view["id"], format!("p{index}"), "{view}");
        assert_eq!(view["status"], "passed", "{view}");
        assert_eq!(view["stdout"], format!("{index}\n"), "{view}");
    }
    assert!(seen.iter().all(|s| *s), "every item has a line");

    // Fanned out: both workers ran a share of the one request.
    // A worker counts a task once it is acked, just after its result is stored: poll.
    let sample = "codegen_worker_tasks_total{kind=\"execute\",outcome=\"completed\"}";
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let (ran1, ran2) = loop {
        let counts = (
            tests::metric(&cluster.http, &ops1, sample).await,
            tests::metric(&cluster.http, &ops2, sample).await,
        );
        if counts.0 + counts.1 >= N as f64 || std::time::Instant::now() > deadline {
            break counts;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(ran1 + ran2, N as f64);
    assert!(ran1 >= 100.0 && ran2 >= 100.0, "{ran1} / {ran2}");
    cluster.cleanup().await;
}
