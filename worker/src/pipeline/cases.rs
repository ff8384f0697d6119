//! Running a function's cases in the sandbox, through the image's harness (Python) or a test
//! form ([`super::forms`]: the other languages), and reading the verdicts back.

use std::collections::BTreeMap;
use std::time::Instant;

use model::turnstile::Turn;
use proto::generation::{FunctionSpec, TestCase};
use proto::harness::{
    CasesReport, CasesRequest, HarnessCase, HarnessReport, HarnessRequest, HarnessRun,
};
use proto::job::TestResult;
use proto::{ErrorKind, Language, Status};
use sandbox::HarnessOutcome;
use serde_json::Value;

use crate::gate::Dependency;
use crate::metrics::Work;
use crate::sandboxed::{Run, Verdict};

use super::forms::{self, FunctionCases};
use super::shared_runs::{Shared, SharedReport};
use super::{Error, Pipeline, TaskCtx};

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

/// A run of a test form.
pub(super) struct FormRun {
    /// Each function's report (none when the run broke before the script wrote them).
    pub(super) reports: BTreeMap<String, CasesReport>,
    pub(super) result: proto::ExecutionResult,
    /// The code's line coverage, when the run measured it.
    pub(super) coverage: Option<f64>,
}

impl Verdict for HarnessOutcome {
    fn status(&self) -> Status {
        self.result.status
    }
}

impl Pipeline {
    /// A sandbox run, its wall time added to the task's sandbox time. While Docker is down
    /// the run waits for it, at most `sandbox_wait`, so a short outage costs time instead of
    /// the model calls the task has already made. The first attempt runs in `held`, when the
    /// caller has taken the turn already.
    /// `Ok(Err(_))`: the image cannot run this request (its harness does not offer the mode,
    /// or answers another report); no later attempt does better.
    async fn sandboxed(
        &self,
        ctx: &TaskCtx,
        run: &HarnessRun,
        held: Option<Turn<'_>>,
    ) -> Result<Result<HarnessOutcome, sandbox::Error>, Error> {
        self.in_sandbox(
            ctx,
            run.language,
            held,
            || self.sandbox.run_harness(run),
            |e| {
                matches!(
                    e,
                    sandbox::Error::NoHarness(_) | sandbox::Error::HarnessReport { .. }
                )
            },
        )
        .await
    }

    /// One sandbox call (`call`, in a turn of `language`'s pool unless `held` is one) through
    /// the worker's one sandbox-run loop ([`crate::sandboxed`]), waiting out Docker at most
    /// `sandbox_wait`, its wall time added to the task's sandbox time. `Ok(Err(_))`: an error
    /// `settled` says no later attempt does better. The task's own failure, or Docker still
    /// down, is the task's to decide (it waits for Docker, or is handed back).
    async fn in_sandbox<T, F, Fut>(
        &self,
        ctx: &TaskCtx,
        language: Language,
        held: Option<Turn<'_>>,
        call: F,
        settled: fn(&sandbox::Error) -> bool,
    ) -> Result<Result<T, sandbox::Error>, Error>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, sandbox::Error>>,
        T: Verdict,
    {
        if held.is_none() {
            self.go_on(ctx).await?;
        }
        let run = Run {
            work: Work::Job,
            language,
            lane: &ctx.call.lane,
            pooled: true,
            held,
            wait: self.options.sandbox_wait,
            settled,
            timed: &|started| ctx.add_sandbox_time(started),
        };
        self.sandboxed
            .run(run, call)
            .await
            .map_err(|failed| Error::Retry {
                dependency: Dependency::Docker,
                reason: failed.error().to_string(),
            })
    }

    /// Runs `module` through the image's test harness in the runner's own interpreter (no
    /// driver program to compile in every program process, no files to write and read
    /// back): the run's result and the harness's report, `None` when the run broke before the
    /// harness answered (a timeout, the memory limit, a crash). `Drop` when the image's
    /// harness does not offer the mode or answers with another report.
    pub(super) async fn run_harness(
        &self,
        ctx: &TaskCtx,
        language: Language,
        module: &str,
        request: HarnessRequest,
    ) -> Result<HarnessOutcome, Error> {
        self.run_harness_in(ctx, language, module, request, None)
            .await?
            .map_err(|e| Error::Failed(e.to_string()))
    }

    /// [`Pipeline::run_harness`], its first attempt in `held`, a turn already taken; what
    /// the image cannot run as [`Pipeline::sandboxed`] says it.
    async fn run_harness_in(
        &self,
        ctx: &TaskCtx,
        language: Language,
        module: &str,
        request: HarnessRequest,
        held: Option<Turn<'_>>,
    ) -> Result<Result<HarnessOutcome, sandbox::Error>, Error> {
        let run = HarnessRun {
            language,
            code: module.to_owned(),
            request,
            timeout_ms: self.options.run_timeout_ms,
            memory_mb: self.options.memory_mb,
        };
        self.sandboxed(ctx, &run, held).await
    }

    /// `functions`' cases run against `module` by `language`'s test `form` (with `measure`,
    /// the final run's measures too: [`proto::harness::LINT_FILE`]).
    pub(super) async fn run_form(
        &self,
        ctx: &TaskCtx,
        language: Language,
        form: forms::Form,
        module: &str,
        functions: &[FunctionCases],
        measure: bool,
    ) -> Result<FormRun, Error> {
        let nonce = proto::TaskId::new().to_string();
        let report = format!(".codegen-cases-{nonce}.json");
        let mut request = proto::ExecutionRequest {
            language,
            code: (form.program)(module),
            stdin: None,
            test: Some((form.render)(
                functions,
                self.options.case_timeout_ms,
                &report,
                &nonce,
            )),
            timeout_ms: self.options.run_timeout_ms,
            // The runner's default, 10 s, is short for a slow machine's Rust or Java.
            compile_timeout_ms: Some(self.options.compile_timeout_ms),
            cpu_time_ms: None,
            memory_mb: self.options.memory_mb,
            fresh_container: false,
            files: BTreeMap::new(),
            return_files: vec![report.clone()],
        };
        if measure {
            forms::ask_lint(&mut request);
        }
        let result = self.executed(ctx, &request).await?;
        let reports = form
            .reports(functions, &result, &report, &nonce)
            .unwrap_or_default();
        let coverage = form.coverage_of(&result, &report, &nonce);
        Ok(FormRun {
            reports,
            result,
            coverage,
        })
    }

    /// A plain sandbox run ([`Pipeline::in_sandbox`]: every error is the sandbox's).
    async fn executed(
        &self,
        ctx: &TaskCtx,
        request: &proto::ExecutionRequest,
    ) -> Result<proto::ExecutionResult, Error> {
        self.in_sandbox(
            ctx,
            request.language,
            None,
            || self.sandbox.run(request),
            |_| false,
        )
        .await?
        .map_err(|e| Error::Failed(e.to_string()))
    }

    /// What the harness needs to run `cases` (without the code and the function's name).
    pub(super) fn cases_request(&self, cases: &[TestCase]) -> CasesRequest {
        CasesRequest {
            function: None,
            code: None,
            cases: cases.iter().map(HarnessCase::from).collect(),
            case_timeout_ms: self.options.case_timeout_ms,
            max_output_bytes: 64 * 1024,
            nonce: None,
        }
    }

    /// Runs `spec`'s cases against `module` (in `language`) in the sandbox: through the
    /// image's harness, in one run with other functions of the job that wait for a container
    /// beside it ([`super::shared_runs`]) or alone; or, in a language with a test form, as a
    /// program and its test.
    pub(super) async fn run_cases(
        &self,
        ctx: &TaskCtx,
        language: Language,
        module: &str,
        spec: &FunctionSpec,
        cases: &[TestCase],
    ) -> Result<CaseRun, Error> {
        let function = spec.name.as_str();
        if let Some(form) = forms::of(language) {
            let functions = [forms::function_cases(spec, cases)];
            let FormRun {
                mut reports,
                result,
                ..
            } = self
                .run_form(ctx, language, form, module, &functions, false)
                .await?;
            let report = reports
                .remove(function)
                .or_else(|| forms::load_error(&result));
            return case_run(function, cases, report, &result);
        }
        let run = CasesRequest {
            function: Some(function.to_owned()),
            ..self.cases_request(cases)
        };
        let (Some(turns), true) = (self.sandboxed.turns(), self.shared_runs.enabled()) else {
            return self
                .run_cases_alone(ctx, language, module, function, cases, run)
                .await;
        };
        let job = ctx.job;
        self.go_on(ctx).await?;
        let started = Instant::now();
        let shared_run = CasesRequest {
            code: Some(module.to_owned()),
            ..run.clone()
        };
        let budget_ms = (cases.len() as u64).saturating_mul(self.options.case_timeout_ms);
        let (waiting, mut answer) = self.shared_runs.wait(job, shared_run, budget_ms);
        let turn = tokio::select! {
            biased;
            shared = &mut answer => {
                drop(waiting);
                return self.followed(ctx, language, shared, started, module, function, cases, run).await;
            }
            turn = turns.enter_language(language, &ctx.call.lane) => turn,
        };
        let Some((mine, others)) = waiting.lead() else {
            // Taken by another run of the job just before this one's turn came.
            drop(turn);
            let shared = answer.await;
            return self
                .followed(ctx, language, shared, started, module, function, cases, run)
                .await;
        };
        ctx.add_sandbox_time(started);
        if others.is_empty() {
            let outcome = self
                .run_harness_in(ctx, language, module, HarnessRequest::Cases(run), turn)
                .await?
                .map_err(|e| Error::Failed(e.to_string()))?;
            return case_run(
                function,
                cases,
                cases_report(outcome.report),
                &outcome.result,
            );
        }
        let (runs, replies): (Vec<CasesRequest>, Vec<_>) = std::iter::once(mine)
            .chain(others)
            .map(|m| (m.run, m.reply))
            .unzip();
        let mut shares = self
            .shared_run(ctx, language, runs, turn)
            .await?
            .into_iter();
        // The first share is this run's; members past the shares run alone.
        let mine = shares.next();
        for reply in replies.into_iter().skip(1) {
            let _ = reply.send(shares.next().unwrap_or(Shared::Alone));
        }
        match mine {
            Some(Shared::Report(mine)) => Ok(shared_case_run(function, cases, mine)),
            Some(Shared::Down(dependency, reason)) => Err(Error::Retry { dependency, reason }),
            Some(Shared::Alone) | None => {
                self.run_cases_alone(ctx, language, module, function, cases, run)
                    .await
            }
        }
    }

    /// `spec`'s `cases` against each of `modules` (a function's candidates): one harness run
    /// for all where the image's harness runs them (each against its own module), else one
    /// run each; a verdict per module, in order.
    pub(super) async fn run_candidates(
        &self,
        ctx: &TaskCtx,
        language: Language,
        modules: &[String],
        spec: &FunctionSpec,
        cases: &[TestCase],
    ) -> Result<Vec<CaseRun>, Error> {
        let function = spec.name.as_str();
        let shares = if modules.len() > 1 && forms::of(language).is_none() {
            self.go_on(ctx).await?;
            let runs = modules
                .iter()
                .map(|module| CasesRequest {
                    function: Some(function.to_owned()),
                    code: Some(module.clone()),
                    ..self.cases_request(cases)
                })
                .collect();
            self.shared_run(ctx, language, runs, None).await?
        } else {
            Vec::new()
        };
        let mut shares = shares.into_iter();
        let mut verdicts = Vec::with_capacity(modules.len());
        for module in modules {
            verdicts.push(match shares.next() {
                Some(Shared::Report(report)) => shared_case_run(function, cases, report),
                Some(Shared::Down(dependency, reason)) => {
                    return Err(Error::Retry { dependency, reason });
                }
                Some(Shared::Alone) | None => {
                    self.run_cases(ctx, language, module, spec, cases).await?
                }
            });
        }
        Ok(verdicts)
    }

    /// One harness run of `runs` (a job's waiting cases runs, in `turn`): what each member
    /// gets, in order, as many as the harness answered (all [`Shared::Alone`] when the run
    /// broke, or [`Shared::Down`] when Docker stayed down). `Err` only when the job has
    /// ended.
    async fn shared_run(
        &self,
        ctx: &TaskCtx,
        language: Language,
        runs: Vec<CasesRequest>,
        turn: Option<Turn<'_>>,
    ) -> Result<Vec<Shared>, Error> {
        let job = ctx.job;
        let members = runs.len();
        let outcome = self
            .run_harness_in(ctx, language, "", HarnessRequest::ManyCases { runs }, turn)
            .await;
        let alone = || (0..members).map(|_| Shared::Alone).collect();
        let shares: Vec<Shared> = match outcome {
            Ok(Ok(HarnessOutcome {
                result,
                report: Some(HarnessReport::ManyCases(report)),
            })) if !report.runs.is_empty() => {
                // The harness stops early after code that leaves a thread running.
                let answered = report.runs.len().min(members) as u64;
                let share = |total: u64| total.div_ceil(answered);
                let (duration_ms, cpu_ms) =
                    (share(result.duration_ms), share(result.cpu_ms.unwrap_or(0)));
                report
                    .runs
                    .into_iter()
                    .take(members)
                    .map(|report| {
                        Shared::Report(SharedReport {
                            report,
                            duration_ms,
                            cpu_ms,
                        })
                    })
                    .collect()
            }
            Ok(Ok(HarnessOutcome { result, .. })) => {
                let why = result.reason.unwrap_or_default();
                tracing::info!(%job, functions = members, status = ?result.status, %why, "a shared cases run broke: each function runs alone");
                alone()
            }
            // The image's harness does not share runs (or answers otherwise): it never will.
            Ok(Err(why)) => {
                if self.shared_runs.disable() {
                    tracing::warn!(%why, "the sandbox image's harness cannot share runs: each function runs alone from now on");
                }
                alone()
            }
            Err(e @ (Error::Ended(_) | Error::Stopped)) => return Err(e),
            // Docker stayed down for as long as a run waits: no member waits again.
            Err(Error::Retry { dependency, reason }) => (0..members)
                .map(|_| Shared::Down(dependency, reason.clone()))
                .collect(),
            Err(e) => {
                tracing::info!(%job, functions = members, error = %e, "a shared cases run broke: each function runs alone");
                alone()
            }
        };
        if let Some(counter) = &self.shared_cases {
            let reports = shares
                .iter()
                .filter(|s| matches!(s, Shared::Report(_)))
                .count();
            counter
                .with_label_values(&["shared"])
                .inc_by(reports as u64);
            counter
                .with_label_values(&["broke"])
                .inc_by((members - reports) as u64);
        }
        Ok(shares)
    }

    /// A run another run of the job took: its share of that run, or a run of its own.
    #[allow(clippy::too_many_arguments)] // the run's own, passed on to a run alone
    async fn followed(
        &self,
        ctx: &TaskCtx,
        language: Language,
        shared: Result<Shared, tokio::sync::oneshot::error::RecvError>,
        started: Instant,
        module: &str,
        function: &str,
        cases: &[TestCase],
        run: CasesRequest,
    ) -> Result<CaseRun, Error> {
        // The wait for the shared run was sandbox time, whatever came of it.
        ctx.add_sandbox_time(started);
        match shared {
            Ok(Shared::Report(shared)) => Ok(shared_case_run(function, cases, shared)),
            Ok(Shared::Down(dependency, reason)) => Err(Error::Retry { dependency, reason }),
            // Broke, or its leader was cancelled with it.
            Ok(Shared::Alone) | Err(_) => {
                self.run_cases_alone(ctx, language, module, function, cases, run)
                    .await
            }
        }
    }

    async fn run_cases_alone(
        &self,
        ctx: &TaskCtx,
        language: Language,
        module: &str,
        function: &str,
        cases: &[TestCase],
        run: CasesRequest,
    ) -> Result<CaseRun, Error> {
        let outcome = self
            .run_harness(ctx, language, module, HarnessRequest::Cases(run))
            .await?;
        case_run(
            function,
            cases,
            cases_report(outcome.report),
            &outcome.result,
        )
    }
}

/// The cases report of a cases run (the sandbox read it as the mode asked).
fn cases_report(report: Option<HarnessReport>) -> Option<CasesReport> {
    match report {
        Some(HarnessReport::Cases(report)) => Some(report),
        _ => None,
    }
}

/// `function`'s verdicts from its part of a shared run.
fn shared_case_run(function: &str, cases: &[TestCase], shared: SharedReport) -> CaseRun {
    verdicts(
        function,
        cases,
        shared.report,
        shared.duration_ms,
        shared.cpu_ms,
    )
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
        if matches!(result.status, Status::SandboxError | Status::Error) {
            return Err(Error::Retry {
                dependency: Dependency::Docker,
                reason: format!("sandbox: {}", result.reason.clone().unwrap_or_default()),
            });
        }
        let kind = result.cut_kind();
        let error = trimmed(
            result
                .reason
                .clone()
                .unwrap_or_else(|| tail(&result.stderr, 2000)),
        );
        return Ok(CaseRun {
            passed: false,
            results: all_failed(function, cases, Some(&error), Some(kind)),
            error_kind: Some(kind),
            error,
            duration_ms,
            cpu_ms,
        });
    };
    Ok(verdicts(function, cases, report, duration_ms, cpu_ms))
}

/// Each of `cases` failed with `error` (no case ran).
fn all_failed(
    function: &str,
    cases: &[TestCase],
    error: Option<&str>,
    kind: Option<ErrorKind>,
) -> Vec<TestResult> {
    cases
        .iter()
        .map(|c| TestResult {
            function: function.to_owned(),
            test: c.name.clone(),
            passed: false,
            actual_output: Value::Null,
            error: error.map(|e| trimmed(e.to_owned())),
            error_kind: kind,
            duration_ms: 0.0,
        })
        .collect()
}

/// `function`'s verdicts from its harness report. A report of code that never loaded (a
/// compile or import error) has no case: each of `cases` fails with its error, so that a result
/// never counts no test where tests were asked for.
fn verdicts(
    function: &str,
    cases: &[TestCase],
    report: CasesReport,
    duration_ms: u64,
    cpu_ms: u64,
) -> CaseRun {
    let results: Vec<TestResult> = if report.cases.is_empty() && !report.passed {
        all_failed(function, cases, report.error.as_deref(), report.error_kind)
    } else {
        report
            .cases
            .into_iter()
            .map(|c| TestResult {
                function: function.to_owned(),
                test: c.name,
                passed: c.passed,
                actual_output: c.actual_output,
                error: c.error.map(trimmed),
                error_kind: c.error_kind,
                duration_ms: c.duration_ms,
            })
            .collect()
    };
    let failed = results.iter().filter(|r| !r.passed).count();
    let error = match report.error {
        Some(load_error) => match report.traceback.filter(|t| !t.trim().is_empty()) {
            Some(traceback) => format!("{}\n{traceback}", load_error.trim_end()),
            None => load_error,
        },
        None if failed > 0 => format!("{failed} of {} cases failed", results.len()),
        None => String::new(),
    };
    let error = trimmed(error);
    CaseRun {
        passed: report.passed,
        results,
        error_kind: report.error_kind,
        error,
        duration_ms,
        cpu_ms,
    }
}

/// An error text as every language's results carry it: no trailing newline or blanks (a
/// compiler's message and a traceback end in one, Python's exception line does not).
fn trimmed(mut text: String) -> String {
    text.truncate(text.trim_end().len());
    text
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_texts_are_trimmed_alike_whatever_the_language_ended_them_with() {
        let load = |error: &str, traceback: Option<&str>| CasesReport {
            passed: false,
            cases: vec![],
            error_kind: Some(ErrorKind::Syntax),
            error: Some(error.to_owned()),
            traceback: traceback.map(str::to_owned),
        };
        let cases = [TestCase {
            name: "t".into(),
            kind: proto::generation::TestKind::Normal,
            inputs: serde_json::Map::new(),
            expected_output: Value::Null,
            expected_error: None,
            given: false,
        }];
        // A compiler's message ends in a newline and has no traceback; Python's exception
        // line has none and a traceback that does.
        for (report, error, case_error) in [
            (
                load("main.rs:3: expected `;`\n", None),
                "main.rs:3: expected `;`",
                "main.rs:3: expected `;`",
            ),
            (
                load("main.c:1: error\n\n", Some("")),
                "main.c:1: error",
                "main.c:1: error",
            ),
            (
                load(
                    "SyntaxError: bad",
                    Some("Traceback:\n  line 1\nSyntaxError: bad\n"),
                ),
                "SyntaxError: bad\nTraceback:\n  line 1\nSyntaxError: bad",
                "SyntaxError: bad",
            ),
        ] {
            let run = verdicts("f", &cases, report, 0, 0);
            assert_eq!(run.error, error);
            assert_eq!(run.results[0].error.as_deref(), Some(case_error));
        }
    }
}
