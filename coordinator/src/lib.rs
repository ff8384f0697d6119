//! The coordinator: the HTTP API in front of the cluster.
//!
//! It validates a request, records it in Redis, publishes a task (with a publisher confirm)
//! and answers with the result once a worker stored it. It also consumes the dead-letter queue
//! and records why a task was dead-lettered as that task's result, so no caller waits forever.
//! It keeps no state of its own: any number of coordinators can run side by side.
//!
//! Invariants:
//! - an execution's metadata is in Redis before its task is published, so every id a worker
//!   can see is known to `GET /v1/executions/{id}`;
//! - a request is answered 2xx only after the broker confirmed its task;
//! - a task that cannot be published gets an `error` result, never a silent "queued".

mod agent_jobs;
mod api;
pub mod auth;
mod batches;
mod body;
mod cache;
mod cancel;
mod cluster;
mod console;
mod dead_letters;
mod docs;
pub mod egress;
mod ending;
mod error;
mod executions;
mod fusion;
mod generators;
mod idempotency;
mod jobs;
mod languages;
mod lessons;
mod listing;
pub mod mcp;
mod metrics;
mod quotas;
mod reaper;
mod request_id;
pub mod sessions;
pub mod tenants;
#[cfg(test)]
mod testing;
mod transcript;
mod usage;
mod webhooks;

use std::sync::Arc;
use std::time::Duration;

use broker::Broker;
use serde::{Deserialize, Serialize};
use store::Stores;
use tokio_util::sync::CancellationToken;

pub use api::{ApiDoc, openapi_document, router, routes};
pub use metrics::Metrics;
pub use tenants::{TenantLimits, TenantOptions};

/// Coordinator settings (`[coordinator]` in `codegen.toml`, `CODEGEN__COORDINATOR__*`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// Address of the HTTP API (and `/healthz`, `/readyz`, `/metrics`).
    pub listen: std::net::SocketAddr,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Largest `code`, in bytes.
    pub max_code_bytes: usize,
    /// Largest `stdin`, in bytes.
    pub max_stdin_bytes: usize,
    /// Program timeout when the request gives none, in milliseconds.
    pub default_timeout_ms: u64,
    /// Largest program timeout a request may ask for, in milliseconds (the compile's too).
    pub max_timeout_ms: u64,
    /// Compile timeout of a compiled language when the request gives none, in milliseconds
    /// (SandboxFusion's default too).
    pub default_compile_timeout_ms: u64,
    /// Memory limit when the request gives none, in MiB.
    pub default_memory_mb: u64,
    /// Smallest and largest memory limit a request may ask for, in MiB.
    pub min_memory_mb: u64,
    pub max_memory_mb: u64,
    /// How long `POST /v1/executions` waits for the verdict before answering 202 with the id.
    #[serde(with = "humantime_serde")]
    pub wait: Duration,
    /// API keys by tenant. Secrets: give them in the environment only
    /// (`CODEGEN__COORDINATOR__API_KEYS__<TENANT>=key`). Empty: the API is open.
    #[serde(skip_serializing)]
    pub api_keys: std::collections::BTreeMap<String, String>,
    /// Tenants that may empty the caches every tenant shares (`DELETE /v1/cache`),
    /// comma-separated. With API keys configured, any other tenant gets 403; without keys the
    /// API is open.
    pub admin_tenants: String,
    /// Largest job instruction, in bytes.
    pub max_instruction_bytes: usize,
    /// Implementation attempts per function when a job gives none, and the most it may ask.
    pub default_max_iterations: u32,
    pub max_iterations_limit: u32,
    /// Tokens a job may spend when it gives no `max_tokens_total`, and the most it may ask.
    pub default_max_tokens_total: u64,
    pub max_tokens_total_limit: u64,
    /// The longest an agent job's run may ask to take (`agent.max_seconds`), in seconds.
    pub agent_max_seconds: u64,
    /// Most functions a plan may have.
    pub max_functions: usize,
    /// Most jobs one `POST /v1/batches` may hold.
    pub max_batch_jobs: usize,
    /// Most programs one `POST /v1/executions/batch` may hold.
    pub max_batch_executions: usize,
    /// Largest body of `POST /v1/executions/batch`, in bytes.
    pub max_batch_body_bytes: usize,
    /// How long shutdown waits for open requests.
    #[serde(with = "humantime_serde")]
    pub drain_timeout: Duration,
    /// A generation job not finished this long after its submission fails with that reason
    /// (a safety net: a job waiting for a model, a sandbox or a lost task ends, never hangs).
    #[serde(with = "humantime_serde")]
    pub job_deadline: Duration,
    /// Settings per tenant (`coordinator.tenants.<name>.weight`); a tenant with an API key and
    /// no entry here has the defaults.
    pub tenants: std::collections::BTreeMap<String, TenantOptions>,
    /// Every tenant's settings where `tenants.<name>` leaves one out.
    pub tenant_defaults: TenantOptions,
    /// The period of `model_tokens_per_period` and `sandbox_cpu_seconds_per_period`: whole
    /// hours, periods counted from the Unix epoch (a day is a UTC day).
    #[serde(with = "humantime_serde")]
    pub quota_period: Duration,
    /// Where webhooks may go: comma-separated `host:port` patterns (`*` matches any run of
    /// characters), e.g. `hooks.example.com:443,*.acme.test:*`. A `callback_url` whose host
    /// and port match none is refused (422). Empty: no webhooks.
    pub webhook_allow: String,
    /// How long a webhook is retried (with backoff) after its resource ended.
    #[serde(with = "humantime_serde")]
    pub webhook_retry_for: Duration,
    /// Limit per webhook attempt.
    #[serde(with = "humantime_serde")]
    pub webhook_timeout: Duration,
    /// Internal addresses a tenant's outbound call (a webhook) may reach all the same:
    /// comma-separated CIDRs, e.g. `10.20.0.0/16`. Every other loopback, private, link-local,
    /// carrier-grade NAT, unique-local, multicast or unspecified address is refused after the
    /// host is resolved, whatever `webhook_allow` says (`egress`). Empty: none.
    pub egress_allow_cidrs: String,
    /// Stateful sessions.
    pub sessions: sessions::SessionLimits,
}

impl Options {
    /// Whether `tenant` may act on what every tenant shares (the caches).
    pub fn is_admin(&self, tenant: &auth::Tenant) -> bool {
        self.api_keys.is_empty()
            || tenant.0.as_deref().is_some_and(|t| {
                self.admin_tenants
                    .split(',')
                    .map(str::trim)
                    .any(|admin| !admin.is_empty() && admin.eq_ignore_ascii_case(t))
            })
    }
}

impl Default for Options {
    fn default() -> Self {
        Self {
            listen: ([127, 0, 0, 1], 8080).into(),
            max_body_bytes: 4 << 20,
            max_code_bytes: 1 << 20,
            max_stdin_bytes: 1 << 20,
            default_timeout_ms: 10_000,
            max_timeout_ms: 120_000,
            default_compile_timeout_ms: 10_000,
            default_memory_mb: 256,
            min_memory_mb: 16,
            max_memory_mb: 4096,
            wait: Duration::from_secs(60),
            api_keys: Default::default(),
            admin_tenants: String::new(),
            max_instruction_bytes: 16 * 1024,
            default_max_iterations: 3,
            max_iterations_limit: 10,
            default_max_tokens_total: 500_000,
            max_tokens_total_limit: 10_000_000,
            agent_max_seconds: 3600,
            max_functions: 16,
            max_batch_jobs: 1000,
            max_batch_executions: 10_000,
            max_batch_body_bytes: 64 << 20,
            drain_timeout: Duration::from_secs(30),
            job_deadline: Duration::from_secs(6 * 3600),
            tenants: Default::default(),
            tenant_defaults: TenantOptions::default(),
            quota_period: Duration::from_secs(24 * 3600),
            webhook_allow: String::new(),
            webhook_retry_for: Duration::from_secs(3600),
            webhook_timeout: Duration::from_secs(10),
            egress_allow_cidrs: String::new(),
            sessions: sessions::SessionLimits::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid coordinator configuration: {0}")]
    Config(String),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
}

/// Shared by request handlers; cheap to clone.
#[derive(Clone)]
pub struct Coordinator {
    pub(crate) options: Arc<Options>,
    pub(crate) broker: Arc<dyn Broker>,
    /// Everything kept in Redis; a part left out is a feature this coordinator goes without
    /// (listing routes answer 503 without the index, no quotas without their store, ...).
    pub(crate) stores: Stores,
    /// Publishes a job's plan task and ends jobs, as the workers do (`flow`).
    pub(crate) flow: flow::Flow,
    pub(crate) metrics: Metrics,
    /// The identity of the model answering (provider/model@prompts), which keys the solution
    /// cache; without it, the cache is not used.
    pub(crate) model: Option<String>,
    /// Whether any worker can generate (jobs are refused while none can), from
    /// `stores.presence`.
    pub(crate) generators: Option<Arc<generators::Generators>>,
    /// The guard of every call to a target a tenant chose.
    pub(crate) egress: egress::Egress,
    /// The client that delivers webhooks (`stores.webhooks`), through `egress`.
    pub(crate) webhook_client: reqwest::Client,
    /// The workers' sandbox image of each language, for `GET /v1/languages`.
    pub(crate) images: Arc<std::collections::BTreeMap<proto::Language, String>>,
    /// The client of the workers' session APIs.
    pub(crate) session_client: reqwest::Client,
    /// Ends sessions, as the workers do (`flow`); none without a session store.
    pub(crate) session_ends: Option<flow::SessionEnds>,
    /// Ends executions, as the workers do (`flow`).
    pub(crate) execution_ends: flow::ExecutionEnds,
    /// The memory's settings (`[memory]`): the bounds an import keeps to.
    pub(crate) memory: memory::Options,
}

impl std::fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator")
            .field("options", &self.options)
            .finish()
    }
}

impl Coordinator {
    pub fn build(
        options: Options,
        broker: Arc<dyn Broker>,
        stores: Stores,
        registry: &prometheus::Registry,
    ) -> Result<Self, Error> {
        if options.default_timeout_ms > options.max_timeout_ms {
            return Err(Error::Config(
                "default_timeout_ms is larger than max_timeout_ms".into(),
            ));
        }
        if !(1..=options.max_timeout_ms).contains(&options.default_compile_timeout_ms) {
            return Err(Error::Config(
                "default_compile_timeout_ms must be between 1 and max_timeout_ms".into(),
            ));
        }
        if !(options.min_memory_mb..=options.max_memory_mb).contains(&options.default_memory_mb) {
            return Err(Error::Config(
                "default_memory_mb is outside min_memory_mb..=max_memory_mb".into(),
            ));
        }
        options.check_tenants()?;
        if options.quota_period < Duration::from_secs(3600)
            || !options.quota_period.as_secs().is_multiple_of(3600)
            || options.quota_period.subsec_nanos() != 0
        {
            return Err(Error::Config(format!(
                "quota_period must be a whole number of hours (usage is kept per hour), not {}",
                humantime_serde::re::humantime::format_duration(options.quota_period)
            )));
        }
        let metrics = Metrics::register(registry).map_err(|e| Error::Config(e.to_string()))?;
        metrics.usage.know(options.weights().into_keys());
        let flow =
            flow::Flow::new(Arc::clone(&stores.jobs), Arc::clone(&broker)).with_ends(flow::Ends {
                usage: metrics.usage.clone(),
                job_seconds: metrics.job_seconds.clone(),
                jobs_finished: metrics.jobs_finished.clone(),
            });
        let egress = egress::Egress::new(
            &options.egress_allow_cidrs,
            Arc::new(egress::SystemLookup),
            metrics.egress_refused.clone(),
        )
        .map_err(Error::Config)?;
        let webhook_client = webhook_client(&egress, &options)?;
        let generators = stores
            .presence
            .clone()
            .map(|presence| Arc::new(generators::Generators::new(presence)));
        let session_ends = stores
            .sessions
            .clone()
            .map(|s| flow::SessionEnds::new(s, metrics.sessions_ended.clone()));
        let execution_ends = flow::ExecutionEnds::new(
            stores.executions.clone(),
            metrics.executions_finished.clone(),
            metrics.usage.clone(),
        );
        Ok(Self {
            options: Arc::new(options),
            broker,
            stores,
            flow,
            metrics,
            model: None,
            generators,
            egress,
            webhook_client,
            images: Arc::default(),
            session_client: sessions::host_client(),
            session_ends,
            execution_ends,
            memory: memory::Options::default(),
        })
    }

    /// Resolves the hosts of tenants' targets with `lookup` (tests make names resolve to
    /// addresses of their choosing).
    pub fn with_lookup(mut self, lookup: Arc<dyn egress::Lookup>) -> Result<Self, Error> {
        self.egress = self.egress.with_lookup(lookup);
        self.webhook_client = webhook_client(&self.egress, &self.options)?;
        Ok(self)
    }

    /// The sandbox image of each language (`sandbox::Options::image`), for
    /// `GET /v1/languages`; without it, the default names (`codegen-sandbox-<name>:latest`).
    pub fn with_images(
        mut self,
        images: impl IntoIterator<Item = (proto::Language, String)>,
    ) -> Self {
        self.images = Arc::new(images.into_iter().collect());
        self
    }

    /// Refuses work that needs a task published while the broker is unreachable from here
    /// (`broker_unavailable`), before anything of it is recorded.
    pub(crate) fn refuse_without_broker(&self) -> Result<(), error::ApiError> {
        self.broker
            .health()
            .map_err(|reason| error::broker_unavailable(&reason))
    }

    pub(crate) fn image(&self, language: proto::Language) -> String {
        self.images
            .get(&language)
            .cloned()
            .unwrap_or_else(|| format!("codegen-sandbox-{language}:latest"))
    }

    /// The solution cache (`stores.cache`), the tenants' quotas with how long an execution may
    /// count as in flight, `Idempotency-Key`s with how long they are kept, and webhooks with
    /// their client: each where its store is there.
    pub(crate) fn cache(&self) -> Option<(&Arc<dyn store::CacheStore>, &str)> {
        Some((self.stores.cache.as_ref()?, self.model.as_deref()?))
    }

    pub(crate) fn quotas(&self) -> Option<(&Arc<dyn store::Quotas>, Duration)> {
        Some((self.stores.quotas.as_ref()?, self.stores.result_ttl))
    }

    pub(crate) fn idempotency(&self) -> Option<(&Arc<dyn store::Idempotency>, Duration)> {
        Some((self.stores.idempotency.as_ref()?, self.stores.result_ttl))
    }

    pub(crate) fn webhooks(&self) -> Option<(&Arc<dyn store::Webhooks>, &reqwest::Client)> {
        Some((self.stores.webhooks.as_ref()?, &self.webhook_client))
    }

    /// Lists `ids` among `tenant`'s `kind`, before they are created: an id listed whose
    /// creation then failed is skipped by the listing, while one created but never listed
    /// could not be found again.
    pub(crate) async fn list(
        &self,
        kind: store::index::Kind,
        tenant: Option<&str>,
        at_ms: u64,
        ids: &[proto::TaskId],
    ) -> Result<(), error::ApiError> {
        match &self.stores.index {
            Some(index) => index
                .record(kind, tenant, at_ms, ids)
                .await
                .map_err(error::unavailable),
            None => Ok(()),
        }
    }

    /// The memory's settings (`[memory]`), as the workers have them.
    pub fn with_memory(mut self, memory: memory::Options) -> Self {
        self.memory = memory;
        self
    }

    /// Answers repeated requests from the solution cache (`stores.cache`). `model` identifies
    /// the model configuration (`model::identity`): a new model or prompt version misses.
    pub fn with_model(mut self, model: String) -> Self {
        self.model = Some(model);
        self
    }

    /// Serves the API on `listener` (merged with `ops`, the health and metrics routes, the web
    /// console and the `/docs` page) and runs the background services until `cancel` fires.
    pub async fn run(
        self,
        listener: tokio::net::TcpListener,
        ops: axum::Router,
        cancel: CancellationToken,
    ) -> Result<(), Error> {
        let addr = listener.local_addr().map_err(|source| Error::Listen {
            addr: self.options.listen,
            source,
        })?;
        tracing::info!(%addr, "coordinator listening");
        // The background services, each on its own loop until `cancel`: what nobody else
        // answers for (dead letters, overdue jobs), webhooks, and the tenants' registration.
        let mut services = vec![
            tokio::spawn(dead_letters::DeadLetters::build(&self).run(cancel.clone())),
            tokio::spawn(reaper::Reaper::build(&self).run(cancel.clone())),
        ];
        if let Some(deliverer) = webhooks::Deliverer::build(&self) {
            services.push(tokio::spawn(deliverer.run(cancel.clone())));
        }
        if let Some(sweeper) = sessions::Sweeper::build(&self) {
            services.push(tokio::spawn(sweeper.run(cancel.clone())));
        }
        if let Some(registration) =
            tenants::Registration::build(&self.options, self.stores.tenants.clone())
        {
            services.push(tokio::spawn(registration.run(cancel.clone())));
        }
        // The web console and the API's docs page (static, no key: they call the API with
        // the key their user gives).
        let app = router(self.clone())
            .merge(ops)
            .merge(console::router())
            .merge(docs::router());
        let drain = self.options.drain_timeout;
        let served = telemetry::serve(listener, app, cancel.clone());
        let result = tokio::select! {
            result = served => result,
            // Open requests may wait up to `wait`; do not let them hold the shutdown forever.
            _ = async { cancel.cancelled().await; tokio::time::sleep(drain).await } => Ok(()),
        };
        for service in services {
            let _ = service.await;
        }
        result.map_err(|source| Error::Listen { addr, source })
    }
}

pub(crate) use proto::now_ms;

/// The webhook client: through the egress guard, `webhook_timeout` a call, connecting within
/// a few seconds of it.
fn webhook_client(egress: &egress::Egress, options: &Options) -> Result<reqwest::Client, Error> {
    egress
        .client(
            options.webhook_timeout.min(Duration::from_secs(5)),
            options.webhook_timeout,
        )
        .map_err(|e| Error::Config(format!("webhook client: {e}")))
}
