//! `/v1/lessons` and `codegen lessons` against the real coordinator and Redis, with API keys:
//! a tenant sees, searches, exports and deletes only its own lessons; another tenant's set
//! and changes to the shared set are the admins'; the shared set is read by every tenant
//! without its uses (they name other tenants' jobs); an import is checked line by line
//! before anything is added.

use serde_json::{Value, json};
use tests::Cluster;

fn lesson(id: &str, signature: &str, analysis: &str, created_ms: u64) -> Value {
    json!({
        "id": id, "language": "python", "error_kind": "runtime", "signature": signature,
        "case": "f(xs=[]): expected 0; got raised IndexError: list index out of range",
        "diff": "--- before\n+++ after\n-    return xs[0]\n+    return xs[0] if xs else 0\n",
        "analysis": analysis, "model": "scripted/m",
        "job": "0190a5b2-0000-7000-8000-000000000000", "function": "f", "source": "repair",
        "created_ms": created_ms, "given": true
    })
}

fn jsonl(lessons: &[Value]) -> String {
    lessons.iter().map(|l| format!("{l}\n")).collect()
}

async fn call(
    cluster: &Cluster,
    method: reqwest::Method,
    path: &str,
    key: &str,
    body: Option<String>,
) -> (u16, String) {
    let mut request = cluster
        .http
        .request(method, format!("{}{path}", cluster.url()))
        .bearer_auth(key);
    if let Some(body) = body {
        request = request
            .header("content-type", "application/x-ndjson")
            .body(body);
    }
    let response = request.send().await.expect("the coordinator answers");
    (response.status().as_u16(), response.text().await.unwrap())
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::String(text.to_owned()))
}

fn ids(list: &str) -> Vec<String> {
    json_of(list)["lessons"]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .map(|l| l["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_tenant_reads_and_changes_only_its_own_lessons_and_the_shared_set_is_the_admins() {
    let cluster = Cluster::new()
        .with_env("CODEGEN__COORDINATOR__API_KEYS__ACME", "key-acme")
        .with_env("CODEGEN__COORDINATOR__API_KEYS__GLOBEX", "key-globex")
        .with_env("CODEGEN__COORDINATOR__API_KEYS__OPS", "key-ops")
        .with_env("CODEGEN__COORDINATOR__ADMIN_TENANTS", "ops");
    let _coordinator = cluster.coordinator().await;
    use reqwest::Method;
    let empty = lesson(
        "empty-list",
        "runtime: IndexError: list index out of range",
        "An empty list was indexed.",
        1,
    );
    let zero = lesson(
        "zero-division",
        "runtime: ZeroDivisionError: division by zero",
        "The count can be zero.",
        2,
    );

    // An import is checked whole: a bad line names itself and nothing is added.
    let bad = format!("{}{{\"id\": \"x\"}}\n", jsonl(std::slice::from_ref(&empty)));
    let (status, answer) = call(
        &cluster,
        Method::POST,
        "/v1/lessons/import",
        "key-acme",
        Some(bad),
    )
    .await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(json_of(&answer)["param"], "line 2", "{answer}");
    let (_, list) = call(&cluster, Method::GET, "/v1/lessons", "key-acme", None).await;
    assert!(ids(&list).is_empty(), "{list}");
    let mut bad_id = zero.clone();
    bad_id["id"] = json!("../other");
    let (status, answer) = call(
        &cluster,
        Method::POST,
        "/v1/lessons/import",
        "key-acme",
        Some(jsonl(&[bad_id])),
    )
    .await;
    assert_eq!(status, 422, "{answer}");
    // A time past int64 (the document's type for every time) is refused, not kept.
    let mut late = zero.clone();
    late["created_ms"] = json!(9_223_372_036_854_775_808u64);
    let (status, answer) = call(
        &cluster,
        Method::POST,
        "/v1/lessons/import",
        "key-acme",
        Some(jsonl(&[late])),
    )
    .await;
    assert_eq!(status, 422, "{answer}");
    assert!(answer.contains("created_ms"), "{answer}");

    let (status, answer) = call(
        &cluster,
        Method::POST,
        "/v1/lessons/import",
        "key-acme",
        Some(jsonl(&[empty.clone(), zero.clone()])),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        json_of(&answer),
        json!({"added": 2, "already": 0, "too_large": 0, "evicted": 0})
    );
    let (_, answer) = call(
        &cluster,
        Method::POST,
        "/v1/lessons/import",
        "key-acme",
        Some(jsonl(std::slice::from_ref(&zero))),
    )
    .await;
    assert_eq!(json_of(&answer)["already"], 1, "{answer}");

    // Newest first; a search ranks by the words.
    let (_, list) = call(&cluster, Method::GET, "/v1/lessons", "key-acme", None).await;
    assert_eq!(ids(&list), ["zero-division", "empty-list"]);
    let (_, list) = call(
        &cluster,
        Method::GET,
        "/v1/lessons?q=empty%20list%20index",
        "key-acme",
        None,
    )
    .await;
    assert_eq!(ids(&list)[0], "empty-list", "{list}");
    let (status, answer) = call(
        &cluster,
        Method::GET,
        "/v1/lessons?limit=0",
        "key-acme",
        None,
    )
    .await;
    assert_eq!(
        (status, json_of(&answer)["param"].clone()),
        (422, json!("limit")),
        "{answer}"
    );
    let (status, _) = call(
        &cluster,
        Method::GET,
        "/v1/lessons?language=cobol",
        "key-acme",
        None,
    )
    .await;
    assert_eq!(status, 422);

    // Another tenant sees none of them, cannot read, delete or list them.
    let (_, list) = call(&cluster, Method::GET, "/v1/lessons", "key-globex", None).await;
    assert!(ids(&list).is_empty(), "{list}");
    let (status, _) = call(
        &cluster,
        Method::GET,
        "/v1/lessons/empty-list",
        "key-globex",
        None,
    )
    .await;
    assert_eq!(status, 404);
    let (status, _) = call(
        &cluster,
        Method::DELETE,
        "/v1/lessons/empty-list",
        "key-globex",
        None,
    )
    .await;
    assert_eq!(status, 404);
    let (status, answer) = call(
        &cluster,
        Method::GET,
        "/v1/lessons?tenant=acme",
        "key-globex",
        None,
    )
    .await;
    assert_eq!(status, 403, "{answer}");
    let (_, export) = call(
        &cluster,
        Method::GET,
        "/v1/lessons/export",
        "key-globex",
        None,
    )
    .await;
    assert_eq!(export, "");
    // An admin may.
    let (_, list) = call(
        &cluster,
        Method::GET,
        "/v1/lessons?tenant=acme",
        "key-ops",
        None,
    )
    .await;
    assert_eq!(ids(&list).len(), 2);

    // The export is the lessons as imported, a line each.
    let (status, export) = call(
        &cluster,
        Method::GET,
        "/v1/lessons/export",
        "key-acme",
        None,
    )
    .await;
    assert_eq!(status, 200);
    let lines: Vec<Value> = export
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines, [zero.clone(), empty.clone()]);

    // The shared set: changed by admins only, read by every tenant without its uses.
    let shared = lesson(
        "shared-one",
        "runtime: KeyError: <s>",
        "A key can be missing.",
        3,
    );
    let (status, _) = call(
        &cluster,
        Method::POST,
        "/v1/lessons/import?shared=true",
        "key-acme",
        Some(jsonl(std::slice::from_ref(&shared))),
    )
    .await;
    assert_eq!(status, 403);
    let (status, answer) = call(
        &cluster,
        Method::POST,
        "/v1/lessons/import?shared=true",
        "key-ops",
        Some(jsonl(std::slice::from_ref(&shared))),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let (_, list) = call(
        &cluster,
        Method::GET,
        "/v1/lessons?shared=true",
        "key-globex",
        None,
    )
    .await;
    assert_eq!(ids(&list), ["shared-one"]);
    assert_eq!(json_of(&list)["lessons"][0]["shared"], true);
    let (status, view) = call(
        &cluster,
        Method::GET,
        "/v1/lessons/shared-one?shared=true",
        "key-globex",
        None,
    )
    .await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(json_of(&view)["uses"], json!([]));
    let (status, _) = call(
        &cluster,
        Method::DELETE,
        "/v1/lessons/shared-one?shared=true",
        "key-globex",
        None,
    )
    .await;
    assert_eq!(status, 403);

    // `codegen lessons`, as acme: list, export, delete, import back.
    let cli = |args: &[&str]| {
        let output = std::process::Command::new(tests::binary())
            .args(["lessons"])
            .args(args)
            .env("CODEGEN_URL", cluster.url())
            .env("CODEGEN_API_KEY", "key-acme")
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, out, err) = cli(&["list"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("zero-division") && out.contains("empty-list"),
        "{out}"
    );
    let (code, exported, _) = cli(&["export"]);
    assert_eq!(code, Some(0));
    assert_eq!(exported, export);
    let (code, out, err) = cli(&["delete", "empty-list"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("deleted empty-list"));
    let (code, _, err) = cli(&["delete", "empty-list"]);
    assert_eq!(code, Some(2), "a second delete is refused");
    assert!(err.contains("no lesson empty-list"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lessons.jsonl");
    std::fs::write(&file, &exported).unwrap();
    let (code, out, err) = cli(&["import", file.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("1 added, 1 there already"), "{out}");
    let (code, _, err) = cli(&["list", "--shared", "--tenant", "acme"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("give one"), "{err}");
    cluster.cleanup().await;
}
