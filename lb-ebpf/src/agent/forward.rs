// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Forwarding a second-chance packet to its next candidate: the GUE packet is sent on
//! as it came except for
//! - the outer destination: the next candidate (`candidate[used]`); a candidate equal
//!   to this host's address (the outer destination it came with) is consumed without a
//!   hop;
//! - the outer source: this host's address (the outer destination it came with), so the
//!   packet leaves from an address the network routes back here;
//! - TTL / hop limit 64 and, for IPv4, the header checksum; the UDP checksum 0 (as the
//!   load balancer sends it);
//! - `used` in the second-chance header, one past the candidate it goes to;
//! - the Ethernet addresses, from the FIB (`bpf_fib_lookup` from the receiving
//!   interface; forwarding must be on for it), and out of the interface the FIB names.
//!
//! When no candidate is left the packet is delivered here: the chain ends, and the
//! packet never returns to a host it visited (each hop consumes one candidate, and only
//! candidates not yet consumed are tried).

use aya_ebpf::{
    bindings::{bpf_fib_lookup as FibParams, xdp_action},
    helpers::generated::bpf_redirect,
    programs::XdpContext,
};
use lb_common::{agent::AgentReason, types::SECOND_CHANCE_MAX};

use super::{
    deliver,
    outer::{ETH_LEN, IPV4_LEN, IPV6_LEN, Outer, UDP_GUE_LEN},
    verdict,
};
use crate::{
    csum,
    encap::{
        FIB_FOUND, FIB_NO_NEIGH, IPPROTO_UDP, Interface as _, OUTER_TTL, fib_lookup, mac_words,
    },
    headers::{EthHdr, Ipv4Hdr, Ipv6Hdr, UdpGueHdr},
    packet::ptr_at,
};

const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
/// Offset of `used` in the second-chance header.
const USED_OFFSET: usize = 2;
/// Bytes of the second-chance header before the candidates.
const HDR_LEN: usize = 4;

/// Sends the packet to its first candidate from `used` on that is not this host, or
/// delivers it when none is left.
#[inline(always)]
pub(super) fn to_next(ctx: &XdpContext, outer: &Outer, count: u8, used: u8) -> (u32, AgentReason) {
    let private = ETH_LEN + (outer.ip_len() + UDP_GUE_LEN) as usize;
    let mut next = used;
    if outer.v4 {
        let Some(ip) = ptr_at::<Ipv4Hdr>(ctx, ETH_LEN) else {
            return verdict(AgentReason::DropMalformed);
        };
        // SAFETY: ptr_at checked the header lies within the frame.
        let own = unsafe { (*ip).dst };
        for _ in 0..SECOND_CHANCE_MAX {
            if next >= count {
                break;
            }
            let at = private + HDR_LEN + 4 * usize::from(next);
            let Some(cand) = ptr_at::<u32>(ctx, at) else {
                return verdict(AgentReason::DropMalformed);
            };
            next += 1;
            // SAFETY: as above.
            let cand = unsafe { *cand };
            if cand != own {
                return send_v4(ctx, ip, own, cand, private, next);
            }
        }
    } else {
        let Some(ip) = ptr_at::<Ipv6Hdr>(ctx, ETH_LEN) else {
            return verdict(AgentReason::DropMalformed);
        };
        // SAFETY: ptr_at checked the header lies within the frame.
        let own = unsafe { (*ip).dst };
        for _ in 0..SECOND_CHANCE_MAX {
            if next >= count {
                break;
            }
            let at = private + HDR_LEN + 16 * usize::from(next);
            let Some(cand) = ptr_at::<[u32; 4]>(ctx, at) else {
                return verdict(AgentReason::DropMalformed);
            };
            next += 1;
            // SAFETY: as above.
            let cand = unsafe { *cand };
            if cand != own {
                return send_v6(ctx, ip, own, cand, private, next);
            }
        }
    }
    deliver::strip(ctx, outer, AgentReason::DecapExhausted)
}

/// Rewrites the outer IPv4 header `ip` from `own` to `cand`, marks `used`, and sends.
#[inline(always)]
fn send_v4(
    ctx: &XdpContext,
    ip: *mut Ipv4Hdr,
    own: u32,
    cand: u32,
    private: usize,
    used: u8,
) -> (u32, AgentReason) {
    // SAFETY: bpf_fib_lookup is plain old data; all zeroes is valid.
    let mut params: FibParams = unsafe { core::mem::zeroed() };
    params.family = AF_INET;
    params.l4_protocol = IPPROTO_UDP;
    params.ifindex = ctx.ifindex();
    params.__bindgen_anon_3.ipv4_src = own;
    params.__bindgen_anon_4.ipv4_dst = cand;
    if let Err(reason) = next_hop(ctx, &mut params) {
        return verdict(reason);
    }
    // SAFETY: ip was checked to lie within the frame, which no helper has moved.
    let hdr = unsafe { &mut *ip };
    hdr.src = own;
    hdr.dst = cand;
    hdr.ttl = OUTER_TTL;
    hdr.check = 0;
    hdr.check = csum::ipv4_header(hdr);
    finish(ctx, &params, ETH_LEN + IPV4_LEN as usize, private, used)
}

/// Rewrites the outer IPv6 header `ip` from `own` to `cand`, marks `used`, and sends.
#[inline(always)]
fn send_v6(
    ctx: &XdpContext,
    ip: *mut Ipv6Hdr,
    own: [u32; 4],
    cand: [u32; 4],
    private: usize,
    used: u8,
) -> (u32, AgentReason) {
    // SAFETY: as in send_v4.
    let mut params: FibParams = unsafe { core::mem::zeroed() };
    params.family = AF_INET6;
    params.l4_protocol = IPPROTO_UDP;
    params.ifindex = ctx.ifindex();
    params.__bindgen_anon_3.ipv6_src = own;
    params.__bindgen_anon_4.ipv6_dst = cand;
    if let Err(reason) = next_hop(ctx, &mut params) {
        return verdict(reason);
    }
    // SAFETY: as in send_v4.
    let hdr = unsafe { &mut *ip };
    hdr.src = own;
    hdr.dst = cand;
    hdr.hop_limit = OUTER_TTL;
    finish(ctx, &params, ETH_LEN + IPV6_LEN as usize, private, used)
}

/// The FIB's next hop for `params`.
#[inline(always)]
fn next_hop(ctx: &XdpContext, params: &mut FibParams) -> Result<(), AgentReason> {
    match fib_lookup(ctx, params) {
        Ok(FIB_FOUND) => Ok(()),
        Ok(FIB_NO_NEIGH) => Err(AgentReason::DropFibNoNeigh),
        _ => Err(AgentReason::DropFibFail),
    }
}

/// Clears the UDP checksum at `udp`, writes `used` into the second-chance header at
/// `private`, the next hop's MACs into the Ethernet header, and sends the frame out of
/// the FIB's interface.
#[inline(always)]
fn finish(
    ctx: &XdpContext,
    params: &FibParams,
    udp: usize,
    private: usize,
    used: u8,
) -> (u32, AgentReason) {
    let (Some(eth), Some(hdr), Some(mark)) = (
        ptr_at::<EthHdr>(ctx, 0),
        ptr_at::<UdpGueHdr>(ctx, udp),
        ptr_at::<u8>(ctx, private + USED_OFFSET),
    ) else {
        return verdict(AgentReason::DropMalformed);
    };
    // SAFETY: ptr_at checked each lies within the frame.
    unsafe {
        (*hdr).check = 0;
        *mark = used;
        (*eth).dst = mac_words(&params.dmac);
        (*eth).src = mac_words(&params.smac);
    }
    if params.ifindex == ctx.ifindex() {
        return (xdp_action::XDP_TX, AgentReason::TxCandidate);
    }
    // SAFETY: bpf_redirect only records the target interface for this frame.
    let action = unsafe { bpf_redirect(params.ifindex, 0) };
    if action == i64::from(xdp_action::XDP_REDIRECT) {
        (xdp_action::XDP_REDIRECT, AgentReason::RedirectCandidate)
    } else {
        verdict(AgentReason::DropFibFail)
    }
}
