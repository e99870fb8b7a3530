//! Inputs and the reference implementation shared by the Maglev benchmarks.

use std::net::Ipv4Addr;

use lb_maglev::defaults::MAGLEV_SEED;
use lb_maglev::{Backend, Permutation};

/// The benchmarked configurations, (table size M, backends N): the default table with
/// 10 to 1,000 backends, and a ten times larger table with 10,000 (M about 65 N).
pub(crate) const CONFIGS: [(u32, u32); 4] = [
    (65_537, 10),
    (65_537, 100),
    (65_537, 1_000),
    (655_373, 10_000),
];

/// `n` IPv4 backends from the benchmarking range 198.18.0.0/15 (RFC 2544), in key
/// order, all weight 1, or weights 1..=10 cycling when `weighted`.
pub(crate) fn backends(n: u32, weighted: bool) -> Vec<Backend> {
    let base = u32::from(Ipv4Addr::new(198, 18, 0, 0));
    (0..n)
        .map(|i| {
            let weight = if weighted { i % 10 + 1 } else { 1 };
            Backend::new(Ipv4Addr::from(base + i), weight)
        })
        .collect()
}

/// The permutations `MaglevTable::build` uses for `backends` (already in key order).
pub(crate) fn permutations(backends: &[Backend], size: u32) -> Vec<Permutation> {
    backends
        .iter()
        .map(|b| Permutation::for_key(&b.key, size, MAGLEV_SEED))
        .collect()
}

/// The paper's pseudocode as published (Eisenbud et al., NSDI 2016, section 3.4,
/// Pseudocode 1), the way most implementations write it: `permutation[i][next[i]]`
/// computed as `(offset + next * skip) % M` in the probe loop and `entry[]` initialised
/// to -1 as the "empty" test, equal weights. The yardstick the builder is compared with
/// in the same run.
pub(crate) fn paper_reference(size: u32, permutations: &[Permutation]) -> Vec<i32> {
    let m = u64::from(size);
    let mut entry = vec![-1_i32; size as usize];
    let mut next = vec![0_u64; permutations.len()];
    let mut filled = 0;
    loop {
        for (i, p) in permutations.iter().enumerate() {
            let slot = |j: u64| {
                usize::try_from((u64::from(p.offset) + j * u64::from(p.skip)) % m).expect("fits")
            };
            let mut c = slot(next[i]);
            while entry[c] >= 0 {
                next[i] += 1;
                c = slot(next[i]);
            }
            entry[c] = i32::try_from(i).expect("fewer than 2^31 backends");
            next[i] += 1;
            filled += 1;
            if filled == size {
                return entry;
            }
        }
    }
}
