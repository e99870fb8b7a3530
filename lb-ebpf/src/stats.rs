// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Counters: the per-CPU global verdict reasons, per-VIP and per-backend statistics.

use lb_common::stats::{Reason, VipStats};

use crate::maps::{BACKEND_STATS, GLOBAL_STATS, VIP_STATS};

/// Counts one packet under `reason`.
#[inline(always)]
pub(crate) fn count(reason: Reason) {
    count_index(reason as usize);
}

/// [`count`] for a reason that a BPF function returned (the rare paths): the index is
/// read back through a volatile load. LLVM knows a `Reason` is below `REASON_COUNT` and
/// would drop the bounds check, but a value returned by a BPF function (through its
/// stack) reaches the verifier as an unknown number. The fast path's reasons are
/// constants the verifier sees, and pay no stack round trip.
#[inline(always)]
pub(crate) fn count_returned(reason: Reason) {
    let index = reason as usize;
    // SAFETY: a read of a local.
    count_index(unsafe { core::ptr::read_volatile(&raw const index) });
}

#[inline(always)]
fn count_index(index: usize) {
    if let Some(stats) = GLOBAL_STATS.get_ptr_mut(0) {
        // SAFETY: per-CPU array element, used only by this CPU during this run.
        let stats = unsafe { &mut *stats };
        if let Some(counter) = stats.counters.get_mut(index) {
            *counter += 1;
        }
    }
}

/// The per-CPU statistics of VIP `vip_id`.
#[inline(always)]
pub(crate) fn vip(vip_id: u32) -> Option<&'static mut VipStats> {
    // SAFETY: per-CPU array element, used only by this CPU during this run.
    VIP_STATS.get_ptr_mut(vip_id).map(|s| unsafe { &mut *s })
}

/// Counts a forwarded packet of `bytes` bytes for backend `id`.
#[inline(always)]
pub(crate) fn backend(id: u32, bytes: u64) {
    if let Some(stats) = BACKEND_STATS.get_ptr_mut(id) {
        // SAFETY: per-CPU array element, used only by this CPU during this run.
        let stats = unsafe { &mut *stats };
        stats.packets += 1;
        stats.bytes += bytes;
    }
}
