//! Per-tenant limits on the API, shared by every coordinator through Redis, one script per
//! decision (so two coordinators admit a limit once, not twice):
//!
//! - requests per second (a GCRA meter; [`rate_limit`], middleware), and
//! - quotas on the work a request creates ([`admit`]): jobs and executions in flight, model
//!   tokens and sandbox CPU seconds per `coordinator.quota_period` (`store::quotas`).
//!
//! Over a limit: 429 naming it (the setting to change), with `Retry-After`; nothing is queued.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use proto::TaskId;
use proto::api::ErrorCode;
use store::Decision;
use store::index::Kind;
use store::quotas::{Limits, Refusal};

use crate::auth::Tenant;
use crate::error::ApiError;
use crate::tenants::TenantOptions;
use crate::{Coordinator, now_ms};

/// `Retry-After` of an in-flight refusal: work ends in seconds to minutes, not at a known time.
const IN_FLIGHT_RETRY_SECS: u64 = 5;
/// An admitted job is surely no longer running this long past `job_deadline` (the reaper
/// fails it at the deadline): its place is given back even if its end was never recorded.
const DEADLINE_MARGIN_MS: u64 = 60_000;

/// Admits `ids` (new jobs or executions of `tenant`, all or none) against the tenant's
/// quotas; the 429 names the quota. Redis unreachable: admitted (creating the work needs
/// Redis and answers 503 by itself).
pub(crate) async fn admit(
    c: &Coordinator,
    kind: Kind,
    tenant: &Tenant,
    ids: &[TaskId],
) -> Result<(), ApiError> {
    let Some((quotas, result_ttl)) = c.quotas() else {
        return Ok(());
    };
    let name = tenant.0.as_deref();
    let own = c.options.tenant(name);
    let nonzero = |v: u64| (v > 0).then_some(v);
    let now = now_ms();
    let period_ms = millis(c.options.quota_period).max(1);
    let (in_flight, horizon_ms) = match kind {
        Kind::Jobs => (
            own.jobs_in_flight,
            millis(c.options.job_deadline) + DEADLINE_MARGIN_MS,
        ),
        _ => (own.executions_in_flight, millis(result_ttl)),
    };
    let limits = Limits {
        in_flight: nonzero(in_flight),
        tokens: match kind {
            Kind::Jobs => nonzero(own.model_tokens_per_period),
            _ => None,
        },
        cpu_ms: nonzero(own.sandbox_cpu_seconds_per_period.saturating_mul(1000)),
        period_start_ms: now - now % period_ms,
        horizon_ms: now.saturating_sub(horizon_ms),
    };
    if limits.in_flight.is_none() && limits.tokens.is_none() && limits.cpu_ms.is_none() {
        return Ok(());
    }
    let refusal = match quotas.admit(kind, name, ids, &limits).await {
        Ok(Ok(())) => return Ok(()),
        Ok(Err(refusal)) => refusal,
        Err(e) => {
            tracing::warn!(error = %e, tenant = name.unwrap_or("-"), "cannot check the quotas; admitting");
            return Ok(());
        }
    };
    let who = name.unwrap_or("-");
    let period_left = (limits.period_start_ms + period_ms).saturating_sub(now) / 1000 + 1;
    let (message, setting, retry) = match refusal {
        Refusal::InFlight { current } => {
            let (field, own_field): (&str, fn(&TenantOptions) -> bool) = match kind {
                Kind::Jobs => ("jobs_in_flight", |o| o.jobs_in_flight.is_some()),
                _ => ("executions_in_flight", |o| o.executions_in_flight.is_some()),
            };
            let setting = c.options.setting(name, field, own_field);
            (
                format!(
                    "quota: tenant {who} has {current} {} in flight of at most {in_flight} ({setting}); \
                     {} more would pass it: nothing was queued",
                    kind.as_str(),
                    ids.len()
                ),
                setting,
                IN_FLIGHT_RETRY_SECS,
            )
        }
        Refusal::Tokens { used } => {
            let setting = c.options.setting(name, "model_tokens_per_period", |o| {
                o.model_tokens_per_period.is_some()
            });
            (
                format!(
                    "quota: tenant {who} has used {used} model tokens this period of at most {} ({setting}): nothing was queued",
                    own.model_tokens_per_period,
                ),
                setting,
                period_left,
            )
        }
        Refusal::Cpu { used_ms } => {
            let setting = c
                .options
                .setting(name, "sandbox_cpu_seconds_per_period", |o| {
                    o.sandbox_cpu_seconds_per_period.is_some()
                });
            (
                format!(
                    "quota: tenant {who} has used {:.1} sandbox CPU seconds this period of at most {} ({setting}): nothing was queued",
                    used_ms as f64 / 1000.0,
                    own.sandbox_cpu_seconds_per_period,
                ),
                setting,
                period_left,
            )
        }
    };
    Err(ApiError::new(ErrorCode::QuotaExceeded, message)
        .over(setting)
        .with_retry_after(retry))
}

/// Gives back the quota places of `ids` that were admitted but not created.
pub(crate) async fn release(c: &Coordinator, kind: Kind, tenant: &Tenant, ids: &[TaskId]) {
    if let Some((quotas, _)) = c.quotas()
        && let Err(e) = quotas.release(kind, tenant.0.as_deref(), ids).await
    {
        tracing::warn!(error = %e, "cannot give back quota places; they expire by themselves");
    }
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Middleware (after [`crate::auth::authenticate`]): the tenant's request rate.
pub(crate) async fn rate_limit(
    State(c): State<Coordinator>,
    request: Request,
    next: Next,
) -> Response {
    let Some(meters) = &c.stores.meters else {
        return next.run(request).await;
    };
    let tenant = request
        .extensions()
        .get::<Tenant>()
        .cloned()
        .unwrap_or_default();
    let rate = c.options.tenant(tenant.0.as_deref()).requests_per_second;
    if rate == 0 {
        return next.run(request).await;
    }
    let name = tenant.0.as_deref().unwrap_or("-");
    let scope = format!("tenant:{name}");
    #[allow(clippy::cast_precision_loss)] // a rate past 2^52 per second is no limit
    let per_second = rate as f64;
    match meters.take(&scope, "api", per_second, per_second, 1).await {
        Ok(Decision::Granted) => next.run(request).await,
        Ok(Decision::Wait(wait)) => {
            let seconds = wait.as_secs_f64().ceil().max(1.0);
            let setting = c
                .options
                .setting(tenant.0.as_deref(), "requests_per_second", |o| {
                    o.requests_per_second.is_some()
                });
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // >= 1, whole
            let wait_s = seconds as u64;
            ApiError::new(
                ErrorCode::RateLimited,
                format!(
                    "rate limit: tenant {name} may make {rate} requests per second ({setting}); retry in {wait_s} s"
                ),
            )
            .over(setting)
            .with_retry_after(wait_s)
            .into_response()
        }
        // The limit cannot be checked (Redis down): serve rather than refuse everyone; a
        // request that needs Redis answers 503 by itself.
        Err(e) => {
            tracing::warn!(error = %e, tenant = name, "cannot check the request rate; serving");
            next.run(request).await
        }
    }
}
