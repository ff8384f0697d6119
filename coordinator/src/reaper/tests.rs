#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

//! The coordinator's endings with in-memory fakes: overdue jobs, dead-lettered tasks.

use std::sync::Arc;
use std::time::Duration;

use broker::{Broker, MemoryBroker, Queue};
use futures::StreamExt;
use proto::job::{JobStatus, Tokens};
use proto::{Task, TaskId};
use store::{JobStore, MemoryJobs, MemoryStore};
use tokio_util::sync::CancellationToken;

use crate::{Coordinator, Options};

fn coordinator(options: Options, broker: &MemoryBroker, jobs: &MemoryJobs) -> Coordinator {
    Coordinator::build(
        options,
        Arc::new(broker.clone()),
        store::Stores::bare(Arc::new(MemoryStore::new()), Arc::new(jobs.clone())),
        &prometheus::Registry::new(),
    )
    .unwrap()
}

async fn submit(c: &Coordinator) -> TaskId {
    let meta = proto::job::JobMeta {
        id: TaskId::new(),
        tenant: None,
        request: crate::jobs::validate(
            &c.options,
            serde_json::from_value(serde_json::json!({"instruction": "x"})).unwrap(),
        )
        .unwrap(),
        submitted_at_ms: 0,
        replans: 0,
        plan_tokens: Tokens::default(),
        plan_model_calls: 0,
        cache_key: None,
        max_functions: proto::job::DEFAULT_MAX_FUNCTIONS,
        request_id: None,
    };
    c.stores.jobs.create_job(&meta).await.unwrap();
    meta.id
}

#[tokio::test]
async fn a_dead_lettered_pipeline_task_fails_its_job_with_the_reason() {
    let (broker, jobs) = (MemoryBroker::new(1), MemoryJobs::new());
    let c = coordinator(Options::default(), &broker, &jobs);
    let job = submit(&c).await;
    let meta = jobs.job_meta(job).await.unwrap().unwrap();
    c.flow
        .publish(
            Task::Implement(proto::job::ImplementTask {
                job_id: job,
                function: "sieve".into(),
            }),
            &meta,
        )
        .await
        .unwrap();
    let cancel = CancellationToken::new();
    let mut tasks = broker.consume(Queue::Tasks, 1, cancel.clone());
    // A task that kills every worker that takes it: it comes back until the limit.
    tasks.next().await.unwrap().requeue().await.unwrap();
    tasks.next().await.unwrap().requeue().await.unwrap();
    let dead = broker
        .consume(Queue::DeadLetters, 1, cancel)
        .next()
        .await
        .unwrap();
    c.dead_letter(dead).await;
    let result = jobs.result(job).await.unwrap().unwrap();
    assert_eq!(result.status, JobStatus::Failed);
    let failure = result.failure.unwrap();
    assert!(
        failure.contains("implementing sieve") && failure.contains("delivery limit"),
        "{failure}"
    );
}

#[tokio::test]
async fn a_job_past_its_deadline_fails_with_that_reason_and_a_fresh_one_is_left_alone() {
    let (broker, jobs) = (MemoryBroker::new(5), MemoryJobs::new());
    let options = Options {
        job_deadline: Duration::from_secs(60),
        ..Options::default()
    };
    let c = coordinator(options, &broker, &jobs);
    let overdue = submit(&c).await; // submitted at 0 ms: long past the deadline
    let mut fresh = jobs.job_meta(submit(&c).await).await.unwrap().unwrap();
    fresh.submitted_at_ms = crate::now_ms();
    let fresh_id = fresh.id;
    jobs.forget_job(fresh_id).await.unwrap();
    jobs.create_job(&fresh).await.unwrap();

    assert_eq!(crate::reaper::Reaper::build(&c).once().await.unwrap(), 1);
    let result = jobs.result(overdue).await.unwrap().unwrap();
    assert_eq!(result.status, JobStatus::Failed);
    let failure = result.failure.unwrap();
    assert!(
        failure.contains("deadline exceeded") && failure.contains("1m"),
        "{failure}"
    );
    assert_eq!(
        jobs.status(fresh_id).await.unwrap(),
        Some(JobStatus::Queued)
    );
    // Finished jobs are no longer candidates.
    assert_eq!(crate::reaper::Reaper::build(&c).once().await.unwrap(), 0);
}

#[tokio::test]
async fn generation_jobs_take_only_languages_the_pipeline_supports() {
    let (broker, jobs) = (MemoryBroker::new(5), MemoryJobs::new());
    let c = coordinator(Options::default(), &broker, &jobs);
    // The message lists the languages that generate, as the languages table says.
    let supported = format!(
        "{} only",
        proto::Language::ALL
            .iter()
            .filter(|l| l.spec().generation)
            .map(|l| l.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    assert!(
        supported.contains("bash") && supported.contains("rust"),
        "{supported}"
    );
    // Every language by its name: accepted when it generates, else 422 listing those that do.
    for language in proto::Language::ALL {
        let submission = serde_json::from_value(
            serde_json::json!({"instruction": "x", "language": language.as_str()}),
        )
        .unwrap();
        let validated = crate::jobs::validate(&c.options, submission);
        if language.spec().generation {
            assert!(validated.is_ok(), "{language}");
            continue;
        }
        let error = validated.unwrap_err();
        assert_eq!(error.status(), axum::http::StatusCode::UNPROCESSABLE_ENTITY);
        assert!(
            error.message().starts_with("language: ") && error.message().contains(&supported),
            "{}",
            error.message()
        );
    }
    for language in ["py", "javascript", "node", "sh", "golang", "rs"] {
        let submission =
            serde_json::from_value(serde_json::json!({"instruction": "x", "language": language}))
                .unwrap();
        assert!(crate::jobs::validate(&c.options, submission).is_ok());
    }
    // Without `language`: the one the request names, else Python; an explicit one wins.
    let job = |body: serde_json::Value| {
        crate::jobs::validate(&c.options, serde_json::from_value(body).unwrap())
    };
    let request =
        job(serde_json::json!({"instruction": "A Node.js helper that slugifies titles"})).unwrap();
    assert_eq!(request.language, proto::Language::Javascript);
    assert!(
        request.language_reason.contains("node.js"),
        "{}",
        request.language_reason
    );
    let request = job(serde_json::json!({"instruction": "sum a list"})).unwrap();
    assert_eq!(request.language, proto::Language::Python);
    assert!(request.language_reason.contains("default"));
    let request =
        job(serde_json::json!({"instruction": "sum a list", "constraints": "in JavaScript"}))
            .unwrap();
    assert_eq!(request.language, proto::Language::Javascript);
    let request =
        job(serde_json::json!({"instruction": "a bash script", "language": "python"})).unwrap();
    assert_eq!(request.language, proto::Language::Python);
    assert!(request.language_reason.contains("`language`"));
    let request = job(serde_json::json!({
        "instruction": "Create a bash script that monitors system resources"
    }))
    .unwrap();
    assert_eq!(request.language, proto::Language::Bash);
    // A language found in the request that does not generate is refused, naming it.
    let found = |l: &proto::Language| {
        proto::detect::named_language(&[&format!("in {l}")]).is_some_and(|(f, _)| f == *l)
    };
    if let Some(other) = proto::Language::ALL
        .iter()
        .find(|l| !l.spec().generation && found(l))
    {
        let refused =
            job(serde_json::json!({"instruction": format!("Write it in {other}")})).unwrap_err();
        assert_eq!(
            refused.status(),
            axum::http::StatusCode::UNPROCESSABLE_ENTITY
        );
        let message = refused.message();
        assert!(
            message.starts_with("language: ")
                && message.contains(&format!("{other} (the request names it"))
                && message.contains(&supported),
            "{message}"
        );
    }
}

#[tokio::test]
async fn debug_and_refactor_jobs_take_their_own_fields_and_only_those() {
    let (broker, jobs) = (MemoryBroker::new(5), MemoryJobs::new());
    let c = coordinator(Options::default(), &broker, &jobs);
    let job = |body: serde_json::Value| {
        crate::jobs::validate(&c.options, serde_json::from_value(body).unwrap())
    };
    let refused = |body: serde_json::Value, field: &str| {
        let error = job(body).unwrap_err();
        assert_eq!(error.status(), axum::http::StatusCode::UNPROCESSABLE_ENTITY);
        assert!(
            error.message().starts_with(&format!("{field}: ")),
            "{}",
            error.message()
        );
    };
    let code = "def f(x):\n    return x\n";
    refused(
        serde_json::json!({"instruction": "x", "code": code}),
        "code",
    );
    refused(
        serde_json::json!({"instruction": "x", "error": "boom"}),
        "error",
    );
    refused(
        serde_json::json!({"instruction": "x", "goals": ["speed"]}),
        "goals",
    );
    refused(
        serde_json::json!({"instruction": "x", "mode": "debug", "error": "boom"}),
        "code",
    );
    refused(
        serde_json::json!({"instruction": "x", "mode": "debug", "code": code}),
        "error",
    );
    refused(
        serde_json::json!({"instruction": "x", "mode": "debug", "code": "  ", "error": "boom"}),
        "code",
    );
    refused(
        serde_json::json!({"instruction": "x", "mode": "refactor", "code": code, "error": "boom"}),
        "error",
    );
    refused(
        serde_json::json!({"instruction": "x", "mode": "refactor", "code": code,
                           "goals": vec!["g"; 11]}),
        "goals",
    );
    let big = "x".repeat(Options::default().max_code_bytes + 1);
    refused(
        serde_json::json!({"instruction": "x", "mode": "refactor", "code": big}),
        "code",
    );
    let debug = job(
        serde_json::json!({"instruction": "x", "mode": "debug", "code": code,
                                       "error": " ZeroDivisionError \n"}),
    )
    .unwrap();
    assert_eq!(debug.mode(), proto::job::Mode::Debug);
    let rework = debug.rework.unwrap();
    assert_eq!(
        (rework.code.as_str(), rework.error.as_deref()),
        (code, Some("ZeroDivisionError"))
    );
    // A refactor without goals improves readability.
    let refactor =
        job(serde_json::json!({"instruction": "x", "mode": "refactor", "code": code})).unwrap();
    assert_eq!(refactor.rework.unwrap().goals, ["readability"]);
    // `generate`, named or not, takes none of them.
    let generate = job(serde_json::json!({"instruction": "x", "mode": "generate"})).unwrap();
    assert!(generate.rework.is_none());
}
