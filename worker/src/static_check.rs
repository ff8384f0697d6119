//! Checks that need no sandbox: Python syntax (a parser in this process; the code is parsed,
//! never run), that the promised function is defined with the promised parameters, docstrings,
//! and risky calls. Used when no sandbox is available, so a job can still finish, marked as
//! not tested.

use std::collections::BTreeSet;

use rustpython_ast::{self as ast, Visitor};
use rustpython_parser::{Mode, parse};

/// What a module looks like without running it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    pub functions: usize,
    pub documented: usize,
    pub dangerous_calls: BTreeSet<String>,
}

const DANGEROUS: &[&str] = &[
    "eval",
    "exec",
    "compile",
    "__import__",
    "os.system",
    "os.popen",
    "os.exec",
    "os.spawn",
    "subprocess",
    "socket",
    "urllib",
    "http.client",
    "requests",
    "shutil.rmtree",
    "os.remove",
    "os.unlink",
    "pickle.loads",
    "ctypes",
];

fn dangerous(name: &str) -> bool {
    DANGEROUS
        .iter()
        .any(|bad| name == *bad || name.starts_with(&format!("{bad}.")))
}

fn dotted(expr: &ast::Expr) -> String {
    match expr {
        ast::Expr::Name(name) => name.id.as_str().to_owned(),
        ast::Expr::Attribute(attribute) => {
            let base = dotted(&attribute.value);
            if base.is_empty() {
                attribute.attr.as_str().to_owned()
            } else {
                format!("{base}.{}", attribute.attr.as_str())
            }
        }
        _ => String::new(),
    }
}

#[derive(Default)]
struct Scanner {
    found: BTreeSet<String>,
}

impl Visitor for Scanner {
    fn visit_expr_call(&mut self, node: ast::ExprCall) {
        let name = dotted(&node.func);
        if dangerous(&name) {
            self.found.insert(name);
        }
        self.generic_visit_expr_call(node);
    }

    fn visit_stmt_import(&mut self, node: ast::StmtImport) {
        for alias in &node.names {
            if dangerous(alias.name.as_str()) {
                self.found.insert(alias.name.as_str().to_owned());
            }
        }
        self.generic_visit_stmt_import(node);
    }

    fn visit_stmt_import_from(&mut self, node: ast::StmtImportFrom) {
        if let Some(module) = &node.module
            && dangerous(module.as_str())
        {
            self.found.insert(module.as_str().to_owned());
        }
        self.generic_visit_stmt_import_from(node);
    }
}

fn has_docstring(body: &[ast::Stmt]) -> bool {
    matches!(
        body.first(),
        Some(ast::Stmt::Expr(ast::StmtExpr { value, .. }))
            if matches!(value.as_ref(), ast::Expr::Constant(c) if matches!(c.value, ast::Constant::Str(_)))
    )
}

/// Parses `code`; when `function` is given, it must be defined at the top level with
/// `parameters` positional parameters. The error reads like Python's own.
pub fn check(code: &str, function: Option<(&str, usize)>) -> Result<Report, String> {
    let module = parse(code, Mode::Module, "module.py").map_err(|e| format!("SyntaxError: {e}"))?;
    let body = match module {
        ast::Mod::Module(module) => module.body,
        _ => Vec::new(),
    };
    let mut report = Report::default();
    let mut defined = None;
    for stmt in &body {
        if let ast::Stmt::FunctionDef(def) = stmt {
            report.functions += 1;
            if has_docstring(&def.body) {
                report.documented += 1;
            }
            if function.is_some_and(|(name, _)| name == def.name.as_str()) {
                defined = Some(def.args.posonlyargs.len() + def.args.args.len());
            }
        }
    }
    if let Some((name, parameters)) = function {
        match defined {
            None => return Err(format!("NameError: the code does not define `{name}`")),
            Some(n) if n != parameters => {
                return Err(format!(
                    "TypeError: `{name}` takes {n} positional parameters, the spec has {parameters}"
                ));
            }
            Some(_) => {}
        }
    }
    let mut scanner = Scanner::default();
    for stmt in body {
        scanner.visit_stmt(stmt);
    }
    report.dangerous_calls = scanner.found;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syntax_errors_are_reported_without_running_anything() {
        let err = check("def f(x):\n    return x +\n", Some(("f", 1))).unwrap_err();
        assert!(err.starts_with("SyntaxError"), "{err}");
        // Parsing never executes: a program that would delete files is only read.
        assert!(check("import shutil\nshutil.rmtree('/')\n", None).is_ok());
    }

    #[test]
    fn the_promised_function_must_exist_with_its_parameters() {
        let code = "def add(a, b):\n    \"\"\"Sum.\"\"\"\n    return a + b\n";
        let report = check(code, Some(("add", 2))).unwrap();
        assert_eq!((report.functions, report.documented), (1, 1));
        assert!(
            check(code, Some(("sub", 2)))
                .unwrap_err()
                .contains("does not define `sub`")
        );
        assert!(
            check(code, Some(("add", 3)))
                .unwrap_err()
                .contains("takes 2")
        );
    }

    #[test]
    fn risky_calls_are_found_wherever_they_hide() {
        let code = "import subprocess\nfrom os import path\ndef f(x):\n    def g():\n        return eval(x)\n    return os.system(g())\n";
        let report = check(code, None).unwrap();
        let found: Vec<&str> = report.dangerous_calls.iter().map(String::as_str).collect();
        assert_eq!(found, vec!["eval", "os.system", "subprocess"]);
        assert_eq!(report.documented, 0);
    }
}
