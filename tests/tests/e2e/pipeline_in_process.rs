//! The generation pipeline's logic in one process (see `tests::in_process`): a real
//! coordinator and real workers on the in-memory broker and store, a scripted FAKE model and a
//! FAKE sandbox. No Docker, RabbitMQ or Redis: these run anywhere, in about a second.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::time::Duration;

use proto::job::{JobStatus, StoppedBy};
use proto::{ErrorKind, Progress};
use serde_json::{Value, json};
use tests::in_process::{FAILS, InProcess};

fn spec(name: &str, deps: &[&str]) -> Value {
    json!({"name": name, "purpose": format!("{name} of nothing"), "inputs": [],
           "outputs": {"type": "int", "description": "a number"},
           "dependencies": deps, "complexity": "simple"})
}

fn plan(specs: Vec<Value>) -> Value {
    json!({"phase": "plan", "answer": {"functions": specs}})
}

/// One case for every function.
fn tests_answer() -> Value {
    json!({"phase": "tests", "answer": {"cases": [{"name": "one", "kind": "normal",
        "inputs": {}, "expected_output": 1, "expected_error": null}]}})
}

fn implement(function: &str, code: &str) -> Value {
    json!({"phase": "implement", "function": function,
           "answer": {"code": code, "analysis": null}})
}

fn repair(function: &str, code: &str) -> Value {
    json!({"phase": "repair", "function": function, "answer": {"code": code,
        "analysis": {"error_kind": "wrong_output", "root_cause": "FAKE", "changes": "fixed it"}}})
}

fn code(function: &str) -> String {
    format!("def {function}():\n    return 1\n")
}

fn failing(function: &str) -> String {
    format!("{FAILS}\n{}", code(function))
}

/// Where `event` is in `events`.
fn position(events: &[Progress], event: impl Fn(&Progress) -> bool) -> Option<usize> {
    events.iter().position(event)
}

fn started(events: &[Progress], name: &str) -> Option<usize> {
    position(
        events,
        |e| matches!(e, Progress::FunctionStarted { function, .. } if function == name),
    )
}

fn done(events: &[Progress], name: &str) -> Option<usize> {
    position(
        events,
        |e| matches!(e, Progress::FunctionDone { function, .. } if function == name),
    )
}

/// Jobs of milliseconds: only a failure waits this out.
const WITHIN: Duration = Duration::from_secs(120);

#[tokio::test]
async fn a_diamond_runs_every_function_after_its_dependencies() {
    let mut answers = vec![
        plan(vec![
            spec("a", &[]),
            spec("b", &["a"]),
            spec("c", &["a"]),
            spec("d", &["b", "c"]),
        ]),
        tests_answer(),
    ];
    answers.extend(["a", "b", "c", "d"].map(|f| implement(f, &code(f))));
    let cluster = InProcess::start(json!({ "answers": answers }), 2).await;
    let job = cluster.submit("a diamond").await;
    let result = cluster.result(job, WITHIN).await;
    assert_eq!(result.status, JobStatus::Succeeded, "{:?}", result.failure);
    assert_eq!(result.implementations.len(), 4);
    let events = cluster.events(job).await;
    for (function, dependencies) in [("b", vec!["a"]), ("c", vec!["a"]), ("d", vec!["b", "c"])] {
        let start = started(&events, function).unwrap();
        for dependency in dependencies {
            assert!(
                done(&events, dependency).unwrap() < start,
                "{function} started before {dependency} was done: {events:?}"
            );
        }
    }
    assert!(matches!(
        events.last(),
        Some(Progress::Finished {
            status: JobStatus::Succeeded,
            ..
        })
    ));
    cluster.stop().await;
}

#[tokio::test]
async fn a_failing_function_is_repaired_from_the_evidence() {
    let answers = vec![
        plan(vec![spec("f", &[])]),
        tests_answer(),
        implement("f", &failing("f")),
        repair("f", &code("f")),
    ];
    let cluster = InProcess::start(json!({ "answers": answers }), 1).await;
    let job = cluster.submit("repair me").await;
    let result = cluster.result(job, WITHIN).await;
    assert_eq!(result.status, JobStatus::Succeeded, "{:?}", result.failure);
    assert_eq!(result.improvement_history.len(), 1);
    let step = &result.improvement_history[0];
    assert_eq!(step.error_kind, ErrorKind::WrongOutput);
    assert_eq!(step.fix, "fixed it");
    assert!(!result.implementations["f"].contains(FAILS));
    let attempts: Vec<bool> = cluster
        .events(job)
        .await
        .iter()
        .filter_map(|e| match e {
            Progress::Attempt { passed, .. } => Some(*passed),
            _ => None,
        })
        .collect();
    assert_eq!(attempts, vec![false, true]);
    cluster.stop().await;
}

#[tokio::test]
async fn a_function_that_never_passes_fails_the_job_and_starts_none_of_its_dependants() {
    let answers = vec![
        plan(vec![spec("a", &[]), spec("b", &[]), spec("c", &["a"])]),
        tests_answer(),
        implement("a", &failing("a")),
        repair("a", &failing("a")),
        implement("b", &code("b")),
        implement("c", &code("c")),
    ];
    // The repair passes no more cases than the first attempt: with the default patience a's
    // repairs stop there; with none, they go on to max_iterations (3).
    for (patience, attempts, stopped_by) in [(1, 2, Some(StoppedBy::NoProgress)), (0, 3, None)] {
        let options = worker::pipeline::Options {
            repair_patience: patience,
            ..worker::pipeline::Options::default()
        };
        let script = json!({ "answers": answers });
        let cluster = InProcess::start_with_pipeline(script, 2, options).await;
        let job = cluster.submit("one part cannot work").await;
        let result = cluster.result(job, WITHIN).await;
        assert_eq!(result.status, JobStatus::Failed);
        let failure = result.failure.clone().unwrap_or_default();
        assert!(failure.contains('a'), "{failure}");
        assert_eq!(
            failure.contains("repair_patience 1"),
            patience == 1,
            "{failure}"
        );
        assert_eq!(result.stopped_by, stopped_by, "patience {patience}");
        // What could be done was done and is kept: b's code; c never ran.
        assert_eq!(result.implementations.get("b"), Some(&code("b")));
        let events = cluster.events(job).await;
        assert_eq!(started(&events, "c"), None, "{events:?}");
        let attempts_of_a = events
            .iter()
            .filter(|e| matches!(e, Progress::Attempt { function, .. } if function == "a"))
            .count();
        assert_eq!(attempts_of_a, attempts, "patience {patience}: {events:?}");
        cluster.stop().await;
    }
}

#[tokio::test]
async fn a_plan_with_a_cycle_is_asked_for_again_and_the_second_one_runs() {
    let answers = vec![
        plan(vec![spec("a", &["b"]), spec("b", &["a"])]),
        plan(vec![spec("a", &[]), spec("b", &["a"])]),
        tests_answer(),
        implement("a", &code("a")),
        implement("b", &code("b")),
    ];
    let cluster = InProcess::start(json!({ "answers": answers }), 1).await;
    let job = cluster.submit("two functions, planned twice").await;
    let result = cluster.result(job, WITHIN).await;
    assert_eq!(result.status, JobStatus::Succeeded, "{:?}", result.failure);
    let events = cluster.events(job).await;
    let replanned = position(
        &events,
        |e| matches!(e, Progress::Replanning { problem } if problem.contains("cycle")),
    );
    let planned = position(&events, |e| matches!(e, Progress::Planned { .. }));
    assert!(replanned.is_some() && replanned < planned, "{events:?}");
    cluster.stop().await;
}

/// A sandbox image whose harness does not offer `many_cases` (its runner's `ready` does not
/// announce it; the sandbox refuses the run): that shared run's functions run alone, and the worker stops asking for shared runs (a
/// wasted run or two, not one per job: a second may have taken the container before the first
/// failed). Each worker has one container; the FAKE sandbox holds it 2 s a run until a shared
/// run is asked for (the other functions' runs, milliseconds behind the first, queue behind it
/// on a slow machine too), then 80 ms a run, so later jobs' runs still wait for it together.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_image_without_shared_runs_costs_one_run_then_every_function_runs_alone() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let asked = Arc::new(AtomicUsize::new(0));
    let counted = asked.clone();
    let sandbox = tests::in_process::fake_sandbox().with_harness(move |run| {
        let hold = if counted.load(Ordering::SeqCst) == 0 {
            Duration::from_secs(2)
        } else {
            Duration::from_millis(80)
        };
        // The worker thread's other tasks go on meanwhile (on another thread).
        tokio::task::block_in_place(|| std::thread::sleep(hold));
        if let proto::harness::HarnessRequest::ManyCases { .. } = run.request {
            counted.fetch_add(1, Ordering::SeqCst);
            // What the sandbox answers when the runner's `ready` did not announce the mode.
            return Err(sandbox::Error::NoHarness(run.request.mode()));
        }
        tests::in_process::fake_harness(run)
    });
    let names = ["a", "b", "c", "d", "e", "f"];
    let mut answers = vec![plan(names.iter().map(|n| spec(n, &[])).collect())];
    answers.push(tests_answer());
    answers.extend(names.map(|f| implement(f, &code(f))));
    let cluster = InProcess::start_with(json!({ "answers": answers }), 1, sandbox, 1).await;
    for instruction in ["first", "second", "third", "fourth"] {
        let job = cluster.submit(instruction).await;
        let result = cluster.result(job, WITHIN).await;
        assert_eq!(result.status, JobStatus::Succeeded, "{:?}", result.failure);
        assert_eq!(result.implementations.len(), names.len());
        assert!(result.test_results.iter().all(|r| r.passed));
    }
    let asked = asked.load(Ordering::SeqCst);
    assert!(
        (1..=2).contains(&asked),
        "{asked} shared runs were asked for: none after the image said it cannot"
    );
    cluster.stop().await;
}

#[tokio::test]
async fn an_integration_the_image_cannot_run_ends_the_job_failed_saying_why() {
    // Every function passes alone; the image's harness then refuses the integration run.
    let sandbox = tests::in_process::fake_sandbox().with_harness(|run| {
        if let proto::harness::HarnessRequest::Integrate(_) = run.request {
            return Err(sandbox::Error::NoHarness(run.request.mode()));
        }
        tests::in_process::fake_harness(run)
    });
    let answers = vec![
        plan(vec![spec("f", &[])]),
        tests_answer(),
        implement("f", &code("f")),
    ];
    let cluster = InProcess::start_with(json!({ "answers": answers }), 1, sandbox, 0).await;
    let job = cluster.submit("integrate me").await;
    // Not left `integrating` until its deadline: it ends now, with the harness's answer.
    let result = cluster.result(job, WITHIN).await;
    assert_eq!(result.status, JobStatus::Failed);
    let failure = result.failure.clone().unwrap_or_default();
    assert!(
        failure.contains("integration failed") && failure.contains("integrate"),
        "{failure}"
    );
    assert!(result.implementations.contains_key("f"), "{result:?}");
    let finished = cluster
        .events(job)
        .await
        .iter()
        .filter(|e| matches!(e, Progress::Finished { .. }))
        .count();
    assert_eq!(finished, 1, "exactly one end");
    cluster.stop().await;
}

/// Tenancy on the in-memory stores, as on Redis: a tenant's jobs, listing and usage are its
/// own, and a quota refuses a batch that would pass it, naming the limit.
#[tokio::test]
async fn tenants_see_only_their_own_work_and_their_quotas_hold() {
    let script = json!({"answers": [plan(vec![spec("one", &[])]), tests_answer(),
        implement("one", &code("one"))]});
    let mut options = coordinator::Options::default();
    options.api_keys.insert("acme".into(), "key-acme".into());
    options
        .api_keys
        .insert("globex".into(), "key-globex".into());
    options.tenants.insert(
        "acme".into(),
        coordinator::TenantOptions {
            jobs_in_flight: Some(1),
            ..Default::default()
        },
    );
    let cluster = InProcess::start_with_options(script, 1, options).await;
    let call = |method: reqwest::Method, path: &str, key: &str, body: Option<Value>| {
        let request = cluster
            .http
            .request(method, format!("{}{path}", cluster.url))
            .bearer_auth(key);
        let request = match body {
            Some(body) => request.json(&body),
            None => request,
        };
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (
                status,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let (status, answer) = call(
        reqwest::Method::POST,
        "/v1/jobs",
        "key-acme",
        Some(json!({"instruction": "one thing"})),
    )
    .await;
    assert_eq!(status, 202, "{answer}");
    let job: proto::TaskId = answer["job_id"].as_str().unwrap().parse().unwrap();
    let result = cluster.result(job, WITHIN).await;
    assert_eq!(result.status, JobStatus::Succeeded);

    // Two jobs at once would pass acme's one in flight: the whole batch is refused.
    let response = cluster
        .http
        .post(format!("{}/v1/batches", cluster.url))
        .bearer_auth("key-acme")
        .body("{\"instruction\": \"a\"}\n{\"instruction\": \"b\"}\n")
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let answer: Value = response.json().await.unwrap();
    assert_eq!(status, 429, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("jobs_in_flight"),
        "{answer}"
    );

    let (status, _) = call(
        reqwest::Method::GET,
        &format!("/v1/jobs/{job}"),
        "key-globex",
        None,
    )
    .await;
    assert_eq!(status, 404, "another tenant's job is not there for globex");
    let (_, listed) = call(reqwest::Method::GET, "/v1/jobs", "key-globex", None).await;
    assert_eq!(listed["jobs"].as_array().map(Vec::len), Some(0), "{listed}");
    let (_, listed) = call(reqwest::Method::GET, "/v1/jobs", "key-acme", None).await;
    assert_eq!(listed["jobs"][0]["job_id"], job.to_string(), "{listed}");
    let (status, usage) = call(reqwest::Method::GET, "/v1/usage", "key-acme", None).await;
    assert_eq!(status, 200, "{usage}");
    assert_eq!(usage["jobs"], 1, "{usage}");
    assert_eq!(usage["model_calls"], result.metrics.model_calls, "{usage}");
    let (_, usage) = call(reqwest::Method::GET, "/v1/usage", "key-globex", None).await;
    assert_eq!(usage["jobs"], 0, "{usage}");
    cluster.stop().await;
}

/// Webhooks on the in-memory stores, as on Redis: a job's end is POSTed once to its
/// `callback_url`, signed with its tenant's secret, and the delivery is shown on the job.
#[tokio::test]
async fn a_jobs_webhook_is_delivered_once_signed() {
    let (port, received) = super::webhooks::receiver().await;
    let script = json!({"answers": [plan(vec![spec("one", &[])]), tests_answer(),
        implement("one", &code("one"))]});
    let mut options = coordinator::Options::default();
    options.api_keys.insert("acme".into(), "key-acme".into());
    options.webhook_allow = format!("127.0.0.1:{port}");
    options.egress_allow_cidrs = "127.0.0.1/32".into(); // the receiver is on loopback
    options.tenants.insert(
        "acme".into(),
        coordinator::TenantOptions {
            webhook_secret: Some(super::webhooks::SECRET.into()),
            ..Default::default()
        },
    );
    let cluster = InProcess::start_with_options(script, 1, options).await;
    let response = cluster
        .http
        .post(format!("{}/v1/jobs", cluster.url))
        .bearer_auth("key-acme")
        .json(&json!({"instruction": "one thing",
                      "callback_url": format!("http://127.0.0.1:{port}/job")}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let answer: Value = response.json().await.unwrap();
    let job: proto::TaskId = answer["job_id"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        cluster.result(job, WITHIN).await.status,
        JobStatus::Succeeded
    );
    // Only bounds a failure: the deliverer looks for due webhooks four times a second.
    let deadline = std::time::Instant::now() + WITHIN;
    while received.lock().unwrap().is_empty() {
        assert!(std::time::Instant::now() < deadline, "no webhook arrived");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let view = loop {
        let view: Value = cluster
            .http
            .get(format!("{}/v1/jobs/{job}", cluster.url))
            .bearer_auth("key-acme")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if view["webhook"]["state"] == "delivered" {
            break view;
        }
        assert!(std::time::Instant::now() < deadline, "{view}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(view["webhook"]["attempts"].as_array().unwrap().len(), 1);
    let received = received.lock().unwrap().clone();
    assert_eq!(received.len(), 1, "delivered once");
    let (path, headers, body, _) = &received[0];
    assert_eq!(path, "/job");
    super::webhooks::verify(headers);
    assert_eq!(body["event"], "job.finished");
    assert_eq!(body["job"]["job_id"], job.to_string());
    cluster.stop().await;
}
