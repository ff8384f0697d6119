//! The deployment files hold together: the alert rules pass promtool's checks and their own
//! unit tests, every metric a rule or dashboard panel names is exported by a running
//! coordinator or worker (a renamed metric would otherwise leave an alert silently empty), and
//! the compose stack's dashboard page shows every panel's query with data from a real
//! Prometheus that scraped them.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use tests::prometheus::Prometheus;
use tests::{Cluster, root};

/// promtool from `PROMTOOL`, the copy `scripts/test` extracts from Debian's prometheus package,
/// or PATH.
fn promtool() -> PathBuf {
    if let Some(path) = std::env::var_os("PROMTOOL") {
        return path.into();
    }
    let extracted = root().join(".cluster/tools/prometheus/usr/bin/promtool");
    if extracted.exists() {
        return extracted;
    }
    "promtool".into()
}

fn run(command: &mut Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e} (scripts/test installs promtool)"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{command:?} failed:\n{text}");
    text
}

#[test]
fn the_alert_rules_pass_promtool_and_their_unit_tests() {
    let dir = root().join("deploy/prometheus");
    let checked = run(Command::new(promtool())
        .args(["check", "rules", "alerts.yml"])
        .current_dir(&dir));
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = run(Command::new(promtool())
        .args(["test", "rules", "alerts_test.yml"])
        .current_dir(&dir));
    assert!(tested.contains("SUCCESS"), "{tested}");
}

#[test]
fn every_dashboard_query_parses_as_promql() {
    // promtool parses expressions only inside rule files: one recording rule per panel query.
    let dir = tempfile::tempdir().unwrap();
    let mut rules = String::from("groups:\n  - name: dashboards\n    rules:\n");
    let mut count = 0;
    for entry in std::fs::read_dir(root().join("deploy/grafana")).unwrap() {
        let dashboard: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap()).unwrap();
        for panel in dashboard["panels"].as_array().unwrap() {
            for target in panel["targets"].as_array().unwrap() {
                count += 1;
                let expr = serde_json::to_string(&target["expr"]).unwrap();
                rules.push_str(&format!(
                    "      - record: dashboard:query_{count}\n        expr: {expr}\n"
                ));
            }
        }
    }
    assert!(count >= 10, "only {count} dashboard queries");
    let file = dir.path().join("dashboards.yml");
    std::fs::write(&file, rules).unwrap();
    let checked = run(Command::new(promtool())
        .arg("check")
        .arg("rules")
        .arg(&file));
    assert!(
        checked.contains(&format!("SUCCESS: {count} rules found")),
        "{checked}"
    );
}

/// Every `codegen_*` name in the files, histogram suffixes removed.
fn names_in(files: &[PathBuf]) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        let mut rest = text.as_str();
        while let Some(at) = rest.find("codegen_") {
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            let name = &tail[..end];
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(name);
            names.insert(base.to_owned());
            rest = &tail[end..];
        }
    }
    names
}

/// The metric families a /metrics answer declares.
fn exported(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_rules_and_dashboards_name_is_exported_by_a_running_process() {
    let mut files = vec![root().join("deploy/prometheus/alerts.yml")];
    let grafana = root().join("deploy/grafana");
    if let Ok(entries) = std::fs::read_dir(&grafana) {
        files.extend(entries.map(|e| e.unwrap().path()));
    }
    let wanted = names_in(&files);
    assert!(
        wanted.len() >= 5,
        "too few metrics found in {files:?}: {wanted:?}"
    );

    // A coordinator and a worker that have done one job and one execution.
    let mut cluster = Cluster::new();
    let _model = cluster
        .scripted_model(&root().join("examples/scripted-model.json"))
        .await;
    let _coordinator = cluster.coordinator().await;
    let (_worker, worker_ops) = cluster.worker("worker").await;
    let (status, body) = cluster
        .submit_job(json!({"instruction": "sieve, then sum the primes"}))
        .await;
    assert_eq!(status, 202, "{body}");
    let job = cluster
        .wait_job(body["job_id"].as_str().unwrap(), Duration::from_secs(600))
        .await;
    assert_eq!(job["status"], "succeeded", "{job}");
    let (status, body) = cluster
        .execute("", json!({"language": "python", "code": "print(1)"}))
        .await;
    assert_eq!(status, 200, "{body}");

    let mut have = BTreeSet::new();
    for url in [cluster.url(), worker_ops.clone()] {
        let text = cluster
            .http
            .get(format!("{url}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        have.extend(exported(&text));
    }
    let missing: Vec<_> = wanted.difference(&have).collect();
    assert!(
        missing.is_empty(),
        "named in {files:?} but exported by no process: {missing:?}\nexported: {have:?}"
    );
    // And the operations page documents every metric of ours a process exports (a family's
    // `_`-suffixed siblings written as `_idle` after its first name count).
    let page = std::fs::read_to_string(root().join("docs/operations.md")).unwrap();
    let undocumented: Vec<_> = have
        .iter()
        .filter(|name| name.starts_with("codegen_"))
        .filter(|name| !documented(&page, name))
        .collect();
    assert!(
        undocumented.is_empty(),
        "exported but not in docs/operations.md: {undocumented:?}"
    );

    // The dashboard page a Prometheus serves (the compose stack's, generated from the Grafana
    // JSON) holds exactly the dashboard's queries, and once it has scraped the two processes,
    // each query of ours shows data there (RabbitMQ's own are not scraped here).
    let targets: Vec<String> = [cluster.url(), worker_ops.clone()]
        .iter()
        .map(|url| url.trim_start_matches("http://").to_owned())
        .collect();
    let prometheus = tokio::task::block_in_place(|| {
        Prometheus::start(&targets.iter().map(String::as_str).collect::<Vec<_>>())
    });
    let queries = dashboard_queries();
    // Bounds a failure only: the first scrapes come within seconds.
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let page = cluster
            .http
            .get(format!("{}/consoles/codegen.html", prometheus.url()))
            .send()
            .await
            .unwrap();
        assert_eq!(page.status(), 200, "the console page renders");
        let tables = console_tables(&page.text().await.unwrap());
        let shown: BTreeSet<String> = tables.iter().map(|(expr, _)| expr.clone()).collect();
        assert_eq!(
            shown, queries,
            "the console page and the Grafana dashboard differ: run deploy/prometheus/consoles/generate"
        );
        let empty: Vec<_> = tables
            .iter()
            .filter(|(expr, data)| !data && !expr.contains("rabbitmq_"))
            .map(|(expr, _)| expr)
            .collect();
        if empty.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "queries with no data on the console page: {empty:#?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    cluster.cleanup().await;
}

/// Whether the page names `name`: whole, or as a suffix (`_live`) in a table cell that names
/// a sibling of the same family first (`codegen_sandbox_pool_size`, `_live`).
fn documented(page: &str, name: &str) -> bool {
    if page.contains(&format!("`{name}`")) {
        return true;
    }
    page.lines().any(|line| {
        line.split('|').any(|cell| {
            let names: Vec<&str> = cell.split('`').skip(1).step_by(2).collect();
            let mut family = None;
            names.iter().any(|n| {
                if let Some(suffix) = n.strip_prefix('_') {
                    family.is_some_and(|f: &str| {
                        (1..f.len())
                            .filter(|&i| f.as_bytes()[i] == b'_')
                            .any(|i| format!("{}_{suffix}", &f[..i]) == name)
                    })
                } else {
                    family = Some(n);
                    false
                }
            })
        })
    })
}

/// Every query of the Grafana dashboards, its queue prefix variable at its default.
fn dashboard_queries() -> BTreeSet<String> {
    let mut queries = BTreeSet::new();
    for entry in std::fs::read_dir(root().join("deploy/grafana")).unwrap() {
        let dashboard: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap()).unwrap();
        for panel in dashboard["panels"].as_array().unwrap() {
            for target in panel["targets"].as_array().unwrap() {
                let expr = target["expr"].as_str().unwrap();
                queries.insert(expr.replace("$prefix", "codegen"));
            }
        }
    }
    queries
}

/// The console page's tables of series now: each query, and whether it showed any series.
fn console_tables(page: &str) -> Vec<(String, bool)> {
    page.split(r#"<table class="table table-sm now" data-expr=""#)
        .skip(1)
        .map(|table| {
            let (expr, rest) = table.split_once('"').unwrap();
            let rows = rest.split("</table>").next().unwrap();
            (unescape(expr), rows.contains(r#"class="value""#))
        })
        .collect()
}

/// HTML character references, as html/template writes them in an attribute.
fn unescape(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        let (reference, tail) = rest[at + 1..].split_once(';').unwrap();
        out.push(match reference {
            "amp" => '&',
            "lt" => '<',
            "gt" => '>',
            "quot" => '"',
            numeric => numeric
                .strip_prefix('#')
                .and_then(|n| n.parse::<u32>().ok())
                .and_then(char::from_u32)
                .unwrap_or_else(|| panic!("unknown character reference &{numeric};")),
        });
        rest = tail;
    }
    out.push_str(rest);
    out
}
