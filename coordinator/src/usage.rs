//! `GET /v1/usage`: what a tenant's finished work cost over a window (`store::usage`).

use proto::api::ErrorCode;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Query, State};
use axum::response::{IntoResponse, Response};
use proto::api::{ErrorBody, Usage, UsagePer};
use serde::Deserialize;

use crate::auth::Tenant;
use crate::error::{ApiError, unavailable};
use crate::listing::parse_time;
use crate::{Coordinator, now_ms};

/// The window when `from` is not given: the last day.
const DEFAULT_WINDOW: Duration = Duration::from_secs(24 * 3600);

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct UsageParams {
    /// Start of the window (RFC 3339; default: a day before `to`), rounded down to the hour.
    #[param(format = DateTime)]
    from: Option<String>,
    /// End of the window (RFC 3339; default: now), exclusive.
    #[param(format = DateTime)]
    to: Option<String>,
    /// Also answer the totals per `hour` or per `day` (UTC), as `series`.
    per: Option<UsagePer>,
    /// Another tenant's usage: only for `coordinator.admin_tenants`.
    #[param(pattern = r"^[A-Za-z0-9_-]{1,64}$")]
    tenant: Option<String>,
}

/// What the caller's jobs and executions that ended in a window cost: jobs, executions, model
/// calls, prompt and completion tokens, sandbox wall and CPU milliseconds; with `per`, also
/// per hour or day.
///
/// Each job and execution is counted once, when it ends, with the figures its result reports
/// (`metrics` of a job, `duration_ms` and `cpu_ms` of a verdict), so the totals are the sum of
/// those results. Kept per hour for `store.usage_retention`; the window is widened to whole
/// hours and cut to what is kept.
#[utoipa::path(
    get,
    path = "/v1/usage",
    operation_id = "get_usage",
    tag = "usage",
    params(UsageParams),
    responses(
        (status = 200, description = "The totals over the window.", body = Usage),
        (status = 400, description = "An unknown query parameter.", body = ErrorBody),
        (status = 403, description = "`tenant` names another tenant and the caller is not in `coordinator.admin_tenants`.", body = ErrorBody),
        (status = 422, description = "A time that is not RFC 3339; the message names it.", body = ErrorBody),
        (status = 429, description = "Over the tenant's request rate (`coordinator.tenants.<name>.requests_per_second`); `Retry-After` says when to retry.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable.", body = ErrorBody),
    )
)]
pub(crate) async fn usage(
    State(c): State<Coordinator>,
    Extension(caller): Extension<Tenant>,
    params: Result<Query<UsageParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(params) = params.map_err(crate::error::query_rejected)?;
    if let Some(named) = &params.tenant
        && !crate::tenants::valid_name(named)
    {
        return Err(ApiError::invalid(
            "tenant",
            "not a tenant name (1 to 64 letters, digits, '-' or '_')",
        ));
    }
    let tenant = match params.tenant {
        Some(named) if caller.0.as_deref() != Some(named.as_str()) => {
            if !c.options.is_admin(&caller) {
                return Err(ApiError::new(
                    ErrorCode::Forbidden,
                    "another tenant's usage is for coordinator.admin_tenants only",
                ));
            }
            Some(named)
        }
        _ => caller.0.clone(),
    };
    let Some(store) = &c.stores.usage else {
        return Err(ApiError::new(
            ErrorCode::NotKept,
            "this coordinator keeps no usage (it runs without Redis)",
        ));
    };
    let to_ms = match &params.to {
        Some(to) => parse_time("to", to)?,
        None => now_ms(),
    };
    let from_ms = match &params.from {
        Some(from) => parse_time("from", from)?,
        None => to_ms.saturating_sub(millis(DEFAULT_WINDOW)),
    };
    // Nothing older than the retention is kept, nothing later than now recorded: the window
    // says what the totals cover, and it is never more hours than the retention has.
    let now = now_ms();
    let kept = now.saturating_sub(millis(c.stores.usage_retention));
    let from_ms = from_ms.max(kept);
    let from_ms = from_ms - from_ms % store::usage::BUCKET_MS;
    let to_ms = to_ms.min(now + 1).max(from_ms);
    let hours = store
        .hourly(tenant.as_deref(), from_ms, to_ms)
        .await
        .map_err(unavailable)?;
    Ok(axum::Json(Usage {
        tenant,
        from_ms,
        to_ms,
        totals: proto::api::UsageTotals::sum_of(&hours),
        series: params.per.map(|per| per.group(&hours)),
    })
    .into_response())
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
