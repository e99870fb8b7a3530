// SPDX-License-Identifier: MIT OR Apache-2.0
//! Per-VIP hash fields: which fields of a flow pick its backend (lb.toml's `vip.hash` and
//! `vip.hash_source_prefix`), and the table hash they give.
//!
//! A VIP's Maglev slot of a flow is `table_hash % M`. With the default fields, the
//! 5-tuple, the table hash is the flow hash ([`crate::hash::flow_hash`]) itself. With
//! the other fields it is the flow hash of the flow key with every field that is not
//! selected zeroed, and the source address cut to its first `prefix` bits:
//!
//! | fields | hashed | IPVS / Katran / Kubernetes |
//! |---|---|---|
//! | [`Fields::FiveTuple`] | source address and port, VIP address, port, protocol | the default everywhere |
//! | [`Fields::Src`] | source address (prefix) | `sh` scheduler, Katran's source-only flag, `sessionAffinity: ClientIP` |
//! | [`Fields::SrcDport`] | source address (prefix) and destination port | `sh` with `sh-port` |
//! | [`Fields::Dport`] | destination port | (every client of the port on one backend) |
//!
//! The address family stays in the hash (it decides the words hashed); the VIP address
//! and the protocol do not, so one client hashed by `src` lands in the same slot of
//! every such VIP: VIPs with the same backends and table size (the same table) send it
//! to the same backend, as IPVS persistence with port 0 does.
//!
//! The table hash picks the slot only. The SYN cache slot, the outer headers' entropy
//! and conntrack keep the flow hash of the full 5-tuple: two connections of one client
//! share a table slot but not a SYN cache slot or a pin.
//!
//! The fields travel in the VIP's `VIPS` entry ([`crate::types::VipEntry::flags`], bits
//! [`VIP_HASH_FIELDS_SHIFT`] and [`VIP_HASH_PREFIX_SHIFT`]); a zero there is the
//! 5-tuple, so an entry written before these bits existed keeps its meaning.

use crate::{
    hash::flow_hash,
    types::{FAMILY_V4, FlowKey, VIP_AFFINITY},
};

/// `VipEntry::flags`: the hash fields ([`Fields`] as a number) sit at this bit, in
/// [`VIP_HASH_FIELDS_MASK`].
pub const VIP_HASH_FIELDS_SHIFT: u32 = 8;
/// `VipEntry::flags`: the mask of the hash fields (after the shift).
pub const VIP_HASH_FIELDS_MASK: u32 = 0x7;
/// `VipEntry::flags`: the source prefix length (bits; 0: the whole address) sits at
/// this bit, in 8 bits.
pub const VIP_HASH_PREFIX_SHIFT: u32 = 16;

/// Which fields of a flow pick its backend.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Fields {
    /// Source address and port, VIP address, port and protocol (the default).
    #[default]
    FiveTuple = 0,
    /// The source address (cut to the prefix) only.
    Src = 1,
    /// The source address (cut to the prefix) and the destination port.
    SrcDport = 2,
    /// The destination port only.
    Dport = 3,
}

impl Fields {
    /// Every value, in the order of its number.
    pub const ALL: [Fields; 4] = [
        Fields::FiveTuple,
        Fields::Src,
        Fields::SrcDport,
        Fields::Dport,
    ];

    /// The name lb.toml uses (`vip.hash`): `5-tuple`, `src`, `src+dport`, `dport`.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Fields::FiveTuple => "5-tuple",
            Fields::Src => "src",
            Fields::SrcDport => "src+dport",
            Fields::Dport => "dport",
        }
    }

    /// The fields named `name` ([`Self::name`]), if any.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Fields> {
        Fields::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Whether the source address is hashed (then a prefix length applies).
    #[must_use]
    pub const fn uses_source(self) -> bool {
        matches!(self, Fields::Src | Fields::SrcDport)
    }
}

/// A VIP's hash fields and source prefix length.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HashFields {
    /// The fields hashed.
    pub fields: Fields,
    /// The leading bits of the source address hashed (1..=32 for IPv4, 1..=128 for
    /// IPv6); 0: the whole address. Meaningful only when [`Fields::uses_source`].
    pub prefix: u8,
    /// The VIP's affinity timeout (s, `vip.persistence_timeout_secs`): a client stays
    /// on its backend until idle this long ([`crate::affinity`]); 0: no affinity. Only
    /// with source fields ([`Fields::uses_source`]). Not in the flags' hash bits: its
    /// bit is [`VIP_AFFINITY`], the timeout is in `AFFINITY_TIMEOUT`.
    pub affinity_secs: u32,
}

/// Why a client source prefix does not apply to a VIP's hash fields
/// ([`HashFields::with_source_prefix`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefixError {
    /// The fields do not hash the source address ([`Fields::uses_source`]).
    NotSource,
    /// The length is outside `1..=max` bits, the VIP's family's address length.
    OutOfRange {
        /// 32 for IPv4, 128 for IPv6 ([`max_prefix`]).
        max: u8,
    },
}

impl HashFields {
    /// `fields` with the client source prefix of `prefix` bits, for a VIP of address
    /// family `family` (`FAMILY_V4`, `FAMILY_V6`); no affinity. A prefix of the whole
    /// address is stored as 0 (no cut).
    ///
    /// # Errors
    /// [`PrefixError::NotSource`] when `fields` do not hash the source;
    /// [`PrefixError::OutOfRange`] for 0 or more bits than the address has.
    pub fn with_source_prefix(
        fields: Fields,
        family: u8,
        prefix: u32,
    ) -> Result<Self, PrefixError> {
        let max = max_prefix(family);
        if !fields.uses_source() {
            return Err(PrefixError::NotSource);
        }
        let Ok(bits @ 1..) = u8::try_from(prefix) else {
            return Err(PrefixError::OutOfRange { max });
        };
        if bits > max {
            return Err(PrefixError::OutOfRange { max });
        }
        Ok(Self {
            fields,
            prefix: bits % max,
            affinity_secs: 0,
        })
    }

    /// The `VipEntry::flags` bits of `self` (the other bits zero): the fields, the
    /// prefix and [`VIP_AFFINITY`] when the VIP has affinity.
    #[must_use]
    pub const fn flags(self) -> u32 {
        let affinity = if self.affinity_secs != 0 {
            VIP_AFFINITY
        } else {
            0
        };
        (self.fields as u32) << VIP_HASH_FIELDS_SHIFT
            | (self.prefix as u32) << VIP_HASH_PREFIX_SHIFT
            | affinity
    }

    /// The hash fields of `VipEntry::flags` `flags`; an unknown fields number reads as
    /// the 5-tuple, as the XDP program takes it. The affinity timeout is not in the
    /// flags: `affinity_secs` is 0 (the caller reads `AFFINITY_TIMEOUT`).
    #[must_use]
    pub const fn of_flags(flags: u32) -> Self {
        let fields = match (flags >> VIP_HASH_FIELDS_SHIFT) & VIP_HASH_FIELDS_MASK {
            1 => Fields::Src,
            2 => Fields::SrcDport,
            3 => Fields::Dport,
            _ => Fields::FiveTuple,
        };
        let prefix = ((flags >> VIP_HASH_PREFIX_SHIFT) & 0xff) as u8;
        Self {
            fields,
            prefix,
            affinity_secs: 0,
        }
    }
}

/// The mask, as a native `u32` over four address bytes in network order, of the bits of
/// address word `i` (bytes `4i..4i+4`) inside the first `prefix` bits (0: all of them).
#[inline(always)]
fn prefix_mask(prefix: u32, i: u32) -> u32 {
    if prefix == 0 {
        return u32::MAX;
    }
    let bits = prefix.saturating_sub(32 * i);
    let mask = if bits == 0 {
        0
    } else if bits >= 32 {
        u32::MAX
    } else {
        u32::MAX << (32 - bits)
    };
    u32::from_ne_bytes(mask.to_be_bytes())
}

/// The key whose flow hash is the table hash of `key` with VIP flags `flags`, for
/// fields other than the 5-tuple: the fields not selected zeroed, the source cut to the
/// prefix (see the module documentation).
#[inline(always)]
#[must_use]
pub fn selected_key(key: &FlowKey, flags: u32) -> FlowKey {
    let fields = (flags >> VIP_HASH_FIELDS_SHIFT) & VIP_HASH_FIELDS_MASK;
    let prefix = (flags >> VIP_HASH_PREFIX_SHIFT) & 0xff;
    let w = key.words();
    let with_src = fields == Fields::Src as u32 || fields == Fields::SrcDport as u32;
    let with_dport = fields == Fields::SrcDport as u32 || fields == Fields::Dport as u32;
    let p = key.vip.port.to_ne_bytes();
    let port = if with_dport { [p[0], p[1]] } else { [0, 0] };
    let src = |i: usize| {
        if with_src {
            #[expect(clippy::cast_possible_truncation, reason = "i < 4")]
            let mask = prefix_mask(prefix, i as u32);
            w[5 + i] & mask
        } else {
            0
        }
    };
    FlowKey::from_words([
        0,
        0,
        0,
        0,
        u32::from_ne_bytes([port[0], port[1], 0, key.vip.family]),
        src(0),
        src(1),
        src(2),
        src(3),
        0,
    ])
}

/// Whether a VIP whose `VIPS` entry has flags `flags` hashes the 5-tuple: its table
/// hash is then the flow hash.
#[inline(always)]
#[must_use]
pub const fn is_five_tuple(flags: u32) -> bool {
    (flags >> VIP_HASH_FIELDS_SHIFT) & VIP_HASH_FIELDS_MASK == Fields::FiveTuple as u32
}

/// The table hash of `key` for a VIP whose `VIPS` entry has flags `flags` and whose
/// flow hash ([`flow_hash`] with `seed`) is `flow`: `flow` itself for the 5-tuple,
/// otherwise the flow hash of [`selected_key`]. The slot is `table_hash % M`.
#[inline(always)]
#[must_use]
pub fn table_hash_of(key: &FlowKey, flags: u32, seed: u32, flow: u32) -> u32 {
    if is_five_tuple(flags) {
        flow
    } else {
        flow_hash(&selected_key(key, flags), seed)
    }
}

/// The table hash of `key` for a VIP whose `VIPS` entry has flags `flags`, with hash
/// seed `seed` ([`table_hash_of`] without a flow hash at hand).
#[inline(always)]
#[must_use]
pub fn table_hash(key: &FlowKey, flags: u32, seed: u32) -> u32 {
    if is_five_tuple(flags) {
        flow_hash(key, seed)
    } else {
        flow_hash(&selected_key(key, flags), seed)
    }
}

/// The longest source prefix of `family` ([`FAMILY_V4`]: 32, else 128), the bound of
/// [`HashFields::prefix`].
#[must_use]
pub const fn max_prefix(family: u8) -> u8 {
    if family == FAMILY_V4 { 32 } else { 128 }
}

#[cfg(test)]
mod tests;
