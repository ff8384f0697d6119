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
    pub requests_per_second: Option<u32>,
}

/// A tenant's settings with the defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantLimits {
    pub weight: u32,
    /// 0: no limit.
    pub requests_per_second: u32,
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
        let pick = |f: fn(&TenantOptions) -> Option<u32>, fallback: u32| {
            own.and_then(f)
                .or_else(|| f(&self.tenant_defaults))
                .unwrap_or(fallback)
        };
        TenantLimits {
            weight: pick(|o| o.weight, 1),
            requests_per_second: pick(|o| o.requests_per_second, 0),
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
            let valid = !tenant.is_empty()
                && tenant.len() <= 64
                && tenant
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !valid {
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

/// Registers `weights` now and every [`REGISTER_PERIOD`] until `cancel`.
pub(crate) async fn register(
    register: Arc<dyn Tenants>,
    weights: BTreeMap<String, u32>,
    cancel: CancellationToken,
) {
    if weights.is_empty() {
        return;
    }
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
