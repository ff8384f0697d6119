//! Which of the worker's dependencies are reachable, so that an outage costs time and never a
//! task: while Redis, Docker, the broker or the model is down, the worker takes no work that
//! needs it (its consumers pause), tasks it holds wait for it in place, and everything resumes
//! by itself once a probe finds the dependency back.
//!
//! A dependency is marked down two ways: the [`GateService`] probes Redis, Docker and the
//! broker every `watch_interval` (so a worker pauses before it takes work it cannot do), and a
//! task that failed on a dependency asks [`Gate::confirm_down`], which probes it at once. The
//! model is probed only after a call failed (a probe is a request to the user's server). A down
//! dependency is probed every `probe_interval` until it answers.
//!
//! `confirm_down` is also how a failure is attributed: when the dependency answers the probe,
//! the failure was the task's own (a request the model keeps failing, say) and counts towards
//! the delivery limit; when it does not, the task waits and nothing is counted.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What a failure on a dependency means ([`Gate::outage`]).
#[derive(Debug)]
enum Outage {
    /// The dependency answers: the failure is the operation's own.
    Own,
    /// It was down and is back: run the operation again.
    Back,
    /// Still down after the wait: what is down.
    Still(Vec<(Dependency, Down)>),
}

/// Which dependency a failure may be an outage of ([`Gate::through`]).
pub trait Blame: std::fmt::Display {
    /// The dependency to probe, `None` when the failure is the operation's own whatever
    /// answers.
    fn blamed(&self) -> Option<Dependency>;
    /// Whether the failure can be an outage at all (a refused request is not).
    fn retryable(&self) -> bool;
}

impl Blame for sandbox::Error {
    fn blamed(&self) -> Option<Dependency> {
        Some(Dependency::Docker)
    }
    fn retryable(&self) -> bool {
        self.is_retryable()
    }
}

impl Blame for store::Error {
    fn blamed(&self) -> Option<Dependency> {
        Some(Dependency::Redis)
    }
    fn retryable(&self) -> bool {
        self.is_retryable()
    }
}

/// How an operation through the gate failed ([`Gate::through`]).
#[derive(Debug)]
pub enum Failed<E> {
    /// The operation's own failure: what it depends on answers.
    Own(E),
    /// A dependency stayed down past the wait: the work goes back (`missing`: what is down).
    Down {
        error: E,
        missing: Vec<(Dependency, Down)>,
    },
}

impl<E> Failed<E> {
    /// The failure itself, whichever it was.
    pub fn error(&self) -> &E {
        match self {
            Failed::Own(error) | Failed::Down { error, .. } => error,
        }
    }
}

/// Something the worker needs from outside its process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dependency {
    Redis,
    Docker,
    Broker,
    Model,
}

impl Dependency {
    pub fn as_str(self) -> &'static str {
        match self {
            Dependency::Redis => "redis",
            Dependency::Docker => "docker",
            Dependency::Broker => "broker",
            Dependency::Model => "model",
        }
    }

    /// Watched all the time (cheap, local): the model is probed only after a failed call.
    fn watched(self) -> bool {
        !matches!(self, Dependency::Model)
    }
}

impl std::fmt::Display for Dependency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A dependency that is down: since when, what its last probe said, and what first found it
/// down (a task's failure, e.g. the model's last error, or a probe).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Down {
    pub since: Instant,
    pub reason: String,
    pub cause: String,
}

/// A reachability check; `Err` says why not.
pub type Probe = Arc<dyn Fn() -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// How often dependencies are probed.
#[derive(Debug, Clone, Copy)]
pub struct Intervals {
    /// A down dependency, until it answers.
    pub probe: Duration,
    /// Redis, Docker and the broker while they are up.
    pub watch: Duration,
}

impl Default for Intervals {
    fn default() -> Self {
        Self {
            probe: Duration::from_secs(1),
            watch: Duration::from_secs(2),
        }
    }
}

/// The dependencies' state; cheap to clone.
#[derive(Clone)]
pub struct Gate {
    inner: Arc<Inner>,
}

struct Inner {
    probes: BTreeMap<Dependency, Probe>,
    down: watch::Sender<BTreeMap<Dependency, Down>>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("probes", &self.inner.probes.keys().collect::<Vec<_>>())
            .field("down", &*self.inner.down.borrow())
            .finish()
    }
}

/// Probes the dependencies until cancelled.
#[derive(Debug)]
pub struct GateService {
    gate: Gate,
    intervals: Intervals,
}

/// Builds a [`Gate`] from its probes.
#[derive(Default)]
pub struct GateBuilder {
    probes: BTreeMap<Dependency, Probe>,
}

impl std::fmt::Debug for GateBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GateBuilder")
            .field("probes", &self.probes.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// A probe without an answer by then has failed: a dependency cut off without an error (its
/// packets dropped) leaves its client waiting rather than failing.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

impl GateBuilder {
    /// Adds the check for `dependency`, bounded by [`PROBE_TIMEOUT`].
    pub fn probe<F, Fut>(self, dependency: Dependency, check: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        self.probe_within(dependency, PROBE_TIMEOUT, check)
    }

    /// Adds the check for `dependency`, bounded by `within`: for a check that decides more
    /// than whether something answers (the model's: an unanswered probe of a server that is
    /// answering calls is slow, not down) and says how long that takes.
    pub fn probe_within<F, Fut>(
        mut self,
        dependency: Dependency,
        within: Duration,
        check: F,
    ) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        self.probes.insert(
            dependency,
            Arc::new(move || {
                let answer = check();
                Box::pin(async move {
                    tokio::time::timeout(within, answer)
                        .await
                        .unwrap_or_else(|_| Err(format!("no answer within {within:?}")))
                })
            }),
        );
        self
    }

    pub fn build(self, intervals: Intervals) -> (Gate, GateService) {
        let (down, _) = watch::channel(BTreeMap::new());
        let gate = Gate {
            inner: Arc::new(Inner {
                probes: self.probes,
                down,
            }),
        };
        (gate.clone(), GateService { gate, intervals })
    }
}

impl Default for Gate {
    /// A gate without probes: nothing is ever down (for tests and fakes).
    fn default() -> Self {
        GateBuilder::default().build(Intervals::default()).0
    }
}

impl Gate {
    pub fn builder() -> GateBuilder {
        GateBuilder::default()
    }

    /// The dependency's state: `Some` while it is down.
    pub fn down(&self, dependency: Dependency) -> Option<Down> {
        self.inner.down.borrow().get(&dependency).cloned()
    }

    /// Those of `needs` that are down now.
    pub fn missing(&self, needs: &[Dependency]) -> Vec<(Dependency, Down)> {
        let down = self.inner.down.borrow();
        needs
            .iter()
            .filter_map(|d| down.get(d).map(|state| (*d, state.clone())))
            .collect()
    }

    /// Woken whenever a dependency goes down or comes back.
    pub fn subscribe(&self) -> watch::Receiver<BTreeMap<Dependency, Down>> {
        self.inner.down.subscribe()
    }

    /// A task failed on `dependency` (`reason`): probes it now. `true`: it is down (now marked
    /// so; the task should wait for it). `false`: it answers, so the failure was the task's
    /// own. A dependency without a probe is never blamed.
    pub async fn confirm_down(&self, dependency: Dependency, reason: &str) -> bool {
        if self.down(dependency).is_some() {
            return true;
        }
        let Some(probe) = self.inner.probes.get(&dependency) else {
            return false;
        };
        match probe().await {
            Ok(()) => {
                tracing::info!(dependency = dependency.as_str(), failure = %reason, "dependency answers its probe; the failure is the task's own");
                false
            }
            Err(probed) => {
                self.mark_down(dependency, format!("{reason}; probe: {probed}"));
                true
            }
        }
    }

    /// The one outage loop, which every operation on a dependency goes through: runs `op`
    /// until it succeeds; when it fails on a dependency ([`Blame`]) whose probe fails too, the
    /// dependency is down, and `op` runs again once neither it nor any of `also` is, waiting
    /// at most `wait(dependency)` ([`Failed::Down`] after that). A failure the dependency's
    /// probe answers is the operation's own ([`Failed::Own`]): retrying that is the caller's
    /// policy.
    pub async fn through<T, E, F, Fut>(
        &self,
        also: &[Dependency],
        wait: impl Fn(Dependency) -> Duration,
        mut op: F,
    ) -> Result<T, Failed<E>>
    where
        E: Blame,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        loop {
            let error = match op().await {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            let Some(dependency) = error.blamed() else {
                return Err(Failed::Own(error));
            };
            let reason = error.to_string();
            let retryable = error.retryable();
            match self
                .outage(dependency, &reason, retryable, also, wait(dependency))
                .await
            {
                Outage::Back => {}
                Outage::Own => return Err(Failed::Own(error)),
                Outage::Still(missing) => return Err(Failed::Down { error, missing }),
            }
        }
    }

    /// The outage policy of [`Gate::through`]: an operation failed on `dependency`
    /// (`reason`). A failure that cannot be an outage (`retryable` false), or one the
    /// dependency's probe answers, is the operation's own ([`Outage::Own`]). Otherwise the
    /// dependency is down: wait until none of it and `also` is, at most `wait`
    /// ([`Outage::Back`]: run the operation again; [`Outage::Still`]: hand the work back).
    async fn outage(
        &self,
        dependency: Dependency,
        reason: &str,
        retryable: bool,
        also: &[Dependency],
        wait: Duration,
    ) -> Outage {
        if !retryable || !self.confirm_down(dependency, reason).await {
            return Outage::Own;
        }
        tracing::warn!(
            dependency = dependency.as_str(),
            %reason,
            "dependency unreachable: the work waits for it"
        );
        let mut needs = also.to_vec();
        needs.push(dependency);
        match self.wait_up(&needs, wait).await {
            Ok(()) => Outage::Back,
            Err(missing) => Outage::Still(missing),
        }
    }

    /// Waits until none of `needs` is down, at most `timeout`; `Err` lists what is still down.
    pub async fn wait_up(
        &self,
        needs: &[Dependency],
        timeout: Duration,
    ) -> Result<(), Vec<(Dependency, Down)>> {
        let mut rx = self.subscribe();
        let up = rx.wait_for(|down| needs.iter().all(|d| !down.contains_key(d)));
        match tokio::time::timeout(timeout, up).await {
            Ok(_) => Ok(()),
            Err(_) => Err(self.missing(needs)),
        }
    }

    fn mark_down(&self, dependency: Dependency, reason: String) {
        let mut newly = false;
        self.inner.down.send_if_modified(|down| {
            if let Some(state) = down.get_mut(&dependency) {
                state.reason = reason.clone();
                return false;
            }
            newly = true;
            down.insert(
                dependency,
                Down {
                    since: Instant::now(),
                    reason: reason.clone(),
                    cause: reason.clone(),
                },
            );
            true
        });
        if newly {
            tracing::warn!(
                dependency = dependency.as_str(),
                %reason,
                "dependency unreachable: pausing the work that needs it"
            );
        }
    }

    fn mark_up(&self, dependency: Dependency) {
        let mut was = None;
        self.inner.down.send_if_modified(|down| {
            was = down.remove(&dependency);
            was.is_some()
        });
        if let Some(was) = was {
            tracing::info!(
                dependency = dependency.as_str(),
                down_ms = was.since.elapsed().as_millis() as u64,
                "dependency reachable again: resuming"
            );
        }
    }

    /// `/readyz` check for `dependency`: `Err` with the reason while it is down.
    pub fn health(&self, dependency: Dependency) -> Result<(), String> {
        match self.down(dependency) {
            Some(down) => Err(format!(
                "{dependency} unreachable for {:.0?}: {}",
                down.since.elapsed(),
                down.reason
            )),
            None => Ok(()),
        }
    }
}

impl GateService {
    /// Probes until `cancel` fires: down dependencies every `probe` interval, watched ones
    /// every `watch` interval.
    pub async fn run(self, cancel: CancellationToken) {
        let gate = self.gate;
        let mut last_watch = BTreeMap::new();
        loop {
            for (dependency, probe) in &gate.inner.probes {
                let is_down = gate.down(*dependency).is_some();
                let due = is_down
                    || (dependency.watched()
                        && last_watch
                            .get(dependency)
                            .is_none_or(|at: &Instant| at.elapsed() >= self.intervals.watch));
                if !due {
                    continue;
                }
                last_watch.insert(*dependency, Instant::now());
                match probe().await {
                    Ok(()) => gate.mark_up(*dependency),
                    Err(reason) => gate.mark_down(*dependency, reason),
                }
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(self.intervals.probe) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    fn switch() -> Arc<AtomicBool> {
        Arc::new(AtomicBool::new(true))
    }

    fn gate(redis: &Arc<AtomicBool>, model: &Arc<AtomicBool>) -> (Gate, GateService) {
        let (redis, model) = (redis.clone(), model.clone());
        Gate::builder()
            .probe(Dependency::Redis, move || {
                let up = redis.load(Ordering::SeqCst);
                async move { if up { Ok(()) } else { Err("refused".into()) } }
            })
            .probe(Dependency::Model, move || {
                let up = model.load(Ordering::SeqCst);
                async move { if up { Ok(()) } else { Err("refused".into()) } }
            })
            .build(Intervals {
                probe: Duration::from_millis(10),
                watch: Duration::from_millis(10),
            })
    }

    #[tokio::test]
    async fn a_failure_is_blamed_on_a_dependency_only_when_its_probe_fails() {
        let (redis, model) = (switch(), switch());
        let (gate, _service) = gate(&redis, &model);
        assert!(!gate.confirm_down(Dependency::Model, "HTTP 503").await);
        assert!(gate.down(Dependency::Model).is_none());
        model.store(false, Ordering::SeqCst);
        assert!(gate.confirm_down(Dependency::Model, "HTTP 503").await);
        let down = gate.down(Dependency::Model).unwrap();
        assert!(down.reason.contains("HTTP 503") && down.reason.contains("refused"));
        assert!(
            gate.health(Dependency::Model)
                .unwrap_err()
                .contains("model unreachable")
        );
        // Without a probe, nothing is blamed on it.
        assert!(!gate.confirm_down(Dependency::Docker, "gone").await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_that_never_answers_is_a_failed_one() {
        let (gate, _service) = GateBuilder::default()
            .probe(Dependency::Docker, std::future::pending)
            .build(Intervals::default());
        assert!(gate.confirm_down(Dependency::Docker, "run timed out").await);
        let down = gate.down(Dependency::Docker).unwrap();
        assert!(down.reason.contains("no answer within"), "{}", down.reason);
    }

    #[tokio::test(start_paused = true)]
    async fn a_check_given_longer_than_the_default_is_waited_for() {
        // The model's probe answers after its own 5 s HTTP probe went unanswered (a slow
        // server, not a down one): its verdict is what counts, not the gate's 5 s.
        let (gate, _service) = GateBuilder::default()
            .probe_within(Dependency::Model, model::PROBE_WITHIN, || async {
                tokio::time::sleep(PROBE_TIMEOUT + Duration::from_secs(1)).await;
                Ok(())
            })
            .build(Intervals::default());
        assert!(
            !gate
                .confirm_down(Dependency::Model, "deadline passed")
                .await
        );
        assert!(gate.down(Dependency::Model).is_none());
    }

    #[tokio::test]
    async fn the_service_notices_an_outage_and_the_end_of_it() {
        let (redis, model) = (switch(), switch());
        let (gate, service) = gate(&redis, &model);
        let cancel = CancellationToken::new();
        let running = tokio::spawn(service.run(cancel.clone()));
        redis.store(false, Ordering::SeqCst);
        let mut rx = gate.subscribe();
        tokio::time::timeout(
            Duration::from_secs(5),
            rx.wait_for(|d| d.contains_key(&Dependency::Redis)),
        )
        .await
        .unwrap()
        .unwrap();
        let error = gate
            .wait_up(&[Dependency::Redis], Duration::from_millis(50))
            .await
            .unwrap_err();
        assert_eq!(error[0].0, Dependency::Redis);
        // The model is not watched: a failing probe is not even asked while nobody blames it.
        model.store(false, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(gate.down(Dependency::Model).is_none());
        redis.store(true, Ordering::SeqCst);
        gate.wait_up(&[Dependency::Redis], Duration::from_secs(5))
            .await
            .unwrap();
        // Blamed and confirmed, the model is then probed until it answers.
        assert!(gate.confirm_down(Dependency::Model, "refused").await);
        model.store(true, Ordering::SeqCst);
        gate.wait_up(
            &[Dependency::Model, Dependency::Redis],
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        cancel.cancel();
        running.await.unwrap();
    }
}
