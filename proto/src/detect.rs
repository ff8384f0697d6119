//! The language a request names when its `language` field does not: the first of the
//! sandbox's languages the instruction or the constraints name ("a bash script", "in Go", a
//! `.rs` file, "Node.js"), with the words that named it.

use crate::Language;

/// Words that name a language, matched case-insensitively at word boundaries (a `.ext` as a
/// file name's end). Several words of one language each count; the first in the text wins.
const NAMES: &[(Language, &[&str])] = &[
    (
        Language::Javascript,
        &["javascript", "node.js", "nodejs", ".js", ".mjs"],
    ),
    (Language::Typescript, &["typescript", ".ts"]),
    (
        Language::PythonSci,
        &["numpy", "pandas", "scipy", "sympy", "networkx"],
    ),
    (Language::Python, &["python", "python3", ".py"]),
    (
        Language::Bash,
        &["bash", "shell script", "sh script", ".sh"],
    ),
    (
        Language::Go,
        &[
            "golang",
            "in go",
            "go function",
            "go program",
            "go code",
            "go package",
            "go module",
            ".go",
        ],
    ),
    (Language::Rust, &["rust", ".rs"]),
    (Language::Java, &["java", ".java"]),
    (Language::Cpp, &["c++", "cpp", ".cpp", ".cc", ".hpp"]),
    (
        Language::C,
        &[
            "in c",
            "c function",
            "c program",
            "c code",
            "ansi c",
            "c99",
            "c11",
            ".c",
            ".h",
        ],
    ),
];

/// The language `texts` name first, and the words that named it; `None` when they name none.
pub fn named_language(texts: &[&str]) -> Option<(Language, String)> {
    let mut best: Option<(usize, usize, Language, &str)> = None;
    for (t, text) in texts.iter().enumerate() {
        let lower = text.to_lowercase();
        for (language, words) in NAMES {
            for word in *words {
                if let Some(at) = find_word(&lower, word) {
                    let better = match best {
                        None => true,
                        Some((bt, bat, _, bword)) => {
                            (t, at) < (bt, bat)
                                || ((t, at) == (bt, bat) && word.len() > bword.len())
                        }
                    };
                    if better {
                        best = Some((t, at, *language, word));
                    }
                }
            }
        }
    }
    best.map(|(_, _, language, word)| (language, word.trim().to_owned()))
}

/// Where `word` first stands alone in `text` (not inside a longer word: "java" is not in
/// "javascript", "go" is not in "good").
fn find_word(text: &str, word: &str) -> Option<usize> {
    let boundary =
        |c: Option<char>| c.is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == '+'));
    let mut from = 0;
    while let Some(found) = text[from..].find(word) {
        let at = from + found;
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        // A file extension follows a name (`main.rs`); a word follows a boundary.
        let start_ok = if word.starts_with('.') {
            before.is_some_and(|c| c.is_alphanumeric() || c == '_')
        } else {
            boundary(before)
        };
        if start_ok && boundary(after) {
            return Some(at);
        }
        from = at + word.len().max(1);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_language_a_request_names_is_found_with_its_words() {
        for (text, language, words) in [
            (
                "Create a bash script that monitors system resources",
                Language::Bash,
                "bash",
            ),
            (
                "Write a function in Go that reverses a slice",
                Language::Go,
                "in go",
            ),
            ("Fix the parser in src/main.rs", Language::Rust, ".rs"),
            (
                "A Node.js helper that slugifies titles",
                Language::Javascript,
                "node.js",
            ),
            (
                "a TypeScript type guard for User",
                Language::Typescript,
                "typescript",
            ),
            ("Sum a column with pandas", Language::PythonSci, "pandas"),
            ("Write it in Java, not JavaScript", Language::Java, "java"),
            ("a C++ class for a ring buffer", Language::Cpp, "c++"),
            (
                "an ANSI C function that copies strings",
                Language::C,
                "ansi c",
            ),
            ("Use python3 to parse the log", Language::Python, "python3"),
        ] {
            assert_eq!(
                named_language(&[text]),
                Some((language, words.to_owned())),
                "{text}"
            );
        }
    }

    #[test]
    fn ordinary_words_name_no_language() {
        for text in [
            "Find all primes up to n, and sum them.",
            "Go through the list and return the good ones",
            "Rustle up a quick sorting routine: choose a sensible algorithm",
            "Add a node to the linked list",
            "Compute the scores; see section C for details",
        ] {
            assert_eq!(named_language(&[text]), None, "{text}");
        }
        // The instruction first, then the constraints.
        assert_eq!(
            named_language(&["sort the numbers", "in Rust, no unsafe"]),
            Some((Language::Rust, "rust".into()))
        );
    }
}
