//! `POST /run_code`: SandboxFusion's request and response, so its client (PyPI
//! `sandbox-fusion`) and the evaluation tools built on it run against the cluster unchanged.
//!
//! Mapping: SandboxFusion's names of the languages served here ([`languages`]: `python`,
//! `nodejs`, `bash`, `cpp`, `go`, `rust`, `java`, `typescript`); `run_timeout` (seconds)
//! becomes `timeout_ms`, `compile_timeout` `compile_timeout_ms` (compiled languages), `memory_limit_MB` (when positive) `memory_mb`; `files` are base64 as
//! in SandboxFusion and must decode to UTF-8 text; `fetch_files` come back base64. Verdicts:
//! `passed` → `Success` / `Finished` with return code 0; `failed` → `Failed` / `Finished`
//! with the exit status (a signal as `-N`, as Python's subprocess reports it); `timeout` →
//! `Failed` / `TimeLimitExceeded`; `memory_limit` and `output_limit` → `Failed` / `Finished`
//! with `-9` (the sandbox kills with SIGKILL) and the reason on stderr; `sandbox_error` and
//! `error` → `SandboxError` (which the client retries). Unknown request fields are ignored,
//! as SandboxFusion's server does.
//!
//! `POST /run_jupyter`: SandboxFusion's Jupyter mode, answered by a stateful session
//! ([`crate::sessions`]): one Python session is opened for the request (`kernel` `python3`;
//! `memory_limit_MB`, when positive, its memory), `files` are written into its working
//! directory, `cells` run in order in its one kernel (each within `cell_timeout` seconds when
//! positive, all within `total_timeout`), `fetch_files` are read back base64 (a missing one
//! is left out, as SandboxFusion leaves it out) and the session is deleted before the answer,
//! whatever happened. A cell's error does not stop the next ones and the answer stays
//! `Success`, as in SandboxFusion; a cell past its deadline stops the run: `Failed`, the
//! `driver` `TimeLimitExceeded`, the cells so far; a kernel that died (its memory limit):
//! `Failed`, the `driver` `Finished` (`return_code` -9 at the memory limit), the cells before
//! it. A session lost with its worker, or a worker that refused a call: `SandboxError`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use axum::Extension;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use proto::api::sessions::{CellRequest, CellResult, CellStatus, SessionCreate};
use proto::api::{ErrorCode, ExecutionSubmission};
use proto::{CompileStatus, ExecutionResult, FileContent, Language, Status, TaskId};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::Coordinator;
use crate::auth::Tenant;
use crate::body::read_body;
use crate::error::ApiError;
use crate::executions::{accept, validate};
use crate::request_id::RequestIdOf;
use crate::sessions::CellRun;

/// SandboxFusion's `RunCodeRequest`.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct RunCodeRequest {
    /// The program.
    code: String,
    /// SandboxFusion's name of a language served here: `python`, `nodejs`, `bash`, `cpp`, `go`,
    /// `rust`, `java`, `typescript`.
    language: String,
    #[serde(default)]
    stdin: Option<String>,
    /// Seconds (SandboxFusion's default: 10).
    #[serde(default = "ten")]
    #[schema(default = 10.0)]
    run_timeout: f64,
    /// Seconds of compile for a compiled language (ignored for the others).
    #[serde(default = "ten")]
    #[schema(default = 10.0)]
    compile_timeout: f64,
    /// MiB; zero or negative takes the cluster's default.
    #[serde(default, rename = "memory_limit_MB")]
    memory_limit_mb: Option<i64>,
    /// Path → base64 content (must decode to UTF-8 text); `null` entries are skipped.
    #[serde(default)]
    files: BTreeMap<String, Option<String>>,
    /// Paths to return, base64-encoded, after the run.
    #[serde(default)]
    fetch_files: Vec<String>,
}

fn ten() -> f64 {
    10.0
}

/// SandboxFusion's `RunStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
pub(crate) enum RunStatus {
    Success,
    Failed,
    SandboxError,
}

/// SandboxFusion's `CommandRunStatus` (its `Error`, a command that could not be started, has
/// no counterpart here: that is a `SandboxError`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
pub(crate) enum CommandRunStatus {
    Finished,
    TimeLimitExceeded,
}

/// SandboxFusion's `CommandRunResult`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CommandRunResult {
    status: CommandRunStatus,
    /// Seconds.
    execution_time: f64,
    /// Seconds of CPU (the program and its children), when measured.
    #[schema(required = true)]
    cpu_time: Option<f64>,
    #[schema(required = true)]
    return_code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// SandboxFusion's `RunCodeResponse`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RunCodeResponse {
    status: RunStatus,
    message: String,
    /// The compile of a compiled language (null for the others, and when nothing ran).
    #[schema(required = true)]
    compile_result: Option<CommandRunResult>,
    #[schema(required = true)]
    run_result: Option<CommandRunResult>,
    #[schema(required = true)]
    executor_pod_name: Option<String>,
    /// The fetched files, base64.
    files: BTreeMap<String, String>,
}

/// Runs a program: SandboxFusion's `/run_code`.
#[utoipa::path(
    post,
    path = "/run_code",
    operation_id = "run_code",
    tag = "sandbox-fusion",
    request_body = RunCodeRequest,
    responses(
        (status = 200, description = "The run, in SandboxFusion's shape (also for `SandboxError`).", body = RunCodeResponse),
        (status = 400, description = "Malformed body.", body = proto::api::ErrorBody),
        (status = 413, description = "Body over `coordinator.max_body_bytes`.", body = proto::api::ErrorBody),
        (status = 422, description = "An unsupported language, a limit out of range or a file that is not base64; the message names the field.", body = proto::api::ErrorBody),
        (status = 503, description = "Redis or the broker is unavailable; nothing was queued.", body = proto::api::ErrorBody),
    )
)]
pub(crate) async fn run_code(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    RequestIdOf(request_id): RequestIdOf,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let request: RunCodeRequest = read_body(body)?;
    let submission = submission(request, &c.options)?;
    let execution = validate(&c.options, submission)?;
    let timeout_ms = execution.timeout_ms;
    let id = TaskId::new();
    accept(
        &c,
        &tenant,
        request_id.as_deref(),
        "/run_code",
        id,
        execution,
    )
    .await?;
    // SandboxFusion answers synchronously: wait for the run itself plus the usual margin.
    let wait = c.options.wait + Duration::from_millis(timeout_ms);
    let result = match c.stores.executions.wait_execution(id, wait).await {
        Ok(Some(result)) => result,
        Ok(None) => ExecutionResult::error(
            Status::SandboxError,
            format!("no verdict within {wait:?} (execution {id})"),
        ),
        Err(e) => ExecutionResult::error(Status::SandboxError, e.to_string()),
    };
    Ok(axum::Json(response(result)).into_response())
}

/// SandboxFusion's names of the languages served here (`LanguageSpec::sandbox_fusion`); the
/// OpenAPI document lists the same.
pub(crate) fn languages() -> Vec<&'static str> {
    Language::ALL
        .iter()
        .filter_map(|l| l.spec().sandbox_fusion)
        .collect()
}

/// The request as this API's submission.
fn submission(
    request: RunCodeRequest,
    options: &crate::Options,
) -> Result<ExecutionSubmission, ApiError> {
    let Some(language) = Language::ALL
        .iter()
        .copied()
        .find(|l| l.spec().sandbox_fusion == Some(request.language.as_str()))
    else {
        return Err(ApiError::invalid(
            "language",
            format!(
                "{:?} is not supported here (supported: {})",
                request.language,
                languages().join(", ")
            ),
        ));
    };
    let max_s = options.max_timeout_ms as f64 / 1000.0;
    for (field, seconds) in [
        ("run_timeout", request.run_timeout),
        ("compile_timeout", request.compile_timeout),
    ] {
        if !(seconds > 0.0 && seconds <= max_s) {
            return Err(ApiError::invalid(
                field,
                format!("must be more than 0 and at most {max_s} seconds"),
            ));
        }
    }
    // Checked here too, so that a bad path is named by this API's field, not the one it maps to.
    for path in request.files.keys() {
        proto::execution::check_file_path(path).map_err(|e| ApiError::invalid("files", e))?;
    }
    for path in &request.fetch_files {
        proto::execution::check_file_path(path).map_err(|e| ApiError::invalid("fetch_files", e))?;
    }
    let mut files = BTreeMap::new();
    for (path, content) in request.files {
        let Some(content) = content else { continue };
        let bytes = proto::file::decode_base64(&content)
            .map_err(|e| ApiError::invalid(&format!("files[{path:?}]"), e))?;
        files.insert(path, FileContent::from_bytes(bytes));
    }
    let milliseconds = |seconds: f64| ((seconds * 1000.0).ceil() as u64).max(1);
    Ok(ExecutionSubmission {
        id: None,
        language: language.as_str().to_owned(),
        code: request.code,
        test: None,
        stdin: request.stdin,
        timeout_ms: Some(milliseconds(request.run_timeout)),
        compile_timeout_ms: language
            .spec()
            .compiled
            .then(|| milliseconds(request.compile_timeout)),
        cpu_time_ms: None,
        memory_mb: request
            .memory_limit_mb
            .filter(|m| *m > 0)
            .map(|m| m.unsigned_abs()),
        fresh_container: None,
        files: Some(files),
        return_files: Some(request.fetch_files),
    })
}

/// `/run_code` under a path that carries the API key, for SandboxFusion's client, which cannot
/// send a header: point it at `http://HOST:8080/fusion/KEY` (`set_endpoint`). The key is
/// checked like a header's (`crate::auth`); logs and metrics name the route, never the path.
#[utoipa::path(
    post,
    path = "/fusion/{key}/run_code",
    operation_id = "run_code_keyed",
    tag = "sandbox-fusion",
    params(("key" = String, Path, description = "The caller's API key (with keys configured; any value without).")),
    request_body = RunCodeRequest,
    responses(
        (status = 200, description = "The run, in SandboxFusion's shape (also for `SandboxError`).", body = RunCodeResponse),
        (status = 400, description = "Malformed body.", body = proto::api::ErrorBody),
        (status = 401, description = "API keys are configured and the path's key is unknown.", body = proto::api::ErrorBody),
        (status = 413, description = "Body over `coordinator.max_body_bytes`.", body = proto::api::ErrorBody),
        (status = 422, description = "An unsupported language, a limit out of range or a file that is not base64; the message names the field.", body = proto::api::ErrorBody),
        (status = 503, description = "Redis or the broker is unavailable; nothing was queued.", body = proto::api::ErrorBody),
    )
)]
pub(crate) async fn run_code_keyed(
    state: State<Coordinator>,
    tenant: Extension<Tenant>,
    request_id: RequestIdOf,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    run_code(state, tenant, request_id, body).await
}

/// SandboxFusion's `RunJupyterRequest`.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct RunJupyterRequest {
    /// The cells, run in order in one Python kernel: names, imports and files stay from one
    /// cell to the next.
    cells: Vec<String>,
    /// Seconds each cell may run; 0 (SandboxFusion's default): no deadline of its own (then
    /// `coordinator.sessions.max_cell_timeout_ms` and `total_timeout` bound it).
    #[serde(default)]
    #[schema(default = 0.0)]
    cell_timeout: f64,
    /// Seconds all the cells may run together (SandboxFusion's default: 45).
    #[serde(default = "forty_five")]
    #[schema(default = 45.0)]
    total_timeout: f64,
    /// MiB of the kernel's session; zero or negative takes `coordinator.sessions.default_memory_mb`.
    #[serde(default, rename = "memory_limit_MB")]
    memory_limit_mb: Option<i64>,
    /// `python3`, the only kernel (as in SandboxFusion).
    #[serde(default = "python3")]
    #[schema(default = "python3")]
    kernel: String,
    /// Path (relative to the working directory) → base64 content, written before the first
    /// cell.
    #[serde(default)]
    files: BTreeMap<String, String>,
    /// Paths (relative to the working directory) to return, base64-encoded, after the cells.
    #[serde(default)]
    fetch_files: Vec<String>,
}

fn forty_five() -> f64 {
    45.0
}

fn python3() -> String {
    "python3".to_owned()
}

/// SandboxFusion's `CellRunResult`: what a cell gave, in the terms of Jupyter's messages.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CellRunResult {
    stdout: String,
    stderr: String,
    /// Jupyter's MIME bundles, in order: `{"image/png": base64}` or `{"text/plain": text}`
    /// for each thing the cell displayed (a matplotlib figure, `display(...)`), then
    /// `{"text/plain": repr}` for the value of its final expression (when not `None`).
    display: Vec<BTreeMap<String, String>>,
    /// The uncaught error that ended the cell, as Jupyter's `error` message (none or one).
    error: Vec<JupyterError>,
}

/// The content of Jupyter's `error` message.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct JupyterError {
    /// The exception's class, e.g. `ZeroDivisionError`.
    ename: String,
    /// Its message.
    evalue: String,
    /// The formatted traceback, a line an item (without Jupyter's colours).
    traceback: Vec<String>,
}

/// SandboxFusion's `RunJupyterResponse`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RunJupyterResponse {
    status: RunStatus,
    message: String,
    /// The run of the cells as one command: `Finished` (`return_code` 0; -9 when the kernel
    /// was killed at its memory limit, null when it died otherwise) or `TimeLimitExceeded`;
    /// `execution_time` and `cpu_time` over all the cells. Null for `SandboxError`.
    #[schema(required = true)]
    driver: Option<CommandRunResult>,
    /// One per cell that ran (the one that ran past its deadline included).
    cells: Vec<CellRunResult>,
    #[schema(required = true)]
    executor_pod_name: Option<String>,
    /// The fetched files, base64.
    files: BTreeMap<String, String>,
}

/// How long `/run_jupyter` waits for a worker able to hold its session (right after the
/// workers start, none has announced itself yet) before it answers 503 `no_session_host`.
const HOST_WAIT: Duration = Duration::from_secs(10);

/// Runs cells in a Jupyter-like kernel: SandboxFusion's `/run_jupyter`.
#[utoipa::path(
    post,
    path = "/run_jupyter",
    operation_id = "run_jupyter",
    tag = "sandbox-fusion",
    request_body = RunJupyterRequest,
    responses(
        (status = 200, description = "The cells' results, in SandboxFusion's shape (also for `Failed` and `SandboxError`). The session was deleted before this answer.", body = RunJupyterResponse),
        (status = 400, description = "Malformed body.", body = proto::api::ErrorBody),
        (status = 413, description = "Body over `coordinator.max_body_bytes`.", body = proto::api::ErrorBody),
        (status = 422, description = "A kernel other than `python3`, a timeout or memory limit out of range, a cell over `coordinator.max_code_bytes`, a file path leaving the working directory, a file that is not base64 or over `worker.sessions.max_file_bytes`; the message names the field.", body = proto::api::ErrorBody),
        (status = 429, description = "The tenant's live sessions are at its quota (`coordinator.tenants.<name>.sessions`), or its request rate.", body = proto::api::ErrorBody),
        (status = 503, description = "No worker could take the session within a few seconds (`no_session_host`), or Redis is unavailable (`store_unavailable`, `not_kept` without Redis); nothing ran.", body = proto::api::ErrorBody),
    )
)]
pub(crate) async fn run_jupyter(
    State(c): State<Coordinator>,
    Extension(tenant): Extension<Tenant>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let request: RunJupyterRequest = read_body(body)?;
    let plan = jupyter_plan(request, &c.options)?;
    // On a task of its own: a client that hangs up mid-run does not leave the session behind.
    let answer = tokio::spawn(async move { jupyter(&c, &tenant, plan).await })
        .await
        .map_err(|e| ApiError::new(ErrorCode::Internal, format!("the run failed: {e}")))??;
    Ok(axum::Json(answer).into_response())
}

/// `/run_jupyter` under a path that carries the API key, as `/fusion/{key}/run_code`.
#[utoipa::path(
    post,
    path = "/fusion/{key}/run_jupyter",
    operation_id = "run_jupyter_keyed",
    tag = "sandbox-fusion",
    params(("key" = String, Path, description = "The caller's API key (with keys configured; any value without).")),
    request_body = RunJupyterRequest,
    responses(
        (status = 200, description = "The cells' results, in SandboxFusion's shape (also for `Failed` and `SandboxError`). The session was deleted before this answer.", body = RunJupyterResponse),
        (status = 400, description = "Malformed body.", body = proto::api::ErrorBody),
        (status = 401, description = "API keys are configured and the path's key is unknown.", body = proto::api::ErrorBody),
        (status = 413, description = "Body over `coordinator.max_body_bytes`.", body = proto::api::ErrorBody),
        (status = 422, description = "A kernel other than `python3`, a timeout or memory limit out of range, a cell over `coordinator.max_code_bytes`, a file path leaving the working directory, a file that is not base64 or over `worker.sessions.max_file_bytes`; the message names the field.", body = proto::api::ErrorBody),
        (status = 429, description = "The tenant's live sessions are at its quota (`coordinator.tenants.<name>.sessions`), or its request rate.", body = proto::api::ErrorBody),
        (status = 503, description = "No worker could take the session within a few seconds (`no_session_host`), or Redis is unavailable (`store_unavailable`, `not_kept` without Redis); nothing ran.", body = proto::api::ErrorBody),
    )
)]
pub(crate) async fn run_jupyter_keyed(
    state: State<Coordinator>,
    tenant: Extension<Tenant>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    run_jupyter(state, tenant, body).await
}

/// A `/run_jupyter` request, checked.
#[derive(Debug)]
struct JupyterPlan {
    cells: Vec<String>,
    /// None: no deadline of the cells' own.
    cell_timeout_ms: Option<u64>,
    total: Duration,
    memory_mb: Option<u64>,
    files: Vec<(String, Vec<u8>)>,
    fetch_files: Vec<String>,
}

fn jupyter_plan(
    request: RunJupyterRequest,
    options: &crate::Options,
) -> Result<JupyterPlan, ApiError> {
    let limits = &options.sessions;
    if request.kernel != "python3" {
        return Err(ApiError::invalid(
            "kernel",
            format!(
                "{:?} is not offered (only \"python3\", as SandboxFusion)",
                request.kernel
            ),
        ));
    }
    let max_cell_s = limits.max_cell_timeout_ms as f64 / 1000.0;
    if !(request.cell_timeout >= 0.0 && request.cell_timeout <= max_cell_s) {
        return Err(ApiError::invalid(
            "cell_timeout",
            format!(
                "must be 0 (no deadline of its own) to {max_cell_s} seconds (coordinator.sessions.max_cell_timeout_ms)"
            ),
        ));
    }
    let max_total_s = limits.max_lifetime.as_secs_f64();
    if !(request.total_timeout > 0.0 && request.total_timeout <= max_total_s) {
        return Err(ApiError::invalid(
            "total_timeout",
            format!(
                "must be more than 0 and at most {max_total_s} seconds (coordinator.sessions.max_lifetime)"
            ),
        ));
    }
    let memory_mb = request
        .memory_limit_mb
        .filter(|m| *m > 0)
        .map(|m| m.unsigned_abs());
    if let Some(memory_mb) = memory_mb
        && !(16..=limits.max_memory_mb).contains(&memory_mb)
    {
        return Err(ApiError::invalid(
            "memory_limit_MB",
            format!(
                "must be 0 or less (the default) or between 16 and {} (coordinator.sessions.max_memory_mb)",
                limits.max_memory_mb
            ),
        ));
    }
    for (i, cell) in request.cells.iter().enumerate() {
        if cell.len() > options.max_code_bytes {
            return Err(ApiError::invalid(
                &format!("cells[{i}]"),
                format!(
                    "is {} bytes, over coordinator.max_code_bytes ({})",
                    cell.len(),
                    options.max_code_bytes
                ),
            ));
        }
    }
    for (field, count) in [
        ("files", request.files.len()),
        ("fetch_files", request.fetch_files.len()),
    ] {
        if count > proto::execution::MAX_FILES {
            return Err(ApiError::invalid(
                field,
                format!("at most {} files", proto::execution::MAX_FILES),
            ));
        }
    }
    let path_error = |field: &str, path: &str| {
        ApiError::invalid(
            field,
            format!(
                "{path:?} must be a relative path below the working directory, without `.`, `..` or empty segments (at most 1024 bytes)"
            ),
        )
    };
    let mut files = Vec::with_capacity(request.files.len());
    for (path, content) in request.files {
        crate::sessions::check_path(&path).map_err(|_| path_error("files", &path))?;
        let bytes = proto::file::decode_base64(&content)
            .map_err(|e| ApiError::invalid(&format!("files[{path:?}]"), e))?;
        files.push((path, bytes));
    }
    for path in &request.fetch_files {
        crate::sessions::check_path(path).map_err(|_| path_error("fetch_files", path))?;
    }
    let milliseconds = |seconds: f64| ((seconds * 1000.0).ceil() as u64).max(1);
    Ok(JupyterPlan {
        cells: request.cells,
        cell_timeout_ms: (request.cell_timeout > 0.0).then(|| milliseconds(request.cell_timeout)),
        total: Duration::from_millis(milliseconds(request.total_timeout)),
        memory_mb,
        files,
        fetch_files: request.fetch_files,
    })
}

/// Opens the request's session, runs it, and ends the session whatever happened.
async fn jupyter(
    c: &Coordinator,
    tenant: &Tenant,
    plan: JupyterPlan,
) -> Result<RunJupyterResponse, ApiError> {
    let limits = &c.options.sessions;
    // Idles out soon after the request's own deadline, should this coordinator die mid-run.
    let idle_timeout_s = (plan.total.as_secs() + 60).clamp(1, limits.max_idle_timeout_s.max(1));
    let create = SessionCreate {
        language: Language::Python,
        memory_mb: plan.memory_mb,
        idle_timeout_s: Some(idle_timeout_s),
        packages: vec![],
    };
    let waited = Instant::now() + HOST_WAIT;
    let record = loop {
        match c.open_session(tenant, &create).await {
            Err(e) if e.body().code == ErrorCode::NoSessionHost && Instant::now() < waited => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            opened => break opened?,
        }
    };
    let outcome = run_session(c, tenant, &record.id, plan).await;
    if let Err(e) = c
        .end_session(
            tenant,
            &record.id,
            "deleted: its /run_jupyter request was answered",
        )
        .await
    {
        // Its idle timeout ends it.
        tracing::warn!(session = %record.id, error = %e.message(), "cannot delete a /run_jupyter session");
    }
    match outcome {
        Ok(answer) => Ok(answer),
        // The request's own fault (a file over the workers' limit): as the checks before.
        Err(e) if e.status() == axum::http::StatusCode::UNPROCESSABLE_ENTITY => Err(e),
        // The session was lost, its worker refused a call, Redis went away: the sandbox's.
        Err(e) => Ok(RunJupyterResponse {
            status: RunStatus::SandboxError,
            message: e.message().to_owned(),
            driver: None,
            cells: vec![],
            executor_pod_name: None,
            files: BTreeMap::new(),
        }),
    }
}

/// Why the cells stopped before the last one.
enum Stopped {
    /// Past `cell_timeout` or `total_timeout`: the message.
    Timeout(String),
    /// The kernel died: its reason, and whether at the memory limit.
    Died(String, bool),
}

/// Writes the files, runs the cells, reads the files back.
async fn run_session(
    c: &Coordinator,
    tenant: &Tenant,
    id: &str,
    plan: JupyterPlan,
) -> Result<RunJupyterResponse, ApiError> {
    for (path, bytes) in plan.files {
        c.put_session_file(tenant, id, &path, bytes.into())
            .await
            .map_err(|e| e.prefixed(&format!("files[{path:?}]: ")))?;
    }
    let max_cell_ms = c.options.sessions.max_cell_timeout_ms;
    let own_limit_ms = plan.cell_timeout_ms.unwrap_or(max_cell_ms).min(max_cell_ms);
    let started = Instant::now();
    let deadline = started + plan.total;
    let mut cells = Vec::with_capacity(plan.cells.len());
    let mut cpu_ms: Option<u64> = None;
    let mut stopped = None;
    for (i, code) in plan.cells.into_iter().enumerate() {
        let left_ms = u64::try_from(
            deadline
                .saturating_duration_since(Instant::now())
                .as_millis(),
        )
        .unwrap_or(u64::MAX);
        let past_total = || {
            format!(
                "the cells ran past total_timeout ({} s) at cell {i}",
                plan.total.as_secs_f64()
            )
        };
        if left_ms == 0 {
            stopped = Some(Stopped::Timeout(past_total()));
            break;
        }
        let timeout_ms = own_limit_ms.min(left_ms);
        let cell = CellRequest {
            code,
            timeout_ms: Some(timeout_ms),
        };
        match c.run_cell(tenant, id, cell).await? {
            CellRun::Ran(result) => {
                if let Some(ms) = result.cpu_ms {
                    cpu_ms = Some(cpu_ms.unwrap_or(0) + ms);
                }
                cells.push(cell_result(&result));
                if result.status == CellStatus::Timeout {
                    stopped = Some(Stopped::Timeout(if timeout_ms < own_limit_ms {
                        past_total()
                    } else {
                        format!(
                            "cell {i} ran past its deadline of {} s",
                            timeout_ms as f64 / 1000.0
                        )
                    }));
                    break;
                }
            }
            CellRun::Died { reason, oom_killed } => {
                stopped = Some(Stopped::Died(
                    format!("cell {i} ended the session: {reason}"),
                    oom_killed,
                ));
                break;
            }
        }
    }
    let mut files = BTreeMap::new();
    if !matches!(stopped, Some(Stopped::Died(..))) {
        for path in plan.fetch_files {
            match c.get_session_file(tenant, id, &path).await {
                Ok(bytes) => {
                    files.insert(path, STANDARD.encode(&bytes));
                }
                // Missing (or a folder, or too large): left out, as SandboxFusion leaves out
                // a file that is not there.
                Err(e)
                    if e.status() == axum::http::StatusCode::UNPROCESSABLE_ENTITY
                        || (e.status() == axum::http::StatusCode::NOT_FOUND
                            && e.body().param.as_deref() == Some("path")) => {}
                Err(e) => return Err(e.prefixed(&format!("fetch_files[{path:?}]: "))),
            }
        }
    }
    let driver = |status, return_code, stderr: String| CommandRunResult {
        status,
        execution_time: started.elapsed().as_secs_f64(),
        cpu_time: cpu_ms.map(|ms| ms as f64 / 1000.0),
        return_code,
        stdout: String::new(),
        stderr,
    };
    let (status, message, driver) = match stopped {
        None => (
            RunStatus::Success,
            String::new(),
            driver(CommandRunStatus::Finished, Some(0), String::new()),
        ),
        Some(Stopped::Timeout(message)) => (
            RunStatus::Failed,
            message,
            driver(CommandRunStatus::TimeLimitExceeded, None, String::new()),
        ),
        Some(Stopped::Died(message, oom_killed)) => (
            RunStatus::Failed,
            message.clone(),
            driver(
                CommandRunStatus::Finished,
                oom_killed.then_some(-9),
                message,
            ),
        ),
    };
    Ok(RunJupyterResponse {
        status,
        message,
        driver: Some(driver),
        cells,
        executor_pod_name: None,
        files,
    })
}

/// A session's cell result as SandboxFusion's (Jupyter's) cell.
fn cell_result(result: &CellResult) -> CellRunResult {
    let mut display: Vec<BTreeMap<String, String>> = result
        .display
        .iter()
        .filter_map(|d| {
            let content = d.base64.clone().or_else(|| d.text.clone())?;
            Some(BTreeMap::from([(d.mime.clone(), content)]))
        })
        .collect();
    if let Some(value) = &result.value {
        display.push(BTreeMap::from([("text/plain".to_owned(), value.clone())]));
    }
    let error = result
        .error
        .iter()
        .map(|e| JupyterError {
            ename: e.ty.clone(),
            evalue: e.message.clone(),
            traceback: e.traceback.lines().map(str::to_owned).collect(),
        })
        .collect();
    CellRunResult {
        stdout: result.stdout.clone(),
        stderr: result.stderr.clone(),
        display,
        error,
    }
}

/// A verdict in SandboxFusion's terms (see the module documentation).
fn response(result: ExecutionResult) -> RunCodeResponse {
    let files: BTreeMap<String, String> = result
        .files
        .iter()
        .map(|(path, content)| (path.clone(), STANDARD.encode(content.as_bytes())))
        .collect();
    let reason = result.reason.clone().unwrap_or_default();
    let run = |status, return_code, stderr: String| CommandRunResult {
        status,
        execution_time: result.duration_ms as f64 / 1000.0,
        cpu_time: result.cpu_ms.map(|ms| ms as f64 / 1000.0),
        return_code,
        stdout: result.stdout.clone(),
        stderr,
    };
    let with_reason = |stderr: &str| {
        if reason.is_empty() {
            stderr.to_owned()
        } else {
            format!("{stderr}\n[codegen sandbox] {reason}\n")
        }
    };
    let (status, run_result) = match result.status {
        Status::Passed => (
            RunStatus::Success,
            Some(run(
                CommandRunStatus::Finished,
                Some(0),
                result.stderr.clone(),
            )),
        ),
        Status::Failed => (
            RunStatus::Failed,
            Some(run(
                CommandRunStatus::Finished,
                Some(result.exit_code.unwrap_or_else(|| -signal_of(&reason))),
                result.stderr.clone(),
            )),
        ),
        Status::Timeout | Status::CpuTimeLimit => (
            RunStatus::Failed,
            Some(run(
                CommandRunStatus::TimeLimitExceeded,
                None,
                result.stderr.clone(),
            )),
        ),
        Status::MemoryLimit | Status::OutputLimit => (
            RunStatus::Failed,
            Some(run(
                CommandRunStatus::Finished,
                Some(-9),
                with_reason(&result.stderr),
            )),
        ),
        // The compiler's word is in `compile_result`; nothing ran.
        Status::CompileError => (RunStatus::Failed, None),
        Status::SandboxError | Status::Error => (RunStatus::SandboxError, None),
    };
    let compile_result = result.compile.as_ref().map(|c| CommandRunResult {
        status: if c.status == CompileStatus::Timeout {
            CommandRunStatus::TimeLimitExceeded
        } else {
            CommandRunStatus::Finished
        },
        execution_time: c.duration_ms as f64 / 1000.0,
        cpu_time: None,
        return_code: c.exit_code,
        stdout: String::new(),
        stderr: c.output.clone(),
    });
    RunCodeResponse {
        status,
        message: reason,
        compile_result,
        run_result,
        executor_pod_name: None,
        files,
    }
}

/// The signal of a "killed by signal N" reason (SIGKILL when it does not say).
fn signal_of(reason: &str) -> i32 {
    reason
        .strip_prefix("killed by signal ")
        .and_then(|n| n.parse().ok())
        .unwrap_or(9)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(status: Status, exit_code: Option<i32>, reason: Option<&str>) -> ExecutionResult {
        ExecutionResult {
            status,
            exit_code,
            stdout: "out".into(),
            stderr: "err".into(),
            truncated: false,
            duration_ms: 1500,
            cpu_ms: None,
            peak_memory_kb: None,
            reason: reason.map(str::to_owned),
            error_kind: None,
            files: BTreeMap::from([("a.txt".to_string(), "hi".into())]),
            file_errors: BTreeMap::new(),
            compile: None,
        }
    }

    #[test]
    fn verdicts_map_to_sandbox_fusion_statuses() {
        let ok = response(result(Status::Passed, Some(0), None));
        assert_eq!(ok.status, RunStatus::Success);
        let run = ok.run_result.unwrap();
        assert_eq!(
            (run.status, run.return_code),
            (CommandRunStatus::Finished, Some(0))
        );
        assert_eq!(run.execution_time, 1.5);
        assert_eq!(ok.files["a.txt"], "aGk=");

        let failed = response(result(Status::Failed, Some(3), None));
        assert_eq!(failed.status, RunStatus::Failed);
        assert_eq!(failed.run_result.unwrap().return_code, Some(3));
        let killed = response(result(Status::Failed, None, Some("killed by signal 15")));
        assert_eq!(killed.run_result.unwrap().return_code, Some(-15));

        let slow = response(result(
            Status::Timeout,
            None,
            Some("killed at the wall-clock limit"),
        ));
        let run = slow.run_result.unwrap();
        assert_eq!(
            (run.status, run.return_code),
            (CommandRunStatus::TimeLimitExceeded, None)
        );

        let oom = response(result(
            Status::MemoryLimit,
            None,
            Some("killed at the memory limit"),
        ));
        let run = oom.run_result.unwrap();
        assert_eq!(run.return_code, Some(-9));
        assert!(run.stderr.contains("memory limit"));

        let broken = response(result(Status::SandboxError, None, Some("docker down")));
        assert_eq!(broken.status, RunStatus::SandboxError);
        assert!(broken.run_result.is_none() && broken.message == "docker down");

        // A compile error: Failed, nothing ran, the compiler's word in compile_result.
        let mut refused = result(Status::CompileError, None, Some("the compiler exited"));
        refused.compile = Some(Box::new(proto::CompileResult {
            status: CompileStatus::Error,
            exit_code: Some(1),
            output: "main.cpp:1: error: 'x' was not declared".into(),
            duration_ms: 250,
        }));
        let answer = response(refused);
        assert_eq!(answer.status, RunStatus::Failed);
        assert!(answer.run_result.is_none());
        let compile = answer.compile_result.unwrap();
        assert_eq!(
            (compile.status, compile.return_code, compile.execution_time),
            (CommandRunStatus::Finished, Some(1), 0.25)
        );
        assert!(compile.stderr.contains("not declared"));
        // A compile that ran out of time is TimeLimitExceeded in compile_result.
        let mut slow = result(Status::CompileError, None, Some("the compile ran past"));
        slow.compile = Some(Box::new(proto::CompileResult {
            status: CompileStatus::Timeout,
            exit_code: None,
            output: String::new(),
            duration_ms: 10_000,
        }));
        let compile = response(slow).compile_result.unwrap();
        assert_eq!(compile.status, CommandRunStatus::TimeLimitExceeded);
    }

    #[test]
    fn every_sandbox_fusion_language_is_one_the_sandbox_runs() {
        let names = languages();
        let served: std::collections::BTreeSet<Language> = names
            .iter()
            .map(|name| name.parse::<Language>().unwrap())
            .collect();
        assert_eq!(served.len(), names.len(), "one name per language");
        for name in [
            "python",
            "nodejs",
            "bash",
            "cpp",
            "go",
            "rust",
            "java",
            "typescript",
        ] {
            assert!(names.contains(&name), "{name}");
        }
    }

    #[test]
    fn requests_map_to_submissions() {
        let options = crate::Options::default();
        let request: RunCodeRequest = serde_json::from_value(serde_json::json!({
            "code": "print(1)", "language": "nodejs", "run_timeout": 2.5,
            "files": {"data.txt": "aGk=", "skip": null}, "fetch_files": ["out.txt"],
            "memory_limit_MB": -1, "some_newer_field": true
        }))
        .unwrap();
        let mapped = submission(request, &options).unwrap();
        assert_eq!(mapped.language, "javascript");
        assert_eq!(mapped.timeout_ms, Some(2500));
        assert_eq!(mapped.compile_timeout_ms, None, "nodejs compiles nothing");
        assert_eq!(mapped.memory_mb, None);
        assert_eq!(mapped.files.unwrap()["data.txt"], "hi".into());
        assert_eq!(mapped.return_files.unwrap(), ["out.txt"]);
        // A path outside the work directory and /mnt/data is named by this API's field.
        for (field, body) in [
            (
                "fetch_files",
                serde_json::json!({"code": "1", "language": "python", "fetch_files": ["/mnt/b"]}),
            ),
            (
                "files",
                serde_json::json!({"code": "1", "language": "python", "files": {"/etc/x": "aGk="}}),
            ),
        ] {
            let request: RunCodeRequest = serde_json::from_value(body).unwrap();
            let err = submission(request, &crate::Options::default()).unwrap_err();
            assert!(
                err.message.starts_with(&format!("{field}: ")),
                "{}",
                err.message
            );
        }

        let bad = |body: serde_json::Value| {
            submission(serde_json::from_value(body).unwrap(), &options)
                .unwrap_err()
                .message()
                .to_owned()
        };
        assert!(bad(serde_json::json!({"code": "", "language": "php"})).starts_with("language:"));
        assert!(
            bad(serde_json::json!({"code": "", "language": "cpp", "compile_timeout": -1}))
                .starts_with("compile_timeout:")
        );
        let request: RunCodeRequest = serde_json::from_value(
            serde_json::json!({"code": "", "language": "cpp", "compile_timeout": 1.5}),
        )
        .unwrap();
        let mapped = submission(request, &options).unwrap();
        assert_eq!(
            (mapped.language.as_str(), mapped.compile_timeout_ms),
            ("cpp", Some(1500))
        );
        assert!(
            bad(serde_json::json!({"code": "", "language": "python", "run_timeout": 0}))
                .starts_with("run_timeout:")
        );
        let not_base64 =
            bad(serde_json::json!({"code": "", "language": "bash", "files": {"b": "%%"}}));
        assert!(not_base64.contains("not base64"), "{not_base64}");
        // Bytes that are not UTF-8 pass through as bytes.
        let request: RunCodeRequest = serde_json::from_value(
            serde_json::json!({"code": "", "language": "bash", "files": {"b": "/w=="}}),
        )
        .unwrap();
        let mapped = submission(request, &options).unwrap();
        assert_eq!(mapped.files.unwrap()["b"], FileContent::Bytes(vec![0xff]));
    }

    #[test]
    fn jupyter_requests_are_checked_and_take_sandbox_fusions_defaults() {
        let options = crate::Options::default();
        let plan =
            |body: serde_json::Value| jupyter_plan(serde_json::from_value(body).unwrap(), &options);
        let defaults =
            plan(serde_json::json!({"cells": ["x = 5", "x"], "newer_field": 1})).unwrap();
        assert_eq!(defaults.cells, ["x = 5", "x"]);
        assert_eq!(defaults.cell_timeout_ms, None, "0: no deadline of its own");
        assert_eq!(defaults.total, Duration::from_secs(45));
        assert_eq!(defaults.memory_mb, None);
        let full = plan(serde_json::json!({
            "cells": [], "cell_timeout": 1.5, "total_timeout": 3, "memory_limit_MB": 256,
            "kernel": "python3", "files": {"data/in.txt": "aGk="}, "fetch_files": ["out.txt"]
        }))
        .unwrap();
        assert_eq!(full.cell_timeout_ms, Some(1500));
        assert_eq!(full.total, Duration::from_secs(3));
        assert_eq!(full.memory_mb, Some(256));
        assert_eq!(full.files, [("data/in.txt".to_owned(), b"hi".to_vec())]);
        assert_eq!(full.fetch_files, ["out.txt"]);
        assert_eq!(
            plan(serde_json::json!({"cells": [], "memory_limit_MB": -1}))
                .unwrap()
                .memory_mb,
            None
        );

        let refused = |body: serde_json::Value| plan(body).unwrap_err().message().to_owned();
        for (field, body) in [
            ("kernel", serde_json::json!({"cells": [], "kernel": "ir"})),
            (
                "cell_timeout",
                serde_json::json!({"cells": [], "cell_timeout": -1}),
            ),
            (
                "cell_timeout",
                serde_json::json!({"cells": [], "cell_timeout": 1e9}),
            ),
            (
                "total_timeout",
                serde_json::json!({"cells": [], "total_timeout": 0}),
            ),
            (
                "memory_limit_MB",
                serde_json::json!({"cells": [], "memory_limit_MB": 1 << 30}),
            ),
            (
                "files",
                serde_json::json!({"cells": [], "files": {"../x": "aGk="}}),
            ),
            (
                "files",
                serde_json::json!({"cells": [], "files": {"/etc/x": "aGk="}}),
            ),
            (
                "files[\"a\"]",
                serde_json::json!({"cells": [], "files": {"a": "%%"}}),
            ),
            (
                "fetch_files",
                serde_json::json!({"cells": [], "fetch_files": ["a//b"]}),
            ),
        ] {
            let message = refused(body);
            assert!(message.starts_with(&format!("{field}: ")), "{message}");
        }
        let huge = "x".repeat(options.max_code_bytes + 1);
        assert!(refused(serde_json::json!({"cells": ["1", huge]})).starts_with("cells[1]: "));
    }

    #[test]
    fn a_session_cell_reads_as_a_jupyter_cell() {
        let result: CellResult = serde_json::from_value(serde_json::json!({
            "status": "error", "stdout": "10\n", "stderr": "", "value": "'v'",
            "error": {"type": "ZeroDivisionError", "message": "division by zero",
                      "traceback": "Traceback (most recent call last):\n  File \"<cell 3>\", line 1, in <module>\nZeroDivisionError: division by zero\n"},
            "display": [{"mime": "image/png", "base64": "iVBO"}, {"mime": "text/plain", "text": "t"}],
            "duration_ms": 3
        }))
        .unwrap();
        let cell = serde_json::to_value(cell_result(&result)).unwrap();
        assert_eq!(
            cell,
            serde_json::json!({
                "stdout": "10\n", "stderr": "",
                "display": [{"image/png": "iVBO"}, {"text/plain": "t"}, {"text/plain": "'v'"}],
                "error": [{"ename": "ZeroDivisionError", "evalue": "division by zero",
                           "traceback": ["Traceback (most recent call last):",
                                         "  File \"<cell 3>\", line 1, in <module>",
                                         "ZeroDivisionError: division by zero"]}]
            })
        );
        let quiet: CellResult = serde_json::from_value(serde_json::json!({
            "status": "ok", "stdout": "", "stderr": "", "duration_ms": 1
        }))
        .unwrap();
        let cell = serde_json::to_value(cell_result(&quiet)).unwrap();
        assert_eq!(cell["display"], serde_json::json!([]));
        assert_eq!(cell["error"], serde_json::json!([]));
    }
}
