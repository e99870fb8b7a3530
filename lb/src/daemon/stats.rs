//! `lb stats`: the data plane's counters sampled every second, and the rates over the
//! last [`RATE_WINDOW`] of samples (since start while the daemon is younger), so light
//! traffic does not read 0.0/s between two ticks.

use std::{
    collections::{HashMap, VecDeque},
    time::{Duration, Instant},
};

use lb_common::stats::{BackendStats, GlobalStats, Reason, VipStats};

use super::connections::Latest;
use crate::{
    control::{BackendCounters, Counter, GiveUpCount, Stats, VipCounters},
    controller::Controller,
};
use lb_dataplane::{Dataplane, DataplaneError};

/// Counters at one instant.
#[derive(Clone)]
pub(super) struct Sample {
    at: Instant,
    global: GlobalStats,
    /// By VIP id.
    vips: HashMap<u32, VipStats>,
    /// By backend id (a report looks up every backend: 50,000 at 500 VIPs of 100).
    backends: HashMap<u32, BackendStats>,
}

impl Sample {
    /// Reads every counter of the VIPs and backends `controller` applied.
    pub(super) fn take<D: Dataplane>(controller: &Controller<D>) -> Result<Self, DataplaneError> {
        let dp = controller.dataplane();
        let vip_ids: Vec<u32> = controller.vips().values().map(|a| a.id).collect();
        let backend_ids: Vec<u32> = controller
            .vips()
            .values()
            .flat_map(|a| a.backend_ids.values().copied())
            .collect();
        let vips = vip_ids.iter().copied().zip(dp.vip_stats_of(&vip_ids)?);
        let backends = backend_ids
            .iter()
            .copied()
            .zip(dp.backend_stats_of(&backend_ids)?);
        Ok(Self {
            at: Instant::now(),
            global: dp.global_stats()?,
            vips: vips.collect(),
            backends: backends.collect(),
        })
    }

    fn vip(&self, id: u32) -> Option<VipStats> {
        self.vips.get(&id).copied()
    }

    fn backend(&self, id: u32) -> Option<BackendStats> {
        self.backends.get(&id).copied()
    }
}

/// How far back the rates of `lb stats` look.
pub const RATE_WINDOW: Duration = Duration::from_secs(10);

/// The samples of the last [`RATE_WINDOW`]: the newest one at least that old, and
/// every one since.
#[derive(Default)]
pub(super) struct Window {
    samples: VecDeque<Sample>,
}

impl Window {
    /// Adds `sample` (the newest) and forgets those no rate needs any more.
    pub(super) fn push(&mut self, sample: Sample) {
        let at = sample.at;
        self.samples.push_back(sample);
        while self
            .samples
            .get(1)
            .is_some_and(|s| at.duration_since(s.at) >= RATE_WINDOW)
        {
            self.samples.pop_front();
        }
    }

    /// The sample rates are taken since.
    pub(super) fn oldest(&self) -> Option<&Sample> {
        self.samples.front()
    }

    /// The newest sample.
    pub(super) fn newest(&self) -> Option<&Sample> {
        self.samples.back()
    }
}

/// The per-VIP counters of `lb stats`, by name: today's, then the fast path's
/// give-ups ([`lb_common::fastpath::Note::counter`]).
fn vip_fields(v: &VipStats) -> Vec<(&'static str, u64)> {
    let base = [
        ("packets", v.packets),
        ("bytes", v.bytes),
        ("new_flows", v.new_flows),
        ("ct_hits", v.ct_hits),
        ("ct_misses_non_syn", v.ct_misses_non_syn),
        ("ct_stale_repicked", v.ct_stale_repicked),
        ("ct_udp_expired", v.ct_udp_expired),
        ("drops", v.drops),
        ("ct_syn_only_evicted", v.ct_syn_only_evicted),
        ("clean_slot_hits", v.clean_slot_hits),
        ("sc_candidates", v.sc_candidates),
        ("sc_given_up", v.sc_given_up),
    ];
    base.into_iter()
        .chain(v.give_ups().map(|(note, n)| (note.counter(), n)))
        .collect()
}

/// The give-ups of VIP `id` in `sample` that are not zero, for `lb status`.
pub(super) fn give_ups(sample: &Sample, id: u32) -> Vec<GiveUpCount> {
    let Some(v) = sample.vip(id) else {
        return Vec::new();
    };
    v.give_ups()
        .filter(|(_, n)| *n > 0)
        .map(|(note, value)| GiveUpCount {
            counter: note.counter().to_owned(),
            residual: note.residual().unwrap_or_default().to_owned(),
            value,
        })
        .collect()
}

/// `lb stats` of `controller` at `now`, with rates since `prev` (zero without one):
/// the oldest sample of the [`Window`].
pub(super) fn report<D: Dataplane>(
    controller: &Controller<D>,
    now: &Sample,
    prev: Option<&Sample>,
    connections: &Latest,
) -> Stats {
    let secs = prev.map_or(0.0, |p| now.at.duration_since(p.at).as_secs_f64());
    let counter = |name: &str, value: u64, old: Option<u64>| Counter {
        name: name.to_owned(),
        value,
        rate: match old {
            #[expect(clippy::cast_precision_loss, reason = "a rate for display")]
            Some(old) if secs > 0.0 => value.saturating_sub(old) as f64 / secs,
            _ => 0.0,
        },
    };
    let reasons = Reason::ALL
        .iter()
        .filter(|r| now.global.get(**r) > 0)
        .map(|r| counter(r.name(), now.global.get(*r), prev.map(|p| p.global.get(*r))))
        .collect();
    let vips = controller
        .vips()
        .iter()
        .map(|(vip, applied)| {
            let cur = vip_fields(&now.vip(applied.id).unwrap_or_default());
            let old = prev.and_then(|p| p.vip(applied.id)).map(|v| vip_fields(&v));
            let counters = cur
                .iter()
                .enumerate()
                .map(|(i, (name, value))| counter(name, *value, old.as_ref().map(|f| f[i].1)))
                .collect();
            let backends = applied
                .backend_ids
                .iter()
                .map(|(key, &id)| {
                    let cur = now.backend(id).unwrap_or_default();
                    let old = prev.and_then(|p| p.backend(id));
                    BackendCounters {
                        backend: key.to_string(),
                        packets: counter("packets", cur.packets, old.map(|o| o.packets)),
                        bytes: counter("bytes", cur.bytes, old.map(|o| o.bytes)),
                        new_flows: Some(counter(
                            "new_flows",
                            cur.new_flows,
                            old.map(|o| o.new_flows),
                        )),
                        connections: connections.of(id),
                    }
                })
                .collect();
            VipCounters {
                vip: vip.to_string(),
                counters,
                backends,
            }
        })
        .collect();
    Stats {
        interval_secs: secs,
        reasons,
        vips,
        conntrack: connections.conntrack(),
    }
}
