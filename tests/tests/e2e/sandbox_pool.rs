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

/// Bounds a wait for a state that a passing test reaches at once: only a failure waits it
/// out, so it is minutes, whatever the machine's speed.
const FAILURE_BOUND: Duration = Duration::from_secs(300);

/// Waits until the pool has counted `runs` pooled runs: the last one started holds its
/// container.
async fn until_held(sandbox: &TestSandbox, runs: u64) {
    let deadline = std::time::Instant::now() + FAILURE_BOUND;
    while sandbox.stats().pooled_runs < runs {
        assert!(
            std::time::Instant::now() < deadline,
            "the run never took its container: {:?}",
            sandbox.stats()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A program that never ends in the container `host` and prints `done` in any other: what
/// is done to `host` while the run holds it always lands mid-run, and the retry in a fresh
/// container passes at once.
fn endless_in(host: &str) -> String {
    format!(
        "import socket, time\n\
         if socket.gethostname() == {host:?}:\n    while True:\n        time.sleep(60)\n\
         print('done')"
    )
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
    let deadline = std::time::Instant::now() + FAILURE_BOUND;
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

    // Killed in the middle of a run: once the run holds the container, whose program never
    // ends there (so the kill cannot come after it).
    let busy = sandbox.hostname().await;
    assert_ne!(busy, idle);
    let runs = sandbox.stats().pooled_runs;
    let run = {
        let sandbox = sandbox.sandbox.clone();
        let mut request = TestSandbox::request(&endless_in(&busy));
        // Only a kill that never came would wait it out.
        request.timeout_ms = 120_000;
        tokio::spawn(async move { sandbox::Sandbox::run(&sandbox, &request).await })
    };
    until_held(&sandbox, runs + 1).await;
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
    let runs = sandbox.stats().pooled_runs;
    let run = {
        let sandbox = sandbox.sandbox.clone();
        // Never ends in `host`: a pause landing any time before the program's deadline
        // freezes a runner with an answer still to give. The deadline is what a passing run
        // waits (plus the grace) before the runner counts as wedged, and is far above the
        // time a `docker pause` takes to land.
        let mut request = TestSandbox::request(&endless_in(&host));
        request.timeout_ms = 20_000;
        tokio::spawn(async move { sandbox::Sandbox::run(&sandbox, &request).await })
    };
    until_held(&sandbox, runs + 1).await;
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
    // once it is older than `orphan_age`, whoever owned it.
    let abandoned = create("another-host:1");
    // pid_max is at most 2^22: this pid cannot exist.
    let orphan = create(&format!("{host}:99999999"));
    // Its owner lives, but it was never started in time: abandoned as well.
    let stale = create(&format!("{host}:1"));
    // The age is its own clock, not the start timeout's: the pool's own containers may take
    // minutes to start on a slow machine, while `alive_later` below has the whole age (20 s)
    // between its creation and the reap, which follows at once.
    let orphan_age = Duration::from_secs(20);
    // Docker's creation times are whole seconds: 21.5 s is more than 20 s however they round.
    tokio::time::sleep(orphan_age + Duration::from_millis(1500)).await;
    let alive_later = create(&format!("{host}:1"));
    let options = sandbox::Options {
        start_timeout: Duration::from_secs(300),
        orphan_age: Some(orphan_age),
        ..options
    };
    let sandbox = TestSandbox::start(options).await;
    let deadline = std::time::Instant::now() + FAILURE_BOUND;
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
    // The baseline for the shutdown at the end: what stopping a pool of two ready containers
    // takes on this machine now (no rest: both prepare at once).
    let baseline = {
        let sandbox = TestSandbox::start(sandbox::Options {
            prepare_delay: Duration::ZERO,
            ..TestSandbox::options(2)
        })
        .await;
        sandbox.hostname().await;
        assert!(
            until_idle(&sandbox, 2, FAILURE_BOUND).await,
            "not ready again"
        );
        let stopping = std::time::Instant::now();
        sandbox.stop().await;
        stopping.elapsed()
    };
    // The longest delay honoured, so that only the rest, or what ends it, explains what
    // follows before it is over. A rest starts after its run's result is back here (the pool
    // does it in a task of this test's single-threaded runtime) and lasts `REST`: what must
    // end it is checked to happen a second before it would have ended by itself, whatever
    // the machine's speed, which only scales the fork and scrub in between.
    const REST: Duration = Duration::from_secs(10);
    let before_the_rest_ends = |rested: std::time::Instant| rested + REST - Duration::from_secs(1);
    let sandbox = TestSandbox::start(sandbox::Options {
        prepare_delay: REST,
        ..TestSandbox::options(2)
    })
    .await;
    assert_eq!(sandbox.stats().idle, 2);
    sandbox.hostname().await;
    let rested = std::time::Instant::now();
    // The other container is ready and nothing waits: this one does not prepare (checked
    // while the rest lasts).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = sandbox.stats().idle;
    if rested.elapsed() < REST {
        assert_eq!(idle, 1, "it prepared without being asked");
    }
    // Whoever waits for the pool (here: warming up) ends the rest.
    sandbox.sandbox.warm_up(FAILURE_BOUND).await.expect("warm");
    assert!(
        std::time::Instant::now() < before_the_rest_ends(rested),
        "the warm-up ended {:?} after the run: at the rest's end, not after a preparation",
        rested.elapsed()
    );
    assert_eq!(sandbox.stats().idle, 2);

    // Rests again after a run; taking the last ready container ends the rest at once.
    sandbox.hostname().await;
    let rested = std::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle = sandbox.stats().idle;
    if rested.elapsed() < REST {
        assert_eq!(idle, 1, "it prepared without being asked");
    }
    let runs = sandbox.stats().pooled_runs;
    let long = {
        let sandbox = sandbox.sandbox.clone();
        // Longer than the rest: still running at the check below, which comes before it.
        tokio::spawn(async move {
            sandbox::Sandbox::run(
                &sandbox,
                &TestSandbox::request("import time\ntime.sleep(12)\nprint('done')"),
            )
            .await
        })
    };
    // Counted once it holds its container, the last ready one.
    until_held(&sandbox, runs + 1).await;
    let left = before_the_rest_ends(rested).saturating_duration_since(std::time::Instant::now());
    assert!(
        until_idle(&sandbox, 1, left).await,
        "with the last ready container taken, the resting one did not prepare: {:?}",
        sandbox.stats()
    );
    assert!(!long.is_finished(), "the long run ended before the check");
    let long = long.await.unwrap().expect("a verdict");
    assert_eq!(long.status, Status::Passed, "{long:#?}");
    // The long run's container rests now (the other is ready): shutdown ends the rest, and
    // takes what a shutdown without a rest takes, not the rest's 10 s on top.
    let stopping = std::time::Instant::now();
    sandbox.stop().await;
    assert!(
        stopping.elapsed() < baseline + REST / 2,
        "shutdown waited {:?} for a resting container (without one: {baseline:?})",
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
    // The program burns `parent` seconds of CPU and its child `child` seconds, each counted
    // by its own clock: a fixed amount on any machine.
    let burn = |parent: f64, child: f64| {
        format!(
            "import os, time\n\
             def burn(seconds):\n    t = time.process_time()\n    while time.process_time() - t < seconds:\n        pass\n\
             pid = os.fork()\n\
             if pid == 0:\n    burn({child})\n    os._exit(0)\n\
             burn({parent})\n\
             os.waitpid(pid, 0)\n\
             print('done')"
        )
    };
    // The same program without its loops, twice: what the fork, the exits and the
    // supervisor cost in this container, which scales with the machine's speed.
    let mut overheads = Vec::new();
    for _ in 0..2 {
        overheads.push(cpu_ms(&sandbox.run(&burn(0.0, 0.0)).await));
    }
    let (low, high) = (
        overheads[0].min(overheads[1]),
        overheads[0].max(overheads[1]),
    );
    let cpu_ms = cpu_ms(&sandbox.run(&burn(0.3, 0.2)).await);
    // 300 ms in the program, 200 ms in its child, and about the overhead (without the
    // child's CPU: about 300 ms and the overhead).
    assert!(
        (500 + low / 2..=500 + 2 * high + 50).contains(&cpu_ms),
        "cpu_ms = {cpu_ms}, without the loops {overheads:?}"
    );
    // An idle program costs next to nothing: about the overhead, not the burns before it.
    let idle = sandbox.run("import time\ntime.sleep(0.3)").await;
    assert!(
        idle.cpu_ms.expect("the cgroup was read") <= 2 * high + 50,
        "{idle:?}, without the loops {overheads:?}"
    );
    sandbox.stop().await;
}

/// The CPU a passed run reported.
fn cpu_ms(result: &proto::ExecutionResult) -> u64 {
    assert_eq!(result.status, Status::Passed, "{result:?}");
    result.cpu_ms.expect("the cgroup was read")
}

/// The issue's probe: a program that burns 300 ms of CPU and allocates 100 MiB reports both
/// within 15 %, in a warm (forked) container, run after run.
#[tokio::test]
async fn a_run_reports_its_cpu_and_peak_memory_within_15_percent() {
    let sandbox = TestSandbox::start(TestSandbox::options(1)).await;
    // `seconds` of CPU in all: the allocation's page faults, then a loop up to `seconds`.
    // It prints the CPU time it counted itself, in ms.
    let program = |seconds: f64| {
        format!(
            "import time\n\
             t = time.process_time()\n\
             block = bytearray(100 << 20)\n\
             for i in range(0, len(block), 4096):\n    block[i] = 1\n\
             while time.process_time() - t < {seconds}:\n    pass\n\
             print(len(block), round(time.process_time() * 1000))"
        )
    };
    // (reported, counted by the program) for one run of `program(seconds)`.
    let measure = |seconds: f64| {
        let code = program(seconds);
        let sandbox = &sandbox;
        async move {
            let result = sandbox.run(&code).await;
            let reported = cpu_ms(&result);
            let (length, own) = result.stdout.trim().split_once(' ').expect("two numbers");
            assert_eq!(length, (100 << 20).to_string());
            let own: u64 = own.parse().expect("the program's own CPU");
            (result, reported, own)
        }
    };
    for _ in 0..3 {
        // The same allocation without the loop: what the run costs this machine beyond the
        // program's own clock (freeing 100 MiB at its exit, the supervisor).
        let (_, reported, own) = measure(0.0).await;
        let overhead = reported as i64 - own as i64;
        let (result, cpu_ms, own) = measure(0.3).await;
        let expected = own as i64 + overhead;
        assert!(
            cpu_ms >= 300 && (cpu_ms as i64 - expected).abs() <= expected * 15 / 100,
            "cpu_ms = {cpu_ms}, counted by the program {own} ms, overhead {overhead} ms"
        );
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
    // What ending a program costs this container here (its exit, the supervisor's reaping):
    // the CPU a kill adds past the limit is of that order.
    let ending = cpu_ms(&sandbox.run("pass").await);
    let limited = |code: &str| {
        let mut request = TestSandbox::request(code);
        request.cpu_time_ms = Some(300);
        // Only a CPU limit that failed waits out the wall limit: a starved machine cannot
        // turn the CPU-time verdict into a timeout.
        request.timeout_ms = 60_000;
        request
    };
    let busy = sandbox.run_request(&limited("while True:\n    pass")).await;
    assert_eq!(busy.status, Status::CpuTimeLimit, "{busy:?}");
    assert_eq!(
        busy.reason.as_deref(),
        Some("killed at the CPU-time limit of 300 ms")
    );
    let cpu_ms = busy.cpu_ms.expect("the cgroup was read");
    assert!(
        (300..=400 + ending).contains(&cpu_ms),
        "cpu_ms = {cpu_ms}, a program's end {ending} ms"
    );
    // The CPU is the container's: a child burning it while the program sleeps is caught too.
    let child = "import os, time\n\
                 if os.fork() == 0:\n    while True:\n        pass\n\
                 while True:\n    time.sleep(60)";
    let by_child = sandbox.run_request(&limited(child)).await;
    assert_eq!(by_child.status, Status::CpuTimeLimit, "{by_child:?}");
    // Wall time is not CPU time.
    let sleeper = sandbox
        .run_request(&limited("import time\ntime.sleep(0.8)\nprint('awake')"))
        .await;
    assert_eq!(sleeper.status, Status::Passed, "{sleeper:?}");
    assert_eq!(sleeper.stdout, "awake\n");
    sandbox.stop().await;
}
