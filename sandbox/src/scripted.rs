//! A scripted sandbox for unit tests: it runs nothing and answers from a function of the
//! request. Named for what it is so it is never mistaken for real isolation.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use proto::harness::HarnessRun;
use proto::{ExecutionRequest, ExecutionResult};

use crate::{Error, HarnessOutcome, Sandbox};

type Script = dyn Fn(&ExecutionRequest) -> Result<ExecutionResult, Error> + Send + Sync;
type HarnessScript = dyn Fn(&HarnessRun) -> Result<HarnessOutcome, Error> + Send + Sync;

#[derive(Clone)]
pub struct ScriptedSandbox {
    script: Arc<Script>,
    harness: Arc<HarnessScript>,
    runs: Arc<AtomicUsize>,
}

impl std::fmt::Debug for ScriptedSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedSandbox")
            .field("runs", &self.runs())
            .finish()
    }
}

impl ScriptedSandbox {
    /// Answers executions from `script`; harness runs find no harness (see
    /// [`ScriptedSandbox::with_harness`]).
    pub fn new(
        script: impl Fn(&ExecutionRequest) -> Result<ExecutionResult, Error> + Send + Sync + 'static,
    ) -> Self {
        Self {
            script: Arc::new(script),
            harness: Arc::new(|run| Err(Error::NoHarness(run.request.mode()))),
            runs: Arc::default(),
        }
    }

    /// Answers harness runs from `script`.
    pub fn with_harness(
        mut self,
        script: impl Fn(&HarnessRun) -> Result<HarnessOutcome, Error> + Send + Sync + 'static,
    ) -> Self {
        self.harness = Arc::new(script);
        self
    }

    /// How many times `run` or `run_harness` was called.
    pub fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Sandbox for ScriptedSandbox {
    async fn run(&self, request: &ExecutionRequest) -> Result<ExecutionResult, Error> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        (self.script)(request)
    }

    async fn run_harness(&self, run: &HarnessRun) -> Result<HarnessOutcome, Error> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        (self.harness)(run)
    }

    async fn health(&self) -> Result<(), String> {
        Ok(())
    }
}
