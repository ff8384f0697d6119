//! Dead letters: a task that could not be finished gets a final answer that says why (an
//! execution's `error` result, or its job failed with the reason).

use std::time::Duration;

use broker::{Delivery, Queue};
use futures::StreamExt;
use proto::{ExecutionResult, Status, TaskId};
use tokio_util::sync::CancellationToken;

use crate::Coordinator;

/// Dead letters taken from the queue at once.
const DEAD_LETTERS_PREFETCH: u16 = 8;
/// Before a dead letter whose outcome could not be recorded goes back to its queue.
const RECORD_RETRY_PAUSE: Duration = Duration::from_secs(1);
/// How often Redis is asked again while it does not answer.
const STORE_RECHECK: Duration = Duration::from_millis(500);

/// Consumes the dead-letter queue: each dead letter becomes its execution's `error` result, or
/// fails its job, with the reason.
pub(crate) struct DeadLetters {
    coordinator: Coordinator,
}

impl DeadLetters {
    pub(crate) fn build(coordinator: &Coordinator) -> Self {
        Self {
            coordinator: coordinator.clone(),
        }
    }

    /// Until `cancel` fires.
    pub(crate) async fn run(self, cancel: CancellationToken) {
        let mut deliveries = self.coordinator.broker.consume(
            Queue::DeadLetters,
            DEAD_LETTERS_PREFETCH,
            cancel.clone(),
        );
        while let Some(delivery) = deliveries.next().await {
            // A dead letter's answer is recorded in Redis: while Redis does not answer, this
            // coordinator takes no more of them (it holds at most its prefetch, which goes back
            // to the queue if it stops) rather than take each and hand it back.
            if !self.store_answers(&cancel).await {
                break;
            }
            self.coordinator.dead_letter(delivery).await;
        }
    }

    /// Waits until Redis answers; `false` when `cancel` fired first.
    async fn store_answers(&self, cancel: &CancellationToken) -> bool {
        let mut down = false;
        loop {
            match self.coordinator.stores.executions.health().await {
                Ok(()) => {
                    if down {
                        tracing::info!("redis answers again; taking dead letters");
                    }
                    return true;
                }
                Err(reason) => {
                    if !down {
                        tracing::warn!(%reason, "redis does not answer; taking no dead letters until it does");
                        down = true;
                    }
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => return false,
                _ = tokio::time::sleep(STORE_RECHECK) => {}
            }
        }
    }
}

impl Coordinator {
    /// Answers for one dead letter, then settles it.
    pub(crate) async fn dead_letter(&self, delivery: Delivery) {
        let reason = delivery
            .death_reason
            .clone()
            .unwrap_or_else(|| "unknown".into());
        self.metrics
            .dead_letters
            .with_label_values(&[reason.as_str()])
            .inc();
        let id = delivery
            .message_id
            .as_deref()
            .and_then(|m| m.parse::<TaskId>().ok());
        let Some(id) = id else {
            tracing::warn!(message_id = ?delivery.message_id, %reason, "dead letter without a task id; dropped");
            let _ = delivery.ack().await;
            return;
        };
        let explanation = match reason.as_str() {
            // A dead letter's own delivery count says nothing about the task queue's.
            "delivery_limit" => {
                "task dead-lettered: delivered more than the broker's delivery limit without finishing"
                    .to_string()
            }
            "rejected" => {
                "task dead-lettered: a worker rejected it as malformed or unsupported".to_string()
            }
            other => format!("task dead-lettered ({other})"),
        };
        tracing::warn!(%id, %reason, "task dead-lettered");
        // A pipeline task: its job cannot go on, so it fails with the reason.
        if let Some((job, what)) = pipeline_job(&delivery.body) {
            let recorded = match self.stores.jobs.job_meta(job).await {
                Ok(Some(meta)) => {
                    self.fail_job(&meta, &format!("{what}: {explanation}"))
                        .await
                }
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            };
            match recorded {
                Ok(()) => {
                    let _ = delivery.ack().await;
                }
                Err(e) => {
                    tracing::warn!(%job, error = %e, "cannot record dead letter; retrying later");
                    tokio::time::sleep(RECORD_RETRY_PAUSE).await;
                    let _ = delivery.requeue().await;
                }
            }
            return;
        }
        let result = ExecutionResult::error(Status::Error, explanation);
        let envelope = proto::Envelope::decode(&delivery.body).ok();
        let language = match envelope.as_ref().map(|e| &e.task) {
            Some(proto::Task::Execute(request)) => Some(request.language),
            _ => None,
        };
        let tenant = envelope.as_ref().and_then(|e| e.tenant.as_deref());
        match self.finish_execution(id, tenant, language, &result).await {
            Ok(_) => {
                let _ = delivery.ack().await;
            }
            Err(e) => {
                tracing::warn!(%id, error = %e, "cannot record dead letter; retrying later");
                tokio::time::sleep(RECORD_RETRY_PAUSE).await;
                let _ = delivery.requeue().await;
            }
        }
    }
}

/// The job a dead-lettered pipeline task belongs to, and what it was.
fn pipeline_job(body: &[u8]) -> Option<(TaskId, String)> {
    match proto::Envelope::decode(body).ok()?.task {
        proto::Task::Execute(_) => None,
        proto::Task::Plan(t) => Some((t.job_id, "planning".into())),
        proto::Task::Implement(t) => Some((t.job_id, format!("implementing {}", t.function))),
        proto::Task::Integrate(t) => Some((t.job_id, "integration".into())),
        proto::Task::Agent(t) => Some((t.job_id, "the agent's run".into())),
    }
}
