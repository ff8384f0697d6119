//! [`Model`]: typed, validated, retried, rate-limited and accounted generations.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use proto::generation::{FunctionSpecs, Implementation, TestCases};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::adaptive::{Change, Outcome};
use crate::limits::{self, Limits, SharedLimits};

use crate::schema::{cached_spec_for, extract_json, validate};
use crate::{
    Call, CallError, ChatRequest, ChatResponse, Error, Message, Metrics, Options, Phase, Prompt,
    Provider, ProviderKind, SchemaSpec, Usage, turnstile::Lane,
};

/// A type the model can be asked to answer in.
pub trait Answer: JsonSchema + DeserializeOwned + Send {
    /// The schema's name, as the API sees it.
    const NAME: &'static str;
    /// Whether the server may enforce the schema strictly (all fields required, closed
    /// objects); false when the type holds free-form JSON values.
    const STRICT: bool;
    /// Asked as free text, with no schema (a plain chat call), and read by
    /// [`Answer::from_text`] alone.
    const TEXT: bool = false;

    /// The answer read from text that is not its structured form (e.g. the code of a fenced
    /// block): what an answer that fails its schema falls back to before it is asked again.
    fn from_text(_text: &str) -> Option<Self> {
        None
    }
}

impl Answer for FunctionSpecs {
    const NAME: &'static str = "function_specs";
    const STRICT: bool = true;
}

impl Answer for TestCases {
    const NAME: &'static str = "test_cases";
    const STRICT: bool = false;
}

impl Answer for Implementation {
    const NAME: &'static str = "implementation";
    const STRICT: bool = true;

    fn from_text(text: &str) -> Option<Self> {
        Some(Implementation {
            code: crate::schema::fenced_code(text)?,
            analysis: None,
        })
    }
}

/// Code asked for as a plain chat call would ask for it (the request itself, the answer in a
/// fenced block): a job's first implementation of a function its request wrote the stub of.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, JsonSchema)]
pub struct Completion {
    pub code: String,
}

impl Answer for Completion {
    const NAME: &'static str = "completion";
    const STRICT: bool = true;
    const TEXT: bool = true;

    /// The first fenced block's code; else, from a model that answered in the structured form
    /// all the same, its `code`; else the whole answer (what a plain call's caller takes).
    fn from_text(text: &str) -> Option<Self> {
        let code = crate::schema::fenced_code(text)
            .or_else(|| {
                let value = extract_json(text)?;
                Some(value.get("code")?.as_str()?.to_owned())
            })
            .unwrap_or_else(|| text.trim().to_owned() + "\n");
        Some(Completion { code })
    }
}

/// A validated answer and what it cost.
#[derive(Debug, Clone)]
pub struct Generated<T> {
    pub value: T,
    pub usage: Usage,
    /// HTTP calls made, retries included.
    pub calls: u32,
    /// Answers received, invalid ones included.
    pub answers: u32,
    pub elapsed: Duration,
}

/// A place under the model's concurrency limit, held between a task's calls ([`Model::seat`],
/// [`Model::generate_in`]); dropped, the place is given back (a shared lease in the
/// background). An empty seat (the default) holds nothing: its first call waits for one.
///
/// A seat kept from one call to the next skips the wait, not the meters: requests per second
/// and tokens per minute are charged per call, and a provider's pause is honoured as the
/// shared limits announce it (`SharedLimits::paused_until`: while a process may have missed
/// an announcement, its kept seats read the pause instead).
#[derive(Debug, Default)]
pub struct Seat(Option<limits::Permit>);

/// The model client; cheap to clone.
#[derive(Clone)]
pub struct Model {
    provider: Arc<dyn Provider>,
    options: Arc<Options>,
    limits: Limits,
    metrics: Metrics,
    /// Tools go in the prompt ([`crate::ToolCalling::Prompted`], or since the server refused
    /// them), shared by every clone.
    prompted_tools: Arc<std::sync::atomic::AtomicBool>,
    /// Whether this process asked the server for its slots yet (once, before its first call).
    slots_asked: Arc<std::sync::atomic::AtomicBool>,
    /// When this process last asked the server for its queue, and whether it has one to
    /// report (a server that reports none is not asked again).
    queue_asked: Arc<std::sync::Mutex<QueueAsked>>,
    /// This process's calls at the server now, each with when it was sent.
    calls_out: Arc<CallsOut>,
}

/// [`Model::calls_out`].
#[derive(Debug, Default)]
struct CallsOut {
    next: AtomicU64,
    sent: std::sync::Mutex<std::collections::HashMap<u64, Instant>>,
}

impl CallsOut {
    /// A call sent now, counted out until the guard drops.
    fn send(self: &Arc<Self>) -> CallOut {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.sent
            .lock()
            .expect("poisoned")
            .insert(id, Instant::now());
        CallOut(Arc::clone(self), id)
    }

    /// Whether a call sent within `within` is still out (its deadline not passed).
    fn any_within(&self, within: Duration) -> bool {
        let sent = self.sent.lock().expect("poisoned");
        sent.values().any(|at| at.elapsed() < within)
    }
}

struct CallOut(Arc<CallsOut>, u64);

impl Drop for CallOut {
    fn drop(&mut self) {
        self.0.sent.lock().expect("poisoned").remove(&self.1);
    }
}

/// [`Model::queue_asked`].
#[derive(Debug, Default)]
struct QueueAsked {
    last: Option<Instant>,
    none: bool,
    /// A question is out: no other is asked meanwhile.
    asking: bool,
}

/// The longest [`Model::probe`] takes: the provider's probe, bounded by its 5 s (7 s at the
/// backstop), then a read of the cluster's limit state.
pub const PROBE_WITHIN: Duration = Duration::from_secs(15);

/// How often a process asks a server that reports its queue (vLLM's `/metrics`) for it.
const QUEUE_EVERY: Duration = Duration::from_secs(2);

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("provider", &self.provider.name())
            .field("model", &self.provider.model())
            .finish()
    }
}

impl Model {
    /// The provider stack the options describe: the provider, wrapped in a recorder or
    /// replaced by a replayer when configured.
    pub fn from_options(options: &Options, metrics: Metrics) -> Result<Self, Error> {
        let provider: Arc<dyn Provider> = if let Some(dir) = &options.replay_dir {
            Arc::new(crate::record::Replayer::new(dir.clone(), &options.model))
        } else {
            let inner: Arc<dyn Provider> = match options.provider {
                ProviderKind::Openai => Arc::new(crate::openai::OpenAi::new(options)?),
                ProviderKind::Anthropic => Arc::new(crate::anthropic::Anthropic::new(options)?),
                ProviderKind::Scripted => {
                    let path = options.script_file.as_ref().ok_or_else(|| {
                        Error::Config("model.provider = scripted needs model.script_file".into())
                    })?;
                    Arc::new(crate::scripted::Scripted::from_file(path)?)
                }
            };
            match &options.record_dir {
                Some(dir) => Arc::new(crate::record::Recorder::new(inner, dir.clone())?),
                None => inner,
            }
        };
        Ok(Self::new(provider, options.clone(), metrics))
    }

    /// A client whose limits hold for this process alone (see [`Self::with_shared_limits`]).
    pub fn new(provider: Arc<dyn Provider>, options: Options, metrics: Metrics) -> Self {
        Self {
            provider,
            limits: Limits::local(limits_config(&options)),
            prompted_tools: Arc::new(std::sync::atomic::AtomicBool::new(
                options.tool_calling == crate::ToolCalling::Prompted,
            )),
            slots_asked: Arc::default(),
            queue_asked: Arc::default(),
            calls_out: Arc::default(),
            options: Arc::new(options),
            metrics,
        }
        .limit_shown()
    }

    /// The limit in force on `/metrics` from the start, not only after its first change.
    fn limit_shown(self) -> Self {
        self.show_limit();
        self
    }

    /// The limit in force as this process knows it, on `/metrics`.
    fn show_limit(&self) {
        self.metrics
            .concurrency_limit
            .with_label_values(&[self.provider.name(), self.provider.model()])
            .set(i64::from(self.limits.in_force()));
    }

    /// Holds `max_concurrency`, `requests_per_second` and `tokens_per_minute` for every
    /// process that shares `store` (the cluster), not for this one alone.
    pub fn with_shared_limits(mut self, store: Arc<dyn SharedLimits>) -> Self {
        self.limits = Limits::shared(limits_config(&self.options), store);
        self.limit_shown()
    }

    /// What identifies the provider's limits: the same server and key share them. The key is
    /// hashed, never shown.
    pub fn limits_scope(&self) -> String {
        use sha2::Digest;
        let mut hash = sha2::Sha256::new();
        hash.update(self.provider.name());
        hash.update([0]);
        hash.update(self.provider.endpoint());
        hash.update([0]);
        hash.update(self.options.api_key.as_deref().unwrap_or_default());
        hex::encode(&hash.finalize()[..8])
    }

    /// Whether the provider answers now (`Err` names the endpoint and the failure).
    /// A server that answered a call (anyone's in the cluster) within a call's deadline, or
    /// holds one of this process's calls sent within it, is answering, if slowly: its probe
    /// unanswered while it works through its queue (a one-slot server may not answer
    /// anything else meanwhile) does not make it down. One that refuses the probe is down.
    /// Answers within [`PROBE_WITHIN`]: whoever bounds it (the worker's gate) must allow
    /// that much, or an unanswered probe is cut before it is told from a slow server.
    pub async fn probe(&self) -> Result<(), String> {
        // A backstop behind the provider's own 5 s HTTP timeout (which answers first, naming
        // its request), for a provider that sets none.
        let backstop = crate::http::PROBE_TIMEOUT + Duration::from_secs(2);
        let asked = tokio::time::timeout(backstop, self.provider.probe()).await;
        let probed = asked.unwrap_or_else(|_| {
            Err(crate::ProbeFailure {
                message: format!(
                    "{}: no answer within {backstop:?}",
                    self.provider.endpoint()
                ),
                unanswered: true,
            })
        });
        match probed {
            Ok(()) => Ok(()),
            // Refused, unknown, or a 5xx: down, whatever it answered before.
            Err(e) if !e.unanswered => Err(e.message),
            Err(e) => {
                let within = self
                    .limits
                    .deadline(self.options.max_tokens, self.options.timeout);
                if self.limits.answering(within).await || self.calls_out.any_within(within) {
                    tracing::info!(probe = %e, ?within, "the model's probe went unanswered, but it answered a call or holds one within a call's deadline: slow, not down");
                    Ok(())
                } else {
                    Err(e.message)
                }
            }
        }
    }

    /// The concurrency limit in force, and the adaptive limit's state when it is found
    /// (`None`: fixed at `model.max_concurrency`).
    pub fn concurrency(&self) -> (u32, Option<crate::adaptive::State>) {
        (self.limits.in_force(), self.limits.adaptive())
    }

    /// Asks the server once for the calls it runs at once (llama.cpp's `/props`): the limit is
    /// capped at them.
    async fn ask_slots(&self) {
        if self.slots_asked.swap(true, Ordering::SeqCst) || !self.options.adaptive_concurrency {
            return;
        }
        let slots = self.provider.slots().await;
        if let Some(slots) = slots {
            tracing::info!(slots, "the model server reports the calls it runs at once");
        }
        if let Some(change) = self.limits.capacity(slots).await {
            self.limit_changed(change);
        }
    }

    /// Asks the server for its queue, at most every [`QUEUE_EVERY`], in the background: a
    /// server that reports requests waiting holds the limit at what it runs. The first
    /// answer without a report ends the asking (no answer does not).
    fn ask_queue(&self) {
        if !self.options.adaptive_concurrency {
            return;
        }
        {
            let mut asked = self.queue_asked.lock().expect("poisoned");
            if asked.none || asked.asking || asked.last.is_some_and(|at| at.elapsed() < QUEUE_EVERY)
            {
                return;
            }
            asked.last = Some(Instant::now());
            asked.asking = true;
        }
        let this = self.clone();
        tokio::spawn(async move {
            let report = this.provider.queue().await;
            this.queue_asked.lock().expect("poisoned").asking = false;
            let queue = match report {
                crate::adaptive::QueueReport::Queue(queue) => queue,
                crate::adaptive::QueueReport::None => {
                    this.queue_asked.lock().expect("poisoned").none = true;
                    return;
                }
                // Asked again at the next turn: a loaded server answers slowly.
                crate::adaptive::QueueReport::Unanswered => return,
            };
            if let Some(change) = this.limits.queued(queue).await {
                this.limit_changed(change);
            }
            this.show_limit();
        });
    }

    /// `provider/model`, for results and logs.
    pub fn describe(&self) -> String {
        format!("{}/{}", self.provider.name(), self.provider.model())
    }

    /// Asks for an answer of type `T`, validates it, and asks again (quoting the problem) when
    /// it does not validate, up to `max_answer_attempts` answers. Everything happens before
    /// `deadline`.
    pub async fn generate<T: Answer>(
        &self,
        phase: Phase,
        function: Option<&str>,
        prompt: &Prompt,
        deadline: Instant,
    ) -> Result<Generated<T>, Error> {
        self.generate_in(
            &Call::default(),
            &mut Seat::default(),
            phase,
            function,
            prompt,
            deadline,
        )
        .await
    }

    /// Waits for the concurrency limit ahead of a call: a task takes its seat while it does
    /// something else first (reads its job), and its call then starts without asking.
    pub async fn seat(&self, lane: &Lane) -> Seat {
        Seat(Some(self.limits.hold(lane).await))
    }

    /// [`Model::generate`] in `seat`: its calls use the seat's permit when it holds one, and
    /// leave theirs in it, so that the caller's next call follows without waiting for the
    /// concurrency limit again (dropping the seat gives the permit back). A call the provider
    /// failed or throttled gives it back before waiting to try again; an answer that does not
    /// validate keeps it for the question asked again.
    pub async fn generate_in<T: Answer>(
        &self,
        call: &Call,
        seat: &mut Seat,
        phase: Phase,
        function: Option<&str>,
        prompt: &Prompt,
        deadline: Instant,
    ) -> Result<Generated<T>, Error> {
        let max_answers = self.options.max_answer_attempts.max(1);
        self.answered(call, seat, phase, function, prompt, max_answers, deadline)
            .await
    }

    /// [`Model::generate_in`] for an answer the caller can do without: one answer, not asked
    /// again when it does not validate (`Error::InvalidAnswer` after one).
    pub async fn generate_optional_in<T: Answer>(
        &self,
        call: &Call,
        seat: &mut Seat,
        phase: Phase,
        function: Option<&str>,
        prompt: &Prompt,
        deadline: Instant,
    ) -> Result<Generated<T>, Error> {
        self.answered(call, seat, phase, function, prompt, 1, deadline)
            .await
    }

    /// Asks until an answer validates, at most `max_answers` times.
    #[allow(clippy::too_many_arguments)] // generate_in's arguments and how many answers
    async fn answered<T: Answer>(
        &self,
        call: &Call,
        seat: &mut Seat,
        phase: Phase,
        function: Option<&str>,
        prompt: &Prompt,
        max_answers: u32,
        deadline: Instant,
    ) -> Result<Generated<T>, Error> {
        let started = Instant::now();
        let mut request = Self::request::<T>(phase, function, prompt);
        let mut usage = Usage::default();
        let mut calls = 0;
        let mut last_problem = String::new();
        for answer in 1..=max_answers {
            request.max_tokens = self.answer_budget(&request)?;
            let (mut response, made) = self.call(call, seat, &request, deadline).await;
            calls += made;
            // A server that refuses the prompt with the answer's budget for its context window
            // says its window and the prompt's tokens: asked again at once with what is left.
            if let Err(Error::Rejected { message, .. }) = &response
                && let Some((window, prompt_tokens)) = context_refusal(message)
            {
                let max_tokens = request.max_tokens.unwrap_or(self.options.max_tokens);
                let room = u64::from(window).saturating_sub(prompt_tokens + CONTEXT_MARGIN);
                let min_answer = MIN_ANSWER_TOKENS.min(max_tokens);
                if room < u64::from(min_answer) {
                    return Err(Error::ContextWindow {
                        phase: phase.as_str(),
                        prompt_tokens,
                        window,
                        min_answer,
                    });
                }
                if room < u64::from(max_tokens) {
                    tracing::info!(
                        phase = phase.as_str(),
                        window,
                        prompt_tokens,
                        max_tokens = room,
                        "the server's context window leaves less than the answer's budget: asking again with what it leaves"
                    );
                    request.max_tokens = Some(u32::try_from(room).unwrap_or(max_tokens));
                    let (again, made) = self.call(call, seat, &request, deadline).await;
                    calls += made;
                    response = again;
                }
            }
            let response = response?;
            usage += response.usage;
            match parse::<T>(request.schema.as_ref(), &response) {
                Ok(value) => {
                    return Ok(Generated {
                        value,
                        usage,
                        calls,
                        answers: answer,
                        elapsed: started.elapsed(),
                    });
                }
                Err(problem) => {
                    // An answer stopped at its budget is most often invalid for that alone:
                    // the reason says so (what a repair or a failure quotes).
                    let problem = if response.truncated {
                        format!(
                            "the answer was cut off at its limit of {} tokens before it was \
                             complete ({problem})",
                            request.max_tokens.unwrap_or(self.options.max_tokens)
                        )
                    } else {
                        problem
                    };
                    self.count(phase, "invalid_answer");
                    tracing::warn!(phase = phase.as_str(), answer, %problem, "model answer invalid");
                    // A cut-off answer is quoted by its start only: all of it would fill the
                    // next prompt with the budget it overran.
                    let quoted = if response.truncated {
                        let head: String =
                            response.text.chars().take(CUT_OFF_QUOTE_CHARS).collect();
                        format!("{head}\n[… cut off]")
                    } else {
                        response.text.clone()
                    };
                    request.messages.push(Message::assistant(quoted));
                    let shorter = if response.truncated { ", shorter," } else { "" };
                    let again = match &request.schema {
                        Some(schema) => format!(
                            "Answer again{shorter} with only a JSON object that follows the `{}` schema.",
                            schema.name
                        ),
                        None => {
                            format!("Answer again{shorter} with the code in one fenced code block.")
                        }
                    };
                    request.messages.push(Message::user(format!(
                        "That answer is not valid: {problem}\n{again}"
                    )));
                    last_problem = problem;
                }
            }
        }
        Err(Error::InvalidAnswer {
            phase: phase.as_str(),
            attempts: max_answers,
            reason: last_problem,
        })
    }

    /// `n` answers to one prompt, as [`Model::generate_in`] gives one: a single call asking
    /// for `n` (OpenAI's `n`), each of its answers validated, then one call after another for
    /// what it did not give (a server that samples one at a time, an invalid answer). What the
    /// first call spent is charged to the first answer returned.
    #[allow(clippy::too_many_arguments)] // generate_in's arguments and how many
    pub async fn generate_n_in<T: Answer>(
        &self,
        call: &Call,
        seat: &mut Seat,
        phase: Phase,
        function: Option<&str>,
        prompt: &Prompt,
        n: u32,
        deadline: Instant,
    ) -> Result<Vec<Generated<T>>, Error> {
        if n <= 1 {
            return Ok(vec![
                self.generate_in(call, seat, phase, function, prompt, deadline)
                    .await?,
            ]);
        }
        let started = Instant::now();
        let mut request = Self::request::<T>(phase, function, prompt);
        request.n = n;
        request.max_tokens = self.answer_budget(&request)?;
        let (response, calls) = self.call(call, seat, &request, deadline).await;
        let response = response?;
        let (mut usage, mut calls) = (response.usage, calls);
        let answers: Vec<ChatResponse> = std::iter::once(ChatResponse {
            others: Vec::new(),
            ..response.clone()
        })
        .chain(response.others.iter().map(|choice| ChatResponse {
            text: choice.text.clone(),
            json: None,
            usage: Usage::default(),
            truncated: choice.truncated,
            others: Vec::new(),
            tool_calls: Vec::new(),
            tool_problem: None,
            token_ids: None,
        }))
        .collect();
        let given = answers.len();
        let mut generated = Vec::with_capacity(n as usize);
        for answer in &answers {
            match parse::<T>(request.schema.as_ref(), answer) {
                Ok(value) => generated.push(Generated {
                    value,
                    usage: std::mem::take(&mut usage),
                    calls: std::mem::take(&mut calls),
                    answers: 1,
                    elapsed: started.elapsed(),
                }),
                Err(problem) => {
                    self.count(phase, "invalid_answer");
                    tracing::warn!(phase = phase.as_str(), %problem, "one of several model answers invalid");
                }
            }
        }
        tracing::debug!(
            phase = phase.as_str(),
            asked = n,
            given,
            valid = generated.len(),
            "several answers in one call"
        );
        while generated.len() < n as usize {
            let mut more = self
                .generate_in(call, seat, phase, function, prompt, deadline)
                .await?;
            more.usage += std::mem::take(&mut usage);
            more.calls += std::mem::take(&mut calls);
            generated.push(more);
        }
        Ok(generated)
    }

    /// One step of a tool-using agent: the conversation so far and the tools it may call, one
    /// answer (transport retries only: an answer that calls no tool, or calls one wrongly, is
    /// the agent's to tell the model about). The tools go as the API's own tool calling, or in
    /// the prompted form ([`crate::tools`]) when `model.tool_calling` says so or the server
    /// refuses `tools`.
    pub async fn turn(
        &self,
        call: &Call,
        seat: &mut Seat,
        turn: Turn<'_>,
        deadline: Instant,
    ) -> Result<Turned, Error> {
        let started = Instant::now();
        let mut prompted = self.prompted_tools.load(Ordering::Relaxed);
        let mut calls = 0;
        loop {
            let request = if prompted {
                ChatRequest {
                    phase: Phase::Agent,
                    function: turn.function.map(str::to_owned),
                    system: format!(
                        "{}{}",
                        turn.system,
                        crate::tools::prompted_instructions(turn.tools)
                    ),
                    messages: crate::tools::prompted_history(turn.messages),
                    schema: None,
                    max_tokens: None,
                    n: 1,
                    tools: Vec::new(),
                    temperature: turn.temperature,
                    seed: turn.seed,
                }
            } else {
                ChatRequest {
                    phase: Phase::Agent,
                    function: turn.function.map(str::to_owned),
                    system: turn.system.to_owned(),
                    messages: turn.messages.to_vec(),
                    schema: None,
                    max_tokens: None,
                    n: 1,
                    tools: turn.tools.to_vec(),
                    temperature: turn.temperature,
                    seed: turn.seed,
                }
            };
            let mut request = request;
            request.max_tokens = self.answer_budget(&request)?;
            let (response, made) = self.call(call, seat, &request, deadline).await;
            calls += made;
            let mut response = match response {
                // A server that does not take `tools` says so by naming them: the prompted
                // form from now on, for every clone, and this step asked again at once.
                Err(Error::Rejected { status, message })
                    if !prompted && refuses_tools(&message) =>
                {
                    tracing::warn!(
                        endpoint = %self.provider.endpoint(),
                        status,
                        answer = %message,
                        "the model server refuses tool calling; tools go in the prompt from now on"
                    );
                    self.prompted_tools.store(true, Ordering::Relaxed);
                    prompted = true;
                    continue;
                }
                other => other?,
            };
            if prompted {
                match crate::tools::parse_prompted(&response.text) {
                    Ok(action) => response.tool_calls = vec![action],
                    Err(problem) => response.tool_problem = Some(problem),
                }
            }
            return Ok(Turned {
                text: response.text,
                tool_calls: response.tool_calls,
                tool_problem: response.tool_problem,
                usage: response.usage,
                truncated: response.truncated,
                token_ids: response.token_ids,
                calls,
                prompted,
                elapsed: started.elapsed(),
            });
        }
    }

    /// The request of a first call for a `T` answer to `prompt`.
    fn request<T: Answer>(phase: Phase, function: Option<&str>, prompt: &Prompt) -> ChatRequest {
        ChatRequest {
            phase,
            function: function.map(str::to_owned),
            system: prompt.system.clone(),
            messages: vec![Message::user(prompt.user.clone())],
            schema: (!T::TEXT).then(|| cached_spec_for::<T>(T::NAME, T::STRICT)),
            max_tokens: None,
            n: 1,
            tools: Vec::new(),
            temperature: None,
            seed: None,
        }
    }

    /// One answer, with transport retries. Returns the number of calls made alongside.
    async fn call(
        &self,
        call: &Call,
        seat: &mut Seat,
        request: &ChatRequest,
        deadline: Instant,
    ) -> (Result<ChatResponse, Error>, u32) {
        let attempts = AtomicU32::new(0);
        let max_attempts = self.options.max_attempts.max(1);
        let backoff = ExponentialBuilder::default()
            .with_min_delay(self.options.min_backoff)
            .with_max_delay(self.options.max_backoff)
            .with_max_times(usize::try_from(max_attempts - 1).unwrap_or(0));
        // HTTP calls (for accounting) include throttled ones; attempts do not.
        let calls = AtomicU32::new(0);
        let permit = std::sync::Mutex::new(seat.0.take());
        let attempt = || async {
            attempts.fetch_add(1, Ordering::SeqCst);
            let held = permit.lock().expect("poisoned").take();
            let (outcome, kept) = self.call_once(call, held, request, &calls).await;
            *permit.lock().expect("poisoned") = kept;
            outcome
        };
        let retried = attempt
            .retry(backoff)
            .when(|e: &CallError| {
                matches!(
                    e,
                    CallError::Retryable { .. } | CallError::ServerError { .. }
                )
            })
            .adjust(|e: &CallError, delay: Option<Duration>| {
                // `None`: attempts exhausted. Otherwise the server's wish, else full jitter:
                // a uniform wait in [0, exponential cap].
                let delay = delay?;
                match e {
                    CallError::Retryable {
                        retry_after: Some(wait),
                        ..
                    }
                    | CallError::ServerError {
                        retry_after: Some(wait),
                        ..
                    } => Some(*wait),
                    _ => Some(delay.mul_f64(rand::random::<f64>())),
                }
            })
            .notify(|e: &CallError, wait: Duration| {
                tracing::warn!(phase = request.phase.as_str(), error = %e, retry_in = ?wait, "model call failed; retrying");
            });
        let asked = Instant::now();
        let outcome = tokio::time::timeout_at(deadline, retried).await;
        seat.0 = permit.into_inner().expect("poisoned");
        let tried = attempts.load(Ordering::SeqCst);
        let made = calls.load(Ordering::SeqCst);
        let result = match outcome {
            Err(_) => Err(Error::Deadline(asked.elapsed())),
            Ok(Ok(response)) => Ok(response),
            Ok(Err(
                CallError::Retryable { message, .. } | CallError::Throttled { message, .. },
            )) => Err(Error::Unavailable {
                endpoint: format!("{} {}", self.provider.name(), self.provider.endpoint()),
                attempts: tried,
                last: message,
            }),
            Ok(Err(CallError::ServerError {
                status, message, ..
            })) => Err(Error::Failing {
                endpoint: format!("{} {}", self.provider.name(), self.provider.endpoint()),
                attempts: tried,
                status,
                last: message,
            }),
            Ok(Err(CallError::Rejected { status, message })) => {
                Err(Error::Rejected { status, message })
            }
            Ok(Err(CallError::SpendLimit(message))) => Err(Error::SpendLimit(message)),
            Ok(Err(CallError::ReplayMiss(message))) => Err(Error::ReplayMiss(message)),
        };
        (result, made)
    }

    /// One HTTP call under the limits, measured, with `held` (else a permit it waits for);
    /// answers with the permit to keep when the call succeeded. A 429 (or 529) slows everyone
    /// sharing the limits down and the call waits its turn again: throttling costs time, not
    /// attempts.
    async fn call_once(
        &self,
        call: &Call,
        mut held: Option<limits::Permit>,
        request: &ChatRequest,
        calls: &AtomicU32,
    ) -> (Result<ChatResponse, CallError>, Option<limits::Permit>) {
        let estimate = estimate_tokens(request);
        self.ask_slots().await;
        loop {
            let permit = match held.take() {
                Some(permit) => permit,
                None => self.limits.hold(&call.lane).await,
            };
            self.limits.meter(&call.lane, estimate).await;
            calls.fetch_add(1, Ordering::SeqCst);
            let outcome = self.measured(call, request).await;
            let used = outcome
                .as_ref()
                .map_or(0, |r| r.usage.prompt_tokens + r.usage.completion_tokens);
            self.limits.charge(estimate, used).await;
            match outcome {
                Ok(response) => return (Ok(response), Some(permit)),
                Err(CallError::Throttled {
                    message,
                    retry_after,
                }) => {
                    // Given back first: the pause is everyone's, and nobody calls meanwhile.
                    drop(permit);
                    tracing::info!(phase = request.phase.as_str(), %message, ?retry_after, "model throttled: slowing down");
                    self.limits.throttled(retry_after).await;
                }
                // Given back: a retry waits without holding a call's place.
                Err(other) => return (Err(other), None),
            }
        }
    }

    async fn measured(
        &self,
        call: &Call,
        request: &ChatRequest,
    ) -> Result<ChatResponse, CallError> {
        let labels = [
            self.provider.name(),
            self.provider.model(),
            request.phase.as_str(),
        ];
        // One span per HTTP exchange, named as the GenAI semantic conventions name a chat call.
        let span = tracing::info_span!(
            "model call",
            otel.name = format!("chat {}", labels[1]),
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            error.type = tracing::field::Empty,
            gen_ai.operation.name = "chat",
            gen_ai.system = labels[0],
            gen_ai.request.model = labels[1],
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            phase = labels[2],
            function = request.function.as_deref().unwrap_or("-"),
        );
        // The call's own deadline follows the server's measured pace (`model::adaptive`): a
        // slow server gets the time its answers take, a stalled call is not waited for the
        // whole `timeout`.
        let budget = request.max_tokens.unwrap_or(self.options.max_tokens);
        let deadline = self.limits.deadline(budget, self.options.timeout);
        let started = Instant::now();
        let in_flight = (
            crate::metrics::InFlight::new(
                self.metrics
                    .in_flight
                    .with_label_values(&[labels[0], labels[1]]),
            ),
            self.calls_out.send(),
        );
        let outcome = {
            use tracing::Instrument;
            let chat = self.provider.chat(request).instrument(span.clone());
            match tokio::time::timeout(deadline, chat).await {
                Ok(outcome) => outcome,
                Err(_) => Err(CallError::Retryable {
                    message: format!(
                        "timed out: no answer within {deadline:?} (four times a {budget}-token answer at the server's slowest recent pace, at most model.timeout)"
                    ),
                    retry_after: None,
                }),
            }
        };
        drop(in_flight);
        let elapsed = started.elapsed();
        let timed_out = matches!(&outcome, Err(CallError::Retryable { .. })) && elapsed >= deadline;
        let seen = match &outcome {
            Ok(response) => Some(Outcome::Answered {
                completion_tokens: response.usage.completion_tokens,
            }),
            _ if timed_out => Some(Outcome::TimedOut),
            // The server answered, if not with an answer: it is up.
            Err(
                CallError::ServerError { .. }
                | CallError::Rejected { .. }
                | CallError::Throttled { .. },
            ) => Some(Outcome::Answered {
                completion_tokens: 0,
            }),
            Err(_) => None,
        };
        if let Some(seen) = seen {
            if let Some(change) = self.limits.observe(elapsed, seen).await {
                self.limit_changed(change);
            }
            // Another worker's change is read with each observation: shown here too.
            self.show_limit();
            self.ask_queue();
        }
        call.add_exchange(elapsed);
        call.add_spent(outcome.as_ref().ok().map(|r| &r.usage));
        match &outcome {
            Ok(response) => {
                span.record("gen_ai.usage.input_tokens", response.usage.prompt_tokens);
                span.record(
                    "gen_ai.usage.output_tokens",
                    response.usage.completion_tokens,
                );
            }
            Err(e) => {
                span.record("otel.status_code", "error");
                span.record("error.type", e.kind());
            }
        }
        self.metrics
            .call_seconds
            .with_label_values(&labels)
            .observe(elapsed.as_secs_f64());
        match &outcome {
            Ok(response) => {
                self.count(request.phase, "ok");
                let tokens = &self.metrics.tokens;
                let p = response.usage.prompt_tokens;
                let c = response.usage.completion_tokens;
                tokens
                    .with_label_values(&[labels[0], labels[1], labels[2], "prompt"])
                    .inc_by(p);
                tokens
                    .with_label_values(&[labels[0], labels[1], labels[2], "completion"])
                    .inc_by(c);
            }
            Err(e) => self.count(
                request.phase,
                match e {
                    CallError::Retryable { .. } => "retryable",
                    CallError::ServerError { .. } => "server_error",
                    CallError::Throttled { .. } => "throttled",
                    CallError::Rejected { .. } => "rejected",
                    CallError::SpendLimit(_) => "spend_limit",
                    CallError::ReplayMiss(_) => "replay_miss",
                },
            ),
        }
        outcome
    }

    /// The answer's token budget in the model's context window (`None`: `max_tokens`, or no
    /// window known); an error when the prompt leaves less than [`MIN_ANSWER_TOKENS`] (or
    /// `max_tokens`, if smaller). The prompt is counted at about three characters a token,
    /// its schema included (a server may put it in the prompt or a grammar): more than most
    /// tokenizers give for code and prose, so that the server's own count stays inside.
    fn answer_budget(&self, request: &ChatRequest) -> Result<Option<u32>, Error> {
        let window = self.options.context_window;
        if window == 0 {
            return Ok(None);
        }
        let chars = request.system.len()
            + request
                .schema
                .as_ref()
                .map_or(0, |s| s.schema.to_string().len())
            + request
                .messages
                .iter()
                .map(|m| m.content.len())
                .sum::<usize>();
        let prompt_tokens = (chars as u64).div_ceil(3);
        let room = u64::from(window).saturating_sub(prompt_tokens);
        let max_tokens = self.options.max_tokens;
        let min_answer = MIN_ANSWER_TOKENS.min(max_tokens);
        if room < u64::from(min_answer) {
            return Err(Error::ContextWindow {
                phase: request.phase.as_str(),
                prompt_tokens,
                window,
                min_answer,
            });
        }
        Ok((room < u64::from(max_tokens)).then(|| u32::try_from(room).unwrap_or(max_tokens)))
    }

    /// The limit in force changed: said once, where an operator looks.
    fn limit_changed(&self, change: Change) {
        let labels = [self.provider.name(), self.provider.model()];
        self.metrics
            .limit_changes
            .with_label_values(&[labels[0], labels[1], change.reason.as_str()])
            .inc();
        tracing::info!(
            from = change.from,
            to = change.to,
            reason = change.reason.as_str(),
            "model concurrency limit changed"
        );
    }

    fn count(&self, phase: Phase, outcome: &str) {
        self.metrics
            .calls
            .with_label_values(&[
                self.provider.name(),
                self.provider.model(),
                phase.as_str(),
                outcome,
            ])
            .inc();
    }
}

/// The answer as `T`: structured JSON when the provider gave it, else JSON found in the text,
/// else what [`Answer::from_text`] reads in the text (a fenced block's code); a free-text
/// answer (`schema` `None`) by `from_text` alone.
fn parse<T: Answer>(schema: Option<&SchemaSpec>, response: &ChatResponse) -> Result<T, String> {
    if response.text.trim().is_empty() && response.json.is_none() {
        return Err("the answer was empty".to_owned());
    }
    let Some(schema) = schema else {
        return T::from_text(&response.text)
            .ok_or_else(|| "the answer holds no code block".to_owned());
    };
    let structured = match &response.json {
        Some(value) => Ok(value.clone()),
        None => extract_json(&response.text)
            .ok_or_else(|| "the answer contains no JSON object".to_owned()),
    }
    .and_then(|value| {
        validate(schema, &value)?;
        serde_json::from_value(value).map_err(|e| e.to_string())
    });
    structured.or_else(|problem| T::from_text(&response.text).ok_or(problem))
}

fn limits_config(options: &Options) -> limits::Config {
    limits::Config {
        max_concurrency: u32::try_from(options.max_concurrency).unwrap_or(u32::MAX),
        requests_per_second: options.requests_per_second,
        tokens_per_minute: options.tokens_per_minute,
        reserve: options.tenant_reserve,
        adaptive: options.adaptive_concurrency,
    }
}

/// Whether a refusal is the server not taking the request's `tools` (it names them).
fn refuses_tools(message: &str) -> bool {
    message.contains("tools") || message.contains("tool_choice")
}

/// One agent step's question ([`Model::turn`]).
#[derive(Debug, Clone, Copy)]
pub struct Turn<'a> {
    pub system: &'a str,
    /// The conversation so far, tool calls and results included.
    pub messages: &'a [Message],
    pub tools: &'a [crate::ToolSpec],
    /// What the scripted model and the logs key the step by (the run's id).
    pub function: Option<&'a str>,
    pub temperature: Option<f32>,
    pub seed: Option<u64>,
}

/// The model's answer to one agent step.
#[derive(Debug, Clone)]
pub struct Turned {
    pub text: String,
    pub tool_calls: Vec<crate::ToolCall>,
    /// The answer was meant as a tool call that cannot be read as one: why.
    pub tool_problem: Option<String>,
    pub usage: Usage,
    pub truncated: bool,
    pub token_ids: Option<Vec<u32>>,
    /// HTTP calls made, retries included.
    pub calls: u32,
    /// Asked in the prompted form.
    pub prompted: bool,
    pub elapsed: Duration,
}

/// The smallest answer worth asking for: a function and its analysis need more.
const MIN_ANSWER_TOKENS: u32 = 256;

/// Characters of a cut-off answer quoted when it is asked again (about 700 tokens).
const CUT_OFF_QUOTE_CHARS: usize = 2_000;

/// Tokens kept free when a server's own count of the prompt sets the answer's budget (a chat
/// template's closing tokens).
const CONTEXT_MARGIN: u64 = 16;

/// A server's refusal of a prompt too long for its context window with the answer's budget,
/// as OpenAI, vLLM and llama-cpp-python word it: "This model's maximum context length is 8192
/// tokens. However, you requested 12378 tokens (8282 in the messages, 4096 in the
/// completion)." The window and the prompt's tokens.
fn context_refusal(message: &str) -> Option<(u32, u64)> {
    let number_after = |text: &str, marker: &str| -> Option<u64> {
        let at = text.find(marker)? + marker.len();
        let digits: String = text[at..]
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    let window = number_after(message, "maximum context length is")?;
    let open = message.find("(")?;
    let prompt = message[open + 1..]
        .split_whitespace()
        .next()?
        .parse::<u64>()
        .ok()
        .filter(|_| message[open..].contains("in the messages"))?;
    Some((u32::try_from(window).ok()?, prompt))
}

/// The prompt's tokens, about four characters each, for admission before the provider counts.
fn estimate_tokens(request: &ChatRequest) -> u64 {
    let chars = request.system.len()
        + request
            .messages
            .iter()
            .map(|m| m.content.len())
            .sum::<usize>();
    (chars as u64).div_ceil(4)
}
