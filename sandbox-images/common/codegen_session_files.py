"""Stateful sessions' checkpoints, what every kernel kind shares (stdlib only, Python
3.11): the walk of /work (files_changed, list_files, a checkpoint's files), the checkpoint's
tar of it, built within its budget, and the extraction of a restore's tar, which refuses
whatever would leave /work and follows no symbolic link. What a checkpoint holds and why:
docs/sessions.md, "The protocol" ("Checkpoints"). K runs all of it as PROGRAM_UID.
"""

import errno
import os
import stat
import sys

from codegen_guard import remove_tree_contents
from codegen_protocol import WORKDIR, write_all
from codegen_session_limits import (
    MAX_FILES_CHANGED, MAX_SKIPPED_NAME, MAX_WALK, clean_text, is_utf8_name,
)


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
    remove_tree_contents(WORKDIR, [])
