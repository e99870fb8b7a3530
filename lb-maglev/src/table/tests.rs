//! [`MaglevTable::build`]: validation, slot counts, warnings and determinism.

use super::*;
use crate::defaults::{MAGLEV_SEED, TABLE_SIZE};

fn backends(spec: &[(&str, u32)]) -> Vec<Backend> {
    spec.iter()
        .map(|&(addr, weight)| Backend::new(addr.parse::<BackendKey>().unwrap(), weight))
        .collect()
}

fn counted(table: &MaglevTable) -> Vec<u32> {
    let mut counts = vec![0; table.backends().len()];
    for &s in table.slots() {
        counts[s as usize] += 1;
    }
    counts
}

#[test]
fn build_sorts_and_counts() {
    let table = MaglevTable::build(
        &backends(&[
            ("198.51.100.13", 1),
            ("198.51.100.11", 1),
            ("198.51.100.12", 0),
        ]),
        TABLE_SIZE,
        MAGLEV_SEED,
    )
    .unwrap();
    let keys: Vec<String> = table.backends().iter().map(|b| b.key.to_string()).collect();
    assert_eq!(keys, ["198.51.100.11", "198.51.100.12", "198.51.100.13"]);
    assert_eq!(table.slots().len(), 65_537);
    assert_eq!(table.slot_counts(), [32_769, 0, 32_768]);
    assert_eq!(counted(&table), table.slot_counts());
    assert_eq!(table.min_max_slots(), Some((32_768, 32_769)));
    assert_eq!(table.active_backends(), 2);
    assert!(table.warnings().is_empty());
    assert!(!table.is_empty());
    assert_eq!(table.owner(65_537), None);
    assert!(table.owner(0).is_some_and(|b| b.weight == 1));
    assert!((table.ideal_slots(0) - 32_768.5).abs() < 1e-9);
}

#[test]
fn validation_errors_in_order() {
    let three = backends(&[
        ("198.51.100.11", 1),
        ("198.51.100.12", 1),
        ("198.51.100.13", 1),
    ]);
    let err = |b: &[Backend], size| {
        MaglevTable::build(b, size, MAGLEV_SEED)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(err(&three, 0), "table_size must be a prime >= 2 (got 0)");
    assert_eq!(err(&three, 1), "table_size must be a prime >= 2 (got 1)");
    assert_eq!(
        err(&three, 65_536),
        "table_size 65536 is not prime (nearest primes: 65521 and 65537)"
    );
    assert_eq!(
        err(&three, 10_000_019),
        "table_size 10000019 exceeds maximum 4000037"
    );
    assert_eq!(
        err(&three, 2),
        "table_size 2 is smaller than backend count 3"
    );
    let dup = backends(&[
        ("198.51.100.12", 1),
        ("198.51.100.11", 1),
        ("198.51.100.11", 5),
    ]);
    assert_eq!(err(&dup, 7), "duplicate backend 198.51.100.11");
    // Size errors come before backend errors.
    assert_eq!(
        err(&dup, 8),
        "table_size 8 is not prime (nearest primes: 7 and 11)"
    );
}

#[test]
fn drained_backends_do_not_count_against_the_size() {
    let b = backends(&[
        ("198.51.100.11", 1),
        ("198.51.100.12", 0),
        ("198.51.100.13", 0),
    ]);
    let table = MaglevTable::build(&b, 2, MAGLEV_SEED).unwrap();
    assert_eq!(table.slots(), [0, 0]);
}

#[test]
fn empty_tables() {
    for b in [
        vec![],
        backends(&[("198.51.100.11", 0), ("2001:db8::1", 0)]),
    ] {
        let table = MaglevTable::build(&b, TABLE_SIZE, MAGLEV_SEED).unwrap();
        assert!(table.is_empty());
        assert!(table.slots().is_empty());
        assert_eq!(table.slot_counts(), vec![0; b.len()]);
        assert_eq!(table.min_max_slots(), None);
        assert_eq!(table.owner(0), None);
        if !b.is_empty() {
            assert_eq!(table.ideal_slots(0), 0.0);
        }
        assert_eq!(
            table.warnings(),
            ["no backend with weight > 0: the table is empty and new flows are dropped"]
        );
    }
}

#[test]
fn warnings_texts() {
    let many: Vec<Backend> = (0..64_u8)
        .map(|i| Backend::new(std::net::Ipv4Addr::new(198, 51, 100, i), 1))
        .collect();
    let table = MaglevTable::build(&many, 1_009, MAGLEV_SEED).unwrap();
    assert_eq!(
        table.warnings(),
        ["table_size 1009 < 100 × backends (64): expect imbalance"]
    );
    let skewed = backends(&[("198.51.100.11", 1), ("198.51.100.12", 1_000_000)]);
    let table = MaglevTable::build(&skewed, TABLE_SIZE, MAGLEV_SEED).unwrap();
    assert_eq!(
        table.warnings(),
        [
            "1 backend has a weight below the resolution of table_size 65537 (ideal share \
             < 1 slot) and gets 1 slot, more than the weight asks: 198.51.100.11 (weight 1)"
        ]
    );
    let mut tiny: Vec<Backend> = (1..=5_u8)
        .map(|i| Backend::new(std::net::Ipv4Addr::new(198, 51, 100, i), 1))
        .collect();
    tiny.push(Backend::new(
        std::net::Ipv4Addr::new(198, 51, 100, 200),
        u32::MAX,
    ));
    let table = MaglevTable::build(&tiny, 1_009, MAGLEV_SEED).unwrap();
    assert_eq!(
        table.warnings(),
        [
            "5 backends have a weight below the resolution of table_size 1009 (ideal share \
             < 1 slot) and get 1 slot, more than the weight asks: 198.51.100.1 (weight 1), \
             198.51.100.2 (weight 1), 198.51.100.3 (weight 1), and 2 more"
        ]
    );
    assert_eq!(table.slot_counts(), [1, 1, 1, 1, 1, 1_004]);
}

#[test]
fn debug_summarises_slots() {
    let table = MaglevTable::build(&backends(&[("198.51.100.11", 1)]), 7, 1).unwrap();
    let text = format!("{table:?}");
    assert!(text.contains("slots: [7 slots]"), "{text}");
}
