//! The fill loop and its turn schedule: the paper's worked example, explicit
//! permutations, weights and the scalar/vector walk agreeing.

use super::*;

fn perm(offset: u32, skip: u32) -> Permutation {
    Permutation { offset, skip }
}

#[test]
fn paper_worked_example() {
    // Eisenbud et al., NSDI 2016, section 3.4, Table 1.
    let b0 = perm(3, 4);
    let b1 = perm(0, 2);
    let b2 = perm(3, 1);
    assert_eq!(fill_slots(7, &[b0, b1, b2]).unwrap(), [1, 0, 1, 0, 2, 2, 0]);
    // B1 removed: indices now refer to [B0, B2].
    assert_eq!(fill_slots(7, &[b0, b2]).unwrap(), [0, 0, 0, 0, 1, 1, 1]);
}

/// The paper's pseudocode, literally (N x M permutation matrix, round robin).
fn reference_fill(size: u32, permutations: &[Permutation]) -> Vec<u32> {
    let m = size as usize;
    let perm: Vec<Vec<u32>> = permutations
        .iter()
        .map(|p| (0..size).map(|j| p.entry(j, size)).collect())
        .collect();
    let mut next = vec![0usize; permutations.len()];
    let mut entry = vec![u32::MAX; m];
    let mut n = 0;
    loop {
        for i in 0..permutations.len() {
            let mut c = perm[i][next[i]];
            while entry[c as usize] != u32::MAX {
                next[i] += 1;
                c = perm[i][next[i]];
            }
            entry[c as usize] = u32::try_from(i).expect("backend index fits u32");
            next[i] += 1;
            n += 1;
            if n == m {
                return entry;
            }
        }
    }
}

#[test]
fn equal_weights_match_the_paper_pseudocode() {
    let mut state = 12_345_u64;
    let mut random = |below: u32| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((state >> 33) % u64::from(below)) as u32
    };
    for size in [2, 3, 5, 7, 11, 13, 101, 1_009] {
        for n in [1, 2, 3, 7, 10, 64] {
            if n > size {
                continue;
            }
            let permutations: Vec<_> = (0..n)
                .map(|_| perm(random(size), random(size - 1) + 1))
                .collect();
            assert_eq!(
                fill_slots(size, &permutations).unwrap(),
                reference_fill(size, &permutations),
                "size {size}, n {n}"
            );
        }
    }
}

#[test]
fn quotas_are_exact_and_turns_interleave() {
    let permutations = [perm(0, 1), perm(5, 3), perm(2, 7), perm(9, 2)];
    let quotas = [1, 2, 3, 7];
    let slots = fill_with_quotas(13, &permutations, &quotas);
    let mut counts = [0; 4];
    for &s in &slots {
        counts[s as usize] += 1;
    }
    assert_eq!(counts, quotas);
    // R = 7: backend 2 (quota 3) plays in rounds 0, 2, 4; backend 1 in 0, 3.
    assert_eq!(
        turn_order(&quotas, 7),
        [0, 1, 2, 3, 3, 2, 3, 1, 3, 2, 3, 3, 3]
    );
}

#[test]
fn round_robin_shortcut_equals_the_general_schedule() {
    let permutations: Vec<_> = (0..10).map(|i| perm((i * 37) % 101, i + 1)).collect();
    for quotas in [
        vec![11, 10, 10, 10, 10, 10, 10, 10, 10, 10],
        vec![12, 0, 12, 11, 11, 11, 11, 11, 11, 11],
        vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 101],
    ] {
        assert_eq!(quotas.iter().sum::<u32>(), 101);
        let rounds = *quotas.iter().max().unwrap();
        let mut general = Filler::new(101, &permutations, Wide::detect());
        general.run(turn_order(&quotas, rounds).into_iter());
        assert_eq!(fill_with_quotas(101, &permutations, &quotas), general.slots);
    }
}

#[test]
fn modular_helpers() {
    for m in [2_u32, 3, 7, 65_537, 655_373, 4_000_037] {
        for a in [1, 2, m / 2, m - 1]
            .into_iter()
            .filter(|&a| a >= 1 && a < m)
        {
            let inverse = inverse_mod_prime(a, m);
            assert_eq!(
                u64::from(a) * u64::from(inverse) % u64::from(m),
                1,
                "{a} mod {m}"
            );
            #[expect(
                clippy::cast_possible_truncation,
                reason = "inverse < m, so the quotient is below 2^32"
            )]
            let shoup = ((u64::from(inverse) << 32) / u64::from(m)) as u32;
            for x in [0, 1, m / 3, m - 1] {
                assert_eq!(
                    u64::from(mul_mod_shoup(x, inverse, shoup, m)),
                    u64::from(x) * u64::from(inverse) % u64::from(m)
                );
            }
        }
    }
}

#[test]
fn tail_turns_equal_walking_on_large_tables() {
    // M = 65,537 with N = 10 crosses from walking to the tail computation.
    let mut state = 99_u64;
    let mut random = |below: u32| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((state >> 33) % u64::from(below)) as u32
    };
    let size = 65_537;
    let permutations: Vec<_> = (0..10)
        .map(|_| perm(random(size), random(size - 1) + 1))
        .collect();
    assert_eq!(
        fill_slots(size, &permutations).unwrap(),
        reference_fill(size, &permutations)
    );
}

/// Walks every turn (no tail computation), in the documented turn order.
fn walking_fill(size: u32, permutations: &[Permutation], quotas: &[u32]) -> Vec<u32> {
    let rounds = *quotas.iter().max().unwrap();
    let mut slots = vec![u32::MAX; size as usize];
    let mut next: Vec<u32> = permutations.iter().map(|p| p.offset).collect();
    for i in turn_order(quotas, rounds) {
        let p = permutations[i as usize];
        let mut c = next[i as usize];
        while slots[c as usize] != u32::MAX {
            c = (c + p.skip) % size;
        }
        slots[c as usize] = i;
        next[i as usize] = (c + p.skip) % size;
    }
    slots
}

#[test]
fn weighted_fill_equals_walking_every_turn() {
    let mut state = 5_u64;
    let mut random = |below: u32| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((state >> 33) % u64::from(below)) as u32
    };
    for (size, n) in [(65_537, 7), (65_537, 40), (1_009, 30), (257, 5)] {
        let permutations: Vec<_> = (0..n)
            .map(|_| perm(random(size), random(size - 1) + 1))
            .collect();
        let weights: Vec<u32> = (0..n).map(|_| random(50)).collect();
        let quotas = quota::apportion(&weights, size).quotas;
        if quotas.iter().all(|&q| q == 0) {
            continue;
        }
        assert_eq!(
            fill_with_quotas(size, &permutations, &quotas),
            walking_fill(size, &permutations, &quotas),
            "size {size}, n {n}"
        );
    }
}

#[test]
fn wide_and_scalar_walks_build_the_same_tables() {
    let mut state = 11_u64;
    let mut random = |below: u32| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((state >> 33) % u64::from(below)) as u32
    };
    for (size, n, weighted) in [(65_537, 100, false), (65_537, 13, true), (2_003, 40, true)] {
        let permutations: Vec<_> = (0..n)
            .map(|_| perm(random(size), random(size - 1) + 1))
            .collect();
        let weights: Vec<u32> = (0..n)
            .map(|_| if weighted { 1 + random(9) } else { 1 })
            .collect();
        let quotas = quota::apportion(&weights, size).quotas;
        assert_eq!(
            fill_using(size, &permutations, &quotas, Wide::detect()),
            fill_using(size, &permutations, &quotas, Wide::None),
            "size {size}, n {n}"
        );
    }
}

#[test]
fn explicit_permutations_are_validated() {
    assert_eq!(
        fill_slots(7, &[perm(3, 4), perm(0, 7)])
            .unwrap_err()
            .to_string(),
        "permutation 1 (offset 0, skip 7) is invalid for table_size 7: \
         need offset < table_size and 1 <= skip < table_size"
    );
    assert_eq!(
        fill_slots(8, &[perm(3, 4)]).unwrap_err(),
        MaglevError::TableSizeNotPrime {
            size: 8,
            below: 7,
            above: 11
        }
    );
    assert_eq!(
        fill_slots(2, &[perm(0, 1); 3]).unwrap_err().to_string(),
        "table_size 2 is smaller than backend count 3"
    );
    assert_eq!(fill_slots(7, &[]).unwrap(), Vec::<u32>::new());
}
