"""Stateful sessions (stdlib only, Python 3.11): the in-container side of protocol "session/3",
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
     K also does the file requests, checkpoints and restores, as PROGRAM_UID: nothing the
     worker asks for is read or written with more rights than the program has.
  Sessions are offered for the language.json names python, python-sci, bash and
  javascript; in any other image S answers the fatal "sessions are not offered in <name>"
  and exits.

Protocol "session/3" ("session/1" plus checkpoint and restore, and a cell that asks for the
checkpoint after it): frames as in codegen_protocol
(a 4-byte big-endian length, then that many bytes of a JSON object; S's frames are pure ASCII).

  S -> worker  {"type": "ready", "protocol": "session/3", "language": <language.json name>}
               once K is up (and its shell or node child answers).
  worker -> S  one request at a time; S answers each before it reads the next:
    {"type": "cell", "code": str, "timeout_ms": int >= 1, "max_output_bytes": int >= 0,
     "checkpoint": null | {"max_bytes": int >= 0, "full": bool}}
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
         With "checkpoint" not null, the cell_result is followed, without another request,
         by the answer to {"type": "checkpoint", ...those two fields} (below): one request
         less through the Docker engine for the worker that checkpoints after every cell.
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
    {"type": "checkpoint", "max_bytes": int >= 0, "full": bool}, at any time between requests
      -> {"type": "checkpoint",
          "state": base64 | null,   the kernel's state (see "Checkpoints" below): an opaque
                                    blob in the kernel kind's own format, which only a later
                                    restore in the same image reads; null when it is
                                    byte-identical to the state of the last checkpoint
                                    answered in this session and "full" is false
          "files": base64 | null,   an uncompressed tar (POSIX pax) of the folders, regular
                                    files and symbolic links below /work (modes kept, owners
                                    not); null when /work is unchanged since the last
                                    checkpoint answered and "full" is false
          "state_bytes": int,       the decoded sizes of the two (0 for a null)
          "files_bytes": int,
          "skipped": [{"name": str, "reason": str}]}
                                    every name of the state, and every entry of /work, that
                                    will not come back after a restore, and why
         The first checkpoint of a session, and every one with "full": true, has both. Over
         max_bytes (state_bytes + files_bytes; max_bytes above 128 MiB counts as 128 MiB):
         {"type": "error", "message": "the checkpoint is N bytes, over its limit of M bytes
         (worker.sessions.checkpoint_max_bytes)", "too_large": true}, N exact; the next
         checkpoint compares with the last one answered, as if this one had not been asked.
    {"type": "restore", "state": base64, "files": base64 | null, "cells": int >= 0}
      -> {"type": "restored", "skipped": [{"name": str, "reason": str}]}
         Only as the session's first request (before any cell, file request or checkpoint;
         a refused restore does not count), else an error answer. "files" first: extracted
         into /work (empty: the container is new) as PROGRAM_UID; then "state", restored
         into the fresh kernel; "skipped": what did not come back, and why (a definition
         that fails, a module that no longer imports, a link that leads out of /work once
         all are in place...). S's cell counter goes on from "cells": the next cell is
         <cell cells+1>. A state that cannot be read at all (damaged, another kind's) or
         files that cannot be extracted (not a tar, a member that would leave /work, a full
         disk) -> an error answer: nothing is restored, /work is emptied again and the
         session goes on, fresh.
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
  Python cells run in __main__ with sys.path[0] = /work, sys.path[1] = /opt/packages (the
  session's packages, mounted read-only by the worker when it has any) and sys.argv = [""]; the std
  streams are those of a fresh python3 on pipes (stdout block-buffered: K flushes it after
  each cell). Top-level await is allowed (one event loop, kept for the session). A process
  forked by a cell that returns to the kernel exits there (status 0, or its SystemExit's).
  display(*objs): a builtin; an object with _repr_png_ (returning bytes) or a matplotlib
  Figure gives image/png, anything else text/plain (its repr, at most 64 KiB). At most
  32 MiB of display output per cell; past it one text/plain note says what was dropped.
  display() outside a cell (a background thread between cells) is dropped.
  Deadlines of S's own: K has 60 s to start, 30 s to answer a file request or a checkpoint
  or to begin a cell, 45 s to restore, and S 10 s to get each pair of markers through; past
  any of them the session ends (fatal). A walk of /work (files_changed, list_files) looks
  at 200000 entries at most.
  A dead K is noticed when it matters: S answers the request during which K died with
  "fatal"; K dying between requests (a background thread's os._exit) makes the next
  request's answer the fatal one. S never writes a frame that was not asked for.

Checkpoints

  So that another worker can bring a session back when the one holding it is lost: it
  starts a new container and restores the last checkpoint it has into it. What a state
  holds, per kernel kind (the blob starts with the line "codegen-session-state <kind> 1"):
    python, python-sci  (K runs the cells: the blob is K's own, from its __main__)
      - modules bound to names (import numpy as np): by module name, imported again;
      - functions and classes defined in cells (__module__ "__main__", code from a
        "<cell N>" file; a functools.wraps wrapper by what it wraps; a decorator's wrapper
        without wraps by the last decorated definition of that name): by their source, the
        def / class statement (decorators included) cut out of the cell's source, which
        linecache holds; restored by running it again under the same "<cell N>" name at
        the same line numbers (newlines before it; one indented below an if / try / with
        under an `if True:`), with the cell's __future__ flags, and the cells' sources put
        back into linecache: tracebacks and inspect.getsource show the code as before.
        Also `name = lambda ...` statements. A function or class made inside a function
        (a closure) cannot be;
      - every other value of __main__'s names by pickle (protocol 5), all of them with ONE
        Pickler (one memo: `a = b = []` stays one list), dumped name by name so that a
        restore binds each as it loads; a module inside a value pickles by its name
        (reducer_override); values that refer to cell functions or classes pickle them by
        reference. Only when the whole dump fails is each name tried alone, to find and
        leave out the unpicklable ones (an open file, a generator, a thread, a lock, a
        socket: whatever pickle refuses, in "skipped" with why);
      - the state of random's generator, and of numpy.random's legacy global one when numpy
        is imported: set last, so draws go on as they would have without the loss;
      - the working directory (chdir again if it exists), and sys.path (set again before
        the modules are imported).
      Not: __main__'s own names (__builtins__, __name__, ...), a display() or an event loop
      (made again as needed), what a value holds outside Python (a C extension's handle),
      numpy views (a view comes back as an array of its own, as with any pickle).
      Restore order: sys.path, the working directory, the modules, the definitions (one
      that misses a name is tried again later), the values (a definition still pending
      runs when a value needs it: find_class), the definitions still pending, the
      generators. Running
      definitions and unpickling runs the program's code (decorators, class bodies,
      __setstate__): K does it, as PROGRAM_UID, in the sandbox, and only with the blob of
      its own session's checkpoint; S never reads a blob, it only bounds it and carries it
      in base64. A value that fails to load is skipped, and so is one that shares an
      object with it (see ValueLoader); the others still load.
    bash  (K asks the shell through its command pipe, as it runs a cell: a script sourced
          at the shell's top level that writes what it finds to a file, forking nothing)
      - variables (declare -p: attributes kept, so exported-ness, integer, arrays and
        associative arrays), but bash's own and special ones (BASH, BASH_*, BASHOPTS,
        BASHPID, PWD, OLDPWD, SHLVL, PPID, UID, EUID, RANDOM, SRANDOM, SECONDS, LINENO,
        HISTCMD and bash's other HIST* settings, FUNCNAME, GROUPS, PIPESTATUS, DIRSTACK,
        EPOCHREALTIME, EPOCHSECONDS, SHELLOPTS, COLUMNS, LINES, COMP_WORDBREAKS, HOSTNAME,
        HOSTTYPE, MACHTYPE, OSTYPE, OPTERR, OPTIND, MAILCHECK, PS0, PS1, PS2, PS4,
        PROMPT_COMMAND, _);
      - functions (declare -f; exported ones exported again), aliases, the traps (trap -p),
        the shopt -p and set +o options that differ from the shell's at its start, and the
        working directory.
      The blob holds the restore script: one `eval` per item, which the new shell sources
      at its top level (shopt options first, set options last); one it refuses is in
      "skipped". Running background jobs are in "skipped" (a job is not restored).
    javascript  (session_kernel.js builds and reads the blob; see its header)
      own properties of the context's global object that cells added, top-level let /
      const / class bindings, values require() gave (by the id required), functions and
      classes by their source text, other values by ONE v8.serialize, the working
      directory; limits there.
  The files: K walks /work (symbolic links not followed; at most 200000 entries, else the
  checkpoint is refused) and tars folders, regular files and the symbolic links that stay
  inside /work, by their text and where they lead (others are in "skipped", as are FIFOs,
  sockets, devices, unreadable files and names that are not UTF-8). "Unchanged" compares a
  sha256 of the walk, path -> (type, size, mtime_ns, inode, mode) and link targets, so a
  deletion is a change too; the state's is a sha256 of the blob. K keeps both digests of
  the last checkpoint answered: S tells it ("checkpoint_end") whether it answered with
  this one (not when it found K's chunks malformed or over max_bytes).
  Bounds: K measures the blob and the tar exactly but keeps neither past max_bytes (a tar
  over its budget no longer reads files: their sizes count), and sends them in chunk
  frames of 1 MiB; S decodes and counts them as they come, keeps nothing once the total
  is over max_bytes, and writes its answer in pieces, base64-encoding as it goes: S holds a
  checkpoint once, decoded (plus what one wake-up reads of K's frames). A restore's files
  are extracted by hand, not by tarfile's extract (Debian bookworm's 3.11.2 has no
  extraction filter): every member is checked before anything is written (no absolute
  name, no "." / ".." / empty component, nothing below a link of the archive, no link
  whose text leaves /work, only folders, regular files and links), each path is opened
  component by component with O_NOFOLLOW, folders get their modes last (deepest first),
  and once all is in place a link that leads out of /work through another is removed (in
  "skipped").

Inside: S and K speak frames too (the same codec), over two pipes. S -> K: {"op": "cell",
"n", "code"}, {"op": "go", "n"}, {"op": "interrupt", "n"} (bash), {"op": "put_file", "path",
"base64"}, {"op": "get_file", "path", "max_bytes"}, {"op": "list_files"}, {"op":
"checkpoint", "max_bytes", "full"}, {"op": "checkpoint_end", "commit": bool} (no answer),
{"op": "restore", "state", "files"}. K -> S: every frame carries K's "pid" (a frame from
another process that holds the pipe, such as a forked child, is ignored): {"ready": true,
"interpreter": pid|null}, a cell's {"n", "begin": true}, then its {"n", "status", "value",
"error", "exit_code", "display", "files_changed"} (or that alone when it failed before it
began), a file request's {"ok": true} / {"file": {"path", "size", "base64"}} / {"files":
[...]} / {"error": str}, a checkpoint's {"chunk": "state" | "files", "base64"} frames then
{"checkpoint": {"state": bool, "files": bool, "skipped"}} (which parts it sent) / {"too_large":
N} / {"error": str}, a restore's {"restored": true, "skipped"} / {"error": str, "refused":
true} (nothing was restored), or {"dead": str} when the shell or node died. K runs the
program's code (Python) or shares its uid, so S checks every field of every frame from K
and bounds what it reads.
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

PROTOCOL = "session/3"
# Where the worker mounts a session's installed packages (sandbox::PACKAGES_DIR).
PACKAGES_DIR = "/opt/packages"
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
# A checkpoint's limit at most: its answer, and the restore that brings it back, in base64
# stay well under codegen_protocol.MAX_FRAME.
MAX_CHECKPOINT_BYTES = 128 << 20
# Decoded bytes of one "chunk" frame of a checkpoint from K to S.
CHECKPOINT_CHUNK = 1 << 20
# "skipped" (checkpoint, restore): entries, and the UTF-8 bytes of a name and of a reason.
MAX_SKIPPED = 10000
MAX_SKIPPED_NAME = 1024
MAX_SKIPPED_REASON = 2048
MAX_CELLS = 1 << 40
# The first line of every state blob: its kernel kind and the blob format's version.
STATE_MAGIC = b"codegen-session-state %s 1\n"
WORKING_DIRECTORY = "<working directory>"

START_TIMEOUT_S = 60.0
FILE_TIMEOUT_S = 30.0
# A restore may import heavy modules (numpy, pandas) and run the program's class bodies;
# under the worker's own 60 s for a request (sandbox/src/session.rs), so that the worker
# hears S's fatal answer rather than its own timeout.
RESTORE_TIMEOUT_S = 45.0
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
    return check_request(req)


def check_request(req):
    """A decoded request, checked: the fields S uses, and nothing else."""
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
        then = req.get("checkpoint")
        if then is not None:
            if not isinstance(then, dict):
                raise RequestError("'checkpoint' must be null or an object")
            then = check_request(dict(then, type="checkpoint"))
        return {"type": "cell", "code": code,
                "timeout_ms": integer("timeout_ms", 1, MAX_TIMEOUT_MS),
                "max_output_bytes": integer("max_output_bytes", 0, MAX_OUTPUT_BYTES),
                "checkpoint": then}
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
    if kind == "checkpoint":
        if not isinstance(req.get("full"), bool):
            raise RequestError("'full' must be a boolean")
        return {"type": "checkpoint", "full": req["full"],
                "max_bytes": min(integer("max_bytes", 0, 1 << 62), MAX_CHECKPOINT_BYTES)}
    if kind == "restore":
        for name, nullable in (("state", False), ("files", True)):
            data = req.get(name)
            if data is None and nullable:
                continue
            if not isinstance(data, str):
                raise RequestError("'%s' must be a string%s" % (name, " or null" if nullable
                                                                 else ""))
            try:
                binascii.a2b_base64(data, strict_mode=True)
            except (binascii.Error, ValueError) as e:
                raise RequestError("'%s' is not base64: %s" % (name, e))
        return {"type": "restore", "state": req["state"], "files": req.get("files"),
                "cells": integer("cells", 0, MAX_CELLS)}
    if not isinstance(kind, str):
        raise RequestError("request must have a string 'type'")
    raise RequestError("unknown request type %r (cell, put_file, get_file, list_files, "
                       "checkpoint, restore)" % kind[:64])


def skipped_list(raw):
    """The "skipped" of a checkpoint or restore from K, checked and bounded: at most
    MAX_SKIPPED entries (then one that says how many more there were)."""
    out = []
    items = raw if isinstance(raw, list) else []
    for i, item in enumerate(items):
        if len(out) >= MAX_SKIPPED:
            out.append({"name": "...", "reason": "%d more names are not restored (the list "
                        "stops at %d)" % (len(items) - i, MAX_SKIPPED)})
            break
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            out.append({"name": clean_text(item["name"], MAX_SKIPPED_NAME),
                        "reason": clean_text(item.get("reason"), MAX_SKIPPED_REASON)
                        or "it is not restored"})
    return out


def too_large(size, limit):
    return {"type": "error", "too_large": True,
            "message": "the checkpoint is %d bytes, over its limit of %d bytes "
                       "(worker.sessions.checkpoint_max_bytes)" % (size, limit)}


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


# -- checkpoints: what every kind of K shares


def stdlib(name):
    """The module `name`, imported (if it is not yet) with /work off sys.path: in the Python
    kernel sys.path[0] is /work, and a file a cell wrote there must not stand in for a
    module the kernel's own checkpoint code uses."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    import importlib

    saved = list(sys.path)
    sys.path[:] = [p for p in saved if isinstance(p, str) and p
                   and not (os.path.abspath(p) + "/").startswith(WORKDIR + "/")]
    try:
        return importlib.import_module(name)
    finally:
        sys.path[:] = saved


class CheckpointRefused(Exception):
    """A checkpoint K cannot take (an "error" answer; the session goes on)."""


class RestoreRefused(Exception):
    """A restore whose state or files cannot be read at all: nothing is restored (K removes
    what it extracted) and the session goes on, fresh."""


def skip(name, reason):
    return {"name": name, "reason": reason}


def squote(data):
    """`data` (bytes) as one single-quoted shell word."""
    return b"'" + data.replace(b"'", b"'\\''") + b"'"


def work_path(rel):
    return WORKDIR + "/" + rel if rel else WORKDIR


def inside_work(path):
    return path == WORKDIR or path.startswith(WORKDIR + "/")


def link_stays_inside(rel, target):
    """Whether the symbolic link /work/<rel> -> target stays inside /work, both by its text
    (normalized, ".." taken lexically) and where it leads now (realpath)."""
    if not target or "\0" in target:
        return False
    base = os.path.dirname(work_path(rel))
    if not inside_work(os.path.normpath(os.path.join(base, target))):
        return False
    return inside_work(os.path.realpath(work_path(rel)))


def walk_tree(limit=MAX_WALK):
    """What a checkpoint's files hold, by a walk of /work that follows no symbolic link:
    (entries, skipped, digest). entries: [(rel, lstat, link target or None)], each folder
    before what it holds; skipped: what is left out and why; digest: a sha256 of every
    path -> (type, size, mtime_ns, inode, mode) seen (the skipped included), so that any
    change, a deletion too, changes it. More than `limit` entries: CheckpointRefused."""
    hashlib = stdlib("hashlib")
    digest = hashlib.sha256()
    entries, skipped = [], []
    stack = [""]
    seen = 0
    while stack:
        rel = stack.pop()
        try:
            with os.scandir(work_path(rel)) as it:
                found = sorted(it, key=lambda e: e.name)
        except OSError as e:
            skipped.append(skip(work_path(rel) + "/", "its entries cannot be read: %s"
                                % (e.strerror or e)))
            digest.update(b"?%s\0" % os.fsencode(rel))
            continue
        for entry in found:
            seen += 1
            if seen > limit:
                raise CheckpointRefused("/work holds more than %d entries: too many to "
                                        "checkpoint" % limit)
            name = rel + "/" + entry.name if rel else entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # gone since the listing
            digest.update(b"%s\0%o %d %d %d\n" % (os.fsencode(name), st.st_mode, st.st_size,
                                                  st.st_mtime_ns, st.st_ino))
            if not is_utf8_name(name):
                skipped.append(skip(clean_text(work_path(name), MAX_SKIPPED_NAME),
                                    "a file name that is not UTF-8 is not checkpointed"))
                continue
            mode = st.st_mode
            if stat.S_ISDIR(mode):
                entries.append((name, st, None))
                stack.append(name)
            elif stat.S_ISREG(mode):
                entries.append((name, st, None))
            elif stat.S_ISLNK(mode):
                try:
                    target = os.readlink(work_path(name))
                except OSError:
                    continue
                digest.update(os.fsencode(target) + b"\n")
                if is_utf8_name(target) and link_stays_inside(name, target):
                    entries.append((name, st, target))
                else:
                    skipped.append(skip(work_path(name), "a symbolic link leading out of %s "
                                        "(to %s) is not checkpointed"
                                        % (WORKDIR, clean_text(target, 512))))
            else:
                what = ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                        else "a device")
                skipped.append(skip(work_path(name), "%s is not checkpointed (only folders, "
                                    "regular files and symbolic links are)" % what))
    return entries, skipped, digest.hexdigest()


class BoundedSink:
    """A file to write a blob to: keeps what is written while the total stays within
    `limit`, then only counts (so that the size of what is too large is still exact), and
    hashes everything."""

    def __init__(self, limit):
        self.limit = limit
        self.size = 0
        self.pieces = []
        self.hash = stdlib("hashlib").sha256()

    @property
    def over(self):
        return self.size > self.limit

    def write(self, data):
        # Any buffer: the pickler hands a large one over as it is (a PickleBuffer of an
        # array's memory, which a later cell may change: copied).
        view = memoryview(data)
        n = view.nbytes
        self.hash.update(view)
        self.size += n
        if self.size <= self.limit:
            self.pieces.append(bytes(view))
        elif self.pieces:
            self.pieces = []
        return n

    def tell(self):
        return self.size

    def flush(self):
        pass


class Zeros:
    """A file of `n` zero bytes: stands for a file's content once the tar is over its limit
    (its size still counts; nothing is read)."""

    def __init__(self, n):
        self.left = n

    def read(self, n=-1):
        n = self.left if n is None or n < 0 else min(n, self.left)
        self.left -= n
        return bytes(n)


def read_regular(rel, size):
    """At most `size` bytes of the regular file /work/<rel> (not through a link at its end)."""
    fd = os.open(work_path(rel), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "no longer a regular file")
        chunks, got = [], 0
        while got < size:
            chunk = os.read(fd, min(1 << 20, size - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def build_tar(entries, budget):
    """The tar (POSIX pax, uncompressed) of the walked `entries`: (pieces or None when over
    `budget`, its exact size, skipped). Modes and whole-second modification times are kept,
    owners are not. Past the budget no file is read any more: its size alone counts."""
    io = stdlib("io")
    tarfile = stdlib("tarfile")
    sink = BoundedSink(budget)
    skipped = []
    tar = tarfile.open(fileobj=sink, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8")
    for rel, st, target in entries:
        info = tarfile.TarInfo(rel)
        info.mode = stat.S_IMODE(st.st_mode)
        info.mtime = max(0, int(st.st_mtime))
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        content = None
        if stat.S_ISDIR(st.st_mode):
            info.type = tarfile.DIRTYPE
        elif target is not None:
            info.type = tarfile.SYMTYPE
            info.linkname = target
        else:
            info.type = tarfile.REGTYPE
            info.size = st.st_size
            header = len(info.tobuf(tar.format, tar.encoding, tar.errors))
            if sink.size + header + -(-st.st_size // 512) * 512 > budget:
                # Over the budget whatever comes next: only the size counts now.
                content = Zeros(st.st_size)
            else:
                try:
                    data = read_regular(rel, st.st_size)
                except OSError as e:
                    skipped.append(skip(work_path(rel), "it cannot be read: %s"
                                        % (e.strerror or e)))
                    continue
                info.size, content = len(data), io.BytesIO(data)
        tar.addfile(info, content)
    tar.close()
    return (None if sink.over else sink.pieces), sink.size, skipped


def check_member(member, links):
    """Why a tar member may not be extracted into /work (None: it may). links: the names of
    the archive's symbolic links."""
    name = member.name
    parts = name.split("/")
    if (not name or name.startswith("/") or "\0" in name or len(name) > 4096
            or any(p in ("", ".", "..") for p in parts)):
        return "its name %r is not a plain path below %s" % (name[:200], WORKDIR)
    for i in range(1, len(parts)):
        if "/".join(parts[:i]) in links:
            return "it lies below the symbolic link %r" % "/".join(parts[:i])[:200]
    if member.issym():
        target = member.linkname
        base = os.path.dirname(work_path(name))
        if (not target or "\0" in target
                or not inside_work(os.path.normpath(os.path.join(base, target)))):
            return "it is a symbolic link leading out of %s (to %r)" % (WORKDIR, target[:200])
    elif not (member.isdir() or member.isreg()):
        return "it is neither a folder, a regular file nor a symbolic link"
    return None


def open_parent(parts):
    """A descriptor of the folder /work/<parts[:-1]>, made where missing (mode 0700 until
    the end of the extraction), reached without following any symbolic link."""
    fd = os.open(WORKDIR, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            try:
                os.mkdir(part, 0o700, dir_fd=fd)
            except FileExistsError:
                pass
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                          dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def extract_files(data):
    """Extracts a checkpoint's tar into the (empty) /work, as PROGRAM_UID, never following
    a symbolic link: each path is walked component by component with O_NOFOLLOW. Every
    member is checked first: one that is absolute, has a ".." (or "." or empty) component,
    lies below a symbolic link of the archive, is a link whose target leaves /work, or is
    neither a folder, a regular file nor a symbolic link refuses the whole restore
    (RestoreRefused), before anything is written. Returns skipped: links that lead out of
    /work once everything is in place (removed)."""
    io = stdlib("io")
    tarfile = stdlib("tarfile")
    try:
        tar = tarfile.open(fileobj=io.BytesIO(data), mode="r:")
        members = []
        for member in tar:
            members.append(member)
            if len(members) > MAX_WALK:
                raise RestoreRefused("the checkpoint's files hold more than %d entries"
                                     % MAX_WALK)
    except (tarfile.TarError, EOFError, ValueError, OverflowError) as e:
        raise RestoreRefused("the checkpoint's files are not a tar: %s" % e)
    links = {m.name for m in members if m.issym()}
    for member in members:
        why = check_member(member, links)
        if why is not None:
            raise RestoreRefused("the checkpoint's files are refused: member %r: %s"
                                 % (member.name[:200], why))
    folders = []
    try:
        for member in members:
            parts = member.name.split("/")
            fd = open_parent(parts)
            try:
                leaf = parts[-1]
                if member.isdir():
                    try:
                        os.mkdir(leaf, 0o700, dir_fd=fd)
                    except FileExistsError:
                        pass
                    folders.append(member)
                elif member.issym():
                    os.symlink(member.linkname, leaf, dir_fd=fd)
                else:
                    out = os.open(leaf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                                  | os.O_CLOEXEC, 0o600, dir_fd=fd)
                    try:
                        src = tar.extractfile(member)
                        while True:
                            chunk = src.read(1 << 20)
                            if not chunk:
                                break
                            write_all(out, chunk)
                        os.fchmod(out, member.mode & 0o7777)
                        os.utime(out, (member.mtime, member.mtime))
                    finally:
                        os.close(out)
            finally:
                os.close(fd)
        # Folders last, deepest first: a read-only folder must not stop what goes in it.
        for member in sorted(folders, key=lambda m: -m.name.count("/")):
            parts = member.name.split("/")
            fd = open_parent(parts)
            try:
                leaf = os.open(parts[-1], os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                               | os.O_CLOEXEC, dir_fd=fd)
                try:
                    os.fchmod(leaf, member.mode & 0o7777)
                    os.utime(leaf, (member.mtime, member.mtime))
                finally:
                    os.close(leaf)
            finally:
                os.close(fd)
    except (OSError, tarfile.TarError, EOFError) as e:
        raise RestoreRefused("the checkpoint's files cannot be extracted: %s: %s"
                             % (getattr(e, "filename", None) or "", getattr(e, "strerror",
                                                                             None) or e))
    skipped = []
    for member in members:
        # Each link was checked by its text; one that leads out through another link is
        # found only now that all are there (e.g. b -> . and a -> b/..).
        if member.issym() and not link_stays_inside(member.name, member.linkname):
            try:
                os.unlink(work_path(member.name))
            except OSError:
                pass
            skipped.append(skip(work_path(member.name), "the symbolic link leads out of %s "
                                "(to %s); it was removed" % (WORKDIR, member.linkname[:200])))
    return skipped


def clear_work():
    """Empties /work again after a refused restore (the session goes on, fresh)."""
    from codegen_guard import remove_tree_contents

    remove_tree_contents(WORKDIR, [])


class KernelBase:
    """What every kind of K does: the file requests (as PROGRAM_UID), and checkpoints and
    restores around the kind's own state_blob / read_state / apply_state."""

    child = None
    kind = None  # the kernel kind: the state blobs' magic line names it

    def __init__(self, req_r, rep_w, language):
        self.req_r = req_r
        self.rep_w = rep_w
        self.language = language
        self.pid = os.getpid()
        # The last checkpoint answered: its state's digest, its walk's digest and what the
        # files left out (repeated while /work stays unchanged). None: none yet.
        self.last_state = None
        self.last_files = None
        self.last_files_skipped = []
        self.pending = None  # the same three of the checkpoint S is answering now

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
        if op == "checkpoint":
            return self.checkpoint(msg["max_bytes"], msg["full"])
        if op == "checkpoint_end":
            if msg.get("commit") is True and self.pending is not None:
                self.last_state, self.last_files, self.last_files_skipped = self.pending
            self.pending = None
            return None
        if op == "restore":
            return self.restore(msg)
        return {"error": "unknown operation"}

    # checkpoints

    def checkpoint(self, max_bytes, full):
        """The state and the files, each unless it is unchanged since the last checkpoint
        answered (and this one is not full), sent to S as chunk frames; then the verdict.
        What is over max_bytes is measured exactly but never held whole."""
        full = full or self.last_state is None
        self.pending = None
        try:
            pieces, state_size, digest, skipped = self.state_blob(max_bytes)
            entries, files_skipped, files_digest = walk_tree()
        except CheckpointRefused as e:
            return {"error": str(e)}
        send_state = full or digest != self.last_state
        state_bytes = state_size if send_state else 0
        send_files = full or files_digest != self.last_files
        tar, files_bytes = None, 0
        if send_files:
            tar, files_bytes, unread = build_tar(entries, max(0, max_bytes - state_bytes))
            files_skipped += unread
        else:
            files_skipped = self.last_files_skipped
        del entries
        if state_bytes + files_bytes > max_bytes:
            return {"too_large": state_bytes + files_bytes}
        if send_state:
            self.send_chunks("state", pieces)
        del pieces
        if send_files:
            self.send_chunks("files", tar)
        del tar
        self.pending = (digest, files_digest, files_skipped)
        return {"checkpoint": {"state": send_state, "files": send_files,
                               "skipped": skipped + files_skipped}}

    def send_chunks(self, part, pieces):
        buf = bytearray()

        def flush():
            write_frame(self.rep_w, {"pid": self.pid, "chunk": part, "base64":
                                     binascii.b2a_base64(buf, newline=False).decode("ascii")})
            buf.clear()

        for piece in pieces:
            view = memoryview(piece)
            while len(view):
                take = CHECKPOINT_CHUNK - len(buf)
                buf += view[:take]
                view = view[take:]
                if len(buf) == CHECKPOINT_CHUNK:
                    flush()
        if buf:
            flush()

    def state_blob(self, max_bytes):
        """(pieces of the state blob or None when it is over max_bytes, its exact size, a
        digest of it, skipped). The kind's own."""
        raise NotImplementedError

    def magic(self):
        return STATE_MAGIC % self.kind.encode("ascii")

    # restores

    def restore(self, msg):
        """Files first, then the state, into this fresh kernel. A state that cannot be read
        at all, or files that cannot be extracted, refuse the whole restore: /work is
        emptied again and nothing of the state was applied."""
        state, files = msg.pop("state"), msg.pop("files", None)
        try:
            try:
                blob = binascii.a2b_base64(state)
            except binascii.Error as e:
                raise RestoreRefused("the state is not base64: %s" % e)
            if not blob.startswith(self.magic()):
                raise RestoreRefused("the state is not a checkpoint of a %s kernel (or it is "
                                     "damaged)" % self.kind)
            plan = self.read_state(memoryview(blob)[len(self.magic()):], state)
            del state
            skipped = []
            if files is not None:
                try:
                    data = binascii.a2b_base64(files)
                except binascii.Error as e:
                    raise RestoreRefused("the files are not base64: %s" % e)
                del files
                try:
                    skipped += extract_files(data)
                except RestoreRefused:
                    clear_work()
                    raise
                del data
            try:
                skipped += self.apply_state(plan)
            except RestoreRefused:
                clear_work()
                raise
        except RestoreRefused as e:
            return {"error": str(e), "refused": True}
        return {"restored": True, "skipped": skipped}

    def read_state(self, body, encoded):
        """What apply_state needs from the blob's `body` (after its magic line; `encoded` is
        the whole blob in base64), without changing anything; RestoreRefused when it cannot
        be read at all."""
        raise NotImplementedError

    def apply_state(self, plan):
        """Restores the state into the kernel; returns skipped."""
        raise NotImplementedError

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

    kind = "python"

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
        # The session's packages, when it has any: a read-only folder the worker installed
        # them into (bind-mounted there; absent otherwise, which the import system skips).
        sys.path.insert(1, PACKAGES_DIR)
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

    # checkpoints (see "Checkpoints" in the module's docstring)

    def state_blob(self, max_bytes):
        """The blob: the magic line, an 8-byte length, a JSON header (working directory,
        modules, definitions, the cells' sources they need, the random generators, where
        each value lies in the pickle stream), then the pickle stream of the values."""
        hashlib = stdlib("hashlib")
        struct = stdlib("struct")
        main = self.main.__dict__
        skipped = []
        modules, definitions, values = [], {}, []
        index = self.definitions_index()
        for name, value in list(main.items()):
            if not isinstance(name, str):
                skipped.append(skip(clean_text(repr(name), MAX_SKIPPED_NAME),
                                    "a name that is not a string is not checkpointed"))
                continue
            if name in KERNEL_NAMES:
                continue
            if isinstance(value, type(sys)):
                module = getattr(value, "__name__", None)
                if isinstance(module, str) and sys.modules.get(module) is value:
                    modules.append([name, module])
                else:
                    skipped.append(skip(name, "a module object that is not imported by name "
                                        "(it is not in sys.modules) cannot be checkpointed"))
                continue
            found = self.definition_of(name, value, index)
            if found is None:
                values.append(name)
            elif isinstance(found, str):
                skipped.append(skip(name, found))
            else:
                definitions.setdefault(id(value), [found, []])[1].append(name)
        order = []
        sources = {}
        for (filename, d), names in definitions.values():
            sources[filename] = index[filename]["source"]
            order.append((cell_number(filename), d["start"], {
                "names": names, "defname": d["name"], "file": filename, "start": d["start"],
                "end": d["end"], "nested": d["nested"], "flags": index[filename]["flags"]}))
        order.sort(key=lambda x: x[:2])
        sink, offsets, unpicklable = self.dump_values(values, max_bytes)
        skipped += unpicklable
        meta = {"cwd": None, "sources": sources, "modules": modules,
                "definitions": [d for _, _, d in order], "values": offsets,
                "random": None, "numpy_random": None,
                "path": [p for p in sys.path if isinstance(p, str)]}
        try:
            meta["cwd"] = os.getcwd()
        except OSError as e:
            skipped.append(skip(WORKING_DIRECTORY, "it cannot be found: %s" % (e.strerror or e)))
        rnd = sys.modules.get("random")
        if rnd is not None:
            try:
                version, internal, gauss = rnd.getstate()
                meta["random"] = [version, list(internal), gauss]
            except Exception as e:
                skipped.append(skip("random", "its generator's state cannot be read: %s" % e))
        np = sys.modules.get("numpy")
        if np is not None:
            try:
                st = np.random.get_state()
                meta["numpy_random"] = [str(st[0]), [int(k) for k in st[1]], int(st[2]),
                                        int(st[3]), float(st[4])]
            except Exception as e:
                skipped.append(skip("numpy.random", "its global generator's state cannot be "
                                    "read: %s: %s" % (type(e).__name__, e)))
        text = json.dumps(meta, separators=(",", ":")).encode("ascii")
        header = self.magic() + struct.pack(">Q", len(text)) + text
        size = len(header) + sink.size
        digest = hashlib.sha256(header + sink.hash.digest()).hexdigest()
        pieces = None if size > max_bytes or sink.over else [header] + sink.pieces
        return pieces, size, digest, skipped

    def dump_values(self, names, max_bytes):
        """The values of `names` in one pickle stream: one Pickler (so one memo: an object
        two names share is pickled once and comes back shared), one dump() per name, so
        that a restore can bind each name as soon as it is loaded. Modules inside values
        are pickled by name (reducer_override). When the whole dump fails, each name is
        tried alone to find the unpicklable ones, which are left out. Returns (sink,
        [[name, start, end]], skipped)."""
        main = self.main.__dict__
        pickler_class = state_pickler()
        left_out = {}
        tried_alone = False
        while True:
            sink = BoundedSink(max_bytes)
            pickler = pickler_class(sink, protocol=5)
            offsets = []
            failed = None
            for name in names:
                if name in left_out:
                    continue
                start = sink.size
                try:
                    pickler.dump(main[name])
                except Exception as e:
                    failed = (name, e)
                    break
                offsets.append([name, start, sink.size])
            if failed is None:
                break
            if not tried_alone:
                tried_alone = True
                for name in names:
                    try:
                        pickler_class(Discard(), protocol=5).dump(main[name])
                    except Exception as e:
                        left_out[name] = unpicklable_reason(main.get(name), e)
            if failed[0] not in left_out:  # fine alone, not in the whole: leave it out too
                left_out[failed[0]] = unpicklable_reason(main.get(failed[0]), failed[1])
        return sink, offsets, [skip(n, left_out[n]) for n in names if n in left_out]

    def definitions_index(self):
        """{"<cell N>": {"source", "flags", "defs": [...]}} for every cell whose source
        linecache holds: its module-level definitions (module_level_definitions), parsed
        once per cell."""
        linecache = stdlib("linecache")
        cache = getattr(self, "def_index", None)
        if cache is None:
            cache = self.def_index = {}
        for filename in list(linecache.cache):
            entry = linecache.cache.get(filename)
            if (not isinstance(filename, str) or cell_number(filename) is None
                    or not isinstance(entry, tuple) or len(entry) != 4):
                continue
            source = "".join(entry[2])
            known = cache.get(filename)
            if known is not None and known["source"] == source:
                continue
            try:
                tree = ast.parse(source, filename)
            except (SyntaxError, ValueError):
                tree = None
            cache[filename] = {"source": source, "flags": future_flags(tree),
                               "defs": module_level_definitions(tree)}
        for filename in list(cache):
            if filename not in linecache.cache:
                del cache[filename]  # its source is gone
        return cache

    def definition_of(self, name, value, index):
        """How the value of `name` is checkpointed: None (as a value, by pickle), (filename,
        definition) (by its source), or why it cannot be (a str). Functions and classes of
        __main__ (and wrappers of them, by __wrapped__) are definitions."""
        types = stdlib("types")
        try:
            is_function = isinstance(value, types.FunctionType)
            is_class = isinstance(value, type)
            wrapper = (not is_function and not is_class and callable(value)
                       and "__wrapped__" in getattr(value, "__dict__", {}))
            if not (is_function or is_class or wrapper):
                return None
            if getattr(value, "__module__", None) != "__main__":
                return None
            target = value
            for _ in range(100):  # functools.wraps chains, as inspect.unwrap
                inner = None if isinstance(target, type) else vars(target).get("__wrapped__")
                if inner is None:
                    break
                target = inner
            found = None
            if isinstance(target, type):
                found = class_definition(target, index)
            elif isinstance(target, types.FunctionType):
                found = function_definition(target, index)
            qualname = getattr(value, "__qualname__", "")
            qualname = qualname if isinstance(qualname, str) else ""
            if found is None and (wrapper or "<locals>" in qualname):
                # A decorator without functools.wraps returned its own inner function: the
                # last decorated definition of the name stands for it.
                found = latest_definition(index, name, decorated=True)
        except Exception:
            return None
        if found is not None:
            return found
        if "<locals>" in qualname:
            return ("a %s made inside a function cannot be checkpointed (its source cannot "
                    "run again alone)" % ("class" if is_class else "function"))
        if qualname == "<lambda>":
            return "a lambda is restored only from a plain `name = lambda ...` statement"
        if "." in qualname:
            return None  # a method taken from a class: pickled by reference
        return "its source is gone (linecache no longer holds its cell)"

    def read_state(self, body, encoded):
        struct = stdlib("struct")
        try:
            (n,) = struct.unpack(">Q", body[:8])
            meta = json.loads(bytes(body[8:8 + n]).decode("utf-8"))
            check_python_meta(meta, len(body) - 8 - n)
        except (struct.error, ValueError, TypeError, KeyError) as e:
            raise RestoreRefused("the state cannot be read (it is damaged): %s" % e)
        # The values by the whole blob (bytes: a BytesIO of it shares it, no copy) and where
        # they start in it.
        return meta, (body.obj, len(body.obj) - len(body) + 8 + n)

    def apply_state(self, plan):
        """In this order: the cells' sources into linecache, sys.path, the working
        directory, the modules, the definitions (those that miss a name are tried again
        later), the values (a definition a value needs is run when it is needed), the
        definitions still missing something, then the random generators' states (nothing
        else may draw from them after they are set)."""
        import importlib

        linecache = stdlib("linecache")
        meta, values = plan
        main = self.main.__dict__
        skipped = []
        for filename, source in meta["sources"].items():
            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        sys.path[:] = meta["path"]  # where the modules were imported from
        if meta["cwd"] is not None:
            try:
                os.chdir(meta["cwd"])
            except OSError as e:
                skipped.append(skip(WORKING_DIRECTORY, "%s cannot be entered again: %s"
                                    % (meta["cwd"], e.strerror or e)))
        for name, module in meta["modules"]:
            try:
                main[name] = importlib.import_module(module)
            except BaseException as e:
                skipped.append(skip(name, "the module %s no longer imports: %s: %s"
                                    % (module, type(e).__name__, e)))
        pending = list(meta["definitions"])
        missing = {}

        def define_pending():
            progress = True
            while progress and pending:
                progress = False
                for d in list(pending):
                    try:
                        self.define(d, meta["sources"][d["file"]])
                    except NameError as e:
                        missing[id(d)] = e  # a name that may come later
                        continue
                    except BaseException as e:
                        skipped.extend(skip(n, "its definition failed: %s: %s"
                                            % (type(e).__name__, e)) for n in d["names"])
                    pending.remove(d)
                    progress = True

        define_pending()
        skipped += ValueLoader(main, *values, define_pending).load(meta["values"])
        define_pending()
        for d in pending:
            e = missing.get(id(d))
            skipped.extend(skip(n, "its definition failed: %s: %s" % (type(e).__name__, e))
                           for n in d["names"])
        if meta["random"] is not None:
            try:
                import random

                version, internal, gauss = meta["random"]
                random.setstate((version, tuple(internal), gauss))
            except BaseException as e:
                skipped.append(skip("random", "its generator's state cannot be set: %s" % e))
        if meta["numpy_random"] is not None:
            try:
                import numpy

                name, keys, pos, has_gauss, cached = meta["numpy_random"]
                numpy.random.set_state((name, numpy.array(keys, dtype=numpy.uint32), pos,
                                        has_gauss, cached))
            except BaseException as e:
                skipped.append(skip("numpy.random", "its global generator's state cannot be "
                                    "set: %s: %s" % (type(e).__name__, e)))
        return skipped

    def define(self, d, source):
        """Runs one definition again from its cell's source, under the cell's file name and
        at its own line numbers (tracebacks and inspect.getsource see the same cell), then
        binds every name it had."""
        main = self.main.__dict__
        lines = source.splitlines(True)[d["start"] - 1:d["end"]]
        if d["nested"]:  # indented below an if/try/with...: kept so, under an `if True:`
            code = "\n" * (d["start"] - 2) + "if True:\n" + "".join(lines)
        else:
            code = "\n" * (d["start"] - 1) + "".join(lines)
        defname = d["defname"]
        missing = object()
        before = main.get(defname, missing)
        exec(compile(code, d["file"], "exec", flags=d["flags"], dont_inherit=True), main)
        value = main[defname]
        for name in d["names"]:
            main[name] = value
        if defname not in d["names"]:  # the name was bound to something else since
            if before is missing:
                main.pop(defname, None)
            else:
                main[defname] = before


# -- Python checkpoints: helpers

# Names of __main__ that are the kernel's, not the program's.
KERNEL_NAMES = frozenset({"__name__", "__doc__", "__package__", "__loader__", "__spec__",
                          "__builtins__", "__cached__"})


def cell_number(filename):
    if filename.startswith("<cell ") and filename.endswith(">"):
        try:
            return int(filename[6:-1])
        except ValueError:
            return None
    return None


def future_flags(tree):
    """The compiler flags of a cell's `from __future__ import ...` (its definitions are run
    again with them: `annotations` keeps their annotations unevaluated)."""
    import __future__

    flags = 0
    for node in tree.body if tree is not None else ():
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            for alias in node.names:
                feature = getattr(__future__, alias.name, None)
                flags |= getattr(feature, "compiler_flag", 0)
    return flags


def module_level_definitions(tree):
    """The def, async def and class statements of a cell, and its `name = lambda ...`
    statements, that run at the cell's top level (also inside if / for / while / try / with
    / match, not inside another def or class): [{"name", "kind": "def" | "class" |
    "lambda", "start" (its first decorator's line), "end", "anchor" (the line of its
    code object: co_firstlineno), "decorated", "nested" (indented)}]."""
    found = []

    def visit(body, nested):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                start = min([d.lineno for d in node.decorator_list] + [node.lineno])
                found.append({"name": node.name, "start": start, "end": node.end_lineno,
                              "kind": "class" if isinstance(node, ast.ClassDef) else "def",
                              "anchor": start, "decorated": bool(node.decorator_list),
                              "nested": nested})
            elif (isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda)
                  and all(isinstance(t, ast.Name) for t in node.targets)):
                for target in node.targets:
                    found.append({"name": target.id, "start": node.lineno,
                                  "end": node.end_lineno, "kind": "lambda",
                                  "anchor": node.value.lineno, "decorated": False,
                                  "nested": nested})
            else:
                for field in ("body", "orelse", "finalbody"):
                    inner = getattr(node, field, None)
                    if isinstance(inner, list):
                        visit(inner, True)
                for part in getattr(node, "handlers", None) or getattr(node, "cases", None) or ():
                    visit(part.body, True)

    if tree is not None:
        visit(tree.body, False)
    return found


def function_definition(fn, index):
    code = fn.__code__
    entry = index.get(code.co_filename)
    for d in entry["defs"] if entry else ():
        if d["anchor"] != code.co_firstlineno:
            continue
        if d["kind"] == "lambda" and code.co_name == "<lambda>":
            return code.co_filename, d
        if d["kind"] == "def" and d["name"] == code.co_name == fn.__qualname__:
            return code.co_filename, d
    return None


def class_definition(cls, index):
    """The class statement of `cls`: the one of its name around one of its methods' code,
    else (a class without methods of its own source) the last one of its name."""
    for attr in list(vars(cls).values()):
        if isinstance(attr, (staticmethod, classmethod)):
            attr = attr.__func__
        elif isinstance(attr, property):
            attr = attr.fget
        code = getattr(attr, "__code__", None)
        if code is None or not isinstance(getattr(code, "co_filename", None), str):
            continue
        entry = index.get(code.co_filename)
        for d in entry["defs"] if entry else ():
            if (d["kind"] == "class" and d["name"] == cls.__name__
                    and d["start"] <= code.co_firstlineno <= d["end"]):
                return code.co_filename, d
    if cls.__qualname__ != cls.__name__:
        return None
    return latest_definition(index, cls.__name__, kind="class")


def latest_definition(index, name, kind=None, decorated=False):
    """The last (by cell, then line) module-level definition of `name` in the cells."""
    best = None
    for filename, entry in index.items():
        for d in entry["defs"]:
            if (d["name"] == name and d["kind"] != "lambda" and (kind is None or d["kind"] == kind)
                    and (d["decorated"] or not decorated)):
                key = (cell_number(filename), d["start"])
                if best is None or key > best[0]:
                    best = (key, (filename, d))
    return best[1] if best else None


class Discard:
    """A file that forgets what is written to it."""

    @staticmethod
    def write(data):
        return memoryview(data).nbytes


_STATE_PICKLER = []


def state_pickler():
    """The Pickler of the values: a module (anywhere in a value) is pickled by its name, as
    importlib.import_module(name); anything else as pickle does."""
    if not _STATE_PICKLER:
        import importlib

        pickle = stdlib("pickle")
        module_type = type(sys)

        class StatePickler(pickle.Pickler):
            def reducer_override(self, obj):
                if isinstance(obj, module_type):
                    name = getattr(obj, "__name__", None)
                    if isinstance(name, str) and sys.modules.get(name) is obj:
                        return importlib.import_module, (name,)
                    raise pickle.PicklingError("the module object %r is not imported by name"
                                               % (name,))
                return NotImplemented

        _STATE_PICKLER.append(StatePickler)
    return _STATE_PICKLER[0]


def unpicklable_reason(value, error):
    """Why a value is not checkpointed, plainly for the kinds pickle refuses most."""
    io = sys.modules.get("io")
    threading = sys.modules.get("threading")
    socket = sys.modules.get("socket")
    types = stdlib("types")
    kind = type(value)
    module = {"_io": "io", "_socket": "socket", "_thread": "threading"}.get(
        getattr(kind, "__module__", ""), getattr(kind, "__module__", ""))
    what = "%s.%s" % (module, getattr(kind, "__qualname__", "?"))
    try:
        if io is not None and isinstance(value, io.IOBase):
            if value.closed:
                return "a closed file object (%s) cannot be checkpointed" % what
            return "an open file (%s) cannot be checkpointed" % what
        if socket is not None and isinstance(value, socket.socket):
            return "an open socket (%s) cannot be checkpointed" % what
        if threading is not None and isinstance(value, threading.Thread):
            return ("a running thread is not restored" if value.is_alive()
                    else "a thread (%s) cannot be checkpointed" % what)
        if isinstance(value, (types.GeneratorType, types.AsyncGeneratorType)):
            return "a generator cannot be checkpointed (its running frame cannot be saved)"
        if isinstance(value, types.CoroutineType):
            return "a coroutine cannot be checkpointed (its running frame cannot be saved)"
        if isinstance(value, (types.FrameType, types.TracebackType)):
            return "a frame or traceback cannot be checkpointed"
        if what in ("threading.lock", "threading.RLock", "threading.Condition",
                    "threading.Semaphore", "threading.Event"):
            return "a lock (%s) cannot be checkpointed" % what
    except Exception:
        pass
    message = clean_text("%s" % (error,), 300)
    return "it cannot be pickled (%s): %s: %s" % (what, type(error).__name__, message)


def check_python_meta(meta, values_size):
    """Raises ValueError / TypeError / KeyError unless `meta` is a Python state's header."""
    if not isinstance(meta, dict):
        raise ValueError("the header is not an object")
    if not (meta["cwd"] is None or isinstance(meta["cwd"], str)):
        raise TypeError("cwd")
    if not (isinstance(meta["path"], list) and all(isinstance(p, str) for p in meta["path"])):
        raise TypeError("path")
    if not (isinstance(meta["sources"], dict)
            and all(isinstance(k, str) and cell_number(k) is not None and isinstance(v, str)
                    for k, v in meta["sources"].items())):
        raise TypeError("sources")
    if not all(isinstance(m, list) and len(m) == 2 and all(isinstance(x, str) for x in m)
               for m in meta["modules"]):
        raise TypeError("modules")
    for d in meta["definitions"]:
        if not (isinstance(d, dict) and isinstance(d["names"], list)
                and all(isinstance(n, str) for n in d["names"]) and isinstance(d["defname"], str)
                and d["file"] in meta["sources"] and isinstance(d["nested"], bool)
                and all(isinstance(d[k], int) and not isinstance(d[k], bool)
                        for k in ("start", "end", "flags"))
                and 1 + d["nested"] <= d["start"] <= d["end"]):
            raise TypeError("definitions")
    for v in meta["values"]:
        if not (isinstance(v, list) and len(v) == 3 and isinstance(v[0], str)
                and all(isinstance(x, int) and not isinstance(x, bool) for x in v[1:])
                and 0 <= v[1] <= v[2] <= values_size):
            raise TypeError("values")
    for key, size in (("random", 3), ("numpy_random", 5)):
        if not (meta[key] is None or isinstance(meta[key], list) and len(meta[key]) == size):
            raise TypeError(key)


class ValueLoader:
    """Loads the values' pickle stream (see PythonKernel.dump_values) name by name, binding
    each as it comes. find_class runs a definition still pending when a value needs it.

    A value that fails to load (its class's definition failed, a module that no longer
    imports) is skipped; the ones after it still load. Protocol 5 memoizes by count
    (MEMOIZE: the next index is the number of entries so far), and a failed load leaves
    the rest of its frame in the unpickler's buffer: so after a failure a fresh unpickler
    takes over, its memo replayed from the old one up to where the failed dump's entries
    end (the entries it did not make are placeholders). From then on each dump is read
    first (pickletools): one that refers to an entry of a failed dump is skipped too (it
    would get a half-made or placeholder object), and its entries are replayed as
    placeholders."""

    def __init__(self, main, data, base, define_pending):
        self.main = main
        self.data = memoryview(data)
        self.base = base  # where the values' stream starts in `data`
        self.define_pending = define_pending
        io = stdlib("io")
        self.stream = io.BytesIO(data)
        self.table = {}
        self.unpickler = self.new_unpickler()
        self.broken = []  # (first, end) memo indices of dumps that did not load
        self.memo_at = None  # memo entries before the next dump, counted once a load failed

    def new_unpickler(self):
        pickle = stdlib("pickle")
        loader = self
        main = self.main

        class Unpickler(pickle.Unpickler):
            def find_class(self, module, name):
                if module == "__main__" and name.split(".")[0] not in main:
                    loader.define_pending()
                return super().find_class(module, name)

            def persistent_load(self, pid):
                return loader.table[pid]  # only the replays use persistent ids

        return Unpickler(self.stream)

    def memo_use(self, start, end):
        """(memo indices the dump reads, entries it makes)."""
        pickletools = stdlib("pickletools")
        gets, made = set(), 0
        for op, arg, _ in pickletools.genops(bytes(self.data[self.base + start:self.base + end])):
            if op.name == "MEMOIZE":
                made += 1
            elif op.name in ("GET", "BINGET", "LONG_BINGET"):
                gets.add(int(arg))
        return gets, made

    def replay(self, upto):
        """A fresh unpickler whose memo holds the old one's entries below `upto`
        (placeholders where it has none)."""
        struct = stdlib("struct")
        old = self.unpickler.memo.copy()
        self.unpickler = self.new_unpickler()
        self.table = {i: old.get(i, Discard) for i in range(upto)}
        crafted = b"\x80\x05" + b"".join(b"J%sQr%s0" % (struct.pack("<i", i), struct.pack("<I", i))
                                         for i in range(upto)) + b"N."
        self.stream.seek(0, 2)
        at = self.stream.tell()
        self.stream.write(crafted)
        self.stream.seek(at)
        self.unpickler.load()
        self.table = {}

    def failed(self, k, entries):
        if self.memo_at is None:
            self.memo_at = sum(self.memo_use(start, end)[1] for _, start, end in entries[:k])
        made = self.memo_use(entries[k][1], entries[k][2])[1]
        self.broken.append((self.memo_at, self.memo_at + made))
        self.memo_at += made
        self.replay(self.memo_at)

    def load(self, entries):
        skipped = []
        for k, (name, start, end) in enumerate(entries):
            if self.memo_at is not None:
                gets, made = self.memo_use(start, end)
                if any(lo <= g < hi for g in gets for lo, hi in self.broken):
                    skipped.append(skip(name, "it shares an object with a name that could not "
                                        "be restored"))
                    self.failed(k, entries)
                    continue
            self.stream.seek(self.base + start)
            try:
                value = self.unpickler.load()
            except BaseException as e:
                skipped.append(skip(name, "it cannot be unpickled: %s: %s"
                                    % (type(e).__name__, clean_text(str(e), 300))))
                self.failed(k, entries)
                continue
            self.main[name] = value
            if self.memo_at is not None:
                self.memo_at += made
        return skipped


# -- bash and node: an interpreter child of K


class ChildKernel(KernelBase):
    """K with a long-lived interpreter child (bash, node) in K's process group, on K's std
    streams; K sends it cells and reads their status over two pipes of their own."""

    what = "the interpreter"
    # Bytes of status lines K buffers at most (a checkpoint's or restore's line: more).
    line_limit = MAX_REPLY

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
            if len(self.lines) > self.line_limit:
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
    kind = "bash"

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
        # The shell's options as it starts: a checkpoint keeps those that differ.
        self.command(self.INIT + '{ builtin shopt -p; builtin set +o; } >&"$__codegen_fd"\n'
                     "__codegen_done 0 0\n")
        self.baseline = set()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            line = self.next_line(deadline)
            if line is None:
                raise KernelGone("the shell did not start within %d s" % START_TIMEOUT_S)
            if line == b"0 0":
                return
            self.baseline.add(line)

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

    # checkpoints (see "Checkpoints" in the module's docstring)

    # Sourced at the shell's top level (its function sees the globals as a cell does); it
    # writes fields separated by NUL (which no bash string holds) to @OUT@, and forks
    # nothing (the names are listed through a file, not a pipe; `>|`: noclobber may be
    # on; both listings always have a name: compgen fails on none). Its first argument is
    # the shell's last status, given back as the status of `source`, so $? is the cell's.
    CHECKPOINT = r"""__codegen_checkpoint() {
  builtin local __codegen_n __codegen_names __codegen_list=@LIST@
  builtin printf 'D\0%s\0' "$PWD"
  builtin compgen -v >|"$__codegen_list" &&
    builtin mapfile -t __codegen_names <"$__codegen_list" || builtin return 1
  for __codegen_n in "${__codegen_names[@]}"; do
    case $__codegen_n in
      BASH|BASH_*|BASHOPTS|BASHPID|__codegen_*|_|PWD|OLDPWD|SHLVL|PPID|UID|EUID|RANDOM|\
      SRANDOM|SECONDS|LINENO|HISTCMD|HISTCONTROL|HISTFILE|HISTFILESIZE|HISTIGNORE|HISTSIZE|\
      HISTTIMEFORMAT|FUNCNAME|GROUPS|PIPESTATUS|DIRSTACK|EPOCHREALTIME|EPOCHSECONDS|\
      SHELLOPTS|COLUMNS|LINES|COMP_WORDBREAKS|HOSTNAME|HOSTTYPE|MACHTYPE|OSTYPE|OPTERR|\
      OPTIND|MAILCHECK|PS0|PS1|PS2|PS4|PROMPT_COMMAND) continue ;;
    esac
    builtin printf 'V\0%s\0' "$__codegen_n"
    builtin declare -p -- "$__codegen_n"
    builtin printf '\0'
  done
  builtin compgen -A function >|"$__codegen_list" &&
    builtin mapfile -t __codegen_names <"$__codegen_list" || builtin return 1
  for __codegen_n in "${__codegen_names[@]}"; do
    case $__codegen_n in __codegen_*) continue ;; esac
    builtin printf 'F\0%s\0' "$__codegen_n"
    builtin declare -f -- "$__codegen_n"
    builtin printf '\0'
  done
  builtin printf 'X\0'; builtin declare -F; builtin printf '\0'
  for __codegen_n in "${!BASH_ALIASES[@]}"; do
    builtin printf 'A\0%s\0' "$__codegen_n"
    builtin alias -- "$__codegen_n"
    builtin printf '\0'
  done
  builtin printf 'O\0'; builtin shopt -p; builtin printf '\0'
  builtin printf 'S\0'; builtin set +o; builtin printf '\0'
  builtin printf 'T\0'; builtin trap -p; builtin printf '\0'
  builtin printf 'J\0'; builtin jobs -l; builtin printf '\0'
  builtin printf 'E\0'
}
__codegen_checkpoint >|@OUT@ 2>/dev/null
builtin printf 'ckpt %s\n' "$?" >&"$__codegen_fd"
builtin unset -f __codegen_checkpoint
builtin return "${1:-0}"
"""

    def await_status(self, prefix, other=None):
        """The shell's next status line that starts with `prefix` (the rest of it); `other`
        gets the lines before it."""
        while True:
            line = self.next_line(None)
            if line.startswith(prefix):
                return line[len(prefix):]
            if other is not None:
                other(line)

    def state_blob(self, max_bytes):
        """The blob: the magic line, a JSON line ({"labels": what each command of the
        script restores}), then a bash script the new shell sources at its top level: one
        `builtin eval '<command>'` per variable (declare -p), function (declare -f), alias,
        option that differs from the start (shopt -p, set +o), the traps (trap -p) and the
        working directory, each reporting on the status channel when it fails."""
        import shlex

        hashlib = stdlib("hashlib")
        script = os.path.join(BASH_CELL_DIR, "checkpoint.sh")
        out = os.path.join(BASH_CELL_DIR, "checkpoint.out")
        listing = os.path.join(BASH_CELL_DIR, "checkpoint.names")
        try:
            os.makedirs(BASH_CELL_DIR, mode=0o700, exist_ok=True)
            with open(script, "w", encoding="utf-8") as f:
                f.write(self.CHECKPOINT.replace("@OUT@", shlex.quote(out))
                        .replace("@LIST@", shlex.quote(listing)))
        except OSError as e:
            raise CheckpointRefused("cannot write the checkpoint script to %s: %s"
                                    % (BASH_CELL_DIR, e.strerror or e))
        self.command('builtin source %s "$?" </dev/null\n' % shlex.quote(script))
        status = self.await_status(b"ckpt ")
        try:
            with open(out, "rb") as f:
                dump = f.read()
        except OSError as e:
            raise CheckpointRefused("the shell's checkpoint cannot be read: %s" % (e.strerror
                                                                                  or e))
        finally:
            for path in (script, out, listing):
                try:
                    os.unlink(path)
                except OSError:
                    pass
        if status != b"0" or not dump.endswith(b"E\0"):
            raise CheckpointRefused("the shell could not list its state (status %s)"
                                    % status.decode("ascii", "replace")[:20])
        blob, skipped = self.bash_blob(dump)
        size = len(blob)
        return ([blob] if size <= max_bytes else None), size, hashlib.sha256(blob).hexdigest(), \
            skipped

    def bash_blob(self, dump):
        import re

        fields = dump.split(b"\0")
        shopts, sets, entries, aliases, skipped = [], [], [], [], []
        exported, cwd, i = set(), None, 0

        def label(data):
            return data.decode("utf-8", "surrogateescape")

        while i < len(fields) and fields[i] != b"E":
            tag = fields[i]
            if tag in (b"V", b"F", b"A") and i + 2 < len(fields):
                name, text = fields[i + 1], fields[i + 2].rstrip(b"\n")
                i += 3
                if tag == b"V":
                    entries.append((label(name), text))
                elif tag == b"F":
                    entries.append((label(name) + "()", text))
                else:
                    aliases.append(("alias " + label(name), text))
                continue
            if i + 1 >= len(fields):
                break
            text = fields[i + 1]
            i += 2
            if tag == b"D":
                cwd = text
            elif tag == b"X":
                exported = {line.split(None, 2)[2] for line in text.split(b"\n")
                            if line.startswith(b"declare -fx ") and len(line.split(None, 2)) == 3}
            elif tag == b"O":
                shopts = [line for line in text.split(b"\n") if line and line not in self.baseline]
            elif tag == b"S":
                sets = [line for line in text.split(b"\n") if line and line not in self.baseline]
            elif tag == b"T":
                if text.strip():
                    entries.append(("traps", text.rstrip(b"\n")))
            elif tag == b"J":
                for line in text.split(b"\n"):
                    m = re.match(rb"\[(\d+)\][+\- ]?\s+\d+\s+(Running|Stopped)\S*\s+(.*)$", line)
                    if m:
                        skipped.append(skip("%" + m.group(1).decode(), "a %s background job (%s) "
                                            "is not restored" % (m.group(2).decode().lower(),
                                                                 label(m.group(3)).strip()[:200])))
            else:
                raise CheckpointRefused("the shell's checkpoint is malformed")
        for name in sorted(exported):
            entries.append((label(name) + "() (exported)", b"builtin declare -fx -- " + name))
        entries += sorted(aliases)  # listed in the order of bash's hash table
        # Options first (extglob must be on before a function using it is read), `set`
        # options last (errexit, nounset must not act on the restore itself).
        entries = ([("shopt " + label(line.split()[-1]), line) for line in shopts] + entries
                   + ([(WORKING_DIRECTORY, b"builtin cd -- " + squote(cwd))] if cwd else [])
                   + [("set " + label(line.split()[-1]), line) for line in sets])
        script = b"".join(
            b"builtin eval %s 2>/dev/null || builtin printf 'skip %d %%d\\n' \"$?\" "
            b">&\"$__codegen_fd\"\n" % (squote(text), n) for n, (_, text) in enumerate(entries))
        meta = json.dumps({"labels": [name for name, _ in entries]}, separators=(",", ":"))
        return self.magic() + meta.encode("ascii") + b"\n" + script, skipped

    def read_state(self, body, encoded):
        body = bytes(body)
        end = body.find(b"\n")
        try:
            labels = json.loads(body[:end].decode("ascii"))["labels"]
            if end < 0 or not all(isinstance(x, str) for x in labels):
                raise ValueError("labels")
        except (ValueError, KeyError, TypeError) as e:
            raise RestoreRefused("the state cannot be read (it is damaged): %s" % e)
        return labels, body[end + 1:]

    def apply_state(self, plan):
        import shlex

        labels, script = plan
        path = os.path.join(BASH_CELL_DIR, "restore.sh")
        try:
            os.makedirs(BASH_CELL_DIR, mode=0o700, exist_ok=True)
            with open(path, "wb") as f:
                f.write(script)
        except OSError as e:
            raise RestoreRefused("cannot write the restore script to %s: %s"
                                 % (BASH_CELL_DIR, e.strerror or e))
        skipped = []

        def failed(line):
            parts = line.split()
            if len(parts) == 3 and parts[0] == b"skip" and parts[1].isdigit():
                n = int(parts[1])
                if n < len(labels):
                    skipped.append(skip(labels[n], "the new shell refused it (exit status %s)"
                                        % parts[2].decode("ascii", "replace")[:20]))

        self.command("builtin source %s </dev/null; __codegen_done r $?\n" % shlex.quote(path))
        self.await_status(b"r ", failed)
        try:
            os.unlink(path)
        except OSError:
            pass
        return skipped


class NodeKernel(ChildKernel):
    """One node for the session, running session_kernel.js: cells as JSON lines on its fd 3,
    their outcome as JSON lines on its fd 4."""

    what = "node"
    kind = "javascript"

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

    # checkpoints (session_kernel.js builds and restores the blob; see its header)

    def await_op(self, op, limit=MAX_REPLY):
        """node's next outcome line of the operation `op` (a dict)."""
        self.line_limit = max(MAX_REPLY, limit)
        try:
            while True:
                line = self.next_line(None)
                try:
                    r = json.loads(line.decode("utf-8", "replace"))
                except ValueError:
                    continue
                if isinstance(r, dict) and r.get("op") == op:
                    return r
        finally:
            self.line_limit = MAX_REPLY

    def state_blob(self, max_bytes):
        hashlib = stdlib("hashlib")
        self.command(json.dumps({"op": "checkpoint", "max_bytes": max_bytes}) + "\n")
        r = self.await_op("checkpoint", max_bytes // 3 * 4 + (4 << 20))
        skipped = r.get("skipped") if isinstance(r.get("skipped"), list) else []
        if isinstance(r.get("error"), str):
            raise CheckpointRefused("node could not checkpoint: %s" % r["error"][:2000])
        if isinstance(r.get("too_large"), int) and isinstance(r.get("sha256"), str):
            return None, r["too_large"], r["sha256"], skipped
        try:
            blob = binascii.a2b_base64(r.get("state") or "")
        except (binascii.Error, TypeError) as e:
            raise CheckpointRefused("node sent a malformed checkpoint: %s" % e)
        if not blob.startswith(self.magic()):
            raise CheckpointRefused("node sent a malformed checkpoint")
        return ([blob] if len(blob) <= max_bytes else None), len(blob), \
            hashlib.sha256(blob).hexdigest(), skipped

    def read_state(self, body, encoded):
        return encoded  # node reads it (the magic line was checked)

    def apply_state(self, encoded):
        self.command(json.dumps({"op": "restore", "state": encoded}) + "\n")
        r = self.await_op("restored")
        if isinstance(r.get("error"), str):
            if r.get("unreadable") is True:
                raise RestoreRefused("the state cannot be read: %s" % r["error"][:2000])
            return [skip("(state)", "node could not restore it: %s" % r["error"][:2000])]
        return r.get("skipped") if isinstance(r.get("skipped"), list) else []
