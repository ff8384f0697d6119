//! Lessons: what a repair that worked changed, kept per tenant and offered to later repairs
//! (the pipeline's and an agent's). The rules that add, retrieve and retire them are the
//! `memory` crate's; this is what is stored and what the API answers.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{ErrorKind, Language, TaskId};

/// Whether a job's repairs use the tenant's lessons and add to them (`memory` of a job).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MemoryUse {
    /// Repairs are shown the nearest lessons; repairs that work leave one.
    #[default]
    On,
    /// Neither.
    Off,
}

impl MemoryUse {
    pub fn is_on(self) -> bool {
        self == MemoryUse::On
    }
}

/// What made a lesson.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LessonSource {
    /// A pipeline repair that turned a failing function passing.
    Repair,
    /// An agent's edit after which a failing `run_tests` passed.
    Agent,
}

/// One lesson: a failure, and the change that fixed it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Lesson {
    /// Content-derived: the same fix of the same failure is one lesson.
    #[schema(pattern = r"^[A-Za-z0-9_-]{1,64}$")]
    pub id: String,
    pub language: Language,
    pub error_kind: ErrorKind,
    /// The failure with its literals stripped (an exception's type and message, or the
    /// shape of a wrong answer): repairs of the same signature are retrieved first.
    pub signature: String,
    /// The failing case as the repair saw it (inputs, expected, got).
    pub case: String,
    /// The fix, as a unified diff of the code before and after.
    pub diff: String,
    /// The model's one-sentence analysis of what was wrong.
    pub analysis: String,
    /// The model that wrote the fix (provider/model).
    pub model: String,
    pub job: TaskId,
    pub function: String,
    pub source: LessonSource,
    pub created_ms: u64,
    /// The run that passed included the request's own (`given`) cases.
    #[serde(default)]
    pub given: bool,
}

/// One use of a lesson: a repair that was shown it, and whether that repair passed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LessonUse {
    pub lesson: String,
    pub job: TaskId,
    pub function: String,
    pub passed: bool,
    pub at_ms: u64,
}

/// A lesson as the API answers it: with where it is kept and how it has done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LessonView {
    #[serde(flatten)]
    pub lesson: Lesson,
    /// In the operators' shared set, offered to every tenant.
    pub shared: bool,
    /// Repairs that were shown it.
    pub retrieved: u64,
    /// Of those, the ones that passed.
    pub helped: u64,
    /// Its latest uses, newest first.
    pub uses: Vec<LessonUse>,
}

/// `GET /v1/lessons`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LessonList {
    /// Newest first; with `q`, nearest first.
    pub lessons: Vec<LessonView>,
}

/// `POST /v1/lessons/import`: what became of the lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LessonImport {
    /// Kept.
    pub added: u64,
    /// The set had them already.
    pub already: u64,
    /// Larger alone than the set's byte bound (`memory.max_bytes`).
    pub too_large: u64,
    /// Lessons evicted to make room (the least useful first).
    pub evicted: u64,
}
