//! The model's cluster-wide limits on the real Redis: the lease semaphore, the GCRA meters,
//! the slow-down after a 429, several `Model` clients (as several workers would hold) sharing
//! one limit, and worker presence.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::sync::Arc;
use std::time::Duration;

use model::scripted::Counting;
use model::{Metrics, Model, Options, Phase, Prompt, Provider};
use proto::generation::Implementation;
use store::limits::{Decision, LeaseDecision, SlowDown};
use store::{Presence, RedisLimits, RedisStore};
use tokio::time::Instant;
use worker::RedisModelLimits;

/// `n` handles on one fresh prefix: the processes of one cluster.
fn cluster(n: usize) -> Vec<RedisStore> {
    let prefix = format!("t{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    (0..n)
        .map(|_| {
            let options = store::Options {
                url: tests::redis_url(),
                prefix: prefix.clone(),
                ..store::Options::default()
            };
            RedisStore::build(options).unwrap().0
        })
        .collect()
}

fn redis_store() -> RedisStore {
    cluster(1).pop().unwrap()
}

const SLOW: SlowDown = SlowDown {
    recovery: Duration::from_secs(30),
    debounce: Duration::from_secs(1),
    min_factor: 0.1,
    default_pause: Duration::from_millis(300),
};

fn limits() -> RedisLimits {
    RedisLimits::new(redis_store(), "scope", SLOW)
}

/// Two processes' handles on one fresh prefix; the first listens as a worker does (lease
/// notices, none of executions) and is subscribed when this returns. Cancel the token to stop
/// its listener.
async fn listening_and_other() -> (RedisStore, RedisStore, tokio_util::sync::CancellationToken) {
    listening_and_other_on(tests::redis_url(), fresh_prefix()).await
}

fn fresh_prefix() -> String {
    format!("t{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
}

async fn listening_and_other_on(
    url: String,
    prefix: String,
) -> (RedisStore, RedisStore, tokio_util::sync::CancellationToken) {
    let options = store::Options {
        url,
        prefix,
        ..store::Options::default()
    };
    let (listening, listener) = RedisStore::build(options.clone()).unwrap();
    let (other, _) = RedisStore::build(options).unwrap();
    let cancel = tokio_util::sync::CancellationToken::new();
    tokio::spawn(
        listener
            .with_lease_notices()
            .without_execution_notices()
            .run(cancel.clone()),
    );
    // The listener subscribes in the background: wait until a release's notice reaches it (a
    // lease that was not held wakes nobody, so the probe takes one first). The deadline only
    // bounds a failure.
    let probe = RedisLimits::new(other.clone(), "probe", SLOW);
    let freed = RedisLimits::new(listening.clone(), "probe", SLOW).freed();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let notified = freed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        probe
            .lease("#/p", "#", 1, 0, Duration::from_secs(5))
            .await
            .unwrap();
        probe.release("#/p").await.unwrap();
        if tokio::time::timeout(Duration::from_millis(100), notified)
            .await
            .is_ok()
        {
            return (listening, other, cancel);
        }
        assert!(Instant::now() < deadline, "the listener never subscribed");
    }
}

#[tokio::test]
async fn leases_are_bounded_released_and_expire_when_their_holder_dies() {
    let limits = limits();
    let long = Duration::from_secs(60);
    for id in ["a", "b", "c"] {
        assert_eq!(
            limits
                .lease(&format!("#/{id}"), "#", 3, 0, long)
                .await
                .unwrap(),
            LeaseDecision::Granted
        );
    }
    assert!(matches!(
        limits.lease("#/d", "#", 3, 0, long).await.unwrap(),
        LeaseDecision::Wait(_)
    ));
    limits.release("#/b").await.unwrap();
    assert_eq!(
        limits.lease("#/d", "#", 3, 0, long).await.unwrap(),
        LeaseDecision::Granted
    );
    assert_eq!(limits.leases().await.unwrap(), 3);

    // A holder that never releases (a dead worker): its lease frees the slot after its ttl.
    // The ttl is far longer than the one round trip that must still see the lease held.
    let other = RedisLimits::new(redis_store(), "scope", SLOW);
    let ttl = Duration::from_secs(3);
    assert_eq!(
        other.lease("#/dies", "#", 1, 0, ttl).await.unwrap(),
        LeaseDecision::Granted
    );
    assert!(matches!(
        other.lease("#/waits", "#", 1, 0, long).await.unwrap(),
        LeaseDecision::Wait(_)
    ));
    tokio::time::sleep(ttl + Duration::from_millis(500)).await;
    assert_eq!(
        other.lease("#/waits", "#", 1, 0, long).await.unwrap(),
        LeaseDecision::Granted
    );
}

/// A release is announced to every process that listens: a call waiting for a full semaphore
/// asks again then, not on a timer. The waiter's handle is another process's (its own
/// listener); the notice must come through Redis (nothing else wakes the waiter here; the
/// 60 s only bounds a failure).
#[tokio::test]
async fn a_released_lease_wakes_the_waiters_of_other_processes() {
    let (waiter, holder, cancel) = listening_and_other().await;
    let holder = RedisLimits::new(holder, "scope", SLOW);
    let waiter = RedisLimits::new(waiter, "scope", SLOW);
    let long = Duration::from_secs(60);
    assert_eq!(
        holder.lease("#/a", "#", 1, 0, long).await.unwrap(),
        LeaseDecision::Granted
    );
    let freed = waiter.freed();
    assert_eq!(
        waiter.lease("#/b", "#", 1, 0, long).await.unwrap(),
        LeaseDecision::Wait(Duration::ZERO),
        "full"
    );
    // Releasing what is not held announces nothing.
    let notified = freed.notified();
    tokio::pin!(notified);
    notified.as_mut().enable();
    holder.release("#/never-held").await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(200), notified.as_mut())
            .await
            .is_err(),
        "a release of a lease nobody held woke the waiters"
    );
    holder.release("#/a").await.unwrap();
    tokio::time::timeout(Duration::from_secs(60), notified)
        .await
        .expect("the release's notice reaches the waiting process");
    assert_eq!(
        waiter.lease("#/b", "#", 1, 0, long).await.unwrap(),
        LeaseDecision::Granted
    );
    cancel.cancel();
}

/// The last leases are kept for a tenant with few calls in flight while another tenant holds
/// the rest; a tenant alone takes every lease.
#[tokio::test]
async fn the_last_leases_are_kept_for_a_tenant_with_few_in_flight() {
    let limits = limits();
    let long = Duration::from_secs(60);
    // bulk alone: all 8, the reserve of 2 included.
    for i in 0..8 {
        let id = format!("bulk/{i}");
        assert_eq!(
            limits.lease(&id, "bulk", 8, 2, long).await.unwrap(),
            LeaseDecision::Granted,
            "{id}"
        );
    }
    assert!(matches!(
        limits.lease("solo/0", "solo", 8, 2, long).await.unwrap(),
        LeaseDecision::Wait(_)
    ));
    // Two of bulk's calls end; solo now asks too, so those two are solo's, not bulk's.
    limits.release("bulk/0").await.unwrap();
    limits.release("bulk/1").await.unwrap();
    assert_eq!(
        limits.lease("bulk/8", "bulk", 8, 2, long).await.unwrap(),
        LeaseDecision::Reserved
    );
    for id in ["solo/1", "solo/2"] {
        assert_eq!(
            limits.lease(id, "solo", 8, 2, long).await.unwrap(),
            LeaseDecision::Granted,
            "{id}"
        );
    }
    assert_eq!(limits.leases().await.unwrap(), 8);
    // Below the reserve, everyone may take a lease.
    for id in ["bulk/2", "bulk/3", "bulk/4"] {
        limits.release(id).await.unwrap();
    }
    assert_eq!(
        limits.lease("bulk/9", "bulk", 8, 2, long).await.unwrap(),
        LeaseDecision::Granted
    );
    // The reserve is for tenants holding fewer than its size: solo now holds 2, so neither
    // takes the last two while both ask (the price of keeping them for a newcomer).
    for (id, tenant) in [("solo/3", "solo"), ("bulk/10", "bulk")] {
        assert_eq!(
            limits.lease(id, tenant, 8, 2, long).await.unwrap(),
            LeaseDecision::Reserved,
            "{id}"
        );
    }
    assert_eq!(limits.leases().await.unwrap(), 6);
}

#[tokio::test]
async fn a_renewed_lease_outlives_its_ttl_and_an_expired_one_is_not_revived() {
    let limits = limits();
    // "live" is renewed right after it is granted (one round trip, far within the ttl); the
    // sleep then outlasts the ttl of both.
    let short = Duration::from_secs(3);
    let long = Duration::from_secs(60);
    assert_eq!(
        limits.lease("#/dead", "#", 2, 0, short).await.unwrap(),
        LeaseDecision::Granted
    );
    assert_eq!(
        limits.lease("#/live", "#", 2, 0, short).await.unwrap(),
        LeaseDecision::Granted
    );
    limits.renew(&["#/live".to_owned()], long).await.unwrap();
    tokio::time::sleep(short + Duration::from_millis(500)).await;
    // "dead" expired, "live" was renewed: one slot free, then none.
    assert_eq!(limits.leases().await.unwrap(), 1);
    assert_eq!(
        limits.lease("#/next", "#", 2, 0, long).await.unwrap(),
        LeaseDecision::Granted
    );
    assert!(matches!(
        limits.lease("#/over", "#", 2, 0, long).await.unwrap(),
        LeaseDecision::Wait(_)
    ));
    // Renewing a lease that expired does not bring it back.
    limits
        .renew(&["#/dead".to_owned()], Duration::from_secs(60))
        .await
        .unwrap();
    assert!(matches!(
        limits.lease("#/over", "#", 3, 0, long).await.unwrap(),
        LeaseDecision::Granted
    ));
}

#[tokio::test]
async fn a_meter_admits_its_burst_then_paces_and_counts_forced_debt() {
    let limits = limits();
    // One every 2 s, bursts of 10: the 11th waits unless its ten predecessors took 2 s.
    let (rate, interval) = (0.5, Duration::from_secs(2));
    for _ in 0..10 {
        assert_eq!(
            limits
                .meter("requests", rate, 10.0, 1, false)
                .await
                .unwrap(),
            Decision::Granted
        );
    }
    match limits
        .meter("requests", rate, 10.0, 1, false)
        .await
        .unwrap()
    {
        Decision::Wait(wait) => assert!(
            wait > Duration::ZERO && wait <= interval + Duration::from_millis(10),
            "{wait:?}"
        ),
        Decision::Granted => panic!("the 11th request of a 0.5/s meter passed at once"),
    }
    tokio::time::sleep(interval + Duration::from_millis(100)).await;
    assert_eq!(
        limits
            .meter("requests", rate, 10.0, 1, false)
            .await
            .unwrap(),
        Decision::Granted
    );

    // Tokens known only afterwards are charged by force, and the debt delays the next caller:
    // 600 a minute (10 a second) with 300 owed means about 30 s to wait.
    let tokens = RedisLimits::new(redis_store(), "scope", SLOW);
    assert_eq!(
        tokens
            .meter("tokens", 10.0, 600.0, 600, false)
            .await
            .unwrap(),
        Decision::Granted
    );
    assert_eq!(
        tokens
            .meter("tokens", 10.0, 600.0, 300, true)
            .await
            .unwrap(),
        Decision::Granted
    );
    match tokens.meter("tokens", 10.0, 600.0, 1, false).await.unwrap() {
        Decision::Wait(wait) => assert!(
            (Duration::from_secs(25)..=Duration::from_secs(31)).contains(&wait),
            "{wait:?}"
        ),
        Decision::Granted => panic!("the debt was not counted"),
    }
}

#[tokio::test]
async fn a_429_pauses_everyone_and_halves_the_limits_once_per_window() {
    // Windows far longer than the test's round trips: the two 429s fall in one debounce
    // window, and the limit has not grown back past half when it is read after the pause.
    let slow = SlowDown {
        recovery: Duration::from_secs(600),
        debounce: Duration::from_secs(60),
        ..SLOW
    };
    let mut processes = cluster(2);
    let limits = RedisLimits::new(processes.pop().unwrap(), "scope", slow);
    let other = RedisLimits::new(processes.pop().unwrap(), "scope", slow);
    let long = Duration::from_secs(60);
    // Two 429s at once: one signal (halved once), the longer pause wins.
    let pause = Duration::from_secs(3);
    let t0 = Instant::now();
    let factor = limits.throttled(Some(pause)).await.unwrap();
    assert!((factor - 0.5).abs() < 0.01, "{factor}");
    let factor = other.throttled(None).await.unwrap();
    assert!((factor - 0.5).abs() < 0.01, "debounced: {factor}");
    // Every process sees the pause, on leases and meters alike: all of what is left of it
    // (the pause began after t0; a millisecond for Redis's rounding).
    match other.lease("#/x", "#", 4, 0, long).await.unwrap() {
        LeaseDecision::Wait(wait) => assert!(
            wait + t0.elapsed() + Duration::from_millis(1) >= pause,
            "{wait:?} left {:?} into a {pause:?} pause",
            t0.elapsed()
        ),
        other => panic!("the pause was not honoured: {other:?}"),
    }
    assert!(matches!(
        other
            .meter("requests", 100.0, 100.0, 1, false)
            .await
            .unwrap(),
        Decision::Wait(_)
    ));
    // Now is after the pause began: past its end.
    tokio::time::sleep(pause + Duration::from_millis(100)).await;
    // After the pause, a limit of 4 holds 2 (and a little more as it grows back).
    assert_eq!(
        limits.lease("#/a", "#", 4, 0, long).await.unwrap(),
        LeaseDecision::Granted
    );
    assert_eq!(
        limits.lease("#/b", "#", 4, 0, long).await.unwrap(),
        LeaseDecision::Granted
    );
    assert!(matches!(
        limits.lease("#/c", "#", 4, 0, long).await.unwrap(),
        LeaseDecision::Wait(_)
    ));
}

/// A FAKE server answering after 30 ms, 429 above `throttle_above` calls at once.
fn counting(throttle_above: usize) -> Arc<Counting> {
    counting_after(Duration::from_millis(30), throttle_above)
}

fn counting_after(latency: Duration, throttle_above: usize) -> Arc<Counting> {
    Arc::new(Counting::new(
        latency,
        throttle_above,
        Duration::from_millis(50),
    ))
}

/// A client of `server` (one worker's) with `max_concurrency`, its limits shared through
/// `store`; also those limits.
fn client(
    server: &Arc<Counting>,
    store: RedisStore,
    max_concurrency: usize,
) -> (Model, Arc<RedisModelLimits>) {
    let options = Options {
        max_concurrency,
        max_attempts: 1,
        // The fixed limit's mechanics (the adaptive one's have their own test).
        adaptive_concurrency: false,
        ..Options::default()
    };
    client_with(server, store, options)
}

/// A client of `server` with `options`, its limits shared through `store`; also those limits.
fn client_with(
    server: &Arc<Counting>,
    store: RedisStore,
    options: Options,
) -> (Model, Arc<RedisModelLimits>) {
    let provider: Arc<dyn Provider> = server.clone();
    let model = Model::new(provider, options, Metrics::unregistered().unwrap());
    let limits = Arc::new(RedisModelLimits::new(store, &model.limits_scope()));
    (model.with_shared_limits(limits.clone()), limits)
}

/// One implementation of `function`, which must succeed.
async fn implement(model: &Model, function: &str, prompt: &Prompt, deadline: Instant) {
    model
        .generate::<Implementation>(Phase::Implement, Some(function), prompt, deadline)
        .await
        .unwrap();
}

/// `n` clients of one cluster (`n` workers' worth).
fn clients(server: &Arc<Counting>, n: usize, max_concurrency: usize) -> Vec<Model> {
    cluster(n)
        .into_iter()
        .map(|store| client(server, store, max_concurrency).0)
        .collect()
}

/// Four clients (four workers' worth) with `max_concurrency` each, sharing limits in Redis,
/// make `calls_each` calls each, all at once.
async fn four_clients(server: &Arc<Counting>, max_concurrency: usize, calls_each: usize) {
    let clients = clients(server, 4, max_concurrency);
    // Only bounds a failure.
    let deadline = Instant::now() + Duration::from_secs(600);
    let prompt = Prompt {
        system: "s".into(),
        user: "u".into(),
    };
    let calls = clients.iter().flat_map(|model| {
        (0..calls_each).map(|i| {
            let (model, prompt) = (model.clone(), prompt.clone());
            async move { implement(&model, &format!("f{i}"), &prompt, deadline).await }
        })
    });
    futures::future::join_all(calls).await;
}

#[tokio::test]
async fn four_clients_together_never_exceed_the_cluster_limit() {
    // Calls long enough that the limit, not the speed of the calls' starts, holds them back:
    // five are in the server at once.
    let server = counting_after(Duration::from_millis(300), usize::MAX);
    four_clients(&server, 5, 15).await;
    assert_eq!(server.calls(), 60);
    assert_eq!(
        server.peak(),
        5,
        "the cluster limit is 5 in all, not 5 per client"
    );
}

#[tokio::test]
async fn a_server_answering_429_slows_the_whole_cluster_and_no_call_fails() {
    // The server takes 3 at once, the cluster allows 8: calls above 3 get 429s, which shrink
    // the shared limit; every generation still succeeds (`max_attempts` is 1: a 429 counted as
    // a failed attempt would fail it). The calls last long enough for more than 3 to meet.
    let server = counting_after(Duration::from_millis(300), 3);
    four_clients(&server, 8, 10).await;
    assert!(server.throttled() > 0, "never throttled");
    assert!(server.peak() <= 8 + 1, "a 429 answered above the limit");
    assert_eq!(server.calls() - server.throttled(), 40);
}

#[tokio::test]
async fn presence_tells_whether_any_worker_can_generate() {
    let store = redis_store();
    // w1 must outlive the round trips up to w2's withdrawal (a few ms each, far more on a
    // loaded machine), then drop out.
    let ttl = Duration::from_secs(10);
    assert_eq!(
        store.generators().await.unwrap().refusal(),
        None,
        "no worker: accepted"
    );
    store
        .announce("w1", Some("model not configured"), None, ttl)
        .await
        .unwrap();
    let refusal = store.generators().await.unwrap().refusal().unwrap();
    assert!(refusal.contains("model not configured"), "{refusal}");
    store
        .announce(
            "w2",
            None,
            Some(r#"{"in_flight":3}"#),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    assert_eq!(store.generators().await.unwrap().refusal(), None);
    // The live workers, able first, each with what it last said.
    let live = store.workers().await.unwrap();
    let seen: Vec<_> = live
        .iter()
        .map(|w| (w.id.as_str(), w.able, w.status.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            ("w2", true, Some(r#"{"in_flight":3}"#)),
            ("w1", false, None)
        ]
    );
    store.withdraw("w2").await.unwrap();
    assert!(store.generators().await.unwrap().refusal().is_some());
    let gone = store.workers().await.unwrap();
    assert_eq!(gone.len(), 1, "{gone:?}");
    // A worker that stops announcing drops out, and so does what it said.
    store.announce("w3", None, Some("{}"), ttl).await.unwrap();
    tokio::time::sleep(ttl + Duration::from_millis(500)).await;
    assert_eq!(
        store.generators().await.unwrap(),
        store::Generators::default()
    );
    assert_eq!(store.workers().await.unwrap(), []);
    // Back without saying anything: what it said before expired with it.
    store
        .announce("w3", None, None, Duration::from_secs(60))
        .await
        .unwrap();
    let back = store.workers().await.unwrap();
    assert_eq!(back.len(), 1, "{back:?}");
    assert_eq!(back[0].status, None, "{back:?}");
    store.withdraw("w3").await.unwrap();
}

/// A seat keeps its place under the cluster limit from one call to the next (another
/// worker's call waits meanwhile) and gives it back when dropped.
#[tokio::test]
async fn a_seat_keeps_its_place_between_calls_and_gives_it_back_when_dropped() {
    let server = counting(usize::MAX);
    let clients = clients(&server, 2, 1);
    let (a, b) = (&clients[0], &clients[1]);
    let prompt = Prompt {
        system: "s".into(),
        user: "u".into(),
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let other = || async {
        b.generate::<Implementation>(Phase::Implement, Some("g"), &prompt, deadline)
            .await
    };

    let mut seat = a.seat(&model::Lane::default()).await;
    assert!(
        tokio::time::timeout(Duration::from_millis(300), other())
            .await
            .is_err(),
        "another worker called while the only place was taken"
    );
    for _ in 0..2 {
        a.generate_in::<Implementation>(
            &model::Call::default(),
            &mut seat,
            Phase::Implement,
            Some("f"),
            &prompt,
            deadline,
        )
        .await
        .unwrap();
    }
    assert_eq!(server.calls(), 2);
    assert!(
        tokio::time::timeout(Duration::from_millis(100), other())
            .await
            .is_err(),
        "the seat gave its place away after a call"
    );
    drop(seat);
    tokio::time::timeout(Duration::from_secs(60), other())
        .await
        .expect("a dropped seat's place was not given back")
        .unwrap();
    assert_eq!(server.peak(), 1);
}

/// One call in `seat` (kept for the next), well within its deadline.
async fn call_in(model: &Model, seat: &mut model::Seat) {
    let prompt = Prompt {
        system: "s".into(),
        user: "u".into(),
    };
    let far = Instant::now() + Duration::from_secs(60);
    model
        .generate_in::<Implementation>(
            &model::Call::default(),
            seat,
            Phase::Implement,
            Some("f"),
            &prompt,
            far,
        )
        .await
        .unwrap();
}

/// A seat's next call asks no script, so it honours a pause another worker's 429 announced
/// (heard through the listener) rather than calling into it.
#[tokio::test]
async fn a_kept_seat_pauses_when_another_worker_is_throttled() {
    use model::SharedLimits;

    let (here, elsewhere, cancel) = listening_and_other().await;
    let server = counting(usize::MAX);
    let (model, limits_here) = client(&server, here, 4);
    let scope = model.limits_scope();
    let mut seat = model.seat(&model::Lane::default()).await;
    call_in(&model, &mut seat).await;

    // The pause begins after t0, so a call that honours it ends `pause` after t0 at the
    // earliest, however long the notice took to arrive.
    let pause = Duration::from_secs(5);
    let t0 = Instant::now();
    RedisModelLimits::new(elsewhere, &scope)
        .throttled(Some(pause))
        .await
        .unwrap();
    // Heard while it lasts (a pause is forgotten once over).
    while limits_here.heard_pause().is_none() {
        assert!(t0.elapsed() < pause, "the pause was never heard");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    call_in(&model, &mut seat).await;
    assert!(
        t0.elapsed() >= pause,
        "the kept seat called {:?} into a {pause:?} pause",
        t0.elapsed()
    );
    assert_eq!(server.calls(), 2);
    cancel.cancel();
}

/// A pause announced while a worker's listener was cut off never reaches it; its kept seats
/// read the pause instead of calling into it. The announcement is lost here by construction:
/// the pause is written straight into the shared state, with no notice at all, just after the
/// listener's connection was killed.
#[tokio::test]
async fn a_kept_seat_reads_a_pause_its_worker_could_not_hear() {
    // A Redis of this test's own: killing its clients disturbs no other test.
    let redis = tests::PrivateRedis::start();
    let prefix = fresh_prefix();
    let (here, _elsewhere, cancel) = listening_and_other_on(redis.url(), prefix.clone()).await;
    let server = counting(usize::MAX);
    let (model, limits_here) = client(&server, here, 4);
    let scope = model.limits_scope();
    let mut seat = model.seat(&model::Lane::default()).await;
    call_in(&model, &mut seat).await;
    assert!(
        limits_here.pause_known(),
        "a call while subscribed read the pause: what is heard from now on is the whole truth"
    );

    let mut raw = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    // A subscribed connection is of the `pubsub` type, whatever its protocol.
    let killed: i64 = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "pubsub"])
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(killed, 1, "the listener's connection was not there to kill");
    let deadline = Instant::now() + Duration::from_secs(60);
    while limits_here.pause_known() {
        assert!(
            Instant::now() < deadline,
            "the disconnection went unnoticed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The pause ends `pause` after Redis's clock read after t0: a call that honours it ends
    // `pause` after t0 at the earliest (less a millisecond of rounding).
    let pause = Duration::from_secs(3);
    let t0 = Instant::now();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut raw).await.unwrap();
    let until = secs * 1000 + micros / 1000 + u64::try_from(pause.as_millis()).unwrap();
    let slow = format!("{prefix}:limits:{scope}:slow");
    let () = redis::cmd("HSET")
        .arg(&slow)
        .arg("until")
        .arg(until)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(limits_here.heard_pause().is_none(), "nothing announced it");

    call_in(&model, &mut seat).await;
    assert!(
        t0.elapsed() + Duration::from_millis(2) >= pause,
        "the kept seat called {:?} into a {pause:?} pause it could not hear",
        t0.elapsed()
    );
    assert_eq!(server.calls(), 2);
    // Resubscribed, a read makes what is heard the whole truth again: no read per call.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        model::SharedLimits::paused_until(&*limits_here).await;
        if limits_here.pause_known() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the resubscription went unnoticed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cancel.cancel();
}

/// A server that runs 8 calls at once and queues the rest, two workers' clients with the
/// adaptive limit (under the default ceiling of 64) and 64 callers of 8 calls each: the
/// cluster's limit is found at the server's slots, one above now and then, from the answers'
/// pace alone (this server reports nothing).
#[tokio::test]
async fn the_adaptive_limit_settles_at_a_servers_slots() {
    // Answers long enough that a loaded machine's scheduling delays (milliseconds) stay far
    // below the wait of a call queued for a slot (a whole answer), which is what is read.
    let server = Arc::new(Counting::with_slots(Duration::from_secs(1), 8));
    let stores = cluster(2);
    let adaptive = Options {
        max_attempts: 1,
        adaptive_concurrency: true,
        ..Options::default()
    };
    let clients: Vec<(Model, Arc<RedisModelLimits>)> = stores
        .into_iter()
        .map(|store| client_with(&server, store, adaptive.clone()))
        .collect();
    let prompt = Prompt {
        system: "s".into(),
        user: "u".into(),
    };
    // Only bounds a failure.
    let deadline = Instant::now() + Duration::from_secs(900);
    // Each caller calls again as soon as answered; the limits are sampled after every call.
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let callers = (0..64).map(|i| {
        let (model, prompt, seen) = (clients[i % 2].0.clone(), prompt.clone(), seen.clone());
        async move {
            for call in 0..8 {
                implement(&model, &format!("f{i}-{call}"), &prompt, deadline).await;
                seen.lock().unwrap().push(model.concurrency().0);
            }
        }
    });
    futures::future::join_all(callers).await;
    assert_eq!(server.calls(), 64 * 8);
    let seen = seen.lock().unwrap().clone();
    // The last half of the calls, after the limit grew from its start (4).
    let late = &seen[seen.len() / 2..];
    let within = late.iter().filter(|l| (7..=9).contains(*l)).count();
    assert!(
        within * 10 >= late.len() * 9,
        "the limit in force was within 8 ± 1 for {within} of the last {} calls: {late:?}",
        late.len()
    );
    let (_, state) = clients[0].0.concurrency();
    let state = state.unwrap();
    assert!((7..=9).contains(&state.in_force()), "{state:?}");
    assert!(server.peak() >= 8, "the server's slots were never all used");
}
