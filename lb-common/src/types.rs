//! Map keys and values shared by the XDP program and userspace.
//!
//! Addresses are 16-byte arrays in network byte order; an IPv4 address occupies the first
//! four bytes and the other twelve are zero, and the `family` field ([`FAMILY_V4`] or
//! [`FAMILY_V6`]) tells which. Ports are in network byte order as on the wire (the
//! `u16` holds the two wire bytes in memory order). Other integers are in host byte order.

use crate::impl_pod;

/// `family` value of an IPv4 key or entry.
pub const FAMILY_V4: u8 = 4;
/// `family` value of an IPv6 key or entry.
pub const FAMILY_V6: u8 = 6;

/// IP protocol number of TCP (IANA).
pub const PROTO_TCP: u8 = 6;
/// IP protocol number of UDP (IANA).
pub const PROTO_UDP: u8 = 17;

/// Key of the `VIPS` map: a VIP is (address, port, protocol, family).
///
/// Layout (20 bytes, 4-byte aligned): `addr` 0..16 (network order), `port` 16..18
/// (network order), `proto` 18, `family` 19.
#[repr(C, align(4))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VipKey {
    /// VIP address, network byte order (IPv4 in bytes 0..4, rest zero).
    pub addr: [u8; 16],
    /// Destination port, network byte order.
    pub port: u16,
    /// [`PROTO_TCP`] or [`PROTO_UDP`].
    pub proto: u8,
    /// [`FAMILY_V4`] or [`FAMILY_V6`].
    pub family: u8,
}
const _: () = assert!(size_of::<VipKey>() == 20);

/// Value of the `VIPS` map.
///
/// Layout (12 bytes): `vip_id` 0..4, `flags` 4..8, `epoch` 8..12. One hash-map update
/// replaces the whole value, so a packet reads the live table buffer and its epoch as a
/// consistent pair.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VipEntry {
    /// Index into `VIP_STATS`, and (times two) into `TABLES`; `0..MAX_VIPS`.
    pub vip_id: u32,
    /// Bit set: [`VIP_TABLE_B`]; other bits zero.
    pub flags: u32,
    /// Table epoch: a data-plane-wide counter, incremented by every table install of
    /// any VIP (never reused, never 0 for an installed table). Conntrack entries record
    /// the epoch of the table their backend came from ([`CtEntry::epoch`]).
    pub epoch: u32,
}

/// Element of the `VIP_INFO` array (index = VIP id).
///
/// Layout (28 bytes): `key` 0..20, `live` 20..24, `epoch` 24..28.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VipInfo {
    /// The VIP that has this id.
    pub key: VipKey,
    /// 1 while the VIP is configured, 0 otherwise.
    pub live: u32,
    /// Epoch of the VIP's live table ([`VipEntry::epoch`]). Written before the `VIPS`
    /// entry switches to a new table, so it is never older than the table packets
    /// pick from; the established-flow path only trusts a TCP conntrack entry whose
    /// epoch equals it.
    pub epoch: u32,
}
const _: () = assert!(size_of::<VipInfo>() == 28);

impl VipKey {
    /// Whether `self` and `other` are the same VIP, compared as five 32-bit words
    /// (cheaper in BPF than a byte-wise comparison).
    #[inline(always)]
    pub fn same_as(&self, other: &VipKey) -> bool {
        let a = self.words();
        let b = other.words();
        (a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]) | (a[4] ^ b[4]) == 0
    }

    /// The key's 20 bytes as five `u32` (memory order).
    #[inline(always)]
    pub fn words(&self) -> [u32; 5] {
        let a = &self.addr;
        let p = self.port.to_ne_bytes();
        [
            u32::from_ne_bytes([a[0], a[1], a[2], a[3]]),
            u32::from_ne_bytes([a[4], a[5], a[6], a[7]]),
            u32::from_ne_bytes([a[8], a[9], a[10], a[11]]),
            u32::from_ne_bytes([a[12], a[13], a[14], a[15]]),
            u32::from_ne_bytes([p[0], p[1], self.proto, self.family]),
        ]
    }
}

/// `VipEntry::flags`: the VIP's live table is buffer B (`TABLES[2 * vip_id + 1]`);
/// clear means buffer A (`TABLES[2 * vip_id]`).
pub const VIP_TABLE_B: u32 = 1;

impl VipEntry {
    /// Index of the VIP's live table in `TABLES`.
    pub const fn table_index(&self) -> u32 {
        self.vip_id * 2 + (self.flags & VIP_TABLE_B)
    }
}
const _: () = assert!(size_of::<VipEntry>() == 12);

/// Key of the `VIP_ADDRS` map: a VIP address without port and protocol.
///
/// Layout (20 bytes): `addr` 0..16 (network order), `family` 16, `_pad` 17..20 (zero).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VipAddrKey {
    /// Address, network byte order (IPv4 in bytes 0..4, rest zero).
    pub addr: [u8; 16],
    /// [`FAMILY_V4`] or [`FAMILY_V6`].
    pub family: u8,
    /// Explicit padding, always zero.
    pub _pad: [u8; 3],
}
const _: () = assert!(size_of::<VipAddrKey>() == 20);

/// `BackendEntry::state`: id not in use; never selected.
pub const BACKEND_UNUSED: u8 = 0;
/// `BackendEntry::state`: takes new flows (through the tables) and keeps its CT flows.
pub const BACKEND_ACTIVE: u8 = 1;
/// `BackendEntry::state`: drained (weight 0): no new flows, keeps its CT flows.
pub const BACKEND_DRAINING: u8 = 2;
/// `BackendEntry::state`: removed or down: its CT entries are no longer honoured and
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
    /// [`FAMILY_V4`] or [`FAMILY_V6`]; must match the VIP's family.
    pub family: u8,
    /// One of [`BACKEND_UNUSED`], [`BACKEND_ACTIVE`], [`BACKEND_DRAINING`],
    /// [`BACKEND_DOWN`].
    pub state: u8,
    /// Explicit padding, always zero.
    pub _pad: [u8; 2],
}
const _: () = assert!(size_of::<BackendEntry>() == 20);

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
    /// [`PROTO_TCP`] or [`PROTO_UDP`].
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
}

/// Value of the conntrack maps (`CONNTRACK_V4`, `CONNTRACK_V6`).
///
/// Layout (24 bytes): `backend_id` 0..4, `vip_id` 4..8, `stamp_ns` 8..16, `epoch`
/// 16..20, `isn` 20..24.
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
    /// Epoch ([`VipEntry::epoch`]) of a table that maps this flow to `backend_id`: the
    /// table it was picked from, or a later one checked to agree. TCP only (0 for UDP).
    pub epoch: u32,
    /// TCP: the initial sequence number of the pinned connection (its SYN's, wire bytes
    /// as a native `u32`), 0 when the pin was made without seeing the SYN. A SYN with
    /// this number is a duplicate of that connection's SYN, not a new connection.
    pub isn: u32,
}
const _: () = assert!(size_of::<CtEntry>() == 24);

/// Element of the `SYN_CACHE` array: the choice made for a TCP SYN, kept until the
/// handshake's ACK promotes it into conntrack (or another SYN takes the slot).
///
/// Layout (64 bytes, one cache line): `key` 0..40, `backend_id` 40..42, `vip_id`
/// 42..44, `epoch` 44..48, `tag` 48..52, `seq` 52..56, `syn_ns` 56..64. An all-zero
/// element is an empty slot (no real key has family 0); the program marks a used slot
/// with `vip_id` = `MAX_VIPS` (no VIP has it). Ids fit 16 bits: backend ids are below
/// `MAX_BACKENDS` (65,536), VIP ids below `MAX_VIPS`.
///
/// The array is shared by all CPUs and written with plain stores, so two SYNs that
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

/// `LbConfig::nexthop_mode`: next-hop MAC from `bpf_fib_lookup` on the outer
/// destination (kernel routing and neighbour tables).
pub const NEXTHOP_FIB: u8 = 0;
/// `LbConfig::nexthop_mode`: every encapsulated frame goes to `gateway_mac` from
/// `if_mac` (one configured next hop, as in Katran).
pub const NEXTHOP_GATEWAY: u8 = 1;

/// `LbConfig::flags`: the controller has written a complete configuration. Until it is
/// set, VIP packets are dropped and counted (`drop_bad_config`).
pub const CONFIG_VALID: u32 = 1;

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
    /// Bit set of [`CONFIG_VALID`].
    pub flags: u32,
    /// Seed of the flow hash ([`crate::hash::flow_hash`]).
    pub hash_seed: u32,
    /// `SYN_CACHE` slots minus one (the slot count is a power of two): a SYN's
    /// slot is `flow_hash & syn_cache_mask`. The kernel data plane writes it from the
    /// map's size; other writers' values are replaced.
    pub syn_cache_mask: u32,
    /// UDP conntrack entries idle longer than this (ns) count as misses.
    pub udp_timeout_ns: u64,
    /// [`NEXTHOP_FIB`] mode: how long (ns) a CPU reuses a backend's `bpf_fib_lookup`
    /// result (`NEXTHOP_CACHE`); 0 looks the FIB up for every packet.
    pub nexthop_cache_ns: u64,
}
const _: () = assert!(size_of::<LbConfig>() == 64);

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

/// Largest frame the benchmark harness restores.
pub const BENCH_FRAME_MAX: usize = 128;

/// The single element of the `BENCH_FRAME` array (benchmark harness only).
///
/// The frame under test is exactly [`BENCH_FRAME_MAX`] bytes long (a constant the
/// verifier can check).
///
/// Layout (136 bytes): `vary_offset` 0..4, `counter` 4..8, `bytes` 8..136.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BenchFrame {
    /// When non-zero, the byte offset (`4..=BENCH_FRAME_MAX - 4`) of a 4-byte field
    /// (e.g. the source address) that the harness overwrites with [`Self::counter`]
    /// before every repetition, so that every repetition is a new flow; 0 leaves the
    /// frame as given.
    pub vary_offset: u32,
    /// Incremented by the harness on every repetition when `vary_offset` is set.
    pub counter: u32,
    /// The frame.
    pub bytes: [u8; BENCH_FRAME_MAX],
}
const _: () = assert!(size_of::<BenchFrame>() == 136);

impl Default for BenchFrame {
    fn default() -> Self {
        Self {
            vary_offset: 0,
            counter: 0,
            bytes: [0; BENCH_FRAME_MAX],
        }
    }
}

impl_pod!(
    VipKey,
    VipEntry,
    VipInfo,
    VipAddrKey,
    BackendEntry,
    FlowKey,
    FlowKey4,
    NextHopEntry,
    SynEntry,
    CtEntry,
    LbConfig,
    BenchFrame
);

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: FlowKey, hash: u32, backend_id: u16, epoch: u32, syn_ns: u64) -> SynEntry {
        SynEntry {
            key,
            backend_id,
            vip_id: 0,
            epoch,
            tag: SynEntry::tag_of(hash, backend_id, 0, epoch, syn_ns, 77),
            syn_ns,
            seq: 77,
        }
    }

    #[test]
    fn a_syn_slot_mixing_two_writers_fields_reads_as_empty() {
        let a_key = FlowKey::from_words([1, 0, 0, 0, 0x0400_0600, 9, 0, 0, 0, 40_000]);
        let b_key = FlowKey::from_words([1, 0, 0, 0, 0x0400_0600, 9, 0, 0, 0, 40_001]);
        let (ha, hb) = (0x1234_4000, 0x9876_4000);
        let a = entry(a_key, ha, 2, 7, 1_000_000);
        let b = entry(b_key, hb, 3, 7, 1_000_000);
        assert!(a.holds(&a_key, ha) && b.holds(&b_key, hb));
        // Every mix of a's key with some of b's other fields (and either tag).
        for mask in 1u32..32 {
            let mut m = a;
            if mask & 1 != 0 {
                m.backend_id = b.backend_id;
            }
            if mask & 2 != 0 {
                m.vip_id = b.vip_id;
            }
            if mask & 4 != 0 {
                m.epoch = b.epoch;
            }
            if mask & 8 != 0 {
                m.syn_ns = b.syn_ns;
            }
            if mask & 16 != 0 {
                m.tag = b.tag;
            }
            let same_values = m.backend_id == a.backend_id
                && m.vip_id == a.vip_id
                && m.epoch == a.epoch
                && m.syn_ns == a.syn_ns;
            assert_eq!(
                m.holds(&a_key, ha),
                same_values && m.tag == a.tag,
                "mask {mask:#b}"
            );
        }
        assert!(!a.holds(&b_key, hb), "another flow's key");
    }
}
