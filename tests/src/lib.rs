//! Harness for the end-to-end tests.
//!
//! The tests run against the real RabbitMQ and Redis that `scripts/cluster services` starts
//! and the real Docker engine with the sandbox image built by `sandbox-images/build`. Each
//! test gets its own queue and key prefix and its own ports, and spawns its own `codegen`
//! coordinator and worker processes (the binary built by `cargo build --bin codegen`), so tests
//! can run in parallel and can kill or restart processes without disturbing each other.

pub mod faults;
pub mod in_process;
pub mod otlp;
pub mod prometheus;
pub mod stack;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lapin::options::{BasicPublishOptions, QueueDeleteOptions};
use lapin::types::ShortString;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use serde_json::Value;

/// AMQP URL of the broker under test.
pub fn amqp_url() -> String {
    std::env::var("CODEGEN_TEST_AMQP_URL").unwrap_or_else(|_| "amqp://127.0.0.1:5672/%2f".into())
}

/// Redis URL of the shared store under test.
pub fn redis_url() -> String {
    std::env::var("CODEGEN_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into())
}

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// A copy of `examples/scripted-model.json` in `dir` whose every answer takes `latency_ms`, so
/// a job lasts seconds (its path): for tests that act while a job runs.
pub fn slow_scripted_model(dir: &std::path::Path, latency_ms: u64) -> PathBuf {
    let example = root().join("examples/scripted-model.json");
    let mut script: Value =
        serde_json::from_str(&std::fs::read_to_string(&example).expect("the example script"))
            .expect("the example script is JSON");
    for answer in script["answers"].as_array_mut().expect("answers") {
        answer["latency_ms"] = latency_ms.into();
    }
    let path = dir.join("scripted-model.json");
    std::fs::write(&path, script.to_string()).expect("a scripted model written");
    path
}

/// The `codegen` binary under test.
pub fn binary() -> PathBuf {
    let path = std::env::var_os("CODEGEN_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| root().join("target"));
            target.join("debug").join("codegen")
        });
    assert!(
        path.exists(),
        "{} not found: build it with `cargo build --bin codegen` (scripts/test does)",
        path.display()
    );
    path
}

/// A free port on loopback.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A free loopback port below the kernel's ephemeral range (32768 and up), for a server a test
/// stops and starts again on the same port: a port from [`free_port`] may meanwhile be the
/// local end of any outgoing connection, or be handed to a concurrent test, and the restarted
/// server could not listen on it.
pub fn server_port() -> u16 {
    loop {
        let random = uuid::Uuid::new_v4().as_u128();
        let port = 20_000 + (random % 12_000) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// A child process that is killed when dropped.
#[derive(Debug)]
pub struct Process {
    pub name: String,
    pub child: Child,
    pub log: PathBuf,
}

impl Process {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (e.g. "TERM", "KILL") to the process.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal} {} failed", self.pid());
    }

    /// Waits up to `timeout` for the process to exit; returns its exit code.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status.code().unwrap_or(-1));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How long one request of [`Cluster::http`] may take, whole answer included, unless a test
/// sets a longer `coordinator.wait` ([`Cluster::with_coordinator_wait`]): more than the
/// coordinator's default wait (60 s) on any machine, since it only bounds a failure (a server
/// that never answers).
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(600);

/// A `coordinator.wait` for synchronous requests whose work takes a minute or more on a slow
/// machine (a tenth of this one's speed, sharing its cores): long enough that the answer is
/// the verdict, never 202 for want of time ([`Cluster::with_coordinator_wait`]).
pub const LONG_WAIT: Duration = Duration::from_secs(600);

/// The limit of a compile or a run that must end by itself: the API's largest, far above the
/// second or so a compile takes here (ten on a slow machine, more with several at once).
pub const AMPLE_MS: u64 = 120_000;

/// A coordinator and one worker whose synchronous executions wait for their verdicts however
/// slow the machine ([`LONG_WAIT`]): a lazy language's container starts at its first program,
/// and a set of compiles and runs shares it.
pub async fn patient_cluster() -> (Cluster, Process, Process) {
    let cluster = Cluster::new().with_coordinator_wait(LONG_WAIT);
    let coordinator = cluster.coordinator().await;
    let (worker, _) = cluster.worker("worker").await;
    (cluster, coordinator, worker)
}

/// `sandbox.start_timeout` of every process a [`Cluster`] starts: creating a container and
/// starting its runner takes about a second here, ten on a slow machine, more when a worker
/// starts its whole warm pool at once; the default (30 s) only bounds a failure, so the tests
/// give it room.
const SANDBOX_START_TIMEOUT: &str = "300s";

fn http_client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .expect("http client")
}

/// One isolated cluster: its own prefix and ports on the shared broker and Redis.
#[derive(Debug)]
pub struct Cluster {
    pub prefix: String,
    pub redis_url: String,
    pub coordinator_port: u16,
    pub dir: tempfile::TempDir,
    pub http: reqwest::Client,
    extra_env: Vec<(String, String)>,
}

impl Cluster {
    pub fn new() -> Self {
        // What earlier tests' killed workers left (see the function).
        remove_orphaned_test_containers();
        let prefix = format!("t{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        Self {
            prefix,
            redis_url: redis_url(),
            coordinator_port: free_port(),
            dir: tempfile::tempdir().expect("tempdir"),
            http: http_client(HTTP_TIMEOUT),
            extra_env: vec![(
                "CODEGEN__SANDBOX__START_TIMEOUT".into(),
                SANDBOX_START_TIMEOUT.into(),
            )],
        }
    }

    /// Sets `coordinator.wait` (how long a synchronous `POST /v1/executions` or `/batch`
    /// waits for its verdicts before answering 202) for every process started from now on, and
    /// lets [`Cluster::http`] wait that long and more for an answer. For requests whose work
    /// may take more than the default 60 s on a slow machine (see [`LONG_WAIT`]).
    pub fn with_coordinator_wait(mut self, wait: Duration) -> Self {
        self.extra_env.push((
            "CODEGEN__COORDINATOR__WAIT".into(),
            format!("{}ms", wait.as_millis()),
        ));
        self.http = http_client(HTTP_TIMEOUT.max(wait + Duration::from_secs(300)));
        self
    }

    /// Points the processes at another Redis (e.g. one the test stops and starts).
    pub fn with_redis(mut self, url: String) -> Self {
        self.redis_url = url;
        self
    }

    /// Extra `CODEGEN__*` settings for every process started from now on.
    pub fn with_env(mut self, key: &str, value: &str) -> Self {
        self.extra_env.push((key.into(), value.into()));
        self
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.coordinator_port)
    }

    fn spawn(&self, name: &str, role: &str, env: &[(&str, String)]) -> Process {
        let log = self.dir.path().join(format!("{name}.log"));
        let file = std::fs::File::create(&log).expect("log file");
        let mut command = Command::new(binary());
        command
            .arg(role)
            .current_dir(self.dir.path())
            .env("CODEGEN__BROKER__URL", amqp_url())
            .env("CODEGEN__BROKER__PREFIX", &self.prefix)
            .env("CODEGEN__STORE__URL", &self.redis_url)
            .env("CODEGEN__STORE__PREFIX", &self.prefix)
            .env("CODEGEN__SANDBOX__CLUSTER", &self.prefix)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log file"))
            .stderr(file);
        for (key, value) in &self.extra_env {
            command.env(key, value);
        }
        for (key, value) in env {
            command.env(key, value);
        }
        let child = command.spawn().expect("codegen starts");
        Process {
            name: name.into(),
            child,
            log,
        }
    }

    /// Starts a coordinator and waits until it is ready.
    pub async fn coordinator(&self) -> Process {
        let process = self.coordinator_unready();
        self.wait_ready(&self.url(), &process).await;
        process
    }

    /// Starts a coordinator without waiting for readiness.
    pub fn coordinator_unready(&self) -> Process {
        self.spawn(
            "coordinator",
            "coordinator",
            &[(
                "CODEGEN__COORDINATOR__LISTEN",
                format!("127.0.0.1:{}", self.coordinator_port),
            )],
        )
    }

    /// Starts one more coordinator of this cluster on a port of its own; returns it and its URL.
    /// Coordinators share everything through the broker and Redis, so either answers for any job.
    pub async fn another_coordinator(&self, name: &str) -> (Process, String) {
        let port = free_port();
        let process = self.spawn(
            name,
            "coordinator",
            &[("CODEGEN__COORDINATOR__LISTEN", format!("127.0.0.1:{port}"))],
        );
        let url = format!("http://127.0.0.1:{port}");
        self.wait_ready(&url, &process).await;
        (process, url)
    }

    /// Starts a worker and waits until it is ready; returns it and its ops URL.
    pub async fn worker(&self, name: &str) -> (Process, String) {
        let port = free_port();
        let process = self.spawn(
            name,
            "worker",
            &[("CODEGEN__WORKER__LISTEN", format!("127.0.0.1:{port}"))],
        );
        let url = format!("http://127.0.0.1:{port}");
        self.wait_ready(&url, &process).await;
        (process, url)
    }

    /// Polls `/readyz` until 200; panics with the process log after five minutes (a start
    /// takes seconds, a minute or more on a slow machine: the deadline only bounds a failure).
    pub async fn wait_ready(&self, base: &str, process: &Process) {
        const WITHIN: Duration = Duration::from_secs(300);
        let deadline = Instant::now() + WITHIN;
        loop {
            // One probe may hang on a process still starting: it is tried again.
            let response = self
                .http
                .get(format!("{base}/readyz"))
                .timeout(Duration::from_secs(30))
                .send()
                .await;
            if response.is_ok_and(|r| r.status() == 200) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} not ready after {WITHIN:?}; log:\n{}",
                process.name,
                process.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `GET {base}/readyz`: status and body.
    pub async fn readyz(&self, base: &str) -> (u16, Value) {
        get_json(&self.http, &format!("{base}/readyz")).await
    }

    /// `POST /v1/executions` with `body`; status and answer.
    pub async fn execute(&self, query: &str, body: Value) -> (u16, Value) {
        let response = self
            .http
            .post(format!("{}/v1/executions{query}", self.url()))
            .json(&body)
            .send()
            .await
            .expect("coordinator answers");
        let status = response.status().as_u16();
        (status, response.json().await.expect("json answer"))
    }

    /// `GET /v1/executions/{id}`; status and answer.
    pub async fn execution(&self, id: &str) -> (u16, Value) {
        get_json(&self.http, &format!("{}/v1/executions/{id}", self.url())).await
    }

    /// Polls an execution until it has a verdict (not `queued`), up to `timeout`.
    pub async fn wait_verdict(&self, id: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let (status, body) = self.execution(id).await;
            // 404: a dead letter's record may not be written yet.
            assert!(status == 200 || status == 404, "{body}");
            if status == 200 && body["status"] != "queued" {
                return body;
            }
            assert!(
                Instant::now() < deadline,
                "execution {id} still queued after {timeout:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Publishes raw bytes to this cluster's task queue, as a broken producer would.
    pub async fn publish_raw(&self, message_id: &str, body: &[u8]) {
        let connection = Connection::connect(&amqp_url(), ConnectionProperties::default())
            .await
            .expect("broker reachable");
        let channel = connection.create_channel().await.expect("channel");
        channel
            .confirm_select(Default::default())
            .await
            .expect("confirms");
        let confirm = channel
            .basic_publish(
                ShortString::from(""),
                ShortString::from(format!("{}.tasks", self.prefix)),
                BasicPublishOptions {
                    mandatory: true,
                    ..Default::default()
                },
                body,
                BasicProperties::default()
                    .with_message_id(ShortString::from(message_id.to_owned())),
            )
            .await
            .expect("publish")
            .await
            .expect("confirm");
        assert!(confirm.is_ack());
        assert!(
            confirm.take_message().is_none(),
            "task queue does not exist yet"
        );
        let _ = connection.close(200, "done".into()).await;
    }

    /// Deletes this cluster's queues from the shared broker, and the sandbox containers its
    /// workers created but never started (a worker killed in between leaves one; started
    /// ones remove themselves when their worker goes).
    pub async fn cleanup(self) {
        let created = Command::new("docker")
            .args(["ps", "-aq", "--filter", "status=created", "--filter"])
            .arg(format!("label={}={}", sandbox::LABEL_SANDBOX, self.prefix))
            .output();
        if let Ok(created) = created {
            for id in String::from_utf8_lossy(&created.stdout).split_whitespace() {
                let _ = Command::new("docker").args(["rm", "-f", id]).output();
            }
        }
        let Ok(connection) =
            Connection::connect(&amqp_url(), ConnectionProperties::default()).await
        else {
            return;
        };
        if let Ok(channel) = connection.create_channel().await {
            for queue in [
                format!("{}.tasks", self.prefix),
                format!("{}.executions", self.prefix),
                format!("{}.tasks.dead", self.prefix),
                format!("{}.events", self.prefix),
            ] {
                let _ = channel
                    .queue_delete(ShortString::from(queue), QueueDeleteOptions::default())
                    .await;
            }
            let _ = channel
                .exchange_delete(
                    ShortString::from(format!("{}.dlx", self.prefix)),
                    Default::default(),
                )
                .await;
        }
        let _ = connection.close(200, "done".into()).await;
    }
}

/// The cluster's sandbox containers go with it, in any state, whether the test passed,
/// failed or skipped `cleanup`: a worker killed between create and start leaves `Created`
/// ones, and a killed worker leaves its warm pool.
/// Removes the sandbox containers of test clusters (`t` + 12 hex digits) that were created and
/// never started by a process of this host that is gone: a worker a test killed while Docker
/// was creating a container leaves one behind, created after the test's own sweep, and with
/// a cluster prefix no later worker ever reaps. Started containers and live processes' ones are
/// left alone (other tests run beside this one).
pub fn remove_orphaned_test_containers() {
    let format = format!(
        "{{{{.ID}}}} {{{{.Label \"{}\"}}}} {{{{.Label \"{}\"}}}}",
        sandbox::LABEL_SANDBOX,
        sandbox::docker::LABEL_OWNER
    );
    let Ok(listed) = Command::new("docker")
        .args([
            "ps",
            "-a",
            "--filter",
            "status=created",
            "--format",
            &format,
        ])
        .output()
    else {
        return;
    };
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let orphans: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (id, cluster, owner) = (fields.next()?, fields.next()?, fields.next()?);
            let test_cluster = cluster.len() == 13
                && cluster.starts_with('t')
                && cluster[1..].bytes().all(|b| b.is_ascii_hexdigit());
            let (owner_host, pid) = owner.split_once(':')?;
            let gone = owner_host == host.trim()
                && !std::path::Path::new(&format!("/proc/{pid}")).exists();
            (test_cluster && gone).then(|| id.to_owned())
        })
        .collect();
    if !orphans.is_empty() {
        let _ = Command::new("docker")
            .arg("rm")
            .arg("-f")
            .args(&orphans)
            .output();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        remove_orphaned_test_containers();
        let listed = Command::new("docker")
            .args(["ps", "-aq", "--filter"])
            .arg(format!("label={}={}", sandbox::LABEL_SANDBOX, self.prefix))
            .output();
        if let Ok(listed) = listed {
            let ids: Vec<String> = String::from_utf8_lossy(&listed.stdout)
                .split_whitespace()
                .map(str::to_owned)
                .collect();
            if !ids.is_empty() {
                let _ = Command::new("docker")
                    .arg("rm")
                    .arg("-f")
                    .args(&ids)
                    .output();
            }
        }
    }
}

impl Default for Cluster {
    fn default() -> Self {
        Self::new()
    }
}

pub async fn get_json(http: &reqwest::Client, url: &str) -> (u16, Value) {
    let response = http.get(url).send().await.expect("server answers");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// The `/metrics` page of `base`.
pub async fn metrics_text(http: &reqwest::Client, base: &str) -> String {
    http.get(format!("{base}/metrics"))
        .send()
        .await
        .expect("metrics answer")
        .text()
        .await
        .expect("metrics body")
}

/// The sum, over the `/metrics` pages of `bases`, of every sample of `name` whose labels
/// include all of `labels`.
pub async fn metric_sum(
    http: &reqwest::Client,
    bases: &[&str],
    name: &str,
    labels: &[(&str, &str)],
) -> f64 {
    let mut sum = 0.0;
    for base in bases {
        let text = metrics_text(http, base).await;
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let (metric, rest) = series.split_once('{').unwrap_or((series, "}"));
            if metric == name
                && labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
            {
                sum += value.parse::<f64>().expect("a sample value");
            }
        }
    }
    sum
}

/// The value of one Prometheus sample (`name{labels}`), or 0 when absent.
pub async fn metric(http: &reqwest::Client, base: &str, sample: &str) -> f64 {
    let text = metrics_text(http, base).await;
    text.lines()
        .find_map(|line| {
            line.strip_prefix(sample)
                .and_then(|rest| rest.strip_prefix(' '))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0.0)
}

/// A Redis server of the test's own (the real `redis-server` binary), on its own port, so a
/// test can stop and restart it without disturbing others.
#[derive(Debug)]
pub struct PrivateRedis {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// AOF with fsync on every write, stopped gracefully: a restart keeps every key.
    persistent: bool,
}

impl PrivateRedis {
    /// Without persistence: a restart starts empty.
    pub fn start() -> Self {
        Self::start_with(false)
    }

    /// With AOF (`appendfsync always`) and a graceful stop: an outage, not a data loss.
    pub fn start_persistent() -> Self {
        Self::start_with(true)
    }

    fn start_with(persistent: bool) -> Self {
        let mut redis = Self {
            port: server_port(),
            dir: tempfile::tempdir().expect("tempdir"),
            child: None,
            persistent,
        };
        redis.restart();
        redis
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// (Re)starts the server on the same port and data folder; waits until it answers.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let (appendonly, fsync) = if self.persistent {
            ("yes", "always")
        } else {
            ("no", "everysec")
        };
        let child = Command::new("redis-server")
            .args([
                "--bind",
                "127.0.0.1",
                "--port",
                &self.port.to_string(),
                "--save",
                "",
                "--appendonly",
                appendonly,
                "--appendfsync",
                fsync,
                "--dir",
            ])
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (scripts/cluster services installs it)");
        self.child = Some(child);
        // Milliseconds here; the deadline only bounds a failure (a slow machine, a busy one).
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "private redis did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the server (SIGTERM when persistent, so it finishes its AOF) and waits until the
    /// port refuses connections.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if self.persistent {
                let _ = Command::new("kill").arg(child.id().to_string()).status();
                let deadline = Instant::now() + Duration::from_secs(60);
                while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Cluster {
    /// Starts `codegen model-server` (a scripted, fake model behind the real OpenAI-compatible
    /// HTTP API) with `script`, and points every process started afterwards at it.
    pub async fn scripted_model(&mut self, script: &std::path::Path) -> Process {
        self.scripted_model_logged(script, None).await
    }

    /// [`Self::scripted_model`], writing every request it answered to `requests` (one JSON
    /// line each: phase, function, message count, last message, tools offered).
    pub async fn scripted_model_logged(
        &mut self,
        script: &std::path::Path,
        requests: Option<&std::path::Path>,
    ) -> Process {
        let port = free_port();
        let log = self.dir.path().join("model-server.log");
        let file = std::fs::File::create(&log).expect("log file");
        let mut command = Command::new(binary());
        command
            .arg("model-server")
            .arg("--script")
            .arg(script)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"));
        if let Some(requests) = requests {
            command.arg("--request-log").arg(requests);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log file"))
            .stderr(file)
            .spawn()
            .expect("codegen model-server starts");
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "model server did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.extra_env
            .push(("CODEGEN__MODEL__PROVIDER".into(), "openai".into()));
        self.extra_env.push((
            "CODEGEN__MODEL__BASE_URL".into(),
            format!("http://127.0.0.1:{port}/v1"),
        ));
        self.extra_env
            .push(("CODEGEN__MODEL__API_KEY".into(), "not-a-real-key".into()));
        // A script's latencies are per answer (a plan at once, code after 300 ms), not a
        // server's pace: the adaptive limit would read them as calls queued and hold the calls
        // the tests mean to overlap. Its own tests give it a server that has a pace.
        self.extra_env.push((
            "CODEGEN__MODEL__ADAPTIVE_CONCURRENCY".into(),
            "false".into(),
        ));
        Process {
            name: "model-server".into(),
            child,
            log,
        }
    }

    /// `POST /v1/jobs`; status and answer.
    pub async fn submit_job(&self, body: Value) -> (u16, Value) {
        let response = self
            .http
            .post(format!("{}/v1/jobs", self.url()))
            .json(&body)
            .send()
            .await
            .expect("coordinator answers");
        let status = response.status().as_u16();
        (status, response.json().await.expect("json answer"))
    }

    /// The whole progress stream of a finished job (`GET /v1/jobs/{id}/events`), as sent.
    pub async fn job_events(&self, id: &str) -> String {
        self.http
            .get(format!("{}/v1/jobs/{id}/events", self.url()))
            .send()
            .await
            .expect("events answer")
            .text()
            .await
            .expect("events body")
    }

    /// `method url` as the tenant of API key `key`, with an optional JSON body: the status,
    /// `Retry-After` (seconds) and the JSON answer (`Null` when it has none).
    pub async fn request_as(
        &self,
        method: reqwest::Method,
        url: &str,
        key: &str,
        body: Option<Value>,
    ) -> (u16, Option<u64>, Value) {
        let mut request = self.http.request(method, url).bearer_auth(key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("coordinator answers");
        let status = response.status().as_u16();
        let retry = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()?.parse().ok());
        (status, retry, response.json().await.unwrap_or(Value::Null))
    }

    /// Polls job `id` as the tenant of `key` until it has ended (succeeded, failed or
    /// cancelled), up to ten minutes (a job takes seconds here: the deadline only bounds a
    /// failure, on however slow a machine).
    pub async fn wait_ended_as(&self, id: &str, key: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(600);
        let url = format!("{}/v1/jobs/{id}", self.url());
        loop {
            let (status, _, body) = self.request_as(reqwest::Method::GET, &url, key, None).await;
            assert_eq!(status, 200, "{body}");
            if ["succeeded", "failed", "cancelled"].contains(&body["status"].as_str().unwrap_or(""))
            {
                return body;
            }
            assert!(Instant::now() < deadline, "job {id} never finished: {body}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Polls a job until it is final, up to `timeout`.
    pub async fn wait_job(&self, id: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let (status, body) =
                get_json(&self.http, &format!("{}/v1/jobs/{id}", self.url())).await;
            assert_eq!(status, 200, "{body}");
            if body["status"] == "succeeded" || body["status"] == "failed" {
                return body;
            }
            assert!(
                Instant::now() < deadline,
                "job {id} not finished after {timeout:?}: {body}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

// ------------------------------------------------------------------------------------------
// Sandbox tests: a Docker sandbox of the test's own, used directly (no cluster).

/// A `DockerSandbox` with its own cluster label and warm pool, for tests against the real
/// Docker engine. `stop` removes its containers; dropping it without `stop` removes them with
/// the `docker` CLI.
#[derive(Debug)]
pub struct TestSandbox {
    pub sandbox: sandbox::DockerSandbox,
    pub options: sandbox::Options,
    cancel: tokio_util::sync::CancellationToken,
    service: Option<tokio::task::JoinHandle<()>>,
}

/// The limits a probe read from inside a sandbox container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxLimits {
    pub pids_max: i64,
    pub memory_bytes: u64,
    pub memsw_bytes: u64,
    pub uid: u32,
    pub cap_eff: u64,
    pub no_new_privs: bool,
    pub hostname: String,
}

impl TestSandbox {
    /// Options for a test: a fresh cluster label, the given pool size.
    pub fn options(pool_size: usize) -> sandbox::Options {
        sandbox::Options {
            cluster: format!("t{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
            pool_size,
            // The pool tests count containers: one language keeps the arithmetic simple.
            languages: "python".into(),
            ..sandbox::Options::default()
        }
    }

    /// Starts the pool service and waits until the pool is warm.
    pub async fn start(options: sandbox::Options) -> Self {
        let (sandbox, service) = sandbox::DockerSandbox::build(options.clone());
        let cancel = tokio_util::sync::CancellationToken::new();
        let service = tokio::spawn(service.run(cancel.clone()));
        if options.pool_size > 0 {
            sandbox
                .warm_up(Duration::from_secs(120))
                .await
                .expect("the sandbox pool warms up (is the image built? sandbox-images/build)");
        }
        Self {
            sandbox,
            options,
            cancel,
            service: Some(service),
        }
    }

    /// A Python request with generous limits: two minutes for programs of milliseconds, so
    /// that no machine is too slow for them (a test of a limit sets its own).
    pub fn request(code: &str) -> proto::ExecutionRequest {
        proto::ExecutionRequest {
            language: proto::Language::Python,
            code: code.into(),
            stdin: None,
            test: None,
            timeout_ms: 120_000,
            cpu_time_ms: None,
            compile_timeout_ms: None,
            memory_mb: sandbox::Options::default().pool_memory_mb,
            fresh_container: false,
            files: Default::default(),
            return_files: Vec::new(),
        }
    }

    pub async fn run_request(&self, request: &proto::ExecutionRequest) -> proto::ExecutionResult {
        sandbox::Sandbox::run(&self.sandbox, request)
            .await
            .expect("the sandbox answers with a verdict")
    }

    pub async fn run(&self, code: &str) -> proto::ExecutionResult {
        self.run_request(&Self::request(code)).await
    }

    /// Runs `code` and asserts it passed; returns its stdout.
    pub async fn pass(&self, code: &str) -> String {
        let result = self.run(code).await;
        assert_eq!(
            result.status,
            proto::Status::Passed,
            "expected a pass: {result:#?}"
        );
        result.stdout
    }

    /// Reads the limits in force from inside a container of the pool (with the memory limit
    /// of `memory_mb`).
    pub async fn probe(&self, memory_mb: u64) -> SandboxLimits {
        let mut request = Self::request(PROBE);
        request.memory_mb = memory_mb;
        let result = self.run_request(&request).await;
        assert_eq!(result.status, proto::Status::Passed, "probe: {result:#?}");
        let v: Value = serde_json::from_str(result.stdout.trim()).expect("probe output");
        SandboxLimits {
            pids_max: v["pids_max"]
                .as_str()
                .unwrap_or("")
                .trim()
                .parse()
                .unwrap_or(-1),
            memory_bytes: v["memory"].as_u64().unwrap_or(0),
            memsw_bytes: v["memsw"].as_u64().unwrap_or(0),
            uid: v["uid"].as_u64().unwrap_or(0) as u32,
            cap_eff: v["cap_eff"].as_u64().unwrap_or(u64::MAX),
            no_new_privs: v["no_new_privs"].as_bool().unwrap_or(false),
            hostname: v["hostname"].as_str().unwrap_or("").to_owned(),
        }
    }

    /// Refuses (panics) unless the pids and memory limits a bomb relies on are in force in
    /// the container a bomb of `memory_mb` would run in.
    pub async fn require_limits(&self, memory_mb: u64) -> SandboxLimits {
        let limits = self.probe(memory_mb).await;
        let memory = (memory_mb + self.options.runner_memory_mb) * 1024 * 1024;
        assert!(
            limits.pids_max > 0 && limits.pids_max <= self.options.pids_limit,
            "refusing to run a bomb: pids.max is {} in the container: {limits:?}",
            limits.pids_max
        );
        assert!(
            limits.memory_bytes == memory && limits.memsw_bytes == memory,
            "refusing to run a bomb: memory limit {} / memsw {} in the container, not {memory}",
            limits.memory_bytes,
            limits.memsw_bytes
        );
        assert!(
            limits.uid != 0 && limits.cap_eff == 0 && limits.no_new_privs,
            "refusing to run a bomb: the program is privileged: {limits:?}"
        );
        limits
    }

    /// Hostname of the container the next pooled run lands in (its short id).
    pub async fn hostname(&self) -> String {
        self.pass("import socket; print(socket.gethostname())")
            .await
            .trim()
            .to_owned()
    }

    pub fn stats(&self) -> sandbox::PoolStats {
        self.sandbox.stats()
    }

    /// Stops the pool service, which removes every container; asserts none is left.
    pub async fn stop(mut self) {
        self.cancel.cancel();
        if let Some(service) = self.service.take() {
            service.await.expect("pool service");
        }
        let left = sandbox_containers(&self.options.cluster);
        assert!(left.is_empty(), "containers left after stop: {left:?}");
    }
}

impl Drop for TestSandbox {
    fn drop(&mut self) {
        if self.service.is_some() {
            self.cancel.cancel();
            for id in sandbox_containers(&self.options.cluster) {
                let _ = Command::new("docker")
                    .args(["rm", "-f", &id])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
        }
    }
}

/// A store on the shared Redis under a prefix of its own (records kept ten minutes).
pub fn isolated_redis_store() -> store::RedisStore {
    let options = store::Options {
        url: redis_url(),
        prefix: format!("t{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
        result_ttl: Duration::from_secs(600),
        ..store::Options::default()
    };
    store::RedisStore::build(options)
        .expect("a Redis store builds")
        .0
}

/// Ids of the containers holding session `id`, in any state.
pub fn session_containers(id: &str) -> Vec<String> {
    let output = Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label={}={id}", sandbox::docker::LABEL_SESSION),
        ])
        .output()
        .expect("docker CLI");
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Waits until no container holds session `id` (its worker removes it as the session ends;
/// the five minutes only bound a failure).
pub async fn wait_session_containers_gone(id: &str) {
    let deadline = Instant::now() + Duration::from_secs(300);
    while !session_containers(id).is_empty() {
        assert!(
            Instant::now() < deadline,
            "session {id}'s container is still there"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Ids of the containers carrying a sandbox cluster label.
pub fn sandbox_containers(cluster: &str) -> Vec<String> {
    let output = Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label={}={cluster}", sandbox::LABEL_SANDBOX),
        ])
        .output()
        .expect("docker CLI");
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Prints, as JSON, the limits a program sees from inside its container.
const PROBE: &str = r#"
import json, os, socket
def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        return "error: %s" % e
status = dict(l.split(":", 1) for l in read("/proc/self/status").splitlines() if ":" in l)
print(json.dumps({
    "pids_max": read("/sys/fs/cgroup/pids/pids.max"),
    "memory": int(read("/sys/fs/cgroup/memory/memory.limit_in_bytes")),
    "memsw": int(read("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")),
    "uid": os.getuid(),
    "cap_eff": int(status["CapEff"].strip(), 16),
    "no_new_privs": status["NoNewPrivs"].strip() == "1",
    "hostname": socket.gethostname(),
}))
"#;

/// What a `codegen` client command printed, and how it exited.
#[derive(Debug)]
pub struct CliRun {
    /// The exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl std::fmt::Display for CliRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs `codegen ARGS` (a client command such as `submit` or `batch`) in the workspace root
/// and waits for it, up to `timeout` (then it is killed and the test fails).
pub async fn codegen_cli(args: &[&str], timeout: Duration) -> CliRun {
    let child = tokio::process::Command::new(binary())
        .args(args)
        .current_dir(root())
        .env_remove("CODEGEN_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("codegen starts");
    let output = tokio::time::timeout(timeout, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("codegen {args:?} did not finish within {timeout:?}"))
        .expect("codegen output");
    CliRun {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A RabbitMQ node of the test's own (the real server from Debian's package), on its own
/// ports and data folder, so a test can stop and restart it without disturbing others.
#[derive(Debug)]
pub struct PrivateRabbit {
    pub port: u16,
    dist_port: u16,
    dir: tempfile::TempDir,
    launcher: Option<Child>,
}

impl PrivateRabbit {
    /// Starts a node on fresh ports; a node that dies while booting (a port taken meanwhile) is
    /// started again on others.
    pub fn start() -> Self {
        let mut attempt = 1;
        loop {
            let mut rabbit = Self {
                port: server_port(),
                dist_port: server_port(),
                dir: tempfile::tempdir().expect("tempdir"),
                launcher: None,
            };
            match rabbit.boot() {
                Ok(()) => return rabbit,
                Err(log) if attempt == 3 => panic!("private rabbitmq did not start: {log}"),
                Err(_) => attempt += 1,
            }
        }
    }

    pub fn url(&self) -> String {
        format!("amqp://127.0.0.1:{}/%2f", self.port)
    }

    fn pid_file(&self) -> PathBuf {
        self.dir.path().join("rabbit.pid")
    }

    /// (Re)starts the node on the same ports and data; waits until it takes AMQP connections.
    pub fn restart(&mut self) {
        if let Err(log) = self.boot() {
            panic!("private rabbitmq did not start again: {log}");
        }
    }

    /// Starts the node and waits until it finished booting; on failure, its log.
    fn boot(&mut self) -> Result<(), String> {
        assert!(self.launcher.is_none(), "already running");
        let base = self.dir.path();
        for sub in ["home", "mnesia", "log"] {
            std::fs::create_dir_all(base.join(sub)).expect("rabbit folders");
        }
        std::fs::write(base.join("enabled_plugins"), "[].").expect("plugins file");
        std::fs::write(base.join("rabbitmq.conf"), "").expect("config file");
        std::fs::write(base.join("rabbitmq-env.conf"), "").expect("env file");
        let _ = std::fs::remove_file(self.pid_file());
        let log = std::fs::File::create(base.join("server.log")).expect("log");
        let child = Command::new("/usr/lib/rabbitmq/bin/rabbitmq-server")
            .current_dir(base)
            .env("HOME", base.join("home"))
            .env(
                "RABBITMQ_NODENAME",
                format!("rabbit-t{}@localhost", self.port),
            )
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", base.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", base.join("log"))
            .env("RABBITMQ_PID_FILE", self.pid_file())
            .env("RABBITMQ_CONFIG_FILE", base.join("rabbitmq.conf"))
            .env("RABBITMQ_CONF_ENV_FILE", base.join("rabbitmq-env.conf"))
            .env(
                "RABBITMQ_ENABLED_PLUGINS_FILE",
                base.join("enabled_plugins"),
            )
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("rabbitmq-server is installed (scripts/cluster services installs it)");
        self.launcher = Some(child);
        // The AMQP port opens before the boot ends, and something else may answer on it: ready
        // is our own node saying it booted, still running, and the port taking connections.
        let log_file = base.join("server.log");
        let log = || std::fs::read_to_string(&log_file).unwrap_or_default();
        // Five to eight seconds here, a minute or more on a slow machine: the deadline only
        // bounds a failure.
        const BOOT: Duration = Duration::from_secs(600);
        let deadline = Instant::now() + BOOT;
        loop {
            let exited = self
                .launcher
                .as_mut()
                .is_some_and(|l| l.try_wait().ok().flatten().is_some());
            if exited {
                self.launcher = None;
                return Err(format!("the node exited while booting:\n{}", log()));
            }
            if log().contains("Starting broker... completed")
                && std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.stop();
                return Err(format!("not booted after {BOOT:?}:\n{}", log()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// What the node says about its queues, channels and consumers (`rabbitmqctl`), for a
    /// failure report.
    pub fn state(&self) -> String {
        let node = format!("rabbit-t{}@localhost", self.port);
        let mut report = String::new();
        for args in [
            &[
                "list_queues",
                "name",
                "messages_ready",
                "messages_unacknowledged",
                "consumers",
            ][..],
            &[
                "list_channels",
                "connection",
                "number",
                "consumer_count",
                "messages_unacknowledged",
                "prefetch_count",
            ][..],
            &[
                "list_consumers",
                "queue_name",
                "channel_pid",
                "prefetch_count",
                "active",
            ][..],
        ] {
            let output = Command::new("/usr/lib/rabbitmq/bin/rabbitmqctl")
                .env("HOME", self.dir.path().join("home"))
                .args(["-n", &node, "-q"])
                .args(args)
                .output();
            match output {
                Ok(o) => {
                    report.push_str(&String::from_utf8_lossy(&o.stdout));
                    report.push_str(&String::from_utf8_lossy(&o.stderr));
                }
                Err(e) => report.push_str(&format!("rabbitmqctl: {e}\n")),
            }
        }
        report
    }

    fn vm_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.pid_file())
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok())
    }

    /// Freezes the node (SIGSTOP to the Erlang VM): its connections stay open and every packet
    /// sent to it is taken by the kernel, but nothing answers, as in a partition that drops
    /// packets without an error. [`Self::thaw`] lets it go on.
    pub fn freeze(&self) {
        let pid = self.vm_pid().expect("the node's pid");
        let status = Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status();
        assert!(status.is_ok_and(|s| s.success()), "cannot stop {pid}");
    }

    pub fn thaw(&self) {
        if let Some(pid) = self.vm_pid() {
            let _ = Command::new("kill")
                .args(["-CONT", &pid.to_string()])
                .status();
        }
    }

    /// Stops the node gracefully (SIGTERM to the Erlang VM) and waits for it to exit.
    pub fn stop(&mut self) {
        let Some(mut launcher) = self.launcher.take() else {
            return;
        };
        self.thaw(); // a frozen node would take SIGTERM only once thawed
        if let Some(pid) = self.vm_pid() {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
        // A graceful stop takes seconds; past this the node is killed.
        let deadline = Instant::now() + Duration::from_secs(120);
        while launcher.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = launcher.kill();
        let _ = launcher.wait();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for PrivateRabbit {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Cluster {
    /// Points the processes at another broker (e.g. one the test restarts).
    pub fn with_broker(mut self, url: String) -> Self {
        self.extra_env.push(("CODEGEN__BROKER__URL".into(), url));
        self
    }
}

impl Cluster {
    /// Starts a worker with extra settings and does not wait for it to be ready (for workers
    /// whose dependencies are missing on purpose); returns it and its ops URL.
    pub fn worker_with(&self, name: &str, env: &[(&str, &str)]) -> (Process, String) {
        let port = free_port();
        let mut all: Vec<(&str, String)> =
            vec![("CODEGEN__WORKER__LISTEN", format!("127.0.0.1:{port}"))];
        all.extend(env.iter().map(|(k, v)| (*k, (*v).to_owned())));
        let process = self.spawn(name, "worker", &all);
        (process, format!("http://127.0.0.1:{port}"))
    }
}

/// A scripted (FAKE) model for a diamond `a → (b, c, d) → e`, every answer after `latency_ms`.
pub fn diamond_script(dir: &std::path::Path, latency_ms: u64) -> PathBuf {
    let deps: [(&str, &[&str]); 5] = [
        ("a", &[]),
        ("b", &["a"]),
        ("c", &["a"]),
        ("d", &["a"]),
        ("e", &["b", "c", "d"]),
    ];
    let functions: Vec<Value> = deps
        .iter()
        .map(|(name, d)| {
            serde_json::json!({"name": name, "purpose": "return x plus one", "inputs": [{"name": "x", "type": "int"}],
                   "outputs": {"type": "int", "description": "x + 1"}, "dependencies": d,
                   "complexity": "simple"})
        })
        .collect();
    let mut answers = vec![
        serde_json::json!({"phase": "plan", "latency_ms": latency_ms, "answer": {"functions": functions}}),
    ];
    for (name, _) in deps {
        answers.push(
            serde_json::json!({"phase": "tests", "function": name, "latency_ms": latency_ms,
            "answer": {"cases": [{"name": "one", "kind": "normal", "inputs": {"x": 1},
                                  "expected_output": 2, "expected_error": null}]}}),
        );
        answers.push(serde_json::json!({"phase": "implement", "function": name, "latency_ms": latency_ms,
            "answer": {"code": format!("def {name}(x: int) -> int:\n    \"\"\"x plus one.\"\"\"\n    return x + 1\n"),
                       "analysis": null}}));
    }
    let path = dir.join("diamond.json");
    std::fs::write(&path, serde_json::json!({ "answers": answers }).to_string())
        .expect("script written");
    path
}
