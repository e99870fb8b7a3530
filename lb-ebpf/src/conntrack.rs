// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The conntrack maps (`CONNTRACK_V4`, `CONNTRACK_V6`): looking a flow up and pinning
//! it to a backend, and the clock their entries are stamped with (and the daemon's tick
//! of it, `ACTIVITY_TICK`, for the activity of established flows).
//!
//! An entry maps a flow's 5-tuple to its backend (`lb_common::types::CtEntry`). IPv4
//! flows have their own map with a 16-byte key, because the kernel hashes the whole key
//! on every lookup. The fast path's exceptions (`EXCEPTIONS`, rule M3 of
//! `lb_common::fastpath`) hold the same entries for both families in a map that never
//! evicts: a dirty slot's packet reads them first ([`lookup_fast`]).

#![expect(
    clippy::needless_borrows_for_generic_args,
    reason = "keys go to map helpers by reference, as values do: a key passed by value \
              would make another stack copy in the BPF program"
)]

use aya_ebpf::{cty::c_int, helpers::generated::bpf_ktime_get_coarse_ns};
use lb_common::types::{CT_OPEN, CtEntry, FAMILY_V4, FlowKey, ct_ticks};

use crate::{
    backend::{self, Choice},
    maps::{ACTIVITY_TICK, CONNTRACK_V4, CONNTRACK_V6, EXCEPTIONS},
    parse::Parsed,
};

/// `BPF_ANY`: create or replace.
const BPF_ANY: u64 = 0;
/// `BPF_NOEXIST`: create only.
const BPF_NOEXIST: u64 = 1;
/// `-EEXIST`, the helper's answer to a `BPF_NOEXIST` insert of an existing key.
const NEG_EEXIST: c_int = -17;

/// The pin of the packet's flow, from one lookup shared by both paths.
pub(crate) type CtHit = Option<*mut CtEntry>;

/// The time pins and held SYNs are stamped with:
/// `bpf_ktime_get_coarse_ns()` (CLOCK_MONOTONIC_COARSE, ns).
#[inline(always)]
pub(crate) fn now_coarse_ns() -> u64 {
    // SAFETY: bpf_ktime_get_coarse_ns takes no arguments and cannot fail.
    unsafe { bpf_ktime_get_coarse_ns() }
}

/// Notes packet `p` in its flow's pin, for the live connection counts: the tick it was
/// seen in (written only when the tick changed, about once a second for a busy flow)
/// and, for a FIN or RST from the client, that the connection is closing. The tick is
/// that of `now_ns` on the conntrack clock when the caller read it (not 0: a UDP pin's
/// idle check does), else the daemon's (`ACTIVITY_TICK`), else the clock's.
#[inline(always)]
pub(crate) fn note_activity(entry: &mut CtEntry, p: &Parsed, now_ns: u64) {
    let ticks = if now_ns != 0 {
        ct_ticks(now_ns)
    } else {
        match ACTIVITY_TICK.get(0) {
            Some(&tick) if tick != 0 => tick,
            _ => ct_ticks(now_coarse_ns()),
        }
    };
    if entry.seen_ticks != ticks {
        entry.seen_ticks = ticks;
    }
    let closing = p.closing();
    if closing != CT_OPEN {
        entry.closing = closing;
    }
}

/// Looks flow `key` up in its family's conntrack map.
#[inline(always)]
pub(crate) fn lookup_flow(key: &FlowKey) -> CtHit {
    if key.vip.family == FAMILY_V4 {
        CONNTRACK_V4.get_ptr_mut(&key.v4())
    } else {
        CONNTRACK_V6.get_ptr_mut(key)
    }
}

/// Looks flow `key` up on a fast-path VIP's dirty slot: its exception (`EXCEPTIONS`)
/// first, else its conntrack pin. A flow has at most one of them: a pin written to one
/// map replaces the flow's pin in the other ([`pin_exception`], [`forget_exception`]).
#[inline(always)]
pub(crate) fn lookup_fast(key: &FlowKey) -> CtHit {
    match EXCEPTIONS.get_ptr_mut(key) {
        Some(entry) => Some(entry),
        None => lookup_flow(key),
    }
}

/// Deletes flow `key`'s exception, if any: a pin replacing it went to conntrack.
#[inline(always)]
pub(crate) fn forget_exception(key: &FlowKey) {
    let _ = EXCEPTIONS.remove(key);
}

/// Deletes flow `key`'s pin from its family's conntrack map, if any: a pin replacing it
/// went to `EXCEPTIONS`.
#[inline(always)]
fn forget_flow(key: &FlowKey) {
    let _ = if key.vip.family == FAMILY_V4 {
        CONNTRACK_V4.remove(&key.v4())
    } else {
        CONNTRACK_V6.remove(key)
    };
}

/// Pins flow `key` with `entry` (its backend: `choice`) in `EXCEPTIONS`, as
/// [`pin_flow`] does in conntrack: replacing the flow's pin (`replace`; then its
/// conntrack pin, if any, is deleted), or creating one unless another CPU made one
/// since the lookup (that pin wins). `None` when the map refused the insert: it is full
/// (it never evicts; residual R2) or out of memory.
#[inline(always)]
pub(crate) fn pin_exception(
    key: &FlowKey,
    entry: &CtEntry,
    choice: Choice,
    replace: bool,
) -> Option<(bool, Choice)> {
    let flags = if replace { BPF_ANY } else { BPF_NOEXIST };
    match EXCEPTIONS.insert(key, entry, flags) {
        Ok(()) => {
            if replace {
                forget_flow(key);
            }
            Some((true, choice))
        }
        Err(NEG_EEXIST) => {
            let winner = EXCEPTIONS
                .get_ptr(key)
                // SAFETY: the pointer comes from a successful lookup; the id is copied.
                .map(|e| unsafe { (*e).backend_id })
                .and_then(backend::keeps_flows);
            Some((false, winner.unwrap_or(choice)))
        }
        Err(_) => None,
    }
}

/// Records flow `key` in its family's conntrack map with update `flags`. LRU maps evict
/// instead of refusing inserts; an error (allocation failure) only loses the pin, never
/// the packet.
#[inline(always)]
fn record_flow(key: &FlowKey, entry: &CtEntry, flags: u64) -> Result<(), c_int> {
    if key.vip.family == FAMILY_V4 {
        CONNTRACK_V4.insert(&key.v4(), entry, flags)
    } else {
        CONNTRACK_V6.insert(key, entry, flags)
    }
}

/// Pins flow `key` with `entry` (its backend: `choice`): replaces the flow's entry
/// (`replace`), or creates one unless another CPU pinned the flow since the lookup, in
/// which case that pin wins (two packets of one flow never go to two backends because
/// they raced). Returns whether `entry` was recorded, and the backend to use.
#[inline(always)]
pub(crate) fn pin_flow(
    key: &FlowKey,
    entry: &CtEntry,
    choice: Choice,
    replace: bool,
) -> (bool, Choice) {
    let flags = if replace { BPF_ANY } else { BPF_NOEXIST };
    match record_flow(key, entry, flags) {
        Ok(()) => (true, choice),
        Err(NEG_EEXIST) => {
            let winner = lookup_flow(key)
                // SAFETY: the pointer comes from a successful lookup; the id is copied.
                .map(|e| unsafe { (*e).backend_id })
                .and_then(backend::keeps_flows);
            (false, winner.unwrap_or(choice))
        }
        Err(_) => (false, choice),
    }
}
