"""Tests for the runner (benign programs only; the hostile suite is tests/tests/e2e/sandbox_*.rs).

Run from the repository root:
    python3 -m unittest discover -s sandbox-images/common -p 'test_*.py'

Pure functions are tested on the host. The protocol and the process model are tested in a
real hardened container of the Python sandbox image (sandbox-images/build) with the working
tree's runner modules, harness.py and language.json mounted over the image's (testlib.py). Those
tests are skipped when Docker or the image is missing. What each language image does with
"test" is tested in the language folders (test_<language>.py).
"""

import base64
import json
import os
import shutil
import struct
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import codegen_exec  # noqa: E402
import codegen_guard  # noqa: E402
import codegen_in_process  # noqa: E402
import codegen_languages as languages  # noqa: E402
import codegen_protocol as protocol  # noqa: E402
from testlib import HARDENING, IMAGES, Container, frame, skip_without_image  # noqa: E402

# What the Python image's runner announces: its harness's modes (harness.IN_PROCESS_MODES).
HARNESS_MODES = ["cases", "program_test", "integrate", "many_cases"]


# ------------------------------------------------------------------------------- host


PYTHON = languages.Language(languages.DEFAULT_LANGUAGE)
JAVASCRIPT = languages.Language({"name": "javascript", "main": "main.js", "test": "test.js",
                                 "mode": "exec", "command": ["/usr/bin/node", "h.js"]})


def parse(raw, language=PYTHON):
    return protocol.parse_request(raw, language)


def check(path, language=PYTHON):
    return protocol.check_relpath(path, language)


class PureFunctionTest(unittest.TestCase):
    def test_requests_are_validated(self):
        ok = parse(json.dumps(
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
                    b'{"code": "x", "timeout_ms": 1, "max_output_bytes": 1, "harness": 3}',
                    b'{"code": "x", "timeout_ms": 1, "max_output_bytes": 1, "files": {"a": 3}}',
                    b'{"code": "x", "timeout_ms": 1, "max_output_bytes": 1, '
                    b'"files": {"a": {"base64": "%%"}}}',
                    b'{"code": "x", "timeout_ms": 1, "max_output_bytes": 1, '
                    b'"files": {"a": {"base64": "QQ==", "more": 1}}}',
                    b'{"code": "x", "timeout_ms": 1, "max_output_bytes": 1, "cpu_time_ms": 0}'):
            with self.subTest(payload=bad):
                with self.assertRaises(protocol.RequestError):
                    parse(bad)

    def test_a_test_is_optional_text_and_excludes_the_harness(self):
        base = {"code": "x", "timeout_ms": 5, "max_output_bytes": 10}
        self.assertIsNone(parse(json.dumps(base).encode())["test"])
        ok = parse(json.dumps(dict(base, test="assert x")).encode())
        self.assertEqual(ok["test"], "assert x")
        for bad in ({"test": 5}, {"test": "\ud800"},
                    {"test": "t", "harness": {"mode": "cases"}},
                    {"files": {"test.py": ""}}, {"return_files": ["main.py"]}):
            with self.subTest(bad=bad), self.assertRaises(protocol.RequestError):
                parse(json.dumps(dict(base, **bad)).encode())

    def test_exec_languages_reserve_their_own_names_and_have_no_harness(self):
        base = {"code": "x", "timeout_ms": 5, "max_output_bytes": 10}
        check("main.py", JAVASCRIPT)
        for name in ("main.js", "test.js"):
            with self.subTest(name=name), self.assertRaises(protocol.RequestError):
                check(name, JAVASCRIPT)
        with self.assertRaises(protocol.RequestError):
            parse(json.dumps(dict(base, harness={"mode": "cases"})).encode(), JAVASCRIPT)
        parse(json.dumps(dict(base, harness={"mode": "cases"})).encode())

    def test_language_config_is_validated(self):
        self.assertEqual(languages.load_language("/nonexistent/language.json"),
                         (languages.DEFAULT_LANGUAGE, []))
        shipped = {}
        for lang in ("python", "javascript", "bash"):
            path = os.path.join(IMAGES, lang, "language.json")
            with open(path) as f:
                shipped[lang] = json.load(f)
        self.assertEqual(shipped["python"], languages.DEFAULT_LANGUAGE)
        good = {"name": "sh", "main": "main.sh", "test": "test.sh", "mode": "exec",
                "command": ["/bin/sh", "/opt/codegen/harness.sh"]}
        bad = [
            "not json", "[]", dict(good, mode="fork"), dict(good, command=[]),
            dict(good, command=["sh"]), dict(good, command=["/nonexistent/x"]),
            dict(good, main="a/main.sh"), dict(good, test="main.sh"), dict(good, name=""),
        ]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "language.json")
            for cfg in [good, dict(shipped["bash"], command=["/bin/sh"])] + bad:
                with open(path, "w") as f:
                    f.write(cfg if isinstance(cfg, str) else json.dumps(cfg))
                loaded, problems = languages.load_language(path)
                with self.subTest(cfg=cfg):
                    if cfg is good or cfg not in bad:
                        self.assertEqual((loaded, problems), (cfg, []))
                    else:
                        self.assertIsNone(loaded)
                        self.assertTrue(problems)

    def test_harness_reports_are_read_defensively(self):
        parse = codegen_exec.parse_harness_report
        self.assertEqual(parse(b'noise\n{"test_finished": true}\n\n'), {"test_finished": True})
        self.assertEqual(parse(b'{"test_finished": true}\nnot json'), {})
        self.assertEqual(parse(b"[1]\n"), {})
        self.assertEqual(parse(b""), {})
        self.assertEqual(parse(b'{"m": "\xff"}')["m"], "\ufffd")
        self.assertIsNone(codegen_exec.harness_exception("boom"))
        self.assertEqual(codegen_exec.harness_exception({"type": 5, "kind": "odd", "message": "m" * 3000}),
                         {"type": "Error", "module": "", "message": "m" * 2000, "kind": "runtime"})

    def test_the_report_is_read_until_the_child_exits_even_if_a_grandchild_holds_it(self):
        def run(without_pidfd):
            r, w = os.pipe()
            os.set_inheritable(w, True)
            script = ('sleep 30 >/dev/null 2>&1 & printf \'noise\\n{"sleeper": %%d}\\n\' $! >&%d; exit 4'
                      % w)
            pid = os.posix_spawn("/bin/bash", ["bash", "-c", script], dict(os.environ))
            os.close(w)
            saved = getattr(os, "pidfd_open", None)
            if without_pidfd:
                def refuse(_pid):
                    raise OSError(1, "blocked")
                os.pidfd_open = refuse
            try:
                t = time.monotonic()
                data, status = codegen_exec.read_report(r, pid)
                elapsed = time.monotonic() - t
            finally:
                os.close(r)
                if without_pidfd and saved is not None:
                    os.pidfd_open = saved
            report = codegen_exec.parse_harness_report(data)
            os.kill(report["sleeper"], 9)
            # Far below the 30 s the sleeper holds the pipe, far above the read itself.
            self.assertLess(elapsed, 20)
            self.assertEqual((os.WIFEXITED(status), os.WEXITSTATUS(status)), (True, 4))

        run(without_pidfd=False)
        run(without_pidfd=True)

    def test_paths_stay_below_the_work_directory_or_the_data_directory(self):
        for good in ("a.txt", "pkg/mod.py", ".hidden", "/mnt/data/a.txt", "/mnt/data/d/b.csv"):
            check(good)
        for bad in ("", "/a", "../a", "a/../b", "a//b", "./a", "a/", "main.py", "a\0b",
                    "/mnt/data", "/mnt/data/", "/mnt/data/../x", "/mnt/data//x", "/mnt/datax/y",
                    "/mnt/other", "/etc/passwd", "/mnt/data/./x"):
            with self.subTest(path=bad), self.assertRaises(protocol.RequestError):
                check(bad)
        self.assertEqual(protocol.file_place("/mnt/data/d/b.csv"), ("/mnt/data", "d/b.csv"))
        self.assertEqual(protocol.file_place("d/b.csv"), ("/work", "d/b.csv"))

    def test_an_assertion_is_found_in_the_stderr_of_a_report_less_language(self):
        java = (r'^Exception in thread "main" java\.lang\.AssertionError'
                r'(?:: (?P<message>.*))?$')
        with_pattern = languages.Language(dict(JAVASCRIPT.config, assertion=java))
        found = with_pattern.stderr_assertion(
            'Exception in thread "main" java.lang.AssertionError: sum\n\tat Main.main\n')
        self.assertEqual((found["kind"], found["message"]), ("assertion", "sum"))
        self.assertIsNone(with_pattern.stderr_assertion(
            'Exception in thread "main" java.lang.RuntimeException: boom\n'))
        self.assertIsNone(JAVASCRIPT.stderr_assertion("anything: Assertion `x' failed."))

    def test_exceptions_are_classified_along_the_mro(self):
        class Mine(AssertionError):
            pass

        self.assertEqual(codegen_in_process.classify(SyntaxError), "syntax")
        self.assertEqual(codegen_in_process.classify(IndentationError), "syntax")
        self.assertEqual(codegen_in_process.classify(ModuleNotFoundError), "import")
        self.assertEqual(codegen_in_process.classify(Mine), "assertion")
        self.assertEqual(codegen_in_process.classify(KeyError), "runtime")

    def test_frames_reassemble_from_chunks(self):
        reader = protocol.FrameReader(1 << 10)
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
        c = codegen_guard.Capture(5)
        c.feed(b"abc")
        c.feed(b"defg")
        self.assertEqual((c.text(), c.truncated, c.total), ("abcde", True, 7))


# ------------------------------------------------------------------------------- container


@skip_without_image("python")
class RunnerInContainerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Container()
        ready = cls.c.recv()
        assert ready == {"type": "ready", "protocol": protocol.PROTOCOL, "runs": 0,
                         "harness": HARNESS_MODES}, ready

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
        self.assertNotIn("/opt/codegen/", r["stderr"])
        r = self.run_code("def (:")
        self.assertEqual(r["exception"]["kind"], "syntax")
        self.assertNotIn("/opt/codegen/", r["stderr"])

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

    def test_the_runners_modules_are_off_the_path_and_cannot_be_shadowed(self):
        # A program's own file named as a module of the runner's is not what the runner uses
        # (already imported), and the runner's folder is not where a program's imports look.
        r = self.run_code(
            "import sys, builtins\n"
            "print('/opt/codegen' in sys.path, __builtins__ is builtins)\n"
            "import codegen_guard\n"
            "print(codegen_guard.__file__)",
            files={"codegen_guard.py": "raise SystemExit('shadowed')\n"})
        self.assertEqual(r["stdout"], "False True\n/opt/codegen/codegen_guard.py\n", r)
        r = self.run_code("print('next run is clean')")
        self.assertEqual(r["stdout"], "next run is clean\n", r)

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
        # Never ends by itself, and its child sleeps 60 s: any bound below shows the kill.
        self.assertLess(time.monotonic() - t, 30)
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

    def test_files_at_absolute_paths_live_in_the_data_directory_and_go_with_the_run(self):
        r = self.run_code("import os\n"
                          "print(open('/mnt/data/in/a.txt').read())\n"
                          "open('/mnt/data/out.txt', 'w').write('written')\n"
                          "print(sorted(os.listdir('/work')))",
                          files={"/mnt/data/in/a.txt": "given", "local.txt": "here"},
                          return_files=["/mnt/data/out.txt", "/mnt/data/in/a.txt"])
        self.assertEqual(r["exit_code"], 0, r["stderr"])
        self.assertEqual(r["stdout"], "given\n['local.txt', 'main.py']\n")
        self.assertEqual(r["files"], {"/mnt/data/out.txt": "written",
                                      "/mnt/data/in/a.txt": "given"})
        # Scrubbed like /work: the next run of this container finds nothing there.
        r = self.run_code("import os\nprint(os.listdir('/mnt/data'))")
        self.assertEqual(r["stdout"], "[]\n", r["stderr"])
        # And nothing else of the filesystem became writable.
        r = self.run_code("open('/mnt/elsewhere', 'w')")
        self.assertEqual(r["exit_code"], 1)
        self.assertIn("Read-only file system", r["stderr"])

    def test_binary_files_in_and_out(self):
        blob = bytes(range(256))
        r = self.run_code("data = open('in.bin', 'rb').read()\n"
                          "open('out.bin', 'wb').write(data[::-1])\n"
                          "open('same.txt', 'wb').write('héllo'.encode())",
                          files={"in.bin": {"base64": base64.b64encode(blob).decode()}},
                          return_files=["out.bin", "same.txt"])
        self.assertEqual(r["exit_code"], 0, r["stderr"])
        self.assertEqual(base64.b64decode(r["files"]["out.bin"]["base64"]), blob[::-1])
        self.assertEqual(r["files"]["same.txt"], "héllo")

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

    def test_harness_cases_and_program_test(self):
        # Cases load the code as a module of their own, not as __main__: its demo stays off.
        demo = "\nif __name__ == '__main__':\n    raise SystemExit(3)\n"
        r = self.run_code("def add(a, b):\n    return a + b\n" + demo, harness={
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


@skip_without_image("python")
class PrepareOnRequestTest(unittest.TestCase):
    """After the result of a request that said "rest", the runner kills what is left of the
    program at once, but forks and prepares the next program process only when the worker
    says "prepare"."""

    def setUp(self):
        self.folder = tempfile.mkdtemp()
        cidfile = os.path.join(self.folder, "cid")
        self.c = Container(extra=("--cidfile", cidfile))
        self.addCleanup(shutil.rmtree, self.folder)
        self.addCleanup(self.c.close)
        self.assertEqual(self.c.recv()["type"], "ready")
        with open(cidfile) as f:
            self.pids_path = "/sys/fs/cgroup/pids/docker/%s/pids.current" % f.read().strip()
        if not os.path.exists(self.pids_path):
            self.skipTest("needs cgroup v1 with Docker's cgroupfs driver (%s)" % self.pids_path)

    def pids(self):
        with open(self.pids_path) as f:
            return int(f.read())

    def test_housekeeping_waits_for_prepare_and_leftovers_die_at_once(self):
        prepared = self.pids()  # init, the zygote, the supervisor and a prepared program
        self.c.send(self.c.request(
            "import subprocess\n"
            "subprocess.Popen(['sleep', '30'], start_new_session=True)\n"
            "print('left one behind')", rest=True))
        result = self.c.recv()
        self.assertEqual((result["type"], result["stdout"]), ("result", "left one behind\n"))
        # No program process yet, and the one left behind is gone (not the next request's).
        # The deadline only bounds a failure: the leftover sleeps 30 s.
        deadline = time.monotonic() + 20
        while self.pids() != prepared - 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(self.pids(), prepared - 1)
        time.sleep(0.3)
        self.assertEqual(self.pids(), prepared - 1, "the next program was forked unasked")
        self.c.send({"type": "prepare"})
        self.assertEqual(self.c.recv(), {"type": "ready", "protocol": protocol.PROTOCOL, "runs": 1,
                                          "harness": HARNESS_MODES})
        self.assertEqual(self.pids(), prepared)
        self.assertEqual(self.c.run("print(2)")["stdout"], "2\n")

    def test_without_rest_the_runner_prepares_at_once(self):
        prepared = self.pids()
        self.c.send(self.c.request("print(1)"))
        self.assertEqual(self.c.recv()["stdout"], "1\n")
        self.assertEqual(self.c.recv(), {"type": "ready", "protocol": protocol.PROTOCOL, "runs": 1,
                                          "harness": HARNESS_MODES})
        self.assertEqual(self.pids(), prepared)

    def test_rest_must_be_a_boolean(self):
        self.c.send(self.c.request("print(1)", rest="yes"))
        answer = self.c.recv()
        self.assertEqual(answer["type"], "error", answer)
        self.assertIn("'rest'", answer["message"])
        self.assertEqual(self.c.recv()["type"], "ready")

    def test_a_request_instead_of_prepare_ends_the_runner(self):
        self.c.send(self.c.request("print(1)", rest=True))
        self.assertEqual(self.c.recv()["type"], "result")
        self.c.send(self.c.request("print(2)"))
        fatal = self.c.recv()
        self.assertEqual(fatal["type"], "fatal", fatal)
        self.assertIn("expected prepare", fatal["message"])
        self.assertIsNone(self.c.recv())


@skip_without_image("python")
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
