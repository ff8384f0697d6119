//! The solution cache (whole job results) and the function-level cache (verified functions).
//!
//! Keys: under `{p}:cache:` ([`crate::keys::cache_solution`], [`crate::keys::cache_function`],
//! [`crate::keys::cache_stats`]).
//!
//! Cache keys are sha256 hex digests computed by the callers over everything that determines the
//! answer (see `proto::job::solution_cache_key` and `function_cache_key`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use proto::job::{FunctionOutcome, JobResult};
use redis::AsyncCommands;
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::keys;

/// What `GET /v1/cache/stats` shows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheStats {
    pub solutions: u64,
    pub functions: u64,
    /// `solution_hits`, `solution_misses`, `function_hits`, `function_misses`.
    pub counters: BTreeMap<String, u64>,
}

#[async_trait]
pub trait CacheStore: Send + Sync + 'static {
    async fn cached_solution(&self, key: &str) -> Result<Option<JobResult>, Error>;
    async fn put_cached_solution(&self, key: &str, result: &JobResult) -> Result<(), Error>;
    async fn cached_function(&self, key: &str) -> Result<Option<FunctionOutcome>, Error>;
    async fn put_cached_function(&self, key: &str, outcome: &FunctionOutcome) -> Result<(), Error>;
    /// Counts a lookup: `kind` is `solution` or `function`.
    async fn count_lookup(&self, kind: &str, hit: bool) -> Result<(), Error>;
    /// [`CacheStore::cached_function`] counted as a `function` lookup (Redis: one script).
    async fn look_up_function(&self, key: &str) -> Result<Option<FunctionOutcome>, Error> {
        let found = self.cached_function(key).await?;
        self.count_lookup("function", found.is_some()).await?;
        Ok(found)
    }
    async fn cache_stats(&self) -> Result<CacheStats, Error>;
    /// Removes every cache entry and counter; returns how many keys went.
    async fn clear_cache(&self) -> Result<u64, Error>;
}

fn counter(kind: &str, hit: bool) -> String {
    format!("{kind}_{}", if hit { "hits" } else { "misses" })
}

impl crate::RedisStore {
    async fn scan(&self, pattern: &str) -> Result<Vec<String>, Error> {
        let mut connection = self.connection();
        let mut cursor: u64 = 0;
        let mut keys = Vec::new();
        loop {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(500)
                .query_async(&mut connection)
                .await
                .map_err(crate::redis::backend)?;
            keys.extend(batch);
            if next == 0 {
                return Ok(keys);
            }
            cursor = next;
        }
    }
}

#[async_trait]
impl CacheStore for crate::RedisStore {
    async fn cached_solution(&self, key: &str) -> Result<Option<JobResult>, Error> {
        self.get_msgpack(&keys::cache_solution(self.prefix(), key))
            .await
    }

    async fn put_cached_solution(&self, key: &str, result: &JobResult) -> Result<(), Error> {
        self.set_msgpack(&keys::cache_solution(self.prefix(), key), result)
            .await
    }

    async fn cached_function(&self, key: &str) -> Result<Option<FunctionOutcome>, Error> {
        self.get_msgpack(&keys::cache_function(self.prefix(), key))
            .await
    }

    async fn put_cached_function(&self, key: &str, outcome: &FunctionOutcome) -> Result<(), Error> {
        self.set_msgpack(&keys::cache_function(self.prefix(), key), outcome)
            .await
    }

    async fn look_up_function(&self, key: &str) -> Result<Option<FunctionOutcome>, Error> {
        /// KEYS: the entry, the counters. ARGV: the hit counter, the miss counter.
        static LOOK_UP: std::sync::LazyLock<redis::Script> =
            std::sync::LazyLock::new(|| redis::Script::new(include_str!("lua/cache_look_up.lua")));
        let key = keys::cache_function(self.prefix(), key);
        let bytes: Option<Vec<u8>> = LOOK_UP
            .key(&key)
            .key(keys::cache_stats(self.prefix()))
            .arg(counter("function", true))
            .arg(counter("function", false))
            .invoke_async(&mut self.connection())
            .await
            .map_err(crate::redis::backend)?;
        bytes
            .map(|b| {
                proto::codec::decode(&b).map_err(|e| Error::Corrupt {
                    key,
                    reason: e.to_string(),
                })
            })
            .transpose()
    }

    async fn count_lookup(&self, kind: &str, hit: bool) -> Result<(), Error> {
        self.connection()
            .hincr::<_, _, _, ()>(keys::cache_stats(self.prefix()), counter(kind, hit), 1)
            .await
            .map_err(crate::redis::backend)
    }

    async fn cache_stats(&self) -> Result<CacheStats, Error> {
        let counters: HashMap<String, u64> = self
            .connection()
            .hgetall(keys::cache_stats(self.prefix()))
            .await
            .map_err(crate::redis::backend)?;
        let solutions = self.scan(&keys::cache_solution(self.prefix(), "*")).await?;
        let functions = self.scan(&keys::cache_function(self.prefix(), "*")).await?;
        Ok(CacheStats {
            solutions: solutions.len() as u64,
            functions: functions.len() as u64,
            counters: counters.into_iter().collect(),
        })
    }

    async fn clear_cache(&self) -> Result<u64, Error> {
        let found = self.scan(&keys::cache_pattern(self.prefix())).await?;
        if found.is_empty() {
            return Ok(0);
        }
        let removed: u64 = self
            .connection()
            .del(&found)
            .await
            .map_err(crate::redis::backend)?;
        Ok(removed)
    }
}

/// In-memory caches for unit tests.
#[derive(Debug, Clone, Default)]
pub struct MemoryCache {
    state: Arc<Mutex<MemoryCacheState>>,
}

#[derive(Debug, Default)]
struct MemoryCacheState {
    solutions: HashMap<String, JobResult>,
    functions: HashMap<String, FunctionOutcome>,
    counters: BTreeMap<String, u64>,
}

impl MemoryCache {
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl CacheStore for MemoryCache {
    async fn cached_solution(&self, key: &str) -> Result<Option<JobResult>, Error> {
        Ok(self
            .state
            .lock()
            .expect("poisoned")
            .solutions
            .get(key)
            .cloned())
    }
    async fn put_cached_solution(&self, key: &str, result: &JobResult) -> Result<(), Error> {
        self.state
            .lock()
            .expect("poisoned")
            .solutions
            .insert(key.to_owned(), result.clone());
        Ok(())
    }
    async fn cached_function(&self, key: &str) -> Result<Option<FunctionOutcome>, Error> {
        Ok(self
            .state
            .lock()
            .expect("poisoned")
            .functions
            .get(key)
            .cloned())
    }
    async fn put_cached_function(&self, key: &str, outcome: &FunctionOutcome) -> Result<(), Error> {
        self.state
            .lock()
            .expect("poisoned")
            .functions
            .insert(key.to_owned(), outcome.clone());
        Ok(())
    }
    async fn count_lookup(&self, kind: &str, hit: bool) -> Result<(), Error> {
        *self
            .state
            .lock()
            .expect("poisoned")
            .counters
            .entry(counter(kind, hit))
            .or_default() += 1;
        Ok(())
    }
    async fn cache_stats(&self) -> Result<CacheStats, Error> {
        let s = self.state.lock().expect("poisoned");
        Ok(CacheStats {
            solutions: s.solutions.len() as u64,
            functions: s.functions.len() as u64,
            counters: s.counters.clone(),
        })
    }
    async fn clear_cache(&self) -> Result<u64, Error> {
        let mut s = self.state.lock().expect("poisoned");
        let n = (s.solutions.len() + s.functions.len()) as u64;
        *s = MemoryCacheState::default();
        Ok(n)
    }
}
