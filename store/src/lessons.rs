//! Lessons, the memory of repairs: a tenant's set and the operators' shared set, each a hash of
//! MessagePack `Lesson`s with their counts beside them, the set's latest uses, and a version
//! bumped by every add and removal (so a process holding a set's index reads it again only
//! when it changed). Bounds and eviction are the add script's; the rules that decide what to
//! add, retrieve and retire are the `memory` crate's.

use std::collections::HashMap;
use std::sync::LazyLock;

use async_trait::async_trait;
use proto::lesson::{Lesson, LessonUse};
use redis::AsyncCommands;

use crate::keys::LessonKeys;
use crate::redis::backend;
use crate::{Error, RedisStore};

/// Which set of lessons.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LessonSet {
    /// A tenant's own (`None`: an open API's).
    Tenant(Option<String>),
    /// The operators' set, offered to every tenant.
    Shared,
}

impl LessonSet {
    fn keys(&self, prefix: &str) -> LessonKeys {
        match self {
            LessonSet::Tenant(tenant) => LessonKeys::tenant(prefix, tenant.as_deref()),
            LessonSet::Shared => LessonKeys::shared(prefix),
        }
    }
}

/// A lesson with its counts.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    pub lesson: Lesson,
    /// Repairs shown it.
    pub retrieved: u64,
    /// Of those, the ones that passed.
    pub helped: u64,
}

/// A set as read at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub version: u64,
    pub lessons: Vec<Stored>,
}

/// How large a set may grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub max_count: u64,
    pub max_bytes: u64,
}

/// What an add did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    /// Kept, after evicting this many of the least useful.
    Yes { evicted: u64 },
    /// The set has it already (the same fix of the same failure).
    Already,
    /// Larger alone than the set's byte bound.
    TooLarge,
}

/// What counting a use did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Used {
    Counted,
    /// Shown `retire_after` times and never helped: removed.
    Retired,
    /// Removed before the use was counted.
    Gone,
}

#[async_trait]
pub trait Lessons: Send + Sync + 'static {
    /// The set's version alone: one round trip, to tell whether a held index is current.
    async fn lessons_version(&self, set: &LessonSet) -> Result<u64, Error>;

    /// The whole set with its counts, and the version they are of.
    async fn lessons(&self, set: &LessonSet) -> Result<Snapshot, Error>;

    async fn lesson(&self, set: &LessonSet, id: &str) -> Result<Option<Stored>, Error>;

    /// The latest uses of lesson `id`, newest first, at most `limit`.
    async fn lesson_uses(
        &self,
        set: &LessonSet,
        id: &str,
        limit: usize,
    ) -> Result<Vec<LessonUse>, Error>;

    async fn add_lesson(
        &self,
        set: &LessonSet,
        lesson: &Lesson,
        bounds: Bounds,
    ) -> Result<Added, Error>;

    /// Counts `used` (its `passed` included); keeps the set's latest `keep` uses; retires
    /// the lesson once shown `retire_after` times with none passing (0: never).
    async fn use_lesson(
        &self,
        set: &LessonSet,
        used: &LessonUse,
        keep: u64,
        retire_after: u64,
    ) -> Result<Used, Error>;

    /// `true` when it was there.
    async fn remove_lesson(&self, set: &LessonSet, id: &str) -> Result<bool, Error>;
}

/// KEYS: lessons, counts, version. ARGV: id, lesson, max count, max bytes, created.
static ADD: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("lua/lessons_add.lua")));
/// KEYS: lessons, counts, uses, version. ARGV: id, passed, use, keep, retire_after.
static USE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("lua/lessons_use.lua")));
/// KEYS: lessons, counts, version. ARGV: id.
static REMOVE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("lua/lessons_remove.lua")));

fn corrupt(key: &str, e: impl std::fmt::Display) -> Error {
    Error::Corrupt {
        key: key.to_owned(),
        reason: e.to_string(),
    }
}

fn count(counts: &HashMap<String, u64>, id: &str, which: &str) -> u64 {
    counts.get(&format!("{id}:{which}")).copied().unwrap_or(0)
}

#[async_trait]
impl Lessons for RedisStore {
    async fn lessons_version(&self, set: &LessonSet) -> Result<u64, Error> {
        let keys = set.keys(self.prefix());
        let version: Option<u64> = self
            .connection()
            .get(keys.version())
            .await
            .map_err(backend)?;
        Ok(version.unwrap_or(0))
    }

    async fn lessons(&self, set: &LessonSet) -> Result<Snapshot, Error> {
        let keys = set.keys(self.prefix());
        let (version, bodies, counts): (
            Option<u64>,
            HashMap<String, Vec<u8>>,
            HashMap<String, u64>,
        ) = redis::pipe()
            .atomic()
            .get(keys.version())
            .hgetall(keys.lessons())
            .hgetall(keys.counts())
            .query_async(&mut self.connection())
            .await
            .map_err(backend)?;
        let mut lessons = bodies
            .into_iter()
            .map(|(id, body)| {
                let lesson: Lesson =
                    proto::codec::decode(&body).map_err(|e| corrupt(&keys.lessons(), e))?;
                Ok(Stored {
                    retrieved: count(&counts, &id, "r"),
                    helped: count(&counts, &id, "h"),
                    lesson,
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        // Newest first, the order the listing shows.
        lessons.sort_by(|a, b| {
            (b.lesson.created_ms, &a.lesson.id).cmp(&(a.lesson.created_ms, &b.lesson.id))
        });
        Ok(Snapshot {
            version: version.unwrap_or(0),
            lessons,
        })
    }

    async fn lesson(&self, set: &LessonSet, id: &str) -> Result<Option<Stored>, Error> {
        let keys = set.keys(self.prefix());
        let (body, retrieved, helped): (Option<Vec<u8>>, Option<u64>, Option<u64>) = redis::pipe()
            .hget(keys.lessons(), id)
            .hget(keys.counts(), format!("{id}:r"))
            .hget(keys.counts(), format!("{id}:h"))
            .query_async(&mut self.connection())
            .await
            .map_err(backend)?;
        body.map(|body| {
            Ok(Stored {
                lesson: proto::codec::decode(&body).map_err(|e| corrupt(&keys.lessons(), e))?,
                retrieved: retrieved.unwrap_or(0),
                helped: helped.unwrap_or(0),
            })
        })
        .transpose()
    }

    async fn lesson_uses(
        &self,
        set: &LessonSet,
        id: &str,
        limit: usize,
    ) -> Result<Vec<LessonUse>, Error> {
        let keys = set.keys(self.prefix());
        let items: Vec<Vec<u8>> = self
            .connection()
            .lrange(keys.uses(), 0, -1)
            .await
            .map_err(backend)?;
        let mut uses = Vec::new();
        for item in items {
            let used: LessonUse =
                proto::codec::decode(&item).map_err(|e| corrupt(&keys.uses(), e))?;
            if used.lesson == id {
                uses.push(used);
                if uses.len() == limit {
                    break;
                }
            }
        }
        Ok(uses)
    }

    async fn add_lesson(
        &self,
        set: &LessonSet,
        lesson: &Lesson,
        bounds: Bounds,
    ) -> Result<Added, Error> {
        let keys = set.keys(self.prefix());
        let (added, evicted): (i64, u64) = ADD
            .key(keys.lessons())
            .key(keys.counts())
            .key(keys.version())
            .arg(&lesson.id)
            .arg(proto::codec::encode(lesson))
            .arg(bounds.max_count)
            .arg(bounds.max_bytes)
            .arg(lesson.created_ms)
            .invoke_async(&mut self.connection())
            .await
            .map_err(backend)?;
        Ok(match added {
            1 => Added::Yes { evicted },
            0 => Added::Already,
            _ => Added::TooLarge,
        })
    }

    async fn use_lesson(
        &self,
        set: &LessonSet,
        used: &LessonUse,
        keep: u64,
        retire_after: u64,
    ) -> Result<Used, Error> {
        let keys = set.keys(self.prefix());
        let answer: u64 = USE
            .key(keys.lessons())
            .key(keys.counts())
            .key(keys.uses())
            .key(keys.version())
            .arg(&used.lesson)
            .arg(u64::from(used.passed))
            .arg(proto::codec::encode(used))
            .arg(keep.max(1))
            .arg(retire_after)
            .invoke_async(&mut self.connection())
            .await
            .map_err(backend)?;
        Ok(match answer {
            1 => Used::Counted,
            2 => Used::Retired,
            _ => Used::Gone,
        })
    }

    async fn remove_lesson(&self, set: &LessonSet, id: &str) -> Result<bool, Error> {
        let keys = set.keys(self.prefix());
        let removed: u64 = REMOVE
            .key(keys.lessons())
            .key(keys.counts())
            .key(keys.version())
            .arg(id)
            .invoke_async(&mut self.connection())
            .await
            .map_err(backend)?;
        Ok(removed == 1)
    }
}
