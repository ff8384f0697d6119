//! Integration of an assembled module in one sandbox run (every function's cases against it,
//! then coverage, complexity, docstrings and risky calls), and its quality score; statically
//! when nothing can run.

use std::collections::BTreeMap;

use proto::Language;
use proto::generation::FunctionSpec;
use proto::harness::{
    CasesRequest, CoverageCase, HarnessReport, HarnessRequest, IntegrateRequest, IntegrationReport,
    QualityReport,
};
use proto::job::{FunctionOutcome, Quality, TestResult};
use sandbox::HarnessOutcome;

use super::cases::{CaseRun, case_run};
use super::forms;
use super::{Error, Pipeline, TaskCtx};

/// How the quality score weighs its parts, each 0–1 (docs/api.md, "Quality score").
#[derive(Debug, Clone, Copy)]
struct Weights {
    /// Share of the cases that pass.
    tests: f64,
    /// Line coverage by the cases.
    coverage: f64,
    /// Share of functions with a docstring.
    docstrings: f64,
    /// 1 up to a mean cyclomatic complexity of [`SIMPLE_COMPLEXITY`], less above it.
    simplicity: f64,
    /// 1 without risky calls, 0 with any.
    safety: f64,
}

const WEIGHTS: Weights = Weights {
    tests: 0.5,
    coverage: 0.2,
    docstrings: 0.1,
    simplicity: 0.1,
    safety: 0.1,
};

/// Mean cyclomatic complexity up to which a module counts as fully simple.
const SIMPLE_COMPLEXITY: f64 = 10.0;

#[cfg(test)]
#[test]
fn the_weights_sum_to_one() {
    let sum =
        WEIGHTS.tests + WEIGHTS.coverage + WEIGHTS.docstrings + WEIGHTS.simplicity + WEIGHTS.safety;
    assert!((sum - 1.0).abs() < 1e-9, "{sum}");
}

/// One integration run: per function (when verdicts were asked for) and the module's quality.
pub(super) struct Integration {
    pub(super) verdicts: BTreeMap<String, CaseRun>,
    pub(super) report: QualityReport,
    /// The compiler's or linter's findings about the module's lines (a test form's languages).
    pub(super) warnings: Vec<String>,
    pub(super) duration_ms: u64,
    pub(super) cpu_ms: u64,
}

impl Pipeline {
    /// Runs the assembled module once in the sandbox: with `verdicts`, every function's cases
    /// against it (the harness, untraced, with their timeouts), then the quality analysis
    /// (coverage by the cases, complexity, docstrings, risky calls).
    pub(super) async fn integration_run(
        &self,
        ctx: &TaskCtx,
        language: Language,
        module: &str,
        specs: &[FunctionSpec],
        outcomes: &BTreeMap<String, FunctionOutcome>,
        verdicts: bool,
    ) -> Result<Integration, Error> {
        if let Some(form) = forms::of(language) {
            return self
                .form_integration(ctx, language, form, module, specs, outcomes, verdicts)
                .await;
        }
        let cases = outcomes
            .iter()
            .map(|(n, o)| {
                let inputs = o.tests.iter().map(|t| CoverageCase {
                    inputs: t.inputs.clone(),
                });
                (n.clone(), inputs.collect())
            })
            .collect();
        let verdicts: BTreeMap<String, CasesRequest> = if verdicts {
            outcomes
                .iter()
                .map(|(n, o)| (n.clone(), self.cases_request(&o.tests)))
                .collect()
        } else {
            BTreeMap::new()
        };
        let asked: Vec<String> = verdicts.keys().cloned().collect();
        // Every integration run is a final one (the job's, or the refactored code's before):
        // the linter's findings are asked for.
        let request = HarnessRequest::Integrate(IntegrateRequest {
            verdicts,
            cases,
            case_timeout_ms: self.options.case_timeout_ms,
            lint: true,
        });
        let HarnessOutcome {
            result: run,
            report,
        } = self.run_harness(ctx, language, module, request).await?;
        let report = match report {
            Some(HarnessReport::Integrate(report)) => Some(report),
            _ => None,
        };
        let (mut reports, report) = match report {
            Some(IntegrationReport { functions, quality }) => (functions, quality),
            // The run broke (a limit, a crash): every verdict fails with what broke it
            // (`case_run` without a report), and no other measure was taken.
            None => {
                tracing::warn!(status = ?run.status, "the integration run gave no report");
                (BTreeMap::new(), QualityReport::none_measured())
            }
        };
        let warnings = report.warnings.clone().unwrap_or_default();
        let mut runs = BTreeMap::new();
        for name in asked {
            let outcome = &outcomes[&name];
            let verdict = case_run(&name, &outcome.tests, reports.remove(&name), &run)?;
            runs.insert(name, verdict);
        }
        Ok(Integration {
            verdicts: runs,
            report,
            warnings,
            duration_ms: run.duration_ms,
            cpu_ms: run.cpu_ms.unwrap_or(0),
        })
    }

    /// [`Pipeline::integration_run`] in a language with a test form: every function's cases
    /// against the module in one run of the form (their verdicts when asked for), and the
    /// form's static analysis of the module.
    #[allow(clippy::too_many_arguments)] // integration_run's, and the form it dispatched on
    async fn form_integration(
        &self,
        ctx: &TaskCtx,
        language: Language,
        form: forms::Form,
        module: &str,
        specs: &[FunctionSpec],
        outcomes: &BTreeMap<String, FunctionOutcome>,
        verdicts: bool,
    ) -> Result<Integration, Error> {
        let mut report = forms::scan::scan(form.dialect, module, specs);
        let measure = form.lint.is_some() || form.coverage;
        if !verdicts && !measure {
            // Nothing to compile, lint or measure: no run.
            report.unmeasured.push("warnings".into());
            return Ok(Integration {
                verdicts: BTreeMap::new(),
                report,
                warnings: Vec::new(),
                duration_ms: 0,
                cpu_ms: 0,
            });
        }
        let functions: Vec<_> = specs
            .iter()
            .filter_map(|s| Some(forms::function_cases(s, &outcomes.get(&s.name)?.tests)))
            .collect();
        let super::cases::FormRun {
            mut reports,
            result: run,
            coverage,
        } = self
            .run_form(ctx, language, form, module, &functions, measure)
            .await?;
        if let Some(coverage) = coverage {
            report.coverage = coverage;
            report.unmeasured.retain(|m| m != "coverage");
        }
        let program = (form.program)(module);
        let findings = form.lint.and_then(|lint| lint.findings(&run, &program));
        let warnings = findings.unwrap_or_else(|| {
            report.unmeasured.push("warnings".into());
            Vec::new()
        });
        if !verdicts {
            // Run for the measures alone.
            return Ok(Integration {
                verdicts: BTreeMap::new(),
                report,
                warnings,
                duration_ms: run.duration_ms,
                cpu_ms: run.cpu_ms.unwrap_or(0),
            });
        }
        let load_error = forms::load_error(&run);
        let mut runs = BTreeMap::new();
        for f in &functions {
            let report = reports.remove(&f.name).or_else(|| load_error.clone());
            let verdict = case_run(&f.name, &outcomes[&f.name].tests, report, &run)?;
            runs.insert(f.name.clone(), verdict);
        }
        Ok(Integration {
            verdicts: runs,
            report,
            warnings,
            duration_ms: run.duration_ms,
            cpu_ms: run.cpu_ms.unwrap_or(0),
        })
    }
}

/// The score of a module from its analysis and its test results (docs/api.md's weights).
/// What was not measured (`report.unmeasured`) is left out of the score and shown as not
/// measured (`null`, empty), never as a zero; a test that did not pass counts as failed.
pub(super) fn score(report: QualityReport, results: &[TestResult]) -> Quality {
    let QualityReport {
        coverage,
        complexity,
        docstrings,
        dangerous_calls,
        mut unmeasured,
        warnings: _,
    } = report;
    unmeasured.sort();
    unmeasured.dedup();
    let measured = |name: &str| !unmeasured.iter().any(|u| u == name);
    let tests_total = u32::try_from(results.len()).unwrap_or(u32::MAX);
    let tests_passed = u32::try_from(results.iter().filter(|r| r.passed).count()).unwrap_or(0);
    let pass_rate = if tests_total == 0 {
        0.0
    } else {
        f64::from(tests_passed) / f64::from(tests_total)
    };
    let mean_complexity = if complexity.is_empty() {
        1.0
    } else {
        f64::from(complexity.values().sum::<u32>()) / complexity.len() as f64
    };
    let simplicity = if mean_complexity <= SIMPLE_COMPLEXITY {
        1.0
    } else {
        SIMPLE_COMPLEXITY / mean_complexity
    };
    let safety = if dangerous_calls.is_empty() { 1.0 } else { 0.0 };
    let coverage = measured("coverage").then_some(coverage);
    let docstrings = measured("docstrings").then_some(docstrings);
    let parts = [
        Some((WEIGHTS.tests, pass_rate)),
        coverage.map(|c| (WEIGHTS.coverage, c)),
        docstrings.map(|d| (WEIGHTS.docstrings, d)),
        measured("complexity").then_some((WEIGHTS.simplicity, simplicity)),
        measured("dangerous_calls").then_some((WEIGHTS.safety, safety)),
    ];
    // What was not measured is left out; the rest count in proportion.
    let weight: f64 = parts.iter().flatten().map(|(w, _)| w).sum();
    let score = parts.iter().flatten().map(|(w, m)| w * m).sum::<f64>() / weight;
    let round = |x: f64| (x * 1000.0).round() / 1000.0;
    Quality {
        score: round(score),
        tests_passed,
        tests_total,
        coverage: coverage.map(round),
        complexity,
        docstrings,
        dangerous_calls,
        unmeasured,
        warnings: Vec::new(),
    }
}

/// The quality report when nothing could run: the tests count as not passed, coverage and
/// complexity as not measured; docstrings and risky calls from the static check.
pub(super) fn static_quality(
    module: &str,
    outcomes: &BTreeMap<String, FunctionOutcome>,
) -> Quality {
    let report = crate::static_check::check(module, None).unwrap_or_default();
    let docstrings = if report.functions == 0 {
        1.0
    } else {
        report.documented as f64 / report.functions as f64
    };
    let not_run: Vec<TestResult> = outcomes
        .values()
        .flat_map(|o| {
            o.tests.iter().map(|t| TestResult {
                function: o.name.clone(),
                test: t.name.clone(),
                passed: false,
                actual_output: serde_json::Value::Null,
                error: Some("not run".into()),
                error_kind: None,
                duration_ms: 0.0,
            })
        })
        .collect();
    score(
        QualityReport {
            coverage: 0.0,
            complexity: BTreeMap::new(),
            docstrings,
            dangerous_calls: report.dangerous_calls.into_iter().collect(),
            unmeasured: ["coverage", "complexity", "warnings"]
                .map(str::to_owned)
                .to_vec(),
            warnings: None,
        },
        &not_run,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(unmeasured: &[&str]) -> QualityReport {
        QualityReport {
            coverage: 0.0,
            complexity: BTreeMap::from([("f".to_owned(), 3)]),
            docstrings: 1.0,
            dangerous_calls: vec![],
            unmeasured: unmeasured.iter().map(|u| (*u).to_owned()).collect(),
            warnings: None,
        }
    }

    fn passed(n: usize) -> Vec<TestResult> {
        (0..n)
            .map(|i| TestResult {
                function: "f".into(),
                test: format!("t{i}"),
                passed: true,
                actual_output: serde_json::Value::Null,
                error: None,
                error_kind: None,
                duration_ms: 0.0,
            })
            .collect()
    }

    #[test]
    fn an_unmeasured_coverage_is_shown_as_not_measured_and_left_out_of_the_score() {
        let quality = score(report(&["coverage"]), &passed(2));
        assert_eq!(quality.coverage, None);
        assert_eq!(quality.unmeasured, ["coverage"]);
        // Tests, docstrings, simplicity and safety all full: 1.0 over what was measured.
        assert_eq!(quality.score, 1.0);
        // Measured as zero, it is a zero and it counts.
        let quality = score(report(&[]), &passed(2));
        assert_eq!(quality.coverage, Some(0.0));
        assert_eq!(quality.score, 0.8);
    }

    #[test]
    fn a_run_without_a_report_measured_nothing_but_its_tests() {
        let quality = score(QualityReport::none_measured(), &passed(1));
        assert_eq!((quality.coverage, quality.docstrings), (None, None));
        assert_eq!(quality.score, 1.0);
        let mut failed = passed(1);
        failed[0].passed = false;
        assert_eq!(score(QualityReport::none_measured(), &failed).score, 0.0);
    }
}
