//! What a model call must pass before it is sent: the concurrency limit, requests per second
//! and tokens per minute, and the pause a provider asked for with a 429.
//!
//! Two scopes. [`Limits::local`] holds them for this process alone (a semaphore and `governor`
//! rate limiters): tests, the CLI, a single process. [`Limits::shared`] holds them for every
//! process that uses the same [`SharedLimits`] store, which is what a cluster needs: ten
//! workers must not make ten times the configured rate against a provider's limits. The
//! store makes each decision atomically (in Redis, one Lua script each: a lease-based
//! semaphore whose leases expire when their holder dies, and GCRA meters); the waiting happens
//! here, and only one task per process asks the store at a time, so waiting costs a poll per
//! process, not one per task.
//!
//! A 429 (or 529, overloaded) from the provider slows every process down: the store records
//! the provider's `Retry-After` as a pause everyone honours and halves the shared limits,
//! which then grow back linearly over [`RECOVERY`].

use std::future::Future;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use crate::adaptive::{Change, Outcome, Sample, State};
use crate::turnstile::{Lane, Turnstile};
use tokio::time::Instant;

/// How long after a 429 the shared limits take to grow back from half to whole.
pub const RECOVERY: Duration = Duration::from_secs(30);
/// A 429 halves the limits at most once per this window: a burst of 429s from calls that were
/// all in flight together is one signal, not ten.
pub const CUT_DEBOUNCE: Duration = Duration::from_secs(1);
/// The limits never shrink below this share of their configured value.
pub const MIN_FACTOR: f64 = 0.1;
/// The pause after a 429 that did not say how long to wait.
pub const DEFAULT_PAUSE: Duration = Duration::from_secs(1);
/// How long a shared lease lives unless renewed, and how often the leases a process holds are
/// renewed: a worker that dies frees its slots within [`LEASE_TTL`], while a call of any
/// length keeps its own.
pub const LEASE_TTL: Duration = Duration::from_secs(15);
const LEASE_RENEWAL: Duration = Duration::from_secs(5);
/// A task waiting for a lease asks the shared store again after this long (a lease can be
/// released at any moment; the store cannot say when).
const MAX_NAP: Duration = Duration::from_millis(20);
/// With release notices, a full semaphore is asked again at least this often (a notice lost
/// in a reconnect costs this much, not a stall).
pub const FREED_SAFETY_NAP: Duration = Duration::from_millis(250);
/// After the store failed to answer, ask again after this long.
const STORE_RETRY: Duration = Duration::from_millis(500);

/// A decision of the shared store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    Granted,
    /// Not now; asking again after this long may succeed.
    Wait(Duration),
    /// Not for this tenant now: what is free is kept for other tenants' calls.
    Reserved,
}

/// A GCRA meter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meter {
    Requests,
    Tokens,
}

impl Meter {
    pub fn as_str(self) -> &'static str {
        match self {
            Meter::Requests => "requests",
            Meter::Tokens => "tokens",
        }
    }
}

/// The atomic decisions a cluster-wide limiter needs from shared state, each one round trip.
/// Every decision also honours the pause and the slow-down recorded by [`Self::throttled`].
#[async_trait]
pub trait SharedLimits: Send + Sync + 'static {
    /// Takes lease `id` (`{tenant}/{unique}`) for `tenant` when fewer than `limit` leases
    /// (scaled down after a 429) are held; the last `reserve` of them only while `tenant` holds
    /// fewer than `reserve` or no other tenant is asking ([`Admit::Reserved`] otherwise). A
    /// lease not released expires after `ttl` (its holder died).
    async fn lease(
        &self,
        id: &str,
        tenant: &str,
        limit: u32,
        reserve: u32,
        ttl: Duration,
    ) -> Result<Admit, String>;

    async fn release(&self, id: &str) -> Result<(), String>;

    /// Extends the leases `ids` (those still held) to `ttl` from now.
    async fn renew(&self, ids: &[String], ttl: Duration) -> Result<(), String>;

    /// Generic cell rate: `cost` units at `per_second` (scaled down after a 429) with bursts of
    /// up to `burst` units. `force` charges the cost whatever the state, for costs known only
    /// afterwards (the tokens of an answer); the debt delays later calls.
    async fn meter(
        &self,
        meter: Meter,
        per_second: f64,
        burst: f64,
        cost: u64,
        force: bool,
    ) -> Result<Admit, String>;

    /// The provider pushed back: every process pauses for `retry_after` and the limits shrink.
    async fn throttled(&self, retry_after: Option<Duration>) -> Result<(), String>;

    /// The adaptive limit's state as last written ([`crate::adaptive`]), its version (0:
    /// never written) and the calls in flight (leases held): one round trip. A store that
    /// keeps none answers an error, and each process finds its own limit.
    async fn adaptive(&self) -> Result<(Option<State>, u64, u32), String> {
        Err("this store keeps no adaptive limit".to_owned())
    }

    /// Writes the adaptive limit's `state` if its version is still `version`; `false`:
    /// another process wrote first (read again).
    async fn set_adaptive(&self, _state: &State, _version: u64) -> Result<bool, String> {
        Err("this store keeps no adaptive limit".to_owned())
    }

    /// Notified when a lease is released anywhere, if the shared state says so: a call that
    /// found the semaphore full waits for it (or [`FREED_SAFETY_NAP`]) instead of asking
    /// again every `MAX_NAP` (20 ms).
    fn freed(&self) -> Option<Arc<tokio::sync::Notify>> {
        None
    }

    /// Until when everyone pauses ([`Self::throttled`] anywhere), if the shared state
    /// announces pauses. The decisions above check the pause themselves; this serves a call
    /// that asks none of them (a permit kept from an earlier call), so it should cost no round
    /// trip while the announcements are heard, and read the shared state when some may have
    /// been missed (before the first one could be heard, after a disconnection).
    async fn paused_until(&self) -> Option<Instant> {
        None
    }
}

/// The configured limits (0: none).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    pub max_concurrency: u32,
    pub requests_per_second: u32,
    pub tokens_per_minute: u32,
    /// Shared limits: of `max_concurrency`, the calls kept for tenants with fewer than this
    /// many in flight while several tenants call (at most a quarter; 0: none).
    pub reserve: u32,
    /// The concurrency limit is found ([`crate::adaptive`]) under `max_concurrency`.
    pub adaptive: bool,
}

/// How often a process reads the shared adaptive limit at most, when its own calls did not
/// read it meanwhile.
const ADAPTIVE_READ: Duration = Duration::from_secs(1);
/// How many times an observation is tried when other processes keep writing first.
const ADAPTIVE_TRIES: usize = 5;
/// The shared adaptive limit is dropped (and found again) after this long unused.
pub const ADAPTIVE_TTL: Duration = Duration::from_secs(24 * 3600);

/// This process's copy of the adaptive limit (the shared scope's as last read).
struct Adapt {
    on: bool,
    ceiling: u32,
    copy: std::sync::Mutex<(State, Instant)>,
}

impl Adapt {
    fn new(config: &Config) -> Self {
        let ceiling = config.max_concurrency.max(1);
        Self {
            on: config.adaptive,
            ceiling,
            copy: std::sync::Mutex::new((State::new(ceiling, None, now_ms()), Instant::now())),
        }
    }

    fn state(&self) -> State {
        self.copy.lock().expect("poisoned").0.clone()
    }

    fn in_force(&self) -> u32 {
        if self.on {
            self.copy.lock().expect("poisoned").0.in_force()
        } else {
            self.ceiling
        }
    }

    fn keep(&self, state: State) {
        *self.copy.lock().expect("poisoned") = (state, Instant::now());
    }

    fn stale(&self) -> bool {
        self.on && self.copy.lock().expect("poisoned").1.elapsed() >= ADAPTIVE_READ
    }

    /// A state read from the store: the store's, with this process's ceiling.
    fn adopt(&self, stored: Option<State>) -> State {
        let mut state = stored.unwrap_or_else(|| State::new(self.ceiling, None, now_ms()));
        if state.ceiling != self.ceiling {
            let capacity = state.capacity;
            state.configure(self.ceiling, capacity, now_ms());
        }
        state
    }
}

/// Milliseconds since the epoch (the adaptive limit's clock).
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The local scope's concurrency: calls held, under a limit that may change.
#[derive(Default)]
struct Slots {
    held: std::sync::Mutex<u32>,
    freed: tokio::sync::Notify,
}

/// One call's place in [`Slots`], given back when dropped.
struct Slot(Arc<Slots>);

impl Drop for Slot {
    fn drop(&mut self) {
        *self.0.held.lock().expect("poisoned") -= 1;
        self.0.freed.notify_waiters();
    }
}

/// The limits a [`crate::Model`] passes its calls through; cheap to clone.
#[derive(Clone)]
pub struct Limits {
    scope: Arc<Scope>,
}

enum Scope {
    Local(Local),
    Shared(Shared),
}

struct Local {
    /// Who waits for a slot next: by tenant and weight ([`crate::turnstile`]).
    turn: Turnstile,
    slots: Arc<Slots>,
    adapt: Adapt,
    requests: Option<DefaultDirectRateLimiter>,
    tokens: Option<(DefaultDirectRateLimiter, NonZeroU32)>,
    paused_until: std::sync::Mutex<Option<Instant>>,
}

struct Shared {
    store: Arc<dyn SharedLimits>,
    config: Config,
    /// One task per process asks the store at a time; the others queue here, by tenant and
    /// weight ([`crate::turnstile`]).
    turn: Turnstile,
    /// The leases this process holds, renewed every [`LEASE_RENEWAL`].
    held: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    adapt: Adapt,
}

/// The concurrency limit's permission for one call at a time ([`Limits::hold`]); a caller
/// may keep it for its next call. Dropped, a shared lease is released in the background.
pub struct Permit {
    _local: Option<Slot>,
    lease: Option<Lease>,
}

/// A shared lease: released through its store, and no longer renewed once forgotten.
struct Lease {
    store: Arc<dyn SharedLimits>,
    id: String,
    held: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

impl Lease {
    fn forget(&self) {
        self.held.lock().expect("poisoned").remove(&self.id);
    }
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("lease", &self.lease.as_ref().map(|l| &l.id))
            .finish()
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            lease.forget();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    if let Err(e) = lease.store.release(&lease.id).await {
                        tracing::warn!(error = %e, "cannot release a model lease; it expires");
                    }
                });
            }
        }
    }
}

impl std::fmt::Debug for Limits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match &*self.scope {
            Scope::Local(_) => "Limits::Local",
            Scope::Shared(_) => "Limits::Shared",
        })
    }
}

impl Limits {
    /// Limits for this process alone.
    pub fn local(config: Config) -> Self {
        let requests = NonZeroU32::new(config.requests_per_second)
            .map(|rps| RateLimiter::direct(Quota::per_second(rps)));
        let tokens = NonZeroU32::new(config.tokens_per_minute)
            .map(|tpm| (RateLimiter::direct(Quota::per_minute(tpm)), tpm));
        Self {
            scope: Arc::new(Scope::Local(Local {
                turn: Turnstile::default(),
                slots: Arc::default(),
                adapt: Adapt::new(&config),
                requests,
                tokens,
                paused_until: std::sync::Mutex::new(None),
            })),
        }
    }

    /// Limits shared by every process that uses `store`. Within a tokio runtime, a task
    /// renews this process's leases for as long as the limits are in use.
    pub fn shared(config: Config, store: Arc<dyn SharedLimits>) -> Self {
        let held = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
        let scope = Arc::new(Scope::Shared(Shared {
            store: store.clone(),
            config,
            turn: Turnstile::default(),
            held: held.clone(),
            adapt: Adapt::new(&config),
        }));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let alive = Arc::downgrade(&scope);
            runtime.spawn(async move {
                loop {
                    tokio::time::sleep(LEASE_RENEWAL).await;
                    if alive.strong_count() == 0 {
                        return;
                    }
                    let ids: Vec<String> = held.lock().expect("poisoned").iter().cloned().collect();
                    if ids.is_empty() {
                        continue;
                    }
                    if let Err(e) = store.renew(&ids, LEASE_TTL).await {
                        tracing::warn!(error = %e, leases = ids.len(), "cannot renew model leases");
                    }
                }
            });
        }
        Self { scope }
    }

    /// Waits for the concurrency limit: a call may be in flight while the permit is held.
    /// Every call also passes [`Limits::meter`] as it starts.
    /// `lane`: whose turn it is to wait (by tenant and weight, [`crate::turnstile`]).
    pub async fn hold(&self, lane: &Lane) -> Permit {
        match &*self.scope {
            Scope::Local(local) => local.hold(lane).await,
            Scope::Shared(shared) => shared.hold(lane).await,
        }
    }

    /// Waits until a call estimated at `tokens` tokens may start: a pause a provider asked
    /// for, requests per second and tokens per minute.
    pub async fn meter(&self, lane: &Lane, tokens: u64) {
        match &*self.scope {
            Scope::Local(local) => local.meter(tokens).await,
            Scope::Shared(shared) => shared.meter(lane, tokens).await,
        }
    }

    /// A call is over: charges the tokens its estimate missed.
    pub async fn charge(&self, estimated: u64, used: u64) {
        match &*self.scope {
            Scope::Local(local) => {
                if let Some((tokens, burst)) = &local.tokens
                    && let Some(extra) =
                        NonZeroU32::new(clamp(used.saturating_sub(estimated), *burst))
                {
                    // Best effort: the debt is taken when there is room for it.
                    let _ = tokens.check_n(extra);
                }
            }
            Scope::Shared(shared) => {
                let extra = used.saturating_sub(estimated);
                if shared.config.tokens_per_minute > 0 && extra > 0 {
                    let (per_second, burst) = shared.tokens();
                    if let Err(e) = shared
                        .store
                        .meter(Meter::Tokens, per_second, burst, extra, true)
                        .await
                    {
                        tracing::warn!(error = %e, "cannot charge the model's tokens");
                    }
                }
            }
        }
    }

    /// The concurrency limit in force (found, or `max_concurrency`), as this process last
    /// knew it.
    pub fn in_force(&self) -> u32 {
        self.adapt().in_force()
    }

    /// The adaptive limit as this process last knew it (`None`: the limit is fixed).
    pub fn adaptive(&self) -> Option<State> {
        let adapt = self.adapt();
        adapt.on.then(|| adapt.state())
    }

    /// A call's deadline for an answer of at most `tokens` ([`State::deadline`]); `ceiling`
    /// when the limit is fixed.
    pub fn deadline(&self, tokens: u32, ceiling: Duration) -> Duration {
        let adapt = self.adapt();
        if adapt.on {
            adapt.state().deadline(tokens, ceiling)
        } else {
            ceiling
        }
    }

    /// Learns from a call that ended after `elapsed` ([`State::observe`]); the change of the
    /// limit in force, if any.
    pub async fn observe(&self, elapsed: Duration, outcome: Outcome) -> Option<Change> {
        let adapt = self.adapt();
        if !adapt.on {
            return None;
        }
        let sample = |in_flight: u32| Sample {
            at_ms: now_ms(),
            elapsed,
            in_flight: in_flight.max(1),
            outcome,
        };
        match &*self.scope {
            Scope::Local(local) => {
                let in_flight = *local.slots.held.lock().expect("poisoned");
                let change = adapt
                    .copy
                    .lock()
                    .expect("poisoned")
                    .0
                    .observe(sample(in_flight));
                if change.is_some_and(|c| c.to > c.from) {
                    local.slots.freed.notify_waiters();
                }
                change
            }
            Scope::Shared(shared) => shared.observe(sample).await,
        }
    }

    /// The server reported the calls it runs at once (or no longer does): the limit is
    /// capped at them.
    pub async fn capacity(&self, slots: Option<u32>) -> Option<Change> {
        let adapt = self.adapt();
        if !adapt.on {
            return None;
        }
        match &*self.scope {
            Scope::Local(_) => {
                let mut copy = adapt.copy.lock().expect("poisoned");
                let ceiling = copy.0.ceiling;
                copy.0.configure(ceiling, slots, now_ms())
            }
            Scope::Shared(shared) => {
                shared
                    .update(|state| {
                        let ceiling = state.ceiling;
                        state.configure(ceiling, slots, now_ms())
                    })
                    .await
            }
        }
    }

    /// The server reported its queue: with requests waiting, the limit drops to what it runs
    /// (`adaptive::State::queued`).
    pub async fn queued(&self, queue: crate::adaptive::ServerQueue) -> Option<Change> {
        let adapt = self.adapt();
        if !adapt.on || queue.waiting == 0 {
            return None;
        }
        match &*self.scope {
            Scope::Local(_) => {
                let mut copy = adapt.copy.lock().expect("poisoned");
                copy.0.queued(queue, now_ms())
            }
            Scope::Shared(shared) => shared.update(|state| state.queued(queue, now_ms())).await,
        }
    }

    /// Whether the server answered a call (anyone's) within `within`: a server that answers
    /// is slow, not down.
    pub async fn answering(&self, within: Duration) -> bool {
        let adapt = self.adapt();
        if let Scope::Shared(shared) = &*self.scope
            && adapt.on
        {
            shared.read().await;
        }
        adapt.state().answering(now_ms(), within)
    }

    fn adapt(&self) -> &Adapt {
        match &*self.scope {
            Scope::Local(local) => &local.adapt,
            Scope::Shared(shared) => &shared.adapt,
        }
    }

    /// The provider answered 429 (or 529): everyone sharing these limits slows down.
    pub async fn throttled(&self, retry_after: Option<Duration>) {
        match &*self.scope {
            Scope::Local(local) => {
                let until = Instant::now() + retry_after.unwrap_or(DEFAULT_PAUSE);
                let mut paused = local.paused_until.lock().expect("poisoned");
                *paused = Some(paused.map_or(until, |p| p.max(until)));
            }
            Scope::Shared(shared) => {
                if let Err(e) = shared.store.throttled(retry_after).await {
                    tracing::warn!(error = %e, "cannot record the provider's 429 for the cluster");
                    tokio::time::sleep(retry_after.unwrap_or(DEFAULT_PAUSE)).await;
                }
            }
        }
    }
}

fn clamp(n: u64, max: NonZeroU32) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX).min(max.get())
}

impl Local {
    async fn hold(&self, lane: &Lane) -> Permit {
        self.paused().await;
        let _turn = self.turn.enter(lane).await;
        loop {
            // Registered before looking, so a slot freed (or a limit grown) meanwhile counts.
            let freed = self.slots.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut held = self.slots.held.lock().expect("poisoned");
                if *held < self.adapt.in_force() {
                    *held += 1;
                    return Permit {
                        _local: Some(Slot(self.slots.clone())),
                        lease: None,
                    };
                }
            }
            freed.await;
        }
    }

    async fn paused(&self) {
        loop {
            let paused = *self.paused_until.lock().expect("poisoned");
            match paused {
                Some(until) if until > Instant::now() => tokio::time::sleep_until(until).await,
                _ => break,
            }
        }
    }

    async fn meter(&self, tokens: u64) {
        // A permit kept from an earlier call did not wait for a pause asked for since.
        self.paused().await;
        if let Some(requests) = &self.requests {
            requests.until_ready().await;
        }
        if let Some((limiter, burst)) = &self.tokens
            && let Some(n) = NonZeroU32::new(clamp(tokens, *burst))
        {
            // `n` never exceeds the burst, so the limiter can always grant it.
            let _ = limiter.until_n_ready(n).await;
        }
    }
}

impl Shared {
    /// Tokens per second and the burst (a minute's worth).
    fn tokens(&self) -> (f64, f64) {
        let tpm = f64::from(self.config.tokens_per_minute);
        (tpm / 60.0, tpm)
    }

    async fn hold(&self, lane: &Lane) -> Permit {
        let mut turn = self.turn.enter(lane).await;
        let tenant = lane.tenant.clone().unwrap_or_else(|| "#".to_owned());
        let id = format!("{tenant}/{:016x}", rand::random::<u64>());
        // Made before asking: a caller that stops waiting (a deadline, a lease it no longer
        // needs) drops it, and a lease the store granted meanwhile is released, not left to
        // expire.
        let permit = Permit {
            _local: None,
            lease: Some(Lease {
                store: self.store.clone(),
                id: id.clone(),
                held: self.held.clone(),
            }),
        };
        let reserve = self.config.reserve;
        let freed = self.store.freed();
        loop {
            if self.adapt.stale() {
                self.read().await;
            }
            let limit = self.adapt.in_force();
            // Registered before asking, so a release between the answer and the wait counts.
            let notified = freed.as_ref().map(|freed| {
                let mut notified = Box::pin(Arc::clone(freed).notified_owned());
                notified.as_mut().enable();
                notified
            });
            match self
                .store
                .lease(&id, &tenant, limit, reserve, LEASE_TTL)
                .await
            {
                Ok(Admit::Granted) => break,
                // A lease is free, but kept for other tenants: a call of another lane
                // waiting here takes the turn first (it may be one of them).
                Ok(Admit::Reserved) => {
                    let (back, deferred) = turn.defer(lane).await;
                    turn = back;
                    if !deferred {
                        tokio::time::sleep(MAX_NAP).await;
                    }
                }
                // A full semaphore cannot say when a lease frees: its release says so.
                Ok(Admit::Wait(wait)) if wait.is_zero() => match notified {
                    Some(notified) => {
                        let _ = tokio::time::timeout(FREED_SAFETY_NAP, notified).await;
                    }
                    None => tokio::time::sleep(MAX_NAP).await,
                },
                Ok(Admit::Wait(wait)) => tokio::time::sleep(wait).await,
                Err(e) => {
                    tracing::warn!(limit = "lease", error = %e, "cannot ask the shared model limits; asking again");
                    tokio::time::sleep(STORE_RETRY).await;
                }
            }
        }
        self.held.lock().expect("poisoned").insert(id);
        permit
    }

    /// Reads the shared adaptive limit into this process's copy (a store that keeps none
    /// leaves the copy this process's own).
    async fn read(&self) {
        match self.store.adaptive().await {
            Ok((stored, _, _)) => self.adapt.keep(self.adapt.adopt(stored)),
            Err(e) => {
                tracing::debug!(error = %e, "cannot read the shared adaptive limit; keeping this process's");
                self.adapt.keep(self.adapt.state());
            }
        }
    }

    async fn observe(&self, sample: impl Fn(u32) -> Sample) -> Option<Change> {
        self.update_with(|state, in_flight| state.observe(sample(in_flight)))
            .await
    }

    async fn update(&self, change: impl Fn(&mut State) -> Option<Change>) -> Option<Change> {
        self.update_with(|state, _| change(state)).await
    }

    /// Changes the shared adaptive limit by compare-and-set: read, change, write if nobody
    /// wrote since, else again. Without the store, this process's copy alone.
    async fn update_with(
        &self,
        change: impl Fn(&mut State, u32) -> Option<Change>,
    ) -> Option<Change> {
        for _ in 0..ADAPTIVE_TRIES {
            let (stored, version, in_flight) = match self.store.adaptive().await {
                Ok(read) => read,
                Err(e) => {
                    tracing::debug!(error = %e, "cannot read the shared adaptive limit; changing this process's");
                    let mut copy = self.adapt.copy.lock().expect("poisoned");
                    let held = u32::try_from(self.held.lock().expect("poisoned").len())
                        .unwrap_or(u32::MAX);
                    return change(&mut copy.0, held);
                }
            };
            let mut state = self.adapt.adopt(stored);
            let changed = change(&mut state, in_flight);
            match self.store.set_adaptive(&state, version).await {
                Ok(true) => {
                    self.adapt.keep(state);
                    return changed;
                }
                Ok(false) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot write the shared adaptive limit");
                    return None;
                }
            }
        }
        tracing::debug!("the shared adaptive limit kept changing under this observation; dropped");
        None
    }

    async fn meter(&self, lane: &Lane, tokens: u64) {
        // A permit kept from an earlier call asked no script since: a pause announced
        // meanwhile is honoured here.
        while let Some(until) = self.store.paused_until().await {
            tokio::time::sleep_until(until).await;
        }
        if self.config.requests_per_second == 0 && self.config.tokens_per_minute == 0 {
            return;
        }
        // One task per process asks the meters at a time, as for the leases.
        let _turn = self.turn.enter(lane).await;
        if self.config.requests_per_second > 0 {
            let rps = f64::from(self.config.requests_per_second);
            self.until_granted("requests", || {
                self.store.meter(Meter::Requests, rps, rps, 1, false)
            })
            .await;
        }
        if self.config.tokens_per_minute > 0 {
            let (per_second, burst) = self.tokens();
            // An estimate above the burst could never pass: it is charged as a whole burst.
            let cost = tokens.min(u64::from(self.config.tokens_per_minute));
            self.until_granted("tokens", || {
                self.store
                    .meter(Meter::Tokens, per_second, burst, cost, false)
            })
            .await;
        }
    }

    async fn until_granted<F, Fut>(&self, what: &str, ask: F)
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Admit, String>>,
    {
        loop {
            match ask().await {
                // Meters keep nothing for anyone.
                Ok(Admit::Granted | Admit::Reserved) => return,
                // A meter or a pause says how long; a full semaphore cannot.
                Ok(Admit::Wait(wait)) if wait.is_zero() => tokio::time::sleep(MAX_NAP).await,
                Ok(Admit::Wait(wait)) => tokio::time::sleep(wait).await,
                Err(e) => {
                    tracing::warn!(limit = what, error = %e, "cannot ask the shared model limits; asking again");
                    tokio::time::sleep(STORE_RETRY).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Mutex;

    use super::*;

    /// Grants every lease at once but answers `delay` later (a slow round trip).
    #[derive(Default)]
    struct SlowAnswers {
        delay: Duration,
        held: Mutex<HashSet<String>>,
    }

    #[async_trait]
    impl SharedLimits for SlowAnswers {
        async fn lease(
            &self,
            id: &str,
            _: &str,
            _: u32,
            _: u32,
            _: Duration,
        ) -> Result<Admit, String> {
            self.held.lock().unwrap().insert(id.to_owned());
            tokio::time::sleep(self.delay).await;
            Ok(Admit::Granted)
        }
        async fn release(&self, id: &str) -> Result<(), String> {
            self.held.lock().unwrap().remove(id);
            Ok(())
        }
        async fn renew(&self, _: &[String], _: Duration) -> Result<(), String> {
            Ok(())
        }
        async fn meter(&self, _: Meter, _: f64, _: f64, _: u64, _: bool) -> Result<Admit, String> {
            Ok(Admit::Granted)
        }
        async fn throttled(&self, _: Option<Duration>) -> Result<(), String> {
            Ok(())
        }
    }

    fn config() -> Config {
        Config {
            max_concurrency: 4,
            requests_per_second: 0,
            tokens_per_minute: 0,
            reserve: 0,
            adaptive: false,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_granted_to_a_caller_that_stopped_waiting_is_given_back() {
        let store = Arc::new(SlowAnswers {
            delay: Duration::from_millis(50),
            ..SlowAnswers::default()
        });
        let limits = Limits::shared(config(), store.clone());
        // The store grants the lease; the caller stops waiting before the answer arrives.
        let stopped =
            tokio::time::timeout(Duration::from_millis(10), limits.hold(&Lane::default())).await;
        assert!(stopped.is_err());
        assert_eq!(store.held.lock().unwrap().len(), 1, "the store granted it");
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(
            store.held.lock().unwrap().is_empty(),
            "the lease was left to expire"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_permit_is_held_until_dropped() {
        let store = Arc::new(SlowAnswers::default());
        let limits = Limits::shared(config(), store.clone());
        let permit = limits.hold(&Lane::default()).await;
        limits.meter(&Lane::default(), 100).await;
        limits.charge(100, 150).await;
        assert_eq!(store.held.lock().unwrap().len(), 1);
        drop(permit);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(store.held.lock().unwrap().is_empty());
    }
}
