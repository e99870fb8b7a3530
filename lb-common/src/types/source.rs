// SPDX-License-Identifier: MIT OR Apache-2.0
//! Allowed source prefixes per VIP (`SOURCE_RANGES`, `SOURCE_FILTER`,
//! `SOURCE_RESTRICTED`).

use super::VipKey;
use crate::impl_pod;

/// The matched part of a `SOURCE_RANGES` key (an LPM trie: the key is a 32-bit prefix
/// length in bits followed by these bytes): the VIP key's fields, then the client
/// address. An entry for prefix `p/len` of VIP `v` has the prefix length
/// [`VIP_KEY_BITS`]` + len`, so it matches only packets of `v` (all 160 bits of the VIP
/// key) from `p/len`; a lookup uses the full length, [`SOURCE_KEY_BITS`].
///
/// Layout (36 bytes, no alignment beyond 2, as the trie key packs it after the prefix
/// length): `vip_addr` 0..16, `vip_port` 16..18, `vip_proto` 18, `vip_family` 19 (the
/// 20 bytes of a [`VipKey`]), `addr` 20..36 (network order; IPv4 in the first four
/// bytes, the rest zero).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SourceData {
    /// [`VipKey::addr`].
    pub vip_addr: [u8; 16],
    /// [`VipKey::port`] (network order).
    pub vip_port: u16,
    /// [`VipKey::proto`].
    pub vip_proto: u8,
    /// [`VipKey::family`].
    pub vip_family: u8,
    /// Client address (bits beyond an entry's prefix are zero).
    pub addr: [u8; 16],
}
const _: () = assert!(size_of::<SourceData>() == 36);

impl SourceData {
    /// The data of VIP `vip` and client address `addr`.
    #[inline(always)]
    #[must_use]
    pub fn new(vip: &VipKey, addr: [u8; 16]) -> Self {
        Self {
            vip_addr: vip.addr,
            vip_port: vip.port,
            vip_proto: vip.proto,
            vip_family: vip.family,
            addr,
        }
    }
}

/// Bits of a [`VipKey`] in a `SOURCE_RANGES` key.
pub const VIP_KEY_BITS: u32 = 160;
/// Prefix length of a `SOURCE_RANGES` lookup: the whole [`SourceData`].
pub const SOURCE_KEY_BITS: u32 = VIP_KEY_BITS + 128;
const _: () = assert!(SOURCE_KEY_BITS as usize == 8 * size_of::<SourceData>());

impl_pod!(SourceData);
