//! Whose sandbox run takes one of this worker's warm containers next: by tenant and weight,
//! not by arrival.
//!
//! With 64 tasks in flight and a pool of 2 containers per language, most of a busy worker's
//! tasks wait for a container; in arrival order, one tenant's batch would keep another
//! tenant's single job waiting behind its whole backlog here, after fair scheduling started
//! the job's task at once. So each language's pooled runs pass a [`Turnstile`] with the pool's
//! size as permits, in the task's lane (its tenant and weight, given by the caller): the same
//! stride scheduling as the lanes and the model's turn. Runs in a fresh container of their own
//! do not wait for the pool and do not pass it.

use std::collections::HashMap;

use model::Lane;
use model::turnstile::{Turn, Turnstile};
use proto::{ExecutionRequest, Language};

/// One turnstile per language; cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct SandboxTurns {
    turns: HashMap<Language, Turnstile>,
}

impl SandboxTurns {
    /// Turns for pools of `size(language)` warm containers (0: no pool, no turns).
    pub fn new(size: impl Fn(Language) -> usize) -> Option<Self> {
        let turns: HashMap<Language, Turnstile> = Language::ALL
            .iter()
            .filter(|language| size(**language) > 0)
            .map(|language| (*language, Turnstile::new(size(*language))))
            .collect();
        (!turns.is_empty()).then_some(Self { turns })
    }

    /// Waits for `request`'s turn at its language's pool; `None` when it takes none (a fresh
    /// container).
    pub async fn enter(&self, request: &ExecutionRequest, lane: &Lane) -> Option<Turn<'_>> {
        if request.fresh_container {
            return None;
        }
        self.enter_language(request.language, lane).await
    }

    /// Waits for a turn at `language`'s pool; `None` when it has none.
    pub async fn enter_language(&self, language: Language, lane: &Lane) -> Option<Turn<'_>> {
        Some(self.turns.get(&language)?.enter(lane).await)
    }
}
