// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Forwarding: IP-in-IP encapsulation to the chosen backend and the next-hop MAC.
//!
//! IPv4 backends: IPv4-in-IPv4 (RFC 2003, protocol 4); IPv6 backends of IPv6 VIPs:
//! IPv6-in-IPv6 (RFC 2473, next header 41); IPv6 backends of IPv4 VIPs: IPv4-in-IPv6
//! (RFC 2473, next header 4), for backend networks that are IPv6 only. (An IPv6 VIP
//! with an IPv4 backend is refused, `drop_bad_config`.) The outer header is pushed with
//! `bpf_xdp_adjust_head`; the inner packet is not touched. Outer fields: destination =
//! backend, TTL / hop limit 64, TOS / traffic class copied from the inner header, IPv4
//! identification and DF copied from the inner header, IPv4 header checksum computed
//! with a full carry fold (RFC 1071).
//!
//! Outer source: the configured address of the family, or, with a source prefix
//! (`CONFIG_SOURCE_PREFIX_V4` / `_V6`), the prefix with its host bits (at most the low
//! 32) taken from the flow hash: stable per flow, spread over flows, so that a
//! backend NIC's receive-side scaling, which hashes the outer addresses of IP-in-IP,
//! spreads one VIP's tunnels over its queues. IPv6 flow label: copied from an IPv6
//! inner header, or the flow hash's low 20 bits (`CONFIG_FLOW_LABEL_HASH`, and always
//! for an IPv4 inner packet), as RFC 6438 recommends for tunnels. The flow hash is
//! computed only when one of these options is on, or for IPv4-in-IPv6.
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
    hash::flow_hash,
    stats::Reason,
    types::{
        BackendEntry, CONFIG_FLOW_LABEL_HASH, CONFIG_SOURCE_PREFIX_V4, CONFIG_SOURCE_PREFIX_V6,
        FAMILY_V4, FAMILY_V6, LbConfig, NEXTHOP_GATEWAY,
    },
};

use crate::{
    csum,
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
/// The options that need the flow hash.
const HASHED_OUTER: u32 =
    CONFIG_SOURCE_PREFIX_V4 | CONFIG_SOURCE_PREFIX_V6 | CONFIG_FLOW_LABEL_HASH;
/// IPv6 flow label bits of the first header word (host order).
const FLOW_LABEL_MASK: u32 = 0x000f_ffff;

/// How the encapsulated frame leaves.
pub(crate) struct Sent {
    /// `XDP_TX` or `XDP_REDIRECT`.
    pub(crate) action: u32,
    /// `tx_encap` or `redirect_encap`.
    pub(crate) reason: Reason,
}

impl Sent {
    /// The reason of a frame sent this way that is not a plain VIP packet: `tx` for
    /// `XDP_TX`, `redirect` for a redirect.
    #[inline(always)]
    pub(crate) fn relabel(&self, tx: Reason, redirect: Reason) -> Reason {
        if self.reason == Reason::TxEncap {
            tx
        } else {
            redirect
        }
    }
}

/// The outer header's family and what goes into it.
struct Outer {
    /// IPv4 outer header (else IPv6).
    v4: bool,
    /// Bytes it adds.
    len: u32,
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
/// `hash` is the flow hash for the per-flow outer fields when the caller has it (a
/// later fragment has its first fragment's); otherwise it is computed from `p.key`
/// when an option needs it.
#[inline(always)]
pub(crate) fn encapsulate(
    ctx: &XdpContext,
    p: &Parsed,
    backend_id: u32,
    backend: &BackendEntry,
    cfg: &LbConfig,
    hash: Option<u32>,
) -> Result<Sent, Reason> {
    let outer = outer(p, backend)?;
    let outer_len = p.l3_len + outer.len;
    if outer_len > u32::from(cfg.mtu) {
        return Err(Reason::DropTooBig);
    }
    let hop = next_hop(ctx, outer.v4, backend_id, backend, cfg)?;
    let inner_v4 = p.key.vip.family == FAMILY_V4;
    // IPv4-in-IPv6 always takes its flow label from the hash (nothing to copy).
    let hash = if cfg.flags & HASHED_OUTER == 0 && (outer.v4 || !inner_v4) {
        0
    } else {
        hash.unwrap_or_else(|| flow_hash(&p.key, cfg.hash_seed))
    };
    #[expect(
        clippy::cast_possible_truncation,
        reason = "outer_len <= mtu, a u16, was checked above"
    )]
    let outer_len = outer_len as u16;
    if outer.v4 {
        push_ipv4(ctx, backend, cfg, &hop, outer_len, hash)?;
    } else {
        push_ipv6(ctx, backend, cfg, &hop, p.l3_len, inner_v4, hash)?;
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

/// The outer header a packet of `p`'s family needs to reach `backend`:
/// `drop_bad_config` for an IPv6 VIP with an IPv4 backend (or a backend of no family).
#[inline(always)]
fn outer(p: &Parsed, backend: &BackendEntry) -> Result<Outer, Reason> {
    if backend.family == p.key.vip.family {
        let v4 = backend.family == FAMILY_V4;
        return Ok(Outer {
            v4,
            len: if v4 { IPV4_LEN_U32 } else { IPV6_LEN_U32 },
        });
    }
    if p.key.vip.family == FAMILY_V4 && backend.family == FAMILY_V6 {
        return Ok(Outer {
            v4: false,
            len: IPV6_LEN_U32,
        });
    }
    Err(Reason::DropBadConfig)
}

/// Bytes of outer header a packet of family `family` needs to reach a backend of
/// `backend_family` (for the MTU an ICMP "too big" announces).
#[inline(always)]
pub(crate) fn overhead(backend_family: u8) -> u32 {
    if backend_family == FAMILY_V6 {
        IPV6_LEN_U32
    } else {
        IPV4_LEN_U32
    }
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
    hash: u32,
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
        src: source_v4(cfg, hash),
        dst: addr_words(&backend.addr)[0],
    };
    ip.check = csum::ipv4_header(&ip);
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

/// The outer IPv4 source: the configured address, or the prefix with the flow hash in
/// its host bits.
#[inline(always)]
fn source_v4(cfg: &LbConfig, hash: u32) -> u32 {
    if cfg.flags & CONFIG_SOURCE_PREFIX_V4 == 0 {
        return u32::from_ne_bytes(cfg.src_v4);
    }
    let mask = cfg.src_host_mask_v4;
    (u32::from_ne_bytes(cfg.src_prefix_v4) & !mask) | (hash.to_be() & mask)
}

/// The outer IPv6 source (as [`source_v4`], host bits in the last word).
#[inline(always)]
fn source_v6(cfg: &LbConfig, hash: u32) -> [u32; 4] {
    if cfg.flags & CONFIG_SOURCE_PREFIX_V6 == 0 {
        return addr_words(&cfg.src_v6);
    }
    let mut src = addr_words(&cfg.src_prefix_v6);
    let mask = cfg.src_host_mask_v6;
    src[3] = (src[3] & !mask) | (hash.to_be() & mask);
    src
}

/// Pushes Ethernet + outer IPv6 in front of the inner packet of `inner_len` bytes
/// (IPv4 when `inner_v4`).
#[inline(always)]
fn push_ipv6(
    ctx: &XdpContext,
    backend: &BackendEntry,
    cfg: &LbConfig,
    hop: &NextHop,
    inner_len: u32,
    inner_v4: bool,
    hash: u32,
) -> Result<(), Reason> {
    // Version, traffic class, flow label (host order).
    let (first, next) = if inner_v4 {
        let inner = ptr_at::<Ipv4Hdr>(ctx, ETH_LEN).ok_or(Reason::DropEncapFail)?;
        // SAFETY: ptr_at checked the inner header's 20 bytes.
        let tos = unsafe { (*inner).tos };
        let first = 6 << 28 | u32::from(tos) << 20 | hash & FLOW_LABEL_MASK;
        (first, IPPROTO_IPIP)
    } else {
        let inner = ptr_at::<Ipv6Hdr>(ctx, ETH_LEN).ok_or(Reason::DropEncapFail)?;
        // SAFETY: ptr_at checked the inner header.
        let first = u32::from_be(unsafe { (*inner).vtcfl });
        let first = if cfg.flags & CONFIG_FLOW_LABEL_HASH == 0 {
            first
        } else {
            first & !FLOW_LABEL_MASK | hash & FLOW_LABEL_MASK
        };
        (first, IPPROTO_IPV6)
    };
    #[expect(
        clippy::cast_possible_truncation,
        reason = "the inner packet fits the MTU check, a u16"
    )]
    let ip = Ipv6Hdr {
        vtcfl: first.to_be(),
        plen: (inner_len as u16).to_be(),
        next,
        hop_limit: OUTER_TTL,
        src: source_v6(cfg, hash),
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
