// SPDX-License-Identifier: MIT OR Apache-2.0
//! Tests of the verdict reasons: indexes, names and XDP actions.

use super::*;

#[test]
fn reasons_are_indexed_in_order_and_named_uniquely() {
    for (i, reason) in Reason::ALL.iter().enumerate() {
        assert_eq!(*reason as usize, i);
        for other in &Reason::ALL[..i] {
            assert_ne!(other.name(), reason.name());
        }
    }
}

#[test]
fn every_reason_returns_the_action_its_name_says() {
    for reason in Reason::ALL {
        let name = reason.name();
        let expected = if name.starts_with("pass_") {
            XDP_PASS
        } else if name.starts_with("drop_") {
            XDP_DROP
        } else if name.starts_with("tx_") {
            XDP_TX
        } else if name.starts_with("redirect_") {
            XDP_REDIRECT
        } else {
            panic!("{name}: no action prefix")
        };
        assert_eq!(reason.action(), expected, "{name}");
    }
}

#[test]
fn every_give_up_has_its_own_counter_and_repicked_has_none() {
    let mut stats = VipStats::default();
    for (i, note) in Note::GIVE_UPS.iter().enumerate() {
        assert_eq!(note.give_up(), Some(i), "{}", note.counter());
        for _ in 0..=i {
            stats.count(*note);
        }
        assert!(note.counter().starts_with("fp_"));
        assert!(note.residual().is_some());
    }
    stats.count(Note::Repicked);
    assert_eq!(Note::Repicked.give_up(), None);
    let expected = [
        ("fp_syn_maybe_split", 1),
        ("fp_syn_over_pin", 2),
        ("fp_syn_dropped", 3),
        ("fp_held_kept", 4),
        ("fp_unpinned", 5),
        ("fp_syn_drained_owner", 6),
        ("fp_udp_drained_clean_owner", 7),
    ];
    assert_eq!(stats.give_ups().count(), expected.len());
    for ((note, n), (name, want)) in stats.give_ups().zip(expected) {
        assert_eq!((note.counter(), n), (name, want));
    }
    let mut total = stats;
    total.accumulate(&stats);
    assert_eq!(total.fp_give_ups[6], 14);
    assert_eq!(total.ct_stale_repicked, 0);
}
