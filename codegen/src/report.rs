//! How the CLI shows jobs: the markdown report of a result, the terse summary, progress lines.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use proto::api::{BatchJobStatus, JobProgress};
use proto::job::{CacheOutcome, JobResult, JobStatus, TestResult, Validation};
use proto::{ErrorKind, Progress};

/// Milliseconds for people: `850 ms`, `3.2 s`, `2 min 5 s`.
pub(crate) fn duration(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms} ms"),
        1_000..=59_999 => format!("{:.1} s", ms as f64 / 1000.0),
        _ => format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000),
    }
}

fn percent(share: f64) -> String {
    format!("{:.0}%", share * 100.0)
}

/// A share, or "not measured".
fn measured(share: Option<f64>) -> String {
    share.map_or_else(|| "not measured".to_owned(), percent)
}

/// The first line of `text`, with a mark when there was more.
fn first_line(text: &str) -> String {
    let mut lines = text.trim().lines();
    let first = lines.next().unwrap_or_default().to_owned();
    if lines.next().is_some() {
        format!("{first} …")
    } else {
        first
    }
}

fn signature(result: &JobResult, name: &str) -> String {
    match result.function_specs.iter().find(|s| s.name == name) {
        Some(spec) => {
            let params: Vec<String> = spec
                .inputs
                .iter()
                .map(|p| format!("{}: {}", p.name, p.ty))
                .collect();
            format!("{name}({}) -> {}", params.join(", "), spec.outputs.ty)
        }
        None => format!("{name}()"),
    }
}

/// Function names in plan order, then any others the result mentions.
fn function_names(result: &JobResult) -> Vec<String> {
    let mut names: Vec<String> = result
        .function_specs
        .iter()
        .map(|s| s.name.clone())
        .collect();
    for name in result.implementations.keys() {
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    names
}

fn tests_of<'a>(result: &'a JobResult, name: &str) -> Vec<&'a TestResult> {
    result
        .test_results
        .iter()
        .filter(|t| t.function == name)
        .collect()
}

/// The verdict line: `✅ succeeded …`, `⚠️ untested …` (static checks only) or `❌ failed …`.
pub fn verdict(result: &JobResult) -> String {
    let passed = result.test_results.iter().filter(|t| t.passed).count();
    let total = result.test_results.len();
    if result.status == JobStatus::Succeeded && result.validation != Validation::Tested {
        format!(
            "⚠️ untested: {} checks pass, nothing was run ({} functions; job {}); manual review recommended",
            result.validation,
            function_names(result).len(),
            result.job_id
        )
    } else if result.status == JobStatus::Succeeded {
        format!(
            "✅ succeeded: {passed}/{total} tests pass ({} functions; job {})",
            function_names(result).len(),
            result.job_id
        )
    } else {
        format!(
            "❌ {}: {} ({passed}/{total} tests pass; job {})",
            result.status.as_str(),
            first_line(result.failure.as_deref().unwrap_or("no reason given")),
            result.job_id
        )
    }
}

/// The markdown report of a finished job.
pub fn markdown(result: &JobResult) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}\n", verdict(result));
    let _ = writeln!(
        out,
        "> {}\n",
        result.instruction.trim().replace('\n', "\n> ")
    );
    if let Some(failure) = result.failure.as_ref().filter(|f| f.contains('\n')) {
        let _ = writeln!(out, "```text\n{}\n```\n", failure.trim_end());
    }
    if result.validation != Validation::Tested {
        let _ = writeln!(
            out,
            "⚠️ validation: {}{}\n",
            result.validation,
            if result.manual_review_recommended {
                "; manual review recommended"
            } else {
                ""
            }
        );
    }

    if let Some(change) = &result.change {
        out.push_str(&change_section(change));
    }
    let language = result.language.as_str();
    for name in function_names(result) {
        let _ = writeln!(out, "## `{}`\n", signature(result, &name));
        if let Some(spec) = result.function_specs.iter().find(|s| s.name == name) {
            let _ = writeln!(out, "{}\n", spec.purpose.trim());
        }
        match result.implementations.get(&name) {
            Some(code) => {
                let _ = writeln!(out, "```{language}\n{}\n```\n", code.trim_end());
            }
            None => {
                let _ = writeln!(out, "_not implemented_\n");
            }
        }
        let tests = tests_of(result, &name);
        let passed = tests.iter().filter(|t| t.passed).count();
        let _ = writeln!(out, "Tests: {passed}/{} passed\n", tests.len());
        for test in &tests {
            if test.passed {
                let _ = writeln!(out, "- ✓ `{}`", test.test);
            } else {
                let error = test.error.as_deref().map(first_line).unwrap_or_default();
                let kind = test
                    .error_kind
                    .map(|k| format!(" ({k})"))
                    .unwrap_or_default();
                let _ = writeln!(out, "- ✗ `{}`{kind}: {error}", test.test);
            }
        }
        if !tests.is_empty() {
            out.push('\n');
        }
    }

    let m = &result.metrics;
    let _ = writeln!(out, "## Timings\n");
    let _ = writeln!(out, "| generation | execution | total |");
    let _ = writeln!(out, "| ---: | ---: | ---: |");
    let _ = writeln!(
        out,
        "| {} | {} | {} |\n",
        duration(m.generation_ms),
        duration(m.execution_ms),
        duration(m.total_ms)
    );
    let _ = writeln!(
        out,
        "{} model calls, {} prompt + {} completion tokens, solution cache: {}\n",
        m.model_calls, m.tokens.prompt, m.tokens.completion, m.cache
    );

    let q = &result.quality;
    let _ = writeln!(out, "## Quality\n");
    let complexity: Vec<String> = q
        .complexity
        .iter()
        .map(|(name, c)| format!("{name} {c}"))
        .collect();
    let _ = writeln!(
        out,
        "Score **{:.2}** / 1: tests {}/{}, line coverage {}, docstrings {}, cyclomatic complexity {}, dangerous calls: {}\n",
        q.score,
        q.tests_passed,
        q.tests_total,
        measured(q.coverage),
        measured(q.docstrings),
        if complexity.is_empty() {
            "-".to_owned()
        } else {
            complexity.join(", ")
        },
        if q.dangerous_calls.is_empty() {
            "none".to_owned()
        } else {
            q.dangerous_calls.join(", ")
        }
    );
    if !q.warnings.is_empty() {
        let _ = writeln!(out, "Warnings ({}):\n", q.warnings.len());
        for warning in &q.warnings {
            let _ = writeln!(out, "- {warning}");
        }
        out.push('\n');
    }

    let _ = writeln!(out, "## Improvement history\n");
    out.push_str(&history(result));
    out
}

/// A `debug` or `refactor` job's change: why, what, which cases reproduced the error (or were
/// left out), the quality before, and the diff.
fn change_section(change: &proto::job::Change) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "## The change ({}: `{}`)\n",
        change.mode.as_str(),
        change.function
    );
    if let Some(cause) = &change.root_cause {
        let _ = writeln!(out, "Cause: {}\n", cause.trim());
    }
    if let Some(changes) = &change.changes {
        let _ = writeln!(out, "Changes: {}\n", changes.trim());
    }
    if !change.goals.is_empty() {
        let _ = writeln!(out, "Goals: {}\n", change.goals.join(", "));
    }
    if !change.reproducing_tests.is_empty() {
        let _ = writeln!(
            out,
            "Reproduced by (failed on the given code, pass now): {}\n",
            change.reproducing_tests.join(", ")
        );
    }
    if !change.dropped_tests.is_empty() {
        let _ = writeln!(
            out,
            "Left out (the given code did not pass them): {}\n",
            change.dropped_tests.join(", ")
        );
    }
    if let Some(before) = &change.quality_before {
        let _ = writeln!(
            out,
            "Quality of the given code: **{:.2}** / 1\n",
            before.score
        );
    }
    let _ = writeln!(out, "```diff\n{}```\n", change.diff);
    out
}

/// Attempt by attempt: every failed attempt with its error and the fix the next one made,
/// then how the last attempt ended.
fn history(result: &JobResult) -> String {
    let mut out = String::new();
    if result.improvement_history.is_empty() {
        // Only a job whose functions were implemented and tested can have passed first time.
        out.push_str(
            if result.implementations.is_empty() || result.test_results.is_empty() {
                "No function was implemented and tested, so nothing was repaired.\n"
            } else if result.all_tests_passed {
                "Every function passed its tests on the first attempt.\n"
            } else {
                "No repair was attempted.\n"
            },
        );
        return out;
    }
    let mut by_function: BTreeMap<&str, Vec<&proto::job::Improvement>> = BTreeMap::new();
    for step in &result.improvement_history {
        by_function.entry(&step.function).or_default().push(step);
    }
    for name in function_names(result) {
        let Some(steps) = by_function.get(name.as_str()) else {
            continue;
        };
        let _ = writeln!(out, "`{name}`:\n");
        for step in steps {
            let _ = writeln!(
                out,
                "- attempt {} ✗ {}: {}",
                step.attempt,
                step.error_kind,
                first_line(&step.error)
            );
            if let Some(analysis) = &step.analysis {
                let _ = writeln!(out, "  - cause: {}", first_line(&analysis.root_cause));
            }
            if !step.fix.trim().is_empty() {
                let _ = writeln!(out, "  - fix: {}", first_line(&step.fix));
            }
        }
        let tests = tests_of(result, &name);
        let next = steps.last().map_or(1, |s| s.attempt + 1);
        if !tests.is_empty() && tests.iter().all(|t| t.passed) {
            let _ = writeln!(out, "- attempt {next} ✓ passed all {} tests", tests.len());
        }
        out.push('\n');
    }
    out
}

/// The code of every function, in plan order (what `--format plain` prints on stdout).
pub fn code(result: &JobResult) -> String {
    let mut out = String::new();
    for name in function_names(result) {
        if let Some(code) = result.implementations.get(&name) {
            if !out.is_empty() {
                out.push_str("\n\n");
            }
            out.push_str(code.trim_end());
            out.push('\n');
        }
    }
    out
}

/// One line: status, tests, score, repairs, time (and the failure).
pub fn summary(result: &JobResult) -> String {
    let passed = result.test_results.iter().filter(|t| t.passed).count();
    let mut line = format!(
        "status={} job={} functions={} tests={passed}/{} score={:.2} repairs={} total_ms={}",
        result.status.as_str(),
        result.job_id,
        function_names(result).len(),
        result.test_results.len(),
        result.quality.score,
        result.improvement_history.len(),
        result.metrics.total_ms
    );
    if let Some(failure) = &result.failure {
        let _ = write!(line, " failure={:?}", first_line(failure));
    }
    line
}

/// `{"succeeded": 2, "running": 1}` as `running 1 · succeeded 2`.
pub fn counts(counts: &BTreeMap<BatchJobStatus, usize>) -> String {
    counts
        .iter()
        .map(|(status, n)| {
            let name = status.job_status().map_or("unknown", JobStatus::as_str);
            format!("{name} {n}")
        })
        .collect::<Vec<_>>()
        .join(" · ")
}

fn function_states(view: &JobProgress) -> Vec<(String, String)> {
    view.functions
        .iter()
        .map(|(name, f)| {
            let attempts = f.attempts;
            let state = match (f.done, f.passed) {
                (true, true) => format!("✓ passed ({attempts} attempts)"),
                (true, false) => format!("✗ failed ({attempts} attempts)"),
                _ if attempts > 0 => format!("… attempt {attempts}"),
                _ => "… waiting".to_owned(),
            };
            (name.clone(), state)
        })
        .collect()
}

/// A job that is not finished, as markdown.
pub fn pending_markdown(view: &JobProgress) -> String {
    let mut out = format!("⏳ {}: job {}\n", view.status, view.job_id);
    let states = function_states(view);
    if !states.is_empty() {
        out.push_str("\n| function | state |\n| --- | --- |\n");
        for (name, state) in states {
            let _ = writeln!(out, "| `{name}` | {state} |");
        }
    }
    out
}

/// A job that is not finished, on one line.
pub fn pending_plain(view: &JobProgress) -> String {
    let states: Vec<String> = function_states(view)
        .into_iter()
        .map(|(name, state)| format!("{name}: {state}"))
        .collect();
    let mut line = format!("status={} job={}", view.status, view.job_id);
    if !states.is_empty() {
        let _ = write!(line, " ({})", states.join("; "));
    }
    line
}

/// An agent's step as the live transcript shows it: the model's words and calls, or what a
/// call got back (its first lines).
pub fn agent_step_line(step: &proto::agent::AgentStep) -> String {
    use proto::agent::AgentStep;
    let clip = |text: &str, max: usize| {
        let one: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if one.chars().count() > max {
            format!("{}…", one.chars().take(max).collect::<String>())
        } else {
            one
        }
    };
    match step {
        AgentStep::Start { model, tools, .. } => {
            format!("started with {model} and {} tools", tools.len())
        }
        AgentStep::Model {
            step,
            text,
            calls,
            problem,
            ..
        } => {
            let mut line = format!("step {step}");
            if !text.trim().is_empty() {
                let _ = write!(line, ": {}", clip(text, 100));
            }
            for call in calls {
                let _ = write!(line, "\n  → {} {}", call.tool, clip(&call.arguments, 120));
            }
            if let Some(problem) = problem {
                let _ = write!(line, "\n  ✗ {}", clip(problem, 120));
            }
            line
        }
        AgentStep::Observation {
            tool,
            content,
            error,
            ..
        } => {
            let mark = if *error { "✗" } else { "←" };
            let tool = if tool.is_empty() { "answer" } else { tool };
            format!("  {mark} {tool}: {}", clip(content, 160))
        }
    }
}

/// One progress line for an event of `GET /v1/jobs/{id}/events`.
pub fn progress_line(elapsed: Duration, event: &Progress) -> String {
    let text = match event {
        Progress::Queued { .. } => "queued".to_owned(),
        Progress::Planning => "planning: asking the model for the functions".to_owned(),
        Progress::Planned { functions, .. } => {
            format!(
                "planned {} functions: {}",
                functions.len(),
                functions.join(", ")
            )
        }
        Progress::Replanning { problem } => format!("plan rejected, asking again: {problem}"),
        Progress::AgentStep { step } => agent_step_line(step),
        Progress::FunctionStarted {
            function,
            worker: None,
        } => format!("{function}: started"),
        Progress::FunctionStarted {
            function,
            worker: Some(worker),
        } => format!("{function}: started on {worker}"),
        Progress::FunctionCached { function } => {
            format!("{function}: reused a verified function from the cache")
        }
        Progress::Attempt {
            function,
            attempt,
            passed: true,
            validation: Some(validation),
            ..
        } => format!("{function}: attempt {attempt} ✓ {validation} (nothing was run)"),
        Progress::Attempt {
            function,
            attempt,
            passed: true,
            ..
        } => format!("{function}: attempt {attempt} ✓ tests pass"),
        Progress::Attempt {
            function,
            attempt,
            error_kind,
            ..
        } => format!(
            "{function}: attempt {attempt} ✗ {}",
            error_kind.map_or("failed", ErrorKind::as_str)
        ),
        Progress::FunctionDone {
            function,
            passed,
            attempts,
        } => format!(
            "{function}: done {} after {attempts} attempt(s)",
            if *passed { "✓" } else { "✗" }
        ),
        Progress::Finished {
            status,
            failure,
            cache,
            ..
        } => {
            let mut text = format!("finished: {status}");
            if let Some(failure) = failure {
                let _ = write!(text, " ({})", first_line(failure));
            }
            if *cache == CacheOutcome::Hit {
                text.push_str(" (solution cache)");
            }
            text
        }
    };
    format!("[{:>6.1}s] {text}", elapsed.as_secs_f64())
}

#[cfg(test)]
mod tests;
