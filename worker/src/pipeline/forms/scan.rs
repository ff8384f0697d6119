//! The static part of a module's quality in the languages without Python's analysis: each
//! function's cyclomatic complexity (its text, from its declaration to the next function's,
//! scanned for branches), the share of functions with a doc comment right before the
//! declaration, and the risky calls (a scan of the text: reported, never the security
//! boundary — the sandbox is). What no scan measures is listed as `unmeasured`.

use std::collections::BTreeMap;

use proto::generation::FunctionSpec;
use proto::harness::QualityReport;

/// How a language declares, documents and branches.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dialect {
    /// How a function `{}` is declared (the first of them in the module counts).
    pub(crate) declarations: &'static [&'static str],
    /// Also a line of type words and modifiers, then `{}(` (C, C++, Java), is a declaration.
    pub(crate) typed: bool,
    /// Whether the text before a declaration (trimmed) ends with a doc comment.
    pub(crate) documented: fn(&str) -> bool,
    /// Tokens that add a path through a function (a complexity of 1 plus their count).
    pub(crate) branches: &'static [&'static str],
    /// Calls or imports a module should not need.
    pub(crate) risky: &'static [&'static str],
    /// Measures this scan does not take.
    pub(crate) unmeasured: &'static [&'static str],
}

/// `module`'s quality by `dialect`'s scan.
pub(crate) fn scan(dialect: &Dialect, module: &str, specs: &[FunctionSpec]) -> QualityReport {
    let mut starts: Vec<(usize, &str)> = specs
        .iter()
        .filter_map(|s| declaration(dialect, module, &s.name).map(|at| (at, s.name.as_str())))
        .collect();
    starts.sort_unstable();
    let mut complexity = BTreeMap::new();
    let mut documented = 0usize;
    for (i, &(at, name)) in starts.iter().enumerate() {
        let end = starts.get(i + 1).map_or(module.len(), |(next, _)| *next);
        let body = &module[at..end];
        let branches: usize = dialect
            .branches
            .iter()
            .map(|b| body.matches(b).count())
            .sum();
        complexity.insert(
            name.to_owned(),
            u32::try_from(branches + 1).unwrap_or(u32::MAX),
        );
        if (dialect.documented)(module[..at].trim_end()) {
            documented += 1;
        }
    }
    let docstrings = if specs.is_empty() {
        0.0
    } else {
        documented as f64 / specs.len() as f64
    };
    let mut dangerous_calls: Vec<String> = dialect
        .risky
        .iter()
        .filter(|r| module.contains(*r))
        .map(|r| r.trim_end_matches('(').trim_matches('"').to_owned())
        .collect();
    dangerous_calls.dedup();
    QualityReport {
        coverage: 0.0,
        complexity,
        docstrings,
        dangerous_calls,
        unmeasured: dialect.unmeasured.iter().map(|m| (*m).to_owned()).collect(),
        warnings: None,
    }
}

/// Where `name` is declared in `module`: the start of the line of its first declaration.
fn declaration(dialect: &Dialect, module: &str, name: &str) -> Option<usize> {
    let typed = dialect
        .typed
        .then(|| typed_declaration(module, name))
        .flatten();
    let at = dialect
        .declarations
        .iter()
        .filter_map(|d| {
            let form = d.replace("{}", name);
            // A whole word: `func sum(` is not `func sum_primes(`'s declaration, nor
            // `func presum(`.
            module
                .match_indices(form.as_str())
                .map(|(i, _)| i)
                .find(|&i| {
                    let before = module[..i].chars().next_back();
                    !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                        || !form.starts_with(|c: char| c.is_alphanumeric() || c == '_')
                })
        })
        .chain(typed)
        .min()?;
    Some(module[..at].rfind('\n').map_or(0, |nl| nl + 1))
}

/// The first line where `name(` follows only type words and modifiers (`static int`,
/// `std::vector<int>`, `const char *`): a declaration, not a call (a call follows `return`,
/// `=`, `(`, `.`, or an operator).
fn typed_declaration(module: &str, name: &str) -> Option<usize> {
    let call = format!("{name}(");
    let mut offset = 0;
    for line in module.split_inclusive('\n') {
        if let Some(i) = line.find(&call) {
            let before = line[..i].trim();
            let named = line[..i]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_whitespace() || c == '*' || c == '&');
            let typed = !before.is_empty()
                && before
                    .split_whitespace()
                    .last()
                    .is_some_and(|w| w != "return" && w != "new" && w != "else")
                && !before.contains(['=', '(', '.', ';', '+', '-', '/', '!', '?', '|']);
            if named && typed && !line.trim_start().starts_with("//") {
                return Some(offset + i);
            }
        }
        offset += line.len();
    }
    None
}

/// A `/** ... */` block right before.
pub(crate) fn block_doc(before: &str) -> bool {
    before.ends_with("*/")
        && before
            .rfind("/*")
            .is_some_and(|open| before[open..].starts_with("/**"))
}

/// A `/* ... */` block or `//` line right before.
pub(crate) fn slash_doc(before: &str) -> bool {
    before.ends_with("*/") || last_line(before).starts_with("//")
}

/// A `///` line (or `/** */` block) right before, attributes (`#[...]`) between them skipped.
pub(crate) fn rust_doc(before: &str) -> bool {
    let mut rest = before;
    while last_line(rest).starts_with("#[") {
        rest = rest[..rest.len() - last_line(rest).len()].trim_end();
    }
    last_line(rest).starts_with("///") || block_doc(rest)
}

/// A `#` comment line right before (not the `#!` line).
pub(crate) fn hash_doc(before: &str) -> bool {
    let line = last_line(before);
    line.starts_with('#') && !line.starts_with("#!")
}

fn last_line(text: &str) -> &str {
    text.rsplit('\n').next().unwrap_or_default().trim_start()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    pub(crate) fn spec(name: &str) -> FunctionSpec {
        serde_json::from_value(json!({"name": name, "purpose": "p", "inputs": [],
            "outputs": {"type": "int", "description": "d"}, "dependencies": [],
            "complexity": "simple"}))
        .unwrap()
    }

    const GO: Dialect = Dialect {
        declarations: &["func {}("],
        typed: false,
        documented: slash_doc,
        branches: &["if ", "for ", "case ", "&&", "||"],
        risky: &["\"os/exec\""],
        unmeasured: &["coverage"],
    };

    #[test]
    fn each_function_is_scanned_from_its_declaration_to_the_next() {
        let module = "import \"os/exec\"\n\n// Sum says hi.\nfunc sum(a, b int) int {\n\tif a > 0 && b > 0 {\n\t\treturn a + b\n\t}\n\treturn 0\n}\n\nfunc presum(x int) int { return x }\n\nfunc sum_all(xs []int) int {\n\tfor _, x := range xs {\n\t}\n\treturn 1\n}\n";
        let report = scan(&GO, module, &[spec("sum"), spec("sum_all"), spec("presum")]);
        assert_eq!(report.complexity["sum"], 3);
        assert_eq!(report.complexity["presum"], 1);
        assert_eq!(report.complexity["sum_all"], 2);
        assert!((report.docstrings - 1.0 / 3.0).abs() < 1e-9);
        assert_eq!(report.dangerous_calls, ["os/exec"]);
        assert_eq!(report.unmeasured, ["coverage"]);
    }

    #[test]
    fn a_typed_declaration_is_told_from_a_call() {
        let module = "static int helper(int x) { return sieve(x); }\n\n/** Primes. */\npublic static List<Integer> sieve(int n) {\n  int[] a = sieve2(n);\n}\nconst char *name(void) {\n  return name2();\n}\nstd::vector<int> primes(int n) {\n  return b ? primes2(n) : std::vector<int>();\n}\n";
        let at = |name| typed_declaration(module, name).map(|i| &module[i..i + 6]);
        assert_eq!(at("sieve"), Some("sieve("));
        assert_eq!(at("helper"), Some("helper"));
        assert_eq!(at("name"), Some("name(v"));
        assert_eq!(at("sieve2"), None);
        assert_eq!(at("name2"), None);
        assert_eq!(at("primes"), Some("primes"));
        assert_eq!(at("primes2"), None);
    }

    #[test]
    fn doc_comments_are_told_apart_per_language() {
        assert!(rust_doc("/// Adds.\n#[inline]"));
        assert!(!rust_doc("// Adds."));
        assert!(hash_doc("x=1\n# Adds two numbers."));
        assert!(!hash_doc("#!/bin/bash"));
        assert!(block_doc("/** Adds. */"));
        assert!(!block_doc("/* not a doc */"));
        assert!(slash_doc("int x;\n// Adds."));
    }
}
