//! Idempotency keys: a retried `POST` with the same key and body gets the first answer back,
//! and the work is created once.
//!
//! The first request claims the key with its body's hash (one `SET NX`); when it succeeds its
//! answer is stored under the key, and a retry is answered with it. A claim whose request
//! failed is released, so the retry runs. Keys live as long as results (`store.result_ttl`).
//!
//! In Redis: a string per scope ([`crate::keys::idempotency`]), JSON `{"hash", "answer"}`
//! (`answer` absent while in progress).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use redis::AsyncCommands;
use serde::{Deserialize, Serialize};

use crate::{Error, RedisStore, keys};

/// A stored answer: what the first request was answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub body: String,
}

/// What a key holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claimed {
    /// The hash of the request that claimed it.
    pub hash: String,
    /// Its answer, once it has one.
    pub answer: Option<Answer>,
}

#[async_trait]
pub trait Idempotency: Send + Sync + 'static {
    /// Claims `scope` for a request with `hash`: `None` when it is this request's now, or what
    /// the earlier request left.
    async fn claim(&self, scope: &str, hash: &str, ttl: Duration)
    -> Result<Option<Claimed>, Error>;

    /// Stores the answer of the request that claimed `scope`.
    async fn answer(&self, scope: &str, claimed: &Claimed, ttl: Duration) -> Result<(), Error>;

    /// Gives the key up (its request failed; a retry may run).
    async fn release(&self, scope: &str) -> Result<(), Error>;
}

/// KEYS: the key. ARGV: the claim, ttl (ms). Returns nothing when claimed, else what is there.
static CLAIM: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("lua/idempotency_claim.lua")));

fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn encode(claimed: &Claimed) -> String {
    serde_json::to_string(claimed).expect("a claim serializes")
}

#[async_trait]
impl Idempotency for RedisStore {
    async fn claim(
        &self,
        scope: &str,
        hash: &str,
        ttl: Duration,
    ) -> Result<Option<Claimed>, Error> {
        let mine = encode(&Claimed {
            hash: hash.to_owned(),
            answer: None,
        });
        let earlier: Option<String> = CLAIM
            .key(keys::idempotency(self.prefix(), scope))
            .arg(mine)
            .arg(millis(ttl))
            .invoke_async(&mut self.connection())
            .await
            .map_err(crate::redis::backend)?;
        earlier
            .map(|text| {
                serde_json::from_str(&text).map_err(|e| Error::Corrupt {
                    key: keys::idempotency(self.prefix(), scope),
                    reason: e.to_string(),
                })
            })
            .transpose()
    }

    async fn answer(&self, scope: &str, claimed: &Claimed, ttl: Duration) -> Result<(), Error> {
        self.connection()
            .set_ex::<_, _, ()>(
                keys::idempotency(self.prefix(), scope),
                encode(claimed),
                ttl.as_secs().max(1),
            )
            .await
            .map_err(crate::redis::backend)
    }

    async fn release(&self, scope: &str) -> Result<(), Error> {
        self.connection()
            .del::<_, ()>(keys::idempotency(self.prefix(), scope))
            .await
            .map_err(crate::redis::backend)
    }
}

/// In-process keys for unit tests.
#[derive(Debug, Clone, Default)]
pub struct MemoryIdempotency {
    keys: Arc<Mutex<HashMap<String, (Instant, Claimed)>>>,
}

#[async_trait]
impl Idempotency for MemoryIdempotency {
    async fn claim(
        &self,
        scope: &str,
        hash: &str,
        ttl: Duration,
    ) -> Result<Option<Claimed>, Error> {
        let mut keys = self.keys.lock().expect("poisoned");
        let now = Instant::now();
        keys.retain(|_, (expires, _)| *expires > now);
        if let Some((_, claimed)) = keys.get(scope) {
            return Ok(Some(claimed.clone()));
        }
        let claimed = Claimed {
            hash: hash.to_owned(),
            answer: None,
        };
        keys.insert(scope.to_owned(), (now + ttl, claimed));
        Ok(None)
    }

    async fn answer(&self, scope: &str, claimed: &Claimed, ttl: Duration) -> Result<(), Error> {
        self.keys
            .lock()
            .expect("poisoned")
            .insert(scope.to_owned(), (Instant::now() + ttl, claimed.clone()));
        Ok(())
    }

    async fn release(&self, scope: &str) -> Result<(), Error> {
        self.keys.lock().expect("poisoned").remove(scope);
        Ok(())
    }
}
