//! The model's limits held for the whole cluster: `model::SharedLimits` on Redis
//! (`store::RedisLimits`), so `model.max_concurrency`, `requests_per_second` and
//! `tokens_per_minute` bound every worker together, a 429 slows all of them down, and the
//! adaptive limit found from the server's answers is one for the cluster.

use std::time::Duration;

use async_trait::async_trait;
use model::adaptive::State;
use model::limits::{self, Admit, Meter, SharedLimits};
use store::RedisLimits;
use store::limits::{Decision, LeaseDecision, SlowDown};

/// `model::SharedLimits` backed by Redis; cheap to clone.
#[derive(Debug, Clone)]
pub struct RedisModelLimits {
    redis: RedisLimits,
}

impl RedisModelLimits {
    /// The limits of `scope` (`model::Model::limits_scope`: one per endpoint and key).
    pub fn new(store: store::RedisStore, scope: &str) -> Self {
        let slow = SlowDown {
            recovery: limits::RECOVERY,
            debounce: limits::CUT_DEBOUNCE,
            min_factor: limits::MIN_FACTOR,
            default_pause: limits::DEFAULT_PAUSE,
        };
        Self {
            redis: RedisLimits::new(store, scope, slow),
        }
    }

    /// The pause heard through the listener, without a read (for tests and diagnostics).
    pub fn heard_pause(&self) -> Option<tokio::time::Instant> {
        self.redis.paused_until()
    }

    /// Whether the pause heard is all there is to know ([`RedisLimits::pause_known`]).
    pub fn pause_known(&self) -> bool {
        self.redis.pause_known()
    }
}

fn admit(decision: Decision) -> Admit {
    match decision {
        Decision::Granted => Admit::Granted,
        Decision::Wait(wait) => Admit::Wait(wait),
    }
}

fn admit_lease(decision: LeaseDecision) -> Admit {
    match decision {
        LeaseDecision::Granted => Admit::Granted,
        LeaseDecision::Wait(wait) => Admit::Wait(wait),
        LeaseDecision::Reserved => Admit::Reserved,
    }
}

#[async_trait]
impl SharedLimits for RedisModelLimits {
    async fn lease(
        &self,
        id: &str,
        tenant: &str,
        limit: u32,
        reserve: u32,
        ttl: Duration,
    ) -> Result<Admit, String> {
        self.redis
            .lease(id, tenant, limit, reserve, ttl)
            .await
            .map(admit_lease)
            .map_err(|e| e.to_string())
    }

    async fn adaptive(&self) -> Result<(Option<State>, u64, u32), String> {
        let (bytes, version, in_flight) = self.redis.adaptive().await.map_err(|e| e.to_string())?;
        // A state this build cannot read (written by another version) is found again.
        let state = bytes.and_then(|b| rmp_serde::from_slice(&b).ok());
        Ok((state, version, in_flight))
    }

    async fn set_adaptive(&self, state: &State, version: u64) -> Result<bool, String> {
        let bytes = rmp_serde::to_vec_named(state).map_err(|e| e.to_string())?;
        self.redis
            .set_adaptive(&bytes, version, limits::ADAPTIVE_TTL)
            .await
            .map_err(|e| e.to_string())
    }

    async fn release(&self, id: &str) -> Result<(), String> {
        self.redis.release(id).await.map_err(|e| e.to_string())
    }

    fn freed(&self) -> Option<std::sync::Arc<tokio::sync::Notify>> {
        Some(self.redis.freed())
    }

    async fn paused_until(&self) -> Option<tokio::time::Instant> {
        self.redis.pause().await.unwrap_or_else(|e| {
            // Redis down: the call goes on with what was heard (the worker's gate holds its
            // tasks while Redis is down, so at most the calls already past it).
            tracing::warn!(error = %e, "cannot read the model's pause; going by what was heard");
            self.redis.paused_until()
        })
    }

    async fn renew(&self, ids: &[String], ttl: Duration) -> Result<(), String> {
        self.redis.renew(ids, ttl).await.map_err(|e| e.to_string())
    }

    async fn meter(
        &self,
        meter: Meter,
        per_second: f64,
        burst: f64,
        cost: u64,
        force: bool,
    ) -> Result<Admit, String> {
        self.redis
            .meter(meter.as_str(), per_second, burst, cost, force)
            .await
            .map(admit)
            .map_err(|e| e.to_string())
    }

    async fn throttled(&self, retry_after: Option<Duration>) -> Result<(), String> {
        let factor = self
            .redis
            .throttled(retry_after)
            .await
            .map_err(|e| e.to_string())?;
        tracing::info!(
            factor,
            ?retry_after,
            "model throttled: the cluster's limits shrink"
        );
        Ok(())
    }
}
