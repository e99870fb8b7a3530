// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The new-pin flood limiter: the rate limit of new conntrack pins (`NEW_PIN_RATE`),
//! which keeps a flood of packets from unknown flows (an ACK flood from random
//! 4-tuples, spoofed handshakes) from evicting established flows: per CPU, the generic
//! cell rate algorithm (GCRA, ITU-T I.371, the step of
//! [`crate::ratelimit::conforms`]) with `new_pin_interval_ns` and `new_pin_burst_ns`:
//! `1e9 / interval` pins per second with bursts, in one `u64` per CPU and no division
//! on the packet path.
//!
//! A packet refused a pin is still forwarded where the pin would have pointed (the
//! table's slot or the held SYN's backend, which is where its flow's next packets go
//! as long as the table does not change) and counted under its own reason
//! ([`unpinned`]): only the insert is skipped, the flood's largest cost.

use lb_common::{stats::Reason, types::LbConfig};

use crate::{maps::NEW_PIN_RATE, ratelimit};

/// Whether this CPU may make one more new pin at `now_ns` (the conntrack clock); if so
/// it is counted against the rate. Always true when the rate is unlimited
/// (`new_pin_interval_ns` 0).
#[inline(always)]
pub(crate) fn may_pin(cfg: &LbConfig, now_ns: u64) -> bool {
    let interval = cfg.new_pin_interval_ns;
    if interval == 0 {
        return true;
    }
    let Some(tat) = NEW_PIN_RATE.get_ptr_mut(0) else {
        return true;
    };
    // SAFETY: per-CPU array element, used only by this CPU during this run.
    let tat = unsafe { &mut *tat };
    ratelimit::conforms(tat, now_ns, interval, cfg.new_pin_burst_ns)
}

/// The reason of a packet forwarded without the pin it was refused: `tx_unpinned` or
/// `redirect_unpinned` for the two forwards, `reason` itself otherwise.
#[inline(always)]
pub(crate) fn unpinned(reason: Reason) -> Reason {
    match reason {
        Reason::TxEncap => Reason::TxUnpinned,
        Reason::RedirectEncap => Reason::RedirectUnpinned,
        other => other,
    }
}
