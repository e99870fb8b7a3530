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
