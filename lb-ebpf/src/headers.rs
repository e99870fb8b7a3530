// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Wire headers as `#[repr(C)]` structs with naturally aligned fields, read and written
//! with plain loads and stores, as C XDP programs do with `struct iphdr`.
//!
//! All multi-byte fields hold the wire bytes (network byte order) unconverted. The
//! structs assume the frame starts at an even address (every XDP headroom is even), so
//! 16-bit fields are aligned; 32-bit fields may sit at addresses that are 2 mod 4, which
//! the kernel accepts for packet memory on architectures with efficient unaligned access
//! (x86-64, arm64) — the same assumption every C XDP program makes. LLVM's BPF back end
//! would otherwise split each unaligned 4-byte read into four byte loads.
//!
//! Why not the `network-types` crate: its headers hold multi-byte fields as byte arrays
//! (alignment 1) behind accessors that convert to host order, so LLVM may assume no
//! alignment and moves such fields a byte at a time. Here a field is one plain load, a
//! whole header a few plain stores, and wire order is kept (compared and copied
//! without conversion). The program needs only these few small structs.

/// Ethernet II header (IEEE 802.3), 14 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct EthHdr {
    /// Destination MAC.
    pub(crate) dst: [u16; 3],
    /// Source MAC.
    pub(crate) src: [u16; 3],
    /// EtherType, network order.
    pub(crate) proto: u16,
}
const _: () = assert!(size_of::<EthHdr>() == 14);

/// IPv4 header without options (RFC 791), 20 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Ipv4Hdr {
    /// Version (high nibble) and IHL in 32-bit words (low nibble).
    pub(crate) vihl: u8,
    /// Type of service (DSCP and ECN).
    pub(crate) tos: u8,
    /// Total length, network order.
    pub(crate) tot_len: u16,
    /// Identification, network order.
    pub(crate) id: u16,
    /// Flags and fragment offset, network order.
    pub(crate) frag: u16,
    /// Time to live.
    pub(crate) ttl: u8,
    /// Protocol.
    pub(crate) proto: u8,
    /// Header checksum.
    pub(crate) check: u16,
    /// Source address, network order.
    pub(crate) src: u32,
    /// Destination address, network order.
    pub(crate) dst: u32,
}
const _: () = assert!(size_of::<Ipv4Hdr>() == 20);

/// IPv6 fixed header (RFC 8200), 40 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Ipv6Hdr {
    /// Version, traffic class and flow label, network order.
    pub(crate) vtcfl: u32,
    /// Payload length, network order.
    pub(crate) plen: u16,
    /// Next header.
    pub(crate) next: u8,
    /// Hop limit.
    pub(crate) hop_limit: u8,
    /// Source address, network order.
    pub(crate) src: [u32; 4],
    /// Destination address, network order.
    pub(crate) dst: [u32; 4],
}
const _: () = assert!(size_of::<Ipv6Hdr>() == 40);

/// The first four bytes of a TCP (RFC 9293) or UDP (RFC 768) header: the ports.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Ports {
    /// Source port, network order.
    pub(crate) src: u16,
    /// Destination port, network order.
    pub(crate) dst: u16,
}
const _: () = assert!(size_of::<Ports>() == 4);

/// The UDP header (RFC 768) and the GUE variant 0 base header (draft-ietf-intarea-gue)
/// that GUE puts between the outer IP header and the inner packet (12 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct UdpGueHdr {
    /// UDP source port, wire order.
    pub(crate) sport: u16,
    /// UDP destination port, wire order.
    pub(crate) dport: u16,
    /// UDP length (header, GUE header and inner packet), wire order.
    pub(crate) len: u16,
    /// UDP checksum, wire order; 0: none.
    pub(crate) check: u16,
    /// The GUE header's four bytes in memory order: version, C and Hlen (0), Proto/ctype
    /// (the inner packet's IP protocol), Flags (0).
    pub(crate) gue: u32,
}
const _: () = assert!(size_of::<UdpGueHdr>() == 12);

/// The words of 16 address bytes (network order kept: memory order).
#[inline(always)]
pub(crate) fn addr_words(bytes: &[u8; 16]) -> [u32; 4] {
    [
        u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
        u32::from_ne_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
        u32::from_ne_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]),
        u32::from_ne_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]),
    ]
}

/// [`addr_words`] of an address that is 4-byte aligned, read as four words: byte reads
/// each take a register, which a caller short of registers spills to its stack.
///
/// # Safety
/// `bytes` must be 4-byte aligned.
#[inline(always)]
pub(crate) unsafe fn aligned_addr_words(bytes: &[u8; 16]) -> [u32; 4] {
    let w = bytes.as_ptr().cast::<u32>();
    // SAFETY: four aligned words inside the 16 bytes (the caller's contract).
    unsafe { [*w, *w.add(1), *w.add(2), *w.add(3)] }
}
