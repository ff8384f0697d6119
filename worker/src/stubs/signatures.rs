//! Stubs in JavaScript, TypeScript, Go, Rust, Java, C and C++: a function's signature with
//! its doc comment, and a body that is missing (a prototype, or a prompt that ends at the
//! body's `{`, as MultiPL-E and HumanEval-X write one), empty, only comments, or only a
//! placeholder (`todo!()`, `unimplemented!()`, `panic(...)`, `throw ...`). The request's code
//! is its first fenced block, else everything from its first line of code to its end; it must
//! parse (with the body's missing `}`s added), or the model plans.

use proto::Language;
use proto::generation::{Complexity, FunctionSpec, Output, Param};
use serde_json::{Map, Value};
use tree_sitter::{Node, Parser, Tree};

use super::examples::Reader;
use super::literals::named;
use super::{Stubs, values};

pub(super) fn stubs(language: Language, instruction: &str) -> Option<Stubs> {
    let grammar = Grammar::of(language)?;
    let code = code_of(grammar, instruction)?;
    let (tree, parsed) = grammar.parse_completed(&code)?;
    let mut found = Vec::new();
    collect(grammar, tree.root_node(), &parsed, &mut found);
    if found.is_empty() {
        return None;
    }
    // HumanEval-X writes a lone stub's comment at the top, before the imports: it is the
    // stub's when the stub has none of its own.
    if let [lone] = &mut found[..]
        && lone.doc.is_empty()
    {
        lone.doc = with_comments(tree.root_node())
            .into_iter()
            .filter(|n| is_comment(n.kind()))
            .filter_map(|c| c.utf8_text(parsed.as_bytes()).ok())
            .map(strip_comment)
            .collect::<Vec<_>>()
            .join("\n")
            .trim()
            .to_owned();
    }
    let mut specs = Vec::new();
    let mut docs = Vec::new();
    let mut cut = Vec::new();
    for stub in &found {
        specs.push(spec(grammar, stub.function, &parsed, &stub.doc)?);
        docs.push(stub.doc.clone());
        cut.push(stub.range.clone());
    }
    let preamble = grammar.preamble(&parsed, &tree, &cut);
    Some(super::assembled(&grammar, specs, &docs, &preamble, &code))
}

/// A language's grammar and what a function and a stub are in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Grammar {
    JavaScript,
    TypeScript,
    Go,
    Rust,
    Java,
    C,
    Cpp,
}

impl Grammar {
    fn of(language: Language) -> Option<Self> {
        Some(match language {
            Language::Javascript => Self::JavaScript,
            Language::Typescript => Self::TypeScript,
            Language::Go => Self::Go,
            Language::Rust => Self::Rust,
            Language::Java => Self::Java,
            Language::C => Self::C,
            Language::Cpp => Self::Cpp,
            _ => return None,
        })
    }

    pub(super) fn language(self) -> tree_sitter::Language {
        match self {
            Self::JavaScript => tree_sitter_javascript::LANGUAGE.into(),
            Self::TypeScript => tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
            Self::Go => tree_sitter_go::LANGUAGE.into(),
            Self::Rust => tree_sitter_rust::LANGUAGE.into(),
            Self::Java => tree_sitter_java::LANGUAGE.into(),
            Self::C => tree_sitter_c::LANGUAGE.into(),
            Self::Cpp => tree_sitter_cpp::LANGUAGE.into(),
        }
    }

    pub(super) fn parse(self, code: &str) -> Option<Tree> {
        let mut parser = Parser::new();
        parser.set_language(&self.language()).ok()?;
        parser.parse(code, None)
    }

    /// `code` parsed without an error, with up to three `}` added at its end (a prompt that
    /// stops at the body's opening brace), and the code that parsed.
    fn parse_completed(self, code: &str) -> Option<(Tree, String)> {
        let mut completed = code.trim_end().to_owned();
        for _ in 0..4 {
            let tree = self.parse(&completed)?;
            if !tree.root_node().has_error() {
                return Some((tree, completed));
            }
            completed.push_str("\n}");
        }
        None
    }

    /// How a line that starts the language's code begins.
    fn code_starts(self) -> &'static [&'static str] {
        match self {
            Self::JavaScript | Self::TypeScript => &[
                "function ",
                "async function ",
                "export ",
                "import ",
                "const ",
                "let ",
                "//",
                "/*",
            ],
            Self::Go => &["package ", "import ", "func ", "//", "/*", "type "],
            Self::Rust => &[
                "use ", "fn ", "pub ", "///", "//", "/*", "#[", "struct ", "impl ",
            ],
            Self::Java => &["import ", "class ", "public ", "static ", "//", "/*", "/**"],
            Self::C | Self::Cpp => &["#include", "#define", "//", "/*", "using ", "namespace "],
        }
    }

    /// The node kinds of a function with a body, and of one declared without.
    fn is_function(self, kind: &str) -> bool {
        match self {
            Self::JavaScript => kind == "function_declaration",
            Self::TypeScript => matches!(kind, "function_declaration" | "function_signature"),
            Self::Go => kind == "function_declaration",
            Self::Rust => matches!(kind, "function_item" | "function_signature_item"),
            Self::Java => kind == "method_declaration",
            Self::C | Self::Cpp => kind == "function_definition",
        }
    }

    /// The code every module of the job starts with: the request's code without its stubs
    /// (`cut`); in Go without its `package` clause (the form writes one), in Java only its
    /// imports (the form makes the class around the functions).
    fn preamble(self, code: &str, tree: &Tree, cut: &[std::ops::Range<usize>]) -> String {
        match self {
            Self::Java => named(tree.root_node())
                .into_iter()
                .filter(|n| n.kind() == "import_declaration")
                .filter_map(|n| n.utf8_text(code.as_bytes()).ok())
                .collect::<Vec<_>>()
                .join("\n"),
            Self::Go => super::without(code, cut)
                .lines()
                .filter(|l| !l.trim_start().starts_with("package "))
                .collect::<Vec<_>>()
                .join("\n"),
            _ => super::without(code, cut),
        }
    }
}

/// The request's code: its first fenced block, else from its first line of code to the end.
fn code_of(grammar: Grammar, instruction: &str) -> Option<String> {
    if let Some(code) = model::schema::fenced_code(instruction) {
        return Some(code);
    }
    let mut offset = 0;
    for line in instruction.split_inclusive('\n') {
        if grammar.code_starts().iter().any(|p| line.starts_with(p)) {
            return Some(instruction[offset..].to_owned());
        }
        offset += line.len();
    }
    None
}

/// A stub found in the code.
struct Found<'t> {
    function: Node<'t>,
    /// Its doc comment's text, markers stripped.
    doc: String,
    /// What the preamble leaves out: the stub and its doc comment.
    range: std::ops::Range<usize>,
}

/// The stubs among `node`'s children, and in the classes, namespaces and exports it holds.
fn collect<'t>(grammar: Grammar, node: Node<'t>, code: &str, found: &mut Vec<Found<'t>>) {
    let children = with_comments(node);
    for (i, child) in children.iter().enumerate() {
        let function = match child.kind() {
            "export_statement" => child.child_by_field_name("declaration"),
            "class_declaration" | "class_specifier" | "namespace_definition" => {
                if let Some(body) = child.child_by_field_name("body") {
                    collect(grammar, body, code, found);
                }
                continue;
            }
            // A C or C++ prototype: `int f(int x);`.
            "declaration" if matches!(grammar, Grammar::C | Grammar::Cpp) => child
                .child_by_field_name("declarator")
                .filter(|d| innermost_function_declarator(*d).is_some())
                .map(|_| *child),
            _ => Some(*child),
        };
        let Some(function) = function else { continue };
        let prototype = function.kind() == "declaration";
        if !prototype && !grammar.is_function(function.kind()) {
            continue;
        }
        if !prototype && !stub_body(function.child_by_field_name("body"), code) {
            continue;
        }
        // Its doc comment: the comments right before it.
        let mut first = i;
        while first > 0 && is_comment(children[first - 1].kind()) {
            first -= 1;
        }
        let doc = children[first..i]
            .iter()
            .filter_map(|c| c.utf8_text(code.as_bytes()).ok())
            .map(strip_comment)
            .collect::<Vec<_>>()
            .join("\n");
        found.push(Found {
            function,
            doc: doc.trim().to_owned(),
            range: children[first].start_byte()..child.end_byte(),
        });
    }
}

/// `node`'s named children, comments included (doc comments are extras to tree-sitter).
fn with_comments<'t>(node: Node<'t>) -> Vec<Node<'t>> {
    let mut cursor = node.walk();
    node.named_children(&mut cursor).collect()
}

fn is_comment(kind: &str) -> bool {
    matches!(kind, "comment" | "line_comment" | "block_comment")
}

/// Whether a body is a stub's: none, nothing but comments, or one placeholder statement.
fn stub_body(body: Option<Node<'_>>, code: &str) -> bool {
    let Some(body) = body else { return true };
    let statements: Vec<Node<'_>> = named(body)
        .into_iter()
        .filter(|n| !is_comment(n.kind()))
        .collect();
    match statements[..] {
        [] => true,
        [only] => {
            let text = only.utf8_text(code.as_bytes()).unwrap_or_default().trim();
            ["todo!", "unimplemented!", "panic!(", "panic(", "throw "]
                .iter()
                .any(|p| text.starts_with(p))
        }
        _ => false,
    }
}

/// A comment's text without its markers (`//`, `///`, `/*`, `/**`, `*/`, a leading `*`).
fn strip_comment(comment: &str) -> String {
    let inner = comment
        .trim()
        .trim_start_matches("/**")
        .trim_start_matches("/*")
        .trim_end_matches("*/");
    inner
        .lines()
        .map(|line| {
            let line = line.trim_start();
            let line = line
                .strip_prefix("///")
                .or_else(|| line.strip_prefix("//!"))
                .or_else(|| line.strip_prefix("//"))
                .or_else(|| line.strip_prefix('*'))
                .unwrap_or(line);
            line.strip_prefix(' ').unwrap_or(line).trim_end()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `function_declarator` a C or C++ declarator holds (through pointers and references).
fn innermost_function_declarator(node: Node<'_>) -> Option<Node<'_>> {
    match node.kind() {
        "function_declarator" => Some(node),
        "pointer_declarator" | "reference_declarator" => named(node)
            .into_iter()
            .find_map(innermost_function_declarator),
        _ => None,
    }
}

/// The spec of a stub: its name, its parameters with their declared types, its return type
/// and its doc comment as its purpose. `None` for a parameter no case can name (a rest
/// parameter, a destructuring pattern, `self`, C's `...`).
fn spec(grammar: Grammar, function: Node<'_>, code: &str, doc: &str) -> Option<FunctionSpec> {
    let text = |n: Node<'_>| n.utf8_text(code.as_bytes()).ok().map(str::to_owned);
    let mut inputs = Vec::new();
    let (name, returns) = match grammar {
        Grammar::JavaScript | Grammar::TypeScript => {
            for param in named(function.child_by_field_name("parameters")?) {
                let (name, ty) = match param.kind() {
                    "identifier" => (text(param)?, None),
                    "assignment_pattern" => (text(param.child_by_field_name("left")?)?, None),
                    "required_parameter" | "optional_parameter" => {
                        let pattern = param.child_by_field_name("pattern")?;
                        if pattern.kind() != "identifier" {
                            return None;
                        }
                        (text(pattern)?, param.child_by_field_name("type"))
                    }
                    "comment" => continue,
                    _ => return None,
                };
                let ty = match ty {
                    Some(ty) => annotation(&text(ty)?),
                    None => "any".to_owned(),
                };
                inputs.push(Param { name, ty });
            }
            let returns = match function.child_by_field_name("return_type") {
                Some(ty) => annotation(&text(ty)?),
                None => "any".to_owned(),
            };
            (text(function.child_by_field_name("name")?)?, returns)
        }
        Grammar::Go => {
            for param in named(function.child_by_field_name("parameters")?) {
                if param.kind() != "parameter_declaration" {
                    return None;
                }
                let ty = text(param.child_by_field_name("type")?)?;
                let mut cursor = param.walk();
                let names: Vec<Node<'_>> =
                    param.children_by_field_name("name", &mut cursor).collect();
                if names.is_empty() {
                    return None;
                }
                for name in names {
                    inputs.push(Param {
                        name: text(name)?,
                        ty: ty.clone(),
                    });
                }
            }
            let returns = match function.child_by_field_name("result") {
                Some(result) => text(result)?,
                None => String::new(),
            };
            (text(function.child_by_field_name("name")?)?, returns)
        }
        Grammar::Rust => {
            for param in named(function.child_by_field_name("parameters")?) {
                if param.kind() != "parameter" {
                    return None;
                }
                let pattern = param.child_by_field_name("pattern")?;
                if pattern.kind() != "identifier" {
                    return None;
                }
                inputs.push(Param {
                    name: text(pattern)?,
                    ty: text(param.child_by_field_name("type")?)?,
                });
            }
            let returns = match function.child_by_field_name("return_type") {
                Some(ty) => text(ty)?,
                None => "()".to_owned(),
            };
            (text(function.child_by_field_name("name")?)?, returns)
        }
        Grammar::Java => {
            for param in named(function.child_by_field_name("parameters")?) {
                if param.kind() != "formal_parameter" {
                    return None;
                }
                inputs.push(Param {
                    name: text(param.child_by_field_name("name")?)?,
                    ty: text(param.child_by_field_name("type")?)?,
                });
            }
            (
                text(function.child_by_field_name("name")?)?,
                text(function.child_by_field_name("type")?)?,
            )
        }
        Grammar::C | Grammar::Cpp => {
            let outer = function.child_by_field_name("declarator")?;
            let declarator = innermost_function_declarator(outer)?;
            for param in named(declarator.child_by_field_name("parameters")?) {
                if param.kind() != "parameter_declaration" {
                    return None;
                }
                let name = declared_name(param.child_by_field_name("declarator")?)?;
                // The type is the declaration without its name: `const char *s` is a
                // `const char *`, `const std::string& s` a `const std::string&`.
                let whole = text(param)?;
                let at = name.start_byte() - param.start_byte();
                let ty = format!(
                    "{}{}",
                    &whole[..at],
                    &whole[at + (name.end_byte() - name.start_byte())..]
                );
                inputs.push(Param {
                    name: text(name)?,
                    ty: ty.split_whitespace().collect::<Vec<_>>().join(" "),
                });
            }
            // `char *f(...)`: the pointer is the return type's.
            let mut returns = text(function.child_by_field_name("type")?)?;
            match outer.kind() {
                "pointer_declarator" => returns.push_str(" *"),
                "reference_declarator" => returns.push('&'),
                _ => {}
            }
            (
                text(declarator.child_by_field_name("declarator")?)?,
                returns,
            )
        }
    };
    Some(FunctionSpec {
        name,
        purpose: doc.to_owned(),
        inputs,
        outputs: Output {
            ty: returns,
            description: "what the doc comment says it returns".to_owned(),
        },
        dependencies: Vec::new(),
        complexity: Complexity::Simple,
    })
}

/// The identifier a C or C++ parameter's declarator names (through pointers, references and
/// arrays).
fn declared_name(declarator: Node<'_>) -> Option<Node<'_>> {
    match declarator.kind() {
        "identifier" => Some(declarator),
        "pointer_declarator" | "reference_declarator" | "array_declarator" => {
            match declarator.child_by_field_name("declarator") {
                Some(inner) => declared_name(inner),
                None => named(declarator).into_iter().find_map(declared_name),
            }
        }
        _ => None,
    }
}

/// A TypeScript annotation's type (`: number[]` is `number[]`).
fn annotation(text: &str) -> String {
    text.trim_start_matches(':').trim().to_owned()
}

impl Reader for Grammar {
    fn arguments(&self, spec: &FunctionSpec, call: &str) -> Option<Map<String, Value>> {
        let values = values::call_arguments(*self, &spec.name, call)?;
        if values.len() != spec.inputs.len() {
            return None;
        }
        Some(
            spec.inputs
                .iter()
                .zip(values)
                .map(|(param, value)| (param.name.clone(), value))
                .collect(),
        )
    }

    fn literal(&self, text: &str) -> Option<Value> {
        values::literal(*self, text)
    }
}

#[cfg(test)]
mod tests;
