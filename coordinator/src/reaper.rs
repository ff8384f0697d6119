//! The overdue-job reaper: a safety net that fails every job still unfinished
//! `job_deadline` after its submission (a job waiting for a model, a sandbox or a lost task
//! ends, never hangs).

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::{Coordinator, now_ms};

/// The reaper runs every tenth of `job_deadline`, within these bounds.
const REAP_PERIOD_MIN: Duration = Duration::from_millis(200);
const REAP_PERIOD_MAX: Duration = Duration::from_secs(30);

/// Fails the jobs still unfinished `coordinator.job_deadline` after their submission. Every
/// coordinator runs one; a job finishes once, so two doing the same is harmless.
pub(crate) struct Reaper {
    coordinator: Coordinator,
    deadline: Duration,
}

impl Reaper {
    pub(crate) fn build(coordinator: &Coordinator) -> Self {
        Self {
            deadline: coordinator.options.job_deadline,
            coordinator: coordinator.clone(),
        }
    }

    /// Looks every tenth of the deadline (within bounds) until `cancel` fires.
    pub(crate) async fn run(self, cancel: CancellationToken) {
        let period = (self.deadline / 10).clamp(REAP_PERIOD_MIN, REAP_PERIOD_MAX);
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(period) => {}
            }
            if let Err(e) = self.once().await {
                tracing::debug!(error = %e, "cannot look for overdue jobs now");
            }
        }
    }

    /// One look; returns how many jobs it failed.
    pub(crate) async fn once(&self) -> Result<usize, store::Error> {
        let c = &self.coordinator;
        let cutoff =
            now_ms().saturating_sub(u64::try_from(self.deadline.as_millis()).unwrap_or(u64::MAX));
        let mut failed = 0;
        for id in c.stores.jobs.unfinished_before(cutoff, 100).await? {
            match c.stores.jobs.job_meta(id).await? {
                Some(meta) => {
                    let reason = format!(
                        "deadline exceeded: not finished within {} of its submission \
                         (coordinator.job_deadline)",
                        humantime_serde::re::humantime::format_duration(self.deadline)
                    );
                    c.fail_job(&meta, &reason).await?;
                    failed += 1;
                }
                None => c.stores.jobs.forget_job(id).await?,
            }
        }
        Ok(failed)
    }
}

#[cfg(test)]
mod tests;
