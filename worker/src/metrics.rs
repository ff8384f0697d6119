use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry};

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
    pub sandbox_runs: IntCounterVec,
    pub sandbox_seconds: HistogramVec,
    /// Functions whose cases went in a run shared with others of their job (`shared`), or ran
    /// again alone because that run broke (`broke`).
    pub shared_cases: IntCounterVec,
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
            sandbox_runs: IntCounterVec::new(
                Opts::new(
                    "codegen_sandbox_runs_total",
                    "Sandbox runs, by language and verdict",
                ),
                &["language", "status"],
            )?,
            sandbox_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "codegen_sandbox_run_seconds",
                    "Wall time of one sandbox run, container included",
                )
                .buckets(buckets),
                &["language"],
            )?,
            shared_cases: IntCounterVec::new(
                Opts::new(
                    "codegen_sandbox_shared_cases_total",
                    "Functions whose cases run was shared with others of their job that waited for a container (shared), or ran again alone after the shared run broke (broke)",
                ),
                &["outcome"],
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
        registry.register(Box::new(metrics.sandbox_runs.clone()))?;
        registry.register(Box::new(metrics.sandbox_seconds.clone()))?;
        registry.register(Box::new(metrics.shared_cases.clone()))?;
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

/// Exposes the sandbox pool's counters and size at scrape time.
pub struct PoolCollector {
    stats: Box<dyn Fn() -> sandbox::PoolStats + Send + Sync>,
    descs: Vec<prometheus::core::Desc>,
}

impl std::fmt::Debug for PoolCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolCollector").finish_non_exhaustive()
    }
}

const POOL_COUNTERS: &[(&str, &str)] = &[
    (
        "codegen_sandbox_containers_started_total",
        "Sandbox containers started (warm and fresh)",
    ),
    (
        "codegen_sandbox_containers_retired_total",
        "Pool containers removed (breach, error, run limit, shutdown)",
    ),
    (
        "codegen_sandbox_pooled_runs_total",
        "Executions run in a warm container",
    ),
    (
        "codegen_sandbox_fresh_runs_total",
        "Executions run in a container of their own",
    ),
    (
        "codegen_sandbox_retries_total",
        "Executions retried in a fresh container after their warm one failed",
    ),
    (
        "codegen_sandbox_memory_updates_total",
        "Memory limit updates of warm containers",
    ),
];

const POOL_GAUGES: &[(&str, &str)] = &[
    ("codegen_sandbox_pool_idle", "Warm containers idle now"),
    (
        "codegen_sandbox_pool_live",
        "Pool containers existing now (idle, busy or starting)",
    ),
];

impl PoolCollector {
    pub fn new(stats: impl Fn() -> sandbox::PoolStats + Send + Sync + 'static) -> Self {
        let descs = POOL_COUNTERS
            .iter()
            .chain(POOL_GAUGES)
            .filter_map(|(name, help)| {
                prometheus::core::Desc::new(
                    (*name).into(),
                    (*help).into(),
                    vec![],
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
        let s = (self.stats)();
        let counters = [
            s.containers_started,
            s.containers_retired,
            s.pooled_runs,
            s.fresh_runs,
            s.retries,
            s.memory_updates,
        ];
        let gauges = [s.idle as i64, s.live as i64];
        let mut families = Vec::new();
        for ((name, help), value) in POOL_COUNTERS.iter().zip(counters) {
            if let Ok(counter) = prometheus::IntCounter::new(*name, *help) {
                counter.inc_by(value);
                families.extend(prometheus::core::Collector::collect(&counter));
            }
        }
        for ((name, help), value) in POOL_GAUGES.iter().zip(gauges) {
            if let Ok(gauge) = IntGauge::new(*name, *help) {
                gauge.set(value);
                families.extend(prometheus::core::Collector::collect(&gauge));
            }
        }
        families
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_stats_appear_in_the_registry_at_scrape_time() {
        let registry = Registry::new();
        let runs = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(3));
        let seen = runs.clone();
        registry
            .register(Box::new(PoolCollector::new(move || sandbox::PoolStats {
                pooled_runs: seen.load(std::sync::atomic::Ordering::SeqCst),
                idle: 2,
                ..Default::default()
            })))
            .unwrap();
        let value = |name: &str| {
            registry
                .gather()
                .iter()
                .find(|f| f.name() == name)
                .map(|f| f.get_metric()[0].clone())
        };
        assert_eq!(
            value("codegen_sandbox_pooled_runs_total")
                .unwrap()
                .get_counter()
                .get_value(),
            3.0
        );
        runs.store(7, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(
            value("codegen_sandbox_pooled_runs_total")
                .unwrap()
                .get_counter()
                .get_value(),
            7.0
        );
        assert_eq!(
            value("codegen_sandbox_pool_idle")
                .unwrap()
                .get_gauge()
                .get_value(),
            2.0
        );
    }
}
