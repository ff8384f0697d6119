//! The contract between codegen-cluster processes.
//!
//! Everything that crosses a process boundary is defined here: the task envelope published to
//! RabbitMQ (MessagePack with named fields and a schema version), the execution request and
//! result types returned by the HTTP API, the queue and exchange names, and the Redis key layout.
//! Coordinators and workers of the same schema version can be mixed freely in one cluster.

pub mod api;
pub mod clock;
pub mod codec;
pub mod execution;
pub mod generation;
pub mod harness;
pub mod job;
pub mod keys;
pub mod progress;
pub mod queues;
pub mod task;

pub use clock::now_ms;
pub use execution::{
    ErrorKind, ExecutionMeta, ExecutionRequest, ExecutionResult, Language, Status,
};
pub use progress::Progress;
pub use task::{Envelope, SCHEMA_VERSION, Task, TaskId};
