// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Tunnel-mode health probes: `lb_probe_encap`, a TC egress program on the LB's
//! interface that sends each probe packet to one backend the way the XDP program sends
//! a client's packet (Katran's approach to health checks through the tunnel).
//!
//! The prober addresses a tunnel-mode probe to the VIP and marks its socket
//! (`SO_MARK`) with the backend's id (`lb_common::probe`). Per packet leaving the
//! interface:
//! 1. no probe mark: `TC_ACT_OK`, untouched (one load and one compare);
//! 2. the backend (`BACKENDS`, any state but unused: an unhealthy backend is probed
//!    too) and the outer source (`CONFIG`) are read as the XDP program reads them;
//! 3. an outer IPv4 (protocol 4, RFC 2003) or IPv6 (next header 41, RFC 2473) header,
//!    or for a GUE backend (`BackendEntry::gue_port`, the VIP's encapsulation) the
//!    outer IP header with protocol 17 and the UDP and GUE headers of the XDP path
//!    (source port from the backend id: a probe is one flow), is
//!    inserted after the Ethernet header with `bpf_skb_adjust_room` (the kernel records
//!    the inner headers, so checksum and segmentation offloads still apply to the inner
//!    packet); the outer header is built as the XDP program builds it
//!    ([`encap`](crate::encap)), with the configured encap source (never the per-flow
//!    source prefix: `encap` says why), destination = the backend, TTL 64, TOS/traffic
//!    class (the whole first IPv6 word) copied, DF copied;
//! 4. the next hop: gateway mode writes the gateway's and the interface's MACs; FIB mode
//!    asks the FIB for the backend's next hop (`encap`), redirects when it is another
//!    interface, and hands an unresolved neighbour to `bpf_redirect_neigh`, which
//!    resolves it (unlike the XDP path, the probe may wait for ARP/ND);
//! 5. the mark is cleared, so a packet that passes an egress hook again is not
//!    encapsulated twice.
//!
//! A marked packet that cannot be sent to its backend is dropped and counted
//! (`PROBE_STATS`), never sent on to the VIP's real route: a probe must prove the
//! tunnel or fail.

use core::mem::MaybeUninit;

use aya_ebpf::{
    bindings::{
        BPF_F_ADJ_ROOM_ENCAP_L3_IPV4, BPF_F_ADJ_ROOM_ENCAP_L3_IPV6, BPF_F_ADJ_ROOM_ENCAP_L4_UDP,
        TC_ACT_OK, TC_ACT_SHOT, bpf_adj_room_mode::BPF_ADJ_ROOM_MAC,
    },
    helpers::generated::{bpf_redirect, bpf_redirect_neigh},
    macros::classifier,
    programs::TcContext,
};
use lb_common::{
    probe::{ProbeStats, probe_mark_backend},
    types::{
        BACKEND_UNUSED, BackendEntry, CONFIG_VALID, FAMILY_V4, FAMILY_V6, LbConfig,
        NEXTHOP_GATEWAY, gue_source_port,
    },
};

use crate::{
    csum,
    encap::{
        self, ETH_P_IP, ETH_P_IPV6, FIB_FOUND, FIB_NO_NEIGH, GUE_LEN, GUE_LEN_U16, IPPROTO_IPIP,
        IPPROTO_IPV6, IPPROTO_UDP, IPV4_LEN, IPV6_LEN, Interface as _, mac_words,
    },
    headers::{EthHdr, Ipv4Hdr, addr_words},
    maps::{BACKENDS, CONFIG, PROBE_STATS},
};

const ETH_LEN: usize = size_of::<EthHdr>();
const ETH_LEN_U32: u32 = 14;
const _: () = assert!(ETH_LEN_U32 as usize == ETH_LEN);
const OK: i32 = TC_ACT_OK;
const SHOT: i32 = TC_ACT_SHOT;

/// Why a probe packet was dropped: one `ProbeStats` counter each.
#[derive(Clone, Copy)]
enum Dropped {
    NoBackend,
    BadConfig,
    BadPacket,
    TooBig,
    FibFail,
}

/// Encapsulates tunnel-mode probe packets to the backend their mark names.
#[classifier]
fn lb_probe_encap(ctx: TcContext) -> i32 {
    // SAFETY: the context's skb pointer is valid for the program's run.
    let mark = unsafe { (*ctx.skb.skb).mark };
    let Some(backend_id) = probe_mark_backend(mark) else {
        return OK;
    };
    let result = encapsulate(&ctx, backend_id);
    let Some(stats) = PROBE_STATS.get_ptr_mut(0) else {
        return result.unwrap_or(SHOT);
    };
    // SAFETY: per-CPU array element, used only by this CPU during this run.
    let stats = unsafe { &mut *stats };
    match result {
        Ok(action) => {
            stats.encapsulated += 1;
            action
        }
        Err(reason) => {
            count(stats, reason);
            SHOT
        }
    }
}

#[inline(always)]
fn count(stats: &mut ProbeStats, reason: Dropped) {
    let counter = match reason {
        Dropped::NoBackend => &mut stats.no_backend,
        Dropped::BadConfig => &mut stats.bad_config,
        Dropped::BadPacket => &mut stats.bad_packet,
        Dropped::TooBig => &mut stats.too_big,
        Dropped::FibFail => &mut stats.fib_fail,
    };
    *counter += 1;
}

/// The encapsulated packet's action (`TC_ACT_OK` or a redirect), or why it is dropped.
#[inline(always)]
fn encapsulate(ctx: &TcContext, backend_id: u32) -> Result<i32, Dropped> {
    let backend = BACKENDS.get(backend_id).ok_or(Dropped::NoBackend)?;
    if backend.state == BACKEND_UNUSED {
        return Err(Dropped::NoBackend);
    }
    let cfg = CONFIG
        .get(0)
        .filter(|c| c.flags & CONFIG_VALID != 0)
        .ok_or(Dropped::BadConfig)?;
    let proto: u16 = ctx.load(12).map_err(|_| Dropped::BadPacket)?;
    let inner_len = ctx
        .len()
        .checked_sub(ETH_LEN_U32)
        .ok_or(Dropped::BadPacket)?;
    let v4 = match proto {
        ETH_P_IP => true,
        ETH_P_IPV6 => false,
        _ => return Err(Dropped::BadPacket),
    };
    let family = if v4 { FAMILY_V4 } else { FAMILY_V6 };
    if backend.family != family {
        return Err(Dropped::NoBackend);
    }
    let gue = if backend.gue() { GUE_LEN } else { 0 };
    let outer_len = inner_len + gue + if v4 { IPV4_LEN } else { IPV6_LEN };
    if outer_len > u32::from(cfg.mtu) {
        return Err(Dropped::TooBig);
    }
    if v4 {
        push_ipv4(ctx, backend, cfg, outer_len)?;
    } else {
        push_ipv6(ctx, backend, cfg, inner_len)?;
    }
    if gue != 0 {
        push_gue(ctx, backend_id, backend, v4, inner_len)?;
    }
    let action = next_hop(ctx, v4, backend, cfg, proto)?;
    ctx.set_mark(0);
    Ok(action)
}

/// Inserts the outer IPv4 header in front of the inner IPv4 packet.
#[inline(always)]
fn push_ipv4(
    ctx: &TcContext,
    backend: &BackendEntry,
    cfg: &LbConfig,
    outer_len: u32,
) -> Result<(), Dropped> {
    if cfg.src_v4 == [0; 4] {
        return Err(Dropped::BadConfig);
    }
    let inner: Ipv4Hdr = ctx.load(ETH_LEN).map_err(|_| Dropped::BadPacket)?;
    let tot_len = u16::try_from(outer_len).map_err(|_| Dropped::TooBig)?;
    let mut ip = encap::ipv4!(
        inner.tos,
        inner.id,
        inner.frag,
        tot_len,
        if backend.gue() {
            IPPROTO_UDP
        } else {
            IPPROTO_IPIP
        },
        // The configured source, never the per-flow one (`encap` says why).
        u32::from_ne_bytes(cfg.src_v4),
        addr_words(&backend.addr)[0],
    );
    ip.check = csum::ipv4_header(&ip);
    grow(ctx, IPV4_LEN, BPF_F_ADJ_ROOM_ENCAP_L3_IPV4, backend)?;
    ctx.store(ETH_LEN, &ip, 0).map_err(|_| Dropped::BadPacket)
}

/// Writes the UDP and GUE headers after the outer IP header (IPv4 when `v4`), over the
/// inner packet of `inner_len` bytes. The source port: one flow per backend (the probe
/// packet is not parsed to hash it), from the backend id, in the same range as a
/// client flow's.
#[inline(always)]
fn push_gue(
    ctx: &TcContext,
    backend_id: u32,
    backend: &BackendEntry,
    v4: bool,
    inner_len: u32,
) -> Result<(), Dropped> {
    let inner_len = u16::try_from(inner_len).map_err(|_| Dropped::TooBig)?;
    let (at, inner) = if v4 {
        (ETH_LEN + IPV4_LEN as usize, IPPROTO_IPIP)
    } else {
        (ETH_LEN + IPV6_LEN as usize, IPPROTO_IPV6)
    };
    let hdr = encap::udp_gue!(
        gue_source_port(backend_id).to_be(),
        backend.gue_port,
        inner_len,
        inner
    );
    ctx.store(at, &hdr, 0).map_err(|_| Dropped::BadPacket)
}

/// Inserts the outer IPv6 header in front of the inner IPv6 packet of `inner_len`
/// bytes.
#[inline(always)]
fn push_ipv6(
    ctx: &TcContext,
    backend: &BackendEntry,
    cfg: &LbConfig,
    inner_len: u32,
) -> Result<(), Dropped> {
    if cfg.src_v6 == [0; 16] {
        return Err(Dropped::BadConfig);
    }
    let vtcfl: u32 = ctx.load(ETH_LEN).map_err(|_| Dropped::BadPacket)?;
    let plen = u16::try_from(inner_len).map_err(|_| Dropped::TooBig)?;
    let gue = backend.gue();
    let ip = encap::ipv6!(
        vtcfl,
        if gue { plen + GUE_LEN_U16 } else { plen },
        if gue { IPPROTO_UDP } else { IPPROTO_IPV6 },
        // As in `push_ipv4`.
        addr_words(&cfg.src_v6),
        addr_words(&backend.addr),
    );
    grow(ctx, IPV6_LEN, BPF_F_ADJ_ROOM_ENCAP_L3_IPV6, backend)?;
    ctx.store(ETH_LEN, &ip, 0).map_err(|_| Dropped::BadPacket)
}

/// Makes room between the Ethernet header and the packet for an outer L3 header of
/// `len` bytes of the kind `encap_flag` names, and for `backend`'s GUE, the UDP and
/// GUE headers (`BPF_F_ADJ_ROOM_ENCAP_L4_UDP`).
#[inline(always)]
fn grow(ctx: &TcContext, len: u32, encap_flag: u32, backend: &BackendEntry) -> Result<(), Dropped> {
    let (len, flags) = if backend.gue() {
        (len + GUE_LEN, encap_flag | BPF_F_ADJ_ROOM_ENCAP_L4_UDP)
    } else {
        (len, encap_flag)
    };
    #[expect(
        clippy::cast_possible_wrap,
        reason = "len is the size of the outer headers"
    )]
    let len = len as i32;
    ctx.adjust_room(len, BPF_ADJ_ROOM_MAC, u64::from(flags))
        .map_err(|_| Dropped::BadPacket)
}

/// Writes the next hop's MACs and returns how the packet leaves.
#[inline(always)]
fn next_hop(
    ctx: &TcContext,
    v4: bool,
    backend: &BackendEntry,
    cfg: &LbConfig,
    proto: u16,
) -> Result<i32, Dropped> {
    if cfg.nexthop_mode == NEXTHOP_GATEWAY {
        write_eth(ctx, &cfg.gateway_mac, &cfg.if_mac, proto)?;
        return Ok(OK);
    }
    let mut params = MaybeUninit::uninit();
    let params = encap::fib_params(ctx, v4, backend, cfg, &mut params);
    // The interface the packet leaves by (the lookup writes the next hop's into params).
    let ifindex = ctx.ifindex();
    let action = match encap::fib_lookup(ctx, params) {
        Ok(FIB_FOUND) => {
            write_eth(ctx, &params.dmac, &params.smac, proto)?;
            if params.ifindex == ifindex {
                return Ok(OK);
            }
            // SAFETY: bpf_redirect only records the target interface for this packet.
            unsafe { bpf_redirect(params.ifindex, 0) }
        }
        // SAFETY: with no parameters the helper looks the next hop up itself and
        // resolves its neighbour before the packet is sent.
        Ok(FIB_NO_NEIGH) => unsafe {
            bpf_redirect_neigh(params.ifindex, core::ptr::null_mut(), 0, 0)
        },
        _ => return Err(Dropped::FibFail),
    };
    i32::try_from(action).map_err(|_| Dropped::FibFail)
}

/// Rewrites the Ethernet header.
#[inline(always)]
fn write_eth(ctx: &TcContext, dst: &[u8; 6], src: &[u8; 6], proto: u16) -> Result<(), Dropped> {
    let eth = EthHdr {
        dst: mac_words(dst),
        src: mac_words(src),
        proto,
    };
    ctx.store(0, &eth, 0).map_err(|_| Dropped::BadPacket)
}
