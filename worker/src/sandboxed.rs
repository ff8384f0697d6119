//! The one sandbox-run loop, which executions and the pipeline's runs both go through: take
//! a turn at the language's pool, run, count the verdict, retry a blip in place, and wait out
//! a Docker outage ([`Gate::through`]). A session's cells run in the container it holds, not
//! here: there is no turn to take, and a lost container is a restore, not a wait.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backon::{ConstantBuilder, Retryable};
use model::Lane;
use model::turnstile::Turn;
use proto::{Language, Status};

use crate::gate::{Failed, Gate};
use crate::metrics::{SandboxRuns, Work};
use crate::sandbox_turns::SandboxTurns;

/// A sandbox run's verdict, for `codegen_sandbox_runs_total`.
pub(crate) trait Verdict {
    fn status(&self) -> Status;
}

impl Verdict for proto::ExecutionResult {
    fn status(&self) -> Status {
        self.status
    }
}

/// The worker's sandbox runs: its gate, its pools' turns and its run counter; cheap to clone.
#[derive(Clone)]
pub(crate) struct Sandboxed {
    gate: Gate,
    turns: Option<Arc<SandboxTurns>>,
    /// None outside a worker (nothing to count in).
    runs: Option<SandboxRuns>,
    /// A run that failed while Docker answers runs again this many times in place.
    retries: usize,
}

/// How one run goes ([`Sandboxed::run`]).
pub(crate) struct Run<'a> {
    pub work: Work,
    pub language: Language,
    pub lane: &'a Lane,
    /// Takes a turn at the language's pool (a run in a fresh container of its own does not).
    pub pooled: bool,
    /// The first try's turn, when the caller has taken it already.
    pub held: Option<Turn<'a>>,
    /// How long a Docker outage is waited out before the work goes back.
    pub wait: Duration,
    /// An error no later try does better on: it ends the run (`Ok(Err(_))`), counted as
    /// `sandbox_error`.
    pub settled: fn(&sandbox::Error) -> bool,
    /// Told when each try started, once it ends (the pipeline adds it to its task's time).
    pub timed: &'a (dyn Fn(Instant) + Sync),
}

impl Default for Sandboxed {
    /// Outside a worker: nothing ever down, no turns, nothing counted, no retries.
    fn default() -> Self {
        Self::new(Gate::default(), None, None, 0)
    }
}

impl Sandboxed {
    pub(crate) fn new(
        gate: Gate,
        turns: Option<Arc<SandboxTurns>>,
        runs: Option<SandboxRuns>,
        retries: usize,
    ) -> Self {
        Self {
            gate,
            turns,
            runs,
            retries,
        }
    }

    pub(crate) fn gate(&self) -> &Gate {
        &self.gate
    }

    /// Counts a run given up on (`sandbox_error`) that no try counted.
    pub(crate) fn given_up(&self, work: Work, language: Language) {
        if let Some(runs) = &self.runs {
            runs.counted(work, language, Status::SandboxError);
        }
    }

    pub(crate) fn turns(&self) -> Option<&SandboxTurns> {
        self.turns.as_deref()
    }

    /// Runs `call` as `run` says. `Err`: the run's own failure, or Docker stayed down.
    pub(crate) async fn run<T, F, Fut>(
        &self,
        run: Run<'_>,
        call: F,
    ) -> Result<Result<T, sandbox::Error>, Failed<sandbox::Error>>
    where
        T: Verdict,
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, sandbox::Error>>,
    {
        let Run {
            work,
            language,
            lane,
            pooled,
            held,
            wait,
            settled,
            timed,
        } = run;
        let held = Mutex::new(held);
        let (held, call) = (&held, &call);
        let once = move || async move {
            // Timed from before the turn: a run's time includes waiting for a container.
            let started = Instant::now();
            let taken = held.lock().expect("poisoned").take();
            let turn = match (taken, self.turns.as_deref()) {
                (Some(turn), _) => Some(turn),
                (None, Some(turns)) if pooled => turns.enter_language(language, lane).await,
                (None, _) => None,
            };
            let outcome = call().await;
            drop(turn);
            timed(started);
            let status = match &outcome {
                Ok(value) => Some(value.status()),
                Err(e) if settled(e) => Some(Status::SandboxError),
                // Tried again, or given up on by the caller: only the try that ends counts.
                Err(_) => None,
            };
            if let Some(runs) = &self.runs {
                runs.ran(work, language, started, status);
            }
            match outcome {
                Ok(value) => Ok(Ok(value)),
                Err(e) if settled(&e) => Ok(Err(e)),
                Err(e) => Err(e),
            }
        };
        let in_place = move || {
            once.retry(
                ConstantBuilder::default()
                    .with_delay(RETRY_PAUSE)
                    .with_max_times(self.retries),
            )
            .when(sandbox::Error::is_retryable)
            .notify(|e, after| {
                tracing::warn!(error = %e, retry_in = ?after, "sandbox failed; retrying");
            })
        };
        self.gate.through(&[], |_| wait, in_place).await
    }
}

/// Between two tries of a run that failed while Docker answers.
const RETRY_PAUSE: Duration = Duration::from_millis(200);
