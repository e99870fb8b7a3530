//! `lb status`: the daemon's running state, one line per VIP and per backend (health,
//! announcements and conntrack occupancy included), through the control socket.

use std::fmt::Write as _;

use super::{
    PinnedReadArgs,
    offline::{Answer, answer, ask, render},
};
use crate::control::{
    ChangeOutcome, CleaningStatus, ClientError, ConnectionCounts, ConntrackStatus, DatapathHealth,
    Status, VipStatus,
};

/// Runs `lb status`: from the daemon, else from the pinned datapath (exit 3 either
/// way when the datapath is degraded or no daemon runs).
///
/// # Errors
/// The daemon refused, or neither the daemon nor the pins answered.
pub fn status(args: &PinnedReadArgs) -> Result<Answer, ClientError> {
    let socket = &args.read.socket;
    let (s, note) = ask(
        socket,
        &args.pins,
        || socket.client()?.status(),
        |o| Ok(o.status()),
    )?;
    let output = render(&s, note.as_ref(), args.read.json, status_text);
    let mut a = answer(output, note.as_ref(), "status");
    if a.exit == 0 && exit_status(&s) != 0 {
        a.exit = exit_status(&s);
        a.message = "lb status: the datapath is DEGRADED (see above)".to_owned();
    }
    Ok(a)
}

/// The text form of `lb status`.
pub fn status_text(s: &Status) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "interface {} ({} XDP), config {}: {}",
        s.interface,
        s.mode,
        s.config_file,
        if s.differs_from_file {
            "running state DIFFERS from the file (runtime changes, marked *; kept across reloads and restarts; `lb overrides` lists them)"
        } else {
            "running state matches the file"
        }
    );
    let _ = writeln!(
        out,
        "changes applied: {}, table builds: {}",
        s.changes, s.table_builds
    );
    out.push_str(&conntrack_line(s.conntrack.as_ref()));
    out.push_str(&cleaning_line(s.cleaning.as_ref()));
    health::summary(&mut out, &s.health);
    announce::summary(&mut out, &s.announce);
    if let Some(dir) = &s.pin_dir {
        let _ = writeln!(
            out,
            "datapath pinned at {dir} (layout {})",
            s.layout.as_deref().unwrap_or("?")
        );
        if let Some(migration) = &s.migration {
            let _ = writeln!(out, "datapath migrated from {migration} at this start");
        }
    }
    datapath_lines(&mut out, &s.datapath);
    recent_changes_line(&mut out, &s.recent_changes);
    for v in &s.vips {
        let _ = writeln!(
            out,
            "\nVIP {} (id {}): table {} slots, generation {}, fingerprint {}",
            v.vip, v.id, v.table_size, v.generation, v.fingerprint
        );
        out.push_str(&allowed_sources_line(v));
        out.push_str(&slot_states_line(v));
        out.push_str(&entry_cached_line(v));
        out.push_str(&rollout_line(v));
        out.push_str(&owners_given_up_line(v));
        out.push_str(&give_ups_line(v));
        out.push_str(&affinity_line(v));
        health::policy(&mut out, v);
        announce::vip(&mut out, v);
        let _ = writeln!(
            out,
            "  {:<40} {:<7} {:<9} {:>10} {:>8} {:>8} {:>6} {:>11} {:>8} {:>8}",
            "BACKEND",
            "STATE",
            "DATAPLANE",
            "WEIGHT",
            "SLOTS",
            "SHARE",
            "ID",
            "ESTABLISHED",
            "IDLE",
            "SYN"
        );
        for b in &v.backends {
            let c = connection_cells(b.connections.as_ref());
            let _ = writeln!(
                out,
                "  {:<40} {:<7} {:<9} {:>10} {:>8} {:>7.2}% {:>6} {:>11} {:>8} {:>8}{}",
                b.address,
                b.state,
                b.dataplane_state,
                b.weight,
                b.slots,
                b.share * 100.0,
                b.id,
                c[0],
                c[1],
                c[2],
                b.runtime
                    .as_ref()
                    .map_or(String::new(), |r| format!("  * runtime: {r}"))
            );
        }
        if v.backends.is_empty() {
            let _ = writeln!(out, "  (no backends: new flows are dropped)");
        }
        health::backends(&mut out, v);
    }
    let removed: Vec<_> = s
        .overrides
        .iter()
        .filter(|o| o.change == "removed")
        .collect();
    if !removed.is_empty() {
        let _ = writeln!(out, "\nremoved at runtime (the file has them):");
        for o in removed {
            let _ = writeln!(
                out,
                "  * {} from VIP {} (file: {})",
                o.backend, o.vip, o.file
            );
        }
    }
    out
}

/// The datapath's health: `DEGRADED` and each problem while it is, and the losses the
/// daemon found and mended since start.
fn datapath_lines(out: &mut String, d: &DatapathHealth) {
    if d.degraded {
        let _ = writeln!(out, "datapath DEGRADED:");
        for p in &d.problems {
            let _ = writeln!(out, "  - {p}");
        }
    }
    if let Some(last) = &d.last_loss {
        let _ = writeln!(
            out,
            "datapath losses since start: {} pins lost, {} pinned again, {} XDP re-attaches; last: {last}",
            d.pins_lost_total, d.pins_restored_total, d.reattached_total
        );
    }
}

/// The last changes sent with an id (at most five, latest last; `--json` has all the
/// daemon keeps): whether each applied.
fn recent_changes_line(out: &mut String, changes: &[ChangeOutcome]) {
    if changes.is_empty() {
        return;
    }
    let shown: Vec<String> = changes
        .iter()
        .rev()
        .take(5)
        .rev()
        .map(|c| match (&c.error, c.applied) {
            (_, true) => format!("{} ({}) applied", c.id, c.command),
            (Some(e), false) => format!("{} ({}) refused: {e}", c.id, c.command),
            (None, false) => format!("{} ({}) refused", c.id, c.command),
        })
        .collect();
    let _ = writeln!(out, "last changes by id: {}", shown.join("; "));
}

/// The exit status `lb status` ends with: 3 while the datapath is degraded (the
/// problems are printed), 0 otherwise.
pub fn exit_status(s: &Status) -> i32 {
    if s.datapath.degraded { 3 } else { 0 }
}

/// The ESTABLISHED, IDLE and SYN cells of a backend (`-` before the first walk).
fn connection_cells(c: Option<&ConnectionCounts>) -> [String; 3] {
    match c {
        Some(c) => [
            c.established.to_string(),
            c.idle.to_string(),
            c.syn_only.to_string(),
        ],
        None => ["-".into(), "-".into(), "-".into()],
    }
}

/// The conntrack occupancy line of `lb status` and `lb stats`.
pub(super) fn conntrack_line(c: Option<&ConntrackStatus>) -> String {
    match c {
        Some(c) => format!(
            "conntrack: {} IPv4 + {} IPv6 entries of {} each, SYN cache {} of {} slots in {} \
             part{}, \
             exceptions {} of {}; \
             connections counted {:.1} s ago in {:.1} ms (idle: no packet for {} s)\n",
            c.v4_entries,
            c.v6_entries,
            c.capacity,
            c.syn_slots_used,
            c.syn_capacity,
            c.syn_parts,
            if c.syn_parts == 1 { "" } else { "s" },
            c.exceptions_entries,
            c.exceptions_capacity,
            c.age_secs,
            c.walk_ms,
            c.idle_secs
        ),
        None => "conntrack: connections not counted yet\n".to_owned(),
    }
}

/// The fast path's cleaning line of `lb status` (nothing before the first walk).
fn cleaning_line(c: Option<&CleaningStatus>) -> String {
    let Some(c) = c else {
        return String::new();
    };
    let mut line = format!(
        "cleaning: {} slots turned clean, {} pins deleted, {} commits aborted since start; \
         last walk {:.1} s ago in {:.1} ms",
        c.cleaned_total, c.pins_deleted_total, c.aborted_total, c.age_secs, c.walk_ms
    );
    if let Some(e) = &c.last_error {
        let _ = write!(
            line,
            "; FAILING ({} failures since start, last: {e})",
            c.failures_total
        );
    }
    line.push('\n');
    line
}

/// A VIP's pending rollout (`lb reload --phase learn`), if any.
fn rollout_line(v: &VipStatus) -> String {
    v.pending_rollout.map_or_else(String::new, |n| {
        format!(
            "  rollout: phase 1 of 2 (learned): {n} slots pending their next owner, \
             named as the second chance's candidate; `lb reload` switches\n"
        )
    })
}

/// A VIP's slots that forgot an owner at a table change (rule SC5), if any.
fn owners_given_up_line(v: &VipStatus) -> String {
    match v.owners_given_up {
        0 => String::new(),
        n => format!(
            "  second chance: {n} slots forgot an owner at a table change since start (a \
             dirty slot changed again: flows begun on the owner in between have no \
             candidate)\n"
        ),
    }
}

/// A fast-path VIP whose entry is not in the VIP cache (nothing otherwise).
fn entry_cached_line(v: &VipStatus) -> String {
    if v.entry_cached == Some(false) {
        "  fast path: entry not cached (another VIP has its filter bit): its packets look \
         VIPS up\n"
            .to_owned()
    } else {
        String::new()
    }
}

/// A VIP's dirty table slots and its pins by kind (nothing before the first cleaning
/// walk).
fn slot_states_line(v: &VipStatus) -> String {
    let Some(s) = v.slot_states else {
        return String::new();
    };
    let slots = if s.dirty == 0 {
        "  slots: all clean\n".to_owned()
    } else {
        format!(
            "  slots: {} dirty ({} within the quiet time, {} held by pins or held SYNs \
             naming another backend)\n",
            s.dirty, s.recent, s.held
        )
    };
    let Some(p) = s.pins else {
        return slots;
    };
    format!(
        "{slots}  pins: {} naming another backend than the table ({} live), {} naming \
         the owner\n",
        p.other, p.other_live, p.owner
    )
}

/// A VIP's fast-path give-ups that are not zero (the residuals the data path counts).
fn give_ups_line(v: &VipStatus) -> String {
    if v.give_ups.is_empty() {
        return String::new();
    }
    let counts: Vec<String> = v
        .give_ups
        .iter()
        .map(|g| format!("{} {} ({})", g.value, g.counter, g.residual))
        .collect();
    format!("  fast-path give-ups: {}\n", counts.join(", "))
}

mod announce;
mod health;

/// A VIP's live affinity pins (`persistence_timeout_secs`), once a walk counted them.
fn affinity_line(v: &VipStatus) -> String {
    v.affinity_pins.map_or_else(String::new, |n| {
        format!("  affinity: {n} clients pinned (a new connection within the timeout)\n")
    })
}

/// The clients a VIP accepts: its `allowed_sources`, or every client.
fn allowed_sources_line(v: &VipStatus) -> String {
    if v.allowed_sources.is_empty() {
        "  allowed sources: every client\n".to_owned()
    } else {
        format!("  allowed sources: {}\n", v.allowed_sources.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vip(sources: &[&str]) -> VipStatus {
        serde_json::from_value(serde_json::json!({
            "vip": "203.0.113.10:80/tcp", "id": 0, "table_size": 1009, "generation": 1,
            "fingerprint": "", "backends": [], "allowed_sources": sources,
        }))
        .expect("a VIP's status")
    }

    #[test]
    fn a_vip_lists_its_give_ups_with_their_residuals_and_says_nothing_without() {
        let mut v = vip(&[]);
        assert_eq!(give_ups_line(&v), "");
        v.give_ups = vec![
            crate::control::GiveUpCount {
                counter: "fp_syn_maybe_split".into(),
                residual: "R1".into(),
                value: 3,
            },
            crate::control::GiveUpCount {
                counter: "fp_udp_drained_clean_owner".into(),
                residual: "R3".into(),
                value: 1,
            },
        ];
        assert_eq!(
            give_ups_line(&v),
            "  fast-path give-ups: 3 fp_syn_maybe_split (R1), 1 fp_udp_drained_clean_owner (R3)\n"
        );
    }

    #[test]
    fn a_fast_path_vip_not_in_the_vip_cache_says_so_and_a_cached_one_says_nothing() {
        let mut v = vip(&[]);
        assert_eq!(entry_cached_line(&v), "", "fast path off");
        v.entry_cached = Some(true);
        assert_eq!(entry_cached_line(&v), "");
        v.entry_cached = Some(false);
        assert_eq!(
            entry_cached_line(&v),
            "  fast path: entry not cached (another VIP has its filter bit): its packets look VIPS up\n"
        );
    }

    #[test]
    fn each_vip_says_which_clients_it_accepts() {
        assert_eq!(
            allowed_sources_line(&vip(&["192.0.2.0/24", "198.18.0.0/15"])),
            "  allowed sources: 192.0.2.0/24, 198.18.0.0/15\n"
        );
        assert_eq!(
            allowed_sources_line(&vip(&[])),
            "  allowed sources: every client\n"
        );
    }

    #[test]
    fn a_vip_with_affinity_counts_its_pinned_clients() {
        let mut v = vip(&[]);
        assert_eq!(affinity_line(&v), "");
        v.affinity_pins = Some(3);
        assert_eq!(
            affinity_line(&v),
            "  affinity: 3 clients pinned (a new connection within the timeout)\n"
        );
    }

    fn occupancy(syn_parts: u32) -> ConntrackStatus {
        ConntrackStatus {
            v4_entries: 3,
            v6_entries: 1,
            capacity: 65_536,
            syn_slots_used: 2,
            syn_capacity: 4_096,
            syn_parts,
            exceptions_entries: 0,
            exceptions_capacity: 262_144,
            walk_ms: 1.5,
            age_secs: 0.5,
            idle_secs: 300,
        }
    }

    #[test]
    fn the_conntrack_line_names_the_syn_cache_parts() {
        let one = conntrack_line(Some(&occupancy(1)));
        assert!(
            one.contains("SYN cache 2 of 4096 slots in 1 part,"),
            "{one}"
        );
        let four = conntrack_line(Some(&occupancy(4)));
        assert!(
            four.contains("SYN cache 2 of 4096 slots in 4 parts,"),
            "{four}"
        );
        assert_eq!(
            conntrack_line(None),
            "conntrack: connections not counted yet\n"
        );
    }
}
