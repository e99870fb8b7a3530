//! `lb detach --interface IF`: removes the VIP announcement routes, then detaches the
//! XDP program at once and removes every pin of the interface in this network
//! namespace; needs no daemon, and refuses while one controls the interface (it takes
//! the directory's lock without waiting, before it touches the routes).
//!
//! The routes go first: a daemon stopped with its datapath forwarding leaves them, and
//! BIRD keeps announcing them (see `daemon::announce`). Removed, BGP withdraws the
//! addresses, so the routers stop sending before nothing serves here; packets already
//! on their way meet the host's own routing and are retransmitted by their senders once
//! the routers have converged.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use super::{Discarded, Owner, PinDir, PinError};
use crate::routes::{self, AnnounceTable, RouteError};

/// Why `lb detach` failed.
#[derive(Debug, thiserror::Error)]
pub enum DetachError {
    /// Nothing is pinned for the interface.
    #[error(
        "nothing is pinned for interface {interface} in this network namespace (looked in {})",
        .dir.display()
    )]
    NothingPinned {
        /// The interface.
        interface: String,
        /// Where it looked.
        dir: PathBuf,
    },
    /// The pin directory could not be used (a daemon holds it, no bpffs, ...).
    #[error(transparent)]
    Pin(#[from] PinError),
    /// The announcement routes could not be removed: nothing was detached, since the
    /// routers would keep sending the VIPs' traffic to a host that no longer serves it.
    #[error(
        "not detaching: the VIP announcement routes of table {} (proto {}) could not be \
         removed ({source}); remove them (`ip route flush table {} proto {}`, both \
         families) or stop BIRD, then retry",
        .routes.table, .routes.protocol, .routes.table, .routes.protocol
    )]
    Withdraw {
        /// The announcement table.
        routes: AnnounceTable,
        /// What failed.
        source: RouteError,
    },
}

/// What `lb detach` removed (its `--json` output; its text is [`std::fmt::Display`]).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Detached {
    /// The interface.
    pub interface: String,
    /// The pin directory removed (the host's view).
    pub pin_dir: String,
    /// Whether an attached XDP program was detached.
    pub detached: bool,
    /// Entries of the conntrack maps (IPv4 and IPv6) that went with it.
    pub conntrack_entries: u64,
    /// VIPs it held.
    pub vips: u64,
    /// Entries removed from the directory.
    pub pins: u64,
    /// The announcement routing table (`--announce-table`).
    pub announce_table: u32,
    /// VIP announcement routes removed from it before the datapath went.
    pub routes_withdrawn: u64,
}

impl std::fmt::Display for Detached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let gone = Discarded {
            conntrack_entries: self.conntrack_entries,
            vips: self.vips,
            detached: self.detached,
            pins: self.pins,
        };
        if self.routes_withdrawn > 0 {
            write!(
                f,
                "withdrew {} VIP announcement routes from table {}, then ",
                self.routes_withdrawn, self.announce_table
            )?;
        }
        write!(
            f,
            "detached from {} and removed the datapath pinned at {}: {gone}",
            self.interface, self.pin_dir
        )
    }
}

/// Removes the routes of `announce`, then detaches the XDP program of `interface` and
/// removes its pin directory under `pin_dir` (module documentation). Returns what was
/// withdrawn and discarded.
///
/// # Errors
/// [`DetachError`].
pub fn detach(
    pin_dir: &Path,
    interface: &str,
    announce: AnnounceTable,
) -> Result<Detached, DetachError> {
    let dir = PinDir::locate(pin_dir, interface, false)?;
    if !dir.exists() {
        return Err(DetachError::NothingPinned {
            interface: interface.to_owned(),
            dir: dir.shown(),
        });
    }
    let owner = Owner {
        pid: std::process::id(),
        exiting: false,
        socket: "(lb detach)".into(),
    };
    let _lock = dir.lock(&owner, Duration::ZERO)?;
    let withdrawn = routes::flush(announce.table, announce.protocol).map_err(|source| {
        DetachError::Withdraw {
            routes: announce,
            source,
        }
    })?;
    let gone = dir.discard(true)?;
    Ok(Detached {
        interface: interface.to_owned(),
        pin_dir: dir.shown().display().to_string(),
        detached: gone.detached,
        conntrack_entries: gone.conntrack_entries,
        vips: gone.vips,
        pins: gone.pins,
        announce_table: announce.table,
        routes_withdrawn: withdrawn as u64,
    })
}
