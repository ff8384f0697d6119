//! HTTP routes of the public API, and the OpenAPI document that describes them.
//!
//! The document (`GET /openapi.json`) is generated from the handlers' `#[utoipa::path]`
//! attributes and the body types' `ToSchema` derives, then given the configured limits, so it
//! cannot drift from what the routes accept and answer. [`routes`] is the one list the router
//! is built from; a test checks that every entry is in the document.

use proto::api::ErrorCode;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, post, put};
use proto::Language;
use serde::Deserialize;
use serde_json::{Value, json};
use tower_http::request_id::{PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;

use crate::Coordinator;
use crate::error::ApiError;
use crate::executions::MAX_LABEL_CHARS;
use crate::request_id;
use axum::Extension;

/// Every API route: method, path (as in the OpenAPI document) and handler. The router is
/// built from this list and nothing else, so [`routes`] is exactly what it serves.
fn endpoints() -> Vec<(&'static str, &'static str, MethodRouter<Coordinator>)> {
    vec![
        ("POST", "/v1/executions", post(crate::executions::submit)),
        (
            "POST",
            "/v1/executions/batch",
            post(crate::executions::submit_batch),
        ),
        ("GET", "/v1/executions", get(crate::listing::executions)),
        (
            "GET",
            "/v1/executions/batches/{id}",
            get(crate::executions::fetch_batch),
        ),
        ("GET", "/v1/executions/{id}", get(crate::executions::fetch)),
        ("POST", "/v1/jobs", post(crate::jobs::submit)),
        ("GET", "/v1/jobs", get(crate::listing::jobs)),
        ("GET", "/v1/jobs/{id}", get(crate::jobs::fetch)),
        ("DELETE", "/v1/jobs/{id}", delete(crate::cancel::cancel_job)),
        ("GET", "/v1/jobs/{id}/events", get(crate::jobs::events)),
        (
            "GET",
            "/v1/jobs/{id}/transcript",
            get(crate::transcript::transcript),
        ),
        ("POST", "/v1/batches", post(crate::batches::submit)),
        ("GET", "/v1/batches", get(crate::listing::batches)),
        ("GET", "/v1/batches/{id}", get(crate::batches::fetch)),
        (
            "GET",
            "/v1/batches/{id}/results",
            get(crate::batches::results),
        ),
        (
            "DELETE",
            "/v1/batches/{id}",
            delete(crate::cancel::cancel_batch),
        ),
        ("POST", "/v1/sessions", post(crate::sessions::routes::open)),
        ("GET", "/v1/sessions", get(crate::sessions::routes::list)),
        (
            "GET",
            "/v1/sessions/{id}",
            get(crate::sessions::routes::fetch),
        ),
        (
            "DELETE",
            "/v1/sessions/{id}",
            delete(crate::sessions::routes::delete),
        ),
        (
            "POST",
            "/v1/sessions/{id}/run",
            post(crate::sessions::routes::run),
        ),
        (
            "GET",
            "/v1/sessions/{id}/files",
            get(crate::sessions::routes::files),
        ),
        (
            "GET",
            "/v1/sessions/{id}/files/{*path}",
            get(crate::sessions::routes::download),
        ),
        (
            "PUT",
            "/v1/sessions/{id}/files/{*path}",
            put(crate::sessions::routes::upload),
        ),
        ("GET", "/v1/usage", get(crate::usage::usage)),
        ("GET", "/v1/lessons", get(crate::lessons::list)),
        ("GET", "/v1/lessons/export", get(crate::lessons::export)),
        ("POST", "/v1/lessons/import", post(crate::lessons::import)),
        ("GET", "/v1/lessons/{id}", get(crate::lessons::fetch)),
        ("DELETE", "/v1/lessons/{id}", delete(crate::lessons::delete)),
        ("GET", "/v1/languages", get(crate::languages::languages)),
        ("GET", "/v1/cache/stats", get(crate::cache::cache_stats)),
        ("GET", "/v1/cluster", get(crate::cluster::cluster)),
        ("DELETE", "/v1/cache", delete(crate::cache::cache_clear)),
        ("POST", "/run_code", post(crate::fusion::run_code)),
        (
            "POST",
            "/fusion/{key}/run_code",
            post(crate::fusion::run_code_keyed),
        ),
        ("POST", "/run_jupyter", post(crate::fusion::run_jupyter)),
        (
            "POST",
            "/fusion/{key}/run_jupyter",
            post(crate::fusion::run_jupyter_keyed),
        ),
        ("GET", "/openapi.json", get(openapi_json)),
    ]
}

/// The routes [`router`] serves, as (method, path as the OpenAPI document writes it: a
/// wildcard `{*path}` as `{path}`). `/healthz`, `/readyz` and `/metrics` come from
/// `telemetry::ops_router`, merged in by [`Coordinator::run`].
pub fn routes() -> Vec<(&'static str, String)> {
    endpoints()
        .into_iter()
        .map(|(method, path, _)| (method, path.replace("{*", "{")))
        .collect()
}

/// Routes whose body limit is `max_batch_body_bytes`.
pub(crate) const BATCH_ROUTES: &[&str] = &["/v1/executions/batch"];

/// Routes whose `POST` creates work: they honour `Idempotency-Key`.
const CREATING_ROUTES: &[&str] = &[
    "/v1/jobs",
    "/v1/batches",
    "/v1/executions",
    "/v1/executions/batch",
];

/// Routes that need no API key.
const OPEN_ROUTES: &[&str] = &["/openapi.json"];

/// The API routes, with request metrics and tracing.
pub fn router(coordinator: Coordinator) -> Router {
    let document: Arc<str> = openapi_document(&coordinator.options).to_string().into();
    let (open, tenanted): (Vec<_>, Vec<_>) = endpoints()
        .into_iter()
        .partition(|(_, path, _)| OPEN_ROUTES.contains(path));
    let mut api = Router::new();
    for (_, path, endpoint) in tenanted {
        // Batches of thousands of programs are bigger than any single request.
        let endpoint = if BATCH_ROUTES.contains(&path) {
            endpoint.layer(DefaultBodyLimit::max(
                coordinator.options.max_batch_body_bytes,
            ))
        } else {
            endpoint
        };
        let endpoint = if CREATING_ROUTES.contains(&path) {
            endpoint.layer(middleware::from_fn_with_state(
                coordinator.clone(),
                crate::idempotency::layer,
            ))
        } else {
            endpoint
        };
        api = api.route(path, endpoint);
    }
    // MCP over streamable HTTP (docs/mcp.md): behind the key and rate layers below, as /v1 is;
    // not an API route, so not in `routes()` nor the OpenAPI document.
    api = api.route_service("/mcp", crate::mcp::service(coordinator.clone()));
    let mut router = api
        .fallback(|| async { ApiError::new(ErrorCode::NoSuchRoute, "no such route") })
        .layer(DefaultBodyLimit::max(coordinator.options.max_body_bytes))
        // Layers run last-added first: the key, then the tenant's rate.
        .layer(middleware::from_fn_with_state(
            coordinator.clone(),
            crate::quotas::rate_limit,
        ))
        .layer(middleware::from_fn_with_state(
            coordinator.clone(),
            crate::auth::authenticate,
        ));
    for (_, path, endpoint) in open {
        router = router.route(path, endpoint);
    }
    router
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                ErrorCode::MethodNotAllowed,
                "this route does not take this method (the Allow header lists those it takes)",
            )
        })
        .layer(Extension(Document(document)))
        .layer(middleware::from_fn_with_state(coordinator.clone(), observe))
        // Spans name the route, not the path: `/fusion/{key}/run_code` carries a key. Every
        // line logged while a request is handled carries its id and trace id; a request that
        // carries a `traceparent` continues its caller's trace.
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|request: &Request| {
                    let route = request
                        .extensions()
                        .get::<MatchedPath>()
                        .map_or("unmatched", MatchedPath::as_str);
                    let header =
                        |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok());
                    let request_id = header(request_id::HEADER.as_str()).unwrap_or("-");
                    let span = tracing::info_span!(
                        "request",
                        otel.name = format!("{} {route}", request.method()),
                        otel.kind = "server",
                        otel.status_code = tracing::field::Empty,
                        error.type = tracing::field::Empty,
                        http.request.method = %request.method(),
                        http.route = route,
                        http.response.status_code = tracing::field::Empty,
                        request_id = %request_id,
                        trace_id = tracing::field::Empty,
                    );
                    let carried = ["traceparent", "tracestate"]
                        .into_iter()
                        .filter_map(|name| Some((name.to_owned(), header(name)?.to_owned())))
                        .collect();
                    telemetry::follow(&span, &carried);
                    span.record(
                        "trace_id",
                        tracing::field::display(telemetry::trace_id(&span)),
                    );
                    span
                })
                .on_response(
                    |response: &Response, _latency: std::time::Duration, span: &tracing::Span| {
                        span.record("http.response.status_code", response.status().as_u16());
                        // HTTP's conventions: a server span fails on 5xx only (a 4xx is the
                        // client's), `error.type` the status code.
                        if response.status().is_server_error() {
                            span.record("otel.status_code", "error");
                            span.record("error.type", response.status().as_str());
                        }
                    },
                ),
        )
        // Outermost last: an unusable id is dropped, one is set, and it goes back on the answer.
        .layer(PropagateRequestIdLayer::new(request_id::HEADER))
        .layer(SetRequestIdLayer::new(
            request_id::HEADER,
            request_id::MakeV7,
        ))
        .layer(middleware::map_request(request_id::drop_unusable))
        .with_state(coordinator)
}

async fn observe(State(c): State<Coordinator>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".into());
    let method = request.method().as_str().to_owned();
    let started = Instant::now();
    let response = next.run(request).await;
    c.metrics
        .http_duration
        .with_label_values(&[method.as_str(), route.as_str(), response.status().as_str()])
        .observe(started.elapsed().as_secs_f64());
    response
}

/// The served document, rendered once when the router is built.
#[derive(Debug, Clone)]
struct Document(Arc<str>);

/// This document: every route of the API, generated from the handlers and body types.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    security(()),
    responses((status = 200, description = "The OpenAPI document.", body = Object))
)]
async fn openapi_json(Extension(Document(document)): Extension<Document>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        document.to_string(),
    )
        .into_response()
}

/// The OpenAPI document of the API. Generated from the `#[utoipa::path]` attributes of the
/// handlers and the `ToSchema` derives of the body types; [`openapi_document`] adds the
/// configured limits.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "codegen-cluster",
        description = "Runs untrusted code in a sandbox and turns natural-language requests into tested code. \
            With API keys configured (`CODEGEN__COORDINATOR__API_KEYS__<TENANT>`), every `/v1/*` request \
            needs `Authorization: Bearer <key>` (or `X-API-Key`) and sees only its tenant's work; \
            without keys the API is open. Every 4xx/5xx answer is an `ErrorBody` \
            (except `/readyz`, whose 503 is a readiness report)."
    ),
    paths(
        crate::executions::submit,
        crate::executions::submit_batch,
        crate::executions::fetch,
        crate::executions::fetch_batch,
        crate::jobs::submit,
        crate::jobs::fetch,
        crate::jobs::events,
        crate::transcript::transcript,
        crate::batches::submit,
        crate::batches::fetch,
        crate::batches::results,
        crate::cancel::cancel_job,
        crate::listing::jobs,
        crate::listing::batches,
        crate::listing::executions,
        crate::cancel::cancel_batch,
        crate::usage::usage,
        crate::lessons::list,
        crate::lessons::fetch,
        crate::lessons::delete,
        crate::lessons::export,
        crate::lessons::import,
        crate::sessions::routes::open,
        crate::sessions::routes::list,
        crate::sessions::routes::fetch,
        crate::sessions::routes::delete,
        crate::sessions::routes::run,
        crate::sessions::routes::files,
        crate::sessions::routes::download,
        crate::sessions::routes::upload,
        crate::languages::languages,
        crate::cache::cache_stats,
        crate::cache::cache_clear,
        crate::cluster::cluster,
        crate::fusion::run_code,
        crate::fusion::run_code_keyed,
        crate::fusion::run_jupyter,
        crate::fusion::run_jupyter_keyed,
        openapi_json,
        ops::healthz,
        ops::readyz,
        ops::metrics,
    ),
    components(schemas(proto::Progress, proto::api::UsagePer)),
    modifiers(&Security),
    security((), ("bearer" = []), ("api_key" = [])),
    tags(
        (name = "executions", description = "Run a program in the sandbox."),
        (name = "jobs", description = "Generate tested code from an instruction."),
        (name = "sandbox-fusion", description = "SandboxFusion's `/run_code` and `/run_jupyter`, for its clients and the tools built on them."),
        (name = "batches", description = "Many jobs in one request."),
        (name = "sessions", description = "Stateful sessions: a container of their own whose interpreter keeps its state between cells."),
        (name = "usage", description = "What a tenant's finished work cost."),
        (name = "lessons", description = "The memory of repairs: lessons from repairs that worked, shown to later repairs."),
        (name = "cache", description = "The solution and function-level caches."),
        (name = "cluster", description = "The cluster at a glance: live workers, queues, pools, the model's calls against its limit; for admin tenants."),
        (name = "operations", description = "Health, readiness, metrics and this document; never need a key."),
    )
)]
#[derive(Debug)]
pub struct ApiDoc;

/// The API key, as a bearer token or an `X-API-Key` header (see [`openapi_document`]).
struct Security;

impl utoipa::Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            utoipa::openapi::security::SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("The tenant's API key; only when keys are configured."))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "api_key",
            utoipa::openapi::security::SecurityScheme::ApiKey(ApiKey::Header(
                ApiKeyValue::with_description(
                    "X-API-Key",
                    "The tenant's API key; only when keys are configured.",
                ),
            )),
        );
    }
}

/// The 401 of every route behind the API key (`auth::authenticate`), added by
/// [`openapi_document`] to each one that does not document its own.
const UNAUTHORIZED: &str = "API keys are configured and none (or an unknown one) was given.";

/// The document as served: [`ApiDoc`] plus this coordinator's configuration: its limits, so
/// that a request the document allows is one `validate` accepts (byte-size limits excepted:
/// JSON Schema counts characters), and the API key as required when keys are configured
/// (optional otherwise).
pub fn openapi_document(options: &crate::Options) -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).expect("the document serializes");
    if !options.api_keys.is_empty() {
        let Value::Array(requirements) = &mut doc["security"] else {
            panic!("the document has global security requirements")
        };
        requirements.retain(|r| r != &json!({}));
    }
    let schemas = &mut doc["components"]["schemas"];
    let path_pattern = json!(file_path_pattern());
    let execution = &mut schemas["ExecutionSubmission"]["properties"];
    let languages: Vec<&str> = Language::ALL
        .iter()
        .flat_map(|l| std::iter::once(l.as_str()).chain(l.spec().aliases.iter().copied()))
        .collect();
    limit(&mut execution["language"], json!({"enum": languages}));
    for field in ["timeout_ms", "cpu_time_ms", "compile_timeout_ms"] {
        limit(
            &mut execution[field],
            json!({"minimum": 1, "maximum": options.max_timeout_ms}),
        );
    }
    limit(
        &mut execution["memory_mb"],
        json!({"minimum": options.min_memory_mb, "maximum": options.max_memory_mb}),
    );
    limit(
        &mut execution["files"],
        json!({"maxProperties": proto::execution::MAX_FILES,
               "propertyNames": {"minLength": 1, "pattern": path_pattern}}),
    );
    limit(
        &mut execution["return_files"],
        json!({"maxItems": proto::execution::MAX_FILES}),
    );
    limit(
        &mut execution["return_files"]["items"],
        json!({"minLength": 1, "pattern": path_pattern}),
    );
    limit(
        &mut schemas["ExecutionBatch"]["properties"]["items"],
        json!({"minItems": 1, "maxItems": options.max_batch_executions}),
    );
    // Only batch items take an `id`: the single route gets the submission without it.
    let mut item = schemas["ExecutionSubmission"].clone();
    item["description"] =
        json!("An item of `POST /v1/executions/batch`: a submission plus its label.");
    limit(
        &mut item["properties"]["id"],
        json!({"maxLength": MAX_LABEL_CHARS}),
    );
    schemas["ExecutionBatchItem"] = item;
    schemas["ExecutionBatch"]["properties"]["items"]["items"] =
        json!({"$ref": "#/components/schemas/ExecutionBatchItem"});
    if let Value::Object(properties) = &mut schemas["ExecutionSubmission"]["properties"] {
        properties.remove("id");
    }
    // Every route that takes an API key answers 401 for a missing or unknown one (written here
    // once, not on each route: a route with a key of its own, SandboxFusion's `/fusion/{key}/`,
    // documents its own), and is subject to its tenant's request rate, and those that create
    // work to its quotas.
    let keyed: Vec<String> = routes()
        .into_iter()
        .map(|(_, path)| path)
        .filter(|path| !OPEN_ROUTES.contains(&path.as_str()))
        .collect();
    if let Value::Object(paths) = &mut doc["paths"] {
        for (path, item) in paths.iter_mut() {
            if !keyed.contains(path) {
                continue;
            }
            let creates = CREATING_ROUTES.contains(&path.as_str()) || path.ends_with("/run_code");
            if let Value::Object(operations) = item {
                let methods = ["get", "post", "put", "delete", "patch"];
                for (method, operation) in operations
                    .iter_mut()
                    .filter(|(method, _)| methods.contains(&method.as_str()))
                {
                    let description = if path.ends_with("/run_jupyter") {
                        "Over the tenant's request rate (`coordinator.tenants.<name>.requests_per_second`) or its live sessions at its quota (`coordinator.tenants.<name>.sessions`); the message names it. Nothing ran; retry after `Retry-After` seconds."
                    } else if creates && method == "post" {
                        "Over the tenant's request rate (`coordinator.tenants.<name>.requests_per_second`) or one of its quotas (`jobs_in_flight`, `executions_in_flight`, `model_tokens_per_period`, `sandbox_cpu_seconds_per_period`); the message names it. Nothing was queued; retry after `Retry-After` seconds."
                    } else {
                        "Over the tenant's request rate (`coordinator.tenants.<name>.requests_per_second`): nothing was done; retry after `Retry-After` seconds."
                    };
                    let responses = &mut operation["responses"];
                    if responses.get("401").is_none() {
                        responses["401"] = json!({
                            "description": UNAUTHORIZED,
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
                        });
                    }
                    responses["429"] = json!({
                        "description": description,
                        "headers": {"Retry-After": {"schema": {"type": "integer", "minimum": 1}}},
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
                    });
                }
            }
        }
    }
    // Every 503 asks for a wait, as every 429 does.
    if let Value::Object(paths) = &mut doc["paths"] {
        for operation in paths
            .values_mut()
            .filter_map(Value::as_object_mut)
            .flat_map(|item| item.values_mut())
        {
            if let Some(unavailable) = operation
                .get_mut("responses")
                .and_then(|responses| responses.get_mut("503"))
                && unavailable["content"]["application/json"].is_object()
            {
                unavailable["headers"] = json!({"Retry-After": {
                    "description": "Seconds to wait before sending the request again.",
                    "schema": {"type": "integer", "minimum": 1}}});
            }
        }
    }
    // The routes that create work take an `Idempotency-Key`.
    for path in CREATING_ROUTES {
        let post = &mut doc["paths"][*path]["post"];
        if !post.is_object() {
            continue;
        }
        let parameter = json!({
            "name": "Idempotency-Key", "in": "header", "required": false,
            "description": "A retry with the same key and body gets the first answer (header `Idempotent-Replayed: true`) and creates nothing; the same key with another body is 409. Per tenant and route; kept as long as results. A streamed answer is replayed whole once it ended.",
            "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]+$"}
        });
        match &mut post["parameters"] {
            Value::Array(parameters) => parameters.push(parameter),
            other => *other = json!([parameter]),
        }
        post["responses"]["409"] = json!({
            "description": "The Idempotency-Key was used with another body, or its first request is still being handled.",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
        });
    }
    let schemas = &mut doc["components"]["schemas"];
    let codes: Vec<String> = ErrorCode::ALL
        .iter()
        .map(|c| format!("- `{c}` ({}): {}", c.status(), c.meaning()))
        .collect();
    schemas["ErrorCode"]["description"] = json!(format!(
        "What went wrong, for a program to act on. Each code always comes with the same status:\n\n{}",
        codes.join("\n")
    ));
    let run_code = &mut schemas["RunCodeRequest"]["properties"];
    limit(
        &mut run_code["language"],
        json!({"enum": crate::fusion::languages()}),
    );
    for field in ["run_timeout", "compile_timeout"] {
        limit(
            &mut run_code[field],
            json!({"exclusiveMinimum": 0, "maximum": options.max_timeout_ms as f64 / 1000.0}),
        );
    }
    limit(
        &mut run_code["memory_limit_MB"],
        json!({"anyOf": [{"maximum": 0},
                         {"minimum": options.min_memory_mb, "maximum": options.max_memory_mb}]}),
    );
    limit(
        &mut run_code["files"],
        json!({"maxProperties": proto::execution::MAX_FILES,
               "propertyNames": {"minLength": 1, "pattern": path_pattern},
               "additionalProperties": {"type": ["string", "null"],
                                        "pattern": proto::file::BASE64_PATTERN}}),
    );
    limit(
        &mut run_code["fetch_files"],
        json!({"maxItems": proto::execution::MAX_FILES,
               "items": {"type": "string", "minLength": 1, "pattern": path_pattern}}),
    );
    let run_jupyter = &mut schemas["RunJupyterRequest"]["properties"];
    limit(&mut run_jupyter["kernel"], json!({"enum": ["python3"]}));
    limit(
        &mut run_jupyter["cell_timeout"],
        json!({"minimum": 0, "maximum": options.sessions.max_cell_timeout_ms as f64 / 1000.0}),
    );
    limit(
        &mut run_jupyter["total_timeout"],
        json!({"exclusiveMinimum": 0, "maximum": options.sessions.max_lifetime.as_secs_f64()}),
    );
    limit(
        &mut run_jupyter["memory_limit_MB"],
        json!({"anyOf": [{"maximum": 0},
                         {"minimum": 16, "maximum": options.sessions.max_memory_mb}]}),
    );
    let session_path = json!(SESSION_PATH_PATTERN);
    limit(
        &mut run_jupyter["files"],
        json!({"maxProperties": proto::execution::MAX_FILES,
               "propertyNames": {"minLength": 1, "maxLength": 1024, "pattern": session_path},
               "additionalProperties": {"type": "string", "pattern": proto::file::BASE64_PATTERN}}),
    );
    limit(
        &mut run_jupyter["fetch_files"],
        json!({"maxItems": proto::execution::MAX_FILES,
               "items": {"type": "string", "minLength": 1, "maxLength": 1024, "pattern": session_path}}),
    );
    // Sessions: the languages they are offered in, and the configured bounds.
    let limits = &options.sessions;
    let create = &mut schemas["SessionCreate"]["properties"];
    let session_languages: Vec<&str> = proto::api::sessions::SESSION_LANGUAGES
        .iter()
        .map(|l| l.as_str())
        .collect();
    create["language"] = json!({"type": "string", "enum": session_languages});
    limit(
        &mut create["memory_mb"],
        json!({"minimum": 16, "maximum": limits.max_memory_mb}),
    );
    limit(
        &mut create["idle_timeout_s"],
        json!({"minimum": 1, "maximum": limits.max_idle_timeout_s}),
    );
    // Not offered yet: a request naming any package is refused.
    limit(&mut create["packages"], json!({"maxItems": 0}));
    limit(
        &mut schemas["CellRequest"]["properties"]["timeout_ms"],
        json!({"minimum": 1, "maximum": limits.max_cell_timeout_ms}),
    );
    // An event's data is a `Progress` as JSON text; its name is one of the `event` values.
    let event_names: Vec<Value> = schemas["Progress"]["oneOf"]
        .as_array()
        .expect("Progress is a oneOf")
        .iter()
        .flat_map(|variant| variant["properties"]["event"]["enum"].as_array().cloned())
        .flatten()
        .collect();
    let event = &mut schemas["JobEvent"]["properties"];
    limit(&mut event["event"], json!({"enum": event_names}));
    limit(
        &mut event["data"],
        json!({"contentSchema": {"$ref": "#/components/schemas/Progress"}}),
    );
    let job = &mut schemas["JobSubmission"]["properties"];
    // null, like leaving it out: the language the request names, else Python.
    // Generation jobs' languages, and (agent jobs) the session languages.
    let generation_languages: Vec<Value> = Language::ALL
        .iter()
        .filter(|l| l.spec().generation || proto::api::sessions::SESSION_LANGUAGES.contains(l))
        .flat_map(|l| std::iter::once(l.as_str()).chain(l.spec().aliases.iter().copied()))
        .map(Value::from)
        .chain(std::iter::once(Value::Null))
        .collect();
    job["language"] = json!({"type": ["string", "null"], "enum": generation_languages,
        "description": "The language of the generated code (generation jobs: Python, JavaScript, TypeScript), or of an agent job's session (python, python-sci, javascript, bash). Absent: the language the instruction or the constraints name (\"a bash script\", \"in Go\", a `.js` file), else Python; the result's `language_reason` says which."});
    limit(
        &mut job["instruction"],
        json!({"pattern": NOT_BLANK_PATTERN}),
    );
    limit(
        &mut job["max_iterations"],
        json!({"minimum": 1, "maximum": options.max_iterations_limit}),
    );
    limit(
        &mut job["candidates"],
        json!({"minimum": 1, "maximum": crate::jobs::MAX_CANDIDATES}),
    );
    limit(
        &mut job["max_tokens_total"],
        json!({"minimum": 1, "maximum": options.max_tokens_total_limit}),
    );
    limit(
        &mut job["files"],
        json!({"maxProperties": crate::agent_jobs::MAX_FILES,
               "propertyNames": {"pattern": AGENT_FILE_PATTERN}}),
    );
    let agent = &mut schemas["AgentSettings"]["properties"];
    for (field, min, max) in [
        ("max_steps", 1, u64::from(crate::agent_jobs::MAX_STEPS)),
        ("max_seconds", 1, options.agent_max_seconds),
        ("stuck_repeats", 2, 100),
        ("stuck_errors", 2, 100),
        ("max_observation_chars", 200, 1_000_000),
        ("max_cpu_ms", 1, i64::MAX as u64),
        ("seed", 0, i64::MAX as u64),
    ] {
        limit(&mut agent[field], json!({"minimum": min, "maximum": max}));
    }
    limit(
        &mut agent["temperature"],
        json!({"minimum": 0.0, "maximum": 2.0}),
    );
    limit(
        &mut doc["paths"]["/v1/batches"]["post"]["requestBody"]["content"]["application/x-ndjson"]
            ["schema"],
        json!({"minItems": 1, "maxItems": options.max_batch_jobs}),
    );
    session_parameters(&mut doc);
    doc
}

/// An agent job's file path (`agent_jobs::check_files`): relative, `/`-separated components,
/// none empty or `..`, no NUL or backslash.
const AGENT_FILE_PATTERN: &str = r"^(?!(?:[^/]*/)*\.\.(?:/|$))[^/\\\x00]+(?:/[^/\\\x00]+)*$";

/// Adds `constraints` to a generated schema; for a nullable one (`type: [.., "null"]` or a
/// `oneOf` with `null`), to its non-null part.
fn limit(schema: &mut Value, constraints: Value) {
    assert!(
        schema.is_object(),
        "no schema to limit: the document changed"
    );
    let target = match schema.get_mut("oneOf") {
        Some(Value::Array(variants)) => variants
            .iter_mut()
            .find(|v| v.get("type") != Some(&json!("null")))
            .expect("a non-null variant"),
        _ => schema,
    };
    let (Value::Object(target), Value::Object(constraints)) = (target, constraints) else {
        unreachable!("schemas and constraints are objects")
    };
    target.extend(constraints);
}

/// `proto::execution::check_file_path` as a regular expression: relative or below
/// `proto::DATA_DIR`, `/`-separated components, none empty, `.` or `..`, no NUL, not a
/// reserved program or test file name (the 1024-byte limit is not expressed).
fn file_path_pattern() -> String {
    let reserved: Vec<String> = Language::reserved_files()
        .map(|f| f.replace('.', "\\."))
        .collect();
    format!(
        r"^(?!(?:{})$)(?:{}/)?(?!(?:[^/]*/)*\.{{1,2}}(?:/|$))[^/\x00]+(?:/[^/\x00]+)*$",
        reserved.join("|"),
        proto::DATA_DIR
    )
}

/// The session routes' path parameters: an id is a UUID, a file path one a session takes.
fn session_parameters(doc: &mut Value) {
    if let Value::Object(paths) = &mut doc["paths"] {
        for (path, item) in paths.iter_mut() {
            if !path.starts_with("/v1/sessions/{id}") {
                continue;
            }
            let Value::Object(operations) = item else {
                continue;
            };
            for operation in operations.values_mut() {
                let Some(Value::Array(parameters)) = operation.get_mut("parameters") else {
                    continue;
                };
                for parameter in parameters.iter_mut() {
                    match parameter["name"].as_str() {
                        Some("id") => {
                            parameter["schema"] = json!({"type": "string", "format": "uuid"})
                        }
                        Some("path") => {
                            parameter["schema"] = json!({"type": "string", "minLength": 1,
                            "maxLength": 1024, "pattern": SESSION_PATH_PATTERN});
                        }
                        _ => {}
                    }
                }
            }
        }
    }
}

/// `sessions::check_path` as a regular expression: relative, `/`-separated components, none
/// empty, `.` or `..`, no NUL (the 1024-byte limit is the schema's `maxLength`, in characters).
const SESSION_PATH_PATTERN: &str = r"^(?!(?:[^/]*/)*\.{1,2}(?:/|$))[^/\x00]+(?:/[^/\x00]+)*$";

/// An instruction is trimmed (Unicode white space) and must not be empty.
const NOT_BLANK_PATTERN: &str =
    r"[^\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]";

/// The `/readyz` body as the document shows it; `telemetry::ReadinessReport` is what is sent
/// (a test checks that the two agree).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct ReadinessReport {
    ready: bool,
    /// `"ok"` or the reason, per dependency (`broker`, `redis`, `process` while shutting down).
    checks: std::collections::BTreeMap<String, String>,
}

/// The operations routes of `telemetry::ops_router`, served next to the API without a key.
/// Only their documentation lives here.
#[allow(dead_code)]
mod ops {
    use super::ReadinessReport;

    /// 200 while the process runs.
    #[utoipa::path(
        get,
        path = "/healthz",
        tag = "operations",
        security(()),
        responses((status = 200, description = "`ok`", body = String, content_type = "text/plain"))
    )]
    pub(super) fn healthz() {}

    /// 200 when every dependency answers; otherwise 503 naming each failing one.
    #[utoipa::path(
        get,
        path = "/readyz",
        tag = "operations",
        security(()),
        responses(
            (status = 200, description = "Ready.", body = ReadinessReport),
            (status = 503, description = "Not ready (or shutting down); `checks` says why.", body = ReadinessReport),
        )
    )]
    pub(super) fn readyz() {}

    /// Prometheus metrics in the text exposition format.
    #[utoipa::path(
        get,
        path = "/metrics",
        tag = "operations",
        security(()),
        responses(
            (status = 200, description = "The metrics.", body = String, content_type = "text/plain"),
            (status = 500, description = "The metrics could not be encoded.", body = String, content_type = "text/plain"),
        )
    )]
    pub(super) fn metrics() {}
}

#[cfg(test)]
mod tests;
