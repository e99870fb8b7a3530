//! Replicas on the ring: each key's preference list and the balance of the copies.
//!
//! The preference list of a key (DeCandia et al., "Dynamo: Amazon's Highly Available
//! Key-value Store", SOSP 2007, section 4.3) is the first `RF` distinct servers
//! clockwise from the key's hash: the first holds the primary copy, the others the
//! replicas. Zone-aware (a server-to-zone map, as Cassandra's NetworkTopologyStrategy
//! treats racks): walking clockwise, a server of a zone already chosen is skipped, so
//! the copies land in `RF` different zones; when there are fewer zones than `RF`, the
//! skipped servers fill the list in the order the walk met them (then two copies share
//! a zone, and the report counts those keys).
//!
//! The balance: per server its primaries, its replicas and their sum (copies), and how
//! far the heaviest is above its fair share (`copies * w / sum(w)`). A zone map
//! concentrates copies on the servers of small zones: a zone of one server holds a copy
//! of nearly every key.

use std::{collections::HashMap, fmt::Write as _};

use serde::Serialize;

use super::{ring::Ring, servers::Server, stats::Balance};

/// What `--replicas RF --zones NAME=ZONE,...` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replication {
    /// The replication factor `RF` (>= 1; the lab checks).
    pub rf: usize,
    /// `(server, zone)` pairs; empty: no zone map.
    pub zones: Vec<(String, String)>,
}

/// Keys whose preference lists a large run lists.
pub const LISTED: usize = 8;
/// Runs of at most this many keys list every key's preference list.
pub const LIST_ALL: usize = 32;

/// Zones of servers: `zone[i]` the zone index of server `i`, `names` the zones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zones {
    zone: Vec<usize>,
    names: Vec<String>,
}

impl Zones {
    /// The zones of `servers` from `NAME=ZONE` pairs (`--zones A=z1,B=z1,C=z2`).
    ///
    /// # Errors
    /// A pair naming no server, a server named twice, or a server without a zone.
    pub fn new(servers: &[Server], pairs: &[(String, String)]) -> Result<Self, String> {
        let mut zone_of: HashMap<&str, &str> = HashMap::new();
        for (server, zone) in pairs {
            if !servers.iter().any(|s| s.name == *server) {
                return Err(format!("{server}={zone}: no server {server:?}"));
            }
            if zone_of.insert(server, zone).is_some() {
                return Err(format!("server {server:?} is given a zone twice"));
            }
        }
        let mut names: Vec<String> = Vec::new();
        let mut zone = Vec::with_capacity(servers.len());
        for server in servers {
            let name = zone_of
                .get(server.name.as_str())
                .ok_or_else(|| format!("server {:?} has no zone", server.name))?;
            let index = names.iter().position(|n| n == name).unwrap_or_else(|| {
                names.push((*name).to_owned());
                names.len() - 1
            });
            zone.push(index);
        }
        Ok(Self { zone, names })
    }
}

/// Parses `NAME=ZONE[,NAME=ZONE...]`.
///
/// # Errors
/// An item without `=` or with an empty name or zone.
pub fn parse_zones(text: &str) -> Result<Vec<(String, String)>, String> {
    text.split(',')
        .map(|item| {
            let item = item.trim();
            match item.split_once('=') {
                Some((name, zone)) if !name.is_empty() && !zone.is_empty() => {
                    Ok((name.to_owned(), zone.to_owned()))
                }
                _ => Err(format!("{item:?} is not NAME=ZONE")),
            }
        })
        .collect()
}

/// The preference list of a key hash: the first `rf` distinct servers clockwise, with
/// `zones` skipping a zone already chosen until the zones run out (module
/// documentation). Fewer than `rf` when the ring has fewer servers.
#[must_use]
pub fn preference(ring: &Ring, hash: u64, rf: usize, zones: Option<&Zones>) -> Vec<usize> {
    let Some(zones) = zones else {
        return ring.preference(hash, rf);
    };
    let mut list = Vec::with_capacity(rf);
    let mut skipped = Vec::new();
    let mut seen = vec![false; zones.names.len()];
    for server in ring.walk(hash) {
        if list.len() == rf {
            break;
        }
        if list.contains(&server) || skipped.contains(&server) {
            continue;
        }
        let zone = zones.zone[server];
        if seen[zone] {
            skipped.push(server);
        } else {
            seen[zone] = true;
            list.push(server);
        }
    }
    let room = rf.saturating_sub(list.len());
    list.extend(skipped.into_iter().take(room));
    list
}

/// The copies of the run's keys with `rf` copies each.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplicaReport {
    /// The replication factor.
    pub rf: usize,
    /// The ring's `V`.
    pub vnodes: u32,
    /// The zones (empty: no zone map).
    pub zones: Vec<String>,
    /// Every server's copies, in list order.
    pub per_server: Vec<ReplicaLoad>,
    /// Balance of primaries (the ring's balance of keys).
    pub primaries: Balance,
    /// Balance of all copies.
    pub copies: Balance,
    /// Keys with fewer than `rf` servers (the ring has fewer).
    pub short_lists: u64,
    /// Keys with two copies in one zone (fewer zones than `rf`).
    pub shared_zone: u64,
    /// Preference lists of the first keys ([`LISTED`], or all of [`LIST_ALL`] or fewer).
    pub lists: Vec<PreferenceList>,
}

/// One server's copies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplicaLoad {
    /// The server.
    pub name: String,
    /// Its zone, with a zone map.
    pub zone: Option<String>,
    /// Keys it holds the primary copy of (first in the list).
    pub primaries: u64,
    /// Keys it holds another copy of.
    pub replicas: u64,
    /// `primaries + replicas`.
    pub copies: u64,
}

/// One key's preference list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PreferenceList {
    /// The key.
    pub key: String,
    /// Its hash on the ring.
    pub hash: u64,
    /// The servers, primary first.
    pub servers: Vec<String>,
}

/// The replicas of `keys` (hashes `hashes`) on `ring` over `servers`, `rf` copies each
/// (`rf` >= 1), zone-aware with `zones`.
#[must_use]
pub fn report(
    ring: &Ring,
    servers: &[Server],
    keys: &[String],
    hashes: &[u64],
    rf: usize,
    zones: Option<&Zones>,
    vnodes: u32,
) -> ReplicaReport {
    let mut primaries = vec![0_u64; servers.len()];
    let mut replicas = vec![0_u64; servers.len()];
    let (mut short_lists, mut shared_zone) = (0, 0);
    let mut lists = Vec::new();
    let listed = if keys.len() <= LIST_ALL {
        keys.len()
    } else {
        LISTED
    };
    for (i, &hash) in hashes.iter().enumerate() {
        let list = preference(ring, hash, rf, zones);
        primaries[list[0]] += 1;
        for &server in &list[1..] {
            replicas[server] += 1;
        }
        short_lists += u64::from(list.len() < rf);
        if let Some(zones) = zones {
            let mut in_list: Vec<usize> = list.iter().map(|&s| zones.zone[s]).collect();
            in_list.sort_unstable();
            in_list.dedup();
            shared_zone += u64::from(in_list.len() < list.len());
        }
        if i < listed {
            lists.push(PreferenceList {
                key: keys[i].clone(),
                hash,
                servers: list.iter().map(|&s| servers[s].name.clone()).collect(),
            });
        }
    }
    let weights: Vec<u32> = servers.iter().map(|s| s.weight).collect();
    let copies: Vec<u64> = primaries
        .iter()
        .zip(&replicas)
        .map(|(p, r)| p + r)
        .collect();
    ReplicaReport {
        rf,
        vnodes,
        zones: zones.map(|z| z.names.clone()).unwrap_or_default(),
        per_server: (0..servers.len())
            .map(|i| ReplicaLoad {
                name: servers[i].name.clone(),
                zone: zones.map(|z| z.names[z.zone[i]].clone()),
                primaries: primaries[i],
                replicas: replicas[i],
                copies: copies[i],
            })
            .collect(),
        primaries: Balance::of(&primaries, &weights),
        copies: Balance::of(&copies, &weights),
        short_lists,
        shared_zone,
        lists,
    }
}

impl ReplicaReport {
    /// The text form: the rule, the table per server, the balance, the lists.
    #[must_use]
    pub fn to_text(&self) -> String {
        let mut t = String::new();
        let zoned = if self.zones.is_empty() {
            String::new()
        } else {
            format!(
                ", skipping a zone already chosen (zones {})",
                self.zones.join(", ")
            )
        };
        let _ = writeln!(
            t,
            "\nreplicas: RF={} on the ring V={}, the first {} distinct servers clockwise{zoned}",
            self.rf, self.vnodes, self.rf
        );
        let width = self
            .per_server
            .iter()
            .map(|s| s.name.len())
            .chain([6])
            .max()
            .unwrap_or(6);
        let _ = writeln!(
            t,
            "{:<width$}  {:>8}  {:>9}  {:>9}  {:>9}",
            "server", "zone", "primaries", "replicas", "copies"
        );
        for s in &self.per_server {
            let _ = writeln!(
                t,
                "{:<width$}  {:>8}  {:>9}  {:>9}  {:>9}",
                s.name,
                s.zone.as_deref().unwrap_or("-"),
                s.primaries,
                s.replicas,
                s.copies
            );
        }
        let _ = writeln!(
            t,
            "primaries max/avg {:.4}, copies max/avg {:.4}; {} keys with fewer than {} \
             servers; {} keys with two copies in one zone",
            self.primaries.max_avg,
            self.copies.max_avg,
            self.short_lists,
            self.rf,
            self.shared_zone
        );
        let key_width = self
            .lists
            .iter()
            .map(|l| l.key.len())
            .chain([3])
            .max()
            .unwrap_or(3);
        let _ = writeln!(t, "{:<key_width$}  {:>20}  preference list", "key", "hash");
        for l in &self.lists {
            let _ = writeln!(
                t,
                "{:<key_width$}  {:>20}  {}",
                l.key,
                l.hash,
                l.servers.join(", ")
            );
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tutorial's 0-999 ring: A at 105 and 930, B at 290 and 610, C at 450 and 845.
    fn tutorial_ring() -> (Ring, Vec<Server>) {
        let points = vec![(105, 0), (930, 0), (290, 1), (610, 1), (450, 2), (845, 2)];
        let servers = ["A", "B", "C"].map(|n| Server::new(n, 1)).to_vec();
        (Ring::with_points(points).unwrap(), servers)
    }

    fn names(servers: &[Server], list: &[usize]) -> Vec<String> {
        list.iter().map(|&s| servers[s].name.clone()).collect()
    }

    #[test]
    fn lists_walk_clockwise_and_wrap() {
        let (ring, servers) = tutorial_ring();
        assert_eq!(
            names(&servers, &preference(&ring, 500, 2, None)),
            ["B", "C"]
        );
        assert_eq!(
            names(&servers, &preference(&ring, 500, 3, None)),
            ["B", "C", "A"]
        );
        assert_eq!(
            names(&servers, &preference(&ring, 950, 2, None)),
            ["A", "B"]
        );
        assert_eq!(
            names(&servers, &preference(&ring, 950, 5, None)),
            ["A", "B", "C"]
        );
    }

    #[test]
    fn zones_skip_a_zone_already_chosen_then_fill() {
        let (ring, servers) = tutorial_ring();
        let pairs = parse_zones("A=z1,B=z1,C=z2").unwrap();
        let zones = Zones::new(&servers, &pairs).unwrap();
        // 950 wraps to A (z1); B at 290 is z1 too and is skipped for C at 450.
        let list = |hash, rf| names(&servers, &preference(&ring, hash, rf, Some(&zones)));
        assert_eq!(list(950, 2), ["A", "C"]);
        assert_eq!(list(500, 2), ["B", "C"]);
        // Three copies, two zones: the skipped A fills the third place.
        assert_eq!(list(500, 3), ["B", "C", "A"]);
        assert_eq!(list(950, 3), ["A", "C", "B"]);
    }

    #[test]
    fn the_balance_of_copies_by_hand() {
        // Keys at 100, 200, 300, 500, 950, RF 2. Without zones: A,B  B,C  C,B  B,C  A,B:
        // primaries A 2, B 2, C 1; replicas A 0, B 3, C 2. With A and B in z1, every list
        // has C: A,C  B,C  C,B  B,C  A,C: replicas A 0, B 1, C 4.
        let (ring, servers) = tutorial_ring();
        let keys: Vec<String> = ["a", "b", "c", "d", "e"].map(String::from).to_vec();
        let hashes = [100, 200, 300, 500, 950];
        let plain = report(&ring, &servers, &keys, &hashes, 2, None, 2);
        let triple = |r: &ReplicaReport| -> Vec<(u64, u64, u64)> {
            r.per_server
                .iter()
                .map(|s| (s.primaries, s.replicas, s.copies))
                .collect()
        };
        assert_eq!(triple(&plain), [(2, 0, 2), (2, 3, 5), (1, 2, 3)]);
        assert!((plain.copies.max_avg - 5.0 / (10.0 / 3.0)).abs() < 1e-12);
        assert_eq!((plain.short_lists, plain.shared_zone), (0, 0));
        assert_eq!(plain.lists[4].servers, ["A", "B"]);
        let zones = Zones::new(&servers, &parse_zones("A=z1,B=z1,C=z2").unwrap()).unwrap();
        let zoned = report(&ring, &servers, &keys, &hashes, 2, Some(&zones), 2);
        assert_eq!(triple(&zoned), [(2, 0, 2), (2, 1, 3), (1, 4, 5)]);
        assert_eq!(zoned.per_server[2].zone.as_deref(), Some("z2"));
        assert_eq!(zoned.zones, ["z1", "z2"]);
        let three = report(&ring, &servers, &keys, &hashes, 3, Some(&zones), 2);
        assert_eq!(three.shared_zone, 5);
        let four = report(&ring, &servers, &keys, &hashes, 4, None, 2);
        assert_eq!(four.short_lists, 5);
    }

    #[test]
    fn bad_zone_maps_are_named() {
        let (_, servers) = tutorial_ring();
        let zones = |text| Zones::new(&servers, &parse_zones(text).unwrap()).unwrap_err();
        assert_eq!(zones("A=z1,B=z1"), "server \"C\" has no zone");
        assert_eq!(zones("A=z1,B=z1,C=z2,D=z3"), "D=z3: no server \"D\"");
        assert_eq!(
            zones("A=z1,A=z2,B=z1,C=z2"),
            "server \"A\" is given a zone twice"
        );
        assert_eq!(parse_zones("A=z1,B").unwrap_err(), "\"B\" is not NAME=ZONE");
        assert!(parse_zones("=z1").is_err());
    }
}
