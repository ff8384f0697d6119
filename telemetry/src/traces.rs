//! OpenTelemetry traces: `tracing` spans exported over OTLP/HTTP when
//! `telemetry.otlp_endpoint` is set, and the W3C trace context carried between processes in
//! message headers. Off (the default), every function here is a no-op and spans cost what
//! `tracing` spans cost.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{SpanKind, TraceContextExt, Tracer, TracerProvider as _};
use opentelemetry::{Context, KeyValue, global};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use serde::{Deserialize, Serialize};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Trace settings (`[telemetry]` in `codegen.toml`, `CODEGEN__TELEMETRY__*` in the
/// environment).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TraceOptions {
    /// Base URL of an OTLP/HTTP collector (`http://collector:4318`): spans go to
    /// `<it>/v1/traces` as JSON. Unset: no traces are exported.
    pub otlp_endpoint: Option<String>,
    /// Share of new traces kept, 0.0 to 1.0; a trace begun elsewhere (a `traceparent` on the
    /// request) follows that decision.
    pub sample_ratio: f64,
}

impl Default for TraceOptions {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            sample_ratio: 1.0,
        }
    }
}

/// Why the exporter could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("telemetry.sample_ratio: {0} is not between 0 and 1")]
    SampleRatio(f64),
    #[error("telemetry.otlp_endpoint: {0}")]
    Exporter(String),
}

/// The name of the library every span of ours is made by.
const SCOPE: &str = "codegen-cluster";

/// Builds the tracer provider for `service` (`codegen-coordinator`, `codegen-worker`), or
/// `None` when no endpoint is set. Installs the W3C trace-context propagator and the provider
/// as the global ones.
pub(crate) fn provider(
    options: &TraceOptions,
    service: &str,
) -> Result<Option<SdkTracerProvider>, TraceError> {
    let Some(endpoint) = options.otlp_endpoint.as_deref() else {
        return Ok(None);
    };
    if !(0.0..=1.0).contains(&options.sample_ratio) {
        return Err(TraceError::SampleRatio(options.sample_ratio));
    }
    let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
    let (ratio, service) = (options.sample_ratio, service.to_owned());
    // reqwest's blocking client runs a runtime of its own: made (and later dropped, in the
    // batch processor's thread) outside the caller's.
    let built = std::thread::spawn(move || {
        use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| TraceError::Exporter(e.to_string()))?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpJson)
            .with_endpoint(url)
            .build()
            .map_err(|e| TraceError::Exporter(e.to_string()))?;
        Ok::<_, TraceError>(
            SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                    ratio,
                ))))
                .with_resource(
                    opentelemetry_sdk::Resource::builder()
                        .with_service_name(service)
                        .build(),
                )
                .build(),
        )
    })
    .join()
    .map_err(|_| TraceError::Exporter("setting up the exporter panicked".into()))??;
    global::set_text_map_propagator(TraceContextPropagator::new());
    global::set_tracer_provider(built.clone());
    Ok(Some(built))
}

/// The `tracing` layer that turns spans into OpenTelemetry spans.
pub(crate) fn layer<S>(provider: &SdkTracerProvider) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer(SCOPE))
        .with_error_records_to_exceptions(true)
}

/// Exports what is buffered and stops the exporter (at the end of the process).
pub(crate) fn shut_down(provider: SdkTracerProvider) {
    // It waits for the batch thread's last export: off the caller's runtime.
    let _ = std::thread::spawn(move || provider.shutdown()).join();
}

/// The span of publishing one task message (a producer span, as the messaging conventions
/// name it): its context is what [`inject`] puts in the message's headers, so the task's span
/// in whichever worker takes it is its child. `job`: the job the task is of, if any.
pub fn publish_span(message_id: &str, task_kind: &str, job: Option<&str>) -> tracing::Span {
    tracing::info_span!(
        "publish",
        otel.kind = "producer",
        messaging.system = "rabbitmq",
        messaging.operation.type = "send",
        messaging.message.id = message_id,
        task.kind = task_kind,
        job = job.unwrap_or("-"),
    )
}

/// The trace context of `span` as message headers (`traceparent`, `tracestate`): none when
/// traces are off.
pub fn inject(span: &tracing::Span) -> BTreeMap<String, String> {
    let context = span.context();
    let mut headers = std::collections::HashMap::new();
    global::get_text_map_propagator(|p| p.inject_context(&context, &mut headers));
    headers.into_iter().collect()
}

/// Makes `span` a child of the trace context in `headers` (a message's), when they carry one.
pub fn follow(span: &tracing::Span, headers: &BTreeMap<String, String>) {
    if !headers.contains_key("traceparent") {
        return;
    }
    let headers: std::collections::HashMap<String, String> = headers
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let parent = global::get_text_map_propagator(|p| p.extract(&headers));
    let _ = span.set_parent(parent);
}

/// The trace id of `span` (32 hex digits), or `-` when traces are off.
pub fn trace_id(span: &tracing::Span) -> String {
    let context = span.context();
    let span_context = context.span().span_context().clone();
    if span_context.is_valid() {
        span_context.trace_id().to_string()
    } else {
        "-".to_owned()
    }
}

/// A span of its own for the time a message waited in its queue, from `published` to
/// `taken`, child of `span` (the task's): a consumer span, as the messaging conventions name
/// it, whose times are the message's, not the moment it is recorded.
pub fn queue_wait(span: &tracing::Span, queue: &str, published: SystemTime, taken: SystemTime) {
    let parent: Context = span.context();
    if !parent.span().span_context().is_valid() {
        return;
    }
    let tracer = global::tracer(SCOPE);
    let mut wait = tracer
        .span_builder("queue wait")
        .with_kind(SpanKind::Consumer)
        .with_start_time(published)
        .with_attributes([
            KeyValue::new("messaging.system", "rabbitmq"),
            KeyValue::new("messaging.destination.name", queue.to_owned()),
            KeyValue::new("messaging.operation.type", "receive"),
        ])
        .start_with_context(&tracer, &parent);
    use opentelemetry::trace::Span as _;
    wait.end_with_timestamp(taken.max(published));
}
