//! The `debug` and `refactor` modes, end to end: a scripted FAKE model (over the real
//! OpenAI-compatible API) answers, and the real cluster runs the model's cases on the given
//! code first (a debug job's must reproduce the error there; a refactor's must describe what
//! the code does), then on the changed code, in the language's real sandbox image.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::time::Duration;

use serde_json::{Value, json};
use tests::{Cluster, codegen_cli};

/// Work of seconds, ten times slower on a slow machine: only a failure waits it out.
const JOB_DEADLINE: Duration = Duration::from_secs(600);

const MEDIAN: &str = "def median(xs):\n    \"\"\"The median of xs.\"\"\"\n    s = sorted(xs)\n    return s[len(s) // 2]\n";
const MEDIAN_FIXED: &str = "def median(xs):\n    \"\"\"The median of xs.\"\"\"\n    s = sorted(xs)\n    mid = len(s) // 2\n    if len(s) % 2 == 0:\n        return (s[mid - 1] + s[mid]) / 2\n    return s[mid]\n";

fn case(name: &str, xs: Value, expected: Value) -> Value {
    json!({"name": name, "kind": "normal", "inputs": {"xs": xs}, "expected_output": expected,
           "expected_error": null})
}

fn median_plan() -> Value {
    json!({"functions": [{"name": "median", "purpose": "The median of xs: the middle value, or the mean of the two middle values for an even count.",
        "inputs": [{"name": "xs", "type": "list[float]"}],
        "outputs": {"type": "float", "description": "the median"},
        "dependencies": [], "complexity": "simple"}]})
}

/// A debug job's script: `cases` for the tests phase.
fn debug_script(dir: &std::path::Path, cases: Value) -> std::path::PathBuf {
    let script = json!({"answers": [
        {"phase": "plan", "prompt_contains": "through which the reported error shows", "answer": median_plan()},
        {"phase": "tests", "function": "median", "prompt_contains": "reproduce a reported error", "answer": {"cases": cases}},
        {"phase": "implement", "function": "median", "prompt_contains": "Fix the cause of a reported error",
         "answer": {"code": MEDIAN_FIXED, "analysis": {"error_kind": "wrong_output",
            "root_cause": "an even count has two middle values and the code returns the upper one",
            "changes": "return the mean of the two middle values for an even count"}}}
    ]});
    let path = dir.join("debug-model.json");
    std::fs::write(&path, script.to_string()).unwrap();
    path
}

/// The debug job of `MEDIAN`.
fn debug_job() -> Value {
    json!({
        "instruction": "median of a list of numbers",
        "mode": "debug",
        "code": MEDIAN,
        "error": "median([1, 2, 3, 4]) returned 3, expected 2.5",
    })
}

async fn run_job(script: &std::path::Path, job: Value) -> Value {
    let mut cluster = Cluster::new();
    let _model = cluster.scripted_model(script).await;
    let _coordinator = cluster.coordinator().await;
    let _worker = cluster.worker("worker-1").await;
    let (status, body) = cluster.submit_job(job).await;
    assert_eq!(status, 202, "{body}");
    let id = body["job_id"].as_str().unwrap().to_owned();
    cluster.wait_job(&id, JOB_DEADLINE).await
}

/// Job `job` on a cluster whose scripted FAKE model answers from `script`.
async fn refactor_job(script: &Value, job: Value) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("refactor-model.json");
    std::fs::write(&path, script.to_string()).unwrap();
    run_job(&path, job).await
}

#[tokio::test]
async fn a_debug_job_reproduces_the_error_then_fixes_it() {
    let dir = tempfile::tempdir().unwrap();
    let script = debug_script(
        dir.path(),
        json!([
            case("odd", json!([3, 1, 2]), json!(2)),
            case("even", json!([4, 1, 3, 2]), json!(2.5)),
            case("single", json!([5]), json!(5))
        ]),
    );
    let result = run_job(&script, debug_job()).await;
    assert_eq!(result["status"], "succeeded", "{result:#}");
    assert_eq!(result["all_tests_passed"], true, "{result:#}");
    let change = &result["change"];
    assert_eq!(change["mode"], "debug", "{result:#}");
    assert_eq!(change["function"], "median");
    // Only the case the given code failed reproduces the error; it passes now.
    assert_eq!(change["reproducing_tests"], json!(["even"]), "{result:#}");
    let even = result["test_results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["test"] == "even")
        .unwrap();
    assert_eq!(even["passed"], true);
    assert!(
        change["root_cause"]
            .as_str()
            .unwrap()
            .contains("two middle values"),
        "{result:#}"
    );
    let diff = change["diff"].as_str().unwrap();
    assert!(
        diff.contains("--- given")
            && diff.contains("-    return s[len(s) // 2]")
            && diff.contains("+        return (s[mid - 1] + s[mid]) / 2"),
        "{diff}"
    );
    assert_eq!(
        result["implementations"]["median"].as_str().unwrap().trim(),
        MEDIAN_FIXED.trim()
    );
    // The documentation's example is a case that ran.
    assert!(
        result["documentation"]
            .as_str()
            .unwrap()
            .contains("run in the sandbox: passed"),
        "{result:#}"
    );
}

#[tokio::test]
async fn a_debug_job_whose_cases_never_reproduce_the_error_fails_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    // Every case passes on the given code, both times the model is asked.
    let script = debug_script(
        dir.path(),
        json!([
            case("odd", json!([3, 1, 2]), json!(2)),
            case("single", json!([5]), json!(5))
        ]),
    );
    let result = run_job(&script, debug_job()).await;
    assert_eq!(result["status"], "failed", "{result:#}");
    assert!(
        result["failure"]
            .as_str()
            .unwrap()
            .contains("the error was not reproduced"),
        "{result:#}"
    );
    // The plan, then the tests twice; no code was written.
    assert_eq!(result["metrics"]["model_calls"], 3, "{result:#}");
}

/// A refactor in JavaScript: the characterisation cases run on the given code first (one that
/// does not describe it is left out), the refactored code passes the rest, and the result
/// holds the quality before and after.
#[tokio::test]
async fn a_refactor_job_keeps_behaviour_and_reports_quality_before_and_after() {
    let given = "function total(items) {\n  var t = 0;\n  for (var i = 0; i < items.length; i++) {\n    t = t + items[i].price * items[i].qty;\n  }\n  return t;\n}\n";
    let refactored = "/**\n * The total price of the items.\n */\nfunction total(items) {\n  return items.reduce((sum, item) => sum + item.price * item.qty, 0);\n}\n";
    let items = |list: Value| json!({"items": list});
    let case = |name: &str, inputs: Value, expected: Value| {
        json!({"name": name, "kind": "normal", "inputs": inputs, "expected_output": expected,
               "expected_error": null})
    };
    let script = json!({"answers": [
        {"phase": "plan", "prompt_contains": "Refactoring goals: readability", "answer": {"functions": [
            {"name": "total", "purpose": "The sum of price * qty over the items; 0 for none.",
             "inputs": [{"name": "items", "type": "{price: number, qty: number}[]"}],
             "outputs": {"type": "number", "description": "the total"},
             "dependencies": [], "complexity": "simple"}]}},
        {"phase": "tests", "function": "total", "prompt_contains": "characterisation", "answer": {"cases": [
            case("two", items(json!([{"price": 2, "qty": 2}, {"price": 3, "qty": 1}])), json!(7)),
            case("none", items(json!([])), json!(0)),
            case("not what it does", items(json!([])), json!(1))]}},
        {"phase": "implement", "function": "total", "prompt_contains": "Refactor code toward its goals",
         "answer": {"code": refactored, "analysis": {"error_kind": "none",
            "root_cause": "an index loop and a mutable accumulator hide a sum",
            "changes": "readability: a reduce over the items, and a JSDoc comment"}}}
    ]});
    let result = refactor_job(
        &script,
        json!({
            "instruction": "the total of a shopping cart",
            "language": "javascript",
            "mode": "refactor",
            "code": given,
            "goals": ["readability"],
        }),
    )
    .await;
    assert_eq!(result["status"], "succeeded", "{result:#}");
    let change = &result["change"];
    assert_eq!(change["mode"], "refactor", "{result:#}");
    assert_eq!(change["goals"], json!(["readability"]));
    assert_eq!(
        change["dropped_tests"],
        json!(["not what it does"]),
        "{result:#}"
    );
    assert!(
        change["changes"]
            .as_str()
            .unwrap()
            .starts_with("readability:")
    );
    // The kept cases pass on the refactored code; the dropped one is not among the tests.
    let tests: Vec<&str> = result["tests"]["total"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(tests, ["two", "none"], "{result:#}");
    assert_eq!(result["quality"]["tests_passed"], 2, "{result:#}");
    // Quality by the same measures before and after: the refactor documented the function.
    let before = &change["quality_before"];
    assert_eq!(before["docstrings"], 0.0, "{result:#}");
    assert_eq!(result["quality"]["docstrings"], 1.0, "{result:#}");
    assert!(
        before["score"].as_f64().unwrap() < result["quality"]["score"].as_f64().unwrap(),
        "{result:#}"
    );
    assert!(
        change["diff"]
            .as_str()
            .unwrap()
            .contains("+  return items.reduce(")
    );
}

/// A `count_words` refactor toward `lint` in `language` (`types`: its input's and output's
/// type names): the scripted plan, two characterisation cases and the `refactored` code, run
/// on `given`; the job's result.
async fn lint_refactor(
    language: &str,
    types: (&str, &str),
    given: &str,
    refactored: &str,
    changes: &str,
) -> Value {
    let case = |name: &str, text: &str, expected: u64| {
        json!({"name": name, "kind": "normal", "inputs": {"text": text},
               "expected_output": expected, "expected_error": null})
    };
    let script = json!({"answers": [
        {"phase": "plan", "prompt_contains": "Refactoring goals: lint", "answer": {"functions": [
            {"name": "count_words", "purpose": "How many words its argument has.",
             "inputs": [{"name": "text", "type": types.0}],
             "outputs": {"type": types.1, "description": "the word count"},
             "dependencies": [], "complexity": "simple"}]}},
        {"phase": "tests", "function": "count_words", "prompt_contains": "characterisation", "answer": {"cases": [
            case("three", "a b  c", 3), case("none", "", 0)]}},
        {"phase": "implement", "function": "count_words", "prompt_contains": "Refactor code toward its goals",
         "answer": {"code": refactored, "analysis": {"error_kind": "none",
            "root_cause": "what the linter found", "changes": changes}}}
    ]});
    refactor_job(
        &script,
        json!({
            "instruction": "count the words of a text",
            "language": language,
            "mode": "refactor",
            "code": given,
            "goals": ["lint"],
        }),
    )
    .await
}

/// A refactor in Bash toward what its linter says: `shellcheck` finds the unquoted expansion in
/// the given code (the quality before), and nothing in the refactored code.
#[tokio::test]
async fn a_bash_refactor_reports_the_linters_findings_before_and_after() {
    let given = "count_words() {\n  echo $1 | wc -w\n}\n";
    let refactored = "# Prints how many words $1 has.\ncount_words() {\n  local words\n  read -ra words <<< \"$1\"\n  echo \"${#words[@]}\"\n}\n";
    let result = lint_refactor(
        "bash",
        ("string", "integer"),
        given,
        refactored,
        "lint: the argument split by read into an array, every expansion quoted",
    )
    .await;
    assert_eq!(result["status"], "succeeded", "{result:#}");
    let before = &result["change"]["quality_before"];
    let findings: Vec<&str> = before["warnings"]
        .as_array()
        .unwrap_or_else(|| panic!("findings before: {result:#}"))
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert!(
        findings
            .iter()
            .any(|w| w.starts_with("line 2: ") && w.contains("[SC2086]")),
        "{findings:?}"
    );
    let after = &result["quality"];
    assert_eq!(after["tests_passed"], 2, "{result:#}");
    assert!(after.get("warnings").is_none(), "{after}");
    assert_eq!(after["unmeasured"], json!(["coverage"]), "{after}");
    assert_eq!(after["coverage"], Value::Null, "{after}");
}

/// A refactor in Python toward PEP 8: pycodestyle and pyflakes, run in the sandbox's final
/// runs, find an unused import and a missing space in the given code (the quality before) and
/// nothing in the refactored code.
#[tokio::test]
async fn a_python_refactor_reports_pep8_and_pyflakes_findings_before_and_after() {
    let given = "import os\ndef count_words(text):\n    return len(text.split( ))\n";
    let refactored = "def count_words(text):\n    \"\"\"How many words text has.\"\"\"\n    return len(text.split())\n";
    let result = lint_refactor(
        "python",
        ("str", "int"),
        given,
        refactored,
        "lint: the import dropped, two blank lines, no space inside the call",
    )
    .await;
    assert_eq!(result["status"], "succeeded", "{result:#}");
    let before = &result["change"]["quality_before"];
    let findings: Vec<&str> = before["warnings"]
        .as_array()
        .unwrap_or_else(|| panic!("findings before: {result:#}"))
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert_eq!(
        findings,
        [
            "line 1: 'os' imported but unused",
            "line 2: E302 expected 2 blank lines, found 0",
            "line 3: E201 whitespace after '('",
        ],
        "{result:#}"
    );
    let after = &result["quality"];
    assert_eq!(after["tests_passed"], 2, "{result:#}");
    assert!(after.get("warnings").is_none(), "{after}");
    assert!(after.get("unmeasured").is_none(), "{after}");
}

/// `codegen debug FILE --error-file E --wait`: the language from the file's extension, the
/// change in the markdown report.
#[tokio::test]
async fn the_cli_debugs_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let script = debug_script(
        dir.path(),
        json!([
            case("even", json!([4, 1, 3, 2]), json!(2.5)),
            case("single", json!([5]), json!(5))
        ]),
    );
    let file = dir.path().join("stats.py");
    std::fs::write(&file, MEDIAN).unwrap();
    let error = dir.path().join("error.txt");
    std::fs::write(&error, "median([1, 2, 3, 4]) returned 3, expected 2.5\n").unwrap();
    let mut cluster = Cluster::new();
    let _model = cluster.scripted_model(&script).await;
    let _coordinator = cluster.coordinator().await;
    let _worker = cluster.worker("worker-1").await;
    let url = cluster.url();
    let run = codegen_cli(
        &[
            "debug",
            file.to_str().unwrap(),
            "--error-file",
            error.to_str().unwrap(),
            "--wait",
            "--url",
            &url,
        ],
        JOB_DEADLINE,
    )
    .await;
    assert_eq!(run.code, Some(0), "{run}");
    assert!(
        run.stdout.contains("## The change (debug: `median`)"),
        "{run}"
    );
    assert!(
        run.stdout
            .contains("Reproduced by (failed on the given code, pass now): even"),
        "{run}"
    );
    assert!(run.stdout.contains("```diff\n--- given"), "{run}");
    // Without the error, the command refuses before sending anything.
    let run = codegen_cli(
        &["debug", file.to_str().unwrap(), "--url", &url],
        JOB_DEADLINE,
    )
    .await;
    assert_ne!(run.code, Some(0), "{run}");
    assert!(run.stderr.contains("--error-file"), "{run}");
}
