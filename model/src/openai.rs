//! OpenAI-compatible chat completions (OpenAI, vLLM, Ollama, llama.cpp server, …).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::http::{classify, transport, truncate};
use crate::{
    CallError, ChatRequest, ChatResponse, Choice, Error, Options, Provider, Role, SchemaSpec,
    StructuredOutput, Usage,
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
        messages.extend(request.messages.iter().map(|m| {
            json!({"role": match m.role { Role::User | Role::Tool => "user", Role::Assistant => "assistant" },
                   "content": m.content})
        }));
        let mut body = json!({
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": request.max_tokens.unwrap_or(self.max_tokens),
        });
        if request.n > 1 {
            body["n"] = json!(request.n);
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

/// Whether an error answer is the server refusing the request's `response_format` (not a
/// throttle or a gateway's: those name no field).
fn refuses_response_format(status: reqwest::StatusCode, text: &str) -> bool {
    !matches!(status.as_u16(), 429 | 502..=504 | 529)
        && (status.is_client_error() || status.is_server_error())
        && text.contains("response_format")
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

    async fn probe(&self) -> Result<(), String> {
        let mut call = self.http.get(&self.probe_url);
        if let Some(key) = &self.api_key {
            call = call.bearer_auth(key);
        }
        crate::http::probe(call, &self.probe_url).await
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
            if refuses_response_format(status, &text)
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
        Ok(ChatResponse {
            text: first.text,
            json: None,
            usage,
            truncated: first.truncated,
            // At most what was asked: a server that gives more is not paid for twice.
            others: choices.take(request.n.saturating_sub(1) as usize).collect(),
        tool_calls: Vec::new(),
        tool_problem: None,
        token_ids: None,
        })
    }
}
