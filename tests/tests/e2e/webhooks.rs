//! Webhooks on the real cluster (two coordinators, a worker, RabbitMQ, Redis, Docker, a
//! scripted FAKE model server) against a receiver in this test: a job's end and a batch's end
//! are POSTed once each, signed with the tenant's secret, retried after a failed attempt, and
//! every attempt is shown on the resource; targets the operator did not allow are refused.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use hmac::{Hmac, Mac};
use reqwest::Method;
use serde_json::{Value, json};
use tests::Cluster;
use tests::faults::{ModelServer, distinct_job, distinct_jobs_script};

pub(super) const SECRET: &str = "acme-webhook-secret";

/// What the receiver got: path, headers, body, and the status it answered.
pub(super) type Received = Arc<Mutex<Vec<(String, HeaderMap, Value, u16)>>>;

/// A webhook receiver on loopback: the first POST to `/flaky` answers 500, everything else 200.
pub(super) async fn receiver() -> (u16, Received) {
    async fn receive(
        State(received): State<Received>,
        uri: Uri,
        headers: HeaderMap,
        body: Bytes,
    ) -> StatusCode {
        let mut received = received.lock().unwrap();
        let path = uri.path().to_owned();
        let first_flaky = path == "/flaky" && !received.iter().any(|(p, ..)| p == "/flaky");
        let status = if first_flaky {
            StatusCode::INTERNAL_SERVER_ERROR
        } else {
            StatusCode::OK
        };
        // The signature covers the raw body: keep it as sent, byte for byte (a header value
        // holds UTF-8 beyond ASCII as opaque bytes).
        let mut headers = headers;
        headers.insert(
            "x-test-raw-body",
            axum::http::HeaderValue::from_bytes(&body).unwrap(),
        );
        received.push((
            path,
            headers,
            serde_json::from_slice(&body).unwrap(),
            status.as_u16(),
        ));
        status
    }
    let received: Received = Arc::default();
    let app = axum::Router::new()
        .fallback(axum::routing::post(receive))
        .with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (port, received)
}

/// Checks a delivery's signature (`t=…,v1=…` over `"<t>.<body>"`) and its freshness.
pub(super) fn verify(headers: &HeaderMap) {
    let signature = headers["codegen-signature"].to_str().unwrap();
    let (t, v1) = signature.split_once(',').unwrap();
    let t: u64 = t.strip_prefix("t=").unwrap().parse().unwrap();
    let v1 = v1.strip_prefix("v1=").unwrap();
    let body = headers["x-test-raw-body"].as_bytes();
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(format!("{t}.").as_bytes());
    mac.update(body);
    mac.verify_slice(&hex::decode(v1).unwrap())
        .expect("the signature matches the tenant's secret");
    let now = proto::now_ms() / 1000;
    assert!(now.abs_diff(t) < 300, "stale timestamp {t} (now {now})");
}

async fn call(
    cluster: &Cluster,
    method: Method,
    url: String,
    key: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let (status, _, answer) = cluster.request_as(method, &url, key, body).await;
    (status, answer)
}

async fn wait_for(
    received: &Received,
    what: &str,
    done: impl Fn(&[(String, HeaderMap, Value, u16)]) -> bool,
) {
    // Jobs of seconds, ten times slower on a slow machine: only a failure waits this out.
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        if done(&received.lock().unwrap()) {
            return;
        }
        assert!(Instant::now() < deadline, "{what} never arrived");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_are_signed_retried_delivered_once_and_shown() {
    let (port, received) = receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let model = ModelServer::start(&distinct_jobs_script(dir.path(), 4, 50), dir.path());
    let cluster = Cluster::new()
        .use_model(&model)
        .with_env("CODEGEN__COORDINATOR__API_KEYS__ACME", "key-acme")
        .with_env("CODEGEN__COORDINATOR__API_KEYS__GLOBEX", "key-globex")
        .with_env(
            "CODEGEN__COORDINATOR__TENANTS__ACME__WEBHOOK_SECRET",
            SECRET,
        )
        .with_env(
            "CODEGEN__COORDINATOR__WEBHOOK_ALLOW",
            &format!("localhost:1, 127.0.0.1:{port}, 127.0.0.3:80"),
        )
        // The receiver is on loopback, which only this allows; 127.0.0.3 stays refused.
        .with_env("CODEGEN__COORDINATOR__EGRESS_ALLOW_CIDRS", "127.0.0.1/32");
    let _first = cluster.coordinator().await;
    let (_second, second) = cluster.another_coordinator("coordinator-2").await;
    let (_worker, _) = cluster.worker("worker-1").await;
    let base = cluster.url();
    let hook = |path: &str| format!("http://127.0.0.1:{port}{path}");

    // Targets and tenants that may not have webhooks.
    for (key, url, expected) in [
        (
            "key-acme",
            "http://127.0.0.2:80/job".to_owned(),
            "coordinator.webhook_allow",
        ),
        (
            "key-acme",
            format!("ftp://127.0.0.1:{port}/job"),
            "http or https",
        ),
        (
            "key-acme",
            "http://127.0.0.3:80/job".to_owned(),
            "coordinator.egress_allow_cidrs",
        ),
        (
            "key-acme",
            format!("http://user:pw@127.0.0.1:{port}/job"),
            "user info",
        ),
        (
            "key-globex",
            hook("/job"),
            "coordinator.tenants.globex.webhook_secret",
        ),
    ] {
        let (status, body) = call(
            &cluster,
            Method::POST,
            format!("{base}/v1/jobs"),
            key,
            Some(json!({"instruction": distinct_job(0), "callback_url": url})),
        )
        .await;
        assert_eq!(status, 422, "{url}: {body}");
        let message = body["error"].as_str().unwrap();
        assert!(
            message.starts_with("callback_url: ") && message.contains(expected),
            "{message}"
        );
    }

    // A job whose first delivery fails: retried, then delivered, once.
    let (status, body) = call(
        &cluster,
        Method::POST,
        format!("{second}/v1/jobs"),
        "key-acme",
        Some(json!({"instruction": distinct_job(0), "callback_url": hook("/flaky")})),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let job = body["job_id"].as_str().unwrap().to_owned();
    wait_for(&received, "the job's webhook", |r| {
        r.iter()
            .any(|(p, _, _, status)| p == "/flaky" && *status == 200)
    })
    .await;

    // A batch of two jobs: one delivery once both have ended.
    let response = cluster
        .http
        .post(format!("{base}/v1/batches?callback_url={}", hook("/batch")))
        .bearer_auth("key-acme")
        .header("content-type", "application/x-ndjson")
        .body(format!(
            "{}\n{}\n",
            json!({"instruction": distinct_job(1)}),
            json!({"instruction": distinct_job(2)})
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let batch: Value = response.json().await.unwrap();
    let batch_id = batch["batch_id"].as_str().unwrap().to_owned();
    wait_for(&received, "the batch's webhook", |r| {
        r.iter().any(|(p, ..)| p == "/batch")
    })
    .await;
    // An execution batch: one delivery once every item has its verdict, with all of them.
    let (status, answer) = call(
        &cluster,
        Method::POST,
        format!("{second}/v1/executions/batch?wait=false"),
        "key-acme",
        Some(json!({"callback_url": hook("/executions"), "items": [
            {"id": "ok", "language": "python", "code": "print(6 * 7)"},
            {"id": "boom", "language": "python", "code": "raise SystemExit(2)"},
        ]})),
    )
    .await;
    assert_eq!(status, 202, "{answer}");
    let execution_batch = answer["batch_id"].as_str().unwrap().to_owned();
    wait_for(&received, "the execution batch's webhook", |r| {
        r.iter().any(|(p, ..)| p == "/executions")
    })
    .await;
    let (status, _) = call(
        &cluster,
        Method::GET,
        format!("{base}/v1/executions/batches/{execution_batch}"),
        "key-globex",
        None,
    )
    .await;
    assert_eq!(status, 404, "another tenant's execution batch");

    // Give a second delivery (two coordinators, a lost lease) every chance to show up.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let received = received.lock().unwrap().clone();
    let flaky: Vec<_> = received.iter().filter(|(p, ..)| p == "/flaky").collect();
    assert_eq!(
        flaky.iter().map(|(.., s)| *s).collect::<Vec<_>>(),
        vec![500, 200],
        "one failed attempt, then one delivery"
    );
    for (_, headers, body, _) in &flaky {
        verify(headers);
        assert_eq!(headers["codegen-event"], "job.finished");
        assert_eq!(body["event"], "job.finished");
        assert_eq!(body["job"]["job_id"], job.as_str());
        assert_eq!(body["job"]["status"], "succeeded");
    }
    let executions: Vec<_> = received
        .iter()
        .filter(|(p, ..)| p == "/executions")
        .collect();
    assert_eq!(
        executions.len(),
        1,
        "the execution batch was delivered once"
    );
    let (_, headers, body, _) = executions[0];
    verify(headers);
    assert_eq!(body["event"], "execution_batch.finished");
    assert_eq!(body["batch"]["done"], 2, "{body}");
    assert_eq!(body["batch"]["results"][0]["id"], "ok");
    assert_eq!(body["batch"]["results"][0]["stdout"], "42\n");
    assert_eq!(body["batch"]["results"][1]["status"], "failed");
    let batches: Vec<_> = received.iter().filter(|(p, ..)| p == "/batch").collect();
    assert_eq!(batches.len(), 1, "the batch was delivered once");
    let (_, headers, body, _) = batches[0];
    verify(headers);
    assert_eq!(body["batch"]["batch_id"], batch_id.as_str());
    assert_eq!(body["batch"]["status"], "done", "{body}");
    assert_eq!(body["batch"]["counts"]["succeeded"], 2, "{body}");

    // Every attempt is on the resource.
    let (_, view) = call(
        &cluster,
        Method::GET,
        format!("{base}/v1/jobs/{job}"),
        "key-acme",
        None,
    )
    .await;
    let webhook = &view["webhook"];
    assert_eq!(webhook["state"], "delivered", "{view}");
    assert_eq!(webhook["url"], hook("/flaky"));
    let statuses: Vec<u64> = webhook["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses, vec![500, 200], "{view}");
    let (_, view) = call(
        &cluster,
        Method::GET,
        format!("{second}/v1/batches/{batch_id}"),
        "key-acme",
        None,
    )
    .await;
    assert_eq!(view["webhook"]["state"], "delivered", "{view}");
    assert_eq!(view["webhook"]["attempts"].as_array().unwrap().len(), 1);
    let (status, view) = call(
        &cluster,
        Method::GET,
        format!("{base}/v1/executions/batches/{execution_batch}"),
        "key-acme",
        None,
    )
    .await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["done"], 2, "{view}");
    assert_eq!(view["webhook"]["state"], "delivered", "{view}");
    cluster.cleanup().await;
}
