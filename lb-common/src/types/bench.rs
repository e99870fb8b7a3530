// SPDX-License-Identifier: MIT OR Apache-2.0
//! The benchmark harness's `BENCH_FRAME` element and `BENCH_SEQ` size (used by the
//! `lb_bench` program only).

use crate::impl_pod;

/// Largest frame the benchmark harness restores.
pub const BENCH_FRAME_MAX: usize = 128;

/// Bytes the harness restores at the front of the frame when
/// [`BenchFrame::outer_rewritten`] is set: the Ethernet, outer IPv4, UDP and GUE headers
/// with one IPv4 candidate, everything the backend agent rewrites (its decapsulation
/// writes the inner frame's Ethernet header in their last 14 bytes).
pub const BENCH_OUTER_RESTORED: usize = 54;
const _: () =
    assert!(BENCH_OUTER_RESTORED.is_multiple_of(2) && BENCH_OUTER_RESTORED <= BENCH_FRAME_MAX);

/// Entries of `BENCH_SEQ` (a power of two): the longest sequence of 4-byte values the
/// harness stamps, one per repetition (2^20, 8 MiB of kernel memory: the kernel stores
/// each `u32` in an 8-byte cell).
pub const BENCH_SEQ_MAX: u32 = 1 << 20;

/// The single element of the per-CPU `BENCH_FRAME` array (benchmark harness only; each
/// CPU has its own copy and counter).
///
/// The frame under test is exactly [`BENCH_FRAME_MAX`] bytes long (a constant the
/// verifier can check). Before repetition `c` (the value of [`Self::counter`], which the
/// harness then increments) the harness restores the frame's length and its Ethernet
/// header (the first [`BENCH_OUTER_RESTORED`] bytes when [`Self::outer_rewritten`] is
/// set), then:
/// 1. in pair mode ([`Self::pair_offset`] non-zero), writes the 4 bytes at
///    `pair_offset`: the frame's own for an even `c`, [`Self::pair_word`] for an odd one
///    (a SYN, then the ACK of the same connection); the flow index is then `c / 2`,
///    else `c`;
/// 2. when [`Self::vary_offset`] is non-zero, writes a 4-byte value there: entry
///    `index % seq_entries` of `BENCH_SEQ` (its 4 bytes as stored) when
///    [`Self::seq_entries`] is non-zero, else the index in network order.
///
/// Layout (152 bytes): `vary_offset` 0..4, `counter` 4..8, `bytes` 8..136,
/// `seq_entries` 136..140, `pair_offset` 140..144, `pair_word` 144..148,
/// `outer_rewritten` 148..152.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BenchFrame {
    /// When non-zero, the byte offset (`4..=BENCH_FRAME_MAX - 4`) of a 4-byte field
    /// (e.g. the source address) that the harness overwrites before every repetition,
    /// so that repetitions are different flows; 0 leaves the frame as given.
    pub vary_offset: u32,
    /// The repetition counter, incremented by the harness on every repetition when
    /// `vary_offset` or `pair_offset` is set.
    pub counter: u32,
    /// The frame.
    pub bytes: [u8; BENCH_FRAME_MAX],
    /// `BENCH_SEQ` entries used, a power of two up to [`BENCH_SEQ_MAX`]; 0: the
    /// stamped value is the flow index itself.
    pub seq_entries: u32,
    /// When non-zero, the byte offset (`4..=BENCH_FRAME_MAX - 4`) of the 4 bytes that
    /// odd repetitions replace by `pair_word` (e.g. the TCP flags' word: SYN, then ACK).
    pub pair_offset: u32,
    /// The 4 bytes odd repetitions write at `pair_offset`.
    pub pair_word: [u8; 4],
    /// Non-zero when the program under test rewrites the frame's headers in place or
    /// strips them (the backend agent): the harness then restores the first
    /// [`BENCH_OUTER_RESTORED`] bytes, not only the Ethernet header. Left 0 for the load
    /// balancer, which only pushes headers in front of the frame: concurrent runs give
    /// each CPU a frame of its own (its source port) behind the same Ethernet header.
    pub outer_rewritten: u32,
}
const _: () = assert!(size_of::<BenchFrame>() == 152);

impl Default for BenchFrame {
    fn default() -> Self {
        Self {
            vary_offset: 0,
            counter: 0,
            bytes: [0; BENCH_FRAME_MAX],
            seq_entries: 0,
            pair_offset: 0,
            pair_word: [0; 4],
            outer_rewritten: 0,
        }
    }
}

impl_pod!(BenchFrame);
