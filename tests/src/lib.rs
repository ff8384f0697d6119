//! Harness for the end-to-end tests.
//!
//! The tests run against the real RabbitMQ and Redis that `scripts/cluster services` starts
//! and the real Docker engine with the sandbox image built by `sandbox-images/build`. Each
//! test gets its own queue and key prefix and its own ports, and spawns its own `codegen`
//! coordinator and worker processes (the binary built by `cargo build --bin codegen`), so tests
//! can run in parallel and can kill or restart processes without disturbing each other.

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
        let prefix = format!("t{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        Self {
            prefix,
            redis_url: redis_url(),
            coordinator_port: free_port(),
            dir: tempfile::tempdir().expect("tempdir"),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(120))
                .build()
                .expect("http client"),
            extra_env: Vec::new(),
        }
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

    /// Polls `/readyz` until 200; panics with the process log after 60 s.
    pub async fn wait_ready(&self, base: &str, process: &Process) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let response = self.http.get(format!("{base}/readyz")).send().await;
            if response.is_ok_and(|r| r.status() == 200) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} not ready after 60s; log:\n{}",
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

    /// Deletes this cluster's queues from the shared broker.
    pub async fn cleanup(self) {
        let Ok(connection) =
            Connection::connect(&amqp_url(), ConnectionProperties::default()).await
        else {
            return;
        };
        if let Ok(channel) = connection.create_channel().await {
            for queue in [
                format!("{}.tasks", self.prefix),
                format!("{}.tasks.dead", self.prefix),
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

/// The value of one Prometheus sample (`name{labels}`), or 0 when absent.
pub async fn metric(http: &reqwest::Client, base: &str, sample: &str) -> f64 {
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("metrics answer")
        .text()
        .await
        .expect("metrics body");
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
}

impl PrivateRedis {
    pub fn start() -> Self {
        let mut redis = Self {
            port: free_port(),
            dir: tempfile::tempdir().expect("tempdir"),
            child: None,
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
        let child = Command::new("redis-server")
            .args([
                "--bind",
                "127.0.0.1",
                "--port",
                &self.port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
            ])
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (scripts/cluster services installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "private redis did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
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
