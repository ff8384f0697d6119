//! The bookkeeping of one language's warm pool: idle runners and how many containers exist
//! (idle, leased, being started or waiting for `ready`). The Docker side is in `docker.rs`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use proto::Language;
use tokio::sync::Notify;

use crate::docker::PoolStats;
use crate::runner::Runner;

/// What a pool's containers and runs did since start.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub started: AtomicU64,
    pub retired: AtomicU64,
    pub pooled_runs: AtomicU64,
    pub fresh_runs: AtomicU64,
    pub retries: AtomicU64,
    pub memory_updates: AtomicU64,
    /// Microseconds runs waited for a warm container.
    waited_us: AtomicU64,
}

#[derive(Debug)]
pub(crate) struct Pool {
    pub language: Language,
    /// Warm containers it keeps.
    pub size: usize,
    /// Kept topped up: from the start, or (a lazy pool) since the language's first run.
    active: AtomicBool,
    state: Mutex<State>,
    /// Fires when a runner becomes idle or a slot frees up.
    pub changed: Notify,
    /// Fires when a run starts waiting for a container: a resting one prepares at once.
    pub demand: Notify,
    pub counters: Counters,
}

#[derive(Debug, Default)]
struct State {
    idle: Vec<Runner>,
    /// Containers counted against the pool size: idle + leased + starting + settling.
    live: usize,
    /// Runs waiting for a container.
    waiting: usize,
    /// Containers resting after a run (released, not yet told to prepare).
    resting: usize,
}

/// One waiting run or resting container, counted in the pool's state while it lives.
pub(crate) struct Counted<'a> {
    pool: &'a Pool,
    count: fn(&mut State) -> &mut usize,
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        let mut state = self.pool.state();
        let count = (self.count)(&mut state);
        *count = count.saturating_sub(1);
    }
}

impl Pool {
    pub fn new(language: Language, size: usize, lazy: bool) -> Self {
        Self {
            language,
            size,
            active: AtomicBool::new(!lazy),
            state: Mutex::default(),
            changed: Notify::new(),
            demand: Notify::new(),
            counters: Counters::default(),
        }
    }

    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Marks the pool used; true the first time (a lazy pool starts now).
    pub fn activate(&self) -> bool {
        !self.active.swap(true, Ordering::Relaxed)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock leaves plain data behind; keep going.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An idle runner, preferably one whose memory limit already is `memory_mb`, and whether
    /// it may rest after its run (see [`Pool::may_rest`], as it stood when it was taken).
    /// Taking the last one wakes the resting containers: a container rests only while
    /// another is ready.
    pub fn take_idle(&self, memory_mb: u64) -> Option<(Runner, bool)> {
        let mut state = self.state();
        let index = state
            .idle
            .iter()
            .position(|r| r.memory_mb == memory_mb)
            .or_else(|| state.idle.len().checked_sub(1))?;
        let runner = state.idle.swap_remove(index);
        let may_rest = Self::restful(&state);
        let last = state.idle.is_empty();
        drop(state);
        if last {
            self.demand.notify_waiters();
        }
        Some((runner, may_rest))
    }

    /// Whether a run starting now may let its container rest after it: nothing waits, and
    /// another container is ready or about to be (resting). Otherwise the container prepares
    /// right after its result, with no word from the pool in between.
    pub fn may_rest(&self) -> bool {
        Self::restful(&self.state())
    }

    fn restful(state: &State) -> bool {
        state.waiting == 0 && (!state.idle.is_empty() || state.resting > 0)
    }

    /// Counts a container as resting until the guard drops.
    pub fn rest(&self) -> Counted<'_> {
        self.count(|s| &mut s.resting)
    }

    fn count(&self, count: fn(&mut State) -> &mut usize) -> Counted<'_> {
        *count(&mut self.state()) += 1;
        Counted { pool: self, count }
    }

    /// Counts a container about to be started, if the pool is below `size`.
    pub fn reserve(&self, size: usize) -> bool {
        let mut state = self.state();
        if state.live < size {
            state.live += 1;
            true
        } else {
            false
        }
    }

    /// A counted container is gone (removed, or its start failed).
    pub fn unreserve(&self) {
        let mut state = self.state();
        state.live = state.live.saturating_sub(1);
        drop(state);
        self.changed.notify_waiters();
    }

    pub fn put_idle(&self, runner: Runner) {
        self.state().idle.push(runner);
        self.changed.notify_waiters();
    }

    pub fn drain_idle(&self) -> Vec<Runner> {
        std::mem::take(&mut self.state().idle)
    }

    /// Counts a run as waiting until the guard drops, and wakes the resting containers.
    pub fn wait(&self) -> Counted<'_> {
        let waiting = self.count(|s| &mut s.waiting);
        self.demand.notify_waiters();
        waiting
    }

    /// Whether a container can rest before it prepares its next program: another one is
    /// ready for the next run and no run waits.
    pub fn can_rest(&self) -> bool {
        let state = self.state();
        !state.idle.is_empty() && state.waiting == 0
    }

    /// (idle, live)
    pub fn counts(&self) -> (usize, usize) {
        let state = self.state();
        (state.idle.len(), state.live)
    }

    /// A run waited `waited` for its warm container.
    pub fn waited(&self, waited: Duration) {
        let us = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
        self.counters.waited_us.fetch_add(us, Ordering::Relaxed);
    }

    pub fn stats(&self) -> PoolStats {
        let c = &self.counters;
        let state = self.state();
        PoolStats {
            containers_started: c.started.load(Ordering::Relaxed),
            containers_retired: c.retired.load(Ordering::Relaxed),
            pooled_runs: c.pooled_runs.load(Ordering::Relaxed),
            fresh_runs: c.fresh_runs.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
            memory_updates: c.memory_updates.load(Ordering::Relaxed),
            #[allow(clippy::cast_precision_loss)] // microseconds: exact below 2^53 (285 years)
            wait_seconds: c.waited_us.load(Ordering::Relaxed) as f64 / 1e6,
            size: self.size,
            idle: state.idle.len(),
            live: state.live,
            waiting: state.waiting,
        }
    }
}
