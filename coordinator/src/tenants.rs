//! Tenants' settings (`coordinator.tenants.<name>`) and their registration for the workers.
//!
//! Every tenant's work goes to a lane of its own in the tasks and executions queues
//! (`proto::queues::Topology::lane`); workers take from the lanes by weight. They learn which
//! lanes there are from the register ([`store::Tenants`]), which every coordinator fills with
//! the tenants it knows (those with an API key and those in `coordinator.tenants`) when it
//! starts and every [`REGISTER_PERIOD`] after.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use store::Tenants;
use tokio_util::sync::CancellationToken;

use crate::{Error, Options};

/// One tenant's settings (`coordinator.tenants.<name>`), or every tenant's defaults
/// (`coordinator.tenant_defaults`); a setting a tenant leaves out is the default's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TenantOptions {
    /// Share of the workers when several tenants have work waiting: a tenant of weight 3 gets
    /// three tasks started for each one of a tenant of weight 1 (1..=1000; default 1).
    pub weight: Option<u32>,
    /// API requests per second, bursts of up to a second's worth, across every coordinator
    /// (0 or none: no limit). Past it: 429 with `Retry-After`, nothing done.
    pub requests_per_second: Option<u64>,
    /// Generation jobs submitted and not yet ended, across every coordinator (0 or none: no
    /// limit). A job or batch that would pass it: 429, nothing queued.
    pub jobs_in_flight: Option<u64>,
    /// Executions submitted and without a verdict yet (0 or none: no limit).
    pub executions_in_flight: Option<u64>,
    /// Model tokens (prompt + completion) the jobs that ended in the current
    /// `coordinator.quota_period` may have used; once reached, new jobs get 429 until the
    /// period ends (0 or none: no limit). Work already admitted runs to its end.
    pub model_tokens_per_period: Option<u64>,
    /// Sandbox CPU seconds the jobs and executions that ended in the current period may have
    /// used; once reached, new work gets 429 until the period ends (0 or none: no limit).
    pub sandbox_cpu_seconds_per_period: Option<u64>,
    /// Live sessions at a time, across every coordinator (0 or none: no limit). Past it:
    /// 429 naming this setting, nothing opened.
    pub sessions: Option<u64>,
    /// The key webhooks to this tenant are signed with (HMAC-SHA256). A secret: give it in the
    /// environment (`CODEGEN__COORDINATOR__TENANTS__<NAME>__WEBHOOK_SECRET`). Without one the
    /// tenant cannot ask for webhooks. Never taken from `tenant_defaults` for a named tenant
    /// (tenants sharing a key could forge each other's); there it is the open API's.
    #[serde(skip_serializing)]
    pub webhook_secret: Option<String>,
}

/// A tenant's settings with the defaults filled in; 0 is no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantLimits {
    pub weight: u32,
    pub requests_per_second: u64,
    pub jobs_in_flight: u64,
    pub executions_in_flight: u64,
    pub model_tokens_per_period: u64,
    pub sandbox_cpu_seconds_per_period: u64,
    pub sessions: u64,
}

/// The most a weight may be: beyond it, a stride of the fair scheduler loses precision.
const MAX_WEIGHT: u32 = 1000;

/// How often a coordinator registers its tenants again (a register emptied by hand, or a
/// Redis restarted without persistence, is filled again within this long).
pub const REGISTER_PERIOD: Duration = Duration::from_secs(30);

impl Options {
    /// `tenant`'s settings (`None`: the tenant of an open API), defaults filled in.
    pub fn tenant(&self, tenant: Option<&str>) -> TenantLimits {
        let own = tenant.and_then(|t| self.tenants.get(t));
        let pick = |f: fn(&TenantOptions) -> Option<u64>| {
            own.and_then(f)
                .or_else(|| f(&self.tenant_defaults))
                .unwrap_or(0)
        };
        TenantLimits {
            weight: own
                .and_then(|o| o.weight)
                .or(self.tenant_defaults.weight)
                .unwrap_or(1),
            requests_per_second: pick(|o| o.requests_per_second),
            jobs_in_flight: pick(|o| o.jobs_in_flight),
            executions_in_flight: pick(|o| o.executions_in_flight),
            model_tokens_per_period: pick(|o| o.model_tokens_per_period),
            sandbox_cpu_seconds_per_period: pick(|o| o.sandbox_cpu_seconds_per_period),
            sessions: pick(|o| o.sessions),
        }
    }

    /// The setting `field` of `tenant` as an operator writes it: its own entry when it has
    /// one for that field, else the defaults'.
    pub(crate) fn setting(
        &self,
        tenant: Option<&str>,
        field: &str,
        own: fn(&TenantOptions) -> bool,
    ) -> String {
        match tenant {
            Some(t) if self.tenants.get(t).is_some_and(own) => {
                format!("coordinator.tenants.{t}.{field}")
            }
            _ => format!("coordinator.tenant_defaults.{field}"),
        }
    }

    /// Every tenant this coordinator knows, with its weight.
    pub fn weights(&self) -> BTreeMap<String, u32> {
        self.api_keys
            .keys()
            .chain(self.tenants.keys())
            .map(|t| (t.clone(), self.tenant(Some(t)).weight))
            .collect()
    }

    /// Tenant names become queue names: letters, digits, `-` and `_`, at most 64 bytes.
    pub(crate) fn check_tenants(&self) -> Result<(), Error> {
        for tenant in self.api_keys.keys().chain(self.tenants.keys()) {
            if !valid_name(tenant) {
                return Err(Error::Config(format!(
                    "tenant name {tenant:?}: use 1 to 64 letters, digits, '-' or '_'"
                )));
            }
        }
        let entries = self
            .tenants
            .iter()
            .map(|(t, o)| (format!("tenants.{t}"), o))
            .chain(std::iter::once((
                "tenant_defaults".to_owned(),
                &self.tenant_defaults,
            )));
        for (name, options) in entries {
            if let Some(weight) = options.weight
                && !(1..=MAX_WEIGHT).contains(&weight)
            {
                return Err(Error::Config(format!(
                    "coordinator.{name}.weight must be between 1 and {MAX_WEIGHT}, not {weight}"
                )));
            }
        }
        Ok(())
    }
}

/// Whether `name` may name a tenant: 1 to 64 letters, digits, `-` or `_`.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Registers the tenants this coordinator knows, with their weights, for the workers.
pub(crate) struct Registration {
    register: Arc<dyn Tenants>,
    weights: BTreeMap<String, u32>,
}

impl Registration {
    /// `None` without a register (`stores.tenants`) or without tenants.
    pub(crate) fn build(options: &Options, register: Option<Arc<dyn Tenants>>) -> Option<Self> {
        let weights = options.weights();
        (!weights.is_empty()).then_some(Self {
            register: register?,
            weights,
        })
    }

    /// Registers the weights now and every [`REGISTER_PERIOD`] until `cancel`.
    pub(crate) async fn run(self, cancel: CancellationToken) {
        let Self { register, weights } = self;
        let mut registered = false;
        loop {
            match register.register(&weights).await {
                Ok(()) if !registered => {
                    tracing::info!(
                        tenants = weights.len(),
                        "tenants registered for the workers"
                    );
                    registered = true;
                }
                Ok(()) => {}
                Err(e) => tracing::warn!(error = %e, "cannot register the tenants; retrying"),
            }
            // Until the first success, retry soon: a tenant's work waits unconsumed until then.
            let period = if registered {
                REGISTER_PERIOD
            } else {
                Duration::from_secs(1)
            };
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(period) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_cover_keyed_and_configured_tenants_and_names_are_checked() {
        let mut options = Options::default();
        options.api_keys.insert("acme".into(), "k1".into());
        options.api_keys.insert("bulk".into(), "k2".into());
        options.tenants.insert(
            "bulk".into(),
            TenantOptions {
                weight: Some(3),
                requests_per_second: Some(50),
                jobs_in_flight: Some(7),
                ..TenantOptions::default()
            },
        );
        options
            .tenants
            .insert("later".into(), TenantOptions::default());
        options.tenant_defaults.requests_per_second = Some(5);
        let weights = options.weights();
        assert_eq!(
            weights.into_iter().collect::<Vec<_>>(),
            [("acme".into(), 1), ("bulk".into(), 3), ("later".into(), 1)]
        );
        // A tenant's own setting wins; what it leaves out is the default's.
        assert_eq!(options.tenant(Some("bulk")).requests_per_second, 50);
        assert_eq!(options.tenant(Some("acme")).requests_per_second, 5);
        assert_eq!(options.tenant(None).requests_per_second, 5);
        assert_eq!(options.tenant(Some("bulk")).jobs_in_flight, 7);
        assert_eq!(options.tenant(Some("acme")).jobs_in_flight, 0);
        assert_eq!(
            options.setting(Some("bulk"), "jobs_in_flight", |o| o
                .jobs_in_flight
                .is_some()),
            "coordinator.tenants.bulk.jobs_in_flight"
        );
        assert_eq!(
            options.setting(Some("acme"), "jobs_in_flight", |o| o
                .jobs_in_flight
                .is_some()),
            "coordinator.tenant_defaults.jobs_in_flight"
        );
        assert!(options.check_tenants().is_ok());
        options
            .tenants
            .insert("a.b".into(), TenantOptions::default());
        let e = options.check_tenants().unwrap_err().to_string();
        assert!(e.contains("\"a.b\""), "{e}");
        options.tenants.remove("a.b");
        options.tenants.insert(
            "zero".into(),
            TenantOptions {
                weight: Some(0),
                ..TenantOptions::default()
            },
        );
        let e = options.check_tenants().unwrap_err().to_string();
        assert!(e.contains("coordinator.tenants.zero.weight"), "{e}");
    }
}
