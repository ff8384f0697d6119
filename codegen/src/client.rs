//! Client commands: talk to a coordinator over its HTTP API.

use std::path::PathBuf;

use anyhow::{Context, bail};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use proto::Status;
use proto::TaskId;
use proto::api::{BatchAccepted, BatchResults, BatchStatus, BatchView, JobAccepted, JobView};
use proto::api::{ErrorBody, ExecutionSubmission, ExecutionView, Outcome};
use proto::job::{JobResult, JobStatus};

#[derive(Debug, clap::Args)]
pub struct ExecArgs {
    /// Program to run (`-` reads it from standard input).
    pub file: PathBuf,
    /// A test to run after the program in the same namespace (HumanEval style): the verdict is
    /// `passed` only when both run to their end.
    #[arg(long)]
    pub test: Option<PathBuf>,
    /// Language of the program (default: from the file's extension, else python).
    #[arg(long)]
    pub language: Option<String>,
    /// File whose contents become the program's standard input.
    #[arg(long)]
    pub stdin: Option<PathBuf>,
    /// Wall-clock limit in milliseconds (coordinator default when omitted).
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    /// CPU-time limit in milliseconds (none when omitted).
    #[arg(long)]
    pub cpu_time_ms: Option<u64>,
    /// Compiled languages: the compile's wall-clock limit in milliseconds (coordinator default
    /// when omitted).
    #[arg(long)]
    pub compile_timeout_ms: Option<u64>,
    /// Memory limit in MiB (coordinator default when omitted).
    #[arg(long)]
    pub memory_mb: Option<u64>,
    /// Coordinator URL.
    #[arg(long, env = "CODEGEN_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// API key, when the coordinator requires one (sent as `Authorization: Bearer KEY`).
    #[arg(long, env = "CODEGEN_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Sent as `Idempotency-Key`: a retry with the same key and arguments creates nothing new
    /// and gets the first answer.
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Print the whole result as JSON instead of the program's output.
    #[arg(long)]
    pub json: bool,
}

pub(crate) fn read_text(path: &std::path::Path) -> anyhow::Result<String> {
    if path.as_os_str() == "-" {
        return std::io::read_to_string(std::io::stdin()).context("reading standard input");
    }
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// The language named, or the one the file's extension says, or python.
fn language_of(named: Option<&str>, file: &std::path::Path) -> String {
    if let Some(named) = named {
        return named.to_owned();
    }
    file.extension()
        .and_then(|e| e.to_str())
        .and_then(proto::Language::from_extension)
        .unwrap_or(proto::Language::Python)
        .as_str()
        .to_owned()
}

/// Runs one program; exits 0 when it passed, 1 when it did not, 2 when the cluster failed us.
pub async fn exec(args: ExecArgs) -> anyhow::Result<u8> {
    let code = read_text(&args.file)?;
    let test = args.test.as_deref().map(read_text).transpose()?;
    let stdin = args.stdin.as_deref().map(read_text).transpose()?;
    let submission = ExecutionSubmission {
        id: None,
        language: language_of(args.language.as_deref(), &args.file),
        code,
        test,
        stdin,
        timeout_ms: args.timeout_ms,
        cpu_time_ms: args.cpu_time_ms,
        compile_timeout_ms: args.compile_timeout_ms,
        memory_mb: args.memory_mb,
        fresh_container: None,
        files: Default::default(),
        return_files: Default::default(),
    };
    let api = Api::new(&args.url, args.api_key.as_deref())?;
    let response = api
        .send_creating(
            api.http.post(api.url("/v1/executions")).json(&submission),
            args.idempotency_key.as_deref(),
        )
        .await?;
    let mut view = read_view(response).await?;
    // The coordinator answers 202 when the verdict takes longer than its wait; keep polling.
    while matches!(view.outcome, Outcome::Pending { .. }) {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let response = api
            .send(
                api.http
                    .get(api.url(&format!("/v1/executions/{}", view.id))),
            )
            .await?;
        view = read_view(response).await?;
    }
    let Outcome::Done(result) = &view.outcome else {
        unreachable!("loop exits on a verdict")
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&view)?);
    } else {
        if let Some(compile) = result.compile.as_ref().filter(|c| !c.output.is_empty()) {
            eprint!("{}", compile.output);
        }
        print!("{}", result.stdout);
        eprint!("{}", result.stderr);
        let mut summary = format!(
            "status={} exit_code={} duration_ms={}",
            result.status.as_str(),
            result
                .exit_code
                .map(|c| c.to_string())
                .unwrap_or_else(|| "-".into()),
            result.duration_ms
        );
        if let Some(compile) = &result.compile {
            summary.push_str(&format!(" compile_ms={}", compile.duration_ms));
        }
        if let Some(cpu) = result.cpu_ms {
            summary.push_str(&format!(" cpu_ms={cpu}"));
        }
        if let Some(peak) = result.peak_memory_kb {
            summary.push_str(&format!(" peak_memory_kb={peak}"));
        }
        if let Some(kind) = result.error_kind {
            summary.push_str(&format!(" error_kind={}", kind.as_str()));
        }
        if result.truncated {
            summary.push_str(" truncated=true");
        }
        if let Some(reason) = &result.reason {
            summary.push_str(&format!(" reason={reason:?}"));
        }
        eprintln!("{summary}");
    }
    Ok(match result.status {
        Status::Passed => 0,
        Status::SandboxError | Status::Error => 2,
        _ => 1,
    })
}

async fn read_view(response: reqwest::Response) -> anyhow::Result<ExecutionView> {
    let status = response.status();
    let bytes = response
        .bytes()
        .await
        .context("reading the coordinator's answer")?;
    if status.is_success() {
        return serde_json::from_slice(&bytes).context("unreadable answer from the coordinator");
    }
    Err(refusal(status, &bytes))
}

// ------------------------------------------------------------------------------------------
// Generation jobs: `codegen submit`, `codegen status`, `codegen batch`.

/// How a job's result is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A report: verdict, code and test results per function, timings, quality, history.
    Markdown,
    /// The result JSON as the coordinator returns it.
    Json,
    /// The code on stdout and a one-line summary on stderr.
    Plain,
}

#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    /// What to build, in plain language (`debug`, `refactor`: what the code is for; optional).
    pub instruction: Option<String>,
    /// Target language (default: the one the instruction names, else python).
    #[arg(long)]
    pub language: Option<String>,
    /// Implementation attempts per function (coordinator default when omitted).
    #[arg(long)]
    pub max_iterations: Option<u32>,
    /// Implementations a function's first attempt asks for, the best by the tests kept (1-10).
    #[arg(long)]
    pub candidates: Option<u32>,
    /// Repairs shown no lessons and leaving none (`memory: off`).
    #[arg(long)]
    pub no_memory: bool,
    /// Most tokens the job may spend (coordinator default when omitted); once spent, it ends
    /// `stopped_by: budget` with its best code so far.
    #[arg(long)]
    pub max_tokens_total: Option<u64>,
    /// Where the coordinator POSTs the result once the job ends (a signed webhook; the
    /// operator must allow its host).
    #[arg(long)]
    pub callback_url: Option<String>,
    /// Constraints the code must respect.
    #[arg(long)]
    pub constraints: Option<String>,
    /// What the tests must cover.
    #[arg(long)]
    pub test_requirements: Option<String>,
    /// Follow the job's progress (on stderr) and print its result; without it, print the job id.
    #[arg(long)]
    pub wait: bool,
    /// Output format of the result (with --wait).
    #[arg(long, value_enum, default_value_t = Format::Markdown)]
    pub format: Format,
    /// Coordinator URL.
    #[arg(long, env = "CODEGEN_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// API key, when the coordinator requires one (sent as `Authorization: Bearer KEY`).
    #[arg(long, env = "CODEGEN_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Sent as `Idempotency-Key`: a retry with the same key and arguments creates nothing new
    /// and gets the first answer.
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Set by `codegen debug` and `codegen refactor`: the given code and what to do with it.
    #[arg(skip)]
    pub rework: Option<ReworkArgs>,
}

/// The given code of a `debug` or `refactor` job, and what to do with it.
#[derive(Debug, Clone)]
pub struct ReworkArgs {
    pub mode: proto::job::Mode,
    pub code: String,
    pub error: Option<String>,
    pub goals: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct DebugArgs {
    /// The code with the error (`-`: standard input).
    pub file: PathBuf,
    /// A file with the error it raised, or how it misbehaves (a traceback, a failing test's
    /// output, a description).
    #[arg(long, required_unless_present = "error")]
    pub error_file: Option<PathBuf>,
    /// The error, on the command line.
    #[arg(long, conflicts_with = "error_file")]
    pub error: Option<String>,
    #[command(flatten)]
    pub job: SubmitArgs,
}

#[derive(Debug, clap::Args)]
pub struct RefactorArgs {
    /// The code to refactor (`-`: standard input).
    pub file: PathBuf,
    /// What to improve (repeatable): readability, types, performance, ... (default:
    /// readability).
    #[arg(long = "goal")]
    pub goals: Vec<String>,
    #[command(flatten)]
    pub job: SubmitArgs,
}

/// `codegen debug`: a `debug` job of FILE and its error; exits as `codegen submit`.
pub async fn debug(args: DebugArgs) -> anyhow::Result<u8> {
    let code = read_text(&args.file)?;
    let error = match (&args.error, &args.error_file) {
        (Some(error), _) => error.clone(),
        (None, Some(path)) => read_text(path)?,
        (None, None) => anyhow::bail!("give the error with --error-file or --error"),
    };
    let mut job = args.job;
    job.language = Some(language_of(job.language.as_deref(), &args.file));
    job.instruction = job
        .instruction
        .or_else(|| Some(format!("Fix the error in {}.", args.file.display())));
    job.rework = Some(ReworkArgs {
        mode: proto::job::Mode::Debug,
        code,
        error: Some(error),
        goals: Vec::new(),
    });
    submit(job).await
}

/// `codegen refactor`: a `refactor` job of FILE toward its goals; exits as `codegen submit`.
pub async fn refactor(args: RefactorArgs) -> anyhow::Result<u8> {
    let code = read_text(&args.file)?;
    let mut job = args.job;
    job.language = Some(language_of(job.language.as_deref(), &args.file));
    job.instruction = job
        .instruction
        .or_else(|| Some(format!("Refactor {}.", args.file.display())));
    job.rework = Some(ReworkArgs {
        mode: proto::job::Mode::Refactor,
        code,
        error: None,
        goals: args.goals,
    });
    submit(job).await
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The job id (from `codegen submit`).
    pub id: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Markdown)]
    pub format: Format,
    /// Coordinator URL.
    #[arg(long, env = "CODEGEN_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// API key, when the coordinator requires one (sent as `Authorization: Bearer KEY`).
    #[arg(long, env = "CODEGEN_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct BatchArgs {
    /// JSONL file, one job per line (the body of `POST /v1/jobs`); `-` reads standard input.
    pub input: PathBuf,
    /// Where to write the results, one JSON result per line in input order; `-` is stdout.
    #[arg(short, long)]
    pub output: PathBuf,
    /// The least time between two reads of the batch's progress, in milliseconds (each read
    /// waits for a job to finish, so a quiet batch is not read at all).
    #[arg(long, default_value_t = 500)]
    pub poll_ms: u64,
    /// Coordinator URL.
    #[arg(long, env = "CODEGEN_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// API key, when the coordinator requires one (sent as `Authorization: Bearer KEY`).
    #[arg(long, env = "CODEGEN_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct CacheArgs {
    #[command(subcommand)]
    pub action: CacheAction,
    /// Coordinator URL.
    #[arg(
        long,
        global = true,
        env = "CODEGEN_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    pub url: String,
    /// API key, when the coordinator requires one (sent as `Authorization: Bearer KEY`).
    #[arg(long, global = true, env = "CODEGEN_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
}

#[derive(Debug, Clone, Copy, clap::Subcommand)]
pub enum CacheAction {
    /// Entries and hit/miss counters of both caches, as JSON.
    Stats,
    /// Remove every cached solution and function.
    Clear,
}

/// `codegen cache stats|clear`.
pub async fn cache(args: CacheArgs) -> anyhow::Result<u8> {
    let api = Api::new(&args.url, args.api_key.as_deref())?;
    let answer = match args.action {
        CacheAction::Stats => api.get("/v1/cache/stats").await?,
        CacheAction::Clear => {
            let response = api.send(api.http.delete(api.url("/v1/cache"))).await?;
            read_json(response).await?.1
        }
    };
    println!("{}", serde_json::to_string_pretty(&answer)?);
    Ok(0)
}

/// The coordinator's HTTP API.
pub(crate) struct Api {
    pub(crate) http: reqwest::Client,
    base: String,
}

impl Api {
    pub(crate) fn new(url: &str, api_key: Option<&str>) -> anyhow::Result<Self> {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(key) = api_key {
            let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {key}"))
                .context("the API key is not a valid header value")?;
            value.set_sensitive(true);
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        let http = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .default_headers(headers)
            .build()
            .context("building the HTTP client")?;
        Ok(Self {
            http,
            base: url.trim_end_matches('/').to_owned(),
        })
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends a request that creates work with `Idempotency-Key` (`key`, else one made here)
    /// and sends it again, with the same key, while the coordinator says to try later (503,
    /// 429: after its `Retry-After` at least) or cannot be reached: the key makes a retry of a
    /// request that did get through create nothing twice. Returns the last answer.
    pub(crate) async fn send_creating(
        &self,
        request: reqwest::RequestBuilder,
        key: Option<&str>,
    ) -> anyhow::Result<reqwest::Response> {
        let key = key.map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_owned);
        self.send_retrying(
            request.header("Idempotency-Key", key),
            retry_backoff(),
            true,
        )
        .await
    }

    /// Sends `request`, and again after `backoff`'s delays while the coordinator says to try
    /// later (503, 429: after its `Retry-After` at least), and with `unanswered` also while it
    /// cannot be reached (only for a request that is safe to send twice). Returns the last
    /// answer.
    pub(crate) async fn send_retrying(
        &self,
        request: reqwest::RequestBuilder,
        backoff: backon::ExponentialBuilder,
        unanswered: bool,
    ) -> anyhow::Result<reqwest::Response> {
        use backon::Retryable;

        let once = || async {
            let Some(again) = request.try_clone() else {
                unreachable!("the requests of this client have their bodies in memory");
            };
            match again.send().await {
                Ok(response)
                    if matches!(
                        response.status(),
                        reqwest::StatusCode::SERVICE_UNAVAILABLE
                            | reqwest::StatusCode::TOO_MANY_REQUESTS
                    ) =>
                {
                    let retry_after = response
                        .headers()
                        .get(reqwest::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(std::time::Duration::from_secs);
                    Err(Try::Later {
                        response,
                        retry_after,
                    })
                }
                Ok(response) => Ok(response),
                Err(e) => Err(Try::Unanswered(e)),
            }
        };
        let answered = once
            .retry(backoff)
            .when(|t| match t {
                Try::Later { .. } => true,
                Try::Unanswered(e) => unanswered && !e.is_builder(),
            })
            .adjust(|t, delay| match t {
                Try::Later {
                    retry_after: Some(after),
                    ..
                } => delay.map(|d| d.max(*after)),
                _ => delay,
            })
            .notify(|t, delay| match t {
                Try::Later { response, .. } => eprintln!(
                    "the coordinator answered {}; trying again in {delay:.1?}",
                    response.status()
                ),
                Try::Unanswered(e) => eprintln!(
                    "no answer from the coordinator at {} ({e}); trying again in {delay:.1?}",
                    self.base
                ),
            })
            .await;
        match answered {
            Ok(response) | Err(Try::Later { response, .. }) => Ok(response),
            Err(Try::Unanswered(e)) => {
                Err(e).with_context(|| format!("cannot reach the coordinator at {}", self.base))
            }
        }
    }

    pub(crate) async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> anyhow::Result<reqwest::Response> {
        request
            .send()
            .await
            .with_context(|| format!("cannot reach the coordinator at {}", self.base))
    }

    /// `GET path` as JSON; a non-2xx answer is an error carrying the coordinator's message.
    pub(crate) async fn get(&self, path: &str) -> anyhow::Result<serde_json::Value> {
        self.get_as(path).await
    }

    /// `GET path` as `T`, sent again while the coordinator says to try later (429, 503) or
    /// cannot be reached (a read is safe to send twice).
    pub(crate) async fn get_as<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
    ) -> anyhow::Result<T> {
        let response = self
            .send_retrying(self.http.get(self.url(path)), retry_backoff(), true)
            .await?;
        let (_, value) = read_json(response).await?;
        serde_json::from_value(value).with_context(|| {
            format!("the coordinator's answer to GET {path} has an unexpected shape")
        })
    }
}

/// Status and JSON body of a 2xx answer; otherwise an error with the coordinator's message.
pub(crate) async fn read_json(
    response: reqwest::Response,
) -> anyhow::Result<(reqwest::StatusCode, serde_json::Value)> {
    let status = response.status();
    let bytes = response
        .bytes()
        .await
        .context("reading the coordinator's answer")?;
    if status.is_success() {
        let value =
            serde_json::from_slice(&bytes).context("unreadable answer from the coordinator")?;
        return Ok((status, value));
    }
    Err(refusal(status, &bytes))
}

/// The error of a non-2xx answer (`body`): the coordinator's message.
pub(crate) fn refusal(status: reqwest::StatusCode, body: &[u8]) -> anyhow::Error {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(body) => anyhow::anyhow!("the coordinator answered {status}: {}", body.error),
        Err(_) => anyhow::anyhow!(
            "the coordinator answered {status}: {}",
            String::from_utf8_lossy(body)
        ),
    }
}

/// Prints a finished job in `format`; returns the exit code (0 succeeded, 1 failed).
fn print_result(result: &JobResult, format: Format) -> anyhow::Result<u8> {
    let code = if result.status == JobStatus::Succeeded {
        0
    } else {
        1
    };
    match format {
        Format::Json => println!("{}", serde_json::to_string_pretty(result)?),
        Format::Markdown => print!("{}", crate::report::markdown(result)),
        Format::Plain => {
            print!("{}", crate::report::code(result));
            eprintln!("{}", crate::report::summary(result));
        }
    }
    Ok(code)
}

/// Polls `GET /v1/jobs/{id}` until the job is final.
pub(crate) async fn wait_final(api: &Api, id: TaskId) -> anyhow::Result<Box<JobResult>> {
    loop {
        if let JobView::Done(result) = api.get_as(&format!("/v1/jobs/{id}")).await? {
            return Ok(result);
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

/// `codegen submit`: exits 0 when the job succeeded (or, without --wait, was accepted), 1
/// when it failed, 2 when the coordinator could not be used.
pub async fn submit(args: SubmitArgs) -> anyhow::Result<u8> {
    let api = Api::new(&args.url, args.api_key.as_deref())?;
    let Some(instruction) = args.instruction.clone() else {
        anyhow::bail!("say what to build: codegen submit \"INSTRUCTION\"");
    };
    let rework = args.rework.clone();
    let submission = proto::job::JobSubmission {
        instruction,
        language: args.language.clone(),
        constraints: args.constraints.clone(),
        test_requirements: args.test_requirements.clone(),
        max_iterations: args.max_iterations,
        candidates: args.candidates,
        max_tokens_total: args.max_tokens_total,
        callback_url: args.callback_url.clone(),
        mode: rework.as_ref().map(|r| r.mode),
        code: rework.as_ref().map(|r| r.code.clone()),
        error: rework.as_ref().and_then(|r| r.error.clone()),
        goals: rework
            .as_ref()
            .filter(|r| !r.goals.is_empty())
            .map(|r| r.goals.clone()),
        files: None,
        agent: None,
        memory: args.no_memory.then_some(proto::lesson::MemoryUse::Off),
    };
    let response = api
        .send_creating(
            api.http.post(api.url("/v1/jobs")).json(&submission),
            args.idempotency_key.as_deref(),
        )
        .await?;
    let (status, answer) = read_json(response).await?;
    // 202 with the job's id; a solution-cache hit answers 200 with the finished result.
    let (id, cached) = if status == reqwest::StatusCode::ACCEPTED {
        let accepted: JobAccepted = serde_json::from_value(answer)
            .context("the coordinator's answer to POST /v1/jobs has an unexpected shape")?;
        (accepted.job_id, None)
    } else {
        let result: JobResult = serde_json::from_value(answer)
            .context("the coordinator's answer to POST /v1/jobs has an unexpected shape")?;
        (result.job_id, Some(result))
    };
    if !args.wait {
        println!("{id}");
        return Ok(0);
    }
    if let Some(result) = cached {
        eprintln!("job {id}: answered from the solution cache");
        return print_result(&result, args.format);
    }
    eprintln!("job {id} accepted");
    let started = std::time::Instant::now();
    if let Err(e) = follow(&api, id, started, true).await {
        eprintln!("codegen: progress stream interrupted ({e:#}); polling instead");
    }
    let result = wait_final(&api, id).await?;
    print_result(&result, args.format)
}

/// Shows the job's progress, one server-sent event at a time, until it finishes: with `bar`,
/// a bar over its functions on a terminal, else one line per event. A stream that breaks off
/// is opened again with `Last-Event-ID`, so no event is missed or shown twice.
pub(crate) async fn follow(
    api: &Api,
    id: TaskId,
    started: std::time::Instant,
    bar: bool,
) -> anyhow::Result<()> {
    use backon::BackoffBuilder;
    use std::io::IsTerminal;

    let bar = (bar && std::io::stderr().is_terminal()).then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:40.cyan/blue} {pos}/{len} functions  {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        bar
    });
    let mut last_event: Option<String> = None;
    let mut reconnects = retry_backoff().build();
    let why = loop {
        let mut request = api
            .http
            .get(api.url(&format!("/v1/jobs/{id}/events")))
            .header(reqwest::header::ACCEPT, "text/event-stream");
        if let Some(last) = &last_event {
            request = request.header("Last-Event-ID", last);
        }
        let response = api.send_retrying(request, retry_backoff(), true).await?;
        if !response.status().is_success() {
            read_json(response).await?;
            bail!("the events stream is not available");
        }
        let mut events = response.bytes_stream().eventsource();
        let why = loop {
            let event = match events.next().await {
                None => break "the stream ended before the job finished".to_owned(),
                Some(Err(e)) => break format!("{e}"),
                Some(Ok(event)) => event,
            };
            if !event.id.is_empty() {
                last_event = Some(event.id.clone());
            }
            // An event this CLI does not know (a newer coordinator's) is not shown.
            let Ok(progress) = serde_json::from_str::<proto::Progress>(&event.data) else {
                continue;
            };
            let line = crate::report::progress_line(started.elapsed(), &progress);
            match &bar {
                Some(bar) => {
                    match &progress {
                        proto::Progress::Planned { functions, .. } => {
                            bar.set_length(functions.len() as u64);
                            bar.set_position(0);
                        }
                        proto::Progress::FunctionDone { .. } => bar.inc(1),
                        _ => {}
                    }
                    bar.set_message(line.trim().to_owned());
                }
                None => eprintln!("{line}"),
            }
            if matches!(progress, proto::Progress::Finished { .. }) {
                if let Some(bar) = &bar {
                    bar.finish_and_clear();
                    eprintln!("{line}");
                }
                return Ok(());
            }
        };
        let Some(delay) = reconnects.next() else {
            break why;
        };
        let message = format!(
            "progress stream broke off ({why}); opening it again after event {} in {delay:.1?}",
            last_event.as_deref().unwrap_or("none")
        );
        match &bar {
            Some(bar) => bar.println(message),
            None => eprintln!("{message}"),
        }
        tokio::time::sleep(delay).await;
    };
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    bail!("the progress stream kept breaking off: {why}")
}

/// `codegen status`: exits 0 succeeded, 1 failed, 3 not finished yet, 2 on errors.
pub async fn status(args: StatusArgs) -> anyhow::Result<u8> {
    let api = Api::new(&args.url, args.api_key.as_deref())?;
    let view = match api.get_as(&format!("/v1/jobs/{}", args.id)).await? {
        JobView::Done(result) => return print_result(&result, args.format),
        JobView::Running(view) => view,
    };
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&view)?),
        Format::Markdown => print!("{}", crate::report::pending_markdown(&view)),
        Format::Plain => println!("{}", crate::report::pending_plain(&view)),
    }
    Ok(3)
}

/// Jobs per request for a batch's results (the route's most).
const RESULTS_PAGE: usize = 200;

/// How long one read of a batch waits for a change (under common proxies' idle timeouts).
const BATCH_LONG_POLL: std::time::Duration = std::time::Duration::from_secs(25);

/// `codegen batch`: exits 0 when every job succeeded, 1 when any did not, 2 on errors.
pub async fn batch(args: BatchArgs) -> anyhow::Result<u8> {
    use std::io::{IsTerminal, Write};

    let started = std::time::Instant::now();
    let body = if args.input.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading the jobs from stdin")?
    } else {
        std::fs::read_to_string(&args.input)
            .with_context(|| format!("reading {}", args.input.display()))?
    };
    let api = Api::new(&args.url, args.api_key.as_deref())?;
    let response = api
        .send_creating(
            api.http
                .post(api.url("/v1/batches"))
                .header(reqwest::header::CONTENT_TYPE, "application/x-ndjson")
                .body(body),
            None,
        )
        .await?;
    let (_, answer) = read_json(response).await?;
    let BatchAccepted { batch_id, jobs } = serde_json::from_value(answer)
        .context("the coordinator's answer to POST /v1/batches has an unexpected shape")?;
    eprintln!("batch {batch_id}: {} jobs", jobs.len());

    let total = jobs.len() as u64;
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(total);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:40.cyan/blue} {pos}/{len} jobs  {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        bar
    });
    let mut last_line = String::new();
    let mut last_print = std::time::Instant::now();
    let mut failures = 0u32;
    // After the first read, each read is a long poll: the coordinator answers when another
    // job finishes (or after `BATCH_LONG_POLL`), so a quiet batch costs no reads; `poll_ms`
    // then only spaces the reads out. A coordinator that predates `wait_ms` answers at once.
    let mut seen: Option<u64> = None;
    loop {
        let path = match seen {
            None => format!("/v1/batches/{batch_id}"),
            Some(finished) => format!(
                "/v1/batches/{batch_id}?wait_ms={}&finished={finished}",
                BATCH_LONG_POLL.as_millis()
            ),
        };
        // A connection that dies silently during a long poll must not hold the loop forever.
        let read = async {
            let request = api.http.get(api.url(&path)).timeout(BATCH_LONG_POLL * 2);
            let response = api.send_retrying(request, retry_backoff(), false).await?;
            let (_, value) = read_json(response).await?;
            serde_json::from_value::<BatchView>(value).with_context(|| {
                format!("the coordinator's answer to GET {path} has an unexpected shape")
            })
        };
        let view: BatchView = match read.await {
            Ok(view) => {
                failures = 0;
                view
            }
            // A coordinator restart should not end a long batch: retry for a while.
            Err(e) if failures < 60 => {
                failures += 1;
                let message = format!("cannot read the batch ({e:#}); retrying");
                match &bar {
                    Some(bar) => bar.set_message(message),
                    None => eprintln!("{message}"),
                }
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let counts = crate::report::counts(&view.counts);
        let finished = view.jobs.iter().filter(|j| j.status.is_final()).count() as u64;
        seen = Some(finished);
        match &bar {
            Some(bar) => {
                bar.set_position(finished);
                bar.set_message(counts.clone());
            }
            None => {
                let line = format!("{finished}/{total} finished ({counts})");
                if line != last_line || last_print.elapsed().as_secs() >= 30 {
                    eprintln!(
                        "[{:>6.1}s] batch {batch_id}: {line}",
                        started.elapsed().as_secs_f64()
                    );
                    last_line = line;
                    last_print = std::time::Instant::now();
                }
            }
        }
        if view.status == BatchStatus::Done {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(args.poll_ms.max(50))).await;
    }
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }

    // The results, a page of them per request.
    let mut lines = Vec::with_capacity(jobs.len());
    let mut by_status: std::collections::BTreeMap<String, usize> = Default::default();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/v1/batches/{batch_id}/results?limit={RESULTS_PAGE}");
        if let Some(cursor) = &cursor {
            path.push_str(&format!("&cursor={cursor}"));
        }
        let page: BatchResults = api.get_as(&path).await?;
        for result in &page.results {
            let result = serde_json::to_value(result)?;
            *by_status
                .entry(result["status"].as_str().unwrap_or("unknown").to_owned())
                .or_default() += 1;
            lines.push(serde_json::to_string(&result)?);
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    anyhow::ensure!(
        lines.len() == jobs.len(),
        "the coordinator gave {} results for the {} jobs of batch {batch_id}",
        lines.len(),
        jobs.len()
    );
    let text = lines.iter().map(|l| format!("{l}\n")).collect::<String>();
    if args.output.as_os_str() == "-" {
        std::io::stdout()
            .write_all(text.as_bytes())
            .context("writing the results")?;
    } else {
        std::fs::write(&args.output, text)
            .with_context(|| format!("writing {}", args.output.display()))?;
    }
    let counts: Vec<String> = by_status.iter().map(|(s, n)| format!("{n} {s}")).collect();
    eprintln!(
        "batch {batch_id}: {} jobs in {:.1}s: {} -> {}",
        jobs.len(),
        started.elapsed().as_secs_f64(),
        counts.join(", "),
        args.output.display()
    );
    let all_succeeded = by_status.keys().all(|s| s == "succeeded");
    Ok(if all_succeeded { 0 } else { 1 })
}

/// Why one try of a request that creates work did not end it.
enum Try {
    /// The coordinator said to try later (503, 429), after `Retry-After` when it gave one.
    Later {
        response: reqwest::Response,
        retry_after: Option<std::time::Duration>,
    },
    /// No answer: not reached, or the connection ended before the answer.
    Unanswered(reqwest::Error),
}

/// Delays between the tries of a request (with jitter), about 45 s in all: long enough for a
/// proxy to take a coordinator out of rotation, or a broker to come back.
fn retry_backoff() -> backon::ExponentialBuilder {
    backon::ExponentialBuilder::default()
        .with_min_delay(std::time::Duration::from_millis(500))
        .with_max_delay(std::time::Duration::from_secs(10))
        .with_max_times(8)
        .with_jitter()
}
