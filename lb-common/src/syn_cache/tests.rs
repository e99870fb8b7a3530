// SPDX-License-Identifier: MIT OR Apache-2.0
//! Tests of the SYN cache's slot index: one part is the old `hash & mask`, every index is
//! in the array, each CPU stays in its own part, the parts cover the array, and userspace's
//! list of a flow's slots holds the one each CPU uses.

extern crate std;

use std::{collections::BTreeSet, vec::Vec};

use proptest::prelude::*;

use super::*;

/// The mask of an array of `2^slot_bits` slots (32: `u32::MAX`, 2^32 slots).
fn mask_of(slot_bits: u32) -> u32 {
    if slot_bits >= 32 {
        u32::MAX
    } else {
        (1u32 << slot_bits) - 1
    }
}

#[test]
fn the_default_array_gets_a_part_per_cpu_up_to_sixteen_parts() {
    let slots = crate::defaults::CT_SYN_CAPACITY;
    assert_eq!(part_bits(slots, 1), 0);
    assert_eq!(part_bits(slots, 2), 1);
    assert_eq!(part_bits(slots, 3), 2, "3 CPUs round up to 4 parts");
    assert_eq!(part_bits(slots, 4), 2);
    assert_eq!(part_bits(slots, 6), 3);
    assert_eq!(part_bits(slots, 16), 4);
    assert_eq!(part_bits(slots, 64), 4, "16,384 / 1,024: at most 16 parts");
    assert_eq!(part_bits(1 << 20, 64), 6);
}

#[test]
fn small_arrays_stay_whole() {
    assert_eq!(part_bits(MIN_PART_SLOTS, 64), 0);
    assert_eq!(part_bits(MIN_PART_SLOTS / 2, 64), 0);
    assert_eq!(part_bits(1, 64), 0);
    assert_eq!(part_bits(2 * MIN_PART_SLOTS, 64), 1);
    assert_eq!(part_bits(0, 0), 0);
}

#[test]
fn two_parts_split_the_array_at_its_middle() {
    let mask = 4_095;
    assert_eq!(slot_index(0x1234_5678, 0, mask, 1), 0x678);
    assert_eq!(slot_index(0x1234_5678, 1, mask, 1), 2_048 + 0x678);
    assert_eq!(
        slot_index(0x1234_5678, 2, mask, 1),
        0x678,
        "CPU 2 shares part 0"
    );
    assert_eq!(slot_index(0x1234_5678, 3, mask, 1), 2_048 + 0x678);
    let slots: Vec<u32> = part_slots(0x1234_5678, mask, 1).collect();
    assert_eq!(slots, [0x678, 2_048 + 0x678]);
}

#[test]
fn the_whole_u32_range_of_slots_has_no_overflow() {
    assert_eq!(slot_index(0xdead_beef, 7, u32::MAX, 0), 0xdead_beef);
    assert_eq!(
        slot_index(0xdead_beef, 1, u32::MAX, 1),
        0xdead_beef | 0x8000_0000
    );
    assert_eq!(parts_of(u32::MAX, 0), 1);
    assert_eq!(parts_of(u32::MAX, 31), 1 << 31);
}

proptest! {
    /// One part is the index every configuration before the parts used.
    #[test]
    fn one_part_is_hash_and_mask(hash: u32, cpu: u32, slot_bits in 0u32..=32) {
        let mask = mask_of(slot_bits);
        prop_assert_eq!(slot_index(hash, cpu, mask, 0), hash & mask);
        prop_assert_eq!(part_slots(hash, mask, 0).collect::<Vec<_>>(), [hash & mask]);
    }

    /// Every index is a slot of the array, whatever the part bits (even too many).
    #[test]
    fn every_index_is_in_the_array(
        hash: u32, cpu: u32, slot_bits in 0u32..=32, bits in 0u8..=255,
    ) {
        let mask = mask_of(slot_bits);
        prop_assert!(slot_index(hash, cpu, mask, bits) <= mask);
    }

    /// A CPU's slots are all in its own part (`cpu mod parts`), at the flow's offset.
    #[test]
    fn a_cpu_stays_in_its_part(hash: u32, cpu: u32, slot_bits in 10u32..=24, bits in 0u8..=10) {
        let mask = mask_of(slot_bits);
        let parts = parts_of(mask, bits);
        let size = (mask + 1) / parts;
        let index = slot_index(hash, cpu, mask, bits);
        prop_assert_eq!(index / size, cpu % parts);
        prop_assert_eq!(index % size, offset_in_part(hash, mask, bits));
    }

    /// Two CPUs of different parts never share a slot, and the CPUs of one part share
    /// every slot.
    #[test]
    fn parts_are_disjoint(hash: u32, a: u32, b: u32, slot_bits in 10u32..=24, bits in 0u8..=10) {
        let mask = mask_of(slot_bits);
        let parts = parts_of(mask, bits);
        let same = a % parts == b % parts;
        prop_assert_eq!(slot_index(hash, a, mask, bits) == slot_index(hash, b, mask, bits), same);
    }

    /// Userspace's list of a flow's slots holds the slot every CPU uses, once per part.
    #[test]
    fn part_slots_hold_every_cpus_slot(hash: u32, cpu: u32, slot_bits in 0u32..=20, bits in 0u8..=24) {
        let mask = mask_of(slot_bits);
        let slots: Vec<u32> = part_slots(hash, mask, bits).collect();
        let distinct: BTreeSet<u32> = slots.iter().copied().collect();
        prop_assert_eq!(distinct.len(), slots.len());
        prop_assert_eq!(u32::try_from(slots.len()).unwrap(), parts_of(mask, bits));
        prop_assert!(slots.contains(&slot_index(hash, cpu, mask, bits)));
    }

    /// [`part_bits`] gives the CPUs rounded up to a power of two, capped so each part
    /// keeps [`MIN_PART_SLOTS`] slots (one part when even two would not).
    #[test]
    fn chosen_parts_are_the_cpus_capped_by_the_minimum(slot_bits in 0u32..=31, cpus in 0u32..=4_096) {
        let slots = 1u32 << slot_bits;
        let parts = 1u32 << part_bits(slots, cpus);
        let wanted = cpus.max(1).next_power_of_two();
        let most = (slots / MIN_PART_SLOTS).max(1);
        prop_assert_eq!(parts, wanted.min(most));
        prop_assert!(parts == 1 || slots / parts >= MIN_PART_SLOTS);
    }
}
