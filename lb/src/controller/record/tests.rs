//! Recovery against the in-memory data plane: a restarted daemon recognises each
//! installed table by the digest its record keeps, builds only what the record cannot
//! vouch for (a record of an earlier build), and never takes a changed table for the
//! recorded one.

use super::*;
use crate::controller::{
    Controller,
    desired::Desired,
    tests::{self as controller_tests, vip_toml},
};
use lb_dataplane::{FakeDataplane, fake::Op as FOp};
use lb_maglev::Backend;

/// Distinct table keys of [`desired`]: ports 80 and 84 share one.
const DISTINCT_TABLES: usize = 4;

/// Five VIPs: weighted backends; a backend of weight 0 beside another; a drained one;
/// no backend of weight > 0 (an empty table, 13 slots); and a VIP on the first VIP's
/// backends, given in another order.
fn desired() -> Desired {
    let vips = [
        vip_toml(
            80,
            1009,
            &[(11, 1, "active"), (12, 2, "active"), (13, 3, "active")],
        ),
        vip_toml(81, 1009, &[(11, 0, "active"), (12, 1, "active")]),
        vip_toml(82, 1009, &[(11, 1, "drain"), (12, 1, "active")]),
        vip_toml(83, 13, &[(11, 0, "active")]),
        vip_toml(
            84,
            1009,
            &[(12, 2, "active"), (11, 1, "active"), (13, 3, "active")],
        ),
    ];
    controller_tests::desired(&vips.concat())
}

fn vip(port: u16) -> Vip {
    format!("203.0.113.10:{port}/tcp").parse().unwrap()
}

/// A data plane with [`desired`] applied, as a restarted daemon finds it.
fn applied() -> FakeDataplane {
    let mut c = Controller::new(FakeDataplane::new());
    c.apply(&desired()).expect("apply");
    std::mem::take(c.dataplane_mut()).restarted()
}

fn adopt(dp: FakeDataplane) -> (Controller<FakeDataplane>, Recovery) {
    Controller::adopt(dp).expect("adopt")
}

/// The record of `dp` as JSON, changed by `edit`.
fn edit_record(dp: &mut FakeDataplane, edit: impl FnOnce(&mut serde_json::Value)) {
    let mut record: serde_json::Value =
        serde_json::from_slice(dp.record.as_deref().expect("a record")).expect("JSON");
    edit(&mut record);
    dp.record = Some(serde_json::to_vec(&record).expect("JSON"));
}

/// The record as an earlier build stored it: no table version, no digests.
fn without_digests(record: &mut serde_json::Value) {
    let top = record.as_object_mut().unwrap();
    assert!(top.remove("table_version").is_some() && top.remove("owners_version").is_some());
    for v in record["vips"].as_array_mut().unwrap() {
        let v = v.as_object_mut().unwrap();
        assert!(v.remove("owners").is_some() && v.remove("fingerprint").is_some());
    }
}

/// Whether the last changes wrote no map but `CONFIG` (which a start writes again).
fn writes_nothing_but_the_config(c: &Controller<FakeDataplane>) -> bool {
    c.dataplane()
        .ops
        .iter()
        .all(|o| matches!(o, FOp::SetConfig))
}

fn tables_written(c: &Controller<FakeDataplane>) -> usize {
    c.dataplane()
        .ops
        .iter()
        .filter(|o| matches!(o, FOp::InstallTable { .. }))
        .count()
}

/// The facts the builder gives for `vip`'s recorded spec, and its slots.
fn built(c: &Controller<FakeDataplane>, vip: &Vip) -> (TableFacts, Vec<u16>) {
    let applied = &c.state.vips[vip];
    let inputs: Vec<Backend> = table_key(&applied.spec).0;
    let table =
        MaglevTable::build(&inputs, applied.spec.table_size, c.state.maglev_seed).expect("build");
    let slots = table::slots_with_ids(&table, applied.spec.table_size, &applied.backend_ids);
    (TableFacts::of(&table), slots.to_vec())
}

#[test]
fn a_restart_recognises_every_table_by_its_digest_and_builds_none() {
    let mut before = Controller::new(FakeDataplane::new());
    before.apply(&desired()).expect("apply");
    let (mut c, recovery) = adopt(std::mem::take(before.dataplane_mut()).restarted());
    assert_eq!(recovery.tables_built, 0, "{recovery:?}");
    assert!(recovery.unverified.is_empty(), "{recovery:?}");
    assert_eq!(recovery.verified.len(), 5);
    for port in 80..=84 {
        let (facts, slots) = built(&c, &vip(port));
        let recovered = &c.state.vips[&vip(port)];
        assert_eq!(*recovered.table, facts, "port {port}");
        assert_eq!(*recovered.table, *before.state.vips[&vip(port)].table);
        assert_eq!(&*recovered.slots, &slots[..], "port {port}");
    }
    assert!(c.state.vips[&vip(83)].table.is_empty());
    c.apply(&desired()).expect("apply");
    assert!(
        writes_nothing_but_the_config(&c),
        "{:#?}",
        c.dataplane().ops
    );
}

#[test]
fn a_record_without_digests_has_its_tables_built_once_then_stored_with_them() {
    let mut dp = applied();
    edit_record(&mut dp, without_digests);
    let (mut c, recovery) = adopt(dp);
    assert_eq!(recovery.tables_built, DISTINCT_TABLES, "{recovery:?}");
    assert!(recovery.lines()[0].contains("(4 built again to be checked)"));
    assert_eq!(recovery.verified.len(), 5, "{recovery:?}");
    for port in 80..=84 {
        assert_eq!(*c.state.vips[&vip(port)].table, built(&c, &vip(port)).0);
    }
    // The same file writes no map, but stores the record again, with digests.
    c.apply(&desired()).expect("apply");
    assert!(
        writes_nothing_but_the_config(&c),
        "{:#?}",
        c.dataplane().ops
    );
    let stored: Record = serde_json::from_slice(c.dataplane().record.as_deref().unwrap()).unwrap();
    assert_eq!(stored.table_version, Some(FINGERPRINT_VERSION));
    assert!(stored.vips.iter().all(|v| v.owners.is_some()));
    let (_, again) = adopt(std::mem::take(c.dataplane_mut()).restarted());
    assert_eq!((again.tables_built, again.verified.len()), (0, 5));
}

#[test]
fn a_digest_of_another_table_algorithm_or_encoding_is_not_trusted() {
    for field in ["table_version", "owners_version"] {
        let mut dp = applied();
        edit_record(&mut dp, |r| {
            r[field] = (r[field].as_u64().unwrap() + 1).into();
        });
        let (_, recovery) = adopt(dp);
        assert_eq!(recovery.tables_built, DISTINCT_TABLES, "{field}");
        assert_eq!(recovery.verified.len(), 5, "{field}");
        assert!(recovery.record_outdated, "{field}");
    }
    let (_, current) = adopt(applied());
    assert!(!current.record_outdated);
}

#[test]
fn an_owners_digest_without_its_fingerprint_is_checked_by_a_build() {
    let mut dp = applied();
    edit_record(&mut dp, |r| {
        r["vips"][0].as_object_mut().unwrap().remove("fingerprint");
    });
    let (c, recovery) = adopt(dp);
    assert_eq!((recovery.tables_built, recovery.verified.len()), (1, 5));
    assert!(recovery.record_outdated);
    assert_eq!(*c.state.vips[&vip(80)].table, built(&c, &vip(80)).0);
}

#[test]
fn two_backends_ids_swapped_are_another_table() {
    // The right ids, each in the other backend's slots: what a digest of owner indices
    // must tell from the recorded table.
    let mut dp = applied();
    let id = dp.vips[&vip(80).key()];
    let table = dp.tables.get_mut(&id).expect("installed");
    let ids = table::distinct_ids(&table.slots);
    let (a, b) = (ids[0], ids[1]);
    for slot in &mut table.slots {
        if *slot == a {
            *slot = b;
        } else if *slot == b {
            *slot = a;
        }
    }
    let (_, recovery) = adopt(dp);
    assert_eq!(recovery.unverified, [vip(80)], "{recovery:?}");
}

#[test]
fn one_changed_slot_makes_that_vip_alone_unverified() {
    let mut dp = applied();
    let id = dp.vips[&vip(80).key()];
    let table = dp.tables.get_mut(&id).expect("installed");
    // Another backend of the same VIP takes slot 0.
    let other = *table.slots.iter().find(|&&b| b != table.slots[0]).unwrap();
    table.slots[0] = other;
    let (mut c, recovery) = adopt(dp);
    assert_eq!(recovery.unverified, [vip(80)], "{recovery:?}");
    assert_eq!((recovery.tables_built, recovery.verified.len()), (0, 4));
    // The next change rebuilds that table, and that one only.
    c.apply(&desired()).expect("apply");
    assert_eq!(tables_written(&c), 1, "{:#?}", c.dataplane().ops);
}

#[test]
fn an_empty_table_is_recognised_only_at_its_recorded_size() {
    let mut dp = applied();
    let id = dp.vips[&vip(83).key()];
    let table = dp.tables.get_mut(&id).expect("installed");
    assert_eq!(table.slots, [0; 13]);
    table.slots = vec![0; 11];
    let (_, recovery) = adopt(dp);
    assert_eq!(recovery.unverified, [vip(83)], "{recovery:?}");
}

#[test]
fn an_installed_id_bound_to_another_vip_is_not_this_tables() {
    // Backend ids are per (VIP, backend): VIP 81's ids name the same addresses as VIP
    // 82's, but its table must use its own.
    let mut dp = applied();
    let (id81, id82) = (dp.vips[&vip(81).key()], dp.vips[&vip(82).key()]);
    let slots82 = dp.tables[&id82].slots.clone();
    dp.tables.get_mut(&id81).unwrap().slots = slots82;
    let (_, recovery) = adopt(dp);
    assert_eq!(recovery.unverified, [vip(81)], "{recovery:?}");
}
