//! Generated Java's cases: the module (static methods, with their imports) becomes
//! `public class Solution`, and the test class appended to it calls `Solution.name` with each
//! case's inputs decoded into the parameters' own types by Gson (`java_cases.java`, with the
//! calls rendered here).

use std::fmt::Write as _;

use super::FunctionCases;
use super::scan::{self, Dialect};

const DRIVER: &str = include_str!("java_cases.java");

/// Java's scan: a Javadoc comment documents a method; coverage is not measured.
pub(crate) const DIALECT: Dialect = Dialect {
    declarations: &[],
    typed: true,
    documented: scan::block_doc,
    branches: &[
        "if (", "if(", "for (", "for(", "while (", "while(", "case ", "catch", "&&", "||", " ? ",
    ],
    risky: &[
        "Runtime.getRuntime(",
        "ProcessBuilder",
        "java.net.",
        "System.exit(",
        "Class.forName(",
        "java.lang.reflect",
        "sun.misc.Unsafe",
    ],
    unmeasured: &["coverage"],
};

/// The primitive types, whose class literal is their type and whose missing input is zero.
const PRIMITIVES: &[&str] = &[
    "int", "long", "double", "float", "boolean", "char", "short", "byte",
];

/// The module as one source file: its imports (once each, `java.util.*` among them, so that
/// the plan's `List<Integer>` resolves in the test too) before `public class Solution`, whose
/// body is the module's methods.
pub(crate) fn program(module: &str) -> String {
    let mut imports = vec!["import java.util.*;".to_owned()];
    let mut body = String::new();
    for line in module.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("package ") && trimmed.ends_with(';') {
            continue;
        }
        if trimmed.starts_with("import ") && trimmed.ends_with(';') && line.starts_with("import") {
            if !imports.iter().any(|i| i == trimmed) {
                imports.push(trimmed.to_owned());
            }
            continue;
        }
        body.push_str(line);
        body.push('\n');
    }
    format!(
        "{}\n\npublic class Solution {{\n{body}}}\n",
        imports.join("\n")
    )
}

/// The test class for `functions` (each case bounded by `case_timeout_ms`), writing its lines
/// to `report` (a path below the work directory) with `nonce`.
pub(crate) fn render(
    functions: &[FunctionCases],
    case_timeout_ms: u64,
    report: &str,
    nonce: &str,
) -> String {
    let mut out = format!("\n\n{DRIVER}\n");
    let _ = writeln!(
        out,
        "    static final String REPORT = {};\n    static final String NONCE = {};\n\n    static void cases() {{",
        literal(report),
        literal(nonce)
    );
    for (i, f) in functions.iter().enumerate() {
        let void = matches!(f.returns.trim(), "void" | "" | "none");
        // A type goes into the test as written: one that could be more than a type (a `;`, an
        // `=`, a parenthesis) fails the function's cases instead.
        if let Some(bad) = f.types.iter().find(|t| !declarable(t)) {
            let why = literal(&format!("the type `{bad}` is not one the test can declare"));
            for j in 0..f.cases.len() {
                let _ = writeln!(
                    out,
                    "        run({i}, {j}, {case_timeout_ms}L, () -> {{ throw new CodegenInputError({why}); }});"
                );
            }
            continue;
        }
        for (j, case) in f.cases.iter().enumerate() {
            let _ = writeln!(out, "        run({i}, {j}, {case_timeout_ms}L, () -> {{");
            let mut args = Vec::new();
            for (k, (name, ty)) in f.params.iter().zip(&f.types).enumerate() {
                let ty = ty.trim();
                let json = match case.inputs.get(name) {
                    Some(value) => value.to_string(),
                    None if ty == "boolean" => "false".into(),
                    None if PRIMITIVES.contains(&ty) => "0".into(),
                    None => "null".into(),
                };
                let _ = writeln!(
                    out,
                    "            {ty} a{k} = decode({}, {}, {});",
                    literal(name),
                    literal(&json),
                    type_of(ty)
                );
                args.push(format!("a{k}"));
            }
            let call = format!("Solution.{}({})", f.name, args.join(", "));
            if void {
                let _ = writeln!(out, "            {call};\n            return null;");
            } else {
                let _ = writeln!(out, "            return {call};");
            }
            out.push_str("        });\n");
        }
    }
    out.push_str("    }\n}\n");
    out
}

/// Whether `ty` is only a type: names, dots, generics, arrays and wildcards (`int[][]`,
/// `Map<String, List<Integer>>`, `java.util.Set<? extends Number>`).
fn declarable(ty: &str) -> bool {
    let ty = ty.trim();
    !ty.is_empty()
        && ty.chars().all(|c| {
            c.is_alphanumeric() || matches!(c, '_' | '.' | '<' | '>' | '[' | ']' | ',' | ' ' | '?')
        })
}

/// The `java.lang.reflect.Type` of `ty`, as Gson decodes into it.
fn type_of(ty: &str) -> String {
    if ty.contains('<') {
        format!("new com.google.gson.reflect.TypeToken<{ty}>(){{}}.getType()")
    } else {
        format!("{ty}.class")
    }
}

/// `text` as a Java string literal (JSON's escapes are Java's, and serde_json writes no other).
fn literal(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

#[cfg(test)]
mod tests {
    use proto::{ErrorKind, Language};
    use serde_json::{Value, json};

    use super::super::testing::{self, case, function};
    use super::*;

    /// The module and its cases in the real Java image: every kind of outcome the driver
    /// writes, judged.
    #[tokio::test]
    async fn each_case_is_called_with_typed_inputs_and_judged_in_the_real_image() {
        let module = r#"import java.util.stream.Collectors;

/** The primes up to n. */
public static List<Integer> sieve(int n) {
    if (n < 0) throw new IllegalArgumentException("negative");
    List<Integer> primes = new ArrayList<>();
    for (int i = 2; i <= n; i++) {
        final int k = i;
        if (primes.stream().allMatch(p -> k % p != 0)) primes.add(i);
    }
    System.out.println("noise that must not matter");
    return primes;
}

import java.util.stream.Collectors;

record Point(double x, double y) {}

static Point scale(Point p, double by) { return new Point(p.x() * by, p.y() * by); }

static String joined(List<String> words) { return words.stream().collect(Collectors.joining("-")); }

static int forever() { while (true) { } }

static Map<String, Integer> counts(String[] words) {
    Map<String, Integer> out = new TreeMap<>();
    for (String w : words) out.merge(w, 1, Integer::sum);
    return out;
}

static double ratio(long a, long b) { return (double) a / b; }

static void nothing(int x) { assert x > 0 : "x must be positive"; }

static int deep(int n) { return n == 0 ? 0 : 1 + deep(n - 1); }

static Set<Integer> unique(int[] xs) {
    Set<Integer> out = new HashSet<>();
    for (int x : xs) out.add(x);
    return out;
}
"#;
        let functions = [
            function(
                "sieve",
                &[("n", "int")],
                "List<Integer>",
                vec![
                    case("ten", json!({"n": 10}), json!([2, 3, 5, 7]), None),
                    case("wrong", json!({"n": 3}), json!([2]), None),
                    case(
                        "negative",
                        json!({"n": -1}),
                        Value::Null,
                        Some("IllegalArgumentException"),
                    ),
                    case(
                        "a superclass",
                        json!({"n": -1}),
                        Value::Null,
                        Some("RuntimeException"),
                    ),
                    case(
                        "another class",
                        json!({"n": -1}),
                        Value::Null,
                        Some("IllegalStateException"),
                    ),
                    case(
                        "not thrown",
                        json!({"n": 1}),
                        Value::Null,
                        Some("IllegalArgumentException"),
                    ),
                    case("not an int", json!({"n": "ten"}), json!([]), None),
                ],
            ),
            function(
                "scale",
                &[("p", "Point"), ("by", "double")],
                "Point",
                vec![case(
                    "record",
                    json!({"p": {"x": 0.1, "y": 2}, "by": 3}),
                    json!({"x": 0.3, "y": 6}),
                    None,
                )],
            ),
            function(
                "joined",
                &[("words", "List<String>")],
                "String",
                vec![case(
                    "generic",
                    json!({"words": ["a", "b"]}),
                    json!("a-b"),
                    None,
                )],
            ),
            function(
                "forever",
                &[],
                "int",
                vec![case("loops", json!({}), json!(1), None)],
            ),
            function(
                "counts",
                &[("words", "String[]")],
                "Map<String, Integer>",
                vec![case(
                    "array",
                    json!({"words": ["a", "b", "a"]}),
                    json!({"a": 2, "b": 1}),
                    None,
                )],
            ),
            function(
                "ratio",
                &[("a", "long"), ("b", "long")],
                "double",
                vec![
                    case("infinite", json!({"a": 1, "b": 0}), json!("Infinity"), None),
                    case("third", json!({"a": 1, "b": 3}), json!(0.333333333), None),
                ],
            ),
            function(
                "nothing",
                &[("x", "int")],
                "void",
                vec![
                    case("null", json!({"x": 1}), Value::Null, None),
                    case("assertion", json!({"x": 0}), Value::Null, None),
                ],
            ),
            function(
                "deep",
                &[("n", "int")],
                "int",
                vec![case("recursion", json!({"n": 100000}), json!(100000), None)],
            ),
            function(
                "unique",
                &[("xs", "int[]")],
                "Set<Integer>",
                vec![case(
                    "sorted",
                    json!({"xs": [100, 3, 20, 3]}),
                    json!([3, 20, 100]),
                    None,
                )],
            ),
        ];
        let (reports, result) = testing::run(Language::Java, module, &functions).await;
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
                (false, Some(ErrorKind::WrongOutput)),
                (false, Some(ErrorKind::Runtime)),
            ],
            "{reports:#?}"
        );
        assert_eq!(reports["sieve"].cases[1].actual_output, json!([2, 3]));
        assert!(
            reports["sieve"].cases[6]
                .error
                .as_deref()
                .unwrap()
                .contains("input n does not fit its type"),
            "{reports:#?}"
        );
        assert_eq!(verdicts("scale"), [(true, None)], "{reports:#?}");
        assert_eq!(verdicts("joined"), [(true, None)], "{reports:#?}");
        assert_eq!(verdicts("forever"), [(false, Some(ErrorKind::Timeout))]);
        assert_eq!(verdicts("counts"), [(true, None)], "{reports:#?}");
        assert_eq!(
            verdicts("ratio"),
            [(true, None), (true, None)],
            "{reports:#?}"
        );
        assert_eq!(
            verdicts("nothing"),
            [(true, None), (false, Some(ErrorKind::Assertion))],
            "{reports:#?}"
        );
        assert_eq!(verdicts("deep"), [(true, None)], "{reports:#?}");
        assert_eq!(verdicts("unique"), [(true, None)], "{reports:#?}");
    }

    #[test]
    fn only_a_type_is_declared_as_one() {
        for ty in [
            "int",
            "int[][]",
            "Map<String, List<Integer>>",
            "java.util.Set<? extends Number>",
        ] {
            assert!(declarable(ty), "{ty}");
        }
        for ty in [
            "Object x = null; if (true) return 42; int",
            "int)",
            "a\nb",
            "",
        ] {
            assert!(!declarable(ty), "{ty}");
        }
    }

    #[test]
    fn the_module_becomes_a_class_with_its_imports_first() {
        let program = program(
            "import java.util.stream.*;\n\nstatic int a() { return 1; }\nimport java.util.stream.*;\nimport java.io.File;\nstatic int b() { return 2; }\n",
        );
        assert_eq!(
            program,
            "import java.util.*;\nimport java.util.stream.*;\nimport java.io.File;\n\npublic class Solution {\n\nstatic int a() { return 1; }\nstatic int b() { return 2; }\n}\n"
        );
    }

    #[tokio::test]
    async fn javac_lint_names_the_modules_line_and_says_nothing_of_a_clean_module_or_the_test() {
        let functions = [function(
            "half",
            &[("n", "int")],
            "int",
            vec![case("two", json!({"n": 2}), json!(1), None)],
        )];
        let module = "/** Half of n. */\nstatic int half(int n) {\n    int m = (int) n;\n    return m / 2;\n}\n";
        let found = testing::lint(Language::Java, module, &functions)
            .await
            .expect("javac's warnings");
        let line = program(module)
            .lines()
            .position(|l| l.contains("(int) n"))
            .expect("the line")
            + 1;
        assert_eq!(
            found,
            [format!("line {line}: [cast] redundant cast to int")]
        );
        let clean = module.replace("(int) n", "n");
        let found = testing::lint(Language::Java, &clean, &functions).await;
        assert_eq!(found, Some(vec![]));
    }
}
