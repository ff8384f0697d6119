//! The memory of repairs, end to end: a scripted FAKE model over the real OpenAI-compatible
//! API makes one mistake class (a range that stops one short) in three functions, and its
//! repair is right only when the prompt holds the fix of an earlier one. The real cluster
//! (RabbitMQ, Redis, the Python sandbox) keeps the first repair's lesson, shows it to the
//! second function's repair (which then passes at once, and names the lesson), counts the
//! use, and with `memory: off` shows nothing and keeps nothing (the third then fails).

use std::time::Duration;

use serde_json::{Value, json};
use store::{LessonSet, Lessons};
use tests::Cluster;

/// Work of seconds, ten times slower on a slow machine: only a failure waits it out.
const JOB_DEADLINE: Duration = Duration::from_secs(600);

fn stub(name: &str, what: &str, call: &str, answer: &str) -> String {
    format!(
        "def {name}(n: int) -> list:\n    \"\"\" {what}\n    >>> {call}\n    {answer}\n    \"\"\"\n"
    )
}

fn fenced(code: &str) -> String {
    format!("```python\n{code}```\n")
}

/// The fix the second repair is right only with: the first lesson's diff line.
const EVIDENCE: &str = "range(1, n + 1)";

/// The job's store view: the cluster's Redis under its prefix.
fn cluster_store(cluster: &Cluster) -> store::RedisStore {
    let options = store::Options {
        url: cluster.redis_url.clone(),
        prefix: cluster.prefix.clone(),
        ..store::Options::default()
    };
    store::RedisStore::build(options)
        .expect("a Redis store builds")
        .0
}

async fn run(cluster: &Cluster, job: Value) -> Value {
    let (status, body) = cluster.submit_job(job).await;
    assert_eq!(status, 202, "{body}");
    let id = body["job_id"].as_str().unwrap().to_owned();
    cluster.wait_job(&id, JOB_DEADLINE).await
}

#[tokio::test]
async fn a_repair_that_worked_is_shown_to_a_later_repair_of_the_same_mistake_and_memory_off_uses_none()
 {
    let dir = tempfile::tempdir().unwrap();
    let short = |name: &str, start: u32, step: &str| {
        format!("def {name}(n: int) -> list:\n    return list(range({start}, n{step}))\n")
    };
    let right = |name: &str, start: u32, step: &str| {
        format!("def {name}(n: int) -> list:\n    return list(range({start}, n + 1{step}))\n")
    };
    let script = json!({"answers": [
        // upto: wrong first, its repair right without help (it leaves the lesson).
        {"phase": "implement", "function": "upto", "text": fenced(&short("upto", 1, ""))},
        {"phase": "repair", "function": "upto", "text": fenced(&right("upto", 1, ""))},
        // evens and odds: the same mistake; a repair is right only with the lesson in view.
        {"phase": "implement", "function": "evens", "text": fenced(&short("evens", 2, ", 2"))},
        {"phase": "repair", "function": "evens", "prompt_contains": EVIDENCE, "text": fenced(&right("evens", 2, ", 2"))},
        {"phase": "repair", "function": "evens", "text": fenced(&short("evens", 2, ", 2"))},
        {"phase": "implement", "function": "odds", "text": fenced(&short("odds", 1, ", 2"))},
        {"phase": "repair", "function": "odds", "prompt_contains": EVIDENCE, "text": fenced(&right("odds", 1, ", 2"))},
        {"phase": "repair", "function": "odds", "text": fenced(&short("odds", 1, ", 2"))},
    ]});
    let path = dir.path().join("memory-model.json");
    std::fs::write(&path, script.to_string()).unwrap();
    let mut cluster = Cluster::new();
    let log = dir.path().join("requests.jsonl");
    let _model = cluster.scripted_model_logged(&path, Some(&log)).await;
    let _coordinator = cluster.coordinator().await;
    let _worker = cluster.worker("worker-1").await;
    let store = cluster_store(&cluster);
    let open = LessonSet::Tenant(None);

    // 1. The first repair works and leaves its lesson.
    let upto = run(
        &cluster,
        json!({"instruction": stub("upto", "The numbers 1 to n.", "upto(3)", "[1, 2, 3]"), "language": "python", "max_iterations": 3}),
    )
    .await;
    assert_eq!(upto["status"], "succeeded", "{upto:#}");
    let lessons = store.lessons(&open).await.unwrap().lessons;
    assert_eq!(lessons.len(), 1, "{lessons:#?}");
    let first = &lessons[0].lesson;
    assert_eq!(first.signature, "wrong_output: a list, 1 item short");
    assert_eq!(first.function, "upto");
    assert!(first.given, "judged by the request's own example");
    assert!(
        first
            .diff
            .contains(&format!("+    return list({EVIDENCE})")),
        "{}",
        first.diff
    );
    assert_eq!(first.case, "upto(n=3): expected [1,2,3]; got [1,2]");

    // 2. The same mistake in another function: its repair is shown the lesson and passes at
    // once; the result names the lesson; the use is counted as one that helped.
    let evens = run(
        &cluster,
        json!({"instruction": stub("evens", "The even numbers up to n.", "evens(6)", "[2, 4, 6]"), "language": "python", "max_iterations": 3}),
    )
    .await;
    assert_eq!(evens["status"], "succeeded", "{evens:#}");
    let history = evens["improvement_history"].as_array().unwrap();
    assert_eq!(history.len(), 1, "one repair: {history:#?}");
    assert_eq!(history[0]["lessons"], json!([first.id]), "{history:#?}");
    let used = store.lesson(&open, &first.id).await.unwrap().unwrap();
    assert_eq!((used.retrieved, used.helped), (1, 1));
    let uses = store.lesson_uses(&open, &first.id, 10).await.unwrap();
    assert_eq!(uses.len(), 1);
    assert_eq!(uses[0].function, "evens");
    assert!(uses[0].passed);
    // It left a lesson of its own.
    assert_eq!(store.lessons(&open).await.unwrap().lessons.len(), 2);

    // 3. memory: off: no lesson in its prompts, none kept, none counted; its repair does not
    // find the fix and the function fails.
    let odds = run(
        &cluster,
        json!({"instruction": stub("odds", "The odd numbers up to n.", "odds(5)", "[1, 3, 5]"), "language": "python", "max_iterations": 3, "memory": "off"}),
    )
    .await;
    assert_eq!(odds["status"], "failed", "{odds:#}");
    assert!(
        odds["improvement_history"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h.get("lessons").is_none()),
        "{odds:#}"
    );
    assert_eq!(store.lessons(&open).await.unwrap().lessons.len(), 2);
    let used = store.lesson(&open, &first.id).await.unwrap().unwrap();
    assert_eq!(used.retrieved, 1, "not shown to a job without memory");

    // The model's own log: the lesson reached exactly the one repair prompt that used it.
    let requests: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let repairs: Vec<&str> = requests
        .iter()
        .filter(|r| r["phase"] == "repair")
        .map(|r| r["function"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(repairs, ["upto", "evens", "odds"], "{requests:#?}");
    cluster.cleanup().await;
}

/// An agent job's steps, the tool calls of one test-driven fix of `name` (`op` the wrong
/// operator, fixed to `+`), and the run's `finish`.
fn agent_fix(name: &str, op: &str) -> Vec<Value> {
    use super::agent::call;
    let module = format!("{name}.py");
    let test = format!(
        "import unittest\nfrom {name} import {name}\n\nclass T(unittest.TestCase):\n    def test_it(self):\n        self.assertEqual({name}(2, 3), 5)\n"
    );
    vec![
        json!({"tool_calls": [
            call("write_file", json!({"path": module, "content": format!("def {name}(a, b):\n    return a {op} b\n")})),
            call("write_file", json!({"path": format!("test_{name}.py"), "content": test})),
        ]}),
        json!({"tool_calls": [call("run_tests", json!({"path": format!("test_{name}.py")}))]}),
        json!({"text": "The operator was wrong: the sum needs +.",
               "tool_calls": [call("edit_file", json!({"path": module, "old": format!("a {op} b"), "new": "a + b"}))]}),
        json!({"tool_calls": [call("run_tests", json!({"path": format!("test_{name}.py")}))]}),
        json!({"tool_calls": [call("finish", json!({"answer": "fixed", "files": [module]}))]}),
    ]
}

#[tokio::test]
async fn an_agents_fix_is_kept_and_a_later_runs_failing_tests_are_shown_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut steps = agent_fix("add", "-");
    steps.extend(agent_fix("plus", "*"));
    let path = super::agent::script(dir.path(), steps);
    let mut cluster = Cluster::new();
    let _model = cluster.scripted_model(&path).await;
    let _coordinator = cluster.coordinator().await;
    let _worker = cluster.worker("worker-1").await;
    let store = cluster_store(&cluster);
    let open = LessonSet::Tenant(None);
    let job = |task: &str| json!({"instruction": task, "mode": "agent", "language": "python"});

    // 1. Its tests fail, an edit, they pass: the edit is kept as a lesson.
    let first = run(&cluster, job("Write add(a, b) with a test.")).await;
    assert_eq!(first["status"], "succeeded", "{first:#}");
    let lessons = store.lessons(&open).await.unwrap().lessons;
    assert_eq!(lessons.len(), 1, "{lessons:#?}");
    let lesson = &lessons[0].lesson;
    assert_eq!(lesson.source, proto::lesson::LessonSource::Agent);
    assert!(
        lesson.diff.contains("-    return a - b") && lesson.diff.contains("+    return a + b"),
        "{}",
        lesson.diff
    );
    assert_eq!(lesson.analysis, "The operator was wrong: the sum needs +.");

    // 2. Another run's failing tests are shown it in their observation, which names it; its
    // passing tests count the use as one that helped.
    let second = run(&cluster, job("Write plus(a, b) with a test.")).await;
    assert_eq!(second["status"], "succeeded", "{second:#}");
    let id = second["job_id"].as_str().unwrap();
    let recorded = super::agent::recorded(&cluster, id).await;
    let tests: Vec<&Value> = recorded
        .iter()
        .filter(|s| s["kind"] == "observation" && s["tool"] == "run_tests")
        .collect();
    assert_eq!(tests.len(), 2, "{recorded:#?}");
    assert_eq!(tests[0]["error"], true);
    assert_eq!(tests[0]["lessons"], json!([lesson.id]), "{:#}", tests[0]);
    let shown = tests[0]["content"].as_str().unwrap();
    assert!(
        shown.contains("Lessons from earlier repairs") && shown.contains("+    return a + b"),
        "{shown}"
    );
    assert_eq!(tests[1]["error"], false);
    assert!(
        tests[1].get("lessons").is_none(),
        "a passing run is shown none"
    );
    let used = store.lesson(&open, &lesson.id).await.unwrap().unwrap();
    assert_eq!((used.retrieved, used.helped), (1, 1));
    cluster.cleanup().await;
}
