//! What each tenant's finished work cost, per hour.
//!
//! One hash per tenant and hour, field of `UsageTotals` → total ([`crate::keys::usage`]).
//!
//! A job is charged in the script that finishes it, an execution in the script that stores its
//! verdict, each only when that script is the one that ended it (`SET NX` succeeded). So a
//! redelivered task, a duplicate run or a cancel racing the job's own end charges once, and
//! the totals are exactly the sum of the results' own figures. Work that ended is what is
//! charged: model calls a cancelled job had in flight, or a task's attempt that an outage cut
//! short and its retry redid, are not in any result and so not in the totals.

use std::time::Duration;

use async_trait::async_trait;
use proto::api::UsageTotals;

use crate::Error;

/// The hour buckets are this long (their length is part of their keys' names: `keys`).
pub const BUCKET_MS: u64 = crate::keys::USAGE_BUCKET_MS;

/// How long hourly usage is kept by default.
/// A year as humantime counts it (365.25 days), so the setting prints as `1year`.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(31_557_600);

/// `(field, value)` arguments for a script's `HINCRBY`s: the non-zero fields of `charge`.
pub(crate) fn increments(charge: &UsageTotals) -> Vec<(&'static str, u64)> {
    charge
        .fields()
        .into_iter()
        .filter(|(_, value)| *value > 0)
        .collect()
}

/// Lua that defines `charge(key, ttl, first)`: charges the hash `key` with the `(field, value)`
/// pairs from `ARGV[first]` on and keeps it `ttl` seconds; put before the scripts that end
/// work ([`charging`]).
const CHARGE: &str = include_str!("lua/usage_charge.lua");

/// A script that ends work and charges it: `script` after [`CHARGE`].
pub(crate) fn charging(script: &str) -> redis::Script {
    redis::Script::new(&format!("{CHARGE}{script}"))
}

#[async_trait]
pub trait Usage: Send + Sync + 'static {
    /// `tenant`'s totals per hour over the hours that overlap `[from_ms, to_ms)`, each with
    /// its start, in order; hours that charged nothing are left out.
    async fn hourly(
        &self,
        tenant: Option<&str>,
        from_ms: u64,
        to_ms: u64,
    ) -> Result<Vec<(u64, UsageTotals)>, Error>;

    /// `tenant`'s totals over the hours that overlap `[from_ms, to_ms)`.
    async fn usage(
        &self,
        tenant: Option<&str>,
        from_ms: u64,
        to_ms: u64,
    ) -> Result<UsageTotals, Error> {
        Ok(UsageTotals::sum_of(
            &self.hourly(tenant, from_ms, to_ms).await?,
        ))
    }
}

/// The hours overlapping `[from_ms, to_ms)`, each as its start.
pub fn hours(from_ms: u64, to_ms: u64) -> impl Iterator<Item = u64> {
    let first = from_ms - from_ms % BUCKET_MS;
    (first..to_ms).step_by(usize::try_from(BUCKET_MS).unwrap_or(usize::MAX))
}

#[async_trait]
impl Usage for crate::RedisStore {
    async fn hourly(
        &self,
        tenant: Option<&str>,
        from_ms: u64,
        to_ms: u64,
    ) -> Result<Vec<(u64, UsageTotals)>, Error> {
        let starts: Vec<u64> = hours(from_ms, to_ms).collect();
        let mut series = Vec::new();
        // Pipelined in chunks: a year is 8766 hashes.
        for chunk in starts.chunks(500) {
            let mut pipe = redis::pipe();
            for hour in chunk {
                pipe.hgetall(crate::keys::usage(self.prefix(), tenant, *hour));
            }
            let hashes: Vec<Vec<(String, u64)>> = pipe
                .query_async(&mut self.connection())
                .await
                .map_err(crate::redis::backend)?;
            for (hour, fields) in chunk.iter().zip(hashes) {
                if fields.is_empty() {
                    continue;
                }
                let mut totals = UsageTotals::default();
                for (name, value) in fields {
                    totals.add(&name, value);
                }
                series.push((*hour, totals));
            }
        }
        Ok(series)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hours_cover_the_window_and_buckets_start_on_the_hour() {
        let h = BUCKET_MS;
        assert_eq!(hours(h + 5, 3 * h).collect::<Vec<_>>(), vec![h, 2 * h]);
        assert_eq!(hours(h, h + 1).collect::<Vec<_>>(), vec![h]);
        assert_eq!(hours(2 * h, 2 * h).count(), 0);
    }
}
