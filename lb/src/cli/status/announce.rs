//! The announcement parts of `lb status`'s text: one line for the table and the
//! addresses, and one line per VIP saying whether its address is announced and why.

use std::fmt::Write as _;

use crate::control::{AnnounceSummary, VipStatus};

/// The announcement line (nothing when `[announce]` is off), then a warning line when
/// the table could not be written.
pub(super) fn summary(out: &mut String, a: &AnnounceSummary) {
    if !a.enabled {
        return;
    }
    let announced = a.addresses.iter().filter(|x| x.announced).count();
    let _ = writeln!(
        out,
        "announce: {announced} of {} VIP addresses announced (routes in table {}, proto {}){}; \
         {} route changes",
        a.addresses.len(),
        a.table,
        a.protocol,
        if a.attached {
            ""
        } else {
            ", data plane not attached"
        },
        a.route_changes
    );
    if let Some(e) = &a.last_error {
        let _ = writeln!(
            out,
            "announce: WARNING: the routing table is not as wanted: {e}"
        );
    }
}

/// `v`'s announcement line.
pub(super) fn vip(out: &mut String, v: &VipStatus) {
    if let Some(a) = &v.announce {
        let _ = writeln!(
            out,
            "  announce: {}: {}",
            if a.announced {
                "announced"
            } else {
                "NOT announced"
            },
            a.reason
        );
    }
}
