//! Agent jobs (`"mode": "agent"`): the model, given tools on a session of the job's own, decides
//! each next step until it calls `finish` or a budget ends the run. Every step is recorded as it
//! happens ([`AgentStep`]), so a run taken again by another worker goes on from its last
//! recorded step and makes no recorded model or tool call twice.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /v1/jobs`'s `agent` block: the run's budgets and sampling. Every field has a default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentSettings {
    /// Most model steps (1 to 500, default 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u32>,
    /// Most wall time of the run in seconds, queue waits and worker losses included (default
    /// 600; at most `coordinator.agent_max_seconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_seconds: Option<u64>,
    /// Most sandbox CPU time of the run's tool calls, in milliseconds (default 300000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cpu_ms: Option<u64>,
    /// Ends the run `stuck` when the same action got the same observation this many times in
    /// a row (default 4, as OpenHands).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stuck_repeats: Option<u32>,
    /// Ends the run `stuck` when the same action failed this many times in a row (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stuck_errors: Option<u32>,
    /// A tool result longer than this many characters keeps its first and last halves, with
    /// a note of what was cut (default 10000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_observation_chars: Option<u32>,
    /// Forwarded to the model with every step (OpenAI `seed`; Anthropic has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Forwarded to the model with every step, over `model.temperature`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
}

/// A validated agent request, stored with the job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRequest {
    pub limits: AgentLimits,
    #[serde(default)]
    pub seed: Option<u64>,
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Files put into the session's working directory before the first step.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// The session's memory limit.
    #[serde(default = "default_memory_mb")]
    pub memory_mb: u64,
}

fn default_memory_mb() -> u64 {
    512
}

/// A run's budgets, every one set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentLimits {
    pub max_steps: u32,
    pub max_seconds: u64,
    pub max_cpu_ms: u64,
    pub stuck_repeats: u32,
    pub stuck_errors: u32,
    pub max_observation_chars: u32,
    /// Malformed answers or calls in a row before the run ends `malformed`.
    pub max_malformed: u32,
}

impl Default for AgentLimits {
    fn default() -> Self {
        Self {
            max_steps: 50,
            max_seconds: 600,
            max_cpu_ms: 300_000,
            stuck_repeats: 4,
            stuck_errors: 3,
            max_observation_chars: 10_000,
            max_malformed: 3,
        }
    }
}

/// The id of job `job`'s session: one per agent job, found again by the run that takes it
/// after a worker's loss. The job's own id (a session id is a UUID like any other; a tenant
/// reads its agent's session as it reads its own).
pub fn session_id(job: crate::TaskId) -> String {
    job.to_string()
}

/// The task a worker runs an agent job's loop in; taken again after a worker's loss.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentTask {
    pub job_id: crate::TaskId,
}

/// A tool call as the model made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AgentCall {
    /// The model's id of the call (what its observation answers).
    pub id: String,
    pub tool: String,
    /// The arguments as the model wrote them (JSON text, not always valid).
    pub arguments: String,
}

/// What was cut from an observation over `max_observation_chars`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Cut {
    /// Characters of the whole result.
    pub total_chars: u64,
    /// Characters left out between the head and the tail.
    pub omitted_chars: u64,
}

/// A tool as the model was offered it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AgentTool {
    pub name: String,
    pub description: String,
    /// The JSON schema of its arguments.
    #[schema(value_type = Object)]
    pub parameters: serde_json::Value,
}

/// One recorded step of a run, in order; its `kind` names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AgentStep {
    /// The run's start: what the model is told before its first step, exactly (a run taken
    /// again goes on with these words, whatever its worker's templates say).
    Start {
        index: u32,
        system: String,
        task: String,
        tools: Vec<AgentTool>,
        /// `provider/model` of the run's worker.
        model: String,
        at_ms: u64,
        worker: String,
    },
    /// The model's answer: what it said and the tools it calls.
    Model {
        /// Position in the transcript, from 0.
        index: u32,
        /// The model step it is, from 1.
        step: u32,
        text: String,
        calls: Vec<AgentCall>,
        /// The answer was meant as a call that cannot be read as one: why.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        problem: Option<String>,
        prompt_tokens: u64,
        completion_tokens: u64,
        /// HTTP calls the answer took, retries included.
        model_calls: u32,
        /// The answer's token ids, where the server returned them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        token_ids: Option<Vec<u32>>,
        duration_ms: u64,
        at_ms: u64,
        /// The worker that ran the step.
        worker: String,
    },
    /// What a call (or a malformed answer) got back.
    Observation {
        index: u32,
        /// The call it answers; `None`: it answers a malformed answer as a whole.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        call_id: Option<String>,
        tool: String,
        content: String,
        /// The call failed (an error the model is shown), or was refused as malformed.
        error: bool,
        #[serde(default)]
        malformed: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        cut: Option<Cut>,
        /// Sandbox CPU time the call used.
        cpu_ms: u64,
        duration_ms: u64,
        at_ms: u64,
        worker: String,
        /// The lessons a failing `run_tests` was shown (ids, nearest first; their text ends
        /// `content`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        lessons: Vec<String>,
    },
}

impl AgentStep {
    pub fn index(&self) -> u32 {
        match self {
            AgentStep::Start { index, .. }
            | AgentStep::Model { index, .. }
            | AgentStep::Observation { index, .. } => *index,
        }
    }
}

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AgentEnd {
    /// The model called `finish`.
    Finished,
    /// `max_steps` model steps were taken.
    MaxSteps,
    /// `max_seconds` passed.
    WallTime,
    /// The job's `max_tokens_total` was spent.
    Tokens,
    /// `max_cpu_ms` of sandbox CPU was used.
    Cpu,
    /// The same action came back the same way too often in a row.
    Stuck,
    /// `max_malformed` malformed answers or calls in a row.
    Malformed,
    /// Its tenant cancelled it.
    Cancelled,
    /// The session or the model failed for good (the job's `failure` says how).
    Failed,
}

impl AgentEnd {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentEnd::Finished => "finished",
            AgentEnd::MaxSteps => "max_steps",
            AgentEnd::WallTime => "wall_time",
            AgentEnd::Tokens => "tokens",
            AgentEnd::Cpu => "cpu",
            AgentEnd::Stuck => "stuck",
            AgentEnd::Malformed => "malformed",
            AgentEnd::Cancelled => "cancelled",
            AgentEnd::Failed => "failed",
        }
    }
}

/// What a run spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AgentTotals {
    /// Model steps taken.
    pub steps: u32,
    /// Tool calls made (malformed ones included).
    pub tool_calls: u32,
    /// HTTP calls to the model, retries included.
    pub model_calls: u32,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub sandbox_cpu_ms: u64,
    /// From the job's submission to its end.
    pub wall_ms: u64,
    /// Times the run was taken again after its worker was lost.
    pub resumed: u32,
}

impl AgentTotals {
    /// What the recorded `steps` spent (`wall_ms` is the caller's to set); `resumed` counts
    /// the times the worker changed from one step to the next.
    pub fn of(steps: &[AgentStep]) -> Self {
        let mut totals = Self::default();
        let mut last_worker: Option<&str> = None;
        for step in steps {
            let worker = match step {
                AgentStep::Start { worker, .. } => worker,
                AgentStep::Model {
                    prompt_tokens,
                    completion_tokens,
                    model_calls,
                    worker,
                    ..
                } => {
                    totals.steps += 1;
                    totals.prompt_tokens += prompt_tokens;
                    totals.completion_tokens += completion_tokens;
                    totals.model_calls += model_calls;
                    worker
                }
                AgentStep::Observation {
                    cpu_ms,
                    call_id,
                    worker,
                    ..
                } => {
                    totals.tool_calls += u32::from(call_id.is_some());
                    totals.sandbox_cpu_ms += cpu_ms;
                    worker
                }
            };
            if last_worker.is_some_and(|w| w != worker) {
                totals.resumed += 1;
            }
            last_worker = Some(worker);
        }
        totals
    }
}

/// `steps` as OpenAI chat messages, one JSON object each (what `GET /v1/jobs/{id}/transcript`
/// answers, a line per message): the system prompt, the task, then each answer with its
/// `tool_calls` (and `token_ids` where the server returned them) and each call's `tool`
/// result; a malformed answer's feedback is a `user` message.
pub fn chat_messages(steps: &[AgentStep]) -> Vec<serde_json::Value> {
    use serde_json::json;
    let mut messages = Vec::with_capacity(steps.len() + 1);
    for step in steps {
        match step {
            AgentStep::Start { system, task, .. } => {
                messages.push(json!({"role": "system", "content": system}));
                messages.push(json!({"role": "user", "content": task}));
            }
            AgentStep::Model {
                text,
                calls,
                token_ids,
                ..
            } => {
                let mut message = json!({
                    "role": "assistant",
                    "content": if text.is_empty() && !calls.is_empty() { serde_json::Value::Null } else { json!(text) },
                });
                if !calls.is_empty() {
                    message["tool_calls"] = calls
                        .iter()
                        .map(|c| {
                            json!({"id": c.id, "type": "function",
                                   "function": {"name": c.tool, "arguments": c.arguments}})
                        })
                        .collect();
                }
                if let Some(ids) = token_ids {
                    message["token_ids"] = json!(ids);
                }
                messages.push(message);
            }
            AgentStep::Observation {
                call_id: Some(id),
                content,
                ..
            } => messages.push(json!({"role": "tool", "tool_call_id": id, "content": content})),
            AgentStep::Observation {
                call_id: None,
                content,
                ..
            } => messages.push(json!({"role": "user", "content": content})),
        }
    }
    messages
}

/// An agent job's outcome: part of its `JobResult`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AgentOutcome {
    pub ended_by: AgentEnd,
    /// What `finish` said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub answer: Option<String>,
    /// The files `finish` named, with their contents (UTF-8; others are named in `missing`).
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// Files `finish` named that could not be read (no such file, not text, too large): why.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub missing: BTreeMap<String, String>,
    pub totals: AgentTotals,
    /// The session the run worked in.
    pub session_id: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps() -> Vec<AgentStep> {
        vec![
            AgentStep::Start {
                index: 0,
                system: "sys".into(),
                task: "task".into(),
                tools: vec![AgentTool {
                    name: "run_shell".into(),
                    description: "d".into(),
                    parameters: serde_json::json!({"type": "object"}),
                }],
                model: "m".into(),
                at_ms: 1,
                worker: "w1".into(),
            },
            AgentStep::Model {
                index: 1,
                step: 1,
                text: String::new(),
                calls: vec![AgentCall {
                    id: "c1".into(),
                    tool: "run_shell".into(),
                    arguments: r#"{"command":"ls"}"#.into(),
                }],
                problem: None,
                prompt_tokens: 10,
                completion_tokens: 3,
                model_calls: 1,
                token_ids: Some(vec![1, 2, 3]),
                duration_ms: 5,
                at_ms: 2,
                worker: "w1".into(),
            },
            AgentStep::Observation {
                index: 2,
                call_id: Some("c1".into()),
                tool: "run_shell".into(),
                content: "a.txt".into(),
                error: false,
                malformed: false,
                cut: None,
                cpu_ms: 4,
                duration_ms: 6,
                at_ms: 3,
                worker: "w2".into(),
                lessons: Vec::new(),
            },
        ]
    }

    #[test]
    fn steps_cross_processes_whole() {
        for step in steps() {
            let bytes = crate::codec::encode(&step);
            let back: AgentStep = crate::codec::decode(&bytes).unwrap();
            assert_eq!(back, step);
        }
    }

    #[test]
    fn totals_count_what_the_steps_spent() {
        let totals = AgentTotals::of(&steps());
        assert_eq!(totals.steps, 1);
        assert_eq!(totals.tool_calls, 1);
        assert_eq!(totals.prompt_tokens, 10);
        assert_eq!(totals.sandbox_cpu_ms, 4);
        assert_eq!(totals.resumed, 1, "w1 then w2");
    }

    #[test]
    fn the_transcript_is_openai_chat_messages() {
        let messages = chat_messages(&steps());
        assert_eq!(messages.len(), 4);
        assert_eq!(messages[0]["role"], "system");
        assert_eq!(messages[1]["content"], "task");
        assert_eq!(messages[2]["content"], serde_json::Value::Null);
        assert_eq!(
            messages[2]["tool_calls"][0]["function"]["name"],
            "run_shell"
        );
        assert_eq!(messages[2]["tool_calls"][0]["type"], "function");
        assert_eq!(messages[2]["token_ids"], serde_json::json!([1, 2, 3]));
        assert_eq!(messages[3]["role"], "tool");
        assert_eq!(messages[3]["tool_call_id"], "c1");
    }
}
