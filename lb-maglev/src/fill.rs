//! The fill loop of the Maglev paper (section 3.4, "Pseudocode 1"), generalised to exact
//! per-backend slot counts, and the turn schedule that interleaves the backends.
//!
//! # Turns
//! Backends take turns; on its turn a backend walks its permutation from where it
//! stopped last time to the first empty slot and claims it. Each backend takes exactly
//! as many turns as its quota (see [`quota`]), so it ends with exactly that
//! many slots. The turns are spread over `R = max(quota)` rounds: backend `i` with quota
//! `q_i` takes its `k`-th turn (`k` in `0..q_i`) in round `floor(k * R / q_i)`, so every
//! backend's turns are spread evenly over the whole fill in proportion to its weight and
//! every backend takes its first turn in round 0. Within a round, backends go in table
//! order (sorted by key).
//!
//! With equal weights the quotas are `ceil(M/N)` for the first `M mod N` backends and
//! `floor(M/N)` for the others, so every backend takes a turn in each of the first
//! `R - 1` rounds and the first `M mod N` take one more in round `R - 1`: exactly the
//! paper's round robin ("backends take turns until the table is full").
//!
//! # Cost
//! Permutation entries are computed on the fly (`next += skip; if next >= M { next -= M }`,
//! compiled branch-free; no multiplication or division in the probe loop), testing a
//! bitmap of filled slots (`M / 8` bytes, so probes hit L1/L2 cache). Walking costs
//! about `M ln M` probes in all, most of them at the end, when a turn passes about
//! `M / empty` filled slots. These measures keep this down, none of which changes the
//! result:
//! - every turn claims exactly one slot, so the fill runs in three phases of known
//!   length, each a loop of its own with no per-turn test of the phase (the eight-wide
//!   one compiled for AVX2, so its walk inlines into the loop);
//! - until the table is half full, walks test two entries per step and branch once per
//!   pair, which takes most mispredicted loop exits away (module `walk`);
//! - once the table is half full, walks test eight entries per step where the CPU has
//!   AVX2 (module `walk`);
//! - once at most 128 (256 without AVX2) slots are empty, a turn instead computes where
//!   each remaining empty slot lies along the backend's walk
//!   (`(slot - cursor) * skip^-1 mod M`, one modular multiplication each) and claims the
//!   nearest: the same slot, found in O(empty) rather than O(M / empty) (this halves
//!   the probes for `M = 65,537`);
//! - equal quotas skip the turn schedule (plain round robin).
//!
//! Memory: the `M` slots (`u32`), the bitmap, one cursor per backend (plus 36 bytes of
//! eight-wide steps with AVX2) and, only for unequal quotas, the turn order (`M` `u32`s)
//! and one counter per round.
//! Termination: `M` is prime and `1 <= skip < M`, so each walk visits every slot within
//! `M` steps, and a turn is only taken while some slot is empty (the quotas sum to `M`).

use super::{
    MaglevError, Permutation, quota, validate_table_size,
    walk::{self, Bitmap, Wide},
};

/// Fills a table of `size` slots from explicit permutations with equal weights: the
/// paper's algorithm as published (section 3.4), e.g. its worked example (Table 1:
/// `M = 7`, B0 (offset 3, skip 4), B1 (0, 2), B2 (3, 1) give `[1, 0, 1, 0, 2, 2, 0]`).
///
/// Returns `size` slot owners, each an index into `permutations`; an empty vector when
/// `permutations` is empty.
///
/// # Errors
/// The table-size errors of [`validate_table_size`],
/// [`MaglevError::TableSizeBelowBackendCount`] when there are more permutations than
/// slots, [`MaglevError::InvalidPermutation`] for an out-of-range offset or skip.
pub fn fill_slots(size: u32, permutations: &[Permutation]) -> Result<Vec<u32>, MaglevError> {
    validate_table_size(size)?;
    if permutations.len() > size as usize {
        return Err(MaglevError::TableSizeBelowBackendCount {
            size,
            backends: permutations.len(),
        });
    }
    for (index, permutation) in permutations.iter().enumerate() {
        permutation.validate(index, size)?;
    }
    let quotas = quota::apportion(&vec![1; permutations.len()], size).quotas;
    Ok(fill_with_quotas(size, permutations, &quotas))
}

/// Fills `size` slots so that backend `i` (permutation `permutations[i]`) owns exactly
/// `quotas[i]` slots, taking turns as described in the module documentation. Returns
/// the slot owners (indices into `permutations`), or an empty vector if all quotas are 0.
///
/// Preconditions (guaranteed by the callers): `size` is a prime in
/// `[2, MAX_TABLE_SIZE]`, every permutation is valid for `size`, the slices have the same
/// length, and the quotas sum to `size` (or are all 0).
pub(crate) fn fill_with_quotas(
    size: u32,
    permutations: &[Permutation],
    quotas: &[u32],
) -> Vec<u32> {
    fill_using(size, permutations, quotas, Wide::detect())
}

/// [`fill_with_quotas`] with the given wide walker (tests compare the walkers).
fn fill_using(size: u32, permutations: &[Permutation], quotas: &[u32], wide: Wide) -> Vec<u32> {
    assert_eq!(
        permutations.len(),
        quotas.len(),
        "one quota per permutation"
    );
    let total: u64 = quotas.iter().map(|&q| u64::from(q)).sum();
    if total == 0 {
        return Vec::new();
    }
    assert_eq!(total, u64::from(size), "quotas must sum to the table size");
    let mut filler = Filler::new(size, permutations, wide);
    let rounds = quotas.iter().copied().max().unwrap_or(0);
    let min_active = quotas.iter().copied().filter(|&q| q > 0).min().unwrap_or(0);
    if min_active + 1 >= rounds {
        // Every quota is R or R - 1 (equal weights): plain round robin, no schedule
        // needed. Backends with quota R - 1 skip only the last round.
        let active: Vec<u32> = (0..quotas.len())
            .filter(|&i| quotas[i] > 0)
            .map(index_u32)
            .collect();
        let last: Vec<u32> = active
            .iter()
            .copied()
            .filter(|&i| quotas[i as usize] == rounds)
            .collect();
        filler.run(
            (0..rounds - 1)
                .flat_map(|_| active.iter().copied())
                .chain(last),
        );
    } else {
        filler.run(turn_order(quotas, rounds).into_iter());
    }
    filler.slots
}

/// The turn order for unequal quotas: backend indices sorted by (round, index), where
/// backend `i`'s `k`-th turn is in round `floor(k * rounds / quotas[i])` (a counting
/// sort over rounds; O(M + R + N) time and memory).
fn turn_order(quotas: &[u32], rounds: u32) -> Vec<u32> {
    // starts[r + 1] counts the turns of round r; after the prefix sum, starts[r] is where
    // round r begins in the order.
    let mut starts = vec![0_u32; rounds as usize + 1];
    for_each_turn(quotas, rounds, |round, _| starts[round as usize + 1] += 1);
    for r in 1..starts.len() {
        starts[r] += starts[r - 1];
    }
    let total = starts[rounds as usize] as usize;
    let mut order = vec![0_u32; total];
    for_each_turn(quotas, rounds, |round, i| {
        let at = &mut starts[round as usize];
        order[*at as usize] = i;
        *at += 1;
    });
    order
}

/// Calls `visit(round, backend)` for every turn, backend by backend in index order and
/// each backend's turns in increasing round order. Rounds are computed incrementally:
/// `floor((k + 1) R / q) = floor(k R / q) + R div q + carry`, no division per turn.
fn for_each_turn(quotas: &[u32], rounds: u32, mut visit: impl FnMut(u32, u32)) {
    for (i, &quota) in quotas.iter().enumerate() {
        if quota == 0 {
            continue;
        }
        let (whole, part) = (rounds / quota, rounds % quota);
        let (mut round, mut carry) = (0_u32, 0_u32);
        for _ in 0..quota {
            visit(round, index_u32(i));
            round += whole;
            carry += part;
            if carry >= quota {
                carry -= quota;
                round += 1;
            }
        }
    }
}

/// A backend index as stored in the slots (there are at most `MAX_TABLE_SIZE` backends).
fn index_u32(i: usize) -> u32 {
    u32::try_from(i).expect("backend index fits in u32 (at most MAX_TABLE_SIZE backends)")
}

/// Where a backend's walk through its permutation stands.
#[derive(Clone, Copy)]
struct Cursor {
    /// The next entry of the permutation to try, in `0..M`.
    next: u32,
    /// The permutation's skip, in `1..M`.
    skip: u32,
}

/// When this few slots are left empty, turns find their slot by computing where each
/// empty slot lies in the backend's permutation instead of walking it (see
/// [`Filler::tail_turn`]): walking costs about `M / empty` probes per turn, the
/// computation one modular multiplication per empty slot, and the two meet near
/// `sqrt(M)` for the scalar walk, lower for the eight-wide one. Measured best at these
/// values for M = 65,537 and 655,373.
const TAIL_SLOTS_SCALAR: u32 = 256;
/// See [`TAIL_SLOTS_SCALAR`].
const TAIL_SLOTS_WIDE: u32 = 128;

/// The table being filled.
struct Filler {
    size: u32,
    /// Filled slots.
    filled: Bitmap,
    /// Slot owners (valid where `filled` is set); `size` entries.
    slots: Vec<u32>,
    cursors: Vec<Cursor>,
    /// Slots not yet claimed.
    empty: u32,
    /// The eight-wide walker, used while `tail_from < empty <= wide_from`.
    wide: Wide,
    wide_from: u32,
    /// Per backend, the steps of the eight-wide walker (empty without one).
    wide_steps: Vec<[u32; 9]>,
    /// The tail computation takes over when `empty <= tail_from`.
    tail_from: u32,
    /// The empty slots, once `empty <= tail_from` (any order).
    tail: Vec<u32>,
    /// Per backend, `skip^-1 mod M` and its Shoup constant, once computed (0: not yet).
    inverses: Vec<(u32, u32)>,
}

impl Filler {
    fn new(size: u32, permutations: &[Permutation], wide: Wide) -> Self {
        let (wide_from, tail_from, wide_steps) = match wide {
            Wide::None => (0, TAIL_SLOTS_SCALAR, Vec::new()),
            #[cfg(target_arch = "x86_64")]
            Wide::Avx2 => (
                size / 2,
                TAIL_SLOTS_WIDE,
                permutations
                    .iter()
                    .map(|p| walk::wide_steps(p.skip, size))
                    .collect(),
            ),
        };
        Self {
            size,
            filled: Bitmap::new(size),
            slots: vec![0; size as usize],
            cursors: permutations
                .iter()
                .map(|p| Cursor {
                    next: p.offset,
                    skip: p.skip,
                })
                .collect(),
            empty: size,
            wide,
            wide_from,
            wide_steps,
            tail_from,
            tail: Vec::new(),
            inverses: Vec::new(),
        }
    }

    /// Takes the turns of `turns` (exactly `size` of them, in schedule order), each
    /// phase of the fill in a loop of its own: scalar walks while more than `wide_from`
    /// (and `tail_from`) slots are empty, then eight-wide walks (in a function compiled
    /// for AVX2, so the walk inlines into the loop), then the tail computation. Every
    /// turn claims one slot, so each phase's length is known before it starts: no
    /// per-turn test of the phase.
    fn run(&mut self, mut turns: impl Iterator<Item = u32>) {
        let scalar_until = self.wide_from.max(self.tail_from);
        let scalar = self.empty.saturating_sub(scalar_until);
        for i in turns.by_ref().take(scalar as usize) {
            let cursor = self.cursors[i as usize];
            let slot = walk::first_empty_pairs(&self.filled, self.size, cursor.next, cursor.skip);
            self.claim(i, slot);
        }
        self.empty -= scalar;
        let wide = self.empty.saturating_sub(self.tail_from);
        match self.wide {
            Wide::None => debug_assert_eq!(wide, 0, "no wide phase without a wide walker"),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: Wide::Avx2 is only produced by Wide::detect after the run-time
            // check that the CPU supports AVX2.
            Wide::Avx2 => unsafe { self.wide_phase_avx2(&mut turns, wide) },
        }
        for i in turns {
            debug_assert!(self.empty > 0, "a turn needs an empty slot");
            self.tail_turn(i);
            self.empty -= 1;
        }
        debug_assert_eq!(self.empty, 0, "every slot is claimed");
    }

    /// The eight-wide phase of [`Self::run`]: `count` turns.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn wide_phase_avx2(&mut self, turns: &mut impl Iterator<Item = u32>, count: u32) {
        for i in turns.by_ref().take(count as usize) {
            let next = self.cursors[i as usize].next;
            let steps = &self.wide_steps[i as usize];
            let slot = walk::first_empty_avx2(&self.filled, self.size, next, steps);
            self.claim(i, slot);
        }
        self.empty -= count;
    }

    /// Backend `i` takes `slot`; its walk continues after it.
    #[inline]
    fn claim(&mut self, i: u32, slot: u32) {
        self.filled.set(slot);
        self.slots[slot as usize] = i;
        let cursor = &mut self.cursors[i as usize];
        // slot, skip < size < 2^31: the sum does not overflow.
        cursor.next = walk::reduce(slot + cursor.skip, self.size);
    }

    /// A turn near the end of the fill: among the few empty slots, claim the one that
    /// comes first in backend `i`'s walk from its cursor, found by computing each empty
    /// slot's distance along the walk, `(slot - cursor) * skip^-1 mod M`. Gives exactly
    /// the slot a walk would find (every slot the walk passes before it is filled), in
    /// O(empty) instead of about O(M / empty).
    fn tail_turn(&mut self, i: u32) {
        let size = self.size;
        if self.tail.is_empty() {
            self.tail = self.filled.empty_slots(size);
            debug_assert_eq!(self.tail.len(), self.empty as usize);
            self.inverses = vec![(0, 0); self.cursors.len()];
        }
        let cursor = self.cursors[i as usize];
        let (inverse, shoup) = self.inverse(i);
        let back = size - cursor.next; // adding it subtracts the cursor mod size
        let (mut best_distance, mut best_at) = (u32::MAX, 0);
        for (at, &slot) in self.tail.iter().enumerate() {
            let delta = walk::reduce(slot + back, size);
            let distance = mul_mod_shoup(delta, inverse, shoup, size);
            if distance < best_distance {
                (best_distance, best_at) = (distance, at);
            }
        }
        let slot = self.tail.swap_remove(best_at);
        debug_assert_eq!(
            u64::from(slot),
            (u64::from(cursor.next) + u64::from(best_distance) * u64::from(cursor.skip))
                % u64::from(size)
        );
        self.claim(i, slot);
    }

    /// `skip^-1 mod M` of backend `i` and its Shoup constant `floor(inverse * 2^32 / M)`,
    /// computed on first use.
    fn inverse(&mut self, i: u32) -> (u32, u32) {
        let cached = self.inverses[i as usize];
        if cached.0 != 0 {
            return cached;
        }
        let inverse = inverse_mod_prime(self.cursors[i as usize].skip, self.size);
        // inverse < size, so the quotient is < 2^32.
        #[expect(
            clippy::cast_possible_truncation,
            reason = "inverse < size, so the quotient is below 2^32"
        )]
        let shoup = ((u64::from(inverse) << 32) / u64::from(self.size)) as u32;
        self.inverses[i as usize] = (inverse, shoup);
        (inverse, shoup)
    }
}

/// `a * w mod m` for `a, w < m < 2^31`, with `shoup = floor(w * 2^32 / m)` (Shoup's
/// modular multiplication by a fixed factor: one high and two low multiplications).
#[inline]
fn mul_mod_shoup(a: u32, w: u32, shoup: u32, m: u32) -> u32 {
    let quotient = ((u64::from(a) * u64::from(shoup)) >> 32) as u32;
    // The true remainder a*w - quotient*m is in [0, 2m): wrapping arithmetic is exact.
    let r = a.wrapping_mul(w).wrapping_sub(quotient.wrapping_mul(m));
    if r >= m { r - m } else { r }
}

/// The inverse of `a` modulo the prime `m` (`1 <= a < m`), by the extended Euclidean
/// algorithm.
fn inverse_mod_prime(a: u32, m: u32) -> u32 {
    let (mut r0, mut r1) = (i64::from(m), i64::from(a));
    let (mut t0, mut t1) = (0_i64, 1_i64);
    while r1 != 0 {
        let q = r0 / r1;
        (r0, r1) = (r1, r0 - q * r1);
        (t0, t1) = (t1, t0 - q * t1);
    }
    debug_assert_eq!(r0, 1, "{a} is invertible modulo the prime {m}");
    // t0 is in (-m, m), so the remainder is in 0..m.
    u32::try_from(t0.rem_euclid(i64::from(m))).unwrap_or(0)
}

#[cfg(test)]
mod tests;
