//! Per-tenant limits on the API: requests per second, shared by every coordinator (a GCRA
//! meter in Redis, one script per decision, so two coordinators admit the rate once, not
//! twice). Over the limit: 429 naming it, with `Retry-After`; the request is not handled at
//! all, so nothing is queued.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use store::Decision;

use crate::Coordinator;
use crate::auth::Tenant;
use crate::error::ApiError;

/// Middleware (after [`crate::auth::authenticate`]): the tenant's request rate.
pub(crate) async fn rate_limit(
    State(c): State<Coordinator>,
    request: Request,
    next: Next,
) -> Response {
    let Some(meters) = &c.meters else {
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
    let per_second = f64::from(rate);
    match meters.take(&scope, "api", per_second, per_second, 1).await {
        Ok(Decision::Granted) => next.run(request).await,
        Ok(Decision::Wait(wait)) => {
            let seconds = wait.as_secs_f64().ceil().max(1.0);
            let setting = match &tenant.0 {
                Some(t)
                    if c.options
                        .tenants
                        .get(t)
                        .is_some_and(|o| o.requests_per_second.is_some()) =>
                {
                    format!("coordinator.tenants.{t}.requests_per_second")
                }
                _ => "coordinator.tenant_defaults.requests_per_second".to_owned(),
            };
            let mut response = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "rate limit: tenant {name} may make {rate} requests per second ({setting}); retry in {seconds:.0} s"
                ),
            )
            .into_response();
            if let Ok(value) = HeaderValue::from_str(&format!("{seconds:.0}")) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
            response
        }
        // The limit cannot be checked (Redis down): serve rather than refuse everyone; a
        // request that needs Redis answers 503 by itself.
        Err(e) => {
            tracing::warn!(error = %e, tenant = name, "cannot check the request rate; serving");
            next.run(request).await
        }
    }
}
