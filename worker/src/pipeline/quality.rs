//! Quality of an assembled module: coverage, complexity, docstrings and risky calls, measured
//! in the sandbox, or statically when nothing can run.

use std::collections::BTreeMap;

use proto::harness::{self, QualityReport, ReportError};
use proto::job::{FunctionOutcome, Quality, TestResult};
use serde_json::{Value, json};

use super::{Error, Pipeline};

/// How the quality score weighs its parts, each 0–1 (the README's quality section).
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

impl Pipeline {
    pub(super) async fn quality(
        &self,
        module: &str,
        outcomes: &BTreeMap<String, FunctionOutcome>,
        results: &[TestResult],
    ) -> Result<Quality, Error> {
        let tests_total = u32::try_from(results.len()).unwrap_or(u32::MAX);
        let tests_passed = u32::try_from(results.iter().filter(|r| r.passed).count()).unwrap_or(0);
        let cases: BTreeMap<&String, Vec<Value>> = outcomes
            .iter()
            .map(|(n, o)| {
                (
                    n,
                    o.tests
                        .iter()
                        .map(|t| json!({"inputs": t.inputs}))
                        .collect(),
                )
            })
            .collect();
        let request = json!({"marker": harness::QUALITY_MARKER, "cases": cases});
        let run = self
            .run_driver(crate::drivers::QUALITY, module, &request)
            .await?;
        let QualityReport {
            coverage,
            complexity,
            docstrings,
            dangerous_calls,
        } = match harness::read::<QualityReport>(&run.stdout, harness::QUALITY_MARKER) {
            Ok(report) => report,
            // The analysis itself broke (a limit, a crash): the module scores nothing for it.
            Err(ReportError::Missing) => {
                tracing::warn!(status = ?run.status, "the quality analysis printed no report");
                QualityReport {
                    coverage: 0.0,
                    complexity: BTreeMap::new(),
                    docstrings: 0.0,
                    dangerous_calls: vec![],
                }
            }
            Err(e @ ReportError::Mismatch(_)) => {
                return Err(Error::Drop(format!("the quality analysis: {e}")));
            }
        };
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
        let score = WEIGHTS.tests * pass_rate
            + WEIGHTS.coverage * coverage
            + WEIGHTS.docstrings * docstrings
            + WEIGHTS.simplicity * simplicity
            + WEIGHTS.safety * safety;
        Ok(Quality {
            score: (score * 1000.0).round() / 1000.0,
            tests_passed,
            tests_total,
            coverage: (coverage * 1000.0).round() / 1000.0,
            complexity,
            docstrings,
            dangerous_calls,
        })
    }
}

/// The quality report when nothing could run: tests count as not passed, coverage as zero.
pub(super) fn static_quality(
    module: &str,
    outcomes: &BTreeMap<String, FunctionOutcome>,
) -> Quality {
    let report = crate::static_check::check(module, None).unwrap_or_default();
    let tests_total =
        u32::try_from(outcomes.values().map(|o| o.tests.len()).sum::<usize>()).unwrap_or(u32::MAX);
    let docstrings = if report.functions == 0 {
        0.0
    } else {
        report.documented as f64 / report.functions as f64
    };
    let safety = if report.dangerous_calls.is_empty() {
        1.0
    } else {
        0.0
    };
    // Same weights as a tested module; the untested half scores zero.
    let score = WEIGHTS.docstrings * docstrings + WEIGHTS.safety * safety;
    Quality {
        score: (score * 1000.0).round() / 1000.0,
        tests_passed: 0,
        tests_total,
        coverage: 0.0,
        complexity: BTreeMap::new(),
        docstrings,
        dangerous_calls: report.dangerous_calls.into_iter().collect(),
    }
}
