//! `codegen_usage_total{tenant, resource}`: what tenants' finished work cost, counted where it
//! is charged (the processes that end jobs and store verdicts; Prometheus sums them).
//!
//! The `tenant` label is bounded: a tenant this process knows (configured on a coordinator,
//! registered for a worker) keeps its name, any other is `other`, and work of no tenant (an
//! API without keys) is `none`. A tenant that appears in Redis but not in the configuration
//! cannot grow the series without bound.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use prometheus::{IntCounterVec, Opts, Registry};

/// The counter and the tenants whose names it may carry; cheap to clone.
#[derive(Debug, Clone)]
pub struct TenantUsage {
    counter: IntCounterVec,
    known: Arc<RwLock<HashSet<String>>>,
}

impl TenantUsage {
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let usage = Self::unregistered()?;
        registry.register(Box::new(usage.counter.clone()))?;
        Ok(usage)
    }

    /// A counter that goes nowhere, for tools and tests.
    pub fn unregistered() -> prometheus::Result<Self> {
        Ok(Self {
            counter: IntCounterVec::new(
                Opts::new(
                    "codegen_usage_total",
                    "What tenants' finished jobs and executions cost (jobs, executions, model calls, tokens, sandbox ms and CPU ms), by tenant",
                ),
                &["tenant", "resource"],
            )?,
            known: Arc::default(),
        })
    }

    /// Adds `tenants` to those whose names the label may carry.
    pub fn know<I: IntoIterator<Item = String>>(&self, tenants: I) {
        self.known.write().expect("poisoned").extend(tenants);
    }

    /// Counts `(resource, amount)` pairs for `tenant`.
    pub fn charge(&self, tenant: Option<&str>, fields: &[(&str, u64)]) {
        let label = match tenant {
            None => "none".to_owned(),
            Some(t) if self.known.read().expect("poisoned").contains(t) => t.to_owned(),
            Some(_) => "other".to_owned(),
        };
        for (resource, amount) in fields {
            if *amount > 0 {
                self.counter
                    .with_label_values(&[label.as_str(), resource])
                    .inc_by(*amount);
            }
        }
    }

    #[cfg(test)]
    fn value(&self, tenant: &str, resource: &str) -> u64 {
        self.counter.with_label_values(&[tenant, resource]).get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_known_tenants_get_a_label_of_their_own() {
        let usage = TenantUsage::unregistered().unwrap();
        usage.know(["acme".to_owned()]);
        usage.charge(Some("acme"), &[("jobs", 1), ("model_calls", 5)]);
        usage.charge(Some("mallory-1"), &[("jobs", 1)]);
        usage.charge(Some("mallory-2"), &[("jobs", 1)]);
        usage.charge(None, &[("executions", 2), ("sandbox_ms", 0)]);
        assert_eq!(usage.value("acme", "model_calls"), 5);
        assert_eq!(usage.value("other", "jobs"), 2);
        assert_eq!(usage.value("none", "executions"), 2);
        assert_eq!(usage.value("mallory-1", "jobs"), 0);
    }
}
