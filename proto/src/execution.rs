//! Plain executions: code in, verdict out.

use crate::FileContent;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Languages the sandbox has an image for. Adding one: a folder under `sandbox-images/` and an
/// entry in [`Language::ALL`] and [`Language::spec`].
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    Python,
    /// Python with numpy, scipy, pandas, sympy and networkx, imported once in its zygote.
    #[serde(rename = "python-sci", alias = "python_sci")]
    PythonSci,
    Javascript,
    Bash,
    C,
    Cpp,
    Go,
    Rust,
    Java,
    Typescript,
}

/// What the rest of the system needs to know about a language.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LanguageSpec {
    /// Its name in the API and in image names (`codegen-sandbox-{name}`).
    pub name: &'static str,
    /// Other names accepted on input (SandboxFusion's `nodejs`, …).
    pub aliases: &'static [&'static str],
    /// The program's file in the work directory.
    pub main_file: &'static str,
    /// The test's file (the program + test form).
    pub test_file: &'static str,
    /// File extension of programs (for `codegen exec` to infer the language).
    pub extension: &'static str,
    /// Generation jobs may ask for it: the pipeline has its test harness, static checks and
    /// quality analysis. Executions take every language.
    pub generation: bool,
    /// Programs are compiled first (`compile_timeout_ms`, the `compile_error` verdict).
    pub compiled: bool,
    /// SandboxFusion's name of the language (`/run_code`), when it has one.
    pub sandbox_fusion: Option<&'static str>,
    /// The interpreter or compiler of its image (Debian's package: trixie's for the
    /// compiled languages and JavaScript, bookworm's for Python and Bash), as the language
    /// itself reports it (the fidelity tests check this).
    pub version: &'static str,
    /// How a program and its test are put together (the program + test form).
    pub test_form: &'static str,
    /// What a program may import beyond the language's standard library: the libraries
    /// evaluation sets import (HumanEval-X, MultiPL-E, SandboxFusion's datasets), from
    /// Debian's packages in its image (the language tests import each).
    pub libraries: &'static [&'static str],
    /// Its pool starts with the worker (else at the language's first execution).
    pub warm_at_start: bool,
    /// MiB its runner needs beyond `sandbox.runner_memory_mb` (packages its zygote imports).
    pub runner_extra_mb: u64,
}

impl Language {
    pub const ALL: &'static [Language] = &[
        Language::Python,
        Language::PythonSci,
        Language::Javascript,
        Language::Bash,
        Language::C,
        Language::Cpp,
        Language::Go,
        Language::Rust,
        Language::Java,
        Language::Typescript,
    ];

    pub const fn spec(self) -> LanguageSpec {
        match self {
            Language::Python => LanguageSpec {
                name: "python",
                aliases: &["python3", "py"],
                main_file: "main.py",
                test_file: "test.py",
                extension: "py",
                generation: true,
                compiled: false,
                sandbox_fusion: Some("python"),
                version: "3.11",
                test_form: "the test runs after the program in the same namespace",
                libraries: &[],
                warm_at_start: true,
                runner_extra_mb: 0,
            },
            Language::PythonSci => LanguageSpec {
                name: "python-sci",
                aliases: &["python_sci", "scipy"],
                main_file: "main.py",
                test_file: "test.py",
                extension: "py",
                generation: true,
                compiled: false,
                sandbox_fusion: None,
                version: "3.11",
                test_form: "the test runs after the program in the same namespace",
                libraries: &["numpy", "scipy", "pandas", "sympy", "networkx"],
                warm_at_start: false,
                // numpy, scipy, pandas, sympy and networkx in the zygote: about 110 MiB.
                runner_extra_mb: 160,
            },
            Language::Javascript => LanguageSpec {
                name: "javascript",
                aliases: &["nodejs", "node", "js"],
                main_file: "main.js",
                test_file: "test.js",
                extension: "js",
                generation: true,
                compiled: false,
                sandbox_fusion: Some("nodejs"),
                version: "20",
                test_form: "the test runs after the program in the same global scope",
                libraries: &["lodash"],
                warm_at_start: true,
                runner_extra_mb: 0,
            },
            Language::Bash => LanguageSpec {
                name: "bash",
                aliases: &["sh", "shell"],
                main_file: "main.sh",
                test_file: "test.sh",
                extension: "sh",
                generation: true,
                compiled: false,
                sandbox_fusion: Some("bash"),
                version: "5.2",
                test_form: "the test is sourced after the program in the same shell",
                libraries: &["gawk", "bc"],
                warm_at_start: true,
                runner_extra_mb: 0,
            },
            Language::C => LanguageSpec {
                name: "c",
                aliases: &["gcc"],
                main_file: "main.c",
                test_file: "test.c",
                extension: "c",
                generation: true,
                compiled: true,
                sandbox_fusion: None,
                version: "14.2",
                test_form: "the test (with main) is appended to the program: one translation unit",
                libraries: &[],
                warm_at_start: false,
                runner_extra_mb: 0,
            },
            Language::Cpp => LanguageSpec {
                name: "cpp",
                aliases: &["c++", "cxx", "g++"],
                main_file: "main.cpp",
                test_file: "test.cpp",
                extension: "cpp",
                generation: true,
                compiled: true,
                sandbox_fusion: Some("cpp"),
                version: "14.2",
                test_form: "the test (with main) is appended to the program: one translation unit",
                libraries: &["bits/stdc++.h"],
                warm_at_start: false,
                runner_extra_mb: 0,
            },
            Language::Go => LanguageSpec {
                name: "go",
                aliases: &["golang"],
                main_file: "main.go",
                test_file: "test.go",
                extension: "go",
                generation: true,
                compiled: true,
                sandbox_fusion: Some("go"),
                version: "go1.24",
                test_form: "the test is a second file of package main (with func main) built with the program",
                libraries: &[],
                warm_at_start: false,
                runner_extra_mb: 0,
            },
            Language::Rust => LanguageSpec {
                name: "rust",
                aliases: &["rs"],
                main_file: "main.rs",
                test_file: "test.rs",
                extension: "rs",
                generation: true,
                compiled: true,
                sandbox_fusion: Some("rust"),
                version: "1.85",
                test_form: "the test (with fn main) is appended to the program: one crate",
                libraries: &[],
                warm_at_start: false,
                runner_extra_mb: 0,
            },
            Language::Java => LanguageSpec {
                name: "java",
                aliases: &[],
                main_file: "Main.java",
                test_file: "Test.java",
                extension: "java",
                generation: true,
                compiled: true,
                sandbox_fusion: Some("java"),
                version: "21",
                test_form: "the test (a class with main) is appended to the program: one source file",
                libraries: &[
                    "org.javatuples (javatuples 1.2)",
                    "com.google.gson (gson 2.10)",
                ],
                warm_at_start: false,
                runner_extra_mb: 0,
            },
            Language::Typescript => LanguageSpec {
                name: "typescript",
                aliases: &["ts"],
                main_file: "main.ts",
                test_file: "test.ts",
                extension: "ts",
                generation: true,
                compiled: true,
                sandbox_fusion: Some("typescript"),
                version: "4.9",
                test_form: "the test is appended to the program: one module, transpiled (types erased, not checked)",
                libraries: &["lodash"],
                warm_at_start: false,
                runner_extra_mb: 0,
            },
        }
    }

    pub fn as_str(self) -> &'static str {
        self.spec().name
    }

    /// The language whose programs end in `.{extension}`.
    pub fn from_extension(extension: &str) -> Option<Language> {
        Language::ALL
            .iter()
            .copied()
            .find(|l| l.spec().extension == extension)
    }

    /// File names no language lets `files` use: every language's program and test files.
    pub fn reserved_files() -> impl Iterator<Item = &'static str> {
        Language::ALL
            .iter()
            .flat_map(|l| [l.spec().main_file, l.spec().test_file])
    }
}

impl std::fmt::Display for Language {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Language {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Language::ALL
            .iter()
            .copied()
            .find(|l| l.as_str() == s || l.spec().aliases.contains(&s))
            .ok_or_else(|| {
                let known: Vec<_> = Language::ALL.iter().map(|l| l.as_str()).collect();
                format!("unknown language {s:?} (supported: {})", known.join(", "))
            })
    }
}

/// A validated execution, as carried in a task. Limits are always explicit here: the coordinator
/// fills in defaults so a worker never has to guess.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionRequest {
    pub language: Language,
    pub code: String,
    #[serde(default)]
    pub stdin: Option<String>,
    /// A test run after the program in the same namespace (HumanEval style: the program
    /// defines, the test asserts). With a test, `passed` means both ran to their end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test: Option<String>,
    /// Wall-clock limit for the program, in milliseconds.
    pub timeout_ms: u64,
    /// Wall-clock limit for the compile of a compiled language, in milliseconds (apart from
    /// `timeout_ms`, which counts from the end of the compile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile_timeout_ms: Option<u64>,
    /// CPU-time limit (user + system of the program and every process it started), in
    /// milliseconds; none when absent (the wall-clock limit still holds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_time_ms: Option<u64>,
    /// Memory limit (RAM and swap together), in MiB.
    pub memory_mb: u64,
    /// Run in a container of its own, created for this execution and removed after it,
    /// instead of a warm container of the pool (slower: a container start-up per run).
    #[serde(default, skip_serializing_if = "is_false")]
    pub fresh_container: bool,
    /// Files written before the program runs, to the work directory (a path relative to it,
    /// no `..`) or below [`DATA_DIR`] (an absolute path there), text or bytes; the program
    /// can import the Python ones of the work directory.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, FileContent>,
    /// Files to return after the run (paths as in `files`). Symbolic links are never
    /// followed; a path that is not a regular file comes back as an error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub return_files: Vec<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Most files an execution may send (`files`) or ask back (`return_files`).
pub const MAX_FILES: usize = 64;

/// The one absolute directory `files` and `return_files` may name, as SandboxFusion's
/// datasets do: a writable tmpfs of its own in every sandbox container, scrubbed after each
/// run like the work directory.
pub const DATA_DIR: &str = "/mnt/data";

/// Checks a path of `files` or `return_files`: relative to the work directory or below
/// [`DATA_DIR`], `/`-separated, no empty, `.` or `..` component, no NUL, at most 1024 bytes,
/// and not a program or test file name of any language ([`Language::reserved_files`]).
pub fn check_file_path(path: &str) -> Result<(), String> {
    if path.is_empty() || path.len() > 1024 {
        return Err(format!("{path:?}: must be 1 to 1024 bytes long"));
    }
    let relative = path
        .strip_prefix(DATA_DIR)
        .and_then(|rest| rest.strip_prefix('/'))
        .unwrap_or(path);
    if relative.starts_with('/') || path.contains('\0') {
        return Err(format!(
            "{path:?}: must be a relative path or one below {DATA_DIR}/, without NUL"
        ));
    }
    if relative
        .split('/')
        .any(|p| p.is_empty() || p == "." || p == "..")
    {
        return Err(format!(
            "{path:?}: no empty, \".\" or \"..\" components allowed"
        ));
    }
    if Language::reserved_files().any(|reserved| reserved == path) {
        return Err(format!(
            "{path:?} is reserved for the program and its test (reserved: {})",
            Language::reserved_files().collect::<Vec<_>>().join(", ")
        ));
    }
    Ok(())
}

/// The verdict of one execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The program ran to completion and exited 0.
    Passed,
    /// The program exited non-zero.
    Failed,
    /// The wall-clock limit was reached and the program was killed.
    Timeout,
    /// The CPU-time limit (`cpu_time_ms`) was reached and the program was killed.
    CpuTimeLimit,
    /// The program was killed for exceeding its memory limit.
    MemoryLimit,
    /// A compiled language's program did not compile (or its compile timed out): nothing
    /// ran; `compile` has the compiler's message.
    CompileError,
    /// The program wrote more than the hard output cap and was killed. (Output past the
    /// capture cap but below the hard cap is only cut: `truncated`.)
    OutputLimit,
    /// The sandbox itself failed (Docker down, container died); `reason` says how.
    SandboxError,
    /// The task could not be run at all (dead-lettered, rejected); `reason` says why.
    Error,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Passed => "passed",
            Status::Failed => "failed",
            Status::Timeout => "timeout",
            Status::CpuTimeLimit => "cpu_time_limit",
            Status::MemoryLimit => "memory_limit",
            Status::CompileError => "compile_error",
            Status::OutputLimit => "output_limit",
            Status::SandboxError => "sandbox_error",
            Status::Error => "error",
        }
    }
}

/// Why a `failed` execution failed, from the exception that ended it (or the test harness).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The code does not compile (`SyntaxError`, `IndentationError`).
    Syntax,
    /// An import failed (`ImportError`, `ModuleNotFoundError`).
    Import,
    /// An assertion failed (`AssertionError`).
    Assertion,
    /// The program ran but produced the wrong output (a test case compared unequal).
    WrongOutput,
    /// Any other exception, or a non-zero exit without one.
    Runtime,
    /// Generation test cases only: the case ran longer than its own timeout, or the run of
    /// the cases was stopped at the wall-clock limit.
    Timeout,
    /// Generation test cases only: the run of the cases hit the memory limit.
    MemoryLimit,
    /// Generation test cases only: the run of the cases printed more than the output limit.
    OutputLimit,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Syntax => "syntax",
            ErrorKind::Import => "import",
            ErrorKind::Assertion => "assertion",
            ErrorKind::WrongOutput => "wrong_output",
            ErrorKind::Runtime => "runtime",
            ErrorKind::Timeout => "timeout",
            ErrorKind::MemoryLimit => "memory_limit",
            ErrorKind::OutputLimit => "output_limit",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the caller gets back for one execution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ExecutionResult {
    pub status: Status,
    /// Exit status of the program; `None` when it never ran or was killed by a signal.
    #[schema(required = true)]
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// True when stdout or stderr was cut at the capture limit.
    #[serde(default)]
    #[schema(required = true)]
    pub truncated: bool,
    /// Wall time of the program itself inside the sandbox.
    pub duration_ms: u64,
    /// CPU time (user + system) its container's cgroup used over the run: the program and
    /// every process it started. Absent when nothing ran or the cgroup could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub cpu_ms: Option<u64>,
    /// The program's peak resident memory, in KiB: what it added to the warm interpreter it
    /// was forked from (Python), or the high-water mark of the program's executable (other
    /// languages; never below the runner's size at the fork, about 10 MiB), including the
    /// children it waited for. Absent when nothing ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub peak_memory_kb: Option<u64>,
    /// Why the execution ended as it did when the status alone does not say it: the
    /// exception of a `failed` run, the limit of a `timeout`/`memory_limit`/`output_limit`,
    /// what went wrong for `sandbox_error` or `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub reason: Option<String>,
    /// For `failed`: what kind of error ended the program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub error_kind: Option<ErrorKind>,
    /// The requested `return_files` that could be read, by path: a string when the content
    /// is UTF-8 text, else `{"base64": "..."}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(value_type = BTreeMap<String, crate::file::FileContentWire>)]
    pub files: BTreeMap<String, FileContent>,
    /// The requested `return_files` that could not be read, with why (missing, a symbolic
    /// link, not a regular file, cut at the size cap).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub file_errors: BTreeMap<String, String>,
    /// The compile of a compiled language (absent for the others, and when nothing ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub compile: Option<Box<CompileResult>>,
}

/// How a compiled language's compile went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CompileResult {
    pub status: CompileStatus,
    /// The compiler's exit status; absent when it timed out or was killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub exit_code: Option<i32>,
    /// What the compiler printed (stdout and stderr together; 64 KiB at most).
    pub output: String,
    pub duration_ms: u64,
}

/// The outcome of a compile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CompileStatus {
    /// Compiled: the program ran.
    Ok,
    /// The compiler refused the program (or was killed, e.g. at the memory limit).
    Error,
    /// The compile ran past `compile_timeout_ms`.
    Timeout,
}

impl ExecutionResult {
    /// What a test case this run did not report met: the limit that stopped the run (a CPU
    /// limit is a timeout to the case), a compile error, else what the runner classified (a
    /// runtime error when it did not).
    pub fn cut_kind(&self) -> ErrorKind {
        match self.status {
            Status::Timeout | Status::CpuTimeLimit => ErrorKind::Timeout,
            Status::MemoryLimit => ErrorKind::MemoryLimit,
            Status::OutputLimit => ErrorKind::OutputLimit,
            Status::CompileError => ErrorKind::Syntax,
            Status::Passed | Status::Failed | Status::SandboxError | Status::Error => {
                self.error_kind.unwrap_or(ErrorKind::Runtime)
            }
        }
    }

    /// A result for work that never produced program output.
    pub fn error(status: Status, reason: impl Into<String>) -> Self {
        Self {
            status,
            exit_code: None,
            stdout: String::new(),
            stderr: String::new(),
            truncated: false,
            duration_ms: 0,
            cpu_ms: None,
            peak_memory_kb: None,
            reason: Some(reason.into()),
            error_kind: None,
            files: BTreeMap::new(),
            file_errors: BTreeMap::new(),
            compile: None,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        crate::codec::encode(self)
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, crate::codec::DecodeError> {
        crate::codec::decode(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn language_parses_and_names_the_supported_ones_on_error() {
        assert_eq!("python".parse::<Language>().unwrap(), Language::Python);
        assert_eq!("nodejs".parse::<Language>().unwrap(), Language::Javascript);
        assert_eq!("bash".parse::<Language>().unwrap(), Language::Bash);
        assert_eq!(Language::from_extension("js"), Some(Language::Javascript));
        assert_eq!(
            serde_json::to_string(&Language::Javascript).unwrap(),
            "\"javascript\""
        );
        let err = "cobol".parse::<Language>().unwrap_err();
        assert!(err.contains("cobol") && err.contains("python"), "{err}");
    }

    #[test]
    fn status_serializes_in_snake_case() {
        let json = serde_json::to_string(&Status::MemoryLimit).unwrap();
        assert_eq!(json, "\"memory_limit\"");
        assert_eq!(Status::SandboxError.as_str(), "sandbox_error");
    }

    #[test]
    fn result_round_trips_and_omits_empty_reason() {
        let result = ExecutionResult {
            status: Status::Passed,
            exit_code: Some(0),
            stdout: "ok\n".into(),
            stderr: String::new(),
            truncated: false,
            duration_ms: 12,
            cpu_ms: None,
            peak_memory_kb: None,
            reason: None,
            error_kind: None,
            files: BTreeMap::new(),
            file_errors: BTreeMap::new(),
            compile: None,
        };
        assert_eq!(ExecutionResult::decode(&result.encode()).unwrap(), result);
        let json = serde_json::to_value(&result).unwrap();
        assert!(json.get("reason").is_none());
        assert!(json.get("error_kind").is_none() && json.get("files").is_none());
    }

    #[test]
    fn file_paths_stay_inside_the_work_directory() {
        for ok in [
            "a.txt",
            "pkg/mod.py",
            "out/data.json",
            ".hidden",
            "pkg/main.py",
            "/mnt/data/a.csv",
            "/mnt/data/d/main.py",
        ] {
            assert!(check_file_path(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "/mnt/data",
            "/mnt/data/",
            "/mnt/data//a",
            "/mnt/data/../a",
            "/mnt/datax/a",
            "/mnt/other",
            "../x",
            "a/../b",
            "a//b",
            "./a",
            "a/",
            "main.py",
            "test.js",
            "main.sh",
            "a\0b",
        ] {
            assert!(check_file_path(bad).is_err(), "{bad:?}");
        }
        assert!(check_file_path(&"a".repeat(1025)).is_err());
    }

    #[test]
    fn old_messages_still_decode() {
        // A request and a result as written before fresh_container, files, error_kind…
        #[derive(Serialize)]
        struct OldRequest {
            language: Language,
            code: String,
            stdin: Option<String>,
            timeout_ms: u64,
            memory_mb: u64,
        }
        let old = rmp_serde::to_vec_named(&OldRequest {
            language: Language::Python,
            code: "1".into(),
            stdin: None,
            timeout_ms: 5,
            memory_mb: 64,
        })
        .unwrap();
        let request: ExecutionRequest = rmp_serde::from_slice(&old).unwrap();
        assert!(!request.fresh_container && request.files.is_empty());
        assert!(request.return_files.is_empty());

        #[derive(Serialize)]
        struct OldResult {
            status: Status,
            exit_code: Option<i32>,
            stdout: String,
            stderr: String,
            duration_ms: u64,
        }
        let old = rmp_serde::to_vec_named(&OldResult {
            status: Status::Failed,
            exit_code: Some(1),
            stdout: String::new(),
            stderr: "x".into(),
            duration_ms: 3,
        })
        .unwrap();
        let result = ExecutionResult::decode(&old).unwrap();
        assert_eq!(result.error_kind, None);
        assert!(!result.truncated && result.files.is_empty());
    }

    #[test]
    fn error_kind_and_output_limit_serialize_in_snake_case() {
        assert_eq!(
            serde_json::to_string(&ErrorKind::WrongOutput).unwrap(),
            "\"wrong_output\""
        );
        assert_eq!(Status::OutputLimit.as_str(), "output_limit");
        assert_eq!(
            serde_json::to_string(&Status::OutputLimit).unwrap(),
            "\"output_limit\""
        );
    }
}

/// What the coordinator records about an execution before it publishes the task, so that a
/// `GET` can tell "queued" from "unknown" and tenants see only their own executions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionMeta {
    #[serde(default)]
    pub tenant: Option<String>,
    pub submitted_at_ms: u64,
    pub language: Language,
}

impl ExecutionMeta {
    pub fn encode(&self) -> Vec<u8> {
        crate::codec::encode(self)
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, crate::codec::DecodeError> {
        crate::codec::decode(bytes)
    }
}
