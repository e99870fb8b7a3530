//! The states every backend has been in since start ([`History`]): its current state,
//! how often it entered each state, and, for a removed backend, when it was removed.
//! The metrics endpoint exports it (`lb_backend_state`, `lb_backend_state_transitions_total`)
//! and keeps a removed backend's series for a while from it.
//!
//! A state is the administrative state `lb status` shows (`active`, `drain`, `down`),
//! `unhealthy` for an active backend whose probes failed (health checks), or `removed`
//! ([`state_of`]). [`History::observe`] runs after every change the controller applies,
//! whatever started it (the file, a reload, `lb backend`, a batch of health
//! transitions), so no transition is missed between two scrapes. A backend keeps its id after removal (see `ids`), and
//! its record keeps it too: re-added, it continues its counters.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use super::{AppliedVip, desired::Desired, health::Unhealthy};
use crate::config::{BackendState, Vip};
use lb_maglev::BackendKey;

/// The state of a backend that is no longer in its VIP.
pub const REMOVED: &str = "removed";

/// The state of an active backend whose probes failed.
pub const UNHEALTHY: &str = "unhealthy";

/// The state recorded for `key` of `vip`: its administrative state in `desired` (what
/// the operator asked for: file and runtime changes), or [`UNHEALTHY`] when it is
/// active and in `unhealthy`. A drained or administratively down backend shows that
/// state whatever its health: drain and down already take it out of the table, and
/// its health is in `lb status`. `None` for a backend `desired` does not have.
pub(super) fn state_of(
    desired: &Desired,
    unhealthy: &Unhealthy,
    vip: &Vip,
    key: &BackendKey,
) -> Option<String> {
    let spec = desired.vips.get(vip)?.backends.get(key)?;
    Some(match spec.state {
        BackendState::Active if unhealthy.contains(&(*vip, *key)) => UNHEALTHY.to_owned(),
        state => state.to_string(),
    })
}

/// One backend's record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendRecord {
    /// Its backend id (kept after removal).
    pub id: u32,
    /// Its state now (`removed` once removed).
    pub state: String,
    /// How often it entered each state (its first state counts once).
    pub transitions: Transitions,
    /// When it was removed, while it is.
    pub removed_at: Option<Instant>,
}

/// How often a backend entered each state: (state, count) pairs in state order. A
/// backend enters few states, so they are a short list, not a map: a map would take a
/// B-tree node of 368 bytes per backend, 18 MiB for 50,000 backends.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Transitions(Vec<(String, u64)>);

impl Transitions {
    /// Counts one more entry into `state`.
    fn enter(&mut self, state: &str) {
        match self.0.binary_search_by(|(s, _)| s.as_str().cmp(state)) {
            Ok(i) => self.0[i].1 += 1,
            Err(i) => self.0.insert(i, (state.to_owned(), 1)),
        }
    }

    /// The (state, count) pairs, in state order.
    pub fn iter(&self) -> std::slice::Iter<'_, (String, u64)> {
        self.0.iter()
    }

    /// The number of states entered.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no state was entered.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl IntoIterator for Transitions {
    type Item = (String, u64);
    type IntoIter = std::vec::IntoIter<(String, u64)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// Every backend's record, by VIP and backend.
#[derive(Clone, Debug, Default)]
pub struct History {
    records: BTreeMap<(Vip, BackendKey), BackendRecord>,
}

impl History {
    /// Records the states of the backends of `vips` (the controller's applied VIPs) at
    /// `now`, each as `state` says (its applied state when `state` has none); a backend
    /// it knew and `vips` lacks is removed.
    pub(super) fn observe(
        &mut self,
        vips: &BTreeMap<Vip, AppliedVip>,
        state: impl Fn(&Vip, &BackendKey) -> Option<String>,
        now: Instant,
    ) {
        for (vip, applied) in vips {
            for (key, spec) in &applied.spec.backends {
                let id = applied.backend_ids.get(key).copied().unwrap_or(0);
                let now_in = state(vip, key).unwrap_or_else(|| spec.state.to_string());
                self.enter(*vip, *key, id, now_in, None);
            }
        }
        let gone: Vec<(Vip, BackendKey)> = self
            .records
            .iter()
            .filter(|((vip, key), r)| {
                r.state != REMOVED
                    && !vips
                        .get(vip)
                        .is_some_and(|v| v.spec.backends.contains_key(key))
            })
            .map(|(pair, _)| *pair)
            .collect();
        for (vip, key) in gone {
            let id = self.records[&(vip, key)].id;
            self.enter(vip, key, id, REMOVED.to_owned(), Some(now));
        }
    }

    fn enter(
        &mut self,
        vip: Vip,
        key: BackendKey,
        id: u32,
        state: String,
        removed_at: Option<Instant>,
    ) {
        let record = self
            .records
            .entry((vip, key))
            .or_insert_with(|| BackendRecord {
                id,
                state: String::new(),
                transitions: Transitions::default(),
                removed_at: None,
            });
        record.id = id;
        if record.state != state {
            record.transitions.enter(&state);
            record.state = state;
            record.removed_at = removed_at;
        }
    }

    /// Forgets backends removed longer than `retention` before `now`, and removed
    /// backends whose id now belongs to another backend (its counters are no longer
    /// theirs).
    pub fn forget_removed(&mut self, now: Instant, retention: Duration) {
        let live: BTreeMap<u32, (Vip, BackendKey)> = self
            .records
            .iter()
            .filter(|(_, r)| r.state != REMOVED)
            .map(|(pair, r)| (r.id, *pair))
            .collect();
        self.records.retain(|pair, r| match r.removed_at {
            None => true,
            Some(at) => {
                now.saturating_duration_since(at) <= retention
                    && live.get(&r.id).is_none_or(|owner| owner == pair)
            }
        });
    }

    /// Every record, in VIP then backend order.
    pub fn records(&self) -> impl Iterator<Item = (&(Vip, BackendKey), &BackendRecord)> {
        self.records.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        config::BackendState,
        controller::{BackendSpec, VipSpec},
    };
    use lb_maglev::MaglevTable;

    fn vips(backends: &[(u8, BackendState)]) -> BTreeMap<Vip, AppliedVip> {
        let vip: Vip = "203.0.113.10:80/tcp".parse().unwrap();
        let key = |k: u8| -> BackendKey { format!("198.51.100.{k}").parse().unwrap() };
        let spec = VipSpec {
            table_size: 7,
            ipv6_backends: false,
            gue_port: 0,
            allowed_sources: Vec::new(),
            fast_path: false,
            second_chance: false,
            hash: lb_common::hash_fields::HashFields::default(),
            policy: lb_health::policy::FailurePolicy::default(),
            backends: backends
                .iter()
                .map(|&(k, state)| (key(k), BackendSpec { weight: 1, state }))
                .collect(),
        };
        let applied = AppliedVip {
            id: 0,
            table: std::sync::Arc::new(super::super::table::TableFacts::of(
                &MaglevTable::build(&[], 7, 0).unwrap(),
            )),
            slots: vec![0; 7].into(),
            generation: 1,
            backend_ids: backends
                .iter()
                .map(|&(k, _)| (key(k), u32::from(k)))
                .collect(),
            spec,
            unverified: false,
        };
        BTreeMap::from([(vip, applied)])
    }

    #[test]
    fn transitions_count_each_state_in_state_order() {
        let mut t = Transitions::default();
        assert!(t.is_empty());
        for state in [
            "unhealthy",
            "active",
            "drain",
            "active",
            "unhealthy",
            "active",
        ] {
            t.enter(state);
        }
        let pairs: Vec<(String, u64)> = t.clone().into_iter().collect();
        assert_eq!(
            pairs,
            [("active", 3), ("drain", 1), ("unhealthy", 2)].map(|(s, n)| (s.to_owned(), n))
        );
        assert_eq!(t.len(), 3);
        assert_eq!(t.iter().map(|(_, n)| n).sum::<u64>(), 6);
    }

    /// A record as (id, state, transitions).
    type Row = (u32, String, Vec<(String, u64)>);

    fn states(h: &History) -> Vec<Row> {
        h.records()
            .map(|(_, r)| {
                let t = r.transitions.iter().map(|(s, n)| (s.clone(), *n)).collect();
                (r.id, r.state.clone(), t)
            })
            .collect()
    }

    #[test]
    fn transitions_are_counted_and_a_removed_backend_is_kept_for_the_retention() {
        let t0 = Instant::now();
        let mut h = History::default();
        h.observe(
            &vips(&[(1, BackendState::Active), (2, BackendState::Active)]),
            |_, _| None,
            t0,
        );
        h.observe(
            &vips(&[(1, BackendState::Drain), (2, BackendState::Active)]),
            |_, _| None,
            t0,
        );
        h.observe(&vips(&[(1, BackendState::Drain)]), |_, _| None, t0);
        let s = |x: &str| x.to_owned();
        assert_eq!(
            states(&h),
            vec![
                (1, s("drain"), vec![(s("active"), 1), (s("drain"), 1)]),
                (2, s("removed"), vec![(s("active"), 1), (s("removed"), 1)]),
            ]
        );
        // Re-added: the same record (and id) goes on.
        h.observe(
            &vips(&[(1, BackendState::Drain), (2, BackendState::Active)]),
            |_, _| None,
            t0,
        );
        assert_eq!(states(&h)[1].2, vec![(s("active"), 2), (s("removed"), 1)]);
        h.observe(&vips(&[(1, BackendState::Drain)]), |_, _| None, t0);
        let retention = Duration::from_secs(600);
        h.forget_removed(t0 + Duration::from_secs(599), retention);
        assert_eq!(states(&h).len(), 2, "kept within the retention");
        h.forget_removed(t0 + Duration::from_secs(601), retention);
        assert_eq!(states(&h).len(), 1, "forgotten after it");
    }
}
