//! The lab's schemes on fixed inputs: the ring's edge cases, the movement fractions of
//! mod-N and jump, Maglev against the data plane's own pick, and identical results for
//! identical inputs whatever the process or the input order.

use std::net::SocketAddr;

use lb_common::types::PROTO_TCP;
use lb_hashlab::{
    Event, KeyHash, KeySet, LabInput, Params, Scheme, SchemeKind, Server, jump::jump_hash,
    modn::ModN, parse_servers, ring::Ring, ring::RingError,
};
use lb_maglev::flow::{flow_key, slot_of};

#[test]
fn ring_points_own_the_arc_before_them_and_wrap() {
    let ring = Ring::with_points(vec![(300, 2), (100, 0), (200, 1)]).unwrap();
    assert_eq!(ring.lookup(0), 0);
    assert_eq!(ring.lookup(99), 0);
    // A key hash equal to a point belongs to that point.
    assert_eq!(ring.lookup(100), 0);
    assert_eq!(ring.lookup(200), 1);
    assert_eq!(ring.lookup(300), 2);
    assert_eq!(ring.lookup(101), 1);
    // Past the largest point: wrap around to the smallest.
    assert_eq!(ring.lookup(301), 0);
    assert_eq!(ring.lookup(u64::MAX), 0);
    // Preference lists walk clockwise, wrapping, distinct servers only.
    assert_eq!(ring.preference(250, 2), [2, 0]);
    assert_eq!(ring.preference(301, 5), [0, 1, 2]);
}

#[test]
fn a_ring_of_one_point_owns_everything() {
    let ring = Ring::with_points(vec![(1 << 40, 7)]).unwrap();
    for hash in [0, 1 << 40, (1 << 40) + 1, u64::MAX] {
        assert_eq!(ring.lookup(hash), 7);
    }
    assert_eq!(ring.preference(5, 3), [7]);
    assert!(Ring::with_points(Vec::new()).is_none());
}

#[test]
fn built_rings_place_points_at_the_hash_of_name_and_index() {
    let hash = KeyHash::Fnv1a32Fmix32;
    let servers = vec![
        Server::new("a", 1),
        Server::new("b", 3),
        Server::new("c", 0),
    ];
    let ring = Ring::build(&servers, 4, &hash).unwrap();
    // Weight 3: 12 points; weight 0: none.
    assert_eq!(ring.points(), 16);
    assert_eq!(ring.memory_bytes(), 16 * 12);
    // A key whose hash is exactly a point of b lands on b.
    for i in 0..12 {
        assert_eq!(ring.lookup(hash.bytes(format!("b#{i}").as_bytes())), 1);
    }
    assert_eq!(
        Ring::build(&servers, 0, &hash),
        Err(RingError::NoVirtualNodes)
    );
    assert_eq!(
        Ring::build(&[Server::new("z", 0)], 10, &hash),
        Err(RingError::NoPoints)
    );
}

/// Keys `0..n` as text and their xxh3 hashes.
fn keys(n: usize) -> (Vec<String>, Vec<u64>) {
    let hash = KeyHash::Xxh3 { seed: 9 };
    let keys: Vec<String> = (0..n).map(|i| format!("key-{i}")).collect();
    let hashes = keys.iter().map(|k| hash.key(k)).collect();
    (keys, hashes)
}

#[test]
fn mod_n_to_n_plus_one_moves_about_n_over_n_plus_one() {
    let (_, hashes) = keys(50_000);
    for n in [2_usize, 4, 9, 20] {
        let (old, new) = (ModN::new(n).unwrap(), ModN::new(n + 1).unwrap());
        let moved = hashes
            .iter()
            .filter(|&&h| old.lookup(h) != new.lookup(h))
            .count();
        let fraction = moved as f64 / hashes.len() as f64;
        let expected = n as f64 / (n + 1) as f64;
        assert!(
            (fraction - expected).abs() < 0.01,
            "n {n}: {fraction} vs {expected}"
        );
    }
}

#[test]
fn jump_n_to_n_plus_one_moves_about_one_over_n_plus_one() {
    let (_, hashes) = keys(50_000);
    for n in [1_u32, 4, 9, 20, 99] {
        let moved = hashes
            .iter()
            .filter(|&&h| jump_hash(h, n) != jump_hash(h, n + 1))
            .count();
        let fraction = moved as f64 / hashes.len() as f64;
        let expected = 1.0 / f64::from(n + 1);
        assert!(
            (fraction - expected).abs() < 0.01,
            "n {n}: {fraction} vs {expected}"
        );
    }
}

#[test]
fn the_labs_maglev_with_the_flow_hash_is_the_data_planes_pick() {
    let vip: SocketAddr = "203.0.113.10:80".parse().unwrap();
    let params = Params {
        hash: KeyHash::Flow {
            seed: 42,
            vip,
            fields: lb_common::hash_fields::HashFields::default(),
        },
        table_size: 1009,
        ..Params::default()
    };
    let servers = parse_servers("198.51.100.11,198.51.100.12=2,198.51.100.13").unwrap();
    let scheme = Scheme::build(SchemeKind::Maglev, &servers, &params).unwrap();
    let Scheme::Maglev(maglev) = &scheme else {
        panic!("not a Maglev scheme")
    };
    let set = KeySet::generate(2_000, 5).unwrap();
    for key in set.keys() {
        let client: SocketAddr = key.parse().unwrap();
        let slot = slot_of(&flow_key(client, vip, PROTO_TCP).unwrap(), 42, 1009).unwrap();
        let backend = maglev.table().owner(slot).unwrap();
        let server = scheme.lookup(key, params.hash.key(key));
        assert_eq!(backend.key.to_string(), servers[server].name, "{key}");
    }
}

fn input(servers: &str, keys: KeySet) -> LabInput {
    LabInput {
        servers: parse_servers(servers).unwrap(),
        keys,
        key_source: "test".into(),
        schemes: SchemeKind::ALL.to_vec(),
        params: Params {
            table_size: 4_099,
            ..Params::default()
        },
        vnodes_sweep: vec![1, 100],
        epsilon_sweep: vec![],
        events: vec!["add:e".parse().unwrap(), "remove:c".parse().unwrap()],
        peer: Some(parse_servers("a,b,c").unwrap()),
        hot: 3,
        replicas: 2,
        fail: None,
        replication: None,
    }
}

/// A report as JSON without its timings (the only part that varies between runs).
fn untimed(report: &lb_hashlab::LabReport) -> serde_json::Value {
    let mut json = serde_json::to_value(report).unwrap();
    strip_timings(&mut json);
    json
}

fn strip_timings(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            map.retain(|key, _| !key.ends_with("_ns") && key != "ns_per_lookup");
            map.values_mut().for_each(strip_timings);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip_timings),
        _ => {}
    }
}

#[test]
fn identical_inputs_give_identical_reports() {
    let mut keys = KeySet::generate(3_000, 11).unwrap();
    keys.apply_zipf(1.1, 50_000);
    let a = lb_hashlab::run(&input("a,b=2,c,d", keys.clone())).unwrap();
    let b = lb_hashlab::run(&input("a,b=2,c,d", keys)).unwrap();
    assert_eq!(untimed(&a), untimed(&b));
    // Pinned: a change of the ring, XXH3's use or the key generator shows here.
    let ring = &a.schemes[1];
    assert_eq!(ring.scheme, "ring");
    let loads: Vec<u64> = ring.per_server.iter().map(|l| l.keys).collect();
    assert_eq!(loads, [485, 1241, 646, 628]);
    assert_eq!(a.keys, 3_000);
    assert_eq!(a.requests, 50_000);
}

#[test]
fn name_based_schemes_ignore_server_and_key_order() {
    let keys = KeySet::generate(3_000, 12).unwrap();
    let mut text: Vec<&str> = keys.keys().iter().map(String::as_str).collect();
    text.reverse();
    let reversed = KeySet::parse(&text.join("\n")).unwrap();
    let a = lb_hashlab::run(&input("a,b=2,c,d", keys)).unwrap();
    let b = lb_hashlab::run(&input("d,c,b=2,a", reversed)).unwrap();
    for (x, y) in a.schemes.iter().zip(&b.schemes) {
        if matches!(x.scheme.as_str(), "modn" | "jump" | "bounded") {
            continue;
        }
        let load = |report: &lb_hashlab::report::SchemeReport, name: &str| {
            report
                .per_server
                .iter()
                .find(|l| l.name == name)
                .unwrap()
                .keys
        };
        for name in ["a", "b", "c", "d"] {
            assert_eq!(load(x, name), load(y, name), "{} {name}", x.scheme);
        }
        assert_eq!(x.keys, y.keys, "{}", x.scheme);
    }
    for (x, y) in a.events.iter().zip(&b.events) {
        for (m, n) in x.schemes.iter().zip(&y.schemes) {
            if !matches!(m.scheme.as_str(), "modn" | "jump" | "bounded") {
                assert_eq!(m.moved, n.moved, "{} {}", x.event, m.scheme);
            }
        }
    }
}

#[test]
fn events_report_where_keys_go() {
    let report = lb_hashlab::run(&input("a,b,c,d", KeySet::generate(4_000, 3).unwrap())).unwrap();
    let add = &report.events[0];
    assert_eq!(add.added, ["e"]);
    for m in &add.schemes {
        assert_eq!(m.from_removed, 0, "{}", m.scheme);
        assert_eq!(m.moved, m.to_added + m.between_stayed, "{}", m.scheme);
        match m.scheme.as_str() {
            "ring" | "rendezvous" | "jump" => assert_eq!(m.between_stayed, 0, "{}", m.scheme),
            // mod-N reshuffles most keys between servers that stayed.
            "modn" => assert!(m.between_stayed > 2_000),
            _ => {}
        }
    }
    let remove = &report.events[1];
    for m in &remove.schemes {
        assert_eq!(m.to_added, 0);
        if matches!(m.scheme.as_str(), "ring" | "rendezvous") {
            assert_eq!(m.moved, m.from_removed, "{}", m.scheme);
        }
    }
    let jump = remove.schemes.iter().find(|m| m.scheme == "jump").unwrap();
    assert!(jump.note.as_deref().unwrap().contains("renumbered"));
    // The peer misses d: it disagrees on exactly the keys the removal of d moves.
    let membership = report.membership.as_ref().unwrap();
    assert_eq!(membership.missing_at_peer, ["d"]);
    let ring = membership
        .schemes
        .iter()
        .find(|d| d.scheme == "ring")
        .unwrap();
    let ring_d = report.schemes[1].per_server[3].keys;
    assert_eq!(ring.keys, ring_d);
}

#[test]
fn hot_keys_overload_and_replicas_relieve() {
    let mut keys = KeySet::generate(5_000, 8).unwrap();
    keys.apply_zipf(1.2, 1_000_000);
    let mut lab = input("a,b,c,d,f", keys);
    lab.hot = 20;
    lab.replicas = 5;
    let report = lb_hashlab::run(&lab).unwrap();
    let hot = report.hot_keys.as_ref().unwrap();
    assert_eq!(hot.hottest.len(), 20);
    let ring = hot
        .rows
        .iter()
        .find(|r| r.strategy.starts_with("ring V=100,"))
        .unwrap();
    let replicated = hot.rows.last().unwrap();
    assert!(replicated.strategy.contains("20 hottest on 5 replicas"));
    // The hottest key alone has over 10 % of the requests: the key balance is good but
    // the request balance is not, and spreading the hot keys brings it back.
    assert!(hot.hottest[0].share > 0.1);
    assert!(ring.keys_max_avg < 1.2);
    assert!(ring.requests_max_avg > ring.keys_max_avg);
    assert!(replicated.requests_max_avg < ring.requests_max_avg);
}

#[test]
fn bad_lab_inputs_name_the_input() {
    use lb_hashlab::Input;
    let base = || input("a,b,c,d", KeySet::generate(100, 1).unwrap());
    let mut lab = base();
    lab.params.vnodes = 0;
    assert_eq!(lb_hashlab::run(&lab).unwrap_err().input, Input::Vnodes);
    let mut lab = base();
    lab.params.epsilon = 0.0;
    assert_eq!(lb_hashlab::run(&lab).unwrap_err().input, Input::Epsilon);
    let mut lab = base();
    lab.schemes.clear();
    assert_eq!(lb_hashlab::run(&lab).unwrap_err().input, Input::Schemes);
    let mut lab = base();
    lab.events = vec![Event::Remove("zz".into())];
    let error = lb_hashlab::run(&lab).unwrap_err();
    assert_eq!(error.input, Input::Event(0));
    assert_eq!(error.problem, "remove:zz: no server \"zz\"");
    let mut lab = base();
    lab.params.table_size = 3;
    assert_eq!(lb_hashlab::run(&lab).unwrap_err().input, Input::TableSize);
}

/// ketama and nginx as schemes: the servers their own algorithms choose (values of an
/// independent implementation), and a joining server takes keys only for itself.
#[test]
fn ketama_and_nginx_as_schemes() {
    let servers = parse_servers("10.0.3.11:8080,10.0.3.12:8080,10.0.3.13:8080=2").unwrap();
    let keys = KeySet::parse("user:42\nfoo\nbar").unwrap();
    let report = lb_hashlab::run(&LabInput {
        servers,
        keys,
        key_source: "test".into(),
        schemes: vec![SchemeKind::Ketama, SchemeKind::Nginx],
        params: Params::default(),
        vnodes_sweep: vec![],
        epsilon_sweep: vec![],
        events: vec!["add:10.0.3.14:8080".parse().unwrap()],
        peer: None,
        hot: 0,
        replicas: 1,
        fail: None,
        replication: None,
    })
    .unwrap();
    let placements = report.placements.unwrap();
    let ketama: Vec<&str> = placements.iter().map(|p| p.before[0].as_str()).collect();
    let nginx: Vec<&str> = placements.iter().map(|p| p.before[1].as_str()).collect();
    assert_eq!(ketama, ["10.0.3.13:8080"; 3]);
    assert_eq!(
        nginx,
        ["10.0.3.11:8080", "10.0.3.12:8080", "10.0.3.13:8080"]
    );
    assert_eq!(report.schemes[0].detail, "MD5, 480 points");
    assert_eq!(report.schemes[1].detail, "CRC-32, 640 points");
    for m in &report.events[0].schemes {
        assert_eq!(m.between_stayed, 0, "{}", m.scheme);
    }
}
