// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Packet tracing (`lb trace`): while `CONFIG_TRACE` is set in the configuration, every
//! VIP packet that matches `TRACE_FILTER` (`lb_common::trace::TraceFilter::matches`) is
//! logged with aya-log: one record with the VIP, the client, the TCP flags, which state
//! chose the backend ([`Path`]), the backend id, the table slot and the verdict reason.
//!
//! Off, tracing costs `lb_xdp` one test of a flag in the configuration it has already
//! loaded. On, `lb_xdp` hands every VIP packet to `lb_xdp_full`
//! (`full_path::hand_over_traced`), which carries the hook: it keeps a [`Decision`],
//! writes the packet to `TRACE_PACKET` and tail-calls `lb_trace`. That program applies
//! the filter and logs a selected packet with a stack of its own (the load balancer's
//! leaves too little for aya-log's record), counts the packet's verdict reason and
//! returns its action. A hook in `lb_xdp` would cost its verifier bill about 9,000
//! instructions: the verifier walks the hook once for each exit state.
//!
//! `lb_trace` reads the filter and the table slot, not the packet path, which the
//! verifier walks once per state. Record text, in one line (the daemon's reader,
//! `lb_dataplane::kernel::trace`, decodes exactly this):
//!
//! `lb-trace vip=ADDR:PORT/PROTO client=ADDR:PORT flags=F via=P backend=B slot=S reason=R`
//!
//! with IPv6 addresses in brackets, PROTO the IP protocol number, F the TCP flags byte
//! (0 for UDP), P a `Path` code, B a backend id (0: none), S the table slot
//! (`u32::MAX` when no table slot was read) and R a `Reason` index.

use aya_ebpf::{bindings::xdp_action, macros::xdp, programs::XdpContext};
use aya_log_ebpf::info;
use lb_common::{
    stats::Reason,
    trace::{NO_SLOT, Path, TracedPacket},
    types::{FAMILY_V4, FlowKey},
};

use crate::{
    maps::{CONFIG, TRACE_FILTER, TRACE_PACKET, TRACE_PROGS},
    parse::Parsed,
    stats, vip,
};

/// What the packet path decided, for the trace record.
#[derive(Clone, Copy)]
pub(crate) struct Decision {
    /// Which state chose ([`Path`] code).
    pub(crate) path: u8,
    /// The chosen backend's id (0: none).
    pub(crate) backend: u32,
    /// Whether the table gave the flow its backend (a new flow; also counted per
    /// backend).
    pub(crate) new_flow: bool,
}

impl Decision {
    /// Nothing decided yet.
    #[inline(always)]
    pub(crate) const fn none() -> Self {
        Self {
            path: Path::None as u8,
            backend: 0,
            new_flow: false,
        }
    }

    /// `path` chose backend `backend` (0: none).
    #[inline(always)]
    pub(crate) fn set(&mut self, path: Path, backend: u32) {
        self.path = path as u8;
        self.backend = backend;
    }
}

/// Hands packet `p`, its decision `d` and its verdict (`action`, `reason`) to the trace
/// program: writes `TRACE_PACKET` and tail-calls `lb_trace`, which applies the filter,
/// logs, counts the reason and returns the action. Returns (and the caller goes on as
/// untraced) only when the tail call fails. Called only while `CONFIG_TRACE` is set, for
/// packets whose VIP was found; kept this small because the verifier walks it once for
/// every state of the packet path that reaches it.
#[inline(always)]
pub(crate) fn hand_over(ctx: &XdpContext, p: &Parsed, d: &Decision, action: u32, reason: Reason) {
    let Some(out) = TRACE_PACKET.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: per-CPU array element, used only by this CPU during this run and the
    // program it tail-calls.
    unsafe {
        *out = TracedPacket {
            key: p.key,
            tcp_flags: p.tcp_flags,
            path: d.path,
            _pad: [0; 2],
            backend_id: d.backend,
            slot: NO_SLOT,
            reason: reason as u32,
            action,
            _pad2: 0,
        };
    }
    // SAFETY: tail_call replaces this program on success and returns on failure.
    unsafe { TRACE_PROGS.tail_call(ctx, 0) };
}

/// The trace program: logs the packet in `TRACE_PACKET` if `TRACE_FILTER` selects it,
/// counts its verdict reason (the load balancer did not) and returns its action.
#[xdp]
fn lb_trace(ctx: XdpContext) -> u32 {
    let Some(t) = TRACE_PACKET.get_ptr_mut(0) else {
        // Unreachable: the array has its element. Pass rather than abort.
        return xdp_action::XDP_PASS;
    };
    // SAFETY: per-CPU array element, written by the load balancer on this CPU.
    let t = unsafe { &mut *t };
    let selected = TRACE_FILTER.get(0).is_some_and(|f| f.matches(&t.key));
    if selected {
        if Path::from_code(t.path).is_some_and(Path::reads_table) {
            t.slot = table_slot(&t.key);
        }
        log(&ctx, t);
    }
    stats::count_index(t.reason);
    t.action
}

/// One aya-log record for `t` (format in the module documentation).
#[inline(always)]
fn log(ctx: &XdpContext, t: &TracedPacket) {
    let k = &t.key;
    let (vport, sport) = (u16::from_be(k.vip.port), u16::from_be(k.sport));
    let (proto, flags, path, backend, slot, reason) = (
        k.vip.proto,
        t.tcp_flags,
        t.path,
        t.backend_id,
        t.slot,
        t.reason,
    );
    if k.vip.family == FAMILY_V4 {
        let vip = [k.vip.addr[0], k.vip.addr[1], k.vip.addr[2], k.vip.addr[3]];
        let src = [k.src[0], k.src[1], k.src[2], k.src[3]];
        info!(
            ctx,
            "lb-trace vip={:i}:{}/{} client={:i}:{} flags={} via={} backend={} slot={} reason={}",
            vip,
            vport,
            proto,
            src,
            sport,
            flags,
            path,
            backend,
            slot,
            reason
        );
    } else {
        let (vip, src) = (k.vip.addr, k.src);
        info!(
            ctx,
            "lb-trace vip=[{:i}]:{}/{} client=[{:i}]:{} flags={} via={} backend={} slot={} reason={}",
            vip,
            vport,
            proto,
            src,
            sport,
            flags,
            path,
            backend,
            slot,
            reason
        );
    }
}

/// The slot `table_hash % M` of flow `key`'s VIP's live table (read again: only traced
/// packets pay for it), or [`NO_SLOT`].
#[inline(always)]
fn table_slot(key: &FlowKey) -> u32 {
    let Some(cfg) = CONFIG.get(0) else {
        return NO_SLOT;
    };
    let Some(vip) = vip::find_vip(&key.vip) else {
        return NO_SLOT;
    };
    crate::table::live_size(&vip).map_or(NO_SLOT, |size| {
        crate::hashes::table_hash(key, vip.flags, cfg.hash_seed) % size
    })
}
