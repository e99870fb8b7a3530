//! Counter layouts read by userspace from per-CPU arrays.
//!
//! All counters are `u64` in host byte order; userspace sums the per-CPU copies.

/// Global counters, one per-CPU element of the `GLOBAL_STATS` map.
///
/// Layout: 8 bytes, one `u64` per field, host byte order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GlobalStats {
    /// Packets the program has seen (every invocation).
    pub rx_packets: u64,
}

const _: () = assert!(size_of::<GlobalStats>() == 8);

// SAFETY: GlobalStats is repr(C), has no padding (size assertion above) and every bit
// pattern is a valid value.
#[cfg(feature = "user")]
unsafe impl aya::Pod for GlobalStats {}
