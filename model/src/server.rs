//! A scripted model served as an OpenAI-compatible chat-completions endpoint on loopback, so
//! end-to-end tests and demos exercise the real HTTP provider. It is a fake model: every answer
//! comes from the script file, and the response's `model` field says `scripted`.
//!
//! The phase and function come from the `x-codegen-phase` / `x-codegen-function` headers that
//! the OpenAI provider sends; without them the phase is inferred from the schema name. An
//! entry with `tool_calls` is answered as OpenAI's `message.tool_calls` (`finish_reason:
//! tool_calls`).
//!
//! The request log ([`router_with_log`], or `CODEGEN_FAKE_MODEL_LOG` for [`router`]): every
//! request answered, failures included, appended as one JSON line `{"phase", "function",
//! "messages", "last", "tools", "status"}` (the count of messages, the last one's text cut to
//! 200 characters, the count of tools offered, the HTTP status answered), so that a test can
//! tell how many times each step was asked.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::Phase;
use crate::openai::{FUNCTION_HEADER, PHASE_HEADER};
use crate::scripted::{Scripted, approx_tokens};

/// The environment variable naming the request log of [`router`].
pub const LOG_ENV: &str = "CODEGEN_FAKE_MODEL_LOG";

/// How many characters of the last message a log line keeps.
const LOGGED_CHARS: usize = 200;

struct Fake {
    script: Arc<Scripted>,
    /// The request log, and the lock that keeps its lines whole.
    log: Option<(PathBuf, Mutex<()>)>,
}

/// The router: `POST /v1/chat/completions` (and `/chat/completions`), and `GET /v1/models`
/// (what a worker probes to see whether the model server is up). Requests are logged to the
/// file `CODEGEN_FAKE_MODEL_LOG` names, if it is set.
pub fn router(script: Arc<Scripted>) -> Router {
    let log = std::env::var_os(LOG_ENV)
        .filter(|path| !path.is_empty())
        .map(PathBuf::from);
    build(script, log)
}

/// [`router`], logging every request to `log` (appended to).
pub fn router_with_log(script: Arc<Scripted>, log: impl Into<PathBuf>) -> Router {
    build(script, Some(log.into()))
}

fn build(script: Arc<Scripted>, log: Option<PathBuf>) -> Router {
    let fake = Fake {
        script,
        log: log.map(|path| (path, Mutex::new(()))),
    };
    Router::new()
        .route("/v1/chat/completions", post(complete))
        .route("/chat/completions", post(complete))
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .with_state(Arc::new(fake))
}

async fn models() -> Response {
    axum::Json(
        json!({"object": "list", "data": [{"id": "scripted", "object": "model",
                                                 "owned_by": "codegen-cluster (FAKE)"}]}),
    )
    .into_response()
}

fn error(status: StatusCode, message: String) -> Response {
    (
        status,
        axum::Json(json!({"error": {"message": message, "type": "invalid_request_error"}})),
    )
        .into_response()
}

/// A message's text: its `content` (a string, or the text of its parts), then the calls it
/// made, as `prompt_contains` looks in them.
fn message_text(message: &Value) -> String {
    let mut text = match &message["content"] {
        Value::String(content) => content.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    };
    if let Some(calls) = message["tool_calls"].as_array() {
        for call in calls {
            text.push_str(call["function"]["name"].as_str().unwrap_or_default());
            text.push_str(call["function"]["arguments"].as_str().unwrap_or_default());
        }
    }
    text
}

async fn complete(
    State(fake): State<Arc<Fake>>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let phase = header(PHASE_HEADER);
    let function = header(FUNCTION_HEADER);
    let response = answer(&fake.script, phase.as_deref(), function.as_deref(), &body).await;
    if let Some((path, lock)) = &fake.log {
        log(
            path,
            lock,
            phase.as_deref(),
            function.as_deref(),
            &body,
            response.status(),
        );
    }
    response
}

/// Appends the request's line to the log; a log that cannot be written is warned of, and the
/// request answered all the same.
fn log(
    path: &std::path::Path,
    lock: &Mutex<()>,
    phase: Option<&str>,
    function: Option<&str>,
    body: &Value,
    status: StatusCode,
) {
    let messages = body["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let last: String = messages
        .last()
        .map(message_text)
        .unwrap_or_default()
        .chars()
        .take(LOGGED_CHARS)
        .collect();
    let tools = body["tools"].as_array().map_or(0, Vec::len);
    let mut line = json!({
        "phase": phase,
        "function": function,
        "messages": messages.len(),
        "last": last,
        "tools": tools,
        "seed": body.get("seed"),
        "temperature": body.get("temperature"),
        "status": status.as_u16(),
    })
    .to_string();
    line.push('\n');
    let _whole = lock.lock().expect("poisoned");
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut file| file.write_all(line.as_bytes()));
    if let Err(e) = written {
        tracing::warn!(path = %path.display(), error = %e, "cannot write the fake model's request log");
    }
}

async fn answer(
    script: &Scripted,
    phase: Option<&str>,
    function: Option<&str>,
    body: &Value,
) -> Response {
    let schema_name = body["response_format"]["json_schema"]["name"].as_str();
    let phase = match phase {
        Some(phase) => match phase.parse::<Phase>() {
            Ok(phase) => phase,
            Err(e) => return error(StatusCode::BAD_REQUEST, e),
        },
        None => match schema_name {
            Some("function_specs") => Phase::Plan,
            Some("test_cases") => Phase::Tests,
            Some("implementation") => Phase::Implement,
            _ => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "cannot tell the phase: send {PHASE_HEADER} or a known json_schema name"
                    ),
                );
            }
        },
    };
    let prompt: String = body["messages"]
        .as_array()
        .map(|m| m.iter().map(message_text).collect())
        .unwrap_or_default();
    // `n` answers: the script's next n entries for this request, one choice each (a real
    // server samples them from one prompt).
    let n = body["n"].as_u64().unwrap_or(1).clamp(1, 16);
    let mut messages = Vec::new();
    let mut completion_tokens = 0;
    for _ in 0..n {
        let Some(picked) = script.pick(phase, function, &prompt) else {
            return error(
                StatusCode::NOT_FOUND,
                format!(
                    "the scripted model has no answer for phase {} function {}",
                    phase.as_str(),
                    function.unwrap_or("-")
                ),
            );
        };
        let entry = picked.entry;
        if entry.latency_ms > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(entry.latency_ms)).await;
        }
        if let Some(status) = entry.status {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return error(
                status,
                format!("scripted failure: HTTP {}", status.as_u16()),
            );
        }
        let content = picked.text();
        completion_tokens += approx_tokens(&content);
        let calls = picked.tool_calls();
        messages.push(if calls.is_empty() {
            (json!({"role": "assistant", "content": content}), "stop")
        } else {
            let calls: Vec<Value> = calls
                .iter()
                .map(|call| {
                    completion_tokens += approx_tokens(&call.arguments);
                    json!({
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    })
                })
                .collect();
            (
                json!({
                    "role": "assistant",
                    "content": entry.text.as_ref().map(|_| content),
                    "tool_calls": calls,
                }),
                "tool_calls",
            )
        });
    }
    let prompt_tokens = approx_tokens(&prompt);
    let choices: Vec<Value> = messages
        .into_iter()
        .enumerate()
        .map(|(index, (message, finish_reason))| {
            json!({
                "index": index,
                "message": message,
                "finish_reason": finish_reason,
            })
        })
        .collect();
    axum::Json(json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 0,
        "model": "scripted",
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }))
    .into_response()
}
