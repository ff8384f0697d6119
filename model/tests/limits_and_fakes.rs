//! Concurrency and rate limits, the scripted model, its HTTP endpoint, and record/replay.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use model::record::{Recorder, Replayer};
use model::scripted::{Script, Scripted};
use model::{
    CallError, ChatRequest, ChatResponse, Error, Metrics, Model, Options, Phase, Prompt, Provider,
    ProviderKind, Usage,
};
use proto::generation::{FunctionSpecs, Implementation};
use serde_json::json;
use tokio::time::Instant;

/// A provider that takes `delay` per call and records the most calls it saw at once.
struct Slow {
    delay: Duration,
    now: AtomicUsize,
    peak: AtomicUsize,
    calls: AtomicUsize,
}

#[async_trait]
impl Provider for Slow {
    fn name(&self) -> &str {
        "slow-test-double"
    }
    fn model(&self) -> &str {
        "none"
    }
    async fn chat(&self, _: &ChatRequest) -> Result<ChatResponse, CallError> {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
        Ok(ChatResponse {
            text: r#"{"code": "x = 1", "analysis": null}"#.into(),
            json: None,
            usage: Usage::default(),
        })
    }
}

fn slow(delay: Duration) -> Arc<Slow> {
    Arc::new(Slow {
        delay,
        now: AtomicUsize::new(0),
        peak: AtomicUsize::new(0),
        calls: AtomicUsize::new(0),
    })
}

fn prompt() -> Prompt {
    Prompt {
        system: "s".into(),
        user: "u".into(),
    }
}

async fn run_parallel(model: &Model, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let calls = (0..n).map(|i| {
        let model = model.clone();
        async move {
            let function = format!("f{i}");
            model
                .generate::<Implementation>(Phase::Implement, Some(&function), &prompt(), deadline)
                .await
                .unwrap();
        }
    });
    futures::future::join_all(calls).await;
}

#[tokio::test]
async fn concurrency_limit_caps_calls_in_flight() {
    let provider = slow(Duration::from_millis(50));
    let options = Options {
        max_concurrency: 2,
        ..Options::default()
    };
    let model = Model::new(provider.clone(), options, Metrics::unregistered().unwrap());
    run_parallel(&model, 6).await;
    assert_eq!(provider.calls.load(Ordering::SeqCst), 6);
    assert_eq!(provider.peak.load(Ordering::SeqCst), 2);

    let unlimited = slow(Duration::from_millis(50));
    let options = Options {
        max_concurrency: 64,
        ..Options::default()
    };
    let model = Model::new(unlimited.clone(), options, Metrics::unregistered().unwrap());
    run_parallel(&model, 6).await;
    assert_eq!(
        unlimited.peak.load(Ordering::SeqCst),
        6,
        "the limit, not the test, held calls back"
    );
}

#[tokio::test]
async fn rate_limit_spaces_calls() {
    let provider = slow(Duration::ZERO);
    let options = Options {
        requests_per_second: 4,
        ..Options::default()
    };
    let model = Model::new(provider.clone(), options, Metrics::unregistered().unwrap());
    let started = Instant::now();
    run_parallel(&model, 8).await;
    // A burst of 4, then one every 250 ms: the 8th starts after about a second.
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(900), "{elapsed:?}");
    assert_eq!(provider.calls.load(Ordering::SeqCst), 8);
}

fn script() -> Script {
    serde_json::from_value(json!({"answers": [
        {"phase": "plan", "answer": {"functions": [{"name": "sieve", "purpose": "primes up to n",
            "inputs": [{"name": "n", "type": "int"}], "outputs": {"type": "list[int]", "description": "primes"},
            "dependencies": [], "complexity": "simple"}]}},
        {"phase": "implement", "function": "sieve", "text": "```python\nnot json\n```\n{\"code\": \"def sieve(n): return []\", \"analysis\": null}"},
    ]}))
    .unwrap()
}

#[tokio::test]
async fn the_scripted_model_answers_by_phase_and_function_and_says_what_it_is() {
    let scripted: Arc<dyn Provider> = Arc::new(Scripted::new(script()).unwrap());
    assert_eq!(scripted.name(), "scripted");
    let model = Model::new(
        scripted,
        Options::default(),
        Metrics::unregistered().unwrap(),
    );
    assert_eq!(model.describe(), "scripted/scripted");
    let deadline = Instant::now() + Duration::from_secs(5);
    let plan = model
        .generate::<FunctionSpecs>(Phase::Plan, None, &prompt(), deadline)
        .await
        .unwrap();
    assert_eq!(plan.value.functions[0].name, "sieve");
    let code = model
        .generate::<Implementation>(Phase::Implement, Some("sieve"), &prompt(), deadline)
        .await
        .unwrap();
    assert!(code.value.code.starts_with("def sieve"));
    let missing = model
        .generate::<Implementation>(Phase::Repair, Some("sieve"), &prompt(), deadline)
        .await
        .unwrap_err();
    assert!(
        missing.to_string().contains("no answer for phase repair"),
        "{missing}"
    );
}

#[tokio::test]
async fn scripted_answers_over_http_drive_the_real_openai_provider() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = model::server::router(Arc::new(Scripted::new(script()).unwrap()));
    tokio::spawn(async move { axum::serve(listener, router).await });
    let options = Options {
        provider: ProviderKind::Openai,
        base_url: format!("http://{addr}/v1"),
        api_key: None,
        ..Options::default()
    };
    let model = Model::from_options(&options, Metrics::unregistered().unwrap()).unwrap();
    assert_eq!(model.describe(), "openai/gpt-4o-mini");
    let deadline = Instant::now() + Duration::from_secs(5);
    let plan = model
        .generate::<FunctionSpecs>(Phase::Plan, None, &prompt(), deadline)
        .await
        .unwrap();
    assert_eq!(plan.value.functions.len(), 1);
    assert!(
        plan.usage.completion_tokens > 0,
        "the endpoint reports (approximate) usage"
    );
    let error = model
        .generate::<FunctionSpecs>(Phase::Tests, Some("nope"), &prompt(), deadline)
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::Rejected { status: 404, .. }),
        "{error}"
    );
}

#[tokio::test]
async fn recorded_exchanges_replay_and_a_miss_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let scripted: Arc<dyn Provider> = Arc::new(Scripted::new(script()).unwrap());
    let recorder: Arc<dyn Provider> =
        Arc::new(Recorder::new(scripted, dir.path().to_path_buf()).unwrap());
    let deadline = Instant::now() + Duration::from_secs(5);
    let recorded = Model::new(
        recorder,
        Options::default(),
        Metrics::unregistered().unwrap(),
    )
    .generate::<FunctionSpecs>(Phase::Plan, None, &prompt(), deadline)
    .await
    .unwrap();
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

    let options = Options {
        replay_dir: Some(dir.path().to_path_buf()),
        ..Options::default()
    };
    let replay = Model::from_options(&options, Metrics::unregistered().unwrap()).unwrap();
    assert!(replay.describe().starts_with("replay/"));
    let replayed = replay
        .generate::<FunctionSpecs>(Phase::Plan, None, &prompt(), deadline)
        .await
        .unwrap();
    assert_eq!(replayed.value, recorded.value);

    let other = Prompt {
        system: "s".into(),
        user: "a different request".into(),
    };
    let miss = replay
        .generate::<FunctionSpecs>(Phase::Plan, None, &other, deadline)
        .await
        .unwrap_err();
    assert!(matches!(miss, Error::ReplayMiss(_)), "{miss}");
    assert!(
        miss.to_string()
            .contains("no recorded answer for phase plan"),
        "{miss}"
    );
    let _ = Replayer::new(dir.path().to_path_buf(), "m");
}

#[test]
fn the_example_script_answers_follow_their_schemas() {
    use model::schema::{spec_for, validate};
    use proto::generation::TestCases;
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/scripted-model.json");
    let script: Script = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(Scripted::new(script.clone()).is_ok());
    for entry in &script.answers {
        let answer = entry
            .answer
            .as_ref()
            .expect("the example uses structured answers");
        let spec = match entry.phase {
            Phase::Plan => spec_for::<FunctionSpecs>("function_specs", true),
            Phase::Tests => spec_for::<TestCases>("test_cases", false),
            Phase::Implement | Phase::Repair => spec_for::<Implementation>("implementation", true),
        };
        validate(&spec, answer)
            .unwrap_or_else(|e| panic!("{:?} {:?}: {e}", entry.phase, entry.function));
    }
}
