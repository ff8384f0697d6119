//! OpenAI-compatible chat completions (OpenAI, vLLM, Ollama, llama.cpp server, …).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::http::{classify, transport, truncate};
use crate::{
    CallError, ChatRequest, ChatResponse, Choice, Error, Message, Options, Provider, Role,
    SchemaSpec, StructuredOutput, ToolCall, Usage,
};

/// Headers that tell a scripted endpoint which phase and function a request is about; real
/// servers ignore unknown headers.
pub const PHASE_HEADER: &str = "x-codegen-phase";
pub const FUNCTION_HEADER: &str = "x-codegen-function";

#[derive(Debug, Clone)]
pub struct OpenAi {
    http: reqwest::Client,
    endpoint: String,
    probe_url: String,
    props_url: String,
    metrics_url: String,
    api_key: Option<String>,
    model: String,
    temperature: f32,
    max_tokens: u32,
    /// How answers are asked for now: the configured form until the server refuses it
    /// (`StructuredOutput::Native`'s fallbacks), shared by every clone.
    structured: Arc<AtomicU8>,
}

/// The forms of structured output, from the strictest a server may refuse to the plainest.
const FORMS: [StructuredOutput; 3] = [
    StructuredOutput::Native,
    StructuredOutput::JsonObject,
    StructuredOutput::Prompted,
];

fn form_index(form: StructuredOutput) -> u8 {
    match form {
        StructuredOutput::Native => 0,
        StructuredOutput::JsonObject => 1,
        StructuredOutput::Prompted => 2,
    }
}

impl OpenAi {
    /// `base_url` falls back to `OPENAI_BASE_URL`, then the public endpoint; the key to
    /// `OPENAI_API_KEY`.
    pub fn new(options: &Options) -> Result<Self, Error> {
        let connection = crate::http::connection(
            options,
            "OPENAI_BASE_URL",
            "https://api.openai.com/v1",
            "OPENAI_API_KEY",
            "/chat/completions",
            "/models",
        )?;
        Ok(Self {
            http: connection.http,
            endpoint: connection.endpoint,
            probe_url: connection.probe_url,
            props_url: connection.props_url,
            metrics_url: connection.metrics_url,
            api_key: connection.api_key,
            model: options.model.clone(),
            temperature: options.temperature,
            max_tokens: options.max_tokens,
            structured: Arc::new(AtomicU8::new(form_index(options.structured_output))),
        })
    }

    /// How answers are asked for now.
    pub fn structured(&self) -> StructuredOutput {
        FORMS[usize::from(self.structured.load(Ordering::Relaxed)).min(FORMS.len() - 1)]
    }

    /// After the server refused `refused` (its answer named `response_format`): the next
    /// plainer form from now on, `None` when none is left. Clones that raced to the same
    /// refusal move on once.
    fn fall_back(&self, refused: StructuredOutput) -> Option<StructuredOutput> {
        let from = form_index(refused);
        let next = *FORMS.get(usize::from(from) + 1)?;
        let _ = self.structured.compare_exchange(
            from,
            form_index(next),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        Some(self.structured())
    }

    /// The request body, exposed for tests of its shape.
    pub fn body(&self, request: &ChatRequest) -> Value {
        self.body_in(request, self.structured())
    }

    fn body_in(&self, request: &ChatRequest, structured: StructuredOutput) -> Value {
        let mut system = request.system.clone();
        if let (Some(schema), StructuredOutput::Prompted) = (&request.schema, structured) {
            system.push_str(&prompted_schema(schema));
        }
        let mut messages = vec![json!({"role": "system", "content": system})];
        messages.extend(request.messages.iter().map(message));
        let mut body = json!({
            "model": self.model,
            "messages": messages,
            "temperature": request.temperature.unwrap_or(self.temperature),
            "max_tokens": request.max_tokens.unwrap_or(self.max_tokens),
        });
        if request.n > 1 {
            body["n"] = json!(request.n);
        }
        if let Some(seed) = request.seed {
            body["seed"] = json!(seed);
        }
        // No `tool_choice`: `auto` is every server's default, and an answer without a call is
        // the agent's last word.
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|tool| {
                    json!({"type": "function", "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                    }})
                })
                .collect();
        }
        // A free-text request (no schema) is asked as a plain chat call.
        let Some(schema) = &request.schema else {
            return body;
        };
        match structured {
            StructuredOutput::Native => {
                body["response_format"] = json!({
                    "type": "json_schema",
                    "json_schema": {
                        "name": schema.name,
                        "schema": schema.schema,
                        "strict": schema.strict,
                    }
                });
            }
            StructuredOutput::JsonObject => {
                body["response_format"] = json!({
                    "type": "json_object",
                    "schema": schema.schema,
                });
            }
            StructuredOutput::Prompted => {}
        }
        body
    }
}

/// One turn as the API takes it: an assistant turn with its calls (`content` null when it
/// said nothing else), a tool turn as the result of the call it names.
fn message(m: &Message) -> Value {
    match m.role {
        Role::User => json!({"role": "user", "content": m.content}),
        Role::Assistant if m.tool_calls.is_empty() => {
            json!({"role": "assistant", "content": m.content})
        }
        Role::Assistant => json!({
            "role": "assistant",
            "content": (!m.content.is_empty()).then_some(m.content.as_str()),
            "tool_calls": m.tool_calls.iter().map(|call| json!({
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            })).collect::<Vec<_>>(),
        }),
        Role::Tool => match &m.tool_call_id {
            Some(id) => json!({"role": "tool", "tool_call_id": id, "content": m.content}),
            // A result that answers no call has nothing to pair with: the API would refuse
            // it as a tool turn, so it goes as what the user says.
            None => json!({"role": "user", "content": m.content}),
        },
    }
}

/// The calls of an answer's `message`, arguments as the model wrote them. A server that gives
/// no id (some compatible ones) gets one derived from the answer; one that gives the
/// arguments as an object (rather than its JSON text) has them written back as text.
fn tool_calls(message: &Value, answer: &str) -> Vec<ToolCall> {
    let Some(calls) = message["tool_calls"].as_array() else {
        return Vec::new();
    };
    calls
        .iter()
        .enumerate()
        .map(|(index, call)| {
            let function = &call["function"];
            let arguments = match &function["arguments"] {
                Value::String(text) => text.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            ToolCall {
                id: call["id"]
                    .as_str()
                    .filter(|id| !id.is_empty())
                    .map_or_else(|| crate::tools::derived_id(answer, index), str::to_owned),
                name: function["name"].as_str().unwrap_or_default().to_owned(),
                arguments,
            }
        })
        .collect()
}

/// The answer's token ids where the server sends them unasked-for in a known form: vLLM's
/// `token_ids` (with `return_token_ids`), llama.cpp's `logprobs.content[].id`, or vLLM's
/// `token_id:<n>` tokens (`return_tokens_as_token_ids`). `None` when any is missing: a
/// partial list would be wrong, not short.
fn token_ids(choice: &Value) -> Option<Vec<u32>> {
    let id = |v: &Value| v.as_u64().and_then(|n| u32::try_from(n).ok());
    if let Some(ids) = choice["token_ids"].as_array() {
        return ids.iter().map(id).collect();
    }
    let content = choice["logprobs"]["content"].as_array()?;
    if content.is_empty() {
        return None;
    }
    content
        .iter()
        .map(|token| {
            id(&token["id"]).or_else(|| {
                token["token"]
                    .as_str()?
                    .strip_prefix("token_id:")?
                    .parse()
                    .ok()
            })
        })
        .collect()
}

/// Whether an error answer is the server refusing the request's `response_format` (not a
/// throttle or a gateway's: those name no field).
fn refuses_response_format(status: reqwest::StatusCode, text: &str) -> bool {
    !matches!(status.as_u16(), 429 | 502..=504 | 529)
        && (status.is_client_error() || status.is_server_error())
        && text.contains("response_format")
}

/// Whether an error answer is the server refusing the request's `tools` (llama-cpp-python:
/// HTTP 500 naming them), as [`refuses_response_format`] tells its field.
fn refuses_tools(status: reqwest::StatusCode, text: &str) -> bool {
    !matches!(status.as_u16(), 429 | 502..=504 | 529)
        && (status.is_client_error() || status.is_server_error())
        && names_tools(text)
}

/// What `Model::turn` reads as a refusal of tool calling.
fn names_tools(text: &str) -> bool {
    text.contains("tools") || text.contains("tool_choice")
}

/// A refusal of `tools` as [`CallError::Rejected`], in the server's words (which name them).
fn refused_tools(
    status: reqwest::StatusCode,
    headers: &reqwest::header::HeaderMap,
    text: &str,
) -> CallError {
    let message = match classify(status, headers, text) {
        CallError::Retryable { message, .. }
        | CallError::Throttled { message, .. }
        | CallError::ServerError { message, .. }
        | CallError::Rejected { message, .. }
        | CallError::SpendLimit(message)
        | CallError::ReplayMiss(message) => message,
    };
    // The error's own message may leave out where the body named them.
    let message = if names_tools(&message) {
        message
    } else {
        format!("HTTP {}: {}", status.as_u16(), truncate(text, 500))
    };
    CallError::Rejected {
        status: status.as_u16(),
        message,
    }
}

/// The schema, spelled out for servers that cannot enforce it.
pub(crate) fn prompted_schema(schema: &SchemaSpec) -> String {
    format!(
        "\n\nAnswer with a single JSON object and nothing else. It must follow this JSON schema \
         (named `{}`):\n{}",
        schema.name, schema.schema
    )
}

#[async_trait]
impl Provider for OpenAi {
    fn name(&self) -> &str {
        "openai"
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn endpoint(&self) -> &str {
        &self.endpoint
    }

    async fn probe(&self) -> Result<(), crate::ProbeFailure> {
        let mut call = self.http.get(&self.probe_url);
        if let Some(key) = &self.api_key {
            call = call.bearer_auth(key);
        }
        crate::http::probe(call, &self.probe_url).await
    }

    async fn slots(&self) -> Option<u32> {
        let mut call = self.http.get(&self.props_url);
        if let Some(key) = &self.api_key {
            call = call.bearer_auth(key);
        }
        crate::http::slots(call).await
    }

    async fn queue(&self) -> crate::adaptive::QueueReport {
        let mut call = self.http.get(&self.metrics_url);
        if let Some(key) = &self.api_key {
            call = call.bearer_auth(key);
        }
        crate::http::queue(call).await
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, CallError> {
        let mut structured = self.structured();
        let text = loop {
            let mut call = self
                .http
                .post(&self.endpoint)
                .header(PHASE_HEADER, request.phase.as_str())
                .json(&self.body_in(request, structured));
            if let Some(function) = &request.function {
                call = call.header(FUNCTION_HEADER, function);
            }
            if let Some(key) = &self.api_key {
                call = call.bearer_auth(key);
            }
            let response = call.send().await.map_err(transport)?;
            let status = response.status();
            let headers = response.headers().clone();
            let text = response.text().await.map_err(transport)?;
            if status.is_success() {
                break text;
            }
            // A server that does not take this form of `response_format` says so by naming
            // it (llama-cpp-python: HTTP 500, "Input should be 'text' or 'json_object'"): ask
            // again at once in the next plainer form, which every later call uses too.
            // A server refusing `tools` is not asked again with them: the refusal goes up as
            // one (not as a server error to retry) so that `Model::turn` asks in the
            // prompted form, which has none.
            if !request.tools.is_empty() && refuses_tools(status, &text) {
                return Err(refused_tools(status, &headers, &text));
            }
            if request.schema.is_some()
                && refuses_response_format(status, &text)
                && let Some(next) = self.fall_back(structured)
            {
                tracing::warn!(
                    endpoint = %self.endpoint,
                    status = status.as_u16(),
                    refused = ?structured,
                    now = ?next,
                    answer = %truncate(&text, 300),
                    "the model server refuses this form of structured output; falling back"
                );
                structured = next;
                continue;
            }
            return Err(classify(status, &headers, &text));
        };
        let value: Value = serde_json::from_str(&text).map_err(|e| CallError::Retryable {
            message: format!("unreadable response ({e}): {}", truncate(&text, 200)),
            retry_after: None,
        })?;
        let choice = |choice: &Value| {
            let message = &choice["message"];
            Choice {
                text: message["content"]
                    .as_str()
                    .or_else(|| message["refusal"].as_str())
                    .unwrap_or_default()
                    .to_owned(),
                truncated: choice["finish_reason"] == "length",
            }
        };
        let choices: Vec<Choice> = match value["choices"].as_array() {
            Some(choices) => choices.iter().map(choice).collect(),
            None => Vec::new(),
        };
        let mut choices = choices.into_iter();
        let first = choices.next().unwrap_or(Choice {
            text: String::new(),
            truncated: false,
        });
        let usage = Usage {
            prompt_tokens: value["usage"]["prompt_tokens"].as_u64().unwrap_or(0),
            completion_tokens: value["usage"]["completion_tokens"].as_u64().unwrap_or(0),
        };
        let first_choice = &value["choices"][0];
        let tool_calls = tool_calls(&first_choice["message"], &text);
        Ok(ChatResponse {
            text: first.text,
            json: None,
            usage,
            truncated: first.truncated,
            // At most what was asked: a server that gives more is not paid for twice.
            others: choices.take(request.n.saturating_sub(1) as usize).collect(),
            tool_problem: crate::tools::arguments_problem(&tool_calls),
            tool_calls,
            token_ids: token_ids(first_choice),
        })
    }
}
