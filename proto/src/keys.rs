//! The Redis keys of executions. All keys of a cluster share one configurable prefix. The
//! keys of jobs, batches and the caches are built in `store` (`jobs.rs`, `cache.rs`), where
//! the Lua scripts that read and write them live.
//!
//! | key | value |
//! | --- | --- |
//! | `{prefix}:exec:{id}:meta` | MessagePack [`ExecutionMeta`](crate::execution) — written by the coordinator before publishing |
//! | `{prefix}:exec:{id}:result` | MessagePack [`ExecutionResult`](crate::ExecutionResult) — written once (`SET NX`) by whoever finishes the task |
//! | `{prefix}:exec:done` | pub/sub channel; the payload is the id of a finished execution |
//! | `{prefix}:job:events` | pub/sub channel; the payload is the id of a job with a new progress event |
//! | `{prefix}:batch:finished` | pub/sub channel; the payload is the id of a batch one of whose jobs has just finished |

use crate::TaskId;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    pub fn execution_meta(&self, id: TaskId) -> String {
        format!("{}:exec:{id}:meta", self.prefix)
    }

    pub fn execution_result(&self, id: TaskId) -> String {
        format!("{}:exec:{id}:result", self.prefix)
    }

    pub fn execution_done_channel(&self) -> String {
        format!("{}:exec:done", self.prefix)
    }

    pub fn job_events_channel(&self) -> String {
        format!("{}:job:events", self.prefix)
    }

    /// A job of a batch finished (the message is the batch's id).
    pub fn batch_finished_channel(&self) -> String {
        format!("{}:batch:finished", self.prefix)
    }

    /// A model limit's lease was released (the message is the limit's scope).
    pub fn lease_freed_channel(&self) -> String {
        format!("{}:limits:freed", self.prefix)
    }

    /// A provider asked the model's callers to pause (the message is the limit's scope and
    /// the pause's length in milliseconds).
    pub fn limits_paused_channel(&self) -> String {
        format!("{}:limits:paused", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_prefixed_and_distinct() {
        let keys = Keys::new("cg");
        let id: TaskId = "0190a5b2-0000-7000-8000-000000000000".parse().unwrap();
        assert_eq!(
            keys.execution_result(id),
            "cg:exec:0190a5b2-0000-7000-8000-000000000000:result"
        );
        assert_ne!(keys.execution_meta(id), keys.execution_result(id));
        assert_eq!(keys.execution_done_channel(), "cg:exec:done");
    }
}
