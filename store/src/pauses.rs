//! What this process knows of the model limits' pauses, and whether it can trust it.
//!
//! A 429 anywhere pauses the cluster's callers of a scope (`limits::RedisLimits::throttled`),
//! and the pause is announced on a channel. A process hears the announcements only while its
//! listener is subscribed: one made before the first subscription, or between a disconnection
//! and the resubscription, is lost. So what was heard is the whole truth for a scope only
//! once that scope's pause has been read from Redis while subscribed, and no disconnection
//! came since; until then a caller reads it (`RedisLimits::pause`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use dashmap::DashMap;
use tokio::time::Instant;

#[derive(Debug, Default)]
pub(crate) struct Pauses {
    /// Until when each scope pauses, as announced or read.
    heard: DashMap<String, Instant>,
    /// Subscribed to the announcements now.
    listening: AtomicBool,
    /// Bumped at every disconnection: a read before it may have missed an announcement since.
    epoch: AtomicU64,
    /// The scopes read while subscribed, each with the epoch of its read.
    read: DashMap<String, u64>,
}

/// Taken before a read of a scope's pause: the read counts as complete only if the process
/// was subscribed then and has not been disconnected since.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ticket(Option<u64>);

impl Pauses {
    pub fn heard(&self, scope: &str) -> Option<Instant> {
        self.heard
            .get(scope)
            .map(|until| *until)
            .filter(|until| *until > Instant::now())
    }

    /// An announcement, or a read: the later of it and what was heard holds.
    pub fn hear(&self, scope: &str, until: Instant) {
        let mut heard = self.heard.entry(scope.to_owned()).or_insert(until);
        *heard = (*heard).max(until);
    }

    /// The listener's subscription to the announcements is confirmed.
    pub fn subscribed(&self) {
        self.listening.store(true, Ordering::SeqCst);
    }

    /// The listener's connection dropped: announcements until its resubscription are lost.
    pub fn disconnected(&self) {
        self.listening.store(false, Ordering::SeqCst);
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }

    /// Whether what was heard of `scope` is all there is to know.
    pub fn known(&self, scope: &str) -> bool {
        self.listening.load(Ordering::SeqCst)
            && self
                .read
                .get(scope)
                .is_some_and(|epoch| *epoch == self.epoch.load(Ordering::SeqCst))
    }

    pub fn ticket(&self) -> Ticket {
        Ticket(
            self.listening
                .load(Ordering::SeqCst)
                .then(|| self.epoch.load(Ordering::SeqCst)),
        )
    }

    /// `scope`'s pause as read from Redis (`None`: none) with `ticket` taken before the read.
    pub fn read(&self, scope: &str, ticket: Ticket, until: Option<Instant>) {
        if let Some(until) = until {
            self.hear(scope, until);
        }
        if let Ticket(Some(epoch)) = ticket
            && self.listening.load(Ordering::SeqCst)
            && self.epoch.load(Ordering::SeqCst) == epoch
        {
            self.read.insert(scope.to_owned(), epoch);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn nothing_is_known_before_a_read_while_subscribed() {
        let pauses = Pauses::default();
        assert!(!pauses.known("s"));
        // Read before the subscription: an announcement may still come unheard.
        pauses.read("s", pauses.ticket(), None);
        assert!(!pauses.known("s"));
        pauses.subscribed();
        assert!(
            !pauses.known("s"),
            "the earlier read was not while subscribed"
        );
        pauses.read("s", pauses.ticket(), None);
        assert!(pauses.known("s"));
        assert!(!pauses.known("other"), "a read is of its scope only");
    }

    #[tokio::test]
    async fn a_disconnection_makes_every_read_stale() {
        let pauses = Pauses::default();
        pauses.subscribed();
        pauses.read("s", pauses.ticket(), None);
        pauses.disconnected();
        assert!(!pauses.known("s"));
        pauses.subscribed();
        assert!(
            !pauses.known("s"),
            "announcements before the resubscription were lost"
        );
        pauses.read("s", pauses.ticket(), None);
        assert!(pauses.known("s"));
    }

    #[tokio::test]
    async fn a_read_overtaken_by_a_disconnection_does_not_count() {
        let pauses = Pauses::default();
        pauses.subscribed();
        let ticket = pauses.ticket();
        pauses.disconnected();
        pauses.subscribed();
        pauses.read("s", ticket, None);
        assert!(!pauses.known("s"));
    }

    #[tokio::test]
    async fn the_later_pause_holds() {
        let pauses = Pauses::default();
        let soon = Instant::now() + Duration::from_secs(1);
        let later = soon + Duration::from_secs(1);
        pauses.hear("s", later);
        pauses.read("s", pauses.ticket(), Some(soon));
        assert_eq!(pauses.heard("s"), Some(later));
        assert_eq!(pauses.heard("other"), None);
    }
}
