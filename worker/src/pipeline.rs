//! The worker's side of the generation pipeline: plan, implement (tests → code → run →
//! repair), integrate. Every step reads its inputs from Redis, writes its outputs there, and
//! only then publishes an event for the coordinators.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use broker::{Broker, Outgoing};
use model::prompts::{self, Attempt, DependencyCode, Failure};
use model::{Model, Phase};
use proto::generation::{FunctionSpecs, Implementation, TestCase, TestCases};
use proto::harness::{self, CasesReport, QualityReport, ReportError};
use proto::job::{
    CacheOutcome, Event, FunctionOutcome, Improvement, JobMeta, JobMetrics, JobResult, JobStatus,
    JobTask, Plan, Quality, TestResult, Validation,
};
use proto::{ErrorKind, ExecutionRequest, Language, Progress, Status, TaskId, now_ms};
use sandbox::Sandbox;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use store::{CacheStore, JobStore};

use crate::gate::{Dependency, Gate};

/// Pipeline settings (`[worker.pipeline]`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// Everything one task may spend on model calls.
    #[serde(with = "humantime_serde")]
    pub task_deadline: Duration,
    /// Limit per test case, in milliseconds.
    pub case_timeout_ms: u64,
    /// Limit per sandbox run (all cases of a function), in milliseconds.
    pub run_timeout_ms: u64,
    /// Memory per sandbox run, in MiB.
    pub memory_mb: u64,
    /// How many test cases to ask for.
    pub min_cases: u32,
    pub max_cases: u32,
    /// When no sandbox is available for `sandbox_wait`, finish with syntax and lint checks
    /// only (results marked `static_analysis_only`, never as tested) instead of waiting longer.
    pub static_fallback: bool,
    /// How long a sandbox run waits for an unreachable Docker engine before it gives up
    /// (static checks with `static_fallback`, else the task waits at the worker's level).
    #[serde(with = "humantime_serde")]
    pub sandbox_wait: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            task_deadline: Duration::from_secs(15 * 60),
            case_timeout_ms: 5_000,
            run_timeout_ms: 60_000,
            memory_mb: 512,
            min_cases: 4,
            max_cases: 12,
            static_fallback: true,
            sandbox_wait: Duration::from_secs(60),
        }
    }
}

/// Why a pipeline step did not finish.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A dependency (Redis, the broker, Docker, the model) failed: the task is worth running
    /// again once it answers. The worker asks the [`Gate`] whether it is down (then the task
    /// waits for it) or answers (then the failure is the task's own).
    #[error("retry later ({dependency}): {reason}")]
    Retry {
        dependency: Dependency,
        reason: String,
    },
    /// The task refers to something that does not exist (an expired job): drop it.
    #[error("dropped: {0}")]
    Drop(String),
}

tokio::task_local! {
    /// Milliseconds the current task spent in sandbox runs, for its `task finished` log line.
    pub static SANDBOX_MS: std::cell::Cell<u64>;
}

/// A store (Redis) failure.
fn redis(e: impl std::fmt::Display) -> Error {
    Error::Retry {
        dependency: Dependency::Redis,
        reason: e.to_string(),
    }
}

/// A model that is unreachable (or too slow) may answer later: the task is handed back and
/// the broker's delivery limit bounds how long the job waits. Anything else fails for good.
fn model_error(what: Option<&str>, e: &model::Error) -> Error {
    let reason = match what {
        Some(what) => format!("{what} failed: {e}"),
        None => e.to_string(),
    };
    if e.is_retryable() {
        Error::Retry {
            dependency: Dependency::Model,
            reason,
        }
    } else {
        Error::Drop(reason)
    }
}

/// The pipeline's task kinds (`proto::Task` without `Execute`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Plan,
    Implement,
    Integrate,
}

impl Step {
    /// The task's kind, as `proto::Task::kind` names it in logs and metric labels.
    pub fn kind(self) -> &'static str {
        match self {
            Step::Plan => "plan",
            Step::Implement => "implement",
            Step::Integrate => "integrate",
        }
    }
}

/// Handles plan, implement and integrate tasks.
#[derive(Clone)]
pub struct Pipeline {
    pub(crate) options: Options,
    pub(crate) jobs: Arc<dyn JobStore>,
    pub(crate) model: Option<Model>,
    pub(crate) broker: Arc<dyn Broker>,
    pub(crate) sandbox: Arc<dyn Sandbox>,
    /// The function-level and solution caches, and the model identity that keys them.
    pub(crate) cache: Option<(Arc<dyn CacheStore>, String)>,
    /// Which dependencies are down; shared with the worker.
    pub(crate) gate: Gate,
    /// `codegen_job_seconds`, once the pipeline belongs to a worker.
    pub(crate) job_seconds: Option<prometheus::HistogramVec>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("model", &self.model.as_ref().map(Model::describe))
            .finish()
    }
}

/// One run of a function's cases.
#[derive(Debug, Clone, Default)]
struct CaseRun {
    passed: bool,
    results: Vec<TestResult>,
    /// What failed first, when something did.
    error_kind: Option<ErrorKind>,
    error: String,
    duration_ms: u64,
}

impl Pipeline {
    pub fn new(
        options: Options,
        jobs: Arc<dyn JobStore>,
        model: Option<Model>,
        broker: Arc<dyn Broker>,
        sandbox: Arc<dyn Sandbox>,
    ) -> Self {
        Self {
            options,
            jobs,
            model,
            broker,
            sandbox,
            cache: None,
            gate: Gate::default(),
            job_seconds: None,
        }
    }

    /// Reuses verified functions and stores finished solutions, keyed by `model`
    /// (`model::identity`).
    pub fn with_cache(mut self, cache: Arc<dyn CacheStore>, model: String) -> Self {
        self.cache = Some((cache, model));
        self
    }

    /// Runs one task of `step`.
    pub async fn run(&self, step: Step, task: &JobTask) -> Result<(), Error> {
        match step {
            Step::Plan => self.plan(task).await,
            Step::Implement => self.implement(task).await,
            Step::Integrate => self.integrate(task).await,
        }
    }

    async fn meta(&self, job: TaskId) -> Result<JobMeta, Error> {
        self.jobs
            .job_meta(job)
            .await
            .map_err(redis)?
            .ok_or_else(|| Error::Drop(format!("job {job} not found (expired?)")))
    }

    async fn plan_of(&self, job: TaskId) -> Result<Plan, Error> {
        self.jobs
            .plan(job)
            .await
            .map_err(redis)?
            .ok_or_else(|| Error::Drop(format!("job {job} has no plan")))
    }

    async fn emit(&self, event: Event) -> Result<(), Error> {
        self.broker
            .publish_event(Outgoing {
                message_id: event.job_id().to_string(),
                body: event.encode(),
            })
            .await
            .map_err(|e| Error::Retry {
                dependency: Dependency::Broker,
                reason: e.to_string(),
            })
    }

    async fn progress(&self, job: TaskId, event: Progress) {
        if let Err(e) = self.jobs.push_event(job, &event).await {
            tracing::debug!(%job, error = %e, "cannot record a progress event");
        }
    }

    /// Stores a partial outcome; `Drop` when another run of the task (a redelivery or a
    /// duplicate) already stored the final one, which then stands.
    async fn save(&self, job: TaskId, outcome: &FunctionOutcome) -> Result<(), Error> {
        if self.jobs.put_function(job, outcome).await.map_err(redis)? {
            Ok(())
        } else {
            Err(Error::Drop(format!(
                "{} was finished by another run of its task",
                outcome.name
            )))
        }
    }

    fn model(&self) -> Result<&Model, String> {
        self.model
            .as_ref()
            .ok_or_else(|| "no model is configured for this worker ([model] settings)".to_string())
    }

    fn deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + self.options.task_deadline
    }

    /// Asks the model for function specifications and stores them.
    pub async fn plan(&self, task: &JobTask) -> Result<(), Error> {
        let job = task.job_id;
        let mut meta = self.meta(job).await?;
        if self.jobs.plan(job).await.map_err(redis)?.is_some() {
            // Already planned (a redelivery): just say so again.
            return self
                .emit(Event::Planned {
                    job_id: job,
                    failure: None,
                })
                .await;
        }
        let _ = self.jobs.set_status(job, JobStatus::Planning).await;
        self.progress(job, Progress::Planning).await;
        let outcome = async {
            let model = self.model().map_err(Error::Drop)?;
            let mut prompt = prompts::plan(&prompts::PlanContext {
                instruction: &meta.request.instruction,
                language: meta.request.language.as_str(),
                constraints: meta.request.constraints.as_deref(),
            })
            .map_err(|e| Error::Drop(e.to_string()))?;
            if let Some(problem) = &task.problem {
                prompt.user.push_str(&format!(
                    "\n\nAn earlier plan for this request was rejected: {problem}. Fix that."
                ));
            }
            model
                .generate::<FunctionSpecs>(Phase::Plan, None, &prompt, self.deadline())
                .await
                .map_err(|e| model_error(None, &e))
        }
        .await;
        match outcome {
            Ok(generated) => {
                meta.plan_tokens.prompt += generated.usage.prompt_tokens;
                meta.plan_tokens.completion += generated.usage.completion_tokens;
                meta.plan_model_calls += generated.calls;
                self.jobs.put_job_meta(&meta).await.map_err(redis)?;
                self.jobs
                    .put_specs(job, &generated.value.functions)
                    .await
                    .map_err(redis)?;
                self.emit(Event::Planned {
                    job_id: job,
                    failure: None,
                })
                .await
            }
            // The model is down: hand the task back; the delivery limit bounds the waiting.
            Err(e @ Error::Retry { .. }) => Err(e),
            Err(Error::Drop(reason)) => {
                self.emit(Event::Planned {
                    job_id: job,
                    failure: Some(reason),
                })
                .await
            }
        }
    }

    /// Dependencies of `function`, transitively, in plan order (each before its users).
    fn dependencies(plan: &Plan, function: &str) -> Vec<String> {
        let mut needed = BTreeSet::new();
        let mut stack = vec![function.to_owned()];
        while let Some(name) = stack.pop() {
            if let Some(spec) = plan.spec(&name) {
                for dep in &spec.dependencies {
                    if needed.insert(dep.clone()) {
                        stack.push(dep.clone());
                    }
                }
            }
        }
        plan.specs
            .iter()
            .filter(|s| needed.contains(&s.name))
            .map(|s| s.name.clone())
            .collect()
    }

    /// Tests, implementation, runs and repairs for one function.
    pub async fn implement(&self, task: &JobTask) -> Result<(), Error> {
        let job = task.job_id;
        let function = task
            .function
            .clone()
            .ok_or_else(|| Error::Drop("implement task without a function".into()))?;
        let meta = self.meta(job).await?;
        let plan = self.plan_of(job).await?;
        let spec = plan
            .spec(&function)
            .cloned()
            .ok_or_else(|| Error::Drop(format!("{function} is not in the plan of job {job}")))?;
        if let Some(existing) = self.jobs.function(job, &function).await.map_err(redis)?
            && existing.done
        {
            return self
                .emit(Event::FunctionDone {
                    job_id: job,
                    function,
                })
                .await;
        }
        // Verified code of the dependencies, in plan order.
        let mut dependency_code = Vec::new();
        for dep in Self::dependencies(&plan, &function) {
            let outcome = self.jobs.function(job, &dep).await.map_err(redis)?;
            match outcome.and_then(|o| o.code.filter(|_| o.passed)) {
                Some(code) => dependency_code.push((dep, code)),
                None => {
                    // Never by the coordinator's ordering; if it happens, the job fails with
                    // the reason instead of waiting for this function forever.
                    let reason =
                        format!("{function} was started before its dependency {dep} passed");
                    let mut failed = FunctionOutcome::new(&function);
                    failed.done = true;
                    failed.failure = Some(reason);
                    self.jobs.put_function(job, &failed).await.map_err(redis)?;
                    return self
                        .emit(Event::FunctionDone {
                            job_id: job,
                            function,
                        })
                        .await;
                }
            }
        }
        let cache_key = self.cache.as_ref().map(|(_, model)| {
            proto::job::function_cache_key(meta.request.language, &spec, &dependency_code, model)
        });
        if let (Some((cache, _)), Some(key)) = (&self.cache, &cache_key) {
            match cache.cached_function(key).await {
                Ok(Some(mut cached)) => {
                    let _ = cache.count_lookup("function", true).await;
                    cached.cached = true;
                    cached.name = function.clone();
                    // Not stored when another run finished first: that outcome stands.
                    self.jobs.put_function(job, &cached).await.map_err(redis)?;
                    self.progress(
                        job,
                        Progress::FunctionCached {
                            function: function.clone(),
                        },
                    )
                    .await;
                    return self
                        .emit(Event::FunctionDone {
                            job_id: job,
                            function,
                        })
                        .await;
                }
                Ok(None) => {
                    let _ = cache.count_lookup("function", false).await;
                }
                Err(e) => tracing::warn!(error = %e, "function cache unavailable"),
            }
        }
        let started = Instant::now();
        self.progress(
            job,
            Progress::FunctionStarted {
                function: function.clone(),
            },
        )
        .await;
        let mut outcome = FunctionOutcome::new(&function);
        let result = self
            .implement_loop(&meta, &spec, &dependency_code, &mut outcome)
            .await;
        if let Err(e @ Error::Retry { .. }) = result {
            // Infrastructure failed mid-way: the partial outcome stays, the task comes back.
            return Err(e);
        }
        if let Err(Error::Drop(reason)) = result {
            outcome.failure = Some(reason);
        }
        outcome.done = true;
        outcome.generation_ms = u64::try_from(started.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .saturating_sub(outcome.execution_ms);
        if !self.jobs.put_function(job, &outcome).await.map_err(redis)? {
            tracing::info!(%job, function = %function, "another run of this function finished first; its outcome stands");
            return self
                .emit(Event::FunctionDone {
                    job_id: job,
                    function,
                })
                .await;
        }
        let tested = outcome.passed && outcome.validation == Validation::Tested;
        if let (Some((cache, _)), Some(key), true) = (&self.cache, &cache_key, tested)
            && let Err(e) = cache.put_cached_function(key, &outcome).await
        {
            tracing::warn!(error = %e, "cannot cache a verified function");
        }
        tracing::info!(%job, function = %function, passed = outcome.passed, attempts = outcome.attempts, "function finished");
        self.emit(Event::FunctionDone {
            job_id: job,
            function,
        })
        .await
    }

    /// Fills `outcome`; `Err(Drop)` carries a failure reason for the record.
    async fn implement_loop(
        &self,
        meta: &JobMeta,
        spec: &proto::generation::FunctionSpec,
        dependency_code: &[(String, String)],
        outcome: &mut FunctionOutcome,
    ) -> Result<(), Error> {
        let job = meta.id;
        let language = meta.request.language.as_str();
        let model = self.model().map_err(Error::Drop)?;
        let deadline = self.deadline();
        let tests_prompt = prompts::tests(&prompts::TestsContext {
            instruction: &meta.request.instruction,
            language,
            spec,
            test_requirements: meta.request.test_requirements.as_deref(),
            min_cases: self.options.min_cases,
            max_cases: self.options.max_cases,
        })
        .map_err(|e| Error::Drop(e.to_string()))?;
        let tests = model
            .generate::<TestCases>(Phase::Tests, Some(&spec.name), &tests_prompt, deadline)
            .await
            .map_err(|e| model_error(Some("writing tests"), &e))?;
        account(outcome, &tests.usage, tests.calls);
        outcome.tests = tests.value.cases;
        self.save(job, outcome).await?;
        let deps: Vec<DependencyCode<'_>> = dependency_code
            .iter()
            .map(|(name, code)| DependencyCode { name, code })
            .collect();
        let prelude: String = dependency_code
            .iter()
            .map(|(_, code)| format!("{}\n\n", code.trim_end()))
            .collect();

        let mut last: Option<(String, CaseRun)> = None;
        for attempt in 1..=meta.request.max_iterations {
            outcome.attempts = attempt;
            let prompt = match &last {
                None => prompts::implement(&prompts::ImplementContext {
                    instruction: &meta.request.instruction,
                    language,
                    spec,
                    dependencies: deps.clone(),
                    tests: &outcome.tests,
                }),
                Some((code, run)) => {
                    let failures = failures(&outcome.tests, &run.results);
                    let history: Vec<Attempt<'_>> = outcome
                        .history
                        .iter()
                        .filter(|h| !h.fix.is_empty())
                        .map(|h| Attempt {
                            attempt: h.attempt,
                            error_kind: h.error_kind.as_str(),
                            fix: &h.fix,
                        })
                        .collect();
                    prompts::repair(&prompts::RepairContext {
                        instruction: &meta.request.instruction,
                        language,
                        spec,
                        dependencies: deps.clone(),
                        code,
                        attempt: attempt - 1,
                        error_kind: run.error_kind.map_or("failed", ErrorKind::as_str),
                        error: &run.error,
                        failures,
                        history,
                    })
                }
            }
            .map_err(|e| Error::Drop(e.to_string()))?;
            let phase = if last.is_none() {
                Phase::Implement
            } else {
                Phase::Repair
            };
            let generated = model
                .generate::<Implementation>(phase, Some(&spec.name), &prompt, deadline)
                .await
                .map_err(|e| model_error(Some(phase.as_str()), &e))?;
            account(outcome, &generated.usage, generated.calls);
            let code = generated.value.code;
            if let (Some(analysis), Some(previous)) =
                (generated.value.analysis, outcome.history.last_mut())
            {
                previous.fix = analysis.changes.clone();
                previous.analysis = Some(analysis);
            }
            outcome.code = Some(code.clone());
            let module = format!("{prelude}{code}");
            let run = match self.run_cases(&module, &spec.name, &outcome.tests).await {
                Ok(run) => run,
                Err(Error::Retry {
                    dependency: Dependency::Docker,
                    reason,
                }) if self.options.static_fallback && self.sandbox.health().await.is_err() => {
                    tracing::warn!(%job, function = %spec.name, %reason, "no sandbox: static checks only");
                    match crate::static_check::check(&module, Some((&spec.name, spec.inputs.len())))
                    {
                        Ok(_) => {
                            outcome.validation = Validation::StaticAnalysisOnly;
                            outcome.passed = true;
                            outcome.test_results.clear();
                            self.progress(
                                job,
                                Progress::Attempt {
                                    function: spec.name.clone(),
                                    attempt,
                                    passed: true,
                                    error_kind: None,
                                    validation: Some(Validation::StaticAnalysisOnly),
                                },
                            )
                            .await;
                            self.save(job, outcome).await?;
                            return Ok(());
                        }
                        Err(problem) => CaseRun {
                            passed: false,
                            results: vec![],
                            error_kind: Some(ErrorKind::Syntax),
                            error: problem,
                            duration_ms: 0,
                        },
                    }
                }
                Err(e) => return Err(e),
            };
            outcome.execution_ms += run.duration_ms;
            outcome.test_results = run.results.clone();
            self.progress(
                job,
                Progress::Attempt {
                    function: spec.name.clone(),
                    attempt,
                    passed: run.passed,
                    error_kind: run.error_kind,
                    validation: None,
                },
            )
            .await;
            if run.passed {
                outcome.passed = true;
                self.save(job, outcome).await?;
                return Ok(());
            }
            outcome.history.push(Improvement {
                function: spec.name.clone(),
                attempt,
                error_kind: run.error_kind.unwrap_or(ErrorKind::Runtime),
                error: run.error.clone(),
                fix: String::new(),
                analysis: None,
            });
            self.save(job, outcome).await?;
            last = Some((code, run));
        }
        let (_, run) = last.unwrap_or_default();
        Err(Error::Drop(format!(
            "tests still fail after {} attempts ({}): {}",
            meta.request.max_iterations,
            run.error_kind.map_or("failed", ErrorKind::as_str),
            run.error
        )))
    }

    /// A sandbox run, its wall time added to the task's [`SANDBOX_MS`]. While Docker is down
    /// the run waits for it, at most `sandbox_wait`, so a short outage costs time instead of
    /// the model calls the task has already made.
    async fn sandboxed(
        &self,
        execution: &ExecutionRequest,
    ) -> Result<proto::ExecutionResult, Error> {
        loop {
            let started = Instant::now();
            let result = self.sandbox.run(execution).await;
            let _ = SANDBOX_MS.try_with(|ms| {
                ms.set(ms.get() + u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX))
            });
            let e = match result {
                Ok(result) => return Ok(result),
                Err(e) => e,
            };
            let reason = e.to_string();
            if e.is_retryable()
                && self.gate.confirm_down(Dependency::Docker, &reason).await
                && self
                    .gate
                    .wait_up(&[Dependency::Docker], self.options.sandbox_wait)
                    .await
                    .is_ok()
            {
                continue;
            }
            return Err(Error::Retry {
                dependency: Dependency::Docker,
                reason,
            });
        }
    }

    /// Runs `function`'s cases against `module` in the sandbox, through the image's harness.
    async fn run_cases(
        &self,
        module: &str,
        function: &str,
        cases: &[TestCase],
    ) -> Result<CaseRun, Error> {
        let harness_cases: Vec<Value> = cases
            .iter()
            .map(|c| {
                json!({"name": c.name, "kind": c.kind, "inputs": c.inputs,
                       "expected_output": c.expected_output, "expected_error": c.expected_error})
            })
            .collect();
        let request = json!({
            "marker": harness::CASES_MARKER,
            "function": function,
            "cases": harness_cases,
            "case_timeout_ms": self.options.case_timeout_ms,
            "max_output_bytes": 64 * 1024,
            "nonce": null,
        });
        let execution = ExecutionRequest {
            language: Language::Python,
            code: crate::drivers::CASES.to_owned(),
            stdin: None,
            test: None,
            timeout_ms: self.options.run_timeout_ms,
            memory_mb: self.options.memory_mb,
            fresh_container: false,
            files: BTreeMap::from([
                ("module.py".to_string(), module.to_owned()),
                ("request.json".to_string(), request.to_string()),
            ]),
            return_files: vec![],
        };
        let result = self.sandboxed(&execution).await?;
        let duration_ms = result.duration_ms;
        let report = match harness::read::<CasesReport>(&result.stdout, harness::CASES_MARKER) {
            Ok(report) => Some(report),
            Err(ReportError::Missing) => None,
            Err(e @ ReportError::Mismatch(_)) => {
                return Err(Error::Drop(format!(
                    "the sandbox image's test harness: {e}"
                )));
            }
        };
        let Some(report) = report else {
            // The run itself broke (timeout, memory, a crash): every case fails with that.
            let kind = match result.status {
                Status::Timeout => ErrorKind::Timeout,
                Status::MemoryLimit => ErrorKind::MemoryLimit,
                Status::OutputLimit => ErrorKind::OutputLimit,
                Status::SandboxError | Status::Error => {
                    return Err(Error::Retry {
                        dependency: Dependency::Docker,
                        reason: format!("sandbox: {}", result.reason.unwrap_or_default()),
                    });
                }
                _ => ErrorKind::Runtime,
            };
            let error = result
                .reason
                .clone()
                .unwrap_or_else(|| tail(&result.stderr, 2000));
            return Ok(CaseRun {
                passed: false,
                results: cases
                    .iter()
                    .map(|c| TestResult {
                        function: function.to_owned(),
                        test: c.name.clone(),
                        passed: false,
                        actual_output: Value::Null,
                        error: Some(error.clone()),
                        error_kind: Some(kind),
                        duration_ms: 0.0,
                    })
                    .collect(),
                error_kind: Some(kind),
                error,
                duration_ms,
            });
        };
        let results: Vec<TestResult> = report
            .cases
            .into_iter()
            .map(|c| TestResult {
                function: function.to_owned(),
                test: c.name,
                passed: c.passed,
                actual_output: c.actual_output,
                error: c.error,
                error_kind: c.error_kind,
                duration_ms: c.duration_ms,
            })
            .collect();
        let failed = results.iter().filter(|r| !r.passed).count();
        let error = match report.error {
            Some(load_error) => format!("{load_error}\n{}", report.traceback.unwrap_or_default()),
            None if failed > 0 => format!("{failed} of {} cases failed", results.len()),
            None => String::new(),
        };
        Ok(CaseRun {
            passed: report.passed,
            results,
            error_kind: report.error_kind,
            error,
            duration_ms,
        })
    }

    /// Assembles the module, runs every test together, reports quality, stores the result.
    pub async fn integrate(&self, task: &JobTask) -> Result<(), Error> {
        let job = task.job_id;
        let meta = self.meta(job).await?;
        if self.jobs.result(job).await.map_err(redis)?.is_some() {
            return self.emit(Event::Integrated { job_id: job }).await;
        }
        let plan = self.plan_of(job).await?;
        let mut outcomes = BTreeMap::new();
        for spec in &plan.specs {
            if let Some(outcome) = self.jobs.function(job, &spec.name).await.map_err(redis)? {
                outcomes.insert(spec.name.clone(), outcome);
            }
        }
        let module: String = plan
            .specs
            .iter()
            .filter_map(|s| outcomes.get(&s.name).and_then(|o| o.code.clone()))
            .map(|code| format!("{}\n\n\n", code.trim_end()))
            .collect();
        let all_passed_before = plan
            .specs
            .iter()
            .all(|s| outcomes.get(&s.name).is_some_and(|o| o.passed));
        let static_only = outcomes
            .values()
            .any(|o| o.validation == Validation::StaticAnalysisOnly);
        let mut test_results = Vec::new();
        let mut execution_ms: u64 = outcomes.values().map(|o| o.execution_ms).sum();
        if static_only {
            // Nothing was run, so nothing is re-run: the result says it is untested.
        } else if all_passed_before {
            // Every function against the whole module: catches interference between them.
            for spec in &plan.specs {
                let outcome = &outcomes[&spec.name];
                let run = self.run_cases(&module, &spec.name, &outcome.tests).await?;
                execution_ms += run.duration_ms;
                test_results.extend(run.results);
            }
        } else {
            for spec in &plan.specs {
                if let Some(o) = outcomes.get(&spec.name) {
                    test_results.extend(o.test_results.iter().cloned());
                }
            }
        }
        let quality = if static_only {
            static_quality(&module, &outcomes)
        } else {
            self.quality(&module, &outcomes, &test_results).await?
        };
        let all_tests_passed = !static_only
            && all_passed_before
            && !test_results.is_empty()
            && test_results.iter().all(|r| r.passed);
        let failure = plan
            .specs
            .iter()
            .find_map(|s| match outcomes.get(&s.name) {
                None => Some(format!("{} was never implemented", s.name)),
                Some(o) if !o.passed => Some(format!(
                    "{}: {}",
                    s.name,
                    o.failure.clone().unwrap_or_else(|| "tests fail".into())
                )),
                _ => None,
            })
            .or_else(|| {
                // Static-only modules were never run: no test failed, none passed either.
                (!static_only && !all_tests_passed)
                    .then(|| "tests fail when the module is assembled".into())
            });
        let mut tokens = meta.plan_tokens;
        let mut model_calls = meta.plan_model_calls;
        let mut generation_ms = 0;
        for o in outcomes.values() {
            tokens.prompt += o.tokens.prompt;
            tokens.completion += o.tokens.completion;
            model_calls += o.model_calls;
            generation_ms += o.generation_ms;
        }
        let status = if failure.is_none() {
            JobStatus::Succeeded
        } else {
            JobStatus::Failed
        };
        let result = JobResult {
            job_id: job,
            status,
            instruction: meta.request.instruction.clone(),
            language: meta.request.language,
            function_specs: plan.specs.clone(),
            implementations: outcomes
                .iter()
                .filter_map(|(n, o)| o.code.clone().map(|c| (n.clone(), c)))
                .collect(),
            tests: outcomes
                .iter()
                .map(|(n, o)| (n.clone(), o.tests.clone()))
                .collect(),
            test_results,
            all_tests_passed,
            improvement_history: plan
                .specs
                .iter()
                .filter_map(|s| outcomes.get(&s.name))
                .flat_map(|o| o.history.iter().cloned())
                .collect(),
            documentation: documentation(&meta, &plan),
            quality,
            metrics: JobMetrics {
                generation_ms,
                execution_ms,
                total_ms: now_ms().saturating_sub(meta.submitted_at_ms),
                model_calls,
                tokens,
                cache: CacheOutcome::Miss,
            },
            failure,
            validation: if static_only {
                Validation::StaticAnalysisOnly
            } else {
                Validation::Tested
            },
            manual_review_recommended: static_only || status != JobStatus::Succeeded,
        };
        // Result, `finished` event and final status in one step: whoever finishes first (this
        // run, a duplicate of it, or a coordinator failing the job) is the job's end.
        let finished = self.jobs.finish_job(job, &result).await.map_err(redis)?;
        if !finished {
            tracing::info!(%job, "the job had finished already; its result stands");
            return self.emit(Event::Integrated { job_id: job }).await;
        }
        if let (Some((cache, _)), Some(key), JobStatus::Succeeded, false) =
            (&self.cache, &meta.cache_key, status, static_only)
            && let Err(e) = cache.put_cached_solution(key, &result).await
        {
            tracing::warn!(error = %e, "cannot cache the solution");
        }
        if let Some(histogram) = &self.job_seconds {
            histogram
                .with_label_values(&[status.as_str()])
                .observe(result.metrics.total_ms as f64 / 1000.0);
        }
        tracing::info!(%job, status = status.as_str(), "job finished");
        self.emit(Event::Integrated { job_id: job }).await
    }

    async fn quality(
        &self,
        module: &str,
        outcomes: &BTreeMap<String, FunctionOutcome>,
        results: &[TestResult],
    ) -> Result<Quality, Error> {
        let tests_total = u32::try_from(results.len()).unwrap_or(u32::MAX);
        let tests_passed = u32::try_from(results.iter().filter(|r| r.passed).count()).unwrap_or(0);
        let cases: BTreeMap<&String, Vec<Value>> = outcomes
            .iter()
            .map(|(n, o)| {
                (
                    n,
                    o.tests
                        .iter()
                        .map(|t| json!({"inputs": t.inputs}))
                        .collect(),
                )
            })
            .collect();
        let execution = ExecutionRequest {
            language: Language::Python,
            code: crate::drivers::QUALITY.to_owned(),
            stdin: None,
            test: None,
            timeout_ms: self.options.run_timeout_ms,
            memory_mb: self.options.memory_mb,
            fresh_container: false,
            files: BTreeMap::from([
                ("module.py".to_string(), module.to_owned()),
                (
                    "request.json".to_string(),
                    json!({"marker": harness::QUALITY_MARKER, "cases": cases}).to_string(),
                ),
            ]),
            return_files: vec![],
        };
        let run = self.sandboxed(&execution).await?;
        let QualityReport {
            coverage,
            complexity,
            docstrings,
            dangerous_calls,
        } = match harness::read::<QualityReport>(&run.stdout, harness::QUALITY_MARKER) {
            Ok(report) => report,
            // The analysis itself broke (a limit, a crash): the module scores nothing for it.
            Err(ReportError::Missing) => {
                tracing::warn!(status = ?run.status, "the quality analysis printed no report");
                QualityReport {
                    coverage: 0.0,
                    complexity: BTreeMap::new(),
                    docstrings: 0.0,
                    dangerous_calls: vec![],
                }
            }
            Err(e @ ReportError::Mismatch(_)) => {
                return Err(Error::Drop(format!("the quality analysis: {e}")));
            }
        };
        let pass_rate = if tests_total == 0 {
            0.0
        } else {
            f64::from(tests_passed) / f64::from(tests_total)
        };
        let mean_complexity = if complexity.is_empty() {
            1.0
        } else {
            f64::from(complexity.values().sum::<u32>()) / complexity.len() as f64
        };
        let simplicity = if mean_complexity <= 10.0 {
            1.0
        } else {
            10.0 / mean_complexity
        };
        let safety = if dangerous_calls.is_empty() { 1.0 } else { 0.0 };
        // Weights (README): tests 0.5, coverage 0.2, docstrings 0.1, simplicity 0.1, safety 0.1.
        let score =
            0.5 * pass_rate + 0.2 * coverage + 0.1 * docstrings + 0.1 * simplicity + 0.1 * safety;
        Ok(Quality {
            score: (score * 1000.0).round() / 1000.0,
            tests_passed,
            tests_total,
            coverage: (coverage * 1000.0).round() / 1000.0,
            complexity,
            docstrings,
            dangerous_calls,
        })
    }
}

/// The quality report when nothing could run: tests count as not passed, coverage as zero.
fn static_quality(module: &str, outcomes: &BTreeMap<String, FunctionOutcome>) -> Quality {
    let report = crate::static_check::check(module, None).unwrap_or_default();
    let tests_total =
        u32::try_from(outcomes.values().map(|o| o.tests.len()).sum::<usize>()).unwrap_or(u32::MAX);
    let docstrings = if report.functions == 0 {
        0.0
    } else {
        report.documented as f64 / report.functions as f64
    };
    let safety = if report.dangerous_calls.is_empty() {
        1.0
    } else {
        0.0
    };
    // Same weights as a tested module; the untested half scores zero.
    let score = 0.1 * docstrings + 0.1 * safety;
    Quality {
        score: (score * 1000.0).round() / 1000.0,
        tests_passed: 0,
        tests_total,
        coverage: 0.0,
        complexity: BTreeMap::new(),
        docstrings,
        dangerous_calls: report.dangerous_calls.into_iter().collect(),
    }
}

fn account(outcome: &mut FunctionOutcome, usage: &model::Usage, calls: u32) {
    outcome.tokens.prompt += usage.prompt_tokens;
    outcome.tokens.completion += usage.completion_tokens;
    outcome.model_calls += calls;
}

fn failures<'a>(tests: &'a [TestCase], results: &'a [TestResult]) -> Vec<Failure<'a>> {
    results
        .iter()
        .filter(|r| !r.passed)
        .filter_map(|r| {
            let case = tests.iter().find(|t| t.name == r.test)?;
            Some(Failure {
                name: &case.name,
                inputs: &case.inputs,
                expected_output: &case.expected_output,
                expected_error: case.expected_error.as_deref(),
                actual_output: Some(&r.actual_output),
                error: r.error.as_deref(),
            })
        })
        .collect()
}

fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

/// Markdown documentation from the plan: what each function does, how to call it.
fn documentation(meta: &JobMeta, plan: &Plan) -> String {
    let mut doc = format!("# Solution\n\n{}\n", meta.request.instruction);
    for spec in &plan.specs {
        let args: Vec<String> = spec
            .inputs
            .iter()
            .map(|p| format!("{}: {}", p.name, p.ty))
            .collect();
        doc.push_str(&format!(
            "\n## `{}({}) -> {}`\n\n{}\n\nReturns: {}\n",
            spec.name,
            args.join(", "),
            spec.outputs.ty,
            spec.purpose,
            spec.outputs.description
        ));
        if !spec.dependencies.is_empty() {
            doc.push_str(&format!("\nUses: {}\n", spec.dependencies.join(", ")));
        }
    }
    doc
}
