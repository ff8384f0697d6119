//! Faults across hosts, on the compose stack of `deploy/compose` (2 coordinators behind
//! HAProxy, 3 workers, a three-node RabbitMQ cluster, Redis, the scripted FAKE model): during a
//! batch of generation jobs (distinct plans, 300 ms an answer) and plain executions, one fault
//! per test; then every job and execution has exactly one final, correct result, and once the
//! stack is idle no sandbox container is left over. Each prints a `STACK` line with its
//! figures (RELIABILITY.md collects them).
//!
//! The longer run: `scripts/test-deploy` (builds the images, runs these one at a time).
//! STACK_JOBS (default 200) and STACK_EXECUTIONS (default 2000) size the workload.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tests::Cluster;
use tests::faults::{distinct_job, distinct_jobs_script};
use tests::stack::Stack;

const LATENCY_MS: u64 = 300;
/// Jobs the trickling client may submit during a fault, beyond the batch (the scripted model
/// has answers for them).
const TRICKLE_MAX: usize = 200;

fn sized(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The stack, its client, and the work in flight.
struct Run {
    stack: Stack,
    client: Cluster,
    jobs: Vec<String>,
    executions: Vec<(String, String)>,
    started: Instant,
    _dir: tempfile::TempDir,
}

impl Run {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let jobs = sized("STACK_JOBS", 200);
        let script = distinct_jobs_script(dir.path(), jobs + TRICKLE_MAX, LATENCY_MS);
        let stack = tokio::task::block_in_place(|| Stack::up(&script));
        let client = stack.client();
        let started = Instant::now();
        let instructions: Vec<String> = (0..jobs).map(distinct_job).collect();
        let job_ids = client.submit_batch(&instructions).await;
        let executions = submit_executions(&client, sized("STACK_EXECUTIONS", 2000)).await;
        Self {
            stack,
            client,
            jobs: job_ids,
            executions,
            started,
            _dir: dir,
        }
    }

    /// Waits until generation work is under way: some jobs past planning. (Through the API:
    /// polling the containers' logs would load the engine that the workers log through.)
    async fn in_flight(&self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let mut running = 0;
            for id in self.jobs.iter().take(20) {
                let url = format!("{}/v1/jobs/{id}", self.client.url());
                if let Ok(response) = self.client.http.get(&url).send().await
                    && let Ok(body) = response.json::<Value>().await
                    && body["status"] != "queued"
                    && body["status"] != "planning"
                {
                    running += 1;
                }
            }
            if running >= 3 {
                return;
            }
            assert!(Instant::now() < deadline, "no job got past planning");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Every job and execution final once, correct; no sandbox left over once idle.
    async fn account(self, fault: &str) {
        let finals = self
            .client
            .wait_jobs_through_outages(&self.jobs, Duration::from_secs(1200))
            .await;
        let bad: Vec<&Value> = finals
            .iter()
            .filter(|r| {
                !(r["status"] == "succeeded"
                    && r["all_tests_passed"] == true
                    && r["validation"] == "tested")
            })
            .collect();
        assert!(
            bad.is_empty(),
            "{fault}: {} jobs not succeeded, e.g. {:#}\n{}",
            bad.len(),
            bad[0],
            self.stack.logs(&[])
        );
        // Exactly one `finished` per job in its progress stream.
        for id in &self.jobs {
            let events = self.client.job_events(id).await;
            assert_eq!(
                events.matches("event: finished\n").count(),
                1,
                "{fault}: job {id}: {events}"
            );
        }
        let results = wait_executions(&self.client, &self.executions).await;
        let jobs_done = self.started.elapsed();
        for ((id, expected), result) in self.executions.iter().zip(&results) {
            assert_eq!(
                result["status"], "passed",
                "{fault}: execution {id}: {result}"
            );
            assert_eq!(
                result["stdout"],
                expected.as_str(),
                "{fault}: {id}: {result}"
            );
        }
        // Idle: only warm pool containers, none created-but-never-started or exited.
        let deadline = Instant::now() + Duration::from_secs(120);
        let leftovers = loop {
            let stale: Vec<String> = self
                .stack
                .sandboxes()
                .into_iter()
                .filter(|s| !s.contains(" Up "))
                .collect();
            if stale.is_empty() || Instant::now() > deadline {
                break stale;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        };
        assert!(
            leftovers.is_empty(),
            "{fault}: sandboxes left over: {leftovers:?}"
        );
        let redone = self.redone().await;
        println!(
            "STACK fault={fault:?} jobs={} executions={} all_final_once=true elapsed_s={:.1} redone={redone}",
            self.jobs.len(),
            self.executions.len(),
            jobs_done.as_secs_f64()
        );
    }
}

impl Run {
    /// Deliveries that did not complete where they first landed, over the whole run, from the
    /// stack's Prometheus (its `increase` spans the counter resets of restarted workers).
    async fn redone(&self) -> String {
        // One more scrape after the last task.
        tokio::time::sleep(Duration::from_secs(12)).await;
        let query = "sum by (outcome) (increase(codegen_worker_tasks_total[1h])) or label_replace(sum(increase(codegen_worker_redeliveries_total[1h])), \"outcome\", \"redelivered\", \"\", \"\")";
        let url = format!(
            "http://127.0.0.1:{}/api/v1/query",
            self.stack.prometheus_port
        );
        let Ok(response) = self
            .client
            .http
            .get(&url)
            .query(&[("query", query)])
            .send()
            .await
        else {
            return "unknown".into();
        };
        let body: Value = response.json().await.unwrap_or_default();
        let mut parts = Vec::new();
        for series in body["data"]["result"].as_array().into_iter().flatten() {
            let outcome = series["metric"]["outcome"].as_str().unwrap_or("?");
            let value: f64 = series["value"][1]
                .as_str()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            if outcome != "completed" {
                parts.push(format!("{outcome}:{}", value.round()));
            }
        }
        parts.sort();
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(",")
        }
    }
}

/// A client that submits one job through the proxy every 1.3 s while a fault lasts, each with
/// an `Idempotency-Key` of its own (as the CLI does, so the proxy may send it to the other
/// coordinator), and keeps every answer: each must be accepted (and then finish like the
/// batch's) or refused with a reason.
struct Trickle {
    stop: tokio_util::sync::CancellationToken,
    answers: tokio::task::JoinHandle<Vec<(u16, Value)>>,
}

impl Trickle {
    fn start(run: &Run) -> Self {
        let stop = tokio_util::sync::CancellationToken::new();
        let (client, first, stopped) = (run.client.http.clone(), run.jobs.len(), stop.clone());
        let url = format!("{}/v1/jobs", run.client.url());
        let answers = tokio::spawn(async move {
            let mut answers = Vec::new();
            for i in first..first + TRICKLE_MAX {
                let sent = client
                    .post(&url)
                    .header("idempotency-key", uuid::Uuid::new_v4().to_string())
                    .json(&json!({ "instruction": distinct_job(i) }))
                    .send()
                    .await;
                answers.push(match sent {
                    Ok(response) => {
                        let status = response.status().as_u16();
                        (status, response.json().await.unwrap_or(Value::Null))
                    }
                    Err(e) => (0, json!({ "error": e.to_string() })),
                });
                tokio::select! {
                    _ = stopped.cancelled() => break,
                    _ = tokio::time::sleep(Duration::from_millis(1300)) => {}
                }
            }
            answers
        });
        Self { stop, answers }
    }

    /// Stops submitting; the accepted jobs' ids and a summary ("accepted N, refused M: ...").
    async fn finish(self) -> (Vec<String>, String) {
        self.stop.cancel();
        let answers = self.answers.await.unwrap();
        let mut accepted = Vec::new();
        let mut refused = Vec::new();
        for (status, body) in &answers {
            match (status, body["job_id"].as_str()) {
                (202, Some(id)) => accepted.push(id.to_owned()),
                _ => {
                    let reason = body["code"]
                        .as_str()
                        .or(body["error"].as_str())
                        .unwrap_or_default();
                    assert!(
                        *status >= 400 && !reason.is_empty(),
                        "an answer that is neither accepted nor a refusal with a reason: {status} {body}"
                    );
                    refused.push(format!("{status} {reason}"));
                }
            }
        }
        let summary = format!(
            "submitted={} accepted={} refused={} {:?}",
            answers.len(),
            accepted.len(),
            refused.len(),
            refused.iter().take(3).collect::<Vec<_>>()
        );
        (accepted, summary)
    }
}

/// Polls `url` (a `/readyz`) every 100 ms until it is not 200; how long that took (`None`:
/// still ready after `within`).
async fn unready_after(http: &reqwest::Client, url: &str, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < within {
        let ready = http
            .get(url)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200);
        if !ready {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// One silent partition: `service`'s packets to `peers` dropped for `seconds` while the batch
/// runs and a client trickles jobs in; then everything is accounted for, the trickle's
/// accepted jobs too. `ops`: the port of `service`'s `/readyz`.
async fn silent_partition(service: &str, ops: u16, peers: &[&str], seconds: u64) {
    let mut run = Run::start().await;
    run.in_flight().await;
    let readyz = format!("http://{}:{ops}/readyz", run.stack.address(service));
    let trickle = Trickle::start(&run);
    tokio::task::block_in_place(|| run.stack.drop_packets(service, peers));
    let cut = Instant::now();
    let unready = unready_after(&run.client.http, &readyz, Duration::from_secs(seconds)).await;
    pause(seconds.saturating_sub(cut.elapsed().as_secs())).await;
    tokio::task::block_in_place(|| run.stack.restore_packets(service));
    let (accepted, trickled) = trickle.finish().await;
    assert!(
        unready.is_some(),
        "{service} stayed ready through {seconds} s cut off from {peers:?}"
    );
    println!(
        "STACK-PARTITION service={service} peers={peers:?} seconds={seconds} unready_after_s={:.1} trickle: {trickled}",
        unready.unwrap_or_default().as_secs_f64()
    );
    run.jobs.extend(accepted);
    run.account(&format!(
        "{service}'s packets to {peers:?} dropped {seconds} s"
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "longer run on the compose stack: scripts/test-deploy"]
async fn a_coordinators_packets_to_rabbitmq_dropped_for_60s_lose_nothing() {
    silent_partition(
        "coordinator-1",
        8080,
        &["rabbit-1", "rabbit-2", "rabbit-3"],
        60,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "longer run on the compose stack: scripts/test-deploy"]
async fn a_workers_packets_to_rabbitmq_dropped_for_60s_lose_nothing() {
    silent_partition("worker-2", 9090, &["rabbit-1", "rabbit-2", "rabbit-3"], 60).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "longer run on the compose stack: scripts/test-deploy"]
async fn a_workers_packets_to_redis_dropped_for_40s_lose_nothing() {
    silent_partition("worker-2", 9090, &["redis"], 40).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "longer run on the compose stack: scripts/test-deploy"]
async fn a_coordinators_packets_to_redis_dropped_for_40s_lose_nothing() {
    silent_partition("coordinator-1", 8080, &["redis"], 40).await;
}

/// Submits `n` executions (`print(i)`), without waiting; their ids and expected output.
async fn submit_executions(client: &Cluster, n: usize) -> Vec<(String, String)> {
    let mut out = Vec::with_capacity(n);
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let items: Vec<Value> = chunk
            .iter()
            .map(|i| json!({"language": "python", "code": format!("print({i})")}))
            .collect();
        let response = client
            .http
            .post(format!("{}/v1/executions/batch?wait=false", client.url()))
            .json(&json!({ "items": items }))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{}", response.status());
        let body: Value = response.json().await.unwrap();
        for (i, result) in chunk.iter().zip(body["results"].as_array().unwrap()) {
            out.push((
                result["execution_id"].as_str().unwrap().to_owned(),
                format!("{i}\n"),
            ));
        }
    }
    out
}

/// Polls every execution until it has a verdict (through faults), bounded.
async fn wait_executions(client: &Cluster, ids: &[(String, String)]) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(900);
    let mut finals: Vec<Option<Value>> = vec![None; ids.len()];
    loop {
        for (i, (id, _)) in ids.iter().enumerate() {
            if finals[i].is_some() {
                continue;
            }
            let url = format!("{}/v1/executions/{id}", client.url());
            let Ok(response) = client.http.get(&url).send().await else {
                continue;
            };
            if response.status() != 200 {
                continue;
            }
            let Ok(body) = response.json::<Value>().await else {
                continue;
            };
            if body["status"] != "queued" && body["status"] != "running" {
                finals[i] = Some(body);
            }
        }
        let left = finals.iter().filter(|f| f.is_none()).count();
        if left == 0 {
            return finals.into_iter().flatten().collect();
        }
        assert!(
            Instant::now() < deadline,
            "{left} of {} executions without a verdict",
            ids.len()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

async fn pause(seconds: u64) {
    tokio::time::sleep(Duration::from_secs(seconds)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "longer run on the compose stack: scripts/test-deploy"]
async fn the_same_work_without_a_fault() {
    let run = Run::start().await;
    run.in_flight().await;
    run.account("none").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "longer run on the compose stack: scripts/test-deploy"]
async fn a_worker_killed_and_another_paused_past_its_consumer_timeout_lose_nothing() {
    let run = Run::start().await;
    run.in_flight().await;
    tokio::task::block_in_place(|| {
        run.stack.kill("worker-1");
        run.stack.pause("worker-2");
    });
    // Long enough for the broker to see worker-2's connection die (missed heartbeats, 60 s)
    // and give its deliveries to the others.
    pause(90).await;
    tokio::task::block_in_place(|| {
        run.stack.unpause("worker-2");
        run.stack.start("worker-1");
    });
    run.account("worker-1 killed, worker-2 paused 90 s").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "longer run on the compose stack: scripts/test-deploy"]
async fn a_worker_cut_off_the_network_and_reconnected_loses_nothing() {
    let run = Run::start().await;
    run.in_flight().await;
    tokio::task::block_in_place(|| run.stack.disconnect("worker-2"));
    pause(30).await;
    tokio::task::block_in_place(|| run.stack.connect("worker-2"));
    run.account("worker-2 disconnected 30 s").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "longer run on the compose stack: scripts/test-deploy"]
async fn a_rabbitmq_node_lost_then_the_queue_leader_loses_nothing() {
    let run = Run::start().await;
    run.in_flight().await;
    tokio::task::block_in_place(|| run.stack.stop("rabbit-3", 30));
    pause(20).await;
    tokio::task::block_in_place(|| run.stack.start("rabbit-3"));
    pause(20).await;
    // Now the node that leads the task queue.
    let leader = tokio::task::block_in_place(|| {
        run.stack.docker(&[
            "exec",
            &run.stack.container("rabbit-1"),
            "rabbitmqctl",
            "-q",
            "list_queues",
            "name",
            "leader",
        ])
    });
    let leader = leader
        .lines()
        .find(|l| l.split_whitespace().next() == Some("codegen.tasks"))
        .and_then(|l| l.split('@').nth(1))
        .unwrap()
        .trim()
        .to_owned();
    tokio::task::block_in_place(|| run.stack.stop(&leader, 30));
    pause(20).await;
    tokio::task::block_in_place(|| run.stack.start(&leader));
    run.account(&format!(
        "rabbit-3 stopped 20 s, then the tasks leader {leader}"
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "longer run on the compose stack: scripts/test-deploy"]
async fn a_coordinator_killed_mid_batch_while_clients_poll_the_other_loses_nothing() {
    let run = Run::start().await;
    run.in_flight().await;
    tokio::task::block_in_place(|| run.stack.kill("coordinator-1"));
    pause(20).await;
    tokio::task::block_in_place(|| run.stack.start("coordinator-1"));
    run.account("coordinator-1 killed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "longer run on the compose stack: scripts/test-deploy"]
async fn redis_restarted_mid_batch_keeps_finished_results() {
    let run = Run::start().await;
    run.in_flight().await;
    tokio::task::block_in_place(|| {
        run.stack.stop("redis", 10);
        run.stack.start("redis");
    });
    run.account("redis restarted").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "longer run on the compose stack: scripts/test-deploy"]
async fn a_rolling_restart_of_every_coordinator_and_worker_loses_nothing() {
    let run = Run::start().await;
    run.in_flight().await;
    for service in [
        "coordinator-1",
        "coordinator-2",
        "worker-1",
        "worker-2",
        "worker-3",
    ] {
        tokio::task::block_in_place(|| {
            run.stack.stop(service, 45);
            run.stack.start(service);
            run.stack.wait_ready(Duration::from_secs(120));
        });
    }
    run.account("rolling restart (SIGTERM drain)").await;
}

/// Sessions on the compose stack: the worker container holding most of them is killed
/// (`docker kill`: its host gone, as far as the cluster can tell); each session's next call,
/// through the proxy and either coordinator, restores it on a live worker with its state and
/// files, those of the other workers answer as before, and nothing is left once they are
/// deleted (containers, checkpoint keys).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "longer run on the compose stack: scripts/test-deploy"]
async fn a_worker_container_killed_loses_no_session() {
    use redis::AsyncCommands;

    const SESSIONS: usize = 9;
    let dir = tempfile::tempdir().unwrap();
    let script = distinct_jobs_script(dir.path(), 1, LATENCY_MS);
    let stack = tokio::task::block_in_place(|| Stack::up(&script));
    let client = stack.client();
    let base = client.url();
    let post = |url: String, body: Value| {
        let http = client.http.clone();
        async move {
            let response = http.post(url).json(&body).send().await.unwrap();
            let status = response.status().as_u16();
            (
                status,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    // Runs a cell, waiting out a moment with no worker to restore on (bounded).
    let run = |id: String, code: String| {
        let post = &post;
        let base = base.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(300);
            loop {
                let (status, answer) = post(
                    format!("{base}/v1/sessions/{id}/run"),
                    json!({ "code": code }),
                )
                .await;
                if status == 503 && answer["code"] == "no_session_host" && Instant::now() < deadline
                {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
                return (status, answer);
            }
        }
    };
    let mut ids = Vec::new();
    for i in 0..SESSIONS {
        let deadline = Instant::now() + Duration::from_secs(300);
        let session = loop {
            let (status, session) =
                post(format!("{base}/v1/sessions"), json!({"language": "python"})).await;
            if status == 201 {
                break session;
            }
            assert!(Instant::now() < deadline, "{status} {session}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let id = session["id"].as_str().unwrap().to_owned();
        let (status, set) = run(
            id.clone(),
            format!("v = {i}\nopen('v.txt', 'w').write(str(v) * 1000)\nv"),
        )
        .await;
        assert_eq!(
            (status, &set["checkpoint"]["saved"]),
            (200, &json!(true)),
            "{set}"
        );
        ids.push(id);
    }
    // Which worker holds which session, from the records (the host's advertised URL names
    // its compose service).
    let redis_url = format!("redis://{}:6379/", stack.address("redis"));
    let mut redis = redis::Client::open(redis_url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut hosts = Vec::new();
    for id in &ids {
        let url: String = redis
            .hget(format!("codegen:session:{id}"), "host_url")
            .await
            .unwrap();
        hosts.push(
            url.trim_start_matches("http://")
                .split(':')
                .next()
                .unwrap()
                .to_owned(),
        );
    }
    let victim = ["worker-1", "worker-2", "worker-3"]
        .into_iter()
        .max_by_key(|w| hosts.iter().filter(|h| h.as_str() == *w).count())
        .unwrap();
    let on_victim = hosts.iter().filter(|h| h.as_str() == victim).count();
    stack.kill(victim);
    let started = Instant::now();
    for (i, id) in ids.iter().enumerate() {
        let (status, after) = run(
            id.clone(),
            "(v, open('v.txt').read() == str(v) * 1000)".into(),
        )
        .await;
        assert_eq!((status, &after["status"]), (200, &json!("ok")), "{after}");
        assert_eq!(after["value"], format!("({i}, True)"), "{after}");
        assert_eq!(
            after.get("restored").is_some(),
            hosts[i] == victim,
            "session {i} on {}: {after}",
            hosts[i]
        );
    }
    let mut restores = 0;
    for id in &ids {
        let view: Value = client
            .http
            .get(format!("{base}/v1/sessions/{id}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            (&view["state"], &view["cells"]),
            (&json!("live"), &json!(2)),
            "{view}"
        );
        restores += view["restores"].as_u64().unwrap();
    }
    assert_eq!(restores, on_victim as u64);
    println!(
        "STACK sessions: {victim} killed holding {on_victim} of {SESSIONS} sessions; all answered with their state in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    for id in &ids {
        let response = client
            .http
            .delete(format!("{base}/v1/sessions/{id}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let containers = stack.docker(&[
            "ps",
            "-aq",
            "--filter",
            &format!("label=org.codegen.sandbox={}", stack.project),
            "--filter",
            "label=org.codegen.session",
        ]);
        let keys: Vec<String> = redis.keys("codegen:session:*:checkpoint").await.unwrap();
        if containers.trim().is_empty() && keys.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left behind: containers {containers:?}, checkpoint keys {keys:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
