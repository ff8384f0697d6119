//! `Idempotency-Key` on the routes that create work, against a real coordinator and Redis: a
//! retry with the same key and body gets the first answer and creates nothing; another body is
//! 409; a failed request leaves its key free; keys are per tenant.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use tests::Cluster;

async fn post(
    cluster: &Cluster,
    path: &str,
    tenant_key: &str,
    idempotency_key: &str,
    body: &Value,
) -> (u16, HeaderMap, Value) {
    let response = cluster
        .http
        .post(format!("{}{path}", cluster.url()))
        .bearer_auth(tenant_key)
        .header("Idempotency-Key", idempotency_key)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (
        status,
        headers,
        response.json().await.unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn a_retry_with_the_same_key_gets_the_first_answer_and_creates_nothing() {
    let cluster = Cluster::new()
        .with_env("CODEGEN__COORDINATOR__API_KEYS__ACME", "key-acme")
        .with_env("CODEGEN__COORDINATOR__API_KEYS__GLOBEX", "key-globex")
        // No worker runs here: a streamed batch ends after `wait` with its items queued.
        .with_env("CODEGEN__COORDINATOR__WAIT", "2s");
    let _coordinator = cluster.coordinator().await;
    let program = json!({"language": "python", "code": "print(1)"});
    let path = "/v1/executions?wait=false";

    let (status, headers, first) = post(&cluster, path, "key-acme", "run-1", &program).await;
    assert_eq!(status, 202, "{first}");
    assert!(headers.get("idempotent-replayed").is_none());
    let id = first["id"].as_str().unwrap().to_owned();
    let (status, headers, again) = post(&cluster, path, "key-acme", "run-1", &program).await;
    assert_eq!((status, &again), (202, &first));
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(again["id"], id.as_str());

    // The same key with another body is a conflict naming the key.
    let other = json!({"language": "python", "code": "print(2)"});
    let (status, _, body) = post(&cluster, path, "key-acme", "run-1", &other).await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("Idempotency-Key \"run-1\""),
        "{body}"
    );
    assert_eq!(body["code"], "idempotency_conflict", "{body}");
    assert_eq!(body["param"], "Idempotency-Key", "{body}");

    // Keys are per tenant: globex's run-1 is its own.
    let (status, _, theirs) = post(&cluster, path, "key-globex", "run-1", &program).await;
    assert_eq!(status, 202);
    assert_ne!(theirs["id"], id.as_str());

    // A request that failed leaves its key free for the corrected one.
    let bad = json!({"language": "cobol", "code": "x"});
    let (status, _, _) = post(&cluster, path, "key-acme", "run-2", &bad).await;
    assert_eq!(status, 422);
    let (status, headers, fixed) = post(&cluster, path, "key-acme", "run-2", &program).await;
    assert_eq!(status, 202, "{fixed}");
    assert!(headers.get("idempotent-replayed").is_none());

    // Jobs and batches of jobs too: the retry names the same job, the same batch.
    let job = json!({"instruction": "add two numbers"});
    let (status, _, first_job) = post(&cluster, "/v1/jobs", "key-acme", "job-1", &job).await;
    assert_eq!(status, 202, "{first_job}");
    let (_, headers, again_job) = post(&cluster, "/v1/jobs", "key-acme", "job-1", &job).await;
    assert_eq!(again_job["job_id"], first_job["job_id"]);
    assert_eq!(headers["idempotent-replayed"], "true");
    let batch = json!({"items": [{"language": "bash", "code": "echo hi"}]});
    let (status, _, first_batch) = post(
        &cluster,
        "/v1/executions/batch?wait=false",
        "key-acme",
        "batch-1",
        &batch,
    )
    .await;
    assert_eq!(status, 202, "{first_batch}");
    let (_, _, again_batch) = post(
        &cluster,
        "/v1/executions/batch?wait=false",
        "key-acme",
        "batch-1",
        &batch,
    )
    .await;
    assert_eq!(
        again_batch["results"][0]["execution_id"],
        first_batch["results"][0]["execution_id"]
    );

    // A streamed answer is recorded as it streams, and a retry after its end gets it whole.
    let stream = |key: &'static str| {
        cluster
            .http
            .post(format!("{}/v1/executions/batch?stream=true", cluster.url()))
            .bearer_auth("key-acme")
            .header("Idempotency-Key", key)
            .json(&batch)
            .send()
    };
    let first = stream("stream-1").await.unwrap();
    assert_eq!(first.status().as_u16(), 200);
    let first = first.text().await.unwrap();
    assert!(first.contains("execution_id"), "{first}");
    // The answer is stored just after the stream ended: until then, "in progress". The
    // deadline only bounds a failure.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let replayed = loop {
        let again = stream("stream-1").await.unwrap();
        if again.status().as_u16() == 200 {
            assert_eq!(again.headers()["idempotent-replayed"], "true");
            break again.text().await.unwrap();
        }
        assert_eq!(again.status().as_u16(), 409);
        let body: Value = again.json().await.unwrap();
        assert_eq!(body["code"], "idempotency_in_progress", "{body}");
        assert!(
            std::time::Instant::now() < deadline,
            "the streamed answer was never stored for a replay"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(replayed, first);
    cluster.cleanup().await;
}
