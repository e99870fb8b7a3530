// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Delivery: the outer headers are stripped (`bpf_xdp_adjust_head`) and the inner
//! packet passed to the stack behind the frame's Ethernet addresses, with the EtherType
//! of the inner packet, as if it had arrived directly.

use aya_ebpf::{helpers::generated::bpf_xdp_adjust_head, programs::XdpContext};
use lb_common::agent::AgentReason;

use super::{
    outer::{ETH_LEN, Outer},
    verdict,
};
use crate::{
    encap::{ETH_P_IP, ETH_P_IPV6},
    headers::EthHdr,
    packet::ptr_at,
};

/// Bytes of the shortest inner packet delivered: an IPv4 header.
const INNER_MIN: usize = 20;

/// Strips `outer`'s headers and passes the inner packet, counted under `reason`.
#[inline(always)]
pub(super) fn strip(ctx: &XdpContext, outer: &Outer, reason: AgentReason) -> (u32, AgentReason) {
    let len = outer.len as usize;
    let Some(eth) = ptr_at::<EthHdr>(ctx, 0) else {
        return verdict(AgentReason::DropMalformed);
    };
    // SAFETY: ptr_at checked the header lies within the frame.
    let mut eth = unsafe { *eth };
    if ptr_at::<[u8; INNER_MIN]>(ctx, ETH_LEN + len).is_none() {
        return verdict(AgentReason::DropMalformed);
    }
    eth.proto = if outer.inner_v4 { ETH_P_IP } else { ETH_P_IPV6 };
    #[expect(
        clippy::cast_possible_wrap,
        reason = "at most 14 + 40 + 12 + 124 bytes"
    )]
    let by = outer.len as i32;
    // SAFETY: the context is the program's; the helper moves the frame's start.
    if unsafe { bpf_xdp_adjust_head(ctx.ctx, by) } != 0 {
        return verdict(AgentReason::DropAdjustFail);
    }
    let Some(out) = ptr_at::<EthHdr>(ctx, 0) else {
        return verdict(AgentReason::DropAdjustFail);
    };
    // SAFETY: ptr_at checked the header lies within the (moved) frame.
    unsafe { *out = eth };
    verdict(reason)
}
