//! The compose stack of `deploy/compose`, driven from tests as a project of its own (its own
//! network, volumes and published ports), with faults injected by docker commands on its own
//! containers only. Needs the images of `deploy/images/build` (and the sandbox images); the
//! tests that use it are the longer run of `scripts/test-deploy`.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::{Cluster, free_port, root};

/// One running stack; `docker-compose down -v` when dropped.
#[derive(Debug)]
pub struct Stack {
    pub project: String,
    pub port: u16,
    pub prometheus_port: u16,
    env: Vec<(String, String)>,
}

impl Stack {
    /// Brings the stack up with `model_script` as the FAKE model's answers and waits until the
    /// proxy answers ready and every worker is healthy (bounded).
    pub fn up(model_script: &Path) -> Self {
        let project = format!("cgt{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        let (port, prometheus_port) = (free_port(), free_port());
        let env = vec![
            ("COMPOSE_PROJECT_NAME".into(), project.clone()),
            (
                "CODEGEN_MODEL_SCRIPT".into(),
                model_script.display().to_string(),
            ),
            ("CODEGEN_LOG_FORMAT".into(), "text".into()),
            ("CODEGEN_PORT".into(), port.to_string()),
            ("PROMETHEUS_PORT".into(), prometheus_port.to_string()),
        ];
        let stack = Self {
            project,
            port,
            prometheus_port,
            env,
        };
        let out = stack.compose(&["up", "-d"]);
        assert!(out.status.success(), "compose up: {}", text(&out));
        // Minutes on a slow machine (every container and its health check): the
        // deadline only bounds a failure.
        stack.wait_ready(Duration::from_secs(1200));
        stack
    }

    pub fn compose(&self, args: &[&str]) -> Output {
        let mut command = Command::new("docker-compose");
        command
            .arg("-f")
            .arg(root().join("deploy/compose/docker-compose.yml"))
            .arg("-p")
            .arg(&self.project)
            .args(args);
        for (k, v) in &self.env {
            command.env(k, v);
        }
        command.output().expect("docker-compose runs")
    }

    /// The container of `service` (compose 1.29 names it `<project>_<service>_1`).
    pub fn container(&self, service: &str) -> String {
        format!("{}_{service}_1", self.project)
    }

    pub fn network(&self) -> String {
        format!("{}_default", self.project)
    }

    /// `docker ARGS`, asserting success.
    pub fn docker(&self, args: &[&str]) -> String {
        let out = Command::new("docker")
            .args(args)
            .output()
            .expect("docker runs");
        assert!(out.status.success(), "docker {args:?}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn kill(&self, service: &str) {
        self.docker(&["kill", &self.container(service)]);
    }

    pub fn pause(&self, service: &str) {
        self.docker(&["pause", &self.container(service)]);
    }

    pub fn unpause(&self, service: &str) {
        self.docker(&["unpause", &self.container(service)]);
    }

    pub fn stop(&self, service: &str, grace_secs: u32) {
        self.docker(&[
            "stop",
            "-t",
            &grace_secs.to_string(),
            &self.container(service),
        ]);
    }

    pub fn start(&self, service: &str) {
        self.docker(&["start", &self.container(service)]);
    }

    /// Cuts `service` off the stack's network (its peers see it vanish).
    pub fn disconnect(&self, service: &str) {
        self.docker(&[
            "network",
            "disconnect",
            &self.network(),
            &self.container(service),
        ]);
    }

    /// Puts `service` back on the network under its service name.
    pub fn connect(&self, service: &str) {
        self.docker(&[
            "network",
            "connect",
            "--alias",
            service,
            &self.network(),
            &self.container(service),
        ]);
    }

    /// The health docker reports for `service` ("healthy", "starting", ...).
    /// The service's address on the stack's network (the host reaches it: the network is the
    /// test's own bridge).
    pub fn address(&self, service: &str) -> String {
        self.docker(&[
            "inspect",
            "-f",
            "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
            &self.container(service),
        ])
        .trim()
        .to_owned()
    }

    fn netns(&self, service: &str, args: &[&str]) {
        let pid = self.docker(&["inspect", "-f", "{{.State.Pid}}", &self.container(service)]);
        let out = Command::new("nsenter")
            .args(["-t", pid.trim(), "-n", "iptables", "-w"])
            .args(args)
            .output()
            .expect("nsenter runs");
        assert!(
            out.status.success(),
            "iptables {args:?} in {service}: {}",
            text(&out)
        );
    }

    /// Drops every packet between `service` and each of `peers`, both ways, in `service`'s
    /// network namespace: no connection is refused or reset, nothing answers (a lost route, a
    /// firewall change, a dead switch port). [`Self::restore_packets`] ends it.
    pub fn drop_packets(&self, service: &str, peers: &[&str]) {
        for peer in peers {
            let address = self.address(peer);
            self.netns(service, &["-I", "OUTPUT", "-d", &address, "-j", "DROP"]);
            self.netns(service, &["-I", "INPUT", "-s", &address, "-j", "DROP"]);
        }
    }

    pub fn restore_packets(&self, service: &str) {
        self.netns(service, &["-F", "OUTPUT"]);
        self.netns(service, &["-F", "INPUT"]);
    }

    pub fn health(&self, service: &str) -> String {
        let out = Command::new("docker")
            .args([
                "inspect",
                "-f",
                "{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}",
                &self.container(service),
            ])
            .output()
            .expect("docker runs");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Waits until every codegen service is healthy.
    pub fn wait_ready(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let services = [
            "coordinator-1",
            "coordinator-2",
            "worker-1",
            "worker-2",
            "worker-3",
            "proxy",
        ];
        loop {
            let waiting: Vec<_> = services
                .iter()
                .filter(|s| self.health(s) != "healthy")
                .collect();
            if waiting.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not healthy after {timeout:?}: {waiting:?}\n{}",
                self.logs(&[])
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    /// The services' logs (all of them when `services` is empty), for a failure report.
    pub fn logs(&self, services: &[&str]) -> String {
        let mut args = vec!["logs", "--no-color", "--tail", "200"];
        args.extend_from_slice(services);
        text(&self.compose(&args))
    }

    /// A client of the stack's API (through the proxy).
    pub fn client(&self) -> Cluster {
        let mut cluster = Cluster::new();
        cluster.coordinator_port = self.port;
        cluster
    }

    /// Sandbox containers of this stack that still exist (any state).
    pub fn sandboxes(&self) -> Vec<String> {
        let out = self.docker(&[
            "ps",
            "-a",
            "--filter",
            &format!("label=org.codegen.sandbox={}", self.project),
            "--format",
            "{{.Names}} {{.Status}}",
        ]);
        out.lines().map(str::to_owned).collect()
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        if std::env::var_os("CODEGEN_TEST_KEEP_STACK").is_some() {
            return;
        }
        let _ = self.compose(&["down", "-v", "--timeout", "10"]);
        // Sandboxes the workers left behind (a worker killed mid-run) go with the stack.
        let leftovers = Command::new("docker")
            .args([
                "ps",
                "-aq",
                "--filter",
                &format!("label=org.codegen.sandbox={}", self.project),
            ])
            .output();
        if let Ok(out) = leftovers {
            for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Command::new("docker").args(["rm", "-f", id]).output();
            }
        }
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
