"""In-image test harness for the codegen python sandbox (stdlib only, Python 3.11).

It runs INSIDE the sandboxed program process - the same interpreter as the untrusted
code - and reports one verdict.

CLI (what the runner starts, cwd /work):

    python3 -I /opt/codegen/harness.py MODE          MODE: cases | program_test

  stdin  <- exactly one JSON object (the request), then EOF. Python's JSON reader is
            used, so NaN / Infinity / -Infinity literals are accepted in it.
  stdout -> exactly one line on the ORIGINAL stdout:
            "@@codegen-harness@@ " + compact ASCII JSON (strict JSON: no NaN/Infinity,
            no lone surrogates), always carrying the request's "nonce".
  exit   0  the result line was written (whatever the verdict);
         2  malformed request/arguments (line is {"mode","nonce","harness_error"});
         3  internal harness failure (same shape).
  The program's own output never reaches the original stdout: before any user code
  runs, the original stdout is dup'ed to a private (close-on-exec) fd and fds 1/2 are
  redirected to pipes that the harness drains into capped in-memory buffers, per case.

Mode "cases" - request:
    {"code": str, "function": str,
     "cases": [{"name": str (default "case_<i>"),
                "inputs": {..} -> kwargs | [..] -> positional args | null -> no args,
                "expected_output": any (missing = null = the function returns None),
                "expected_error": str|null   exception class name, matched against the
                                             class and its bases (__name__, __qualname__
                                             or module.qualname); takes precedence,
                "setup": str|null            exec'd in a shallow copy of the module
                                             namespace before the call; the function
                                             is looked up in that copy (so setup may
                                             wrap it), but module functions keep the
                                             module's globals: use setup for side
                                             effects (seeding, files, monkeypatching),
                "kind": str|null}            echoed back, not interpreted
               , ...],
     "float_tolerance": number >= 0 (default 1e-6; math.isclose rel_tol = abs_tol),
     "case_timeout_ms": number > 0 | null (default: no per-case timeout),
     "nonce": str|null, "max_output_bytes": int (default 1 MiB; per stream, per case)}
  result:
    {"mode": "cases", "nonce", "passed": load ok and every case passed (vacuously true
     for zero cases), "tests_passed": int, "tests_total": int, "cases": [case...],
     "error_kind": null | load error ("syntax"|"import"|"runtime") | the first failing
                   case's error_kind,
     "error": null | "Type: message" of the load error, "traceback": null | str,
     "stdout", "stderr", "stdout_truncated", "stderr_truncated"  (output of loading the
     code), "duration_ms": float}
    A load error (syntax: compiling; import: ImportError while executing the code;
    runtime: any other exception, incl. SystemExit, or `function` missing / not
    callable) leaves "cases" empty.
  case: {"name", "kind", "passed": bool, "actual_output": JSON rendering of the
         return value (null if it raised), "actual_truncated": bool,
         "error": null | "Type: message", "error_kind": null | "assertion" |
         "wrong_output" | "runtime" | "timeout", "traceback": null | str,
         "duration_ms": float (the call only), "stdout", "stderr",
         "stdout_truncated", "stderr_truncated"}
    error_kind: an AssertionError out of the function -> "assertion"; any other
    unexpected exception (incl. SystemExit, and an exception raised by setup) ->
    "runtime"; wrong value, or expected_error given but nothing raised ->
    "wrong_output" (error "WrongOutput: expected X, got Y"); the case ran longer than
    case_timeout_ms -> "timeout". A passed case has error/error_kind null.
  Comparison rules: see equal(). Rendering rules: see _render().

Mode "program_test" (HumanEval style) - request:
    {"code": str, "test": str, "entry_point": str|null, "nonce": str|null,
     "max_output_bytes": int}
  Both are compiled, then code and test run in ONE namespace (__name__ ==
  "__main__"); then, if entry_point is given and the TEST (re)defined a callable
  `check`, check(namespace[entry_point]) is called.
  result:
    {"mode": "program_test", "nonce", "passed": bool (everything ran to its end),
     "error_kind": null | "syntax" | "import" | "runtime" | "assertion" |
                   "exited_early" (SystemExit - even status 0 - or KeyboardInterrupt),
     "error": null | "Type: message" + "\n\n" + the traceback without harness frames,
     "phase": null | "code" | "test" | "check" (where it failed),
     "check_called": bool, "duration_ms": float,
     "stdout", "stderr", "stdout_truncated", "stderr_truncated"}
  os._exit() (or a crash) kills the process before the result line: the runner must
  count a missing result line as a failure.

In-process API (same semantics, no result line; the caller's fds 1/2 and
sys.stdout/sys.stderr are restored afterwards):

    run_cases(request: dict) -> dict
    run_program_test(request: dict) -> dict
    run_in_process(spec: dict, code: str, namespace: dict|None = None) -> dict
        (spec = request without "code", plus "mode"; see its docstring)
    run_integration(request: dict) -> dict, run_cases_of_many(request: dict) -> dict
        (in-process modes "integrate" and "many_cases", for the codegen pipeline)
    (all raise ValueError on a malformed request)

SECURITY NOTE. This harness shares its interpreter with the code it judges, so that
code can always subvert it: monkeypatch the harness or the stdlib modules it uses,
find the private stdout fd in /proc/self/fd and write a forged line, read the nonce
out of memory, os._exit() before the verdict, install trace functions, and so on. The
nonce and the fd juggling only make an *accidental* forgery (a program printing
something that looks like a result line) impossible. The authoritative signals are
the runner's: exit status, signal, deadline, and "exactly one result line with the
right nonce". A missing/duplicated result line, a wrong nonce, a non-zero exit or a
kill must be treated as a failure. What the harness does add: for JSON expected
values it never calls the actual value's __eq__ (so an "always equal" object cannot
pass a case), and base-class methods are used on str/int/float/list/dict subclasses.
"""

import io
import json
import linecache
import math
import os
import select
import signal
import sys
import threading
import time
import traceback
import types

if __name__ == "__main__":  # the CLI, run with -I: this file's folder is not on sys.path
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import codegen_values  # noqa: E402
from codegen_values import (  # noqa: E402
    DEFAULT_FLOAT_TOLERANCE, JSON_ENCODER, CaseTimeout, equal, exception_matches,
    render_value, safe_str, sanitize, type_name,
)

MARKER = "@@codegen-harness@@ "
MODES = ("cases", "program_test")
# In-process only (run_in_process): not a CLI mode.
IN_PROCESS_MODES = MODES + ("integrate", "many_cases")
DEFAULT_MAX_OUTPUT = 1 << 20
MAX_OUTPUT_LIMIT = 1 << 30
MAX_CASE_TIMEOUT_MS = 24 * 3600 * 1000
# Re-raise the timeout every this many seconds while a case keeps swallowing it.
TIMEOUT_REFIRE_S = 0.05

# Limits for error texts.
MAX_TRACEBACK_LINES = 40
MAX_TRACEBACK_CHARS = 6000

SOLUTION_FILE = "<solution>"
TEST_FILE = "<test>"
SETUP_FILE = "<setup>"

# Frames of these files are the harness's own: a timeout does not fire in them, and the
# traceback of a case leaves them out.
_HARNESS_FILES = frozenset({(lambda: None).__code__.co_filename,
                            codegen_values.equal.__code__.co_filename})
_os_write = os.write
_MIN_RECURSION_LIMIT = max(sys.getrecursionlimit(), 1000)


def _recursion_floor():
    """The code may have lowered the recursion limit; the harness needs its own."""
    try:
        if sys.getrecursionlimit() < _MIN_RECURSION_LIMIT:
            sys.setrecursionlimit(_MIN_RECURSION_LIMIT)
    except Exception:
        pass


# --------------------------------------------------------------------------- request


def _field(req, name, default, check, what):
    """Optional field: missing or null -> default."""
    v = req.get(name)
    if v is None:
        return default
    if not check(v):
        raise ValueError("'%s' must be %s" % (name, what))
    return v


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _common_fields(req):
    if not isinstance(req, dict):
        raise ValueError("request must be a JSON object")
    nonce = _field(req, "nonce", None, lambda v: isinstance(v, str), "a string or null")
    max_out = _field(req, "max_output_bytes", DEFAULT_MAX_OUTPUT,
                     lambda v: _is_int(v) and 0 <= v <= MAX_OUTPUT_LIMIT,
                     "an integer in [0, %d]" % MAX_OUTPUT_LIMIT)
    code = req.get("code")
    if not isinstance(code, str):
        raise ValueError("'code' must be a string")
    return nonce, max_out, code


def _parse_cases_request(req):
    nonce, max_out, code = _common_fields(req)
    function = req.get("function")
    if not isinstance(function, str) or not function:
        raise ValueError("'function' must be a non-empty string")
    tol = _field(req, "float_tolerance", DEFAULT_FLOAT_TOLERANCE,
                 lambda v: _is_num(v) and v >= 0 and not math.isnan(v),
                 "a non-negative number")
    timeout_ms = _field(req, "case_timeout_ms", None,
                        lambda v: _is_num(v) and 0 < v <= MAX_CASE_TIMEOUT_MS,
                        "a positive number of milliseconds or null")
    cases = req.get("cases")
    if not isinstance(cases, list):
        raise ValueError("'cases' must be a list")
    parsed = []
    for i, c in enumerate(cases):
        if not isinstance(c, dict):
            raise ValueError("cases[%d] must be an object" % i)
        name = c.get("name")
        if name is None:
            name = "case_%d" % i
        elif not isinstance(name, str):
            raise ValueError("cases[%d].name must be a string" % i)
        inputs = c.get("inputs")
        if inputs is None:
            inputs = []
        elif not isinstance(inputs, (dict, list, tuple)):
            raise ValueError("cases[%d].inputs must be an object, a list or null" % i)
        for key in ("expected_error", "setup", "kind"):
            if c.get(key) is not None and not isinstance(c.get(key), str):
                raise ValueError("cases[%d].%s must be a string or null" % (i, key))
        parsed.append({
            "name": name,
            "inputs": inputs,
            "expected_output": c.get("expected_output"),
            "expected_error": c.get("expected_error") or None,
            "setup": c.get("setup"),
            "kind": c.get("kind"),
        })
    return {"nonce": nonce, "max_output_bytes": max_out, "code": code,
            "function": function, "float_tolerance": float(tol),
            "case_timeout_s": None if timeout_ms is None else timeout_ms / 1000.0,
            "cases": parsed}


def _parse_program_test_request(req):
    nonce, max_out, code = _common_fields(req)
    test = req.get("test")
    if not isinstance(test, str):
        raise ValueError("'test' must be a string")
    entry_point = req.get("entry_point")
    if entry_point is not None and (not isinstance(entry_point, str) or not entry_point):
        raise ValueError("'entry_point' must be a non-empty string or null")
    return {"nonce": nonce, "max_output_bytes": max_out, "code": code, "test": test,
            "entry_point": entry_point}


# --------------------------------------------------------------------- output capture


class _PipeCapture:
    """fd `target` -> a pipe; a daemon thread (_pump, one for every capture of a run)
    drains it into a capped buffer so that the writer never blocks. The thread only reads
    while holding the lock, so take() (drain + swap under the lock) attributes every byte
    written before it exactly."""

    def __init__(self, target, limit, errors):
        r, w = os.pipe()  # both close-on-exec
        self.r = r
        self.limit = limit
        self.buf = bytearray()
        self.truncated = False
        self.lock = threading.Lock()
        self.eof = False
        os.set_blocking(r, False)
        os.dup2(w, target)  # inheritable: subprocesses write into the capture too
        # Python-level writer on its own fd, so that closing it later cannot touch
        # whatever fd `target` is restored to.
        # Line buffered, like a terminal: print() and os.write()/subprocess output
        # interleave in order.
        self.stream = io.open(w, "w", encoding="utf-8", errors=errors, closefd=True,
                              buffering=1)

    def _add(self, data):
        room = self.limit - len(self.buf)
        if room > 0:
            self.buf += data[:room]
        if len(data) > room:
            self.truncated = True

    def _drain_locked(self):
        while not self.eof:
            try:
                data = os.read(self.r, 65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self.eof = True
                try:
                    os.close(self.r)
                except OSError:
                    pass
                return
            self._add(data)


    def take(self):
        try:
            self.stream.flush()
        except Exception:
            pass
        with self.lock:
            self._drain_locked()
            data, trunc = bytes(self.buf), self.truncated
            self.buf = bytearray()
            self.truncated = False
        return data.decode("utf-8", errors="replace"), trunc


def _pump(captures):
    """Drains every capture of a run until each reached EOF: one thread for all of them
    (a thread costs a quarter of a millisecond of a freshly forked process)."""
    poller = select.poll()
    live = {c.r: c for c in captures}
    for fd in live:
        poller.register(fd, select.POLLIN)
    while live:
        try:
            ready = poller.poll()
        except OSError:
            return
        for fd, _ in ready:
            c = live.get(fd)
            if c is None:
                continue
            with c.lock:
                c._drain_locked()
                if c.eof:
                    # Closed by the drain: forgotten before the next poll can see its number
                    # reused.
                    poller.unregister(fd)
                    del live[fd]


class _Capture:
    """Redirects fds 1 and 2 (and sys.stdout/sys.stderr) into _PipeCaptures.
    restore=True (in-process use) puts everything back in stop(); the CLI leaves the
    pipes in place until it _exits, so that nothing the program left running can ever
    write to the real stdout."""

    def __init__(self, limit, restore):
        self.restore = restore
        for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            _flush_quietly(s)
        self.saved_fds = (os.dup(1), os.dup(2)) if restore else None
        self.saved_sys = (sys.stdout, sys.stderr)
        self.out = self.err = self.thread = None
        try:
            self.out = _PipeCapture(1, limit, "strict")
            self.err = _PipeCapture(2, limit, "backslashreplace")
            self.thread = threading.Thread(target=_pump, args=((self.out, self.err),),
                                           name="codegen-harness-capture", daemon=True)
            self.thread.start()
        except BaseException:
            self.stop()
            raise
        self.reset_streams()

    def reset_streams(self):
        sys.stdout = self.out.stream
        sys.stderr = self.err.stream

    def take(self):
        """Everything written since the previous take(): (stdout, stdout_truncated,
        stderr, stderr_truncated)."""
        for s in (sys.__stdout__, sys.__stderr__):
            _flush_quietly(s)
        out, out_t = self.out.take()
        err, err_t = self.err.take()
        return out, out_t, err, err_t

    def stop(self):
        if not self.restore:
            return
        captures = [c for c in (self.out, self.err) if c is not None]
        for c in captures:
            try:
                c.stream.close()
            except Exception:
                pass
        sys.stdout, sys.stderr = self.saved_sys
        for fd, saved in zip((1, 2), self.saved_fds):
            os.dup2(saved, fd)
            os.close(saved)
        # The pump sees EOF now (unless a leftover subprocess still holds a pipe) and
        # closes the read ends itself.
        if self.thread is not None:
            self.thread.join(0.2)


def _flush_quietly(stream):
    try:
        if stream is not None:
            stream.flush()
    except Exception:
        pass


def _set_output(result, cap_tuple, prefix=""):
    out, out_t, err, err_t = cap_tuple
    result[prefix + "stdout"] = out
    result[prefix + "stderr"] = err
    result[prefix + "stdout_truncated"] = out_t
    result[prefix + "stderr_truncated"] = err_t


# --------------------------------------------------------------------------- timeout


class _Alarm:
    """Per-case deadline via setitimer(ITIMER_REAL)/SIGALRM.

    The handler raises only while armed and only when the interrupted frame is not
    harness code, so harness bookkeeping (including disarm) is never interrupted; the
    exception only ever propagates out of user code into a harness try/except. It
    re-fires every TIMEOUT_REFIRE_S in case the code swallows it; `fired` records a
    timeout even if it was swallowed. Code stuck in one long C call (e.g.
    sum(range(10**12))) is only stopped by the runner's deadline."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.armed = False
        self.fired = False
        self.prev = None
        self.installed = False

    def _handler(self, signum, frame):
        if not self.armed:
            return
        self.fired = True
        if frame is not None and frame.f_code.co_filename not in _HARNESS_FILES:
            raise CaseTimeout()

    def install(self):
        if self.seconds is None:
            return
        if threading.current_thread() is not threading.main_thread():
            # signal handlers can only be set from the main thread; no per-case
            # timeout then (documented).
            self.seconds = None
            return
        self.prev = signal.signal(signal.SIGALRM, self._handler)
        self.installed = True

    def arm(self):
        self.fired = False
        if not self.installed:
            return
        signal.signal(signal.SIGALRM, self._handler)  # in case the code replaced it
        self.armed = True
        signal.setitimer(signal.ITIMER_REAL, self.seconds, TIMEOUT_REFIRE_S)

    def disarm(self):
        if not self.installed:
            return
        self.armed = False
        signal.setitimer(signal.ITIMER_REAL, 0, 0)

    def uninstall(self):
        if not self.installed:
            return
        self.disarm()
        try:
            signal.signal(signal.SIGALRM, self.prev if self.prev is not None else signal.SIG_DFL)
        except (TypeError, ValueError):
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
        self.installed = False


# ------------------------------------------------------------------- error rendering


def _exc_line(e):
    """'Type: message' (just 'Type' when the message is empty)."""
    msg = safe_str(e)
    name = type_name(e)
    return "%s: %s" % (name, msg) if msg else name


def _filter_tbe(te, seen):
    if te is None or id(te) in seen:
        return
    seen.add(id(te))
    try:
        frames = [f for f in te.stack if f.filename not in _HARNESS_FILES]
        te.stack = traceback.StackSummary.from_list(frames)
    except Exception:
        pass
    _filter_tbe(getattr(te, "__cause__", None), seen)
    _filter_tbe(getattr(te, "__context__", None), seen)


def _format_tb(e):
    """The traceback of `e` without harness frames, trimmed to its last lines."""
    try:
        te = traceback.TracebackException(type(e), e, e.__traceback__, compact=True)
        _filter_tbe(te, set())
        text = "".join(te.format())
    except BaseException:
        return _exc_line(e)
    lines = text.splitlines()
    if len(lines) > MAX_TRACEBACK_LINES:
        lines = ["..."] + lines[-MAX_TRACEBACK_LINES:]
    text = "\n".join(lines)
    if len(text) > MAX_TRACEBACK_CHARS:
        text = "..." + text[-MAX_TRACEBACK_CHARS:]
    return text


# ----------------------------------------------------------------------- code loading


def _register_source(filename, source):
    """Let tracebacks (and inspect.getsource) show the user's source lines."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)


def _compile(source, filename):
    _register_source(filename, source)
    return compile(source, filename, "exec", dont_inherit=True)


class _ModuleSwap:
    """Installs `module` as sys.modules[name] (pickle, dataclasses, typing look there)
    and puts back the previous entry afterwards."""

    def __init__(self, name, module):
        self.name, self.module = name, module
        self.prev = sys.modules.get(name, _ModuleSwap)

    def __enter__(self):
        sys.modules[self.name] = self.module
        return self.module

    def __exit__(self, *exc):
        if self.prev is _ModuleSwap:
            sys.modules.pop(self.name, None)
        else:
            sys.modules[self.name] = self.prev
        return False


class _NoSwap:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _classify_load_error(e):
    if isinstance(e, SyntaxError):
        return "syntax"
    if isinstance(e, ImportError):
        return "import"
    return "runtime"


def _ms_since(t0):
    return round((time.perf_counter() - t0) * 1000.0, 3)


# ------------------------------------------------------------------------- mode: cases


def run_cases(request, _restore=True, _namespace=None):
    """Run `request["function"]` from `request["code"]` against request["cases"].
    Request/result formats: see the module docstring."""
    req = _parse_cases_request(request)
    cap = _Capture(req["max_output_bytes"], restore=_restore)
    try:
        return sanitize(_run_cases(req, cap, _namespace))
    finally:
        cap.stop()


def run_many_cases(requests, shared=False):
    """run_cases for several requests in turn, under one capture (its pipes and its thread
    made once: in a freshly forked process they cost more than a small function's cases).
    The capture keeps the first request's max_output_bytes; every case's output is still
    taken apart. Requests with the same code share its compiled code object (each still
    runs it in a fresh module). With `shared` (requests of different functions that would
    otherwise each have a process), what one request's code changed for the whole process is
    put back before the next (_ProcessState), and the run stops early, returning fewer
    results, when a request's code leaves a thread running: the caller runs the rest alone."""
    parsed = [_parse_cases_request(r) for r in requests]
    if not parsed:
        return []
    cap = _Capture(parsed[0]["max_output_bytes"], restore=True)
    compiled = {}
    state = _ProcessState() if shared else None
    results = []
    try:
        for req in parsed:
            try:
                results.append(sanitize(_run_cases(req, cap, compiled=compiled)))
            finally:
                intact = state.restore() if state is not None else True
            if not intact:
                break
        return results
    finally:
        cap.stop()


class _ProcessState:
    """What a request's code commonly changes for the whole interpreter as it loads or runs,
    taken before the first request of a shared run and put back after each: the builtins,
    sys.path, sys.modules' names, the environment and working directory, the recursion and
    int-string limits, decimal's context, the warnings filters, trace and profile functions
    and the signal handlers. Not put back: attributes a request's code set on a module other
    than builtins (a function of the same job, as integration runs them all in one module).
    A thread the code started cannot be taken back: restore() says False and the shared run
    stops there. Never raises: a request's code may have broken anything."""

    SIGNALS = tuple(getattr(signal, n) for n in ("SIGALRM", "SIGINT", "SIGTERM", "SIGUSR1",
                                                 "SIGUSR2", "SIGHUP", "SIGPIPE", "SIGCHLD")
                    if hasattr(signal, n))

    def __init__(self):
        self.builtins = sys.modules["builtins"].__dict__
        self.saved_builtins = dict(self.builtins)
        self.modules = set(sys.modules)
        self.path = list(sys.path)
        self.environ = dict(os.environ)
        self.cwd = os.getcwd()
        self.recursion = sys.getrecursionlimit()
        self.int_digits = getattr(sys, "get_int_max_str_digits", lambda: None)()
        warnings = sys.modules.get("warnings")
        self.warnings = list(warnings.filters) if warnings is not None else None
        decimal = sys.modules.get("decimal")
        self.decimal = decimal.getcontext().copy() if decimal is not None else None
        self.trace, self.profile = sys.gettrace(), sys.getprofile()
        self.handlers = {n: signal.getsignal(n) for n in self.SIGNALS}
        self.threads = threading.active_count()

    def restore(self):
        steps = (self._builtins, self._sys, self._environment, self._modules, self._signals)
        for step in steps:
            try:
                step()
            except BaseException:
                pass
        try:
            return threading.active_count() <= self.threads
        except BaseException:
            return False

    def _builtins(self):
        # Every time, by identity: a replaced builtin may compare equal to anything.
        for name in [n for n in self.builtins if n not in self.saved_builtins]:
            del self.builtins[name]
        self.builtins.update(self.saved_builtins)

    def _sys(self):
        sys.settrace(self.trace)
        sys.setprofile(self.profile)
        sys.setrecursionlimit(self.recursion)
        if self.int_digits is not None:
            sys.set_int_max_str_digits(self.int_digits)
        sys.path[:] = self.path
        if self.warnings is not None:
            sys.modules["warnings"].filters[:] = self.warnings
        decimal = sys.modules.get("decimal")
        if decimal is not None:
            decimal.setcontext(self.decimal.copy() if self.decimal is not None
                               else decimal.Context())

    def _environment(self):
        if dict(os.environ) != self.environ:
            os.environ.clear()
            os.environ.update(self.environ)
        if os.getcwd() != self.cwd:
            os.chdir(self.cwd)

    def _modules(self):
        for name in [n for n in sys.modules if n not in self.modules]:
            del sys.modules[name]

    def _signals(self):
        for number, handler in self.handlers.items():
            if signal.getsignal(number) is not handler:
                signal.signal(number, handler)


def _run_cases(req, cap, namespace=None, compiled=None):
    t_start = time.perf_counter()
    result = {
        "mode": "cases", "nonce": req["nonce"], "passed": False,
        "tests_passed": 0, "tests_total": len(req["cases"]), "cases": [],
        "error_kind": None, "error": None, "traceback": None,
    }
    if namespace is None:
        module = types.ModuleType("solution")
        module.__dict__["__file__"] = SOLUTION_FILE
        swap = _ModuleSwap("solution", module)
    else:  # the caller's module namespace (already installed by the caller)
        module, swap = None, _NoSwap()
    ns = module.__dict__ if module is not None else namespace
    with swap:
        load_error = None
        try:
            code_obj = compiled.get(req["code"]) if compiled is not None else None
            if code_obj is None:
                code_obj = _compile(req["code"], SOLUTION_FILE)
                if compiled is not None:
                    compiled[req["code"]] = code_obj
        except BaseException as e:  # SyntaxError, IndentationError, ValueError (NUL)
            load_error = ("syntax", e)
        if load_error is None:
            try:
                exec(code_obj, ns)
            except BaseException as e:
                load_error = (_classify_load_error(e), e)
        if load_error is None:
            fn = ns.get(req["function"])
            if fn is None and req["function"] not in ns:
                load_error = ("runtime", NameError(
                    "name %r is not defined by the solution" % req["function"]))
            elif not callable(fn):
                load_error = ("runtime", TypeError(
                    "%r is not callable (it is a %s)" % (req["function"], type_name(fn))))
        cap.reset_streams()
        _recursion_floor()
        _set_output(result, cap.take())
        if load_error is not None:
            kind, e = load_error
            result["error_kind"] = kind
            result["error"] = _exc_line(e)
            result["traceback"] = _format_tb(e)
            result["duration_ms"] = _ms_since(t_start)
            return result

        alarm = _Alarm(req["case_timeout_s"])
        alarm.install()
        try:
            for case in req["cases"]:
                cr = _run_one_case(case, ns, req, alarm)
                cap.reset_streams()
                _set_output(cr, cap.take())
                result["cases"].append(cr)
        finally:
            alarm.uninstall()

    passed = [c["passed"] for c in result["cases"]]
    result["tests_passed"] = sum(passed)
    result["passed"] = all(passed)
    for c in result["cases"]:
        if not c["passed"]:
            result["error_kind"] = c["error_kind"]
            break
    result["duration_ms"] = _ms_since(t_start)
    return result


def _run_one_case(case, module_ns, req, alarm):
    cr = {"name": case["name"], "kind": case["kind"], "passed": False,
          "actual_output": None, "actual_truncated": False, "error": None,
          "error_kind": None, "traceback": None, "duration_ms": 0.0}
    fname = req["function"]
    tol = req["float_tolerance"]
    expected_error = case["expected_error"]
    phase = "setup"
    raised = None
    actual = None
    duration = 0.0
    render = None
    timed_out = False
    ok = False
    alarm.arm()
    try:
        ns = dict(module_ns)
        if case["setup"]:
            exec(_compile(case["setup"], SETUP_FILE), ns)
        fn = ns.get(fname, module_ns.get(fname))
        phase = "call"
        inputs = case["inputs"]
        t0 = time.perf_counter()
        try:
            if isinstance(inputs, dict):
                actual = fn(**inputs)
            else:
                actual = fn(*inputs)
            if _is_awaitable(actual):
                import asyncio
                actual = asyncio.run(actual)
        finally:
            duration = (time.perf_counter() - t0) * 1000.0
        phase = "compare"
        _recursion_floor()
        if expected_error is None:
            ok = equal(actual, case["expected_output"], tol)
        render = render_value(actual)
    except CaseTimeout as e:
        timed_out = True
        raised = e
    except BaseException as e:
        raised = e
    finally:
        alarm.disarm()
    _recursion_floor()
    if alarm.fired:
        timed_out = True

    cr["duration_ms"] = round(duration, 3)
    if render is not None:
        cr["actual_output"], cr["actual_truncated"] = render

    if timed_out:
        cr["error_kind"] = "timeout"
        cr["error"] = "Timeout: case exceeded %g ms" % (req["case_timeout_s"] * 1000.0)
        if raised is not None:  # where it was interrupted
            tb = _format_tb(raised).splitlines()
            cr["traceback"] = "\n".join(tb[:-1] + [cr["error"]])
        return cr
    if raised is not None and phase == "compare":
        cr["error_kind"] = "wrong_output"
        cr["error"] = "WrongOutput: the output could not be compared (%s)" % _exc_line(raised)
        return cr
    if raised is not None:
        if phase == "call" and expected_error is not None and exception_matches(raised, expected_error):
            cr["passed"] = True
            return cr
        cr["error_kind"] = "assertion" if isinstance(raised, AssertionError) else "runtime"
        cr["error"] = _exc_line(raised)
        if phase == "setup":
            cr["error"] += " (in setup)"
        elif expected_error is not None:
            cr["error"] += " (expected %s)" % expected_error
        cr["traceback"] = _format_tb(raised)
        return cr
    # returned normally
    if expected_error is not None:
        cr["error_kind"] = "wrong_output"
        cr["error"] = "WrongOutput: expected %s to be raised, but the function returned" % expected_error
        return cr
    if ok:
        cr["passed"] = True
        return cr
    cr["error_kind"] = "wrong_output"
    exp_r, _ = render_value(case["expected_output"])
    cr["error"] = "WrongOutput: expected %s, got %s" % (
        _short_json(exp_r), _short_json(cr["actual_output"]))
    return cr


def _is_awaitable(x):
    return isinstance(x, types.CoroutineType)


def _short_json(r, limit=500):
    try:
        s = JSON_ENCODER.encode(sanitize(r))
    except Exception:
        s = "<unrenderable>"
    return s if len(s) <= limit else s[:limit] + "..."


# ------------------------------------------------------------------ mode: program_test


def run_program_test(request, _restore=True, _namespace=None):
    """HumanEval-style: exec `code`, then `test`, in one namespace; then
    check(namespace[entry_point]) if entry_point is given and the test defines check.
    Passes only if all of that ran to its end."""
    req = _parse_program_test_request(request)
    cap = _Capture(req["max_output_bytes"], restore=_restore)
    try:
        return sanitize(_run_program_test(req, cap, _namespace))
    finally:
        cap.stop()


def _run_program_test(req, cap, namespace=None):
    t0 = time.perf_counter()
    result = {"mode": "program_test", "nonce": req["nonce"], "passed": False,
              "error_kind": None, "error": None, "phase": None, "check_called": False}
    if namespace is None:
        module = types.ModuleType("__main__")
        ns = module.__dict__
        swap = _ModuleSwap("__main__", module)
    else:
        ns, swap = namespace, _NoSwap()
    phase = "code"
    err = None
    with swap:
        try:
            code_obj = _compile(req["code"], SOLUTION_FILE)
            phase = "test"
            test_obj = _compile(req["test"], TEST_FILE)
        except BaseException as e:
            err = ("syntax", e)
        if err is None:
            try:
                phase = "code"
                exec(code_obj, ns)
                # A trace function installed by the code could skip test lines.
                sys.settrace(None)
                sys.setprofile(None)
                phase = "test"
                check_before = ns.get("check", _ModuleSwap)
                exec(test_obj, ns)
                # Only a check() that the TEST defined: the code may define one too.
                check = ns.get("check")
                if (req["entry_point"] is not None and callable(check)
                        and check is not check_before):
                    phase = "check"
                    if req["entry_point"] not in ns:
                        raise NameError("name %r is not defined" % req["entry_point"])
                    candidate = ns[req["entry_point"]]
                    sys.settrace(None)
                    sys.setprofile(None)
                    result["check_called"] = True
                    check(candidate)
                phase = None
            except BaseException as e:
                err = (_classify_run_error(e), e)
    cap.reset_streams()
    _recursion_floor()
    result["duration_ms"] = _ms_since(t0)
    _set_output(result, cap.take())
    result["phase"] = phase
    if err is None:
        result["passed"] = True
        return result
    kind, e = err
    result["error_kind"] = kind
    tb = _format_tb(e)
    line = _exc_line(e)
    if kind == "exited_early":
        line += " (the test script exited before its end)"
    result["error"] = line + ("\n\n" + tb if tb and tb != line else "")
    return result


def _classify_run_error(e):
    if isinstance(e, (SystemExit, KeyboardInterrupt)):
        return "exited_early"
    if isinstance(e, ImportError):
        return "import"
    if isinstance(e, AssertionError):
        return "assertion"
    return "runtime"


def run_in_process(spec, code, namespace=None):
    """Adapter for a runner that imports this module into its (forked) interpreter
    instead of starting the CLI: `spec` is a request without "code" plus
    "mode": "cases" | "program_test" | "integrate" | "many_cases" (whose runs carry
    their own code); `code` is the program; `namespace`, if given, is
    the module dict to run it in (e.g. a fresh __main__ the caller installed in
    sys.modules; its __name__ is left as is), otherwise a fresh module is used as in
    run_cases/run_program_test. fds 1/2 and sys.stdout/sys.stderr are captured per
    case and restored afterwards. Raises ValueError on a malformed spec."""
    if not isinstance(spec, dict):
        raise ValueError("the harness spec must be an object")
    mode = spec.get("mode")
    if mode not in IN_PROCESS_MODES:
        raise ValueError("'mode' must be one of %s" % ", ".join(IN_PROCESS_MODES))
    request = dict(spec)
    request["code"] = code
    if mode == "cases":
        return run_cases(request, _namespace=namespace)
    if mode == "integrate":
        return run_integration(request)
    if mode == "many_cases":
        return run_cases_of_many(request)
    return run_program_test(request, _namespace=namespace)


# ------------------------------------------------------------- mode: many_cases (in-process)


def run_cases_of_many(request):
    """Several functions' cases in one run, for the codegen pipeline: request["runs"] is a
    list of cases requests, each with its own "code" and "function", run in turn as
    run_many_cases runs them (each in a fresh module, its builtins as the first found them).
    A worker sends it for functions of one job whose runs waited for a container together:
    one program process instead of one each. Returns {"mode": "many_cases", "runs": [cases
    result, in order]} (proto::harness::ManyCasesReport), fewer than asked when a request's
    code left a thread running (the worker runs the rest alone)."""
    runs = request.get("runs")
    if not isinstance(runs, list) or not runs:
        raise ValueError("'runs' must be a non-empty list")
    for i, run in enumerate(runs):
        if not isinstance(run, dict):
            raise ValueError("runs[%d] must be an object" % i)
    return {"mode": "many_cases", "runs": run_many_cases([dict(r) for r in runs], shared=True)}


# --------------------------------------------------------------- mode: integrate (in-process)

# The file name the coverage pass compiles the module under (its tracer counts only it).
COVERAGE_FILE = "module.py"
_DANGEROUS = frozenset({
    "eval", "exec", "compile", "__import__", "os.system", "os.popen", "os.exec", "os.spawn",
    "subprocess", "socket", "urllib", "http.client", "requests", "shutil.rmtree", "os.remove",
    "os.unlink", "pickle.loads", "ctypes"})


class _CoverageCaseOver(BaseException):
    pass


def run_integration(request):
    """Integration of an assembled module (request["code"]) in one run, for the codegen
    pipeline (proto::harness::IntegrationReport):
    1. the verdicts: request["verdicts"] maps a function name to its cases request (without
       code and function), run untraced with their timeouts, as run_cases runs them;
    2. the quality (stdlib only): line coverage by request["cases"] (a function name to
       [{"inputs": ...}]; traced, a second pass, so tracing never slows a verdict, each case
       stopped at "case_timeout_ms"), cyclomatic complexity and docstrings per function, and
       calls that deserve a reviewer's look. Reported, never a security boundary: the code
       runs inside the same sandbox as everything else;
    3. with request["lint"] (the job's final run), pycodestyle's and pyflakes' findings as
       quality["warnings"] (see lint), or "warnings" in quality["unmeasured"].
    Returns {"functions": {name: cases result}, "quality": {...}}. Part of the image so
    that the zygote has it compiled and warm: a driver program sent with every request
    was compiled again in every program process."""
    import ast

    source = request["code"]
    asked = request.get("verdicts") or {}
    names = list(asked)
    results = run_many_cases([dict(asked[n], code=source, function=n) for n in names])
    verdicts = dict(zip(names, results))

    tree = ast.parse(source, COVERAGE_FILE)
    branches = (ast.If, ast.For, ast.While, ast.AsyncFor, ast.ExceptHandler, ast.With,
                ast.AsyncWith, ast.Assert, ast.comprehension, ast.IfExp, ast.Match)
    complexity, documented, functions = {}, 0, []
    dangerous, executable = set(), set()

    def dotted(expr):
        if isinstance(expr, ast.Name):
            return expr.id
        if isinstance(expr, ast.Attribute):
            base = dotted(expr.value)
            return base + "." + expr.attr if base else expr.attr
        return ""

    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.append(node.name)
            if ast.get_docstring(node):
                documented += 1
            c = 1
            for sub in ast.walk(node):
                if isinstance(sub, branches):
                    c += 1
                elif isinstance(sub, ast.BoolOp):
                    c += len(sub.values) - 1
            complexity[node.name] = c
        called = []
        if isinstance(node, ast.Call):
            called.append(dotted(node.func))
        elif isinstance(node, ast.Import):
            called.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            called.append(node.module)
        for name in called:
            for bad in _DANGEROUS:
                if name == bad or name.startswith(bad + "."):
                    dangerous.add(name)
        # Executable lines: the first line of every statement outside docstrings.
        if isinstance(node, ast.stmt) and not (
                isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            executable.add(node.lineno)

    executed = _coverage(source, request.get("cases") or {},
                         (request.get("case_timeout_ms") or 0) / 1000.0)
    covered = len(executable & executed)
    quality = {
        "coverage": covered / len(executable) if executable else 1.0,
        "complexity": complexity,
        "docstrings": documented / len(functions) if functions else 1.0,
        "dangerous_calls": sorted(dangerous),
        "unmeasured": [],
    }
    if request.get("lint"):
        findings = lint(source)
        if findings is None:
            quality["unmeasured"].append("warnings")
        else:
            quality["warnings"] = findings
    return sanitize({"functions": verdicts, "quality": quality})


def lint(source):
    """PEP 8 (pycodestyle, its default checks) and pyflakes' findings about `source`, as
    "line N: [code] message" in line order; None when the image has neither (Debian's
    python3-pycodestyle and python3-pyflakes). Both read the source, nothing of it runs.
    Imported here, not at the top: only a job's final run asks (the zygote's warm-up imports
    them once, so a fork finds them loaded)."""
    try:
        import pycodestyle
        import pyflakes.api
    except ImportError:
        return None
    findings = []

    class Flakes:
        def unexpectedError(self, filename, message):
            findings.append((0, "pyflakes: %s" % message))

        def syntaxError(self, filename, message, line, column, text):
            findings.append((line or 0, "syntax error: %s" % message))

        def flake(self, message):
            findings.append((message.lineno, message.message % message.message_args))

    pyflakes.api.check(source, COVERAGE_FILE, Flakes())

    class Style(pycodestyle.BaseReport):
        def error(self, line_number, offset, text, check):
            code = text[:4]
            if self._ignore_code(code):
                return None
            findings.append((line_number, text))
            return code

    guide = pycodestyle.StyleGuide(quiet=True, reporter=Style,
                                   ignore=list(pycodestyle.DEFAULT_IGNORE.split(",")))
    checker = pycodestyle.Checker(COVERAGE_FILE, lines=source.splitlines(True),
                                  options=guide.options, report=guide.options.report)
    checker.check_all()
    findings.sort(key=lambda f: f[0])
    return ["line %d: %s" % f for f in findings]


def _coverage(source, cases, limit_s):
    """Lines of `source` executed by loading it and calling each function on its cases'
    inputs (errors ignored), traced; a looping case stops adding coverage at `limit_s`."""
    executed = set()

    def tracer(frame, event, arg):
        if frame.f_code.co_filename == COVERAGE_FILE:
            if event in ("line", "call"):
                executed.add(frame.f_lineno)
            return tracer
        return None

    def over(signum, frame):
        raise _CoverageCaseOver()

    previous = signal.signal(signal.SIGALRM, over) if limit_s else None
    namespace = {"__name__": "solution"}
    sys.settrace(tracer)
    try:
        try:
            exec(compile(source, COVERAGE_FILE, "exec", dont_inherit=True), namespace)
        except BaseException:
            return executed
        for name, fn_cases in cases.items():
            fn = namespace.get(name)
            if not callable(fn):
                continue
            for case in fn_cases:
                inputs = case.get("inputs")
                if limit_s:
                    signal.setitimer(signal.ITIMER_REAL, limit_s)
                try:
                    if isinstance(inputs, dict):
                        fn(**inputs)
                    elif isinstance(inputs, list):
                        fn(*inputs)
                    else:
                        fn()
                except BaseException:
                    pass
                finally:
                    if limit_s:
                        signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        sys.settrace(None)
        if previous is not None:
            signal.signal(signal.SIGALRM, previous)
    return executed


# ------------------------------------------------------------------------------- CLI


def _emit(fd, result):
    _recursion_floor()
    try:
        line = MARKER + JSON_ENCODER.encode(sanitize(result)) + "\n"
    except Exception as e:  # cannot happen for results built here; still one line
        line = MARKER + JSON_ENCODER.encode({
            "mode": result.get("mode"), "nonce": result.get("nonce"), "passed": False,
            "harness_error": "result not serializable: %s" % safe_str(e)}) + "\n"
    data = line.encode("ascii")
    while data:
        n = _os_write(fd, data)
        data = data[n:]


def main(argv):
    # Before anything else: keep the real stdout on a private close-on-exec fd.
    private = os.dup(1)
    mode = argv[0] if len(argv) == 1 else None
    nonce = None
    try:
        if mode not in MODES:
            raise ValueError("usage: harness.py {cases|program_test} < request.json")
        raw = sys.stdin.buffer.read()
        try:
            request = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ValueError("request is not valid JSON: %s" % e)
        if isinstance(request, dict) and isinstance(request.get("nonce"), str):
            nonce = request["nonce"]
        # validate before any user code runs
        if mode == "cases":
            _parse_cases_request(request)
        else:
            _parse_program_test_request(request)
    except ValueError as e:
        _emit(private, {"mode": mode, "nonce": nonce, "passed": False, "harness_error": str(e)})
        os._exit(2)
    try:  # user code gets /dev/null as stdin
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
    except OSError:
        pass
    try:
        if mode == "cases":
            result = run_cases(request, _restore=False)
        else:
            result = run_program_test(request, _restore=False)
        _emit(private, result)
    except BaseException as e:  # harness bug (a ValueError here is one too)
        try:
            _emit(private, {"mode": mode, "nonce": nonce, "passed": False,
                            "harness_error": "internal error: " + _exc_line(e)})
        finally:
            os._exit(3)
    # No atexit handlers, no waiting for threads the program left behind.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
