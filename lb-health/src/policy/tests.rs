//! The policy's cases, with tables built from its answers. The multi-failure cases come
//! from a public bug report of another Maglev-style director, where a table builder
//! handled "one of a backend pair down" but kept sending new connections to unhealthy
//! backends when several failed together.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use lb_common::types::PROTO_TCP;

use super::*;
use lb_maglev::{
    MaglevTable,
    defaults::MAGLEV_SEED,
    flow::{flow_key, slot_of},
};

const M: u32 = 65_537;

fn key(i: u8) -> BackendKey {
    BackendKey::new(IpAddr::V4(Ipv4Addr::new(198, 51, 100, i)), None)
}

/// B1..Bn, weight 1, healthy unless listed in `down`.
fn four(down: &[u8]) -> Vec<Candidate> {
    (1..=4)
        .map(|i| Candidate {
            key: key(i),
            weight: 1,
            drained: false,
            healthy: !down.contains(&i),
        })
        .collect()
}

fn table(selection: &Selection) -> MaglevTable {
    MaglevTable::build(&selection.table_backends(), M, MAGLEV_SEED).unwrap()
}

/// Slots per backend key of `t`.
fn shares(t: &MaglevTable) -> Vec<(BackendKey, u32)> {
    t.backends()
        .iter()
        .zip(t.slot_counts())
        .filter(|(_, n)| **n > 0)
        .map(|(b, n)| (b.key, *n))
        .collect()
}

/// Two of four backends fail: the table holds only the other two, each with half the
/// slots (M = 65,537: 32,768 and 32,769, within 1 % of M/2), and 10,000 new flows all
/// land on them.
#[test]
fn two_of_four_down_leave_only_the_healthy_two() {
    let s = select(&four(&[2, 3]), &FailurePolicy::default());
    assert_eq!(s.mode, Mode::Normal);
    let t = table(&s);
    let got = shares(&t);
    assert_eq!(
        got.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
        [key(1), key(4)]
    );
    for (_, n) in &got {
        assert!(n.abs_diff(M / 2) <= 328, "{got:?}");
    }
    let vip: SocketAddr = "203.0.113.10:80".parse().unwrap();
    for i in 0..10_000u32 {
        let [a, b, c, d] = i.to_be_bytes();
        let client = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, a, b, c)), 1024 + u16::from(d));
        let flow = flow_key(client, vip, PROTO_TCP).unwrap();
        let slot = slot_of(&flow, 0x6c62_5f31, M).unwrap();
        let owner = t.owner(slot).unwrap().key;
        assert!(owner == key(1) || owner == key(4), "flow {i} on {owner}");
    }
}

/// Every pair and every triple of failed backends among four: no slot references a
/// failed backend, and the survivors share the table within 0.5 % of M of their ideal.
#[test]
fn every_pair_and_triple_of_failures_is_excluded() {
    let mut sets: Vec<Vec<u8>> = Vec::new();
    for a in 1..=4u8 {
        for b in a + 1..=4 {
            sets.push(vec![a, b]);
            for c in b + 1..=4 {
                sets.push(vec![a, b, c]);
            }
        }
    }
    assert_eq!(sets.len(), 10, "6 pairs and 4 triples");
    for down in sets {
        let s = select(&four(&down), &FailurePolicy::default());
        assert_eq!(s.mode, Mode::Normal, "{down:?}");
        let t = table(&s);
        let got = shares(&t);
        let survivors = 4 - down.len();
        assert_eq!(got.len(), survivors, "{down:?}");
        let ideal = f64::from(M) / survivors as f64;
        for (k, n) in got {
            assert!(
                !down.iter().any(|d| key(*d) == k),
                "{down:?}: failed {k} has slots"
            );
            assert!(
                (f64::from(n) - ideal).abs() <= 0.005 * f64::from(M),
                "{down:?}: {k} has {n} slots, ideal {ideal}"
            );
        }
        for p in &s.placements {
            let failed = down.iter().any(|d| key(*d) == p.key);
            assert_eq!(p.flows, if failed { Flows::Repick } else { Flows::Keep });
        }
    }
}

/// All four down: the default fails open (every backend in the table, flows kept);
/// `closed` empties the table and re-picks (drops) the flows.
#[test]
fn all_down_follows_the_configured_policy() {
    let open = select(&four(&[1, 2, 3, 4]), &FailurePolicy::default());
    assert_eq!(open.mode, Mode::AllDownOpen);
    assert_eq!(shares(&table(&open)).len(), 4);
    assert!(open.placements.iter().all(|p| p.flows == Flows::Keep));

    let closed_policy = FailurePolicy {
        all_down: AllDown::Closed,
        ..FailurePolicy::default()
    };
    let closed = select(&four(&[1, 2, 3, 4]), &closed_policy);
    assert_eq!(closed.mode, Mode::AllDownClosed);
    assert!(closed.table_backends().is_empty());
    assert!(closed.placements.iter().all(|p| p.flows == Flows::Repick));
    let t = table(&closed);
    assert!(t.is_empty());
}

/// A flow tracked on B2 before B2 fails: B2's flows are re-picked (its conntrack
/// entries stop being honoured) while it is unhealthy; had the operator drained B2
/// instead, its flows would be kept.
#[test]
fn flows_of_a_failed_backend_are_repicked_and_of_a_drained_one_kept() {
    let s = select(&four(&[2]), &FailurePolicy::default());
    assert_eq!(s.placements[1].flows, Flows::Repick);
    assert_eq!(s.placements[1].table_weight, 0);
    let mut drained = four(&[]);
    drained[1].drained = true;
    let s = select(&drained, &FailurePolicy::default());
    assert_eq!(s.placements[1].flows, Flows::Keep);
    assert_eq!(s.placements[1].table_weight, 0);
}

/// Drain wins over health both ways: a drained healthy backend gets no slots, a drained
/// unhealthy one keeps its flows, and drained backends do not count towards the
/// healthy share (two healthy of two in service is 100 %, not 50 %).
#[test]
fn drain_wins_over_health() {
    let mut c = four(&[3]);
    c[0].drained = true;
    c[2].drained = true;
    let policy = FailurePolicy {
        panic_threshold: 60,
        all_down: AllDown::Open,
    };
    let s = select(&c, &policy);
    assert_eq!(s.mode, Mode::Normal);
    assert_eq!(s.placements[0].table_weight, 0);
    assert_eq!(s.placements[0].flows, Flows::Keep);
    assert_eq!(s.placements[2].table_weight, 0);
    assert_eq!(s.placements[2].flows, Flows::Keep);
    assert_eq!(
        s.table_backends().iter().map(|b| b.key).collect::<Vec<_>>(),
        [key(2), key(4)]
    );
    // Every backend drained: nothing to balance over, whatever the health.
    let all: Vec<_> = four(&[1])
        .into_iter()
        .map(|c| Candidate { drained: true, ..c })
        .collect();
    let s = select(&all, &policy);
    assert_eq!(s.mode, Mode::NoBackends);
    assert!(s.placements.iter().all(|p| p.flows == Flows::Keep));
    // Weight 0 is drained too.
    let mut zero = four(&[]);
    zero[3].weight = 0;
    let s = select(&zero, &FailurePolicy::default());
    assert_eq!(s.placements[3].table_weight, 0);
    assert_eq!(s.placements[3].flows, Flows::Keep);
}

/// Panic mode: below the threshold every non-drained backend is balanced again, at the
/// threshold itself the VIP stays normal; the share is of weight.
#[test]
fn panic_threshold_balances_over_everyone_below_it() {
    let policy = FailurePolicy {
        panic_threshold: 50,
        all_down: AllDown::Closed,
    };
    // 2 of 4 healthy: 50 %, not below 50 %.
    assert_eq!(select(&four(&[2, 3]), &policy).mode, Mode::Normal);
    // 1 of 4: 25 % < 50 %.
    let s = select(&four(&[2, 3, 4]), &policy);
    assert_eq!(
        s.mode,
        Mode::Panic {
            healthy_weight: 1,
            total_weight: 4
        }
    );
    assert_eq!(shares(&table(&s)).len(), 4);
    assert!(s.placements.iter().all(|p| p.flows == Flows::Keep));
    // By weight: B1 (weight 10) down, B2..B4 (weight 1) up: 3 of 13 healthy.
    let mut heavy = four(&[1]);
    heavy[0].weight = 10;
    assert!(matches!(select(&heavy, &policy).mode, Mode::Panic { .. }));
    // Threshold 0 never panics, even with one of four left.
    assert_eq!(
        select(&four(&[2, 3, 4]), &FailurePolicy::default()).mode,
        Mode::Normal
    );
    // Threshold 100 panics as soon as anything is down.
    let strict = FailurePolicy {
        panic_threshold: 100,
        ..policy
    };
    assert!(matches!(
        select(&four(&[4]), &strict).mode,
        Mode::Panic { .. }
    ));
    assert_eq!(select(&four(&[]), &strict).mode, Mode::Normal);
}

/// B2 goes down and up ten times: the table built for the final state is the same,
/// fingerprint for fingerprint, as a table built from scratch for that state (a
/// recovered backend returns with the table it had before).
#[test]
fn the_table_after_flapping_equals_the_table_of_the_final_state() {
    let before = table(&select(&four(&[]), &FailurePolicy::default()));
    let mut last = None;
    for i in 0..20 {
        let down: &[u8] = if i % 2 == 0 { &[2] } else { &[] };
        last = Some(table(&select(&four(down), &FailurePolicy::default())));
    }
    assert_eq!(last.unwrap().fingerprint(), before.fingerprint());
    let down = table(&select(&four(&[2]), &FailurePolicy::default()));
    assert_ne!(down.fingerprint(), before.fingerprint());
}
