//! A few seconds without Redis, RabbitMQ, Docker or the model cost time, never a job: each
//! test runs a batch of 50 generation jobs with plans of their own (scripted FAKE model, 300 ms
//! an answer, two workers) through one outage of a real service, then checks that every job
//! has exactly one final result, succeeded and tested, and that nothing was dead-lettered.
//! Each prints a `RELIABILITY` line with its figures (RELIABILITY.md collects them).

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::time::{Duration, Instant};

use serde_json::Value;
use tests::faults::{DockerProxy, ModelServer, distinct_job, distinct_jobs_script};
use tests::{Cluster, PrivateRabbit, PrivateRedis, Process};

const JOBS: usize = 50;
const LATENCY_MS: u64 = 300;

/// Everything a batch runs on, each part of it the test's own so it can be stopped.
struct Rig {
    cluster: Cluster,
    redis: PrivateRedis,
    rabbit: Option<PrivateRabbit>,
    model: ModelServer,
    docker: DockerProxy,
    coordinator: Process,
    workers: Vec<(Process, String)>,
    jobs: Vec<String>,
    submitted: Instant,
    _dir: tempfile::TempDir,
}

impl Rig {
    /// Private Redis (AOF), optionally a private RabbitMQ node, the model server, a Docker
    /// socket proxy, a coordinator and two workers; then the batch.
    async fn start(jobs: usize, private_rabbit: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let redis = PrivateRedis::start_persistent();
        let rabbit = private_rabbit.then(PrivateRabbit::start);
        let model = ModelServer::start(
            &distinct_jobs_script(dir.path(), jobs, LATENCY_MS),
            dir.path(),
        );
        let docker = DockerProxy::start(dir.path());
        let mut cluster = Cluster::new()
            .with_redis(redis.url())
            .use_model(&model)
            .with_env("CODEGEN__SANDBOX__DOCKER_HOST", &docker.host());
        if let Some(rabbit) = &rabbit {
            cluster = cluster.with_broker(rabbit.url());
        }
        let coordinator = cluster.coordinator().await;
        let workers = vec![
            cluster.worker("worker-1").await,
            cluster.worker("worker-2").await,
        ];
        let instructions: Vec<String> = (0..jobs).map(distinct_job).collect();
        let submitted = Instant::now();
        let ids = cluster.submit_batch(&instructions).await;
        Self {
            cluster,
            redis,
            rabbit,
            model,
            docker,
            coordinator,
            workers,
            jobs: ids,
            submitted,
            _dir: dir,
        }
    }

    /// Waits until functions are being implemented (jobs are in flight), up to minutes (the
    /// deadline only bounds a failure).
    async fn in_flight(&self) {
        let deadline = Instant::now() + Duration::from_secs(300);
        while !self
            .workers
            .iter()
            .any(|(w, _)| w.log_text().matches("implement task started").count() >= 2)
        {
            assert!(Instant::now() < deadline, "no job got to implementing");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Every job final, exactly once, succeeded and tested; no dead letter. Prints and
    /// returns the batch's time from submission.
    async fn finish(self, fault: &str, seconds: u64) -> Duration {
        // Half a minute to two minutes here (RELIABILITY.md), ten times that on a slow machine:
        // the deadline only bounds a failure.
        let finals = match self
            .cluster
            .try_wait_jobs_through_outages(&self.jobs, Duration::from_secs(3600))
            .await
        {
            Ok(finals) => finals,
            Err(e) => {
                // Evidence for a stall: what each process last said, and the broker's view.
                let tail = |text: String| -> String {
                    let lines: Vec<&str> = text.lines().collect();
                    lines[lines.len().saturating_sub(150)..].join("\n")
                };
                let mut report = format!("{fault}: {e}\n");
                for (w, _) in &self.workers {
                    report.push_str(&format!("--- {}\n{}\n", w.name, tail(w.log_text())));
                }
                report.push_str(&format!(
                    "--- coordinator\n{}\n",
                    tail(self.coordinator.log_text())
                ));
                if let Some(rabbit) = &self.rabbit {
                    report.push_str(&format!("--- rabbitmq\n{}", rabbit.state()));
                }
                panic!("{report}");
            }
        };
        let elapsed = self.submitted.elapsed();
        let succeeded = finals
            .iter()
            .filter(|r| {
                r["status"] == "succeeded"
                    && r["all_tests_passed"] == true
                    && r["validation"] == "tested"
            })
            .count();
        println!(
            "RELIABILITY fault={fault:?} seconds={seconds} jobs={} succeeded={succeeded} elapsed_s={:.1}",
            self.jobs.len(),
            elapsed.as_secs_f64()
        );
        let logs = |name: &str| -> String {
            self.workers
                .iter()
                .map(|(w, _)| format!("--- {name} {}\n{}", w.name, w.log_text()))
                .collect()
        };
        for result in &finals {
            assert!(
                result["status"] == "succeeded"
                    && result["all_tests_passed"] == true
                    && result["validation"] == "tested",
                "{fault}: {result:#}\n{}",
                logs("worker")
            );
        }
        // Exactly one final result each: one `finished` event in each job's stream.
        for id in &self.jobs {
            let events = self.cluster.job_events(id).await;
            assert_eq!(
                events.matches("event: finished").count(),
                1,
                "{fault}: job {id}\n{events}"
            );
        }
        let metrics = self
            .cluster
            .http
            .get(format!("{}/metrics", self.cluster.url()))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let dead: f64 = metrics
            .lines()
            .filter(|l| l.starts_with("codegen_dead_letters_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        assert_eq!(dead, 0.0, "{fault}: dead letters\n{metrics}");
        let Self {
            cluster,
            rabbit,
            mut redis,
            mut model,
            mut docker,
            workers,
            ..
        } = self;
        drop(workers);
        if rabbit.is_none() {
            cluster.cleanup().await;
        }
        model.stop();
        docker.cut();
        redis.stop();
        elapsed
    }

    fn stop_redis(&mut self) {
        tokio::task::block_in_place(|| self.redis.stop());
    }

    fn start_redis(&mut self) {
        tokio::task::block_in_place(|| self.redis.restart());
    }

    fn stop_rabbit(&mut self) {
        let rabbit = self.rabbit.as_mut().expect("a private rabbit");
        tokio::task::block_in_place(|| rabbit.stop());
    }

    fn start_rabbit(&mut self) {
        let rabbit = self.rabbit.as_mut().expect("a private rabbit");
        tokio::task::block_in_place(|| rabbit.restart());
    }
}

async fn pause(seconds: u64) {
    tokio::time::sleep(Duration::from_secs(seconds)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_without_faults_succeeds_whole() {
    let rig = Rig::start(JOBS, false).await;
    rig.finish("none", 0).await;
}

/// The reference for the batch that meets every fault, which is twice as large.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_double_batch_without_faults_succeeds_whole() {
    let rig = Rig::start(2 * JOBS, false).await;
    rig.finish("none", 0).await;
}

async fn redis_down_for(seconds: u64) {
    let mut rig = Rig::start(JOBS, false).await;
    rig.in_flight().await;
    rig.stop_redis();
    pause(seconds).await;
    rig.start_redis();
    rig.finish("redis down", seconds).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_for_5s_costs_time_not_jobs() {
    redis_down_for(5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_for_30s_costs_time_not_jobs() {
    redis_down_for(30).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_down_for_15s_costs_time_not_jobs() {
    let mut rig = Rig::start(JOBS, true).await;
    rig.in_flight().await;
    rig.stop_rabbit();
    pause(15).await;
    rig.start_rabbit();
    rig.finish("rabbitmq down", 15).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_unreachable_for_15s_costs_time_not_jobs() {
    let mut rig = Rig::start(JOBS, false).await;
    rig.in_flight().await;
    rig.docker.cut();
    // The workers notice (they look every 2 s), say so, and take no more work.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, ready) = rig.cluster.readyz(&rig.workers[0].1).await;
        if status == 503 && ready["checks"]["docker"].is_string() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "readyz never named docker: {ready}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    pause(15).await;
    rig.docker.restore();
    rig.finish("docker unreachable", 15).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_refusing_connections_for_20s_costs_time_not_jobs() {
    let mut rig = Rig::start(JOBS, false).await;
    rig.in_flight().await;
    rig.model.stop();
    // A worker that fails a call probes the model, names it in /readyz and pauses.
    let deadline = Instant::now() + Duration::from_secs(120);
    'named: loop {
        for (_, ops) in &rig.workers {
            let (_, ready): (u16, Value) = rig.cluster.readyz(ops).await;
            if ready["checks"]["model"]
                .as_str()
                .is_some_and(|m| m.contains("model unreachable"))
            {
                break 'named;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no worker named the model as down"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    pause(20).await;
    rig.model.restart();
    rig.finish("model refusing connections", 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_in_one_batch_costs_time_not_jobs() {
    let mut rig = Rig::start(2 * JOBS, true).await;
    rig.in_flight().await;
    // A worker killed mid-task and started again.
    rig.workers[0].0.signal("KILL");
    rig.workers[0].0.wait_exit(Duration::from_secs(60));
    rig.workers[0] = rig.cluster.worker("worker-1b").await;
    pause(2).await;
    rig.stop_redis();
    pause(5).await;
    rig.start_redis();
    pause(2).await;
    rig.stop_rabbit();
    pause(15).await;
    rig.start_rabbit();
    pause(2).await;
    rig.docker.cut();
    pause(15).await;
    rig.docker.restore();
    pause(2).await;
    rig.model.stop();
    pause(20).await;
    rig.model.restart();
    rig.finish(
        "worker SIGKILL, then all of the above, one after another",
        57,
    )
    .await;
}
