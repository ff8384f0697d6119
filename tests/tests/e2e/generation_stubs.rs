//! A request that writes its own function (HumanEval's shape: a signature, a docstring with
//! doctests), end to end: a scripted FAKE model over the real OpenAI-compatible API answers as
//! a weak model would (its first code wrong, in a plain fenced block; its repair not in the
//! JSON asked for), and the real cluster plans by the stub with no model call, tests against
//! the docstring's examples, and repairs from them, in the real Python sandbox image.

use std::time::Duration;

use serde_json::{Value, json};
use tests::Cluster;

/// Work of seconds, ten times slower on a slow machine: only a failure waits it out.
const JOB_DEADLINE: Duration = Duration::from_secs(600);

/// HumanEval/0's prompt, as its data has it.
const PROMPT: &str = "from typing import List\n\n\ndef has_close_elements(numbers: List[float], threshold: float) -> bool:\n    \"\"\" Check if in given list of numbers, are any two numbers closer to each other than\n    given threshold.\n    >>> has_close_elements([1.0, 2.0, 3.0], 0.5)\n    False\n    >>> has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)\n    True\n    \"\"\"\n";

const WRONG: &str =
    "def has_close_elements(numbers: List[float], threshold: float) -> bool:\n    return False\n";
const RIGHT: &str = "def has_close_elements(numbers: List[float], threshold: float) -> bool:\n    \"\"\"Whether two numbers are closer than threshold.\"\"\"\n    ordered = sorted(numbers)\n    return any(b - a < threshold for a, b in zip(ordered, ordered[1:]))\n";

#[tokio::test]
async fn a_stub_is_the_plan_its_doctests_the_tests_and_a_repair_fixes_what_they_catch() {
    let dir = tempfile::tempdir().unwrap();
    // Only implement and repair answers: a plan or tests call would find no answer and fail
    // the job. The first is asked as a plain call (the prompt itself, no schema); the repair's
    // JSON is missing, its fenced block is what the worker takes.
    let script = json!({"answers": [
        {"phase": "implement", "function": "has_close_elements", "prompt_contains": "def has_close_elements(numbers: List[float]",
         "text": format!("Here it is:\n```python\n{WRONG}```\n")},
        {"phase": "repair", "function": "has_close_elements", "prompt_contains": "given_2",
         "text": format!("The code never compares the numbers.\n```python\n{RIGHT}```")}
    ]});
    let path = dir.path().join("stub-model.json");
    std::fs::write(&path, script.to_string()).unwrap();
    let mut cluster = Cluster::new();
    let _model = cluster.scripted_model(&path).await;
    let _coordinator = cluster.coordinator().await;
    let _worker = cluster.worker("worker-1").await;
    let (status, body) = cluster
        .submit_job(json!({"instruction": PROMPT, "language": "python", "max_iterations": 3}))
        .await;
    assert_eq!(status, 202, "{body}");
    let id = body["job_id"].as_str().unwrap().to_owned();
    let result = cluster.wait_job(&id, JOB_DEADLINE).await;

    assert_eq!(result["status"], "succeeded", "{result:#}");
    assert_eq!(result["plan_source"], "request", "{result:#}");
    let spec = &result["function_specs"][0];
    assert_eq!(spec["name"], "has_close_elements");
    assert_eq!(
        spec["inputs"],
        json!([{"name": "numbers", "type": "List[float]"}, {"name": "threshold", "type": "float"}])
    );
    // The docstring's two examples are the tests, marked given; nothing was generated.
    let tests = result["tests"]["has_close_elements"].as_array().unwrap();
    let given: Vec<(&Value, &Value)> = tests
        .iter()
        .map(|t| (&t["given"], &t["expected_output"]))
        .collect();
    assert_eq!(
        given,
        [(&json!(true), &json!(false)), (&json!(true), &json!(true))],
        "{result:#}"
    );
    // The first answer failed the second example; the repair fixed it.
    let history = result["improvement_history"].as_array().unwrap();
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0]["error_kind"], "wrong_output", "{history:?}");
    assert_eq!(kept(&result), RIGHT.trim());
    // The final run assembled the request's import before the code (`List` resolves).
    assert_eq!(result["quality"]["tests_passed"], 2, "{result:#}");
    assert_eq!(result["all_tests_passed"], true, "{result:#}");
    // Two calls: the plain one and the repair; no plan, no tests.
    assert_eq!(result["metrics"]["model_calls"], 2, "{result:#}");
    let events = cluster.job_events(&id).await;
    assert!(!events.contains("replanning"), "{events}");
    cluster.cleanup().await;
}

/// The code the job kept for `has_close_elements`.
fn kept(result: &Value) -> &str {
    result["implementations"]["has_close_elements"]
        .as_str()
        .unwrap_or_default()
        .trim()
}

/// Code that passes neither example (`None` is not a bool).
const WORSE: &str =
    "def has_close_elements(numbers: List[float], threshold: float) -> bool:\n    return None\n";

/// Writes `script` to a file in `dir` and starts a cluster on it: a coordinator and a worker.
async fn cluster_on(dir: &tempfile::TempDir, script: Value) -> (Cluster, Vec<tests::Process>) {
    let path = dir.path().join("stub-model.json");
    std::fs::write(&path, script.to_string()).unwrap();
    let mut cluster = Cluster::new();
    let model = cluster.scripted_model(&path).await;
    let coordinator = cluster.coordinator().await;
    let (worker, _) = cluster.worker("worker-1").await;
    (cluster, vec![model, coordinator, worker])
}

async fn run(cluster: &Cluster, job: Value) -> Value {
    let (status, body) = cluster.submit_job(job).await;
    assert_eq!(status, 202, "{body}");
    let id = body["job_id"].as_str().unwrap().to_owned();
    cluster.wait_job(&id, JOB_DEADLINE).await
}

#[tokio::test]
async fn a_function_ends_with_its_best_attempt_and_a_spent_budget_stops_its_repairs() {
    let dir = tempfile::tempdir().unwrap();
    // First WRONG (passes the first example), then WORSE (passes none), on every job.
    let script = json!({"answers": [
        {"phase": "implement", "function": "has_close_elements", "text": format!("```python\n{WRONG}```")},
        {"phase": "repair", "function": "has_close_elements", "text": format!("```python\n{WORSE}```")}
    ]});
    let (cluster, _children) = cluster_on(&dir, script).await;

    // Two attempts, no budget to speak of: the repair made it worse, so the function ends
    // with the first attempt, its code and its verdicts.
    let result = run(
        &cluster,
        json!({"instruction": PROMPT, "language": "python", "max_iterations": 2}),
    )
    .await;
    assert_eq!(result["status"], "failed", "{result:#}");
    assert_eq!(kept(&result), WRONG.trim(), "{result:#}");
    assert_eq!(result["metrics"]["model_calls"], 2, "{result:#}");
    assert_eq!(
        result["passed_given"],
        json!({"passed": 1, "total": 2, "tokens": {"prompt": 0, "completion": 0}}),
        "{result:#}"
    );
    assert_eq!(result["passed_generated"]["total"], 0, "{result:#}");
    assert!(result.get("stopped_by").is_none(), "{result:#}");

    // Three attempts allowed, but the repair passed fewer cases than the first attempt: a
    // second repair would be asked with the same evidence, so none is (`repair_patience`).
    let result = run(
        &cluster,
        json!({"instruction": PROMPT, "language": "python", "max_iterations": 3}),
    )
    .await;
    assert_eq!(result["status"], "failed", "{result:#}");
    assert_eq!(result["stopped_by"], "no_progress", "{result:#}");
    assert_eq!(result["metrics"]["model_calls"], 2, "{result:#}");
    assert_eq!(kept(&result), WRONG.trim(), "{result:#}");
    let failure = result["failure"].as_str().unwrap();
    assert!(failure.contains("repair_patience 1"), "{failure}");

    // A budget the first call spends: no repair is asked, the job ends stopped by the budget
    // with the code it had, and says what was spent. (A new instruction: no cache answers.)
    let result = run(
        &cluster,
        json!({"instruction": format!("{PROMPT}\n"), "language": "python", "max_iterations": 3,
               "max_tokens_total": 1}),
    )
    .await;
    assert_eq!(result["status"], "failed", "{result:#}");
    assert_eq!(result["stopped_by"], "budget", "{result:#}");
    assert_eq!(result["metrics"]["model_calls"], 1, "{result:#}");
    let failure = result["failure"].as_str().unwrap();
    assert!(
        failure.contains("token budget is spent") && failure.contains("max_tokens_total 1"),
        "{failure}"
    );
    assert_eq!(kept(&result), WRONG.trim());
    assert_eq!(result["passed_given"]["passed"], 1, "{result:#}");
    cluster.cleanup().await;
}

#[tokio::test]
async fn candidates_are_judged_by_the_given_and_generated_cases_and_the_best_one_kept() {
    let dir = tempfile::tempdir().unwrap();
    let case = |name: &str, numbers: Value, threshold: f64, expected: bool| {
        json!({"name": name, "kind": "normal", "inputs": {"numbers": numbers, "threshold": threshold},
               "expected_output": expected, "expected_error": null})
    };
    // Generated cases: one agrees with the request's first example's inputs but not its
    // answer (it is dropped and listed), one is new.
    // A third is wrong (1 and 5 are not within 0.1): no candidate that passes both examples
    // passes it, so it is left out too rather than repaired against.
    let cases = json!({"cases": [
        case("contradicts", json!([1.0, 2.0, 3.0]), 0.5, true),
        case("close_pair", json!([1.0, 1.05]), 0.1, true),
        case("wrong_far", json!([1.0, 5.0]), 0.1, true),
    ]});
    // Three candidates, asked in one call: the right one is the second.
    let script = json!({"answers": [
        {"phase": "tests", "function": "has_close_elements", "answer": cases},
        {"phase": "implement", "function": "has_close_elements", "text": format!("```python\n{WRONG}```")},
        {"phase": "implement", "function": "has_close_elements", "text": format!("```python\n{RIGHT}```")},
        {"phase": "implement", "function": "has_close_elements", "text": format!("```python\n{WORSE}```")}
    ]});
    let (cluster, _children) = cluster_on(&dir, script).await;
    let result = run(
        &cluster,
        json!({"instruction": PROMPT, "language": "python", "candidates": 3}),
    )
    .await;
    assert_eq!(result["status"], "succeeded", "{result:#}");
    assert_eq!(kept(&result), RIGHT.trim());
    // The tests' call and one call for the three candidates (the FAKE server samples `n`
    // answers as OpenAI's does); no repair was needed.
    assert_eq!(result["metrics"]["model_calls"], 2, "{result:#}");
    assert!(result["improvement_history"].as_array().unwrap().is_empty());
    let dropped: Vec<&str> = result["contradicted_tests"]["has_close_elements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(dropped, ["contradicts", "wrong_far"], "{result:#}");
    assert_eq!(
        (
            &result["passed_given"]["passed"],
            &result["passed_given"]["total"]
        ),
        (&json!(2), &json!(2)),
        "{result:#}"
    );
    let generated = &result["passed_generated"];
    assert_eq!(
        (&generated["passed"], &generated["total"]),
        (&json!(1), &json!(1)),
        "{result:#}"
    );
    assert!(
        generated["tokens"]["completion"].as_u64().unwrap() > 0,
        "writing the generated cases cost tokens: {result:#}"
    );
    cluster.cleanup().await;
}

/// MultiPL-E's JavaScript HumanEval/0: comments, then a signature that stops at its brace.
const JS_PROMPT: &str = "//Check if in given list of numbers, are any two numbers closer to each other than\n// given threshold.\n// >>> has_close_elements([1.0, 2.0, 3.0], 0.5)\n// false\n// >>> has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)\n// true\nfunction has_close_elements(numbers, threshold){\n";
const JS_RIGHT: &str = "function has_close_elements(numbers, threshold) {\n  const s = [...numbers].sort((a, b) => a - b);\n  return s.some((x, i) => i > 0 && x - s[i - 1] < threshold);\n}\n";

/// A Go stub whose import the code needs: the preamble brings it.
const GO_PROMPT: &str = "package main\n\nimport (\n    \"strings\"\n)\n\n// Shout returns s in capitals, with a bang.\n// >>> Shout(\"hi\")\n// \"HI!\"\nfunc Shout(s string) string {\n";
const GO_RIGHT: &str = "func Shout(s string) string {\n\treturn strings.ToUpper(s) + \"!\"\n}\n";

#[tokio::test]
async fn javascript_and_go_stubs_are_their_own_plan_with_their_comments_examples_as_tests() {
    let dir = tempfile::tempdir().unwrap();
    let script = json!({"answers": [
        {"phase": "implement", "function": "has_close_elements", "text": format!("```javascript\n{JS_RIGHT}```")},
        {"phase": "implement", "function": "Shout", "text": format!("```go\n{GO_RIGHT}```")}
    ]});
    let (cluster, _children) = cluster_on(&dir, script).await;
    for (language, prompt, function, given) in [
        ("javascript", JS_PROMPT, "has_close_elements", 2),
        ("go", GO_PROMPT, "Shout", 1),
    ] {
        let result = run(
            &cluster,
            json!({"instruction": prompt, "language": language}),
        )
        .await;
        assert_eq!(result["status"], "succeeded", "{language}: {result:#}");
        assert_eq!(result["plan_source"], "request", "{result:#}");
        assert_eq!(result["function_specs"][0]["name"], function);
        // The comment's examples were the tests, each passed; one plain call, no plan.
        assert_eq!(
            result["passed_given"]["passed"], given,
            "{language}: {result:#}"
        );
        assert_eq!(result["passed_given"]["total"], given, "{result:#}");
        assert_eq!(result["passed_generated"]["total"], 0, "{result:#}");
        assert_eq!(result["metrics"]["model_calls"], 1, "{result:#}");
    }
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_model_that_cannot_write_more_cases_leaves_the_given_ones_to_judge_the_candidates() {
    let dir = tempfile::tempdir().unwrap();
    // The tests' call is refused (a 400 is never retried): the examples judge alone.
    let script = json!({"answers": [
        {"phase": "tests", "function": "has_close_elements", "status": 400},
        {"phase": "implement", "function": "has_close_elements", "text": format!("```python\n{WORSE}```")},
        {"phase": "implement", "function": "has_close_elements", "text": format!("```python\n{RIGHT}```")}
    ]});
    let (cluster, _children) = cluster_on(&dir, script).await;
    let result = run(
        &cluster,
        json!({"instruction": PROMPT, "language": "python", "candidates": 2}),
    )
    .await;
    assert_eq!(result["status"], "succeeded", "{result:#}");
    assert_eq!(kept(&result), RIGHT.trim());
    assert_eq!(result["passed_given"]["passed"], 2, "{result:#}");
    assert_eq!(result["passed_generated"]["total"], 0, "{result:#}");
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_repair_that_passes_every_given_case_leaves_out_the_generated_ones_it_alone_disagrees_with()
 {
    let dir = tempfile::tempdir().unwrap();
    // Neither candidate passes the examples, so the wrong generated case cannot be judged
    // yet; the repair passes both examples and fails only it: it is left out, not repaired
    // against, and the job ends there.
    let wrong = json!({"cases": [{"name": "wrong_far", "kind": "normal",
        "inputs": {"numbers": [1.0, 5.0], "threshold": 0.1}, "expected_output": true,
        "expected_error": null}]});
    let script = json!({"answers": [
        {"phase": "tests", "function": "has_close_elements", "answer": wrong},
        {"phase": "implement", "function": "has_close_elements", "text": format!("```python\n{WRONG}```")},
        {"phase": "implement", "function": "has_close_elements", "text": format!("```python\n{WORSE}```")},
        {"phase": "repair", "function": "has_close_elements", "text": format!("```python\n{RIGHT}```")}
    ]});
    let (cluster, _children) = cluster_on(&dir, script).await;
    let result = run(
        &cluster,
        json!({"instruction": PROMPT, "language": "python", "candidates": 2, "max_iterations": 3}),
    )
    .await;
    assert_eq!(result["status"], "succeeded", "{result:#}");
    assert_eq!(kept(&result), RIGHT.trim());
    assert_eq!(
        result["contradicted_tests"]["has_close_elements"][0]["name"], "wrong_far",
        "{result:#}"
    );
    // The tests' call, the candidates' call, one repair: no second repair.
    assert_eq!(result["metrics"]["model_calls"], 3, "{result:#}");
    cluster.cleanup().await;
}
