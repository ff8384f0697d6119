//! Reads the coordinators' inbox (`store::inbox`): the workers' pipeline events, shared out
//! between every coordinator by a Redis consumer group, and hands each to
//! [`Coordinator::process_event`].
//!
//! An event this coordinator took and did not settle (it died, or a dependency stayed down)
//! stays pending; every coordinator claims what has been pending for [`CLAIM_IDLE`], so a
//! dead coordinator's events go on elsewhere. An event taken more than
//! [`DELIVERY_LIMIT`] times fails its job with the reason: something about it stops every
//! coordinator that takes it.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use proto::job::Event;
use store::InboxEntry;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::Coordinator;
use crate::pipeline::Handled;

/// Events taken at once (they are applied one at a time, in order).
const BATCH: usize = 16;
/// How long a read waits for a notice before reading again (a notice lost in a Redis
/// reconnect costs at most this).
const WAIT: Duration = Duration::from_secs(1);
/// An event taken this long ago and not settled is claimed by whoever looks.
pub(crate) const CLAIM_IDLE: Duration = Duration::from_secs(10);
/// How often a coordinator looks for such events.
const CLAIM_PERIOD: Duration = Duration::from_secs(2);
/// A reader of the inbox that has not read for this long is a coordinator that stopped (a
/// live one reads every [`WAIT`]): its name leaves the group, unless it still holds events.
const READER_GONE: Duration = Duration::from_secs(60 * 60);
/// How often a coordinator forgets such readers (every start adds one).
const FORGET_PERIOD: Duration = Duration::from_secs(5 * 60);
/// Deliveries of one event before its job fails: each of them was a coordinator that took it
/// and neither applied it nor gave it back.
pub(crate) const DELIVERY_LIMIT: u64 = 5;

impl Coordinator {
    /// Reads the inbox until `cancel` fires; the broker's events queue, where workers of
    /// earlier versions send theirs, is read beside it.
    pub(crate) async fn consume_events(self, cancel: CancellationToken) {
        let legacy = tokio::spawn(self.clone().consume_broker_events(cancel.clone()));
        let consumer = consumer_name();
        tracing::debug!(%consumer, "reading the pipeline's events");
        let mut backoff = None;
        let mut next_claim = Instant::now();
        let mut next_forget = Instant::now();
        while !cancel.is_cancelled() {
            if Instant::now() >= next_forget {
                next_forget = Instant::now() + FORGET_PERIOD;
                match self.jobs.forget_idle_readers(&consumer, READER_GONE).await {
                    Ok(0) => {}
                    Ok(gone) => {
                        tracing::info!(gone, "stopped coordinators' names left the inbox's group")
                    }
                    Err(e) => tracing::debug!(error = %e, "cannot forget the inbox's idle readers"),
                }
            }
            let taken = if Instant::now() >= next_claim {
                next_claim = Instant::now() + CLAIM_PERIOD;
                self.jobs
                    .claim_pipeline_events(&consumer, CLAIM_IDLE, BATCH)
                    .await
            } else {
                Ok(vec![])
            };
            let taken = match taken {
                Ok(entries) if entries.is_empty() => tokio::select! {
                    () = cancel.cancelled() => break,
                    read = self.jobs.receive_pipeline_events(&consumer, BATCH, WAIT) => read,
                },
                other => other,
            };
            match taken {
                Ok(entries) => {
                    backoff = None;
                    // Once taken, an event is handled even while stopping: what is left
                    // unsettled is claimed by another coordinator after `CLAIM_IDLE`.
                    for entry in entries {
                        self.handle_inbox_event(entry).await;
                    }
                }
                Err(e) => {
                    let delay = backoff
                        .get_or_insert_with(|| {
                            ExponentialBuilder::default()
                                .with_min_delay(Duration::from_millis(100))
                                .with_max_delay(Duration::from_secs(2))
                                .with_jitter()
                                .without_max_times()
                                .build()
                        })
                        .next()
                        .unwrap_or(Duration::from_secs(2));
                    tracing::warn!(error = %e, retry_in = ?delay, "cannot read the pipeline's events; retrying");
                    tokio::select! {
                        () = cancel.cancelled() => break,
                        () = tokio::time::sleep(delay) => {}
                    }
                }
            }
        }
        let _ = legacy.await;
    }

    /// One event of the inbox, settled there.
    pub(crate) async fn handle_inbox_event(&self, entry: InboxEntry) {
        let event = match Event::decode(&entry.body) {
            Ok(event) => event,
            Err(e) => {
                // It names no job that could be told: logged and dropped.
                tracing::warn!(id = %entry.id, error = %e, "dropping an undecodable pipeline event");
                self.settle(&entry).await;
                return;
            }
        };
        if entry.deliveries > DELIVERY_LIMIT {
            let job = event.job_id();
            let reason = format!(
                "a pipeline event of this job was taken {} times by coordinators that neither \
                 applied it nor gave it back (each stopped or hung on it)",
                entry.deliveries - 1
            );
            tracing::warn!(%job, deliveries = entry.deliveries, "pipeline event past its delivery limit; failing its job");
            if self.fail_job_of(job, &reason).await.is_ok() {
                self.settle(&entry).await;
            }
            return;
        }
        match self.process_event(&event).await {
            Handled::Done => self.settle(&entry).await,
            Handled::Later => {
                if let Err(e) = self.jobs.return_pipeline_event(&entry).await {
                    // Still pending: claimed again after `CLAIM_IDLE`.
                    tracing::warn!(id = %entry.id, error = %e, "cannot give a pipeline event back; it stays pending");
                }
            }
            // Left pending: claimed again (and counted) after `CLAIM_IDLE`.
            Handled::Again => {}
        }
    }

    async fn settle(&self, entry: &InboxEntry) {
        if let Err(e) = self.jobs.pipeline_event_done(&entry.id).await {
            // Still pending: claimed again later and applied again, which changes nothing.
            tracing::warn!(id = %entry.id, error = %e, "cannot settle a pipeline event; it stays pending");
        }
    }
}

/// This process's name in the consumer group: unique per start, so a restarted coordinator
/// never takes a dead one's pending events as its own (they are claimed, and counted).
fn consumer_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    format!(
        "{}-{}-{}",
        if host.is_empty() {
            "coordinator"
        } else {
            &host
        },
        std::process::id(),
        proto::TaskId::new()
    )
}
