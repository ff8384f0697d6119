"""Stateful sessions (stdlib only, Python 3.11): the in-container side of protocol "session/1",
run as `python3 -I /opt/codegen/session.py` in a container of the session's own (never pooled,
never reused) with the pool's hardening. The worker's side is sandbox/src/session.rs.

Processes

  S  the session supervisor: this process, uid 0 with exactly CAP_SETUID, CAP_SETGID and
     CAP_KILL (session.py refuses to start otherwise: codegen_guard.check_privileges). It
     forks K once, before it reads any request, and never forks again (an exhausted pids
     limit cannot stop it). It reads the worker's requests on its stdin, hands them to K,
     captures K's output, enforces the deadline, answers on its stdout (frames only; its
     diagnostics go to stderr) and, when the session is over, kills every process of
     PROGRAM_UID (codegen_guard.kill_program).
  K  the kernel, forked by S: before anything else it starts a new session (so its process
     group is its pid), sets its oom_score_adj to 1000, becomes PROGRAM_UID
     (setgroups/setresgid/setresuid: no capability left), takes fresh stdio pipes (stdin: a
     pipe whose writer is closed, so a read gets end of file), closes every other descriptor
     but its two to S, resets its signals, and works in /work with the environment
     codegen_guard.CHILD_ENV plus the image's language.json "env" plus MPLBACKEND=Agg
     and MPLCONFIGDIR=/tmp/.matplotlib.
     It lives for the whole session, so the state of the cells persists:
       python, python-sci  K runs the cells itself, in one namespace (a fresh __main__).
       bash                K keeps one `bash --noprofile --norc --noediting -i` child
                           (interactive: an interrupt abandons the running command and the
                           shell goes back to reading commands; no prompts, no history, no
                           history expansion, no job control), which sources each cell.
       javascript          K keeps one `node session_kernel.js` child, which runs each cell
                           with vm.runInContext in one context (see that file).
     K also does the file requests, as PROGRAM_UID: nothing the worker asks for is read or
     written with more rights than the program has.
  Sessions are offered for the language.json names python, python-sci, bash and
  javascript; in any other image S answers the fatal "sessions are not offered in <name>"
  and exits.

Protocol "session/1": frames as in codegen_protocol (a 4-byte big-endian length, then that
many bytes of a JSON object; S's frames are pure ASCII).

  S -> worker  {"type": "ready", "protocol": "session/1", "language": <language.json name>}
               once K is up (and its shell or node child answers).
  worker -> S  one request at a time; S answers each before it reads the next:
    {"type": "cell", "code": str, "timeout_ms": int >= 1, "max_output_bytes": int >= 0}
      -> {"type": "cell_result",
          "status": "ok" | "error" | "timeout",
          "stdout": str, "stderr": str,        what the cell and its child processes wrote,
          "stdout_truncated": bool,            each capped at max_output_bytes (UTF-8 bytes;
          "stderr_truncated": bool,            the rest is read and discarded)
          "value": str | null,                 Python: repr of a final expression statement
                                               (not None); JavaScript: util.inspect of the
                                               completion value (not undefined), a Promise
                                               awaited first; cut at 64 KiB of UTF-8
          "error": null | {"type", "message", "traceback"},
          "exit_code": int | null,             bash only: the status of the cell's last
                                               command (null in the other languages)
          "display": [{"mime": "image/png", "base64": str} | {"mime": "text/plain",
                       "text": str}],          Python only (display(), open figures)
          "files_changed": [str],              regular files below /work the cell created or
                                               modified (mtime, size or inode changed),
                                               relative, sorted, at most 1000
          "duration_ms": int,                  from S's "go" to K's answer (see below)
          "cpu_ms": int | null,                the container cgroup's CPU time over the cell
                                               (codegen_guard.cpu_ns, as the runner's)
          "peak_memory_kb": int | null}        see "Peak memory" below
         or {"type": "fatal", ...} (below) when the session ended during the cell.
    {"type": "put_file", "path": rel, "base64": str}
      -> {"type": "ok"}: K writes the decoded bytes to /work/<rel> (parent folders made,
         mode 0644, folders 0755).
    {"type": "get_file", "path": rel, "max_bytes": int >= 0}
      -> {"type": "file", "path": rel, "size": int, "base64": str}
    {"type": "list_files"}
      -> {"type": "files", "files": [{"path": rel, "size": int, "modified_ms": int}]}:
         the regular files below /work, recursively, symlinks not followed, sorted by path
         (code points, which is the order of their UTF-8 bytes), at most 10000 (the first
         10000 in that order).
    A request S cannot serve (not JSON, an unknown type, a missing or mistyped field, a bad
    path), or a file request K refuses (a missing file, a folder, a symlink leaving /work,
    a file over max_bytes, a full disk...) -> {"type": "error", "message": str} (with
    "missing": true when the file a get_file names does not exist); the
    session goes on.
  S -> worker  {"type": "fatal", "message": str, "oom_killed": bool}: the session is over.
               S has killed every process of PROGRAM_UID and exits (status 3); the worker
               removes the container. oom_killed: the memory cgroup's OOM-kill counter
               grew during the request (codegen_guard.oom_kills).
  End of input on S's stdin: S kills every process of PROGRAM_UID and exits 0.

Decisions where the brief was silent

  Paths (put_file, get_file): non-empty, at most 1024 characters, relative, components
  neither empty nor "." nor "..", no NUL. put_file does not follow symbolic links: a link
  on the path (or as the file itself) is an error. get_file follows links that stay inside
  /work: the path is resolved (realpath, as PROGRAM_UID), refused when it leaves /work,
  then opened component by component with O_NOFOLLOW, so that what is read is a regular
  file below /work at the moment it is opened. max_bytes above 64 MiB counts as 64 MiB.
  File names that are not valid UTF-8 are left out of list_files and files_changed (they
  could not be named back).
  A cell in two steps: S hands K the cell; K takes its snapshot of /work (for
  files_changed), flushes its own std streams and says "begin"; S writes the start markers
  and says "go"; only then does the cell run, and its clock (deadline, duration_ms) starts.
  Output is split with markers only S knows: S holds a writer of its own on K's stdout and
  stderr pipes (a second open file description of each, opened through /proc/self/fd, so
  that S's O_NONBLOCK is not K's). At "begin" it writes a start marker to both pipes, and
  once K has answered (Python: K flushes sys.stdout/sys.stderr first; node waits for its
  streams to drain), an end marker: each is 64 bytes, written in one write(2) (under
  PIPE_BUF: never interleaved with a program's write), and carries a nonce from
  secrets.token_hex that lives only in S's memory, which no process of the program can
  read. A cell's stdout is what lies between its two markers on the stdout pipe, likewise
  stderr. What is written between cells (by a background thread or process, after one
  cell's end marker and before the next one's start marker, Python's buffered text
  included, since K flushes before "begin") is read and discarded; what such a writer
  writes while a later cell runs is that cell's.
  Peak memory: peak_memory_kb is the session's resident memory high-water mark so far: the
  VmHWM of K plus the VmHWM of its bash or node child (none for Python, where K runs the
  cells), read by S from /proc/<pid>/status after the cell; never reset, so it covers every
  cell so far. Processes a cell starts itself (a command of bash, a subprocess) are not in
  it. null when /proc cannot be read.
  Interrupts: at the deadline S sends SIGINT to K's process group (K, its bash/node child
  and the cell's processes that did not leave it), again every 0.5 s, and for bash tells K
  over its channel (K then has the shell report the interrupted cell's status). Python: K's
  own SIGINT handler raises KeyboardInterrupt once, in the cell; one that comes before the
  cell's first bytecode is kept for it. A cell's subprocess that started a session of its
  own, or a background job of bash (which ignores SIGINT), is not interrupted and lives on.
  A cell that ends within 2 s of the deadline has status "timeout" whatever it reported;
  "error" is then what the kernel said about the interruption (Python: KeyboardInterrupt
  with the traceback showing where the cell was, or null when the cell caught it;
  JavaScript: the "Script execution was interrupted" error; bash: the ExitStatus of the
  abandoned command, exit_code 130).
  Errors: Python: "type" is the exception class's qualified name, "message" its str()
  (at most 16 KiB), "traceback" the formatted traceback from the cell's own frames on
  (filename "<cell N>"; at most the last 64 KiB). The traceback is not also written to
  stderr. SystemExit is an error like any other. bash: a non-zero last status is "error"
  with {"type": "ExitStatus", "message": "exit status N", "traceback": ""} and "exit_code".
  Python cells run in __main__ with sys.path[0] = /work and sys.argv = [""]; the std
  streams are those of a fresh python3 on pipes (stdout block-buffered: K flushes it after
  each cell). Top-level await is allowed (one event loop, kept for the session). A process
  forked by a cell that returns to the kernel exits there (status 0, or its SystemExit's).
  display(*objs): a builtin; an object with _repr_png_ (returning bytes) or a matplotlib
  Figure gives image/png, anything else text/plain (its repr, at most 64 KiB). At most
  32 MiB of display output per cell; past it one text/plain note says what was dropped.
  display() outside a cell (a background thread between cells) is dropped.
  Deadlines of S's own: K has 60 s to start, 30 s to answer a file request or to begin a
  cell, and S 10 s to get each pair of markers through; past any of them the session ends
  (fatal). A walk of /work (files_changed, list_files) looks at 200000 entries at most.
  A dead K is noticed when it matters: S answers the request during which K died with
  "fatal"; K dying between requests (a background thread's os._exit) makes the next
  request's answer the fatal one. S never writes a frame that was not asked for.

Inside: S and K speak frames too (the same codec), over two pipes. S -> K: {"op": "cell",
"n", "code"}, {"op": "go", "n"}, {"op": "interrupt", "n"} (bash), {"op": "put_file", "path",
"base64"}, {"op": "get_file", "path", "max_bytes"}, {"op": "list_files"}. K -> S: every
frame carries K's "pid" (a frame from another process that holds the pipe, such as a forked
child, is ignored): {"ready": true, "interpreter": pid|null}, a cell's {"n", "begin": true},
then its {"n", "status", "value", "error", "exit_code", "display", "files_changed"} (or that
alone when it failed before it began), a file request's {"ok": true} / {"file": {"path",
"size", "base64"}} / {"files": [...]} / {"error": str}, or {"dead": str} when the shell or
node died. K runs the program's code (Python) or shares its uid, so S checks every
field of every frame from K and bounds what it reads.
"""

import ast
import binascii
import collections
import errno
import json
import os
import select
import signal
import stat
import sys
import time

from codegen_guard import (
    CHILD_ENV, PROGRAM_UID, REAPED, Capture, become_program, cpu_ns, kill_program, oom_kills,
    read_cgroup, read_small, reset_signals, wait_for,
)
from codegen_protocol import (
    CHUNK, MAX_OUTPUT_BYTES, MAX_TIMEOUT_MS, WORKDIR, Fatal, FrameReader, frame, read_frame,
    write_all, write_frame,
)

PROTOCOL = "session/1"
# language.json name -> kernel kind.
SESSION_KINDS = {"python": "python", "python-sci": "python", "bash": "bash",
                 "javascript": "javascript"}
CODEGEN_DIR = os.path.dirname(os.path.abspath(__file__))
NODE_KERNEL = os.path.join(CODEGEN_DIR, "session_kernel.js")
BASH = "/bin/bash"
# Where the bash kernel writes each cell to source it (the program's own /tmp).
BASH_CELL_DIR = "/tmp/.codegen-session"
PIDS_EVENTS = "/sys/fs/cgroup/pids/pids.events"

MAX_VALUE_BYTES = 64 << 10
MAX_MESSAGE_BYTES = 16 << 10
MAX_TRACEBACK_BYTES = 64 << 10
MAX_DISPLAY_BYTES = 32 << 20
MAX_FILES_CHANGED = 1000
MAX_LISTED = 10000
# Entries of /work a walk looks at (files_changed, list_files), at most.
MAX_WALK = 200_000
MAX_GET_BYTES = 64 << 20
MAX_PATH = 1024
# Bytes of one frame from K that S reads at most (a file of MAX_GET_BYTES in base64, and more).
MAX_REPLY = 96 << 20

START_TIMEOUT_S = 60.0
FILE_TIMEOUT_S = 30.0
INTERRUPT_GRACE_S = 2.0
INTERRUPT_REPEAT_S = 0.5
MARKER_WAIT_S = 10.0
# Reads of one pipe per wake-up, at most (a writer that never stops must not starve the rest).
READS_PER_WAKE = 16


class RequestError(Exception):
    """A request S cannot serve: an "error" answer, the session goes on."""


class SessionOver(Exception):
    """The session is over: a "fatal" answer, then S exits."""

    def __init__(self, message, oom_killed=False):
        super().__init__(message)
        self.message = message
        self.oom_killed = oom_killed


# ----------------------------------------------------------------------------- text


def clean_text(value, limit, tail=False):
    """A string for a frame: lone surrogates replaced, at most `limit` UTF-8 bytes (the head,
    or the tail), cut on a character boundary. Anything but a string gives ""."""
    if not isinstance(value, str):
        return ""
    data = value.encode("utf-8", "replace")
    if len(data) > limit:
        data = data[len(data) - limit:] if tail else data[:limit]
    return data.decode("utf-8", "ignore")


def cut_text(text, limit):
    """`text` cut to at most `limit` UTF-8 bytes (lone surrogates replaced)."""
    return clean_text(text, limit)


def is_utf8_name(name):
    try:
        name.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


# ----------------------------------------------------------------------------- requests


def check_path(path):
    """A path of put_file / get_file: relative, below /work. Returns its components."""
    if not isinstance(path, str) or not path or len(path) > MAX_PATH:
        raise RequestError("'path' must be a non-empty string of at most %d characters"
                           % MAX_PATH)
    if not is_utf8_name(path):
        raise RequestError("'path' must be valid Unicode (no lone surrogates)")
    parts = path.split("/")
    if path.startswith("/") or "\0" in path or any(p in ("", ".", "..") for p in parts):
        raise RequestError("'path' %r must be relative to the working directory, without "
                           "'..', '.', '//' or NUL" % path)
    return parts


def parse_request(raw):
    """The worker's request in the frame `raw`, checked; RequestError says what is wrong."""
    try:
        req = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise RequestError("request is not valid JSON: %s" % e)
    if not isinstance(req, dict):
        raise RequestError("request must be a JSON object")
    kind = req.get("type")

    def integer(name, minimum, maximum):
        v = req.get(name)
        if not isinstance(v, int) or isinstance(v, bool) or not minimum <= v <= maximum:
            raise RequestError("'%s' must be an integer in [%d, %d]" % (name, minimum, maximum))
        return v

    if kind == "cell":
        code = req.get("code")
        if not isinstance(code, str):
            raise RequestError("'code' must be a string")
        if not is_utf8_name(code):
            raise RequestError("'code' must be valid Unicode (no lone surrogates)")
        return {"type": "cell", "code": code,
                "timeout_ms": integer("timeout_ms", 1, MAX_TIMEOUT_MS),
                "max_output_bytes": integer("max_output_bytes", 0, MAX_OUTPUT_BYTES)}
    if kind == "put_file":
        check_path(req.get("path"))
        data = req.get("base64")
        if not isinstance(data, str):
            raise RequestError("'base64' must be a string")
        try:
            binascii.a2b_base64(data, strict_mode=True)
        except (binascii.Error, ValueError) as e:
            raise RequestError("'base64' is not base64: %s" % e)
        return {"type": "put_file", "path": req["path"], "base64": data}
    if kind == "get_file":
        check_path(req.get("path"))
        return {"type": "get_file", "path": req["path"],
                "max_bytes": min(integer("max_bytes", 0, 1 << 62), MAX_GET_BYTES)}
    if kind == "list_files":
        return {"type": "list_files"}
    if not isinstance(kind, str):
        raise RequestError("request must have a string 'type'")
    raise RequestError("unknown request type %r (cell, put_file, get_file, list_files)"
                       % kind[:64])


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
    return []


def node_path(language):
    cmd = language.config.get("command") or []
    if cmd and os.path.basename(cmd[0]) == "node":
        return cmd[0]
    return "/usr/bin/node"


def serve(language):
    """S from start-up on; returns the exit status."""
    kind = session_kind(language)
    if kind is None:
        write_frame(1, {"type": "fatal", "message": "sessions are not offered in %s"
                        % language.name, "oom_killed": False})
        return 2
    os.umask(0o077)
    # What K starts with, set once here: S itself neither reads the environment nor handles
    # a signal.
    os.environ.clear()
    os.environ.update(CHILD_ENV)
    os.environ.update(language.env)
    os.environ["MPLBACKEND"] = "Agg"
    # matplotlib's font cache: in /tmp, not in the session's files (HOME is /work).
    os.environ["MPLCONFIGDIR"] = "/tmp/.matplotlib"
    reset_signals()
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
            write_frame(1, kernel.serve(req))
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


def pids_limit_hits():
    """How often the pids cgroup refused a fork (cgroup v1 pids.events "max"), or None."""
    for line in (read_cgroup(PIDS_EVENTS) or b"").split(b"\n"):
        if line.startswith(b"max "):
            try:
                return int(line.split()[1])
            except ValueError:
                return None
    return None


def describe_status(status):
    if status is None:
        return "ended (its status is unknown)"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = "signal %d" % sig
        return "was killed by signal %d (%s)" % (sig, name)
    return "exited with status %d" % os.WEXITSTATUS(status)


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
                kernel_main((req_r, rep_w, in_r, out_w, err_w), kind, language)
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
        ms = max(0, int(timeout * 1000) + 1)
        dead = False
        for fd, ev in poller.poll(ms):
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


class KernelGone(Exception):
    """The kernel's shell or node child died: the session is over."""


def kernel_main(fds, kind, language):
    """K: drops to the program's uid as the runner's P does, starts the kind's kernel and
    serves S's requests until S closes the pipe. Never returns."""
    req_r, rep_w, in_r, out_w, err_w = fds
    code = 70
    try:
        become_program(in_r, out_w, err_w, keep=(req_r, rep_w))
        reset_signals()
        pid = os.getpid()
        kernel = {"python": PythonKernel, "bash": BashKernel,
                  "javascript": NodeKernel}[kind](req_r, rep_w, language)
        try:
            kernel.start()
            write_frame(rep_w, {"pid": pid, "ready": True, "interpreter": kernel.child})
            while True:
                raw = read_frame(req_r)
                if raw is None:
                    code = 0
                    break
                msg = None
                try:
                    msg = json.loads(raw.decode("utf-8"))
                    del raw
                    reply = kernel.handle(msg)
                except KernelGone:
                    raise
                except BaseException as e:
                    if os.getpid() != pid:
                        os._exit(0)
                    reply = {"error": "the kernel failed: %s: %s" % (type(e).__name__, e)}
                    if isinstance(msg, dict) and msg.get("op") == "cell":
                        reply = {"n": msg.get("n"), "status": "error",
                                 "error": {"type": type(e).__name__, "message": str(e),
                                           "traceback": ""}}
                if reply is None:
                    continue
                reply["pid"] = pid
                write_frame(rep_w, reply)
        except KernelGone as e:
            write_frame(rep_w, {"pid": pid, "dead": str(e)})
            code = 0
    except BaseException:
        try:
            import traceback

            os.write(2, traceback.format_exc().encode("utf-8", "replace"))
        except BaseException:
            pass
    os._exit(code)


def walk_work(limit=MAX_WALK):
    """{relative path: (mtime_ns, size, inode)} of the regular files below /work, symlinks
    not followed, names that are not UTF-8 left out; at most `limit` entries looked at."""
    found = {}
    stack = [("", WORKDIR)]
    seen = 0
    while stack:
        rel, path = stack.pop()
        try:
            it = os.scandir(path)
        except OSError:
            continue
        with it:
            for entry in it:
                seen += 1
                if seen > limit:
                    return found
                name = rel + entry.name
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append((name + "/", entry.path))
                    elif entry.is_file(follow_symlinks=False) and is_utf8_name(name):
                        st = entry.stat(follow_symlinks=False)
                        found[name] = (st.st_mtime_ns, st.st_size, st.st_ino)
                except OSError:
                    pass
    return found


def changed_files(before, after):
    return sorted(p for p, sig in after.items() if before.get(p) != sig)[:MAX_FILES_CHANGED]


class KernelBase:
    """What every kind of K does: the file requests (as PROGRAM_UID)."""

    child = None

    def __init__(self, req_r, rep_w, language):
        self.req_r = req_r
        self.rep_w = rep_w
        self.language = language
        self.pid = os.getpid()

    def begin(self, n):
        """Before a cell runs: the snapshot of /work its files_changed is measured against,
        K's own streams flushed (what a background thread printed between cells is not the
        cell's), then "begin" to S, which writes the start markers and says "go". Returns
        the snapshot."""
        before = walk_work()
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                stream.flush()
            except BaseException:
                pass
        write_frame(self.rep_w, {"pid": self.pid, "n": n, "begin": True})
        while True:
            raw = read_frame(self.req_r)
            if raw is None:
                os._exit(0)  # S is gone
            msg = json.loads(raw.decode("utf-8"))
            if isinstance(msg, dict) and msg.get("op") == "go" and msg.get("n") == n:
                return before

    def start(self):
        pass

    def handle(self, msg):
        if not isinstance(msg, dict):
            return {"error": "not a request"}
        op = msg.get("op")
        if op == "cell":
            return self.cell(msg["n"], msg["code"])
        if op == "interrupt":
            return None  # late: the cell already ended
        if op == "put_file":
            return self.put_file(msg["path"], msg["base64"])
        if op == "get_file":
            return self.get_file(msg["path"], msg["max_bytes"])
        if op == "list_files":
            return self.list_files()
        return {"error": "unknown operation"}

    @staticmethod
    def put_file(path, data):
        parts = path.split("/")
        try:
            content = binascii.a2b_base64(data)
        except binascii.Error as e:
            return {"error": "not base64: %s" % e}
        fd = None
        try:
            fd = os.open(WORKDIR, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            for i, part in enumerate(parts[:-1]):
                try:
                    os.mkdir(part, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass
                try:
                    nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                                  | os.O_CLOEXEC, dir_fd=fd)
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):
                        return {"error": "%s is not a folder (a file or a symbolic link)"
                                % "/".join(parts[:i + 1])}
                    raise
                os.close(fd)
                fd = nxt
            try:
                leaf = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                               | os.O_CLOEXEC | os.O_NONBLOCK, 0o666, dir_fd=fd)
            except OSError as e:
                if e.errno == errno.ELOOP:
                    return {"error": "%s is a symbolic link (not followed)" % path}
                if e.errno == errno.EISDIR:
                    return {"error": "%s is a folder" % path}
                raise
            try:
                if not stat.S_ISREG(os.fstat(leaf).st_mode):
                    return {"error": "%s is not a regular file" % path}
                write_all(leaf, content)
            finally:
                os.close(leaf)
            return {"ok": True}
        except OSError as e:
            return {"error": "%s: %s" % (path, e.strerror or e)}
        finally:
            if fd is not None:
                os.close(fd)

    @staticmethod
    def get_file(path, max_bytes):
        full = os.path.join(WORKDIR, path)
        real = os.path.realpath(full)
        if real == WORKDIR:
            return {"error": "%s is a folder" % path}
        if not real.startswith(WORKDIR + "/"):
            return {"error": "%s is a symbolic link leading out of %s" % (path, WORKDIR)}
        parts = real[len(WORKDIR) + 1:].split("/")
        fd = None
        try:
            fd = os.open(WORKDIR, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            for part in parts[:-1]:
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                              dir_fd=fd)
                os.close(fd)
                fd = nxt
            leaf = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                           dir_fd=fd)
            os.close(fd)
            fd = leaf
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                return {"error": "%s is a folder" % path}
            if not stat.S_ISREG(st.st_mode):
                return {"error": "%s is not a regular file" % path}
            if st.st_size > max_bytes:
                return {"error": "%s is %d bytes, over max_bytes (%d)"
                        % (path, st.st_size, max_bytes)}
            chunks, got = [], 0
            while got <= max_bytes:
                chunk = os.read(fd, min(1 << 20, max_bytes + 1 - got))
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
            if got > max_bytes:
                return {"error": "%s is over max_bytes (%d)" % (path, max_bytes)}
            data = b"".join(chunks)
            return {"file": {"path": path, "size": len(data),
                             "base64": binascii.b2a_base64(data, newline=False).decode("ascii")}}
        except FileNotFoundError:
            return {"error": "%s: no such file" % path, "missing": True}
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                return {"error": "%s: a symbolic link on the path cannot be followed (a loop, "
                        "or it changed while the file was opened)" % path}
            return {"error": "%s: %s" % (path, e.strerror or e)}
        finally:
            if fd is not None:
                os.close(fd)

    @staticmethod
    def list_files():
        found = walk_work()
        files = []
        for path in sorted(found)[:MAX_LISTED]:
            mtime_ns, size, _ = found[path]
            files.append({"path": path, "size": size, "modified_ms": max(0, mtime_ns // 1000000)})
        return {"files": files}


# -- Python


class _CellState:
    in_cell = False
    pending = False


CELL = _CellState()


def _sigint(signum, frame):
    """K's SIGINT handler (Python kind): a KeyboardInterrupt in the cell, once; outside a cell
    remembered until the next cell starts (an interrupt that came before the cell ran)."""
    if CELL.in_cell:
        CELL.in_cell = False
        raise KeyboardInterrupt
    CELL.pending = True


def _noop(signum, frame):
    pass


class PythonKernel(KernelBase):
    """K runs the cells in its own interpreter, in one __main__."""

    def start(self):
        import builtins
        import types

        from codegen_in_process import stdio_objects

        sys.stdin, sys.stdout, sys.stderr = stdio_objects()
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
        sys.argv = [""]
        while CODEGEN_DIR in sys.path:
            sys.path.remove(CODEGEN_DIR)
        sys.path.insert(0, WORKDIR)
        sys.dont_write_bytecode = True
        main = types.ModuleType("__main__")
        main.__builtins__ = builtins
        main.__cached__ = None
        sys.modules["__main__"] = main
        self.main = main
        self.outputs = None  # the running cell's display outputs
        self.display_bytes = 0
        self.loop = None
        builtins.display = self.display
        signal.signal(signal.SIGINT, _sigint)

    # display()

    def display(self, *objs, **_ignored):
        """Shows each object in the cell's answer: image/png for an object with _repr_png_ or
        a matplotlib Figure, else text/plain (its repr)."""
        for obj in objs:
            self.add_output(self.rich(obj))

    def add_output(self, item):
        if self.outputs is None:
            return
        size = len(item.get("base64") or item.get("text") or "")
        if self.display_bytes + size > MAX_DISPLAY_BYTES:
            if self.display_bytes <= MAX_DISPLAY_BYTES:
                self.outputs.append({"mime": "text/plain", "text": "[display output dropped: "
                                     "over %d MiB in one cell]" % (MAX_DISPLAY_BYTES >> 20)})
                self.display_bytes = MAX_DISPLAY_BYTES + 1
            return
        self.display_bytes += size
        self.outputs.append(item)

    @staticmethod
    def png(data):
        return {"mime": "image/png", "base64": binascii.b2a_base64(bytes(data), newline=False)
                .decode("ascii")}

    def rich(self, obj):
        figure = sys.modules.get("matplotlib.figure")
        try:
            if figure is not None and isinstance(obj, figure.Figure):
                return self.png(self.figure_png(obj))
            method = getattr(obj, "_repr_png_", None)
            if callable(method) and not isinstance(obj, type):
                data = method()
                if isinstance(data, (bytes, bytearray)):
                    return self.png(data)
        except Exception:
            pass
        try:
            text = repr(obj)
        except Exception as e:
            text = "<repr failed: %s: %s>" % (type(e).__name__, e)
        return {"mime": "text/plain", "text": cut_text(text, MAX_VALUE_BYTES)}

    @staticmethod
    def figure_png(fig):
        import io

        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight")
        return buf.getvalue()

    def collect_figures(self):
        """Every open pyplot figure as an image/png output; then all are closed."""
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return
        try:
            for num in plt.get_fignums():
                try:
                    self.add_output(self.png(self.figure_png(plt.figure(num))))
                except Exception as e:
                    self.add_output({"mime": "text/plain", "text": "[figure %s could not be "
                                     "rendered: %s: %s]" % (num, type(e).__name__, e)})
        except Exception:
            pass
        finally:
            try:
                plt.close("all")
            except Exception:
                pass

    # cells

    def run_code(self, code):
        import inspect

        result = eval(code, self.main.__dict__)
        if code.co_flags & inspect.CO_COROUTINE:
            import asyncio

            if self.loop is None or self.loop.is_closed():
                self.loop = asyncio.new_event_loop()
            result = self.loop.run_until_complete(result)
        return result

    def cell(self, n, code):
        import linecache

        filename = "<cell %d>" % n
        # The source for tracebacks and inspect.getsource (mtime None: never checked, kept).
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        # An interrupt still pending is the last cell's (S interrupts a cell only after its
        # "go"); one that comes from here on is this cell's, even before it runs.
        CELL.pending = False
        before = self.begin(n)
        self.outputs = outputs = []
        self.display_bytes = 0
        status, value, error = "ok", None, None
        try:
            CELL.in_cell = True
            try:
                if CELL.pending:
                    CELL.in_cell = False
                    raise KeyboardInterrupt
                flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
                tree = ast.parse(code, filename, "exec")
                last = None
                if tree.body and isinstance(tree.body[-1], ast.Expr):
                    last = ast.Expression(tree.body.pop().value)
                self.run_code(compile(tree, filename, "exec", flags=flags, dont_inherit=True))
                if last is not None:
                    result = self.run_code(compile(last, filename, "eval", flags=flags,
                                                   dont_inherit=True))
                    if result is not None:
                        value = cut_text(repr(result), MAX_VALUE_BYTES)
            finally:
                CELL.in_cell = False
        except BaseException as e:
            CELL.in_cell = False
            if os.getpid() != self.pid:
                self.forked_exit(e)
            status = "error"
            error = self.describe(e)
        if os.getpid() != self.pid:
            self.forked_exit(None)
        self.collect_figures()
        self.outputs = None
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                stream.flush()
            except BaseException:
                pass
        return {"n": n, "status": status, "value": value, "error": error, "exit_code": None,
                "display": outputs, "files_changed": changed_files(before, walk_work())}

    @staticmethod
    def forked_exit(exc):
        """A process the cell forked came back here: it ends as a script's end would."""
        code = 0
        if isinstance(exc, SystemExit):
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        elif exc is not None:
            code = 1
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        os._exit(code & 0xFF)

    @staticmethod
    def describe(e):
        import traceback

        tb = e.__traceback__
        # The cell's own frames on (the kernel's and ast's are cut), and not the kernel's
        # SIGINT handler at the end.
        while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell "):
            tb = tb.tb_next
        try:
            te = traceback.TracebackException(type(e), e, tb)
            while te.stack and te.stack[-1].filename == __file__:
                te.stack.pop()
            text = "".join(te.format())
        except BaseException:
            text = ""
        try:
            message = str(e)
        except BaseException:
            message = "<unprintable>"
        return {"type": type(e).__qualname__, "message": cut_text(message, MAX_MESSAGE_BYTES),
                "traceback": clean_text(text, MAX_TRACEBACK_BYTES, tail=True)}


# -- bash and node: an interpreter child of K


class ChildKernel(KernelBase):
    """K with a long-lived interpreter child (bash, node) in K's process group, on K's std
    streams; K sends it cells and reads their status over two pipes of their own."""

    what = "the interpreter"

    def start(self):
        from codegen_exec import spawn

        signal.signal(signal.SIGINT, _noop)  # K stays; a handler is reset at the child's exec
        cmd_r, self.cmd_w = os.pipe()
        self.st_r, st_w = os.pipe()
        self.child = spawn(self.argv(), self.placed(cmd_r, st_w))
        os.close(cmd_r)
        os.close(st_w)
        os.set_blocking(self.st_r, False)
        try:
            self.pidfd = os.pidfd_open(self.child)
        except (AttributeError, OSError):
            self.pidfd = None  # seccomp or an old kernel: look every 50 ms instead
        self.lines = bytearray()
        self.exit_status = None

    def command(self, text):
        try:
            write_all(self.cmd_w, text.encode("utf-8"))
        except BrokenPipeError:
            status = self.await_exit()
            raise KernelGone(self.death(status) if status is not None
                             else "%s closed the kernel's command channel" % self.what)

    def death(self, status):
        return "%s %s" % (self.what, describe_status(status))

    def read_status(self):
        """Reads what the child wrote on its status pipe; False at its end (no writer left)."""
        while True:
            try:
                data = os.read(self.st_r, CHUNK)
            except BlockingIOError:
                return True
            if not data:
                return False
            self.lines += data
            if len(self.lines) > MAX_REPLY:
                raise KernelGone("%s wrote too much on its status pipe" % self.what)

    def child_status(self):
        """The child's wait status once it has ended (it is reaped then), else None."""
        if self.exit_status is None:
            done, status = os.waitpid(self.child, os.WNOHANG)
            if done == self.child:
                self.exit_status = status
        return self.exit_status

    def await_exit(self, within=1.0):
        """The child's wait status, waiting a little for an exit that is under way (a pipe's
        end comes an instant before the exit can be waited for); None if it lives on."""
        limit = time.monotonic() + within
        while self.child_status() is None and time.monotonic() < limit:
            time.sleep(0.01)
        return self.exit_status

    def next_line(self, deadline, on_request=None, on_tick=None):
        """The child's next status line (bytes, without the newline); watches the child's
        life, and S's pipe for interrupts. None past `deadline` (a monotonic time or None).
        Raises KernelGone once the child has ended and every line it wrote was taken."""
        while True:
            i = self.lines.find(b"\n")
            if i >= 0:
                line = bytes(self.lines[:i])
                del self.lines[:i + 1]
                return line
            if self.exit_status is not None:
                raise KernelGone(self.death(self.exit_status))
            poller = select.poll()
            poller.register(self.st_r, select.POLLIN)
            poller.register(self.req_r, select.POLLIN)
            if self.pidfd is not None:
                poller.register(self.pidfd, select.POLLIN)
            wait = 50 if self.pidfd is None else 500
            if deadline is not None:
                wait = min(wait, max(0, int((deadline - time.monotonic()) * 1000) + 1))
            events = poller.poll(wait)
            ended = eof = False
            for fd, _ in events:
                if fd == self.st_r:
                    eof = not self.read_status() or eof
                elif fd == self.req_r:
                    raw = read_frame(self.req_r)
                    if raw is None:
                        os._exit(0)  # S is gone
                    msg = json.loads(raw.decode("utf-8"))
                    if on_request is not None:
                        on_request(msg)
                elif fd == self.pidfd:
                    ended = True
            if ended or eof or self.pidfd is None:
                if ended:
                    eof = not self.read_status() or eof  # its last words
                status = self.await_exit() if eof else self.child_status()
                if status is None and eof:
                    raise KernelGone("%s closed the kernel's status channel" % self.what)
                if status is not None:
                    continue  # the lines it wrote first, then its end
            if on_tick is not None:
                on_tick()
            if deadline is not None and time.monotonic() > deadline and not events:
                return None


class BashKernel(ChildKernel):
    """One interactive bash for the session: each cell is written to a file that the shell
    sources at its top level (`builtin source FILE </dev/null; __codegen_done N $?`), so
    variables, functions, options, traps and the working directory persist. The shell
    reports each cell's status on a descriptor of its own (>= 10). An interrupt (SIGINT to
    the group) makes the interactive shell abandon the command line; K then has it report
    the status of the abandoned cell (`__codegen_done N $?`, repeated every 0.5 s until it
    comes)."""

    what = "the shell"

    INIT = (
        "PS1= PS2= PS0= PS4='+ ' PROMPT_COMMAND=; unset HISTFILE; set +o history +H +m; "
        "exec {__codegen_fd}>&4 4>&-\n"
        "__codegen_done() { builtin printf '%s %s\\n' \"$1\" \"$2\" >&\"$__codegen_fd\"; "
        "builtin return \"$2\"; }\n"
    )

    def argv(self):
        return [BASH, "--noprofile", "--norc", "--noediting", "-i"]

    def placed(self, cmd_r, st_w):
        # stdin is the command pipe: the shell reads its commands there (cells get /dev/null).
        return {0: cmd_r, 1: 1, 2: 2, 4: st_w}

    def start(self):
        super().start()
        self.command(self.INIT + "__codegen_done 0 0\n")
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            line = self.next_line(deadline)
            if line is None:
                raise KernelGone("the shell did not start within %d s" % START_TIMEOUT_S)
            if line == b"0 0":
                return

    def cell(self, n, code):
        import shlex

        path = os.path.join(BASH_CELL_DIR, "cell-%d.sh" % n)
        try:
            os.makedirs(BASH_CELL_DIR, mode=0o700, exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(code)
        except OSError as e:
            return {"n": n, "status": "error", "exit_code": None,
                    "error": {"type": "OSError", "message": "cannot write the cell to %s: %s"
                              % (BASH_CELL_DIR, e.strerror or e), "traceback": ""}}
        before = self.begin(n)
        self.command("builtin source %s </dev/null; __codegen_done %d $?\n"
                     % (shlex.quote(path), n))
        interrupted = [None]

        def on_request(msg):
            if isinstance(msg, dict) and msg.get("op") == "interrupt" and msg.get("n") == n:
                interrupted[0] = 0.0

        def on_tick():
            # After an interrupt: have the shell say how the abandoned cell ended (again,
            # until it does: a line read while the interrupt was handled may be dropped).
            if interrupted[0] is not None and time.monotonic() >= interrupted[0]:
                self.command("__codegen_done %d $?\n" % n)
                interrupted[0] = time.monotonic() + INTERRUPT_REPEAT_S

        status = None
        while status is None:
            line = self.next_line(None, on_request, on_tick)
            parts = line.split()
            if len(parts) == 2 and parts[0] == str(n).encode():
                try:
                    status = int(parts[1])
                except ValueError:
                    status = 1
        try:
            os.unlink(path)
        except OSError:
            pass
        reply = {"n": n, "status": "ok" if status == 0 else "error", "value": None,
                 "error": None, "exit_code": status, "display": [],
                 "files_changed": changed_files(before, walk_work())}
        if status != 0:
            reply["error"] = {"type": "ExitStatus", "message": "exit status %d" % status,
                              "traceback": ""}
        return reply

    def death(self, status):
        text = "the shell %s" % describe_status(status)
        if status is not None and os.WIFEXITED(status):
            text += " (`exit` in a cell ends the session's shell)"
        return text


class NodeKernel(ChildKernel):
    """One node for the session, running session_kernel.js: cells as JSON lines on its fd 3,
    their outcome as JSON lines on its fd 4."""

    what = "node"

    def argv(self):
        return [node_path(self.language), NODE_KERNEL]

    def placed(self, cmd_r, st_w):
        return {0: 0, 1: 1, 2: 2, 3: cmd_r, 4: st_w}

    def start(self):
        super().start()
        line = self.next_line(time.monotonic() + START_TIMEOUT_S)
        if line is None:
            raise KernelGone("node did not start")
        try:
            ready = json.loads(line.decode("utf-8"))
        except ValueError:
            ready = None
        if not isinstance(ready, dict) or ready.get("ready") is not True:
            raise KernelGone("node did not start: %r" % line[:200])

    def cell(self, n, code):
        before = self.begin(n)
        self.command(json.dumps({"n": n, "code": code}) + "\n")
        while True:
            line = self.next_line(None)
            try:
                r = json.loads(line.decode("utf-8", "replace"))
            except ValueError:
                continue
            if isinstance(r, dict) and r.get("n") == n:
                break
        error = r.get("error")
        return {"n": n, "status": "ok" if r.get("status") == "ok" else "error",
                "value": r.get("value") if isinstance(r.get("value"), str) else None,
                "error": error if isinstance(error, dict) else None, "exit_code": None,
                "display": [], "files_changed": changed_files(before, walk_work())}

    def death(self, status):
        text = "node %s" % describe_status(status)
        if status is not None and os.WIFEXITED(status):
            text += " (process.exit() in a cell ends the session's node)"
        return text
