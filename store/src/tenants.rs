//! Which tenants exist and their weights, so every worker consumes every tenant's lane of the
//! work queues. Coordinators know the tenants (their API keys and `coordinator.tenants`) and
//! register them; workers read the register and add a lane for each tenant they have not seen.
//! Tenants are never removed: a lane outlives its tenant's configuration for as long as work
//! may wait in it, and consuming an empty queue costs nothing.
//!
//! In Redis: one hash, tenant → weight ([`crate::keys::tenants`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use redis::AsyncCommands;

use crate::{Error, RedisStore, keys};

#[async_trait]
pub trait Tenants: Send + Sync + 'static {
    /// Records `tenants` (tenant → weight), replacing the weights of those already known.
    async fn register(&self, tenants: &BTreeMap<String, u32>) -> Result<(), Error>;

    /// Every registered tenant and its weight.
    async fn tenants(&self) -> Result<BTreeMap<String, u32>, Error>;
}

#[async_trait]
impl Tenants for RedisStore {
    async fn register(&self, tenants: &BTreeMap<String, u32>) -> Result<(), Error> {
        if tenants.is_empty() {
            return Ok(());
        }
        let fields: Vec<(&str, u32)> = tenants.iter().map(|(t, w)| (t.as_str(), *w)).collect();
        self.connection()
            .hset_multiple::<_, _, _, ()>(keys::tenants(self.prefix()), &fields)
            .await
            .map_err(crate::redis::backend)
    }

    async fn tenants(&self) -> Result<BTreeMap<String, u32>, Error> {
        self.connection()
            .hgetall(keys::tenants(self.prefix()))
            .await
            .map_err(crate::redis::backend)
    }
}

/// In-process register for unit tests.
#[derive(Debug, Clone, Default)]
pub struct MemoryTenants {
    tenants: Arc<Mutex<BTreeMap<String, u32>>>,
}

#[async_trait]
impl Tenants for MemoryTenants {
    async fn register(&self, tenants: &BTreeMap<String, u32>) -> Result<(), Error> {
        self.tenants
            .lock()
            .expect("poisoned")
            .extend(tenants.iter().map(|(t, w)| (t.clone(), *w)));
        Ok(())
    }

    async fn tenants(&self) -> Result<BTreeMap<String, u32>, Error> {
        Ok(self.tenants.lock().expect("poisoned").clone())
    }
}
