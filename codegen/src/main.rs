//! `codegen`: the cluster's processes and its command-line client.

mod agent;
mod client;
mod control;
mod exec_batch;
mod lessons;
mod mcp;
mod report;
mod session;
mod settings;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use crate::settings::Settings;

/// Every process of the cluster allocates a little for each message, call and event, from
/// several threads (tokio's, the AMQP client's): mimalloc's per-thread heaps spend less CPU
/// on that than glibc's malloc (BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "codegen",
    version,
    about = "codegen-cluster: natural-language requests in, tested code out"
)]
struct Cli {
    /// Configuration file (default: ./codegen.toml when it exists). Environment variables
    /// `CODEGEN__SECTION__KEY` override it.
    #[arg(long, global = true, env = "CODEGEN_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a coordinator: the HTTP API.
    Coordinator,
    /// Run a worker: consumes tasks and runs them in the sandbox.
    Worker,
    /// Print the effective configuration (defaults, file and environment merged) as TOML.
    Config,
    /// Run a program (optionally with a test) on the cluster and print its output.
    Exec(client::ExecArgs),
    /// Run a JSONL file of programs on the cluster; one result per line, in input order.
    ExecBatch(exec_batch::ExecBatchArgs),
    /// Submit a generation job; with --wait, follow it and print the tested code.
    Submit(client::SubmitArgs),
    /// Find and fix the cause of an error in a file: a test that reproduces it first, then
    /// the fix (a `debug` job; with --wait, print the result and its diff).
    Debug(client::DebugArgs),
    /// Improve a file toward goals while its behaviour, pinned by tests first, stays the same
    /// (a `refactor` job).
    Refactor(client::RefactorArgs),
    /// Run an agent on a task in a session of its own (the model calls tools until it
    /// finishes): its steps live, then how it ended, its answer and files (an `agent` job).
    Agent(agent::AgentArgs),
    /// Print a job's result, or its progress while it runs.
    Status(client::StatusArgs),
    /// Run a JSONL file of jobs as one batch and write one result per line, in input order.
    Batch(client::BatchArgs),
    /// Show or empty the solution and function-level caches.
    Cache(client::CacheArgs),
    /// Cancel a job, or with --batch every unfinished job of a batch.
    Cancel(control::CancelArgs),
    /// List your jobs, batches or executions, newest first.
    Jobs(control::ListArgs),
    /// What your finished work cost over a window (jobs, executions, model calls, tokens,
    /// sandbox time), as JSON.
    Usage(control::UsageArgs),
    /// Your lessons, the memory of repairs that worked: list or search them, show one with
    /// where it was used, delete one, export or import them as JSON Lines.
    Lessons(lessons::LessonsArgs),
    /// Stateful sessions: open one, run cells in it (names, imports and files stay between
    /// them), move files in and out, list and end them.
    Session(session::SessionArgs),
    /// Serve the cluster's execution and session tools to an MCP client over standard input
    /// and output (run_code, create_session, run_cell, ...), calling the coordinator's API
    /// with your key (docs/mcp.md).
    Mcp(mcp::McpArgs),
    /// Serve a scripted (fake) model as an OpenAI-compatible endpoint, for tests and demos.
    ModelServer(ModelServerArgs),
}

#[derive(Debug, clap::Args)]
struct ModelServerArgs {
    /// The answers file (see `model::scripted`).
    #[arg(long)]
    script: PathBuf,
    /// Address to listen on (loopback by default; a private network in deploy/compose).
    #[arg(long, default_value = "127.0.0.1:8090")]
    listen: std::net::SocketAddr,
    /// Append every request answered to this file, one JSON line each (see `model::server`).
    #[arg(long, env = "CODEGEN_FAKE_MODEL_LOG")]
    request_log: Option<PathBuf>,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let settings = match Settings::load(cli.config.as_deref()) {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("codegen: {e:#}");
            return std::process::ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("codegen: cannot start the async runtime: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    // The command runs as a task of the runtime, not in `block_on` on this thread: a service
    // loop polled here would hop to and from the runtime's threads on every message it takes
    // (a thread wake-up each way, measured on an idle task's path).
    let command = runtime.spawn(async move {
        match cli.command {
            Command::Coordinator => run_coordinator(settings).await.map(|()| 0),
            Command::Worker => run_worker(settings).await.map(|()| 0),
            Command::Config => {
                print!("{}", settings.to_toml()?);
                Ok(0)
            }
            Command::Exec(args) => client::exec(args).await,
            Command::ExecBatch(args) => exec_batch::exec_batch(args).await,
            Command::Submit(args) => client::submit(args).await,
            Command::Debug(args) => client::debug(args).await,
            Command::Refactor(args) => client::refactor(args).await,
            Command::Agent(args) => agent::agent(args).await,
            Command::Status(args) => client::status(args).await,
            Command::Batch(args) => client::batch(args).await,
            Command::Cache(args) => client::cache(args).await,
            Command::Cancel(args) => control::cancel(args).await,
            Command::Jobs(args) => control::list(args).await,
            Command::Usage(args) => control::usage(args).await,
            Command::Lessons(args) => lessons::lessons(args).await,
            Command::Session(args) => session::session(args).await,
            Command::Mcp(args) => mcp::mcp(args).await,
            Command::ModelServer(args) => run_model_server(settings, args).await.map(|()| 0),
        }
    });
    let outcome = match runtime.block_on(command) {
        Ok(outcome) => outcome,
        // A panic has already been reported by the panic hook; keep its exit status.
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(anyhow::anyhow!("the command's task was cancelled: {e}")),
    };
    match outcome {
        Ok(code) => std::process::ExitCode::from(code),
        Err(e) => {
            eprintln!("codegen: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

/// Cancels the token on SIGTERM or Ctrl-C.
fn on_shutdown_signal(token: CancellationToken, readiness: telemetry::Readiness) {
    tokio::spawn(async move {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(e) => {
                    tracing::error!(error = %e, "cannot listen for SIGTERM");
                    return;
                }
            };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = tokio::signal::ctrl_c() => tracing::info!("interrupt: shutting down"),
        }
        readiness.set_shutting_down();
        token.cancel();
    });
}

async fn run_coordinator(settings: Settings) -> anyhow::Result<()> {
    let _telemetry = telemetry::init(&settings.log, &settings.telemetry, "codegen-coordinator")?;
    let registry = prometheus::Registry::new();
    telemetry::register_process(&registry, "coordinator")?;
    // Infrastructure outlives the service so in-flight requests can finish during shutdown.
    let infra = CancellationToken::new();
    let shutdown = CancellationToken::new();

    let (broker, supervisor) = broker::AmqpBroker::build(settings.broker.clone());
    tokio::spawn(supervisor.run(infra.clone()));
    let (store, listener) = store::RedisStore::build(settings.store.clone())?;
    // The coordinator serves event streams: it wants the notice of every new event.
    tokio::spawn(listener.with_job_events().run(infra.clone()));

    let readiness = {
        let store = store.clone();
        readiness(&broker, &store).with_note("generation", move || {
            let store = store.clone();
            async move { generation_note(&store).await }
        })
    };
    on_shutdown_signal(shutdown.clone(), readiness.clone());
    let ops = telemetry::ops_router(registry.clone(), readiness);
    let coordinator = coordinator::Coordinator::build(
        settings.coordinator.clone(),
        Arc::new(broker),
        store::Stores::redis(&store),
        &registry,
    )?
    .with_images(
        proto::Language::ALL
            .iter()
            .map(|l| (*l, settings.sandbox.image(*l))),
    )
    .with_memory(settings.memory.clone())
    .with_model(model::identity(&settings.model));
    let tcp = tokio::net::TcpListener::bind(settings.coordinator.listen)
        .await
        .with_context(|| format!("cannot listen on {}", settings.coordinator.listen))?;
    if settings.coordinator.api_keys.is_empty() {
        tracing::warn!(
            listen = %settings.coordinator.listen,
            "no API keys configured: the API is open to anyone who can reach it (set CODEGEN__COORDINATOR__API_KEYS__<TENANT>=<key>)"
        );
    } else {
        tracing::info!(
            tenants = settings.coordinator.api_keys.len(),
            "API keys configured"
        );
    }
    let result = coordinator.run(tcp, ops, shutdown).await;
    infra.cancel();
    tracing::info!("coordinator stopped");
    Ok(result?)
}

async fn run_worker(settings: Settings) -> anyhow::Result<()> {
    let _telemetry = telemetry::init(&settings.log, &settings.telemetry, "codegen-worker")?;
    let registry = prometheus::Registry::new();
    telemetry::register_process(&registry, "worker")?;
    let infra = CancellationToken::new();
    let shutdown = CancellationToken::new();

    let (broker, supervisor) = broker::AmqpBroker::build(settings.broker.clone());
    tokio::spawn(supervisor.run(infra.clone()));
    let (store, listener) = store::RedisStore::build(settings.store.clone())?;
    // A model call waiting for a cluster-wide lease asks again as one is released; a worker
    // waits for no execution's verdict, so it takes none of their notices.
    tokio::spawn(
        listener
            .with_lease_notices()
            .without_execution_notices()
            .run(infra.clone()),
    );
    // The pool service reaps orphaned containers, keeps the warm pools filled and removes
    // every container once `infra` is cancelled (after the worker has drained).
    settings.sandbox.languages()?;
    let (sandbox, pools) = sandbox::DockerSandbox::build(settings.sandbox.clone());
    let sandbox = Arc::new(sandbox);
    {
        let sandbox = sandbox.clone();
        registry.register(Box::new(worker::PoolCollector::new(move || {
            sandbox.stats_by_language()
        })))?;
    }
    let pools = tokio::spawn(pools.run(infra.clone()));

    // The model's limits hold for the whole cluster: every worker shares them in Redis.
    let (model, no_model) = match model::Model::from_options(
        &settings.model,
        model::Metrics::register(&registry)?,
    ) {
        Ok(model) => {
            tracing::info!(model = %model.describe(), "model configured");
            let limits = worker::RedisModelLimits::new(store.clone(), &model.limits_scope());
            (Some(model.with_shared_limits(Arc::new(limits))), None)
        }
        Err(e) => {
            tracing::warn!(error = %e, "no usable model: this worker takes no generation tasks");
            let note = match &e {
                model::Error::NotConfigured(_) => "not configured".to_owned(),
                other => format!("unusable: {other}"),
            };
            (None, Some((e.to_string(), note)))
        }
    };
    // Which dependencies are down: the worker takes no work that needs one, and its tasks
    // wait for it instead of cycling through the queue.
    let (gate, gate_service) = {
        let (store, sandbox, broker) = (store.clone(), sandbox.clone(), broker.clone());
        let mut builder = worker::gate::Gate::builder()
            .probe(worker::gate::Dependency::Redis, move || {
                let store = store.clone();
                async move { store::Store::health(&store).await }
            })
            .probe(worker::gate::Dependency::Docker, move || {
                let sandbox = sandbox.clone();
                async move { sandbox::Sandbox::health(sandbox.as_ref()).await }
            })
            .probe(worker::gate::Dependency::Broker, move || {
                let health = broker::Broker::health(&broker);
                async move { health }
            });
        if let Some(model) = model.clone() {
            // The model's probe tells a slow server from a down one after its own HTTP
            // probe: bounded by what that takes, not by the gate's 5 s.
            builder = builder.probe_within(
                worker::gate::Dependency::Model,
                model::PROBE_WITHIN,
                move || {
                    let model = model.clone();
                    async move { model.probe().await }
                },
            );
        }
        builder.build(worker::gate::Intervals {
            probe: settings.worker.probe_interval,
            watch: settings.worker.watch_interval,
        })
    };
    tokio::spawn(gate_service.run(infra.clone()));

    let readiness = {
        let sandbox = sandbox.clone();
        readiness(&broker, &store).with_check("docker", move || {
            let sandbox = sandbox.clone();
            async move { sandbox::Sandbox::health(sandbox.as_ref()).await }
        })
    };
    // A worker without a model is still ready (it runs executions); `/readyz` says why it
    // takes no generation tasks.
    let readiness = match &no_model {
        None => readiness.with_check("model", {
            let gate = gate.clone();
            move || {
                let health = gate.health(worker::gate::Dependency::Model);
                async move { health }
            }
        }),
        Some((_, note)) => {
            let note = note.clone();
            readiness.with_note("model", move || {
                let note = note.clone();
                async move { note }
            })
        }
    };
    on_shutdown_signal(shutdown.clone(), readiness.clone());
    let ops = telemetry::ops_router(registry.clone(), readiness);
    let tcp = tokio::net::TcpListener::bind(settings.worker.listen)
        .await
        .with_context(|| format!("cannot listen on {}", settings.worker.listen))?;
    tracing::info!(addr = %settings.worker.listen, "worker ops endpoint listening");
    let ops_cancel = infra.clone();
    let ops_server = tokio::spawn(telemetry::serve(tcp, ops, ops_cancel));

    let broker: Arc<dyn broker::Broker> = Arc::new(broker);
    let stores = store::Stores::redis(&store);
    let mut pipeline = worker::Pipeline::new(
        settings.worker.pipeline.clone(),
        &stores,
        Arc::clone(&broker),
        model,
        sandbox.clone(),
    )
    .with_model(model::identity(&settings.model));
    if let Some((reason, _)) = no_model {
        pipeline = pipeline.without_model_because(reason);
    }
    if let Some(lessons) = stores.lessons.clone() {
        pipeline = pipeline.with_memory(memory::Memory::new(settings.memory.clone(), lessons));
    }
    let id = format!("{}-{}", hostname(), std::process::id());
    // Sessions: this worker's containers of their own, called by coordinators directly.
    let hosting = match (&stores.sessions, settings.worker.sessions.enabled) {
        (Some(sessions), true) => {
            let hosting = worker::sessions::SessionHosting::build(
                settings.worker.sessions.clone(),
                id.clone(),
                sandbox.clone(),
                sessions.clone(),
                &registry,
            )
            .await?;
            let local = hosting.local();
            Some((local, tokio::spawn(hosting.run(shutdown.clone()))))
        }
        _ => None,
    };
    let worker = worker::Worker::build(
        settings.worker.clone(),
        worker::Parts {
            broker,
            stores: &stores,
            sandbox,
            registry: &registry,
            gate,
            pipeline: Some(pipeline),
            pool_size: Some(&|language| settings.sandbox.pool_size_of(language)),
            name: Some(id),
            sessions: hosting.as_ref().map(|(local, _)| local.clone()),
        },
    )?;
    worker.run(shutdown).await;
    if let Some((_, hosting)) = hosting {
        let _ = hosting.await;
    }
    infra.cancel();
    let _ = ops_server.await;
    let _ = pools.await;
    Ok(())
}

/// The coordinator's `/readyz` line on generation: how many workers can generate, or why
/// none can (informational: executions do not need a model).
async fn generation_note(store: &store::RedisStore) -> String {
    use store::Presence;
    match store.generators().await {
        Ok(g) => match g.refusal() {
            Some(refusal) => refusal,
            None if g.able == 0 => "no worker has announced itself yet".into(),
            None => format!("ok: {} worker(s) can generate", g.able),
        },
        Err(e) => format!("unknown: {e}"),
    }
}

/// This host's name (the pod's on Kubernetes), for the worker's id.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".into())
}

async fn run_model_server(settings: Settings, args: ModelServerArgs) -> anyhow::Result<()> {
    let _log = telemetry::init_logging(&settings.log);
    let script = model::scripted::Scripted::from_file(&args.script)?;
    let tcp = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = tcp.local_addr()?;
    println!(
        "scripted model server (a fake model answering from {}) on http://{addr}/v1",
        args.script.display()
    );
    let cancel = CancellationToken::new();
    on_shutdown_signal(cancel.clone(), telemetry::Readiness::new());
    let script = Arc::new(script);
    let router = match args.request_log {
        Some(log) => model::server::router_with_log(script, log),
        None => model::server::router(script),
    };
    telemetry::serve(tcp, router, cancel).await?;
    Ok(())
}

fn readiness(broker: &broker::AmqpBroker, store: &store::RedisStore) -> telemetry::Readiness {
    let broker = broker.clone();
    let store = store.clone();
    telemetry::Readiness::new()
        .with_check("broker", move || {
            let health = broker::Broker::health(&broker);
            async move { health }
        })
        .with_check("redis", move || {
            let store = store.clone();
            async move { store::Store::health(&store).await }
        })
}
