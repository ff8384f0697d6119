//! The concurrency limit found from the server's answers: how many calls the model server
//! takes at once before they queue in it.
//!
//! Vegas's estimate, as Netflix's concurrency-limits and TCP Vegas use it, with a model of an
//! answer's time in place of one round-trip time: calls differ in length. An answer that waits
//! for nothing takes `a + b * tokens` (the server reads the prompt, then writes each token);
//! the line goes through the fastest answer and the one fastest per token, so that a server
//! whose answers take the same time whatever their length (`b` = 0) and one whose time is all
//! in the tokens (`a` = 0) are both read right. By Little's law a server running `slots` calls
//! at once, with `n` in flight, answers in `n / slots` times that on average; so the calls
//! waiting in it are `n * (1 - expected / actual)`, each smoothed over the answers (averages of
//! times, as Little's law needs, not of ratios). While fewer than [`GROW_BELOW`] wait and the
//! limit is full, it grows by `1 / limit` an answer (one call a round of calls); past
//! [`CUT_ABOVE`] it drops to the calls the server runs; only calls sent since the limit in
//! force last changed decide its next change (calls sent at the old limit come back slow too,
//! and are one signal); a call that timed out halves it. It settles at the server's slots, now
//! and then one above (the growth that looks for more). A server that reports its slots
//! (llama.cpp's `/props`) caps the limit at them.
//!
//! A server kept full keeps its queue, so no later answer would show the line without it:
//! after [`PROBE_EVERY`] without an answer on or under the line, the limit is one until an
//! answer sent alone comes back, and the line starts from it again (Envoy's adaptive
//! concurrency measures its minimum round trip the same way).
//!
//! The state is plain data: the shared scope keeps it in the store and each process changes
//! it by compare-and-set; the local scope keeps it in memory. The rules live here alone.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The limit before anything is measured, when the server reports no slots (and the ceiling
/// is higher): a few calls, so that a one-slot server queues at most a few answers while the
/// first samples come in.
pub const INITIAL: u32 = 4;
/// The limit grows while fewer calls than this wait in the server...
pub const GROW_BELOW: f64 = 0.25;
/// ...and drops when more than this many wait (one more than the slots is one waiting).
pub const CUT_ABOVE: f64 = 0.75;
/// The weight of a new answer in the smoothed pace.
pub const SMOOTHING: f64 = 0.1;
/// The cut for a call that timed out.
pub const TIMEOUT_BACKOFF: f64 = 0.5;
/// The slowest pace (for deadlines) is of this window and the one before.
pub const WINDOW: Duration = Duration::from_secs(120);
/// A baseline not matched for this long is measured again, one call alone.
pub const PROBE_EVERY: Duration = Duration::from_secs(300);
/// A call's deadline: this many times the answer's budget at the slowest recent pace...
pub const DEADLINE_FACTOR: f64 = 4.0;
/// ...and never less than this.
pub const MIN_DEADLINE: Duration = Duration::from_secs(30);

/// Why the limit is what it is (the last change).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Nothing measured yet.
    Initial,
    /// The server reported its slots.
    Capacity,
    /// Answers kept their pace with the limit full.
    Grew,
    /// Answers slowed down: calls wait in the server.
    Latency,
    /// A call timed out.
    Timeout,
    /// The baseline is measured again, one call alone (or was, and the limit is back).
    Probe,
    /// The server reported requests waiting in its own queue (vLLM's `/metrics`).
    Queued,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Initial => "initial",
            Reason::Capacity => "capacity",
            Reason::Grew => "grew",
            Reason::Latency => "latency",
            Reason::Timeout => "timeout",
            Reason::Probe => "probe",
            Reason::Queued => "queued",
        }
    }
}

/// How a call ended, as the limit sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// An answer with this many completion tokens.
    Answered { completion_tokens: u64 },
    /// No answer within the call's deadline.
    TimedOut,
}

/// One call's evidence.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// When it ended (ms since the epoch).
    pub at_ms: u64,
    pub elapsed: Duration,
    /// Calls in flight when it ended, itself included (the whole scope's).
    pub in_flight: u32,
    pub outcome: Outcome,
}

/// A change of the limit in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    pub from: u32,
    pub to: u32,
    pub reason: Reason,
}

/// The limit and what it was found from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// Fractional: growth adds `1 / limit` per sample.
    pub limit: f64,
    /// The operator's ceiling (`model.max_concurrency`).
    pub ceiling: u32,
    /// The server's own report of its slots, if it makes one.
    pub capacity: Option<u32>,
    /// The answer that took least time, and the one that took least per completion token
    /// (tokens, seconds): the line through them is how long an answer takes that waits for
    /// nothing ([`Self::expected`]); when an answer last became one of them.
    pub fastest: Option<(u64, f64)>,
    pub leanest: Option<(u64, f64)>,
    pub baseline_ms: u64,
    /// Since when the baseline is measured again (the limit is one meanwhile).
    pub probe_ms: Option<u64>,
    /// The slowest pace of this window and of the one before.
    pub slowest: Option<f64>,
    pub slowest_before: Option<f64>,
    pub window_ms: u64,
    /// The answers' expected and actual seconds, smoothed (an average of each, as Little's
    /// law needs, not of their ratios); after a cut, the expected for both (what the new limit
    /// should give if the estimate is right).
    pub smoothed: Option<(f64, f64)>,
    /// Answers in `smoothed` so far: the first few weigh as in a plain average (a server of
    /// slow answers gives few, and the first of them must count).
    #[serde(default)]
    pub smoothed_n: u32,
    /// The last answer of any kind (the server is answering).
    pub answered_ms: u64,
    /// Why the limit in force last changed, and when: only calls sent since then decide the
    /// next change.
    pub reason: Reason,
    pub changed_ms: u64,
    /// When the server last reported requests waiting in its queue: the limit does not grow
    /// for [`QUEUE_HOLD`] after.
    #[serde(default)]
    pub waiting_ms: u64,
}

/// What a server reports of its own queue (vLLM's `num_requests_running` and
/// `num_requests_waiting`, every client's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerQueue {
    pub running: u32,
    pub waiting: u32,
}

/// What a server said when asked for its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueReport {
    Queue(ServerQueue),
    /// It answered, with no queue in it (another server's metrics, or none at all): not
    /// asked again.
    None,
    /// No answer (a timeout, a refused connection, a 5xx): asked again at the next turn.
    Unanswered,
}

/// How long a server's report of waiting requests holds the limit from growing.
pub const QUEUE_HOLD: Duration = Duration::from_secs(10);

impl State {
    /// Nothing measured: [`INITIAL`] (or the server's slots) under `ceiling`.
    pub fn new(ceiling: u32, capacity: Option<u32>, now_ms: u64) -> Self {
        let ceiling = ceiling.max(1);
        let (limit, reason) = match capacity {
            Some(slots) => (slots.clamp(1, ceiling), Reason::Capacity),
            None => (INITIAL.min(ceiling), Reason::Initial),
        };
        Self {
            limit: f64::from(limit),
            ceiling,
            capacity,
            fastest: None,
            leanest: None,
            baseline_ms: now_ms,
            probe_ms: None,
            slowest: None,
            slowest_before: None,
            window_ms: now_ms,
            smoothed: None,
            smoothed_n: 0,
            answered_ms: 0,
            reason,
            changed_ms: now_ms,
            waiting_ms: 0,
        }
    }

    /// The calls that may be in flight now.
    pub fn in_force(&self) -> u32 {
        if self.probe_ms.is_some() {
            return 1;
        }
        let cap = self.capacity.unwrap_or(u32::MAX).min(self.ceiling).max(1);
        // `limit` stays within [1, ceiling], so the cast cannot overflow.
        (self.limit.floor() as u32).clamp(1, cap)
    }

    /// How long an answer of `tokens` takes when it waits for nothing: the line through the
    /// fastest answer and the one fastest per token (their reading of the prompt and their
    /// writing, `a + b * tokens`), or through the origin while they are one.
    pub fn expected(&self, tokens: u64) -> Option<f64> {
        let tokens = tokens as f64;
        match (self.fastest, self.leanest) {
            (Some((ts, es)), Some((tl, el))) if tl > ts => {
                let per_token = ((el - es) / (tl - ts) as f64).max(0.0);
                let overhead = (es - per_token * ts as f64).max(0.0);
                Some(overhead + per_token * tokens)
            }
            (_, Some((tl, el))) => Some(el / tl as f64 * tokens),
            (Some((_, es)), None) => Some(es),
            (None, None) => None,
        }
    }

    /// The slowest recent pace, queueing included.
    pub fn slowest_pace(&self) -> Option<f64> {
        match (self.slowest, self.slowest_before) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    /// A call's deadline for an answer of at most `tokens`: [`DEADLINE_FACTOR`] times the
    /// longer of that answer at the slowest recent pace and that answer alone once for each
    /// call the limit lets in (a call may wait behind all of them in a server that runs one
    /// at a time: the first answers of a round do not show the wait of the last), at least
    /// [`MIN_DEADLINE`], at most `ceiling`; the `ceiling` itself until a pace is known.
    pub fn deadline(&self, tokens: u32, ceiling: Duration) -> Duration {
        let Some(pace) = self.slowest_pace() else {
            return ceiling;
        };
        let tokens = tokens.max(1);
        let paced = pace * f64::from(tokens);
        let queued = self
            .expected(u64::from(tokens))
            .map_or(0.0, |alone| alone * f64::from(self.in_force()));
        Duration::try_from_secs_f64(DEADLINE_FACTOR * paced.max(queued))
            .unwrap_or(ceiling)
            .max(MIN_DEADLINE)
            .min(ceiling)
    }

    /// Takes the operator's ceiling and the server's report as they are now.
    pub fn configure(
        &mut self,
        ceiling: u32,
        capacity: Option<u32>,
        now_ms: u64,
    ) -> Option<Change> {
        let from = self.in_force();
        self.ceiling = ceiling.max(1);
        let reported = capacity.is_some() && capacity != self.capacity;
        self.capacity = capacity;
        if reported && let Some(slots) = capacity {
            // A server that says how many it runs at once is taken at its word.
            self.limit = f64::from(slots.clamp(1, self.ceiling));
        }
        self.limit = self.limit.clamp(1.0, f64::from(self.ceiling));
        let to = self.in_force();
        (to != from).then(|| self.changed(from, to, Reason::Capacity, now_ms))
    }

    /// Learns from one call; the change of the limit in force, if any.
    pub fn observe(&mut self, sample: Sample) -> Option<Change> {
        let from = self.in_force();
        self.roll(sample.at_ms);
        let reason = match sample.outcome {
            Outcome::TimedOut => {
                self.cut(self.limit * TIMEOUT_BACKOFF, sample);
                Reason::Timeout
            }
            Outcome::Answered { completion_tokens } => {
                self.answered_ms = self.answered_ms.max(sample.at_ms);
                if completion_tokens == 0 {
                    return None;
                }
                let elapsed = sample.elapsed.as_secs_f64();
                let point = (completion_tokens, elapsed);
                let pace = elapsed / completion_tokens as f64;
                self.slowest = Some(self.slowest.map_or(pace, |s| s.max(pace)));
                if let Some(probe) = self.probe_ms {
                    let sent = sample.at_ms.saturating_sub(millis(sample.elapsed));
                    if sample.in_flight > 1 || sent < probe {
                        // Not alone, or sent before the probe: it may have waited.
                        return None;
                    }
                    // The one answer known to have waited for nothing: the line starts from it
                    // again (through the origin until an answer of another length is faster).
                    self.probe_ms = None;
                    self.fastest = Some(point);
                    self.leanest = Some(point);
                    self.baseline_ms = sample.at_ms;
                    self.smoothed = None;
                    self.smoothed_n = 0;
                    let to = self.in_force();
                    return (to != from)
                        .then(|| self.changed(from, to, Reason::Probe, sample.at_ms));
                }
                let mut matched = false;
                if self.fastest.is_none_or(|(_, e)| elapsed <= e) {
                    self.fastest = Some(point);
                    matched = true;
                }
                if self.leanest.is_none_or(|(t, e)| pace <= e / t as f64) {
                    self.leanest = Some(point);
                    matched = true;
                }
                if matched {
                    self.baseline_ms = sample.at_ms;
                } else if sample.at_ms.saturating_sub(self.baseline_ms) >= millis(PROBE_EVERY) {
                    self.probe_ms = Some(sample.at_ms);
                    return Some(self.changed(from, 1, Reason::Probe, sample.at_ms))
                        .filter(|c| c.from != c.to);
                }
                // A point on or under the line waited for nothing.
                let expected = self
                    .expected(completion_tokens)
                    .unwrap_or(elapsed)
                    .min(elapsed);
                let n = match self.smoothed {
                    Some(_) => self.smoothed_n.saturating_add(1).max(2),
                    None => 1,
                };
                // A running average until it would weigh an answer less than SMOOTHING.
                let weight = SMOOTHING.max(1.0 / f64::from(n));
                let (x, e) = self.smoothed.map_or((expected, elapsed), |(x, e)| {
                    (x + weight * (expected - x), e + weight * (elapsed - e))
                });
                self.smoothed = Some((x, e));
                self.smoothed_n = n;
                let ratio = if e > 0.0 { (x / e).min(1.0) } else { 1.0 };
                let waiting = f64::from(sample.in_flight) * (1.0 - ratio);
                if waiting > CUT_ABOVE {
                    // What the server runs at once.
                    let runs = f64::from(sample.in_flight) * ratio;
                    if self.cut(runs, sample) {
                        self.smoothed = Some((x, x));
                        self.smoothed_n = 1;
                    }
                    Reason::Latency
                } else if waiting < GROW_BELOW
                    && sample.in_flight >= from
                    && self.current(sample)
                    && sample.at_ms.saturating_sub(self.waiting_ms) >= millis(QUEUE_HOLD)
                {
                    // Only a full limit says whether more would keep the pace.
                    let ceiling = f64::from(self.ceiling.min(self.capacity.unwrap_or(u32::MAX)));
                    self.limit = (self.limit + 1.0 / self.limit).min(ceiling.max(1.0));
                    Reason::Grew
                } else {
                    return None;
                }
            }
        };
        let to = self.in_force();
        (to != from).then(|| self.changed(from, to, reason, sample.at_ms))
    }

    /// The server's report of its queue: with requests waiting, it runs `running` at once and
    /// queues the rest, so the limit drops to what it runs (and holds from growing a while).
    /// Every client's requests are in the report: a server shared with others leaves this
    /// cluster fewer.
    pub fn queued(&mut self, queue: ServerQueue, now_ms: u64) -> Option<Change> {
        if queue.waiting == 0 || self.probe_ms.is_some() {
            return None;
        }
        self.waiting_ms = self.waiting_ms.max(now_ms);
        let from = self.in_force();
        self.limit = self.limit.min(f64::from(queue.running.max(1)));
        let to = self.in_force();
        (to != from).then(|| self.changed(from, to, Reason::Queued, now_ms))
    }

    /// Whether an answer came within `within` before `now_ms`: a server that answers is slow,
    /// not down.
    pub fn answering(&self, now_ms: u64, within: Duration) -> bool {
        self.answered_ms > 0 && now_ms.saturating_sub(self.answered_ms) <= millis(within)
    }

    /// Lowers the limit to `to`, unless the call was sent before the limit in force last
    /// changed; whether it did.
    fn cut(&mut self, to: f64, sample: Sample) -> bool {
        if !self.current(sample) {
            return false;
        }
        self.limit = to.clamp(1.0, self.limit);
        true
    }

    /// Whether the call was sent at the limit in force now: one sent before it changed says
    /// nothing of it (calls sent before a cut come back slow too, and are one signal).
    fn current(&self, sample: Sample) -> bool {
        sample.at_ms.saturating_sub(millis(sample.elapsed)) >= self.changed_ms
    }

    fn roll(&mut self, now_ms: u64) {
        let window = millis(WINDOW);
        if now_ms.saturating_sub(self.window_ms) >= window {
            // A window with no sample leaves nothing of itself either.
            let stale = now_ms.saturating_sub(self.window_ms) >= 2 * window;
            self.slowest_before = if stale { None } else { self.slowest };
            self.slowest = None;
            self.window_ms = now_ms;
        }
    }

    fn changed(&mut self, from: u32, to: u32, reason: Reason, now_ms: u64) -> Change {
        self.reason = reason;
        self.changed_ms = now_ms;
        Change { from, to, reason }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How long a server takes for an answer of so many tokens (ms), waiting aside.
    type Service = fn(u64) -> u64;

    /// 200 ms whatever the length (a fixed-latency FAKE).
    fn fixed(_: u64) -> u64 {
        200
    }

    /// Reading the prompt, then 2 ms a token (a real server).
    fn reading_then_writing(tokens: u64) -> u64 {
        60 + 2 * tokens
    }

    /// A server of `slots` that answers each call in `service(tokens)` ms, first come first
    /// served, driven by `clients` callers that each call again as soon as answered, under the
    /// limit; the answers' lengths cycle through `lengths`. Returns the state and the limit in
    /// force after each answer.
    fn simulate(
        slots: usize,
        clients: usize,
        calls: usize,
        ceiling: u32,
        service: Service,
        lengths: &[u64],
    ) -> (State, Vec<u32>) {
        let mut state = State::new(ceiling, None, 0);
        let mut now = 1_000u64;
        // The server: when each slot is free next.
        let mut free_at = vec![now; slots];
        // Calls in flight: (sent, ends, tokens).
        let mut flight: Vec<(u64, u64, u64)> = Vec::new();
        let mut waiting = clients;
        let mut seen = Vec::new();
        let mut sent_count = 0usize;
        for _ in 0..calls {
            // Send what the limit allows.
            while waiting > 0 && (flight.len() as u32) < state.in_force() {
                let tokens = lengths[sent_count % lengths.len()];
                sent_count += 1;
                let slot = (0..slots).min_by_key(|&s| free_at[s]).unwrap();
                let start = free_at[slot].max(now);
                free_at[slot] = start + service(tokens);
                flight.push((now, start + service(tokens), tokens));
                waiting -= 1;
            }
            flight.sort_by_key(|&(_, end, _)| end);
            let (sent, end, tokens) = flight.remove(0);
            now = end;
            state.observe(Sample {
                at_ms: now,
                elapsed: Duration::from_millis(end - sent),
                in_flight: flight.len() as u32 + 1,
                outcome: Outcome::Answered {
                    completion_tokens: tokens,
                },
            });
            seen.push(state.in_force());
            waiting += 1;
        }
        (state, seen)
    }

    #[test]
    fn the_limit_settles_at_the_servers_slots() {
        // One length; then lengths from 5 to 400 tokens on a server whose time does not follow
        // them, and on one whose time does.
        let cases: [(Service, &[u64]); 3] = [
            (fixed, &[100]),
            (fixed, &[5, 400, 40, 120, 12, 250, 70]),
            (reading_then_writing, &[5, 400, 40, 120, 12, 250, 70]),
        ];
        for (service, lengths) in cases {
            for slots in [1usize, 3, 8] {
                let (_, seen) = simulate(slots, 64, 3_000, 64, service, lengths);
                let late = &seen[1_500..];
                let within = late
                    .iter()
                    .filter(|l| (**l as usize + 1 >= slots) && **l as usize <= slots + 1)
                    .count();
                assert!(
                    within * 10 >= late.len() * 9,
                    "{slots} slots, lengths {lengths:?}: within one of them for {within} of {}: {:?}",
                    late.len(),
                    &late[..40]
                );
            }
        }
    }

    #[test]
    fn a_one_slot_server_of_slow_answers_is_read_from_its_second_answer() {
        // Eight callers at the initial four: the second answer waited a whole first one, and
        // a server this slow gives few answers to average.
        let (_, seen) = simulate(1, 8, 2, 64, fixed, &[100]);
        assert!(seen[1] < INITIAL, "{seen:?}");
    }

    #[test]
    fn the_limit_stays_under_the_ceiling_and_grows_only_when_full() {
        let (state, seen) = simulate(16, 64, 1_000, 6, fixed, &[100]);
        assert_eq!(*seen.iter().max().unwrap(), 6, "{seen:?}");
        assert_eq!(state.in_force(), 6);
        // Two callers never fill a limit of four: it does not grow past what they use.
        let (state, _) = simulate(16, 2, 500, 64, fixed, &[100]);
        assert_eq!(state.in_force(), INITIAL);
    }

    #[test]
    fn a_server_reporting_waiting_requests_cuts_the_limit_to_what_it_runs_and_holds_it() {
        let mut state = State::new(64, None, 0);
        state.limit = 12.0;
        let quiet = ServerQueue {
            running: 3,
            waiting: 0,
        };
        assert_eq!(state.queued(quiet, 1_000), None, "nothing waits: no change");
        let busy = ServerQueue {
            running: 5,
            waiting: 7,
        };
        let change = state.queued(busy, 2_000).unwrap();
        assert_eq!(
            (change.from, change.to, change.reason),
            (12, 5, Reason::Queued)
        );
        assert_eq!(state.queued(busy, 3_000), None, "already there");
        // While the report is recent, answers that keep their pace do not grow it back.
        let answer = |at_ms| Sample {
            at_ms,
            elapsed: Duration::from_millis(200),
            in_flight: 5,
            outcome: Outcome::Answered {
                completion_tokens: 100,
            },
        };
        for i in 0..20 {
            state.observe(answer(4_000 + i));
        }
        assert_eq!(state.in_force(), 5);
        // Once it is old, they do.
        let later = 4_000 + millis(QUEUE_HOLD);
        for i in 0..20 {
            state.observe(answer(later + i));
        }
        assert!(state.in_force() > 5, "{}", state.in_force());
        // A report of nothing running is not a limit of zero.
        let mut empty = State::new(64, None, 0);
        empty.queued(
            ServerQueue {
                running: 0,
                waiting: 3,
            },
            1,
        );
        assert_eq!(empty.in_force(), 1);
    }

    #[test]
    fn a_timeout_halves_and_a_cut_counts_once_a_round_trip() {
        let mut state = State::new(64, Some(20), 0);
        assert_eq!((state.in_force(), state.reason), (20, Reason::Capacity));
        let timed_out = |at_ms| Sample {
            at_ms,
            elapsed: Duration::from_secs(10),
            in_flight: 20,
            outcome: Outcome::TimedOut,
        };
        let change = state.observe(timed_out(100_000)).unwrap();
        assert_eq!(
            (change.from, change.to, change.reason),
            (20, 10, Reason::Timeout)
        );
        // Within the round trip of the cut: the same signal.
        assert_eq!(state.observe(timed_out(105_000)), None);
        assert_eq!(state.observe(timed_out(111_000)).unwrap().to, 5);
    }

    #[test]
    fn the_deadline_follows_the_slowest_pace_within_bounds() {
        let mut state = State::new(8, None, 0);
        let ceiling = Duration::from_secs(600);
        assert_eq!(state.deadline(1024, ceiling), ceiling, "nothing measured");
        state.observe(Sample {
            at_ms: 10,
            elapsed: Duration::from_secs(5),
            in_flight: 1,
            outcome: Outcome::Answered {
                completion_tokens: 100,
            },
        });
        // 50 ms a token, 1024 tokens, four times, once for each of the four calls the limit
        // lets in (each may wait behind the others): 819.2 s, over the ceiling.
        assert_eq!(state.in_force(), INITIAL);
        assert_eq!(state.deadline(1024, ceiling), ceiling);
        assert_eq!(
            state.deadline(1024, Duration::from_secs(3600)),
            Duration::from_millis(819_200)
        );
        // At a limit of one, four times the answer: 204.8 s.
        state.limit = 1.0;
        assert_eq!(
            state.deadline(1024, ceiling),
            Duration::from_millis(204_800)
        );
        assert_eq!(state.deadline(10, ceiling), MIN_DEADLINE);
        assert_eq!(state.deadline(100_000, ceiling), ceiling);
        assert!(state.answering(20, Duration::from_secs(1)));
        assert!(!state.answering(5_000, Duration::from_secs(1)));
    }

    #[test]
    fn the_line_reads_both_kinds_of_server_and_a_stale_one_is_measured_alone() {
        let mut state = State::new(8, None, 0);
        let answer = |at_ms, ms, in_flight, completion_tokens| Sample {
            at_ms,
            elapsed: Duration::from_millis(ms),
            in_flight,
            outcome: Outcome::Answered { completion_tokens },
        };
        let close = |got: Option<f64>, want: f64| {
            assert!(
                got.is_some_and(|g| (g - want).abs() < 1e-9),
                "{got:?} for {want}"
            )
        };
        // 100 ms to read the prompt, 10 ms a token.
        state.observe(answer(1_000, 1_100, 1, 100));
        close(state.expected(50), 0.55); // one answer: through the origin
        state.observe(answer(2_000, 200, 1, 10));
        close(state.expected(50), 0.6);
        close(state.expected(0), 0.1);
        // The server became slower for everyone; the old line holds until a probe.
        let probe = millis(PROBE_EVERY);
        state.observe(answer(4_000, 3_300, 4, 100));
        close(state.expected(100), 1.1);
        let change = state.observe(answer(2_000 + probe, 3_300, 4, 100)).unwrap();
        assert_eq!((change.to, change.reason), (1, Reason::Probe));
        // An answer sent before the probe, or not alone, is not the probe's.
        assert_eq!(state.observe(answer(3_000 + probe, 3_300, 1, 100)), None);
        assert_eq!(state.observe(answer(9_000 + probe, 3_300, 2, 100)), None);
        assert_eq!(state.in_force(), 1);
        let change = state
            .observe(answer(10_000 + probe, 3_300, 1, 100))
            .unwrap();
        assert_eq!(change.reason, Reason::Probe);
        close(state.expected(100), 3.3);
        assert!(state.in_force() > 1);
        // An answer of no tokens says the server answers, and nothing of its pace.
        let before = state.clone();
        assert_eq!(state.observe(answer(11_000 + probe, 5, 1, 0)), None);
        assert_eq!(state.expected(100), before.expected(100));
        assert!(state.answering(11_000 + probe, Duration::ZERO));
    }
}
