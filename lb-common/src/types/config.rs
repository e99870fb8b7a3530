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
/// `LbConfig::flags`: answer a VIP packet that exceeds `mtu` once encapsulated and may
/// not be fragmented (IPv4 with DF, any IPv6) with ICMP "fragmentation needed" (type 3
/// code 4, RFC 1191) or ICMPv6 "packet too big" (type 2, RFC 4443, RFC 8201). Clear:
/// drop it (`drop_too_big`).
pub const CONFIG_ICMP_TOO_BIG: u32 = 1 << 1;
/// `LbConfig::flags`: answer ICMP and ICMPv6 echo requests to VIP addresses.
pub const CONFIG_ICMP_ECHO: u32 = 1 << 2;
/// `LbConfig::flags`: at least one VIP has allowed source prefixes; every VIP packet is
/// then checked against `SOURCE_FILTER` (and, where its bit is set, `SOURCE_RANGES`).
pub const CONFIG_SOURCE_RANGES: u32 = 1 << 3;
/// `LbConfig::flags`: the outer IPv4 source of a flow is `src_prefix_v4` with the host
/// bits `src_host_mask_v4` taken from the flow hash.
pub const CONFIG_SOURCE_PREFIX_V4: u32 = 1 << 4;
/// `LbConfig::flags`: the outer IPv6 source of a flow is `src_prefix_v6` with the host
/// bits `src_host_mask_v6` of its last word taken from the flow hash.
pub const CONFIG_SOURCE_PREFIX_V6: u32 = 1 << 5;
/// `LbConfig::flags`: the outer IPv6 flow label is the flow hash's low 20 bits
/// (RFC 6438); clear: copied from an IPv6 inner header (an IPv4 inner packet, in
/// IPv4-in-IPv6, always gets the hash's).
pub const CONFIG_FLOW_LABEL_HASH: u32 = 1 << 6;

/// `LbConfig::flags`: a trace client is connected (`lb trace`): VIP packets that match
/// `TRACE_FILTER` are logged (`crate::trace`). The kernel data plane is its only
/// writer: it keeps the bit across configuration writes, as it keeps `syn_cache_mask`
/// and `syn_cache_part_bits`.
pub const CONFIG_TRACE: u32 = 1 << 7;
// Each flag has a bit of its own.
const _: () = {
    let flags = [
        CONFIG_VALID,
        CONFIG_ICMP_TOO_BIG,
        CONFIG_ICMP_ECHO,
        CONFIG_SOURCE_RANGES,
        CONFIG_SOURCE_PREFIX_V4,
        CONFIG_SOURCE_PREFIX_V6,
        CONFIG_FLOW_LABEL_HASH,
        CONFIG_TRACE,
    ];
    let mut seen = 0;
    let mut i = 0;
    while i < flags.len() {
        assert!(flags[i].count_ones() == 1 && seen & flags[i] == 0);
        seen |= flags[i];
        i += 1;
    }
};

/// The single element of the `CONFIG` array.
///
/// Layout (128 bytes): `src_v6` 0..16, `src_v4` 16..20 (network order), `if_mac`
/// 20..26, `gateway_mac` 26..32, `mtu` 32..34, `nexthop_mode` 34, `syn_cache_part_bits`
/// 35 (explicit padding before issue 35, so zero in every older configuration), `flags`
/// 36..40, `hash_seed` 40..44, `syn_cache_mask` 44..48, `udp_timeout_ns` 48..56,
/// `nexthop_cache_ns` 56..64, `icmp_interval_ns` 64..72, `icmp_burst_ns` 72..80,
/// `src_prefix_v6` 80..96, `src_prefix_v4` 96..100, `src_host_mask_v4` 100..104,
/// `src_host_mask_v6` 104..108 (network order), `_pad2` 108..112,
/// `new_pin_interval_ns` 112..120, `new_pin_burst_ns` 120..128.
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
    /// log2 of the number of parts of `SYN_CACHE`, one per CPU
    /// ([`crate::syn_cache::slot_index`]): CPU `c` keeps its SYNs in part
    /// `c mod 2^syn_cache_part_bits`. 0: one part shared by all CPUs (every configuration
    /// written before this field existed, when byte 35 was padding). Like
    /// `syn_cache_mask`, the kernel data plane writes it ([`crate::syn_cache::part_bits`]
    /// of the map's size and the possible CPUs, on an interface with more than one
    /// receive queue; 0 otherwise); other writers' values are replaced.
    pub syn_cache_part_bits: u8,
    /// Bit set of [`CONFIG_VALID`] and [`CONFIG_TRACE`].
    pub flags: u32,
    /// Seed of the flow hash ([`crate::hash::flow_hash`]).
    pub hash_seed: u32,
    /// `SYN_CACHE` slots minus one (the slot count is a power of two): a SYN's
    /// slot is `flow_hash & syn_cache_mask` within its CPU's part
    /// ([`crate::syn_cache::slot_index`]). The kernel data plane writes it from the
    /// map's size; other writers' values are replaced.
    pub syn_cache_mask: u32,
    /// UDP pins idle longer than this (ns) no longer hold: the flow is re-picked.
    pub udp_timeout_ns: u64,
    /// [`NEXTHOP_FIB`] mode: how long (ns) a CPU reuses a backend's `bpf_fib_lookup`
    /// result (`NEXTHOP_CACHE`); 0 looks the FIB up for every packet.
    pub nexthop_cache_ns: u64,
    /// Rate limit of the ICMP messages the program sends (too big, echo replies), per
    /// CPU and kind: the emission interval (ns, `1e9 / rate`) of the generic cell rate
    /// algorithm (GCRA, ITU-T I.371). 0: no limit (the controller always writes one).
    pub icmp_interval_ns: u64,
    /// How far (ns) a burst may run ahead of the rate: `(burst - 1) * icmp_interval_ns`.
    pub icmp_burst_ns: u64,
    /// [`CONFIG_SOURCE_PREFIX_V6`]: the prefix of outer IPv6 sources, network order
    /// (host bits zero).
    pub src_prefix_v6: [u8; 16],
    /// [`CONFIG_SOURCE_PREFIX_V4`]: the prefix of outer IPv4 sources, network order
    /// (host bits zero).
    pub src_prefix_v4: [u8; 4],
    /// The host bits of the IPv4 source prefix, as a mask in network order (the flow
    /// hash, in network order, is ANDed with it).
    pub src_host_mask_v4: u32,
    /// The host bits of the last 32-bit word of the IPv6 source prefix, as a mask in
    /// network order; host bits above the last word stay zero.
    pub src_host_mask_v6: u32,
    /// Explicit padding, always zero.
    pub _pad2: u32,
    /// The rate limit of new conntrack pins, per CPU: the emission interval (ns,
    /// `1e9 / rate`) of the generic cell rate algorithm (GCRA, ITU-T I.371) that a
    /// packet without a pin must pass to get one (a TCP mid-flow miss, a new UDP flow, a
    /// handshake's ACK promoting its SYN). Beyond the rate the packet is forwarded to the
    /// same backend without a pin (`tx_unpinned`), so a flood of packets from unknown
    /// flows cannot evict established flows faster than the rate. 0: no limit.
    pub new_pin_interval_ns: u64,
    /// How far (ns) a burst of new pins may run ahead of the rate
    /// (`(burst - 1) * new_pin_interval_ns`).
    pub new_pin_burst_ns: u64,
}
const _: () = assert!(size_of::<LbConfig>() == 128);

impl_pod!(LbConfig);
