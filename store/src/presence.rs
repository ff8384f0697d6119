//! Which workers are alive and whether they can generate code, so a coordinator refuses a
//! job (503, naming why) while every worker is running without a model, instead of queueing
//! work nobody will take. A worker announces itself every few seconds with a time to live;
//! one that stops announcing drops out after its `ttl`.
//!
//! | key | value |
//! | --- | --- |
//! | `{prefix}:workers:able` | sorted set: worker id → expiry (ms) of workers with a model |
//! | `{prefix}:workers:unable` | sorted set: the same for workers without one |
//! | `{prefix}:workers:unable:reason` | why the last worker without a model has none |

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::{Error, RedisStore};

/// How many live workers can generate, how many cannot, and why not.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Generators {
    pub able: u64,
    pub unable: u64,
    /// Why a worker cannot (the most recent announcement's reason).
    pub reason: Option<String>,
}

impl Generators {
    /// `Some(why)` when workers are alive and none of them can generate. With no worker at
    /// all, jobs are accepted: they wait in the queue (an autoscaler may be starting workers
    /// because of it).
    pub fn refusal(&self) -> Option<String> {
        (self.able == 0 && self.unable > 0).then(|| {
            format!(
                "no worker can generate code: {} worker{} running without a model ({})",
                self.unable,
                if self.unable == 1 { " is" } else { "s are" },
                self.reason.as_deref().unwrap_or("model not configured")
            )
        })
    }
}

#[async_trait]
pub trait Presence: Send + Sync + 'static {
    /// Worker `id` is alive for `ttl`; `unable` says why it cannot generate (`None`: it can).
    async fn announce(&self, id: &str, unable: Option<&str>, ttl: Duration) -> Result<(), Error>;

    /// Worker `id` is stopping.
    async fn withdraw(&self, id: &str) -> Result<(), Error>;

    async fn generators(&self) -> Result<Generators, Error>;
}

const ANNOUNCE: &str = r"
local t = redis.call('TIME')
local expires = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2]))
if ARGV[3] == '' then
  redis.call('ZADD', KEYS[1], expires, ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
else
  redis.call('ZADD', KEYS[2], expires, ARGV[1])
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[2])
end
return 1
";

const GENERATORS: &str = r"
local t = redis.call('TIME')
local now = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
return {redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2]), redis.call('GET', KEYS[3])}
";

impl RedisStore {
    fn presence_keys(&self) -> [String; 3] {
        let p = self.prefix();
        [
            format!("{p}:workers:able"),
            format!("{p}:workers:unable"),
            format!("{p}:workers:unable:reason"),
        ]
    }
}

#[async_trait]
impl Presence for RedisStore {
    async fn announce(&self, id: &str, unable: Option<&str>, ttl: Duration) -> Result<(), Error> {
        let [able_key, unable_key, reason_key] = self.presence_keys();
        redis::Script::new(ANNOUNCE)
            .key(able_key)
            .key(unable_key)
            .key(reason_key)
            .arg(id)
            .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1))
            .arg(unable.unwrap_or_default())
            .invoke_async::<i64>(&mut self.connection())
            .await
            .map(drop)
            .map_err(crate::redis::backend)
    }

    async fn withdraw(&self, id: &str) -> Result<(), Error> {
        let [able_key, unable_key, _] = self.presence_keys();
        redis::pipe()
            .zrem(able_key, id)
            .zrem(unable_key, id)
            .query_async::<()>(&mut self.connection())
            .await
            .map_err(crate::redis::backend)
    }

    async fn generators(&self) -> Result<Generators, Error> {
        let [able_key, unable_key, reason_key] = self.presence_keys();
        let (able, unable, reason) = redis::Script::new(GENERATORS)
            .key(able_key)
            .key(unable_key)
            .key(reason_key)
            .invoke_async::<(u64, u64, Option<String>)>(&mut self.connection())
            .await
            .map_err(crate::redis::backend)?;
        Ok(Generators {
            able,
            unable,
            reason,
        })
    }
}

/// In-process presence for unit tests.
#[derive(Debug, Clone, Default)]
pub struct MemoryPresence {
    workers: Arc<Mutex<HashMap<String, Announced>>>,
}

/// Until when a worker is alive, and why it cannot generate.
type Announced = (Instant, Option<String>);

#[async_trait]
impl Presence for MemoryPresence {
    async fn announce(&self, id: &str, unable: Option<&str>, ttl: Duration) -> Result<(), Error> {
        self.workers.lock().expect("poisoned").insert(
            id.to_owned(),
            (Instant::now() + ttl, unable.map(str::to_owned)),
        );
        Ok(())
    }

    async fn withdraw(&self, id: &str) -> Result<(), Error> {
        self.workers.lock().expect("poisoned").remove(id);
        Ok(())
    }

    async fn generators(&self) -> Result<Generators, Error> {
        let now = Instant::now();
        let mut generators = Generators::default();
        let mut workers = self.workers.lock().expect("poisoned");
        workers.retain(|_, (expires, _)| *expires > now);
        for (_, unable) in workers.values() {
            match unable {
                None => generators.able += 1,
                Some(reason) => {
                    generators.unable += 1;
                    generators.reason = Some(reason.clone());
                }
            }
        }
        Ok(generators)
    }
}
