//! The warm pool against the real Docker engine: reuse, recycling, replacement of dead and
//! wedged containers, fresh containers, orphan reaping, concurrency, shutdown.

use std::process::Command;
use std::time::Duration;

use proto::{FileContent, Status};
use tests::{TestSandbox, sandbox_containers};

fn docker(args: &[&str]) -> String {
    let output = Command::new("docker")
        .args(args)
        .output()
        .expect("docker CLI");
    assert!(
        output.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

#[tokio::test]
async fn a_container_serves_many_runs_then_is_recycled() {
    let sandbox = TestSandbox::start(sandbox::Options {
        max_runs_per_container: 3,
        ..TestSandbox::options(1)
    })
    .await;
    let first = sandbox.hostname().await;
    assert_eq!(sandbox.hostname().await, first);
    assert_eq!(sandbox.hostname().await, first);
    let fourth = sandbox.hostname().await;
    assert_ne!(fourth, first, "recycled after 3 runs");
    assert_eq!(sandbox.stats().containers_retired, 1);
    sandbox.stop().await;
}

#[tokio::test]
async fn a_dead_container_is_replaced_and_its_execution_retried() {
    let sandbox = TestSandbox::start(TestSandbox::options(1)).await;
    let idle = sandbox.hostname().await;
    // Killed while idle (back in the pool after its scrub): the next execution finds it dead
    // and is retried in a fresh one.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while sandbox.stats().idle == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the container never got back"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    docker(&["kill", &idle]);
    let result = sandbox.run("print('still here')").await;
    assert_eq!(result.status, Status::Passed, "{result:#?}");
    assert_eq!(result.stdout, "still here\n");
    assert_eq!(sandbox.stats().retries, 1);

    // Killed in the middle of a run.
    let busy = sandbox.hostname().await;
    assert_ne!(busy, idle);
    let run = {
        let sandbox = sandbox.sandbox.clone();
        tokio::spawn(async move {
            sandbox::Sandbox::run(
                &sandbox,
                &TestSandbox::request("import time\ntime.sleep(1.5)\nprint('done')"),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    docker(&["kill", &busy]);
    let result = run.await.unwrap().expect("a verdict");
    assert_eq!(result.status, Status::Passed, "{result:#?}");
    assert_eq!(result.stdout, "done\n");
    assert_eq!(sandbox.stats().retries, 2);
    assert_ne!(sandbox.hostname().await, busy, "replaced");
    sandbox.stop().await;
}

#[tokio::test]
async fn a_wedged_container_is_replaced_and_its_execution_retried() {
    let sandbox = TestSandbox::start(sandbox::Options {
        grace: Duration::from_secs(1),
        ..TestSandbox::options(1)
    })
    .await;
    let host = sandbox.hostname().await;
    let run = {
        let sandbox = sandbox.sandbox.clone();
        tokio::spawn(async move {
            let mut request = TestSandbox::request("import time\ntime.sleep(0.5)\nprint('done')");
            request.timeout_ms = 2000;
            sandbox::Sandbox::run(&sandbox, &request).await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Frozen: the runner never answers, not even at its own deadline.
    docker(&["pause", &host]);
    let result = run.await.unwrap().expect("a verdict");
    assert_eq!(result.status, Status::Passed, "{result:#?}");
    assert_eq!(sandbox.stats().retries, 1);
    assert_ne!(sandbox.hostname().await, host);
    sandbox.stop().await;
}

#[tokio::test]
async fn fresh_container_runs_alone_and_is_removed() {
    let sandbox = TestSandbox::start(TestSandbox::options(1)).await;
    let pooled = sandbox.hostname().await;
    let mut request = TestSandbox::request("import socket; print(socket.gethostname())");
    request.fresh_container = true;
    let result = sandbox.run_request(&request).await;
    assert_eq!(result.status, Status::Passed, "{result:#?}");
    assert_ne!(result.stdout.trim(), pooled);
    assert_eq!(sandbox.stats().fresh_runs, 1);
    assert_eq!(
        sandbox_containers(&sandbox.options.cluster).len(),
        1,
        "only the pool's"
    );
    sandbox.stop().await;
}

#[tokio::test]
async fn without_a_pool_every_run_gets_a_fresh_container() {
    let sandbox = TestSandbox::start(TestSandbox::options(0)).await;
    let a = sandbox.hostname().await;
    let b = sandbox.hostname().await;
    assert_ne!(a, b);
    assert_eq!(sandbox.stats().fresh_runs, 2);
    assert!(sandbox_containers(&sandbox.options.cluster).is_empty());
    sandbox.stop().await;
}

#[tokio::test]
async fn the_memory_limit_follows_each_request() {
    let sandbox = TestSandbox::start(TestSandbox::options(1)).await;
    let host = sandbox.hostname().await;
    let reserve = sandbox.options.runner_memory_mb;
    for memory_mb in [128, 512, 16, 256] {
        let limits = sandbox.probe(memory_mb).await;
        assert_eq!(limits.memory_bytes, (memory_mb + reserve) << 20);
        assert_eq!(limits.memsw_bytes, (memory_mb + reserve) << 20);
        assert_eq!(limits.hostname, host, "the same warm container, updated");
    }
    assert_eq!(sandbox.stats().memory_updates, 4);
    // The smallest limit the API allows still runs a program, and a program gets about what
    // it asked for.
    let mut request = TestSandbox::request("print(len(bytearray(12 << 20)))");
    request.memory_mb = 16;
    assert_eq!(sandbox.run_request(&request).await.status, Status::Passed);
    request.code = "x = bytearray(40 << 20)".into();
    assert_eq!(
        sandbox.run_request(&request).await.status,
        Status::MemoryLimit
    );
    sandbox.stop().await;
}

#[tokio::test]
async fn orphans_of_dead_workers_are_reaped_at_start() {
    let options = TestSandbox::options(1);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned();
    let create = |owner: &str| {
        docker(&[
            "create",
            "--label",
            &format!("{}={}", sandbox::LABEL_SANDBOX, options.cluster),
            "--label",
            &format!("{}={owner}", sandbox::docker::LABEL_OWNER),
            &options.image(proto::Language::Python),
            "true",
        ])
    };
    // Created and never started by a worker of another host that died in between: reaped
    // once it is older than twice the start timeout, whoever owned it.
    let abandoned = create("another-host:1");
    // pid_max is at most 2^22: this pid cannot exist.
    let orphan = create(&format!("{host}:99999999"));
    // Its owner lives, but it was never started in time: abandoned as well.
    let stale = create(&format!("{host}:1"));
    // Docker's creation times are whole seconds: 3.5 s is more than 2 s however they round.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let alive_later = create(&format!("{host}:1"));
    let options = sandbox::Options {
        start_timeout: Duration::from_secs(1),
        ..options
    };
    let sandbox = TestSandbox::start(options).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let left = loop {
        let left = sandbox_containers(&sandbox.options.cluster);
        if !left.iter().any(|id| {
            [&orphan, &abandoned, &stale]
                .iter()
                .any(|c| c.starts_with(id))
        }) {
            break left;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "orphan not reaped: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        left.iter().any(|id| alive_later.starts_with(id)),
        "a live owner's recent one stays"
    );
    docker(&["rm", "-f", &alive_later]);
    sandbox.stop().await;
}

#[tokio::test]
async fn concurrent_executions_share_the_pool() {
    let sandbox = TestSandbox::start(TestSandbox::options(2)).await;
    let mut runs = Vec::new();
    for i in 0..8 {
        let sandbox = sandbox.sandbox.clone();
        runs.push(tokio::spawn(async move {
            sandbox::Sandbox::run(&sandbox, &TestSandbox::request(&format!("print({i} * 2)"))).await
        }));
    }
    for (i, run) in runs.into_iter().enumerate() {
        let result = run.await.unwrap().expect("a verdict");
        assert_eq!(result.status, Status::Passed);
        assert_eq!(result.stdout, format!("{}\n", i * 2));
    }
    let stats = sandbox.stats();
    assert_eq!(stats.containers_started, 2, "{stats:?}");
    assert_eq!(stats.pooled_runs, 8);
    sandbox.stop().await;
}

/// Polls the pool until `idle` containers are ready, for at most `within`.
async fn until_idle(sandbox: &TestSandbox, idle: usize, within: Duration) -> bool {
    let deadline = std::time::Instant::now() + within;
    while sandbox.stats().idle != idle {
        if std::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

#[tokio::test]
async fn a_container_rests_after_a_run_only_while_another_is_ready() {
    // The longest delay honoured, so that only the rest, or what ends it, explains what
    // follows within a few seconds.
    let sandbox = TestSandbox::start(sandbox::Options {
        prepare_delay: Duration::from_secs(10),
        ..TestSandbox::options(2)
    })
    .await;
    assert_eq!(sandbox.stats().idle, 2);
    sandbox.hostname().await;
    // The other container is ready and nothing waits: this one does not prepare.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(sandbox.stats().idle, 1, "it prepared without being asked");
    // Whoever waits for the pool (here: warming up) ends the rest.
    let started = std::time::Instant::now();
    sandbox
        .sandbox
        .warm_up(Duration::from_secs(30))
        .await
        .expect("warm");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the warm-up waited {:?}: for the rest's end, not for a preparation",
        started.elapsed()
    );
    assert_eq!(sandbox.stats().idle, 2);

    // Rests again after a run; taking the last ready container ends the rest at once.
    sandbox.hostname().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sandbox.stats().idle, 1, "it prepared without being asked");
    let runs = sandbox.stats().pooled_runs;
    let long = {
        let sandbox = sandbox.sandbox.clone();
        tokio::spawn(async move {
            sandbox::Sandbox::run(
                &sandbox,
                &TestSandbox::request("import time\ntime.sleep(6)\nprint('done')"),
            )
            .await
        })
    };
    // Counted once it holds its container, the last ready one.
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while sandbox.stats().pooled_runs == runs {
        assert!(
            std::time::Instant::now() < deadline,
            "the long run never started"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        until_idle(&sandbox, 1, Duration::from_secs(3)).await,
        "with the last ready container taken, the resting one did not prepare: {:?}",
        sandbox.stats()
    );
    assert!(!long.is_finished(), "the long run ended before the check");
    let long = long.await.unwrap().expect("a verdict");
    assert_eq!(long.status, Status::Passed, "{long:#?}");
    // The long run's container rests now (the other is ready): shutdown ends the rest.
    let stopping = std::time::Instant::now();
    sandbox.stop().await;
    assert!(
        stopping.elapsed() < Duration::from_secs(8),
        "shutdown waited {:?} for a resting container",
        stopping.elapsed()
    );
}

#[tokio::test]
async fn stdin_files_and_unicode_pass_through() {
    let sandbox = TestSandbox::start(TestSandbox::options(1)).await;
    let mut request = TestSandbox::request(
        r#"
import sys
import helper
from pkg.sub import VALUE
data = sys.stdin.read()
print(helper.shout(data[:5]), VALUE, len(data), "héllo ✓")
open("out.txt", "w").write("written ✓")
blob = open("blob.bin", "rb").read()
open("out.bin", "wb").write(bytes(reversed(blob)))
"#,
    );
    request.stdin = Some(format!("hello{}", "x".repeat(1 << 20)));
    request.files = [
        ("helper.py", "def shout(s):\n    return s.upper()\n"),
        ("pkg/__init__.py", ""),
        ("pkg/sub.py", "VALUE = 42\n"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into()))
    .collect();
    // Bytes in and out: every byte value, not UTF-8.
    let blob: Vec<u8> = (0..=255).collect();
    request
        .files
        .insert("blob.bin".into(), FileContent::Bytes(blob.clone()));
    request.return_files = vec!["out.txt".into(), "out.bin".into()];
    let result = sandbox.run_request(&request).await;
    assert_eq!(result.status, Status::Passed, "{result:#?}");
    assert_eq!(
        result.stdout,
        format!("HELLO 42 {} héllo ✓\n", 5 + (1 << 20))
    );
    assert_eq!(result.files["out.txt"], FileContent::from("written ✓"));
    let reversed: Vec<u8> = blob.into_iter().rev().collect();
    assert_eq!(result.files["out.bin"], FileContent::Bytes(reversed));
    // A program that ignores a large stdin is not blocked by it.
    let mut request = TestSandbox::request("print('ignored')");
    request.stdin = Some("y".repeat(1 << 20));
    assert_eq!(sandbox.run_request(&request).await.stdout, "ignored\n");
    sandbox.stop().await;
}

#[tokio::test]
async fn a_missing_image_is_a_configuration_error() {
    let (sandbox, _service) = sandbox::DockerSandbox::build(sandbox::Options {
        image_tag: "does-not-exist".into(),
        ..TestSandbox::options(1)
    });
    let error = sandbox::Sandbox::run(&sandbox, &TestSandbox::request("pass"))
        .await
        .expect_err("no image, no run");
    assert!(matches!(error, sandbox::Error::Config(_)), "{error}");
    assert!(!error.is_retryable());
    let health = sandbox::Sandbox::health(&sandbox).await.unwrap_err();
    assert!(health.contains("does-not-exist"), "{health}");
}

/// A run reports the CPU its container used: the program's own and its children's, in a warm
/// container whose supervisor and zygote outlive the run (so a per-process measure of the
/// runner would miss the children, and a cumulative one would count earlier runs).
#[tokio::test]
async fn a_run_reports_the_cpu_of_the_program_and_its_children() {
    let sandbox = TestSandbox::start(TestSandbox::options(1)).await;
    // Warm the container with a run of its own: its CPU must not count towards the next.
    sandbox.pass("sum(range(3_000_000))").await;
    let burn = "import os, time\n\
                def burn(seconds):\n    t = time.process_time()\n    while time.process_time() - t < seconds:\n        pass\n\
                pid = os.fork()\n\
                if pid == 0:\n    burn(0.2)\n    os._exit(0)\n\
                burn(0.3)\n\
                os.waitpid(pid, 0)\n\
                print('done')";
    let result = sandbox.run(burn).await;
    assert_eq!(result.status, Status::Passed, "{result:?}");
    let cpu_ms = result.cpu_ms.expect("the cgroup was read");
    // 300 ms in the program, 200 ms in its child; the supervisor adds a few polls.
    assert!((500..=575).contains(&cpu_ms), "cpu_ms = {cpu_ms}");
    // An idle program costs next to nothing.
    let idle = sandbox.run("import time\ntime.sleep(0.3)").await;
    assert!(idle.cpu_ms.expect("the cgroup was read") < 60, "{idle:?}");
    sandbox.stop().await;
}

/// The issue's probe: a program that burns 300 ms of CPU and allocates 100 MiB reports both
/// within 15 %, in a warm (forked) container, run after run.
#[tokio::test]
async fn a_run_reports_its_cpu_and_peak_memory_within_15_percent() {
    let sandbox = TestSandbox::start(TestSandbox::options(1)).await;
    // 300 ms of CPU in all: the allocation's page faults, then a loop up to 300 ms.
    let program = "import time\n\
                   t = time.process_time()\n\
                   block = bytearray(100 << 20)\n\
                   for i in range(0, len(block), 4096):\n    block[i] = 1\n\
                   while time.process_time() - t < 0.3:\n    pass\n\
                   print(len(block))";
    for _ in 0..3 {
        let result = sandbox.run(program).await;
        assert_eq!(result.status, Status::Passed, "{result:?}");
        let cpu_ms = result.cpu_ms.expect("the cgroup was read");
        assert!((300..=345).contains(&cpu_ms), "cpu_ms = {cpu_ms}");
        let peak = result.peak_memory_kb.expect("measured");
        assert!(
            (100 * 1024 * 85 / 100..=100 * 1024 * 115 / 100).contains(&peak),
            "peak_memory_kb = {peak}"
        );
    }
    // A small program reports a small peak: the interpreter it was forked from is not its own.
    let small = sandbox.run("print(sum(range(1000)))").await;
    assert!(
        small.peak_memory_kb.expect("measured") < 4 * 1024,
        "{small:?}"
    );
    sandbox.stop().await;
}

/// `cpu_time_ms` kills at CPU time, not wall time: a loop (or its child's) is stopped near the
/// limit with its own verdict, while a program sleeping well past the limit passes.
#[tokio::test]
async fn the_cpu_time_limit_stops_busy_programs_and_spares_sleeping_ones() {
    let sandbox = TestSandbox::start(TestSandbox::options(1)).await;
    let limited = |code: &str| {
        let mut request = TestSandbox::request(code);
        request.cpu_time_ms = Some(300);
        request.timeout_ms = 10_000;
        request
    };
    let busy = sandbox.run_request(&limited("while True:\n    pass")).await;
    assert_eq!(busy.status, Status::CpuTimeLimit, "{busy:?}");
    assert_eq!(
        busy.reason.as_deref(),
        Some("killed at the CPU-time limit of 300 ms")
    );
    let cpu_ms = busy.cpu_ms.expect("the cgroup was read");
    assert!((300..=400).contains(&cpu_ms), "cpu_ms = {cpu_ms}");
    assert!(busy.duration_ms < 1_000, "{busy:?}");
    // The CPU is the container's: a child burning it while the program sleeps is caught too.
    let child = "import os, time\n\
                 if os.fork() == 0:\n    while True:\n        pass\n\
                 time.sleep(30)";
    let by_child = sandbox.run_request(&limited(child)).await;
    assert_eq!(by_child.status, Status::CpuTimeLimit, "{by_child:?}");
    assert!(by_child.duration_ms < 1_000, "{by_child:?}");
    // Wall time is not CPU time.
    let sleeper = sandbox
        .run_request(&limited("import time\ntime.sleep(0.8)\nprint('awake')"))
        .await;
    assert_eq!(sleeper.status, Status::Passed, "{sleeper:?}");
    assert_eq!(sleeper.stdout, "awake\n");
    sandbox.stop().await;
}
