//! A model call's context, from its caller: the lane it waits its turn in (its tenant and
//! weight, [`crate::turnstile`]), and where the wall time of its HTTP exchanges (request sent to
//! answer decoded) adds up, for the worker's per-task timing line: `bench/tasks` counts it
//! beside the sandbox's, so that with a FAKE model that answers at once what is left of a
//! task's handling can be told from the model server's own share of it. An argument, not a
//! task-local: every call says whose it is. What the exchanges spent (HTTP calls, tokens)
//! adds up here too, answers that did not validate included: what a caller charges when it
//! gives up.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::turnstile::Lane;

#[derive(Debug, Default)]
pub struct Call {
    pub lane: Lane,
    exchange_us: AtomicU64,
    exchanges: AtomicU64,
    prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
}

impl Call {
    pub fn new(lane: Lane) -> Self {
        Self {
            lane,
            ..Self::default()
        }
    }

    /// HTTP calls made with this context and the tokens their answers reported, whether the
    /// answers validated or not.
    pub fn spent(&self) -> (u32, crate::Usage) {
        let calls = self.exchanges.load(Ordering::Relaxed);
        (
            u32::try_from(calls).unwrap_or(u32::MAX),
            crate::Usage {
                prompt_tokens: self.prompt_tokens.load(Ordering::Relaxed),
                completion_tokens: self.completion_tokens.load(Ordering::Relaxed),
            },
        )
    }

    pub(crate) fn add_spent(&self, usage: Option<&crate::Usage>) {
        self.exchanges.fetch_add(1, Ordering::Relaxed);
        if let Some(usage) = usage {
            self.prompt_tokens
                .fetch_add(usage.prompt_tokens, Ordering::Relaxed);
            self.completion_tokens
                .fetch_add(usage.completion_tokens, Ordering::Relaxed);
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
