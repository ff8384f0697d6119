//! The contract between codegen-cluster processes.
//!
//! Everything that crosses a process boundary is defined here: the task envelope published to
//! RabbitMQ (MessagePack with named fields and a schema version, [`codec`]), the request,
//! result and view types of the HTTP API ([`api`]), a job's progress events ([`progress`]),
//! the report lines of the sandbox drivers ([`harness`]) and the queue and exchange names.
//! Redis key names are the store's own (`store::keys`).
//! Coordinators and workers of the same schema version can be mixed freely in one cluster.

pub mod agent;
pub mod api;
pub mod clock;
pub mod codec;
pub mod detect;
pub mod ending;
pub mod execution;
pub mod file;
pub mod generation;
pub mod harness;
pub mod job;
pub mod lesson;
pub mod progress;
pub mod queues;
pub mod session;
pub mod task;

pub use clock::{now_ms, now_us};
pub use execution::{
    CompileResult, CompileStatus, DATA_DIR, ErrorKind, ExecutionMeta, ExecutionRequest,
    ExecutionResult, Language, Status,
};
pub use file::FileContent;
pub use progress::Progress;
pub use task::{Envelope, SCHEMA_VERSION, Task, TaskId};
