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
        let script = distinct_jobs_script(dir.path(), jobs, LATENCY_MS);
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
