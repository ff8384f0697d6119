//! `GET /v1/cluster`: the cluster at a glance, for operators. Each worker says what it holds
//! with its presence announcement ([`WorkerStatus`]); the coordinator adds the broker's
//! queues.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What a worker says about itself every few seconds, from its own metrics: the contract
/// between a worker (which writes it with its presence) and a coordinator (which reads it).
/// Every field has a default, so a worker of another version still reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct WorkerStatus {
    /// When it started, ms since the epoch.
    pub started_ms: u64,
    /// When it said this, ms since the epoch.
    pub at_ms: u64,
    /// Why it cannot generate code (it runs without a model); absent when it can.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub unable: Option<String>,
    /// Tasks and executions it is working on now.
    pub in_flight: u64,
    /// Sessions it holds (each a container of its own).
    pub sessions: u64,
    /// Its warm containers, per language.
    pub pools: Vec<PoolStatus>,
    /// Its model (absent without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub model: Option<ModelStatus>,
    /// Tasks settled since it started, by outcome (`completed`, `requeued`, `failed`, …).
    pub tasks: BTreeMap<String, u64>,
    /// Sandbox runs since it started, by verdict (`passed`, `failed`, `timeout`, …).
    pub sandbox_runs: BTreeMap<String, u64>,
}

/// One language's pool of warm containers on one worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PoolStatus {
    pub language: String,
    /// Warm containers it keeps.
    pub size: u64,
    pub idle: u64,
    /// Containers existing (idle, busy or starting).
    pub live: u64,
    /// Runs waiting for a container.
    pub waiting: u64,
}

/// A worker's model: its limit and its calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ModelStatus {
    pub provider: String,
    pub model: String,
    /// Calls allowed in flight at once across the cluster (found or configured).
    pub limit: u64,
    /// Calls this worker has at the server now.
    pub in_flight: u64,
    /// Calls since it started, by outcome (`ok`, `retryable`, …).
    #[serde(default)]
    pub calls: BTreeMap<String, u64>,
}

/// A live worker on the cluster page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct WorkerView {
    /// The name it announces itself by (its host name and process id).
    pub name: String,
    /// It has a model.
    pub generates: bool,
    /// What it last said (absent from a worker that says nothing, e.g. an older one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub status: Option<WorkerStatus>,
}

/// One queue of the broker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QueueView {
    pub name: String,
    /// Messages waiting for a consumer (not those delivered and unsettled).
    pub ready: u64,
    pub consumers: u64,
}

/// `GET /v1/cluster`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ClusterView {
    /// When the coordinator answered, ms since the epoch.
    pub at_ms: u64,
    pub workers: Vec<WorkerView>,
    /// The work queues and the tenants' lanes that exist.
    pub queues: Vec<QueueView>,
    /// Why queues are missing: the broker could not be asked (then none are listed), or the
    /// tenants' register could not be read (then their lanes are not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub queues_error: Option<String>,
}
