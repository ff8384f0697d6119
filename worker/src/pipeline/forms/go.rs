//! Generated Go's cases: the module becomes one file of package main (its functions' import
//! lines gathered into one block), and the test file beside it calls each function with its
//! cases' inputs decoded into the parameters' own types (`go_cases.go`, with the calls
//! rendered here).

use std::fmt::Write as _;

use super::FunctionCases;
use super::scan::{self, Dialect};

const DRIVER: &str = include_str!("go_cases.go");

/// Go's scan: a `//` comment documents a function; coverage is not measured.
pub(crate) const DIALECT: Dialect = Dialect {
    declarations: &["func {}(", "func {}["],
    typed: false,
    documented: scan::slash_doc,
    branches: &["if ", "for ", "case ", "&&", "||"],
    risky: &[
        "\"os/exec\"",
        "\"syscall\"",
        "\"unsafe\"",
        "\"net\"",
        "\"net/http\"",
        "\"plugin\"",
        "os.RemoveAll(",
    ],
    unmeasured: &["coverage"],
};

/// The module as one file of package main: each function's code brings its own imports, and
/// Go wants them once, before the declarations (a package clause a function repeated goes).
pub(crate) fn program(module: &str) -> String {
    let mut imports: Vec<String> = Vec::new();
    let mut add = |spec: &str| {
        let spec = spec.trim();
        if !spec.is_empty() && !spec.starts_with("//") && !imports.iter().any(|i| i == spec) {
            imports.push(spec.to_owned());
        }
    };
    let mut rest = String::new();
    let mut lines = module.lines();
    while let Some(line) = lines.next() {
        if line.starts_with("package ") {
            continue;
        }
        if let Some(after) = line.strip_prefix("import") {
            let after = after.trim();
            if let Some(block) = after.strip_prefix('(') {
                let mut inner = block.to_owned();
                while !inner.contains(')') {
                    let Some(next) = lines.next() else { break };
                    inner.push('\n');
                    inner.push_str(next);
                }
                let inner = inner.split(')').next().unwrap_or_default();
                inner.split(['\n', ';']).for_each(&mut add);
                continue;
            }
            if after.starts_with('"')
                || after
                    .split_whitespace()
                    .nth(1)
                    .is_some_and(|p| p.starts_with('"'))
            {
                add(after);
                continue;
            }
        }
        rest.push_str(line);
        rest.push('\n');
    }
    let mut out = String::from("package main\n\n");
    if !imports.is_empty() {
        out.push_str("import (\n");
        for spec in &imports {
            let _ = writeln!(out, "\t{spec}");
        }
        out.push_str(")\n\n");
    }
    out.push_str(&rest);
    out
}

/// The test file for `functions` (each case bounded by `case_timeout_ms`), writing its lines
/// to `report` (a path below the work directory) with `nonce`.
pub(crate) fn render(
    functions: &[FunctionCases],
    case_timeout_ms: u64,
    report: &str,
    nonce: &str,
) -> String {
    let mut out = String::from(DRIVER);
    let _ = writeln!(
        out,
        "\nconst codegenReport = {}\nconst codegenNonce = {}\n\nfunc codegenCases() {{",
        literal(report),
        literal(nonce)
    );
    for (i, f) in functions.iter().enumerate() {
        let returns = Returns::of(&f.returns);
        // A type goes into the test as written: one that could be more than a type (a `;`, a
        // newline, an `=`) fails the function's cases instead.
        if let Some(bad) = f.types.iter().find(|t| !declarable(t)) {
            let why = literal(&format!("the type `{bad}` is not one the test can declare"));
            for j in 0..f.cases.len() {
                let _ = writeln!(
                    out,
                    "\tcodegenRun({i}, {j}, {case_timeout_ms}, func() (any, error) {{ panic(codegenInputError{{{why}}}) }})"
                );
            }
            continue;
        }
        for (j, case) in f.cases.iter().enumerate() {
            let _ = writeln!(
                out,
                "\tcodegenRun({i}, {j}, {case_timeout_ms}, func() (any, error) {{"
            );
            let mut args = Vec::new();
            for (k, (name, ty)) in f.params.iter().zip(&f.types).enumerate() {
                let (ty, spread) = match ty.trim().strip_prefix("...") {
                    Some(element) => (format!("[]{element}"), "..."),
                    None => (ty.trim().to_owned(), ""),
                };
                let _ = writeln!(out, "\t\tvar a{k} {ty}");
                if let Some(value) = case.inputs.get(name) {
                    let _ = writeln!(
                        out,
                        "\t\tcodegenDecode({}, {}, &a{k})",
                        literal(name),
                        literal(&value.to_string())
                    );
                }
                args.push(format!("a{k}{spread}"));
            }
            let call = format!("{}({})", f.name, args.join(", "));
            let body = match returns {
                Returns::Nothing => format!("{call}\n\t\treturn nil, nil"),
                Returns::Error => format!("return nil, {call}"),
                Returns::Value => format!("return {call}, nil"),
                Returns::Values { values, error } => {
                    let names: Vec<String> = (0..values + usize::from(error))
                        .map(|r| format!("r{r}"))
                        .collect();
                    let value = if values == 1 {
                        "r0".to_owned()
                    } else {
                        format!("[]any{{{}}}", names[..values].join(", "))
                    };
                    let err = if error {
                        format!("r{values}")
                    } else {
                        "nil".into()
                    };
                    format!("{} := {call}\n\t\treturn {value}, {err}", names.join(", "))
                }
            };
            let _ = writeln!(out, "\t\t{body}\n\t}})");
        }
    }
    out.push_str("}\n");
    out
}

/// Whether `ty` is only a type: names, dots, brackets and pointers (`[]int`, `map[string][]*T`,
/// `...string`, `pkg.Type`), or the empty interface.
fn declarable(ty: &str) -> bool {
    let ty = ty.trim();
    let ty = ty.strip_prefix("...").unwrap_or(ty);
    !ty.is_empty()
        && (matches!(ty, "interface{}" | "struct{}")
            || ty
                .chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '_' | '.' | '[' | ']' | '*')))
}

/// How a function's results are called for, from its declared result type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Returns {
    Nothing,
    /// Only an `error`.
    Error,
    /// One value.
    Value,
    /// Several results, the last of them an `error` or not.
    Values {
        values: usize,
        error: bool,
    },
}

impl Returns {
    fn of(declared: &str) -> Returns {
        let declared = declared.trim();
        let inner = declared
            .strip_prefix('(')
            .and_then(|d| d.strip_suffix(')'))
            .unwrap_or(declared)
            .trim();
        if matches!(inner, "" | "void" | "none" | "nothing") {
            return Returns::Nothing;
        }
        let parts = top_level_split(inner);
        // A named result (`err error`) is its type's last word.
        let is_error = |p: &str| p == "error" || p.ends_with(" error");
        match parts.as_slice() {
            [one] if is_error(one) => Returns::Error,
            [_] => Returns::Value,
            [.., last] => {
                let error = is_error(last);
                Returns::Values {
                    values: parts.len() - usize::from(error),
                    error,
                }
            }
            [] => Returns::Nothing,
        }
    }
}

/// `text` split at its commas outside brackets and parentheses.
fn top_level_split(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(text[start..].trim());
    parts
}

/// `text` as a Go string literal (JSON's escapes are Go's, and serde_json writes no other).
fn literal(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

#[cfg(test)]
mod tests {
    use proto::{ErrorKind, Language};
    use serde_json::{Value, json};

    use super::super::testing::{self, case, function};
    use super::*;

    /// The module and its cases in the real Go image: every kind of outcome the driver
    /// writes, judged.
    #[tokio::test]
    async fn each_case_is_called_with_typed_inputs_and_judged_in_the_real_image() {
        let module = r#"package main

import "errors"

// sieve returns the primes up to n.
func sieve(n int) ([]int, error) {
	if n < 0 {
		return nil, errors.New("negative")
	}
	var primes []int
	for i := 2; i <= n; i++ {
		prime := true
		for _, p := range primes {
			if i%p == 0 {
				prime = false
			}
		}
		if prime {
			primes = append(primes, i)
		}
	}
	return primes, nil
}

import (
	"fmt"
	"strings"
)

type Point struct {
	X    float64 `json:"x"`
	Y    float64
	note string
}

func scale(p Point, by float64) Point {
	fmt.Println("noise that must not matter")
	return Point{X: p.X * by, Y: p.Y * by, note: "private"}
}

func at(xs []string, i int) string { return strings.ToUpper(xs[i]) }

func forever() int {
	for {
	}
}

func counts(words ...string) map[string]int {
	out := map[string]int{}
	for _, w := range words {
		out[w]++
	}
	return out
}

func divmod(a, b int) (int, int) { return a / b, a % b }

func nothing(x int) {}
"#;
        let functions = [
            function(
                "sieve",
                &[("n", "int")],
                "([]int, error)",
                vec![
                    case("ten", json!({"n": 10}), json!([2, 3, 5, 7]), None),
                    case("none", json!({"n": 1}), json!([]), None),
                    case("wrong", json!({"n": 3}), json!([2]), None),
                    case("negative", json!({"n": -1}), Value::Null, Some("error")),
                    case("not a panic", json!({"n": -1}), Value::Null, Some("panic")),
                    case("unexpected error", json!({"n": -1}), json!([]), None),
                    case("not an int", json!({"n": "ten"}), json!([]), None),
                ],
            ),
            function(
                "scale",
                &[("p", "Point"), ("by", "float64")],
                "Point",
                vec![case(
                    "struct",
                    json!({"p": {"x": 0.1, "Y": 2}, "by": 3}),
                    json!({"x": 0.3, "Y": 6}),
                    None,
                )],
            ),
            function(
                "at",
                &[("xs", "[]string"), ("i", "int")],
                "string",
                vec![
                    case("first", json!({"xs": ["a", "b"], "i": 0}), json!("A"), None),
                    case(
                        "out of range",
                        json!({"xs": [], "i": 3}),
                        Value::Null,
                        Some("panic"),
                    ),
                    case(
                        "unexpected panic",
                        json!({"xs": [], "i": 3}),
                        json!("A"),
                        None,
                    ),
                ],
            ),
            function(
                "forever",
                &[],
                "int",
                vec![case("loops", json!({}), json!(1), None)],
            ),
            function(
                "counts",
                &[("words", "...string")],
                "map[string]int",
                vec![case(
                    "variadic",
                    json!({"words": ["a", "b", "a"]}),
                    json!({"a": 2, "b": 1}),
                    None,
                )],
            ),
            function(
                "divmod",
                &[("a", "int"), ("b", "int")],
                "(int, int)",
                vec![case(
                    "two results",
                    json!({"a": 7, "b": 2}),
                    json!([3, 1]),
                    None,
                )],
            ),
            function(
                "nothing",
                &[("x", "int")],
                "",
                vec![case("null", json!({"x": 1}), Value::Null, None)],
            ),
        ];
        let (reports, result) = testing::run(Language::Go, module, &functions).await;
        let reports = reports.unwrap_or_else(|| panic!("a report: {result:?}"));
        let verdicts = |f: &str| testing::verdicts(&reports, f);
        assert_eq!(
            verdicts("sieve"),
            [
                (true, None),
                (true, None),
                (false, Some(ErrorKind::WrongOutput)),
                (true, None),
                (false, Some(ErrorKind::WrongOutput)),
                (false, Some(ErrorKind::Runtime)),
                (false, Some(ErrorKind::Runtime)),
            ],
            "{reports:#?}"
        );
        let sieve = &reports["sieve"].cases;
        assert_eq!(sieve[2].actual_output, json!([2, 3]));
        assert_eq!(sieve[5].error.as_deref(), Some("error: negative"));
        assert!(
            sieve[6]
                .error
                .as_deref()
                .unwrap()
                .contains("input n does not fit its type"),
            "{:?}",
            sieve[6]
        );
        assert_eq!(verdicts("scale"), [(true, None)], "{reports:#?}");
        assert_eq!(
            verdicts("at"),
            [
                (true, None),
                (true, None),
                (false, Some(ErrorKind::Runtime))
            ]
        );
        assert!(
            reports["at"].cases[2]
                .error
                .as_deref()
                .unwrap()
                .contains("index out of range")
        );
        assert_eq!(verdicts("forever"), [(false, Some(ErrorKind::Timeout))]);
        assert_eq!(verdicts("counts"), [(true, None)], "{reports:#?}");
        assert_eq!(verdicts("divmod"), [(true, None)], "{reports:#?}");
        assert_eq!(verdicts("nothing"), [(true, None)], "{reports:#?}");
    }

    /// Code that does not compile writes no report; the compiler's own words are the load
    /// error a repair reads.
    #[tokio::test]
    async fn a_compile_error_is_the_compilers_words() {
        let functions = [function(
            "f",
            &[],
            "int",
            vec![case("one", json!({}), json!(1), None)],
        )];
        let (reports, result) =
            testing::run(Language::Go, "func f() int { return x }\n", &functions).await;
        assert!(reports.is_none(), "{result:?}");
        let load = super::super::load_error(&result).expect("a load error");
        assert_eq!(load.error_kind, Some(ErrorKind::Syntax));
        assert!(
            load.traceback.as_deref().unwrap().contains("undefined: x"),
            "{load:?}"
        );
    }

    #[test]
    fn imports_are_gathered_once_before_the_code() {
        let module = "package main\n\nimport \"strings\"\n\nfunc a() string { return strings.ToUpper(\"a\") }\n\n\nimport (\n\t\"strings\"\n\t\"sort\"\n)\n\nfunc b(x []int) { sort.Ints(x) }\n";
        let program = program(module);
        assert_eq!(
            program,
            "package main\n\nimport (\n\t\"strings\"\n\t\"sort\"\n)\n\n\n\nfunc a() string { return strings.ToUpper(\"a\") }\n\n\n\nfunc b(x []int) { sort.Ints(x) }\n"
        );
    }

    #[test]
    fn only_a_type_is_declared_as_one() {
        for ty in [
            "int",
            "[]int",
            "map[string][]*Node",
            "...string",
            "pkg.T",
            "interface{}",
        ] {
            assert!(declarable(ty), "{ty}");
        }
        for ty in [
            "int; return 42, nil //",
            "int\nreturn",
            "x = 1",
            "func() int",
            "",
        ] {
            assert!(!declarable(ty), "{ty}");
        }
    }

    #[test]
    fn results_are_called_for_as_declared() {
        assert_eq!(Returns::of("int"), Returns::Value);
        assert_eq!(Returns::of("map[string][]int"), Returns::Value);
        assert_eq!(Returns::of("error"), Returns::Error);
        assert_eq!(Returns::of(""), Returns::Nothing);
        assert_eq!(
            Returns::of("([]int, error)"),
            Returns::Values {
                values: 1,
                error: true
            }
        );
        assert_eq!(
            Returns::of("(q int, r int, err error)"),
            Returns::Values {
                values: 2,
                error: true
            }
        );
        assert_eq!(
            Returns::of("int, map[string]int"),
            Returns::Values {
                values: 2,
                error: false
            }
        );
    }

    #[tokio::test]
    async fn go_vet_names_the_modules_line_and_says_nothing_of_a_clean_module_or_the_test() {
        let functions = [function(
            "show",
            &[("n", "int")],
            "string",
            vec![case("one", json!({"n": 1}), json!("1"), None)],
        )];
        let module = "import \"fmt\"\n\n// show writes n.\nfunc show(n int) string {\n\treturn fmt.Sprintf(\"%d\", \"n\")\n}\n";
        let found = testing::lint(Language::Go, module, &functions)
            .await
            .expect("vet's findings");
        let line = program(module)
            .lines()
            .position(|l| l.contains("Sprintf"))
            .expect("the line")
            + 1;
        assert!(
            found
                .iter()
                .any(|f| f.starts_with(&format!("line {line}: ")) && f.contains("Sprintf")),
            "{found:?}"
        );
        let clean = module.replace("\"n\")", "n)");
        let found = testing::lint(Language::Go, &clean, &functions).await;
        assert_eq!(found, Some(vec![]));
    }

    /// The final run builds the code for statement coverage (`go tool cover`, in the image's
    /// compile script): a branch never taken and a function never called are statements not
    /// covered; cases that reach every statement cover all of them.
    #[tokio::test]
    async fn the_final_run_measures_statement_coverage_in_the_real_image() {
        let module = "// sign is the sign of n.\nfunc sign(n int) int {\n\tif n < 0 {\n\t\treturn -1\n\t}\n\treturn 1\n}\n\n// twice is 2x.\nfunc twice(x int) int {\n\treturn x * 2\n}\n";
        let sign = |cases| function("sign", &[("n", "int")], "int", cases);
        let twice = |cases| function("twice", &[("x", "int")], "int", cases);
        let some = [sign(vec![case("pos", json!({"n": 5}), json!(1), None)])];
        let part = testing::coverage(Language::Go, module, &some).await;
        let all = [
            sign(vec![
                case("pos", json!({"n": 5}), json!(1), None),
                case("neg", json!({"n": -5}), json!(-1), None),
            ]),
            twice(vec![case("one", json!({"x": 1}), json!(2), None)]),
        ];
        let whole = testing::coverage(Language::Go, module, &all).await;
        assert!(part > 0.2 && part < 0.8, "{part}");
        assert_eq!(whole, 1.0);
    }
}
