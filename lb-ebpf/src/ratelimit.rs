// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The rate limit of the ICMP messages the program sends (`ICMP_RATE`): per CPU and
//! kind, the generic cell rate algorithm (GCRA, ITU-T I.371, the "virtual scheduling"
//! form): a message may go when the theoretical arrival time `tat` runs at most
//! `icmp_burst_ns` ahead of now; each message moves `tat` one emission interval
//! (`icmp_interval_ns`) further. That is `rate` messages per second with bursts of
//! `burst`, in one `u64` per CPU and no division on the packet path.

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
    let now = now_coarse_ns();
    let next = if *tat > now { *tat } else { now };
    if next - now > cfg.icmp_burst_ns {
        return false;
    }
    *tat = next.saturating_add(cfg.icmp_interval_ns);
    true
}
