//! Checks that need no sandbox: Python syntax (a parser in this process; the code is parsed,
//! never run), that the promised function is defined with the promised parameters, docstrings,
//! and risky calls. Used when no sandbox is available, so a job can still finish, marked as
//! not tested.
//!
//! The parser is tree-sitter's Python grammar. It never fails: it recovers from errors and
//! leaves ERROR and MISSING nodes in the tree, so any such node is a syntax error here. It is
//! also more lenient than CPython: it accepts Python 2 (print and exec statements, `<>`,
//! backticks, `raise E, v`, `except E, e`, `0777`, `1L`, tuple parameters), inconsistent
//! indentation, empty blocks, arguments and parameters in any order, and a few more. Those are
//! checked by hand below, so that what CPython's parser rejects is rejected here too.

use std::collections::{BTreeSet, HashSet};

use tree_sitter::{Node, Parser};

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

/// The module's text, for node texts and for positions in the words Python uses.
#[derive(Clone, Copy)]
struct Source<'s> {
    code: &'s str,
}

impl<'s> Source<'s> {
    fn text(self, node: Node<'_>) -> &'s str {
        self.code.get(node.byte_range()).unwrap_or_default()
    }

    fn line_start(self, byte: usize) -> usize {
        self.code
            .get(..byte)
            .and_then(|before| before.rfind('\n'))
            .map_or(0, |newline| newline + 1)
    }

    /// `SyntaxError: {what} at line L, column C`, both counted from 1 as Python does, the
    /// column in characters rather than tree-sitter's bytes.
    fn error(self, node: Node<'_>, what: &str) -> String {
        self.error_at(node.start_byte(), what)
    }

    fn error_at(self, byte: usize, what: &str) -> String {
        let line_start = self.line_start(byte);
        let column = self
            .code
            .get(line_start..byte)
            .map_or(0, |prefix| prefix.chars().count());
        // Counted in `code`, not the tree: the tree may be of `Lines::joined`.
        let line = self
            .code
            .get(..line_start)
            .map_or(0, |before| before.matches('\n').count());
        format!(
            "SyntaxError: {what} at line {}, column {}",
            line + 1,
            column + 1
        )
    }
}

/// A line's indentation as Python's tokenizer measures it twice: tabs to the next multiple of
/// 8, and tabs as one column. Where the two disagree on an order, Python raises `TabError`.
#[derive(Clone, Copy, PartialEq)]
struct Indent {
    tabs8: usize,
    tabs1: usize,
}

impl Indent {
    fn of(whitespace: &str) -> Self {
        let mut indent = Indent { tabs8: 0, tabs1: 0 };
        for c in whitespace.chars() {
            match c {
                '\t' => {
                    indent.tabs8 = (indent.tabs8 / 8 + 1) * 8;
                    indent.tabs1 += 1;
                }
                // A form feed resets the column, as in CPython's tokenizer.
                '\x0c' => indent = Indent { tabs8: 0, tabs1: 0 },
                _ => {
                    indent.tabs8 += 1;
                    indent.tabs1 += 1;
                }
            }
        }
        indent
    }
}

impl Source<'_> {
    /// The whitespace that starts the line holding `byte`, and whether `byte` is where it ends.
    fn leading(self, byte: usize) -> (Indent, bool) {
        let line_start = self.line_start(byte);
        let line = self.code.get(line_start..).unwrap_or_default();
        let whitespace = line.len() - line.trim_start_matches([' ', '\t', '\x0c']).len();
        let first = line_start + whitespace == byte;
        (
            Indent::of(line.get(..whitespace).unwrap_or_default()),
            first,
        )
    }

    /// The indentation of `node` when it starts its line (a statement after `;` or a colon
    /// does not).
    fn indentation(self, node: Node<'_>) -> Option<Indent> {
        let (indent, first) = self.leading(node.start_byte());
        first.then_some(indent)
    }

    /// `node` starts its line at `expected`'s indentation, or Python's error. `before` is
    /// what precedes it, to tell a stray indent from a dedent to a level never opened.
    fn aligned(
        self,
        node: Node<'_>,
        expected: Indent,
        before: Option<Node<'_>>,
    ) -> Result<(), String> {
        let Some(indent) = self.indentation(node) else {
            return Ok(());
        };
        if indent == expected {
            return Ok(());
        }
        if indent.tabs8 == expected.tabs8 {
            return Err(self.error(node, "inconsistent use of tabs and spaces in indentation"));
        }
        let dedent = before.is_some_and(|before| {
            // The last line of what precedes: a block ending deeper than `node` starts.
            let (last, _) = self.leading(before.end_byte().saturating_sub(1));
            indent.tabs8 < last.tabs8
        });
        Err(self.error(
            node,
            if dedent {
                "unindent does not match any outer indentation level"
            } else {
                "unexpected indent"
            },
        ))
    }
}

/// Statements in sequence share one indentation (those on a line after `;` aside).
fn check_statements(
    statements: &[Node<'_>],
    expected: Indent,
    source: Source<'_>,
) -> Result<(), String> {
    let mut before = None;
    for statement in statements {
        source.aligned(*statement, expected, before)?;
        before = Some(*statement);
    }
    Ok(())
}

/// A block is not empty, and its statements are indented deeper than its header.
fn check_block(block: Node<'_>, source: Source<'_>) -> Result<(), String> {
    let statements = children(block);
    if statements.is_empty() {
        return Err(source.error(block, "expected an indented block"));
    }
    let header = block
        .parent()
        .map_or(Indent { tabs8: 0, tabs1: 0 }, |header| {
            source.leading(header.start_byte()).0
        });
    let Some(indent) = statements.iter().find_map(|s| source.indentation(*s)) else {
        return Ok(());
    };
    let deeper8 = indent.tabs8 > header.tabs8;
    if deeper8 != (indent.tabs1 > header.tabs1) {
        return Err(source.error(block, "inconsistent use of tabs and spaces in indentation"));
    }
    if !deeper8 {
        return Err(source.error(block, "expected an indented block"));
    }
    check_statements(&statements, indent, source)
}

/// Python 2 integer literals: `0777` (octal without `0o`) and `1L`.
fn check_integer(integer: Node<'_>, source: Source<'_>) -> Result<(), String> {
    let text = source.text(integer).replace('_', "");
    if text.ends_with(['l', 'L']) {
        return Err(source.error(integer, "invalid decimal literal"));
    }
    let decimal = !text.starts_with("0x")
        && !text.starts_with("0X")
        && !text.starts_with("0o")
        && !text.starts_with("0O")
        && !text.starts_with("0b")
        && !text.starts_with("0B")
        && !text.ends_with(['j', 'J']);
    if decimal && text.starts_with('0') && text.chars().any(|c| c != '0') {
        return Err(source.error(
            integer,
            "leading zeros in decimal integer literals are not permitted; use an 0o prefix for octal integers",
        ));
    }
    Ok(())
}

/// Every node in document order. A cursor rather than recursion: generated code can nest
/// deeply enough to exhaust the stack.
fn walk<'t>(
    root: Node<'t>,
    mut visit: impl FnMut(Node<'t>) -> Result<(), String>,
) -> Result<(), String> {
    let mut cursor = root.walk();
    loop {
        visit(cursor.node())?;
        if cursor.goto_first_child() {
            continue;
        }
        loop {
            if cursor.goto_next_sibling() {
                break;
            }
            if !cursor.goto_parent() {
                return Ok(());
            }
        }
    }
}

/// Named children without comments, which tree-sitter keeps in the tree wherever they occur.
fn children<'t>(node: Node<'t>) -> Vec<Node<'t>> {
    let mut cursor = node.walk();
    node.named_children(&mut cursor)
        .filter(|child| !child.is_extra())
        .collect()
}

/// What Python's tokenizer knows about lines and tree-sitter's scanner does not.
struct Lines {
    /// The code with the newlines and comments inside brackets blanked out, byte for byte,
    /// so that offsets still point into the code. Python joins those lines and ignores their
    /// indentation; tree-sitter does not, and rejects valid code such as `return (a +\n b)`
    /// inside a function.
    joined: Option<String>,
    /// Where logical lines end: newlines outside brackets and strings, and not after `\`.
    breaks: Vec<usize>,
    /// The first string that a newline ends: tree-sitter lets an f-string go on.
    unterminated: Option<usize>,
}

impl Lines {
    fn of(code: &str) -> Self {
        let bytes = code.as_bytes();
        let mut joined = bytes.to_vec();
        let mut breaks = Vec::new();
        let mut unterminated = None;
        let mut depth = 0usize;
        let mut i = 0;
        while let Some(&byte) = bytes.get(i) {
            match byte {
                b'#' => {
                    let end = bytes
                        .get(i..)
                        .and_then(|rest| rest.iter().position(|b| *b == b'\n'))
                        .map_or(bytes.len(), |n| i + n);
                    if depth > 0
                        && let Some(comment) = joined.get_mut(i..end)
                    {
                        comment.fill(b' ');
                    }
                    i = end;
                }
                b'"' | b'\'' => {
                    let start = i;
                    let triple = bytes.get(i..i + 3) == Some(&[byte; 3][..]);
                    i += if triple { 3 } else { 1 };
                    while let Some(&inner) = bytes.get(i) {
                        if inner == b'\\' {
                            i += 2;
                        } else if triple && bytes.get(i..i + 3) == Some(&[byte; 3][..]) {
                            i += 3;
                            break;
                        } else if !triple && inner == byte {
                            i += 1;
                            break;
                        } else if !triple && inner == b'\n' {
                            unterminated = unterminated.or(Some(start));
                            break;
                        } else {
                            i += 1;
                        }
                    }
                }
                b'\\' if matches!(bytes.get(i + 1), Some(b'\n')) => i += 2,
                b'\\' if bytes.get(i + 1..i + 3) == Some(b"\r\n") => i += 3,
                b'(' | b'[' | b'{' => {
                    depth += 1;
                    i += 1;
                }
                b')' | b']' | b'}' => {
                    depth = depth.saturating_sub(1);
                    i += 1;
                }
                b'\n' | b'\r' if depth > 0 => {
                    if let Some(newline) = joined.get_mut(i) {
                        *newline = b' ';
                    }
                    i += 1;
                }
                b'\n' => {
                    breaks.push(i);
                    i += 1;
                }
                _ => i += 1,
            }
        }
        Lines {
            joined: String::from_utf8(joined).ok(),
            breaks,
            unterminated,
        }
    }
}

/// Statements whose header ends at a `:`, after which their lines may end.
const COMPOUND: &[&str] = &[
    "if_statement",
    "elif_clause",
    "else_clause",
    "for_statement",
    "while_statement",
    "try_statement",
    "except_clause",
    "except_group_clause",
    "finally_clause",
    "with_statement",
    "function_definition",
    "class_definition",
    "match_statement",
    "case_clause",
];

/// A logical line may end only between statements or after a compound statement's header.
/// Where the grammar has no use for a newline, tree-sitter's scanner reads it as a space:
/// `x =\n 1` parses, and so does `elsse:\n    y = 1`, as an annotated assignment.
fn check_line_break(root: Node<'_>, at: usize, source: Source<'_>) -> Result<(), String> {
    let Some(node) = root.named_descendant_for_byte_range(at, at + 1) else {
        return Ok(());
    };
    let kind = node.kind();
    if matches!(
        kind,
        "module" | "block" | "decorated_definition" | "comment"
    ) {
        return Ok(());
    }
    if COMPOUND.contains(&kind) {
        let mut cursor = node.walk();
        let colon = node.children(&mut cursor).find(|child| child.kind() == ":");
        if colon.is_some_and(|colon| colon.end_byte() <= at) {
            return Ok(());
        }
    }
    Err(source.error_at(at, "invalid syntax: the line ends inside a statement"))
}

/// Where error recovery had to skip or invent something.
fn first_recovery(root: Node<'_>, source: Source<'_>) -> Option<String> {
    let mut found = None;
    let _ = walk(root, |node| {
        if node.is_missing() {
            found = Some(source.error(node, &format!("expected '{}'", node.kind())));
            Err(String::new())
        } else if node.is_error() {
            let near = source.text(node).lines().next().unwrap_or_default().trim();
            let near: String = near.chars().take(40).collect();
            let what = if near.is_empty() {
                "invalid syntax".to_owned()
            } else {
                format!("invalid syntax near `{near}`")
            };
            found = Some(source.error(node, &what));
            Err(String::new())
        } else {
            Ok(())
        }
    });
    found
}

/// Checks a `def` or `lambda` parameter list as CPython's parser does and counts the
/// positional parameters (those before `*`, `*args` or `**kwargs`).
fn positional_parameters(parameters: Node<'_>, source: Source<'_>) -> Result<usize, String> {
    let mut positional = 0;
    let mut names = HashSet::new();
    let mut defaulted = false;
    let mut keyword_only = false;
    let mut slash = false;
    let mut bare_star: Option<Node<'_>> = None;
    let mut double_star = false;
    for parameter in children(parameters) {
        if double_star {
            return Err(source.error(parameter, "arguments cannot follow var-keyword argument"));
        }
        // A typed `*args: T` or `**kwargs: T` is the splat inside the annotation.
        let inner = match parameter.kind() {
            "typed_parameter" => children(parameter).first().copied().unwrap_or(parameter),
            _ => parameter,
        };
        let name = match inner.kind() {
            "identifier" | "default_parameter" | "typed_default_parameter" => {
                let has_default = inner.kind() != "identifier";
                let name = if has_default {
                    inner.child_by_field_name("name")
                } else {
                    Some(inner)
                };
                if keyword_only {
                    bare_star = None;
                } else {
                    if defaulted && !has_default {
                        return Err(
                            source.error(inner, "non-default argument follows default argument")
                        );
                    }
                    defaulted |= has_default;
                    positional += 1;
                }
                name
            }
            "list_splat_pattern" | "keyword_separator" => {
                if keyword_only {
                    return Err(source.error(inner, "* argument may appear only once"));
                }
                keyword_only = true;
                if inner.kind() == "keyword_separator" {
                    bare_star = Some(inner);
                }
                children(inner).first().copied()
            }
            "dictionary_splat_pattern" => {
                double_star = true;
                children(inner).first().copied()
            }
            "positional_separator" => {
                if slash || keyword_only || positional == 0 {
                    return Err(source.error(
                        inner,
                        "/ must come once, after at least one parameter and before *",
                    ));
                }
                slash = true;
                None
            }
            _ => return Err(source.error(inner, "tuple parameters are Python 2 only")),
        };
        let Some(name) = name else {
            continue;
        };
        // `def f((a, b)=x)`, `def f(*a.b)`: patterns the grammar shares with assignments.
        if name.kind() != "identifier" {
            return Err(source.error(name, "a parameter must be a plain name"));
        }
        let text = source.text(name);
        if !names.insert(text) {
            return Err(source.error(
                name,
                &format!("duplicate argument '{text}' in function definition"),
            ));
        }
    }
    match bare_star {
        Some(star) => Err(source.error(star, "named arguments must follow bare *")),
        None => Ok(positional),
    }
}

/// The order CPython's parser demands of a call's (or a class's) arguments.
fn check_arguments(arguments: Node<'_>, source: Source<'_>) -> Result<(), String> {
    let mut keywords = HashSet::new();
    let mut keyword = false;
    let mut double_star = false;
    for argument in children(arguments) {
        match argument.kind() {
            "keyword_argument" => {
                keyword = true;
                if let Some(name) = argument.child_by_field_name("name") {
                    let text = source.text(name);
                    if !keywords.insert(text) {
                        return Err(
                            source.error(name, &format!("keyword argument repeated: {text}"))
                        );
                    }
                }
            }
            "dictionary_splat" => double_star = true,
            "list_splat" if double_star => {
                return Err(source.error(
                    argument,
                    "iterable argument unpacking follows keyword argument unpacking",
                ));
            }
            "list_splat" => {}
            _ if double_star => {
                return Err(source.error(
                    argument,
                    "positional argument follows keyword argument unpacking",
                ));
            }
            _ if keyword => {
                return Err(source.error(argument, "positional argument follows keyword argument"));
            }
            _ => {}
        }
    }
    Ok(())
}

/// A string literal's prefix (`rb`, `f`, ...), lower-cased.
fn string_prefix(string: Node<'_>, source: Source<'_>) -> String {
    children(string)
        .first()
        .filter(|start| start.kind() == "string_start")
        .map(|start| {
            source
                .text(*start)
                .trim_end_matches(['"', '\''])
                .to_ascii_lowercase()
        })
        .unwrap_or_default()
}

/// A literal's prefix, and its escapes, which tree-sitter reads as text when incomplete.
fn check_string(string: Node<'_>, source: Source<'_>) -> Result<(), String> {
    let prefix = string_prefix(string, source);
    // `t` is Python 3.14's template string.
    let valid = [
        "", "r", "u", "b", "br", "rb", "f", "fr", "rf", "t", "tr", "rt",
    ];
    if prefix.starts_with('`') {
        return Err(source.error(string, "invalid syntax: backquotes are Python 2 only"));
    }
    if !valid.contains(&prefix.as_str()) {
        return Err(source.error(string, "invalid string prefix"));
    }
    if prefix.contains('r') {
        return Ok(());
    }
    let bytes = prefix.contains('b');
    for part in children(string) {
        if part.kind() != "string_content" {
            continue;
        }
        let mut chars = source.text(part).chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                continue;
            }
            let digits = match chars.next() {
                Some('x') => 2,
                Some('u') if !bytes => 4,
                Some('U') if !bytes => 8,
                _ => continue,
            };
            let hex: String = chars.clone().take(digits).collect();
            let value = (hex.len() == digits && hex.chars().all(|h| h.is_ascii_hexdigit()))
                .then(|| u32::from_str_radix(&hex, 16).ok())
                .flatten();
            if value.is_none_or(|value| value > 0x10_FFFF) {
                return Err(source.error(
                    part,
                    "(unicode error) truncated or invalid \\x, \\u or \\U escape",
                ));
            }
            chars.nth(digits - 1);
        }
    }
    Ok(())
}

/// `del` takes names, attributes, subscripts and tuples or lists of them, never a call or
/// an operation.
fn check_deletable(statement: Node<'_>, source: Source<'_>) -> Result<(), String> {
    let mut targets = children(statement);
    while let Some(target) = targets.pop() {
        match target.kind() {
            "identifier" | "attribute" | "subscript" => {}
            "tuple" | "list" | "expression_list" | "parenthesized_expression" => {
                targets.extend(children(target));
            }
            _ => return Err(source.error(target, "cannot delete expression")),
        }
    }
    Ok(())
}

/// The grammar lets a splat stand for any operand (`10 ***p`, `(** a, b)`), where Python
/// allows it only as an item of a call, a display or a tuple. Tree-sitter may also hang what
/// follows the star on the splat (`*a.b()` as a call of `*a.b`), so the check climbs through
/// whatever starts where the splat does.
fn check_splat(splat: Node<'_>, allowed: &[&str], source: Source<'_>) -> Result<(), String> {
    let mut node = splat;
    while let Some(parent) = node.parent() {
        if allowed.contains(&parent.kind()) {
            return Ok(());
        }
        if parent.start_byte() != splat.start_byte() {
            break;
        }
        node = parent;
    }
    Err(source.error(splat, "invalid syntax: can't use starred expression here"))
}

/// A plain `str` literal, as Python's docstrings must be: f-strings and bytes are not.
fn is_str_literal(node: Node<'_>, source: Source<'_>) -> bool {
    let parts = match node.kind() {
        "string" => vec![node],
        "concatenated_string" => children(node),
        _ => return false,
    };
    parts.iter().all(|part| {
        part.kind() == "string" && {
            let prefix = string_prefix(*part, source);
            !prefix.contains(['b', 'f', 't'])
        }
    })
}

fn has_docstring(def: Node<'_>, source: Source<'_>) -> bool {
    let Some(body) = def.child_by_field_name("body") else {
        return false;
    };
    let Some(first) = children(body).first().copied() else {
        return false;
    };
    if first.kind() != "expression_statement" {
        return false;
    }
    let [mut value] = children(first)[..] else {
        return false;
    };
    // Parentheses leave no trace in Python's AST: `("doc")` is a docstring too.
    while value.kind() == "parenthesized_expression" {
        match children(value)[..] {
            [inner] => value = inner,
            _ => return false,
        }
    }
    is_str_literal(value, source)
}

/// `a.b.c` for a name or attribute chain; whatever is not a name at the bottom (a call, a
/// subscript) is left out, so `x().os.system` still reads `os.system`.
fn dotted(node: Node<'_>, source: Source<'_>) -> String {
    let mut parts = Vec::new();
    let mut node = node;
    loop {
        match node.kind() {
            "identifier" => {
                parts.push(source.text(node));
                break;
            }
            "attribute" => {
                if let Some(attribute) = node.child_by_field_name("attribute") {
                    parts.push(source.text(attribute));
                }
                match node.child_by_field_name("object") {
                    Some(object) => node = object,
                    None => break,
                }
            }
            "parenthesized_expression" => match children(node)[..] {
                [inner] => node = inner,
                _ => break,
            },
            _ => break,
        }
    }
    parts.reverse();
    parts.join(".")
}

/// A `dotted_name` without the spaces or line continuations Python allows inside it.
fn dotted_name(node: Node<'_>, source: Source<'_>) -> String {
    children(node)
        .into_iter()
        .map(|part| source.text(part))
        .collect::<Vec<_>>()
        .join(".")
}

/// The names a node brings in or calls that deserve a reviewer's look, and the syntax errors
/// tree-sitter accepts but CPython does not.
fn scan(node: Node<'_>, source: Source<'_>, found: &mut BTreeSet<String>) -> Result<(), String> {
    let mut note = |name: String| {
        if dangerous(&name) {
            found.insert(name);
        }
    };
    match node.kind() {
        "call" => {
            if let Some(function) = node.child_by_field_name("function") {
                note(dotted(function, source));
            }
        }
        "import_statement" => {
            let mut cursor = node.walk();
            for name in node.children_by_field_name("name", &mut cursor) {
                let name = match name.kind() {
                    "aliased_import" => name.child_by_field_name("name"),
                    _ => Some(name),
                };
                if let Some(name) = name {
                    note(dotted_name(name, source));
                }
            }
        }
        "import_from_statement" => {
            // `from .x import y` names module `x`, as in Python's AST; `from . import y` none.
            let module =
                node.child_by_field_name("module_name")
                    .and_then(|module| match module.kind() {
                        "relative_import" => children(module)
                            .into_iter()
                            .find(|part| part.kind() == "dotted_name"),
                        _ => Some(module),
                    });
            if let Some(module) = module {
                note(dotted_name(module, source));
            }
        }
        // `print >>f, x` is a valid (if useless) expression in Python 3; `print x` is not.
        "print_statement" if !children(node).iter().any(|c| c.kind() == "chevron") => {
            return Err(source.error(node, "Missing parentheses in call to 'print'"));
        }
        "exec_statement" => {
            return Err(source.error(node, "Missing parentheses in call to 'exec'"));
        }
        "identifier" if matches!(source.text(node), "async" | "await") => {
            return Err(source.error(node, "async and await are keywords"));
        }
        "parameters" | "lambda_parameters" => {
            positional_parameters(node, source)?;
        }
        "argument_list" => check_arguments(node, source)?,
        "module" => check_statements(&children(node), Indent { tabs8: 0, tabs1: 0 }, source)?,
        "block" => check_block(node, source)?,
        "elif_clause"
        | "else_clause"
        | "except_clause"
        | "except_group_clause"
        | "finally_clause" => {
            if let Some(statement) = node.parent() {
                let expected = source.leading(statement.start_byte()).0;
                source.aligned(node, expected, node.prev_named_sibling())?;
            }
            let mut cursor = node.walk();
            if node.children_by_field_name("value", &mut cursor).count() > 1 {
                return Err(source.error(node, "multiple exception types must be parenthesized"));
            }
        }
        "decorated_definition" => {
            let expected = source.leading(node.start_byte()).0;
            check_statements(&children(node), expected, source)?;
        }
        "integer" => check_integer(node, source)?,
        "named_expression"
            if node.parent().is_some_and(|parent| {
                matches!(
                    parent.kind(),
                    "expression_statement" | "assignment" | "augmented_assignment"
                )
            }) =>
        {
            return Err(source.error(node, "invalid syntax: `:=` needs parentheses here"));
        }
        "for_in_clause" => {
            let mut cursor = node.walk();
            if node.children_by_field_name("right", &mut cursor).count() > 1 {
                return Err(source.error(node, "a comprehension's iterable needs parentheses"));
            }
        }
        "type_conversion" if !matches!(source.text(node), "!r" | "!s" | "!a") => {
            return Err(source.error(
                node,
                "f-string: invalid conversion character: expected 's', 'r', or 'a'",
            ));
        }
        "list_splat" => check_splat(
            node,
            &[
                "argument_list",
                "list",
                "set",
                "tuple",
                "expression_list",
                "subscript",
                "parenthesized_expression",
            ],
            source,
        )?,
        "dictionary_splat" => check_splat(node, &["argument_list", "dictionary"], source)?,
        "<>" => return Err(source.error(node, "invalid syntax: `<>` is Python 2 only")),
        "raise_statement" if children(node).iter().any(|c| c.kind() == "expression_list") => {
            return Err(source.error(node, "invalid syntax: `raise E, v` is Python 2 only"));
        }
        "concatenated_string" => {
            let parts = children(node);
            let bytes = parts
                .iter()
                .filter(|part| string_prefix(**part, source).contains('b'))
                .count();
            if bytes != 0 && bytes != parts.len() {
                return Err(source.error(node, "cannot mix bytes and nonbytes literals"));
            }
        }
        "string" => check_string(node, source)?,
        "try_statement"
            if !children(node).iter().any(|clause| {
                matches!(
                    clause.kind(),
                    "except_clause" | "except_group_clause" | "finally_clause"
                )
            }) =>
        {
            return Err(source.error(node, "expected 'except' or 'finally' block"));
        }
        "delete_statement" => check_deletable(node, source)?,
        _ => {}
    }
    Ok(())
}

/// Parses `code`; when `function` is given, it must be defined at the top level with
/// `parameters` positional parameters. The error reads like Python's own.
pub fn check(code: &str, function: Option<(&str, usize)>) -> Result<Report, String> {
    let mut parser = Parser::new();
    parser
        .set_language(&tree_sitter_python::LANGUAGE.into())
        .map_err(|e| format!("the Python grammar does not load: {e}"))?;
    let gave_up = || "SyntaxError: the parser gave up".to_owned();
    let mut tree = parser.parse(code, None).ok_or_else(gave_up)?;
    let source = Source { code };
    let lines = Lines::of(code);
    if tree.root_node().has_error() {
        let joined = lines
            .joined
            .as_ref()
            .and_then(|joined| parser.parse(joined, None))
            .filter(|joined| !joined.root_node().has_error());
        match joined {
            Some(joined) => tree = joined,
            // Recovery leaves odd but valid-looking nodes around the bad spot, so the spot
            // itself is the message, not what the scan below would make of its neighbours.
            None => return Err(first_recovery(tree.root_node(), source).unwrap_or_else(gave_up)),
        }
    }
    let root = tree.root_node();
    if let Some(string) = lines.unterminated {
        return Err(source.error_at(string, "unterminated string literal"));
    }
    for at in lines.breaks {
        check_line_break(root, at, source)?;
    }
    let mut found = BTreeSet::new();
    walk(root, |node| scan(node, source, &mut found))?;

    let mut report = Report::default();
    let mut defined = None;
    for item in children(root) {
        let def = match item.kind() {
            "decorated_definition" => item.child_by_field_name("definition"),
            _ => Some(item),
        };
        // `async def` does not count, as before: calling it gives a coroutine, not a result.
        let Some(def) = def.filter(|def| {
            def.kind() == "function_definition"
                && def.child(0).is_some_and(|first| first.kind() == "def")
        }) else {
            continue;
        };
        report.functions += 1;
        if has_docstring(def, source) {
            report.documented += 1;
        }
        let name = def
            .child_by_field_name("name")
            .map(|name| source.text(name));
        if let Some((promised, _)) = function
            && name == Some(promised)
            && let Some(parameters) = def.child_by_field_name("parameters")
        {
            defined = Some(positional_parameters(parameters, source)?);
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
    report.dangerous_calls = found;
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

    fn syntax_error(code: &str) -> String {
        match check(code, None) {
            Ok(report) => panic!("accepted {code:?}: {report:?}"),
            Err(err) => {
                assert!(err.starts_with("SyntaxError: "), "{code:?}: {err}");
                err
            }
        }
    }

    #[test]
    fn a_syntax_error_deep_inside_nested_functions_is_found_with_its_line() {
        let code = "def outer():\n    def inner():\n        def deepest(x):\n            return (x +\n        return deepest\n    return inner\n";
        let err = syntax_error(code);
        assert!(err.contains("line 4"), "{err}");
    }

    #[test]
    fn error_recovery_nodes_are_syntax_errors() {
        // ERROR: tokens the grammar cannot place.
        let err = syntax_error("x = 1 +* 2\n");
        assert!(
            err.contains("invalid syntax") && err.contains("line 1"),
            "{err}"
        );
        // MISSING: a token tree-sitter made up to go on (`f"{}"` has no expression).
        let err = syntax_error("y = 1\nx = f\"{}\"\n");
        assert!(err.contains("expected") && err.contains("line 2"), "{err}");
        for code in [
            "x = (1, 2\n",
            "if x\n    pass\n",
            "x = \"open\n",
            "def f(:\n    pass\n",
        ] {
            syntax_error(code);
        }
    }

    #[test]
    fn what_tree_sitter_accepts_but_python_3_does_not_is_a_syntax_error() {
        for code in [
            "print \"hello\"\n",
            "exec \"code\"\n",
            "x = `y`\n",
            "if x <> y:\n    pass\n",
            "raise E, \"message\"\n",
            "try:\n    pass\nexcept E, e:\n    pass\n",
            "x = 0777\n",
            "x = 1L\n",
            "def f((a, b)):\n    pass\n",
            "async = 1\n",
            "x := 1\n",
            "x = 10 ***p\n",
            "x = (** a, b)\n",
            "x = \"a\" b\"b\"\n",
            "x = bb\"a\"\n",
            "x = \"\\x4\"\n",
            "x = f\"{a!z}\"\n",
            "x = f'{a}\n{b}'\n",
            "del f()\n",
            "try:\n    x = 1\ny = 2\n",
            "f(x for x in y, 1)\n",
        ] {
            syntax_error(code);
        }
        // Valid Python 3 after all: a shift of `print`, and calls.
        assert!(check("print >> sys.stderr, \"x\"\n", None).is_ok());
        assert!(check("print(\"x\")\nexec(\"1\")\n", None).is_ok());
    }

    #[test]
    fn parameters_and_arguments_keep_python_s_order() {
        for code in [
            "def f(a, a):\n    pass\n",
            "def f(a, b=1, c):\n    pass\n",
            "lambda a, b=1, c: 1\n",
            "def f(*):\n    pass\n",
            "def f(*a, *b):\n    pass\n",
            "def f(**a, b):\n    pass\n",
            "def f(/, a):\n    pass\n",
            "f(b=20, c)\n",
            "f(**b, *c)\n",
            "f(**b, c)\n",
            "f(a=1, a=2)\n",
            "class A(B, metaclass=M, C):\n    pass\n",
        ] {
            syntax_error(code);
        }
        assert!(check("f(a, *b, c=1, *d, **e)\nx = [*a, *b.c()]\n", None).is_ok());
    }

    #[test]
    fn indentation_is_checked_as_python_does() {
        for code in [
            "    x = 1\n",
            "x = 1\n    y = 2\n",
            "def f():\npass\n",
            "def f():\n    # only a comment\n",
            "def f():\n    if x:\n        a\n      b\n",
            "if x:\n    pass\n  else:\n    pass\n",
            "def f():\n\tx = 1\n        y = 2\n",
            "def f():\n    if x:\n\tpass\n",
        ] {
            syntax_error(code);
        }
        // Inside brackets indentation means nothing, even below the block's.
        let code = "def f(a, b):\n    return (a +\n b)\n";
        assert!(check(code, Some(("f", 2))).is_ok());
        // Comments, continuations and strings may sit anywhere.
        let code =
            "def f():\n    x = 1 + \\\n2\n# c\n    s = \"\"\"\nnot indented\"\"\"\n    return x\n";
        assert!(check(code, None).is_ok());
    }

    #[test]
    fn a_statement_ends_with_its_line() {
        // A misspelt `else` would otherwise pass as an annotated assignment.
        let err = syntax_error("if x:\n    a = 1\nelsse:\n    a = 2\n");
        assert!(err.contains("line 3"), "{err}");
        syntax_error("x =\n    1\n");
        let code = "x = [\n    1,\n]\nif x:\n\n    pass\nelse:\n    pass\n";
        assert!(check(code, None).is_ok());
    }

    #[test]
    fn positions_count_lines_and_characters_from_one() {
        let err = syntax_error("s = \"é\"; f(a=1, a=2)\n");
        assert!(err.ends_with("at line 1, column 17"), "{err}");
        let err = syntax_error("s = \"é\"\nt = 1\n  u = 2\n");
        assert!(err.ends_with("at line 3, column 3"), "{err}");
    }

    #[test]
    fn functions_count_as_before() {
        // Decorated functions count; `async def`, methods and nested functions do not.
        let code = "@cache\ndef f(x):\n    # why\n    \"\"\"Doc.\"\"\"\nasync def g():\n    \"\"\"Doc.\"\"\"\nclass A:\n    def m(self):\n        \"\"\"Doc.\"\"\"\n";
        let report = check(code, Some(("f", 1))).unwrap();
        assert_eq!((report.functions, report.documented), (1, 1));
        assert!(check(code, Some(("g", 0))).is_err());
        // Only plain str literals are docstrings.
        for (body, documented) in [
            ("'''doc'''", 1),
            ("r'doc'", 1),
            ("(\"doc\")", 1),
            ("\"a\" \"b\"", 1),
            ("f\"doc\"", 0),
            ("b\"doc\"", 0),
            ("\"doc\", 1", 0),
            ("x = 1", 0),
        ] {
            let code = format!("def f():\n    {body}\n");
            assert_eq!(check(&code, None).unwrap().documented, documented, "{code}");
        }
        // Keyword-only parameters, `*args` and `**kwargs` are not positional.
        let code = "def f(a, b=1, /, c=2, *args, d, e=3, **kw):\n    pass\n";
        assert!(check(code, Some(("f", 3))).is_ok());
        let code = "def f(a: int, *, b: str = \"\") -> None:\n    pass\n";
        assert!(check(code, Some(("f", 1))).is_ok());
        // The last definition is the one Python keeps.
        let code = "def f(x):\n    pass\ndef f(x, y):\n    pass\n";
        assert!(check(code, Some(("f", 2))).is_ok());
    }

    #[test]
    fn risky_calls_are_found_in_every_corner() {
        let code = "def f(x=eval('1')) -> compile('', '', 'exec'):\n    with ctypes.CDLL(x) as lib:\n        pass\n    match x:\n        case 1:\n            os.remove(x)\n    y = f\"{__import__('os')}\"\n    return (os).popen(x), g().os.unlink(x), lambda: pickle.loads(x)\nimport os . path, socket as s\nfrom .subprocess import run\nfrom urllib.request import urlopen\n";
        let report = check(code, None).unwrap();
        let found: Vec<&str> = report.dangerous_calls.iter().map(String::as_str).collect();
        assert_eq!(
            found,
            vec![
                "__import__",
                "compile",
                "ctypes.CDLL",
                "eval",
                "os.popen",
                "os.remove",
                "os.unlink",
                "pickle.loads",
                "socket",
                "subprocess",
                "urllib.request",
            ]
        );
        // Names that merely start alike are not flagged, nor are names not called.
        let report = check("subprocess_helper.run()\nx = os.system\n", None).unwrap();
        assert!(report.dangerous_calls.is_empty(), "{report:?}");
    }
}
