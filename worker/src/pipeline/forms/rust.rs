//! Generated Rust's cases: the module (its `use` lines gathered once, first) and the test
//! appended to it are one crate; the test binds each case's inputs as literals of the
//! parameters' declared types (there is no JSON decoder without crates) and calls the function
//! (`rust_cases.rs`, with the calls rendered here).

use std::fmt::Write as _;

use serde_json::Value;

use super::FunctionCases;
use super::scan::{self, Dialect};
use super::types::{self, Ty};

const DRIVER: &str = include_str!("rust_cases.rs");

/// Rust's scan: a `///` comment documents a function; coverage is not measured.
pub(crate) const DIALECT: Dialect = Dialect {
    declarations: &["fn {}(", "fn {}<"],
    typed: false,
    documented: scan::rust_doc,
    branches: &[
        "if ", "for ", "while ", "loop ", "=> ", "&&", "||", "?;", "?)", "?.",
    ],
    risky: &[
        "unsafe ",
        "std::process::Command",
        "std::net::",
        "process::exit(",
        "std::fs::remove_dir_all(",
        "transmute(",
    ],
    unmeasured: &["coverage"],
};

/// The module as one crate's first part: its `use` lines once each, first (two functions that
/// both `use std::collections::HashMap` would otherwise define it twice).
pub(crate) fn program(module: &str) -> String {
    let mut uses: Vec<&str> = Vec::new();
    let mut rest = String::new();
    for line in module.lines() {
        if line.starts_with("use ") && line.trim_end().ends_with(';') {
            if !uses.contains(&line.trim_end()) {
                uses.push(line.trim_end());
            }
            continue;
        }
        rest.push_str(line);
        rest.push('\n');
    }
    if uses.is_empty() {
        return rest;
    }
    format!("{}\n\n{rest}", uses.join("\n"))
}

/// The test for `functions` (each case bounded by `case_timeout_ms`), writing its lines to
/// `report` (a path below the work directory) with `nonce`.
pub(crate) fn render(
    functions: &[FunctionCases],
    case_timeout_ms: u64,
    report: &str,
    nonce: &str,
) -> String {
    let mut out = format!(
        "\n\n{DRIVER}\nconst CODEGEN_REPORT: &str = {report:?};\nconst CODEGEN_NONCE: &str = {nonce:?};\n\n#[allow(unused_mut, clippy::all)]\nfn codegen_cases() {{\n"
    );
    for (i, f) in functions.iter().enumerate() {
        // `Result<T, E>`, `io::Result<T>`, `fmt::Result`: the `Ok` value, or the `Err`.
        let result = matches!(types::parse(&f.returns), Ok(ty) if ty.base() == "Result");
        for (j, case) in f.cases.iter().enumerate() {
            match bindings(f, case) {
                Ok((lets, args)) => {
                    let call = format!("{}({})", f.name, args.join(", "));
                    let render = "let mut codegen_out = String::new();\n        (&&&CodegenWrap(&codegen_v)).codegen_render(&mut codegen_out);\n        codegen_returned(codegen_out)";
                    let body = if result {
                        format!(
                            "match {call} {{\n        Ok(codegen_v) => {{\n        {render}\n        }}\n        Err(codegen_e) => {{\n        let codegen_m = (&&CodegenWrap(&codegen_e)).codegen_message();\n        codegen_err(&codegen_e, codegen_m)\n        }}\n        }}"
                        )
                    } else {
                        format!("let codegen_v = {call};\n        {render}")
                    };
                    let _ = writeln!(
                        out,
                        "    codegen_run({i}, {j}, {case_timeout_ms}, || {{\n{lets}        {body}\n    }});"
                    );
                }
                // An input no literal of its type can hold: the case fails saying so, and
                // the others run.
                Err(why) => {
                    let _ = writeln!(
                        out,
                        "    codegen_run({i}, {j}, {case_timeout_ms}, || CodegenOutcome::Raised(vec![\"CodegenInputError\".to_owned()], {why:?}.to_owned()));"
                    );
                }
            }
        }
    }
    out.push_str("}\n");
    out
}

/// A case's `let` lines and the call's arguments.
fn bindings(
    f: &FunctionCases,
    case: &proto::harness::HarnessCase,
) -> Result<(String, Vec<String>), String> {
    let mut lets = String::new();
    let mut args = Vec::new();
    for (k, (name, text)) in f.params.iter().zip(&f.types).enumerate() {
        let ty = types::parse(text).map_err(|e| format!("input {name}: {e}"))?;
        let value = case.inputs.get(name).unwrap_or(&Value::Null);
        let owned = Ty {
            reference: None,
            ..owned(&ty)
        };
        let literal = literal(&owned, value).map_err(|e| format!("input {name} ({text}): {e}"))?;
        let declared = spelled(&owned);
        let _ = writeln!(lets, "        let mut a{k}: {declared} = {literal};");
        args.push(match ty.reference {
            Some(true) => format!("&mut a{k}"),
            Some(false) => format!("&a{k}"),
            None => format!("a{k}"),
        });
    }
    Ok((lets, args))
}

/// The owned type a borrowed one is taken from: `str` → `String`, `[T]` → `Vec<T>`.
fn owned(ty: &Ty) -> Ty {
    match ty.name.as_str() {
        "str" => Ty {
            name: "String".into(),
            ..ty.clone()
        },
        "[]" => Ty {
            name: "Vec".into(),
            ..ty.clone()
        },
        _ => ty.clone(),
    }
}

/// `ty` written back as Rust.
fn spelled(ty: &Ty) -> String {
    let inner = match ty.name.as_str() {
        "()" => {
            let items: Vec<String> = ty.args.iter().map(spelled).collect();
            if items.len() == 1 {
                format!("({},)", items[0])
            } else {
                format!("({})", items.join(", "))
            }
        }
        "[]" => format!("[{}]", spelled(&ty.args[0])),
        "[;]" => format!("[{}; {}]", spelled(&ty.args[0]), ty.len.unwrap_or(0)),
        name if ty.args.is_empty() => name.to_owned(),
        name => {
            let args: Vec<String> = ty.args.iter().map(spelled).collect();
            format!("{name}<{}>", args.join(", "))
        }
    };
    match ty.reference {
        Some(true) => format!("&mut {inner}"),
        Some(false) => format!("&{inner}"),
        None => inner,
    }
}

/// `value` as a Rust literal of type `ty`.
fn literal(ty: &Ty, value: &Value) -> Result<String, String> {
    let arg = |i: usize| {
        ty.args
            .get(i)
            .ok_or_else(|| format!("`{}` without its type", ty.name))
    };
    let items = |value: &Value| -> Result<Vec<String>, String> {
        let element = arg(0)?;
        value
            .as_array()
            .ok_or_else(|| format!("{value} is not an array"))?
            .iter()
            .map(|v| literal(&owned_element(element), v).map(|l| borrowed(element, l)))
            .collect()
    };
    if let Some(n) = types::integer_literal(ty.base(), value) {
        return n.map(|n| n.to_string());
    }
    let text = match (ty.base(), value) {
        ("f32" | "f64", Value::Number(n)) => format!("{:?}", n.as_f64().unwrap_or_default()),
        ("bool", Value::Bool(b)) => b.to_string(),
        ("char", Value::String(s)) if s.chars().count() == 1 => {
            format!("{:?}", s.chars().next().unwrap_or_default())
        }
        ("String", Value::String(s)) => format!("String::from({s:?})"),
        ("str", Value::String(s)) => format!("{s:?}"),
        ("Vec", _) => format!("vec![{}]", items(value)?.join(", ")),
        ("VecDeque" | "HashSet" | "BTreeSet", _) => format!(
            "std::collections::{}::from([{}])",
            ty.base(),
            items(value)?.join(", ")
        ),
        ("[;]", _) => {
            let items = items(value)?;
            if Some(items.len()) != ty.len {
                return Err(format!(
                    "{} elements for an array of {}",
                    items.len(),
                    ty.len.unwrap_or(0)
                ));
            }
            format!("[{}]", items.join(", "))
        }
        ("Option", Value::Null) => "None".into(),
        ("Option", _) => format!("Some({})", literal(arg(0)?, value)?),
        ("Box", _) => format!("Box::new({})", literal(arg(0)?, value)?),
        ("HashMap" | "BTreeMap", Value::Object(map)) => {
            let (key, val) = (arg(0)?, arg(1)?);
            let pairs: Result<Vec<String>, String> = map
                .iter()
                .map(|(k, v)| {
                    let k = key_literal(key, k)?;
                    let v = literal(&owned_element(val), v).map(|l| borrowed(val, l))?;
                    Ok(format!("({k}, {v})"))
                })
                .collect();
            format!(
                "std::collections::{}::from([{}])",
                ty.base(),
                pairs?.join(", ")
            )
        }
        ("()", Value::Array(values)) if values.len() == ty.args.len() => {
            let parts: Result<Vec<String>, String> = ty
                .args
                .iter()
                .zip(values)
                .map(|(t, v)| literal(&owned_element(t), v).map(|l| borrowed(t, l)))
                .collect();
            let parts = parts?;
            if parts.len() == 1 {
                format!("({},)", parts[0])
            } else {
                format!("({})", parts.join(", "))
            }
        }
        ("()", Value::Null) if ty.args.is_empty() => "()".into(),
        (name, value) => {
            return Err(format!("{value} cannot be written as a `{name}`"));
        }
    };
    Ok(text)
}

/// An element's owned form (its literal is built owned, then borrowed if it is a reference).
fn owned_element(ty: &Ty) -> Ty {
    match ty.reference {
        // `&str` elements are written as string literals, which are `&str` already.
        Some(_) if ty.name == "str" => Ty {
            reference: None,
            ..ty.clone()
        },
        Some(_) => Ty {
            reference: None,
            ..owned(ty)
        },
        None => ty.clone(),
    }
}

fn borrowed(ty: &Ty, literal: String) -> String {
    match ty.reference {
        Some(_) if ty.name == "str" => literal,
        Some(true) => format!("&mut {literal}"),
        Some(false) => format!("&{literal}"),
        None => literal,
    }
}

/// A JSON object's key as a literal of the map's key type.
fn key_literal(ty: &Ty, key: &str) -> Result<String, String> {
    let value = match ty.base() {
        "String" | "str" => Value::from(key),
        "char" => Value::from(key),
        "bool" => Value::Bool(key == "true"),
        _ => serde_json::from_str::<Value>(key)
            .ok()
            .filter(Value::is_number)
            .ok_or_else(|| format!("the key {key:?} is not a `{}`", ty.name))?,
    };
    literal(&owned_element(ty), &value).map(|l| borrowed(ty, l))
}

#[cfg(test)]
mod tests {
    use proto::{ErrorKind, Language};
    use serde_json::json;

    use super::super::testing::{self, case, function};
    use super::*;

    /// The module and its cases in the real Rust image: inputs of many types written as
    /// literals, every kind of outcome the driver writes, judged.
    #[tokio::test]
    async fn each_case_is_called_with_literal_inputs_and_judged_in_the_real_image() {
        let module = r#"use std::collections::HashMap;

/// The primes up to n.
fn sieve(n: i64) -> Result<Vec<i64>, String> {
    if n < 0 {
        return Err(format!("negative: {n}"));
    }
    let mut primes = Vec::new();
    for i in 2..=n {
        if primes.iter().all(|p| i % p != 0) {
            primes.push(i);
        }
    }
    println!("noise");
    Ok(primes)
}

use std::collections::HashMap;
use std::collections::HashSet;

fn counts(words: &[&str]) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for w in words {
        *out.entry(w.to_string()).or_insert(0) += 1;
    }
    out
}

fn shout(s: &str, times: Option<u32>) -> String {
    s.to_uppercase().repeat(times.unwrap_or(1) as usize)
}

fn unique(xs: Vec<i32>) -> HashSet<i32> {
    xs.into_iter().collect()
}

fn first(xs: &[u8], pair: (i32, String)) -> (u8, String) {
    (xs[0], pair.1)
}

fn forever() -> i32 {
    loop {}
}

fn ratio(a: f64, b: f64) -> f64 {
    a / b
}

fn grow(xs: &mut Vec<i64>) {
    xs.push(1);
}

fn lookup(m: HashMap<i32, String>, k: i32) -> Option<String> {
    m.get(&k).cloned()
}

#[derive(Debug)]
struct Point {
    x: i32,
    y: i32,
}

fn point(x: i32) -> Point {
    Point { x, y: x * 2 }
}

struct Opaque;

struct Failure;

fn opaque(fail: bool) -> Result<Opaque, Failure> {
    if fail { Err(Failure) } else { Ok(Opaque) }
}

fn noisy(x: i32) -> i32 {
    let unused = 1;
    x
}
"#;
        let functions = [
            function(
                "sieve",
                &[("n", "i64")],
                "Result<Vec<i64>, String>",
                vec![
                    case("ten", json!({"n": 10}), json!([2, 3, 5, 7]), None),
                    case("wrong", json!({"n": 3}), json!([2]), None),
                    case("negative", json!({"n": -1}), Value::Null, Some("Err")),
                    case("by type", json!({"n": -1}), Value::Null, Some("String")),
                    case("not a panic", json!({"n": -1}), Value::Null, Some("panic")),
                    case("not an int", json!({"n": "ten"}), json!([]), None),
                ],
            ),
            function(
                "counts",
                &[("words", "&[&str]")],
                "HashMap<String, usize>",
                vec![case(
                    "slice of str",
                    json!({"words": ["a", "b", "a"]}),
                    json!({"a": 2, "b": 1}),
                    None,
                )],
            ),
            function(
                "shout",
                &[("s", "&str"), ("times", "Option<u32>")],
                "String",
                vec![
                    case(
                        "none",
                        json!({"s": "a\"b\n", "times": null}),
                        json!("A\"B\n"),
                        None,
                    ),
                    case("some", json!({"s": "x"}), json!("X"), None),
                ],
            ),
            function(
                "shout",
                &[("s", "&str"), ("times", "Option<u32>")],
                "String",
                vec![case(
                    "twice",
                    json!({"s": "é", "times": 2}),
                    json!("ÉÉ"),
                    None,
                )],
            ),
            function(
                "unique",
                &[("xs", "Vec<i32>")],
                "HashSet<i32>",
                vec![case(
                    "set sorted",
                    json!({"xs": [10, 3, 10, 1]}),
                    json!([1, 3, 10]),
                    None,
                )],
            ),
            function(
                "first",
                &[("xs", "&[u8]"), ("pair", "(i32, String)")],
                "(u8, String)",
                vec![
                    case(
                        "tuple",
                        json!({"xs": [7], "pair": [1, "b"]}),
                        json!([7, "b"]),
                        None,
                    ),
                    case(
                        "panics",
                        json!({"xs": [], "pair": [1, "b"]}),
                        Value::Null,
                        Some("panic"),
                    ),
                    case(
                        "unexpected panic",
                        json!({"xs": [], "pair": [1, "b"]}),
                        json!([0, "b"]),
                        None,
                    ),
                ],
            ),
            function(
                "forever",
                &[],
                "i32",
                vec![case("loops", json!({}), json!(1), None)],
            ),
            function(
                "ratio",
                &[("a", "f64"), ("b", "f64")],
                "f64",
                vec![
                    case("third", json!({"a": 1, "b": 3}), json!(0.333333333), None),
                    case("infinite", json!({"a": 1, "b": 0}), json!("inf"), None),
                ],
            ),
            function(
                "grow",
                &[("xs", "&mut Vec<i64>")],
                "()",
                vec![case("unit", json!({"xs": []}), Value::Null, None)],
            ),
            function(
                "lookup",
                &[("m", "HashMap<i32, String>"), ("k", "i32")],
                "Option<String>",
                vec![
                    case(
                        "int keys",
                        json!({"m": {"1": "one"}, "k": 1}),
                        json!("one"),
                        None,
                    ),
                    case("absent", json!({"m": {}, "k": 2}), Value::Null, None),
                ],
            ),
            // Types of the program's own: no JSON, but they compile and say what they are.
            function(
                "point",
                &[("x", "i32")],
                "Point",
                vec![case(
                    "debug text",
                    json!({"x": 1}),
                    json!("Point { x: 1, y: 2 }"),
                    None,
                )],
            ),
            function(
                "opaque",
                &[("fail", "bool")],
                "Result<Opaque, Failure>",
                vec![
                    case(
                        "type name",
                        json!({"fail": false}),
                        json!("<main::Opaque>"),
                        None,
                    ),
                    case(
                        "an error without Debug",
                        json!({"fail": true}),
                        Value::Null,
                        Some("Failure"),
                    ),
                ],
            ),
            function(
                "noisy",
                &[("x", "i32")],
                "i32",
                vec![case("warns", json!({"x": 4}), json!(4), None)],
            ),
        ];
        let (reports, result) = testing::run(Language::Rust, module, &functions).await;
        let reports = reports.unwrap_or_else(|| panic!("a report: {result:?}"));
        let verdicts = |f: &str| testing::verdicts(&reports, f);
        assert_eq!(
            verdicts("sieve"),
            [
                (true, None),
                (false, Some(ErrorKind::WrongOutput)),
                (true, None),
                (true, None),
                (false, Some(ErrorKind::WrongOutput)),
                (false, Some(ErrorKind::Runtime)),
            ],
            "{reports:#?}"
        );
        let sieve = &reports["sieve"].cases;
        assert_eq!(sieve[1].actual_output, json!([2, 3]));
        assert_eq!(
            sieve[4].error.as_deref(),
            Some("expected panic, got Err: \"negative: -1\"")
        );
        assert!(
            sieve[5]
                .error
                .as_deref()
                .unwrap()
                .contains("cannot be written as a `i64`"),
            "{:?}",
            sieve[5]
        );
        assert_eq!(verdicts("counts"), [(true, None)], "{reports:#?}");
        // Two functions of one name: the second's cases are its own (by index).
        assert_eq!(verdicts("shout"), [(true, None)], "{reports:#?}");
        assert_eq!(verdicts("unique"), [(true, None)], "{reports:#?}");
        assert_eq!(
            verdicts("first"),
            [
                (true, None),
                (true, None),
                (false, Some(ErrorKind::Runtime))
            ],
            "{reports:#?}"
        );
        assert!(
            reports["first"].cases[2]
                .error
                .as_deref()
                .unwrap()
                .contains("index out of bounds")
        );
        assert_eq!(verdicts("forever"), [(false, Some(ErrorKind::Timeout))]);
        assert_eq!(
            verdicts("ratio"),
            [(true, None), (true, None)],
            "{reports:#?}"
        );
        assert_eq!(verdicts("grow"), [(true, None)], "{reports:#?}");
        assert_eq!(
            verdicts("lookup"),
            [(true, None), (true, None)],
            "{reports:#?}"
        );
        assert_eq!(verdicts("point"), [(true, None)], "{reports:#?}");
        assert_eq!(
            verdicts("opaque"),
            [(true, None), (true, None)],
            "{reports:#?}"
        );
        assert_eq!(verdicts("noisy"), [(true, None)], "{reports:#?}");
        // rustc's warnings about the module are read back with their lines; the test's own
        // lines (past the module's) say nothing.
        let program = program(module);
        let warnings = super::super::warnings::rustc(
            &result.compile.as_ref().unwrap().output,
            program.lines().count(),
        );
        let line = |text: &str| program.lines().position(|l| l.contains(text)).unwrap() + 1;
        assert_eq!(
            warnings,
            [
                format!("line {}: unused variable: `unused`", line("let unused")),
                format!(
                    "line {}: fields `x` and `y` are never read",
                    line("    x: i32,")
                ),
            ],
            "{:?}",
            result.compile
        );
    }

    #[test]
    fn a_value_its_type_cannot_hold_is_refused_before_it_is_written() {
        let lit = |ty: &str, value: Value| literal(&types::parse(ty).unwrap(), &value);
        assert_eq!(lit("i32", json!(-5)).unwrap(), "-5");
        assert_eq!(
            lit("u64", json!(18446744073709551615_u64)).unwrap(),
            "18446744073709551615"
        );
        assert!(
            lit("i32", json!(3_000_000_000_i64))
                .unwrap_err()
                .contains("out of the range")
        );
        assert!(
            lit("u8", json!(-1))
                .unwrap_err()
                .contains("out of the range")
        );
        assert!(lit("i64", json!(1.5)).is_err());
        assert_eq!(lit("[u8; 2]", json!([1, 2])).unwrap(), "[1, 2]");
        assert!(
            lit("[u8; 3]", json!([1, 2]))
                .unwrap_err()
                .contains("2 elements")
        );
        assert_eq!(
            lit("Vec<Option<&str>>", json!(["a", null])).unwrap(),
            "vec![Some(\"a\"), None]"
        );
    }

    #[test]
    fn use_lines_are_gathered_once_before_the_code() {
        assert_eq!(
            program("use std::fmt;\nfn a() {}\nuse std::fmt;\nuse std::io;\nfn b() {}\n"),
            "use std::fmt;\nuse std::io;\n\nfn a() {}\nfn b() {}\n"
        );
    }
}
