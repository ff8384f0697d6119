//! The MCP tools: their names, argument schemas and descriptions, each call handed to the
//! [`Cluster`] and its answer written by [`super::render`].

use std::sync::Arc;

use base64::Engine as _;
use proto::Language;
use proto::api::ErrorCode;
use proto::api::sessions::{CellRequest, SessionCreate};
use proto::api::{ExecutionSubmission, sessions::SESSION_LANGUAGES};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, Extensions};
use rmcp::{ErrorData, ServerHandler, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;

use super::render;
use super::{Cluster, ToolError};

// The arguments' schemas are what an agent reads of each field: a description that does not fit
// a doc comment's line is an attribute, so that it reaches the schema as one line of text.

/// `run_code`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCode {
    #[schemars(
        description = "The program's language, by name or alias (list_languages): python, python-sci, javascript, typescript, bash, c, cpp, go, rust, java; py, js, ts, sh, ..."
    )]
    pub language: String,
    /// The program's source code.
    pub code: String,
    /// Text given to the program on its standard input.
    #[serde(default)]
    pub stdin: Option<String>,
    #[schemars(
        description = "Wall-clock limit in milliseconds (the cluster's default when absent, 10000; at most 120000 by default)."
    )]
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// `create_session`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSession {
    /// One of python, python-sci, javascript, bash.
    pub language: String,
    #[schemars(
        description = "Python packages to install before the first cell (pip requirements such as `sympy==1.12`), from the operator's index and among the names it allows."
    )]
    #[serde(default)]
    pub packages: Vec<String>,
}

/// `run_cell`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCell {
    /// The session's id, as create_session gave it.
    pub session_id: String,
    /// The cell's code, run after the cells before it in the same interpreter.
    pub code: String,
    #[schemars(
        description = "The cell's deadline in milliseconds (the cluster's default when absent, 30000): at it the cell is interrupted and the session lives on."
    )]
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// A file of a session: `read_file`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionPath {
    /// The session's id.
    pub session_id: String,
    #[schemars(
        description = "The file's path, relative to the session's working directory (no `.`, `..` or empty segments)."
    )]
    pub path: String,
}

/// How `write_file`'s `content` is written.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// The content is the file's text, written as UTF-8.
    #[default]
    Text,
    /// The content is the file's bytes in base64.
    Base64,
}

/// `write_file`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFile {
    /// The session's id.
    pub session_id: String,
    #[schemars(
        description = "The file's path, relative to the session's working directory (folders are made as needed)."
    )]
    pub path: String,
    /// What the file holds: its text, or (with `encoding: base64`) its bytes in base64.
    pub content: String,
    /// `text` (the default) or `base64`.
    #[serde(default)]
    pub encoding: Encoding,
}

/// A session: `list_files`' and `close_session`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionId {
    /// The session's id.
    pub session_id: String,
}

/// The cluster's tools as an MCP server, over `C`.
pub struct Tools<C: Cluster> {
    cluster: Arc<C>,
    tool_router: ToolRouter<Self>,
}

// By hand: `C` itself need not be `Clone` (it is shared).
impl<C: Cluster> Clone for Tools<C> {
    fn clone(&self) -> Self {
        Self {
            cluster: Arc::clone(&self.cluster),
            tool_router: self.tool_router.clone(),
        }
    }
}

impl<C: Cluster> std::fmt::Debug for Tools<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tools").finish_non_exhaustive()
    }
}

/// A tool's answer: `render`'s of what the cluster gave, or the tool error of why not.
fn answer<T>(
    result: Result<T, ToolError>,
    render: impl FnOnce(T) -> CallToolResult,
) -> Result<CallToolResult, ErrorData> {
    Ok(match result {
        Ok(value) => render(value),
        Err(error) => {
            tracing::debug!(error = %error, "mcp tool call refused");
            render::refusal(&error)
        }
    })
}

/// A language named as the API takes it (a name or an alias), or its `unknown_language`.
fn language(named: &str) -> Result<Language, ToolError> {
    named.parse().map_err(|e: String| {
        ToolError::refused(
            ErrorCode::UnknownLanguage,
            format!("language: {e}"),
            Some("language"),
        )
    })
}

#[tool_router]
impl<C: Cluster> Tools<C> {
    pub fn new(cluster: C) -> Self {
        Self {
            cluster: Arc::new(cluster),
            tool_router: Self::tool_router(),
        }
    }

    #[tool(
        description = "Run one program in a hardened sandbox container (no network) and wait for its verdict: status (passed, failed, timeout, memory_limit, compile_error, ...), exit code, stdout and stderr. Nothing is kept between runs: for state, use a session."
    )]
    async fn run_code(
        &self,
        extensions: Extensions,
        arguments: Parameters<RunCode>,
    ) -> Result<CallToolResult, ErrorData> {
        let RunCode {
            language,
            code,
            stdin,
            timeout_ms,
        } = arguments.0;
        let submission = ExecutionSubmission {
            id: None,
            language,
            code,
            test: None,
            stdin,
            timeout_ms,
            cpu_time_ms: None,
            compile_timeout_ms: None,
            memory_mb: None,
            fresh_container: None,
            files: None,
            return_files: None,
        };
        let result = async {
            let caller = self.cluster.caller(&extensions)?;
            self.cluster.run_code(&caller, submission).await
        }
        .await;
        answer(result, |view| render::execution(&view))
    }

    #[tool(
        description = "Open a session: an interpreter of its own (python, python-sci, javascript or bash) in a hardened container, whose names, imports, files and working directory stay from one run_cell to the next. Answers the session's id. End it with close_session (else it ends after its idle timeout)."
    )]
    async fn create_session(
        &self,
        extensions: Extensions,
        arguments: Parameters<CreateSession>,
    ) -> Result<CallToolResult, ErrorData> {
        let CreateSession {
            language: named,
            packages,
        } = arguments.0;
        let result = async {
            let caller = self.cluster.caller(&extensions)?;
            let create = SessionCreate {
                language: language(&named)?,
                memory_mb: None,
                idle_timeout_s: None,
                packages,
            };
            self.cluster.create_session(&caller, create).await
        }
        .await;
        answer(result, |view| render::session(&view))
    }

    #[tool(
        description = "Run a cell of code in a session, after the cells before it: its stdout and stderr, the value of its final expression (Python, JavaScript), its error and traceback, images it displayed, the files it changed. status ok, error or timeout: the session lives on."
    )]
    async fn run_cell(
        &self,
        extensions: Extensions,
        arguments: Parameters<RunCell>,
    ) -> Result<CallToolResult, ErrorData> {
        let RunCell {
            session_id,
            code,
            timeout_ms,
        } = arguments.0;
        let result = async {
            let caller = self.cluster.caller(&extensions)?;
            let cell = CellRequest { code, timeout_ms };
            self.cluster.run_cell(&caller, &session_id, cell).await
        }
        .await;
        answer(result, |cell| render::cell(&cell))
    }

    #[tool(
        description = "Read a file of a session's working directory: its text, or its bytes in base64 when it is not UTF-8 text.",
        annotations(read_only_hint = true)
    )]
    async fn read_file(
        &self,
        extensions: Extensions,
        arguments: Parameters<SessionPath>,
    ) -> Result<CallToolResult, ErrorData> {
        let SessionPath { session_id, path } = arguments.0;
        let result = async {
            let caller = self.cluster.caller(&extensions)?;
            self.cluster.read_file(&caller, &session_id, &path).await
        }
        .await;
        answer(result, |bytes| render::file(&path, bytes))
    }

    #[tool(
        description = "Write a file into a session's working directory (folders made as needed), from text or from base64 (encoding: base64); the session's cells see it at once."
    )]
    async fn write_file(
        &self,
        extensions: Extensions,
        arguments: Parameters<WriteFile>,
    ) -> Result<CallToolResult, ErrorData> {
        let WriteFile {
            session_id,
            path,
            content,
            encoding,
        } = arguments.0;
        let result = async {
            let caller = self.cluster.caller(&extensions)?;
            let bytes = match encoding {
                Encoding::Text => content.into_bytes(),
                Encoding::Base64 => base64::engine::general_purpose::STANDARD
                    .decode(content.trim())
                    .map_err(|e| {
                        ToolError::refused(
                            ErrorCode::InvalidField,
                            format!("content: not base64: {e}"),
                            Some("content"),
                        )
                    })?,
            };
            let size = bytes.len();
            self.cluster
                .write_file(&caller, &session_id, &path, bytes)
                .await
                .map(|()| size)
        }
        .await;
        answer(result, |size| render::written(&path, size))
    }

    #[tool(
        description = "List the files of a session's working directory: path, size, modification time.",
        annotations(read_only_hint = true)
    )]
    async fn list_files(
        &self,
        extensions: Extensions,
        arguments: Parameters<SessionId>,
    ) -> Result<CallToolResult, ErrorData> {
        let SessionId { session_id } = arguments.0;
        let result = async {
            let caller = self.cluster.caller(&extensions)?;
            self.cluster.list_files(&caller, &session_id).await
        }
        .await;
        answer(result, |files| render::files(&files))
    }

    #[tool(
        description = "End a session: its container and files are removed. Closing one that has ended already answers how it ended.",
        annotations(destructive_hint = true, idempotent_hint = true)
    )]
    async fn close_session(
        &self,
        extensions: Extensions,
        arguments: Parameters<SessionId>,
    ) -> Result<CallToolResult, ErrorData> {
        let SessionId { session_id } = arguments.0;
        let result = async {
            let caller = self.cluster.caller(&extensions)?;
            self.cluster.close_session(&caller, &session_id).await
        }
        .await;
        answer(result, |view| render::session(&view))
    }

    #[tool(
        description = "The languages run_code runs (their names, aliases, versions and libraries) and those a session can be opened in.",
        annotations(read_only_hint = true)
    )]
    async fn list_languages(&self, extensions: Extensions) -> Result<CallToolResult, ErrorData> {
        let result = async {
            let caller = self.cluster.caller(&extensions)?;
            self.cluster.list_languages(&caller).await
        }
        .await;
        answer(result, |languages| {
            render::languages(&languages, &SESSION_LANGUAGES)
        })
    }
}

#[tool_handler(
    router = self.tool_router,
    name = "codegen-cluster",
    instructions = "The codegen cluster's sandbox: untrusted code runs in hardened containers without network. run_code runs one program and answers its verdict and output. For state between runs, create_session, then run_cell as often as needed (names, imports and files stay), read_file, write_file and list_files, and close_session when done. A refused call is a tool error whose text starts with the API's code (not_found, invalid_field, unknown_language, session_ended, quota_exceeded, ...)."
)]
impl<C: Cluster> ServerHandler for Tools<C> {}
