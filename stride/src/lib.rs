//! Weighted fair order between lanes, by stride scheduling.
//!
//! Each lane (a tenant's) has a pass and a stride, the inverse of its weight. Of the lanes with
//! work waiting, the one with the lowest pass goes next and its pass moves on by its stride:
//! two lanes that always have work, of weights 3 and 1, get turns 3:1. A lane that had nothing
//! waiting comes back at the current pass (the pass of the last turn given), so idle time earns
//! no credit for later, and a lane never seen before starts there too.
//!
//! This is only the order: who holds work, and what a turn is (a task started, a model call, a
//! sandbox run), is the caller's.

use std::collections::HashMap;
use std::hash::Hash;

/// The pass a lane of weight 1 moves on by per turn; a lane of weight `w` moves on by
/// `STRIDE / w`.
const STRIDE: u64 = 1 << 20;

#[derive(Debug, Clone, Copy)]
struct Lane {
    pass: u64,
    stride: u64,
}

/// The passes of a set of lanes keyed by `K`.
#[derive(Debug, Clone)]
pub struct Stride<K> {
    lanes: HashMap<K, Lane>,
    /// The pass of the last turn given: where a lane back from idle starts.
    now: u64,
}

impl<K> Default for Stride<K> {
    fn default() -> Self {
        Self {
            lanes: HashMap::new(),
            now: 0,
        }
    }
}

fn stride(weight: u32) -> u64 {
    STRIDE / u64::from(weight.max(1))
}

impl<K: Eq + Hash + Clone> Stride<K> {
    /// Sets `lane`'s weight (0 counts as 1), from its next turn on; a new lane starts at the
    /// current pass.
    pub fn set_weight(&mut self, lane: &K, weight: u32) {
        let now = self.now;
        self.lanes
            .entry(lane.clone())
            .or_insert(Lane {
                pass: now,
                stride: 0,
            })
            .stride = stride(weight);
    }

    /// `lane` has work waiting again after a time with none: it goes no earlier than the lanes
    /// that kept theirs. A lane not seen before starts at the current pass with weight 1.
    pub fn wake(&mut self, lane: &K) {
        let now = self.now;
        let entry = self.lanes.entry(lane.clone()).or_insert(Lane {
            pass: now,
            stride: stride(1),
        });
        entry.pass = entry.pass.max(now);
    }

    /// `lane`'s pass: of several lanes with work waiting, the lowest goes next. A lane not seen
    /// yet would start at the current pass.
    pub fn pass(&self, lane: &K) -> u64 {
        self.lanes.get(lane).map_or(self.now, |l| l.pass)
    }

    /// Gives `lane` a turn: its pass moves on by its stride.
    pub fn charge(&mut self, lane: &K) {
        let now = self.now;
        let entry = self.lanes.entry(lane.clone()).or_insert(Lane {
            pass: now,
            stride: stride(1),
        });
        self.now = entry.pass;
        entry.pass += entry.stride;
    }

    /// Of the lanes in `ready` (those with work waiting), the one whose turn it is, charged
    /// for it; ties go to the first in `ready`. `None` when `ready` is empty.
    pub fn next<'a, I>(&mut self, ready: I) -> Option<&'a K>
    where
        I: IntoIterator<Item = &'a K>,
        K: 'a,
    {
        let mut best: Option<(&'a K, u64)> = None;
        for lane in ready {
            let pass = self.pass(lane);
            if best.is_none_or(|(_, p)| pass < p) {
                best = Some((lane, pass));
            }
        }
        let (lane, _) = best?;
        self.charge(lane);
        Some(lane)
    }

    /// Forgets `lane` (it will start at the current pass if it comes back).
    pub fn remove(&mut self, lane: &K) {
        self.lanes.remove(lane);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `turns` turns among lanes that always have work waiting: how many each got.
    fn share(
        stride: &mut Stride<&'static str>,
        lanes: &[&'static str],
        turns: usize,
    ) -> Vec<usize> {
        let mut got = vec![0; lanes.len()];
        for _ in 0..turns {
            let lane = *stride.next(lanes).unwrap();
            got[lanes.iter().position(|l| *l == lane).unwrap()] += 1;
        }
        got
    }

    #[test]
    fn saturating_lanes_share_by_weight() {
        let mut stride = Stride::default();
        stride.set_weight(&"a", 3);
        stride.set_weight(&"b", 1);
        assert_eq!(share(&mut stride, &["a", "b"], 400), vec![300, 100]);
    }

    #[test]
    fn equal_weights_alternate() {
        let mut stride = Stride::default();
        let order: Vec<_> = (0..6).map(|_| *stride.next(&["a", "b"]).unwrap()).collect();
        assert_eq!(order, ["a", "b", "a", "b", "a", "b"]);
    }

    #[test]
    fn an_idle_lane_earns_no_credit() {
        let mut stride = Stride::default();
        stride.set_weight(&"a", 1);
        stride.set_weight(&"b", 1);
        // "a" alone for a while: "b" had nothing waiting.
        for _ in 0..50 {
            assert_eq!(stride.next(&["a"]), Some(&"a"));
        }
        stride.wake(&"b");
        // Back from idle, "b" shares from now on rather than taking 50 turns in a row.
        assert_eq!(share(&mut stride, &["a", "b"], 10), vec![5, 5]);
    }

    #[test]
    fn a_new_lane_starts_at_the_current_pass() {
        let mut stride = Stride::default();
        for _ in 0..50 {
            stride.next(&["a"]);
        }
        stride.set_weight(&"c", 1);
        assert_eq!(share(&mut stride, &["a", "c"], 10), vec![5, 5]);
        // Never set: weight 1, at the current pass.
        assert_eq!(share(&mut stride, &["a", "c", "d"], 9), vec![3, 3, 3]);
    }

    #[test]
    fn a_weight_change_applies_from_the_next_turn() {
        let mut stride = Stride::default();
        assert_eq!(share(&mut stride, &["a", "b"], 10), vec![5, 5]);
        stride.set_weight(&"b", 4);
        assert_eq!(share(&mut stride, &["a", "b"], 50), vec![10, 40]);
    }

    #[test]
    fn nothing_ready_gives_no_turn() {
        let mut stride: Stride<&str> = Stride::default();
        assert_eq!(stride.next(&[]), None);
    }
}
