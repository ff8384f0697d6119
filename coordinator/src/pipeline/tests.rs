#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

//! The coordinator's side of the pipeline with in-memory fakes: events in, tasks out.

use std::sync::Arc;
use std::time::Duration;

use broker::{Broker, MemoryBroker, Queue};
use futures::StreamExt;
use proto::generation::{Complexity, FunctionSpec, Output};
use proto::job::{Event, FunctionOutcome, JobStatus, Tokens};
use proto::{Envelope, Task, TaskId};
use store::{JobStore, MemoryJobs, MemoryStore, PipelineEvents};
use tokio_util::sync::CancellationToken;

use crate::{Coordinator, Options};

fn coordinator(broker: &MemoryBroker, jobs: &MemoryJobs) -> Coordinator {
    Coordinator::build(
        Options::default(),
        Arc::new(broker.clone()),
        Arc::new(MemoryStore::new()),
        Arc::new(jobs.clone()),
        &prometheus::Registry::new(),
    )
    .unwrap()
}

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
    };
    c.jobs.create_job(&meta).await.unwrap();
    meta.id
}

/// Sends `event` as a worker does (to the inbox) and lets the coordinator handle it.
async fn event(c: &Coordinator, _broker: &MemoryBroker, event: Event) {
    c.jobs.send_pipeline_event(&event).await.unwrap();
    let mut taken = c
        .jobs
        .receive_pipeline_events("test", 1, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(taken.len(), 1, "the event is in the inbox");
    c.handle_inbox_event(taken.remove(0)).await;
}

/// The functions of the implement tasks waiting on the task queue, drained.
async fn published(broker: &MemoryBroker) -> Vec<String> {
    let mut names = Vec::new();
    let cancel = CancellationToken::new();
    let mut tasks = broker.consume(Queue::Tasks, 1, cancel.clone());
    while broker.len(Queue::Tasks) > 0 {
        let delivery = tasks.next().await.unwrap();
        match Envelope::decode(&delivery.body).unwrap().task {
            Task::Implement(t) => names.push(t.function),
            Task::Integrate(_) => names.push("<integrate>".into()),
            Task::Plan(t) => names.push(format!("<plan: {}>", t.problem.unwrap_or_default())),
            other => panic!("unexpected {other:?}"),
        }
        delivery.ack().await.unwrap();
    }
    names.sort();
    names
}

fn outcome(name: &str, passed: bool) -> FunctionOutcome {
    FunctionOutcome {
        name: name.into(),
        passed,
        done: true,
        tests: vec![],
        code: Some(format!("def {name}(): pass")),
        test_results: vec![],
        history: vec![],
        attempts: 1,
        failure: (!passed).then(|| "tests fail".into()),
        tokens: Tokens::default(),
        model_calls: 1,
        generation_ms: 0,
        execution_ms: 0,
        cpu_ms: 0,
        cached: false,
        validation: Default::default(),
    }
}

#[tokio::test]
async fn a_diamond_is_released_level_by_level_then_integrated() {
    let (broker, jobs) = (MemoryBroker::new(5), MemoryJobs::new());
    let c = coordinator(&broker, &jobs);
    let job = submit(&c).await;
    jobs.put_specs(
        job,
        &[
            spec("d", &["b", "c"]),
            spec("b", &["a"]),
            spec("c", &["a"]),
            spec("a", &[]),
        ],
    )
    .await
    .unwrap();
    event(
        &c,
        &broker,
        Event::Planned {
            job_id: job,
            failure: None,
        },
    )
    .await;
    assert_eq!(published(&broker).await, vec!["a"]);
    assert_eq!(jobs.status(job).await.unwrap(), Some(JobStatus::Running));

    for (done, expected) in [
        ("a", vec!["b", "c"]),
        ("b", vec![]),
        ("c", vec!["d"]),
        ("d", vec!["<integrate>"]),
    ] {
        jobs.put_function(job, &outcome(done, true)).await.unwrap();
        event(
            &c,
            &broker,
            Event::FunctionDone {
                job_id: job,
                function: done.into(),
            },
        )
        .await;
        assert_eq!(published(&broker).await, expected, "after {done}");
    }
    assert_eq!(
        jobs.status(job).await.unwrap(),
        Some(JobStatus::Integrating)
    );
}

#[tokio::test]
async fn a_function_that_cannot_pass_ends_the_job_through_integration() {
    let (broker, jobs) = (MemoryBroker::new(5), MemoryJobs::new());
    let c = coordinator(&broker, &jobs);
    let job = submit(&c).await;
    jobs.put_specs(job, &[spec("a", &[]), spec("b", &["a"])])
        .await
        .unwrap();
    event(
        &c,
        &broker,
        Event::Planned {
            job_id: job,
            failure: None,
        },
    )
    .await;
    published(&broker).await;
    jobs.put_function(job, &outcome("a", false)).await.unwrap();
    event(
        &c,
        &broker,
        Event::FunctionDone {
            job_id: job,
            function: "a".into(),
        },
    )
    .await;
    assert_eq!(
        published(&broker).await,
        vec!["<integrate>"],
        "b is not started on a failed a"
    );
}

#[tokio::test]
async fn a_dead_lettered_pipeline_task_fails_its_job_with_the_reason() {
    let (broker, jobs) = (MemoryBroker::new(1), MemoryJobs::new());
    let c = coordinator(&broker, &jobs);
    let job = submit(&c).await;
    c.publish_task(
        Task::Implement(proto::job::ImplementTask {
            job_id: job,
            function: "sieve".into(),
        }),
        None,
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
async fn a_plan_failure_from_the_model_is_recorded_as_the_reason() {
    let (broker, jobs) = (MemoryBroker::new(5), MemoryJobs::new());
    let c = coordinator(&broker, &jobs);
    let job = submit(&c).await;
    event(
        &c,
        &broker,
        Event::Planned {
            job_id: job,
            failure: Some("model answer for plan was invalid 3 times".into()),
        },
    )
    .await;
    let result = jobs.result(job).await.unwrap().unwrap();
    assert_eq!(result.status, JobStatus::Failed);
    assert!(result.failure.unwrap().contains("invalid 3 times"));
}

#[tokio::test]
async fn an_event_that_contradicts_the_stored_state_fails_its_job_at_once() {
    let (broker, jobs) = (MemoryBroker::new(5), MemoryJobs::new());
    let c = coordinator(&broker, &jobs);
    let job = submit(&c).await;
    // `planned` although no specs were stored: no wait will make them appear.
    event(
        &c,
        &broker,
        Event::Planned {
            job_id: job,
            failure: None,
        },
    )
    .await;
    let result = jobs.result(job).await.unwrap().unwrap();
    assert_eq!(result.status, JobStatus::Failed);
    let failure = result.failure.unwrap();
    assert!(
        failure.contains("cannot apply a pipeline event")
            && failure.contains("without stored specs"),
        "{failure}"
    );
    // Settled: nothing is left in the inbox, neither new nor pending, to cycle towards the
    // delivery limit.
    let new = jobs
        .receive_pipeline_events("test", 1, Duration::from_millis(100))
        .await
        .unwrap();
    let pending = jobs
        .claim_pipeline_events("test", Duration::ZERO, 1)
        .await
        .unwrap();
    assert!(
        new.is_empty() && pending.is_empty(),
        "the event was not settled"
    );
}

#[tokio::test]
async fn once_integration_started_finishing_functions_release_nothing() {
    let (broker, jobs) = (MemoryBroker::new(5), MemoryJobs::new());
    let c = coordinator(&broker, &jobs);
    let job = submit(&c).await;
    jobs.put_specs(job, &[spec("a", &[]), spec("b", &[]), spec("c", &["b"])])
        .await
        .unwrap();
    event(
        &c,
        &broker,
        Event::Planned {
            job_id: job,
            failure: None,
        },
    )
    .await;
    assert_eq!(published(&broker).await, vec!["a", "b"]);
    jobs.put_function(job, &outcome("a", false)).await.unwrap();
    event(
        &c,
        &broker,
        Event::FunctionDone {
            job_id: job,
            function: "a".into(),
        },
    )
    .await;
    assert_eq!(published(&broker).await, vec!["<integrate>"]);
    // b passes afterwards: c must not start, integration is already assembling the result.
    jobs.put_function(job, &outcome("b", true)).await.unwrap();
    event(
        &c,
        &broker,
        Event::FunctionDone {
            job_id: job,
            function: "b".into(),
        },
    )
    .await;
    assert!(published(&broker).await.is_empty());
}

#[tokio::test]
async fn redelivered_events_publish_only_what_a_crash_left_unpublished() {
    let (broker, jobs) = (MemoryBroker::new(5), MemoryJobs::new());
    let c = coordinator(&broker, &jobs);
    let job = submit(&c).await;
    let specs = [spec("a", &[]), spec("b", &["a"]), spec("c", &["a"])];
    jobs.put_specs(job, &specs).await.unwrap();
    let planned = Event::Planned {
        job_id: job,
        failure: None,
    };
    event(&c, &broker, planned.clone()).await;
    assert_eq!(published(&broker).await, vec!["a"]);
    // The same event again (its ack was lost): a is running already, nothing new.
    event(&c, &broker, planned).await;
    assert!(published(&broker).await.is_empty());

    // A coordinator released b and c in Redis, then died before publishing them.
    jobs.put_function(job, &outcome("a", true)).await.unwrap();
    let plan = jobs.plan(job).await.unwrap().unwrap();
    let completion = jobs.complete_function(job, &plan, "a", None).await.unwrap();
    assert_eq!((completion.first, completion.ready.len()), (true, 2));
    let done = Event::FunctionDone {
        job_id: job,
        function: "a".into(),
    };
    // Its event is redelivered to another coordinator: b and c are published, once.
    event(&c, &broker, done.clone()).await;
    assert_eq!(published(&broker).await, vec!["b", "c"]);
    event(&c, &broker, done).await;
    assert!(published(&broker).await.is_empty(), "never twice");
}

#[tokio::test]
async fn a_plan_stored_by_a_coordinator_that_died_still_starts_its_roots() {
    let (broker, jobs) = (MemoryBroker::new(5), MemoryJobs::new());
    let c = coordinator(&broker, &jobs);
    let job = submit(&c).await;
    let specs = vec![spec("a", &[]), spec("b", &[]), spec("c", &["a", "b"])];
    jobs.put_specs(job, &specs).await.unwrap();
    let plan = crate::planning::plan(specs, 16).unwrap();
    assert!(jobs.put_plan(job, &plan).await.unwrap());
    event(
        &c,
        &broker,
        Event::Planned {
            job_id: job,
            failure: None,
        },
    )
    .await;
    assert_eq!(published(&broker).await, vec!["a", "b"]);
}

#[tokio::test]
async fn generation_jobs_take_only_languages_the_pipeline_supports() {
    let (broker, jobs) = (MemoryBroker::new(5), MemoryJobs::new());
    let c = coordinator(&broker, &jobs);
    for language in ["javascript", "bash", "sh"] {
        let submission =
            serde_json::from_value(serde_json::json!({"instruction": "x", "language": language}))
                .unwrap();
        let error = crate::jobs::validate(&c.options, submission).unwrap_err();
        assert_eq!(error.status(), axum::http::StatusCode::UNPROCESSABLE_ENTITY);
        assert!(
            error.message().starts_with("language: ") && error.message().contains("python only"),
            "{}",
            error.message()
        );
    }
    let submission =
        serde_json::from_value(serde_json::json!({"instruction": "x", "language": "py"})).unwrap();
    assert!(crate::jobs::validate(&c.options, submission).is_ok());
}

#[tokio::test]
async fn a_job_past_its_deadline_fails_with_that_reason_and_a_fresh_one_is_left_alone() {
    let (broker, jobs) = (MemoryBroker::new(5), MemoryJobs::new());
    let options = Options {
        job_deadline: Duration::from_secs(60),
        ..Options::default()
    };
    let c = Coordinator::build(
        options,
        Arc::new(broker.clone()),
        Arc::new(MemoryStore::new()),
        Arc::new(jobs.clone()),
        &prometheus::Registry::new(),
    )
    .unwrap();
    let overdue = submit(&c).await; // submitted at 0 ms: long past the deadline
    let mut fresh = jobs.job_meta(submit(&c).await).await.unwrap().unwrap();
    fresh.submitted_at_ms = crate::now_ms();
    let fresh_id = fresh.id;
    jobs.forget_job(fresh_id).await.unwrap();
    jobs.create_job(&fresh).await.unwrap();

    assert_eq!(c.reap_overdue_once().await.unwrap(), 1);
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
    assert_eq!(c.reap_overdue_once().await.unwrap(), 0);
}

/// A job of one function `a` whose `Planned` event waits in the inbox, nobody's yet.
async fn planned_in_the_inbox() -> (MemoryBroker, MemoryJobs, Coordinator, TaskId) {
    let (broker, jobs) = (MemoryBroker::new(5), MemoryJobs::new());
    let c = coordinator(&broker, &jobs);
    let job = submit(&c).await;
    jobs.put_specs(job, &[spec("a", &[])]).await.unwrap();
    jobs.send_pipeline_event(&Event::Planned {
        job_id: job,
        failure: None,
    })
    .await
    .unwrap();
    (broker, jobs, c, job)
}

/// A coordinator that took an event and died never settles it: another claims it once it
/// has been pending for `CLAIM_IDLE`, and the job goes on.
#[tokio::test(start_paused = true)]
async fn an_event_a_dead_coordinator_took_is_claimed_and_applied_by_another() {
    let (broker, jobs, c, _) = planned_in_the_inbox().await;
    let taken = jobs
        .receive_pipeline_events("dead", 1, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(taken.len(), 1);
    let cancel = CancellationToken::new();
    let reader = tokio::spawn(c.clone().consume_events(cancel.clone()));
    let started = tokio::time::Instant::now();
    let mut names = Vec::new();
    while names.is_empty() && started.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        names = published(&broker).await;
    }
    assert_eq!(names, vec!["a"]);
    assert!(
        started.elapsed() >= crate::inbox::CLAIM_IDLE - Duration::from_secs(1),
        "claimed from a live holder after {:?}",
        started.elapsed()
    );
    cancel.cancel();
    reader.await.unwrap();
    // Settled by the one that applied it.
    assert!(
        jobs.claim_pipeline_events("test", Duration::ZERO, 1)
            .await
            .unwrap()
            .is_empty()
    );
}

/// An event that every coordinator took and none settled (each stopped on it) fails its job
/// with the reason once past the delivery limit, and leaves the inbox.
#[tokio::test]
async fn an_event_past_its_delivery_limit_fails_its_job_with_the_reason() {
    let (broker, jobs, c, job) = planned_in_the_inbox().await;
    let mut entry = jobs
        .receive_pipeline_events("c0", 1, Duration::from_secs(1))
        .await
        .unwrap()
        .remove(0);
    for i in 1..=crate::inbox::DELIVERY_LIMIT {
        entry = jobs
            .claim_pipeline_events(&format!("c{i}"), Duration::ZERO, 1)
            .await
            .unwrap()
            .remove(0);
    }
    assert_eq!(entry.deliveries, crate::inbox::DELIVERY_LIMIT + 1);
    c.handle_inbox_event(entry).await;
    let result = jobs.result(job).await.unwrap().unwrap();
    assert_eq!(result.status, JobStatus::Failed);
    let failure = result.failure.unwrap();
    assert!(failure.contains("taken 5 times"), "{failure}");
    assert!(published(&broker).await.is_empty(), "nothing was started");
    assert!(
        jobs.claim_pipeline_events("test", Duration::ZERO, 1)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_broker_outage_as_the_last_function_completes_still_integrates_the_job() {
    for passed in [true, false] {
        let (broker, jobs) = (MemoryBroker::new(5), MemoryJobs::new());
        let c = coordinator(&broker, &jobs);
        let job = submit(&c).await;
        jobs.put_specs(job, &[spec("a", &[])]).await.unwrap();
        event(
            &c,
            &broker,
            Event::Planned {
                job_id: job,
                failure: None,
            },
        )
        .await;
        assert_eq!(published(&broker).await, vec!["a"]);
        jobs.put_function(job, &outcome("a", passed)).await.unwrap();
        let done = Event::FunctionDone {
            job_id: job,
            function: "a".into(),
        };
        broker.set_down("maintenance");
        assert!(
            c.apply(&done).await.is_err(),
            "the integrate task cannot be published"
        );
        broker.set_up();
        // The retry finds the job `integrating`, written before the publish that failed.
        c.apply(&done).await.unwrap();
        assert_eq!(
            published(&broker).await,
            vec!["<integrate>"],
            "passed: {passed}"
        );
        // A further repeat publishes it no second time.
        c.apply(&done).await.unwrap();
        assert!(published(&broker).await.is_empty(), "passed: {passed}");
    }
}

/// A job planned with `specs` whose `planned` event met a broker outage: applied once while
/// the broker was down (and failed), the broker back up. Returns the event for its retries.
async fn planned_during_an_outage(
    specs: &[FunctionSpec],
) -> (MemoryBroker, MemoryJobs, Coordinator, TaskId, Event) {
    let (broker, jobs) = (MemoryBroker::new(5), MemoryJobs::new());
    let c = coordinator(&broker, &jobs);
    let job = submit(&c).await;
    jobs.put_specs(job, specs).await.unwrap();
    let planned = Event::Planned {
        job_id: job,
        failure: None,
    };
    broker.set_down("maintenance");
    assert!(c.apply(&planned).await.is_err(), "nothing can be published");
    broker.set_up();
    (broker, jobs, c, job, planned)
}

#[tokio::test]
async fn a_broker_outage_as_a_plan_is_accepted_still_starts_its_roots() {
    let (broker, _jobs, c, _job, planned) =
        planned_during_an_outage(&[spec("a", &[]), spec("b", &[]), spec("c", &["a"])]).await;
    // The retry finds the plan stored and the job `running`, both written before the publish.
    c.apply(&planned).await.unwrap();
    assert_eq!(published(&broker).await, vec!["a", "b"]);
    c.apply(&planned).await.unwrap();
    assert!(published(&broker).await.is_empty(), "published once");
}

#[tokio::test]
async fn a_broker_outage_as_a_plan_is_rejected_still_asks_for_another() {
    // A cycle: rejected, and asked for again once (MAX_REPLANS).
    let (broker, jobs, c, job, planned) =
        planned_during_an_outage(&[spec("a", &["b"]), spec("b", &["a"])]).await;
    // The retry finds the replan counted, written before the publish that failed: it
    // publishes that replan rather than taking it for one that ran.
    c.apply(&planned).await.unwrap();
    let tasks = published(&broker).await;
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    assert!(
        tasks[0].starts_with("<plan: ") && tasks[0].contains("cycle"),
        "{tasks:?}"
    );
    assert_ne!(jobs.status(job).await.unwrap(), Some(JobStatus::Failed));
    // The replan ran and planned a cycle again: now the job fails, with the reason.
    c.apply(&planned).await.unwrap();
    assert!(published(&broker).await.is_empty());
    let result = jobs.result(job).await.unwrap().unwrap();
    assert_eq!(result.status, JobStatus::Failed);
    assert!(
        result.failure.unwrap().contains("the plan was rejected"),
        "with the reason"
    );
}
