//! A worker's executions: run the program through the one sandbox-run loop
//! ([`crate::sandboxed`]), end the execution through the one way it ends
//! ([`flow::ExecutionEnds`]), and settle its delivery.

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use broker::Delivery;
use proto::{ExecutionRequest, ExecutionResult, Status, TaskId};

use crate::gate::{Dependency, Down, Failed};
use crate::metrics::Work;
use crate::sandboxed::Run;
use crate::{Outcome, Worker, describe, failed_span};

impl Worker {
    /// Runs execution `id` of `tenant` and stores its verdict (once: a redelivery of one
    /// already stored is acked as a duplicate). `lane`: the tenant's, for its turn at the
    /// language's pool.
    pub(crate) async fn execute_task(
        &self,
        id: TaskId,
        tenant: Option<&str>,
        lane: &model::Lane,
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
        let run = Run {
            work: Work::Execution,
            language: request.language,
            lane,
            pooled: !request.fresh_container,
            held: None,
            wait: self.options.outage_wait,
            settled: |_| false,
            timed: &|_| {},
        };
        let result = match self.sandboxed.run(run, || self.sandbox.run(request)).await {
            Ok(Ok(result)) => result,
            Ok(Err(e)) | Err(Failed::Own(e)) => {
                self.sandboxed.given_up(Work::Execution, request.language);
                tracing::error!(%id, error = %e, "sandbox failed; reporting sandbox_error");
                ExecutionResult::error(Status::SandboxError, e.to_string())
            }
            Err(Failed::Down { missing, .. }) => {
                return self.hand_back(delivery, "execute", &missing).await;
            }
        };
        match self.store_result(id, tenant, request, &result).await {
            Ok(first) => {
                tracing::info!(%id, status = result.status.as_str(), duration_ms = result.duration_ms, first, "execution finished");
                // The task's span (this runs in it) carries the verdict, failed when the
                // program did not pass.
                let span = tracing::Span::current();
                span.record("verdict", result.status.as_str());
                if result.status != Status::Passed {
                    failed_span(&span, result.status.as_str());
                }
                self.settle(delivery, Outcome::Completed).await
            }
            Err(StoreFailure::Down(missing)) => self.hand_back(delivery, "execute", &missing).await,
            Err(StoreFailure::Store(e)) => {
                tracing::error!(%id, error = %e, "giving the task back: result could not be stored");
                if let Err(e) = delivery.requeue().await {
                    tracing::warn!(error = %e, "cannot requeue; the broker will redeliver");
                }
                Outcome::Requeued
            }
        }
    }

    /// Ends an execution with its result ([`flow::ExecutionEnds`]): while Redis is down it
    /// waits for it ([`crate::gate::Gate::through`], at most `outage_wait` in all); while
    /// Redis answers its probe but not the write, it retries with backoff for
    /// `store_retry_for`.
    async fn store_result(
        &self,
        id: TaskId,
        tenant: Option<&str>,
        request: &ExecutionRequest,
        result: &ExecutionResult,
    ) -> Result<bool, StoreFailure> {
        let give_up = tokio::time::Instant::now() + self.options.outage_wait;
        let left = || give_up.saturating_duration_since(tokio::time::Instant::now());
        let finish = || {
            self.execution_ends
                .finish(id, tenant, Some(request.language), result)
        };
        (|| async {
            match self.gate.through(&[], |_| left(), finish).await {
                Ok(first) => Ok(first),
                Err(Failed::Down { missing, .. }) => Err(StoreFailure::Down(missing)),
                // The store's own failure: the backoff below retries it.
                Err(Failed::Own(e)) => Err(StoreFailure::Store(e)),
            }
        })
        .retry(
            ExponentialBuilder::default()
                .with_min_delay(STORE_RETRY_MIN_DELAY)
                .with_jitter()
                .with_max_delay(STORE_RETRY_MAX_DELAY)
                .with_total_delay(Some(self.options.store_retry_for))
                .without_max_times(),
        )
        .when(|e| matches!(e, StoreFailure::Store(e) if e.is_retryable()))
        .notify(
            |e, after| tracing::warn!(%id, error = %e, retry_in = ?after, "cannot store result"),
        )
        .await
    }
}

/// Why a result was not stored.
#[derive(Debug, thiserror::Error)]
enum StoreFailure {
    /// Redis stayed down for `outage_wait`.
    #[error("still down: {}", describe(.0))]
    Down(Vec<(Dependency, Down)>),
    #[error(transparent)]
    Store(store::Error),
}

/// Backoff while a verdict cannot be stored (up to `store_retry_for`).
const STORE_RETRY_MIN_DELAY: Duration = Duration::from_millis(100);
const STORE_RETRY_MAX_DELAY: Duration = Duration::from_secs(2);
