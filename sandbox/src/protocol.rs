//! The runner protocol (version 5) spoken over a container's attached stdin/stdout, and the
//! mapping of what the runner saw to a verdict. See `sandbox-images/common/runner.py` for the
//! other side.
//!
//! Every message is a frame: a 4-byte big-endian length, then that many bytes of JSON.

use std::collections::BTreeMap;

use proto::harness::HarnessRequest;
use proto::{
    CompileResult, CompileStatus, ErrorKind, ExecutionRequest, ExecutionResult, FileContent, Status,
};
use serde::{Deserialize, Serialize};

/// Protocol version the runner announces in its `ready` message.
pub const PROTOCOL: u32 = 5;

/// What the runner is sent for one execution.
#[derive(Debug, Serialize)]
pub(crate) struct RunnerRequest<'a> {
    pub code: &'a str,
    pub stdin: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test: Option<&'a str>,
    pub timeout_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_time_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compile_timeout_ms: Option<u64>,
    pub max_output_bytes: u64,
    pub output_limit_bytes: u64,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub files: &'a BTreeMap<String, FileContent>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub return_files: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub harness: Option<&'a HarnessRequest>,
    /// After the result, wait for [`RunnerCommand::Prepare`] (else prepare at once).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub rest: bool,
}

impl<'a> RunnerRequest<'a> {
    pub fn new(
        request: &'a ExecutionRequest,
        harness: Option<&'a HarnessRequest>,
        max_output_bytes: u64,
        output_limit: u64,
        rest: bool,
    ) -> Self {
        Self {
            code: &request.code,
            stdin: request.stdin.as_deref(),
            test: request.test.as_deref(),
            timeout_ms: request.timeout_ms,
            cpu_time_ms: request.cpu_time_ms,
            compile_timeout_ms: request.compile_timeout_ms,
            max_output_bytes,
            output_limit_bytes: output_limit,
            files: &request.files,
            return_files: &request.return_files,
            harness,
            rest,
        }
    }
}

/// What the worker tells the runner besides requests.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum RunnerCommand {
    /// Sent after the result of a request with `rest`: the runner forks and prepares its
    /// next program process (and scrubs what the last one left), then says `ready`. Until
    /// then it only waits.
    Prepare,
}

/// A message from the runner.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum RunnerMessage {
    /// The container is clean and takes the next request.
    Ready {
        protocol: u32,
        #[serde(default)]
        runs: u64,
        /// The modes of the image's test harness (empty: none installed, or it failed its
        /// warm-up). Defaulted only so that another version's `ready` reads, to be refused.
        #[serde(default)]
        harness: Vec<String>,
    },
    /// What one execution did.
    Result(Box<RunnerResult>),
    /// The request could not be run (malformed).
    Error { message: String },
    /// The runner cannot vouch for the container any more and exits.
    Fatal {
        message: String,
        #[serde(default)]
        oom_killed: bool,
    },
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct RunnerResult {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub oom_killed: bool,
    pub output_limited: bool,
    /// Killed at the request's `cpu_time_ms`.
    pub cpu_limited: bool,
    pub stdout: String,
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub duration_ms: u64,
    /// The container cgroup's CPU time over the run (`None`: the cgroup could not be read).
    pub cpu_ms: Option<u64>,
    /// The program's peak resident memory (`None`: not measured).
    pub peak_memory_kb: Option<u64>,
    pub exception: Option<RunnerException>,
    /// With a test: whether the program and its test both ran to their end.
    pub test_finished: Option<bool>,
    /// Where the exception or early exit happened: `code` or `test`.
    pub phase: Option<String>,
    /// Each returned file: a string when it is UTF-8 text, else `{"base64"}`.
    pub files: BTreeMap<String, Option<FileContent>>,
    pub file_errors: BTreeMap<String, String>,
    /// A compiled language's compile (`None` for the others).
    pub compile: Option<RunnerCompile>,
    /// The test harness's report, for a request with `harness` (`None` when the run broke
    /// before the harness answered).
    pub harness: Option<serde_json::Value>,
}

/// How the compile went, as the runner saw it.
#[derive(Debug, Deserialize)]
pub(crate) struct RunnerCompile {
    pub status: CompileStatus,
    #[serde(default)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub signal: Option<i32>,
    #[serde(default)]
    pub output: String,
    #[serde(default)]
    pub duration_ms: u64,
    /// The container's OOM killer struck while it compiled.
    #[serde(default)]
    pub oom_killed: bool,
}

/// The exception that ended the program, as the runner classified it.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct RunnerException {
    #[serde(rename = "type")]
    pub ty: String,
    pub module: String,
    pub message: String,
    pub kind: String,
}

/// Encodes one frame.
pub(crate) fn encode_frame<T: Serialize>(message: &T) -> Vec<u8> {
    let body = serde_json::to_vec(message).expect("runner requests always serialize");
    let mut frame = Vec::with_capacity(body.len() + 4);
    frame.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_be_bytes());
    frame.extend_from_slice(&body);
    frame
}

/// Reassembles frames from the chunks the attach stream delivers.
#[derive(Debug)]
pub(crate) struct FrameDecoder {
    buf: Vec<u8>,
    max: usize,
}

impl FrameDecoder {
    pub fn new(max: usize) -> Self {
        Self {
            buf: Vec::new(),
            max,
        }
    }

    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete frame's body, if one is buffered; an error for a frame over the
    /// bound (the stream cannot be trusted after that).
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, String> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if len > self.max {
            return Err(format!(
                "runner frame of {len} bytes is over the bound of {}",
                self.max
            ));
        }
        if self.buf.len() < 4 + len {
            return Ok(None);
        }
        let body = self.buf[4..4 + len].to_vec();
        self.buf.drain(..4 + len);
        Ok(Some(body))
    }
}

/// Whether a verdict means the container must not be reused: the program broke a limit.
pub(crate) fn is_breach(status: Status) -> bool {
    matches!(
        status,
        Status::Timeout | Status::CpuTimeLimit | Status::MemoryLimit | Status::OutputLimit
    )
}

/// Maps what the runner saw to a verdict. Order matters: a program killed for its output is
/// `output_limit` even if it also ran out of time; the OOM counter of the container's memory
/// cgroup decides `memory_limit` (a SIGKILL alone does not: the program may send it itself).
/// With a test, exiting 0 is not enough: the test must have run to its end, so a
/// program that exits early to skip its test fails.
pub(crate) fn verdict(
    result: RunnerResult,
    output_limit: u64,
    request: &ExecutionRequest,
) -> ExecutionResult {
    let (memory_mb, cpu_time_ms) = (request.memory_mb, request.cpu_time_ms);
    let with_test = request.test.is_some();
    let skipped_test = with_test && result.test_finished != Some(true);
    let compile_failed = result
        .compile
        .as_ref()
        .is_some_and(|c| c.status != CompileStatus::Ok);
    let status = if compile_failed {
        Status::CompileError
    } else if result.output_limited {
        Status::OutputLimit
    } else if result.oom_killed {
        Status::MemoryLimit
    } else if result.cpu_limited {
        Status::CpuTimeLimit
    } else if result.timed_out {
        Status::Timeout
    } else if result.exit_code == Some(0) && !skipped_test {
        Status::Passed
    } else {
        Status::Failed
    };
    let (error_kind, reason) = match status {
        Status::OutputLimit => (
            None,
            Some(format!(
                "wrote more than {output_limit} bytes of output and was killed"
            )),
        ),
        Status::MemoryLimit => (
            None,
            Some(format!("killed at the memory limit of {memory_mb} MiB")),
        ),
        Status::Timeout => (None, Some("killed at the wall-clock limit".into())),
        Status::CpuTimeLimit => (
            None,
            Some(format!(
                "killed at the CPU-time limit of {} ms",
                cpu_time_ms.unwrap_or_default()
            )),
        ),
        Status::Failed if result.exit_code == Some(0) => (
            Some(ErrorKind::Runtime),
            Some(format!(
                "exited with status 0 in the {} before the test finished",
                result.phase.as_deref().unwrap_or("code")
            )),
        ),
        Status::Failed => failure(&result),
        Status::CompileError => (None, result.compile.as_ref().map(compile_failure)),
        _ => (None, None),
    };
    let mut files = BTreeMap::new();
    let mut file_errors = result.file_errors;
    for (path, content) in result.files {
        match content {
            Some(content) => {
                files.insert(path, content);
            }
            None => {
                file_errors
                    .entry(path)
                    .or_insert_with(|| "not returned".into());
            }
        }
    }
    ExecutionResult {
        status,
        exit_code: result.exit_code,
        stdout: result.stdout,
        stderr: result.stderr,
        truncated: result.stdout_truncated || result.stderr_truncated,
        duration_ms: result.duration_ms,
        // Nothing ran after a failed compile: no figures of a program.
        cpu_ms: result.cpu_ms.filter(|_| !compile_failed),
        peak_memory_kb: result.peak_memory_kb.filter(|_| !compile_failed),
        reason,
        error_kind,
        files,
        file_errors,
        compile: result.compile.map(|c| {
            Box::new(CompileResult {
                status: c.status,
                exit_code: c.exit_code,
                output: c.output,
                duration_ms: c.duration_ms,
            })
        }),
    }
}

/// The reason of a `compile_error`: how the compile ended and the compiler's first error line.
fn compile_failure(compile: &RunnerCompile) -> String {
    if compile.status == CompileStatus::Timeout {
        return format!(
            "the compile ran past its limit ({} ms)",
            compile.duration_ms
        );
    }
    if compile.oom_killed {
        return "the compiler was killed at the memory limit".into();
    }
    let first = compile
        .output
        .lines()
        .find(|l| l.contains("error"))
        .or_else(|| compile.output.lines().find(|l| !l.trim().is_empty()))
        .unwrap_or_default()
        .trim();
    let how = match (compile.exit_code, compile.signal) {
        (_, Some(signal)) => format!("the compiler was killed by signal {signal}"),
        (Some(code), None) => format!("the compiler exited with status {code}"),
        (None, None) => "the compile failed".into(),
    };
    if first.is_empty() {
        how
    } else {
        format!("{how}: {}", first.chars().take(500).collect::<String>())
    }
}

fn failure(result: &RunnerResult) -> (Option<ErrorKind>, Option<String>) {
    if let Some(exception) = &result.exception {
        let kind = match exception.kind.as_str() {
            "syntax" => ErrorKind::Syntax,
            "import" => ErrorKind::Import,
            "assertion" => ErrorKind::Assertion,
            _ => ErrorKind::Runtime,
        };
        let reason = if exception.message.is_empty() {
            exception.ty.clone()
        } else {
            format!("{}: {}", exception.ty, exception.message)
        };
        return (Some(kind), Some(reason));
    }
    let reason = match (result.exit_code, result.signal) {
        (_, Some(signal)) => format!("killed by signal {signal}"),
        (Some(code), None) => format!("exited with status {code}"),
        (None, None) => "ended without an exit status".into(),
    };
    (Some(ErrorKind::Runtime), Some(reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(with_test: bool) -> ExecutionRequest {
        ExecutionRequest {
            language: proto::Language::Python,
            code: String::new(),
            stdin: None,
            test: with_test.then(String::new),
            timeout_ms: 1000,
            cpu_time_ms: Some(200),
            compile_timeout_ms: None,
            memory_mb: 64,
            fresh_container: false,
            files: BTreeMap::new(),
            return_files: Vec::new(),
        }
    }

    fn result() -> RunnerResult {
        RunnerResult {
            exit_code: Some(0),
            duration_ms: 3,
            stdout: "out".into(),
            ..RunnerResult::default()
        }
    }

    #[test]
    fn prepare_is_the_frame_the_runner_waits_for() {
        // runner.py's await_prepare compares the decoded object with exactly this.
        let frame = encode_frame(&RunnerCommand::Prepare);
        let body = &frame[4..];
        assert_eq!(frame[..4], u32::try_from(body.len()).unwrap().to_be_bytes());
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(body).unwrap(),
            serde_json::json!({"type": "prepare"})
        );
    }

    #[test]
    fn frames_round_trip_across_arbitrary_chunks() {
        let a = encode_frame(&serde_json::json!({"type": "ready", "protocol": 3}));
        let b = encode_frame(&serde_json::json!({"type": "error", "message": "x"}));
        let stream: Vec<u8> = a.iter().chain(b.iter()).copied().collect();
        let mut decoder = FrameDecoder::new(1024);
        let mut frames = Vec::new();
        for chunk in stream.chunks(3) {
            decoder.push(chunk);
            while let Some(frame) = decoder.next_frame().unwrap() {
                frames.push(serde_json::from_slice::<RunnerMessage>(&frame).unwrap());
            }
        }
        assert!(matches!(
            frames[0],
            RunnerMessage::Ready { protocol: 3, .. }
        ));
        assert!(matches!(&frames[1], RunnerMessage::Error { message } if message == "x"));
    }

    #[test]
    fn an_oversized_frame_is_an_error() {
        let mut decoder = FrameDecoder::new(10);
        decoder.push(&100u32.to_be_bytes());
        assert!(decoder.next_frame().is_err());
    }

    #[test]
    fn verdicts_follow_the_runner_and_the_oom_counter() {
        assert_eq!(verdict(result(), 1, &request(false)).status, Status::Passed);
        let killed_by_itself = RunnerResult {
            exit_code: None,
            signal: Some(9),
            ..result()
        };
        let v = verdict(killed_by_itself, 1, &request(false));
        assert_eq!(v.status, Status::Failed, "SIGKILL alone is not an OOM");
        assert_eq!(v.error_kind, Some(ErrorKind::Runtime));
        assert_eq!(v.reason.as_deref(), Some("killed by signal 9"));
        let oom = RunnerResult {
            exit_code: None,
            signal: Some(9),
            oom_killed: true,
            ..result()
        };
        assert_eq!(verdict(oom, 1, &request(false)).status, Status::MemoryLimit);
        let timeout = RunnerResult {
            timed_out: true,
            ..result()
        };
        assert_eq!(verdict(timeout, 1, &request(false)).status, Status::Timeout);
        let cpu = RunnerResult {
            cpu_limited: true,
            exit_code: None,
            signal: Some(9),
            ..result()
        };
        let v = verdict(cpu, 1, &request(false));
        assert_eq!(v.status, Status::CpuTimeLimit);
        assert_eq!(
            v.reason.as_deref(),
            Some("killed at the CPU-time limit of 200 ms")
        );
        assert!(is_breach(v.status));
        let flood = RunnerResult {
            output_limited: true,
            timed_out: true,
            stdout_truncated: true,
            ..result()
        };
        let v = verdict(flood, 100, &request(false));
        assert_eq!(v.status, Status::OutputLimit);
        assert!(v.truncated && v.reason.unwrap().contains("100 bytes"));
        for status in [Status::Timeout, Status::MemoryLimit, Status::OutputLimit] {
            assert!(is_breach(status));
        }
        assert!(!is_breach(Status::Failed) && !is_breach(Status::Passed));
    }

    #[test]
    fn failures_are_classified_by_exception() {
        for (kind, expected) in [
            ("syntax", ErrorKind::Syntax),
            ("import", ErrorKind::Import),
            ("assertion", ErrorKind::Assertion),
            ("runtime", ErrorKind::Runtime),
        ] {
            let r = RunnerResult {
                exit_code: Some(1),
                exception: Some(RunnerException {
                    ty: "E".into(),
                    message: "boom".into(),
                    kind: kind.into(),
                    ..RunnerException::default()
                }),
                ..result()
            };
            let v = verdict(r, 1, &request(false));
            assert_eq!(v.status, Status::Failed);
            assert_eq!(v.error_kind, Some(expected));
            assert_eq!(v.reason.as_deref(), Some("E: boom"));
        }
        let exit3 = RunnerResult {
            exit_code: Some(3),
            ..result()
        };
        let v = verdict(exit3, 1, &request(false));
        assert_eq!(
            (v.error_kind, v.reason.as_deref()),
            (Some(ErrorKind::Runtime), Some("exited with status 3"))
        );
    }

    #[test]
    fn with_a_test_only_a_finished_test_passes() {
        let finished = RunnerResult {
            test_finished: Some(true),
            ..result()
        };
        assert_eq!(verdict(finished, 1, &request(true)).status, Status::Passed);
        // `sys.exit(0)` / `process.exit(0)` / `exit 0` before the test ran: not a pass.
        let skipped = RunnerResult {
            test_finished: Some(false),
            phase: Some("code".into()),
            ..result()
        };
        let v = verdict(skipped, 1, &request(true));
        assert_eq!(v.status, Status::Failed);
        assert_eq!(v.error_kind, Some(ErrorKind::Runtime));
        assert!(v.reason.unwrap().contains("before the test finished"));
        // No report at all (os._exit(0)) is no better.
        assert_eq!(verdict(result(), 1, &request(true)).status, Status::Failed);
        let failing = RunnerResult {
            exit_code: Some(1),
            test_finished: Some(false),
            phase: Some("test".into()),
            exception: Some(RunnerException {
                ty: "AssertionError".into(),
                kind: "assertion".into(),
                ..RunnerException::default()
            }),
            ..result()
        };
        let v = verdict(failing, 1, &request(true));
        assert_eq!(v.error_kind, Some(ErrorKind::Assertion));
    }

    #[test]
    fn returned_files_and_their_errors_are_split() {
        let r = RunnerResult {
            files: BTreeMap::from([
                ("ok.txt".to_string(), Some("fine".into())),
                ("bin".to_string(), Some(FileContent::Bytes(vec![0, 255]))),
                ("link".to_string(), None),
            ]),
            file_errors: BTreeMap::from([("link".to_string(), "a symbolic link".to_string())]),
            ..result()
        };
        let v = verdict(r, 1, &request(false));
        assert_eq!(v.files["ok.txt"].as_text(), Some("fine"));
        assert_eq!(v.files["bin"].as_bytes(), [0, 255]);
        assert!(!v.files.contains_key("link"));
        assert_eq!(v.file_errors["link"], "a symbolic link");
    }

    #[test]
    fn a_failed_compile_is_a_compile_error_whatever_the_exit() {
        let compile = |status, output: &str| RunnerCompile {
            status,
            exit_code: Some(1),
            signal: None,
            output: output.into(),
            duration_ms: 40,
            oom_killed: false,
        };
        let refused = RunnerResult {
            exit_code: None,
            cpu_ms: Some(1),
            peak_memory_kb: Some(14_000),
            compile: Some(compile(
                CompileStatus::Error,
                "main.c: In function 'main':\nmain.c:1:25: error: 'nope' undeclared\n",
            )),
            ..result()
        };
        let v = verdict(refused, 1, &request(false));
        assert_eq!(v.status, Status::CompileError);
        assert_eq!(
            v.reason.as_deref(),
            Some("the compiler exited with status 1: main.c:1:25: error: 'nope' undeclared")
        );
        assert_eq!((v.cpu_ms, v.peak_memory_kb), (None, None), "nothing ran");
        assert_eq!(v.compile.unwrap().status, CompileStatus::Error);

        let slow = RunnerResult {
            compile: Some(compile(CompileStatus::Timeout, "")),
            ..result()
        };
        let v = verdict(slow, 1, &request(false));
        assert_eq!(v.status, Status::CompileError);
        assert!(v.reason.unwrap().contains("past its limit"));

        let compiled = RunnerResult {
            compile: Some(compile(CompileStatus::Ok, "a warning\n")),
            ..result()
        };
        let v = verdict(compiled, 1, &request(false));
        assert_eq!(v.status, Status::Passed);
        assert_eq!(v.compile.unwrap().output, "a warning\n");
    }
}
