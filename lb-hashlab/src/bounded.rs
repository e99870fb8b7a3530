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
//!
//! # On requests
//! The paper's balls need not be keys: [`place_requests`] places every request (a
//! connection, as HAProxy's `hash-balance-factor` and Vimeo's deployment count them).
//! Each server holds at most `ceil((1 + epsilon) * R * w / sum(w))` of the `R`
//! requests; keys come in input order and a key's requests one after another: they fill
//! the key's first server up to its capacity, and the rest walk clockwise to the next
//! servers with room. A hot key is thereby split over several servers, which a bound on
//! keys cannot do (it counts the hot key once).

use super::{ring::Ring, servers::Server};

/// Per-server capacities: `ceil((1 + epsilon) * keys * w / sum(w))` (0 for weight 0).
/// `epsilon` must be finite and > 0 (the caller checks).
#[must_use]
pub fn capacities(servers: &[Server], keys: usize, epsilon: f64) -> Vec<u64> {
    capacities_of(servers, keys as f64, epsilon)
}

/// Per-server capacities in requests: `ceil((1 + epsilon) * requests * w / sum(w))`
/// (0 for weight 0). `epsilon` must be finite and > 0 (the caller checks).
#[must_use]
pub fn request_capacities(servers: &[Server], requests: u64, epsilon: f64) -> Vec<u64> {
    capacities_of(servers, requests as f64, epsilon)
}

fn capacities_of(servers: &[Server], balls: f64, epsilon: f64) -> Vec<u64> {
    let total: f64 = servers.iter().map(|s| f64::from(s.weight)).sum();
    servers
        .iter()
        .map(|s| {
            let cap = ((1.0 + epsilon) * balls * f64::from(s.weight) / total).ceil();
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "a non-negative capacity of at most (1 + epsilon) * balls + 1"
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

/// Where one key's requests went: `(server index, requests)`, in the order the walk
/// filled them (the key's first server first when it had room).
pub type Shares = Vec<(usize, u64)>;

/// Places the requests of keys of hashes `hashes` and request counts `counts` (input
/// order) on `ring` with request capacities `caps` (summing to at least the requests;
/// [`request_capacities`]). Returns each key's [`Shares`]; a key of 0 requests gets its
/// first server with 0.
#[must_use]
pub fn place_requests(ring: &Ring, caps: &[u64], hashes: &[u64], counts: &[u64]) -> Vec<Shares> {
    let mut loads = vec![0_u64; caps.len()];
    hashes
        .iter()
        .zip(counts)
        .map(|(&hash, &count)| {
            if count == 0 {
                return vec![(ring.lookup(hash), 0)];
            }
            let mut left = count;
            let mut shares = Shares::new();
            for server in ring.walk(hash) {
                let take = left.min(caps[server].saturating_sub(loads[server]));
                if take > 0 {
                    loads[server] += take;
                    left -= take;
                    shares.push((server, take));
                }
                if left == 0 {
                    break;
                }
            }
            // Unreachable with enough capacity; otherwise the rest stays on the first server.
            if left > 0 {
                let first = ring.lookup(hash);
                loads[first] += left;
                shares.push((first, left));
            }
            shares
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// S0 at 10, S1 at 20, S2 at 30.
    fn three() -> (Ring, Vec<Server>) {
        let ring = Ring::with_points(vec![(10, 0), (20, 1), (30, 2)]).unwrap();
        let servers = (0..3).map(|i| Server::new(format!("S{i}"), 1)).collect();
        (ring, servers)
    }

    #[test]
    fn a_hot_key_fills_its_server_and_walks_on() {
        // k1 at 5 (S0), k2 at 15 (S1), k3 at 25 (S2), one request each; the hot key at 5
        // with 15 requests. R = 18, epsilon 0.5: capacity ceil(1.5 * 18 / 3) = 9.
        let (ring, servers) = three();
        let caps = request_capacities(&servers, 18, 0.5);
        assert_eq!(caps, [9, 9, 9]);
        let shares = place_requests(&ring, &caps, &[5, 15, 25, 5], &[1, 1, 1, 15]);
        assert_eq!(shares[..3], [vec![(0, 1)], vec![(1, 1)], vec![(2, 1)]]);
        // S0 has room for 8 of the 15, S1 (next clockwise) takes the other 7.
        assert_eq!(shares[3], [(0, 8), (1, 7)]);
    }

    #[test]
    fn a_key_bound_counts_the_hot_key_once() {
        // Four keys, epsilon 0.5: ceil(1.5 * 4 / 3) = 2 keys a server, so the hot key
        // joins k1 on S0 with all its requests.
        let (ring, servers) = three();
        assert_eq!(capacities(&servers, 4, 0.5), [2, 2, 2]);
        assert_eq!(place(&ring, &servers, &[5, 15, 25, 5], 0.5), [0, 1, 2, 0]);
    }

    #[test]
    fn full_servers_are_walked_past_and_zero_counts_stay() {
        // Capacity 2 each: the first key fills S0 (2) and S1 (2) and leaves 1 on S2.
        let (ring, _) = three();
        let shares = place_requests(&ring, &[2, 2, 2], &[5, 35, 8], &[5, 0, 1]);
        assert_eq!(shares[0], [(0, 2), (1, 2), (2, 1)]);
        assert_eq!(shares[1], [(0, 0)]);
        assert_eq!(shares[2], [(2, 1)]);
    }
}
