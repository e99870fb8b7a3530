//! `--explain KEY`: the whole decision for one key in every scheme, step by step, as
//! the tutorial's steppers show it: mod-N's division, the ring's binary search and
//! wrap-around (with the key's preference list), every rendezvous score raw and in 0-1,
//! jump's jumps, Maglev's slot and the entry of the owner's permutation that claimed it,
//! and bounded load's walk past full servers.
//!
//! Bounded load is an assignment, not a function of one key: the key is placed after
//! the keys before it in the run's key order (after all of them when it is not one).

use std::fmt::Write as _;

use serde::Serialize;

use super::{
    bounded,
    jump::{JumpStep, jump_steps},
    maglev::backend_key,
    ring::Ring,
    scheme::{BuildError, Params, Scheme, SchemeKind},
    servers::Server,
};
use lb_maglev::Permutation;

/// Walk steps of bounded load shown before the list is cut.
const MAX_WALK: usize = 64;
/// Permutation entries of Maglev shown at most.
const MAX_ENTRIES: u32 = 8;

/// One key's decision in every scheme.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    /// The key.
    pub key: String,
    /// The key hash (`--hash` name).
    pub hash_name: String,
    /// The key's hash as the schemes see it (mod `space` when there is one).
    pub hash: u64,
    /// The hash space `0..space` of a worked example.
    pub space: Option<u64>,
    /// One entry per scheme, in report order.
    pub schemes: Vec<SchemeSteps>,
}

/// One scheme's decision.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SchemeSteps {
    /// Scheme name.
    pub scheme: String,
    /// The server chosen.
    pub owner: String,
    /// How.
    pub steps: Steps,
}

/// The steps of one scheme; in JSON `{"ring": {...}}` and so on.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Steps {
    /// `hash mod N`.
    ModN {
        /// `N`.
        buckets: usize,
        /// `hash mod N`.
        bucket: usize,
    },
    /// The ring's binary search for the first point `>=` the hash.
    Ring(RingSteps),
    /// Every server's score.
    Rendezvous {
        /// In name order.
        scores: Vec<Score>,
        /// Whether scores are weighted (`-w / ln(u)`).
        weighted: bool,
    },
    /// Jump's loop.
    Jump {
        /// Buckets.
        buckets: u32,
        /// Every iteration.
        steps: Vec<JumpStep>,
    },
    /// Maglev's slot and permutation.
    Maglev(MaglevSteps),
    /// Bounded load's walk.
    Bounded(BoundedSteps),
}

/// The ring's search.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RingSteps {
    /// The key hash searched for (ketama and nginx hash keys their own way).
    pub hash: u64,
    /// Points on the ring.
    pub points: usize,
    /// Every probe of the binary search.
    pub probes: Vec<Probe>,
    /// The index the search ends at (= `points` when past the last point).
    pub end: usize,
    /// Whether it wrapped to point 0.
    pub wrapped: bool,
    /// The chosen point's index and position.
    pub point: usize,
    /// Its position.
    pub position: u64,
    /// The first distinct servers clockwise (the preference list, up to 3).
    pub preference: Vec<String>,
}

/// One probe of a binary search over sorted points.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Probe {
    /// Lower bound before the probe.
    pub lo: usize,
    /// Upper bound (exclusive) before the probe.
    pub hi: usize,
    /// The probed index, `(lo + hi) / 2`.
    pub mid: usize,
    /// Its position.
    pub position: u64,
    /// Its server.
    pub server: String,
}

/// One rendezvous score.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Score {
    /// The server.
    pub server: String,
    /// `hash("KEY|NAME")`.
    pub raw: u64,
    /// `raw / 2^bits`, in `[0, 1)`.
    pub normalised: f64,
    /// The weighted score `-w / ln(u)` when weights differ.
    pub weighted: Option<f64>,
}

/// Maglev's lookup and where the slot came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MaglevSteps {
    /// `M`.
    pub size: u32,
    /// `hash mod M`.
    pub slot: u32,
    /// The owner's permutation offset.
    pub offset: u32,
    /// Its skip.
    pub skip: u32,
    /// `j` with `(offset + j * skip) mod M = slot`: the owner's `j`-th preference.
    pub entry: u32,
    /// The owner's first preferences, entries `0..` (at most 8).
    pub first_entries: Vec<u32>,
}

/// Bounded load's capacity and walk.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BoundedSteps {
    /// Keys being placed (`m`).
    pub keys: usize,
    /// `1 + epsilon`.
    pub factor: f64,
    /// Points visited, first to last (the last has room).
    pub walk: Vec<WalkStep>,
}

/// One point of bounded load's walk.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WalkStep {
    /// Point index.
    pub point: usize,
    /// Its position.
    pub position: u64,
    /// Its server.
    pub server: String,
    /// The server's load before this key.
    pub load: u64,
    /// Its capacity.
    pub capacity: u64,
}

/// Explains `key` (hash `hash`, from [`Params::key_hash`]) for every scheme of `kinds`
/// on `servers`; `keys` and `hashes` are the run's keys (bounded load's placement).
///
/// # Errors
/// A scheme that cannot be built for `servers` ([`BuildError`]).
pub fn explain(
    key: &str,
    servers: &[Server],
    kinds: &[SchemeKind],
    params: &Params,
    keys: &[String],
    hashes: &[u64],
) -> Result<Explanation, (SchemeKind, BuildError)> {
    let hash = params.key_hash(key);
    let mut schemes = Vec::new();
    for &kind in kinds {
        let scheme = Scheme::build(kind, servers, params).map_err(|e| (kind, e))?;
        let (owner, steps) = match &scheme {
            Scheme::ModN(m) => {
                let bucket = m.lookup(hash);
                let buckets = servers.len();
                (bucket, Steps::ModN { buckets, bucket })
            }
            Scheme::Ring(ring) => {
                let steps = ring_steps(ring, hash, servers);
                (ring.lookup(hash), Steps::Ring(steps))
            }
            Scheme::Ketama(ring) => {
                let h = super::ketama::key_hash(key.as_bytes());
                (ring.lookup(h), Steps::Ring(ring_steps(ring, h, servers)))
            }
            Scheme::Nginx(ring) => {
                let h = super::nginx::key_hash(key.as_bytes());
                (ring.lookup(h), Steps::Ring(ring_steps(ring, h, servers)))
            }
            Scheme::Rendezvous(r) => rendezvous_steps(r, key, servers, params),
            Scheme::Jump(j) => {
                let buckets = u32::try_from(servers.len()).unwrap_or(u32::MAX);
                (
                    j.lookup(hash),
                    Steps::Jump {
                        buckets,
                        steps: jump_steps(hash, buckets),
                    },
                )
            }
            Scheme::Maglev(m) => {
                let owner = m.lookup(hash);
                (
                    owner,
                    Steps::Maglev(maglev_steps(
                        m.table().size(),
                        hash,
                        &servers[owner],
                        params,
                    )),
                )
            }
            Scheme::Bounded { ring, epsilon, .. } => {
                let steps = bounded_steps(ring, servers, *epsilon, key, hash, keys, hashes);
                let owner = steps
                    .walk
                    .last()
                    .map_or(0, |w| index_of(servers, &w.server));
                (owner, Steps::Bounded(steps))
            }
        };
        schemes.push(SchemeSteps {
            scheme: kind.name().to_owned(),
            owner: servers[owner].name.clone(),
            steps,
        });
    }
    Ok(Explanation {
        key: key.to_owned(),
        hash_name: params.hash.name().to_owned(),
        hash,
        space: params.space,
        schemes,
    })
}

fn index_of(servers: &[Server], name: &str) -> usize {
    servers.iter().position(|s| s.name == name).unwrap_or(0)
}

/// The tutorial's binary search: `lo = 0, hi = P`; while `lo < hi`, probe
/// `mid = (lo + hi) / 2`: a point below the hash moves `lo` past it, else `hi` to it.
fn ring_steps(ring: &Ring, hash: u64, servers: &[Server]) -> RingSteps {
    let (positions, owners) = ring.points_and_owners();
    let name = |i: usize| servers[owners[i] as usize].name.clone();
    let (mut lo, mut hi) = (0, positions.len());
    let mut probes = Vec::new();
    while lo < hi {
        let mid = usize::midpoint(lo, hi);
        probes.push(Probe {
            lo,
            hi,
            mid,
            position: positions[mid],
            server: name(mid),
        });
        if positions[mid] < hash {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    let wrapped = lo == positions.len();
    let point = if wrapped { 0 } else { lo };
    RingSteps {
        hash,
        points: positions.len(),
        probes,
        end: lo,
        wrapped,
        point,
        position: positions[point],
        preference: ring
            .preference(hash, 3)
            .into_iter()
            .map(|i| servers[i].name.clone())
            .collect(),
    }
}

fn rendezvous_steps(
    r: &super::rendezvous::Rendezvous,
    key: &str,
    servers: &[Server],
    params: &Params,
) -> (usize, Steps) {
    let scale = 2_f64.powi(i32::try_from(params.hash.bits()).unwrap_or(64));
    let weighted = r.is_weighted();
    let scores = r
        .scores(key)
        .into_iter()
        .map(|(index, raw, score)| Score {
            server: servers[index].name.clone(),
            raw,
            normalised: raw as f64 / scale,
            weighted: weighted.then_some(score),
        })
        .collect();
    (r.lookup(key), Steps::Rendezvous { scores, weighted })
}

fn maglev_steps(size: u32, hash: u64, owner: &Server, params: &Params) -> MaglevSteps {
    let slot = u32::try_from(hash % u64::from(size)).unwrap_or(0);
    let p = Permutation::for_key(&backend_key(&owner.name), size, params.maglev_seed);
    // j = (slot - offset) * skip^-1 mod M, M prime (Fermat: skip^-1 = skip^(M-2)).
    let m = u64::from(size);
    let inverse = pow_mod(u64::from(p.skip), m - 2, m);
    let diff = (u64::from(slot) + m - u64::from(p.offset)) % m;
    let entry = u32::try_from(diff * inverse % m).unwrap_or(0);
    MaglevSteps {
        size,
        slot,
        offset: p.offset,
        skip: p.skip,
        entry,
        first_entries: (0..=entry.min(MAX_ENTRIES - 1))
            .map(|j| p.entry(j, size))
            .collect(),
    }
}

/// `base^exp mod m` (`m` below 2^32, so products fit a `u64`).
fn pow_mod(mut base: u64, mut exp: u64, m: u64) -> u64 {
    let mut result = 1 % m;
    base %= m;
    while exp > 0 {
        if exp & 1 == 1 {
            result = result * base % m;
        }
        base = base * base % m;
        exp >>= 1;
    }
    result
}

/// Replays bounded load's placement up to `key` and records its walk.
fn bounded_steps(
    ring: &Ring,
    servers: &[Server],
    epsilon: f64,
    key: &str,
    hash: u64,
    keys: &[String],
    hashes: &[u64],
) -> BoundedSteps {
    let before = keys.iter().position(|k| k == key).unwrap_or(keys.len());
    let m = keys.len() + usize::from(before == keys.len());
    let caps = bounded::capacities(servers, m, epsilon);
    let owners = bounded::place_with(ring, &caps, &hashes[..before]);
    let mut loads = vec![0_u64; servers.len()];
    for owner in owners {
        loads[owner] += 1;
    }
    let (positions, point_owners) = ring.points_and_owners();
    let start = ring.first_point(hash);
    let mut walk = Vec::new();
    for offset in 0..positions.len() {
        let point = (start + offset) % positions.len();
        let server = point_owners[point] as usize;
        walk.push(WalkStep {
            point,
            position: positions[point],
            server: servers[server].name.clone(),
            load: loads[server],
            capacity: caps[server],
        });
        if loads[server] < caps[server] || walk.len() == MAX_WALK {
            break;
        }
    }
    BoundedSteps {
        keys: m,
        factor: 1.0 + epsilon,
        walk,
    }
}

impl Explanation {
    /// The text form: one block per scheme.
    #[must_use]
    pub fn to_text(&self) -> String {
        let mut t = String::new();
        let space = self.space.map_or_else(String::new, |s| {
            format!(" mod {s} (hash space 0-{})", s - 1)
        });
        let _ = writeln!(
            t,
            "key {}: hash {}{} = {}",
            self.key, self.hash_name, space, self.hash
        );
        for s in &self.schemes {
            t.push('\n');
            match &s.steps {
                Steps::ModN { buckets, bucket } => {
                    let _ = writeln!(
                        t,
                        "modn: {} mod {buckets} = {bucket}: bucket {bucket} is {}",
                        self.hash, s.owner
                    );
                }
                Steps::Ring(r) => ring_text(&mut t, &s.scheme, r, &s.owner),
                Steps::Rendezvous { scores, weighted } => {
                    rendezvous_text(&mut t, &self.key, scores, *weighted, &s.owner);
                }
                Steps::Jump { buckets, steps } => {
                    jump_text(&mut t, self.hash, *buckets, steps, &s.owner);
                }
                Steps::Maglev(m) => maglev_text(&mut t, self.hash, m, &s.owner),
                Steps::Bounded(b) => bounded_text(&mut t, b, &s.owner),
            }
        }
        t
    }
}

fn ring_text(t: &mut String, scheme: &str, r: &RingSteps, owner: &str) {
    let hash = r.hash;
    let own = match scheme {
        "ketama" => " (ketama's key hash: MD5, first 4 bytes)",
        "nginx" => " (nginx's key hash: CRC-32)",
        _ => "",
    };
    let _ = writeln!(
        t,
        "{scheme}: the first of {} sorted points at or after {hash}{own} (binary search)",
        r.points
    );
    for p in &r.probes {
        let (verdict, next) = if p.position < hash {
            ("<", format!("lo = {}", p.mid + 1))
        } else {
            (">=", format!("hi = {}", p.mid))
        };
        let _ = writeln!(
            t,
            "  lo={} hi={} mid={}: point {} at {} ({}) {verdict} {hash}: {next}",
            p.lo, p.hi, p.mid, p.mid, p.position, p.server
        );
    }
    if r.wrapped {
        let _ = writeln!(
            t,
            "  {hash} is past the last point ({} of {}): wrap around to point 0 at {} ({owner})",
            r.end, r.points, r.position
        );
    } else {
        let _ = writeln!(t, "  -> point {} at {} ({owner})", r.point, r.position);
    }
    let _ = writeln!(
        t,
        "  preference list (next distinct servers clockwise): {}",
        r.preference.join(", ")
    );
}

fn rendezvous_text(t: &mut String, key: &str, scores: &[Score], weighted: bool, owner: &str) {
    let _ = writeln!(
        t,
        "rendezvous: score = hash(\"{key}|NAME\"), in 0-1 divided by 2^bits; the highest wins{}",
        if weighted {
            " (weighted: -w/ln(u))"
        } else {
            ""
        }
    );
    for s in scores {
        let _ = write!(t, "  {:<12} {:>20}  {:.6}", s.server, s.raw, s.normalised);
        if let Some(w) = s.weighted {
            let _ = write!(t, "  weighted {w:.6}");
        }
        if s.server == owner {
            t.push_str("  <- highest");
        }
        t.push('\n');
    }
}

fn jump_text(t: &mut String, hash: u64, buckets: u32, steps: &[JumpStep], owner: &str) {
    let _ = writeln!(
        t,
        "jump: key {hash}, {buckets} buckets; each step: key = key * 2862933555777941757 + 1, \
         j = floor((b + 1) * 2^31 / ((key >> 33) + 1))"
    );
    for s in steps {
        let verdict = if s.next < u64::from(buckets) {
            "jump"
        } else {
            "past the last bucket: stop"
        };
        let _ = writeln!(
            t,
            "  b={} key={} j={}: {verdict}",
            s.bucket, s.state, s.next
        );
    }
    let bucket = steps.last().map_or(0, |s| s.bucket);
    let _ = writeln!(t, "  -> bucket {bucket} is {owner}");
}

fn maglev_text(t: &mut String, hash: u64, m: &MaglevSteps, owner: &str) {
    let _ = writeln!(
        t,
        "maglev: slot = {hash} mod {} = {}; table[{}] = {owner}",
        m.size, m.slot, m.slot
    );
    let entries: Vec<String> = m.first_entries.iter().map(u32::to_string).collect();
    let more = if m.entry as usize >= m.first_entries.len() {
        ", ..."
    } else {
        ""
    };
    let _ = writeln!(
        t,
        "  {owner}'s permutation (offset {}, skip {}): entries {}{more}",
        m.offset,
        m.skip,
        entries.join(", ")
    );
    let _ = writeln!(
        t,
        "  slot {} is its entry {}: ({} + {} * {}) mod {} (the entries before it were taken \
         first)",
        m.slot, m.entry, m.offset, m.entry, m.skip, m.size
    );
}

fn bounded_text(t: &mut String, b: &BoundedSteps, owner: &str) {
    let _ = writeln!(
        t,
        "bounded: {} keys, capacity ceil({} * m * w / sum(w)); walk clockwise past full servers",
        b.keys, b.factor
    );
    for w in &b.walk {
        let verdict = if w.load < w.capacity { "room" } else { "full" };
        let _ = writeln!(
            t,
            "  point {} at {} ({}): {}/{} {verdict}",
            w.point, w.position, w.server, w.load, w.capacity
        );
    }
    let _ = writeln!(t, "  -> {owner}");
}
