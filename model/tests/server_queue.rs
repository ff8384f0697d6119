//! A server that reports its own queue, as vLLM does on `/metrics`: a FAKE OpenAI-compatible
//! server over real HTTP that answers every call in the same time and says it runs two
//! requests and queues more (other clients' load, which no answer's time shows here). The
//! adaptive limit, which starts above two and would grow on those answers alone, reads the
//! report, drops to two and stays at most there; the same server without `/metrics` is asked
//! once and never again, and its limit is left to the answers' times.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::{get, post};
use model::{Metrics, Model, Options, Phase, Prompt, Provider};
use proto::generation::Implementation;
use serde_json::json;
use tokio::time::Instant;

/// What the FAKE server runs, as its report says.
const RUNNING: u32 = 2;

/// A FAKE server whose `/metrics` reports `RUNNING` running and 5 waiting, or has no
/// `/metrics` at all (`report` false); its address, and how often `/metrics` was asked.
async fn serve(report: bool) -> (String, Arc<AtomicU32>) {
    let asked = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&asked);
    let chat = || async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        axum::Json(json!({
            "id": "x", "object": "chat.completion", "model": "fake-vllm",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant",
                "content": r#"{"code": "def f():\n    return 1", "analysis": null}"#}}],
            "usage": {"prompt_tokens": 40, "completion_tokens": 30, "total_tokens": 70}
        }))
    };
    let metrics = move || {
        counted.fetch_add(1, Ordering::SeqCst);
        async move {
            if !report {
                return (StatusCode::NOT_FOUND, String::new());
            }
            let body = format!(
                "# HELP vllm:num_requests_running Number of requests currently running on GPU.\n\
                 # TYPE vllm:num_requests_running gauge\n\
                 vllm:num_requests_running{{model_name=\"fake-vllm\"}} {RUNNING}.0\n\
                 # HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n\
                 # TYPE vllm:num_requests_waiting gauge\n\
                 vllm:num_requests_waiting{{model_name=\"fake-vllm\"}} 5.0\n"
            );
            (StatusCode::OK, body)
        }
    };
    let app = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/metrics", get(metrics))
        .route(
            "/v1/models",
            get(|| async { axum::Json(json!({"data": []})) }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, asked)
}

/// 16 callers, 8 calls each, one after another, against the server at `url`; the model and
/// its metrics after.
async fn run(url: &str) -> (Model, Metrics) {
    let options = Options {
        base_url: format!("{url}/v1"),
        model: "fake-vllm".into(),
        timeout: Duration::from_secs(120),
        max_concurrency: 64,
        ..Options::default()
    };
    assert!(options.adaptive_concurrency, "the default");
    let provider: Arc<dyn Provider> = Arc::new(model::openai::OpenAi::new(&options).unwrap());
    let metrics = Metrics::unregistered().unwrap();
    let model = Model::new(provider, options, metrics.clone());
    assert!(model.concurrency().0 > RUNNING, "it starts above {RUNNING}");
    let prompt = Prompt {
        system: "s".into(),
        user: "u".into(),
    };
    let callers: Vec<_> = (0..16)
        .map(|_| {
            let model = model.clone();
            let prompt = prompt.clone();
            tokio::spawn(async move {
                for _ in 0..8 {
                    let deadline = Instant::now() + Duration::from_secs(600);
                    model
                        .generate::<Implementation>(Phase::Implement, None, &prompt, deadline)
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for caller in callers {
        caller.await.unwrap();
    }
    (model, metrics)
}

fn queued_changes(metrics: &Metrics) -> u64 {
    metrics
        .limit_changes
        .with_label_values(&["openai", "fake-vllm", "queued"])
        .get()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_report_of_its_queue_holds_the_limit_at_what_it_runs() {
    let (url, asked) = serve(true).await;
    let (model, metrics) = run(&url).await;
    let (limit, state) = model.concurrency();
    let state = state.unwrap();
    assert!(queued_changes(&metrics) >= 1, "{state:?}");
    // Never above what the server runs (a loaded machine's slower answers may cut it further).
    assert!((1..=RUNNING).contains(&limit), "{limit}: {state:?}");
    assert!(state.waiting_ms > 0, "{state:?}");

    // Asked again while it reports (every 2 s; the run lasts several at a limit of two).
    assert!(
        asked.load(Ordering::SeqCst) >= 2,
        "{}",
        asked.load(Ordering::SeqCst)
    );

    // The same server without /metrics: asked once, never again, nothing held.
    let (url, asked) = serve(false).await;
    let (model, metrics) = run(&url).await;
    let state = model.concurrency().1.unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    assert_eq!(queued_changes(&metrics), 0, "{state:?}");
    assert_eq!(state.waiting_ms, 0, "{state:?}");
}
