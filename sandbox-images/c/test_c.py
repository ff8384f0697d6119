"""The C image through the runner protocol: the compile phase every compiled language shares
(common/codegen_exec.py's compile_program and the supervisor's "compiled" word). Real hardened
containers; skipped without Docker or the image (sandbox-images/build c). The verdicts of
every compiled language are in tests/tests/e2e/languages.rs.

Run:  python3 -m unittest discover -s sandbox-images/c -p 'test_*.py'
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from codegen_guard import COMPILE_GRACE_S  # noqa: E402
from testlib import Container, skip_without_image  # noqa: E402

BUILD = ["--tmpfs", "/build:rw,nosuid,nodev,exec,size=64m,uid=10002,gid=10002,mode=0700"]


def program(functions):
    """`functions` small functions: a compile that takes time in proportion."""
    return "".join(
        "int f%d(int x) { int y = x; for (int k = 0; k < %d; k++) y = y * 31 + k; return y; }\n"
        % (i, i % 7 + 1) for i in range(functions)
    ) + "int main(void) { return f1(0) == 1 ? 0 : 1; }\n"


# A compiler (cc1) of tens of MiB: what the program's peak memory must not count.
BIG = program(4000)
# For the timing tests, compiled several times each: any compile long enough to measure (they
# set their limits from its time on this machine), under half of BIG's.
MEDIUM = program(1500)


@skip_without_image("c")
class CompilePhaseTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Container("c", extra=BUILD)
        assert cls.c.recv()["type"] == "ready"

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def full_compile_ms(self):
        """MEDIUM's compile on this machine now, under a limit it cannot reach: the tests' limits
        are set from it, not from a constant (machines differ tenfold in speed)."""
        r = self.c.run(MEDIUM, compile_timeout_ms=600_000, timeout_ms=600_000)
        self.assertEqual((r["compile"]["status"], r["exit_code"]), ("ok", 0), r)
        return r["compile"]["duration_ms"]

    def test_the_runs_clock_starts_when_the_compile_ends(self):
        # The compile takes about five times the run's whole limit; the run itself is
        # instant. The margin covers a load that changes between the two compiles, within
        # reason: when it changed more (the compile came out shorter than the limit, so the
        # run proves nothing), the limit is set again from that compile and the run repeated.
        d = self.full_compile_ms()
        for _ in range(5):
            limit = max(50, d // 5)
            r = self.c.run(MEDIUM, compile_timeout_ms=max(60_000, 5 * d), timeout_ms=limit)
            self.assertEqual(r["compile"]["status"], "ok", r)
            if r["compile"]["duration_ms"] > limit:
                break
            d = r["compile"]["duration_ms"]
        self.assertGreater(r["compile"]["duration_ms"], limit, r)
        self.assertFalse(r["timed_out"], r)
        self.assertEqual(r["exit_code"], 0, r)
        self.assertLess(r["duration_ms"], limit, r)

    def test_the_compilers_memory_is_not_the_programs(self):
        # A compile limit it cannot reach: the point is the memory, not the time.
        r = self.c.run(BIG, compile_timeout_ms=600_000, timeout_ms=600_000)
        self.assertEqual(r["exit_code"], 0, r)
        # The program is a few pages; the runner's floor is about 15 MiB; cc1 alone is more.
        self.assertLess(r["peak_memory_kb"], 30_000, r)

    def test_a_compile_error_runs_nothing_and_says_why(self):
        r = self.c.run('#include <stdio.h>\nint main(void) { puts("ran"); return nope; }')
        self.assertEqual(r["compile"]["status"], "error", r)
        self.assertEqual(r["compile"]["exit_code"], 1, r)
        self.assertIn("nope", r["compile"]["output"])
        self.assertIn("undeclared", r["compile"]["output"])
        self.assertEqual((r["exit_code"], r["stdout"]), (None, ""))

    def test_a_compile_past_its_limit_is_killed_with_its_compiler(self):
        # A limit a fifth into the compile: killed there, it ends well before the compile
        # would have (halfway from the limit to the compile's own end), and by its own limit,
        # not by the runner's backstop a grace later. The compile is timed before and after,
        # the shorter counts: a load that eased cannot hide a late kill.
        # When the load eased so much that the compile ended within the limit (it proves
        # nothing then), the limit is set again from that compile and the kill tried again.
        d = self.full_compile_ms()
        for _ in range(5):
            limit = max(50, d // 5)
            r = self.c.run(MEDIUM, compile_timeout_ms=limit, timeout_ms=600_000)
            if r["compile"]["status"] != "ok":
                break
            d = r["compile"]["duration_ms"]
        d = min(d, self.full_compile_ms())
        self.assertEqual(r["compile"]["status"], "timeout", r)
        self.assertGreaterEqual(r["compile"]["duration_ms"], limit, r)
        bound = min((limit + d) // 2, limit + int(COMPILE_GRACE_S * 1000))
        self.assertLess(r["compile"]["duration_ms"], bound, (d, r))
        self.assertIsNone(r["exit_code"], r)
        # Nothing of the compile is left: the next program compiles and runs.
        r = self.c.run('#include <stdio.h>\nint main(void) { puts("next"); return 0; }')
        self.assertEqual((r["exit_code"], r["stdout"]), (0, "next\n"), r)

    def test_a_test_is_appended_as_one_translation_unit(self):
        r = self.c.run("static int twice(int x) { return 2 * x; }",
                       test="#include <stdio.h>\nint main(void) { printf(\"%d\\n\", twice(21)); return 0; }")
        self.assertEqual((r["exit_code"], r["stdout"], r["test_finished"]), (0, "42\n", True), r)


if __name__ == "__main__":
    unittest.main()
