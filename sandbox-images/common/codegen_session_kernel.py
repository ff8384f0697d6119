"""Stateful sessions' kernel K, what every kind shares (stdlib only, Python 3.11): its start
(forked by the session supervisor, it becomes the program as the runner's P does), its loop
over S's requests, the file requests, and checkpoints and restores around each kind's own
state (codegen_session_python, codegen_session_shell). The protocol between S and K:
docs/sessions.md, "The protocol".
"""

import binascii
import errno
import json
import os
import signal
import stat
import sys

from codegen_guard import become_program, open_below, read_bounded, reset_signals
from codegen_protocol import WORKDIR, read_frame, write_all, write_frame
from codegen_session_files import (
    CheckpointRefused, RestoreRefused, build_tar, clear_work, extract_files, walk_tree,
    walk_work,
)
from codegen_session_limits import CHECKPOINT_CHUNK, MAX_LISTED, STATE_MAGIC


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


class KernelGone(Exception):
    """The kernel's shell or node child died: the session is over."""


def kernel_main(fds, kernel_class, language):
    """K: drops to the program's uid as the runner's P does, starts the kind's kernel (an
    instance of `kernel_class`) and serves S's requests until S closes the pipe. Never
    returns."""
    req_r, rep_w, in_r, out_w, err_w = fds
    code = 70
    try:
        become_program(in_r, out_w, err_w, keep=(req_r, rep_w))
        reset_signals()
        pid = os.getpid()
        kernel = kernel_class(req_r, rep_w, language)
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


class KernelBase:
    """What every kind of K does: the file requests (as PROGRAM_UID), and checkpoints and
    restores around the kind's own state_blob / read_state / apply_state."""

    child = None
    kind = None  # the kernel kind: the state blobs' magic line names it
    state_version = 1  # the version of the kind's blob format, in the same line

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
        return STATE_MAGIC % (self.kind.encode("ascii"), self.state_version)

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
            fd = open_below(WORKDIR, parts)
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                return {"error": "%s is a folder" % path}
            if not stat.S_ISREG(st.st_mode):
                return {"error": "%s is not a regular file" % path}
            if st.st_size > max_bytes:
                return {"error": "%s is %d bytes, over max_bytes (%d)"
                        % (path, st.st_size, max_bytes)}
            data = read_bounded(fd, max_bytes)
            if len(data) > max_bytes:
                return {"error": "%s is over max_bytes (%d)" % (path, max_bytes)}
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
