//! The memory of repairs: lessons from repairs that worked, shown to later repairs of the same
//! tenant (and the operators' shared set), and kept only while they help.
//!
//! - [`learn`] makes a lesson of a repair that turned a failure passing.
//! - [`ranking`] picks the `k` a repair is shown: same language; exact signature first, then
//!   BM25 over the lessons' text.
//! - [`Memory`] is the handle processes hold: it reads a tenant's lessons (with the shared
//!   set) into an index once per change of either set (one round trip per set to compare
//!   versions), adds lessons within the set's bounds, and counts each use, which retires a
//!   lesson shown [`Options::retire_after`] times without one of its repairs passing.
//!
//! The store keeps the sets (`store::lessons`): eviction by usefulness is its add script's.

pub mod learn;
pub mod ranking;
pub mod signature;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use proto::TaskId;
use proto::lesson::{Lesson, LessonUse};
use serde::{Deserialize, Serialize};
use store::{Added, Bounds, LessonSet, Lessons, Used};

pub use ranking::Query;

/// `[memory]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// Lessons a repair is shown (0: the memory is off: none shown, none kept).
    pub k: usize,
    /// A lesson shown this many times without one of its repairs passing is retired (0:
    /// never).
    pub retire_after: u64,
    /// Lessons a tenant's set holds at most; past it the least useful go.
    pub max_lessons: u64,
    /// Bytes a tenant's set holds at most.
    pub max_bytes: u64,
    /// Bytes of a lesson's diff at most (a longer one is cut at a line).
    pub max_diff_bytes: usize,
    /// Uses kept per set, for the listing's "where it was used".
    pub uses_kept: u64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            k: 2,
            retire_after: 4,
            max_lessons: 500,
            max_bytes: 2 << 20,
            max_diff_bytes: 4096,
            uses_kept: 1000,
        }
    }
}

impl Options {
    pub fn bounds(&self) -> Bounds {
        Bounds {
            max_count: self.max_lessons,
            max_bytes: self.max_bytes,
        }
    }
}

/// A lesson a repair was shown.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub lesson: Lesson,
    /// From the shared set (else the tenant's own).
    pub shared: bool,
    /// Its signature is the failure's.
    pub exact: bool,
}

/// The handle; cheap to clone.
#[derive(Clone)]
pub struct Memory {
    inner: Arc<Inner>,
}

struct Inner {
    options: Options,
    store: Arc<dyn Lessons>,
    /// Per tenant: its index, and the versions of its set and the shared one it is of.
    held: Mutex<HashMap<Option<String>, Held>>,
}

struct Held {
    own: u64,
    shared: u64,
    ranking: Arc<ranking::Ranking>,
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory")
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl Memory {
    pub fn new(options: Options, store: Arc<dyn Lessons>) -> Self {
        Self {
            inner: Arc::new(Inner {
                options,
                store,
                held: Mutex::default(),
            }),
        }
    }

    pub fn options(&self) -> &Options {
        &self.inner.options
    }

    /// Whether lessons are shown and kept at all.
    pub fn is_on(&self) -> bool {
        self.inner.options.k > 0
    }

    /// The nearest lessons to `query` of `tenant`'s set and the shared one.
    pub async fn nearest(
        &self,
        tenant: Option<&str>,
        query: &Query<'_>,
    ) -> Result<Vec<Found>, store::Error> {
        if !self.is_on() {
            return Ok(Vec::new());
        }
        let ranking = self.ranking(tenant).await?;
        Ok(ranking
            .nearest(query, self.inner.options.k)
            .into_iter()
            .map(|(stored, shared, exact)| Found {
                lesson: stored.lesson.clone(),
                shared,
                exact,
            })
            .collect())
    }

    /// The index of `tenant`'s lessons, read again when either set changed.
    async fn ranking(&self, tenant: Option<&str>) -> Result<Arc<ranking::Ranking>, store::Error> {
        let store = &self.inner.store;
        let own = LessonSet::Tenant(tenant.map(str::to_owned));
        let (mine, shared) = futures::join!(
            store.lessons_version(&own),
            store.lessons_version(&LessonSet::Shared),
        );
        let (mine, shared) = (mine?, shared?);
        let key = tenant.map(str::to_owned);
        if let Some(held) = self.inner.held.lock().expect("poisoned").get(&key)
            && held.own == mine
            && held.shared == shared
        {
            return Ok(held.ranking.clone());
        }
        let (own_set, shared_set) =
            futures::join!(store.lessons(&own), store.lessons(&LessonSet::Shared));
        let (own_set, shared_set) = (own_set?, shared_set?);
        let lessons = own_set
            .lessons
            .into_iter()
            .map(|l| (l, false))
            .chain(shared_set.lessons.into_iter().map(|l| (l, true)))
            .collect();
        let ranking = Arc::new(ranking::Ranking::new(lessons));
        let held = Held {
            own: own_set.version,
            shared: shared_set.version,
            ranking: ranking.clone(),
        };
        self.inner.held.lock().expect("poisoned").insert(key, held);
        Ok(ranking)
    }

    /// Keeps `lesson` in `tenant`'s set.
    pub async fn learn(
        &self,
        tenant: Option<&str>,
        lesson: &Lesson,
    ) -> Result<Added, store::Error> {
        let set = LessonSet::Tenant(tenant.map(str::to_owned));
        let added = self
            .inner
            .store
            .add_lesson(&set, lesson, self.inner.options.bounds())
            .await?;
        tracing::info!(lesson = %lesson.id, signature = %lesson.signature, ?added, "lesson learned");
        Ok(added)
    }

    /// Counts that a repair of `function` in `job` was shown `found` and `passed` or not.
    pub async fn used(
        &self,
        tenant: Option<&str>,
        found: &[Found],
        job: TaskId,
        function: &str,
        passed: bool,
    ) -> Result<(), store::Error> {
        for found in found {
            let set = if found.shared {
                LessonSet::Shared
            } else {
                LessonSet::Tenant(tenant.map(str::to_owned))
            };
            self.count(&[set], &found.lesson.id, job, function, passed)
                .await?;
        }
        Ok(())
    }

    /// As [`Memory::used`], for lessons known by id alone (an agent's recorded step): each
    /// counted in `tenant`'s set, or in the shared set when it is not the tenant's.
    pub async fn used_ids(
        &self,
        tenant: Option<&str>,
        ids: &[String],
        job: TaskId,
        function: &str,
        passed: bool,
    ) -> Result<(), store::Error> {
        let sets = [
            LessonSet::Tenant(tenant.map(str::to_owned)),
            LessonSet::Shared,
        ];
        for id in ids {
            self.count(&sets, id, job, function, passed).await?;
        }
        Ok(())
    }

    /// Counts one use of lesson `id` in the first of `sets` that has it.
    async fn count(
        &self,
        sets: &[LessonSet],
        id: &str,
        job: TaskId,
        function: &str,
        passed: bool,
    ) -> Result<(), store::Error> {
        let options = &self.inner.options;
        let used = LessonUse {
            lesson: id.to_owned(),
            job,
            function: function.to_owned(),
            passed,
            at_ms: proto::now_ms(),
        };
        for set in sets {
            let outcome = self
                .inner
                .store
                .use_lesson(set, &used, options.uses_kept, options.retire_after)
                .await?;
            if outcome == Used::Retired {
                tracing::info!(lesson = %id, retire_after = options.retire_after, "lesson retired: it never helped");
            }
            if outcome != Used::Gone {
                break;
            }
        }
        Ok(())
    }

    /// Removes lesson `id` of `tenant`'s set (its code failed a case the request gave).
    pub async fn forget(&self, tenant: Option<&str>, id: &str) -> Result<bool, store::Error> {
        let set = LessonSet::Tenant(tenant.map(str::to_owned));
        self.inner.store.remove_lesson(&set, id).await
    }
}
