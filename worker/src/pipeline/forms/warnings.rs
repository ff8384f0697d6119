//! What a compiler or linter says about the module, read from a run's compile output or the
//! linter's file ([`proto::harness::LINT_FILE`]): the program (the module) comes first and the
//! test after it in one source file (or in a file of its own), so a finding about a line past
//! the module's, or in another file, is the test's and is left out.

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
    located(output, lines, |text| text.strip_prefix("warning: "))
}

/// `go vet`'s: `<file>:<line>:<column>: <message>`, its type errors behind `vet: ` (a module
/// that does not compile fails its cases anyway; they are findings like the others).
pub(crate) fn go_vet(output: &str, lines: usize) -> Vec<String> {
    located(output, lines, |text| Some(text))
}

/// `shellcheck --format=gcc`'s: `<file>:<line>:<column>: <error|warning|note>: <message>
/// [SC<code>]`, every level kept (its `note`s, quoting among them, are most of what it finds).
pub(crate) fn shellcheck(output: &str, lines: usize) -> Vec<String> {
    located(output, lines, |text| {
        ["error: ", "warning: ", "note: "]
            .iter()
            .find_map(|level| text.strip_prefix(level))
    })
}

/// javac's (`-Xlint:all`): `<file>.java:<line>: warning: [<lint>] <message>`; the file is the
/// program's public class's (`Solution.java`), the test's class in it after the module's lines.
pub(crate) fn javac(output: &str, lines: usize) -> Vec<String> {
    output
        .lines()
        .filter_map(|line| {
            let (at, text) = line.split_once(": warning: ")?;
            let (file, number) = at.rsplit_once(':')?;
            let number: usize = number.parse().ok()?;
            (file.ends_with(".java") && number <= lines).then(|| format!("line {number}: {text}"))
        })
        .collect()
}

/// The findings of `<file>:<line>:<column>: <text>` lines about the program's own file within
/// its first `lines` lines, each text `keep` accepts (and trims).
fn located(output: &str, lines: usize, keep: fn(&str) -> Option<&str>) -> Vec<String> {
    output
        .lines()
        .filter_map(|line| {
            let line = line.strip_prefix("vet: ").unwrap_or(line);
            let (at, text) = split_location(line)?;
            let number = line_of(at)?;
            let text = keep(text)?;
            (number <= lines).then(|| format!("line {number}: {text}"))
        })
        .collect()
}

/// `<file>:<line>:<column>` and the text after its `: `.
fn split_location(line: &str) -> Option<(&str, &str)> {
    let mut end = 0;
    for _ in 0..3 {
        end += line[end..].find(':')? + 1;
    }
    let text = line[end..].strip_prefix(' ')?;
    Some((&line[..end - 1], text))
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

    #[test]
    fn go_vet_findings_in_the_module_are_kept_and_the_test_file_left_out() {
        let output = "# command-line-arguments\n./main.go:6:2: fmt.Printf format %d has arg \"x\" of wrong type string\n./test.go:3:1: unreachable code\nvet: ./main.go:9:9: undefined: y\n./main.go:40:1: past the module\n";
        assert_eq!(
            go_vet(output, 20),
            [
                "line 6: fmt.Printf format %d has arg \"x\" of wrong type string",
                "line 9: undefined: y"
            ]
        );
    }

    #[test]
    fn shellcheck_findings_keep_every_level_and_only_the_program_file() {
        let output = "/work/main.sh:3:6: note: Double quote to prevent globbing and word splitting. [SC2086]\n/work/main.sh:7:1: warning: foo appears unused. [SC2034]\n/work/test.sh:2:1: error: elsewhere [SC1000]\n";
        assert_eq!(
            shellcheck(output, 10),
            [
                "line 3: Double quote to prevent globbing and word splitting. [SC2086]",
                "line 7: foo appears unused. [SC2034]"
            ]
        );
        assert_eq!(shellcheck(output, 5).len(), 1);
    }

    #[test]
    fn javac_lint_warnings_in_the_module_are_kept_and_the_test_class_left_out() {
        let output = "/build/src/Solution.java:7: warning: [rawtypes] found raw type: List\n        List xs = new ArrayList();\n        ^\n/build/src/Solution.java:80: warning: [unchecked] unchecked call\nNote: Some input files use unchecked operations.\n2 warnings\n";
        assert_eq!(
            javac(output, 30),
            ["line 7: [rawtypes] found raw type: List"]
        );
    }
}
