//! Tool calling: the providers' native forms (OpenAI `tools`/`tool_calls`, Anthropic
//! `tool_use`/`tool_result`) against wiremock, the fallback to the prompted form when a server
//! refuses `tools`, the scripted FAKE in process and over HTTP (its request log included), and
//! record/replay of agent steps.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::sync::Arc;
use std::time::Duration;

use model::anthropic::Anthropic;
use model::openai::OpenAi;
use model::record::Recorder;
use model::scripted::{Script, Scripted};
use model::{
    Call, ChatRequest, Error, Message, Metrics, Model, Options, Phase, Provider, Seat, ToolCall,
    ToolCalling, ToolSpec, Turn, Turned,
};
use serde_json::{Value, json};
use tokio::time::Instant;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn options(base_url: String) -> Options {
    Options {
        base_url,
        api_key: Some("test-key".into()),
        model: "test-model".into(),
        timeout: Duration::from_secs(5),
        max_attempts: 3,
        min_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
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

fn anthropic(options: &Options) -> Model {
    let provider: Arc<dyn Provider> = Arc::new(Anthropic::new(options).unwrap());
    Model::new(provider, options.clone(), Metrics::unregistered().unwrap())
}

fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "run_shell".into(),
            description: "Run a shell command in the sandbox.".into(),
            parameters: json!({"type": "object", "properties": {"command": {"type": "string"}},
                               "required": ["command"]}),
        },
        ToolSpec {
            name: "read_file".into(),
            description: "Read a file.".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        },
    ]
}

fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
    }
}

/// A task, an answer with two calls (and words before them), their two results, and a nudge
/// from the agent after them.
fn history() -> Vec<Message> {
    vec![
        Message::user("make the tests pass"),
        Message {
            tool_calls: vec![
                call("c1", "run_shell", r#"{"command":"ls"}"#),
                call("c2", "read_file", r#"{"path": "#),
            ],
            ..Message::assistant("I look around first.")
        },
        Message::tool("c1", "main.py\ntest_main.py"),
        Message::tool("c2", "error: the arguments are not JSON"),
        Message::user("3 steps left"),
    ]
}

fn turn<'a>(messages: &'a [Message], tools: &'a [ToolSpec]) -> Turn<'a> {
    Turn {
        system: "you are an agent",
        messages,
        tools,
        function: Some("run-1"),
        temperature: None,
        seed: None,
    }
}

async fn step(model: &Model, turn: Turn<'_>) -> Result<Turned, Error> {
    model
        .turn(
            &Call::default(),
            &mut Seat::default(),
            turn,
            Instant::now() + Duration::from_secs(20),
        )
        .await
}

fn chat(message: Value, finish_reason: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "id": "chatcmpl-1", "object": "chat.completion", "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}
    }))
}

fn text_answer(content: &str) -> ResponseTemplate {
    chat(json!({"role": "assistant", "content": content}), "stop")
}

async fn bodies(server: &MockServer) -> Vec<Value> {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| r.body_json().unwrap())
        .collect()
}

#[tokio::test]
async fn openai_sends_tools_and_a_history_of_calls_and_results_in_its_own_form() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(text_answer("done"))
        .expect(1)
        .mount(&server)
        .await;
    let model = openai(&options(format!("{}/v1", server.uri())));
    let (history, tools) = (history(), tools());
    let turned = step(&model, turn(&history, &tools)).await.unwrap();
    assert_eq!(turned.text, "done");
    assert!(turned.tool_calls.is_empty() && !turned.prompted);
    let body = &bodies(&server).await[0];
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "you are an agent"},
            {"role": "user", "content": "make the tests pass"},
            {"role": "assistant", "content": "I look around first.", "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "run_shell", "arguments": "{\"command\":\"ls\"}"}},
                {"id": "c2", "type": "function",
                 "function": {"name": "read_file", "arguments": "{\"path\": "}},
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "main.py\ntest_main.py"},
            {"role": "tool", "tool_call_id": "c2", "content": "error: the arguments are not JSON"},
            {"role": "user", "content": "3 steps left"},
        ])
    );
    assert_eq!(
        body["tools"],
        json!([
            {"type": "function", "function": {"name": "run_shell",
             "description": "Run a shell command in the sandbox.",
             "parameters": tools[0].parameters}},
            {"type": "function", "function": {"name": "read_file",
             "description": "Read a file.", "parameters": tools[1].parameters}},
        ])
    );
    for absent in ["tool_choice", "seed", "response_format"] {
        assert!(body.get(absent).is_none(), "{absent}: {body}");
    }
}

#[test]
fn an_assistant_turn_of_calls_alone_has_null_content() {
    let provider = OpenAi::new(&options("http://127.0.0.1:9/v1".into())).unwrap();
    let request = ChatRequest {
        phase: Phase::Agent,
        function: None,
        system: "s".into(),
        messages: vec![
            Message::user("go"),
            Message {
                tool_calls: vec![call("c1", "run_shell", "{}")],
                ..Message::assistant("")
            },
            Message::tool("c1", "ok"),
        ],
        schema: None,
        max_tokens: None,
        n: 1,
        tools: tools(),
        temperature: None,
        seed: None,
    };
    let body = provider.body(&request);
    assert_eq!(body["messages"][2]["content"], Value::Null);
    assert_eq!(body["messages"][2]["tool_calls"][0]["id"], "c1");
}

#[tokio::test]
async fn openai_reads_several_calls_keeping_their_arguments_as_written() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(chat(
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_a", "type": "function",
                 "function": {"name": "run_shell", "arguments": "{\"command\": \"pytest -q\"}"}},
                {"id": "call_b", "type": "function",
                 "function": {"name": "read_file", "arguments": "{\"path\": \"main.py\""}},
            ]}),
            "tool_calls",
        ))
        .mount(&server)
        .await;
    let model = openai(&options(format!("{}/v1", server.uri())));
    let (history, tools) = (history(), tools());
    let turned = step(&model, turn(&history, &tools)).await.unwrap();
    assert_eq!(
        turned.tool_calls,
        vec![
            call("call_a", "run_shell", r#"{"command": "pytest -q"}"#),
            call("call_b", "read_file", r#"{"path": "main.py""#),
        ]
    );
    assert_eq!(turned.text, "", "a null content is no text");
    assert!(!turned.truncated);
    assert_eq!(
        (turned.usage.prompt_tokens, turned.usage.completion_tokens),
        (30, 12)
    );
    let problem = turned.tool_problem.unwrap();
    assert!(
        problem.contains("`read_file` (call_b) are not JSON"),
        "{problem}"
    );
    assert_eq!(turned.token_ids, None, "none sent, none invented");
}

#[tokio::test]
async fn openai_takes_the_token_ids_a_server_sends_and_makes_ids_it_leaves_out() {
    let server = MockServer::start().await;
    // vLLM with `return_token_ids`: the answer's ids beside its message; this server gives
    // its call no id and its arguments as an object.
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"index": 0, "finish_reason": "tool_calls", "token_ids": [5, 17, 3],
                         "message": {"role": "assistant", "content": "", "tool_calls": [
                             {"type": "function",
                              "function": {"name": "run_shell", "arguments": {"command": "ls"}}}]}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 3}
        })))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    // llama.cpp with `logprobs`: each token's id.
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "done"},
                         "logprobs": {"content": [
                             {"id": 9, "token": "do", "logprob": -0.1},
                             {"id": 12, "token": "ne", "logprob": -0.2}]}}],
        })))
        .mount(&server)
        .await;
    let model = openai(&options(format!("{}/v1", server.uri())));
    let (history, tools) = (history(), tools());
    let first = step(&model, turn(&history, &tools)).await.unwrap();
    assert_eq!(first.token_ids, Some(vec![5, 17, 3]));
    assert_eq!(first.tool_calls.len(), 1);
    assert_eq!(first.tool_calls[0].arguments, r#"{"command":"ls"}"#);
    assert!(
        first.tool_calls[0].id.starts_with("call_"),
        "{:?}",
        first.tool_calls[0]
    );
    assert_eq!(first.tool_problem, None);
    let second = step(&model, turn(&history, &tools)).await.unwrap();
    assert_eq!(second.token_ids, Some(vec![9, 12]));
}

#[tokio::test]
async fn a_turns_temperature_and_seed_are_forwarded() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(text_answer("done"))
        .mount(&server)
        .await;
    let model = openai(&options(format!("{}/v1", server.uri())));
    let (history, tools) = (history(), tools());
    step(
        &model,
        Turn {
            temperature: Some(0.75),
            seed: Some(1234),
            ..turn(&history, &tools)
        },
    )
    .await
    .unwrap();
    step(&model, turn(&history, &tools)).await.unwrap();
    let bodies = bodies(&server).await;
    assert_eq!(bodies[0]["temperature"], json!(0.75));
    assert_eq!(bodies[0]["seed"], json!(1234));
    assert_eq!(
        bodies[1]["temperature"].as_f64().unwrap() as f32,
        0.2,
        "else the option's"
    );
    assert!(bodies[1].get("seed").is_none());
}

#[tokio::test]
async fn a_server_refusing_tools_is_asked_in_the_prompted_form_from_then_on() {
    let server = MockServer::start().await;
    // llama-cpp-python without a tool-calling chat format.
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(500).set_body_json(json!({"error": {
            "message": "tools is not supported by this chat format", "type": "internal_server_error"}})))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(text_answer(
            "Listing.\n```action\n{\"tool\": \"run_shell\", \"arguments\": {\"command\": \"ls\"}}\n```",
        ))
        .mount(&server)
        .await;
    let model = openai(&options(format!("{}/v1", server.uri())));
    let (history, tools) = (history(), tools());
    let first = step(&model, turn(&history, &tools)).await.unwrap();
    assert!(first.prompted);
    assert_eq!(
        first.calls, 2,
        "the refusal is not retried as a server error"
    );
    assert_eq!(first.tool_calls.len(), 1);
    assert_eq!(first.tool_calls[0].name, "run_shell");
    assert_eq!(first.tool_calls[0].arguments, r#"{"command":"ls"}"#);
    let later = step(&model.clone(), turn(&history, &tools)).await.unwrap();
    assert!(later.prompted);
    assert_eq!(later.calls, 1, "asked in the prompted form at once");

    let bodies = bodies(&server).await;
    assert_eq!(bodies.len(), 3);
    assert!(bodies[0].get("tools").is_some());
    for body in &bodies[1..] {
        assert!(body.get("tools").is_none(), "{body}");
        let system = body["messages"][0]["content"].as_str().unwrap();
        assert!(system.contains("```action"), "{system}");
        assert!(system.contains("run_shell"), "{system}");
        // No tool turn in the prompted form: the results go back as what the user says.
        for message in body["messages"].as_array().unwrap() {
            assert_ne!(message["role"], "tool", "{message}");
            assert!(message.get("tool_calls").is_none(), "{message}");
        }
    }
}

#[tokio::test]
async fn a_server_error_that_does_not_name_tools_is_retried_as_one() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(500).set_body_json(json!({"error": {
            "message": "CUDA out of memory"}})))
        .mount(&server)
        .await;
    let model = openai(&options(format!("{}/v1", server.uri())));
    let (history, tools) = (history(), tools());
    let error = step(&model, turn(&history, &tools)).await.unwrap_err();
    assert!(
        matches!(
            error,
            Error::Failing {
                status: 500,
                attempts: 3,
                ..
            }
        ),
        "{error}"
    );
    let bodies = bodies(&server).await;
    assert_eq!(bodies.len(), 3);
    assert!(
        bodies.iter().all(|b| b.get("tools").is_some()),
        "still native"
    );
}

#[tokio::test]
async fn the_prompted_form_when_configured_sends_no_tools() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(text_answer("no action here"))
        .mount(&server)
        .await;
    let options = Options {
        tool_calling: ToolCalling::Prompted,
        ..options(format!("{}/v1", server.uri()))
    };
    let (history, tools) = (history(), tools());
    let turned = step(&openai(&options), turn(&history, &tools))
        .await
        .unwrap();
    assert!(turned.prompted && turned.tool_calls.is_empty());
    assert!(turned.tool_problem.unwrap().contains("no ```action block"));
    let body = &bodies(&server).await[0];
    assert!(body.get("tools").is_none(), "{body}");
}

#[tokio::test]
async fn anthropic_sends_tool_use_and_one_user_message_of_results_and_reads_tool_use() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "test-model",
            "content": [
                {"type": "text", "text": "Running the tests."},
                {"type": "tool_use", "id": "toolu_1", "name": "run_shell",
                 "input": {"command": "pytest -q"}},
                {"type": "tool_use", "id": "toolu_2", "name": "read_file",
                 "input": {"path": "main.py"}},
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 50, "output_tokens": 20}
        })))
        .expect(1)
        .mount(&server)
        .await;
    let model = anthropic(&options(server.uri()));
    let (history, tools) = (history(), tools());
    let turned = step(
        &model,
        Turn {
            temperature: Some(0.5),
            seed: Some(7),
            ..turn(&history, &tools)
        },
    )
    .await
    .unwrap();
    assert_eq!(turned.text, "Running the tests.");
    assert_eq!(
        turned.tool_calls,
        vec![
            call("toolu_1", "run_shell", r#"{"command":"pytest -q"}"#),
            call("toolu_2", "read_file", r#"{"path":"main.py"}"#),
        ]
    );
    assert_eq!(turned.tool_problem, None);
    assert_eq!(
        (turned.usage.prompt_tokens, turned.usage.completion_tokens),
        (50, 20)
    );

    let body = &bodies(&server).await[0];
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": "make the tests pass"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "I look around first."},
                {"type": "tool_use", "id": "c1", "name": "run_shell", "input": {"command": "ls"}},
                // Arguments that are not an object go back as none.
                {"type": "tool_use", "id": "c2", "name": "read_file", "input": {}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": "main.py\ntest_main.py"},
                {"type": "tool_result", "tool_use_id": "c2",
                 "content": "error: the arguments are not JSON"},
                {"type": "text", "text": "3 steps left"},
            ]},
        ])
    );
    assert_eq!(
        body["tools"],
        json!([
            {"name": "run_shell", "description": "Run a shell command in the sandbox.",
             "input_schema": tools[0].parameters},
            {"name": "read_file", "description": "Read a file.",
             "input_schema": tools[1].parameters},
        ])
    );
    assert_eq!(body["temperature"], json!(0.5));
    assert_eq!(body["system"], "you are an agent");
    for absent in ["tool_choice", "seed"] {
        assert!(body.get(absent).is_none(), "{absent}: {body}");
    }
}

#[tokio::test]
async fn anthropic_results_of_different_turns_stay_apart() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 1, "output_tokens": 1}
        })))
        .mount(&server)
        .await;
    let messages = vec![
        Message::user("go"),
        Message {
            tool_calls: vec![call("c1", "run_shell", r#"{"command":"ls"}"#)],
            ..Message::assistant("")
        },
        Message::tool("c1", "a"),
        Message {
            tool_calls: vec![call("c2", "run_shell", r#"{"command":"pwd"}"#)],
            ..Message::assistant("")
        },
        Message::tool("c2", "b"),
    ];
    let tools = tools();
    let turned = step(&anthropic(&options(server.uri())), turn(&messages, &tools))
        .await
        .unwrap();
    assert_eq!(turned.text, "done");
    assert!(turned.tool_calls.is_empty());
    let body = &bodies(&server).await[0];
    let roles: Vec<&str> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant", "user"]);
    assert_eq!(
        body["messages"][1]["content"],
        json!([{"type": "tool_use", "id": "c1", "name": "run_shell", "input": {"command": "ls"}}]),
        "no empty text block"
    );
    assert_eq!(body["messages"][4]["content"][0]["tool_use_id"], "c2");
}

fn agent_script() -> Script {
    serde_json::from_value(json!({"answers": [
        {"phase": "agent", "function": "run-1", "text": "I look around first.",
         "tool_calls": [{"name": "run_shell", "arguments": {"command": "ls"}},
                        {"name": "read_file", "arguments": "{\"path\": "}]},
        {"phase": "agent", "function": "run-1", "prompt_contains": "test_main.py",
         "tool_calls": [{"name": "run_shell", "arguments": {"command": "pytest -q"}}]},
        {"phase": "agent", "function": "run-1", "text": "all done"},
    ]}))
    .unwrap()
}

#[tokio::test]
async fn the_scripted_model_answers_tool_calls_in_process() {
    let scripted: Arc<dyn Provider> = Arc::new(Scripted::new(agent_script()).unwrap());
    let model = Model::new(
        scripted,
        Options::default(),
        Metrics::unregistered().unwrap(),
    );
    let tools = tools();
    let task = vec![Message::user("make the tests pass")];
    let first = step(&model, turn(&task, &tools)).await.unwrap();
    assert_eq!(first.text, "I look around first.");
    assert_eq!(
        first.tool_calls,
        vec![
            call("call_0_0_0", "run_shell", r#"{"command":"ls"}"#),
            call("call_0_1_0", "read_file", r#"{"path": "#),
        ]
    );
    let problem = first.tool_problem.unwrap();
    assert!(
        problem.contains("`read_file` (call_0_1_0) are not JSON"),
        "{problem}"
    );

    // A tool result's content is part of the prompt the script matches.
    let mut history = task.clone();
    history.push(Message {
        tool_calls: first.tool_calls.clone(),
        ..Message::assistant(first.text.clone())
    });
    history.push(Message::tool("call_0_0_0", "main.py\ntest_main.py"));
    let second = step(&model, turn(&history, &tools)).await.unwrap();
    assert_eq!(second.text, "");
    assert_eq!(
        second.tool_calls,
        vec![call(
            "call_1_0_0",
            "run_shell",
            r#"{"command":"pytest -q"}"#
        )]
    );
    let last = step(&model, turn(&task, &tools)).await.unwrap();
    assert_eq!(last.text, "all done");
    assert!(last.tool_calls.is_empty() && last.tool_problem.is_none());
}

#[tokio::test]
async fn the_scripted_server_answers_tool_calls_and_logs_each_request() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router =
        model::server::router_with_log(Arc::new(Scripted::new(agent_script()).unwrap()), &log);
    tokio::spawn(async move { axum::serve(listener, router).await });
    let base = format!("http://{addr}/v1");
    let model = openai(&options(base.clone()));
    let tools = tools();
    let task = vec![Message::user("make the tests pass")];
    let first = step(&model, turn(&task, &tools)).await.unwrap();
    assert!(!first.prompted);
    assert_eq!(first.text, "I look around first.");
    assert_eq!(
        first.tool_calls,
        vec![
            call("call_0_0_0", "run_shell", r#"{"command":"ls"}"#),
            call("call_0_1_0", "read_file", r#"{"path": "#),
        ],
        "malformed arguments pass through unchanged"
    );
    assert!(first.tool_problem.is_some());

    let mut history = task.clone();
    history.push(Message {
        tool_calls: first.tool_calls.clone(),
        ..Message::assistant(first.text.clone())
    });
    history.push(Message::tool("call_0_0_0", "main.py\ntest_main.py"));
    history.push(Message::tool(
        "call_0_1_0",
        "error: the arguments are not JSON",
    ));
    let second = step(&model, turn(&history, &tools)).await.unwrap();
    assert_eq!(
        second.tool_calls,
        vec![call(
            "call_1_0_0",
            "run_shell",
            r#"{"command":"pytest -q"}"#
        )]
    );

    // The wire form itself: the calls' finish reason, a null content without text.
    let raw: Value = reqwest::Client::new()
        .post(format!("{base}/chat/completions"))
        .header("x-codegen-phase", "agent")
        .header("x-codegen-function", "run-1")
        .json(&json!({"messages": [{"role": "tool", "tool_call_id": "x",
                                    "content": "test_main.py"}]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(raw["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(raw["choices"][0]["message"]["content"], Value::Null);
    assert_eq!(
        raw["choices"][0]["message"]["tool_calls"][0]["id"],
        "call_1_0_1"
    );

    let lines: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(
        lines[0],
        json!({"phase": "agent", "function": "run-1", "messages": 2,
               "last": "make the tests pass", "tools": 2, "seed": null,
               "temperature": lines[0]["temperature"], "status": 200})
    );
    // The request's sampling, as sent: the provider's temperature, no seed.
    assert!(
        (lines[0]["temperature"].as_f64().unwrap() - 0.2).abs() < 1e-6,
        "{}",
        lines[0]
    );
    assert_eq!(lines[1]["messages"], 5);
    assert_eq!(lines[1]["last"], "error: the arguments are not JSON");
    assert_eq!(lines[2]["tools"], 0);
}

#[tokio::test]
async fn the_request_log_cuts_the_last_message_and_logs_failures() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let script: Script = serde_json::from_value(json!({"answers": [
        {"phase": "agent", "status": 503},
    ]}))
    .unwrap();
    let router = model::server::router_with_log(Arc::new(Scripted::new(script).unwrap()), &log);
    tokio::spawn(async move { axum::serve(listener, router).await });
    let long = "é".repeat(300);
    let status = reqwest::Client::new()
        .post(format!("http://{addr}/v1/chat/completions"))
        .header("x-codegen-phase", "agent")
        .json(&json!({"messages": [{"role": "user", "content": long}]}))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 503);
    let line: Value = serde_json::from_str(std::fs::read_to_string(&log).unwrap().trim()).unwrap();
    assert_eq!(line["status"], 503);
    assert_eq!(line["function"], Value::Null);
    assert_eq!(line["last"].as_str().unwrap().chars().count(), 200);
}

#[tokio::test]
async fn agent_steps_record_and_replay_keyed_by_their_tools() {
    let dir = tempfile::tempdir().unwrap();
    let scripted: Arc<dyn Provider> = Arc::new(Scripted::new(agent_script()).unwrap());
    let recorder: Arc<dyn Provider> =
        Arc::new(Recorder::new(scripted, dir.path().to_path_buf()).unwrap());
    let model = Model::new(
        recorder,
        Options::default(),
        Metrics::unregistered().unwrap(),
    );
    let tools = tools();
    let task = vec![Message::user("make the tests pass")];
    let recorded = step(&model, turn(&task, &tools)).await.unwrap();
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

    let options = Options {
        replay_dir: Some(dir.path().to_path_buf()),
        ..Options::default()
    };
    let replay = Model::from_options(&options, Metrics::unregistered().unwrap()).unwrap();
    let replayed = step(&replay, turn(&task, &tools)).await.unwrap();
    assert_eq!(replayed.tool_calls, recorded.tool_calls);
    assert_eq!(replayed.text, recorded.text);
    assert_eq!(replayed.tool_problem, recorded.tool_problem);

    // Other tools, or another seed, is another request.
    let miss = step(&replay, turn(&task, &tools[..1])).await.unwrap_err();
    assert!(matches!(miss, Error::ReplayMiss(_)), "{miss}");
    let miss = step(
        &replay,
        Turn {
            seed: Some(1),
            ..turn(&task, &tools)
        },
    )
    .await
    .unwrap_err();
    assert!(matches!(miss, Error::ReplayMiss(_)), "{miss}");
}

#[test]
fn a_request_without_tools_keeps_the_key_it_was_recorded_under() {
    use sha2::Digest;
    let request = ChatRequest {
        phase: Phase::Implement,
        function: Some("sieve".into()),
        system: "s".into(),
        messages: vec![Message::user("u"), Message::assistant("a")],
        schema: None,
        max_tokens: None,
        n: 1,
        tools: Vec::new(),
        temperature: None,
        seed: None,
    };
    // The canonical form keys were made of before tool calling.
    let before = json!({
        "phase": "implement",
        "function": "sieve",
        "system": "s",
        "messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}],
        "schema": null,
    });
    let expected = hex::encode(sha2::Sha256::digest(before.to_string().as_bytes()));
    assert_eq!(model::record::key(&request), expected);
    let with_tools = ChatRequest {
        tools: tools(),
        ..request.clone()
    };
    assert_ne!(model::record::key(&with_tools), expected);
}
