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
/// `addr` 0..16 (network order), `family` 16, `state` 17, `_pad` 18..20 (zero).
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
    /// Explicit padding, always zero.
    pub _pad: [u8; 2],
}
const _: () = assert!(size_of::<BackendEntry>() == 20);

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
