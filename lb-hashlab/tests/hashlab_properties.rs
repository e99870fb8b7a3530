//! Properties of the lab's schemes (proptest): consistent hashing's monotonicity (a new
//! server only takes keys; a leaving server only gives its own), bounded load's
//! capacity, and weighted rendezvous shares.

use lb_hashlab::{
    KeyHash, Server,
    bounded::{capacities, place, place_requests, request_capacities},
    jump::jump_hash,
    rendezvous::Rendezvous,
    ring::Ring,
};
use proptest::prelude::*;

fn servers(n: usize) -> Vec<Server> {
    (0..n)
        .map(|i| Server::new(format!("node-{i}"), 1))
        .collect()
}

fn hash_strategy() -> impl Strategy<Value = KeyHash> {
    prop_oneof![
        Just(KeyHash::Fnv1a32Fmix32),
        any::<u64>().prop_map(|seed| KeyHash::Xxh3 { seed }),
        any::<u32>().prop_map(|seed| KeyHash::Flow {
            seed,
            vip: "203.0.113.10:80".parse().unwrap(),
            fields: lb_common::hash_fields::HashFields::default(),
        }),
    ]
}

fn keys_strategy() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec("[a-z0-9.:]{1,12}", 1..300)
}

/// The owner names of `keys` under a lookup over `servers`.
fn owners(servers: &[Server], keys: &[String], lookup: impl Fn(&str) -> usize) -> Vec<String> {
    keys.iter()
        .map(|k| servers[lookup(k)].name.clone())
        .collect()
}

proptest! {
    #[test]
    fn ring_add_moves_keys_only_to_the_new_server(
        n in 1_usize..10, vnodes in 1_u32..40, hash in hash_strategy(), keys in keys_strategy()
    ) {
        let before = servers(n);
        let mut after = before.clone();
        after.push(Server::new("joiner", 1));
        let old = Ring::build(&before, vnodes, &hash).unwrap();
        let new = Ring::build(&after, vnodes, &hash).unwrap();
        let a = owners(&before, &keys, |k| old.lookup(hash.key(k)));
        let b = owners(&after, &keys, |k| new.lookup(hash.key(k)));
        for (x, y) in a.iter().zip(&b) {
            prop_assert!(x == y || y == "joiner", "{x} -> {y}");
        }
    }

    #[test]
    fn ring_remove_moves_only_the_removed_servers_keys(
        n in 2_usize..10, gone in 0_usize..10, vnodes in 1_u32..40, hash in hash_strategy(),
        keys in keys_strategy()
    ) {
        let before = servers(n);
        let gone = gone % n;
        let mut after = before.clone();
        after.remove(gone);
        let old = Ring::build(&before, vnodes, &hash).unwrap();
        let new = Ring::build(&after, vnodes, &hash).unwrap();
        let a = owners(&before, &keys, |k| old.lookup(hash.key(k)));
        let b = owners(&after, &keys, |k| new.lookup(hash.key(k)));
        for (x, y) in a.iter().zip(&b) {
            prop_assert!(x == y || *x == before[gone].name, "{x} -> {y}");
        }
    }

    #[test]
    fn rendezvous_add_and_remove_are_minimal(
        weights in prop::collection::vec(1_u32..5, 2..8), gone in 0_usize..8,
        hash in hash_strategy(), keys in keys_strategy()
    ) {
        let before: Vec<Server> = weights
            .iter()
            .enumerate()
            .map(|(i, &w)| Server::new(format!("node-{i}"), w))
            .collect();
        let base = Rendezvous::new(&before, hash).unwrap();
        let a = owners(&before, &keys, |k| base.lookup(k));

        let mut grown = before.clone();
        grown.push(Server::new("joiner", 2));
        let joined = Rendezvous::new(&grown, hash).unwrap();
        for (x, y) in a.iter().zip(owners(&grown, &keys, |k| joined.lookup(k))) {
            prop_assert!(*x == y || y == "joiner", "{x} -> {y}");
        }

        let gone = gone % before.len();
        let mut shrunk = before.clone();
        shrunk.remove(gone);
        let left = Rendezvous::new(&shrunk, hash).unwrap();
        for (x, y) in a.iter().zip(owners(&shrunk, &keys, |k| left.lookup(k))) {
            prop_assert!(*x == y || *x == before[gone].name, "{x} -> {y}");
        }
    }

    #[test]
    fn jump_growth_moves_keys_only_to_the_new_bucket(n in 1_u32..500, keys in prop::collection::vec(any::<u64>(), 1..500)) {
        for key in keys {
            let (before, after) = (jump_hash(key, n), jump_hash(key, n + 1));
            prop_assert!(before < n && after <= n);
            prop_assert!(after == before || after == n);
        }
    }

    #[test]
    fn bounded_load_never_exceeds_its_capacity(
        weights in prop::collection::vec(0_u32..4, 1..8), vnodes in 1_u32..30,
        epsilon in 0.01_f64..2.0, hashes in prop::collection::vec(any::<u64>(), 1..600)
    ) {
        let mut servers: Vec<Server> = weights
            .iter()
            .enumerate()
            .map(|(i, &w)| Server::new(format!("node-{i}"), w))
            .collect();
        servers[0].weight = servers[0].weight.max(1);
        let ring = Ring::build(&servers, vnodes, &KeyHash::Fnv1a32Fmix32).unwrap();
        let caps = capacities(&servers, hashes.len(), epsilon);
        let owners = place(&ring, &servers, &hashes, epsilon);
        let mut loads = vec![0_u64; servers.len()];
        for owner in owners {
            prop_assert!(servers[owner].weight > 0);
            loads[owner] += 1;
        }
        for (load, cap) in loads.iter().zip(&caps) {
            prop_assert!(load <= cap, "load {load} > capacity {cap}");
        }
    }

    #[test]
    fn bounded_requests_never_exceed_capacity_and_serve_every_request(
        weights in prop::collection::vec(0_u32..4, 1..8), vnodes in 1_u32..30,
        epsilon in 0.01_f64..2.0,
        keys in prop::collection::vec((any::<u64>(), 0_u64..50), 1..300)
    ) {
        let mut servers: Vec<Server> = weights
            .iter()
            .enumerate()
            .map(|(i, &w)| Server::new(format!("node-{i}"), w))
            .collect();
        servers[0].weight = servers[0].weight.max(1);
        let ring = Ring::build(&servers, vnodes, &KeyHash::Fnv1a32Fmix32).unwrap();
        let (hashes, counts): (Vec<u64>, Vec<u64>) = keys.into_iter().unzip();
        let caps = request_capacities(&servers, counts.iter().sum(), epsilon);
        let shares = place_requests(&ring, &caps, &hashes, &counts);
        let mut loads = vec![0_u64; servers.len()];
        for ((shares, &count), &hash) in shares.iter().zip(&counts).zip(&hashes) {
            prop_assert_eq!(shares.iter().map(|s| s.1).sum::<u64>(), count);
            // The first share is on the key's first server whenever that had room.
            prop_assert!(shares[0].0 == ring.lookup(hash) || loads[ring.lookup(hash)] >= caps[ring.lookup(hash)]);
            for &(server, n) in shares {
                prop_assert!(servers[server].weight > 0 || n == 0);
                loads[server] += n;
            }
        }
        for (load, cap) in loads.iter().zip(&caps) {
            prop_assert!(load <= cap, "load {load} > capacity {cap}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn weighted_rendezvous_shares_converge_to_the_weights(
        weights in prop::collection::vec(1_u32..6, 2..5), seed in any::<u64>()
    ) {
        let servers: Vec<Server> = weights
            .iter()
            .enumerate()
            .map(|(i, &w)| Server::new(format!("node-{i}"), w))
            .collect();
        let hrw = Rendezvous::new(&servers, KeyHash::Xxh3 { seed }).unwrap();
        const KEYS: usize = 20_000;
        let mut counts = vec![0_usize; servers.len()];
        for key in 0..KEYS {
            counts[hrw.lookup(&format!("key-{key}"))] += 1;
        }
        let total: u32 = weights.iter().sum();
        for (count, weight) in counts.iter().zip(&weights) {
            let share = *count as f64 / KEYS as f64;
            let ideal = f64::from(*weight) / f64::from(total);
            // Binomial sd at 20,000 keys is at most 0.0036: 0.02 is over 5 sd.
            prop_assert!((share - ideal).abs() < 0.02, "share {share} for ideal {ideal}");
        }
    }
}
