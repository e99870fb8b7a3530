//! Walking a backend's permutation to its next empty slot: the probe loop of the fill
//! ([`fill`](super::fill)), over a bitmap of filled slots.
//!
//! The walkers find the same slot, the first empty entry of the walk
//! `start, start + skip, start + 2 skip, ... (mod M)`:
//! - `first_empty_scalar`: one entry per step, the paper's loop (the tests'
//!   reference);
//! - [`first_empty_pairs`]: two entries per step, one branch per pair (the fill's
//!   first half, and all of it without AVX2);
//! - on x86-64 CPUs with AVX2 (detected at run time), eight entries per step: their
//!   positions come from precomputed multiples of the skip, one gather reads their
//!   bitmap words, and the first empty one is the lowest bit of a mask. It tests more
//!   entries than needed, so the fill uses it only once the table is half full, when a
//!   turn passes several filled slots and the scalar loop's exit branch is mispredicted
//!   about once per turn; there it takes about 30% off the build time of a
//!   65,537-slot table.

/// One bit per slot, set once the slot is owned (`u32` words, the unit of the AVX2
/// gather).
pub(crate) struct Bitmap {
    words: Vec<u32>,
}

impl Bitmap {
    /// All slots empty.
    pub(crate) fn new(size: u32) -> Self {
        Self {
            words: vec![0; (size as usize).div_ceil(32)],
        }
    }

    /// Marks `slot` filled.
    #[inline]
    pub(crate) fn set(&mut self, slot: u32) {
        self.words[(slot >> 5) as usize] |= 1 << (slot & 31);
    }

    /// The empty slots below `size`, in increasing order.
    pub(crate) fn empty_slots(&self, size: u32) -> Vec<u32> {
        let mut empty = Vec::new();
        for (w, &word) in self.words.iter().enumerate() {
            let mut free = !word;
            while free != 0 {
                #[expect(
                    clippy::cast_possible_truncation,
                    reason = "word indexes are below size / 32"
                )]
                let slot = (w as u32) * 32 + free.trailing_zeros();
                if slot >= size {
                    break;
                }
                empty.push(slot);
                free &= free - 1;
            }
        }
        empty
    }
}

/// `value mod size` for `value < 2 * size` (with `size < 2^31`), without a branch:
/// `value - size` wraps above `value` exactly when `value < size`.
#[inline]
pub(crate) fn reduce(value: u32, size: u32) -> u32 {
    value.min(value.wrapping_sub(size))
}

/// The first empty slot of the walk from `start` with step `skip` (both `< size`), one
/// entry at a time (the reference the other walkers are tested against). Precondition:
/// the bitmap covers `size` slots and one of them is empty (then the walk, a
/// permutation since `size` is prime, reaches it).
#[cfg(test)]
pub(crate) fn first_empty_scalar(bitmap: &Bitmap, size: u32, start: u32, skip: u32) -> u32 {
    debug_assert!(start < size && skip < size);
    debug_assert_eq!(bitmap.words.len(), (size as usize).div_ceil(32));
    let mut slot = start;
    loop {
        // SAFETY: slot < size (start < size, and reduce keeps the walk in 0..size), so
        // slot / 32 < ceil(size / 32) = words.len().
        let word = unsafe { *bitmap.words.get_unchecked((slot >> 5) as usize) };
        if word >> (slot & 31) & 1 == 0 {
            return slot;
        }
        slot = reduce(slot + skip, size);
    }
}

/// `first_empty_scalar` (the tests' reference), two entries per step: both are tested,
/// and the loop branches once per pair (the first empty one of the pair is picked
/// without a branch). While the table is less than half full most walks end within two
/// entries, and the exit branch of the one-entry loop is mispredicted about once per
/// filled entry met; here only when both are filled. Same preconditions and result.
#[inline]
pub(crate) fn first_empty_pairs(bitmap: &Bitmap, size: u32, start: u32, skip: u32) -> u32 {
    debug_assert!(start < size && skip < size);
    debug_assert_eq!(bitmap.words.len(), (size as usize).div_ceil(32));
    let filled = |slot: u32| {
        // SAFETY: slot < size (start < size, and reduce keeps the walk in 0..size), so
        // slot / 32 < ceil(size / 32) = words.len().
        let word = unsafe { *bitmap.words.get_unchecked((slot >> 5) as usize) };
        word >> (slot & 31) & 1
    };
    let mut first = start;
    loop {
        let second = reduce(first + skip, size);
        let (a, b) = (filled(first), filled(second));
        if a & b == 0 {
            // a = 1 (first filled): take the second; a = 0: the first.
            return first ^ ((first ^ second) & a.wrapping_neg());
        }
        first = reduce(second + skip, size);
    }
}

/// The eight-wide walker, when the CPU has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wide {
    /// No wide walker: every walk is scalar.
    None,
    /// AVX2 (x86-64): eight entries per step.
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

impl Wide {
    /// The best walker this CPU supports.
    pub(crate) fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                return Self::Avx2;
            }
        }
        Self::None
    }
}

/// `[0, skip, 2 skip, ..., 8 skip] mod size`: the offsets of one eight-wide step and the
/// step itself.
pub(crate) fn wide_steps(skip: u32, size: u32) -> [u32; 9] {
    let mut steps = [0; 9];
    for k in 1..steps.len() {
        steps[k] = reduce(steps[k - 1] + skip, size);
    }
    steps
}

/// The first empty slot of the walk from `start` whose eight-wide steps are `steps`
/// (from [`wide_steps`]), with the walker `wide`; the same slot as
/// [`first_empty_scalar`]. Same preconditions.
#[cfg(test)]
pub(crate) fn first_empty_wide(
    wide: Wide,
    bitmap: &Bitmap,
    size: u32,
    start: u32,
    steps: &[u32; 9],
) -> u32 {
    match wide {
        Wide::None => first_empty_scalar(bitmap, size, start, steps[1]),
        #[cfg(target_arch = "x86_64")]
        Wide::Avx2 => {
            // SAFETY: Wide::Avx2 is only produced by Wide::detect after the run-time
            // check that the CPU supports AVX2.
            unsafe { first_empty_avx2(bitmap, size, start, steps) }
        }
    }
}

/// AVX2 body of `first_empty_wide` (the tests' reference) (inlined into the fill's AVX2
/// phase).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) fn first_empty_avx2(bitmap: &Bitmap, size: u32, start: u32, steps: &[u32; 9]) -> u32 {
    use std::arch::x86_64::{
        _mm256_add_epi32, _mm256_and_si256, _mm256_castsi256_ps, _mm256_cmpeq_epi32,
        _mm256_i32gather_epi32, _mm256_loadu_si256, _mm256_min_epu32, _mm256_movemask_ps,
        _mm256_set1_epi32, _mm256_setzero_si256, _mm256_srli_epi32, _mm256_srlv_epi32,
        _mm256_sub_epi32,
    };
    debug_assert!(start < size && steps.iter().all(|&s| s < size));
    debug_assert_eq!(bitmap.words.len(), (size as usize).div_ceil(32));
    // size <= MAX_TABLE_SIZE < 2^31: every lane value below fits in i32 and in u32 sums.
    #[expect(clippy::cast_possible_wrap, reason = "size <= MAX_TABLE_SIZE < 2^31")]
    let size_lanes = _mm256_set1_epi32(size as i32);
    // SAFETY: `steps` holds 9 u32s, so its first 8 are 32 readable bytes; loadu has no
    // alignment requirement.
    let offsets = unsafe { _mm256_loadu_si256(steps.as_ptr().cast()) };
    let (low5, one, zero) = (
        _mm256_set1_epi32(31),
        _mm256_set1_epi32(1),
        _mm256_setzero_si256(),
    );
    let words = bitmap.words.as_ptr().cast::<i32>();
    let mut base = start;
    loop {
        // Lanes: base + k * skip (mod size), k = 0..8; all in 0..size.
        #[expect(clippy::cast_possible_wrap, reason = "base < size < 2^31")]
        let sums = _mm256_add_epi32(_mm256_set1_epi32(base as i32), offsets);
        let positions = _mm256_min_epu32(sums, _mm256_sub_epi32(sums, size_lanes));
        // SAFETY: every position is < size, so position / 32 < ceil(size / 32) =
        // words.len(): all eight gathered u32s are in bounds.
        let gathered =
            unsafe { _mm256_i32gather_epi32::<4>(words, _mm256_srli_epi32::<5>(positions)) };
        let bits = _mm256_and_si256(
            _mm256_srlv_epi32(gathered, _mm256_and_si256(positions, low5)),
            one,
        );
        let empty = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(bits, zero)));
        if empty != 0 {
            let k = empty.trailing_zeros() as usize;
            return reduce(base + steps[k], size);
        }
        base = reduce(base + steps[8], size);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walkers_agree() {
        let size = 10_007;
        let mut bitmap = Bitmap::new(size);
        let mut state = 3_u64;
        let mut random = |below: u32| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 33) % u64::from(below)) as u32
        };
        // Fill all but a few slots, checking both walkers along the way.
        let wide = Wide::detect();
        for filled in 0..size - 1 {
            let (start, skip) = (random(size), 1 + random(size - 1));
            let scalar = first_empty_scalar(&bitmap, size, start, skip);
            let steps = wide_steps(skip, size);
            assert_eq!(first_empty_wide(wide, &bitmap, size, start, &steps), scalar);
            assert_eq!(
                first_empty_wide(Wide::None, &bitmap, size, start, &steps),
                scalar
            );
            bitmap.set(scalar);
            if filled % 1_000 == 0 {
                assert_eq!(bitmap.empty_slots(size).len(), (size - filled - 1) as usize);
            }
        }
        assert_eq!(bitmap.empty_slots(size).len(), 1);
    }

    #[test]
    fn pairs_walker_agrees_with_the_scalar_one() {
        let size = 4_001;
        let mut bitmap = Bitmap::new(size);
        let mut state = 17_u64;
        let mut random = |below: u32| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 33) % u64::from(below)) as u32
        };
        for _ in 0..size - 1 {
            let (start, skip) = (random(size), 1 + random(size - 1));
            let scalar = first_empty_scalar(&bitmap, size, start, skip);
            assert_eq!(first_empty_pairs(&bitmap, size, start, skip), scalar);
            bitmap.set(scalar);
        }
        // One empty slot left: found in either position of a pair.
        let last = bitmap.empty_slots(size)[0];
        for start in [last, (last + 1) % size, (last + size - 1) % size] {
            assert_eq!(first_empty_pairs(&bitmap, size, start, 1), last);
        }
    }

    #[test]
    fn steps_and_reduction() {
        assert_eq!(wide_steps(3, 7), [0, 3, 6, 2, 5, 1, 4, 0, 3]);
        assert_eq!(reduce(6, 7), 6);
        assert_eq!(reduce(7, 7), 0);
        assert_eq!(reduce(13, 7), 6);
    }
}
