// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! ICMP errors about VIP flows, sent to the VIP by a router on the path (destination
//! unreachable, fragmentation needed among them, and time exceeded; ICMPv6 destination
//! unreachable, packet too big and time exceeded), are encapsulated to the backend that
//! owns the flow, so that path-MTU discovery reaches the host whose TCP sends the large
//! segments (with direct server return, the backend sends from the VIP, and the router
//! answers the VIP).
//!
//! The error quotes the packet that failed (RFC 792; RFC 4443 section 2.4): an IP header
//! from the VIP to the client and at least 8 bytes of its TCP/UDP header (the ports; a
//! quote of only 8 bytes is enough). Reversed, that is the client-to-VIP flow: its
//! backend is the flow's conntrack pin when it has one (and the backend keeps flows),
//! otherwise its client's affinity pin on a VIP with affinity, otherwise the one the
//! VIP's table gives the flow (what its next packet would get).
//! No state is written. The error is forwarded unchanged, with the flow's hash (its
//! outer source and flow label are the flow's).
//!
//! An IPv6 quote's extension headers (hop-by-hop, routing, destination options, a
//! fragment header with offset 0, authentication) are walked as the main parser walks
//! them ([`parse`](crate::parse)), at most [`MAX_IPV6_EXT_HEADERS`].
//!
//! Dropped (`drop_icmp_malformed`): a quote shorter than an IP header, its extension
//! headers and 8 bytes, of another IP version, or whose source is not the address the
//! error came to. Passed (`pass_icmp_unmatched`): a quote of a protocol other than
//! TCP/UDP, of a later fragment (no ports), behind more extension headers than the walk
//! follows, or of no VIP (another port).

use aya_ebpf::{bindings::xdp_md, programs::XdpContext};
use lb_common::{
    stats::Reason,
    types::{
        CONFIG_SOURCE_RANGES, FAMILY_V4, FAMILY_V6, FlowKey, LbConfig, PROTO_TCP, PROTO_UDP,
        VipEntry,
    },
};

use crate::{
    affinity,
    backend::{self, Choice},
    conntrack,
    forward::{self, Sent},
    headers::{Ipv4Hdr, Ipv6Hdr, Ports, addr_words},
    packet::{frame_len, ptr_at},
    parse::{
        ETH_LEN, ICMP_HDR_LEN, IPV6_OFFSET_MASK, IcmpAt, MAX_IPV6_EXT_HEADERS, MAX_L4_OFFSET,
        NEXTHDR_AUTH, NEXTHDR_FRAGMENT, Parsed, flow_key, is_ext_header,
    },
    source::{self, Source},
    stats, table, vip,
};

/// Bytes of the quoted TCP/UDP header an error must carry (RFC 792: 64 bits).
const QUOTED_L4: usize = 8;

/// Bound of the quoted packet's L4 offset after its extension headers (each at most
/// 2,048 bytes), for the verifier.
const MAX_QUOTED_L4: usize =
    MAX_L4_OFFSET + ICMP_HDR_LEN + size_of::<Ipv6Hdr>() + MAX_IPV6_EXT_HEADERS * 2048;

#[inline(always)]
fn verdict(reason: Reason) -> (u32, Reason) {
    (reason.action(), reason)
}

/// Forwards the ICMP error `at` (to a VIP address) to the backend of the flow it
/// quotes; returns the verdict.
#[inline(always)]
pub(crate) fn forward(ctx: &XdpContext, at: &IcmpAt, cfg: &LbConfig) -> (u32, Reason) {
    let mut p = Parsed {
        key: at.key,
        l3_len: at.l3_len,
        tcp_flags: 0,
        tcp_seq: 0,
    };
    match lb_quoted_flow(ctx.ctx, &mut p.key, at.l4, at.l3_len) {
        QUOTED_FOUND => {}
        QUOTED_UNMATCHED => return verdict(Reason::PassIcmpUnmatched),
        _ => return verdict(Reason::DropIcmpMalformed),
    }
    let Some(vip) = vip::find_vip(&p.key.vip) else {
        return verdict(Reason::PassIcmpUnmatched);
    };
    if cfg.flags & CONFIG_SOURCE_RANGES != 0 && source::check_in_line(&p.key) == Source::Refused {
        return verdict(Reason::DropSourceRefused);
    }
    let Some(vip_stats) = stats::vip(vip.vip_id) else {
        return verdict(Reason::DropBadConfig);
    };
    let bytes = frame_len(ctx) as u64;
    vip_stats.packets += 1;
    vip_stats.bytes += bytes;
    let choice = match owner(&p.key, &vip, cfg) {
        Ok(choice) => choice,
        Err(reason) => {
            vip_stats.drops += 1;
            return verdict(reason);
        }
    };
    match forward::encapsulate(ctx, &p, choice.id, choice.backend, cfg, None) {
        Ok(sent) => {
            stats::backend(choice.id, bytes, false);
            (
                sent.action,
                Sent::relabel(&sent, Reason::TxIcmpForward, Reason::RedirectIcmpForward),
            )
        }
        Err(reason) => {
            vip_stats.drops += 1;
            verdict(reason)
        }
    }
}

/// The backend of flow `key` of `vip`: its pin, else its client's affinity pin, else its
/// table slot.
#[inline(always)]
fn owner(key: &FlowKey, vip: &VipEntry, cfg: &LbConfig) -> Result<Choice, Reason> {
    // SAFETY: the pointer comes from a successful lookup; the ids are copied.
    let pinned = conntrack::lookup_flow(key).map(|e| unsafe { ((*e).vip_id, (*e).backend_id) });
    if let Some((vip_id, backend_id)) = pinned
        && vip_id == vip.vip_id
        && let Some(choice) = backend::keeps_flows(backend_id)
    {
        return Ok(choice);
    }
    // A flow of an affinity VIP that lost its pin lives on its client's backend.
    if let Some(choice) = affinity::pinned(key, vip) {
        return Ok(choice);
    }
    table::pick(
        vip,
        crate::hashes::table_hash(key, vip.flags, cfg.hash_seed),
    )
}

/// [`lb_quoted_flow`]: `key` holds the quoted flow.
const QUOTED_FOUND: u32 = 0;
/// [`lb_quoted_flow`]: the quote is no TCP/UDP flow with ports (`pass_icmp_unmatched`).
const QUOTED_UNMATCHED: u32 = 1;
/// [`lb_quoted_flow`]: the quote is malformed (`drop_icmp_malformed`).
const QUOTED_MALFORMED: u32 = 2;

/// [`quoted_flow`] as a global BPF function (exported by the linker, `build.rs`),
/// which the verifier checks once: inline, its walk of the quoted IPv6 extension
/// headers was verified again for every way the walk of the error's own headers ended
/// (most of `lb_xdp_rare`'s count). Returns [`QUOTED_FOUND`], [`QUOTED_UNMATCHED`] or
/// [`QUOTED_MALFORMED`] (also for a null pointer).
#[unsafe(no_mangle)]
#[inline(never)]
pub(crate) extern "C" fn lb_quoted_flow(
    ctx: *mut xdp_md,
    key: *mut FlowKey,
    l4: u32,
    l3_len: u32,
) -> u32 {
    // SAFETY: the verifier checked that a non-null `key` points to a writable
    // `FlowKey`.
    let Some(key) = (unsafe { key.as_mut() }) else {
        return QUOTED_MALFORMED;
    };
    match quoted_flow(&XdpContext::new(ctx), l4, l3_len, key) {
        Ok(()) => QUOTED_FOUND,
        Err(Reason::PassIcmpUnmatched) => QUOTED_UNMATCHED,
        Err(_) => QUOTED_MALFORMED,
    }
}

/// Writes into `key`, the error's own flow key (its addresses and family), the
/// client-to-VIP flow of the packet the error quotes; the error's ICMP header is at
/// `l4` and its IP packet `l3_len` bytes long (as `IcmpAt`).
#[inline(always)]
fn quoted_flow(ctx: &XdpContext, l4: u32, l3_len: u32, key: &mut FlowKey) -> Result<(), Reason> {
    let (vip_bytes, vip_family) = (key.vip.addr, key.vip.family);
    // Parsing bounded the offset; the bound is checked again for the verifier, which
    // does not see the value through the call.
    let l4 = l4 as usize;
    if l4 > MAX_L4_OFFSET {
        return Err(Reason::DropIcmpMalformed);
    }
    let inner = l4 + ICMP_HDR_LEN;
    let end = ETH_LEN + l3_len as usize;
    // The quoted packet went from the VIP (its source) to the client (its destination).
    let (vip_side, client, proto, ports_at) = if vip_family == FAMILY_V4 {
        let ip = ptr_at::<Ipv4Hdr>(ctx, inner).ok_or(Reason::DropIcmpMalformed)?;
        // SAFETY: ptr_at checked the 20 bytes.
        let ip = unsafe { &*ip };
        let hdr_len = usize::from(ip.vihl & 0x0f) * 4;
        let vip_addr = addr_words(&vip_bytes)[0];
        if ip.vihl >> 4 != 4 || hdr_len < size_of::<Ipv4Hdr>() || ip.src != vip_addr {
            return Err(Reason::DropIcmpMalformed);
        }
        (
            [ip.src, 0, 0, 0],
            [ip.dst, 0, 0, 0],
            ip.proto,
            inner + hdr_len,
        )
    } else {
        let ip = ptr_at::<Ipv6Hdr>(ctx, inner).ok_or(Reason::DropIcmpMalformed)?;
        // SAFETY: ptr_at checked the 40 bytes.
        let ip = unsafe { &*ip };
        let vip_addr = addr_words(&vip_bytes);
        let same = (ip.src[0] ^ vip_addr[0])
            | (ip.src[1] ^ vip_addr[1])
            | (ip.src[2] ^ vip_addr[2])
            | (ip.src[3] ^ vip_addr[3])
            == 0;
        if u32::from_be(ip.vtcfl) >> 28 != 6 || !same {
            return Err(Reason::DropIcmpMalformed);
        }
        let (proto, l4) = quoted_v6_l4(ctx, ip.next, inner + size_of::<Ipv6Hdr>(), end)?;
        (ip.src, ip.dst, proto, l4)
    };
    let ports = ptr_at::<[u8; QUOTED_L4]>(ctx, ports_at).ok_or(Reason::DropIcmpMalformed)?;
    if ports_at + QUOTED_L4 > end {
        return Err(Reason::DropIcmpMalformed);
    }
    if proto != PROTO_TCP && proto != PROTO_UDP {
        return Err(Reason::PassIcmpUnmatched);
    }
    // SAFETY: ptr_at checked the 8 bytes; the ports are the first four.
    let ports = unsafe { *ports.cast::<Ports>() };
    let family = if vip_family == FAMILY_V4 {
        FAMILY_V4
    } else {
        FAMILY_V6
    };
    // Reversed: the flow goes from the client to the VIP.
    *key = flow_key(vip_side, client, proto, family);
    key.vip.port = ports.src;
    key.sport = ports.dst;
    Ok(())
}

/// The upper-layer protocol of the quoted IPv6 packet and its offset: the extension
/// headers from `off` (the first one's type is `next`) walked, inside the quote (which
/// ends at `end`).
#[inline(always)]
fn quoted_v6_l4(
    ctx: &XdpContext,
    mut next: u8,
    mut off: usize,
    end: usize,
) -> Result<(u8, usize), Reason> {
    for _ in 0..MAX_IPV6_EXT_HEADERS {
        if next != NEXTHDR_FRAGMENT && !is_ext_header(next) {
            return Ok((next, off));
        }
        // One four-byte read: next header, length, and a fragment header's offset.
        let ext = ptr_at::<[u8; 4]>(ctx, off).ok_or(Reason::DropIcmpMalformed)?;
        // SAFETY: ptr_at checked the four bytes.
        let [nh, units, hi, lo] = unsafe { *ext };
        off += if next == NEXTHDR_FRAGMENT {
            // A later fragment carries no ports.
            if u16::from_be_bytes([hi, lo]) & IPV6_OFFSET_MASK != 0 {
                return Err(Reason::PassIcmpUnmatched);
            }
            8
        } else if next == NEXTHDR_AUTH {
            // AH counts 4-octet units minus 2 (RFC 4302); the others 8-octet units
            // minus 1 (RFC 8200).
            (usize::from(units) + 2) * 4
        } else {
            (usize::from(units) + 1) * 8
        };
        next = nh;
        if off > end || off > MAX_QUOTED_L4 {
            return Err(Reason::DropIcmpMalformed);
        }
    }
    if next == NEXTHDR_FRAGMENT || is_ext_header(next) {
        return Err(Reason::PassIcmpUnmatched);
    }
    Ok((next, off))
}
