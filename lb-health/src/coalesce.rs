//! Coalescing: the transitions of many backends that happen close together are
//! delivered as one [`Batch`], grouped by VIP, so that the controller changes each VIP's
//! table once, never once per backend (a rebuild storm when fifty backends fail
//! together would otherwise rebuild the table fifty times).
//!
//! The first transition opens a window (default [`DEFAULT_WINDOW`], 100 ms); everything
//! that arrives until it closes joins the batch; the batch is sent when it closes. A
//! window never stretches, so no transition waits longer than one window (plus the time
//! the consumer takes to accept the previous batch), and each VIP's table changes at
//! most once per window.

use std::{collections::BTreeMap, time::Duration};

use tokio::sync::mpsc;

use super::state::Transition;
use lb_maglev::BackendKey;

/// Default coalescing window.
pub const DEFAULT_WINDOW: Duration = Duration::from_millis(100);

/// One backend's transitions within a batch, oldest first (at least one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendChange {
    /// The backend.
    pub backend: BackendKey,
    /// Its transitions in the window.
    pub transitions: Vec<Transition>,
}

impl BackendChange {
    /// The backend's state after the batch.
    pub fn healthy(&self) -> bool {
        self.transitions.last().is_some_and(|t| t.healthy)
    }
}

/// The transitions of one window, grouped by VIP; every VIP appears once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch<V> {
    /// Per VIP, its changed backends in key order.
    pub vips: BTreeMap<V, Vec<BackendChange>>,
}

impl<V: Ord> Batch<V> {
    fn new() -> Self {
        Self {
            vips: BTreeMap::new(),
        }
    }

    fn push(&mut self, notice: Notice<V>) {
        let changes = self.vips.entry(notice.vip).or_default();
        match changes.binary_search_by_key(&notice.backend, |c| c.backend) {
            Ok(i) => changes[i].transitions.push(notice.transition),
            Err(i) => changes.insert(
                i,
                BackendChange {
                    backend: notice.backend,
                    transitions: vec![notice.transition],
                },
            ),
        }
    }

    /// Transitions in the batch, all VIPs together.
    pub fn transitions(&self) -> usize {
        self.vips
            .values()
            .flatten()
            .map(|c| c.transitions.len())
            .sum()
    }
}

/// One transition on its way to a batch.
#[derive(Clone, Debug)]
pub(super) struct Notice<V> {
    pub(super) vip: V,
    pub(super) backend: BackendKey,
    pub(super) transition: Transition,
}

/// Collects notices from `notices` into batches of `window` and sends them on `batches`,
/// until either channel closes.
pub(super) async fn run<V: Ord>(
    mut notices: mpsc::UnboundedReceiver<Notice<V>>,
    batches: mpsc::Sender<Batch<V>>,
    window: Duration,
) {
    while let Some(first) = notices.recv().await {
        let closes = tokio::time::Instant::now() + window;
        let mut batch = Batch::new();
        batch.push(first);
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(closes) => break,
                next = notices.recv() => match next {
                    Some(n) => batch.push(n),
                    None => break,
                },
            }
        }
        if batches.send(batch).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{
        net::{IpAddr, Ipv4Addr},
        time::Instant,
    };

    use super::*;
    use crate::state::Reason;

    fn notice(vip: u8, backend: u8, healthy: bool) -> Notice<u8> {
        Notice {
            vip,
            backend: BackendKey::new(IpAddr::V4(Ipv4Addr::new(198, 51, 100, backend)), None),
            transition: Transition {
                healthy,
                at: Instant::now(),
                reason: Reason::Recovered { consecutive: 1 },
                held_until: None,
            },
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_window_of_transitions_is_one_batch_per_vip() {
        let (tx, rx) = mpsc::unbounded_channel();
        let (out, mut batches) = mpsc::channel(4);
        tokio::spawn(run(rx, out, DEFAULT_WINDOW));
        // Fifty backends of VIP 1 and one of VIP 2 fail within about 60 ms (ten steps of
        // 5 ms; the timer rounds each up to the next millisecond at most).
        for b in 1..=50 {
            tx.send(notice(1, b, false)).unwrap();
            if b % 5 == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        tx.send(notice(2, 1, false)).unwrap();
        let batch = batches.recv().await.unwrap();
        assert_eq!(batch.vips.len(), 2);
        assert_eq!(batch.vips[&1].len(), 50);
        assert_eq!(batch.transitions(), 51);
        assert!(batch.vips[&1].iter().all(|c| !c.healthy()));
        // A later transition opens the next window.
        tokio::time::sleep(Duration::from_millis(500)).await;
        tx.send(notice(1, 7, true)).unwrap();
        let batch = batches.recv().await.unwrap();
        assert_eq!(batch.transitions(), 1);
        assert!(batch.vips[&1][0].healthy());
    }

    #[tokio::test(start_paused = true)]
    async fn a_flapping_backend_gives_at_most_one_batch_per_window() {
        let (tx, rx) = mpsc::unbounded_channel();
        let (out, mut batches) = mpsc::channel(64);
        tokio::spawn(run(rx, out, DEFAULT_WINDOW));
        // Twenty changes within one second, the last one to healthy.
        for i in 0..20u8 {
            tx.send(notice(1, 2, i % 2 == 1)).unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        drop(tx);
        let mut count = 0;
        let mut last = None;
        while let Some(batch) = batches.recv().await {
            count += 1;
            last = Some(batch.vips[&1][0].healthy());
        }
        assert!(count <= 10, "{count} batches in one second");
        assert_eq!(last, Some(true), "the final state is the last change's");
    }
}
