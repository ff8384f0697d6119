//! The HTTP providers against wiremock: request shapes, every failure class, the JSON
//! fallback and invalid answers.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::sync::Arc;
use std::time::Duration;

use model::anthropic::Anthropic;
use model::openai::OpenAi;
use model::{Error, Metrics, Model, Options, Phase, Prompt, Provider, StructuredOutput};
use proto::generation::{Implementation, TestCases};
use serde_json::{Value, json};
use tokio::time::Instant;
use wiremock::matchers::{body_partial_json, header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn options(server: &MockServer) -> Options {
    Options {
        base_url: format!("{}/v1", server.uri()),
        api_key: Some("test-key".into()),
        model: "test-model".into(),
        timeout: Duration::from_secs(5),
        max_attempts: 3,
        min_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
        max_answer_attempts: 2,
        // These read every request the server got: the adaptive limit's one question for
        // the server's slots (`/props`) is tested where the limit is.
        adaptive_concurrency: false,
        ..Options::default()
    }
}

fn openai(options: &Options) -> Model {
    let provider: Arc<dyn Provider> = Arc::new(OpenAi::new(options).unwrap());
    Model::new(provider, options.clone(), Metrics::unregistered().unwrap())
}

fn prompt() -> Prompt {
    Prompt {
        system: "system text".into(),
        user: "write sieve".into(),
    }
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(20)
}

fn chat_ok(content: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "id": "x", "object": "chat.completion", "model": "test-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    }))
}

const IMPLEMENTATION: &str = r#"{"code": "def sieve(n):\n    return []", "analysis": null}"#;

async fn implement(model: &Model) -> Result<model::Generated<Implementation>, Error> {
    model
        .generate::<Implementation>(Phase::Implement, Some("sieve"), &prompt(), soon())
        .await
}

#[tokio::test]
async fn openai_request_carries_the_named_schema_and_usage_is_counted() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(header("authorization", "Bearer test-key"))
        .and(header("x-codegen-phase", "implement"))
        .and(header("x-codegen-function", "sieve"))
        .and(body_partial_json(json!({
            "model": "test-model",
            "response_format": {"type": "json_schema", "json_schema": {"name": "implementation", "strict": true}},
            "messages": [{"role": "system", "content": "system text"}, {"role": "user", "content": "write sieve"}],
        })))
        .respond_with(chat_ok(IMPLEMENTATION))
        .expect(1)
        .mount(&server)
        .await;
    let generated = implement(&openai(&options(&server))).await.unwrap();
    assert!(generated.value.code.starts_with("def sieve"));
    assert_eq!((generated.calls, generated.answers), (1, 1));
    assert_eq!(generated.usage.prompt_tokens, 11);
    assert_eq!(generated.usage.completion_tokens, 7);
}

#[tokio::test]
async fn test_cases_schema_is_not_strict_because_inputs_are_free_form() {
    let server = MockServer::start().await;
    Mock::given(body_partial_json(json!({"response_format": {"json_schema": {"name": "test_cases", "strict": false}}})))
        .respond_with(chat_ok(r#"{"cases": [{"name": "ten", "kind": "normal", "inputs": {"n": 10}, "expected_output": [2, 3, 5, 7], "expected_error": null}]}"#))
        .expect(1)
        .mount(&server)
        .await;
    let generated = openai(&options(&server))
        .generate::<TestCases>(Phase::Tests, Some("sieve"), &prompt(), soon())
        .await
        .unwrap();
    assert_eq!(
        generated.value.cases[0].expected_output,
        json!([2, 3, 5, 7])
    );
}

/// Answers `first` once, then succeeds.
async fn fails_once_then_succeeds(
    first: ResponseTemplate,
) -> (
    MockServer,
    Result<model::Generated<Implementation>, Error>,
    Duration,
) {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(first)
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(chat_ok(IMPLEMENTATION))
        .mount(&server)
        .await;
    let started = Instant::now();
    let result = implement(&openai(&options(&server))).await;
    (server, result, started.elapsed())
}

#[tokio::test]
async fn transient_statuses_are_retried() {
    for status in [408, 409, 429, 500, 502, 503, 504, 529] {
        let (server, result, _) = fails_once_then_succeeds(ResponseTemplate::new(status)).await;
        let generated = result.unwrap_or_else(|e| panic!("{status}: {e}"));
        assert_eq!(generated.calls, 2, "{status}");
        assert_eq!(server.received_requests().await.unwrap().len(), 2);
    }
}

#[tokio::test]
async fn retry_after_is_honoured() {
    let (_, result, elapsed) =
        fails_once_then_succeeds(ResponseTemplate::new(429).insert_header("retry-after", "1"))
            .await;
    assert_eq!(result.unwrap().calls, 2);
    // The configured backoff is at most 50 ms; only the header explains a wait of a second.
    assert!(elapsed >= Duration::from_millis(950), "{elapsed:?}");
}

#[tokio::test]
async fn client_errors_and_spend_limits_are_not_retried() {
    for (status, body, spend) in [
        (400, json!({"error": {"message": "bad schema"}}), false),
        (401, json!({"error": {"message": "bad key"}}), false),
        (403, json!({"error": {"message": "forbidden"}}), false),
        (
            429,
            json!({"error": {"message": "quota", "type": "insufficient_quota", "code": "insufficient_quota"}}),
            true,
        ),
    ] {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(status).set_body_json(body))
            .expect(1)
            .mount(&server)
            .await;
        let error = implement(&openai(&options(&server))).await.unwrap_err();
        if spend {
            assert!(matches!(error, Error::SpendLimit(_)), "{status}: {error}");
        } else {
            assert!(
                matches!(error, Error::Rejected { status: s, .. } if s == status),
                "{status}: {error}"
            );
        }
        assert!(!error.is_retryable());
    }
}

#[tokio::test]
async fn persistent_failures_end_after_max_attempts_with_the_last_error() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(503).set_body_json(json!({"error": {"message": "overloaded"}})),
        )
        .expect(3)
        .mount(&server)
        .await;
    let error = implement(&openai(&options(&server))).await.unwrap_err();
    match &error {
        Error::Unavailable {
            endpoint,
            attempts,
            last,
        } => {
            assert_eq!(*attempts, 3);
            assert!(endpoint.contains(&server.uri()), "{endpoint}");
            assert!(
                last.contains("503") && last.contains("overloaded"),
                "{last}"
            );
        }
        other => panic!("{other}"),
    }
    assert!(error.is_retryable());
}

/// A server that answers every attempt with an error of its own is up and failing this
/// request: the call fails with what it said, for good (not an outage to wait out).
#[tokio::test]
async fn a_server_error_on_every_attempt_fails_for_good_with_the_servers_words() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(500)
                .set_body_json(json!({"error": {"message": "llama_decode returned -1"}})),
        )
        .expect(3)
        .mount(&server)
        .await;
    let error = implement(&openai(&options(&server))).await.unwrap_err();
    assert!(
        matches!(&error, Error::Failing { attempts: 3, status: 500, last, .. } if last.contains("llama_decode returned -1")),
        "{error}"
    );
    assert!(error.to_string().contains(&server.uri()), "{error}");
    assert!(!error.is_retryable());
}

/// llama-cpp-python's server refuses `response_format: json_schema` (HTTP 500 naming the
/// field) and takes `json_object` with the schema: the call falls back at once, and every later
/// call asks in the form that worked.
#[tokio::test]
async fn a_server_refusing_json_schema_is_asked_with_json_object_from_then_on() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"response_format": {"type": "json_schema"}})))
        .respond_with(ResponseTemplate::new(500).set_body_json(json!({"error": {
            "message": "[{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\"}]"}})))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(body_partial_json(
            json!({"response_format": {"type": "json_object",
            "schema": {"type": "object"}}}),
        ))
        .respond_with(chat_ok(IMPLEMENTATION))
        .expect(2)
        .mount(&server)
        .await;
    let model = openai(&options(&server));
    let first = implement(&model).await.unwrap();
    assert_eq!(first.value.code, "def sieve(n):\n    return []");
    assert_eq!(first.calls, 1, "a fallback is not another attempt");
    implement(&model).await.unwrap();
}

/// A server that refuses both forms is asked with the schema in the prompt.
#[tokio::test]
async fn a_server_refusing_every_response_format_is_asked_with_the_schema_in_the_prompt() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"response_format": {}})))
        .respond_with(
            ResponseTemplate::new(400)
                .set_body_json(json!({"error": {"message": "unknown field: response_format"}})),
        )
        .expect(2)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(chat_ok(&format!("Here it is: {IMPLEMENTATION}")))
        .expect(1)
        .mount(&server)
        .await;
    implement(&openai(&options(&server))).await.unwrap();
    let last = server.received_requests().await.unwrap().pop().unwrap();
    let body: Value = serde_json::from_slice(&last.body).unwrap();
    assert!(body.get("response_format").is_none(), "{body}");
    let system = body["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("JSON schema"), "{system}");
}

/// With the context window known, an answer's budget is what the prompt leaves of it, and a
/// prompt that leaves too little fails before any call, naming the window.
#[tokio::test]
async fn the_context_window_bounds_the_answer_and_refuses_a_prompt_that_would_not_fit() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(chat_ok(IMPLEMENTATION))
        .mount(&server)
        .await;
    let mut options = options(&server);
    options.context_window = 2048;
    let model = openai(&options);
    implement(&model).await.unwrap();
    let sent = server.received_requests().await.unwrap().pop().unwrap();
    let body: Value = serde_json::from_slice(&sent.body).unwrap();
    let budget = body["max_tokens"].as_u64().unwrap();
    assert!((256..2048).contains(&budget), "{body}");

    let long = Prompt {
        system: "system text".into(),
        user: "x".repeat(3 * 2048),
    };
    let error = model
        .generate::<Implementation>(Phase::Implement, Some("sieve"), &long, soon())
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::ContextWindow { window: 2048, .. }),
        "{error}"
    );
    assert!(
        error.to_string().contains("model.context_window"),
        "{error}"
    );
    assert!(!error.is_retryable());
    assert_eq!(server.received_requests().await.unwrap().len(), 1);
}

/// An answer the server stopped at its token budget (`finish_reason: length`) fails its check
/// saying so, not only what the cut left invalid.
#[tokio::test]
async fn an_answer_cut_at_its_token_limit_is_named_as_such() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"index": 0, "message": {"role": "assistant",
                "content": "{\"code\": \"def sieve(n):\\n    return ["}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 4096}
        })))
        .mount(&server)
        .await;
    let error = implement(&openai(&options(&server))).await.unwrap_err();
    assert!(
        matches!(&error, Error::InvalidAnswer { reason, .. } if reason.contains("cut off at its limit of 4096 tokens")),
        "{error}"
    );
}

#[tokio::test]
async fn connection_errors_and_timeouts_are_retried() {
    // Nothing listens on this port.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let unreachable = Options {
        base_url: format!("http://127.0.0.1:{port}/v1"),
        ..options(&MockServer::start().await)
    };
    let error = implement(&openai(&unreachable)).await.unwrap_err();
    assert!(
        matches!(&error, Error::Unavailable { attempts: 3, last, .. } if last.contains("connect")),
        "{error}"
    );
    // What a user reads names the server and the last failure.
    let shown = error.to_string();
    assert!(
        shown.starts_with(&format!("model at openai http://127.0.0.1:{port}/v1"))
            && shown.contains("cannot connect")
            && shown.ends_with("(after 3 attempts)"),
        "{shown}"
    );

    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(chat_ok(IMPLEMENTATION).set_delay(Duration::from_secs(3)))
        .expect(2)
        .mount(&server)
        .await;
    let impatient = Options {
        timeout: Duration::from_millis(200),
        max_attempts: 2,
        ..options(&server)
    };
    let error = implement(&openai(&impatient)).await.unwrap_err();
    assert!(
        matches!(&error, Error::Unavailable { attempts: 2, last, .. } if last.contains("timed out")),
        "{error}"
    );
}

#[tokio::test]
async fn the_task_deadline_bounds_all_retries() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(429).insert_header("retry-after", "30"))
        .mount(&server)
        .await;
    let started = Instant::now();
    let error = openai(&options(&server))
        .generate::<Implementation>(
            Phase::Implement,
            None,
            &prompt(),
            Instant::now() + Duration::from_millis(300),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Deadline(_)), "{error}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn an_invalid_answer_is_asked_again_with_the_problem_quoted() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(chat_ok(r#"{"code": 5, "analysis": null}"#))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(chat_ok(IMPLEMENTATION))
        .mount(&server)
        .await;
    let generated = implement(&openai(&options(&server))).await.unwrap();
    assert_eq!((generated.answers, generated.calls), (2, 2));
    let requests = server.received_requests().await.unwrap();
    let second: Value = requests[1].body_json().unwrap();
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(
        messages.len(),
        4,
        "system, user, the bad answer, the follow-up"
    );
    assert_eq!(messages[2]["role"], "assistant");
    let follow_up = messages[3]["content"].as_str().unwrap();
    assert!(
        follow_up.contains("/code") && follow_up.contains("implementation"),
        "{follow_up}"
    );
}

#[tokio::test]
async fn answers_that_never_validate_fail_with_the_reason() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(chat_ok("I cannot help with that."))
        .expect(2)
        .mount(&server)
        .await;
    let error = implement(&openai(&options(&server))).await.unwrap_err();
    match error {
        Error::InvalidAnswer {
            phase,
            attempts,
            reason,
        } => {
            assert_eq!((phase, attempts), ("implement", 2));
            assert!(reason.contains("no JSON"), "{reason}");
        }
        other => panic!("{other}"),
    }
}

#[tokio::test]
async fn prompted_mode_puts_the_schema_in_the_prompt_and_extracts_json_from_text() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(chat_ok(&format!(
            "Here is the function:\n```json\n{IMPLEMENTATION}\n```\nLet me know if you need more."
        )))
        .expect(1)
        .mount(&server)
        .await;
    let options = Options {
        structured_output: StructuredOutput::Prompted,
        ..options(&server)
    };
    let generated = implement(&openai(&options)).await.unwrap();
    assert!(generated.value.code.contains("def sieve"));
    let request: Value = server.received_requests().await.unwrap()[0]
        .body_json()
        .unwrap();
    assert!(request.get("response_format").is_none());
    let system = request["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("JSON schema") && system.contains("\"code\""),
        "{system}"
    );
}

fn anthropic(options: &Options) -> Model {
    let options = Options {
        base_url: options.base_url.trim_end_matches("/v1").to_owned(),
        ..options.clone()
    };
    let provider: Arc<dyn Provider> = Arc::new(Anthropic::new(&options).unwrap());
    Model::new(provider, options, Metrics::unregistered().unwrap())
}

#[tokio::test]
async fn anthropic_forces_a_tool_call_and_reads_its_input() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(header("x-api-key", "test-key"))
        .and(header("anthropic-version", "2023-06-01"))
        .and(body_partial_json(json!({
            "model": "test-model",
            "system": "system text",
            "messages": [{"role": "user", "content": "write sieve"}],
            "tool_choice": {"type": "tool", "name": "implementation"},
            "tools": [{"name": "implementation"}],
        })))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "test-model",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "implementation",
                         "input": {"code": "def sieve(n):\n    return []", "analysis": null}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 21, "output_tokens": 9}
        })))
        .expect(1)
        .mount(&server)
        .await;
    let generated = implement(&anthropic(&options(&server))).await.unwrap();
    assert!(generated.value.code.starts_with("def sieve"));
    assert_eq!(generated.usage.prompt_tokens, 21);
    assert_eq!(generated.usage.completion_tokens, 9);
    let request: Value = server.received_requests().await.unwrap()[0]
        .body_json()
        .unwrap();
    let schema = &request["tools"][0]["input_schema"];
    assert_eq!(schema["type"], "object");
    assert!(schema["properties"].get("code").is_some());
}

#[tokio::test]
async fn anthropic_overload_529_is_retried() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(529).set_body_json(json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "content": [{"type": "tool_use", "name": "implementation", "input": {"code": "x = 1", "analysis": null}}],
            "usage": {"input_tokens": 1, "output_tokens": 1}
        })))
        .mount(&server)
        .await;
    let generated = implement(&anthropic(&options(&server))).await.unwrap();
    assert_eq!(generated.calls, 2);
}

#[tokio::test]
async fn a_probe_tells_a_reachable_server_from_a_down_one_without_a_chat_call() {
    // Any answer below 500 is a server that is up, even one that refuses the key.
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v1/models"))
        .and(header("authorization", "Bearer test-key"))
        .respond_with(ResponseTemplate::new(401))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(chat_ok(IMPLEMENTATION))
        .expect(0)
        .mount(&server)
        .await;
    openai(&options(&server)).probe().await.unwrap();

    let failing = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v1/models"))
        .respond_with(ResponseTemplate::new(503))
        .mount(&failing)
        .await;
    let error = openai(&options(&failing)).probe().await.unwrap_err();
    assert!(
        error.contains("503") && error.contains("/v1/models"),
        "{error}"
    );

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let unreachable = Options {
        base_url: format!("http://127.0.0.1:{port}/v1"),
        ..options(&server)
    };
    let error = openai(&unreachable).probe().await.unwrap_err();
    assert!(error.contains("cannot connect"), "{error}");

    // Anthropic's model list, with its own headers.
    let anthropic_server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v1/models"))
        .and(header("x-api-key", "test-key"))
        .and(header("anthropic-version", model::anthropic::API_VERSION))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"data": []})))
        .expect(1)
        .mount(&anthropic_server)
        .await;
    let anthropic_options = Options {
        base_url: anthropic_server.uri(),
        ..options(&anthropic_server)
    };
    let provider = Anthropic::new(&anthropic_options).unwrap();
    provider.probe().await.unwrap();
}

/// An OpenAI answer with `contents` as its choices.
fn chat_choices(contents: &[&str]) -> ResponseTemplate {
    let choices: Vec<Value> = contents
        .iter()
        .enumerate()
        .map(|(i, c)| json!({"index": i, "message": {"role": "assistant", "content": c}, "finish_reason": "stop"}))
        .collect();
    ResponseTemplate::new(200).set_body_json(json!({
        "id": "x", "object": "chat.completion", "model": "test-model", "choices": choices,
        "usage": {"prompt_tokens": 11, "completion_tokens": 21, "total_tokens": 32}
    }))
}

async fn implement_n(model: &Model, n: u32) -> Vec<model::Generated<Implementation>> {
    model
        .generate_n_in::<Implementation>(
            &model::Call::default(),
            &mut model::Seat::default(),
            Phase::Implement,
            Some("sieve"),
            &prompt(),
            n,
            soon(),
        )
        .await
        .unwrap()
}

#[tokio::test]
async fn several_answers_are_asked_in_one_call_with_n_and_charged_once() {
    let server = MockServer::start().await;
    let other = r#"{"code": "def sieve(n):\n    return [2]", "analysis": null}"#;
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"n": 3})))
        .respond_with(chat_choices(&[IMPLEMENTATION, other, IMPLEMENTATION]))
        .expect(1)
        .mount(&server)
        .await;
    let answers = implement_n(&openai(&options(&server)), 3).await;
    let codes: Vec<&str> = answers.iter().map(|a| a.value.code.as_str()).collect();
    assert_eq!(
        codes,
        [
            "def sieve(n):\n    return []",
            "def sieve(n):\n    return [2]",
            "def sieve(n):\n    return []"
        ]
    );
    // The call's usage once, on the first answer.
    assert_eq!(
        (answers[0].calls, answers[0].usage.completion_tokens),
        (1, 21)
    );
    assert!(
        answers[1..]
            .iter()
            .all(|a| a.calls == 0 && a.usage.completion_tokens == 0)
    );
}

#[tokio::test]
async fn a_server_that_gives_fewer_answers_than_n_or_an_invalid_one_is_asked_again_for_the_rest() {
    let server = MockServer::start().await;
    // llama.cpp's server takes `n` and samples one; this one gives two, one of them invalid.
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"n": 3})))
        .respond_with(chat_choices(&[IMPLEMENTATION, r#"{"code": 5}"#]))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(chat_ok(IMPLEMENTATION))
        .expect(2)
        .mount(&server)
        .await;
    let answers = implement_n(&openai(&options(&server)), 3).await;
    assert_eq!(answers.len(), 3);
    assert_eq!(
        answers.iter().map(|a| a.calls).sum::<u32>(),
        3,
        "the call with n, then one each for the two missing"
    );
    // The calls (the client also asks the server's root for its slots, once).
    let requests: Vec<_> = server
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.method == wiremock::http::Method::POST)
        .collect();
    let later: Value = requests[1].body_json().unwrap();
    assert!(later.get("n").is_none(), "one at a time: {later}");
}

#[tokio::test]
async fn one_answer_is_asked_without_n() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(chat_ok(IMPLEMENTATION))
        .expect(1)
        .mount(&server)
        .await;
    let answers = implement_n(&openai(&options(&server)), 1).await;
    assert_eq!(answers.len(), 1);
    let body: Value = server.received_requests().await.unwrap()[0]
        .body_json()
        .unwrap();
    assert!(body.get("n").is_none(), "{body}");
}

#[tokio::test]
async fn an_optional_answer_that_does_not_validate_is_not_asked_again() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(chat_ok(r#"{"code": 5, "analysis": null}"#))
        .expect(1)
        .mount(&server)
        .await;
    let failed = openai(&options(&server))
        .generate_optional_in::<Implementation>(
            &model::Call::default(),
            &mut model::Seat::default(),
            Phase::Implement,
            Some("sieve"),
            &prompt(),
            soon(),
        )
        .await;
    assert!(
        matches!(failed, Err(Error::InvalidAnswer { attempts: 1, .. })),
        "{failed:?}"
    );
}

/// The refusal llama-cpp-python, vLLM and OpenAI answer for a prompt that leaves too little of
/// the context window for the answer's budget.
fn context_refusal(prompt_tokens: u64, max_tokens: u32) -> ResponseTemplate {
    ResponseTemplate::new(400).set_body_json(json!({"error": {
        "message": format!("This model's maximum context length is 8192 tokens. However, you requested {} tokens ({prompt_tokens} in the messages, {max_tokens} in the completion). Please reduce the length of the messages or completion.", prompt_tokens + u64::from(max_tokens)),
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}))
}

#[tokio::test]
async fn a_refusal_for_the_context_window_is_asked_again_with_what_the_window_leaves() {
    let server = MockServer::start().await;
    let settings = Options {
        max_tokens: 4096,
        ..options(&server)
    };
    // The budget asked first does not fit with a 5,000-token prompt; what is left does.
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"max_tokens": 4096})))
        .respond_with(context_refusal(5_000, 4096))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"max_tokens": 8192 - 5_000 - 16})))
        .respond_with(chat_ok(IMPLEMENTATION))
        .mount(&server)
        .await;
    let generated = implement(&openai(&settings)).await.unwrap();
    assert_eq!(generated.calls, 2);

    // A prompt that leaves no room for an answer fails as too long, at once.
    let full = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(context_refusal(8_100, 4096))
        .mount(&full)
        .await;
    let error = implement(&openai(&Options {
        max_tokens: 4096,
        ..options(&full)
    }))
    .await
    .unwrap_err();
    assert!(
        matches!(
            error,
            Error::ContextWindow {
                window: 8192,
                prompt_tokens: 8_100,
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(full.received_requests().await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_cut_off_answer_is_quoted_by_its_start_and_asked_again_shorter() {
    let server = MockServer::start().await;
    let rambling = format!("{{\"functions\": [{}", "{\"name\": \"f\"}, ".repeat(2_000));
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "x", "object": "chat.completion", "model": "test-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": rambling},
                         "finish_reason": "length"}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 4096, "total_tokens": 4107}
        })))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(chat_ok(IMPLEMENTATION))
        .mount(&server)
        .await;
    implement(&openai(&options(&server))).await.unwrap();
    let second = server.received_requests().await.unwrap().pop().unwrap();
    let body: Value = serde_json::from_slice(&second.body).unwrap();
    let messages = body["messages"].as_array().unwrap();
    let quoted = messages[messages.len() - 2]["content"].as_str().unwrap();
    assert!(
        quoted.len() < 2_100 && quoted.ends_with("[… cut off]"),
        "{} chars",
        quoted.len()
    );
    assert!(rambling.starts_with(quoted.trim_end_matches("\n[… cut off]")));
    let again = messages.last().unwrap()["content"].as_str().unwrap();
    assert!(
        again.contains("cut off") && again.contains("Answer again, shorter,"),
        "{again}"
    );
}
