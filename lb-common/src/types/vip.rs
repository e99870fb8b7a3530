// SPDX-License-Identifier: MIT OR Apache-2.0
//! The VIP maps: `VIPS` (key and value), `VIP_INFO` (what a VIP id names) and
//! `VIP_ADDRS` (the addresses that carry VIPs).

use crate::impl_pod;

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
    /// [`PROTO_TCP`](super::PROTO_TCP) or [`PROTO_UDP`](super::PROTO_UDP).
    pub proto: u8,
    /// [`FAMILY_V4`](super::FAMILY_V4) or [`FAMILY_V6`](super::FAMILY_V6).
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
    /// Bit set: [`VIP_TABLE_B`], [`VIP_FAST_PATH`], [`VIP_SECOND_CHANCE`],
    /// [`VIP_AFFINITY`], [`VIP_TABLE_STD`], the hash fields (`crate::hash_fields`);
    /// other bits zero.
    pub flags: u32,
    /// Table epoch: a data-plane-wide counter, incremented by every table install of
    /// any VIP (never reused, never 0 for an installed table). Pins and held SYNs record
    /// the epoch of the table their backend came from
    /// ([`CtEntry::epoch`](super::CtEntry::epoch)).
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
    /// pick from; the established-flow path only trusts a TCP pin whose
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
/// `VipEntry::flags`: the VIP takes the fast path (`crate::fastpath`): on a clean slot
/// the table decides a packet other than a SYN with no conntrack lookup, and a miss on
/// a dirty slot takes the clean owner.
pub const VIP_FAST_PATH: u32 = 2;
/// `VipEntry::flags`: the VIP's backends run the agent's second chance
/// (`crate::second_chance`): a TCP packet that misses conntrack on a dirty slot carries
/// the slot's other possible owner as a GUE candidate and is not pinned.
pub const VIP_SECOND_CHANCE: u32 = 4;
/// `VipEntry::flags`: the VIP keeps clients on their backends (`crate::affinity`): a
/// new connection reads the client's `AFFINITY` pin, and the VIP's timeout in
/// `AFFINITY_TIMEOUT`.
pub const VIP_AFFINITY: u32 = 8;
/// `VipEntry::flags`: the VIP's live table has `crate::maps::STD_TABLE_SIZE` slots
/// and its buffer is in `TABLES_STD` (`TABLES_STD[table_index()]`), whose cells the
/// program reads without a helper call; clear means `TABLES[table_index()]`, a table
/// of any size. An entry written before layout 6 has it clear.
pub const VIP_TABLE_STD: u32 = 16;

impl VipEntry {
    /// Index of the VIP's live table in `TABLES`, or in `TABLES_STD` when its flags
    /// have [`VIP_TABLE_STD`].
    pub const fn table_index(&self) -> u32 {
        self.vip_id * 2 + (self.flags & VIP_TABLE_B)
    }

    /// Whether the VIP's live table is in `TABLES_STD` ([`VIP_TABLE_STD`]), else in
    /// `TABLES`.
    pub const fn in_std_tables(&self) -> bool {
        self.flags & VIP_TABLE_STD != 0
    }
}
const _: () = assert!(size_of::<VipEntry>() == 12);

/// Element of the `VIP_CACHE` array (index: the VIP key's
/// [`vip_filter_bit`](crate::hash::vip_filter_bit)): a copy of one VIP's `VIPS` entry,
/// which the fast path reads without a hash-map lookup.
///
/// Layout (16 bytes, 8-byte aligned): `vip_id` 0..4, `_pad` 4..8 (zero), `state` 8..16
/// (the entry's flags in bits 0..32, its epoch in bits 32..64). Flags and epoch share
/// one word so that userspace changes them with one aligned 8-byte store through the
/// map's mmap and a packet reads them with one load. A slot is never trusted alone:
/// see [`VipCacheSlot::entry_for`].
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VipCacheSlot {
    /// The VIP id of the cached entry.
    pub vip_id: u32,
    /// Explicit padding, always zero.
    pub _pad: u32,
    /// The cached entry's flags (bits 0..32) and epoch (bits 32..64).
    pub state: u64,
}
const _: () = assert!(size_of::<VipCacheSlot>() == 16);

impl VipCacheSlot {
    /// The slot caching `entry`.
    pub const fn of(entry: &VipEntry) -> Self {
        Self {
            vip_id: entry.vip_id,
            _pad: 0,
            state: Self::state_of(entry),
        }
    }

    /// `entry`'s flags and epoch as one state word.
    pub const fn state_of(entry: &VipEntry) -> u64 {
        entry.flags as u64 | (entry.epoch as u64) << 32
    }

    /// The `VIPS` entry of a packet to `key`, from a slot read as `vip_id` and `state`,
    /// when `info` (`VIP_INFO[vip_id]`) confirms it: the id is live for `key` and its
    /// live table's epoch is the slot's (never 0). Epochs are never reused
    /// (`VipEntry::epoch`), so a slot left by another VIP, one written half-way, or one
    /// older than `VIP_INFO` (a table switch in progress) fails, and the packet looks
    /// `VIPS` up. No ordering between the slot's two loads or its stores is needed.
    #[inline(always)]
    pub fn entry_for(vip_id: u32, state: u64, key: &VipKey, info: &VipInfo) -> Option<VipEntry> {
        let epoch = (state >> 32) as u32;
        #[expect(clippy::cast_possible_truncation, reason = "the word's low half")]
        let flags = state as u32;
        let confirmed =
            info.live != 0 && info.key.same_as(key) && epoch != 0 && info.epoch == epoch;
        confirmed.then_some(VipEntry {
            vip_id,
            flags,
            epoch,
        })
    }
}

/// Key of the `VIP_ADDRS` map: a VIP address without port and protocol.
///
/// Layout (20 bytes): `addr` 0..16 (network order), `family` 16, `_pad` 17..20 (zero).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VipAddrKey {
    /// Address, network byte order (IPv4 in bytes 0..4, rest zero).
    pub addr: [u8; 16],
    /// [`FAMILY_V4`](super::FAMILY_V4) or [`FAMILY_V6`](super::FAMILY_V6).
    pub family: u8,
    /// Explicit padding, always zero.
    pub _pad: [u8; 3],
}
const _: () = assert!(size_of::<VipAddrKey>() == 20);

impl_pod!(VipKey, VipEntry, VipInfo, VipAddrKey, VipCacheSlot);
