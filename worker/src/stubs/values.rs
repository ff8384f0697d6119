//! Literals of JavaScript, TypeScript, Go, Rust, Java, C and C++ as JSON, read from each
//! language's own tree: what a doc comment's example calls pass and expect. Numbers, strings
//! and characters, booleans, null (`null`, `undefined`, `nil`, `None`, `nullptr`), arrays and
//! the spellings each language writes a list in (`[]int{1, 2}`, `vec![1, 2]`,
//! `Arrays.asList(1, 2)`, `List.of(1, 2)`, `new int[]{1, 2}`, `{1, 2}`,
//! `std::vector<int>{1, 2}`), objects with string keys (JavaScript's, Go's maps, Java's
//! `Map.of`), and the wrappers that only convert (`String::from("a")`, `"a".to_string()`,
//! `Some(x)`, `new ArrayList<>(...)`, `std::string("a")`). Anything else is not a literal here,
//! and the example that holds it is left out.

use serde_json::{Map, Number, Value};
use tree_sitter::Node;

use super::literals::named;
use super::signatures::Grammar;

/// The arguments of `call` when it calls `function` with literals only, in order.
pub(super) fn call_arguments(grammar: Grammar, function: &str, call: &str) -> Option<Vec<Value>> {
    let parsed = Parsed::of(grammar, call)?;
    let (node, source) = (parsed.node()?, parsed.source.as_str());
    let called = match node.kind() {
        "call_expression" => node.child_by_field_name("function")?,
        // Java: `f(x)`, not `other.f(x)`.
        "method_invocation" if node.child_by_field_name("object").is_none() => {
            node.child_by_field_name("name")?
        }
        _ => return None,
    };
    if called.utf8_text(source.as_bytes()).ok()? != function {
        return None;
    }
    items(grammar, node.child_by_field_name("arguments")?, source)
}

/// `text` as one literal.
pub(super) fn literal(grammar: Grammar, text: &str) -> Option<Value> {
    let parsed = Parsed::of(grammar, text)?;
    value(grammar, parsed.node()?, &parsed.source)
}

/// `text` parsed as the value of a declaration in `grammar`, in an error-free tree: the tree,
/// its source and where `text` is in it.
struct Parsed {
    tree: tree_sitter::Tree,
    source: String,
    span: (usize, usize),
}

impl Parsed {
    fn of(grammar: Grammar, text: &str) -> Option<Self> {
        let text = text.trim();
        if text.is_empty() {
            return None;
        }
        let (before, after) = match grammar {
            Grammar::JavaScript | Grammar::TypeScript => ("let _v = ", ";"),
            Grammar::Go => ("package main\nfunc _() { _ = ", " }"),
            Grammar::Rust => ("fn _x() { let _v = ", "; }"),
            Grammar::Java => ("class _X { void _x() { Object _v = ", "; } }"),
            Grammar::C | Grammar::Cpp => ("_t _v = ", ";"),
        };
        let source = format!("{before}{text}{after}");
        let tree = grammar.parse(&source)?;
        if tree.root_node().has_error() {
            return None;
        }
        Some(Self {
            tree,
            source,
            span: (before.len(), before.len() + text.len()),
        })
    }

    /// The node that spans exactly the text.
    fn node(&self) -> Option<Node<'_>> {
        let (start, end) = self.span;
        let node = self
            .tree
            .root_node()
            .named_descendant_for_byte_range(start, end)?;
        (node.start_byte() == start && node.end_byte() == end).then_some(node)
    }
}

/// The values of a list's items (an argument list, an array, an initializer list).
fn items(grammar: Grammar, list: Node<'_>, source: &str) -> Option<Vec<Value>> {
    named(list)
        .into_iter()
        .filter(|n| !matches!(n.kind(), "comment" | "line_comment" | "block_comment"))
        .map(|item| value(grammar, item, source))
        .collect()
}

/// `node` as JSON, when it is a literal.
fn value(grammar: Grammar, node: Node<'_>, source: &str) -> Option<Value> {
    let text = node.utf8_text(source.as_bytes()).ok()?;
    let only = || match named(node)[..] {
        [inner] => value(grammar, inner, source),
        _ => None,
    };
    match node.kind() {
        "number"
        | "int_literal"
        | "float_literal"
        | "integer_literal"
        | "decimal_integer_literal"
        | "hex_integer_literal"
        | "decimal_floating_point_literal"
        | "number_literal" => number(text),
        "string"
        | "interpreted_string_literal"
        | "string_literal"
        | "char_literal"
        | "character_literal" => unquote(text).map(Value::String),
        "raw_string_literal" => raw(text).map(Value::String),
        "true" => Some(Value::Bool(true)),
        "false" => Some(Value::Bool(false)),
        "boolean_literal" => Some(Value::Bool(text == "true")),
        "null" | "undefined" | "nil" | "null_literal" | "nullptr" => Some(Value::Null),
        "identifier" if grammar == Grammar::Rust && text == "None" => Some(Value::Null),
        "array" | "array_expression" | "tuple_expression" | "array_initializer"
        | "initializer_list" => items(grammar, node, source).map(Value::Array),
        "object" => {
            let mut object = Map::new();
            for pair in named(node) {
                if pair.kind() != "pair" {
                    return None;
                }
                let key = pair.child_by_field_name("key")?;
                let key = match key.kind() {
                    "property_identifier" => key.utf8_text(source.as_bytes()).ok()?.to_owned(),
                    _ => match value(grammar, key, source)? {
                        Value::String(key) => key,
                        _ => return None,
                    },
                };
                object.insert(
                    key,
                    value(grammar, pair.child_by_field_name("value")?, source)?,
                );
            }
            Some(Value::Object(object))
        }
        "composite_literal" => value(grammar, node.child_by_field_name("body")?, source),
        "literal_value" => go_literal(grammar, node, source),
        "literal_element" | "parenthesized_expression" => only(),
        "unary_expression" => {
            let operand = named(node).into_iter().next()?;
            match (text.starts_with('-'), value(grammar, operand, source)?) {
                (true, Value::Number(n)) => negate(&n),
                (false, Value::Number(n)) if text.starts_with('+') => Some(Value::Number(n)),
                _ => None,
            }
        }
        // `vec![1, 2]`: its tokens read again as an array.
        "macro_invocation" => {
            let name = node
                .child_by_field_name("macro")?
                .utf8_text(source.as_bytes())
                .ok()?;
            let tokens = named(node).into_iter().find(|n| n.kind() == "token_tree")?;
            let tokens = tokens.utf8_text(source.as_bytes()).ok()?;
            match (name, tokens.starts_with('[')) {
                ("vec", true) => literal(grammar, tokens),
                _ => None,
            }
        }
        "call_expression" => conversion(grammar, node, source),
        "method_invocation" => java_collection(grammar, node, source),
        "object_creation_expression" => {
            let arguments = items(grammar, node.child_by_field_name("arguments")?, source)?;
            match &arguments[..] {
                [] => Some(Value::Array(Vec::new())),
                [one @ (Value::Array(_) | Value::Object(_))] => Some(one.clone()),
                _ => None,
            }
        }
        "array_creation_expression" | "compound_literal_expression" => {
            value(grammar, node.child_by_field_name("value")?, source)
        }
        _ => None,
    }
}

/// A Go composite literal's body: an array of its elements, or an object when they are keyed
/// by strings (a map).
fn go_literal(grammar: Grammar, node: Node<'_>, source: &str) -> Option<Value> {
    let elements = named(node);
    if elements.iter().all(|e| e.kind() == "keyed_element") && !elements.is_empty() {
        let mut object = Map::new();
        for element in elements {
            let Value::String(key) = value(grammar, element.child_by_field_name("key")?, source)?
            else {
                return None;
            };
            object.insert(
                key,
                value(grammar, element.child_by_field_name("value")?, source)?,
            );
        }
        return Some(Value::Object(object));
    }
    items(grammar, node, source).map(Value::Array)
}

/// A call that only converts its one argument: `String::from("a")`, `Some(x)`,
/// `Box::new(x)`, `"a".to_string()` (also `.to_owned()`, `.into()`), `std::string("a")`.
fn conversion(grammar: Grammar, node: Node<'_>, source: &str) -> Option<Value> {
    let function = node.child_by_field_name("function")?;
    let arguments = items(grammar, node.child_by_field_name("arguments")?, source)?;
    let name = function.utf8_text(source.as_bytes()).ok()?;
    let converting = [
        "String::from",
        "Some",
        "Box::new",
        "std::string",
        "string",
        "Ok",
    ];
    match &arguments[..] {
        [one] if converting.contains(&name) => Some(one.clone()),
        [] if function.kind() == "field_expression" => {
            let method = function
                .child_by_field_name("field")?
                .utf8_text(source.as_bytes())
                .ok()?;
            match method {
                "to_string" | "to_owned" | "into" | "to_vec" => {
                    value(grammar, function.child_by_field_name("value")?, source)
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// Java's collection factories: `Arrays.asList(...)`, `List.of(...)`, `Set.of(...)` (an
/// array), `Map.of(k, v, ...)` (an object with string keys).
fn java_collection(grammar: Grammar, node: Node<'_>, source: &str) -> Option<Value> {
    let object = node
        .child_by_field_name("object")?
        .utf8_text(source.as_bytes())
        .ok()?;
    let name = node
        .child_by_field_name("name")?
        .utf8_text(source.as_bytes())
        .ok()?;
    let arguments = items(grammar, node.child_by_field_name("arguments")?, source)?;
    match (object, name) {
        ("Arrays", "asList") | ("List" | "Set", "of") => Some(Value::Array(arguments)),
        ("Map", "of") if arguments.len() % 2 == 0 => {
            let mut map = Map::new();
            for pair in arguments.chunks(2) {
                let Value::String(key) = &pair[0] else {
                    return None;
                };
                map.insert(key.clone(), pair[1].clone());
            }
            Some(Value::Object(map))
        }
        _ => None,
    }
}

/// A number literal, its digit separators and its type suffix (`7u8`, `2L`, `1.5f`, `10ull`)
/// left out.
fn number(text: &str) -> Option<Value> {
    let text = text.replace(['_', '\''], "");
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.as_str()),
    };
    let signed = |n: i64| if negative { -n } else { n };
    if let Some(hex) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        let hex = hex.trim_end_matches(['u', 'U', 'l', 'L']);
        return i64::from_str_radix(hex, 16)
            .ok()
            .map(|n| Value::Number(signed(n).into()));
    }
    // The longest prefix that reads as a decimal number; what follows must be a suffix.
    let mut end = 0;
    let bytes = digits.as_bytes();
    while end < bytes.len() {
        let c = bytes[end];
        let exponent_sign =
            matches!(c, b'+' | b'-') && end > 0 && matches!(bytes[end - 1], b'e' | b'E');
        let exponent = matches!(c, b'e' | b'E')
            && bytes
                .get(end + 1)
                .is_some_and(|n| n.is_ascii_digit() || matches!(n, b'+' | b'-'));
        if c.is_ascii_digit() || c == b'.' || exponent || exponent_sign {
            end += 1;
        } else {
            break;
        }
    }
    let (number, suffix) = digits.split_at(end);
    if !suffix.is_empty() && !suffix.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return None;
    }
    let float_suffix = suffix.starts_with(['f', 'F', 'd', 'D']);
    if !float_suffix
        && !number.contains(['.', 'e', 'E'])
        && let Ok(n) = number.parse::<i64>()
    {
        return Some(Value::Number(signed(n).into()));
    }
    let n: f64 = number.parse().ok()?;
    Number::from_f64(if negative { -n } else { n }).map(Value::Number)
}

fn negate(n: &Number) -> Option<Value> {
    if let Some(i) = n.as_i64() {
        return Some(Value::Number((-i).into()));
    }
    Number::from_f64(-n.as_f64()?).map(Value::Number)
}

/// A quoted string or character (`"a\n"`, `'a'`, `u8"a"`, `L'a'`), its escapes read.
fn unquote(text: &str) -> Option<String> {
    let start = text.find(['"', '\''])?;
    let quote = text[start..].chars().next()?;
    let inner = text[start + 1..].strip_suffix(quote)?;
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        out.push(match chars.next()? {
            'n' => '\n',
            't' => '\t',
            'r' => '\r',
            '0' => '\0',
            'u' => {
                let rest: String = chars.clone().collect();
                // Rust's `\u{1F600}`, or JavaScript's and Java's `\u00e9`.
                let (hex, used) = match rest.strip_prefix('{') {
                    Some(braced) => {
                        let close = braced.find('}')?;
                        (braced[..close].to_owned(), close + 2)
                    }
                    None => (rest.get(..4)?.to_owned(), 4),
                };
                for _ in 0..used {
                    chars.next();
                }
                char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?
            }
            other @ ('\\' | '"' | '\'' | '/' | '`') => other,
            _ => return None,
        });
    }
    Some(out)
}

/// A raw string: Go's `` `a` ``, Rust's `r"a"` and `r#"a"#`, C++'s `R"(a)"`.
fn raw(text: &str) -> Option<String> {
    if let Some(inner) = text.strip_prefix('`') {
        return inner.strip_suffix('`').map(str::to_owned);
    }
    if let Some(rest) = text.strip_prefix('r') {
        let hashes = rest.len() - rest.trim_start_matches('#').len();
        let inner = rest[hashes..].strip_prefix('"')?;
        return inner
            .strip_suffix(&format!("\"{}", "#".repeat(hashes)))
            .map(str::to_owned);
    }
    let rest = text.strip_prefix("R\"")?;
    let open = rest.find('(')?;
    let delimiter = &rest[..open];
    rest[open + 1..]
        .strip_suffix(&format!("){delimiter}\""))
        .map(str::to_owned)
}
