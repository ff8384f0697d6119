//! Plain executions: code in, verdict out.

use serde::{Deserialize, Serialize};

/// Languages the sandbox has an image for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    Python,
}

impl Language {
    pub const ALL: &'static [Language] = &[Language::Python];

    pub fn as_str(self) -> &'static str {
        match self {
            Language::Python => "python",
        }
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
            .find(|l| l.as_str() == s)
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
    /// Wall-clock limit for the program, in milliseconds.
    pub timeout_ms: u64,
    /// Memory limit (RAM and swap together), in MiB.
    pub memory_mb: u64,
}

/// The verdict of one execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The program ran to completion and exited 0.
    Passed,
    /// The program exited non-zero.
    Failed,
    /// The wall-clock limit was reached and the program was killed.
    Timeout,
    /// The program was killed for exceeding its memory limit.
    MemoryLimit,
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
            Status::MemoryLimit => "memory_limit",
            Status::SandboxError => "sandbox_error",
            Status::Error => "error",
        }
    }
}

/// What the caller gets back for one execution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionResult {
    pub status: Status,
    /// Exit status of the program; `None` when it never ran or was killed by a signal.
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// True when stdout or stderr was cut at the capture limit.
    #[serde(default)]
    pub truncated: bool,
    /// Wall time of the program itself inside the sandbox.
    pub duration_ms: u64,
    /// Why the execution ended in `sandbox_error` or `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ExecutionResult {
    /// A result for work that never produced program output.
    pub fn error(status: Status, reason: impl Into<String>) -> Self {
        Self {
            status,
            exit_code: None,
            stdout: String::new(),
            stderr: String::new(),
            truncated: false,
            duration_ms: 0,
            reason: Some(reason.into()),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        rmp_serde::to_vec_named(self).expect("a result always serializes")
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, rmp_serde::decode::Error> {
        rmp_serde::from_slice(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn language_parses_and_names_the_supported_ones_on_error() {
        assert_eq!("python".parse::<Language>().unwrap(), Language::Python);
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
            reason: None,
        };
        assert_eq!(ExecutionResult::decode(&result.encode()).unwrap(), result);
        let json = serde_json::to_value(&result).unwrap();
        assert!(json.get("reason").is_none());
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
        rmp_serde::to_vec_named(self).expect("metadata always serializes")
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, rmp_serde::decode::Error> {
        rmp_serde::from_slice(bytes)
    }
}
