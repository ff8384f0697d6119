//! Record real exchanges to a folder, and replay them deterministically.
//!
//! An exchange is keyed by a hash of what determines the answer: phase, function, system
//! prompt, messages (tool calls and results included) and schema, and an agent's tools and a
//! request's temperature and seed when it has them. A replay of a request that was never recorded fails with the
//! key and folder named; it never falls through to a real model.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{CallError, ChatRequest, ChatResponse, Error, Provider};

/// One recorded exchange, as stored on disk.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Exchange {
    pub key: String,
    pub provider: String,
    pub model: String,
    pub request: ChatRequest,
    pub response: ChatResponse,
}

/// The key of a request: sha256 over its canonical JSON, hex. An agent's tools and a
/// request's own sampling settings are part of it only when given, so that every request
/// without them keeps the key it was recorded under (as do messages without tool calls).
pub fn key(request: &ChatRequest) -> String {
    let mut canonical = serde_json::json!({
        "phase": request.phase,
        "function": request.function,
        "system": request.system,
        "messages": request.messages,
        "schema": request.schema,
    });
    if !request.tools.is_empty() {
        canonical["tools"] = serde_json::json!(request.tools);
    }
    if let Some(temperature) = request.temperature {
        canonical["temperature"] = serde_json::json!(temperature);
    }
    if let Some(seed) = request.seed {
        canonical["seed"] = serde_json::json!(seed);
    }
    hex::encode(Sha256::digest(canonical.to_string().as_bytes()))
}

fn file_name(request: &ChatRequest, key: &str) -> String {
    let function: String = request
        .function
        .as_deref()
        .unwrap_or("-")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{}-{function}-{}.json", request.phase.as_str(), &key[..16])
}

/// Wraps a provider and writes every successful exchange to `dir`.
pub struct Recorder {
    inner: Arc<dyn Provider>,
    dir: PathBuf,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("dir", &self.dir).finish()
    }
}

impl Recorder {
    pub fn new(inner: Arc<dyn Provider>, dir: PathBuf) -> Result<Self, Error> {
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::Config(format!("record folder {}: {e}", dir.display())))?;
        Ok(Self { inner, dir })
    }
}

#[async_trait]
impl Provider for Recorder {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn model(&self) -> &str {
        self.inner.model()
    }

    fn endpoint(&self) -> &str {
        self.inner.endpoint()
    }

    async fn probe(&self) -> Result<(), crate::ProbeFailure> {
        self.inner.probe().await
    }

    async fn slots(&self) -> Option<u32> {
        self.inner.slots().await
    }

    async fn queue(&self) -> crate::adaptive::QueueReport {
        self.inner.queue().await
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, CallError> {
        let response = self.inner.chat(request).await?;
        let key = key(request);
        let exchange = Exchange {
            key: key.clone(),
            provider: self.inner.name().to_owned(),
            model: self.inner.model().to_owned(),
            request: request.clone(),
            response: response.clone(),
        };
        let path = self.dir.join(file_name(request, &key));
        let written = serde_json::to_vec_pretty(&exchange)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&path, bytes));
        if let Err(e) = written {
            tracing::warn!(path = %path.display(), error = %e, "cannot record model exchange");
        }
        Ok(response)
    }
}

/// Answers from recorded exchanges only; reports itself as provider `replay`.
#[derive(Debug)]
pub struct Replayer {
    dir: PathBuf,
    model: String,
}

impl Replayer {
    pub fn new(dir: PathBuf, model: &str) -> Self {
        Self {
            dir,
            model: model.to_owned(),
        }
    }
}

#[async_trait]
impl Provider for Replayer {
    fn name(&self) -> &str {
        "replay"
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn endpoint(&self) -> &str {
        "recorded exchanges"
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, CallError> {
        let key = key(request);
        let path = self.dir.join(file_name(request, &key));
        let miss = |why: String| {
            CallError::ReplayMiss(format!(
                "no recorded answer for phase {} function {} (key {}) in {}: {why}",
                request.phase.as_str(),
                request.function.as_deref().unwrap_or("-"),
                &key[..16],
                self.dir.display()
            ))
        };
        let bytes = std::fs::read(&path).map_err(|e| miss(e.to_string()))?;
        let exchange: Exchange =
            serde_json::from_slice(&bytes).map_err(|e| miss(format!("unreadable: {e}")))?;
        if exchange.key != key {
            return Err(miss("the recorded request differs".into()));
        }
        Ok(exchange.response)
    }
}
