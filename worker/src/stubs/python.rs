//! Python stubs: a top-level `def` whose body is only its docstring (and perhaps `pass` or
//! `...`). The request's code is its first fenced block, else everything from its first line
//! that starts Python code (`def`, `import`, `from`, `class`, `@`, `async def`) to its end; it
//! must be valid Python (the static checker's rules), or the model plans.

use proto::generation::{Complexity, FunctionSpec, Output, Param};
use serde_json::{Map, Value};
use tree_sitter::{Node, Parser};

use super::Stubs;
use super::examples::Reader;
use super::literals::{named, value};

/// Python's calls and literals, for the examples of a docstring.
struct Python;

impl Reader for Python {
    fn arguments(&self, spec: &FunctionSpec, call: &str) -> Option<Map<String, Value>> {
        arguments(spec, call)
    }

    fn literal(&self, text: &str) -> Option<Value> {
        literal(text)
    }
}

pub(super) fn stubs(instruction: &str) -> Option<Stubs> {
    let code = code_of(instruction)?;
    crate::static_check::check(&code, None).ok()?;
    let mut parser = Parser::new();
    parser
        .set_language(&tree_sitter_python::LANGUAGE.into())
        .ok()?;
    let tree = parser.parse(&code, None)?;
    let root = tree.root_node();
    let mut specs = Vec::new();
    let mut docstrings = Vec::new();
    let mut cut = Vec::new();
    for node in named(root) {
        let Some((def, docstring)) = stub(node, &code) else {
            continue;
        };
        specs.push(spec(def, &code, &docstring)?);
        docstrings.push(docstring);
        cut.push(node.start_byte()..node.end_byte());
    }
    if specs.is_empty() {
        return None;
    }
    let preamble = super::without(&code, &cut);
    Some(super::assembled(
        &Python,
        specs,
        &docstrings,
        &preamble,
        &code,
    ))
}

/// The request's code: its first fenced block, else from its first line of Python to the end.
fn code_of(instruction: &str) -> Option<String> {
    if let Some(code) = model::schema::fenced_code(instruction) {
        return Some(code);
    }
    let starts = |line: &str| {
        ["def ", "async def ", "import ", "from ", "class ", "@"]
            .iter()
            .any(|p| line.starts_with(p))
    };
    let mut offset = 0;
    for line in instruction.split_inclusive('\n') {
        if starts(line) {
            return Some(instruction[offset..].to_owned());
        }
        offset += line.len();
    }
    None
}

/// `node` as a stub: the `def` and its docstring's text, when its body is only that.
fn stub<'t>(node: Node<'t>, code: &str) -> Option<(Node<'t>, String)> {
    let def = match node.kind() {
        "function_definition" => node,
        _ => return None,
    };
    let body = named(def.child_by_field_name("body")?);
    let (first, rest) = body.split_first()?;
    let docstring = match named(*first)[..] {
        [string] if first.kind() == "expression_statement" && string.kind() == "string" => {
            value(string, code)?
        }
        _ => return None,
    };
    let filler = |n: &Node<'_>| {
        n.kind() == "pass_statement"
            || (n.kind() == "expression_statement"
                && named(*n).first().is_some_and(|e| e.kind() == "ellipsis"))
    };
    if !rest.iter().all(filler) {
        return None;
    }
    Some((def, docstring.as_str()?.to_owned()))
}

/// The spec of a stub: its name, parameters and their annotations, its return annotation, and
/// its docstring as the purpose. `None` for parameters that no case can name (`*args`, `**kw`,
/// positional-only markers).
fn spec(def: Node<'_>, code: &str, docstring: &str) -> Option<FunctionSpec> {
    let text = |n: Node<'_>| n.utf8_text(code.as_bytes()).ok().map(str::to_owned);
    let name = text(def.child_by_field_name("name")?)?;
    let mut inputs = Vec::new();
    for param in named(def.child_by_field_name("parameters")?) {
        let (name, ty) = match param.kind() {
            "identifier" => (text(param)?, None),
            "typed_parameter" => (
                text(
                    named(param)
                        .into_iter()
                        .find(|n| n.kind() == "identifier")?,
                )?,
                param.child_by_field_name("type"),
            ),
            "default_parameter" | "typed_default_parameter" => (
                text(param.child_by_field_name("name")?)?,
                param.child_by_field_name("type"),
            ),
            _ => return None,
        };
        let ty = match ty {
            Some(ty) => text(ty)?,
            None => "Any".to_owned(),
        };
        inputs.push(Param { name, ty });
    }
    let returns = match def.child_by_field_name("return_type") {
        Some(ty) => text(ty)?,
        None => "Any".to_owned(),
    };
    Some(FunctionSpec {
        name,
        purpose: dedent(docstring),
        inputs,
        outputs: Output {
            ty: returns,
            description: "what the docstring says it returns".to_owned(),
        },
        dependencies: Vec::new(),
        complexity: Complexity::Simple,
    })
}

/// The docstring without its common indentation (as `inspect.cleandoc` has it).
fn dedent(docstring: &str) -> String {
    let lines: Vec<&str> = docstring.lines().collect();
    let indent = lines
        .iter()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    let mut out: Vec<&str> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            if i == 0 {
                l.trim()
            } else {
                l.get(indent..).unwrap_or("").trim_end()
            }
        })
        .collect();
    while out.last().is_some_and(|l| l.is_empty()) {
        out.pop();
    }
    while out.first().is_some_and(|l| l.is_empty()) {
        out.remove(0);
    }
    out.join("\n")
}

/// The inputs of `call` (`f(1, b=2)`), by parameter name, when it calls `spec`'s function with
/// literals only and names no parameter twice or that it lacks.
fn arguments(spec: &FunctionSpec, call: &str) -> Option<Map<String, Value>> {
    let tree = expression(call)?;
    let call_node = only_expression(&tree)?;
    if call_node.kind() != "call" {
        return None;
    }
    let function = call_node.child_by_field_name("function")?;
    if function.utf8_text(call.as_bytes()).ok()? != spec.name {
        return None;
    }
    let mut inputs = Map::new();
    for (i, argument) in named(call_node.child_by_field_name("arguments")?)
        .into_iter()
        .enumerate()
    {
        let (name, v) = if argument.kind() == "keyword_argument" {
            let name = argument
                .child_by_field_name("name")?
                .utf8_text(call.as_bytes())
                .ok()?
                .to_owned();
            (name, value(argument.child_by_field_name("value")?, call)?)
        } else {
            (spec.inputs.get(i)?.name.clone(), value(argument, call)?)
        };
        if !spec.inputs.iter().any(|p| p.name == name) || inputs.contains_key(&name) {
            return None;
        }
        inputs.insert(name, v);
    }
    Some(inputs)
}

/// `text` as one Python literal.
fn literal(text: &str) -> Option<Value> {
    let tree = expression(text)?;
    value(only_expression(&tree)?, text)
}

/// `text` parsed whole, when it is one expression statement and nothing else.
fn expression(text: &str) -> Option<tree_sitter::Tree> {
    let mut parser = Parser::new();
    parser
        .set_language(&tree_sitter_python::LANGUAGE.into())
        .ok()?;
    let tree = parser.parse(text, None)?;
    let root = tree.root_node();
    let one = !root.has_error()
        && matches!(named(root)[..], [statement] if statement.kind() == "expression_statement"
            && named(statement).len() == 1);
    one.then_some(tree)
}

/// The expression of a tree [`expression`] gave.
fn only_expression(tree: &tree_sitter::Tree) -> Option<Node<'_>> {
    let statement = *named(tree.root_node()).first()?;
    named(statement).first().copied()
}

#[cfg(test)]
mod tests;
