//! The warm pool against the real Docker engine: reuse, recycling, replacement of dead and
//! wedged containers, fresh containers, orphan reaping, concurrency, shutdown.

use std::process::Command;
use std::time::Duration;

use proto::Status;
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
"#,
    );
    request.stdin = Some(format!("hello{}", "x".repeat(1 << 20)));
    request.files = [
        ("helper.py", "def shout(s):\n    return s.upper()\n"),
        ("pkg/__init__.py", ""),
        ("pkg/sub.py", "VALUE = 42\n"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    request.return_files = vec!["out.txt".into()];
    let result = sandbox.run_request(&request).await;
    assert_eq!(result.status, Status::Passed, "{result:#?}");
    assert_eq!(
        result.stdout,
        format!("HELLO 42 {} héllo ✓\n", 5 + (1 << 20))
    );
    assert_eq!(result.files["out.txt"], "written ✓");
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
