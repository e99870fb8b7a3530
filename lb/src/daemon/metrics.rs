//! The Prometheus endpoint's content: a [`Snapshot`] of the daemon's state taken at each
//! scrape, and the [`Recorder`] of what happens between scrapes (table builds and
//! swaps, reloads), encoded with the prometheus-client crate as OpenMetrics text or as
//! Prometheus text 0.0.4 ([`encode`]). The HTTP side is `super::http`.
//!
//! Series (base units, `_total` for counters; labels `vip="203.0.113.10:80/tcp"`,
//! `backend="198.51.100.11"`); the book's metrics chapter (docs/src/guide/metrics.md) is the operator's list:
//! - per VIP: `lb_vip_packets_total`, `lb_vip_bytes_total`, `lb_vip_new_flows_total`,
//!   `lb_vip_drops_total`, `lb_vip_conntrack_events_total{event}`;
//! - per backend: `lb_backend_packets_total`, `lb_backend_bytes_total`,
//!   `lb_backend_new_flows_total`, `lb_backend_connections{state}` (`established`,
//!   `syn_only`, `closing`), `lb_backend_connections_idle`, `lb_backend_weight`,
//!   `lb_backend_slots`, `lb_backend_state{state}` (1 for the current state, 0 for the
//!   others), `lb_backend_state_transitions_total{to}` (every state, from 0); for a
//!   probed backend, from the health checks: `lb_backend_healthy`,
//!   `lb_backend_health_transitions_total{to}`, `lb_backend_health_probes_total`,
//!   `lb_backend_health_probe_failures_total`;
//! - per VIP with health checks: `lb_vip_policy_mode{mode}` (its multi-failure policy);
//! - per VIP with `[announce]` on: `lb_vip_announced` (1 while its address's route is
//!   in the announcement table, so BGP announces it from this instance);
//! - per VIP: `lb_vip_pending_rollout_slots` (a two-phase rollout's pending slots),
//!   `lb_vip_second_chance_owners_given_up_total` (slots that forgot an owner at a
//!   table change, rule SC5 of the second chance);
//! - global: `lb_verdicts_total{reason,action}`, `lb_conntrack_entries{family}`,
//!   `lb_conntrack_capacity`, `lb_syn_cache_slots_used`, `lb_syn_cache_slots`, `lb_syn_cache_parts`,
//!   `lb_exceptions_entries`, `lb_exceptions_capacity`,
//!   `lb_conntrack_walk_seconds`, `lb_slots_cleaned_total`,
//!   `lb_cleaning_pins_deleted_total`, `lb_cleaning_aborted_total`,
//!   `lb_cleaning_failures_total`, `lb_cleaning_walk_seconds`, `lb_vip_dirty_slots{vip}`
//!   (the fast path's cleaning, once a walk ran), `lb_table_info{vip,generation,fingerprint,size}`,
//!   `lb_table_build_duration_seconds` and `lb_table_swap_duration_seconds`
//!   (histograms), `lb_reloads_total{result}`, `lb_changes_total`, `lb_build_info`.
//!
//! A counter with a label is exported for every value of that label from the start, at
//! 0 until its first event, so `rate()` and `increase()` see the first event.
//!
//! A removed backend: its id stays bound to it (`controller::ids`) and the kernel
//! counters of that id are not reset, so its series stay exported with their last
//! values and `lb_backend_state{state="removed"} 1` for `metrics.removed_retention_secs`,
//! then disappear (Prometheus marks them stale). Re-added within or after that time, it
//! gets its id back and its counters continue where they were, so `rate()` and
//! `increase()` never see a reset.

use std::{borrow::Cow, collections::BTreeMap, fmt, time::Duration};

use lb_common::stats::{BackendStats, GlobalStats, Reason, VipStats};
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet},
    metrics::{
        MetricType,
        counter::Counter,
        family::Family,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

use super::service::Service;
use crate::{
    control::{BackendHealth, CleaningStatus, ConnectionCounts, ConntrackStatus, SlotStatus},
    controller::{ApplyReport, REMOVED, TableChange, UNHEALTHY, VipChange},
};
use lb_dataplane::{Dataplane, DataplaneError};

/// The states `lb_backend_state` always lists (the current one is added when it is
/// another).
const STATES: [&str; 5] = ["active", "drain", "down", UNHEALTHY, REMOVED];

/// The modes `lb_vip_policy_mode` lists (`crate::control::PolicyStatus::mode`).
const POLICY_MODES: [&str; 5] = [
    "normal",
    "panic",
    "all_down_open",
    "all_down_closed",
    "no_backends",
];

/// Label pairs of one sample.
type Labels = Vec<(&'static str, String)>;

/// How a reload ended (`lb_reloads_total{result}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReloadResult {
    /// Applied (possibly without any change).
    Applied,
    /// The file was invalid; nothing applied.
    Invalid,
    /// It changed a start-only setting, or applying it failed; nothing applied.
    Refused,
}

impl ReloadResult {
    /// Every result, each exported (at zero) from the start.
    const ALL: [ReloadResult; 3] = [
        ReloadResult::Applied,
        ReloadResult::Invalid,
        ReloadResult::Refused,
    ];

    fn label(self) -> &'static str {
        match self {
            ReloadResult::Applied => "applied",
            ReloadResult::Invalid => "invalid",
            ReloadResult::Refused => "refused",
        }
    }
}

/// What happens between scrapes: table build and swap durations, reloads.
#[derive(Clone, Debug)]
pub struct Recorder {
    builds: Histogram,
    swaps: Histogram,
    reloads: Family<Labels, Counter>,
}

impl Default for Recorder {
    fn default() -> Self {
        // 100 µs to 6.6 s in steps of 4: a table of 65,537 slots builds in about a
        // millisecond, one of 4 million in about a second.
        let buckets = || exponential_buckets(1e-4, 4.0, 9);
        let reloads: Family<Labels, Counter> = Family::default();
        for result in ReloadResult::ALL {
            drop(reloads.get_or_create(&reload_labels(result)));
        }
        Self {
            builds: Histogram::new(buckets()),
            swaps: Histogram::new(buckets()),
            reloads,
        }
    }
}

/// The labels of `lb_reloads_total` for `result`.
fn reload_labels(result: ReloadResult) -> Labels {
    vec![("result", result.label().to_owned())]
}

impl Recorder {
    /// Records the table builds and swaps of an applied change.
    pub fn observe(&self, report: &ApplyReport) {
        for change in &report.changes {
            if let VipChange::Table(TableChange { build_ms, .. }) = change {
                self.builds.observe(build_ms / 1e3);
            }
        }
        for ms in &report.swaps_ms {
            self.swaps.observe(ms / 1e3);
        }
    }

    /// Records how a reload ended.
    pub fn reload(&self, result: ReloadResult) {
        self.reloads.get_or_create(&reload_labels(result)).inc();
    }
}

/// A VIP at the scrape.
#[derive(Clone, Debug, PartialEq)]
pub struct VipSample {
    /// `ADDR:PORT/PROTO`.
    pub vip: String,
    /// Its counters.
    pub stats: VipStats,
    /// Its multi-failure policy's mode (`normal`, `panic`, ...), when it has one.
    pub policy_mode: Option<String>,
    /// Whether its address is announced for BGP (`None`: `[announce]` is off).
    pub announced: Option<bool>,
    /// Its table's generation, fingerprint and size.
    pub generation: u32,
    /// The fingerprint (hex).
    pub fingerprint: String,
    /// The size M.
    pub table_size: u32,
    /// Its slots by fast-path state, at the last cleaning walk.
    pub slot_states: Option<SlotStatus>,
    /// The slots a two-phase rollout's first phase marked pending, until a table is
    /// published; `None` without a rollout under way.
    pub pending_rollout: Option<u32>,
    /// Slots that forgot an owner at a table publish since the daemon started (rule SC5).
    pub owners_given_up: u64,
}

/// A backend at the scrape (configured, or removed within the retention).
#[derive(Clone, Debug, PartialEq)]
pub struct BackendSample {
    /// Its VIP.
    pub vip: String,
    /// Its address.
    pub backend: String,
    /// Its state (`removed` once removed).
    pub state: String,
    /// Weight and slots (none once removed).
    pub weight: Option<u32>,
    /// Slots of the table it owns.
    pub slots: Option<u32>,
    /// Its counters (frozen once removed).
    pub stats: BackendStats,
    /// Its connections by state, from the last walk.
    pub connections: Option<ConnectionCounts>,
    /// How often it entered each state.
    pub transitions: BTreeMap<String, u64>,
    /// Its health checks, when it is probed.
    pub health: Option<HealthSample>,
}

/// A probed backend's health at the scrape (the health checker's counters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthSample {
    /// Whether it counts as healthy.
    pub healthy: bool,
    /// Changes to unhealthy.
    pub went_down: u64,
    /// Changes to healthy.
    pub came_up: u64,
    /// Probes run.
    pub probes: u64,
    /// Probes failed.
    pub failed_probes: u64,
}

impl From<&BackendHealth> for HealthSample {
    fn from(h: &BackendHealth) -> Self {
        Self {
            healthy: h.healthy,
            went_down: h.went_down,
            came_up: h.came_up,
            probes: h.probes,
            failed_probes: h.failed_probes,
        }
    }
}

/// What a scrape takes from `lb status` for a configured backend.
#[derive(Clone, Copy)]
struct Configured {
    weight: u32,
    slots: u32,
    connections: Option<ConnectionCounts>,
    health: Option<HealthSample>,
}

/// Everything a scrape shows, read under the service's lock.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// Packets per verdict reason.
    pub global: GlobalStats,
    /// The VIPs.
    pub vips: Vec<VipSample>,
    /// The backends.
    pub backends: Vec<BackendSample>,
    /// Conntrack occupancy from the last walk.
    pub conntrack: Option<ConntrackStatus>,
    /// The fast path's cleaning walks.
    pub cleaning: Option<CleaningStatus>,
    /// Changes applied since start.
    pub changes: u64,
    /// Whether the pinned datapath is whole (the pin check).
    pub datapath: crate::control::DatapathHealth,
}

impl Snapshot {
    /// Reads `service`'s state and the data plane's counters; first forgets backends
    /// removed longer than `retention` ago.
    ///
    /// # Errors
    /// When a counter cannot be read.
    pub fn take<D: Dataplane>(
        service: &mut Service<D>,
        retention: Duration,
    ) -> Result<Self, DataplaneError> {
        let now = std::time::Instant::now();
        service
            .controller_mut()
            .history_mut()
            .forget_removed(now, retention);
        let status = service.status();
        let controller = service.controller();
        let dp = controller.dataplane();
        let vip_ids: Vec<u32> = status.vips.iter().map(|v| v.id).collect();
        let mut vips = Vec::new();
        for (v, stats) in status.vips.iter().zip(dp.vip_stats_of(&vip_ids)?) {
            vips.push(VipSample {
                vip: v.vip.clone(),
                stats,
                policy_mode: v.policy.as_ref().map(|p| p.mode.clone()),
                announced: status
                    .announce
                    .enabled
                    .then(|| v.announce.as_ref().is_some_and(|a| a.announced)),
                generation: v.generation,
                fingerprint: v.fingerprint.clone(),
                table_size: v.table_size,
                slot_states: v.slot_states,
                pending_rollout: v.pending_rollout,
                owners_given_up: v.owners_given_up,
            });
        }
        let configured: BTreeMap<(String, String), Configured> = status
            .vips
            .iter()
            .flat_map(|v| {
                v.backends.iter().map(|b| {
                    let now = Configured {
                        weight: b.weight,
                        slots: b.slots,
                        connections: b.connections,
                        health: b.health.as_ref().map(HealthSample::from),
                    };
                    ((v.vip.clone(), b.address.clone()), now)
                })
            })
            .collect();
        let shown: Vec<_> = controller
            .history()
            .records()
            .filter_map(|((vip, key), record)| {
                let pair = (vip.to_string(), key.to_string());
                let now_in = configured.get(&pair);
                (record.state == REMOVED || now_in.is_some()).then_some((pair, now_in, record))
            })
            .collect();
        let ids: Vec<u32> = shown.iter().map(|(_, _, record)| record.id).collect();
        let mut backends = Vec::new();
        for ((pair, now_in, record), stats) in shown.into_iter().zip(dp.backend_stats_of(&ids)?) {
            backends.push(BackendSample {
                stats,
                state: record.state.clone(),
                weight: now_in.map(|b| b.weight),
                slots: now_in.map(|b| b.slots),
                connections: now_in.and_then(|b| b.connections),
                transitions: record.transitions.iter().cloned().collect(),
                health: now_in.and_then(|b| b.health),
                vip: pair.0,
                backend: pair.1,
            });
        }
        Ok(Self {
            global: dp.global_stats()?,
            vips,
            backends,
            conntrack: service.connections().conntrack(),
            cleaning: service.cleanings().status(),
            changes: controller.changes(),
            datapath: status.datapath.clone(),
        })
    }
}

/// The `Content-Type` of OpenMetrics text 1.0.0.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Encodes `snapshot` and `recorder`: OpenMetrics text when `openmetrics`, else
/// Prometheus text 0.0.4. Returns the body and its `Content-Type`.
pub fn encode(
    snapshot: Snapshot,
    recorder: &Recorder,
    openmetrics: bool,
) -> (String, &'static str) {
    let mut registry = Registry::default();
    registry.register(
        "lb_table_build_duration_seconds",
        "Time to build a Maglev table",
        recorder.builds.clone(),
    );
    registry.register(
        "lb_table_swap_duration_seconds",
        "Time to write a table into the buffer no packet reads and switch it in",
        recorder.swaps.clone(),
    );
    registry.register(
        "lb_reloads",
        "Reloads of the configuration file, by result (applied, invalid, refused)",
        recorder.reloads.clone(),
    );
    registry.register_collector(Box::new(snapshot));
    let mut body = String::new();
    let encoded = if openmetrics {
        prometheus_client::encoding::text::encode(&mut body, &registry)
    } else {
        prometheus_client::encoding::prometheus_text::encode(&mut body, &registry)
    };
    if let Err(e) = encoded {
        body = format!("# encoding the metrics failed: {e}\n");
    }
    let content_type = if openmetrics {
        OPENMETRICS
    } else {
        prometheus_client::encoding::prometheus_text::CONTENT_TYPE
    };
    (body, content_type)
}

/// One metric family: `name` of type `ty` with one sample per row.
fn family<V>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    ty: MetricType,
    rows: impl IntoIterator<Item = (Labels, V)>,
    sample: impl Fn(&mut MetricEncoder<'_>, &V) -> fmt::Result,
) -> fmt::Result {
    let mut metric = enc.encode_descriptor(name, help, None, ty)?;
    for (labels, value) in rows {
        let mut m = metric.encode_family(&labels)?;
        sample(&mut m, &value)?;
    }
    Ok(())
}

fn counter(m: &mut MetricEncoder<'_>, v: &u64) -> fmt::Result {
    m.encode_counter::<NoLabelSet, _, u64>(v, None)
}

fn gauge(m: &mut MetricEncoder<'_>, v: &u64) -> fmt::Result {
    m.encode_gauge(v)
}

fn gauge_f(m: &mut MetricEncoder<'_>, v: &f64) -> fmt::Result {
    m.encode_gauge(v)
}

fn vip_label(v: &VipSample) -> Labels {
    vec![("vip", v.vip.clone())]
}

/// `lb_vip_pins`' samples of a fast-path VIP, one per kind.
fn pin_samples(v: &VipSample) -> Vec<(Labels, u64)> {
    let Some(p) = v.slot_states.and_then(|s| s.pins) else {
        return Vec::new();
    };
    [
        ("owner", p.owner),
        ("other", p.other),
        ("other_live", p.other_live),
    ]
    .into_iter()
    .map(|(kind, n)| (vec![("vip", v.vip.clone()), ("kind", kind.to_owned())], n))
    .collect()
}

fn backend_label(b: &BackendSample) -> Labels {
    vec![("vip", b.vip.clone()), ("backend", b.backend.clone())]
}

fn with(mut labels: Labels, key: &'static str, value: impl Into<String>) -> Labels {
    labels.push((key, value.into()));
    labels
}

fn action_name(reason: Reason) -> &'static str {
    match reason.action() {
        lb_common::stats::XDP_TX => "XDP_TX",
        lb_common::stats::XDP_REDIRECT => "XDP_REDIRECT",
        lb_common::stats::XDP_DROP => "XDP_DROP",
        _ => "XDP_PASS",
    }
}

impl Collector for Snapshot {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> fmt::Result {
        self.encode_global(&mut enc)?;
        self.encode_cleaning(&mut enc)?;
        self.encode_vips(&mut enc)?;
        self.encode_backends(&mut enc)
    }
}

impl Snapshot {
    fn encode_global(&self, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let build: Labels = vec![
            ("version", env!("CARGO_PKG_VERSION").to_owned()),
            ("commit", env!("LB_COMMIT").to_owned()),
        ];
        family(
            enc,
            "lb_build",
            "The lb binary's version and commit",
            MetricType::Info,
            [(build, ())],
            |m, ()| m.encode_info(&Labels::new()),
        )?;
        family(
            enc,
            "lb_verdicts",
            "Packets the XDP program saw, by verdict reason and XDP action",
            MetricType::Counter,
            Reason::ALL.iter().map(|r| {
                (
                    vec![
                        ("reason", r.name().to_owned()),
                        ("action", action_name(*r).to_owned()),
                    ],
                    self.global.get(*r),
                )
            }),
            counter,
        )?;
        family(
            enc,
            "lb_changes",
            "Changes applied to the data plane since start",
            MetricType::Counter,
            [(Labels::new(), self.changes)],
            counter,
        )?;
        self.encode_datapath(enc)?;
        let Some(c) = &self.conntrack else {
            return Ok(());
        };
        family(
            enc,
            "lb_conntrack_entries",
            "Entries of the conntrack map of each family, at the last walk",
            MetricType::Gauge,
            [
                (vec![("family", "ipv4".to_owned())], c.v4_entries),
                (vec![("family", "ipv6".to_owned())], c.v6_entries),
            ],
            gauge,
        )?;
        family(
            enc,
            "lb_conntrack_capacity",
            "Capacity of each family's conntrack map (entries)",
            MetricType::Gauge,
            [(Labels::new(), u64::from(c.capacity))],
            gauge,
        )?;
        family(
            enc,
            "lb_syn_cache_slots_used",
            "SYN cache slots holding a SYN whose handshake has not completed",
            MetricType::Gauge,
            [(Labels::new(), c.syn_slots_used)],
            gauge,
        )?;
        family(
            enc,
            "lb_syn_cache_slots",
            "SYN cache slots",
            MetricType::Gauge,
            [(Labels::new(), u64::from(c.syn_capacity))],
            gauge,
        )?;
        family(
            enc,
            "lb_syn_cache_parts",
            "SYN cache parts: one per CPU with receive-side scaling, 1 when every CPU shares one",
            MetricType::Gauge,
            [(Labels::new(), u64::from(c.syn_parts))],
            gauge,
        )?;
        family(
            enc,
            "lb_exceptions_entries",
            "Entries of the fast path's exceptions map, at the last walk",
            MetricType::Gauge,
            [(Labels::new(), c.exceptions_entries)],
            gauge,
        )?;
        family(
            enc,
            "lb_exceptions_capacity",
            "Capacity of the fast path's exceptions map (entries; it never evicts)",
            MetricType::Gauge,
            [(Labels::new(), u64::from(c.exceptions_capacity))],
            gauge,
        )?;
        family(
            enc,
            "lb_conntrack_walk_seconds",
            "Duration of the last walk of the conntrack maps (live connection counts)",
            MetricType::Gauge,
            [(Labels::new(), c.walk_ms / 1e3)],
            gauge_f,
        )
    }

    /// The fast path's cleaning walks, once one ran or failed.
    fn encode_cleaning(&self, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let Some(c) = &self.cleaning else {
            return Ok(());
        };
        for (name, help, n) in [
            (
                "lb_slots_cleaned",
                "Table slots the cleaning walk turned clean",
                c.cleaned_total,
            ),
            (
                "lb_cleaning_pins_deleted",
                "Pins deleted because their slot turned clean naming another backend",
                c.pins_deleted_total,
            ),
            (
                "lb_cleaning_aborted",
                "Cleaning commits that failed because the slot changed during the walk",
                c.aborted_total,
            ),
            (
                "lb_cleaning_failures",
                "Cleaning walks that failed (dirty slots stay dirty)",
                c.failures_total,
            ),
        ] {
            family(
                enc,
                name,
                help,
                MetricType::Counter,
                [(Labels::new(), n)],
                counter,
            )?;
        }
        family(
            enc,
            "lb_cleaning_walk_seconds",
            "Duration of the last successful cleaning walk",
            MetricType::Gauge,
            [(Labels::new(), c.walk_ms / 1e3)],
            gauge_f,
        )?;
        family(
            enc,
            "lb_vip_dirty_slots",
            "Dirty slots of the VIP's table at the last cleaning walk",
            MetricType::Gauge,
            self.vips
                .iter()
                .filter_map(|v| Some((vip_label(v), v.slot_states?.dirty)))
                .collect::<Vec<_>>(),
            gauge,
        )?;
        family(
            enc,
            "lb_vip_pins",
            "A fast-path VIP's pins at the last cleaning walk, by kind: owner (naming their slot's owner), other (naming another backend), other_live (of those, seen within the idle time)",
            MetricType::Gauge,
            self.vips.iter().flat_map(pin_samples).collect::<Vec<_>>(),
            gauge,
        )
    }

    /// `lb_datapath_degraded`, `lb_pins_lost_total`, `lb_xdp_reattached_total`.
    fn encode_datapath(&self, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let d = &self.datapath;
        family(
            enc,
            "lb_datapath_degraded",
            "1 while the pinned datapath has a loss the daemon could not mend (lb status says what)",
            MetricType::Gauge,
            [(Labels::new(), u64::from(d.degraded))],
            gauge,
        )?;
        family(
            enc,
            "lb_pins_lost",
            "Pins of the datapath found missing since start (mended or not)",
            MetricType::Counter,
            [(Labels::new(), d.pins_lost_total)],
            counter,
        )?;
        family(
            enc,
            "lb_xdp_reattached",
            "Times the XDP program was found detached and attached again since start",
            MetricType::Counter,
            [(Labels::new(), d.reattached_total)],
            counter,
        )
    }

    fn encode_vips(&self, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let per_vip = |f: fn(&VipStats) -> u64| {
            self.vips
                .iter()
                .map(move |v| (vip_label(v), f(&v.stats)))
                .collect::<Vec<_>>()
        };
        for (name, help, f) in [
            (
                "lb_vip_packets",
                "Packets to the VIP (forwarded or dropped)",
                (|s: &VipStats| s.packets) as fn(&VipStats) -> u64,
            ),
            (
                "lb_vip_bytes",
                "Bytes of the packets to the VIP, as received",
                |s| s.bytes,
            ),
            (
                "lb_vip_new_flows",
                "Flows that got a backend from the VIP's table",
                |s| s.new_flows,
            ),
            ("lb_vip_drops", "Packets to the VIP dropped", |s| s.drops),
        ] {
            family(enc, name, help, MetricType::Counter, per_vip(f), counter)?;
        }
        family(
            enc,
            "lb_vip_conntrack_events",
            "Conntrack events of the VIP's packets: hit, miss_non_syn (mid-flow packet without \
             state), stale_repicked (pin on a removed or down backend), udp_expired, \
             syn_only_evicted (a SYN lost its slot before its ACK), clean_slot (the fast \
             path: a clean slot's owner, no lookup)",
            MetricType::Counter,
            self.vips.iter().flat_map(|v| {
                let s = &v.stats;
                [
                    ("hit", s.ct_hits),
                    ("miss_non_syn", s.ct_misses_non_syn),
                    ("stale_repicked", s.ct_stale_repicked),
                    ("udp_expired", s.ct_udp_expired),
                    ("syn_only_evicted", s.ct_syn_only_evicted),
                    ("clean_slot", s.clean_slot_hits),
                    ("second_chance_candidate", s.sc_candidates),
                    ("second_chance_given_up", s.sc_given_up),
                ]
                .map(|(event, n)| (with(vip_label(v), "event", event), n))
            }),
            counter,
        )?;
        family(
            enc,
            "lb_vip_fast_path_give_ups",
            "The fast path's give-ups of the VIP's packets, by counter (fp_syn_maybe_split, \
             fp_syn_over_pin, fp_syn_dropped, fp_held_kept, fp_unpinned, \
             fp_syn_drained_owner, fp_udp_drained_clean_owner) and the residual it counts \
             (R1-R3 of the book's chapter The fast path)",
            MetricType::Counter,
            self.vips.iter().flat_map(|v| {
                v.stats.give_ups().map(|(note, n)| {
                    let labels = with(vip_label(v), "counter", note.counter());
                    (
                        with(labels, "residual", note.residual().unwrap_or_default()),
                        n,
                    )
                })
            }),
            counter,
        )?;
        family(
            enc,
            "lb_table",
            "The VIP's live Maglev table: generation, fingerprint and size",
            MetricType::Info,
            self.vips.iter().map(|v| {
                let labels = with(
                    with(
                        with(vip_label(v), "generation", v.generation.to_string()),
                        "fingerprint",
                        v.fingerprint.clone(),
                    ),
                    "size",
                    v.table_size.to_string(),
                );
                (labels, ())
            }),
            |m, ()| m.encode_info(&Labels::new()),
        )?;
        family(
            enc,
            "lb_vip_policy_mode",
            "1 for the mode the VIP's multi-failure policy balances it in (normal, panic, \
             all_down_open, all_down_closed, no_backends), 0 for the others",
            MetricType::Gauge,
            self.vips.iter().flat_map(|v| {
                let mode = v.policy_mode.as_deref();
                POLICY_MODES
                    .iter()
                    .filter(move |_| mode.is_some())
                    .map(move |m| (with(vip_label(v), "mode", *m), u64::from(mode == Some(*m))))
            }),
            gauge,
        )?;
        family(
            enc,
            "lb_vip_pending_rollout_slots",
            "Slots of the VIP's table that a two-phase rollout's first phase (lb reload \
             --phase learn) marked pending, until its second phase publishes the table; \
             0 without a rollout under way",
            MetricType::Gauge,
            self.vips
                .iter()
                .map(|v| (vip_label(v), u64::from(v.pending_rollout.unwrap_or(0)))),
            gauge,
        )?;
        family(
            enc,
            "lb_vip_second_chance_owners_given_up",
            "Slots of the VIP's tables whose owner in between was forgotten when a table \
             was published (second chance rule SC5: a dirty slot changed again; flows \
             begun on that owner have no candidate left)",
            MetricType::Counter,
            self.vips.iter().map(|v| (vip_label(v), v.owners_given_up)),
            counter,
        )?;
        family(
            enc,
            "lb_vip_announced",
            "1 while the VIP's address is announced for BGP from this instance (its route \
             is in the announcement table), 0 while it is not",
            MetricType::Gauge,
            self.vips
                .iter()
                .filter_map(|v| Some((vip_label(v), u64::from(v.announced?)))),
            gauge,
        )
    }

    fn encode_backends(&self, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let per = |f: fn(&BackendStats) -> u64| {
            self.backends
                .iter()
                .map(move |b| (backend_label(b), f(&b.stats)))
                .collect::<Vec<_>>()
        };
        for (name, help, f) in [
            (
                "lb_backend_packets",
                "Packets forwarded to the backend",
                (|s: &BackendStats| s.packets) as fn(&BackendStats) -> u64,
            ),
            (
                "lb_backend_bytes",
                "Bytes of the packets forwarded to the backend, as received",
                |s| s.bytes,
            ),
            (
                "lb_backend_new_flows",
                "Flows the backend got from the VIP's table",
                |s| s.new_flows,
            ),
        ] {
            family(enc, name, help, MetricType::Counter, per(f), counter)?;
        }
        let live = || {
            self.backends
                .iter()
                .filter_map(|b| b.connections.map(|c| (b, c)))
        };
        family(
            enc,
            "lb_backend_connections",
            "Connections of the backend in conntrack at the last walk, by state: established \
             (open), syn_only (handshake not completed), closing (the client sent FIN or RST)",
            MetricType::Gauge,
            live().flat_map(|(b, c)| {
                [
                    ("established", c.established),
                    ("syn_only", c.syn_only),
                    ("closing", c.closing),
                ]
                .map(|(state, n)| (with(backend_label(b), "state", state), n))
            }),
            gauge,
        )?;
        family(
            enc,
            "lb_backend_connections_idle",
            "Established connections of the backend without a packet for longer than \
             metrics.idle_secs",
            MetricType::Gauge,
            live().map(|(b, c)| (backend_label(b), c.idle)),
            gauge,
        )?;
        family(
            enc,
            "lb_backend_weight",
            "The backend's weight",
            MetricType::Gauge,
            self.backends
                .iter()
                .filter_map(|b| b.weight.map(|w| (backend_label(b), u64::from(w)))),
            gauge,
        )?;
        family(
            enc,
            "lb_backend_slots",
            "Slots of the VIP's table the backend owns",
            MetricType::Gauge,
            self.backends
                .iter()
                .filter_map(|b| b.slots.map(|s| (backend_label(b), u64::from(s)))),
            gauge,
        )?;
        family(
            enc,
            "lb_backend_state",
            "1 for the backend's current state (active, drain, down, removed, or a health \
             state), 0 for the others",
            MetricType::Gauge,
            self.backends.iter().flat_map(|b| {
                let mut states: Vec<Cow<'_, str>> = STATES.iter().map(|s| Cow::from(*s)).collect();
                if !STATES.contains(&b.state.as_str()) {
                    states.push(Cow::from(b.state.as_str()));
                }
                states.into_iter().map(move |s| {
                    let on = u64::from(s == b.state.as_str());
                    (with(backend_label(b), "state", s.into_owned()), on)
                })
            }),
            gauge,
        )?;
        family(
            enc,
            "lb_backend_state_transitions",
            "Times the backend entered each state (its first state counts once)",
            MetricType::Counter,
            self.backends.iter().flat_map(|b| {
                let mut all = b.transitions.clone();
                for state in STATES {
                    all.entry(state.to_owned()).or_insert(0);
                }
                all.into_iter()
                    .map(move |(to, n)| (with(backend_label(b), "to", to), n))
            }),
            counter,
        )?;
        self.encode_health(enc)
    }

    /// The health checker's series of the probed backends.
    fn encode_health(&self, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let probed = || {
            self.backends
                .iter()
                .filter_map(|b| b.health.map(|h| (backend_label(b), h)))
        };
        family(
            enc,
            "lb_backend_healthy",
            "1 when the backend's health checks count it healthy, 0 when unhealthy",
            MetricType::Gauge,
            probed().map(|(l, h)| (l, u64::from(h.healthy))),
            gauge,
        )?;
        family(
            enc,
            "lb_backend_health_transitions",
            "Times the backend's health checks changed its health, by the health entered \
             (healthy, unhealthy)",
            MetricType::Counter,
            probed().flat_map(|(l, h)| {
                [
                    (with(l.clone(), "to", "healthy"), h.came_up),
                    (with(l, "to", "unhealthy"), h.went_down),
                ]
            }),
            counter,
        )?;
        family(
            enc,
            "lb_backend_health_probes",
            "Health probes sent to the backend",
            MetricType::Counter,
            probed().map(|(l, h)| (l, h.probes)),
            counter,
        )?;
        family(
            enc,
            "lb_backend_health_probe_failures",
            "Health probes of the backend that failed (timeout, refused, bad status, ...)",
            MetricType::Counter,
            probed().map(|(l, h)| (l, h.failed_probes)),
            counter,
        )
    }
}

#[cfg(test)]
mod tests;
