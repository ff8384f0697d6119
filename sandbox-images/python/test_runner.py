"""Host-side tests for runner.py (benign programs only).

Run from this folder:  python3 -m unittest -v test_runner
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(HERE, "runner.py")
MARKER = "@@codegen-result@@ "


def run_raw(payload, timeout=10):
    """Run the runner with raw bytes on stdin; return (runner exit code, result dict)."""
    with tempfile.TemporaryDirectory(prefix="codegen-runner-test-") as workdir:
        p = subprocess.run(
            [sys.executable, "-I", "-S", RUNNER, "--workdir", workdir],
            input=payload,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=timeout,
        )
    out = p.stdout.decode("ascii")
    lines = out.splitlines(keepends=True)
    assert len(lines) == 1, "runner must print exactly one line, got %r" % out[:500]
    assert lines[0].startswith(MARKER) and lines[0].endswith("\n"), lines[0][:200]
    return p.returncode, json.loads(lines[0][len(MARKER):])


def run(code, stdin=None, timeout_ms=3000, max_output_bytes=1 << 20):
    req = {"code": code, "stdin": stdin, "timeout_ms": timeout_ms,
           "max_output_bytes": max_output_bytes}
    rc, res = run_raw(json.dumps(req).encode())
    assert rc == 0, res
    return res


class RunnerTest(unittest.TestCase):
    def test_print_exit_0(self):
        r = run("print('hello')\nimport sys; print('err', file=sys.stderr)")
        self.assertEqual(r["exit_code"], 0)
        self.assertIsNone(r["signal"])
        self.assertFalse(r["timed_out"])
        self.assertEqual(r["stdout"], "hello\n")
        self.assertEqual(r["stderr"], "err\n")
        self.assertFalse(r["stdout_truncated"])
        self.assertFalse(r["stderr_truncated"])
        self.assertIsInstance(r["duration_ms"], int)

    def test_exit_3(self):
        r = run("import sys; sys.exit(3)")
        self.assertEqual(r["exit_code"], 3)
        self.assertIsNone(r["signal"])
        self.assertFalse(r["timed_out"])

    def test_stdin_echo_and_env(self):
        code = ("import os, sys\n"
                "sys.stdout.write(sys.stdin.read())\n"
                "print(sorted(os.environ), file=sys.stderr)\n")
        r = run(code, stdin="abc\nd\u00e9f\n")
        self.assertEqual(r["stdout"], "abc\nd\u00e9f\n")
        self.assertEqual(r["exit_code"], 0)
        env = eval(r["stderr"])  # a list literal printed by the program
        self.assertEqual(set(env) - {"LC_CTYPE"},
                         {"PATH", "HOME", "LANG", "PYTHONDONTWRITEBYTECODE"})

    def test_program_is_preferred_oom_victim(self):
        r = run("print(open('/proc/self/oom_score_adj').read().strip())")
        self.assertEqual(r["stdout"], "1000\n")

    def test_null_stdin_is_empty(self):
        r = run("import sys; print(repr(sys.stdin.read()))")
        self.assertEqual(r["stdout"], "''\n")

    def test_program_ignoring_large_stdin(self):
        r = run("print('ok')", stdin="x" * (4 << 20))
        self.assertEqual(r["exit_code"], 0)
        self.assertEqual(r["stdout"], "ok\n")
        self.assertFalse(r["timed_out"])

    def test_output_over_cap_truncated_program_completes(self):
        code = ("import sys\n"
                "sys.stdout.write('a' * (5 << 20))\n"
                "sys.stdout.flush()\n"
                "print('done', file=sys.stderr)\n")
        r = run(code, max_output_bytes=1 << 20)
        self.assertEqual(r["exit_code"], 0)
        self.assertTrue(r["stdout_truncated"])
        self.assertEqual(len(r["stdout"]), 1 << 20)
        self.assertEqual(r["stderr"], "done\n")
        self.assertFalse(r["stderr_truncated"])

    def test_timeout(self):
        t = time.monotonic()
        r = run("print('start', flush=True)\nwhile True: pass", timeout_ms=300)
        self.assertLess(time.monotonic() - t, 2.0)
        self.assertTrue(r["timed_out"])
        self.assertIsNone(r["exit_code"])
        self.assertEqual(r["signal"], 9)
        self.assertEqual(r["stdout"], "start\n")
        self.assertGreaterEqual(r["duration_ms"], 300)
        self.assertLess(r["duration_ms"], 1000)

    def test_left_behind_child_is_killed(self):
        code = ("import subprocess\n"
                "p = subprocess.Popen(['sleep', '30'])\n"
                "print(p.pid)\n")
        t = time.monotonic()
        r = run(code)
        self.assertLess(time.monotonic() - t, 2.0)
        self.assertEqual(r["exit_code"], 0)
        pid = int(r["stdout"])
        with self.assertRaises(ProcessLookupError):
            os.kill(pid, 0)

    def test_setsid_escapee_is_killed(self):
        # start_new_session puts the grandchild outside the program's process
        # group; the runner's subreaper sweep must still get it.
        code = ("import subprocess\n"
                "p = subprocess.Popen(['sleep', '30'], start_new_session=True,\n"
                "                     stdout=subprocess.DEVNULL)\n"
                "print(p.pid)\n")
        r = run(code)
        pid = int(r["stdout"])
        with self.assertRaises(ProcessLookupError):
            os.kill(pid, 0)

    def test_malformed_requests(self):
        for payload in (b"", b"not json", b"[]", b'{"code": 1}',
                        b'{"code": "x", "stdin": null, "timeout_ms": "1", "max_output_bytes": 1}',
                        b'{"code": "x", "stdin": 5, "timeout_ms": 1, "max_output_bytes": 1}',
                        b'{"code": "x", "stdin": null, "timeout_ms": 0, "max_output_bytes": 1}',
                        b'{"code": "x", "stdin": null, "timeout_ms": true, "max_output_bytes": 1}',
                        b'{"code": "x", "stdin": null, "timeout_ms": 1e99, "max_output_bytes": 1}',
                        b'{"code": "x", "stdin": null, "timeout_ms": 100000000000, "max_output_bytes": 1}',
                        b'{"code": "x", "stdin": null, "timeout_ms": 1, "max_output_bytes": -1}',
                        b'{"code": "\\ud800", "stdin": null, "timeout_ms": 1, "max_output_bytes": 1}'):
            with self.subTest(payload=payload):
                rc, res = run_raw(payload)
                self.assertEqual(rc, 2)
                self.assertEqual(list(res), ["runner_error"])
                self.assertIsInstance(res["runner_error"], str)


if __name__ == "__main__":
    unittest.main()
