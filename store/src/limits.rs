//! Cluster-wide limits in Redis, one script per decision: a lease-based semaphore (leases
//! expire, so a holder that dies frees its slot after `ttl`), GCRA meters (requests per
//! second, tokens per minute), and a slow-down that every decision honours: after a 429 the
//! provider's pause holds for everyone and the limits halve, growing back linearly over
//! `recovery`.
//!
//! Keys: a scope's under `{p}:limits:{scope}:` ([`crate::keys::LimitKeys`]).
//!
//! Time is Redis's (`TIME`), so processes with skewed clocks agree.

use std::sync::LazyLock;
use std::time::Duration;

use crate::keys::{self, LimitKeys};
use crate::{Error, RedisStore};

/// A decision: granted, or how long to wait before asking again (zero: unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Granted,
    Wait(Duration),
}

/// A lease's decision: a [`Decision`], or a lease free but kept for other tenants (see
/// [`RedisLimits::lease`]): let another tenant's call ask first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseDecision {
    Granted,
    Wait(Duration),
    Reserved,
}

/// How long a tenant that asked for a lease counts as one that shares the semaphore.
pub const ASKER_WINDOW: Duration = Duration::from_secs(10);

/// How the slow-down after a 429 behaves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlowDown {
    /// From half to whole again, linearly.
    pub recovery: Duration,
    /// At most one halving per this window.
    pub debounce: Duration,
    /// The floor of the factor.
    pub min_factor: f64,
    /// The pause when the provider did not say.
    pub default_pause: Duration,
}

/// The limits of one scope (one provider endpoint and key); cheap to clone.
#[derive(Debug, Clone)]
pub struct RedisLimits {
    store: RedisStore,
    keys: LimitKeys,
    slow: SlowDown,
}

/// Put before the scripts that decide (`SLOW` then the script): defines `slowdown(key, now,
/// recovery)`, the current factor (1 = whole, grown back since the last cut) and the pause
/// left (ms), and reads Redis's time into `now_us` and `now`.
const SLOW: &str = include_str!("lua/limits_slowdown.lua");

/// A script that decides: `script` after [`SLOW`].
fn slowed(script: &str) -> redis::Script {
    redis::Script::new(&format!("{SLOW}{script}"))
}

/// The scripts a model call runs (a lease, each meter, while waiting too), hashed once rather
/// than on every call. Each is invoked in one place below, which lists its KEYS and ARGV.
static LEASE: LazyLock<redis::Script> =
    LazyLock::new(|| slowed(include_str!("lua/limits_lease.lua")));
static METER: LazyLock<redis::Script> =
    LazyLock::new(|| slowed(include_str!("lua/limits_meter.lua")));
static THROTTLED: LazyLock<redis::Script> =
    LazyLock::new(|| slowed(include_str!("lua/limits_throttled.lua")));
static PAUSE: LazyLock<redis::Script> =
    LazyLock::new(|| slowed(include_str!("lua/limits_pause.lua")));
static RENEW: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("lua/limits_renew.lua")));
static RELEASE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("lua/limits_release.lua")));
static ADAPTIVE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("lua/limits_adaptive.lua")));
static ADAPT: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("lua/limits_adapt.lua")));
static LEASES: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("lua/limits_leases.lua")));

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn decision(reply: (i64, i64)) -> Decision {
    match reply {
        (1, _) => Decision::Granted,
        (_, wait) => Decision::Wait(Duration::from_millis(u64::try_from(wait).unwrap_or(0))),
    }
}

fn lease_decision(reply: (i64, i64)) -> LeaseDecision {
    match reply {
        (_, -1) => LeaseDecision::Reserved,
        reply => match decision(reply) {
            Decision::Granted => LeaseDecision::Granted,
            Decision::Wait(wait) => LeaseDecision::Wait(wait),
        },
    }
}

impl RedisLimits {
    /// The limits of `scope` (e.g. a hash of the provider's endpoint and key).
    pub fn new(store: RedisStore, scope: &str, slow: SlowDown) -> Self {
        let keys = LimitKeys::new(store.prefix(), scope);
        Self { store, keys, slow }
    }

    /// Takes lease `id` (`{tenant}/{unique}`) for `tenant` when fewer than `limit` (times the
    /// slow-down factor) are held, and expiring after `ttl` unless renewed.
    ///
    /// The last `reserve` leases (at most a quarter of the limit) are kept for tenants holding
    /// fewer than `reserve` while more than one tenant asked within [`ASKER_WINDOW`]: a
    /// tenant's single job does not wait for another tenant's batch to free a lease (with a
    /// model answering at a fixed pace, a full semaphore frees in waves, a whole call apart).
    /// A tenant alone has every lease.
    pub async fn lease(
        &self,
        id: &str,
        tenant: &str,
        limit: u32,
        reserve: u32,
        ttl: Duration,
    ) -> Result<LeaseDecision, Error> {
        debug_assert!(
            id.strip_prefix(tenant)
                .is_some_and(|rest| rest.starts_with('/')),
            "a lease id begins with its tenant"
        );
        // KEYS: leases, slow, askers. ARGV: id, limit, ttl ms, recovery ms, tenant, reserve,
        // asker window ms. Answers {granted, wait ms}; {0, -1}: the lease left is reserved.
        LEASE
            .key(self.keys.leases())
            .key(self.keys.slow())
            .key(self.keys.askers())
            .arg(id)
            .arg(limit)
            .arg(millis(ttl))
            .arg(millis(self.slow.recovery))
            .arg(tenant)
            .arg(reserve)
            .arg(millis(ASKER_WINDOW))
            .invoke_async::<(i64, i64)>(&mut self.store.connection())
            .await
            .map(lease_decision)
            .map_err(crate::redis::backend)
    }

    /// Releases lease `id` and announces it, so that a call waiting for one asks again now;
    /// a lease that was not held (never granted, or expired) wakes nobody.
    pub async fn release(&self, id: &str) -> Result<(), Error> {
        // KEYS: leases. ARGV: id, the freed channel, the scope's name.
        RELEASE
            .key(self.keys.leases())
            .arg(id)
            .arg(keys::lease_freed_channel(self.store.prefix()))
            .arg(self.keys.name())
            .invoke_async::<i64>(&mut self.store.connection())
            .await
            .map(drop)
            .map_err(crate::redis::backend)
    }

    /// Woken when a lease of any scope is released (the listener must subscribe:
    /// `Listener::with_lease_notices`); the caller still asks, and waits again if another
    /// took it.
    pub fn freed(&self) -> std::sync::Arc<tokio::sync::Notify> {
        self.store.lease_freed().clone()
    }

    /// Until when this process heard that the callers of this scope pause (a 429 anywhere in
    /// the cluster, announced by [`RedisLimits::throttled`]; the listener must subscribe:
    /// `Listener::with_lease_notices`). An announcement made while the listener was not
    /// subscribed is missing here: [`Self::pause`] reads it.
    pub fn paused_until(&self) -> Option<tokio::time::Instant> {
        self.store.pauses().heard(self.keys.name())
    }

    /// Until when the callers of this scope pause. The scripts check the pause themselves;
    /// this is for a call that asks none of them (a seat kept from an earlier call). What was
    /// heard, when that is all there is to know ([`Self::pause_known`]); otherwise one round
    /// trip reads it, and what the read shows is then known until the next disconnection.
    pub async fn pause(&self) -> Result<Option<tokio::time::Instant>, Error> {
        let pauses = self.store.pauses();
        if pauses.known(self.keys.name()) {
            return Ok(self.paused_until());
        }
        let ticket = pauses.ticket();
        // KEYS: slow. The recovery passed only shapes the factor, which this leaves out.
        let left: u64 = PAUSE
            .key(self.keys.slow())
            .invoke_async(&mut self.store.connection())
            .await
            .map_err(crate::redis::backend)?;
        let until = (left > 0).then(|| tokio::time::Instant::now() + Duration::from_millis(left));
        pauses.read(self.keys.name(), ticket, until);
        Ok(self.paused_until())
    }

    /// Whether [`Self::paused_until`] is all there is to know of this scope's pause: its
    /// pause was read while the listener was subscribed, and it was not disconnected since.
    pub fn pause_known(&self) -> bool {
        self.store.pauses().known(self.keys.name())
    }

    /// Extends the leases `ids` that are still held to `ttl` from now (one script).
    pub async fn renew(&self, ids: &[String], ttl: Duration) -> Result<(), Error> {
        // KEYS: leases. ARGV: ttl ms, then the ids (only those still held are extended).
        RENEW
            .key(self.keys.leases())
            .arg(millis(ttl))
            .arg(ids)
            .invoke_async::<i64>(&mut self.store.connection())
            .await
            .map(drop)
            .map_err(crate::redis::backend)
    }

    /// The adaptive limit's state as last written (opaque bytes), its version (0: never
    /// written) and the leases held now (expired ones dropped): one round trip.
    pub async fn adaptive(&self) -> Result<(Option<Vec<u8>>, u64, u32), Error> {
        // KEYS: adaptive, leases. Answers {state or nil, version, leases held}.
        ADAPTIVE
            .key(self.keys.adaptive())
            .key(self.keys.leases())
            .invoke_async::<(Option<Vec<u8>>, u64, u32)>(&mut self.store.connection())
            .await
            .map_err(crate::redis::backend)
    }

    /// Writes the adaptive limit's state if its version is still `version` (nobody wrote
    /// since the read); `false`: read again. Kept for `ttl` after the last write (a limit
    /// not used for that long is found again).
    pub async fn set_adaptive(
        &self,
        state: &[u8],
        version: u64,
        ttl: Duration,
    ) -> Result<bool, Error> {
        // KEYS: adaptive. ARGV: version read, state, ttl ms. Answers 1 when written.
        ADAPT
            .key(self.keys.adaptive())
            .arg(version)
            .arg(state)
            .arg(millis(ttl))
            .invoke_async::<i64>(&mut self.store.connection())
            .await
            .map(|written| written == 1)
            .map_err(crate::redis::backend)
    }

    /// Leases held now (expired ones dropped), for tests and operators.
    pub async fn leases(&self) -> Result<u64, Error> {
        // KEYS: leases. Drops the expired ones, counts the rest.
        LEASES
            .key(self.keys.leases())
            .invoke_async::<u64>(&mut self.store.connection())
            .await
            .map_err(crate::redis::backend)
    }

    /// GCRA: `cost` units of `meter` at `per_second` with bursts of `burst` units; `force`
    /// charges whatever the state.
    pub async fn meter(
        &self,
        meter: &str,
        per_second: f64,
        burst: f64,
        cost: u64,
        force: bool,
    ) -> Result<Decision, Error> {
        let micros_per_unit = 1_000_000.0 / per_second.max(f64::MIN_POSITIVE);
        // KEYS: meter, slow. ARGV: µs per unit, burst units, cost, force, recovery ms.
        METER
            .key(self.keys.meter(meter))
            .key(self.keys.slow())
            .arg(micros_per_unit)
            .arg(burst.max(1.0))
            .arg(cost)
            .arg(if force { "1" } else { "0" })
            .arg(millis(self.slow.recovery))
            .invoke_async::<(i64, i64)>(&mut self.store.connection())
            .await
            .map(decision)
            .map_err(crate::redis::backend)
    }

    /// The provider pushed back: pause everyone for `pause` (or the default) and halve the
    /// limits (at most once per debounce window). Returns the new factor.
    pub async fn throttled(&self, pause: Option<Duration>) -> Result<f64, Error> {
        // KEYS: slow. ARGV: pause ms, recovery ms, debounce ms, min factor, the paused channel,
        // the scope's name. Announces the pause (the scope's name and the ms left) and answers
        // the factor in thousandths.
        THROTTLED
            .key(self.keys.slow())
            .arg(millis(pause.unwrap_or(self.slow.default_pause)))
            .arg(millis(self.slow.recovery))
            .arg(millis(self.slow.debounce))
            .arg(self.slow.min_factor)
            .arg(keys::limits_paused_channel(self.store.prefix()))
            .arg(self.keys.name())
            .invoke_async::<i64>(&mut self.store.connection())
            .await
            .map(|permille| permille as f64 / 1000.0)
            .map_err(crate::redis::backend)
    }
}

/// Rate meters of any scope (e.g. a tenant's API requests), one GCRA script per decision.
#[async_trait::async_trait]
pub trait Meters: Send + Sync + 'static {
    /// Takes `cost` units of `meter` in `scope` at `per_second`, with bursts of up to `burst`.
    async fn take(
        &self,
        scope: &str,
        meter: &str,
        per_second: f64,
        burst: f64,
        cost: u64,
    ) -> Result<Decision, Error>;
}

/// No slow-down: a tenant's own meters are never throttled by a provider.
const NO_SLOW_DOWN: SlowDown = SlowDown {
    recovery: Duration::from_secs(1),
    debounce: Duration::from_secs(1),
    min_factor: 1.0,
    default_pause: Duration::from_millis(1),
};

#[async_trait::async_trait]
impl Meters for RedisStore {
    async fn take(
        &self,
        scope: &str,
        meter: &str,
        per_second: f64,
        burst: f64,
        cost: u64,
    ) -> Result<Decision, Error> {
        RedisLimits::new(self.clone(), scope, NO_SLOW_DOWN)
            .meter(meter, per_second, burst, cost, false)
            .await
    }
}
