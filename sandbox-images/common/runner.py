"""In-container fork-server runner of the codegen sandbox images (stdlib only, Python 3.11).

The same file serves every language image; /opt/codegen/language.json says how programs run
(see LANGUAGE below; absent: Python in-process). One long-lived runner per warm container. It
starts as uid 0 inside the container with only CAP_SETUID, CAP_SETGID and CAP_KILL (every
other capability dropped, no-new-privileges) and refuses to start with more or fewer.
Programs run as PROGRAM_UID (10002) with no capabilities.

Protocol (version 5) over the container's attached stdin/stdout. Every message is a frame: a
4-byte big-endian length, then that many bytes of JSON (an object). The runner's frames are
pure ASCII. Nothing else is ever written to stdout; stderr carries diagnostics only.

  runner -> worker  {"type": "ready", "protocol": 5, "runs": int, "harness": [mode]}
                      the container is clean and a request may be sent (at start and again
                      after every execution; after one whose request said "rest", once
                      the worker said "prepare"). "harness": the modes of the image's test
                      harness, as loaded and warmed up by the zygote (empty: none, or it
                      failed its warm-up); the worker sends no other.
  worker -> runner  {"type": "prepare"}, only after the result of a request that said
                      "rest": true: every process of the last program is already dead, and
                      the runner now forks and prepares the next program process (and
                      scrubs what the last one left), then says "ready". The worker chooses
                      the moment: at once when a run waits for this container, else a little
                      later, so that this housekeeping does not take the cores from the
                      orchestration the result sets off. Without "rest" the runner prepares
                      right after the result (a busy pool: nothing to wait for).
  worker -> runner  a request, only after "ready":
                      {"code": str, "stdin": str|null, "timeout_ms": int,
                       "max_output_bytes": int,    capture cap per stream; output past it is
                                                   read and discarded ("*_truncated")
                       "output_limit_bytes": int,  hard cap on stdout+stderr: past it the
                                                   program is killed ("output_limited")
                       "test": str|null,           optional test script, run after the code
                                                   in the same namespace / scope / shell
                       "files": {path: str | {"base64": str}},
                                                   optional, written to /work before the run
                                                   (a relative path) or below /mnt/data (a
                                                   path that starts with /mnt/data/)
                                                   (text as UTF-8, or the decoded bytes);
                                                   the language's main and test file names
                                                   are reserved (an "error" answer)
                       "return_files": [path],     optional, read back after the run
                       "harness": null | object,   optional, Python in-process only: run by
                                                   harness.py (see there; "cases" and
                                                   "integrate" in a fresh module `solution`,
                                                   a "program_test" in __main__); not with
                                                   "test"
                       "cpu_time_ms": int|null,    optional CPU-time limit (the container
                                                   cgroup's, over the run): past it the
                                                   program is killed ("cpu_limited")
                       "rest": bool}               optional: after the result, wait for
                                                   "prepare" (see below)
  runner -> worker  {"type": "result", "exit_code": int|null, "signal": int|null,
                     "timed_out": bool, "oom_killed": bool, "output_limited": bool,
                     "stdout": str, "stderr": str, "stdout_truncated": bool,
                     "stderr_truncated": bool, "duration_ms": int,
                     "cpu_ms": int|null,          the container cgroup's CPU time over the run
                     "cpu_limited": bool,         killed at "cpu_time_ms"
                     "peak_memory_kb": int|null,  the program's peak resident memory: P's
                                                  high-water mark (and that of the children it
                                                  waited for) from Z's wait4, less P's own
                                                  before the request (in-process mode: the
                                                  zygote's pages it shares); see peak_memory()
                     "exception": null | {"type", "module", "message",
                                          "kind": "syntax"|"import"|"assertion"|"runtime"},
                                  (only with exit_code 1: the uncaught exception that ended it)
                     "phase": null | "code" | "test",
                                  where the uncaught exception happened, or (only with a
                                  test) the exit that ended it before the test's end
                     "test_finished": null | bool,
                                  null without a test; true only when the code and the test
                                  both ran to their natural end (no uncaught exception, no
                                  exit before the test's end); the verdict still needs
                                  exit_code 0
                     "harness": null | object,
                     "files": {relpath: str|{"base64": str}|null},  text when UTF-8, else base64
                     "file_errors": {relpath: str}}
                    or {"type": "error", "message": str} for a request it cannot run.
  runner -> worker  {"type": "fatal", "message": str, "oom_killed": bool}: the runner cannot
                    vouch for a clean container (a scrub failed, a process survived, a
                    supervisor died); it exits and the container must be discarded.

Language modes (language.json: {"name", "main", "test", "mode", "command"}, optionally
"compile", "test_form", "report", "env", "preload"):

  in_process  (Python) P runs the code as __main__ of its already-warm interpreter (no exec:
              a run costs about a millisecond), file `main`; a test is then compiled (file
              `test`) and run in the same namespace, as HumanEval concatenates them.
              "preload": modules the zygote imports at start-up besides the standard ones
              (python-sci: numpy, scipy, pandas, ...), so a program's import finds them warm.
  exec        P writes the code to /work/<main> (and the test to /work/<test>), forks a child
              with a report pipe as fd 3 and execs `command + [main path] + [test path]`.
              The harness behind `command` runs the program and writes at most one JSON line
              to fd 3: {"exception": ..., "phase": ..., "test_finished": ...}. exit_code /
              signal are the child's; the rest of the result as above.
  compiled    exec mode with "compile": [argv]: P first runs `compile + sources` (or with the
              sources where an argument is "{sources}"; cwd /work,
              stdin /dev/null, its own process group, "compile_timeout_ms" of the request,
              default 10 s), which builds into /build, the one tmpfs programs may exec from;
              then it execs `command` (without sources). The sources: /work/<main>, and with
              a test either /work/<test> beside it ("test_form": "file") or the test appended
              to the code in /work/<main> ("append": one translation unit whose entry point
              is the test's). P tells C {"compiled": {...}} when the compile ended: the run's
              wall clock, CPU count and CPU limit start there. A compile that fails or times
              out ends the request: the result's "compile" says how, nothing ran.
              "report": false: the program writes no fd-3 report; with a test,
              test_finished is exit status 0. "env": variables set for compile and run.
              "assertion": a regular expression (multi-line) that finds, in the stderr of
              a program that failed, the failed assertion a report-less language prints
              (Java's AssertionError, C's assert, Rust's assert!); its group "message" (or
              the whole match) becomes an exception of kind "assertion".

  A compiled language's result carries "compile": {"status": "ok"|"error"|"timeout",
  "exit_code", "signal", "output" (the compiler's stdout and stderr, 64 KiB at most),
  "duration_ms", "oom_killed"}; other languages' carry "compile": null.

Process model (who holds what):

  Z  the zygote (this process after start-up): imports what Python programs commonly need
     (nothing in exec mode), forks C once, and from then on only forks program processes
     when C asks (over a socketpair), hands C their pipe ends (SCM_RIGHTS), reaps them and
     tells C how they ended. It reads language.json once at start-up, but never
     reads a request: nothing of any execution is ever in its memory, so nothing of one can
     be in a program forked from it.
  C  the supervisor, long-lived, forked once by Z; it never forks. It asks Z for the next P,
     waits until P says it is prepared, announces "ready", reads the request, hands it to P,
     feeds P's stdin, captures its output, enforces the deadline and the output cap, reads
     the cgroup's OOM counter, answers, and kills every process of PROGRAM_UID (it holds
     CAP_KILL and, being root, cannot be signalled back; it forks nothing, so an exhausted
     pids limit does not stop it). Only then does it ask for the next P.
  P  the program process, one per execution, forked by Z before its request exists. Still
     empty-handed it starts a new session, makes itself the OOM killer's first choice,
     becomes PROGRAM_UID (setgroups/setresgid/setresuid: every capability gone), takes fresh
     stdio pipes, closes every other descriptor, resets environment and signals, and scrubs
     what the previous program left: /work, /tmp, /dev/shm, /dev/mqueue and SysV IPC objects
     (every process of that program is already dead). Then it reads the request from C and
     runs it (in-process, or an exec'd child in its session), reads back the requested files
     without following symlinks, and sends C its final report (framed, with its pid) before
     exiting the way the interpreter would.

P can neither signal nor ptrace nor read Z or C (different uid, no capabilities), cannot reach
the container's stdin/stdout (never inherited; /proc of root processes is closed to it), and
starts from Z's start-up state: no earlier request was ever in the memory it came from.

`--selftest` checks the privileges and the language configuration and exits.
"""

import errno
import json
import os
import re
import resource
import select
import signal
import socket
import stat
import struct
import sys
import time

PROTOCOL = 5
PROGRAM_UID = 10002
PROGRAM_GID = 10002
WORKDIR = "/work"
# The one absolute place `files` and `return_files` may name (SandboxFusion's datasets put
# their files there): a tmpfs of its own, scrubbed like /work.
DATA_DIR = "/mnt/data"
# /build (compiled languages only: the one tmpfs programs may exec from) holds the binary.
BUILD_DIR = "/build"
SCRUB_DIRS = ("/work", "/tmp", "/dev/shm", "/dev/mqueue", BUILD_DIR, DATA_DIR)
# Bytes of the compiler's output (stdout and stderr together) a compile result keeps.
MAX_COMPILE_OUTPUT = 64 << 10
# Time C gives P's compile past its own limit before it counts the compile as timed out.
COMPILE_GRACE_S = 2.0
HARNESS_PATH = "/opt/codegen/harness.py"
LANGUAGE_PATH = "/opt/codegen/language.json"
OOM_CONTROL = "/sys/fs/cgroup/memory/memory.oom_control"
CPU_USAGE = "/sys/fs/cgroup/cpuacct/cpuacct.usage"
MAX_FRAME = 256 << 20
MAX_TIMEOUT_MS = 24 * 3600 * 1000
MAX_OUTPUT_BYTES = 1 << 30
MAX_RETURN_FILES = 64
CHUNK = 1 << 16
# Bytes of the program's status report (exception, harness results, files) C reads at most.
MAX_STATUS_BYTES = 32 << 20
# Bytes of an exec-mode harness report (fd 3) P keeps: the last ones, where the report is.
MAX_HARNESS_REPORT = 64 << 10
CHILD_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": WORKDIR,
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
}
# Modules the zygote imports once so that programs find them warm.
PRELOAD = (
    "abc", "argparse", "array", "ast", "atexit", "base64", "bisect", "collections",
    "collections.abc", "contextlib", "copy", "dataclasses", "datetime", "decimal", "enum",
    "fractions", "functools", "hashlib", "heapq", "inspect", "io", "itertools", "json",
    "linecache", "math", "numbers", "operator", "random", "re", "statistics", "string",
    "struct", "textwrap", "threading", "traceback", "types", "typing", "unittest",
)
DEFAULT_LANGUAGE = {"name": "python", "main": "main.py", "test": "test.py", "mode": "in_process"}
# The image's language (language.json), read once by Z at start-up: no request is in it.
LANGUAGE = dict(DEFAULT_LANGUAGE)
EXCEPTION_KINDS = ("syntax", "import", "assertion", "runtime")


class RequestError(Exception):
    pass


class Fatal(Exception):
    pass


# ----------------------------------------------------------------------------- frames


def read_exact(fd, n):
    """n bytes from fd, or None at EOF before the first byte; EOF mid-way is an error."""
    parts = []
    got = 0
    while got < n:
        try:
            b = os.read(fd, min(n - got, 1 << 20))
        except InterruptedError:
            continue
        if not b:
            if got == 0:
                return None
            raise Fatal("end of input inside a frame")
        parts.append(b)
        got += len(b)
    return b"".join(parts)


def read_frame(fd):
    header = read_exact(fd, 4)
    if header is None:
        return None
    (n,) = struct.unpack(">I", header)
    if n > MAX_FRAME:
        raise Fatal("frame of %d bytes is over the bound" % n)
    body = read_exact(fd, n) if n else b""
    if body is None:
        raise Fatal("end of input inside a frame")
    return body


def write_all(fd, data):
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        view = view[n:]


def frame(body):
    return struct.pack(">I", len(body)) + body


def write_frame(fd, obj):
    # ensure_ascii (the default): pure ASCII, lone surrogates of lossy decoding included
    write_all(fd, frame(json.dumps(obj, separators=(",", ":")).encode("ascii")))


# ----------------------------------------------------------------------------- libc


_libc = None


def libc():
    global _libc
    if _libc is None:
        import ctypes

        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36


def prctl(option, arg):
    return libc().prctl(option, arg, 0, 0, 0) == 0


def read_small(path):
    """The bytes of a small file (/proc, /sys), read with one system call: no Python file
    object (open() builds three, a cost every program process paid at each read)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


def write_small(path, data, flags=os.O_WRONLY):
    fd = os.open(path, flags | os.O_CLOEXEC, 0o666)  # less the umask, as open() does
    try:
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- language


def load_language(path=LANGUAGE_PATH):
    """The image's language.json, validated: (config, problems). Absent: Python in-process."""
    try:
        with open(path, "rb") as f:
            raw = f.read(1 << 16)
    except FileNotFoundError:
        return dict(DEFAULT_LANGUAGE), []
    except OSError as e:
        return None, ["cannot read %s: %s" % (path, e.strerror)]
    try:
        cfg = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        return None, ["%s is not valid JSON: %s" % (path, e)]
    if not isinstance(cfg, dict):
        return None, ["%s must hold an object" % path]
    problems = []
    for key in ("name", "main", "test"):
        v = cfg.get(key)
        if not isinstance(v, str) or not v or "/" in v or v in (".", "..") or "\0" in v:
            problems.append("language.json: %r must be a plain file name" % key)
    if not problems and cfg["main"] == cfg["test"]:
        problems.append("language.json: 'main' and 'test' must differ")
    mode = cfg.get("mode")
    if mode == "exec":
        cmd = cfg.get("command")
        if (not isinstance(cmd, list) or not cmd
                or not all(isinstance(a, str) and a and "\0" not in a for a in cmd)
                or not cmd[0].startswith("/")):
            problems.append("language.json: 'command' must be a list of strings, "
                            "the first an absolute path")
        elif cfg.get("compile") is None and not os.access(cmd[0], os.X_OK):
            problems.append("language.json: %s is not executable" % cmd[0])
    elif mode != "in_process":
        problems.append("language.json: 'mode' must be 'in_process' or 'exec'")
    build = cfg.get("compile")
    if build is not None:
        if mode != "exec":
            problems.append("language.json: 'compile' needs 'mode': 'exec'")
        elif (not isinstance(build, list) or not build
                or not all(isinstance(a, str) and a and "\0" not in a for a in build)
                or not build[0].startswith("/")):
            problems.append("language.json: 'compile' must be a list of strings, "
                            "the first an absolute path")
        elif not os.access(build[0], os.X_OK):
            problems.append("language.json: %s is not executable" % build[0])
    if cfg.get("test_form", "file") not in ("file", "append"):
        problems.append("language.json: 'test_form' must be 'file' or 'append'")
    if not isinstance(cfg.get("report", True), bool):
        problems.append("language.json: 'report' must be true or false")
    if cfg.get("prestart", False) not in (True, False):
        problems.append("language.json: 'prestart' must be true or false")
    elif cfg.get("prestart") and (mode != "exec" or build is not None):
        problems.append("language.json: 'prestart' needs 'mode': 'exec' and no 'compile'")
    preload = cfg.get("preload", [])
    if not isinstance(preload, list) or not all(
        isinstance(m, str) and m and all(p.isidentifier() for p in m.split("."))
        for m in preload
    ):
        problems.append("language.json: 'preload' must be a list of module names")
    elif preload and mode != "in_process":
        problems.append("language.json: 'preload' needs 'mode': 'in_process'")
    assertion = cfg.get("assertion")
    if assertion is not None:
        try:
            re.compile(assertion, re.M)
        except (TypeError, re.error) as e:
            problems.append("language.json: 'assertion' must be a regular expression (%s)" % e)
    env = cfg.get("env", {})
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and k and "=" not in k
        for k, v in env.items()
    ):
        problems.append("language.json: 'env' must map variable names to strings")
    return (cfg if not problems else None), problems


def exec_mode():
    return LANGUAGE["mode"] == "exec"


def compiles():
    return exec_mode() and LANGUAGE.get("compile") is not None


def work_path(name):
    return os.path.join(WORKDIR, LANGUAGE[name])


# ----------------------------------------------------------------------------- request


def parse_request(raw):
    try:
        req = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise RequestError("request is not valid JSON: %s" % e)
    if not isinstance(req, dict):
        raise RequestError("request must be a JSON object")

    def text(name, value):
        if not isinstance(value, str):
            raise RequestError("%s must be a string" % name)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise RequestError("%s must be valid Unicode (no lone surrogates)" % name)
        return value

    def integer(name, minimum, maximum, default=None):
        v = req.get(name, default)
        if not isinstance(v, int) or isinstance(v, bool) or not minimum <= v <= maximum:
            raise RequestError("'%s' must be an integer in [%d, %d]" % (name, minimum, maximum))
        return v

    out = {
        "code": text("'code'", req.get("code")),
        "stdin": text("'stdin'", req.get("stdin") or ""),
        "timeout_ms": integer("timeout_ms", 1, MAX_TIMEOUT_MS),
        "max_output_bytes": integer("max_output_bytes", 0, MAX_OUTPUT_BYTES),
    }
    out["cpu_time_ms"] = (
        None if req.get("cpu_time_ms") is None else integer("cpu_time_ms", 1, MAX_TIMEOUT_MS)
    )
    out["compile_timeout_ms"] = integer("compile_timeout_ms", 1, MAX_TIMEOUT_MS, default=10_000)
    out["output_limit_bytes"] = integer(
        "output_limit_bytes", 0, 1 << 62, default=max(2 * out["max_output_bytes"], 100 << 20)
    )
    test = req.get("test")
    out["test"] = None if test is None else text("'test'", test)
    files = req.get("files")
    files = {} if files is None else files
    if not isinstance(files, dict):
        raise RequestError("'files' must be an object of path -> content")
    for path, content in files.items():
        check_relpath(path)
        file_bytes("files[%r]" % path, content, text)
    out["files"] = files
    returned = req.get("return_files")
    returned = [] if returned is None else returned
    if not isinstance(returned, list) or len(returned) > MAX_RETURN_FILES:
        raise RequestError("'return_files' must be a list of at most %d paths" % MAX_RETURN_FILES)
    for path in returned:
        check_relpath(path)
    out["return_files"] = returned
    harness = req.get("harness")
    if harness is not None and not isinstance(harness, dict):
        raise RequestError("'harness' must be an object or null")
    if harness is not None and exec_mode():
        raise RequestError("'harness' is not available for %s: use 'test'" % LANGUAGE["name"])
    if harness is not None and out["test"] is not None:
        raise RequestError("'harness' and 'test' cannot be combined")
    out["harness"] = harness
    rest = req.get("rest", False)
    if not isinstance(rest, bool):
        raise RequestError("'rest' must be a boolean")
    out["rest"] = rest
    return out


def file_bytes(name, content, text=None):
    """A file's content as the request carries it: text (a string) or any bytes
    ({"base64": str}, standard alphabet, padded). Returns the bytes to write."""
    import binascii

    if isinstance(content, str):
        if text is not None:
            text(name, content)
        return content.encode("utf-8")
    if isinstance(content, dict) and set(content) == {"base64"} and isinstance(
        content["base64"], str
    ):
        try:
            return binascii.a2b_base64(content["base64"], strict_mode=True)
        except (binascii.Error, ValueError) as e:
            raise RequestError("%s: not base64: %s" % (name, e))
    raise RequestError('%s must be a string (text) or {"base64": str} (bytes)' % name)


def returned_content(data):
    """A returned file as the answer carries it: a string when it is UTF-8, else base64."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        import binascii

        return {"base64": binascii.b2a_base64(data, newline=False).decode("ascii")}


def check_relpath(path):
    """A plain relative path below the work directory, or one below DATA_DIR: no '..', '.',
    '//', other absolute path or NUL, and not the program's own main or test file."""
    if not isinstance(path, str) or not path or len(path) > 1024:
        raise RequestError("file paths must be non-empty strings of at most 1024 characters")
    top, rel = file_place(path)
    parts = rel.split("/")
    if rel.startswith("/") or "\0" in rel or any(p in ("", ".", "..") for p in parts):
        raise RequestError("file path %r must be relative (or below %s/), without '.', '..' "
                           "or '//'" % (path, DATA_DIR))
    if path == LANGUAGE["main"]:
        raise RequestError("file path %r is the program itself" % path)
    if path == LANGUAGE["test"]:
        raise RequestError("file path %r is reserved for the test" % path)
    return parts


# ----------------------------------------------------------------------------- processes


# Cgroup files the supervisor reads around every run, kept open (read with pread at 0, as a
# seq_file regenerates its contents): a Python open() per read also costs a stat, an ioctl, a
# seek and a close. Close-on-exec, and a program process closes them before anything runs.
CGROUP_FDS = {}


def read_cgroup(path):
    """The contents of the cgroup file `path`, or None when it cannot be read."""
    try:
        fd = CGROUP_FDS.get(path)
        if fd is None:
            fd = CGROUP_FDS[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        return os.pread(fd, 4096, 0)
    except OSError:
        return None


def oom_kills():
    """The memory cgroup's OOM-kill counter (cgroup v1), or None when it cannot be read."""
    for line in (read_cgroup(OOM_CONTROL) or b"").split(b"\n"):
        if line.startswith(b"oom_kill "):
            try:
                return int(line.split()[1])
            except ValueError:
                return None
    return None


def cpu_ns():
    """CPU time the container's cgroup has used, in nanoseconds (cgroup v1), or None."""
    try:
        return int(read_cgroup(CPU_USAGE) or b"x")
    except ValueError:
        return None


def program_pids():
    """Live (not yet dead or zombie) processes whose real uid is PROGRAM_UID."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fd = os.open("/proc/%s/status" % name, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            data = os.read(fd, 1024)
        except OSError:
            continue
        finally:
            os.close(fd)
        uid = state = None
        for line in data.split(b"\n"):
            if line.startswith(b"State:"):
                state = line.split()[1][:1]
            elif line.startswith(b"Uid:"):
                uid = int(line.split()[1])
                break
        if uid == PROGRAM_UID and state not in (b"Z", b"X"):
            found.append(int(name))
    return found


# Exit statuses of children collected by reap(), for a later wait_for().
REAPED = {}


def reap():
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        REAPED[pid] = status


def wait_for(pid):
    """Exit status of a child, also when reap() already collected it (None if unknown)."""
    if pid in REAPED:
        return REAPED.pop(pid)
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue
        except ChildProcessError:
            return REAPED.pop(pid, None)


def kill_program():
    """SIGKILL every process of PROGRAM_UID until none is left. The caller is root with
    CAP_KILL, so nothing of the program can signal it back, and it forks nothing, so an
    exhausted pids limit does not stop it. False if some survive a generous bound."""
    deadline = time.monotonic() + 5.0
    while True:
        reap()
        pids = program_pids()
        if not pids:
            return True
        if time.monotonic() > deadline:
            return False
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.0002)


def drop_to_program_uid():
    os.setgroups([])
    os.setresgid(PROGRAM_GID, PROGRAM_GID, PROGRAM_GID)
    os.setresuid(PROGRAM_UID, PROGRAM_UID, PROGRAM_UID)
    if os.getresuid() != (PROGRAM_UID,) * 3 or os.getresgid() != (PROGRAM_GID,) * 3:
        raise Fatal("could not become uid %d" % PROGRAM_UID)


# ----------------------------------------------------------------------------- scrub


def remove_tree_contents(top, problems, depth=0):
    """Removes everything below `top` without following symlinks (as the owner of it);
    returns whether there was anything."""
    if depth > 200:
        problems.append("%s: nested too deeply to scrub" % top)
        return True
    try:
        entries = os.listdir(top)
    except FileNotFoundError:
        return False
    except OSError as e:
        problems.append("%s: %s" % (top, e.strerror))
        return True
    for name in entries:
        path = os.path.join(top, name)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        except OSError as e:
            problems.append("%s: %s" % (path, e.strerror))
            continue
        if stat.S_ISDIR(st.st_mode):
            try:
                os.chmod(path, 0o700)
            except OSError:
                pass
            remove_tree_contents(path, problems, depth + 1)
            try:
                os.rmdir(path)
            except OSError as e:
                problems.append("%s: %s" % (path, e.strerror))
        else:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as e:
                problems.append("%s: %s" % (path, e.strerror))
    return bool(entries)


def sysv_ipc_ids():
    """(kind, id) of every SysV IPC object in this IPC namespace."""
    ids = []
    for kind in ("shm", "sem", "msg"):
        try:
            lines = read_small("/proc/sysvipc/" + kind).splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 1:
                ids.append((kind, int(cols[1])))
    return ids


def scrub():
    """Removes what a previous program left. Runs as PROGRAM_UID (every object the program
    could create is its own) after all of its processes are dead. Returns the problems."""
    problems = []
    held = []
    for top in SCRUB_DIRS:
        before = len(problems)
        if remove_tree_contents(top, problems) or len(problems) > before:
            held.append(top)
    ids = sysv_ipc_ids()
    if ids:
        import ctypes

        lib = libc()
        for kind, ident in ids:
            if kind == "shm":
                rc = lib.shmctl(ident, 0, None)  # IPC_RMID
            elif kind == "sem":
                rc = lib.semctl(ident, 0, 0)
            else:
                rc = lib.msgctl(ident, 0, None)
            err = ctypes.get_errno()
            if rc != 0 and err not in (errno.EINVAL, errno.EIDRM):
                problems.append("sysv %s %d: %s" % (kind, ident, os.strerror(err)))
        if sysv_ipc_ids():
            problems.append("SysV IPC objects left after the scrub")
    # A directory found empty stays so: every process of the program uid is dead and this
    # one writes nothing. One that held something is listed again.
    for top in held:
        try:
            if os.listdir(top):
                problems.append("%s is not empty after the scrub" % top)
        except FileNotFoundError:
            pass
        except OSError as e:
            problems.append("%s: %s" % (top, e.strerror))
    return problems


def collect_files(paths, budget):
    """Reads the named files below WORKDIR without following any symlink on the way (every
    component is opened with O_NOFOLLOW), regular files only, `budget` bytes in all (a file
    past it is cut). The reader is the program's own uid, so a link can never reach more
    than the program itself could read; the checks make the answer say what happened."""
    files, errors = {}, {}
    for path in paths:
        fd = None
        try:
            top, rel = file_place(path)
            parts = rel.split("/")
            fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            for part in parts[:-1]:
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = nxt
            leaf = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
            os.close(fd)
            fd = leaf
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            room = max(0, budget)
            chunks, got = [], 0
            while got <= room:
                chunk = os.read(fd, min(1 << 20, room + 1 - got))
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
            data = b"".join(chunks)
            if len(data) > room:
                data = data[:room]
                errors[path] = "cut at %d bytes (the cap on returned files)" % room
            budget -= len(data)
            files[path] = returned_content(data)
        except OSError as e:
            files[path] = None
            if e.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link_on_path(top, parts):
                errors[path] = "a symbolic link on the path (not followed)"
            else:
                errors[path] = e.strerror or str(e)
        finally:
            if fd is not None:
                os.close(fd)
    return files, errors


def _is_link_on_path(top, parts):
    for i in range(1, len(parts) + 1):
        try:
            if stat.S_ISLNK(os.lstat(os.path.join(top, *parts[:i])).st_mode):
                return True
        except OSError:
            return False
    return False


# ----------------------------------------------------------------------------- program (P)


def classify(exc_type):
    """Error kind of an exception class, by name along its MRO (so a class the program
    derived from AssertionError is an assertion too)."""
    names = {c.__name__ for c in getattr(exc_type, "__mro__", ())}
    if "SyntaxError" in names:  # IndentationError, TabError
        return "syntax"
    if "ImportError" in names:  # ModuleNotFoundError
        return "import"
    if "AssertionError" in names:
        return "assertion"
    return "runtime"


def stderr_assertion(stderr):
    """The failed assertion language.json's "assertion" finds in a failed program's stderr,
    as an exception of kind "assertion"; None without one."""
    pattern = LANGUAGE.get("assertion")
    if not pattern:
        return None
    match = re.search(pattern, stderr, re.M)
    if match is None:
        return None
    message = match.groupdict().get("message") or match.group(0)
    return {"type": "AssertionError", "module": "", "message": message.strip()[:2000],
            "kind": "assertion"}


def describe(exc):
    t = type(exc)
    try:
        message = str(exc)
    except Exception:
        message = "<unprintable>"
    return {
        "type": t.__qualname__,
        "module": t.__module__,
        "message": message[:2000],
        "kind": classify(t),
    }


def close_other_fds(keep):
    """Closes every descriptor above 2 except `keep`: os.closerange around them, up to the
    descriptor limit (one close_range(2) call each; CPython closes one by one where the
    kernel lacks it, at most FD_BOUND calls). Without a finite limit, by listing them."""
    if FD_BOUND is None:
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd > 2 and fd not in keep:
                try:
                    os.close(fd)
                except OSError:
                    pass
        return
    low = 3
    for fd in sorted(keep):
        if fd > low:
            os.closerange(low, fd)
        low = max(low, fd + 1)
    if low < FD_BOUND:
        os.closerange(low, FD_BOUND)


def fd_bound():
    """One past the highest descriptor a process of this container can hold (the hard
    RLIMIT_NOFILE, fixed for the container's life), or None when it is unlimited or huge."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY or hard > (1 << 20):
        return None
    return hard


FD_BOUND = fd_bound()


def stdio_objects():
    """sys.stdin, sys.stdout and sys.stderr as a fresh `python3` has them on pipes, over
    descriptors 0, 1 and 2 (whatever they are now: the objects probe them once, here)."""
    import io

    def text(fd, reading, errors, line_buffering):
        raw = io.FileIO(fd, "rb" if reading else "wb", closefd=False)
        buf = io.BufferedReader(raw) if reading else io.BufferedWriter(raw)
        return io.TextIOWrapper(
            buf, encoding="utf-8", errors=errors, newline="\n", line_buffering=line_buffering
        )

    return (text(0, True, "strict", False), text(1, False, "strict", False),
            text(2, False, "backslashreplace", True))


# stdio_objects() built once by the zygote (prebuild_stdio), or None.
PREBUILT_STDIO = None


def prebuild_stdio():
    """Builds the program processes' std streams once, in the zygote, while descriptors 0-2
    are still the container's pipes, as a program process's are: built in every program
    process they cost a quarter of a millisecond of each run (measured). Unused by the zygote
    (it writes frames with os.write) and by the supervisor. Not when a descriptor is anything
    but a pipe: the objects remember whether theirs was seekable."""
    global PREBUILT_STDIO
    try:
        if all(stat.S_ISFIFO(os.fstat(fd).st_mode) for fd in (0, 1, 2)):
            PREBUILT_STDIO = stdio_objects()
    except OSError:
        PREBUILT_STDIO = None


def fresh_stdio():
    """sys.std* as a fresh `python3` would have them on pipes (P's descriptors 0-2)."""
    stdin, stdout, stderr = PREBUILT_STDIO or stdio_objects()
    sys.stdin = sys.__stdin__ = stdin
    sys.stdout = sys.__stdout__ = stdout
    sys.stderr = sys.__stderr__ = stderr


def reset_signals():
    for sig in range(1, signal.NSIG):
        try:
            handler = signal.getsignal(sig)
        except (ValueError, OSError):
            continue
        if handler not in (None, signal.SIG_DFL, signal.SIG_IGN, signal.default_int_handler):
            signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def program_main(fds):
    """P: prepares empty-handed, waits for the request, runs it. Never returns."""
    req_r, stdin_r, out_w, err_w, status_w = fds
    code = 70
    try:
        os.setsid()
        try:
            write_small("/proc/self/oom_score_adj", b"1000")
        except OSError:
            pass
        drop_to_program_uid()
        prctl(PR_SET_DUMPABLE, 1)  # an ordinary process of its uid (it may read its own /proc)
        os.dup2(stdin_r, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        close_other_fds(keep=(req_r, status_w))
        os.chdir(WORKDIR)
        os.umask(0o022)
        # The environment and the signal dispositions are the zygote's, set once in serve():
        # redoing them here cost a third of a millisecond of every run.
        if "random" in sys.modules:  # the zygote's generator state must not repeat across runs
            sys.modules["random"].seed()
        main = None if exec_mode() else prepare_interpreter()
        problems = scrub()
        # The interpreter starts now, empty-handed like P, while the container is idle: a
        # run then costs the program, not the interpreter's start-up.
        waiting = prestart() if LANGUAGE.get("prestart") and not problems else None
        # The high-water mark so far: what P is before any of the request (the zygote's pages
        # it maps count as its own), so that the program's peak is measured from here.
        base_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        write_frame(status_w, {"prepared": not problems, "problems": problems, "rss_kb": base_kb})
        if problems:
            os._exit(71)
        raw = read_frame(req_r)
        if raw is None:
            os._exit(0)
        os.close(req_r)
        req = json.loads(raw.decode("utf-8"))
        del raw
        if exec_mode():
            code = run_exec(req, status_w, waiting)
        else:
            code = run_program(req, main, status_w)
    except BaseException:
        try:
            import traceback

            os.write(2, traceback.format_exc().encode("utf-8", "replace"))
        except BaseException:
            pass
    os._exit(code)


def file_place(path):
    """(directory, relative path) of a path of `files` or `return_files`: below DATA_DIR
    for one that names it, else below WORKDIR."""
    if path.startswith(DATA_DIR + "/"):
        return DATA_DIR, path[len(DATA_DIR) + 1:]
    return WORKDIR, path


def write_files(files):
    for path, content in files.items():
        top, path = file_place(path)
        parts = path.split("/")
        if len(parts) > 1:
            os.makedirs(os.path.join(top, *parts[:-1]), exist_ok=True)
        write_small(os.path.join(top, path), file_bytes(path, content),
                    os.O_WRONLY | os.O_CREAT | os.O_TRUNC)


def write_text(path, text):
    write_small(path, text.encode("utf-8"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)


def prepare_interpreter():
    """Everything of a fresh `python3 /work/main.py` that does not depend on the request."""
    import types

    main_path = work_path("main")
    fresh_stdio()
    sys.argv = [main_path]
    sys.path.insert(0, WORKDIR)
    sys.dont_write_bytecode = True
    main = types.ModuleType("__main__")
    main.__file__ = main_path
    main.__builtins__ = __builtins__
    main.__cached__ = None
    sys.modules["__main__"] = main
    return main


# Bound before any program runs: a program rebinding builtins.exec cannot skip its test.
_exec, _compile = exec, compile


def run_program(req, main, status_w):
    """The program as __main__ of this interpreter (then its test in the same namespace),
    then an interpreter-like exit."""
    import atexit

    main_path = work_path("main")
    write_text(main_path, req["code"])
    test = req.get("test")
    if test is not None:
        test_path = work_path("test")
        write_text(test_path, test)  # for tracebacks; the test runs from the request
    write_files(req.get("files") or {})

    report = {"exception": None, "harness": None, "phase": None, "test_finished": None}
    code = 0
    phase = "code"
    harness = req.get("harness")
    try:
        if harness is not None:
            report["harness"] = run_harness(harness, req["code"], main)
        else:
            _exec(_compile(req["code"], main_path, "exec", dont_inherit=True), main.__dict__)
            if test is not None:
                phase = "test"
                _exec(_compile(test, test_path, "exec", dont_inherit=True), main.__dict__)
                report["test_finished"] = True
    except SystemExit as e:
        code = exit_code_of(e)
        if test is not None:
            report["phase"] = phase
    except BaseException as e:
        report["exception"] = describe(e)
        report["phase"] = phase
        code = 1
        tb = e.__traceback__
        if tb is not None and tb.tb_frame.f_code is run_program.__code__:
            tb = tb.tb_next  # the program's traceback starts in its own code
        try:
            sys.excepthook(type(e), e.with_traceback(tb), tb)
        except BaseException:
            pass
    if test is not None and report["test_finished"] is None:
        report["test_finished"] = False
    # What the interpreter does at exit: join non-daemon threads, atexit, flush.
    try:
        import threading

        threading._shutdown()
    except BaseException:
        pass
    try:
        atexit._run_exitfuncs()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            if code == 0:
                code = 120
    if req.get("return_files"):
        report["files"], report["file_errors"] = collect_files(
            req["return_files"], req.get("max_output_bytes", 1 << 20)
        )
    # The last word, framed and signed with the pid so that C can tell it from a forked
    # child's (which runs this same epilogue) and answer before this process is torn down.
    report["pid"] = os.getpid()
    report["exit"] = code
    try:
        write_frame(status_w, report)
    except BaseException:
        pass
    return code


def exit_code_of(e):
    c = e.code
    if c is None:
        return 0
    if isinstance(c, bool) or not isinstance(c, int):
        try:
            print(c, file=sys.stderr)
        except BaseException:
            pass
        return 1
    return c & 0xFF


def run_harness(spec, code, main):
    """Test cases, an integration or a program + test script, by harness.py (imported by the
    zygote). Cases and an integration run in a fresh module named `solution`, as the
    harness's own CLI runs cases (a generated function's `if __name__ == "__main__":` demo
    must not run); a program test in __main__."""
    harness = sys.modules.get("codegen_harness")
    if harness is None:
        raise RuntimeError("the test harness is not installed in this image")
    namespace = main.__dict__ if spec.get("mode") == "program_test" else None
    return harness.run_in_process(spec, code, namespace)


def prestart():
    """Exec mode with "prestart": starts `command + ["--wait"]` now, before any request, with
    the report pipe as fd 3 and a pipe as fd 4 on which the harness waits for the program's
    paths (main, then test or an empty line). Returns (pid, paths_w, report_r)."""
    paths_r, paths_w = os.pipe()
    report_r, report_w = os.pipe()
    pid = spawn(list(LANGUAGE["command"]) + ["--wait"], {3: report_w, 4: paths_r})
    os.close(report_w)
    os.close(paths_r)
    return pid, paths_w, report_r


def spawn(argv, placed, new_group=False):
    """Forks a child of P that execs `argv` with the descriptors `placed` ({target: source})
    and no other above 2, in a process group of its own if `new_group`; exit status 127 when
    it cannot start. Returns its pid."""
    pid = os.fork()
    if pid == 0:
        try:
            if new_group:
                os.setpgid(0, 0)
            # Through high numbers, so that no source lands on another's target first.
            for i, source in enumerate(placed.values()):
                os.dup2(source, 100 + i)
            for i, target in enumerate(placed):
                os.dup2(100 + i, target)  # inheritable
            close_other_fds(keep=tuple(placed))
            # Python ignores these at start-up; an ignored signal would survive the exec.
            for sig in (signal.SIGPIPE, signal.SIGXFSZ):
                signal.signal(sig, signal.SIG_DFL)
            os.execve(argv[0], argv, dict(os.environ))
        except BaseException as e:
            try:
                os.write(2, ("runner: cannot start %s: %s\n" % (argv[0], e)).encode())
            except BaseException:
                pass
        os._exit(127)
    return pid


def run_exec(req, status_w, waiting=None):
    """Exec mode: the language's harness as a child of P (same session, so C's group kill
    takes it), with a report pipe as fd 3; then P's final report. `waiting`: the harness
    prestart() started, which only needs the program's paths."""
    main_path = work_path("main")
    test = req.get("test")
    sources = [main_path]
    if test is not None and LANGUAGE.get("test_form") == "append":
        # One translation unit: the test (which holds the entry point) after the code.
        write_text(main_path, req["code"] + "\n" + test)
    else:
        write_text(main_path, req["code"])
        if test is not None:
            test_path = work_path("test")
            write_text(test_path, test)
            sources.append(test_path)
    write_files(req.get("files") or {})
    if compiles():
        argv = []
        for arg in LANGUAGE["compile"]:  # "{sources}" stands for them; else they go last
            argv.extend(sources if arg == "{sources}" else [arg])
        if "{sources}" not in LANGUAGE["compile"]:
            argv.extend(sources)
        # C checked the request; P reads it raw, so the default is applied here too.
        outcome = compile_program(argv, req.get("compile_timeout_ms") or 10_000)
        write_frame(status_w, {"compiled": outcome})  # C starts the run's clock now
        if outcome["status"] != "ok":
            report = {"exception": None, "harness": None, "phase": None,
                      "test_finished": None if test is None else False,
                      "pid": os.getpid(), "exit": None}
            if req.get("return_files"):
                report["files"], report["file_errors"] = collect_files(
                    req["return_files"], req.get("max_output_bytes", 1 << 20)
                )
            try:
                write_frame(status_w, report)
            except BaseException:
                pass
            return 1
        argv = list(LANGUAGE["command"])
    else:
        argv = list(LANGUAGE["command"]) + sources

    if waiting is not None:
        pid, paths_w, report_r = waiting
        try:
            write_all(paths_w, ("%s\n%s\n" % (sources[0], sources[1] if len(sources) > 1 else ""))
                      .encode("utf-8"))
        except BrokenPipeError:
            pass  # the harness died waiting: its status says how
        os.close(paths_w)
        return finish_exec(req, status_w, report_r, pid)
    report_r, report_w = os.pipe()  # both close-on-exec
    pid = spawn(argv, {3: report_w})
    os.close(report_w)
    return finish_exec(req, status_w, report_r, pid)


def finish_exec(req, status_w, report_r, pid):
    """Waits for the harness `pid` and its fd-3 report; P's final report to C."""
    test = req.get("test")
    data, status = read_report(report_r, pid)
    os.close(report_r)

    harness = parse_harness_report(data)
    report = {"exception": None, "harness": None, "phase": None, "test_finished": None}
    if os.WIFSIGNALED(status):
        code, report["signal"] = None, os.WTERMSIG(status)
    else:
        code = os.WEXITSTATUS(status)
    report["exception"] = harness_exception(harness.get("exception"))
    if harness.get("phase") in ("code", "test"):
        report["phase"] = harness["phase"]
    if test is not None and LANGUAGE.get("report", True):
        report["test_finished"] = harness.get("test_finished") is True
    elif test is not None:
        # A compiled program has no harness: the test (its entry point) ran to its end
        # when the program exited 0.
        report["test_finished"] = code == 0
    if req.get("return_files"):
        report["files"], report["file_errors"] = collect_files(
            req["return_files"], req.get("max_output_bytes", 1 << 20)
        )
    report["pid"] = os.getpid()
    report["exit"] = code
    try:
        write_frame(status_w, report)
    except BaseException:
        pass
    return code if code is not None else 128 + report["signal"]


def compile_program(argv, timeout_ms):
    """Runs the compiler (`argv`, cwd /work, stdin /dev/null, stdout and stderr into one pipe)
    in a process group of its own, kills the group at `timeout_ms`; returns
    {"status": "ok"|"error"|"timeout", "exit_code", "signal", "output", "duration_ms"}.
    The compiler is left unreaped (waitid WNOWAIT): reaping it would add its memory to P's
    high-water mark, which is the program's figure. It goes with P (init reaps it)."""
    t0 = time.monotonic()
    out_r, out_w = os.pipe()
    null = os.open("/dev/null", os.O_RDONLY)
    pid = spawn(argv, {0: null, 1: out_w, 2: out_w}, new_group=True)
    os.close(null)
    os.close(out_w)
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None  # seccomp or an old kernel: look for the exit every 20 ms instead
    os.set_blocking(out_r, False)
    poller = select.poll()
    poller.register(out_r, select.POLLIN)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    output = bytearray()
    dropped = 0
    pipe_open = True
    exited = timed_out = False
    deadline = t0 + timeout_ms / 1000.0

    def drain():
        nonlocal pipe_open, dropped
        while pipe_open:
            try:
                chunk = os.read(out_r, CHUNK)
            except BlockingIOError:
                return
            except InterruptedError:
                continue
            if not chunk:
                pipe_open = False
                poller.unregister(out_r)
                return
            room = MAX_COMPILE_OUTPUT - len(output)
            output.extend(chunk[:room])
            dropped += max(0, len(chunk) - room)

    while not exited:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        wait_ms = int(remaining * 1000) + 1
        for ready, _ in poller.poll(wait_ms if pidfd is not None else min(wait_ms, 20)):
            if ready == out_r:
                drain()
            elif ready == pidfd:
                exited = True
        if pidfd is None:
            exited = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    try:
        os.killpg(pid, signal.SIGKILL)  # on time out, or what the compiler left running
    except (ProcessLookupError, PermissionError):
        pass
    drain()
    os.close(out_r)
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    if pidfd is not None:
        os.close(pidfd)
    exit_code = sig = None
    if info.si_code == os.CLD_EXITED:
        exit_code = info.si_status
    else:
        sig = info.si_status
    text = output.decode("utf-8", "replace")
    if dropped:
        text += "\n[%d more bytes of compiler output cut]\n" % dropped
    return {
        "status": "timeout" if timed_out else "ok" if exit_code == 0 else "error",
        "exit_code": None if timed_out else exit_code,
        "signal": None if timed_out else sig,
        "output": text,
        "duration_ms": int(round((time.monotonic() - t0) * 1000)),
    }


def read_report(fd, pid):
    """What the child writes to fd 3 (the last MAX_HARNESS_REPORT bytes), and its wait status.
    Reading stops when the child has exited even if a grandchild still holds the pipe."""
    buf = bytearray()
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None  # seccomp or an old kernel: poll for the exit instead
    os.set_blocking(fd, False)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    pipe_open = True

    def drain(budget):
        # Bounded: a grandchild holding the pipe may keep writing after the child is gone.
        nonlocal pipe_open
        while pipe_open and budget > 0:
            try:
                chunk = os.read(fd, CHUNK)
            except BlockingIOError:
                return
            except InterruptedError:
                continue
            if not chunk:
                pipe_open = False
                poller.unregister(fd)
                return
            budget -= len(chunk)
            buf.extend(chunk)
            if len(buf) > MAX_HARNESS_REPORT:
                del buf[:-MAX_HARNESS_REPORT]

    status = None
    while status is None:
        if pipe_open or pidfd is not None:
            for ready, _ in poller.poll(None if pidfd is not None else 20):
                if ready == fd:
                    drain(1 << 20)
        done, st = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            status = st
        elif not pipe_open and pidfd is None:
            status = os.waitpid(pid, 0)[1]  # the pipe is closed: only the exit is left
    drain(2 * MAX_HARNESS_REPORT)
    if pidfd is not None:
        os.close(pidfd)
    return bytes(buf), status


def parse_harness_report(data):
    """The harness's report: the last non-empty line of fd 3, a JSON object, or {}."""
    for line in reversed(data.split(b"\n")):
        if line.strip():
            try:
                obj = json.loads(line.decode("utf-8", errors="replace"))
            except ValueError:
                return {}
            return obj if isinstance(obj, dict) else {}
    return {}


def harness_exception(exc):
    """An exception as a harness reported it, in the shape describe() gives, or None."""
    if not isinstance(exc, dict):
        return None

    def field(name, limit):
        v = exc.get(name)
        return v[:limit] if isinstance(v, str) else ""

    kind = exc.get("kind")
    return {
        "type": field("type", 200) or "Error",
        "module": field("module", 200),
        "message": field("message", 2000),
        "kind": kind if kind in EXCEPTION_KINDS else "runtime",
    }


# ----------------------------------------------------------------------------- supervisor (C)


class Capture:
    """Keeps the first `limit` bytes of a stream, counts all of it."""

    def __init__(self, limit):
        self.limit = limit
        self.buf = bytearray()
        self.truncated = False
        self.total = 0

    def feed(self, data):
        self.total += len(data)
        room = self.limit - len(self.buf)
        if room > 0:
            self.buf += data[:room]
        if len(data) > room:
            self.truncated = True

    def text(self):
        return bytes(self.buf).decode("utf-8", errors="replace")


class FrameReader:
    """Frames from a non-blocking pipe, as they complete."""

    def __init__(self, limit):
        self.buf = bytearray()
        self.limit = limit
        self.overflow = False

    def feed(self, data):
        if len(self.buf) + len(data) > self.limit:
            self.overflow = True
            return
        self.buf += data

    def frames(self):
        out = []
        while len(self.buf) >= 4:
            (n,) = struct.unpack(">I", self.buf[:4])
            if n > self.limit:
                self.overflow = True
                self.buf.clear()
                break
            if len(self.buf) < 4 + n:
                break
            body = bytes(self.buf[4 : 4 + n])
            del self.buf[: 4 + n]
            try:
                obj = json.loads(body.decode("ascii"))
            except ValueError:
                obj = None
            out.append(obj if isinstance(obj, dict) else {})
        return out


class Supervisor:
    """C's view of one program process P (a child of Z, not of C)."""

    def __init__(self, ctl, pid, fds):
        self.ctl = ctl
        self.pid = pid
        self.req_w, self.stdin_w, self.out_r, self.err_r, self.st_r = fds
        self.status = FrameReader(MAX_STATUS_BYTES)
        self.exit_status = None  # as waitpid reports it, once Z has reaped P
        self.maxrss_kb = None  # P's high-water mark (and its waited-for children's), from Z
        self.base_kb = 0  # P's high-water mark when it was prepared
        self.open = set(fds)

    def close(self, fd):
        if fd in self.open:
            self.open.discard(fd)
            os.close(fd)

    def take_exit(self, block):
        """Z's `exited` message for P (Z is P's parent and reaps it)."""
        if self.exit_status is not None:
            return True
        try:
            msg = self.ctl.recv(64, 0 if block else socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False
        parts = msg.split()
        if len(parts) != 4 or parts[0] != b"exited" or int(parts[1]) != self.pid:
            raise Fatal("unexpected message from the zygote: %r" % msg[:64])
        self.exit_status = int(parts[2])
        self.maxrss_kb = int(parts[3])
        return True

    def peak_memory(self):
        """The program's peak resident memory (KiB): P's high-water mark less what P was when
        prepared. In exec mode the program is another executable, whose own high-water mark
        counts from its exec (but never reads below the runner's size at the fork, about
        10 MiB: the kernel carries the pre-exec mark over); children the program did not
        wait for are not in it."""
        if self.maxrss_kb is None:
            return None
        return max(0, self.maxrss_kb - self.base_kb)

    def describe_exit(self):
        self.take_exit(block=True)
        status = self.exit_status
        if os.WIFSIGNALED(status):
            return "signal %d" % os.WTERMSIG(status)
        return "exit %d" % os.WEXITSTATUS(status)

    def wait_prepared(self):
        """P's first frame: prepared (the previous run's leftovers scrubbed), or why not."""
        while True:
            frames = self.status.frames()
            if frames:
                first = frames[0]
                if first.get("prepared") is not True:
                    raise Fatal("scrub failed: %s"
                                % "; ".join(map(str, first.get("problems") or ["?"])))
                base = first.get("rss_kb")
                self.base_kb = base if isinstance(base, int) and not exec_mode() else 0
                return
            chunk = os.read(self.st_r, 4096)
            if not chunk:
                raise Fatal("the program process died while preparing: %s"
                            % self.describe_exit())
            self.status.feed(chunk)
            if self.status.overflow:
                raise Fatal("unreadable preparation report")

    def abandon(self):
        """No request will come: kill P."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.finish()

    def finish(self):
        """After the answer: P reaped by Z, every descriptor closed."""
        deadline = time.monotonic() + 5.0
        while not self.take_exit(block=False):
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if time.monotonic() > deadline:
                raise Fatal("the program process was not reaped")
            select.select([self.ctl], [], [], 0.05)
        for fd in list(self.open):
            self.close(fd)

    def run(self, req, raw):
        """Hands the request to P and supervises it; returns the result object. The program
        is over when P sends its final report, exits or is killed (deadline, output cap)."""
        out = Capture(req["max_output_bytes"])
        err = Capture(req["max_output_bytes"])
        hard_cap = req["output_limit_bytes"]
        pending = memoryview(req["stdin"].encode("utf-8"))
        oom_before = oom_kills()
        cpu_before = cpu_ns()

        t0 = time.monotonic()
        try:
            write_all(self.req_w, frame(raw))
        except BrokenPipeError:
            pass  # P died: its exit status says how
        self.close(self.req_w)
        deadline = t0 + req["timeout_ms"] / 1000.0
        # A compiled language first compiles, under its own limit: the run's clock, CPU
        # count and limit start when P says the compile ended.
        compiling = compiles()
        compiled = None
        if compiling:
            deadline = t0 + req["compile_timeout_ms"] / 1000.0 + COMPILE_GRACE_S

        for fd in (self.stdin_w, self.out_r, self.err_r, self.st_r):
            os.set_blocking(fd, False)
        poller = select.poll()
        sinks = {self.out_r: out, self.err_r: err, self.st_r: self.status}
        for fd in sinks:
            poller.register(fd, select.POLLIN)
        ctl = self.ctl.fileno()
        poller.register(ctl, select.POLLIN)
        if pending:
            poller.register(self.stdin_w, select.POLLOUT)
        else:
            self.close(self.stdin_w)

        def close_stdin():
            if self.stdin_w in self.open:
                poller.unregister(self.stdin_w)
                self.close(self.stdin_w)

        def read_ready(fd):
            while True:
                try:
                    data = os.read(fd, CHUNK)
                except BlockingIOError:
                    return
                if not data:
                    poller.unregister(fd)
                    self.close(fd)
                    del sinks[fd]
                    return
                sinks[fd].feed(data)
                if len(data) < CHUNK:
                    return

        report = None
        timed_out = output_limited = cpu_limited = False
        cpu_limit_ns = None
        if req["cpu_time_ms"] is not None and cpu_before is not None:
            cpu_limit_ns = req["cpu_time_ms"] * 1_000_000
        end = None
        while report is None and self.exit_status is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            wait_ms = int(remaining * 1000) + 1
            if cpu_limit_ns is not None and not compiling:
                used = (cpu_ns() or cpu_before) - cpu_before
                if used > cpu_limit_ns:
                    cpu_limited = True
                    break
                # Looked at again after a tenth of what is left (5 ms at least): a check
                # costs a read of one cgroup file.
                wait_ms = min(wait_ms, max(5, (cpu_limit_ns - used) // 10_000_000))
            for fd, _ in poller.poll(wait_ms):
                if fd == ctl:
                    poller.unregister(ctl)
                    self.take_exit(block=True)
                    end = time.monotonic()
                elif fd == self.stdin_w:
                    try:
                        n = os.write(self.stdin_w, pending[:CHUNK])
                        pending = pending[n:]
                        if not pending:
                            close_stdin()
                    except BlockingIOError:
                        pass
                    except OSError:  # EPIPE: the program closed its stdin
                        close_stdin()
                elif fd in sinks:
                    read_ready(fd)
                    if fd == self.st_r:
                        for f in self.status.frames():
                            if f.get("pid") == self.pid:
                                report = f
                                end = time.monotonic()
                            elif compiling and isinstance(f.get("compiled"), dict):
                                compiling = False
                                compiled = f["compiled"]
                                t0 = time.monotonic()
                                deadline = t0 + req["timeout_ms"] / 1000.0
                                oom_now = oom_kills()
                                if oom_before is not None and oom_now is not None:
                                    compiled["oom_killed"] = oom_now > oom_before
                                oom_before = oom_now
                                cpu_before = cpu_ns()
            if out.total + err.total > hard_cap:
                output_limited = True
                break
        if end is None:
            end = time.monotonic()
        if compiling:
            # Still compiling at C's own deadline (P's limit did not stop it), or P died.
            compiled = {"status": "timeout" if timed_out else "error", "exit_code": None,
                        "signal": None, "duration_ms": int(round((end - t0) * 1000)),
                        "output": "" if timed_out else "the compile ended without a word"}
            timed_out = False
            t0 = end

        # The program's group dies now; whatever it wrote before is in the pipes.
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        close_stdin()
        if report is None:
            # Killed or dead: its status comes from Z, which reaps it.
            reaped_by = time.monotonic() + 5.0
            while not self.take_exit(block=False):
                if time.monotonic() > reaped_by:
                    raise Fatal("the program process was not reaped after SIGKILL")
                select.select([self.ctl], [], [], 0.05)
            # Only now are all writers of the group dead; one that left the group is
            # killed after the answer: its late output is not part of the run.
            for fd in (self.out_r, self.err_r, self.st_r):
                if fd in sinks:
                    read_ready(fd)
            for f in self.status.frames():
                if f.get("pid") == self.pid:
                    report = f
        else:
            for fd in (self.out_r, self.err_r):
                if fd in sinks:
                    read_ready(fd)
            # P exits right after its report (or died of the SIGKILL above): Z's word on it
            # carries its peak memory.
            reaped_by = time.monotonic() + 5.0
            while not self.take_exit(block=False):
                if time.monotonic() > reaped_by:
                    raise Fatal("the program process was not reaped after its report")
                select.select([self.ctl], [], [], 0.05)
        if out.total + err.total > hard_cap:
            output_limited = True
        oom_after = oom_kills()
        cpu_after = cpu_ns()

        wait_status = self.exit_status
        killed = timed_out or cpu_limited
        if compiled is not None and compiled.get("status") != "ok":
            exit_code, sig = None, None  # nothing ran
        elif report is not None and isinstance(report.get("exit"), int) and not killed:
            exit_code, sig = report["exit"], None
        elif report is not None and isinstance(report.get("signal"), int) and not killed:
            exit_code, sig = None, report["signal"]  # exec mode: the child's signal
        elif wait_status is None:
            exit_code, sig = None, None
        elif os.WIFSIGNALED(wait_status):
            exit_code, sig = None, os.WTERMSIG(wait_status)
        else:
            exit_code, sig = os.WEXITSTATUS(wait_status), None
        report = report or {}
        exception = report.get("exception")
        if not isinstance(exception, dict) or exit_code != 1:
            exception = None
        if exception is None and not killed and (exit_code not in (None, 0) or sig is not None):
            exception = stderr_assertion(err.text())
        files = report.get("files")
        file_errors = report.get("file_errors")
        if req["return_files"] and not isinstance(files, dict):
            files = {p: None for p in req["return_files"]}
            file_errors = {p: "the program did not finish normally" for p in req["return_files"]}
        phase = report.get("phase")
        test_finished = None
        if req["test"] is not None:
            # No report (os._exit, a kill) means the test did not finish.
            test_finished = report.get("test_finished") is True and not killed
        return {
            "type": "result",
            "exit_code": exit_code,
            "signal": sig,
            "timed_out": timed_out,
            "oom_killed": (
                oom_before is not None and oom_after is not None and oom_after > oom_before
            ),
            "output_limited": output_limited,
            "cpu_limited": cpu_limited,
            "peak_memory_kb": self.peak_memory(),
            "stdout": out.text(),
            "stderr": err.text(),
            "stdout_truncated": out.truncated,
            "stderr_truncated": err.truncated,
            "duration_ms": int(round((end - t0) * 1000)),
            # The whole container's CPU over the run: the program and its children, plus the
            # supervisor's few reads while it waited (one run at a time per container).
            "cpu_ms": (
                int(round((cpu_after - cpu_before) / 1e6))
                if cpu_before is not None and cpu_after is not None
                else None
            ),
            "exception": exception,
            "phase": phase if phase in ("code", "test") else None,
            "test_finished": test_finished,
            "harness": report.get("harness"),
            "compile": compiled,
            "files": files if isinstance(files, dict) else {},
            "file_errors": file_errors if isinstance(file_errors, dict) else {},
        }


def spawn_program(ctl):
    """Asks Z for the next P; returns its Supervisor once P is prepared."""
    ctl.send(b"spawn")
    msg, fds, _, _ = socket.recv_fds(ctl, 64, 5)
    parts = msg.split()
    if len(parts) != 2 or parts[0] != b"spawned" or len(fds) != 5:
        for fd in fds:
            os.close(fd)
        raise Fatal("the zygote did not spawn a program process: %r" % msg[:64])
    sup = Supervisor(ctl, int(parts[1]), fds)
    sup.wait_prepared()
    return sup


def harness_modes():
    """The modes of the test harness the zygote loaded and warmed up before forking C (none
    when the image has no harness or it failed): what `ready` announces."""
    module = sys.modules.get("codegen_harness")
    return list(getattr(module, "IN_PROCESS_MODES", ())) if module is not None else []


def supervisor_main(ctl):
    """C: reads the requests, supervises each P, reports. Long-lived and never forks, so
    the requests it has held never reach a program. Returns 1 when the worker closes stdin;
    raises Fatal when it cannot vouch for the container."""
    runs = 0
    rest = False
    modes = harness_modes()
    while True:
        # Nothing of the previous program may outlive it, before the next one is spawned: it
        # is killed at once, whenever the worker asks for the next one.
        if not kill_program():
            raise Fatal("processes of uid %d survived SIGKILL" % PROGRAM_UID)
        if rest and not await_prepare():
            return 1
        sup = spawn_program(ctl)
        while True:
            write_frame(1, {"type": "ready", "protocol": PROTOCOL, "runs": runs, "harness": modes})
            raw = read_frame(0)
            if raw is None:
                sup.abandon()
                return 1
            runs += 1
            try:
                req = parse_request(raw)
            except RequestError as e:
                write_frame(1, {"type": "error", "message": str(e)})
                continue  # P saw nothing: it serves the next request
            break
        result = sup.run(req, raw)
        write_frame(1, result)
        rest = req["rest"]
        del result, req, raw
        sup.finish()


def await_prepare():
    """Waits for the worker's "prepare" after the result of a request that said "rest";
    False when it closed stdin."""
    raw = read_frame(0)
    if raw is None:
        return False
    try:
        msg = json.loads(raw)
    except ValueError:
        msg = None
    if msg != {"type": "prepare"}:
        raise Fatal("expected prepare after a result, got %r" % raw[:64])
    return True


# ----------------------------------------------------------------------------- zygote (Z)


CAP_KILL, CAP_SETGID, CAP_SETUID = 5, 6, 7


def check_privileges():
    problems = []
    if os.getuid() != 0:
        problems.append("the runner must start as uid 0 (with only SETUID, SETGID and KILL)")
    try:
        with open("/proc/self/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        effective = int(fields.get("CapEff", "0").strip(), 16)
        bounding = int(fields.get("CapBnd", "0").strip(), 16)
        needed = (1 << CAP_KILL) | (1 << CAP_SETGID) | (1 << CAP_SETUID)
        if effective & needed != needed:
            problems.append("missing capabilities: SETUID, SETGID and KILL are needed")
        if (effective | bounding) & ~needed:
            problems.append(
                "more capabilities than SETUID, SETGID and KILL (CapEff=%x CapBnd=%x)"
                % (effective, bounding)
            )
        if fields.get("NoNewPrivs", "0").strip() != "1":
            problems.append("no-new-privileges is not set")
    except OSError as e:
        problems.append("cannot read /proc/self/status: %s" % e)
    return problems


def preload():
    import importlib

    libc().prctl  # ctypes and the function's pointer, once here rather than in every run
    if exec_mode():
        return  # programs are other executables: nothing of Python to warm up
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    # The image's own packages (language.json "preload"): a missing one is an image defect,
    # which the runner's start-up says rather than every program finding it cold.
    for name in LANGUAGE.get("preload") or ():
        importlib.import_module(name)
    if os.path.exists(HARNESS_PATH):
        import importlib.util

        try:
            spec = importlib.util.spec_from_file_location("codegen_harness", HARNESS_PATH)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules["codegen_harness"] = module
            if hasattr(module, "run_cases"):
                warm_harness(module)
        except Exception:
            import traceback

            sys.modules.pop("codegen_harness", None)
            sys.stderr.write("runner: the test harness cannot be loaded:\n")
            traceback.print_exc()


# A constant request the zygote runs through the harness before any fork (warm_harness).
HARNESS_WARMUP = {
    "mode": "cases", "function": "f", "code": "def f(a, b):\n    return [a, b]\n",
    "cases": [{"inputs": [i, "x"], "expected_output": [i, "x"]} for i in range(4)],
}
HARNESS_WARMUP_ROUNDS = 20
# How long the warm-up waits for the harness's threads to end before calling it defective.
WARMUP_THREADS_WAIT_S = 60.0
# And one for an integration (the pipeline's last run of a job), where the harness has it.
INTEGRATION_WARMUP = {
    "mode": "integrate", "code": "def f(a):\n    \"\"\"Doubles.\"\"\"\n    return 2 * a\n",
    "verdicts": {"f": {"cases": [{"inputs": [1], "expected_output": 2}]}},
    "cases": {"f": [{"inputs": [1]}]}, "case_timeout_ms": 1000,
}


def warm_harness(module):
    """Runs the harness on HARNESS_WARMUP a few times in the zygote, its output on /dev/null:
    CPython 3.11 quickens a function's bytecode in place over its first calls, so a harness
    first run in each program process rewrote, and so copied, the same code objects' pages in
    every one of them (measured: 0.3 ms of every cases run). Raises when the harness does not
    pass its own request or leaves a thread behind (an image defect)."""
    import threading

    saved = (os.dup(1), os.dup(2))
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        integration = None
        for _ in range(HARNESS_WARMUP_ROUNDS):
            result = module.run_cases(dict(HARNESS_WARMUP))
            if hasattr(module, "run_integration"):
                integration = module.run_integration(dict(INTEGRATION_WARMUP))
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved + (devnull,):
            os.close(fd)
    if not result.get("passed"):
        raise RuntimeError("the harness fails its warm-up request: %r" % (result,))
    if integration is not None and not integration["functions"]["f"].get("passed"):
        raise RuntimeError("the harness fails its integration warm-up: %r" % (integration,))
    # The harness's capture thread ends on its own once its pipes close, but on a loaded
    # machine not within the harness's own short join: waited for here, patiently, so that
    # only a thread that never ends counts as a defect (a harness dropped for a slow thread
    # failed every test of every function run in that container).
    deadline = time.monotonic() + WARMUP_THREADS_WAIT_S
    for thread in threading.enumerate():
        if thread is not threading.main_thread():
            thread.join(max(0.0, deadline - time.monotonic()))
    if threading.active_count() != 1:
        raise RuntimeError("the harness left %d threads running" % (threading.active_count() - 1))


def configure():
    """Reads the image's language once (Z, before anything is forked); the problems."""
    cfg, problems = load_language()
    if cfg is not None:
        LANGUAGE.clear()
        LANGUAGE.update(cfg)
    return problems


def serve():
    problems = check_privileges() + configure()
    if problems:
        write_frame(1, {"type": "fatal", "message": "; ".join(problems), "oom_killed": False})
        return 2
    os.umask(0o077)
    # What every program process starts with, set once here for all of them: the zygote and
    # the supervisor neither read the environment nor handle a signal.
    os.environ.clear()
    os.environ.update(CHILD_ENV)
    os.environ.update(LANGUAGE.get("env") or {})
    reset_signals()
    if not exec_mode():
        prebuild_stdio()
    try:
        preload()
    except Exception as e:
        message = "cannot preload the image's modules: %s: %s" % (type(e).__name__, e)
        write_frame(1, {"type": "fatal", "message": message, "oom_killed": False})
        return 2
    import gc

    gc.collect()
    gc.freeze()  # a child's collector never walks (and so never copies) the zygote's objects
    z_end, c_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    oom_before = oom_kills()
    cpid = os.fork()
    if cpid == 0:
        z_end.close()
        code = 5
        try:
            code = supervisor_main(c_end)
        except Fatal as e:
            try:
                write_frame(1, {"type": "fatal", "message": str(e), "oom_killed": False})
            except BaseException:
                pass
            code = 6
        except BaseException:
            try:
                import traceback

                traceback.print_exc()
            except BaseException:
                pass
        os._exit(code)
    c_end.close()
    # The zygote never reads a request: its stdin becomes /dev/null (kept open, so that no
    # pipe it creates for a program lands on descriptor 0).
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    try:
        return zygote(z_end, cpid)
    finally:
        # Whatever ended the loop, C and any P go with the zygote.
        for pid in (cpid,):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        reap()


def zygote(ctl, cpid):
    """Z: forks a program process each time C asks, hands C its pipe ends, reaps it and tells
    C how it ended. Returns the runner's exit status when C is gone."""
    while True:
        try:
            msg = ctl.recv(64)
        except OSError:
            msg = b""
        if msg != b"spawn":
            return supervisor_gone(cpid)
        req_r, req_w = os.pipe()
        stdin_r, stdin_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        st_r, st_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                program_main((req_r, stdin_r, out_w, err_w, st_w))
            finally:
                os._exit(70)
        for fd in (req_r, stdin_r, out_w, err_w, st_w):
            os.close(fd)
        theirs = [req_w, stdin_w, out_r, err_r, st_r]
        try:
            socket.send_fds(ctl, [b"spawned %d" % pid], theirs)
        except OSError:
            os.kill(pid, signal.SIGKILL)
            wait_for(pid)
            return supervisor_gone(cpid)
        finally:
            for fd in theirs:
                os.close(fd)
        # P's orphans are reparented to init (docker's), which reaps them; Z waits for its
        # own two children only.
        while True:
            done, status, usage = os.wait4(-1, 0)
            if done == pid:
                break
            if done == cpid:
                os.kill(pid, signal.SIGKILL)
                wait_for(pid)
                REAPED[cpid] = status
                return supervisor_gone(cpid)
        try:
            ctl.send(b"exited %d %d %d" % (pid, status, usage.ru_maxrss))
        except OSError:
            return supervisor_gone(cpid)


def supervisor_gone(cpid):
    status = wait_for(cpid)
    if status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) in (1, 6):
        return 0 if os.WEXITSTATUS(status) == 1 else 3  # stdin closed / C said why
    how = (
        "unknown status"
        if status is None
        else "exit %d" % os.WEXITSTATUS(status)
        if os.WIFEXITED(status)
        else "signal %d" % os.WTERMSIG(status)
    )
    try:
        write_frame(
            1,
            {
                "type": "fatal",
                "message": "the execution supervisor ended with %s" % how,
                # The cgroup's OOM killer took the supervisor: the program ate the memory.
                "oom_killed": status is not None
                and os.WIFSIGNALED(status)
                and os.WTERMSIG(status) == signal.SIGKILL
                and (oom_kills() or 0) > 0,
            },
        )
    except OSError:
        pass
    return 3


def main(argv):
    if argv == ["--selftest"]:
        problems = check_privileges() + configure()
        print("ok" if not problems else "; ".join(problems))
        return 0 if not problems else 1
    if argv:
        sys.stderr.write("usage: runner.py [--selftest]\n")
        return 2
    try:
        return serve()
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
