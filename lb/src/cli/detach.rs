//! `lb detach`: removes an interface's pinned datapath and its announcement routes
//! without a daemon (it refuses while a daemon controls the interface).

use std::path::PathBuf;

use super::{Output, json};
use crate::defaults;
use lb_dataplane::{pinned, routes::AnnounceTable};

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
