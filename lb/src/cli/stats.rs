//! `lb stats`: the data plane's counters (global, per VIP and per backend), through the
//! control socket.

use std::fmt::Write as _;

use super::{
    PinnedReadArgs,
    offline::{Answer, answer, ask, render},
    status::conntrack_line,
};
use crate::control::{ClientError, Stats};

/// Runs `lb stats`: from the daemon, else from the pinned datapath (counters, no
/// rates; exit 3).
///
/// # Errors
/// The daemon refused, or neither the daemon nor the pins answered.
pub fn stats(args: &PinnedReadArgs) -> Result<Answer, ClientError> {
    let socket = &args.read.socket;
    let (s, note) = ask(
        socket,
        &args.pins,
        || socket.client()?.stats(),
        |o| o.stats().map_err(|e| e.to_string()),
    )?;
    let output = render(&s, note.as_ref(), args.read.json, stats_text);
    Ok(answer(output, note.as_ref(), "stats"))
}

/// The text form of `lb stats`.
pub fn stats_text(s: &Stats) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "rates over the last {:.1} s (a window of {} s of samples; since start when the \
         daemon is younger)",
        s.interval_secs,
        crate::daemon::RATE_WINDOW.as_secs()
    );
    out.push_str(&conntrack_line(s.conntrack.as_ref()));
    let _ = writeln!(out, "verdicts:");
    for c in &s.reasons {
        let _ = writeln!(out, "  {:<20} {:>14} {:>12.1}/s", c.name, c.value, c.rate);
    }
    for v in &s.vips {
        let _ = writeln!(out, "VIP {}", v.vip);
        for c in &v.counters {
            let _ = writeln!(out, "  {:<20} {:>14} {:>12.1}/s", c.name, c.value, c.rate);
        }
        for b in &v.backends {
            let _ = write!(
                out,
                "  backend {:<30} packets {:>12} ({:.1}/s) bytes {:>14} ({:.1}/s)",
                b.backend, b.packets.value, b.packets.rate, b.bytes.value, b.bytes.rate
            );
            if let Some(n) = &b.new_flows {
                let _ = write!(out, " new flows {} ({:.1}/s)", n.value, n.rate);
            }
            if let Some(c) = &b.connections {
                let _ = write!(
                    out,
                    " connections {} established ({} idle), {} SYN-only",
                    c.established, c.idle, c.syn_only
                );
            }
            out.push('\n');
        }
    }
    out
}
