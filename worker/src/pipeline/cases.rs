//! Running a function's cases in the sandbox through the image's harness, and reading the
//! verdicts back.

use std::collections::BTreeMap;
use std::time::Instant;

use model::turnstile::Turn;
use proto::generation::TestCase;
use proto::harness::{CasesReport, ManyCasesReport};
use proto::job::TestResult;
use proto::{ErrorKind, ExecutionRequest, Language, Status};
use serde_json::{Value, json};

use crate::gate::Dependency;

use super::shared_runs::{Shared, SharedReport};
use super::{Error, JOB, Pipeline, SANDBOX_US};

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
    /// the model calls the task has already made. The first attempt runs in `held`, when the caller has taken the turn already.
    async fn sandboxed(
        &self,
        execution: &ExecutionRequest,
        mut held: Option<Turn<'_>>,
    ) -> Result<proto::ExecutionResult, Error> {
        loop {
            if held.is_none() {
                self.go_on().await?;
            }
            // Timed from before the turn: a run's time includes waiting for a container, as it
            // did when that wait was inside the pool.
            let started = Instant::now();
            let turn = match (held.take(), self.sandbox_turns.as_deref()) {
                (Some(turn), _) => Some(turn),
                (None, Some(turns)) => turns.enter(execution).await,
                (None, None) => None,
            };
            let result = self.sandbox.run(execution).await;
            drop(turn);
            add_sandbox_time(started);
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
        self.run_harness_in(module, spec, what, None).await
    }

    /// The harness run of `spec` over `module`.
    fn harness_execution(&self, module: String, spec: Value) -> ExecutionRequest {
        ExecutionRequest {
            language: Language::Python,
            code: module,
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
        }
    }

    /// [`Pipeline::run_harness`], its first attempt in `held`, a turn already taken.
    async fn run_harness_in<T: serde::de::DeserializeOwned>(
        &self,
        module: &str,
        spec: Value,
        what: &str,
        held: Option<Turn<'_>>,
    ) -> Result<(proto::ExecutionResult, Option<T>), Error> {
        let execution = self.harness_execution(module.to_owned(), spec);
        let mut result = self.sandboxed(&execution, held).await?;
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

    /// Runs `function`'s cases against `module` in the sandbox, through the image's harness:
    /// in one run with other functions of the job that wait for a container beside it
    /// ([`super::shared_runs`]), or alone.
    pub(super) async fn run_cases(
        &self,
        module: &str,
        function: &str,
        cases: &[TestCase],
    ) -> Result<CaseRun, Error> {
        let mut run = self.cases_request(cases);
        run["function"] = json!(function);
        let (Some(turns), Ok(job)) = (self.sandbox_turns.as_deref(), JOB.try_with(|job| *job))
        else {
            return self.run_cases_alone(module, function, cases, run).await;
        };
        self.go_on().await?;
        let started = Instant::now();
        let mut shared_run = run.clone();
        shared_run["code"] = json!(module);
        let (waiting, mut answer) = self.shared_runs.wait(job, shared_run);
        let pooled = self.harness_execution(String::new(), Value::Null);
        let turn = tokio::select! {
            biased;
            shared = &mut answer => {
                drop(waiting);
                return self.followed(shared.ok().flatten(), started, module, function, cases, run).await;
            }
            turn = turns.enter(&pooled) => turn,
        };
        let Some((mine, others)) = waiting.lead() else {
            // Taken by another run of the job just before this one's turn came.
            drop(turn);
            let shared = answer.await.ok().flatten();
            return self
                .followed(shared, started, module, function, cases, run)
                .await;
        };
        add_sandbox_time(started);
        if others.is_empty() {
            let mut spec = run;
            spec["mode"] = json!("cases");
            let (result, report) = self
                .run_harness_in::<CasesReport>(module, spec, HARNESS, turn)
                .await?;
            return case_run(function, cases, report, &result);
        }
        let members = others.len() + 1;
        let (runs, replies): (Vec<Value>, Vec<_>) = std::iter::once(mine)
            .chain(others)
            .map(|m| (m.run, m.reply))
            .unzip();
        let spec = json!({"mode": "many_cases", "runs": runs});
        let shared = self
            .run_harness_in::<ManyCasesReport>("", spec, HARNESS, turn)
            .await;
        let reports = match shared {
            Ok((result, Some(report))) if report.runs.len() == members => {
                let share = |total: u64| total.div_ceil(members as u64);
                Some((
                    share(result.duration_ms),
                    share(result.cpu_ms.unwrap_or(0)),
                    report.runs,
                ))
            }
            Err(e @ Error::Ended(_)) => {
                return Err(e);
            }
            other => {
                let why = match other {
                    Ok((result, _)) => format!("{:?}", result.status),
                    Err(e) => e.to_string(),
                };
                tracing::info!(%job, functions = members, %why, "a shared cases run broke: each function runs alone");
                None
            }
        };
        if let Some(counter) = &self.shared_cases {
            let outcome = if reports.is_some() { "shared" } else { "broke" };
            counter.with_label_values(&[outcome]).inc_by(members as u64);
        }
        let Some((duration_ms, cpu_ms, reports)) = reports else {
            // Each member alone, so that no function's verdict is a sibling's fault.
            for reply in replies.into_iter().skip(1) {
                let _ = reply.send(None);
            }
            return self.run_cases_alone(module, function, cases, run).await;
        };
        tracing::debug!(%job, functions = members, "cases runs shared one sandbox run");
        let mut shares = reports.into_iter().map(|report| SharedReport {
            report,
            duration_ms,
            cpu_ms,
        });
        // As many reports as members (checked above): the first is this run's.
        let mine = shares.next();
        for (reply, share) in replies.into_iter().skip(1).zip(shares) {
            let _ = reply.send(Some(share));
        }
        match mine {
            Some(mine) => Ok(shared_case_run(function, mine)),
            None => self.run_cases_alone(module, function, cases, run).await,
        }
    }

    /// A run another run of the job took: its share of that run, or (`None`: it broke) a run
    /// of its own.
    async fn followed(
        &self,
        shared: Shared,
        started: Instant,
        module: &str,
        function: &str,
        cases: &[TestCase],
        run: Value,
    ) -> Result<CaseRun, Error> {
        match shared {
            Some(shared) => {
                add_sandbox_time(started);
                Ok(shared_case_run(function, shared))
            }
            None => self.run_cases_alone(module, function, cases, run).await,
        }
    }

    async fn run_cases_alone(
        &self,
        module: &str,
        function: &str,
        cases: &[TestCase],
        mut spec: Value,
    ) -> Result<CaseRun, Error> {
        spec["mode"] = json!("cases");
        let (result, report) = self
            .run_harness::<CasesReport>(module, spec, HARNESS)
            .await?;
        case_run(function, cases, report, &result)
    }
}

/// What runs a function's cases, for errors.
const HARNESS: &str = "the sandbox image's test harness";

/// Adds the wall time since `started` to the current task's [`SANDBOX_US`].
fn add_sandbox_time(started: Instant) {
    let _ = SANDBOX_US.try_with(|us| {
        us.set(us.get() + u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX))
    });
}

/// `function`'s verdicts from its part of a shared run.
fn shared_case_run(function: &str, shared: SharedReport) -> CaseRun {
    verdicts(function, shared.report, shared.duration_ms, shared.cpu_ms)
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
    Ok(verdicts(function, report, duration_ms, cpu_ms))
}

/// `function`'s verdicts from its harness report.
fn verdicts(function: &str, report: CasesReport, duration_ms: u64, cpu_ms: u64) -> CaseRun {
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
    CaseRun {
        passed: report.passed,
        results,
        error_kind: report.error_kind,
        error,
        duration_ms,
        cpu_ms,
    }
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
