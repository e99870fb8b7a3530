//! Controller logic against the in-memory data plane: what is written, in which order,
//! what a failure leaves behind, id stability, shared builds, and, at controller level,
//! the failure scenarios of drained backends (BR-03), invalid table sizes (BR-04),
//! several backends down (BR-09), many services on the same backends (BR-10) and
//! changes while packets flow (BR-12), described in `docs/src/operations/failure-scenarios.md`.

use std::collections::BTreeSet;

use lb_common::types::{BACKEND_ACTIVE, BACKEND_DOWN, BACKEND_DRAINING, BackendEntry};

use super::*;
use crate::config::{BackendState, Config};
use lb_dataplane::{FakeDataplane, fake::Op as FOp};

const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

/// The desired state of a configuration with `vips` (TOML `[[vip]]` tables).
pub(super) fn desired(vips: &str) -> Desired {
    let text = format!(
        "interface = \"eth0\"\n[encap]\nsource_v4 = \"192.0.2.1\"\nsource_v6 = \"2001:db8:c::1\"\n{vips}"
    );
    let loaded = Config::from_toml(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    Desired::from_config(&loaded.config, MAC)
}

/// A `[[vip]]` table: 203.0.113.10:`port`/tcp of `size` slots with backends
/// 198.51.100.`last` of `(last, weight, state)`.
pub(super) fn vip_toml(port: u16, size: u32, backends: &[(u8, u32, &str)]) -> String {
    let mut s = format!(
        "[[vip]]\naddress = \"203.0.113.10\"\nport = {port}\nprotocol = \"tcp\"\ntable_size = {size}\n"
    );
    for (last, weight, state) in backends {
        s.push_str(&format!(
            "[[vip.backend]]\naddress = \"198.51.100.{last}\"\nweight = {weight}\nstate = \"{state}\"\n"
        ));
    }
    s
}

fn three() -> Desired {
    desired(&vip_toml(
        80,
        1009,
        &[(11, 1, "active"), (12, 1, "active"), (13, 1, "active")],
    ))
}

fn vip80() -> Vip {
    "203.0.113.10:80/tcp".parse().unwrap()
}

fn key(last: u8) -> BackendKey {
    format!("198.51.100.{last}").parse().unwrap()
}

fn controller() -> Controller<FakeDataplane> {
    Controller::new(FakeDataplane::new())
}

/// Position of the first op matching `f`.
fn pos(ops: &[FOp], f: impl Fn(&FOp) -> bool) -> usize {
    ops.iter()
        .position(f)
        .unwrap_or_else(|| panic!("op not found in {ops:#?}"))
}

/// A comparable snapshot of the fake's state. An all-zero backend entry is the same as
/// none (the kernel's array map holds zeros for unwritten ids).
fn snapshot(dp: &FakeDataplane) -> String {
    let backends: Vec<_> = dp
        .backends
        .iter()
        .filter(|(_, e)| **e != BackendEntry::default())
        .collect();
    let mut vips: Vec<String> = dp.vips.iter().map(|v| format!("{v:?}")).collect();
    vips.sort();
    format!("{:?}|{backends:?}|{:?}|{vips:?}", dp.config, dp.tables)
}

fn id_of(c: &Controller<FakeDataplane>, last: u8) -> u32 {
    c.vips()[&vip80()].backend_ids[&key(last)]
}

#[test]
fn first_apply_writes_config_backends_table_then_vip() {
    let mut c = controller();
    let report = c.apply(&three()).unwrap();
    let ops = &c.dataplane().ops;
    assert!(matches!(ops[0], FOp::SetConfig));
    let table = pos(ops, |o| matches!(o, FOp::InstallTable { .. }));
    let vip = pos(ops, |o| matches!(o, FOp::SetVip(..)));
    let last_backend = ops
        .iter()
        .rposition(|o| matches!(o, FOp::SetBackend { .. }))
        .unwrap();
    assert!(last_backend < table && table < vip, "{ops:#?}");
    assert_eq!(report.lines().len(), 1);
    assert!(
        report.lines()[0].starts_with(
            "VIP 203.0.113.10:80/tcp: 3 backends (3 in the table), table 1009 slots, fingerprint "
        ),
        "{}",
        report.lines()[0]
    );
    // The installed table references exactly the three backends' ids, evenly.
    let slots = &c.dataplane().tables[&0].slots;
    assert_eq!(slots.len(), 1009);
    let ids: BTreeSet<u32> = slots.iter().copied().collect();
    assert_eq!(ids, [id_of(&c, 11), id_of(&c, 12), id_of(&c, 13)].into());
    for id in ids {
        let n = slots.iter().filter(|&&s| s == id).count();
        assert!((336..=337).contains(&n), "{n}");
    }
    assert_eq!(
        c.dataplane().config.unwrap().hash_seed,
        crate::defaults::HASH_SEED
    );
}

#[test]
fn applying_the_same_state_again_writes_nothing() {
    let mut c = controller();
    c.apply(&three()).unwrap();
    let n = c.dataplane().ops.len();
    let report = c.apply(&three()).unwrap();
    assert_eq!(c.dataplane().ops.len(), n);
    assert_eq!(report.operations, 0);
    assert_eq!(c.builds_total(), 1);
}

#[test]
fn a_gue_vip_writes_its_port_into_each_backend_entry_and_a_reload_switches_back() {
    let mut c = controller();
    let backends = [(11, 1, "active"), (12, 1, "active")];
    let gue = vip_toml(80, 1009, &backends).replace("[[vip]]\n", "[[vip]]\nencap = \"gue\"\n");
    let port =
        |c: &Controller<FakeDataplane>, last| c.dataplane().backends[&id_of(c, last)].gue_port;
    // `desired` ends the file's `[encap]` table: the key joins it.
    c.apply(&desired(&format!("gue_port = 7000\n{gue}")))
        .unwrap();
    assert_eq!(
        port(&c, 11),
        7000u16.to_be(),
        "the configured port, wire order"
    );
    assert_eq!(port(&c, 12), 7000u16.to_be());
    // The default port; then back to IP-in-IP: entries rewritten, the table kept.
    c.apply(&desired(&gue)).unwrap();
    assert_eq!(port(&c, 11), lb_common::types::GUE_DEFAULT_PORT.to_be());
    let builds = c.builds_total();
    c.apply(&desired(&vip_toml(80, 1009, &backends))).unwrap();
    assert_eq!((port(&c, 11), port(&c, 12)), (0, 0), "IP-in-IP");
    assert_eq!(
        c.builds_total(),
        builds,
        "the encapsulation changes no table"
    );
}

#[test]
fn adding_a_backend_writes_it_before_the_new_table() {
    let mut c = controller();
    c.apply(&three()).unwrap();
    let before = c.dataplane().ops.len();
    let mut d = three();
    d.add_backend(&vip80(), key(14), 1).unwrap();
    let report = c.apply(&d).unwrap();
    let ops = &c.dataplane().ops[before..];
    let new_id = id_of(&c, 14);
    let write = pos(
        ops,
        |o| matches!(o, FOp::SetBackend { id, state } if *id == new_id && *state == BACKEND_ACTIVE),
    );
    let table = pos(ops, |o| {
        matches!(o, FOp::InstallTable { generation: 2, .. })
    });
    assert!(write < table);
    assert!(
        !ops.iter()
            .any(|o| matches!(o, FOp::SetVip(..) | FOp::SetConfig))
    );
    assert!(
        report.lines()[0].contains("slots changed owner"),
        "{}",
        report.lines()[0]
    );
}

#[test]
fn a_removed_backend_is_marked_down_after_the_table_without_it() {
    let mut c = controller();
    c.apply(&three()).unwrap();
    let removed = id_of(&c, 13);
    let before = c.dataplane().ops.len();
    let mut d = three();
    d.remove_backend(&vip80(), &key(13)).unwrap();
    c.apply(&d).unwrap();
    let ops = &c.dataplane().ops[before..];
    let table = pos(ops, |o| matches!(o, FOp::InstallTable { .. }));
    let down = pos(
        ops,
        |o| matches!(o, FOp::SetBackend { id, state } if *id == removed && *state == BACKEND_DOWN),
    );
    assert!(table < down, "{ops:#?}");
    assert!(!c.dataplane().tables[&0].slots.contains(&removed));
}

#[test]
fn drain_goes_after_the_table_and_undrain_before() {
    let mut c = controller();
    c.apply(&three()).unwrap();
    let id = id_of(&c, 12);
    let mut d = three();
    d.set_backend(&vip80(), &key(12), BackendState::Drain, None)
        .unwrap();
    let before = c.dataplane().ops.len();
    c.apply(&d).unwrap();
    let ops = &c.dataplane().ops[before..];
    let table = pos(ops, |o| matches!(o, FOp::InstallTable { .. }));
    let drain = pos(
        ops,
        |o| matches!(o, FOp::SetBackend { id: i, state } if *i == id && *state == BACKEND_DRAINING),
    );
    assert!(table < drain);
    assert!(
        !c.dataplane().tables[&0].slots.contains(&id),
        "drained: no slots"
    );

    d.set_backend(&vip80(), &key(12), BackendState::Active, None)
        .unwrap();
    let before = c.dataplane().ops.len();
    c.apply(&d).unwrap();
    let ops = &c.dataplane().ops[before..];
    let table = pos(ops, |o| matches!(o, FOp::InstallTable { .. }));
    let undrain = pos(
        ops,
        |o| matches!(o, FOp::SetBackend { id: i, state } if *i == id && *state == BACKEND_ACTIVE),
    );
    assert!(undrain < table);
    assert_eq!(id_of(&c, 12), id, "ids are stable");
}

#[test]
fn a_removed_vip_goes_before_its_table_and_its_backends_go_down() {
    let mut c = controller();
    let two = desired(&format!(
        "{}{}",
        vip_toml(80, 1009, &[(11, 1, "active")]),
        vip_toml(443, 1009, &[(11, 1, "active")])
    ));
    c.apply(&two).unwrap();
    let before = c.dataplane().ops.len();
    let backend443 =
        c.vips()[&"203.0.113.10:443/tcp".parse::<Vip>().unwrap()].backend_ids[&key(11)];
    c.apply(&desired(&vip_toml(80, 1009, &[(11, 1, "active")])))
        .unwrap();
    let ops = &c.dataplane().ops[before..];
    let vip = pos(ops, |o| matches!(o, FOp::RemoveVip(..)));
    let table = pos(ops, |o| matches!(o, FOp::RemoveTable(1)));
    let down = pos(
        ops,
        |o| matches!(o, FOp::SetBackend { id, state } if *id == backend443 && *state == BACKEND_DOWN),
    );
    assert!(vip < table && table < down, "{ops:#?}");
    assert_eq!(c.dataplane().vips.len(), 1);
    assert_ne!(id_of(&c, 11), backend443, "one id per (VIP, backend)");
}

#[test]
fn a_failure_at_any_step_leaves_the_previous_state() {
    // A change touching globals, two VIPs, additions, removals and drains fails at
    // every one of its steps in turn; each time the previous state must be back
    // (BR-12.T3).
    let initial = desired(&format!(
        "{}{}",
        vip_toml(
            80,
            1009,
            &[(11, 1, "active"), (12, 1, "active"), (13, 1, "active")]
        ),
        vip_toml(443, 1009, &[(11, 1, "active"), (12, 1, "active")])
    ));
    let mut change = desired(&format!(
        "{}{}",
        vip_toml(
            80,
            1013,
            &[(11, 2, "active"), (12, 1, "drain"), (14, 1, "active")]
        ),
        vip_toml(8080, 1009, &[(15, 1, "active")])
    ));
    change.globals.mtu = 1400;
    let steps = {
        let mut c = controller();
        c.apply(&initial).unwrap();
        let before = c.dataplane().ops.len();
        c.apply(&change).unwrap();
        c.dataplane().ops.len() - before
    };
    assert!(steps > 10, "{steps}");
    for k in 0..steps {
        let mut c = controller();
        c.apply(&initial).unwrap();
        let state = snapshot(c.dataplane());
        c.dataplane_mut().fail_after(k);
        let err = c.apply(&change).unwrap_err();
        assert!(
            err.to_string().contains("failed: injected failure")
                && err.to_string().contains("the previous state is kept"),
            "step {k}: {err}"
        );
        assert!(
            snapshot(c.dataplane()) == state,
            "step {k}: state not restored"
        );
        // The controller still knows the old state: applying it again writes nothing,
        // and the change goes through once the data plane works.
        let n = c.dataplane().ops.len();
        assert_eq!(c.apply(&initial).unwrap().operations, 0, "step {k}");
        assert_eq!(c.dataplane().ops.len(), n);
        c.apply(&change).unwrap();
        assert_eq!(c.dataplane().tables[&0].slots.len(), 1013, "step {k}");
    }
}

#[test]
fn removed_ids_are_not_given_to_new_backends_but_come_back_on_re_add() {
    // Remove B13 and add B19 in one change: B19 gets a fresh id, written before the
    // table; B13's id is marked down after it and comes back only to B13 (BR-12.T4).
    let mut c = controller();
    c.apply(&three()).unwrap();
    let b13 = id_of(&c, 13);
    let mut d = three();
    d.remove_backend(&vip80(), &key(13)).unwrap();
    d.add_backend(&vip80(), key(19), 1).unwrap();
    let before = c.dataplane().ops.len();
    c.apply(&d).unwrap();
    let b19 = id_of(&c, 19);
    assert_ne!(b19, b13);
    let ops = &c.dataplane().ops[before..];
    let add = pos(
        ops,
        |o| matches!(o, FOp::SetBackend { id, state } if *id == b19 && *state == BACKEND_ACTIVE),
    );
    let table = pos(ops, |o| matches!(o, FOp::InstallTable { .. }));
    let down = pos(
        ops,
        |o| matches!(o, FOp::SetBackend { id, state } if *id == b13 && *state == BACKEND_DOWN),
    );
    assert!(add < table && table < down);
    d.add_backend(&vip80(), key(13), 1).unwrap();
    c.apply(&d).unwrap();
    assert_eq!(id_of(&c, 13), b13, "re-added backend gets its id back");
}

#[test]
fn identical_backend_sets_share_one_build() {
    // 500 services on 4 backends, then a rolling replacement of B11 by B15 (add, then
    // remove): one build per distinct backend set, not one per service (BR-10.T1).
    let ports: Vec<u16> = (10_000..10_500).collect();
    let set = |backends: &[u8]| {
        let list: Vec<(u8, u32, &str)> = backends.iter().map(|b| (*b, 1, "active")).collect();
        desired(
            &ports
                .iter()
                .map(|p| vip_toml(*p, 1009, &list))
                .collect::<String>(),
        )
    };
    let mut c = controller();
    c.apply(&set(&[11, 12, 13, 14])).unwrap();
    assert_eq!(c.builds_total(), 1);
    c.apply(&set(&[11, 12, 13, 14, 15])).unwrap();
    c.apply(&set(&[12, 13, 14, 15])).unwrap();
    assert_eq!(c.builds_total(), 3, "one build per distinct backend set");
    assert_eq!(c.dataplane().tables.len(), 500);
}

#[test]
fn table_memory_over_the_limit_is_refused_before_writing() {
    // Two 65,537-slot VIPs against a 1 MiB limit: refused with both sizes named,
    // before any map is written (BR-10.T3).
    let mut c = controller();
    let mut d = desired(&format!(
        "{}{}",
        vip_toml(80, 65_537, &[(11, 1, "active")]),
        vip_toml(81, 65_537, &[(11, 1, "active")])
    ));
    d.max_table_memory = 1 << 20;
    let err = c.apply(&d).unwrap_err();
    assert_eq!(err.to_string(), "table memory 5 MiB exceeds limit 1 MiB");
    assert!(c.dataplane().ops.is_empty());
}

#[test]
fn table_memory_counts_both_buffers_of_each_vip() {
    // One 32,771-slot buffer (512 KiB) fits 1 MiB, but the data plane keeps two per VIP
    // once its table changed: the estimate counts both, so this is refused up front
    // rather than after the first change.
    let mut c = controller();
    let mut d = desired(&vip_toml(80, 32_771, &[(11, 1, "active")]));
    d.max_table_memory = 1 << 20;
    let err = c.apply(&d).unwrap_err();
    assert_eq!(err.to_string(), "table memory 2 MiB exceeds limit 1 MiB");
    assert!(c.dataplane().ops.is_empty());
    // 2 x (32,749 + 1 header cell) x 16 bytes fits.
    let mut d = desired(&vip_toml(80, 32_749, &[(11, 1, "active")]));
    d.max_table_memory = 1 << 20;
    c.apply(&d).unwrap();
    d.add_backend(&vip80(), key(12), 1).unwrap();
    c.apply(&d).unwrap();
}

#[test]
fn down_backends_are_left_out_of_the_table_for_every_combination() {
    // Every pair and triple of four backends down: no slot names a down backend, the
    // others share the table evenly (BR-09.T1, T2).
    let names = [11u8, 12, 13, 14];
    for mask in 0u8..16 {
        let down: Vec<u8> = names
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, n)| *n)
            .collect();
        if down.len() < 2 {
            continue;
        }
        let backends: Vec<(u8, u32, &str)> = names
            .iter()
            .map(|n| (*n, 1, if down.contains(n) { "down" } else { "active" }))
            .collect();
        let mut c = controller();
        c.apply(&desired(&vip_toml(80, 65_537, &backends))).unwrap();
        let slots = &c.dataplane().tables[&0].slots;
        let down_ids: Vec<u32> = down.iter().map(|n| id_of(&c, *n)).collect();
        assert!(slots.iter().all(|s| !down_ids.contains(s)), "down {down:?}");
        let up: Vec<u32> = names
            .iter()
            .filter(|n| !down.contains(n))
            .map(|n| id_of(&c, *n))
            .collect();
        if up.is_empty() {
            // All four down: an empty table, so the VIP drops new flows and counts them
            // (BR-09.T3).
            assert!(slots.iter().all(|&s| s == 0));
            continue;
        }
        let ideal = 65_537.0 / up.len() as f64;
        for id in up {
            let n = slots.iter().filter(|&&s| s == id).count() as f64;
            assert!((n - ideal).abs() <= 328.0, "down {down:?}: {n} vs {ideal}");
        }
    }
}

#[test]
fn all_weights_zero_installs_an_empty_table_and_warns() {
    // Every backend at weight 0: an empty table and a warning naming the VIP (BR-03.T3).
    let mut c = controller();
    let report = c
        .apply(&desired(&vip_toml(
            80,
            1009,
            &[(11, 0, "active"), (12, 0, "active")],
        )))
        .unwrap();
    assert!(c.dataplane().tables[&0].slots.iter().all(|&s| s == 0));
    assert!(report.warnings.iter().any(|w| w
        == "VIP 203.0.113.10:80/tcp has no backend with weight > 0: new flows to it are dropped"));
}

#[test]
fn a_table_that_cannot_be_built_changes_nothing() {
    // A non-prime size that got past validation (a desired state built by hand): the
    // change fails and the previous table stays, with its fingerprint (BR-04.T1).
    let mut c = controller();
    c.apply(&three()).unwrap();
    let fingerprint = c.vip_statuses()[0].fingerprint.clone();
    let state = snapshot(c.dataplane());
    let mut d = three();
    d.vips.get_mut(&vip80()).unwrap().table_size = 65_536;
    let err = c.apply(&d).unwrap_err();
    assert_eq!(
        err.to_string(),
        "VIP 203.0.113.10:80/tcp: table_size 65536 is not prime (nearest primes: 65521 and 65537)"
    );
    assert!(snapshot(c.dataplane()) == state, "state changed");
    assert_eq!(c.vip_statuses()[0].fingerprint, fingerprint);
}

#[test]
fn status_reports_backends_with_state_weight_and_share() {
    let mut c = controller();
    c.apply(&desired(&vip_toml(
        80,
        1009,
        &[(11, 1, "active"), (12, 3, "active"), (13, 1, "drain")],
    )))
    .unwrap();
    let status = c.vip_statuses();
    let b: Vec<(String, String, u32, u32)> = status[0]
        .backends
        .iter()
        .map(|b| (b.address.clone(), b.state.clone(), b.weight, b.slots))
        .collect();
    assert_eq!(b[0].0, "198.51.100.11");
    assert_eq!(b[2], ("198.51.100.13".to_owned(), "drain".to_owned(), 1, 0));
    assert_eq!(b[0].3 + b[1].3, 1009);
    assert!((f64::from(b[1].3) / 1009.0 - 0.75).abs() < 0.01);
    assert_eq!(status[0].generation, 1);
    assert_eq!(status[0].fingerprint.len(), 64);
}

#[test]
fn flow_reports_the_table_choice_and_the_conntrack_pin() {
    let mut c = controller();
    c.apply(&three()).unwrap();
    let client: SocketAddr = "192.0.2.10:40000".parse().unwrap();
    let report = c.flow(&vip80(), client).unwrap();
    assert!(report.table_backend.is_some());
    assert!(report.pinned.is_none());
    let key = flow_key(client, vip80().socket_addr(), 6).unwrap();
    let id = id_of(&c, 12);
    c.dataplane_mut().conntrack.insert(
        key,
        (
            CtTable::Established,
            lb_common::types::CtEntry {
                backend_id: id,
                vip_id: 0,
                ..Default::default()
            },
        ),
    );
    let pin = c.flow(&vip80(), client).unwrap().pinned.unwrap();
    assert_eq!(
        (pin.backend.as_str(), pin.established),
        ("198.51.100.12", true)
    );
    assert!(
        c.flow(&"203.0.113.10:81/tcp".parse().unwrap(), client)
            .is_err()
    );
}

#[test]
fn backends_lose_usability_only_after_the_data_plane_quiesced() {
    let mut c = controller();
    c.apply(&three()).unwrap();
    let mut d = three();
    d.set_backend(&vip80(), &key(12), BackendState::Drain, None)
        .unwrap();
    let before = c.dataplane().ops.len();
    c.apply(&d).unwrap();
    let ops = &c.dataplane().ops[before..];
    let table = pos(ops, |o| matches!(o, FOp::InstallTable { .. }));
    let quiesce = pos(ops, |o| matches!(o, FOp::Quiesce));
    let drain = pos(
        ops,
        |o| matches!(o, FOp::SetBackend { state, .. } if *state == BACKEND_DRAINING),
    );
    assert!(table < quiesce && quiesce < drain, "{ops:#?}");
    // Adding a backend needs no wait.
    let before = c.dataplane().ops.len();
    d.add_backend(&vip80(), key(14), 1).unwrap();
    c.apply(&d).unwrap();
    assert!(!c.dataplane().ops[before..].contains(&FOp::Quiesce));
}

// ---- allowed source prefixes ----

fn with_sources(sources: &str) -> Desired {
    let vip = vip_toml(80, 1009, &[(11, 1, "active")]).replace(
        "table_size = 1009\n",
        &format!("table_size = 1009\nallowed_sources = [{sources}]\n"),
    );
    desired(&vip)
}

#[test]
fn a_new_vips_source_list_is_written_before_its_entry_and_cleared_after_its_removal() {
    let mut c = controller();
    c.apply(&with_sources("\"192.0.2.0/24\"")).expect("apply");
    let ops = &c.dataplane().ops;
    let sources = pos(ops, |o| matches!(o, FOp::SetSources(_, _, 1)));
    let vip = pos(ops, |o| matches!(o, FOp::SetVip(..)));
    assert!(sources < vip, "{ops:#?}");
    let key = vip80().key();
    assert_eq!(c.dataplane().sources[&key].1.len(), 1);
    let cfg = c.dataplane().config.expect("config");
    assert_ne!(cfg.flags & lb_common::types::CONFIG_SOURCE_RANGES, 0);
    // Narrowed / widened: written again; unchanged: not written.
    c.apply(&with_sources("\"192.0.2.0/25\", \"198.18.0.0/15\""))
        .expect("apply");
    assert_eq!(c.dataplane().sources[&key].1.len(), 2);
    let writes = |c: &Controller<FakeDataplane>| {
        c.dataplane()
            .ops
            .iter()
            .filter(|o| matches!(o, FOp::SetSources(..)))
            .count()
    };
    let before = writes(&c);
    c.apply(&with_sources("\"198.18.0.0/15\", \"192.0.2.0/25\""))
        .expect("apply");
    assert_eq!(
        writes(&c),
        before,
        "the same list in another order is no change"
    );
    // Removed VIP: its entry first, then its list.
    c.apply(&desired("")).expect("apply");
    let ops = &c.dataplane().ops;
    let removed = pos(ops, |o| matches!(o, FOp::RemoveVip(_)));
    let cleared = ops.len()
        - 1
        - ops
            .iter()
            .rev()
            .position(|o| matches!(o, FOp::SetSources(_, _, 0)))
            .expect("cleared");
    assert!(removed < cleared, "{ops:#?}");
    assert!(c.dataplane().sources.is_empty());
}

#[test]
fn an_adopted_source_list_is_the_one_the_next_change_starts_from() {
    // The list in the maps, not an empty one, is what a restarted daemon changes: a
    // list removed from the file while no daemon ran is cleared, a narrowed one
    // written again; an unchanged one is left alone.
    let mut c = controller();
    c.apply(&with_sources("\"192.0.2.0/24\", \"198.18.0.0/15\""))
        .expect("apply");
    let restart = |c: &mut Controller<FakeDataplane>| {
        let dp = std::mem::take(c.dataplane_mut()).restarted();
        Controller::adopt(dp).expect("adopt").0
    };
    let key = vip80().key();
    let mut c = restart(&mut c);
    c.apply(&with_sources("\"198.18.0.0/15\", \"192.0.2.0/24\""))
        .expect("apply");
    assert!(
        !c.dataplane()
            .ops
            .iter()
            .any(|o| matches!(o, FOp::SetSources(..))),
        "unchanged list: {:#?}",
        c.dataplane().ops
    );
    let mut c = restart(&mut c);
    c.apply(&with_sources("\"198.18.0.0/15\"")).expect("apply");
    assert_eq!(c.dataplane().sources[&key].1.len(), 1);
    let mut c = restart(&mut c);
    c.apply(&desired(&vip_toml(80, 1009, &[(11, 1, "active")])))
        .expect("apply");
    assert!(c.dataplane().sources.is_empty(), "the list is lifted");
}

#[test]
fn a_failed_change_puts_the_previous_source_list_back() {
    let two = |sources: &str| {
        desired(
            &vip_toml(80, 1009, &[(11, 1, "active"), (12, 1, "active")]).replace(
                "table_size = 1009\n",
                &format!("table_size = 1009\nallowed_sources = [{sources}]\n"),
            ),
        )
    };
    let mut c = controller();
    c.apply(&two("\"192.0.2.0/24\"")).expect("apply");
    let before = c.dataplane().sources.clone();
    // Removing backend 12 and changing the list: table, list, wait, backend 12 down.
    // The last write fails: everything, the list included, is undone.
    let change = with_sources("\"10.0.0.0/8\"");
    let mut probe = controller();
    probe.apply(&two("\"192.0.2.0/24\"")).expect("apply");
    let (start, first_op) = (probe.dataplane().calls, probe.dataplane().ops.len());
    probe.apply(&change).expect("apply");
    let ops = &probe.dataplane().ops[first_op..];
    let list = pos(ops, |o| matches!(o, FOp::SetSources(_, _, 1)));
    assert!(
        list + 1 < ops.len(),
        "the list is not the last write: {ops:#?}"
    );
    let calls_in_change = probe.dataplane().calls - start;
    c.dataplane_mut().fail_at_call = Some(c.dataplane().calls + calls_in_change - 1);
    assert!(c.apply(&change).is_err());
    assert_eq!(c.dataplane().sources, before);
}

/// [`three`] with the fast path `on`.
fn three_fast(on: bool, size: u32) -> Desired {
    desired(
        &vip_toml(
            80,
            size,
            &[(11, 1, "active"), (12, 1, "active"), (13, 1, "active")],
        )
        .replace("table_size", &format!("fast_path = {on}\ntable_size")),
    )
}

#[test]
fn the_fast_path_is_switched_on_and_off_in_the_data_plane() {
    let mut c = controller();
    c.apply(&three_fast(true, 1009)).unwrap();
    assert!(c.dataplane().fast_path(0));
    c.apply(&three_fast(false, 1009)).unwrap();
    assert!(!c.dataplane().fast_path(0));
    c.apply(&three_fast(true, 1009)).unwrap();
    assert!(c.dataplane().fast_path(0));
}

/// [`three`] over GUE with the second chance `on`.
fn three_second_chance(on: bool) -> Desired {
    desired(
        &vip_toml(
            80,
            1009,
            &[(11, 1, "active"), (12, 1, "active"), (13, 1, "active")],
        )
        .replace(
            "table_size",
            &format!("encap = \"gue\"\nsecond_chance = {on}\ntable_size"),
        ),
    )
}

#[test]
fn the_second_chance_is_switched_in_the_data_plane_and_survives_a_restart() {
    let mut c = controller();
    c.apply(&three_second_chance(true)).unwrap();
    assert!(c.dataplane().second_chance(0));
    assert!(c.dataplane().ops.contains(&FOp::SetSecondChance(0, true)));
    // A restarted daemon reads it from the maps: the same file changes nothing.
    let dp = std::mem::take(c.dataplane_mut()).restarted();
    let mut c = Controller::adopt(dp).expect("adopt").0;
    c.apply(&three_second_chance(true)).unwrap();
    assert!(
        !c.dataplane()
            .ops
            .iter()
            .any(|o| matches!(o, FOp::SetSecondChance(..))),
        "{:#?}",
        c.dataplane().ops
    );
    assert!(c.dataplane().second_chance(0));
    c.apply(&three_second_chance(false)).unwrap();
    assert!(!c.dataplane().second_chance(0));
}

#[test]
fn a_dirty_slot_changed_again_is_counted_as_an_owner_given_up() {
    let mut c = controller();
    c.apply(&three_second_chance(true)).unwrap();
    let three = c.dataplane().tables[&0].slots.clone();
    let mut four = three_second_chance(true);
    four.add_backend(&vip80(), key(14), 1).unwrap();
    c.apply(&four).unwrap();
    // The first change forgets nothing: the moved slots were clean.
    assert_eq!(c.vip_statuses()[0].owners_given_up, 0);
    let new_id = id_of(&c, 14);
    let slots = &c.dataplane().tables[&0].slots;
    let moved = slots.iter().zip(&three).filter(|(a, b)| a != b).count();
    let on_new = slots.iter().filter(|&&o| o == new_id).count();
    assert!(on_new > 0 && moved >= on_new);
    // Backend 14 removed again: the table is the first one, so each moved slot, dirty,
    // goes back to its clean owner and forgets the owner in between (rule SC5): 14, or
    // another backend the add moved it to.
    c.apply(&three_second_chance(true)).unwrap();
    assert_eq!(c.dataplane().tables[&0].slots, three);
    assert_eq!(c.vip_statuses()[0].owners_given_up, moved as u64);
}

#[test]
fn flow_names_the_candidate_of_a_miss_on_a_dirty_slot_of_a_second_chance_vip() {
    let mut c = controller();
    c.apply(&three_second_chance(true)).unwrap();
    // A client whose slot is owned by a backend that is then drained.
    let client: SocketAddr = "192.0.2.10:40000".parse().unwrap();
    let first = c.flow(&vip80(), client).unwrap();
    assert_eq!(first.candidate, None, "a clean slot names none");
    let owner = first.table_backend.expect("an owner");
    let last = owner.rsplit('.').next().unwrap().parse::<u8>().unwrap();
    let mut d = three_second_chance(true);
    d.set_backend(&vip80(), &key(last), BackendState::Drain, None)
        .unwrap();
    c.apply(&d).unwrap();
    let after = c.flow(&vip80(), client).unwrap();
    assert_ne!(after.table_backend.as_deref(), Some(owner.as_str()));
    assert_eq!(
        after.candidate,
        Some(owner),
        "the clean owner, draining, keeps flows"
    );
    // Without the second chance: none.
    let mut off = three_second_chance(false);
    off.set_backend(&vip80(), &key(last), BackendState::Drain, None)
        .unwrap();
    c.apply(&off).unwrap();
    assert_eq!(c.flow(&vip80(), client).unwrap().candidate, None);
}

#[test]
fn flow_says_whether_the_fast_path_slot_is_clean_or_dirty_and_what_decides() {
    let mut c = controller();
    c.apply(&three()).unwrap();
    let client: SocketAddr = "192.0.2.10:40000".parse().unwrap();
    assert_eq!(c.flow(&vip80(), client).unwrap().fast_path, None, "off");
    c.apply(&three_fast(true, 1009)).unwrap();
    let first = c.flow(&vip80(), client).unwrap();
    let slot = first.fast_path.expect("on");
    assert_eq!(
        (slot.state.as_str(), slot.decided_by.as_str()),
        ("clean", "table")
    );
    assert_eq!(slot.clean_owner, None);
    // Drain the flow's owner: its slot turns dirty, the old owner its clean owner.
    let owner = first.table_backend.expect("an owner");
    let last = owner.rsplit('.').next().unwrap().parse::<u8>().unwrap();
    let mut d = three_fast(true, 1009);
    d.set_backend(&vip80(), &key(last), BackendState::Drain, None)
        .unwrap();
    c.apply(&d).unwrap();
    let after = c.flow(&vip80(), client).unwrap();
    let slot = after.fast_path.expect("on");
    assert_ne!(after.table_backend.as_deref(), Some(owner.as_str()));
    assert_eq!(
        (slot.state.as_str(), slot.decided_by.as_str()),
        ("dirty", "clean-owner")
    );
    assert_eq!(slot.clean_owner, Some(owner));
}

#[test]
fn a_fast_path_vip_keeps_its_table_size_and_its_switch_while_slots_are_dirty() {
    let mut c = controller();
    c.apply(&three_fast(true, 1009)).unwrap();
    let err = c.apply(&three_fast(true, 1013)).unwrap_err().to_string();
    assert!(
        err.contains("table_size cannot change from 1009 to 1013"),
        "{err}"
    );
    let err = c.apply(&three_fast(false, 1013)).unwrap_err().to_string();
    assert!(err.contains("while the fast path is on"), "{err}");
    // Off is refused while a slot is dirty, then applied once all are clean.
    c.dataplane_mut().dirty.insert(0, 3);
    let err = c.apply(&three_fast(false, 1009)).unwrap_err().to_string();
    assert!(err.contains("while 3 of its slots are dirty"), "{err}");
    assert!(c.dataplane().fast_path(0), "nothing changed");
    c.dataplane_mut().dirty.insert(0, 0);
    c.apply(&three_fast(false, 1009)).unwrap();
    assert!(!c.dataplane().fast_path(0));
    // Off, the size may change.
    c.apply(&three_fast(false, 1013)).unwrap();
}

#[test]
fn hash_fields_reach_the_data_plane_and_flow_predicts_with_them() {
    use lb_common::hash_fields::Fields;
    let src = |size: u32, fast: bool| {
        desired(
            &vip_toml(
                80,
                size,
                &[(11, 1, "active"), (12, 1, "active"), (13, 1, "active")],
            )
            .replace(
                "table_size",
                &format!("hash = \"src\"\nfast_path = {fast}\ntable_size"),
            ),
        )
    };
    let mut c = controller();
    c.apply(&src(1009, false)).unwrap();
    assert_eq!(c.dataplane().hash_fields(0).fields, Fields::Src);
    // Every connection of one client: one slot, one backend.
    let backends: BTreeSet<Option<String>> = (40000..40040)
        .map(|port| {
            let client = SocketAddr::from(([192, 0, 2, 10], port));
            c.flow(&vip80(), client).unwrap().table_backend
        })
        .collect();
    assert_eq!(backends.len(), 1, "{backends:?}");
    // Back to the 5-tuple: the data plane is told, and the ports spread.
    c.apply(&three()).unwrap();
    assert_eq!(c.dataplane().hash_fields(0).fields, Fields::FiveTuple);
    let spread: BTreeSet<Option<String>> = (40000..40040)
        .map(|port| {
            let client = SocketAddr::from(([192, 0, 2, 10], port));
            c.flow(&vip80(), client).unwrap().table_backend
        })
        .collect();
    assert!(spread.len() > 1, "{spread:?}");
    // With the fast path on, the fields cannot change.
    c.apply(&three_fast(true, 1009)).unwrap();
    let err = c.apply(&src(1009, true)).unwrap_err().to_string();
    assert!(
        err.contains("hash cannot change from \"5-tuple\" to \"src\""),
        "{err}"
    );
    assert_eq!(c.dataplane().hash_fields(0).fields, Fields::FiveTuple);
}

#[test]
fn a_vips_fingerprint_covers_its_hash_fields() {
    let with = |keys: &str| {
        desired(
            &vip_toml(
                80,
                1009,
                &[(11, 1, "active"), (12, 1, "active"), (13, 1, "active")],
            )
            .replace("table_size", &format!("{keys}table_size")),
        )
    };
    let shown = |d: &Desired| {
        let mut c = controller();
        let report = c.apply(d).unwrap();
        let installed = report.changes.iter().find_map(|ch| match ch {
            VipChange::Table(t) => Some(t.fingerprint.to_string()),
            VipChange::Removed(_) => None,
        });
        let status = c.vip_statuses()[0].fingerprint.clone();
        assert_eq!(
            installed.as_deref(),
            Some(status.as_str()),
            "report and status agree"
        );
        (status, c.vips()[&vip80()].table.fingerprint().to_string())
    };
    // Two instances with one table: the 5-tuple shows the table's own fingerprint.
    let (five, table) = shown(&three());
    assert_eq!(five, table);
    let (src, same_table) = shown(&with("hash = \"src\"\n"));
    assert_eq!(
        same_table, table,
        "the hash fields move no slot of the table"
    );
    assert_ne!(src, five);
    let (net, _) = shown(&with("hash = \"src\"\nhash_source_prefix = 24\n"));
    let (port, _) = shown(&with("hash = \"src+dport\"\n"));
    let all: BTreeSet<&String> = [&five, &src, &net, &port].into_iter().collect();
    assert_eq!(all.len(), 4, "{all:?}");
}

#[test]
fn a_persistence_timeout_reaches_the_data_plane_and_lb_flow_reports_it() {
    let with = |keys: &str| {
        desired(
            &vip_toml(
                80,
                1009,
                &[(11, 1, "active"), (12, 1, "active"), (13, 1, "active")],
            )
            .replace("table_size", &format!("{keys}table_size")),
        )
    };
    let mut c = controller();
    c.apply(&with("hash = \"src\"\npersistence_timeout_secs = 300\n"))
        .unwrap();
    assert_eq!(c.dataplane().hash_fields(0).affinity_secs, 300);
    let client = SocketAddr::from(([192, 0, 2, 10], 40000));
    let report = c.flow(&vip80(), client).unwrap();
    // The fake keeps no pins: the client has none, and the table decides.
    assert_eq!(
        report.affinity,
        Some(FlowAffinity {
            timeout_secs: 300,
            backend: None,
            idle_secs: None,
            decides: false,
        })
    );
    assert_eq!(
        c.vip_statuses()[0].affinity_pins,
        Some(0),
        "the status marker"
    );
    // A new timeout is written; without one, the VIP has no affinity.
    c.apply(&with("hash = \"src\"\npersistence_timeout_secs = 60\n"))
        .unwrap();
    assert_eq!(c.dataplane().hash_fields(0).affinity_secs, 60);
    c.apply(&with("hash = \"src\"\n")).unwrap();
    assert_eq!(c.dataplane().hash_fields(0).affinity_secs, 0);
    assert_eq!(c.flow(&vip80(), client).unwrap().affinity, None);
    assert_eq!(c.vip_statuses()[0].affinity_pins, None);
}

#[test]
fn a_learn_of_the_running_file_abandons_an_earlier_learn() {
    let mut c = controller();
    let running = three_second_chance(true);
    c.apply(&running).unwrap();
    // Nothing learned: a learn of the running file marks nothing and answers nothing.
    assert!(c.learn(&running).unwrap().is_empty());
    let mut next = three_second_chance(true);
    next.add_backend(&vip80(), key(14), 1).unwrap();
    assert!(c.learn(&next).unwrap()[&vip80()].pending > 0);
    // The previous file back: the learn is abandoned, no slot stays pending.
    let abandoned = c.learn(&running).unwrap();
    assert_eq!(abandoned[&vip80()].pending, 0);
    assert_eq!(c.pending_rollout(&vip80()), None);
    assert_eq!(c.vip_statuses()[0].pending_rollout, None);
    let states = &c.dataplane().states[&0];
    assert!(states.iter().all(|s| s.pending() == 0));
}

#[test]
fn a_learn_marks_the_moved_slots_pending_without_switching_and_the_switch_ends_it() {
    let mut c = controller();
    c.apply(&three_second_chance(true)).unwrap();
    let owners = c.dataplane().tables[&0].slots.clone();
    let mut next = three_second_chance(true);
    next.add_backend(&vip80(), key(14), 1).unwrap();
    let learned = c.learn(&next).unwrap();
    let new_id = id_of_next(&c, &next);
    let l = learned[&vip80()];
    assert!(l.pending > 0);
    // The owners stay; the moved slots name the new backend, whose entry is written.
    assert_eq!(c.dataplane().tables[&0].slots, owners);
    let states = &c.dataplane().states[&0];
    let pending: Vec<u32> = states.iter().map(|s| s.pending()).collect();
    assert_eq!(
        pending.iter().filter(|&&p| p != 0).count(),
        l.pending as usize
    );
    let next_slots = next_slots(&c, &next);
    for (slot, p) in pending.iter().enumerate() {
        let moved = u32::from(next_slots[slot]) != owners[slot];
        assert_eq!(*p != 0, moved, "slot {slot}");
        assert!(*p == 0 || *p == u32::from(next_slots[slot]));
    }
    assert!(c.dataplane().backends.contains_key(&new_id));
    assert_eq!(c.pending_rollout(&vip80()), Some(l.pending));
    assert_eq!(c.vip_statuses()[0].pending_rollout, Some(l.pending));
    // The switch: the next table, no slot pending, every pending slot switched to it.
    c.apply(&next).unwrap();
    assert_eq!(
        id_of(&c, 14),
        new_id,
        "the learn wrote the id the switch uses"
    );
    assert_eq!(c.pending_rollout(&vip80()), None);
    let after = &c.dataplane().states[&0];
    for (slot, p) in pending.iter().enumerate() {
        assert_eq!(after[slot].pending(), 0);
        if *p != 0 {
            assert_eq!(
                (after[slot].owner(), after[slot].clean_owner()),
                (*p, owners[slot])
            );
        }
    }
    // A VIP without the second chance learns nothing.
    let mut c = controller();
    c.apply(&three()).unwrap();
    let mut next = three();
    next.add_backend(&vip80(), key(14), 1).unwrap();
    assert!(c.learn(&next).unwrap().is_empty());
}

/// The id the next apply of `next` gives backend 14 (planned, not applied).
fn id_of_next(c: &Controller<FakeDataplane>, next: &Desired) -> u32 {
    planned(c, next).backend_ids[&key(14)]
}

/// The slots the next apply of `next` installs for [`vip80`] (planned, not applied).
fn next_slots(c: &Controller<FakeDataplane>, next: &Desired) -> Vec<u16> {
    planned(c, next).slots.to_vec()
}

/// [`vip80`] as the next apply of `next` would leave it.
fn planned(c: &Controller<FakeDataplane>, next: &Desired) -> AppliedVip {
    let (effective, _) = health::effective(next, &c.unhealthy);
    plan::plan(&c.state, &effective).unwrap().next.vips[&vip80()].clone()
}
