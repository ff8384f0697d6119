//! The `/v1/sessions` routes: each handler reads its request, calls the operation
//! ([`super::open`], [`super::cells`], [`super::files`], [`super::records`]) that SandboxFusion's
//! `/run_jupyter` shares, and writes the answer. Their `#[utoipa::path]` attributes are the
//! routes' OpenAPI documentation.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use proto::api::ErrorBody;
use proto::api::sessions::{
    CellRequest, CellResult, SessionCreate, SessionFiles, SessionList, SessionState, SessionView,
};
use proto::session::SessionRecord;
use serde::Deserialize;

use super::CellRun;
use super::records::ended;
use crate::Coordinator;
use crate::auth::Tenant;
use crate::body::read_body;
use crate::error::{ApiError, unavailable};

/// Opens a session: a container of its own on a worker, its interpreter kept between cells.
#[utoipa::path(
    post,
    path = "/v1/sessions",
    operation_id = "open_session",
    tag = "sessions",
    request_body = SessionCreate,
    responses(
        (status = 201, description = "The session, live.", body = SessionView),
        (status = 400, description = "The body is not a session request; `param` names the field.", body = ErrorBody),
        (status = 422, description = "A field out of range (`param`), or a language sessions are not offered in.", body = ErrorBody),
        (status = 429, description = "The tenant's live sessions are at its quota (`limit`: `coordinator.tenants.<name>.sessions`), or its request rate.", body = ErrorBody),
        (status = 503, description = "No worker can take a session now (`no_session_host`), or Redis is unavailable; `Retry-After` says when to retry.", body = ErrorBody),
    )
)]
pub(crate) async fn open(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let create: SessionCreate = read_body(body)?;
    let record = c.open_session(&tenant, &create).await?;
    Ok((StatusCode::CREATED, axum::Json(record.view())).into_response())
}

/// The tenant's sessions, newest first (at most 100), live and ended.
#[utoipa::path(
    get,
    path = "/v1/sessions",
    operation_id = "list_sessions",
    tag = "sessions",
    responses(
        (status = 200, description = "The sessions.", body = SessionList),
        (status = 503, description = "Redis is unavailable.", body = ErrorBody),
    )
)]
pub(crate) async fn list(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
) -> Result<Response, ApiError> {
    let sessions = c
        .sessions()?
        .list_sessions(tenant.0.as_deref(), 100)
        .await
        .map_err(unavailable)?;
    Ok(axum::Json(SessionList {
        sessions: sessions.iter().map(SessionRecord::view).collect(),
    })
    .into_response())
}

/// A session.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}",
    operation_id = "get_session",
    tag = "sessions",
    params(("id" = String, Path, description = "The session's id.")),
    responses(
        (status = 200, description = "The session.", body = SessionView),
        (status = 400, description = "Not a session id.", body = ErrorBody),
        (status = 404, description = "No such session for this tenant.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable.", body = ErrorBody),
    )
)]
pub(crate) async fn fetch(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let record = c.session_of(&tenant, &id).await?;
    Ok(axum::Json(record.view()).into_response())
}

/// Ends a session: its container and everything in it are removed.
#[utoipa::path(
    delete,
    path = "/v1/sessions/{id}",
    operation_id = "delete_session",
    tag = "sessions",
    params(("id" = String, Path, description = "The session's id.")),
    responses(
        (status = 200, description = "The session, ended (or as it had ended before).", body = SessionView),
        (status = 400, description = "Not a session id.", body = ErrorBody),
        (status = 404, description = "No such session for this tenant.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable.", body = ErrorBody),
    )
)]
pub(crate) async fn delete(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let record = c.end_session(&tenant, &id, "deleted").await?;
    Ok(axum::Json(record.view()).into_response())
}

/// Runs a cell in the session, after the calls before it: its output, the value of its final
/// expression (Python, JavaScript), its rich outputs and the files it changed. Names,
/// imports, open files and the working directory stay for the next cell.
#[utoipa::path(
    post,
    path = "/v1/sessions/{id}/run",
    operation_id = "run_cell",
    tag = "sessions",
    params(("id" = String, Path, description = "The session's id.")),
    request_body = CellRequest,
    responses(
        (status = 200, description = "The cell's result (`status` ok, error or timeout: the session lives on).", body = CellResult),
        (status = 400, description = "The body is not a cell; `param` names the field.", body = ErrorBody),
        (status = 404, description = "No such session for this tenant.", body = ErrorBody),
        (status = 409, description = "The session has ended (`session_ended`: this cell killed its kernel, or it ended before) or was lost with its worker (`session_lost`); the message says why.", body = ErrorBody),
        (status = 422, description = "`timeout_ms` out of range, or code too large.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable, or the session's worker refused the call.", body = ErrorBody),
    )
)]
pub(crate) async fn run(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let cell: CellRequest = read_body(body)?;
    match c.run_cell(&tenant, &id, cell).await? {
        CellRun::Ran(result) => Ok(axum::Json(*result).into_response()),
        CellRun::Died { reason, .. } => Err(ended(SessionState::Ended, Some(&reason))),
    }
}

/// The files of the session's working directory.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/files",
    operation_id = "list_session_files",
    tag = "sessions",
    params(("id" = String, Path, description = "The session's id.")),
    responses(
        (status = 400, description = "Not a session id.", body = ErrorBody),
        (status = 200, description = "Regular files below the working directory, by path.", body = SessionFiles),
        (status = 404, description = "No such session for this tenant.", body = ErrorBody),
        (status = 409, description = "The session has ended or was lost.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable, or the session's worker refused the call.", body = ErrorBody),
    )
)]
pub(crate) async fn files(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let files = c.list_session_files(&tenant, &id).await?;
    Ok(axum::Json(files).into_response())
}

#[derive(Debug, Deserialize)]
pub(crate) struct FilePath {
    id: String,
    path: String,
}

/// Downloads a file of the session's working directory, its bytes as they are.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/files/{path}",
    operation_id = "get_session_file",
    tag = "sessions",
    params(
        ("id" = String, Path, description = "The session's id."),
        ("path" = String, Path, description = "The file, relative to the working directory."),
    ),
    responses(
        (status = 400, description = "Not a session id.", body = ErrorBody),
        (status = 200, description = "The file's bytes.", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 404, description = "No such session for this tenant, or no such file (`param`: `path`).", body = ErrorBody),
        (status = 409, description = "The session has ended or was lost.", body = ErrorBody),
        (status = 422, description = "No such file, a folder, a path leaving the working directory, or a file over `worker.sessions.max_file_bytes`.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable, or the session's worker refused the call.", body = ErrorBody),
    )
)]
pub(crate) async fn download(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    Path(FilePath { id, path }): Path<FilePath>,
) -> Result<Response, ApiError> {
    let bytes = c.get_session_file(&tenant, &id, &path).await?;
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response())
}

/// Uploads a file into the session's working directory (folders made as needed), written as
/// the session's program user.
#[utoipa::path(
    put,
    path = "/v1/sessions/{id}/files/{path}",
    operation_id = "put_session_file",
    tag = "sessions",
    params(
        ("id" = String, Path, description = "The session's id."),
        ("path" = String, Path, description = "The file, relative to the working directory."),
    ),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses(
        (status = 400, description = "Not a session id.", body = ErrorBody),
        (status = 204, description = "Written."),
        (status = 404, description = "No such session for this tenant.", body = ErrorBody),
        (status = 409, description = "The session has ended or was lost.", body = ErrorBody),
        (status = 413, description = "Over `coordinator.max_body_bytes`.", body = ErrorBody),
        (status = 422, description = "A path leaving the working directory, or a file over `worker.sessions.max_file_bytes`.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable, or the session's worker refused the call.", body = ErrorBody),
    )
)]
pub(crate) async fn upload(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    Path(FilePath { id, path }): Path<FilePath>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|e| crate::error::body_rejected(e.status(), e.body_text()))?;
    c.put_session_file(&tenant, &id, &path, body).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
