//! The operator verbs that talk to a running daemon over the control socket:
//! `lb status`, `lb stats`, `lb backend`, `lb flow`. Each prints text (or JSON with
//! `--json`); errors, including the daemon's, go to stderr with a non-zero exit.

use std::{fmt::Write as _, path::PathBuf};

use crate::{
    control::{self, BackendAction, ClientError, Request},
    controller::report::{FlowReport, Status},
    daemon::service::Stats,
    defaults,
};

/// Where the daemon listens.
#[derive(Clone, Debug, clap::Args)]
pub struct SocketArg {
    /// Control socket of the daemon.
    #[arg(long, default_value = defaults::CONTROL_SOCKET)]
    pub socket: PathBuf,
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
    pub vip: String,
    /// The backend address.
    #[arg(long)]
    pub backend: String,
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

/// `lb flow`.
#[derive(Clone, Debug, clap::Args)]
pub struct FlowArgs {
    /// The VIP, `ADDR:PORT/PROTO`.
    #[arg(long)]
    pub vip: String,
    /// The client, `ADDR:PORT`.
    #[arg(long)]
    pub client: String,
    /// Control socket.
    #[command(flatten)]
    pub socket: SocketArg,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

fn json(value: &serde_json::Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// Runs `lb status`; returns the text to print.
///
/// # Errors
/// The daemon is unreachable or refused.
pub fn status(args: &ReadArgs) -> Result<String, ClientError> {
    let data = control::call(&args.socket.socket, &Request::Status)?;
    if args.json {
        return Ok(json(&data));
    }
    let s: Status = serde_json::from_value(data)?;
    Ok(status_text(&s))
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
            "running state DIFFERS from the file (runtime changes; a reload replaces them)"
        } else {
            "running state matches the file"
        }
    );
    let _ = writeln!(
        out,
        "changes applied: {}, table builds: {}",
        s.changes, s.table_builds
    );
    for v in &s.vips {
        let _ = writeln!(
            out,
            "\nVIP {} (id {}): table {} slots, generation {}, fingerprint {}",
            v.vip, v.id, v.table_size, v.generation, v.fingerprint
        );
        let _ = writeln!(
            out,
            "  {:<40} {:<7} {:>10} {:>8} {:>8} {:>6}",
            "BACKEND", "STATE", "WEIGHT", "SLOTS", "SHARE", "ID"
        );
        for b in &v.backends {
            let _ = writeln!(
                out,
                "  {:<40} {:<7} {:>10} {:>8} {:>7.2}% {:>6}",
                b.address,
                b.state,
                b.weight,
                b.slots,
                b.share * 100.0,
                b.id
            );
        }
        if v.backends.is_empty() {
            let _ = writeln!(out, "  (no backends: new flows are dropped)");
        }
    }
    out
}

/// Runs `lb stats`; returns the text to print.
///
/// # Errors
/// The daemon is unreachable or refused.
pub fn stats(args: &ReadArgs) -> Result<String, ClientError> {
    let data = control::call(&args.socket.socket, &Request::Stats)?;
    if args.json {
        return Ok(json(&data));
    }
    let s: Stats = serde_json::from_value(data)?;
    let mut out = String::new();
    let _ = writeln!(out, "rates over the last {:.1} s", s.interval_secs);
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
            let _ = writeln!(
                out,
                "  backend {:<30} packets {:>12} ({:.1}/s) bytes {:>14} ({:.1}/s)",
                b.backend, b.packets.value, b.packets.rate, b.bytes.value, b.bytes.rate
            );
        }
    }
    Ok(out)
}

/// Runs `lb backend`; returns the text to print.
///
/// # Errors
/// The daemon is unreachable or refused the change.
pub fn backend(args: &BackendArgs) -> Result<String, ClientError> {
    let data = control::call(
        &args.socket.socket,
        &Request::Backend {
            action: args.action,
            vip: args.vip.clone(),
            backend: args.backend.clone(),
            weight: args.weight,
        },
    )?;
    if args.json {
        return Ok(json(&data));
    }
    let lines: Vec<String> = serde_json::from_value(data)?;
    Ok(if lines.is_empty() {
        "no change\n".to_owned()
    } else {
        lines.join("\n") + "\n"
    })
}

/// Runs `lb flow`; returns the text to print.
///
/// # Errors
/// The daemon is unreachable or refused.
pub fn flow(args: &FlowArgs) -> Result<String, ClientError> {
    let data = control::call(
        &args.socket.socket,
        &Request::Flow {
            vip: args.vip.clone(),
            client: args.client.clone(),
        },
    )?;
    if args.json {
        return Ok(json(&data));
    }
    let f: FlowReport = serde_json::from_value(data)?;
    Ok(flow_text(&f))
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
