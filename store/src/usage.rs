//! What each tenant's finished work cost, per hour.
//!
//! | key | value |
//! | --- | --- |
//! | `{p}:usage:{tenant}:{hour}` | hash: field of `UsageTotals` → total; `hour` is the hour's start in ms since the epoch; the tenant of an open API is `#` |
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

/// The hour buckets are this long.
pub const BUCKET_MS: u64 = 3_600_000;

/// How long hourly usage is kept by default.
/// A year as humantime counts it (365.25 days), so the setting prints as `1year`.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(31_557_600);

pub(crate) fn bucket_key(prefix: &str, tenant: Option<&str>, at_ms: u64) -> String {
    let hour = at_ms - at_ms % BUCKET_MS;
    format!("{prefix}:usage:{}:{hour}", tenant.unwrap_or("#"))
}

/// `(field, value)` arguments for a script's `HINCRBY`s: the non-zero fields of `charge`.
pub(crate) fn increments(charge: &UsageTotals) -> Vec<(&'static str, u64)> {
    charge
        .fields()
        .into_iter()
        .filter(|(_, value)| *value > 0)
        .collect()
}

/// Lua that charges the hash `KEYS[usage]` with `(field, value)` pairs from `ARGV[first]` on
/// and keeps it `ARGV[ttl]` seconds; spliced into the scripts that end work.
pub(crate) const CHARGE: &str = r#"
local function charge(key, ttl, first)
  for i = first, #ARGV, 2 do
    redis.call('HINCRBY', key, ARGV[i], ARGV[i + 1])
  end
  redis.call('EXPIRE', key, ttl)
end
"#;

#[async_trait]
pub trait Usage: Send + Sync + 'static {
    /// `tenant`'s totals over the hours that overlap `[from_ms, to_ms)`.
    async fn usage(
        &self,
        tenant: Option<&str>,
        from_ms: u64,
        to_ms: u64,
    ) -> Result<UsageTotals, Error>;
}

/// The hours overlapping `[from_ms, to_ms)`, each as its start.
pub fn hours(from_ms: u64, to_ms: u64) -> impl Iterator<Item = u64> {
    let first = from_ms - from_ms % BUCKET_MS;
    (first..to_ms).step_by(usize::try_from(BUCKET_MS).unwrap_or(usize::MAX))
}

#[async_trait]
impl Usage for crate::RedisStore {
    async fn usage(
        &self,
        tenant: Option<&str>,
        from_ms: u64,
        to_ms: u64,
    ) -> Result<UsageTotals, Error> {
        let keys: Vec<String> = hours(from_ms, to_ms)
            .map(|hour| bucket_key(self.prefix(), tenant, hour))
            .collect();
        let mut totals = UsageTotals::default();
        // Pipelined in chunks: a year is 8766 hashes.
        for chunk in keys.chunks(500) {
            let mut pipe = redis::pipe();
            for key in chunk {
                pipe.hgetall(key);
            }
            let hashes: Vec<Vec<(String, u64)>> = pipe
                .query_async(&mut self.connection())
                .await
                .map_err(crate::redis::backend)?;
            for (name, value) in hashes.into_iter().flatten() {
                totals.add(&name, value);
            }
        }
        Ok(totals)
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
        assert_eq!(
            bucket_key("p", Some("a"), 2 * h + 7),
            format!("p:usage:a:{}", 2 * h)
        );
        assert_eq!(bucket_key("p", None, 5), "p:usage:#:0");
    }
}
