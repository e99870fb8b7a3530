// SPDX-License-Identifier: MIT OR Apache-2.0
//! Connection tracking: the flow keys (`CONNTRACK_V6` and the flow hash, `CONNTRACK_V4`),
//! the pinned flow (`CtEntry`) and the SYN cache's slot (`SynEntry`).

use super::VipKey;
use crate::impl_pod;

/// The full 5-tuple plus family of a flow, client → VIP direction: the key of
/// `CONNTRACK_V6` and of the flow hash (IPv4 flows are keyed by [`FlowKey4`]).
///
/// The first 20 bytes are the flow's [`VipKey`], so the program looks the VIP up with a
/// reference to the flow key instead of building a second key.
///
/// Layout (40 bytes, 4-byte aligned): `vip` 0..20 (`addr` 0..16, `port` 16..18,
/// `proto` 18, `family` 19), `src` 20..36 (network order), `sport` 36..38 (network
/// order), `_pad` 38..40 (zero).
#[repr(C, align(4))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// Destination side: VIP address, port, protocol and family.
    pub vip: VipKey,
    /// Client address, network order.
    pub src: [u8; 16],
    /// Client port, network order.
    pub sport: u16,
    /// Explicit padding, always zero.
    pub _pad: [u8; 2],
}
const _: () = assert!(size_of::<FlowKey>() == 40);

impl FlowKey {
    /// The key whose 40 bytes are `words` in memory order (word 4 holds `vip.port`,
    /// `vip.proto`, `vip.family`; word 9 holds `sport` and `_pad`).
    ///
    /// The eBPF program builds keys this way: whole-word stores, where field-by-field
    /// initialisation lets LLVM turn runs of zero bytes into `memset` calls.
    #[inline(always)]
    #[must_use]
    pub fn from_words(words: [u32; 10]) -> Self {
        // SAFETY: FlowKey is repr(C), 40 bytes, without padding, and made only of
        // integers, for which every bit pattern is valid; its alignment (4) equals
        // the array's.
        unsafe { core::mem::transmute::<[u32; 10], Self>(words) }
    }

    /// The key's 40 bytes as ten `u32` in memory order (inverse of [`Self::from_words`]).
    #[inline(always)]
    #[must_use]
    pub fn words(&self) -> [u32; 10] {
        // SAFETY: as in from_words: same size and alignment, integers only.
        unsafe { core::mem::transmute::<Self, [u32; 10]>(*self) }
    }

    /// The `CONNTRACK_V4` key of this (IPv4) flow; meaningless for IPv6.
    #[inline(always)]
    #[must_use]
    pub fn v4(&self) -> FlowKey4 {
        let w = self.words();
        let sport = self.sport.to_ne_bytes();
        let dport = self.vip.port.to_ne_bytes();
        FlowKey4::from_words([
            w[5],
            w[0],
            u32::from_ne_bytes([sport[0], sport[1], dport[0], dport[1]]),
            u32::from_ne_bytes([self.vip.proto, 0, 0, 0]),
        ])
    }

    /// Whether `self` and `other` are the same flow, compared as ten 32-bit words
    /// (cheaper in BPF than a byte-wise comparison).
    #[inline(always)]
    #[must_use]
    pub fn same_as(&self, other: &FlowKey) -> bool {
        let (a, b) = (self.words(), other.words());
        let mut diff = 0;
        let mut i = 0;
        while i < 10 {
            diff |= a[i] ^ b[i];
            i += 1;
        }
        diff == 0
    }
}

/// Key of `CONNTRACK_V4`: the 5-tuple of an IPv4 flow, client → VIP direction.
///
/// Layout (16 bytes, 4-byte aligned): `src` 0..4, `dst` 4..8 (network order), `sport`
/// 8..10, `dport` 10..12 (network order), `proto` 12, `_pad` 13..16 (zero).
#[repr(C, align(4))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowKey4 {
    /// Client address.
    pub src: [u8; 4],
    /// VIP address.
    pub dst: [u8; 4],
    /// Client port.
    pub sport: u16,
    /// VIP port.
    pub dport: u16,
    /// [`PROTO_TCP`](super::PROTO_TCP) or [`PROTO_UDP`](super::PROTO_UDP).
    pub proto: u8,
    /// Explicit padding, always zero.
    pub _pad: [u8; 3],
}
const _: () = assert!(size_of::<FlowKey4>() == 16);

impl FlowKey4 {
    /// The key whose 16 bytes are `words` in memory order (whole-word stores, as for
    /// [`FlowKey::from_words`]).
    #[inline(always)]
    #[must_use]
    pub fn from_words(words: [u32; 4]) -> Self {
        // SAFETY: FlowKey4 is repr(C), 16 bytes, without padding, made only of integers
        // (every bit pattern is valid); its alignment (4) equals the array's.
        unsafe { core::mem::transmute::<[u32; 4], Self>(words) }
    }

    /// The full key of this IPv4 flow (inverse of [`FlowKey::v4`]): what the flow hash
    /// and a walk of `CONNTRACK_V4` need.
    #[must_use]
    pub fn widen(&self) -> FlowKey {
        let mut addr = [0; 16];
        addr[..4].copy_from_slice(&self.dst);
        let mut src = [0; 16];
        src[..4].copy_from_slice(&self.src);
        FlowKey {
            vip: VipKey {
                addr,
                port: self.dport,
                proto: self.proto,
                family: super::FAMILY_V4,
            },
            src,
            sport: self.sport,
            _pad: [0; 2],
        }
    }
}

/// [`CtEntry::closing`]: the connection is open (no FIN or RST seen from the client).
pub const CT_OPEN: u8 = 0;
/// [`CtEntry::closing`]: the client sent a FIN (the connection is closing; its last
/// ACKs still follow the pin).
pub const CT_FIN: u8 = 1;
/// [`CtEntry::closing`]: the client sent a RST.
pub const CT_RST: u8 = 2;

/// The unit of [`CtEntry::seen_ticks`]: `2^30` ns (about 1.07 s), the clock
/// (`bpf_ktime_get_coarse_ns`) shifted right by this many bits. A shift, not a
/// division, on the packet path.
pub const CT_TICK_SHIFT: u32 = 30;

/// [`CtEntry::seen_ticks`] of a time on the conntrack clock (ns).
#[inline(always)]
#[must_use]
pub const fn ct_ticks(ns: u64) -> u32 {
    #[expect(
        clippy::cast_possible_truncation,
        reason = "wraps after 146 years of uptime; readers compare differences"
    )]
    let ticks = (ns >> CT_TICK_SHIFT) as u32;
    ticks
}

/// Value of the conntrack maps (`CONNTRACK_V4`, `CONNTRACK_V6`).
///
/// Layout (32 bytes): `backend_id` 0..4, `vip_id` 4..8, `stamp_ns` 8..16, `epoch`
/// 16..20, `isn` 20..24, `seen_ticks` 24..28, `closing` 28, `_pad` 29..32 (zero).
/// The last two fields serve the live connection counts (`lb status`, metrics); the
/// forwarding decision never reads them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtEntry {
    /// Backend the flow is pinned to (index into `BACKENDS`).
    pub backend_id: u32,
    /// VIP the flow belongs to.
    pub vip_id: u32,
    /// `bpf_ktime_get_coarse_ns()` (CLOCK_MONOTONIC_COARSE, ns). UDP: when the flow was
    /// last seen (the idle timeout; rewritten at most once a second). TCP: when the flow
    /// was pinned to `backend_id`; only a SYN seen later ([`SynEntry::syn_ns`]) can be a
    /// new connection on the same 4-tuple.
    pub stamp_ns: u64,
    /// Epoch ([`VipEntry::epoch`](super::VipEntry::epoch)) of a table that maps this
    /// flow to `backend_id`: the table it was picked from, or a later one checked to
    /// agree. TCP only (0 for UDP).
    pub epoch: u32,
    /// TCP: the initial sequence number of the pinned connection (its SYN's, wire bytes
    /// as a native `u32`), 0 when the pin was made without seeing the SYN. A SYN with
    /// this number is a duplicate of that connection's SYN, not a new connection.
    pub isn: u32,
    /// When the flow last had a packet, in [`ct_ticks`] units; rewritten by the
    /// program at most once a tick, so a busy flow dirties its entry about once a
    /// second.
    pub seen_ticks: u32,
    /// [`CT_OPEN`], [`CT_FIN`] or [`CT_RST`]: whether the client has begun to close a
    /// TCP connection. A new connection on the 4-tuple gets a new entry (open).
    pub closing: u8,
    /// Explicit padding, always zero.
    pub _pad: [u8; 3],
}
const _: () = assert!(size_of::<CtEntry>() == 32);

/// Element of the `SYN_CACHE` array: the choice made for a TCP SYN, kept until the
/// handshake's ACK promotes it into conntrack (or another SYN takes the slot).
///
/// Layout (64 bytes, one cache line): `key` 0..40, `backend_id` 40..42, `vip_id`
/// 42..44, `epoch` 44..48, `tag` 48..52, `seq` 52..56, `syn_ns` 56..64. An all-zero
/// element is an empty slot (no real key has family 0); the program marks a used slot
/// with `vip_id` = `MAX_VIPS` (no VIP has it). Ids fit 16 bits: backend ids are below
/// `MAX_BACKENDS` (65,536), VIP ids below `MAX_VIPS`.
///
/// The array is written with plain stores by the CPUs of each part
/// ([`crate::syn_cache`]: one CPU each, or all of them with one part), so two SYNs that
/// share a slot on two CPUs at once can interleave their fields. `tag`
/// ([`SynEntry::tag_of`]) binds the fields to the key's flow hash: a reader uses a slot
/// only when its key is the packet's and its tag matches, so a torn slot reads as
/// empty.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SynEntry {
    /// The flow.
    pub key: FlowKey,
    /// Backend picked for its SYN.
    pub backend_id: u16,
    /// VIP the flow belongs to.
    pub vip_id: u16,
    /// Epoch of the table the backend was picked from.
    pub epoch: u32,
    /// [`SynEntry::tag_of`] of the writer's values.
    pub tag: u32,
    /// The SYN's sequence number (wire bytes as a native `u32`).
    pub seq: u32,
    /// `bpf_ktime_get_coarse_ns()` when the SYN was seen.
    pub syn_ns: u64,
}
const _: () = assert!(size_of::<SynEntry>() == 64);
const _: () = assert!(crate::maps::MAX_BACKENDS <= 1 << 16 && crate::maps::MAX_VIPS < 1 << 16);

impl SynEntry {
    /// The check word of a slot written for a flow whose [`crate::hash::flow_hash`] is
    /// `hash`: the fields XORed at distinct rotations, so that any mix of two writers'
    /// fields differs from both writers' tags unless the differences cancel exactly.
    #[inline(always)]
    #[must_use]
    pub fn tag_of(
        hash: u32,
        backend_id: u16,
        vip_id: u16,
        epoch: u32,
        syn_ns: u64,
        seq: u32,
    ) -> u32 {
        #[expect(
            clippy::cast_possible_truncation,
            reason = "the two halves of syn_ns are mixed in separately"
        )]
        let (lo, hi) = (syn_ns as u32, (syn_ns >> 32) as u32);
        hash ^ u32::from(backend_id).rotate_left(7)
            ^ u32::from(vip_id).rotate_left(13)
            ^ epoch.rotate_left(19)
            ^ lo.rotate_left(23)
            ^ hi.rotate_left(29)
            ^ seq.rotate_left(3)
            ^ 0x5bd1_e995
    }

    /// Whether this slot holds a SYN of `key` (whose flow hash is `hash`) written
    /// whole (see the type's documentation).
    #[inline(always)]
    #[must_use]
    pub fn holds(&self, key: &FlowKey, hash: u32) -> bool {
        self.key.same_as(key)
            && self.tag
                == Self::tag_of(
                    hash,
                    self.backend_id,
                    self.vip_id,
                    self.epoch,
                    self.syn_ns,
                    self.seq,
                )
    }

    /// Whether this held SYN opens a connection other than the one `entry` pins: seen
    /// no earlier than the pin was made, with another initial sequence number. (A
    /// duplicate of the pinned connection's own SYN carries its ISN.)
    #[inline(always)]
    #[must_use]
    pub fn is_new_connection_over(&self, entry: &CtEntry) -> bool {
        self.syn_ns >= entry.stamp_ns && self.seq != entry.isn
    }
}

impl_pod!(FlowKey, FlowKey4, CtEntry, SynEntry);
