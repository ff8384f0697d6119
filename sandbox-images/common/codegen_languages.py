"""The image's language (stdlib only, Python 3.11): /opt/codegen/language.json, read once by
the zygote at start-up (no request is in it), and what the security core (codegen_guard) asks
of a language: what P prepares before a request, how it runs one, what the zygote loads, what
C reads in a failed program's stderr. Behaviour is data here, run by one of two modes.

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
"""

import json
import os
import re

import codegen_exec
import codegen_in_process
from codegen_protocol import WORKDIR

LANGUAGE_PATH = "/opt/codegen/language.json"
DEFAULT_LANGUAGE = {"name": "python", "main": "main.py", "test": "test.py", "mode": "in_process"}


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


class Language:
    """A validated language.json (load_language), as the runner's processes use it."""

    def __init__(self, config):
        self.config = config
        self.name = config["name"]
        self.main = config["main"]
        self.test = config["test"]
        self.in_process = config["mode"] == "in_process"
        self.compiles = not self.in_process and config.get("compile") is not None
        self.env = config.get("env") or {}

    def work_path(self, which):
        """/work/<main> or /work/<test>."""
        return os.path.join(WORKDIR, self.config[which])

    # Z, once, before anything is forked.

    def preload(self):
        if self.in_process:
            codegen_in_process.preload(self)
        # exec: programs are other executables, nothing of Python to warm up

    def harness_modes(self):
        return codegen_in_process.harness_modes() if self.in_process else []

    # P, already the program's uid: before the request, then with it.

    def prepare(self):
        """What P readies before it scrubs: the interpreter's __main__ (in-process)."""
        return codegen_in_process.prepare_interpreter(self) if self.in_process else None

    def prestart(self):
        """The harness started ahead of the request ("prestart"), or None."""
        return codegen_exec.prestart(self) if self.config.get("prestart") else None

    def run(self, req, prepared, waiting, status_w):
        """Runs the request and sends C P's final report; the exit status P ends with."""
        if self.in_process:
            return codegen_in_process.run_program(req, prepared, status_w, self)
        return codegen_exec.run_exec(req, status_w, self, waiting)

    # C, on a program that failed.

    def stderr_assertion(self, stderr):
        """The failed assertion language.json's "assertion" finds in a failed program's
        stderr, as an exception of kind "assertion"; None without one."""
        pattern = self.config.get("assertion")
        if not pattern:
            return None
        match = re.search(pattern, stderr, re.M)
        if match is None:
            return None
        message = match.groupdict().get("message") or match.group(0)
        return {"type": "AssertionError", "module": "", "message": message.strip()[:2000],
                "kind": "assertion"}


def configure(path=LANGUAGE_PATH):
    """The image's Language (None when its language.json is wrong) and the problems."""
    config, problems = load_language(path)
    return (Language(config) if config is not None else None), problems
