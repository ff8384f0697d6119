//! A task's first model call waits for the model's concurrency limit (with shared limits, a
//! Redis round trip) while the task reads what it needs first, rather than after.

use std::future::Future;
use std::pin::Pin;

use futures::future::{BoxFuture, MaybeDone, maybe_done};
use model::{Lane, Model, Seat};

/// A [`Seat`] being taken alongside a task's first steps. Dropped before it is taken (the
/// task found nothing to generate: a cached function, a redelivery of finished work), the
/// wait stops and a place already granted is given back.
pub(crate) struct SeatAhead<'a>(Option<Pin<Box<MaybeDone<BoxFuture<'a, Seat>>>>>);

impl<'a> SeatAhead<'a> {
    /// Starts taking a seat of `model` in `lane` (none without a model: the task fails at its
    /// call).
    pub(crate) fn new(model: Option<&'a Model>, lane: &'a Lane) -> Self {
        Self(
            model.map(|model| {
                Box::pin(maybe_done(Box::pin(model.seat(lane)) as BoxFuture<'a, Seat>))
            }),
        )
    }

    /// Runs `work` while the seat is taken alongside.
    pub(crate) async fn alongside<T>(&mut self, work: impl Future<Output = T>) -> T {
        let Some(seat) = self.0.as_mut() else {
            return work.await;
        };
        tokio::pin!(work);
        loop {
            let pending = matches!(seat.as_ref().get_ref(), MaybeDone::Future(_));
            tokio::select! {
                biased;
                out = &mut work => return out,
                () = seat.as_mut(), if pending => {}
            }
        }
    }

    /// The seat, once taken.
    pub(crate) async fn take(self) -> Seat {
        match self.0 {
            Some(mut seat) => {
                seat.as_mut().await;
                seat.as_mut().take_output().unwrap_or_default()
            }
            None => Seat::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the pipeline relies on: the seat is taken while the work runs, not after it.
    #[tokio::test(start_paused = true)]
    async fn the_seat_is_taken_while_the_work_runs() {
        let taken = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = taken.clone();
        let mut ahead = SeatAhead(Some(Box::pin(maybe_done(Box::pin(async move {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            Seat::default()
        })
            as BoxFuture<'_, Seat>))));
        let seen = ahead
            .alongside(async {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                taken.load(std::sync::atomic::Ordering::SeqCst)
            })
            .await;
        assert!(seen, "the seat was not taken while the work ran");
        let started = tokio::time::Instant::now();
        ahead.take().await;
        assert_eq!(started.elapsed(), std::time::Duration::ZERO);
    }
}
