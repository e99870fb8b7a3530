// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The XDP program of the load balancer.
//!
//! `lb_xdp` per packet (a VLAN-tagged frame or a first fragment goes to `lb_xdp_full`
//! by tail call, [`full_path`], which does the same with the tag and the fragment):
//! 1. strip a single 802.1Q tag (`lb_xdp_full` only: [`vlan`]; put back on the way
//!    out), parse the headers ([`parse`]); a packet not for a VIP ([`vip`]) gets
//!    `XDP_PASS`, untouched;
//! 2. refuse clients outside the VIP's allowed source prefixes, if the configuration
//!    has any ([`source`]);
//! 3. choose the backend ([`select`]): an established flow whose VIP still exists (for
//!    TCP: at the VIP's current table epoch) goes to its pinned backend without the VIP
//!    lookup; a TCP SYN follows its connection if it is a duplicate or a retransmission,
//!    else takes the VIP's current table and is remembered in the SYN cache; any other
//!    packet takes the VIP lookup and the
//!    connection-tracking decision of `lb_common::conntrack`, over the maps of
//!    [`conntrack`], [`syn_cache`] and [`table`]. A packet that would make a new pin
//!    beyond the CPU's rate of new pins goes to the same backend without it
//!    ([`new_pin_rate`]);
//! 4. encapsulate it in IP-in-IP and send it ([`forward`]); a packet too big once
//!    encapsulated is answered with ICMP ([`too_big`]); a first fragment's backend is
//!    recorded (`lb_xdp_full` only: [`frag`]).
//!
//! The rare paths run in a second program, `lb_xdp_rare`, reached by tail call
//! ([`rare`]): ICMP to VIP addresses (echo replies, errors forwarded to the flow's
//! backend: [`icmp`], [`icmp_error`]), later IP fragments ([`frag`]) and the "too big"
//! answers ([`too_big`]), and a VIP packet sent with a second-chance candidate
//! ([`candidates`]). VLAN tags, the record of first fragments and the
//! source-prefix trie are small functions out of line (`#[inline(never)]`, not
//! `#[cold]`: LLVM puts cold functions in `.text.unlikely.`, and aya 0.14 relocates
//! calls into `.text` only, so a call there lands on the wrong instruction). The fast
//! paths pay a few compares for all of them.
//!
//! The object also holds `lb_agent` ([`agent`]), the backend agent's program (it
//! decapsulates on the backends and follows second-chance candidates), `lb_probe_encap`
//! ([`probe`]), the TC egress program that sends tunnel-mode health probes through the
//! same encapsulation, and `lb_trace` ([`trace`]), which logs a packet `lb trace`
//! selects. While a trace runs, `lb_xdp` hands VIP packets to `lb_xdp_full`, which
//! tail-calls `lb_trace` with its decision.
//!
//! It always returns a verdict (never `XDP_ABORTED`) and counts its reason ([`stats`]);
//! nothing is logged per packet unless `lb trace` runs (while a trace client is
//! connected, the VIP packets its filter selects are logged with aya-log). Built with
//! the `test-harness` feature (for the tests and benchmarks only), the object also holds
//! `lb_empty`, `lb_xdp_untraced` and `lb_bench`, the benchmark harness (`bench`).
#![no_std]
#![no_main]

mod affinity;
mod agent;
mod backend;
#[cfg(feature = "test-harness")]
mod bench;
mod candidates;
mod conntrack;
mod csum;
mod encap;
mod fast;
mod forward;
mod frag;
mod full_path;
mod hashes;
mod headers;
mod icmp;
mod icmp_error;
mod maps;
mod new_pin_rate;
mod packet;
mod parse;
mod probe;
mod rare;
mod ratelimit;
mod records;
mod select;
mod sending;
mod source;
mod stats;
mod syn_cache;
mod table;
mod table_seen;
mod too_big;
mod trace;
mod vip;
mod vlan;

use aya_ebpf::{bindings::xdp_action, macros::xdp, programs::XdpContext};
use lb_common::{
    stats::Reason,
    trace::Path,
    types::{CONFIG_SOURCE_RANGES, CONFIG_TRACE, CONFIG_VALID, LbConfig, VipEntry},
};
use parse::{Parse, Parsed};
use sending::{Sending, send};
use source::Source;

/// The load balancer.
#[xdp]
fn lb_xdp(ctx: XdpContext) -> u32 {
    let action = run::<true>(&ctx);
    // The upgrade tests' variant: the same verdict through one more stack round trip,
    // so its instructions (and the kernel's program tag) differ from the normal build's.
    #[cfg(feature = "upgrade-variant")]
    let action = core::hint::black_box(action);
    action
}

/// The load balancer for VLAN-tagged frames and first fragments, which `lb_xdp` hands
/// over by tail call (`full_path`).
#[xdp]
fn lb_xdp_full(ctx: XdpContext) -> u32 {
    run_full::<true>(&ctx)
}

/// The load balancer built without packet tracing: the benchmark's reference for what
/// tracing costs while it is off (`test-harness` builds only).
#[cfg(feature = "test-harness")]
#[xdp]
fn lb_xdp_untraced(ctx: XdpContext) -> u32 {
    run::<false>(&ctx)
}

/// One packet of `lb_xdp`: an untagged frame that is not a first fragment is processed
/// here, with no VLAN tag and no fragment to carry; a tagged frame or a first fragment
/// goes to `lb_xdp_full` (which counts it). Counts the reason; returns the action.
#[inline(always)]
fn run<const TRACE: bool>(ctx: &XdpContext) -> u32 {
    let (action, reason) = match process::<TRACE, false>(ctx) {
        Processed::Pending(verdict) | Processed::Done(verdict) => verdict,
        Processed::Rare(fallback) => rare::hand_over(ctx, vlan::Tag::None, fallback),
        Processed::Full(fallback) => full_path::hand_over(ctx, fallback),
    };
    stats::count(reason);
    action
}

/// One packet of `lb_xdp_full`: strips a VLAN tag, processes the packet, records a
/// first fragment, hands rare work over, puts the tag back and counts the reason;
/// returns the action. The tag and the fragment are carried in `full_path`'s per-CPU
/// record, out of the verifier's sight.
#[inline(always)]
fn run_full<const TRACE: bool>(ctx: &XdpContext) -> u32 {
    let tag = vlan::strip(ctx);
    let (action, reason) = if tag == vlan::Tag::Unsupported {
        verdict(Reason::PassVlan)
    } else {
        full_path::begin(tag);
        match process::<TRACE, true>(ctx) {
            Processed::Pending(verdict) => vlan::restore(ctx, full_path::tag(), verdict),
            Processed::Rare(fallback) => hand_over_tagged(ctx, full_path::tag(), fallback),
            Processed::Done(verdict) => verdict,
            // Not returned with `FULL`.
            Processed::Full(_) => verdict(Reason::DropBadConfig),
        }
    };
    stats::count(reason);
    action
}

/// What [`process`] leaves to do.
enum Processed {
    /// The verdict, before the VLAN tag is put back.
    Pending((u32, Reason)),
    /// Work for the rare paths, noted in `RARE_WORK` ([`rare`]) for `lb_xdp_rare`,
    /// which takes the frame over by tail call, with the reason to count if that
    /// program is missing (what was done before the rare paths existed).
    Rare(Reason),
    /// The verdict of a frame that is complete (its tag is back): a traced packet
    /// whose tail call to `lb_trace` failed.
    Done((u32, Reason)),
    /// A tagged frame or a first fragment, which `lb_xdp` leaves to `lb_xdp_full`
    /// (not with `FULL`), with the reason to count if that program is missing: what
    /// was done before tags and fragments were handled (`pass_vlan`, `drop_fragment`).
    Full(Reason),
}

/// Hands work over to the rare paths (`rare`) with the frame's VLAN tag. The rare
/// program puts the tag back itself; this returns only when the tail call fails, with
/// the fallback verdict for the frame as it came.
#[inline(always)]
fn hand_over_tagged(ctx: &XdpContext, tag: vlan::Tag, fallback: Reason) -> (u32, Reason) {
    vlan::restore(ctx, tag, rare::hand_over(ctx, tag, fallback))
}

// lb-common's action numbers are the kernel's.
const _: () = assert!(
    lb_common::stats::XDP_DROP == xdp_action::XDP_DROP
        && lb_common::stats::XDP_PASS == xdp_action::XDP_PASS
        && lb_common::stats::XDP_TX == xdp_action::XDP_TX
        && lb_common::stats::XDP_REDIRECT == xdp_action::XDP_REDIRECT
);

/// The verdict of a packet that is not forwarded: `reason` and its action
/// ([`Reason::action`], one exhaustive mapping in `lb-common`).
#[inline(always)]
fn verdict(reason: Reason) -> (u32, Reason) {
    (reason.action(), reason)
}

/// Parses the packet (untagged by now), passes what is not for a VIP, hands fragments
/// and ICMP to the rare paths, and the rest to [`vip_packet`]. With `TRACE`, while
/// `CONFIG_TRACE` is set, `lb_xdp` hands a VIP packet to `lb_xdp_full`
/// ([`full_path::hand_over_traced`]), which logs it ([`trace`]): its frame is
/// completed (the carried tag put back) before `lb_trace` takes over, which counts it
/// and returns its action. Work handed to the rare paths is not traced. Without `FULL` (in
/// `lb_xdp`) a tagged frame (which parses as `pass_vlan`: the EtherType dispatch tests
/// the tag only after IPv4 and IPv6) and a first fragment are left to `lb_xdp_full`
/// ([`Processed::Full`]); with it, the fragment's datagram is carried
/// ([`full_path::note_first_fragment`]).
#[inline(always)]
fn process<const TRACE: bool, const FULL: bool>(ctx: &XdpContext) -> Processed {
    let pending = |v| Processed::Pending(v);
    let parsed = match parse::parse(ctx) {
        Parse::Packet(parsed) => parsed,
        Parse::FirstFragment(parsed, frag) if FULL => {
            full_path::note_first_fragment(&frag);
            parsed
        }
        Parse::FirstFragment(..) => return Processed::Full(Reason::DropFragment),
        Parse::Verdict(Reason::PassVlan) if !FULL => return Processed::Full(Reason::PassVlan),
        Parse::Verdict(reason) => return pending(verdict(reason)),
        Parse::Fragment(_) => return Processed::Rare(rare::fragment()),
        Parse::Icmp(_) => return Processed::Rare(rare::icmp()),
        Parse::TruncatedL4(key) if vip::is_vip_address(&key) => {
            return pending(verdict(Reason::DropMalformedL4));
        }
        Parse::TruncatedL4(_) => return pending(verdict(Reason::PassNonVip)),
    };
    if !vip::maybe_vip(&parsed.key.vip) {
        return pending(verdict(Reason::PassNonVip));
    }
    let cfg = maps::CONFIG
        .get(0)
        .filter(|cfg| cfg.flags & CONFIG_VALID != 0);
    if TRACE && !FULL && tracing(cfg) {
        // Returns only if `lb_xdp_full` is missing: the packet goes on untraced.
        full_path::hand_over_traced(ctx);
    }
    // Before any conntrack work: a refused client creates and uses no state.
    if let Some(cfg) = cfg
        && cfg.flags & CONFIG_SOURCE_RANGES != 0
    {
        match source::check(&parsed.key) {
            Source::Allowed => {}
            Source::NotVip => return pending(verdict(Reason::PassNonVip)),
            Source::Refused => return pending(verdict(Reason::DropSourceRefused)),
        }
    }
    let mut traced = trace::Decision::none();
    let processed = vip_packet::<FULL>(ctx, &parsed, cfg, &mut traced);
    if TRACE
        && FULL
        && tracing(cfg)
        && let Processed::Pending(v) = processed
        && v.1 != Reason::PassNonVip
    {
        let tag = if FULL {
            full_path::tag()
        } else {
            vlan::Tag::None
        };
        let (action, reason) = vlan::restore(ctx, tag, v);
        trace::hand_over(ctx, &parsed, &traced, action, reason);
        return Processed::Done((action, reason));
    }
    processed
}

/// Whether `lb trace` runs (`CONFIG_TRACE` in a valid configuration).
#[inline(always)]
fn tracing(cfg: Option<&LbConfig>) -> bool {
    cfg.is_some_and(|cfg| cfg.flags & CONFIG_TRACE != 0)
}

/// Chooses the backend of a packet that may be for a VIP and forwards it; `traced`
/// receives the decision; with `FULL`, a first fragment's datagram is recorded.
#[inline(always)]
fn vip_packet<const FULL: bool>(
    ctx: &XdpContext,
    parsed: &Parsed,
    cfg: Option<&LbConfig>,
    traced: &mut trace::Decision,
) -> Processed {
    let pending = |v| Processed::Pending(v);
    let bytes = packet::frame_len(ctx) as u64;
    // A SYN looks conntrack up only shortly after its VIP's table changed (see `select`).
    let syn = parsed.is_syn();
    // The fast path (`fast`): a fast-path VIP's packet on a clean slot goes to the slot's
    // owner with no conntrack lookup and no write, a SYN too (rule T1).
    // The VIP entry when it was looked up for the fast path (a zeroed entry and `false`
    // otherwise: an `Option` would leave its payload uninitialised, and LLVM may spill
    // that from any register, which the verifier refuses to read).
    let mut fast_vip = (VipEntry::default(), false);
    if let Some(cfg) = cfg
        && let Some(bit) = fast::fast_bit(&parsed.key.vip)
        && let Some(vip) = vip::find_vip_cached(&parsed.key.vip, bit)
        && fast::is_fast(&vip)
    {
        if let Some(choice) = fast::clean_owner(
            &vip,
            hashes::table_hash_inlined(&parsed.key, vip.flags, cfg.hash_seed),
            syn,
        ) && let Some(vip_stats) = stats::vip(vip.vip_id)
        {
            vip_stats.packets += 1;
            vip_stats.bytes += bytes;
            vip_stats.clean_slot_hits += 1;
            vip_stats.new_flows += u64::from(syn);
            traced.set(Path::CleanSlot, choice.id);
            traced.new_flow = syn;
            let sending = Sending {
                vip_id: vip.vip_id,
                bytes,
                new_flow: syn,
            };
            return send::<FULL>(ctx, parsed, choice, cfg, vip_stats, &sending);
        }
        fast_vip = (vip, true);
    }
    let ct = if syn {
        None
    } else if fast_vip.1 {
        conntrack::lookup_fast(&parsed.key)
    } else {
        conntrack::lookup_flow(&parsed.key)
    };
    // Established flows: no VIPS lookup (a fast-path VIP's was looked up already).
    if let Some(cfg) = cfg
        && let Some((vip_id, choice)) = select::established(parsed, ct, cfg)
        && let Some(vip_stats) = stats::vip(vip_id)
    {
        vip_stats.packets += 1;
        vip_stats.bytes += bytes;
        vip_stats.ct_hits += 1;
        traced.set(Path::CtFast, choice.id);
        let sending = Sending {
            vip_id,
            bytes,
            new_flow: false,
        };
        return send::<FULL>(ctx, parsed, choice, cfg, vip_stats, &sending);
    }
    let found = if fast_vip.1 {
        Some(fast_vip.0)
    } else {
        vip::find_vip(&parsed.key.vip)
    };
    let Some(vip) = found else {
        return pending(verdict(Reason::PassNonVip));
    };
    let Some(vip_stats) = stats::vip(vip.vip_id) else {
        return pending(verdict(Reason::DropBadConfig));
    };
    vip_stats.packets += 1;
    vip_stats.bytes += bytes;
    let Some(cfg) = cfg else {
        vip_stats.drops += 1;
        return pending(verdict(Reason::DropBadConfig));
    };
    let mut unpinned = false;
    let mut candidate = 0;
    let picked = if syn {
        select::pick_syn(parsed, &vip, cfg, vip_stats, traced)
    } else {
        let out = select::Out {
            unpinned: &mut unpinned,
            candidate: &mut candidate,
        };
        select::pick_backend(parsed, &vip, cfg, vip_stats, ct, traced, out)
    };
    match picked {
        // A second-chance candidate (not for a first fragment, whose backend
        // `lb_xdp_full` records): the rare paths' program sends it.
        Ok(choice) if candidate != 0 && !(FULL && full_path::first_fragment().is_some()) => {
            Processed::Rare(rare::candidate(candidates::work(
                parsed, cfg, vip.vip_id, choice.id, candidate,
            )))
        }
        Ok(choice) => {
            traced.backend = choice.id;
            let sending = Sending {
                vip_id: vip.vip_id,
                bytes,
                new_flow: traced.new_flow,
            };
            // `lb_xdp_full` sends inline: its deeper frame leaves no room for
            // `lb_forward`'s and the flow hash's below it (512 bytes in all).
            let processed = if FULL {
                send::<FULL>(ctx, parsed, choice, cfg, vip_stats, &sending)
            } else {
                sending::send_out_of_line(ctx, parsed, choice, cfg, vip_stats, &sending)
            };
            match processed {
                Processed::Pending((action, reason)) if unpinned => {
                    pending((action, new_pin_rate::unpinned(reason)))
                }
                processed => processed,
            }
        }
        Err(reason) => {
            vip_stats.drops += 1;
            pending(verdict(reason))
        }
    }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
    loop {}
}

/// Program licence, read by the kernel to allow GPL-only helpers.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
