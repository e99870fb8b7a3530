//! The health-check parts of `lb status`: a backend's probes ([`BackendHealth`]) and
//! next hop ([`NexthopStatus`]), a VIP's multi-failure policy ([`PolicyStatus`]), and
//! the totals ([`HealthSummary`]). Ages are milliseconds before the answer, latencies
//! microseconds.

use serde::{Deserialize, Serialize};

use lb_health::{
    policy::{FailurePolicy, Mode},
    scheduler::BackendReport,
};

/// A probed backend's health.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BackendHealth {
    /// `healthy`, `healthy (assumed)` (no probe has passed yet since start or since it
    /// was added), `unhealthy` or `unhealthy (held)` (flap damping).
    pub state: String,
    /// Whether it counts as healthy.
    pub healthy: bool,
    /// `tcp`, `http`, `https` or `dns`.
    pub kind: Option<String>,
    /// Where its probes go (`198.51.100.11:80`, or `203.0.113.10:80 mark 0x4c420007
    /// from 192.0.2.1` in tunnel mode).
    pub target: Option<String>,
    /// Age of the current state.
    pub since_ms: u64,
    /// Why the last change happened.
    pub last_reason: Option<String>,
    /// The last failed probe's reason (`timeout after 1000 ms (connect)`, `HTTP 503`,
    /// `connection refused`, ...).
    pub last_error: Option<String>,
    /// Age of the last failed probe.
    pub last_error_ago_ms: Option<u64>,
    /// Age of the last probe.
    pub last_probe_ago_ms: Option<u64>,
    /// Latency of the last successful probe.
    pub last_latency_us: Option<u64>,
    /// Changes of state since it was first probed (`went_down + came_up`).
    pub transitions: u64,
    /// Changes to unhealthy.
    pub went_down: u64,
    /// Changes to healthy.
    pub came_up: u64,
    /// Probes run.
    pub probes: u64,
    /// Probes failed.
    pub failed_probes: u64,
    /// Remaining flap-damping hold.
    pub held_ms: Option<u64>,
    /// Flap-damping holds so far.
    pub holds: u64,
}

impl<V> From<&BackendReport<V>> for BackendHealth {
    fn from(r: &BackendReport<V>) -> Self {
        let s = &r.status;
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Self {
            state: s.label().to_owned(),
            healthy: s.healthy,
            kind: r.kind.map(str::to_owned),
            target: r.target.map(|t| t.to_string()),
            since_ms: ms(s.since),
            last_reason: s.last_reason.clone(),
            last_error: s.last_error.as_ref().map(ToString::to_string),
            last_error_ago_ms: s.last_error_ago.map(ms),
            last_probe_ago_ms: s.last_probe_ago.map(ms),
            last_latency_us: s
                .last_latency
                .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
            transitions: s.went_down + s.came_up,
            went_down: s.went_down,
            came_up: s.came_up,
            probes: s.probes,
            failed_probes: s.failed_probes,
            held_ms: s.held_for.map(ms),
            holds: s.holds,
        }
    }
}

/// A backend's next hop in FIB next-hop mode, as the kernel's routing and neighbour
/// tables have it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NexthopStatus {
    /// `resolved`, `resolving`, `no route` or `no neighbour`.
    pub state: String,
    /// The next hop and device (`198.51.100.11 dev lb0`), when routed.
    pub via: Option<String>,
    /// What the kernel said (the neighbour's state, the route error).
    pub detail: Option<String>,
}

impl NexthopStatus {
    /// Whether packets to the backend can leave (`resolved`, or still `resolving`).
    pub fn is_ok(&self) -> bool {
        self.state == "resolved" || self.state == "resolving"
    }
}

/// A VIP's multi-failure policy and the mode it is in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PolicyStatus {
    /// `normal`, `panic`, `all_down_open`, `all_down_closed` or `no_backends`.
    pub mode: String,
    /// The mode in words (`panic: healthy weight 1 of 4, every backend gets slots`).
    pub detail: String,
    /// `panic_threshold` (per cent of healthy weight; 0: off).
    pub panic_threshold: u8,
    /// `all_down`: `open` or `closed`.
    pub all_down: String,
}

impl PolicyStatus {
    /// The status of `mode` under `policy`.
    pub fn new(mode: &Mode, policy: &FailurePolicy) -> Self {
        let name = match mode {
            Mode::Normal => "normal",
            Mode::Panic { .. } => "panic",
            Mode::AllDownOpen => "all_down_open",
            Mode::AllDownClosed => "all_down_closed",
            Mode::NoBackends => "no_backends",
        };
        Self {
            mode: name.to_owned(),
            detail: mode.to_string(),
            panic_threshold: policy.panic_threshold,
            all_down: policy.all_down.to_string(),
        }
    }
}

/// What the tunnel-probe program did (its counters since the program was loaded).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TunnelProbes {
    /// Whether it is attached to the interface.
    pub attached: bool,
    /// Probe packets encapsulated to their backend.
    pub encapsulated: u64,
    /// Probe packets dropped (unknown backend, no route, too big, ...).
    pub dropped: u64,
}

/// Health checks and next hops over all VIPs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HealthSummary {
    /// Backends probed.
    pub probed: usize,
    /// Of them, unhealthy now.
    pub unhealthy: usize,
    /// State changes of all probed backends.
    pub transitions: u64,
    /// Health changes applied (batches of transitions that changed a backend).
    pub batches: u64,
    /// Tables those batches installed (at most one per VIP and batch).
    pub table_changes: u64,
    /// The tunnel-probe program.
    pub tunnel: TunnelProbes,
    /// Backends whose next hop is not resolved now (no route, no neighbour).
    pub nexthop_unresolved: usize,
    /// Times a backend was found without a resolved next hop since start.
    pub nexthop_unresolved_total: u64,
}
