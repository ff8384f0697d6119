//! Control over submitted work on the real cluster (RabbitMQ, Redis, Docker, the codegen
//! processes, a scripted FAKE model server): cancel a running batch and see it stop spending,
//! list a tenant's work page by page, resume an event stream, and never reach another
//! tenant's work.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};
use tests::Cluster;
use tests::faults::{ModelServer, distinct_job, distinct_jobs_script};

async fn call(
    cluster: &Cluster,
    method: Method,
    path: &str,
    key: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let url = format!("{}{path}", cluster.url());
    let (status, _, answer) = cluster.request_as(method, &url, key, body).await;
    (status, answer)
}

/// Every model call the worker made, whatever its phase and outcome.
async fn model_calls(cluster: &Cluster, worker: &str) -> f64 {
    let text = cluster
        .http
        .get(format!("{worker}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with("codegen_model_calls_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The SSE frames of a job's event stream after `last_event_id`: (id, event name).
async fn events(
    cluster: &Cluster,
    job: &str,
    key: &str,
    last_event_id: Option<&str>,
) -> (u16, Vec<(String, String)>) {
    let mut request = cluster
        .http
        .get(format!("{}/v1/jobs/{job}/events", cluster.url()))
        .bearer_auth(key);
    if let Some(id) = last_event_id {
        request = request.header("Last-Event-ID", id);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let mut frames = Vec::new();
    let (mut id, mut name) = (String::new(), String::new());
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("id: ") {
            id = v.to_owned();
        } else if let Some(v) = line.strip_prefix("event: ") {
            name = v.to_owned();
        } else if line.is_empty() && !name.is_empty() {
            frames.push((std::mem::take(&mut id), std::mem::take(&mut name)));
        }
    }
    (status, frames)
}

async fn wait_final(cluster: &Cluster, job: &str, key: &str) -> Value {
    cluster.wait_ended_as(job, key).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_batch_stops_spending_and_work_is_listed_per_tenant() {
    const BATCH: usize = 100;
    let dir = tempfile::tempdir().unwrap();
    let model = ModelServer::start(
        &distinct_jobs_script(dir.path(), BATCH + 1, 300),
        dir.path(),
    );
    let cluster = Cluster::new()
        .use_model(&model)
        .with_env("CODEGEN__COORDINATOR__API_KEYS__ACME", "key-acme")
        .with_env("CODEGEN__COORDINATOR__API_KEYS__GLOBEX", "key-globex");
    let _coordinator = cluster.coordinator().await;
    let (worker, worker_url) = cluster.worker("worker-1").await;

    // One job to the end first: the one a cancel finds finished, and the one whose event
    // stream is resumed.
    let (status, body) = call(
        &cluster,
        Method::POST,
        "/v1/jobs",
        "key-acme",
        Some(json!({"instruction": distinct_job(BATCH)})),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let single = body["job_id"].as_str().unwrap().to_owned();
    assert_eq!(
        wait_final(&cluster, &single, "key-acme").await["status"],
        "succeeded"
    );

    // SSE resume: after the second event, exactly the events that followed it.
    let (_, all) = events(&cluster, &single, "key-acme", None).await;
    assert!(all.len() >= 5, "{all:?}");
    assert_eq!(all.last().unwrap().1, "finished");
    let (status, rest) = events(&cluster, &single, "key-acme", Some(&all[1].0)).await;
    assert_eq!(status, 200);
    assert_eq!(rest, all[2..].to_vec());
    for wrong in ["yesterday", ""] {
        let (status, _) = events(&cluster, &single, "key-acme", Some(wrong)).await;
        assert_eq!(status, 400, "Last-Event-ID {wrong:?}");
    }

    // A 100-job batch, cancelled while it runs.
    let lines: Vec<String> = (0..BATCH)
        .map(|i| json!({"instruction": distinct_job(i)}).to_string())
        .collect();
    let response = cluster
        .http
        .post(format!("{}/v1/batches", cluster.url()))
        .bearer_auth("key-acme")
        .header("content-type", "application/x-ndjson")
        .body(lines.join("\n"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let batch: Value = response.json().await.unwrap();
    let batch_id = batch["batch_id"].as_str().unwrap().to_owned();
    let jobs: Vec<String> = batch["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j.as_str().unwrap().to_owned())
        .collect();
    let before = model_calls(&cluster, &worker_url).await;
    // Seconds here; the deadline only bounds a failure.
    let deadline = Instant::now() + Duration::from_secs(600);
    while model_calls(&cluster, &worker_url).await < before + 20.0 {
        assert!(Instant::now() < deadline, "the batch never got going");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Another tenant can neither cancel nor see it.
    for path in [
        format!("/v1/batches/{batch_id}"),
        format!("/v1/jobs/{}", jobs[0]),
    ] {
        let (status, body) = call(&cluster, Method::DELETE, &path, "key-globex", None).await;
        assert_eq!(status, 404, "{path}: {body}");
    }
    let (status, listed) = call(&cluster, Method::GET, "/v1/jobs", "key-globex", None).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["jobs"], json!([]), "{listed}");
    let (_, listed) = call(&cluster, Method::GET, "/v1/batches", "key-globex", None).await;
    assert_eq!(listed["batches"], json!([]), "{listed}");

    let (status, view) = call(
        &cluster,
        Method::DELETE,
        &format!("/v1/batches/{batch_id}"),
        "key-acme",
        None,
    )
    .await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["status"], "done", "{view}");
    let cancelled = view["counts"]["cancelled"].as_u64().unwrap_or(0) as usize;
    let succeeded = view["counts"]["succeeded"].as_u64().unwrap_or(0) as usize;
    assert_eq!(cancelled + succeeded, BATCH, "{view}");
    assert!(cancelled >= BATCH / 2, "{view}");

    // It stops spending: what was in flight finishes (300 ms a call; the worker then holds no
    // task: the batch's queued ones are dropped as they come), then nothing more.
    let deadline = Instant::now() + Duration::from_secs(600);
    while tests::metric(&cluster.http, &worker_url, "codegen_worker_tasks_in_flight").await > 0.0 {
        assert!(
            Instant::now() < deadline,
            "the worker still works on the cancelled batch"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let settled = model_calls(&cluster, &worker_url).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let later = model_calls(&cluster, &worker_url).await;
    assert_eq!(
        later, settled,
        "model calls went on after the batch was cancelled"
    );
    assert!(
        worker.log_text().contains("job ended: dropping its task"),
        "no queued task was dropped"
    );

    // Each job ended once: one result, one `finished` event, the status the batch counted.
    let mut ended = BTreeSet::new();
    for job in &jobs {
        let result = wait_final(&cluster, job, "key-acme").await;
        let status = result["status"].as_str().unwrap().to_owned();
        if status == "cancelled" {
            assert!(
                result["failure"].as_str().unwrap().contains("cancelled"),
                "{result}"
            );
        }
        let (_, frames) = events(&cluster, job, "key-acme", None).await;
        let finished = frames.iter().filter(|(_, name)| name == "finished").count();
        assert_eq!(finished, 1, "{job}: {frames:?}");
        ended.insert((job.clone(), status));
    }
    assert_eq!(
        ended.iter().filter(|(_, s)| s == "cancelled").count(),
        cancelled
    );

    // A cancelled job cancels again to the same result; a finished one answers 409.
    let cancelled_job = &ended.iter().find(|(_, s)| s == "cancelled").unwrap().0;
    let (status, again) = call(
        &cluster,
        Method::DELETE,
        &format!("/v1/jobs/{cancelled_job}"),
        "key-acme",
        None,
    )
    .await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["status"], "cancelled");
    let (status, body) = call(
        &cluster,
        Method::DELETE,
        &format!("/v1/jobs/{single}"),
        "key-acme",
        None,
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("succeeded"),
        "{body}"
    );
    assert_eq!(body["code"], "already_ended", "{body}");

    // Listing: every job once, newest first, over pages; filtered by status and time.
    let mut listed = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/jobs?limit=30&cursor={c}"),
            None => "/v1/jobs?limit=30".to_owned(),
        };
        let (status, page) = call(&cluster, Method::GET, &path, "key-acme", None).await;
        assert_eq!(status, 200, "{page}");
        pages += 1;
        for job in page["jobs"].as_array().unwrap() {
            listed.push((
                job["submitted_at_ms"].as_u64().unwrap(),
                job["job_id"].as_str().unwrap().to_owned(),
            ));
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(pages, 4);
    assert_eq!(listed.len(), BATCH + 1);
    assert!(
        listed.windows(2).all(|w| w[0].0 >= w[1].0),
        "not newest first"
    );
    assert_eq!(
        listed.last().unwrap().1,
        single,
        "the first job is listed last"
    );
    let ids: BTreeSet<&String> = listed.iter().map(|(_, id)| id).collect();
    assert_eq!(ids.len(), BATCH + 1, "a job listed twice");

    let (_, page) = call(
        &cluster,
        Method::GET,
        "/v1/jobs?status=cancelled&limit=100",
        "key-acme",
        None,
    )
    .await;
    assert_eq!(page["jobs"].as_array().unwrap().len(), cancelled, "{page}");
    let first_batch_ms = listed[listed.len() - 2].0;
    let until =
        time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(first_batch_ms) * 1_000_000)
            .unwrap()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap();
    let (_, page) = call(
        &cluster,
        Method::GET,
        &format!("/v1/jobs?until={}", until.replace('+', "%2B")),
        "key-acme",
        None,
    )
    .await;
    let before: Vec<&str> = page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_str().unwrap())
        .collect();
    assert_eq!(before, vec![single.as_str()], "{page}");
    let (status, body) = call(
        &cluster,
        Method::GET,
        "/v1/jobs?status=sleeping",
        "key-acme",
        None,
    )
    .await;
    assert_eq!(status, 400);
    assert!(body["error"].as_str().unwrap().contains("status"), "{body}");
    let (status, _) = call(&cluster, Method::GET, "/v1/jobs?cursor=3", "key-acme", None).await;
    assert_eq!(status, 422);

    let (_, page) = call(&cluster, Method::GET, "/v1/batches", "key-acme", None).await;
    assert_eq!(page["batches"].as_array().unwrap().len(), 1, "{page}");
    assert_eq!(page["batches"][0]["batch_id"], batch_id.as_str());
    assert_eq!(page["batches"][0]["status"], "done");

    // Executions: listed for their tenant only.
    let (status, body) = call(
        &cluster,
        Method::POST,
        "/v1/executions",
        "key-globex",
        Some(json!({"language": "python", "code": "print(1)", "timeout_ms": 120_000})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (_, page) = call(&cluster, Method::GET, "/v1/executions", "key-globex", None).await;
    assert_eq!(page["executions"].as_array().unwrap().len(), 1, "{page}");
    assert_eq!(page["executions"][0]["id"], body["id"]);
    assert_eq!(page["executions"][0]["status"], "passed");
    let (_, page) = call(&cluster, Method::GET, "/v1/executions", "key-acme", None).await;
    assert_eq!(page["executions"], json!([]), "{page}");
    cluster.cleanup().await;
}
