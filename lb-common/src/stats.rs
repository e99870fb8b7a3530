// SPDX-License-Identifier: MIT OR Apache-2.0
//! Counter layouts of the per-CPU statistics maps and the verdict reasons.
//!
//! All counters are `u64` in host byte order, one copy per CPU; userspace sums them.
//! Every packet the program sees increments exactly one [`Reason`] in `GLOBAL_STATS`.

use crate::{
    fastpath::{GIVE_UP_COUNT, Note},
    impl_pod,
};

/// Why the program returned the verdict it did. Index into [`GlobalStats::counters`].
///
/// `Pass*` reasons return `XDP_PASS` with the frame untouched, `Tx*`/`Redirect*` forward
/// the encapsulated frame, `Drop*` return `XDP_DROP`. The program never returns
/// `XDP_ABORTED`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// Not IPv4 or IPv6 (ARP, LLDP, ...).
    PassNotIp = 0,
    /// A frame with more than one VLAN tag (802.1ad QinQ, 802.1Q in 802.1Q) or a single
    /// 802.1ad tag: not parsed, handed to the stack. (A single 802.1Q tag is parsed and
    /// kept, see `vlan` in lb-ebpf.)
    PassVlan,
    /// IPv4/IPv6 but not for a configured VIP (other address, port or protocol).
    PassNonVip,
    /// IPv6 extension-header chain the program does not walk (ESP, unknown header, or
    /// more than `MAX_IPV6_EXT_HEADERS`).
    PassIpv6ExtHdr,
    /// Encapsulated and sent back out the receiving interface (`XDP_TX`).
    TxEncap,
    /// Encapsulated and redirected to the FIB's egress interface (`XDP_REDIRECT`).
    RedirectEncap,
    /// Frame shorter than an Ethernet header.
    DropMalformedL2,
    /// Truncated or invalid IPv4/IPv6 header or extension header.
    DropMalformedL3,
    /// Truncated TCP/UDP header of a packet to a VIP address.
    DropMalformedL4,
    /// An IP fragment other than the first to a VIP address whose first fragment was not
    /// seen (it comes later, or its `FRAGMENTS` entry was evicted): the program does not
    /// reassemble or hold fragments, so it cannot tell the fragment's backend.
    DropFragment,
    /// VIP packet for which no usable backend exists (empty or drained table).
    DropNoBackend,
    /// The encapsulated packet would exceed the configured MTU, and no ICMP answers it:
    /// ICMP generation is off, the packet is an ICMP error itself, or it is IPv4
    /// without DF (the program cannot fragment, and "fragmentation needed" means
    /// nothing to a sender that allows fragmentation).
    DropTooBig,
    /// Configuration missing or inconsistent (no config, missing/invalid table, an
    /// IPv6 VIP with an IPv4 backend).
    DropBadConfig,
    /// `bpf_xdp_adjust_head` failed (no headroom).
    DropEncapFail,
    /// FIB next hop found but its neighbour (MAC) is not resolved.
    DropFibNoNeigh,
    /// FIB lookup failed (no route, unreachable, blackhole, ...).
    DropFibFail,
    /// Encapsulated and sent back out (`XDP_TX`) by the table's or held SYN's choice,
    /// without the conntrack pin the packet would have made: the CPU's rate of new pins
    /// (`LbConfig::new_pin_interval_ns`) was exceeded, as in a flood of packets from
    /// unknown flows. The flow's next packet may make it.
    TxUnpinned,
    /// As [`Reason::TxUnpinned`], redirected to the FIB's egress interface.
    RedirectUnpinned,
    /// A VIP packet too big for the MTU once encapsulated, which may not be fragmented
    /// (IPv4 with DF, any IPv6), answered with ICMP "fragmentation needed" or ICMPv6
    /// "packet too big" from the VIP (`XDP_TX`).
    TxIcmpTooBig,
    /// An ICMP or ICMPv6 echo request to a VIP address answered by the load balancer
    /// (`XDP_TX`).
    TxIcmpEchoReply,
    /// An ICMP error about a VIP flow (destination unreachable, time exceeded, packet
    /// too big) encapsulated to the flow's backend (`XDP_TX`).
    TxIcmpForward,
    /// As [`Reason::TxIcmpForward`], redirected to the FIB's egress interface.
    RedirectIcmpForward,
    /// An IP fragment other than the first, encapsulated to the backend its first
    /// fragment went to (`XDP_TX`).
    TxFragment,
    /// As [`Reason::TxFragment`], redirected to the FIB's egress interface.
    RedirectFragment,
    /// An ICMP message the load balancer would have sent (too big, echo reply) over the
    /// rate limit: the packet that asked for it is dropped.
    DropIcmpRateLimited,
    /// An ICMP error to a VIP address whose embedded packet is truncated (less than its
    /// IP header and 8 bytes) or inconsistent (another IP version, its source not the
    /// address the error came to).
    DropIcmpMalformed,
    /// An ICMP error to a VIP address about a packet of no VIP (other port or protocol,
    /// a later fragment, more IPv6 extension headers than the walk follows): handed to
    /// the stack.
    PassIcmpUnmatched,
    /// A packet to a VIP with allowed source prefixes, from a client outside them.
    DropSourceRefused,
}

/// Number of [`Reason`] variants.
pub const REASON_COUNT: usize = 28;

/// `XDP_DROP`: the frame is dropped (`enum xdp_action`, include/uapi/linux/bpf.h).
pub const XDP_DROP: u32 = 1;
/// `XDP_PASS`: the frame goes on to the kernel's network stack.
pub const XDP_PASS: u32 = 2;
/// `XDP_TX`: the frame is sent back out of the interface it arrived on.
pub const XDP_TX: u32 = 3;
/// `XDP_REDIRECT`: the frame is sent out of the interface `bpf_redirect` named.
pub const XDP_REDIRECT: u32 = 4;

impl Reason {
    /// Every reason, in index order.
    pub const ALL: [Reason; REASON_COUNT] = [
        Reason::PassNotIp,
        Reason::PassVlan,
        Reason::PassNonVip,
        Reason::PassIpv6ExtHdr,
        Reason::TxEncap,
        Reason::RedirectEncap,
        Reason::DropMalformedL2,
        Reason::DropMalformedL3,
        Reason::DropMalformedL4,
        Reason::DropFragment,
        Reason::DropNoBackend,
        Reason::DropTooBig,
        Reason::DropBadConfig,
        Reason::DropEncapFail,
        Reason::DropFibNoNeigh,
        Reason::DropFibFail,
        Reason::TxUnpinned,
        Reason::RedirectUnpinned,
        Reason::TxIcmpTooBig,
        Reason::TxIcmpEchoReply,
        Reason::TxIcmpForward,
        Reason::RedirectIcmpForward,
        Reason::TxFragment,
        Reason::RedirectFragment,
        Reason::DropIcmpRateLimited,
        Reason::DropIcmpMalformed,
        Reason::PassIcmpUnmatched,
        Reason::DropSourceRefused,
    ];

    /// The XDP action of a packet counted under this reason: [`XDP_PASS`] for `Pass*`,
    /// [`XDP_DROP`] for `Drop*`, [`XDP_TX`] and [`XDP_REDIRECT`] for the two forwards
    /// (for a redirect the program returns `bpf_redirect`'s own answer, which is
    /// `XDP_REDIRECT` when the interface index is valid).
    ///
    /// The match has no wildcard on purpose: a new reason does not compile until it is
    /// given its action here.
    pub const fn action(self) -> u32 {
        match self {
            Reason::PassNotIp
            | Reason::PassVlan
            | Reason::PassNonVip
            | Reason::PassIpv6ExtHdr
            | Reason::PassIcmpUnmatched => XDP_PASS,
            Reason::TxEncap
            | Reason::TxIcmpTooBig
            | Reason::TxIcmpEchoReply
            | Reason::TxIcmpForward
            | Reason::TxFragment
            | Reason::TxUnpinned => XDP_TX,
            Reason::RedirectEncap
            | Reason::RedirectIcmpForward
            | Reason::RedirectFragment
            | Reason::RedirectUnpinned => XDP_REDIRECT,
            Reason::DropMalformedL2
            | Reason::DropMalformedL3
            | Reason::DropMalformedL4
            | Reason::DropFragment
            | Reason::DropNoBackend
            | Reason::DropTooBig
            | Reason::DropBadConfig
            | Reason::DropEncapFail
            | Reason::DropFibNoNeigh
            | Reason::DropFibFail
            | Reason::DropIcmpRateLimited
            | Reason::DropIcmpMalformed
            | Reason::DropSourceRefused => XDP_DROP,
        }
    }

    /// The counter's exported name (snake case, as shown by `lb stats`).
    pub const fn name(self) -> &'static str {
        match self {
            Reason::PassNotIp => "pass_not_ip",
            Reason::PassVlan => "pass_vlan",
            Reason::PassNonVip => "pass_non_vip",
            Reason::PassIpv6ExtHdr => "pass_ipv6_ext_hdr",
            Reason::TxEncap => "tx_encap",
            Reason::RedirectEncap => "redirect_encap",
            Reason::DropMalformedL2 => "drop_malformed_l2",
            Reason::DropMalformedL3 => "drop_malformed_l3",
            Reason::DropMalformedL4 => "drop_malformed_l4",
            Reason::DropFragment => "drop_fragment",
            Reason::DropNoBackend => "drop_no_backend",
            Reason::DropTooBig => "drop_too_big",
            Reason::DropBadConfig => "drop_bad_config",
            Reason::DropEncapFail => "drop_encap_fail",
            Reason::DropFibNoNeigh => "drop_fib_no_neigh",
            Reason::DropFibFail => "drop_fib_fail",
            Reason::TxUnpinned => "tx_unpinned",
            Reason::RedirectUnpinned => "redirect_unpinned",
            Reason::TxIcmpTooBig => "tx_icmp_too_big",
            Reason::TxIcmpEchoReply => "tx_icmp_echo_reply",
            Reason::TxIcmpForward => "tx_icmp_forward",
            Reason::RedirectIcmpForward => "redirect_icmp_forward",
            Reason::TxFragment => "tx_fragment",
            Reason::RedirectFragment => "redirect_fragment",
            Reason::DropIcmpRateLimited => "drop_icmp_rate_limited",
            Reason::DropIcmpMalformed => "drop_icmp_malformed",
            Reason::PassIcmpUnmatched => "pass_icmp_unmatched",
            Reason::DropSourceRefused => "drop_source_refused",
        }
    }
}

/// The single element of the per-CPU `GLOBAL_STATS` array: one packet counter per
/// [`Reason`], indexed by `reason as usize`.
///
/// Layout: `REASON_COUNT` × `u64` (224 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GlobalStats {
    /// Packets per verdict reason.
    pub counters: [u64; REASON_COUNT],
}
const _: () = assert!(size_of::<GlobalStats>() == 8 * REASON_COUNT);

impl GlobalStats {
    /// The counter of `reason`.
    pub const fn get(&self, reason: Reason) -> u64 {
        self.counters[reason as usize]
    }

    /// Total packets seen.
    pub fn total(&self) -> u64 {
        self.counters.iter().sum()
    }

    /// Adds `other` counter by counter (summing per-CPU copies).
    pub fn accumulate(&mut self, other: &Self) {
        for (total, value) in self.counters.iter_mut().zip(other.counters) {
            *total = total.wrapping_add(value);
        }
    }
}

/// Per-VIP counters (per-CPU `VIP_STATS`, index = VIP id).
///
/// Layout (152 bytes): nineteen `u64`. Counters are only ever appended: a migration
/// (`lb_dataplane::pinned::migrate`) copies an older layout's bytes as a prefix and
/// zeroes the rest.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VipStats {
    /// Packets to the VIP (forwarded or dropped).
    pub packets: u64,
    /// Bytes of those packets as received (Ethernet header included).
    pub bytes: u64,
    /// Flows that got a backend from the Maglev table: TCP SYNs (then held in the SYN
    /// cache) and packets pinned from the table.
    pub new_flows: u64,
    /// Packets forwarded by a conntrack hit.
    pub ct_hits: u64,
    /// Conntrack misses on packets that are not an initial TCP SYN (mid-flow packets
    /// of flows the LB had no state for; picked from the current table and pinned,
    /// within the rate of new pins).
    pub ct_misses_non_syn: u64,
    /// Conntrack hits on a backend that is down or removed, re-picked from the table.
    pub ct_stale_repicked: u64,
    /// UDP pins found idle longer than the timeout, re-picked.
    pub ct_udp_expired: u64,
    /// Packets to the VIP that were dropped (any drop reason).
    pub drops: u64,
    /// Held SYNs lost: a SYN took a `SYN_CACHE` slot still holding another flow's SYN
    /// whose handshake had not completed there (SYN floods, or more handshakes in
    /// flight than slots; BR-16 in `docs/src/operations/failure-scenarios.md`).
    pub ct_syn_only_evicted: u64,
    /// Packets the fast path forwarded by a clean slot's owner, with no conntrack
    /// lookup (`lb_common::fastpath`'s rule T1; VIPs with the fast path on).
    pub clean_slot_hits: u64,
    /// The fast path's give-ups (the book's residuals R1-R3), indexed by
    /// [`Note::give_up`] and named by [`Note::counter`] (`fp_syn_maybe_split`, ...):
    /// each packet the data path forwarded or dropped in a way that may break a flow
    /// today's design keeps.
    pub fp_give_ups: [u64; GIVE_UP_COUNT],
    /// Packets sent with a second-chance candidate (`crate::second_chance`, rules
    /// SC1-SC3; VIPs with `second_chance`).
    pub sc_candidates: u64,
    /// TCP misses on a dirty slot of a second-chance VIP that carried no candidate
    /// although the slot names one (rule SC5: it keeps no flows, or is of another
    /// family than the destination): the window's give-ups.
    pub sc_given_up: u64,
}
const _: () = assert!(size_of::<VipStats>() == 152);

impl VipStats {
    /// Adds `other` field by field (summing per-CPU copies).
    pub fn accumulate(&mut self, other: &Self) {
        self.packets = self.packets.wrapping_add(other.packets);
        self.bytes = self.bytes.wrapping_add(other.bytes);
        self.new_flows = self.new_flows.wrapping_add(other.new_flows);
        self.ct_hits = self.ct_hits.wrapping_add(other.ct_hits);
        self.ct_misses_non_syn = self.ct_misses_non_syn.wrapping_add(other.ct_misses_non_syn);
        self.ct_stale_repicked = self.ct_stale_repicked.wrapping_add(other.ct_stale_repicked);
        self.ct_udp_expired = self.ct_udp_expired.wrapping_add(other.ct_udp_expired);
        self.drops = self.drops.wrapping_add(other.drops);
        self.ct_syn_only_evicted = self
            .ct_syn_only_evicted
            .wrapping_add(other.ct_syn_only_evicted);
        self.clean_slot_hits = self.clean_slot_hits.wrapping_add(other.clean_slot_hits);
        self.sc_candidates = self.sc_candidates.wrapping_add(other.sc_candidates);
        self.sc_given_up = self.sc_given_up.wrapping_add(other.sc_given_up);
        for (total, value) in self.fp_give_ups.iter_mut().zip(other.fp_give_ups) {
            *total = total.wrapping_add(value);
        }
    }

    /// Counts `note` once, if it is a give-up ([`Note::give_up`]).
    #[inline(always)]
    pub fn count(&mut self, note: Note) {
        if let Some(i) = note.give_up()
            && let Some(n) = self.fp_give_ups.get_mut(i)
        {
            *n += 1;
        }
    }

    /// The fast path's give-ups by counter name ([`Note::counter`]), in
    /// [`Note::GIVE_UPS`] order.
    pub fn give_ups(&self) -> impl Iterator<Item = (Note, u64)> + '_ {
        Note::GIVE_UPS.into_iter().zip(self.fp_give_ups)
    }
}

/// Per-backend counters (per-CPU `BACKEND_STATS`, index = backend id).
///
/// Layout (24 bytes): three `u64`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendStats {
    /// Packets forwarded to the backend.
    pub packets: u64,
    /// Bytes of those packets as received (before encapsulation).
    pub bytes: u64,
    /// Flows the backend got from the VIP's table (counted as `VipStats::new_flows`).
    pub new_flows: u64,
}
const _: () = assert!(size_of::<BackendStats>() == 24);

impl BackendStats {
    /// Adds `other` field by field (summing per-CPU copies).
    pub fn accumulate(&mut self, other: &Self) {
        self.packets = self.packets.wrapping_add(other.packets);
        self.bytes = self.bytes.wrapping_add(other.bytes);
        self.new_flows = self.new_flows.wrapping_add(other.new_flows);
    }
}

impl_pod!(GlobalStats, VipStats, BackendStats);

#[cfg(test)]
mod tests;
