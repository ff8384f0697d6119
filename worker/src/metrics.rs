use prometheus::{Histogram, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry};

/// The worker's Prometheus metrics.
#[derive(Debug, Clone)]
pub struct Metrics {
    pub tasks: IntCounterVec,
    pub task_seconds: HistogramVec,
    pub queue_wait_seconds: Histogram,
    pub in_flight: IntGauge,
    pub sandbox_runs: IntCounterVec,
    pub sandbox_seconds: HistogramVec,
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
            task_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "codegen_worker_task_seconds",
                    "Time from delivery to settlement",
                )
                .buckets(buckets.clone()),
                &["kind"],
            )?,
            queue_wait_seconds: Histogram::with_opts(
                HistogramOpts::new(
                    "codegen_worker_queue_wait_seconds",
                    "Time from acceptance by the coordinator to the start of work",
                )
                .buckets(buckets.clone()),
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
        };
        registry.register(Box::new(metrics.tasks.clone()))?;
        registry.register(Box::new(metrics.task_seconds.clone()))?;
        registry.register(Box::new(metrics.queue_wait_seconds.clone()))?;
        registry.register(Box::new(metrics.in_flight.clone()))?;
        registry.register(Box::new(metrics.sandbox_runs.clone()))?;
        registry.register(Box::new(metrics.sandbox_seconds.clone()))?;
        Ok(metrics)
    }
}
