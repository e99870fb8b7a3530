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
