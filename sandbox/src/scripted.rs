//! A scripted sandbox for unit tests: it runs nothing and answers from a function of the
//! request. Named for what it is so it is never mistaken for real isolation.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use proto::{ExecutionRequest, ExecutionResult};

use crate::{Error, Sandbox};

type Script = dyn Fn(&ExecutionRequest) -> Result<ExecutionResult, Error> + Send + Sync;

#[derive(Clone)]
pub struct ScriptedSandbox {
    script: Arc<Script>,
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
    pub fn new(
        script: impl Fn(&ExecutionRequest) -> Result<ExecutionResult, Error> + Send + Sync + 'static,
    ) -> Self {
        Self {
            script: Arc::new(script),
            runs: Arc::default(),
        }
    }

    /// How many times `run` was called.
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

    async fn health(&self) -> Result<(), String> {
        Ok(())
    }
}
