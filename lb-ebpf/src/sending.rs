// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Sending a VIP packet to its backend: encapsulation, the counters of the packet and
//! its backend, the record of a first fragment's backend, and the hand-over of a packet
//! too big to the rare paths ([`send`]).
//!
//! The packets the table or a held SYN decides (new flows, misses) are sent by a global
//! BPF function, [`lb_forward`] (exported by the linker, `build.rs`): the verifier
//! checks it once, for any packet and backend, instead of once for every way a path
//! reaches it (about 200 of them, each the whole encapsulation: half of `lb_xdp`'s
//! count). It looks up again what a global function cannot take as an argument (the
//! configuration, the backend and the VIP's counters, by id) and returns what is left
//! to do as one word ([`Outcome`]). The established flows and the clean slots, the fast
//! paths, send inline.

use aya_ebpf::{bindings::xdp_md, programs::XdpContext};
use lb_common::{
    maps::MAX_VIPS,
    stats::{REASON_COUNT, Reason, VipStats},
    types::{BackendEntry, CONFIG_VALID, FAMILY_V4, LbConfig},
};

use crate::{
    Processed,
    backend::Choice,
    forward::{self, NextHop},
    frag, full_path, hashes,
    maps::{BACKENDS, CONFIG},
    packet,
    parse::Parsed,
    rare, stats, verdict,
};

/// What [`send`] needs besides the packet and its backend.
pub(crate) struct Sending {
    /// The packet's VIP.
    pub(crate) vip_id: u32,
    /// Its frame length.
    pub(crate) bytes: u64,
    /// The table gave the flow its backend (counted per backend).
    pub(crate) new_flow: bool,
}

/// Encapsulates and sends a VIP packet to `choice`, counting it (and a new flow of the
/// backend); with `FULL`, records a first fragment's backend; hands a packet too big
/// for the MTU to the rare paths, which answer it.
#[inline(always)]
pub(crate) fn send<const FULL: bool>(
    ctx: &XdpContext,
    parsed: &Parsed,
    choice: Choice,
    cfg: &LbConfig,
    vip_stats: &mut VipStats,
    sending: &Sending,
) -> Processed {
    send_as(ctx, parsed, choice, cfg, vip_stats, sending, FULL)
}

/// [`send`], in `lb_xdp_full` when `full`.
#[inline(always)]
fn send_as(
    ctx: &XdpContext,
    parsed: &Parsed,
    choice: Choice,
    cfg: &LbConfig,
    vip_stats: &mut VipStats,
    sending: &Sending,
    full: bool,
) -> Processed {
    match forward::encapsulate(ctx, parsed, choice.id, choice.backend, cfg, None) {
        Ok(sent) => sent_to(parsed, choice.id, cfg, sending, full, &sent),
        Err(reason) => failed(parsed, choice.backend, vip_stats, reason),
    }
}

/// Counts a packet sent to backend `id` (and, when `full`, records a first fragment's
/// backend).
#[inline(always)]
fn sent_to(
    parsed: &Parsed,
    id: u32,
    cfg: &LbConfig,
    sending: &Sending,
    full: bool,
    sent: &forward::Sent,
) -> Processed {
    stats::backend(id, sending.bytes, sending.new_flow);
    if full && let Some(tag) = full_path::first_fragment() {
        let hash = hashes::flow_hash(&parsed.key, cfg.hash_seed);
        frag::record(&parsed.key, &tag, id, sending.vip_id, hash);
    }
    Processed::Pending((sent.action, sent.reason))
}

/// A packet not sent to `backend` for `reason`, counted as a drop of its VIP: a packet
/// too big goes to the rare paths, which answer it.
#[inline(always)]
fn failed(
    parsed: &Parsed,
    backend: &BackendEntry,
    vip_stats: &mut VipStats,
    reason: Reason,
) -> Processed {
    vip_stats.drops += 1;
    if reason == Reason::DropTooBig {
        return Processed::Rare(rare::too_big(
            parsed.key.vip.family == FAMILY_V4,
            forward::overhead(backend),
            parsed.l3_len,
        ));
    }
    Processed::Pending(verdict(reason))
}

/// [`send`] through [`lb_forward`]: the same for the packet, one call for the verifier.
/// The checks and the next hop come first, here ([`forward::route`]): the FIB's
/// function, called from `lb_forward`, would make the chain of stack frames too deep.
#[inline(always)]
pub(crate) fn send_out_of_line(
    ctx: &XdpContext,
    parsed: &Parsed,
    choice: Choice,
    cfg: &LbConfig,
    vip_stats: &mut VipStats,
    sending: &Sending,
) -> Processed {
    let hop = match forward::route::<false>(ctx, parsed, choice.id, choice.backend, cfg) {
        Ok(hop) => hop,
        Err(reason) => return failed(parsed, choice.backend, vip_stats, reason),
    };
    let flags = if sending.new_flow { ARG_NEW_FLOW } else { 0 };
    let word = sending.vip_id | flags << ARG_FLAGS_SHIFT;
    Outcome(lb_forward(ctx.ctx, parsed, &hop, choice.id, word)).processed()
}

/// Where [`lb_forward`]'s flags start in its last argument, above the VIP id (below
/// `MAX_VIPS`).
const ARG_FLAGS_SHIFT: u32 = 16;
const _: () = assert!(MAX_VIPS <= 1 << ARG_FLAGS_SHIFT);
/// [`lb_forward`]'s flag: the packet counts as a new flow of its backend.
const ARG_NEW_FLOW: u32 = 1;
/// [`lb_forward`]'s flag: the caller is `lb_xdp_full` (a first fragment's backend is
/// recorded).
const ARG_FULL: u32 = 2;

/// The rest of [`send`] as a global BPF function, once [`forward::route`] checked the
/// packet and found the next hop `hop`: packet `parsed` of VIP `word & 0xffff` to backend
/// `backend_id`, with the flags [`ARG_NEW_FLOW`] and [`ARG_FULL`] above
/// [`ARG_FLAGS_SHIFT`]. The frame length is read again (the frame is unchanged until it
/// is encapsulated here). A configuration no longer valid, an id out of range, or a
/// null pointer give `drop_bad_config`.
#[unsafe(no_mangle)]
#[inline(never)]
pub(crate) extern "C" fn lb_forward(
    ctx: *mut xdp_md,
    parsed: *const Parsed,
    hop: *const NextHop,
    backend_id: u32,
    word: u32,
) -> u32 {
    let ctx = XdpContext::new(ctx);
    let vip_id = word & ((1 << ARG_FLAGS_SHIFT) - 1);
    let flags = word >> ARG_FLAGS_SHIFT;
    // SAFETY: the verifier checked that the non-null pointers point to readable values
    // of their types.
    let (parsed, hop) = unsafe { (parsed.as_ref(), hop.as_ref()) };
    let cfg = CONFIG.get(0).filter(|cfg| cfg.flags & CONFIG_VALID != 0);
    let (Some(parsed), Some(hop), Some(cfg), Some(backend), Some(vip_stats)) = (
        parsed,
        hop,
        cfg,
        BACKENDS.get(backend_id),
        stats::vip(vip_id),
    ) else {
        return Outcome::of(&Processed::Pending(verdict(Reason::DropBadConfig))).0;
    };
    let sending = Sending {
        vip_id,
        bytes: packet::frame_len(&ctx) as u64,
        new_flow: flags & ARG_NEW_FLOW != 0,
    };
    let full = flags & ARG_FULL != 0;
    let processed =
        match forward::push_outer::<false>(&ctx, parsed, backend, cfg, None, backend, hop) {
            Ok(sent) => sent_to(parsed, backend_id, cfg, &sending, full, &sent),
            Err(reason) => failed(parsed, backend, vip_stats, reason),
        };
    Outcome::of(&processed).0
}

/// What [`send`] leaves to do, as [`lb_forward`] returns it: the action in bits 0..8,
/// the reason's index in bits 8..16, and bit 16 set for work handed to the rare paths
/// ([`Processed::Rare`]; otherwise [`Processed::Pending`], the only two `send` gives).
struct Outcome(u32);

/// [`Outcome`]'s bit of [`Processed::Rare`].
const OUTCOME_RARE: u32 = 1 << 16;

impl Outcome {
    /// The word of `processed`.
    #[inline(always)]
    fn of(processed: &Processed) -> Self {
        Self(match *processed {
            Processed::Pending((action, reason)) => (action & 0xff) | (reason as u32) << 8,
            Processed::Rare(reason) => OUTCOME_RARE | (reason as u32) << 8,
            // Not returned by `send`.
            Processed::Done(_) | Processed::Full(_) => (Reason::DropBadConfig as u32) << 8,
        })
    }

    /// The `Processed` of the word; an index out of range reads as `drop_bad_config`.
    #[inline(always)]
    fn processed(&self) -> Processed {
        let index = ((self.0 >> 8) & 0xff) as usize;
        let reason = Reason::ALL
            .get(index)
            .copied()
            .unwrap_or(Reason::DropBadConfig);
        if self.0 & OUTCOME_RARE != 0 {
            Processed::Rare(reason)
        } else {
            Processed::Pending((self.0 & 0xff, reason))
        }
    }
}

// `Outcome` carries a reason as its index in `Reason::ALL`.
const _: () = {
    let mut i = 0;
    while i < REASON_COUNT {
        assert!(Reason::ALL[i] as usize == i);
        i += 1;
    }
};
