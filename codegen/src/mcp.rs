//! `codegen mcp`: the cluster's MCP tools over stdio, for an MCP client that starts its servers
//! as processes (Claude Desktop, an IDE's agent). A thin front on the public HTTP API: each
//! call is the request the other client commands send, with the user's key, so the tools see
//! what that key's tenant sees and nothing else. The tools themselves, their schemas and
//! their answers are the coordinator's own (`coordinator::mcp::Tools`), as `/mcp` serves them.
//!
//! Standard output is the MCP channel: nothing else may be printed there (the API client's
//! retry notes go to standard error).

use anyhow::Context;
use coordinator::mcp::{Cluster, ToolError, Tools};
use proto::api::sessions::{CellRequest, CellResult, SessionCreate, SessionFiles, SessionView};
use proto::api::{ErrorBody, ErrorCode, ExecutionSubmission, ExecutionView, Languages};
use rmcp::ServiceExt;

use crate::client::Api;

#[derive(Debug, clap::Args)]
pub struct McpArgs {
    /// Coordinator URL.
    #[arg(long, env = "CODEGEN_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// API key, when the coordinator requires one (sent as `Authorization: Bearer KEY`).
    #[arg(long, env = "CODEGEN_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
}

/// Serves the tools on standard input and output until the client closes them.
pub async fn mcp(args: McpArgs) -> anyhow::Result<u8> {
    let api = Api::new(&args.url, args.api_key.as_deref())?;
    let server = Tools::new(OverHttp { api })
        .serve(rmcp::transport::stdio())
        .await
        .context("starting the MCP server on standard input and output")?;
    server
        .waiting()
        .await
        .context("serving MCP on standard input and output")?;
    Ok(0)
}

/// The tools' calls, made on a coordinator's public API.
struct OverHttp {
    api: Api,
}

/// One retry of a request the coordinator answered 503 or 429 (after its `Retry-After` at
/// least), as `codegen session` sends its calls: session calls carry no `Idempotency-Key`, so
/// one that may have got through (no answer) is not sent again.
fn once_more() -> backon::ExponentialBuilder {
    backon::ExponentialBuilder::default()
        .with_min_delay(std::time::Duration::from_millis(500))
        .with_max_delay(std::time::Duration::from_secs(10))
        .with_max_times(1)
        .with_jitter()
}

/// `e` as a failed call (the coordinator out of reach, or its answer unreadable).
fn failed(e: impl std::fmt::Display) -> ToolError {
    ToolError::Failed(format!("{e:#}"))
}

/// The body of a 2xx answer, or the coordinator's refusal: its error body, code and all.
async fn body(response: reqwest::Response) -> Result<Vec<u8>, ToolError> {
    let status = response.status();
    let bytes = response.bytes().await.map_err(|e| {
        failed(format_args!(
            "reading the coordinator's answer ({status}): {e}"
        ))
    })?;
    if status.is_success() {
        return Ok(bytes.to_vec());
    }
    Err(match serde_json::from_slice::<ErrorBody>(&bytes) {
        Ok(body) => ToolError::Refused(body),
        Err(_) => failed(format_args!(
            "the coordinator answered {status}: {}",
            String::from_utf8_lossy(&bytes)
        )),
    })
}

/// The JSON of a 2xx answer as `T`, or the coordinator's refusal.
async fn json<T: serde::de::DeserializeOwned>(response: reqwest::Response) -> Result<T, ToolError> {
    let bytes = body(response).await?;
    serde_json::from_slice(&bytes).map_err(|e| {
        failed(format_args!(
            "the coordinator's answer has an unexpected shape: {e}"
        ))
    })
}

impl OverHttp {
    /// `/v1/sessions/{id}` and `tail`, each segment percent-encoded. An id that is no
    /// session id, or a path with `.`, `..` or empty segments (which a URL would resolve
    /// away), is refused here as the coordinator refuses it.
    fn session_url(&self, id: &str, tail: &[&str]) -> Result<reqwest::Url, ToolError> {
        if let Err(e) = uuid::Uuid::parse_str(id) {
            return Err(ToolError::refused(
                ErrorCode::InvalidId,
                format!("id: not a session id: {e}"),
                Some("id"),
            ));
        }
        let mut url = reqwest::Url::parse(&self.api.url("/v1/sessions")).map_err(failed)?;
        url.path_segments_mut()
            .map_err(|()| failed("the coordinator URL cannot take a path"))?
            .push(id)
            .extend(tail);
        Ok(url)
    }

    /// `files/...` of a session's file `path`, checked as the coordinator checks it.
    fn file_segments(path: &str) -> Result<Vec<&str>, ToolError> {
        let segments: Vec<&str> = path.split('/').collect();
        let bad = path.is_empty()
            || path.len() > 1024
            || path.contains('\0')
            || segments
                .iter()
                .any(|s| s.is_empty() || *s == "." || *s == "..");
        if bad {
            return Err(ToolError::refused(
                ErrorCode::InvalidField,
                "path: must be a relative path below the working directory, without `.`, `..` or empty segments (at most 1024 bytes)",
                Some("path"),
            ));
        }
        Ok(std::iter::once("files").chain(segments).collect())
    }

    /// Sends a session call: once more when the coordinator says to try later.
    async fn send(&self, request: reqwest::RequestBuilder) -> Result<reqwest::Response, ToolError> {
        self.api
            .send_retrying(request, once_more(), false)
            .await
            .map_err(failed)
    }
}

#[async_trait::async_trait]
impl Cluster for OverHttp {
    /// Every call is the key's: the coordinator finds its tenant.
    type Caller = ();

    fn caller(&self, _: &rmcp::model::Extensions) -> Result<(), ToolError> {
        Ok(())
    }

    async fn run_code(
        &self,
        (): &(),
        submission: ExecutionSubmission,
    ) -> Result<ExecutionView, ToolError> {
        // With an Idempotency-Key, so that it is sent again while the coordinator says to
        // try later or cannot be reached, and creates one execution whatever happens.
        let request = self
            .api
            .http
            .post(self.api.url("/v1/executions"))
            .json(&submission);
        let response = self
            .api
            .send_creating(request, None)
            .await
            .map_err(failed)?;
        json(response).await
    }

    async fn create_session(
        &self,
        (): &(),
        create: SessionCreate,
    ) -> Result<SessionView, ToolError> {
        let request = self
            .api
            .http
            .post(self.api.url("/v1/sessions"))
            .json(&create);
        json(self.send(request).await?).await
    }

    async fn run_cell(
        &self,
        (): &(),
        id: &str,
        cell: CellRequest,
    ) -> Result<CellResult, ToolError> {
        let url = self.session_url(id, &["run"])?;
        json(self.send(self.api.http.post(url).json(&cell)).await?).await
    }

    async fn read_file(&self, (): &(), id: &str, path: &str) -> Result<Vec<u8>, ToolError> {
        let url = self.session_url(id, &Self::file_segments(path)?)?;
        body(self.send(self.api.http.get(url)).await?).await
    }

    async fn write_file(
        &self,
        (): &(),
        id: &str,
        path: &str,
        bytes: Vec<u8>,
    ) -> Result<(), ToolError> {
        let url = self.session_url(id, &Self::file_segments(path)?)?;
        let request = self
            .api
            .http
            .put(url)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(bytes);
        body(self.send(request).await?).await.map(drop)
    }

    async fn list_files(&self, (): &(), id: &str) -> Result<SessionFiles, ToolError> {
        let url = self.session_url(id, &["files"])?;
        json(self.send(self.api.http.get(url)).await?).await
    }

    async fn close_session(&self, (): &(), id: &str) -> Result<SessionView, ToolError> {
        let url = self.session_url(id, &[])?;
        json(self.send(self.api.http.delete(url)).await?).await
    }

    async fn list_languages(&self, (): &()) -> Result<Languages, ToolError> {
        let request = self.api.http.get(self.api.url("/v1/languages"));
        json(self.send(request).await?).await
    }
}
