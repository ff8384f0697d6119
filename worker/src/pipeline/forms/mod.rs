//! Test forms of generated code: how the test cases a model writes run in a language whose
//! image has no in-process harness. The cases are rendered into the language's documented test
//! form (the program, then a test script in the same scope: `GET /v1/languages`), run as a
//! plain execution, and the script's report, shaped like `proto::harness`'s, is read back from a
//! file the execution returns. Python keeps its in-process harness (`harness.py`).

pub(crate) mod bash;
pub(crate) mod c_family;
pub(crate) mod go;
pub(crate) mod java;
pub(crate) mod javascript;
pub(crate) mod judge;
pub(crate) mod rust;
pub(crate) mod scan;
pub(crate) mod types;
pub(crate) mod warnings;

use std::collections::BTreeMap;

use proto::generation::{FunctionSpec, TestCase};
use proto::harness::{CasesReport, HarnessCase};
use proto::{ErrorKind, ExecutionResult, FileContent, Language, Status};

use judge::{Cut, Values};
use scan::Dialect;

/// A language's test form.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Form {
    /// The program as it runs: the module (the functions' code, one after another) as the
    /// language needs it (Go: one package clause and one import block first).
    pub(crate) program: fn(&str) -> String,
    /// The test script for functions' cases (each bounded by a timeout in ms), writing its
    /// reports to a path below the work directory with a nonce.
    pub(crate) render: fn(&[FunctionCases], u64, &str, &str) -> String,
    /// What the script writes.
    pub(crate) writes: Writes,
    /// The static part of the module's quality.
    pub(crate) dialect: &'static Dialect,
    /// What the compiler or linter says about the module; `None`: no tool in the image does.
    pub(crate) lint: Option<Lint>,
    /// Whether the final run measures the code's coverage (its report gives it).
    pub(crate) coverage: bool,
}

/// Where a language's compiler or linter findings come from, and how they are read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lint {
    pub(crate) from: Findings,
    /// The findings about the program's first `lines` lines (the module; the test follows it).
    pub(crate) read: fn(&str, usize) -> Vec<String>,
}

/// Where a run leaves a lint's findings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Findings {
    /// The compiler's output (it warns as it compiles).
    Compile,
    /// The returned [`proto::harness::LINT_FILE`]; missing when the image has no linter.
    File,
}

impl Lint {
    const fn compile(read: fn(&str, usize) -> Vec<String>) -> Option<Self> {
        Some(Self {
            from: Findings::Compile,
            read,
        })
    }

    const fn file(read: fn(&str, usize) -> Vec<String>) -> Option<Self> {
        Some(Self {
            from: Findings::File,
            read,
        })
    }

    /// The findings of `result`'s run of `program`; `None` when the run left none to read
    /// (nothing compiled, or the image's linter did not write its file).
    pub(crate) fn findings(&self, result: &ExecutionResult, program: &str) -> Option<Vec<String>> {
        let text = match self.from {
            Findings::Compile => result.compile.as_ref()?.output.as_str(),
            Findings::File => match result.files.get(proto::harness::LINT_FILE)? {
                FileContent::Text(text) => text.as_str(),
                FileContent::Bytes(_) => return None,
            },
        };
        Some((self.read)(text, program.lines().count()))
    }
}

/// What a form's test script writes to its report file.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Writes {
    /// Each function's report, judged by the script (JavaScript's).
    Reports,
    /// One line per case of what the function did, judged by [`judge`].
    Outcomes(Values),
}

/// The test form of generated code in `language`; `None`: the image's harness runs its cases.
pub(crate) fn of(language: Language) -> Option<Form> {
    match language {
        // TypeScript's test is appended to the code and the module transpiled (types erased):
        // the same script then runs in the same global scope.
        Language::Javascript | Language::Typescript => Some(Form {
            program: str::to_owned,
            render: javascript::render,
            writes: Writes::Reports,
            dialect: &javascript::DIALECT,
            lint: None,
            coverage: true,
        }),
        Language::Go => Some(Form {
            program: go::program,
            render: go::render,
            writes: Writes::Outcomes(Values::Json),
            dialect: &go::DIALECT,
            lint: Lint::file(warnings::go_vet),
            coverage: true,
        }),
        Language::Bash => Some(Form {
            program: str::to_owned,
            render: bash::render,
            writes: Writes::Outcomes(Values::Printed),
            dialect: &bash::DIALECT,
            lint: Lint::file(warnings::shellcheck),
            coverage: false,
        }),
        Language::Java => Some(Form {
            program: java::program,
            render: java::render,
            writes: Writes::Outcomes(Values::Json),
            dialect: &java::DIALECT,
            lint: Lint::compile(warnings::javac),
            coverage: false,
        }),
        Language::Rust => Some(Form {
            program: rust::program,
            render: rust::render,
            writes: Writes::Outcomes(Values::Json),
            dialect: &rust::DIALECT,
            lint: Lint::compile(warnings::rustc),
            coverage: false,
        }),
        Language::C => Some(Form {
            program: str::to_owned,
            render: c_family::render_c,
            writes: Writes::Outcomes(Values::Json),
            dialect: &c_family::C_DIALECT,
            lint: Lint::compile(warnings::gcc),
            coverage: false,
        }),
        Language::Cpp => Some(Form {
            program: str::to_owned,
            render: c_family::render_cpp,
            writes: Writes::Outcomes(Values::Json),
            dialect: &c_family::CPP_DIALECT,
            lint: Lint::compile(warnings::gcc),
            coverage: false,
        }),
        _ => None,
    }
}

impl Form {
    /// The line coverage `result`'s run measured (its report file at `path`, with `nonce`).
    pub(crate) fn coverage_of(
        &self,
        result: &ExecutionResult,
        path: &str,
        nonce: &str,
    ) -> Option<f64> {
        if !self.coverage {
            return None;
        }
        let text = match result.files.get(path)? {
            FileContent::Text(text) => text,
            FileContent::Bytes(_) => return None,
        };
        match self.writes {
            Writes::Reports => read_coverage(text, nonce),
            Writes::Outcomes(_) => judge::coverage(text, nonce),
        }
    }

    /// The reports the test script of `functions` wrote to `path` (a returned file of
    /// `result`) with `nonce`; `None` when the file is missing or not one the script wrote.
    pub(crate) fn reports(
        &self,
        functions: &[FunctionCases],
        result: &ExecutionResult,
        path: &str,
        nonce: &str,
    ) -> Option<BTreeMap<String, CasesReport>> {
        let text = match result.files.get(path)? {
            FileContent::Text(text) => text.as_str(),
            FileContent::Bytes(_) => return None,
        };
        match self.writes {
            Writes::Reports => read_reports(text, nonce),
            Writes::Outcomes(values) => {
                judge::reports(functions, text, nonce, values, &cut(result))
            }
        }
    }
}

/// Asks `request`'s run for its language's lint ([`proto::harness::LINT_FILE`] sent, and
/// returned with the findings).
pub(crate) fn ask_lint(request: &mut proto::ExecutionRequest) {
    let file = proto::harness::LINT_FILE.to_owned();
    request
        .files
        .insert(file.clone(), FileContent::Text(String::new()));
    request.return_files.push(file);
}

/// What ended `result`'s run, for the cases its script did not write.
fn cut(result: &ExecutionResult) -> Cut {
    let kind = result.cut_kind();
    let reason = result.reason.clone().unwrap_or_else(|| {
        format!(
            "the run ended before the case: {}",
            tail(&result.stderr, 2000)
        )
    });
    Cut { kind, reason }
}

/// `spec`'s `cases`, as a form runs them.
pub(crate) fn function_cases(spec: &FunctionSpec, cases: &[TestCase]) -> FunctionCases {
    FunctionCases {
        name: spec.name.clone(),
        params: spec.inputs.iter().map(|p| p.name.clone()).collect(),
        types: spec.inputs.iter().map(|p| p.ty.clone()).collect(),
        returns: spec.outputs.ty.clone(),
        cases: cases.iter().map(HarnessCase::from).collect(),
    }
}

/// The report of a run whose program did not load (the runner classified a syntax or import
/// error, or the compiler refused it): no case ran, as the Python harness reports a module
/// that does not load. A compile's report holds what the compiler printed (its first errors:
/// what a repair needs).
pub(crate) fn load_error(result: &ExecutionResult) -> Option<CasesReport> {
    if result.status == Status::CompileError {
        let printed = result
            .compile
            .as_ref()
            .map(|c| c.output.as_str())
            .unwrap_or_default();
        return Some(CasesReport {
            passed: false,
            cases: Vec::new(),
            error_kind: Some(ErrorKind::Syntax),
            error: Some(
                result
                    .reason
                    .clone()
                    .unwrap_or_else(|| "the compile failed".into()),
            ),
            traceback: Some(head(printed, 4000)),
        });
    }
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

fn head(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
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
    /// Their types, as the plan wrote them (in the language's own syntax).
    pub(crate) types: Vec<String>,
    /// What it returns, as the plan wrote it.
    pub(crate) returns: String,
    pub(crate) cases: Vec<HarnessCase>,
}

/// What a rendered test script writes: each function's report, and the nonce it was given.
#[derive(Debug, serde::Deserialize)]
struct Written {
    nonce: String,
    functions: BTreeMap<String, CasesReport>,
    /// The code's line coverage by the cases, when the run measured it (JavaScript's final run).
    #[serde(default)]
    coverage: Option<Covered>,
}

/// What a measured run covered: of `lines` (Go: statements), `covered` ran.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct Covered {
    pub(crate) lines: u32,
    pub(crate) covered: u32,
}

impl Covered {
    pub(crate) fn share(&self) -> Option<f64> {
        (self.lines > 0).then(|| f64::from(self.covered.min(self.lines)) / f64::from(self.lines))
    }
}

/// The line coverage in `text` (the share of the code's lines that ran), if the script wrote it
/// with `nonce`.
pub(crate) fn read_coverage(text: &str, nonce: &str) -> Option<f64> {
    let written: Written = serde_json::from_str(text).ok()?;
    written.coverage.filter(|_| written.nonce == nonce)?.share()
}

/// The reports in `text`, if the script wrote them with `nonce`.
pub(crate) fn read_reports(text: &str, nonce: &str) -> Option<BTreeMap<String, CasesReport>> {
    let written: Written = serde_json::from_str(text).ok()?;
    (written.nonce == nonce).then_some(written.functions)
}

#[cfg(test)]
pub(crate) mod testing {
    //! A form's program and test run as the pipeline runs them: in the language's real
    //! sandbox image (built by `sandbox-images/build`), in a fresh container.

    use std::collections::BTreeMap;

    use proto::generation::TestKind;
    use proto::harness::{CasesReport, HarnessCase};
    use proto::{ErrorKind, ExecutionRequest, ExecutionResult, Language};
    use sandbox::Sandbox as _;
    use serde_json::Value;
    use tokio_util::sync::CancellationToken;

    use super::{FunctionCases, of};

    /// Each case's limit: the cases that pass take milliseconds (a machine many times slower
    /// stays far below it); only the endless ones reach it.
    pub(crate) const CASE_TIMEOUT_MS: u64 = 10_000;

    /// A normal case of the inputs `inputs` (a JSON object) expecting `expected`, or `error`.
    pub(crate) fn case(
        name: &str,
        inputs: Value,
        expected: Value,
        error: Option<&str>,
    ) -> HarnessCase {
        HarnessCase {
            name: name.into(),
            kind: TestKind::Normal,
            inputs: inputs.as_object().expect("inputs are an object").clone(),
            expected_output: expected,
            expected_error: error.map(str::to_owned),
        }
    }

    /// `name`'s `cases`, its parameters given as (name, type).
    pub(crate) fn function(
        name: &str,
        params: &[(&str, &str)],
        returns: &str,
        cases: Vec<HarnessCase>,
    ) -> FunctionCases {
        FunctionCases {
            name: name.into(),
            params: params.iter().map(|p| p.0.to_owned()).collect(),
            types: params.iter().map(|p| p.1.to_owned()).collect(),
            returns: returns.into(),
            cases,
        }
    }

    /// Each case of `function`'s report: passed, and its error's kind.
    pub(crate) fn verdicts(
        reports: &BTreeMap<String, CasesReport>,
        function: &str,
    ) -> Vec<(bool, Option<ErrorKind>)> {
        reports[function]
            .cases
            .iter()
            .map(|c| (c.passed, c.error_kind))
            .collect()
    }

    /// `module` and `functions`' cases, run by `language`'s form: the reports (`None` when the
    /// run wrote none) and the run's result.
    pub(crate) async fn run(
        language: Language,
        module: &str,
        functions: &[FunctionCases],
    ) -> (Option<BTreeMap<String, CasesReport>>, ExecutionResult) {
        run_with(language, module, functions, false).await
    }

    /// The lint's findings about `module` in a run of `functions`' cases, as the pipeline's
    /// integration run asks for them; `None`: the run left none.
    pub(crate) async fn lint(
        language: Language,
        module: &str,
        functions: &[FunctionCases],
    ) -> Option<Vec<String>> {
        let form = of(language).expect("a language with a form");
        let (_, result) = run_with(language, module, functions, true).await;
        form.lint?.findings(&result, &(form.program)(module))
    }

    /// The line coverage of `module` by `functions`' cases in a final (measured) run; a
    /// panic naming the run's result when it measured none.
    pub(crate) async fn coverage(
        language: Language,
        module: &str,
        functions: &[FunctionCases],
    ) -> f64 {
        let form = of(language).expect("a language with a form");
        let (_, result) = run_with(language, module, functions, true).await;
        form.coverage_of(&result, REPORT, NONCE)
            .unwrap_or_else(|| panic!("no coverage measured: {result:?}"))
    }

    const REPORT: &str = ".codegen-cases-n1.json";
    const NONCE: &str = "n1";

    async fn run_with(
        language: Language,
        module: &str,
        functions: &[FunctionCases],
        lint: bool,
    ) -> (Option<BTreeMap<String, CasesReport>>, ExecutionResult) {
        let form = of(language).expect("a language with a form");
        let (sandbox, service) = sandbox::DockerSandbox::build(sandbox::Options {
            cluster: format!("wf{}", proto::TaskId::new().to_string().replace('-', "")),
            pool_size: 0,
            languages: language.as_str().into(),
            ..sandbox::Options::default()
        });
        let cancel = CancellationToken::new();
        let service = tokio::spawn(service.run(cancel.clone()));
        let (report, nonce) = (REPORT, NONCE);
        let mut request = ExecutionRequest {
            language,
            code: (form.program)(module),
            stdin: None,
            test: Some((form.render)(functions, CASE_TIMEOUT_MS, report, nonce)),
            // Bounds only a failure: every case ends or times out long before.
            timeout_ms: 120_000,
            compile_timeout_ms: Some(120_000),
            cpu_time_ms: None,
            memory_mb: 512,
            fresh_container: true,
            files: BTreeMap::new(),
            return_files: vec![report.into()],
        };
        if lint {
            super::ask_lint(&mut request);
        }
        let result = sandbox.run(&request).await;
        cancel.cancel();
        service.await.expect("the sandbox service stops");
        let result = result.expect("the sandbox runs the request (is the image built?)");
        (form.reports(functions, &result, report, nonce), result)
    }
}
