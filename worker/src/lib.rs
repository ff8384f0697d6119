//! The worker: consumes tasks, runs them, stores the results, then acks.
//!
//! Invariants:
//! - a delivery is acked only after its result is stored in Redis (or found already stored:
//!   a redelivered task is not run twice once its result exists);
//! - a message that cannot be decoded is dead-lettered at once, never retried;
//! - a sandbox failure is retried a bounded number of times, then stored as a
//!   `sandbox_error` verdict with its reason: the caller always gets an answer;
//! - on shutdown the worker stops consuming, lets in-flight tasks finish up to a deadline, and
//!   leaves anything unfinished unacked so the broker redelivers it to another worker;
//! - an outage costs time, never a task: while a dependency a queue needs is down (the
//!   [`gate::Gate`] says which), the worker takes nothing from that queue; a task that failed
//!   on a dependency that does not answer its probe waits for it in place, at most
//!   `outage_wait`, and then goes back to its queue with `hand_back`, which does not count
//!   towards the delivery limit. Only a failure whose dependency answers is the task's own and
//!   counts (`requeue`).

pub mod agent;
mod executions;
pub mod fair;
pub mod gate;
#[cfg(test)]
mod harness_contract;
mod metrics;
pub mod model_limits;
pub mod packages;
pub mod pipeline;
pub mod sandbox_turns;
mod sandboxed;
pub mod sessions;
pub mod static_check;
mod status;
pub mod stubs;

use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;

use broker::{Broker, Delivery, Queue};
use fair::Fair;
use futures::{Stream, StreamExt};
use gate::{Dependency, Down, Gate};
use proto::{Envelope, Language, Task};
use sandbox::Sandbox;
use serde::{Deserialize, Serialize};
use store::{Presence, Store, Stores, Tenants};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use metrics::{Metrics, PoolCollector};
pub use model_limits::RedisModelLimits;
pub use pipeline::{Pipeline, Step};

/// Worker settings (`[worker]` in `codegen.toml`, `CODEGEN__WORKER__*` in the environment).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// Address of the worker's `/healthz`, `/readyz` and `/metrics`.
    pub listen: std::net::SocketAddr,
    /// Pipeline tasks in flight at the same time (also their queue's prefetch). A task waiting
    /// for the model holds no sandbox and little memory, so this is sized for the model
    /// server (calls in flight), not for the cores: sandbox runs are bounded by the pool.
    pub concurrency: u16,
    /// Plain executions run at the same time (also their queue's prefetch). Executions wait
    /// for a warm container, so a little more than the pool size hides the broker hop.
    pub execution_concurrency: u16,
    /// How long a shutdown waits for in-flight work before leaving it to redelivery: an
    /// execution runs to its verdict, a pipeline task stops at its next step and goes back.
    #[serde(with = "humantime_serde")]
    pub drain_timeout: Duration,
    /// Extra attempts after a sandbox infrastructure failure.
    pub sandbox_retries: usize,
    /// How long storing a result is retried while Redis answers its probe but not the write
    /// (an outage is waited out instead, see `outage_wait`).
    #[serde(with = "humantime_serde")]
    pub store_retry_for: Duration,
    /// How long a task this worker holds waits for a dependency that is down before it goes
    /// back to its queue (not counted towards the delivery limit).
    #[serde(with = "humantime_serde")]
    pub outage_wait: Duration,
    /// How often a dependency that is down is probed.
    #[serde(with = "humantime_serde")]
    pub probe_interval: Duration,
    /// How often Redis, Docker and the broker are probed while they are up.
    #[serde(with = "humantime_serde")]
    pub watch_interval: Duration,
    /// The generation pipeline (plan, implement, integrate tasks).
    pub pipeline: pipeline::Options,
    /// Holding sessions.
    pub sessions: sessions::SessionOptions,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            listen: ([127, 0, 0, 1], 9090).into(),
            concurrency: 64,
            execution_concurrency: 4,
            drain_timeout: Duration::from_secs(30),
            sandbox_retries: 2,
            store_retry_for: Duration::from_secs(30),
            outage_wait: Duration::from_secs(300),
            probe_interval: Duration::from_secs(1),
            watch_interval: Duration::from_secs(2),
            pipeline: pipeline::Options::default(),
            sessions: sessions::SessionOptions::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid worker configuration: {0}")]
    Config(String),
}

/// The task-consuming service.
pub struct Worker {
    options: Options,
    broker: Arc<dyn Broker>,
    store: Arc<dyn Store>,
    sandbox: Arc<dyn Sandbox>,
    metrics: Metrics,
    pipeline: Option<Pipeline>,
    gate: Gate,
    /// The one sandbox-run loop, over `gate` and the pools' turns; shared with the pipeline.
    sandboxed: sandboxed::Sandboxed,
    /// The one way an execution ends (`flow`), shared with the coordinators.
    execution_ends: flow::ExecutionEnds,
    /// Where this worker says it is alive and whether it can generate, and its id there.
    presence: Option<(Arc<dyn Presence>, String)>,
    /// The tenants whose lanes of each queue this worker consumes besides the lane of no
    /// tenant (without a register: that lane only).
    tenants: Option<Arc<dyn Tenants>>,
    /// The registered weights, for the model's turn ([`model::turnstile`]).
    weights: std::sync::RwLock<std::collections::HashMap<String, u32>>,
    /// Agent jobs' loops, when this worker has a model and holds sessions.
    agent: Option<agent::Agent>,
    /// Its metrics, which its announcements summarize (`status`).
    registry: prometheus::Registry,
    /// When it was built, ms since the epoch.
    started_ms: u64,
}

/// What a worker is built from besides its options, all given at once ([`Worker::build`]).
pub struct Parts<'a> {
    pub broker: Arc<dyn Broker>,
    pub stores: &'a Stores,
    pub sandbox: Arc<dyn Sandbox>,
    pub registry: &'a prometheus::Registry,
    /// Which dependencies are down (run its [`gate::GateService`] beside the worker);
    /// `Gate::default()`: nothing ever is.
    pub gate: Gate,
    /// Plan, implement and integrate tasks; without a pipeline they are dead-lettered.
    pub pipeline: Option<Pipeline>,
    /// Each language's number of warm containers (`sandbox::Options::pool_size_of`): pooled
    /// runs then take them by tenant and weight ([`sandbox_turns`]); `None`: as they come.
    pub pool_size: Option<&'a dyn Fn(Language) -> usize>,
    /// Its name where it announces itself (`stores.presence`); default `worker-<pid>`.
    pub name: Option<String>,
    /// This worker's sessions ([`sessions::SessionHosting::local`]): with a pipeline that has
    /// a model, agent jobs run here, each on a session of its own.
    pub sessions: Option<sessions::LocalSessions>,
}

impl std::fmt::Debug for Parts<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parts")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("options", &self.options)
            .finish()
    }
}

/// What became of one delivery, for metrics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Completed,
    Duplicate,
    Malformed,
    /// Its own failure: back to the queue, counted towards the delivery limit.
    Requeued,
    /// A dependency stayed down: back to the queue, not counted.
    HandedBack,
    /// Its job had ended (cancelled, failed): dropped before spending anything more on it.
    Ended,
    /// It referred to something gone or settled (an expired job, an outcome another run of
    /// it stored first): acked, nothing stored.
    Stale,
    /// Its step failed for good with nowhere to record it: acked.
    Failed,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Duplicate => "duplicate",
            Outcome::Malformed => "malformed",
            Outcome::Requeued => "requeued",
            Outcome::HandedBack => "handed_back",
            Outcome::Ended => "ended",
            Outcome::Stale => "stale",
            Outcome::Failed => "failed",
        }
    }
}

impl Worker {
    /// A worker from its options and `parts`, in one step: executions' verdicts go to
    /// `stores.executions`; with `stores.tenants` it consumes every registered tenant's lane
    /// by weight ([`fair`], looking for new tenants every [`TENANTS_REFRESH`]); with
    /// `stores.presence` it announces itself (as `parts.name`). The pipeline, when given,
    /// is wired to this worker's gate, sandbox runs and counters here, before anything runs.
    pub fn build(options: Options, parts: Parts<'_>) -> Result<Self, Error> {
        if options.concurrency == 0 {
            return Err(Error::Config(
                "worker.concurrency must be at least 1".into(),
            ));
        }
        let Parts {
            broker,
            stores,
            sandbox,
            registry,
            gate,
            pipeline,
            pool_size,
            name,
            sessions,
        } = parts;
        let metrics = Metrics::register(registry).map_err(|e| Error::Config(e.to_string()))?;
        let execution_ends = flow::ExecutionEnds::new(
            Arc::clone(&stores.executions),
            metrics.executions_finished.clone(),
            metrics.usage.clone(),
        );
        let turns = pool_size.and_then(|size| sandbox_turns::SandboxTurns::new(size).map(Arc::new));
        let sandboxed = sandboxed::Sandboxed::new(
            gate.clone(),
            turns,
            Some(metrics.sandbox.clone()),
            options.sandbox_retries,
        );
        let name = name.unwrap_or_else(|| format!("worker-{}", std::process::id()));
        let pipeline = pipeline.map(|pipeline| {
            pipeline.in_worker(pipeline::InWorker {
                name: name.clone(),
                sandboxed: sandboxed.clone(),
                shared_cases: metrics.shared_cases.clone(),
                ends: flow::Ends {
                    usage: metrics.usage.clone(),
                    job_seconds: metrics.job_seconds.clone(),
                    jobs_finished: metrics.jobs_finished.clone(),
                },
            })
        });
        let agent = match (&pipeline, sessions) {
            (Some(pipeline), Some(sessions)) => pipeline.model.clone().map(|model| {
                let mut agent = agent::Agent::new(
                    model,
                    Arc::clone(&pipeline.jobs),
                    pipeline.flow.clone(),
                    sessions,
                    &metrics,
                );
                agent.memory = pipeline.memory.clone();
                agent
            }),
            _ => None,
        };
        Ok(Self {
            options,
            broker,
            store: Arc::clone(&stores.executions),
            sandbox,
            metrics,
            pipeline,
            gate,
            sandboxed,
            execution_ends,
            presence: stores.presence.clone().map(|presence| (presence, name)),
            tenants: stores.tenants.clone(),
            weights: Default::default(),
            agent,
            registry: registry.clone(),
            started_ms: proto::now_ms(),
        })
    }

    /// Adds a lane for each registered tenant `fair` does not have yet, and applies weights.
    async fn add_lanes(
        &self,
        fair: &mut Fair,
        queue: Queue,
        slots: u16,
        session: &CancellationToken,
    ) {
        // Each lane holds a few deliveries waiting besides what runs, so that when a slot
        // frees every lane with work has a delivery here to choose from: with only `slots`, a
        // lane whose deliveries all run has nothing here until its next one arrives, and the
        // slot goes to whichever other lane has (weights 3:1 came out 1.7:1). Few, because
        // what waits here cannot go to another worker.
        let prefetch = slots.saturating_add(slots.min(LANE_BUFFER));
        if !fair.has(None) {
            fair.add(
                None,
                1,
                self.broker.consume(queue, prefetch, session.clone()),
            );
        }
        let Some(register) = &self.tenants else {
            return;
        };
        let tenants = match register.tenants().await {
            Ok(tenants) => tenants,
            Err(e) => {
                tracing::debug!(error = %e, "cannot read the tenants; keeping the lanes there are");
                return;
            }
        };
        self.weights
            .write()
            .expect("poisoned")
            .extend(tenants.iter().map(|(t, w)| (t.clone(), *w)));
        self.metrics.usage.know(tenants.keys().cloned());
        for (tenant, weight) in tenants {
            if fair.has(Some(&tenant)) {
                fair.set_weight(Some(&tenant), weight);
            } else {
                tracing::info!(?queue, %tenant, weight, "consuming a tenant's lane");
                let lane = self.broker.consume_lane(
                    queue,
                    Some(tenant.clone()),
                    prefetch,
                    session.clone(),
                );
                fair.add(Some(tenant), weight, lane);
            }
        }
    }

    /// Whether this worker takes generation tasks; `Err` says why not.
    fn can_generate(&self) -> Result<(), String> {
        match &self.pipeline {
            Some(pipeline) => pipeline.can_generate().map_err(str::to_owned),
            None => Err("this worker runs no pipeline".into()),
        }
    }

    /// What work from `queue` needs. Pipeline tasks need Docker too, unless the static
    /// fallback has taken over after Docker has been down for `sandbox_wait`.
    fn needs(&self, queue: Queue) -> Vec<Dependency> {
        match queue {
            Queue::Executions => vec![Dependency::Redis, Dependency::Docker],
            _ => {
                let mut needs = vec![Dependency::Redis];
                // Once the model has been down for `model_wait`, tasks run to fail with its
                // error instead of waiting in the queue for it.
                if self
                    .pipeline
                    .as_ref()
                    .is_none_or(|p| p.model_given_up().is_none())
                {
                    needs.push(Dependency::Model);
                }
                let fallback = self.pipeline.as_ref().is_some_and(|p| {
                    p.options.static_fallback
                        && self
                            .gate
                            .down(Dependency::Docker)
                            .is_some_and(|d| d.since.elapsed() >= p.options.sandbox_wait)
                });
                if !fallback {
                    needs.push(Dependency::Docker);
                }
                needs
            }
        }
    }

    /// Consumes pipeline tasks and executions (each queue with its own slots) until `cancel`
    /// fires, then drains.
    /// A worker that cannot generate (no model) takes no pipeline tasks; it still runs
    /// executions.
    pub async fn run(self, cancel: CancellationToken) {
        let this = Arc::new(self);
        let tasks = match this.can_generate() {
            Ok(()) => this.options.concurrency,
            Err(reason) => {
                tracing::warn!(%reason, "taking no generation tasks");
                0
            }
        };
        let executions = this.options.execution_concurrency;
        let presence = tokio::spawn(this.clone().announce(cancel.clone()));
        tokio::join!(
            this.clone().consume(Queue::Tasks, tasks, cancel.clone()),
            this.clone().consume(Queue::Executions, executions, cancel),
        );
        let _ = presence.await;
        tracing::info!("worker stopped");
    }

    /// Says this worker is alive (and whether it can generate) until `cancel`, then withdraws.
    async fn announce(self: Arc<Self>, cancel: CancellationToken) {
        let Some((presence, id)) = &self.presence else {
            return;
        };
        let unable = self.can_generate().err();
        loop {
            let status = status::of(
                &self.registry.gather(),
                self.started_ms,
                proto::now_ms(),
                unable.clone(),
            );
            let status = serde_json::to_string(&status).ok();
            if let Err(e) = presence
                .announce(id, unable.as_deref(), status.as_deref(), PRESENCE_TTL)
                .await
            {
                tracing::debug!(error = %e, "cannot announce this worker");
            }
            tokio::select! {
                () = cancel.cancelled() => break,
                () = tokio::time::sleep(PRESENCE_PERIOD) => {}
            }
        }
        if let Err(e) = presence.withdraw(id).await {
            tracing::debug!(error = %e, "cannot withdraw this worker; its announcement expires");
        }
    }

    async fn consume(self: Arc<Self>, queue: Queue, slots: u16, cancel: CancellationToken) {
        if slots == 0 {
            return;
        }
        let mut in_flight: JoinSet<Option<String>> = JoinSet::new();
        let limit = usize::from(slots);
        let mut changes = self.gate.subscribe();
        'session: while !cancel.is_cancelled() {
            // Take nothing while something this queue's work needs is down.
            let missing = self.gate.missing(&self.needs(queue));
            if !missing.is_empty() {
                tokio::select! {
                    _ = cancel.cancelled() => break 'session,
                    Some(_) = in_flight.join_next(), if !in_flight.is_empty() => {}
                    _ = changes.changed() => {}
                    // `needs` also changes with time (the static fallback taking over).
                    () = tokio::time::sleep(NEEDS_RECHECK) => {}
                }
                continue 'session;
            }
            let session = cancel.child_token();
            let mut deliveries = Fair::default();
            self.add_lanes(&mut deliveries, queue, slots, &session)
                .await;
            let mut refresh = tokio::time::interval(TENANTS_REFRESH);
            refresh.tick().await;
            loop {
                // Prefetch already bounds deliveries; this bounds the fake broker too. Past
                // the slots, only a few starts of lanes with little running (`fair::SPARE`).
                while in_flight.len() >= limit + fair::SPARE {
                    if let Some(Ok(tenant)) = in_flight.join_next().await {
                        deliveries.finished(tenant.as_deref());
                    }
                }
                deliveries.only_light((in_flight.len() >= limit).then_some(fair::SPARE));
                tokio::select! {
                    _ = cancel.cancelled() => {
                        session.cancel();
                        Self::return_unstarted(deliveries.map(|(_, d)| d), queue).await;
                        break 'session;
                    }
                    Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                        if let Ok(tenant) = done {
                            deliveries.finished(tenant.as_deref());
                        }
                    }
                    _ = refresh.tick() => {
                        self.add_lanes(&mut deliveries, queue, slots, &session).await;
                    }
                    _ = changes.changed() => {
                        let missing = self.gate.missing(&self.needs(queue));
                        if !missing.is_empty() {
                            tracing::warn!(?queue, missing = %describe(&missing), "pausing: taking no work from this queue until it is back");
                            session.cancel();
                            // What the broker sent before the pause waits in its handler.
                            deliveries.only_light(None);
                            while let Some(start) = deliveries.next().await {
                                in_flight.spawn(self.clone().start(start, cancel.clone()));
                            }
                            continue 'session;
                        }
                    }
                    start = deliveries.next() => match start {
                        Some(start) => {
                            in_flight.spawn(self.clone().start(start, cancel.clone()));
                        }
                        None => break 'session,
                    },
                }
            }
        }
        let pending = in_flight.len();
        if pending > 0 {
            tracing::info!(pending, ?queue, "draining in-flight tasks");
        }
        let drained = tokio::time::timeout(self.options.drain_timeout, async {
            while in_flight.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                left = in_flight.len(),
                ?queue,
                "drain deadline passed; unfinished tasks go back to the queue"
            );
            in_flight.abort_all();
        }
    }

    /// Handles one delivery of `fair`; answers its lane's tenant, to count it done (a task
    /// that panicked answers nothing: its lane's count stays high, which only keeps that lane
    /// from the spare starts sooner).
    async fn start(
        self: Arc<Self>,
        (tenant, delivery): fair::Start,
        stop: CancellationToken,
    ) -> Option<String> {
        self.handle(delivery, &stop).await;
        tenant
    }

    /// At shutdown: deliveries the broker sent but no handler started go back to the queue
    /// without counting towards the limit (stopping is not the task's fault).
    async fn return_unstarted(mut deliveries: impl Stream<Item = Delivery> + Unpin, queue: Queue) {
        let mut returned = 0;
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(delivery) = deliveries.next().await {
                if let Err(e) = delivery.hand_back().await {
                    tracing::warn!(error = %e, "cannot hand back; the broker will redeliver");
                }
                returned += 1;
            }
        })
        .await;
        if returned > 0 {
            tracing::info!(returned, ?queue, "unstarted deliveries handed back");
        }
    }

    /// A dependency stayed down for `outage_wait`: the task goes back to the end of its
    /// queue, not counted towards the delivery limit, for whichever worker can run it.
    async fn hand_back(
        &self,
        delivery: Delivery,
        kind: &str,
        missing: &[(Dependency, Down)],
    ) -> Outcome {
        tracing::warn!(
            kind,
            message_id = ?delivery.message_id,
            missing = %describe(missing),
            waited = ?self.options.outage_wait,
            "dependency still down: task back to its queue (not counted towards the delivery limit)"
        );
        if let Err(e) = delivery.hand_back().await {
            tracing::warn!(error = %e, "cannot hand back; the broker will redeliver");
        }
        Outcome::HandedBack
    }

    /// Processes one delivery and settles it.
    /// A pipeline task stops at its next step once `stop` (the worker's drain) is cancelled,
    /// and goes back to its queue; an execution runs to its verdict.
    pub async fn handle(&self, delivery: Delivery, stop: &CancellationToken) -> Outcome {
        let started = Instant::now();
        // The queue wait ends where the handling time starts: neither counts the other's part.
        let started_us = proto::now_us();
        self.metrics.in_flight.inc();
        let envelope = match Envelope::decode(&delivery.body) {
            Ok(envelope) => envelope,
            Err(e) => {
                tracing::warn!(message_id = ?delivery.message_id, error = %e, "dead-lettering undecodable task");
                if let Err(e) = delivery.dead_letter().await {
                    tracing::warn!(error = %e, "cannot dead-letter; the broker will redeliver");
                }
                return self.finish("unknown", Outcome::Malformed, started);
            }
        };
        // Every line logged while the task runs names it, its job, the request that made the
        // work and its trace; the span continues the trace of the publish that sent it.
        let kind = envelope.task.kind();
        let span = tracing::info_span!(
            "task",
            otel.name = format!("process {kind}"),
            otel.kind = "consumer",
            messaging.system = "rabbitmq",
            messaging.operation.type = "process",
            messaging.message.id = delivery.message_id.as_deref().unwrap_or("-"),
            kind,
            task = %envelope.task_id,
            job = %envelope.task.job_id().map_or_else(|| "-".to_owned(), |id| id.to_string()),
            request_id = %envelope.request_id.as_deref().unwrap_or("-"),
            trace_id = tracing::field::Empty,
            outcome = tracing::field::Empty,
            verdict = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        telemetry::follow(&span, &delivery.headers);
        span.record(
            "trace_id",
            tracing::field::display(telemetry::trace_id(&span)),
        );
        if envelope.published_at_us > 0 {
            let at = |us: u64| std::time::UNIX_EPOCH + Duration::from_micros(us);
            let queue = match envelope.task {
                Task::Execute(_) => "executions",
                _ => "tasks",
            };
            telemetry::queue_wait(&span, queue, at(envelope.published_at_us), at(started_us));
        }
        let outcome = self
            .handle_envelope(delivery, envelope, started, started_us, stop)
            .instrument(span.clone())
            .await;
        span.record("outcome", outcome.as_str());
        if matches!(
            outcome,
            Outcome::Malformed | Outcome::Requeued | Outcome::Failed
        ) {
            failed_span(&span, outcome.as_str());
        }
        outcome
    }

    async fn handle_envelope(
        &self,
        delivery: Delivery,
        envelope: Envelope,
        started: Instant,
        started_us: u64,
        stop: &CancellationToken,
    ) -> Outcome {
        let kind = envelope.task.kind();
        if delivery.redelivered || delivery.delivery_count > 0 {
            self.metrics.redeliveries.with_label_values(&[kind]).inc();
        }
        let queue = match envelope.task {
            Task::Execute(_) => Queue::Executions,
            _ => Queue::Tasks,
        };
        // Taken just before a pause, or while something it needs went down: wait for it here.
        if let Err(missing) = self
            .gate
            .wait_up(&self.needs(queue), self.options.outage_wait)
            .await
        {
            let outcome = self.hand_back(delivery, kind, &missing).await;
            return self.finish(kind, outcome, started);
        }
        let queue_us = match envelope.published_at_us {
            0 => (started_us / 1000).saturating_sub(envelope.submitted_at_ms) * 1000,
            published => started_us.saturating_sub(published),
        };
        self.metrics
            .queue_wait_seconds
            .with_label_values(&[kind])
            .observe(queue_us as f64 / 1e6);
        // Its model calls and pooled sandbox runs wait in its tenant's turn, by weight.
        let lane = model::Lane {
            weight: envelope.tenant.as_ref().map_or(1, |t| {
                self.weights
                    .read()
                    .expect("poisoned")
                    .get(t)
                    .copied()
                    .unwrap_or(1)
            }),
            tenant: envelope.tenant.clone(),
        };
        let step = match envelope.task {
            Task::Execute(request) => {
                let outcome = self
                    .execute_task(
                        envelope.task_id,
                        envelope.tenant.as_deref(),
                        &lane,
                        &request,
                        delivery,
                    )
                    .await;
                return self.finish(kind, outcome, started);
            }
            Task::Plan(task) => Step::Plan(task),
            Task::Implement(task) => Step::Implement(task),
            Task::Integrate(task) => Step::Integrate(task),
            Task::Agent(task) => {
                let outcome = self.agent_task(&task, lane, delivery, stop).await;
                return self.finish(kind, outcome, started);
            }
        };
        let ctx = pipeline::TaskCtx::new(step.job_id(), lane, stop.clone());
        let outcome = self.pipeline_task(&ctx, &step, delivery).await;
        let (sandbox_us, model_us) = (ctx.sandbox_us(), ctx.call.exchange_us());
        // One line per pipeline task: what `bench/tasks` reads the per-task overhead from
        // (microseconds: an idle task's whole overhead is a few milliseconds).
        tracing::info!(
            kind,
            job = %step.job_id(),
            function = step.function().unwrap_or("-"),
            queue_us,
            run_us = started.elapsed().as_micros() as u64,
            sandbox_us,
            model_us,
            outcome = outcome.as_str(),
            "task finished"
        );
        self.finish(kind, outcome, started)
    }

    fn finish(&self, kind: &str, outcome: Outcome, started: Instant) -> Outcome {
        self.metrics.in_flight.dec();
        self.metrics
            .tasks
            .with_label_values(&[kind, outcome.as_str()])
            .inc();
        self.metrics
            .task_seconds
            .with_label_values(&[kind])
            .observe(started.elapsed().as_secs_f64());
        outcome
    }

    async fn pipeline_task(
        &self,
        ctx: &pipeline::TaskCtx,
        step: &Step,
        delivery: Delivery,
    ) -> Outcome {
        let kind = step.kind();
        let Some(pipeline) = &self.pipeline else {
            tracing::warn!(kind, "this worker runs no pipeline; dead-lettering");
            let _ = delivery.dead_letter().await;
            return Outcome::Malformed;
        };
        let job = step.job_id();
        let needs = self.needs(Queue::Tasks);
        let mut own_failures = 0;
        loop {
            // One message per step: the reliability tests wait for "implement task started".
            match step {
                Step::Plan(_) => tracing::info!(%job, "plan task started"),
                Step::Implement(task) => {
                    tracing::info!(%job, function = %task.function, "implement task started");
                }
                Step::Integrate(_) => tracing::info!(%job, "integrate task started"),
            }
            // An outage, over: the step runs again (its finished parts are in Redis and are
            // not redone).
            let wait = |dependency| self.outage_wait(pipeline, dependency);
            let result = self
                .gate
                .through(&needs, wait, || pipeline.run(ctx, step))
                .await;
            let error = match result {
                Ok(()) => return self.settle(delivery, Outcome::Completed).await,
                Err(gate::Failed::Down { error, missing }) => {
                    // Waited long enough for the model: run again, and the step fails its
                    // function (or plan) with the model's last error.
                    if missing.iter().any(|(d, _)| *d == Dependency::Model)
                        && pipeline.model_given_up().is_some()
                    {
                        continue;
                    }
                    tracing::info!(kind, %job, %error, "pipeline task waited out its dependency");
                    return self.hand_back(delivery, kind, &missing).await;
                }
                Err(gate::Failed::Own(error)) => error,
            };
            let (dependency, reason) = match error {
                pipeline::Error::Stale(reason) => {
                    tracing::info!(kind, %job, %reason, "stale pipeline task: acking it");
                    return self.settle(delivery, Outcome::Stale).await;
                }
                // Plan and implement record their own failures and integrate ends its job
                // with them; one that gets here had nothing to record it in.
                pipeline::Error::Failed(reason) | pipeline::Error::Budget(reason) => {
                    tracing::warn!(kind, %job, %reason, "pipeline step failed for good");
                    return self.settle(delivery, Outcome::Failed).await;
                }
                pipeline::Error::Ended(status) => {
                    tracing::info!(kind, %job, %status, "job ended: dropping its task");
                    return self.settle(delivery, Outcome::Ended).await;
                }
                // Draining: what the step finished is stored; another worker goes on.
                pipeline::Error::Stopped => {
                    tracing::info!(kind, %job, "worker stopping: task handed back at a step's end");
                    if let Err(e) = delivery.hand_back().await {
                        tracing::warn!(error = %e, "cannot hand back; the broker will redeliver");
                    }
                    return Outcome::HandedBack;
                }
                pipeline::Error::Retry { dependency, reason } => (dependency, reason),
            };
            if dependency == Dependency::Model && pipeline.model_given_up().is_some() {
                continue;
            }
            // The dependency answers its probe. Once more in place, in case the blip just
            // ended; after that the failure is the task's own and counts.
            own_failures += 1;
            tokio::time::sleep(OWN_FAILURE_PAUSE).await;
            if own_failures < OWN_FAILURES_BEFORE_REQUEUE {
                continue;
            }
            tracing::warn!(kind, %job, dependency = dependency.as_str(), %reason, "pipeline task handed back");
            if let Err(e) = delivery.requeue().await {
                tracing::warn!(error = %e, "cannot requeue; the broker will redeliver");
            }
            return Outcome::Requeued;
        }
    }

    /// Runs an agent job's loop (or goes on with it) and settles its delivery.
    async fn agent_task(
        &self,
        task: &proto::agent::AgentTask,
        lane: model::Lane,
        delivery: Delivery,
        stop: &CancellationToken,
    ) -> Outcome {
        let job = task.job_id;
        let (Some(agent), Some(pipeline)) = (&self.agent, &self.pipeline) else {
            // A worker that holds no sessions cannot run it: back to the queue for another,
            // counted, so that a cluster where none can ends the job (its dead letter) rather
            // than passing it around for ever.
            tracing::warn!(%job, "this worker holds no sessions (worker.sessions.enabled): agent task requeued");
            if let Err(e) = delivery.requeue().await {
                tracing::warn!(error = %e, "cannot requeue; the broker will redeliver");
            }
            return Outcome::Requeued;
        };
        tracing::info!(%job, "agent task started");
        let needs = self.needs(Queue::Tasks);
        let wait = |dependency| self.outage_wait(pipeline, dependency);
        let result = self
            .gate
            .through(&needs, wait, || agent.run(task, &lane, stop))
            .await;
        match result {
            Ok(()) => self.settle(delivery, Outcome::Completed).await,
            Err(gate::Failed::Down { error, missing }) => {
                tracing::info!(%job, %error, "agent task waited out its dependency");
                self.hand_back(delivery, "agent", &missing).await
            }
            Err(gate::Failed::Own(agent::Error::Stopped)) => {
                tracing::info!(%job, "worker stopping: agent run handed back at a step's end");
                if let Err(e) = delivery.hand_back().await {
                    tracing::warn!(error = %e, "cannot hand back; the broker will redeliver");
                }
                Outcome::HandedBack
            }
            Err(gate::Failed::Own(agent::Error::Ended(status))) => {
                tracing::info!(%job, %status, "job ended: agent run stopped");
                self.settle(delivery, Outcome::Ended).await
            }
            Err(gate::Failed::Own(agent::Error::Stale(reason))) => {
                tracing::info!(%job, %reason, "stale agent task: acking it");
                self.settle(delivery, Outcome::Stale).await
            }
            Err(gate::Failed::Own(error @ agent::Error::Retry { .. })) => {
                // Its dependency answers: the failure is the run's; the broker's delivery
                // limit bounds how often it is tried.
                tracing::warn!(%job, %error, "agent task failed; back to its queue");
                if let Err(e) = delivery.requeue().await {
                    tracing::warn!(error = %e, "cannot requeue; the broker will redeliver");
                }
                Outcome::Requeued
            }
        }
    }

    /// How long a pipeline task waits out `dependency`: `outage_wait`, and for the model
    /// what is left of `model_wait` since it went down (or now).
    fn outage_wait(&self, pipeline: &Pipeline, dependency: Dependency) -> Duration {
        match dependency {
            Dependency::Model => self.options.outage_wait.min(
                pipeline.options.model_wait.saturating_sub(
                    self.gate
                        .down(Dependency::Model)
                        .map_or(Duration::ZERO, |down| down.since.elapsed()),
                ),
            ),
            Dependency::Redis | Dependency::Docker | Dependency::Broker => self.options.outage_wait,
        }
    }

    async fn settle(&self, delivery: Delivery, outcome: Outcome) -> Outcome {
        if let Err(e) = delivery.ack().await {
            // The result is stored; a redelivery will be recognised as a duplicate.
            tracing::warn!(error = %e, "ack failed");
        }
        outcome
    }
}

/// `redis: why; docker: why`, for logs.
pub(crate) fn describe(missing: &[(Dependency, Down)]) -> String {
    missing
        .iter()
        .map(|(d, down)| format!("{d}: {}", down.reason))
        .collect::<Vec<_>>()
        .join("; ")
}

/// How often a paused worker looks again at what its queues need (the static fallback may
/// take over with time).
const NEEDS_RECHECK: Duration = Duration::from_secs(1);
/// A pipeline task that failed while its dependency answers runs again after this pause, and
/// goes back to the queue (counted) after this many failures.
const OWN_FAILURE_PAUSE: Duration = Duration::from_millis(500);
const OWN_FAILURES_BEFORE_REQUEUE: u32 = 2;
/// A worker announces itself this often, and counts as gone this long after its last word.
/// Deliveries each lane may hold waiting beyond the queue's slots (see `add_lanes`).
const LANE_BUFFER: u16 = 8;
/// How often a worker looks for tenants it has no lane for yet (a tenant added to a
/// coordinator's configuration is served within this long).
pub const TENANTS_REFRESH: Duration = Duration::from_secs(5);
const PRESENCE_PERIOD: Duration = Duration::from_secs(5);
const PRESENCE_TTL: Duration = Duration::from_secs(15);

#[cfg(test)]
mod tests;

/// Marks `span` failed as OpenTelemetry's conventions have it: error status, and `error.type`
/// naming the failure's kind (a verdict, an outcome). The span declares both fields.
fn failed_span(span: &tracing::Span, kind: &str) {
    span.record("otel.status_code", "error");
    span.record("error.type", kind);
}
