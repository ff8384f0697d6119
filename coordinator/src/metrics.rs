use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

/// The coordinator's Prometheus metrics.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// `http_server_request_duration_seconds`, labelled as OpenTelemetry's HTTP conventions
    /// name them (its `_count` counts requests).
    pub http_duration: HistogramVec,
    /// Executions accepted, by language and route (`/v1/executions`, `.../batch`,
    /// `/run_code`).
    pub executions_submitted: IntCounterVec,
    /// Executions this coordinator gave a verdict (not queued, dead-lettered).
    pub executions_finished: IntCounterVec,
    pub dead_letters: IntCounterVec,
    /// Outbound calls to tenants' targets the egress guard refused, by range.
    pub egress_refused: IntCounterVec,
    /// Jobs created, by whether the solution cache answered them (`hit`) or they were queued.
    pub jobs_submitted: IntCounterVec,
    /// Jobs this coordinator ended (cancelled, overdue, dead-lettered, not queued, cache hits).
    pub jobs_finished: IntCounterVec,
    pub job_seconds: HistogramVec,
    /// Sessions opened, by language.
    pub sessions_opened: IntCounterVec,
    /// Sessions this coordinator ended, by final state and cause (`flow::SessionEnds`).
    pub sessions_ended: IntCounterVec,
    /// Session cells answered through this coordinator, by language and status (`ok`,
    /// `error`, `timeout`, `died`).
    pub session_cells: IntCounterVec,
    /// What the work this coordinator ended (failed, cancelled, answered from the cache,
    /// dead-lettered) cost, by tenant.
    pub usage: telemetry::TenantUsage,
}

impl Metrics {
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let metrics = Self {
            http_duration: HistogramVec::new(
                HistogramOpts::new(
                    "http_server_request_duration_seconds",
                    "Duration of HTTP requests to the API, by method, route and status code",
                )
                .buckets(telemetry::latency_buckets()),
                &[
                    "http_request_method",
                    "http_route",
                    "http_response_status_code",
                ],
            )?,
            executions_submitted: IntCounterVec::new(
                Opts::new(
                    "codegen_executions_submitted_total",
                    "Executions accepted (queued), by language and route",
                ),
                &["language", "route"],
            )?,
            executions_finished: telemetry::executions_finished()?,
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
            jobs_submitted: IntCounterVec::new(
                Opts::new(
                    "codegen_jobs_submitted_total",
                    "Jobs created, by whether the solution cache answered them (hit) or they were queued (miss)",
                ),
                &["cache"],
            )?,
            jobs_finished: telemetry::jobs_finished()?,
            job_seconds: telemetry::job_seconds()?,
            sessions_opened: IntCounterVec::new(
                Opts::new(
                    "codegen_sessions_opened_total",
                    "Sessions opened, by language",
                ),
                &["language"],
            )?,
            sessions_ended: flow::SessionEnds::counter(),
            session_cells: IntCounterVec::new(
                Opts::new(
                    "codegen_session_cells_total",
                    "Session cells answered, by language and status (ok, error, timeout, died)",
                ),
                &["language", "status"],
            )?,
            usage: telemetry::TenantUsage::register(registry)?,
        };
        // At zero from the start, so the dashboard's rates and the first event show.
        for language in proto::api::sessions::SESSION_LANGUAGES {
            metrics
                .sessions_opened
                .with_label_values(&[language.as_str()]);
            for status in ["ok", "error", "timeout", "died"] {
                metrics
                    .session_cells
                    .with_label_values(&[language.as_str(), status]);
            }
        }
        registry.register(Box::new(metrics.sessions_opened.clone()))?;
        registry.register(Box::new(metrics.sessions_ended.clone()))?;
        registry.register(Box::new(metrics.session_cells.clone()))?;
        registry.register(Box::new(metrics.job_seconds.clone()))?;
        registry.register(Box::new(metrics.jobs_submitted.clone()))?;
        registry.register(Box::new(metrics.jobs_finished.clone()))?;
        registry.register(Box::new(metrics.http_duration.clone()))?;
        registry.register(Box::new(metrics.executions_submitted.clone()))?;
        registry.register(Box::new(metrics.executions_finished.clone()))?;
        registry.register(Box::new(metrics.dead_letters.clone()))?;
        registry.register(Box::new(metrics.egress_refused.clone()))?;
        // The series alerts watch exist from the start, at zero, so the first dead letter or
        // failed job is an increase rather than a new series that increase() cannot see.
        for reason in ["delivery_limit", "rejected"] {
            metrics.dead_letters.with_label_values(&[reason]);
        }
        for cache in ["hit", "miss"] {
            metrics.jobs_submitted.with_label_values(&[cache]);
        }
        Ok(metrics)
    }
}
