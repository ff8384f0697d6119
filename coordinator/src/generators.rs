//! Whether any worker can generate code. While workers are alive and none has a model, a job
//! is refused (503, naming why) instead of being queued for nobody; with no worker at all it
//! is accepted (an autoscaler starts workers on queue depth).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use store::Presence;

/// How long one answer from Redis is reused: a burst of submissions costs one round trip.
const REFRESH: Duration = Duration::from_secs(1);

pub(crate) struct Generators {
    presence: Arc<dyn Presence>,
    last: Mutex<Option<(Instant, Option<String>)>>,
}

impl Generators {
    pub(crate) fn new(presence: Arc<dyn Presence>) -> Self {
        Self {
            presence,
            last: Mutex::new(None),
        }
    }

    /// `Some(why)` when no live worker can generate. A Redis failure refuses nothing (the job's
    /// own writes then say what is wrong).
    pub(crate) async fn refusal(&self) -> Option<String> {
        if let Some((at, refusal)) = &*self.last.lock().expect("poisoned")
            && at.elapsed() < REFRESH
        {
            return refusal.clone();
        }
        let refusal = match self.presence.generators().await {
            Ok(generators) => generators.refusal(),
            Err(e) => {
                tracing::debug!(error = %e, "cannot tell whether a worker can generate");
                return None;
            }
        };
        *self.last.lock().expect("poisoned") = Some((Instant::now(), refusal.clone()));
        refusal
    }
}
