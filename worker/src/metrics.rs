use std::time::Instant;

use prometheus::{
    CounterVec, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry,
};
use proto::{Language, Status};

/// The worker's Prometheus metrics.
#[derive(Debug, Clone)]
pub struct Metrics {
    pub tasks: IntCounterVec,
    /// Deliveries of a task that had been delivered before (a worker died or let go of it,
    /// or a hand-back): work redone somewhere.
    pub redeliveries: IntCounterVec,
    pub task_seconds: HistogramVec,
    pub queue_wait_seconds: HistogramVec,
    pub in_flight: IntGauge,
    pub sandbox: SandboxRuns,
    /// Functions whose cases went in a run shared with others of their job (`shared`), or ran
    /// again alone because that run broke (`broke`).
    pub shared_cases: IntCounterVec,
    /// Agent steps this worker recorded, by kind (`start`, `model`, `observation`), and the
    /// agent runs it ended, by what ended them.
    pub agent_steps: IntCounterVec,
    pub agent_runs: IntCounterVec,
    /// Jobs this worker finished (integrated), by final status.
    pub job_seconds: HistogramVec,
    pub jobs_finished: IntCounterVec,
    /// Executions whose verdict this worker stored first.
    pub executions_finished: IntCounterVec,
    /// What the work this worker ended cost, by tenant.
    pub usage: telemetry::TenantUsage,
}

impl Metrics {
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let buckets = telemetry::latency_buckets();
        let metrics = Self {
            tasks: IntCounterVec::new(
                Opts::new(
                    "codegen_worker_tasks_total",
                    "Tasks settled, by kind and outcome",
                ),
                &["kind", "outcome"],
            )?,
            redeliveries: IntCounterVec::new(
                Opts::new(
                    "codegen_worker_redeliveries_total",
                    "Deliveries of tasks delivered before (redone after a crash, a lost connection or a hand-back), by kind",
                ),
                &["kind"],
            )?,
            task_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "codegen_worker_task_seconds",
                    "Time from delivery to settlement",
                )
                .buckets(buckets.clone()),
                &["kind"],
            )?,
            queue_wait_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "codegen_worker_queue_wait_seconds",
                    "Time from publication by the coordinator to the start of work, by kind",
                )
                .buckets(buckets.clone()),
                &["kind"],
            )?,
            in_flight: IntGauge::new("codegen_worker_tasks_in_flight", "Tasks being worked on")?,
            sandbox: SandboxRuns {
                runs: IntCounterVec::new(
                    Opts::new(
                        "codegen_sandbox_runs_total",
                        "Sandbox runs, by the work they were for (execution, job), language and verdict",
                    ),
                    &["work", "language", "status"],
                )?,
                seconds: HistogramVec::new(
                    HistogramOpts::new(
                        "codegen_sandbox_run_seconds",
                        "Wall time of one sandbox run, waiting for a container included, by the work it was for and language",
                    )
                    .buckets(buckets),
                    &["work", "language"],
                )?,
            },
            shared_cases: IntCounterVec::new(
                Opts::new(
                    "codegen_sandbox_shared_cases_total",
                    "Functions whose cases run was shared with others of their job that waited for a container (shared), or ran again alone after the shared run broke (broke)",
                ),
                &["outcome"],
            )?,
            agent_steps: IntCounterVec::new(
                Opts::new(
                    "codegen_agent_steps_total",
                    "Agent steps this worker recorded, by kind: start, model (an answer), observation (a call's result)",
                ),
                &["kind"],
            )?,
            agent_runs: IntCounterVec::new(
                Opts::new(
                    "codegen_agent_runs_ended_total",
                    "Agent runs this worker ended, by what ended them (finished, max_steps, wall_time, tokens, cpu, stuck, malformed, failed)",
                ),
                &["ended_by"],
            )?,
            job_seconds: telemetry::job_seconds()?,
            jobs_finished: telemetry::jobs_finished()?,
            executions_finished: telemetry::executions_finished()?,
            usage: telemetry::TenantUsage::register(registry)?,
        };
        registry.register(Box::new(metrics.job_seconds.clone()))?;
        registry.register(Box::new(metrics.jobs_finished.clone()))?;
        registry.register(Box::new(metrics.executions_finished.clone()))?;
        registry.register(Box::new(metrics.tasks.clone()))?;
        registry.register(Box::new(metrics.redeliveries.clone()))?;
        registry.register(Box::new(metrics.task_seconds.clone()))?;
        registry.register(Box::new(metrics.queue_wait_seconds.clone()))?;
        registry.register(Box::new(metrics.in_flight.clone()))?;
        registry.register(Box::new(metrics.sandbox.runs.clone()))?;
        registry.register(Box::new(metrics.sandbox.seconds.clone()))?;
        registry.register(Box::new(metrics.shared_cases.clone()))?;
        registry.register(Box::new(metrics.agent_steps.clone()))?;
        registry.register(Box::new(metrics.agent_runs.clone()))?;
        for kind in ["start", "model", "observation"] {
            metrics.agent_steps.with_label_values(&[kind]);
        }
        for outcome in ["shared", "broke"] {
            metrics.shared_cases.with_label_values(&[outcome]);
        }
        // The series alerts watch exist from the start, at zero, so the first event is an
        // increase rather than a new series that rate() and increase() cannot see.
        for kind in ["plan", "implement", "integrate", "execute"] {
            for outcome in ["completed", "requeued", "handed_back", "duplicate"] {
                metrics.tasks.with_label_values(&[kind, outcome]);
            }
            metrics.redeliveries.with_label_values(&[kind]);
        }
        Ok(metrics)
    }
}

/// `codegen_sandbox_runs_total` and `codegen_sandbox_run_seconds`: every sandbox run the
/// worker makes, an execution's or a job's (a function's cases, a test form, the final run).
#[derive(Debug, Clone)]
pub struct SandboxRuns {
    runs: IntCounterVec,
    seconds: HistogramVec,
}

/// What a sandbox run was for.
#[derive(Debug, Clone, Copy)]
pub enum Work {
    Execution,
    Job,
}

impl Work {
    fn as_str(self) -> &'static str {
        match self {
            Work::Execution => "execution",
            Work::Job => "job",
        }
    }
}

impl SandboxRuns {
    /// A run that began at `started` ended; `status` is its verdict, `None` when it has none
    /// (the sandbox failed and the run may be tried again: only the try that ends counts).
    pub fn ran(&self, work: Work, language: Language, started: Instant, status: Option<Status>) {
        self.seconds
            .with_label_values(&[work.as_str(), language.as_str()])
            .observe(started.elapsed().as_secs_f64());
        if let Some(status) = status {
            self.counted(work, language, status);
        }
    }

    /// Counts a run's verdict without its time (a run given up on: `sandbox_error`).
    pub fn counted(&self, work: Work, language: Language, status: Status) {
        self.runs
            .with_label_values(&[work.as_str(), language.as_str(), status.as_str()])
            .inc();
    }
}

/// Exposes each language's sandbox pool (its counters and size) at scrape time.
pub struct PoolCollector {
    stats: Box<dyn Fn() -> Vec<(Language, sandbox::PoolStats)> + Send + Sync>,
    descs: Vec<prometheus::core::Desc>,
}

impl std::fmt::Debug for PoolCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolCollector").finish_non_exhaustive()
    }
}

/// A pool's figure: its name, help, whether it is a counter (else a gauge), and its value.
type Figure = (
    &'static str,
    &'static str,
    bool,
    fn(&sandbox::PoolStats) -> f64,
);

#[allow(clippy::cast_precision_loss)] // counts far below 2^53
const POOL_FIGURES: &[Figure] = &[
    (
        "codegen_sandbox_containers_started_total",
        "Sandbox containers started (warm and fresh), by language",
        true,
        |s| s.containers_started as f64,
    ),
    (
        "codegen_sandbox_containers_retired_total",
        "Pool containers removed (breach, error, run limit, shutdown), by language",
        true,
        |s| s.containers_retired as f64,
    ),
    (
        "codegen_sandbox_pooled_runs_total",
        "Runs in a warm container, by language",
        true,
        |s| s.pooled_runs as f64,
    ),
    (
        "codegen_sandbox_fresh_runs_total",
        "Runs in a container of their own, by language",
        true,
        |s| s.fresh_runs as f64,
    ),
    (
        "codegen_sandbox_retries_total",
        "Runs retried in a fresh container after their warm one failed, by language",
        true,
        |s| s.retries as f64,
    ),
    (
        "codegen_sandbox_memory_updates_total",
        "Memory limit updates of warm containers, by language",
        true,
        |s| s.memory_updates as f64,
    ),
    (
        "codegen_sandbox_pool_wait_seconds_total",
        "Time runs waited for a warm container, by language (over pooled_runs: the mean wait)",
        true,
        |s| s.wait_seconds,
    ),
    (
        "codegen_sandbox_pool_size",
        "Warm containers the pool keeps, by language",
        false,
        |s| s.size as f64,
    ),
    (
        "codegen_sandbox_pool_idle",
        "Warm containers idle now, by language",
        false,
        |s| s.idle as f64,
    ),
    (
        "codegen_sandbox_pool_live",
        "Pool containers existing now (idle, busy or starting), by language",
        false,
        |s| s.live as f64,
    ),
    (
        "codegen_sandbox_pool_waiting",
        "Runs waiting for a warm container now, by language",
        false,
        |s| s.waiting as f64,
    ),
];

impl PoolCollector {
    pub fn new(
        stats: impl Fn() -> Vec<(Language, sandbox::PoolStats)> + Send + Sync + 'static,
    ) -> Self {
        let descs = POOL_FIGURES
            .iter()
            .filter_map(|(name, help, _, _)| {
                prometheus::core::Desc::new(
                    (*name).into(),
                    (*help).into(),
                    vec!["language".into()],
                    Default::default(),
                )
                .ok()
            })
            .collect();
        Self {
            stats: Box::new(stats),
            descs,
        }
    }
}

impl prometheus::core::Collector for PoolCollector {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        let stats = (self.stats)();
        let mut families = Vec::new();
        for (name, help, counter, value) in POOL_FIGURES {
            let opts = Opts::new(*name, *help);
            if *counter {
                let Ok(vec) = CounterVec::new(opts, &["language"]) else {
                    continue;
                };
                for (language, s) in &stats {
                    vec.with_label_values(&[language.as_str()]).inc_by(value(s));
                }
                families.extend(prometheus::core::Collector::collect(&vec));
            } else {
                let Ok(vec) = GaugeVec::new(opts, &["language"]) else {
                    continue;
                };
                for (language, s) in &stats {
                    vec.with_label_values(&[language.as_str()]).set(value(s));
                }
                families.extend(prometheus::core::Collector::collect(&vec));
            }
        }
        families
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_languages_pool_appears_in_the_registry_at_scrape_time() {
        let registry = Registry::new();
        let runs = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(3));
        let seen = runs.clone();
        registry
            .register(Box::new(PoolCollector::new(move || {
                vec![
                    (
                        Language::Python,
                        sandbox::PoolStats {
                            pooled_runs: seen.load(std::sync::atomic::Ordering::SeqCst),
                            idle: 2,
                            wait_seconds: 1.5,
                            ..Default::default()
                        },
                    ),
                    (
                        Language::Go,
                        sandbox::PoolStats {
                            size: 4,
                            ..Default::default()
                        },
                    ),
                ]
            })))
            .unwrap();
        let value = |name: &str, language: &str| {
            let family = registry.gather().into_iter().find(|f| f.name() == name)?;
            family
                .get_metric()
                .iter()
                .find(|m| {
                    m.get_label()
                        .iter()
                        .any(|l| l.name() == "language" && l.value() == language)
                })
                .map(|m| {
                    if name.ends_with("_total") {
                        m.get_counter().get_value()
                    } else {
                        m.get_gauge().get_value()
                    }
                })
        };
        assert_eq!(
            value("codegen_sandbox_pooled_runs_total", "python"),
            Some(3.0)
        );
        runs.store(7, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(
            value("codegen_sandbox_pooled_runs_total", "python"),
            Some(7.0)
        );
        assert_eq!(value("codegen_sandbox_pooled_runs_total", "go"), Some(0.0));
        assert_eq!(value("codegen_sandbox_pool_idle", "python"), Some(2.0));
        assert_eq!(value("codegen_sandbox_pool_size", "go"), Some(4.0));
        assert_eq!(
            value("codegen_sandbox_pool_wait_seconds_total", "python"),
            Some(1.5)
        );
        assert_eq!(value("codegen_sandbox_pool_size", "rust"), None);
    }
}
