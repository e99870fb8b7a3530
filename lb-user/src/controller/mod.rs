//! The controller: keeps the data plane equal to a [`Desired`] state.
//!
//! [`Controller::apply`] plans a change ([`plan`]: the next state and the ordered map
//! operations, touching only what changed), runs it with an undo log, and commits the
//! new state only when every operation succeeded; a failure midway restores the
//! previous data-plane state and reports the error. Every change applied is recorded in
//! the backends' [`History`] (states and transitions). It is generic over the
//! [`Dataplane`] trait, so everything here is tested against the in-memory fake.

pub mod desired;
mod history;
mod ids;
mod plan;
mod report;

use std::{collections::BTreeMap, net::SocketAddr, sync::Arc};

use lb_common::types::BackendEntry;

pub use desired::{BackendSpec, Desired, EditError, Globals, VipSpec};
pub use history::{BackendRecord, History, REMOVED};
pub use ids::IdError;
pub use plan::ApplyError;
pub use report::{ApplyReport, TableChange, VipChange};

use crate::{
    config::Vip,
    control::{FlowReport, Pin},
    dataplane::{CtTable, Dataplane, DataplaneError},
    flow::{flow_key, slot_of},
    maglev::{BackendKey, MaglevTable},
};

/// A VIP as applied to the data plane.
#[derive(Clone)]
pub struct AppliedVip {
    /// VIP id (index into `TABLES`, `VIP_STATS`).
    pub id: u32,
    /// The spec it was built from.
    pub spec: VipSpec,
    /// The Maglev table (backend indices, fingerprint).
    pub table: Arc<MaglevTable>,
    /// Backend id of every slot, as written to the data plane.
    pub slots: Arc<Vec<u32>>,
    /// Generation of the installed table.
    pub generation: u32,
    /// Backend ids of the VIP's backends.
    pub backend_ids: BTreeMap<BackendKey, u32>,
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
        }
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
        let plan = plan::plan(&self.state, desired)?;
        let swaps_ms = plan::execute(&mut self.dp, &self.state, &plan.ops)?;
        self.state = plan.next;
        self.applied = Some(desired.clone());
        if !plan.ops.is_empty() {
            self.changes += 1;
        }
        self.history
            .observe(&self.state.vips, std::time::Instant::now());
        Ok(ApplyReport {
            swaps_ms,
            ..plan.report
        })
    }

    /// Every backend's states since start ([`History`]).
    pub fn history(&self) -> &History {
        &self.history
    }

    /// The history, to forget backends removed long enough ago.
    pub fn history_mut(&mut self) -> &mut History {
        &mut self.history
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
        let slot = slot_of(&key, seed, size).unwrap_or(0);
        let by_id = |id: u32| {
            applied
                .backend_ids
                .iter()
                .find(|(_, b)| **b == id)
                .map(|(k, _)| k.to_string())
        };
        let table_backend = applied.slots.get(slot as usize).and_then(|&id| by_id(id));
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
        Ok(FlowReport {
            vip: vip.to_string(),
            client: client.to_string(),
            slot,
            table_backend,
            pinned,
        })
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
