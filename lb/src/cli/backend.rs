//! `lb backend add|remove|drain|undrain`: a runtime change of one backend of a VIP,
//! through the control socket (kept across reloads and restarts; `lb overrides` lists it).

use super::{Output, SocketArg, json};
use crate::{
    config::Vip,
    control::{BackendAction, ClientError},
};
use lb_maglev::BackendKey;

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
