//! Bounded load on requests and the tutorial's hot key (one key with five times the
//! average load), through the lab: a small ring whose every number is computed by hand,
//! and a Zipf workload's properties.

use lb_hashlab::{KeyHash, KeySet, LabInput, Params, SchemeKind, parse_servers};

/// A, B, C at 10, 20, 30 on a 0-99 ring; keys k1 at 5, k2 at 15, k3 at 25 with one
/// request each.
fn small(epsilons: &[f64]) -> LabInput {
    let mut keys = KeySet::parse("k1=5\nk2=15\nk3=25").unwrap();
    // 3 requests over 3 servers: 1 a server, so 5x is 5 requests, at 5 (A's arc).
    assert_eq!(keys.add_hot_key("hot=5", 5.0, 3), Ok(5));
    LabInput {
        servers: parse_servers("A,B,C").unwrap(),
        keys,
        key_source: "small".into(),
        schemes: vec![SchemeKind::Ring, SchemeKind::Bounded],
        params: Params {
            hash: KeyHash::Value,
            space: Some(100),
            positions: vec![
                ("A".into(), vec![10]),
                ("B".into(), vec![20]),
                ("C".into(), vec![30]),
            ],
            epsilon: *epsilons.last().unwrap(),
            ..Params::default()
        },
        vnodes_sweep: vec![],
        epsilon_sweep: epsilons.to_vec(),
        events: vec![],
        peer: None,
        hot: 1,
        replicas: 1,
        fail: None,
        replication: None,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn the_hot_key_before_and_after_by_hand() {
    // R = 8 requests, fair share 8/3 a server. Ring: A has k1 and the hot key, 6
    // requests = 2.25x. Keys bounded at epsilon 0.5: ceil(1.5 * 4 / 3) = 2 keys a
    // server, A has room for the hot key: still 2.25x. Requests bounded: ceil(1.5 * 8 /
    // 3) = 4 requests a server; A holds k1 and takes 3 of the hot key, B (next
    // clockwise) the other 2: A 4 = 1.5x, B 3 = 1.125x, C 1.
    let report = lb_hashlab::run(&small(&[0.5])).unwrap();
    let bound = report.request_bound.as_ref().unwrap();
    assert!(close(bound.ring_requests_max_avg, 2.25));
    let hot = &bound.hot_key;
    assert_eq!((hot.key.as_str(), hot.requests), ("hot=5", 5));
    assert!(close(hot.share, 5.0 / 8.0) && close(hot.times_average, 5.0));
    assert_eq!((hot.ring.server.as_str(), hot.ring.requests), ("A", 5));
    assert!(close(hot.ring.load_avg, 2.25));
    assert_eq!(hot.key_bound.server, "A");
    assert!(close(hot.key_bound.load_avg, 2.25));
    let split: Vec<(&str, u64)> = hot
        .request_bound
        .iter()
        .map(|s| (s.server.as_str(), s.requests))
        .collect();
    assert_eq!(split, [("A", 3), ("B", 2)]);
    assert!(close(hot.request_bound[0].load_avg, 1.5));
    assert!(close(hot.request_bound[1].load_avg, 1.125));
    assert!(close(hot.request_bound_max_avg, 1.5));
    let row = &bound.rows[0];
    assert!(close(row.key_bound_requests_max_avg, 2.25));
    assert!(close(row.request_bound_requests_max_avg, 1.5));
    assert!(close(row.displaced_requests_fraction, 2.0 / 8.0));
    assert_eq!(row.split_keys, 1);

    let text = report.to_text();
    assert!(
        text.contains("hot key hot=5: 5 requests (62.50% of all; 5.00x the average"),
        "{text}"
    );
    assert!(text.contains("  before, ring V=100: A, at 2.2500x its fair share\n"));
    assert!(text.contains("requests bounded (epsilon 0.5): A 3 (1.5000x), B 2 (1.1250x)"));
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(
        json["request_bound"]["hot_key"]["request_bound"][1]["server"],
        "B"
    );
}

#[test]
fn a_large_epsilon_leaves_the_hot_key_whole() {
    // Epsilon 2: ceil(3 * 8 / 3) = 8 requests a server; A's 6 fit, nothing moves.
    let report = lb_hashlab::run(&small(&[2.0, 0.5])).unwrap();
    let bound = report.request_bound.unwrap();
    let epsilons: Vec<f64> = bound.rows.iter().map(|r| r.epsilon).collect();
    assert_eq!(epsilons, [0.5, 2.0]);
    let wide = &bound.rows[1];
    assert!(close(wide.request_bound_requests_max_avg, 2.25));
    assert_eq!(
        (wide.displaced_requests_fraction, wide.split_keys),
        (0.0, 0)
    );
    assert_eq!(
        bound.hot_key.request_bound.len(),
        2,
        "the hot key's epsilon is 0.5"
    );
}

#[test]
fn keys_without_counts_have_no_request_bound() {
    let mut input = small(&[0.5]);
    input.keys = KeySet::parse("k1=5\nk2=15").unwrap();
    assert!(lb_hashlab::run(&input).unwrap().request_bound.is_none());
}

#[test]
fn on_zipf_requests_the_request_bound_holds_and_the_key_bound_does_not() {
    let mut keys = KeySet::generate(2_000, 4).unwrap();
    keys.apply_zipf(1.1, 200_000);
    let input = LabInput {
        servers: parse_servers("8").unwrap(),
        keys,
        key_source: "zipf".into(),
        schemes: vec![SchemeKind::Bounded],
        params: Params::default(),
        vnodes_sweep: vec![],
        epsilon_sweep: vec![0.1, 0.25, 1.0],
        events: vec![],
        peer: None,
        hot: 1,
        replicas: 1,
        fail: None,
        replication: None,
    };
    let report = lb_hashlab::run(&input).unwrap();
    let bound = report.request_bound.unwrap();
    for row in &bound.rows {
        // The capacity is a ceiling: at most one request above (1 + epsilon) x fair.
        let slack = 8.0 / 200_000.0;
        assert!(
            row.request_bound_requests_max_avg <= row.bound + slack,
            "{row:?}"
        );
        // The hottest key alone has about 17 % of the requests, the fair share is 12.5 %.
        if row.epsilon < 0.5 {
            assert!(row.key_bound_requests_max_avg > row.bound, "{row:?}");
        }
    }
    // A smaller epsilon displaces more requests.
    assert!(bound.rows[0].displaced_requests_fraction > bound.rows[2].displaced_requests_fraction);
    let hot = &bound.hot_key;
    assert_eq!(hot.key, report.hot_keys.unwrap().hottest[0].key);
    let served: u64 = hot.request_bound.iter().map(|s| s.requests).sum();
    assert_eq!(served, hot.requests);
    assert!(hot.request_bound.len() > 1, "the hottest key is split");
}
