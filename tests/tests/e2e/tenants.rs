//! API keys map to tenants; each tenant sees only its own jobs and executions.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use serde_json::json;
use tests::Cluster;

async fn call(
    cluster: &Cluster,
    method: reqwest::Method,
    path: &str,
    key: Option<&str>,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    let mut request = cluster
        .http
        .request(method, format!("{}{path}", cluster.url()));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (
        status,
        response.json().await.unwrap_or(serde_json::Value::Null),
    )
}

#[tokio::test]
async fn tenants_see_only_their_own_work() {
    let cluster = Cluster::new()
        .with_env("CODEGEN__COORDINATOR__API_KEYS__ACME", "key-acme")
        .with_env("CODEGEN__COORDINATOR__API_KEYS__GLOBEX", "key-globex")
        .with_env("CODEGEN__COORDINATOR__API_KEYS__OPS", "key-ops")
        .with_env("CODEGEN__COORDINATOR__ADMIN_TENANTS", "ops");
    let coordinator = cluster.coordinator().await;
    assert!(!coordinator.log_text().contains("API is open"));

    let job = json!({"instruction": "sum a list"});
    let (status, body) = call(
        &cluster,
        reqwest::Method::POST,
        "/v1/jobs",
        None,
        Some(job.clone()),
    )
    .await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["code"], "api_key_required", "{body}");
    let (status, body) = call(
        &cluster,
        reqwest::Method::POST,
        "/v1/jobs",
        Some("wrong"),
        Some(job.clone()),
    )
    .await;
    assert_eq!(status, 401);
    assert_eq!(body["code"], "api_key_unknown", "{body}");

    let (status, body) = call(
        &cluster,
        reqwest::Method::POST,
        "/v1/jobs",
        Some("key-acme"),
        Some(job),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let id = body["job_id"].as_str().unwrap();
    let path = format!("/v1/jobs/{id}");
    assert_eq!(
        call(
            &cluster,
            reqwest::Method::GET,
            &path,
            Some("key-acme"),
            None
        )
        .await
        .0,
        200
    );
    assert_eq!(
        call(
            &cluster,
            reqwest::Method::GET,
            &path,
            Some("key-globex"),
            None
        )
        .await
        .0,
        404
    );
    let events = format!("{path}/events");
    assert_eq!(
        call(
            &cluster,
            reqwest::Method::GET,
            &events,
            Some("key-globex"),
            None
        )
        .await
        .0,
        404
    );

    let (status, body) = call(
        &cluster,
        reqwest::Method::POST,
        "/v1/executions?wait=false",
        Some("key-globex"),
        Some(json!({"language": "python", "code": "print(1)"})),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let execution = format!("/v1/executions/{}", body["id"].as_str().unwrap());
    assert_eq!(
        call(
            &cluster,
            reqwest::Method::GET,
            &execution,
            Some("key-globex"),
            None
        )
        .await
        .0,
        200
    );
    assert_eq!(
        call(
            &cluster,
            reqwest::Method::GET,
            &execution,
            Some("key-acme"),
            None
        )
        .await
        .0,
        404
    );

    // Batches: the same.
    let response = cluster
        .http
        .post(format!("{}/v1/batches", cluster.url()))
        .bearer_auth("key-acme")
        .header("content-type", "application/x-ndjson")
        .body("{\"instruction\": \"reverse a string\"}\n")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let batch: serde_json::Value = response.json().await.unwrap();
    let batch_path = format!("/v1/batches/{}", batch["batch_id"].as_str().unwrap());
    for (key, expected) in [("key-acme", 200), ("key-globex", 404)] {
        let (status, body) =
            call(&cluster, reqwest::Method::GET, &batch_path, Some(key), None).await;
        assert_eq!(status, expected, "{key}: {body}");
    }

    // The caches are shared: only an admin tenant may empty them.
    let (status, body) = call(
        &cluster,
        reqwest::Method::DELETE,
        "/v1/cache",
        Some("key-globex"),
        None,
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(body["error"].as_str().unwrap().contains("admin_tenants"));
    assert_eq!(body["code"], "forbidden", "{body}");
    let (status, body) = call(
        &cluster,
        reqwest::Method::DELETE,
        "/v1/cache",
        Some("key-ops"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");

    // Health and metrics stay open for probes and scrapers.
    let (status, _) = tests::get_json(&cluster.http, &format!("{}/healthz", cluster.url())).await;
    assert_eq!(status, 200);
    cluster.cleanup().await;
}

#[tokio::test]
async fn without_keys_the_api_is_open_and_says_so() {
    let cluster = Cluster::new();
    let coordinator = cluster.coordinator().await;
    assert!(
        coordinator.log_text().contains("API is open"),
        "{}",
        coordinator.log_text()
    );
    cluster.cleanup().await;
}

/// SandboxFusion's client cannot send a header: with keys configured, it authenticates with
/// the key in its endpoint path (`set_endpoint("http://HOST/fusion/KEY")`), and its runs
/// belong to that key's tenant.
#[tokio::test]
async fn sandbox_fusions_client_authenticates_with_the_key_in_its_path() {
    let cluster = Cluster::new()
        .with_env("CODEGEN__COORDINATOR__API_KEYS__ACME", "key-acme")
        .with_env("CODEGEN__COORDINATOR__API_KEYS__GLOBEX", "key-globex");
    let coordinator = cluster.coordinator().await;
    let (_worker, _) = cluster.worker("worker-1").await;
    let run = json!({"code": "print(6 * 7)", "language": "python"});
    let post = |path: &str| {
        cluster
            .http
            .post(format!("{}{path}", cluster.url()))
            .json(&run)
            .send()
    };
    let response = post("/fusion/key-acme/run_code").await.unwrap();
    assert_eq!(response.status(), 200);
    let answer: serde_json::Value = response.json().await.unwrap();
    assert_eq!(answer["status"], "Success", "{answer}");
    assert_eq!(answer["run_result"]["stdout"], "42\n", "{answer}");
    for path in ["/fusion/wrong/run_code", "/run_code", "/fusion//run_code"] {
        let response = post(path).await.unwrap();
        assert_eq!(response.status(), 401, "{path}");
    }
    // The run is acme's: listed for acme, not for globex.
    let listed = |key: &'static str| {
        let cluster = &cluster;
        async move {
            let (status, page) = call(
                cluster,
                reqwest::Method::GET,
                "/v1/executions",
                Some(key),
                None,
            )
            .await;
            assert_eq!(status, 200, "{page}");
            page["executions"].as_array().unwrap().len()
        }
    };
    assert_eq!(listed("key-acme").await, 1);
    assert_eq!(listed("key-globex").await, 0);
    // Neither logs nor metrics carry the path's key.
    assert!(!coordinator.log_text().contains("key-acme"));
    let metrics = cluster
        .http
        .get(format!("{}/metrics", cluster.url()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("/fusion/{key}/run_code"), "{metrics}");
    assert!(!metrics.contains("key-acme"));
    cluster.cleanup().await;
}
