//! The generation pipeline end to end: HTTP → plan → DAG → parallel implement/test/repair →
//! integrate, with a scripted (fake) model served over the real OpenAI-compatible API, the real
//! RabbitMQ, Redis and Docker sandbox.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::time::Duration;

use serde_json::{Value, json};
use tests::{Cluster, metric};

fn example_script() -> std::path::PathBuf {
    tests::root().join("examples/scripted-model.json")
}

/// How long a job may take before the test fails: work of seconds, ten times slower on a slow
/// machine, and only a failure waits it out.
const JOB_DEADLINE: Duration = Duration::from_secs(600);

#[tokio::test]
async fn a_request_becomes_tested_code_with_a_repair() {
    let mut cluster = Cluster::new();
    let _model = cluster.scripted_model(&example_script()).await;
    let coordinator = cluster.coordinator().await;
    let (w1, w1_url) = cluster.worker("worker-1").await;
    let (w2, w2_url) = cluster.worker("worker-2").await;

    // The client's request id comes back, and names the lines of every task of the job.
    let request_id = format!("sieve-{}", uuid::Uuid::now_v7().simple());
    let response = cluster
        .http
        .post(format!("{}/v1/jobs", cluster.url()))
        .header("x-request-id", &request_id)
        .json(&json!({
            "instruction": "Find all primes up to n with the sieve of Eratosthenes, and sum them.",
            "language": "python",
            "max_iterations": 3
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-request-id"], request_id.as_str());
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 202, "{body}");
    let id = body["job_id"].as_str().unwrap().to_owned();
    let result = cluster.wait_job(&id, JOB_DEADLINE).await;

    assert_eq!(result["status"], "succeeded", "{result:#}");
    assert_eq!(result["all_tests_passed"], true, "{result:#}");
    let names: Vec<&str> = result["function_specs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["sieve", "sum_primes"], "dependencies first");
    assert!(
        result["implementations"]["sum_primes"]
            .as_str()
            .unwrap()
            .contains("sum(sieve(n))")
    );
    // The scripted first implementation of sum_primes is wrong; the repair fixed it.
    let history = result["improvement_history"].as_array().unwrap();
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0]["function"], "sum_primes");
    // sieve(n - 1) raises ValueError for n = 0: an unexpected exception, classified `runtime`.
    assert_eq!(history[0]["error_kind"], "runtime", "{history:?}");
    assert!(
        history[0]["error"]
            .as_str()
            .unwrap()
            .contains("cases failed"),
        "{history:?}"
    );
    assert!(history[0]["fix"].as_str().unwrap().contains("sieve(n)"));
    // All nine cases, run again against the assembled module.
    let quality = &result["quality"];
    assert_eq!(quality["tests_total"], 9);
    assert_eq!(quality["tests_passed"], 9);
    assert!(quality["coverage"].as_f64().unwrap() > 0.8, "{quality}");
    assert!(quality["score"].as_f64().unwrap() > 0.8, "{quality}");
    assert_eq!(quality["dangerous_calls"], json!([]));
    // pycodestyle and pyflakes read the assembled module and found nothing (the module is
    // laid out as PEP 8 asks: its functions two blank lines apart, one newline at the end).
    assert_eq!(quality.get("unmeasured"), None, "{quality}");
    assert_eq!(quality.get("warnings"), None, "{quality}");
    assert!(result["metrics"]["model_calls"].as_u64().unwrap() >= 6);
    assert!(
        result["documentation"]
            .as_str()
            .unwrap()
            .contains("## `sieve(n: int) -> list[int]`")
    );

    // The progress stream replays everything and ends with the job.
    let events = cluster.job_events(&id).await;
    for expected in [
        "event: queued",
        "event: planned",
        "event: function_done",
        "event: finished",
    ] {
        assert!(
            events.contains(expected),
            "{expected} missing from:\n{events}"
        );
    }

    // The worker that finished the job timed it, once, under its final status.
    let mut finished = 0.0;
    for url in [&w1_url, &w2_url] {
        finished += metric(
            &cluster.http,
            url,
            "codegen_job_seconds_count{status=\"succeeded\"}",
        )
        .await;
        assert_eq!(
            metric(
                &cluster.http,
                url,
                "codegen_job_seconds_count{status=\"failed\"}"
            )
            .await,
            0.0
        );
    }
    assert_eq!(finished, 1.0);

    // Plan, two implement tasks, integrate: each finished on a line of its request, in one
    // worker's log or the other's.
    let tagged = format!("request_id={request_id}");
    let finished_lines: Vec<String> = [&w1, &w2]
        .iter()
        .flat_map(|w| w.log_text().lines().map(str::to_owned).collect::<Vec<_>>())
        .filter(|line| line.contains("task finished") && line.contains(&format!("job={id}")))
        .collect();
    assert_eq!(finished_lines.len(), 4, "{finished_lines:#?}");
    assert!(
        finished_lines.iter().all(|line| line.contains(&tagged)),
        "{finished_lines:#?}"
    );
    // A request without an id gets one made, and a usable one is never mixed up with it.
    let response = cluster
        .http
        .get(format!("{}/v1/jobs/{id}", cluster.url()))
        .send()
        .await
        .unwrap();
    let made = response.headers()["x-request-id"].to_str().unwrap();
    assert!(made.parse::<uuid::Uuid>().is_ok(), "{made}");
    let accepted = coordinator
        .log_text()
        .lines()
        .find(|line| line.contains("job accepted") && line.contains(&format!("job={id}")))
        .map(str::to_owned);
    assert!(
        accepted.as_ref().is_some_and(|line| line.contains(&tagged)),
        "{accepted:?}"
    );
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_plan_with_a_cycle_is_rejected_after_one_replan_with_the_cycle_named() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("cyclic.json");
    let spec = |name: &str, dep: &str| {
        json!({"name": name, "purpose": "p", "inputs": [], "outputs": {"type": "int", "description": "d"},
               "dependencies": [dep], "complexity": "simple"})
    };
    std::fs::write(
        &script,
        json!({"answers": [{"phase": "plan", "answer": {"functions": [spec("a", "b"), spec("b", "a")]}}]})
            .to_string(),
    )
    .unwrap();
    let mut cluster = Cluster::new();
    let _model = cluster.scripted_model(&script).await;
    let _coordinator = cluster.coordinator().await;
    let (_worker, worker) = cluster.worker("worker").await;
    let (_, body) = cluster
        .submit_job(json!({"instruction": "two functions that call each other"}))
        .await;
    let id = body["job_id"].as_str().unwrap().to_owned();
    let result = cluster.wait_job(&id, JOB_DEADLINE).await;
    assert_eq!(result["status"], "failed");
    let failure = result["failure"].as_str().unwrap();
    assert!(
        failure.contains("dependency cycle: a -> b -> a"),
        "{failure}"
    );
    // The worker that planned it asked again once, then failed it and timed it under its
    // final status.
    assert_eq!(result["metrics"]["model_calls"], 2, "{result:#}");
    assert_eq!(
        metric(
            &cluster.http,
            &worker,
            "codegen_job_seconds_count{status=\"failed\"}"
        )
        .await,
        1.0
    );
    cluster.cleanup().await;
}

#[tokio::test]
async fn bad_job_requests_get_a_4xx_naming_the_field() {
    let cluster = Cluster::new();
    let _coordinator = cluster.coordinator().await;
    for (body, status, needle) in [
        (json!({"instruction": "  "}), 422, "instruction"),
        (
            json!({"instruction": "x", "language": "cobol"}),
            422,
            "language",
        ),
        (
            json!({"instruction": "x", "max_iterations": 0}),
            422,
            "max_iterations",
        ),
        (
            json!({"instruction": "x", "candidates": 0}),
            422,
            "candidates",
        ),
        (
            json!({"instruction": "x", "candidates": 11}),
            422,
            "candidates",
        ),
        (
            json!({"instruction": "x", "max_tokens_total": 0}),
            422,
            "max_tokens_total",
        ),
        (
            json!({"instruction": "x", "max_tokens_total": 10_000_001}),
            422,
            "max_tokens_total",
        ),
        (json!({"instruction": "x", "colour": "blue"}), 400, "colour"),
    ] {
        let (got, answer) = cluster.submit_job(body.clone()).await;
        assert_eq!(got, status, "{body} -> {answer}");
        assert!(
            answer["error"].as_str().unwrap().contains(needle),
            "{answer}"
        );
    }
    let (status, _) = tests::get_json(
        &cluster.http,
        &format!("{}/v1/jobs/{}", cluster.url(), proto::TaskId::new()),
    )
    .await;
    assert_eq!(status, 404);
    cluster.cleanup().await;
}

#[tokio::test]
async fn repeated_requests_hit_the_solution_cache_and_shared_functions_the_function_cache() {
    let mut cluster = Cluster::new();
    let _model = cluster.scripted_model(&example_script()).await;
    let _coordinator = cluster.coordinator().await;
    let (_worker, _) = cluster.worker("worker").await;
    let request = json!({"instruction": "Sum the primes up to n (sieve of Eratosthenes)."});

    let (status, body) = cluster.submit_job(request.clone()).await;
    assert_eq!(status, 202);
    let first = cluster
        .wait_job(body["job_id"].as_str().unwrap(), JOB_DEADLINE)
        .await;
    assert_eq!(first["status"], "succeeded");
    assert_eq!(first["metrics"]["cache"], "miss");

    // The same request, spaced differently: answered at once from the solution cache.
    let (status, hit) = cluster
        .submit_job(json!({"instruction": "  Sum the primes up to n\n(sieve of Eratosthenes). "}))
        .await;
    assert_eq!(status, 200, "{hit}");
    assert_eq!(hit["metrics"]["cache"], "hit");
    assert_eq!(hit["implementations"], first["implementations"]);
    assert_ne!(hit["job_id"], first["job_id"]);

    // Another request that plans the same functions reuses both verified functions.
    let (_, body) = cluster
        .submit_job(json!({"instruction": "Primes: list them, then add them up."}))
        .await;
    let second = cluster
        .wait_job(body["job_id"].as_str().unwrap(), JOB_DEADLINE)
        .await;
    assert_eq!(second["status"], "succeeded", "{second:#}");
    let (_, stats) =
        tests::get_json(&cluster.http, &format!("{}/v1/cache/stats", cluster.url())).await;
    assert_eq!(stats["counters"]["solution_hits"], 1, "{stats}");
    assert_eq!(stats["counters"]["function_hits"], 2, "{stats}");
    assert_eq!(stats["solutions"], 2);

    let cleared = cluster
        .http
        .delete(format!("{}/v1/cache", cluster.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(cleared.status(), 200);
    let (_, stats) =
        tests::get_json(&cluster.http, &format!("{}/v1/cache/stats", cluster.url())).await;
    assert_eq!(
        (stats["solutions"].as_u64(), stats["functions"].as_u64()),
        (Some(0), Some(0))
    );
    cluster.cleanup().await;
}

#[tokio::test]
async fn without_a_sandbox_a_job_finishes_untested_and_says_so() {
    let mut cluster = Cluster::new();
    let _model = cluster.scripted_model(&example_script()).await;
    let _coordinator = cluster.coordinator().await;
    // A worker whose Docker endpoint does not exist: no sandbox at all.
    let (_worker, ops) = cluster.worker_with(
        "no-docker",
        &[
            (
                "CODEGEN__SANDBOX__DOCKER_HOST",
                "unix:///nonexistent/docker.sock",
            ),
            ("CODEGEN__SANDBOX__CHECKOUT_TIMEOUT", "1s"),
            // Docker down this long hands the pipeline to the static checks (60 s by default:
            // a shorter outage is waited out, and the job is tested after all).
            ("CODEGEN__WORKER__PIPELINE__SANDBOX_WAIT", "1s"),
        ],
    );
    let (_, body) = cluster
        .submit_job(json!({"instruction": "Find all primes up to n with a sieve, and sum them."}))
        .await;
    let result = cluster
        .wait_job(body["job_id"].as_str().unwrap(), JOB_DEADLINE)
        .await;
    assert_eq!(result["validation"], "static_analysis_only", "{result:#}");
    // It finished: the static checks pass, and no test is claimed to have run or failed.
    assert_eq!(result["status"], "succeeded", "{result:#}");
    assert_eq!(result["failure"], Value::Null, "{result:#}");
    assert_eq!(result["manual_review_recommended"], true);
    assert_eq!(
        result["all_tests_passed"], false,
        "never reported as tested"
    );
    assert_eq!(result["test_results"], json!([]));
    assert_eq!(result["quality"]["tests_passed"], 0);
    // Nothing ran: coverage was not measured, which is not a zero.
    assert_eq!(result["quality"]["coverage"], Value::Null);
    assert_eq!(
        result["quality"]["unmeasured"],
        json!(["complexity", "coverage", "warnings"])
    );
    assert!(
        result["implementations"]["sieve"]
            .as_str()
            .unwrap()
            .contains("def sieve")
    );
    // The worker says why it is not ready.
    let (status, ready) = cluster.readyz(&ops).await;
    assert_eq!(status, 503);
    assert!(
        ready["checks"]["docker"]
            .as_str()
            .unwrap()
            .contains("docker"),
        "{ready}"
    );
    cluster.cleanup().await;
}

/// Functions that do not depend on each other run on different workers at the same time: in
/// a diamond `a → (b, c, d) → e`, b, c and d all start before any of them is done. Each answer
/// takes 2 s, so a function is at least 4 s from its start to its end (its tests, then its
/// code): the others' starts fall in that window on a slow machine too.
#[tokio::test]
async fn independent_functions_run_at_the_same_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::new();
    let _model = cluster
        .scripted_model(&tests::diamond_script(dir.path(), 2000))
        .await;
    let _coordinator = cluster.coordinator().await;
    let (_w1, _) = cluster.worker("worker-1").await;
    let (_w2, _) = cluster.worker("worker-2").await;
    let (_, body) = cluster
        .submit_job(json!({"instruction": "a diamond of adders"}))
        .await;
    let id = body["job_id"].as_str().unwrap().to_owned();
    let result = cluster.wait_job(&id, JOB_DEADLINE).await;
    assert_eq!(result["status"], "succeeded", "{result:#}");

    // The progress stream, in the order Redis recorded it.
    let events = cluster.job_events(&id).await;
    let order: Vec<(String, String)> = events
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .filter_map(|e| {
            Some((
                e["event"].as_str()?.to_owned(),
                e["function"].as_str()?.to_owned(),
            ))
        })
        .collect();
    let position = |event: &str, function: &str| {
        order
            .iter()
            .position(|(e, f)| e == event && f == function)
            .unwrap_or_else(|| panic!("no {event} for {function}: {order:?}"))
    };
    let last_start = ["b", "c", "d"]
        .iter()
        .map(|f| position("function_started", f))
        .max()
        .unwrap();
    let first_done = ["b", "c", "d"]
        .iter()
        .map(|f| position("function_done", f))
        .min()
        .unwrap();
    assert!(last_start < first_done, "b, c and d overlap: {order:?}");
    assert!(position("function_done", "a") < position("function_started", "b"));
    let last_middle_done = ["b", "c", "d"]
        .iter()
        .map(|f| position("function_done", f))
        .max()
        .unwrap();
    assert!(last_middle_done < position("function_started", "e"));
    cluster.cleanup().await;
}

/// A job's cases runs that wait for a container together go in one sandbox run, and a
/// function that kills that run costs its siblings time, never their verdicts. One worker with
/// one python container: the first function's run holds it (its module sleeps 5 s as it
/// loads, far longer than the others take to arrive on a slow machine) while the other three
/// arrive; the next run takes all three.
#[tokio::test]
async fn cases_runs_waiting_together_share_a_run_and_a_crash_in_it_costs_no_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let spec = |name: &str| {
        json!({"name": name, "purpose": "return x plus one", "inputs": [{"name": "x", "type": "int"}],
               "outputs": {"type": "int", "description": "x + 1"}, "dependencies": [],
               "complexity": "simple"})
    };
    // (instruction, [(function, code, latency of its code)]): the first function's code comes
    // first and sleeps 5 s as it loads; the others come together 200 ms after it. It sleeps
    // only when loaded alone (its own cases run): the job's assembled module, which loads it
    // again several times, also defines `sibling`, so the job is not 5 s slower per load.
    let good = |name: &str| format!("def {name}(x: int) -> int:\n    return x + 1\n");
    let slow = |name: &str, sibling: &str| {
        format!(
            "import sys\nimport time\n\nif {sibling:?} not in sys._getframe().f_code.co_names:\n    \
             time.sleep(5)\n\n\ndef {name}(x: int) -> int:\n    return x + 1\n"
        )
    };
    let jobs = [
        (
            "first job",
            vec![
                ("a", slow("a", "b"), 100),
                ("b", good("b"), 300),
                ("c", good("c"), 300),
                ("d", good("d"), 300),
            ],
        ),
        (
            "second job",
            vec![
                ("p", slow("p", "q"), 100),
                ("q", good("q"), 300),
                ("r", good("r"), 300),
                // Ends the process as its module loads: the shared run has no report.
                ("x", format!("import os\nos._exit(7)\n\n{}", good("x")), 300),
            ],
        ),
    ];
    let mut answers = Vec::new();
    for (instruction, functions) in &jobs {
        let specs: Vec<Value> = functions.iter().map(|(name, _, _)| spec(name)).collect();
        answers.push(json!({"phase": "plan", "prompt_contains": instruction,
                            "answer": {"functions": specs}}));
        for (name, code, latency) in functions {
            answers.push(json!({"phase": "tests", "function": name, "latency_ms": 50,
                "answer": {"cases": [{"name": "one", "kind": "normal", "inputs": {"x": 1},
                                      "expected_output": 2, "expected_error": null}]}}));
            answers.push(
                json!({"phase": "implement", "function": name, "latency_ms": latency,
                                "answer": {"code": code, "analysis": null}}),
            );
        }
    }
    // x's repair loads: the job succeeds once x has run alone, failed, and been repaired.
    answers.push(
        json!({"phase": "repair", "function": "x", "answer": {"code": good("x"),
        "analysis": {"error_kind": "runtime", "root_cause": "FAKE", "changes": "no exit"}}}),
    );
    let script = dir.path().join("shared.json");
    std::fs::write(&script, json!({ "answers": answers }).to_string()).unwrap();
    let mut cluster = Cluster::new()
        .with_env("CODEGEN__SANDBOX__POOL_SIZE", "1")
        .with_env("CODEGEN__WORKER__PIPELINE__STATIC_FALLBACK", "false");
    let _model = cluster.scripted_model(&script).await;
    let _coordinator = cluster.coordinator().await;
    let (_worker, url) = cluster.worker("worker-1").await;
    let shared = |outcome: &'static str| {
        let (http, url) = (cluster.http.clone(), url.clone());
        async move {
            metric(
                &http,
                &url,
                &format!("codegen_sandbox_shared_cases_total{{outcome=\"{outcome}\"}}"),
            )
            .await
        }
    };

    let submit = |instruction: &'static str| {
        let cluster = &cluster;
        async move {
            let (status, body) = cluster
                .submit_job(json!({"instruction": instruction, "max_iterations": 2}))
                .await;
            assert_eq!(status, 202, "{body}");
            let id = body["job_id"].as_str().unwrap().to_owned();
            cluster.wait_job(&id, JOB_DEADLINE).await
        }
    };
    let first = submit("first job").await;
    assert_eq!(first["status"], "succeeded", "{first:#}");
    assert!(shared("shared").await >= 2.0, "b, c and d waited together");
    assert_eq!(shared("broke").await, 0.0);

    let before = shared("shared").await;
    let second = submit("second job").await;
    assert_eq!(second["status"], "succeeded", "{second:#}");
    assert_eq!(second["all_tests_passed"], true, "{second:#}");
    // Only x failed an attempt: its siblings' verdicts came from their runs alone, not from
    // the run x broke.
    let failed: Vec<&str> = second["improvement_history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["function"].as_str().unwrap())
        .collect();
    assert_eq!(failed, vec!["x"], "{second:#}");
    assert!(
        shared("broke").await >= 2.0,
        "x's crash broke the run it shared"
    );
    assert_eq!(
        shared("shared").await,
        before,
        "no verdict of the second job came from a shared run"
    );
    cluster.cleanup().await;
}
