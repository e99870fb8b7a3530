// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Counters: the per-CPU global verdict reasons, per-VIP and per-backend statistics.

use lb_common::stats::{Reason, VipStats};

use crate::maps::{GLOBAL_STATS, VIP_STATS, backend_stats};

/// Counts one packet under `reason`.
#[inline(always)]
pub(crate) fn count(reason: Reason) {
    // Through the index: a reason may come back from a global BPF function
    // (`sending::lb_forward`), and then the verifier knows only its word's range, not
    // what LLVM knows of the enum.
    count_index(reason as u32);
}

/// Counts one packet under the reason of index `index` (a `Reason` as `u32`, handed
/// over by the load balancer to the trace program, or returned by a BPF function of the
/// rare paths); an index out of range counts nothing.
#[inline(always)]
pub(crate) fn count_index(index: u32) {
    if let Some(stats) = GLOBAL_STATS.get_ptr_mut(0) {
        // SAFETY: per-CPU array element, used only by this CPU during this run.
        let stats = unsafe { &mut *stats };
        // Opaque to LLVM, so that the bounds check below stays one the verifier sees.
        let index = core::hint::black_box(index) as usize;
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

/// Counts a forwarded packet of `bytes` bytes for backend `id`, and a new flow when
/// `new_flow`.
#[inline(always)]
pub(crate) fn backend(id: u32, bytes: u64, new_flow: bool) {
    if let Some(stats) = backend_stats(id) {
        // SAFETY: this CPU's row's element, used only by this CPU during this run.
        let stats = unsafe { &mut *stats };
        stats.packets += 1;
        stats.bytes += bytes;
        stats.new_flows += u64::from(new_flow);
    }
}
