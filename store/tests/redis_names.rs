//! On the real Redis (`CODEGEN_TEST_REDIS_URL`, default the local one): what the store writes
//! is found under the names running deployments have (read here with raw commands, spelled
//! out rather than built with `store::keys`), and the scripts that complete a name from a
//! value they read (a batch's webhook, through a job's link; the outcomes of a plan's
//! functions) reach the same names as the rest of the store.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use proto::api::ExecutionBatchRecord;
use proto::generation::{Complexity, FunctionSpec, Output};
use proto::job::{Batch, FunctionOutcome, JobResult, JobStatus, Plan};
use proto::{ExecutionResult, Progress, Status, TaskId};
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use store::index::{Index, Kind};
use store::limits::{LeaseDecision, SlowDown};
use store::quotas::Limits;
use store::webhooks::HookKind;
use store::{
    CacheStore, Idempotency, JobStore, Meters, Presence, Quotas, RedisLimits, RedisStore, Store,
    Tenants, Usage, Webhooks,
};

fn redis_url() -> String {
    std::env::var("CODEGEN_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into())
}

/// A store on a fresh prefix (so tests do not see each other's keys), and a raw connection.
async fn fresh() -> (RedisStore, MultiplexedConnection, String) {
    let prefix = format!("storetest-{}", TaskId::new());
    let options = store::Options {
        url: redis_url(),
        prefix: prefix.clone(),
        result_ttl: Duration::from_secs(600),
        ..store::Options::default()
    };
    let store = RedisStore::build(options).unwrap().0;
    let raw = redis::Client::open(redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    (store, raw, prefix)
}

/// Deletes every key of `prefix` (some have no time to live).
async fn clean(raw: &mut MultiplexedConnection, prefix: &str) {
    let keys: Vec<String> = raw.keys(format!("{prefix}:*")).await.unwrap();
    if !keys.is_empty() {
        let _: () = raw.del(keys).await.unwrap();
    }
}

async fn exists(raw: &mut MultiplexedConnection, key: &str) -> bool {
    raw.exists(key).await.unwrap()
}

fn succeeded(job: TaskId) -> JobResult {
    serde_json::from_value(serde_json::json!({
        "job_id": job, "status": "succeeded", "instruction": "x", "language": "python",
        "function_specs": [], "implementations": {}, "tests": {}, "test_results": [],
        "all_tests_passed": true, "improvement_history": [], "documentation": "",
        "quality": {"score": 1.0, "tests_passed": 0, "tests_total": 0, "coverage": 0.0,
                    "complexity": {}, "docstrings": 1.0, "dangerous_calls": []},
        "metrics": {"generation_ms": 0, "execution_ms": 0, "total_ms": 0, "model_calls": 3,
                    "tokens": {"prompt": 0, "completion": 0}, "cache": "miss"},
        "validation": "tested", "manual_review_recommended": false}))
    .unwrap()
}

fn meta(id: TaskId, tenant: Option<&str>) -> proto::job::JobMeta {
    proto::job::JobMeta {
        id,
        tenant: tenant.map(str::to_owned),
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
        submitted_at_ms: 1_000,
        replans: 0,
        plan_tokens: Default::default(),
        plan_model_calls: 0,
        cache_key: None,
        max_functions: proto::job::DEFAULT_MAX_FUNCTIONS,
        request_id: None,
    }
}

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

/// The finish script: the job's own webhook is due at once, its batch's once the batch's last
/// job ended; the tenant is charged once per job and its places in flight are freed.
#[tokio::test]
async fn finishing_jobs_makes_their_webhooks_due_and_charges_once() {
    let (store, mut raw, p) = fresh().await;
    let tenant = Some("acme");
    let (batch, first, second) = (TaskId::new(), TaskId::new(), TaskId::new());
    store
        .register_batch(batch, &[first, second], "http://hook", tenant)
        .await
        .unwrap();
    store
        .register_job(first, "http://hook", tenant)
        .await
        .unwrap();
    let limits = Limits {
        in_flight: Some(10),
        ..Limits::default()
    };
    assert_eq!(
        store
            .admit(Kind::Jobs, tenant, &[first, second], &limits)
            .await
            .unwrap(),
        Ok(())
    );
    assert_eq!(
        raw.zcard::<_, u64>(format!("{p}:inflight:jobs:acme"))
            .await
            .unwrap(),
        2
    );
    store
        .put_batch(&Batch {
            id: batch,
            tenant: tenant.map(str::to_owned),
            jobs: vec![first, second],
            submitted_at_ms: 1_000,
        })
        .await
        .unwrap();
    for id in [first, second] {
        store.create_job(&meta(id, tenant)).await.unwrap();
    }
    assert!(exists(&mut raw, &format!("{p}:batch:{batch}")).await);
    assert_eq!(
        raw.get::<_, String>(format!("{p}:job:{first}:batch"))
            .await
            .unwrap(),
        batch.to_string()
    );
    assert_eq!(
        raw.zcard::<_, u64>(format!("{p}:jobs:unfinished"))
            .await
            .unwrap(),
        2
    );

    let started = proto::now_ms();
    assert!(
        store
            .finish_job(first, tenant, &succeeded(first))
            .await
            .unwrap()
    );
    let due: Vec<String> = raw.zrange(format!("{p}:hooks:due"), 0, -1).await.unwrap();
    assert_eq!(due, vec![format!("job:{first}")]);
    let hook: HashMap<String, String> = raw
        .hgetall(format!("{p}:hook:batch:{batch}"))
        .await
        .unwrap();
    assert_eq!(hook["left"], "1");
    assert_eq!(hook["state"], "waiting");

    assert!(
        store
            .finish_job(second, tenant, &succeeded(second))
            .await
            .unwrap()
    );
    assert!(
        !store
            .finish_job(second, tenant, &succeeded(second))
            .await
            .unwrap(),
        "a job finishes once"
    );
    let mut due: Vec<String> = raw.zrange(format!("{p}:hooks:due"), 0, -1).await.unwrap();
    due.sort();
    let mut expected = vec![format!("job:{first}"), format!("batch:{batch}")];
    expected.sort();
    assert_eq!(due, expected);
    let hook: HashMap<String, String> = raw
        .hgetall(format!("{p}:hook:batch:{batch}"))
        .await
        .unwrap();
    assert_eq!(hook["left"], "0");
    assert_eq!(hook["state"], "pending");
    let job_hook: HashMap<String, String> =
        raw.hgetall(format!("{p}:hook:job:{first}")).await.unwrap();
    assert_eq!(job_hook["state"], "pending");

    // Charged once per job, on the hour's hash (or two, if an hour began meanwhile); nothing
    // left in flight or unfinished.
    let now = proto::now_ms();
    let usage = store.usage(tenant, started, now + 1).await.unwrap();
    assert_eq!((usage.jobs, usage.model_calls), (2, 6));
    let mut hours = vec![started - started % 3_600_000, now - now % 3_600_000];
    hours.dedup();
    let mut jobs = 0;
    for hour in hours {
        let charged: HashMap<String, u64> =
            raw.hgetall(format!("{p}:usage:acme:{hour}")).await.unwrap();
        jobs += charged.get("jobs").copied().unwrap_or(0);
    }
    assert_eq!(jobs, 2);
    assert_eq!(
        raw.zcard::<_, u64>(format!("{p}:inflight:jobs:acme"))
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        raw.zcard::<_, u64>(format!("{p}:jobs:unfinished"))
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        raw.get::<_, String>(format!("{p}:job:{second}:status"))
            .await
            .unwrap(),
        "succeeded"
    );
    assert!(exists(&mut raw, &format!("{p}:job:{second}:result")).await);
    assert_eq!(
        raw.xlen::<_, u64>(format!("{p}:job:{second}:events"))
            .await
            .unwrap(),
        1
    );

    // What the coordinators take, and an attempt recorded on it.
    let mut claimed = store.claim_due(Duration::from_secs(60), 10).await.unwrap();
    claimed.sort_by_key(|(kind, _)| kind.as_str());
    assert_eq!(
        claimed,
        vec![(HookKind::Batch, batch), (HookKind::Job, first)]
    );
    let attempt = proto::api::WebhookAttempt {
        at_ms: 1,
        status: Some(200),
        error: None,
        duration_ms: 1,
    };
    store
        .record_attempt(
            HookKind::Job,
            first,
            &attempt,
            store::webhooks::AttemptOutcome::Delivered,
        )
        .await
        .unwrap();
    assert_eq!(
        raw.llen::<_, u64>(format!("{p}:hook:job:{first}:attempts"))
            .await
            .unwrap(),
        1
    );
    let due: Vec<String> = raw.zrange(format!("{p}:hooks:due"), 0, -1).await.unwrap();
    assert_eq!(due, vec![format!("batch:{batch}")]);
    let hook = store.hook(HookKind::Job, first).await.unwrap().unwrap();
    assert_eq!(hook.view.attempts.len(), 1);
    clean(&mut raw, &p).await;
}

/// The verdict script: an execution batch's webhook is due after the verdict of its last
/// execution; each execution is charged once.
#[tokio::test]
async fn verdicts_make_their_execution_batchs_webhook_due_and_charge_once() {
    let (store, mut raw, p) = fresh().await;
    let (batch, first, second) = (TaskId::new(), TaskId::new(), TaskId::new());
    let record = ExecutionBatchRecord {
        id: batch,
        tenant: None,
        items: vec![("a".into(), first), ("b".into(), second)],
    };
    store
        .register_execution_batch(&record, "http://hook")
        .await
        .unwrap();
    assert!(exists(&mut raw, &format!("{p}:ebatch:{batch}")).await);
    assert_eq!(store.execution_batch(batch).await.unwrap(), Some(record));
    assert_eq!(
        raw.get::<_, String>(format!("{p}:exec:{first}:batch"))
            .await
            .unwrap(),
        batch.to_string()
    );
    let verdict = ExecutionResult::error(Status::Passed, "ok");
    let started = proto::now_ms();
    assert!(
        store
            .complete_execution(first, None, &verdict)
            .await
            .unwrap()
    );
    assert!(exists(&mut raw, &format!("{p}:exec:{first}:result")).await);
    let due: Vec<String> = raw.zrange(format!("{p}:hooks:due"), 0, -1).await.unwrap();
    assert!(due.is_empty(), "one execution is still running");
    assert!(
        store
            .complete_execution(second, None, &verdict)
            .await
            .unwrap()
    );
    assert!(
        !store
            .complete_execution(second, None, &verdict)
            .await
            .unwrap(),
        "a verdict is stored once"
    );
    let due: Vec<String> = raw.zrange(format!("{p}:hooks:due"), 0, -1).await.unwrap();
    assert_eq!(due, vec![format!("execution_batch:{batch}")]);
    let hook: HashMap<String, String> = raw
        .hgetall(format!("{p}:hook:execution_batch:{batch}"))
        .await
        .unwrap();
    assert_eq!(
        (hook["left"].as_str(), hook["state"].as_str()),
        ("0", "pending")
    );
    let usage = store
        .usage(None, started, proto::now_ms() + 1)
        .await
        .unwrap();
    assert_eq!(usage.executions, 2);
    assert_eq!(store.execution_result(first).await.unwrap(), Some(verdict));
    clean(&mut raw, &p).await;
}

/// A job's keys as the pipeline writes them, and the integration's read, whose script
/// completes the outcomes' keys with the names it reads.
#[tokio::test]
async fn a_jobs_state_is_under_its_names_and_read_back_whole() {
    let (store, mut raw, p) = fresh().await;
    let job = TaskId::new();
    let plan = Plan {
        specs: vec![spec("a", &[]), spec("b", &["a"])],
        dependants: BTreeMap::from([("a".into(), vec!["b".into()]), ("b".into(), vec![])]),
        refused: None,
        request_code: None,
    };
    store.create_job(&meta(job, None)).await.unwrap();
    let started = store
        .start_job(&meta(job, None), &plan, None)
        .await
        .unwrap();
    assert_eq!(started.status, Some(JobStatus::Running));
    let mut outcome = FunctionOutcome::new("a");
    outcome.done = true;
    outcome.passed = true;
    let done = Progress::FunctionDone {
        function: "a".into(),
        passed: true,
        attempts: 1,
    };
    let finished = store
        .finish_function(job, &plan, &outcome, None, Some(&done))
        .await
        .unwrap();
    assert!(finished.stored);
    assert_eq!(finished.status, Some(JobStatus::Running));
    let completion = finished.completion.unwrap();
    assert_eq!(
        (completion.ready, completion.first),
        (vec!["b".into()], true)
    );
    store.mark_published(job, &["b".into()]).await.unwrap();
    for part in [
        "meta",
        "status",
        "plan",
        "pending",
        "done",
        "fn:a",
        "fn:a:final",
        "published",
        "events",
    ] {
        assert!(
            exists(&mut raw, &format!("{p}:job:{job}:{part}")).await,
            "{part}"
        );
    }
    let view = store.integration_view(job).await.unwrap();
    assert_eq!(view.functions.get("a"), Some(&outcome));
    assert_eq!(view.view.plan, Some(plan));
    clean(&mut raw, &p).await;
}

/// The names of everything else the store keeps.
#[tokio::test]
async fn the_rest_of_the_state_is_under_its_names() {
    let (store, mut raw, p) = fresh().await;

    store
        .put_cached_solution("k1", &succeeded(TaskId::new()))
        .await
        .unwrap();
    assert!(store.look_up_function("k2").await.unwrap().is_none());
    assert!(exists(&mut raw, &format!("{p}:cache:solution:k1")).await);
    let counters: HashMap<String, u64> = raw.hgetall(format!("{p}:cache:stats")).await.unwrap();
    assert_eq!(counters["function_misses"], 1);
    assert_eq!(store.cache_stats().await.unwrap().solutions, 1);
    assert_eq!(store.clear_cache().await.unwrap(), 2);

    assert!(
        store
            .claim("acme:/v1/jobs:k", "h", Duration::from_secs(60))
            .await
            .unwrap()
            .is_none()
    );
    assert!(exists(&mut raw, &format!("{p}:idem:acme:/v1/jobs:k")).await);

    Tenants::register(&store, &BTreeMap::from([("acme".to_owned(), 3)]))
        .await
        .unwrap();
    let tenants: HashMap<String, u32> = raw.hgetall(format!("{p}:tenants")).await.unwrap();
    assert_eq!(tenants["acme"], 3);

    store
        .announce("w1", None, Some("{}"), Duration::from_secs(60))
        .await
        .unwrap();
    store
        .announce("w2", Some("no model"), None, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(
        raw.zcard::<_, u64>(format!("{p}:workers:able"))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        raw.get::<_, String>(format!("{p}:workers:unable:reason"))
            .await
            .unwrap(),
        "no model"
    );
    assert_eq!(
        raw.get::<_, String>(format!("{p}:workers:status:w1"))
            .await
            .unwrap(),
        "{}"
    );
    let generators = store.generators().await.unwrap();
    assert_eq!((generators.able, generators.unable), (1, 1));

    let id = TaskId::new();
    store.record(Kind::Jobs, None, 1_000, &[id]).await.unwrap();
    assert_eq!(
        raw.zcard::<_, u64>(format!("{p}:index:jobs:#"))
            .await
            .unwrap(),
        1
    );

    let slow = SlowDown {
        recovery: Duration::from_secs(30),
        debounce: Duration::from_secs(1),
        min_factor: 0.1,
        default_pause: Duration::from_millis(300),
    };
    let limits = RedisLimits::new(store.clone(), "scope", slow);
    assert_eq!(
        limits
            .lease("acme/1", "acme", 2, 0, Duration::from_secs(60))
            .await
            .unwrap(),
        LeaseDecision::Granted
    );
    assert_eq!(limits.leases().await.unwrap(), 1);
    assert_eq!(
        raw.zcard::<_, u64>(format!("{p}:limits:scope:leases"))
            .await
            .unwrap(),
        1
    );
    limits.throttled(None).await.unwrap();
    assert!(exists(&mut raw, &format!("{p}:limits:scope:slow")).await);
    store.take("api", "rps", 10.0, 10.0, 1).await.unwrap();
    assert!(exists(&mut raw, &format!("{p}:limits:api:rps")).await);
    clean(&mut raw, &p).await;
}
