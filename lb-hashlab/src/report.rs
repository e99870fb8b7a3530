//! What `lb hash` prints: [`LabReport`] and its parts, serialised as they are by `--json`,
//! and their text form ([`LabReport::to_text`]). Fractions are in `[0, 1]`; the text
//! prints them as percentages.

use std::fmt::Write as _;

use serde::Serialize;

use super::{
    servers::Server,
    stats::Balance,
    theory::{self, Ratio},
};

/// The whole report of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LabReport {
    /// The key hash (`--hash` name).
    pub hash: String,
    /// Its width, 32 or 64.
    pub hash_bits: u32,
    /// Its seed (`null` for the unseeded fnv1a32-fmix32).
    pub hash_seed: Option<u64>,
    /// Where the keys came from (`generated, seed 1` or the file name).
    pub key_source: String,
    /// Keys placed.
    pub keys: usize,
    /// Requests over all keys (= keys when none were counted).
    pub requests: u64,
    /// The servers, in list order.
    pub servers: Vec<Server>,
    /// Measured ns to hash one key (median of rounds over all keys).
    pub key_hash_ns: f64,
    /// One entry per scheme, in report order.
    pub schemes: Vec<SchemeReport>,
    /// One entry per `--event`, each against the servers of `servers`.
    pub events: Vec<EventReport>,
    /// The ring at every `--vnodes` value.
    pub vnodes_sweep: Vec<SweepRow>,
    /// Hot keys, when keys carry request counts.
    pub hot_keys: Option<HotKeysReport>,
    /// Bounded load on requests and the hottest key before and after, when keys carry
    /// request counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_bound: Option<crate::request_bound::RequestBoundReport>,
    /// Every key's copies on the ring, with `--replicas`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<crate::replicas::ReplicaReport>,
    /// Who takes a failed server's keys, with `--fail`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<crate::failure::FailureReport>,
    /// The comparison with `--peer`, when given.
    pub membership: Option<MembershipReport>,
    /// Bounded load at every `--epsilon` value, in increasing order (empty when only one
    /// is given).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub epsilon_sweep: Vec<EpsilonRow>,
    /// What the ring picture draws (not in JSON).
    #[serde(skip)]
    pub ring_picture: Option<RingPicture>,
    /// Every key's server, in runs of at most [`crate::lab::MAX_PLACEMENT_KEYS`] keys.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placements: Option<Vec<KeyPlacement>>,
    /// Remarks on schemes that ignore part of the input.
    pub notes: Vec<String>,
}

/// Bounded load at one `epsilon`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EpsilonRow {
    /// `epsilon`.
    pub epsilon: f64,
    /// The cap on any server's load over its fair share, `1 + epsilon`.
    pub bound: f64,
    /// Largest key load over its fair share.
    pub keys_max_avg: f64,
    /// Largest request load over its fair share.
    pub requests_max_avg: f64,
    /// Keys placed off their first choice on the ring.
    pub displaced_fraction: f64,
    /// `moved_fraction` of each event, in `events` order.
    pub moved_fraction: Vec<f64>,
}

/// The ring of the run as the ring picture draws it.
#[derive(Debug, Clone, PartialEq)]
pub struct RingPicture {
    /// The size of the hash space (`2^bits`, or `--space`).
    pub space: f64,
    /// `(position, server index)` of every point, sorted.
    pub points: Vec<(u64, usize)>,
    /// `(key, hash)` of the keys drawn (small runs only).
    pub keys: Vec<(String, u64)>,
    /// The ring's `V`.
    pub vnodes: u32,
}

/// One key's server in every scheme, before and after each event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyPlacement {
    /// The key.
    pub key: String,
    /// Its hash as the schemes see it.
    pub hash: u64,
    /// Per scheme (report order): the server, `BUCKET NAME` for mod-N and jump.
    pub before: Vec<String>,
    /// Per event, per scheme: the server after the event.
    pub after: Vec<Vec<String>>,
}

/// One scheme on the servers of the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SchemeReport {
    /// Scheme name (`--schemes`).
    pub scheme: String,
    /// Its parameters, e.g. `V=100, 500 points` or `M=65537`.
    pub detail: String,
    /// Whether it honours weights.
    pub weighted: bool,
    /// Balance of keys per server.
    pub keys: Balance,
    /// Balance of requests per server.
    pub requests: Balance,
    /// Keys and requests of every server, in list order.
    pub per_server: Vec<ServerLoad>,
    /// Bytes the lookup reads.
    pub memory_bytes: usize,
    /// Measured ns per lookup, the key hash excluded (bounded load: per key placed).
    pub ns_per_lookup: f64,
    /// The expected values beside these measurements (ring and jump; `None` otherwise).
    pub theory: Option<SchemeTheory>,
}

/// A scheme's expected balance and cost ([`crate::theory`]); in JSON `{"ring": {...}}`
/// or `{"jump": {"loops": ...}}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SchemeTheory {
    /// The ring with `points` points on `servers` servers.
    Ring {
        /// Expected sd/avg of keys per server, `sqrt((N - 1)/(N·V))`.
        sd_avg: f64,
        /// `N·V·16` bytes, the tutorial's count of (token, server) pairs.
        memory_bytes: usize,
        /// `ceil(log2(N·V))` comparisons per lookup.
        comparisons: u32,
    },
    /// Jump hash on `n` buckets.
    Jump {
        /// Expected loop iterations per lookup, about `ln n`.
        loops: f64,
    },
}

/// One server's load under one scheme.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerLoad {
    /// Server name.
    pub name: String,
    /// Keys placed on it.
    pub keys: u64,
    /// Requests of those keys.
    pub requests: u64,
}

/// One event against the run's servers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventReport {
    /// The event (`--event` text).
    pub event: String,
    /// Names that joined.
    pub added: Vec<String>,
    /// Names that left.
    pub removed: Vec<String>,
    /// Servers after the event.
    pub servers_after: usize,
    /// Share of keys mod-N keeps, `min(a, b)/lcm(a, b)` from `a` to `b` servers (it
    /// moves `1 -` this); `None` when the count does not change.
    pub theory_mod_n_kept: Option<Ratio>,
    /// The least share any scheme must move: the weight that joined or left over the
    /// total; `None` for weight changes.
    pub theory_minimum_moved: Option<Ratio>,
    /// One entry per scheme.
    pub schemes: Vec<Movement>,
}

/// Keys that change server under one event and one scheme.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Movement {
    /// Scheme name.
    pub scheme: String,
    /// Keys whose server changed.
    pub moved: u64,
    /// `moved / keys`.
    pub moved_fraction: f64,
    /// Moved keys now on a server that joined.
    pub to_added: u64,
    /// Moved keys that were on a server that left.
    pub from_removed: u64,
    /// Moved keys between servers present before and after (collateral movement).
    pub between_stayed: u64,
    /// `between_stayed / keys`.
    pub between_stayed_fraction: f64,
    /// Requests of the moved keys over all requests.
    pub requests_moved_fraction: f64,
    /// Balance of keys per server after the event.
    pub keys_after: Balance,
    /// Why a scheme did not follow the event as asked (jump renumbering, unweighted).
    pub note: Option<String>,
}

/// The ring at one `V`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepRow {
    /// Points per unit of weight.
    pub vnodes: u32,
    /// Points on the ring.
    pub points: usize,
    /// Balance of keys per server.
    pub keys: Balance,
    /// Balance of requests per server (differs from `keys` when keys repeat).
    pub requests: Balance,
    /// Expected sd/avg of keys, `sqrt((N - 1)/(N·V))`.
    pub theory_sd_avg: f64,
    /// Bytes of the ring.
    pub memory_bytes: usize,
    /// `N·V·16` bytes, the tutorial's count.
    pub theory_memory_bytes: usize,
    /// `ceil(log2(N·V))` comparisons per lookup.
    pub comparisons: u32,
    /// Measured ns per lookup.
    pub ns_per_lookup: f64,
    /// Largest request load over its fair share.
    pub requests_max_avg: f64,
    /// `moved_fraction` of each event, in `events` order.
    pub moved_fraction: Vec<f64>,
}

/// What hot keys do to the request load, and what bounded load and replicas change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HotKeysReport {
    /// The hottest keys replicated (`--hot`).
    pub hot: usize,
    /// Servers each hot key is spread over (`--replicas`).
    pub replicas: usize,
    /// The hottest keys, most requested first.
    pub hottest: Vec<HotKey>,
    /// One row per strategy.
    pub rows: Vec<HotRow>,
}

/// A hot key.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HotKey {
    /// The key.
    pub key: String,
    /// Its requests.
    pub requests: u64,
    /// `requests / all requests`.
    pub share: f64,
}

/// Request load under one strategy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HotRow {
    /// E.g. `ring V=100`, `bounded epsilon=0.25`, `ring V=100, 10 hottest x3`.
    pub strategy: String,
    /// Largest key load over its fair share.
    pub keys_max_avg: f64,
    /// Largest request load over its fair share.
    pub requests_max_avg: f64,
    /// The server with the most requests.
    pub heaviest: String,
    /// Its share of all requests.
    pub heaviest_share: f64,
}

/// Two clients that disagree on membership: the run's servers and `--peer`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MembershipReport {
    /// The peer's server names.
    pub peer: Vec<String>,
    /// Names only the run's list has (the peer missed them).
    pub missing_at_peer: Vec<String>,
    /// Names only the peer has.
    pub extra_at_peer: Vec<String>,
    /// One entry per scheme.
    pub schemes: Vec<Disagreement>,
}

/// Keys the two views place on different servers, for one scheme.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Disagreement {
    /// Scheme name.
    pub scheme: String,
    /// Keys placed differently.
    pub keys: u64,
    /// `keys / all keys`.
    pub keys_fraction: f64,
    /// Requests of those keys over all requests.
    pub requests_fraction: f64,
}

impl LabReport {
    /// The text form: header, balance, per-server keys, events, sweep, hot keys,
    /// membership, notes.
    #[must_use]
    pub fn to_text(&self) -> String {
        let mut t = String::new();
        let counted = self.requests != self.keys as u64 || self.hot_keys.is_some();
        let _ = writeln!(
            t,
            "{} keys ({}), {} requests; {} servers; hash {} ({}-bit{}), {:.1} ns per key",
            self.keys,
            self.key_source,
            self.requests,
            self.servers.len(),
            self.hash,
            self.hash_bits,
            self.hash_seed
                .map_or_else(String::new, |seed| format!(", seed {seed}")),
            self.key_hash_ns
        );
        self.balance_text(&mut t, counted);
        self.theory_text(&mut t);
        self.per_server_text(&mut t, counted);
        if let Some(placements) = &self.placements {
            self.placements_text(&mut t, placements);
        }
        for event in &self.events {
            event_text(&mut t, event);
        }
        self.sweep_text(&mut t, counted);
        if !self.epsilon_sweep.is_empty() {
            self.epsilon_text(&mut t);
        }
        if let Some(hot) = &self.hot_keys {
            hot_text(&mut t, hot);
        }
        if let Some(bound) = &self.request_bound {
            t.push_str(&bound.to_text());
        }
        if let Some(replicas) = &self.replicas {
            t.push_str(&replicas.to_text());
        }
        if let Some(failure) = &self.failure {
            t.push_str(&failure.to_text());
        }
        if let Some(membership) = &self.membership {
            membership_text(&mut t, membership);
        }
        if !self.notes.is_empty() {
            t.push('\n');
            for note in &self.notes {
                let _ = writeln!(t, "note: {note}");
            }
        }
        t
    }

    fn balance_text(&self, t: &mut String, counted: bool) {
        let _ = writeln!(
            t,
            "\nkeys per server (max/avg and sd/avg relative to weight)"
        );
        let detail = self
            .schemes
            .iter()
            .map(|s| s.detail.len())
            .max()
            .unwrap_or(0);
        let _ = write!(
            t,
            "{:<10}  {:<detail$}  {:>7}  {:>7}  {:>8}  {:>7}  {:>6}  {:>10}  {:>9}",
            "scheme", "detail", "min", "max", "sd", "max/avg", "sd/avg", "memory", "ns/lookup"
        );
        let _ = writeln!(t, "{}", if counted { "  req max/avg" } else { "" });
        for s in &self.schemes {
            let _ = write!(
                t,
                "{:<10}  {:<detail$}  {:>7}  {:>7}  {:>8.1}  {:>7.4}  {:>6.4}  {:>10}  {:>9.1}",
                s.scheme,
                s.detail,
                s.keys.min,
                s.keys.max,
                s.keys.sd,
                s.keys.max_avg,
                s.keys.sd_avg,
                bytes(s.memory_bytes),
                s.ns_per_lookup
            );
            if counted {
                let _ = write!(t, "  {:>11.4}", s.requests.max_avg);
            }
            t.push('\n');
        }
    }

    /// The expected values of the ring and jump rows ([`crate::theory`]).
    fn theory_text(&self, t: &mut String) {
        for s in &self.schemes {
            match &s.theory {
                Some(SchemeTheory::Ring {
                    sd_avg,
                    memory_bytes,
                    comparisons,
                }) => {
                    let _ = writeln!(
                        t,
                        "theory: {} {}: sd/avg ~ sqrt((N-1)/(N*V)) = {}, memory N*V*16 = {}, \
                         ceil(log2(N*V)) = {comparisons} comparisons per lookup",
                        s.scheme,
                        s.detail,
                        percent1(*sd_avg),
                        bytes(*memory_bytes)
                    );
                }
                Some(SchemeTheory::Jump { loops }) => {
                    let _ = writeln!(
                        t,
                        "theory: {} {}: about ln n = {loops:.2} loops per lookup",
                        s.scheme, s.detail
                    );
                }
                None => {}
            }
        }
    }

    fn per_server_text(&self, t: &mut String, counted: bool) {
        let width = self
            .servers
            .iter()
            .map(|s| s.name.len())
            .max()
            .unwrap_or(0)
            .max(6);
        let _ = write!(t, "\n{:<width$}  {:>6}", "server", "weight");
        for s in &self.schemes {
            let _ = write!(t, "  {:>10}", s.scheme);
        }
        t.push('\n');
        for (i, server) in self.servers.iter().enumerate() {
            let _ = write!(t, "{:<width$}  {:>6}", server.name, server.weight);
            for s in &self.schemes {
                let _ = write!(t, "  {:>10}", s.per_server[i].keys);
            }
            t.push('\n');
            if counted {
                let _ = write!(t, "{:<width$}  {:>6}", "  requests", "");
                for s in &self.schemes {
                    let _ = write!(t, "  {:>10}", s.per_server[i].requests);
                }
                t.push('\n');
            }
        }
    }

    /// One table per scheme: each key, its hash, its server before and after each event
    /// (mod-N as the tutorial's table: `mod 4`, `mod 5`, bucket and name). A key given
    /// as `NAME=HASH` shows as `NAME`.
    fn placements_text(&self, t: &mut String, placements: &[KeyPlacement]) {
        let shown = |p: &KeyPlacement| -> String {
            p.key
                .strip_suffix(&format!("={}", p.hash))
                .unwrap_or(&p.key)
                .to_owned()
        };
        let key_width = placements
            .iter()
            .map(|p| shown(p).len())
            .max()
            .unwrap_or(3)
            .max(3);
        for (j, scheme) in self.schemes.iter().enumerate() {
            let modn = scheme.scheme == "modn";
            let before = if modn {
                format!("mod {}", self.servers.len())
            } else {
                scheme.scheme.clone()
            };
            let _ = write!(t, "\n{:<key_width$}  {:>5}  {before:<6}", "key", "hash");
            for event in &self.events {
                let after = if modn {
                    format!("mod {}", event.servers_after)
                } else {
                    event.event.clone()
                };
                let _ = write!(t, "  {after:<6}");
            }
            t.truncate(t.trim_end().len());
            t.push('\n');
            for p in placements {
                let _ = write!(
                    t,
                    "{:<key_width$}  {:>5}  {:<6}",
                    shown(p),
                    p.hash,
                    p.before[j]
                );
                let name = |label: &str| label.rsplit(' ').next().unwrap_or_default().to_owned();
                for after in &p.after {
                    let verdict = if name(&after[j]) == name(&p.before[j]) {
                        "stayed"
                    } else {
                        "moved"
                    };
                    let _ = write!(t, "  {:<6}  {verdict:<6}", after[j]);
                }
                t.truncate(t.trim_end().len());
                t.push('\n');
            }
        }
    }

    /// Bounded load by `epsilon`: the cap, the load, the keys off their first choice
    /// and what each event moves.
    fn epsilon_text(&self, t: &mut String) {
        let _ = writeln!(t, "\nbounded load by epsilon");
        let _ = write!(
            t,
            "{:>8}  {:>9}  {:>12}  {:>11}  {:>9}",
            "epsilon", "1+epsilon", "keys max/avg", "req max/avg", "displaced"
        );
        for event in &self.events {
            let _ = write!(t, "  {:>14}", format!("{} moved", event.event));
        }
        t.push('\n');
        for row in &self.epsilon_sweep {
            let _ = write!(
                t,
                "{:>8}  {:>9.2}  {:>12.4}  {:>11.4}  {:>9}",
                row.epsilon,
                row.bound,
                row.keys_max_avg,
                row.requests_max_avg,
                percent(row.displaced_fraction)
            );
            for fraction in &row.moved_fraction {
                let _ = write!(t, "  {:>14}", percent(*fraction));
            }
            t.push('\n');
        }
    }

    fn sweep_text(&self, t: &mut String, counted: bool) {
        let Some(first) = self.vnodes_sweep.first() else {
            return;
        };
        let _ = writeln!(t, "\nring by virtual nodes per server (V)");
        let _ = write!(
            t,
            "{:>6}  {:>8}  {:>7}  {:>7}  {:>8}  {:>7}  {:>6}  {:>6}  {:>10}  {:>10}  {:>3}  {:>9}",
            "V",
            "points",
            "min",
            "max",
            "sd",
            "max/avg",
            "sd/avg",
            "theory",
            "memory",
            "N*V*16",
            "cmp",
            "ns/lookup"
        );
        if counted {
            t.push_str("  req max/avg");
        }
        for event in &self.events {
            let _ = write!(t, "  {:>14}", format!("{} moved", event.event));
        }
        t.push('\n');
        for row in &self.vnodes_sweep {
            let _ = write!(
                t,
                "{:>6}  {:>8}  {:>7}  {:>7}  {:>8.1}  {:>7.4}  {:>6.4}  {:>6.4}  {:>10}  {:>10}  \
                 {:>3}  {:>9.1}",
                row.vnodes,
                row.points,
                row.keys.min,
                row.keys.max,
                row.keys.sd,
                row.keys.max_avg,
                row.keys.sd_avg,
                row.theory_sd_avg,
                bytes(row.memory_bytes),
                bytes(row.theory_memory_bytes),
                row.comparisons,
                row.ns_per_lookup
            );
            if counted {
                let _ = write!(t, "  {:>11.4}", row.requests_max_avg);
            }
            for fraction in &row.moved_fraction {
                let _ = write!(t, "  {:>14}", percent(*fraction));
            }
            t.push('\n');
        }
        let _ = writeln!(t, "average per server = {} keys", first.keys.mean);
        if counted {
            self.sweep_requests_text(t);
        }
        self.sweep_theory_text(t);
    }

    /// The sweep per request, as the tutorial counts a repeated key (each time).
    fn sweep_requests_text(&self, t: &mut String) {
        let _ = writeln!(
            t,
            "\nring by V, requests per server (a key counted once per request)"
        );
        let _ = writeln!(
            t,
            "{:>6}  {:>8}  {:>7}  {:>7}  {:>10}  {:>7}  {:>6}",
            "V", "points", "min", "max", "sd", "max/avg", "sd/avg"
        );
        for row in &self.vnodes_sweep {
            let r = &row.requests;
            let _ = writeln!(
                t,
                "{:>6}  {:>8}  {:>7}  {:>7}  {:>10.1}  {:>7.4}  {:>6.4}",
                row.vnodes, row.points, r.min, r.max, r.sd, r.max_avg, r.sd_avg
            );
        }
        if let Some(first) = self.vnodes_sweep.first() {
            let _ = writeln!(t, "average per server = {} requests", first.requests.mean);
        }
    }

    /// The formula behind the theory column and the `V` a target sd/avg needs.
    fn sweep_theory_text(&self, t: &mut String) {
        let n = self.servers.iter().filter(|s| s.weight > 0).count();
        let need = |c: f64| {
            format!(
                "{} needs V ~ {:.0} (1/c^2 = {:.0})",
                percent1(c),
                theory::vnodes_for(n, c),
                1.0 / (c * c)
            )
        };
        let _ = writeln!(
            t,
            "theory: sd/avg ~ sqrt((N-1)/(N*V)), N = {n}; a target sd/avg c needs \
             V ~ (N-1)/(N*c^2) ~ 1/c^2: {}, {}",
            need(0.10),
            need(0.05)
        );
    }
}

fn event_text(t: &mut String, event: &EventReport) {
    let _ = writeln!(
        t,
        "\nevent {} ({} servers after; added: {}; removed: {})",
        event.event,
        event.servers_after,
        names(&event.added),
        names(&event.removed)
    );
    let _ = writeln!(
        t,
        "{:<10}  {:>16}  {:>8}  {:>12}  {:>14}  {:>10}  {:>13}",
        "scheme",
        "moved",
        "to added",
        "from removed",
        "between stayed",
        "requests",
        "max/avg after"
    );
    for m in &event.schemes {
        let _ = writeln!(
            t,
            "{:<10}  {:>7} {:>8}  {:>8}  {:>12}  {:>14}  {:>10}  {:>13.4}",
            m.scheme,
            m.moved,
            format!("({})", percent(m.moved_fraction)),
            m.to_added,
            m.from_removed,
            m.between_stayed,
            percent(m.requests_moved_fraction),
            m.keys_after.max_avg
        );
    }
    event_theory_text(t, event);
    for m in &event.schemes {
        if let Some(note) = &m.note {
            let _ = writeln!(t, "  {}: {note}", m.scheme);
        }
    }
}

/// The event's theory line: what mod-N moves (when it ran) and the least any scheme must.
fn event_theory_text(t: &mut String, event: &EventReport) {
    let has_mod_n = event.schemes.iter().any(|m| m.scheme == "modn");
    if let Some(kept) = event.theory_mod_n_kept.filter(|_| has_mod_n) {
        let _ = write!(
            t,
            "theory: mod-N moves 1 - {}/{} = {}",
            kept.num,
            kept.den,
            percent1(1.0 - kept.value)
        );
        if let Some(least) = event.theory_minimum_moved {
            let _ = write!(
                t,
                ", minimum possible {}/{} = {}",
                least.num,
                least.den,
                percent1(least.value)
            );
        }
        t.push('\n');
    } else if let Some(least) = event.theory_minimum_moved {
        let _ = writeln!(
            t,
            "theory: minimum possible {}/{} = {}",
            least.num,
            least.den,
            percent1(least.value)
        );
    }
}

fn hot_text(t: &mut String, hot: &HotKeysReport) {
    let _ = writeln!(t, "\nhot keys (requests per server, relative to weight)");
    for key in hot.hottest.iter().take(3) {
        let _ = writeln!(
            t,
            "  {} {} requests ({})",
            key.key,
            key.requests,
            percent(key.share)
        );
    }
    if hot.hottest.len() > 3 {
        let share: f64 = hot.hottest.iter().map(|k| k.share).sum();
        let _ = writeln!(
            t,
            "  the {} hottest: {} of the requests",
            hot.hottest.len(),
            percent(share)
        );
    }
    let width = hot.rows.iter().map(|r| r.strategy.len()).max().unwrap_or(0);
    let _ = writeln!(
        t,
        "{:<width$}  {:>12}  {:>12}  heaviest server",
        "strategy", "keys max/avg", "req max/avg"
    );
    for row in &hot.rows {
        let _ = writeln!(
            t,
            "{:<width$}  {:>12.4}  {:>12.4}  {} ({} of requests)",
            row.strategy,
            row.keys_max_avg,
            row.requests_max_avg,
            row.heaviest,
            percent(row.heaviest_share)
        );
    }
}

fn membership_text(t: &mut String, m: &MembershipReport) {
    let _ = writeln!(
        t,
        "\nmembership: a peer with {} servers (missing: {}; extra: {})",
        m.peer.len(),
        names(&m.missing_at_peer),
        names(&m.extra_at_peer)
    );
    let _ = writeln!(
        t,
        "{:<10}  {:>24}  {:>8}",
        "scheme", "keys mapped differently", "requests"
    );
    for d in &m.schemes {
        let _ = writeln!(
            t,
            "{:<10}  {:>24}  {:>8}",
            d.scheme,
            format!("{} ({})", d.keys, percent(d.keys_fraction)),
            percent(d.requests_fraction)
        );
    }
}

/// `12.34%`.
fn percent(fraction: f64) -> String {
    format!("{:.2}%", fraction * 100.0)
}

/// `80.0%`: a theory value, to the tutorial's precision.
fn percent1(fraction: f64) -> String {
    format!("{:.1}%", fraction * 100.0)
}

/// `a, b` or `-`.
fn names(list: &[String]) -> String {
    if list.is_empty() {
        "-".to_owned()
    } else {
        list.join(", ")
    }
}

/// `512 B`, `5.9 KiB`, `256.0 KiB`, `1.5 MiB`.
fn bytes(n: usize) -> String {
    let n = n as f64;
    if n < 1024.0 {
        format!("{n} B")
    } else if n < 1024.0 * 1024.0 {
        format!("{:.1} KiB", n / 1024.0)
    } else {
        format!("{:.1} MiB", n / (1024.0 * 1024.0))
    }
}
