// SPDX-License-Identifier: MIT OR Apache-2.0
//! Tests of the second chance's rules SC2, SC3 and SC5, and a property over sequences
//! of table changes: the destination, the candidate and the owners given up together
//! name every owner the slot had since it was last clean.

extern crate std;

use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;

const A: u32 = 1;
const C: u32 = 2;
const D: u32 = 3;
const S: u64 = 1_000_000_000;

#[test]
fn a_clean_slot_offers_nothing() {
    let clean = SlotState::clean(A);
    assert_eq!(
        offer(&clean, A),
        Offer {
            candidate: 0,
            given_up: 0
        }
    );
}

#[test]
fn a_dirty_slot_offers_the_other_possible_owner() {
    let moved = SlotState::clean(A).switched(C, 10 * S);
    // Today's miss rule takes the owner: the clean owner is the candidate.
    assert_eq!(offer(&moved, C).candidate, A);
    // The fast path's rule M1 takes the clean owner: the owner is the candidate.
    assert_eq!(offer(&moved, A).candidate, C);
    assert_eq!(offer(&moved, C).given_up + offer(&moved, A).given_up, 0);
    // A destination that is neither: the clean owner is offered, the owner given up.
    assert_eq!(
        offer(&moved, D),
        Offer {
            candidate: A,
            given_up: 1
        }
    );
}

#[test]
fn a_slot_back_at_its_clean_owner_or_resized_offers_nothing() {
    let back = SlotState::clean(A).switched(C, 10 * S).switched(A, 20 * S);
    assert!(back.is_dirty());
    assert_eq!(offer(&back, A).candidate, 0, "owner and clean owner agree");
    let resized = SlotState::resized(C, 10 * S);
    assert_eq!(offer(&resized, C).candidate, 0, "no clean owner");
}

#[test]
fn a_second_change_while_dirty_gives_the_owner_in_between_up() {
    let moved = SlotState::clean(A).switched(C, 10 * S);
    assert_eq!(owner_given_up(&SlotState::clean(A), C), None, "clean: kept");
    assert_eq!(owner_given_up(&moved, C), None, "same owner");
    assert_eq!(
        owner_given_up(&moved, A),
        Some(C),
        "back to A: C is forgotten"
    );
    assert_eq!(owner_given_up(&moved, D), Some(C));
    let again = moved.switched(D, 20 * S);
    assert_eq!((again.owner(), again.clean_owner()), (D, A));
    assert_eq!(offer(&again, D).candidate, A, "C is no longer named");
}

#[test]
fn a_published_table_counts_the_slots_that_forget_an_owner() {
    let live = [
        SlotState::clean(A),
        SlotState::clean(A).switched(C, 10 * S),
        SlotState::clean(A).switched(C, 10 * S),
        SlotState::clean(A).switched(C, 10 * S),
    ];
    // Slot 0 is clean (nothing to forget), slot 1 keeps C, slot 2 goes back to A
    // (C forgotten), slot 3 moves on to D (C forgotten).
    assert_eq!(owners_given_up(Some(&live), &[C, C, A, D]), 2);
    assert_eq!(
        owners_given_up(Some(&live), &[A, C, C, C]),
        0,
        "no owner changes"
    );
    assert_eq!(owners_given_up(None, &[C, C, A, D]), 0, "the first table");
    assert_eq!(owners_given_up(Some(&live), &[D, D]), 0, "resized");
    let compact: [u16; 4] = [3, 3, 3, 3];
    assert_eq!(owners_given_up(Some(&live), &compact), 3, "u16 ids");
}

proptest! {
    /// From a clean slot owned by `first`, through the changes `owners` (each
    /// republished as a table change does): for either decision the miss rules make
    /// (the owner, or the clean owner), the destination, the candidate and every owner
    /// given up at a change name each owner the slot had; and the destination and the
    /// candidate are two of those owners.
    #[test]
    fn every_owner_since_clean_is_named_or_counted(
        first in 1u32..5,
        owners in proptest::collection::vec(1u32..5, 1..6),
    ) {
        let mut slot = SlotState::clean(first);
        let mut had = BTreeSet::from([first]);
        let mut forgotten = BTreeSet::new();
        for (i, owner) in (1u64..).zip(&owners) {
            forgotten.extend(owner_given_up(&slot, *owner));
            slot = slot.republished(*owner, i * S);
            had.insert(*owner);
        }
        let clean_owner = if slot.is_dirty() { slot.clean_owner() } else { slot.owner() };
        for decided in [slot.owner(), clean_owner] {
            let o = offer(&slot, decided);
            let mut named = forgotten.clone();
            named.insert(decided);
            if o.candidate != 0 {
                named.insert(o.candidate);
                prop_assert!(had.contains(&o.candidate));
                prop_assert_ne!(o.candidate, decided);
            }
            prop_assert!(had.is_subset(&named), "had {had:?}, named {named:?}");
            prop_assert_eq!(o.given_up, 0);
        }
    }
}

#[test]
fn a_pending_slot_offers_the_next_owner_and_keeps_forwarding_by_its_owner() {
    // Phase 1 on a clean slot: owner A stays, the next owner C is the candidate.
    let learned = SlotState::clean(A).learned(C, 10 * S);
    assert_eq!((learned.owner(), learned.is_dirty()), (A, false));
    assert_eq!(learned.pending(), C);
    assert_eq!(
        offer(&learned, A),
        Offer {
            candidate: C,
            given_up: 0
        }
    );
    // A destination that is the pending owner falls back to the slot's state: none on
    // a clean slot.
    assert_eq!(offer(&learned, C).candidate, 0);
    // On a dirty slot (owner C, clean owner A), pending D: D is carried, A given up.
    let dirty = SlotState::clean(A).switched(C, 10 * S).learned(D, 20 * S);
    assert_eq!(
        (dirty.owner(), dirty.clean_owner(), dirty.pending()),
        (C, A, D)
    );
    assert_eq!(
        offer(&dirty, C),
        Offer {
            candidate: D,
            given_up: 1
        }
    );
    // A slot the next table keeps is not pending.
    assert_eq!(SlotState::clean(A).learned(A, 10 * S).pending(), 0);
    assert_eq!(learned.learned(A, 20 * S).pending(), 0, "learned again");
}

#[test]
fn a_published_table_ends_the_learn_phase_and_the_cleaning_keeps_it() {
    let learned = SlotState::clean(A).learned(C, 10 * S);
    // Phase 2: the moved slot turns dirty with the old owner as clean owner.
    let switched = learned.republished(C, 20 * S);
    assert_eq!(
        (switched.owner(), switched.clean_owner(), switched.pending()),
        (C, A, 0)
    );
    assert_eq!(switched.flags, 0);
    assert_eq!(offer(&switched, C).candidate, A);
    // Another change instead (the slot keeps A): not pending either.
    assert_eq!(learned.republished(A, 20 * S).pending(), 0);
    // The cleaning of a dirty pending slot keeps the mark.
    let dirty = SlotState::clean(A).switched(C, 10 * S).learned(D, 20 * S);
    let clean = crate::fastpath::clean_commit(&dirty, dirty.epoch).expect("commits");
    assert_eq!((clean.is_dirty(), clean.pending()), (false, D));
}

#[test]
fn a_learn_bumps_a_dirty_slots_epoch_as_a_republish_does() {
    let dirty = SlotState::clean(A).switched(C, 10 * S);
    let learned = dirty.learned(D, 20 * S);
    assert_eq!(learned.epoch, dirty.epoch.wrapping_add(1));
    assert_eq!(
        learned.changed_ticks, dirty.changed_ticks,
        "not a change of owner"
    );
    let clean = SlotState::clean(A);
    assert_eq!(clean.learned(C, 20 * S).epoch, clean.epoch);
}

#[test]
fn a_pending_cell_reads_as_before_to_a_program_built_before_the_mark() {
    use crate::types::TableCell;
    for slot in [SlotState::clean(A), SlotState::clean(A).switched(C, 10 * S)] {
        let plain = TableCell::of_slot(&slot);
        let pending = TableCell::of_slot(&slot.learned(D, 20 * S));
        assert_eq!(TableCell::of_slot(&pending.slot()), pending, "round trip");
        assert_eq!(pending.slot().pending(), D);
        // What an older program reads: the owner and the state, masked.
        assert_eq!(pending.owner(), plain.owner());
        assert_eq!(pending.is_clean(), plain.is_clean());
        assert_eq!((pending.lo >> 32) & 0xff_ffff, (plain.lo >> 32) & 0xff_ffff);
        // The mark is exactly the formerly spare bits: hi 16..32 and lo 56..64.
        assert_eq!(pending.hi & !0xffff_0000, plain.hi & !0xffff_0000);
        assert_eq!((pending.hi >> 16) & 0xffff, u64::from(D));
        assert_eq!(pending.lo >> 56, 1);
    }
}

proptest! {
    /// Rules R1, R2 and SC6 over any slot: between the phases an instance at phase 1
    /// (the learned slot) and one at phase 2 (the new table published over it) each
    /// name both the slot's old owner and its next owner, as destination or candidate
    /// (at phase 2 unless SC5 gives the old owner up: a second change of a dirty
    /// slot); the learn changes neither the owner, the state nor the clean owner.
    #[test]
    fn either_phase_names_the_old_and_the_next_owner(
        first in 1u32..5,
        owners in proptest::collection::vec(1u32..5, 0..3),
        next in 1u32..5,
    ) {
        let mut slot = SlotState::clean(first);
        for (i, owner) in (1u64..).zip(&owners) {
            slot = slot.republished(*owner, i * S);
        }
        let learned = slot.learned(next, 10 * S);
        prop_assert_eq!(
            (learned.owner(), learned.state, learned.clean_owner),
            (slot.owner(), slot.state, slot.clean_owner)
        );
        let old = slot.owner();
        let phase1 = offer(&learned, old);
        let switched = learned.republished(next, 20 * S);
        prop_assert_eq!(switched.pending(), 0);
        let phase2 = offer(&switched, next);
        let forgotten = owner_given_up(&slot, next).is_some();
        for (destination, o) in [(old, phase1), (next, phase2)] {
            let named = [destination, o.candidate];
            if forgotten && destination == next {
                prop_assert!(named.contains(&next));
                continue;
            }
            prop_assert!(named.contains(&old), "phase names {named:?}, old {old}");
            prop_assert!(named.contains(&next), "phase names {named:?}, next {next}");
        }
    }
}
