// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Forwarding: IP-in-IP or GUE encapsulation to the chosen backend and the next-hop MAC.
//!
//! The backend entry chooses ([`BackendEntry::gue_port`]): 0 is IP-in-IP (below); a
//! port is Generic UDP Encapsulation (draft-ietf-intarea-gue, variant 0): the same
//! outer IP header with protocol / next header 17, then UDP to that port from a source
//! port in 49152..=65535 taken from the flow hash (so a backend NIC's receive-side
//! scaling, which hashes UDP ports, spreads the flows over its queues), checksum 0,
//! then the 4-byte GUE header whose Proto/ctype names the inner packet (4 or 41):
//! 12 bytes more than IP-in-IP, counted in the MTU check and the "too big" answer.
//!
//! IPv4 backends: IPv4-in-IPv4; IPv6 backends of IPv6 VIPs: IPv6-in-IPv6; IPv6 backends
//! of IPv4 VIPs: IPv4-in-IPv6, for backend networks that are IPv6 only. (An IPv6 VIP
//! with an IPv4 backend is refused, `drop_bad_config`.) The outer header
//! ([`encap`](crate::encap): destination = backend, TTL / hop limit 64, TOS / traffic
//! class, IPv4 identification and DF copied from the inner header) is pushed with
//! `bpf_xdp_adjust_head`; the inner packet is not touched.
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
//! Next hop: in `NEXTHOP_FIB` mode, the FIB lookup ([`encap`](crate::encap)) on the
//! outer destination gives both MACs and the egress interface; it needs forwarding
//! enabled on the interface (kernel doc: `bpf_fib_lookup` in
//! `include/uapi/linux/bpf.h`). Each CPU reuses a successful
//! result for the backend during `nexthop_cache_ns` (`NEXTHOP_CACHE`), so route and
//! neighbour changes take effect within that time. In `NEXTHOP_GATEWAY` mode the
//! configured gateway and interface MACs are used. A packet whose neighbour is unresolved
//! is dropped and counted rather than passed: passing would hand a VIP packet to the host
//! stack.
//!
//! Second chance ([`encapsulate_with`] with `SC`, issue 31): the GUE header carries
//! private data naming one candidate (`lb_common::types::SecondChance`: 4 bytes of
//! header and the candidate's address, 8 bytes in an IPv4 outer header, 20 in IPv6),
//! Hlen 2 or 5. Only the rare paths' program builds it ([`candidates`](crate::candidates)):
//! `lb_xdp` itself instantiates the path without it, so its code is unchanged.

use core::mem::MaybeUninit;

use aya_ebpf::{
    bindings::{xdp_action, xdp_md},
    helpers::generated::{bpf_ktime_get_coarse_ns, bpf_redirect, bpf_xdp_adjust_head},
    programs::XdpContext,
};
use lb_common::{
    stats::Reason,
    types::{
        BackendEntry, CONFIG_FLOW_LABEL_HASH, CONFIG_SOURCE_PREFIX_V4, CONFIG_SOURCE_PREFIX_V6,
        FAMILY_V4, FAMILY_V6, LbConfig, NEXTHOP_GATEWAY, NextHopEntry, SECOND_CHANCE_KIND,
        gue_source_port, second_chance_hlen,
    },
};

use crate::{
    csum,
    encap::{
        self, ETH_P_IP, ETH_P_IPV6, FIB_FOUND, FIB_NO_NEIGH, GUE_LEN, GUE_LEN_U16, IPPROTO_IPIP,
        IPPROTO_IPV6, IPPROTO_UDP, IPV4_GUE_LEN_U16, IPV4_LEN, IPV6_LEN, aligned_mac_words,
        mac_words, words_mac,
    },
    headers::{EthHdr, Ipv4Hdr, Ipv6Hdr, UdpGueHdr, addr_words, aligned_addr_words},
    maps::NEXTHOP_CACHE,
    packet::ptr_at,
    parse::{ETH_LEN, Parsed},
};

/// Bytes of one IPv4 candidate's private data (header and address).
pub(crate) const CANDIDATE_V4_LEN: u32 = 8;
/// Bytes of one IPv6 candidate's private data.
pub(crate) const CANDIDATE_V6_LEN: u32 = 20;
/// [`CANDIDATE_V4_LEN`] as a `u16`.
const CANDIDATE_V4_LEN_U16: u16 = 8;
/// [`CANDIDATE_V6_LEN`] as a `u16`.
const CANDIDATE_V6_LEN_U16: u16 = 20;
const _: () = assert!(
    CANDIDATE_V4_LEN as usize == 4 * second_chance_hlen(1, true) as usize
        && CANDIDATE_V6_LEN as usize == 4 * second_chance_hlen(1, false) as usize
        && CANDIDATE_V4_LEN_U16 as u32 == CANDIDATE_V4_LEN
        && CANDIDATE_V6_LEN_U16 as u32 == CANDIDATE_V6_LEN
);

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
pub(crate) struct Outer {
    /// IPv4 outer header (else IPv6).
    v4: bool,
    /// Bytes it adds.
    len: u32,
}

/// MACs and egress of the next hop. The MACs are held as three 2-byte words (memory
/// order), read from their 2-byte aligned sources: byte arrays copied through the
/// stack lose their alignment and cost a load, a spill and a shift per byte.
#[repr(C)]
pub(crate) struct NextHop {
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
    encapsulate_with::<false>(ctx, p, backend_id, backend, cfg, hash, backend)
}

/// [`encapsulate`]; with `SC`, to a GUE backend, the GUE header names backend
/// `candidate` (of the backend's family) as the one second-chance candidate.
#[inline(always)]
pub(crate) fn encapsulate_with<const SC: bool>(
    ctx: &XdpContext,
    p: &Parsed,
    backend_id: u32,
    backend: &BackendEntry,
    cfg: &LbConfig,
    hash: Option<u32>,
    candidate: &BackendEntry,
) -> Result<Sent, Reason> {
    let hop = route::<SC>(ctx, p, backend_id, backend, cfg)?;
    push_outer::<SC>(ctx, p, backend, cfg, hash, candidate, &hop)
}

/// The checks and the next hop of [`encapsulate_with`], before the frame changes: the
/// backend's family ([`outer`]), the MTU (`drop_too_big`), the next hop ([`next_hop`]).
#[inline(always)]
pub(crate) fn route<const SC: bool>(
    ctx: &XdpContext,
    p: &Parsed,
    backend_id: u32,
    backend: &BackendEntry,
    cfg: &LbConfig,
) -> Result<NextHop, Reason> {
    outer_len::<SC>(p, backend, cfg)?;
    next_hop(ctx, backend_id, backend, cfg)
}

/// The outer header to `backend` and the length of the packet in it: `drop_bad_config`
/// as [`outer`], `drop_too_big` above the MTU.
#[inline(always)]
fn outer_len<const SC: bool>(
    p: &Parsed,
    backend: &BackendEntry,
    cfg: &LbConfig,
) -> Result<(Outer, u16), Reason> {
    let outer = outer(p, backend)?;
    let outer_len = p.l3_len + outer.len + candidates_len::<SC>(outer.v4);
    if outer_len > u32::from(cfg.mtu) {
        return Err(Reason::DropTooBig);
    }
    #[expect(
        clippy::cast_possible_truncation,
        reason = "outer_len <= mtu, a u16, was checked above"
    )]
    Ok((outer, outer_len as u16))
}

/// The rest of [`encapsulate_with`] once [`route`] gave the next hop `hop`: the flow
/// hash if an outer field needs it, the headers pushed, the way out.
#[inline(always)]
pub(crate) fn push_outer<const SC: bool>(
    ctx: &XdpContext,
    p: &Parsed,
    backend: &BackendEntry,
    cfg: &LbConfig,
    hash: Option<u32>,
    candidate: &BackendEntry,
    hop: &NextHop,
) -> Result<Sent, Reason> {
    let (outer, outer_len) = outer_len::<SC>(p, backend, cfg)?;
    let inner_v4 = p.key.vip.family == FAMILY_V4;
    // IPv4-in-IPv6 always takes its flow label from the hash (nothing to copy), GUE its
    // UDP source port.
    let hash = if cfg.flags & HASHED_OUTER == 0 && (outer.v4 || !inner_v4) && !backend.gue() {
        0
    } else {
        hash.unwrap_or_else(|| crate::hashes::flow_hash(&p.key, cfg.hash_seed))
    };
    if outer.v4 {
        push_ipv4::<SC>(ctx, backend, cfg, hop, outer_len, hash, candidate)?;
    } else {
        let inner = Inner {
            len: p.l3_len,
            v4: inner_v4,
        };
        push_ipv6::<SC>(ctx, backend, cfg, hop, &inner, hash, candidate)?;
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
    let v4 = backend.family == FAMILY_V4;
    let same = backend.family == p.key.vip.family;
    if same || (p.key.vip.family == FAMILY_V4 && backend.family == FAMILY_V6) {
        return Ok(Outer {
            v4,
            len: overhead(backend),
        });
    }
    Err(Reason::DropBadConfig)
}

/// Bytes of outer headers a packet needs to reach `backend` (also the MTU an ICMP "too
/// big" announces is `mtu` minus this): its family's IP header, and with GUE the UDP
/// and GUE headers (12 bytes).
#[inline(always)]
pub(crate) fn overhead(backend: &BackendEntry) -> u32 {
    let ip = if backend.family == FAMILY_V6 {
        IPV6_LEN
    } else {
        IPV4_LEN
    };
    if backend.gue() { ip + GUE_LEN } else { ip }
}

/// Bytes of second-chance private data (one candidate) in an outer header of family
/// IPv4 (`v4`) or IPv6; 0 without `SC`.
#[inline(always)]
pub(crate) fn candidates_len<const SC: bool>(v4: bool) -> u32 {
    if !SC {
        0
    } else if v4 {
        CANDIDATE_V4_LEN
    } else {
        CANDIDATE_V6_LEN
    }
}

/// The inner packet of an IPv6 outer header.
struct Inner {
    /// Its length in bytes.
    len: u32,
    /// IPv4 (else IPv6).
    v4: bool,
}

/// The next hop of the outer packet: the gateway's, or the FIB's ([`lb_fib_next_hop`]).
#[inline(always)]
fn next_hop(
    ctx: &XdpContext,
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
    let mut hop = NextHop {
        dmac: [0; 3],
        smac: [0; 3],
        ifindex: 0,
    };
    match lb_fib_next_hop(ctx.ctx, backend_id, backend, cfg, &mut hop) {
        HOP_FOUND => Ok(hop),
        HOP_NO_NEIGH => Err(Reason::DropFibNoNeigh),
        _ => Err(Reason::DropFibFail),
    }
}

/// [`lb_fib_next_hop`]: the next hop was found.
const HOP_FOUND: u32 = 0;
/// [`lb_fib_next_hop`]: the route's neighbour is unresolved (`drop_fib_no_neigh`).
const HOP_NO_NEIGH: u32 = 1;
/// [`lb_fib_next_hop`]: no route, or the lookup failed (`drop_fib_fail`).
const HOP_FAIL: u32 = 2;

/// The FIB's next hop to backend `backend` (id `backend_id`) from `ctx`'s interface,
/// reused from the CPU's `NEXTHOP_CACHE` within `cfg.nexthop_cache_ns`, written into
/// `hop`; returns [`HOP_FOUND`], [`HOP_NO_NEIGH`] or [`HOP_FAIL`]. A global BPF function
/// (exported by the linker, `build.rs`), which the verifier checks once rather than at
/// every path that forwards a packet; gateway mode, the common one, does not call it.
#[unsafe(no_mangle)]
#[inline(never)]
pub(crate) extern "C" fn lb_fib_next_hop(
    ctx: *mut xdp_md,
    backend_id: u32,
    backend: *const BackendEntry,
    cfg: *const LbConfig,
    hop: *mut NextHop,
) -> u32 {
    // SAFETY: the verifier checked that the non-null pointers point to readable (`hop`:
    // writable) values of their types.
    let (Some(backend), Some(cfg), Some(hop)) =
        (unsafe { (backend.as_ref(), cfg.as_ref(), hop.as_mut()) })
    else {
        return HOP_FAIL;
    };
    match fib_hop(&XdpContext::new(ctx), backend_id, backend, cfg) {
        Ok(found) => {
            *hop = found;
            HOP_FOUND
        }
        Err(Reason::DropFibNoNeigh) => HOP_NO_NEIGH,
        Err(_) => HOP_FAIL,
    }
}

/// The FIB's next hop ([`lb_fib_next_hop`]).
#[inline(always)]
fn fib_hop(
    ctx: &XdpContext,
    backend_id: u32,
    backend: &BackendEntry,
    cfg: &LbConfig,
) -> Result<NextHop, Reason> {
    let v4 = backend.family == FAMILY_V4;
    // One FIB lookup in the code, whether the cache is off, unreadable or stale.
    let cached = if cfg.nexthop_cache_ns == 0 {
        None
    } else {
        NEXTHOP_CACHE.get_ptr_mut(backend_id)
    };
    let now = if cached.is_some() {
        // SAFETY: bpf_ktime_get_coarse_ns takes no arguments and cannot fail.
        unsafe { bpf_ktime_get_coarse_ns() }
    } else {
        0
    };
    // SAFETY: per-CPU array element, used only by this CPU during this run.
    let cached = cached.map(|c| unsafe { &mut *c });
    if let Some(cached) = &cached {
        // SAFETY: both addresses start their 4-byte aligned structs (asserted below).
        let (a, b) = unsafe {
            (
                aligned_addr_words(&cached.addr),
                aligned_addr_words(&backend.addr),
            )
        };
        let same = a.iter().zip(b).fold(0, |diff, (a, b)| diff | (a ^ b)) == 0;
        // Also bounded by the current cache time, which a reload may have lowered.
        if same && now < cached.expires_ns && cached.expires_ns - now <= cfg.nexthop_cache_ns {
            // SAFETY: both MACs sit at even offsets of the 8-byte aligned entry
            // (asserted below).
            let (dmac, smac) = unsafe {
                (
                    aligned_mac_words(&cached.dmac),
                    aligned_mac_words(&cached.smac),
                )
            };
            return Ok(NextHop {
                dmac,
                smac,
                ifindex: cached.ifindex,
            });
        }
    }
    let hop = fib_next_hop(ctx, v4, backend, cfg)?;
    if let Some(cached) = cached {
        cached.addr = backend.addr;
        cached.dmac = words_mac(hop.dmac);
        cached.smac = words_mac(hop.smac);
        cached.ifindex = hop.ifindex;
        cached.expires_ns = now.saturating_add(cfg.nexthop_cache_ns);
    }
    Ok(hop)
}

// `fib_hop` reads both addresses as aligned words.
const _: () = assert!(
    core::mem::offset_of!(NextHopEntry, addr) == 0
        && align_of::<NextHopEntry>() >= 4
        && core::mem::offset_of!(NextHopEntry, dmac) % 2 == 0
        && core::mem::offset_of!(NextHopEntry, smac) % 2 == 0
        && core::mem::offset_of!(BackendEntry, addr) == 0
        && align_of::<BackendEntry>() >= 4
);

/// The next hop of the outer packet from `bpf_fib_lookup`.
#[inline(always)]
fn fib_next_hop(
    ctx: &XdpContext,
    v4: bool,
    backend: &BackendEntry,
    cfg: &LbConfig,
) -> Result<NextHop, Reason> {
    let mut params = MaybeUninit::uninit();
    let params = encap::fib_params(ctx, v4, backend, cfg, &mut params);
    match encap::fib_lookup(ctx, params) {
        Ok(FIB_FOUND) => {
            let (dmac, smac) = encap::fib_macs(params);
            Ok(NextHop {
                dmac,
                smac,
                ifindex: params.ifindex,
            })
        }
        Ok(FIB_NO_NEIGH) => Err(Reason::DropFibNoNeigh),
        _ => Err(Reason::DropFibFail),
    }
}

/// Grows the headroom by `len` bytes.
#[inline(always)]
fn push_head(ctx: &XdpContext, len: u32) -> Result<(), Reason> {
    #[expect(clippy::cast_possible_wrap, reason = "len is the size of an IP header")]
    let delta = -(len as i32);
    // SAFETY: ctx is the program's context; the helper validates the delta.
    if unsafe { bpf_xdp_adjust_head(ctx.ctx, delta) } != 0 {
        return Err(Reason::DropEncapFail);
    }
    Ok(())
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

/// Pushes Ethernet + outer IPv4 in front of the inner IPv4 packet (with `SC`, GUE
/// naming `candidate`).
#[inline(always)]
fn push_ipv4<const SC: bool>(
    ctx: &XdpContext,
    backend: &BackendEntry,
    cfg: &LbConfig,
    hop: &NextHop,
    outer_len: u16,
    hash: u32,
    candidate: &BackendEntry,
) -> Result<(), Reason> {
    // Inner fields copied to the outer header, read before the frame moves.
    let inner = ptr_at::<Ipv4Hdr>(ctx, ETH_LEN).ok_or(Reason::DropEncapFail)?;
    // SAFETY: ptr_at checked the inner header's 20 bytes.
    let (tos, id, frag) = unsafe { ((*inner).tos, (*inner).id, (*inner).frag) };
    // The source in its place in the literal: computed before it, the header compiles
    // to another instruction order.
    let gue = backend.gue();
    let mut ip = encap::ipv4!(
        tos,
        id,
        frag,
        outer_len,
        if gue { IPPROTO_UDP } else { IPPROTO_IPIP },
        encap::source_v4(cfg, hash),
        addr_words(&backend.addr)[0],
    );
    ip.check = csum::ipv4_header(&ip);
    if SC && gue {
        push_head(ctx, IPV4_LEN + GUE_LEN + CANDIDATE_V4_LEN)?;
        let inner_len = outer_len - IPV4_GUE_LEN_U16 - CANDIDATE_V4_LEN_U16;
        push_gue::<{ IPV4_LEN as usize }>(ctx, backend, hash, inner_len, IPPROTO_IPIP)?;
        push_candidate_v4(ctx, candidate)?;
    } else if gue {
        push_head(ctx, IPV4_LEN + GUE_LEN)?;
        let inner_len = outer_len - IPV4_GUE_LEN_U16;
        push_gue::<{ IPV4_LEN as usize }>(ctx, backend, hash, inner_len, IPPROTO_IPIP)?;
    } else {
        push_head(ctx, IPV4_LEN)?;
    }
    let eth = ptr_at::<EthHdr>(ctx, 0).ok_or(Reason::DropEncapFail)?;
    let outer = ptr_at::<Ipv4Hdr>(ctx, ETH_LEN).ok_or(Reason::DropEncapFail)?;
    // SAFETY: ptr_at checked both headers, which now precede the inner packet.
    unsafe {
        *eth = eth_header(hop, ETH_P_IP);
        *outer = ip;
    }
    Ok(())
}

/// Writes the UDP and GUE headers after an outer IP header of `IP` bytes, in the room
/// already pushed, over an inner packet of `inner_len` bytes of kind `inner`.
#[inline(always)]
fn push_gue<const IP: usize>(
    ctx: &XdpContext,
    backend: &BackendEntry,
    hash: u32,
    inner_len: u16,
    inner: u8,
) -> Result<(), Reason> {
    let hdr = encap::udp_gue!(
        gue_source_port(hash).to_be(),
        backend.gue_port,
        inner_len,
        inner
    );
    let at = ptr_at::<UdpGueHdr>(ctx, ETH_LEN + IP).ok_or(Reason::DropEncapFail)?;
    // SAFETY: ptr_at checked the 12 bytes, which now precede the inner packet.
    unsafe { *at = hdr };
    Ok(())
}

/// Writes the second-chance private data naming IPv4 `candidate` after the UDP and
/// GUE headers already written (their lengths do not count it yet): UDP length plus 8,
/// GUE Hlen 2.
#[inline(always)]
fn push_candidate_v4(ctx: &XdpContext, candidate: &BackendEntry) -> Result<(), Reason> {
    let at = finish_candidate::<{ IPV4_LEN as usize }, 2>(ctx, CANDIDATE_V4_LEN_U16)?;
    // SAFETY: `finish_candidate` checked the two words, in the room pushed.
    unsafe { (*at)[1] = addr_words(&candidate.addr)[0] };
    Ok(())
}

/// As [`push_candidate_v4`] for IPv6 `candidate`: UDP length plus 20, Hlen 5.
#[inline(always)]
fn push_candidate_v6(ctx: &XdpContext, candidate: &BackendEntry) -> Result<(), Reason> {
    let at = finish_candidate::<{ IPV6_LEN as usize }, 5>(ctx, CANDIDATE_V6_LEN_U16)?;
    let a = addr_words(&candidate.addr);
    // SAFETY: `finish_candidate` checked the five words, in the room pushed.
    unsafe {
        (*at)[1] = a[0];
        (*at)[2] = a[1];
        (*at)[3] = a[2];
        (*at)[4] = a[3];
    }
    Ok(())
}

/// Writes the private data's header (kind, one candidate, none used) after the UDP and
/// GUE headers behind an outer IP header of `IP` bytes, counts the `len` bytes of the
/// `N` words of private data in the UDP length and the GUE Hlen, and returns the
/// words, for the caller to write the candidate's address after the header.
#[inline(always)]
fn finish_candidate<const IP: usize, const N: usize>(
    ctx: &XdpContext,
    len: u16,
) -> Result<*mut [u32; N], Reason> {
    let udp = ptr_at::<UdpGueHdr>(ctx, ETH_LEN + IP).ok_or(Reason::DropEncapFail)?;
    let at =
        ptr_at::<[u32; N]>(ctx, ETH_LEN + IP + GUE_LEN as usize).ok_or(Reason::DropEncapFail)?;
    // SAFETY: ptr_at checked the UDP and GUE headers and the private data, all in the
    // room pushed in front of the inner packet.
    unsafe {
        (*udp).len = (u16::from_be((*udp).len) + len).to_be();
        let [_, proto, flags, rest] = (*udp).gue.to_ne_bytes();
        #[expect(clippy::cast_possible_truncation, reason = "N is 2 or 5 words")]
        let hlen = N as u8;
        (*udp).gue = u32::from_ne_bytes([hlen, proto, flags, rest]);
        (*at)[0] = u32::from_ne_bytes([SECOND_CHANCE_KIND, 1, 0, 0]);
    }
    Ok(at)
}

/// Pushes Ethernet + outer IPv6 in front of the `inner` packet (with `SC`, GUE naming
/// `candidate`).
#[inline(always)]
fn push_ipv6<const SC: bool>(
    ctx: &XdpContext,
    backend: &BackendEntry,
    cfg: &LbConfig,
    hop: &NextHop,
    inner: &Inner,
    hash: u32,
    candidate: &BackendEntry,
) -> Result<(), Reason> {
    let (inner_len, inner_v4) = (inner.len, inner.v4);
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
    let plen = inner_len as u16;
    let gue = backend.gue();
    let extra = if SC && gue { CANDIDATE_V6_LEN_U16 } else { 0 };
    let ip = encap::ipv6!(
        first.to_be(),
        if gue {
            plen + GUE_LEN_U16 + extra
        } else {
            plen
        },
        if gue { IPPROTO_UDP } else { next },
        encap::source_v6(cfg, hash),
        addr_words(&backend.addr),
    );
    if SC && gue {
        push_head(ctx, IPV6_LEN + GUE_LEN + CANDIDATE_V6_LEN)?;
        push_gue::<{ IPV6_LEN as usize }>(ctx, backend, hash, plen, next)?;
        push_candidate_v6(ctx, candidate)?;
    } else if gue {
        push_head(ctx, IPV6_LEN + GUE_LEN)?;
        push_gue::<{ IPV6_LEN as usize }>(ctx, backend, hash, plen, next)?;
    } else {
        push_head(ctx, IPV6_LEN)?;
    }
    let eth = ptr_at::<EthHdr>(ctx, 0).ok_or(Reason::DropEncapFail)?;
    let outer = ptr_at::<Ipv6Hdr>(ctx, ETH_LEN).ok_or(Reason::DropEncapFail)?;
    // SAFETY: ptr_at checked both headers, which now precede the inner packet.
    unsafe {
        *eth = eth_header(hop, ETH_P_IPV6);
        *outer = ip;
    }
    Ok(())
}
