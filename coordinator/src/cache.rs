//! The cache routes: counters of the solution and function-level caches, and clearing them.

use proto::api::ErrorCode;
use std::collections::BTreeMap;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use proto::api::ErrorBody;
use serde::Serialize;
use utoipa::ToSchema;

use crate::Coordinator;
use crate::auth::Tenant;
use crate::error::{ApiError, unavailable};
use axum::Extension;

/// `GET /v1/cache/stats`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CacheStats {
    /// The model identity the cache is keyed on (provider/model@prompt version).
    model: String,
    /// Cached solutions.
    solutions: u64,
    /// Cached verified functions.
    functions: u64,
    /// `solution_hits`, `solution_misses`, `function_hits`, `function_misses`.
    counters: BTreeMap<String, u64>,
}

/// `DELETE /v1/cache`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CacheCleared {
    /// Entries removed (solutions and functions).
    removed: u64,
}

/// Entry counts and hit/miss counters of the solution and function-level caches.
#[utoipa::path(
    get,
    path = "/v1/cache/stats",
    operation_id = "cache_stats",
    tag = "cache",
    responses(
        (status = 200, description = "The counts.", body = CacheStats),
        (status = 404, description = "This coordinator runs without a cache.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable.", body = ErrorBody),
    )
)]
pub(crate) async fn cache_stats(State(c): State<Coordinator>) -> Result<Response, ApiError> {
    let Some((cache, model)) = c.cache() else {
        return Err(ApiError::new(ErrorCode::CachingDisabled, "caching is off"));
    };
    let stats = cache.cache_stats().await.map_err(unavailable)?;
    Ok(axum::Json(CacheStats {
        model: model.to_owned(),
        solutions: stats.solutions,
        functions: stats.functions,
        counters: stats.counters,
    })
    .into_response())
}

/// Empties the solution and function-level caches.
#[utoipa::path(
    delete,
    path = "/v1/cache",
    operation_id = "clear_cache",
    tag = "cache",
    responses(
        (status = 200, description = "Emptied.", body = CacheCleared),
        (status = 403, description = "The caches are shared by every tenant: only `coordinator.admin_tenants` may empty them.", body = ErrorBody),
        (status = 404, description = "This coordinator runs without a cache.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable.", body = ErrorBody),
    )
)]
pub(crate) async fn cache_clear(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
) -> Result<Response, ApiError> {
    if !c.options.is_admin(&tenant) {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "the caches are shared by every tenant: only coordinator.admin_tenants may empty them",
        ));
    }
    let Some((cache, _)) = c.cache() else {
        return Err(ApiError::new(ErrorCode::CachingDisabled, "caching is off"));
    };
    let removed = cache.clear_cache().await.map_err(unavailable)?;
    Ok(axum::Json(CacheCleared { removed }).into_response())
}
