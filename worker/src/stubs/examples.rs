//! The examples a stub's documentation gives, as test cases marked `given`: doctest lines
//! (`>>> f(x)` and the lines of output after it) and lines that state a call and its result
//! (`f(x) == y`, `assert f(x) == y`, ...), in any language whose calls and literals a
//! [`Reader`] reads.

use proto::generation::{FunctionSpec, TestCase, TestKind};
use serde_json::{Map, Value};

/// A language's calls and literals.
pub(super) trait Reader {
    /// The inputs of `call` (the stub's function called with literals only), by parameter
    /// name; `None` when it is not such a call.
    fn arguments(&self, spec: &FunctionSpec, call: &str) -> Option<Map<String, Value>>;
    /// `text` as one literal, in JSON.
    fn literal(&self, text: &str) -> Option<Value>;
}

/// Whether `text` calls `name`.
pub(super) fn calls(text: &str, name: &str) -> bool {
    call_at(text, name).is_some()
}

/// Where `text` first calls `name` (`name(`, not inside another identifier or after a `.`).
pub(super) fn call_at(text: &str, name: &str) -> Option<usize> {
    text.match_indices(name).map(|(at, _)| at).find(|&at| {
        let before = text[..at].chars().next_back();
        let after = text[at + name.len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.') && after == Some('(')
    })
}

/// The examples of `spec`'s docstring as test cases: doctests (`>>> f(x)` and the lines of
/// output after it, up to a blank line or the next prompt; no output is `None`), and lines
/// `f(x) == y`, `f(x) ==> y`, `f(x) => y`, `f(x) -> y`, `f(x) ➞ y`, `f(x) returns y`, `assert
/// f(x) == y`. A call of another function, an argument or a result that is not a literal, or a
/// traceback, is left out.
pub(super) fn examples(reader: &dyn Reader, spec: &FunctionSpec, docstring: &str) -> Vec<TestCase> {
    let lines: Vec<&str> = docstring.lines().map(str::trim).collect();
    let mut cases = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        i += 1;
        if let Some(call) = line.strip_prefix(">>> ") {
            let mut output = Vec::new();
            while i < lines.len() && !lines[i].is_empty() && !lines[i].starts_with(">>>") {
                output.push(lines[i]);
                i += 1;
            }
            let expected = if output.is_empty() {
                Some(Value::Null)
            } else {
                reader.literal(&output.join("\n"))
            };
            if let (Some(inputs), Some(expected)) = (reader.arguments(spec, call), expected) {
                cases.push(case(inputs, expected));
            }
            continue;
        }
        if let Some((inputs, expected)) = stated(reader, spec, line) {
            cases.push(case(inputs, expected));
        }
    }
    // The same call given twice (a prompt states an example in prose and as a doctest) is one
    // case; two calls alike with different results are the request's contradiction, and both
    // stay (the code cannot pass both, and the result shows why).
    let mut seen = Vec::new();
    cases.retain(|c: &TestCase| {
        let key = (c.inputs.clone(), c.expected_output.clone());
        let new = !seen.contains(&key);
        seen.push(key);
        new
    });
    cases
}

fn case(inputs: Map<String, Value>, expected: Value) -> TestCase {
    TestCase {
        name: String::new(),
        kind: TestKind::Normal,
        inputs,
        expected_output: expected,
        expected_error: None,
        given: true,
    }
}

/// `f(x) <op> y` anywhere in `line` (after `assert`, `Example:`, `For example,` ...).
fn stated(
    reader: &dyn Reader,
    spec: &FunctionSpec,
    line: &str,
) -> Option<(Map<String, Value>, Value)> {
    let rest = &line[call_at(line, &spec.name)?..];
    let end = closing_paren(rest)?;
    let (call, after) = rest.split_at(end + 1);
    let after = after.trim_start();
    let result = [
        "==>",
        "=>",
        "->",
        "➞",
        "==",
        "returns",
        "should return",
        "=",
    ]
    .iter()
    .find_map(|op| after.strip_prefix(op))?
    .trim()
    .trim_end_matches(['.', ';'])
    .trim();
    Some((reader.arguments(spec, call)?, reader.literal(result)?))
}

/// The byte index of the `)` that closes the first `(` of `text`, outside strings.
fn closing_paren(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (at, c) in text.char_indices() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '\'' | '"' => quote = Some(c),
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 && c == ')' {
                    return Some(at);
                }
            }
            _ => {}
        }
    }
    None
}
