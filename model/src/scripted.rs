//! A scripted model: answers come from a JSON file, matched by phase and function. It is a
//! fake for tests and demos and reports itself as provider `scripted` everywhere.
//!
//! ```json
//! {"answers": [
//!   {"phase": "plan", "answer": {"functions": [...]}},
//!   {"phase": "implement", "function": "sieve", "answer": {"code": "...", "analysis": null}},
//!   {"phase": "repair", "function": "sieve", "text": "raw text, e.g. for the JSON fallback",
//!    "latency_ms": 50},
//!   {"phase": "agent", "function": "run-1", "text": "optional reasoning",
//!    "tool_calls": [{"name": "run_shell", "arguments": {"command": "ls"}},
//!                   {"name": "run_shell", "arguments": "{\"command\": "}]}
//! ]}
//! ```
//! An agent step's entry answers with `tool_calls` (and `text` beside them, if given): each
//! call's `arguments` is a JSON object, or a string sent as it is (malformed arguments, the
//! way a model gets them wrong). Call ids are `call_<entry>_<k>_<use>` (the entry's place in
//! the file, the call's in the answer, the entry's use count): the same in every run of a
//! script, and never the same twice in one.
//! Entries for the same phase and function are used in order; the last one repeats. An entry
//! without `function` matches any function of its phase. An entry with `prompt_contains`
//! answers only requests whose prompt (system and messages) contains that text, and takes
//! precedence over entries without it; this is how one script answers several requests (e.g.
//! a plan per instruction).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::{CallError, ChatRequest, ChatResponse, Error, Phase, Provider, ToolCall, Usage};

/// The script file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    pub answers: Vec<Entry>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub phase: Phase,
    #[serde(default)]
    pub function: Option<String>,
    /// Only for requests whose prompt contains this text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_contains: Option<String>,
    /// A structured answer.
    #[serde(default)]
    pub answer: Option<serde_json::Value>,
    /// A plain-text answer (used as is).
    #[serde(default)]
    pub text: Option<String>,
    /// Simulated latency.
    #[serde(default)]
    pub latency_ms: u64,
    /// Fail with this HTTP status instead of answering (e.g. 503 to script an outage);
    /// `answer` and `text` are then left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// An agent step's tool calls (with `text` or without).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ScriptedCall>>,
}

/// One scripted tool call.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedCall {
    pub name: String,
    /// A JSON value, sent as its JSON text; a string is sent as it is (its own JSON text,
    /// right or wrong).
    #[serde(default = "no_arguments")]
    pub arguments: serde_json::Value,
}

fn no_arguments() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

/// The entry a request was answered from, and where it stands.
#[derive(Debug, Clone, Copy)]
pub struct Picked<'a> {
    pub entry: &'a Entry,
    /// The entry's place in the script.
    pub index: usize,
    /// How many times its group was used before (0 the first time).
    pub used: usize,
}

impl Picked<'_> {
    /// The entry's tool calls with their ids ([`Scripted`]'s module docs), arguments as text.
    pub fn tool_calls(&self) -> Vec<ToolCall> {
        let Some(calls) = &self.entry.tool_calls else {
            return Vec::new();
        };
        calls
            .iter()
            .enumerate()
            .map(|(k, call)| ToolCall {
                id: format!("call_{}_{k}_{}", self.index, self.used),
                name: call.name.clone(),
                arguments: match &call.arguments {
                    serde_json::Value::String(raw) => raw.clone(),
                    other => other.to_string(),
                },
            })
            .collect()
    }

    /// The answer's text: the structured answer's JSON, the text, or none beside tool calls.
    pub fn text(&self) -> String {
        match (&self.entry.answer, &self.entry.text) {
            (Some(answer), _) => answer.to_string(),
            (None, Some(text)) => text.clone(),
            (None, None) => String::new(),
        }
    }
}

type GroupKey = (Phase, Option<String>, Option<String>);

#[derive(Debug)]
pub struct Scripted {
    script: Script,
    /// How many times each entry group (phase, function, prompt filter) was used.
    used: Mutex<HashMap<GroupKey, usize>>,
}

impl Scripted {
    pub fn new(script: Script) -> Result<Self, Error> {
        for (i, entry) in script.answers.iter().enumerate() {
            // `text` may go with `tool_calls` (the reasoning before the calls), nothing else.
            let given = [
                entry.answer.is_some(),
                entry.text.is_some() || entry.tool_calls.is_some(),
                entry.status.is_some(),
            ];
            if given.iter().filter(|g| **g).count() != 1 {
                return Err(Error::Config(format!(
                    "scripted answer #{i} ({}): give exactly one of `answer`, `text` (with \
                     `tool_calls` or without), `tool_calls` and `status`",
                    entry.phase.as_str()
                )));
            }
            if let Some(calls) = &entry.tool_calls
                && (calls.is_empty() || calls.iter().any(|c| c.name.is_empty()))
            {
                return Err(Error::Config(format!(
                    "scripted answer #{i} ({}): `tool_calls` needs at least one call, each \
                     with a `name`",
                    entry.phase.as_str()
                )));
            }
        }
        Ok(Self {
            script,
            used: Mutex::default(),
        })
    }

    pub fn from_file(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Config(format!("scripted model file {}: {e}", path.display())))?;
        let script: Script = serde_json::from_str(&text)
            .map_err(|e| Error::Config(format!("scripted model file {}: {e}", path.display())))?;
        Self::new(script)
    }

    /// The entry for a request about `function` in `phase` whose prompt is `prompt`,
    /// advancing through same-key entries. Groups are tried in this order: this function with
    /// a matching `prompt_contains`, this function without one, then the same for entries
    /// without a function.
    pub fn answer(&self, phase: Phase, function: Option<&str>, prompt: &str) -> Option<&Entry> {
        self.pick(phase, function, prompt)
            .map(|picked| picked.entry)
    }

    /// [`Scripted::answer`], with the entry's place and use count (what its calls' ids are
    /// made of).
    pub fn pick(&self, phase: Phase, function: Option<&str>, prompt: &str) -> Option<Picked<'_>> {
        let tiers = [(true, true), (true, false), (false, true), (false, false)];
        for (exact, filtered) in tiers {
            let group: Vec<(usize, &Entry)> = self
                .script
                .answers
                .iter()
                .enumerate()
                .filter(|(_, e)| e.phase == phase)
                .filter(|(_, e)| {
                    if exact {
                        e.function.is_some() && e.function.as_deref() == function
                    } else {
                        e.function.is_none()
                    }
                })
                .filter(|(_, e)| match &e.prompt_contains {
                    Some(needle) => filtered && prompt.contains(needle.as_str()),
                    None => !filtered,
                })
                .collect();
            let Some((_, first)) = group.first().copied() else {
                continue;
            };
            // Several filters may match one prompt: the first one in the file wins.
            let group: Vec<(usize, &Entry)> = group
                .into_iter()
                .filter(|(_, e)| e.prompt_contains == first.prompt_contains)
                .collect();
            let key = (phase, first.function.clone(), first.prompt_contains.clone());
            let mut used = self.used.lock().expect("poisoned");
            let count = used.entry(key).or_insert(0);
            let (index, entry) = group[(*count).min(group.len() - 1)];
            let picked = Picked {
                entry,
                index,
                used: *count,
            };
            *count += 1;
            return Some(picked);
        }
        None
    }
}

/// What a scripted `status` entry fails with, classified as a real provider's answer would be.
fn scripted_failure(status: u16) -> CallError {
    let message = format!("scripted failure: HTTP {status}");
    if status == 429 || status == 529 {
        CallError::Throttled {
            message,
            retry_after: None,
        }
    } else if status >= 500 && !matches!(status, 502..=504) {
        CallError::ServerError {
            status,
            message,
            retry_after: None,
        }
    } else if status >= 500 {
        CallError::Retryable {
            message,
            retry_after: None,
        }
    } else {
        CallError::Rejected { status, message }
    }
}

/// A rough token count for scripted answers (about four characters a token); real providers
/// report exact counts.
pub(crate) fn approx_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

#[async_trait]
impl Provider for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }

    fn model(&self) -> &str {
        "scripted"
    }

    fn endpoint(&self) -> &str {
        "a scripted (FAKE) model in this process"
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, CallError> {
        let prompt = prompt_of(request);
        let picked = self
            .pick(request.phase, request.function.as_deref(), &prompt)
            .ok_or_else(|| CallError::Rejected {
                status: 404,
                message: format!(
                    "the scripted model has no answer for phase {} function {}",
                    request.phase.as_str(),
                    request.function.as_deref().unwrap_or("-")
                ),
            })?;
        let entry = picked.entry;
        if entry.latency_ms > 0 {
            tokio::time::sleep(Duration::from_millis(entry.latency_ms)).await;
        }
        if let Some(status) = entry.status {
            return Err(scripted_failure(status));
        }
        let text = picked.text();
        let json = entry.answer.clone();
        let tool_calls = picked.tool_calls();
        Ok(ChatResponse {
            usage: Usage {
                prompt_tokens: (prompt.len() as u64).div_ceil(4),
                completion_tokens: approx_tokens(&text),
            },
            text,
            json,
            truncated: false,
            others: Vec::new(),
            tool_problem: crate::tools::arguments_problem(&tool_calls),
            tool_calls,
            token_ids: None,
        })
    }
}

/// What `prompt_contains` looks in: the system prompt, then every turn's text and the calls
/// it made (name and arguments), run together as a server sees them.
fn prompt_of(request: &ChatRequest) -> String {
    let mut prompt = request.system.clone();
    for m in &request.messages {
        prompt.push_str(&m.content);
        for call in &m.tool_calls {
            prompt.push_str(&call.name);
            prompt.push_str(&call.arguments);
        }
    }
    prompt
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn entries_advance_per_function_and_the_last_repeats() {
        let script: Script = serde_json::from_value(json!({"answers": [
            {"phase": "implement", "function": "f", "answer": {"n": 1}},
            {"phase": "implement", "function": "f", "answer": {"n": 2}},
            {"phase": "implement", "answer": {"n": 0}},
        ]}))
        .unwrap();
        let scripted = Scripted::new(script).unwrap();
        let n = |f: Option<&str>| {
            scripted
                .answer(Phase::Implement, f, "")
                .unwrap()
                .answer
                .clone()
                .unwrap()["n"]
                .clone()
        };
        assert_eq!(n(Some("f")), 1);
        assert_eq!(n(Some("f")), 2);
        assert_eq!(n(Some("f")), 2);
        assert_eq!(n(Some("g")), 0, "falls back to the function-less entry");
        assert!(scripted.answer(Phase::Plan, None, "").is_none());
    }

    #[test]
    fn entries_with_a_prompt_filter_answer_the_prompts_that_contain_it_first() {
        let script: Script = serde_json::from_value(json!({"answers": [
            {"phase": "plan", "answer": {"n": 0}},
            {"phase": "plan", "prompt_contains": "palindrome", "answer": {"n": 1}},
            {"phase": "plan", "prompt_contains": "median", "answer": {"n": 2}},
            {"phase": "plan", "prompt_contains": "median", "answer": {"n": 3}},
            {"phase": "tests", "function": "f", "prompt_contains": "strict", "answer": {"n": 4}},
            {"phase": "tests", "function": "f", "answer": {"n": 5}},
        ]}))
        .unwrap();
        let scripted = Scripted::new(script).unwrap();
        let n = |phase: Phase, f: Option<&str>, prompt: &str| {
            scripted
                .answer(phase, f, prompt)
                .unwrap()
                .answer
                .clone()
                .unwrap()["n"]
                .clone()
        };
        assert_eq!(n(Phase::Plan, None, "sum the primes"), 0);
        assert_eq!(n(Phase::Plan, None, "is it a palindrome?"), 1);
        assert_eq!(n(Phase::Plan, None, "mean and median"), 2);
        assert_eq!(n(Phase::Plan, None, "mean and median"), 3);
        assert_eq!(
            n(Phase::Plan, None, "mean and median"),
            3,
            "the last one repeats"
        );
        assert_eq!(
            n(Phase::Plan, None, "primes again"),
            0,
            "unfiltered group unaffected"
        );
        assert_eq!(
            n(Phase::Plan, None, "palindrome or median"),
            1,
            "first match wins"
        );
        assert_eq!(n(Phase::Tests, Some("f"), "strict cases"), 4);
        assert_eq!(n(Phase::Tests, Some("f"), "cases"), 5);
    }

    #[test]
    fn an_entry_needs_exactly_one_answer_form() {
        let script = |entry: serde_json::Value| -> Script {
            serde_json::from_value(json!({"answers": [entry]})).unwrap()
        };
        let call = json!([{"name": "run_shell", "arguments": {"command": "ls"}}]);
        for wrong in [
            json!({"phase": "plan"}),
            json!({"phase": "agent", "tool_calls": call, "status": 500}),
            json!({"phase": "agent", "tool_calls": call, "answer": {}}),
            json!({"phase": "agent", "tool_calls": []}),
            json!({"phase": "agent", "tool_calls": [{"name": ""}]}),
        ] {
            assert!(Scripted::new(script(wrong.clone())).is_err(), "{wrong}");
        }
        for right in [
            json!({"phase": "agent", "tool_calls": call}),
            json!({"phase": "agent", "tool_calls": call, "text": "I look first."}),
            json!({"phase": "agent", "text": "done"}),
        ] {
            assert!(Scripted::new(script(right.clone())).is_ok(), "{right}");
        }
    }

    #[test]
    fn scripted_calls_have_ids_unique_per_answer_and_raw_arguments() {
        let script: Script = serde_json::from_value(json!({"answers": [
            {"phase": "plan", "answer": {}},
            {"phase": "agent", "function": "r", "tool_calls": [
                {"name": "run_shell", "arguments": {"command": "ls"}},
                {"name": "run_shell", "arguments": "{\"command\": "},
                {"name": "run_tests"},
            ]},
        ]}))
        .unwrap();
        let scripted = Scripted::new(script).unwrap();
        let first = scripted.pick(Phase::Agent, Some("r"), "").unwrap();
        let calls = first.tool_calls();
        let ids: Vec<&str> = calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["call_1_0_0", "call_1_1_0", "call_1_2_0"]);
        assert_eq!(calls[0].arguments, r#"{"command":"ls"}"#);
        assert_eq!(
            calls[1].arguments, r#"{"command": "#,
            "a raw string is sent as it is"
        );
        assert_eq!(calls[2].arguments, "{}");
        let again = scripted.pick(Phase::Agent, Some("r"), "").unwrap();
        assert_eq!(
            again.tool_calls()[0].id,
            "call_1_0_1",
            "the last entry repeats, anew"
        );
    }
}

/// A FAKE provider for tests of the limits: every call takes `delay` and answers a fixed
/// implementation; it counts the calls and the most in flight at once, and above
/// `throttle_above` calls at once it answers 429 (with `Retry-After: retry_after`). With
/// [`Self::with_slots`] it runs that many calls at once, as a model server's slots, and the
/// others wait their turn in it, first come first served; each answer is then 100 completion
/// tokens.
#[derive(Debug)]
pub struct Counting {
    delay: Duration,
    throttle_above: usize,
    retry_after: Duration,
    slots: Option<tokio::sync::Semaphore>,
    now: std::sync::atomic::AtomicUsize,
    peak: std::sync::atomic::AtomicUsize,
    calls: std::sync::atomic::AtomicUsize,
    throttled: std::sync::atomic::AtomicUsize,
}

impl Counting {
    pub fn new(delay: Duration, throttle_above: usize, retry_after: Duration) -> Self {
        Self {
            delay,
            throttle_above,
            retry_after,
            slots: None,
            now: Default::default(),
            peak: Default::default(),
            calls: Default::default(),
            throttled: Default::default(),
        }
    }

    /// A server of `slots` calls at once, each `delay` once it has its slot; never 429.
    pub fn with_slots(delay: Duration, slots: usize) -> Self {
        Self {
            slots: Some(tokio::sync::Semaphore::new(slots)),
            ..Self::new(delay, usize::MAX, Duration::ZERO)
        }
    }

    /// Calls received, throttled ones included.
    pub fn calls(&self) -> usize {
        self.calls.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The most calls in flight at once (a throttled one counts at its arrival).
    pub fn peak(&self) -> usize {
        self.peak.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Calls answered 429.
    pub fn throttled(&self) -> usize {
        self.throttled.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[async_trait]
impl Provider for Counting {
    fn name(&self) -> &str {
        "counting"
    }

    fn model(&self) -> &str {
        "counting"
    }

    fn endpoint(&self) -> &str {
        "a counting (FAKE) model in this process"
    }

    async fn chat(&self, _: &ChatRequest) -> Result<ChatResponse, CallError> {
        use std::sync::atomic::Ordering::SeqCst;
        let now = self.now.fetch_add(1, SeqCst) + 1;
        self.peak.fetch_max(now, SeqCst);
        self.calls.fetch_add(1, SeqCst);
        if now > self.throttle_above {
            self.now.fetch_sub(1, SeqCst);
            self.throttled.fetch_add(1, SeqCst);
            return Err(CallError::Throttled {
                message: "HTTP 429: too many requests (FAKE)".into(),
                retry_after: Some(self.retry_after),
            });
        }
        // Tokio's semaphore is fair: the calls waiting for a slot start in their order.
        let slot = match &self.slots {
            Some(slots) => Some(slots.acquire().await.expect("never closed")),
            None => None,
        };
        tokio::time::sleep(self.delay).await;
        drop(slot);
        self.now.fetch_sub(1, SeqCst);
        Ok(ChatResponse {
            text: r#"{"code": "x = 1", "analysis": null}"#.into(),
            json: None,
            usage: Usage {
                completion_tokens: if self.slots.is_some() { 100 } else { 0 },
                ..Usage::default()
            },
            truncated: false,
            others: Vec::new(),
            tool_calls: Vec::new(),
            tool_problem: None,
            token_ids: None,
        })
    }
}
