// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Forwarding: IP-in-IP encapsulation to the chosen backend and the next-hop MAC.
//!
//! IPv4 VIPs: IPv4-in-IPv4 (RFC 2003, protocol 4); IPv6 VIPs: IPv6-in-IPv6 (RFC 2473,
//! next header 41). The outer header is pushed with `bpf_xdp_adjust_head`; the inner
//! packet is not touched. Outer fields: source = configured per family, destination =
//! backend, TTL / hop limit 64, TOS / traffic class (and IPv6 flow label) copied from the
//! inner header, IPv4 identification and DF copied from the inner header, IPv4 header
//! checksum computed with a full carry fold (RFC 1071).
//!
//! Next hop: in `NEXTHOP_FIB` mode, `bpf_fib_lookup` on the outer destination gives both
//! MACs and the egress interface. It runs with `BPF_FIB_LOOKUP_OUTPUT`, because the LB
//! originates the outer packet, and needs forwarding enabled on the interface (kernel
//! doc: `bpf_fib_lookup` in `include/uapi/linux/bpf.h`). Each CPU reuses a successful
//! result for the backend during `nexthop_cache_ns` (`NEXTHOP_CACHE`), so route and
//! neighbour changes take effect within that time. In `NEXTHOP_GATEWAY` mode the
//! configured gateway and interface MACs are used. A packet whose neighbour is unresolved
//! is dropped and counted rather than passed: passing would hand a VIP packet to the host
//! stack.

use aya_ebpf::{
    bindings::{
        BPF_FIB_LKUP_RET_NO_NEIGH, BPF_FIB_LKUP_RET_SUCCESS, BPF_FIB_LOOKUP_OUTPUT,
        bpf_fib_lookup as FibParams, xdp_action,
    },
    helpers::generated::{
        bpf_fib_lookup, bpf_ktime_get_coarse_ns, bpf_redirect, bpf_xdp_adjust_head,
    },
    programs::XdpContext,
};
use lb_common::{
    stats::Reason,
    types::{BackendEntry, FAMILY_V4, LbConfig, NEXTHOP_GATEWAY},
};

use crate::{
    headers::{EthHdr, Ipv4Hdr, Ipv6Hdr, addr_words},
    maps::NEXTHOP_CACHE,
    packet::ptr_at,
    parse::{ETH_LEN, Parsed},
};

const IPV4_LEN: usize = size_of::<Ipv4Hdr>();
const IPV6_LEN: usize = size_of::<Ipv6Hdr>();
/// [`IPV4_LEN`] and [`IPV6_LEN`] as `u32`.
const IPV4_LEN_U32: u32 = 20;
const IPV6_LEN_U32: u32 = 40;
/// Size of `struct bpf_fib_lookup` as the helper's `int plen`.
const FIB_PARAMS_LEN: i32 = 64;
const _: () = assert!(
    IPV4_LEN_U32 as usize == IPV4_LEN
        && IPV6_LEN_U32 as usize == IPV6_LEN
        && FIB_PARAMS_LEN as usize == size_of::<FibParams>()
);
const OUTER_TTL: u8 = 64;
const IPPROTO_IPIP: u8 = 4;
const IPPROTO_IPV6: u8 = 41;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const ETH_P_IP: u16 = 0x0800_u16.to_be();
const ETH_P_IPV6: u16 = 0x86dd_u16.to_be();
/// IPv4 "don't fragment" bit in the flags/fragment-offset field (RFC 791), wire order.
const IPV4_DF: u16 = 0x4000_u16.to_be();

/// How the encapsulated frame leaves.
pub(crate) struct Sent {
    /// `XDP_TX` or `XDP_REDIRECT`.
    pub(crate) action: u32,
    /// `tx_encap` or `redirect_encap`.
    pub(crate) reason: Reason,
}

/// MACs and egress of the next hop. The MACs are held as three 2-byte words (memory
/// order), read from their 2-byte aligned sources: byte arrays copied through the
/// stack lose their alignment and cost a load, a spill and a shift per byte.
struct NextHop {
    dmac: [u16; 3],
    smac: [u16; 3],
    /// Egress interface from the FIB, 0 in gateway mode (send back out with XDP_TX).
    ifindex: u32,
}

/// Encapsulates the packet to `backend` (id `backend_id`) and returns how to send it.
#[inline(always)]
pub(crate) fn encapsulate(
    ctx: &XdpContext,
    p: &Parsed,
    backend_id: u32,
    backend: &BackendEntry,
    cfg: &LbConfig,
) -> Result<Sent, Reason> {
    if backend.family != p.key.vip.family {
        return Err(Reason::DropBadConfig);
    }
    let v4 = p.key.vip.family == FAMILY_V4;
    let outer_len = p.l3_len + if v4 { IPV4_LEN_U32 } else { IPV6_LEN_U32 };
    if outer_len > u32::from(cfg.mtu) {
        return Err(Reason::DropTooBig);
    }
    let hop = next_hop(ctx, v4, backend_id, backend, cfg)?;
    #[expect(
        clippy::cast_possible_truncation,
        reason = "outer_len <= mtu, a u16, was checked above"
    )]
    let outer_len = outer_len as u16;
    if v4 {
        push_ipv4(ctx, backend, cfg, &hop, outer_len)?;
    } else {
        push_ipv6(ctx, backend, cfg, &hop, p.l3_len)?;
    }
    let ingress = ctx.ingress_ifindex();
    if hop.ifindex != 0 && hop.ifindex as usize != ingress {
        // SAFETY: bpf_redirect only records the target interface for this packet.
        let action = unsafe { bpf_redirect(hop.ifindex, 0) };
        #[expect(
            clippy::cast_sign_loss,
            clippy::cast_possible_truncation,
            reason = "bpf_redirect returns an XDP action (small, non-negative)"
        )]
        return Ok(Sent {
            action: action as u32,
            reason: Reason::RedirectEncap,
        });
    }
    Ok(Sent {
        action: xdp_action::XDP_TX,
        reason: Reason::TxEncap,
    })
}

/// The next hop of the outer packet.
#[inline(always)]
fn next_hop(
    ctx: &XdpContext,
    v4: bool,
    backend_id: u32,
    backend: &BackendEntry,
    cfg: &LbConfig,
) -> Result<NextHop, Reason> {
    if cfg.nexthop_mode == NEXTHOP_GATEWAY {
        return Ok(NextHop {
            dmac: mac_words(&cfg.gateway_mac),
            smac: mac_words(&cfg.if_mac),
            ifindex: 0,
        });
    }
    if cfg.nexthop_cache_ns == 0 {
        return fib_next_hop(ctx, v4, backend, cfg);
    }
    // SAFETY: bpf_ktime_get_coarse_ns takes no arguments and cannot fail.
    let now = unsafe { bpf_ktime_get_coarse_ns() };
    let Some(cached) = NEXTHOP_CACHE.get_ptr_mut(backend_id) else {
        return fib_next_hop(ctx, v4, backend, cfg);
    };
    // SAFETY: per-CPU array element, used only by this CPU during this run.
    let cached = unsafe { &mut *cached };
    // One copy of the address: the compare, the lookup and the entry use the same one.
    let backend = *backend;
    let addr = addr_words(&backend.addr);
    let same = addr_words(&cached.addr)
        .iter()
        .zip(addr)
        .fold(0, |diff, (a, b)| diff | (a ^ b))
        == 0;
    // Also bounded by the current cache time, which a reload may have lowered.
    if same && now < cached.expires_ns && cached.expires_ns - now <= cfg.nexthop_cache_ns {
        return Ok(NextHop {
            dmac: mac_words(&cached.dmac),
            smac: mac_words(&cached.smac),
            ifindex: cached.ifindex,
        });
    }
    let hop = fib_next_hop(ctx, v4, &backend, cfg)?;
    cached.addr = backend.addr;
    cached.dmac = words_mac(hop.dmac);
    cached.smac = words_mac(hop.smac);
    cached.ifindex = hop.ifindex;
    cached.expires_ns = now.saturating_add(cfg.nexthop_cache_ns);
    Ok(hop)
}

/// The next hop of the outer packet from `bpf_fib_lookup`.
#[inline(always)]
fn fib_next_hop(
    ctx: &XdpContext,
    v4: bool,
    backend: &BackendEntry,
    cfg: &LbConfig,
) -> Result<NextHop, Reason> {
    // SAFETY: bpf_fib_lookup is a plain-old-data struct for which all zeroes is valid.
    let mut params: FibParams = unsafe { core::mem::zeroed() };
    #[expect(
        clippy::cast_possible_truncation,
        reason = "interface indexes are u32 in the kernel"
    )]
    {
        params.ifindex = ctx.ingress_ifindex() as u32;
    }
    if v4 {
        params.family = AF_INET;
        params.l4_protocol = IPPROTO_IPIP;
        params.__bindgen_anon_3.ipv4_src = u32::from_ne_bytes(cfg.src_v4);
        params.__bindgen_anon_4.ipv4_dst = addr_words(&backend.addr)[0];
    } else {
        params.family = AF_INET6;
        params.l4_protocol = IPPROTO_IPV6;
        params.__bindgen_anon_3.ipv6_src = addr_words(&cfg.src_v6);
        params.__bindgen_anon_4.ipv6_dst = addr_words(&backend.addr);
    }
    // SAFETY: ctx is the program's context and params a valid, initialised struct of the
    // size passed.
    let rc = unsafe {
        bpf_fib_lookup(
            ctx.ctx.cast(),
            &raw mut params,
            FIB_PARAMS_LEN,
            BPF_FIB_LOOKUP_OUTPUT,
        )
    };
    match u32::try_from(rc) {
        Ok(BPF_FIB_LKUP_RET_SUCCESS) => Ok(NextHop {
            dmac: mac_words(&params.dmac),
            smac: mac_words(&params.smac),
            ifindex: params.ifindex,
        }),
        Ok(BPF_FIB_LKUP_RET_NO_NEIGH) => Err(Reason::DropFibNoNeigh),
        _ => Err(Reason::DropFibFail),
    }
}

/// Grows the headroom by `len` bytes.
#[inline(always)]
fn push_head(ctx: &XdpContext, len: usize) -> Result<(), Reason> {
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_possible_wrap,
        reason = "len is the size of an IP header"
    )]
    let delta = -(len as i32);
    // SAFETY: ctx is the program's context; the helper validates the delta.
    if unsafe { bpf_xdp_adjust_head(ctx.ctx, delta) } != 0 {
        return Err(Reason::DropEncapFail);
    }
    Ok(())
}

/// A MAC address as three 2-byte words in memory order.
#[inline(always)]
fn mac_words(m: &[u8; 6]) -> [u16; 3] {
    [
        u16::from_ne_bytes([m[0], m[1]]),
        u16::from_ne_bytes([m[2], m[3]]),
        u16::from_ne_bytes([m[4], m[5]]),
    ]
}

/// Inverse of [`mac_words`].
#[inline(always)]
fn words_mac(w: [u16; 3]) -> [u8; 6] {
    let [a, b] = w[0].to_ne_bytes();
    let [c, d] = w[1].to_ne_bytes();
    let [e, f] = w[2].to_ne_bytes();
    [a, b, c, d, e, f]
}

/// The Ethernet header of an encapsulated frame.
#[inline(always)]
fn eth_header(hop: &NextHop, proto: u16) -> EthHdr {
    EthHdr {
        dst: hop.dmac,
        src: hop.smac,
        proto,
    }
}

/// Pushes Ethernet + outer IPv4 in front of the inner IPv4 packet.
#[inline(always)]
fn push_ipv4(
    ctx: &XdpContext,
    backend: &BackendEntry,
    cfg: &LbConfig,
    hop: &NextHop,
    outer_len: u16,
) -> Result<(), Reason> {
    // Inner fields copied to the outer header, read before the frame moves.
    let inner = ptr_at::<Ipv4Hdr>(ctx, ETH_LEN).ok_or(Reason::DropEncapFail)?;
    // SAFETY: ptr_at checked the inner header's 20 bytes.
    let (tos, id, frag) = unsafe { ((*inner).tos, (*inner).id, (*inner).frag) };
    let mut ip = Ipv4Hdr {
        vihl: 0x45,
        tos,
        tot_len: outer_len.to_be(),
        id,
        frag: frag & IPV4_DF,
        ttl: OUTER_TTL,
        proto: IPPROTO_IPIP,
        check: 0,
        src: u32::from_ne_bytes(cfg.src_v4),
        dst: addr_words(&backend.addr)[0],
    };
    ip.check = ipv4_checksum(&ip);
    push_head(ctx, IPV4_LEN)?;
    let eth = ptr_at::<EthHdr>(ctx, 0).ok_or(Reason::DropEncapFail)?;
    let outer = ptr_at::<Ipv4Hdr>(ctx, ETH_LEN).ok_or(Reason::DropEncapFail)?;
    // SAFETY: ptr_at checked both headers, which now precede the inner packet.
    unsafe {
        *eth = eth_header(hop, ETH_P_IP);
        *outer = ip;
    }
    Ok(())
}

/// Pushes Ethernet + outer IPv6 in front of the inner IPv6 packet of `inner_len` bytes.
#[inline(always)]
fn push_ipv6(
    ctx: &XdpContext,
    backend: &BackendEntry,
    cfg: &LbConfig,
    hop: &NextHop,
    inner_len: u32,
) -> Result<(), Reason> {
    let inner = ptr_at::<Ipv6Hdr>(ctx, ETH_LEN).ok_or(Reason::DropEncapFail)?;
    // SAFETY: ptr_at checked the inner header; its first word (version, traffic class,
    // flow label) is copied unchanged to the outer header.
    let vtcfl = unsafe { (*inner).vtcfl };
    #[expect(
        clippy::cast_possible_truncation,
        reason = "the inner packet fits the MTU check, a u16"
    )]
    let ip = Ipv6Hdr {
        vtcfl,
        plen: (inner_len as u16).to_be(),
        next: IPPROTO_IPV6,
        hop_limit: OUTER_TTL,
        src: addr_words(&cfg.src_v6),
        dst: addr_words(&backend.addr),
    };
    push_head(ctx, IPV6_LEN)?;
    let eth = ptr_at::<EthHdr>(ctx, 0).ok_or(Reason::DropEncapFail)?;
    let outer = ptr_at::<Ipv6Hdr>(ctx, ETH_LEN).ok_or(Reason::DropEncapFail)?;
    // SAFETY: ptr_at checked both headers, which now precede the inner packet.
    unsafe {
        *eth = eth_header(hop, ETH_P_IPV6);
        *outer = ip;
    }
    Ok(())
}

/// RFC 1071 checksum of an IPv4 header whose checksum field is zero. The 32-bit sum of
/// its ten 16-bit words (in memory order; the one's-complement sum is byte-order
/// independent) is folded twice, which absorbs every carry.
#[inline(always)]
pub(crate) fn ipv4_checksum(ip: &Ipv4Hdr) -> u16 {
    let words = [
        u16::from_ne_bytes([ip.vihl, ip.tos]),
        ip.tot_len,
        ip.id,
        ip.frag,
        u16::from_ne_bytes([ip.ttl, ip.proto]),
        ip.check,
    ];
    let mut sum: u32 = 0;
    for w in words {
        sum += u32::from(w);
    }
    for w in [ip.src, ip.dst] {
        sum += (w & 0xffff) + (w >> 16);
    }
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    #[expect(clippy::cast_possible_truncation, reason = "folded to 16 bits above")]
    !(sum as u16)
}
