//! The operator verbs that talk to a running daemon over the control socket:
//! `lb status`, `lb stats`, `lb backend`, `lb flow`, `lb overrides`; and `lb detach`,
//! which needs no daemon (it removes the pinned datapath itself). Each returns text (or
//! JSON with `--json`); the daemon's refusals come back as [`ClientError::Refused`].

use std::{fmt::Write as _, net::SocketAddr, path::PathBuf};

use serde::Serialize;

use super::Output;
use crate::{
    config::Vip,
    control::{
        BackendAction, Client, ClientError, ConnectionCounts, ConntrackStatus, FlowReport, Stats,
        Status,
    },
    defaults,
};
use lb_dataplane::pinned;
use lb_dataplane::routes::AnnounceTable;
use lb_maglev::BackendKey;

/// Where the daemon listens.
#[derive(Clone, Debug, clap::Args)]
pub struct SocketArg {
    /// Control socket of the daemon.
    #[arg(long, default_value = defaults::CONTROL_SOCKET)]
    pub socket: PathBuf,
}

impl SocketArg {
    pub(super) fn client(&self) -> Client {
        Client::new(&self.socket)
    }
}

/// `lb status` / `lb stats`.
#[derive(Clone, Debug, clap::Args)]
pub struct ReadArgs {
    /// Control socket.
    #[command(flatten)]
    pub socket: SocketArg,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `lb backend`.
#[derive(Clone, Debug, clap::Args)]
pub struct BackendArgs {
    /// add | remove | drain | undrain.
    #[arg(value_enum)]
    pub action: BackendAction,
    /// The VIP, `ADDR:PORT/PROTO` (e.g. 203.0.113.10:80/tcp).
    #[arg(long)]
    pub vip: Vip,
    /// The backend address.
    #[arg(long)]
    pub backend: BackendKey,
    /// Weight (add, undrain).
    #[arg(long)]
    pub weight: Option<u32>,
    /// Control socket.
    #[command(flatten)]
    pub socket: SocketArg,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `lb overrides`.
#[derive(Clone, Debug, clap::Args)]
pub struct OverridesArgs {
    /// Drop every runtime change and apply the file as it is.
    #[arg(long)]
    pub clear: bool,
    /// Control socket.
    #[command(flatten)]
    pub socket: SocketArg,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `lb detach`.
#[derive(Clone, Debug, clap::Args)]
pub struct DetachArgs {
    /// The interface whose datapath to remove (in the current network namespace).
    #[arg(long)]
    pub interface: String,
    /// The configuration's `pin_dir`.
    #[arg(long, default_value = defaults::PIN_DIR)]
    pub pin_dir: PathBuf,
    /// The configuration's `announce.table`: its routes of `--announce-protocol` are
    /// removed before the datapath goes.
    #[arg(long, default_value_t = defaults::ANNOUNCE_TABLE)]
    pub announce_table: u32,
    /// The configuration's `announce.protocol`.
    #[arg(long, default_value_t = defaults::ANNOUNCE_PROTOCOL)]
    pub announce_protocol: u8,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `lb detach`.
///
/// # Errors
/// Nothing pinned, a daemon controls the interface, the announcement routes or a pin
/// cannot be removed.
pub fn detach(args: &DetachArgs) -> Result<Output, pinned::DetachError> {
    let announce = AnnounceTable {
        table: args.announce_table,
        protocol: args.announce_protocol,
    };
    let detached = pinned::detach(&args.pin_dir, &args.interface, announce)?;
    Ok(if args.json {
        json(&detached)
    } else {
        Output::text(format!("{detached}\n"))
    })
}

/// Runs `lb overrides`.
///
/// # Errors
/// The daemon is unreachable or refused.
pub fn overrides(args: &OverridesArgs) -> Result<Output, ClientError> {
    let report = args.socket.client().overrides(args.clear)?;
    if args.json {
        return Ok(json(&report));
    }
    let mut out = String::new();
    for line in &report.lines {
        let _ = writeln!(out, "{line}");
    }
    if report.overrides.is_empty() {
        if !args.clear {
            let _ = writeln!(out, "no runtime changes: the running state is the file's");
        }
    } else {
        let _ = writeln!(
            out,
            "{:<28} {:<40} {:<28} FILE",
            "VIP", "BACKEND", "RUNTIME CHANGE"
        );
        for o in &report.overrides {
            let _ = writeln!(
                out,
                "{:<28} {:<40} {:<28} {}",
                o.vip, o.backend, o.change, o.file
            );
        }
    }
    Ok(Output::text(out))
}

/// `lb flow`.
#[derive(Clone, Debug, clap::Args)]
pub struct FlowArgs {
    /// The VIP, `ADDR:PORT/PROTO`.
    #[arg(long)]
    pub vip: Vip,
    /// The client, `ADDR:PORT` (IPv6 in brackets).
    #[arg(long, value_parser = parse_client)]
    pub client: SocketAddr,
    /// Control socket.
    #[command(flatten)]
    pub socket: SocketArg,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Parses `--client`.
///
/// # Errors
/// The text is not `ADDR:PORT`.
pub fn parse_client(text: &str) -> Result<SocketAddr, String> {
    text.parse()
        .map_err(|_| format!("expected ADDR:PORT (IPv6 in brackets), got {text:?}"))
}

/// `value` as pretty JSON, one line break at the end.
pub(super) fn json(value: &impl Serialize) -> Output {
    Output::text(serde_json::to_string_pretty(value).unwrap_or_default() + "\n")
}

/// Runs `lb status`.
///
/// # Errors
/// The daemon is unreachable or refused.
pub fn status(args: &ReadArgs) -> Result<Output, ClientError> {
    let s = args.socket.client().status()?;
    Ok(if args.json {
        json(&s)
    } else {
        Output::text(status_text(&s))
    })
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
    health::summary(&mut out, &s.health);
    announce::summary(&mut out, &s.announce);
    if let Some(dir) = &s.pin_dir {
        let _ = writeln!(
            out,
            "datapath pinned at {dir} (layout {})",
            s.layout.as_deref().unwrap_or("?")
        );
    }
    for v in &s.vips {
        let _ = writeln!(
            out,
            "\nVIP {} (id {}): table {} slots, generation {}, fingerprint {}",
            v.vip, v.id, v.table_size, v.generation, v.fingerprint
        );
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
fn conntrack_line(c: Option<&ConntrackStatus>) -> String {
    match c {
        Some(c) => format!(
            "conntrack: {} IPv4 + {} IPv6 entries of {} each, SYN cache {} of {} slots; \
             connections counted {:.1} s ago in {:.1} ms (idle: no packet for {} s)\n",
            c.v4_entries,
            c.v6_entries,
            c.capacity,
            c.syn_slots_used,
            c.syn_capacity,
            c.age_secs,
            c.walk_ms,
            c.idle_secs
        ),
        None => "conntrack: connections not counted yet\n".to_owned(),
    }
}

/// Runs `lb stats`.
///
/// # Errors
/// The daemon is unreachable or refused.
pub fn stats(args: &ReadArgs) -> Result<Output, ClientError> {
    let s = args.socket.client().stats()?;
    Ok(if args.json {
        json(&s)
    } else {
        Output::text(stats_text(&s))
    })
}

/// The text form of `lb stats`.
pub fn stats_text(s: &Stats) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "rates over the last {:.1} s", s.interval_secs);
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

/// Runs `lb backend`.
///
/// # Errors
/// The daemon is unreachable or refused the change.
pub fn backend(args: &BackendArgs) -> Result<Output, ClientError> {
    let change = args
        .socket
        .client()
        .backend(args.action, args.vip, args.backend, args.weight)?;
    Ok(if args.json {
        json(&change)
    } else if change.lines.is_empty() {
        Output::text("no change\n")
    } else {
        Output::text(change.lines.join("\n") + "\n")
    })
}

/// Runs `lb flow`.
///
/// # Errors
/// The daemon is unreachable or refused.
pub fn flow(args: &FlowArgs) -> Result<Output, ClientError> {
    let f = args.socket.client().flow(args.vip, args.client)?;
    Ok(if args.json {
        json(&f)
    } else {
        Output::text(flow_text(&f))
    })
}

/// The text form of `lb flow`.
pub fn flow_text(f: &FlowReport) -> String {
    let mut out = format!(
        "flow {} -> {}: slot {} -> {}",
        f.client,
        f.vip,
        f.slot,
        f.table_backend.as_deref().unwrap_or("no backend (dropped)")
    );
    match &f.pinned {
        Some(p) => {
            let _ = write!(
                out,
                "; pinned in conntrack to {} ({})",
                p.backend,
                if p.established {
                    "established"
                } else {
                    "SYN seen"
                }
            );
        }
        None => out.push_str("; not in conntrack (the next packet takes the table's choice)"),
    }
    out.push('\n');
    out
}

mod announce;
mod health;
#[cfg(test)]
mod tests;
