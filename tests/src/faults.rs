//! Faults a test can switch on and off: a model server that stops refusing connections, a
//! Docker socket that disappears, and a batch of distinct generation jobs to run through them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::{Cluster, binary, free_port, get_json};

/// `codegen model-server` (a scripted FAKE model behind the real OpenAI-compatible API) on a
/// fixed port, so it can be stopped (connections refused) and started again.
#[derive(Debug)]
pub struct ModelServer {
    pub port: u16,
    script: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl ModelServer {
    pub fn start(script: &Path, log_dir: &Path) -> Self {
        let mut server = Self {
            port: free_port(),
            script: script.to_owned(),
            log: log_dir.join("model-server.log"),
            child: None,
        };
        server.restart();
        server
    }

    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// (Re)starts it on the same port; waits until it accepts connections.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let child = Command::new(binary())
            .arg("model-server")
            .arg("--script")
            .arg(&self.script)
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("codegen model-server starts");
        self.child = Some(child);
        // Milliseconds here; the deadline only bounds a failure.
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "model server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills it: from now on every connection to its port is refused.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Cluster {
    /// Points every process started from now on at `model`.
    pub fn use_model(mut self, model: &ModelServer) -> Self {
        for (key, value) in [
            ("CODEGEN__MODEL__PROVIDER", "openai".to_owned()),
            ("CODEGEN__MODEL__BASE_URL", model.base_url()),
            ("CODEGEN__MODEL__API_KEY", "not-a-real-key".to_owned()),
        ] {
            self = self.with_env(key, &value);
        }
        self
    }
}

/// A Unix socket in front of the Docker engine's, for workers to use as their Docker host.
/// `cut` closes every connection through it and removes the socket (a worker then sees its
/// engine gone: attached containers lose their stdin, new connections are refused), `restore`
/// opens it again.
#[derive(Debug)]
pub struct DockerProxy {
    path: PathBuf,
    upstream: PathBuf,
    serving: Option<CancellationToken>,
}

impl DockerProxy {
    pub fn start(dir: &Path) -> Self {
        let mut proxy = Self {
            path: dir.join("docker.sock"),
            upstream: PathBuf::from("/var/run/docker.sock"),
            serving: None,
        };
        proxy.restore();
        proxy
    }

    /// The `sandbox.docker_host` value that goes through this proxy.
    pub fn host(&self) -> String {
        format!("unix://{}", self.path.display())
    }

    pub fn restore(&mut self) {
        assert!(self.serving.is_none(), "already serving");
        let _ = std::fs::remove_file(&self.path);
        let listener = tokio::net::UnixListener::bind(&self.path).expect("proxy socket");
        let token = CancellationToken::new();
        let upstream = self.upstream.clone();
        let serving = token.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = serving.cancelled() => return,
                    accepted = listener.accept() => accepted,
                };
                let Ok((mut client, _)) = accepted else {
                    continue;
                };
                let upstream = upstream.clone();
                let connection = serving.clone();
                tokio::spawn(async move {
                    let Ok(mut engine) = tokio::net::UnixStream::connect(&upstream).await else {
                        return;
                    };
                    tokio::select! {
                        () = connection.cancelled() => {}
                        _ = tokio::io::copy_bidirectional(&mut client, &mut engine) => {}
                    }
                });
            }
        });
        self.serving = Some(token);
    }

    pub fn cut(&mut self) {
        if let Some(token) = self.serving.take() {
            token.cancel();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for DockerProxy {
    fn drop(&mut self) {
        self.cut();
    }
}

/// The instruction of job `i` of a [`distinct_jobs_script`] batch.
pub fn distinct_job(i: usize) -> String {
    format!("[job {i}] add one to x, then double the result")
}

/// A scripted (FAKE) model for `jobs` jobs with plans of their own (no job can reuse another's
/// functions from the cache): job `i` plans `j{i}_inc` and `j{i}_double` (which uses it); every
/// answer after `latency_ms`. Five model calls and three sandbox runs per job.
pub fn distinct_jobs_script(dir: &Path, jobs: usize, latency_ms: u64) -> PathBuf {
    let mut answers = Vec::new();
    for i in 0..jobs {
        let (inc, double) = (format!("j{i}_inc"), format!("j{i}_double"));
        answers.push(json!({"phase": "plan", "prompt_contains": format!("[job {i}]"),
            "latency_ms": latency_ms, "answer": {"functions": [
                {"name": inc, "purpose": "return x plus one", "inputs": [{"name": "x", "type": "int"}],
                 "outputs": {"type": "int", "description": "x + 1"}, "dependencies": [],
                 "complexity": "simple"},
                {"name": double, "purpose": "return twice inc(x)", "inputs": [{"name": "x", "type": "int"}],
                 "outputs": {"type": "int", "description": "2 * (x + 1)"}, "dependencies": [inc],
                 "complexity": "simple"}]}}));
        for (name, code, expected) in [
            (
                &inc,
                format!(
                    "def {inc}(x: int) -> int:\n    \"\"\"x plus one.\"\"\"\n    return x + 1\n"
                ),
                2,
            ),
            (
                &double,
                format!(
                    "def {double}(x: int) -> int:\n    \"\"\"Twice x plus one.\"\"\"\n    return 2 * {inc}(x)\n"
                ),
                4,
            ),
        ] {
            answers.push(
                json!({"phase": "tests", "function": name, "latency_ms": latency_ms,
                "answer": {"cases": [{"name": "one", "kind": "normal", "inputs": {"x": 1},
                                      "expected_output": expected, "expected_error": null}]}}),
            );
            answers.push(
                json!({"phase": "implement", "function": name, "latency_ms": latency_ms,
                "answer": {"code": code, "analysis": null}}),
            );
        }
    }
    let path = dir.join("distinct.json");
    std::fs::write(&path, json!({ "answers": answers }).to_string()).expect("script written");
    path
}

impl Cluster {
    /// `POST /v1/batches` of `instructions`; the job ids in order.
    pub async fn submit_batch(&self, instructions: &[String]) -> Vec<String> {
        let lines: Vec<String> = instructions
            .iter()
            .map(|i| json!({ "instruction": i }).to_string())
            .collect();
        let response = self
            .http
            .post(format!("{}/v1/batches", self.url()))
            .header("content-type", "application/x-ndjson")
            .body(lines.join("\n"))
            .send()
            .await
            .expect("coordinator answers");
        assert_eq!(response.status(), 202);
        let batch: Value = response.json().await.expect("json answer");
        let jobs: Vec<String> = batch["jobs"]
            .as_array()
            .expect("job ids")
            .iter()
            .map(|j| j.as_str().expect("id").to_owned())
            .collect();
        assert_eq!(jobs.len(), instructions.len());
        jobs
    }

    /// Polls every job until it is final, through outages (a coordinator answering 503 while
    /// Redis is down, or not at all), up to `timeout`; the final answers, in order.
    pub async fn wait_jobs_through_outages(&self, ids: &[String], timeout: Duration) -> Vec<Value> {
        match self.try_wait_jobs_through_outages(ids, timeout).await {
            Ok(finals) => finals,
            Err(e) => panic!("{e}"),
        }
    }

    /// As `wait_jobs_through_outages`, but what was left unfinished is an error the caller
    /// can add its own evidence to (process logs, the broker's state).
    pub async fn try_wait_jobs_through_outages(
        &self,
        ids: &[String],
        timeout: Duration,
    ) -> Result<Vec<Value>, String> {
        let deadline = Instant::now() + timeout;
        let mut finals: Vec<Option<Value>> = vec![None; ids.len()];
        loop {
            for (i, id) in ids.iter().enumerate() {
                if finals[i].is_some() {
                    continue;
                }
                let url = format!("{}/v1/jobs/{id}", self.url());
                let Ok(response) = self.http.get(&url).send().await else {
                    continue;
                };
                if response.status() != 200 {
                    continue;
                }
                let Ok(body) = response.json::<Value>().await else {
                    continue;
                };
                if body["status"] == "succeeded" || body["status"] == "failed" {
                    finals[i] = Some(body);
                }
            }
            let left: Vec<&String> = ids
                .iter()
                .zip(&finals)
                .filter(|(_, f)| f.is_none())
                .map(|(id, _)| id)
                .collect();
            if left.is_empty() {
                return Ok(finals.into_iter().flatten().collect());
            }
            if Instant::now() > deadline {
                let (_, sample) =
                    get_json(&self.http, &format!("{}/v1/jobs/{}", self.url(), left[0])).await;
                return Err(format!(
                    "{} of {} jobs not final after {timeout:?}, e.g. {}: {sample}",
                    left.len(),
                    ids.len(),
                    left[0]
                ));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}
