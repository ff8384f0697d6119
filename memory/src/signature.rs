//! A failure's signature: what stays the same when the same mistake is made in another
//! function. An exception keeps its type and message with the literals stripped
//! (`ValueError: invalid literal for int() with base <n>: <s>`); a wrong answer keeps its
//! shape against the expected one (`a list, 1 item short`), not its values.

use proto::ErrorKind;
use serde_json::Value;

/// The most characters a signature keeps.
const MAX_CHARS: usize = 160;

/// One failing case as a repair saw it.
#[derive(Debug, Clone, Copy)]
pub struct FailedCase<'a> {
    pub expected_output: &'a Value,
    pub expected_error: Option<&'a str>,
    pub actual_output: Option<&'a Value>,
    pub error: Option<&'a str>,
}

/// The signature of a failure of `kind` whose run said `error`, its first failing case
/// `case` if it had one.
pub fn signature(kind: ErrorKind, error: &str, case: Option<FailedCase<'_>>) -> String {
    let detail = match case {
        Some(case) => case_shape(case).unwrap_or_else(|| exception(error)),
        None => exception(error),
    };
    let mut signature = format!("{}: {detail}", kind.as_str());
    if let Some((cut, _)) = signature.char_indices().nth(MAX_CHARS) {
        signature.truncate(cut);
    }
    signature
}

/// What went wrong in `case`: an exception where one was raised, else the answer's shape.
fn case_shape(case: FailedCase<'_>) -> Option<String> {
    // An exception it raised; a harness's note of a wrong answer (`WrongOutput: expected …`)
    // is the answer's shape below.
    if let Some(error) = case.error.filter(|e| raised(e)) {
        let raised = exception(error);
        return Some(match case.expected_error {
            Some(expected) => format!("expected {expected} raised, got {raised}"),
            None => raised,
        });
    }
    let actual = case.actual_output?;
    if let Some(expected) = case.expected_error {
        return Some(format!(
            "expected {expected} raised, got {}",
            kind_of(actual)
        ));
    }
    Some(shape(case.expected_output, actual))
}

/// How `actual` differs from `expected`, without their values.
pub fn shape(expected: &Value, actual: &Value) -> String {
    match (expected, actual) {
        (_, Value::Null) if !expected.is_null() => {
            format!("expected {}, got null", kind_of(expected))
        }
        (Value::Array(e), Value::Array(a)) => {
            format!("a list, {}", length(e.len(), a.len(), "item"))
        }
        (Value::String(e), Value::String(a)) => {
            if e.trim() == a.trim() {
                "a string, differs in surrounding whitespace".to_owned()
            } else if e.to_lowercase() == a.to_lowercase() {
                "a string, differs in case".to_owned()
            } else {
                let (e, a) = (e.chars().count(), a.chars().count());
                format!("a string, {}", length(e, a, "character"))
            }
        }
        (Value::Object(e), Value::Object(a)) => {
            format!("an object, {}", length(e.len(), a.len(), "key"))
        }
        (Value::Number(e), Value::Number(a)) => match (e.as_f64(), a.as_f64()) {
            (Some(e), Some(a)) if (e - a).abs() == 1.0 => {
                format!(
                    "a number, off by one ({})",
                    if a < e { "low" } else { "high" }
                )
            }
            (Some(e), Some(a)) if e == -a => "a number, the wrong sign".to_owned(),
            (Some(e), Some(a)) if e.is_finite() && a.is_finite() && e != 0.0 => {
                format!("a number, {}", if a < e { "too low" } else { "too high" })
            }
            _ => "a number, differs".to_owned(),
        },
        (Value::Bool(_), Value::Bool(_)) => "a boolean, the opposite".to_owned(),
        _ if kind_of(expected) != kind_of(actual) => {
            format!("expected {}, got {}", kind_of(expected), kind_of(actual))
        }
        _ => format!("{}, differs", kind_of(expected)),
    }
}

fn length(expected: usize, actual: usize, unit: &str) -> String {
    let plural = |n: usize| {
        if n == 1 {
            unit.to_owned()
        } else {
            format!("{unit}s")
        }
    };
    match actual.cmp(&expected) {
        std::cmp::Ordering::Less => {
            format!("{} {} short", expected - actual, plural(expected - actual))
        }
        std::cmp::Ordering::Greater => {
            format!(
                "{} {} too many",
                actual - expected,
                plural(actual - expected)
            )
        }
        std::cmp::Ordering::Equal if expected == 0 => "both empty".to_owned(),
        std::cmp::Ordering::Equal => format!("as many {}, some differ", plural(2)),
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// The exception of `error` (its last line that names one, else its first line), its
/// literals stripped.
pub fn exception(error: &str) -> String {
    let lines: Vec<&str> = error
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let named = lines.iter().rev().find(|line| names_exception(line));
    let line = named.or(lines.first()).copied().unwrap_or("");
    strip_literals(line)
}

/// Whether `error` tells of an exception (not a harness's note of a wrong answer).
pub fn raised(error: &str) -> bool {
    error.lines().any(|l| names_exception(l.trim()))
}

/// `ValueError: ...`, `builtins.KeyError`, `java.lang.ArithmeticException: / by zero`,
/// `panicked at ...`: a line that starts with an exception's (dotted) name.
fn names_exception(line: &str) -> bool {
    let name: String = line
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '.')
        .collect();
    let last = name.rsplit('.').next().unwrap_or("");
    last.ends_with("Error")
        || last.ends_with("Exception")
        || last == "panicked"
        || last == "KeyboardInterrupt"
        || last == "StopIteration"
}

/// `line` with its quoted strings as `<s>`, numbers as `<n>` and runs of whitespace as one
/// space: what differs between two occurrences of one mistake.
pub fn strip_literals(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    let mut previous: Option<char> = None;
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' | '`' => {
                // A quote inside a word (`don't`) is not a literal.
                if previous.is_some_and(char::is_alphanumeric) {
                    out.push(c);
                } else {
                    for next in chars.by_ref() {
                        if next == c {
                            break;
                        }
                    }
                    out.push_str("<s>");
                }
            }
            c if c.is_ascii_digit()
                && !previous.is_some_and(|p| p.is_alphanumeric() || p == '_') =>
            {
                while chars
                    .peek()
                    .is_some_and(|n| n.is_ascii_alphanumeric() || *n == '.' || *n == '_')
                {
                    chars.next();
                }
                // `-3`: the sign is part of the number.
                if out.ends_with('-') && !previous.is_some_and(char::is_alphanumeric) {
                    out.pop();
                }
                out.push_str("<n>");
            }
            c if c.is_whitespace() => {
                if !out.ends_with(' ') {
                    out.push(' ');
                }
            }
            c => out.push(c),
        }
        previous = Some(c);
    }
    out.trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_exception_keeps_its_type_and_words_not_its_literals() {
        let a = "Traceback (most recent call last):\n  File \"x.py\", line 3\nValueError: invalid literal for int() with base 10: 'abc'";
        let b = "ValueError: invalid literal for int() with base 16: \"zz\"";
        assert_eq!(exception(a), exception(b));
        assert_eq!(
            exception(a),
            "ValueError: invalid literal for int() with base <n>: <s>"
        );
        assert_eq!(
            exception("IndexError: list index out of range"),
            "IndexError: list index out of range"
        );
        assert_eq!(
            strip_literals("x = -3.5e2 and y_2 = 0x1F; don't"),
            "x = <n> and y_2 = <n>; don't"
        );
    }

    #[test]
    fn a_wrong_answer_keeps_its_shape_not_its_values() {
        let short = |e: Value, a: Value| {
            signature(
                ErrorKind::WrongOutput,
                "1 case failed",
                Some(FailedCase {
                    expected_output: &e,
                    expected_error: None,
                    actual_output: Some(&a),
                    error: Some("WrongOutput: expected a value, got another"),
                }),
            )
        };
        // An off-by-one at a range's end, in two different functions.
        assert_eq!(
            short(json!([1, 2, 3]), json!([1, 2])),
            short(json!(["a", "b"]), json!(["a"]))
        );
        assert_eq!(
            short(json!([1, 2, 3]), json!([1, 2])),
            "wrong_output: a list, 1 item short"
        );
        assert_eq!(
            short(json!(10), json!(9)),
            "wrong_output: a number, off by one (low)"
        );
        assert_eq!(
            short(json!(5), json!(null)),
            "wrong_output: expected a number, got null"
        );
        assert_ne!(
            short(json!([1, 2, 3]), json!([1, 2])),
            short(json!([1, 2]), json!([1, 2, 3]))
        );
    }

    #[test]
    fn a_missing_raise_and_an_unexpected_one_are_told_apart() {
        let expected = json!(null);
        let returned = json!(0);
        let missing = signature(
            ErrorKind::WrongOutput,
            "",
            Some(FailedCase {
                expected_output: &expected,
                expected_error: Some("ValueError"),
                actual_output: Some(&returned),
                error: None,
            }),
        );
        assert_eq!(
            missing,
            "wrong_output: expected ValueError raised, got a number"
        );
        let raised = signature(
            ErrorKind::Runtime,
            "",
            Some(FailedCase {
                expected_output: &returned,
                expected_error: None,
                actual_output: None,
                error: Some("ZeroDivisionError: division by zero"),
            }),
        );
        assert_eq!(raised, "runtime: ZeroDivisionError: division by zero");
    }
}
