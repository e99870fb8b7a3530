//! The tutorial's four worked examples (shared/seed/consistent-hashing-tutorial.txt),
//! reproduced through the lab and `--explain`, and the tour printing every result line
//! of the tutorial's programs.
//!
//! - the mod-4 / mod-5 table of the six keys at 5, 20, 38, 50, 77, 95 (printed in the
//!   tutorial's section 3);
//! - the 0-99 ring with four servers and those keys (section 2; the tutorial does not
//!   print where the servers sit, the tour puts them at 10, 35, 60, 85);
//! - the 0-999 ring with A at 105 and 930, B at 290 and 610, C at 450 and 845 (section 5);
//! - the rendezvous scores of user:42 over S0..S3 with the tutorial's h32 (section 6; the
//!   values were computed by the tutorial's own `h32` in Node).

use lb_hashlab::{
    KeyHash, KeySet, LabInput, Params, SchemeKind,
    explain::{Steps, explain},
    parse_servers,
    tour::{SIX_KEYS, tour},
};

fn value_params(space: Option<u64>, positions: &[(&str, &[u64])]) -> Params {
    Params {
        hash: KeyHash::Value,
        space,
        positions: positions
            .iter()
            .map(|(n, p)| ((*n).to_owned(), p.to_vec()))
            .collect(),
        ..Params::default()
    }
}

fn six_keys() -> KeySet {
    KeySet::parse(&SIX_KEYS.join("\n")).unwrap()
}

/// Section 3's table, as printed:
/// ```text
/// key  hash  mod 4  mod 5
/// k1      5    1 B    0 A   moved
/// k2     20    0 A    0 A   stayed
/// k3     38    2 C    3 D   moved
/// k4     50    2 C    0 A   moved
/// k5     77    1 B    2 C   moved
/// k6     95    3 D    0 A   moved
/// ```
#[test]
fn the_mod_4_mod_5_table() {
    let input = LabInput {
        servers: parse_servers("A,B,C,D").unwrap(),
        keys: six_keys(),
        key_source: "six keys".into(),
        schemes: vec![SchemeKind::ModN],
        params: value_params(None, &[]),
        vnodes_sweep: vec![],
        epsilon_sweep: vec![],
        events: vec!["add:E".parse().unwrap()],
        peer: None,
        hot: 0,
        replicas: 1,
        fail: None,
        replication: None,
    };
    let report = lb_hashlab::run(&input).unwrap();
    let placements = report.placements.as_ref().unwrap();
    let expected = [
        ("k1=5", 5, "1 B", "0 A"),
        ("k2=20", 20, "0 A", "0 A"),
        ("k3=38", 38, "2 C", "3 D"),
        ("k4=50", 50, "2 C", "0 A"),
        ("k5=77", 77, "1 B", "2 C"),
        ("k6=95", 95, "3 D", "0 A"),
    ];
    for (p, (key, hash, before, after)) in placements.iter().zip(expected) {
        assert_eq!(
            (
                p.key.as_str(),
                p.hash,
                p.before[0].as_str(),
                p.after[0][0].as_str()
            ),
            (key, hash, before, after)
        );
    }
    let text = report.to_text();
    for line in [
        "key   hash  mod 4   mod 5\n",
        "k1       5  1 B     0 A     moved\n",
        "k2      20  0 A     0 A     stayed\n",
        "k6      95  3 D     0 A     moved\n",
    ] {
        assert!(text.contains(line), "{line:?} in\n{text}");
    }
    let m = &report.events[0].schemes[0];
    assert_eq!((m.moved, m.to_added, m.between_stayed), (5, 0, 5));
}

/// Section 2: the 0-99 ring, four servers, the six keys; key 95 wraps around.
#[test]
fn the_0_99_ring() {
    let params = value_params(
        Some(100),
        &[
            ("A", &[10]),
            ("B", &[35]),
            ("C", &[60]),
            ("D", &[85]),
            ("E", &[45]),
        ],
    );
    let servers = parse_servers("A,B,C,D").unwrap();
    let owners: Vec<String> = SIX_KEYS
        .iter()
        .map(|key| {
            let e = explain(key, &servers, &[SchemeKind::Ring], &params, &[], &[]).unwrap();
            e.schemes[0].owner.clone()
        })
        .collect();
    assert_eq!(owners, ["A", "B", "C", "C", "D", "A"]);
    let e = explain("k6=95", &servers, &[SchemeKind::Ring], &params, &[], &[]).unwrap();
    let Steps::Ring(r) = &e.schemes[0].steps else {
        panic!("ring steps")
    };
    assert!(r.wrapped);
    assert_eq!((r.end, r.point, r.position), (4, 0, 10));
    // Adding E at 45 moves only k3 (38), from C to E: monotonicity.
    let input = LabInput {
        servers,
        keys: six_keys(),
        key_source: "six keys".into(),
        schemes: vec![SchemeKind::Ring],
        params,
        vnodes_sweep: vec![],
        epsilon_sweep: vec![],
        events: vec!["add:E".parse().unwrap()],
        peer: None,
        hot: 0,
        replicas: 1,
        fail: None,
        replication: None,
    };
    let report = lb_hashlab::run(&input).unwrap();
    let after: Vec<&str> = report
        .placements
        .as_ref()
        .unwrap()
        .iter()
        .map(|p| p.after[0][0].as_str())
        .collect();
    assert_eq!(after, ["A", "B", "E", "C", "D", "A"]);
    assert_eq!(report.events[0].schemes[0].between_stayed, 0);
}

/// Section 5: the 0-999 ring A 105, 930; B 290, 610; C 450, 845, as a sorted array,
/// its binary search, the equal case, the wrap-around and the preference lists.
#[test]
fn the_0_999_ring() {
    let params = value_params(
        Some(1_000),
        &[("A", &[105, 930]), ("B", &[290, 610]), ("C", &[450, 845])],
    );
    let servers = parse_servers("A,B,C").unwrap();
    let ring = lb_hashlab::ring::Ring::build_params(&servers, 100, &params).unwrap();
    let (positions, owners) = ring.points_and_owners();
    assert_eq!(positions, [105, 290, 450, 610, 845, 930]);
    assert_eq!(owners, [0, 1, 2, 1, 2, 0]);
    let ring_of = |key: &str| {
        let e = explain(key, &servers, &[SchemeKind::Ring], &params, &[], &[]).unwrap();
        let Steps::Ring(r) = e.schemes[0].steps.clone() else {
            panic!("ring steps")
        };
        (e.schemes[0].owner.clone(), r)
    };
    let (owner, r) = ring_of("500");
    assert_eq!((owner.as_str(), r.position), ("B", 610));
    let probes: Vec<(usize, usize, usize, u64)> = r
        .probes
        .iter()
        .map(|p| (p.lo, p.hi, p.mid, p.position))
        .collect();
    assert_eq!(probes, [(0, 6, 3, 610), (0, 3, 1, 290), (2, 3, 2, 450)]);
    assert_eq!(r.preference, ["B", "C", "A"]);
    // A key equal to a point belongs to it; past 930 it wraps to 105.
    assert_eq!(ring_of("930").0, "A");
    assert_eq!(ring_of("845").1.position, 845);
    let (owner, r) = ring_of("950");
    assert!(r.wrapped && owner == "A" && r.position == 105);
    assert_eq!(ring_of("300").1.preference, ["C", "B", "A"]);
    // A position outside the space is refused, naming the server.
    let bad = value_params(Some(100), &[("A", &[105])]);
    let error = lb_hashlab::ring::Ring::build_params(&servers, 1, &bad).unwrap_err();
    assert_eq!(
        error.to_string(),
        "position 105 of server \"A\" is outside the hash space 0..100"
    );
}

/// Section 6: user:42 over S0..S3, `h32("user:42|S0")` ... and the same over 2^32; the
/// values below come from the tutorial's `h32` run in Node.
#[test]
fn the_rendezvous_scores_of_user_42() {
    let params = Params {
        hash: KeyHash::Fnv1a32Fmix32,
        ..Params::default()
    };
    let servers = parse_servers("4").unwrap();
    let e = explain(
        "user:42",
        &servers,
        &[SchemeKind::Rendezvous],
        &params,
        &[],
        &[],
    )
    .unwrap();
    assert_eq!(e.hash, 599_759_890);
    let Steps::Rendezvous { scores, weighted } = &e.schemes[0].steps else {
        panic!("rendezvous steps")
    };
    assert!(!weighted);
    let got: Vec<(String, u64, String)> = scores
        .iter()
        .map(|s| (s.server.clone(), s.raw, format!("{:.6}", s.normalised)))
        .collect();
    let expected = [
        ("S0", 1_477_688_857, "0.344051"),
        ("S1", 3_150_605_096, "0.733557"),
        ("S2", 3_833_641_293, "0.892589"),
        ("S3", 2_425_600_809, "0.564754"),
    ];
    assert_eq!(
        got,
        expected.map(|(s, r, n)| (s.to_owned(), r, n.to_owned()))
    );
    assert_eq!(e.schemes[0].owner, "S2");
}

/// The tour prints every result line of the tutorial's three programs, verbatim.
#[test]
fn the_tour_prints_the_tutorials_output() {
    let text = tour().unwrap().to_text();
    for line in [
        "mod-N  moved 80.1%   to new server 20.1%   between old servers 59.9%",
        "ring   moved 21.9%   to new server 21.9%   between old servers 0.0%",
        "theory mod-N 1 - 1/5 = 80.0%, minimum possible 1/5 = 20.0%",
        "V      points    min    max  std dev  max/avg  sd/avg",
        "1          10    224  24526     8472     2.45   84.7%",
        "10        100   5376  14921     2665     1.49   26.7%",
        "100      1000   8387  11381      843     1.14    8.4%",
        "1000    10000   9394  10539      323     1.05    3.2%",
        "average per server = 10000 keys",
        "HRW, 5 servers: S0=2031 S1=1959 S2=2014 S3=2046 S4=1950",
        "HRW, S2 removed: moved 20.1%, moved but not from S2: 0",
        "jump 10 -> 11: moved 8.8% (ideal 1/11 = 9.1%), not to bucket 10: 0",
        "k3      38  2 C     3 D     moved",
        "  S2                     3833641293  0.892589  <- highest",
        "  950 is past the last point (6 of 6): wrap around to point 0 at 105 (A)",
    ] {
        assert!(text.contains(line), "{line:?} in\n{text}");
    }
    let titles: Vec<&str> = text.lines().filter(|l| l.starts_with("== ")).collect();
    assert_eq!(titles.len(), 8);
    assert!(titles[0].starts_with("== 1.") && titles[6].starts_with("== 7."));
    assert_eq!(titles[7], "== 8. Hot keys, replicas and failures ==");
    // Section 8: the hot key has 5,000 requests; A and B share a zone, so 950 goes to A, C.
    for line in [
        "hot key live-score: 5000 requests (33.33% of all; 5.00x the average server load",
        "e=950                   950  A, C",
        "failure of S3 (10 servers): who takes its keys",
    ] {
        assert!(text.contains(line), "{line:?} in\n{text}");
    }
}
