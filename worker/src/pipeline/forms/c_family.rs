//! Generated C's and C++'s cases: the test appended to the module (one translation unit) runs
//! each case in a child process (`c_cases.h`), with the case's inputs written as literals of
//! the parameters' declared types (`forms/types.rs`: there is no JSON decoder in those images)
//! and the value rendered as JSON by its static type (`c_json.h`'s `_Generic`, `cpp_json.hpp`'s
//! overloads).

use std::fmt::Write as _;

use serde_json::Value;

use super::FunctionCases;
use super::scan::{self, Dialect};
use super::types::{self, Ty};

const RUNTIME: &str = include_str!("c_cases.h");
const C_JSON: &str = include_str!("c_json.h");
const CPP_JSON: &str = include_str!("cpp_json.hpp");

const BRANCHES: &[&str] = &[
    "if (", "if(", "for (", "for(", "while (", "while(", "case ", "&&", "||", " ? ",
];

/// C's scan: a comment documents a function; coverage is not measured.
pub(crate) const C_DIALECT: Dialect = Dialect {
    declarations: &[],
    typed: true,
    documented: scan::slash_doc,
    branches: BRANCHES,
    risky: &[
        "system(", "popen(", "exec", "fork(", "socket(", "gets(", "strcpy(", "sprintf(",
    ],
    unmeasured: &["coverage"],
};

/// C++'s scan: as C's, `catch` adding a path.
pub(crate) const CPP_DIALECT: Dialect = Dialect {
    branches: &[
        "if (", "if(", "for (", "for(", "while (", "while(", "case ", "catch", "&&", "||", " ? ",
    ],
    ..C_DIALECT
};

/// Which of the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lang {
    C,
    Cpp,
}

pub(crate) fn render_c(
    functions: &[FunctionCases],
    case_timeout_ms: u64,
    report: &str,
    nonce: &str,
) -> String {
    render(Lang::C, functions, case_timeout_ms, report, nonce)
}

pub(crate) fn render_cpp(
    functions: &[FunctionCases],
    case_timeout_ms: u64,
    report: &str,
    nonce: &str,
) -> String {
    render(Lang::Cpp, functions, case_timeout_ms, report, nonce)
}

fn render(
    lang: Lang,
    functions: &[FunctionCases],
    case_timeout_ms: u64,
    report: &str,
    nonce: &str,
) -> String {
    let json = match lang {
        Lang::C => C_JSON,
        Lang::Cpp => CPP_JSON,
    };
    let mut out = format!(
        "\n\nstatic const char CODEGEN_REPORT[] = {};\nstatic const char CODEGEN_NONCE[] = {};\n{RUNTIME}\n{json}\n",
        string(report),
        string(nonce)
    );
    let mut calls = String::new();
    for (i, f) in functions.iter().enumerate() {
        let void = matches!(f.returns.trim(), "void" | "");
        for (j, case) in f.cases.iter().enumerate() {
            let _ = writeln!(
                out,
                "static void codegen_case_{i}_{j}(struct codegen_buf *out) {{"
            );
            match bindings(lang, f, case) {
                Ok((lets, args)) => {
                    let call = format!("{}({})", f.name, args.join(", "));
                    let body = match (lang, void) {
                        (_, true) => {
                            format!("{call};\n    codegen_puts(out, \"\\\"returned\\\": null\");")
                        }
                        (Lang::C, false) => {
                            format!(
                                "codegen_puts(out, \"\\\"returned\\\": \");\n    CODEGEN_JSON(out, {call});"
                            )
                        }
                        (Lang::Cpp, false) => format!(
                            "auto codegen_value = {call};\n    codegen_puts(out, \"\\\"returned\\\": \");\n    codegen::render(*out, codegen_value);"
                        ),
                    };
                    match lang {
                        Lang::C => {
                            let _ = writeln!(out, "{lets}    {body}");
                        }
                        Lang::Cpp => {
                            let _ = writeln!(
                                out,
                                "    try {{\n{lets}    {body}\n    }} catch (const std::exception &e) {{\n        out->len = 0;\n        codegen::raised(*out, e);\n    }} catch (const char *s) {{\n        const char *names[] = {{\"const char*\"}};\n        out->len = 0;\n        codegen_raised(out, names, 1, s);\n    }} catch (const std::string &s) {{\n        const char *names[] = {{\"std::string\"}};\n        out->len = 0;\n        codegen_raised(out, names, 1, s.c_str());\n    }} catch (...) {{\n        const char *names[] = {{\"unknown\"}};\n        out->len = 0;\n        codegen_raised(out, names, 1, \"\");\n    }}"
                            );
                        }
                    }
                }
                Err(why) => {
                    let _ = writeln!(
                        out,
                        "    const char *names[] = {{\"CodegenInputError\"}};\n    codegen_raised(out, names, 1, {});",
                        string(&why)
                    );
                }
            }
            out.push_str("}\n");
            let _ = writeln!(
                calls,
                "    codegen_run({i}, {j}, {case_timeout_ms}L, codegen_case_{i}_{j});"
            );
        }
    }
    let _ = write!(out, "static void codegen_cases(void) {{\n{calls}}}\n");
    out
}

/// A case's declarations and the call's arguments.
fn bindings(
    lang: Lang,
    f: &FunctionCases,
    case: &proto::harness::HarnessCase,
) -> Result<(String, Vec<String>), String> {
    let mut lets = String::new();
    let mut args = Vec::new();
    for (k, (name, text)) in f.params.iter().zip(&f.types).enumerate() {
        let ty = types::parse(text).map_err(|e| format!("input {name}: {e}"))?;
        let value = case.inputs.get(name).unwrap_or(&Value::Null);
        let literal =
            literal(lang, &ty, value).map_err(|e| format!("input {name} ({text}): {e}"))?;
        let _ = writeln!(lets, "    {} = {literal};", declared(&ty, &format!("a{k}")));
        args.push(format!("a{k}"));
    }
    Ok((lets, args))
}

/// The declaration of `name` as a variable of `ty` (C++: the value a reference binds to).
fn declared(ty: &Ty, name: &str) -> String {
    if ty.name == "*" {
        return format!("{} *{name}", spelled(&ty.args[0]));
    }
    format!("{} {name}", spelled(ty))
}

/// `ty` written back, without `const` or references.
fn spelled(ty: &Ty) -> String {
    match ty.name.as_str() {
        "*" => format!("{} *", spelled(&ty.args[0])),
        name if ty.args.is_empty() => name.to_owned(),
        name => {
            let args: Vec<String> = ty.args.iter().map(spelled).collect();
            format!("{name}<{}>", args.join(", "))
        }
    }
}

/// `value` as a literal of `ty`.
fn literal(lang: Lang, ty: &Ty, value: &Value) -> Result<String, String> {
    let arg = |i: usize| {
        ty.args
            .get(i)
            .ok_or_else(|| format!("`{}` without its type", ty.name))
    };
    let elements = |value: &Value, element: &Ty| -> Result<Vec<String>, String> {
        value
            .as_array()
            .ok_or_else(|| format!("{value} is not an array"))?
            .iter()
            .map(|v| literal(lang, element, v))
            .collect()
    };
    let name = ty.name.as_str();
    if let Some(n) = types::integer_literal(name, value) {
        // Wider than an int: suffixed, so that the literal keeps its value.
        return n.map(|n| match n {
            n if i32::try_from(n).is_ok() => n.to_string(),
            n if i64::try_from(n).is_ok() => format!("{n}LL"),
            n => format!("{n}ULL"),
        });
    }
    let text = match (name, value) {
        ("double" | "float" | "long double", Value::Number(v)) => {
            format!("{:?}", v.as_f64().unwrap_or_default())
        }
        ("bool" | "_Bool", Value::Bool(b)) => match lang {
            Lang::C => u8::from(*b).to_string(),
            Lang::Cpp => b.to_string(),
        },
        ("char", Value::String(s)) if s.len() == 1 => format!("(char){}", s.as_bytes()[0]),
        // A string: `char *` (writable, in C a compound literal), `const char *`, std::string.
        ("*", Value::String(s)) if ty.args[0].name == "char" => match lang {
            Lang::C => format!("(char[]){{{}}}", string(s)),
            // A writable copy per case: a function may change the string in place.
            Lang::Cpp => format!(
                "[]() {{ static char codegen_text[] = {}; return codegen_text; }}()",
                string(s)
            ),
        },
        ("*", Value::Null) => null(lang).into(),
        ("*", Value::Array(items)) if items.is_empty() => null(lang).into(),
        ("*", Value::Array(_)) => {
            let element = arg(0)?;
            let items = elements(value, element)?.join(", ");
            match lang {
                Lang::C => format!("({}[]){{{items}}}", spelled(element)),
                // A static array per case: its address outlives the declaration.
                Lang::Cpp => format!(
                    "[]() {{ static {} codegen_items[] = {{{items}}}; return codegen_items; }}()",
                    spelled(element)
                ),
            }
        }
        ("std::string" | "string", Value::String(s)) if lang == Lang::Cpp => {
            format!("std::string({}, {})", string(s), s.len())
        }
        (_, _) if lang == Lang::C => {
            return Err(format!("{value} cannot be written as a `{name}`"));
        }
        _ => {
            let spelled = spelled(ty);
            match (ty.base(), value) {
                ("vector" | "deque" | "list" | "set" | "unordered_set" | "multiset", _) => {
                    format!("{spelled}{{{}}}", elements(value, arg(0)?)?.join(", "))
                }
                ("array", _) => {
                    format!("{spelled}{{{{{}}}}}", elements(value, arg(0)?)?.join(", "))
                }
                ("map" | "unordered_map" | "multimap", Value::Object(map)) => {
                    let (key, val) = (arg(0)?, arg(1)?);
                    let pairs: Result<Vec<String>, String> = map
                        .iter()
                        .map(|(k, v)| {
                            Ok(format!(
                                "{{{}, {}}}",
                                key_literal(lang, key, k)?,
                                literal(lang, val, v)?
                            ))
                        })
                        .collect();
                    format!("{spelled}{{{}}}", pairs?.join(", "))
                }
                ("pair" | "tuple", Value::Array(values)) if values.len() == ty.args.len() => {
                    let parts: Result<Vec<String>, String> = ty
                        .args
                        .iter()
                        .zip(values)
                        .map(|(t, v)| literal(lang, t, v))
                        .collect();
                    format!("{spelled}{{{}}}", parts?.join(", "))
                }
                ("optional", Value::Null) => format!("{spelled}{{}}"),
                ("optional", _) => format!("{spelled}{{{}}}", literal(lang, arg(0)?, value)?),
                _ => return Err(format!("{value} cannot be written as a `{name}`")),
            }
        }
    };
    Ok(text)
}

fn null(lang: Lang) -> &'static str {
    match lang {
        Lang::C => "NULL",
        Lang::Cpp => "nullptr",
    }
}

/// A JSON object's key as a literal of the map's key type.
fn key_literal(lang: Lang, ty: &Ty, key: &str) -> Result<String, String> {
    let value = match ty.base() {
        "string" | "char" => Value::from(key),
        "bool" => Value::Bool(key == "true"),
        _ => serde_json::from_str::<Value>(key)
            .ok()
            .filter(Value::is_number)
            .ok_or_else(|| format!("the key {key:?} is not a `{}`", ty.name))?,
    };
    literal(lang, ty, &value)
}

/// `text` as a C string literal: every byte outside printable ASCII as a three-digit octal
/// escape (which, unlike `\x`, ends where it should), and no `??` that could read as a
/// trigraph.
fn string(text: &str) -> String {
    let mut out = String::from("\"");
    for b in text.bytes() {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'?' => out.push_str("\\?"),
            0x20..=0x7e => out.push(char::from(b)),
            _ => {
                let _ = write!(out, "\\{b:03o}");
            }
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use proto::{ErrorKind, Language};
    use serde_json::json;

    use super::super::testing::{self, case, function};
    use super::*;

    /// The module and its cases in the real C++ image: inputs of the standard library's
    /// types written as literals, every kind of outcome, each case in its own process.
    #[tokio::test]
    async fn cpp_cases_are_called_with_literal_inputs_and_judged_in_the_real_image() {
        let module = r#"#include <map>
#include <stdexcept>
#include <string>
#include <vector>
#include <iostream>
#include <unordered_set>
#include <optional>
#include <cstring>
#include <utility>

// The primes up to n.
std::vector<int> sieve(int n) {
    if (n < 0) throw std::invalid_argument("negative");
    std::vector<int> primes;
    for (int i = 2; i <= n; i++) {
        bool prime = true;
        for (int p : primes) if (i % p == 0) prime = false;
        if (prime) primes.push_back(i);
    }
    std::cout << "noise that must not matter" << std::endl;
    return primes;
}

std::map<std::string, int> counts(const std::vector<std::string> &words) {
    std::map<std::string, int> out;
    for (const auto &w : words) out[w]++;
    return out;
}

std::unordered_set<long long> unique(std::vector<long long> xs) { return {xs.begin(), xs.end()}; }

std::pair<int, std::string> tag(std::pair<int, std::string> p, std::optional<int> by) {
    return {p.first * by.value_or(1), p.second + "!"};
}

int crash(int *p) { return *p; }

int forever() { for (;;) {} }

double ratio(double a, double b) { return a / b; }

bool odd(long long x) { return x % 2 != 0; }

std::string shout(const std::string &s) {
    std::string out = s;
    for (auto &c : out) c = (char)toupper((unsigned char)c);
    return out;
}

int sum(const int *xs, int n) {
    int total = 0;
    for (int i = 0; i < n; i++) total += xs[i];
    return total;
}

void nothing(int x) { (void)x; }

struct Point { int x, y; };

Point point(int x) { return {x, 2 * x}; }

int at(std::vector<int> xs, std::size_t i) { return xs.at(i); }

void reverse(char *s) {
    for (size_t i = 0, j = strlen(s); i + 1 < j; i++, j--) std::swap(s[i], s[j - 1]);
}
"#;
        let functions = [
            function(
                "sieve",
                &[("n", "int")],
                "std::vector<int>",
                vec![
                    case("ten", json!({"n": 10}), json!([2, 3, 5, 7]), None),
                    case("wrong", json!({"n": 3}), json!([2]), None),
                    case(
                        "negative",
                        json!({"n": -1}),
                        Value::Null,
                        Some("std::invalid_argument"),
                    ),
                    case("a base", json!({"n": -1}), Value::Null, Some("logic_error")),
                    case(
                        "another class",
                        json!({"n": -1}),
                        Value::Null,
                        Some("std::out_of_range"),
                    ),
                    case("not an int", json!({"n": "ten"}), json!([]), None),
                ],
            ),
            function(
                "counts",
                &[("words", "const std::vector<std::string>&")],
                "std::map<std::string, int>",
                vec![case(
                    "map",
                    json!({"words": ["a", "b\"?\n", "a"]}),
                    json!({"a": 2, "b\"?\n": 1}),
                    None,
                )],
            ),
            function(
                "unique",
                &[("xs", "std::vector<long long>")],
                "std::unordered_set<long long>",
                vec![case(
                    "sorted",
                    json!({"xs": [10, 3, 10, 9_000_000_000_i64]}),
                    json!([3, 10, 9_000_000_000_i64]),
                    None,
                )],
            ),
            function(
                "tag",
                &[
                    ("p", "std::pair<int, std::string>"),
                    ("by", "std::optional<int>"),
                ],
                "std::pair<int, std::string>",
                vec![
                    case(
                        "pair",
                        json!({"p": [2, "x"], "by": 3}),
                        json!([6, "x!"]),
                        None,
                    ),
                    case(
                        "nullopt",
                        json!({"p": [2, "x"], "by": null}),
                        json!([2, "x!"]),
                        None,
                    ),
                ],
            ),
            function(
                "crash",
                &[("p", "int *")],
                "int",
                vec![
                    case("null", json!({"p": null}), json!(0), None),
                    case("signal", json!({"p": null}), Value::Null, Some("SIGSEGV")),
                ],
            ),
            function(
                "forever",
                &[],
                "int",
                vec![case("loops", json!({}), json!(1), None)],
            ),
            function(
                "ratio",
                &[("a", "double"), ("b", "double")],
                "double",
                vec![
                    case("third", json!({"a": 1, "b": 3}), json!(0.333333333), None),
                    case("infinite", json!({"a": 1, "b": 0}), json!("Infinity"), None),
                ],
            ),
            function(
                "odd",
                &[("x", "long long")],
                "bool",
                vec![case("bool", json!({"x": 3}), json!(true), None)],
            ),
            function(
                "shout",
                &[("s", "const std::string&")],
                "std::string",
                vec![case("string", json!({"s": "é a"}), json!("é A"), None)],
            ),
            function(
                "sum",
                &[("xs", "const int *"), ("n", "int")],
                "int",
                vec![
                    case("array", json!({"xs": [1, 2, 3], "n": 3}), json!(6), None),
                    case("empty", json!({"xs": [], "n": 0}), json!(0), None),
                ],
            ),
            function(
                "nothing",
                &[("x", "int")],
                "void",
                vec![case("void", json!({"x": 1}), Value::Null, None)],
            ),
            // A type of the program's own compiles and says what it is.
            function(
                "point",
                &[("x", "int")],
                "Point",
                vec![case("own type", json!({"x": 1}), json!("<Point>"), None)],
            ),
            // A `char *` input is the case's own writable copy.
            function(
                "reverse",
                &[("s", "char *")],
                "void",
                vec![case("in place", json!({"s": "abc"}), Value::Null, None)],
            ),
            function(
                "at",
                &[("xs", "std::vector<int>"), ("i", "std::size_t")],
                "int",
                vec![case(
                    "size_t",
                    json!({"xs": [4, 5], "i": 1}),
                    json!(5),
                    None,
                )],
            ),
        ];
        let (reports, result) = testing::run(Language::Cpp, module, &functions).await;
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
        assert_eq!(reports["sieve"].cases[1].actual_output, json!([2, 3]));
        assert!(
            reports["sieve"].cases[5]
                .error
                .as_deref()
                .unwrap()
                .contains("cannot be written as a `int`")
        );
        assert_eq!(verdicts("counts"), [(true, None)], "{reports:#?}");
        assert_eq!(verdicts("unique"), [(true, None)], "{reports:#?}");
        assert_eq!(
            verdicts("tag"),
            [(true, None), (true, None)],
            "{reports:#?}"
        );
        assert_eq!(
            verdicts("crash"),
            [(false, Some(ErrorKind::Runtime)), (true, None)],
            "{reports:#?}"
        );
        assert!(
            reports["crash"].cases[0]
                .error
                .as_deref()
                .unwrap()
                .starts_with("signal: ")
        );
        assert_eq!(verdicts("forever"), [(false, Some(ErrorKind::Timeout))]);
        assert_eq!(
            verdicts("ratio"),
            [(true, None), (true, None)],
            "{reports:#?}"
        );
        assert_eq!(verdicts("odd"), [(true, None)], "{reports:#?}");
        assert_eq!(verdicts("shout"), [(true, None)], "{reports:#?}");
        assert_eq!(
            verdicts("sum"),
            [(true, None), (true, None)],
            "{reports:#?}"
        );
        assert_eq!(verdicts("nothing"), [(true, None)], "{reports:#?}");
        assert_eq!(verdicts("point"), [(true, None)], "{reports:#?}");
        assert_eq!(verdicts("reverse"), [(true, None)], "{reports:#?}");
        assert_eq!(verdicts("at"), [(true, None)], "{reports:#?}");
    }

    /// The module and its cases in the real C image: scalars, strings, arrays, a failed
    /// assert, a crash, a runaway loop and an early exit, each in its own process.
    #[tokio::test]
    async fn c_cases_are_called_with_literal_inputs_and_judged_in_the_real_image() {
        let module = r#"#include <assert.h>
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The sum of xs[0..n). */
long long sum(const int *xs, int n) {
    long long total = 0;
    for (int i = 0; i < n; i++) total += xs[i];
    printf("noise\n");
    return total;
}

const char *shout(char *s) {
    for (char *p = s; *p; p++) *p = (char)toupper((unsigned char)*p);
    return s;
}

bool positive(double x) { assert(x == x); return x > 0; }

int checked(int x) { assert(x >= 0); return x; }

char first(const char *s) { return s[0]; }

int forever(void) { for (;;) {} }

int quits(int code) { exit(code); }

double half(int x) { return x / 2.0; }

int *pointer(void) { static int x = 1; return &x; }
"#;
        let functions = [
            function(
                "sum",
                &[("xs", "const int *"), ("n", "int")],
                "long long",
                vec![
                    case("array", json!({"xs": [1, 2, 3], "n": 3}), json!(6), None),
                    case("wrong", json!({"xs": [1], "n": 1}), json!(2), None),
                    case("empty", json!({"xs": [], "n": 0}), json!(0), None),
                ],
            ),
            function(
                "shout",
                &[("s", "char *")],
                "const char *",
                vec![case(
                    "string",
                    json!({"s": "a\"b\\?\t"}),
                    json!("A\"B\\?\t"),
                    None,
                )],
            ),
            function(
                "positive",
                &[("x", "double")],
                "bool",
                vec![case("bool", json!({"x": 0.5}), json!(true), None)],
            ),
            function(
                "checked",
                &[("x", "int")],
                "int",
                vec![
                    case("assert", json!({"x": -1}), Value::Null, Some("abort")),
                    case("unexpected", json!({"x": -1}), json!(-1), None),
                    case("fine", json!({"x": 2147483647}), json!(2147483647), None),
                ],
            ),
            function(
                "first",
                &[("s", "const char*")],
                "char",
                vec![
                    case("char", json!({"s": "xyz"}), json!("x"), None),
                    case("crash", json!({"s": null}), Value::Null, Some("SIGSEGV")),
                ],
            ),
            function(
                "forever",
                &[],
                "int",
                vec![case("loops", json!({}), json!(1), None)],
            ),
            function(
                "quits",
                &[("code", "int")],
                "int",
                vec![case(
                    "exit",
                    json!({"code": 3}),
                    Value::Null,
                    Some("status 3"),
                )],
            ),
            function(
                "half",
                &[("x", "int")],
                "double",
                vec![case("double", json!({"x": 3}), json!(1.5), None)],
            ),
            function(
                "pointer",
                &[],
                "int *",
                vec![case("pointer", json!({}), json!("<pointer>"), None)],
            ),
        ];
        let (reports, result) = testing::run(Language::C, module, &functions).await;
        let reports = reports.unwrap_or_else(|| panic!("a report: {result:?}"));
        let verdicts = |f: &str| testing::verdicts(&reports, f);
        assert_eq!(
            verdicts("sum"),
            [
                (true, None),
                (false, Some(ErrorKind::WrongOutput)),
                (true, None)
            ],
            "{reports:#?}"
        );
        assert_eq!(verdicts("shout"), [(true, None)], "{reports:#?}");
        assert_eq!(verdicts("positive"), [(true, None)], "{reports:#?}");
        assert_eq!(
            verdicts("checked"),
            [
                (true, None),
                (false, Some(ErrorKind::Runtime)),
                (true, None)
            ],
            "{reports:#?}"
        );
        assert_eq!(
            verdicts("first"),
            [(true, None), (true, None)],
            "{reports:#?}"
        );
        assert_eq!(verdicts("forever"), [(false, Some(ErrorKind::Timeout))]);
        assert_eq!(verdicts("quits"), [(true, None)], "{reports:#?}");
        assert_eq!(verdicts("half"), [(true, None)], "{reports:#?}");
        assert_eq!(verdicts("pointer"), [(true, None)], "{reports:#?}");
    }

    #[test]
    fn strings_are_c_literals_that_end_where_they_should() {
        assert_eq!(string("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(string("\u{1}1"), r#""\0011""#);
        assert_eq!(string("é"), r#""\303\251""#);
        assert_eq!(string("??="), r#""\?\?=""#);
    }
}
