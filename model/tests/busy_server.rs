//! A one-slot server that answers nothing else while it writes an answer (as llama-cpp-python's
//! server does): a FAKE OpenAI-compatible server over real HTTP whose model list waits behind
//! the call in progress. Its probe going unanswered while it holds one of this process's
//! calls, sent within a call's deadline, is a slow server, not a down one; the same silence
//! with no call out and nothing ever answered is down.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use model::{Metrics, Model, Options, Phase, Prompt, Provider};
use proto::generation::Implementation;
use serde_json::json;
use tokio::sync::{Mutex, Notify};
use tokio::time::Instant;

/// The server's one slot, and what lets its answer go.
struct Fake {
    slot: Mutex<()>,
    release: Notify,
    /// Probes wait for the slot (false), or are never answered at all (true).
    silent: bool,
}

async fn serve(silent: bool) -> (String, Arc<Fake>) {
    let fake = Arc::new(Fake {
        slot: Mutex::new(()),
        release: Notify::new(),
        silent,
    });
    let chat = {
        let fake = Arc::clone(&fake);
        move || {
            let fake = Arc::clone(&fake);
            async move {
                let _slot = fake.slot.lock().await;
                fake.release.notified().await;
                axum::Json(json!({
                    "id": "x", "object": "chat.completion", "model": "fake-one-slot",
                    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant",
                        "content": r#"{"code": "def f():\n    return 1", "analysis": null}"#}}],
                    "usage": {"prompt_tokens": 40, "completion_tokens": 30, "total_tokens": 70}
                }))
            }
        }
    };
    let models = {
        let fake = Arc::clone(&fake);
        move || {
            let fake = Arc::clone(&fake);
            async move {
                if fake.silent {
                    std::future::pending::<()>().await;
                }
                let _slot = fake.slot.lock().await;
                axum::Json(
                    json!({"object": "list", "data": [{"id": "fake-one-slot", "object": "model"}]}),
                )
            }
        }
    };
    let app = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/models", get(models));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, fake)
}

fn client(url: &str) -> Model {
    let options = Options {
        base_url: format!("{url}/v1"),
        model: "fake-one-slot".into(),
        timeout: Duration::from_secs(600),
        ..Options::default()
    };
    let provider: Arc<dyn Provider> = Arc::new(model::openai::OpenAi::new(&options).unwrap());
    Model::new(provider, options, Metrics::unregistered().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_busy_with_our_call_is_slow_not_down_and_a_silent_idle_one_is_down() {
    let (url, fake) = serve(false).await;
    let model = client(&url);
    let call = {
        let model = model.clone();
        tokio::spawn(async move {
            let prompt = Prompt {
                system: "s".into(),
                user: "u".into(),
            };
            let deadline = Instant::now() + Duration::from_secs(600);
            model
                .generate::<Implementation>(Phase::Implement, None, &prompt, deadline)
                .await
        })
    };
    // The call holds the slot (the server got it: its lock is taken).
    let deadline = Instant::now() + Duration::from_secs(120);
    while fake.slot.try_lock().is_ok() {
        assert!(
            Instant::now() < deadline,
            "the call never reached the server"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Nothing answered yet, the probe waits behind the call: slow, not down.
    model.probe().await.unwrap();
    fake.release.notify_one();
    call.await.unwrap().unwrap();
    // Idle again, the server answers its probe itself.
    model.probe().await.unwrap();

    // A server that answers no probe, with no call out and nothing answered: down.
    let (url, _silent) = serve(true).await;
    let error = client(&url).probe().await.unwrap_err();
    assert!(
        error.contains("/v1/models") && error.contains("timed out"),
        "{error}"
    );
}
