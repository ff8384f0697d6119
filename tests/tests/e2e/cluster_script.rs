//! The cluster that `scripts/cluster up` started (the README's quickstart), driven through the
//! `codegen exec` client as a user would.

use std::process::Command;

fn cluster_url() -> String {
    std::env::var("CODEGEN_CLUSTER_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into())
}

fn exec(program: &str, extra: &[&str]) -> (i32, String, String) {
    exec_file("program.py", program, None, extra)
}

/// `codegen exec NAME [--test TEST_NAME] EXTRA…` with the files written to a scratch folder.
fn exec_file(
    name: &str,
    program: &str,
    test: Option<(&str, &str)>,
    extra: &[&str],
) -> (i32, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join(name);
    std::fs::write(&file, program).expect("program written");
    let mut command = Command::new(tests::binary());
    command.arg("exec").arg(&file);
    if let Some((test_name, test)) = test {
        let test_file = dir.path().join(test_name);
        std::fs::write(&test_file, test).expect("test written");
        command.arg("--test").arg(test_file);
    }
    let output = command
        .args(extra)
        .env("CODEGEN_URL", cluster_url())
        .output()
        .expect("codegen runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_script_cluster_runs_programs_for_the_cli() {
    let http = reqwest::Client::new();
    let ready = http
        .get(format!("{}/readyz", cluster_url()))
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "no cluster at {}: run scripts/cluster up first (scripts/test does): {e}",
                cluster_url()
            )
        });
    assert_eq!(ready.status(), 200, "{}", ready.text().await.unwrap());

    let (code, stdout, stderr) = exec("print(sum(range(10)))", &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "45\n");
    assert!(stderr.contains("status=passed"), "{stderr}");

    let (code, _, stderr) = exec("raise ValueError('nope')", &[]);
    assert_eq!(code, 1);
    assert!(stderr.contains("ValueError: nope"), "{stderr}");
    assert!(stderr.contains("status=failed exit_code=1"), "{stderr}");

    let (code, stdout, _) = exec(
        "import time\ntime.sleep(10)",
        &["--timeout-ms", "300", "--json"],
    );
    assert_eq!(code, 1);
    let view: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(view["status"], "timeout");

    // The language follows the extension; --test runs the test after the program.
    let solution = "function add(a, b) { return a + b; }";
    let (code, _, stderr) = exec_file(
        "solution.js",
        solution,
        Some((
            "test.js",
            "if (add(2, 3) !== 5) throw new Error('wrong sum');",
        )),
        &[],
    );
    assert_eq!(code, 0, "{stderr}");
    let (code, _, stderr) = exec_file(
        "solution.js",
        solution,
        Some((
            "test.js",
            "if (add(2, 2) !== 5) throw new Error('wrong sum');",
        )),
        &[],
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("wrong sum"), "{stderr}");
    let (code, stdout, stderr) = exec_file("hello.sh", "echo \"bash $BASH_VERSION\"", None, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("bash 5"), "{stdout}");
    // --language wins over the extension.
    let (code, stdout, stderr) = exec_file(
        "script.txt",
        "echo from-bash",
        None,
        &["--language", "bash"],
    );
    assert_eq!((code, stdout.as_str()), (0, "from-bash\n"), "{stderr}");

    let (code, _, stderr) = exec("print(1)", &["--language", "cobol"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("422") && stderr.contains("language"),
        "{stderr}"
    );
}

#[test]
fn exec_batch_writes_every_result_in_input_order_and_names_bad_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("in.jsonl");
    let output = dir.path().join("out.jsonl");
    let mut lines: Vec<String> = (0..40)
        .map(|i| {
            // Later lines finish first: the file is still in input order at the end.
            let code = format!(
                "import time\ntime.sleep({})\nprint({i})",
                (40 - i) as f64 / 400.0
            );
            serde_json::json!({"id": format!("p{i}"), "language": "python", "code": code})
                .to_string()
        })
        .collect();
    lines[5] = serde_json::json!({"id": "bad", "language": "bash", "code": "exit 3"}).to_string();
    lines.insert(10, String::new()); // blank lines are skipped
    std::fs::write(&input, lines.join("\n")).expect("input written");
    let run = |chunk: &str| {
        Command::new(tests::binary())
            .args(["exec-batch"])
            .arg(&input)
            .arg("-o")
            .arg(&output)
            .args(["--chunk", chunk, "--in-flight", "3"])
            .env("CODEGEN_URL", cluster_url())
            .output()
            .expect("codegen runs")
    };
    let out = run("7");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("40 programs in") && stderr.contains("1 failed, 39 passed"),
        "{stderr}"
    );
    let written = std::fs::read_to_string(&output).expect("output");
    let results: Vec<serde_json::Value> = written
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(results.len(), 40);
    for (i, result) in results.iter().enumerate() {
        if i == 5 {
            assert_eq!(result["id"], "bad");
            assert_eq!(result["exit_code"], 3);
            continue;
        }
        assert_eq!(result["id"], format!("p{i}"), "input order");
        assert_eq!(result["stdout"], format!("{i}\n"));
    }

    // A line the coordinator refuses is named by its line in the file (line 34 is the 33rd
    // program, in the fifth request of 7); it is not run, and every other program is.
    let mut bad: Vec<String> = lines.clone();
    bad[33] = serde_json::json!({"language": "cobol", "code": "x"}).to_string();
    std::fs::write(&input, bad.join("\n")).expect("input written");
    let out = run("7");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let refusal = "line 34: language: unknown language \"cobol\"";
    assert!(stderr.contains(refusal), "{stderr}");
    assert!(
        stderr.contains("1 failed, 1 not_run, 38 passed"),
        "{stderr}"
    );
    let written = std::fs::read_to_string(&output).expect("output");
    let results: Vec<serde_json::Value> = written
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(results.len(), 40);
    // Line 34 has no id: it is labelled with its line number.
    assert_eq!(results[32]["id"], "34", "{:#}", results[32]);
    assert_eq!(results[32]["status"], "not_run");
    assert!(
        results[32]["error"].as_str().unwrap().contains(refusal),
        "{:#}",
        results[32]
    );
    assert_eq!(results[33]["stdout"], "33\n", "the program after it ran");

    // --resume runs only what has no result: the fixed line, and keeps every other line as
    // it was.
    bad[33] = serde_json::json!({"language": "python", "code": "print('again')"}).to_string();
    std::fs::write(&input, bad.join("\n")).expect("input written");
    let resumed = Command::new(tests::binary())
        .args(["exec-batch", "--resume"])
        .arg(&input)
        .arg("-o")
        .arg(&output)
        .env("CODEGEN_URL", cluster_url())
        .output()
        .expect("codegen runs");
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert_eq!(resumed.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("39 of 40 programs already have results") && stderr.contains("running 1"),
        "{stderr}"
    );
    let again = std::fs::read_to_string(&output).expect("output");
    let again: Vec<&str> = again.lines().collect();
    assert_eq!(again.len(), 40);
    for (i, (before, after)) in written.lines().zip(&again).enumerate() {
        if i == 32 {
            let result: serde_json::Value = serde_json::from_str(after).unwrap();
            assert_eq!(
                (&result["id"], &result["stdout"]),
                (&"34".into(), &"again\n".into())
            );
        } else {
            assert_eq!(before, *after, "line {i} kept as it was");
        }
    }
    assert!(
        !output.with_extension("jsonl.partial").exists(),
        "the partial file is gone once the results are in"
    );
}
