#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

//! The batch API with the in-memory broker and stores.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use broker::{Broker, MemoryBroker, Queue};
use futures::StreamExt;
use http_body_util::BodyExt;
use proto::job::JobStatus;
use proto::{Envelope, Task, TaskId};
use serde_json::{Value, json};
use store::{JobStore, MemoryJobs, MemoryStore};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::{Coordinator, Options};

fn coordinator(broker: &MemoryBroker, jobs: &MemoryJobs, options: Options) -> Coordinator {
    Coordinator::build(
        options,
        Arc::new(broker.clone()),
        store::Stores::bare(Arc::new(MemoryStore::new()), Arc::new(jobs.clone())),
        &prometheus::Registry::new(),
    )
    .unwrap()
}

async fn call(c: &Coordinator, method: &str, uri: &str, body: &str) -> (StatusCode, Value) {
    call_as(c, None, method, uri, body).await
}

async fn call_as(
    c: &Coordinator,
    key: Option<&str>,
    method: &str,
    uri: &str,
    body: &str,
) -> (StatusCode, Value) {
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/x-ndjson");
    if let Some(key) = key {
        request = request.header("authorization", format!("Bearer {key}"));
    }
    let request = request.body(Body::from(body.to_owned())).unwrap();
    let response = crate::router(c.clone()).oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// The batch id and job ids of a `202` answer to `POST /v1/batches`.
fn accepted(body: &Value) -> (String, Vec<TaskId>) {
    let batch_id = body["batch_id"].as_str().unwrap().to_owned();
    let ids = body["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j.as_str().unwrap().parse().unwrap())
        .collect();
    (batch_id, ids)
}

/// Plan tasks on the queue, in publishing order: their job ids.
async fn planned_jobs(broker: &MemoryBroker, n: usize) -> Vec<TaskId> {
    let mut tasks = broker.consume(Queue::Tasks, 64, CancellationToken::new());
    let mut ids = Vec::new();
    for _ in 0..n {
        let delivery = tokio::time::timeout(std::time::Duration::from_secs(5), tasks.next())
            .await
            .unwrap()
            .unwrap();
        let Task::Plan(task) = Envelope::decode(&delivery.body).unwrap().task else {
            panic!("not a plan task")
        };
        ids.push(task.job_id);
        delivery.ack().await.unwrap();
    }
    ids
}

const THREE: &str = r#"{"instruction": "sum the primes up to n", "max_iterations": 2}

{"instruction": "is it a palindrome?", "language": "python"}
{"instruction": "count, mean and median", "test_requirements": "cover the empty list"}
"#;

#[tokio::test]
async fn a_batch_creates_every_job_in_order_and_reports_their_statuses() {
    let (broker, jobs) = (MemoryBroker::new(5), MemoryJobs::new());
    let c = coordinator(&broker, &jobs, Options::default());
    let (status, body) = call(&c, "POST", "/v1/batches", THREE).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (batch_id, ids) = accepted(&body);
    assert_eq!(ids.len(), 3, "blank lines are skipped: {body}");

    // Every job is recorded with its own request, in input order, and has a plan task.
    let instructions: Vec<String> = {
        let mut v = Vec::new();
        for id in &ids {
            v.push(
                jobs.job_meta(*id)
                    .await
                    .unwrap()
                    .unwrap()
                    .request
                    .instruction,
            );
        }
        v
    };
    assert_eq!(
        instructions,
        [
            "sum the primes up to n",
            "is it a palindrome?",
            "count, mean and median"
        ]
    );
    let meta = jobs.job_meta(ids[0]).await.unwrap().unwrap();
    assert_eq!(meta.request.max_iterations, 2);
    let meta = jobs.job_meta(ids[2]).await.unwrap().unwrap();
    assert_eq!(
        meta.request.test_requirements.as_deref(),
        Some("cover the empty list")
    );
    let mut planned = planned_jobs(&broker, 3).await;
    planned.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(planned, expected);

    let (status, view) = call(&c, "GET", &format!("/v1/batches/{batch_id}"), "").await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["batch_id"], batch_id.as_str());
    assert_eq!(view["status"], "running");
    assert_eq!(view["counts"], json!({"queued": 3}));
    let listed: Vec<&str> = view["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_str().unwrap())
        .collect();
    let ids_text: Vec<String> = ids.iter().map(ToString::to_string).collect();
    assert_eq!(listed, ids_text, "input order");

    jobs.set_status(ids[0], JobStatus::Succeeded).await.unwrap();
    jobs.set_status(ids[1], JobStatus::Running).await.unwrap();
    let (_, view) = call(&c, "GET", &format!("/v1/batches/{batch_id}"), "").await;
    assert_eq!(view["status"], "running");
    assert_eq!(
        view["counts"],
        json!({"succeeded": 1, "running": 1, "queued": 1})
    );
    assert_eq!(view["jobs"][1]["status"], "running");

    jobs.set_status(ids[1], JobStatus::Failed).await.unwrap();
    jobs.set_status(ids[2], JobStatus::Succeeded).await.unwrap();
    let (_, view) = call(&c, "GET", &format!("/v1/batches/{batch_id}"), "").await;
    assert_eq!(view["status"], "done");
    assert_eq!(view["counts"], json!({"succeeded": 2, "failed": 1}));
    assert_eq!(
        view["jobs"][1],
        json!({"job_id": ids_text[1], "status": "failed"})
    );
}

/// `?wait_ms=&finished=`: the answer waits for another job to finish, no longer than asked,
/// and comes at once when the caller's count is already behind.
#[tokio::test(start_paused = true)]
async fn a_long_poll_of_a_batch_answers_when_another_job_finishes() {
    let (broker, jobs) = (MemoryBroker::new(5), MemoryJobs::new());
    let c = coordinator(&broker, &jobs, Options::default());
    let (_, body) = call(&c, "POST", "/v1/batches", THREE).await;
    let (batch_id, ids) = accepted(&body);
    let poll = |finished: u64, wait_ms: u64| {
        let (c, uri) = (
            c.clone(),
            format!("/v1/batches/{batch_id}?wait_ms={wait_ms}&finished={finished}"),
        );
        async move {
            let started = tokio::time::Instant::now();
            let (status, view) = call(&c, "GET", &uri, "").await;
            assert_eq!(status, StatusCode::OK, "{view}");
            (view, started.elapsed())
        }
    };

    // Nothing finished and the caller knows it: the answer waits, here for the whole wait.
    let (view, waited) = poll(0, 3_000).await;
    assert_eq!(view["counts"], json!({"queued": 3}));
    assert!(waited >= std::time::Duration::from_secs(3), "{waited:?}");

    // A job ends while the poll waits (through the store's one ending, which sends the
    // batch's notice): the answer comes then, with it.
    let finisher = {
        let jobs = jobs.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            let meta = jobs.job_meta(ids[1]).await.unwrap().unwrap();
            let ending = proto::ending::Ending::Early {
                status: JobStatus::Failed,
                reason: "the test ended it".into(),
            };
            let result = proto::job::JobResult::assemble(
                &meta,
                &[],
                &Default::default(),
                ending,
                proto::now_ms(),
            );
            assert!(jobs.finish_job(ids[1], None, &result).await.unwrap());
        })
    };
    let (view, waited) = poll(0, 30_000).await;
    finisher.await.unwrap();
    assert_eq!(view["counts"], json!({"queued": 2, "failed": 1}));
    assert!(
        waited >= std::time::Duration::from_secs(2) && waited < std::time::Duration::from_secs(3),
        "answered {waited:?} after the poll began, the job finished after 2 s"
    );

    // The caller saw none finished, one has: at once.
    let (view, waited) = poll(0, 30_000).await;
    assert_eq!(view["counts"], json!({"queued": 2, "failed": 1}));
    assert!(waited < std::time::Duration::from_millis(10), "{waited:?}");

    // A wait past `coordinator.wait` is held to it.
    let (_, waited) = poll(1, 600_000).await;
    let cap = Options::default().wait;
    assert!(
        waited >= cap && waited < cap + std::time::Duration::from_secs(1),
        "{waited:?}"
    );

    let (status, body) = call(
        &c,
        "GET",
        &format!("/v1/batches/{batch_id}?wait_ms=soon"),
        "",
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("wait_ms"),
        "{body}"
    );
    // Past the document's maxima: 422 naming the parameter.
    for (query, field) in [
        ("wait_ms=600001", "wait_ms"),
        ("finished=1000001", "finished"),
    ] {
        let uri = format!("/v1/batches/{batch_id}?{query}");
        let (status, body) = call(&c, "GET", &uri, "").await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{query}: {body}");
        assert!(body["error"].as_str().unwrap().starts_with(field), "{body}");
    }
}

#[tokio::test]
async fn a_bad_line_is_named_and_nothing_is_created() {
    for (body, status, needle) in [
        (
            "{\"instruction\": \"a\"}\n{\"instruction\": \"  \"}\n",
            StatusCode::UNPROCESSABLE_ENTITY,
            "line 2: instruction: must not be empty",
        ),
        (
            "{\"instruction\": \"a\"}\n\n{\"instruction\": \"b\", \"language\": \"cobol\"}",
            StatusCode::UNPROCESSABLE_ENTITY,
            "line 3: language",
        ),
        (
            "{\"instruction\": \"a\", \"max_iterations\": 0}",
            StatusCode::UNPROCESSABLE_ENTITY,
            "line 1: max_iterations",
        ),
        (
            "{\"instruction\": \"a\"}\n{\"instruction\": \"b\", \"colour\": \"blue\"}",
            StatusCode::BAD_REQUEST,
            "line 2: invalid job: colour: unknown field `colour`",
        ),
        (
            "{\"instruction\": \"a\"}\nnot json",
            StatusCode::BAD_REQUEST,
            "line 2: invalid job",
        ),
        ("\n  \n", StatusCode::UNPROCESSABLE_ENTITY, "body: no jobs"),
    ] {
        let (broker, jobs) = (MemoryBroker::new(5), MemoryJobs::new());
        let c = coordinator(&broker, &jobs, Options::default());
        let (got, answer) = call(&c, "POST", "/v1/batches", body).await;
        assert_eq!(got, status, "{body:?} -> {answer}");
        let message = answer["error"].as_str().unwrap();
        assert!(message.contains(needle), "{needle:?} not in {message:?}");
        assert_eq!(
            broker.len(Queue::Tasks),
            0,
            "nothing published for {body:?}"
        );
    }
}

#[tokio::test]
async fn a_batch_over_the_configured_size_is_refused() {
    let (broker, jobs) = (MemoryBroker::new(5), MemoryJobs::new());
    let options = Options {
        max_batch_jobs: 2,
        ..Options::default()
    };
    let c = coordinator(&broker, &jobs, options);
    let body = "{\"instruction\": \"a\"}\n".repeat(3);
    let (status, answer) = call(&c, "POST", "/v1/batches", &body).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("3 jobs is over the limit of 2"),
        "{answer}"
    );
    assert_eq!(broker.len(Queue::Tasks), 0);
    let (status, _) = call(&c, "POST", "/v1/batches", &body[..body.len() / 3 * 2]).await;
    assert_eq!(status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn unknown_and_malformed_batch_ids() {
    let (broker, jobs) = (MemoryBroker::new(5), MemoryJobs::new());
    let c = coordinator(&broker, &jobs, Options::default());
    let (status, answer) = call(&c, "GET", &format!("/v1/batches/{}", TaskId::new()), "").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("no batch"));
    let (status, answer) = call(&c, "GET", "/v1/batches/nope", "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("not a batch id"));
}

#[tokio::test]
async fn a_batch_that_cannot_be_queued_answers_503_and_stores_no_batch() {
    let (broker, jobs) = (MemoryBroker::new(5), MemoryJobs::new());
    broker.set_down("test: broker down");
    let c = coordinator(&broker, &jobs, Options::default());
    let (status, answer) = call(&c, "POST", "/v1/batches", THREE).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    assert_eq!(answer["code"], "broker_unavailable", "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("test: broker down")
    );
    // Refused before anything: the same batch, once the broker answers, is the only one.
    broker.set_up();
    let (status, answer) = call(&c, "POST", "/v1/batches", THREE).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    assert_eq!(broker.len(Queue::Tasks), 3);
}

#[tokio::test]
async fn a_batch_belongs_to_its_tenant() {
    let (broker, jobs) = (MemoryBroker::new(5), MemoryJobs::new());
    let options = Options {
        api_keys: [("acme", "k-acme"), ("globex", "k-globex")]
            .into_iter()
            .map(|(t, k)| (t.to_owned(), k.to_owned()))
            .collect(),
        ..Options::default()
    };
    let c = coordinator(&broker, &jobs, options);
    let (status, _) = call(&c, "POST", "/v1/batches", THREE).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = call_as(&c, Some("k-acme"), "POST", "/v1/batches", THREE).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let batch = body["batch_id"].as_str().unwrap().to_owned();
    let first: TaskId = body["jobs"][0].as_str().unwrap().parse().unwrap();
    let meta = jobs.job_meta(first).await.unwrap().unwrap();
    assert_eq!(
        meta.tenant.as_deref(),
        Some("acme"),
        "jobs carry the tenant"
    );

    let uri = format!("/v1/batches/{batch}");
    let (status, view) = call_as(&c, Some("k-acme"), "GET", &uri, "").await;
    assert_eq!(status, StatusCode::OK, "{view}");
    let (status, view) = call_as(&c, Some("k-globex"), "GET", &uri, "").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{view}");
    assert_eq!(view["error"], format!("no batch {batch}"), "as if unknown");
}
