// SPDX-License-Identifier: MIT OR Apache-2.0
//! The per-backend arrays: `BACKENDS` (address and state) and `NEXTHOP_CACHE` (the
//! next hop found for the backend's address).

use crate::impl_pod;

/// `BackendEntry::state`: id not in use; never selected.
pub const BACKEND_UNUSED: u8 = 0;
/// `BackendEntry::state`: takes new flows (through the tables) and keeps its pins.
pub const BACKEND_ACTIVE: u8 = 1;
/// `BackendEntry::state`: draining (drained, or weight 0): no new flows, keeps its
/// pins.
pub const BACKEND_DRAINING: u8 = 2;
/// `BackendEntry::state`: down, or removed (a tombstone): its pins no longer hold, and
/// those flows are re-picked from the current table.
pub const BACKEND_DOWN: u8 = 3;

/// Value of the `BACKENDS` array (index = backend id).
///
/// Layout (20 bytes, 4-byte aligned so the program reads `addr` as four words):
/// `addr` 0..16 (network order), `family` 16, `state` 17, `gue_port` 18..20 (network
/// order; 0: IP-in-IP). The bytes of `gue_port` were padding, always zero, before GUE:
/// an entry written by an older controller reads as IP-in-IP, so the layout version
/// did not change.
#[repr(C, align(4))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendEntry {
    /// Backend address (outer destination of the encapsulated packet), network order.
    pub addr: [u8; 16],
    /// [`FAMILY_V4`](super::FAMILY_V4) or [`FAMILY_V6`](super::FAMILY_V6); must match
    /// the VIP's family.
    pub family: u8,
    /// One of [`BACKEND_UNUSED`], [`BACKEND_ACTIVE`], [`BACKEND_DRAINING`],
    /// [`BACKEND_DOWN`].
    pub state: u8,
    /// The encapsulation of packets to this backend: 0 for IP-in-IP (RFC 2003,
    /// RFC 2473), else Generic UDP Encapsulation (draft-ietf-intarea-gue, variant 0) to
    /// this UDP destination port, network order. A backend id names one (VIP,
    /// backend) pair, so this is the VIP's choice (or the backend's own).
    pub gue_port: u16,
}
const _: () = assert!(size_of::<BackendEntry>() == 20);
const _: () = assert!(core::mem::offset_of!(BackendEntry, gue_port) == 18);

impl BackendEntry {
    /// Whether packets to this backend are GUE-encapsulated (else IP-in-IP).
    #[inline(always)]
    pub const fn gue(&self) -> bool {
        self.gue_port != 0
    }
}

/// Bytes of the UDP header GUE adds after the outer IP header (RFC 768).
pub const GUE_UDP_LEN: u32 = 8;
/// Bytes of the GUE variant 0 base header (draft-ietf-intarea-gue, "GUE header
/// format"): no flags, no options, so `Hlen` is 0.
pub const GUE_HDR_LEN: u32 = 4;
/// The default GUE destination port: 6080, the port Katran's `GUE_DPORT` uses (there
/// is no IANA port for GUE).
pub const GUE_DEFAULT_PORT: u16 = 6080;
/// The lowest outer UDP source port of a GUE packet: the source port is
/// `GUE_SOURCE_PORT_MIN | (flow_hash & 0x3fff)`, so 49152..=65535, the dynamic range
/// (RFC 6335 section 6), as RFC 8086 section 3.2.1 recommends for GRE-in-UDP.
pub const GUE_SOURCE_PORT_MIN: u16 = 0xc000;

/// The outer UDP source port (host order) of a GUE packet of a flow with hash `hash`.
#[inline(always)]
pub const fn gue_source_port(hash: u32) -> u16 {
    let [_, _, high, low] = (hash & 0x3fff).to_be_bytes();
    GUE_SOURCE_PORT_MIN | u16::from_be_bytes([high, low])
}

/// Element of the per-CPU `NEXTHOP_CACHE` array (index = backend id): a
/// `bpf_fib_lookup` result for the backend's address, reused until `expires_ns`.
///
/// Layout (40 bytes): `addr` 0..16 (the backend address looked up, network order),
/// `dmac` 16..22, `smac` 22..28, `ifindex` 28..32, `expires_ns` 32..40
/// (`bpf_ktime_get_coarse_ns` time). An all-zero element is empty (expired).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NextHopEntry {
    /// Backend address the entry was looked up for (a reused id with another address
    /// misses).
    pub addr: [u8; 16],
    /// Next hop's MAC.
    pub dmac: [u8; 6],
    /// Egress interface's MAC.
    pub smac: [u8; 6],
    /// Egress interface index.
    pub ifindex: u32,
    /// Reuse the entry while `bpf_ktime_get_coarse_ns()` is below this.
    pub expires_ns: u64,
}
const _: () = assert!(size_of::<NextHopEntry>() == 40);

impl_pod!(BackendEntry, NextHopEntry);
