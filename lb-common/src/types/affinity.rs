// SPDX-License-Identifier: MIT OR Apache-2.0
//! The `AFFINITY` map: a client's affinity pin (IPVS: a persistence template), keyed by
//! the VIP and the client's affinity fields (`crate::affinity`).

use crate::impl_pod;

/// Key of `AFFINITY`: a VIP id and the fields of a client that its VIP's hash selects.
///
/// Layout (24 bytes, 4-byte aligned): `vip_id` 0..4, `port` 4..6 (network order; 0
/// unless the VIP hashes `src+dport`), `_pad` 6, `family` 7, `src` 8..24 (network
/// order, cut to the VIP's source prefix; IPv4 in bytes 8..12, the rest zero).
#[repr(C, align(4))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AffinityKey {
    /// The VIP's id.
    pub vip_id: u32,
    /// The destination port for `src+dport`, else 0 (network order).
    pub port: u16,
    /// Explicit padding, always zero.
    pub _pad: u8,
    /// [`FAMILY_V4`](super::FAMILY_V4) or [`FAMILY_V6`](super::FAMILY_V6).
    pub family: u8,
    /// The client's address cut to the prefix, network order.
    pub src: [u8; 16],
}
const _: () = assert!(size_of::<AffinityKey>() == 24);

impl AffinityKey {
    /// The key whose 24 bytes are `words` in memory order (whole-word stores, as for
    /// [`FlowKey::from_words`](super::FlowKey::from_words)).
    #[inline(always)]
    #[must_use]
    pub fn from_words(words: [u32; 6]) -> Self {
        // SAFETY: AffinityKey is repr(C), 24 bytes, without padding, made only of
        // integers (every bit pattern is valid); its alignment (4) equals the array's.
        unsafe { core::mem::transmute::<[u32; 6], Self>(words) }
    }
}

/// Value of `AFFINITY`: the backend a client's new connections go to, and when the
/// client last opened one.
///
/// Layout (16 bytes, 8-byte aligned): `backend_id` 0..4, `_pad` 4..8, `stamp_ns` 8..16.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AffinityEntry {
    /// The pinned backend's id (an index into `BACKENDS`).
    pub backend_id: u32,
    /// Explicit padding, always zero.
    pub _pad: u32,
    /// When the client last opened a connection (a flow without a conntrack pin) to
    /// the VIP (`bpf_ktime_get_coarse_ns`, ns), rewritten at most once a second; the
    /// daemon's conntrack walk raises it to the last packet of the client's open
    /// connections to this backend (`crate::affinity::refreshed`).
    pub stamp_ns: u64,
}
const _: () = assert!(size_of::<AffinityEntry>() == 16);

impl_pod!(AffinityKey, AffinityEntry);
