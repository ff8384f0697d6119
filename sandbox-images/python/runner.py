"""In-container runner for the codegen python sandbox (stdlib only, Python 3.11).

Protocol (version 1, one execution per container):

  stdin  <- exactly one JSON object, then EOF:
            {"code": str, "stdin": str|null, "timeout_ms": int, "max_output_bytes": int}
            ("stdin" may be omitted = null; unknown keys are ignored)
  stdout -> exactly one line, nothing else:
            "@@codegen-result@@ " + JSON
            {"exit_code": int|null, "signal": int|null, "timed_out": bool,
             "stdout": str, "stderr": str,
             "stdout_truncated": bool, "stderr_truncated": bool,
             "duration_ms": int}
            On a malformed request the line is {"runner_error": "<message>"} and the
            runner exits 2; on an internal failure (e.g. python3 cannot be started) it
            is {"runner_error": ...} too and the runner exits 3. Otherwise the runner
            exits 0, whatever the program did.

The program is `code`, written to <workdir>/main.py and run as `python3 -I main.py`
with cwd <workdir>, a minimal environment, in its own session / process group.
<workdir> is /work by default (a tmpfs in the container); `--workdir DIR` exists for
tests on the host.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

MARKER = "@@codegen-result@@ "
CHUNK = 65536
# How long to keep waiting for stdout/stderr EOF once every process we know of is
# dead. Only reached if something we could not kill still holds the pipes.
DRAIN_GRACE_S = 0.5
# Sanity bounds for the request (the worker enforces its own, tighter limits).
MAX_TIMEOUT_MS = 24 * 3600 * 1000
MAX_OUTPUT_BYTES = 1 << 30
CHILD_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/work",  # replaced by the real workdir below
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
}


class RequestError(Exception):
    pass


def emit(result):
    line = MARKER + json.dumps(result, separators=(",", ":")) + "\n"
    out = sys.stdout.buffer
    out.write(line.encode("ascii"))  # json.dumps escapes non-ASCII by default
    out.flush()


def parse_args(argv):
    workdir = "/work"
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--workdir" and i + 1 < len(argv):
            workdir = argv[i + 1]
            i += 2
        elif a.startswith("--workdir="):
            workdir = a.split("=", 1)[1]
            i += 1
        else:
            raise RequestError("unknown argument: %r" % a)
    return workdir


def parse_request(raw):
    try:
        req = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise RequestError("request is not valid JSON: %s" % e)
    if not isinstance(req, dict):
        raise RequestError("request must be a JSON object")

    code = req.get("code")
    if not isinstance(code, str):
        raise RequestError("'code' must be a string")
    stdin = req.get("stdin")
    if stdin is not None and not isinstance(stdin, str):
        raise RequestError("'stdin' must be a string or null")

    def int_field(name, minimum, maximum):
        v = req.get(name)
        if not isinstance(v, int) or isinstance(v, bool) or not minimum <= v <= maximum:
            raise RequestError("'%s' must be an integer in [%d, %d]" % (name, minimum, maximum))
        return v

    timeout_ms = int_field("timeout_ms", 1, MAX_TIMEOUT_MS)
    max_output = int_field("max_output_bytes", 0, MAX_OUTPUT_BYTES)
    try:  # JSON may carry lone surrogates ("\ud800"), which are not valid UTF-8
        code_bytes = code.encode("utf-8")
        stdin_bytes = (stdin or "").encode("utf-8")
    except UnicodeEncodeError:
        raise RequestError("'code' and 'stdin' must be valid Unicode (no lone surrogates)")
    return code_bytes, stdin_bytes, timeout_ms, max_output


def set_child_subreaper():
    """Make orphaned descendants re-parent to us (not to PID 1) so we can kill and
    reap them. Best effort: without it only the process group is cleaned up."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_CHILD_SUBREAPER = 36
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except Exception:
        return False


def our_children():
    """PIDs whose parent is this process (scan of /proc; works without
    CONFIG_PROC_CHILDREN)."""
    me = os.getpid()
    pids = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return pids
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # "pid (comm) state ppid ..." - comm may contain spaces/parens.
        rest = stat[stat.rfind(b")") + 2 :].split()
        if len(rest) >= 2 and int(rest[1]) == me:
            pids.append(int(name))
    return pids


def reap_all():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_leftovers(pgid, subreaper):
    """SIGKILL everything the program left behind.

    1. The program's process group (it was started with start_new_session=True, so
       pgid == its pid and every descendant that did not call setsid/setpgid is in it).
    2. If we are a child subreaper, every orphan re-parented to us - this also gets
       descendants that escaped the group with setsid(), as long as their parent died
       first. A descendant that escaped the group AND still has a living non-group
       parent can survive this sweep; that is acceptable because the container (and
       with it its PID namespace) is removed after each run anyway.
    """
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if not subreaper:
        reap_all()
        return
    for _ in range(50):  # bounded: a forking program cannot keep us here forever
        reap_all()
        kids = our_children()
        if not kids:
            return
        for pid in kids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        # Wait (briefly) for at least one of them so the next round sees their
        # re-parented children.
        deadline = time.monotonic() + 0.2
        while time.monotonic() < deadline:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid:
                break
            time.sleep(0.002)


class Capture:
    """Reads a pipe to EOF, keeping at most `limit` bytes and discarding the rest,
    so the writer never blocks on a full pipe."""

    def __init__(self, fileobj, limit):
        self.fd = fileobj.fileno()
        self.fileobj = fileobj
        self.limit = limit
        self.buf = bytearray()
        self.truncated = False
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while True:
            try:
                data = os.read(self.fd, CHUNK)
            except OSError:
                break
            if not data:
                break
            with self.lock:
                room = self.limit - len(self.buf)
                if room > 0:
                    self.buf += data[:room]
                if len(data) > room:
                    self.truncated = True

    def result(self):
        with self.lock:
            return bytes(self.buf).decode("utf-8", errors="replace"), self.truncated


def feed_stdin(pipe, data):
    try:
        if data:
            pipe.write(data)
            pipe.flush()
    except (BrokenPipeError, OSError):
        pass  # program exited or closed its stdin: fine
    finally:
        try:
            pipe.close()
        except OSError:
            pass


def prefer_oom_kill():
    """Runs in the child before exec: make the program (and everything it starts)
    the OOM killer's first choice within the container's memory cgroup, so that the
    runner survives to report. Raising oom_score_adj needs no privilege."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass


def run(workdir, code_bytes, stdin_bytes, timeout_ms, max_output):
    main_py = os.path.join(workdir, "main.py")
    with open(main_py, "wb") as f:
        f.write(code_bytes)

    env = dict(CHILD_ENV)
    env["HOME"] = workdir
    subreaper = set_child_subreaper()

    t0 = time.monotonic()
    # The executable is looked up in env["PATH"], not in the runner's PATH.
    proc = subprocess.Popen(
        ["python3", "-I", main_py],
        cwd=workdir,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        close_fds=True,
        # Safe here: the runner has no other threads yet when it forks.
        preexec_fn=prefer_oom_kill,
    )
    out = Capture(proc.stdout, max_output)
    err = Capture(proc.stderr, max_output)
    feeder = threading.Thread(target=feed_stdin, args=(proc.stdin, stdin_bytes), daemon=True)
    feeder.start()

    # A blocking waitpid in a thread gives an exact exit time (Popen.wait(timeout)
    # polls with up to 50 ms sleeps).
    exited = threading.Event()
    end = [None]

    def waiter():
        proc.wait()
        end[0] = time.monotonic()
        exited.set()

    threading.Thread(target=waiter, daemon=True).start()

    timed_out = not exited.wait(timeout_ms / 1000.0)
    if timed_out:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        kill_t = time.monotonic()
        exited.wait()
        end[0] = kill_t
    duration_ms = int(round((end[0] - t0) * 1000))

    # Whether it exited or was killed: nothing it started may survive the run.
    kill_leftovers(proc.pid, subreaper)

    grace_end = time.monotonic() + DRAIN_GRACE_S
    for c in (out, err):
        c.thread.join(max(0.0, grace_end - time.monotonic()))
    feeder.join(max(0.0, grace_end - time.monotonic()))

    stdout, stdout_trunc = out.result()
    stderr, stderr_trunc = err.result()
    rc = proc.returncode
    if rc is not None and rc < 0:
        exit_code, sig = None, -rc
    else:
        exit_code, sig = rc, None
    return {
        "exit_code": exit_code,
        "signal": sig,
        "timed_out": timed_out,
        "stdout": stdout,
        "stderr": stderr,
        "stdout_truncated": stdout_trunc,
        "stderr_truncated": stderr_trunc,
        "duration_ms": duration_ms,
    }


def main(argv):
    try:
        workdir = parse_args(argv)
        raw = sys.stdin.buffer.read()
        code, stdin_bytes, timeout_ms, max_output = parse_request(raw)
    except RequestError as e:
        emit({"runner_error": str(e)})
        return 2
    try:
        result = run(workdir, code, stdin_bytes, timeout_ms, max_output)
    except Exception as e:  # internal failure: still exactly one result line
        emit({"runner_error": "%s: %s" % (type(e).__name__, e)})
        return 3
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
