//! What every process has in common: `tracing` logs, OpenTelemetry traces (`traces`), a
//! Prometheus registry, and the `/healthz`, `/readyz` and `/metrics` endpoints.
//!
//! Invariants: `/healthz` answers 200 while the process runs; `/readyz` answers 200 only when
//! every dependency check passes and the process is not shutting down, and otherwise 503 with
//! each failing dependency named and why.

mod traces;
mod usage;

pub use traces::{TraceError, TraceOptions, follow, inject, publish_span, queue_wait, trace_id};
pub use usage::TenantUsage;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus::{Encoder, Registry, TextEncoder};
use serde::{Deserialize, Serialize};

/// Log settings (`[log]` in `codegen.toml`, `CODEGEN__LOG__*` in the environment).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogOptions {
    /// `text` for people, `json` for log pipelines.
    pub format: LogFormat,
    /// `tracing` filter directives; `RUST_LOG` wins when set.
    pub filter: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

impl Default for LogOptions {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            filter: "info".into(),
        }
    }
}

/// Keeps the log writer's thread running; logs still buffered are written when it is dropped,
/// so hold it until the process exits.
pub type LogGuard = tracing_appender::non_blocking::WorkerGuard;

/// Keeps the log writer and the trace exporter running; dropping it writes the logs still
/// buffered and exports the spans still buffered, so hold it until the process exits.
pub struct Guard {
    _log: LogGuard,
    traces: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("traces", &self.traces.is_some())
            .finish()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(provider) = self.traces.take() {
            traces::shut_down(provider);
        }
    }
}

/// Installs the global `tracing` subscriber: logs, and spans exported as OpenTelemetry traces
/// of `service` when `traces.otlp_endpoint` is set. Logs go to stderr through a writer
/// thread, so a slow reader of stderr (a busy container runtime, a full pipe) never stalls the
/// runtime's threads: past a buffer of lines, lines are dropped instead of blocking the
/// process.
pub fn init(
    options: &LogOptions,
    traces: &TraceOptions,
    service: &str,
) -> Result<Guard, TraceError> {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    use tracing_subscriber::prelude::*;
    let provider = traces::provider(traces, service)?;
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&options.filter))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let (writer, guard) = tracing_appender::non_blocking(std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(writer);
    let fmt = match options.format {
        LogFormat::Json => fmt.json().boxed(),
        LogFormat::Text => fmt.boxed(),
    };
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(provider.as_ref().map(traces::layer))
        .try_init();
    Ok(Guard {
        _log: guard,
        traces: provider,
    })
}

/// Installs the global `tracing` subscriber for logs alone (the CLI's commands).
pub fn init_logging(options: &LogOptions) -> Guard {
    init(options, &TraceOptions::default(), "codegen").expect("no exporter to set up")
}

type CheckFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;
type CheckFn = dyn Fn() -> CheckFuture + Send + Sync;
type NoteFuture = Pin<Box<dyn Future<Output = String> + Send>>;
type NoteFn = dyn Fn() -> NoteFuture + Send + Sync;

/// The readiness checks of one process, by dependency name.
#[derive(Clone, Default)]
pub struct Readiness {
    checks: Vec<(String, Arc<CheckFn>)>,
    /// Reported beside the checks without deciding readiness (e.g. a worker without a model
    /// still runs executions).
    notes: Vec<(String, Arc<NoteFn>)>,
    shutting_down: Arc<AtomicBool>,
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<_> = self.checks.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Readiness").field("checks", &names).finish()
    }
}

/// The `/readyz` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadinessReport {
    pub ready: bool,
    /// `"ok"` or the reason, per dependency.
    pub checks: BTreeMap<String, String>,
}

impl Readiness {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a dependency check; it should answer within a second or two.
    pub fn with_check<F, Fut>(mut self, name: &str, check: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        self.checks
            .push((name.to_owned(), Arc::new(move || Box::pin(check()))));
        self
    }

    /// Adds a line to the report that does not decide readiness.
    pub fn with_note<F, Fut>(mut self, name: &str, note: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = String> + Send + 'static,
    {
        self.notes
            .push((name.to_owned(), Arc::new(move || Box::pin(note()))));
        self
    }

    /// From now on `/readyz` fails, so load balancers stop sending work while we drain.
    pub fn set_shutting_down(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
    }

    pub async fn report(&self) -> ReadinessReport {
        let results = futures_join(self.checks.iter().map(|(name, check)| {
            let name = name.clone();
            let fut = check();
            async move {
                let result = tokio::time::timeout(std::time::Duration::from_secs(3), fut)
                    .await
                    .unwrap_or_else(|_| Err("check timed out after 3s".into()));
                (name, result)
            }
        }))
        .await;
        let mut checks = BTreeMap::new();
        let mut ready = true;
        for (name, result) in results {
            match result {
                Ok(()) => {
                    checks.insert(name, "ok".to_owned());
                }
                Err(reason) => {
                    ready = false;
                    checks.insert(name, reason);
                }
            }
        }
        let notes = futures_join(self.notes.iter().map(|(name, note)| {
            let name = name.clone();
            let fut = note();
            async move {
                let text = tokio::time::timeout(std::time::Duration::from_secs(3), fut)
                    .await
                    .unwrap_or_else(|_| "check timed out after 3s".into());
                (name, text)
            }
        }))
        .await;
        checks.extend(notes);
        if self.shutting_down.load(Ordering::SeqCst) {
            ready = false;
            checks.insert("process".into(), "shutting down".into());
        }
        ReadinessReport { ready, checks }
    }
}

async fn futures_join<I, F, T>(futures: I) -> Vec<T>
where
    I: IntoIterator<Item = F>,
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for handle in handles {
        if let Ok(value) = handle.await {
            out.push(value);
        }
    }
    out
}

#[derive(Clone)]
struct OpsState {
    registry: Registry,
    readiness: Readiness,
}

/// `/healthz`, `/readyz` and `/metrics`, to merge into a process's HTTP router.
pub fn ops_router(registry: Registry, readiness: Readiness) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(OpsState {
            registry,
            readiness,
        })
}

async fn readyz(State(state): State<OpsState>) -> Response {
    let report = state.readiness.report().await;
    let status = if report.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(report)).into_response()
}

async fn metrics(State(state): State<OpsState>) -> Response {
    let mut body = Vec::new();
    match TextEncoder::new().encode(&state.registry.gather(), &mut body) {
        Ok(()) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Buckets for latencies from a millisecond to a few minutes, in seconds.
pub fn latency_buckets() -> Vec<f64> {
    vec![
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
        180.0,
    ]
}

/// `codegen_job_seconds{status}`: submission to final result of the jobs this process
/// ended (workers end the jobs that ran, coordinators the ones they fail or cancel and the
/// cache hits), beside [`jobs_finished`]. Both kinds of process export it under one name so a
/// dashboard sums them. Both statuses exist from the start, at zero, so the first failure is
/// an increase an alert can see.
pub fn job_seconds() -> prometheus::Result<prometheus::HistogramVec> {
    let histogram = prometheus::HistogramVec::new(
        prometheus::HistogramOpts::new(
            "codegen_job_seconds",
            "Time from submission to the final result of jobs that ran, by final status",
        )
        .buckets(vec![
            0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
        ]),
        &["status"],
    )?;
    for status in ["succeeded", "failed"] {
        histogram.with_label_values(&[status]);
    }
    Ok(histogram)
}

/// `codegen_jobs_finished_total{status}`: jobs this process ended (the store's finishing
/// operation said it was the one), whatever ended them: an integration, a refused plan, a
/// cancel, a deadline, a dead letter, a cache hit. Summed over every process it equals the
/// jobs submitted once all have ended. Every status exists from the start, at zero.
pub fn jobs_finished() -> prometheus::Result<prometheus::IntCounterVec> {
    let counter = prometheus::IntCounterVec::new(
        prometheus::Opts::new(
            "codegen_jobs_finished_total",
            "Jobs this process ended, by final status (summed over processes: every job once)",
        ),
        &["status"],
    )?;
    for status in ["succeeded", "failed", "cancelled"] {
        counter.with_label_values(&[status]);
    }
    Ok(counter)
}

/// `codegen_executions_finished_total{language, status}`: executions whose verdict this
/// process stored first (a worker's run, or a coordinator's error for one that could not be
/// queued or was dead-lettered), by language and verdict. Summed over every process it equals
/// the executions submitted once all have verdicts.
pub fn executions_finished() -> prometheus::Result<prometheus::IntCounterVec> {
    prometheus::IntCounterVec::new(
        prometheus::Opts::new(
            "codegen_executions_finished_total",
            "Executions whose verdict this process stored first, by language and verdict",
        ),
        &["language", "status"],
    )
}

/// What every process registers besides its own metrics: `codegen_build_info{version}` (1),
/// and the process's CPU, memory, open files and start time (`process_*`).
pub fn register_process(registry: &Registry, component: &str) -> prometheus::Result<()> {
    let info = prometheus::IntGaugeVec::new(
        prometheus::Opts::new(
            "codegen_build_info",
            "1, labelled with the build's version and the process's component",
        ),
        &["version", "component"],
    )?;
    info.with_label_values(&[env!("CARGO_PKG_VERSION"), component])
        .set(1);
    registry.register(Box::new(info))?;
    registry.register(Box::new(
        prometheus::process_collector::ProcessCollector::for_self(),
    ))
}

/// Serves `router` on `addr` until `cancel` fires, then finishes in-flight requests.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    cancel: tokio_util::sync::CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { cancel.cancelled().await })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn readiness_names_the_failing_dependency() {
        let readiness = Readiness::new()
            .with_check("broker", || async { Ok(()) })
            .with_check("redis", || async { Err("connection refused".to_string()) });
        let report = readiness.report().await;
        assert!(!report.ready);
        assert_eq!(report.checks["broker"], "ok");
        assert_eq!(report.checks["redis"], "connection refused");
    }

    #[tokio::test]
    async fn shutting_down_is_not_ready() {
        let readiness = Readiness::new().with_check("broker", || async { Ok(()) });
        assert!(readiness.report().await.ready);
        readiness.set_shutting_down();
        let report = readiness.report().await;
        assert!(!report.ready);
        assert_eq!(report.checks["process"], "shutting down");
    }

    #[tokio::test]
    async fn a_note_is_reported_without_deciding_readiness() {
        let readiness = Readiness::new()
            .with_check("broker", || async { Ok(()) })
            .with_note("model", || async { "not configured".to_owned() });
        let report = readiness.report().await;
        assert!(report.ready);
        assert_eq!(report.checks["model"], "not configured");
    }
}
