"""Tests for runner.py (benign programs only; the hostile suite is tests/tests/sandbox_*.rs).

Run from the repository root:
    python3 -m unittest discover -s sandbox-images/python -p 'test_*.py'

Pure functions are tested on the host. The protocol and the process model are tested in a
real hardened container of the sandbox image (sandbox-images/build) with THIS folder's
runner.py and harness.py mounted over the image's, so the tests follow the working tree.
Those tests are skipped when Docker or the image is missing.
"""

import json
import os
import shutil
import struct
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import runner  # noqa: E402

IMAGE = os.environ.get("CODEGEN_SANDBOX_IMAGE", "codegen-sandbox-python:latest")
HARDENING = [
    "--network", "none", "--read-only", "--init", "--ipc", "private", "--log-driver", "none",
    "--memory", "256m", "--memory-swap", "256m", "--pids-limit", "64", "--cpus", "1",
    "--cap-drop", "ALL", "--cap-add", "SETUID", "--cap-add", "SETGID", "--cap-add", "KILL",
    "--security-opt", "no-new-privileges", "--user", "0:0",
    "--tmpfs", "/work:rw,nosuid,nodev,noexec,size=64m,uid=10002,gid=10002,mode=0700",
    "--tmpfs", "/tmp:rw,nosuid,nodev,noexec,size=64m,uid=10002,gid=10002,mode=0700",
    "--ulimit", "nofile=256:256", "--ulimit", "core=0:0",
]


def docker_ready():
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "image", "inspect", IMAGE], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def frame(obj):
    body = json.dumps(obj).encode()
    return struct.pack(">I", len(body)) + body


class Container:
    """A hardened container running the working tree's runner, attached over stdin/stdout."""

    def __init__(self, extra=(), hardening=HARDENING):
        mounts = ["-v", "%s:/opt/codegen/runner.py:ro" % os.path.join(HERE, "runner.py")]
        harness = os.path.join(HERE, "harness.py")
        if os.path.exists(harness):
            mounts += ["-v", "%s:/opt/codegen/harness.py:ro" % harness]
        self.proc = subprocess.Popen(
            ["docker", "run", "-i", "--rm", *hardening, *mounts, *extra, IMAGE],
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

    def run(self, code, **fields):
        request = {"code": code, "stdin": None, "timeout_ms": 5000,
                   "max_output_bytes": 1 << 20, "output_limit_bytes": 100 << 20}
        request.update(fields)
        self.send(request)
        result = self.recv()
        ready = self.recv()
        assert ready and ready["type"] == "ready", ready
        return result

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=20)
        except Exception:
            self.proc.kill()
        for stream in (self.proc.stdout, self.proc.stderr):
            stream.close()


# ------------------------------------------------------------------------------- host


class PureFunctionTest(unittest.TestCase):
    def test_requests_are_validated(self):
        ok = runner.parse_request(json.dumps(
            {"code": "x", "timeout_ms": 5, "max_output_bytes": 10}).encode())
        self.assertEqual(ok["stdin"], "")
        self.assertEqual(ok["output_limit_bytes"], 100 << 20)
        for bad in (b"", b"not json", b"[]", b'{"code": 1}',
                    b'{"code": "x", "timeout_ms": "1", "max_output_bytes": 1}',
                    b'{"code": "x", "stdin": 5, "timeout_ms": 1, "max_output_bytes": 1}',
                    b'{"code": "x", "timeout_ms": 0, "max_output_bytes": 1}',
                    b'{"code": "x", "timeout_ms": true, "max_output_bytes": 1}',
                    b'{"code": "x", "timeout_ms": 1e99, "max_output_bytes": 1}',
                    b'{"code": "x", "timeout_ms": 1, "max_output_bytes": -1}',
                    b'{"code": "\\ud800", "timeout_ms": 1, "max_output_bytes": 1}',
                    b'{"code": "x", "timeout_ms": 1, "max_output_bytes": 1, "files": []}',
                    b'{"code": "x", "timeout_ms": 1, "max_output_bytes": 1, "files": {"../a": ""}}',
                    b'{"code": "x", "timeout_ms": 1, "max_output_bytes": 1, "return_files": ["/etc"]}',
                    b'{"code": "x", "timeout_ms": 1, "max_output_bytes": 1, "harness": 3}'):
            with self.subTest(payload=bad):
                with self.assertRaises(runner.RequestError):
                    runner.parse_request(bad)

    def test_paths_stay_below_the_work_directory(self):
        for good in ("a.txt", "pkg/mod.py", ".hidden"):
            runner.check_relpath(good)
        for bad in ("", "/a", "../a", "a/../b", "a//b", "./a", "a/", "main.py", "a\0b"):
            with self.subTest(path=bad), self.assertRaises(runner.RequestError):
                runner.check_relpath(bad)

    def test_exceptions_are_classified_along_the_mro(self):
        class Mine(AssertionError):
            pass

        self.assertEqual(runner.classify(SyntaxError), "syntax")
        self.assertEqual(runner.classify(IndentationError), "syntax")
        self.assertEqual(runner.classify(ModuleNotFoundError), "import")
        self.assertEqual(runner.classify(Mine), "assertion")
        self.assertEqual(runner.classify(KeyError), "runtime")

    def test_frames_reassemble_from_chunks(self):
        reader = runner.FrameReader(1 << 10)
        data = frame({"a": 1}) + frame({"b": 2})
        got = []
        for i in range(len(data)):
            reader.feed(data[i:i + 1])
            got += reader.frames()
        self.assertEqual(got, [{"a": 1}, {"b": 2}])
        reader.feed(struct.pack(">I", 1 << 20))
        self.assertEqual(reader.frames(), [])
        self.assertTrue(reader.overflow)

    def test_capture_keeps_the_head_and_counts_everything(self):
        c = runner.Capture(5)
        c.feed(b"abc")
        c.feed(b"defg")
        self.assertEqual((c.text(), c.truncated, c.total), ("abcde", True, 7))


# ------------------------------------------------------------------------------- container


@unittest.skipUnless(docker_ready(), "needs Docker and the sandbox image (sandbox-images/build)")
class RunnerInContainerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Container()
        ready = cls.c.recv()
        assert ready == {"type": "ready", "protocol": 2, "runs": 0}, ready

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def run_code(self, code, **fields):
        return self.c.run(code, **fields)

    def test_output_exit_codes_and_stdin(self):
        r = self.run_code("import sys\nprint(sys.stdin.read().upper())\n"
                          "print('err', file=sys.stderr)", stdin="h\u00e9llo")
        self.assertEqual((r["type"], r["exit_code"], r["signal"]), ("result", 0, None))
        self.assertEqual((r["stdout"], r["stderr"]), ("H\u00c9LLO\n", "err\n"))
        self.assertFalse(r["timed_out"] or r["oom_killed"] or r["output_limited"])
        self.assertEqual(self.run_code("import sys; sys.exit(3)")["exit_code"], 3)
        self.assertEqual(self.run_code("raise SystemExit('bye')")["stderr"], "bye\n")

    def test_exceptions_are_reported_without_runner_frames(self):
        r = self.run_code("def f():\n    return 1 / 0\nf()")
        self.assertEqual(r["exit_code"], 1)
        self.assertEqual(r["exception"]["type"], "ZeroDivisionError")
        self.assertEqual(r["exception"]["kind"], "runtime")
        self.assertTrue(r["stderr"].startswith("Traceback (most recent call last):\n"
                                               "  File \"/work/main.py\", line 3"), r["stderr"])
        self.assertNotIn("runner.py", r["stderr"])
        r = self.run_code("def (:")
        self.assertEqual(r["exception"]["kind"], "syntax")
        self.assertNotIn("runner.py", r["stderr"])

    def test_the_program_looks_like_a_fresh_python3(self):
        r = self.run_code(
            "import json, os, sys\n"
            "print(json.dumps([__name__, __file__, sys.argv, sys.path[0], os.getcwd(),\n"
            "      sorted(os.environ), os.getuid(), os.getgid(), os.getgroups(),\n"
            "      sorted(map(int, os.listdir('/proc/self/fd')))[:3], os.getsid(0) == os.getpid(),\n"
            "      open('/proc/self/oom_score_adj').read().strip()]))")
        self.assertEqual(json.loads(r["stdout"]), [
            "__main__", "/work/main.py", ["/work/main.py"], "/work", "/work",
            ["HOME", "LANG", "PATH", "PYTHONDONTWRITEBYTECODE"], 10002, 10002, [],
            [0, 1, 2], True, "1000"])

    def test_atexit_threads_and_flush_run_like_at_interpreter_exit(self):
        r = self.run_code(
            "import atexit, threading, time, sys\n"
            "atexit.register(lambda: print('atexit'))\n"
            "def late():\n    time.sleep(0.2)\n    print('thread')\n"
            "threading.Thread(target=late).start()\n"
            "sys.stdout.write('no newline')")
        self.assertEqual(r["stdout"], "no newlinethread\natexit\n")

    def test_random_differs_between_runs(self):
        a = self.run_code("import random; print(random.random())")["stdout"]
        b = self.run_code("import random; print(random.random())")["stdout"]
        self.assertNotEqual(a, b)

    def test_timeout_kills_the_whole_program(self):
        t = time.monotonic()
        r = self.run_code("import subprocess\nsubprocess.Popen(['sleep', '60'])\n"
                          "print('start', flush=True)\nwhile True: pass", timeout_ms=400)
        self.assertLess(time.monotonic() - t, 3)
        self.assertTrue(r["timed_out"])
        self.assertEqual(r["signal"], 9)
        self.assertEqual(r["stdout"], "start\n")
        self.assertGreaterEqual(r["duration_ms"], 400)
        self.assertEqual(self.run_code(
            "import os\nprint([p for p in os.listdir('/proc') if p.isdigit() and "
            "os.stat('/proc/'+p).st_uid == 10002 and int(p) != os.getpid()])")["stdout"],
            "[]\n")

    def test_output_past_the_capture_cap_is_discarded_and_past_the_hard_cap_killed(self):
        r = self.run_code("import sys\nsys.stdout.write('a' * (3 << 20))\nprint('done', file=sys.stderr)",
                          max_output_bytes=1000)
        self.assertEqual((r["exit_code"], len(r["stdout"]), r["stdout_truncated"]), (0, 1000, True))
        self.assertEqual(r["stderr"], "done\n")
        r = self.run_code("import sys\nwhile True: sys.stdout.write('b' * 65536)",
                          max_output_bytes=1000, output_limit_bytes=4 << 20)
        self.assertTrue(r["output_limited"])
        self.assertEqual(r["signal"], 9)

    def test_leftover_processes_are_killed_at_exit(self):
        r = self.run_code(
            "import subprocess\n"
            "a = subprocess.Popen(['sleep', '60'])\n"
            "b = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
            "print(a.pid, b.pid)")
        self.assertEqual(r["exit_code"], 0)
        left = self.run_code(
            "import os\nprint([p for p in os.listdir('/proc') if p.isdigit() and "
            "os.stat('/proc/'+p).st_uid == 10002 and int(p) != os.getpid()])")
        self.assertEqual(left["stdout"], "[]\n")

    def test_a_forked_child_finishing_first_does_not_end_the_run(self):
        r = self.run_code("import os, sys, time\nif os.fork() == 0:\n    sys.exit(0)\n"
                          "time.sleep(0.3)\nprint('parent done')")
        self.assertEqual((r["exit_code"], r["stdout"]), (0, "parent done\n"))
        self.assertGreaterEqual(r["duration_ms"], 300)

    def test_files_in_and_out(self):
        r = self.run_code("import helper\nopen('out/x.txt', 'w').write(helper.X * 2)",
                          files={"helper.py": "X = 'ab'", "out/keep": ""},
                          return_files=["out/x.txt", "nope"])
        self.assertEqual(r["exit_code"], 0, r["stderr"])
        self.assertEqual(r["files"], {"out/x.txt": "abab", "nope": None})
        self.assertIn("nope", r["file_errors"])

    def test_no_request_data_survives_into_the_next_run(self):
        # The first request carries the marker in its code; the second one carries only its
        # halves, and looks for the whole marker anywhere in its own memory.
        self.run_code("x = 'MARKER-7f3a9c' + '-left-behind'\nprint(x)")
        r = self.run_code(
            "a, b = 'MARKER-' + '7f3a9c', '-left-' + 'behind'\nhits = 0\n"
            "with open('/proc/self/maps') as maps, open('/proc/self/mem', 'rb', 0) as mem:\n"
            "    for line in maps:\n"
            "        addr, perms = line.split()[:2]\n"
            "        if not perms.startswith('r') or 'vvar' in line or 'vsyscall' in line:\n"
            "            continue\n"
            "        lo, hi = (int(v, 16) for v in addr.split('-'))\n"
            "        try:\n"
            "            mem.seek(lo)\n            chunk = mem.read(hi - lo)\n"
            "        except (OSError, ValueError, OverflowError):\n            continue\n"
            "        i = chunk.find(a.encode())\n"
            "        while i != -1:\n"
            "            hits += chunk[i + len(a):i + len(a) + len(b)] == b.encode()\n"
            "            i = chunk.find(a.encode(), i + 1)\n"
            "print(hits)")
        self.assertEqual(r["stdout"], "0\n", r["stderr"])

    def test_a_malformed_request_gets_an_error_and_the_runner_goes_on(self):
        self.c.send({"code": 5})
        self.assertEqual(self.c.recv()["type"], "error")
        self.assertEqual(self.c.recv()["type"], "ready")
        self.assertEqual(self.run_code("print(1)")["stdout"], "1\n")

    @unittest.skipUnless(os.path.exists(os.path.join(HERE, "harness.py")), "no harness.py")
    def test_harness_cases_and_program_test(self):
        r = self.run_code("def add(a, b):\n    return a + b\n", harness={
            "mode": "cases", "function": "add",
            "cases": [{"name": "ok", "inputs": [1, 2], "expected_output": 3},
                      {"name": "bad", "inputs": {"a": 1, "b": 1}, "expected_output": 3}]})
        self.assertEqual(r["exit_code"], 0, r["stderr"])
        h = r["harness"]
        self.assertEqual((h["passed"], h["tests_passed"], h["tests_total"]), (False, 1, 2))
        self.assertEqual(h["cases"][1]["error_kind"], "wrong_output")
        r = self.run_code("def f():\n    return 1\n", harness={
            "mode": "program_test", "test": "def check(c):\n    assert c() == 1\n",
            "entry_point": "f"})
        self.assertEqual(r["exit_code"], 0, r["stderr"])
        self.assertTrue(r["harness"]["passed"], r["harness"])


@unittest.skipUnless(docker_ready(), "needs Docker and the sandbox image (sandbox-images/build)")
class RunnerRefusesWeakHardeningTest(unittest.TestCase):
    def refused(self, hardening):
        c = Container(hardening=hardening)
        try:
            first = c.recv()
        finally:
            c.close()
        self.assertEqual(first["type"], "fatal", first)
        return first["message"]

    def test_default_capabilities_are_refused(self):
        weak = [a for a in HARDENING if a not in ("--cap-drop", "ALL")]
        self.assertIn("more capabilities", self.refused(weak))

    def test_without_no_new_privileges_it_refuses(self):
        weak = list(HARDENING)
        i = weak.index("--security-opt")
        del weak[i:i + 2]
        self.assertIn("no-new-privileges", self.refused(weak))


if __name__ == "__main__":
    unittest.main()
