//! Weights to slot counts: how many slots each backend owns in a table of `M` slots.
//!
//! # Scheme
//! The builder decides every backend's slot count (its *quota*) before filling, then the
//! fill loop lets each backend claim exactly its quota (see [`fill`](super::fill)). The
//! quotas apportion `M` in proportion to the weights, `ideal_i = M * w_i / W` with
//! `W = sum(w)`, by the largest-remainder method (Hamilton):
//! 1. A backend with weight 0 (drained) gets 0 slots.
//! 2. Every backend with weight > 0 gets at least one slot: a backend whose ideal share
//!    is below one slot is raised to exactly 1 and leaves the apportionment (smallest
//!    weights first, re-checking with the remaining slots and weight, so the result does
//!    not depend on the order). This is why `M >= N` is required, and the table never
//!    starves a live backend: with weights 1 : 1,000,000 in 65,537 slots the weight-1
//!    backend gets 1 slot, the other 65,536 (BR-01.T2).
//! 3. The remaining `M'` slots go to the remaining backends (total weight `W'`):
//!    `floor(M' * w_i / W')` each, then one more each to the `M' - sum` backends with the
//!    largest remainders `M' * w_i mod W'`, ties to the backend that sorts first.
//!
//! # Bounds
//! With `F` backends raised in step 2, every backend's quota is within `1 + F` slots of
//! its ideal `M * w_i / W` (less than one slot when `F = 0`, which holds whenever every
//! ideal share is at least one slot). The bound the tests hold the builder to, every
//! backend within 0.5% of `M` of its ideal, therefore holds whenever `1 + F <= 0.005 * M` (for `M = 65,537`: up to
//! 326 backends below one slot). Whenever `F > 0` the table carries a warning naming
//! the raised backends. Equal weights give `floor(M/N)` or `ceil(M/N)`,
//! the `M mod N` first backends getting the larger count, as in the paper's unweighted
//! round robin. Only weight ratios matter: multiplying all weights by a constant gives
//! the same quotas (all comparisons are exact integer cross-multiplications), so
//! weights (1, 10), (100, 1000) and (7, 70) give byte-identical tables: weights are
//! ratios, never absolute slot counts that the operator must pre-scale (BR-01.T1).
//!
//! All arithmetic is in `u128`: no overflow for any `u32` weights and table size.

/// The outcome of apportioning a table among weighted backends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Quotas {
    /// Slots per backend, parallel to the weights given; sums to the table size when any
    /// weight is > 0, else all zero.
    pub(crate) quotas: Vec<u32>,
    /// Indices of the backends raised to one slot because their ideal share was below
    /// one slot (step 2), in index order.
    pub(crate) raised: Vec<usize>,
}

/// Apportions `size` slots to backends with `weights` (see the module documentation).
///
/// Preconditions (checked by the caller): `size >= 1` and the number of weights > 0 is at
/// most `size`.
pub(crate) fn apportion(weights: &[u32], size: u32) -> Quotas {
    let mut quotas = vec![0_u32; weights.len()];
    let mut raised = Vec::new();
    let total: u128 = weights.iter().map(|&w| u128::from(w)).sum();
    if total == 0 {
        return Quotas { quotas, raised };
    }
    let active = weights.iter().filter(|&&w| w > 0).count();
    debug_assert!(active <= size as usize, "{active} backends, {size} slots");

    // Step 2: raise backends whose ideal share is below one slot, smallest weight first.
    let mut slots_left = u128::from(size);
    let mut weight_left = total;
    let min_weight = weights
        .iter()
        .copied()
        .filter(|&w| w > 0)
        .min()
        .unwrap_or(1);
    if slots_left * u128::from(min_weight) < weight_left {
        let mut by_weight: Vec<usize> = (0..weights.len()).filter(|&i| weights[i] > 0).collect();
        by_weight.sort_unstable_by_key(|&i| (weights[i], i));
        for i in by_weight {
            let w = u128::from(weights[i]);
            // ideal = slots_left * w / weight_left < 1; the last backend never qualifies
            // (weight_left = w and slots_left >= 1), so weight_left stays > 0.
            if slots_left * w >= weight_left {
                break;
            }
            quotas[i] = 1;
            raised.push(i);
            slots_left -= 1;
            weight_left -= w;
        }
        raised.sort_unstable();
    }

    // Step 3: largest remainder among the others.
    let mut assigned = 0_u128;
    let mut remainders: Vec<(u128, usize)> = Vec::new();
    for (i, &w) in weights.iter().enumerate() {
        if w == 0 || raised.binary_search(&i).is_ok() {
            continue;
        }
        let share = slots_left * u128::from(w);
        let quota = share / weight_left;
        // quota <= slots_left <= size.
        quotas[i] = u32::try_from(quota).unwrap_or(u32::MAX);
        assigned += quota;
        remainders.push((share % weight_left, i));
    }
    let leftover = (slots_left - assigned) as usize;
    debug_assert!(leftover < remainders.len().max(1));
    if leftover > 0 {
        // Largest remainder first, ties to the smaller index.
        let by_priority = |a: &(u128, usize), b: &(u128, usize)| b.0.cmp(&a.0).then(a.1.cmp(&b.1));
        if leftover < remainders.len() {
            remainders.select_nth_unstable_by(leftover - 1, by_priority);
        }
        for &(_, i) in &remainders[..leftover] {
            quotas[i] += 1;
        }
    }
    Quotas { quotas, raised }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quotas(weights: &[u32], size: u32) -> Vec<u32> {
        let q = apportion(weights, size);
        if weights.iter().any(|&w| w > 0) {
            assert_eq!(
                q.quotas.iter().map(|&x| u64::from(x)).sum::<u64>(),
                u64::from(size)
            );
        }
        q.quotas
    }

    #[test]
    fn equal_weights_give_floor_or_ceil_first_backends_first() {
        assert_eq!(quotas(&[1, 1, 1], 7), [3, 2, 2]);
        assert_eq!(quotas(&[5, 5, 5, 5], 11), [3, 3, 3, 2]);
        let q = quotas(&[u32::MAX; 64], 65_537);
        assert_eq!(q[0], 1_025);
        assert!(q[1..].iter().all(|&x| x == 1_024));
    }

    #[test]
    fn drained_backends_get_nothing() {
        assert_eq!(quotas(&[1, 0, 1], 65_537), [32_769, 0, 32_768]);
        assert_eq!(quotas(&[0, 0], 7), [0, 0]);
        assert_eq!(quotas(&[], 7), Vec::<u32>::new());
    }

    #[test]
    fn ratios_only() {
        let base = quotas(&[1, 10], 65_537);
        assert_eq!(base, [5_958, 59_579]);
        assert_eq!(quotas(&[100, 1_000], 65_537), base);
        assert_eq!(quotas(&[7, 70], 65_537), base);
        assert_eq!(quotas(&[429_496_729, u32::MAX - 5], 65_537), base);
    }

    #[test]
    fn tiny_shares_are_raised_to_one_slot() {
        let q = apportion(&[1, 1_000_000], 65_537);
        assert_eq!(q.quotas, [1, 65_536]);
        assert_eq!(q.raised, [0]);
        // Raising the smallest shrinks the others' shares; the next smallest is
        // re-checked against what is left.
        let q = apportion(&[1, 1, 2, 1_000], 8);
        assert_eq!(q.raised, [0, 1, 2]);
        assert_eq!(q.quotas, [1, 1, 1, 5]);
        let q = apportion(&[1, u32::MAX, u32::MAX], 3);
        assert_eq!(q.quotas, [1, 1, 1]);
    }

    #[test]
    fn largest_remainders_win_the_leftover() {
        // ideal: 10 * (1, 2, 3, 4) / 10 = exact.
        assert_eq!(quotas(&[1, 2, 3, 4], 10), [1, 2, 3, 4]);
        // ideal 7 * (1, 1, 3) / 5 = 1.4, 1.4, 4.2 -> 1, 1, 4 + leftover 1 to index 0.
        assert_eq!(quotas(&[1, 1, 3], 7), [2, 1, 4]);
        // ideal 11 * (2, 3) / 5 = 4.4, 6.6 -> 4, 7.
        assert_eq!(quotas(&[2, 3], 11), [4, 7]);
    }
}
