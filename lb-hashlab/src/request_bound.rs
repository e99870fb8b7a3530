//! Bounded load on requests beside bounded load on keys ([`super::bounded`]), and the
//! hottest key's server before and after: what the consistent-hashing tutorial's hot
//! key (one key with five times the average load) does to a ring, and which bound
//! relieves it.
//!
//! For every `epsilon` (the sweep, or the one `epsilon`) on the ring of the run's `V`:
//! the request load of the heaviest server over its fair share under a bound on keys
//! (`ceil((1 + epsilon) * keys * w / sum(w))` keys a server) and under a bound on
//! requests (`ceil((1 + epsilon) * requests * w / sum(w))` requests a server), the
//! share of requests served off their key's first server, and the keys whose requests
//! were split over several servers. A bound on keys counts a hot key once and leaves it
//! whole on its server; a bound on requests caps that server at `1 + epsilon` and sends
//! the rest of the hot key clockwise.

use std::fmt::Write as _;

use serde::Serialize;

use super::{
    bounded::{self, Shares},
    keys::KeySet,
    ring::Ring,
    servers::Server,
    stats::Balance,
};

/// Bounded load on requests, for workloads with request counts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestBoundReport {
    /// The ring's `V` (points per unit of weight).
    pub vnodes: u32,
    /// The heaviest server's requests over its fair share on the ring without a bound.
    pub ring_requests_max_avg: f64,
    /// One row per `epsilon`, increasing.
    pub rows: Vec<RequestBoundRow>,
    /// The most requested key, before and after.
    pub hot_key: HotKeyPlacement,
}

/// Both bounds at one `epsilon`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestBoundRow {
    /// `epsilon`.
    pub epsilon: f64,
    /// The cap on a server's load over its fair share, `1 + epsilon`.
    pub bound: f64,
    /// Heaviest request load over its fair share with keys bounded.
    pub key_bound_requests_max_avg: f64,
    /// Heaviest request load over its fair share with requests bounded.
    pub request_bound_requests_max_avg: f64,
    /// Requests bounded: the share of requests not on their key's first server.
    pub displaced_requests_fraction: f64,
    /// Requests bounded: keys whose requests went to more than one server.
    pub split_keys: u64,
}

/// The most requested key (the first in key order on a tie) under each placement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HotKeyPlacement {
    /// The key.
    pub key: String,
    /// Its requests.
    pub requests: u64,
    /// Its share of all requests.
    pub share: f64,
    /// Its requests over the average server load of the other requests (`--hot-key F`
    /// gives `F`).
    pub times_average: f64,
    /// The `epsilon` of both bounded placements.
    pub epsilon: f64,
    /// Before: the ring without a bound (the whole key on one server).
    pub ring: HotShare,
    /// Keys bounded: the key's server (the whole key).
    pub key_bound: HotShare,
    /// Requests bounded: every server that took some of the key's requests, in walk order.
    pub request_bound: Vec<HotShare>,
    /// Requests bounded: the heaviest server's load over its fair share.
    pub request_bound_max_avg: f64,
}

/// A server's part of the hot key.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HotShare {
    /// The server.
    pub server: String,
    /// The hot key's requests it serves.
    pub requests: u64,
    /// The server's whole request load over its fair share.
    pub load_avg: f64,
}

/// The report for `keys` (hashes `hashes`, the ring's) on `ring` over `servers`, at
/// every `epsilons` value (increasing, each > 0); the hot key's row at `epsilon`.
#[must_use]
pub fn report(
    ring: &Ring,
    servers: &[Server],
    hashes: &[u64],
    keys: &KeySet,
    epsilons: &[f64],
    epsilon: f64,
    vnodes: u32,
) -> RequestBoundReport {
    let counts = keys.counts();
    let weights: Vec<u32> = servers.iter().map(|s| s.weight).collect();
    let ring_owners: Vec<usize> = hashes.iter().map(|&h| ring.lookup(h)).collect();
    let ring_loads = whole_loads(servers.len(), &ring_owners, counts);
    let rows = epsilons
        .iter()
        .map(|&e| row(ring, servers, hashes, counts, e))
        .collect();
    let hot = hottest(counts);
    let key_owners = bounded::place(ring, servers, hashes, epsilon);
    let caps = bounded::request_capacities(servers, keys.requests(), epsilon);
    let shares = bounded::place_requests(ring, &caps, hashes, counts);
    let split_loads = split_loads(servers.len(), &shares);
    let fair = Fair::new(servers, keys.requests());
    let whole = |owners: &[usize]| {
        let server = owners[hot];
        let loads = whole_loads(servers.len(), owners, counts);
        fair.share(servers, server, counts[hot], loads[server])
    };
    let others = keys.requests() - counts[hot];
    let active = servers.iter().filter(|s| s.weight > 0).count().max(1);
    RequestBoundReport {
        vnodes,
        ring_requests_max_avg: Balance::of(&ring_loads, &weights).max_avg,
        rows,
        hot_key: HotKeyPlacement {
            key: keys.keys()[hot].clone(),
            requests: counts[hot],
            share: counts[hot] as f64 / keys.requests().max(1) as f64,
            times_average: counts[hot] as f64 / (others.max(1) as f64 / active as f64),
            epsilon,
            ring: whole(&ring_owners),
            key_bound: whole(&key_owners),
            request_bound: shares[hot]
                .iter()
                .map(|&(server, n)| fair.share(servers, server, n, split_loads[server]))
                .collect(),
            request_bound_max_avg: Balance::of(&split_loads, &weights).max_avg,
        },
    }
}

/// Both bounds at `epsilon`.
fn row(
    ring: &Ring,
    servers: &[Server],
    hashes: &[u64],
    counts: &[u64],
    epsilon: f64,
) -> RequestBoundRow {
    let weights: Vec<u32> = servers.iter().map(|s| s.weight).collect();
    let requests: u64 = counts.iter().sum();
    let key_owners = bounded::place(ring, servers, hashes, epsilon);
    let caps = bounded::request_capacities(servers, requests, epsilon);
    let shares = bounded::place_requests(ring, &caps, hashes, counts);
    let displaced: u64 = shares
        .iter()
        .zip(hashes)
        .flat_map(|(shares, &hash)| {
            let first = ring.lookup(hash);
            shares
                .iter()
                .filter(move |(s, _)| *s != first)
                .map(|(_, n)| n)
        })
        .sum();
    RequestBoundRow {
        epsilon,
        bound: 1.0 + epsilon,
        key_bound_requests_max_avg: Balance::of(
            &whole_loads(servers.len(), &key_owners, counts),
            &weights,
        )
        .max_avg,
        request_bound_requests_max_avg: Balance::of(&split_loads(servers.len(), &shares), &weights)
            .max_avg,
        displaced_requests_fraction: displaced as f64 / requests.max(1) as f64,
        split_keys: shares.iter().filter(|s| s.len() > 1).count() as u64,
    }
}

/// The index of the most requested key (the first on a tie).
fn hottest(counts: &[u64]) -> usize {
    (0..counts.len())
        .max_by_key(|&i| (counts[i], usize::MAX - i))
        .unwrap_or(0)
}

/// Requests per server when every key is whole on its owner.
fn whole_loads(servers: usize, owners: &[usize], counts: &[u64]) -> Vec<u64> {
    let mut loads = vec![0_u64; servers];
    for (&owner, &count) in owners.iter().zip(counts) {
        loads[owner] += count;
    }
    loads
}

/// Requests per server of split placements.
fn split_loads(servers: usize, shares: &[Shares]) -> Vec<u64> {
    let mut loads = vec![0_u64; servers];
    for &(server, n) in shares.iter().flatten() {
        loads[server] += n;
    }
    loads
}

/// Fair shares: `requests * w / sum(w)`.
struct Fair {
    requests: f64,
    weight: f64,
}

impl Fair {
    fn new(servers: &[Server], requests: u64) -> Self {
        Self {
            requests: requests as f64,
            weight: servers.iter().map(|s| f64::from(s.weight)).sum(),
        }
    }

    fn share(&self, servers: &[Server], server: usize, requests: u64, load: u64) -> HotShare {
        let fair = self.requests * f64::from(servers[server].weight) / self.weight;
        HotShare {
            server: servers[server].name.clone(),
            requests,
            load_avg: if fair > 0.0 { load as f64 / fair } else { 0.0 },
        }
    }
}

impl RequestBoundReport {
    /// The text form: the table by `epsilon`, then the hot key before and after.
    #[must_use]
    pub fn to_text(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "\nbounded load on requests (ring V={}): a bound on keys caps ceil((1+epsilon) \
             * keys * w/W) keys a server, a bound on requests ceil((1+epsilon) * requests * \
             w/W) requests",
            self.vnodes
        );
        let _ = writeln!(
            t,
            "ring without a bound: req max/avg {:.4}",
            self.ring_requests_max_avg
        );
        let _ = writeln!(
            t,
            "{:>8}  {:>9}  {:>22}  {:>26}  {:>18}  {:>10}",
            "epsilon",
            "1+epsilon",
            "keys bound: req max/avg",
            "requests bound: req max/avg",
            "displaced requests",
            "split keys"
        );
        for r in &self.rows {
            let _ = writeln!(
                t,
                "{:>8}  {:>9.2}  {:>22.4}  {:>26.4}  {:>17.2}%  {:>10}",
                r.epsilon,
                r.bound,
                r.key_bound_requests_max_avg,
                r.request_bound_requests_max_avg,
                r.displaced_requests_fraction * 100.0,
                r.split_keys
            );
        }
        self.hot_key.text(&mut t, self.vnodes);
        t
    }
}

impl HotKeyPlacement {
    fn text(&self, t: &mut String, vnodes: u32) {
        let _ = writeln!(
            t,
            "hot key {}: {} requests ({:.2}% of all; {:.2}x the average server load of the \
             other requests)",
            self.key,
            self.requests,
            self.share * 100.0,
            self.times_average
        );
        let whole = |s: &HotShare| format!("{}, at {:.4}x its fair share", s.server, s.load_avg);
        let _ = writeln!(t, "  before, ring V={vnodes}: {}", whole(&self.ring));
        let _ = writeln!(
            t,
            "  keys bounded (epsilon {}): {}",
            self.epsilon,
            whole(&self.key_bound)
        );
        let parts: Vec<String> = self
            .request_bound
            .iter()
            .map(|s| format!("{} {} ({:.4}x)", s.server, s.requests, s.load_avg))
            .collect();
        let _ = writeln!(
            t,
            "  requests bounded (epsilon {}): {}; heaviest server at {:.4}x",
            self.epsilon,
            parts.join(", "),
            self.request_bound_max_avg
        );
    }
}
