//! The overdue-job reaper: a safety net that fails every job still unfinished
//! `job_deadline` after its submission (a job waiting for a model, a sandbox or a lost task
//! ends, never hangs).

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::{Coordinator, now_ms};

/// The reaper runs every tenth of `job_deadline`, within these bounds.
const REAP_PERIOD_MIN: Duration = Duration::from_millis(200);
const REAP_PERIOD_MAX: Duration = Duration::from_secs(30);

impl Coordinator {
    /// Fails every job still unfinished `job_deadline` after its submission, until `cancel`
    /// fires. Every coordinator runs it; a job finishes once, so two doing the same is harmless.
    pub(crate) async fn reap_overdue_jobs(self, cancel: CancellationToken) {
        let period = (self.options.job_deadline / 10).clamp(REAP_PERIOD_MIN, REAP_PERIOD_MAX);
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(period) => {}
            }
            if let Err(e) = self.reap_overdue_once().await {
                tracing::debug!(error = %e, "cannot look for overdue jobs now");
            }
        }
    }

    /// One pass of [`Self::reap_overdue_jobs`]; returns how many jobs it failed.
    pub(crate) async fn reap_overdue_once(&self) -> Result<usize, store::Error> {
        let deadline = self.options.job_deadline;
        let cutoff =
            now_ms().saturating_sub(u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX));
        let mut failed = 0;
        for id in self.stores.jobs.unfinished_before(cutoff, 100).await? {
            match self.stores.jobs.job_meta(id).await? {
                Some(meta) => {
                    let reason = format!(
                        "deadline exceeded: not finished within {} of its submission \
                         (coordinator.job_deadline)",
                        humantime_serde::re::humantime::format_duration(deadline)
                    );
                    self.fail_job(&meta, &reason).await?;
                    failed += 1;
                }
                None => self.stores.jobs.forget_job(id).await?,
            }
        }
        Ok(failed)
    }
}

#[cfg(test)]
mod tests;
