//! The agent's loop (`"mode": "agent"` jobs): the model, given the tools of [`tools`] on a
//! session of the job's own ([`workspace`]), decides each next step until it calls `finish`
//! or a budget ends the run.
//!
//! Every step is recorded in Redis before the next one starts ([`store::JobStore::record_step`]:
//! at its index, once), and what to do next is read from the recorded steps alone
//! ([`transcript`]). A run taken again after its worker's loss (the task redelivered) restores
//! its session from the checkpoint and goes on from the last recorded step: a recorded model
//! answer is not asked again, and a recorded observation's call is not made again.
//!
//! Invariants:
//! - a step is recorded only at the index after the last one: of two runs of one job (a
//!   redelivery while the first still runs), the second to record stops;
//! - the budgets (steps, wall time, tokens, sandbox CPU), stuck detection and malformed calls
//!   are judged from the recorded steps, so a run taken again judges them alike;
//! - the job's status is read before every model call and every tool call: a cancelled job
//!   stops there.

mod lessons;
pub mod tools;
pub mod transcript;
pub mod workspace;

use std::sync::Arc;
use std::time::{Duration, Instant};

use proto::agent::{AgentCall, AgentEnd, AgentOutcome, AgentRequest, AgentStep, AgentTask};
use proto::ending::Ending;
use proto::job::{JobMeta, JobResult, JobStatus};
use store::{JobStore, StepRecorded};
use tokio_util::sync::CancellationToken;

use crate::gate::Dependency;
use crate::sessions::LocalSessions;
use transcript::{Next, Transcript, cut};
use workspace::Workspace;

/// Why a run stopped without ending its job.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The worker is draining: what the run recorded stands, another worker goes on.
    #[error("the worker is stopping")]
    Stopped,
    /// The job ended (cancelled, failed by a coordinator): nothing more is done for it.
    #[error("the job has ended ({0})")]
    Ended(JobStatus),
    /// The job is gone, or another run of it records its steps.
    #[error("{0}")]
    Stale(String),
    /// A dependency failed in a way another try may get past.
    #[error("{dependency}: {reason}")]
    Retry {
        dependency: Dependency,
        reason: String,
    },
}

impl Error {
    fn store(e: store::Error) -> Self {
        Error::Retry {
            dependency: Dependency::Redis,
            reason: e.to_string(),
        }
    }
}

impl crate::gate::Blame for Error {
    fn blamed(&self) -> Option<Dependency> {
        match self {
            Error::Retry { dependency, .. } => Some(*dependency),
            Error::Stopped | Error::Ended(_) | Error::Stale(_) => None,
        }
    }
    fn retryable(&self) -> bool {
        matches!(self, Error::Retry { .. })
    }
}

/// Runs agent jobs on this worker's sessions.
#[derive(Clone)]
pub struct Agent {
    pub(crate) model: model::Model,
    pub(crate) jobs: Arc<dyn JobStore>,
    pub(crate) flow: flow::Flow,
    pub(crate) sessions: LocalSessions,
    tools: Arc<Vec<model::ToolSpec>>,
    /// `codegen_agent_steps_total{kind}`, `codegen_agent_runs_ended_total{ended_by}`.
    steps_recorded: prometheus::IntCounterVec,
    runs_ended: prometheus::IntCounterVec,
    /// Lessons shown to failing test runs and kept from fixes (`None`: no memory).
    pub(crate) memory: Option<memory::Memory>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent").finish_non_exhaustive()
    }
}

/// What one run of the loop reads over and over.
struct Run<'a> {
    meta: &'a JobMeta,
    request: &'a AgentRequest,
    lane: &'a model::Lane,
    stop: &'a CancellationToken,
    transcript: Transcript,
}

impl Agent {
    pub fn new(
        model: model::Model,
        jobs: Arc<dyn JobStore>,
        flow: flow::Flow,
        sessions: LocalSessions,
        metrics: &crate::Metrics,
    ) -> Self {
        Self {
            model,
            jobs,
            flow,
            sessions,
            tools: Arc::new(tools::specs()),
            steps_recorded: metrics.agent_steps.clone(),
            runs_ended: metrics.agent_runs.clone(),
            memory: None,
        }
    }

    /// Runs (or goes on with) `task`'s job until it ends, or until it must stop here.
    pub async fn run(
        &self,
        task: &AgentTask,
        lane: &model::Lane,
        stop: &CancellationToken,
    ) -> Result<(), Error> {
        let id = task.job_id;
        let meta = self
            .jobs
            .job_meta(id)
            .await
            .map_err(Error::store)?
            .ok_or_else(|| Error::Stale(format!("job {id} is gone")))?;
        if let Some(status) = self
            .jobs
            .status(id)
            .await
            .map_err(Error::store)?
            .filter(|s| s.is_final())
        {
            return Err(Error::Ended(status));
        }
        let Some(request) = meta.request.agent.as_ref() else {
            return Err(Error::Stale(format!("job {id} is not an agent job")));
        };
        self.jobs
            .set_status(id, JobStatus::Running)
            .await
            .map_err(Error::store)?;
        let transcript = Transcript::new(self.jobs.steps(id).await.map_err(Error::store)?);
        if !transcript.steps.is_empty() {
            tracing::info!(job = %id, steps = transcript.steps.len(), "agent run taken again: going on from its last recorded step");
        }
        let mut run = Run {
            meta: &meta,
            request,
            lane,
            stop,
            transcript,
        };
        let packages = run.transcript.packages();
        let mut workspace = match Workspace::ready(&self.sessions, &meta, packages).await {
            Ok(workspace) => workspace,
            Err(workspace::Error::Store(e)) => return Err(Error::store(e)),
            Err(workspace::Error::Lost(why)) => {
                return self
                    .end(&run, None, AgentEnd::Failed, Some(why), None)
                    .await;
            }
        };
        let ended = self.steps(&mut run, &mut workspace).await;
        match ended {
            Ok(()) => Ok(()),
            Err(Error::Ended(status)) => {
                workspace
                    .end(&format!("its agent's job ended ({status})"))
                    .await;
                Err(Error::Ended(status))
            }
            // Another run goes on with the session, or the next take restores it.
            Err(other) => Err(other),
        }
    }

    /// The loop: one recorded step after another, until the run ends.
    async fn steps(&self, run: &mut Run<'_>, workspace: &mut Workspace) -> Result<(), Error> {
        let started = Instant::now();
        loop {
            if run.stop.is_cancelled() {
                return Err(Error::Stopped);
            }
            self.still_running(run.meta).await?;
            if let Some((end, why)) = self.over_budget(run) {
                return self.end(run, Some(workspace), end, Some(why), None).await;
            }
            match run.transcript.next() {
                Next::Start => self.start(run).await?,
                Next::Ask => {
                    if let Some(why) = self.ask(run).await? {
                        return self
                            .end(run, Some(workspace), AgentEnd::Failed, Some(why), None)
                            .await;
                    }
                }
                Next::Malformed(problem) => {
                    let step = AgentStep::Observation {
                        index: run.transcript.next_index(),
                        call_id: None,
                        tool: String::new(),
                        content: format!(
                            "{problem}\nCall one of the tools: {}.",
                            tools::NAMES.join(", ")
                        ),
                        error: true,
                        malformed: true,
                        cut: None,
                        cpu_ms: 0,
                        duration_ms: 0,
                        at_ms: proto::now_ms(),
                        worker: self.sessions.host().to_owned(),
                        lessons: Vec::new(),
                    };
                    self.record(run, step).await?;
                }
                Next::Call(call) => {
                    if let Some(finish) = self.call(run, workspace, &call, started).await? {
                        let collected = workspace.collect(&finish.files).await;
                        return self
                            .end(
                                run,
                                Some(workspace),
                                AgentEnd::Finished,
                                None,
                                Some((finish, collected)),
                            )
                            .await;
                    }
                }
            }
        }
    }

    /// The budget the run has spent, if any, and what it says.
    fn over_budget(&self, run: &Run<'_>) -> Option<(AgentEnd, String)> {
        let limits = &run.request.limits;
        let totals = run.transcript.totals();
        if run.transcript.malformed_in_a_row() >= limits.max_malformed {
            return Some((
                AgentEnd::Malformed,
                format!(
                    "{} malformed answers or calls in a row",
                    limits.max_malformed
                ),
            ));
        }
        if let Some(why) = run.transcript.stuck(limits) {
            return Some((AgentEnd::Stuck, why));
        }
        // Only before the model is asked: the calls of the last answer still run.
        let asking = run.transcript.next() == Next::Ask;
        if asking && totals.steps >= limits.max_steps {
            return Some((
                AgentEnd::MaxSteps,
                format!("{} steps taken, the run's max_steps", totals.steps),
            ));
        }
        let wall_ms = proto::now_ms().saturating_sub(run.meta.submitted_at_ms);
        if wall_ms >= limits.max_seconds.saturating_mul(1000) {
            return Some((
                AgentEnd::WallTime,
                format!("{} s passed, the run's max_seconds", limits.max_seconds),
            ));
        }
        if totals.sandbox_cpu_ms >= limits.max_cpu_ms {
            return Some((
                AgentEnd::Cpu,
                format!(
                    "{} ms of sandbox CPU used, the run's max_cpu_ms ({})",
                    totals.sandbox_cpu_ms, limits.max_cpu_ms
                ),
            ));
        }
        if let Some(max) = run.meta.request.max_tokens_total {
            let spent = totals.prompt_tokens + totals.completion_tokens;
            if asking && spent >= max {
                return Some((
                    AgentEnd::Tokens,
                    format!("{spent} tokens spent, the job's max_tokens_total ({max})"),
                ));
            }
        }
        None
    }

    async fn still_running(&self, meta: &JobMeta) -> Result<(), Error> {
        match self.jobs.status(meta.id).await.map_err(Error::store)? {
            Some(status) if status.is_final() => Err(Error::Ended(status)),
            _ => Ok(()),
        }
    }

    /// Records the run's start: its prompt and tools, as the model will be shown them.
    async fn start(&self, run: &mut Run<'_>) -> Result<(), Error> {
        let meta = run.meta;
        let prompt = model::prompts::agent(&model::prompts::AgentContext {
            instruction: &meta.request.instruction,
            language: meta.request.language.as_str(),
            max_steps: run.request.limits.max_steps,
            files: run.request.files.keys().map(String::as_str).collect(),
        })
        .map_err(|e| Error::Stale(e.to_string()))?;
        let step = AgentStep::Start {
            index: run.transcript.next_index(),
            system: prompt.system,
            task: prompt.user,
            tools: self
                .tools
                .iter()
                .map(|t| proto::agent::AgentTool {
                    name: t.name.clone(),
                    description: t.description.clone(),
                    parameters: t.parameters.clone(),
                })
                .collect(),
            model: self.model.describe(),
            at_ms: proto::now_ms(),
            worker: self.sessions.host().to_owned(),
        };
        self.record(run, step).await
    }

    /// Asks the model for the next step and records its answer; `Some` says why the model
    /// failed for good (a refused request, a context window too small).
    async fn ask(&self, run: &mut Run<'_>) -> Result<Option<String>, Error> {
        let messages = run.transcript.messages();
        let (system, tools) = match run.transcript.start() {
            Some((system, _, tools)) => (
                system.to_owned(),
                tools
                    .iter()
                    .map(|t| model::ToolSpec {
                        name: t.name.clone(),
                        description: t.description.clone(),
                        parameters: t.parameters.clone(),
                    })
                    .collect::<Vec<_>>(),
            ),
            None => return Err(Error::Stale("the run has no recorded start".into())),
        };
        let left = self.time_left(run);
        let function = run.meta.id.to_string();
        let call = model::Call::new(run.lane.clone());
        let turned = self
            .model
            .turn(
                &call,
                // A seat of its own each time: the place under the model's limit goes back with
                // the answer, for the calls it makes run next, and a run holding it through them
                // would keep other runs from asking.
                &mut model::Seat::default(),
                model::Turn {
                    system: &system,
                    messages: &messages,
                    tools: &tools,
                    function: Some(&function),
                    temperature: run.request.temperature,
                    seed: run.request.seed,
                },
                tokio::time::Instant::now() + left,
            )
            .await;
        let turned = match turned {
            Ok(turned) => turned,
            // The run's time ran out during the call: the loop's budget check ends it.
            Err(model::Error::Deadline(_)) => return Ok(None),
            Err(e) if e.is_retryable() => {
                return Err(Error::Retry {
                    dependency: Dependency::Model,
                    reason: e.to_string(),
                });
            }
            Err(e) => return Ok(Some(format!("the model: {e}"))),
        };
        let step = AgentStep::Model {
            index: run.transcript.next_index(),
            step: run.transcript.model_steps() + 1,
            text: turned.text,
            calls: turned
                .tool_calls
                .into_iter()
                .map(|c| AgentCall {
                    id: c.id,
                    tool: c.name,
                    arguments: c.arguments,
                })
                .collect(),
            problem: turned.tool_problem,
            prompt_tokens: turned.usage.prompt_tokens,
            completion_tokens: turned.usage.completion_tokens,
            model_calls: turned.calls,
            token_ids: turned.token_ids,
            duration_ms: turned.elapsed.as_millis() as u64,
            at_ms: proto::now_ms(),
            worker: self.sessions.host().to_owned(),
        };
        self.record(run, step).await?;
        Ok(None)
    }

    /// Carries out one call and records its observation; `Some` when it was `finish`.
    async fn call(
        &self,
        run: &mut Run<'_>,
        workspace: &mut Workspace,
        call: &AgentCall,
        _started: Instant,
    ) -> Result<Option<tools::Finish>, Error> {
        let begun = Instant::now();
        let action = tools::read(&call.tool, &call.arguments);
        // A test run's path, for the memory below.
        let tests_path = match &action {
            Ok(tools::Action::RunTests(tests)) => {
                Some(tests.path.clone().unwrap_or_else(|| ".".into()))
            }
            _ => None,
        };
        // A finish must be its answer's last call: calls after it would never run.
        let after_finish = self.calls_after_finish(run, call);
        let (observed, malformed, finish) = match action {
            Err(problem) => (workspace::Observed { content: problem, error: true, cpu_ms: 0 }, true, None),
            Ok(_) if after_finish => (
                workspace::Observed {
                    content: "a call after `finish` in the same answer: `finish` must be the last call, alone".into(),
                    error: true,
                    cpu_ms: 0,
                },
                true,
                None,
            ),
            Ok(tools::Action::Finish(finish)) if self.finish_has_followers(run, call) => {
                let _ = finish;
                (
                    workspace::Observed {
                        content: "`finish` was followed by other calls in the same answer: call it last, alone".into(),
                        error: true,
                        cpu_ms: 0,
                    },
                    true,
                    None,
                )
            }
            Ok(action) => {
                let finish = match &action {
                    tools::Action::Finish(finish) => Some(finish.clone()),
                    _ => None,
                };
                let left = self.time_left(run);
                match workspace.carry_out(&call.id, &action, left).await {
                    Ok(observed) => (observed, false, finish),
                    Err(workspace::Error::Store(e)) => return Err(Error::store(e)),
                    Err(workspace::Error::Lost(why)) => {
                        self.end(run, Some(workspace), AgentEnd::Failed, Some(why), None)
                            .await?;
                        return Err(Error::Ended(JobStatus::Failed));
                    }
                }
            }
        };
        // A test run's observation meets the memory: a failing one is shown lessons.
        let mut shown = Vec::new();
        let mut observed = observed;
        if let (false, Some(path)) = (malformed, &tests_path)
            && let Some((text, ids)) = self
                .tests_observed(run, path, observed.error, &observed.content)
                .await
        {
            observed.content.push_str(&text);
            shown = ids;
        }
        let (content, cut) = cut(&observed.content, run.request.limits.max_observation_chars);
        let step = AgentStep::Observation {
            index: run.transcript.next_index(),
            call_id: Some(call.id.clone()),
            tool: call.tool.clone(),
            content,
            error: observed.error,
            malformed,
            cut,
            cpu_ms: observed.cpu_ms,
            duration_ms: begun.elapsed().as_millis() as u64,
            at_ms: proto::now_ms(),
            worker: self.sessions.host().to_owned(),
            lessons: shown,
        };
        self.record(run, step).await?;
        Ok(finish)
    }

    /// The calls of `call`'s answer, and where `call` stands among them.
    fn answer_calls<'t>(&self, run: &'t Run<'_>, call: &AgentCall) -> (&'t [AgentCall], usize) {
        let calls = run
            .transcript
            .steps
            .iter()
            .rev()
            .find_map(|s| match s {
                AgentStep::Model { calls, .. } => Some(calls.as_slice()),
                AgentStep::Observation { .. } | AgentStep::Start { .. } => None,
            })
            .unwrap_or_default();
        let at = calls.iter().position(|c| c.id == call.id).unwrap_or(0);
        (calls, at)
    }

    fn calls_after_finish(&self, run: &Run<'_>, call: &AgentCall) -> bool {
        let (calls, at) = self.answer_calls(run, call);
        calls[..at].iter().any(|c| c.tool == "finish")
    }

    fn finish_has_followers(&self, run: &Run<'_>, call: &AgentCall) -> bool {
        let (calls, at) = self.answer_calls(run, call);
        at + 1 < calls.len()
    }

    fn time_left(&self, run: &Run<'_>) -> Duration {
        let deadline_ms = run
            .meta
            .submitted_at_ms
            .saturating_add(run.request.limits.max_seconds.saturating_mul(1000));
        Duration::from_millis(deadline_ms.saturating_sub(proto::now_ms()))
            .max(Duration::from_secs(1))
    }

    /// Records `step` at its index; the transcript follows.
    async fn record(&self, run: &mut Run<'_>, step: AgentStep) -> Result<(), Error> {
        match self
            .jobs
            .record_step(run.meta.id, &step)
            .await
            .map_err(Error::store)?
        {
            StepRecorded::Yes => {
                let kind = match step {
                    AgentStep::Start { .. } => "start",
                    AgentStep::Model { .. } => "model",
                    AgentStep::Observation { .. } => "observation",
                };
                self.steps_recorded.with_label_values(&[kind]).inc();
                run.transcript.steps.push(step);
                Ok(())
            }
            StepRecorded::Taken { length } => Err(Error::Stale(format!(
                "another run of the job recorded its step {} first (it holds {length})",
                step.index()
            ))),
            StepRecorded::Ended(status) => Err(Error::Ended(status)),
        }
    }

    /// Ends the run's job as `ended_by` says, its session with it.
    async fn end(
        &self,
        run: &Run<'_>,
        workspace: Option<&Workspace>,
        ended_by: AgentEnd,
        failure: Option<String>,
        finished: Option<(tools::Finish, workspace::Collected)>,
    ) -> Result<(), Error> {
        let meta = run.meta;
        let mut totals = run.transcript.totals();
        let now = proto::now_ms();
        totals.wall_ms = now.saturating_sub(meta.submitted_at_ms);
        let (answer, files, missing) = match finished {
            Some((finish, collected)) => (Some(finish.answer), collected.files, collected.missing),
            None => Default::default(),
        };
        let outcome = AgentOutcome {
            ended_by,
            answer,
            files,
            missing,
            totals,
            session_id: workspace::session_id(meta),
        };
        let result = JobResult::assemble(
            meta,
            &[],
            &Default::default(),
            Ending::Agent {
                outcome,
                failure: failure.clone(),
            },
            now,
        );
        let ended = self
            .flow
            .finish(meta.tenant.as_deref(), &result)
            .await
            .map_err(Error::store)?;
        tracing::info!(job = %meta.id, ended_by = ended_by.as_str(), steps = totals.steps, failure = failure.as_deref().unwrap_or("-"), now = ended, "agent run ended");
        if ended {
            self.runs_ended
                .with_label_values(&[ended_by.as_str()])
                .inc();
        }
        if let Some(workspace) = workspace {
            workspace
                .end(&format!("its agent's run ended ({})", ended_by.as_str()))
                .await;
        }
        Ok(())
    }
}
