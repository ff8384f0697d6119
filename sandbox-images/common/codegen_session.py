"""Stateful sessions (stdlib only, Python 3.11): the session supervisor S, the in-container
side of protocol "session/3", run as `python3 -I /opt/codegen/session.py` in a container of
the session's own (never pooled, never reused) with the pool's hardening; the worker's side is
sandbox/src/session.rs. S (uid 0 with exactly CAP_SETUID, CAP_SETGID and CAP_KILL) forks the
kernel K once, before it reads any request, and never forks again; it reads the worker's
requests, hands them to K, captures K's output between markers only it knows, enforces the
deadlines and bounds everything K says. The protocol, the processes, checkpoints and the
decisions taken where the brief was silent are described in docs/sessions.md ("The
protocol"). The modules: codegen_session_limits (bounds, request checks), codegen_session_kernel
(K's start, loop, file requests, checkpoints and restores), codegen_session_python (the Python
kernel), codegen_session_shell (the bash and node kernels; session_kernel.js is node's side),
codegen_session_files (the walk, tar and extraction of /work); the security core they share
with the runner is codegen_guard.
"""

import binascii
import collections
import json
import os
import select
import signal
import sys
import time

from codegen_guard import (
    PROGRAM_UID, REAPED, Capture, cpu_ns, kill_program, oom_kills, pids_limit_hits,
    program_environment, read_small, wait_for,
)
from codegen_protocol import CHUNK, Fatal, FrameReader, frame, read_frame, write_all, write_frame
from codegen_session_kernel import describe_status, kernel_main
from codegen_session_limits import (
    BASH, FILE_TIMEOUT_S, INTERRUPT_GRACE_S, INTERRUPT_REPEAT_S, MARKER_WAIT_S,
    MAX_DISPLAY_BYTES, MAX_FILES_CHANGED, MAX_LISTED, MAX_MESSAGE_BYTES, MAX_REPLY,
    MAX_TRACEBACK_BYTES, MAX_VALUE_BYTES, NODE_KERNEL, PROTOCOL, READS_PER_WAKE,
    RESTORE_TIMEOUT_S, SESSION_KINDS, START_TIMEOUT_S, RequestError, SessionOver, clean_text,
    is_utf8_name, parse_request, skipped_list, too_large,
)
from codegen_session_python import PythonKernel
from codegen_session_shell import BashKernel, NodeKernel, node_path

# kernel kind -> K's class.
KERNELS = {"python": PythonKernel, "bash": BashKernel, "javascript": NodeKernel}


class CheckpointAnswer:
    """A checkpoint's answer frame, written in pieces: the blobs are base64-encoded as they
    go out, so S holds them once (decoded), never a second time as the frame's text."""

    STEP = 3 << 18  # raw bytes per base64 piece (a multiple of 3: no padding mid-way)

    def __init__(self, state, files, skipped):
        self.state = state
        self.files = files
        self.skipped = skipped

    @staticmethod
    def encoded_size(blob):
        return 4 if blob is None else 2 + 4 * ((len(blob) + 2) // 3)

    def pieces(self, blob):
        if blob is None:
            yield b"null"
            return
        yield b'"'
        view = memoryview(blob)
        for i in range(0, len(blob), self.STEP):
            yield binascii.b2a_base64(view[i:i + self.STEP], newline=False)
        yield b'"'

    def write(self, fd):
        import struct

        head = ('{"type":"checkpoint","state_bytes":%d,"files_bytes":%d,"skipped":%s,"state":'
                % (len(self.state or b""), len(self.files or b""),
                   json.dumps(self.skipped, separators=(",", ":")))).encode("ascii")
        middle, tail = b',"files":', b"}"
        size = (len(head) + self.encoded_size(self.state) + len(middle)
                + self.encoded_size(self.files) + len(tail))
        write_all(fd, struct.pack(">I", size) + head)
        for piece in self.pieces(self.state):
            write_all(fd, piece)
        write_all(fd, middle)
        for piece in self.pieces(self.files):
            write_all(fd, piece)
        write_all(fd, tail)


# ----------------------------------------------------------------------------- S


# ----------------------------------------------------------------------------- S


def session_kind(language):
    return SESSION_KINDS.get(language.name) if language is not None else None


def selftest_problems(language):
    """What keeps this image from serving sessions (the privileges are checked apart)."""
    kind = session_kind(language)
    if language is None:
        return []
    if kind is None:
        return ["sessions are not offered in %s" % language.name]
    if kind == "bash" and not os.access(BASH, os.X_OK):
        return ["%s is not executable" % BASH]
    if kind == "javascript":
        problems = []
        if not os.access(node_path(language), os.X_OK):
            problems.append("%s is not executable" % node_path(language))
        if not os.path.exists(NODE_KERNEL):
            problems.append("%s is missing" % NODE_KERNEL)
        return problems
    if kind == "python":
        import importlib.util

        if importlib.util.find_spec("dill") is None:
            return ["dill, the Python kernel's checkpoint pickler, is not installed "
                    "(python3-dill)"]
    return []


def serve(language):
    """S from start-up on; returns the exit status."""
    kind = session_kind(language)
    if kind is None:
        write_frame(1, {"type": "fatal", "message": "sessions are not offered in %s"
                        % language.name, "oom_killed": False})
        return 2
    # What K starts with, set once here: S itself neither reads the environment nor handles
    # a signal. matplotlib's font cache: in /tmp, not in the session's files (HOME is /work).
    program_environment(language, {"MPLBACKEND": "Agg", "MPLCONFIGDIR": "/tmp/.matplotlib"})
    kernel = None
    try:
        kernel = Kernel.fork(kind, language)
        kernel.wait_ready()
        write_frame(1, {"type": "ready", "protocol": PROTOCOL, "language": language.name})
        while True:
            raw = read_frame(0)
            if raw is None:
                kill_program()
                return 0
            try:
                req = parse_request(raw)
            except RequestError as e:
                write_frame(1, {"type": "error", "message": str(e)})
                continue
            del raw
            then = req.get("checkpoint") if req["type"] == "cell" else None
            answer = kernel.serve(req)
            del req
            while True:
                if isinstance(answer, CheckpointAnswer):
                    answer.write(1)
                else:
                    write_frame(1, answer)
                del answer
                if then is None:
                    break
                answer, then = kernel.serve(then), None
    except BrokenPipeError:
        kill_program()  # the worker is gone
        return 0
    except (SessionOver, Fatal) as e:
        message = e.message if isinstance(e, SessionOver) else str(e)
        oom = getattr(e, "oom_killed", False)
    except BaseException as e:
        import traceback

        traceback.print_exc()
        message = "the session supervisor failed: %s: %s" % (type(e).__name__, e)
        oom = False
    if not kill_program():
        sys.stderr.write("session: processes of uid %d survived SIGKILL\n" % PROGRAM_UID)
    try:
        write_frame(1, {"type": "fatal", "message": message, "oom_killed": bool(oom)})
    except OSError:
        pass
    return 3


def read_status_kb(pid, field):
    """A "kB" field of /proc/<pid>/status (VmHWM, ...), or None."""
    try:
        data = read_small("/proc/%d/status" % pid)
    except OSError:
        return None
    key = field.encode() + b":"
    for line in data.split(b"\n"):
        if line.startswith(key):
            try:
                return int(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None


def status_field(pid, field):
    try:
        data = read_small("/proc/%d/status" % pid)
    except OSError:
        return None
    key = field.encode() + b":"
    for line in data.split(b"\n"):
        if line.startswith(key):
            parts = line.split()
            return parts[1] if len(parts) > 1 else None
    return None


class CellStream:
    """One of K's output pipes over one cell: what lies between the cell's start and end
    markers (each with a nonce only S knows), the first `limit` bytes kept."""

    def __init__(self, limit, name):
        import secrets

        token = secrets.token_hex(16).encode()
        # 64 bytes each, well under PIPE_BUF: one write(2), never interleaved.
        self.start = (b"\0\x1e%s:%s:start\x1e" % (name[:8], token)).ljust(64, b"\0")
        self.end = (b"\0\x1e%s:%s:end\x1e" % (name[:8], token)).ljust(64, b"\0")
        self.capture = Capture(limit)
        self.state = 0  # 0: before the start marker, 1: in the cell, 2: past the end marker
        self.tail = b""

    @property
    def done(self):
        return self.state == 2

    def feed(self, data):
        if self.state == 2:
            return
        buf = self.tail + data if self.tail else data
        if self.state == 0:
            i = buf.find(self.start)
            if i < 0:
                self.tail = buf[-(len(self.start) - 1):]
                return
            buf = buf[i + len(self.start):]
            self.state = 1
        i = buf.find(self.end)
        if i >= 0:
            self.capture.feed(buf[:i])
            self.state = 2
            self.tail = b""
            return
        keep = len(self.end) - 1
        if len(buf) > keep:
            self.capture.feed(buf[:len(buf) - keep])
            self.tail = buf[len(buf) - keep:]
        else:
            self.tail = buf


class Kernel:
    """S's view of K (its child)."""

    @classmethod
    def fork(cls, kind, language):
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                for fd in (req_w, rep_r, in_w, out_r, err_r):
                    os.close(fd)
                kernel_main((req_r, rep_w, in_r, out_w, err_w), KERNELS[kind], language)
            finally:
                os._exit(70)
        self = cls()
        self.pid = pid
        self.kind = kind
        # S's own writers on K's output pipes, for the markers: other open file descriptions
        # (O_NONBLOCK is a property of the description, and K's must stay blocking).
        self.out_mark = os.open("/proc/self/fd/%d" % out_w,
                                os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        self.err_mark = os.open("/proc/self/fd/%d" % err_w,
                                os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        for fd in (req_r, rep_w, in_r, in_w, out_w, err_w):
            os.close(fd)
        self.req_w, self.rep_r, self.out_r, self.err_r = req_w, rep_r, out_r, err_r
        for fd in (req_w, rep_r, out_r, err_r):
            os.set_blocking(fd, False)
        try:
            self.pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self.pidfd = None  # seccomp or an old kernel: look every 50 ms instead
        self.replies = FrameReader(MAX_REPLY)
        self.received = collections.deque()  # frames read, not yet taken
        self.outgoing = bytearray()
        self.marks = {}  # writer -> marker still to write
        self.streams = {}  # reader -> CellStream
        self.interpreter = None
        self.n = 0
        # No request served yet (refused restores aside): a restore may still come.
        self.fresh = True
        # A checkpoint was answered: K holds the digests a later one compares with.
        self.checkpointed = False
        self.oom_before = oom_kills()
        self.pids_before = pids_limit_hits()
        return self

    # -- the loop

    def send(self, obj):
        self.outgoing += frame(json.dumps(obj, separators=(",", ":")).encode("ascii"))

    def wait(self, timeout):
        """Waits at most `timeout` seconds for something to do and does it: writes what is
        queued for K and the markers, reads K's frames and output. Raises SessionOver when
        K is dead."""
        poller = select.poll()
        poller.register(self.rep_r, select.POLLIN)
        if self.outgoing:
            poller.register(self.req_w, select.POLLOUT)
        for fd in self.marks:
            poller.register(fd, select.POLLOUT)
        for fd, stream in self.streams.items():
            if not stream.done:
                poller.register(fd, select.POLLIN)
        if self.pidfd is not None:
            poller.register(self.pidfd, select.POLLIN)
        else:
            timeout = min(timeout, 0.05)
        # The worker's end of stdin, for its hang-up alone (it sends nothing while a request
        # is served): a worker lost during a cell must not leave the cell running to its
        # deadline in a container nobody will ever read.
        poller.register(0, 0)
        ms = max(0, int(timeout * 1000) + 1)
        dead = False
        for fd, ev in poller.poll(ms):
            if fd == 0:
                if ev & (select.POLLHUP | select.POLLERR | select.POLLNVAL):
                    raise BrokenPipeError("the worker hung up during a request")
                continue
            if fd == self.rep_r:
                self.read_replies()
            elif fd == self.req_w:
                try:
                    n = os.write(self.req_w, self.outgoing[:1 << 20])
                    del self.outgoing[:n]
                except BlockingIOError:
                    pass
                except OSError:  # EPIPE: K is gone; its exit says how
                    self.outgoing.clear()
                    dead = True
            elif fd in self.marks:
                try:
                    os.write(fd, self.marks[fd])
                    del self.marks[fd]
                except BlockingIOError:
                    pass
            elif fd in self.streams:
                self.read_stream(fd)
            elif fd == self.pidfd:
                dead = True
        if self.pidfd is None and not dead:
            try:
                done, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                done, status = self.pid, None
            if done == self.pid:
                if status is not None:
                    REAPED[self.pid] = status  # for died()'s wait_for
                dead = True
        if dead:
            self.died()

    def read_replies(self):
        for _ in range(READS_PER_WAKE * 64):
            try:
                data = os.read(self.rep_r, 1 << 20)
            except BlockingIOError:
                return
            if not data:
                return
            self.replies.feed(data)
            if self.replies.overflow:
                raise SessionOver("the kernel sent a message over %d bytes; the session ended"
                                  % MAX_REPLY)

    def read_stream(self, fd):
        stream = self.streams[fd]
        for _ in range(READS_PER_WAKE):
            try:
                data = os.read(fd, CHUNK)
            except BlockingIOError:
                return
            if not data:
                return
            stream.feed(data)
            if stream.done or len(data) < CHUNK:
                return

    def take_reply(self):
        """K's next frame (its own: other processes holding the pipe are ignored), or None;
        raises SessionOver for K's last word ("dead")."""
        self.received.extend(self.replies.frames())
        while self.received:
            f = self.received.popleft()
            if f.get("pid") != self.pid:
                continue
            if "dead" in f:
                raise self.over(clean_text(f.get("dead"), 2000) or "the kernel's child died")
            return f
        return None

    def over(self, what):
        """The SessionOver for K (or its child) gone: what happened, plainly."""
        oom_now = oom_kills()
        oom = self.oom_before is not None and oom_now is not None and oom_now > self.oom_before
        pids_now = pids_limit_hits()
        if oom:
            what = ("the session hit its memory limit and the out-of-memory killer took the "
                    "kernel (%s)" % what)
        elif pids_now is not None and self.pids_before is not None and pids_now > self.pids_before:
            what += " after the container's process limit refused %d forks" % (
                pids_now - self.pids_before)
        return SessionOver(what + "; the session ended", oom)

    def died(self):
        """K is dead (or dying): its last frames, then how it ended."""
        try:
            self.read_replies()
        except SessionOver:
            pass
        while self.take_reply() is not None:  # raises for K's own last word ("dead")
            pass
        status = wait_for(self.pid)
        raise self.over("the kernel " + describe_status(status))

    def wait_ready(self):
        deadline = time.monotonic() + START_TIMEOUT_S
        self.streams = {self.err_r: CellStream(8192, b"startup")}
        self.streams[self.err_r].state = 1  # K's start-up stderr, for the diagnostics
        try:
            while True:
                f = self.take_reply()
                if f is not None and f.get("ready") is True:
                    break
                now = time.monotonic()
                if now > deadline:
                    raise SessionOver("the kernel did not start within %d s" % START_TIMEOUT_S)
                self.wait(deadline - now)
        except SessionOver as e:
            startup = self.streams[self.err_r]
            said = (startup.capture.text() + startup.tail.decode("utf-8", "replace")).strip()
            if said:
                sys.stderr.write("session: the kernel's stderr:\n%s\n" % said)
                e.message += ": " + said[-1000:]
            raise
        finally:
            self.streams = {}
        pid = f.get("interpreter")
        if (isinstance(pid, int) and not isinstance(pid, bool) and pid > 0
                and status_field(pid, "PPid") == str(self.pid).encode()
                and status_field(pid, "Uid") == str(PROGRAM_UID).encode()):
            self.interpreter = pid

    def exchange(self, msg, timeout):
        """A file request to K and its answer (a dict)."""
        self.oom_before = oom_kills()
        self.pids_before = pids_limit_hits()
        self.send(msg)
        deadline = time.monotonic() + timeout
        while True:
            f = self.take_reply()
            if f is not None:
                return f
            now = time.monotonic()
            if now > deadline:
                raise SessionOver("the kernel did not answer a %s request within %d s; the "
                                  "session ended" % (msg["op"], timeout))
            self.wait(deadline - now)

    # -- requests

    def serve(self, req):
        kind = req["type"]
        if kind == "restore":
            return self.restore(req)
        self.fresh = False
        if kind == "checkpoint":
            return self.checkpoint(req)
        if kind == "cell":
            return self.run_cell(req)
        if kind == "put_file":
            f = self.exchange({"op": "put_file", "path": req["path"], "base64": req["base64"]},
                              FILE_TIMEOUT_S)
            if f.get("ok") is True:
                return {"type": "ok"}
            return self.refusal(f)
        if kind == "get_file":
            f = self.exchange({"op": "get_file", "path": req["path"],
                               "max_bytes": req["max_bytes"]}, FILE_TIMEOUT_S)
            got = f.get("file")
            if isinstance(got, dict) and isinstance(got.get("base64"), str):
                try:
                    data = binascii.a2b_base64(got["base64"], strict_mode=True)
                except (binascii.Error, ValueError):
                    return {"type": "error", "message": "the kernel read the file wrongly"}
                if len(data) > req["max_bytes"]:
                    return {"type": "error", "message": "%s is over %d bytes"
                            % (req["path"], req["max_bytes"])}
                return {"type": "file", "path": req["path"], "size": len(data),
                        "base64": got["base64"]}
            return self.refusal(f)
        f = self.exchange({"op": "list_files"}, FILE_TIMEOUT_S)
        files = f.get("files")
        if not isinstance(files, list):
            return self.refusal(f)
        listed = []
        for item in files:
            if (isinstance(item, dict) and isinstance(item.get("path"), str)
                    and is_utf8_name(item["path"])
                    and all(isinstance(item.get(k), int) and not isinstance(item.get(k), bool)
                            and item[k] >= 0 for k in ("size", "modified_ms"))):
                listed.append({"path": item["path"], "size": item["size"],
                               "modified_ms": item["modified_ms"]})
        listed.sort(key=lambda x: x["path"])
        return {"type": "files", "files": listed[:MAX_LISTED]}

    def restore(self, req):
        """The restore request: K extracts the files and restores the state; S's cell counter
        goes on from req["cells"]."""
        if not self.fresh:
            return {"type": "error", "message": "a restore must be the session's first request "
                    "(before any cell, file request or checkpoint)"}
        msg = {"op": "restore", "state": req.pop("state"), "files": req.pop("files")}
        f = self.exchange(msg, RESTORE_TIMEOUT_S)
        del msg
        if f.get("restored") is True:
            self.fresh = False
            self.n = req["cells"]
            return {"type": "restored", "skipped": skipped_list(f.get("skipped"))}
        if f.get("refused") is not True:
            self.fresh = False  # K failed half-way: what it restored stays
        return self.refusal(f)

    def checkpoint(self, req):
        """The checkpoint request: K sends the blobs it has to send as "chunk" frames (at
        most CHECKPOINT_CHUNK decoded bytes each), then its verdict; S decodes and counts
        them as they come (past max_bytes it keeps none), and only an answered checkpoint
        becomes K's new point of comparison ("checkpoint_end")."""
        limit = req["max_bytes"]
        complete = req["full"] or not self.checkpointed
        self.oom_before = oom_kills()
        self.pids_before = pids_limit_hits()
        self.send({"op": "checkpoint", "max_bytes": limit, "full": req["full"]})
        deadline = time.monotonic() + FILE_TIMEOUT_S
        blobs = {"state": bytearray(), "files": bytearray()}
        got = 0
        bad = False
        while True:
            f = self.take_reply()
            if f is None:
                now = time.monotonic()
                if now > deadline:
                    raise SessionOver("the kernel did not answer a checkpoint request within "
                                      "%d s; the session ended" % FILE_TIMEOUT_S)
                self.wait(deadline - now)
                continue
            if "chunk" not in f:
                break
            part, data = f.get("chunk"), f.get("base64")
            try:
                if not isinstance(part, str) or part not in blobs or not isinstance(data, str):
                    raise ValueError
                data = binascii.a2b_base64(data, strict_mode=True)
            except (binascii.Error, ValueError):
                bad = True
                continue
            got += len(data)
            if got > limit:
                blobs = {"state": bytearray(), "files": bytearray()}  # kept no longer
            else:
                blobs[part] += data
        verdict = f.get("checkpoint")
        if isinstance(f.get("too_large"), int) and not isinstance(f["too_large"], bool):
            return too_large(max(f["too_large"], got, limit + 1), limit)
        if not isinstance(verdict, dict):
            return self.refusal(f)
        answer = None
        if got > limit:
            answer = too_large(got, limit)
        else:
            sent = {part: verdict.get(part) is True for part in blobs}
            # A blob sent is never empty (a state has its magic line, a tar its end blocks).
            if bad or any(sent[part] != bool(blobs[part]) for part in blobs):
                answer = {"type": "error", "message": "the kernel sent a malformed checkpoint"}
            elif complete and not all(sent.values()):
                answer = {"type": "error", "message": "the kernel left a part out of a full "
                          "checkpoint"}
        self.send({"op": "checkpoint_end", "commit": answer is None})
        if answer is not None:
            return answer
        self.checkpointed = True
        return CheckpointAnswer(blobs["state"] or None, blobs["files"] or None,
                                skipped_list(verdict.get("skipped")))

    @staticmethod
    def refusal(f):
        message = clean_text(f.get("error"), 2000) or "the kernel could not do it"
        if f.get("missing") is True:
            return {"type": "error", "message": message, "missing": True}
        return {"type": "error", "message": message}

    def run_cell(self, req):
        """One cell: K prepares it (its walk of /work, its streams flushed) and says "begin";
        S writes the start markers, says "go" and the cell's clock starts; K's answer; the
        end markers; the answer."""
        self.n += 1
        n = self.n
        out = CellStream(req["max_output_bytes"], b"stdout")
        err = CellStream(req["max_output_bytes"], b"stderr")
        self.streams = {self.out_r: out, self.err_r: err}
        self.oom_before = oom_kills()
        self.pids_before = pids_limit_hits()
        cpu_before = cpu_ns()
        self.send({"op": "cell", "n": n, "code": req["code"]})
        phase = "begin"
        t_phase = time.monotonic()
        t0 = t_end = result = None
        interrupted = next_sigint = None  # when the first SIGINT went, when the next goes
        try:
            while True:
                now = time.monotonic()
                if phase in ("begin", "run"):
                    f = self.take_reply()
                    if f is not None:
                        if f.get("n") != n:
                            raise SessionOver("the kernel answered out of turn; the session "
                                              "ended")
                        if phase == "begin" and f.get("begin") is True:
                            # Everything K and its streams held so far is out of the cell.
                            phase, t_phase = "marks", now
                            self.marks = {self.out_mark: out.start, self.err_mark: err.start}
                            continue
                        if phase == "begin":  # it failed before it began: no output
                            self.marks = {self.out_mark: out.start + out.end,
                                          self.err_mark: err.start + err.end}
                            t0 = now
                        else:
                            self.marks = {self.out_mark: out.end, self.err_mark: err.end}
                        result, t_end, phase = f, now, "end"
                        continue
                if phase == "begin":
                    if now > t_phase + FILE_TIMEOUT_S:
                        raise SessionOver("the kernel did not begin the cell within %d s; the "
                                          "session ended" % FILE_TIMEOUT_S)
                    wake = t_phase + FILE_TIMEOUT_S
                elif phase == "marks":
                    if not self.marks:
                        self.send({"op": "go", "n": n})
                        phase, t0 = "run", now
                        deadline = t0 + req["timeout_ms"] / 1000.0
                        continue
                    if now > t_phase + MARKER_WAIT_S:
                        raise SessionOver("the kernel's output pipes stayed full; the session "
                                          "ended")
                    wake = t_phase + MARKER_WAIT_S
                elif phase == "end":
                    if out.done and err.done:
                        break
                    if now > t_end + MARKER_WAIT_S:
                        raise SessionOver("the cell's output could not be delimited (its end "
                                          "markers did not come through); the session ended")
                    wake = t_end + MARKER_WAIT_S
                elif interrupted is None:
                    if now >= deadline:
                        interrupted = next_sigint = now
                        if self.kind == "bash":
                            self.send({"op": "interrupt", "n": n})
                        continue
                    wake = deadline
                else:
                    if now >= interrupted + INTERRUPT_GRACE_S:
                        raise SessionOver("the cell ran past its deadline and did not stop at "
                                          "the interrupt; the session ended")
                    if now >= next_sigint:
                        try:
                            os.killpg(self.pid, signal.SIGINT)
                        except (ProcessLookupError, PermissionError):
                            pass
                        next_sigint = now + INTERRUPT_REPEAT_S
                    wake = min(interrupted + INTERRUPT_GRACE_S, next_sigint)
                self.wait(max(0.0, wake - now))
        finally:
            self.streams = {}
            self.marks = {}
        cpu_after = cpu_ns()
        return self.cell_answer(result, out, err, interrupted is not None,
                                int(round((t_end - t0) * 1000)),
                                None if cpu_before is None or cpu_after is None
                                else max(0, int(round((cpu_after - cpu_before) / 1e6))))

    def peak_memory(self):
        k = read_status_kb(self.pid, "VmHWM")
        if k is None:
            return None
        if self.interpreter is not None:
            k += read_status_kb(self.interpreter, "VmHWM") or 0
        return k

    def cell_answer(self, r, out, err, interrupted, duration_ms, cpu_ms):
        status = r.get("status") if r.get("status") in ("ok", "error") else "error"
        if interrupted:
            status = "timeout"
        value = r.get("value")
        value = None if not isinstance(value, str) else clean_text(value, MAX_VALUE_BYTES)
        error = r.get("error")
        if isinstance(error, dict):
            error = {"type": clean_text(error.get("type"), 256) or "Error",
                     "message": clean_text(error.get("message"), MAX_MESSAGE_BYTES),
                     "traceback": clean_text(error.get("traceback"), MAX_TRACEBACK_BYTES,
                                             tail=True)}
        else:
            error = None
        if status == "error" and error is None:
            error = {"type": "Error", "message": "the cell failed", "traceback": ""}
        exit_code = r.get("exit_code")
        if not isinstance(exit_code, int) or isinstance(exit_code, bool) or self.kind != "bash":
            exit_code = None
        elif not -(1 << 31) <= exit_code < (1 << 31):
            exit_code = None
        display = []
        budget = MAX_DISPLAY_BYTES
        for item in r.get("display") if isinstance(r.get("display"), list) else ():
            if not isinstance(item, dict):
                continue
            if item.get("mime") == "image/png" and isinstance(item.get("base64"), str):
                data = item["base64"]
                try:
                    binascii.a2b_base64(data, strict_mode=True)
                except (binascii.Error, ValueError):
                    continue
                entry = {"mime": "image/png", "base64": data}
                size = len(data)
            elif item.get("mime") == "text/plain" and isinstance(item.get("text"), str):
                entry = {"mime": "text/plain", "text": clean_text(item["text"], MAX_VALUE_BYTES)}
                size = len(entry["text"])
            else:
                continue
            if size > budget:
                continue
            budget -= size
            display.append(entry)
        files = r.get("files_changed")
        files = sorted({p for p in files if isinstance(p, str) and p and is_utf8_name(p)}
                       if isinstance(files, list) else ())[:MAX_FILES_CHANGED]
        return {
            "type": "cell_result",
            "status": status,
            "stdout": out.capture.text(),
            "stderr": err.capture.text(),
            "stdout_truncated": out.capture.truncated,
            "stderr_truncated": err.capture.truncated,
            "value": value,
            "error": error,
            "exit_code": exit_code,
            "display": display,
            "files_changed": files,
            "duration_ms": duration_ms,
            "cpu_ms": cpu_ms,
            "peak_memory_kb": self.peak_memory(),
        }


# ----------------------------------------------------------------------------- K
