//! Unit tests with the in-memory broker and store and the scripted sandbox.

use std::sync::Arc;
use std::time::Duration;

use broker::{Broker, MemoryBroker, Outgoing, Queue};
use proto::{Envelope, ExecutionRequest, ExecutionResult, Language, Status, Task, TaskId};
use sandbox::ScriptedSandbox;
use store::{MemoryStore, Store};
use tokio_util::sync::CancellationToken;

use super::*;

fn passing(request: &ExecutionRequest) -> Result<ExecutionResult, sandbox::Error> {
    Ok(ExecutionResult {
        status: Status::Passed,
        exit_code: Some(0),
        stdout: request.code.clone(),
        stderr: String::new(),
        truncated: false,
        duration_ms: 1,
        reason: None,
        error_kind: None,
        files: Default::default(),
        file_errors: Default::default(),
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
        },
    )
}

fn worker(
    broker: &MemoryBroker,
    store: &MemoryStore,
    sandbox: ScriptedSandbox,
    options: Options,
) -> Worker {
    Worker::build(
        options,
        Arc::new(broker.clone()),
        Arc::new(store.clone()),
        Arc::new(sandbox),
        &prometheus::Registry::new(),
    )
    .unwrap()
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
    assert_eq!(w.handle(next(&broker).await).await, Outcome::Completed);
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
        .complete_execution(id, &ExecutionResult::error(Status::Failed, "earlier"))
        .await
        .unwrap();
    broker.publish(message).await.unwrap();
    assert_eq!(w.handle(next(&broker).await).await, Outcome::Duplicate);
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
    assert_eq!(w.handle(next(&broker).await).await, Outcome::Malformed);
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
    assert_eq!(w.handle(next(&broker).await).await, Outcome::Completed);
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
    assert_eq!(w.handle(next(&broker).await).await, Outcome::Requeued);
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
        broker.publish(message).await.unwrap();
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
