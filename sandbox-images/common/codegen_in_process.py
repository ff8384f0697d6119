"""Python programs run in the program process's own interpreter (language.json "mode":
"in_process"; stdlib only, Python 3.11): P, forked from a zygote that imported what programs
commonly need, runs the code as __main__ (no exec: a run costs about a millisecond), then a
test in the same namespace, as HumanEval concatenates them, or a harness request by
harness.py (imported and warmed up by the zygote as `codegen_harness`).
"""

import os
import stat
import sys
import time

from codegen_guard import collect_files, write_files, write_text
from codegen_protocol import WORKDIR, write_frame

# The runner's folder (/opt/codegen), where harness.py is too.
CODEGEN_DIR = os.path.dirname(os.path.abspath(__file__))
HARNESS_PATH = os.path.join(CODEGEN_DIR, "harness.py")
# Modules the zygote imports once so that programs find them warm.
PRELOAD = (
    "abc", "argparse", "array", "ast", "atexit", "base64", "bisect", "collections",
    "collections.abc", "contextlib", "copy", "dataclasses", "datetime", "decimal", "enum",
    "fractions", "functools", "hashlib", "heapq", "inspect", "io", "itertools", "json",
    "linecache", "math", "numbers", "operator", "random", "re", "statistics", "string",
    "struct", "textwrap", "threading", "traceback", "types", "typing", "unittest",
)


# ----------------------------------------------------------------------------- zygote (Z)


def preload(language):
    """Z, before anything is forked: the modules programs commonly import, the image's own
    (language.json "preload"), and the test harness, loaded and warmed up; the std streams
    every P will have. Then the runner's own folder leaves sys.path: a program's imports
    see what a fresh `python3 -I` sees, and the runner's modules, already loaded, cannot be
    shadowed by a file of the program's."""
    import importlib

    prebuild_stdio()
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    # The image's own packages (language.json "preload"): a missing one is an image defect,
    # which the runner's start-up says rather than every program finding it cold.
    for name in language.config.get("preload") or ():
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
    while CODEGEN_DIR in sys.path:
        sys.path.remove(CODEGEN_DIR)


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
    "cases": {"f": [{"inputs": [1]}]}, "case_timeout_ms": 1000, "lint": True,
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


def harness_modes():
    """The modes of the test harness the zygote loaded and warmed up before forking C (none
    when the image has no harness or it failed): what `ready` announces."""
    module = sys.modules.get("codegen_harness")
    return list(getattr(module, "IN_PROCESS_MODES", ())) if module is not None else []


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


def prepare_interpreter(language):
    """Everything of a fresh `python3 /work/main.py` that does not depend on the request."""
    import builtins
    import types

    main_path = language.work_path("main")
    fresh_stdio()
    sys.argv = [main_path]
    sys.path.insert(0, WORKDIR)
    sys.dont_write_bytecode = True
    main = types.ModuleType("__main__")
    main.__file__ = main_path
    main.__builtins__ = builtins  # the module, as in a fresh __main__
    main.__cached__ = None
    sys.modules["__main__"] = main
    return main


# Bound before any program runs: a program rebinding builtins.exec cannot skip its test.
_exec, _compile = exec, compile


def run_program(req, main, status_w, language):
    """The program as __main__ of this interpreter (then its test in the same namespace),
    then an interpreter-like exit."""
    import atexit

    main_path = language.work_path("main")
    write_text(main_path, req["code"])
    test = req.get("test")
    if test is not None:
        test_path = language.work_path("test")
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
