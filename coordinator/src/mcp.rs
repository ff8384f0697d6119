//! MCP (the Model Context Protocol): the cluster's execution and session tools, served to any
//! MCP client's agent, so that it can use the cluster as its sandbox.
//!
//! [`Tools`] is the one MCP server: its tools, their argument schemas and how each answer
//! reads. It carries every call out through a [`Cluster`], of which there are two:
//!
//! - the coordinator itself (`in_coordinator`): `/mcp`, streamable HTTP, behind the API key
//!   like `/v1` (the router's layers), each call made with the functions the HTTP handlers
//!   call, as the tenant the request's key named;
//! - the public HTTP API, with the user's key (`codegen mcp`, stdio: the CLI's `Api`).
//!
//! So both fronts offer the same tools with the same schemas and answers, and a tool never
//! does what the API would refuse: tenancy, quotas and limits are the API's own.

mod in_coordinator;
mod render;
mod tools;

use proto::api::sessions::{CellRequest, CellResult, SessionCreate, SessionFiles, SessionView};
use proto::api::{ErrorBody, ExecutionSubmission, ExecutionView, Languages};

pub(crate) use in_coordinator::service;
pub use tools::Tools;

/// What carries the tools' calls out: the cluster, reached one way or another.
#[async_trait::async_trait]
pub trait Cluster: Send + Sync + 'static {
    /// Whose call it is, as [`Cluster::caller`] finds it.
    type Caller: Send + Sync;

    /// Whose call it is, from the MCP request's extensions (where the HTTP transport puts the
    /// HTTP request's parts). A call nobody can be found for is refused.
    fn caller(&self, extensions: &rmcp::model::Extensions) -> Result<Self::Caller, ToolError>;

    /// Runs a program as `POST /v1/executions` does, waiting for its verdict as long as that
    /// route waits (`coordinator.wait`); `queued` after that.
    async fn run_code(
        &self,
        caller: &Self::Caller,
        submission: ExecutionSubmission,
    ) -> Result<ExecutionView, ToolError>;

    /// Opens a session (`POST /v1/sessions`).
    async fn create_session(
        &self,
        caller: &Self::Caller,
        create: SessionCreate,
    ) -> Result<SessionView, ToolError>;

    /// Runs a cell in session `id` (`POST /v1/sessions/{id}/run`); a kernel that died is the
    /// 409 `session_ended` the route answers.
    async fn run_cell(
        &self,
        caller: &Self::Caller,
        id: &str,
        cell: CellRequest,
    ) -> Result<CellResult, ToolError>;

    /// The bytes of file `path` of session `id` (`GET /v1/sessions/{id}/files/{path}`).
    async fn read_file(
        &self,
        caller: &Self::Caller,
        id: &str,
        path: &str,
    ) -> Result<Vec<u8>, ToolError>;

    /// Writes file `path` of session `id` (`PUT /v1/sessions/{id}/files/{path}`).
    async fn write_file(
        &self,
        caller: &Self::Caller,
        id: &str,
        path: &str,
        bytes: Vec<u8>,
    ) -> Result<(), ToolError>;

    /// The files of session `id`'s working directory (`GET /v1/sessions/{id}/files`).
    async fn list_files(&self, caller: &Self::Caller, id: &str) -> Result<SessionFiles, ToolError>;

    /// Ends session `id` (`DELETE /v1/sessions/{id}`).
    async fn close_session(
        &self,
        caller: &Self::Caller,
        id: &str,
    ) -> Result<SessionView, ToolError>;

    /// Every language (`GET /v1/languages`).
    async fn list_languages(&self, caller: &Self::Caller) -> Result<Languages, ToolError>;
}

/// Why a tool's call failed: an MCP tool error (`isError`) whose text starts with the API's
/// machine-readable code when the API refused it.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The API refused the call, with the error answer it gives over HTTP.
    #[error("{}: {}", .0.code, .0.error)]
    Refused(ErrorBody),
    /// The call could not be made, or its answer could not be read (the CLI's coordinator out
    /// of reach, an answer of another shape).
    #[error("{0}")]
    Failed(String),
}

impl ToolError {
    /// A refusal as the API words it: `code`, its message, the field it is about.
    pub fn refused(
        code: proto::api::ErrorCode,
        message: impl Into<String>,
        param: Option<&str>,
    ) -> Self {
        Self::Refused(ErrorBody {
            error: message.into(),
            code,
            param: param.map(str::to_owned),
            limit: None,
        })
    }
}

#[cfg(test)]
mod tests;
