//! An OTLP/HTTP collector in the test: takes the JSON trace exports of the cluster's
//! processes (`POST /v1/traces`) and keeps their spans, each with its process's resource.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use serde_json::Value;

/// One span as exported.
#[derive(Debug, Clone)]
pub struct Span {
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub name: String,
    /// OTLP's enum: 1 internal, 2 server, 3 client, 4 producer, 5 consumer.
    pub kind: u64,
    /// Attribute values as text.
    pub attributes: BTreeMap<String, String>,
    /// The exporting process's resource attributes (`service.name`, `service.instance.id`).
    pub resource: BTreeMap<String, String>,
    /// OTLP's status code: 0 unset, 1 ok, 2 error.
    pub status_code: u64,
}

impl Span {
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

/// The collector; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Collector {
    spans: Arc<Mutex<Vec<Span>>>,
}

impl Collector {
    /// Serves on a free loopback port; returns it and its base URL (the OTLP endpoint).
    pub async fn start() -> (Self, String) {
        let collector = Self::default();
        let router = Router::new()
            .route("/v1/traces", post(receive))
            .with_state(collector.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let url = format!("http://{}", listener.local_addr().expect("bound"));
        tokio::spawn(async move { axum::serve(listener, router).await });
        (collector, url)
    }

    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().expect("poisoned").clone()
    }
}

async fn receive(State(collector): State<Collector>, body: axum::body::Bytes) -> StatusCode {
    let Ok(export) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST;
    };
    let mut received = Vec::new();
    for resource_spans in export["resourceSpans"].as_array().into_iter().flatten() {
        let resource = attributes(&resource_spans["resource"]["attributes"]);
        for scope in resource_spans["scopeSpans"]
            .as_array()
            .into_iter()
            .flatten()
        {
            for span in scope["spans"].as_array().into_iter().flatten() {
                let text = |key: &str| span[key].as_str().unwrap_or_default().to_owned();
                received.push(Span {
                    trace_id: text("traceId").to_lowercase(),
                    span_id: text("spanId").to_lowercase(),
                    parent_span_id: text("parentSpanId").to_lowercase(),
                    name: text("name"),
                    kind: span["kind"].as_u64().unwrap_or(0),
                    attributes: attributes(&span["attributes"]),
                    resource: resource.clone(),
                    status_code: status_code(&span["status"]["code"]),
                });
            }
        }
    }
    collector.spans.lock().expect("poisoned").extend(received);
    StatusCode::OK
}

/// OTLP's status code, a number or (in some JSON encoders) the enum's name.
fn status_code(code: &Value) -> u64 {
    match code {
        Value::Number(n) => n.as_u64().unwrap_or(0),
        Value::String(s) if s == "STATUS_CODE_ERROR" => 2,
        Value::String(s) if s == "STATUS_CODE_OK" => 1,
        _ => 0,
    }
}

/// OTLP's `[{key, value: {stringValue | intValue | boolValue | doubleValue}}]` as text.
fn attributes(list: &Value) -> BTreeMap<String, String> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|kv| {
            let key = kv["key"].as_str()?.to_owned();
            let value = kv["value"].as_object()?.values().next()?;
            let text = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            Some((key, text))
        })
        .collect()
}
