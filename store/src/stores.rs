//! Every part of the shared state a process may use, as one value: [`Stores::redis`] has them
//! all on one Redis; [`Stores::memory`] has the in-process fakes there are (for tests), and
//! leaves out the parts that only Redis has, which the processes then go without.

use std::sync::Arc;
use std::time::Duration;

use crate::{
    CacheStore, Idempotency, Index, JobStore, Lessons, MemoryCache, MemoryIdempotency, MemoryIndex,
    MemoryJobs, MemoryPresence, MemoryStore, MemoryTenants, Meters, Presence, Quotas, RedisStore,
    Sessions, Store, Tenants, Usage, Webhooks,
};

/// The stores; cheap to clone. A part that is `None` is a feature the process goes without
/// (and says so where it matters: a route answering 503, no limit enforced).
#[derive(Clone)]
pub struct Stores {
    /// Executions' metadata and verdicts.
    pub executions: Arc<dyn Store>,
    /// Generation jobs, their steps and results.
    pub jobs: Arc<dyn JobStore>,
    /// The solution and function caches.
    pub cache: Option<Arc<dyn CacheStore>>,
    /// The register of tenants and their weights, for the workers' lanes.
    pub tenants: Option<Arc<dyn Tenants>>,
    /// Tenants' request rates, metered cluster-wide.
    pub meters: Option<Arc<dyn Meters>>,
    /// `Idempotency-Key`s.
    pub idempotency: Option<Arc<dyn Idempotency>>,
    /// Each tenant's work, for the listing routes.
    pub index: Option<Arc<dyn Index>>,
    /// Each tenant's hourly usage totals.
    pub usage: Option<Arc<dyn Usage>>,
    /// Tenants' quotas.
    pub quotas: Option<Arc<dyn Quotas>>,
    /// Webhooks waiting and delivered.
    pub webhooks: Option<Arc<dyn Webhooks>>,
    /// Which workers are alive, and whether they can generate.
    pub presence: Option<Arc<dyn Presence>>,
    /// Sessions, their hosts and the hosts' secret (Redis only).
    pub sessions: Option<Arc<dyn Sessions>>,
    /// Lessons, the memory of repairs (Redis only).
    pub lessons: Option<Arc<dyn Lessons>>,
    /// How long results (and what refers to them: idempotency keys, quota places) are kept.
    pub result_ttl: Duration,
    /// How long usage totals are kept.
    pub usage_retention: Duration,
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores")
            .field("result_ttl", &self.result_ttl)
            .finish_non_exhaustive()
    }
}

impl Stores {
    /// Every part, on `store`'s Redis.
    pub fn redis(store: &RedisStore) -> Self {
        let shared = Arc::new(store.clone());
        Self {
            executions: shared.clone(),
            jobs: shared.clone(),
            cache: Some(shared.clone()),
            tenants: Some(shared.clone()),
            meters: Some(shared.clone()),
            idempotency: Some(shared.clone()),
            index: Some(shared.clone()),
            usage: Some(shared.clone()),
            quotas: Some(shared.clone()),
            webhooks: Some(shared.clone()),
            presence: Some(shared.clone()),
            sessions: Some(shared.clone()),
            lessons: Some(shared),
            result_ttl: store.options().result_ttl,
            usage_retention: store.options().usage_retention,
        }
    }

    /// The in-process fakes: executions and jobs (whose ends charge usage, give quota places
    /// back and make webhooks due, as Redis's scripts do), caches, tenants, idempotency keys,
    /// the index, presence, quotas and webhooks. No meters (request rates).
    pub fn memory(executions: MemoryStore, jobs: MemoryJobs) -> Self {
        let options = crate::Options::default();
        Self {
            executions: Arc::new(executions.with_jobs(&jobs)),
            jobs: Arc::new(jobs.clone()),
            cache: Some(Arc::new(MemoryCache::new())),
            tenants: Some(Arc::new(MemoryTenants::default())),
            meters: None,
            idempotency: Some(Arc::new(MemoryIdempotency::default())),
            index: Some(Arc::new(MemoryIndex::default())),
            usage: Some(Arc::new(jobs.clone())),
            quotas: Some(Arc::new(jobs.clone())),
            webhooks: Some(Arc::new(jobs)),
            presence: Some(Arc::new(MemoryPresence::default())),
            sessions: None,
            lessons: None,
            result_ttl: options.result_ttl,
            usage_retention: options.usage_retention,
        }
    }

    /// Only executions and jobs: what a process needs at the least.
    pub fn bare(executions: Arc<dyn Store>, jobs: Arc<dyn JobStore>) -> Self {
        let options = crate::Options::default();
        Self {
            executions,
            jobs,
            cache: None,
            tenants: None,
            meters: None,
            idempotency: None,
            index: None,
            usage: None,
            quotas: None,
            webhooks: None,
            presence: None,
            sessions: None,
            lessons: None,
            result_ttl: options.result_ttl,
            usage_retention: options.usage_retention,
        }
    }
}
