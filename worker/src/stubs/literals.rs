//! Python literals as JSON, read from tree-sitter's tree: what a request's example calls pass
//! and expect. Only what JSON holds and the harness compares as Python would: numbers,
//! strings, booleans, `None`, lists and tuples (as arrays), dicts with string keys. Anything
//! else (a name, a call, a set, bytes, an f-string) is not a literal here, and the example that
//! holds it is left out.

use serde_json::{Map, Number, Value};
use tree_sitter::Node;

/// `node` (of `source`) as JSON, when it is a literal.
pub(super) fn value(node: Node<'_>, source: &str) -> Option<Value> {
    let text = || node.utf8_text(source.as_bytes()).ok();
    match node.kind() {
        "integer" => integer(text()?),
        "float" => float(text()?),
        "true" => Some(Value::Bool(true)),
        "false" => Some(Value::Bool(false)),
        "none" => Some(Value::Null),
        "string" => string(node, source).map(Value::String),
        "concatenated_string" => {
            let mut joined = String::new();
            for part in named(node) {
                joined.push_str(&string(part, source)?);
            }
            Some(Value::String(joined))
        }
        "list" | "tuple" => named(node)
            .into_iter()
            .map(|item| value(item, source))
            .collect::<Option<Vec<_>>>()
            .map(Value::Array),
        "dictionary" => {
            let mut object = Map::new();
            for pair in named(node) {
                if pair.kind() != "pair" {
                    return None;
                }
                let Value::String(key) = value(pair.child_by_field_name("key")?, source)? else {
                    return None;
                };
                object.insert(key, value(pair.child_by_field_name("value")?, source)?);
            }
            Some(Value::Object(object))
        }
        "parenthesized_expression" => match named(node)[..] {
            [inner] => value(inner, source),
            _ => None,
        },
        "unary_operator" => {
            let operand = node.child_by_field_name("argument")?;
            let operator = node.child_by_field_name("operator")?.kind();
            match (operator, value(operand, source)?) {
                ("-", Value::Number(n)) => negate(&n),
                ("+", Value::Number(n)) => Some(Value::Number(n)),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Named children without comments.
pub(super) fn named<'t>(node: Node<'t>) -> Vec<Node<'t>> {
    let mut cursor = node.walk();
    node.named_children(&mut cursor)
        .filter(|child| !child.is_extra())
        .collect()
}

fn integer(text: &str) -> Option<Value> {
    let digits = text.replace('_', "");
    let parsed = match digits.get(..2).map(str::to_ascii_lowercase).as_deref() {
        Some("0x") => i64::from_str_radix(&digits[2..], 16).ok(),
        Some("0o") => i64::from_str_radix(&digits[2..], 8).ok(),
        Some("0b") => i64::from_str_radix(&digits[2..], 2).ok(),
        _ => digits.parse().ok(),
    };
    // Past i64 JSON loses what Python keeps exactly: not a literal here.
    parsed.map(|n| Value::Number(n.into()))
}

fn float(text: &str) -> Option<Value> {
    let digits = text.replace('_', "");
    if digits.ends_with(['j', 'J']) {
        return None; // complex
    }
    Number::from_f64(digits.parse().ok()?).map(Value::Number)
}

fn negate(n: &Number) -> Option<Value> {
    if let Some(i) = n.as_i64() {
        return Some(Value::Number(i.checked_neg()?.into()));
    }
    Number::from_f64(-n.as_f64()?).map(Value::Number)
}

/// A string literal's value: its prefix read (raw or not; bytes and f-strings are not
/// literals here), its escapes decoded.
fn string(node: Node<'_>, source: &str) -> Option<String> {
    if node.kind() != "string" {
        return None;
    }
    let start = node.child(0)?;
    let prefix = start
        .utf8_text(source.as_bytes())
        .ok()?
        .trim_end_matches(['\'', '"'])
        .to_ascii_lowercase();
    if prefix.contains(['b', 'f', 't', 'u']) && prefix != "u" {
        return None;
    }
    let raw = prefix.contains('r');
    let mut out = String::new();
    let mut cursor = node.walk();
    for part in node.children(&mut cursor) {
        let text = part.utf8_text(source.as_bytes()).ok()?;
        match part.kind() {
            "string_start" | "string_end" => {}
            "string_content" => {
                if raw {
                    out.push_str(text);
                } else {
                    unescape(text, &mut out)?;
                }
            }
            "escape_sequence" => {
                if raw {
                    out.push_str(text);
                } else {
                    unescape(text, &mut out)?;
                }
            }
            "interpolation" => return None,
            _ => out.push_str(text),
        }
    }
    Some(out)
}

/// Python's escapes in `text`, appended to `out`; `None` for one this reader does not know.
fn unescape(text: &str, out: &mut String) -> Option<()> {
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let next = chars.next()?;
        match next {
            '\n' => {}
            '\\' => out.push('\\'),
            '\'' => out.push('\''),
            '"' => out.push('"'),
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            '0' => out.push('\0'),
            'a' => out.push('\x07'),
            'b' => out.push('\x08'),
            'f' => out.push('\x0c'),
            'v' => out.push('\x0b'),
            'x' | 'u' | 'U' => {
                let width = match next {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let hex: String = chars.by_ref().take(width).collect();
                let code = u32::from_str_radix(&hex, 16).ok()?;
                out.push(char::from_u32(code)?);
            }
            _ => return None,
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tree_sitter::Parser;

    use super::*;

    fn literal(text: &str) -> Option<Value> {
        let mut parser = Parser::new();
        parser
            .set_language(&tree_sitter_python::LANGUAGE.into())
            .unwrap();
        let tree = parser.parse(text, None).unwrap();
        let statement = named(tree.root_node())[0];
        value(named(statement)[0], text)
    }

    #[test]
    fn python_literals_read_as_json_and_anything_else_is_none() {
        for (text, expected) in [
            ("42", json!(42)),
            ("-7", json!(-7)),
            ("1_000", json!(1000)),
            ("0x1f", json!(31)),
            ("0.5", json!(0.5)),
            ("-2.5e3", json!(-2500.0)),
            ("True", json!(true)),
            ("None", json!(null)),
            ("'a\\tb'", json!("a\tb")),
            ("\"it's\"", json!("it's")),
            ("r'\\d+'", json!("\\d+")),
            ("'ab' 'cd'", json!("abcd")),
            ("'\\u00e9'", json!("é")),
            ("[1, [2, 3], ()]", json!([1, [2, 3], []])),
            ("(1, 'x')", json!([1, "x"])),
            ("{'a': 1, 'b': [True]}", json!({"a": 1, "b": [true]})),
            ("((3))", json!(3)),
        ] {
            assert_eq!(literal(text), Some(expected), "{text}");
        }
        for text in [
            "x",
            "f(1)",
            "{1, 2}",
            "b'x'",
            "f'{x}'",
            "{1: 2}",
            "1j",
            "99999999999999999999",
            "[1, x]",
            "not True",
        ] {
            assert_eq!(literal(text), None, "{text}");
        }
    }
}
