//! Tools the model may call, and the prompted form for servers without tool calling.
//!
//! A provider speaks its API's own tool calling (OpenAI `tools`/`tool_calls`, Anthropic
//! `tool_use`/`tool_result`). For a server that has none (llama.cpp serving a small model), or
//! that refuses `tools`, [`crate::Model::turn`] asks in the prompted form instead: the tools are
//! described in the system prompt, each answer holds exactly one fenced `action` block, and the
//! history's tool turns go back as user turns. The form is chosen the way structured output
//! falls back: `model.tool_calling`, then plainer from the first refusal on.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// The JSON schema of its arguments (an object).
    pub parameters: Value,
}

/// One call the model asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id of the call (what its result answers); the prompted form makes one.
    pub id: String,
    pub name: String,
    /// The arguments as the model wrote them: JSON text, not yet known to be valid.
    pub arguments: String,
}

/// How tools are offered (`model.tool_calling`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCalling {
    /// The API's own tool calling; a server that refuses `tools` gets the prompted form from
    /// then on (the first refusal logged, the step asked again at once).
    #[default]
    Native,
    /// The tools described in the prompt, one fenced `action` block per answer.
    Prompted,
}

/// The fence of the prompted form's action block.
pub const ACTION_FENCE: &str = "action";

/// What the system prompt gains in the prompted form: the tools, and how to call one.
pub fn prompted_instructions(tools: &[ToolSpec]) -> String {
    let mut out = String::from(
        "\n\nYou act by calling tools. Answer with your reasoning, if any, and then exactly one \
         fenced block that calls one tool, written as:\n```action\n{\"tool\": \"<name>\", \
         \"arguments\": {<the arguments as JSON>}}\n```\nOne action per answer; its result comes \
         back in the next message. The tools:\n",
    );
    for tool in tools {
        out.push_str(&format!(
            "- {}: {}\n  arguments (JSON schema): {}\n",
            tool.name, tool.description, tool.parameters
        ));
    }
    out
}

/// The one action of a prompted answer, read strictly: exactly one `action` block, holding a
/// JSON object with a string `tool` and an object `arguments` and nothing else. `Err` says
/// what is wrong, in words the model is shown.
pub fn parse_prompted(text: &str) -> Result<ToolCall, String> {
    let blocks = action_blocks(text);
    let block = match blocks.as_slice() {
        [] => {
            return Err(format!(
                "the answer holds no ```{ACTION_FENCE} block; call exactly one tool per answer"
            ));
        }
        [one] => one,
        more => {
            return Err(format!(
                "the answer holds {} ```{ACTION_FENCE} blocks; call exactly one tool per answer",
                more.len()
            ));
        }
    };
    let value: Value = serde_json::from_str(block.trim())
        .map_err(|e| format!("the ```{ACTION_FENCE} block is not JSON: {e}"))?;
    let Some(object) = value.as_object() else {
        return Err(format!(
            "the ```{ACTION_FENCE} block must be a JSON object with `tool` and `arguments`"
        ));
    };
    if let Some(extra) = object
        .keys()
        .find(|k| !matches!(k.as_str(), "tool" | "arguments"))
    {
        return Err(format!(
            "the ```{ACTION_FENCE} block has an unknown field `{extra}` (only `tool` and `arguments`)"
        ));
    }
    let Some(name) = object.get("tool").and_then(Value::as_str) else {
        return Err(format!(
            "the ```{ACTION_FENCE} block needs `tool`, the tool's name as a string"
        ));
    };
    let arguments = match object.get("arguments") {
        None => Value::Object(Default::default()),
        Some(arguments @ Value::Object(_)) => arguments.clone(),
        Some(_) => {
            return Err(format!(
                "the ```{ACTION_FENCE} block's `arguments` must be a JSON object"
            ));
        }
    };
    Ok(ToolCall {
        id: prompted_id(text),
        name: name.to_owned(),
        arguments: arguments.to_string(),
    })
}

/// A prompted call's id: from its answer, so the same answer read again has the same id.
fn prompted_id(text: &str) -> String {
    use sha2::Digest;
    let hash = sha2::Sha256::digest(text.as_bytes());
    format!("call_{}", hex::encode(&hash[..6]))
}

/// The bodies of the answer's ```action blocks.
fn action_blocks(text: &str) -> Vec<&str> {
    let mut blocks = Vec::new();
    let mut rest = text;
    let open = format!("```{ACTION_FENCE}");
    while let Some(start) = rest.find(&open) {
        let after = &rest[start + open.len()..];
        // The fence's line ends the opening; anything else on it (`action json`) is not ours.
        let Some(newline) = after.find('\n') else {
            break;
        };
        if !after[..newline].trim().is_empty() {
            rest = &after[newline..];
            continue;
        }
        let body = &after[newline + 1..];
        let Some(end) = body.find("```") else {
            // An unclosed block still counts (a model cut off at its budget).
            blocks.push(body);
            break;
        };
        blocks.push(&body[..end]);
        rest = &body[end + 3..];
    }
    blocks
}

/// Why an answer's native calls cannot be carried out as they are: the first whose arguments
/// are not a JSON object (a model's own text, kept as it wrote it so the agent can quote it
/// back). `None`: every call's arguments are an object.
pub fn arguments_problem(calls: &[ToolCall]) -> Option<String> {
    calls.iter().find_map(
        |call| match serde_json::from_str::<Value>(&call.arguments) {
            Ok(Value::Object(_)) => None,
            Ok(_) => Some(format!(
                "the arguments of the call to `{}` ({}) must be a JSON object",
                call.name, call.id
            )),
            Err(e) => Some(format!(
                "the arguments of the call to `{}` ({}) are not JSON: {e}",
                call.name, call.id
            )),
        },
    )
}

/// An id for a call whose server gave none (some OpenAI-compatible servers leave it out):
/// from the answer and the call's place in it, so the same answer read again has the same id.
pub fn derived_id(answer: &str, index: usize) -> String {
    use sha2::Digest;
    let hash = sha2::Sha256::digest(format!("{index}\n{answer}").as_bytes());
    format!("call_{}", hex::encode(&hash[..6]))
}

/// The history as the prompted form sends it: an assistant turn is its text (which holds its
/// action block), a tool turn a user turn naming the call it answers.
pub fn prompted_history(messages: &[crate::Message]) -> Vec<crate::Message> {
    messages
        .iter()
        .map(|m| match m.role {
            crate::Role::Tool => crate::Message::user(format!(
                "Result of the action{}:\n{}",
                m.tool_call_id
                    .as_deref()
                    .map(|id| format!(" ({id})"))
                    .unwrap_or_default(),
                m.content
            )),
            crate::Role::Assistant if m.content.trim().is_empty() => {
                // A native call carried over (the form changed mid-run): written as the
                // action it was.
                let actions: Vec<String> = m
                    .tool_calls
                    .iter()
                    .map(|c| {
                        let arguments: Value = serde_json::from_str(&c.arguments)
                            .unwrap_or(Value::String(c.arguments.clone()));
                        format!(
                            "```{ACTION_FENCE}\n{}\n```",
                            serde_json::json!({"tool": c.name, "arguments": arguments})
                        )
                    })
                    .collect();
                crate::Message::assistant(actions.join("\n"))
            }
            _ => crate::Message {
                tool_calls: Vec::new(),
                ..m.clone()
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_action_is_read() {
        let call = parse_prompted(
            "I will list.\n```action\n{\"tool\": \"list_files\", \"arguments\": {\"path\": \".\"}}\n```\n",
        )
        .unwrap();
        assert_eq!(call.name, "list_files");
        assert_eq!(call.arguments, r#"{"path":"."}"#);
        assert!(call.id.starts_with("call_"));
    }

    #[test]
    fn missing_arguments_are_an_empty_object() {
        let call = parse_prompted("```action\n{\"tool\": \"run_tests\"}\n```").unwrap();
        assert_eq!(call.arguments, "{}");
    }

    #[test]
    fn malformed_actions_say_why() {
        let cases = [
            ("no block at all", "no ```action block"),
            (
                "```action\n{\"tool\": \"a\"}\n```\n```action\n{\"tool\": \"b\"}\n```",
                "2 ```action blocks",
            ),
            ("```action\n{\"tool\": \n```", "not JSON"),
            ("```action\n[1]\n```", "must be a JSON object"),
            ("```action\n{\"name\": \"x\"}\n```", "unknown field `name`"),
            ("```action\n{\"arguments\": {}}\n```", "needs `tool`"),
            (
                "```action\n{\"tool\": \"x\", \"arguments\": \"ls\"}\n```",
                "`arguments` must be a JSON object",
            ),
        ];
        for (text, why) in cases {
            let problem = parse_prompted(text).unwrap_err();
            assert!(problem.contains(why), "{text:?}: {problem}");
        }
    }

    #[test]
    fn another_fence_is_not_an_action() {
        let problem = parse_prompted("```python\nprint(1)\n```").unwrap_err();
        assert!(problem.contains("no ```action block"), "{problem}");
        let problem = parse_prompted("```action json\n{\"tool\": \"x\"}\n```").unwrap_err();
        assert!(problem.contains("no ```action block"), "{problem}");
    }

    #[test]
    fn the_same_answer_has_the_same_id() {
        let text = "```action\n{\"tool\": \"x\"}\n```";
        assert_eq!(
            parse_prompted(text).unwrap().id,
            parse_prompted(text).unwrap().id
        );
        assert_ne!(
            parse_prompted(text).unwrap().id,
            parse_prompted("again\n```action\n{\"tool\": \"x\"}\n```")
                .unwrap()
                .id
        );
    }

    #[test]
    fn native_arguments_that_are_not_an_object_are_named() {
        let call = |arguments: &str| ToolCall {
            id: "c1".into(),
            name: "run_shell".into(),
            arguments: arguments.into(),
        };
        assert_eq!(arguments_problem(&[call(r#"{"command":"ls"}"#)]), None);
        let problem = arguments_problem(&[call("{}"), call("{\"command\": ")]).unwrap();
        assert!(
            problem.contains("`run_shell` (c1) are not JSON"),
            "{problem}"
        );
        let problem = arguments_problem(&[call("[\"ls\"]")]).unwrap();
        assert!(problem.contains("must be a JSON object"), "{problem}");
    }

    #[test]
    fn derived_ids_differ_by_place_and_answer() {
        assert_eq!(derived_id("a", 0), derived_id("a", 0));
        assert_ne!(derived_id("a", 0), derived_id("a", 1));
        assert_ne!(derived_id("a", 0), derived_id("b", 0));
    }

    #[test]
    fn tool_turns_become_user_turns() {
        let history = prompted_history(&[
            crate::Message::user("task"),
            crate::Message {
                tool_calls: vec![ToolCall {
                    id: "c1".into(),
                    name: "run_shell".into(),
                    arguments: r#"{"command":"ls"}"#.into(),
                }],
                ..crate::Message::assistant("")
            },
            crate::Message::tool("c1", "a.txt"),
        ]);
        assert_eq!(history[1].role, crate::Role::Assistant);
        assert!(history[1].content.contains("\"tool\":\"run_shell\""));
        assert!(history[1].tool_calls.is_empty());
        assert_eq!(history[2].role, crate::Role::User);
        assert_eq!(history[2].content, "Result of the action (c1):\na.txt");
        // What the form writes, it reads back.
        assert_eq!(
            parse_prompted(&history[1].content).unwrap().name,
            "run_shell"
        );
    }
}
