//! The controller: keeps the data plane equal to a [`Desired`] state.
//!
//! [`Controller::apply`] plans a change (`plan`: the next state and the ordered map
//! operations, touching only what changed), runs it with an undo log, and commits the
//! new state only when every operation succeeded; a failure midway restores the
//! previous data-plane state and reports the error. Every change applied is recorded in
//! the backends' [`History`] (states and transitions). It is generic over the
//! [`Dataplane`] trait, so everything here is tested against the in-memory fake.
//!
//! Health (`health`): the controller also holds which backends failed their probes
//! and drives the data plane to the desired state with every VIP's multi-failure policy
//! applied; [`Controller::set_health`] applies a batch of health changes as one change
//! (one table per VIP at most).
//!
//! A data plane that outlives the daemon is adopted with [`Controller::adopt`]: the
//! state is recovered from its maps and the controller's record (`record`), and the
//! first [`Controller::apply`] then writes only what differs.

pub mod desired;
pub mod diff;
mod fast_path;
mod health;
mod history;
mod ids;
pub mod overrides;
mod plan;
mod prebuild;
mod record;
mod report;
pub mod rollout;
pub mod table;

use std::{collections::BTreeMap, net::SocketAddr, sync::Arc, time::Instant};

use lb_health::policy::Mode as PolicyMode;

use lb_common::{fastpath::SlotState, types::BackendEntry};

pub use desired::{BackendSpec, Desired, EditError, Globals, VipSpec};
pub use history::{BackendRecord, History, REMOVED, Transitions, UNHEALTHY};
pub use ids::IdError;
pub use overrides::{Override, Overrides};
pub use plan::ApplyError;
pub use record::Recovery;
pub use report::{ApplyReport, ApplyTiming, TableChange, VipChange};

use crate::{
    config::{Protocol, Vip},
    control::{FlowAffinity, FlowReport, FlowSlot, Pin},
};
use lb_dataplane::{CtTable, Dataplane, DataplaneError};
use lb_maglev::BackendKey;
use lb_maglev::flow::{flow_key, table_slot_of};
use table::TableFacts;

/// A VIP as applied to the data plane.
#[derive(Clone)]
pub struct AppliedVip {
    /// VIP id (index into `TABLES`, `VIP_STATS`).
    pub id: u32,
    /// The spec it was built from.
    pub spec: VipSpec,
    /// The builder's facts about the table (backends, slot counts, fingerprint).
    pub table: Arc<TableFacts>,
    /// Backend id of every slot, as written to the data plane: the one copy of the
    /// table the controller keeps (`u16` ids, see [`table`]).
    pub slots: Arc<[u16]>,
    /// Generation of the installed table.
    pub generation: u32,
    /// Backend ids of the VIP's backends.
    pub backend_ids: BTreeMap<BackendKey, u32>,
    /// Recovered from an adopted data plane without proof that its table is the one
    /// `spec` builds: the next change rebuilds it.
    pub unverified: bool,
}

/// Everything the controller has applied.
#[derive(Clone, Default)]
pub(crate) struct State {
    globals: Option<Globals>,
    maglev_seed: u64,
    vips: BTreeMap<Vip, AppliedVip>,
    ids: ids::Ids,
    /// Every `BACKENDS` entry written, by id.
    entries: BTreeMap<u32, BackendEntry>,
    builds_total: u64,
}

/// The controller of one data plane.
pub struct Controller<D> {
    dp: D,
    state: State,
    applied: Option<Desired>,
    changes: u64,
    history: History,
    /// Backends whose probes say they are unhealthy.
    unhealthy: health::Unhealthy,
    /// How each applied VIP is balanced (its multi-failure policy's mode).
    modes: BTreeMap<Vip, PolicyMode>,
    /// Health changes applied ([`Self::set_health`] calls that changed a backend).
    health_changes: u64,
    /// Tables installed by those changes.
    health_table_changes: u64,
    /// The record the data plane holds lacks what this build records (the tables'
    /// digests, see [`record`]): the next apply stores it even when it writes nothing
    /// else.
    record_outdated: bool,
    /// Each VIP's last learn ([`rollout`]).
    learned: BTreeMap<Vip, rollout::Learned>,
}

impl<D: Dataplane> Controller<D> {
    /// A controller of `dp`, which holds nothing yet.
    pub fn new(dp: D) -> Self {
        Self {
            dp,
            state: State::default(),
            applied: None,
            changes: 0,
            history: History::default(),
            unhealthy: health::Unhealthy::new(),
            modes: BTreeMap::new(),
            health_changes: 0,
            health_table_changes: 0,
            record_outdated: false,
            learned: BTreeMap::new(),
        }
    }

    /// A controller of `dp`, with the state recovered from what `dp` already holds
    /// (an adopted data plane), and what was found. A fresh `dp` gives the same as
    /// [`Self::new`].
    ///
    /// # Errors
    /// When the data plane's maps cannot be read.
    pub fn adopt(dp: D) -> Result<(Self, Recovery), DataplaneError> {
        let (state, recovery) = record::recover(&dp)?;
        Ok((
            Self {
                dp,
                state,
                applied: None,
                changes: 0,
                history: History::default(),
                unhealthy: health::Unhealthy::new(),
                modes: BTreeMap::new(),
                health_changes: 0,
                health_table_changes: 0,
                record_outdated: recovery.record_outdated,
                learned: BTreeMap::new(),
            },
            recovery,
        ))
    }

    /// The data plane.
    pub fn dataplane(&self) -> &D {
        &self.dp
    }

    /// The data plane, mutably (attach, detach).
    pub fn dataplane_mut(&mut self) -> &mut D {
        &mut self.dp
    }

    /// Makes the data plane match `desired`, touching only what changed.
    ///
    /// # Errors
    /// A table that cannot be built, ids or table memory exhausted (nothing was written),
    /// or a failed map write (everything written before it was undone).
    pub fn apply(&mut self, desired: &Desired) -> Result<ApplyReport, ApplyError> {
        // Health is only kept for backends that are still desired.
        self.unhealthy.retain(|(vip, key)| {
            desired
                .vips
                .get(vip)
                .is_some_and(|v| v.backends.contains_key(key))
        });
        let (effective, modes) = health::effective(desired, &self.unhealthy);
        self.check_fast_path(&effective)?;
        let planning = Instant::now();
        let plan = plan::plan(&self.state, &effective)?;
        let mut timing = ApplyTiming {
            plan: planning.elapsed(),
            ..ApplyTiming::default()
        };
        let storing = Instant::now();
        if !plan.ops.is_empty() || self.record_outdated {
            // The record of the next state goes first: it binds every id the maps are
            // about to use, whatever interrupts the change.
            self.dp
                .store_record(&record::encode(&plan.next))
                .map_err(|error| ApplyError::Dataplane {
                    step: "storing the controller's record".into(),
                    error: Box::new(error),
                    undo: String::new(),
                })?;
        }
        timing.record = storing.elapsed();
        let executing = Instant::now();
        let swaps_ms = match plan::execute(&mut self.dp, &self.state, &plan.ops) {
            Ok(executed) => {
                timing.buffers = executed.buffers;
                timing.writes = executing.elapsed().saturating_sub(executed.buffers);
                executed.swaps_ms
            }
            Err(e) => {
                let _ = self.dp.store_record(&record::encode(&self.state));
                return Err(e);
            }
        };
        self.state = plan.next;
        self.record_outdated = false;
        self.applied = Some(desired.clone());
        if !plan.ops.is_empty() {
            self.changes += 1;
        }
        let mut report = ApplyReport {
            swaps_ms,
            timing,
            ..plan.report
        };
        for (vip, mode) in &modes {
            report
                .policy_changes
                .extend(health::mode_change(vip, self.modes.get(vip), mode));
        }
        self.modes = modes;
        let unhealthy = &self.unhealthy;
        self.history.observe(
            &self.state.vips,
            |vip, key| history::state_of(desired, unhealthy, vip, key),
            Instant::now(),
        );
        Ok(report)
    }

    /// As [`Self::apply`], but every backend that `desired` adds to the running state
    /// (a backend none of the applied VIPs' specs holds) and that `starts_down` selects
    /// counts as unhealthy from this change on: its entry is written, it gets no slots
    /// until a health change ([`Self::set_health`]) says it is healthy (`initial =
    /// "down"`: its first successful probe). The VIP's multi-failure policy still
    /// applies. Before the first apply (daemon start) nothing is new. The report's
    /// [`ApplyReport::awaiting_probe`] lists them.
    ///
    /// # Errors
    /// As [`Self::apply`] (nothing is held then).
    pub fn apply_new_down(
        &mut self,
        desired: &Desired,
        starts_down: impl Fn(&Vip, &BackendKey) -> bool,
    ) -> Result<ApplyReport, ApplyError> {
        let new: Vec<(Vip, BackendKey)> = match &self.applied {
            None => Vec::new(),
            Some(before) => desired
                .vips
                .iter()
                .flat_map(|(vip, spec)| spec.backends.keys().map(move |key| (*vip, *key)))
                .filter(|(vip, key)| {
                    !before
                        .vips
                        .get(vip)
                        .is_some_and(|b| b.backends.contains_key(key))
                        && starts_down(vip, key)
                })
                .collect(),
        };
        let held: Vec<(Vip, BackendKey)> = new
            .into_iter()
            .filter(|pair| self.unhealthy.insert(*pair))
            .collect();
        match self.apply(desired) {
            Ok(report) => Ok(ApplyReport {
                awaiting_probe: held,
                ..report
            }),
            Err(e) => {
                for pair in &held {
                    self.unhealthy.remove(pair);
                }
                Err(e)
            }
        }
    }

    /// Every backend's states since start ([`History`]).
    pub fn history(&self) -> &History {
        &self.history
    }

    /// The history, to forget backends removed long enough ago.
    pub fn history_mut(&mut self) -> &mut History {
        &mut self.history
    }

    /// Records health changes (VIP, backend, healthy) and applies them as one change:
    /// each VIP's table is rebuilt at most once, however many of its backends changed.
    /// Backends that are not desired are ignored. Nothing is applied when no backend's
    /// health changed.
    ///
    /// # Errors
    /// As [`Self::apply`]; the health changes stay recorded, and the next change that
    /// succeeds applies them.
    pub fn set_health(
        &mut self,
        changes: impl IntoIterator<Item = (Vip, BackendKey, bool)>,
    ) -> Result<ApplyReport, ApplyError> {
        let mut changed = false;
        for (vip, key, healthy) in changes {
            let known = self
                .applied
                .as_ref()
                .and_then(|d| d.vips.get(&vip))
                .is_some_and(|v| v.backends.contains_key(&key));
            if !known {
                continue;
            }
            changed |= if healthy {
                self.unhealthy.remove(&(vip, key))
            } else {
                self.unhealthy.insert((vip, key))
            };
        }
        let Some(desired) = self.applied.clone().filter(|_| changed) else {
            return Ok(ApplyReport::default());
        };
        self.health_changes += 1;
        let report = self.apply(&desired)?;
        self.health_table_changes += report.tables_changed() as u64;
        Ok(report)
    }

    /// Whether probes found `key` of `vip` unhealthy.
    pub fn is_unhealthy(&self, vip: &Vip, key: &BackendKey) -> bool {
        self.unhealthy.contains(&(*vip, *key))
    }

    /// How `vip` is balanced now, if it is applied.
    pub fn policy_mode(&self, vip: &Vip) -> Option<&PolicyMode> {
        self.modes.get(vip)
    }

    /// Health changes applied since start ([`Self::set_health`] calls that changed a
    /// backend's health), and the tables they installed.
    pub fn health_changes(&self) -> (u64, u64) {
        (self.health_changes, self.health_table_changes)
    }

    /// The desired state last applied.
    pub fn applied(&self) -> Option<&Desired> {
        self.applied.as_ref()
    }

    /// Number of changes applied that wrote anything.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Maglev tables built since start (identical inputs in one change share a build).
    pub fn builds_total(&self) -> u64 {
        self.state.builds_total
    }

    /// The applied VIPs.
    pub fn vips(&self) -> &BTreeMap<Vip, AppliedVip> {
        &self.state.vips
    }

    /// Where a flow from `client` to `vip` goes: the table's choice and any conntrack
    /// pin.
    ///
    /// # Errors
    /// An unknown VIP, a client of the other family, or a failed conntrack read.
    pub fn flow(&self, vip: &Vip, client: SocketAddr) -> Result<FlowReport, FlowError> {
        let applied = self
            .state
            .vips
            .get(vip)
            .ok_or(FlowError::UnknownVip(*vip))?;
        let key = flow_key(client, vip.socket_addr(), vip.proto.number())
            .ok_or(FlowError::Family(client, *vip))?;
        let seed = self.state.globals.map_or(0, |g| g.hash_seed);
        let size = u32::try_from(applied.slots.len()).unwrap_or(u32::MAX);
        let slot = table_slot_of(&key, applied.spec.hash, seed, size).unwrap_or(0);
        let by_id = |id: u32| {
            applied
                .backend_ids
                .iter()
                .find(|(_, b)| **b == id)
                .map(|(k, _)| k.to_string())
        };
        let table_backend = applied
            .slots
            .get(slot as usize)
            .and_then(|&id| by_id(u32::from(id)));
        let pinned = self
            .dp
            .lookup_flow(&key)
            .map_err(FlowError::Dataplane)?
            .map(|(table, entry)| Pin {
                backend: by_id(entry.backend_id).unwrap_or_else(|| {
                    format!("backend id {} (no longer in the VIP)", entry.backend_id)
                }),
                backend_id: entry.backend_id,
                established: table == CtTable::Established,
            });
        let fast_path = if applied.spec.fast_path {
            let state = self
                .dp
                .slot_state(applied.id, slot)
                .map_err(FlowError::Dataplane)?;
            state.map(|s| flow_slot(&s, pinned.is_some(), by_id))
        } else {
            None
        };
        let candidate = if applied.spec.second_chance
            && !applied.spec.fast_path
            && vip.proto == Protocol::Tcp
            && pinned.is_none()
        {
            self.candidate(applied.id, slot)?.and_then(&by_id)
        } else {
            None
        };
        let affinity = self.flow_affinity(applied, &key, by_id)?;
        Ok(FlowReport {
            vip: vip.to_string(),
            client: client.to_string(),
            slot,
            table_backend,
            pinned,
            fast_path,
            candidate,
            affinity,
        })
    }
}

impl<D: Dataplane> Controller<D> {
    /// The candidate (backend id) a miss on slot `slot` of VIP id `vip_id` carries to
    /// its owner (`lb_common::second_chance::offer`), if the candidate keeps flows
    /// (active or draining), as the data path requires.
    fn candidate(&self, vip_id: u32, slot: u32) -> Result<Option<u32>, FlowError> {
        let Some(state) = self
            .dp
            .slot_state(vip_id, slot)
            .map_err(FlowError::Dataplane)?
        else {
            return Ok(None);
        };
        let id = lb_common::second_chance::offer(&state, state.owner()).candidate;
        if id == 0 {
            return Ok(None);
        }
        let entry = self.dp.backend(id).map_err(FlowError::Dataplane)?;
        let keeps = entry.state == lb_common::types::BACKEND_ACTIVE
            || entry.state == lb_common::types::BACKEND_DRAINING;
        Ok(keeps.then_some(id))
    }

    /// `lb flow`'s view of the client's affinity on VIP `applied` (flow `key`), read
    /// and decided as the data plane does (`lb_common::affinity::decide`); `None`
    /// when the VIP has none. `name` gives a backend id's address.
    fn flow_affinity(
        &self,
        applied: &AppliedVip,
        key: &lb_common::types::FlowKey,
        name: impl Fn(u32) -> Option<String>,
    ) -> Result<Option<FlowAffinity>, FlowError> {
        let timeout_secs = applied.spec.hash.affinity_secs;
        if timeout_secs == 0 {
            return Ok(None);
        }
        let pin = self.dp.lookup_affinity(key).map_err(FlowError::Dataplane)?;
        Ok(Some(FlowAffinity {
            timeout_secs,
            backend: pin.map(|p| {
                name(p.backend_id).unwrap_or_else(|| {
                    format!("backend id {} (no longer in the VIP)", p.backend_id)
                })
            }),
            idle_secs: pin.map(|p| p.idle_ns / 1_000_000_000),
            decides: pin.is_some_and(|p| p.decides),
        }))
    }
}

/// `lb flow`'s view of a fast-path slot in state `s`: what decides the flow's next
/// packet other than a SYN (`pinned`: the flow has a pin or held SYN), by the rules T1,
/// D1, M1 and M2 of `lb_common::fastpath`; `name` gives a backend id's address.
fn flow_slot(s: &SlotState, pinned: bool, name: impl Fn(u32) -> Option<String>) -> FlowSlot {
    let clean_owner = (s.is_dirty() && s.clean_owner() != 0)
        .then(|| name(s.clean_owner()))
        .flatten();
    let decided_by = match (s.is_dirty(), pinned, &clean_owner) {
        (false, _, _) => "table",
        (true, true, _) => "pin",
        (true, false, Some(_)) => "clean-owner",
        (true, false, None) => "owner",
    };
    FlowSlot {
        state: if s.is_dirty() { "dirty" } else { "clean" }.to_owned(),
        clean_owner,
        decided_by: decided_by.to_owned(),
    }
}

/// Why `lb flow` could not answer.
#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    /// The VIP is not configured.
    #[error("VIP {0} is not configured")]
    UnknownVip(Vip),
    /// Client and VIP families differ.
    #[error("client {0} is not of the address family of VIP {1}")]
    Family(SocketAddr, Vip),
    /// Conntrack could not be read.
    #[error("reading conntrack: {0}")]
    Dataplane(DataplaneError),
}

#[cfg(test)]
mod tests;
