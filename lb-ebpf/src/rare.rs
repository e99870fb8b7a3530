// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The rare paths' program, `lb_xdp_rare`, which `lb_xdp` reaches by tail call: later IP
//! fragments ([`frag`](crate::frag)), ICMP to VIP addresses ([`icmp`](crate::icmp)) and
//! the "too big" answers ([`too_big`](crate::too_big)), and VIP packets sent with a
//! second-chance candidate ([`candidates`](crate::candidates)).
//!
//! Why a program of its own: the verifier allows 512 bytes of stack for a whole chain of
//! BPF function calls, and the fast path's frame already takes about 400, so these
//! paths, which need a few hundred bytes of their own, cannot be functions called from
//! it. A tail call replaces the frame instead. `lb_xdp` notes the work in `RARE_WORK`
//! (per CPU: the tail call runs at once on the same CPU) and tail-calls `RARE_PROGS[0]`,
//! which userspace fills when it loads the object; the fast path pays nothing for it.
//! `lb_xdp_rare` parses the frame again (parsing is pure), does the work, puts the VLAN
//! tag back and counts the verdict, as `lb_xdp` would have. If the tail call fails (an
//! object loaded without filling `RARE_PROGS`), `lb_xdp` gives the fallback verdict the
//! work names: what the program did before these paths existed.

use aya_ebpf::{bindings::xdp_action, macros::xdp, programs::XdpContext};
use lb_common::{
    maps::RARE_SLOT,
    stats::{REASON_COUNT, Reason},
    types::CONFIG_VALID,
};

use crate::{
    candidates, frag, icmp,
    maps::{CONFIG, RARE_PROGS, RARE_WORK},
    parse::{self, Parse},
    records::{RareWork, WORK_CANDIDATE, WORK_FRAGMENT, WORK_ICMP, WORK_TOO_BIG},
    stats, too_big,
    vlan::{self, Tag},
};

/// Notes `work` for the rare program; returns `fallback`, the reason of the frame if
/// the program is missing.
#[inline(always)]
fn note(work: RareWork, fallback: Reason) -> Reason {
    if let Some(slot) = RARE_WORK.get_ptr_mut(0) {
        // SAFETY: per-CPU array element, used only by this CPU during this packet.
        unsafe { *slot = work };
    }
    fallback
}

/// Notes a later fragment for the rare program; without it the fragment is dropped as
/// before (the reason returned).
#[inline(always)]
pub(crate) fn fragment() -> Reason {
    note(
        RareWork {
            kind: WORK_FRAGMENT,
            ..RareWork::default()
        },
        Reason::DropFragment,
    )
}

/// Notes an ICMP message for the rare program; without it the message passes as before
/// (the reason returned).
#[inline(always)]
pub(crate) fn icmp() -> Reason {
    note(
        RareWork {
            kind: WORK_ICMP,
            ..RareWork::default()
        },
        Reason::PassNonVip,
    )
}

/// Notes a packet too big (family, outer header, IP length) for the rare program;
/// without it the packet is dropped as before (the reason returned).
#[inline(always)]
pub(crate) fn too_big(v4: bool, overhead: u32, l3_len: u32) -> Reason {
    note(
        RareWork {
            kind: WORK_TOO_BIG,
            tag: 0,
            v4: u32::from(v4),
            overhead,
            l3_len,
        },
        Reason::DropTooBig,
    )
}

/// Notes a VIP packet to send with a second-chance candidate (`work`, from
/// [`candidates::work`]); without the rare program it is dropped (`drop_bad_config`:
/// the object is incomplete).
#[inline(always)]
pub(crate) fn candidate(work: RareWork) -> Reason {
    note(work, Reason::DropBadConfig)
}

/// Tail-calls the rare program with the frame's VLAN tag; returns the fallback verdict
/// if that fails.
#[inline(always)]
pub(crate) fn hand_over(ctx: &XdpContext, tag: Tag, fallback: Reason) -> (u32, Reason) {
    if let Some(slot) = RARE_WORK.get_ptr_mut(0) {
        // SAFETY: as in `note`.
        unsafe {
            (*slot).tag = tag.to_word();
        }
        // SAFETY: the context is this program's; a successful tail call does not
        // return.
        unsafe { RARE_PROGS.tail_call(ctx, RARE_SLOT) };
    }
    (fallback.action(), fallback)
}

/// The rare paths.
#[xdp]
fn lb_xdp_rare(ctx: XdpContext) -> u32 {
    // SAFETY: per-CPU array element written by `lb_xdp` just before the tail call.
    let work = RARE_WORK
        .get_ptr(0)
        .map(|w| unsafe { *w })
        .unwrap_or_default();
    let verdict = run(&ctx, &work);
    let (action, reason) = vlan::restore(&ctx, Tag::from_word(work.tag), verdict);
    stats::count_index(reason as u32);
    action
}

/// A later fragment, parsed again, in a BPF function of its own (each kind of work has
/// the stack to itself).
#[inline(never)]
fn fragment_work(ctx: &XdpContext) -> u32 {
    let (_, reason) = match parse::parse(ctx) {
        Parse::Fragment(at) => frag::follow(ctx, &at),
        _ => (xdp_action::XDP_DROP, Reason::DropBadConfig),
    };
    reason as u32
}

/// An ICMP message, parsed again, in a BPF function of its own.
#[inline(never)]
fn icmp_work(ctx: &XdpContext) -> u32 {
    let (_, reason) = match parse::parse(ctx) {
        Parse::Icmp(at) => icmp::process(ctx, &at),
        _ => (xdp_action::XDP_DROP, Reason::DropBadConfig),
    };
    reason as u32
}

/// The too-big answer, in a BPF function of its own (its stack is not the other
/// paths').
#[inline(never)]
fn too_big_answer(ctx: &XdpContext, work: &RareWork) -> u32 {
    let Some(cfg) = CONFIG.get(0).filter(|cfg| cfg.flags & CONFIG_VALID != 0) else {
        return Reason::DropBadConfig as u32;
    };
    let (_, reason) = too_big::answer(ctx, cfg, work.v4 != 0, work.overhead, work.l3_len);
    reason as u32
}

/// A packet with a second-chance candidate ([`candidates::send`]), in a BPF function
/// of its own; too big once encapsulated, it is answered as [`WORK_TOO_BIG`] work,
/// which `send` noted in `RARE_WORK` (read in place, not copied to the stack).
#[inline(never)]
fn candidate_work(ctx: &XdpContext, work: &RareWork) -> u32 {
    let reason = candidates::send(ctx, work);
    if reason != Reason::DropTooBig as u32 {
        return reason;
    }
    match RARE_WORK.get_ptr(0) {
        // SAFETY: per-CPU array element, rewritten by `send` on this CPU just now.
        Some(again) => too_big_answer(ctx, unsafe { &*again }),
        None => reason,
    }
}

#[inline(always)]
fn run(ctx: &XdpContext, work: &RareWork) -> (u32, Reason) {
    let reason = match work.kind {
        WORK_FRAGMENT => fragment_work(ctx),
        WORK_ICMP => icmp_work(ctx),
        WORK_TOO_BIG => too_big_answer(ctx, work),
        WORK_CANDIDATE => candidate_work(ctx, work),
        _ => Reason::DropBadConfig as u32,
    };
    let reason = reason_of(reason);
    (reason.action(), reason)
}

/// The reason a BPF function returned as its index.
///
/// The functions below return a `u32`, not a verdict pair: a pair is returned through
/// the caller's stack, and the verifier refuses a function whose return register holds
/// a stack pointer. The action follows from the reason ([`Reason::action`]; for a
/// redirect `bpf_redirect` with flags 0 answers `XDP_REDIRECT`, the same).
#[inline(always)]
fn reason_of(index: u32) -> Reason {
    if index as usize >= REASON_COUNT {
        return Reason::DropBadConfig;
    }
    // SAFETY: `Reason` is `repr(u32)` with the discriminants 0..REASON_COUNT, and the
    // index is below REASON_COUNT.
    unsafe { core::mem::transmute::<u32, Reason>(index) }
}
