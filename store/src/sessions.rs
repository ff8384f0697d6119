//! Sessions as the cluster keeps them: each one's record (who owns it, which worker holds
//! it, its limits and use), each tenant's live ones (what the quota counts), the deadlines
//! any coordinator ends them at, the workers that host sessions, and the secret of the
//! workers' session API. Redis only: a process without Redis offers no sessions.
//!
//! Keys: [`crate::keys::session`], [`crate::keys::sessions_live`],
//! [`crate::keys::sessions_all`], [`crate::keys::sessions_deadlines`],
//! [`crate::keys::session_hosts`], [`crate::keys::session_host`],
//! [`crate::keys::sessions_secret`], [`crate::keys::session_checkpoint`].

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use proto::api::sessions::{Restore, SessionEndedBy, SessionState, Unrestorable};
use proto::session::{SessionEnd, SessionHost, SessionRecord};
use redis::AsyncCommands;

use crate::redis::backend;
use crate::{Error, RedisStore, keys};

/// Whether a session was made, or how many live sessions the tenant already has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    Yes,
    /// The tenant's quota of live sessions is reached.
    OverQuota {
        live: u64,
    },
}

/// A checkpoint to keep: the parts left out are unchanged since the last one kept.
#[derive(Debug, Clone, Copy)]
pub struct NewCheckpoint<'a> {
    /// The cells the session had run when it was taken.
    pub cells: u64,
    pub state: Option<&'a [u8]>,
    pub files: Option<&'a [u8]>,
    pub unrestorable: &'a [Unrestorable],
    /// Its whole size (state and files, as kept).
    pub bytes: u64,
    /// The calls of the last cells it holds (`RunCell::call`), oldest first.
    pub calls: &'a [String],
}

/// What keeping a checkpoint did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    Yes,
    /// The session is not live on this worker any more (it ended, or was restored elsewhere).
    NotHere,
    /// A part left out is not kept (an earlier save failed): send every part.
    Incomplete,
}

/// A session's last checkpoint, as kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checkpoint {
    None,
    /// The last one could not be taken: why.
    Unavailable(String),
    Kept(KeptCheckpoint),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptCheckpoint {
    pub cells: u64,
    pub state: Vec<u8>,
    pub files: Option<Vec<u8>>,
    pub unrestorable: Vec<Unrestorable>,
    pub bytes: u64,
    pub taken_ms: u64,
    /// The calls of its last cells, oldest first.
    pub calls: Vec<String>,
}

#[async_trait]
pub trait Sessions: Send + Sync + 'static {
    /// Records a new live session unless its tenant has `quota` live ones (0: no quota).
    async fn create_session(&self, record: &SessionRecord, quota: u64) -> Result<Created, Error>;

    async fn session(&self, id: &str) -> Result<Option<SessionRecord>, Error>;

    /// A call reached the live session `id` at `now_ms` (a cell when `cell`), and may run
    /// until `busy_until_ms` (0: it is over): the session does not idle out before that.
    /// False when it is not live.
    async fn touch_session(
        &self,
        id: &str,
        now_ms: u64,
        cell: bool,
        busy_until_ms: u64,
    ) -> Result<bool, Error>;

    /// Ends the live session `record.id` as `end` says (its state, reason and cause); false
    /// when it was not live (the first ending wins). Both processes end one through
    /// `flow::SessionEnds`, which counts it.
    async fn end_session(&self, record: &SessionRecord, end: &SessionEnd) -> Result<bool, Error>;

    /// Ids of live sessions past their deadline at `now_ms`, at most `limit`.
    async fn due_sessions(&self, now_ms: u64, limit: usize) -> Result<Vec<String>, Error>;

    /// The tenant's sessions, newest first, at most `limit`.
    async fn list_sessions(
        &self,
        tenant: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SessionRecord>, Error>;

    /// Worker `host.id` hosts sessions for `ttl` more.
    async fn announce_host(&self, host: &SessionHost, ttl: Duration) -> Result<(), Error>;

    /// Worker `id` stops hosting sessions.
    async fn withdraw_host(&self, id: &str) -> Result<(), Error>;

    /// The live session hosts.
    async fn hosts(&self) -> Result<Vec<SessionHost>, Error>;

    /// The bearer token of the workers' session API (made by the first caller).
    async fn secret(&self) -> Result<String, Error>;

    /// Keeps the checkpoint `host` took of session `id`, which it holds.
    async fn save_checkpoint(
        &self,
        id: &str,
        host: &str,
        checkpoint: NewCheckpoint<'_>,
    ) -> Result<Kept, Error>;

    /// Session `id`'s checkpoint could not be taken (`why`): the one kept before is dropped
    /// (a restore must not go back past cells the caller saw).
    async fn checkpoint_unavailable(&self, id: &str, host: &str, why: &str) -> Result<Kept, Error>;

    async fn checkpoint(&self, id: &str) -> Result<Checkpoint, Error>;

    /// Whether session `id` has a checkpoint to restore from, without reading it: the cells
    /// it is the state after, or why there is none.
    async fn checkpoint_kept(&self, id: &str) -> Result<Result<u64, String>, Error>;

    /// Worker `host` (at `url`) restored session `id`, whose record named `lost_host`: the
    /// session is its now. False when the record names another worker (the first restore
    /// wins) or the session is not live.
    async fn rehost_session(
        &self,
        id: &str,
        lost_host: &str,
        host: &str,
        url: &str,
        restore: &Restore,
    ) -> Result<bool, Error>;
}

static CREATE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("lua/sessions_create.lua")));
static TOUCH: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("lua/sessions_touch.lua")));
static END: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("lua/sessions_end.lua")));
static ANNOUNCE_HOST: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("lua/sessions_announce_host.lua")));
static HOSTS: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("lua/sessions_hosts.lua")));
static CHECKPOINT: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("lua/sessions_checkpoint.lua")));
static REHOST: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("lua/sessions_rehost.lua")));

/// A record's fields, as the hash holds them.
fn fields(record: &SessionRecord) -> Vec<(&'static str, String)> {
    let mut fields = vec![
        ("id", record.id.clone()),
        ("language", record.language.as_str().to_owned()),
        ("memory_mb", record.memory_mb.to_string()),
        ("idle_timeout_s", record.idle_timeout_s.to_string()),
        ("created_ms", record.created_ms.to_string()),
        ("expires_ms", record.expires_ms.to_string()),
        ("last_used_ms", record.last_used_ms.to_string()),
        ("cells", record.cells.to_string()),
        ("state", record.state.as_str().to_owned()),
        ("host", record.host.clone()),
        ("host_url", record.host_url.clone()),
    ];
    if let Some(tenant) = &record.tenant {
        fields.push(("tenant", tenant.clone()));
    }
    if let Some(reason) = &record.ended_reason {
        fields.push(("ended_reason", reason.clone()));
    }
    if let Some(by) = record.ended_by {
        fields.push(("ended_by", by.as_str().to_owned()));
    }
    if !record.packages.is_empty() {
        fields.push((
            "packages",
            serde_json::to_string(&record.packages).expect("names serialize"),
        ));
    }
    if record.restores > 0 {
        fields.push(("restores", record.restores.to_string()));
    }
    if let Some(restore) = &record.last_restore {
        fields.push((
            "last_restore",
            serde_json::to_string(restore).expect("a restore serializes"),
        ));
    }
    fields
}

/// A record from its hash; `None` for an empty hash (no such session).
fn record(key: &str, mut hash: HashMap<String, String>) -> Result<Option<SessionRecord>, Error> {
    if hash.is_empty() {
        return Ok(None);
    }
    let corrupt = |reason: String| Error::Corrupt {
        key: key.to_owned(),
        reason,
    };
    let mut take = |name: &str| {
        hash.remove(name)
            .ok_or_else(|| corrupt(format!("no field {name}")))
    };
    let number = |text: String, name: &str| {
        text.parse::<u64>()
            .map_err(|e| corrupt(format!("{name}: {e}")))
    };
    let language = take("language")?;
    let state = take("state")?;
    let busy = take("busy_until_ms").ok();
    let restores = take("restores").ok();
    let packages = take("packages")
        .ok()
        .map(|json| serde_json::from_str(&json).map_err(|e| corrupt(format!("packages: {e}"))))
        .transpose()?
        .unwrap_or_default();
    let last_restore = take("last_restore")
        .ok()
        .map(|json| serde_json::from_str(&json).map_err(|e| corrupt(format!("last_restore: {e}"))))
        .transpose()?;
    Ok(Some(SessionRecord {
        id: take("id")?,
        language: language
            .parse()
            .map_err(|e| corrupt(format!("language: {e}")))?,
        memory_mb: number(take("memory_mb")?, "memory_mb")?,
        idle_timeout_s: number(take("idle_timeout_s")?, "idle_timeout_s")?,
        packages,
        created_ms: number(take("created_ms")?, "created_ms")?,
        expires_ms: number(take("expires_ms")?, "expires_ms")?,
        last_used_ms: number(take("last_used_ms")?, "last_used_ms")?,
        busy_until_ms: busy
            .map(|b| number(b, "busy_until_ms"))
            .transpose()?
            .unwrap_or(0),
        cells: number(take("cells")?, "cells")?,
        state: SessionState::parse(&state).ok_or_else(|| corrupt(format!("state {state}")))?,
        host: take("host")?,
        host_url: take("host_url")?,
        restores: restores
            .map(|r| number(r, "restores"))
            .transpose()?
            .unwrap_or(0),
        last_restore,
        tenant: hash.remove("tenant"),
        ended_reason: hash.remove("ended_reason"),
        // A cause this build does not know reads as none: its reason still says it.
        ended_by: hash
            .remove("ended_by")
            .and_then(|by| SessionEndedBy::parse(&by)),
    }))
}

#[async_trait]
impl Sessions for RedisStore {
    async fn create_session(&self, record: &SessionRecord, quota: u64) -> Result<Created, Error> {
        let p = self.prefix();
        let tenant = record.tenant.as_deref();
        let mut call = CREATE.prepare_invoke();
        call.key(keys::session(p, &record.id))
            .key(keys::sessions_live(p, tenant))
            .key(keys::sessions_all(p, tenant))
            .key(keys::sessions_deadlines(p))
            .arg(quota)
            .arg(&record.id)
            .arg(record.created_ms)
            .arg(record.deadline_ms());
        for (name, value) in fields(record) {
            call.arg(name).arg(value);
        }
        let (made, live): (u64, u64) = call
            .invoke_async(&mut self.connection())
            .await
            .map_err(backend)?;
        Ok(if made == 1 {
            Created::Yes
        } else {
            Created::OverQuota { live }
        })
    }

    async fn session(&self, id: &str) -> Result<Option<SessionRecord>, Error> {
        let key = keys::session(self.prefix(), id);
        let hash: HashMap<String, String> =
            self.connection().hgetall(&key).await.map_err(backend)?;
        record(&key, hash)
    }

    async fn touch_session(
        &self,
        id: &str,
        now_ms: u64,
        cell: bool,
        busy_until_ms: u64,
    ) -> Result<bool, Error> {
        let p = self.prefix();
        let touched: u64 = TOUCH
            .key(keys::session(p, id))
            .key(keys::sessions_deadlines(p))
            .arg(now_ms)
            .arg(u64::from(cell))
            .arg(id)
            .arg(busy_until_ms)
            .invoke_async(&mut self.connection())
            .await
            .map_err(backend)?;
        Ok(touched == 1)
    }

    async fn end_session(&self, record: &SessionRecord, end: &SessionEnd) -> Result<bool, Error> {
        let p = self.prefix();
        let ended: u64 = END
            .key(keys::session(p, &record.id))
            .key(keys::sessions_live(p, record.tenant.as_deref()))
            .key(keys::sessions_deadlines(p))
            .key(keys::session_checkpoint(p, &record.id))
            .arg(&record.id)
            .arg(end.state().as_str())
            .arg(end.reason())
            .arg(end.by().as_str())
            .arg(
                u64::try_from(self.options().result_ttl.as_millis())
                    .unwrap_or(u64::MAX)
                    .max(1),
            )
            .invoke_async(&mut self.connection())
            .await
            .map_err(backend)?;
        Ok(ended == 1)
    }

    async fn due_sessions(&self, now_ms: u64, limit: usize) -> Result<Vec<String>, Error> {
        self.connection()
            .zrangebyscore_limit(
                keys::sessions_deadlines(self.prefix()),
                "-inf",
                now_ms,
                0,
                isize::try_from(limit).unwrap_or(isize::MAX),
            )
            .await
            .map_err(backend)
    }

    async fn list_sessions(
        &self,
        tenant: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SessionRecord>, Error> {
        let all = keys::sessions_all(self.prefix(), tenant);
        let mut connection = self.connection();
        let ids: Vec<String> = connection
            .zrevrange(&all, 0, isize::try_from(limit).unwrap_or(isize::MAX) - 1)
            .await
            .map_err(backend)?;
        let mut sessions = Vec::with_capacity(ids.len());
        for id in ids {
            match self.session(&id).await? {
                Some(record) => sessions.push(record),
                // Its record expired after its end: forget it.
                None => connection
                    .zrem::<_, _, ()>(&all, &id)
                    .await
                    .map_err(backend)?,
            }
        }
        Ok(sessions)
    }

    async fn announce_host(&self, host: &SessionHost, ttl: Duration) -> Result<(), Error> {
        let p = self.prefix();
        let record = serde_json::to_string(host).expect("a host record serializes");
        ANNOUNCE_HOST
            .key(keys::session_hosts(p))
            .key(keys::session_host(p, &host.id))
            .arg(&host.id)
            .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1))
            .arg(record)
            .invoke_async::<i64>(&mut self.connection())
            .await
            .map(drop)
            .map_err(backend)
    }

    async fn withdraw_host(&self, id: &str) -> Result<(), Error> {
        let p = self.prefix();
        redis::pipe()
            .zrem(keys::session_hosts(p), id)
            .del(keys::session_host(p, id))
            .query_async::<()>(&mut self.connection())
            .await
            .map_err(backend)
    }

    async fn hosts(&self) -> Result<Vec<SessionHost>, Error> {
        let p = self.prefix();
        let records: Vec<String> = HOSTS
            .key(keys::session_hosts(p))
            .arg(keys::session_host_prefix(p))
            .invoke_async(&mut self.connection())
            .await
            .map_err(backend)?;
        Ok(records
            .iter()
            .filter_map(|r| serde_json::from_str(r).ok())
            .collect())
    }

    async fn secret(&self) -> Result<String, Error> {
        let key = keys::sessions_secret(self.prefix());
        let mut connection = self.connection();
        let made =
            uuid::Uuid::new_v4().simple().to_string() + &uuid::Uuid::new_v4().simple().to_string();
        let _: bool = connection.set_nx(&key, &made).await.map_err(backend)?;
        connection.get(&key).await.map_err(backend)
    }

    async fn save_checkpoint(
        &self,
        id: &str,
        host: &str,
        checkpoint: NewCheckpoint<'_>,
    ) -> Result<Kept, Error> {
        let p = self.prefix();
        let flag = |part: Option<&[u8]>| if part.is_some() { "1" } else { "0" };
        let kept: i64 = CHECKPOINT
            .key(keys::session(p, id))
            .key(keys::session_checkpoint(p, id))
            .arg(host)
            .arg("save")
            .arg(now_ms())
            .arg(checkpoint.cells)
            .arg(flag(checkpoint.state))
            .arg(checkpoint.state.unwrap_or_default())
            .arg(flag(checkpoint.files))
            .arg(checkpoint.files.unwrap_or_default())
            .arg(serde_json::to_string(checkpoint.unrestorable).expect("serializes"))
            .arg(checkpoint.bytes)
            .arg(serde_json::to_string(checkpoint.calls).expect("serializes"))
            .invoke_async(&mut self.connection())
            .await
            .map_err(backend)?;
        Ok(match kept {
            1 => Kept::Yes,
            -1 => Kept::Incomplete,
            _ => Kept::NotHere,
        })
    }

    async fn checkpoint_unavailable(&self, id: &str, host: &str, why: &str) -> Result<Kept, Error> {
        let p = self.prefix();
        let kept: i64 = CHECKPOINT
            .key(keys::session(p, id))
            .key(keys::session_checkpoint(p, id))
            .arg(host)
            .arg("unavailable")
            .arg(now_ms())
            .arg(why)
            .invoke_async(&mut self.connection())
            .await
            .map_err(backend)?;
        Ok(if kept == 1 { Kept::Yes } else { Kept::NotHere })
    }

    async fn checkpoint(&self, id: &str) -> Result<Checkpoint, Error> {
        let key = keys::session_checkpoint(self.prefix(), id);
        let mut hash: HashMap<String, Vec<u8>> =
            self.connection().hgetall(&key).await.map_err(backend)?;
        if hash.is_empty() {
            return Ok(Checkpoint::None);
        }
        let corrupt = |reason: String| Error::Corrupt {
            key: key.clone(),
            reason,
        };
        let text = |bytes: Vec<u8>, name: &str| {
            String::from_utf8(bytes).map_err(|e| corrupt(format!("{name}: {e}")))
        };
        if let Some(why) = hash.remove("unavailable") {
            return Ok(Checkpoint::Unavailable(text(why, "unavailable")?));
        }
        let mut number = |name: &str| -> Result<u64, Error> {
            let bytes = hash
                .remove(name)
                .ok_or_else(|| corrupt(format!("no field {name}")))?;
            text(bytes, name)?
                .parse()
                .map_err(|e| corrupt(format!("{name}: {e}")))
        };
        let cells = number("cells")?;
        let bytes = number("bytes")?;
        let taken_ms = number("taken_ms")?;
        let calls = match hash.remove("calls") {
            Some(json) => {
                serde_json::from_slice(&json).map_err(|e| corrupt(format!("calls: {e}")))?
            }
            None => Vec::new(),
        };
        let unrestorable = match hash.remove("unrestorable") {
            Some(json) => {
                serde_json::from_slice(&json).map_err(|e| corrupt(format!("unrestorable: {e}")))?
            }
            None => Vec::new(),
        };
        Ok(Checkpoint::Kept(KeptCheckpoint {
            cells,
            state: hash
                .remove("state")
                .ok_or_else(|| corrupt("no field state".into()))?,
            files: hash.remove("files"),
            unrestorable,
            bytes,
            taken_ms,
            calls,
        }))
    }

    async fn checkpoint_kept(&self, id: &str) -> Result<Result<u64, String>, Error> {
        let (unavailable, cells): (Option<String>, Option<u64>) = redis::cmd("HMGET")
            .arg(keys::session_checkpoint(self.prefix(), id))
            .arg("unavailable")
            .arg("cells")
            .query_async(&mut self.connection())
            .await
            .map_err(backend)?;
        Ok(match (unavailable, cells) {
            (Some(why), _) => Err(why),
            (None, Some(cells)) => Ok(cells),
            (None, None) => Err("it has no checkpoint".to_owned()),
        })
    }

    async fn rehost_session(
        &self,
        id: &str,
        lost_host: &str,
        host: &str,
        url: &str,
        restore: &Restore,
    ) -> Result<bool, Error> {
        let moved: u64 = REHOST
            .key(keys::session(self.prefix(), id))
            .arg(lost_host)
            .arg(host)
            .arg(url)
            .arg(serde_json::to_string(restore).expect("a restore serializes"))
            .invoke_async(&mut self.connection())
            .await
            .map_err(backend)?;
        Ok(moved == 1)
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
