//! [`TableDiff`]: what changes between two tables, and why.

use super::*;
use crate::{Backend, defaults::MAGLEV_SEED};

fn table(spec: &[(&str, u32)], size: u32) -> MaglevTable {
    let backends: Vec<Backend> = spec
        .iter()
        .map(|&(a, w)| Backend::new(a.parse::<BackendKey>().unwrap(), w))
        .collect();
    MaglevTable::build(&backends, size, MAGLEV_SEED).unwrap()
}

#[test]
fn identical_tables_do_not_differ() {
    let a = table(&[("198.51.100.11", 1), ("198.51.100.12", 3)], 1_009);
    let diff = TableDiff::between(&a, &a);
    assert_eq!(diff.changed, 0);
    assert!(diff.added.is_empty() && diff.removed.is_empty());
    assert_eq!(diff.changed_fraction(), 0.0);
}

#[test]
fn removal_and_addition() {
    let three = [
        ("198.51.100.11", 1),
        ("198.51.100.12", 1),
        ("198.51.100.13", 1),
    ];
    let old = table(&three, 1_009);
    let new = table(&three[..2], 1_009);
    let diff = TableDiff::between(&old, &new);
    assert_eq!(
        diff.removed,
        ["198.51.100.13".parse::<BackendKey>().unwrap()]
    );
    assert!(diff.added.is_empty());
    let owned_by_removed = old.slot_counts()[2];
    assert_eq!(diff.lost_by_removed, owned_by_removed);
    assert_eq!(
        diff.changed,
        diff.lost_by_removed + diff.changed_between_common
    );
    assert_eq!(diff.gained_by_added, 0);

    let back = TableDiff::between(&new, &old);
    assert_eq!(back.added, diff.removed);
    assert_eq!(back.gained_by_added, owned_by_removed);
    assert_eq!(
        back.changed,
        back.gained_by_added + back.changed_between_common
    );
}

#[test]
fn draining_counts_as_removal_and_empty_tables_have_no_owner() {
    let old = table(&[("198.51.100.11", 1), ("198.51.100.12", 1)], 101);
    let drained = table(&[("198.51.100.11", 1), ("198.51.100.12", 0)], 101);
    let diff = TableDiff::between(&old, &drained);
    assert_eq!(diff.removed.len(), 1);
    assert_eq!(diff.lost_by_removed, old.slot_counts()[1]);

    let empty = table(&[], 101);
    let diff = TableDiff::between(&old, &empty);
    assert_eq!((diff.changed, diff.lost_by_removed), (101, 101));
    assert_eq!(diff.changed_between_common, 0);
    let diff = TableDiff::between(&empty, &old);
    assert_eq!((diff.changed, diff.gained_by_added), (101, 101));
    assert_eq!(TableDiff::between(&empty, &empty).changed, 0);
}

#[test]
fn replacing_a_backend_counts_both_ways() {
    let old = table(&[("198.51.100.11", 1), ("198.51.100.12", 1)], 101);
    let new = table(&[("198.51.100.11", 1), ("198.51.100.13", 1)], 101);
    let diff = TableDiff::between(&old, &new);
    assert!(diff.gained_by_added > 0 && diff.lost_by_removed > 0);
    assert!(
        diff.changed <= diff.gained_by_added + diff.lost_by_removed + diff.changed_between_common
    );
}

#[test]
fn size_change_rehashes_everything() {
    let old = table(&[("198.51.100.11", 1), ("198.51.100.12", 1)], 101);
    let new = table(&[("198.51.100.11", 1), ("198.51.100.13", 1)], 103);
    let diff = TableDiff::between(&old, &new);
    assert!(diff.size_changed);
    assert_eq!(diff.changed, 103);
    assert_eq!(diff.gained_by_added, new.slot_counts()[1]);
    assert_eq!(diff.changed_between_common, new.slot_counts()[0]);
    assert_eq!(diff.lost_by_removed, old.slot_counts()[1]);
    assert_eq!(diff.changed_fraction(), 1.0);
}
