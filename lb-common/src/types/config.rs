// SPDX-License-Identifier: MIT OR Apache-2.0
//! The `CONFIG` array's single element: the data plane's global settings.

use crate::impl_pod;

/// `LbConfig::nexthop_mode`: next-hop MAC from `bpf_fib_lookup` on the outer
/// destination (kernel routing and neighbour tables).
pub const NEXTHOP_FIB: u8 = 0;
/// `LbConfig::nexthop_mode`: every encapsulated frame goes to `gateway_mac` from
/// `if_mac` (one configured next hop, as in Katran).
pub const NEXTHOP_GATEWAY: u8 = 1;

/// `LbConfig::flags`: the controller has written a complete configuration. Until it is
/// set, VIP packets are dropped and counted (`drop_bad_config`).
pub const CONFIG_VALID: u32 = 1;

/// `LbConfig::flags`: a trace client is connected (`lb trace`): VIP packets that match
/// `TRACE_FILTER` are logged (`crate::trace`). The kernel data plane is its only
/// writer: it keeps the bit across configuration writes, as it keeps `syn_cache_mask`.
pub const CONFIG_TRACE: u32 = 2;

/// The single element of the `CONFIG` array.
///
/// Layout (64 bytes): `src_v6` 0..16, `src_v4` 16..20 (network order), `if_mac` 20..26,
/// `gateway_mac` 26..32, `mtu` 32..34, `nexthop_mode` 34, `_pad` 35, `flags` 36..40,
/// `hash_seed` 40..44, `syn_cache_mask` 44..48, `udp_timeout_ns` 48..56,
/// `nexthop_cache_ns` 56..64.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LbConfig {
    /// Outer source address for IPv6-in-IPv6, network order.
    pub src_v6: [u8; 16],
    /// Outer source address for IPv4-in-IPv4, network order.
    pub src_v4: [u8; 4],
    /// Source MAC of encapsulated frames in [`NEXTHOP_GATEWAY`] mode (the interface's
    /// MAC).
    pub if_mac: [u8; 6],
    /// Destination MAC in [`NEXTHOP_GATEWAY`] mode.
    pub gateway_mac: [u8; 6],
    /// Largest outer IP packet (L3 bytes) the LB → backend path carries; larger
    /// encapsulated packets are dropped and counted (`drop_too_big`).
    pub mtu: u16,
    /// [`NEXTHOP_FIB`] or [`NEXTHOP_GATEWAY`].
    pub nexthop_mode: u8,
    /// Explicit padding, always zero.
    pub _pad: u8,
    /// Bit set of [`CONFIG_VALID`] and [`CONFIG_TRACE`].
    pub flags: u32,
    /// Seed of the flow hash ([`crate::hash::flow_hash`]).
    pub hash_seed: u32,
    /// `SYN_CACHE` slots minus one (the slot count is a power of two): a SYN's
    /// slot is `flow_hash & syn_cache_mask`. The kernel data plane writes it from the
    /// map's size; other writers' values are replaced.
    pub syn_cache_mask: u32,
    /// UDP pins idle longer than this (ns) no longer hold: the flow is re-picked.
    pub udp_timeout_ns: u64,
    /// [`NEXTHOP_FIB`] mode: how long (ns) a CPU reuses a backend's `bpf_fib_lookup`
    /// result (`NEXTHOP_CACHE`); 0 looks the FIB up for every packet.
    pub nexthop_cache_ns: u64,
}
const _: () = assert!(size_of::<LbConfig>() == 64);

impl_pod!(LbConfig);
