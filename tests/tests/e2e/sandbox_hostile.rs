//! Hostile code against the real Docker engine, through the `sandbox` crate's warm pool.
//!
//! Each test asserts the verdict AND that the worker (this process) and the host are
//! unaffected: the next execution in the same pool still passes, host files are unchanged,
//! the host can still start processes. Bombs run only after a probe from inside the same pool
//! has confirmed the pids and memory limits (`TestSandbox::require_limits`).

use std::time::{Duration, Instant};

use proto::{ErrorKind, FileContent, Status};
use serde_json::Value;
use tests::TestSandbox;

async fn pool() -> TestSandbox {
    TestSandbox::start(TestSandbox::options(1)).await
}

fn host_can_start_processes() {
    let status = std::process::Command::new("true")
        .status()
        .expect("the host can still start a process");
    assert!(status.success());
}

/// The JSON a program printed last.
fn json_out(stdout: &str) -> Value {
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

#[tokio::test]
async fn limits_are_in_force_before_any_bomb() {
    let sandbox = pool().await;
    let limits = sandbox.require_limits(64).await;
    assert_eq!(limits.pids_max, sandbox.options.pids_limit);
    assert_eq!(limits.uid, 10002);
    assert_eq!(limits.cap_eff, 0);
    // The default limit again (a docker update in each direction).
    let limits = sandbox.require_limits(256).await;
    assert_eq!(
        limits.memory_bytes,
        (256 + sandbox.options.runner_memory_mb) << 20
    );
    sandbox.stop().await;
}

#[tokio::test]
async fn fork_bomb_times_out_and_leaves_nothing_behind() {
    let sandbox = pool().await;
    let limits = sandbox.require_limits(256).await;
    let started = Instant::now();
    let mut request = TestSandbox::request(
        r#"
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
"#,
    );
    request.timeout_ms = 3000;
    let result = sandbox.run_request(&request).await;
    assert_eq!(result.status, Status::Timeout, "{result:#?}");
    // Answered by the runner at its deadline, not by the pool after the wedge grace (which
    // would retry the bomb in a fresh container); the bound only catches a hang.
    assert_eq!(sandbox.stats().retries, 0, "the runner was wedged");
    let bound = Duration::from_millis(request.timeout_ms) + sandbox.options.grace;
    assert!(
        started.elapsed() < bound + Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    host_can_start_processes();
    // The breach retired that container; the next run is in a fresh one, alone.
    let out = sandbox
        .pass(
            r#"
import os, socket
mine = [p for p in os.listdir('/proc') if p.isdigit() and os.stat('/proc/' + p).st_uid == os.getuid()]
print(socket.gethostname(), len(mine))
"#,
        )
        .await;
    let (host, procs) = out.trim().split_once(' ').expect("hostname and count");
    assert_ne!(host, limits.hostname, "a breached container is not reused");
    assert_eq!(procs, "1", "only the program itself runs as its uid: {out}");
    assert!(sandbox.stats().containers_retired >= 1);
    sandbox.stop().await;
}

#[tokio::test]
async fn memory_bomb_is_memory_limit() {
    let sandbox = pool().await;
    sandbox.require_limits(64).await;
    let mut request = TestSandbox::request(
        r#"
chunks = []
while True:
    chunks.append(bytearray(8 << 20))
"#,
    );
    request.memory_mb = 64;
    let result = sandbox.run_request(&request).await;
    assert_eq!(result.status, Status::MemoryLimit, "{result:#?}");
    // Many processes allocating at once: still the program's own verdict.
    request.code = r#"
import os
for _ in range(8):
    if os.fork() == 0:
        break
chunks = []
while True:
    chunks.append(bytearray(4 << 20))
"#
    .into();
    let result = sandbox.run_request(&request).await;
    assert_eq!(result.status, Status::MemoryLimit, "{result:#?}");
    host_can_start_processes();
    sandbox.pass("print(len(bytearray(32 << 20)))").await;
    sandbox.stop().await;
}

#[tokio::test]
async fn disk_fill_is_the_programs_own_error_and_is_scrubbed() {
    let sandbox = pool().await;
    sandbox.require_limits(256).await;
    let out = sandbox
        .pass(
            r#"
import errno, json
block = b"x" * (1 << 20)
written = {}
for d in ("/work", "/tmp", "/dev/shm", "/mnt/data"):
    n = 0
    try:
        with open(d + "/fill", "wb") as f:
            while True:
                f.write(block)
                f.flush()
                n += 1
    except OSError as e:
        written[d] = [n, errno.errorcode.get(e.errno)]
print(json.dumps(written))
"#,
        )
        .await;
    let written = json_out(&out);
    for dir in ["/work", "/tmp", "/dev/shm", "/mnt/data"] {
        let [mib, err] = written[dir].as_array().expect("filled").as_slice() else {
            panic!("{written}")
        };
        assert!(
            mib.as_u64().unwrap() <= 64,
            "{dir} took more than its size: {written}"
        );
        assert!(
            ["ENOSPC", "EFBIG"].contains(&err.as_str().unwrap()),
            "{dir}: {written}"
        );
    }
    let left = sandbox
        .pass("import os; print(sorted(os.listdir('/work') + os.listdir('/tmp') + os.listdir('/dev/shm') + os.listdir('/mnt/data')))")
        .await;
    assert_eq!(left.trim(), "['main.py']", "the next run starts clean");
    sandbox.stop().await;
}

#[tokio::test]
async fn output_flood_is_output_limit_and_a_few_megabytes_pass_truncated() {
    let sandbox = pool().await;
    let result = sandbox
        .run("import sys\nsys.stdout.write('a' * (5 << 20))\nprint('done', file=sys.stderr)")
        .await;
    assert_eq!(
        result.status,
        Status::Passed,
        "a few MB is fine: {:?}",
        result.reason
    );
    assert!(result.truncated);
    assert_eq!(result.stdout.len() as u64, sandbox.options.max_output_bytes);
    assert_eq!(result.stderr, "done\n");

    let started = Instant::now();
    let mut request = TestSandbox::request(
        "import sys\nchunk = 'b' * 65536\nwhile True:\n    sys.stdout.write(chunk)",
    );
    // Far above what pushing the cap through takes on a slow machine: the verdict is the
    // cap's, never the deadline's.
    request.timeout_ms = 120_000;
    let result = sandbox.run_request(&request).await;
    assert_eq!(result.status, Status::OutputLimit, "{:?}", result.reason);
    assert!(result.truncated);
    assert_eq!(result.stdout.len() as u64, sandbox.options.max_output_bytes);
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    sandbox.pass("print('next')").await;
    sandbox.stop().await;
}

#[tokio::test]
async fn busy_loop_and_sleeping_forever_time_out() {
    let sandbox = pool().await;
    let grace = sandbox.options.grace.as_millis() as u64;
    for code in ["while True: pass", "import time\ntime.sleep(10**6)"] {
        let mut request = TestSandbox::request(code);
        request.timeout_ms = 700;
        let result = sandbox.run_request(&request).await;
        assert_eq!(result.status, Status::Timeout, "{code}: {result:#?}");
        // Killed at its own limit by the runner, not at the wedge grace by the pool (which
        // would have retried it in a fresh container).
        assert!(
            (700..700 + grace).contains(&result.duration_ms),
            "{result:#?}"
        );
        assert_eq!(sandbox.stats().retries, 0, "{code}: the runner was wedged");
    }
    sandbox.pass("print('next')").await;
    assert!(
        sandbox.stats().containers_retired >= 2,
        "each breach retires its container"
    );
    sandbox.stop().await;
}

#[tokio::test]
async fn a_child_left_running_is_killed_when_the_program_exits() {
    let sandbox = pool().await;
    let host = sandbox.hostname().await;
    let out = sandbox
        .pass(
            r#"
import os, subprocess, sys
a = subprocess.Popen(["sleep", "1000"])
b = subprocess.Popen(["sleep", "1000"], start_new_session=True)
if os.fork() == 0:          # a double-forked daemon
    os.setsid()
    if os.fork() == 0:
        import time
        time.sleep(1000)
    os._exit(0)
print(a.pid, b.pid)
"#,
        )
        .await;
    assert!(!out.trim().is_empty());
    let after = sandbox
        .pass(
            r#"
import os, socket
others = []
for p in os.listdir('/proc'):
    if p.isdigit() and int(p) != os.getpid():
        try:
            if os.stat('/proc/' + p).st_uid == os.getuid():
                others.append(p)
        except FileNotFoundError:
            pass
print(socket.gethostname(), others)
"#,
        )
        .await;
    assert_eq!(
        after.trim(),
        format!("{host} []"),
        "same container, nothing left"
    );
    sandbox.stop().await;
}

#[tokio::test]
async fn no_network_not_even_to_the_hosts_loopback() {
    let sandbox = pool().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let out = sandbox
        .pass(&format!(
            r#"
import json, os, socket
tries = {{}}
for target in [("127.0.0.1", {port}), ("::1", {port}), ("172.17.0.1", 80), ("8.8.8.8", 53)]:
    try:
        socket.create_connection(target, timeout=2).close()
        tries[str(target)] = "connected"
    except OSError as e:
        tries[str(target)] = type(e).__name__
try:
    socket.getaddrinfo("example.com", 80)
    tries["dns"] = "resolved"
except OSError as e:
    tries["dns"] = type(e).__name__
tries["interfaces"] = sorted(os.listdir("/sys/class/net"))
print(json.dumps(tries))
"#
        ))
        .await;
    let tries = json_out(&out);
    for (target, outcome) in tries.as_object().unwrap() {
        if target == "interfaces" {
            assert_eq!(outcome, &serde_json::json!(["lo"]), "{tries}");
        } else {
            assert_ne!(outcome, "connected", "{target}: {tries}");
            assert_ne!(outcome, "resolved", "{target}: {tries}");
        }
    }
    let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
    assert!(accepted.is_err(), "nothing reached the host's listener");
    sandbox.stop().await;
}

#[tokio::test]
async fn host_files_docker_socket_and_worker_environment_are_out_of_reach() {
    let sandbox = pool().await;
    let secret_dir = tempfile::tempdir().unwrap();
    let secret = secret_dir.path().join("secret.txt");
    std::fs::write(&secret, "host secret").unwrap();
    let out = sandbox
        .pass(&format!(
            r#"
import json, os
seen = {{}}
for path in ["{secret}", "/var/run/docker.sock", "/run/docker.sock", "/proc/1/environ",
             "/proc/1/mem", "/proc/1/root/etc/hostname", "/etc/shadow",
             "/proc/%d/environ" % os.getppid(), "/proc/%d/fd/0" % os.getppid(),
             "/proc/%d/mem" % os.getppid(), "/proc/%d/cmdline" % os.getppid()]:
    try:
        with open(path, "rb") as f:
            seen[path] = "read %d bytes" % len(f.read(1 << 16))
    except OSError as e:
        seen[path] = type(e).__name__
seen["environ"] = sorted(os.environ)
with open("/proc/self/environ", "rb") as f:
    seen["self_environ"] = f.read().decode()
print(json.dumps(seen))
"#,
            secret = secret.display()
        ))
        .await;
    let seen = json_out(&out);
    for (path, outcome) in seen.as_object().unwrap() {
        match path.as_str() {
            "environ" => assert_eq!(
                outcome,
                &serde_json::json!(["HOME", "LANG", "PATH", "PYTHONDONTWRITEBYTECODE"])
            ),
            "self_environ" => {
                for (key, value) in std::env::vars() {
                    if value.len() >= 8 {
                        assert!(
                            !outcome.as_str().unwrap().contains(&value),
                            "the worker's {key} leaked into the sandbox"
                        );
                    }
                }
            }
            // The runner's command line is public and harmless; its memory, fds and
            // environment are not.
            p if p.ends_with("/cmdline") => {}
            _ => assert!(
                !outcome.as_str().unwrap().starts_with("read"),
                "{path} was readable: {seen}"
            ),
        }
    }
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "host secret");
    sandbox.stop().await;
}

#[tokio::test]
async fn writing_outside_the_work_directory_fails() {
    let sandbox = pool().await;
    let out = sandbox
        .pass(
            r#"
import json, os
outcome = {}
for path in ["/x", "/etc/passwd", "/etc/new", "/opt/codegen/runner.py", "/usr/lib/x",
             "/var/tmp/x", "/root/x", "/proc/sys/kernel/hostname",
             "/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes",
             "/dev/x", "/proc/1/oom_score_adj", "/mnt/x", "/mnt/datax", "/mnt/data/../x"]:
    try:
        with open(path, "a") as f:
            f.write("1")
        outcome[path] = "written"
    except OSError as e:
        outcome[path] = type(e).__name__
for d in ("/work", "/tmp", "/mnt/data"):
    with open(d + "/ok", "w") as f:
        f.write("fine")
    outcome[d] = "written"
print(json.dumps(outcome))
"#,
        )
        .await;
    let outcome = json_out(&out);
    for (path, what) in outcome.as_object().unwrap() {
        let expected = if ["/work", "/tmp", "/mnt/data"].contains(&path.as_str()) {
            "written"
        } else {
            "not written"
        };
        assert_eq!(
            what == "written",
            expected == "written",
            "{path}: {what} ({outcome})"
        );
    }
    // The image on the host is untouched: a fresh container's runner is unchanged.
    sandbox
        .pass("print(open('/opt/codegen/runner.py').read().count('def '))")
        .await;
    sandbox.stop().await;
}

#[tokio::test]
async fn no_setuid_no_capabilities_no_ptrace() {
    let sandbox = pool().await;
    let out = sandbox
        .pass(
            r#"
import ctypes, json, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
outcome = {}
def attempt(name, fn):
    try:
        r = fn()
        outcome[name] = "ok %r" % (r,)
    except Exception as e:
        outcome[name] = type(e).__name__
attempt("setuid0", lambda: os.setuid(0))
attempt("setgid0", lambda: os.setgid(0))
attempt("setgroups", lambda: os.setgroups([0]))
open("/work/f", "w").close()
attempt("chown", lambda: os.chown("/work/f", 0, 0))
# capset: raise every capability (version 3 header)
hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)
data = (ctypes.c_uint32 * 6)(*([0xffffffff] * 6))
outcome["capset"] = libc.capset(hdr, data)
outcome["ptrace_parent"] = libc.ptrace(16, os.getppid(), 0, 0)  # PTRACE_ATTACH
outcome["ptrace_init"] = libc.ptrace(16, 1, 0, 0)
suid = [os.path.join(d, n) for d in ("/usr/bin", "/usr/sbin") for n in os.listdir(d)
        if os.stat(os.path.join(d, n)).st_mode & 0o6000]
outcome["suid_binaries"] = suid
p = subprocess.run(["su", "root", "-c", "id -u"], capture_output=True, timeout=10)
outcome["su"] = [p.returncode, p.stdout.decode()]
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
outcome["CapEff"] = status["CapEff"].strip()
outcome["CapPrm"] = status["CapPrm"].strip()
outcome["NoNewPrivs"] = status["NoNewPrivs"].strip()
outcome["uid"] = os.getresuid()
print(json.dumps(outcome))
"#,
        )
        .await;
    let outcome = json_out(&out);
    for key in ["setuid0", "setgid0", "setgroups", "chown"] {
        assert_eq!(outcome[key], "PermissionError", "{key}: {outcome}");
    }
    for key in ["capset", "ptrace_parent", "ptrace_init"] {
        assert_eq!(outcome[key], -1, "{key}: {outcome}");
    }
    assert_eq!(outcome["CapEff"], "0000000000000000");
    assert_eq!(outcome["CapPrm"], "0000000000000000");
    assert_eq!(outcome["NoNewPrivs"], "1");
    assert_eq!(outcome["uid"], serde_json::json!([10002, 10002, 10002]));
    // The image has no setuid/setgid binaries, and `su` cannot make the program root.
    assert_eq!(outcome["suid_binaries"], serde_json::json!([]), "{outcome}");
    assert_ne!(outcome["su"][0], 0, "{outcome}");
    assert!(
        !outcome["su"][1].as_str().unwrap().contains('0'),
        "{outcome}"
    );
    sandbox.stop().await;
}

#[tokio::test]
async fn mount_and_new_namespaces_are_refused() {
    let sandbox = pool().await;
    let out = sandbox
        .pass(
            r#"
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
os.mkdir("/work/m")
outcome = {
    "mount": libc.mount(b"tmpfs", b"/work/m", b"tmpfs", 0, None),
    "mount_errno": ctypes.get_errno(),
    "unshare_mnt": libc.unshare(0x00020000),     # CLONE_NEWNS
    "unshare_user": libc.unshare(0x10000000),    # CLONE_NEWUSER
    "unshare_net": libc.unshare(0x40000000),     # CLONE_NEWNET
    "chroot": libc.chroot(b"/work"),
}
print(json.dumps(outcome))
"#,
        )
        .await;
    let outcome = json_out(&out);
    for key in [
        "mount",
        "unshare_mnt",
        "unshare_user",
        "unshare_net",
        "chroot",
    ] {
        assert_eq!(outcome[key], -1, "{key} succeeded: {outcome}");
    }
    sandbox.pass("print('next')").await;
    sandbox.stop().await;
}

#[tokio::test]
async fn the_runner_cannot_be_killed_by_the_program() {
    let sandbox = pool().await;
    let host = sandbox.hostname().await;
    let started_before = sandbox.stats().containers_started;
    let result = sandbox
        .run(
            r#"
import os, signal
results = {}
for pid in [1, os.getppid()] + [int(p) for p in os.listdir('/proc') if p.isdigit()]:
    if pid == os.getpid():
        continue
    for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP):
        try:
            os.kill(pid, sig)
            results[pid] = "signalled"
        except PermissionError:
            results.setdefault(pid, "EPERM")
        except ProcessLookupError:
            pass
print(sorted(set(results.values())))
os.kill(-1, signal.SIGKILL)   # every process it may signal: only itself is left
"#,
        )
        .await;
    assert_eq!(result.stdout, "['EPERM']\n", "{result:#?}");
    // kill(-1) spares the caller: the program ran to its end.
    assert_eq!(result.status, Status::Passed, "{result:#?}");
    let result = sandbox.run("import os; os.kill(os.getpid(), 9)").await;
    assert_eq!(result.status, Status::Failed, "{result:#?}");
    assert_eq!(result.reason.as_deref(), Some("killed by signal 9"));
    assert_eq!(
        sandbox.hostname().await,
        host,
        "the same container serves on"
    );
    assert_eq!(sandbox.stats().containers_started, started_before);
    sandbox.stop().await;
}

#[tokio::test]
async fn file_descriptor_exhaustion_hurts_only_the_program() {
    let sandbox = pool().await;
    let host = sandbox.hostname().await;
    let out = sandbox
        .pass(
            r#"
import os, socket
held = []
try:
    while True:
        held.append(os.open("/dev/null", os.O_RDONLY))
except OSError as e:
    print(len(held), e.errno)
try:
    while True:
        held.extend(os.pipe())
except OSError:
    pass
try:
    while True:
        held.append(socket.socket())
except OSError:
    pass
"#,
        )
        .await;
    let (count, errno) = out.trim().split_once(' ').expect("count errno");
    assert!(
        count.parse::<i64>().unwrap() < sandbox.options.nofile,
        "{out}"
    );
    assert_eq!(errno, "24", "EMFILE");
    assert_eq!(sandbox.hostname().await, host);
    sandbox.stop().await;
}

#[tokio::test]
async fn returned_files_never_follow_symlinks() {
    let sandbox = pool().await;
    let mut request = TestSandbox::request(
        r#"
import os
os.symlink("/etc/passwd", "/work/passwd")
os.symlink("/proc/1/environ", "/work/environ")
os.symlink("/etc", "/work/etc")
os.mkdir("/work/dir")
os.mkfifo("/work/fifo")
with open("/work/big", "wb") as f:
    f.write(b"z" * (3 << 20))
with open("/work/ok.txt", "w") as f:
    f.write("fine")
os.symlink("ok.txt", "/work/relative")
os.symlink("/etc/passwd", "/mnt/data/passwd")
os.symlink("/work/ok.txt", "/mnt/data/to-work")
"#,
    );
    request.return_files = [
        "passwd",
        "environ",
        "etc/passwd",
        "dir",
        "fifo",
        "ok.txt",
        "big",
        "relative",
        "/mnt/data/passwd",
        "/mnt/data/to-work",
        "missing",
    ]
    .map(String::from)
    .to_vec();
    let result = sandbox.run_request(&request).await;
    assert_eq!(result.status, Status::Passed, "{result:#?}");
    assert_eq!(
        result.files.get("ok.txt").and_then(FileContent::as_text),
        Some("fine")
    );
    for link in [
        "passwd",
        "environ",
        "etc/passwd",
        "relative",
        "/mnt/data/passwd",
        "/mnt/data/to-work",
    ] {
        assert!(!result.files.contains_key(link), "{link}: {result:#?}");
        assert!(
            result.file_errors[link].contains("symbolic link"),
            "{link}: {:?}",
            result.file_errors
        );
    }
    for other in ["dir", "fifo", "missing"] {
        assert!(result.file_errors.contains_key(other), "{other}");
        assert!(!result.files.contains_key(other));
    }
    // Returned files share the capture cap: the big one is cut, and says so.
    let big = result.files.get("big").map_or(0, FileContent::len) as u64;
    assert_eq!(big, sandbox.options.max_output_bytes - 4, "{big}");
    assert!(
        result.file_errors["big"].contains("cut"),
        "{:?}",
        result.file_errors
    );
    sandbox.stop().await;
}

#[tokio::test]
async fn nothing_leaks_from_one_execution_to_the_next_in_the_same_container() {
    let sandbox = pool().await;
    let host = sandbox.hostname().await;
    // The secret is built at run time from two halves, so no later program text holds it.
    let leave = sandbox
        .run(
            r#"
import builtins, ctypes, json, os, subprocess, sys, time
secret = "S3CR" + "ET-" + "0f1e2d3c4b5a6978"
kept = [secret * 1000]
builtins.SECRET = secret
json.dumps = lambda *a, **k: secret
os.environ["SECRET"] = secret
for d in ("/work", "/tmp", "/dev/shm", "/mnt/data"):
    with open(d + "/secret", "w") as f:
        f.write(secret)
libc = ctypes.CDLL(None, use_errno=True)
IPC_CREAT = 0o1000
shm = libc.shmget(0x5EC, 4096, IPC_CREAT | 0o666)
sem = libc.semget(0x5ED, 1, IPC_CREAT | 0o666)
msg = libc.msgget(0x5EE, IPC_CREAT | 0o666)
libc.mq_open.restype = ctypes.c_int
mq = libc.mq_open(b"/secret", os.O_CREAT | os.O_RDWR, 0o666, None)
if os.fork() == 0:                      # a detached process that writes later
    os.setsid()
    if os.fork() == 0:
        time.sleep(1.5)
        with open("/work/late", "w") as f:
            f.write(secret)
    os._exit(0)
print(shm >= 0, sem >= 0, msg >= 0, mq >= 0)
"#,
        )
        .await;
    assert_eq!(leave.status, Status::Passed, "{leave:#?}");
    assert_eq!(
        leave.stdout, "True True True True\n",
        "all objects were created"
    );

    let look = r#"
import builtins, json, os, socket, sys
h1, h2 = "S3CR" + "ET-", "0f1e2d3c" + "4b5a6978"
found = {}
found["files"] = sorted(os.listdir("/work") + os.listdir("/tmp") + os.listdir("/dev/shm")
                        + os.listdir("/mnt/data"))
found["mqueue"] = os.listdir("/dev/mqueue")
found["sysv"] = [len(open("/proc/sysvipc/" + k).read().splitlines()) - 1 for k in ("shm", "sem", "msg")]
found["environ"] = "SECRET" in os.environ
found["builtins"] = hasattr(builtins, "SECRET")
found["json_patched"] = json.dumps([1]) != "[1]"
found["procs"] = [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()
                  and os.stat("/proc/" + p).st_uid == os.getuid()]
# Our own memory: readable mappings, looking for h1 immediately followed by h2.
hits = 0
with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
    for line in maps:
        addr, perms = line.split()[:2]
        if not perms.startswith("r") or "[vvar]" in line or "[vsyscall]" in line:
            continue
        start, end = (int(x, 16) for x in addr.split("-"))
        try:
            mem.seek(start)
            chunk = mem.read(end - start)
        except (OSError, OverflowError, ValueError):
            continue
        i = chunk.find(h1.encode())
        while i != -1:
            if chunk[i + len(h1): i + len(h1) + len(h2)] == h2.encode():
                hits += 1
            i = chunk.find(h1.encode(), i + 1)
found["memory_hits"] = hits
found["host"] = socket.gethostname()
print(json.dumps(found))
"#;
    let expected = serde_json::json!({
        "files": ["main.py"], "mqueue": [], "sysv": [0, 0, 0], "environ": false,
        "builtins": false, "json_patched": false, "procs": [], "memory_hits": 0, "host": host,
    });
    let found = json_out(&sandbox.pass(look).await);
    assert_eq!(
        found, expected,
        "the next execution sees nothing of the previous one"
    );
    // The detached writer was killed with its run: nothing appears later either.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let found = json_out(&sandbox.pass(look).await);
    assert_eq!(found, expected);
    sandbox.stop().await;
}

#[tokio::test]
async fn failures_are_classified() {
    let sandbox = pool().await;
    for (code, kind, reason) in [
        ("def f(:\n  pass", ErrorKind::Syntax, "SyntaxError"),
        ("  x = 1", ErrorKind::Syntax, "IndentationError"),
        (
            "import not_a_module",
            ErrorKind::Import,
            "ModuleNotFoundError",
        ),
        (
            "assert 1 == 2, 'nope'",
            ErrorKind::Assertion,
            "AssertionError: nope",
        ),
        ("1 / 0", ErrorKind::Runtime, "ZeroDivisionError"),
        (
            "import sys; sys.exit(3)",
            ErrorKind::Runtime,
            "exited with status 3",
        ),
    ] {
        let result = sandbox.run(code).await;
        assert_eq!(result.status, Status::Failed, "{code}: {result:#?}");
        assert_eq!(result.error_kind, Some(kind), "{code}: {result:#?}");
        assert!(
            result.reason.as_deref().unwrap_or("").starts_with(reason),
            "{code}: {:?}",
            result.reason
        );
    }
    let result = sandbox.run("1 / 0").await;
    assert!(
        !result.stderr.contains("/opt/codegen/"),
        "the traceback starts in the program: {}",
        result.stderr
    );
    assert!(result.stderr.contains("File \"/work/main.py\", line 1"));
    sandbox.stop().await;
}
