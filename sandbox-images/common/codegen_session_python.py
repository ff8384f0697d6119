"""Stateful sessions' Python kernel (Python 3.11 and dill): K runs the cells itself, in one
fresh __main__ (display(), top-level await, tracebacks from the cell's own frames), and its
checkpoint is __main__'s names by dill, one Pickler for them all (so what two names share
comes back shared), name by name: functions, lambdas, closures and classes of the cells by
value (attributes set since included), modules by their import name, and what no pickle
brings back as it was (open files, sockets, threads, generators...) refused and named.
docs/sessions.md, "The protocol" ("Checkpoints"), says what comes back and what does not.
"""

import ast
import binascii
import json
import os
import signal
import sys

from codegen_protocol import WORKDIR
from codegen_session_files import (
    BoundedSink, RestoreRefused, changed_files, skip, stdlib, walk_work,
)
from codegen_session_kernel import KernelBase
from codegen_session_limits import (
    CODEGEN_DIR, MAX_DISPLAY_BYTES, MAX_MESSAGE_BYTES, MAX_SKIPPED_NAME, MAX_TRACEBACK_BYTES,
    MAX_VALUE_BYTES, PACKAGES_DIR, WORKING_DIRECTORY, clean_text, cut_text,
)


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
        sys.dont_write_bytecode = True
        main = types.ModuleType("__main__")
        main.__builtins__ = builtins
        main.__cached__ = None
        sys.modules["__main__"] = main
        self.main = main
        # The checkpoints' pickler, imported now: from the image (before /work and the
        # session's packages are on sys.path, so that neither can stand in for it), with this
        # __main__ as the one it knows.
        stdlib("dill")

        while CODEGEN_DIR in sys.path:
            sys.path.remove(CODEGEN_DIR)
        sys.path.insert(0, WORKDIR)
        # The session's packages, when it has any: a read-only folder the worker installed
        # them into (bind-mounted there; absent otherwise, which the import system skips).
        sys.path.insert(1, PACKAGES_DIR)
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

    # checkpoints (docs/sessions.md, "Checkpoints")

    state_version = 2  # 1: definitions by their source and values by pickle; 2: all by dill

    def state_blob(self, max_bytes):
        """The blob: the magic line, an 8-byte length, a JSON header (working directory,
        sys.path, the modules bound to names, the cells' sources the pickled code needs, the
        random generators, where each value lies in the pickle stream), then the dill
        stream of the values."""
        hashlib = stdlib("hashlib")
        struct = stdlib("struct")
        main = self.main.__dict__
        skipped = []
        modules, values = [], []
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
            values.append(name)
        sink, offsets, unpicklable, files = self.dump_values(values, max_bytes)
        skipped += unpicklable
        linecache = stdlib("linecache")
        sources = {}
        for filename in sorted(files, key=cell_number):
            entry = linecache.cache.get(filename)
            if isinstance(entry, tuple) and len(entry) == 4 and isinstance(entry[2], list):
                sources[filename] = "".join(entry[2])
        meta = {"cwd": None, "sources": sources, "modules": modules, "values": offsets,
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
        """The values of `names` in one dill stream: one Pickler (so one memo: an object two
        names share is pickled once and comes back shared), one dump() per name, so that a
        restore can bind each name as soon as it is loaded. Functions and classes of the
        cells go by value (code, closure, defaults, attributes; a class with every attribute
        set since), their globals as __main__'s own; modules by name. When the whole dump
        fails, each name is tried alone to find the ones that cannot be kept, which are left
        out with why. Returns (sink, [[name, start, end]], skipped, the "<cell N>" files of
        the code it holds). A state with nothing of the cells' own code (no function, class
        or instance of one) is pickled by the C pickler alone, ten times as fast as dill's
        pure-Python one, into the same kind of stream."""
        main = self.main.__dict__
        fast = fast_dump(main, names, max_bytes)
        if fast is not None:
            return fast + ([], set())
        left_out = {}
        tried_alone = False
        while True:
            sink = BoundedSink(max_bytes)
            pickler = state_pickler(sink, self.main)
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
                        state_pickler(Discard(), self.main).dump(main[name])
                    except Exception as e:
                        left_out[name] = unpicklable_reason(main.get(name), e)
            if failed[0] not in left_out:  # fine alone, not in the whole: leave it out too
                left_out[failed[0]] = unpicklable_reason(main.get(failed[0]), failed[1])
        return (sink, offsets, [skip(n, left_out[n]) for n in names if n in left_out],
                pickler.cell_files)

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
        """In this order: the cells' sources into linecache (tracebacks and
        inspect.getsource of the restored code show them), sys.path, the working
        directory, the modules, the values, then the random generators' states (nothing
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
        skipped += ValueLoader(self.main, *values).load(meta["values"])
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


class Discard:
    """A file that forgets what is written to it."""

    @staticmethod
    def write(data):
        return memoryview(data).nbytes


def type_name(value):
    kind = type(value)
    module = {"_io": "io", "_socket": "socket", "_thread": "threading"}.get(
        getattr(kind, "__module__", ""), getattr(kind, "__module__", ""))
    return "%s.%s" % (module, getattr(kind, "__qualname__", "?"))


def refusal(obj):
    """Why `obj` is never checkpointed (None: dill may try): what a pickle could only bring
    back as something else (dill would reopen a file by its name, truncating what was
    written, or make a thread that does not run) or not at all."""
    io = sys.modules.get("io")
    threading = sys.modules.get("threading")
    socket = sys.modules.get("socket")
    types = stdlib("types")
    what = type_name(obj)
    if io is not None and isinstance(obj, io.IOBase):
        if obj.closed:
            return "a closed file object (%s) cannot be checkpointed" % what
        return "an open file (%s) cannot be checkpointed" % what
    if socket is not None and isinstance(obj, socket.socket):
        return "an open socket (%s) cannot be checkpointed" % what
    if threading is not None and isinstance(obj, threading.Thread):
        return ("a running thread is not restored" if obj.is_alive()
                else "a thread (%s) cannot be checkpointed" % what)
    if isinstance(obj, (types.GeneratorType, types.AsyncGeneratorType)):
        return "a generator cannot be checkpointed (its running frame cannot be saved)"
    if isinstance(obj, types.CoroutineType):
        return "a coroutine cannot be checkpointed (its running frame cannot be saved)"
    if isinstance(obj, (types.FrameType, types.TracebackType)):
        return "a frame or traceback cannot be checkpointed"
    if what == "threading.RLock" and "count=0" not in repr(obj):
        return ("a held re-entrant lock (threading.RLock) cannot be checkpointed (the thread "
                "holding it is not restored)")
    if getattr(type(obj), "__module__", "").startswith("codegen_"):
        return "the session kernel's own objects are not checkpointed"
    return None


class Refused(Exception):
    """A value the checkpoint will not hold (see refusal)."""

    def __init__(self, obj, reason):
        super().__init__(reason)
        self.obj = obj
        self.reason = reason


_STATE_PICKLER = []


def state_pickler(file, main):
    """A dill Pickler (protocol 5) of __main__'s values: functions and classes of the cells
    by value, with `main` as the __main__ their globals are; a module (anywhere in a value)
    by its name, as importlib.import_module(name); what refusal() names refused. Its
    `cell_files`: the "<cell N>" files of the code objects it pickled."""
    if not _STATE_PICKLER:
        import importlib

        dill = stdlib("dill")
        module_type = type(sys)
        code_type = type(state_pickler.__code__)

        class StatePickler(dill.Pickler):
            def reducer_override(self, obj):
                if isinstance(obj, module_type):
                    name = getattr(obj, "__name__", None)
                    if isinstance(name, str) and sys.modules.get(name) is obj:
                        return importlib.import_module, (name,)
                    raise Refused(obj, "the module object %r is not imported by name "
                                  "(it is not in sys.modules)" % (name,))
                if isinstance(obj, code_type):
                    if cell_number(obj.co_filename) is not None:
                        self.cell_files.add(obj.co_filename)
                    return NotImplemented
                reason = refusal(obj)
                if reason is not None:
                    raise Refused(obj, reason)
                return NotImplemented

        _STATE_PICKLER.append(StatePickler)
    # byref, recurse and fmode given: a cell may change dill.settings.
    pickler = _STATE_PICKLER[0](file, protocol=5, byref=False, recurse=False, fmode=0)
    pickler._main = main
    pickler.cell_files = set()
    return pickler


class NeedsDill(Exception):
    """What the C pickler would pickle by reference but must go by value."""


_FAST_PICKLER = []


def fast_dump(main, names, max_bytes):
    """(sink, offsets) of the values of `names` as dump_values makes them, by the C pickler,
    when none of them holds a function, a class or code of the cells (__main__) and pickle
    takes every one; else None (dill does it all)."""
    if not _FAST_PICKLER:
        import importlib

        pickle = stdlib("pickle")
        types = stdlib("types")
        module_type = type(sys)

        class FastPickler(pickle.Pickler):
            def persistent_id(self, obj):
                # A module's namespace (globals()) is the module's, which dill refers to:
                # pickle would copy it (and reducer_override never sees a dict).
                if type(obj) is dict and isinstance(obj.get("__name__"), str):
                    module = sys.modules.get(obj["__name__"])
                    if module is not None and getattr(module, "__dict__", None) is obj:
                        raise NeedsDill
                return None

            def reducer_override(self, obj):
                if isinstance(obj, module_type):
                    name = getattr(obj, "__name__", None)
                    if isinstance(name, str) and sys.modules.get(name) is obj:
                        return importlib.import_module, (name,)
                    raise NeedsDill
                if isinstance(obj, types.CodeType) or (
                        isinstance(obj, (types.FunctionType, type))
                        and getattr(obj, "__module__", None) == "__main__"):
                    raise NeedsDill
                if refusal(obj) is not None:
                    raise NeedsDill
                return NotImplemented

        _FAST_PICKLER.append(FastPickler)
    sink = BoundedSink(max_bytes)
    pickler = _FAST_PICKLER[0](sink, protocol=5)
    offsets = []
    for name in names:
        start = sink.size
        try:
            pickler.dump(main[name])
        except Exception:
            return None
        offsets.append([name, start, sink.size])
    return sink, offsets


def unpicklable_reason(value, error):
    """Why a value is not checkpointed, plainly for the kinds no pickle brings back."""
    what = type_name(value)
    try:
        reason = refusal(value)
        if reason is not None:
            return reason
        if isinstance(error, Refused):
            return "it holds what cannot be checkpointed (%s): %s" % (what, error.reason)
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
    for v in meta["values"]:
        if not (isinstance(v, list) and len(v) == 3 and isinstance(v[0], str)
                and all(isinstance(x, int) and not isinstance(x, bool) for x in v[1:])
                and 0 <= v[1] <= v[2] <= values_size):
            raise TypeError("values")
    for key, size in (("random", 3), ("numpy_random", 5)):
        if not (meta[key] is None or isinstance(meta[key], list) and len(meta[key]) == size):
            raise TypeError(key)


class ValueLoader:
    """Loads the values' dill stream (see PythonKernel.dump_values) name by name, binding
    each as it comes.

    A value that fails to load (a module that no longer imports, a __setstate__ that
    raises) is skipped; the ones after it still load. Protocol 5 memoizes by count
    (MEMOIZE: the next index is the number of entries so far), and a failed load leaves
    the rest of its frame in the unpickler's buffer: so after a failure a fresh unpickler
    takes over, its memo replayed from the old one up to where the failed dump's entries
    end (the entries it did not make are placeholders). From then on each dump is read
    first (pickletools): one that refers to an entry of a failed dump is skipped too (it
    would get a half-made or placeholder object), and its entries are replayed as
    placeholders."""

    def __init__(self, main, data, base):
        self.module = main
        self.main = main.__dict__
        self.data = memoryview(data)
        self.base = base  # where the values' stream starts in `data`
        io = stdlib("io")
        self.stream = io.BytesIO(data)
        self.table = {}
        self.unpickler = self.new_unpickler()
        self.broken = []  # (first, end) memo indices of dumps that did not load
        self.memo_at = None  # memo entries before the next dump, counted once a load failed

    def new_unpickler(self):
        dill = stdlib("dill")
        loader = self

        class Unpickler(dill.Unpickler):
            def persistent_load(self, pid):
                return loader.table[pid]  # only the replays use persistent ids

        # ignore: an object of a class of __main__ keeps the class it was pickled with (dill
        # would otherwise give it whatever class now has that name).
        unpickler = Unpickler(self.stream, ignore=True)
        unpickler._main = self.module
        return unpickler

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
