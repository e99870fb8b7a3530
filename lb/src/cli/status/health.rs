//! The health-check parts of `lb status`'s text: the totals line, a VIP's policy line,
//! and a table of its probed backends and unresolved next hops.

use std::fmt::Write as _;

use crate::control::{HealthSummary, VipStatus};

/// The totals line (nothing when nothing is probed or watched).
pub(super) fn summary(out: &mut String, h: &HealthSummary) {
    if h.probed > 0 || h.tunnel.encapsulated > 0 {
        let _ = writeln!(
            out,
            "health: {} backends probed, {} unhealthy, {} transitions; {} batches applied, \
             {} table changes; tunnel probes {} encapsulated, {} dropped{}",
            h.probed,
            h.unhealthy,
            h.transitions,
            h.batches,
            h.table_changes,
            h.tunnel.encapsulated,
            h.tunnel.dropped,
            if h.tunnel.attached {
                ""
            } else {
                " (tunnel program not attached)"
            }
        );
    }
    if h.nexthop_unresolved > 0 || h.nexthop_unresolved_total > 0 {
        let _ = writeln!(
            out,
            "next hops: {} backends unresolved now, {} times since start",
            h.nexthop_unresolved, h.nexthop_unresolved_total
        );
    }
}

/// A VIP's policy line when it is not balanced normally.
pub(super) fn policy(out: &mut String, v: &VipStatus) {
    if let Some(p) = v.policy.as_ref().filter(|p| p.mode != "normal") {
        let _ = writeln!(
            out,
            "  multi-failure policy: {} (panic_threshold {}%, all_down {})",
            p.detail, p.panic_threshold, p.all_down
        );
    }
}

/// The table of `v`'s probed backends, then its backends whose next hop is unresolved.
pub(super) fn backends(out: &mut String, v: &VipStatus) {
    let probed: Vec<_> = v
        .backends
        .iter()
        .filter_map(|b| b.health.as_ref().map(|h| (b, h)))
        .collect();
    if !probed.is_empty() {
        let _ = writeln!(
            out,
            "  {:<40} {:<18} {:>9} {:>11} {:>7}  {:<6} LAST ERROR",
            "HEALTH OF", "STATE", "SINCE", "LATENCY", "DOWN/UP", "PROBE"
        );
        for (b, h) in probed {
            let latency = h
                .last_latency_us
                .map_or_else(|| "-".to_owned(), |us| format!("{:.3} ms", us as f64 / 1e3));
            let error = match (&h.last_error, h.last_error_ago_ms) {
                (Some(e), Some(ago)) => format!("{e} ({} ago)", seconds(ago)),
                (Some(e), None) => e.clone(),
                _ => "-".to_owned(),
            };
            let _ = writeln!(
                out,
                "  {:<40} {:<18} {:>9} {:>11} {:>7}  {:<6} {error}",
                b.address,
                h.state,
                seconds(h.since_ms),
                latency,
                format!("{}/{}", h.went_down, h.came_up),
                h.kind.as_deref().unwrap_or("-"),
            );
        }
    }
    for b in &v.backends {
        if let Some(n) = b.nexthop.as_ref().filter(|n| !n.is_ok()) {
            let _ = writeln!(
                out,
                "  backend {}: next hop {}{}{}: its packets are dropped",
                b.address,
                n.state,
                n.via
                    .as_ref()
                    .map(|v| format!(" via {v}"))
                    .unwrap_or_default(),
                n.detail
                    .as_ref()
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default(),
            );
        }
    }
}

/// `12.3s` from milliseconds.
fn seconds(ms: u64) -> String {
    #[expect(clippy::cast_precision_loss, reason = "an age for display")]
    let s = ms as f64 / 1e3;
    format!("{s:.1}s")
}
