//! The cluster that `scripts/cluster up` started (the README's quickstart), driven through the
//! `codegen exec` client as a user would.

use std::process::Command;

fn cluster_url() -> String {
    std::env::var("CODEGEN_CLUSTER_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into())
}

fn exec(program: &str, extra: &[&str]) -> (i32, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("program.py");
    std::fs::write(&file, program).expect("program written");
    let output = Command::new(tests::binary())
        .arg("exec")
        .arg(&file)
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

    let (code, _, stderr) = exec("print(1)", &["--language", "cobol"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("422") && stderr.contains("language"),
        "{stderr}"
    );
}
