// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! When the program first saw each VIP's current table epoch (`TABLE_SEEN`), and so
//! whether the table changed recently: within
//! `lb_common::conntrack::DUPLICATE_SYN_WINDOW_NS` of that first sight. Only then can a
//! SYN be a duplicate of a connection picked from another table, so only then does a
//! SYN look its flow up in conntrack ([`select`](crate::select)).
//!
//! The window starts when the program first sees the new epoch, never before the
//! switch: it covers every SYN that arrives within the window after the change.

use lb_common::{conntrack::DUPLICATE_SYN_WINDOW_NS, types::VipEntry};

use crate::maps::TABLE_SEEN;

/// The unit of the time in a `TABLE_SEEN` word: 2^30 ns (about 1.07 s).
const TICK_SHIFT: u32 = 30;
/// The window in ticks, rounded up.
#[expect(clippy::cast_possible_truncation, reason = "180 s is 168 ticks")]
const WINDOW_TICKS: u32 = (DUPLICATE_SYN_WINDOW_NS >> TICK_SHIFT) as u32 + 1;

/// Whether VIP `vip`'s current table was first seen less than the window before
/// `now_ns` (the conntrack clock); records the time when this is the first packet to see
/// it. True when the record cannot be read.
#[inline(always)]
pub(crate) fn table_changed(vip: &VipEntry, now_ns: u64) -> bool {
    let Some(seen) = TABLE_SEEN.get_ptr_mut(vip.vip_id) else {
        return true;
    };
    #[expect(
        clippy::cast_possible_truncation,
        reason = "the tick counter wraps after 146 years; only differences are compared"
    )]
    let now = (now_ns >> TICK_SHIFT) as u32;
    // SAFETY: an element of the shared array, read and written as one aligned 64-bit
    // word; other CPUs write only the same kind of word for the same epoch.
    let word = unsafe { core::ptr::read_volatile(seen) };
    #[expect(clippy::cast_possible_truncation, reason = "the word's two halves")]
    let (epoch, first) = ((word >> 32) as u32, word as u32);
    if epoch != vip.epoch {
        // SAFETY: as above.
        unsafe {
            core::ptr::write_volatile(seen, (u64::from(vip.epoch) << 32) | u64::from(now));
        }
        return true;
    }
    now.wrapping_sub(first) < WINDOW_TICKS
}
