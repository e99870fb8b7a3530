//! `lb stats`: the data plane's counters (global, per VIP and per backend), through the
//! control socket.

use std::fmt::Write as _;

use super::{Output, ReadArgs, json, status::conntrack_line};
use crate::control::{ClientError, Stats};

/// Runs `lb stats`.
///
/// # Errors
/// The daemon is unreachable or refused.
pub fn stats(args: &ReadArgs) -> Result<Output, ClientError> {
    let s = args.socket.client()?.stats()?;
    Ok(if args.json {
        json(&s)
    } else {
        Output::text(stats_text(&s))
    })
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
