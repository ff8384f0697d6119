"""Programs that are other executables (language.json "mode": "exec"; stdlib only, Python
3.11): P writes the program (and its test) to /work, compiles it first where the language
says "compile", and runs the language's `command` as a child in its own session, with a
report pipe as fd 3 on which the harness behind `command` writes at most one JSON line.
How each language does this is data (language.json) and the harness it ships; what is here
is the same for all of them.
"""

import json
import os
import select
import signal
import time

from codegen_guard import close_other_fds, collect_files, write_files, write_text
from codegen_protocol import CHUNK, write_all, write_frame

# Bytes of the compiler's output (stdout and stderr together) a compile result keeps.
MAX_COMPILE_OUTPUT = 64 << 10
# Bytes of an exec-mode harness report (fd 3) P keeps: the last ones, where the report is.
MAX_HARNESS_REPORT = 64 << 10
EXCEPTION_KINDS = ("syntax", "import", "assertion", "runtime")


def prestart(language):
    """Exec mode with "prestart": starts `command + ["--wait"]` now, before any request, with
    the report pipe as fd 3 and a pipe as fd 4 on which the harness waits for the program's
    paths (main, then test or an empty line). Returns (pid, paths_w, report_r)."""
    paths_r, paths_w = os.pipe()
    report_r, report_w = os.pipe()
    pid = spawn(list(language.config["command"]) + ["--wait"], {3: report_w, 4: paths_r})
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


def run_exec(req, status_w, language, waiting=None):
    """Exec mode: the language's harness as a child of P (same session, so C's group kill
    takes it), with a report pipe as fd 3; then P's final report. `waiting`: the harness
    prestart() started, which only needs the program's paths."""
    main_path = language.work_path("main")
    test = req.get("test")
    sources = [main_path]
    if test is not None and language.config.get("test_form") == "append":
        # One translation unit: the test (which holds the entry point) after the code.
        write_text(main_path, req["code"] + "\n" + test)
    else:
        write_text(main_path, req["code"])
        if test is not None:
            test_path = language.work_path("test")
            write_text(test_path, test)
            sources.append(test_path)
    write_files(req.get("files") or {})
    if language.compiles:
        argv = []
        for arg in language.config["compile"]:  # "{sources}" stands for them; else they go last
            argv.extend(sources if arg == "{sources}" else [arg])
        if "{sources}" not in language.config["compile"]:
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
        argv = list(language.config["command"])
    else:
        argv = list(language.config["command"]) + sources

    if waiting is not None:
        pid, paths_w, report_r = waiting
        try:
            write_all(paths_w, ("%s\n%s\n" % (sources[0], sources[1] if len(sources) > 1 else ""))
                      .encode("utf-8"))
        except BrokenPipeError:
            pass  # the harness died waiting: its status says how
        os.close(paths_w)
        return finish_exec(req, status_w, report_r, pid, language)
    report_r, report_w = os.pipe()  # both close-on-exec
    pid = spawn(argv, {3: report_w})
    os.close(report_w)
    return finish_exec(req, status_w, report_r, pid, language)


def finish_exec(req, status_w, report_r, pid, language):
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
    if test is not None and language.config.get("report", True):
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
