//! A scripted model served as an OpenAI-compatible chat-completions endpoint on loopback, so
//! end-to-end tests and demos exercise the real HTTP provider. It is a fake model: every answer
//! comes from the script file, and the response's `model` field says `scripted`.
//!
//! The phase and function come from the `x-codegen-phase` / `x-codegen-function` headers that
//! the OpenAI provider sends; without them the phase is inferred from the schema name.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::Phase;
use crate::openai::{FUNCTION_HEADER, PHASE_HEADER};
use crate::scripted::{Scripted, approx_tokens};

/// The router: `POST /v1/chat/completions` (and `/chat/completions`), and `GET /v1/models`
/// (what a worker probes to see whether the model server is up).
pub fn router(script: Arc<Scripted>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(complete))
        .route("/chat/completions", post(complete))
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .with_state(script)
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

async fn complete(
    State(script): State<Arc<Scripted>>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let schema_name = body["response_format"]["json_schema"]["name"].as_str();
    let phase = match header(PHASE_HEADER) {
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
    let function = header(FUNCTION_HEADER);
    let prompt: String = body["messages"]
        .as_array()
        .map(|m| m.iter().filter_map(|m| m["content"].as_str()).collect())
        .unwrap_or_default();
    // `n` answers: the script's next n entries for this request, one choice each (a real
    // server samples them from one prompt).
    let n = body["n"].as_u64().unwrap_or(1).clamp(1, 16);
    let mut contents = Vec::new();
    for _ in 0..n {
        let Some(entry) = script.answer(phase, function.as_deref(), &prompt) else {
            return error(
                StatusCode::NOT_FOUND,
                format!(
                    "the scripted model has no answer for phase {} function {}",
                    phase.as_str(),
                    function.as_deref().unwrap_or("-")
                ),
            );
        };
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
        contents.push(match (&entry.answer, &entry.text) {
            (Some(answer), _) => answer.to_string(),
            (None, Some(text)) => text.clone(),
            (None, None) => String::new(),
        });
    }
    let prompt_tokens = approx_tokens(&prompt);
    let completion_tokens: u64 = contents.iter().map(|c| approx_tokens(c)).sum();
    let choices: Vec<Value> = contents
        .into_iter()
        .enumerate()
        .map(|(index, content)| {
            json!({
                "index": index,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
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
