//! What the controller reports: the `lb status` part it knows (the VIPs, their tables
//! and backends), built from its applied state into the control protocol's types.

use super::{AppliedVip, Controller};
use crate::{
    config::Vip,
    control::{BackendStatus, VipStatus},
    dataplane::Dataplane,
};

/// The `lb status` entry of `vip`, applied as `applied`.
fn vip_status(vip: &Vip, applied: &AppliedVip) -> VipStatus {
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
    VipStatus {
        vip: vip.to_string(),
        id: applied.id,
        table_size: applied.spec.table_size,
        generation: applied.generation,
        fingerprint: table.fingerprint().to_string(),
        backends,
    }
}

impl<D: Dataplane> Controller<D> {
    /// The VIPs part of `lb status`.
    pub fn vip_statuses(&self) -> Vec<VipStatus> {
        self.vips()
            .iter()
            .map(|(vip, applied)| vip_status(vip, applied))
            .collect()
    }
}
