//! Weighted fair choice between tenants' lanes of a queue.
//!
//! Each tenant's work waits in a lane (a queue) of its own; the worker consumes every lane
//! with the same prefetch and, whenever a slot frees, starts the next delivery of the lane
//! whose turn it is by stride scheduling (the `stride` crate): each start moves the lane's
//! pass on by the inverse of its weight, and the lane with the lowest pass among those with a
//! delivery waiting goes next. Two saturating tenants with weights 3 and 1 get their tasks started 3:1; a tenant
//! whose lane was empty comes back at the current pass, so a single job behind another
//! tenant's batch starts at the next free slot, and idle time earns no credit for later.
//!
//! A next free slot can be a long way off when the slots are full of another tenant's calls
//! to a slow model: the worker also starts tasks beyond its slots, a few ([`SPARE`]), but only
//! of lanes with fewer than that many running ([`Fair::only_light`]).

use std::pin::Pin;
use std::task::{Context, Poll};

use broker::Delivery;
use futures::Stream;
use futures::stream::BoxStream;
use stride::Stride;

/// Tasks a worker may start beyond its slots, each of a lane with fewer than this many
/// running: a tenant's single job (a plan, then its functions, spread over the workers)
/// starts at once behind another tenant's batch.
pub const SPARE: usize = 4;

struct Lane {
    tenant: Option<String>,
    deliveries: BoxStream<'static, Delivery>,
    /// The delivery this lane would start next (taken from `deliveries`, not yet started).
    head: Option<Delivery>,
    ended: bool,
    /// Deliveries handed out and not yet [`Fair::finished`].
    running: usize,
}

/// The deliveries of several lanes, in weighted fair order; ends once every lane ended.
#[derive(Default)]
pub struct Fair {
    lanes: Vec<Lane>,
    /// Whose turn it is, by lane index.
    order: Stride<usize>,
    /// Only lanes with fewer than this many running get a start (see [`Fair::only_light`]).
    light_below: Option<usize>,
}

impl std::fmt::Debug for Fair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lanes: Vec<_> = self
            .lanes
            .iter()
            .enumerate()
            .map(|(i, l)| (&l.tenant, self.order.pass(&i), l.head.is_some(), l.running))
            .collect();
        f.debug_struct("Fair").field("lanes", &lanes).finish()
    }
}

impl Fair {
    /// Adds `tenant`'s lane with `weight`.
    pub fn add(
        &mut self,
        tenant: Option<String>,
        weight: u32,
        deliveries: BoxStream<'static, Delivery>,
    ) {
        self.order.set_weight(&self.lanes.len(), weight);
        self.lanes.push(Lane {
            tenant,
            deliveries,
            head: None,
            ended: false,
            running: 0,
        });
    }

    /// From now on, starts only lanes with fewer than `below` running (`None`: every lane).
    pub fn only_light(&mut self, below: Option<usize>) {
        self.light_below = below;
    }

    /// A delivery of `tenant`'s lane handed out earlier is done.
    pub fn finished(&mut self, tenant: Option<&str>) {
        if let Some(lane) = self
            .lanes
            .iter_mut()
            .find(|l| l.tenant.as_deref() == tenant)
        {
            lane.running = lane.running.saturating_sub(1);
        }
    }

    pub fn has(&self, tenant: Option<&str>) -> bool {
        self.lanes.iter().any(|l| l.tenant.as_deref() == tenant)
    }

    /// Changes the weight of `tenant`'s lane (from its next start on).
    pub fn set_weight(&mut self, tenant: Option<&str>, weight: u32) {
        for (i, lane) in self.lanes.iter().enumerate() {
            if lane.tenant.as_deref() == tenant {
                self.order.set_weight(&i, weight);
            }
        }
    }
}

/// A delivery and the tenant of its lane (to tell [`Fair::finished`] when it is done).
pub type Start = (Option<String>, Delivery);

impl Stream for Fair {
    type Item = Start;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Start>> {
        let this = self.get_mut();
        for (i, lane) in this.lanes.iter_mut().enumerate() {
            if lane.head.is_some() || lane.ended {
                continue;
            }
            match lane.deliveries.as_mut().poll_next(cx) {
                Poll::Ready(Some(delivery)) => {
                    lane.head = Some(delivery);
                    // Back from idle: no credit for the time it had nothing waiting.
                    this.order.wake(&i);
                }
                Poll::Ready(None) => lane.ended = true,
                Poll::Pending => {}
            }
        }
        let light_below = this.light_below;
        let ready: Vec<usize> = (0..this.lanes.len())
            .filter(|&i| {
                let l = &this.lanes[i];
                l.head.is_some() && light_below.is_none_or(|n| l.running < n)
            })
            .collect();
        if let Some(&i) = this.order.next(&ready) {
            let lane = &mut this.lanes[i];
            lane.running += 1;
            return Poll::Ready(lane.head.take().map(|d| (lane.tenant.clone(), d)));
        }
        if !this.lanes.is_empty() && this.lanes.iter().all(|l| l.ended) {
            return Poll::Ready(None);
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use broker::{Broker, MemoryBroker, Outgoing, Queue};
    use futures::StreamExt;
    use tokio_util::sync::CancellationToken;

    async fn fill(broker: &MemoryBroker, tenant: &str, n: usize) {
        for i in 0..n {
            broker
                .publish(Outgoing {
                    message_id: format!("{tenant}-{i}"),
                    body: tenant.as_bytes().to_vec(),
                    lane: Some(tenant.into()),
                    headers: Default::default(),
                })
                .await
                .unwrap();
        }
    }

    fn lane(
        broker: &MemoryBroker,
        tenant: &str,
        cancel: &CancellationToken,
    ) -> BoxStream<'static, Delivery> {
        broker.consume_lane(Queue::Tasks, Some(tenant.into()), 8, cancel.clone())
    }

    async fn take(fair: &mut Fair, n: usize) -> Vec<String> {
        let mut order = Vec::new();
        for _ in 0..n {
            let (tenant, d) = fair.next().await.unwrap();
            order.push(String::from_utf8(d.body.clone()).unwrap());
            d.ack().await.unwrap();
            fair.finished(tenant.as_deref());
        }
        order
    }

    #[tokio::test]
    async fn saturating_lanes_get_starts_by_weight() {
        let broker = MemoryBroker::new(5);
        fill(&broker, "a", 400).await;
        fill(&broker, "b", 400).await;
        let cancel = CancellationToken::new();
        let mut fair = Fair::default();
        fair.add(Some("a".into()), 3, lane(&broker, "a", &cancel));
        fair.add(Some("b".into()), 1, lane(&broker, "b", &cancel));
        let order = take(&mut fair, 400).await;
        let a = order.iter().filter(|t| *t == "a").count();
        assert_eq!((a, 400 - a), (300, 100));
        // Interleaved, not in runs: every window of 4 starts holds b once.
        for window in order.chunks(4) {
            assert_eq!(window.iter().filter(|t| *t == "b").count(), 1, "{order:?}");
        }
    }

    #[tokio::test]
    async fn a_lane_back_from_idle_goes_next_without_banked_credit() {
        let broker = MemoryBroker::new(5);
        fill(&broker, "bulk", 300).await;
        let cancel = CancellationToken::new();
        let mut fair = Fair::default();
        fair.add(Some("bulk".into()), 1, lane(&broker, "bulk", &cancel));
        fair.add(Some("solo".into()), 1, lane(&broker, "solo", &cancel));
        assert!(take(&mut fair, 200).await.iter().all(|t| t == "bulk"));
        fill(&broker, "solo", 3).await;
        // solo's first task starts at the next free slot; after that they alternate (solo
        // did not bank 200 starts of credit while it had nothing queued).
        let order = take(&mut fair, 6).await;
        assert_eq!(order, ["solo", "bulk", "solo", "bulk", "solo", "bulk"]);
    }

    #[tokio::test]
    async fn ends_once_every_lane_ended_and_hands_out_what_was_left() {
        let broker = MemoryBroker::new(5);
        fill(&broker, "a", 2).await;
        let cancel = CancellationToken::new();
        let mut fair = Fair::default();
        fair.add(Some("a".into()), 1, lane(&broker, "a", &cancel));
        fair.add(None, 1, broker.consume(Queue::Tasks, 8, cancel.clone()));
        assert!(fair.has(Some("a")) && fair.has(None) && !fair.has(Some("b")));
        take(&mut fair, 1).await;
        cancel.cancel();
        let mut rest = 0;
        while let Some((_, d)) = fair.next().await {
            d.ack().await.unwrap();
            rest += 1;
        }
        assert!(rest <= 1);
    }

    #[tokio::test]
    async fn past_the_slots_only_lanes_with_few_running_start() {
        let broker = MemoryBroker::new(5);
        fill(&broker, "bulk", 20).await;
        let cancel = CancellationToken::new();
        let mut fair = Fair::default();
        fair.add(Some("bulk".into()), 1, lane(&broker, "bulk", &cancel));
        fair.add(Some("solo".into()), 1, lane(&broker, "solo", &cancel));
        // bulk fills the slots (kept running), then the worker is at its limit.
        for _ in 0..6 {
            assert_eq!(fair.next().await.unwrap().0.as_deref(), Some("bulk"));
        }
        fair.only_light(Some(2));
        let wait = std::time::Duration::from_millis(50);
        assert!(
            tokio::time::timeout(wait, fair.next()).await.is_err(),
            "bulk went over"
        );
        fill(&broker, "solo", 3).await;
        for _ in 0..2 {
            assert_eq!(fair.next().await.unwrap().0.as_deref(), Some("solo"));
        }
        assert!(
            tokio::time::timeout(wait, fair.next()).await.is_err(),
            "solo went over"
        );
        // One of solo's ends: its third starts; bulk still waits for a slot.
        fair.finished(Some("solo"));
        assert_eq!(fair.next().await.unwrap().0.as_deref(), Some("solo"));
        fair.only_light(None);
        assert_eq!(fair.next().await.unwrap().0.as_deref(), Some("bulk"));
    }
}
