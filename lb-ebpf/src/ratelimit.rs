// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The rate limit of the ICMP messages the program sends (`ICMP_RATE`): per CPU and
//! kind, the generic cell rate algorithm (GCRA, ITU-T I.371, the "virtual scheduling"
//! form): a message may go when the theoretical arrival time `tat` runs at most
//! `icmp_burst_ns` ahead of now; each message moves `tat` one emission interval
//! (`icmp_interval_ns`) further. That is `rate` messages per second with bursts of
//! `burst`, in one `u64` per CPU and no division on the packet path. The rate of new
//! conntrack pins (`new_pin_rate`) takes the same step ([`conforms`]) over its own state.

use lb_common::types::LbConfig;

use crate::{conntrack::now_coarse_ns, maps::ICMP_RATE};

/// Whether one more message of kind `kind` (`lb_common::maps::ICMP_RATE_*`) may be sent
/// now; if so it is counted against the limit.
#[inline(always)]
pub(crate) fn allow(kind: u32, cfg: &LbConfig) -> bool {
    let Some(tat) = ICMP_RATE.get_ptr_mut(kind) else {
        return false;
    };
    // SAFETY: per-CPU array element, used only by this CPU during this run.
    let tat = unsafe { &mut *tat };
    conforms(
        tat,
        now_coarse_ns(),
        cfg.icmp_interval_ns,
        cfg.icmp_burst_ns,
    )
}

/// One step of the GCRA: whether an event at `now_ns` conforms to the rate of one per
/// `interval_ns` with bursts running up to `burst_ns` ahead; if so, the theoretical
/// arrival time `tat` (ns, the same clock) moves one interval on.
#[inline(always)]
pub(crate) fn conforms(tat: &mut u64, now_ns: u64, interval_ns: u64, burst_ns: u64) -> bool {
    let next = if *tat > now_ns { *tat } else { now_ns };
    if next - now_ns > burst_ns {
        return false;
    }
    *tat = next.saturating_add(interval_ns);
    true
}
