#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

//! A job's course with in-memory fakes: what each step publishes, and what a step taken again
//! (after a stop or a broker outage between its store and its publish) publishes.

use std::sync::Arc;

use broker::{Broker, MemoryBroker, Queue};
use futures::StreamExt;
use proto::generation::{Complexity, FunctionSpec, Output};
use proto::job::{FunctionOutcome, JobMeta, JobRequest, JobStatus, Plan, Tokens};
use proto::{Envelope, Language, Task, TaskId};
use store::{JobStore, MemoryJobs};
use tokio_util::sync::CancellationToken;

use crate::Flow;

fn spec(name: &str, deps: &[&str]) -> FunctionSpec {
    FunctionSpec {
        name: name.into(),
        purpose: "p".into(),
        inputs: vec![],
        outputs: Output {
            ty: "int".into(),
            description: "d".into(),
        },
        dependencies: deps.iter().map(|d| d.to_string()).collect(),
        complexity: Complexity::Simple,
    }
}

fn outcome(name: &str, passed: bool) -> FunctionOutcome {
    let mut outcome = FunctionOutcome::new(name);
    outcome.done = true;
    outcome.passed = passed;
    outcome.attempts = 1;
    outcome.code = Some(format!("def {name}(): pass"));
    outcome.failure = (!passed).then(|| "tests fail".into());
    outcome
}

/// A flow on fresh fakes, and a queued job planned as `specs`.
async fn job(specs: Vec<FunctionSpec>) -> (MemoryBroker, MemoryJobs, Flow, JobMeta, Plan) {
    let (broker, jobs) = (MemoryBroker::new(5), MemoryJobs::new());
    let flow = Flow::new(Arc::new(jobs.clone()), Arc::new(broker.clone()));
    let meta = JobMeta {
        id: TaskId::new(),
        tenant: None,
        request: JobRequest {
            instruction: "x".into(),
            language: Language::Python,
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
        submitted_at_ms: 0,
        replans: 0,
        plan_tokens: Tokens::default(),
        plan_model_calls: 0,
        cache_key: None,
        max_functions: proto::job::DEFAULT_MAX_FUNCTIONS,
        request_id: None,
    };
    jobs.create_job(&meta).await.unwrap();
    let plan = crate::plan(specs, 16).unwrap();
    (broker, jobs, flow, meta, plan)
}

/// The functions of the tasks waiting on the task queue (`<integrate>` for integration),
/// drained, sorted.
async fn published(broker: &MemoryBroker) -> Vec<String> {
    let mut names = Vec::new();
    let cancel = CancellationToken::new();
    let mut tasks = broker.consume(Queue::Tasks, 1, cancel.clone());
    while broker.len(Queue::Tasks) > 0 {
        let delivery = tasks.next().await.unwrap();
        match Envelope::decode(&delivery.body).unwrap().task {
            Task::Implement(t) => names.push(t.function),
            Task::Integrate(_) => names.push("<integrate>".into()),
            other => panic!("unexpected {other:?}"),
        }
        delivery.ack().await.unwrap();
    }
    names.sort();
    names
}

#[tokio::test]
async fn a_diamond_is_released_level_by_level_then_integrated() {
    let (broker, jobs, flow, meta, plan) = job(vec![
        spec("d", &["b", "c"]),
        spec("b", &["a"]),
        spec("c", &["a"]),
        spec("a", &[]),
    ])
    .await;
    assert_eq!(
        flow.start(&meta, &plan).await.unwrap(),
        Some(JobStatus::Running)
    );
    assert_eq!(published(&broker).await, vec!["a"]);
    for (done, next) in [
        ("a", vec!["b", "c"]),
        ("b", vec![]),
        ("c", vec!["d"]),
        ("d", vec!["<integrate>"]),
    ] {
        let finished = flow
            .finish_function(&meta, &plan, &outcome(done, true), None)
            .await
            .unwrap();
        assert!(finished.stored);
        assert_eq!(published(&broker).await, next, "after {done}");
    }
    assert_eq!(
        jobs.status(meta.id).await.unwrap(),
        Some(JobStatus::Integrating)
    );
}

#[tokio::test]
async fn a_function_that_cannot_pass_ends_the_job_through_integration() {
    let (broker, _jobs, flow, meta, plan) = job(vec![spec("a", &[]), spec("b", &["a"])]).await;
    flow.start(&meta, &plan).await.unwrap();
    assert_eq!(published(&broker).await, vec!["a"]);
    flow.finish_function(&meta, &plan, &outcome("a", false), None)
        .await
        .unwrap();
    assert_eq!(
        published(&broker).await,
        vec!["<integrate>"],
        "b is not started on a failed a"
    );
}

#[tokio::test]
async fn once_integration_started_finishing_functions_release_nothing() {
    let (broker, _jobs, flow, meta, plan) =
        job(vec![spec("a", &[]), spec("b", &[]), spec("c", &["b"])]).await;
    flow.start(&meta, &plan).await.unwrap();
    assert_eq!(published(&broker).await, vec!["a", "b"]);
    flow.finish_function(&meta, &plan, &outcome("a", false), None)
        .await
        .unwrap();
    assert_eq!(published(&broker).await, vec!["<integrate>"]);
    // b passes afterwards: c must not start, integration is already assembling the result.
    flow.finish_function(&meta, &plan, &outcome("b", true), None)
        .await
        .unwrap();
    assert!(published(&broker).await.is_empty());
}

#[tokio::test]
async fn a_step_taken_again_publishes_only_what_a_stopped_run_left_unpublished() {
    let (broker, jobs, flow, meta, plan) =
        job(vec![spec("a", &[]), spec("b", &["a"]), spec("c", &["a"])]).await;
    flow.start(&meta, &plan).await.unwrap();
    assert_eq!(published(&broker).await, vec!["a"]);
    // The plan task taken again (its ack was lost): a is running already, nothing new.
    flow.start(&meta, &plan).await.unwrap();
    assert!(published(&broker).await.is_empty());

    // A worker stored a's outcome (which released b and c) and stopped before publishing.
    let a = outcome("a", true);
    let stored = jobs
        .finish_function(meta.id, &plan, &a, None, None)
        .await
        .unwrap();
    assert_eq!(stored.completion.unwrap().ready.len(), 2);
    // a's task is taken again: b and c are published, once.
    let status = jobs.status(meta.id).await.unwrap();
    flow.resume_function(&meta, &plan, &a, status)
        .await
        .unwrap();
    assert_eq!(published(&broker).await, vec!["b", "c"]);
    flow.resume_function(&meta, &plan, &a, status)
        .await
        .unwrap();
    assert!(published(&broker).await.is_empty(), "never twice");
    // A duplicate run of a, finishing later, finds a's outcome standing and publishes nothing.
    let duplicate = flow
        .finish_function(&meta, &plan, &outcome("a", true), None)
        .await
        .unwrap();
    assert!(!duplicate.stored);
    assert!(published(&broker).await.is_empty());
}

/// Two runs of one plan task (its first worker stalled, its delivery went to another) plan
/// differently: the plan stored first stands, and the second run publishes its roots, not its
/// own.
#[tokio::test]
async fn a_second_plan_for_a_started_job_publishes_the_stored_plans_roots() {
    let (broker, jobs, flow, meta, first) = job(vec![spec("a", &[]), spec("b", &["a"])]).await;
    let second = crate::plan(vec![spec("b", &[]), spec("x", &[])], 16).unwrap();
    broker.set_down("the first run's publish fails");
    assert!(flow.start(&meta, &first).await.is_err());
    broker.set_up();
    flow.start(&meta, &second).await.unwrap();
    assert_eq!(published(&broker).await, vec!["a"]);
    assert_eq!(jobs.plan(meta.id).await.unwrap(), Some(first));
}

/// A refused plan is stored like an accepted one, so of two runs of one plan task the one that
/// stores first decides: a refusal first ends the job (and a later accepted plan starts
/// nothing); an accepted plan first stands (and a later refusal fails nothing).
#[tokio::test]
async fn whichever_run_stores_its_plan_first_decides_refused_or_started() {
    let refused = |reason: &str| {
        Plan::refused(
            vec![spec("x", &["y"]), spec("y", &["x"])],
            reason.to_owned(),
        )
    };
    let (broker, jobs, flow, meta, accepted) = job(vec![spec("a", &[])]).await;
    let status = flow
        .start(&meta, &refused("the plan was rejected: a cycle"))
        .await
        .unwrap();
    assert_eq!(status, Some(JobStatus::Failed));
    let result = jobs.result(meta.id).await.unwrap().unwrap();
    assert_eq!(
        result.failure.as_deref(),
        Some("the plan was rejected: a cycle")
    );
    assert_eq!(
        result.function_specs.len(),
        2,
        "the refused specs are shown"
    );
    assert_eq!(
        flow.start(&meta, &accepted).await.unwrap(),
        Some(JobStatus::Failed)
    );
    assert!(published(&broker).await.is_empty());

    let (broker, jobs, flow, meta, accepted) = job(vec![spec("a", &[])]).await;
    flow.start(&meta, &accepted).await.unwrap();
    assert_eq!(published(&broker).await, vec!["a"]);
    assert_eq!(
        flow.start(&meta, &refused("too late")).await.unwrap(),
        Some(JobStatus::Running)
    );
    assert!(published(&broker).await.is_empty());
    assert!(jobs.result(meta.id).await.unwrap().is_none());
}

/// Point 0 of the shape issue: a status written before the publish it announces must not be
/// read back by a retry as proof of that publish.
#[tokio::test]
async fn a_broker_outage_as_the_last_function_completes_still_integrates_the_job() {
    for passed in [true, false] {
        let (broker, jobs, flow, meta, plan) = job(vec![spec("a", &[])]).await;
        flow.start(&meta, &plan).await.unwrap();
        assert_eq!(published(&broker).await, vec!["a"]);
        let a = outcome("a", passed);
        broker.set_down("maintenance");
        let error = flow
            .finish_function(&meta, &plan, &a, None)
            .await
            .unwrap_err();
        assert!(error.is_retryable(), "{error}");
        broker.set_up();
        // The task taken again finds the job `integrating`, written before the publish that
        // failed, and the outcome stored.
        let status = jobs.status(meta.id).await.unwrap();
        assert_eq!(status, Some(JobStatus::Integrating));
        flow.resume_function(&meta, &plan, &a, status)
            .await
            .unwrap();
        assert_eq!(
            published(&broker).await,
            vec!["<integrate>"],
            "passed: {passed}"
        );
        // A further repeat publishes it no second time.
        flow.resume_function(&meta, &plan, &a, status)
            .await
            .unwrap();
        assert!(published(&broker).await.is_empty(), "passed: {passed}");
    }
}

#[tokio::test]
async fn a_broker_outage_as_a_plan_is_accepted_still_starts_its_roots() {
    let (broker, jobs, flow, meta, plan) =
        job(vec![spec("a", &[]), spec("b", &[]), spec("c", &["a"])]).await;
    broker.set_down("maintenance");
    assert!(flow.start(&meta, &plan).await.unwrap_err().is_retryable());
    broker.set_up();
    // The task taken again finds the plan stored and the job `running`, both written before
    // the publish.
    assert_eq!(
        jobs.status(meta.id).await.unwrap(),
        Some(JobStatus::Running)
    );
    flow.start(&meta, &plan).await.unwrap();
    assert_eq!(published(&broker).await, vec!["a", "b"]);
    flow.start(&meta, &plan).await.unwrap();
    assert!(published(&broker).await.is_empty(), "published once");
}

#[tokio::test]
async fn an_ended_job_starts_and_releases_nothing() {
    let (broker, jobs, flow, meta, plan) = job(vec![spec("a", &[]), spec("b", &["a"])]).await;
    let ended = flow
        .end_early(&meta, JobStatus::Cancelled, "cancelled by its tenant", &[])
        .await
        .unwrap();
    assert!(ended.now);
    assert_eq!(
        flow.start(&meta, &plan).await.unwrap(),
        Some(JobStatus::Cancelled)
    );
    assert!(published(&broker).await.is_empty());
    let finished = flow
        .finish_function(&meta, &plan, &outcome("a", true), None)
        .await
        .unwrap();
    assert_eq!(finished.completion, None);
    assert!(published(&broker).await.is_empty());
    assert_eq!(
        jobs.result(meta.id).await.unwrap().unwrap().status,
        JobStatus::Cancelled
    );
}

#[tokio::test]
async fn a_job_ended_early_keeps_what_it_produced_and_ends_once() {
    let (_broker, jobs, flow, meta, plan) = job(vec![spec("a", &[]), spec("b", &["a"])]).await;
    flow.start(&meta, &plan).await.unwrap();
    flow.finish_function(&meta, &plan, &outcome("a", true), None)
        .await
        .unwrap();
    let ended = flow
        .end_early(&meta, JobStatus::Failed, "deadline exceeded", &[])
        .await
        .unwrap();
    assert!(ended.now);
    assert_eq!(ended.result.status, JobStatus::Failed);
    assert_eq!(ended.result.failure.as_deref(), Some("deadline exceeded"));
    assert!(ended.result.implementations.contains_key("a"));
    assert_eq!(ended.result.function_specs.len(), 2);
    // A second ending (a dead letter after the deadline) finds the first result standing.
    let again = flow
        .end_early(&meta, JobStatus::Cancelled, "cancelled", &[])
        .await
        .unwrap();
    assert!(!again.now);
    assert_eq!(again.result.status, JobStatus::Failed);
    assert_eq!(jobs.status(meta.id).await.unwrap(), Some(JobStatus::Failed));
}

#[tokio::test]
async fn a_refused_plan_ends_the_job_with_the_specs_it_was_refused_with() {
    let (_broker, _jobs, flow, meta, _plan) = job(vec![spec("a", &[])]).await;
    let refused = vec![spec("x", &["y"]), spec("y", &["x"])];
    let problem = crate::plan(refused.clone(), 16).unwrap_err();
    let ended = flow
        .end_early(
            &meta,
            JobStatus::Failed,
            &format!("the plan was rejected: {problem}"),
            &refused,
        )
        .await
        .unwrap();
    assert_eq!(ended.result.function_specs, refused);
    assert!(
        ended
            .result
            .failure
            .unwrap()
            .contains("dependency cycle: x -> y -> x")
    );
}
