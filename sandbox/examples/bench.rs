//! Sandbox overhead benchmark, measured in one run on this machine:
//!
//! 1. bare `python3 -I -S -c pass` on the host (spawn and wait; `--python`, default the
//!    distribution's `/usr/bin/python3`, not a version-manager shim), interleaved with
//! 2. one pooled execution of `pass` through `DockerSandbox::run` (a warm container),
//! 3. one pooled execution whose memory limit differs from the warm container's (a
//!    `docker update` at checkout),
//! 4. one execution in a fresh container (`fresh_container: true`),
//! 5. the transport the pool avoids: `docker exec python3 -I -S -c pass` in a running
//!    container of the same image,
//! 6. executions per second at saturation: `--clients` concurrent callers for `--seconds`.
//!
//! Every figure is the wall time the caller sees, from just before the call to just after it
//! returns; p50 and p95 over the runs. Needs the Docker engine and the sandbox image
//! (`sandbox-images/build`).
//!
//! ```sh
//! cargo run --release -p sandbox --example bench -- --runs 200 --fresh-runs 20 \
//!     --clients 4 --pool-size 4 --seconds 10
//! ```

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptionsBuilder};
use futures::StreamExt;
use proto::{ExecutionRequest, Language, Status};
use sandbox::{DockerSandbox, Options, Sandbox};

struct Args {
    runs: usize,
    fresh_runs: usize,
    clients: usize,
    pool_size: usize,
    seconds: u64,
    code: String,
    python: String,
}

fn args() -> Args {
    let mut args = Args {
        runs: 200,
        fresh_runs: 20,
        clients: 4,
        pool_size: 4,
        seconds: 10,
        code: "pass".into(),
        python: "/usr/bin/python3".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--runs" => args.runs = value().parse().expect("--runs N"),
            "--fresh-runs" => args.fresh_runs = value().parse().expect("--fresh-runs N"),
            "--clients" => args.clients = value().parse().expect("--clients N"),
            "--pool-size" => args.pool_size = value().parse().expect("--pool-size N"),
            "--seconds" => args.seconds = value().parse().expect("--seconds N"),
            "--code" => args.code = value(),
            "--python" => args.python = value(),
            other => {
                panic!("unknown argument {other}; see the doc comment of sandbox/examples/bench.rs")
            }
        }
    }
    args
}

fn request(code: &str, fresh: bool) -> ExecutionRequest {
    ExecutionRequest {
        language: Language::Python,
        code: code.into(),
        stdin: None,
        test: None,
        timeout_ms: 10_000,
        cpu_time_ms: None,
        compile_timeout_ms: None,
        memory_mb: Options::default().pool_memory_mb,
        fresh_container: fresh,
        files: Default::default(),
        return_files: Vec::new(),
    }
}

fn bare_python(python: &str) -> Duration {
    let started = Instant::now();
    let status = Command::new(python)
        .args(["-I", "-S", "-c", "pass"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("python3 runs on the host");
    assert!(status.success());
    started.elapsed()
}

async fn timed(sandbox: &DockerSandbox, request: &ExecutionRequest) -> Duration {
    let started = Instant::now();
    let result = sandbox.run(request).await.expect("the sandbox runs");
    let elapsed = started.elapsed();
    assert_eq!(result.status, Status::Passed, "{result:?}");
    elapsed
}

/// `docker exec` of a bare `python3 -I -S -c pass` into a plain running container.
async fn docker_exec(runs: usize) -> Vec<Duration> {
    let docker = Docker::connect_with_local_defaults()
        .expect("docker")
        .negotiate_version()
        .await
        .expect("docker API");
    let id = docker
        .create_container(
            None::<CreateContainerOptions>,
            ContainerCreateBody {
                image: Some(Options::default().image(Language::Python)),
                cmd: Some(vec!["sleep".into(), "infinity".into()]),
                user: Some("10002:10002".into()),
                host_config: Some(HostConfig {
                    network_mode: Some("none".into()),
                    readonly_rootfs: Some(true),
                    cap_drop: Some(vec!["ALL".into()]),
                    init: Some(true),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await
        .expect("exec container")
        .id;
    docker
        .start_container(
            &id,
            None::<bollard::query_parameters::StartContainerOptions>,
        )
        .await
        .expect("start");
    let mut samples = Vec::new();
    for i in 0..runs + 5 {
        let started = Instant::now();
        let exec = docker
            .create_exec(
                &id,
                CreateExecOptions {
                    cmd: Some(vec!["python3", "-I", "-S", "-c", "pass"]),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    ..Default::default()
                },
            )
            .await
            .expect("create exec");
        if let StartExecResults::Attached { mut output, .. } =
            docker.start_exec(&exec.id, None).await.expect("start exec")
        {
            while output.next().await.is_some() {}
        }
        if i >= 5 {
            samples.push(started.elapsed());
        }
    }
    let _ = docker
        .remove_container(
            &id,
            Some(RemoveContainerOptionsBuilder::default().force(true).build()),
        )
        .await;
    samples
}

fn percentiles(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let at = |q: f64| {
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples[i].as_secs_f64() * 1000.0
    };
    (at(0.5), at(0.95))
}

#[tokio::main]
async fn main() {
    let args = args();
    let (sandbox, service) = DockerSandbox::build(Options {
        cluster: format!("bench-{}", std::process::id()),
        pool_size: args.pool_size,
        max_runs_per_container: u64::MAX,
        ..Options::default()
    });
    let cancel = tokio_util::sync::CancellationToken::new();
    let service = tokio::spawn(service.run(cancel.clone()));
    sandbox
        .warm_up(Duration::from_secs(120))
        .await
        .expect("warm pool");

    let pooled = request(&args.code, false);
    for _ in 0..10 {
        timed(&sandbox, &pooled).await;
        bare_python(&args.python);
    }
    let mut bare = Vec::new();
    let mut pool = Vec::new();
    let mut ratios = Vec::new();
    for _ in 0..args.runs {
        let b = bare_python(&args.python);
        let p = timed(&sandbox, &pooled).await;
        ratios.push(p.as_secs_f64() / b.as_secs_f64());
        bare.push(b);
        pool.push(p);
    }
    ratios.sort_by(f64::total_cmp);

    // Alternating limits: every run needs a `docker update` of the warm container.
    let mut updated = Vec::new();
    for i in 0..args.fresh_runs * 2 {
        let mut r = pooled.clone();
        r.memory_mb = if i % 2 == 0 { 128 } else { 512 };
        updated.push(timed(&sandbox, &r).await);
    }
    // Back to the default limit for what follows.
    timed(&sandbox, &pooled).await;

    let fresh_request = request(&args.code, true);
    let mut fresh = Vec::new();
    for _ in 0..args.fresh_runs {
        fresh.push(timed(&sandbox, &fresh_request).await);
    }

    let exec = docker_exec(args.fresh_runs * 2).await;

    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let started = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..args.clients {
        let sandbox = sandbox.clone();
        let done = done.clone();
        let request = pooled.clone();
        clients.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                timed(&sandbox, &request).await;
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for client in clients {
        client.await.expect("client");
    }
    let rate = done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();

    let (b50, b95) = percentiles(bare);
    let (p50, p95) = percentiles(pool);
    let (f50, f95) = percentiles(fresh);
    let (u50, u95) = percentiles(updated);
    let (e50, e95) = percentiles(exec);
    let r50 = ratios[ratios.len() / 2];
    println!("| what | runs | p50 ms | p95 ms |");
    println!("| --- | --- | --- | --- |");
    println!(
        "| bare `python3 -I -S -c pass` on the host | {} | {b50:.2} | {b95:.2} |",
        args.runs
    );
    println!(
        "| pooled execution of `{}` | {} | {p50:.2} | {p95:.2} |",
        args.code, args.runs
    );
    println!(
        "| pooled execution, another memory limit (docker update) | {} | {u50:.2} | {u95:.2} |",
        args.fresh_runs * 2
    );
    println!(
        "| fresh-container execution of `{}` | {} | {f50:.2} | {f95:.2} |",
        args.code, args.fresh_runs
    );
    println!(
        "| `docker exec python3 -I -S -c pass` (running container) | {} | {e50:.2} | {e95:.2} |",
        args.fresh_runs * 2
    );
    println!();
    println!("pooled / bare, median of the per-pair ratios: {r50:.2}");
    println!(
        "saturation: {rate:.0} executions/s ({} clients, pool of {}, {} s)",
        args.clients, args.pool_size, args.seconds
    );
    let stats = sandbox.stats();
    println!(
        "containers started {}, retired {}, retries {}",
        stats.containers_started, stats.containers_retired, stats.retries
    );
    cancel.cancel();
    service.await.expect("pool service");
}
