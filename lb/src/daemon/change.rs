//! The answer of `lb backend` ([`Change`]): what an applied change did, from the
//! controller's report and its state after the change.

use crate::{
    config::Vip,
    control::{BackendAction, Change, TableUpdate},
    controller::{ApplyReport, Controller, VipChange},
};
use lb_dataplane::Dataplane;
use lb_maglev::BackendKey;

/// The [`Change`] of `action` on backend `key` of `vip`, applied as `report`.
pub(super) fn change<D: Dataplane>(
    controller: &Controller<D>,
    action: BackendAction,
    vip: &Vip,
    key: BackendKey,
    report: &ApplyReport,
) -> Change {
    let address = key.to_string();
    let after = controller
        .vip_statuses()
        .into_iter()
        .filter(|v| v.vip == vip.to_string())
        .flat_map(|v| v.backends)
        .find(|b| b.address == address);
    let tables = report
        .changes
        .iter()
        .filter_map(|c| match c {
            VipChange::Table(t) => Some(TableUpdate {
                vip: t.vip.to_string(),
                generation: t.generation,
                fingerprint: t.fingerprint.to_string(),
                table_size: t.table_size,
                backends: t.backends,
                in_table: t.in_table,
                slots_moved: t.changed_slots,
                build_ms: t.build_ms,
            }),
            VipChange::Removed(_) => None,
        })
        .collect();
    Change {
        action,
        vip: vip.to_string(),
        backend: address,
        changed: report.operations > 0,
        after,
        tables,
        warnings: report.warnings.clone(),
        lines: report.lines(),
    }
}
