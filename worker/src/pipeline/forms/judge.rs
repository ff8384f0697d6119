//! Verdicts of the typed forms (every language but Python and JavaScript): their drivers
//! only call the function and write what happened, one JSON line per case, and the verdict is
//! decided here, by the same rules as the Python and JavaScript harnesses (numbers within a
//! tolerance, arrays element by element, objects key by key, an expected error matched by
//! name). One comparison for five languages instead of five.
//!
//! The file a driver writes: a first line `{"nonce": "..."}`, then per case, in any order,
//! `{"function": i, "case": j, "ms": t, ...}` with one of `"returned": <JSON>` (the value the
//! function returned, rendered by the driver), `"output": "<text>"` (Bash: what the function
//! printed), `"raised": ["Name", ...], "message": "..."` (what it threw, every name it
//! answers to), `"timeout": true`, or `"missing": "<why>"` (the function is not defined; `case`
//! absent). A line cut short by a crash is ignored; a case without a line failed with what
//! ended the run.

use std::collections::BTreeMap;

use proto::ErrorKind;
use proto::harness::{CaseReport, CasesReport, HarnessCase};
use serde::Deserialize;
use serde_json::Value;

use super::FunctionCases;

/// Relative and absolute tolerance of a number's comparison (the harnesses').
const TOLERANCE: f64 = 1e-6;
const MAX_TEXT: usize = 2000;

/// One line of a driver's file.
#[derive(Debug, Deserialize)]
struct Line {
    function: usize,
    case: Option<usize>,
    #[serde(default)]
    ms: f64,
    #[serde(default)]
    returned: Option<Value>,
    output: Option<String>,
    raised: Option<Vec<String>>,
    message: Option<String>,
    #[serde(default)]
    timeout: bool,
    missing: Option<String>,
}

/// What a driver's returned value is compared as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Values {
    /// JSON the driver rendered from the returned value.
    Json,
    /// The text the function printed (Bash), read as the expected value's shape asks.
    Printed,
}

/// The coverage line of an outcomes file written with `nonce` (`{"coverage": {"lines",
/// "covered"}}`, after the cases), as a share; `None` without one.
pub(crate) fn coverage(text: &str, nonce: &str) -> Option<f64> {
    #[derive(Deserialize)]
    struct First {
        nonce: String,
    }
    #[derive(Deserialize)]
    struct Measured {
        coverage: super::Covered,
    }
    let mut lines = text.lines();
    let first: First = serde_json::from_str(lines.next()?).ok()?;
    if first.nonce != nonce {
        return None;
    }
    lines
        .rev()
        .find_map(|l| serde_json::from_str::<Measured>(l).ok())?
        .coverage
        .share()
}

/// Each function's report from the file `text` a driver wrote for `functions`, if it wrote it
/// with `nonce`; what ended the run early (`cut`) is each unreported case's error.
pub(crate) fn reports(
    functions: &[FunctionCases],
    text: &str,
    nonce: &str,
    values: Values,
    cut: &Cut,
) -> Option<BTreeMap<String, CasesReport>> {
    let mut lines = text.lines();
    #[derive(Deserialize)]
    struct First {
        nonce: String,
    }
    let first: First = serde_json::from_str(lines.next()?).ok()?;
    if first.nonce != nonce {
        return None;
    }
    let mut seen: BTreeMap<(usize, usize), CaseReport> = BTreeMap::new();
    let mut missing: BTreeMap<usize, String> = BTreeMap::new();
    for line in lines {
        // A line a crash cut short, or a program's own writes to the file: not the driver's.
        let Ok(line) = serde_json::from_str::<Line>(line) else {
            continue;
        };
        let Some(function) = functions.get(line.function) else {
            continue;
        };
        if let Some(why) = line.missing {
            missing.insert(line.function, why);
            continue;
        }
        let Some(case) = line.case.and_then(|c| function.cases.get(c)) else {
            continue;
        };
        seen.entry((line.function, line.case.unwrap_or_default()))
            .or_insert_with(|| judge(case, &line, values));
    }
    let mut out = BTreeMap::new();
    for (i, function) in functions.iter().enumerate() {
        if let Some(why) = missing.remove(&i) {
            out.insert(
                function.name.clone(),
                CasesReport {
                    passed: false,
                    cases: Vec::new(),
                    error_kind: Some(ErrorKind::Runtime),
                    error: Some(why),
                    traceback: None,
                },
            );
            continue;
        }
        let cases: Vec<CaseReport> = function
            .cases
            .iter()
            .enumerate()
            .map(|(j, c)| {
                seen.remove(&(i, j)).unwrap_or_else(|| CaseReport {
                    name: c.name.clone(),
                    passed: false,
                    actual_output: Value::Null,
                    error: Some(cut.reason.clone()),
                    error_kind: Some(cut.kind),
                    duration_ms: 0.0,
                })
            })
            .collect();
        let failed: Vec<&CaseReport> = cases.iter().filter(|c| !c.passed).collect();
        out.insert(
            function.name.clone(),
            CasesReport {
                passed: failed.is_empty(),
                error_kind: failed.first().and_then(|c| c.error_kind),
                error: (!failed.is_empty())
                    .then(|| format!("{} of {} cases failed", failed.len(), cases.len())),
                traceback: None,
                cases,
            },
        );
    }
    Some(out)
}

/// What ended a run before a driver wrote every case: the verdict of the cases it did not.
#[derive(Debug, Clone)]
pub(crate) struct Cut {
    pub(crate) kind: ErrorKind,
    pub(crate) reason: String,
}

/// A case's verdict from what the driver wrote of it.
fn judge(case: &HarnessCase, line: &Line, values: Values) -> CaseReport {
    let mut out = CaseReport {
        name: case.name.clone(),
        passed: false,
        actual_output: Value::Null,
        error: None,
        error_kind: None,
        duration_ms: line.ms,
    };
    if line.timeout {
        out.error = Some("the case ran past its timeout".into());
        out.error_kind = Some(ErrorKind::Timeout);
        return out;
    }
    if let Some(names) = &line.raised {
        let message = line.message.as_deref().unwrap_or_default();
        let first = names.first().map_or("error", String::as_str);
        let thrown = clip(&if message.is_empty() {
            first.to_owned()
        } else {
            format!("{first}: {message}")
        });
        match &case.expected_error {
            Some(expected) if names.iter().any(|n| n == expected) => out.passed = true,
            Some(expected) => {
                out.error = Some(format!("expected {expected}, got {thrown}"));
                out.error_kind = Some(ErrorKind::WrongOutput);
            }
            None => {
                out.error = Some(thrown);
                out.error_kind = Some(if names.iter().any(|n| n == "AssertionError") {
                    ErrorKind::Assertion
                } else {
                    ErrorKind::Runtime
                });
            }
        }
        return out;
    }
    let actual = match (values, &line.returned, &line.output) {
        (Values::Printed, _, Some(printed)) => printed_value(printed, &case.expected_output),
        (_, Some(value), _) => value.clone(),
        _ => Value::Null,
    };
    out.actual_output = actual.clone();
    if let Some(expected) = &case.expected_error {
        out.error = Some(format!("expected {expected}, but nothing was raised"));
        out.error_kind = Some(ErrorKind::WrongOutput);
    } else if equal(&actual, &case.expected_output, 0) {
        out.passed = true;
    } else {
        out.error = Some(clip(&format!(
            "WrongOutput: expected {}, got {}",
            case.expected_output, actual
        )));
        out.error_kind = Some(ErrorKind::WrongOutput);
    }
    out
}

/// What a function printed, read as `expected`'s shape asks: the text itself (one trailing
/// newline dropped) for a string, a number or a boolean for those, one element per line for
/// an array, JSON for an object, and `null` for no output.
fn printed_value(printed: &str, expected: &Value) -> Value {
    let text = printed.strip_suffix('\n').unwrap_or(printed);
    match expected {
        Value::Null if text.is_empty() => Value::Null,
        Value::Number(_) => match text.trim().parse::<f64>() {
            Ok(n) if text.trim().parse::<i64>().is_ok() => Value::from(n as i64),
            Ok(n) => serde_json::Number::from_f64(n).map_or(Value::from(text), Value::Number),
            Err(_) => Value::from(text),
        },
        Value::Bool(_) => match text.trim() {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => Value::from(text),
        },
        Value::Array(items) => {
            if text.is_empty() {
                return Value::Array(Vec::new());
            }
            let shape = items.first().cloned().unwrap_or(Value::from(""));
            Value::Array(
                text.split('\n')
                    .map(|line| printed_value(line, &shape))
                    .collect(),
            )
        }
        Value::Object(_) => serde_json::from_str(text).unwrap_or_else(|_| Value::from(text)),
        _ => Value::from(text),
    }
}

/// `actual` against `expected`: the harnesses' rules for JSON values (a number within the
/// tolerance, an integer exactly; never a string for a number).
pub(crate) fn equal(actual: &Value, expected: &Value, depth: usize) -> bool {
    if depth > 500 {
        return false;
    }
    match (expected, actual) {
        (Value::Null, a) => a.is_null(),
        (Value::Bool(e), Value::Bool(a)) => a == e,
        (Value::Number(e), Value::Number(a)) => {
            // Integers exactly (beyond i64 too: a hash's low bits count), else within the
            // tolerance.
            let integer = |n: &serde_json::Number| {
                n.as_i64()
                    .map(i128::from)
                    .or_else(|| n.as_u64().map(i128::from))
            };
            match (integer(e), integer(a)) {
                (Some(e), Some(a)) => a == e,
                _ => numbers_equal(
                    a.as_f64().unwrap_or(f64::NAN),
                    e.as_f64().unwrap_or(f64::NAN),
                ),
            }
        }
        (Value::String(e), Value::String(a)) => a == e,
        (Value::Array(e), Value::Array(a)) => {
            a.len() == e.len() && a.iter().zip(e).all(|(a, e)| equal(a, e, depth + 1))
        }
        (Value::Object(e), Value::Object(a)) => {
            a.len() == e.len()
                && e.iter()
                    .all(|(k, e)| a.get(k).is_some_and(|a| equal(a, e, depth + 1)))
        }
        _ => false,
    }
}

fn numbers_equal(a: f64, e: f64) -> bool {
    if a.is_nan() || e.is_nan() {
        return a.is_nan() && e.is_nan();
    }
    a == e || (a - e).abs() <= (TOLERANCE * a.abs().max(e.abs())).max(TOLERANCE)
}

fn clip(text: &str) -> String {
    if text.len() <= MAX_TEXT {
        return text.to_owned();
    }
    let mut end = MAX_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use proto::generation::TestKind;
    use serde_json::json;

    use super::*;

    fn case(name: &str, expected: Value, error: Option<&str>) -> HarnessCase {
        HarnessCase {
            name: name.into(),
            kind: TestKind::Normal,
            inputs: serde_json::Map::new(),
            expected_output: expected,
            expected_error: error.map(str::to_owned),
        }
    }

    fn cut() -> Cut {
        Cut {
            kind: ErrorKind::Runtime,
            reason: "exit status 2".into(),
        }
    }

    #[test]
    fn each_line_is_judged_and_an_unwritten_case_fails_with_what_cut_the_run() {
        let functions = [
            FunctionCases {
                name: "f".into(),
                params: vec![],
                types: vec![],
                returns: "int".into(),
                cases: vec![
                    case("ok", json!(3), None),
                    case("close", json!(0.3), None),
                    case("wrong", json!([1, 2]), None),
                    case("raises", Value::Null, Some("ValueError")),
                    case("other", Value::Null, Some("KeyError")),
                    case("slow", json!(1), None),
                    case("unwritten", json!(1), None),
                ],
            },
            FunctionCases {
                name: "g".into(),
                params: vec![],
                types: vec![],
                returns: "int".into(),
                cases: vec![case("any", json!(1), None)],
            },
        ];
        let text = [
            r#"{"nonce": "n"}"#,
            r#"{"function": 0, "case": 0, "returned": 3, "ms": 0.5}"#,
            r#"{"function": 0, "case": 1, "returned": 0.30000000001}"#,
            r#"{"function": 0, "case": 2, "returned": [1, 3]}"#,
            r#"{"function": 0, "case": 3, "raised": ["ValueError", "Exception"], "message": "no"}"#,
            r#"{"function": 0, "case": 4, "raised": ["ValueError"], "message": "no"}"#,
            r#"{"function": 0, "case": 5, "timeout": true}"#,
            r#"{"function": 1, "missing": "g is not defined"}"#,
            r#"{"function": 0, "case": 6, "retu"#,
        ]
        .join("\n");
        let written = reports(&functions, &text, "n", Values::Json, &cut()).unwrap();
        let f = &written["f"];
        let verdicts: Vec<(bool, Option<ErrorKind>)> =
            f.cases.iter().map(|c| (c.passed, c.error_kind)).collect();
        assert_eq!(
            verdicts,
            [
                (true, None),
                (true, None),
                (false, Some(ErrorKind::WrongOutput)),
                (true, None),
                (false, Some(ErrorKind::WrongOutput)),
                (false, Some(ErrorKind::Timeout)),
                (false, Some(ErrorKind::Runtime)),
            ]
        );
        assert_eq!(
            f.cases[4].error.as_deref(),
            Some("expected KeyError, got ValueError: no")
        );
        assert_eq!(f.cases[6].error.as_deref(), Some("exit status 2"));
        assert_eq!(f.cases[2].actual_output, json!([1, 3]));
        assert_eq!(f.error.as_deref(), Some("4 of 7 cases failed"));
        assert!(!f.passed);
        let g = &written["g"];
        assert!(!g.passed && g.cases.is_empty());
        assert_eq!(g.error.as_deref(), Some("g is not defined"));
        // Another nonce, or no first line: not this run's file.
        assert!(
            reports(
                &functions,
                &text.replace("\"n\"", "\"m\""),
                "n",
                Values::Json,
                &cut()
            )
            .is_none()
        );
        assert!(reports(&functions, "", "n", Values::Json, &cut()).is_none());
    }

    #[test]
    fn printed_output_is_read_as_the_expected_value_asks() {
        let cases = [
            (json!("a b"), "a b\n", true),
            (json!(17), "17\n", true),
            (json!(17), "17.0", true),
            (json!(1.5), " 1.5\n", true),
            (json!(17), "seventeen", false),
            (json!(true), "true\n", true),
            (json!([2, 3, 5]), "2\n3\n5\n", true),
            (json!([]), "", true),
            (json!(["a", "b"]), "a\nb", true),
            (json!({"a": 1}), "{\"a\": 1}\n", true),
            (Value::Null, "", true),
            (Value::Null, "x", false),
        ];
        for (expected, printed, passes) in cases {
            let got = printed_value(printed, &expected);
            assert_eq!(
                equal(&got, &expected, 0),
                passes,
                "{printed:?} as {expected}"
            );
        }
    }

    #[test]
    fn numbers_compare_within_the_tolerance_and_integers_exactly() {
        assert!(equal(&json!(1.0000000001), &json!(1.0), 0));
        assert!(!equal(&json!(1.01), &json!(1.0), 0));
        assert!(!equal(&json!(3), &json!(4), 0));
        assert!(!equal(
            &json!(18446744073709550000_u64),
            &json!(18446744073709551615_u64),
            0
        ));
        assert!(equal(
            &json!(18446744073709551615_u64),
            &json!(18446744073709551615_u64),
            0
        ));
        assert!(equal(&json!(2.0), &json!(2), 0));
        assert!(!equal(&json!("2"), &json!(2), 0));
        assert!(!equal(&json!({"a": 1, "b": 2}), &json!({"a": 1}), 0));
        assert!(equal(
            &json!({"b": [1.0], "a": null}),
            &json!({"a": null, "b": [1]}),
            0
        ));
    }
}
