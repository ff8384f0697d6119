//! The [`Sweeper`]: every coordinator ends the sessions past their deadline.

use proto::api::sessions::SessionState;
use proto::session::SessionEnd;
use tokio_util::sync::CancellationToken;

use crate::{Coordinator, now_ms};

/// Ends the sessions past their deadline (idle past their timeout, or past their lifetime),
/// whichever coordinator gets there first.
pub(crate) struct Sweeper {
    coordinator: Coordinator,
}

impl Sweeper {
    pub(crate) fn build(coordinator: &Coordinator) -> Option<Self> {
        coordinator.stores.sessions.as_ref()?;
        Some(Self {
            coordinator: coordinator.clone(),
        })
    }

    pub(crate) async fn run(self, cancel: CancellationToken) {
        let c = self.coordinator;
        let mut tick = tokio::time::interval(c.options.sessions.check_interval);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            let Some(sessions) = c.stores.sessions.clone() else {
                return;
            };
            let now = now_ms();
            let due = match sessions.due_sessions(now, 100).await {
                Ok(due) => due,
                Err(e) => {
                    tracing::debug!(error = %e, "cannot read the sessions' deadlines");
                    continue;
                }
            };
            for id in due {
                let Ok(Some(record)) = sessions.session(&id).await else {
                    continue;
                };
                if record.state != SessionState::Live || record.deadline_ms() > now {
                    continue;
                }
                let end = if record.expires_ms <= now {
                    SessionEnd::Lifetime
                } else {
                    SessionEnd::Idle {
                        idle_timeout_s: record.idle_timeout_s,
                    }
                };
                c.end(&record, &end).await;
            }
        }
    }
}
