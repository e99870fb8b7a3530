//! Rendezvous or highest-random-weight hashing: Thaler and Ravishankar, "Using
//! Name-Based Mappings to Increase Hit Rates", IEEE/ACM Transactions on Networking 6(1),
//! 1998.
//!
//! Every server scores the key, `score = hash(KEY + "|" + NAME)`, and the highest score
//! wins (a tie goes to the lower name). With unequal weights the score is the weighted
//! form `-w / ln(u)` (Schindelhauer and Schomaker, "Weighted distributed hash tables",
//! SPAA 2005; the "logarithmic method"), `u = (hash + 0.5) / 2^b` taken in `(0, 1)` for a
//! `b`-bit hash (for 64-bit hashes the top 53 bits, a double's precision), so server `i`
//! wins a share `w_i / sum(w)` of the keys. Weight 0 never wins.
//!
//! Adding a server moves only the keys it now wins; removing one moves only its own keys.
//! Memory: the names and weights. Lookup: one hash per server, O(N).

use super::{hashes::KeyHash, servers::Server};

/// Bytes of `KEY|NAME` built on the stack before a lookup allocates.
const STACK_BYTES: usize = 256;

/// Rendezvous hashing over a server list (indices are positions in that list).
#[derive(Debug, Clone, PartialEq)]
pub struct Rendezvous {
    /// `(name bytes, weight, index in the server list)` of the servers with weight > 0,
    /// sorted by name.
    servers: Vec<(Box<[u8]>, u32, usize)>,
    weighted: bool,
    hash: KeyHash,
}

impl Rendezvous {
    /// Rendezvous over `servers` (distinct names, the caller checks), scoring with
    /// `hash`. `None` when no server has weight > 0.
    #[must_use]
    pub fn new(servers: &[Server], hash: KeyHash) -> Option<Self> {
        let mut active: Vec<(Box<[u8]>, u32, usize)> = servers
            .iter()
            .enumerate()
            .filter(|(_, s)| s.weight > 0)
            .map(|(i, s)| (s.name.as_bytes().into(), s.weight, i))
            .collect();
        active.sort_by(|a, b| a.0.cmp(&b.0));
        let first = active.first()?.1;
        let weighted = active.iter().any(|s| s.1 != first);
        Some(Self {
            servers: active,
            weighted,
            hash,
        })
    }

    /// Whether the weighted score is used (the weights are not all equal).
    #[must_use]
    pub fn is_weighted(&self) -> bool {
        self.weighted
    }

    /// The winner (server index) for `key`.
    #[must_use]
    pub fn lookup(&self, key: &str) -> usize {
        let mut stack = [0u8; STACK_BYTES];
        let mut heap = Vec::new();
        let mut best = (f64::NEG_INFINITY, 0_u64, 0_usize);
        for (name, weight, index) in &self.servers {
            let length = key.len() + 1 + name.len();
            let pair: &mut [u8] = if length <= STACK_BYTES {
                &mut stack[..length]
            } else {
                heap.resize(length, 0);
                &mut heap
            };
            pair[..key.len()].copy_from_slice(key.as_bytes());
            pair[key.len()] = b'|';
            pair[key.len() + 1..].copy_from_slice(name);
            let h = self.hash.bytes(pair);
            // Servers are visited in name order, so `>` keeps the lower name on a tie.
            if self.weighted {
                let score = weighted_score(h, self.hash.bits(), *weight);
                if score > best.0 {
                    best = (score, 0, *index);
                }
            } else if h > best.1 || best.0 == f64::NEG_INFINITY {
                best = (0.0, h, *index);
            }
        }
        best.2
    }

    /// Every server's score for `key`, in name order: `(server index, raw hash of
    /// KEY|NAME, score)`, the score being the raw hash (as a float) or, weighted,
    /// `-w / ln(u)`. The winner is the highest score, the first in name order on a tie
    /// ([`Rendezvous::lookup`]).
    #[must_use]
    pub fn scores(&self, key: &str) -> Vec<(usize, u64, f64)> {
        self.servers
            .iter()
            .map(|(name, weight, index)| {
                let mut pair = Vec::with_capacity(key.len() + 1 + name.len());
                pair.extend_from_slice(key.as_bytes());
                pair.push(b'|');
                pair.extend_from_slice(name);
                let h = self.hash.bytes(&pair);
                let score = if self.weighted {
                    weighted_score(h, self.hash.bits(), *weight)
                } else {
                    h as f64
                };
                (*index, h, score)
            })
            .collect()
    }

    /// Bytes the lookup reads: the names, weights and indices.
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        self.servers
            .iter()
            .map(|(name, _, _)| name.len() + size_of::<(Box<[u8]>, u32, usize)>())
            .sum()
    }
}

/// `-w / ln(u)` with `u = (hash + 0.5) / 2^bits` in `(0, 1)` (53 top bits for 64-bit).
#[must_use]
pub fn weighted_score(hash: u64, bits: u32, weight: u32) -> f64 {
    let u = if bits <= 32 {
        // Below 2^32: exact in a double.
        let h = hash as f64;
        (h + 0.5) / 4_294_967_296.0
    } else {
        // 53 bits: exact in a double.
        let h = (hash >> 11) as f64;
        (h + 0.5) / 9_007_199_254_740_992.0
    };
    -f64::from(weight) / u.ln()
}
