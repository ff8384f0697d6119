"""SandboxFusion's own client (PyPI `sandbox-fusion`) against the cluster's `/run_code`.

    CODEGEN_URL=http://127.0.0.1:8080 python -m unittest discover -s tests/eval -p 'test_*.py'

Needs a running cluster and the package installed in the interpreter (scripts/test does both).
"""
import asyncio
import base64
import os
import unittest

from sandbox_fusion import RunCodeRequest, RunStatus, run_code, set_endpoint
from sandbox_fusion import run_code_async  # the async client
from sandbox_fusion.models import CommandRunStatus

URL = os.environ.get("CODEGEN_URL", "http://127.0.0.1:8080")


class SyncClient(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        set_endpoint(URL)

    def test_python_success_with_stdin(self):
        r = run_code(RunCodeRequest(code="print(input()[::-1])", language="python",
                                    stdin="olleh"))
        self.assertEqual(r.status, RunStatus.Success)
        self.assertEqual(r.run_result.status, CommandRunStatus.Finished)
        self.assertEqual(r.run_result.return_code, 0)
        self.assertEqual(r.run_result.stdout, "hello\n")
        self.assertIsNone(r.compile_result)

    def test_nodejs_and_bash(self):
        r = run_code(RunCodeRequest(code="console.log([1,2,3].map(x => x * 2).join(','))",
                                    language="nodejs"))
        self.assertEqual((r.status, r.run_result.stdout), (RunStatus.Success, "2,4,6\n"))
        r = run_code(RunCodeRequest(code="echo $((6 * 7)); exit 4", language="bash"))
        self.assertEqual(r.status, RunStatus.Failed)
        self.assertEqual((r.run_result.return_code, r.run_result.stdout), (4, "42\n"))

    def test_failure_and_timeout(self):
        r = run_code(RunCodeRequest(code="raise ValueError('no')", language="python"))
        self.assertEqual(r.status, RunStatus.Failed)
        self.assertEqual(r.run_result.return_code, 1)
        self.assertIn("ValueError: no", r.run_result.stderr)
        r = run_code(RunCodeRequest(code="while True: pass", language="python", run_timeout=0.5))
        self.assertEqual(r.status, RunStatus.Failed)
        self.assertEqual(r.run_result.status, CommandRunStatus.TimeLimitExceeded)

    def test_files_in_and_out(self):
        files = {"data.txt": base64.b64encode(b"3 4\n").decode()}
        code = ("a, b = map(int, open('data.txt').read().split())\n"
                "open('out.txt', 'w').write(str(a * b))")
        r = run_code(RunCodeRequest(code=code, language="python", files=files,
                                    fetch_files=["out.txt"]))
        self.assertEqual(r.status, RunStatus.Success, r)
        self.assertEqual(base64.b64decode(r.files["out.txt"]), b"12")

    def test_files_at_absolute_paths_under_mnt_data(self):
        # Where SandboxFusion's datasets put their files.
        files = {"/mnt/data/in.txt": base64.b64encode(b"3 4\n").decode()}
        code = ("a, b = map(int, open('/mnt/data/in.txt').read().split())\n"
                "open('/mnt/data/out.txt', 'w').write(str(a + b))")
        r = run_code(RunCodeRequest(code=code, language="python", files=files,
                                    fetch_files=["/mnt/data/out.txt"]))
        self.assertEqual(r.status, RunStatus.Success, r)
        self.assertEqual(base64.b64decode(r.files["/mnt/data/out.txt"]), b"7")

    def test_binary_files_in_and_out(self):
        blob = bytes(range(256))
        files = {"in.bin": base64.b64encode(blob).decode()}
        code = "open('out.bin', 'wb').write(open('in.bin', 'rb').read()[::-1])"
        r = run_code(RunCodeRequest(code=code, language="python", files=files,
                                    fetch_files=["out.bin"]))
        self.assertEqual(r.status, RunStatus.Success, r)
        self.assertEqual(base64.b64decode(r.files["out.bin"]), blob[::-1])

    def test_unsupported_language_is_a_client_error(self):
        import requests
        answer = requests.post(URL + "/run_code", json={"code": "<?php echo 1;", "language": "php"})
        self.assertEqual(answer.status_code, 422)
        self.assertIn("language", answer.json()["error"])

    def test_compiled_languages_answer_with_their_compile_result(self):
        programs = {
            "cpp": "#include <iostream>\nint main() { int a, b; std::cin >> a >> b; std::cout << a * b << '\\n'; }",
            "go": "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tvar a, b int\n\tfmt.Scan(&a, &b)\n\tfmt.Println(a * b)\n}\n",
            "rust": "use std::io::Read;\nfn main() { let mut s = String::new(); std::io::stdin().read_to_string(&mut s).unwrap(); let p: i64 = s.split_whitespace().map(|x| x.parse::<i64>().unwrap()).product(); println!(\"{}\", p); }",
            "java": "import java.util.Scanner;\n\npublic class Main {\n  public static void main(String[] args) {\n    Scanner in = new Scanner(System.in);\n    System.out.println(in.nextInt() * in.nextInt());\n  }\n}\n",
            "typescript": "const [a, b]: number[] = require('fs').readFileSync(0, 'utf8').trim().split(' ').map(Number);\nconsole.log(a * b);\n",
        }
        for language, code in programs.items():
            # Limits far above the cost (tsc and javac take seconds, a JVM starts in about
            # 0.5 s; ten times that on a slow machine): the verdict, not the speed, is tested.
            r = run_code(RunCodeRequest(code=code, language=language, stdin="6 7",
                                        compile_timeout=120, run_timeout=60))
            self.assertEqual(r.status, RunStatus.Success, (language, r))
            self.assertEqual(r.run_result.stdout, "42\n", language)
            self.assertEqual(r.compile_result.status, CommandRunStatus.Finished, language)
            self.assertEqual(r.compile_result.return_code, 0, language)
            self.assertGreater(r.compile_result.execution_time, 0, language)
        r = run_code(RunCodeRequest(code="int main() { return undeclared; }", language="cpp",
                                    compile_timeout=120))
        self.assertEqual(r.status, RunStatus.Failed)
        self.assertIsNone(r.run_result)
        self.assertNotEqual(r.compile_result.return_code, 0)
        self.assertIn("undeclared", r.compile_result.stderr)


class AsyncClient(unittest.TestCase):
    def test_many_concurrent_runs_each_get_their_own_answer(self):
        async def main():
            requests = [RunCodeRequest(code=f"print({i} * {i})", language="python")
                        for i in range(60)]
            requests += [RunCodeRequest(code=f"console.log({i} + 1)", language="nodejs")
                         for i in range(10)]
            return await asyncio.gather(*(run_code_async(r, endpoint=URL) for r in requests))

        results = asyncio.run(main())
        for i, r in enumerate(results[:60]):
            self.assertEqual((r.status, r.run_result.stdout), (RunStatus.Success, f"{i * i}\n"))
        for i, r in enumerate(results[60:]):
            self.assertEqual((r.status, r.run_result.stdout), (RunStatus.Success, f"{i + 1}\n"))


if __name__ == "__main__":
    unittest.main()
