"""Stateful sessions' kernels with an interpreter child (stdlib only, Python 3.11): K keeps
one bash (BashKernel) or one node running session_kernel.js (NodeKernel) for the session,
hands it each cell and reads its status on pipes of their own; a checkpoint is the child's
own listing of its state (bash: a script of `eval`s; node: session_kernel.js's blob).
docs/sessions.md, "The protocol", says what each keeps.
"""

import binascii
import json
import os
import select
import signal
import time

from codegen_protocol import CHUNK, read_frame, write_all
from codegen_session_files import (
    CheckpointRefused, RestoreRefused, changed_files, skip, stdlib, walk_work,
)
from codegen_session_kernel import KernelBase, KernelGone, describe_status
from codegen_session_limits import (
    BASH, BASH_CELL_DIR, INTERRUPT_REPEAT_S, MAX_REPLY, NODE_KERNEL, START_TIMEOUT_S,
    WORKING_DIRECTORY,
)


def _noop(signum, frame):
    pass


def squote(data):
    """`data` (bytes) as one single-quoted shell word."""
    return b"'" + data.replace(b"'", b"'\\''") + b"'"


def node_path(language):
    cmd = language.config.get("command") or []
    if cmd and os.path.basename(cmd[0]) == "node":
        return cmd[0]
    return "/usr/bin/node"


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

    # checkpoints (docs/sessions.md, "Checkpoints")

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
  builtin printf 'U\0'; builtin umask -p; builtin printf '\0'
  builtin printf 'P\0'; builtin dirs -l -p; builtin printf '\0'
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
            elif tag == b"U":
                if text.strip() and text.strip() != b"umask 0022":  # K's (become_program)
                    entries.append(("umask", text.strip()))
            elif tag == b"P":
                stack = [line for line in text.split(b"\n") if line]
                if len(stack) > 1:
                    skipped.append(skip("<directory stack>", "pushd's directory stack (%d "
                                        "folders below the working directory) is not restored"
                                        % (len(stack) - 1)))
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
