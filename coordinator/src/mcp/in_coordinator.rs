//! `/mcp` on the coordinator: the tools over streamable HTTP, each call made with the functions
//! the `/v1` handlers call (nothing loops back over HTTP), as the tenant the request's API key
//! named.
//!
//! The route sits behind the router's key and rate layers like every `/v1` route, so a
//! missing or unknown key is the API's 401 before any MCP is spoken. The transport keeps no
//! MCP session (every request is served on its own, as the handshake-free protocol does), so
//! any coordinator answers any call; the tenant is read from each request, never remembered
//! from an earlier one.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::request::Parts;
use proto::TaskId;
use proto::api::sessions::SessionState;
use proto::api::sessions::{CellRequest, CellResult, SessionCreate, SessionFiles, SessionView};
use proto::api::{ErrorCode, ExecutionSubmission, ExecutionView, Languages, Outcome, Pending};
use rmcp::model::Extensions;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tower_http::request_id::RequestId;

use super::{Cluster, ToolError, Tools};
use crate::Coordinator;
use crate::auth::Tenant;
use crate::error::ApiError;
use crate::sessions::CellRun;

/// The route executions made through `/mcp` are counted under
/// (`codegen_executions_submitted_total`).
const ROUTE: &str = "/mcp";

/// The `/mcp` endpoint: a tower service for the router to mount.
pub(crate) fn service(
    c: Coordinator,
) -> StreamableHttpService<Tools<InCoordinator>, NeverSessionManager> {
    let max_body_bytes = c.options.max_body_bytes;
    let config = StreamableHttpServerConfig::default()
        // No MCP session lives in a coordinator's memory: coordinators keep no state, and the
        // next request may reach another one.
        .with_legacy_session_mode(false)
        .with_json_response(true)
        // A coordinator is reached by whatever name its operator gives it; the API key, not
        // the Host header, guards it.
        .disable_allowed_hosts()
        // A request that carries an Origin comes from a browser page, which is how a DNS
        // rebinding attack reaches a server on loopback: refused (403). Agents' MCP clients
        // send none.
        .enforce_origin_validation()
        .with_max_request_body_bytes(max_body_bytes);
    // Each request gets its own server (no MCP session outlives it): a copy of one made
    // here, so that the tools' schemas are not generated again for every request.
    let tools = Tools::new(InCoordinator(c));
    StreamableHttpService::new(
        move || Ok(tools.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}

/// The tools' calls, made in this coordinator.
#[derive(Debug)]
pub(crate) struct InCoordinator(Coordinator);

/// The caller of one MCP request: its tenant, and its request id for the work it creates.
#[derive(Debug)]
pub(crate) struct Caller {
    tenant: Tenant,
    request_id: Option<String>,
}

impl From<ApiError> for ToolError {
    fn from(error: ApiError) -> Self {
        Self::Refused(error.body())
    }
}

#[async_trait::async_trait]
impl Cluster for InCoordinator {
    type Caller = Caller;

    fn caller(&self, extensions: &Extensions) -> Result<Caller, ToolError> {
        let parts = extensions.get::<Parts>();
        // The key layer puts the tenant on every request it lets through; a call without one
        // did not come through it, and is answered nothing.
        let Some(tenant) = parts.and_then(|p| p.extensions.get::<Tenant>()).cloned() else {
            tracing::error!("mcp call without a tenant: refused");
            return Err(ToolError::refused(
                ErrorCode::Internal,
                "this call carries no tenant",
                None,
            ));
        };
        let request_id = parts
            .and_then(|p| p.extensions.get::<RequestId>())
            .and_then(|id| id.header_value().to_str().ok())
            .map(str::to_owned);
        Ok(Caller { tenant, request_id })
    }

    async fn run_code(
        &self,
        caller: &Caller,
        submission: ExecutionSubmission,
    ) -> Result<ExecutionView, ToolError> {
        let c = &self.0;
        let request = crate::executions::validate(&c.options, submission)?;
        let language = request.language;
        let id = TaskId::new();
        crate::executions::accept(
            c,
            &caller.tenant,
            caller.request_id.as_deref(),
            ROUTE,
            id,
            request,
        )
        .await?;
        tracing::debug!(%id, %language, "execution queued");
        let result = match c.stores.executions.wait_execution(id, c.options.wait).await {
            Ok(result) => result,
            Err(e) => {
                tracing::warn!(%id, error = %e, "cannot wait for the result; answering queued");
                None
            }
        };
        Ok(ExecutionView {
            id,
            outcome: match result {
                Some(result) => Outcome::Done(result),
                None => Outcome::Pending {
                    status: Pending::Queued,
                },
            },
        })
    }

    async fn create_session(
        &self,
        caller: &Caller,
        create: SessionCreate,
    ) -> Result<SessionView, ToolError> {
        let record = self.0.open_session(&caller.tenant, &create).await?;
        Ok(record.view())
    }

    async fn run_cell(
        &self,
        caller: &Caller,
        id: &str,
        cell: CellRequest,
    ) -> Result<CellResult, ToolError> {
        match self.0.run_cell(&caller.tenant, id, cell).await? {
            CellRun::Ran(result) => Ok(*result),
            // The cell killed its kernel: the 409 `POST /v1/sessions/{id}/run` answers.
            CellRun::Died { reason, .. } => Err(ToolError::refused(
                ErrorCode::SessionEnded,
                format!("the session is {}: {reason}", SessionState::Ended.as_str()),
                None,
            )),
        }
    }

    async fn read_file(&self, caller: &Caller, id: &str, path: &str) -> Result<Vec<u8>, ToolError> {
        let bytes = self.0.get_session_file(&caller.tenant, id, path).await?;
        Ok(bytes.to_vec())
    }

    async fn write_file(
        &self,
        caller: &Caller,
        id: &str,
        path: &str,
        bytes: Vec<u8>,
    ) -> Result<(), ToolError> {
        self.0
            .put_session_file(&caller.tenant, id, path, bytes.into())
            .await?;
        Ok(())
    }

    async fn list_files(&self, caller: &Caller, id: &str) -> Result<SessionFiles, ToolError> {
        // The listing's operation is private to the sessions module; its handler is what this
        // crate may call, so its answer is read back from the response it builds.
        let response = crate::sessions::routes::files(
            State(self.0.clone()),
            axum::Extension(caller.tenant.clone()),
            Path(id.to_owned()),
        )
        .await?;
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .map_err(|e| ToolError::Failed(format!("the listing's answer: {e}")))?;
        serde_json::from_slice(&body)
            .map_err(|e| ToolError::Failed(format!("the listing's answer: {e}")))
    }

    async fn close_session(&self, caller: &Caller, id: &str) -> Result<SessionView, ToolError> {
        let record = self.0.end_session(&caller.tenant, id, "deleted").await?;
        Ok(record.view())
    }

    async fn list_languages(&self, _caller: &Caller) -> Result<Languages, ToolError> {
        let axum::Json(languages) = crate::languages::languages(State(self.0.clone())).await;
        Ok(languages)
    }
}
