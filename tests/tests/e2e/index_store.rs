//! The listing index's contract, against the real Redis and `MemoryIndex`: newest first,
//! pages that neither skip nor repeat while new work arrives, time bounds, tenants apart.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use proto::TaskId;
use store::index::{Index, Kind, Query};

fn redis_store() -> store::RedisStore {
    tests::isolated_redis_store()
}

fn query(tenant: &str, limit: usize) -> Query {
    Query {
        tenant: Some(tenant.into()),
        limit,
        ..Query::default()
    }
}

async fn pages_list_every_item_once_newest_first_per_tenant(index: impl Index) {
    let now = proto::now_ms();
    // 25 jobs of acme, some sharing a millisecond; 3 of globex in between.
    let mut acme = Vec::new();
    for i in 0..25u64 {
        let id = TaskId::new();
        index
            .record(Kind::Jobs, Some("acme"), now - 1000 + i / 2, &[id])
            .await
            .unwrap();
        acme.push((now - 1000 + i / 2, id));
    }
    let globex: Vec<TaskId> = (0..3).map(|_| TaskId::new()).collect();
    index
        .record(Kind::Jobs, Some("globex"), now - 990, &globex)
        .await
        .unwrap();
    let mut listed = Vec::new();
    let mut q = query("acme", 10);
    let mut pages = 0;
    loop {
        let page = index.page(Kind::Jobs, &q).await.unwrap();
        pages += 1;
        listed.extend(page.entries.iter().map(|e| (e.submitted_at_ms, e.id)));
        if pages == 1 {
            // Work arriving between pages does not shift the next page.
            index
                .record(Kind::Jobs, Some("acme"), now, &[TaskId::new()])
                .await
                .unwrap();
        }
        match page.next {
            Some(next) => q.cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    let mut expected = acme.clone();
    expected.sort_by_key(|e| std::cmp::Reverse((e.0, e.1.to_string())));
    assert_eq!(listed, expected, "every item once, newest first");
    assert!(listed.iter().all(|(_, id)| !globex.contains(id)));

    // Time bounds: since inclusive, until exclusive.
    let bounded = index
        .page(
            Kind::Jobs,
            &Query {
                since_ms: Some(now - 998),
                until_ms: Some(now - 995),
                ..query("acme", 100)
            },
        )
        .await
        .unwrap();
    let times: Vec<u64> = bounded.entries.iter().map(|e| e.submitted_at_ms).collect();
    assert_eq!(
        times,
        vec![
            now - 996,
            now - 996,
            now - 997,
            now - 997,
            now - 998,
            now - 998
        ]
    );
    assert_eq!(bounded.next, None);
    // Kinds are apart.
    assert!(
        index
            .page(Kind::Batches, &query("acme", 10))
            .await
            .unwrap()
            .entries
            .is_empty()
    );
}

#[tokio::test]
async fn redis_pages_list_every_item_once_newest_first_per_tenant() {
    pages_list_every_item_once_newest_first_per_tenant(redis_store()).await;
}

#[tokio::test]
async fn memory_pages_list_every_item_once_newest_first_per_tenant() {
    pages_list_every_item_once_newest_first_per_tenant(store::MemoryIndex::default()).await;
}
