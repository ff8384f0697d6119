//! `GET /v1/cluster`: the live workers (what each holds: tasks, sessions, pools, its model's
//! calls against the limit), the broker's queues and their consumers, for operators (an admin
//! tenant's key). Every figure is one the cluster already keeps: the workers' own metrics,
//! which they announce with their presence (`store::Presence`), and the broker's counts.

use std::collections::BTreeSet;

use axum::Json;
use axum::extract::{Extension, State};
use proto::api::{ClusterView, ErrorBody, ErrorCode, QueueView, WorkerStatus, WorkerView};

use crate::auth::Tenant;
use crate::error::{ApiError, unavailable};
use crate::{Coordinator, now_ms};

/// How long the broker's counts may take (a passive declare per queue and lane).
const DEPTHS_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// The cluster as it is now: its live workers and its queues.
///
/// For `coordinator.admin_tenants` only (every tenant's work passes through these queues and
/// workers). A worker's figures are those of its last announcement, a few seconds old at most;
/// counters (`tasks`, `sandbox_runs`, the model's `calls`) count since the worker started, so
/// two answers apart give rates.
#[utoipa::path(
    get,
    path = "/v1/cluster",
    operation_id = "get_cluster",
    tag = "cluster",
    responses(
        (status = 200, description = "The live workers and the queues.", body = ClusterView),
        (status = 403, description = "The caller is not in `coordinator.admin_tenants`.", body = ErrorBody),
        (status = 429, description = "Over the tenant's request rate (`coordinator.tenants.<name>.requests_per_second`); `Retry-After` says when to retry.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable, or this coordinator keeps no presence (it runs without Redis).", body = ErrorBody),
    )
)]
pub(crate) async fn cluster(
    State(c): State<Coordinator>,
    Extension(caller): Extension<Tenant>,
) -> Result<Json<ClusterView>, ApiError> {
    if !c.options.is_admin(&caller) {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "the cluster's page is for coordinator.admin_tenants only",
        ));
    }
    let Some(presence) = &c.stores.presence else {
        return Err(ApiError::new(
            ErrorCode::NotKept,
            "this coordinator knows no workers (it runs without Redis)",
        ));
    };
    let workers = presence
        .workers()
        .await
        .map_err(unavailable)?
        .into_iter()
        .map(|w| WorkerView {
            status: w.status.and_then(|s| {
                serde_json::from_str::<WorkerStatus>(&s)
                    .inspect_err(|e| tracing::debug!(worker = %w.id, error = %e, "a worker's status does not read"))
                    .ok()
            }),
            name: w.id,
            generates: w.able,
        })
        .collect();
    // Every tenant's lanes: those this coordinator knows and those others registered.
    let mut tenants: BTreeSet<String> = c.options.weights().into_keys().collect();
    let mut problems = Vec::new();
    if let Some(register) = &c.stores.tenants {
        match register.tenants().await {
            Ok(registered) => tenants.extend(registered.into_keys()),
            Err(e) => problems.push(format!(
                "the tenants' register: {e} (their lanes are left out)"
            )),
        }
    }
    let tenants: Vec<String> = tenants.into_iter().collect();
    let asked = tokio::time::timeout(DEPTHS_WITHIN, c.broker.depths(&tenants)).await;
    let (queues, queues_error) = match asked {
        Ok(Ok(depths)) => (
            depths
                .into_iter()
                .map(|d| QueueView {
                    name: d.name,
                    ready: u64::from(d.ready),
                    consumers: u64::from(d.consumers),
                })
                .collect(),
            None,
        ),
        Ok(Err(e)) => (Vec::new(), Some(e.to_string())),
        Err(_) => (
            Vec::new(),
            Some(format!(
                "the broker did not answer within {DEPTHS_WITHIN:?}"
            )),
        ),
    };
    let queues_error = match (queues_error, problems.is_empty()) {
        (error, true) => error,
        (error, false) => Some(
            error
                .into_iter()
                .chain(problems)
                .collect::<Vec<_>>()
                .join("; "),
        ),
    };
    Ok(Json(ClusterView {
        at_ms: now_ms(),
        workers,
        queues,
        queues_error,
    }))
}
