// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The backend agent: `lb_agent`, the XDP program `lb agent run` attaches to a
//! backend's interface (the counterpart of GLB's `glb-redirect`). It shares the object
//! with the load balancer, none of its maps and none of its code paths: `AGENT_CONFIG`
//! and `AGENT_STATS` are its own.
//!
//! Per frame:
//! 1. the outer headers ([`outer`]): IP-in-IP (IPv4 or IPv6 outer, IPv4 or IPv6 inside)
//!    when accepted, or GUE variant 0 to the configured UDP port with an IPv4 or IPv6
//!    outer header; anything else passes untouched;
//! 2. without second-chance candidates (GUE private data, `lb_common::types::agent`):
//!    the outer headers are stripped and the inner packet passed to the stack
//!    ([`deliver`]), as the kernel's ipip/ip6tnl/fou devices would;
//! 3. with candidates: a TCP SYN, a packet that is not TCP, and a TCP packet for which
//!    this host has a socket ([`socket`]: established, a request socket, a valid SYN
//!    cookie through the listener) are delivered; otherwise the packet goes to the next
//!    candidate with that candidate consumed ([`forward`]), or, when none is left, is
//!    delivered (the chain ends: at most one hop per candidate, never back).
//!
//! Every frame counts one `lb_common::agent::AgentReason` in `AGENT_STATS`; the
//! program never returns `XDP_ABORTED`.

mod deliver;
mod forward;
mod outer;
mod socket;

use aya_ebpf::{macros::xdp, programs::XdpContext};
use lb_common::{
    agent::AgentReason,
    types::{AGENT_VALID, SECOND_CHANCE_KIND, SECOND_CHANCE_MAX, second_chance_hlen},
};

use crate::maps::{AGENT_CONFIG, AGENT_STATS};
use outer::Outer;
use socket::Found;

/// The backend agent.
#[xdp]
fn lb_agent(ctx: XdpContext) -> u32 {
    let (action, reason) = run(&ctx);
    count(reason);
    action
}

/// One frame's action and reason.
#[inline(always)]
fn run(ctx: &XdpContext) -> (u32, AgentReason) {
    let Some(cfg) = AGENT_CONFIG.get(0).filter(|c| c.flags & AGENT_VALID != 0) else {
        return verdict(AgentReason::PassNoConfig);
    };
    let outer = match outer::parse(ctx, cfg) {
        Ok(outer) => outer,
        Err(reason) => return verdict(reason),
    };
    if outer.hlen == 0 {
        let reason = if outer.gue {
            AgentReason::DecapGue
        } else {
            AgentReason::DecapIpip
        };
        return deliver::strip(ctx, &outer, reason);
    }
    second_chance(ctx, &outer)
}

/// A packet with GUE private data: checks it is second-chance candidates, then
/// delivers the packet or forwards it to its next candidate.
#[inline(always)]
fn second_chance(ctx: &XdpContext, outer: &Outer) -> (u32, AgentReason) {
    let Some(hdr) = outer::second_chance_hdr(ctx, outer) else {
        return verdict(AgentReason::DropMalformed);
    };
    if hdr.kind != SECOND_CHANCE_KIND
        || hdr.reserved != 0
        || hdr.count == 0
        || usize::from(hdr.count) > SECOND_CHANCE_MAX
        || hdr.used > hdr.count
        || u32::from(second_chance_hlen(hdr.count, outer.v4)) != outer.hlen
    {
        return verdict(AgentReason::DropBadCandidates);
    }
    match socket::find(ctx, outer) {
        Found::Deliver(reason) => return deliver::strip(ctx, outer, reason),
        Found::Malformed => return verdict(AgentReason::DropMalformed),
        Found::Nothing => {}
    }
    forward::to_next(ctx, outer, hdr.count, hdr.used)
}

/// The verdict of `reason`: its action.
#[inline(always)]
fn verdict(reason: AgentReason) -> (u32, AgentReason) {
    (reason.action(), reason)
}

/// Counts one frame under `reason`.
#[inline(always)]
fn count(reason: AgentReason) {
    if let Some(stats) = AGENT_STATS.get_ptr_mut(0) {
        // SAFETY: per-CPU array element, used only by this CPU during this run.
        let stats = unsafe { &mut *stats };
        if let Some(counter) = stats.counters.get_mut(reason as usize) {
            *counter += 1;
        }
    }
}
