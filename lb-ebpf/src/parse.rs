// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Header parsing: Ethernet, IPv4 (options skipped: L4 at IHL × 4), IPv6 (fixed header and
//! a bounded walk of hop-by-hop, routing, destination-options, authentication and
//! fragment headers), then the TCP/UDP ports and TCP flags, or the ICMP header.
//!
//! The result ([`Parse`]) is the flow's 5-tuple, or what else the packet is: the first
//! fragment of a datagram (a 5-tuple and the datagram's identification), a later
//! fragment (no ports: the datagram's identification), an ICMP message, a TCP/UDP
//! packet whose ports cannot be read (dropped only if its destination address carries
//! a VIP), or the verdict reason of a packet that cannot be for a VIP or cannot be
//! parsed. An IPv6 atomic fragment (a fragment header with offset 0 and M clear) is
//! parsed as the unfragmented packet it is (RFC 6946). Frames arrive here untagged
//! (`vlan` strips a single tag first). Parsing reads the frame only, no map.
//! References: RFC 791 (IPv4, fragmentation), RFC 8200 (IPv6, its extension headers,
//! section 4.5 fragments), RFC 4302 (AH length in 4-octet units), RFC 9293 (TCP),
//! RFC 768 (UDP), RFC 792 and RFC 4443 (ICMP, ICMPv6).

use aya_ebpf::programs::XdpContext;
use lb_common::{
    stats::Reason,
    types::{
        CT_FIN, CT_OPEN, CT_RST, FAMILY_V4, FAMILY_V6, FlowKey, FragKey, PROTO_ICMP, PROTO_ICMPV6,
        PROTO_TCP, PROTO_UDP,
    },
};

use crate::{
    headers::{EthHdr, Ipv4Hdr, Ipv6Hdr, Ports},
    packet::{frame_len, ptr_at},
    records::FragTag,
};

/// Length of an Ethernet II header.
pub(crate) const ETH_LEN: usize = size_of::<EthHdr>();
const ETH_P_IP: u16 = 0x0800_u16.to_be();
const ETH_P_IPV6: u16 = 0x86dd_u16.to_be();
const ETH_P_8021Q: u16 = 0x8100_u16.to_be();
const ETH_P_8021AD: u16 = 0x88a8_u16.to_be();

const IPV4_MIN_LEN: usize = size_of::<Ipv4Hdr>();
const IPV6_LEN: usize = size_of::<Ipv6Hdr>();
const TCP_MIN_LEN: usize = 20;
const UDP_LEN: usize = 8;

/// IPv4 flags/fragment-offset mask selecting MF and the offset (RFC 791), wire order.
const IPV4_FRAG_MASK: u16 = 0x3fff_u16.to_be();
/// IPv4 fragment-offset mask (13 bits), wire order.
const IPV4_OFFSET_MASK: u16 = 0x1fff_u16.to_be();
/// IPv6 fragment header: offset (13 bits, in 8-octet units, shifted left 3) in the
/// third and fourth bytes, host order of those two bytes.
pub(crate) const IPV6_OFFSET_MASK: u16 = 0xfff8;
/// IPv6 fragment header: the M (more fragments) flag.
const IPV6_MORE_FRAGMENTS: u16 = 0x0001;
/// ICMP and ICMPv6 header length (type, code, checksum, 4 bytes that depend on the
/// type).
pub(crate) const ICMP_HDR_LEN: usize = 8;

const NEXTHDR_HOP: u8 = 0;
const NEXTHDR_ROUTING: u8 = 43;
pub(crate) const NEXTHDR_FRAGMENT: u8 = 44;
const NEXTHDR_ESP: u8 = 50;
pub(crate) const NEXTHDR_AUTH: u8 = 51;
const NEXTHDR_DEST: u8 = 60;
const NEXTHDR_MOBILITY: u8 = 135;
const NEXTHDR_HIP: u8 = 139;
const NEXTHDR_SHIM6: u8 = 140;
const NEXTHDR_EXPERIMENT1: u8 = 253;
const NEXTHDR_EXPERIMENT2: u8 = 254;

/// Most IPv6 extension headers walked before giving up (`pass_ipv6_ext_hdr`).
pub(crate) const MAX_IPV6_EXT_HEADERS: usize = 6;
/// Bound of the L4 offset after the walk: each header is at most 2,048 bytes.
pub(crate) const MAX_L4_OFFSET: usize = ETH_LEN + IPV6_LEN + MAX_IPV6_EXT_HEADERS * 2048;

/// TCP flag bits (RFC 9293, byte 13 of the header).
const TCP_FIN: u8 = 0x01;
const TCP_SYN: u8 = 0x02;
const TCP_RST: u8 = 0x04;
const TCP_ACK: u8 = 0x10;

/// A parsed TCP/UDP packet.
///
/// `repr(C)` with the key first: the key then sits at the same place in every variant of
/// [`Parse`] that has one, so LLVM builds it once, with word stores.
#[repr(C)]
pub(crate) struct Parsed {
    /// The 5-tuple (client → VIP) and family; `key.vip` is the VIP's key.
    pub(crate) key: FlowKey,
    /// Length of the IP packet according to its header: IPv4 total length, or 40 plus
    /// the IPv6 payload length.
    pub(crate) l3_len: u32,
    /// TCP flags byte (0 for UDP).
    pub(crate) tcp_flags: u8,
    /// TCP sequence number, the four wire bytes read as a native `u32` (compared only
    /// for equality; 0 for UDP).
    pub(crate) tcp_seq: u32,
}

impl Parsed {
    /// Whether the packet opens a TCP connection: SYN set, ACK and RST clear.
    #[inline(always)]
    pub(crate) fn is_syn(&self) -> bool {
        self.key.vip.proto == PROTO_TCP && self.tcp_flags & (TCP_SYN | TCP_ACK | TCP_RST) == TCP_SYN
    }

    /// Whether the packet is a TCP RST (forwarded, but it writes no conntrack state).
    #[inline(always)]
    pub(crate) fn is_rst(&self) -> bool {
        self.tcp_flags & TCP_RST != 0
    }

    /// What the packet says of its connection's end (`CtEntry::closing`): `CT_RST`
    /// for a RST, `CT_FIN` for a FIN, `CT_OPEN` otherwise (and for UDP, whose flags
    /// are 0).
    #[inline(always)]
    pub(crate) fn closing(&self) -> u8 {
        if self.tcp_flags & TCP_RST != 0 {
            CT_RST
        } else if self.tcp_flags & TCP_FIN != 0 {
            CT_FIN
        } else {
            CT_OPEN
        }
    }
}

/// A fragment other than the first: no ports.
pub(crate) struct FragAt {
    /// Its datagram.
    pub(crate) key: FragKey,
    /// Length of the IP packet (as [`Parsed::l3_len`]).
    pub(crate) l3_len: u32,
}

/// An ICMP or ICMPv6 message (not a fragment) whose 8-byte header is inside the packet.
pub(crate) struct IcmpAt {
    /// Addresses and family (`key.vip.addr`: destination, `key.src`: source),
    /// `key.vip.proto` [`PROTO_ICMP`] or [`PROTO_ICMPV6`], ports zero.
    pub(crate) key: FlowKey,
    /// Offset of the ICMP header in the frame.
    pub(crate) l4: u32,
    /// Length of the IP packet (as [`Parsed::l3_len`]).
    pub(crate) l3_len: u32,
    /// ICMP type.
    pub(crate) kind: u8,
    /// ICMP code.
    pub(crate) code: u8,
}

/// What parsing a frame gives.
///
/// One flat enum rather than a `Result` whose error carries the key: there the key sat
/// at another offset than in `Parsed`, and LLVM assembled the fast path's key from byte
/// stores (measured a few ns per packet).
pub(crate) enum Parse {
    /// A TCP/UDP packet.
    Packet(Parsed),
    /// The first fragment of a fragmented TCP/UDP datagram (offset 0, more fragments):
    /// its header has the ports. Balanced as a packet; its datagram is recorded.
    FirstFragment(Parsed, FragTag),
    /// A later fragment of a TCP/UDP datagram (offset above 0), which has no ports: it
    /// follows its first fragment, or is dropped (`drop_fragment`) when its destination
    /// address carries a VIP and passed otherwise.
    Fragment(FragAt),
    /// An ICMP or ICMPv6 message.
    Icmp(IcmpAt),
    /// A TCP/UDP packet whose header is truncated, so its ports cannot be read (its key
    /// has the addresses and protocol, ports zero): dropped (`drop_malformed_l4`) when
    /// its destination address carries a VIP, passed otherwise.
    TruncatedL4(FlowKey),
    /// Not a TCP/UDP packet over IP, or malformed: the verdict is this reason's.
    Verdict(Reason),
}

/// Parses the frame.
#[inline(always)]
pub(crate) fn parse(ctx: &XdpContext) -> Parse {
    let Some(eth) = ptr_at::<EthHdr>(ctx, 0) else {
        return Parse::Verdict(Reason::DropMalformedL2);
    };
    // SAFETY: ptr_at checked the 14-byte header.
    match unsafe { (*eth).proto } {
        ETH_P_IP => parse_v4(ctx),
        ETH_P_IPV6 => parse_v6(ctx),
        ETH_P_8021Q | ETH_P_8021AD => Parse::Verdict(Reason::PassVlan),
        _ => Parse::Verdict(Reason::PassNotIp),
    }
}

#[inline(always)]
fn parse_v4(ctx: &XdpContext) -> Parse {
    let Some(ip) = ptr_at::<Ipv4Hdr>(ctx, ETH_LEN) else {
        return Parse::Verdict(Reason::DropMalformedL3);
    };
    // SAFETY: ptr_at checked the 20-byte fixed header.
    let ip = unsafe { &*ip };
    let hdr_len = usize::from(ip.vihl & 0x0f) * 4;
    if ip.vihl >> 4 != 4 || hdr_len < IPV4_MIN_LEN {
        return Parse::Verdict(Reason::DropMalformedL3);
    }
    let tot_len = usize::from(u16::from_be(ip.tot_len));
    if tot_len < hdr_len || ETH_LEN + tot_len > frame_len(ctx) {
        return Parse::Verdict(Reason::DropMalformedL3);
    }
    let key = flow_key([ip.dst, 0, 0, 0], [ip.src, 0, 0, 0], ip.proto, FAMILY_V4);
    if key.vip.proto != PROTO_TCP && key.vip.proto != PROTO_UDP {
        if key.vip.proto == PROTO_ICMP && ip.frag & IPV4_FRAG_MASK == 0 {
            return icmp_at(ctx, key, ETH_LEN + hdr_len, ETH_LEN + tot_len, tot_len);
        }
        return Parse::Verdict(Reason::PassNonVip);
    }
    // IHL is at most 15, so the L4 offset is at most 14 + 60. The unfragmented packet
    // is parsed first, before anything of fragments is computed: it is the fast path.
    if ip.frag & IPV4_FRAG_MASK == 0 {
        return parse_l4(ctx, key, ETH_LEN + hdr_len, ETH_LEN + tot_len, tot_len);
    }
    let tag = FragTag {
        id: u32::from(ip.id),
        proto: key.vip.proto,
    };
    // A later fragment's first bytes are payload, never read as a TCP/UDP header.
    if ip.frag & IPV4_OFFSET_MASK != 0 {
        return later_fragment(&key, tag, tot_len);
    }
    first_fragment(
        parse_l4(ctx, key, ETH_LEN + hdr_len, ETH_LEN + tot_len, tot_len),
        tag,
    )
}

/// `parsed`, a packet, as the first fragment of datagram `tag`.
#[inline(always)]
fn first_fragment(parsed: Parse, tag: FragTag) -> Parse {
    match parsed {
        Parse::Packet(p) => Parse::FirstFragment(p, tag),
        other => other,
    }
}

/// A later fragment of datagram `tag` between the addresses of `key`.
#[inline(always)]
fn later_fragment(key: &FlowKey, tag: FragTag, l3_len: usize) -> Parse {
    #[expect(
        clippy::cast_possible_truncation,
        reason = "l3_len comes from a 16-bit length field plus 40"
    )]
    Parse::Fragment(FragAt {
        key: tag.datagram(key),
        l3_len: l3_len as u32,
    })
}

/// The ICMP message whose header is at `l4`, inside the IP packet ending at `l3_end`.
#[inline(always)]
fn icmp_at(ctx: &XdpContext, key: FlowKey, l4: usize, l3_end: usize, l3_len: usize) -> Parse {
    let Some(hdr) = ptr_at::<[u8; ICMP_HDR_LEN]>(ctx, l4) else {
        return Parse::Verdict(Reason::PassNonVip);
    };
    if l4 + ICMP_HDR_LEN > l3_end {
        return Parse::Verdict(Reason::PassNonVip);
    }
    // SAFETY: ptr_at checked the 8 bytes.
    let [kind, code, ..] = unsafe { *hdr };
    #[expect(
        clippy::cast_possible_truncation,
        reason = "offsets and lengths are below 64 KiB + the bounded header walk"
    )]
    Parse::Icmp(IcmpAt {
        key,
        l4: l4 as u32,
        l3_len: l3_len as u32,
        kind,
        code,
    })
}

#[inline(always)]
fn parse_v6(ctx: &XdpContext) -> Parse {
    let Some(ip) = ptr_at::<Ipv6Hdr>(ctx, ETH_LEN) else {
        return Parse::Verdict(Reason::DropMalformedL3);
    };
    // SAFETY: ptr_at checked the 40-byte header.
    let ip = unsafe { &*ip };
    if u32::from_be(ip.vtcfl) >> 28 != 6 {
        return Parse::Verdict(Reason::DropMalformedL3);
    }
    let l3_len = IPV6_LEN + usize::from(u16::from_be(ip.plen));
    if ETH_LEN + l3_len > frame_len(ctx) {
        return Parse::Verdict(Reason::DropMalformedL3);
    }
    let mut key = flow_key(ip.dst, ip.src, 0, FAMILY_V6);
    let mut next = ip.next;
    let mut off = ETH_LEN + IPV6_LEN;
    // The fast path: TCP or UDP right after the fixed header, no walk.
    if next == PROTO_TCP || next == PROTO_UDP {
        key.vip.proto = next;
        return parse_l4(ctx, key, off, ETH_LEN + l3_len, l3_len);
    }
    let mut walked = 0;
    let mut fragment: Option<FragTag> = None;
    loop {
        match next {
            PROTO_TCP | PROTO_UDP => break,
            PROTO_ICMPV6 if fragment.is_none() => {
                key.vip.proto = PROTO_ICMPV6;
                return icmp_at(ctx, key, off, ETH_LEN + l3_len, l3_len);
            }
            NEXTHDR_HOP | NEXTHDR_ROUTING | NEXTHDR_DEST | NEXTHDR_AUTH => {
                if walked == MAX_IPV6_EXT_HEADERS {
                    return Parse::Verdict(Reason::PassIpv6ExtHdr);
                }
                walked += 1;
                // One two-byte read (next header, length): a single-byte read at a
                // variable offset gives the verifier no packet range.
                let Some(ext) = ptr_at::<[u8; 2]>(ctx, off) else {
                    return Parse::Verdict(Reason::DropMalformedL3);
                };
                // SAFETY: ptr_at checked both bytes.
                let [nh, units] = unsafe { *ext };
                // AH counts 4-octet units minus 2 (RFC 4302); the others 8-octet units
                // minus 1 (RFC 8200).
                off += if next == NEXTHDR_AUTH {
                    (usize::from(units) + 2) * 4
                } else {
                    (usize::from(units) + 1) * 8
                };
                next = nh;
                if off > MAX_L4_OFFSET {
                    return Parse::Verdict(Reason::DropMalformedL3);
                }
            }
            NEXTHDR_FRAGMENT => {
                if walked == MAX_IPV6_EXT_HEADERS {
                    return Parse::Verdict(Reason::PassIpv6ExtHdr);
                }
                walked += 1;
                let Some(frag) = ptr_at::<[u8; 8]>(ctx, off) else {
                    return Parse::Verdict(Reason::DropMalformedL3);
                };
                // SAFETY: ptr_at checked the 8-byte fragment header: next header,
                // reserved, offset and flags, identification.
                let [nh, _, hi, lo, id0, id1, id2, id3] = unsafe { *frag };
                let offset_flags = u16::from_be_bytes([hi, lo]);
                off += 8;
                next = nh;
                if offset_flags & (IPV6_OFFSET_MASK | IPV6_MORE_FRAGMENTS) == 0 {
                    // An atomic fragment (RFC 6946): the whole packet.
                    continue;
                }
                let tag = FragTag {
                    id: u32::from_ne_bytes([id0, id1, id2, id3]),
                    proto: nh,
                };
                if offset_flags & IPV6_OFFSET_MASK != 0 {
                    if nh != PROTO_TCP && nh != PROTO_UDP && !is_ext_header(nh) {
                        return Parse::Verdict(Reason::PassNonVip);
                    }
                    return later_fragment(&key, tag, l3_len);
                }
                fragment = Some(tag);
            }
            NEXTHDR_ESP | NEXTHDR_MOBILITY | NEXTHDR_HIP | NEXTHDR_SHIM6 | NEXTHDR_EXPERIMENT1
            | NEXTHDR_EXPERIMENT2 => return Parse::Verdict(Reason::PassIpv6ExtHdr),
            _ => return Parse::Verdict(Reason::PassNonVip),
        }
    }
    key.vip.proto = next;
    let l4 = parse_l4(ctx, key, off, ETH_LEN + l3_len, l3_len);
    match fragment {
        None => l4,
        Some(tag) => first_fragment(l4, tag),
    }
}

/// Whether `next` is an extension header the walk follows (the fragment header
/// aside).
#[inline(always)]
pub(crate) fn is_ext_header(next: u8) -> bool {
    matches!(
        next,
        NEXTHDR_HOP | NEXTHDR_ROUTING | NEXTHDR_DEST | NEXTHDR_AUTH
    )
}

/// The flow key of `src` → `dst` (address words in network order) with both ports zero.
///
/// Built as ten whole words: field-by-field, LLVM merges the zero bytes into `memset`
/// calls, which BPF runs as a byte loop in a subprogram.
#[inline(always)]
pub(crate) fn flow_key(dst: [u32; 4], src: [u32; 4], proto: u8, family: u8) -> FlowKey {
    FlowKey::from_words([
        dst[0],
        dst[1],
        dst[2],
        dst[3],
        u32::from_ne_bytes([0, 0, proto, family]),
        src[0],
        src[1],
        src[2],
        src[3],
        0,
    ])
}

/// Reads the ports (and TCP flags) of the L4 header at `l4`, which must end before
/// `l3_end` (the end of the IP packet per its header).
#[inline(always)]
fn parse_l4(ctx: &XdpContext, mut key: FlowKey, l4: usize, l3_end: usize, l3_len: usize) -> Parse {
    let is_tcp = key.vip.proto == PROTO_TCP;
    // The frame bound is checked before the IP-length bound: the other way round, LLVM
    // proves the frame check redundant (the IP length was checked against the frame)
    // and drops it, and the verifier, which does not track that relation, rejects the
    // read.
    let (ports, tcp_flags, tcp_seq) = if is_tcp {
        let Some(tcp) = ptr_at::<[u8; TCP_MIN_LEN]>(ctx, l4) else {
            return Parse::TruncatedL4(key);
        };
        // SAFETY: ptr_at checked the 20-byte TCP header; the sequence number is bytes
        // 4..8 (RFC 9293).
        unsafe {
            let seq = *tcp.cast::<[u32; 2]>();
            (*tcp.cast::<Ports>(), (*tcp)[13], seq[1])
        }
    } else {
        let Some(udp) = ptr_at::<[u8; UDP_LEN]>(ctx, l4) else {
            return Parse::TruncatedL4(key);
        };
        // SAFETY: ptr_at checked the 8-byte UDP header.
        (unsafe { *udp.cast::<Ports>() }, 0, 0)
    };
    let min = if is_tcp { TCP_MIN_LEN } else { UDP_LEN };
    if l4 + min > l3_end {
        return Parse::TruncatedL4(key);
    }
    key.sport = ports.src;
    key.vip.port = ports.dst;
    Parse::Packet(Parsed {
        key,
        #[expect(
            clippy::cast_possible_truncation,
            reason = "l3_len comes from a 16-bit length field plus 40"
        )]
        l3_len: l3_len as u32,
        tcp_flags,
        tcp_seq,
    })
}
