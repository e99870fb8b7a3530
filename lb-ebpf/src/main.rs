// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The XDP program of the load balancer.
//!
//! `lb_xdp` per packet:
//! 1. parse the headers ([`parse`]); a packet not for a VIP ([`vip`]) gets `XDP_PASS`,
//!    untouched;
//! 2. choose the backend ([`select`]): an established flow whose VIP still exists (for
//!    TCP: at the VIP's current table epoch) goes to its pinned backend without the VIP
//!    lookup; a TCP SYN takes the VIP's current table and is remembered in the SYN cache,
//!    without a conntrack lookup; any other packet takes the VIP lookup and the
//!    connection-tracking decision of `lb_common::conntrack`, over the maps of
//!    [`conntrack`], [`syn_cache`] and [`table`];
//! 3. encapsulate it in IP-in-IP and send it ([`forward`]).
//!
//! The object also holds `lb_probe_encap` ([`probe`]), the TC egress program that sends
//! tunnel-mode health probes through the same encapsulation, and `lb_trace` ([`trace`]),
//! the program the load balancer tail-calls for a packet `lb trace` selects.
//!
//! It always returns a verdict (never `XDP_ABORTED`) and counts its reason ([`stats`]);
//! nothing is logged per packet unless `lb trace` runs (while a trace client is
//! connected, the VIP packets its filter selects are logged with aya-log). Built with
//! the `test-harness` feature (for the tests and benchmarks only), the object also holds
//! `lb_empty`, `lb_xdp_untraced` and `lb_bench`, the benchmark harness (`bench`).
#![no_std]
#![no_main]

mod backend;
#[cfg(feature = "test-harness")]
mod bench;
mod conntrack;
mod forward;
mod headers;
mod maps;
mod packet;
mod parse;
mod probe;
mod select;
mod stats;
mod syn_cache;
mod table;
mod trace;
mod vip;

use aya_ebpf::{bindings::xdp_action, macros::xdp, programs::XdpContext};
use lb_common::{
    stats::{Reason, VipStats},
    trace::Path,
    types::{CONFIG_TRACE, CONFIG_VALID, LbConfig},
};
use parse::{Parse, Parsed};

/// The load balancer.
#[xdp]
fn lb_xdp(ctx: XdpContext) -> u32 {
    let (action, reason) = process::<true>(&ctx);
    stats::count(reason);
    // The upgrade tests' variant: the same verdict through one more stack round trip,
    // so its instructions (and the kernel's program tag) differ from the normal build's.
    #[cfg(feature = "upgrade-variant")]
    let action = core::hint::black_box(action);
    action
}

/// The load balancer built without packet tracing: the benchmark's reference for what
/// tracing costs while it is off (`test-harness` builds only).
#[cfg(feature = "test-harness")]
#[xdp]
fn lb_xdp_untraced(ctx: XdpContext) -> u32 {
    let (action, reason) = process::<false>(&ctx);
    stats::count(reason);
    action
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

/// Parses the packet, passes what is not for a VIP, and hands the rest to
/// [`vip_packet`]; with `TRACE`, a VIP packet is logged while `CONFIG_TRACE` is set
/// ([`trace`]): the only test tracing adds to the packet path.
#[inline(always)]
fn process<const TRACE: bool>(ctx: &XdpContext) -> (u32, Reason) {
    let parsed = match parse::parse(ctx) {
        Parse::Packet(parsed) => parsed,
        Parse::Verdict(reason) => return verdict(reason),
        Parse::Fragment(key) if vip::is_vip_address(&key) => {
            return verdict(Reason::DropFragment);
        }
        Parse::TruncatedL4(key) if vip::is_vip_address(&key) => {
            return verdict(Reason::DropMalformedL4);
        }
        Parse::Fragment(_) | Parse::TruncatedL4(_) => return verdict(Reason::PassNonVip),
    };
    if !vip::maybe_vip(&parsed.key.vip) {
        return verdict(Reason::PassNonVip);
    }
    let cfg = maps::CONFIG
        .get(0)
        .filter(|cfg| cfg.flags & CONFIG_VALID != 0);
    let mut traced = trace::Decision::none();
    let (action, reason) = vip_packet(ctx, &parsed, cfg, &mut traced);
    if TRACE && cfg.is_some_and(|cfg| cfg.flags & CONFIG_TRACE != 0) && reason != Reason::PassNonVip
    {
        trace::hand_over(ctx, &parsed, &traced, action, reason);
    }
    (action, reason)
}

/// Chooses the backend of a packet that may be for a VIP and forwards it; `traced`
/// receives the decision.
#[inline(always)]
fn vip_packet(
    ctx: &XdpContext,
    parsed: &Parsed,
    cfg: Option<&LbConfig>,
    traced: &mut trace::Decision,
) -> (u32, Reason) {
    let bytes = packet::frame_len(ctx) as u64;
    // A SYN opens a connection: no conntrack lookup (see `select`).
    let syn = parsed.is_syn();
    let ct = if syn {
        None
    } else {
        conntrack::lookup_flow(&parsed.key)
    };
    // Established flows: no VIPS lookup.
    if let Some(cfg) = cfg
        && let Some((vip_id, choice)) = select::established(parsed, ct, cfg)
        && let Some(vip_stats) = stats::vip(vip_id)
    {
        vip_stats.packets += 1;
        vip_stats.bytes += bytes;
        vip_stats.ct_hits += 1;
        traced.set(Path::CtFast, choice.id);
        return send(ctx, parsed, choice, cfg, vip_stats, bytes, false);
    }
    let Some(vip) = vip::find_vip(&parsed.key.vip) else {
        return verdict(Reason::PassNonVip);
    };
    let Some(vip_stats) = stats::vip(vip.vip_id) else {
        return verdict(Reason::DropBadConfig);
    };
    vip_stats.packets += 1;
    vip_stats.bytes += bytes;
    let Some(cfg) = cfg else {
        vip_stats.drops += 1;
        return verdict(Reason::DropBadConfig);
    };
    let picked = if syn {
        select::pick_syn(parsed, &vip, cfg, vip_stats, traced)
    } else {
        select::pick_backend(parsed, &vip, cfg, vip_stats, ct, traced)
    };
    match picked {
        Ok(choice) => {
            traced.backend = choice.id;
            send(ctx, parsed, choice, cfg, vip_stats, bytes, traced.new_flow)
        }
        Err(reason) => {
            vip_stats.drops += 1;
            verdict(reason)
        }
    }
}

/// Encapsulates and sends a VIP packet to `choice`, counting it (and a new flow of the
/// backend when `new_flow`).
#[inline(always)]
fn send(
    ctx: &XdpContext,
    parsed: &Parsed,
    choice: backend::Choice,
    cfg: &LbConfig,
    vip_stats: &mut VipStats,
    bytes: u64,
    new_flow: bool,
) -> (u32, Reason) {
    match forward::encapsulate(ctx, parsed, choice.id, choice.backend, cfg) {
        Ok(sent) => {
            stats::backend(choice.id, bytes, new_flow);
            (sent.action, sent.reason)
        }
        Err(reason) => {
            vip_stats.drops += 1;
            verdict(reason)
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
