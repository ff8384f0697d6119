//! Generated JavaScript's cases: a test script (`javascript_cases.js`, the request spliced in
//! as JSON) that runs after the code in its global scope, as the image runs a program's test.

use super::FunctionCases;
use super::scan::{self, Dialect};

const DRIVER: &str = include_str!("javascript_cases.js");
/// Where the driver takes its request.
const SLOT: &str = "})(PAYLOAD);";

/// The test script for `functions` (each case bounded by `case_timeout_ms`), writing its
/// reports to `report` (a path below the work directory) with `nonce`.
pub(crate) fn render(
    functions: &[FunctionCases],
    case_timeout_ms: u64,
    report: &str,
    nonce: &str,
) -> String {
    let request = serde_json::json!({
        "nonce": nonce,
        "report": report,
        "case_timeout_ms": case_timeout_ms,
        "functions": functions.iter().map(|f| serde_json::json!({
            "name": f.name,
            "params": f.params,
            "cases": f.cases,
        })).collect::<Vec<_>>(),
    });
    // JSON is a JavaScript expression (U+2028 and U+2029 included, since ES2019): the request
    // is data, never code.
    DRIVER.replacen(SLOT, &format!("}})({request});"), 1)
}

/// Calls a module should not need.
const RISKY: &[&str] = &[
    "eval(",
    "new Function(",
    "Function(",
    "child_process",
    "process.binding",
    "require('vm')",
    "require(\"vm\")",
    "require('net')",
    "require(\"net\")",
    "require('http')",
    "require(\"http\")",
    "require('https')",
    "require(\"https\")",
    "require('dgram')",
    "require(\"dgram\")",
    "require('worker_threads')",
    "require(\"worker_threads\")",
];

/// JavaScript's (and TypeScript's) scan: a JSDoc comment documents a function; line coverage
/// is not measured (yet).
pub(crate) const DIALECT: Dialect = Dialect {
    declarations: &[
        "async function {}(",
        "function {}(",
        "function {} (",
        "const {} =",
        "let {} =",
        "var {} =",
    ],
    typed: false,
    documented: scan::block_doc,
    branches: &[
        "if (", "if(", "for (", "for(", "while (", "while(", "case ", "catch", "&&", "||", "??",
        " ? ",
    ],
    risky: RISKY,
    unmeasured: &["coverage"],
};

#[cfg(test)]
mod tests {
    //! The script run by the host's node with the image's own `harness.js`, as the runner runs
    //! a program and its test (skipped without node).

    use std::collections::BTreeMap;
    use std::path::Path;
    use std::process::Command;

    use proto::generation::{FunctionSpec, TestKind};
    use proto::harness::{CasesReport, HarnessCase};
    use proto::{ErrorKind, ExecutionResult, FileContent};
    use serde_json::{Value, json};

    use super::super::{FunctionCases, read_reports};
    use super::*;

    fn case(name: &str, inputs: Value, expected: Value) -> HarnessCase {
        HarnessCase {
            name: name.into(),
            kind: TestKind::Normal,
            inputs: inputs.as_object().unwrap().clone(),
            expected_output: expected,
            expected_error: None,
        }
    }

    fn error_case(name: &str, inputs: Value, error: &str) -> HarnessCase {
        HarnessCase {
            kind: TestKind::Error,
            expected_error: Some(error.into()),
            ..case(name, inputs, Value::Null)
        }
    }

    fn function(name: &str, params: &[&str], cases: Vec<HarnessCase>) -> FunctionCases {
        FunctionCases {
            name: name.into(),
            params: params.iter().map(|p| (*p).to_owned()).collect(),
            types: params.iter().map(|_| "any".to_owned()).collect(),
            returns: "any".into(),
            cases,
        }
    }

    /// Each case's limit: the cases that pass take microseconds (a machine many times slower
    /// stays far below it); only `forever` reaches it.
    const CASE_TIMEOUT_MS: u64 = 2000;

    /// Runs `code` and the rendered cases the way the image does; the reports, or `None`.
    fn run(code: &str, functions: &[FunctionCases]) -> Option<BTreeMap<String, CasesReport>> {
        let harness =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../sandbox-images/common/harness.js");
        let dir = tempfile::tempdir().unwrap();
        let (report, nonce) = (".codegen-cases-n1.json", "n1");
        std::fs::write(dir.path().join("main.js"), code).unwrap();
        std::fs::write(
            dir.path().join("test.js"),
            render(functions, CASE_TIMEOUT_MS, report, nonce),
        )
        .unwrap();
        let output = Command::new("node")
            .arg(&harness)
            .arg(dir.path().join("main.js"))
            .arg(dir.path().join("test.js"))
            .current_dir(dir.path())
            .output()
            .unwrap();
        let mut result = ExecutionResult::error(proto::Status::Passed, String::new());
        result.stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if let Ok(text) = std::fs::read_to_string(dir.path().join(report)) {
            result.files.insert(report.into(), FileContent::Text(text));
        }
        super::super::of(proto::Language::Javascript)
            .unwrap()
            .reports(functions, &result, report, nonce)
    }

    fn node() -> bool {
        Command::new("node").arg("--version").output().is_ok()
    }

    #[test]
    fn each_case_gets_its_own_verdict_in_the_harness_report_shape() {
        if !node() {
            eprintln!("skipped: no node on this host");
            return;
        }
        let code = r#"
/** Sorted primes up to n. */
function sieve(n) {
  if (n < 0) throw new RangeError('negative');
  console.log('noise that must not matter');
  const p = [];
  for (let i = 2; i <= n; i++) if (p.every((q) => i % q)) p.push(i);
  return p;
}
const half = (x) => x / 2;
function forever() { for (;;) {} }
async function later(x) { return x + 1; }
function pair(a, b) { return { b, a }; }
function unique(xs) { return new Set(xs); }
function nothing() { return undefined; }
"#;
        let reports = run(
            code,
            &[
                function(
                    "sieve",
                    &["n"],
                    vec![
                        case("ten", json!({"n": 10}), json!([2, 3, 5, 7])),
                        case("wrong", json!({"n": 3}), json!([2])),
                        error_case("negative", json!({"n": -1}), "RangeError"),
                        error_case("base class", json!({"n": -1}), "Error"),
                        error_case("not thrown", json!({"n": 1}), "RangeError"),
                        error_case("another class", json!({"n": -1}), "TypeError"),
                    ],
                ),
                function(
                    "half",
                    &["x"],
                    vec![
                        case("close enough", json!({"x": 0.3}), json!(0.15000000001)),
                        case("a string", json!({"x": "a"}), json!("NaN")),
                    ],
                ),
                function("forever", &[], vec![case("loops", json!({}), json!(null))]),
                function(
                    "later",
                    &["x"],
                    vec![case("awaited", json!({"x": 1}), json!(2))],
                ),
                function(
                    "pair",
                    // Positional by the function's parameters, whatever the inputs' order.
                    &["a", "b"],
                    vec![case(
                        "keys",
                        json!({"b": 2, "a": 1}),
                        json!({"a": 1, "b": 2}),
                    )],
                ),
                function(
                    "unique",
                    &["xs"],
                    vec![case("set", json!({"xs": [3, 1, 3]}), json!([1, 3]))],
                ),
                function("nothing", &[], vec![case("null", json!({}), json!(null))]),
                function(
                    "missing",
                    &["x"],
                    vec![case("any", json!({"x": 1}), json!(1))],
                ),
            ],
        )
        .expect("a report");
        let verdicts = |f: &str| -> Vec<(bool, Option<ErrorKind>)> {
            reports[f]
                .cases
                .iter()
                .map(|c| (c.passed, c.error_kind))
                .collect()
        };
        assert_eq!(
            verdicts("sieve"),
            [
                (true, None),
                (false, Some(ErrorKind::WrongOutput)),
                (true, None),
                (true, None),
                (false, Some(ErrorKind::WrongOutput)),
                (false, Some(ErrorKind::WrongOutput)),
            ]
        );
        let sieve = &reports["sieve"];
        assert!(!sieve.passed);
        assert_eq!(sieve.error.as_deref(), Some("3 of 6 cases failed"));
        assert_eq!(sieve.cases[1].actual_output, json!([2, 3]));
        assert!(
            sieve.cases[5]
                .error
                .as_deref()
                .unwrap()
                .contains("RangeError")
        );
        // NaN is rendered as a string and equals nothing but NaN.
        assert_eq!(
            verdicts("half"),
            [(true, None), (false, Some(ErrorKind::WrongOutput))]
        );
        assert_eq!(verdicts("forever"), [(false, Some(ErrorKind::Timeout))]);
        assert_eq!(verdicts("later"), [(true, None)]);
        assert_eq!(verdicts("pair"), [(true, None)]);
        assert_eq!(verdicts("unique"), [(true, None)]);
        assert_eq!(verdicts("nothing"), [(true, None)]);
        assert!(reports["pair"].passed && reports["nothing"].passed);
        let missing = &reports["missing"];
        assert!(!missing.passed && missing.cases.is_empty());
        assert_eq!(missing.error_kind, Some(ErrorKind::Runtime));
    }

    #[test]
    fn the_static_analysis_counts_branches_jsdoc_and_risky_calls() {
        let spec = |name: &str| -> FunctionSpec {
            serde_json::from_value(json!({"name": name, "purpose": "p", "inputs": [],
                "outputs": {"type": "number", "description": "d"}, "dependencies": [],
                "complexity": "simple"}))
            .unwrap()
        };
        let module = "/** Documented. */\nfunction a(x) {\n  if (x > 0 && x < 9) return 1;\n  return 2;\n}\n\n\nconst b = (x) => eval(x);\n";
        let report = scan::scan(&DIALECT, module, &[spec("a"), spec("b")]);
        assert_eq!(report.complexity["a"], 3);
        assert_eq!(report.complexity["b"], 1);
        assert!((report.docstrings - 0.5).abs() < 1e-9);
        assert_eq!(report.dangerous_calls, ["eval"]);
        assert_eq!(report.unmeasured, ["coverage"]);
    }

    #[test]
    fn a_report_with_another_nonce_or_none_at_all_is_not_read() {
        if !node() {
            eprintln!("skipped: no node on this host");
            return;
        }
        // Code that stops the process before the test runs writes no report.
        let cases = [function("f", &[], vec![case("one", json!({}), json!(1))])];
        assert!(run("function f() { return 1; }\nprocess.exit(0);\n", &cases).is_none());
        assert!(run("function f() { return 1; }\n", &cases).unwrap()["f"].passed);
        assert!(read_reports(r#"{"nonce": "other", "functions": {}}"#, "n1").is_none());
    }

    /// The final run measures line coverage with V8's block coverage, in the real image: a
    /// branch never taken and a function never called are lines not covered; cases that reach
    /// every line cover all of them. TypeScript's counts its transpiled code, not the test.
    #[tokio::test]
    async fn the_final_run_measures_line_coverage_in_the_real_image() {
        use super::super::testing::{self, case, function};
        let module = "/** The sign of n. */\nfunction sign(n) {\n  if (n < 0) {\n    return -1;\n  }\n  return 1;\n}\n\n/** Twice x. */\nfunction twice(x) {\n  return x * 2;\n}\n";
        let sign = |cases| function("sign", &[("n", "number")], "number", cases);
        let twice = |cases| function("twice", &[("x", "number")], "number", cases);
        for language in [proto::Language::Javascript, proto::Language::Typescript] {
            let some = [sign(vec![case("pos", json!({"n": 5}), json!(1), None)])];
            let part = testing::coverage(language, module, &some).await;
            let all = [
                sign(vec![
                    case("pos", json!({"n": 5}), json!(1), None),
                    case("neg", json!({"n": -5}), json!(-1), None),
                ]),
                twice(vec![case("one", json!({"x": 1}), json!(2), None)]),
            ];
            let whole = testing::coverage(language, module, &all).await;
            assert!(part > 0.2 && part < 0.8, "{language:?}: {part}");
            assert_eq!(whole, 1.0, "{language:?}");
            // A run not asked to measure gives none.
            let (_, result) = testing::run(language, module, &all).await;
            let form = super::super::of(language).unwrap();
            assert_eq!(
                form.coverage_of(&result, ".codegen-cases-n1.json", "n1"),
                None
            );
        }
    }
}
