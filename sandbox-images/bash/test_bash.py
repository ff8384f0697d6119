"""The Bash image through the runner protocol (exec mode: harness.sh), with the language
contract of common/testlib.py. Real hardened containers; skipped without Docker or the image
(sandbox-images/build bash).

Run:  python3 -m unittest discover -s sandbox-images/bash -p 'test_*.py'
"""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from testlib import LanguageContract, skip_without_image  # noqa: E402


@skip_without_image("bash")
class BashImageTest(LanguageContract, unittest.TestCase):
    LANGUAGE, MAIN, TEST = "bash", "main.sh", "test.sh"
    ECHO = 's=$(cat)\necho "${s^^}"\necho err >&2'
    EXIT3 = "exit 3"
    ADD = "add() {\n  echo $(( $1 + $2 ))\n}\n"
    ADD_TEST_PASSES = '[[ $(add 1 2) == 3 ]] || exit 1\necho "test ran"'
    # MultiPL-E style: errexit and a bare comparison
    ADD_TEST_FAILS = "set -e\nrun_test() {\n  [[ $(add 1 2) = 4 ]]\n}\nrun_test"
    FAILED_TEST_KIND = None
    SYNTAX_ERROR = "if then fi"
    EARLY_EXIT_0 = "exit 0"
    SPIN = "while :; do :; done"
    FILES = "d=$(<in.txt)\nprintf '%s%s' \"$d\" \"$d\" > out/x.txt"

    def test_plain_runs_are_bash_main_sh(self):
        r = self.run_code('echo "$0 ${BASH_SOURCE[0]} $# $(id -u) $PWD"\n'
                          'ls /proc/$$/fd | sort -n | tr "\\n" " "')
        self.assertEqual(r["exit_code"], 0, r["stderr"])
        self.assertEqual(r["stdout"], "/work/main.sh /work/main.sh 0 10002 /work\n0 1 2 255 ")
        # a syntax error later in the file stops everything before it runs
        r = self.run_code("echo before\nif then")
        self.assertEqual((r["exit_code"], r["stdout"]), (1, ""))
        self.assertEqual(r["exception"]["type"], "SyntaxError")
        self.assertIn("/work/main.sh: line 2: syntax error", r["stderr"])

    def test_main_and_test_share_one_shell(self):
        r = self.run_code("X=1\ncd /tmp\nset -u\n", test='echo "$X $PWD $0 $#"')
        self.assertEqual((r["exit_code"], r["test_finished"]), (0, True), r["stderr"])
        self.assertEqual(r["stdout"], "1 /tmp /work/main.sh 0\n")

    def test_the_test_status_is_the_exit_status(self):
        r = self.run_code(self.ADD, test="[[ $(add 1 2) == 4 ]]")
        self.assertEqual((r["exit_code"], r["test_finished"], r["exception"]), (1, True, None))
        r = self.run_code(self.ADD + "exit 5", test=self.ADD_TEST_PASSES)
        self.assertEqual((r["exit_code"], r["test_finished"], r["phase"]), (5, False, "code"))

    def test_the_programs_own_fd_3_does_not_swallow_the_report(self):
        r = self.run_code("exec 3>/tmp/mine\necho mine >&3", test="cat /tmp/mine")
        self.assertEqual((r["exit_code"], r["test_finished"], r["stdout"]), (0, True, "mine\n"))

    def test_tools_of_a_typical_shell_test(self):
        r = self.run_code("echo 'a 1\nb 2' | awk '{s += $2} END {print s}'\n"
                          "echo 'x' | sed 's/x/y/' | grep -c y\necho '2^10' | bc\n"
                          "printf '%s\\n' 3 1 2 | sort -n | tr '\\n' ' ' | wc -w")
        self.assertEqual((r["exit_code"], r["stdout"]), (0, "3\n1\n1024\n3\n"), r["stderr"])

    def test_sigpipe_is_not_ignored(self):
        r = self.run_code("yes | head -n 1\ngrep SigIgn /proc/self/status")
        self.assertEqual((r["exit_code"], r["stderr"]), (0, ""))
        self.assertEqual(r["stdout"], "y\nSigIgn:\t0000000000000000\n")

    def test_a_background_job_holding_the_report_pipe_does_not_delay_the_answer(self):
        r = self.run_code(self.ADD + "sleep 30 &", test=self.ADD_TEST_PASSES)
        self.assertEqual((r["exit_code"], r["test_finished"]), (0, True), r["stderr"])
        # Far below the sleeper's 30 s, far above the run's own cost.
        self.assertLess(r["duration_ms"], 20_000)

    def test_a_signal_that_ends_the_shell_is_reported(self):
        r = self.run_code("kill -TERM $$\nsleep 5")
        self.assertEqual((r["exit_code"], r["signal"]), (None, 15))


if __name__ == "__main__":
    unittest.main()
