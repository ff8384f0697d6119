"""Tests for stateful sessions (session.py, codegen_session*.py, session_kernel.js; protocol
"session/3", benign programs only).

Run from the repository root:
    python3 -m unittest discover -s sandbox-images/common -p 'test_*.py'

Pure functions are tested on the host. The protocol and the kernels are tested in real
hardened containers of the Python, bash and JavaScript sandbox images (sandbox-images/build),
started as the worker starts a session (`python3 -I /opt/codegen/session.py`) with the working
tree's files of /opt/codegen mounted over the image's (testlib.py). Those tests are skipped when
Docker or the image is missing; the matplotlib test also when python-sci has no matplotlib.
Checkpoints are restored into a second, new container, as another worker would.
"""

import base64
import io
import json
import os
import re
import select
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import codegen_session as session  # noqa: E402
import codegen_session_files as sfiles  # noqa: E402
import codegen_session_limits as limits  # noqa: E402
from testlib import (  # noqa: E402
    COMMON, HARDENING, docker_ready, frame, image, skip_without_image, working_tree_mounts,
)

# Bounds a failure only: every answer comes far sooner.
ANSWER_TIMEOUT_S = 120


# ------------------------------------------------------------------------------- host


class PureFunctionTest(unittest.TestCase):
    def parse(self, obj):
        return limits.parse_request(obj if isinstance(obj, bytes) else json.dumps(obj).encode())

    def test_requests_are_validated(self):
        cell = {"type": "cell", "code": "x", "timeout_ms": 5, "max_output_bytes": 0}
        self.assertEqual(self.parse(cell), dict(cell, checkpoint=None))
        then = dict(cell, checkpoint={"max_bytes": 1 << 40, "full": False, "extra": 1})
        self.assertEqual(self.parse(then)["checkpoint"], {
            "type": "checkpoint", "full": False, "max_bytes": limits.MAX_CHECKPOINT_BYTES})
        self.assertEqual(self.parse({"type": "list_files", "extra": 1}), {"type": "list_files"})
        self.assertEqual(self.parse({"type": "get_file", "path": "a/b", "max_bytes": 1 << 40}),
                         {"type": "get_file", "path": "a/b", "max_bytes": limits.MAX_GET_BYTES})
        self.assertEqual(self.parse({"type": "put_file", "path": "a", "base64": "AAE="})["base64"],
                         "AAE=")
        bad = [
            b"", b"not json", b"[]", b'{"type": 3}', {"type": "run"}, {"code": "x"},
            dict(cell, code=5), dict(cell, code="\ud800"), dict(cell, timeout_ms=0),
            dict(cell, timeout_ms=True), dict(cell, timeout_ms="5"), dict(cell, timeout_ms=1e3),
            dict(cell, max_output_bytes=-1), {k: v for k, v in cell.items() if k != "code"},
            dict(cell, checkpoint=5), dict(cell, checkpoint={"max_bytes": 5}),
            dict(cell, checkpoint={"max_bytes": -1, "full": True}),
            {"type": "put_file", "path": "a", "base64": "%%"},
            {"type": "put_file", "path": "a", "base64": 5},
            {"type": "put_file", "path": "../a", "base64": ""},
            {"type": "get_file", "path": "a"}, {"type": "get_file", "path": "a", "max_bytes": -1},
        ]
        for obj in bad:
            with self.subTest(request=obj), self.assertRaises(limits.RequestError):
                self.parse(obj)

    def test_paths_stay_below_the_work_directory(self):
        for good in ("a.txt", "d/e/f.bin", ".hidden", "a..b", "sp ace"):
            limits.check_path(good)
        for bad in ("", "/etc/passwd", "../a", "a/../b", "a//b", "./a", "a/", "a/.", "a\0b",
                    "x" * 1025, None, 3, "\udcff"):
            with self.subTest(path=bad), self.assertRaises(limits.RequestError):
                limits.check_path(bad)

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
        self.assertEqual(limits.clean_text("a\ud800b", 10), "a?b")
        self.assertEqual(limits.clean_text("h\u00e9llo", 2), "h")
        self.assertEqual(limits.clean_text("abcdef", 3, tail=True), "def")
        self.assertEqual(limits.clean_text(None, 3), "")

    def test_checkpoint_and_restore_requests_are_validated(self):
        ck = {"type": "checkpoint", "max_bytes": 5, "full": False}
        self.assertEqual(self.parse(ck), ck)
        self.assertEqual(self.parse(dict(ck, max_bytes=1 << 40))["max_bytes"],
                         limits.MAX_CHECKPOINT_BYTES)
        rs = {"type": "restore", "state": "AAE=", "files": None, "cells": 3}
        self.assertEqual(self.parse(rs), rs)
        self.assertEqual(self.parse({k: v for k, v in rs.items() if k != "files"}), rs)
        bad = [
            dict(ck, full=None), dict(ck, full=1), dict(ck, max_bytes=-1),
            {"type": "checkpoint", "full": True}, dict(rs, state=None), dict(rs, state="%%"),
            dict(rs, files=3), dict(rs, files="A"), dict(rs, cells=-1), dict(rs, cells=True),
            {k: v for k, v in rs.items() if k != "cells"},
        ]
        for obj in bad:
            with self.subTest(request=obj), self.assertRaises(limits.RequestError):
                self.parse(obj)

    def test_a_skipped_list_from_the_kernel_is_checked_and_bounded(self):
        raw = [{"name": "a", "reason": "r"}, {"name": 3}, "x", {"name": "b\ud800"},
               {"name": "n" * 5000, "reason": "z" * 5000}]
        got = limits.skipped_list(raw)
        self.assertEqual(got[:2], [{"name": "a", "reason": "r"},
                                   {"name": "b?", "reason": "it is not restored"}])
        self.assertEqual((len(got[2]["name"]), len(got[2]["reason"])),
                         (limits.MAX_SKIPPED_NAME, limits.MAX_SKIPPED_REASON))
        self.assertEqual(limits.skipped_list(None), [])
        many = limits.skipped_list([{"name": str(i), "reason": "r"}
                                     for i in range(limits.MAX_SKIPPED + 5)])
        self.assertEqual(len(many), limits.MAX_SKIPPED + 1)
        self.assertIn("5 more names", many[-1]["reason"])

    def test_a_checkpoint_answer_is_one_frame_written_in_pieces(self):
        state = bytes(range(256)) * 5000  # several base64 pieces, a length not a multiple of 3
        for files in (None, b"", b"tar"):
            answer = session.CheckpointAnswer(bytearray(state), files,
                                              [{"name": "f", "reason": "why"}])
            with tempfile.TemporaryFile() as f:
                answer.write(f.fileno())
                f.seek(0)
                data = f.read()
            (n,) = struct.unpack(">I", data[:4])
            self.assertEqual(n, len(data) - 4)
            obj = json.loads(data[4:].decode("ascii"))
            self.assertEqual(base64.b64decode(obj["state"]), state)
            self.assertEqual(obj["files"], None if files is None else
                             base64.b64encode(files).decode())
            self.assertEqual((obj["type"], obj["state_bytes"], obj["files_bytes"],
                              obj["skipped"]),
                             ("checkpoint", len(state), len(files or b""),
                              [{"name": "f", "reason": "why"}]))
        too = limits.too_large(12, 10)
        self.assertEqual(too, {"type": "error", "too_large": True, "message":
                               "the checkpoint is 12 bytes, over its limit of 10 bytes "
                               "(worker.sessions.checkpoint_max_bytes)"})


def tar_of(*members):
    """base64 of a tar of (name, "file" | "dir" | "link", content or link target), written
    as given (absolute names and ".." kept)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
                continue
            info.type = tarfile.DIRTYPE if kind == "dir" else tarfile.SYMTYPE
            if kind == "link":
                info.linkname = payload
            tar.addfile(info)
    return base64.b64encode(buf.getvalue()).decode()


# Crafted tars whose members would land outside /work (each refuses the whole restore).
ESCAPING_TARS = [
    tar_of(("../x", "file", b"x")),
    tar_of(("/tmp/abs", "file", b"x")),
    tar_of(("ok", "file", b"fine"), ("t", "link", "/tmp"), ("t/evil", "file", b"x")),
    tar_of(("sub", "dir", None), ("in", "link", "sub"), ("in/evil", "file", b"x")),
    tar_of(("d", "dir", None), ("d/up", "link", "../../tmp")),
    tar_of(("d", "dir", None), ("d/../../tmp/evil", "file", b"x")),
]
# Where the escaping members would have landed.
OUTSIDE = ("/x", "/tmp/abs", "/tmp/evil", "/work/../x")


class WorkFilesTest(unittest.TestCase):
    """The files half of checkpoints on the host: the walk of /work, its tar, and the
    extraction that refuses what would leave /work (WORKDIR pointed at a temporary folder)."""

    def setUp(self):
        self.top = tempfile.mkdtemp(prefix="codegen-session-test-")
        self.addCleanup(shutil.rmtree, self.top, True)
        self.work = os.path.join(self.top, "work")
        os.mkdir(self.work)
        saved = sfiles.WORKDIR
        sfiles.WORKDIR = self.work
        self.addCleanup(setattr, sfiles, "WORKDIR", saved)

    def test_the_walk_and_its_tar_keep_files_folders_modes_and_inner_links(self):
        w = self.work
        os.makedirs(w + "/d/e")
        with open(w + "/d/run.sh", "wb") as f:
            f.write(b"#!/bin/sh\n")
        os.chmod(w + "/d/run.sh", 0o750)
        with open(w + "/empty", "wb"):
            pass
        os.chmod(w + "/d/e", 0o700)
        os.symlink("d/run.sh", w + "/in-link")
        os.symlink("/etc/passwd", w + "/out-link")
        os.symlink("d/../..", w + "/up-link")
        os.mkfifo(w + "/fifo")
        entries, skipped, digest = sfiles.walk_tree()
        self.assertEqual([e[0] for e in entries], ["d", "empty", "in-link", "d/e", "d/run.sh"])
        self.assertEqual(sorted(s["name"] for s in skipped),
                         [w + "/fifo", w + "/out-link", w + "/up-link"])
        pieces, size, unread = sfiles.build_tar(entries, 1 << 20)
        data = b"".join(pieces)
        self.assertEqual((len(data), unread), (size, []))
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            got = {m.name: (m.type, m.mode, m.linkname, m.uid, m.uname) for m in tar}
            self.assertEqual(tar.extractfile("d/run.sh").read(), b"#!/bin/sh\n")
        self.assertEqual(got["d/run.sh"], (tarfile.REGTYPE, 0o750, "", 0, ""))
        self.assertEqual(got["d/e"], (tarfile.DIRTYPE, 0o700, "", 0, ""))
        self.assertEqual(got["in-link"], (tarfile.SYMTYPE, 0o777, "d/run.sh", 0, ""))
        # The same tree, the same digest; a deletion changes it.
        self.assertEqual(sfiles.walk_tree()[2], digest)
        os.unlink(w + "/empty")
        self.assertNotEqual(sfiles.walk_tree()[2], digest)
        # Over its budget the tar is not kept, but its size is still exact.
        entries = sfiles.walk_tree()[0]
        self.assertEqual(sfiles.build_tar(entries, 100)[:2],
                         (None, len(b"".join(sfiles.build_tar(entries, 1 << 20)[0]))))

    def test_extraction_restores_bytes_and_modes_and_refuses_what_leaves_work(self):
        for files in ESCAPING_TARS:
            with self.subTest(files=files[:40]), self.assertRaises(sfiles.RestoreRefused):
                sfiles.extract_files(base64.b64decode(files))
            self.assertEqual(os.listdir(self.work), [])
            self.assertEqual(os.listdir(self.top), ["work"])
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name, kind, mode, payload in (
                    ("ro", "dir", 0o555, None), ("ro/x.bin", "file", 0o640, bytes(range(256))),
                    ("b", "link", 0o777, "."), ("a", "link", 0o777, "b/.."),
                    ("ro/in", "link", 0o777, "x.bin")):
                info = tarfile.TarInfo(name)
                info.mode = mode
                if kind == "file":
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))
                else:
                    info.type = tarfile.DIRTYPE if kind == "dir" else tarfile.SYMTYPE
                    info.linkname = payload or ""
                    tar.addfile(info)
        skipped = sfiles.extract_files(buf.getvalue())
        self.assertEqual([s["name"] for s in skipped], [self.work + "/a"])
        self.assertFalse(os.path.lexists(self.work + "/a"))
        with open(self.work + "/ro/in", "rb") as f:
            self.assertEqual(f.read(), bytes(range(256)))
        self.assertEqual(oct(os.stat(self.work + "/ro/x.bin").st_mode & 0o7777), "0o640")
        self.assertEqual(oct(os.stat(self.work + "/ro").st_mode & 0o7777), "0o555")
        os.chmod(self.work + "/ro", 0o755)


# ------------------------------------------------------------------------------- container


class Session:
    """A session's hardened container, attached over stdin/stdout as the worker attaches."""

    def __init__(self, language, extra=(), hardening=HARDENING, mounts=()):
        self.proc = subprocess.Popen(
            ["docker", "run", "-i", "--rm", *hardening, *working_tree_mounts(language),
             *mounts, *extra, image(language), "python3", "-I", "/opt/codegen/session.py"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)

    def read_exact(self, n, deadline):
        buf = bytearray()  # not bytes: a checkpoint's answer is tens of MiB
        fd = self.proc.stdout.fileno()
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise AssertionError("no answer from the session within %d s"
                                     % ANSWER_TIMEOUT_S)
            chunk = os.read(fd, min(n - len(buf), 1 << 20))
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

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
        assert ready == {"type": "ready", "protocol": limits.PROTOCOL,
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
        self.assertEqual(len(big.encode()), limits.MAX_VALUE_BYTES)
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
        for name in ["session.py"] + sorted(n for n in os.listdir(COMMON)
                                            if re.match(r"codegen_session\w*\.py$", n)):
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


# ------------------------------------------------------------------------------- checkpoints


def open_session(language):
    s = Session(language)
    ready = s.recv()
    assert ready is not None and ready["type"] == "ready", ready
    return s


class CheckpointContract:
    """Checkpoints and restores, in every session language. A test class sets LANGUAGE and:

      SET_X, SET_X_AGAIN, SET_X_THIRD   cells that give the variable x a new value
      DELETE_A                          a cell that deletes /work/a.txt and changes no state
      PROBE_OUTSIDE                     a cell that prints, for each path of OUTSIDE,
                                        True or False (whether it exists), space-separated
    """

    def session(self):
        s = open_session(self.LANGUAGE)
        self.addCleanup(s.close)
        return s

    def ok(self, s, code):
        r = s.cell(code)
        self.assertEqual((r["type"], r["status"]), ("cell_result", "ok"), r)
        return r

    def checkpoint(self, s, max_bytes=64 << 20, full=False):
        a = s.ask({"type": "checkpoint", "max_bytes": max_bytes, "full": full})
        if a["type"] == "checkpoint":
            self.assertEqual(set(a), {"type", "state", "files", "state_bytes", "files_bytes",
                                      "skipped"})
            for part in ("state", "files"):
                self.assertEqual(a[part + "_bytes"],
                                 0 if a[part] is None else len(base64.b64decode(a[part])))
        return a

    def test_a_cell_asking_for_its_checkpoint_is_answered_with_both(self):
        s = self.session()
        self.ok(s, self.SET_X)
        s.send({"type": "cell", "code": self.SET_X_AGAIN, "timeout_ms": 60_000,
                "max_output_bytes": 1 << 20,
                "checkpoint": {"max_bytes": 64 << 20, "full": False}})
        r = s.recv()
        self.assertEqual((r["type"], r["status"]), ("cell_result", "ok"), r)
        first = s.recv()
        self.assertEqual(first["type"], "checkpoint", first)
        self.assertIsNotNone(first["state"])  # a session's first checkpoint is whole
        # It was answered, so it is what the next one compares with: nothing changed since.
        same = self.checkpoint(s)
        self.assertEqual((same["state"], same["files"]), (None, None), same)
        # Over its limit: the cell's result stands, then the refusal.
        s.send({"type": "cell", "code": self.SET_X_THIRD, "timeout_ms": 60_000,
                "max_output_bytes": 1 << 20, "checkpoint": {"max_bytes": 10, "full": False}})
        self.assertEqual(s.recv()["type"], "cell_result")
        over = s.recv()
        self.assertEqual((over["type"], over.get("too_large")), ("error", True), over)
        # The session goes on, one answer per request again.
        self.assertEqual(s.cell(self.SET_X)["type"], "cell_result")

    def restore(self, s, state, files, cells=0):
        return s.ask({"type": "restore", "state": state, "files": files, "cells": cells})

    def tar_names(self, files):
        with tarfile.open(fileobj=io.BytesIO(base64.b64decode(files))) as tar:
            return {m.name: tar.extractfile(m).read() if m.isreg() else None for m in tar}

    def test_unchanged_parts_are_null_and_changes_are_sent(self):
        s = self.session()
        self.ok(s, self.SET_X)
        self.assertEqual(s.ask({"type": "put_file", "path": "a.txt", "base64":
                                base64.b64encode(b"alpha").decode()}), {"type": "ok"})
        first = self.checkpoint(s)
        self.assertEqual(first["type"], "checkpoint", first)
        self.assertIsNotNone(first["state"])
        self.assertEqual(self.tar_names(first["files"]), {"a.txt": b"alpha"})
        same = self.checkpoint(s)
        self.assertEqual((same["state"], same["files"], same["state_bytes"],
                          same["files_bytes"]), (None, None, 0, 0), same)
        self.ok(s, self.SET_X_AGAIN)
        changed = self.checkpoint(s)
        self.assertIsNotNone(changed["state"])
        self.assertNotEqual(changed["state"], first["state"])
        self.assertIsNone(changed["files"])
        self.ok(s, self.DELETE_A)  # a deletion is a change of the files
        deleted = self.checkpoint(s)
        self.assertIsNone(deleted["state"], deleted)
        self.assertEqual(self.tar_names(deleted["files"]), {})
        full = self.checkpoint(s, full=True)
        self.assertEqual((full["state"], full["files"]), (changed["state"], deleted["files"]))
        # Over its limit: an error, and the next checkpoint still compares with `full`.
        self.ok(s, self.SET_X_THIRD)
        over = self.checkpoint(s, max_bytes=10)
        self.assertEqual((over["type"], over.get("too_large")), ("error", True), over)
        self.assertRegex(over["message"], r"^the checkpoint is \d+ bytes, over its limit of 10 "
                         r"bytes \(worker\.sessions\.checkpoint_max_bytes\)$")
        n = int(over["message"].split()[3])
        after = self.checkpoint(s)
        self.assertIsNotNone(after["state"])
        self.assertIsNone(after["files"])
        self.assertEqual(after["state_bytes"], n)  # what was too large is exactly this
        self.assertEqual(self.checkpoint(s, max_bytes=0)["state"], None)  # nothing to send

    def test_tar_members_leaving_work_are_refused(self):
        empty = self.checkpoint(self.session())
        state = empty["state"]
        s = self.session()
        other = "python" if self.LANGUAGE != "python" else "bash"
        for bad_state in ("", base64.b64encode(b"not a checkpoint").decode(),
                          base64.b64encode(b"codegen-session-state %s 1\n{}\n"
                                           % other.encode()).decode(),
                          base64.b64encode(base64.b64decode(state)[:60]).decode()):
            a = self.restore(s, bad_state, None)
            self.assertEqual(a["type"], "error", a)
            self.assertIn("state", a["message"])
        for files in ESCAPING_TARS:
            a = self.restore(s, state, files)
            self.assertEqual(a["type"], "error", a)
            self.assertIn("refused", a["message"])
        # Each link is checked by its text, then where it leads once all are in place.
        a = self.restore(s, state, tar_of(("keep.txt", "file", b"kept"), ("b", "link", "."),
                                          ("a", "link", "b/..")), cells=2)
        self.assertEqual(a["type"], "restored", a)
        self.assertEqual([x["name"] for x in a["skipped"]], ["/work/a"])
        r = self.ok(s, self.PROBE_OUTSIDE)
        self.assertEqual(r["stdout"].split(), ["False"] * len(OUTSIDE))
        self.assertEqual([f["path"] for f in s.ask({"type": "list_files"})["files"]],
                         ["keep.txt"])

    def test_a_restore_must_be_the_first_request(self):
        state = self.checkpoint(self.session())["state"]
        s = self.session()
        self.ok(s, self.SET_X)
        a = self.restore(s, state, None)
        self.assertEqual(a["type"], "error", a)
        self.assertIn("first request", a["message"])
        s = self.session()
        self.assertEqual(self.restore(s, state, None, cells=5)["type"], "restored")
        a = self.restore(s, state, None)
        self.assertEqual(a["type"], "error", a)
        self.assertIn("first request", a["message"])


@skip_without_image("python")
class PythonCheckpointTest(CheckpointContract, unittest.TestCase):
    LANGUAGE = "python"
    SET_X = "x = 1"
    SET_X_AGAIN = "x = 2"
    SET_X_THIRD = "x = 3"
    DELETE_A = "__import__('os').remove('/work/a.txt')"
    PROBE_OUTSIDE = "import os\nprint(*[os.path.lexists(p) for p in %r])" % (OUTSIDE,)

    def test_a_restored_session_has_everything_back(self):
        s = self.session()
        self.ok(s, "import json, os\nimport collections as co\nlimit = 41\nshared = [1, 2]\n"
                   "alias = shared\nos.makedirs('/work/sub/deep')\n"
                   "with open('/work/sub/run.sh', 'w') as f:\n    f.write('#!/bin/sh\\n')\n"
                   "os.chmod('/work/sub/run.sh', 0o750)\n"
                   "os.symlink('sub/run.sh', '/work/in-link')\n"
                   "os.symlink('/etc/passwd', '/work/out-link')\n"
                   "with open('/work/blob.bin', 'wb') as f:\n    f.write(bytes(range(256)) * 3)\n"
                   "SCALE = 3")
        self.ok(s, "def boom():\n    raise ValueError('bad')\n\n\nclass Point:\n"
                   "    def __init__(self, x):\n        self.x = x\n\n    def norm(self):\n"
                   "        return abs(self.x)\n\n\nimport functools\n\n\n@functools.lru_cache\n"
                   "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\n\n"
                   "def scaled(v, s=SCALE):\n    return v * s\n\n\n"
                   "from dataclasses import dataclass\n\n\n@dataclass\nclass Pair:\n    a: int\n"
                   "    b: int = 0\n\n\np = Point(-3)\npair = Pair(1)\n"
                   "reg = {'boom': boom, 'mod': co}\nsquare = lambda v: v * v")
        self.ok(s, "notes = open('/work/notes.txt', 'w')\ngen = (i for i in range(3))\n"
                   "import threading, time\n"
                   "worker = threading.Thread(target=time.sleep, args=(60,), daemon=True)\n"
                   "worker.start()\nos.chdir('/work/sub')")
        ck = self.checkpoint(s)
        self.assertEqual(ck["type"], "checkpoint", ck)
        self.assertEqual({x["name"]: x["reason"] for x in ck["skipped"]}, {
            "notes": "an open file (io.TextIOWrapper) cannot be checkpointed",
            "gen": "a generator cannot be checkpointed (its running frame cannot be saved)",
            "f": "a closed file object (io.BufferedWriter) cannot be checkpointed",
            "worker": "a running thread is not restored",
            "/work/out-link": "a symbolic link leading out of /work (to /etc/passwd) is not "
                              "checkpointed"})
        t = self.session()
        self.assertEqual(self.restore(t, ck["state"], ck["files"], cells=3),
                         {"type": "restored", "skipped": []})
        # The counter goes on, and the restored function's frame shows its cell's source.
        r = t.cell("boom()")
        self.assertEqual(r["status"], "error", r)
        self.assertIn('File "<cell 4>", line 1, in <module>\n    boom()\n', r["error"]["traceback"])
        self.assertIn('File "<cell 2>", line 2, in boom\n    raise ValueError(\'bad\')\n',
                      r["error"]["traceback"])
        r = self.ok(t, "(limit, shared is alias, reg['boom'] is boom, reg['mod'] is co, p.norm(),"
                       " type(p) is Point, fib(30), hasattr(fib, 'cache_info'), scaled(2),"
                       " pair == Pair(1, 0), square(5), os.getcwd(), json.dumps([1]),"
                       " [n for n in ('notes', 'gen', 'worker') if n in dir()])")
        self.assertEqual(r["value"], repr((41, True, True, True, 3, True, 832040, True, 6, True,
                                           25, "/work/sub", "[1]", [])))
        r = self.ok(t, "import inspect\nprint(inspect.getsource(Point.norm), end='')")
        self.assertEqual(r["stdout"], "    def norm(self):\n        return abs(self.x)\n")
        r = self.ok(t, "st = os.stat('/work/sub/run.sh')\n(oct(st.st_mode & 0o777), st.st_uid,"
                       " os.readlink('/work/in-link'), os.path.lexists('/work/out-link'),"
                       " open('/work/blob.bin', 'rb').read() == bytes(range(256)) * 3,"
                       " open('/work/notes.txt').read(), os.path.isdir('/work/sub/deep'))")
        self.assertEqual(r["value"], repr(("0o750", 10002, "sub/run.sh", False, True, "", True)))
        # A restored session checkpoints again (another worker lost): a third container.
        u = self.session()
        ck = self.checkpoint(t)
        self.assertEqual(self.restore(u, ck["state"], ck["files"], cells=9)["type"], "restored")
        r = u.cell("(p.norm(), fib(10), os.getcwd(), st.st_mode & 0o777)\nboom()")
        self.assertIn('File "<cell 2>", line 2, in boom\n', r["error"]["traceback"])
        self.assertEqual(self.ok(u, "(p.norm(), fib(10), os.getcwd(), st.st_mode & 0o777)")
                         ["value"], "(3, 55, '/work/sub', 488)")
        # A class no name holds any more comes back with its instance (by value); what
        # fails at the restore is said then.
        u = self.session()
        self.ok(u, "class Gone:\n    pass\n\n\nkept = [Gone(), 1]\ndel Gone\n"
                   "with open('/work/mymod.py', 'w') as f:\n    f.write('X = 1\\n')\n"
                   "import mymod, os\nos.remove('/work/mymod.py')\nlast = 1\ndel f")
        ck = self.checkpoint(u)
        self.assertEqual(ck["skipped"], [])
        v = self.session()
        self.assertEqual(self.restore(v, ck["state"], ck["files"]), {"type": "restored",
                         "skipped": [{"name": "mymod", "reason": "the module mymod no longer "
                                      "imports: ModuleNotFoundError: No module named 'mymod'"}]})
        self.assertEqual(self.ok(v, "(last, 'mymod' in dir(), type(kept[0]).__name__)")["value"],
                         "(1, False, 'Gone')")

    # Each edge case: a cell sets it up, `probe` reads it back; after the restore the probe
    # gives the same value, or the name is in the checkpoint's skipped with this reason.
    EDGES = [
        ("closure", "def make(k):\n    def inner(v):\n        return v + k\n    return inner\n"
                    "closure = make(10)", "closure(1)", None),
        ("lambda", "table = {'sq': lambda v: v * v, 'k': 3}", "table['sq'](table['k'])", None),
        ("class attribute", "class A:\n    pass\n\n\nA.x = 1\nA.hook = staticmethod(len)",
         "(A.x, A.hook('ab'), A().x)", None),
        ("function attribute", "def f():\n    return f.tag\n\n\nf.tag = 'tagged'",
         "(f(), f.tag)", None),
        ("decorated", "def deco(fn):\n    def wrapper(*a):\n        return ('wrapped', fn(*a))\n"
                      "    return wrapper\n\n\n@deco\ndef dec(v):\n    return v\n",
         "dec(2)", None),
        ("class made in a function", "def factory(base):\n    class Local:\n        b = base\n"
                                     "    return Local\n\n\nLocal = factory(5)\nobj = Local()",
         "(obj.b, isinstance(obj, Local), Local.__qualname__)", None),
        ("counter closure", "def counter():\n    n = 0\n    def step():\n        nonlocal n\n"
                            "        n += 1\n        return n\n    return step\n\n\n"
                            "step = counter()\nstep(); step()", "step()", None),
        ("rebound class", "class B:\n    v = 1\n\n\nold = B()\n\n\nclass B:\n    v = 2",
         "(old.v, B.v, type(old) is B)", None),
        ("generator", "gen = (i for i in range(3))", None,
         "a generator cannot be checkpointed (its running frame cannot be saved)"),
        ("open file", "handle = open('/work/kept.txt', 'w')\nhandle.write('x')", None,
         "an open file (io.TextIOWrapper) cannot be checkpointed"),
        ("value holding an open file", "holder = {'f': open('/work/kept2.txt', 'w')}", None,
         "it holds what cannot be checkpointed (builtins.dict): an open file "
         "(io.TextIOWrapper) cannot be checkpointed"),
        ("socket", "import socket\nsock = socket.socket()", None,
         "an open socket (socket.socket) cannot be checkpointed"),
        ("thread", "import threading\nthread = threading.Thread(target=lambda: None)", None,
         "a thread (threading.Thread) cannot be checkpointed"),
    ]

    def test_a_namespace_stays_the_sessions_own_with_or_without_cell_code(self):
        # Without a function or class of the cells the C pickler takes the state (fast);
        # with one, dill: globals() stays __main__'s own either way, shared stays shared.
        for extra in ("", "\ndef g2():\n    return 1"):
            with self.subTest(extra=extra):
                s = self.session()
                self.ok(s, "g = globals()\nshared = [1]\nalias = {'s': shared}" + extra)
                ck = self.checkpoint(s)
                self.assertEqual(ck["skipped"], [])
                t = self.session()
                self.assertEqual(self.restore(t, ck["state"], ck["files"], cells=1)["type"],
                                 "restored")
                self.assertEqual(self.ok(t, "(g is globals(), alias['s'] is shared)")["value"],
                                 "(True, True)")

    def test_each_edge_case_comes_back_or_is_named(self):
        s = self.session()
        for _, setup, _, _ in self.EDGES:
            self.ok(s, setup)
        ck = self.checkpoint(s)
        # After the checkpoint: a probe may change what it reads (the counter steps).
        before = {what: self.ok(s, probe)["value"] for what, _, probe, _ in self.EDGES if probe}
        named = {x["name"]: x["reason"] for x in ck["skipped"]}
        self.assertEqual(named, {
            "gen": self.EDGES[8][3], "handle": self.EDGES[9][3], "holder": self.EDGES[10][3],
            "sock": self.EDGES[11][3], "thread": self.EDGES[12][3]})
        t = self.session()
        self.assertEqual(self.restore(t, ck["state"], ck["files"], cells=len(self.EDGES)),
                         {"type": "restored", "skipped": []})
        for what, _, probe, _ in self.EDGES:
            if probe:
                with self.subTest(what):
                    self.assertEqual(self.ok(t, probe)["value"], before[what])
        # The values the probes saw, so that a probe that gives the same wrong answer
        # before and after cannot pass.
        self.assertEqual([before[w] for w, _, p, _ in self.EDGES if p], [
            "11", "9", "(1, 2, 1)", "('tagged', 'tagged')", "('wrapped', 2)",
            "(5, True, 'factory.<locals>.Local')", "3", "(1, 2, False)"])
        # The restored functions' globals are the session's own: a later cell changes what
        # they see; their frames show their cells' source.
        self.ok(t, "f.tag = 'changed'")
        self.assertEqual(self.ok(t, "f()")["value"], "'changed'")
        r = t.cell("closure(None)")
        self.assertIn('File "<cell 1>", line 3, in inner\n    return v + k\n',
                      r["error"]["traceback"])


@skip_without_image("bash")
class BashCheckpointTest(CheckpointContract, unittest.TestCase):
    LANGUAGE = "bash"
    SET_X = "x=1"
    SET_X_AGAIN = "x=2"
    SET_X_THIRD = "x=3"
    DELETE_A = "rm /work/a.txt"
    PROBE_OUTSIDE = ("for p in %s; do if [ -e \"$p\" ] || [ -L \"$p\" ]; then printf 'True ';"
                     " else printf 'False '; fi; done; echo" % " ".join(OUTSIDE))

    def test_a_restored_session_has_everything_back(self):
        s = self.session()
        self.ok(s, "greeting='hi there'\nshout() { echo \"${1^^}\"; }\n"
                   "declare -a list=(1 2 '3 4')\ndeclare -A map=([k]=v [x]='y z')\n"
                   "export EXPORTED=yes\ndeclare -i num=7\nmulti=$'one\\ntwo \\'q\\''\n"
                   "alias ll='echo listing'\nshopt -s extglob\nset -o noclobber\n"
                   "mkdir -p /work/d && cd /work/d\n"
                   "printf data > /work/d/f.txt && chmod 640 /work/d/f.txt\nsleep 60 &")
        ck = self.checkpoint(s)
        self.assertEqual(ck["type"], "checkpoint", ck)
        self.assertEqual(ck["skipped"], [{"name": "%1", "reason": "a running background job "
                                          "(sleep 60 &) is not restored"}])
        t = self.session()
        self.assertEqual(self.restore(t, ck["state"], ck["files"], cells=1),
                         {"type": "restored", "skipped": []})
        r = self.ok(t, "shout \"$greeting\"\necho \"${#list[@]} ${list[2]} ${map[x]} $num $PWD\"\n"
                       "echo \"$multi\"\nbash -c 'echo $EXPORTED'\nshopt -p extglob\n"
                       "set +o | grep noclobber\nll\necho \"$BASH_SOURCE\"\n"
                       "stat -c '%a %u' /work/d/f.txt\ncat /work/d/f.txt; echo\necho @(x|y)")
        self.assertEqual(r["stdout"], "HI THERE\n3 3 4 y z 7 /work/d\none\ntwo 'q'\nyes\n"
                         "shopt -s extglob\nset -o noclobber\nlisting\n"
                         "/tmp/.codegen-session/cell-2.sh\n640 10002\ndata\n@(x|y)\n")
        self.assertEqual(r["stderr"], "")
        u = self.session()
        ck = self.checkpoint(t)
        self.assertEqual(self.restore(u, ck["state"], ck["files"], cells=9)["type"], "restored")
        self.assertEqual(self.ok(u, "shout x; echo $num $PWD; ll")["stdout"],
                         "X\n7 /work/d\nlisting\n")

    def test_each_edge_case_comes_back_or_is_named(self):
        s = self.session()
        self.ok(s, "greet() { echo \"hi $1\"; }\nexport -f greet\nexport LEVEL=3\n"
                   "declare -r FIXED=k\numask 027\ntrap 'echo bye' USR1\n"
                   "mkdir -p /work/p/q && cd /work/p && pushd q >/dev/null\n"
                   "counter=0; bump() { counter=$((counter + 1)); }; bump; bump")
        ck = self.checkpoint(s)
        self.assertEqual(ck["skipped"], [{"name": "<directory stack>", "reason": "pushd's "
                                          "directory stack (1 folders below the working "
                                          "directory) is not restored"}])
        t = self.session()
        self.assertEqual(self.restore(t, ck["state"], ck["files"], cells=1),
                         {"type": "restored", "skipped": []})
        r = self.ok(t, "bump; echo $counter $PWD $LEVEL $FIXED $(umask)\n"
                       "bash -c 'greet there; echo $LEVEL'\ntrap -p USR1\n"
                       "(FIXED=x) 2>/dev/null || echo readonly")
        self.assertEqual(r["stdout"], "3 /work/p/q 3 k 0027\nhi there\n3\n"
                         "trap -- 'echo bye' SIGUSR1\nreadonly\n")


@skip_without_image("javascript")
class JavaScriptCheckpointTest(CheckpointContract, unittest.TestCase):
    LANGUAGE = "javascript"
    SET_X = "var x = 1;"
    SET_X_AGAIN = "x = 2;"
    SET_X_THIRD = "x = 3;"
    DELETE_A = "require('fs').unlinkSync('/work/a.txt');"
    PROBE_OUTSIDE = ("console.log(%s.map((p) => { try { require('fs').lstatSync(p); return 'True';"
                     " } catch (_) { return 'False'; } }).join(' '))" % json.dumps(OUTSIDE))

    def test_a_restored_session_has_everything_back(self):
        s = self.session()
        self.ok(s, "let count = 1;\nconst base = 40;\nfunction add(a, b) { return a + b; }\n"
                   "class Box {\n  constructor(v) { this.v = v; }\n"
                   "  get double() { return this.v * 2; }\n}\n"
                   "var shared = [1, 2];\nvar alias = shared;\nconst fs = require('fs');\n"
                   "const { join } = require('path');\nconst box = new Box(21);\n"
                   "const byKey = new Map([['s', shared]]);\n"
                   "const timer = setInterval(() => {}, 100000);\n"
                   "const pending = new Promise(() => {});\nconst log = console.log;\n"
                   "let [first, , third] = [1, 2, 3];\n"
                   "fs.mkdirSync('/work/dsub/deep', { recursive: true });\n"
                   "fs.writeFileSync('/work/dsub/x.sh', 'echo');\n"
                   "fs.chmodSync('/work/dsub/x.sh', 0o750);\nprocess.chdir('/work/dsub');")
        self.ok(s, "function deep() { throw new TypeError('boom'); }\ncount += 1;")
        ck = self.checkpoint(s)
        self.assertEqual(ck["type"], "checkpoint", ck)
        reasons = {x["name"]: x["reason"] for x in ck["skipped"]}
        self.assertEqual(sorted(reasons), ["log", "pending", "timer"])
        self.assertEqual(reasons["log"], "a native or bound function cannot be checkpointed")
        self.assertTrue(reasons["timer"].startswith("it cannot be serialized: "), reasons)
        t = self.session()
        self.assertEqual(self.restore(t, ck["state"], ck["files"], cells=2),
                         {"type": "restored", "skipped": []})
        r = t.cell("deep()")
        self.assertEqual((r["status"], r["error"]["type"]), ("error", "TypeError"), r)
        self.assertIn("at <cell 3>:1:1", r["error"]["traceback"])
        r = self.ok(t, "console.log(JSON.stringify([count, base, add(base, 2), box.double,"
                       " box instanceof Box, shared === alias, byKey.get('s') === shared,"
                       " shared instanceof Array, typeof fs.readFileSync, join('a', 'b'), first,"
                       " third, process.cwd(), typeof timer, typeof pending, typeof log]))")
        self.assertEqual(json.loads(r["stdout"]), [2, 40, 42, 42, True, True, True, True,
                                                   "function", "a/b", 1, 3, "/work/dsub",
                                                   "undefined", "undefined", "undefined"])
        # let stays let, const stays const.
        self.assertEqual(self.ok(t, "count = 10; count")["value"], "10")
        r = t.cell("base = 1")
        self.assertEqual((r["status"], r["error"]["type"]), ("error", "TypeError"), r)
        r = self.ok(t, "const st = fs.statSync('/work/dsub/x.sh');\n"
                       "[(st.mode & 0o777).toString(8), st.uid, fs.readFileSync('/work/dsub/x.sh',"
                       " 'utf8'), fs.statSync('/work/dsub/deep').isDirectory()]")
        self.assertEqual(r["value"], "[ '750', 10002, 'echo', true ]")
        u = self.session()
        ck = self.checkpoint(t)
        # fs.Stats is a class of node's: its object would come back plain.
        self.assertIn({"name": "st", "reason": "it holds an object made by the class Stats (at "
                       "its top), which would come back as a plain object (the structured "
                       "clone keeps no prototype)"}, ck["skipped"])
        self.assertEqual(self.restore(u, ck["state"], ck["files"], cells=9)["type"], "restored")
        r = self.ok(u, "JSON.stringify([count, base, box instanceof Box, typeof deep, typeof st])")
        self.assertEqual(r["value"], "'[10,40,true,\"function\",\"undefined\"]'")

    def test_each_edge_case_comes_back_or_is_named(self):
        s = self.session()
        self.ok(s, "function mk() { let y = 2; return () => y; }\nvar closed = mk();\n"
                   "{ let q = 5; var inBlock = () => q; }\n"
                   "var noCapture = (function () { return function () { return 7; }; })();\n"
                   "let top = 3;\nfunction usesTop() { return top; }\n"
                   "function tagged() { return tagged.tag; }\ntagged.tag = 'x';\n"
                   "class Counter { static n = 0; static bump() { return ++Counter.n; } }\n"
                   "Counter.n = 5;\nCounter.extra = [1, 2];\n"
                   "function Old() {}\nOld.prototype.greet = function () { return 1; };\n"
                   "class Box2 { constructor(v) { this.v = v; } get d() { return this.v * 2; } }\n"
                   "var boxes = [new Box2(1)];\nvar lone = new Box2(4);\n"
                   "function withMethod() {}\nwithMethod.helper = () => 1;")
        ck = self.checkpoint(s)
        named = {x["name"]: x["reason"] for x in ck["skipped"]}
        self.maxDiff = None
        self.assertEqual(named, {
            "closed": "a function closing over a local scope (Closure (mk)) cannot be "
                      "checkpointed: its source alone does not hold what it closed over",
            "inBlock": "a function closing over a local scope (Block) cannot be checkpointed: "
                       "its source alone does not hold what it closed over",
            "Old": "its properties set after its definition (prototype.greet) are functions "
                   "or accessors, which are not kept beside its source",
            "withMethod": "its properties set after its definition (helper) are functions or "
                          "accessors, which are not kept beside its source",
            "boxes": "it holds an object made by the class Box2 (at [0]), which would come "
                     "back as a plain object (the structured clone keeps no prototype)"})
        t = self.session()
        self.assertEqual(self.restore(t, ck["state"], ck["files"], cells=1),
                         {"type": "restored", "skipped": []})
        probe = ("JSON.stringify([noCapture(), usesTop(), tagged(), tagged.tag, Counter.n,"
                 " Counter.extra, Counter.bump(), lone.d, lone instanceof Box2,"
                 " typeof closed, typeof inBlock, typeof Old, typeof boxes])")
        self.assertEqual(json.loads(self.ok(t, probe)["value"][1:-1]),
                         [7, 3, "x", "x", 5, [1, 2], 6, 8, True, "undefined", "undefined",
                          "undefined", "undefined"])


class PythonSciCheckpointTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not docker_ready("python-sci"):
            raise unittest.SkipTest("needs Docker and the python-sci sandbox image")

    def test_random_generators_and_arrays_continue_after_a_restore(self):
        # Without the cells' own code (the C pickler) and with a function holding an array
        # in its defaults (dill).
        for extra in ("", "\ndef total(a=arr):\n    return float(a.sum())"):
            with self.subTest(extra=extra):
                self.generators_and_arrays(extra)

    def generators_and_arrays(self, extra):
        s = open_session("python-sci")
        self.addCleanup(s.close)
        r = s.cell("import numpy as np, random, pandas as pd\nnp.random.seed(1)\nrandom.seed(2)\n"
                   "np.random.rand(3); np.random.randn(); random.random(); random.gauss(0, 1)\n"
                   "rng = np.random.default_rng(5)\nrng.random()\n"
                   "frame = pd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})\n"
                   "arr = np.arange(6).reshape(2, 3)\nboth = [arr, arr]\n"
                   "big = np.arange(1 << 20, dtype=np.float64)" + extra)
        self.assertEqual(r["status"], "ok", r)
        ck = s.ask({"type": "checkpoint", "max_bytes": 64 << 20, "full": False})
        self.assertEqual((ck["type"], ck["skipped"]), ("checkpoint", []), ck)
        draw = ("print(np.random.rand(3).tolist(), np.random.randn(), random.random(),"
                " random.gauss(0, 1), rng.random(), frame.to_dict(), arr.tolist(),"
                " big.sum(), big.dtype, both[0] is both[1]%s)"
                % (", total(), total.__defaults__[0] is arr" if extra else ""))
        expected = s.cell(draw)
        self.assertEqual(expected["status"], "ok", expected)
        t = open_session("python-sci")
        self.addCleanup(t.close)
        a = t.ask({"type": "restore", "state": ck["state"], "files": ck["files"], "cells": 1})
        self.assertEqual(a, {"type": "restored", "skipped": []})
        got = t.cell(draw)
        self.assertEqual(got["stdout"], expected["stdout"])
        self.assertTrue(got["stdout"].endswith(" True\n"), got)


if __name__ == "__main__":
    unittest.main()
