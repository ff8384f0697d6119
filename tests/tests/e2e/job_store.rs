//! The job store's contract, run against both stores: the real Redis (its Lua scripts) and
//! `MemoryJobs` (the in-process model of them the unit tests use), so the two cannot drift.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::collections::BTreeMap;
use std::time::Duration;

use proto::generation::{Complexity, FunctionSpec, Output};
use proto::job::{FunctionOutcome, JobResult, JobStatus, Plan};
use proto::{ExecutionResult, Progress, Status, TaskId};
use store::index::Kind;
use store::webhooks::{AttemptOutcome, HookKind};
use store::{JobStore, Quotas, RedisStore, Store, Usage, Webhooks};

fn spec(name: &str, deps: &[&str]) -> FunctionSpec {
    FunctionSpec {
        name: name.into(),
        purpose: String::new(),
        inputs: vec![],
        outputs: Output {
            ty: "int".into(),
            description: String::new(),
        },
        dependencies: deps.iter().map(|d| d.to_string()).collect(),
        complexity: Complexity::Simple,
    }
}

/// a → {b1..b8} → z: eight functions whose completions race to release z.
fn fan_in() -> Plan {
    let middle: Vec<String> = (1..=8).map(|i| format!("b{i}")).collect();
    let mut specs = vec![spec("a", &[])];
    specs.extend(middle.iter().map(|m| spec(m, &["a"])));
    let refs: Vec<&str> = middle.iter().map(String::as_str).collect();
    specs.push(spec("z", &refs));
    let mut dependants: BTreeMap<String, Vec<String>> = BTreeMap::new();
    dependants.insert("a".into(), middle.clone());
    for m in &middle {
        dependants.insert(m.clone(), vec!["z".into()]);
    }
    dependants.insert("z".into(), vec![]);
    Plan {
        specs,
        dependants,
        refused: None,
        request_code: None,
    }
}

fn succeeded(job: TaskId) -> JobResult {
    serde_json::from_value(serde_json::json!({
        "job_id": job, "status": "succeeded", "instruction": "x", "language": "python",
        "function_specs": [], "implementations": {}, "tests": {}, "test_results": [],
        "all_tests_passed": true, "improvement_history": [], "documentation": "",
        "quality": {"score": 1.0, "tests_passed": 0, "tests_total": 0, "coverage": 0.0,
                    "complexity": {}, "docstrings": 1.0, "dangerous_calls": []},
        "metrics": {"generation_ms": 0, "execution_ms": 0, "total_ms": 0, "model_calls": 0,
                    "tokens": {"prompt": 0, "completion": 0}, "cache": "miss"},
        "validation": "tested", "manual_review_recommended": false}))
    .unwrap()
}

/// A fresh prefix on the test Redis, so tests do not see each other's keys.
fn redis_options() -> store::Options {
    store::Options {
        url: tests::redis_url(),
        prefix: format!("t{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
        result_ttl: Duration::from_secs(600),
        ..store::Options::default()
    }
}

fn redis_store() -> RedisStore {
    RedisStore::build(redis_options()).unwrap().0
}

/// Returns once the listener of `listening` is subscribed: a notice published through
/// `writer` reaches it. A listener subscribes to all its channels in one command, and every
/// listener here keeps the verdicts' channel, so a verdict's notice (a fresh execution each
/// probe: a verdict is stored once) shows that the channels under test are subscribed too.
/// The deadline only bounds a failure.
async fn subscribed(listening: &RedisStore, writer: &RedisStore) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let id = TaskId::new();
        let watch = Store::watch(listening, &[id]).unwrap();
        let notified = watch.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let probe = ExecutionResult::error(Status::Passed, "probe");
        assert!(writer.complete_execution(id, None, &probe).await.unwrap());
        if tokio::time::timeout(Duration::from_millis(100), notified)
            .await
            .is_ok()
        {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the listener never subscribed"
        );
    }
}

async fn the_last_dependency_releases_a_dependant_exactly_once_under_concurrency<
    S: JobStore + Clone,
>(
    store: S,
) {
    let m = meta(0);
    let job = m.id;
    let plan = fan_in();
    assert!(store.start_job(&m, &plan, None).await.unwrap().first);
    assert!(
        !store.start_job(&m, &fan_in(), None).await.unwrap().first,
        "a plan is stored once"
    );

    let first = store
        .finish_function(job, &plan, &final_outcome("a"), None, None)
        .await
        .unwrap();
    assert!(first.stored);
    let first = first.completion.unwrap();
    assert!(first.first);
    assert_eq!(first.ready.len(), 8);

    // Eight functions finishing at once, on several workers: exactly one releases z.
    let racing = (1..=8).map(|i| {
        let store = store.clone();
        let plan = plan.clone();
        tokio::spawn(async move {
            store
                .finish_function(job, &plan, &final_outcome(&format!("b{i}")), None, None)
                .await
                .unwrap()
        })
    });
    let mut released = 0;
    for handle in racing {
        let completion = handle.await.unwrap().completion.unwrap();
        assert!(completion.first);
        released += completion.ready.iter().filter(|r| *r == "z").count();
        assert!(!completion.all_done);
    }
    assert_eq!(released, 1);

    // b3's task taken again: its completion changes nothing but names z again for
    // re-publishing.
    let again = store
        .complete_function(job, &plan, &final_outcome("b3"), None)
        .await
        .unwrap();
    assert!(!again.first);
    assert_eq!(again.ready, vec!["z".to_string()]);

    let last = store
        .complete_function(job, &plan, &final_outcome("z"), None)
        .await
        .unwrap();
    assert!(last.all_done && last.ready.is_empty());
    let after = store
        .complete_function(job, &plan, &final_outcome("b3"), None)
        .await
        .unwrap();
    assert!(after.ready.is_empty(), "z is done: nothing to re-publish");
}

/// A completion's event is recorded with the first completion only; a stored outcome's event
/// only when the outcome is stored; both writes answer in one round trip what a step needs.
async fn writes_carry_their_events_and_answer_the_status<S: JobStore + Clone>(store: S) {
    let m = meta(0);
    let job = m.id;
    let plan = fan_in();
    let planned = Progress::Planned {
        functions: vec!["a".into()],
        dependencies: Default::default(),
    };
    let started = store.start_job(&m, &plan, Some(&planned)).await.unwrap();
    assert_eq!(started.status, Some(JobStatus::Running));
    let again = store.start_job(&m, &plan, Some(&planned)).await.unwrap();
    assert!(!again.first, "started once, its event recorded once");
    let done = |f: &str| Progress::FunctionDone {
        function: f.into(),
        passed: true,
        attempts: 1,
    };
    let finished = store
        .finish_function(job, &plan, &final_outcome("a"), None, Some(&done("a")))
        .await
        .unwrap();
    assert_eq!(finished.status, Some(JobStatus::Running));
    store
        .complete_function(job, &plan, &final_outcome("a"), Some(&done("a")))
        .await
        .unwrap();
    let mut outcome = FunctionOutcome::new("b1");
    let attempt = Progress::Attempt {
        function: "b1".into(),
        attempt: 1,
        passed: false,
        error_kind: None,
        validation: None,
        worker: Some("w1".into()),
    };
    let saved = store
        .save_function(job, &outcome, Some(&attempt))
        .await
        .unwrap();
    assert!(saved.stored);
    assert_eq!(saved.status, Some(JobStatus::Running));
    outcome.done = true;
    assert!(
        store
            .finish_function(job, &plan, &outcome, None, None)
            .await
            .unwrap()
            .stored
    );
    // A late write of the same function is refused, and so is its event; the status it
    // answers is what a worker stops on.
    store.set_status(job, JobStatus::Cancelled).await.unwrap();
    let late = store
        .save_function(job, &outcome, Some(&attempt))
        .await
        .unwrap();
    assert!(!late.stored);
    assert_eq!(late.status, Some(JobStatus::Cancelled));
    let late = store
        .finish_function(job, &plan, &outcome, Some(&attempt), None)
        .await
        .unwrap();
    assert!(!late.stored && late.completion.is_none());
    // A function finishing after its job ended is stored, and completes nothing.
    let ended = store
        .finish_function(job, &plan, &final_outcome("b3"), None, Some(&done("b3")))
        .await
        .unwrap();
    assert!(ended.stored);
    assert_eq!(ended.status, Some(JobStatus::Cancelled));
    assert_eq!(ended.completion, None);
    let events: Vec<Progress> = store
        .events(job, None)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event)
        .collect();
    assert_eq!(events, vec![planned, done("a"), attempt]);

    // One read for what a step needs.
    let view = store.view(job, Some("b1")).await.unwrap();
    assert_eq!(view.status, Some(JobStatus::Cancelled));
    assert_eq!(view.plan, Some(plan));
    assert_eq!(view.meta, Some(m), "stored with the plan");
    assert_eq!(view.function, Some(outcome.clone()));
    assert_eq!(
        store
            .functions(job, &["b2".into(), "b1".into()])
            .await
            .unwrap(),
        vec![None, Some(outcome)]
    );
}

/// A failed function releases none of its dependants and starts the integration in the same
/// step, whichever of the dependants' dependencies finishes first; after it, a passing one
/// releases nothing either.
async fn a_failed_function_releases_nothing_and_starts_the_integration<S: JobStore + Clone>(
    store: S,
) {
    for failed_first in [true, false] {
        let m = meta(0);
        let job = m.id;
        // d depends on a and b; c depends on b alone.
        let plan = Plan {
            specs: vec![
                spec("a", &[]),
                spec("b", &[]),
                spec("c", &["b"]),
                spec("d", &["a", "b"]),
            ],
            dependants: BTreeMap::from([
                ("a".into(), vec!["d".into()]),
                ("b".into(), vec!["c".into(), "d".into()]),
                ("c".into(), vec![]),
                ("d".into(), vec![]),
            ]),
            refused: None,
            request_code: None,
        };
        store.start_job(&m, &plan, None).await.unwrap();
        let mut a = final_outcome("a");
        a.passed = false;
        let b = final_outcome("b");
        let (first, second) = if failed_first { (&a, &b) } else { (&b, &a) };
        let one = store
            .finish_function(job, &plan, first, None, None)
            .await
            .unwrap();
        let two = store
            .finish_function(job, &plan, second, None, None)
            .await
            .unwrap();
        let released: Vec<String> = [&one, &two]
            .iter()
            .flat_map(|f| f.completion.clone().unwrap().ready)
            .collect();
        if failed_first {
            assert_eq!(one.status, Some(JobStatus::Integrating));
            assert!(released.is_empty(), "{released:?}");
        } else {
            assert_eq!(released, vec!["c".to_string()], "b passed before a failed");
            assert_eq!(two.status, Some(JobStatus::Integrating));
        }
        assert_eq!(
            store.status(job).await.unwrap(),
            Some(JobStatus::Integrating)
        );
        // A's task taken again names nothing either.
        assert!(
            store
                .complete_function(job, &plan, &final_outcome("a"), None)
                .await
                .unwrap()
                .ready
                .is_empty()
        );
    }
}

/// A job's end, in the one store operation that ends it, gives its quota place back, makes its
/// webhook due and brings its batch's webhook one job closer (due after the last): on both
/// stores alike. A repeated end does none of it again.
async fn a_jobs_end_gives_its_place_back_and_makes_its_webhooks_due<
    S: JobStore + Quotas + Webhooks + Clone,
>(
    store: S,
) {
    let tenant = Some("acme");
    let (first, second) = (meta(0), meta(0));
    let limits = store::quotas::Limits {
        in_flight: Some(1),
        ..Default::default()
    };
    let admit = |m: &proto::job::JobMeta| {
        let (store, id) = (store.clone(), m.id);
        async move {
            store
                .admit(Kind::Jobs, tenant, &[id], &limits)
                .await
                .unwrap()
        }
    };
    assert_eq!(admit(&first).await, Ok(()));
    assert_eq!(
        admit(&second).await,
        Err(store::quotas::Refusal::InFlight { current: 1 })
    );
    let batch = TaskId::new();
    store
        .register_job(first.id, "https://hooks.test/job", tenant)
        .await
        .unwrap();
    store
        .register_batch(
            batch,
            &[first.id, second.id],
            "https://hooks.test/batch",
            tenant,
        )
        .await
        .unwrap();
    let lease = Duration::from_secs(60);
    assert!(store.claim_due(lease, 10).await.unwrap().is_empty());

    assert!(
        store
            .finish_job(first.id, tenant, &succeeded(first.id))
            .await
            .unwrap()
    );
    assert_eq!(admit(&second).await, Ok(()), "the place came back");
    assert_eq!(
        store.claim_due(lease, 10).await.unwrap(),
        vec![(HookKind::Job, first.id)],
        "the job's webhook, not yet its batch's"
    );
    let hook = store.hook(HookKind::Job, first.id).await.unwrap().unwrap();
    assert_eq!(hook.view.state, proto::api::WebhookState::Pending);
    assert_eq!(hook.tenant.as_deref(), tenant);
    assert!(
        store.claim_due(lease, 10).await.unwrap().is_empty(),
        "leased"
    );
    assert!(
        !store
            .finish_job(first.id, tenant, &succeeded(first.id))
            .await
            .unwrap()
    );
    assert!(
        store
            .finish_job(second.id, tenant, &succeeded(second.id))
            .await
            .unwrap()
    );
    assert_eq!(
        store.claim_due(lease, 10).await.unwrap(),
        vec![(HookKind::Batch, batch)],
        "after the batch's last job, its webhook; the repeated end made nothing due again"
    );
    let attempt = proto::api::WebhookAttempt {
        at_ms: 1,
        status: Some(200),
        error: None,
        duration_ms: 3,
    };
    store
        .record_attempt(HookKind::Batch, batch, &attempt, AttemptOutcome::Delivered)
        .await
        .unwrap();
    let hook = store.hook(HookKind::Batch, batch).await.unwrap().unwrap();
    assert_eq!(hook.view.state, proto::api::WebhookState::Delivered);
    assert_eq!(hook.view.attempts, vec![attempt]);
}

async fn events_are_read_in_order_after_a_cursor<S: JobStore + Clone>(store: S) {
    let job = TaskId::new();
    for i in 0..3 {
        store
            .push_event(
                job,
                &Progress::FunctionStarted {
                    function: format!("f{i}"),
                    worker: None,
                },
            )
            .await
            .unwrap();
    }
    let all = store.events(job, None).await.unwrap();
    assert_eq!(all.len(), 3);
    let rest = store.events(job, Some(&all[0].id)).await.unwrap();
    let names: Vec<_> = rest
        .iter()
        .map(|e| match &e.event {
            Progress::FunctionStarted { function, .. } => function.as_str(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(names, vec!["f1", "f2"]);
}

async fn a_final_function_outcome_is_written_once_and_partial_writes_stop_after_it<
    S: JobStore + Clone,
>(
    store: S,
) {
    let job = TaskId::new();
    let plan = fan_in();
    let mut partial = FunctionOutcome::new("a");
    partial.attempts = 1;
    let stored = |saved: store::Saved| saved.stored;
    assert!(stored(
        store.save_function(job, &partial, None).await.unwrap()
    ));
    partial.attempts = 2;
    assert!(
        stored(store.save_function(job, &partial, None).await.unwrap()),
        "partial outcomes are rewritten"
    );
    // Two runs of the same task (a redelivery racing the original) finish differently.
    let mut first = partial.clone();
    first.done = true;
    first.passed = true;
    first.code = Some("def a(): return 1".into());
    let mut second = first.clone();
    second.code = Some("def a(): return 2".into());
    let mut late_partial = partial.clone();
    late_partial.attempts = 3;
    let finish = |outcome: &FunctionOutcome| {
        let (store, plan, outcome) = (store.clone(), plan.clone(), outcome.clone());
        async move {
            store
                .finish_function(job, &plan, &outcome, None, None)
                .await
                .unwrap()
                .stored
        }
    };
    assert!(finish(&first).await);
    assert!(!finish(&second).await);
    assert!(!stored(
        store.save_function(job, &late_partial, None).await.unwrap()
    ));
    let stored = store.function(job, "a").await.unwrap().unwrap();
    assert_eq!(stored.code.as_deref(), Some("def a(): return 1"));
    assert_eq!(stored.attempts, 2);
}

async fn published_functions_are_remembered<S: JobStore + Clone>(store: S) {
    let job = TaskId::new();
    let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        store.unpublished(job, names(&["a", "b"])).await.unwrap(),
        names(&["a", "b"])
    );
    store.mark_published(job, &names(&["a"])).await.unwrap();
    assert_eq!(
        store
            .unpublished(job, names(&["a", "b", "c"]))
            .await
            .unwrap(),
        names(&["b", "c"])
    );
    assert!(store.unpublished(job, vec![]).await.unwrap().is_empty());
}

async fn a_job_finishes_once_with_its_event_and_status_and_stays_finished<
    S: JobStore + Usage + Clone,
>(
    store: S,
) {
    let job = TaskId::new();
    store.set_status(job, JobStatus::Integrating).await.unwrap();
    let mut result = succeeded(job);
    result.metrics.model_calls = 3;
    result.metrics.execution_ms = 40;
    let charge = proto::api::UsageTotals::of_job(&result);
    let finished = Progress::finished(&result);
    assert!(store.finish_job(job, Some("acme"), &result).await.unwrap());
    // A late failure (a dead letter, a duplicate integration) changes nothing, and is not
    // charged again.
    result.status = JobStatus::Failed;
    assert!(!store.finish_job(job, Some("acme"), &result).await.unwrap());
    let now = proto::now_ms();
    let hour = store::usage::BUCKET_MS;
    assert_eq!(
        store
            .usage(Some("acme"), now - hour, now + hour)
            .await
            .unwrap(),
        charge,
        "charged once, with the result's figures"
    );
    assert_eq!(
        store
            .usage(Some("other"), now - hour, now + hour)
            .await
            .unwrap(),
        proto::api::UsageTotals::default(),
        "another tenant's totals are its own"
    );
    store.set_status(job, JobStatus::Running).await.unwrap();
    assert_eq!(
        store.status(job).await.unwrap(),
        Some(JobStatus::Succeeded),
        "a final status is never overwritten"
    );
    assert_eq!(
        store.result(job).await.unwrap().unwrap().status,
        JobStatus::Succeeded
    );
    let events = store.events(job, None).await.unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].event, finished);
}

async fn many_statuses_are_read_at_once_in_order<S: JobStore + Clone>(store: S) {
    let (a, b, unknown) = (TaskId::new(), TaskId::new(), TaskId::new());
    store.set_status(a, JobStatus::Running).await.unwrap();
    store.finish_job(b, None, &succeeded(b)).await.unwrap();
    assert_eq!(
        store.statuses(&[b, unknown, a]).await.unwrap(),
        vec![Some(JobStatus::Succeeded), None, Some(JobStatus::Running)]
    );
    assert!(store.statuses(&[]).await.unwrap().is_empty());
}

async fn a_jobs_spending_adds_up_across_its_writers_with_its_status<S: JobStore + Clone>(store: S) {
    let (job, other) = (TaskId::new(), TaskId::new());
    store.set_status(job, JobStatus::Running).await.unwrap();
    // Two workers charging at once: nothing is lost between them.
    let charges = (1..=20).map(|n| {
        let store = store.clone();
        async move { store.spend_tokens(job, n).await.unwrap() }
    });
    let answers = futures::future::join_all(charges).await;
    assert!(answers.iter().all(|a| a.status == Some(JobStatus::Running)));
    let mut totals: Vec<u64> = answers.iter().map(|a| a.tokens).collect();
    totals.sort_unstable();
    totals.dedup();
    assert_eq!(
        totals.len(),
        20,
        "each charge saw its own total: {totals:?}"
    );
    let spent = store.spend_tokens(job, 0).await.unwrap();
    assert_eq!(spent.tokens, (1..=20).sum::<u64>());
    // Another job's count is its own; a job with no status answers none.
    let fresh = store.spend_tokens(other, 5).await.unwrap();
    assert_eq!((fresh.tokens, fresh.status), (5, None));
    store.finish_job(job, None, &succeeded(job)).await.unwrap();
    assert_eq!(
        store.spend_tokens(job, 1).await.unwrap().status,
        Some(JobStatus::Succeeded)
    );
}

/// A new job's meta, submitted at `at` (ms).
fn meta(at: u64) -> proto::job::JobMeta {
    proto::job::JobMeta {
        id: TaskId::new(),
        tenant: None,
        request: proto::job::JobRequest {
            instruction: "x".into(),
            language: proto::Language::Python,
            language_reason: String::new(),
            constraints: None,
            test_requirements: None,
            max_iterations: 1,
            candidates: 1,
            max_tokens_total: None,
            rework: None,
            agent: None,
            memory: Default::default(),
        },
        submitted_at_ms: at,
        replans: 0,
        plan_tokens: Default::default(),
        plan_model_calls: 0,
        cache_key: None,
        max_functions: proto::job::DEFAULT_MAX_FUNCTIONS,
        request_id: None,
    }
}

/// A passing final outcome of `name`.
fn final_outcome(name: &str) -> FunctionOutcome {
    let mut outcome = FunctionOutcome::new(name);
    outcome.done = true;
    outcome.passed = true;
    outcome
}

async fn unfinished_jobs_are_listed_oldest_first_until_they_finish<S: JobStore + Clone>(store: S) {
    let (old, older, new) = (meta(2_000), meta(1_000), meta(9_000));
    for m in [&old, &older, &new] {
        store.create_job(m).await.unwrap();
    }
    assert_eq!(
        store.unfinished_before(5_000, 10).await.unwrap(),
        vec![older.id, old.id]
    );
    assert_eq!(
        store.unfinished_before(5_000, 1).await.unwrap(),
        vec![older.id]
    );
    store.forget_job(older.id).await.unwrap();
    assert_eq!(
        store.unfinished_before(5_000, 10).await.unwrap(),
        vec![old.id]
    );
    assert!(
        store
            .finish_job(old.id, None, &succeeded(old.id))
            .await
            .unwrap()
    );
    assert!(store.unfinished_before(5_000, 10).await.unwrap().is_empty());
    assert_eq!(
        store.unfinished_before(10_000, 10).await.unwrap(),
        vec![new.id]
    );
}

/// An integration's one read: the job, no result until it finishes, and the outcome of each
/// function of the plan that has one (final or partial), none of another job's.
async fn an_integration_reads_the_job_its_result_and_every_outcome_at_once<S: JobStore + Clone>(
    store: S,
) {
    let job = meta(1_000);
    let id = job.id;
    store.create_job(&job).await.unwrap();
    let plan = fan_in();
    assert!(store.start_job(&job, &plan, None).await.unwrap().first);
    let mut a = FunctionOutcome::new("a");
    a.done = true;
    a.passed = true;
    a.code = Some("def a(): return 1".into());
    let mut b1 = FunctionOutcome::new("b1");
    b1.attempts = 2;
    assert!(
        store
            .finish_function(id, &plan, &a, None, None)
            .await
            .unwrap()
            .stored
    );
    assert!(store.save_function(id, &b1, None).await.unwrap().stored);
    let other = TaskId::new();
    store
        .save_function(other, &FunctionOutcome::new("z"), None)
        .await
        .unwrap();

    let read = store.integration_view(id).await.unwrap();
    assert_eq!(read.view.meta, Some(job.clone()));
    assert_eq!(read.view.plan, Some(plan.clone()));
    assert!(read.result.is_none());
    let mut names: Vec<&str> = read.functions.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["a", "b1"]);
    assert_eq!(read.functions["a"], a);
    assert_eq!(read.functions["b1"], b1);

    assert!(store.finish_job(id, None, &succeeded(id)).await.unwrap());
    let read = store.integration_view(id).await.unwrap();
    assert_eq!(read.result.map(|r| r.job_id), Some(id));
    assert_eq!(read.view.status, Some(JobStatus::Succeeded));
    assert!(
        store
            .integration_view(other)
            .await
            .unwrap()
            .view
            .meta
            .is_none()
    );
}

/// An execution's verdict, in the one store operation that stores it, charges its tenant once,
/// gives its quota place back and brings its batch's webhook one verdict closer (due after the
/// last): on Redis and on the in-memory stores (`MemoryStore` linked to `MemoryJobs`) alike.
async fn a_verdict_charges_once_gives_its_place_back_and_makes_its_batch_due<
    E: Store,
    T: Quotas + Webhooks + Usage,
>(
    executions: E,
    rest: T,
) {
    let tenant = Some("acme");
    let (one, two, three) = (TaskId::new(), TaskId::new(), TaskId::new());
    let limits = store::quotas::Limits {
        in_flight: Some(2),
        ..Default::default()
    };
    assert_eq!(
        rest.admit(Kind::Executions, tenant, &[one, two], &limits)
            .await
            .unwrap(),
        Ok(())
    );
    assert!(
        rest.admit(Kind::Executions, tenant, &[three], &limits)
            .await
            .unwrap()
            .is_err()
    );
    let record = proto::api::ExecutionBatchRecord {
        id: TaskId::new(),
        tenant: tenant.map(str::to_owned),
        items: vec![("a".into(), one), ("b".into(), two)],
    };
    rest.register_execution_batch(&record, "https://hooks.test/executions")
        .await
        .unwrap();
    assert_eq!(
        rest.execution_batch(record.id).await.unwrap(),
        Some(record.clone())
    );
    let started = proto::now_ms();
    let mut verdict = ExecutionResult::error(Status::Passed, "");
    verdict.cpu_ms = Some(7);
    assert!(
        executions
            .complete_execution(one, tenant, &verdict)
            .await
            .unwrap()
    );
    assert!(
        !executions
            .complete_execution(one, tenant, &verdict)
            .await
            .unwrap()
    );
    assert_eq!(
        rest.admit(Kind::Executions, tenant, &[three], &limits)
            .await
            .unwrap(),
        Ok(()),
        "one place came back"
    );
    let lease = Duration::from_secs(60);
    assert!(rest.claim_due(lease, 10).await.unwrap().is_empty());
    assert!(
        executions
            .complete_execution(two, tenant, &verdict)
            .await
            .unwrap()
    );
    assert_eq!(
        rest.claim_due(lease, 10).await.unwrap(),
        vec![(HookKind::ExecutionBatch, record.id)]
    );
    let usage = rest
        .usage(tenant, started, proto::now_ms() + 1)
        .await
        .unwrap();
    assert_eq!(
        (usage.executions, usage.sandbox_cpu_ms),
        (2, 14),
        "charged once each"
    );
}

#[tokio::test]
async fn a_verdict_ends_alike_on_redis() {
    let store = redis_store();
    a_verdict_charges_once_gives_its_place_back_and_makes_its_batch_due(store.clone(), store).await;
}

#[tokio::test]
async fn a_verdict_ends_alike_in_memory() {
    let jobs = store::MemoryJobs::new();
    let executions = store::MemoryStore::new().with_jobs(&jobs);
    a_verdict_charges_once_gives_its_place_back_and_makes_its_batch_due(executions, jobs).await;
}

/// Every case, once against each store.
macro_rules! against_both_stores {
    ($($case:ident),* $(,)?) => {
        mod redis {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(super::redis_store()).await
                }
            )*
        }
        mod memory {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(store::MemoryJobs::new()).await
                }
            )*
        }
    };
}

against_both_stores!(
    the_last_dependency_releases_a_dependant_exactly_once_under_concurrency,
    events_are_read_in_order_after_a_cursor,
    writes_carry_their_events_and_answer_the_status,
    a_final_function_outcome_is_written_once_and_partial_writes_stop_after_it,
    a_failed_function_releases_nothing_and_starts_the_integration,
    a_jobs_end_gives_its_place_back_and_makes_its_webhooks_due,
    published_functions_are_remembered,
    a_job_finishes_once_with_its_event_and_status_and_stays_finished,
    unfinished_jobs_are_listed_oldest_first_until_they_finish,
    many_statuses_are_read_at_once_in_order,
    a_jobs_spending_adds_up_across_its_writers_with_its_status,
    an_integration_reads_the_job_its_result_and_every_outcome_at_once,
);

#[tokio::test]
async fn an_event_wait_wakes_on_the_new_events_notice() {
    let options = redis_options();
    let (waiter, listener) = RedisStore::build(options.clone()).unwrap();
    let cancel = tokio_util::sync::CancellationToken::new();
    tokio::spawn(listener.with_job_events().run(cancel.clone()));
    let writer = RedisStore::build(options).unwrap().0;
    let job = TaskId::new();
    writer
        .push_event(job, &Progress::Queued { job_id: job })
        .await
        .unwrap();
    let first = waiter
        .wait_events(job, None, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(first.len(), 1);
    // Subscribed, then time a wake-up.
    subscribed(&waiter, &writer).await;
    for event in [Progress::Planning, Progress::finished(&succeeded(job))] {
        let after = waiter
            .events(job, None)
            .await
            .unwrap()
            .last()
            .unwrap()
            .id
            .clone();
        let writer = writer.clone();
        let push = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            match event {
                Progress::Finished { .. } => {
                    assert!(writer.finish_job(job, None, &succeeded(job)).await.unwrap());
                }
                event => writer.push_event(job, &event).await.unwrap(),
            }
        });
        let started = std::time::Instant::now();
        let events = waiter
            .wait_events(job, Some(&after), Duration::from_secs(10))
            .await
            .unwrap();
        let waited = started.elapsed();
        push.await.unwrap();
        assert_eq!(events.len(), 1, "{events:?}");
        assert!(
            waited < Duration::from_secs(4),
            "woken after {waited:?}: by the safety poll, not the notice"
        );
    }
    cancel.cancel();
}

/// A batch's long poll (`GET /v1/batches/{id}?wait_ms=`) wakes when one of its jobs finishes:
/// every watch of that batch (two clients of one batch), and no watch of another batch.
#[tokio::test]
async fn a_batch_watch_wakes_when_one_of_its_jobs_finishes() {
    let options = redis_options();
    let (watcher, listener) = RedisStore::build(options.clone()).unwrap();
    let cancel = tokio_util::sync::CancellationToken::new();
    tokio::spawn(listener.with_job_events().run(cancel.clone()));
    let writer = RedisStore::build(options).unwrap().0;
    let (ours, theirs) = two_batches();
    writer.put_batch(&ours).await.unwrap();
    writer.put_batch(&theirs).await.unwrap();
    subscribed(&watcher, &writer).await;
    batch_watches_wake(&watcher, &writer, &ours, &theirs).await;
    cancel.cancel();
}

#[tokio::test]
async fn a_batch_watch_wakes_in_memory_too() {
    let jobs = store::MemoryJobs::new();
    let (ours, theirs) = two_batches();
    jobs.put_batch(&ours).await.unwrap();
    jobs.put_batch(&theirs).await.unwrap();
    batch_watches_wake(&jobs, &jobs, &ours, &theirs).await;
}

/// A batch of two jobs, and another of one.
fn two_batches() -> (proto::job::Batch, proto::job::Batch) {
    let batch = |jobs: Vec<TaskId>| proto::job::Batch {
        id: TaskId::new(),
        tenant: None,
        jobs,
        submitted_at_ms: proto::now_ms(),
    };
    (
        batch(vec![TaskId::new(), TaskId::new()]),
        batch(vec![TaskId::new()]),
    )
}

/// Two watches of one batch wake when one of its jobs finishes; a watch of another does not.
async fn batch_watches_wake<S: JobStore>(
    watcher: &S,
    writer: &S,
    ours: &proto::job::Batch,
    theirs: &proto::job::Batch,
) {
    let first = watcher.watch_batch(ours.id).unwrap();
    let second = watcher.watch_batch(ours.id).unwrap();
    let other = watcher.watch_batch(theirs.id).unwrap();
    let (mut woken_first, mut woken_second, mut woken_other) = (
        Box::pin(first.notified()),
        Box::pin(second.notified()),
        Box::pin(other.notified()),
    );
    for notified in [&mut woken_first, &mut woken_second, &mut woken_other] {
        notified.as_mut().enable();
    }
    let job = ours.jobs[1];
    assert!(writer.finish_job(job, None, &succeeded(job)).await.unwrap());
    // Only bounds a failure: nothing but the notice wakes a watch.
    let wake = Duration::from_secs(60);
    tokio::time::timeout(wake, woken_first)
        .await
        .expect("the first watch of the batch woke");
    tokio::time::timeout(wake, woken_second)
        .await
        .expect("the second watch of the same batch woke too");
    assert!(
        tokio::time::timeout(Duration::from_millis(500), woken_other)
            .await
            .is_err(),
        "a job of another batch finished nothing of this one"
    );
    // A job finishing twice announces once (the result is stored once).
    drop((first, second));
    let again = watcher.watch_batch(ours.id).unwrap();
    let mut woken_again = Box::pin(again.notified());
    woken_again.as_mut().enable();
    assert!(!writer.finish_job(job, None, &succeeded(job)).await.unwrap());
    assert!(
        tokio::time::timeout(Duration::from_millis(500), woken_again)
            .await
            .is_err(),
        "a repeated finish announced nothing"
    );
}
