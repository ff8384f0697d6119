//! The channel between the generation pipeline and the image's test harness
//! (`sandbox-images/common/harness.py`, in the Python and python-sci images): what the pipeline asks ([`HarnessRun`], a
//! [`HarnessRequest`] per mode) and what the harness reports ([`HarnessReport`]). The runner
//! runs the harness in its own interpreter and announces the modes it offers in its `ready`
//! message, so a worker knows before it asks. A worker test runs the real harness and checks
//! every field of these types against what it answers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::generation::{TestCase, TestKind};
use crate::{ErrorKind, Language};

/// The work-directory file whose presence asks a run of generated code for the measures only
/// the final run takes: the language's linter (`go vet`, `shellcheck`; Java's compile then
/// warns with `-Xlint:all`), whose findings the image's compile script or test form writes
/// over it (the run returns it), and JavaScript's coverage (in its cases' report). A run
/// without it pays for neither.
pub const LINT_FILE: &str = ".codegen-lint";

/// One run of the image's test harness on `code`, with the run's limits.
#[derive(Debug, Clone, PartialEq)]
pub struct HarnessRun {
    pub language: Language,
    /// The module the harness loads (empty for [`HarnessRequest::ManyCases`], whose runs
    /// carry their own).
    pub code: String,
    pub request: HarnessRequest,
    pub timeout_ms: u64,
    /// Memory limit (RAM and swap together), in MiB.
    pub memory_mb: u64,
}

/// What the harness is asked to do: the runner request's `harness` object, its `mode` the tag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum HarnessRequest {
    /// One function's cases against the module.
    Cases(CasesRequest),
    /// Several functions' cases, each against its own module, in one run.
    ManyCases { runs: Vec<CasesRequest> },
    /// The assembled module: the verdicts of the functions named in `verdicts`, and its
    /// quality (coverage by `cases`).
    Integrate(IntegrateRequest),
}

impl HarnessRequest {
    /// The mode's name, as the harness and the runner's `ready` name it.
    pub fn mode(&self) -> &'static str {
        match self {
            HarnessRequest::Cases(_) => "cases",
            HarnessRequest::ManyCases { .. } => "many_cases",
            HarnessRequest::Integrate(_) => "integrate",
        }
    }

    /// Reads the harness's answer to this request as the report of its mode.
    pub fn read_report(&self, report: serde_json::Value) -> serde_json::Result<HarnessReport> {
        Ok(match self {
            HarnessRequest::Cases(_) => HarnessReport::Cases(serde_json::from_value(report)?),
            HarnessRequest::ManyCases { .. } => {
                HarnessReport::ManyCases(serde_json::from_value(report)?)
            }
            HarnessRequest::Integrate(_) => {
                HarnessReport::Integrate(serde_json::from_value(report)?)
            }
        })
    }
}

/// One function's cases (`function` names it in the module; absent inside an integration,
/// whose `verdicts` are keyed by name).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CasesRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// The module, inside a [`HarnessRequest::ManyCases`] only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    pub cases: Vec<HarnessCase>,
    pub case_timeout_ms: u64,
    /// Per stream, per case.
    pub max_output_bytes: u64,
    /// Echoed in the harness CLI's report lines (in-process runs have no use for it).
    pub nonce: Option<String>,
}

/// A case as the harness runs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HarnessCase {
    pub name: String,
    pub kind: TestKind,
    pub inputs: serde_json::Map<String, serde_json::Value>,
    pub expected_output: serde_json::Value,
    pub expected_error: Option<String>,
}

impl From<&TestCase> for HarnessCase {
    fn from(case: &TestCase) -> Self {
        HarnessCase {
            name: case.name.clone(),
            kind: case.kind,
            inputs: case.inputs.clone(),
            expected_output: case.expected_output.clone(),
            expected_error: case.expected_error.clone(),
        }
    }
}

/// An integration of an assembled module.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntegrateRequest {
    /// The functions whose verdicts are asked for, by name (empty: quality only).
    pub verdicts: BTreeMap<String, CasesRequest>,
    /// Every function's case inputs, by name: what the coverage pass calls.
    pub cases: BTreeMap<String, Vec<CoverageCase>>,
    pub case_timeout_ms: u64,
    /// Asks for the linter's findings too ([`QualityReport::warnings`]): the final run's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lint: bool,
}

/// A call the coverage pass makes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoverageCase {
    pub inputs: serde_json::Map<String, serde_json::Value>,
}

/// The harness's answer, of the mode asked ([`HarnessRequest::read_report`]).
#[derive(Debug, Clone, PartialEq)]
pub enum HarnessReport {
    Cases(CasesReport),
    ManyCases(ManyCasesReport),
    Integrate(IntegrationReport),
}

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
    /// Measures the analysis could not take (`coverage`, ...).
    #[serde(default)]
    pub unmeasured: Vec<String>,
    /// The linter's findings (`line N: message`), when asked for and the image has one
    /// (else `warnings` is among `unmeasured`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warnings: Option<Vec<String>>,
}

impl QualityReport {
    /// The report of a run that gave none: no measure taken.
    pub fn none_measured() -> Self {
        Self {
            coverage: 0.0,
            complexity: BTreeMap::new(),
            docstrings: 0.0,
            dangerous_calls: vec![],
            unmeasured: [
                "coverage",
                "complexity",
                "docstrings",
                "dangerous_calls",
                "warnings",
            ]
            .map(str::to_owned)
            .to_vec(),
            warnings: None,
        }
    }
}
