"""The security core of the sandbox runner (stdlib only, Python 3.11): who may do what inside
a warm container, and what is left of a program once it is over. One reviewed unit: every
change here is a change to the sandbox's guarantees.

The runner starts as uid 0 inside the container with only CAP_SETUID, CAP_SETGID and CAP_KILL
(every other capability dropped, no-new-privileges) and refuses to start with more or fewer.
Programs run as PROGRAM_UID (10002) with no capabilities. What a language does with a request
(in-process Python, an exec'd harness, a compile) is the `language` object's
(codegen_languages); nothing it does runs before P has dropped its privileges and scrubbed.

Process model (who holds what):

  Z  the zygote (this process after start-up): imports what Python programs commonly need
     (nothing in exec mode), forks C once, and from then on only forks program processes
     when C asks (over a socketpair), hands C their pipe ends (SCM_RIGHTS), reaps them and
     tells C how they ended. It reads language.json once at start-up, but never
     reads a request: nothing of any execution is ever in its memory, so nothing of one can
     be in a program forked from it.
  C  the supervisor, long-lived, forked once by Z; it never forks. It asks Z for the next P,
     waits until P says it is prepared, announces "ready", reads the request, hands it to P,
     feeds P's stdin, captures its output, enforces the deadline and the output cap, reads
     the cgroup's OOM counter, answers, and kills every process of PROGRAM_UID (it holds
     CAP_KILL and, being root, cannot be signalled back; it forks nothing, so an exhausted
     pids limit does not stop it). Only then does it ask for the next P.
  P  the program process, one per execution, forked by Z before its request exists. Still
     empty-handed it starts a new session, makes itself the OOM killer's first choice,
     becomes PROGRAM_UID (setgroups/setresgid/setresuid: every capability gone), takes fresh
     stdio pipes, closes every other descriptor, resets environment and signals, and scrubs
     what the previous program left: /work, /tmp, /dev/shm, /dev/mqueue and SysV IPC objects
     (every process of that program is already dead). Then it reads the request from C and
     runs it (in-process, or an exec'd child in its session), reads back the requested files
     without following symlinks, and sends C its final report (framed, with its pid) before
     exiting the way the interpreter would.

P can neither signal nor ptrace nor read Z or C (different uid, no capabilities), cannot reach
the container's stdin/stdout (never inherited; /proc of root processes is closed to it), and
starts from Z's start-up state: no earlier request was ever in the memory it came from.
"""

import errno
import json
import os
import resource
import select
import signal
import socket
import stat
import sys
import time

from codegen_protocol import (
    CHUNK, DATA_DIR, PROTOCOL, WORKDIR, Fatal, FrameReader, RequestError, file_bytes,
    file_place, frame, parse_request, read_frame, returned_content, write_all, write_frame,
)

PROGRAM_UID = 10002
PROGRAM_GID = 10002
# /build (compiled languages only: the one tmpfs programs may exec from) holds the binary.
BUILD_DIR = "/build"
SCRUB_DIRS = (WORKDIR, "/tmp", "/dev/shm", "/dev/mqueue", BUILD_DIR, DATA_DIR)
# Time C gives P's compile past its own limit before it counts the compile as timed out.
COMPILE_GRACE_S = 2.0
OOM_CONTROL = "/sys/fs/cgroup/memory/memory.oom_control"
CPU_USAGE = "/sys/fs/cgroup/cpuacct/cpuacct.usage"
PIDS_EVENTS = "/sys/fs/cgroup/pids/pids.events"
# Bytes of the program's status report (exception, harness results, files) C reads at most.
MAX_STATUS_BYTES = 32 << 20
CHILD_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": WORKDIR,
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
}


_libc = None


def libc():
    global _libc
    if _libc is None:
        import ctypes

        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36


def prctl(option, arg):
    return libc().prctl(option, arg, 0, 0, 0) == 0


def read_small(path):
    """The bytes of a small file (/proc, /sys), read with one system call: no Python file
    object (open() builds three, a cost every program process paid at each read)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


def write_small(path, data, flags=os.O_WRONLY):
    fd = os.open(path, flags | os.O_CLOEXEC, 0o666)  # less the umask, as open() does
    try:
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- language


# ----------------------------------------------------------------------------- processes


CGROUP_FDS = {}


def read_cgroup(path):
    """The contents of the cgroup file `path`, or None when it cannot be read."""
    try:
        fd = CGROUP_FDS.get(path)
        if fd is None:
            fd = CGROUP_FDS[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        return os.pread(fd, 4096, 0)
    except OSError:
        return None


def cgroup_counter(path, key):
    """The counter `key` of the cgroup file `path` (lines "key value"), or None when it
    cannot be read."""
    for line in (read_cgroup(path) or b"").split(b"\n"):
        if line.startswith(key + b" "):
            try:
                return int(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None


def oom_kills():
    """The memory cgroup's OOM-kill counter (cgroup v1), or None when it cannot be read."""
    return cgroup_counter(OOM_CONTROL, b"oom_kill")


def pids_limit_hits():
    """How often the pids cgroup refused a fork (cgroup v1 pids.events "max"), or None."""
    return cgroup_counter(PIDS_EVENTS, b"max")


def cpu_ns():
    """CPU time the container's cgroup has used, in nanoseconds (cgroup v1), or None."""
    try:
        return int(read_cgroup(CPU_USAGE) or b"x")
    except ValueError:
        return None


def program_pids():
    """Live (not yet dead or zombie) processes whose real uid is PROGRAM_UID."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fd = os.open("/proc/%s/status" % name, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            data = os.read(fd, 1024)
        except OSError:
            continue
        finally:
            os.close(fd)
        uid = state = None
        for line in data.split(b"\n"):
            if line.startswith(b"State:"):
                state = line.split()[1][:1]
            elif line.startswith(b"Uid:"):
                uid = int(line.split()[1])
                break
        if uid == PROGRAM_UID and state not in (b"Z", b"X"):
            found.append(int(name))
    return found


# Exit statuses of children collected by reap(), for a later wait_for().
REAPED = {}


def reap():
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        REAPED[pid] = status


def wait_for(pid):
    """Exit status of a child, also when reap() already collected it (None if unknown)."""
    if pid in REAPED:
        return REAPED.pop(pid)
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue
        except ChildProcessError:
            return REAPED.pop(pid, None)


def kill_program():
    """SIGKILL every process of PROGRAM_UID until none is left. The caller is root with
    CAP_KILL, so nothing of the program can signal it back, and it forks nothing, so an
    exhausted pids limit does not stop it. False if some survive a generous bound."""
    deadline = time.monotonic() + 5.0
    while True:
        reap()
        pids = program_pids()
        if not pids:
            return True
        if time.monotonic() > deadline:
            return False
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.0002)


def drop_to_program_uid():
    os.setgroups([])
    os.setresgid(PROGRAM_GID, PROGRAM_GID, PROGRAM_GID)
    os.setresuid(PROGRAM_UID, PROGRAM_UID, PROGRAM_UID)
    if os.getresuid() != (PROGRAM_UID,) * 3 or os.getresgid() != (PROGRAM_GID,) * 3:
        raise Fatal("could not become uid %d" % PROGRAM_UID)


# ----------------------------------------------------------------------------- scrub


# ----------------------------------------------------------------------------- scrub


def remove_tree_contents(top, problems, depth=0):
    """Removes everything below `top` without following symlinks (as the owner of it);
    returns whether there was anything."""
    if depth > 200:
        problems.append("%s: nested too deeply to scrub" % top)
        return True
    try:
        entries = os.listdir(top)
    except FileNotFoundError:
        return False
    except OSError as e:
        problems.append("%s: %s" % (top, e.strerror))
        return True
    for name in entries:
        path = os.path.join(top, name)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        except OSError as e:
            problems.append("%s: %s" % (path, e.strerror))
            continue
        if stat.S_ISDIR(st.st_mode):
            try:
                os.chmod(path, 0o700)
            except OSError:
                pass
            remove_tree_contents(path, problems, depth + 1)
            try:
                os.rmdir(path)
            except OSError as e:
                problems.append("%s: %s" % (path, e.strerror))
        else:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as e:
                problems.append("%s: %s" % (path, e.strerror))
    return bool(entries)


def sysv_ipc_ids():
    """(kind, id) of every SysV IPC object in this IPC namespace."""
    ids = []
    for kind in ("shm", "sem", "msg"):
        try:
            lines = read_small("/proc/sysvipc/" + kind).splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 1:
                ids.append((kind, int(cols[1])))
    return ids


def scrub():
    """Removes what a previous program left. Runs as PROGRAM_UID (every object the program
    could create is its own) after all of its processes are dead. Returns the problems."""
    problems = []
    held = []
    for top in SCRUB_DIRS:
        before = len(problems)
        if remove_tree_contents(top, problems) or len(problems) > before:
            held.append(top)
    ids = sysv_ipc_ids()
    if ids:
        import ctypes

        lib = libc()
        for kind, ident in ids:
            if kind == "shm":
                rc = lib.shmctl(ident, 0, None)  # IPC_RMID
            elif kind == "sem":
                rc = lib.semctl(ident, 0, 0)
            else:
                rc = lib.msgctl(ident, 0, None)
            err = ctypes.get_errno()
            if rc != 0 and err not in (errno.EINVAL, errno.EIDRM):
                problems.append("sysv %s %d: %s" % (kind, ident, os.strerror(err)))
        if sysv_ipc_ids():
            problems.append("SysV IPC objects left after the scrub")
    # A directory found empty stays so: every process of the program uid is dead and this
    # one writes nothing. One that held something is listed again.
    for top in held:
        try:
            if os.listdir(top):
                problems.append("%s is not empty after the scrub" % top)
        except FileNotFoundError:
            pass
        except OSError as e:
            problems.append("%s: %s" % (top, e.strerror))
    return problems


def collect_files(paths, budget):
    """Reads the named files below WORKDIR without following any symlink on the way (every
    component is opened with O_NOFOLLOW), regular files only, `budget` bytes in all (a file
    past it is cut). The reader is the program's own uid, so a link can never reach more
    than the program itself could read; the checks make the answer say what happened."""
    files, errors = {}, {}
    for path in paths:
        fd = None
        try:
            top, rel = file_place(path)
            parts = rel.split("/")
            fd = open_below(top, parts)
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            room = max(0, budget)
            data = read_bounded(fd, room)
            if len(data) > room:
                data = data[:room]
                errors[path] = "cut at %d bytes (the cap on returned files)" % room
            budget -= len(data)
            files[path] = returned_content(data)
        except OSError as e:
            files[path] = None
            if e.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link_on_path(top, parts):
                errors[path] = "a symbolic link on the path (not followed)"
            else:
                errors[path] = e.strerror or str(e)
        finally:
            if fd is not None:
                os.close(fd)
    return files, errors


def open_below(top, parts):
    """A read-only descriptor of top/<parts>, reached without following any symbolic link:
    each component is opened with O_NOFOLLOW (the leaf also O_NONBLOCK: a FIFO does not
    block). The runner's returned files and a session's get_file open files so."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                          dir_fd=fd)
            os.close(fd)
            fd = nxt
        leaf = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                       dir_fd=fd)
    finally:
        os.close(fd)
    return leaf


def read_bounded(fd, limit):
    """What `fd` holds, read to its end but at most limit + 1 bytes: more than `limit` bytes
    means it is over."""
    chunks, got = [], 0
    while got <= limit:
        chunk = os.read(fd, min(1 << 20, limit + 1 - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _is_link_on_path(top, parts):
    for i in range(1, len(parts) + 1):
        try:
            if stat.S_ISLNK(os.lstat(os.path.join(top, *parts[:i])).st_mode):
                return True
        except OSError:
            return False
    return False


# ----------------------------------------------------------------------------- program (P)


# ----------------------------------------------------------------------------- program (P)


def close_other_fds(keep):
    """Closes every descriptor above 2 except `keep`: os.closerange around them, up to the
    descriptor limit (one close_range(2) call each; CPython closes one by one where the
    kernel lacks it, at most FD_BOUND calls). Without a finite limit, by listing them."""
    if FD_BOUND is None:
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd > 2 and fd not in keep:
                try:
                    os.close(fd)
                except OSError:
                    pass
        return
    low = 3
    for fd in sorted(keep):
        if fd > low:
            os.closerange(low, fd)
        low = max(low, fd + 1)
    if low < FD_BOUND:
        os.closerange(low, FD_BOUND)


def fd_bound():
    """One past the highest descriptor a process of this container can hold (the hard
    RLIMIT_NOFILE, fixed for the container's life), or None when it is unlimited or huge."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY or hard > (1 << 20):
        return None
    return hard


FD_BOUND = fd_bound()


def reset_signals():
    for sig in range(1, signal.NSIG):
        try:
            handler = signal.getsignal(sig)
        except (ValueError, OSError):
            continue
        if handler not in (None, signal.SIG_DFL, signal.SIG_IGN, signal.default_int_handler):
            signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def become_program(stdin_r, out_w, err_w, keep):
    """Turns this freshly forked process into one of the program's: a session of its own, the
    OOM killer's first choice, PROGRAM_UID without any capability, the given stdio, no other
    descriptor but `keep`, in WORKDIR. The runner's P and a session's kernel both start so."""
    os.setsid()
    try:
        write_small("/proc/self/oom_score_adj", b"1000")
    except OSError:
        pass
    drop_to_program_uid()
    prctl(PR_SET_DUMPABLE, 1)  # an ordinary process of its uid (it may read its own /proc)
    os.dup2(stdin_r, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    close_other_fds(keep=keep)
    os.chdir(WORKDIR)
    os.umask(0o022)


def program_main(fds, language):
    """P: prepares empty-handed, waits for the request, has `language` run it. Never returns."""
    req_r, stdin_r, out_w, err_w, status_w = fds
    code = 70
    try:
        become_program(stdin_r, out_w, err_w, keep=(req_r, status_w))
        # The environment and the signal dispositions are the zygote's, set once in serve():
        # redoing them here cost a third of a millisecond of every run.
        if "random" in sys.modules:  # the zygote's generator state must not repeat across runs
            sys.modules["random"].seed()
        prepared = language.prepare()
        problems = scrub()
        # A language's interpreter may start now, empty-handed like P, while the container is
        # idle: a run then costs the program, not the interpreter's start-up.
        waiting = language.prestart() if not problems else None
        # The high-water mark so far: what P is before any of the request (the zygote's pages
        # it maps count as its own), so that the program's peak is measured from here.
        base_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        write_frame(status_w, {"prepared": not problems, "problems": problems, "rss_kb": base_kb})
        if problems:
            os._exit(71)
        raw = read_frame(req_r)
        if raw is None:
            os._exit(0)
        os.close(req_r)
        req = json.loads(raw.decode("utf-8"))
        del raw
        code = language.run(req, prepared, waiting, status_w)
    except BaseException:
        try:
            import traceback

            os.write(2, traceback.format_exc().encode("utf-8", "replace"))
        except BaseException:
            pass
    os._exit(code)


def write_files(files):
    for path, content in files.items():
        top, path = file_place(path)
        parts = path.split("/")
        if len(parts) > 1:
            os.makedirs(os.path.join(top, *parts[:-1]), exist_ok=True)
        write_small(os.path.join(top, path), file_bytes(path, content),
                    os.O_WRONLY | os.O_CREAT | os.O_TRUNC)


def write_text(path, text):
    write_small(path, text.encode("utf-8"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)


# ----------------------------------------------------------------------------- supervisor (C)


class Capture:
    """Keeps the first `limit` bytes of a stream, counts all of it."""

    def __init__(self, limit):
        self.limit = limit
        self.buf = bytearray()
        self.truncated = False
        self.total = 0

    def feed(self, data):
        self.total += len(data)
        room = self.limit - len(self.buf)
        if room > 0:
            self.buf += data[:room]
        if len(data) > room:
            self.truncated = True

    def text(self):
        return bytes(self.buf).decode("utf-8", errors="replace")


class Supervisor:
    """C's view of one program process P (a child of Z, not of C)."""

    def __init__(self, ctl, pid, fds, language):
        self.ctl = ctl
        self.language = language
        self.pid = pid
        self.req_w, self.stdin_w, self.out_r, self.err_r, self.st_r = fds
        self.status = FrameReader(MAX_STATUS_BYTES)
        self.exit_status = None  # as waitpid reports it, once Z has reaped P
        self.maxrss_kb = None  # P's high-water mark (and its waited-for children's), from Z
        self.base_kb = 0  # P's high-water mark when it was prepared
        self.open = set(fds)

    def close(self, fd):
        if fd in self.open:
            self.open.discard(fd)
            os.close(fd)

    def take_exit(self, block):
        """Z's `exited` message for P (Z is P's parent and reaps it)."""
        if self.exit_status is not None:
            return True
        try:
            msg = self.ctl.recv(64, 0 if block else socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False
        parts = msg.split()
        if len(parts) != 4 or parts[0] != b"exited" or int(parts[1]) != self.pid:
            raise Fatal("unexpected message from the zygote: %r" % msg[:64])
        self.exit_status = int(parts[2])
        self.maxrss_kb = int(parts[3])
        return True

    def peak_memory(self):
        """The program's peak resident memory (KiB): P's high-water mark less what P was when
        prepared. In exec mode the program is another executable, whose own high-water mark
        counts from its exec (but never reads below the runner's size at the fork, about
        10 MiB: the kernel carries the pre-exec mark over); children the program did not
        wait for are not in it."""
        if self.maxrss_kb is None:
            return None
        return max(0, self.maxrss_kb - self.base_kb)

    def describe_exit(self):
        self.take_exit(block=True)
        status = self.exit_status
        if os.WIFSIGNALED(status):
            return "signal %d" % os.WTERMSIG(status)
        return "exit %d" % os.WEXITSTATUS(status)

    def wait_prepared(self):
        """P's first frame: prepared (the previous run's leftovers scrubbed), or why not."""
        while True:
            frames = self.status.frames()
            if frames:
                first = frames[0]
                if first.get("prepared") is not True:
                    raise Fatal("scrub failed: %s"
                                % "; ".join(map(str, first.get("problems") or ["?"])))
                base = first.get("rss_kb")
                self.base_kb = base if isinstance(base, int) and self.language.in_process else 0
                return
            chunk = os.read(self.st_r, 4096)
            if not chunk:
                raise Fatal("the program process died while preparing: %s"
                            % self.describe_exit())
            self.status.feed(chunk)
            if self.status.overflow:
                raise Fatal("unreadable preparation report")

    def abandon(self):
        """No request will come: kill P."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.finish()

    def finish(self):
        """After the answer: P reaped by Z, every descriptor closed."""
        deadline = time.monotonic() + 5.0
        while not self.take_exit(block=False):
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if time.monotonic() > deadline:
                raise Fatal("the program process was not reaped")
            select.select([self.ctl], [], [], 0.05)
        for fd in list(self.open):
            self.close(fd)

    def run(self, req, raw):
        """Hands the request to P and supervises it; returns the result object. The program
        is over when P sends its final report, exits or is killed (deadline, output cap)."""
        out = Capture(req["max_output_bytes"])
        err = Capture(req["max_output_bytes"])
        hard_cap = req["output_limit_bytes"]
        pending = memoryview(req["stdin"].encode("utf-8"))
        oom_before = oom_kills()
        cpu_before = cpu_ns()

        t0 = time.monotonic()
        try:
            write_all(self.req_w, frame(raw))
        except BrokenPipeError:
            pass  # P died: its exit status says how
        self.close(self.req_w)
        deadline = t0 + req["timeout_ms"] / 1000.0
        # A compiled language first compiles, under its own limit: the run's clock, CPU
        # count and limit start when P says the compile ended.
        compiling = self.language.compiles
        compiled = None
        if compiling:
            deadline = t0 + req["compile_timeout_ms"] / 1000.0 + COMPILE_GRACE_S

        for fd in (self.stdin_w, self.out_r, self.err_r, self.st_r):
            os.set_blocking(fd, False)
        poller = select.poll()
        sinks = {self.out_r: out, self.err_r: err, self.st_r: self.status}
        for fd in sinks:
            poller.register(fd, select.POLLIN)
        ctl = self.ctl.fileno()
        poller.register(ctl, select.POLLIN)
        if pending:
            poller.register(self.stdin_w, select.POLLOUT)
        else:
            self.close(self.stdin_w)

        def close_stdin():
            if self.stdin_w in self.open:
                poller.unregister(self.stdin_w)
                self.close(self.stdin_w)

        def read_ready(fd):
            while True:
                try:
                    data = os.read(fd, CHUNK)
                except BlockingIOError:
                    return
                if not data:
                    poller.unregister(fd)
                    self.close(fd)
                    del sinks[fd]
                    return
                sinks[fd].feed(data)
                if len(data) < CHUNK:
                    return

        report = None
        timed_out = output_limited = cpu_limited = False
        cpu_limit_ns = None
        if req["cpu_time_ms"] is not None and cpu_before is not None:
            cpu_limit_ns = req["cpu_time_ms"] * 1_000_000
        end = None
        while report is None and self.exit_status is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            wait_ms = int(remaining * 1000) + 1
            if cpu_limit_ns is not None and not compiling:
                used = (cpu_ns() or cpu_before) - cpu_before
                if used > cpu_limit_ns:
                    cpu_limited = True
                    break
                # Looked at again after a tenth of what is left (5 ms at least): a check
                # costs a read of one cgroup file.
                wait_ms = min(wait_ms, max(5, (cpu_limit_ns - used) // 10_000_000))
            for fd, _ in poller.poll(wait_ms):
                if fd == ctl:
                    poller.unregister(ctl)
                    self.take_exit(block=True)
                    end = time.monotonic()
                elif fd == self.stdin_w:
                    try:
                        n = os.write(self.stdin_w, pending[:CHUNK])
                        pending = pending[n:]
                        if not pending:
                            close_stdin()
                    except BlockingIOError:
                        pass
                    except OSError:  # EPIPE: the program closed its stdin
                        close_stdin()
                elif fd in sinks:
                    read_ready(fd)
                    if fd == self.st_r:
                        for f in self.status.frames():
                            if f.get("pid") == self.pid:
                                report = f
                                end = time.monotonic()
                            elif compiling and isinstance(f.get("compiled"), dict):
                                compiling = False
                                compiled = f["compiled"]
                                t0 = time.monotonic()
                                deadline = t0 + req["timeout_ms"] / 1000.0
                                oom_now = oom_kills()
                                if oom_before is not None and oom_now is not None:
                                    compiled["oom_killed"] = oom_now > oom_before
                                oom_before = oom_now
                                cpu_before = cpu_ns()
            if out.total + err.total > hard_cap:
                output_limited = True
                break
        if end is None:
            end = time.monotonic()
        if compiling:
            # Still compiling at C's own deadline (P's limit did not stop it), or P died.
            compiled = {"status": "timeout" if timed_out else "error", "exit_code": None,
                        "signal": None, "duration_ms": int(round((end - t0) * 1000)),
                        "output": "" if timed_out else "the compile ended without a word"}
            timed_out = False
            t0 = end

        # The program's group dies now; whatever it wrote before is in the pipes.
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        close_stdin()
        if report is None:
            # Killed or dead: its status comes from Z, which reaps it.
            reaped_by = time.monotonic() + 5.0
            while not self.take_exit(block=False):
                if time.monotonic() > reaped_by:
                    raise Fatal("the program process was not reaped after SIGKILL")
                select.select([self.ctl], [], [], 0.05)
            # Only now are all writers of the group dead; one that left the group is
            # killed after the answer: its late output is not part of the run.
            for fd in (self.out_r, self.err_r, self.st_r):
                if fd in sinks:
                    read_ready(fd)
            for f in self.status.frames():
                if f.get("pid") == self.pid:
                    report = f
        else:
            for fd in (self.out_r, self.err_r):
                if fd in sinks:
                    read_ready(fd)
            # P exits right after its report (or died of the SIGKILL above): Z's word on it
            # carries its peak memory.
            reaped_by = time.monotonic() + 5.0
            while not self.take_exit(block=False):
                if time.monotonic() > reaped_by:
                    raise Fatal("the program process was not reaped after its report")
                select.select([self.ctl], [], [], 0.05)
        if out.total + err.total > hard_cap:
            output_limited = True
        oom_after = oom_kills()
        cpu_after = cpu_ns()

        wait_status = self.exit_status
        killed = timed_out or cpu_limited
        if compiled is not None and compiled.get("status") != "ok":
            exit_code, sig = None, None  # nothing ran
        elif report is not None and isinstance(report.get("exit"), int) and not killed:
            exit_code, sig = report["exit"], None
        elif report is not None and isinstance(report.get("signal"), int) and not killed:
            exit_code, sig = None, report["signal"]  # exec mode: the child's signal
        elif wait_status is None:
            exit_code, sig = None, None
        elif os.WIFSIGNALED(wait_status):
            exit_code, sig = None, os.WTERMSIG(wait_status)
        else:
            exit_code, sig = os.WEXITSTATUS(wait_status), None
        report = report or {}
        exception = report.get("exception")
        if not isinstance(exception, dict) or exit_code != 1:
            exception = None
        if exception is None and not killed and (exit_code not in (None, 0) or sig is not None):
            exception = self.language.stderr_assertion(err.text())
        files = report.get("files")
        file_errors = report.get("file_errors")
        if req["return_files"] and not isinstance(files, dict):
            files = {p: None for p in req["return_files"]}
            file_errors = {p: "the program did not finish normally" for p in req["return_files"]}
        phase = report.get("phase")
        test_finished = None
        if req["test"] is not None:
            # No report (os._exit, a kill) means the test did not finish.
            test_finished = report.get("test_finished") is True and not killed
        return {
            "type": "result",
            "exit_code": exit_code,
            "signal": sig,
            "timed_out": timed_out,
            "oom_killed": (
                oom_before is not None and oom_after is not None and oom_after > oom_before
            ),
            "output_limited": output_limited,
            "cpu_limited": cpu_limited,
            "peak_memory_kb": self.peak_memory(),
            "stdout": out.text(),
            "stderr": err.text(),
            "stdout_truncated": out.truncated,
            "stderr_truncated": err.truncated,
            "duration_ms": int(round((end - t0) * 1000)),
            # The whole container's CPU over the run: the program and its children, plus the
            # supervisor's few reads while it waited (one run at a time per container).
            "cpu_ms": (
                int(round((cpu_after - cpu_before) / 1e6))
                if cpu_before is not None and cpu_after is not None
                else None
            ),
            "exception": exception,
            "phase": phase if phase in ("code", "test") else None,
            "test_finished": test_finished,
            "harness": report.get("harness"),
            "compile": compiled,
            "files": files if isinstance(files, dict) else {},
            "file_errors": file_errors if isinstance(file_errors, dict) else {},
        }


def spawn_program(ctl, language):
    """Asks Z for the next P; returns its Supervisor once P is prepared."""
    ctl.send(b"spawn")
    msg, fds, _, _ = socket.recv_fds(ctl, 64, 5)
    parts = msg.split()
    if len(parts) != 2 or parts[0] != b"spawned" or len(fds) != 5:
        for fd in fds:
            os.close(fd)
        raise Fatal("the zygote did not spawn a program process: %r" % msg[:64])
    sup = Supervisor(ctl, int(parts[1]), fds, language)
    sup.wait_prepared()
    return sup


def supervisor_main(ctl, language):
    """C: reads the requests, supervises each P, reports. Long-lived and never forks, so
    the requests it has held never reach a program. Returns 1 when the worker closes stdin;
    raises Fatal when it cannot vouch for the container."""
    runs = 0
    rest = False
    modes = language.harness_modes()
    while True:
        # Nothing of the previous program may outlive it, before the next one is spawned: it
        # is killed at once, whenever the worker asks for the next one.
        if not kill_program():
            raise Fatal("processes of uid %d survived SIGKILL" % PROGRAM_UID)
        if rest and not await_prepare():
            return 1
        sup = spawn_program(ctl, language)
        while True:
            write_frame(1, {"type": "ready", "protocol": PROTOCOL, "runs": runs, "harness": modes})
            raw = read_frame(0)
            if raw is None:
                sup.abandon()
                return 1
            runs += 1
            try:
                req = parse_request(raw, language)
            except RequestError as e:
                write_frame(1, {"type": "error", "message": str(e)})
                continue  # P saw nothing: it serves the next request
            break
        result = sup.run(req, raw)
        write_frame(1, result)
        rest = req["rest"]
        del result, req, raw
        sup.finish()


def await_prepare():
    """Waits for the worker's "prepare" after the result of a request that said "rest";
    False when it closed stdin."""
    raw = read_frame(0)
    if raw is None:
        return False
    try:
        msg = json.loads(raw)
    except ValueError:
        msg = None
    if msg != {"type": "prepare"}:
        raise Fatal("expected prepare after a result, got %r" % raw[:64])
    return True



# ----------------------------------------------------------------------------- zygote (Z)


CAP_KILL, CAP_SETGID, CAP_SETUID = 5, 6, 7


def check_privileges():
    problems = []
    if os.getuid() != 0:
        problems.append("the runner must start as uid 0 (with only SETUID, SETGID and KILL)")
    try:
        with open("/proc/self/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        effective = int(fields.get("CapEff", "0").strip(), 16)
        bounding = int(fields.get("CapBnd", "0").strip(), 16)
        needed = (1 << CAP_KILL) | (1 << CAP_SETGID) | (1 << CAP_SETUID)
        if effective & needed != needed:
            problems.append("missing capabilities: SETUID, SETGID and KILL are needed")
        if (effective | bounding) & ~needed:
            problems.append(
                "more capabilities than SETUID, SETGID and KILL (CapEff=%x CapBnd=%x)"
                % (effective, bounding)
            )
        if fields.get("NoNewPrivs", "0").strip() != "1":
            problems.append("no-new-privileges is not set")
    except OSError as e:
        problems.append("cannot read /proc/self/status: %s" % e)
    return problems


def program_environment(language, extra=None):
    """What every program process starts with, set once in the process it is forked from
    (the zygote, a session's supervisor), which itself neither reads the environment nor
    handles a signal: umask 077 (the program sets its own), CHILD_ENV, the language's
    "env" and `extra`, the default signal dispositions."""
    os.umask(0o077)
    os.environ.clear()
    os.environ.update(CHILD_ENV)
    os.environ.update(language.env)
    os.environ.update(extra or {})
    reset_signals()


def serve(language):
    """Z from start-up on: sets up what every program process starts from, has `language`
    load what its programs find warm, forks C and serves it. Returns the exit status."""
    program_environment(language)
    libc().prctl  # ctypes and the function's pointer, once here rather than in every run
    try:
        language.preload()
    except Exception as e:
        message = "cannot preload the image's modules: %s: %s" % (type(e).__name__, e)
        write_frame(1, {"type": "fatal", "message": message, "oom_killed": False})
        return 2
    import gc

    gc.collect()
    gc.freeze()  # a child's collector never walks (and so never copies) the zygote's objects
    z_end, c_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    oom_kills()  # its cgroup file opened once, here, for C to inherit
    cpid = os.fork()
    if cpid == 0:
        z_end.close()
        code = 5
        try:
            code = supervisor_main(c_end, language)
        except Fatal as e:
            try:
                write_frame(1, {"type": "fatal", "message": str(e), "oom_killed": False})
            except BaseException:
                pass
            code = 6
        except BaseException:
            try:
                import traceback

                traceback.print_exc()
            except BaseException:
                pass
        os._exit(code)
    c_end.close()
    # The zygote never reads a request: its stdin becomes /dev/null (kept open, so that no
    # pipe it creates for a program lands on descriptor 0).
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    try:
        return zygote(z_end, cpid, language)
    finally:
        # Whatever ended the loop, C and any P go with the zygote.
        for pid in (cpid,):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        reap()


def zygote(ctl, cpid, language):
    """Z: forks a program process each time C asks, hands C its pipe ends, reaps it and tells
    C how it ended. Returns the runner's exit status when C is gone."""
    while True:
        try:
            msg = ctl.recv(64)
        except OSError:
            msg = b""
        if msg != b"spawn":
            return supervisor_gone(cpid)
        req_r, req_w = os.pipe()
        stdin_r, stdin_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        st_r, st_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                program_main((req_r, stdin_r, out_w, err_w, st_w), language)
            finally:
                os._exit(70)
        for fd in (req_r, stdin_r, out_w, err_w, st_w):
            os.close(fd)
        theirs = [req_w, stdin_w, out_r, err_r, st_r]
        try:
            socket.send_fds(ctl, [b"spawned %d" % pid], theirs)
        except OSError:
            os.kill(pid, signal.SIGKILL)
            wait_for(pid)
            return supervisor_gone(cpid)
        finally:
            for fd in theirs:
                os.close(fd)
        # P's orphans are reparented to init (docker's), which reaps them; Z waits for its
        # own two children only.
        while True:
            done, status, usage = os.wait4(-1, 0)
            if done == pid:
                break
            if done == cpid:
                os.kill(pid, signal.SIGKILL)
                wait_for(pid)
                REAPED[cpid] = status
                return supervisor_gone(cpid)
        try:
            ctl.send(b"exited %d %d %d" % (pid, status, usage.ru_maxrss))
        except OSError:
            return supervisor_gone(cpid)


def supervisor_gone(cpid):
    status = wait_for(cpid)
    if status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) in (1, 6):
        return 0 if os.WEXITSTATUS(status) == 1 else 3  # stdin closed / C said why
    how = (
        "unknown status"
        if status is None
        else "exit %d" % os.WEXITSTATUS(status)
        if os.WIFEXITED(status)
        else "signal %d" % os.WTERMSIG(status)
    )
    try:
        write_frame(
            1,
            {
                "type": "fatal",
                "message": "the execution supervisor ended with %s" % how,
                # The cgroup's OOM killer took the supervisor: the program ate the memory.
                "oom_killed": status is not None
                and os.WIFSIGNALED(status)
                and os.WTERMSIG(status) == signal.SIGKILL
                and (oom_kills() or 0) > 0,
            },
        )
    except OSError:
        pass
    return 3
