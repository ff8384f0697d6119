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

/// `text` parsed, or why it cannot be.
pub(crate) fn parse(text: &str) -> Result<Ty, String> {
    let mut parser = Parser {
        text: text.as_bytes(),
        at: 0,
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
}

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
        // Rust's references (a lifetime skipped), C and C++'s qualifiers.
        let mut reference = None;
        if self.eat("&") {
            if self.eat("'") {
                self.word();
            }
            reference = Some(self.eat("mut"));
        }
        while self.eat("const") || self.eat("struct") || self.eat("volatile") {}
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
        assert!(parse("i64 i64").is_err());
        assert_eq!(parse("std::vector<int>").unwrap().base(), "vector");
    }
}
