use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

/// The coordinator's Prometheus metrics.
#[derive(Debug, Clone)]
pub struct Metrics {
    pub http_requests: IntCounterVec,
    pub http_seconds: HistogramVec,
    pub executions: IntCounterVec,
    pub dead_letters: IntCounterVec,
    /// Outbound calls to tenants' targets the egress guard refused, by range.
    pub egress_refused: IntCounterVec,
    pub jobs: IntCounterVec,
    /// Jobs this coordinator failed (planning failed, dead-lettered, overdue, not queued).
    pub job_seconds: HistogramVec,
    /// What the work this coordinator ended (failed, cancelled, answered from the cache,
    /// dead-lettered) cost, by tenant.
    pub usage: telemetry::TenantUsage,
}

impl Metrics {
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let metrics = Self {
            http_requests: IntCounterVec::new(
                Opts::new(
                    "codegen_http_requests_total",
                    "HTTP requests, by route and status",
                ),
                &["route", "status"],
            )?,
            http_seconds: HistogramVec::new(
                HistogramOpts::new("codegen_http_request_seconds", "HTTP request latency")
                    .buckets(telemetry::latency_buckets()),
                &["route"],
            )?,
            executions: IntCounterVec::new(
                Opts::new(
                    "codegen_executions_total",
                    "Executions accepted and answered, by language and status",
                ),
                &["language", "status"],
            )?,
            dead_letters: IntCounterVec::new(
                Opts::new(
                    "codegen_dead_letters_total",
                    "Dead-lettered tasks, by reason",
                ),
                &["reason"],
            )?,
            egress_refused: IntCounterVec::new(
                Opts::new(
                    "codegen_egress_refused_total",
                    "Calls to a target a tenant chose (webhooks) refused by the egress guard, by the range of the address (or unresolved)",
                ),
                &["reason"],
            )?,
            jobs: IntCounterVec::new(
                Opts::new(
                    "codegen_jobs_total",
                    "Jobs accepted, answered from the cache, and ended by this coordinator (cancelled, overdue, dead-lettered, not queued), by outcome",
                ),
                &["outcome"],
            )?,
            job_seconds: telemetry::job_seconds()?,
            usage: telemetry::TenantUsage::register(registry)?,
        };
        registry.register(Box::new(metrics.job_seconds.clone()))?;
        registry.register(Box::new(metrics.jobs.clone()))?;
        registry.register(Box::new(metrics.http_requests.clone()))?;
        registry.register(Box::new(metrics.http_seconds.clone()))?;
        registry.register(Box::new(metrics.executions.clone()))?;
        registry.register(Box::new(metrics.dead_letters.clone()))?;
        registry.register(Box::new(metrics.egress_refused.clone()))?;
        // The series alerts watch exist from the start, at zero, so the first dead letter or
        // failed job is an increase rather than a new series that increase() cannot see.
        for reason in ["delivery_limit", "rejected"] {
            metrics.dead_letters.with_label_values(&[reason]);
        }
        for outcome in ["accepted", "cache_hit", "failed", "cancelled"] {
            metrics.jobs.with_label_values(&[outcome]);
        }
        Ok(metrics)
    }
}
