"""The JavaScript image through the runner protocol (exec mode: harness.js under node), with
the language contract of common/testlib.py. Real hardened containers; skipped without Docker
or the image (sandbox-images/build javascript).

Run:  python3 -m unittest discover -s sandbox-images/javascript -p 'test_*.py'
"""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from testlib import LanguageContract, skip_without_image  # noqa: E402


@skip_without_image("javascript")
class JavaScriptImageTest(LanguageContract, unittest.TestCase):
    LANGUAGE, MAIN, TEST = "javascript", "main.js", "test.js"
    ECHO = ("const fs = require('fs');\n"
            "console.log(fs.readFileSync(0, 'utf8').toUpperCase());\nconsole.error('err');")
    EXIT3 = "process.exit(3);"
    ADD = "function add(a, b) {\n  return a + b;\n}\nconst ANSWER = 42;\n"
    # MultiPL-E / HumanEval-X style: the test requires assert itself and uses the code's names.
    ADD_TEST_PASSES = ("const assert = require('node:assert');\n"
                       "assert.deepEqual(add(1, 2), 3);\nassert.equal(ANSWER, 42);\n"
                       "console.log('test ran');")
    ADD_TEST_FAILS = "const assert = require('node:assert');\nassert.deepEqual(add(1, 2), 4);"
    SYNTAX_ERROR = "function (:"
    EARLY_EXIT_0 = "process.exit(0);"
    RUNTIME_ERROR = "function f() {\n  return null.x;\n}\nf();"
    SPIN = "while (true) {}"
    FILES = ("const fs = require('fs');\nconst d = fs.readFileSync('in.txt', 'utf8');\n"
             "fs.writeFileSync('out/x.txt', d + d);")

    def test_the_program_looks_like_node_main_js(self):
        r = self.run_code(
            "console.log(JSON.stringify([require.main === module, __filename, __dirname,\n"
            "  process.argv.slice(1), process.cwd(), process.getuid(), process.getgid(),\n"
            "  typeof exports, Object.keys(process.env).sort(),\n"
            "  require('fs').readdirSync('/proc/self/fd').map(Number).sort((a, b) => a - b)]));\n")
        self.assertEqual(r["exit_code"], 0, r["stderr"])
        got = json.loads(r["stdout"])
        self.assertEqual(got[:9], [
            True, "/work/main.js", "/work", ["/work/main.js"], "/work", 10002, 10002, "object",
            ["HOME", "LANG", "PATH", "PYTHONDONTWRITEBYTECODE"]])
        self.assertEqual(got[9][:4], [0, 1, 2, 3])  # 3: the report pipe

    def test_relative_requires_resolve_from_work(self):
        r = self.run_code("const h = require('./helper');\nconsole.log(h.twice(21));",
                          files={"helper.js": "exports.twice = (x) => 2 * x;"})
        self.assertEqual((r["exit_code"], r["stdout"]), (0, "42\n"), r["stderr"])

    def test_uncaught_errors_are_printed_by_node_without_harness_frames(self):
        r = self.run_code(self.RUNTIME_ERROR)
        self.assertEqual(r["exception"]["type"], "TypeError")
        self.assertTrue(r["stderr"].startswith("/work/main.js:2\n"), r["stderr"])
        self.assertIn("at f (/work/main.js:2:", r["stderr"])
        self.assertNotIn("harness.js", r["stderr"])
        self.assertNotIn("node:vm", r["stderr"])

    def test_imports_and_async_failures(self):
        r = self.run_code("require('left-pad');")
        self.assertEqual((r["exit_code"], r["exception"]["kind"]), (1, "import"))
        r = self.run_code(self.ADD, test="Promise.reject(new RangeError('late'));")
        self.assertEqual((r["exit_code"], r["phase"], r["test_finished"]), (1, "test", False))
        self.assertEqual((r["exception"]["type"], r["exception"]["message"]),
                         ("RangeError", "late"))
        r = self.run_code(self.ADD, test=("const assert = require('node:assert');\n"
                                         "setTimeout(() => assert.ok(false), 10);"))
        self.assertEqual((r["exception"]["kind"], r["test_finished"]), ("assertion", False))

    def test_async_tests_finish_at_the_natural_end(self):
        r = self.run_code(self.ADD, test=("const assert = require('node:assert');\n"
                                         "setTimeout(() => { assert.equal(add(2, 2), 4);"
                                         " console.log('late ok'); }, 20);"))
        self.assertEqual((r["exit_code"], r["test_finished"], r["stdout"]), (0, True, "late ok\n"))
        r = self.run_code(self.ADD, test="setTimeout(() => process.exit(0), 10);")
        self.assertEqual((r["exit_code"], r["test_finished"], r["phase"]), (0, False, "test"))

    def test_the_output_cap_and_the_memory_limit_still_kill(self):
        r = self.run_code("while (true) process.stdout.write('b'.repeat(65536));",
                          max_output_bytes=1000, output_limit_bytes=4 << 20)
        self.assertTrue(r["output_limited"])
        self.assertEqual((r["signal"], len(r["stdout"]), r["stdout_truncated"]), (9, 1000, True))
        r = self.run_code("const keep = [];\n"
                          "while (true) keep.push(Buffer.alloc(1 << 20, 1));", test="1;")
        self.assertTrue(r["oom_killed"], r)
        self.assertEqual((r["exit_code"], r["signal"], r["test_finished"]), (None, 9, False))
        self.assertEqual(self.run_code(self.EXIT3)["exit_code"], 3)

    def test_output_written_before_process_exit_is_complete(self):
        r = self.run_code("process.stdout.write('x'.repeat(3 << 20));\nprocess.exit(0);",
                          max_output_bytes=4 << 20)
        self.assertEqual((r["exit_code"], len(r["stdout"])), (0, 3 << 20))

    def test_a_signal_that_ends_node_is_reported(self):
        r = self.run_code("process.kill(process.pid, 'SIGTERM'); setTimeout(() => {}, 5000);")
        self.assertEqual((r["exit_code"], r["signal"], r["timed_out"]), (None, 15, False))

    def test_the_program_cannot_signal_the_runner(self):
        r = self.run_code(
            "const fs = require('fs');\nconst out = {};\n"
            "for (const p of fs.readdirSync('/proc').filter((n) => /^\\d+$/.test(n))) {\n"
            "  let uid;\n"
            "  try { uid = fs.readFileSync(`/proc/${p}/status`, 'utf8').match(/^Uid:\\s+(\\d+)/m)[1]; }\n"
            "  catch (e) { continue; }\n"
            "  if (uid !== '0') continue;\n"
            "  try { process.kill(Number(p), 'SIGKILL'); out[p] = 'killed'; }\n"
            "  catch (e) { out[p] = e.code; }\n"
            "}\nconsole.log(JSON.stringify(out));")
        self.assertEqual(r["exit_code"], 0, r["stderr"])
        tried = json.loads(r["stdout"])
        self.assertIn("1", tried)
        self.assertGreaterEqual(len(tried), 3)  # init, the zygote and the supervisor
        self.assertEqual(set(tried.values()), {"EPERM"}, tried)
        self.assertEqual(self.run_code(self.EXIT3)["exit_code"], 3)

    def test_a_detached_child_holding_the_report_pipe_does_not_delay_the_answer(self):
        r = self.run_code("require('child_process').spawn('sleep', ['30'],"
                          " {detached: true, stdio: ['ignore', 'ignore', 'ignore', 'inherit']})"
                          ".unref();", test="console.log('t');")
        self.assertEqual((r["exit_code"], r["test_finished"]), (0, True), r["stderr"])
        # Far below the sleeper's 30 s, far above the run's own cost.
        self.assertLess(r["duration_ms"], 20_000)

    def test_the_python_harness_is_not_available(self):
        self.c.send(self.c.request(self.ADD, harness={"mode": "cases"}))
        r = self.c.recv()
        self.assertEqual(r["type"], "error")
        self.assertEqual(self.c.recv()["type"], "ready")


if __name__ == "__main__":
    unittest.main()
