//! The consistent-hashing tutorial (shared/seed/consistent-hashing-tutorial.txt, in
//! Bengali with English code and output) run through the lab: its keys (`user:N` from
//! mulberry32 seeded 16), its hash (FNV-1a 32 then MurmurHash3's fmix32) and its three
//! programs. Every expected value below is copied from the tutorial's printed output.

use lb_hashlab::{
    KeyHash, KeySet, LabInput, LabReport, Params, SchemeKind, parse_servers,
    report::{EventReport, Movement},
};

/// The lab on the tutorial's keys: `requests` draws from seed 16, its hash, `V` = 100.
fn run(
    servers: &str,
    requests: usize,
    schemes: &[SchemeKind],
    sweep: &[u32],
    events: &[&str],
) -> LabReport {
    let input = LabInput {
        servers: parse_servers(servers).unwrap(),
        keys: KeySet::mulberry32_users(requests, 16).unwrap(),
        key_source: "mulberry32 user:N, seed 16".into(),
        schemes: schemes.to_vec(),
        params: Params {
            hash: KeyHash::Fnv1a32Fmix32,
            vnodes: 100,
            ..Params::default()
        },
        vnodes_sweep: sweep.to_vec(),
        epsilon_sweep: vec![],
        events: events.iter().map(|e| e.parse().unwrap()).collect(),
        peer: None,
        hot: 0,
        replicas: 1,
        fail: None,
        replication: None,
    };
    lb_hashlab::run(&input).unwrap()
}

/// `80.1%`: a fraction as the tutorial's `toFixed(1)` percentages print it.
fn pct(fraction: f64) -> String {
    format!("{:.1}%", 100.0 * fraction)
}

fn movement<'a>(event: &'a EventReport, scheme: &str) -> &'a Movement {
    event.schemes.iter().find(|m| m.scheme == scheme).unwrap()
}

/// Section 3 ("server add or remove: why only about K/N keys move"), 10,000 keys, 4 -> 5
/// servers, ring with V = 100. The tutorial prints:
///   mod-N  moved 80.1%   to new server 20.1%   between old servers 59.9%
///   ring   moved 21.9%   to new server 21.9%   between old servers 0.0%
///   theory mod-N 1 - 1/5 = 80.0%, minimum possible 1/5 = 20.0%
#[test]
fn section_3_mod_n_against_the_ring_from_4_to_5_servers() {
    let report = run(
        "4",
        10_000,
        &[SchemeKind::ModN, SchemeKind::Ring],
        &[],
        &["add:S4"],
    );
    assert_eq!((report.keys, report.requests), (10_000, 10_000));
    let event = &report.events[0];
    let share = |n: u64| pct(n as f64 / 10_000.0);
    let modn = movement(event, "modn");
    assert_eq!(pct(modn.moved_fraction), "80.1%");
    assert_eq!(share(modn.to_added), "20.1%");
    assert_eq!(share(modn.between_stayed), "59.9%");
    let ring = movement(event, "ring");
    assert_eq!(pct(ring.moved_fraction), "21.9%");
    assert_eq!(share(ring.to_added), "21.9%");
    assert_eq!(share(ring.between_stayed), "0.0%");
    let kept = event.theory_mod_n_kept.unwrap();
    assert_eq!((kept.num, kept.den), (1, 5));
    let least = event.theory_minimum_moved.unwrap();
    assert_eq!((least.num, least.den), (1, 5));
    let text = report.to_text();
    assert!(
        text.contains("theory: mod-N moves 1 - 1/5 = 80.0%, minimum possible 1/5 = 20.0%\n"),
        "{text}"
    );
}

/// Section 4 ("virtual nodes"), 10 servers, 100,000 keys (7 of them repeats, counted each
/// time as the tutorial counts them), V = 1, 10, 100, 1000. The tutorial prints:
///   V      points    min    max  std dev  max/avg  sd/avg
///   1          10    224  24526     8472     2.45   84.7%
///   10        100   5376  14921     2665     1.49   26.7%
///   100      1000   8387  11381      843     1.14    8.4%
///   1000    10000   9394  10539      323     1.05    3.2%
///   average per server = 10000 keys
#[test]
fn section_4_the_virtual_node_sweep() {
    let report = run(
        "10",
        100_000,
        &[SchemeKind::Ring],
        &[1, 10, 100, 1_000],
        &[],
    );
    assert_eq!((report.keys, report.requests), (99_993, 100_000));
    let expected = [
        (1, 10, 224, 24_526, "8472", "2.45", "84.7%"),
        (10, 100, 5_376, 14_921, "2665", "1.49", "26.7%"),
        (100, 1_000, 8_387, 11_381, "843", "1.14", "8.4%"),
        (1_000, 10_000, 9_394, 10_539, "323", "1.05", "3.2%"),
    ];
    let text = report.to_text();
    for (row, (v, points, min, max, sd, max_avg, sd_avg)) in
        report.vnodes_sweep.iter().zip(expected)
    {
        let r = &row.requests;
        assert_eq!(
            (row.vnodes, row.points, r.min, r.max),
            (v, points, min, max)
        );
        assert_eq!(format!("{:.0}", r.sd), sd, "V={v}");
        assert_eq!(format!("{:.2}", r.max_avg), max_avg, "V={v}");
        assert_eq!(pct(r.sd_avg), sd_avg, "V={v}");
        let line = format!("{v:>6}  {points:>8}  {min:>7}  {max:>7}  ");
        assert!(text.contains(&line), "{line:?} in\n{text}");
    }
    assert!((report.vnodes_sweep[0].requests.mean - 10_000.0).abs() < 1e-9);
    assert!(
        text.contains("\naverage per server = 10000 requests\n"),
        "{text}"
    );
    // The theory of the same section: about 9.5 % at V = 100 and 3.0 % at V = 1,000.
    assert_eq!(pct(report.vnodes_sweep[2].theory_sd_avg), "9.5%");
    assert_eq!(pct(report.vnodes_sweep[3].theory_sd_avg), "3.0%");
    assert_eq!(report.vnodes_sweep[2].comparisons, 10);
    assert_eq!(report.vnodes_sweep[2].theory_memory_bytes, 16_000);
}

/// Section 7 ("jump hash, Maglev and bounded load"), 10,000 keys: rendezvous on S0..S4,
/// then S2 removed; jump from 10 to 11 buckets. The tutorial prints:
///   HRW, 5 servers: S0=2031 S1=1959 S2=2014 S3=2046 S4=1950
///   HRW, S2 removed: moved 20.1%, moved but not from S2: 0
///   jump 10 -> 11: moved 8.8% (ideal 1/11 = 9.1%), not to bucket 10: 0
#[test]
fn section_7_rendezvous_removal_and_jump_growth() {
    let report = run("5", 10_000, &[SchemeKind::Rendezvous], &[], &["remove:S2"]);
    let loads: Vec<(String, u64)> = report.schemes[0]
        .per_server
        .iter()
        .map(|s| (s.name.clone(), s.keys))
        .collect();
    let expected = [
        ("S0", 2_031),
        ("S1", 1_959),
        ("S2", 2_014),
        ("S3", 2_046),
        ("S4", 1_950),
    ];
    assert_eq!(loads, expected.map(|(n, k)| (n.to_owned(), k)));
    let hrw = movement(&report.events[0], "rendezvous");
    assert_eq!(pct(hrw.moved_fraction), "20.1%");
    assert_eq!(hrw.between_stayed, 0);

    let report = run("10", 10_000, &[SchemeKind::Jump], &[], &["add:S10"]);
    let jump = movement(&report.events[0], "jump");
    assert_eq!(pct(jump.moved_fraction), "8.8%");
    assert_eq!(jump.between_stayed, 0);
    let least = report.events[0].theory_minimum_moved.unwrap();
    assert_eq!(
        (least.num, least.den, pct(least.value)),
        (1, 11, "9.1%".to_owned())
    );
    let text = report.to_text();
    assert!(text.contains("minimum possible 1/11 = 9.1%"), "{text}");
    assert!(
        text.contains("about ln n = 2.30 loops per lookup"),
        "{text}"
    );
}

/// The same draws written one per line (repeats kept) and read back as a key file are
/// the same input: 99,993 keys, 100,000 requests.
#[test]
fn a_key_file_of_the_draws_is_the_same_input() {
    let drawn = KeySet::mulberry32_users(100_000, 16).unwrap();
    let mut text = String::new();
    for (key, &count) in drawn.keys().iter().zip(drawn.counts()) {
        for _ in 0..count {
            text.push_str(key);
            text.push('\n');
        }
    }
    assert_eq!(KeySet::parse(&text).unwrap(), drawn);
}
