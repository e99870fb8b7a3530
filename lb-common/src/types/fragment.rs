// SPDX-License-Identifier: MIT OR Apache-2.0
//! Fragment tracking (`FRAGMENTS`): which backend the first fragment of an IP datagram
//! went to, so that its later fragments, which carry no ports, follow it.

use crate::impl_pod;

/// Key of `FRAGMENTS`: one IP datagram as its fragments name it (RFC 791 section 3.2:
/// source, destination, protocol and identification; RFC 8200 section 4.5: source,
/// destination and fragment identification).
///
/// Layout (40 bytes, 4-byte aligned): `src` 0..16, `dst` 16..32 (network order; IPv4 in
/// the first four bytes, the rest zero), `id` 32..36 (the wire bytes read as a native
/// `u32`; an IPv4 identification fills the first two bytes, the rest zero), `proto`
/// 36 (IPv4: the protocol field; IPv6: the fragment header's next header), `family` 37,
/// `_pad` 38..40 (zero).
#[repr(C, align(4))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FragKey {
    /// Source (client) address.
    pub src: [u8; 16],
    /// Destination (VIP) address.
    pub dst: [u8; 16],
    /// Identification, wire bytes.
    pub id: u32,
    /// Protocol of the datagram.
    pub proto: u8,
    /// [`FAMILY_V4`](super::FAMILY_V4) or [`FAMILY_V6`](super::FAMILY_V6).
    pub family: u8,
    /// Explicit padding, always zero.
    pub _pad: [u8; 2],
}
const _: () = assert!(size_of::<FragKey>() == 40);

/// Value of `FRAGMENTS`: where the datagram's first fragment went.
///
/// Layout (12 bytes): `backend_id` 0..4, `vip_id` 4..8, `hash` 8..12.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FragEntry {
    /// Backend the first fragment was sent to.
    pub backend_id: u32,
    /// VIP of the datagram (its counters).
    pub vip_id: u32,
    /// The flow hash of the first fragment's 5-tuple: later fragments get the same
    /// per-flow outer source and flow label.
    pub hash: u32,
}
const _: () = assert!(size_of::<FragEntry>() == 12);

impl_pod!(FragKey, FragEntry);
