//! The memory in an agent's run (`memory`): a failing `run_tests` is shown the tenant's
//! nearest lessons, in its observation (so a run taken again shows what was shown, and the
//! step names them); the next `run_tests` counts their use, helped when it passes; a passing
//! `run_tests` after a failing one leaves the lesson of the edits between them. The memory
//! never fails a run: Redis unavailable for it is a step without lessons (warned).

use memory::learn::Repair;
use proto::agent::AgentStep;
use proto::lesson::LessonSource;
use proto::{ErrorKind, Language};

use super::tools::{self, Action};
use super::{Agent, Run};

/// What the last `run_tests` before now said: its step's index, whether it failed, what it
/// printed and the lessons it was shown.
struct LastTests<'a> {
    index: u32,
    failed: bool,
    content: &'a str,
    lessons: &'a [String],
}

fn last_tests<'a>(steps: &'a [AgentStep]) -> Option<LastTests<'a>> {
    steps.iter().rev().find_map(|step| match step {
        AgentStep::Observation {
            index,
            tool,
            error,
            malformed: false,
            content,
            lessons,
            ..
        } if tool == "run_tests" => Some(LastTests {
            index: *index,
            failed: *error,
            content,
            lessons,
        }),
        _ => None,
    })
}

/// A failing test run's kind: an assertion when it says so, else a runtime error.
fn kind_of(output: &str) -> ErrorKind {
    if output.contains("AssertionError") || output.contains("AssertError") {
        ErrorKind::Assertion
    } else {
        ErrorKind::Runtime
    }
}

/// The files the run changed after step `since` (writes and edits that succeeded), each as
/// its text before and after: the whole file where the run wrote it before (an edit applied
/// to it), else an edit's old and new parts, or nothing before a first write.
fn edits_since(steps: &[AgentStep], since: u32) -> Vec<(String, String, String)> {
    let succeeded = |id: &str| {
        steps.iter().any(|s| {
            matches!(s, AgentStep::Observation { call_id: Some(c), error: false, .. } if c == id)
        })
    };
    let mut written: std::collections::HashMap<String, String> = Default::default();
    let mut edits = Vec::new();
    for step in steps {
        let AgentStep::Model { index, calls, .. } = step else {
            continue;
        };
        for call in calls {
            if !succeeded(&call.id) {
                continue;
            }
            match tools::read(&call.tool, &call.arguments) {
                Ok(Action::WriteFile(w)) => {
                    let before = written.insert(w.path.clone(), w.content.clone());
                    if *index > since {
                        edits.push((w.path, before.unwrap_or_default(), w.content));
                    }
                }
                Ok(Action::EditFile(e)) => {
                    // The whole file where the run wrote it (the edit applied), else the parts.
                    let (before, after) = match written.get(&e.path) {
                        Some(content) => (content.clone(), content.replacen(&e.old, &e.new, 1)),
                        None => (e.old.clone(), e.new.clone()),
                    };
                    if written.contains_key(&e.path) {
                        written.insert(e.path.clone(), after.clone());
                    }
                    if *index > since {
                        edits.push((e.path, before, after));
                    }
                }
                _ => {}
            }
        }
    }
    edits
}

/// The text the model last said before step `since`'s successors: its reasoning beside the
/// edit, as the lesson's analysis.
fn reasoning_since(steps: &[AgentStep], since: u32) -> String {
    steps
        .iter()
        .rev()
        .find_map(|s| match s {
            AgentStep::Model { index, text, .. } if *index > since && !text.trim().is_empty() => {
                Some(text.clone())
            }
            _ => None,
        })
        .unwrap_or_default()
}

impl Agent {
    fn memory_for(&self, run: &Run<'_>) -> Option<&memory::Memory> {
        self.memory
            .as_ref()
            .filter(|m| m.is_on() && run.meta.request.memory.is_on())
    }

    /// A `run_tests` of `path` observed `output` (failed or not): counts the use of what the
    /// one before was shown, keeps the lesson of a fix, and answers the lessons a failing
    /// one is shown (their text for the observation, and their ids).
    pub(super) async fn tests_observed(
        &self,
        run: &Run<'_>,
        path: &str,
        failed: bool,
        output: &str,
    ) -> Option<(String, Vec<String>)> {
        let memory = self.memory_for(run)?;
        let meta = run.meta;
        let tenant = meta.tenant.as_deref();
        let language: Language = meta.request.language;
        let steps = &run.transcript.steps;
        if let Some(last) = last_tests(steps).filter(|l| l.failed) {
            if !last.lessons.is_empty()
                && let Err(e) = memory
                    .used_ids(tenant, last.lessons, meta.id, path, !failed)
                    .await
            {
                tracing::warn!(job = %meta.id, error = %e, "lesson uses not counted");
            }
            if !failed {
                let edits = edits_since(steps, last.index);
                if !edits.is_empty() {
                    let join = |part: fn(&(String, String, String)) -> &String| {
                        edits
                            .iter()
                            .map(|e| format!("# {}\n{}\n", e.0, part(e).trim_end()))
                            .collect::<String>()
                    };
                    let (before, after) = (join(|e| &e.1), join(|e| &e.2));
                    let analysis = reasoning_since(steps, last.index);
                    let model = self.model.describe();
                    let repair = Repair {
                        language,
                        error_kind: kind_of(last.content),
                        error: last.content,
                        case: None,
                        before: &before,
                        after: &after,
                        analysis: &analysis,
                        model: &model,
                        job: meta.id,
                        function: path,
                        source: LessonSource::Agent,
                        given: false,
                        now_ms: proto::now_ms(),
                    };
                    if let Some(lesson) =
                        memory::learn::lesson(&repair, memory.options().max_diff_bytes)
                        && let Err(e) = memory.learn(tenant, &lesson).await
                    {
                        tracing::warn!(job = %meta.id, error = %e, "lesson not kept");
                    }
                }
            }
        }
        if !failed {
            return None;
        }
        let signature = memory::signature::signature(kind_of(output), output, None);
        let query = memory::Query {
            language,
            signature: &signature,
            text: output,
        };
        let found = match memory.nearest(tenant, &query).await {
            Ok(found) if !found.is_empty() => found,
            Ok(_) => return None,
            Err(e) => {
                tracing::warn!(job = %meta.id, error = %e, "no lessons for this step");
                return None;
            }
        };
        let mut text = String::from(
            "\n\nLessons from earlier repairs of similar failures (use one only where it fits this failure):",
        );
        for f in &found {
            let l = &f.lesson;
            text.push_str(&format!(
                "\n- {}: {}\n  failing then: {}\n  the fix then:\n{}",
                l.signature,
                if l.analysis.is_empty() {
                    "(no analysis)"
                } else {
                    &l.analysis
                },
                l.case,
                l.diff.trim_end()
            ));
        }
        Some((text, found.into_iter().map(|f| f.lesson.id).collect()))
    }
}
