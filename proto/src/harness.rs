//! What the generation pipeline's drivers print from inside the sandbox: one marked line of
//! JSON on stdout (the drivers are `worker/src/py/*.py`; both hand cases to the image's
//! `harness.py`). The worker puts the marker into each driver's request, so it is
//! written in one place, here; a test runs the real drivers and checks every field of these
//! types against what they print.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ErrorKind;

/// Starts the line that carries a [`CasesReport`].
pub const CASES_MARKER: &str = "@@codegen-cases@@ ";
/// Starts the line that carries an [`IntegrationReport`].
pub const INTEGRATION_MARKER: &str = "@@codegen-integration@@ ";

/// One function's cases, run by `harness.run_cases`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CasesReport {
    /// The module loaded and every case passed.
    pub passed: bool,
    /// Empty when the module did not load.
    pub cases: Vec<CaseReport>,
    /// The load error's kind, or the first failing case's.
    pub error_kind: Option<ErrorKind>,
    /// `Type: message` of the load error.
    pub error: Option<String>,
    pub traceback: Option<String>,
}

/// One case's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseReport {
    pub name: String,
    pub passed: bool,
    /// The JSON rendering of the return value (`null` when it raised).
    pub actual_output: serde_json::Value,
    pub error: Option<String>,
    pub error_kind: Option<ErrorKind>,
    /// The call alone.
    pub duration_ms: f64,
}

/// An assembled module, in one run: the verdicts of the functions whose cases were asked for
/// (by name), and the module's quality.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntegrationReport {
    pub functions: BTreeMap<String, CasesReport>,
    pub quality: QualityReport,
}

/// Static and dynamic quality of an assembled module.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QualityReport {
    /// Line coverage by the test cases, 0–1.
    pub coverage: f64,
    /// Cyclomatic complexity per function.
    pub complexity: BTreeMap<String, u32>,
    /// Share of functions with a docstring, 0–1.
    pub docstrings: f64,
    pub dangerous_calls: Vec<String>,
}

/// Why a driver's output could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// No marked line: the run broke before the driver could print (a limit, a crash).
    #[error("no report line")]
    Missing,
    /// A marked line this type does not describe: the image and the worker disagree.
    #[error("the report does not match this worker's contract: {0}")]
    Mismatch(#[from] serde_json::Error),
}

/// The report marked with `marker` in `stdout`: the last marked line, since the driver
/// prints its report after everything the code under test may have printed.
pub fn read<T: serde::de::DeserializeOwned>(stdout: &str, marker: &str) -> Result<T, ReportError> {
    let line = stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(marker))
        .ok_or(ReportError::Missing)?;
    Ok(serde_json::from_str(line)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renamed_field_is_a_mismatch_not_a_failed_case() {
        let stdout = format!(
            "noise\n{CASES_MARKER}{}\n",
            serde_json::json!({"passed": true, "cases": [{"name": "a", "pased": true,
                "actual_output": 1, "error": null, "error_kind": null, "duration_ms": 0.1}],
                "error_kind": null, "error": null, "traceback": null})
        );
        assert!(matches!(
            read::<CasesReport>(&stdout, CASES_MARKER),
            Err(ReportError::Mismatch(_))
        ));
        assert!(matches!(
            read::<CasesReport>("killed\n", CASES_MARKER),
            Err(ReportError::Missing)
        ));
    }
}
