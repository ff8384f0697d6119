// The test of generated Rust, appended to the program (one crate: the image's documented test
// form; not a module of the worker), rendered by worker/src/pipeline/forms/rust.rs, which adds
// the report's path, the nonce and `codegen_cases()`: one `codegen_run` per case, whose closure
// binds the case's inputs as literals of the parameters' types and calls the function.
//
// Each case runs in a thread of its own (with a deep stack) under its timeout; what it
// returned (rendered as JSON by `CodegenJson`: sets as sorted arrays, map keys as strings, NaN
// as a string), the `Err` it returned (names `Err` and the error's type), its panic (`panic`),
// or the timeout is written as one JSON line to the report file, which the worker reads back
// and judges (forms/judge.rs). A case that never ends leaves its thread running; the process
// exits after the last case. Every name here starts with `codegen_` or `Codegen`: the program
// shares the crate.

enum CodegenOutcome {
    Returned(String),
    Raised(Vec<String>, String),
}

trait CodegenJson {
    fn codegen_json(&self, out: &mut String);
}

fn codegen_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

macro_rules! codegen_display {
    ($($t:ty),*) => {$(
        impl CodegenJson for $t {
            fn codegen_json(&self, out: &mut String) {
                out.push_str(&self.to_string());
            }
        }
    )*};
}
codegen_display!(i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize, bool);

macro_rules! codegen_float {
    ($($t:ty),*) => {$(
        impl CodegenJson for $t {
            fn codegen_json(&self, out: &mut String) {
                if self.is_finite() {
                    out.push_str(&format!("{:?}", self));
                } else {
                    codegen_string(&self.to_string(), out);
                }
            }
        }
    )*};
}
codegen_float!(f32, f64);

impl CodegenJson for char {
    fn codegen_json(&self, out: &mut String) {
        codegen_string(&self.to_string(), out);
    }
}

impl CodegenJson for str {
    fn codegen_json(&self, out: &mut String) {
        codegen_string(self, out);
    }
}

impl CodegenJson for String {
    fn codegen_json(&self, out: &mut String) {
        codegen_string(self, out);
    }
}

impl CodegenJson for () {
    fn codegen_json(&self, out: &mut String) {
        out.push_str("null");
    }
}

impl<T: CodegenJson + ?Sized> CodegenJson for &T {
    fn codegen_json(&self, out: &mut String) {
        (**self).codegen_json(out);
    }
}

impl<T: CodegenJson + ?Sized> CodegenJson for Box<T> {
    fn codegen_json(&self, out: &mut String) {
        (**self).codegen_json(out);
    }
}

impl<T: CodegenJson> CodegenJson for Option<T> {
    fn codegen_json(&self, out: &mut String) {
        match self {
            Some(v) => v.codegen_json(out),
            None => out.push_str("null"),
        }
    }
}

fn codegen_items<'a, T: CodegenJson + 'a>(items: impl Iterator<Item = &'a T>, out: &mut String) {
    out.push('[');
    for (i, item) in items.enumerate() {
        if i > 0 {
            out.push(',');
        }
        item.codegen_json(out);
    }
    out.push(']');
}

/// A set's items in order: numbers by value, the rest by their JSON.
fn codegen_sorted<'a, T: CodegenJson + 'a>(items: impl Iterator<Item = &'a T>, out: &mut String) {
    let mut rendered: Vec<String> = items
        .map(|item| {
            let mut s = String::new();
            item.codegen_json(&mut s);
            s
        })
        .collect();
    rendered.sort_by(|a, b| match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => x.partial_cmp(&y).unwrap_or(std::cmp::Ordering::Equal),
        _ => a.cmp(b),
    });
    out.push('[');
    out.push_str(&rendered.join(","));
    out.push(']');
}

impl<T: CodegenJson> CodegenJson for [T] {
    fn codegen_json(&self, out: &mut String) {
        codegen_items(self.iter(), out);
    }
}

impl<T: CodegenJson, const N: usize> CodegenJson for [T; N] {
    fn codegen_json(&self, out: &mut String) {
        codegen_items(self.iter(), out);
    }
}

impl<T: CodegenJson> CodegenJson for Vec<T> {
    fn codegen_json(&self, out: &mut String) {
        codegen_items(self.iter(), out);
    }
}

impl<T: CodegenJson> CodegenJson for std::collections::VecDeque<T> {
    fn codegen_json(&self, out: &mut String) {
        codegen_items(self.iter(), out);
    }
}

impl<T: CodegenJson, S> CodegenJson for std::collections::HashSet<T, S> {
    fn codegen_json(&self, out: &mut String) {
        codegen_sorted(self.iter(), out);
    }
}

impl<T: CodegenJson> CodegenJson for std::collections::BTreeSet<T> {
    fn codegen_json(&self, out: &mut String) {
        codegen_sorted(self.iter(), out);
    }
}

/// A map's key as a JSON object's (a string).
trait CodegenKey {
    fn codegen_key(&self) -> String;
}

macro_rules! codegen_key {
    ($($t:ty),*) => {$(
        impl CodegenKey for $t {
            fn codegen_key(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
codegen_key!(i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize, bool, char, String, str);

impl<T: CodegenKey + ?Sized> CodegenKey for &T {
    fn codegen_key(&self) -> String {
        (**self).codegen_key()
    }
}

fn codegen_pairs<'a, K: CodegenKey + 'a, V: CodegenJson + 'a>(
    pairs: impl Iterator<Item = (&'a K, &'a V)>,
    out: &mut String,
) {
    out.push('{');
    for (i, (k, v)) in pairs.enumerate() {
        if i > 0 {
            out.push(',');
        }
        codegen_string(&k.codegen_key(), out);
        out.push(':');
        v.codegen_json(out);
    }
    out.push('}');
}

impl<K: CodegenKey, V: CodegenJson, S> CodegenJson for std::collections::HashMap<K, V, S> {
    fn codegen_json(&self, out: &mut String) {
        codegen_pairs(self.iter(), out);
    }
}

impl<K: CodegenKey, V: CodegenJson> CodegenJson for std::collections::BTreeMap<K, V> {
    fn codegen_json(&self, out: &mut String) {
        codegen_pairs(self.iter(), out);
    }
}

macro_rules! codegen_tuple {
    ($($name:ident $i:tt),+) => {
        impl<$($name: CodegenJson),+> CodegenJson for ($($name,)+) {
            fn codegen_json(&self, out: &mut String) {
                out.push('[');
                $(
                    if $i > 0 {
                        out.push(',');
                    }
                    self.$i.codegen_json(out);
                )+
                out.push(']');
            }
        }
    };
}
codegen_tuple!(A 0);
codegen_tuple!(A 0, B 1);
codegen_tuple!(A 0, B 1, C 2);
codegen_tuple!(A 0, B 1, C 2, D 3);
codegen_tuple!(A 0, B 1, C 2, D 3, E 4);

/// A returned value or error, rendered by the best means its type has, chosen at compile time
/// by method resolution on `&&&CodegenWrap` (autoref specialization): its JSON
/// (`CodegenJson`), else its `Debug` text as a string, else its type's name. A struct of the
/// program's own has no JSON here, but it compiles, and its text is in the verdict.
struct CodegenWrap<'a, T: ?Sized>(&'a T);

trait CodegenViaJson {
    fn codegen_render(&self, out: &mut String);
}

impl<T: CodegenJson + ?Sized> CodegenViaJson for &&CodegenWrap<'_, T> {
    fn codegen_render(&self, out: &mut String) {
        self.0.codegen_json(out);
    }
}

trait CodegenViaDebug {
    fn codegen_render(&self, out: &mut String);
    fn codegen_message(&self) -> String;
}

impl<T: std::fmt::Debug + ?Sized> CodegenViaDebug for &CodegenWrap<'_, T> {
    fn codegen_render(&self, out: &mut String) {
        codegen_string(&format!("{:?}", self.0), out);
    }

    fn codegen_message(&self) -> String {
        format!("{:?}", self.0)
    }
}

trait CodegenViaName {
    fn codegen_render(&self, out: &mut String);
    fn codegen_message(&self) -> String;
}

impl<T: ?Sized> CodegenViaName for CodegenWrap<'_, T> {
    fn codegen_render(&self, out: &mut String) {
        codegen_string(&format!("<{}>", std::any::type_name::<T>()), out);
    }

    fn codegen_message(&self) -> String {
        String::new()
    }
}

fn codegen_returned(out: String) -> CodegenOutcome {
    CodegenOutcome::Returned(out)
}

/// An `Err(e)`: named `Err` and by its type, with its message.
fn codegen_err<E: ?Sized>(_e: &E, message: String) -> CodegenOutcome {
    let full = std::any::type_name::<E>();
    let short = full.rsplit("::").next().unwrap_or(full).to_owned();
    CodegenOutcome::Raised(vec!["Err".to_owned(), short, full.to_owned()], message)
}

fn codegen_run<F>(function: usize, case: usize, timeout_ms: u64, call: F)
where
    F: FnOnce() -> CodegenOutcome + Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    let started = std::time::Instant::now();
    let spawned = std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(move || {
            let _ = tx.send(call());
        });
    let mut line = format!("{{\"function\": {function}, \"case\": {case}");
    match spawned {
        Err(e) => {
            line.push_str(", \"raised\": [\"CodegenThreadError\"], \"message\": ");
            codegen_string(&e.to_string(), &mut line);
        }
        Ok(handle) => match rx.recv_timeout(std::time::Duration::from_millis(timeout_ms)) {
            Ok(CodegenOutcome::Returned(json)) => {
                line.push_str(", \"returned\": ");
                line.push_str(&json);
            }
            Ok(CodegenOutcome::Raised(names, message)) => {
                line.push_str(", \"raised\": ");
                codegen_items(names.iter(), &mut line);
                line.push_str(", \"message\": ");
                codegen_string(&message, &mut line);
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                line.push_str(", \"timeout\": true");
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                // The thread panicked before it sent anything.
                let payload = handle.join().err();
                let message = payload
                    .as_ref()
                    .and_then(|p| {
                        p.downcast_ref::<&str>()
                            .map(|s| (*s).to_owned())
                            .or_else(|| p.downcast_ref::<String>().cloned())
                    })
                    .unwrap_or_default();
                line.push_str(", \"raised\": [\"panic\"], \"message\": ");
                codegen_string(&message, &mut line);
            }
        },
    }
    line.push_str(&format!(
        ", \"ms\": {:.3}}}\n",
        started.elapsed().as_secs_f64() * 1000.0
    ));
    codegen_write(&line);
}

fn codegen_write(line: &str) {
    use std::io::Write as _;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(CODEGEN_REPORT);
    if let Ok(mut file) = file {
        let _ = file.write_all(line.as_bytes());
    }
}

fn main() {
    // A panic is a case's outcome, not noise on stderr.
    std::panic::set_hook(Box::new(|_| {}));
    let _ = std::fs::remove_file(CODEGEN_REPORT);
    let mut first = String::from("{\"nonce\": ");
    codegen_string(CODEGEN_NONCE, &mut first);
    first.push_str("}\n");
    codegen_write(&first);
    codegen_cases();
    std::process::exit(0);
}
