//! An in-process store for unit tests, with the same write-once and notify semantics.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use proto::{ExecutionMeta, ExecutionResult, TaskId};
use tokio::sync::Notify;

use crate::{Error, Store};

#[derive(Debug, Default)]
struct State {
    meta: HashMap<TaskId, ExecutionMeta>,
    results: HashMap<TaskId, ExecutionResult>,
    down: Option<String>,
}

/// In-memory store; clones share state.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
    notify: Arc<Notify>,
    /// Where a verdict's other effects go (usage, quotas, its batch's webhook), as Redis's
    /// one script has them; without it, a verdict has none.
    jobs: Option<crate::MemoryJobs>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// A verdict stored here also charges its tenant, gives its quota place back and brings
    /// its batch's webhook one item closer, in `jobs` (which keeps usage, quotas and webhooks).
    pub fn with_jobs(mut self, jobs: &crate::MemoryJobs) -> Self {
        self.jobs = Some(jobs.clone());
        self
    }

    /// Simulates an outage until `set_up`.
    pub fn set_down(&self, reason: &str) {
        self.state.lock().expect("poisoned").down = Some(reason.into());
    }

    pub fn set_up(&self) {
        self.state.lock().expect("poisoned").down = None;
    }

    fn check(&self) -> Result<std::sync::MutexGuard<'_, State>, Error> {
        let state = self.state.lock().expect("poisoned");
        match &state.down {
            Some(reason) => Err(Error::Unavailable(reason.clone())),
            None => Ok(state),
        }
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn create_execution(&self, id: TaskId, meta: &ExecutionMeta) -> Result<(), Error> {
        self.check()?.meta.insert(id, meta.clone());
        Ok(())
    }

    async fn execution_meta(&self, id: TaskId) -> Result<Option<ExecutionMeta>, Error> {
        Ok(self.check()?.meta.get(&id).cloned())
    }

    async fn execution_result(&self, id: TaskId) -> Result<Option<ExecutionResult>, Error> {
        Ok(self.check()?.results.get(&id).cloned())
    }

    async fn complete_execution(
        &self,
        id: TaskId,
        tenant: Option<&str>,
        result: &ExecutionResult,
    ) -> Result<bool, Error> {
        let stored = {
            let mut state = self.check()?;
            match state.results.entry(id) {
                std::collections::hash_map::Entry::Occupied(_) => false,
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(result.clone());
                    true
                }
            }
        };
        if let Some(jobs) = &self.jobs {
            jobs.execution_ended(id, tenant, result, stored);
        }
        self.notify.notify_waiters();
        Ok(stored)
    }

    async fn wait_execution(
        &self,
        id: TaskId,
        timeout: Duration,
    ) -> Result<Option<ExecutionResult>, Error> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(result) = self.execution_result(id).await? {
                return Ok(Some(result));
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Ok(None);
            }
        }
    }

    async fn health(&self) -> Result<(), String> {
        self.check().map(|_| ()).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::Status;

    fn result(status: Status) -> ExecutionResult {
        ExecutionResult::error(status, "test")
    }

    #[tokio::test]
    async fn first_result_wins() {
        let store = MemoryStore::new();
        let id = TaskId::new();
        assert!(
            store
                .complete_execution(id, None, &result(Status::Passed))
                .await
                .unwrap()
        );
        assert!(
            !store
                .complete_execution(id, None, &result(Status::Failed))
                .await
                .unwrap()
        );
        let stored = store.execution_result(id).await.unwrap().unwrap();
        assert_eq!(stored.status, Status::Passed);
    }

    #[tokio::test]
    async fn waiter_wakes_on_completion_and_times_out_otherwise() {
        let store = MemoryStore::new();
        let id = TaskId::new();
        let waiter = {
            let store = store.clone();
            tokio::spawn(async move { store.wait_execution(id, Duration::from_secs(5)).await })
        };
        tokio::task::yield_now().await;
        store
            .complete_execution(id, None, &result(Status::Timeout))
            .await
            .unwrap();
        let got = waiter.await.unwrap().unwrap().unwrap();
        assert_eq!(got.status, Status::Timeout);

        let missing = store
            .wait_execution(TaskId::new(), Duration::from_millis(20))
            .await
            .unwrap();
        assert!(missing.is_none());
    }

    #[tokio::test]
    async fn outage_is_a_retryable_error() {
        let store = MemoryStore::new();
        store.set_down("redis stopped");
        let err = store.execution_result(TaskId::new()).await.unwrap_err();
        assert!(err.is_retryable());
        assert!(store.health().await.is_err());
    }
}
