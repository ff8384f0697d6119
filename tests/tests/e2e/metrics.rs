//! Metrics that add up: known work driven through every route, then the counters of the
//! coordinator and the worker compared with it (real broker, Redis, Docker; scripted FAKE
//! model).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use tests::Cluster;
use tests::metric_sum as total;

#[tokio::test]
async fn counters_of_jobs_executions_and_requests_add_up_to_the_work_done() {
    let mut cluster = Cluster::new();
    let _model = cluster
        .scripted_model(&tests::root().join("examples/scripted-model.json"))
        .await;
    let _coordinator = cluster.coordinator().await;
    let (_worker, worker) = cluster.worker("worker").await;
    let coordinator = cluster.url();
    let both = [coordinator.as_str(), worker.as_str()];
    let http = cluster.http.clone();

    // Executions: two single ones (one passes, one fails), one through /run_code, a batch of
    // a Python and a Bash program.
    let (status, _) = cluster
        .execute("", json!({"language": "python", "code": "print(1)"}))
        .await;
    assert_eq!(status, 200);
    let (status, failed) = cluster
        .execute(
            "",
            json!({"language": "python", "code": "raise SystemExit(3)"}),
        )
        .await;
    assert_eq!((status, failed["status"].as_str()), (200, Some("failed")));
    let fusion: Value = http
        .post(format!("{coordinator}/run_code"))
        .json(&json!({"language": "python", "code": "print(2)"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(fusion["status"], "Success", "{fusion}");
    let batch: Value = http
        .post(format!("{coordinator}/v1/executions/batch"))
        .json(
            &json!({"items": [{"language": "python", "code": "print(3)"},
                                {"language": "bash", "code": "echo 4"}]}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(batch["done"], 2, "{batch}");

    // Jobs: one that runs, the same again (the cache answers), one cancelled (or ended
    // first, whichever wins: it ends once either way).
    let sieve = json!({"instruction": "Find all primes up to n with the sieve of Eratosthenes, and sum them.", "language": "python"});
    let (status, first) = cluster.submit_job(sieve.clone()).await;
    assert_eq!(status, 202, "{first}");
    let first = first["job_id"].as_str().unwrap().to_owned();
    let ran = cluster.wait_job(&first, Duration::from_secs(600)).await;
    assert_eq!(ran["status"], "succeeded", "{ran:#}");
    let (status, cached) = cluster.submit_job(sieve).await;
    assert_eq!(status, 200, "{cached}");
    let (status, third) = cluster
        .submit_job(json!({"instruction": "Check whether a string is a palindrome."}))
        .await;
    assert_eq!(status, 202, "{third}");
    let third = third["job_id"].as_str().unwrap().to_owned();
    let cancel = http
        .delete(format!("{coordinator}/v1/jobs/{third}"))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16();
    assert!(cancel == 200 || cancel == 409, "{cancel}");
    // (The API is open: the key is not looked at.)
    let third_status = cluster.wait_ended_as(&third, "-").await["status"]
        .as_str()
        .unwrap()
        .to_owned();

    // Jobs: submitted once each, ended once each, by whichever process ended them.
    assert_eq!(
        total(
            &http,
            &both,
            "codegen_jobs_submitted_total",
            &[("cache", "miss")]
        )
        .await,
        2.0
    );
    assert_eq!(
        total(
            &http,
            &both,
            "codegen_jobs_submitted_total",
            &[("cache", "hit")]
        )
        .await,
        1.0
    );
    let mut ended: BTreeMap<&str, f64> = BTreeMap::new();
    *ended.entry("succeeded").or_default() += 2.0;
    *ended.entry(third_status.as_str()).or_default() += 1.0;
    for status in ["succeeded", "failed", "cancelled"] {
        let counted = total(
            &http,
            &both,
            "codegen_jobs_finished_total",
            &[("status", status)],
        )
        .await;
        assert_eq!(
            counted,
            ended.get(status).copied().unwrap_or(0.0),
            "jobs finished {status}"
        );
    }

    // Executions: by route when accepted, by verdict where the verdict was stored.
    for (language, route, expected) in [
        ("python", "/v1/executions", 2.0),
        ("python", "/run_code", 1.0),
        ("python", "/v1/executions/batch", 1.0),
        ("bash", "/v1/executions/batch", 1.0),
    ] {
        let labels = [("language", language), ("route", route)];
        let counted = total(&http, &both, "codegen_executions_submitted_total", &labels).await;
        assert_eq!(counted, expected, "{language} through {route}");
    }
    for (language, status, expected) in [
        ("python", "passed", 3.0),
        ("python", "failed", 1.0),
        ("bash", "passed", 1.0),
    ] {
        let labels = [("language", language), ("status", status)];
        let counted = total(&http, &both, "codegen_executions_finished_total", &labels).await;
        assert_eq!(counted, expected, "{language} {status}");
    }
    assert_eq!(
        total(&http, &both, "codegen_executions_finished_total", &[]).await,
        total(&http, &both, "codegen_executions_submitted_total", &[]).await,
        "every execution accepted has one verdict"
    );

    // Sandbox runs: one per execution, with its verdict; the jobs' runs (cases, tests, the
    // final run) beside them; and every run is one the language's pool served, warm or fresh
    // (a retried run is two of the pool's and one verdict).
    let worker_only = [worker.as_str()];
    for (language, status, expected) in [
        ("python", "passed", 3.0),
        ("python", "failed", 1.0),
        ("bash", "passed", 1.0),
    ] {
        let labels = [
            ("work", "execution"),
            ("language", language),
            ("status", status),
        ];
        let counted = total(&http, &worker_only, "codegen_sandbox_runs_total", &labels).await;
        assert_eq!(
            counted, expected,
            "sandbox runs of {language} executions {status}"
        );
    }
    let job_runs = total(
        &http,
        &worker_only,
        "codegen_sandbox_runs_total",
        &[("work", "job"), ("language", "python")],
    )
    .await;
    assert!(
        job_runs >= 1.0,
        "the job that ran ran in the sandbox: {job_runs}"
    );
    for language in ["python", "bash"] {
        let of = |name: &'static str| {
            let (http, worker) = (http.clone(), worker.clone());
            async move { total(&http, &[worker.as_str()], name, &[("language", language)]).await }
        };
        let served = of("codegen_sandbox_pooled_runs_total").await
            + of("codegen_sandbox_fresh_runs_total").await
            - of("codegen_sandbox_retries_total").await;
        assert_eq!(
            served,
            of("codegen_sandbox_runs_total").await,
            "{language}: every run the pool served has one verdict"
        );
        assert!(
            of("codegen_sandbox_pool_size").await >= 1.0,
            "{language} pool size"
        );
        assert!(of("codegen_sandbox_pool_wait_seconds_total").await >= 0.0);
    }

    // Requests, by method, route and status code.
    let requests = |method: &'static str, route: &'static str, code: String| {
        let (http, coordinator) = (http.clone(), coordinator.clone());
        async move {
            let labels = [
                ("http_request_method", method),
                ("http_route", route),
                ("http_response_status_code", code.as_str()),
            ];
            let name = "http_server_request_duration_seconds_count";
            total(&http, &[coordinator.as_str()], name, &labels).await
        }
    };
    assert_eq!(requests("POST", "/v1/jobs", "202".into()).await, 2.0);
    assert_eq!(requests("POST", "/v1/jobs", "200".into()).await, 1.0);
    assert_eq!(requests("POST", "/v1/executions", "200".into()).await, 2.0);
    assert_eq!(requests("POST", "/run_code", "200".into()).await, 1.0);
    assert_eq!(
        requests("DELETE", "/v1/jobs/{id}", cancel.to_string()).await,
        1.0
    );
    assert!(requests("GET", "/v1/jobs/{id}", "200".into()).await >= 1.0);

    // Every process says what it is and what it uses.
    for (base, component) in [
        (coordinator.as_str(), "coordinator"),
        (worker.as_str(), "worker"),
    ] {
        let labels = [
            ("component", component),
            ("version", env!("CARGO_PKG_VERSION")),
        ];
        assert_eq!(
            total(&http, &[base], "codegen_build_info", &labels).await,
            1.0
        );
        // (Its CPU counts whole seconds, which a quiet coordinator may not have used yet.)
        assert!(total(&http, &[base], "process_start_time_seconds", &[]).await > 0.0);
        assert!(total(&http, &[base], "process_resident_memory_bytes", &[]).await > 0.0);
    }
    cluster.cleanup().await;
}
