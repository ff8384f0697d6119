//! Whose call asks for a model slot next, within one process: by tenant and weight, not by
//! arrival.
//!
//! Calls wait for the model's limits one at a time (a turn). With more tasks in flight than
//! the model takes at once, the turn decides who waits: in arrival order, one tenant's batch
//! would keep every other tenant's call behind its own backlog. The turn goes instead to the
//! waiting call whose lane has the lowest pass (stride scheduling, as the worker's start of
//! tasks: each turn moves a lane's pass on by the inverse of its weight, and a lane with no
//! call waiting comes back at the current pass); within a lane, in arrival order.
//!
//! A call's lane is the tenant of the task it belongs to, set around the task with
//! [`with_lane`] (a task-local, so the model's API does not carry tenancy through every
//! call); a call outside any lane is in the lane of no tenant, weight 1.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;

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

tokio::task_local! {
    static LANE: Lane;
}

/// Runs `future` with its model calls in `lane`.
pub async fn with_lane<F: Future>(lane: Lane, future: F) -> F::Output {
    LANE.scope(lane, future).await
}

fn current_lane() -> Lane {
    LANE.try_with(Clone::clone).unwrap_or_default()
}

const STRIDE: u64 = 1 << 20;

struct Waiter {
    seq: u64,
    tenant: Option<String>,
    wake: oneshot::Sender<()>,
}

#[derive(Default)]
struct State {
    busy: bool,
    waiting: Vec<Waiter>,
    /// Each lane's pass and stride.
    lanes: HashMap<Option<String>, (u64, u64)>,
    /// The pass of the last turn given.
    now: u64,
    seq: u64,
}

/// The turn; `enter` waits for it, dropping the guard passes it on.
#[derive(Default)]
pub(crate) struct Turnstile {
    state: Mutex<State>,
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

pub(crate) struct Turn<'a> {
    turnstile: &'a Turnstile,
}

impl Turnstile {
    /// Waits for the turn, in the current task's lane.
    pub(crate) async fn enter(&self) -> Turn<'_> {
        let lane = current_lane();
        let waiting = {
            let mut state = self.state.lock().expect("poisoned");
            let now = state.now;
            let stride = STRIDE / u64::from(lane.weight.max(1));
            let idle = !state.waiting.iter().any(|w| w.tenant == lane.tenant);
            let entry = state
                .lanes
                .entry(lane.tenant.clone())
                .or_insert((now, stride));
            entry.1 = stride;
            if idle {
                // Back from idle: no credit for the time it had nothing waiting.
                entry.0 = entry.0.max(now);
            }
            if state.busy {
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
                state.busy = true;
                charge(&mut state, &lane.tenant);
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
            .min_by_key(|(_, w)| {
                let pass = state.lanes.get(&w.tenant).map_or(0, |l| l.0);
                (pass, w.seq)
            })
            .map(|(i, _)| i);
        let Some(i) = next else {
            state.busy = false;
            return;
        };
        let waiter = state.waiting.swap_remove(i);
        charge(&mut state, &waiter.tenant);
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

/// The turn goes to `tenant`'s lane: its pass moves on.
fn charge(state: &mut State, tenant: &Option<String>) {
    if let Some((pass, stride)) = state.lanes.get_mut(tenant) {
        state.now = *pass;
        *pass += *stride;
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
        let held = turnstile.enter().await;
        let mut tasks = Vec::new();
        for (tenant, weight) in calls {
            let (turnstile, got) = (turnstile.clone(), got.clone());
            tasks.push(tokio::spawn(with_lane(lane(tenant, weight), async move {
                let _turn = turnstile.enter().await;
                got.lock().unwrap().push(tenant);
            })));
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
        let held = turnstile.enter().await;
        let cancelled = {
            let turnstile = turnstile.clone();
            tokio::spawn(async move {
                let _turn = turnstile.enter().await;
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        cancelled.abort();
        let _ = cancelled.await;
        let next = {
            let turnstile = turnstile.clone();
            tokio::spawn(async move {
                let _turn = turnstile.enter().await;
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        drop(held);
        tokio::time::timeout(std::time::Duration::from_secs(5), next)
            .await
            .expect("the turn reached the live waiter")
            .unwrap();
    }
}
