//! What a run's recorded steps say: the conversation the model is shown, what is left to do,
//! what was spent, and whether the run is stuck. Everything here is read from the steps
//! alone, so a run taken again by another worker decides exactly as the first would have.

use proto::agent::{AgentCall, AgentLimits, AgentStep, AgentTotals, Cut};

/// A run's recorded steps.
#[derive(Debug, Clone, Default)]
pub struct Transcript {
    pub steps: Vec<AgentStep>,
}

/// What the run does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Record the run's start (its prompt and tools).
    Start,
    /// Ask the model.
    Ask,
    /// Carry out this call of the last answer (the calls before it have their observations).
    Call(AgentCall),
    /// Tell the model its last answer called no tool it could read.
    Malformed(String),
}

impl Transcript {
    pub fn new(steps: Vec<AgentStep>) -> Self {
        Self { steps }
    }

    /// The index the next recorded step gets.
    pub fn next_index(&self) -> u32 {
        u32::try_from(self.steps.len()).unwrap_or(u32::MAX)
    }

    /// Model steps taken.
    pub fn model_steps(&self) -> u32 {
        self.steps
            .iter()
            .filter(|s| matches!(s, AgentStep::Model { .. }))
            .count() as u32
    }

    pub fn next(&self) -> Next {
        if self.start().is_none() {
            return Next::Start;
        }
        let Some(last_answer) = self
            .steps
            .iter()
            .rposition(|s| matches!(s, AgentStep::Model { .. }))
        else {
            return Next::Ask;
        };
        let AgentStep::Model { calls, problem, .. } = &self.steps[last_answer] else {
            unreachable!("found as a model step")
        };
        let answered: Vec<Option<&str>> = self.steps[last_answer + 1..]
            .iter()
            .filter_map(|s| match s {
                AgentStep::Observation { call_id, .. } => Some(call_id.as_deref()),
                AgentStep::Model { .. } | AgentStep::Start { .. } => None,
            })
            .collect();
        if calls.is_empty() {
            if answered.is_empty() {
                return Next::Malformed(problem.clone().unwrap_or_else(|| {
                    "the answer called no tool: call one (the task ends only with `finish`)"
                        .to_owned()
                }));
            }
            return Next::Ask;
        }
        match calls.get(answered.len()) {
            Some(call) => Next::Call(call.clone()),
            None => Next::Ask,
        }
    }

    /// Whether the run has ended with `finish` (its observation recorded, not an error).
    pub fn finished(&self) -> bool {
        self.steps.iter().any(
            |s| matches!(s, AgentStep::Observation { tool, error: false, .. } if tool == "finish"),
        )
    }

    /// The observations in a row, from the last, that were malformed calls or answers.
    pub fn malformed_in_a_row(&self) -> u32 {
        let mut count = 0;
        for step in self.steps.iter().rev() {
            match step {
                AgentStep::Observation {
                    malformed: true, ..
                } => count += 1,
                AgentStep::Observation { .. } => break,
                AgentStep::Model { .. } | AgentStep::Start { .. } => {}
            }
        }
        count
    }

    /// Why the run is stuck, if it is: the same action with the same observation
    /// `limits.stuck_repeats` times in a row, or the same action failing
    /// `limits.stuck_errors` times in a row (OpenHands's two rules).
    pub fn stuck(&self, limits: &AgentLimits) -> Option<String> {
        let pairs = self.pairs();
        let repeated = |n: u32, errors: bool| {
            let n = n as usize;
            if n < 2 || pairs.len() < n {
                return false;
            }
            let tail = &pairs[pairs.len() - n..];
            let first = &tail[0];
            tail.iter().all(|p| {
                p.action == first.action
                    && if errors {
                        p.error
                    } else {
                        p.observation == first.observation
                    }
            })
        };
        if repeated(limits.stuck_repeats, false) {
            return Some(format!(
                "the same action got the same observation {} times in a row",
                limits.stuck_repeats
            ));
        }
        if repeated(limits.stuck_errors, true) {
            return Some(format!(
                "the same action failed {} times in a row",
                limits.stuck_errors
            ));
        }
        None
    }

    /// Each call with its observation, in order.
    fn pairs(&self) -> Vec<Pair<'_>> {
        let mut calls: std::collections::HashMap<&str, (&str, &str)> = Default::default();
        let mut pairs = Vec::new();
        for step in &self.steps {
            match step {
                AgentStep::Model { calls: made, .. } => {
                    for c in made {
                        calls.insert(c.id.as_str(), (c.tool.as_str(), c.arguments.as_str()));
                    }
                }
                AgentStep::Observation {
                    call_id: Some(id),
                    content,
                    error,
                    ..
                } => {
                    if let Some(action) = calls.get(id.as_str()) {
                        pairs.push(Pair {
                            action: *action,
                            observation: content,
                            error: *error,
                        });
                    }
                }
                AgentStep::Observation { .. } | AgentStep::Start { .. } => {}
            }
        }
        pairs
    }

    /// What the run spent so far (`wall_ms` is the caller's to set).
    pub fn totals(&self) -> AgentTotals {
        AgentTotals::of(&self.steps)
    }

    /// The packages the run installed (its `install_packages` calls that succeeded), in
    /// order: what a restore of its session installs again.
    pub fn packages(&self) -> Vec<String> {
        let mut installed = Vec::new();
        let calls: std::collections::HashMap<&str, &AgentCall> = self
            .steps
            .iter()
            .filter_map(|s| match s {
                AgentStep::Model { calls, .. } => Some(calls.iter()),
                _ => None,
            })
            .flatten()
            .map(|c| (c.id.as_str(), c))
            .collect();
        for step in &self.steps {
            if let AgentStep::Observation {
                call_id: Some(id),
                error: false,
                ..
            } = step
                && let Some(call) = calls.get(id.as_str())
                && call.tool == "install_packages"
                && let Ok(super::tools::Action::InstallPackages(a)) =
                    super::tools::read(&call.tool, &call.arguments)
            {
                for name in a.names {
                    if !installed.contains(&name) {
                        installed.push(name);
                    }
                }
            }
        }
        installed
    }

    /// The recorded start: the system prompt, the task and the tools.
    pub fn start(&self) -> Option<(&str, &str, &[proto::agent::AgentTool])> {
        self.steps.iter().find_map(|s| match s {
            AgentStep::Start {
                system,
                task,
                tools,
                ..
            } => Some((system.as_str(), task.as_str(), tools.as_slice())),
            _ => None,
        })
    }

    /// The conversation the model is shown after the system prompt: the task, then every
    /// step.
    pub fn messages(&self) -> Vec<model::Message> {
        let mut messages = Vec::with_capacity(self.steps.len());
        for step in &self.steps {
            match step {
                AgentStep::Start { task, .. } => messages.push(model::Message::user(task.clone())),
                AgentStep::Model { text, calls, .. } => messages.push(model::Message {
                    tool_calls: calls
                        .iter()
                        .map(|c| model::ToolCall {
                            id: c.id.clone(),
                            name: c.tool.clone(),
                            arguments: c.arguments.clone(),
                        })
                        .collect(),
                    ..model::Message::assistant(text.clone())
                }),
                AgentStep::Observation {
                    call_id: Some(id),
                    content,
                    ..
                } => messages.push(model::Message::tool(id.clone(), content.clone())),
                AgentStep::Observation {
                    call_id: None,
                    content,
                    ..
                } => messages.push(model::Message::user(content.clone())),
            }
        }
        messages
    }
}

struct Pair<'a> {
    action: (&'a str, &'a str),
    observation: &'a str,
    error: bool,
}

/// `text` within `max_chars` characters: over it, its first and last halves with a note of
/// what was cut between them (mini-swe-agent's rule), and what was cut.
pub fn cut(text: &str, max_chars: u32) -> (String, Option<Cut>) {
    let max = max_chars as usize;
    let total = text.chars().count();
    if total <= max {
        return (text.to_owned(), None);
    }
    let head_chars = max / 2;
    let tail_chars = max - head_chars;
    let omitted = total - head_chars - tail_chars;
    let head: String = text.chars().take(head_chars).collect();
    let tail: String = text.chars().skip(total - tail_chars).collect();
    (
        format!(
            "{head}\n[... {omitted} characters cut: the result was {total} characters; its first \
             and last {head_chars} are shown ...]\n{tail}"
        ),
        Some(Cut {
            total_chars: total as u64,
            omitted_chars: omitted as u64,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(index: u32, calls: &[(&str, &str, &str)]) -> AgentStep {
        AgentStep::Model {
            index,
            step: index + 1,
            text: String::new(),
            calls: calls
                .iter()
                .map(|(id, tool, arguments)| AgentCall {
                    id: (*id).into(),
                    tool: (*tool).into(),
                    arguments: (*arguments).into(),
                })
                .collect(),
            problem: None,
            prompt_tokens: 10,
            completion_tokens: 5,
            model_calls: 1,
            token_ids: None,
            duration_ms: 1,
            at_ms: 0,
            worker: "w1".into(),
        }
    }

    fn observed(index: u32, call: Option<&str>, content: &str, error: bool) -> AgentStep {
        AgentStep::Observation {
            index,
            call_id: call.map(str::to_owned),
            tool: "run_shell".into(),
            content: content.into(),
            error,
            malformed: call.is_none(),
            cut: None,
            cpu_ms: 3,
            duration_ms: 1,
            at_ms: 0,
            worker: "w1".into(),
            lessons: Vec::new(),
        }
    }

    fn start() -> AgentStep {
        AgentStep::Start {
            index: 0,
            system: "be careful".into(),
            task: "the task".into(),
            tools: Vec::new(),
            model: "scripted/scripted".into(),
            at_ms: 0,
            worker: "w1".into(),
        }
    }

    #[test]
    fn the_next_thing_follows_from_the_steps() {
        let mut t = Transcript::default();
        assert_eq!(t.next(), Next::Start);
        t.steps.push(start());
        assert_eq!(t.next(), Next::Ask);
        t.steps.push(answer(
            0,
            &[("a", "run_shell", "{}"), ("b", "list_files", "{}")],
        ));
        assert!(matches!(t.next(), Next::Call(c) if c.id == "a"));
        t.steps.push(observed(1, Some("a"), "ok", false));
        assert!(matches!(t.next(), Next::Call(c) if c.id == "b"));
        t.steps.push(observed(2, Some("b"), "ok", false));
        assert_eq!(t.next(), Next::Ask);
        t.steps.push(answer(3, &[]));
        assert!(matches!(t.next(), Next::Malformed(_)));
        t.steps.push(observed(4, None, "no tool", true));
        assert_eq!(t.next(), Next::Ask);
        assert_eq!(t.model_steps(), 2);
        assert_eq!(t.malformed_in_a_row(), 1);
        let totals = t.totals();
        assert_eq!(
            (totals.steps, totals.tool_calls, totals.prompt_tokens),
            (2, 2, 20)
        );
        assert_eq!(totals.sandbox_cpu_ms, 9);
    }

    #[test]
    fn the_conversation_holds_every_step() {
        let t = Transcript::new(vec![
            start(),
            answer(0, &[("a", "run_shell", r#"{"command":"ls"}"#)]),
            observed(1, Some("a"), "x.py", false),
            answer(2, &[]),
            observed(3, None, "call a tool", true),
        ]);
        let m = t.messages();
        assert_eq!(m.len(), 5);
        assert_eq!(m[0].content, "the task");
        assert_eq!(m[1].tool_calls[0].name, "run_shell");
        assert_eq!(m[2].role, model::Role::Tool);
        assert_eq!(m[2].tool_call_id.as_deref(), Some("a"));
        assert_eq!(m[4].role, model::Role::User);
    }

    #[test]
    fn stuck_is_repeats_of_one_action() {
        let limits = AgentLimits {
            stuck_repeats: 3,
            stuck_errors: 2,
            ..AgentLimits::default()
        };
        let mut t = Transcript::new(vec![start()]);
        for i in 0..2 {
            t.steps
                .push(answer(2 * i, &[(&format!("c{i}"), "run_shell", "{}")]));
            t.steps
                .push(observed(2 * i + 1, Some(&format!("c{i}")), "same", false));
        }
        assert_eq!(t.stuck(&limits), None);
        t.steps.push(answer(4, &[("c2", "run_shell", "{}")]));
        t.steps.push(observed(5, Some("c2"), "same", false));
        assert!(t.stuck(&limits).unwrap().contains("3 times"));
        // Another observation breaks the run of repeats.
        t.steps.push(answer(6, &[("c3", "run_shell", "{}")]));
        t.steps.push(observed(7, Some("c3"), "other", false));
        assert_eq!(t.stuck(&limits), None);
        // Two failures of one action in a row, with different errors.
        t.steps.push(answer(8, &[("c4", "list_files", "{}")]));
        t.steps.push(observed(9, Some("c4"), "error 1", true));
        t.steps.push(answer(10, &[("c5", "list_files", "{}")]));
        t.steps.push(observed(11, Some("c5"), "error 2", true));
        assert!(t.stuck(&limits).unwrap().contains("failed 2 times"));
    }

    #[test]
    fn a_long_result_keeps_its_head_and_tail() {
        let (short, none) = cut("abc", 10);
        assert_eq!((short.as_str(), none), ("abc", None));
        let text: String = ('a'..='z').collect();
        let (kept, what) = cut(&text, 10);
        assert!(kept.starts_with("abcde\n"), "{kept}");
        assert!(kept.ends_with("\nvwxyz"), "{kept}");
        assert!(kept.contains("16 characters cut"), "{kept}");
        assert_eq!(
            what,
            Some(Cut {
                total_chars: 26,
                omitted_chars: 16
            })
        );
        // Characters, not bytes: a multi-byte text is not split inside a character.
        let (kept, _) = cut(&"é".repeat(30), 10);
        assert!(kept.starts_with("ééééé\n"));
    }
}
