//! The worker: consumes tasks, runs them, stores the results, then acks.
//!
//! Invariants:
//! - a delivery is acked only after its result is stored in Redis (or found already stored:
//!   a redelivered task is not run twice once its result exists);
//! - a message that cannot be decoded is dead-lettered at once, never retried;
//! - a sandbox failure is retried a bounded number of times, then stored as a
//!   `sandbox_error` verdict with its reason: the caller always gets an answer;
//! - on shutdown the worker stops consuming, lets in-flight tasks finish up to a deadline, and
//!   leaves anything unfinished unacked so the broker redelivers it to another worker.

mod metrics;
pub mod pipeline;
pub mod static_check;

use std::sync::Arc;
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use broker::{Broker, Delivery, Queue};
use futures::StreamExt;
use proto::{Envelope, ExecutionRequest, ExecutionResult, Status, Task, TaskId};
use sandbox::Sandbox;
use serde::{Deserialize, Serialize};
use store::Store;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use metrics::{Metrics, PoolCollector};
pub use pipeline::Pipeline;

/// Worker settings (`[worker]` in `codegen.toml`, `CODEGEN__WORKER__*` in the environment).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// Address of the worker's `/healthz`, `/readyz` and `/metrics`.
    pub listen: std::net::SocketAddr,
    /// Pipeline tasks run at the same time (also their queue's prefetch).
    pub concurrency: u16,
    /// Plain executions run at the same time (also their queue's prefetch). Executions wait
    /// for a warm container, so a little more than the pool size hides the broker hop.
    pub execution_concurrency: u16,
    /// How long a shutdown waits for in-flight tasks before leaving them to redelivery.
    #[serde(with = "humantime_serde")]
    pub drain_timeout: Duration,
    /// Extra attempts after a sandbox infrastructure failure.
    pub sandbox_retries: usize,
    /// How long storing a result is retried (Redis down) before the task is handed back.
    #[serde(with = "humantime_serde")]
    pub store_retry_for: Duration,
    /// The generation pipeline (plan, implement, integrate tasks).
    pub pipeline: pipeline::Options,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            listen: ([127, 0, 0, 1], 9090).into(),
            concurrency: 2,
            execution_concurrency: 4,
            drain_timeout: Duration::from_secs(30),
            sandbox_retries: 2,
            store_retry_for: Duration::from_secs(30),
            pipeline: pipeline::Options::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid worker configuration: {0}")]
    Config(String),
}

/// The task-consuming service.
pub struct Worker {
    options: Options,
    broker: Arc<dyn Broker>,
    store: Arc<dyn Store>,
    sandbox: Arc<dyn Sandbox>,
    metrics: Metrics,
    pipeline: Option<Pipeline>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("options", &self.options)
            .finish()
    }
}

/// What became of one delivery, for metrics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Completed,
    Duplicate,
    Malformed,
    Requeued,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Duplicate => "duplicate",
            Outcome::Malformed => "malformed",
            Outcome::Requeued => "requeued",
        }
    }
}

impl Worker {
    pub fn build(
        options: Options,
        broker: Arc<dyn Broker>,
        store: Arc<dyn Store>,
        sandbox: Arc<dyn Sandbox>,
        registry: &prometheus::Registry,
    ) -> Result<Self, Error> {
        if options.concurrency == 0 {
            return Err(Error::Config(
                "worker.concurrency must be at least 1".into(),
            ));
        }
        let metrics = Metrics::register(registry).map_err(|e| Error::Config(e.to_string()))?;
        Ok(Self {
            options,
            broker,
            store,
            sandbox,
            metrics,
            pipeline: None,
        })
    }

    /// Enables plan, implement and integrate tasks; without it they are dead-lettered.
    pub fn with_pipeline(mut self, pipeline: Pipeline) -> Self {
        self.pipeline = Some(pipeline);
        self
    }

    /// Consumes pipeline tasks and executions (each queue with its own slots) until `cancel`
    /// fires, then drains.
    pub async fn run(self, cancel: CancellationToken) {
        let this = Arc::new(self);
        let tasks = this.options.concurrency;
        let executions = this.options.execution_concurrency;
        tokio::join!(
            this.clone().consume(Queue::Tasks, tasks, cancel.clone()),
            this.clone().consume(Queue::Executions, executions, cancel),
        );
        tracing::info!("worker stopped");
    }

    async fn consume(self: Arc<Self>, queue: Queue, slots: u16, cancel: CancellationToken) {
        if slots == 0 {
            return;
        }
        let consume_cancel = cancel.child_token();
        let mut deliveries = self.broker.consume(queue, slots, consume_cancel.clone());
        let mut in_flight = JoinSet::new();
        let limit = usize::from(slots);
        loop {
            // Prefetch already bounds deliveries; this bounds the fake broker too.
            while in_flight.len() >= limit {
                in_flight.join_next().await;
            }
            tokio::select! {
                _ = cancel.cancelled() => break,
                Some(_) = in_flight.join_next(), if !in_flight.is_empty() => {}
                delivery = deliveries.next() => match delivery {
                    Some(delivery) => {
                        let this = self.clone();
                        in_flight.spawn(async move { this.handle(delivery).await });
                    }
                    None => break,
                },
            }
        }
        consume_cancel.cancel();
        drop(deliveries);
        let pending = in_flight.len();
        if pending > 0 {
            tracing::info!(pending, ?queue, "draining in-flight tasks");
        }
        let drained = tokio::time::timeout(self.options.drain_timeout, async {
            while in_flight.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                left = in_flight.len(),
                ?queue,
                "drain deadline passed; unfinished tasks go back to the queue"
            );
            in_flight.abort_all();
        }
    }

    /// Processes one delivery and settles it.
    pub async fn handle(&self, delivery: Delivery) -> Outcome {
        let started = Instant::now();
        self.metrics.in_flight.inc();
        let envelope = match Envelope::decode(&delivery.body) {
            Ok(envelope) => envelope,
            Err(e) => {
                tracing::warn!(message_id = ?delivery.message_id, error = %e, "dead-lettering undecodable task");
                if let Err(e) = delivery.dead_letter().await {
                    tracing::warn!(error = %e, "cannot dead-letter; the broker will redeliver");
                }
                return self.finish("unknown", Outcome::Malformed, started);
            }
        };
        let kind = envelope.task.kind();
        let queue_ms = now_ms().saturating_sub(envelope.submitted_at_ms);
        self.metrics
            .queue_wait_seconds
            .with_label_values(&[kind])
            .observe(queue_ms as f64 / 1000.0);
        let outcome = match envelope.task {
            Task::Plan(task) | Task::Implement(task) | Task::Integrate(task) => {
                let (outcome, sandbox_ms) = pipeline::SANDBOX_MS
                    .scope(std::cell::Cell::new(0), async {
                        let outcome = self.pipeline_task(kind, &task, delivery).await;
                        (outcome, pipeline::SANDBOX_MS.with(std::cell::Cell::get))
                    })
                    .await;
                // One line per pipeline task: what `bench/tasks` reads the per-task overhead from.
                tracing::info!(
                    kind,
                    job = %task.job_id,
                    function = task.function.as_deref().unwrap_or("-"),
                    queue_ms,
                    run_ms = started.elapsed().as_millis() as u64,
                    sandbox_ms,
                    outcome = outcome.as_str(),
                    "task finished"
                );
                outcome
            }
            Task::Execute(request) => {
                self.execute_task(envelope.task_id, &request, delivery)
                    .await
            }
        };
        self.finish(kind, outcome, started)
    }

    fn finish(&self, kind: &str, outcome: Outcome, started: Instant) -> Outcome {
        self.metrics.in_flight.dec();
        self.metrics
            .tasks
            .with_label_values(&[kind, outcome.as_str()])
            .inc();
        self.metrics
            .task_seconds
            .with_label_values(&[kind])
            .observe(started.elapsed().as_secs_f64());
        outcome
    }

    async fn execute_task(
        &self,
        id: TaskId,
        request: &ExecutionRequest,
        delivery: Delivery,
    ) -> Outcome {
        // A redelivered task whose result is already stored must not run again.
        match self.store.execution_result(id).await {
            Ok(Some(_)) => {
                tracing::info!(%id, "result already stored; acking duplicate delivery");
                return self.settle(delivery, Outcome::Duplicate).await;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(%id, error = %e, "cannot check for an earlier result; running")
            }
        }
        tracing::debug!(%id, language = %request.language, redelivered = delivery.redelivered, "executing");
        let result = self.run_sandboxed(id, request).await;
        let store = self.store.clone();
        let stored = (|| {
            let store = store.clone();
            let result = result.clone();
            async move { store.complete_execution(id, &result).await }
        })
        .retry(
            ExponentialBuilder::default()
                .with_jitter()
                .with_max_delay(Duration::from_secs(2))
                .with_total_delay(Some(self.options.store_retry_for))
                .without_max_times(),
        )
        .when(|e: &store::Error| e.is_retryable())
        .notify(
            |e, after| tracing::warn!(%id, error = %e, retry_in = ?after, "cannot store result"),
        )
        .await;
        match stored {
            Ok(first) => {
                tracing::info!(%id, status = result.status.as_str(), duration_ms = result.duration_ms, first, "execution finished");
                self.settle(delivery, Outcome::Completed).await
            }
            Err(e) => {
                tracing::error!(%id, error = %e, "giving the task back: result could not be stored");
                if let Err(e) = delivery.requeue().await {
                    tracing::warn!(error = %e, "cannot requeue; the broker will redeliver");
                }
                Outcome::Requeued
            }
        }
    }

    async fn pipeline_task(
        &self,
        kind: &str,
        task: &proto::job::JobTask,
        delivery: Delivery,
    ) -> Outcome {
        let Some(pipeline) = &self.pipeline else {
            tracing::warn!(kind, "this worker runs no pipeline; dead-lettering");
            let _ = delivery.dead_letter().await;
            return Outcome::Malformed;
        };
        let result = match kind {
            "plan" => {
                tracing::info!(job = %task.job_id, "plan task started");
                pipeline.plan(task).await
            }
            "implement" => {
                tracing::info!(job = %task.job_id, function = ?task.function, "implement task started");
                pipeline.implement(task).await
            }
            _ => {
                tracing::info!(job = %task.job_id, "integrate task started");
                pipeline.integrate(task).await
            }
        };
        match result {
            Ok(()) => self.settle(delivery, Outcome::Completed).await,
            Err(pipeline::Error::Drop(reason)) => {
                tracing::warn!(kind, job = %task.job_id, %reason, "dropping pipeline task");
                self.settle(delivery, Outcome::Duplicate).await
            }
            Err(pipeline::Error::Retry(reason)) => {
                tracing::warn!(kind, job = %task.job_id, %reason, "pipeline task handed back");
                tokio::time::sleep(Duration::from_millis(500)).await;
                if let Err(e) = delivery.requeue().await {
                    tracing::warn!(error = %e, "cannot requeue; the broker will redeliver");
                }
                Outcome::Requeued
            }
        }
    }

    async fn settle(&self, delivery: Delivery, outcome: Outcome) -> Outcome {
        if let Err(e) = delivery.ack().await {
            // The result is stored; a redelivery will be recognised as a duplicate.
            tracing::warn!(error = %e, "ack failed");
        }
        outcome
    }

    /// Runs in the sandbox; infrastructure failures are retried, then become a verdict.
    async fn run_sandboxed(&self, id: TaskId, request: &ExecutionRequest) -> ExecutionResult {
        let language = request.language.as_str();
        let mut attempt = 0;
        loop {
            let started = Instant::now();
            let outcome = self.sandbox.run(request).await;
            self.metrics
                .sandbox_seconds
                .with_label_values(&[language])
                .observe(started.elapsed().as_secs_f64());
            match outcome {
                Ok(result) => {
                    self.metrics
                        .sandbox_runs
                        .with_label_values(&[language, result.status.as_str()])
                        .inc();
                    return result;
                }
                Err(e) if e.is_retryable() && attempt < self.options.sandbox_retries => {
                    attempt += 1;
                    tracing::warn!(%id, error = %e, attempt, "sandbox failed; retrying");
                    tokio::time::sleep(Duration::from_millis(200 * attempt as u64)).await;
                }
                Err(e) => {
                    self.metrics
                        .sandbox_runs
                        .with_label_values(&[language, Status::SandboxError.as_str()])
                        .inc();
                    tracing::error!(%id, error = %e, "sandbox failed; reporting sandbox_error");
                    return ExecutionResult::error(Status::SandboxError, e.to_string());
                }
            }
        }
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
