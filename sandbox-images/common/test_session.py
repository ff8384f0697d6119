"""Tests for stateful sessions (session.py, codegen_session.py, session_kernel.js; protocol
"session/1", benign programs only).

Run from the repository root:
    python3 -m unittest discover -s sandbox-images/common -p 'test_*.py'

Pure functions are tested on the host. The protocol and the kernels are tested in real
hardened containers of the Python, bash and JavaScript sandbox images (sandbox-images/build),
started as the worker starts a session (`python3 -I /opt/codegen/session.py`) with the working
tree's files of /opt/codegen mounted over the image's (testlib.py). Those tests are skipped when
Docker or the image is missing; the matplotlib test also when python-sci has no matplotlib.
"""

import base64
import json
import os
import select
import struct
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import codegen_session as session  # noqa: E402
from testlib import (  # noqa: E402
    COMMON, HARDENING, docker_ready, frame, image, skip_without_image, working_tree_mounts,
)

# Bounds a failure only: every answer comes far sooner.
ANSWER_TIMEOUT_S = 120


# ------------------------------------------------------------------------------- host


class PureFunctionTest(unittest.TestCase):
    def parse(self, obj):
        return session.parse_request(obj if isinstance(obj, bytes) else json.dumps(obj).encode())

    def test_requests_are_validated(self):
        cell = {"type": "cell", "code": "x", "timeout_ms": 5, "max_output_bytes": 0}
        self.assertEqual(self.parse(cell), cell)
        self.assertEqual(self.parse({"type": "list_files", "extra": 1}), {"type": "list_files"})
        self.assertEqual(self.parse({"type": "get_file", "path": "a/b", "max_bytes": 1 << 40}),
                         {"type": "get_file", "path": "a/b", "max_bytes": session.MAX_GET_BYTES})
        self.assertEqual(self.parse({"type": "put_file", "path": "a", "base64": "AAE="})["base64"],
                         "AAE=")
        bad = [
            b"", b"not json", b"[]", b'{"type": 3}', {"type": "run"}, {"code": "x"},
            dict(cell, code=5), dict(cell, code="\ud800"), dict(cell, timeout_ms=0),
            dict(cell, timeout_ms=True), dict(cell, timeout_ms="5"), dict(cell, timeout_ms=1e3),
            dict(cell, max_output_bytes=-1), {k: v for k, v in cell.items() if k != "code"},
            {"type": "put_file", "path": "a", "base64": "%%"},
            {"type": "put_file", "path": "a", "base64": 5},
            {"type": "put_file", "path": "../a", "base64": ""},
            {"type": "get_file", "path": "a"}, {"type": "get_file", "path": "a", "max_bytes": -1},
        ]
        for obj in bad:
            with self.subTest(request=obj), self.assertRaises(session.RequestError):
                self.parse(obj)

    def test_paths_stay_below_the_work_directory(self):
        for good in ("a.txt", "d/e/f.bin", ".hidden", "a..b", "sp ace"):
            session.check_path(good)
        for bad in ("", "/etc/passwd", "../a", "a/../b", "a//b", "./a", "a/", "a/.", "a\0b",
                    "x" * 1025, None, 3, "\udcff"):
            with self.subTest(path=bad), self.assertRaises(session.RequestError):
                session.check_path(bad)

    def test_a_cell_stream_keeps_what_lies_between_its_markers(self):
        s = session.CellStream(1000, b"stdout")
        self.assertEqual((len(s.start), len(s.end)), (64, 64))
        self.assertNotEqual(s.start, session.CellStream(1000, b"stdout").start)
        data = b"before" + s.start + b"in the cell" + s.end + b"after"
        for i in range(len(data)):  # one byte at a time: markers split anywhere
            s.feed(data[i:i + 1])
        self.assertTrue(s.done)
        self.assertEqual((s.capture.text(), s.capture.truncated), ("in the cell", False))
        s = session.CellStream(3, b"stderr")
        s.feed(s.start + b"abcdef" + s.end[:10])
        self.assertFalse(s.done)
        s.feed(s.end[10:])
        self.assertEqual((s.capture.text(), s.capture.truncated, s.done), ("abc", True, True))

    def test_text_for_frames_is_clean_and_bounded(self):
        self.assertEqual(session.clean_text("a\ud800b", 10), "a?b")
        self.assertEqual(session.clean_text("h\u00e9llo", 2), "h")
        self.assertEqual(session.clean_text("abcdef", 3, tail=True), "def")
        self.assertEqual(session.clean_text(None, 3), "")


# ------------------------------------------------------------------------------- container


class Session:
    """A session's hardened container, attached over stdin/stdout as the worker attaches."""

    def __init__(self, language, extra=(), hardening=HARDENING, mounts=()):
        self.proc = subprocess.Popen(
            ["docker", "run", "-i", "--rm", *hardening, *working_tree_mounts(language),
             *mounts, *extra, image(language), "python3", "-I", "/opt/codegen/session.py"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)

    def read_exact(self, n, deadline):
        buf = b""
        fd = self.proc.stdout.fileno()
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise AssertionError("no answer from the session within %d s"
                                     % ANSWER_TIMEOUT_S)
            chunk = os.read(fd, n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    def recv(self):
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        header = self.read_exact(4, deadline)
        if header is None:
            return None
        body = self.read_exact(struct.unpack(">I", header)[0], deadline)
        return json.loads(body)

    def send(self, obj):
        self.proc.stdin.write(obj if isinstance(obj, bytes) else frame(obj))
        self.proc.stdin.flush()

    def ask(self, obj):
        self.send(obj)
        return self.recv()

    def cell(self, code, timeout_ms=60_000, max_output_bytes=1 << 20):
        return self.ask({"type": "cell", "code": code, "timeout_ms": timeout_ms,
                         "max_output_bytes": max_output_bytes})

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            code = self.proc.wait(timeout=120)  # only bounds a failure: S ends at EOF
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            stream.close()
        return code


class SessionCase(unittest.TestCase):
    """One session for the whole class (a test leaves the working directory at /work)."""

    LANGUAGE = None

    @classmethod
    def setUpClass(cls):
        cls.s = Session(cls.LANGUAGE)
        ready = cls.s.recv()
        assert ready == {"type": "ready", "protocol": "session/1",
                         "language": cls.LANGUAGE}, ready

    @classmethod
    def tearDownClass(cls):
        cls.s.close()

    def ok(self, code, **fields):
        r = self.s.cell(code, **fields)
        self.assertEqual(r["type"], "cell_result", r)
        self.assertEqual(r["status"], "ok", r)
        return r

    def result(self, code, **fields):
        r = self.s.cell(code, **fields)
        self.assertEqual(r["type"], "cell_result", r)
        return r

    def fatal_session(self, cells, timeout_ms=60_000):
        """A session of its own whose last cell must end it: the fatal answer."""
        s = Session(self.LANGUAGE)
        try:
            self.assertEqual(s.recv()["type"], "ready")
            for code in cells[:-1]:
                self.assertEqual(s.cell(code)["status"], "ok")
            t = time.monotonic()
            answer = s.cell(cells[-1], timeout_ms=timeout_ms)
            elapsed = time.monotonic() - t
            self.assertEqual(answer["type"], "fatal", answer)
            self.assertIsNone(s.recv())  # S exits after a fatal answer
            self.assertEqual(s.close(), 3)
        finally:
            s.close()
        return answer, elapsed


RESULT_KEYS = {"type", "status", "stdout", "stderr", "stdout_truncated", "stderr_truncated",
               "value", "error", "exit_code", "display", "files_changed", "duration_ms",
               "cpu_ms", "peak_memory_kb"}


@skip_without_image("python")
class PythonSessionTest(SessionCase):
    LANGUAGE = "python"

    def test_names_imports_open_files_and_the_working_directory_persist(self):
        r = self.ok("import json\nlimit = 41\nnotes = open('notes.txt', 'w')\n"
                    "import os\nos.makedirs('sub', exist_ok=True)\nos.chdir('sub')\n"
                    "def inc(v):\n    return v + 1\n")
        self.assertEqual(set(r), RESULT_KEYS)
        self.assertIsNone(r["value"])
        r = self.ok("notes.write('kept'); notes.close()\n"
                    "print(json.dumps([inc(limit), os.getcwd(), __name__]))")
        self.assertEqual(r["stdout"], '[42, "/work/sub", "__main__"]\n')
        r = self.ok("os.chdir('/work'); open('notes.txt').read()")
        self.assertEqual(r["value"], "'kept'")
        self.assertIsInstance(r["peak_memory_kb"], int)
        self.assertIsInstance(r["cpu_ms"], int)

    def test_the_final_expression_is_the_value(self):
        self.assertEqual(self.ok("1 + 2")["value"], "3")
        self.assertIsNone(self.ok("y = 5")["value"])
        self.assertIsNone(self.ok("None")["value"])
        self.assertIsNone(self.ok("print('p')")["value"])
        r = self.ok("print('a')\n'b' * 2")
        self.assertEqual((r["stdout"], r["value"]), ("a\n", "'bb'"))
        self.assertEqual(self.ok("if True:\n    z = 1\nz")["value"], "1")
        big = self.ok("'x' * 100000")["value"]
        self.assertEqual(len(big.encode()), session.MAX_VALUE_BYTES)
        r = self.ok("import asyncio\nawait asyncio.sleep(0.01)\n'awaited'")
        self.assertEqual(r["value"], "'awaited'")

    def test_an_error_has_its_traceback_and_the_session_goes_on(self):
        self.ok("def boom():\n    raise ValueError('bad')\n")
        r = self.result("x = 1\nboom()")
        self.assertEqual(r["status"], "error")
        e = r["error"]
        self.assertEqual((e["type"], e["message"]), ("ValueError", "bad"))
        self.assertTrue(e["traceback"].startswith("Traceback (most recent call last):\n"
                                                  '  File "<cell '), e["traceback"])
        self.assertIn("line 2, in boom\n    raise ValueError('bad')\n", e["traceback"])
        self.assertNotIn("codegen", e["traceback"])
        self.assertEqual(r["stderr"], "")
        r = self.ok("import inspect\nprint(inspect.getsource(boom), end='')\nx")
        self.assertEqual(r["stdout"], "def boom():\n    raise ValueError('bad')\n")
        self.assertEqual(r["value"], "1")
        r = self.result("def (:")
        self.assertEqual((r["status"], r["error"]["type"]), ("error", "SyntaxError"))
        self.assertIn("def (:", r["error"]["traceback"])
        r = self.result("raise SystemExit(3)")
        self.assertEqual((r["status"], r["error"]["type"], r["error"]["message"]),
                         ("error", "SystemExit", "3"))
        self.assertEqual(self.ok("'alive'")["value"], "'alive'")

    def test_a_cell_past_its_deadline_is_interrupted_and_the_session_lives(self):
        self.ok("kept = 'yes'")
        r = self.result("while True: pass", timeout_ms=500)
        self.assertEqual(r["status"], "timeout", r)
        self.assertEqual(r["error"]["type"], "KeyboardInterrupt")
        self.assertIn("while True: pass", r["error"]["traceback"])
        self.assertNotIn("codegen", r["error"]["traceback"])
        self.assertGreaterEqual(r["duration_ms"], 500)
        self.assertEqual(self.ok("kept")["value"], "'yes'")
        r = self.result("import subprocess\nprint('started', flush=True)\n"
                        "subprocess.run(['sleep', '60'])", timeout_ms=500)
        self.assertEqual((r["status"], r["stdout"]), ("timeout", "started\n"), r)
        r = self.result("import time\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n"
                        "    print('cleaned up')\n", timeout_ms=300)
        self.assertEqual((r["status"], r["stdout"], r["error"]), ("timeout", "cleaned up\n", None))
        self.assertEqual(self.ok("kept * 2")["value"], "'yesyes'")

    def test_output_is_captured_per_cell(self):
        r = self.ok("import sys, subprocess\nprint('A' * 200000, flush=True)\n"
                    "print('a-err', file=sys.stderr)\nsubprocess.run(['echo', 'child'])")
        self.assertEqual(r["stdout"], "A" * 200000 + "\n" + "child\n")
        self.assertEqual(r["stderr"], "a-err\n")
        r = self.ok("print('B')")
        self.assertEqual((r["stdout"], r["stderr"]), ("B\n", ""))
        # What a background thread (or process) writes between cells belongs to no cell,
        # buffered or not.
        self.ok("import threading, time, subprocess\n"
                "def late():\n    time.sleep(0.3)\n    print('late', end='')\n"
                "    sys.stderr.write('late-err')\n"
                "threading.Thread(target=late).start()\n"
                "subprocess.Popen(['sh', '-c', 'sleep 0.3; echo late-child'])\n"
                "print('C')")
        time.sleep(1.5)
        r = self.ok("print('D')")
        self.assertEqual((r["stdout"], r["stderr"]), ("D\n", ""))
        r = self.ok("print('x' * 100); print('y' * 100, file=sys.stderr)", max_output_bytes=10)
        self.assertEqual((r["stdout"], r["stdout_truncated"]), ("x" * 10, True))
        self.assertEqual((r["stderr"], r["stderr_truncated"]), ("y" * 10, True))
        r = self.ok("print('E')")
        self.assertEqual((r["stdout"], r["stdout_truncated"]), ("E\n", False))

    def test_files_round_trip_exactly_and_stay_below_work(self):
        blob = bytes(range(256)) * 4 + b"\r\n\0"
        b64 = base64.b64encode(blob).decode()
        self.assertEqual(self.s.ask({"type": "put_file", "path": "dir/sub/blob.bin",
                                     "base64": b64}), {"type": "ok"})
        got = self.s.ask({"type": "get_file", "path": "dir/sub/blob.bin", "max_bytes": 1 << 20})
        self.assertEqual((got["type"], got["path"], got["size"]),
                         ("file", "dir/sub/blob.bin", len(blob)))
        self.assertEqual(base64.b64decode(got["base64"]), blob)
        r = self.ok("import os\nst = os.stat('/work/dir/sub/blob.bin')\n"
                    "(open('/work/dir/sub/blob.bin', 'rb').read() == %r, st.st_uid, "
                    "oct(st.st_mode & 0o777))" % blob)
        self.assertEqual(r["value"], "(True, 10002, '0o644')")
        self.assertEqual(self.s.ask({"type": "put_file", "path": "empty", "base64": ""}),
                         {"type": "ok"})
        listing = self.s.ask({"type": "list_files"})
        self.assertEqual(listing["type"], "files")
        paths = [f["path"] for f in listing["files"]]
        self.assertEqual(paths, sorted(paths))
        entry = next(f for f in listing["files"] if f["path"] == "dir/sub/blob.bin")
        self.assertEqual(entry["size"], len(blob))
        self.assertLess(abs(entry["modified_ms"] / 1000 - time.time()), 3600)
        self.assertIn("empty", paths)
        self.ok("os.symlink('/etc/passwd', '/work/out-link')\n"
                "os.symlink('dir/sub/blob.bin', '/work/in-link')")
        got = self.s.ask({"type": "get_file", "path": "in-link", "max_bytes": 1 << 20})
        self.assertEqual(base64.b64decode(got["base64"]), blob)
        listed = [f["path"] for f in self.s.ask({"type": "list_files"})["files"]]
        self.assertNotIn("out-link", listed)
        refused = [
            {"type": "put_file", "path": "../x", "base64": ""},
            {"type": "put_file", "path": "/work/x", "base64": ""},
            {"type": "put_file", "path": "out-link", "base64": ""},
            {"type": "put_file", "path": "dir", "base64": ""},
            {"type": "get_file", "path": "../etc/passwd", "max_bytes": 100},
            {"type": "get_file", "path": "out-link", "max_bytes": 1 << 20},
            {"type": "get_file", "path": "missing", "max_bytes": 100},
            {"type": "get_file", "path": "dir", "max_bytes": 100},
            {"type": "get_file", "path": "dir/sub/blob.bin", "max_bytes": len(blob) - 1},
            {"type": "nonsense"},
            b"\x00\x00\x00\x08not json",
            {"type": "cell", "code": "1", "timeout_ms": "soon", "max_output_bytes": 1},
        ]
        for req in refused:
            with self.subTest(request=req):
                answer = self.s.ask(req)
                self.assertEqual(answer["type"], "error", answer)
                self.assertTrue(answer["message"])
        self.assertEqual(self.ok("'still here'")["value"], "'still here'")

    def test_files_changed_lists_what_a_cell_wrote(self):
        r = self.ok("import os\nopen('/work/made.txt', 'w').write('x')\n"
                    "os.makedirs('/work/deep/er', exist_ok=True)\n"
                    "open('/work/deep/er/f', 'w').close()")
        self.assertEqual(r["files_changed"], ["deep/er/f", "made.txt"])
        self.assertEqual(self.ok("open('/work/made.txt').read()")["files_changed"], [])
        r = self.ok("open('/work/made.txt', 'a').write('y'); os.unlink('/work/deep/er/f')")
        self.assertEqual(r["files_changed"], ["made.txt"])

    def test_display_and_rich_outputs(self):
        r = self.ok("display(1, 'two')")
        self.assertEqual(r["display"], [{"mime": "text/plain", "text": "1"},
                                        {"mime": "text/plain", "text": "'two'"}])
        r = self.ok("class Picture:\n    def _repr_png_(self):\n        return b'\\x89PNG-ish'\n"
                    "display(Picture())")
        self.assertEqual(r["display"], [{"mime": "image/png",
                                         "base64": base64.b64encode(b"\x89PNG-ish").decode()}])
        self.assertEqual(self.ok("1")["display"], [])

    def test_the_kernel_is_the_program_uid_without_privileges(self):
        r = self.ok(
            "import os, sys\n"
            "caps = [l.split()[1] for l in open('/proc/self/status') if l.startswith('Cap')]\n"
            "(os.getresuid(), os.getresgid(), os.getgroups(), os.getsid(0) == os.getpid(),\n"
            " open('/proc/self/oom_score_adj').read().strip(), sorted(os.environ),\n"
            " '/opt/codegen' in sys.path, sys.path[0], caps[:3])")
        self.assertEqual(r["value"], repr((
            (10002, 10002, 10002), (10002, 10002, 10002), [], True, "1000",
            ["HOME", "LANG", "MPLBACKEND", "MPLCONFIGDIR", "PATH", "PYTHONDONTWRITEBYTECODE"], False, "/work",
            ["0000000000000000"] * 3)))
        r = self.ok("import signal\nsignal.getsignal(signal.SIGTERM) is signal.SIG_DFL")
        self.assertEqual(r["value"], "True")

    def test_a_forked_child_does_not_answer_for_the_kernel(self):
        r = self.ok("import os\npid = os.fork()\nprint('parent' if pid else 'child', flush=True)\n"
                    "if pid:\n    os.waitpid(pid, 0)\n'done'")
        self.assertEqual(sorted(r["stdout"].split()), ["child", "parent"])
        self.assertEqual(r["value"], "'done'")
        self.assertEqual(self.ok("'next'")["value"], "'next'")


@skip_without_image("python")
class PythonSessionEndsTest(SessionCase):
    """Cells that end the session: each in a session of its own."""

    LANGUAGE = "python"

    @classmethod
    def setUpClass(cls):
        pass

    @classmethod
    def tearDownClass(cls):
        pass

    def test_a_cell_ignoring_the_interrupt_ends_the_session(self):
        answer, elapsed = self.fatal_session(
            ["import signal", "signal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass"],
            timeout_ms=500)
        self.assertEqual(answer, {"type": "fatal", "oom_killed": False, "message":
                                  "the cell ran past its deadline and did not stop at the "
                                  "interrupt; the session ended"})
        self.assertGreaterEqual(elapsed, 2.5)
        self.assertLess(elapsed, 60)

    def test_a_kernel_that_exits_ends_the_session(self):
        answer, _ = self.fatal_session(["import os\nos._exit(3)"])
        self.assertFalse(answer["oom_killed"])
        self.assertIn("exited with status 3", answer["message"])

    def test_the_memory_limit_ends_the_session(self):
        answer, _ = self.fatal_session(["hog = b'x' * (400 << 20)"])
        self.assertTrue(answer["oom_killed"], answer)
        self.assertIn("memory limit", answer["message"])

    def test_end_of_input_ends_the_session_cleanly(self):
        s = Session("python")
        self.assertEqual(s.recv()["type"], "ready")
        self.assertEqual(s.cell("import threading, time\n"
                                "threading.Thread(target=time.sleep, args=(600,)).start()")
                         ["status"], "ok")
        t = time.monotonic()
        self.assertEqual(s.close(), 0)
        self.assertLess(time.monotonic() - t, 60)

    def test_weak_hardening_is_refused(self):
        weak = [a for a in HARDENING if a not in ("--cap-drop", "ALL")]
        s = Session("python", hardening=weak)
        try:
            first = s.recv()
        finally:
            s.close()
        self.assertEqual(first["type"], "fatal", first)
        self.assertIn("more capabilities", first["message"])


@skip_without_image("go")
class NoSessionsTest(unittest.TestCase):
    def test_an_image_without_a_session_kernel_says_so(self):
        mounts = []
        for name in ("session.py", "codegen_session.py"):
            mounts += ["-v", "%s:/opt/codegen/%s:ro" % (os.path.join(COMMON, name), name)]
        s = Session("go", mounts=mounts)
        try:
            first = s.recv()
            self.assertIsNone(s.recv())
        finally:
            s.close()
        self.assertEqual(first, {"type": "fatal", "message": "sessions are not offered in go",
                                 "oom_killed": False})


@skip_without_image("bash")
class BashSessionTest(SessionCase):
    LANGUAGE = "bash"

    def test_variables_functions_and_the_working_directory_persist(self):
        r = self.ok("greeting='hi there'\nshout() { echo \"${1^^}\"; }\n"
                    "declare -a list=(1 2 3)\nmkdir -p /work/d && cd /work/d")
        self.assertEqual((r["exit_code"], r["value"], r["error"]), (0, None, None))
        r = self.ok("shout \"$greeting\"; echo \"${#list[@]} $PWD\"; echo warn >&2")
        self.assertEqual((r["stdout"], r["stderr"]), ("HI THERE\n3 /work/d\n", "warn\n"))
        self.ok("cd /work")

    def test_a_failing_last_command_is_an_error_with_its_exit_code(self):
        r = self.result("echo fine; (exit 3)")
        self.assertEqual((r["status"], r["exit_code"], r["stdout"]), ("error", 3, "fine\n"))
        self.assertEqual(r["error"]["type"], "ExitStatus")
        r = self.result("false; true")
        self.assertEqual((r["status"], r["exit_code"]), ("ok", 0))
        r = self.result("ls /nonexistent")
        self.assertEqual((r["status"], r["exit_code"]), ("error", 2))
        self.assertIn("nonexistent", r["stderr"])
        r = self.result("if then fi")
        self.assertEqual((r["status"], r["exit_code"]), ("error", 2))
        self.assertEqual(self.ok("echo ok")["stdout"], "ok\n")

    def test_a_cell_past_its_deadline_is_interrupted_and_the_shell_lives(self):
        self.ok("kept=yes")
        r = self.result("echo start; sleep 60; echo never", timeout_ms=500)
        self.assertEqual((r["status"], r["stdout"]), ("timeout", "start\n"), r)
        r = self.result("while :; do :; done", timeout_ms=500)
        self.assertEqual(r["status"], "timeout", r)
        self.assertEqual(self.ok("echo $kept")["stdout"], "yes\n")

    def test_stdin_is_empty_and_files_changed_are_listed(self):
        r = self.ok("read -r line; echo \"read=$? [$line]\"; echo x > /work/from-bash.txt")
        self.assertEqual(r["stdout"], "read=1 []\n")
        self.assertEqual(r["files_changed"], ["from-bash.txt"])
        got = self.s.ask({"type": "get_file", "path": "from-bash.txt", "max_bytes": 10})
        self.assertEqual(base64.b64decode(got["base64"]), b"x\n")

    def test_exit_ends_the_session(self):
        answer, _ = self.fatal_session(["echo before", "exit 4"])
        self.assertIn("the shell exited with status 4", answer["message"])
        self.assertFalse(answer["oom_killed"])


@skip_without_image("javascript")
class JavaScriptSessionTest(SessionCase):
    LANGUAGE = "javascript"

    def test_declarations_persist_across_cells(self):
        self.ok("let count = 1;\nconst base = 40;\nfunction add(a, b) { return a + b; }\n"
                "class Box { constructor(v) { this.v = v; } }")
        r = self.ok("count += 1;\nconsole.log('sum', add(base, count));\n"
                    "new Box(add(base, count))")
        self.assertEqual((r["stdout"], r["value"]), ("sum 42\n", "Box { v: 42 }"))
        self.assertEqual(self.ok("typeof require('fs').readFileSync")["value"], "'function'")
        self.assertIsNone(self.ok("let unset;")["value"])

    def test_a_promise_value_is_awaited(self):
        r = self.ok("new Promise((resolve) => setTimeout(() => resolve({answer: 42}), 50))")
        self.assertEqual(r["value"], "{ answer: 42 }")
        r = self.result("Promise.reject(new RangeError('nope'))")
        self.assertEqual((r["status"], r["error"]["type"], r["error"]["message"]),
                         ("error", "RangeError", "nope"))

    def test_an_error_gives_its_stack(self):
        self.ok("function deep() { throw new TypeError('boom'); }")
        r = self.result("deep()")
        self.assertEqual(r["status"], "error")
        e = r["error"]
        self.assertEqual((e["type"], e["message"]), ("TypeError", "boom"))
        self.assertIn("TypeError: boom\n    at deep (<cell ", e["traceback"])
        self.assertNotIn("session_kernel", e["traceback"])
        self.assertNotIn("node:vm", e["traceback"])
        r = self.result("let = ;")
        self.assertEqual(r["error"]["type"], "SyntaxError")
        self.assertEqual(self.ok("typeof deep")["value"], "'function'")

    def test_a_cell_past_its_deadline_is_interrupted_and_the_context_lives(self):
        self.ok("var survivor = 'here';")
        r = self.result("while (true) {}", timeout_ms=500)
        self.assertEqual(r["status"], "timeout", r)
        r = self.result("new Promise(() => {})", timeout_ms=500)
        self.assertEqual(r["status"], "timeout", r)
        self.assertEqual(self.ok("survivor")["value"], "'here'")

    def test_process_exit_ends_the_session(self):
        answer, _ = self.fatal_session(["1", "process.exit(5)"])
        self.assertIn("node exited with status 5", answer["message"])


class PythonSciMatplotlibTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not docker_ready("python-sci"):
            raise unittest.SkipTest("needs Docker and the python-sci sandbox image")
        probe = subprocess.run(["docker", "run", "--rm", "--network", "none",
                                image("python-sci"), "python3", "-c", "import matplotlib"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if probe.returncode != 0:
            raise unittest.SkipTest("the python-sci image has no matplotlib (rebuild it: "
                                    "sandbox-images/build python-sci)")

    def test_open_figures_become_png_outputs(self):
        s = Session("python-sci")
        try:
            self.assertEqual(s.recv()["type"], "ready")
            r = s.cell("import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n"
                       "ax.plot([1, 2, 3])\ndisplay(fig)")
            self.assertEqual(r["status"], "ok", r)
            pngs = [base64.b64decode(d["base64"]) for d in r["display"]
                    if d["mime"] == "image/png"]
            self.assertEqual(len(pngs), 2)  # display(fig), then the figure still open
            self.assertTrue(all(p.startswith(b"\x89PNG\r\n\x1a\n") for p in pngs))
            # matplotlib's caches are not the session's files.
            self.assertEqual(r["files_changed"], [], r)
            r = s.cell("plt.get_fignums()")
            self.assertEqual((r["value"], r["display"]), ("[]", []))
        finally:
            s.close()


if __name__ == "__main__":
    unittest.main()
