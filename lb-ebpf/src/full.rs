// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The hand-over from `lb_xdp` to `lb_xdp_full` (`RARE_PROGS` slot `FULL_SLOT`): VLAN
//! tagged frames and first fragments, the traffic whose tag or datagram must be carried
//! through the whole processing. In a program of their own they cost the untagged,
//! unfragmented packets nothing (no tag to restore, no fragment to record on the way
//! out), and each program has its own verifier budget. The frame is handed over as it
//! came: `lb_xdp_full` strips the tag, parses again, and counts the verdict.

use aya_ebpf::programs::XdpContext;
use lb_common::{maps::FULL_SLOT, stats::Reason};

use crate::maps::RARE_PROGS;

/// Tail-calls `lb_xdp_full`; returns the verdict of `fallback` if that fails (an object
/// loaded without filling `RARE_PROGS`).
#[inline(always)]
pub(crate) fn hand_over(ctx: &XdpContext, fallback: Reason) -> (u32, Reason) {
    // SAFETY: the context is this program's; a successful tail call does not return.
    unsafe { RARE_PROGS.tail_call(ctx, FULL_SLOT) };
    (fallback.action(), fallback)
}
