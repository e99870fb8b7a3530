// SPDX-License-Identifier: MIT OR Apache-2.0
//! The socket mark of tunnel-mode health probes: which backend a probe packet is for.
//!
//! A tunnel-mode probe is sent to the VIP address, as a client's packet would be, from a
//! socket whose `SO_MARK` names one backend. A TC egress program on the LB host reads
//! `skb->mark`, and encapsulates each marked packet to that backend (Katran's approach:
//! the probe proves decapsulation and the VIP on the backend). Userspace writes the mark,
//! the kernel program reads it: both use these functions.
//!
//! Layout of the 32-bit mark: the upper 16 bits are the tag [`PROBE_MARK_TAG`] (`"LB"`
//! in ASCII, so the mark reads `0x4c42_xxxx` in `tc` and `nft` output), the lower 16 bits
//! the backend id (`BACKENDS` index, `1..MAX_BACKENDS`). A mark without the tag, or with
//! backend id 0, is not a probe's.

use crate::{impl_pod, maps::MAX_BACKENDS};

/// Upper 16 bits of every probe mark.
pub const PROBE_MARK_TAG: u32 = 0x4c42_0000;
/// The bits of a probe mark that hold the tag.
pub const PROBE_MARK_TAG_MASK: u32 = 0xffff_0000;

// Every backend id fits in the lower 16 bits.
const _: () = assert!(MAX_BACKENDS <= 1 << 16);

/// The mark of probes for backend `backend_id` (`1..MAX_BACKENDS`), or `None` for an id
/// outside that range.
pub const fn probe_mark(backend_id: u32) -> Option<u32> {
    if backend_id == 0 || backend_id >= MAX_BACKENDS {
        return None;
    }
    Some(PROBE_MARK_TAG | backend_id)
}

/// The backend id that `mark` names, or `None` when `mark` is not a probe's.
pub const fn probe_mark_backend(mark: u32) -> Option<u32> {
    if mark & PROBE_MARK_TAG_MASK != PROBE_MARK_TAG {
        return None;
    }
    let id = mark & !PROBE_MARK_TAG_MASK;
    if id == 0 { None } else { Some(id) }
}

/// Counters of the TC egress program that encapsulates tunnel-mode probes (per-CPU
/// `PROBE_STATS`, one element). A packet without a probe mark counts nowhere.
///
/// Layout (48 bytes): six `u64`, host byte order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeStats {
    /// Probe packets encapsulated to their backend.
    pub encapsulated: u64,
    /// Dropped: the mark names a backend id without a `BACKENDS` entry, or of the other
    /// address family.
    pub no_backend: u64,
    /// Dropped: no valid `CONFIG`, or no outer source address for the family.
    pub bad_config: u64,
    /// Dropped: not IPv4/IPv6, or its header could not be read or grown.
    pub bad_packet: u64,
    /// Dropped: the encapsulated packet would exceed the configured MTU.
    pub too_big: u64,
    /// Dropped: no route to the backend (FIB next-hop mode).
    pub fib_fail: u64,
}
const _: () = assert!(size_of::<ProbeStats>() == 48);

impl ProbeStats {
    /// Adds `other` field by field (summing per-CPU copies).
    pub fn accumulate(&mut self, other: &Self) {
        self.encapsulated = self.encapsulated.wrapping_add(other.encapsulated);
        self.no_backend = self.no_backend.wrapping_add(other.no_backend);
        self.bad_config = self.bad_config.wrapping_add(other.bad_config);
        self.bad_packet = self.bad_packet.wrapping_add(other.bad_packet);
        self.too_big = self.too_big.wrapping_add(other.too_big);
        self.fib_fail = self.fib_fail.wrapping_add(other.fib_fail);
    }

    /// Probe packets dropped, for every reason.
    pub fn dropped(&self) -> u64 {
        self.no_backend
            .wrapping_add(self.bad_config)
            .wrapping_add(self.bad_packet)
            .wrapping_add(self.too_big)
            .wrapping_add(self.fib_fail)
    }
}

impl_pod!(ProbeStats);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_round_trip_for_every_backend_id() {
        for id in 1..MAX_BACKENDS {
            let mark = probe_mark(id).unwrap();
            assert_eq!(mark >> 16, 0x4c42);
            assert_eq!(probe_mark_backend(mark), Some(id));
        }
    }

    #[test]
    fn ids_outside_the_range_and_foreign_marks_are_refused() {
        assert_eq!(probe_mark(0), None);
        assert_eq!(probe_mark(MAX_BACKENDS), None);
        assert_eq!(probe_mark_backend(0), None);
        assert_eq!(probe_mark_backend(PROBE_MARK_TAG), None);
        assert_eq!(probe_mark_backend(0x0000_0007), None);
        assert_eq!(probe_mark_backend(0x4c43_0007), None);
    }
}
