//! Replicas through the lab: the tutorial's 0-999 ring (A at 105 and 930, B at 290 and
//! 610, C at 450 and 845) with preference lists computed by hand, zone-aware, and the
//! properties of zone-aware lists on generated keys.

use lb_hashlab::{
    Input, KeyHash, KeySet, LabInput, Params, SchemeKind, parse_servers,
    replicas::{Replication, parse_zones},
};

fn tutorial(rf: usize, zones: &str) -> LabInput {
    LabInput {
        servers: parse_servers("A,B,C").unwrap(),
        keys: KeySet::parse("a=100\nb=200\nc=300\nd=500\ne=950").unwrap(),
        key_source: "five keys".into(),
        schemes: vec![SchemeKind::Ring],
        params: Params {
            hash: KeyHash::Value,
            space: Some(1000),
            positions: vec![
                ("A".into(), vec![105, 930]),
                ("B".into(), vec![290, 610]),
                ("C".into(), vec![450, 845]),
            ],
            ..Params::default()
        },
        vnodes_sweep: vec![],
        epsilon_sweep: vec![],
        events: vec![],
        peer: None,
        hot: 1,
        replicas: 1,
        fail: None,
        replication: Some(Replication {
            rf,
            zones: if zones.is_empty() {
                vec![]
            } else {
                parse_zones(zones).unwrap()
            },
        }),
    }
}

fn copies(input: &LabInput) -> Vec<(u64, u64, u64)> {
    let report = lb_hashlab::run(input).unwrap();
    report
        .replicas
        .unwrap()
        .per_server
        .iter()
        .map(|s| (s.primaries, s.replicas, s.copies))
        .collect()
}

#[test]
fn the_0_999_ring_by_hand() {
    // RF 2: 100 -> A,B; 200 -> B,C; 300 -> C,B; 500 -> B,C; 950 wraps -> A,B.
    assert_eq!(copies(&tutorial(2, "")), [(2, 0, 2), (2, 3, 5), (1, 2, 3)]);
    // A and B in z1: B is skipped after A, so 100 -> A,C and 950 -> A,C.
    let zoned = tutorial(2, "A=z1,B=z1,C=z2");
    assert_eq!(copies(&zoned), [(2, 0, 2), (2, 1, 3), (1, 4, 5)]);
    let report = lb_hashlab::run(&zoned).unwrap();
    let replicas = report.replicas.as_ref().unwrap();
    let lists: Vec<String> = replicas.lists.iter().map(|l| l.servers.join(",")).collect();
    assert_eq!(lists, ["A,C", "B,C", "C,B", "B,C", "A,C"]);
    // 10 copies, fair 10/3 a server; C has 5: 1.5.
    assert!((replicas.copies.max_avg - 1.5).abs() < 1e-12);
    let text = report.to_text();
    assert!(
        text.contains(
            "\nreplicas: RF=2 on the ring V=100, the first 2 distinct servers clockwise, \
             skipping a zone already chosen (zones z1, z2)\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("\nC             z2          1          4          5\n"),
        "{text}"
    );
    assert!(
        text.contains("\ne=950                   950  A, C\n"),
        "{text}"
    );
    // Three copies in two zones: every list shares a zone.
    let three = lb_hashlab::run(&tutorial(3, "A=z1,B=z1,C=z2")).unwrap();
    assert_eq!(three.replicas.unwrap().shared_zone, 5);
}

#[test]
fn bad_zones_and_rf_name_their_input() {
    let error = lb_hashlab::run(&tutorial(2, "A=z1,B=z1")).unwrap_err();
    assert_eq!(error.input, Input::Zones);
    assert_eq!(error.problem, "server \"C\" has no zone");
    let error = lb_hashlab::run(&tutorial(0, "")).unwrap_err();
    assert_eq!(error.input, Input::Replicas);
}

#[test]
fn zone_aware_lists_use_every_zone_and_keep_copies() {
    let servers = "a1,a2,b1,b2,c1,c2";
    let mut input = tutorial(3, "a1=a,a2=a,b1=b,b2=b,c1=c,c2=c");
    input.servers = parse_servers(servers).unwrap();
    input.params = Params::default();
    input.keys = KeySet::generate(3_000, 9).unwrap();
    let report = lb_hashlab::run(&input).unwrap();
    let replicas = report.replicas.unwrap();
    assert_eq!((replicas.shared_zone, replicas.short_lists), (0, 0));
    let total: u64 = replicas.per_server.iter().map(|s| s.copies).sum();
    assert_eq!(total, 3 * 3_000);
    let primaries: u64 = replicas.per_server.iter().map(|s| s.primaries).sum();
    assert_eq!(primaries, 3_000);
    // Every zone holds exactly one copy of every key: 3,000 copies a zone.
    for zone in ["a", "b", "c"] {
        let in_zone: u64 = replicas
            .per_server
            .iter()
            .filter(|s| s.zone.as_deref() == Some(zone))
            .map(|s| s.copies)
            .sum();
        assert_eq!(in_zone, 3_000, "{zone}");
    }
    assert_eq!(replicas.lists.len(), lb_hashlab::replicas::LISTED);
    // The primaries are the ring's placement.
    let ring = report.schemes.iter().find(|s| s.scheme == "ring").unwrap();
    for (load, copies) in ring.per_server.iter().zip(&replicas.per_server) {
        assert_eq!(load.keys, copies.primaries);
    }
}
