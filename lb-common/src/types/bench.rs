// SPDX-License-Identifier: MIT OR Apache-2.0
//! The benchmark harness's `BENCH_FRAME` element (used by the `lb_bench` program only).

use crate::impl_pod;

/// Largest frame the benchmark harness restores.
pub const BENCH_FRAME_MAX: usize = 128;

/// The single element of the `BENCH_FRAME` array (benchmark harness only).
///
/// The frame under test is exactly [`BENCH_FRAME_MAX`] bytes long (a constant the
/// verifier can check).
///
/// Layout (136 bytes): `vary_offset` 0..4, `counter` 4..8, `bytes` 8..136.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BenchFrame {
    /// When non-zero, the byte offset (`4..=BENCH_FRAME_MAX - 4`) of a 4-byte field
    /// (e.g. the source address) that the harness overwrites with [`Self::counter`]
    /// before every repetition, so that every repetition is a new flow; 0 leaves the
    /// frame as given.
    pub vary_offset: u32,
    /// Incremented by the harness on every repetition when `vary_offset` is set.
    pub counter: u32,
    /// The frame.
    pub bytes: [u8; BENCH_FRAME_MAX],
}
const _: () = assert!(size_of::<BenchFrame>() == 136);

impl Default for BenchFrame {
    fn default() -> Self {
        Self {
            vary_offset: 0,
            counter: 0,
            bytes: [0; BENCH_FRAME_MAX],
        }
    }
}

impl_pod!(BenchFrame);
