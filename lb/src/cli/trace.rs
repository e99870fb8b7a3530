//! `lb trace [--vip V] [--client ADDR[:PORT]] [--count N] [--json]`: one line per VIP
//! packet the XDP program handles that matches the filter, with its decision, as the
//! packets come. The daemon traces only while this command runs: it stops when the
//! command exits (after `--count` lines, on Ctrl-C, or when killed), because the
//! connection closes.

use std::io::{self, Write as _};

use super::{Output, SocketArg};
use crate::{
    config::Vip,
    control::{ClientError, TraceClient},
};

/// `lb trace`.
#[derive(Clone, Debug, clap::Args)]
pub struct TraceArgs {
    /// Only packets to this VIP, `ADDR:PORT/PROTO` (e.g. 203.0.113.10:80/tcp).
    #[arg(long)]
    pub vip: Option<Vip>,
    /// Only packets from this client, `ADDR` or `ADDR:PORT` (IPv6 in brackets with a port).
    #[arg(long)]
    pub client: Option<TraceClient>,
    /// Stop after this many packets.
    #[arg(long)]
    pub count: Option<u64>,
    /// Control socket.
    #[command(flatten)]
    pub socket: SocketArg,
    /// Print one JSON object per line (the first says what is traced).
    #[arg(long)]
    pub json: bool,
}

/// Runs `lb trace`: prints each traced packet as it comes (and flushes), until `--count`
/// packets, the daemon's end of the stream, or a closed standard output.
///
/// # Errors
/// The daemon is unreachable or refused (e.g. another trace runs).
pub fn run(args: &TraceArgs) -> Result<Output, ClientError> {
    let client = args.socket.client()?;
    let (started, events) = client.trace(args.vip, args.client)?;
    let mut out = io::stdout().lock();
    let mut write = |line: String| {
        out.write_all(line.as_bytes())
            .and_then(|()| out.write_all(b"\n"))
            .and_then(|()| out.flush())
    };
    let header = if args.json {
        serde_json::to_string(&started).unwrap_or_default()
    } else {
        format!(
            "tracing packets to {} from {} (Ctrl-C to stop)",
            started.vip.as_deref().unwrap_or("any VIP"),
            started.client.as_deref().unwrap_or("any client")
        )
    };
    if write(header).is_err() {
        return Ok(Output::default());
    }
    let limit = args.count.unwrap_or(u64::MAX);
    for (seen, event) in (1..).zip(events) {
        if limit == 0 {
            break;
        }
        let event = event?;
        let line = if args.json {
            serde_json::to_string(&event).unwrap_or_default()
        } else {
            event.to_string()
        };
        if write(line).is_err() || seen >= limit {
            break;
        }
    }
    Ok(Output::default())
}
