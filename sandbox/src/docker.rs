//! One hardened container per execution, through the Docker Engine API (bollard).

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::models::{ContainerCreateBody, HostConfig, ResourcesUlimits};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptions, InspectContainerOptions,
    KillContainerOptionsBuilder, ListContainersOptionsBuilder, RemoveContainerOptionsBuilder,
    StartContainerOptions,
};
use futures::StreamExt;
use proto::{ExecutionRequest, ExecutionResult, Language, Status};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio::sync::OnceCell;

use crate::{Error, LABEL_SANDBOX, Options, Sandbox};

/// Label naming the process that created a container (`host:pid`), so orphans of a dead
/// worker can be told from containers of a live one on the same engine.
pub const LABEL_OWNER: &str = "org.codegen.owner";

/// The runner prints its result on one line starting with this marker.
const RESULT_MARKER: &str = "@@codegen-result@@ ";

/// Unprivileged uid:gid the runner and the program run as (created in the image).
const SANDBOX_USER: &str = "10001:10001";

#[derive(Debug)]
pub struct DockerSandbox {
    options: Options,
    docker: OnceCell<Docker>,
    owner: String,
}

/// What the runner is sent on stdin.
#[derive(Debug, Serialize)]
struct RunnerRequest<'a> {
    code: &'a str,
    stdin: Option<&'a str>,
    timeout_ms: u64,
    max_output_bytes: u64,
}

/// What the runner prints after the marker.
#[derive(Debug, Deserialize)]
struct RunnerResult {
    #[serde(default)]
    exit_code: Option<i32>,
    #[serde(default)]
    signal: Option<i32>,
    #[serde(default)]
    timed_out: bool,
    #[serde(default)]
    stdout: String,
    #[serde(default)]
    stderr: String,
    #[serde(default)]
    stdout_truncated: bool,
    #[serde(default)]
    stderr_truncated: bool,
    #[serde(default)]
    duration_ms: u64,
    #[serde(default)]
    runner_error: Option<String>,
}

fn unavailable(e: bollard::errors::Error) -> Error {
    Error::Unavailable(e.to_string())
}

impl DockerSandbox {
    pub fn build(options: Options) -> Self {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_else(|_| "unknown".into());
        Self {
            options,
            docker: OnceCell::new(),
            owner: format!("{host}:{}", std::process::id()),
        }
    }

    /// Connects on first use and negotiates the API version (the engine may be older than
    /// bollard's default); a failed attempt is retried on the next call.
    async fn docker(&self) -> Result<&Docker, Error> {
        self.docker
            .get_or_try_init(|| async {
                let docker = if self.options.docker_host.is_empty() {
                    Docker::connect_with_local_defaults()
                } else {
                    Docker::connect_with_host(&self.options.docker_host)
                }
                .map_err(unavailable)?;
                docker.negotiate_version().await.map_err(unavailable)
            })
            .await
    }

    fn image(&self, language: Language) -> &str {
        match language {
            Language::Python => &self.options.python_image,
        }
    }

    fn container_config(&self, request: &ExecutionRequest) -> ContainerCreateBody {
        let mib = 1024 * 1024;
        let memory = i64::try_from(request.memory_mb.saturating_mul(mib)).unwrap_or(i64::MAX);
        let tmpfs_opts = format!(
            "rw,nosuid,nodev,size={}m,uid=10001,gid=10001,mode=0700",
            self.options.tmpfs_mb
        );
        let ulimit = |name: &str, value: i64| ResourcesUlimits {
            name: Some(name.into()),
            soft: Some(value),
            hard: Some(value),
        };
        let host_config = HostConfig {
            network_mode: Some("none".into()),
            readonly_rootfs: Some(true),
            tmpfs: Some(HashMap::from([
                ("/work".to_string(), tmpfs_opts.clone()),
                ("/tmp".to_string(), tmpfs_opts),
            ])),
            memory: Some(memory),
            // Equal to `memory`: no swap on top, so the limit is the real limit.
            memory_swap: Some(memory),
            nano_cpus: Some((self.options.cpus * 1e9) as i64),
            pids_limit: Some(self.options.pids_limit),
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec!["no-new-privileges".into()]),
            init: Some(true),
            ulimits: Some(vec![
                ulimit("nofile", self.options.nofile),
                ulimit("fsize", self.options.fsize_mb * 1024 * 1024),
                ulimit("core", 0),
            ]),
            ipc_mode: Some("private".into()),
            ..Default::default()
        };
        ContainerCreateBody {
            image: Some(self.image(request.language).to_owned()),
            user: Some(SANDBOX_USER.into()),
            // Nothing of the worker's environment leaks in.
            env: Some(vec![]),
            working_dir: Some("/work".into()),
            network_disabled: Some(true),
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            open_stdin: Some(true),
            stdin_once: Some(true),
            tty: Some(false),
            labels: Some(HashMap::from([
                (LABEL_SANDBOX.to_string(), self.options.cluster.clone()),
                (LABEL_OWNER.to_string(), self.owner.clone()),
            ])),
            host_config: Some(host_config),
            ..Default::default()
        }
    }

    /// Removes containers of this cluster whose creating process on this host is gone.
    pub async fn reap_orphans(&self) -> Result<usize, Error> {
        let docker = self.docker().await?;
        let filters = HashMap::from([(
            "label".to_string(),
            vec![format!("{LABEL_SANDBOX}={}", self.options.cluster)],
        )]);
        let containers = docker
            .list_containers(Some(
                ListContainersOptionsBuilder::default()
                    .all(true)
                    .filters(&filters)
                    .build(),
            ))
            .await
            .map_err(unavailable)?;
        let host = self.owner.split(':').next().unwrap_or_default();
        let mut reaped = 0;
        for container in containers {
            let owner = container
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_OWNER))
                .cloned()
                .unwrap_or_default();
            let (owner_host, owner_pid) = owner.split_once(':').unwrap_or(("", ""));
            let alive = owner_host == host
                && owner_pid != std::process::id().to_string()
                && std::path::Path::new(&format!("/proc/{owner_pid}")).exists();
            let Some(id) = container.id else { continue };
            if owner_host == host && !alive {
                let _ = docker
                    .remove_container(
                        &id,
                        Some(RemoveContainerOptionsBuilder::default().force(true).build()),
                    )
                    .await;
                reaped += 1;
            }
        }
        Ok(reaped)
    }

    async fn run_in(
        &self,
        docker: &Docker,
        id: &str,
        request: &ExecutionRequest,
    ) -> Result<ExecutionResult, Error> {
        let attached = docker
            .attach_container(
                id,
                Some(
                    AttachContainerOptionsBuilder::default()
                        .stdin(true)
                        .stdout(true)
                        .stderr(true)
                        .stream(true)
                        .build(),
                ),
            )
            .await
            .map_err(unavailable)?;
        let mut output = attached.output;
        let mut input = attached.input;
        docker
            .start_container(id, None::<StartContainerOptions>)
            .await
            .map_err(unavailable)?;

        let payload = serde_json::to_vec(&RunnerRequest {
            code: &request.code,
            stdin: request.stdin.as_deref(),
            timeout_ms: request.timeout_ms,
            max_output_bytes: self.options.max_output_bytes,
        })
        .map_err(|e| Error::Runner(e.to_string()))?;
        input
            .write_all(&payload)
            .await
            .map_err(|e| Error::Unavailable(format!("writing to the runner: {e}")))?;
        // EOF on the runner's stdin (stdin_once) marks the end of the request.
        input
            .shutdown()
            .await
            .map_err(|e| Error::Unavailable(format!("closing the runner's stdin: {e}")))?;

        // The runner's own output is one result line of at most twice the capture cap, JSON
        // escaped; anything past this bound is a runner that lost its way.
        let limit = usize::try_from(self.options.max_output_bytes)
            .unwrap_or(usize::MAX / 8)
            .saturating_mul(12)
            .saturating_add(64 * 1024);
        let deadline = Duration::from_millis(request.timeout_ms) + self.options.grace;
        let mut stdout = Vec::new();
        let mut diagnostics = Vec::new();
        let collected = tokio::time::timeout(deadline, async {
            while let Some(chunk) = output.next().await {
                match chunk {
                    Ok(LogOutput::StdOut { message }) => {
                        if stdout.len() + message.len() > limit {
                            return Err(Error::Runner("runner output over its bound".into()));
                        }
                        stdout.extend_from_slice(&message);
                    }
                    Ok(LogOutput::StdErr { message }) => {
                        if diagnostics.len() < 8192 {
                            diagnostics.extend_from_slice(&message);
                        }
                    }
                    Ok(_) => {}
                    Err(e) => return Err(unavailable(e)),
                }
            }
            Ok(())
        })
        .await;
        let timed_out_outside = match collected {
            Ok(Ok(())) => false,
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                let _ = docker
                    .kill_container(
                        id,
                        Some(
                            KillContainerOptionsBuilder::default()
                                .signal("KILL")
                                .build(),
                        ),
                    )
                    .await;
                true
            }
        };

        // Wait for the container to stop so its state (OOM kill, exit code) is final.
        let mut state = None;
        for _ in 0..50 {
            let inspect = docker
                .inspect_container(id, None::<InspectContainerOptions>)
                .await
                .map_err(unavailable)?;
            let s = inspect.state.unwrap_or_default();
            if s.running != Some(true) {
                state = Some(s);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let oom_killed = state.as_ref().and_then(|s| s.oom_killed).unwrap_or(false);

        if timed_out_outside {
            return Ok(ExecutionResult {
                status: Status::Timeout,
                exit_code: None,
                stdout: String::new(),
                stderr: String::new(),
                truncated: false,
                duration_ms: u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX),
                reason: Some("the container did not finish by the deadline and was killed".into()),
            });
        }

        let text = String::from_utf8_lossy(&stdout);
        let Some(line) = text.lines().find_map(|l| l.strip_prefix(RESULT_MARKER)) else {
            if oom_killed {
                return Ok(ExecutionResult::error(
                    Status::MemoryLimit,
                    "the container ran out of memory before the runner could report",
                ));
            }
            return Err(Error::Runner(format!(
                "no result from the runner (exit {:?}): {}",
                state.and_then(|s| s.exit_code),
                String::from_utf8_lossy(&diagnostics).trim()
            )));
        };
        let result: RunnerResult = serde_json::from_str(line)
            .map_err(|e| Error::Runner(format!("unreadable runner result: {e}")))?;
        if let Some(error) = result.runner_error {
            return Err(Error::Runner(error));
        }
        Ok(verdict(result, oom_killed))
    }
}

/// Maps what the runner saw to a verdict.
fn verdict(result: RunnerResult, oom_killed: bool) -> ExecutionResult {
    const SIGKILL: i32 = 9;
    let status = if result.timed_out {
        Status::Timeout
    } else if oom_killed || result.signal == Some(SIGKILL) {
        // Inside the sandbox only the kernel's OOM killer sends SIGKILL unasked-for.
        Status::MemoryLimit
    } else if result.exit_code == Some(0) {
        Status::Passed
    } else {
        Status::Failed
    };
    ExecutionResult {
        status,
        exit_code: result.exit_code,
        stdout: result.stdout,
        stderr: result.stderr,
        truncated: result.stdout_truncated || result.stderr_truncated,
        duration_ms: result.duration_ms,
        reason: match status {
            Status::MemoryLimit => Some("killed at the memory limit".into()),
            Status::Timeout => Some("killed at the wall-clock limit".into()),
            _ => result.signal.map(|s| format!("killed by signal {s}")),
        },
    }
}

#[async_trait]
impl Sandbox for DockerSandbox {
    async fn run(&self, request: &ExecutionRequest) -> Result<ExecutionResult, Error> {
        let docker = self.docker().await?;
        let created = docker
            .create_container(
                None::<CreateContainerOptions>,
                self.container_config(request),
            )
            .await
            .map_err(|e| match e {
                bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                } => Error::Config(format!(
                    "image {} not found: build it with sandbox-images/build",
                    self.image(request.language)
                )),
                e => unavailable(e),
            })?;
        let outcome = self.run_in(docker, &created.id, request).await;
        if let Err(e) = docker
            .remove_container(
                &created.id,
                Some(RemoveContainerOptionsBuilder::default().force(true).build()),
            )
            .await
        {
            tracing::warn!(container = %created.id, error = %e, "cannot remove sandbox container");
        }
        outcome
    }

    async fn health(&self) -> Result<(), String> {
        let docker = self.docker().await.map_err(|e| format!("docker: {e}"))?;
        docker.ping().await.map_err(|e| format!("docker: {e}"))?;
        for language in Language::ALL {
            let image = self.image(*language);
            if docker.inspect_image(image).await.is_err() {
                return Err(format!(
                    "docker: sandbox image {image} missing (build it with sandbox-images/build)"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runner(exit_code: Option<i32>, signal: Option<i32>, timed_out: bool) -> RunnerResult {
        RunnerResult {
            exit_code,
            signal,
            timed_out,
            stdout: "out".into(),
            stderr: String::new(),
            stdout_truncated: false,
            stderr_truncated: true,
            duration_ms: 7,
            runner_error: None,
        }
    }

    #[test]
    fn verdicts_follow_exit_signal_and_deadline() {
        assert_eq!(
            verdict(runner(Some(0), None, false), false).status,
            Status::Passed
        );
        assert_eq!(
            verdict(runner(Some(1), None, false), false).status,
            Status::Failed
        );
        assert_eq!(
            verdict(runner(None, Some(9), true), false).status,
            Status::Timeout
        );
        assert_eq!(
            verdict(runner(None, Some(9), false), false).status,
            Status::MemoryLimit
        );
        assert_eq!(
            verdict(runner(Some(0), None, false), true).status,
            Status::MemoryLimit
        );
        assert_eq!(
            verdict(runner(None, Some(15), false), false).status,
            Status::Failed
        );
        assert!(verdict(runner(Some(0), None, false), false).truncated);
    }

    #[test]
    fn container_is_hardened() {
        let sandbox = DockerSandbox::build(Options::default());
        let config = sandbox.container_config(&ExecutionRequest {
            language: Language::Python,
            code: String::new(),
            stdin: None,
            timeout_ms: 1000,
            memory_mb: 128,
        });
        let host = config.host_config.unwrap();
        assert_eq!(host.network_mode.as_deref(), Some("none"));
        assert_eq!(host.readonly_rootfs, Some(true));
        assert_eq!(host.memory, Some(128 * 1024 * 1024));
        assert_eq!(host.memory_swap, host.memory);
        assert_eq!(host.cap_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(host.pids_limit, Some(64));
        assert_eq!(host.init, Some(true));
        assert!(host.binds.is_none() && host.mounts.is_none());
        assert_eq!(config.env, Some(vec![]));
        assert_eq!(config.user.as_deref(), Some(SANDBOX_USER));
    }
}
