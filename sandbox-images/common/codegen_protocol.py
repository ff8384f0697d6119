"""The runner's side of its contract with the worker (stdlib only, Python 3.11): frames, the
request and what it may name. The worker's side is sandbox/src/protocol.rs.

Protocol (version 5) over the container's attached stdin/stdout. Every message is a frame: a
4-byte big-endian length, then that many bytes of JSON (an object). The runner's frames are
pure ASCII. Nothing else is ever written to stdout; stderr carries diagnostics only.

  runner -> worker  {"type": "ready", "protocol": 5, "runs": int, "harness": [mode]}
                      the container is clean and a request may be sent (at start and again
                      after every execution; after one whose request said "rest", once
                      the worker said "prepare"). "harness": the modes of the image's test
                      harness, as loaded and warmed up by the zygote (empty: none, or it
                      failed its warm-up); the worker sends no other.
  worker -> runner  {"type": "prepare"}, only after the result of a request that said
                      "rest": true: every process of the last program is already dead, and
                      the runner now forks and prepares the next program process (and
                      scrubs what the last one left), then says "ready". The worker chooses
                      the moment: at once when a run waits for this container, else a little
                      later, so that this housekeeping does not take the cores from the
                      orchestration the result sets off. Without "rest" the runner prepares
                      right after the result (a busy pool: nothing to wait for).
  worker -> runner  a request, only after "ready":
                      {"code": str, "stdin": str|null, "timeout_ms": int,
                       "max_output_bytes": int,    capture cap per stream; output past it is
                                                   read and discarded ("*_truncated")
                       "output_limit_bytes": int,  hard cap on stdout+stderr: past it the
                                                   program is killed ("output_limited")
                       "test": str|null,           optional test script, run after the code
                                                   in the same namespace / scope / shell
                       "files": {path: str | {"base64": str}},
                                                   optional, written to /work before the run
                                                   (a relative path) or below /mnt/data (a
                                                   path that starts with /mnt/data/)
                                                   (text as UTF-8, or the decoded bytes);
                                                   the language's main and test file names
                                                   are reserved (an "error" answer)
                       "return_files": [path],     optional, read back after the run
                       "harness": null | object,   optional, Python in-process only: run by
                                                   harness.py (see there; "cases" and
                                                   "integrate" in a fresh module `solution`,
                                                   a "program_test" in __main__); not with
                                                   "test"
                       "cpu_time_ms": int|null,    optional CPU-time limit (the container
                                                   cgroup's, over the run): past it the
                                                   program is killed ("cpu_limited")
                       "rest": bool}               optional: after the result, wait for
                                                   "prepare" (see below)
  runner -> worker  {"type": "result", "exit_code": int|null, "signal": int|null,
                     "timed_out": bool, "oom_killed": bool, "output_limited": bool,
                     "stdout": str, "stderr": str, "stdout_truncated": bool,
                     "stderr_truncated": bool, "duration_ms": int,
                     "cpu_ms": int|null,          the container cgroup's CPU time over the run
                     "cpu_limited": bool,         killed at "cpu_time_ms"
                     "peak_memory_kb": int|null,  the program's peak resident memory: P's
                                                  high-water mark (and that of the children it
                                                  waited for) from Z's wait4, less P's own
                                                  before the request (in-process mode: the
                                                  zygote's pages it shares); see peak_memory()
                     "exception": null | {"type", "module", "message",
                                          "kind": "syntax"|"import"|"assertion"|"runtime"},
                                  (only with exit_code 1: the uncaught exception that ended it)
                     "phase": null | "code" | "test",
                                  where the uncaught exception happened, or (only with a
                                  test) the exit that ended it before the test's end
                     "test_finished": null | bool,
                                  null without a test; true only when the code and the test
                                  both ran to their natural end (no uncaught exception, no
                                  exit before the test's end); the verdict still needs
                                  exit_code 0
                     "harness": null | object,
                     "files": {relpath: str|{"base64": str}|null},  text when UTF-8, else base64
                     "file_errors": {relpath: str}}
                    or {"type": "error", "message": str} for a request it cannot run.
  runner -> worker  {"type": "fatal", "message": str, "oom_killed": bool}: the runner cannot
                    vouch for a clean container (a scrub failed, a process survived, a
                    supervisor died); it exits and the container must be discarded.

Language modes, the "compile" object and the harness: codegen_languages. Who reads the
request and who runs it: codegen_guard.
"""

import json
import os
import struct

PROTOCOL = 5
WORKDIR = "/work"
# The one absolute place `files` and `return_files` may name (SandboxFusion's datasets put
# their files there): a tmpfs of its own, scrubbed like /work.
DATA_DIR = "/mnt/data"
MAX_FRAME = 256 << 20
MAX_TIMEOUT_MS = 24 * 3600 * 1000
MAX_OUTPUT_BYTES = 1 << 30
MAX_RETURN_FILES = 64
CHUNK = 1 << 16


class RequestError(Exception):
    """A request the runner cannot run: answered with an "error" frame, nothing ran."""


class Fatal(Exception):
    """The runner cannot vouch for a clean container: a "fatal" frame, then it exits."""


# ----------------------------------------------------------------------------- frames


def read_exact(fd, n):
    """n bytes from fd, or None at EOF before the first byte; EOF mid-way is an error."""
    parts = []
    got = 0
    while got < n:
        try:
            b = os.read(fd, min(n - got, 1 << 20))
        except InterruptedError:
            continue
        if not b:
            if got == 0:
                return None
            raise Fatal("end of input inside a frame")
        parts.append(b)
        got += len(b)
    return b"".join(parts)


def read_frame(fd):
    header = read_exact(fd, 4)
    if header is None:
        return None
    (n,) = struct.unpack(">I", header)
    if n > MAX_FRAME:
        raise Fatal("frame of %d bytes is over the bound" % n)
    body = read_exact(fd, n) if n else b""
    if body is None:
        raise Fatal("end of input inside a frame")
    return body


def write_all(fd, data):
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        view = view[n:]


def frame(body):
    return struct.pack(">I", len(body)) + body


def write_frame(fd, obj):
    # ensure_ascii (the default): pure ASCII, lone surrogates of lossy decoding included
    write_all(fd, frame(json.dumps(obj, separators=(",", ":")).encode("ascii")))



class FrameReader:
    """Frames from a non-blocking pipe, as they complete."""

    def __init__(self, limit):
        self.buf = bytearray()
        self.limit = limit
        self.overflow = False

    def feed(self, data):
        if len(self.buf) + len(data) > self.limit:
            self.overflow = True
            return
        self.buf += data

    def frames(self):
        out = []
        while len(self.buf) >= 4:
            (n,) = struct.unpack(">I", self.buf[:4])
            if n > self.limit:
                self.overflow = True
                self.buf.clear()
                break
            if len(self.buf) < 4 + n:
                break
            body = bytes(self.buf[4 : 4 + n])
            del self.buf[: 4 + n]
            try:
                obj = json.loads(body.decode("ascii"))
            except ValueError:
                obj = None
            out.append(obj if isinstance(obj, dict) else {})
        return out


# ----------------------------------------------------------------------------- request


def is_unicode(value):
    """Whether the string `value` encodes to UTF-8 (no lone surrogates)."""
    try:
        value.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def text_field(name, value):
    """`value` if it is a string of valid Unicode, else RequestError naming `name`."""
    if not isinstance(value, str):
        raise RequestError("%s must be a string" % name)
    if not is_unicode(value):
        raise RequestError("%s must be valid Unicode (no lone surrogates)" % name)
    return value


def integer_field(req, name, minimum, maximum, default=None):
    """req[name] (or `default` when it is missing) if it is an integer in [minimum, maximum]
    (not a boolean), else RequestError naming the field."""
    v = req.get(name, default)
    if not isinstance(v, int) or isinstance(v, bool) or not minimum <= v <= maximum:
        raise RequestError("'%s' must be an integer in [%d, %d]" % (name, minimum, maximum))
    return v


def plain_parts(rel):
    """The components of a plain relative path (no leading '/', no '', '.' or '..'
    component, no NUL), or None."""
    parts = rel.split("/")
    if rel.startswith("/") or "\0" in rel or any(p in ("", ".", "..") for p in parts):
        return None
    return parts


def parse_request(raw, language):
    """The request of the frame `raw`, checked against the protocol and the image's
    `language` (its file names, whether a harness runs in-process), with defaults filled in;
    RequestError says what is wrong."""
    try:
        req = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise RequestError("request is not valid JSON: %s" % e)
    if not isinstance(req, dict):
        raise RequestError("request must be a JSON object")

    text = text_field

    def integer(name, minimum, maximum, default=None):
        return integer_field(req, name, minimum, maximum, default)

    out = {
        "code": text("'code'", req.get("code")),
        "stdin": text("'stdin'", req.get("stdin") or ""),
        "timeout_ms": integer("timeout_ms", 1, MAX_TIMEOUT_MS),
        "max_output_bytes": integer("max_output_bytes", 0, MAX_OUTPUT_BYTES),
    }
    out["cpu_time_ms"] = (
        None if req.get("cpu_time_ms") is None else integer("cpu_time_ms", 1, MAX_TIMEOUT_MS)
    )
    out["compile_timeout_ms"] = integer("compile_timeout_ms", 1, MAX_TIMEOUT_MS, default=10_000)
    out["output_limit_bytes"] = integer(
        "output_limit_bytes", 0, 1 << 62, default=max(2 * out["max_output_bytes"], 100 << 20)
    )
    test = req.get("test")
    out["test"] = None if test is None else text("'test'", test)
    files = req.get("files")
    files = {} if files is None else files
    if not isinstance(files, dict):
        raise RequestError("'files' must be an object of path -> content")
    for path, content in files.items():
        check_relpath(path, language)
        file_bytes("files[%r]" % path, content, text)
    out["files"] = files
    returned = req.get("return_files")
    returned = [] if returned is None else returned
    if not isinstance(returned, list) or len(returned) > MAX_RETURN_FILES:
        raise RequestError("'return_files' must be a list of at most %d paths" % MAX_RETURN_FILES)
    for path in returned:
        check_relpath(path, language)
    out["return_files"] = returned
    harness = req.get("harness")
    if harness is not None and not isinstance(harness, dict):
        raise RequestError("'harness' must be an object or null")
    if harness is not None and not language.in_process:
        raise RequestError("'harness' is not available for %s: use 'test'" % language.name)
    if harness is not None and out["test"] is not None:
        raise RequestError("'harness' and 'test' cannot be combined")
    out["harness"] = harness
    rest = req.get("rest", False)
    if not isinstance(rest, bool):
        raise RequestError("'rest' must be a boolean")
    out["rest"] = rest
    return out


def file_bytes(name, content, text=None):
    """A file's content as the request carries it: text (a string) or any bytes
    ({"base64": str}, standard alphabet, padded). Returns the bytes to write."""
    import binascii

    if isinstance(content, str):
        if text is not None:
            text(name, content)
        return content.encode("utf-8")
    if isinstance(content, dict) and set(content) == {"base64"} and isinstance(
        content["base64"], str
    ):
        try:
            return binascii.a2b_base64(content["base64"], strict_mode=True)
        except (binascii.Error, ValueError) as e:
            raise RequestError("%s: not base64: %s" % (name, e))
    raise RequestError('%s must be a string (text) or {"base64": str} (bytes)' % name)


def returned_content(data):
    """A returned file as the answer carries it: a string when it is UTF-8, else base64."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        import binascii

        return {"base64": binascii.b2a_base64(data, newline=False).decode("ascii")}


def check_relpath(path, language):
    """A plain relative path below the work directory, or one below DATA_DIR: no '..', '.',
    '//', other absolute path or NUL, and not the program's own main or test file."""
    if not isinstance(path, str) or not path or len(path) > 1024:
        raise RequestError("file paths must be non-empty strings of at most 1024 characters")
    top, rel = file_place(path)
    parts = plain_parts(rel)
    if parts is None:
        raise RequestError("file path %r must be relative (or below %s/), without '.', '..' "
                           "or '//'" % (path, DATA_DIR))
    if path == language.main:
        raise RequestError("file path %r is the program itself" % path)
    if path == language.test:
        raise RequestError("file path %r is reserved for the test" % path)
    return parts


# ----------------------------------------------------------------------------- processes


# Cgroup files the supervisor reads around every run, kept open (read with pread at 0, as a

def file_place(path):
    """(directory, relative path) of a path of `files` or `return_files`: below DATA_DIR
    for one that names it, else below WORKDIR."""
    if path.startswith(DATA_DIR + "/"):
        return DATA_DIR, path[len(DATA_DIR) + 1:]
    return WORKDIR, path
