//! The session checkpoints' contract, against the real Redis: only the worker the record names
//! keeps them; a part left out stays as kept, unless none was kept (then the caller must send
//! it whole); a checkpoint that could not be taken drops the one before; the first restore
//! moves the session, a second finds it moved; the session's end removes its checkpoint.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use proto::api::sessions::{Restore, SessionEndedBy, SessionState, Unrestorable};
use proto::session::{SessionEnd, SessionRecord};
use store::{Checkpoint, Kept, NewCheckpoint, Sessions};

fn redis_store() -> store::RedisStore {
    tests::isolated_redis_store()
}

fn record(id: &str, host: &str) -> SessionRecord {
    let now = proto::now_ms();
    SessionRecord {
        id: id.into(),
        tenant: Some("acme".into()),
        language: proto::Language::Python,
        memory_mb: 512,
        idle_timeout_s: 600,
        packages: vec!["sympy==1.12".into()],
        created_ms: now,
        expires_ms: now + 3_600_000,
        last_used_ms: now,
        busy_until_ms: 0,
        cells: 0,
        state: SessionState::Live,
        ended_reason: None,
        ended_by: None,
        host: host.into(),
        host_url: format!("http://{host}:9100"),
        restores: 0,
        last_restore: None,
    }
}

fn checkpoint<'a>(
    cells: u64,
    state: Option<&'a [u8]>,
    files: Option<&'a [u8]>,
    unrestorable: &'a [Unrestorable],
) -> NewCheckpoint<'a> {
    NewCheckpoint {
        cells,
        state,
        files,
        unrestorable,
        bytes: 10,
        calls: &[],
    }
}

fn restore(lost: &str) -> Restore {
    Restore {
        lost_worker: lost.into(),
        reason: "gone".into(),
        after_cell: 2,
        unrestorable: vec![],
        restored_ms: proto::now_ms(),
    }
}

#[tokio::test]
async fn checkpoints_follow_the_worker_that_holds_the_session_and_go_with_it() {
    let store = redis_store();
    let id = uuid::Uuid::now_v7().to_string();
    let live = record(&id, "w1");
    store.create_session(&live, 0).await.unwrap();
    assert_eq!(
        store.checkpoint_kept(&id).await.unwrap(),
        Err("it has no checkpoint".to_owned())
    );
    // A part left out with nothing kept before: the worker must send it whole.
    assert_eq!(
        store
            .save_checkpoint(&id, "w1", checkpoint(0, None, Some(b"tar"), &[]))
            .await
            .unwrap(),
        Kept::Incomplete
    );
    // Only the worker the record names keeps one.
    assert_eq!(
        store
            .save_checkpoint(
                &id,
                "w2",
                checkpoint(1, Some(b"\x00pickle"), Some(b"tar"), &[])
            )
            .await
            .unwrap(),
        Kept::NotHere
    );
    let handle = [Unrestorable {
        name: "handle".into(),
        reason: "an open file".into(),
    }];
    assert_eq!(
        store
            .save_checkpoint(
                &id,
                "w1",
                checkpoint(1, Some(b"\x00pickle"), Some(b"tar1"), &handle)
            )
            .await
            .unwrap(),
        Kept::Yes
    );
    // The files unchanged: left out, kept as they were.
    assert_eq!(
        store
            .save_checkpoint(
                &id,
                "w1",
                NewCheckpoint {
                    calls: &["call-1".into(), "call-2".into()],
                    ..checkpoint(2, Some(b"\x00pickle2"), None, &[])
                }
            )
            .await
            .unwrap(),
        Kept::Yes
    );
    let Checkpoint::Kept(kept) = store.checkpoint(&id).await.unwrap() else {
        panic!("no checkpoint kept");
    };
    assert_eq!(
        (kept.cells, kept.state.as_slice(), kept.files.as_deref()),
        (2, &b"\x00pickle2"[..], Some(&b"tar1"[..]))
    );
    assert!(kept.unrestorable.is_empty());
    assert_eq!(kept.calls, ["call-1", "call-2"]);
    assert_eq!(store.checkpoint_kept(&id).await.unwrap(), Ok(2));

    // One that could not be taken drops the one before, and says why.
    store
        .checkpoint_unavailable(&id, "w1", "too large")
        .await
        .unwrap();
    assert_eq!(
        store.checkpoint(&id).await.unwrap(),
        Checkpoint::Unavailable("too large".into())
    );
    assert_eq!(
        store.checkpoint_kept(&id).await.unwrap(),
        Err("too large".to_owned())
    );
    // ... and the next whole one is kept again; one with a part left out is refused.
    assert_eq!(
        store
            .save_checkpoint(&id, "w1", checkpoint(3, Some(b"s"), None, &[]))
            .await
            .unwrap(),
        Kept::Incomplete
    );
    assert_eq!(
        store
            .save_checkpoint(&id, "w1", checkpoint(3, Some(b"s"), Some(b"t"), &handle))
            .await
            .unwrap(),
        Kept::Yes
    );

    // The first restore moves the session; a second (from the same lost worker) does not.
    let first = restore("w1");
    assert!(
        store
            .rehost_session(&id, "w1", "w2", "http://w2:9100", &first)
            .await
            .unwrap()
    );
    assert!(
        !store
            .rehost_session(&id, "w1", "w3", "http://w3:9100", &restore("w1"))
            .await
            .unwrap()
    );
    let moved = store.session(&id).await.unwrap().unwrap();
    assert_eq!(
        (
            moved.host.as_str(),
            moved.restores,
            moved.last_restore.clone()
        ),
        ("w2", 1, Some(first))
    );
    // The lost worker, back, keeps no checkpoint of it any more.
    assert_eq!(
        store
            .save_checkpoint(&id, "w1", checkpoint(4, Some(b"old"), Some(b"old"), &[]))
            .await
            .unwrap(),
        Kept::NotHere
    );

    // Its end removes the checkpoint, and the record keeps why; the first end wins.
    let died = SessionEnd::KernelDied {
        detail: "FAKE".into(),
        oom_killed: true,
        memory_mb: 64,
    };
    assert!(store.end_session(&moved, &died).await.unwrap());
    let deleted = SessionEnd::Deleted {
        how: "deleted".into(),
    };
    assert!(!store.end_session(&moved, &deleted).await.unwrap());
    let ended = store.session(&id).await.unwrap().unwrap();
    assert_eq!(ended.state, SessionState::Ended);
    assert_eq!(ended.ended_by, Some(SessionEndedBy::MemoryLimit));
    assert_eq!(ended.ended_reason, Some(died.reason()));
    assert_eq!(store.checkpoint(&id).await.unwrap(), Checkpoint::None);
    assert_eq!(
        store
            .save_checkpoint(&id, "w2", checkpoint(5, Some(b"late"), Some(b"late"), &[]))
            .await
            .unwrap(),
        Kept::NotHere
    );
    assert_eq!(store.checkpoint(&id).await.unwrap(), Checkpoint::None);
}
