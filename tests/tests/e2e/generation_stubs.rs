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
    assert_eq!(
        result["implementations"]["has_close_elements"]
            .as_str()
            .unwrap()
            .trim(),
        RIGHT.trim()
    );
    // The final run assembled the request's import before the code (`List` resolves).
    assert_eq!(result["quality"]["tests_passed"], 2, "{result:#}");
    assert_eq!(result["all_tests_passed"], true, "{result:#}");
    // Two calls: the plain one and the repair; no plan, no tests.
    assert_eq!(result["metrics"]["model_calls"], 2, "{result:#}");
    let events = cluster.job_events(&id).await;
    assert!(!events.contains("replanning"), "{events}");
    cluster.cleanup().await;
}
