//! What the image's test harness (`sandbox-images/python/harness.py`) reports for the
//! generation pipeline's runs: the runner runs it in its own interpreter (its `harness` mode)
//! and hands the report back beside the result ([`crate::ExecutionResult::harness`]). A
//! worker test runs the real harness and checks every field of these types against what it
//! answers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ErrorKind;

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

/// Several functions' cases in one run (`harness.run_cases_of_many`), each in a module of
/// its own: their reports, in the order of the request's `runs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManyCasesReport {
    pub runs: Vec<CasesReport>,
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
