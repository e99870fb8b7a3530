// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! "Too big" answers: a VIP packet that would exceed `mtu` once encapsulated and may not
//! be fragmented is answered, from the VIP to the client, with ICMP "destination
//! unreachable, fragmentation needed and DF set" (RFC 792 type 3 code 4) carrying the
//! next-hop MTU (RFC 1191 section 4), or ICMPv6 "packet too big" (RFC 4443 section 3.2,
//! RFC 8201). The next-hop MTU is `mtu` minus the outer header the packet's backend
//! needs (20 bytes for IPv4, 40 for IPv6), so the client's next segments fit once
//! encapsulated.
//!
//! May not be fragmented: IPv6 (only sources fragment) and IPv4 with DF. An IPv4 packet
//! without DF is dropped (`drop_too_big`): a router would fragment it, but XDP cannot
//! (one frame in, one frame out), and a sender that allows fragmentation does not do
//! path-MTU discovery, so "fragmentation needed" would tell it nothing it acts on
//! (RFC 1191 section 3: the message means a DF packet was dropped).
//!
//! The answer is built in place: the headers are pushed in front of the packet, whose
//! leading bytes become the quoted "invoking packet", and the frame is cut to length.
//! The quote is as long as the RFCs allow: an ICMP error of at most 576 bytes (RFC 1812
//! section 4.3.2.3: 548 quoted bytes) and an ICMPv6 error of at most the minimum IPv6
//! MTU, 1,280 bytes (RFC 4443 section 2.4 (c): 1,232 quoted bytes). A too-big packet is
//! always longer than that (`mtu` is at least 576, and 1,280 with IPv6 backends). The
//! IPv4 header is new (never the invoking packet's flags: no MF, offset 0), with
//! precedence "internetwork control" (TOS 0xc0, RFC 1812 section 4.3.2.5) and TTL 64;
//! the Ethernet addresses are the invoking frame's, swapped. Answers are rate-limited
//! (`ratelimit`, kind `ICMP_RATE_TOO_BIG`).

use aya_ebpf::{
    bindings::xdp_action,
    helpers::generated::{bpf_xdp_adjust_head, bpf_xdp_adjust_tail},
    programs::XdpContext,
};
use lb_common::{
    maps::ICMP_RATE_TOO_BIG,
    stats::Reason,
    types::{CONFIG_ICMP_TOO_BIG, LbConfig, PROTO_ICMP, PROTO_ICMPV6},
};

use crate::{
    csum,
    headers::{EthHdr, Ipv4Hdr, Ipv6Hdr},
    packet::{frame_len, ptr_at},
    parse::{ETH_LEN, ICMP_HDR_LEN},
    ratelimit,
};

/// Bytes of the invoking packet an ICMP answer quotes.
const V4_QUOTE: usize = 576 - IPV4_LEN - ICMP_HDR_LEN;
/// Bytes of the invoking packet an ICMPv6 answer quotes.
const V6_QUOTE: usize = 1280 - IPV6_LEN - ICMP_HDR_LEN;
const IPV4_LEN: usize = size_of::<Ipv4Hdr>();
const IPV6_LEN: usize = size_of::<Ipv6Hdr>();
/// Headers pushed in front of the invoking packet.
const V4_PUSH: usize = IPV4_LEN + ICMP_HDR_LEN;
const V6_PUSH: usize = IPV6_LEN + ICMP_HDR_LEN;
/// Offsets of the ICMP header and of the quote in the answer.
const V4_ICMP: usize = ETH_LEN + IPV4_LEN;
const V6_ICMP: usize = ETH_LEN + IPV6_LEN;
const V4_FRAME: usize = V4_ICMP + ICMP_HDR_LEN + V4_QUOTE;
const V6_FRAME: usize = V6_ICMP + ICMP_HDR_LEN + V6_QUOTE;
const _: () =
    assert!(V4_QUOTE.is_multiple_of(4) && V6_QUOTE.is_multiple_of(4) && V4_ICMP.is_multiple_of(2));

const ETH_P_IP: u16 = 0x0800_u16.to_be();
const ETH_P_IPV6: u16 = 0x86dd_u16.to_be();
/// IPv4 "don't fragment", wire order.
const IPV4_DF: u16 = 0x4000_u16.to_be();
const ICMP_DEST_UNREACH: u8 = 3;
const ICMP_FRAG_NEEDED: u8 = 4;
const ICMPV6_PKT_TOOBIG: u8 = 2;
const TOS_INTERNETWORK_CONTROL: u8 = 0xc0;
const TTL: u8 = 64;

/// What the answer needs of the invoking frame, read before it is overwritten.
struct Invoking {
    eth: EthHdr,
    src: [u32; 4],
    dst: [u32; 4],
    id: u16,
}

/// Answers a VIP packet of `l3_len` bytes (IPv4 when `v4`) that does not fit the MTU
/// after an outer header of `overhead` bytes; returns the verdict.
#[inline(always)]
pub(crate) fn answer(
    ctx: &XdpContext,
    cfg: &LbConfig,
    v4: bool,
    overhead: u32,
    l3_len: u32,
) -> (u32, Reason) {
    const TOO_BIG: (u32, Reason) = (xdp_action::XDP_DROP, Reason::DropTooBig);
    if cfg.flags & CONFIG_ICMP_TOO_BIG == 0 {
        return TOO_BIG;
    }
    let quote = if v4 { V4_QUOTE } else { V6_QUOTE };
    if (l3_len as usize) < quote {
        return TOO_BIG;
    }
    let Some(invoking) = read_invoking(ctx, v4) else {
        return TOO_BIG;
    };
    if !ratelimit::allow(ICMP_RATE_TOO_BIG, cfg) {
        return (xdp_action::XDP_DROP, Reason::DropIcmpRateLimited);
    }
    let mtu = u32::from(cfg.mtu).saturating_sub(overhead);
    let built = if v4 {
        build_v4(ctx, &invoking, mtu)
    } else {
        build_v6(ctx, &invoking, mtu)
    };
    match built {
        Some(()) => (xdp_action::XDP_TX, Reason::TxIcmpTooBig),
        None => (xdp_action::XDP_DROP, Reason::DropEncapFail),
    }
}

/// The invoking frame's Ethernet header, addresses and IPv4 identification; `None` for
/// an IPv4 packet without DF (or a frame too short, which parsing already excluded).
#[inline(always)]
fn read_invoking(ctx: &XdpContext, v4: bool) -> Option<Invoking> {
    let eth = ptr_at::<EthHdr>(ctx, 0)?;
    // SAFETY: ptr_at checked the 14 bytes.
    let eth = unsafe { *eth };
    if v4 {
        let ip = ptr_at::<Ipv4Hdr>(ctx, ETH_LEN)?;
        // SAFETY: ptr_at checked the 20 bytes.
        let ip = unsafe { &*ip };
        if ip.frag & IPV4_DF == 0 {
            return None;
        }
        Some(Invoking {
            eth,
            src: [ip.src, 0, 0, 0],
            dst: [ip.dst, 0, 0, 0],
            id: ip.id,
        })
    } else {
        let ip = ptr_at::<Ipv6Hdr>(ctx, ETH_LEN)?;
        // SAFETY: ptr_at checked the 40 bytes.
        let ip = unsafe { &*ip };
        Some(Invoking {
            eth,
            src: ip.src,
            dst: ip.dst,
            id: 0,
        })
    }
}

/// Pushes `push` bytes in front of the frame and cuts it to `frame` bytes.
#[inline(always)]
fn reshape(ctx: &XdpContext, push: usize, frame: usize) -> Option<()> {
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_possible_wrap,
        reason = "header and frame lengths are far below 2^31"
    )]
    let (push, frame) = (push as i32, frame as i32);
    // SAFETY: ctx is the program's context; the helpers check their deltas.
    if unsafe { bpf_xdp_adjust_head(ctx.ctx, -push) } != 0 {
        return None;
    }
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_possible_wrap,
        reason = "an XDP frame is at most a page"
    )]
    let now = frame_len(ctx) as i32;
    // SAFETY: as above.
    (unsafe { bpf_xdp_adjust_tail(ctx.ctx, frame - now) } == 0).then_some(())
}

/// The answer's Ethernet header: back to where the invoking frame came from.
#[inline(always)]
fn reply_eth(invoking: &Invoking, proto: u16) -> EthHdr {
    EthHdr {
        dst: invoking.eth.src,
        src: invoking.eth.dst,
        proto,
    }
}

#[inline(always)]
fn build_v4(ctx: &XdpContext, invoking: &Invoking, mtu: u32) -> Option<()> {
    reshape(ctx, V4_PUSH, V4_FRAME)?;
    let mut ip = Ipv4Hdr {
        vihl: 0x45,
        tos: TOS_INTERNETWORK_CONTROL,
        #[expect(clippy::cast_possible_truncation, reason = "576")]
        tot_len: ((V4_FRAME - ETH_LEN) as u16).to_be(),
        id: invoking.id,
        frag: 0,
        ttl: TTL,
        proto: PROTO_ICMP,
        check: 0,
        src: invoking.dst[0],
        dst: invoking.src[0],
    };
    ip.check = csum::ipv4_header(&ip);
    #[expect(clippy::cast_possible_truncation, reason = "mtu comes from a u16")]
    let mtu = (mtu as u16).to_be();
    let head = u16::from_ne_bytes([ICMP_DEST_UNREACH, ICMP_FRAG_NEEDED]);
    let sum = csum::frame_sum(ctx, V4_ICMP + ICMP_HDR_LEN, V4_QUOTE, 0)?;
    let check = !csum::fold(u64::from(sum) + u64::from(head) + u64::from(mtu));
    let eth = ptr_at::<EthHdr>(ctx, 0)?;
    let out = ptr_at::<Ipv4Hdr>(ctx, ETH_LEN)?;
    let icmp = ptr_at::<[u16; 4]>(ctx, V4_ICMP)?;
    // SAFETY: ptr_at checked the three headers, which now precede the quote.
    unsafe {
        *eth = reply_eth(invoking, ETH_P_IP);
        *out = ip;
        *icmp = [head, check, 0, mtu];
    }
    Some(())
}

#[inline(always)]
fn build_v6(ctx: &XdpContext, invoking: &Invoking, mtu: u32) -> Option<()> {
    reshape(ctx, V6_PUSH, V6_FRAME)?;
    #[expect(clippy::cast_possible_truncation, reason = "1,240")]
    let plen = ((V6_FRAME - V6_ICMP) as u16).to_be();
    let ip = Ipv6Hdr {
        vtcfl: (6u32 << 28).to_be(),
        plen,
        next: PROTO_ICMPV6,
        hop_limit: TTL,
        src: invoking.dst,
        dst: invoking.src,
    };
    let head = u16::from_ne_bytes([ICMPV6_PKT_TOOBIG, 0]);
    let mtu = mtu.to_be();
    // The pseudo-header (RFC 8200 section 8.1): addresses, upper-layer length, next
    // header; then the ICMPv6 header and the quote.
    let mut sum = u64::from(head) + csum::word32(mtu);
    for i in 0..4 {
        sum += csum::word32(ip.src[i]) + csum::word32(ip.dst[i]);
    }
    sum += u64::from(plen) + u64::from(u16::from_ne_bytes([0, PROTO_ICMPV6]));
    let quoted = csum::frame_sum(ctx, V6_ICMP + ICMP_HDR_LEN, V6_QUOTE, 0)?;
    let check = !csum::fold(sum + u64::from(quoted));
    let eth = ptr_at::<EthHdr>(ctx, 0)?;
    let out = ptr_at::<Ipv6Hdr>(ctx, ETH_LEN)?;
    let icmp = ptr_at::<[u16; 4]>(ctx, V6_ICMP)?;
    #[expect(
        clippy::cast_possible_truncation,
        reason = "the two halves of the 32-bit field, in memory order"
    )]
    let [m0, m1] = [mtu as u16, (mtu >> 16) as u16];
    // SAFETY: ptr_at checked the three headers, which now precede the quote.
    unsafe {
        *eth = reply_eth(invoking, ETH_P_IPV6);
        *out = ip;
        *icmp = [head, check, m0, m1];
    }
    Some(())
}
