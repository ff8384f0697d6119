"""What a value is to the test harness (stdlib only, Python 3.11): its JSON rendering for a
report ("actual_output") and its comparison with an expected JSON value. Pure functions of the
value, which may be the program's own object: every attribute, method and conversion they
touch is guarded, and a JSON expected value is never compared through the actual value's
__eq__ (an "always equal" object cannot pass a case). Imported by harness.py.
"""

import json
import math
import re
import sys
import types

DEFAULT_FLOAT_TOLERANCE = 1e-6
# Limits for rendering actual values into the result ("actual_output").
RENDER_MAX_NODES = 10000
RENDER_MAX_DEPTH = 64
RENDER_MAX_STR = 10000
# Limits for error texts.
MAX_ERROR_MESSAGE = 4000
JSON_ENCODER = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":"))
_SURROGATES = re.compile("[\ud800-\udfff]")


class CaseTimeout(BaseException):
    """Raised into user code when a case exceeds case_timeout_ms."""


# ---------------------------------------------------------------------------- texts


def safe_str(x, limit=MAX_ERROR_MESSAGE):
    try:
        s = str(x)
    except BaseException:
        try:
            s = "<unprintable %s>" % type(x).__name__
        except BaseException:
            s = "<unprintable>"
    if not isinstance(s, str):
        s = "<unprintable>"
    if len(s) > limit:
        s = s[:limit] + "...(%d more chars)" % (len(s) - limit)
    return s


def type_name(x):
    try:
        n = type(x).__name__
        return n if isinstance(n, str) else "object"
    except BaseException:
        return "object"



# ------------------------------------------------------------------ value rendering


class _Budget:
    def __init__(self):
        self.nodes = RENDER_MAX_NODES
        self.truncated = False


_PLAIN_CALLABLES = (types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                    types.ModuleType, type)


def _render_str(s, budget):
    s = str.__str__(s)
    if len(s) > RENDER_MAX_STR:
        budget.truncated = True
        s = s[:RENDER_MAX_STR] + "...(%d more chars)" % (len(s) - RENDER_MAX_STR)
    return s


def _safe_repr(x, budget):
    try:
        r = repr(x)
        if not isinstance(r, str):
            raise TypeError
    except BaseException as e:
        if isinstance(e, CaseTimeout):
            raise
        r = "<unrepresentable %s object>" % type_name(x)
    return _render_str(r, budget)


def _key_str(k):
    """How json.dumps would spell a dict key (None for keys it cannot spell)."""
    if isinstance(k, str):
        return str.__str__(k)
    if k is True:
        return "true"
    if k is False:
        return "false"
    if k is None:
        return "null"
    if isinstance(k, int):
        try:
            return str(int.__index__(k))
        except ValueError:
            return None
    if isinstance(k, float):
        return float.__repr__(k) if math.isfinite(k) else (
            "NaN" if math.isnan(k) else ("Infinity" if k > 0 else "-Infinity"))
    return None


def _object_fields(a):
    """Attribute dict of a user object (dataclass fields, namedtuple fields, __dict__
    plus __slots__), or None if it has none of these."""
    cls = type(a)
    try:
        if isinstance(a, tuple) and isinstance(getattr(cls, "_fields", None), tuple):
            return dict(zip(cls._fields, tuple.__iter__(a)))
        if isinstance(getattr(cls, "__dataclass_fields__", None), dict):
            dc = sys.modules.get("dataclasses")
            if dc is not None:
                return {f.name: getattr(a, f.name) for f in dc.fields(a)}
        if isinstance(a, _PLAIN_CALLABLES):
            return None
        fields = None
        d = getattr(a, "__dict__", None)
        if isinstance(d, dict):
            fields = dict(d)
        for klass in cls.__mro__:
            slots = klass.__dict__.get("__slots__", ())
            if isinstance(slots, str):
                slots = (slots,)
            for name in slots:
                if name in ("__dict__", "__weakref__"):
                    continue
                try:
                    v = getattr(a, name)
                except AttributeError:
                    continue
                if fields is None:
                    fields = {}
                fields.setdefault(name, v)
        return fields
    except CaseTimeout:
        raise
    except Exception:
        return None


def _numpy_types():
    """numpy's array type and its scalar types, when numpy was loaded before this module (the
    python-sci image preloads it in the zygote, before any program runs): taken now, so that
    a program cannot add its own class to them later."""
    np = sys.modules.get("numpy")
    if np is None:
        return None, frozenset(), None
    scalars = frozenset(t for t in set(np.sctypeDict.values()) if isinstance(t, type))
    return np.ndarray, scalars, np.generic.item


_NP_ARRAY, _NP_SCALARS, _NP_ITEM = _numpy_types()


def plain(x):
    """A numpy array or scalar as the Python list or number it holds (exact types only: a
    subclass could override what it says); anything else as it is."""
    if _NP_ARRAY is None:
        return x
    t = type(x)
    if t is _NP_ARRAY:
        return _NP_ARRAY.tolist(x)
    if t in _NP_SCALARS:
        return _NP_ITEM(x)
    return x


def _render(x, budget, depth=0, active=None):
    """JSON-safe rendering of an arbitrary value, for display. Tuples -> lists,
    sets -> sorted lists (when sortable), objects -> their fields (else repr),
    non-finite floats -> "NaN"/"Infinity"/"-Infinity", ints outside the 64-bit range
    -> decimal strings, bytes -> their repr; numpy arrays and scalars as what they hold."""
    x = plain(x)
    if active is None:
        active = set()
    if x is None or x is True or x is False:
        return x
    if isinstance(x, bool):
        return bool(x)
    if isinstance(x, int):
        try:
            v = int.__index__(x)
        except BaseException:
            return _safe_repr(x, budget)
        if -(1 << 63) <= v < (1 << 64):
            return v
        try:
            return str(v)
        except ValueError:  # int_max_str_digits
            return "<int with %d bits>" % v.bit_length()
    if isinstance(x, float):
        v = float.__float__(x)
        if math.isfinite(v):
            return v
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    if isinstance(x, str):
        return _render_str(x, budget)
    if isinstance(x, (bytes, bytearray, memoryview)):
        try:
            return _render_str(repr(bytes(x)), budget)
        except BaseException:
            return _safe_repr(x, budget)
    dec = sys.modules.get("decimal")
    frac = sys.modules.get("fractions")
    if (dec is not None and isinstance(x, dec.Decimal)) or (
            frac is not None and isinstance(x, frac.Fraction)):
        try:
            f = float(x)
            if math.isfinite(f):
                return f
        except (OverflowError, ValueError):
            pass
        return _safe_repr(x, budget)
    enum = sys.modules.get("enum")
    if enum is not None and isinstance(x, enum.Enum):
        return _safe_repr(x, budget)

    if budget.nodes <= 0:
        budget.truncated = True
        return "..."
    budget.nodes -= 1
    if depth >= RENDER_MAX_DEPTH:
        budget.truncated = True
        return "<too deep>"
    if id(x) in active:
        return "<recursion>"
    active.add(id(x))
    try:
        if isinstance(x, dict):
            return _render_mapping(list(dict.items(x)), budget, depth, active)
        if isinstance(x, (set, frozenset)):
            items = list(set.__iter__(x)) if isinstance(x, set) else list(frozenset.__iter__(x))
            try:
                items = sorted(items)
                sortable = True
            except CaseTimeout:
                raise
            except Exception:  # mixed types: order by the rendered JSON instead
                sortable = False
            rendered = _render_items(items, budget, depth, active)
            if not sortable:
                try:
                    rendered.sort(key=JSON_ENCODER.encode)
                except Exception:
                    pass
            return rendered
        if isinstance(x, (list, tuple)):  # namedtuples included
            items = list.__getitem__(x, slice(None)) if isinstance(x, list) else list(tuple.__iter__(x))
            return _render_items(items, budget, depth, active)
        import collections.abc as cabc  # cheap: already imported at startup
        if isinstance(x, (range, cabc.Sequence)) and not isinstance(x, _PLAIN_CALLABLES):
            try:
                return _render_items(list(x), budget, depth, active)
            except CaseTimeout:
                raise
            except Exception:
                return _safe_repr(x, budget)
        if isinstance(x, cabc.Mapping):
            try:
                return _render_mapping(list(x.items()), budget, depth, active)
            except CaseTimeout:
                raise
            except Exception:
                return _safe_repr(x, budget)
        fields = _object_fields(x)
        if fields:
            return _render_mapping(list(fields.items()), budget, depth, active)
        return _safe_repr(x, budget)
    finally:
        active.discard(id(x))


def _render_items(items, budget, depth, active):
    out = []
    for i, item in enumerate(items):
        if budget.nodes <= 0:
            budget.truncated = True
            out.append("...(%d more items)" % (len(items) - i))
            break
        budget.nodes -= 1
        out.append(_render(item, budget, depth + 1, active))
    return out


def _render_mapping(pairs, budget, depth, active):
    out = {}
    for i, (k, v) in enumerate(pairs):
        if budget.nodes <= 0:
            budget.truncated = True
            out["..."] = "(%d more keys)" % (len(pairs) - i)
            break
        budget.nodes -= 1
        ks = _key_str(k)
        if ks is None:
            ks = _safe_repr(k, budget)
        out[ks] = _render(v, budget, depth + 1, active)
    return out


def render_value(x):
    """(JSON-safe rendering, truncated flag)."""
    budget = _Budget()
    try:
        r = _render(x, budget)
    except CaseTimeout:
        raise
    except BaseException:  # RecursionError, MemoryError, anything odd
        r, budget.truncated = _safe_repr(x, budget), True
    return r, budget.truncated


def sanitize(x):
    """Final pass over a result: strings without lone surrogates (strict JSON
    parsers reject them), dict keys as strings."""
    if isinstance(x, str):
        try:
            x.encode("utf-8")
            return x
        except UnicodeEncodeError:
            return _SURROGATES.sub("\ufffd", x)
    if isinstance(x, dict):
        return {sanitize(k if isinstance(k, str) else str(k)): sanitize(v) for k, v in x.items()}
    if isinstance(x, list):
        return [sanitize(v) for v in x]
    return x


# ------------------------------------------------------------------------ comparison


def _real_value(x):
    """Plain int/float for a real number (not bool), else None. Base-class methods,
    so numeric subclasses cannot lie about their value."""
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return int.__index__(x)
    if isinstance(x, float):
        return float.__float__(x)
    dec = sys.modules.get("decimal")
    frac = sys.modules.get("fractions")
    if dec is not None and isinstance(x, dec.Decimal):
        return x  # stdlib type, trusted
    if frac is not None and isinstance(x, frac.Fraction):
        return x
    return None


def _numbers_equal(a, e, tol):
    if isinstance(a, int) and isinstance(e, int):
        return a == e
    try:
        fa, fe = float(a), float(e)
    except (OverflowError, ValueError, TypeError):
        return a == e
    if math.isnan(fa) or math.isnan(fe):
        return math.isnan(fa) and math.isnan(fe)
    return math.isclose(fa, fe, rel_tol=tol, abs_tol=tol)


def _as_sequence(a):
    """The items of a list/tuple/other Sequence (not str/bytes), else None."""
    if isinstance(a, list):
        return list.__getitem__(a, slice(None))
    if isinstance(a, tuple):
        return list(tuple.__iter__(a))
    if isinstance(a, (str, bytes, bytearray, memoryview)):
        return None
    import collections.abc as cabc
    if isinstance(a, (range, cabc.Sequence)):
        return list(a)
    return None


def _as_set_items(a):
    if isinstance(a, set):
        return list(set.__iter__(a))
    if isinstance(a, frozenset):
        return list(frozenset.__iter__(a))
    return None


def _hash_key(x):
    """Exact, type-tagged hashable key for simple values (no floats: those need the
    tolerance), or raise TypeError."""
    if x is None or isinstance(x, bool):
        return ("b", x)
    if isinstance(x, int):
        return ("i", int.__index__(x))
    if isinstance(x, str):
        return ("s", str.__str__(x))
    if isinstance(x, (bytes, bytearray)):
        return ("y", bytes(x))
    if isinstance(x, (list, tuple)):
        return ("l", tuple(_hash_key(v) for v in x))
    raise TypeError


def _sets_equal(actual_items, expected_items, tol, depth):
    try:  # fast path: simple hashable elements
        ak = {_hash_key(v) for v in actual_items}
        ek = {_hash_key(v) for v in expected_items}
        return ak == ek
    except TypeError:
        pass
    uniq = []
    for e in expected_items:
        if not any(equal(u, e, tol, depth + 1) for u in uniq):
            uniq.append(e)
    if len(uniq) != len(actual_items):
        return False
    remaining = list(actual_items)
    for e in uniq:
        for i, a in enumerate(remaining):
            if equal(a, e, tol, depth + 1):
                del remaining[i]
                break
        else:
            return False
    return True


def _mapping_pairs(a):
    if isinstance(a, dict):
        return list(dict.items(a))
    import collections.abc as cabc
    if isinstance(a, cabc.Mapping):
        return list(a.items())
    return None


def _dicts_equal(pairs, expected, tol, depth):
    if len(pairs) != len(expected):
        return False
    exp_pairs = list(dict.items(expected)) if isinstance(expected, dict) else list(expected.items())
    # 1. exact keys (str keys via str.__eq__ semantics: compare plain copies)
    try:
        amap = {(_hash_key(k) if _hashable_simple(k) else k): v for k, v in pairs}
        emap = {(_hash_key(k) if _hashable_simple(k) else k): v for k, v in exp_pairs}
        if len(amap) == len(pairs) and amap.keys() == emap.keys():
            return all(equal(amap[k], emap[k], tol, depth + 1) for k in emap)
    except TypeError:
        pass
    # 2. JSON can only spell string keys: match the actual keys as json.dumps would
    #    spell them ({1: "a"} equals {"1": "a"}), if that is a bijection.
    amap = {}
    for k, v in pairs:
        ks = _key_str(k)
        if ks is None or ks in amap:
            return False
        amap[ks] = v
    emap = {}
    for k, v in exp_pairs:
        ks = _key_str(k)
        if ks is None or ks in emap:
            return False
        emap[ks] = v
    if amap.keys() != emap.keys():
        return False
    return all(equal(amap[k], emap[k], tol, depth + 1) for k in emap)


def _hashable_simple(k):
    return k is None or isinstance(k, (bool, int, str, bytes))


def _fields_match(fields, expected, tol, depth):
    if set(fields) != set(expected):
        # ignore private attributes the expected value does not mention
        fields = {k: v for k, v in fields.items()
                  if k in expected or not (isinstance(k, str) and k.startswith("_"))}
    return _dicts_equal(list(fields.items()), expected, tol, depth)


def equal(a, e, tol, depth=0):
    """Deep comparison of an actual value against an expected value.

    For JSON-shaped expected values (None/bool/int/float/str/list/dict) the
    comparison is structural and never calls the actual value's own __eq__:
      None == None only; bool only equals bool; int/float within tolerance
      (math.isclose rel+abs, NaN == NaN, int vs int exact); str only equals str
      (bytes never equal str); list equals list/tuple/other Sequence element-wise,
      or a set/frozenset as a set; dict equals a Mapping (key order irrelevant,
      non-str actual keys matched by their JSON spelling) or an object with the same
      fields (dataclass, namedtuple, __dict__/__slots__; private fields the expected
      dict does not mention are ignored).
    A numpy array or scalar (python-sci) is compared as the list or number it holds.
    Any other expected value (in-process callers) is compared with the expected
    value's __eq__, then field by field for objects of the same type."""
    if depth > 500:
        raise RecursionError("values nested too deeply to compare")
    a = plain(a)
    if e is None:
        return a is None
    if isinstance(e, bool):
        return isinstance(a, bool) and bool(a) == bool(e)
    ev = _real_value(e)
    if ev is not None:
        av = _real_value(a)
        return av is not None and _numbers_equal(av, ev, tol)
    if isinstance(e, str):
        return isinstance(a, str) and str.__eq__(str.__str__(a), str.__str__(e))
    if isinstance(e, (bytes, bytearray)):
        return isinstance(a, (bytes, bytearray)) and bytes(a) == bytes(e)
    if isinstance(e, (list, tuple)):
        items = _as_set_items(a)
        if items is not None:
            return _sets_equal(items, _as_sequence(e), tol, depth)
        items = _as_sequence(a)
        exp = _as_sequence(e)
        if items is None or len(items) != len(exp):
            return False
        return all(equal(x, y, tol, depth + 1) for x, y in zip(items, exp))
    if isinstance(e, (set, frozenset)):
        items = _as_set_items(a)
        return items is not None and _sets_equal(items, _as_set_items(e), tol, depth)
    if isinstance(e, dict):
        pairs = _mapping_pairs(a)
        if pairs is not None:
            return _dicts_equal(pairs, e, tol, depth)
        fields = _object_fields(a)
        if fields is None:
            return False
        return _fields_match(fields, e, tol, depth)
    # expected is some other object (in-process callers only)
    try:
        r = e == a
        if r is True:
            return True
    except CaseTimeout:
        raise
    except Exception:
        pass
    if type(a) is type(e):
        fa, fe = _object_fields(a), _object_fields(e)
        if fa is not None and fe is not None:
            return _fields_match(fa, fe, tol, depth)
    return False


def deep_equal(actual, expected, float_tolerance=DEFAULT_FLOAT_TOLERANCE):
    """Public helper (see equal)."""
    return equal(actual, expected, float_tolerance)


def exception_matches(exc, name):
    """`name` ("ValueError", "json.JSONDecodeError", "builtins.ValueError", ...) is the
    class of `exc` or one of its bases."""
    try:
        mro = type(exc).__mro__
    except Exception:
        return False
    for cls in mro:
        try:
            names = {cls.__name__, cls.__qualname__, "%s.%s" % (cls.__module__, cls.__qualname__)}
        except Exception:
            continue
        if name in names:
            return True
    return False
