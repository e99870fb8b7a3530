//! The multi-failure policy: from a VIP's backends (weight, drain, health) to the
//! backends that get table slots and what happens to each one's tracked flows. Pure.
//!
//! # Rules, in order
//! 1. Drain wins. A drained backend (drained by the operator, or weight 0) never gets
//!    slots, healthy or not, and its conntrack flows are kept, healthy or not: a backend
//!    that shuts down gracefully usually fails its health check (HTTP 503) while it
//!    finishes its connections, and drain is how the operator asks for exactly that.
//!    Drained backends count neither as healthy nor as failed below.
//! 2. Normal: the healthy backends get slots with their weights; an unhealthy one gets
//!    none and its flows are re-picked, as for a removed backend (the backend states
//!    are defined in the glossary of `lb_common`).
//! 3. Panic (Envoy's panic threshold): when the healthy share of the non-drained weight
//!    falls below the VIP's `panic_threshold` per cent, every non-drained backend gets
//!    slots again and keeps its flows, rather than overloading the few left. The share
//!    is of weight, not of backend count: losing a backend of weight 10 among ten of
//!    weight 1 loses half the capacity, not a tenth.
//! 4. All down (no healthy non-drained backend): `open` (the default) balances over
//!    every non-drained backend as in panic; `closed` gives no backend slots, so the VIP
//!    drops new flows (`drop_no_backend`) and its failed backends' flows.
//!
//! # Defaults and why
//! - `panic_threshold` = 0 (panic mode off): unlike Envoy, an L4 balancer cannot retry a
//!   connection elsewhere, so every new flow given to a dead backend is a failed
//!   connection. Excluding failed backends is the better default until none is left;
//!   operators who fear overloading survivors set e.g. 50 (Envoy's default).
//! - `all_down` = `open`: when every backend fails, either they really are all down
//!   (sending them flows loses nothing more) or the probes are wrong (a broken probe
//!   path, the LB's own network), and then serving on is right. `closed` suits
//!   deployments where another site takes the VIP once this instance stops serving it.

use std::fmt;

use lb_maglev::{Backend, BackendKey};

/// What a VIP with no healthy backend does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AllDown {
    /// Every non-drained backend gets slots (fail open).
    #[default]
    Open,
    /// No backend gets slots: new flows are dropped (fail closed).
    Closed,
}

impl fmt::Display for AllDown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AllDown::Open => "open",
            AllDown::Closed => "closed",
        })
    }
}

/// A VIP's multi-failure policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct FailurePolicy {
    /// Panic below this share of healthy weight, per cent (0..=100; 0 = never).
    pub panic_threshold: u8,
    /// What happens when no backend is healthy.
    pub all_down: AllDown,
}

/// One backend as the policy sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Identity.
    pub key: BackendKey,
    /// Configured weight (0 counts as drained).
    pub weight: u32,
    /// Drained by the operator (`state = "drain"` or `lb drain`). A backend that is
    /// administratively down is not a candidate at all: leave it out.
    pub drained: bool,
    /// Healthy per its probes (a backend without probes is healthy).
    pub healthy: bool,
}

/// What happens to the flows the data plane tracks for a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Flows {
    /// Its pins hold: its flows stay on it.
    Keep,
    /// Its pins no longer hold: its flows are re-picked from the table.
    Repick,
}

/// The decision for one backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Identity.
    pub key: BackendKey,
    /// Weight in the table; 0: no slots.
    pub table_weight: u32,
    /// Its tracked flows.
    pub flows: Flows,
}

/// How the VIP is balanced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum Mode {
    /// The healthy non-drained backends share the table.
    Normal,
    /// Healthy weight below the threshold: every non-drained backend shares the table.
    Panic {
        /// Healthy non-drained weight.
        healthy_weight: u64,
        /// All non-drained weight.
        total_weight: u64,
    },
    /// No healthy backend, `all_down = "open"`: every non-drained backend shares the
    /// table.
    AllDownOpen,
    /// No healthy backend, `all_down = "closed"`: the table is empty.
    AllDownClosed,
    /// No non-drained backend at all: the table is empty.
    NoBackends,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mode::Normal => f.write_str("normal"),
            Mode::Panic {
                healthy_weight,
                total_weight,
            } => write!(
                f,
                "panic: healthy weight {healthy_weight} of {total_weight}, every backend gets slots"
            ),
            Mode::AllDownOpen => f.write_str("all backends unhealthy: failing open"),
            Mode::AllDownClosed => f.write_str("all backends unhealthy: failing closed"),
            Mode::NoBackends => f.write_str("no backend with weight > 0"),
        }
    }
}

/// The policy's answer for a VIP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    /// How the VIP is balanced.
    pub mode: Mode,
    /// One placement per candidate, in the candidates' order.
    pub placements: Vec<Placement>,
}

impl Selection {
    /// The backends of the table (weight > 0), for [`lb_maglev::MaglevTable::build`].
    pub fn table_backends(&self) -> Vec<Backend> {
        self.placements
            .iter()
            .filter(|p| p.table_weight > 0)
            .map(|p| Backend::new(p.key, p.table_weight))
            .collect()
    }
}

/// Applies `policy` to a VIP's `candidates` (see the module documentation).
pub fn select(candidates: &[Candidate], policy: &FailurePolicy) -> Selection {
    let in_service = |c: &Candidate| !c.drained && c.weight > 0;
    let total: u64 = candidates
        .iter()
        .filter(|c| in_service(c))
        .map(|c| u64::from(c.weight))
        .sum();
    let healthy: u64 = candidates
        .iter()
        .filter(|c| in_service(c) && c.healthy)
        .map(|c| u64::from(c.weight))
        .sum();
    let mode = if total == 0 {
        Mode::NoBackends
    } else if healthy == 0 {
        match policy.all_down {
            AllDown::Open => Mode::AllDownOpen,
            AllDown::Closed => Mode::AllDownClosed,
        }
    } else if healthy * 100 < u64::from(policy.panic_threshold.min(100)) * total {
        Mode::Panic {
            healthy_weight: healthy,
            total_weight: total,
        }
    } else {
        Mode::Normal
    };
    let everyone = matches!(mode, Mode::Panic { .. } | Mode::AllDownOpen);
    let placements = candidates
        .iter()
        .map(|c| {
            let (table_weight, flows) = if !in_service(c) {
                (0, Flows::Keep)
            } else if c.healthy || everyone {
                // AllDownClosed has no healthy backend, so it never reaches this arm
                // with a backend to place.
                (c.weight, Flows::Keep)
            } else {
                (0, Flows::Repick)
            };
            Placement {
                key: c.key,
                table_weight,
                flows,
            }
        })
        .collect();
    Selection { mode, placements }
}

#[cfg(test)]
mod tests;
