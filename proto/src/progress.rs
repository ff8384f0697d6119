//! A job's progress events: what `GET /v1/jobs/{id}/events` streams, what the coordinator and
//! the workers append to the job's stream in Redis, what the CLI prints. One type for all of
//! them, so a renamed field is a compile error rather than a `?` in someone's terminal.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::ErrorKind;
use crate::TaskId;
use crate::job::{CacheOutcome, JobResult, JobStatus, Validation};

/// One progress event; its `event` field names it (and is the SSE event's name).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Progress {
    /// Accepted and queued for planning.
    Queued { job_id: TaskId },
    /// A worker asks the model for the functions.
    Planning,
    /// The plan was accepted: its functions, every one after its dependencies.
    Planned {
        functions: Vec<String>,
        /// Each function's dependencies (functions without any are left out): the edges of
        /// the job's graph.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        dependencies: BTreeMap<String, Vec<String>>,
    },
    /// The plan was rejected (a cycle, a missing dependency, …); the model is asked again.
    Replanning { problem: String },
    /// A verified function was reused from the function-level cache.
    FunctionCached { function: String },
    /// A function's implementation began.
    FunctionStarted {
        function: String,
        /// The worker that runs it: what the console lays its timeline by. A tenant's key
        /// reads an alias of it, the same within the job (`worker-3fa2c1`); an admin's the
        /// worker's own name (its host name and process id).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        worker: Option<String>,
    },
    /// One implementation attempt ran its tests.
    Attempt {
        function: String,
        /// 1 for the first attempt.
        attempt: u32,
        passed: bool,
        /// What failed, when it did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        error_kind: Option<ErrorKind>,
        /// How the attempt was checked when it was not `tested`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        validation: Option<Validation>,
        /// The worker that ran it, as for `function_started`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        worker: Option<String>,
    },
    /// A function is final: its tests pass, or no attempt is left.
    FunctionDone {
        function: String,
        passed: bool,
        attempts: u32,
    },
    /// An agent job recorded a step (its model's answer, or a call's observation).
    AgentStep { step: crate::agent::AgentStep },
    /// The job is final; its result is stored. Always the last event.
    Finished {
        status: JobStatus,
        all_tests_passed: bool,
        validation: Validation,
        cache: CacheOutcome,
        /// Why the job failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        failure: Option<String>,
    },
}

impl Progress {
    /// The `finished` event of `result`: one shape however the job ended.
    pub fn finished(result: &JobResult) -> Self {
        Progress::Finished {
            status: result.status,
            all_tests_passed: result.all_tests_passed,
            validation: result.validation,
            cache: result.metrics.cache,
            failure: result.failure.clone(),
        }
    }

    /// The event's name: its `event` field.
    pub fn name(&self) -> &'static str {
        match self {
            Progress::Queued { .. } => "queued",
            Progress::Planning => "planning",
            Progress::Planned { .. } => "planned",
            Progress::Replanning { .. } => "replanning",
            Progress::FunctionCached { .. } => "function_cached",
            Progress::FunctionStarted { .. } => "function_started",
            Progress::Attempt { .. } => "attempt",
            Progress::FunctionDone { .. } => "function_done",
            Progress::AgentStep { .. } => "agent_step",
            Progress::Finished { .. } => "finished",
        }
    }

    /// The event with the worker it names (if any) replaced by `f(worker)`.
    pub fn map_worker(mut self, f: impl FnOnce(&str) -> String) -> Self {
        if let Progress::FunctionStarted { worker, .. } | Progress::Attempt { worker, .. } =
            &mut self
            && let Some(name) = worker.as_mut()
        {
            *name = f(name);
        }
        self
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a progress event always serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_is_the_tag_serde_writes() {
        let events = [
            Progress::Queued {
                job_id: TaskId::new(),
            },
            Progress::Planning,
            Progress::Planned {
                functions: vec!["a".into(), "b".into()],
                dependencies: BTreeMap::from([("b".into(), vec!["a".into()])]),
            },
            Progress::Replanning {
                problem: "p".into(),
            },
            Progress::FunctionCached {
                function: "a".into(),
            },
            Progress::FunctionStarted {
                function: "a".into(),
                worker: Some("w1".into()),
            },
            Progress::Attempt {
                function: "a".into(),
                attempt: 1,
                passed: false,
                error_kind: Some(ErrorKind::WrongOutput),
                validation: None,
                worker: None,
            },
            Progress::FunctionDone {
                function: "a".into(),
                passed: true,
                attempts: 2,
            },
            Progress::Finished {
                status: JobStatus::Failed,
                all_tests_passed: false,
                validation: Validation::NotValidated,
                cache: CacheOutcome::Miss,
                failure: Some("f".into()),
            },
        ];
        for event in events {
            let json: serde_json::Value = serde_json::from_str(&event.to_json()).unwrap();
            assert_eq!(json["event"], event.name(), "{json}");
            assert_eq!(serde_json::from_value::<Progress>(json).unwrap(), event);
        }
    }

    #[test]
    fn only_the_worker_is_renamed() {
        let started = Progress::FunctionStarted {
            function: "a".into(),
            worker: Some("host-1".into()),
        };
        assert_eq!(
            started.map_worker(|w| format!("alias of {w}")),
            Progress::FunctionStarted {
                function: "a".into(),
                worker: Some("alias of host-1".into()),
            }
        );
        let planned = Progress::Planned {
            functions: vec!["a".into()],
            dependencies: BTreeMap::new(),
        };
        assert_eq!(planned.clone().map_worker(|_| "x".into()), planned);
    }

    #[test]
    fn the_wire_form_of_an_attempt_is_the_one_clients_already_read() {
        let attempt = Progress::Attempt {
            function: "sieve".into(),
            attempt: 2,
            passed: false,
            error_kind: Some(ErrorKind::Runtime),
            validation: None,
            worker: None,
        };
        assert_eq!(
            serde_json::to_value(&attempt).unwrap(),
            serde_json::json!({"event": "attempt", "function": "sieve", "attempt": 2,
                               "passed": false, "error_kind": "runtime"})
        );
    }
}
