// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The agent's outer headers: which encapsulation a frame carries and how long its
//! outer headers are.
//!
//! Accepted (what the load balancer emits, and what Linux's ipip, ip6tnl and fou
//! devices receive):
//! - IP-in-IP: an outer IPv4 header without options (IHL 5) of protocol 4 (IPv4 inside,
//!   RFC 2003) or 41 (IPv6 inside, RFC 4213), or an outer IPv6 header without extension
//!   headers of next header 41 (RFC 2473) or 4 (IPv4-in-IPv6);
//! - GUE (draft-ietf-intarea-gue): the same outer headers with protocol 17, UDP to the
//!   configured port (the UDP checksum is not checked: the load balancer sends 0), then
//!   the variant 0 header: version 0, C 0 (not a control message), Proto/ctype 4 or 41,
//!   no flags; Hlen words of private data may follow (second-chance candidates).
//!
//! An outer IPv4 fragment passes untouched (counted): the agent does not reassemble,
//! and the load balancer sends none (it refuses packets that would not fit).

use aya_ebpf::programs::XdpContext;
use lb_common::{
    agent::AgentReason,
    types::{AGENT_GUE, AGENT_IPIP, AgentConfig, SecondChanceHdr},
};

use crate::{
    encap::{ETH_P_IP, ETH_P_IPV6, IPPROTO_IPIP, IPPROTO_IPV6, IPPROTO_UDP},
    headers::{EthHdr, Ipv4Hdr, Ipv6Hdr, UdpGueHdr},
    packet::ptr_at,
};

/// Bytes of the Ethernet header.
pub(super) const ETH_LEN: usize = 14;
/// Bytes of an outer IPv4 header (no options).
pub(super) const IPV4_LEN: u32 = 20;
/// Bytes of an outer IPv6 header.
pub(super) const IPV6_LEN: u32 = 40;
/// Bytes of the UDP header and the GUE base header.
pub(super) const UDP_GUE_LEN: u32 = 12;
/// The "more fragments" flag and the fragment offset of IPv4, wire order.
const IPV4_MF_OFFSET: u16 = 0x3fff_u16.to_be();
/// The GUE header's first byte: version (2 bits), C (1 bit), Hlen (5 bits).
const GUE_VERSION_C: u8 = 0xe0;
const GUE_HLEN: u8 = 0x1f;

/// What the outer headers say.
pub(super) struct Outer {
    /// The outer header is IPv4 (else IPv6).
    pub(super) v4: bool,
    /// GUE (else IP-in-IP).
    pub(super) gue: bool,
    /// The inner packet is IPv4 (else IPv6).
    pub(super) inner_v4: bool,
    /// Words of GUE private data (0: none, and always for IP-in-IP).
    pub(super) hlen: u32,
    /// Bytes after the Ethernet header up to the inner packet: the outer IP header,
    /// and for GUE the UDP and GUE headers with the private data.
    pub(super) len: u32,
}

impl Outer {
    /// Bytes of the outer IP header.
    #[inline(always)]
    pub(super) fn ip_len(&self) -> u32 {
        if self.v4 { IPV4_LEN } else { IPV6_LEN }
    }
}

/// The frame's outer headers, or the reason it is not decapsulated.
#[inline(always)]
pub(super) fn parse(ctx: &XdpContext, cfg: &AgentConfig) -> Result<Outer, AgentReason> {
    let eth = ptr_at::<EthHdr>(ctx, 0).ok_or(AgentReason::PassNotEncapsulated)?;
    // SAFETY: ptr_at checked the header lies within the frame.
    let proto = unsafe { (*eth).proto };
    let (v4, ip_proto) = if proto == ETH_P_IP {
        let ip = ptr_at::<Ipv4Hdr>(ctx, ETH_LEN).ok_or(AgentReason::PassNotEncapsulated)?;
        // SAFETY: as above.
        let ip = unsafe { &*ip };
        if ip.vihl != 0x45 {
            return Err(AgentReason::PassNotEncapsulated);
        }
        let ours = matches!(ip.proto, IPPROTO_IPIP | IPPROTO_IPV6 | IPPROTO_UDP);
        if ours && ip.frag & IPV4_MF_OFFSET != 0 {
            return Err(AgentReason::PassOuterFragment);
        }
        (true, ip.proto)
    } else if proto == ETH_P_IPV6 {
        let ip = ptr_at::<Ipv6Hdr>(ctx, ETH_LEN).ok_or(AgentReason::PassNotEncapsulated)?;
        // SAFETY: as above.
        (false, unsafe { (*ip).next })
    } else {
        return Err(AgentReason::PassNotEncapsulated);
    };
    let ip_len = if v4 { IPV4_LEN } else { IPV6_LEN };
    match ip_proto {
        IPPROTO_IPIP | IPPROTO_IPV6 if cfg.flags & AGENT_IPIP != 0 => Ok(Outer {
            v4,
            gue: false,
            inner_v4: ip_proto == IPPROTO_IPIP,
            hlen: 0,
            len: ip_len,
        }),
        IPPROTO_UDP if cfg.flags & AGENT_GUE != 0 => gue(ctx, cfg, v4, ip_len),
        _ => Err(AgentReason::PassNotEncapsulated),
    }
}

/// The UDP and GUE headers after an outer IP header of `ip_len` bytes.
#[inline(always)]
fn gue(ctx: &XdpContext, cfg: &AgentConfig, v4: bool, ip_len: u32) -> Result<Outer, AgentReason> {
    let at = ETH_LEN + ip_len as usize;
    let Some(ports) = ptr_at::<[u16; 2]>(ctx, at) else {
        return Err(AgentReason::PassNotEncapsulated);
    };
    // SAFETY: ptr_at checked the ports lie within the frame.
    if unsafe { (*ports)[1] } != cfg.gue_port {
        return Err(AgentReason::PassNotEncapsulated);
    }
    let hdr = ptr_at::<UdpGueHdr>(ctx, at).ok_or(AgentReason::DropMalformed)?;
    // SAFETY: as above.
    let [first, inner, flags_hi, flags_lo] = unsafe { (*hdr).gue }.to_ne_bytes();
    if first & GUE_VERSION_C != 0 || flags_hi != 0 || flags_lo != 0 {
        return Err(AgentReason::DropGueUnsupported);
    }
    let inner_v4 = match inner {
        IPPROTO_IPIP => true,
        IPPROTO_IPV6 => false,
        _ => return Err(AgentReason::DropGueUnsupported),
    };
    let hlen = u32::from(first & GUE_HLEN);
    Ok(Outer {
        v4,
        gue: true,
        inner_v4,
        hlen,
        len: ip_len + UDP_GUE_LEN + 4 * hlen,
    })
}

/// The second-chance header at the start of the GUE private data, if it is in the
/// frame.
#[inline(always)]
pub(super) fn second_chance_hdr(ctx: &XdpContext, outer: &Outer) -> Option<SecondChanceHdr> {
    let at = ETH_LEN + (outer.ip_len() + UDP_GUE_LEN) as usize;
    let hdr = ptr_at::<SecondChanceHdr>(ctx, at)?;
    // SAFETY: ptr_at checked the header lies within the frame.
    Some(unsafe { *hdr })
}
