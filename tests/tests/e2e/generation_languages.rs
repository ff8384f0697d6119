//! Generation in languages other than Python (JavaScript, TypeScript), end to end: the scripted FAKE model (over the
//! real OpenAI-compatible API) answers in the language, the real cluster plans, tests in the
//! language's test form in its real sandbox image, repairs from the verdicts, integrates and
//! scores the module.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::time::Duration;

use serde_json::{Value, json};
use tests::Cluster;

/// Work of seconds, ten times slower on a slow machine: only a failure waits it out.
const JOB_DEADLINE: Duration = Duration::from_secs(600);

/// The sieve job in JavaScript or TypeScript (`language`): `sum_primes` is wrong at first (it
/// leaves out n itself), and its repair fixes it. Answers are picked by the prompt's language.
fn script(dir: &std::path::Path, language: &str) -> std::path::PathBuf {
    let js = format!("senior {language} engineer");
    let typed = language == "typescript";
    let plan = json!({"functions": [
        {"name": "sieve", "purpose": "Return the sorted array of all primes <= n; [] for n < 2; throw RangeError for negative n.",
         "inputs": [{"name": "n", "type": "number"}],
         "outputs": {"type": "number[]", "description": "the primes up to and including n"},
         "dependencies": [], "complexity": "simple"},
        {"name": "sum_primes", "purpose": "Return the sum of all primes <= n, using sieve; 0 for n < 2; throw RangeError for negative n.",
         "inputs": [{"name": "n", "type": "number"}],
         "outputs": {"type": "number", "description": "the sum"},
         "dependencies": ["sieve"], "complexity": "simple"}]});
    let case = |name: &str, n: i64, expected: Value| {
        json!({"name": name, "kind": "normal", "inputs": {"n": n},
               "expected_output": expected, "expected_error": null})
    };
    let negative = json!({"name": "negative", "kind": "error", "inputs": {"n": -1},
                          "expected_output": null, "expected_error": "RangeError"});
    let (param, primes, sum) = if typed {
        ("n: number", ": number[]", ": number")
    } else {
        ("n", "", "")
    };
    let list = if typed { ": number[]" } else { "" };
    let sieve = format!(
        "/**\n * The primes up to n.\n */\nfunction sieve({param}){primes} {{\n  if (n < 0) throw new RangeError('n must be non-negative');\n  const primes{list} = [];\n  for (let i = 2; i <= n; i++) {{\n    if (primes.every((p) => i % p !== 0)) primes.push(i);\n  }}\n  return primes;\n}}\n"
    );
    let wrong = format!(
        "/** The sum of the primes up to n. */\nfunction sum_primes({param}){sum} {{\n  return sieve(n - 1).reduce((a, b) => a + b, 0);\n}}\n"
    );
    let fixed = format!(
        "/** The sum of the primes up to n. */\nfunction sum_primes({param}){sum} {{\n  if (n < 0) throw new RangeError('n must be non-negative');\n  return sieve(n).reduce((a, b) => a + b, 0);\n}}\n"
    );
    let script = json!({"answers": [
        {"phase": "plan", "prompt_contains": format!("Language: {language}"), "answer": plan},
        {"phase": "tests", "function": "sieve", "prompt_contains": &js, "answer": {"cases": [
            case("ten", 10, json!([2, 3, 5, 7])), case("one", 1, json!([])), negative.clone()]}},
        {"phase": "tests", "function": "sum_primes", "prompt_contains": &js, "answer": {"cases": [
            case("ten", 10, json!(17)), case("seven", 7, json!(17)), case("zero", 0, json!(0)),
            negative]}},
        {"phase": "implement", "function": "sieve", "prompt_contains": &js,
         "answer": {"code": sieve, "analysis": null}},
        {"phase": "implement", "function": "sum_primes", "prompt_contains": &js,
         "answer": {"code": wrong, "analysis": null}},
        {"phase": "repair", "function": "sum_primes", "prompt_contains": &js,
         "answer": {"code": fixed, "analysis": {"error_kind": "wrong_output",
            "root_cause": "sieve was called with n - 1", "changes": "call sieve(n); throw for negative n"}}}
    ]});
    let path = dir.join(format!("{language}-model.json"));
    std::fs::write(&path, script.to_string()).unwrap();
    path
}

#[tokio::test]
async fn a_javascript_request_becomes_tested_javascript_with_a_repair() {
    a_request_becomes_tested_code_with_a_repair_in("javascript").await;
}

#[tokio::test]
async fn a_typescript_request_becomes_tested_typescript_with_a_repair() {
    a_request_becomes_tested_code_with_a_repair_in("typescript").await;
}

async fn a_request_becomes_tested_code_with_a_repair_in(language: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::new();
    let _model = cluster.scripted_model(&script(dir.path(), language)).await;
    let _coordinator = cluster.coordinator().await;
    let _worker = cluster.worker("worker-1").await;

    let (status, body) = cluster
        .submit_job(json!({
            "instruction": "Find all primes up to n, and sum them.",
            "language": language,
            "max_iterations": 3
        }))
        .await;
    assert_eq!(status, 202, "{body}");
    let id = body["job_id"].as_str().unwrap().to_owned();
    let result = cluster.wait_job(&id, JOB_DEADLINE).await;

    assert_eq!(result["status"], "succeeded", "{result:#}");
    assert_eq!(result["language"], language, "{result:#}");
    assert_eq!(
        result["language_reason"], "named in the request's `language`",
        "{result:#}"
    );
    assert_eq!(result["all_tests_passed"], true, "{result:#}");
    assert_eq!(result["validation"], "tested", "{result:#}");
    // The first sum_primes left out n itself (7 for n = 7): a wrong output, in the repair's
    // evidence, then fixed.
    let history = result["improvement_history"].as_array().unwrap();
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0]["function"], "sum_primes");
    assert_eq!(history[0]["error_kind"], "wrong_output", "{history:?}");
    assert!(
        result["implementations"]["sum_primes"]
            .as_str()
            .unwrap()
            .contains("sieve(n)"),
        "{result:#}"
    );
    // Every case again against the assembled module; the JavaScript analysis scores it.
    let quality = &result["quality"];
    assert_eq!(quality["tests_total"], 7, "{quality}");
    assert_eq!(quality["tests_passed"], 7, "{quality}");
    assert_eq!(quality["docstrings"], 1.0, "{quality}");
    assert_eq!(quality["unmeasured"], json!(["coverage"]), "{quality}");
    assert!(quality["score"].as_f64().unwrap() > 0.9, "{quality}");
    assert!(
        result["implementations"]["sieve"]
            .as_str()
            .unwrap()
            .contains("function sieve("),
        "{result:#}"
    );
}
