//! Generation jobs survive processes dying mid-job, against the real RabbitMQ, Redis and
//! Docker, with a scripted (fake) model that answers slowly enough to be caught mid-task.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tests::{Cluster, PrivateRabbit};

/// How long a job may take before the test fails: work of seconds, ten times slower on a slow
/// machine, and only a failure waits it out.
const JOB_DEADLINE: Duration = Duration::from_secs(600);

/// How long a worker may take to log that it started a task (a plan call first): only a
/// failure waits it out.
const STARTED: Duration = Duration::from_secs(120);

/// The example script with a fixed latency on every answer.
fn slow_script(dir: &std::path::Path, latency_ms: u64) -> std::path::PathBuf {
    let text = std::fs::read_to_string(tests::root().join("examples/scripted-model.json")).unwrap();
    let mut script: Value = serde_json::from_str(&text).unwrap();
    for answer in script["answers"].as_array_mut().unwrap() {
        answer["latency_ms"] = json!(latency_ms);
    }
    let path = dir.join("slow.json");
    std::fs::write(&path, script.to_string()).unwrap();
    path
}

async fn wait_for_log(process: &tests::Process, needle: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while !process.log_text().contains(needle) {
        assert!(
            Instant::now() < deadline,
            "{needle:?} never logged:\n{}",
            process.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The sieve job on one worker (`name`), over the slow model, once the worker has started
/// implementing its first function; the model and coordinator processes are held here.
struct MidFunction {
    cluster: Cluster,
    worker: tests::Process,
    id: String,
    _held: (tempfile::TempDir, tests::Process, tests::Process),
}

async fn mid_function(name: &str) -> MidFunction {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::new();
    let model = cluster.scripted_model(&slow_script(dir.path(), 700)).await;
    let coordinator = cluster.coordinator().await;
    let (worker, _) = cluster.worker(name).await;
    let (_, body) = cluster
        .submit_job(json!({"instruction": "sieve, then sum the primes"}))
        .await;
    let id = body["job_id"].as_str().unwrap().to_owned();
    wait_for_log(&worker, "implement task started", STARTED).await;
    MidFunction {
        cluster,
        worker,
        id,
        _held: (dir, model, coordinator),
    }
}

/// A second worker finishes the job: it succeeds, with exactly one repair of sum_primes (no
/// attempt recorded twice or lost), each function finished once and the job ended once.
async fn finished_once_by_another_worker(cluster: &Cluster, id: &str) {
    let (_successor, _) = cluster.worker("successor").await;
    let result = cluster.wait_job(id, JOB_DEADLINE).await;
    assert_eq!(result["status"], "succeeded", "{result:#}");
    let history = result["improvement_history"].as_array().unwrap();
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(result["quality"]["tests_total"], 9);
    let events = cluster.job_events(id).await;
    assert_eq!(
        events.matches("event: function_done").count(),
        2,
        "each function finished once: {events}"
    );
    assert_eq!(
        events.matches("event: finished").count(),
        1,
        "the job ended once: {events}"
    );
}

#[tokio::test]
async fn a_worker_killed_mid_function_loses_nothing_and_applies_nothing_twice() {
    let MidFunction {
        cluster,
        worker: mut doomed,
        id,
        _held,
    } = mid_function("doomed").await;
    // Kill it in the middle of implementing the first function.
    tokio::time::sleep(Duration::from_millis(300)).await;
    doomed.signal("KILL");
    doomed.wait_exit(Duration::from_secs(60));
    finished_once_by_another_worker(&cluster, &id).await;
    cluster.cleanup().await;
}

/// A worker asked to stop (SIGTERM) mid-function lets go of its task at the step's end: the
/// model call in flight finishes and its attempt is stored, then the task goes back to its
/// queue (not counted) instead of running to its end or being cut mid-call; another worker
/// goes on from what was stored.
#[tokio::test]
async fn a_worker_stopped_mid_function_hands_its_task_on_at_the_steps_end() {
    let MidFunction {
        cluster,
        worker: mut stopping,
        id,
        _held,
    } = mid_function("stopping").await;
    stopping.signal("TERM");
    let code = stopping.wait_exit(Duration::from_secs(180));
    let log = stopping.log_text();
    assert_eq!(code, Some(0), "log:\n{log}");
    assert!(
        log.contains("worker stopping: task handed back at a step's end"),
        "the task was let go of at a step, not run to its end or aborted:\n{log}"
    );
    assert!(
        !log.contains("drain deadline passed"),
        "nothing was cut mid-call:\n{log}"
    );
    finished_once_by_another_worker(&cluster, &id).await;
    cluster.cleanup().await;
}

/// A worker killed after it stored a function's final outcome (the same script completed the
/// function in the plan, releasing its dependant) and before the broker confirmed the
/// dependant's task: whoever takes the task again publishes the dependant, and the job ends
/// once, each function finished once.
#[tokio::test]
async fn a_worker_killed_between_storing_an_outcome_and_publishing_what_it_released_loses_nothing()
{
    let dir = tempfile::tempdir().unwrap();
    let mut rabbit = PrivateRabbit::start();
    let mut cluster = Cluster::new().with_broker(rabbit.url());
    let model = cluster.scripted_model(&slow_script(dir.path(), 300)).await;
    let _coordinator = cluster.coordinator().await;
    let (mut doomed, _) = cluster.worker("doomed").await;
    let (_, body) = cluster
        .submit_job(json!({"instruction": "sieve, then sum the primes"}))
        .await;
    let id = body["job_id"].as_str().unwrap().to_owned();
    // While sieve (which sum_primes depends on) waits for the model, the broker stops: the
    // publish that follows sieve's stored outcome can reach no broker. The order is made, not
    // timed: the model is frozen until the broker is down.
    wait_for_log(&doomed, "implement task started", STARTED).await;
    model.signal("STOP");
    rabbit.stop();
    model.signal("CONT");
    let redis = redis::Client::open(cluster.redis_url.as_str()).unwrap();
    let mut redis = redis.get_multiplexed_async_connection().await.unwrap();
    let marker = format!("{}:job:{id}:fn:sieve:final", cluster.prefix);
    let deadline = Instant::now() + JOB_DEADLINE;
    while !redis::AsyncCommands::exists::<_, bool>(&mut redis, &marker)
        .await
        .unwrap()
    {
        assert!(Instant::now() < deadline, "sieve never finished");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    doomed.signal("KILL");
    doomed.wait_exit(Duration::from_secs(60));
    rabbit.restart();

    let (rescuer, _) = cluster.worker("rescuer").await;
    let result = cluster.wait_job(&id, JOB_DEADLINE).await;
    assert_eq!(result["status"], "succeeded", "{result:#}");
    assert_eq!(result["all_tests_passed"], true);
    let events = cluster.job_events(&id).await;
    assert_eq!(
        events.matches("event: function_done").count(),
        2,
        "each function finished once: {events}"
    );
    assert_eq!(events.matches("event: finished").count(), 1, "{events}");
    // The rescuer took sieve's task again, found its outcome final and published sum_primes,
    // which nobody had: the doomed worker never started it.
    assert!(
        !doomed.log_text().contains("function=sum_primes"),
        "{}",
        doomed.log_text()
    );
    let log = rescuer.log_text();
    assert!(
        log.contains("function=sieve") && log.contains("function=sum_primes"),
        "{log}"
    );
    cluster.cleanup().await;
}

/// Workers advance a job's steps themselves: with its only coordinator killed mid-job, the job
/// still ends (its result is read once a coordinator is back).
#[tokio::test]
async fn a_job_goes_on_to_its_end_without_any_coordinator() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::new();
    let _model = cluster.scripted_model(&slow_script(dir.path(), 400)).await;
    let mut coordinator = cluster.coordinator().await;
    let (worker, _) = cluster.worker("worker").await;
    let (_, body) = cluster
        .submit_job(json!({"instruction": "sieve, then sum the primes"}))
        .await;
    let id = body["job_id"].as_str().unwrap().to_owned();
    wait_for_log(&worker, "implement task started", STARTED).await;
    coordinator.signal("KILL");
    coordinator.wait_exit(Duration::from_secs(60));
    // No coordinator runs while the job's other tasks are published, run and integrated.
    wait_for_log(&worker, "job finished", JOB_DEADLINE).await;
    let _replacement = cluster.coordinator().await;
    let result = cluster.wait_job(&id, JOB_DEADLINE).await;
    assert_eq!(result["status"], "succeeded", "{result:#}");
    assert_eq!(result["all_tests_passed"], true);
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_model_that_answers_garbage_fails_the_job_with_the_recorded_reason() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("garbage.json");
    std::fs::write(
        &script,
        json!({"answers": [{"phase": "plan", "text": "Sure! Here are some functions you might like."}]})
            .to_string(),
    )
    .unwrap();
    let mut cluster = Cluster::new();
    let _model = cluster.scripted_model(&script).await;
    let _coordinator = cluster.coordinator().await;
    let (_worker, _) = cluster.worker("worker").await;
    let (_, body) = cluster.submit_job(json!({"instruction": "anything"})).await;
    let result = cluster
        .wait_job(body["job_id"].as_str().unwrap(), JOB_DEADLINE)
        .await;
    assert_eq!(result["status"], "failed");
    let failure = result["failure"].as_str().unwrap();
    assert!(
        failure.contains("planning failed")
            && failure.contains("invalid 3 times")
            && failure.contains("no JSON"),
        "{failure}"
    );
    // The three answers it gave up on were spent all the same, and are charged.
    let metrics = &result["metrics"];
    assert_eq!(metrics["model_calls"], 3, "{metrics}");
    assert!(
        metrics["tokens"]["prompt"].as_u64().unwrap() > 0,
        "{metrics}"
    );
    assert!(
        metrics["tokens"]["completion"].as_u64().unwrap() > 0,
        "{metrics}"
    );
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_broker_restart_mid_batch_loses_no_job() {
    let dir = tempfile::tempdir().unwrap();
    let mut rabbit = PrivateRabbit::start();
    let mut cluster = Cluster::new().with_broker(rabbit.url());
    let _model = cluster.scripted_model(&slow_script(dir.path(), 300)).await;
    let coordinator = cluster.coordinator().await;
    let (w1, _) = cluster.worker("worker-1").await;
    let (w2, _) = cluster.worker("worker-2").await;

    // One batch of three jobs (POST /v1/batches, JSONL).
    let lines: Vec<String> = (0..3)
        .map(|i| json!({"instruction": format!("sieve, then sum the primes (#{i})")}).to_string())
        .collect();
    let response = cluster
        .http
        .post(format!("{}/v1/batches", cluster.url()))
        .header("content-type", "application/x-ndjson")
        .body(lines.join("\n"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let batch: Value = response.json().await.unwrap();
    let batch_id = batch["batch_id"].as_str().unwrap().to_owned();
    let ids: Vec<String> = batch["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 3);
    wait_for_log(&w1, "implement task started", STARTED).await;
    rabbit.stop();
    tokio::time::sleep(Duration::from_secs(1)).await;
    rabbit.restart();

    // Without the outage the batch takes ~10 s (100 s on a machine ten times slower); a job
    // still running after ten minutes is stuck, and the processes' logs say where.
    let deadline = Instant::now() + JOB_DEADLINE;
    for id in &ids {
        let result = loop {
            let (_, body) =
                tests::get_json(&cluster.http, &format!("{}/v1/jobs/{id}", cluster.url())).await;
            if body["status"] == "succeeded" || body["status"] == "failed" {
                break body;
            }
            if Instant::now() > deadline {
                let logs: String = [&coordinator, &w1, &w2]
                    .iter()
                    .map(|p| format!("--- {}\n{}", p.name, p.log_text()))
                    .collect();
                panic!("job {id} stuck: {body}\n{logs}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(result["status"], "succeeded", "{result:#}");
    }
    let (_, batch) = tests::get_json(
        &cluster.http,
        &format!("{}/v1/batches/{batch_id}", cluster.url()),
    )
    .await;
    assert_eq!(batch["status"], "done", "{batch}");
    assert_eq!(batch["counts"]["succeeded"], 3, "{batch}");
    // No cleanup: the queues live on the private node, which goes with `rabbit`.
}

#[tokio::test]
async fn a_poison_task_is_dead_lettered_after_the_delivery_limit_and_fails_only_its_job() {
    // The example script, plus an outage for one request: every plan call whose prompt
    // mentions POISON answers HTTP 503, so its plan task can never finish and keeps coming back.
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(tests::root().join("examples/scripted-model.json")).unwrap();
    let mut script: Value = serde_json::from_str(&text).unwrap();
    script["answers"].as_array_mut().unwrap().insert(
        0,
        json!({"phase": "plan", "prompt_contains": "POISON", "status": 503}),
    );
    let path = dir.path().join("poison.json");
    std::fs::write(&path, script.to_string()).unwrap();

    let mut cluster = Cluster::new()
        .with_env("CODEGEN__BROKER__DELIVERY_LIMIT", "2")
        .with_env("CODEGEN__MODEL__MAX_ATTEMPTS", "2")
        .with_env("CODEGEN__MODEL__MIN_BACKOFF", "10ms");
    let _model = cluster.scripted_model(&path).await;
    let coordinator = cluster.coordinator().await;
    let (worker, _) = cluster.worker("worker").await;

    let (_, body) = cluster
        .submit_job(json!({"instruction": "POISON: sieve, then sum the primes"}))
        .await;
    let poison = body["job_id"].as_str().unwrap().to_owned();
    let (_, body) = cluster
        .submit_job(json!({"instruction": "sieve, then sum the primes"}))
        .await;
    let healthy = body["job_id"].as_str().unwrap().to_owned();

    let result = cluster.wait_job(&poison, JOB_DEADLINE).await;
    assert_eq!(result["status"], "failed", "{result:#}");
    let failure = result["failure"].as_str().unwrap();
    assert!(
        failure.contains("dead-lettered") && failure.contains("delivery limit"),
        "{failure}"
    );
    // First delivery plus two redeliveries, each handed back after the model outage.
    assert_eq!(
        worker
            .log_text()
            .lines()
            .filter(|l| l.contains("pipeline task handed back") && l.contains(&poison))
            .count(),
        3,
        "{}",
        worker.log_text()
    );
    assert!(coordinator.log_text().contains("task dead-lettered"));

    let result = cluster.wait_job(&healthy, JOB_DEADLINE).await;
    assert_eq!(result["status"], "succeeded", "{result:#}");
    assert_eq!(result["all_tests_passed"], true);
    cluster.cleanup().await;
}

/// Jobs through two coordinators on two workers, so b, c and d finish on different processes
/// and race to release e: each function must still be published exactly once (the store's
/// completion script hands a dependant to one caller). Steps taken again are covered by
/// `flow`'s unit tests and the killed-worker tests above.
#[tokio::test]
async fn with_two_coordinators_every_function_is_published_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    // Later jobs may reuse functions from the function-level cache; their tasks are still
    // published (and logged as started) once per job and function.
    let mut cluster = Cluster::new();
    let _model = cluster
        .scripted_model(&tests::diamond_script(dir.path(), 150))
        .await;
    let _c1 = cluster.coordinator().await;
    let (_c2, second) = cluster.another_coordinator("coordinator-2").await;
    let (w1, _) = cluster.worker("worker-1").await;
    let (w2, _) = cluster.worker("worker-2").await;

    // Jobs through both coordinators; b, c and d finish on either worker and race to release
    // e.
    let mut ids = Vec::new();
    for i in 0..4 {
        let base = if i % 2 == 0 {
            cluster.url()
        } else {
            second.clone()
        };
        let response = cluster
            .http
            .post(format!("{base}/v1/jobs"))
            .json(&json!({"instruction": format!("a diamond of adders (#{i})")}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 202);
        let body: Value = response.json().await.unwrap();
        ids.push(body["job_id"].as_str().unwrap().to_owned());
    }
    for id in &ids {
        let result = cluster.wait_job(id, JOB_DEADLINE).await;
        assert_eq!(result["status"], "succeeded", "{result:#}");
        assert_eq!(result["test_results"].as_array().unwrap().len(), 5);
    }
    // Every implement task was published once: each (job, function) was settled once in all
    // (a task handed back after an infrastructure blip is `requeued`, not counted; a
    // duplicate would be settled twice, `completed` or `duplicate`).
    let logs = format!("{}{}", w1.log_text(), w2.log_text());
    let settled = |id: &str, function: &str| {
        logs.lines()
            .filter(|l| {
                l.contains("task finished")
                    && l.contains(&format!("job={id}"))
                    && (l.contains(&format!("function=\"{function}\""))
                        || l.contains(&format!("function={function} ")))
                    && !l.contains("outcome=\"requeued\"")
                    && !l.contains("outcome=requeued")
            })
            .count()
    };
    for id in &ids {
        for name in ["a", "b", "c", "d", "e"] {
            assert_eq!(settled(id, name), 1, "job {id}, function {name}:\n{logs}");
        }
        // The integrate task (and the plan task) carry no function.
        assert_eq!(
            settled(id, "-"),
            2,
            "job {id}: one plan, one integrate\n{logs}"
        );
    }
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_job_nothing_works_on_fails_at_its_deadline() {
    // No worker at all: the plan task waits in the queue; the coordinator's deadline ends it.
    let cluster = Cluster::new().with_env("CODEGEN__COORDINATOR__JOB_DEADLINE", "2s");
    let _coordinator = cluster.coordinator().await;
    let (status, body) = cluster
        .submit_job(json!({"instruction": "sieve, then sum the primes"}))
        .await;
    assert_eq!(status, 202, "{body}");
    let result = cluster
        .wait_job(body["job_id"].as_str().unwrap(), Duration::from_secs(300))
        .await;
    assert_eq!(result["status"], "failed", "{result:#}");
    let failure = result["failure"].as_str().unwrap();
    assert!(
        failure.contains("deadline exceeded") && failure.contains("2s"),
        "{failure}"
    );
    cluster.cleanup().await;
}
