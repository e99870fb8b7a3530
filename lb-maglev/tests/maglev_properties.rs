//! Property tests of the Maglev builder (proptest): ownership, slot counts, order
//! independence, determinism, ratio invariance and diff accounting, over random backend
//! sets (IPv4 and IPv6, with and without ports), weights and prime table sizes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use lb_maglev::{Backend, BackendKey, MaglevTable, TableDiff, is_prime};
use proptest::prelude::*;

/// Prime table sizes: small ones (where `M < 100 N` is common) and a few large ones.
fn table_size() -> impl Strategy<Value = u32> {
    prop_oneof![
        4 => (2_u32..3_000).prop_filter_map("prime", |m| is_prime(m).then_some(m)),
        1 => prop::sample::select(vec![7_919_u32, 10_007, 20_011, 65_537]),
    ]
}

/// A backend key: IPv4 or IPv6 (never IPv4-mapped), optional port.
fn key() -> impl Strategy<Value = BackendKey> {
    let ip = prop_oneof![
        any::<u32>().prop_map(|bits| IpAddr::V4(Ipv4Addr::from(bits))),
        any::<u64>().prop_map(|low| {
            IpAddr::V6(Ipv6Addr::from((0x2001_0db8_u128 << 96) | u128::from(low)))
        }),
    ];
    (ip, prop::option::of(any::<u16>())).prop_map(|(ip, port)| BackendKey::new(ip, port))
}

/// 0..=`max` backends with distinct keys and weights drawn from `weight`.
fn backends(
    max: usize,
    weight: impl Strategy<Value = u32> + Clone,
) -> impl Strategy<Value = Vec<Backend>> {
    prop::collection::btree_set(key(), 0..=max).prop_flat_map(move |keys| {
        let keys: Vec<BackendKey> = keys.into_iter().collect();
        prop::collection::vec(weight.clone(), keys.len()).prop_map(move |weights| {
            keys.iter()
                .zip(weights)
                .map(|(&key, w)| Backend::new(key, w))
                .collect()
        })
    })
}

/// A weight: mostly small, sometimes 0 (drained) or huge.
fn weight() -> impl Strategy<Value = u32> + Clone {
    prop_oneof![
        6 => 1_u32..=10,
        1 => Just(0_u32),
        1 => 1_u32..=1_000_000,
        1 => Just(u32::MAX),
    ]
}

fn build(backends: &[Backend], size: u32, seed: u64) -> Option<MaglevTable> {
    let active = backends.iter().filter(|b| b.weight > 0).count();
    (active <= size as usize).then(|| {
        MaglevTable::build(backends, size, seed).expect("valid: distinct keys, prime size")
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_slot_is_owned_by_a_backend_with_weight(
        backends in backends(40, weight()),
        size in table_size(),
        seed in any::<u64>(),
    ) {
        let Some(table) = build(&backends, size, seed) else { return Ok(()) };
        let active = backends.iter().filter(|b| b.weight > 0).count();
        prop_assert_eq!(table.is_empty(), active == 0);
        if active > 0 {
            prop_assert_eq!(table.slots().len(), size as usize);
        }
        let mut counts = vec![0_u32; table.backends().len()];
        for &slot in table.slots() {
            let owner = &table.backends()[slot as usize];
            prop_assert!(owner.weight > 0, "slot owned by drained {}", owner.key);
            counts[slot as usize] += 1;
        }
        prop_assert_eq!(&counts[..], table.slot_counts());
        for (backend, &count) in table.backends().iter().zip(&counts) {
            prop_assert_eq!(count == 0, backend.weight == 0, "{}", backend.key);
        }
    }

    #[test]
    fn equal_weights_give_floor_or_ceil(
        backends in backends(60, Just(3_u32)),
        size in table_size(),
    ) {
        let Some(table) = build(&backends, size, 1) else { return Ok(()) };
        let n = u32::try_from(backends.len()).unwrap();
        for &count in table.slot_counts() {
            prop_assert!(count == size / n || count == size.div_ceil(n), "{count}");
        }
    }

    #[test]
    fn weighted_counts_are_within_bound(
        backends in backends(40, weight()),
        size in table_size(),
    ) {
        let Some(table) = build(&backends, size, 2) else { return Ok(()) };
        let total: u64 = backends.iter().map(|b| u64::from(b.weight)).sum();
        if total == 0 {
            return Ok(());
        }
        // Backends whose share is below one slot are raised to one slot (F of them, all
        // among those owning exactly one slot): every count is then within 1 + F slots
        // of ideal, and within 1 slot when no ideal share is below one slot (then
        // nobody is raised), which keeps every backend within 0.5% of M here.
        let n = table.backends().len();
        let below_one = (0..n)
            .filter(|&i| table.backends()[i].weight > 0 && table.ideal_slots(i) < 1.0)
            .count();
        let single = (0..n)
            .filter(|&i| table.backends()[i].weight > 0 && table.slot_counts()[i] == 1)
            .count();
        for i in 0..n {
            let deviation = (f64::from(table.slot_counts()[i]) - table.ideal_slots(i)).abs();
            prop_assert!(deviation < 1.0 + single as f64, "deviation {deviation}, F <= {single}");
            if below_one == 0 {
                prop_assert!(deviation < 1.0, "deviation {deviation}");
            }
        }
    }

    #[test]
    fn input_order_does_not_matter(
        (backends, shuffled) in backends(30, weight())
            .prop_flat_map(|b| (Just(b.clone()), Just(b).prop_shuffle())),
        size in table_size(),
        seed in any::<u64>(),
    ) {
        let Some(a) = build(&backends, size, seed) else { return Ok(()) };
        let b = build(&shuffled, size, seed).unwrap();
        prop_assert_eq!(a.slots(), b.slots());
        prop_assert_eq!(a.backends(), b.backends());
        prop_assert_eq!(a.fingerprint(), b.fingerprint());
    }

    #[test]
    fn same_inputs_same_table(
        backends in backends(30, weight()),
        size in table_size(),
        seed in any::<u64>(),
    ) {
        let Some(a) = build(&backends, size, seed) else { return Ok(()) };
        let b = build(&backends, size, seed).unwrap();
        prop_assert_eq!(&a, &b);
        prop_assert_eq!(a.fingerprint(), b.fingerprint());
    }

    #[test]
    fn only_weight_ratios_matter(
        backends in backends(20, 1_u32..=1_000),
        factor in 2_u32..=4_000,
        size in table_size(),
    ) {
        let Some(a) = build(&backends, size, 3) else { return Ok(()) };
        let scaled: Vec<Backend> =
            backends.iter().map(|b| Backend::new(b.key, b.weight * factor)).collect();
        let b = build(&scaled, size, 3).unwrap();
        prop_assert_eq!(a.slots(), b.slots());
    }

    #[test]
    fn diff_accounts_for_every_changed_slot(
        old in backends(12, weight()),
        new in backends(12, weight()),
        size in (2_u32..2_000).prop_filter_map("prime", |m| is_prime(m).then_some(m)),
    ) {
        let (Some(old_table), Some(new_table)) = (build(&old, size, 4), build(&new, size, 4))
        else { return Ok(()) };
        let diff = TableDiff::between(&old_table, &new_table);
        prop_assert!(diff.changed <= size);
        prop_assert!(diff.changed_between_common + diff.gained_by_added <= diff.changed);
        prop_assert!(diff.changed_between_common + diff.lost_by_removed <= diff.changed);
        prop_assert!(
            diff.changed
                <= diff.changed_between_common + diff.gained_by_added + diff.lost_by_removed
        );
        let same = TableDiff::between(&old_table, &old_table);
        prop_assert_eq!(same.changed, 0);
    }
}
