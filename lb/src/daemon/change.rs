//! The answer of `lb backend` ([`Change`]): what an applied change did, from the
//! controller's report and its state after the change.

use std::time::Duration;

use super::drains::duration_text;
use crate::{
    config::Vip,
    control::{BackendAction, Change, TableUpdate},
    controller::{ApplyReport, BackendSpec, Controller, VipChange},
};
use lb_dataplane::Dataplane;
use lb_maglev::BackendKey;

/// One applied `lb backend` change.
pub(super) struct Edit<'a> {
    /// The verb.
    pub action: BackendAction,
    /// The VIP.
    pub vip: &'a Vip,
    /// The backend.
    pub key: BackendKey,
    /// The backend before the change (`None`: not in the VIP).
    pub before: Option<BackendSpec>,
    /// The pending timed drain's timeout after the change, if any.
    pub drain: Option<Duration>,
}

/// The first line of the answer: the backend before and after, and a pending removal.
fn summary(edit: &Edit<'_>, after: Option<BackendSpec>) -> String {
    let spec = |b: BackendSpec| format!("{} (weight {})", b.state, b.weight);
    let what = match (edit.before, after) {
        (None, Some(a)) => format!("added, {}", spec(a)),
        (Some(b), None) => format!("removed (was {})", spec(b)),
        (Some(b), Some(a)) if b == a => format!("unchanged, {}", spec(a)),
        (Some(b), Some(a)) => format!("{} -> {}", spec(b), spec(a)),
        (None, None) => "not in the VIP".to_owned(),
    };
    let mut line = format!("backend {} of VIP {}: {what}", edit.key, edit.vip);
    if let Some(t) = edit.drain {
        line.push_str(&format!(
            "; removed when its last connection ends or in {}, whichever is first",
            duration_text(t)
        ));
    }
    line
}

/// The [`Change`] of `edit`, applied as `report`.
pub(super) fn change<D: Dataplane>(
    controller: &Controller<D>,
    edit: Edit<'_>,
    report: &ApplyReport,
) -> Change {
    let (action, vip, key) = (edit.action, edit.vip, edit.key);
    let after_spec = controller
        .applied()
        .and_then(|d| d.backend(vip, &key))
        .copied();
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
        summary: summary(&edit, after_spec),
        drain_timeout_secs: edit.drain.map(|t| t.as_secs()),
        changed: report.operations > 0,
        after,
        tables,
        warnings: report.warnings.clone(),
        lines: report.lines(),
    }
}
