//! Which workers are alive and whether they can generate code, so a coordinator refuses a
//! job (503, naming why) while every worker is running without a model, instead of queueing
//! work nobody will take. A worker announces itself every few seconds with a time to live;
//! one that stops announcing drops out after its `ttl`.
//!
//! Keys: [`crate::keys::workers_able`], [`crate::keys::workers_unable`] (sorted sets: worker
//! id → expiry) and [`crate::keys::workers_unable_reason`].

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::{Error, RedisStore, keys};

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

/// A live worker as its last announcement described it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveWorker {
    pub id: String,
    /// It has a model.
    pub able: bool,
    /// What it said about itself (JSON of `proto::api::WorkerStatus`), when it did.
    pub status: Option<String>,
}

impl LiveWorker {
    /// `live` in the order [`Presence::workers`] answers: able ones first, then by id.
    fn in_order(mut live: Vec<LiveWorker>) -> Vec<LiveWorker> {
        live.sort_by(|a, b| b.able.cmp(&a.able).then_with(|| a.id.cmp(&b.id)));
        live
    }
}

#[async_trait]
pub trait Presence: Send + Sync + 'static {
    /// Worker `id` is alive for `ttl`; `unable` says why it cannot generate (`None`: it can);
    /// `status` is what it holds (JSON of `proto::api::WorkerStatus`), kept as long.
    async fn announce(
        &self,
        id: &str,
        unable: Option<&str>,
        status: Option<&str>,
        ttl: Duration,
    ) -> Result<(), Error>;

    /// Worker `id` is stopping.
    async fn withdraw(&self, id: &str) -> Result<(), Error>;

    async fn generators(&self) -> Result<Generators, Error>;

    /// The live workers, able ones first, then by id.
    async fn workers(&self) -> Result<Vec<LiveWorker>, Error>;
}

/// KEYS: able workers, unable workers, the reason. ARGV: worker id, ttl ms, why it cannot
/// generate ("": it can).
static ANNOUNCE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("lua/presence_announce.lua")));

/// Lua that defines `sweep(able, unable)`, the one way expired announcements go: put before
/// the scripts that read who is alive.
const SWEEP: &str = include_str!("lua/presence_sweep.lua");

/// KEYS: able workers, unable workers. Drops the expired, lists the rest.
static WORKERS: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(&format!(
        "{SWEEP}{}",
        include_str!("lua/presence_workers.lua")
    ))
});

/// KEYS: able workers, unable workers, the reason. Drops the expired, counts the rest.
static GENERATORS: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(&format!(
        "{SWEEP}{}",
        include_str!("lua/presence_generators.lua")
    ))
});

impl RedisStore {
    /// The able workers, the unable ones, and the reason, in the scripts' order.
    fn presence_keys(&self) -> [String; 3] {
        let p = self.prefix();
        [
            keys::workers_able(p),
            keys::workers_unable(p),
            keys::workers_unable_reason(p),
        ]
    }
}

#[async_trait]
impl Presence for RedisStore {
    async fn announce(
        &self,
        id: &str,
        unable: Option<&str>,
        status: Option<&str>,
        ttl: Duration,
    ) -> Result<(), Error> {
        let [able_key, unable_key, reason_key] = self.presence_keys();
        ANNOUNCE
            .key(able_key)
            .key(unable_key)
            .key(reason_key)
            .key(keys::worker_status(self.prefix(), id))
            .arg(id)
            .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1))
            .arg(unable.unwrap_or_default())
            .arg(status.unwrap_or_default())
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
            .del(keys::worker_status(self.prefix(), id))
            .query_async::<()>(&mut self.connection())
            .await
            .map_err(crate::redis::backend)
    }

    async fn generators(&self) -> Result<Generators, Error> {
        let [able_key, unable_key, reason_key] = self.presence_keys();
        let (able, unable, reason) = GENERATORS
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

    async fn workers(&self) -> Result<Vec<LiveWorker>, Error> {
        let [able_key, unable_key, _] = self.presence_keys();
        let (able, unable) = WORKERS
            .key(able_key)
            .key(unable_key)
            .invoke_async::<(Vec<String>, Vec<String>)>(&mut self.connection())
            .await
            .map_err(crate::redis::backend)?;
        let ids: Vec<(String, bool)> = able
            .into_iter()
            .map(|id| (id, true))
            .chain(unable.into_iter().map(|id| (id, false)))
            .collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for (id, _) in &ids {
            pipe.get(keys::worker_status(self.prefix(), id));
        }
        let statuses: Vec<Option<String>> = pipe
            .query_async(&mut self.connection())
            .await
            .map_err(crate::redis::backend)?;
        let live: Vec<LiveWorker> = ids
            .into_iter()
            .zip(statuses)
            .map(|((id, able), status)| LiveWorker { id, able, status })
            .collect();
        Ok(LiveWorker::in_order(live))
    }
}

/// In-process presence for unit tests.
#[derive(Debug, Clone, Default)]
pub struct MemoryPresence {
    workers: Arc<Mutex<HashMap<String, Announced>>>,
}

/// Until when a worker is alive, why it cannot generate, and what it said about itself.
type Announced = (Instant, Option<String>, Option<String>);

#[async_trait]
impl Presence for MemoryPresence {
    async fn announce(
        &self,
        id: &str,
        unable: Option<&str>,
        status: Option<&str>,
        ttl: Duration,
    ) -> Result<(), Error> {
        self.workers.lock().expect("poisoned").insert(
            id.to_owned(),
            (
                Instant::now() + ttl,
                unable.map(str::to_owned),
                status.map(str::to_owned),
            ),
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
        workers.retain(|_, (expires, _, _)| *expires > now);
        for (_, unable, _) in workers.values() {
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

    async fn workers(&self) -> Result<Vec<LiveWorker>, Error> {
        let now = Instant::now();
        let mut workers = self.workers.lock().expect("poisoned");
        workers.retain(|_, (expires, _, _)| *expires > now);
        let live: Vec<LiveWorker> = workers
            .iter()
            .map(|(id, (_, unable, status))| LiveWorker {
                id: id.clone(),
                able: unable.is_none(),
                status: status.clone(),
            })
            .collect();
        Ok(LiveWorker::in_order(live))
    }
}
