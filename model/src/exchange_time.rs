//! The wall time a task spends in the model's HTTP exchanges (request sent to answer
//! decoded), for the worker's per-task timing line: `bench/tasks` counts it beside the
//! sandbox's, so that with a FAKE model that answers at once what is left of a task's
//! handling can be told from the model server's own share of it.

use std::cell::Cell;
use std::time::Duration;

tokio::task_local! {
    static EXCHANGE_US: Cell<u64>;
}

/// Runs `future`, answering with its output and the microseconds its model exchanges took
/// (those made on its own task: a spawned task's are not counted).
pub async fn timed<F: Future>(future: F) -> (F::Output, u64) {
    EXCHANGE_US
        .scope(Cell::new(0), async {
            let output = future.await;
            (output, EXCHANGE_US.with(Cell::get))
        })
        .await
}

/// Adds one exchange's wall time to the current task's, if it is timed.
pub(crate) fn add(elapsed: Duration) {
    let _ = EXCHANGE_US.try_with(|us| {
        us.set(us.get() + u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn exchanges_add_up_within_the_timed_task_only() {
        add(Duration::from_micros(5)); // not timed: nowhere to go, no panic
        let ((), us) = timed(async {
            add(Duration::from_micros(300));
            add(Duration::from_micros(200));
            // A spawned task is not this task's time.
            tokio::spawn(async { add(Duration::from_micros(1000)) })
                .await
                .unwrap();
        })
        .await;
        assert_eq!(us, 500);
    }
}
