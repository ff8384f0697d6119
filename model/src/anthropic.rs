//! Anthropic's Messages API; structured output through a forced tool call, an agent's tools
//! as `tool_use` and `tool_result` blocks. The API has no seed: a request's `seed` is not sent.

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::http::{classify, transport, truncate};
use crate::openai::prompted_schema;
use crate::{
    CallError, ChatRequest, ChatResponse, Error, Message, Options, Provider, Role,
    StructuredOutput, ToolCall, Usage,
};

pub const API_VERSION: &str = "2023-06-01";

#[derive(Debug, Clone)]
pub struct Anthropic {
    http: reqwest::Client,
    endpoint: String,
    probe_url: String,
    api_key: Option<String>,
    model: String,
    temperature: f32,
    max_tokens: u32,
    structured: StructuredOutput,
}

impl Anthropic {
    /// `base_url` falls back to `ANTHROPIC_BASE_URL`, then the public endpoint; the key to
    /// `ANTHROPIC_API_KEY`.
    pub fn new(options: &Options) -> Result<Self, Error> {
        let connection = crate::http::connection(
            options,
            "ANTHROPIC_BASE_URL",
            "https://api.anthropic.com",
            "ANTHROPIC_API_KEY",
            "/v1/messages",
            "/v1/models",
        )?;
        Ok(Self {
            http: connection.http,
            endpoint: connection.endpoint,
            probe_url: connection.probe_url,
            api_key: connection.api_key,
            model: options.model.clone(),
            temperature: options.temperature,
            max_tokens: options.max_tokens,
            structured: options.structured_output,
        })
    }

    /// The request body, exposed for tests of its shape.
    pub fn body(&self, request: &ChatRequest) -> Value {
        let mut system = request.system.clone();
        if let (Some(schema), StructuredOutput::Prompted) = (&request.schema, self.structured) {
            system.push_str(&prompted_schema(schema));
        }
        // No seed: the Messages API has none, so a request's `seed` is not sent.
        let mut body = json!({
            "model": self.model,
            "max_tokens": request.max_tokens.unwrap_or(self.max_tokens),
            "temperature": request.temperature.unwrap_or(self.temperature),
            "system": system,
            "messages": messages(&request.messages),
        });
        // A free-text request (no schema) is asked as a plain message.
        if let Some(schema) = self.forced(request) {
            body["tools"] = json!([{
                "name": schema.name,
                "description": format!("Submit the answer as a `{}` object.", schema.name),
                "input_schema": schema.schema,
            }]);
            body["tool_choice"] = json!({"type": "tool", "name": schema.name});
        } else if !request.tools.is_empty() {
            // An agent's tools, the model free to call any, several or none (`auto`).
            body["tools"] = request
                .tools
                .iter()
                .map(|tool| {
                    json!({
                        "name": tool.name,
                        "description": tool.description,
                        "input_schema": tool.parameters,
                    })
                })
                .collect();
        }
        body
    }

    /// The schema of a request answered by a forced tool call (structured output), if it is one.
    fn forced<'r>(&self, request: &'r ChatRequest) -> Option<&'r crate::SchemaSpec> {
        request
            .schema
            .as_ref()
            .filter(|_| self.structured != StructuredOutput::Prompted)
    }
}

/// The conversation as the Messages API takes it. An assistant turn's calls are `tool_use`
/// blocks after its text; the results of one turn's calls go back together in the next user
/// message, as `tool_result` blocks (the API refuses results split over several), with a user
/// turn that follows them as a text block after them (turns must alternate). Every other turn
/// is a plain message, as it always was.
fn messages(messages: &[Message]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    // Whether the last message sent is a user message of tool results, still open to more.
    let mut results_open = false;
    for m in messages {
        match (m.role, &m.tool_call_id) {
            (Role::Tool, Some(id)) => {
                let block = json!({"type": "tool_result", "tool_use_id": id, "content": m.content});
                match out.last_mut() {
                    Some(last) if results_open => push_block(last, block),
                    _ => out.push(json!({"role": "user", "content": [block]})),
                }
                results_open = true;
            }
            (Role::User | Role::Tool, _) if results_open => {
                let last = out.last_mut().expect("results were sent");
                push_block(last, json!({"type": "text", "text": m.content}));
                results_open = false;
            }
            (Role::Assistant, _) if !m.tool_calls.is_empty() => {
                let mut blocks = Vec::new();
                if !m.content.is_empty() {
                    blocks.push(json!({"type": "text", "text": m.content}));
                }
                blocks.extend(m.tool_calls.iter().map(|call| {
                    // The API takes an object only: arguments the model wrote wrongly go back as
                    // none (their result, the agent's complaint, says what was wrong).
                    let input = match serde_json::from_str::<Value>(&call.arguments) {
                        Ok(input @ Value::Object(_)) => input,
                        _ => json!({}),
                    };
                    json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input})
                }));
                out.push(json!({"role": "assistant", "content": blocks}));
                results_open = false;
            }
            // A result that answers no call has no `tool_use` to pair with: what the user says.
            (role, _) => {
                let role = match role {
                    Role::User | Role::Tool => "user",
                    Role::Assistant => "assistant",
                };
                out.push(json!({"role": role, "content": m.content}));
                results_open = false;
            }
        }
    }
    out
}

fn push_block(message: &mut Value, block: Value) {
    if let Some(blocks) = message["content"].as_array_mut() {
        blocks.push(block);
    }
}

#[async_trait]
impl Provider for Anthropic {
    fn name(&self) -> &str {
        "anthropic"
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn endpoint(&self) -> &str {
        &self.endpoint
    }

    async fn probe(&self) -> Result<(), crate::ProbeFailure> {
        let mut call = self
            .http
            .get(&self.probe_url)
            .header("anthropic-version", API_VERSION);
        if let Some(key) = &self.api_key {
            call = call.header("x-api-key", key);
        }
        crate::http::probe(call, &self.probe_url).await
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, CallError> {
        let mut call = self
            .http
            .post(&self.endpoint)
            .header("anthropic-version", API_VERSION)
            .json(&self.body(request));
        if let Some(key) = &self.api_key {
            call = call.header("x-api-key", key);
        }
        let response = call.send().await.map_err(transport)?;
        let status = response.status();
        let headers = response.headers().clone();
        let text = response.text().await.map_err(transport)?;
        if !status.is_success() {
            return Err(classify(status, &headers, &text));
        }
        let value: Value = serde_json::from_str(&text).map_err(|e| CallError::Retryable {
            message: format!("unreadable response ({e}): {}", truncate(&text, 200)),
            retry_after: None,
        })?;
        let blocks = value["content"].as_array().cloned().unwrap_or_default();
        let text_answer: String = blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n");
        let usage = Usage {
            prompt_tokens: value["usage"]["input_tokens"].as_u64().unwrap_or(0),
            completion_tokens: value["usage"]["output_tokens"].as_u64().unwrap_or(0),
        };
        let truncated = value["stop_reason"] == "max_tokens";
        let tool_uses = blocks.iter().filter(|b| b["type"] == "tool_use");
        // A forced call is the structured answer; any other request's calls are an agent's.
        let forced_input = match self.forced(request) {
            Some(_) => tool_uses.clone().next().map(|b| b["input"].clone()),
            None => None,
        };
        let tool_calls: Vec<ToolCall> = match forced_input {
            Some(_) => Vec::new(),
            None => tool_uses
                .enumerate()
                .map(|(index, block)| ToolCall {
                    id: block["id"]
                        .as_str()
                        .map_or_else(|| crate::tools::derived_id(&text, index), str::to_owned),
                    name: block["name"].as_str().unwrap_or_default().to_owned(),
                    arguments: block["input"].to_string(),
                })
                .collect(),
        };
        Ok(match forced_input {
            Some(input) => ChatResponse {
                text: input.to_string(),
                json: Some(input),
                usage,
                truncated,
                others: Vec::new(),
                tool_calls: Vec::new(),
                tool_problem: None,
                token_ids: None,
            },
            None => ChatResponse {
                text: text_answer,
                json: None,
                usage,
                truncated,
                others: Vec::new(),
                tool_problem: crate::tools::arguments_problem(&tool_calls),
                tool_calls,
                token_ids: None,
            },
        })
    }
}
