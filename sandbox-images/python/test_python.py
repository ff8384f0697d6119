"""The Python image through the runner protocol: the "test" field and the language contract
(common/testlib.py). Real hardened containers; skipped without Docker or the image.

Run:  python3 -m unittest discover -s sandbox-images/python -p 'test_*.py'
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from testlib import LanguageContract, skip_without_image  # noqa: E402


@skip_without_image("python")
class PythonImageTest(LanguageContract, unittest.TestCase):
    LANGUAGE, MAIN, TEST = "python", "main.py", "test.py"
    HARNESS_MODES = ["cases", "program_test", "integrate", "many_cases"]
    ECHO = "import sys\nprint(sys.stdin.read().upper())\nprint('err', file=sys.stderr)"
    EXIT3 = "import sys\nsys.exit(3)"
    ADD = "def add(a, b):\n    return a + b\n"
    ADD_TEST_PASSES = "assert add(1, 2) == 3\nprint('test ran')"
    ADD_TEST_FAILS = "assert add(1, 2) == 4, 'wrong sum'"
    SYNTAX_ERROR = "def (:"
    EARLY_EXIT_0 = "import sys\nsys.exit(0)"
    RUNTIME_ERROR = "def f():\n    return 1 / 0\nf()"
    SPIN = "while True:\n    pass"
    FILES = "data = open('in.txt').read()\nopen('out/x.txt', 'w').write(data * 2)"

    def test_humaneval_style_check_in_one_namespace(self):
        # prompt + completion, then the test with check(candidate), as HumanEval runs them.
        code = "from typing import List\n\ndef inc(xs: List[int]) -> List[int]:\n" \
               "    return [x + 1 for x in xs]\n"
        test = "METADATA = {}\n\ndef check(candidate):\n    assert candidate([1]) == [2]\n\n" \
               "check(inc)\n"
        r = self.run_code(code, test=test)
        self.assertEqual((r["exit_code"], r["test_finished"]), (0, True), r["stderr"])
        r = self.run_code(code.replace("x + 1", "x"), test=test)
        self.assertEqual((r["exit_code"], r["test_finished"], r["phase"]), (1, False, "test"))
        self.assertEqual(r["exception"]["type"], "AssertionError")
        self.assertIn('File "/work/test.py", line 4, in check', r["stderr"])
        self.assertNotIn("/opt/codegen/", r["stderr"])

    def test_output_of_code_and_test_reaches_the_real_streams(self):
        r = self.run_code(self.ADD + "print('from code')", test=self.ADD_TEST_PASSES)
        self.assertEqual(r["stdout"], "from code\ntest ran\n")

    def test_every_early_exit_leaves_the_test_unfinished(self):
        for code in ("import os\nos._exit(0)", "raise SystemExit", "import sys\nsys.exit(2)"):
            with self.subTest(code=code):
                r = self.run_code(code, test=self.ADD_TEST_PASSES)
                self.assertIs(r["test_finished"], False)
                self.assertNotIn("test ran", r["stdout"])
        r = self.run_code(self.ADD, test="import sys\nsys.exit(0)")
        self.assertEqual((r["exit_code"], r["test_finished"], r["phase"]), (0, False, "test"))

    def test_a_program_rebinding_exec_cannot_skip_its_test(self):
        r = self.run_code("import builtins\nbuiltins.exec = lambda *a, **k: None\n" + self.ADD,
                          test=self.ADD_TEST_FAILS)
        self.assertEqual((r["exit_code"], r["test_finished"]), (1, False))

    def test_the_final_run_lists_pep8_and_pyflakes_findings_only_when_asked(self):
        module = ("import os\ndef f(a):\n    \"\"\"Doubles.\"\"\"\n    unused = 1\n"
                  "    return 2*a\n")
        harness = {"mode": "integrate", "verdicts": {}, "cases": {"f": [{"inputs": [1]}]},
                   "case_timeout_ms": 1000}
        r = self.run_code(module, harness=dict(harness, lint=True))
        quality = r["harness"]["quality"]
        self.assertEqual(quality["unmeasured"], [], quality)
        self.assertEqual(quality["warnings"], [
            "line 1: 'os' imported but unused",
            "line 2: E302 expected 2 blank lines, found 0",
            "line 4: local variable 'unused' is assigned to but never used",
        ], quality)
        # The code was read, not run by the linter: a module that would exit is linted alike.
        r = self.run_code("import sys\nsys.exit(4)\n", harness=dict(harness, lint=True))
        self.assertEqual(r["harness"]["quality"]["warnings"], [])
        # Not asked (every run but the final one): no linter ran.
        r = self.run_code(module, harness=harness)
        self.assertNotIn("warnings", r["harness"]["quality"])

    def test_the_test_and_the_harness_do_not_combine(self):
        self.c.send(self.c.request(self.ADD, test="pass", harness={"mode": "cases"}))
        self.assertEqual(self.c.recv()["type"], "error")
        self.assertEqual(self.c.recv()["type"], "ready")


if __name__ == "__main__":
    unittest.main()
