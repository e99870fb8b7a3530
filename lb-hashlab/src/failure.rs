//! A server failure's fan-out: which servers take the failed server's keys, and how
//! many each, scheme by scheme, beside the theory.
//!
//! - Ring with `V` = 1: the failed server's one arc goes to its successor, so one server
//!   takes everything (the tutorial's second problem of a single point per server).
//! - Ring with `V` points: each of its `V` arcs goes to that point's successor, a server
//!   drawn about uniformly from the `N - 1` others, so about
//!   `(N - 1) * (1 - (1 - 1/(N - 1))^V)` servers share the load (all `N - 1` for large
//!   `V`), each about `1/(N - 1)` of it.
//! - Rendezvous: each key goes to its runner-up, uniform over the `N - 1` others.
//! - Maglev: the failed backend's slots are refilled by the others' permutations, about
//!   `1/(N - 1)` each; a few slots also change between servers that stayed (Eisenbud et
//!   al. 2016, section 3.4: Maglev trades a little disruption for balance).
//! - Jump: only the last bucket can be removed (Lamping and Veach 2014); its keys then
//!   go uniformly to the `N - 1` others. Any other server's failure is not defined.

use std::fmt::Write as _;

use serde::Serialize;

use super::{
    scheme::{BuildError, Params, Scheme, SchemeKind},
    servers::Server,
};

/// Who took a failed server's keys.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailureReport {
    /// The failed server.
    pub server: String,
    /// Servers before the failure (weight > 0).
    pub servers: usize,
    /// One row per scheme: ring `V` = 1, ring `V` = 100, rendezvous, Maglev, jump.
    pub rows: Vec<FanOut>,
}

/// One scheme's fan-out.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FanOut {
    /// `ring V=1`, `ring V=100`, `rendezvous`, `maglev` or `jump`.
    pub scheme: String,
    /// The failed server's keys before the failure.
    pub keys: u64,
    /// The servers that took them, most keys first (the lower name on a tie).
    pub receivers: Vec<Receiver>,
    /// The largest receiver's share of the failed server's keys.
    pub largest_share: f64,
    /// Keys that moved between servers that stayed (collateral movement).
    pub between_stayed: u64,
    /// Servers expected to take the load (module documentation).
    pub theory_receivers: f64,
    /// Why the scheme has no fan-out (jump: not the last bucket).
    pub note: Option<String>,
}

/// A server that took some of the failed server's keys.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Receiver {
    /// The server.
    pub server: String,
    /// The keys it took.
    pub keys: u64,
    /// `keys` over the failed server's keys.
    pub share: f64,
}

/// Expected receivers on a ring of `vnodes` points a server when one of `n` fails:
/// `(n - 1) * (1 - (1 - 1/(n - 1))^V)`; 0 for `n` <= 1.
#[must_use]
pub fn ring_receivers(n: usize, vnodes: u32) -> f64 {
    if n <= 1 {
        return 0.0;
    }
    let others = (n - 1) as f64;
    others * (1.0 - (1.0 - 1.0 / others).powf(f64::from(vnodes)))
}

/// The fan-out of `failed` (an index into `servers`) for keys `keys` of hashes
/// `hashes`, under every scheme of the module documentation.
///
/// # Errors
/// The scheme and its [`BuildError`] when one cannot be built on the servers before or
/// after (e.g. the failed server was the only one).
pub fn report(
    servers: &[Server],
    failed: usize,
    keys: &[String],
    hashes: &[u64],
    params: &Params,
) -> Result<FailureReport, (SchemeKind, BuildError)> {
    let n = servers.iter().filter(|s| s.weight > 0).count();
    let mut after: Vec<Server> = servers.to_vec();
    after.remove(failed);
    let mut rows = Vec::new();
    let kinds = [
        (SchemeKind::Ring, Some(1)),
        (SchemeKind::Ring, Some(100)),
        (SchemeKind::Rendezvous, None),
        (SchemeKind::Maglev, None),
        (SchemeKind::Jump, None),
    ];
    for (kind, vnodes) in kinds {
        let mut params = params.clone();
        params.vnodes = vnodes.unwrap_or(params.vnodes);
        let label = vnodes.map_or_else(|| kind.name().to_owned(), |v| format!("ring V={v}"));
        let theory = match vnodes {
            Some(v) => ring_receivers(n, v),
            None => n.saturating_sub(1) as f64,
        };
        if kind == SchemeKind::Jump && failed + 1 != servers.len() {
            rows.push(FanOut {
                note: Some(format!(
                    "not defined: {} is bucket {failed} of 0..{}, and jump can only remove \
                     the last",
                    servers[failed].name,
                    servers.len() - 1
                )),
                ..fan_out(label, &[], &[], servers, failed, theory)
            });
            continue;
        }
        let place = |list: &[Server]| {
            Scheme::build(kind, list, &params)
                .map(|scheme| scheme.assign(keys, hashes))
                .map_err(|error| (kind, error))
        };
        let (before, now) = (place(servers)?, place(&after)?);
        // Indices after the failure, as indices before it.
        let now: Vec<usize> = now.iter().map(|&i| i + usize::from(i >= failed)).collect();
        rows.push(fan_out(label, &before, &now, servers, failed, theory));
    }
    Ok(FailureReport {
        server: servers[failed].name.clone(),
        servers: n,
        rows,
    })
}

/// The fan-out between owners `before` and `now` (both indices into `servers`).
fn fan_out(
    scheme: String,
    before: &[usize],
    now: &[usize],
    servers: &[Server],
    failed: usize,
    theory_receivers: f64,
) -> FanOut {
    let mut took = vec![0_u64; servers.len()];
    let (mut keys, mut between_stayed) = (0_u64, 0_u64);
    for (&b, &a) in before.iter().zip(now) {
        if b == failed {
            keys += 1;
            took[a] += 1;
        } else if a != b {
            between_stayed += 1;
        }
    }
    let mut receivers: Vec<Receiver> = took
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(i, &n)| Receiver {
            server: servers[i].name.clone(),
            keys: n,
            share: n as f64 / keys.max(1) as f64,
        })
        .collect();
    receivers.sort_by(|a, b| b.keys.cmp(&a.keys).then_with(|| a.server.cmp(&b.server)));
    FanOut {
        scheme,
        keys,
        largest_share: receivers.first().map_or(0.0, |r| r.share),
        receivers,
        between_stayed,
        theory_receivers,
        note: None,
    }
}

impl FailureReport {
    /// The text form: one line per scheme, then each scheme's receivers.
    #[must_use]
    pub fn to_text(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "\nfailure of {} ({} servers): who takes its keys",
            self.server, self.servers
        );
        let _ = writeln!(
            t,
            "{:<10}  {:>7}  {:>9}  {:>6}  {:>13}  {:>12}  {:>14}",
            "scheme",
            "keys",
            "receivers",
            "theory",
            "largest share",
            "theory share",
            "between stayed"
        );
        for row in &self.rows {
            if let Some(note) = &row.note {
                let _ = writeln!(t, "{:<10}  {note}", row.scheme);
                continue;
            }
            let _ = writeln!(
                t,
                "{:<10}  {:>7}  {:>9}  {:>6.2}  {:>12.2}%  {:>11.2}%  {:>14}",
                row.scheme,
                row.keys,
                row.receivers.len(),
                row.theory_receivers,
                row.largest_share * 100.0,
                100.0 / row.theory_receivers.max(1.0),
                row.between_stayed
            );
        }
        let _ = writeln!(
            t,
            "theory: ring V=1 hands everything to one successor; V points to about \
             (N-1)(1-(1-1/(N-1))^V) servers; rendezvous, Maglev and jump (last bucket only) \
             spread it over the N-1 others, 1/(N-1) = {:.2}% each",
            100.0 / self.servers.saturating_sub(1).max(1) as f64
        );
        for row in self.rows.iter().filter(|r| r.note.is_none()) {
            let parts: Vec<String> = row
                .receivers
                .iter()
                .map(|r| format!("{} {}", r.server, r.keys))
                .collect();
            let _ = writeln!(t, "  {}: {}", row.scheme, parts.join(", "));
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hashes::KeyHash;

    #[test]
    fn the_expected_receivers() {
        assert!((ring_receivers(10, 1) - 1.0).abs() < 1e-12);
        assert!((ring_receivers(2, 100) - 1.0).abs() < 1e-12);
        // 9 * (1 - (8/9)^2) = 9 * 17/81 = 17/9.
        assert!((ring_receivers(10, 2) - 17.0 / 9.0).abs() < 1e-12);
        // (8/9)^100 = 7.6e-6: all 9 others, nearly.
        assert!((ring_receivers(10, 100) - 9.0).abs() < 1e-4);
        assert_eq!(ring_receivers(1, 100), 0.0);
    }

    /// A at 10, B at 20, C at 30 on a 0-99 ring; keys at 11..=20 are B's.
    fn small() -> (Vec<Server>, Vec<String>, Vec<u64>, Params) {
        let servers = ["A", "B", "C"].map(|n| Server::new(n, 1)).to_vec();
        let hashes: Vec<u64> = (11..=20).chain([5, 25]).collect();
        let keys = hashes.iter().map(u64::to_string).collect();
        let params = Params {
            hash: KeyHash::Value,
            space: Some(100),
            positions: vec![
                ("A".into(), vec![10]),
                ("B".into(), vec![20]),
                ("C".into(), vec![30]),
            ],
            table_size: 13,
            ..Params::default()
        };
        (servers, keys, hashes, params)
    }

    #[test]
    fn one_point_hands_everything_to_its_successor() {
        let (servers, keys, hashes, params) = small();
        let report = report(&servers, 1, &keys, &hashes, &params).unwrap();
        assert_eq!((report.server.as_str(), report.servers), ("B", 3));
        let ring = &report.rows[0];
        assert_eq!(ring.scheme, "ring V=1");
        assert_eq!(ring.keys, 10);
        assert_eq!(ring.receivers.len(), 1);
        assert_eq!(
            (ring.receivers[0].server.as_str(), ring.receivers[0].keys),
            ("C", 10)
        );
        assert_eq!((ring.largest_share, ring.between_stayed), (1.0, 0));
        assert_eq!(ring.theory_receivers, 1.0);
        let jump = &report.rows[4];
        assert_eq!(
            jump.note.as_deref(),
            Some("not defined: B is bucket 1 of 0..2, and jump can only remove the last")
        );
    }

    #[test]
    fn receivers_add_up_and_only_the_failed_servers_keys_move() {
        let servers: Vec<Server> = (0..8).map(|i| Server::new(format!("S{i}"), 1)).collect();
        let keys: Vec<String> = (0..4_000).map(|i| format!("key-{i}")).collect();
        let params = Params {
            table_size: 4_099,
            ..Params::default()
        };
        let hashes: Vec<u64> = keys.iter().map(|k| params.key_hash(k)).collect();
        let report = report(&servers, 7, &keys, &hashes, &params).unwrap();
        let names: Vec<&str> = report.rows.iter().map(|r| r.scheme.as_str()).collect();
        assert_eq!(
            names,
            ["ring V=1", "ring V=100", "rendezvous", "maglev", "jump"]
        );
        for row in &report.rows {
            let taken: u64 = row.receivers.iter().map(|r| r.keys).sum();
            assert_eq!(taken, row.keys, "{}", row.scheme);
            assert!(row.receivers.iter().all(|r| r.server != "S7"));
            assert!(row.note.is_none());
        }
        assert_eq!(report.rows[0].receivers.len(), 1);
        for row in [
            &report.rows[0],
            &report.rows[1],
            &report.rows[2],
            &report.rows[4],
        ] {
            assert_eq!(row.between_stayed, 0, "{}", row.scheme);
        }
        // V = 100, rendezvous, Maglev and jump spread over all 7 others.
        for row in &report.rows[1..] {
            assert_eq!(row.receivers.len(), 7, "{}", row.scheme);
            assert!(
                row.largest_share < 0.25,
                "{}: {}",
                row.scheme,
                row.largest_share
            );
        }
    }
}
