//! The compiler's warnings about the module, read from a run's compile output: the program
//! (the module) comes first and the test after it in one source file, so a warning about a line
//! past the module's is the test's and is left out.

/// rustc's: `warning: <message>` then ` --> /work/main.rs:<line>:<column>`.
pub(crate) fn rustc(output: &str, lines: usize) -> Vec<String> {
    let mut warnings = Vec::new();
    let mut message: Option<&str> = None;
    for line in output.lines() {
        if let Some(text) = line.strip_prefix("warning: ") {
            // The summary (`warning: 3 warnings emitted`) names no line.
            message = Some(text);
            continue;
        }
        let Some(at) = line.trim_start().strip_prefix("--> ") else {
            continue;
        };
        if let (Some(text), Some(number)) = (message.take(), line_of(at))
            && number <= lines
        {
            warnings.push(format!("line {number}: {text}"));
        }
    }
    warnings
}

/// gcc's and g++'s: `<file>:<line>:<column>: warning: <message>`.
pub(crate) fn gcc(output: &str, lines: usize) -> Vec<String> {
    output
        .lines()
        .filter_map(|line| {
            let (at, text) = line.split_once(": warning: ")?;
            let number = line_of(at)?;
            (number <= lines).then(|| format!("line {number}: {text}"))
        })
        .collect()
}

/// The line of `<file>:<line>:<column>`, for the program's own file (`main.*`).
fn line_of(at: &str) -> Option<usize> {
    let mut parts = at.rsplitn(3, ':');
    let _column = parts.next()?;
    let line = parts.next()?.parse().ok()?;
    let file = parts.next()?;
    let name = file.rsplit('/').next()?;
    name.starts_with("main.").then_some(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rustc_warnings_on_the_module_are_kept_and_the_tests_left_out() {
        let output = "warning: unused variable: `x`\n --> /work/main.rs:3:9\n  |\n3 |     let x = 1;\n  |         ^\n\nwarning: variable does not need to be mutable\n   --> /work/main.rs:40:13\n    |\n\nwarning: 2 warnings emitted\n";
        assert_eq!(rustc(output, 20), ["line 3: unused variable: `x`"]);
        assert_eq!(rustc(output, 40).len(), 2);
    }

    #[test]
    fn gcc_warnings_on_the_module_are_kept_and_the_tests_left_out() {
        let output = "/work/main.c: In function 'f':\n/work/main.c:4:12: warning: unused variable 'y' [-Wunused-variable]\n/work/main.c:90:1: warning: control reaches end of non-void function [-Wreturn-type]\n/usr/include/stdio.h:3:1: warning: elsewhere\n";
        assert_eq!(
            gcc(output, 10),
            ["line 4: unused variable 'y' [-Wunused-variable]"]
        );
    }
}
