//! A model call's context, from its caller: the lane it waits its turn in (its tenant and
//! weight, [`crate::turnstile`]), and where the wall time of its HTTP exchanges (request sent to
//! answer decoded) adds up, for the worker's per-task timing line: `bench/tasks` counts it
//! beside the sandbox's, so that with a FAKE model that answers at once what is left of a
//! task's handling can be told from the model server's own share of it. An argument, not a
//! task-local: every call says whose it is.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::turnstile::Lane;

#[derive(Debug, Default)]
pub struct Call {
    pub lane: Lane,
    exchange_us: AtomicU64,
}

impl Call {
    pub fn new(lane: Lane) -> Self {
        Self {
            lane,
            exchange_us: AtomicU64::new(0),
        }
    }

    /// Microseconds the calls made with this context spent in HTTP exchanges.
    pub fn exchange_us(&self) -> u64 {
        self.exchange_us.load(Ordering::Relaxed)
    }

    pub(crate) fn add_exchange(&self, elapsed: Duration) {
        let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.exchange_us.fetch_add(us, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exchanges_add_up() {
        let call = Call::default();
        call.add_exchange(Duration::from_micros(300));
        call.add_exchange(Duration::from_micros(200));
        assert_eq!(call.exchange_us(), 500);
        assert_eq!(call.lane, Lane::default());
    }
}
