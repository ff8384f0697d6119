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

use std::collections::BTreeMap;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use proto::api::ExecutionSubmission;
use proto::{CompileStatus, ExecutionResult, FileContent, Language, Status, TaskId};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::Coordinator;
use crate::auth::Tenant;
use crate::body::read_body;
use crate::error::ApiError;
use crate::executions::{accept, validate};
use crate::request_id::RequestIdOf;

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
        (status = 401, description = "API keys are configured and none (or an unknown one) was given.", body = proto::api::ErrorBody),
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
    let wait = c.options.wait + std::time::Duration::from_millis(timeout_ms);
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
}
