//! A scripted model: answers come from a JSON file, matched by phase and function. It is a
//! fake for tests and demos and reports itself as provider `scripted` everywhere.
//!
//! ```json
//! {"answers": [
//!   {"phase": "plan", "answer": {"functions": [...]}},
//!   {"phase": "implement", "function": "sieve", "answer": {"code": "...", "analysis": null}},
//!   {"phase": "repair", "function": "sieve", "text": "raw text, e.g. for the JSON fallback",
//!    "latency_ms": 50}
//! ]}
//! ```
//! Entries for the same phase and function are used in order; the last one repeats. An entry
//! without `function` matches any function of its phase.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::{CallError, ChatRequest, ChatResponse, Error, Phase, Provider, Usage};

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
    /// A structured answer.
    #[serde(default)]
    pub answer: Option<serde_json::Value>,
    /// A plain-text answer (used as is).
    #[serde(default)]
    pub text: Option<String>,
    /// Simulated latency.
    #[serde(default)]
    pub latency_ms: u64,
}

#[derive(Debug)]
pub struct Scripted {
    script: Script,
    /// How many times each entry group was used.
    used: Mutex<HashMap<(Phase, Option<String>), usize>>,
}

impl Scripted {
    pub fn new(script: Script) -> Result<Self, Error> {
        for (i, entry) in script.answers.iter().enumerate() {
            if entry.answer.is_some() == entry.text.is_some() {
                return Err(Error::Config(format!(
                    "scripted answer #{i} ({}): give exactly one of `answer` and `text`",
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

    /// The entry for this request, advancing through same-key entries.
    pub fn answer(&self, phase: Phase, function: Option<&str>) -> Option<&Entry> {
        let exact: Vec<&Entry> = self
            .script
            .answers
            .iter()
            .filter(|e| {
                e.phase == phase && e.function.is_some() && e.function.as_deref() == function
            })
            .collect();
        let (key, group) = if exact.is_empty() {
            let any: Vec<&Entry> = self
                .script
                .answers
                .iter()
                .filter(|e| e.phase == phase && e.function.is_none())
                .collect();
            ((phase, None), any)
        } else {
            ((phase, function.map(str::to_owned)), exact)
        };
        if group.is_empty() {
            return None;
        }
        let mut used = self.used.lock().expect("poisoned");
        let count = used.entry(key).or_insert(0);
        let entry = group[(*count).min(group.len() - 1)];
        *count += 1;
        Some(entry)
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

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, CallError> {
        let entry = self
            .answer(request.phase, request.function.as_deref())
            .ok_or_else(|| CallError::Rejected {
                status: 404,
                message: format!(
                    "the scripted model has no answer for phase {} function {}",
                    request.phase.as_str(),
                    request.function.as_deref().unwrap_or("-")
                ),
            })?;
        if entry.latency_ms > 0 {
            tokio::time::sleep(Duration::from_millis(entry.latency_ms)).await;
        }
        let prompt: usize = request.system.len()
            + request
                .messages
                .iter()
                .map(|m| m.content.len())
                .sum::<usize>();
        let (text, json) = match (&entry.answer, &entry.text) {
            (Some(answer), _) => (answer.to_string(), Some(answer.clone())),
            (None, Some(text)) => (text.clone(), None),
            (None, None) => unreachable!("checked in new()"),
        };
        Ok(ChatResponse {
            usage: Usage {
                prompt_tokens: (prompt as u64).div_ceil(4),
                completion_tokens: approx_tokens(&text),
            },
            text,
            json,
        })
    }
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
                .answer(Phase::Implement, f)
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
        assert!(scripted.answer(Phase::Plan, None).is_none());
    }

    #[test]
    fn an_entry_needs_exactly_one_answer_form() {
        let script: Script =
            serde_json::from_value(json!({"answers": [{"phase": "plan"}]})).unwrap();
        assert!(Scripted::new(script).is_err());
    }
}
