// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The full path: `lb_xdp_full`, the program for VLAN-tagged frames and first fragments
//! beside `lb_xdp`'s fast path. This module holds the hand-over from `lb_xdp`
//! (`RARE_PROGS` slot `FULL_SLOT`) and what the program carries from its start to its
//! end (`CARRIED`).
//!
//! These frames must carry something through the whole processing: a tag to put back
//! on the way out, a datagram to record once its backend is known. In a program of
//! their own they cost the untagged, unfragmented packets nothing (no tag to restore, no
//! fragment to record), and each program has its own verifier budget. The frame is
//! handed over as it came: `lb_xdp_full` strips the tag, parses again, and counts the
//! verdict.
//!
//! What it carries lives in the per-CPU `CARRIED` record
//! ([`Carried`](crate::records::Carried)), not in registers: the verifier tracks a
//! register's known value along each path, so a tag held from the start to the end
//! makes it walk the whole processing once per kind of tag and of fragment (about
//! 741,000 instructions, 4.7 times `lb_xdp`); a value loaded from a map is unknown to
//! it, and the paths merge. The record is per CPU and an XDP
//! program runs to its end on one CPU, so no other packet writes it meanwhile.

use aya_ebpf::programs::XdpContext;
use lb_common::{maps::FULL_SLOT, stats::Reason};

use crate::{
    maps::{CARRIED, RARE_PROGS},
    records::FragTag,
    vlan::Tag,
};

/// Tail-calls `lb_xdp_full`; returns the verdict of `fallback` if that fails (an object
/// loaded without filling `RARE_PROGS`).
#[inline(always)]
pub(crate) fn hand_over(ctx: &XdpContext, fallback: Reason) -> (u32, Reason) {
    // SAFETY: the context is this program's; a successful tail call does not return.
    unsafe { RARE_PROGS.tail_call(ctx, FULL_SLOT) };
    (fallback.action(), fallback)
}

/// Tail-calls `lb_xdp_full` for a VIP packet while `lb trace` runs: that program traces
/// it, so `lb_xdp` carries no trace hook (the verifier would walk the hook once for
/// each of its exit states). Returns only if the tail call fails; the caller then
/// processes the packet untraced.
#[inline(always)]
pub(crate) fn hand_over_traced(ctx: &XdpContext) {
    // SAFETY: the context is this program's; a successful tail call does not return.
    unsafe { RARE_PROGS.tail_call(ctx, FULL_SLOT) };
}

/// Starts a packet: carries `tag`, and no fragment yet.
#[inline(always)]
pub(crate) fn begin(tag: Tag) {
    if let Some(carried) = CARRIED.get_ptr_mut(0) {
        // SAFETY: per-CPU array element, used only by this CPU during this packet.
        unsafe {
            (*carried).tag = tag.to_word();
            (*carried).first_fragment = 0;
        }
    }
}

/// The tag carried since [`begin`] ([`Tag::None`] if the record cannot be read).
#[inline(always)]
pub(crate) fn tag() -> Tag {
    CARRIED.get_ptr(0).map_or(Tag::None, |carried| {
        // SAFETY: per-CPU array element, written by `begin` for this packet.
        Tag::from_word(unsafe { (*carried).tag })
    })
}

/// Carries the packet's datagram: it is a first fragment.
#[inline(always)]
pub(crate) fn note_first_fragment(frag: &FragTag) {
    if let Some(carried) = CARRIED.get_ptr_mut(0) {
        // SAFETY: per-CPU array element, used only by this CPU during this packet.
        unsafe {
            (*carried).first_fragment = 1;
            (*carried).frag = *frag;
        }
    }
}

/// The datagram of a first fragment, noted by [`note_first_fragment`]; `None` for any
/// other packet.
#[inline(always)]
pub(crate) fn first_fragment() -> Option<FragTag> {
    let carried = CARRIED.get_ptr(0)?;
    // SAFETY: per-CPU array element, written for this packet.
    let carried = unsafe { &*carried };
    (carried.first_fragment != 0).then_some(carried.frag)
}
