//! Test forms of generated code: how the test cases a model writes run in a language whose
//! image has no in-process harness. The cases are rendered into the language's documented test
//! form (the program, then a test script in the same scope: `GET /v1/languages`), run as a
//! plain execution, and the script's report, shaped like `proto::harness`'s, is read back from a
//! file the execution returns. Python keeps its in-process harness (`harness.py`).

pub(crate) mod javascript;

use std::collections::BTreeMap;

use proto::generation::{FunctionSpec, TestCase};
use proto::harness::{CasesReport, HarnessCase};
use proto::{ErrorKind, ExecutionResult, FileContent, Language, Status};

/// A language's test form.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Form {
    /// The test script for functions' cases (each bounded by a timeout in ms), writing its
    /// reports to a path below the work directory with a nonce.
    pub(crate) render: fn(&[FunctionCases], u64, &str, &str) -> String,
    /// The static part of the module's quality (what no run measures is `unmeasured`).
    pub(crate) analyse: fn(&str, &[FunctionSpec]) -> proto::harness::QualityReport,
}

/// The test form of generated code in `language`; `None`: the image's harness runs its cases.
pub(crate) fn of(language: Language) -> Option<Form> {
    match language {
        // TypeScript's test is appended to the code and the module transpiled (types erased):
        // the same script then runs in the same global scope.
        Language::Javascript | Language::Typescript => Some(Form {
            render: javascript::render,
            analyse: javascript::analyse,
        }),
        _ => None,
    }
}

/// `spec`'s `cases`, as a form runs them.
pub(crate) fn function_cases(spec: &FunctionSpec, cases: &[TestCase]) -> FunctionCases {
    FunctionCases {
        name: spec.name.clone(),
        params: spec.inputs.iter().map(|p| p.name.clone()).collect(),
        cases: cases.iter().map(HarnessCase::from).collect(),
    }
}

/// The report of a run whose program did not load (the runner classified a syntax or import
/// error): no case ran, as the Python harness reports a module that does not load.
pub(crate) fn load_error(result: &ExecutionResult) -> Option<CasesReport> {
    let kind = result.error_kind?;
    (result.status == Status::Failed && matches!(kind, ErrorKind::Syntax | ErrorKind::Import)).then(
        || CasesReport {
            passed: false,
            cases: Vec::new(),
            error_kind: Some(kind),
            error: result.reason.clone(),
            traceback: Some(tail(&result.stderr, 2000)),
        },
    )
}

fn tail(text: &str, max: usize) -> String {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].to_owned()
}

/// One function's cases, as a form runs them.
#[derive(Debug, Clone)]
pub(crate) struct FunctionCases {
    pub(crate) name: String,
    /// The function's parameters, in order: a case's inputs are passed positionally.
    pub(crate) params: Vec<String>,
    pub(crate) cases: Vec<HarnessCase>,
}

/// What a rendered test script writes: each function's report, and the nonce it was given.
#[derive(Debug, serde::Deserialize)]
struct Written {
    nonce: String,
    functions: BTreeMap<String, CasesReport>,
}

/// The reports a test script wrote to `path` (a returned file of `result`), if it wrote them
/// with `nonce`; `None` when the file is missing or not one the script wrote.
pub(crate) fn read_reports(
    result: &ExecutionResult,
    path: &str,
    nonce: &str,
) -> Option<BTreeMap<String, CasesReport>> {
    let text = match result.files.get(path)? {
        FileContent::Text(text) => text.as_str(),
        FileContent::Bytes(_) => return None,
    };
    let written: Written = serde_json::from_str(text).ok()?;
    (written.nonce == nonce).then_some(written.functions)
}
