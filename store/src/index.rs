//! Per-tenant indexes of submitted work, for listing it newest first, page by page.
//!
//! One sorted set per kind and tenant ([`crate::keys::index`]), every score 0, members
//! `{ms:013}:{id}` (built and read here: they are the listings' cursors too).
//!
//! With equal scores a sorted set orders its members by bytes, and a zero-padded submission
//! time first makes that the submission order, ties broken by id. A page is then one
//! `ZRANGE … BYLEX REV LIMIT`, a time filter is a bound on the same range, and the cursor is
//! the last member returned: exact even while new work arrives, which an offset would not be.
//! Members older than the results' time to live are trimmed whenever something is recorded,
//! so the index never lists work whose state has expired (for long).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use proto::TaskId;

use crate::{Error, keys};

/// What an index lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Jobs,
    Batches,
    Executions,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Jobs => "jobs",
            Kind::Batches => "batches",
            Kind::Executions => "executions",
        }
    }
}

/// One page's bounds: submitted in `since_ms..until_ms`, after `cursor`, at most `limit`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    pub tenant: Option<String>,
    pub since_ms: Option<u64>,
    pub until_ms: Option<u64>,
    /// The `next` of the page before.
    pub cursor: Option<String>,
    pub limit: usize,
}

/// One listed item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub id: TaskId,
    pub submitted_at_ms: u64,
}

/// Newest first; `next` continues after the last entry when there may be more.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    pub entries: Vec<Entry>,
    pub next: Option<String>,
}

#[async_trait]
pub trait Index: Send + Sync + 'static {
    /// Lists `ids` (submitted at `at_ms`) among `tenant`'s `kind`; one round trip however many.
    async fn record(
        &self,
        kind: Kind,
        tenant: Option<&str>,
        at_ms: u64,
        ids: &[TaskId],
    ) -> Result<(), Error>;

    /// A page of `query.tenant`'s `kind`, newest first.
    async fn page(&self, kind: Kind, query: &Query) -> Result<Page, Error>;
}

/// The member of `id`: its time, zero-padded so bytes order as numbers, then the id.
fn member(at_ms: u64, id: TaskId) -> String {
    format!("{at_ms:013}:{id}")
}

/// The cursor that continues a listing after `entry`.
pub fn cursor_after(entry: &Entry) -> String {
    member(entry.submitted_at_ms, entry.id)
}

/// Whether `cursor` is a member as the index writes them (a cursor from a page).
pub fn valid_cursor(cursor: &str) -> bool {
    parse(cursor).is_some()
}

fn parse(member: &str) -> Option<Entry> {
    let (ms, id) = member.split_once(':')?;
    if ms.len() != 13 || !ms.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(Entry {
        id: id.parse().ok()?,
        submitted_at_ms: ms.parse().ok()?,
    })
}

/// The range of a query, as `ZRANGE … BYLEX REV` bounds (`max`, `min`).
fn bounds(query: &Query) -> (String, String) {
    // Exclusive upper bounds: the cursor itself, or anything at `until_ms` or later (a member
    // at `until_ms` sorts after the bare padded time).
    let upper = [
        query.cursor.clone(),
        query.until_ms.map(|ms| format!("{ms:013}")),
    ]
    .into_iter()
    .flatten()
    .min();
    let max = upper.map_or_else(|| "+".to_owned(), |u| format!("({u}"));
    let min = query
        .since_ms
        .map_or_else(|| "-".to_owned(), |ms| format!("[{ms:013}"));
    (max, min)
}

#[async_trait]
impl Index for crate::RedisStore {
    async fn record(
        &self,
        kind: Kind,
        tenant: Option<&str>,
        at_ms: u64,
        ids: &[TaskId],
    ) -> Result<(), Error> {
        if ids.is_empty() {
            return Ok(());
        }
        let key = keys::index(self.prefix(), kind.as_str(), tenant);
        let ttl = self.ttl_secs();
        let expired = at_ms.saturating_sub(ttl.saturating_mul(1000));
        let members: Vec<(u8, String)> = ids.iter().map(|id| (0, member(at_ms, *id))).collect();
        redis::pipe()
            .zadd_multiple(&key, &members)
            .ignore()
            .cmd("ZREMRANGEBYLEX")
            .arg(&key)
            .arg("-")
            .arg(format!("({expired:013}"))
            .ignore()
            .expire(&key, i64::try_from(ttl).unwrap_or(i64::MAX))
            .ignore()
            .query_async::<()>(&mut self.connection())
            .await
            .map_err(crate::redis::backend)
    }

    async fn page(&self, kind: Kind, query: &Query) -> Result<Page, Error> {
        let key = keys::index(self.prefix(), kind.as_str(), query.tenant.as_deref());
        let (max, min) = bounds(query);
        // One more than asked: whether there is a next page.
        let members: Vec<String> = redis::cmd("ZRANGE")
            .arg(&key)
            .arg(max)
            .arg(min)
            .arg("BYLEX")
            .arg("REV")
            .arg("LIMIT")
            .arg(0)
            .arg(query.limit + 1)
            .query_async(&mut self.connection())
            .await
            .map_err(crate::redis::backend)?;
        Ok(to_page(&key, members, query.limit))
    }
}

fn to_page(key: &str, mut members: Vec<String>, limit: usize) -> Page {
    let more = members.len() > limit;
    members.truncate(limit);
    let entries = members.iter().filter_map(|m| parse(m)).collect();
    if members.iter().any(|m| parse(m).is_none()) {
        tracing::warn!(%key, "skipping index members this process cannot read");
    }
    Page {
        entries,
        next: more.then(|| members.last().cloned()).flatten(),
    }
}

/// The same index in memory, for unit tests.
#[derive(Debug, Clone, Default)]
pub struct MemoryIndex {
    sets: Arc<Mutex<BTreeMap<String, BTreeSet<String>>>>,
}

#[async_trait]
impl Index for MemoryIndex {
    async fn record(
        &self,
        kind: Kind,
        tenant: Option<&str>,
        at_ms: u64,
        ids: &[TaskId],
    ) -> Result<(), Error> {
        let mut sets = self.sets.lock().expect("poisoned");
        let set = sets
            .entry(keys::index("", kind.as_str(), tenant))
            .or_default();
        set.extend(ids.iter().map(|id| member(at_ms, *id)));
        Ok(())
    }

    async fn page(&self, kind: Kind, query: &Query) -> Result<Page, Error> {
        let sets = self.sets.lock().expect("poisoned");
        let key = keys::index("", kind.as_str(), query.tenant.as_deref());
        let (max, min) = bounds(query);
        let members: Vec<String> = sets
            .get(&key)
            .map(|set| {
                set.iter()
                    .rev()
                    .filter(|m| {
                        (max == "+" || m.as_str() < &max[1..])
                            && (min == "-" || m.as_str() >= &min[1..])
                    })
                    .take(query.limit + 1)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        Ok(to_page(&key, members, query.limit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_keep_the_names_their_keys_carry() {
        // Part of the index's and the quotas' key names (`keys::index`, `keys::in_flight`).
        let names = [Kind::Jobs, Kind::Batches, Kind::Executions].map(Kind::as_str);
        assert_eq!(names, ["jobs", "batches", "executions"]);
    }

    #[test]
    fn members_order_as_times_and_cursors_round_trip() {
        let (a, b) = (TaskId::new(), TaskId::new());
        assert!(member(999, a) < member(1000, b));
        assert!(valid_cursor(&member(1000, a)));
        assert!(!valid_cursor("1000:nope") && !valid_cursor("x") && !valid_cursor(""));
        let query = Query {
            cursor: Some(member(5000, a)),
            until_ms: Some(4000),
            since_ms: Some(10),
            ..Query::default()
        };
        assert_eq!(
            bounds(&query),
            ("(0000000004000".to_owned(), "[0000000000010".to_owned())
        );
    }
}
