"""Host-side tests for harness.py (benign code only, stdlib only, a few seconds).

Run:  python3 -m unittest discover -s sandbox-images/python -p 'test_*.py'
  or, from this folder:  python3 -m unittest -v test_harness
"""

import collections
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
# harness.py and codegen_values.py are in common/ (the python-sci image runs them too).
COMMON = os.path.join(os.path.dirname(HERE), "common")
if COMMON not in sys.path:
    sys.path.insert(0, COMMON)

import codegen_values  # noqa: E402
import harness  # noqa: E402

HARNESS = os.path.join(COMMON, "harness.py")
MARKER = "@@codegen-harness@@ "


def by_name_trunc(res, name):
    return [c for c in res["cases"] if c["name"] == name][0]["actual_truncated"]


def strict_json(result):
    """Results must survive a strict JSON round trip (no NaN/Infinity)."""
    text = json.dumps(result, allow_nan=False, ensure_ascii=True)
    return json.loads(text)


def cases(code, function, case_list, **kw):
    req = {"code": textwrap.dedent(code), "function": function, "cases": case_list,
           "nonce": "n-123"}
    req.update(kw)
    res = harness.run_cases(req)
    strict_json(res)
    return res


def one(code, function, inputs, expected=None, **case_kw):
    c = {"name": "c", "inputs": inputs, "expected_output": expected}
    c.update(case_kw)
    res = cases(code, function, [c])
    return res["cases"][0]


def program(code, test, entry_point=None, **kw):
    req = {"code": textwrap.dedent(code), "test": textwrap.dedent(test),
           "entry_point": entry_point, "nonce": "p-456"}
    req.update(kw)
    res = harness.run_program_test(req)
    strict_json(res)
    return res


def cli(mode, request, timeout=60):
    """Run the harness like the runner does; returns (exit code, stdout text). The timeout
    only bounds a failure (a harness that never ends)."""
    with tempfile.TemporaryDirectory(prefix="codegen-harness-test-") as cwd:
        p = subprocess.run([sys.executable, "-I", HARNESS, mode],
                           input=json.dumps(request).encode(), cwd=cwd,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return p.returncode, p.stdout.decode("ascii")


def parse_line(out):
    lines = out.splitlines(keepends=True)
    assert len(lines) == 1, "expected exactly one line, got %r" % out[:500]
    assert lines[0].startswith(MARKER) and lines[0].endswith("\n"), lines[0][:200]
    return json.loads(lines[0][len(MARKER):])


# --------------------------------------------------------------------------- equality


@dataclasses.dataclass
class Point:
    x: int
    y: float


class Node:
    def __init__(self, val, next=None):
        self.val = val
        self.next = next


class AlwaysEqual:
    def __eq__(self, other):
        return True


class LyingStr(str):
    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


class DeepEqualTest(unittest.TestCase):
    def eq(self, actual, expected, tol=1e-6):
        return codegen_values.deep_equal(actual, expected, tol)

    def test_nested(self):
        self.assertTrue(self.eq({"a": [1, {"b": [2, 3]}], "c": None}, {"c": None, "a": [1, {"b": [2, 3]}]}))
        self.assertFalse(self.eq({"a": [1, {"b": [2, 4]}]}, {"a": [1, {"b": [2, 3]}]}))
        self.assertFalse(self.eq([1, 2], [1, 2, 3]))
        self.assertFalse(self.eq({"a": 1}, {"a": 1, "b": 2}))

    def test_tuple_vs_list(self):
        self.assertTrue(self.eq((1, 2), [1, 2]))
        self.assertTrue(self.eq([(1, 2), (3, (4, 5))], [[1, 2], [3, [4, 5]]]))
        self.assertTrue(self.eq(collections.namedtuple("P", "a b")(1, 2), [1, 2]))
        self.assertTrue(self.eq(range(3), [0, 1, 2]))
        self.assertFalse(self.eq("ab", ["a", "b"]))
        self.assertFalse(self.eq(iter([1, 2]), [1, 2]))

    def test_sets(self):
        self.assertTrue(self.eq({3, 1, 2}, [1, 2, 3]))
        self.assertTrue(self.eq(frozenset({"b", "a"}), ["a", "b"]))
        self.assertTrue(self.eq({(1, 2), (3, 4)}, [[3, 4], [1, 2]]))
        self.assertTrue(self.eq({0.1 + 0.2, 1.0}, [1.0, 0.3]))  # tolerance inside sets
        self.assertFalse(self.eq({1, 2}, [1, 2, 3]))
        self.assertFalse(self.eq({1, 2, 3}, [1, 2]))
        self.assertFalse(self.eq({1, 2}, [1, 3]))
        self.assertFalse(self.eq({True}, [1]))
        self.assertFalse(self.eq([2, 1], [1, 2]))  # a list stays ordered

    def test_float_tolerance(self):
        self.assertTrue(self.eq(0.1 + 0.2, 0.3))
        self.assertTrue(self.eq(1.0000001, 1.0))
        self.assertFalse(self.eq(1.001, 1.0))
        self.assertTrue(self.eq(1.001, 1.0, tol=1e-2))
        self.assertFalse(self.eq(1.0 + 1e-12, 1.0, tol=0.0))
        self.assertTrue(self.eq(2.0, 2))
        self.assertTrue(self.eq(2, 2.0))
        self.assertTrue(self.eq([[0.1 + 0.2]], [[0.3]]))
        self.assertTrue(self.eq(1e-9, 0.0))  # abs_tol
        self.assertFalse(self.eq(10 ** 400, 1e300))  # no OverflowError
        self.assertTrue(self.eq(10 ** 400, 10 ** 400))
        self.assertFalse(self.eq(10 ** 400 + 1, 10 ** 400))  # ints stay exact

    def test_nan_inf(self):
        nan, inf = float("nan"), float("inf")
        self.assertTrue(self.eq(nan, nan))
        self.assertTrue(self.eq([1.0, nan], [1.0, nan]))
        self.assertFalse(self.eq(nan, 1.0))
        self.assertFalse(self.eq(1.0, nan))
        self.assertTrue(self.eq(inf, inf))
        self.assertFalse(self.eq(inf, -inf))
        self.assertFalse(self.eq(inf, 1e308))

    def test_dict_key_order_and_json_keys(self):
        self.assertTrue(self.eq({"b": 1, "a": 2}, {"a": 2, "b": 1}))
        self.assertTrue(self.eq({1: "x", 2: "y"}, {"1": "x", "2": "y"}))  # JSON keys are str
        self.assertTrue(self.eq(collections.OrderedDict([("z", 1), ("y", 2)]), {"y": 2, "z": 1}))
        self.assertTrue(self.eq(collections.Counter("aab"), {"a": 2, "b": 1}))
        self.assertFalse(self.eq({1: "x"}, {"2": "x"}))
        self.assertFalse(self.eq({1: "x", "1": "y"}, {"1": "x"}))

    def test_objects_by_value(self):
        self.assertTrue(self.eq(Point(1, 2.0), {"x": 1, "y": 2.0}))
        self.assertTrue(self.eq(Point(1, 0.1 + 0.2), {"y": 0.3, "x": 1}))
        self.assertFalse(self.eq(Point(1, 2.0), {"x": 1, "y": 3.0}))
        self.assertFalse(self.eq(Point(1, 2.0), {"x": 1}))
        linked = Node(1, Node(2, Node(3)))
        self.assertTrue(self.eq(linked, {"val": 1, "next": {"val": 2, "next": {"val": 3, "next": None}}}))
        self.assertFalse(self.eq(linked, {"val": 1, "next": {"val": 2, "next": None}}))
        self.assertTrue(self.eq(collections.namedtuple("P", "a b")(1, 2), {"a": 1, "b": 2}))

        class WithPrivate:
            def __init__(self):
                self.value = 5
                self._cache = {"x": 1}

        self.assertTrue(self.eq(WithPrivate(), {"value": 5}))

        class Slotted:
            __slots__ = ("a", "b")

            def __init__(self):
                self.a, self.b = 1, [2]

        self.assertTrue(self.eq(Slotted(), {"a": 1, "b": [2]}))
        # an expected *object* (in-process callers): its __eq__, then fields
        self.assertTrue(self.eq(Point(1, 2.0), Point(1, 2.0)))
        self.assertTrue(self.eq(Node(1, Node(2)), Node(1, Node(2))))
        self.assertFalse(self.eq(Node(1, Node(2)), Node(1, Node(3))))

    def test_bytes_vs_str(self):
        self.assertFalse(self.eq(b"abc", "abc"))
        self.assertFalse(self.eq("abc", b"abc"))
        self.assertFalse(self.eq([b"a"], ["a"]))
        self.assertTrue(self.eq(b"abc", b"abc"))
        self.assertTrue(self.eq(bytearray(b"abc"), b"abc"))

    def test_strict_types(self):
        self.assertFalse(self.eq(True, 1))
        self.assertFalse(self.eq(1, True))
        self.assertFalse(self.eq(0, None))
        self.assertFalse(self.eq(None, 0))
        self.assertFalse(self.eq("1", 1))
        self.assertFalse(self.eq(1, "1"))
        self.assertTrue(self.eq(None, None))
        self.assertTrue(self.eq(False, False))

    def test_no_trust_in_actual_eq(self):
        self.assertFalse(self.eq(AlwaysEqual(), 3))
        self.assertFalse(self.eq(AlwaysEqual(), [1]))
        self.assertFalse(self.eq([AlwaysEqual()], [{"a": 1}]))
        self.assertFalse(self.eq(LyingStr("x"), "y"))
        self.assertTrue(self.eq(LyingStr("y"), "y"))


class ComparisonViaCasesTest(unittest.TestCase):
    CODE = """
    from dataclasses import dataclass
    @dataclass
    class Pair:
        left: int
        right: list
    def make(kind):
        return {
            "tuple": (1, [2, (3, 4)]),
            "set": {5, 3, 1},
            "float": 0.1 + 0.2,
            "nan": float("nan"),
            "dict": {"b": 2, "a": 1},
            "pair": Pair(1, [2, 3]),
            "bytes": b"hi",
            "none": None,
        }[kind]
    """

    def test_cases(self):
        table = [
            ("tuple", [1, [2, [3, 4]]], True),
            ("set", [1, 3, 5], True),
            ("set", [1, 3], False),
            ("float", 0.3, True),
            ("float", 0.31, False),
            ("nan", float("nan"), True),
            ("dict", {"a": 1, "b": 2}, True),
            ("pair", {"left": 1, "right": [2, 3]}, True),
            ("pair", {"left": 1, "right": [2]}, False),
            ("bytes", "hi", False),
            ("none", None, True),
        ]
        res = cases(self.CODE, "make", [
            {"name": "%s-%d" % (k, i), "inputs": [k], "expected_output": e}
            for i, (k, e, _) in enumerate(table)])
        for (kind, _, want), c in zip(table, res["cases"]):
            self.assertEqual(c["passed"], want, (kind, c))
            self.assertEqual(c["error_kind"], None if want else "wrong_output", c)
        self.assertEqual(res["tests_total"], len(table))
        self.assertEqual(res["tests_passed"], sum(w for _, _, w in table))
        self.assertFalse(res["passed"])
        self.assertEqual(res["error_kind"], "wrong_output")
        self.assertIsNone(res["error"])
        self.assertEqual(res["nonce"], "n-123")
        by_name = {c["name"]: c for c in res["cases"]}
        self.assertEqual(by_name["tuple-0"]["actual_output"], [1, [2, [3, 4]]])
        self.assertEqual(by_name["set-1"]["actual_output"], [1, 3, 5])
        self.assertEqual(by_name["pair-7"]["actual_output"], {"left": 1, "right": [2, 3]})
        self.assertEqual(by_name["nan-5"]["actual_output"], "NaN")
        self.assertEqual(by_name["bytes-9"]["actual_output"], "b'hi'")
        self.assertIn("WrongOutput: expected \"hi\", got \"b'hi'\"", by_name["bytes-9"]["error"])

    def test_all_pass(self):
        res = cases("def add(a, b):\n    return a + b\n", "add", [
            {"name": "one", "inputs": [1, 2], "expected_output": 3},
            {"name": "two", "inputs": [0.1, 0.2], "expected_output": 0.3},
        ], float_tolerance=1e-9)
        self.assertTrue(res["passed"])
        self.assertEqual((res["tests_passed"], res["tests_total"]), (2, 2))
        self.assertIsNone(res["error_kind"])
        for c in res["cases"]:
            self.assertIsNone(c["error"])
            self.assertIsInstance(c["duration_ms"], float)


# ----------------------------------------------------------------- cases: behaviour


class CasesModeTest(unittest.TestCase):
    def test_many_requests_under_one_capture_are_each_their_own(self):
        """run_many_cases (integration: every function of a module in one run) gives what
        run_cases gives for each request alone, each case with its own output."""
        import threading

        code = textwrap.dedent("""
            import sys
            print("loading")
            def f(x):
                print("f", x)
                return x + 1
            def g(x):
                sys.stderr.write("g %d\\n" % x)
                if x < 0:
                    raise ValueError("negative")
                return x * 2
        """)
        requests = [
            {"code": code, "function": "f", "nonce": "a",
             "cases": [{"name": "one", "inputs": [1], "expected_output": 2}]},
            {"code": code, "function": "g", "nonce": "b",
             "cases": [{"name": "two", "inputs": [2], "expected_output": 4},
                       {"name": "neg", "inputs": [-1], "expected_output": 0}]},
        ]
        threads = threading.active_count()
        together = harness.run_many_cases([dict(r) for r in requests])
        alone = [harness.run_cases(dict(r)) for r in requests]
        self.assertEqual(threading.active_count(), threads, "the capture's thread ended")
        strip = lambda res: [{k: v for k, v in c.items() if k != "duration_ms"}
                             for c in res["cases"]]
        for t, a in zip(together, alone):
            strict_json(t)
            self.assertEqual((t["passed"], t["tests_passed"], t["error_kind"]),
                             (a["passed"], a["tests_passed"], a["error_kind"]))
            self.assertEqual(strip(t), strip(a))
        self.assertEqual(together[0]["cases"][0]["stdout"], "f 1\n")
        self.assertEqual(together[1]["cases"][0]["stderr"], "g 2\n")
        self.assertEqual(together[1]["cases"][1]["error_kind"], "runtime")
        self.assertEqual(harness.run_many_cases([]), [])

    def test_many_cases_runs_each_function_in_its_own_module_and_builtins(self):
        """run_in_process's many_cases mode (a job's functions that shared a run): each run
        has its own code and module, and what one changed for the whole process (builtins,
        limits, environment, decimal's context, imported modules) is back for the next."""
        import builtins
        import decimal
        saved_abs, saved_limit = builtins.abs, sys.getrecursionlimit()
        saved_prec = decimal.getcontext().prec
        self.addCleanup(setattr, builtins, "abs", saved_abs)
        self.addCleanup(sys.setrecursionlimit, saved_limit)
        self.addCleanup(lambda: decimal.getcontext().__setattr__("prec", saved_prec))
        changes = textwrap.dedent("""
            import builtins, decimal, os, sys, colorsys
            builtins.abs = lambda x: 'patched'
            builtins.extra = 1
            sys.setrecursionlimit(123456)
            decimal.getcontext().prec = 3
            os.environ['CODEGEN_TEST_SHARED'] = '1'
            sys.path.insert(0, '/nowhere')
            def f():
                return abs(-1)
        """)
        check = textwrap.dedent("""
            import decimal, os, sys
            def g():
                return [abs(-1), 'extra' in vars(__import__('builtins')),
                        sys.getrecursionlimit() == 123456, decimal.getcontext().prec,
                        'CODEGEN_TEST_SHARED' in os.environ, '/nowhere' in sys.path,
                        'colorsys' in sys.modules]
        """)
        runs = [
            {"code": changes, "function": "f",
             "cases": [{"name": "f", "inputs": [], "expected_output": "patched"}]},
            {"code": check, "function": "g",
             "cases": [{"name": "g", "inputs": [],
                        "expected_output": [1, False, False, saved_prec, False, False,
                                            "colorsys" in sys.modules]}]},
        ]
        report = harness.run_in_process({"mode": "many_cases", "runs": runs}, "")
        strict_json(report)
        self.assertEqual([r["passed"] for r in report["runs"]], [True, True], report)
        self.assertEqual((abs(-1), sys.getrecursionlimit()), (1, saved_limit))
        for bad in ({"mode": "many_cases"}, {"mode": "many_cases", "runs": []},
                    {"mode": "many_cases", "runs": [1]}):
            with self.assertRaises(ValueError):
                harness.run_in_process(bad, "")

    def test_a_shared_run_stops_after_code_that_leaves_a_thread_running(self):
        """A thread cannot be taken back: the functions after it get no verdict from the
        shared run (the worker runs them alone)."""
        import threading
        stop = threading.Event()
        self.addCleanup(stop.set)
        runs = [
            {"code": "import threading\nSTOP = None\n" + "def f():\n    threading.Thread(target=STOP.wait, daemon=True).start()\n    return 1\n",
             "function": "f", "cases": [{"name": "f", "inputs": [], "expected_output": 1}]},
            {"code": "def g():\n    return 2\n", "function": "g",
             "cases": [{"name": "g", "inputs": [], "expected_output": 2}]},
        ]
        # The thread waits on the test's event, so that it ends with the test.
        runs[0]["code"] = runs[0]["code"].replace("STOP = None", "STOP = __import__('builtins').__dict__['_codegen_test_stop']")
        import builtins
        builtins._codegen_test_stop = stop
        self.addCleanup(lambda: builtins.__dict__.pop("_codegen_test_stop", None))
        report = harness.run_in_process({"mode": "many_cases", "runs": runs}, "")
        self.assertEqual(len(report["runs"]), 1, report)
        self.assertTrue(report["runs"][0]["passed"], report)

    def test_kwargs_vs_positional(self):
        code = "def f(a, b=10, *, c=100):\n    return [a, b, c]\n"
        res = cases(code, "f", [
            {"name": "pos", "inputs": [1, 2], "expected_output": [1, 2, 100]},
            {"name": "kw", "inputs": {"c": 3, "a": 1}, "expected_output": [1, 10, 3]},
            {"name": "none", "inputs": None, "expected_output": None},
            {"name": "list-arg", "inputs": [[7, 8]], "expected_output": [[7, 8], 10, 100]},
        ])
        c = {c["name"]: c for c in res["cases"]}
        self.assertTrue(c["pos"]["passed"], c["pos"])
        self.assertTrue(c["kw"]["passed"], c["kw"])
        self.assertTrue(c["list-arg"]["passed"], c["list-arg"])
        self.assertEqual(c["none"]["error_kind"], "runtime")
        self.assertTrue(c["none"]["error"].startswith("TypeError: f() missing 1 required positional"))

    def test_expected_error(self):
        code = """
        class MyError(ValueError):
            pass
        def f(kind):
            if kind == "value":
                raise ValueError("bad value")
            if kind == "key":
                return {}["missing"]
            if kind == "mine":
                raise MyError("custom")
            if kind == "type":
                raise TypeError("wrong type")
            return 42
        """
        table = [
            ("value", "ValueError", True, None),
            ("value", "Exception", True, None),
            ("key", "KeyError", True, None),
            ("key", "LookupError", True, None),        # base class
            ("mine", "MyError", True, None),
            ("mine", "ValueError", True, None),        # base class of a user class
            ("mine", "solution.MyError", True, None),  # module-qualified
            ("value", "KeyError", False, "runtime"),   # another exception
            ("type", "ValueError", False, "runtime"),
            ("ok", "ValueError", False, "wrong_output"),  # nothing raised
        ]
        res = cases(code, "f", [{"name": "%d" % i, "inputs": [k], "expected_error": e,
                                 "expected_output": None}
                                for i, (k, e, _, _) in enumerate(table)])
        for (k, e, want, kind), c in zip(table, res["cases"]):
            self.assertEqual(c["passed"], want, (k, e, c))
            self.assertEqual(c["error_kind"], kind, (k, e, c))
        self.assertEqual(res["cases"][7]["error"], "ValueError: bad value (expected KeyError)")
        self.assertIn("expected ValueError to be raised", res["cases"][9]["error"])
        self.assertIsNone(res["cases"][0]["error"])

    def test_runtime_and_assertion_errors(self):
        code = """
        def f(x):
            if x == 0:
                assert x > 0, "x must be positive"
            if x == 1:
                return 1 / 0
            if x == 2:
                import sys
                sys.exit(3)
            return x
        """
        res = cases(code, "f", [{"name": str(i), "inputs": [i], "expected_output": i} for i in range(4)])
        c = res["cases"]
        self.assertEqual(c[0]["error_kind"], "assertion")
        self.assertEqual(c[0]["error"], "AssertionError: x must be positive")
        self.assertIn('File "<solution>", line 4, in f', c[0]["traceback"])
        self.assertIn("assert x > 0", c[0]["traceback"])
        self.assertNotIn("harness.py", c[0]["traceback"])
        self.assertNotIn("codegen_values.py", c[0]["traceback"])
        self.assertEqual(c[1]["error_kind"], "runtime")
        self.assertEqual(c[1]["error"], "ZeroDivisionError: division by zero")
        self.assertIsNone(c[1]["actual_output"])
        self.assertEqual(c[2]["error_kind"], "runtime")  # SystemExit inside a case
        self.assertEqual(c[2]["error"], "SystemExit: 3")
        self.assertTrue(c[3]["passed"])
        self.assertEqual(res["error_kind"], "assertion")  # the first failing case's kind

    def test_setup(self):
        code = """
        import random
        STATE = {"calls": 0}
        def roll():
            STATE["calls"] += 1
            return [random.randint(1, 6) for _ in range(3)], STATE["calls"]
        """
        import random
        rnd = random.Random(42)
        expected = [rnd.randint(1, 6) for _ in range(3)]
        res = cases(code, "roll", [
            {"name": "seeded", "setup": "import random\nrandom.seed(42)\nSTATE['calls'] = 10",
             "inputs": [], "expected_output": [expected, 11]},
            {"name": "wrapped", "setup": "_orig = roll\ndef roll():\n    return 'wrapped', _orig()[1]",
             "inputs": [], "expected_output": ["wrapped", 12]},
            {"name": "not-wrapped-any-more", "inputs": [], "expected_output": None},
            {"name": "bad-setup", "setup": "raise RuntimeError('no setup')", "inputs": [],
             "expected_output": None, "expected_error": "RuntimeError"},
        ])
        c = res["cases"]
        self.assertTrue(c[0]["passed"], c[0])
        self.assertTrue(c[1]["passed"], c[1])
        self.assertEqual(c[2]["actual_output"][1], 13)  # setup of case 2 did not leak
        self.assertEqual(c[3]["error_kind"], "runtime")  # expected_error never covers setup
        self.assertEqual(c[3]["error"], "RuntimeError: no setup (in setup)")
        self.assertIn('File "<setup>", line 1', c[3]["traceback"])

    def test_kind_echoed_and_default_name(self):
        res = cases("def f():\n    return 1\n", "f",
                    [{"inputs": [], "expected_output": 1, "kind": "hidden"}])
        self.assertEqual(res["cases"][0]["name"], "case_0")
        self.assertEqual(res["cases"][0]["kind"], "hidden")

    def test_async_function(self):
        c = one("async def f(x):\n    return x * 2\n", "f", [21], 42)
        self.assertTrue(c["passed"], c)

    def test_zero_cases(self):
        res = cases("def f():\n    pass\n", "f", [])
        self.assertTrue(res["passed"])
        self.assertEqual(res["tests_total"], 0)

    def test_bad_requests(self):
        for bad in [
            {"function": "f", "cases": []},
            {"code": "", "function": "", "cases": []},
            {"code": "", "function": "f", "cases": {}},
            {"code": "", "function": "f", "cases": [1]},
            {"code": "", "function": "f", "cases": [{"inputs": "x"}]},
            {"code": "", "function": "f", "cases": [], "max_output_bytes": -1},
            {"code": "", "function": "f", "cases": [], "case_timeout_ms": 0},
            {"code": "", "function": "f", "cases": [], "float_tolerance": "1"},
            {"code": "", "function": "f", "cases": [], "nonce": 5},
        ]:
            with self.assertRaises(ValueError, msg=bad):
                harness.run_cases(bad)


class LoadErrorTest(unittest.TestCase):
    def test_syntax(self):
        res = cases("def f(:\n    return 1\n", "f", [{"name": "a", "inputs": [], "expected_output": 1}])
        self.assertEqual(res["error_kind"], "syntax")
        self.assertFalse(res["passed"])
        self.assertEqual(res["cases"], [])
        self.assertEqual(res["tests_total"], 1)
        self.assertEqual(res["tests_passed"], 0)
        self.assertTrue(res["error"].startswith("SyntaxError: "), res["error"])
        self.assertIn("line 1", res["error"])

    def test_indentation(self):
        res = cases("def f():\nreturn 1\n", "f", [])
        self.assertEqual(res["error_kind"], "syntax")
        self.assertTrue(res["error"].startswith("IndentationError: "), res["error"])
        self.assertIn("line 2", res["error"])

    def test_import(self):
        res = cases("import no_such_module_xyz\ndef f():\n    return 1\n", "f", [])
        self.assertEqual(res["error_kind"], "import")
        self.assertEqual(res["error"], "ModuleNotFoundError: No module named 'no_such_module_xyz'")
        res = cases("from os import no_such_name\n", "f", [])
        self.assertEqual(res["error_kind"], "import")

    def test_runtime(self):
        res = cases("print('loading')\nx = 1 / 0\ndef f():\n    return 1\n", "f", [])
        self.assertEqual(res["error_kind"], "runtime")
        self.assertEqual(res["error"], "ZeroDivisionError: division by zero")
        self.assertIn('File "<solution>", line 2, in <module>', res["traceback"])
        self.assertEqual(res["stdout"], "loading\n")

    def test_missing_or_not_callable_function(self):
        res = cases("def g():\n    return 1\n", "f", [])
        self.assertEqual(res["error_kind"], "runtime")
        self.assertTrue(res["error"].startswith("NameError: "), res["error"])
        res = cases("f = 3\n", "f", [])
        self.assertEqual(res["error_kind"], "runtime")
        self.assertTrue(res["error"].startswith("TypeError: "), res["error"])

    def test_module_name(self):
        c = one("def f():\n    return __name__\n", "f", [], "solution")
        self.assertTrue(c["passed"], c)


class TimeoutTest(unittest.TestCase):
    def test_per_case_timeout(self):
        code = """
        import time
        def f(kind):
            if kind == "spin":
                while True:
                    pass
            if kind == "sleep":
                time.sleep(60)
            if kind == "swallow":
                n = 0
                end = time.monotonic() + 0.4
                while time.monotonic() < end:
                    try:
                        while True:
                            n += 1
                    except BaseException:
                        pass
                return 7
            return kind
        """
        t0 = time.monotonic()
        res = cases(code, "f", [
            {"name": "spin", "inputs": ["spin"], "expected_output": None},
            {"name": "sleep", "inputs": ["sleep"], "expected_output": None},
            {"name": "swallow", "inputs": ["swallow"], "expected_output": 7},
            {"name": "fine", "inputs": ["fine"], "expected_output": "fine"},
        ], case_timeout_ms=100)
        elapsed = time.monotonic() - t0
        c = res["cases"]
        for i in range(3):
            self.assertEqual(c[i]["error_kind"], "timeout", c[i])
            self.assertFalse(c[i]["passed"])
            self.assertEqual(c[i]["error"], "Timeout: case exceeded 100 ms")
        self.assertIn("while True", c[0]["traceback"])
        self.assertIn("time.sleep(60)", c[1]["traceback"])
        self.assertTrue(c[3]["passed"], c[3])  # later cases still run
        self.assertEqual(res["error_kind"], "timeout")
        # Cut, not waited for: spin never ends and sleep lasts 60 s, so any bound below
        # shows it, however slow the machine.
        self.assertLess(elapsed, 30)
        # the timer is gone afterwards
        import signal
        self.assertEqual(signal.getitimer(signal.ITIMER_REAL), (0.0, 0.0))


class OutputCaptureTest(unittest.TestCase):
    def test_per_case_capture(self):
        code = """
        import os, subprocess, sys
        print("at load")
        def f(i):
            print("out", i)
            print("err", i, file=sys.stderr)
            os.write(1, b"raw %d\\n" % i)
            sys.stdout.flush()
            return i
        def child():
            subprocess.run([sys.executable, "-c", "print('from child')"], check=True)
            return 0
        """
        res = cases(code, "f", [{"name": str(i), "inputs": [i], "expected_output": i} for i in range(3)])
        self.assertEqual(res["stdout"], "at load\n")
        for i, c in enumerate(res["cases"]):
            self.assertEqual(c["stdout"], "out %d\nraw %d\n" % (i, i))
            self.assertEqual(c["stderr"], "err %d\n" % i)
            self.assertFalse(c["stdout_truncated"])
        res = cases(code, "child", [{"name": "c", "inputs": [], "expected_output": 0}])
        self.assertEqual(res["cases"][0]["stdout"], "from child\n")

    def test_truncation_per_case(self):
        code = """
        import sys
        def f(n):
            sys.stdout.write("x" * n)
            sys.stderr.write("y" * n)
            return n
        """
        res = cases(code, "f", [{"name": str(n), "inputs": [n], "expected_output": n}
                                for n in (10, 100000, 50)], max_output_bytes=64)
        small, big, after = res["cases"]
        self.assertEqual((small["stdout"], small["stdout_truncated"]), ("x" * 10, False))
        self.assertEqual((big["stdout"], big["stdout_truncated"]), ("x" * 64, True))
        self.assertEqual((big["stderr"], big["stderr_truncated"]), ("y" * 64, True))
        self.assertEqual((after["stdout"], after["stdout_truncated"]), ("x" * 50, False))

    def test_capture_is_restored(self):
        before_out, before_err = sys.stdout, sys.stderr
        ident = lambda fd: (os.fstat(fd).st_dev, os.fstat(fd).st_ino)  # noqa: E731
        before_fds = ident(1), ident(2)
        res = cases("print('hidden')\ndef f():\n    import sys; sys.stdout = None\n", "f",
                    [{"name": "a", "inputs": [], "expected_output": None}])
        self.assertEqual(res["stdout"], "hidden\n")
        self.assertIs(sys.stdout, before_out)
        self.assertIs(sys.stderr, before_err)
        self.assertEqual((ident(1), ident(2)), before_fds)


class UnserializableTest(unittest.TestCase):
    def test_weird_values(self):
        code = """
        class BadRepr:
            def __repr__(self):
                raise RuntimeError("no repr")
        class Opaque:
            __slots__ = ()
        def f(kind):
            rec = [1]
            rec.append(rec)
            d = {}
            d["me"] = d
            deep = []
            for _ in range(200):
                deep = [deep]
            return {
                "nan": float("nan"), "inf": float("inf"), "ninf": float("-inf"),
                "big": 10 ** 30, "huge": 10 ** 5000, "rec": rec, "drec": d,
                "badrepr": BadRepr(), "set": {3, 1, 2}, "mixedset": {1, "a"},
                "tuple": (1, (2,)), "bytes": b"\\xff", "surrogate": "\\ud800x",
                "keys": {1: "a", (1, 2): "b", None: "c"}, "gen": (i for i in []),
                "complex": 1j, "deep": deep,
                "long": list(range(20000)), "opaque": Opaque(),
            }[kind]
        """
        kinds = ["nan", "inf", "ninf", "big", "huge", "rec", "drec", "badrepr", "set", "mixedset",
                 "tuple", "bytes", "surrogate", "keys", "gen", "complex", "deep", "long", "opaque"]
        res = cases(code, "f", [{"name": k, "inputs": [k], "expected_output": 0} for k in kinds])
        out = {c["name"]: c["actual_output"] for c in res["cases"]}
        for c in res["cases"]:
            self.assertEqual(c["error_kind"], "wrong_output", c)
        self.assertEqual(out["nan"], "NaN")
        self.assertEqual(out["inf"], "Infinity")
        self.assertEqual(out["ninf"], "-Infinity")
        self.assertEqual(out["big"], str(10 ** 30))
        self.assertTrue(out["huge"].startswith("<int with"), out["huge"])
        self.assertEqual(out["rec"], [1, "<recursion>"])
        self.assertEqual(out["drec"], {"me": "<recursion>"})
        self.assertEqual(out["badrepr"], "<unrepresentable BadRepr object>")
        self.assertEqual(out["set"], [1, 2, 3])
        self.assertEqual(sorted(map(str, out["mixedset"])), ["1", "a"])
        self.assertEqual(out["tuple"], [1, [2]])
        self.assertEqual(out["bytes"], "b'\\xff'")
        self.assertEqual(out["surrogate"], "\ufffdx")
        self.assertEqual(out["keys"], {"1": "a", "(1, 2)": "b", "null": "c"})
        self.assertTrue(out["gen"].startswith("<generator object"), out["gen"])
        self.assertEqual(out["complex"], "1j")
        self.assertIsInstance(out["deep"], list)
        self.assertTrue(by_name_trunc(res, "deep"))
        by = {c["name"]: c for c in res["cases"]}
        self.assertTrue(by["long"]["actual_truncated"])
        self.assertLess(len(out["long"]), 20000)
        self.assertTrue(out["long"][-1].startswith("...("), out["long"][-1])
        self.assertTrue(out["opaque"].startswith("<solution.Opaque object"), out["opaque"])
        # strict JSON of the whole result (cases() already checked), and it is ASCII
        json.dumps(res, allow_nan=False, ensure_ascii=True).encode("ascii")


# ---------------------------------------------------------------------- program_test

HAS_CLOSE_ELEMENTS = '''
from typing import List


def has_close_elements(numbers: List[float], threshold: float) -> bool:
    """ Check if in given list of numbers, are any two numbers closer to each other than
    given threshold.
    >>> has_close_elements([1.0, 2.0, 3.0], 0.5)
    False
    """
    for idx, elem in enumerate(numbers):
        for idx2, elem2 in enumerate(numbers):
            if idx != idx2:
                distance = abs(elem - elem2)
                if distance < threshold:
                    return True
    return False
'''

HAS_CLOSE_ELEMENTS_BUGGY = HAS_CLOSE_ELEMENTS.replace("distance < threshold", "distance < threshold / 2")

HAS_CLOSE_ELEMENTS_TEST = '''

METADATA = {
    'author': 'jt',
    'dataset': 'test'
}


def check(candidate):
    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True
    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.05) == False
    assert candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.95) == True
    assert candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.8) == False
    assert candidate([1.0, 2.0, 3.0, 4.0, 5.0, 2.0], 0.1) == True
    assert candidate([1.1, 2.2, 3.1, 4.1, 5.1], 1.0) == True
    assert candidate([1.1, 2.2, 3.1, 4.1, 5.1], 0.5) == False

'''

TRUNCATE_NUMBER = '''
def truncate_number(number: float) -> float:
    return number % 1.0
'''

TRUNCATE_NUMBER_TEST = '''
METADATA = {}


def check(candidate):
    assert candidate(3.5) == 0.5
    assert abs(candidate(1.33) - 0.33) < 1e-6
    assert abs(candidate(123.456) - 0.456) < 1e-6, "fractional part of 123.456"
'''

BELOW_ZERO = '''
from typing import List


def below_zero(operations: List[int]) -> bool:
    balance = 0
    for op in operations:
        balance += op
        if balance < 0:
            return True
    return False
'''

BELOW_ZERO_TEST = '''
def check(candidate):
    assert candidate([]) == False
    assert candidate([1, 2, -3, 1, 2, -3]) == False
    assert candidate([1, 2, -4, 5, 6]) == True
    assert candidate([1, -1, 2, -2, 5, -5, 4, -4]) == False
    assert candidate([1, -1, 2, -2, 5, -5, 4, -5]) == True
'''


class ProgramTestModeTest(unittest.TestCase):
    def test_humaneval_pass(self):
        for code, test, entry in [
            (HAS_CLOSE_ELEMENTS, HAS_CLOSE_ELEMENTS_TEST, "has_close_elements"),
            (TRUNCATE_NUMBER, TRUNCATE_NUMBER_TEST, "truncate_number"),
            (BELOW_ZERO, BELOW_ZERO_TEST, "below_zero"),
        ]:
            r = program(code, test, entry)
            self.assertTrue(r["passed"], (entry, r))
            self.assertIsNone(r["error_kind"])
            self.assertIsNone(r["error"])
            self.assertTrue(r["check_called"])
            self.assertEqual(r["nonce"], "p-456")
            self.assertEqual(r["mode"], "program_test")

    def test_humaneval_fail(self):
        r = program(HAS_CLOSE_ELEMENTS_BUGGY, HAS_CLOSE_ELEMENTS_TEST, "has_close_elements")
        self.assertFalse(r["passed"])
        self.assertEqual(r["error_kind"], "assertion")
        self.assertEqual(r["phase"], "check")
        self.assertTrue(r["error"].startswith("AssertionError\n"), r["error"])
        self.assertIn("assert candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.95) == True", r["error"])
        self.assertIn('File "<test>", line 12, in check', r["error"])
        self.assertNotIn("harness", r["error"])

    def test_assertion_message(self):
        wrong = TRUNCATE_NUMBER.replace("number % 1.0", "round(number % 1.0, 2)")
        r = program(wrong, TRUNCATE_NUMBER_TEST, "truncate_number")
        self.assertEqual(r["error_kind"], "assertion")
        self.assertTrue(r["error"].startswith("AssertionError: fractional part of 123.456\n"), r["error"])

    def test_without_entry_point_check_not_called(self):
        r = program(HAS_CLOSE_ELEMENTS_BUGGY, HAS_CLOSE_ELEMENTS_TEST, None)
        self.assertTrue(r["passed"])  # nothing called check(): the caller's choice
        self.assertFalse(r["check_called"])

    def test_code_defined_check_is_not_called(self):
        code = BELOW_ZERO + "\ndef check(candidate):\n    pass\n"
        r = program(code, "assert below_zero([-1]) is True\n", "below_zero")
        self.assertTrue(r["passed"], r)
        self.assertFalse(r["check_called"])
        code = BELOW_ZERO + "\ndef check(candidate):\n    raise RuntimeError('not me')\n"
        r = program(code, "x = 1\n", "below_zero")
        self.assertTrue(r["passed"], r)

    def test_plain_asserts(self):  # MBPP style: the test script is the check
        r = program("def sq(x):\n    return x * x\n", "assert sq(3) == 9\nassert sq(4) == 15, 'sq(4)'\n")
        self.assertEqual(r["error_kind"], "assertion")
        self.assertEqual(r["phase"], "test")
        self.assertTrue(r["error"].startswith("AssertionError: sq(4)"), r["error"])

    def test_sys_exit_zero_is_exited_early(self):
        for code in ("import sys\nsys.exit(0)\n", "raise SystemExit\n", "exit()\n"):
            r = program(code + BELOW_ZERO, BELOW_ZERO_TEST, "below_zero")
            self.assertFalse(r["passed"], code)
            self.assertEqual(r["error_kind"], "exited_early", code)
            self.assertEqual(r["phase"], "code")
            self.assertTrue(r["error"].startswith("SystemExit"), r["error"])
        # exiting from inside the candidate while check() runs
        code = BELOW_ZERO.replace("    balance = 0", "    import sys\n    sys.exit(0)")
        r = program(code, BELOW_ZERO_TEST, "below_zero")
        self.assertEqual((r["passed"], r["error_kind"], r["phase"]), (False, "exited_early", "check"))
        # the test script itself exiting early counts too
        r = program(BELOW_ZERO, "import sys\nsys.exit(0)\n" + BELOW_ZERO_TEST, "below_zero")
        self.assertEqual((r["passed"], r["error_kind"], r["phase"]), (False, "exited_early", "test"))

    def test_keyboard_interrupt(self):
        r = program("raise KeyboardInterrupt\n", "pass\n")
        self.assertEqual(r["error_kind"], "exited_early")

    def test_errors(self):
        r = program("def f(:\n", BELOW_ZERO_TEST, "f")
        self.assertEqual((r["error_kind"], r["phase"]), ("syntax", "code"))
        self.assertTrue(r["error"].startswith("SyntaxError: "), r["error"])
        self.assertIn("line 1", r["error"])
        r = program(BELOW_ZERO, "def check(candidate)\n", "below_zero")
        self.assertEqual((r["error_kind"], r["phase"]), ("syntax", "test"))
        r = program("import no_such_module_xyz\n", "pass\n")
        self.assertEqual(r["error_kind"], "import")
        r = program("def f():\n    return [][1]\n", "def check(c):\n    c()\n", "f")
        self.assertEqual((r["error_kind"], r["phase"]), ("runtime", "check"))
        self.assertTrue(r["error"].startswith("IndexError: list index out of range\n"), r["error"])
        self.assertIn('File "<solution>", line 2, in f', r["error"])
        r = program("def g():\n    pass\n", BELOW_ZERO_TEST, "below_zero")
        self.assertEqual(r["error_kind"], "runtime")
        self.assertTrue(r["error"].startswith("NameError: "), r["error"])

    def test_output_and_main_name(self):
        r = program("import sys\nprint('hello from', __name__)\nprint('e', file=sys.stderr)\n",
                    "if __name__ == '__main__':\n    print('main block ran')\n",
                    max_output_bytes=1000)
        self.assertTrue(r["passed"])
        self.assertEqual(r["stdout"], "hello from __main__\nmain block ran\n")
        self.assertEqual(r["stderr"], "e\n")
        r = program("print('z' * 5000)\n", "pass\n", max_output_bytes=100)
        self.assertEqual((len(r["stdout"]), r["stdout_truncated"]), (100, True))

    def test_bad_requests(self):
        for bad in [{"code": "x"}, {"test": "x"}, {"code": 1, "test": ""},
                    {"code": "", "test": "", "entry_point": 3}]:
            with self.assertRaises(ValueError, msg=bad):
                harness.run_program_test(bad)


class InProcessAdapterTest(unittest.TestCase):
    def test_run_in_process(self):
        import types
        ns = types.ModuleType("__main__").__dict__
        res = harness.run_in_process(
            {"mode": "cases", "function": "f", "nonce": "ip",
             "cases": [{"name": "a", "inputs": [2], "expected_output": "__main__:4"}]},
            "def f(x):\n    return '%s:%d' % (__name__, x * 2)\n", ns)
        self.assertTrue(res["passed"], res)
        self.assertIn("f", ns)  # the code ran in the caller's namespace
        res = harness.run_in_process(
            {"mode": "program_test", "test": BELOW_ZERO_TEST, "entry_point": "below_zero"},
            BELOW_ZERO)
        self.assertTrue(res["passed"], res)
        with self.assertRaises(ValueError):
            harness.run_in_process({"mode": "nope"}, "")


# ----------------------------------------------------------------------------- CLI


class CliTest(unittest.TestCase):
    def test_cases_cli(self):
        code = ("import os, sys\n"
                "print('@@codegen-harness@@ {\"passed\": true}')\n"
                "def f(x):\n"
                "    print('@@codegen-harness@@ {\"passed\": true}')\n"
                "    os.write(1, b'raw\\n')\n"
                "    return x + 1\n")
        rc, out = cli("cases", {"code": code, "function": "f", "nonce": "cli-nonce-1",
                                "cases": [{"name": "a", "inputs": [1], "expected_output": 3}]})
        self.assertEqual(rc, 0)
        res = parse_line(out)  # exactly one line: the program's prints are captured
        self.assertEqual(res["nonce"], "cli-nonce-1")
        self.assertFalse(res["passed"])
        self.assertEqual(res["stdout"], '@@codegen-harness@@ {"passed": true}\n')
        self.assertEqual(res["cases"][0]["stdout"], '@@codegen-harness@@ {"passed": true}\nraw\n')
        self.assertEqual(res["cases"][0]["actual_output"], 2)

    def test_program_test_cli(self):
        rc, out = cli("program_test", {"code": HAS_CLOSE_ELEMENTS, "test": HAS_CLOSE_ELEMENTS_TEST,
                                       "entry_point": "has_close_elements", "nonce": "cli-2"})
        self.assertEqual(rc, 0)
        res = parse_line(out)
        self.assertEqual((res["passed"], res["nonce"], res["mode"]), (True, "cli-2", "program_test"))

        rc, out = cli("program_test", {"code": "import sys\nprint('bye')\nsys.exit(0)\n",
                                       "test": "assert False\n", "nonce": "cli-3"})
        res = parse_line(out)
        self.assertEqual((rc, res["passed"], res["error_kind"]), (0, False, "exited_early"))
        self.assertEqual(res["stdout"], "bye\n")

    def test_os_exit_leaves_no_result_line(self):
        rc, out = cli("program_test", {"code": "import os\nos._exit(0)\n", "test": "assert False\n",
                                       "nonce": "cli-4"})
        self.assertEqual(rc, 0)
        self.assertEqual(out, "")  # the runner must treat this as a failure

    def test_leftover_thread_does_not_block_or_leak(self):
        code = ("import threading, time\n"
                "def spam():\n"
                "    while True:\n"
                "        print('@@codegen-harness@@ fake'); time.sleep(0.001)\n"
                "threading.Thread(target=spam).start()\n"   # non-daemon thread
                "def f():\n    return 1\n")
        t0 = time.monotonic()
        rc, out = cli("cases", {"code": code, "function": "f", "nonce": "cli-5",
                                "cases": [{"name": "a", "inputs": [], "expected_output": 1}]})
        # The spamming thread never ends: any bound below cli's own shows it did not block.
        self.assertLess(time.monotonic() - t0, 30)
        res = parse_line(out)
        self.assertTrue(res["passed"])

    def test_malformed_requests(self):
        rc, out = cli("cases", {"code": "x", "nonce": "cli-6"})
        self.assertEqual(rc, 2)
        res = parse_line(out)
        self.assertEqual(res["nonce"], "cli-6")
        self.assertIn("'function'", res["harness_error"])
        with tempfile.TemporaryDirectory() as cwd:
            p = subprocess.run([sys.executable, "-I", HARNESS, "cases"], input=b"{not json",
                               cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        self.assertEqual(p.returncode, 2)
        self.assertIn("not valid JSON", parse_line(p.stdout.decode("ascii"))["harness_error"])
        rc, out = cli("bogus", {})
        self.assertEqual(rc, 2)
        self.assertIn("usage", parse_line(out)["harness_error"])

    def test_stdin_is_empty_for_user_code(self):
        rc, out = cli("program_test", {"code": "import sys\ndata = sys.stdin.read()\n",
                                       "test": "assert data == ''\n", "nonce": "cli-7"})
        self.assertTrue(parse_line(out)["passed"])


if __name__ == "__main__":
    unittest.main()
