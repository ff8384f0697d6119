//! Concurrency and rate limits, the scripted model, its HTTP endpoint, and record/replay.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::sync::Arc;
use std::time::Duration;

use model::record::{Recorder, Replayer};
use model::scripted::{Counting, Script, Scripted};
use model::{Error, Metrics, Model, Options, Phase, Prompt, Provider, ProviderKind};
use proto::generation::{FunctionSpecs, Implementation};
use serde_json::json;
use tokio::time::Instant;

fn slow(delay: Duration) -> Arc<Counting> {
    throttling(delay, usize::MAX)
}

fn throttling(delay: Duration, above: usize) -> Arc<Counting> {
    Arc::new(Counting::new(delay, above, Duration::from_millis(30)))
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
    assert_eq!(provider.calls(), 6);
    assert_eq!(provider.peak(), 2);

    // A fixed limit (the adaptive one starts lower and grows from the server's answers).
    let unlimited = slow(Duration::from_millis(50));
    let options = Options {
        max_concurrency: 64,
        adaptive_concurrency: false,
        ..Options::default()
    };
    let model = Model::new(unlimited.clone(), options, Metrics::unregistered().unwrap());
    run_parallel(&model, 6).await;
    assert_eq!(
        unlimited.peak(),
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
    assert_eq!(provider.calls(), 8);
}

#[tokio::test]
async fn a_429_costs_time_not_an_attempt() {
    // The server takes 2 at once and the client allows 6: the extra calls are throttled,
    // wait for the pause the server asked for, and all succeed (`max_attempts` is 1, so a
    // throttled call counted as a failed attempt would fail its generation).
    let provider = throttling(Duration::from_millis(40), 2);
    let options = Options {
        max_concurrency: 6,
        max_attempts: 1,
        ..Options::default()
    };
    let model = Model::new(provider.clone(), options, Metrics::unregistered().unwrap());
    run_parallel(&model, 12).await;
    assert!(provider.throttled() > 0, "the server never pushed back");
    assert_eq!(provider.peak(), 3, "2 served plus the one turned away");
}

#[tokio::test]
async fn tokens_per_minute_delay_calls_past_the_budget() {
    // Prompts of about 250 tokens against 600 a minute: two pass at once (the burst), the
    // third waits for the budget to refill (about 25 s for 250 tokens), so it is not started
    // within a second.
    let provider = slow(Duration::ZERO);
    let options = Options {
        tokens_per_minute: 600,
        ..Options::default()
    };
    let model = Model::new(provider.clone(), options, Metrics::unregistered().unwrap());
    let long = Prompt {
        system: "s".repeat(500),
        user: "u".repeat(500),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    for _ in 0..2 {
        model
            .generate::<Implementation>(Phase::Implement, Some("f"), &long, deadline)
            .await
            .unwrap();
    }
    let third = tokio::time::timeout(
        Duration::from_secs(1),
        model.generate::<Implementation>(Phase::Implement, Some("f"), &long, deadline),
    )
    .await;
    assert!(
        third.is_err(),
        "the third call should wait for the token budget"
    );
    assert_eq!(provider.calls(), 2);
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
        let spec = match entry.phase {
            Phase::Plan => spec_for::<FunctionSpecs>("function_specs", true),
            Phase::Tests => spec_for::<TestCases>("test_cases", false),
            Phase::Implement | Phase::Repair => spec_for::<Implementation>("implementation", true),
            // An agent's answers are tool calls, not a schema's.
            Phase::Agent => {
                assert!(entry.tool_calls.is_some(), "{entry:?}");
                continue;
            }
        };
        let answer = entry
            .answer
            .as_ref()
            .expect("the example uses structured answers");
        validate(&spec, answer)
            .unwrap_or_else(|e| panic!("{:?} {:?}: {e}", entry.phase, entry.function));
    }
}
