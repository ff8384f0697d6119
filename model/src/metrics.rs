use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

/// Model-call metrics, labelled by provider, model and phase.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// Calls by outcome: `ok`, `retryable`, `rejected`, `spend_limit`, `invalid_answer`.
    pub calls: IntCounterVec,
    /// Tokens by kind: `prompt`, `completion`.
    pub tokens: IntCounterVec,
    pub call_seconds: HistogramVec,
    /// The concurrency limit in force (`model::adaptive`), as this process last changed it.
    pub concurrency_limit: IntGaugeVec,
    /// Changes of the limit in force, by reason (`grew`, `latency`, `timeout`, `capacity`,
    /// `probe`, `queued`).
    pub limit_changes: IntCounterVec,
    /// Calls this process has at the server now.
    pub in_flight: IntGaugeVec,
}

/// One call counted in flight until dropped (answered, failed, timed out or cancelled).
pub(crate) struct InFlight(prometheus::IntGauge);

impl InFlight {
    pub(crate) fn new(gauge: prometheus::IntGauge) -> Self {
        gauge.inc();
        Self(gauge)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Metrics {
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let metrics = Self::unregistered()?;
        registry.register(Box::new(metrics.calls.clone()))?;
        registry.register(Box::new(metrics.tokens.clone()))?;
        registry.register(Box::new(metrics.call_seconds.clone()))?;
        registry.register(Box::new(metrics.concurrency_limit.clone()))?;
        registry.register(Box::new(metrics.limit_changes.clone()))?;
        registry.register(Box::new(metrics.in_flight.clone()))?;
        Ok(metrics)
    }

    /// Metrics that go nowhere, for tools and tests.
    pub fn unregistered() -> prometheus::Result<Self> {
        Ok(Self {
            calls: IntCounterVec::new(
                Opts::new("codegen_model_calls_total", "Model calls, by outcome"),
                &["provider", "model", "phase", "outcome"],
            )?,
            tokens: IntCounterVec::new(
                Opts::new("codegen_model_tokens_total", "Tokens used, by kind"),
                &["provider", "model", "phase", "kind"],
            )?,
            call_seconds: HistogramVec::new(
                HistogramOpts::new("codegen_model_call_seconds", "Latency of one model call")
                    .buckets(vec![
                        0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0,
                    ]),
                &["provider", "model", "phase"],
            )?,
            concurrency_limit: IntGaugeVec::new(
                Opts::new(
                    "codegen_model_concurrency_limit",
                    "Model calls allowed in flight at once: found from the server's answers, or model.max_concurrency",
                ),
                &["provider", "model"],
            )?,
            limit_changes: IntCounterVec::new(
                Opts::new(
                    "codegen_model_concurrency_limit_changes_total",
                    "Changes of the model's concurrency limit, by reason",
                ),
                &["provider", "model", "reason"],
            )?,
            in_flight: IntGaugeVec::new(
                Opts::new(
                    "codegen_model_calls_in_flight",
                    "Model calls this process has at the server now",
                ),
                &["provider", "model"],
            )?,
        })
    }
}
