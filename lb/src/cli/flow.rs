//! `lb flow`: where the data plane sends one client's flow to a VIP (slot, backend,
//! conntrack state), asked of the daemon through the control socket.

use std::{fmt::Write as _, net::SocketAddr};

use super::{
    SocketArg,
    offline::{Answer, PinsArg, answer, ask, render},
};
use crate::{
    config::Vip,
    control::{ClientError, FlowReport},
};

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
    /// The pinned datapath, read when no daemon answers.
    #[command(flatten)]
    pub pins: PinsArg,
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

/// Runs `lb flow`: from the daemon, else from the pinned datapath (exit 3).
///
/// # Errors
/// The daemon refused, or neither the daemon nor the pins answered.
pub fn flow(args: &FlowArgs) -> Result<Answer, ClientError> {
    let (f, note) = ask(
        &args.socket,
        &args.pins,
        || args.socket.client()?.flow(args.vip, args.client),
        |o| o.flow(&args.vip, args.client).map_err(|e| e.to_string()),
    )?;
    let output = render(&f, note.as_ref(), args.json, flow_text);
    Ok(answer(output, note.as_ref(), "flow"))
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
    if let Some(slot) = &f.fast_path {
        let _ = write!(out, "\nfast path: slot {}", slot.state);
        if let Some(clean) = &slot.clean_owner {
            let _ = write!(out, " (clean owner {clean})");
        }
        out.push_str(match slot.decided_by.as_str() {
            "table" => "; the next packet goes by the table, with no conntrack lookup",
            "pin" => "; the next packet follows the pin",
            "clean-owner" => "; the next packet misses and goes to the clean owner",
            _ => "; the next packet misses and goes to the slot's owner",
        });
    }
    if let Some(candidate) = &f.candidate {
        let _ = write!(
            out,
            "\nsecond chance: the next packet names {candidate} (the slot's clean owner) as \
             candidate"
        );
    }
    if let Some(a) = &f.affinity {
        let _ = write!(out, "\naffinity: timeout {} s", a.timeout_secs);
        match (&a.backend, a.decides) {
            (Some(b), true) => {
                let _ = write!(
                    out,
                    "; client pinned to {b} (idle {} s): its next new connection goes there",
                    a.idle_secs.unwrap_or(0)
                );
            }
            (Some(b), false) => {
                let _ = write!(
                    out,
                    "; client's pin to {b} (idle {} s) no longer decides (expired, or the \
                     backend takes no new flows): its next new connection takes the table's \
                     choice",
                    a.idle_secs.unwrap_or(0)
                );
            }
            (None, _) => out.push_str(
                "; no pin for this client: its next new connection takes the table's choice",
            ),
        }
    }
    out.push('\n');
    out
}
