//! The OpenAPI document a running coordinator serves at `/openapi.json` describes every route
//! it serves, and needs no API key even when keys are configured.

use serde_json::Value;

/// The routes `telemetry::ops_router` adds next to the coordinator's own.
const OPS_ROUTES: [(&str, &str); 3] =
    [("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics")];

#[tokio::test]
async fn the_document_lists_every_route_the_coordinator_serves() {
    let cluster = tests::Cluster::new().with_env("CODEGEN__COORDINATOR__API_KEYS__ACME", "k1");
    let _coordinator = cluster.coordinator().await;

    let (status, doc) =
        tests::get_json(&cluster.http, &format!("{}/openapi.json", cluster.url())).await;
    assert_eq!(status, 200, "{doc}");
    assert!(
        doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")),
        "{doc}"
    );
    let paths = doc["paths"].as_object().expect("paths");

    let routes: Vec<(&str, String)> = coordinator::routes()
        .into_iter()
        .chain(OPS_ROUTES.iter().map(|(m, p)| (*m, (*p).to_owned())))
        .collect();
    for (method, path) in &routes {
        let (method, path) = (*method, path.as_str());
        // Served: neither the API's fallback ("no such route") nor 405.
        let uri = path
            .replace("{id}", &uuid::Uuid::now_v7().to_string())
            .replace("{path}", "a.txt");
        let response = cluster
            .http
            .request(
                method.parse().expect("a method"),
                format!("{}{uri}", cluster.url()),
            )
            .bearer_auth("k1")
            .send()
            .await
            .expect("coordinator answers");
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        assert!(
            status != 405 && body["error"] != "no such route",
            "{method} {path} is not served: {status} {body}"
        );
        // Documented.
        let operation = &doc["paths"][path][method.to_lowercase()];
        assert!(
            operation["responses"].is_object(),
            "{method} {path} is served but not in /openapi.json"
        );
    }
    // And nothing is documented that is not served.
    for (path, item) in paths {
        for method in item.as_object().expect("a path item").keys() {
            assert!(
                routes
                    .iter()
                    .any(|(m, p)| p == path && m.eq_ignore_ascii_case(method)),
                "{method} {path} is documented but not served"
            );
        }
    }
    cluster.cleanup().await;
}
