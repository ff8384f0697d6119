//! What a repair that worked leaves: its failure's signature, the failing case, the change as
//! a unified diff and the model's analysis, under an id made of the failure and the fix (the
//! same fix of the same failure is one lesson, however often it is made).

use proto::lesson::{Lesson, LessonSource};
use proto::{ErrorKind, Language, TaskId};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::signature::{self, FailedCase};

/// A repair that turned a failing function (or an agent's failing tests) passing.
#[derive(Debug, Clone)]
pub struct Repair<'a> {
    pub language: Language,
    pub error_kind: ErrorKind,
    /// What the failing run said.
    pub error: &'a str,
    /// Its first failing case, when cases ran.
    pub case: Option<Case<'a>>,
    /// The code before the repair and after it.
    pub before: &'a str,
    pub after: &'a str,
    pub analysis: &'a str,
    pub model: &'a str,
    pub job: TaskId,
    pub function: &'a str,
    pub source: LessonSource,
    /// The passing run included the request's own cases.
    pub given: bool,
    pub now_ms: u64,
}

/// A failing case: the call and what came back.
#[derive(Debug, Clone, Copy)]
pub struct Case<'a> {
    pub function: &'a str,
    pub inputs: &'a serde_json::Map<String, Value>,
    pub expected_output: &'a Value,
    pub expected_error: Option<&'a str>,
    pub actual_output: Option<&'a Value>,
    pub error: Option<&'a str>,
}

/// The most bytes of a failing case a lesson keeps.
const MAX_CASE_BYTES: usize = 600;
/// The most bytes of an analysis a lesson keeps (one sentence is asked for).
const MAX_ANALYSIS_BYTES: usize = 400;

/// The lesson `repair` leaves; `None` when it changed nothing a diff shows.
pub fn lesson(repair: &Repair<'_>, max_diff_bytes: usize) -> Option<Lesson> {
    let diff = diff(repair.before, repair.after, max_diff_bytes)?;
    let failed = repair.case.map(|c| FailedCase {
        expected_output: c.expected_output,
        expected_error: c.expected_error,
        actual_output: c.actual_output,
        error: c.error,
    });
    let signature = signature::signature(repair.error_kind, repair.error, failed);
    let case = repair
        .case
        .map(render_case)
        .unwrap_or_else(|| signature::exception(repair.error));
    let id = id(repair.language, &signature, &diff);
    Some(Lesson {
        id,
        language: repair.language,
        error_kind: repair.error_kind,
        signature,
        case: bounded(&case, MAX_CASE_BYTES),
        diff,
        analysis: bounded(first_sentence(repair.analysis), MAX_ANALYSIS_BYTES),
        model: repair.model.to_owned(),
        job: repair.job,
        function: repair.function.to_owned(),
        source: repair.source,
        created_ms: repair.now_ms,
        given: repair.given,
    })
}

/// `f(a=1, b=[2]): expected [1, 2]; got [1]` (or `raised ValueError: …`).
pub fn render_case(case: Case<'_>) -> String {
    let arguments: Vec<String> = case
        .inputs
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    let expected = match case.expected_error {
        Some(error) => format!("raises {error}"),
        None => case.expected_output.to_string(),
    };
    let got = match (
        case.error.filter(|e| !e.trim().is_empty()),
        case.actual_output,
    ) {
        (Some(error), _) => format!("raised {}", signature::exception(error)),
        (None, Some(actual)) => actual.to_string(),
        (None, None) => "nothing".to_owned(),
    };
    format!(
        "{}({}): expected {expected}; got {got}",
        case.function,
        arguments.join(", ")
    )
}

/// The change from `before` to `after` as a unified diff, cut at a line to `max_bytes`;
/// `None` when nothing changed.
pub fn diff(before: &str, after: &str, max_bytes: usize) -> Option<String> {
    if before == after {
        return None;
    }
    let diff = similar::TextDiff::from_lines(before, after)
        .unified_diff()
        .context_radius(2)
        .header("before", "after")
        .to_string();
    if diff.trim().is_empty() {
        return None;
    }
    Some(bounded(&diff, max_bytes))
}

fn id(language: Language, signature: &str, diff: &str) -> String {
    let mut hasher = Sha256::new();
    for part in [language.as_str(), signature, diff] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part.as_bytes());
    }
    hex::encode(&hasher.finalize()[..8])
}

fn first_sentence(text: &str) -> &str {
    let text = text.trim();
    match text.find(". ") {
        Some(end) => &text[..=end],
        None => text,
    }
}

/// `text` cut at its last line (or character) boundary within `max_bytes`.
fn bounded(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let mut cut = max_bytes;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let head = &text[..cut];
    let head = head.rfind('\n').map_or(head, |line| &head[..=line]);
    format!("{head}…\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn repair<'a>(before: &'a str, after: &'a str, case: Option<Case<'a>>) -> Repair<'a> {
        Repair {
            language: Language::Python,
            error_kind: ErrorKind::WrongOutput,
            error: "1 of 3 cases failed",
            case,
            before,
            after,
            analysis: "The range stopped one short of n. The fix includes n.",
            model: "scripted/m",
            job: TaskId::new(),
            function: "upto",
            source: LessonSource::Repair,
            given: true,
            now_ms: 1,
        }
    }

    #[test]
    fn a_repair_leaves_its_diff_case_signature_and_first_sentence() {
        let inputs = json!({"n": 3}).as_object().unwrap().clone();
        let (expected, got) = (json!([1, 2, 3]), json!([1, 2]));
        let case = Case {
            function: "upto",
            inputs: &inputs,
            expected_output: &expected,
            expected_error: None,
            actual_output: Some(&got),
            error: None,
        };
        let before = "def upto(n):\n    return list(range(1, n))\n";
        let after = "def upto(n):\n    return list(range(1, n + 1))\n";
        let lesson = lesson(&repair(before, after, Some(case)), 4096).unwrap();
        assert_eq!(lesson.signature, "wrong_output: a list, 1 item short");
        assert_eq!(lesson.case, "upto(n=3): expected [1,2,3]; got [1,2]");
        assert!(
            lesson.diff.contains("-    return list(range(1, n))"),
            "{}",
            lesson.diff
        );
        assert!(
            lesson.diff.contains("+    return list(range(1, n + 1))"),
            "{}",
            lesson.diff
        );
        assert_eq!(lesson.analysis, "The range stopped one short of n.");
        assert_eq!(lesson.id.len(), 16);
        // The same fix of the same failure is the same lesson; another fix is another.
        let again = super::lesson(&repair(before, after, Some(case)), 4096).unwrap();
        assert_eq!(again.id, lesson.id);
        let other = super::lesson(
            &repair(
                before,
                "def upto(n):\n    return list(range(1, n+1))\n",
                Some(case),
            ),
            4096,
        )
        .unwrap();
        assert_ne!(other.id, lesson.id);
    }

    #[test]
    fn no_change_is_no_lesson_and_a_long_diff_is_cut_at_a_line() {
        assert!(lesson(&repair("a\n", "a\n", None), 4096).is_none());
        let before: String = (0..200).map(|i| format!("x{i} = {i}\n")).collect();
        let after: String = (0..200).map(|i| format!("x{i} = {}\n", i + 1)).collect();
        let cut = diff(&before, &after, 300).unwrap();
        assert!(cut.len() <= 300 + "…\n".len(), "{}", cut.len());
        assert!(cut.ends_with("…\n"));
    }
}
