// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Whether this host holds the connection of a second-chance packet: the inner 4-tuple
//! looked up among the host's TCP sockets with `bpf_skc_lookup_tcp` (in the network
//! namespace of the receiving interface). A socket that is not a listener (established,
//! a request socket of a handshake in progress, time-wait) holds it; a listener holds it
//! only when the packet's ACK carries a valid SYN cookie
//! (`bpf_tcp_check_syncookie`). A SYN is always this host's: a new connection starts
//! where the load balancer sent it.

use aya_ebpf::{
    bindings::{BPF_F_CURRENT_NETNS, BPF_TCP_LISTEN, bpf_sock_tuple, tcphdr},
    helpers::generated::{bpf_sk_release, bpf_skc_lookup_tcp, bpf_tcp_check_syncookie},
    programs::XdpContext,
};
use lb_common::{agent::AgentReason, types::PROTO_TCP};

use super::outer::{ETH_LEN, Outer};
use crate::{
    headers::{Ipv4Hdr, Ipv6Hdr},
    packet::ptr_at,
};

/// The fragment offset and "more fragments" flag of IPv4, wire order.
const IPV4_MF_OFFSET: u16 = 0x3fff_u16.to_be();
/// TCP flags (byte 13 of the header, RFC 9293).
const TCP_SYN: u8 = 0x02;
const TCP_ACK: u8 = 0x10;
/// Bytes of the TCP header the helpers read (without options).
const TCP_LEN: u32 = 20;
/// Bytes of the IPv4 tuple and of the IPv6 tuple of `struct bpf_sock_tuple`.
const TUPLE_V4_LEN: u32 = 12;
const TUPLE_V6_LEN: u32 = 36;

/// The first 20 bytes of a TCP header (RFC 9293), wire order.
#[repr(C)]
#[derive(Clone, Copy)]
struct TcpHead {
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    offset: u8,
    flags: u8,
    window: u16,
    check: u16,
    urgent: u16,
}
const _: () = assert!(size_of::<TcpHead>() == TCP_LEN as usize);

/// What the lookup found.
pub(super) enum Found {
    /// Deliver the packet here, counted under the reason.
    Deliver(AgentReason),
    /// No socket here: try the next candidate.
    Nothing,
    /// The inner TCP header is truncated.
    Malformed,
}

/// Looks the inner packet of `outer` up.
#[inline(always)]
pub(super) fn find(ctx: &XdpContext, outer: &Outer) -> Found {
    let at = ETH_LEN + outer.len as usize;
    if outer.inner_v4 {
        find_v4(ctx, at)
    } else {
        find_v6(ctx, at)
    }
}

/// The IPv4 packet at `at`.
#[inline(always)]
fn find_v4(ctx: &XdpContext, at: usize) -> Found {
    let Some(ip) = ptr_at::<Ipv4Hdr>(ctx, at) else {
        return Found::Malformed;
    };
    // SAFETY: ptr_at checked the header lies within the frame.
    let hdr = unsafe { &*ip };
    if hdr.vihl != 0x45 || hdr.proto != PROTO_TCP || hdr.frag & IPV4_MF_OFFSET != 0 {
        return Found::Deliver(AgentReason::DecapNotTcp);
    }
    let Some(tcp) = ptr_at::<TcpHead>(ctx, at + size_of::<Ipv4Hdr>()) else {
        return Found::Malformed;
    };
    // SAFETY: as above.
    let th = unsafe { &*tcp };
    if th.flags & (TCP_SYN | TCP_ACK) == TCP_SYN {
        return Found::Deliver(AgentReason::DecapSyn);
    }
    // SAFETY: bpf_sock_tuple is plain old data; all zeroes is valid.
    let mut tuple: bpf_sock_tuple = unsafe { core::mem::zeroed() };
    tuple.__bindgen_anon_1.ipv4.saddr = hdr.src;
    tuple.__bindgen_anon_1.ipv4.daddr = hdr.dst;
    tuple.__bindgen_anon_1.ipv4.sport = th.sport;
    tuple.__bindgen_anon_1.ipv4.dport = th.dport;
    lookup(ctx, &mut tuple, TUPLE_V4_LEN, ip.cast(), 20, tcp.cast())
}

/// The IPv6 packet at `at` (no extension headers: a packet with one is delivered).
#[inline(always)]
fn find_v6(ctx: &XdpContext, at: usize) -> Found {
    let Some(ip) = ptr_at::<Ipv6Hdr>(ctx, at) else {
        return Found::Malformed;
    };
    // SAFETY: ptr_at checked the header lies within the frame.
    let hdr = unsafe { &*ip };
    if hdr.next != PROTO_TCP {
        return Found::Deliver(AgentReason::DecapNotTcp);
    }
    let Some(tcp) = ptr_at::<TcpHead>(ctx, at + size_of::<Ipv6Hdr>()) else {
        return Found::Malformed;
    };
    // SAFETY: as above.
    let th = unsafe { &*tcp };
    if th.flags & (TCP_SYN | TCP_ACK) == TCP_SYN {
        return Found::Deliver(AgentReason::DecapSyn);
    }
    // SAFETY: as in find_v4.
    let mut tuple: bpf_sock_tuple = unsafe { core::mem::zeroed() };
    tuple.__bindgen_anon_1.ipv6.saddr = hdr.src;
    tuple.__bindgen_anon_1.ipv6.daddr = hdr.dst;
    tuple.__bindgen_anon_1.ipv6.sport = th.sport;
    tuple.__bindgen_anon_1.ipv6.dport = th.dport;
    lookup(ctx, &mut tuple, TUPLE_V6_LEN, ip.cast(), 40, tcp.cast())
}

/// `bpf_skc_lookup_tcp` of `tuple` (`tuple_len` bytes); for a listener, the SYN cookie
/// check of the IP header `ip` (`ip_len` bytes) and TCP header `tcp`. The socket is
/// released before this returns.
#[inline(always)]
fn lookup(
    ctx: &XdpContext,
    tuple: &mut bpf_sock_tuple,
    tuple_len: u32,
    ip: *mut core::ffi::c_void,
    ip_len: u32,
    tcp: *mut tcphdr,
) -> Found {
    #[expect(clippy::cast_sign_loss, reason = "BPF_F_CURRENT_NETNS is -1: all ones")]
    let netns = BPF_F_CURRENT_NETNS as u64;
    // SAFETY: the context is the program's and the tuple a live stack struct of at
    // least `tuple_len` bytes.
    let sk = unsafe { bpf_skc_lookup_tcp(ctx.ctx.cast(), tuple, tuple_len, netns, 0) };
    if sk.is_null() {
        return Found::Nothing;
    }
    // SAFETY: a non-null socket the helper returned; `state` is readable on it.
    let listener = unsafe { (*sk).state } == BPF_TCP_LISTEN;
    // SAFETY: ip and tcp point into the frame, checked to hold ip_len and TCP_LEN
    // bytes; sk is the socket the lookup returned.
    let cookie =
        listener && unsafe { bpf_tcp_check_syncookie(sk.cast(), ip, ip_len, tcp, TCP_LEN) } == 0;
    // SAFETY: releases the reference the lookup took, once, on every path.
    unsafe { bpf_sk_release(sk.cast()) };
    if listener && !cookie {
        Found::Nothing
    } else {
        Found::Deliver(AgentReason::DecapSocket)
    }
}
