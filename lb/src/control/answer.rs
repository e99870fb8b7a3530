//! What the daemon answers: the [`Response`] envelope and the data of each request
//! ([`Status`], [`Stats`], [`FlowReport`]), which the CLI prints as text or JSON.

use serde::{Deserialize, Serialize};

use super::{
    announce::{AnnounceSummary, VipAnnouncement},
    health::{BackendHealth, HealthSummary, NexthopStatus, PolicyStatus},
};

pub use lb_dataplane::ConnectionCounts;

/// The daemon's answer: `{"ok":true,"data":...}` or `{"ok":false,"error":"..."}`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Response {
    /// Whether the request succeeded.
    pub ok: bool,
    /// Why not, when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The answer's data, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
}

impl Response {
    /// A success carrying `data`.
    pub fn ok(data: impl Serialize) -> Self {
        match serde_json::to_value(data) {
            Ok(data) => Self {
                ok: true,
                error: None,
                data: Some(data),
            },
            Err(e) => Self::error(format!("encoding the answer: {e}")),
        }
    }

    /// A failure saying `message`.
    pub fn error(message: impl ToString) -> Self {
        Self {
            ok: false,
            error: Some(message.to_string()),
            data: None,
        }
    }
}

/// `lb status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Status {
    /// Interface the program is attached to.
    pub interface: String,
    /// Attach mode in use (`native` or `skb`).
    pub mode: String,
    /// Configuration file.
    pub config_file: String,
    /// Whether runtime changes make the running state differ from the file.
    pub differs_from_file: bool,
    /// Changes applied since start.
    pub changes: u64,
    /// Maglev tables built since start.
    pub table_builds: u64,
    /// The VIPs.
    pub vips: Vec<VipStatus>,
    /// Health checks and next hops, all VIPs together.
    #[serde(default)]
    pub health: HealthSummary,
    /// The VIP addresses' announcement for BGP (`[announce]`).
    #[serde(default)]
    pub announce: AnnounceSummary,
    /// The runtime changes in force (kept in the state file), in (VIP, backend) order.
    #[serde(default)]
    pub overrides: Vec<OverrideStatus>,
    /// The pinned datapath's directory (host's view), when pinned.
    #[serde(default)]
    pub pin_dir: Option<String>,
    /// The datapath layout stamp (`lb --version` prints the binary's).
    #[serde(default)]
    pub layout: Option<String>,
    /// What this start's migration of a pinned datapath of an older map layout did:
    /// the versions, the time it took and each map's entries (`layout 1 to 2 in
    /// 3.2 ms: TABLES converted (6 entries, ...), ...`); absent when the datapath was
    /// created or adopted as it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration: Option<String>,
    /// Connection tracking occupancy, from the last conntrack walk (none before the
    /// first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conntrack: Option<ConntrackStatus>,
    /// The fast path's cleaning walk (none before the first; the control socket
    /// answers once it ended, or 2 s after the start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleaning: Option<CleaningStatus>,
    /// Whether the pinned datapath is whole: its pins and its XDP program.
    #[serde(default)]
    pub datapath: DatapathHealth,
    /// The last changes sent with an id (`lb backend`, `lb vip`, `lb overrides
    /// --clear`), oldest first, at most [`RECENT_CHANGES`]: a client that got no answer
    /// finds here whether its change applied.
    #[serde(default)]
    pub recent_changes: Vec<ChangeOutcome>,
}

/// How many changes [`Status::recent_changes`] keeps.
pub const RECENT_CHANGES: usize = 64;

/// What became of a change sent with an id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ChangeOutcome {
    /// The id the client sent.
    pub id: String,
    /// The request's command (`backend`, `vip`, `overrides`).
    pub command: String,
    /// Whether it applied.
    pub applied: bool,
    /// Why not, when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The pinned datapath's health (`lb status`): the daemon checks its pins and the XDP
/// link every few seconds and mends what it can (pins again from its descriptors, a
/// detached program attached again).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DatapathHealth {
    /// Whether something is wrong now that could not be mended (`problems`).
    pub degraded: bool,
    /// What is wrong now, each a sentence.
    pub problems: Vec<String>,
    /// Pins found missing since start (`lb_pins_lost_total`).
    pub pins_lost_total: u64,
    /// Of those, pinned again from the daemon's descriptors.
    pub pins_restored_total: u64,
    /// Times the XDP program was found detached and attached again.
    pub reattached_total: u64,
    /// The last loss found and what was done about it, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_loss: Option<String>,
}

/// What the fast path's cleaning walks did (`lb status`): dirty table slots turned
/// clean, by rules C1-C5 of the book's chapter "The fast path".
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CleaningStatus {
    /// Slots turned clean since start.
    pub cleaned_total: u64,
    /// Commits that failed since start because a change or a pin moved the slot's
    /// epoch during the walk (the slot stays dirty until a later walk).
    pub aborted_total: u64,
    /// Pins deleted since start because their slot turned clean naming another backend,
    /// exceptions of the slots turned clean, exceptions made at a SYN whose handshake
    /// never completed, past the SYN hold, and exceptions of removed VIPs.
    pub pins_deleted_total: u64,
    /// Walks that failed since start.
    pub failures_total: u64,
    /// The last failure's message, until a walk succeeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// How long the last successful walk took (ms).
    pub walk_ms: f64,
    /// How long ago it ended (s).
    pub age_secs: f64,
}

/// A VIP's table slots by fast-path state, at the last cleaning walk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SlotStatus {
    /// Dirty slots: their owner changed since they were last clean.
    pub dirty: u64,
    /// Of those, younger than the quiet time.
    pub recent: u64,
    /// Of those, held dirty by a live pin or held SYN naming another backend.
    pub held: u64,
    /// A fast-path VIP's pins by kind (none on today's path, where every flow is
    /// pinned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pins: Option<PinStatus>,
}

/// One of a VIP's fast-path give-up counters (`lb_common::fastpath::Note`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GiveUpCount {
    /// The counter's name (`fp_syn_maybe_split`, ...).
    pub counter: String,
    /// The residual it counts (`R1`, `R2`, `R3`).
    pub residual: String,
    /// Packets counted since the program was loaded (summed over CPUs).
    pub value: u64,
}

/// A fast-path VIP's pins by what they say against its table, at the last cleaning walk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PinStatus {
    /// Pins naming their slot's owner (the table would choose the same backend).
    pub owner: u64,
    /// Pins naming another backend than their slot's owner: the exceptions to the
    /// table, which keep their flows across its changes.
    pub other: u64,
    /// Of those, seen within the TCP idle time (a UDP pin within its timeout).
    pub other_live: u64,
}

/// What the last conntrack walk found (`lb status`, `lb stats`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ConntrackStatus {
    /// Entries of the IPv4 conntrack map.
    pub v4_entries: u64,
    /// Entries of the IPv6 map.
    pub v6_entries: u64,
    /// Capacity of each map.
    pub capacity: u32,
    /// SYN cache slots holding a SYN whose handshake has not completed.
    pub syn_slots_used: u64,
    /// SYN cache slots.
    pub syn_capacity: u32,
    /// The SYN cache's parts: one per CPU (rounded up to a power of two) on an interface
    /// with receive-side scaling, where a handshake's ACK arrives on its SYN's CPU; 1
    /// otherwise (one cache every CPU shares). 0 from a daemon that did not report it.
    #[serde(default)]
    pub syn_parts: u32,
    /// Entries of the fast path's exceptions map (`EXCEPTIONS`).
    #[serde(default)]
    pub exceptions_entries: u64,
    /// Its capacity (`conntrack.exceptions_capacity`).
    #[serde(default)]
    pub exceptions_capacity: u32,
    /// How long the walk took (ms).
    pub walk_ms: f64,
    /// How long ago it ended (s).
    pub age_secs: f64,
    /// Connections idle longer than this count as idle (s).
    pub idle_secs: u64,
}

/// A runtime change in `lb status` and `lb overrides`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OverrideStatus {
    /// `ADDR:PORT/PROTO`.
    pub vip: String,
    /// Backend address.
    pub backend: String,
    /// The change: `drain`, `added, active (weight 2)`, `removed`, ...
    pub change: String,
    /// What the file says of the backend: `active (weight 1)` or `not in the file`.
    pub file: String,
}

/// The answer to `lb overrides`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OverridesReport {
    /// The runtime changes in force after the request.
    pub overrides: Vec<OverrideStatus>,
    /// With `--clear`: how many were dropped, and the changes applied.
    pub lines: Vec<String>,
}

/// A VIP in `lb status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct VipStatus {
    /// `ADDR:PORT/PROTO`.
    pub vip: String,
    /// VIP id.
    pub id: u32,
    /// Table size.
    pub table_size: u32,
    /// Table generation.
    pub generation: u32,
    /// Table fingerprint (hex).
    pub fingerprint: String,
    /// Client prefixes allowed to reach the VIP (`allowed_sources`), sorted; empty:
    /// every client.
    #[serde(default)]
    pub allowed_sources: Vec<String>,
    /// Backends.
    pub backends: Vec<BackendStatus>,
    /// How the VIP is balanced (its multi-failure policy's mode).
    #[serde(default)]
    pub policy: Option<PolicyStatus>,
    /// Whether its address is announced for BGP, and why (with `[announce]` enabled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub announce: Option<VipAnnouncement>,
    /// Its table slots by fast-path state, at the last cleaning walk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot_states: Option<SlotStatus>,
    /// With the fast path on: whether the VIP's entry is in the data plane's VIP cache,
    /// where its packets read it without the `VIPS` hash-map lookup. False when another
    /// VIP with the same filter bit holds the cache slot (its packets then pay the
    /// lookup, about 25 ns); absent with the fast path off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry_cached: Option<bool>,
    /// The fast path's give-ups that are not zero (the data path's counters of the
    /// residuals R1-R3 in the book's chapter "The fast path"), as of the last second's
    /// sample of the counters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub give_ups: Vec<GiveUpCount>,
    /// With a persistence timeout (`persistence_timeout_secs`): the clients whose
    /// affinity pin is live (a new connection, or a packet on one of its open
    /// connections to its backend, within the timeout), at the last conntrack walk;
    /// absent without affinity or before the first walk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity_pins: Option<u64>,
    /// A two-phase rollout's first phase (`lb reload --phase learn`): the slots of its
    /// table marked pending with the owner the next table gives them, until a table
    /// is published (`lb reload`, the second phase); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_rollout: Option<u32>,
    /// Slots whose owner in between was forgotten when a table was published (rule SC5
    /// of the second chance: a dirty slot whose owner changed again keeps its clean
    /// owner and the new one; a flow begun on the forgotten owner has no candidate
    /// left), counted since the daemon started.
    #[serde(default)]
    pub owners_given_up: u64,
}

/// The answer to `lb reload --phase learn` ([`super::Request::ReloadLearn`]): the
/// VIPs whose running tables now name the next table's owners as pending.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Learned {
    /// The daemon's configuration file, read for the next tables.
    pub file: String,
    /// Each VIP learned (second chance on, its table changed, the same size), and each
    /// VIP whose earlier learn the file abandons (0 pending: its table unchanged).
    pub vips: Vec<LearnedVip>,
}

/// One VIP of [`Learned`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LearnedVip {
    /// The VIP (`address:port/protocol`).
    pub vip: String,
    /// Slots marked pending: the next table moves them; 0 when the learn abandons an
    /// earlier one.
    pub pending_slots: u32,
}

/// A backend in `lb status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BackendStatus {
    /// Address.
    pub address: String,
    /// Backend id.
    pub id: u32,
    /// `active`, `drain` or `down`.
    pub state: String,
    /// Weight.
    pub weight: u32,
    /// Slots owned.
    pub slots: u32,
    /// Share of the table, 0..1.
    pub share: f64,
    /// What the data plane does with it (`active`: new flows by its slots;
    /// `draining`: no slots, keeps its flows; `down`: no slots, its flows re-picked):
    /// the administrative state with health and the VIP's policy applied.
    #[serde(default)]
    pub dataplane_state: String,
    /// Its health checks, when it is probed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<BackendHealth>,
    /// Its next hop (FIB next-hop mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nexthop: Option<NexthopStatus>,
    /// The runtime change of this backend, if any (`drain`, `added, ...`); the file
    /// says otherwise.
    #[serde(default)]
    pub runtime: Option<String>,
    /// Its connections by state, from the last conntrack walk (none before the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub connections: Option<ConnectionCounts>,
}

/// `lb flow`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FlowReport {
    /// The VIP.
    pub vip: String,
    /// The client.
    pub client: String,
    /// The flow's slot in the VIP's table.
    pub slot: u32,
    /// The backend the table gives a new flow (none for an empty table).
    pub table_backend: Option<String>,
    /// The conntrack pin, if any.
    pub pinned: Option<Pin>,
    /// The fast path's view of the flow's slot; absent when the VIP's fast path is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fast_path: Option<FlowSlot>,
    /// The second-chance candidate (backend address) the flow's next packet other than a
    /// SYN carries to the owner, for the backends' agent (`lb_common::second_chance`):
    /// a TCP flow of a VIP with `second_chance` and without the fast path, not pinned,
    /// on a dirty slot whose clean owner keeps flows. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate: Option<String>,
    /// The client's affinity (`vip.persistence_timeout_secs`); absent when the VIP has
    /// none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<FlowAffinity>,
}

/// A client's affinity on a VIP with a persistence timeout (`lb flow`;
/// `lb_common::affinity`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FlowAffinity {
    /// The VIP's persistence timeout (s).
    pub timeout_secs: u32,
    /// The client's affinity pin: the backend its new connections go to; absent when
    /// it has none (its next new connection takes the table's choice and is pinned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// Seconds since the client's last new connection (up to a second more: the
    /// pin's time is rewritten at most once a second); absent without a pin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_secs: Option<u64>,
    /// Whether the pin decides the client's next new connection: idle no longer than
    /// the timeout and its backend active (not draining, down or removed).
    pub decides: bool,
}

/// The flow's slot as the fast path sees it (`lb flow`; the book's chapter "The fast
/// path").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FlowSlot {
    /// `clean` (the table decides alone, rule T1) or `dirty` (its owner changed since
    /// it was last clean: pins decide, a miss takes the clean owner).
    pub state: String,
    /// A dirty slot's clean owner (backend address), where an established flow without
    /// a pin goes; absent for a clean slot or one without a clean owner (a resized table).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clean_owner: Option<String>,
    /// What decides the flow's next packet other than a SYN: `table` (a clean slot: no
    /// conntrack lookup, a pin is ignored), `pin` (the conntrack pin or held SYN),
    /// `clean-owner` or `owner` (a miss on a dirty slot, rules M1 and M2).
    pub decided_by: String,
}

/// A conntrack pin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Pin {
    /// Backend address.
    pub backend: String,
    /// Backend id.
    pub backend_id: u32,
    /// A pin in conntrack (`true`), or a held SYN in the SYN cache (`false`).
    pub established: bool,
}

/// `lb stats`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Stats {
    /// Seconds the rates are computed over.
    pub interval_secs: f64,
    /// Global packets per verdict reason (non-zero ones).
    pub reasons: Vec<Counter>,
    /// Per VIP.
    pub vips: Vec<VipCounters>,
    /// Connection tracking occupancy, from the last conntrack walk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conntrack: Option<ConntrackStatus>,
}

impl Stats {
    /// Packets forwarded to `backend` (canonical address text) of `vip`
    /// (`ADDR:PORT/PROTO`); 0 when either is not listed.
    pub fn backend_packets(&self, vip: &str, backend: &str) -> u64 {
        self.vips
            .iter()
            .find(|v| v.vip == vip)
            .and_then(|v| v.backends.iter().find(|b| b.backend == backend))
            .map_or(0, |b| b.packets.value)
    }
}

/// One named counter with its rate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Counter {
    /// Name.
    pub name: String,
    /// Value since the program was loaded.
    pub value: u64,
    /// Per second over the last sampling interval.
    pub rate: f64,
}

/// Per-VIP counters in `lb stats`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct VipCounters {
    /// `ADDR:PORT/PROTO`.
    pub vip: String,
    /// Counters (packets, bytes, new_flows, ct_hits, ct_misses_non_syn,
    /// ct_stale_repicked, ct_udp_expired, drops, ct_syn_only_evicted, clean_slot_hits,
    /// the fast path's give-ups, sc_candidates, sc_given_up).
    pub counters: Vec<Counter>,
    /// Per-backend counters.
    pub backends: Vec<BackendCounters>,
}

/// Per-backend counters in `lb stats`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BackendCounters {
    /// Address.
    pub backend: String,
    /// Packets forwarded.
    pub packets: Counter,
    /// Bytes forwarded.
    pub bytes: Counter,
    /// Flows it got from the table.
    #[serde(default)]
    pub new_flows: Option<Counter>,
    /// Its connections by state, from the last conntrack walk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub connections: Option<ConnectionCounts>,
}
