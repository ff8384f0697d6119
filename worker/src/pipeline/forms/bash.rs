//! Generated Bash's cases: the module (function definitions) is the program, and the test
//! script sourced after it calls each function with its cases' inputs as arguments
//! (`bash_cases.sh`, with the calls rendered here); what a function prints is its value.

use std::fmt::Write as _;

use serde_json::Value;

use super::FunctionCases;
use super::scan::{self, Dialect};

const DRIVER: &str = include_str!("bash_cases.sh");

/// Bash's scan: a `#` comment documents a function; coverage is not measured.
pub(crate) const DIALECT: Dialect = Dialect {
    declarations: &["{}()", "{} ()", "function {} ", "function {}("],
    typed: false,
    documented: scan::hash_doc,
    branches: &["if ", "elif ", "while ", "until ", "for ", ") ", "&&", "||"],
    risky: &[
        "eval ",
        "curl ",
        "wget ",
        "nc ",
        "/dev/tcp/",
        "rm -rf /",
        "sudo ",
        "mkfifo ",
    ],
    unmeasured: &["coverage"],
};

/// The test script for `functions` (each case bounded by `case_timeout_ms`), writing its
/// lines to `report` (a path below the work directory) with `nonce`.
pub(crate) fn render(
    functions: &[FunctionCases],
    case_timeout_ms: u64,
    report: &str,
    nonce: &str,
) -> String {
    let mut out = format!(
        "__codegen_report={}\n__codegen_nonce={}\n{DRIVER}\n",
        quote(report),
        quote(nonce)
    );
    for (i, f) in functions.iter().enumerate() {
        for (j, case) in f.cases.iter().enumerate() {
            let mut line = format!(
                "__codegen_case {i} {j} {case_timeout_ms} {}",
                quote(&f.name)
            );
            for name in &f.params {
                for arg in arguments(case.inputs.get(name).unwrap_or(&Value::Null)) {
                    line.push(' ');
                    line.push_str(&quote(&arg));
                }
            }
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

/// An input as the function's arguments: a string as itself, a number or boolean as its JSON
/// text, an array as one argument per element (each as above), null as an empty string, an
/// object as its JSON text.
fn arguments(value: &Value) -> Vec<String> {
    match value {
        Value::Array(items) => items.iter().map(argument).collect(),
        other => vec![argument(other)],
    }
}

fn argument(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// `text` in single quotes, as the shell reads it back exactly (a NUL, which no argument can
/// hold, is dropped).
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\0', "").replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use proto::{ErrorKind, Language};
    use serde_json::json;

    use super::super::testing::{self, case};
    use super::*;

    /// A function whose parameters are all strings (Bash's arguments).
    fn function(
        name: &str,
        params: &[&str],
        cases: Vec<proto::harness::HarnessCase>,
    ) -> FunctionCases {
        let typed: Vec<(&str, &str)> = params.iter().map(|p| (*p, "string")).collect();
        testing::function(name, &typed, "string", cases)
    }

    /// The module and its cases in the real Bash image: printed values read as the expected
    /// value's shape, statuses, timeouts, quoting, a missing function.
    #[tokio::test]
    async fn each_case_is_called_with_arguments_and_judged_in_the_real_image() {
        let module = r#"set -euo pipefail

# Prints the primes up to $1, one per line.
sieve() {
  local n=$1 i p prime primes=()
  if (( n < 0 )); then echo "n must be non-negative" >&2; return 2; fi
  for (( i = 2; i <= n; i++ )); do
    prime=1
    for p in "${primes[@]}"; do (( i % p == 0 )) && { prime=0; break; }; done
    (( prime )) && primes+=("$i")
  done
  (( ${#primes[@]} )) && printf '%s\n' "${primes[@]}"
  return 0
}

greet() { printf 'hello, %s!\n' "$1"; }
count() { echo "$#"; }
forever() { while :; do :; done; }
quits() { exit 3; }
"#;
        let functions = [
            function(
                "sieve",
                &["n"],
                vec![
                    case("ten", json!({"n": 10}), json!([2, 3, 5, 7]), None),
                    case("one", json!({"n": 1}), json!([]), None),
                    case("wrong", json!({"n": 3}), json!([2]), None),
                    case("negative", json!({"n": -1}), Value::Null, Some("error")),
                    case("unexpected status", json!({"n": -1}), json!([]), None),
                ],
            ),
            function(
                "greet",
                &["name"],
                vec![case(
                    "quotes",
                    json!({"name": "it's $(rm -rf /) `x` \"y\""}),
                    json!("hello, it's $(rm -rf /) `x` \"y\"!"),
                    None,
                )],
            ),
            function(
                "count",
                &["words"],
                vec![case(
                    "spread",
                    json!({"words": ["a b", "c"]}),
                    json!(2),
                    None,
                )],
            ),
            function(
                "forever",
                &[],
                vec![case("loops", json!({}), Value::Null, None)],
            ),
            function(
                "quits",
                &[],
                vec![case("exit", json!({}), Value::Null, Some("status 3"))],
            ),
            function(
                "missing",
                &["x"],
                vec![case("any", json!({"x": 1}), json!(1), None)],
            ),
        ];
        let (reports, result) = testing::run(Language::Bash, module, &functions).await;
        let reports = reports.unwrap_or_else(|| panic!("a report: {result:?}"));
        let verdicts = |f: &str| testing::verdicts(&reports, f);
        assert_eq!(
            verdicts("sieve"),
            [
                (true, None),
                (true, None),
                (false, Some(ErrorKind::WrongOutput)),
                (true, None),
                (false, Some(ErrorKind::Runtime)),
            ],
            "{reports:#?}"
        );
        assert_eq!(reports["sieve"].cases[2].actual_output, json!([2, 3]));
        assert_eq!(
            reports["sieve"].cases[4].error.as_deref(),
            Some("error: n must be non-negative")
        );
        assert_eq!(verdicts("greet"), [(true, None)], "{reports:#?}");
        assert_eq!(verdicts("count"), [(true, None)], "{reports:#?}");
        assert_eq!(verdicts("forever"), [(false, Some(ErrorKind::Timeout))]);
        assert_eq!(verdicts("quits"), [(true, None)], "{reports:#?}");
        let missing = &reports["missing"];
        assert!(!missing.passed && missing.cases.is_empty());
        assert_eq!(
            missing.error.as_deref(),
            Some("missing is not a function the code defines")
        );
    }

    #[test]
    fn arguments_are_quoted_as_the_shell_reads_them() {
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(arguments(&json!([1, "a b", null])), ["1", "a b", ""]);
        assert_eq!(arguments(&json!({"a": 1})), [r#"{"a":1}"#]);
        assert_eq!(arguments(&json!(true)), ["true"]);
    }

    #[tokio::test]
    async fn shellcheck_names_the_modules_line_and_says_nothing_of_a_clean_module() {
        let functions = [testing::function(
            "greet",
            &[("name", "string")],
            "string",
            vec![case("ada", json!({"name": "ada"}), json!("ada"), None)],
        )];
        let module = "# greet prints its name.\ngreet() {\n  echo $1\n}\n";
        let found = testing::lint(Language::Bash, module, &functions)
            .await
            .expect("shellcheck's findings");
        assert!(
            found
                .iter()
                .any(|f| f.starts_with("line 3: ") && f.contains("[SC2086]")),
            "{found:?}"
        );
        let clean = module.replace("echo $1", "printf '%s\\n' \"$1\"");
        let found = testing::lint(Language::Bash, &clean, &functions).await;
        assert_eq!(found, Some(vec![]));
    }
}
