//! What the controller reports to operators (`lb status`, `lb stats`, `lb flow`), as
//! serialisable structs; the CLI prints them as text or JSON.

use serde::{Deserialize, Serialize};

use super::{AppliedVip, Controller};
use crate::{config::Vip, dataplane::Dataplane};

/// `lb status`.
#[derive(Clone, Debug, Serialize, Deserialize)]
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
}

/// A VIP in `lb status`.
#[derive(Clone, Debug, Serialize, Deserialize)]
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
    /// Backends.
    pub backends: Vec<BackendStatus>,
}

/// A backend in `lb status`.
#[derive(Clone, Debug, Serialize, Deserialize)]
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
}

/// `lb flow`.
#[derive(Clone, Debug, Serialize, Deserialize)]
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
}

/// A conntrack pin.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Pin {
    /// Backend address.
    pub backend: String,
    /// Backend id.
    pub backend_id: u32,
    /// Established (`true`) or SYN-only.
    pub established: bool,
}

impl VipStatus {
    fn of(vip: &Vip, applied: &AppliedVip) -> Self {
        let table = &applied.table;
        let total = applied.slots.len().max(1);
        let slots_of = |key| {
            table
                .backends()
                .iter()
                .position(|b| b.key == key)
                .and_then(|i| table.slot_counts().get(i).copied())
                .filter(|_| !table.is_empty())
                .unwrap_or(0)
        };
        let backends = applied
            .spec
            .backends
            .iter()
            .map(|(key, spec)| {
                let slots = slots_of(*key);
                #[expect(clippy::cast_precision_loss, reason = "a share for display")]
                let share = f64::from(slots) / total as f64;
                BackendStatus {
                    address: key.to_string(),
                    id: applied.backend_ids.get(key).copied().unwrap_or(0),
                    state: spec.state.to_string(),
                    weight: spec.weight,
                    slots,
                    share,
                }
            })
            .collect();
        Self {
            vip: vip.to_string(),
            id: applied.id,
            table_size: applied.spec.table_size,
            generation: applied.generation,
            fingerprint: table.fingerprint().to_string(),
            backends,
        }
    }
}

impl<D: Dataplane> Controller<D> {
    /// The VIPs part of `lb status`.
    pub fn vip_statuses(&self) -> Vec<VipStatus> {
        self.vips()
            .iter()
            .map(|(vip, applied)| VipStatus::of(vip, applied))
            .collect()
    }
}
