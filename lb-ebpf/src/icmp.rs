// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! ICMP and ICMPv6 messages to VIP addresses: echo requests are answered by the load
//! balancer (`icmp.echo`), errors about VIP flows go to the flow's backend
//! ([`icmp_error`](crate::icmp_error)); everything else, and every ICMP message to
//! another address, passes to the stack (`pass_non_vip`).
//!
//! Echo (RFC 792, RFC 4443 section 4): the request becomes its reply in place — the
//! Ethernet and IP addresses swapped, TTL / hop limit 64, type 0 (ICMP) or 129
//! (ICMPv6), identifier, sequence number, data and IPv4 options kept — and goes back
//! out with `XDP_TX`. The checksums are updated incrementally (RFC 1624) for the words
//! that change; swapping the addresses leaves every sum as it was. An ICMP reply that is
//! all zero but for its checksum gets 0xffff, the checksum of an all-zero message
//! (equation 3 alone gives 0x0000: [`lb_common::csum`]). An ICMPv6 request
//! behind extension headers passes (its reply would need them rewritten). Replies are
//! rate-limited (`ratelimit`, kind `ICMP_RATE_ECHO`); echo requests are answered
//! whatever the VIPs' allowed source prefixes, which are per port.

use aya_ebpf::{bindings::xdp_action, programs::XdpContext};
use lb_common::{
    maps::ICMP_RATE_ECHO,
    stats::Reason,
    types::{CONFIG_ICMP_ECHO, CONFIG_VALID, FAMILY_V4, LbConfig},
};

use crate::{
    csum,
    headers::{EthHdr, Ipv4Hdr, Ipv6Hdr},
    icmp_error,
    maps::CONFIG,
    packet::ptr_at,
    parse::{ETH_LEN, IcmpAt},
    ratelimit, vip,
};

const ICMP_ECHO_REPLY: u8 = 0;
const ICMP_DEST_UNREACH: u8 = 3;
const ICMP_ECHO: u8 = 8;
const ICMP_TIME_EXCEEDED: u8 = 11;
const ICMPV6_DEST_UNREACH: u8 = 1;
const ICMPV6_PKT_TOOBIG: u8 = 2;
const ICMPV6_TIME_EXCEED: u8 = 3;
const ICMPV6_ECHO_REQUEST: u8 = 128;
const ICMPV6_ECHO_REPLY: u8 = 129;
const TTL: u8 = 64;

const PASS: (u32, Reason) = (xdp_action::XDP_PASS, Reason::PassNonVip);

/// Handles the ICMP message `at`; returns the verdict.
#[inline(always)]
pub(crate) fn process(ctx: &XdpContext, at: &IcmpAt) -> (u32, Reason) {
    let v4 = at.key.vip.family == FAMILY_V4;
    let echo = if v4 {
        at.kind == ICMP_ECHO
    } else {
        at.kind == ICMPV6_ECHO_REQUEST
    };
    let error = if v4 {
        at.kind == ICMP_DEST_UNREACH || at.kind == ICMP_TIME_EXCEEDED
    } else {
        matches!(
            at.kind,
            ICMPV6_DEST_UNREACH | ICMPV6_PKT_TOOBIG | ICMPV6_TIME_EXCEED
        )
    };
    if !(echo && at.code == 0 || error) || !vip::is_vip_address(&at.key) {
        return PASS;
    }
    let Some(cfg) = CONFIG.get(0).filter(|cfg| cfg.flags & CONFIG_VALID != 0) else {
        return PASS;
    };
    if error {
        return icmp_error::forward(ctx, at, cfg);
    }
    echo_reply(ctx, at, cfg, v4)
}

/// Turns the echo request `at` into its reply.
#[inline(always)]
fn echo_reply(ctx: &XdpContext, at: &IcmpAt, cfg: &LbConfig, v4: bool) -> (u32, Reason) {
    let direct = ETH_LEN + if v4 { 0 } else { size_of::<Ipv6Hdr>() };
    if cfg.flags & CONFIG_ICMP_ECHO == 0 || !v4 && at.l4 as usize != direct {
        return PASS;
    }
    if !ratelimit::allow(ICMP_RATE_ECHO, cfg) {
        return (xdp_action::XDP_DROP, Reason::DropIcmpRateLimited);
    }
    let replied = if v4 {
        reply_v4(ctx, at.l4 as usize)
    } else {
        reply_v6(ctx)
    };
    match replied {
        Some(()) => (xdp_action::XDP_TX, Reason::TxIcmpEchoReply),
        None => PASS,
    }
}

/// Swaps the Ethernet addresses.
#[inline(always)]
fn swap_macs(ctx: &XdpContext) -> Option<()> {
    let eth = ptr_at::<EthHdr>(ctx, 0)?;
    // SAFETY: ptr_at checked the 14 bytes.
    unsafe {
        let e = &mut *eth;
        core::mem::swap(&mut e.dst, &mut e.src);
    }
    Some(())
}

#[inline(always)]
fn reply_v4(ctx: &XdpContext, l4: usize) -> Option<()> {
    let ip = ptr_at::<Ipv4Hdr>(ctx, ETH_LEN)?;
    // The type/code word and the checksum. Parsing bounded l4 (IHL); the bound is
    // checked again for the verifier, which does not see the value through the call.
    if l4 > ETH_LEN + 60 {
        return None;
    }
    let icmp = ptr_at::<[u16; 2]>(ctx, l4)?;
    swap_macs(ctx)?;
    // SAFETY: ptr_at checked the IPv4 header and the ICMP header's first four bytes.
    unsafe {
        let ip = &mut *ip;
        core::mem::swap(&mut ip.src, &mut ip.dst);
        let old = u16::from_ne_bytes([ip.ttl, ip.proto]);
        ip.ttl = TTL;
        ip.check = csum::update(ip.check, old, u16::from_ne_bytes([ip.ttl, ip.proto]));
        let [head, check] = *icmp;
        let new = u16::from_ne_bytes([ICMP_ECHO_REPLY, 0]);
        // A request whose identifier, sequence number and data are zero has an
        // all-zero reply, whose checksum is 0xffff (`update_nonzero`).
        *icmp = [new, csum::update_nonzero(check, head, new)];
    }
    Some(())
}

#[inline(always)]
fn reply_v6(ctx: &XdpContext) -> Option<()> {
    let ip = ptr_at::<Ipv6Hdr>(ctx, ETH_LEN)?;
    let icmp = ptr_at::<[u16; 2]>(ctx, ETH_LEN + size_of::<Ipv6Hdr>())?;
    swap_macs(ctx)?;
    // SAFETY: ptr_at checked the IPv6 header and the ICMPv6 header's first four bytes.
    unsafe {
        let ip = &mut *ip;
        core::mem::swap(&mut ip.src, &mut ip.dst);
        ip.hop_limit = TTL;
        let [head, check] = *icmp;
        let new = u16::from_ne_bytes([ICMPV6_ECHO_REPLY, 0]);
        *icmp = [new, csum::update(check, head, new)];
    }
    Some(())
}
