//! The whole generation pipeline in one process, without Docker, RabbitMQ or Redis: a real
//! coordinator (HTTP API) and real workers (pipeline) on the in-memory broker and one set of
//! in-memory stores (`store::Stores::memory`: jobs, usage, quotas, webhooks, the index), a
//! scripted model (a FAKE answering from a script) and a FAKE sandbox that runs nothing. It checks the logic — the DAG, repair, partial failure, re-planning — in a
//! second; the end-to-end tests check the same against the real services.
//!
//! The FAKE sandbox answers the pipeline's harness runs (`proto::harness`): every case of a
//! function passes unless its module contains [`FAILS`], and the quality analysis reports a
//! fixed, perfect module.

use std::sync::Arc;
use std::time::Duration;

use proto::harness::{
    CaseReport, CasesReport, CasesRequest, HarnessReport, HarnessRequest, HarnessRun,
    IntegrationReport, ManyCasesReport, QualityReport,
};
use proto::{ErrorKind, ExecutionResult, Progress, Status, TaskId};
use sandbox::{HarnessOutcome, ScriptedSandbox};
use serde_json::{Value, json};
use store::{JobStore, MemoryJobs, MemoryStore};
use tokio_util::sync::CancellationToken;

/// Code containing this line fails every case the FAKE sandbox runs against it.
pub const FAILS: &str = "# FAKE: the cases fail";

/// A coordinator and workers in this process.
#[derive(Debug)]
pub struct InProcess {
    pub url: String,
    pub http: reqwest::Client,
    pub jobs: MemoryJobs,
    pub sandbox: ScriptedSandbox,
    cancel: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl InProcess {
    /// Starts a coordinator and `workers` workers answering from `script` (a scripted model's
    /// script: `{"answers": [...]}`).
    pub async fn start(script: Value, workers: usize) -> Self {
        Self::start_with(script, workers, fake_sandbox(), 0).await
    }

    /// [`InProcess::start`] with `sandbox` (e.g. one that delegates to [`fake_harness`]), and each
    /// worker's sandbox runs taking turns at a pool of `pool_size` (0: no turns).
    pub async fn start_with(
        script: Value,
        workers: usize,
        sandbox: ScriptedSandbox,
        pool_size: usize,
    ) -> Self {
        Self::launch(
            script,
            workers,
            sandbox,
            pool_size,
            coordinator::Options::default(),
            worker::pipeline::Options::default(),
        )
        .await
    }

    /// [`InProcess::start`] with the workers' pipeline `options` (e.g. `repair_patience`).
    pub async fn start_with_pipeline(
        script: Value,
        workers: usize,
        options: worker::pipeline::Options,
    ) -> Self {
        let coordinator = coordinator::Options::default();
        Self::launch(script, workers, fake_sandbox(), 0, coordinator, options).await
    }

    /// [`InProcess::start`] with the coordinator's `options` (tenants and their keys and
    /// quotas, webhook targets, ...).
    pub async fn start_with_options(
        script: Value,
        workers: usize,
        options: coordinator::Options,
    ) -> Self {
        let pipeline = worker::pipeline::Options::default();
        Self::launch(script, workers, fake_sandbox(), 0, options, pipeline).await
    }

    async fn launch(
        script: Value,
        workers: usize,
        sandbox: ScriptedSandbox,
        pool_size: usize,
        options: coordinator::Options,
        pipeline: worker::pipeline::Options,
    ) -> Self {
        let broker = broker::MemoryBroker::new(5);
        let store = MemoryStore::new();
        let jobs = MemoryJobs::new();
        let script: model::scripted::Script = serde_json::from_value(script).expect("a script");
        let provider = Arc::new(model::scripted::Scripted::new(script).expect("a valid script"));
        let model = model::Model::new(
            provider,
            model::Options::default(),
            model::Metrics::unregistered().expect("metrics"),
        );
        let cancel = CancellationToken::new();
        let mut tasks = Vec::new();
        // One set of in-memory stores for every process, as one Redis is for a real cluster.
        let stores = store::Stores::memory(store.clone(), jobs.clone());

        let coordinator = coordinator::Coordinator::build(
            options,
            Arc::new(broker.clone()),
            stores.clone(),
            &prometheus::Registry::new(),
        )
        .expect("a coordinator");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let url = format!("http://{}", listener.local_addr().expect("an address"));
        let ops = axum::Router::new();
        let stop = cancel.clone();
        tasks.push(tokio::spawn(async move {
            let _ = coordinator.run(listener, ops, stop).await;
        }));
        for _ in 0..workers {
            let pipeline = worker::Pipeline::new(
                pipeline.clone(),
                &stores,
                Arc::new(broker.clone()),
                Some(model.clone()),
                Arc::new(sandbox.clone()),
            );
            let worker = worker::Worker::build(
                worker::Options::default(),
                worker::Parts {
                    broker: Arc::new(broker.clone()),
                    stores: &stores,
                    sandbox: Arc::new(sandbox.clone()),
                    registry: &prometheus::Registry::new(),
                    gate: worker::gate::Gate::default(),
                    pipeline: Some(pipeline),
                    pool_size: Some(&|_| pool_size),
                    name: None,
                    sessions: None,
                },
            )
            .expect("a worker");
            tasks.push(tokio::spawn(worker.run(cancel.clone())));
        }
        Self {
            url,
            http: reqwest::Client::new(),
            jobs,
            sandbox,
            cancel,
            tasks,
        }
    }

    /// Submits a job; its id.
    pub async fn submit(&self, instruction: &str) -> TaskId {
        let answer: Value = self
            .http
            .post(format!("{}/v1/jobs", self.url))
            .json(&json!({"instruction": instruction, "max_iterations": 3}))
            .send()
            .await
            .expect("the coordinator answers")
            .json()
            .await
            .expect("a JSON answer");
        answer["job_id"]
            .as_str()
            .and_then(|id| id.parse().ok())
            .unwrap_or_else(|| panic!("no job id in {answer}"))
    }

    /// The job's result once it has one; panics after `within`.
    pub async fn result(&self, job: TaskId, within: Duration) -> proto::job::JobResult {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(result) = self.jobs.result(job).await.expect("the memory store") {
                return result;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "job {job} unfinished after {within:?}; events: {:?}",
                self.events(job).await
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The job's progress events, in order.
    pub async fn events(&self, job: TaskId) -> Vec<Progress> {
        self.jobs
            .events(job, None)
            .await
            .expect("the memory store")
            .into_iter()
            .map(|e| e.event)
            .collect()
    }

    pub async fn stop(mut self) {
        self.cancel.cancel();
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
    }
}

/// The FAKE sandbox: it runs nothing; harness runs get [`fake_harness`]'s reports.
pub fn fake_sandbox() -> ScriptedSandbox {
    ScriptedSandbox::new(|_| Ok(passed())).with_harness(fake_harness)
}

/// A run that passed and printed nothing.
fn passed() -> ExecutionResult {
    ExecutionResult {
        status: Status::Passed,
        exit_code: Some(0),
        stdout: String::new(),
        stderr: String::new(),
        truncated: false,
        duration_ms: 1,
        cpu_ms: None,
        peak_memory_kb: None,
        reason: None,
        error_kind: None,
        files: Default::default(),
        file_errors: Default::default(),
        compile: None,
    }
}

/// The FAKE sandbox's answer to a harness run: the report of the mode asked, written with the
/// contract's own types, so the FAKE cannot drift from what the worker reads.
pub fn fake_harness(run: &HarnessRun) -> Result<HarnessOutcome, sandbox::Error> {
    let cases_report = |cases: &CasesRequest, code: &str| {
        let passed = !code.contains(FAILS);
        let failed = (!passed).then_some(ErrorKind::WrongOutput);
        let cases = cases
            .cases
            .iter()
            .map(|case| CaseReport {
                name: case.name.clone(),
                passed,
                actual_output: if passed {
                    case.expected_output.clone()
                } else {
                    json!("wrong")
                },
                error: failed.map(|_| "WrongOutput: FAKE".to_owned()),
                error_kind: failed,
                duration_ms: 0.1,
            })
            .collect();
        CasesReport {
            passed,
            cases,
            error_kind: failed,
            error: None,
            traceback: None,
        }
    };
    let report = match &run.request {
        HarnessRequest::Integrate(integrate) => HarnessReport::Integrate(IntegrationReport {
            functions: integrate
                .verdicts
                .iter()
                .map(|(name, cases)| (name.clone(), cases_report(cases, &run.code)))
                .collect(),
            quality: QualityReport {
                unmeasured: vec![],
                coverage: 1.0,
                complexity: Default::default(),
                docstrings: 1.0,
                dangerous_calls: vec![],
                warnings: None,
            },
        }),
        HarnessRequest::Cases(cases) => HarnessReport::Cases(cases_report(cases, &run.code)),
        HarnessRequest::ManyCases { runs } => HarnessReport::ManyCases(ManyCasesReport {
            runs: runs
                .iter()
                .map(|cases| cases_report(cases, cases.code.as_deref().unwrap_or_default()))
                .collect(),
        }),
    };
    Ok(HarnessOutcome {
        result: passed(),
        report: Some(report),
    })
}
