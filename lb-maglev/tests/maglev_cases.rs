//! Table-level tests of the Maglev builder: the paper's worked example, the golden
//! fingerprint, slot-count bounds, disruption, and the table-level failure scenarios of
//! `docs/src/operations/failure-scenarios.md`: weights as ratios (BR-01), drained backends (BR-03),
//! table sizes (BR-04) and backend identity (BR-06). A test named `brNN_tK_...` checks
//! scenario BR-NN.TK.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use lb_maglev::defaults::{MAGLEV_SEED, TABLE_SIZE};
use lb_maglev::{
    Backend, BackendKey, MaglevError, MaglevTable, Permutation, TableDiff, fill_slots, is_prime,
};

const M: u32 = TABLE_SIZE;

/// Backend Bk, as in every test: 198.51.100.(10 + k).
fn b(k: u8) -> BackendKey {
    Ipv4Addr::new(198, 51, 100, 10 + k).into()
}

/// `n` distinct IPv4 backends (198.18.0.0/15), weight 1.
fn many(n: u32) -> Vec<Backend> {
    let base = u32::from(Ipv4Addr::new(198, 18, 0, 0));
    (0..n)
        .map(|i| Backend::new(Ipv4Addr::from(base + i), 1))
        .collect()
}

fn build(backends: &[Backend], size: u32) -> MaglevTable {
    MaglevTable::build(backends, size, MAGLEV_SEED)
        .unwrap_or_else(|err| panic!("build of {} backends, size {size}: {err}", backends.len()))
}

fn slots_of(table: &MaglevTable, key: BackendKey) -> u32 {
    let index = table
        .backends()
        .iter()
        .position(|b| b.key == key)
        .expect("backend in table");
    table.slot_counts()[index]
}

/// Counts slots per backend from `slots()` (not from `slot_counts()`).
fn counted(table: &MaglevTable) -> Vec<u32> {
    let mut counts = vec![0; table.backends().len()];
    for &slot in table.slots() {
        counts[slot as usize] += 1;
    }
    counts
}

/// Checks the invariants every non-empty table has.
fn assert_well_formed(table: &MaglevTable) {
    assert_eq!(table.slots().len(), table.size() as usize);
    let counts = counted(table);
    assert_eq!(counts, table.slot_counts());
    for (backend, &count) in table.backends().iter().zip(&counts) {
        if backend.weight == 0 {
            assert_eq!(count, 0, "drained {} owns slots", backend.key);
        } else {
            assert!(
                count >= 1,
                "{} (weight {}) owns no slot",
                backend.key,
                backend.weight
            );
        }
    }
}

#[test]
fn paper_worked_example() {
    // Eisenbud et al., NSDI 2016, section 3.4, Table 1: M = 7.
    let b0 = Permutation { offset: 3, skip: 4 };
    let b1 = Permutation { offset: 0, skip: 2 };
    let b2 = Permutation { offset: 3, skip: 1 };
    let (i0, i1, i2) = (0, 1, 2);
    assert_eq!(
        fill_slots(7, &[b0, b1, b2]).unwrap(),
        [i1, i0, i1, i0, i2, i2, i0]
    );
    // B1 removed: [B0, B0, B0, B0, B2, B2, B2] with B0 = 0 and B2 = 1.
    assert_eq!(fill_slots(7, &[b0, b2]).unwrap(), [0, 0, 0, 0, 1, 1, 1]);
}

#[test]
fn golden_fingerprint() {
    // Frozen: changes only with a deliberate new FINGERPRINT_VERSION.
    let three = [
        Backend::new(b(1), 1),
        Backend::new(b(2), 1),
        Backend::new(b(3), 1),
    ];
    let table = build(&three, M);
    assert_eq!(
        table.fingerprint().to_string(),
        "e1a47af508cef7d9ce174b35ae9e4b1afd5d11427745db26a02e2e68fa3d33d6"
    );
    assert_eq!(table.slot_counts(), [21_846, 21_846, 21_845]);
    // Input order and spelling do not matter.
    let reordered = [
        Backend::new("198.51.100.13".parse::<BackendKey>().unwrap(), 1),
        Backend::new("::ffff:198.51.100.11".parse::<BackendKey>().unwrap(), 1),
        Backend::new(b(2), 1),
    ];
    assert_eq!(build(&reordered, M).fingerprint(), table.fingerprint());

    // Ports, IPv6 and weights pinned too.
    let mixed = [
        "198.51.100.11:8080=1".parse::<Backend>().unwrap(),
        "2001:db8::1=2".parse().unwrap(),
        "[2001:db8::2]:80=3".parse().unwrap(),
    ];
    let table = build(&mixed, M);
    assert_eq!(
        table.fingerprint().to_string(),
        "b34a8b6c8d414a4ee2014698bfee45089ec3442edc40cce3389b7e7a6e5dcc2e"
    );
    assert_eq!(table.slot_counts(), [10_923, 21_846, 32_768]);
}

#[test]
fn seed_changes_the_table_but_not_the_counts() {
    let backends = many(10);
    let a = build(&backends, M);
    let c = MaglevTable::build(&backends, M, MAGLEV_SEED ^ 1).unwrap();
    assert_ne!(a.slots(), c.slots());
    assert_ne!(a.fingerprint(), c.fingerprint());
    assert_eq!(a.slot_counts(), c.slot_counts());
}

#[test]
fn unweighted_counts_are_floor_or_ceil() {
    for (n, size) in [
        (1, 2),
        (2, 7),
        (3, M),
        (7, M),
        (10, 11),
        (100, M),
        (1_000, M),
        (999, 1_009),
    ] {
        let table = build(&many(n), size);
        assert_well_formed(&table);
        let floor = size / n;
        let ceil = size.div_ceil(n);
        for &count in table.slot_counts() {
            assert!(count == floor || count == ceil, "N {n}, M {size}: {count}");
        }
        // The first M mod N backends (in key order) get the larger count.
        let larger = (size % n) as usize;
        assert!(table.slot_counts()[..larger].iter().all(|&c| c == ceil));
    }
}

/// |slots - M w / W| for every backend, in slots.
fn max_deviation(table: &MaglevTable) -> f64 {
    (0..table.backends().len())
        .map(|i| (f64::from(table.slot_counts()[i]) - table.ideal_slots(i)).abs())
        .fold(0.0, f64::max)
}

#[test]
fn weighted_counts_within_half_a_percent_of_m() {
    let bound = 0.005 * f64::from(M);
    let mut state = 7_u64;
    let mut random = |below: u32| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((state >> 33) % u64::from(below)) as u32
    };
    for (n, max_weight) in [
        (2, 10),
        (10, 100),
        (100, 1_000),
        (1_000, 10),
        (50, u32::MAX),
    ] {
        let backends: Vec<Backend> = many(n)
            .into_iter()
            .map(|b| Backend::new(b.key, 1 + random(max_weight)))
            .collect();
        let table = build(&backends, M);
        assert_well_formed(&table);
        let deviation = max_deviation(&table);
        // Every ideal share is >= 1 slot here, so the bound is < 1 slot.
        assert!(deviation < 1.0, "N {n}: deviation {deviation} slots");
        assert!(deviation <= bound);
    }
}

#[test]
fn disruption_of_removing_or_adding_one_backend() {
    // N = 100, M = 65,537: at most 1% of M moves between backends present before and
    // after (the paper's Figure 11 measures the same kind of disruption).
    let backends = many(101);
    let (base, extra) = backends.split_at(100);
    let before = build(base, M);
    let mut worst: f64 = 0.0;
    for removed in [0, 37, 99] {
        let mut after = base.to_vec();
        let gone = after.remove(removed);
        let table = build(&after, M);
        let diff = TableDiff::between(&before, &table);
        assert_eq!(diff.removed, [gone.key]);
        assert_eq!(diff.lost_by_removed, slots_of(&before, gone.key));
        let fraction = diff.changed_between_common_fraction();
        println!(
            "remove {}: {} slots of the removed backend move, {} others change owner = {:.3}% of M",
            gone.key,
            diff.lost_by_removed,
            diff.changed_between_common,
            fraction * 100.0
        );
        worst = worst.max(fraction);
    }
    let mut added = base.to_vec();
    added.push(extra[0]);
    let table = build(&added, M);
    let diff = TableDiff::between(&before, &table);
    assert_eq!(diff.added, [extra[0].key]);
    assert_eq!(diff.gained_by_added, slots_of(&table, extra[0].key));
    let fraction = diff.changed_between_common_fraction();
    println!(
        "add {}: {} slots go to it, {} others change owner = {:.3}% of M",
        extra[0].key,
        diff.gained_by_added,
        diff.changed_between_common,
        fraction * 100.0
    );
    worst = worst.max(fraction);
    // Adding a backend in the middle of the key order too.
    let mut middle = base.to_vec();
    let inserted = Backend::new("198.18.0.50:1".parse::<BackendKey>().unwrap(), 1);
    middle.push(inserted);
    let diff = TableDiff::between(&before, &build(&middle, M));
    let fraction = diff.changed_between_common_fraction();
    println!(
        "add {} (sorts mid-list): {} others change owner = {:.3}% of M",
        inserted.key,
        diff.changed_between_common,
        fraction * 100.0
    );
    worst = worst.max(fraction);
    println!(
        "worst disruption among slots of other backends: {:.3}% of M",
        worst * 100.0
    );
    assert!(worst <= 0.01, "disruption {:.3}% > 1%", worst * 100.0);
}

#[test]
fn br01_t1_ratio_honoured_and_only_ratios_matter() {
    // Weights 1 and 10 give about 1/11 and 10/11 of the slots, and scaling both weights
    // gives the identical table.
    let table = build(&[Backend::new(b(1), 1), Backend::new(b(2), 10)], M);
    assert_well_formed(&table);
    let b1 = slots_of(&table, b(1));
    assert!(b1.abs_diff(5_958) <= 328, "slots(B1) = {b1}");
    assert_eq!(slots_of(&table, b(2)), M - b1);
    for (w1, w2) in [(100, 1_000), (7, 70)] {
        let scaled = build(&[Backend::new(b(1), w1), Backend::new(b(2), w2)], M);
        assert_eq!(scaled.slots(), table.slots(), "weights ({w1}, {w2})");
        assert_eq!(scaled.fingerprint(), table.fingerprint());
    }
}

#[test]
fn br01_t2_extreme_ratios() {
    // Weights 1 : 1,000,000. Documented choice: the weight-1 backend gets exactly one
    // slot (never zero), the other the rest, with a warning. Weight sums are exact
    // (u128), so no overflow.
    let table = build(&[Backend::new(b(1), 1), Backend::new(b(2), 1_000_000)], M);
    assert_eq!(slots_of(&table, b(1)), 1);
    assert_eq!(slots_of(&table, b(2)), M - 1);
    assert_eq!(table.warnings().len(), 1);
    assert!(table.warnings()[0].contains("198.51.100.11 (weight 1)"));

    let max: Vec<Backend> = many(64)
        .into_iter()
        .map(|b| Backend::new(b.key, u32::MAX))
        .collect();
    let table = build(&max, M);
    assert_well_formed(&table);
    assert!(
        table
            .slot_counts()
            .iter()
            .all(|&c| c == 1_024 || c == 1_025)
    );
    assert_eq!(table.min_max_slots(), Some((1_024, 1_025)));
}

#[test]
fn br03_t1_drained_backend_owns_nothing() {
    // Weight 0 owns no slot; the other two share the table evenly.
    let table = build(
        &[
            Backend::new(b(1), 1),
            Backend::new(b(2), 0),
            Backend::new(b(3), 1),
        ],
        M,
    );
    assert_well_formed(&table);
    assert_eq!(slots_of(&table, b(2)), 0);
    let (b1, b3) = (slots_of(&table, b(1)), slots_of(&table, b(3)));
    assert!(
        b1.abs_diff(32_768) <= 328 && b3.abs_diff(32_768) <= 328,
        "{b1} {b3}"
    );
    assert_eq!(b1 + b3, M);
    // Draining moves only the drained backend's slots.
    let before = build(
        &[
            Backend::new(b(1), 1),
            Backend::new(b(2), 1),
            Backend::new(b(3), 1),
        ],
        M,
    );
    let diff = TableDiff::between(&before, &table);
    assert_eq!(diff.removed, [b(2)]);
    assert_eq!(
        diff.changed,
        diff.lost_by_removed + diff.changed_between_common
    );
}

#[test]
fn br03_t3_all_drained_is_an_empty_table() {
    // Every backend at weight 0: an empty table (the VIP drops new flows), no division
    // by zero.
    let table = build(
        &[
            Backend::new(b(1), 0),
            Backend::new(b(2), 0),
            Backend::new(b(3), 0),
        ],
        M,
    );
    assert!(table.is_empty());
    assert!(table.slots().is_empty());
    assert_eq!(table.slot_counts(), [0, 0, 0]);
    assert_eq!(table.owner(0), None);
    assert_eq!(
        table.warnings(),
        ["no backend with weight > 0: the table is empty and new flows are dropped"]
    );
    // Same as no backends at all.
    let none = build(&[], M);
    assert!(none.is_empty());
    assert_eq!(none.fingerprint(), table.fingerprint());
}

#[test]
fn br03_t4_invalid_weights_name_backend_and_field() {
    // A weight that is not an integer in 0..=u32::MAX is refused naming the backend.
    for weight in ["-1", "1.5", "abc"] {
        let text = format!("198.51.100.12={weight}");
        let err = text.parse::<Backend>().unwrap_err();
        assert_eq!(
            err,
            MaglevError::InvalidWeight {
                backend: "198.51.100.12".into(),
                text: weight.into()
            }
        );
        assert_eq!(
            err.to_string(),
            format!(
                "invalid weight \"{weight}\" for backend 198.51.100.12: expected an integer \
                 from 0 to 4294967295"
            )
        );
    }
}

#[test]
fn br04_t1_t2_t3_table_size_validation() {
    // Not prime, below 2, or above the maximum: refused, the last before allocating.
    let one = [Backend::new(b(1), 1)];
    let err = |size| {
        MaglevTable::build(&one, size, MAGLEV_SEED)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        err(65_536),
        "table_size 65536 is not prime (nearest primes: 65521 and 65537)"
    );
    assert_eq!(err(0), "table_size must be a prime >= 2 (got 0)");
    assert_eq!(err(1), "table_size must be a prime >= 2 (got 1)");
    let rss_before = resident_bytes();
    assert_eq!(
        err(10_000_019),
        "table_size 10000019 exceeds maximum 4000037"
    );
    assert_eq!(
        err(u32::MAX),
        "table_size 4294967295 exceeds maximum 4000037"
    );
    if let (Some(before), Some(after)) = (rss_before, resident_bytes()) {
        assert!(
            after.saturating_sub(before) < 50 << 20,
            "RSS grew {before} -> {after}"
        );
    }
}

/// The process's resident set size (Linux), to check that a rejected size allocates
/// nothing.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[test]
fn br04_t4_t5_backends_versus_slots() {
    // 10 backends do not fit 7 slots; in 11 each gets 1 or 2.
    let ten = many(10);
    assert_eq!(
        MaglevTable::build(&ten, 7, MAGLEV_SEED)
            .unwrap_err()
            .to_string(),
        "table_size 7 is smaller than backend count 10"
    );
    let table = build(&ten, 11);
    assert_well_formed(&table);
    let (min, max) = table.min_max_slots().unwrap();
    assert!(min >= 1 && max - min <= 1, "{min} {max}");
}

#[test]
fn br04_t6_five_thousand_backends() {
    // 5,000 equal backends in 65,537 slots: 13 or 14 each, with the small-table warning.
    let table = build(&many(5_000), M);
    assert!(table.slot_counts().iter().all(|&c| c == 13 || c == 14));
    assert_eq!(table.min_max_slots(), Some((13, 14)));
    assert_eq!(
        table.warnings(),
        ["table_size 65537 < 100 × backends (5000): expect imbalance"]
    );
}

#[test]
fn br04_t7_small_table_warning() {
    // Fewer than 100 slots per backend is accepted with a warning.
    let table = build(&many(64), 1_009);
    assert_eq!(
        table.warnings(),
        ["table_size 1009 < 100 × backends (64): expect imbalance"]
    );
    assert!(build(&many(64), 6_421).warnings().is_empty());
}

#[test]
fn br04_t8_every_prime_up_to_5000_terminates_and_fills() {
    // Every prime M in [2, 5000]; for each, N = 1, N = min(M, 64) and one pseudo-random
    // N in between, with pseudo-random weights 1..=10.
    let mut state = 2_024_u64;
    let mut random = |below: u32| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((state >> 33) % u64::from(below)) as u32
    };
    // Build time is not asserted (timed assertions fail on a loaded machine); `cargo
    // xtask bench` measures it.
    let pool = many(64);
    let (mut primes, mut builds) = (0, 0);
    for size in (2..=5_000).filter(|&m| is_prime(m)) {
        primes += 1;
        let most = size.min(64);
        for n in [1, most, 1 + random(most)] {
            let backends: Vec<Backend> = pool[..n as usize]
                .iter()
                .map(|b| Backend::new(b.key, 1 + random(10)))
                .collect();
            let table = build(&backends, size);
            assert_well_formed(&table);
            builds += 1;
        }
    }
    assert_eq!(primes, 669);
    assert_eq!(builds, 3 * primes);
}

#[test]
fn br06_t1_duplicates_are_rejected() {
    // The same backend twice is refused: both would fight for the same slots.
    let err = MaglevTable::build(
        &[
            Backend::new(b(1), 1),
            Backend::new(b(1), 1),
            Backend::new(b(2), 1),
        ],
        M,
        MAGLEV_SEED,
    )
    .unwrap_err();
    assert_eq!(err, MaglevError::DuplicateBackend { key: b(1) });
    assert_eq!(err.to_string(), "duplicate backend 198.51.100.11");
}

#[test]
fn br06_t2_mapped_ipv6_is_the_same_backend() {
    // An IPv4-mapped IPv6 address is its IPv4 address: listing both is a duplicate.
    let mapped: BackendKey = "::ffff:198.51.100.11".parse().unwrap();
    assert_eq!(mapped, b(1));
    assert_eq!(mapped.ip(), IpAddr::V4(Ipv4Addr::new(198, 51, 100, 11)));
    let err = MaglevTable::build(
        &[Backend::new(mapped, 1), Backend::new(b(1), 1)],
        M,
        MAGLEV_SEED,
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "duplicate backend 198.51.100.11");
    // And from std types.
    let v6 = Ipv4Addr::new(198, 51, 100, 11).to_ipv6_mapped();
    assert_eq!(BackendKey::from(IpAddr::V6(v6)), b(1));
    let spelled: BackendKey = "2001:0db8:0:0::1".parse().unwrap();
    assert_eq!(
        spelled,
        BackendKey::from(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1))
    );
    assert_eq!(spelled.to_string(), "2001:db8::1");
}

#[test]
fn br06_t3_ports_are_separate_identities() {
    // Table level: ports are part of the identity (whether a port is allowed with IPIP
    // encapsulation is the configuration's decision).
    let p8080: BackendKey = "198.51.100.11:8080".parse().unwrap();
    let p8081: BackendKey = "198.51.100.11:8081".parse().unwrap();
    let table = build(&[Backend::new(p8080, 1), Backend::new(p8081, 1)], M);
    assert_eq!(table.backends().len(), 2);
    let (a, c) = (slots_of(&table, p8080), slots_of(&table, p8081));
    assert_eq!((a, c), (32_769, 32_768));
    assert_eq!(p8080.port(), Some(8080));
}
