//! `lb overrides [--clear]`: the runtime changes that make the running state differ from
//! the file, or (with `--clear`) their removal, through the control socket.

use std::fmt::Write as _;

use super::{Output, SocketArg, json};
use crate::control::ClientError;

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

/// Runs `lb overrides`.
///
/// # Errors
/// The daemon is unreachable or refused.
pub fn overrides(args: &OverridesArgs) -> Result<Output, ClientError> {
    let report = args.socket.client()?.overrides(args.clear)?;
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
