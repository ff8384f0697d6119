//! Generation jobs: a natural-language request in, tested code out.
//!
//! A job is planned into functions (a DAG by their dependencies); each function is
//! implemented by its own task once its dependencies are done; an integration task assembles
//! the module. All job state lives in Redis; tasks carry only ids and read the rest from there,
//! so a task can be redelivered to any worker.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::generation::{Analysis, FunctionSpec, TestCase};
use crate::{ErrorKind, Language, TaskId};

/// `POST /v1/jobs` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobSubmission {
    pub instruction: String,
    /// The language of the generated code: one whose `Language::spec().generation` is set
    /// (the served document lists them). Absent: the one the instruction or the constraints
    /// name ("a bash script", "in Go", a `.js` file), else Python.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraints: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_requirements: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<u32>,
    /// How many implementations a function's first attempt asks for (1 to 10, default 1):
    /// all run against the tests in one sandbox run, and the one that passes every given test
    /// and the most generated ones is kept, ties broken by how many candidates agree with it
    /// (docs/generation.md, "Candidates").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidates: Option<u32>,
    /// Most tokens (prompt and completion, every call of the job) the job may spend; default
    /// and ceiling are the operator's (`coordinator.default_max_tokens_total`,
    /// `coordinator.max_tokens_total_limit`). Checked before each model call: once spent, each
    /// function stops with its best code so far and the job ends with `stopped_by: budget`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens_total: Option<u64>,
    /// Where to POST the job's result once it ends (signed; see docs/api.md, "Webhooks"). An
    /// `http(s)` URL whose host the operator allows (`coordinator.webhook_allow`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback_url: Option<String>,
    /// What the job does: `generate` (the default) writes code from the instruction; `debug`
    /// finds and fixes the cause of `error` in `code`; `refactor` improves `code` toward
    /// `goals` while its behaviour stays the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// `debug` and `refactor`: the code to work on (one module in the job's language).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// `debug`: the error the code raised, or how it misbehaves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `refactor`: what to improve (e.g. `readability`, `types`, `performance`); default
    /// `readability`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goals: Option<Vec<String>>,
    /// `agent`: files put into the agent's working directory before its first step (path →
    /// UTF-8 content).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<BTreeMap<String, String>>,
    /// `agent`: the run's budgets and sampling (docs/agent.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<crate::agent::AgentSettings>,
    /// `off`: its repairs are shown no lessons and leave none (docs/generation.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<crate::lesson::MemoryUse>,
}

/// What a job does with its request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Write code from the instruction.
    #[default]
    Generate,
    /// Find the cause of an error in given code and fix it: a test that reproduces it first.
    Debug,
    /// Improve given code toward goals: its behaviour, pinned by tests first, stays the same.
    Refactor,
    /// A tool-using agent on a session of its own: the model decides each next step (run
    /// code or a command, read, write and list files, install packages) until it finishes.
    Agent,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Generate => "generate",
            Mode::Debug => "debug",
            Mode::Refactor => "refactor",
            Mode::Agent => "agent",
        }
    }
}

/// The modes that rework given code: every [`Mode`] but `Generate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReworkMode {
    Debug,
    Refactor,
}

impl Mode {
    /// The rework a job of this mode does to its given code (`None`: it writes code anew).
    pub fn rework(self) -> Option<ReworkMode> {
        match self {
            Mode::Generate | Mode::Agent => None,
            Mode::Debug => Some(ReworkMode::Debug),
            Mode::Refactor => Some(ReworkMode::Refactor),
        }
    }
}

impl From<ReworkMode> for Mode {
    fn from(mode: ReworkMode) -> Self {
        match mode {
            ReworkMode::Debug => Mode::Debug,
            ReworkMode::Refactor => Mode::Refactor,
        }
    }
}

/// A `debug` or `refactor` job's given code and what to do with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rework {
    pub mode: ReworkMode,
    pub code: String,
    /// `Debug`: the error or the misbehaviour.
    #[serde(default)]
    pub error: Option<String>,
    /// `Refactor`: what to improve.
    #[serde(default)]
    pub goals: Vec<String>,
}

/// A validated job request, as stored with the job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRequest {
    pub instruction: String,
    pub language: Language,
    /// Why this language: named in `language`, named by the request's words, or the default.
    #[serde(default)]
    pub language_reason: String,
    #[serde(default)]
    pub constraints: Option<String>,
    #[serde(default)]
    pub test_requirements: Option<String>,
    /// Implementation attempts per function (first one included).
    pub max_iterations: u32,
    /// Implementations asked for a function's first attempt, the best kept.
    #[serde(default = "one")]
    pub candidates: u32,
    /// Most tokens the job may spend (`None`: a job stored before budgets existed, unbounded).
    #[serde(default)]
    pub max_tokens_total: Option<u64>,
    /// A `debug` or `refactor` job's given code; `None`: the job generates.
    #[serde(default)]
    pub rework: Option<Rework>,
    /// An `agent` job's run; `None`: a pipeline job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<crate::agent::AgentRequest>,
    /// Whether its repairs use the tenant's lessons and add to them.
    #[serde(default)]
    pub memory: crate::lesson::MemoryUse,
}

fn one() -> u32 {
    1
}

impl JobRequest {
    pub fn mode(&self) -> Mode {
        if self.agent.is_some() {
            return Mode::Agent;
        }
        self.rework
            .as_ref()
            .map_or(Mode::Generate, |r| r.mode.into())
    }
}

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    Queued,
    Planning,
    Running,
    Integrating,
    Succeeded,
    Failed,
    /// Stopped by its tenant (`DELETE /v1/jobs/{id}`), with what it had produced.
    Cancelled,
}

impl JobStatus {
    /// The statuses a job ends in; everything else is on the way. The one place the rule
    /// lives: the store's scripts receive it from here, and clients call [`Self::is_final`].
    pub const FINAL: [JobStatus; 3] = [
        JobStatus::Succeeded,
        JobStatus::Failed,
        JobStatus::Cancelled,
    ];

    pub fn is_final(self) -> bool {
        Self::FINAL.contains(&self)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Planning => "planning",
            JobStatus::Running => "running",
            JobStatus::Integrating => "integrating",
            JobStatus::Succeeded => "succeeded",
            JobStatus::Failed => "failed",
            JobStatus::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for JobStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the coordinator stores when it accepts a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobMeta {
    pub id: TaskId,
    #[serde(default)]
    pub tenant: Option<String>,
    pub request: JobRequest,
    pub submitted_at_ms: u64,
    /// How often the plan was rejected and asked for again.
    #[serde(default)]
    pub replans: u32,
    /// What planning spent (all plan attempts).
    #[serde(default)]
    pub plan_tokens: Tokens,
    #[serde(default)]
    pub plan_model_calls: u32,
    /// Solution-cache key of the request, when caching is on.
    #[serde(default)]
    pub cache_key: Option<String>,
    /// Most functions its plan may have (the coordinator's `max_functions` when it accepted
    /// the job): the worker that checks the plan applies it.
    #[serde(default = "default_max_functions")]
    pub max_functions: u32,
    /// The `x-request-id` of the request that submitted it; its tasks carry it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// [`JobMeta::max_functions`] of a job accepted before it was recorded.
pub const DEFAULT_MAX_FUNCTIONS: u32 = 16;

fn default_max_functions() -> u32 {
    DEFAULT_MAX_FUNCTIONS
}

/// Whitespace-insensitive form of a text for cache keys.
pub fn normalise(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn digest(parts: &[&str]) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for part in parts {
        // Length-prefixed, so no two different part lists hash alike.
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part.as_bytes());
    }
    hex::encode(hasher.finalize())
}

/// The solution-cache key: the normalised request and the model that answers it (`model`
/// names provider, model and prompt version).
/// A `debug` or `refactor` job's key adds its mode and given code (a generating job's key is
/// as it was before modes existed).
pub fn solution_cache_key(request: &JobRequest, model: &str) -> String {
    let mut parts = vec![
        "solution/v1".to_owned(),
        normalise(&request.instruction),
        request.language.as_str().to_owned(),
        normalise(request.constraints.as_deref().unwrap_or("")),
        normalise(request.test_requirements.as_deref().unwrap_or("")),
        request.max_iterations.to_string(),
        model.to_owned(),
    ];
    parts.extend(rework_parts(request.rework.as_ref()));
    // One candidate keeps the key it had before candidates existed.
    if request.candidates > 1 {
        parts.push(format!("candidates {}", request.candidates));
    }
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    digest(&parts)
}

/// What a rework adds to a cache key: its mode, the given code exactly (indentation can be
/// meaning), the error and the goals.
fn rework_parts(rework: Option<&Rework>) -> Vec<String> {
    let Some(rework) = rework else {
        return Vec::new();
    };
    vec![
        Mode::from(rework.mode).as_str().to_owned(),
        rework.code.clone(),
        normalise(rework.error.as_deref().unwrap_or("")),
        rework
            .goals
            .iter()
            .map(|g| normalise(g))
            .collect::<Vec<_>>()
            .join("\n"),
    ]
}

/// The function-level cache key: the spec, the code of its dependencies, and the model.
pub fn function_cache_key(
    language: Language,
    spec: &FunctionSpec,
    dependency_code: &[(String, String)],
    model: &str,
    rework: Option<&Rework>,
    request: Option<&RequestCode>,
) -> String {
    let spec = serde_json::to_string(spec).unwrap_or_default();
    let deps: String = dependency_code
        .iter()
        .map(|(name, code)| format!("{name}\n{code}\n"))
        .collect();
    let mut parts = vec![
        "function/v1".to_owned(),
        language.as_str().to_owned(),
        spec,
        deps,
        model.to_owned(),
    ];
    parts.extend(rework_parts(rework));
    // A function of a request's own stubs: its code (the preamble and the examples it tests
    // against come from it) decides the outcome too.
    if let Some(request) = request {
        parts.push(format!("request\n{}", request.code));
    }
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    digest(&parts)
}

/// The validated plan: specs in a topological order, and who depends on whom.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Specs in an order where every function comes after its dependencies.
    pub specs: Vec<FunctionSpec>,
    /// For each function, the functions that depend on it.
    pub dependants: BTreeMap<String, Vec<String>>,
    /// Why the model's plan was refused, when it was: such a plan starts nothing and ends its
    /// job failed. Stored like a plan so that of two runs of one plan task (a stalled worker's
    /// delivery handed on) the one that stores first decides, refused or started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// The request's own code, when the plan is its stubs (made with no model call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_code: Option<RequestCode>,
}

/// Where a job's plan came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PlanSource {
    /// The model split the request into functions.
    #[default]
    Model,
    /// The request wrote its functions' stubs (signature and docstring): they are the plan,
    /// made with no model call, and their examples are test cases marked `given`.
    Request,
}

/// What a request that wrote its functions' stubs gave besides them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestCode {
    /// The request's code without the stubs (imports, functions it implemented, constants),
    /// which every module of the job starts with.
    pub preamble: String,
    /// The request's code as it was given, stubs included: the first implementation's prompt.
    pub code: String,
    /// The examples it gave, as test cases (`given`), by function.
    pub given: BTreeMap<String, Vec<TestCase>>,
}

impl Plan {
    /// The plan `specs` stand for, refused for `reason`.
    pub fn refused(specs: Vec<FunctionSpec>, reason: String) -> Self {
        Self {
            specs,
            dependants: BTreeMap::new(),
            refused: Some(reason),
            request_code: None,
        }
    }

    /// Where the plan came from.
    pub fn source(&self) -> PlanSource {
        match self.request_code {
            Some(_) => PlanSource::Request,
            None => PlanSource::Model,
        }
    }

    /// The code every module of the job starts with (empty unless the request gave some).
    pub fn preamble(&self) -> &str {
        self.request_code
            .as_ref()
            .map_or("", |r| r.preamble.as_str())
    }

    pub fn spec(&self, name: &str) -> Option<&FunctionSpec> {
        self.specs.iter().find(|s| s.name == name)
    }
}

/// One case's outcome in the sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TestResult {
    pub function: String,
    pub test: String,
    pub passed: bool,
    #[serde(default)]
    #[schema(required = true)]
    pub actual_output: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub error_kind: Option<ErrorKind>,
    pub duration_ms: f64,
}

/// One implementation attempt that failed, and what the repair changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Improvement {
    pub function: String,
    pub attempt: u32,
    pub error_kind: ErrorKind,
    pub error: String,
    /// What the next attempt changed, from the model's analysis.
    #[serde(default)]
    #[schema(required = true)]
    pub fix: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub analysis: Option<Analysis>,
    /// The lessons the next attempt's repair was shown (ids, nearest first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lessons: Vec<String>,
}

/// Tokens and calls spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Tokens {
    pub prompt: u64,
    pub completion: u64,
}

/// How code was checked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Validation {
    /// Its test cases ran in the sandbox.
    #[default]
    Tested,
    /// No sandbox was available: syntax and lint checks only, nothing was run.
    StaticAnalysisOnly,
    /// Nothing was checked: the job failed before any code was (planning failed, the job
    /// was dead-lettered or overdue).
    #[serde(rename = "none")]
    NotValidated,
}

impl Validation {
    pub fn as_str(self) -> &'static str {
        match self {
            Validation::Tested => "tested",
            Validation::StaticAnalysisOnly => "static_analysis_only",
            Validation::NotValidated => "none",
        }
    }
}

impl std::fmt::Display for Validation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a job was answered from the solution cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CacheOutcome {
    Hit,
    #[default]
    Miss,
}

impl CacheOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheOutcome::Hit => "hit",
            CacheOutcome::Miss => "miss",
        }
    }
}

impl std::fmt::Display for CacheOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A function's state, written after every attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionOutcome {
    pub name: String,
    /// `true` once its tests pass; `false` with `failure` when it cannot be made to.
    pub passed: bool,
    /// Final: no more attempts will be made.
    pub done: bool,
    pub tests: Vec<TestCase>,
    pub code: Option<String>,
    pub test_results: Vec<TestResult>,
    pub history: Vec<Improvement>,
    pub attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    pub tokens: Tokens,
    pub model_calls: u32,
    pub generation_ms: u64,
    pub execution_ms: u64,
    /// CPU time of the function's sandbox runs.
    #[serde(default)]
    pub cpu_ms: u64,
    /// Reused from the function-level cache.
    #[serde(default)]
    pub cached: bool,
    #[serde(default)]
    pub validation: Validation,
    /// A `debug` or `refactor` job's function: what its cases did on the given code, and the
    /// change's analysis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rework: Option<ReworkOutcome>,
    /// Generated cases dropped because the cases the request gave contradict them
    /// (`JobResult::contradicted_tests`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub contradicted: Vec<TestCase>,
    /// What the calls that wrote its generated tests spent (part of `tokens`).
    #[serde(default)]
    pub test_tokens: Tokens,
    /// The limit that stopped its attempts early, if one did (its code is then the best
    /// attempt's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<StoppedBy>,
    /// The lesson its passing repair left (removed again if its code later fails a case the
    /// request gave).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learned: Option<String>,
}

/// What stopped a function before its attempts ran out. Ordered by precedence: a job
/// says the greatest of its functions' (a spent budget over a repair that did not help).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StoppedBy {
    /// A repair passed no more cases than the best attempt before it, as many times in a row
    /// as the worker's `repair_patience`: asking again with the same evidence was not worth
    /// its call.
    NoProgress,
    /// The job's token budget (`max_tokens_total`) was spent.
    Budget,
}

/// How many of a kind of test case passed, and what writing them cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Tally {
    pub passed: u32,
    pub total: u32,
    /// Tokens spent writing them (none for the cases the request gave).
    pub tokens: Tokens,
}

/// What a `debug` or `refactor` job's cases did on the given code, and why the code changed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReworkOutcome {
    /// `debug`: the cases that failed on the given code (they reproduce the error).
    #[serde(default)]
    pub reproduced: Vec<String>,
    /// `refactor`: the cases the given code did not pass (they do not describe what it does),
    /// left out.
    #[serde(default)]
    pub dropped: Vec<String>,
    /// The analysis the model gave with the code that stands (root cause, changes).
    #[serde(default)]
    pub analysis: Option<Analysis>,
}

impl FunctionOutcome {
    /// A function before its first attempt.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            passed: false,
            done: false,
            tests: vec![],
            code: None,
            test_results: vec![],
            history: vec![],
            attempts: 0,
            failure: None,
            tokens: Tokens::default(),
            model_calls: 0,
            generation_ms: 0,
            execution_ms: 0,
            cpu_ms: 0,
            cached: false,
            validation: Validation::Tested,
            rework: None,
            contradicted: vec![],
            test_tokens: Tokens::default(),
            stopped_by: None,
            learned: None,
        }
    }
}

// The generation pipeline's task payloads; everything else is read from Redis. Their fields
// keep the names of the one payload type they replace, so a task queued by an older build
// reads the same.

/// Split a job's request into function specifications.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanTask {
    pub job_id: TaskId,
    /// After a rejected plan: the problem to quote to the model.
    #[serde(default)]
    pub problem: Option<String>,
}

/// Write tests and an implementation of one function of a job's plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImplementTask {
    pub job_id: TaskId,
    pub function: String,
}

/// Assemble a job's module and run every test together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntegrateTask {
    pub job_id: TaskId,
}

/// The quality report of a finished job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Quality {
    /// 0–1, the weighted sum documented in docs/api.md ("Quality score").
    pub score: f64,
    pub tests_passed: u32,
    pub tests_total: u32,
    /// Line coverage of the module by its tests, 0–1; `null` when it was not measured (then
    /// `coverage` is among `unmeasured` and left out of the score).
    #[schema(required = true)]
    pub coverage: Option<f64>,
    /// Cyclomatic complexity per function (empty when not measured).
    pub complexity: BTreeMap<String, u32>,
    /// Share of functions with a docstring, 0–1; `null` when it was not measured.
    #[schema(required = true)]
    pub docstrings: Option<f64>,
    /// Calls such as `eval`, `subprocess`, `os.system` or sockets found by a scan (reported,
    /// never the security boundary).
    pub dangerous_calls: Vec<String>,
    /// The measures that could not be taken (e.g. `coverage` in a language without a coverage
    /// tool, `warnings` where no linter ran): `null` or empty above, and left out of the
    /// score, whose other weights then count in proportion.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unmeasured: Vec<String>,
    /// The compiler's or linter's findings about the module's own lines (`line N: message`):
    /// pycodestyle's and pyflakes' (Python), `go vet`'s, `javac -Xlint`'s, shellcheck's,
    /// rustc's, gcc's (reported, not scored; `warnings` is unmeasured where none ran).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Timings and spend of a job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JobMetrics {
    pub generation_ms: u64,
    /// Wall time of the job's sandbox runs.
    pub execution_ms: u64,
    /// CPU time of the job's sandbox runs (their containers' cgroups).
    #[serde(default)]
    pub sandbox_cpu_ms: u64,
    pub total_ms: u64,
    pub model_calls: u32,
    pub tokens: Tokens,
    /// Whether the solution cache answered the job.
    pub cache: CacheOutcome,
}

/// The result of a job, in design.md's shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JobResult {
    pub job_id: TaskId,
    pub status: JobStatus,
    pub instruction: String,
    pub language: Language,
    /// Why this language (named in the request's `language`, found in its words, or the
    /// default).
    #[serde(default)]
    pub language_reason: String,
    /// Where the plan (`function_specs`) came from.
    #[serde(default)]
    pub plan_source: PlanSource,
    pub function_specs: Vec<FunctionSpec>,
    pub implementations: BTreeMap<String, String>,
    pub tests: BTreeMap<String, Vec<TestCase>>,
    /// Generated cases left out because the request's own cases contradict them: the same
    /// inputs with another expectation, or (with several candidates) no candidate that passes
    /// every given case passes them; by function.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub contradicted_tests: BTreeMap<String, Vec<TestCase>>,
    pub test_results: Vec<TestResult>,
    pub all_tests_passed: bool,
    /// The final verdicts of the cases the request gave (its doctests and examples).
    #[serde(default)]
    pub passed_given: Tally,
    /// The final verdicts of the cases the model wrote, and what writing them cost.
    #[serde(default)]
    pub passed_generated: Tally,
    /// `budget` when the job's token budget stopped it (`failure` says what was spent);
    /// `no_progress` when a function's repairs stopped passing more cases. Its code is then
    /// each function's best attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub stopped_by: Option<StoppedBy>,
    pub improvement_history: Vec<Improvement>,
    pub documentation: String,
    pub quality: Quality,
    pub metrics: JobMetrics,
    /// Why the job failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub failure: Option<String>,
    /// The job's webhook (`callback_url`) and its delivery attempts, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub webhook: Option<crate::api::Webhook>,
    /// `tested`; `static_analysis_only` when no sandbox could run the tests; `none` when the
    /// job failed before any code was checked.
    pub validation: Validation,
    pub manual_review_recommended: bool,
    /// A `debug` or `refactor` job's change to the given code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub change: Option<Change>,
    /// An `agent` job's answer, files and totals (its steps: `GET /v1/jobs/{id}/transcript`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub agent: Option<crate::agent::AgentOutcome>,
}

/// What a `debug` or `refactor` job changed in the given code, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Change {
    pub mode: Mode,
    /// The function the job's cases call (the given code's entry point).
    pub function: String,
    /// A unified diff from the given code to the result's (`implementations[function]`).
    pub diff: String,
    /// `debug`: why the given code failed; `refactor`: what held it back against the goals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub root_cause: Option<String>,
    /// What the change does (`refactor`: one line per goal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub changes: Option<String>,
    /// `debug`: the cases that failed on the given code (they reproduce the error); each is in
    /// `tests` and `test_results`.
    #[serde(default)]
    pub reproducing_tests: Vec<String>,
    /// `refactor`: cases the model wrote that the given code did not pass (they did not
    /// describe what it does), left out.
    #[serde(default)]
    pub dropped_tests: Vec<String>,
    /// `refactor`: the goals.
    #[serde(default)]
    pub goals: Vec<String>,
    /// `refactor`: the given code's quality, by the same measures as `quality`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub quality_before: Option<Quality>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(instruction: &str) -> JobRequest {
        JobRequest {
            instruction: instruction.into(),
            language: Language::Python,
            language_reason: String::new(),
            constraints: None,
            test_requirements: None,
            max_iterations: 3,
            candidates: 1,
            max_tokens_total: None,
            rework: None,
            agent: None,
            memory: Default::default(),
        }
    }

    #[test]
    fn cache_keys_ignore_whitespace_but_not_meaning_or_model() {
        let a = solution_cache_key(&request("sum  the\nprimes "), "openai/m@v1");
        assert_eq!(
            a,
            solution_cache_key(&request("sum the primes"), "openai/m@v1")
        );
        assert_ne!(
            a,
            solution_cache_key(&request("sum the Primes"), "openai/m@v1")
        );
        assert_ne!(
            a,
            solution_cache_key(&request("sum the primes"), "openai/m@v2")
        );
        let mut constrained = request("sum the primes");
        constrained.constraints = Some("no loops".into());
        assert_ne!(a, solution_cache_key(&constrained, "openai/m@v1"));
        // A debug job of the same words is another job, and so is one of other code or mode.
        let rework = |mode, code: &str| {
            let mut r = request("sum the primes");
            r.rework = Some(Rework {
                mode,
                code: code.into(),
                error: Some("IndexError".into()),
                goals: vec![],
            });
            solution_cache_key(&r, "openai/m@v1")
        };
        let debug = rework(ReworkMode::Debug, "def f():\n    return 1\n");
        assert_ne!(a, debug);
        assert_ne!(
            debug,
            rework(ReworkMode::Refactor, "def f():\n    return 1\n")
        );
        assert_ne!(debug, rework(ReworkMode::Debug, "def f():\n  return 1\n"));
        assert_eq!(debug, rework(ReworkMode::Debug, "def f():\n    return 1\n"));
    }
}

impl JobResult {
    pub fn encode(&self) -> Vec<u8> {
        crate::codec::encode(self)
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, crate::codec::DecodeError> {
        crate::codec::decode(bytes)
    }
}

/// A batch of jobs submitted together (`POST /v1/batches`), as stored in Redis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    pub id: TaskId,
    #[serde(default)]
    pub tenant: Option<String>,
    /// The jobs, in the order of the submitted lines.
    pub jobs: Vec<TaskId>,
    pub submitted_at_ms: u64,
}

#[cfg(test)]
mod wire_tests {
    use super::*;

    /// Results stored before the strings became enums still decode: the enums write the same
    /// strings.
    #[test]
    fn results_stored_with_string_fields_still_decode() {
        #[derive(Serialize)]
        struct OldMetrics {
            generation_ms: u64,
            execution_ms: u64,
            total_ms: u64,
            model_calls: u32,
            tokens: Tokens,
            cache: String,
        }
        #[derive(Serialize)]
        struct OldTestResult {
            function: String,
            test: String,
            passed: bool,
            actual_output: serde_json::Value,
            error_kind: Option<String>,
            duration_ms: f64,
        }
        #[derive(Serialize)]
        struct OldResult {
            job_id: TaskId,
            status: JobStatus,
            instruction: String,
            language: Language,
            function_specs: Vec<FunctionSpec>,
            implementations: BTreeMap<String, String>,
            tests: BTreeMap<String, Vec<TestCase>>,
            test_results: Vec<OldTestResult>,
            all_tests_passed: bool,
            improvement_history: Vec<Improvement>,
            documentation: String,
            quality: Quality,
            metrics: OldMetrics,
            failure: Option<String>,
            validation: String,
            manual_review_recommended: bool,
        }
        let old = OldResult {
            job_id: TaskId::new(),
            status: JobStatus::Failed,
            instruction: "i".into(),
            language: Language::Python,
            function_specs: vec![],
            implementations: BTreeMap::new(),
            tests: BTreeMap::new(),
            test_results: vec![OldTestResult {
                function: "f".into(),
                test: "t".into(),
                passed: false,
                actual_output: serde_json::Value::Null,
                error_kind: Some("memory_limit".into()),
                duration_ms: 1.0,
            }],
            all_tests_passed: false,
            improvement_history: vec![],
            documentation: String::new(),
            quality: Quality::default(),
            metrics: OldMetrics {
                generation_ms: 0,
                execution_ms: 0,
                total_ms: 5,
                model_calls: 0,
                tokens: Tokens::default(),
                cache: "hit".into(),
            },
            failure: Some("why".into()),
            validation: "none".into(),
            manual_review_recommended: true,
        };
        let new = JobResult::decode(&rmp_serde::to_vec_named(&old).unwrap()).unwrap();
        assert_eq!(new.validation, Validation::NotValidated);
        assert_eq!(new.metrics.cache, CacheOutcome::Hit);
        assert_eq!(new.test_results[0].error_kind, Some(ErrorKind::MemoryLimit));
        // And the JSON the API answers is unchanged.
        let json = serde_json::to_value(&new).unwrap();
        assert_eq!(json["validation"], "none");
        assert_eq!(json["metrics"]["cache"], "hit");
        assert_eq!(json["test_results"][0]["error_kind"], "memory_limit");
    }
}
