//! Whose call asks for a model slot next, within one process: by tenant and weight, not by
//! arrival.
//!
//! Calls wait for the model's limits one at a time (a turn). With more tasks in flight than
//! the model takes at once, the turn decides who waits: in arrival order, one tenant's batch
//! would keep every other tenant's call behind its own backlog. The turn goes instead to the
//! waiting call whose lane has the lowest pass (stride scheduling, the `stride` crate's, as the
//! worker's start of tasks: each turn moves a lane's pass on by the inverse of its weight, and
//! a lane with no call waiting comes back at the current pass); within a lane, in arrival order.
//!
//! A call's lane is the tenant of the task it belongs to and its weight, given by the caller
//! (`enter`'s argument); a call outside any tenant's work is in the lane of no tenant, weight 1.

use std::sync::Mutex;

use stride::Stride;
use tokio::sync::oneshot;

/// A tenant's lane and its weight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lane {
    pub tenant: Option<String>,
    pub weight: u32,
}

impl Default for Lane {
    fn default() -> Self {
        Self {
            tenant: None,
            weight: 1,
        }
    }
}

struct Waiter {
    seq: u64,
    tenant: Option<String>,
    wake: oneshot::Sender<()>,
}

#[derive(Default)]
struct State {
    /// Turns held now, at most `permits`.
    busy: usize,
    permits: usize,
    waiting: Vec<Waiter>,
    /// Whose turn it is, by tenant.
    order: Stride<Option<String>>,
    seq: u64,
}

/// The turn (or `permits` turns at once); `enter` waits for one, dropping the guard passes it
/// on. Besides the model's limits, the worker orders its sandbox runs with one (a pool's
/// containers as the permits), so a tenant's run does not wait behind another's backlog.
pub struct Turnstile {
    state: Mutex<State>,
}

impl Default for Turnstile {
    fn default() -> Self {
        Self::new(1)
    }
}

impl std::fmt::Debug for Turnstile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.lock().expect("poisoned");
        f.debug_struct("Turnstile")
            .field("busy", &state.busy)
            .field("waiting", &state.waiting.len())
            .finish()
    }
}

/// A turn held; dropping it passes the turn on.
#[derive(Debug)]
pub struct Turn<'a> {
    turnstile: &'a Turnstile,
}

impl Turnstile {
    /// `permits` turns at once (at least one).
    pub fn new(permits: usize) -> Self {
        Self {
            state: Mutex::new(State {
                permits: permits.max(1),
                ..State::default()
            }),
        }
    }

    /// Waits for a turn, in `lane`.
    pub async fn enter(&self, lane: &Lane) -> Turn<'_> {
        let lane = lane.clone();
        let waiting = {
            let mut state = self.state.lock().expect("poisoned");
            let idle = !state.waiting.iter().any(|w| w.tenant == lane.tenant);
            state.order.set_weight(&lane.tenant, lane.weight);
            if idle {
                // Back from idle: no credit for the time it had nothing waiting.
                state.order.wake(&lane.tenant);
            }
            if state.busy >= state.permits {
                let (wake, woken) = oneshot::channel();
                state.seq += 1;
                let seq = state.seq;
                state.waiting.push(Waiter {
                    seq,
                    tenant: lane.tenant,
                    wake,
                });
                Some(Waiting {
                    turnstile: self,
                    seq,
                    woken: Some(woken),
                })
            } else {
                state.busy += 1;
                state.order.charge(&lane.tenant);
                None
            }
        };
        if let Some(mut waiting) = waiting {
            if let Some(woken) = waiting.woken.as_mut() {
                // A waiter leaves `waiting` only with the turn, so its sender is never
                // dropped unused.
                let _ = woken.await;
            }
            waiting.woken = None; // the turn is ours: the guard below passes it on
        }
        Turn { turnstile: self }
    }

    /// Gives the turn to the next waiting call, or frees it.
    fn pass_on(&self) {
        let mut state = self.state.lock().expect("poisoned");
        // The waiting call of the lane with the lowest pass, the earliest of that lane.
        let next = state
            .waiting
            .iter()
            .enumerate()
            .min_by_key(|(_, w)| (state.order.pass(&w.tenant), w.seq))
            .map(|(i, _)| i);
        let Some(i) = next else {
            state.busy = state.busy.saturating_sub(1);
            return;
        };
        let waiter = state.waiting.swap_remove(i);
        state.order.charge(&waiter.tenant);
        // Its receiver is alive: a waiter given up removes itself (under this lock) first.
        let _ = waiter.wake.send(());
    }
}

/// A call waiting for the turn; given up (its task cancelled), it leaves the queue, or passes
/// on the turn it was given meanwhile.
struct Waiting<'a> {
    turnstile: &'a Turnstile,
    seq: u64,
    woken: Option<oneshot::Receiver<()>>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let Some(mut woken) = self.woken.take() else {
            return;
        };
        let given = {
            let mut state = self.turnstile.state.lock().expect("poisoned");
            if let Some(i) = state.waiting.iter().position(|w| w.seq == self.seq) {
                state.waiting.swap_remove(i);
                false
            } else {
                // Removed from the queue, so the turn was sent to it (under the same lock).
                woken.try_recv().is_ok()
            }
        };
        if given {
            self.turnstile.pass_on();
        }
    }
}

impl<'a> Turn<'a> {
    /// The holder cannot go on now, but a call of another lane might (the model's shared
    /// limits keep their last leases for other tenants): the turn goes to the waiting call of
    /// another lane with the lowest pass, and this one waits for it again, behind its own
    /// lane. Returns the turn and whether it was passed on (not: no other lane waits).
    pub async fn defer(self, lane: &Lane) -> (Turn<'a>, bool) {
        let turnstile = self.turnstile;
        let tenant = lane.tenant.clone();
        let waiting = {
            let mut state = turnstile.state.lock().expect("poisoned");
            let next = state
                .waiting
                .iter()
                .enumerate()
                .filter(|(_, w)| w.tenant != tenant)
                .min_by_key(|(_, w)| (state.order.pass(&w.tenant), w.seq))
                .map(|(i, _)| i);
            let Some(i) = next else {
                return (self, false);
            };
            // The turn changes hands here: this guard must not pass it on again.
            std::mem::forget(self);
            let waiter = state.waiting.swap_remove(i);
            state.order.charge(&waiter.tenant);
            let _ = waiter.wake.send(());
            let (wake, woken) = oneshot::channel();
            state.seq += 1;
            let seq = state.seq;
            state.waiting.push(Waiter { seq, tenant, wake });
            Waiting {
                turnstile,
                seq,
                woken: Some(woken),
            }
        };
        let mut waiting = waiting;
        if let Some(woken) = waiting.woken.as_mut() {
            let _ = woken.await;
        }
        waiting.woken = None;
        (Turn { turnstile }, true)
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.turnstile.pass_on();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn lane(tenant: &str, weight: u32) -> Lane {
        Lane {
            tenant: Some(tenant.into()),
            weight,
        }
    }

    /// Queues `calls` (tenant, weight) behind a held turn, releases it, and returns the order
    /// in which they got the turn.
    async fn order(calls: Vec<(&'static str, u32)>) -> Vec<&'static str> {
        let turnstile = Arc::new(Turnstile::default());
        let got = Arc::new(Mutex::new(Vec::new()));
        let held = turnstile.enter(&Lane::default()).await;
        let mut tasks = Vec::new();
        for (tenant, weight) in calls {
            let (turnstile, got) = (turnstile.clone(), got.clone());
            tasks.push(tokio::spawn(async move {
                let _turn = turnstile.enter(&lane(tenant, weight)).await;
                got.lock().unwrap().push(tenant);
            }));
            // Arrival order is the spawn order.
            tokio::task::yield_now().await;
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        drop(held);
        for task in tasks {
            task.await.unwrap();
        }
        Arc::try_unwrap(got).unwrap().into_inner().unwrap()
    }

    #[tokio::test]
    async fn a_call_of_another_tenant_does_not_wait_behind_a_backlog() {
        let mut calls = vec![("bulk", 1); 6];
        calls.push(("solo", 1));
        let order = order(calls).await;
        // solo arrived last, behind six of bulk's calls, and has the second turn.
        assert_eq!(
            order.iter().position(|t| *t == "solo"),
            Some(1),
            "{order:?}"
        );
    }

    #[tokio::test]
    async fn turns_follow_the_weights() {
        let mut calls = Vec::new();
        for _ in 0..12 {
            calls.push(("heavy", 3));
        }
        for _ in 0..12 {
            calls.push(("light", 1));
        }
        let order = order(calls).await;
        let first: Vec<_> = order[..16].to_vec();
        let heavy = first.iter().filter(|t| **t == "heavy").count();
        assert_eq!(heavy, 12, "{order:?}");
    }

    #[tokio::test]
    async fn a_cancelled_waiter_passes_the_turn_on() {
        let turnstile = Arc::new(Turnstile::default());
        let held = turnstile.enter(&Lane::default()).await;
        let cancelled = {
            let turnstile = turnstile.clone();
            tokio::spawn(async move {
                let _turn = turnstile.enter(&Lane::default()).await;
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        cancelled.abort();
        let _ = cancelled.await;
        let next = {
            let turnstile = turnstile.clone();
            tokio::spawn(async move {
                let _turn = turnstile.enter(&Lane::default()).await;
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        drop(held);
        tokio::time::timeout(std::time::Duration::from_secs(5), next)
            .await
            .expect("the turn reached the live waiter")
            .unwrap();
    }

    #[tokio::test]
    async fn permits_are_held_at_once_and_the_next_goes_by_lane() {
        let turnstile = Arc::new(Turnstile::new(2));
        let a = turnstile.enter(&Lane::default()).await;
        let b = tokio::time::timeout(
            std::time::Duration::from_secs(1),
            turnstile.enter(&Lane::default()),
        )
        .await
        .expect("a second permit is free");
        let got = Arc::new(Mutex::new(Vec::new()));
        let mut waiting = Vec::new();
        for tenant in ["bulk", "bulk", "bulk", "solo"] {
            let (turnstile, got) = (turnstile.clone(), got.clone());
            waiting.push(tokio::spawn(async move {
                let _turn = turnstile.enter(&lane(tenant, 1)).await;
                got.lock().unwrap().push(tenant);
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }));
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        assert!(got.lock().unwrap().is_empty(), "both permits are held");
        drop(a);
        drop(b);
        for task in waiting {
            task.await.unwrap();
        }
        let order = got.lock().unwrap().clone();
        assert!(order[..2].contains(&"solo"), "{order:?}");
    }

    #[tokio::test]
    async fn a_deferred_turn_goes_to_another_lane_and_comes_back() {
        let turnstile = Arc::new(Turnstile::default());
        let got = Arc::new(Mutex::new(Vec::new()));
        let held = turnstile.enter(&lane("bulk", 1)).await;
        let mut tasks = Vec::new();
        for tenant in ["bulk", "solo"] {
            let (turnstile, got) = (turnstile.clone(), got.clone());
            tasks.push(tokio::spawn(async move {
                let _turn = turnstile.enter(&lane(tenant, 1)).await;
                got.lock().unwrap().push(tenant);
            }));
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        // The holder (bulk) cannot go on: solo's call goes first, though bulk's arrived
        // earlier; the holder then waits behind its own lane.
        let (back, deferred) = held.defer(&lane("bulk", 1)).await;
        assert!(deferred);
        assert_eq!(*got.lock().unwrap(), vec!["solo", "bulk"]);
        // Nobody waits now: deferring keeps the turn.
        let (back, deferred) = back.defer(&lane("bulk", 1)).await;
        assert!(!deferred);
        drop(back);
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(*got.lock().unwrap(), vec!["solo", "bulk"]);
        // Every turn came back: the next one is free at once.
        let free = tokio::time::timeout(
            std::time::Duration::from_secs(1),
            turnstile.enter(&Lane::default()),
        )
        .await;
        assert!(free.is_ok());
    }

    #[tokio::test]
    async fn a_deferring_call_given_up_passes_its_turn_on() {
        let turnstile = Arc::new(Turnstile::default());
        let held = turnstile.enter(&lane("bulk", 1)).await;
        let solo = {
            let turnstile = turnstile.clone();
            tokio::spawn(async move {
                let turn = turnstile.enter(&lane("solo", 1)).await;
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                drop(turn);
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        // Bulk defers to solo, and is cancelled while it waits to get the turn back.
        let gave_up = tokio::time::timeout(
            std::time::Duration::from_millis(10),
            held.defer(&lane("bulk", 1)),
        )
        .await;
        assert!(gave_up.is_err());
        solo.await.unwrap();
        let free = tokio::time::timeout(
            std::time::Duration::from_secs(1),
            turnstile.enter(&Lane::default()),
        )
        .await;
        assert!(free.is_ok(), "the turn was lost");
    }
}
