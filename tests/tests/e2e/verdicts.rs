//! Verdicts evaluation users can trust, end to end (coordinator, worker, real Docker): a
//! failing assertion fails in every language that has one, and says so (`error_kind`
//! `assertion`); the libraries evaluation sets import are there; the toolchains are current;
//! files may live at `/mnt/data` as SandboxFusion's datasets put them.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use futures::future::join_all;
use serde_json::{Value, json};
use tests::{AMPLE_MS, patient_cluster};

/// One program and the verdict it must get.
struct Case {
    language: &'static str,
    what: &'static str,
    code: &'static str,
    test: Option<&'static str>,
    status: &'static str,
    /// `error_kind` (for a failure).
    kind: Option<&'static str>,
    /// The stdout (a pass) or the reason (a failure) contains it.
    says: &'static str,
}

fn passes(
    language: &'static str,
    what: &'static str,
    code: &'static str,
    says: &'static str,
) -> Case {
    Case {
        language,
        what,
        code,
        test: None,
        status: "passed",
        kind: None,
        says,
    }
}

fn asserts(language: &'static str, code: &'static str, says: &'static str) -> Case {
    Case {
        language,
        what: "a failing assertion",
        code,
        test: None,
        status: "failed",
        kind: Some("assertion"),
        says,
    }
}

fn cases() -> Vec<Case> {
    vec![
        // Assertions are on in every language that can turn them off.
        asserts(
            "java",
            "public class Main {\n  public static void main(String[] a) {\n    int x = 1;\n    assert x == 2 : \"x is \" + x;\n  }\n}\n",
            "x is 1",
        ),
        asserts(
            "c",
            "#include <assert.h>\nint main(void) { int x = 1; assert(x == 2); return 0; }\n",
            "x == 2",
        ),
        asserts(
            "cpp",
            "#include <bits/stdc++.h>\nint main() { std::vector<int> v{3, 1}; std::sort(v.begin(), v.end()); assert(v[0] == 3); }\n",
            "v[0] == 3",
        ),
        asserts(
            "rust",
            "fn main() { let v = vec![3, 1]; assert_eq!(v.iter().min(), Some(&3)); }\n",
            "left == right",
        ),
        asserts("python", "x = 1\nassert x == 2, 'x is 1'\n", "x is 1"),
        asserts(
            "javascript",
            "const assert = require('assert');\nassert.strictEqual(1 + 1, 3);\n",
            "",
        ),
        Case {
            what: "a failing assertion in the test of a program",
            test: Some(
                "class Test {\n  public static void main(String[] a) {\n    assert Calc.twice(2) == 5;\n  }\n}\n",
            ),
            ..asserts(
                "java",
                "class Calc { static int twice(int x) { return 2 * x; } }\n",
                "",
            )
        },
        // A passing assertion still passes.
        passes(
            "java",
            "a passing assertion",
            "public class Main {\n  public static void main(String[] a) {\n    assert 1 == 1;\n    System.out.println(\"ok\");\n  }\n}\n",
            "ok",
        ),
        // The libraries evaluation sets import.
        passes(
            "java",
            "javatuples (HumanEval-X, MultiPL-E)",
            "import java.util.*;\nimport org.javatuples.*;\nclass Main {\n  public static void main(String[] a) {\n    Pair<Integer, String> p = Pair.with(1, \"one\");\n    System.out.println(p.getValue1());\n  }\n}\n",
            "one",
        ),
        passes(
            "java",
            "gson",
            "import com.google.gson.Gson;\nimport java.util.*;\nclass Main {\n  public static void main(String[] a) {\n    System.out.println(new Gson().toJson(List.of(1, 2)));\n  }\n}\n",
            "[1,2]",
        ),
        passes(
            "javascript",
            "lodash",
            "const _ = require('lodash');\nconsole.log(JSON.stringify(_.chunk([1, 2, 3], 2)));\n",
            "[[1,2],[3]]",
        ),
        passes(
            "typescript",
            "lodash",
            "import * as _ from 'lodash';\nconst parts: number[][] = _.chunk([1, 2, 3], 2);\nconsole.log(JSON.stringify(parts));\n",
            "[[1,2],[3]]",
        ),
        // Current toolchains: what the old ones could not compile.
        passes(
            "rust",
            "std::hint::black_box (Rust 1.66) and is_some_and (1.70)",
            "fn main() { let v: Option<u8> = Some(std::hint::black_box(3)); println!(\"{}\", v.is_some_and(|x| x > 2)); }\n",
            "true",
        ),
        passes(
            "go",
            "the min builtin (Go 1.21)",
            "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(min(3, 1, 2)) }\n",
            "1",
        ),
        passes(
            "java",
            "a record and a switch pattern (Java 21)",
            "class Main {\n  record P(int x) {}\n  public static void main(String[] a) {\n    Object o = new P(7);\n    System.out.println(switch (o) { case P p -> p.x(); default -> 0; });\n  }\n}\n",
            "7",
        ),
        passes(
            "javascript",
            "Array.prototype.findLast and structuredClone (Node 17-18) and Array.prototype.toSorted (Node 20)",
            "console.log([3, 1, 2].toSorted().findLast((x) => x < 3));\n",
            "2",
        ),
    ]
}

#[tokio::test]
async fn assertions_libraries_and_current_toolchains_in_every_language() {
    let (cluster, _coordinator, _worker) = patient_cluster().await;
    let cases = cases();
    let runs = cases.iter().map(|c| {
        let mut body = json!({"language": c.language, "code": c.code, "timeout_ms": AMPLE_MS,
                              "compile_timeout_ms": AMPLE_MS});
        if let Some(test) = c.test {
            body["test"] = json!(test);
        }
        let cluster = &cluster;
        async move { cluster.execute("", body).await }
    });
    let answers: Vec<(u16, Value)> = join_all(runs).await;
    for (c, (got, answer)) in cases.iter().zip(answers) {
        let what = format!("{} {}", c.language, c.what);
        assert_eq!(got, 200, "{what}: {answer:#}");
        assert_eq!(answer["status"], c.status, "{what}: {answer:#}");
        match c.kind {
            Some(kind) => {
                assert_eq!(answer["error_kind"], kind, "{what}: {answer:#}");
                let reason = answer["reason"].as_str().unwrap_or_default();
                assert!(reason.contains(c.says), "{what}: {answer:#}");
            }
            None => {
                let stdout = answer["stdout"].as_str().unwrap();
                assert!(stdout.contains(c.says), "{what}: {answer:#}");
            }
        }
    }

    // GET /v1/languages says which libraries each image has.
    let (status, listed) =
        tests::get_json(&cluster.http, &format!("{}/v1/languages", cluster.url())).await;
    assert_eq!(status, 200, "{listed}");
    let libraries = |name: &str| -> Vec<String> {
        let entry = listed["languages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == name)
            .unwrap();
        serde_json::from_value(entry["libraries"].clone()).unwrap()
    };
    assert!(libraries("java").iter().any(|l| l.contains("javatuples")));
    assert!(libraries("javascript").iter().any(|l| l == "lodash"));
    assert!(libraries("typescript").iter().any(|l| l == "lodash"));
    assert!(libraries("python-sci").iter().any(|l| l == "numpy"));
}

#[tokio::test]
async fn files_at_mnt_data_go_in_and_come_back_and_nothing_else_becomes_writable() {
    let (cluster, _coordinator, _worker) = patient_cluster().await;
    let (got, answer) = cluster
        .execute(
            "",
            json!({"language": "python", "timeout_ms": AMPLE_MS,
                   "code": "print(open('/mnt/data/in.csv').read())\nimport os\nos.makedirs('/mnt/data/out')\nopen('/mnt/data/out/r.txt', 'w').write('result')\n",
                   "files": {"/mnt/data/in.csv": "a,b"},
                   "return_files": ["/mnt/data/out/r.txt"]}),
        )
        .await;
    assert_eq!(got, 200, "{answer:#}");
    assert_eq!(answer["status"], "passed", "{answer:#}");
    assert_eq!(answer["stdout"], "a,b\n", "{answer:#}");
    assert_eq!(
        answer["files"]["/mnt/data/out/r.txt"], "result",
        "{answer:#}"
    );

    // Only /mnt/data: any other absolute path, or a way out of it, is refused by name.
    for path in [
        "/etc/passwd",
        "/mnt/other.txt",
        "/mnt/data/../x",
        "/mnt/datax/y",
    ] {
        let (got, answer) = cluster
            .execute(
                "",
                json!({"language": "python", "code": "pass", "files": {path: "x"}}),
            )
            .await;
        assert_eq!(got, 422, "{path}: {answer:#}");
        assert!(
            answer["error"].as_str().unwrap().contains(path),
            "{path}: {answer:#}"
        );
    }
    // A program writes nowhere else: /mnt itself stays read-only.
    let (_, answer) = cluster
        .execute(
            "",
            json!({"language": "python", "code": "open('/mnt/other.txt', 'w')"}),
        )
        .await;
    assert_eq!(answer["status"], "failed", "{answer:#}");
    assert!(
        answer["stderr"]
            .as_str()
            .unwrap()
            .contains("Read-only file system"),
        "{answer:#}"
    );
}
