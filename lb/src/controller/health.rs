//! Health in the controller: which backends probes found unhealthy, and the desired
//! state the data plane is driven to once the VIPs' multi-failure policies
//! (`lb_health::policy`) have been applied to it.
//!
//! The operator's desired state ([`Desired`]: file and runtime changes) stays as it is;
//! [`effective`] derives from it, for every VIP, the backend states the data plane
//! gets: a backend the policy takes out of service with its flows re-picked becomes
//! `down` (no slots; `BACKENDS` state down, so its conntrack entries stop being
//! honoured, as for a removed backend), every other one keeps its own state and weight.
//! A backend keeps its id either way (the controller allocates ids per VIP and backend
//! key), and a table depends only on the backends in it and their weights, so a
//! backend that recovers brings back exactly the table it had before.
//!
//! Drain and health combine as the policy says: a drained backend never gets slots and
//! keeps its flows, healthy or not. An administratively down backend is no candidate.

use std::collections::{BTreeMap, BTreeSet};

use super::desired::Desired;
use crate::config::{BackendState, Vip};
use lb_health::policy::{self, Candidate, Flows, Mode};
use lb_maglev::BackendKey;

/// The unhealthy backends, by VIP.
pub(super) type Unhealthy = BTreeSet<(Vip, BackendKey)>;

/// `desired` with the multi-failure policy of every VIP applied to its backends'
/// health (`unhealthy`), and the mode each VIP is balanced in.
pub(super) fn effective(
    desired: &Desired,
    unhealthy: &Unhealthy,
) -> (Desired, BTreeMap<Vip, Mode>) {
    let mut out = desired.clone();
    let mut modes = BTreeMap::new();
    for (vip, spec) in &mut out.vips {
        let candidates: Vec<Candidate> = spec
            .backends
            .iter()
            .filter(|(_, b)| b.state != BackendState::Down)
            .map(|(key, b)| Candidate {
                key: *key,
                weight: b.weight,
                drained: b.state == BackendState::Drain,
                healthy: !unhealthy.contains(&(*vip, *key)),
            })
            .collect();
        let selection = policy::select(&candidates, &spec.policy);
        for placement in &selection.placements {
            if placement.flows == Flows::Repick
                && let Some(b) = spec.backends.get_mut(&placement.key)
            {
                b.state = BackendState::Down;
            }
        }
        modes.insert(*vip, selection.mode);
    }
    (out, modes)
}

/// The log line of a VIP whose mode changed from `old` (`None`: a new VIP) to `new`;
/// `None` when there is nothing to say (a new VIP balanced normally).
pub(super) fn mode_change(vip: &Vip, old: Option<&Mode>, new: &Mode) -> Option<String> {
    let same = old.is_some_and(|o| std::mem::discriminant(o) == std::mem::discriminant(new));
    if same || (old.is_none() && matches!(new, Mode::Normal | Mode::NoBackends)) {
        return None;
    }
    Some(match new {
        Mode::Normal => {
            format!("VIP {vip}: multi-failure policy: back to normal (healthy backends only)")
        }
        other => format!("VIP {vip}: multi-failure policy: {other}"),
    })
}

#[cfg(test)]
mod tests;
