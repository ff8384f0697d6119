//! Task messages: what the coordinator publishes and a worker consumes.

use serde::{Deserialize, Serialize};

use crate::execution::ExecutionRequest;
use crate::job::{ImplementTask, IntegrateTask, PlanTask};

/// Version of the envelope layout. A worker rejects (dead-letters) an envelope whose version it
/// does not know instead of guessing at its meaning.
pub const SCHEMA_VERSION: u16 = 1;

/// Identifies one task (and, for plain executions, the execution it carries). It doubles as the
/// idempotency key: a task delivered twice produces one stored result.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(transparent)]
pub struct TaskId(pub uuid::Uuid);

impl TaskId {
    /// A new, time-ordered id (UUIDv7), so ids sort by submission time in logs and Redis.
    pub fn new() -> Self {
        Self(uuid::Uuid::now_v7())
    }
}

impl Default for TaskId {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::str::FromStr for TaskId {
    type Err = uuid::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        uuid::Uuid::parse_str(s).map(Self)
    }
}

/// What a worker is asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Task {
    /// Run code in the sandbox and store the verdict; no model involved.
    Execute(ExecutionRequest),
    /// Ask the model to split a job's request into function specifications.
    Plan(PlanTask),
    /// Generate tests and an implementation for one function, test, repair.
    Implement(ImplementTask),
    /// Assemble a job's module, run all tests together, report quality.
    Integrate(IntegrateTask),
    /// Run (or go on with) an agent job's loop.
    Agent(crate::agent::AgentTask),
}

impl Task {
    /// Short name for logs and metric labels.
    pub fn kind(&self) -> &'static str {
        match self {
            Task::Execute(_) => "execute",
            Task::Plan(_) => "plan",
            Task::Implement(_) => "implement",
            Task::Integrate(_) => "integrate",
            Task::Agent(_) => "agent",
        }
    }

    /// The job a pipeline task belongs to (`None` for an execution).
    pub fn job_id(&self) -> Option<TaskId> {
        match self {
            Task::Execute(_) => None,
            Task::Plan(t) => Some(t.job_id),
            Task::Implement(t) => Some(t.job_id),
            Task::Integrate(t) => Some(t.job_id),
            Task::Agent(t) => Some(t.job_id),
        }
    }
}

/// The message body on the task queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    pub schema_version: u16,
    pub task_id: TaskId,
    /// Tenant the task is charged to; `None` when the cluster runs without API keys.
    #[serde(default)]
    pub tenant: Option<String>,
    /// Milliseconds since the Unix epoch at which the coordinator accepted the work.
    pub submitted_at_ms: u64,
    /// Microseconds since the Unix epoch at which this message was made (published): a
    /// task's queue wait at the precision its overhead is measured in. 0 from a sender
    /// that predates it.
    #[serde(default)]
    pub published_at_us: u64,
    /// The `x-request-id` of the API request that made the work (every task of a job carries
    /// its submission's), for the logs of whoever runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    pub task: Task,
}

/// Why an envelope could not be decoded. Never retried: the same bytes fail the same way.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("malformed envelope: {0}")]
    Malformed(#[from] crate::codec::DecodeError),
    #[error("unsupported schema version {found} (this build speaks {SCHEMA_VERSION})")]
    UnsupportedVersion { found: u16 },
}

impl Envelope {
    pub fn new(task_id: TaskId, tenant: Option<String>, submitted_at_ms: u64, task: Task) -> Self {
        Self {
            schema_version: SCHEMA_VERSION,
            task_id,
            tenant,
            submitted_at_ms,
            published_at_us: crate::clock::now_us(),
            request_id: None,
            task,
        }
    }

    /// The same envelope, carrying the id of the request that made the work.
    pub fn with_request_id(mut self, request_id: Option<String>) -> Self {
        self.request_id = request_id;
        self
    }

    /// MessagePack with named fields, so fields can be added without breaking older readers.
    pub fn encode(&self) -> Vec<u8> {
        crate::codec::encode(self)
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let envelope: Envelope = crate::codec::decode(bytes)?;
        if envelope.schema_version != SCHEMA_VERSION {
            return Err(DecodeError::UnsupportedVersion {
                found: envelope.schema_version,
            });
        }
        Ok(envelope)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::execution::Language;

    fn sample() -> Envelope {
        Envelope::new(
            TaskId::new(),
            Some("acme".into()),
            1_700_000_000_000,
            Task::Execute(ExecutionRequest {
                language: Language::Python,
                code: "print('hi')".into(),
                stdin: Some("in".into()),
                test: None,
                timeout_ms: 1000,
                cpu_time_ms: Some(500),
                compile_timeout_ms: None,
                memory_mb: 128,
                fresh_container: false,
                files: Default::default(),
                return_files: Vec::new(),
            }),
        )
    }

    #[test]
    fn envelope_round_trips_through_messagepack() {
        let envelope = sample();
        let decoded = Envelope::decode(&envelope.encode()).unwrap();
        assert_eq!(decoded, envelope);
    }

    #[test]
    fn envelope_uses_named_fields() {
        // Named fields (a map, not a positional array) are what lets a newer coordinator add a
        // field without breaking older workers.
        let bytes = sample().encode();
        assert_eq!(bytes[0] & 0xf0, 0x80, "top level is a fixmap");
        for field in ["schema_version", "task_id", "submitted_at_ms", "task"] {
            assert!(
                bytes.windows(field.len()).any(|w| w == field.as_bytes()),
                "field {field} not named in the encoding"
            );
        }
    }

    /// A pipeline task as builds before the typed payloads wrote it: one payload type for
    /// every step, `function` and `problem` optional.
    #[derive(Serialize)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    enum OldTask {
        Plan(OldJobTask),
        Implement(OldJobTask),
        Integrate(OldJobTask),
    }

    #[derive(Serialize)]
    struct OldJobTask {
        job_id: TaskId,
        function: Option<String>,
        problem: Option<String>,
    }

    #[test]
    fn tasks_queued_by_an_older_build_read_the_same() {
        let job_id = TaskId::new();
        let old = |task: OldTask| {
            let bytes = rmp_serde::to_vec_named(&task).unwrap();
            rmp_serde::from_slice::<Task>(&bytes).unwrap()
        };
        let payload = |function: Option<&str>, problem: Option<&str>| OldJobTask {
            job_id,
            function: function.map(Into::into),
            problem: problem.map(Into::into),
        };
        assert_eq!(
            old(OldTask::Plan(payload(None, Some("two functions named f")))),
            Task::Plan(PlanTask {
                job_id,
                problem: Some("two functions named f".into())
            })
        );
        assert_eq!(
            old(OldTask::Implement(payload(Some("add"), None))),
            Task::Implement(ImplementTask {
                job_id,
                function: "add".into()
            })
        );
        assert_eq!(
            old(OldTask::Integrate(payload(None, None))),
            Task::Integrate(IntegrateTask { job_id })
        );
        assert_eq!(
            Task::Integrate(IntegrateTask { job_id }).job_id(),
            Some(job_id)
        );
    }

    #[test]
    fn garbage_is_a_malformed_error() {
        let err = Envelope::decode(b"\x93not msgpack at all").unwrap_err();
        assert!(matches!(err, DecodeError::Malformed(_)), "{err}");
    }

    #[test]
    fn unknown_schema_version_is_rejected() {
        let mut envelope = sample();
        envelope.schema_version = SCHEMA_VERSION + 1;
        let bytes = rmp_serde::to_vec_named(&envelope).unwrap();
        let err = Envelope::decode(&bytes).unwrap_err();
        assert!(
            matches!(err, DecodeError::UnsupportedVersion { found } if found == SCHEMA_VERSION + 1)
        );
    }
}
