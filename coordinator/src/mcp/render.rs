//! How the tools' answers read: text for the agent (what it would look at first, the output
//! last and whole), and the API's own JSON body beside it as structured content, for a client
//! that reads fields.

use std::fmt::Write as _;

use base64::Engine as _;
use proto::Language;
use proto::api::sessions::{CellResult, CellStatus, SessionFiles, SessionView};
use proto::api::{ExecutionView, Languages, Outcome};
use rmcp::model::{CallToolResult, ContentBlock};
use serde::Serialize;

use super::ToolError;

/// A successful answer: `text` (and `more` content after it), `value` as structured content.
fn success(text: String, more: Vec<ContentBlock>, value: &impl Serialize) -> CallToolResult {
    let mut content = vec![ContentBlock::text(text)];
    content.extend(more);
    let mut result = CallToolResult::success(content);
    result.structured_content = serde_json::to_value(value).ok();
    result
}

/// A refused call as a tool error: `code: message` (the API's code first, for the agent to act
/// on), the API's error body as structured content.
pub(super) fn refusal(error: &ToolError) -> CallToolResult {
    let mut result = CallToolResult::error(vec![ContentBlock::text(error.to_string())]);
    if let ToolError::Refused(body) = error {
        result.structured_content = serde_json::to_value(body).ok();
    }
    result
}

/// `--- name ---` and the text, whole, ending with a new line; `--- name: empty ---` for none.
fn section(text: &mut String, name: &str, body: &str) {
    if body.is_empty() {
        let _ = writeln!(text, "--- {name}: empty ---");
        return;
    }
    let _ = writeln!(text, "--- {name} ---");
    text.push_str(body);
    if !body.ends_with('\n') {
        text.push('\n');
    }
}

/// An execution's verdict: status and why, exit code and costs, the compile, then its output.
pub(super) fn execution(view: &ExecutionView) -> CallToolResult {
    let mut text = String::new();
    match &view.outcome {
        Outcome::Done(result) => {
            let _ = writeln!(text, "status: {}", result.status.as_str());
            if let Some(kind) = result.error_kind {
                let _ = writeln!(text, "error_kind: {}", kind.as_str());
            }
            if let Some(reason) = &result.reason {
                let _ = writeln!(text, "reason: {reason}");
            }
            let exit_code = result
                .exit_code
                .map_or_else(|| "none".to_owned(), |c| c.to_string());
            let _ = write!(
                text,
                "exit_code: {exit_code}\nduration_ms: {}",
                result.duration_ms
            );
            if let Some(cpu) = result.cpu_ms {
                let _ = write!(text, "\ncpu_ms: {cpu}");
            }
            if let Some(peak) = result.peak_memory_kb {
                let _ = write!(text, "\npeak_memory_kb: {peak}");
            }
            let _ = writeln!(text, "\nexecution_id: {}", view.id);
            if result.truncated {
                text.push_str("the output was cut at the sandbox's limit\n");
            }
            if let Some(compile) = &result.compile {
                let status = serde_json::to_value(compile.status)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                let _ = writeln!(text, "compile: {status} in {} ms", compile.duration_ms);
                if !compile.output.is_empty() {
                    section(&mut text, "compiler output", &compile.output);
                }
            }
            section(&mut text, "stdout", &result.stdout);
            section(&mut text, "stderr", &result.stderr);
        }
        Outcome::Pending { .. } => {
            let _ = writeln!(
                text,
                "status: queued\nno verdict within the coordinator's wait (coordinator.wait); the \
                 program still runs: its verdict is GET /v1/executions/{id}\nexecution_id: {id}",
                id = view.id
            );
        }
    }
    success(text, Vec::new(), view)
}

/// A session: its id and where it stands.
pub(super) fn session(view: &SessionView) -> CallToolResult {
    let mut text = format!(
        "session_id: {}\nstate: {}\nlanguage: {}\nmemory_mb: {}\nidle_timeout_s: {}\ncells: {}",
        view.id,
        view.state.as_str(),
        view.language,
        view.memory_mb,
        view.idle_timeout_s,
        view.cells
    );
    if !view.packages.is_empty() {
        let _ = write!(text, "\npackages: {}", view.packages.join(", "));
    }
    if let Some(by) = view.ended_by {
        let _ = write!(text, "\nended_by: {}", by.as_str());
    }
    if let Some(reason) = &view.ended_reason {
        let _ = write!(text, "\nended_reason: {reason}");
    }
    success(text, Vec::new(), view)
}

/// A cell: status, value and error first, then its output; images it displayed as images.
pub(super) fn cell(result: &CellResult) -> CallToolResult {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "status: {}",
        match result.status {
            CellStatus::Ok => "ok",
            CellStatus::Error => "error (the session lives on)",
            CellStatus::Timeout => "timeout (interrupted at its deadline; the session lives on)",
        }
    );
    if let Some(restore) = &result.restored {
        let _ = writeln!(
            text,
            "restored: the session's worker {} was lost ({}); it was restored after cell {}{}",
            restore.lost_worker,
            restore.reason,
            restore.after_cell,
            if restore.unrestorable.is_empty() {
                String::new()
            } else {
                format!(
                    "; not restored: {}",
                    restore
                        .unrestorable
                        .iter()
                        .map(|u| format!("{} ({})", u.name, u.reason))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        );
    }
    if let Some(value) = &result.value {
        let _ = writeln!(text, "value: {value}");
    }
    if let Some(code) = result.exit_code {
        let _ = writeln!(text, "exit_code: {code}");
    }
    if let Some(error) = &result.error {
        let _ = writeln!(text, "error: {}: {}", error.ty, error.message);
    }
    let _ = writeln!(text, "duration_ms: {}", result.duration_ms);
    if !result.files_changed.is_empty() {
        let _ = writeln!(text, "files_changed: {}", result.files_changed.join(", "));
    }
    if let Some(error) = result.checkpoint.as_ref().and_then(|c| c.error.as_ref()) {
        let _ = writeln!(
            text,
            "checkpoint: none ({error}): the session would be lost with its worker"
        );
    }
    for (truncated, stream) in [
        (result.stdout_truncated, "stdout"),
        (result.stderr_truncated, "stderr"),
    ] {
        if truncated {
            let _ = writeln!(text, "the cell's {stream} was cut at the cluster's limit");
        }
    }
    section(&mut text, "stdout", &result.stdout);
    section(&mut text, "stderr", &result.stderr);
    if let Some(error) = result.error.as_ref().filter(|e| !e.traceback.is_empty()) {
        section(&mut text, "traceback", &error.traceback);
    }
    let mut images = Vec::new();
    for display in &result.display {
        match (&display.text, &display.base64) {
            (Some(shown), _) => section(&mut text, "display", shown),
            (None, Some(data)) => images.push(ContentBlock::image(data.clone(), &display.mime)),
            (None, None) => {}
        }
    }
    success(text, images, result)
}

/// What `read_file` found: the text as it is, else the bytes in base64 (said first).
pub(super) fn file(path: &str, bytes: Vec<u8>) -> CallToolResult {
    let size = bytes.len();
    let (text, encoding, content) = match String::from_utf8(bytes) {
        Ok(text) => (text.clone(), "text", text),
        Err(e) => {
            let data = base64::engine::general_purpose::STANDARD.encode(e.as_bytes());
            (
                format!("{path}: {size} bytes, not UTF-8 text; base64:\n{data}"),
                "base64",
                data,
            )
        }
    };
    let value = serde_json::json!({
        "path": path, "size": size, "encoding": encoding, "content": content,
    });
    success(text, Vec::new(), &value)
}

/// What `write_file` did.
pub(super) fn written(path: &str, size: usize) -> CallToolResult {
    let value = serde_json::json!({"path": path, "size": size});
    success(format!("wrote {path} ({size} bytes)"), Vec::new(), &value)
}

/// A session's files, a line each.
pub(super) fn files(files: &SessionFiles) -> CallToolResult {
    let mut text = format!("{} files", files.files.len());
    for file in &files.files {
        let _ = write!(text, "\n{}\t{} bytes", file.path, file.size);
    }
    success(text, Vec::new(), files)
}

/// The languages, a line each, and which of them sessions are offered in.
pub(super) fn languages(languages: &Languages, sessions: &[Language]) -> CallToolResult {
    let mut text = String::new();
    for language in &languages.languages {
        let _ = write!(text, "{}: {}", language.name, language.version);
        if !language.aliases.is_empty() {
            let _ = write!(text, "; aliases {}", language.aliases.join(", "));
        }
        if !language.libraries.is_empty() {
            let _ = write!(text, "; libraries {}", language.libraries.join(", "));
        }
        if language.compiled {
            text.push_str("; compiled");
        }
        text.push('\n');
    }
    let _ = write!(
        text,
        "sessions (create_session): {}",
        sessions
            .iter()
            .map(|l| l.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    success(text, Vec::new(), languages)
}
