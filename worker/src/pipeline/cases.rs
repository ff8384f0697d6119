//! Running a function's cases in the sandbox through the image's harness, and reading the
//! verdicts back.

use std::collections::BTreeMap;
use std::time::Instant;

use proto::generation::TestCase;
use proto::harness::CasesReport;
use proto::job::TestResult;
use proto::{ErrorKind, ExecutionRequest, Language, Status};
use serde_json::{Value, json};

use crate::gate::Dependency;

use super::{Error, Pipeline, SANDBOX_US};

/// One run of a function's cases.
#[derive(Debug, Clone, Default)]
pub(super) struct CaseRun {
    pub(super) passed: bool,
    pub(super) results: Vec<TestResult>,
    /// What failed first, when something did.
    pub(super) error_kind: Option<ErrorKind>,
    pub(super) error: String,
    pub(super) duration_ms: u64,
    /// CPU time of the run's container.
    pub(super) cpu_ms: u64,
}

impl Pipeline {
    /// A sandbox run, its wall time added to the task's [`SANDBOX_US`]. While Docker is down
    /// the run waits for it, at most `sandbox_wait`, so a short outage costs time instead of
    /// the model calls the task has already made.
    pub(super) async fn sandboxed(
        &self,
        execution: &ExecutionRequest,
    ) -> Result<proto::ExecutionResult, Error> {
        loop {
            self.go_on().await?;
            // Timed from before the turn: a run's time includes waiting for a container, as it
            // did when that wait was inside the pool.
            let started = Instant::now();
            let turn = match &self.sandbox_turns {
                Some(turns) => turns.enter(execution).await,
                None => None,
            };
            let result = self.sandbox.run(execution).await;
            drop(turn);
            let _ = SANDBOX_US.try_with(|us| {
                us.set(us.get() + u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX))
            });
            let e = match result {
                Ok(result) => return Ok(result),
                Err(e) => e,
            };
            let reason = e.to_string();
            if e.is_retryable()
                && self.gate.confirm_down(Dependency::Docker, &reason).await
                && self
                    .gate
                    .wait_up(&[Dependency::Docker], self.options.sandbox_wait)
                    .await
                    .is_ok()
            {
                continue;
            }
            return Err(Error::Retry {
                dependency: Dependency::Docker,
                reason,
            });
        }
    }

    /// Runs `module` through the image's test harness in the runner's own interpreter (its
    /// `harness` mode, `spec` naming the mode: no driver program to compile in every program
    /// process, no files to write and read back). The result, and the harness's report read
    /// as `T`: `None` when the run broke before the harness answered (a timeout, the memory
    /// limit, a crash); `Drop`, naming `what` ran, when the report is not a `T` (the image and
    /// the worker disagree).
    pub(super) async fn run_harness<T: serde::de::DeserializeOwned>(
        &self,
        module: &str,
        spec: Value,
        what: &str,
    ) -> Result<(proto::ExecutionResult, Option<T>), Error> {
        let execution = ExecutionRequest {
            language: Language::Python,
            code: module.to_owned(),
            stdin: None,
            test: None,
            timeout_ms: self.options.run_timeout_ms,
            cpu_time_ms: None,
            compile_timeout_ms: None,
            memory_mb: self.options.memory_mb,
            fresh_container: false,
            files: BTreeMap::new(),
            return_files: vec![],
            harness: Some(spec),
        };
        let mut result = self.sandboxed(&execution).await?;
        let report = result
            .harness
            .take()
            .map(|report| serde_json::from_value(*report))
            .transpose()
            .map_err(|e| Error::Drop(format!("{what}: its report does not match: {e}")))?;
        Ok((result, report))
    }

    /// What the harness needs to run `cases` (without the code and the function's name).
    pub(super) fn cases_request(&self, cases: &[TestCase]) -> Value {
        let harness_cases: Vec<Value> = cases
            .iter()
            .map(|c| {
                json!({"name": c.name, "kind": c.kind, "inputs": c.inputs,
                       "expected_output": c.expected_output, "expected_error": c.expected_error})
            })
            .collect();
        json!({
            "cases": harness_cases,
            "case_timeout_ms": self.options.case_timeout_ms,
            "max_output_bytes": 64 * 1024,
            "nonce": null,
        })
    }

    /// Runs `function`'s cases against `module` in the sandbox, through the image's harness.
    pub(super) async fn run_cases(
        &self,
        module: &str,
        function: &str,
        cases: &[TestCase],
    ) -> Result<CaseRun, Error> {
        let mut spec = self.cases_request(cases);
        spec["mode"] = json!("cases");
        spec["function"] = json!(function);
        let (result, report) = self
            .run_harness::<CasesReport>(module, spec, "the sandbox image's test harness")
            .await?;
        case_run(function, cases, report, &result)
    }
}

/// `function`'s verdicts from its report in `result`; without a report (the run broke: a
/// timeout, the memory limit, a crash) every case fails with what broke it.
pub(super) fn case_run(
    function: &str,
    cases: &[TestCase],
    report: Option<CasesReport>,
    result: &proto::ExecutionResult,
) -> Result<CaseRun, Error> {
    let duration_ms = result.duration_ms;
    let cpu_ms = result.cpu_ms.unwrap_or(0);
    let Some(report) = report else {
        let kind = match result.status {
            Status::Timeout => ErrorKind::Timeout,
            Status::MemoryLimit => ErrorKind::MemoryLimit,
            Status::OutputLimit => ErrorKind::OutputLimit,
            Status::SandboxError | Status::Error => {
                return Err(Error::Retry {
                    dependency: Dependency::Docker,
                    reason: format!("sandbox: {}", result.reason.clone().unwrap_or_default()),
                });
            }
            _ => ErrorKind::Runtime,
        };
        let error = result
            .reason
            .clone()
            .unwrap_or_else(|| tail(&result.stderr, 2000));
        return Ok(CaseRun {
            passed: false,
            results: cases
                .iter()
                .map(|c| TestResult {
                    function: function.to_owned(),
                    test: c.name.clone(),
                    passed: false,
                    actual_output: Value::Null,
                    error: Some(error.clone()),
                    error_kind: Some(kind),
                    duration_ms: 0.0,
                })
                .collect(),
            error_kind: Some(kind),
            error,
            duration_ms,
            cpu_ms,
        });
    };
    let results: Vec<TestResult> = report
        .cases
        .into_iter()
        .map(|c| TestResult {
            function: function.to_owned(),
            test: c.name,
            passed: c.passed,
            actual_output: c.actual_output,
            error: c.error,
            error_kind: c.error_kind,
            duration_ms: c.duration_ms,
        })
        .collect();
    let failed = results.iter().filter(|r| !r.passed).count();
    let error = match report.error {
        Some(load_error) => format!("{load_error}\n{}", report.traceback.unwrap_or_default()),
        None if failed > 0 => format!("{failed} of {} cases failed", results.len()),
        None => String::new(),
    };
    Ok(CaseRun {
        passed: report.passed,
        results,
        error_kind: report.error_kind,
        error,
        duration_ms,
        cpu_ms,
    })
}

fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}
