"""Helpers for the host-side container tests of the sandbox images (not part of any image).

Container(language) starts codegen-sandbox-<language>:latest hardened as the worker does, with
the working tree's files of /opt/codegen (what the Dockerfile COPYs: the runner's modules,
the harness, language.json) mounted over the image's, so the tests follow the working tree.
LanguageContract is the behaviour every language image must show; each language's test module mixes it into a
unittest.TestCase with its own snippets.
"""

import json
import os
import shutil
import struct
import subprocess
import time
import unittest

COMMON = os.path.dirname(os.path.abspath(__file__))
IMAGES = os.path.dirname(COMMON)
HARDENING = [
    "--network", "none", "--read-only", "--init", "--ipc", "private", "--log-driver", "none",
    "--memory", "256m", "--memory-swap", "256m", "--pids-limit", "64", "--cpus", "1",
    "--cap-drop", "ALL", "--cap-add", "SETUID", "--cap-add", "SETGID", "--cap-add", "KILL",
    "--security-opt", "no-new-privileges", "--user", "0:0",
    "--tmpfs", "/work:rw,nosuid,nodev,noexec,size=64m,uid=10002,gid=10002,mode=0700",
    "--tmpfs", "/tmp:rw,nosuid,nodev,noexec,size=64m,uid=10002,gid=10002,mode=0700",
    "--tmpfs", "/mnt/data:rw,nosuid,nodev,noexec,size=64m,uid=10002,gid=10002,mode=0700",
    "--tmpfs", "/dev/shm",
    "--ulimit", "nofile=256:256", "--ulimit", "core=0:0",
]


def image(language):
    if language == "python":
        return os.environ.get("CODEGEN_SANDBOX_IMAGE", "codegen-sandbox-python:latest")
    return "codegen-sandbox-%s:latest" % language


def docker_ready(language):
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "image", "inspect", image(language)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def skip_without_image(language):
    return unittest.skipUnless(
        docker_ready(language),
        "needs Docker and the %s sandbox image (sandbox-images/build %s)" % (language, language))


def frame(obj):
    body = json.dumps(obj).encode()
    return struct.pack(">I", len(body)) + body


def copied_files(language):
    """The files the language's Dockerfile COPYs into /opt/codegen/, as sandbox-images/build
    reads them: (name, path in the working tree), from the language folder, else common/."""
    folder = os.path.join(IMAGES, language)
    with open(os.path.join(folder, "Dockerfile")) as f:
        text = f.read().replace("\\\n", " ")
    names = []
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["COPY"]:
            names += [w for w in words[1:-1] if not w.startswith("--")]
    return [(name, os.path.join(folder, name) if os.path.exists(os.path.join(folder, name))
             else os.path.join(COMMON, name)) for name in names]


def working_tree_mounts(language):
    """The working tree's runner, harness and language files over the image's."""
    mounts = []
    for name, path in copied_files(language):
        mounts += ["-v", "%s:/opt/codegen/%s:ro" % (path, name)]
    return mounts


class Container:
    """A hardened container running the working tree's runner, attached over stdin/stdout."""

    def __init__(self, language="python", extra=(), hardening=HARDENING):
        self.proc = subprocess.Popen(
            ["docker", "run", "-i", "--rm", *hardening, *working_tree_mounts(language), *extra,
             image(language)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def send(self, obj):
        self.proc.stdin.write(frame(obj) if not isinstance(obj, bytes) else obj)
        self.proc.stdin.flush()

    def recv(self):
        header = self.proc.stdout.read(4)
        if len(header) < 4:
            return None
        (n,) = struct.unpack(">I", header)
        return json.loads(self.proc.stdout.read(n))

    def settle(self, answer):
        """After an answer the runner gets ready again by itself (a request without "rest")."""
        ready = self.recv()
        assert ready and ready["type"] == "ready", (answer, ready)

    def request(self, code, **fields):
        # Limits far above what the tests' programs and compiles cost, so that a slow machine
        # never turns a verdict into a timeout; a test of a limit sets its own.
        request = {"code": code, "stdin": None, "timeout_ms": 60_000, "compile_timeout_ms": 60_000,
                   "max_output_bytes": 1 << 20, "output_limit_bytes": 100 << 20}
        request.update(fields)
        return request

    def run(self, code, **fields):
        self.send(self.request(code, **fields))
        result = self.recv()
        self.settle(result)
        return result

    def timed_run(self, code, **fields):
        """(result, seconds from sending the request to receiving the result)."""
        request = frame(self.request(code, **fields))
        t = time.perf_counter()
        self.send(request)
        result = self.recv()
        elapsed = time.perf_counter() - t
        self.settle(result)
        return result, elapsed

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=120)  # only bounds a failure: the runner ends at EOF
        except Exception:
            self.proc.kill()
        for stream in (self.proc.stdout, self.proc.stderr):
            stream.close()


class LanguageContract:
    """What every language image does through the runner protocol. A test module sets:

      LANGUAGE          the folder / image name
      MAIN, TEST        the reserved file names
      ECHO              reads stdin, prints it upper-cased to stdout and "err" to stderr
      EXIT3             exits with status 3
      ADD               defines add(a, b)
      ADD_TEST_PASSES   a test of ADD that passes; ADD_TEST_FAILS one that fails
      FAILED_TEST_KIND  the exception kind of the failing test ("assertion"), or None when
                        the language only fails by exit status
      SYNTAX_ERROR      code with a syntax error
      EARLY_EXIT_0      code that exits with status 0 at once
      RUNTIME_ERROR     code that dies of an uncaught error (None: not applicable)
      SPIN              loops forever
      FILES             reads in.txt and writes its content twice to out/x.txt
    """

    FAILED_TEST_KIND = "assertion"
    RUNTIME_ERROR = None
    # What the runner's `ready` announces: the image's test harness's modes (Python only).
    HARNESS_MODES = []

    @classmethod
    def setUpClass(cls):
        cls.c = Container(cls.LANGUAGE)
        ready = cls.c.recv()
        assert ready == {"type": "ready", "protocol": 5, "runs": 0,
                         "harness": cls.HARNESS_MODES}, ready

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def run_code(self, code, **fields):
        r = self.c.run(code, **fields)
        self.assertEqual(r["type"], "result", r)
        return r

    def test_plain_program_output_stdin_and_exit_codes(self):
        r = self.run_code(self.ECHO, stdin="h\u00e9llo")
        self.assertEqual((r["exit_code"], r["signal"]), (0, None), r["stderr"])
        self.assertEqual((r["stdout"], r["stderr"]), ("H\u00c9LLO\n", "err\n"))
        self.assertEqual((r["exception"], r["phase"], r["test_finished"]), (None, None, None))
        self.assertFalse(r["timed_out"] or r["oom_killed"] or r["output_limited"])
        r = self.run_code(self.EXIT3)
        self.assertEqual((r["exit_code"], r["exception"], r["test_finished"]), (3, None, None))

    def test_a_passing_test_finishes(self):
        r = self.run_code(self.ADD, test=self.ADD_TEST_PASSES)
        self.assertEqual(r["exit_code"], 0, r["stderr"])
        self.assertEqual((r["test_finished"], r["phase"], r["exception"]), (True, None, None))

    def test_a_failing_test_reports_its_phase(self):
        r = self.run_code(self.ADD, test=self.ADD_TEST_FAILS)
        self.assertNotEqual(r["exit_code"], 0)
        self.assertEqual((r["test_finished"], r["phase"]), (False, "test"), r)
        if self.FAILED_TEST_KIND is None:
            self.assertIsNone(r["exception"])
        else:
            self.assertEqual(r["exit_code"], 1)
            self.assertEqual(r["exception"]["kind"], self.FAILED_TEST_KIND, r["exception"])

    def test_a_runtime_error_is_classified(self):
        if self.RUNTIME_ERROR is None:
            self.skipTest("no exceptions in this language")
        r = self.run_code(self.RUNTIME_ERROR)
        self.assertEqual(r["exit_code"], 1)
        self.assertEqual((r["exception"]["kind"], r["phase"]), ("runtime", "code"), r)

    def test_syntax_errors_in_the_code_and_in_the_test(self):
        r = self.run_code(self.SYNTAX_ERROR)
        self.assertEqual(r["exit_code"], 1, r)
        self.assertEqual((r["exception"]["kind"], r["phase"]), ("syntax", "code"), r)
        self.assertIsNone(r["test_finished"])
        self.assertIn(self.MAIN, r["stderr"])
        r = self.run_code(self.ADD, test=self.SYNTAX_ERROR)
        self.assertEqual(r["exit_code"], 1, r)
        self.assertEqual((r["exception"]["kind"], r["phase"], r["test_finished"]),
                         ("syntax", "test", False), r)

    def test_an_early_exit_0_does_not_finish_the_test(self):
        r = self.run_code(self.EARLY_EXIT_0, test=self.ADD_TEST_PASSES)
        self.assertEqual((r["exit_code"], r["exception"]), (0, None), r)
        self.assertIs(r["test_finished"], False)
        self.assertIn(r["phase"], ("code", None))
        # without a test it is just how the program ends
        r = self.run_code(self.EARLY_EXIT_0)
        self.assertEqual((r["exit_code"], r["test_finished"], r["phase"]), (0, None, None))

    def test_the_deadline_still_kills(self):
        t = time.monotonic()
        r = self.run_code(self.SPIN, timeout_ms=700, test=self.ADD_TEST_PASSES)
        # SPIN never ends: any bound shows the kill (timed_out and SIGKILL say by whom).
        self.assertLess(time.monotonic() - t, 30)
        self.assertTrue(r["timed_out"])
        self.assertEqual((r["exit_code"], r["signal"]), (None, 9))
        self.assertIs(r["test_finished"], False)
        self.assertGreaterEqual(r["duration_ms"], 700)
        r = self.run_code(self.EXIT3)  # the container goes on
        self.assertEqual(r["exit_code"], 3)

    def test_files_in_and_out(self):
        r = self.run_code(self.FILES, files={"in.txt": "ab", "out/keep": ""},
                          return_files=["out/x.txt", "nope"])
        self.assertEqual(r["exit_code"], 0, r["stderr"])
        self.assertEqual(r["files"], {"out/x.txt": "abab", "nope": None})
        self.assertIn("nope", r["file_errors"])

    def test_the_main_and_test_file_names_are_reserved(self):
        for name in (self.MAIN, self.TEST):
            self.c.send(self.c.request(self.EXIT3, files={name: "x"}))
            r = self.c.recv()
            self.assertEqual(r["type"], "error", r)
            self.assertIn(name, r["message"])
            self.assertEqual(self.c.recv()["type"], "ready")
        self.assertEqual(self.run_code(self.EXIT3)["exit_code"], 3)
