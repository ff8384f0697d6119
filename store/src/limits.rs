//! Cluster-wide limits in Redis, one script per decision: a lease-based semaphore (leases
//! expire, so a holder that dies frees its slot after `ttl`), GCRA meters (requests per
//! second, tokens per minute), and a slow-down that every decision honours: after a 429 the
//! provider's pause holds for everyone and the limits halve, growing back linearly over
//! `recovery`.
//!
//! | key | value |
//! | --- | --- |
//! | `{prefix}:limits:{scope}:leases` | sorted set: lease id (`{tenant}/{unique}`) → expiry (ms) |
//! | `{prefix}:limits:{scope}:askers` | sorted set: tenant → when it last asked for a lease (ms) |
//! | `{prefix}:limits:{scope}:{meter}` | GCRA theoretical arrival time (µs) |
//! | `{prefix}:limits:{scope}:slow` | hash: `factor`, `at` (ms), `until` (ms), `cut` (ms) |
//!
//! Time is Redis's (`TIME`), so processes with skewed clocks agree.

use std::sync::LazyLock;
use std::time::Duration;

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
    base: String,
    slow: SlowDown,
}

/// The current factor (1 = whole, grown back since the last cut) and the pause left (ms).
const SLOW: &str = r"
local function slowdown(key, now, recovery)
  local s = redis.call('HMGET', key, 'factor', 'at', 'until')
  local factor = tonumber(s[1]) or 1
  local at = tonumber(s[2]) or now
  local pause = (tonumber(s[3]) or 0) - now
  factor = math.min(1, factor + (now - at) / recovery)
  if pause < 0 then pause = 0 end
  return factor, pause
end
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)
";

/// KEYS: leases, slow, askers. ARGV: id, limit, ttl ms, recovery ms, tenant, reserve, asker
/// window ms. Returns {granted, wait ms}; {0, -1}: the lease left is reserved for others.
const LEASE: &str = r"
local factor, pause = slowdown(KEYS[2], now, tonumber(ARGV[4]))
if pause > 0 then return {0, pause} end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local limit = math.max(1, math.floor(tonumber(ARGV[2]) * factor))
local reserve = math.min(tonumber(ARGV[6]), math.floor(limit / 4))
local window = tonumber(ARGV[7])
local tenant = ARGV[5]
if reserve > 0 then
  redis.call('ZADD', KEYS[3], now, tenant)
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - window)
  redis.call('PEXPIRE', KEYS[3], 2 * window)
end
local held = redis.call('ZCARD', KEYS[1])
if held >= limit then return {0, 0} end
if reserve > 0 and held >= limit - reserve and redis.call('ZCARD', KEYS[3]) > 1 then
  local prefix = tenant .. '/'
  local mine = 0
  for _, lease in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    if string.sub(lease, 1, #prefix) == prefix then mine = mine + 1 end
  end
  if mine >= reserve then return {0, -1} end
end
local ttl = tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], string.format('%.0f', now + ttl), ARGV[1])
redis.call('PEXPIRE', KEYS[1], 2 * ttl)
return {1, 0}
";

/// KEYS: leases. ARGV: id, the freed channel, the scope.
const RELEASE: &str = r"
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
  return 1
end
return 0
";

/// KEYS: leases. Drops the expired ones, counts the rest.
const LEASES: &str = r"
local t = redis.call('TIME')
local now = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZCARD', KEYS[1])
";

/// KEYS: slow. The pause left (ms), as every decision reads it (`SLOW`; the recovery passed
/// only shapes the factor, which this leaves out).
const PAUSE: &str = r"
local _, pause = slowdown(KEYS[1], now, 1)
return pause
";

/// KEYS: leases. ARGV: ttl ms, then the ids. Only leases still held are extended (`XX`).
const RENEW: &str = r"
local t = redis.call('TIME')
local ttl = tonumber(ARGV[1])
local expires = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + ttl)
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], 'XX', expires, ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], 2 * ttl)
return 1
";

/// KEYS: meter, slow. ARGV: µs per unit, burst units, cost, force, recovery ms.
const METER: &str = r"
local factor, pause = slowdown(KEYS[2], now, tonumber(ARGV[5]))
local force = ARGV[4] == '1'
if pause > 0 and not force then return {0, pause} end
local interval = tonumber(ARGV[1]) / factor
local tat = tonumber(redis.call('GET', KEYS[1])) or now_us
if tat < now_us then tat = now_us end
local new_tat = tat + tonumber(ARGV[3]) * interval
local allow_at = new_tat - tonumber(ARGV[2]) * interval
if allow_at > now_us and not force then
  return {0, math.ceil((allow_at - now_us) / 1000)}
end
redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', math.ceil((new_tat - now_us) / 1000) + 1000)
return {1, 0}
";

/// KEYS: slow. ARGV: pause ms, recovery ms, debounce ms, min factor, the paused channel, the
/// scope. Announces the pause (scope and milliseconds left) and returns the factor ‰.
const THROTTLED: &str = r"
local recovery = tonumber(ARGV[2])
local factor = slowdown(KEYS[1], now, recovery)
local cut = tonumber(redis.call('HGET', KEYS[1], 'cut')) or 0
if now - cut >= tonumber(ARGV[3]) then
  factor = math.max(tonumber(ARGV[4]), factor / 2)
  redis.call('HSET', KEYS[1], 'cut', string.format('%.0f', now))
end
local until_ = math.max(tonumber(redis.call('HGET', KEYS[1], 'until')) or 0, now + tonumber(ARGV[1]))
redis.call('HSET', KEYS[1], 'factor', string.format('%.4f', factor),
  'at', string.format('%.0f', now), 'until', string.format('%.0f', until_))
redis.call('PEXPIRE', KEYS[1], 2 * recovery + tonumber(ARGV[1]))
redis.call('PUBLISH', ARGV[5], ARGV[6] .. ' ' .. string.format('%.0f', until_ - now))
return math.floor(factor * 1000)
";

/// The scripts a model call runs (a lease, each meter, while waiting too), hashed once rather
/// than on every call.
static LEASE_SCRIPT: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(&format!("{SLOW}{LEASE}")));
static METER_SCRIPT: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(&format!("{SLOW}{METER}")));
static THROTTLED_SCRIPT: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(&format!("{SLOW}{THROTTLED}")));
static PAUSE_SCRIPT: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(&format!("{SLOW}{PAUSE}")));
static RENEW_SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RENEW));
static RELEASE_SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RELEASE));

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
        let base = format!("{}:limits:{scope}", store.prefix());
        Self { store, base, slow }
    }

    fn key(&self, what: &str) -> String {
        format!("{}:{what}", self.base)
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
        LEASE_SCRIPT
            .key(self.key("leases"))
            .key(self.key("slow"))
            .key(self.key("askers"))
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
        RELEASE_SCRIPT
            .key(self.key("leases"))
            .arg(id)
            .arg(self.store.keys().lease_freed_channel())
            .arg(&self.base)
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
        self.store.pauses().heard(&self.base)
    }

    /// Until when the callers of this scope pause. The scripts check the pause themselves;
    /// this is for a call that asks none of them (a seat kept from an earlier call). What was
    /// heard, when that is all there is to know ([`Self::pause_known`]); otherwise one round
    /// trip reads it, and what the read shows is then known until the next disconnection.
    pub async fn pause(&self) -> Result<Option<tokio::time::Instant>, Error> {
        let pauses = self.store.pauses();
        if pauses.known(&self.base) {
            return Ok(self.paused_until());
        }
        let ticket = pauses.ticket();
        let left: u64 = PAUSE_SCRIPT
            .key(self.key("slow"))
            .invoke_async(&mut self.store.connection())
            .await
            .map_err(crate::redis::backend)?;
        let until = (left > 0).then(|| tokio::time::Instant::now() + Duration::from_millis(left));
        pauses.read(&self.base, ticket, until);
        Ok(self.paused_until())
    }

    /// Whether [`Self::paused_until`] is all there is to know of this scope's pause: its
    /// pause was read while the listener was subscribed, and it was not disconnected since.
    pub fn pause_known(&self) -> bool {
        self.store.pauses().known(&self.base)
    }

    /// Extends the leases `ids` that are still held to `ttl` from now (one script).
    pub async fn renew(&self, ids: &[String], ttl: Duration) -> Result<(), Error> {
        RENEW_SCRIPT
            .key(self.key("leases"))
            .arg(millis(ttl))
            .arg(ids)
            .invoke_async::<i64>(&mut self.store.connection())
            .await
            .map(drop)
            .map_err(crate::redis::backend)
    }

    /// Leases held now (expired ones dropped), for tests and operators.
    pub async fn leases(&self) -> Result<u64, Error> {
        redis::Script::new(LEASES)
            .key(self.key("leases"))
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
        METER_SCRIPT
            .key(self.key(meter))
            .key(self.key("slow"))
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
        THROTTLED_SCRIPT
            .key(self.key("slow"))
            .arg(millis(pause.unwrap_or(self.slow.default_pause)))
            .arg(millis(self.slow.recovery))
            .arg(millis(self.slow.debounce))
            .arg(self.slow.min_factor)
            .arg(self.store.keys().limits_paused_channel())
            .arg(&self.base)
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
