//! Anthropic's Messages API; structured output through a forced tool call.

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::http::{classify, transport, truncate};
use crate::openai::prompted_schema;
use crate::{
    CallError, ChatRequest, ChatResponse, Error, Options, Provider, Role, StructuredOutput, Usage,
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
        let messages: Vec<Value> = request
            .messages
            .iter()
            .map(|m| {
                json!({"role": match m.role { Role::User | Role::Tool => "user", Role::Assistant => "assistant" },
                       "content": m.content})
            })
            .collect();
        let mut body = json!({
            "model": self.model,
            "max_tokens": request.max_tokens.unwrap_or(self.max_tokens),
            "temperature": self.temperature,
            "system": system,
            "messages": messages,
        });
        // A free-text request (no schema) is asked as a plain message.
        if let Some(schema) = request
            .schema
            .as_ref()
            .filter(|_| self.structured != StructuredOutput::Prompted)
        {
            body["tools"] = json!([{
                "name": schema.name,
                "description": format!("Submit the answer as a `{}` object.", schema.name),
                "input_schema": schema.schema,
            }]);
            body["tool_choice"] = json!({"type": "tool", "name": schema.name});
        }
        body
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

    async fn probe(&self) -> Result<(), String> {
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
        let tool_input = blocks
            .iter()
            .find(|b| b["type"] == "tool_use")
            .map(|b| b["input"].clone());
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
        Ok(match tool_input {
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
            tool_calls: Vec::new(),
            tool_problem: None,
            token_ids: None,
            },
        })
    }
}
