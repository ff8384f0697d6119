//! The lessons' contract, against the real Redis: a lesson is kept once; a set stays within
//! its count and byte bounds by evicting the least useful (the oldest among equals), never
//! the one being added; every add and removal bumps the set's version, a counted use does
//! not; a lesson shown `retire_after` times without a pass is retired, one that helped is
//! not; uses are listed per lesson, newest first; tenants' sets and the shared set are apart.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use proto::lesson::{Lesson, LessonSource, LessonUse};
use proto::{ErrorKind, Language, TaskId};
use store::{Added, Bounds, LessonSet, Lessons, Used};

fn lesson(id: &str, created_ms: u64, diff_bytes: usize) -> Lesson {
    Lesson {
        id: id.into(),
        language: Language::Python,
        error_kind: ErrorKind::WrongOutput,
        signature: "wrong_output: a list, 1 item short".into(),
        case: "upto(n=3): expected [1,2,3]; got [1,2]".into(),
        diff: "+".repeat(diff_bytes),
        analysis: "The range stopped one short.".into(),
        model: "scripted/m".into(),
        job: TaskId::new(),
        function: "upto".into(),
        source: LessonSource::Repair,
        created_ms,
        given: true,
    }
}

fn used(id: &str, passed: bool) -> LessonUse {
    LessonUse {
        lesson: id.into(),
        job: TaskId::new(),
        function: "f".into(),
        passed,
        at_ms: proto::now_ms(),
    }
}

const WIDE: Bounds = Bounds {
    max_count: 100,
    max_bytes: 1 << 20,
};

fn acme() -> LessonSet {
    LessonSet::Tenant(Some("acme".into()))
}

#[tokio::test]
async fn a_lesson_is_kept_once_and_every_change_bumps_its_sets_version() {
    let store = tests::isolated_redis_store();
    let set = acme();
    assert_eq!(store.lessons_version(&set).await.unwrap(), 0);
    let first = lesson("a", 1, 10);
    assert_eq!(
        store.add_lesson(&set, &first, WIDE).await.unwrap(),
        Added::Yes { evicted: 0 }
    );
    assert_eq!(
        store.add_lesson(&set, &first, WIDE).await.unwrap(),
        Added::Already
    );
    assert_eq!(store.lessons_version(&set).await.unwrap(), 1);
    let snapshot = store.lessons(&set).await.unwrap();
    assert_eq!(snapshot.version, 1);
    assert_eq!(snapshot.lessons.len(), 1);
    assert_eq!(snapshot.lessons[0].lesson, first, "stored as given");
    // A counted use changes no version (held indexes stay); its counts are there.
    assert_eq!(
        store
            .use_lesson(&set, &used("a", true), 10, 4)
            .await
            .unwrap(),
        Used::Counted
    );
    assert_eq!(store.lessons_version(&set).await.unwrap(), 1);
    let stored = store.lesson(&set, "a").await.unwrap().unwrap();
    assert_eq!((stored.retrieved, stored.helped), (1, 1));
    assert!(store.remove_lesson(&set, "a").await.unwrap());
    assert!(!store.remove_lesson(&set, "a").await.unwrap());
    assert_eq!(store.lessons_version(&set).await.unwrap(), 2);
    assert!(store.lesson(&set, "a").await.unwrap().is_none());
    assert_eq!(
        store
            .use_lesson(&set, &used("a", true), 10, 4)
            .await
            .unwrap(),
        Used::Gone
    );
}

#[tokio::test]
async fn a_full_set_evicts_its_least_useful_lesson_the_oldest_among_equals() {
    let store = tests::isolated_redis_store();
    let set = acme();
    let bounds = Bounds {
        max_count: 3,
        max_bytes: 1 << 20,
    };
    for (id, created) in [("old", 1), ("helpful", 2), ("newer", 3)] {
        store
            .add_lesson(&set, &lesson(id, created, 10), bounds)
            .await
            .unwrap();
    }
    // "helpful" helped twice in two uses; "newer" was shown once and did not help.
    for passed in [true, true] {
        store
            .use_lesson(&set, &used("helpful", passed), 10, 0)
            .await
            .unwrap();
    }
    store
        .use_lesson(&set, &used("newer", false), 10, 0)
        .await
        .unwrap();
    // A fourth: "newer" (1/3) is the least useful, below "old" (unused: 1/2).
    assert_eq!(
        store
            .add_lesson(&set, &lesson("fourth", 4, 10), bounds)
            .await
            .unwrap(),
        Added::Yes { evicted: 1 }
    );
    let ids = |snapshot: store::Snapshot| -> Vec<String> {
        let mut ids: Vec<String> = snapshot.lessons.into_iter().map(|s| s.lesson.id).collect();
        ids.sort();
        ids
    };
    assert_eq!(
        ids(store.lessons(&set).await.unwrap()),
        ["fourth", "helpful", "old"]
    );
    // A fifth: "old" and "fourth" are equal (unused), "old" is older.
    store
        .add_lesson(&set, &lesson("fifth", 5, 10), bounds)
        .await
        .unwrap();
    assert_eq!(
        ids(store.lessons(&set).await.unwrap()),
        ["fifth", "fourth", "helpful"]
    );
    // The byte bound: a large lesson pushes out as many as it must, never itself; one larger
    // than the bound alone is refused.
    let size = |l: &Lesson| proto::codec::encode(l).len() as u64;
    let (big, small) = (lesson("big", 6, 1_500), lesson("fifth", 5, 10));
    // Room for the big one and one and a half of the small ones.
    let tight = Bounds {
        max_count: 10,
        max_bytes: size(&big) + size(&small) * 3 / 2,
    };
    assert_eq!(
        store.add_lesson(&set, &big, tight).await.unwrap(),
        Added::Yes { evicted: 2 }
    );
    assert_eq!(ids(store.lessons(&set).await.unwrap()), ["big", "helpful"]);
    assert_eq!(
        store
            .add_lesson(&set, &lesson("huge", 7, 5_000), tight)
            .await
            .unwrap(),
        Added::TooLarge
    );
}

#[tokio::test]
async fn a_lesson_that_never_helps_is_retired_and_one_that_helped_is_not() {
    let store = tests::isolated_redis_store();
    let set = acme();
    for id in ["useless", "useful"] {
        store
            .add_lesson(&set, &lesson(id, 1, 10), WIDE)
            .await
            .unwrap();
    }
    for _ in 0..2 {
        assert_eq!(
            store
                .use_lesson(&set, &used("useless", false), 10, 3)
                .await
                .unwrap(),
            Used::Counted
        );
    }
    assert_eq!(
        store
            .use_lesson(&set, &used("useless", false), 10, 3)
            .await
            .unwrap(),
        Used::Retired
    );
    assert!(store.lesson(&set, "useless").await.unwrap().is_none());
    store
        .use_lesson(&set, &used("useful", true), 10, 3)
        .await
        .unwrap();
    for _ in 0..5 {
        assert_eq!(
            store
                .use_lesson(&set, &used("useful", false), 10, 3)
                .await
                .unwrap(),
            Used::Counted
        );
    }
    let useful = store.lesson(&set, "useful").await.unwrap().unwrap();
    assert_eq!((useful.retrieved, useful.helped), (6, 1));
    // Its uses, newest first, within the set's bound on kept uses.
    let uses = store.lesson_uses(&set, "useful", 100).await.unwrap();
    assert_eq!(uses.len(), 6);
    assert!(!uses[0].passed && uses[5].passed, "{uses:?}");
    store
        .use_lesson(&set, &used("useful", true), 4, 3)
        .await
        .unwrap();
    let uses = store.lesson_uses(&set, "useful", 100).await.unwrap();
    assert_eq!(uses.len(), 4, "the set keeps its latest 4 uses");
    assert!(uses[0].passed);
}

#[tokio::test]
async fn tenants_sets_and_the_shared_set_are_apart() {
    let store = tests::isolated_redis_store();
    let other = LessonSet::Tenant(Some("globex".into()));
    let open = LessonSet::Tenant(None);
    store
        .add_lesson(&acme(), &lesson("mine", 1, 10), WIDE)
        .await
        .unwrap();
    store
        .add_lesson(&LessonSet::Shared, &lesson("shared", 1, 10), WIDE)
        .await
        .unwrap();
    for set in [&other, &open] {
        assert!(store.lessons(set).await.unwrap().lessons.is_empty());
        assert!(store.lesson(set, "mine").await.unwrap().is_none());
        assert!(!store.remove_lesson(set, "mine").await.unwrap());
    }
    assert_eq!(store.lessons(&acme()).await.unwrap().lessons.len(), 1);
    let shared = store.lessons(&LessonSet::Shared).await.unwrap();
    assert_eq!(shared.lessons[0].lesson.id, "shared");
    assert_eq!(store.lessons_version(&other).await.unwrap(), 0);
}
