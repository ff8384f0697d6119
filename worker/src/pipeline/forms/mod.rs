//! Test forms of generated code: how the test cases a model writes run in a language whose
//! image has no in-process harness. The cases are rendered into the language's documented test
//! form (the program, then a test script in the same scope: `GET /v1/languages`), run as a
//! plain execution, and the script's report, shaped like `proto::harness`'s, is read back from a
//! file the execution returns. Python keeps its in-process harness (`harness.py`).

pub(crate) mod javascript;

use std::collections::BTreeMap;

use proto::harness::{CasesReport, HarnessCase};
use proto::{ExecutionResult, FileContent};

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
