//! Parameter types as the plan writes them in Rust, C and C++ (`Vec<i64>`, `&[String]`,
//! `const std::vector<int>&`, `const char *`, `(i32, String)`, `[u8; 4]`): parsed into a tree,
//! so that a case's JSON input can be written as a literal of that type (there is no JSON
//! decoder in those images: the literal is the test's input).

/// A parsed type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ty {
    /// The name (`Vec`, `std::vector`, `i64`, `long long`), or `()` for a tuple, `[]` for a
    /// slice, `[;]` for an array (`len` set), `*` for a pointer.
    pub(crate) name: String,
    pub(crate) args: Vec<Ty>,
    /// An array's length.
    pub(crate) len: Option<usize>,
    /// Behind a reference (`&`, `&mut`, C++'s trailing `&`): `Some(mutable)`.
    pub(crate) reference: Option<bool>,
}

impl Ty {
    fn named(name: &str) -> Ty {
        Ty {
            name: name.to_owned(),
            args: Vec::new(),
            len: None,
            reference: None,
        }
    }

    /// The name's last path segment (`std::vector` → `vector`).
    pub(crate) fn base(&self) -> &str {
        self.name.rsplit("::").next().unwrap_or(&self.name)
    }
}

/// The values an integer type named `name` holds (Rust's, C's and C++'s names on a 64-bit
/// Linux), or `None` for a name that is no integer type. A literal out of its type's range does
/// not compile (Rust) or narrows (C++ braces): the case is refused before it is written.
pub(crate) fn integer_range(name: &str) -> Option<(i128, i128)> {
    let name = name.rsplit("::").next().unwrap_or(name);
    let bits = |b: u32, signed: bool| {
        if signed {
            (-(1i128 << (b - 1)), (1i128 << (b - 1)) - 1)
        } else {
            (0, (1i128 << b) - 1)
        }
    };
    Some(match name {
        "i8" | "int8_t" | "signed char" => bits(8, true),
        "u8" | "uint8_t" | "unsigned char" => bits(8, false),
        "i16" | "int16_t" | "short" | "short int" | "signed short" => bits(16, true),
        "u16" | "uint16_t" | "unsigned short" => bits(16, false),
        "i32" | "int32_t" | "int" | "signed" => bits(32, true),
        "u32" | "uint32_t" | "unsigned" | "unsigned int" => bits(32, false),
        "i64" | "int64_t" | "isize" | "long" | "long int" | "long long" | "long long int"
        | "signed long" | "ssize_t" | "ptrdiff_t" | "intptr_t" => bits(64, true),
        "u64" | "uint64_t" | "usize" | "unsigned long" | "unsigned long long" | "size_t"
        | "uintptr_t" => bits(64, false),
        "i128" => (i128::MIN, i128::MAX),
        "u128" => (0, i128::MAX),
        _ => return None,
    })
}

/// `value` as an integer literal of the integer type `name`, if it is one and fits.
pub(crate) fn integer_literal(
    name: &str,
    value: &serde_json::Value,
) -> Option<Result<i128, String>> {
    let (low, high) = integer_range(name)?;
    let n = value
        .as_i64()
        .map(i128::from)
        .or_else(|| value.as_u64().map(i128::from));
    Some(match n {
        Some(n) if (low..=high).contains(&n) => Ok(n),
        Some(n) => Err(format!("{n} is out of the range of `{name}`")),
        None => Err(format!("{value} cannot be written as a `{name}`")),
    })
}

/// `text` parsed, or why it cannot be.
pub(crate) fn parse(text: &str) -> Result<Ty, String> {
    let mut parser = Parser {
        text: text.as_bytes(),
        at: 0,
        depth: 0,
    };
    let ty = parser.ty()?;
    parser.blank();
    if parser.at != parser.text.len() {
        return Err(format!("cannot read the type `{text}`"));
    }
    Ok(ty)
}

struct Parser<'a> {
    text: &'a [u8],
    at: usize,
    /// How deep in nested types the parser is: bounded, so that a type string of thousands of
    /// `Vec<` cannot overflow the worker's stack.
    depth: usize,
}

/// The deepest nesting a type may have.
const MAX_DEPTH: usize = 32;

impl Parser<'_> {
    fn blank(&mut self) {
        while self.text.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.blank();
        self.text.get(self.at).copied()
    }

    fn eat(&mut self, token: &str) -> bool {
        self.blank();
        let end = self.at + token.len();
        let word = token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if self.text.get(self.at..end) == Some(token.as_bytes())
            && !(word
                && self
                    .text
                    .get(end)
                    .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_'))
        {
            self.at = end;
            return true;
        }
        false
    }

    fn ty(&mut self) -> Result<Ty, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!("a type nested more than {MAX_DEPTH} deep"));
        }
        let ty = self.ty_here();
        self.depth -= 1;
        ty
    }

    fn ty_here(&mut self) -> Result<Ty, String> {
        // Rust's references (a lifetime skipped), C and C++'s qualifiers.
        let mut reference = None;
        if self.eat("&") {
            if self.eat("'") {
                self.word();
            }
            reference = Some(self.eat("mut"));
        }
        let mut tagged = false;
        loop {
            if self.eat("struct") {
                tagged = true;
            } else if !(self.eat("const") || self.eat("volatile")) {
                break;
            }
        }
        let mut ty = match self.peek() {
            Some(b'(') => {
                self.at += 1;
                let mut args = Vec::new();
                while self.peek() != Some(b')') {
                    args.push(self.ty()?);
                    if !self.eat(",") {
                        break;
                    }
                }
                if !self.eat(")") {
                    return Err("a tuple without its `)`".into());
                }
                Ty {
                    args,
                    ..Ty::named("()")
                }
            }
            Some(b'[') => {
                self.at += 1;
                let element = self.ty()?;
                let len = if self.eat(";") {
                    self.blank();
                    let start = self.at;
                    while self.text.get(self.at).is_some_and(u8::is_ascii_digit) {
                        self.at += 1;
                    }
                    let digits = std::str::from_utf8(&self.text[start..self.at]).unwrap_or("");
                    Some(digits.parse().map_err(|_| "an array without its length")?)
                } else {
                    None
                };
                if !self.eat("]") {
                    return Err("a slice without its `]`".into());
                }
                Ty {
                    args: vec![element],
                    len,
                    ..Ty::named(if len.is_some() { "[;]" } else { "[]" })
                }
            }
            _ => {
                // A name: words (`long long`, `unsigned int`) and paths (`std::vector`).
                let mut name = self.word().ok_or("a type without a name")?;
                // C's `struct node`: the tag is part of the type's name there.
                if tagged {
                    name = format!("struct {name}");
                }
                loop {
                    let save = self.at;
                    if self.eat("::") {
                        name.push_str("::");
                        name.push_str(&self.word().ok_or("a path without its name")?);
                        continue;
                    }
                    let words = matches!(
                        name.as_str(),
                        "long"
                            | "unsigned"
                            | "signed"
                            | "short"
                            | "unsigned long"
                            | "signed long"
                            | "long long"
                            | "unsigned long long"
                            | "unsigned short"
                            | "signed short"
                    );
                    match self.word() {
                        Some(w)
                            if words && matches!(w.as_str(), "long" | "int" | "short" | "char") =>
                        {
                            name = format!("{name} {w}");
                        }
                        _ => {
                            self.at = save;
                            break;
                        }
                    }
                }
                let mut args = Vec::new();
                if self.eat("<") {
                    while self.peek() != Some(b'>') {
                        args.push(self.ty()?);
                        if !self.eat(",") {
                            break;
                        }
                    }
                    if !self.eat(">") {
                        return Err(format!("`{name}<` without its `>`"));
                    }
                }
                Ty {
                    args,
                    ..Ty::named(&name)
                }
            }
        };
        while self.eat("const") {}
        // C's `int[]` (a parameter: a pointer) and `int[3]`.
        while self.eat("[") {
            while self.text.get(self.at).is_some_and(u8::is_ascii_digit) {
                self.at += 1;
            }
            if !self.eat("]") {
                return Err("an array without its `]`".into());
            }
            ty = Ty {
                args: vec![ty],
                ..Ty::named("*")
            };
        }
        while self.eat("*") {
            while self.eat("const") {}
            ty = Ty {
                args: vec![ty],
                ..Ty::named("*")
            };
        }
        if self.eat("&") {
            reference = Some(false);
        }
        ty.reference = reference;
        Ok(ty)
    }

    fn word(&mut self) -> Option<String> {
        self.blank();
        let start = self.at;
        while self
            .text
            .get(self.at)
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
        {
            self.at += 1;
        }
        (self.at > start).then(|| String::from_utf8_lossy(&self.text[start..self.at]).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(ty: &Ty) -> String {
        let mut out = ty.name.clone();
        if let Some(len) = ty.len {
            out.push_str(&format!("{len}"));
        }
        if !ty.args.is_empty() {
            let args: Vec<String> = ty.args.iter().map(shape).collect();
            out.push_str(&format!("<{}>", args.join(",")));
        }
        match ty.reference {
            Some(true) => format!("&mut {out}"),
            Some(false) => format!("&{out}"),
            None => out,
        }
    }

    #[test]
    fn rust_c_and_cpp_types_parse_into_trees() {
        let cases = [
            ("Vec<i64>", "Vec<i64>"),
            ("&[String]", "&[]<String>"),
            ("&'a str", "&str"),
            ("&mut Vec<Vec<u8>>", "&mut Vec<Vec<u8>>"),
            ("HashMap<String, Vec<i32>>", "HashMap<String,Vec<i32>>"),
            ("(i32, String)", "()<i32,String>"),
            ("[u8; 4]", "[;]4<u8>"),
            ("Option<Box<i32>>", "Option<Box<i32>>"),
            ("const std::vector<int>&", "&std::vector<int>"),
            (
                "std::map<std::string, long long>",
                "std::map<std::string,long long>",
            ),
            ("const char *", "*<char>"),
            ("unsigned long long", "unsigned long long"),
            ("long", "long"),
            ("std::pair<int, double>", "std::pair<int,double>"),
            (
                "std::vector<std::vector<int>>",
                "std::vector<std::vector<int>>",
            ),
            ("()", "()"),
            ("int[]", "*<int>"),
            ("double *", "*<double>"),
            ("std::array<int, 3>", "std::array<int,3>"),
        ];
        for (text, expected) in cases {
            assert_eq!(shape(&parse(text).unwrap()), expected, "{text}");
        }
        assert!(parse("Vec<i64").is_err());
        assert_eq!(shape(&parse("struct node *").unwrap()), "*<struct node>");
        // Nesting is bounded: an error, not a stack overflow.
        let deep = format!("{}i32{}", "Vec<".repeat(5000), ">".repeat(5000));
        assert!(parse(&deep).unwrap_err().contains("nested"));
        assert!(parse("i64 i64").is_err());
        assert_eq!(parse("std::vector<int>").unwrap().base(), "vector");
    }
}
