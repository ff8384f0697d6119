//! The agent (`"mode": "agent"`), end to end: a scripted FAKE model over the real
//! OpenAI-compatible API decides each step with tool calls, the real cluster runs them in a
//! session of the job's own (real Docker, RabbitMQ, Redis), records every step, and ends the
//! run with `finish`, a budget, stuck detection or malformed calls. A worker SIGKILLed in the
//! middle of a run costs nothing: another takes the task, restores the session and goes on
//! from the last recorded step, asking the model nothing it had answered and running no call
//! whose result was recorded.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tests::Cluster;

/// Work of seconds, ten times slower on a slow machine: only a failure waits it out.
pub(crate) const WITHIN: Duration = Duration::from_secs(600);

/// A script of agent steps, answered in order whatever the job (one job per script).
pub(crate) fn script(dir: &std::path::Path, steps: Vec<Value>) -> std::path::PathBuf {
    let answers: Vec<Value> = steps
        .into_iter()
        .map(|mut step| {
            step["phase"] = json!("agent");
            step
        })
        .collect();
    let path = dir.join("agent-model.json");
    std::fs::write(&path, json!({ "answers": answers }).to_string()).unwrap();
    path
}

pub(crate) fn call(name: &str, arguments: Value) -> Value {
    json!({"name": name, "arguments": arguments})
}

/// The model server's request log: one JSON object per request it answered.
fn model_log(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

async fn transcript(cluster: &Cluster, id: &str) -> Vec<Value> {
    let response = reqwest::get(format!("{}/v1/jobs/{id}/transcript", cluster.url()))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "application/x-ndjson",
        "one JSON message a line"
    );
    response
        .text()
        .await
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The recorded steps, as the job's `agent_step` events carry them.
async fn steps(cluster: &Cluster, id: &str) -> Vec<Value> {
    cluster
        .job_events(id)
        .await
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .filter(|e| e["event"] == "agent_step")
        .map(|e| e["step"].clone())
        .collect()
}

/// The steps job `id` has recorded so far, read where the run records them (the event stream
/// answers only once the job has ended).
pub(crate) async fn recorded(cluster: &Cluster, id: &str) -> Vec<Value> {
    use redis::AsyncCommands;
    let client = redis::Client::open(cluster.redis_url.as_str()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let items: Vec<Vec<u8>> = connection
        .lrange(format!("{}:job:{id}:steps", cluster.prefix), 0, -1)
        .await
        .unwrap();
    items
        .iter()
        .map(|b| {
            let step: proto::agent::AgentStep = proto::codec::decode(b).unwrap();
            serde_json::to_value(step).unwrap()
        })
        .collect()
}

/// Waits until job `id` has recorded a step that `until` accepts; answers the steps.
async fn wait_step(cluster: &Cluster, id: &str, until: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + WITHIN;
    loop {
        let steps = recorded(cluster, id).await;
        if until(&steps) {
            return steps;
        }
        assert!(Instant::now() < deadline, "no such step came: {steps:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn agent_job(instruction: &str, extra: Value) -> Value {
    let mut body = json!({"instruction": instruction, "mode": "agent", "language": "python"});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

#[tokio::test]
async fn an_agent_writes_runs_reads_and_finishes_in_a_session_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let path = script(
        dir.path(),
        vec![
            json!({"text": "I will look first.", "tool_calls": [call("list_files", json!({}))]}),
            json!({"tool_calls": [
                call("read_file", json!({"path": "data/numbers.txt"})),
                call("write_file", json!({"path": "sum.py", "content": "import sys\nprint(sum(int(x) for x in open('data/numbers.txt').read().split()))\n"})),
            ]}),
            json!({"tool_calls": [call("run_shell", json!({"command": "python3 sum.py"}))]}),
            json!({"tool_calls": [call("edit_file", json!({"path": "sum.py", "old": "print(sum(", "new": "print('total', sum("}))]}),
            json!({"tool_calls": [call("run_code", json!({"language": "python", "code": "import sys\nprint(sys.stdin.read().upper())", "stdin": "quiet"}))]}),
            json!({"tool_calls": [call("finish", json!({"answer": "the total is 10", "files": ["sum.py", "missing.txt"]}))]}),
        ],
    );
    let mut cluster = Cluster::new();
    let log = dir.path().join("requests.jsonl");
    let _model = cluster.scripted_model_logged(&path, Some(&log)).await;
    let _coordinator = cluster.coordinator().await;
    let (_worker, ops) = cluster.worker("worker-1").await;
    let (status, body) = cluster
        .submit_job(agent_job(
            "Sum the numbers in data/numbers.txt with a script.",
            json!({"files": {"data/numbers.txt": "1 2 3 4\n"}, "agent": {"seed": 7, "temperature": 0.0}}),
        ))
        .await;
    assert_eq!(status, 202, "{body}");
    let id = body["job_id"].as_str().unwrap().to_owned();
    let result = cluster.wait_job(&id, WITHIN).await;
    assert_eq!(result["status"], "succeeded", "{result:#}");
    let agent = &result["agent"];
    assert_eq!(agent["ended_by"], "finished", "{result:#}");
    assert_eq!(agent["answer"], "the total is 10");
    assert_eq!(
        agent["files"]["sum.py"],
        "import sys\nprint('total', sum(int(x) for x in open('data/numbers.txt').read().split()))\n"
    );
    assert!(
        agent["missing"]["missing.txt"].is_string(),
        "a file finish named that is not there is named: {agent:#}"
    );
    assert_eq!(agent["totals"]["steps"], 6, "{agent:#}");
    assert_eq!(agent["totals"]["tool_calls"], 7, "{agent:#}");
    assert_eq!(agent["totals"]["resumed"], 0, "{agent:#}");
    assert!(
        agent["totals"]["sandbox_cpu_ms"].as_u64().unwrap() > 0,
        "{agent:#}"
    );
    assert_eq!(
        result["metrics"]["model_calls"], 6,
        "one model call a step: {result:#}"
    );

    // What each call got back, in order, in the transcript's OpenAI messages.
    let messages = transcript(&cluster, &id).await;
    assert_eq!(messages[0]["role"], "system");
    assert!(
        messages[1]["content"]
            .as_str()
            .unwrap()
            .contains("data/numbers.txt"),
        "the task names the given files: {:#}",
        messages[1]
    );
    let tool_results: Vec<&str> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(tool_results.len(), 7, "{messages:#?}");
    assert!(
        tool_results[0].contains("data/numbers.txt (8 bytes)"),
        "{}",
        tool_results[0]
    );
    assert_eq!(tool_results[1], "1 2 3 4\n");
    assert!(
        tool_results[3].contains("exit code: 0") && tool_results[3].contains("10\n"),
        "{}",
        tool_results[3]
    );
    assert_eq!(tool_results[4], "edited sum.py");
    assert!(
        tool_results[5].contains("QUIET"),
        "run_code's stdin: {}",
        tool_results[5]
    );
    let calls: usize = messages
        .iter()
        .filter_map(|m| m["tool_calls"].as_array())
        .map(Vec::len)
        .sum();
    assert_eq!(calls, 7);

    // The model was asked once a step, with the tools and the run's seed and temperature.
    let requests = model_log(&log);
    assert_eq!(requests.len(), 6, "{requests:#?}");
    for request in &requests {
        assert_eq!(request["phase"], "agent");
        assert_eq!(request["tools"], 9, "every tool offered: {request}");
        assert_eq!(
            request["seed"], 7,
            "the run's seed reaches the model: {request}"
        );
        assert_eq!(request["temperature"], 0.0, "{request}");
    }
    // The live stream carried every step as it was recorded.
    let streamed = steps(&cluster, &id).await;
    assert_eq!(streamed.len(), 1 + 6 + 7, "start, answers, observations");
    assert_eq!(streamed[0]["kind"], "start");
    // The worker counted the steps it recorded and the run it ended.
    let metrics = reqwest::get(format!("{ops}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "codegen_agent_steps_total{kind=\"model\"} 6",
        "codegen_agent_steps_total{kind=\"observation\"} 7",
        "codegen_agent_runs_ended_total{ended_by=\"finished\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} missing");
    }
    // The session ended with its run.
    let session = reqwest::get(format!(
        "{}/v1/sessions/{}",
        cluster.url(),
        agent["session_id"].as_str().unwrap()
    ))
    .await
    .unwrap()
    .json::<Value>()
    .await
    .unwrap();
    assert_eq!(session["state"], "ended", "{session:#}");
    assert_eq!(session["ended_by"], "deleted", "{session:#}");
    cluster.cleanup().await;
}

#[tokio::test]
async fn malformed_calls_go_back_to_the_model_and_three_in_a_row_end_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = script(
        dir.path(),
        vec![
            // An unknown tool, arguments that are not JSON, an answer with no call at all.
            json!({"tool_calls": [call("rm_rf", json!({}))]}),
            json!({"tool_calls": [{"name": "run_shell", "arguments": "{\"command\": "}]}),
            json!({"text": "I think I am done."}),
            json!({"tool_calls": [call("finish", json!({"answer": "never reached"}))]}),
        ],
    );
    let mut cluster = Cluster::new();
    let _model = cluster.scripted_model(&path).await;
    let _coordinator = cluster.coordinator().await;
    let _worker = cluster.worker("worker-1").await;
    let (status, body) = cluster.submit_job(agent_job("Do it.", json!({}))).await;
    assert_eq!(status, 202, "{body}");
    let id = body["job_id"].as_str().unwrap().to_owned();
    let result = cluster.wait_job(&id, WITHIN).await;
    assert_eq!(result["status"], "failed", "{result:#}");
    assert_eq!(result["agent"]["ended_by"], "malformed", "{result:#}");
    assert!(
        result["failure"]
            .as_str()
            .unwrap()
            .contains("3 malformed answers or calls in a row"),
        "{result:#}"
    );
    let observations: Vec<Value> = steps(&cluster, &id)
        .await
        .into_iter()
        .filter(|s| s["kind"] == "observation")
        .collect();
    assert_eq!(observations.len(), 3, "{observations:#?}");
    assert!(
        observations
            .iter()
            .all(|o| o["malformed"] == true && o["error"] == true)
    );
    let said: Vec<&str> = observations
        .iter()
        .map(|o| o["content"].as_str().unwrap())
        .collect();
    assert!(said[0].contains("there is no tool `rm_rf`"), "{}", said[0]);
    assert!(said[1].contains("do not fit its schema"), "{}", said[1]);
    assert!(said[2].contains("called no tool"), "{}", said[2]);
    assert_eq!(result["agent"]["totals"]["steps"], 3);
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_model_that_misbehaves_mid_run_is_waited_out_or_told_and_no_step_is_doubled() {
    let dir = tempfile::tempdir().unwrap();
    let path = script(
        dir.path(),
        vec![
            json!({"tool_calls": [call("write_file", json!({"path": "a.txt", "content": "x"}))]}),
            // The server fails one request (a FAKE outage), then answers again.
            json!({"status": 503}),
            // Arguments that parse but fail the tool's schema.
            json!({"tool_calls": [call("run_shell", json!({"command": 5}))]}),
            json!({"tool_calls": [call("list_files", json!({}))]}),
            // `finish` with a call after it: neither runs, both go back as errors.
            json!({"tool_calls": [
                call("finish", json!({"answer": "too early", "files": ["a.txt"]})),
                call("list_files", json!({})),
            ]}),
            json!({"tool_calls": [call("finish", json!({"answer": "done", "files": ["a.txt"]}))]}),
        ],
    );
    let mut cluster = Cluster::new();
    let log = dir.path().join("requests.jsonl");
    let _model = cluster.scripted_model_logged(&path, Some(&log)).await;
    let _coordinator = cluster.coordinator().await;
    let _worker = cluster.worker("worker-1").await;
    let (status, body) = cluster.submit_job(agent_job("Do it.", json!({}))).await;
    assert_eq!(status, 202, "{body}");
    let id = body["job_id"].as_str().unwrap().to_owned();
    let result = cluster.wait_job(&id, WITHIN).await;
    assert_eq!(result["status"], "succeeded", "{result:#}");
    assert_eq!(result["agent"]["ended_by"], "finished", "{result:#}");
    assert_eq!(result["agent"]["answer"], "done", "{result:#}");
    assert_eq!(result["agent"]["files"]["a.txt"], "x", "{result:#}");
    // Five answers, each asked for and recorded once; the failed request asked again.
    let requests = model_log(&log);
    let statuses: Vec<u64> = requests
        .iter()
        .map(|r| r["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses, [200, 503, 200, 200, 200, 200], "{requests:#?}");
    let recorded = recorded(&cluster, &id).await;
    let answers = recorded.iter().filter(|s| s["kind"] == "model").count();
    assert_eq!(answers, 5, "{recorded:#?}");
    let observations: Vec<&Value> = recorded
        .iter()
        .filter(|s| s["kind"] == "observation")
        .collect();
    let said: Vec<(&str, bool)> = observations
        .iter()
        .map(|o| {
            (
                o["tool"].as_str().unwrap(),
                o["malformed"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    assert_eq!(
        said,
        [
            ("write_file", false),
            ("run_shell", true),
            ("list_files", false),
            ("finish", true),
            ("list_files", true),
            ("finish", false),
        ],
        "{observations:#?}"
    );
    assert!(
        observations[1]["content"]
            .as_str()
            .unwrap()
            .contains("do not fit its schema"),
        "{:#}",
        observations[1]
    );
    // The files listed after the schema error show the write, once.
    assert!(
        observations[2]["content"]
            .as_str()
            .unwrap()
            .contains("a.txt"),
        "{:#}",
        observations[2]
    );
    cluster.cleanup().await;
}

#[tokio::test]
async fn budgets_end_a_run_stuck_or_at_its_step_limit_and_say_so() {
    let dir = tempfile::tempdir().unwrap();
    // The same command with the same output, over and over.
    let path = script(
        dir.path(),
        vec![json!({"tool_calls": [call("run_shell", json!({"command": "echo same"}))]})],
    );
    let mut cluster = Cluster::new();
    let _model = cluster.scripted_model(&path).await;
    let _coordinator = cluster.coordinator().await;
    let _worker = cluster.worker("worker-1").await;
    let (_, stuck) = cluster
        .submit_job(agent_job("Loop.", json!({"agent": {"stuck_repeats": 3}})))
        .await;
    let (_, limited) = cluster
        .submit_job(agent_job(
            "Loop.",
            json!({"agent": {"stuck_repeats": 100, "max_steps": 2}}),
        ))
        .await;
    let stuck = cluster
        .wait_job(stuck["job_id"].as_str().unwrap(), WITHIN)
        .await;
    assert_eq!(stuck["agent"]["ended_by"], "stuck", "{stuck:#}");
    assert_eq!(stuck["agent"]["totals"]["steps"], 3, "{stuck:#}");
    assert!(
        stuck["failure"]
            .as_str()
            .unwrap()
            .contains("3 times in a row")
    );
    let limited = cluster
        .wait_job(limited["job_id"].as_str().unwrap(), WITHIN)
        .await;
    assert_eq!(limited["agent"]["ended_by"], "max_steps", "{limited:#}");
    assert_eq!(limited["agent"]["totals"]["steps"], 2, "{limited:#}");
    assert_eq!(
        limited["agent"]["totals"]["tool_calls"], 2,
        "the last step's call ran"
    );
    // Bad settings are refused by field.
    let (status, refused) = cluster
        .submit_job(agent_job("x", json!({"agent": {"max_steps": 0}})))
        .await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["param"], "agent.max_steps", "{refused}");
    cluster.cleanup().await;
}

/// Session containers of job `id`'s run.
pub(crate) fn session_containers(id: &str) -> Vec<String> {
    let out = std::process::Command::new("docker")
        .args([
            "ps",
            "-q",
            "--filter",
            &format!("label=org.codegen.session={id}"),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

async fn session(cluster: &Cluster, id: &str) -> Value {
    reqwest::get(format!("{}/v1/sessions/{id}", cluster.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_worker_killed_in_the_middle_of_a_call_costs_the_run_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // The second step's command waits for a file the test makes only once its first worker
    // is dead: it cannot end where it started, and ends on the worker that takes the run.
    let path = script(
        dir.path(),
        vec![
            json!({"tool_calls": [call("write_file", json!({"path": "kept.txt", "content": "from the first worker"}))]}),
            json!({"tool_calls": [call("run_shell", json!({"command": "while [ ! -f /tmp/go ]; do sleep 0.1; done; echo released; cat kept.txt; echo ran >> runs.txt", "timeout_ms": 3_600_000}))]}),
            json!({"tool_calls": [call("finish", json!({"answer": "done", "files": ["kept.txt", "runs.txt"]}))]}),
        ],
    );
    let mut cluster = Cluster::new();
    let log = dir.path().join("requests.jsonl");
    let _model = cluster.scripted_model_logged(&path, Some(&log)).await;
    let _coordinator = cluster.coordinator().await;
    let (mut doomed, _) = cluster.worker("doomed").await;
    let (_, body) = cluster
        .submit_job(agent_job("Wait, then report.", json!({})))
        .await;
    let id = body["job_id"].as_str().unwrap().to_owned();
    // The model has answered the second step: its call is on its way or running.
    let before = wait_step(&cluster, &id, |steps| {
        steps.iter().any(|s| s["kind"] == "model" && s["step"] == 2)
    })
    .await;
    doomed.signal("KILL");
    doomed.wait_exit(WITHIN);
    let (_successor, _) = cluster.worker("successor").await;
    // Release the command wherever the run's session now is, until the run ends.
    let deadline = Instant::now() + WITHIN;
    let result = loop {
        for container in session_containers(&id) {
            let _ = std::process::Command::new("docker")
                .args(["exec", &container, "touch", "/tmp/go"])
                .output();
        }
        let view: Value = reqwest::get(format!("{}/v1/jobs/{id}", cluster.url()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if view["status"] == "succeeded" || view["status"] == "failed" {
            break view;
        }
        assert!(Instant::now() < deadline, "the run did not end: {view:#}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(result["status"], "succeeded", "{result:#}");
    let agent = &result["agent"];
    // The session came back from its checkpoint (the first step's file), and the command ran
    // once there: the first worker's try died with its container.
    assert_eq!(
        agent["files"]["kept.txt"], "from the first worker",
        "{agent:#}"
    );
    assert_eq!(agent["files"]["runs.txt"], "ran\n", "{agent:#}");
    assert!(
        agent["totals"]["resumed"].as_u64().unwrap() >= 1,
        "{agent:#}"
    );
    let steps = steps(&cluster, &id).await;
    let answered_by = before
        .iter()
        .find(|s| s["kind"] == "model" && s["step"] == 2)
        .unwrap()["worker"]
        .clone();
    let observed = steps
        .iter()
        .find(|s| s["kind"] == "observation" && s["tool"] == "run_shell")
        .unwrap();
    assert_ne!(
        observed["worker"], answered_by,
        "the successor ran the call: {steps:#?}"
    );
    assert!(observed["content"].as_str().unwrap().contains("released"));
    // Each step's model call once: the model was not asked again for the step it had answered.
    let requests = model_log(&log);
    assert_eq!(requests.len(), 3, "{requests:#?}");
    assert_eq!(
        steps.iter().filter(|s| s["kind"] == "model").count(),
        3,
        "{steps:#?}"
    );
    // The session: restored once, one cell run to its end.
    let session = session(&cluster, &id).await;
    assert_eq!(session["restores"], 1, "{session:#}");
    assert_eq!(session["cells"], 1, "{session:#}");
    cluster.cleanup().await;
}

#[tokio::test]
async fn a_worker_killed_between_two_steps_costs_the_run_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // The second answer takes its time: the first worker dies while it waits for it (or
    // before it asked), and the successor asks for it again, once.
    let path = script(
        dir.path(),
        vec![
            json!({"tool_calls": [call("run_shell", json!({"command": "echo one >> runs.txt"}))]}),
            json!({"latency_ms": 3000, "tool_calls": [call("run_shell", json!({"command": "echo two >> runs.txt"}))]}),
            json!({"tool_calls": [call("run_shell", json!({"command": "echo two >> runs.txt"}))]}),
            json!({"tool_calls": [call("finish", json!({"answer": "done", "files": ["runs.txt"]}))]}),
        ],
    );
    let mut cluster = Cluster::new();
    let log = dir.path().join("requests.jsonl");
    let _model = cluster.scripted_model_logged(&path, Some(&log)).await;
    let _coordinator = cluster.coordinator().await;
    let (mut doomed, _) = cluster.worker("doomed").await;
    let (_, body) = cluster.submit_job(agent_job("Count.", json!({}))).await;
    let id = body["job_id"].as_str().unwrap().to_owned();
    wait_step(&cluster, &id, |steps| {
        steps.iter().any(|s| s["kind"] == "observation")
    })
    .await;
    doomed.signal("KILL");
    doomed.wait_exit(WITHIN);
    let (_successor, _) = cluster.worker("successor").await;
    let result = cluster.wait_job(&id, WITHIN).await;
    assert_eq!(result["status"], "succeeded", "{result:#}");
    let agent = &result["agent"];
    // The first command ran once (its observation was recorded before the loss), the second
    // once on the restored session.
    assert_eq!(agent["files"]["runs.txt"], "one\ntwo\n", "{agent:#}");
    let steps = recorded(&cluster, &id).await;
    assert_eq!(
        steps.iter().filter(|s| s["kind"] == "model").count(),
        3,
        "{steps:#?}"
    );
    // The model server's own log: a conversation of each length was answered once, but the
    // one in flight when the first worker died (its answer was never recorded).
    let requests = model_log(&log);
    let mut by_length = std::collections::BTreeMap::new();
    for request in &requests {
        *by_length
            .entry(request["messages"].as_u64().unwrap())
            .or_insert(0) += 1;
    }
    let repeated: Vec<_> = by_length.iter().filter(|(_, n)| **n > 1).collect();
    assert!(repeated.len() <= 1, "{requests:#?}");
    assert!(
        repeated.iter().all(|(length, n)| **n == 2 && **length == 4),
        "only the second step's question may have been asked twice: {requests:#?}"
    );
    let session = session(&cluster, &id).await;
    assert_eq!(session["restores"], 1, "{session:#}");
    assert_eq!(session["cells"], 2, "{session:#}");
    cluster.cleanup().await;
}

#[tokio::test]
async fn install_packages_reopens_the_session_with_them_and_keeps_its_files() {
    let wheels = tempfile::tempdir().unwrap();
    crate::sessions_packages::build_wheels(wheels.path());
    let dir = tempfile::tempdir().unwrap();
    let path = script(
        dir.path(),
        vec![
            json!({"tool_calls": [call("write_file", json!({"path": "notes.txt", "content": "before"}))]}),
            json!({"tool_calls": [call("install_packages", json!({"names": ["cgwants"]}))]}),
            json!({"tool_calls": [call("install_packages", json!({"names": ["cgcalc"]}))]}),
            json!({"tool_calls": [call("run_shell", json!({"command": "python3 -c 'import cgcalc; print(cgcalc.area(2))'; cat notes.txt"}))]}),
            json!({"tool_calls": [call("finish", json!({"answer": "done"}))]}),
        ],
    );
    let mut cluster = Cluster::new();
    let cache = cluster.dir.path().join("packages");
    std::fs::write(
        cluster.dir.path().join("codegen.toml"),
        format!(
            "[worker.sessions.packages]\nfind_links = {:?}\nallow = [\"cgcalc\", \"cg?ep\", \"cgwants\"]\npip = [\"/usr/bin/python3\", \"-m\", \"pip\"]\ncache_dir = {:?}\n",
            wheels.path().join("wheels").display().to_string(),
            cache.display().to_string()
        ),
    )
    .unwrap();
    let _model = cluster.scripted_model(&path).await;
    let _coordinator = cluster.coordinator().await;
    let _worker = cluster.worker("worker-1").await;
    let (_, body) = cluster
        .submit_job(agent_job("Use cgcalc.", json!({})))
        .await;
    let id = body["job_id"].as_str().unwrap().to_owned();
    let result = cluster.wait_job(&id, WITHIN).await;
    assert_eq!(result["status"], "succeeded", "{result:#}");
    let observations: Vec<String> = recorded(&cluster, &id)
        .await
        .into_iter()
        .filter(|s| s["kind"] == "observation")
        .map(|s| s["content"].as_str().unwrap().to_owned())
        .collect();
    // A package whose dependency is not allowed is refused by name, the session unchanged.
    assert!(observations[1].contains("cgblocked"), "{}", observations[1]);
    assert!(
        observations[2].starts_with("installed cgcalc"),
        "{}",
        observations[2]
    );
    assert!(
        observations[3].contains("12.0") && observations[3].contains("before"),
        "the package imports and the file written before is there: {}",
        observations[3]
    );
    cluster.cleanup().await;
}

#[tokio::test]
async fn cancel_stops_a_run_before_its_next_call_and_ends_its_session() {
    let dir = tempfile::tempdir().unwrap();
    let path = script(
        dir.path(),
        vec![
            json!({"tool_calls": [call("run_shell", json!({"command": "while [ ! -f /tmp/go ]; do sleep 0.1; done; echo released", "timeout_ms": 3_600_000}))]}),
            json!({"tool_calls": [call("run_shell", json!({"command": "echo never"}))]}),
        ],
    );
    let mut cluster = Cluster::new();
    let log = dir.path().join("requests.jsonl");
    let _model = cluster.scripted_model_logged(&path, Some(&log)).await;
    let _coordinator = cluster.coordinator().await;
    let _worker = cluster.worker("worker-1").await;
    let (_, body) = cluster
        .submit_job(agent_job("Wait.", json!({"max_tokens_total": 1_000_000})))
        .await;
    let id = body["job_id"].as_str().unwrap().to_owned();
    wait_step(&cluster, &id, |steps| {
        steps.iter().any(|s| s["kind"] == "model")
    })
    .await;
    let cancelled = cluster
        .http
        .delete(format!("{}/v1/jobs/{id}", cluster.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(cancelled.status(), 200);
    let result: Value = cancelled.json().await.unwrap();
    assert_eq!(result["status"], "cancelled", "{result:#}");
    assert_eq!(result["agent"]["ended_by"], "cancelled", "{result:#}");
    assert_eq!(result["agent"]["totals"]["steps"], 1, "{result:#}");
    // Released, the call ends; the run records nothing more, asks the model nothing more,
    // and ends its session.
    let deadline = Instant::now() + WITHIN;
    loop {
        for container in session_containers(&id) {
            let _ = std::process::Command::new("docker")
                .args(["exec", &container, "touch", "/tmp/go"])
                .output();
        }
        if session(&cluster, &id).await["state"] == "ended" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the session outlived its cancelled run"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        recorded(&cluster, &id)
            .await
            .iter()
            .all(|s| s["kind"] != "observation"),
        "nothing recorded after the cancel"
    );
    assert_eq!(model_log(&log).len(), 1, "no model call after the cancel");
    cluster.cleanup().await;
}

#[tokio::test]
async fn the_token_budget_ends_a_run_before_its_next_question() {
    let dir = tempfile::tempdir().unwrap();
    let path = script(
        dir.path(),
        vec![json!({"tool_calls": [call("run_shell", json!({"command": "echo again"}))]})],
    );
    let mut cluster = Cluster::new();
    let _model = cluster.scripted_model(&path).await;
    let _coordinator = cluster.coordinator().await;
    let _worker = cluster.worker("worker-1").await;
    // Each step's prompt is the whole conversation: a small budget runs out in a few steps.
    let (_, body) = cluster
        .submit_job(agent_job(
            "Spend.",
            json!({"max_tokens_total": 2000, "agent": {"stuck_repeats": 100}}),
        ))
        .await;
    let result = cluster
        .wait_job(body["job_id"].as_str().unwrap(), WITHIN)
        .await;
    assert_eq!(result["agent"]["ended_by"], "tokens", "{result:#}");
    let totals = &result["agent"]["totals"];
    let spent =
        totals["prompt_tokens"].as_u64().unwrap() + totals["completion_tokens"].as_u64().unwrap();
    assert!(spent >= 2000, "{totals}");
    assert!(
        result["failure"]
            .as_str()
            .unwrap()
            .contains("max_tokens_total (2000)")
    );
    cluster.cleanup().await;
}

#[tokio::test]
async fn wall_time_and_sandbox_cpu_end_a_run_and_say_so() {
    let dir = tempfile::tempdir().unwrap();
    // Steps that never end the run themselves: each burns a little CPU, differently each
    // time (so it is never stuck).
    let path = script(
        dir.path(),
        vec![
            json!({"tool_calls": [call("run_shell", json!({"command": "python3 -c 'import time, os; t = time.process_time(); [0 for _ in iter(lambda: time.process_time() - t < 0.2, False)]; print(os.getpid())'"}))]}),
        ],
    );
    let mut cluster = Cluster::new();
    let _model = cluster.scripted_model(&path).await;
    let _coordinator = cluster.coordinator().await;
    let _worker = cluster.worker("worker-1").await;
    let unbounded = json!({"stuck_repeats": 100, "stuck_errors": 100, "max_steps": 500});
    let mut cpu = unbounded.clone();
    cpu["max_cpu_ms"] = json!(500);
    let mut wall = unbounded.clone();
    wall["max_seconds"] = json!(3);
    let (_, by_cpu) = cluster
        .submit_job(agent_job(
            "Burn.",
            json!({"agent": cpu, "max_tokens_total": 10_000_000}),
        ))
        .await;
    let (_, by_wall) = cluster
        .submit_job(agent_job(
            "Burn.",
            json!({"agent": wall, "max_tokens_total": 10_000_000}),
        ))
        .await;
    let by_cpu = cluster
        .wait_job(by_cpu["job_id"].as_str().unwrap(), WITHIN)
        .await;
    assert_eq!(by_cpu["agent"]["ended_by"], "cpu", "{by_cpu:#}");
    assert!(
        by_cpu["agent"]["totals"]["sandbox_cpu_ms"]
            .as_u64()
            .unwrap()
            >= 500
    );
    assert!(
        by_cpu["failure"]
            .as_str()
            .unwrap()
            .contains("max_cpu_ms (500)")
    );
    let by_wall = cluster
        .wait_job(by_wall["job_id"].as_str().unwrap(), WITHIN)
        .await;
    assert_eq!(by_wall["agent"]["ended_by"], "wall_time", "{by_wall:#}");
    assert!(by_wall["agent"]["totals"]["wall_ms"].as_u64().unwrap() >= 3000);
    cluster.cleanup().await;
}

#[tokio::test]
async fn an_agent_job_nobody_can_run_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = script(
        dir.path(),
        vec![json!({"tool_calls": [call("finish", json!({"answer": "x"}))]})],
    );
    let mut cluster = Cluster::new().with_env("CODEGEN__WORKER__SESSIONS__ENABLED", "false");
    let _model = cluster.scripted_model(&path).await;
    let _coordinator = cluster.coordinator().await;
    let _worker = cluster.worker("worker-1").await;
    let (status, body) = cluster.submit_job(agent_job("x", json!({}))).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["code"], "no_session_host", "{body}");
    cluster.cleanup().await;
}
