//! `[announce]`: whether and where the daemon publishes the VIP addresses it can serve,
//! for a BGP daemon (BIRD) to announce to the routers ([`Announce`]).
//!
//! The daemon keeps one host route per announced VIP address (`/32` or `/128`, type
//! `blackhole`) in the kernel routing table `table`, tagged with the route protocol
//! number `protocol`; BIRD's kernel protocol learns that table and its BGP protocol
//! exports what it learned (the book's fleets chapter, docs/src/guide/fleets.md, has
//! the configuration). The routes never forward anything: no policy rule selects the
//! table, and `blackhole` makes sure that a rule added by mistake drops VIP packets
//! rather than loop them. The protocol number marks the routes as the daemon's own, so
//! it only ever lists, adds and deletes routes of that table carrying it.

use serde::Deserialize;

use super::value::UInt;

/// `[announce]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnnounceFile {
    /// Publish the servable VIP addresses as routes in `table`.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Kernel routing table of the routes (not 0, 253, 254 or 255).
    #[serde(default)]
    pub table: Option<UInt<u32>>,
    /// Route protocol number marking the routes as the daemon's (5 to 255, not 12).
    #[serde(default)]
    pub protocol: Option<UInt<u16>>,
}

/// The validated `[announce]` section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Announce {
    /// Whether the daemon publishes routes at all (`false`: it publishes none, and BGP
    /// announcements are the operator's business; it only removes, once after
    /// attaching, the routes of `table` and `protocol` that an earlier run, stopped
    /// with its datapath forwarding, left behind).
    pub enabled: bool,
    /// The kernel routing table (`ip route ... table N`) BIRD's kernel protocol learns.
    pub table: u32,
    /// The route protocol number (`ip route ... proto N`, the netlink
    /// `rtm_protocol`) of the daemon's routes.
    pub protocol: u8,
}

impl Default for Announce {
    fn default() -> Self {
        Self {
            enabled: crate::defaults::ANNOUNCE_ENABLED,
            table: crate::defaults::ANNOUNCE_TABLE,
            protocol: crate::defaults::ANNOUNCE_PROTOCOL,
        }
    }
}
