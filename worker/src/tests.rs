//! Unit tests with the in-memory broker and store and the scripted sandbox.

use std::sync::Arc;
use std::time::Duration;

use broker::{Broker, MemoryBroker, Outgoing, Queue};
use proto::{Envelope, ExecutionRequest, ExecutionResult, Language, Status, Task, TaskId};
use sandbox::ScriptedSandbox;
use store::{MemoryStore, Store, Stores};
use tokio_util::sync::CancellationToken;

use super::*;
use proto::now_ms;

fn passing(request: &ExecutionRequest) -> Result<ExecutionResult, sandbox::Error> {
    Ok(ExecutionResult {
        status: Status::Passed,
        exit_code: Some(0),
        stdout: request.code.clone(),
        stderr: String::new(),
        truncated: false,
        duration_ms: 1,
        cpu_ms: None,
        peak_memory_kb: None,
        reason: None,
        error_kind: None,
        files: Default::default(),
        file_errors: Default::default(),
        compile: None,
    })
}

fn task(code: &str) -> (TaskId, Outgoing) {
    let id = TaskId::new();
    let envelope = Envelope::new(
        id,
        None,
        now_ms(),
        Task::Execute(ExecutionRequest {
            language: Language::Python,
            code: code.into(),
            stdin: None,
            test: None,
            timeout_ms: 1000,
            cpu_time_ms: None,
            compile_timeout_ms: None,
            memory_mb: 64,
            fresh_container: false,
            files: Default::default(),
            return_files: Vec::new(),
        }),
    );
    (
        id,
        Outgoing {
            message_id: id.to_string(),
            body: envelope.encode(),
            lane: None,
            headers: Default::default(),
        },
    )
}

fn worker(
    broker: &MemoryBroker,
    store: &MemoryStore,
    sandbox: ScriptedSandbox,
    options: Options,
) -> Worker {
    worker_with(
        broker,
        &stores(store),
        sandbox,
        options,
        Gate::default(),
        None,
        None,
    )
}

/// A worker over `gate` that announces itself as `name`, with `pipeline`.
fn worker_with(
    broker: &MemoryBroker,
    stores: &Stores,
    sandbox: ScriptedSandbox,
    options: Options,
    gate: Gate,
    pipeline: Option<Pipeline>,
    name: Option<String>,
) -> Worker {
    Worker::build(
        options,
        Parts {
            broker: Arc::new(broker.clone()),
            stores,
            sandbox: Arc::new(sandbox),
            registry: &prometheus::Registry::new(),
            gate,
            pipeline,
            pool_size: None,
            name,
            sessions: None,
        },
    )
    .unwrap()
}

/// Executions on `store`, jobs in memory, nothing else.
fn stores(store: &MemoryStore) -> Stores {
    Stores::bare(Arc::new(store.clone()), Arc::new(store::MemoryJobs::new()))
}

async fn next(broker: &MemoryBroker) -> Delivery {
    broker
        .consume(Queue::Tasks, 1, CancellationToken::new())
        .next()
        .await
        .unwrap()
}

#[tokio::test]
async fn stores_the_result_then_acks() {
    let (broker, store) = (MemoryBroker::new(5), MemoryStore::new());
    let sandbox = ScriptedSandbox::new(passing);
    let w = worker(&broker, &store, sandbox.clone(), Options::default());
    let (id, message) = task("print(1)");
    broker.publish(message).await.unwrap();
    assert_eq!(
        w.handle(next(&broker).await, &CancellationToken::new())
            .await,
        Outcome::Completed
    );
    let result = store.execution_result(id).await.unwrap().unwrap();
    assert_eq!(result.status, Status::Passed);
    assert_eq!(result.stdout, "print(1)");
    assert_eq!(broker.len(Queue::Tasks), 0);
    assert_eq!(sandbox.runs(), 1);
}

#[tokio::test]
async fn a_redelivered_task_with_a_stored_result_is_not_run_again() {
    let (broker, store) = (MemoryBroker::new(5), MemoryStore::new());
    let sandbox = ScriptedSandbox::new(passing);
    let w = worker(&broker, &store, sandbox.clone(), Options::default());
    let (id, message) = task("x");
    store
        .complete_execution(id, None, &ExecutionResult::error(Status::Failed, "earlier"))
        .await
        .unwrap();
    broker.publish(message).await.unwrap();
    assert_eq!(
        w.handle(next(&broker).await, &CancellationToken::new())
            .await,
        Outcome::Duplicate
    );
    assert_eq!(sandbox.runs(), 0);
    let kept = store.execution_result(id).await.unwrap().unwrap();
    assert_eq!(kept.reason.as_deref(), Some("earlier"));
}

#[tokio::test]
async fn garbage_is_dead_lettered() {
    let (broker, store) = (MemoryBroker::new(5), MemoryStore::new());
    let w = worker(
        &broker,
        &store,
        ScriptedSandbox::new(passing),
        Options::default(),
    );
    broker.inject("junk", b"\xc1\xc1 not messagepack".to_vec());
    assert_eq!(
        w.handle(next(&broker).await, &CancellationToken::new())
            .await,
        Outcome::Malformed
    );
    assert_eq!(broker.len(Queue::DeadLetters), 1);
    assert_eq!(broker.len(Queue::Tasks), 0);
}

#[tokio::test]
async fn sandbox_failures_are_retried_then_reported() {
    let (broker, store) = (MemoryBroker::new(5), MemoryStore::new());
    let sandbox = ScriptedSandbox::new(|_| Err(sandbox::Error::Unavailable("docker down".into())));
    let w = worker(&broker, &store, sandbox.clone(), Options::default());
    let (id, message) = task("x");
    broker.publish(message).await.unwrap();
    assert_eq!(
        w.handle(next(&broker).await, &CancellationToken::new())
            .await,
        Outcome::Completed
    );
    assert_eq!(sandbox.runs(), 3, "one run plus two retries");
    let result = store.execution_result(id).await.unwrap().unwrap();
    assert_eq!(result.status, Status::SandboxError);
    assert!(result.reason.unwrap().contains("docker down"));
}

#[tokio::test]
async fn a_result_that_cannot_be_stored_goes_back_to_the_queue() {
    let (broker, store) = (MemoryBroker::new(5), MemoryStore::new());
    let options = Options {
        store_retry_for: Duration::from_millis(50),
        ..Options::default()
    };
    let w = worker(&broker, &store, ScriptedSandbox::new(passing), options);
    let (_, message) = task("x");
    broker.publish(message).await.unwrap();
    store.set_down("redis stopped");
    assert_eq!(
        w.handle(next(&broker).await, &CancellationToken::new())
            .await,
        Outcome::Requeued
    );
    assert_eq!(
        broker.len(Queue::Tasks),
        1,
        "the task waits for another try"
    );
}

#[tokio::test]
async fn run_processes_until_cancelled() {
    let (broker, store) = (MemoryBroker::new(5), MemoryStore::new());
    let w = worker(
        &broker,
        &store,
        ScriptedSandbox::new(passing),
        Options::default(),
    );
    let mut ids = Vec::new();
    for i in 0..5 {
        let (id, message) = task(&format!("print({i})"));
        ids.push(id);
        broker.publish_execution(message).await.unwrap();
    }
    let cancel = CancellationToken::new();
    let running = tokio::spawn(w.run(cancel.clone()));
    for id in &ids {
        let result = store
            .wait_execution(*id, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(result.is_some(), "task {id} was not processed");
    }
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .expect("worker did not stop")
        .unwrap();
}

/// A gate whose Redis probe asks `store` and whose Docker probe reads `docker_up`.
fn gate_over(
    store: &MemoryStore,
    docker_up: &Arc<std::sync::atomic::AtomicBool>,
) -> (Gate, gate::GateService) {
    let (store, docker_up) = (store.clone(), docker_up.clone());
    Gate::builder()
        .probe(Dependency::Redis, move || {
            let store = store.clone();
            async move { store.health().await }
        })
        .probe(Dependency::Docker, move || {
            let up = docker_up.load(std::sync::atomic::Ordering::SeqCst);
            async move {
                if up {
                    Ok(())
                } else {
                    Err("docker.sock refused".into())
                }
            }
        })
        .build(gate::Intervals {
            probe: Duration::from_millis(20),
            watch: Duration::from_millis(20),
        })
}

fn up() -> Arc<std::sync::atomic::AtomicBool> {
    Arc::new(std::sync::atomic::AtomicBool::new(true))
}

#[tokio::test]
async fn a_result_waits_for_redis_instead_of_going_back_to_the_queue() {
    let (broker, store) = (MemoryBroker::new(5), MemoryStore::new());
    let docker = up();
    let (gate, service) = gate_over(&store, &docker);
    let cancel = CancellationToken::new();
    tokio::spawn(service.run(cancel.clone()));
    let options = Options {
        store_retry_for: Duration::from_millis(50),
        ..Options::default()
    };
    let w = worker_with(
        &broker,
        &stores(&store),
        ScriptedSandbox::new(passing),
        options,
        gate,
        None,
        None,
    );
    let (id, message) = task("x");
    broker.publish(message).await.unwrap();
    let delivery = next(&broker).await;
    // Down after the task was taken: the write fails, the probe confirms, the task waits.
    store.set_down("redis stopped");
    let handling = tokio::spawn(async move { w.handle(delivery, &CancellationToken::new()).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !handling.is_finished(),
        "the task waits while redis is down"
    );
    store.set_up();
    assert_eq!(handling.await.unwrap(), Outcome::Completed);
    assert!(store.execution_result(id).await.unwrap().is_some());
    assert_eq!(broker.len(Queue::Tasks), 0);
    cancel.cancel();
}

#[tokio::test]
async fn past_outage_wait_a_task_goes_back_without_counting_towards_the_limit() {
    let (broker, store) = (MemoryBroker::new(1), MemoryStore::new());
    let docker = up();
    let (gate, service) = gate_over(&store, &docker);
    let cancel = CancellationToken::new();
    tokio::spawn(service.run(cancel.clone()));
    let options = Options {
        outage_wait: Duration::from_millis(100),
        ..Options::default()
    };
    let w = worker_with(
        &broker,
        &stores(&store),
        ScriptedSandbox::new(passing),
        options,
        gate,
        None,
        None,
    );
    let (id, message) = task("x");
    broker.publish(message).await.unwrap();
    store.set_down("redis stopped");
    // Far more hand-backs than the delivery limit of 1 allows returns.
    for _ in 0..4 {
        let delivery = next(&broker).await;
        assert_eq!(delivery.delivery_count, 0);
        assert_eq!(
            w.handle(delivery, &CancellationToken::new()).await,
            Outcome::HandedBack
        );
    }
    assert_eq!(broker.len(Queue::DeadLetters), 0);
    store.set_up();
    let delivery = next(&broker).await;
    assert_eq!(delivery.delivery_count, 0);
    assert_eq!(
        w.handle(delivery, &CancellationToken::new()).await,
        Outcome::Completed
    );
    assert!(store.execution_result(id).await.unwrap().is_some());
    cancel.cancel();
}

#[tokio::test]
async fn an_execution_waits_for_docker_instead_of_reporting_sandbox_error() {
    let (broker, store) = (MemoryBroker::new(5), MemoryStore::new());
    let docker = up();
    let (gate, service) = gate_over(&store, &docker);
    let cancel = CancellationToken::new();
    tokio::spawn(service.run(cancel.clone()));
    let flag = docker.clone();
    let sandbox = ScriptedSandbox::new(move |request| {
        if flag.load(std::sync::atomic::Ordering::SeqCst) {
            passing(request)
        } else {
            Err(sandbox::Error::Unavailable(
                "cannot connect to docker".into(),
            ))
        }
    });
    let w = worker_with(
        &broker,
        &stores(&store),
        sandbox.clone(),
        Options::default(),
        gate,
        None,
        None,
    );
    let (id, message) = task("x");
    broker.publish(message).await.unwrap();
    let delivery = next(&broker).await;
    docker.store(false, std::sync::atomic::Ordering::SeqCst);
    let handling = tokio::spawn(async move { w.handle(delivery, &CancellationToken::new()).await });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !handling.is_finished(),
        "the execution waits while docker is down"
    );
    docker.store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(handling.await.unwrap(), Outcome::Completed);
    let result = store.execution_result(id).await.unwrap().unwrap();
    assert_eq!(result.status, Status::Passed, "{result:?}");
    cancel.cancel();
}

#[tokio::test]
async fn a_worker_takes_no_work_while_a_dependency_is_down_and_resumes_by_itself() {
    let (broker, store) = (MemoryBroker::new(5), MemoryStore::new());
    let docker = up();
    docker.store(false, std::sync::atomic::Ordering::SeqCst);
    let (gate, service) = gate_over(&store, &docker);
    let cancel = CancellationToken::new();
    tokio::spawn(service.run(cancel.clone()));
    let w = worker_with(
        &broker,
        &stores(&store),
        ScriptedSandbox::new(passing),
        Options::default(),
        gate.clone(),
        None,
        None,
    );
    let mut rx = gate.subscribe();
    rx.wait_for(|down| down.contains_key(&Dependency::Docker))
        .await
        .unwrap();
    let running = tokio::spawn(w.run(cancel.clone()));
    let (id, message) = task("x");
    broker.publish_execution(message).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        broker.len(Queue::Executions),
        1,
        "not taken while docker is down"
    );
    docker.store(true, std::sync::atomic::Ordering::SeqCst);
    let result = store
        .wait_execution(id, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(result.unwrap().status, Status::Passed);
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .expect("worker stops")
        .unwrap();
}

#[tokio::test]
async fn a_worker_without_a_model_takes_no_generation_tasks_and_says_why() {
    let (broker, store) = (MemoryBroker::new(5), MemoryStore::new());
    let presence = store::MemoryPresence::default();
    let stores = Stores {
        presence: Some(Arc::new(presence.clone())),
        ..stores(&store)
    };
    let pipeline = Pipeline::new(
        pipeline::Options::default(),
        &stores,
        Arc::new(broker.clone()),
        None,
        Arc::new(ScriptedSandbox::new(passing)),
    )
    .without_model_because("model not configured: no base url".into());
    let w = worker_with(
        &broker,
        &stores,
        ScriptedSandbox::new(passing),
        Options::default(),
        Gate::default(),
        Some(pipeline),
        Some("w1".into()),
    );
    let job = proto::job::PlanTask {
        job_id: TaskId::new(),
        problem: None,
    };
    let plan = Envelope::new(TaskId::new(), None, now_ms(), Task::Plan(job));
    broker
        .publish(Outgoing {
            message_id: "plan".into(),
            body: plan.encode(),
            lane: None,
            headers: Default::default(),
        })
        .await
        .unwrap();
    let (id, execution) = task("print(1)");
    broker.publish_execution(execution).await.unwrap();
    let cancel = CancellationToken::new();
    let running = tokio::spawn(w.run(cancel.clone()));
    // Executions still run.
    let result = store
        .wait_execution(id, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(result.unwrap().status, Status::Passed);
    assert_eq!(broker.len(Queue::Tasks), 1, "the plan task was taken");
    let generators = presence.generators().await.unwrap();
    assert_eq!(generators.able, 0);
    assert!(
        generators
            .refusal()
            .is_some_and(|r| r.contains("model not configured: no base url")),
        "{generators:?}"
    );
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .expect("worker stops")
        .unwrap();
    // Gone from the presence once stopped.
    assert_eq!(presence.generators().await.unwrap().unable, 0);
}
