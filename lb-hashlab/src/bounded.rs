//! Consistent hashing with bounded loads: Mirrokni, Thorup and Zadimoghaddam,
//! "Consistent Hashing with Bounded Loads", SODA 2018 (arXiv:1608.01350, 2016), on the
//! ring of [`super::ring`].
//!
//! Every server holds at most `ceil((1 + epsilon) * m / n)` of the `m` keys being placed
//! (weighted: `ceil((1 + epsilon) * m * w / sum(w))`). Keys are placed in input order; a
//! key whose first server is full walks clockwise, point by point, to the next server
//! with room. The capacities sum to more than `m`, so every key finds one. The result is
//! an assignment, not a function of the key alone: a lookup needs the placement (here an
//! array of `m` owners), and a change can move keys between servers that stayed (the
//! cascade the paper bounds by `O(1 / epsilon^2)` moves per change).

use super::{ring::Ring, servers::Server};

/// Per-server capacities: `ceil((1 + epsilon) * keys * w / sum(w))` (0 for weight 0).
/// `epsilon` must be finite and > 0 (the caller checks).
#[must_use]
pub fn capacities(servers: &[Server], keys: usize, epsilon: f64) -> Vec<u64> {
    let total: f64 = servers.iter().map(|s| f64::from(s.weight)).sum();
    servers
        .iter()
        .map(|s| {
            let cap = ((1.0 + epsilon) * keys as f64 * f64::from(s.weight) / total).ceil();
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "a non-negative capacity of at most (1 + epsilon) * keys + 1"
            )]
            let cap = cap as u64;
            cap
        })
        .collect()
}

/// Places keys of hashes `hashes` (input order) on `ring`, built from `servers`, with
/// capacity factor `1 + epsilon`. Returns the owner (server index) of each key.
#[must_use]
pub fn place(ring: &Ring, servers: &[Server], hashes: &[u64], epsilon: f64) -> Vec<usize> {
    place_with(ring, &capacities(servers, hashes.len(), epsilon), hashes)
}

/// Places keys of hashes `hashes` (input order) on `ring` with capacities `caps` (one
/// per server, summing to at least `hashes.len()`).
#[must_use]
pub fn place_with(ring: &Ring, caps: &[u64], hashes: &[u64]) -> Vec<usize> {
    let mut loads = vec![0_u64; caps.len()];
    hashes
        .iter()
        .map(|&hash| {
            let owner = ring
                .walk(hash)
                .find(|&server| loads[server] < caps[server])
                // Unreachable: the ring's servers have capacity for more than m keys.
                .unwrap_or_else(|| ring.lookup(hash));
            loads[owner] += 1;
            owner
        })
        .collect()
}
