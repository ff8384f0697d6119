#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::time::Duration;

use proto::job::JobResult;
use serde_json::{Value, json};

use super::*;

fn spec(name: &str, deps: &[&str]) -> Value {
    json!({"name": name, "purpose": format!("the {name} function"),
           "inputs": [{"name": "n", "type": "int"}],
           "outputs": {"type": "int", "description": "d"},
           "dependencies": deps, "complexity": "simple"})
}

fn test(function: &str, name: &str, passed: bool) -> Value {
    let mut t = json!({"function": function, "test": name, "passed": passed,
                       "actual_output": 1, "duration_ms": 0.1});
    if !passed {
        t["error"] = json!("WrongOutput: expected 2, got 1\nmore detail");
        t["error_kind"] = json!("wrong_output");
    }
    t
}

fn result(status: &str) -> JobResult {
    serde_json::from_value(json!({
        "job_id": "0192f5a0-0000-7000-8000-000000000001",
        "status": status,
        "instruction": "Sum the primes up to n.",
        "language": "python",
        "function_specs": [spec("sieve", &[]), spec("sum_primes", &["sieve"])],
        "implementations": {
            "sieve": "def sieve(n: int) -> int:\n    return n\n",
            "sum_primes": "def sum_primes(n: int) -> int:\n    return sieve(n)\n"
        },
        "tests": {},
        "test_results": [test("sieve", "ten", true), test("sum_primes", "hundred", status == "succeeded")],
        "all_tests_passed": status == "succeeded",
        "improvement_history": [{
            "function": "sum_primes", "attempt": 1, "error_kind": "runtime",
            "error": "2 of 4 cases failed", "fix": "call sieve(n)",
            "analysis": {"error_kind": "wrong_output", "root_cause": "off by one", "changes": "call sieve(n)"}
        }],
        "documentation": "",
        "quality": {"score": 0.93, "tests_passed": 2, "tests_total": 2, "coverage": 0.96,
                    "complexity": {"sieve": 3, "sum_primes": 1}, "docstrings": 1.0,
                    "dangerous_calls": []},
        "metrics": {"generation_ms": 1200, "execution_ms": 450, "total_ms": 3400,
                    "model_calls": 6, "tokens": {"prompt": 100, "completion": 50}, "cache": "miss"},
        "failure": if status == "succeeded" { Value::Null } else { json!("sum_primes: tests fail") },
        "validation": "tested",
        "manual_review_recommended": status != "succeeded"
    }))
    .unwrap()
}

#[test]
fn the_markdown_report_has_the_verdict_code_tests_timings_quality_and_history() {
    let text = markdown(&result("succeeded"));
    let first = text.lines().next().unwrap();
    assert!(first.starts_with("✅ succeeded: 2/2 tests pass"), "{first}");
    for needle in [
        "## `sieve(n: int) -> int`",
        "```python\ndef sieve(n: int) -> int:\n    return n\n```",
        "- ✓ `ten`",
        "- ✓ `hundred`",
        "| 1.2 s | 450 ms | 3.4 s |",
        "Score **0.93** / 1: tests 2/2, line coverage 96%, docstrings 100%",
        "sieve 3, sum_primes 1",
        "dangerous calls: none",
        "- attempt 1 ✗ runtime: 2 of 4 cases failed",
        "  - cause: off by one",
        "  - fix: call sieve(n)",
        "- attempt 2 ✓ passed all 1 tests",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
    // Plan order: sieve's section comes before sum_primes's.
    assert!(text.find("## `sieve").unwrap() < text.find("## `sum_primes").unwrap());
}

#[test]
fn a_failed_job_shows_the_reason_and_the_failing_test_with_its_error() {
    let text = markdown(&result("failed"));
    let first = text.lines().next().unwrap();
    assert!(
        first.starts_with("❌ failed: sum_primes: tests fail (1/2 tests pass"),
        "{first}"
    );
    assert!(
        text.contains("- ✗ `hundred` (wrong_output): WrongOutput: expected 2, got 1 …"),
        "{text}"
    );
    assert!(!text.contains("- attempt 2 ✓"), "{text}");
    let line = summary(&result("failed"));
    assert!(line.starts_with("status=failed job=0192f5a0"), "{line}");
    assert!(
        line.contains("tests=1/2 score=0.93 repairs=1 total_ms=3400"),
        "{line}"
    );
    assert!(
        line.ends_with("failure=\"sum_primes: tests fail\""),
        "{line}"
    );
}

#[test]
fn plain_code_is_every_function_in_plan_order() {
    assert_eq!(
        code(&result("succeeded")),
        "def sieve(n: int) -> int:\n    return n\n\n\ndef sum_primes(n: int) -> int:\n    return sieve(n)\n"
    );
}

#[test]
fn progress_lines_name_the_step() {
    let at = Duration::from_millis(1500);
    assert_eq!(
        progress_line(
            at,
            &Progress::Planned {
                functions: vec!["a".into(), "b".into()],
                dependencies: [("b".to_owned(), vec!["a".to_owned()])].into(),
            }
        ),
        "[   1.5s] planned 2 functions: a, b"
    );
    assert_eq!(
        progress_line(
            at,
            &Progress::Attempt {
                function: "a".into(),
                attempt: 1,
                passed: false,
                error_kind: Some(ErrorKind::Runtime),
                validation: None,
                worker: Some("w1".into()),
            }
        ),
        "[   1.5s] a: attempt 1 ✗ runtime"
    );
    assert_eq!(
        progress_line(
            at,
            &Progress::FunctionStarted {
                function: "a".into(),
                worker: Some("w1".into()),
            }
        ),
        "[   1.5s] a: started on w1"
    );
    assert_eq!(
        progress_line(
            at,
            &Progress::Finished {
                status: JobStatus::Succeeded,
                all_tests_passed: true,
                validation: Validation::Tested,
                cache: CacheOutcome::Hit,
                failure: None,
            }
        ),
        "[   1.5s] finished: succeeded (solution cache)"
    );
}

#[test]
fn pending_jobs_list_their_functions() {
    let id = proto::TaskId::new();
    let view: JobProgress = serde_json::from_value(json!({"job_id": id, "status": "running",
        "functions": {
            "a": {"done": true, "passed": true, "attempts": 2},
            "b": {"done": false, "passed": false, "attempts": 0}}}))
    .unwrap();
    assert_eq!(
        pending_plain(&view),
        format!("status=running job={id} (a: ✓ passed (2 attempts); b: … waiting)")
    );
    assert!(pending_markdown(&view).starts_with(&format!("⏳ running: job {id}\n")));
    let counts_of = BTreeMap::from([
        (BatchJobStatus::Failed, 1),
        (BatchJobStatus::Succeeded, 2),
        (BatchJobStatus::Unknown, 1),
    ]);
    assert_eq!(counts(&counts_of), "succeeded 2 · failed 1 · unknown 1");
}
