//! The compiled languages end to end (coordinator, worker, real Docker): for each, a set of
//! correct, wrong, crashing, looping and compile-failing programs whose verdicts are asserted,
//! the program + test form, the language's own version, and `GET /v1/languages`.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use futures::future::join_all;
use serde_json::{Value, json};
use tests::{AMPLE_MS, patient_cluster};

/// One program of a fidelity set and what its verdict must be.
struct Case {
    what: &'static str,
    code: &'static str,
    test: Option<&'static str>,
    stdin: Option<&'static str>,
    status: &'static str,
    /// The stdout starts with it (or, for `compile_error`, the compiler's output contains it).
    says: &'static str,
}

const fn case(
    what: &'static str,
    code: &'static str,
    status: &'static str,
    says: &'static str,
) -> Case {
    Case {
        what,
        code,
        test: None,
        stdin: None,
        status,
        says,
    }
}

/// Every set: (language, cases). Each language has a correct program reading stdin, a
/// program + test that passes and one that fails, a crash, an endless loop and a compile error,
/// and a program printing the version `GET /v1/languages` names.
fn sets() -> Vec<(&'static str, Vec<Case>)> {
    vec![
        (
            "c",
            vec![
                Case {
                    stdin: Some("3 4\n"),
                    ..case(
                        "sum",
                        "#include <stdio.h>\nint main(void) { int a, b; if (scanf(\"%d %d\", &a, &b) != 2) return 1; printf(\"%d\\n\", a + b); return 0; }",
                        "passed",
                        "7",
                    )
                },
                Case {
                    test: Some(
                        "#include <assert.h>\nint main(void) { assert(add(2, 3) == 5); return 0; }",
                    ),
                    ..case(
                        "test passes",
                        "int add(int a, int b) { return a + b; }",
                        "passed",
                        "",
                    )
                },
                Case {
                    test: Some(
                        "#include <assert.h>\nint main(void) { assert(add(2, 3) == 5); return 0; }",
                    ),
                    ..case(
                        "test fails",
                        "int add(int a, int b) { return a - b; }",
                        "failed",
                        "",
                    )
                },
                case(
                    "crash",
                    "int main(void) { volatile int *p = 0; return *p; }",
                    "failed",
                    "",
                ),
                case("loop", "int main(void) { for (;;) {} }", "timeout", ""),
                case(
                    "compile error",
                    "int main(void) { return missing; }",
                    "compile_error",
                    "missing",
                ),
                case(
                    "version",
                    "#include <stdio.h>\nint main(void) { printf(\"%d.%d\\n\", __GNUC__, __GNUC_MINOR__); return 0; }",
                    "passed",
                    "14.2",
                ),
            ],
        ),
        (
            "cpp",
            vec![
                Case {
                    stdin: Some("3 4\n"),
                    ..case(
                        "sum",
                        "#include <iostream>\nint main() { long a, b; std::cin >> a >> b; std::cout << a + b << std::endl; }",
                        "passed",
                        "7",
                    )
                },
                Case {
                    test: Some("#include <cassert>\nint main() { assert(add({2, 3}) == 5); }"),
                    ..case(
                        "test passes",
                        "#include <vector>\n#include <numeric>\nint add(std::vector<int> v) { return std::accumulate(v.begin(), v.end(), 0); }",
                        "passed",
                        "",
                    )
                },
                Case {
                    test: Some("#include <cassert>\nint main() { assert(add({2, 3}) == 5); }"),
                    ..case(
                        "test fails",
                        "#include <vector>\nint add(std::vector<int> v) { return v[0]; }",
                        "failed",
                        "",
                    )
                },
                case(
                    "crash",
                    "#include <stdexcept>\nint main() { throw std::runtime_error(\"boom\"); }",
                    "failed",
                    "",
                ),
                case(
                    "loop",
                    "int main() { volatile bool go = true; while (go) {} }",
                    "timeout",
                    "",
                ),
                case(
                    "compile error",
                    "int main() { std::string s; }",
                    "compile_error",
                    "string",
                ),
                case(
                    "version",
                    "#include <cstdio>\nint main() { std::printf(\"%d.%d\\n\", __GNUC__, __GNUC_MINOR__); }",
                    "passed",
                    "14.2",
                ),
            ],
        ),
        (
            "go",
            vec![
                Case {
                    stdin: Some("3 4\n"),
                    ..case(
                        "sum",
                        "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tvar a, b int\n\tfmt.Scan(&a, &b)\n\tfmt.Println(a + b)\n}\n",
                        "passed",
                        "7",
                    )
                },
                Case {
                    test: Some(
                        "package main\n\nfunc main() {\n\tif Add(2, 3) != 5 {\n\t\tpanic(\"Add(2, 3) != 5\")\n\t}\n}\n",
                    ),
                    ..case(
                        "test passes",
                        "package main\n\nfunc Add(a, b int) int { return a + b }\n",
                        "passed",
                        "",
                    )
                },
                Case {
                    test: Some(
                        "package main\n\nfunc main() {\n\tif Add(2, 3) != 5 {\n\t\tpanic(\"Add(2, 3) != 5\")\n\t}\n}\n",
                    ),
                    ..case(
                        "test fails",
                        "package main\n\nfunc Add(a, b int) int { return a * b }\n",
                        "failed",
                        "",
                    )
                },
                case(
                    "crash",
                    "package main\n\nfunc main() {\n\tvar m map[string]int\n\tm[\"x\"] = 1\n}\n",
                    "failed",
                    "",
                ),
                case(
                    "loop",
                    "package main\n\nfunc main() {\n\tfor {\n\t}\n}\n",
                    "timeout",
                    "",
                ),
                case(
                    "compile error",
                    "package main\n\nfunc main() {\n\tx := 1\n}\n",
                    "compile_error",
                    "declared",
                ),
                case(
                    "version",
                    "package main\n\nimport (\n\t\"fmt\"\n\t\"runtime\"\n)\n\nfunc main() { fmt.Println(runtime.Version()) }\n",
                    "passed",
                    "go1.24",
                ),
            ],
        ),
        (
            "rust",
            vec![
                Case {
                    stdin: Some("3 4\n"),
                    ..case(
                        "sum",
                        "use std::io::Read;\nfn main() { let mut s = String::new(); std::io::stdin().read_to_string(&mut s).unwrap(); let n: i64 = s.split_whitespace().map(|x| x.parse::<i64>().unwrap()).sum(); println!(\"{}\", n); }",
                        "passed",
                        "7",
                    )
                },
                Case {
                    test: Some("fn main() { assert_eq!(add(2, 3), 5); }"),
                    ..case(
                        "test passes",
                        "fn add(a: i32, b: i32) -> i32 { a + b }",
                        "passed",
                        "",
                    )
                },
                Case {
                    test: Some("fn main() { assert_eq!(add(2, 3), 5); }"),
                    ..case(
                        "test fails",
                        "fn add(a: i32, b: i32) -> i32 { a - b }",
                        "failed",
                        "",
                    )
                },
                case(
                    "crash",
                    "fn main() { let v: Vec<i32> = Vec::new(); println!(\"{}\", v[std::env::args().count()]); }",
                    "failed",
                    "",
                ),
                case(
                    "loop",
                    "fn main() { let mut x: u64 = 1; loop { x = x.wrapping_mul(6364136223846793005).wrapping_add(1); if x == 42 { println!(\"{}\", x); } } }",
                    "timeout",
                    "",
                ),
                case(
                    "compile error",
                    "fn main() { let x: i32 = \"text\"; }",
                    "compile_error",
                    "mismatched types",
                ),
                case(
                    "version",
                    // Vec::pop_if is Rust 1.86's: the image's 1.85 does not have it.
                    "fn main() { let mut v = vec![1]; println!(\"{:?}\", v.pop_if(|x| *x > 0)); }",
                    "compile_error",
                    "pop_if",
                ),
            ],
        ),
        (
            "java",
            vec![
                Case {
                    stdin: Some("3 4\n"),
                    ..case(
                        "sum",
                        "import java.util.Scanner;\n\npublic class Main {\n    public static void main(String[] args) {\n        Scanner in = new Scanner(System.in);\n        System.out.println(in.nextInt() + in.nextInt());\n    }\n}\n",
                        "passed",
                        "7",
                    )
                },
                Case {
                    test: Some(
                        "public class Main {\n    public static void main(String[] args) {\n        if (new Solution().add(2, 3) != 5) throw new AssertionError(\"add\");\n    }\n}\n",
                    ),
                    ..case(
                        "test passes",
                        "import java.util.*;\n\nclass Solution {\n    public int add(int a, int b) { return a + b; }\n}\n",
                        "passed",
                        "",
                    )
                },
                Case {
                    test: Some(
                        "public class Main {\n    public static void main(String[] args) {\n        if (new Solution().add(2, 3) != 5) throw new AssertionError(\"add\");\n    }\n}\n",
                    ),
                    ..case(
                        "test fails",
                        "class Solution {\n    public int add(int a, int b) { return a * b; }\n}\n",
                        "failed",
                        "",
                    )
                },
                case(
                    "crash",
                    "public class Main {\n    public static void main(String[] args) {\n        Object o = null;\n        System.out.println(o.hashCode());\n    }\n}\n",
                    "failed",
                    "",
                ),
                case(
                    "loop",
                    "public class Main {\n    public static void main(String[] args) {\n        while (true) {}\n    }\n}\n",
                    "timeout",
                    "",
                ),
                case(
                    "compile error",
                    "public class Main {\n    public static void main(String[] args) {\n        int x = \"text\";\n    }\n}\n",
                    "compile_error",
                    "incompatible types",
                ),
                case(
                    "version",
                    "class Main {\n    public static void main(String[] args) {\n        System.out.println(Runtime.version().feature());\n    }\n}\n",
                    "passed",
                    "21",
                ),
            ],
        ),
        (
            "typescript",
            vec![
                Case {
                    stdin: Some("3 4\n"),
                    ..case(
                        "sum",
                        "const input: string = require('fs').readFileSync(0, 'utf8');\nconst [a, b] = input.trim().split(/\\s+/).map(Number);\nconsole.log(a + b);\n",
                        "passed",
                        "7",
                    )
                },
                Case {
                    test: Some(
                        "import assert from 'node:assert';\nassert.strictEqual(add(2, 3), 5);\n",
                    ),
                    ..case(
                        "test passes",
                        "function add(a: number, b: number): number { return a + b; }\n",
                        "passed",
                        "",
                    )
                },
                Case {
                    test: Some(
                        "import assert from 'node:assert';\nassert.strictEqual(add(2, 3), 5);\n",
                    ),
                    ..case(
                        "test fails",
                        "function add(a: number, b: number): number { return a - b; }\n",
                        "failed",
                        "",
                    )
                },
                case(
                    "crash",
                    "interface P { x: number }\nconst p = undefined as unknown as P;\nconsole.log(p.x);\n",
                    "failed",
                    "",
                ),
                case("loop", "while (true) {}\n", "timeout", ""),
                case(
                    "compile error",
                    "function f(: number {}\n",
                    "compile_error",
                    "error TS",
                ),
                case(
                    "version",
                    "console.log(require('typescript').version);\n",
                    "passed",
                    "4.9",
                ),
            ],
        ),
    ]
}

/// The limit of the programs that loop forever.
const LOOP_MS: u64 = 3000;

#[tokio::test]
async fn every_compiled_language_gives_each_program_its_own_verdict() {
    let (cluster, _coordinator, _worker) = patient_cluster().await;

    let (status, listed) =
        tests::get_json(&cluster.http, &format!("{}/v1/languages", cluster.url())).await;
    assert_eq!(status, 200, "{listed}");
    let listed = listed["languages"].as_array().unwrap().clone();

    for (language, cases) in sets() {
        let entry = listed
            .iter()
            .find(|l| l["name"] == language)
            .unwrap_or_else(|| panic!("{language} in GET /v1/languages"));
        assert_eq!(entry["compiled"], true, "{entry}");
        assert_eq!(
            entry["image"],
            format!("codegen-sandbox-{language}:latest"),
            "{entry}"
        );
        let version = entry["version"].as_str().unwrap().to_owned();
        // Each language's cases run at once: the pool starts on the first and serves the rest.
        let runs = cases.iter().map(|c| {
            // The looping program meets its limit (it never ends, so on any machine); the others
            // and every compile get far more than they take on a slow, loaded machine (a CI run
            // starved a passing TypeScript program past 3 s of wall clock with 0.3 s of CPU).
            let timeout_ms = if c.status == "timeout" {
                LOOP_MS
            } else {
                AMPLE_MS
            };
            let mut body = json!({"language": language, "code": c.code, "timeout_ms": timeout_ms,
                                  "compile_timeout_ms": AMPLE_MS});
            if let Some(test) = c.test {
                body["test"] = json!(test);
            }
            if let Some(stdin) = c.stdin {
                body["stdin"] = json!(stdin);
            }
            let cluster = &cluster;
            async move { cluster.execute("", body).await }
        });
        let answers: Vec<(u16, Value)> = join_all(runs).await;
        for (c, (got, answer)) in cases.iter().zip(answers) {
            let what = format!("{language} {}", c.what);
            assert_eq!(got, 200, "{what}: {answer:#}");
            assert_eq!(answer["status"], c.status, "{what}: {answer:#}");
            let compile = &answer["compile"];
            match c.status {
                "compile_error" => {
                    assert_ne!(compile["status"], "ok", "{what}: {answer:#}");
                    let output = compile["output"].as_str().unwrap();
                    assert!(output.contains(c.says), "{what}: {answer:#}");
                    assert!(
                        answer["reason"].as_str().unwrap().contains("compiler"),
                        "{what}: {answer:#}"
                    );
                    assert!(
                        answer["exit_code"].is_null(),
                        "{what}: nothing ran: {answer:#}"
                    );
                }
                _ => {
                    assert_eq!(compile["status"], "ok", "{what}: {answer:#}");
                    assert!(
                        compile["duration_ms"].as_u64().unwrap() > 0,
                        "{what}: {answer:#}"
                    );
                    let stdout = answer["stdout"].as_str().unwrap();
                    assert!(stdout.starts_with(c.says), "{what}: {answer:#}");
                }
            }
            if c.what == "version" && c.status == "passed" {
                assert!(
                    answer["stdout"]
                        .as_str()
                        .unwrap()
                        .trim()
                        .starts_with(&version),
                    "{what}: {version} {answer:#}"
                );
            }
            if c.status == "timeout" {
                // The run's clock starts after the compile: the limit is the run's own, and the
                // run was stopped at it, not later when the worker would call the container
                // wedged (at the limit plus `sandbox.grace`, 5 s).
                let ms = answer["duration_ms"].as_u64().unwrap();
                assert!(
                    (LOOP_MS..LOOP_MS + 5000).contains(&ms),
                    "{what}: {answer:#}"
                );
            }
        }
    }
}

#[tokio::test]
async fn a_compile_timeout_is_a_compile_error_not_a_run_timeout() {
    let (cluster, _coordinator, _worker) = patient_cluster().await;
    // A million statements from nested macros: seconds of compile, far more than 300 ms.
    let code = "#define A0 x += 1;\n#define A1 A0 A0 A0 A0 A0 A0 A0 A0 A0 A0\n\
                #define A2 A1 A1 A1 A1 A1 A1 A1 A1 A1 A1\n#define A3 A2 A2 A2 A2 A2 A2 A2 A2 A2 A2\n\
                #define A4 A3 A3 A3 A3 A3 A3 A3 A3 A3 A3\n#define A5 A4 A4 A4 A4 A4 A4 A4 A4 A4 A4\n\
                #define A6 A5 A5 A5 A5 A5 A5 A5 A5 A5 A5\n\
                int main() { volatile int x = 0; A6 return 0; }\n";
    let (got, answer) = cluster
        .execute("", json!({"language": "cpp", "code": code, "compile_timeout_ms": 300, "timeout_ms": 60_000}))
        .await;
    assert_eq!(got, 200, "{answer}");
    assert_eq!(answer["status"], "compile_error", "{answer:#}");
    assert_eq!(answer["compile"]["status"], "timeout", "{answer:#}");
    assert!(
        answer["reason"].as_str().unwrap().contains("limit"),
        "{answer:#}"
    );
    // The same container serves the next program: a compile timeout is no breach.
    let (_, answer) = cluster
        .execute("", json!({"language": "cpp", "code": "#include <cstdio>\nint main() { std::puts(\"ok\"); }",
                            "compile_timeout_ms": AMPLE_MS, "timeout_ms": AMPLE_MS}))
        .await;
    assert_eq!(answer["status"], "passed", "{answer:#}");
    assert_eq!(answer["stdout"], "ok\n", "{answer:#}");
}

#[tokio::test]
async fn python_sci_finds_its_packages_warm_and_its_memory_limit_is_the_programs() {
    let (cluster, _coordinator, _worker) = patient_cluster().await;
    // Imported by the zygote before any program: the program's first line sees them loaded.
    let code = "import sys\n\
                print(all(m in sys.modules for m in ('numpy', 'scipy', 'pandas', 'sympy', 'networkx')))\n\
                import numpy as np, pandas as pd, sympy, networkx as nx\n\
                from scipy import optimize\n\
                print(int(np.arange(10).sum()), int(pd.Series([1, 2, 3]).sum()),\n\
                      sympy.factor(sympy.Symbol('x')**2 - 1), nx.shortest_path_length(nx.path_graph(5), 0, 4),\n\
                      round(optimize.brentq(lambda x: x * x - 2, 0, 2), 6))\n";
    // The zygote's imports take seconds here, tens of seconds on a slow machine (the cluster's
    // `sandbox.start_timeout` gives its container minutes to start).
    let (got, answer) = cluster
        .execute(
            "",
            json!({"language": "python-sci", "code": code, "timeout_ms": AMPLE_MS}),
        )
        .await;
    assert_eq!(got, 200, "{answer}");
    assert_eq!(answer["status"], "passed", "{answer:#}");
    assert_eq!(
        answer["stdout"], "True\n45 6 (x - 1)*(x + 1) 4 1.414214\n",
        "{answer:#}"
    );
    // 200 MiB of the program's own within a 256 MiB limit: the preloaded packages are the
    // runner's, not the program's, and not in its peak either.
    let code = "import numpy as np\na = np.ones(25_000_000)\nprint(int(a.sum()))\n";
    let (_, answer) = cluster
        .execute(
            "",
            json!({"language": "python-sci", "code": code, "memory_mb": 256, "timeout_ms": AMPLE_MS}),
        )
        .await;
    assert_eq!(answer["status"], "passed", "{answer:#}");
    let peak = answer["peak_memory_kb"].as_u64().unwrap();
    assert!((190_000..240_000).contains(&peak), "{answer:#}");
    // And past the limit, the program's own memory_limit.
    let code = "import numpy as np\na = np.ones(50_000_000)\nprint(int(a.sum()))\n";
    let (_, answer) = cluster
        .execute(
            "",
            json!({"language": "python-sci", "code": code, "memory_mb": 256, "timeout_ms": AMPLE_MS}),
        )
        .await;
    assert_eq!(answer["status"], "memory_limit", "{answer:#}");
}

#[tokio::test]
async fn a_compiler_bomb_is_a_compile_error_and_the_container_serves_the_next_run() {
    let (cluster, _coordinator, _worker) = patient_cluster().await;
    // 10^6 statements in one function at -O2: gcc's memory grows past any small limit, long
    // before the compile's time limit (the largest: it passes 64 MiB in a second or two here).
    let bomb = "#define A0 x += 1;\n#define A1 A0 A0 A0 A0 A0 A0 A0 A0 A0 A0\n\
                #define A2 A1 A1 A1 A1 A1 A1 A1 A1 A1 A1\n#define A3 A2 A2 A2 A2 A2 A2 A2 A2 A2 A2\n\
                #define A4 A3 A3 A3 A3 A3 A3 A3 A3 A3 A3\n#define A5 A4 A4 A4 A4 A4 A4 A4 A4 A4 A4\n\
                #define A6 A5 A5 A5 A5 A5 A5 A5 A5 A5 A5\n\
                int main(void) { volatile int x = 0; A6 return 0; }\n";
    let (got, answer) = cluster
        .execute(
            "",
            json!({"language": "c", "code": bomb, "memory_mb": 64, "compile_timeout_ms": AMPLE_MS}),
        )
        .await;
    assert_eq!(got, 200, "{answer}");
    assert_eq!(answer["status"], "compile_error", "{answer:#}");
    assert!(
        answer["reason"].as_str().unwrap().contains("memory limit"),
        "the OOM killer took the compiler, not the runner: {answer:#}"
    );
    // A compiler reading a device forever: its memory limit or the compile's own time limit
    // stops it, whichever comes first; never the runner.
    let (_, answer) = cluster
        .execute(
            "",
            json!({"language": "c", "code": "#include \"/dev/zero\"\n", "compile_timeout_ms": 1000}),
        )
        .await;
    assert_eq!(answer["status"], "compile_error", "{answer:#}");
    // Nothing of either is left: the next program compiles and runs.
    let (_, answer) = cluster
        .execute(
            "",
            json!({"language": "c", "code": "#include <stdio.h>\nint main(void) { puts(\"next\"); return 0; }\n",
                   "compile_timeout_ms": AMPLE_MS, "timeout_ms": AMPLE_MS}),
        )
        .await;
    assert_eq!(answer["status"], "passed", "{answer:#}");
    assert_eq!(answer["stdout"], "next\n", "{answer:#}");
}
