//! Health in the controller, against the in-memory data plane: unhealthy backends leave
//! the table and are marked down (their flows re-picked) with their ids kept, recovery
//! brings back the very same table, a batch of many changes is one table change, and
//! the multi-failure policy (panic threshold, all down open or closed, drain).
//!
//! The multi-failure cases follow a public bug report against another director (shared
//! case BR-09, see docs/src/operations/failure-scenarios.md): with four backends of which two or more
//! fail health checks together, no new connection may reach a failed backend.

use std::{collections::BTreeMap, net::SocketAddr};

use lb_common::types::{BACKEND_ACTIVE, BACKEND_DOWN, BACKEND_DRAINING};

use crate::{
    config::{Config, Vip},
    controller::{Controller, Desired},
};
use lb_dataplane::{FakeDataplane, fake::Op};
use lb_maglev::BackendKey;
use lb_maglev::flow::{flow_key, slot_of};

const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

/// A VIP 203.0.113.10:80/tcp of `size` slots with backends 198.51.100.`last` (weight,
/// state) and `health` as its `[vip.health]` table.
fn desired(size: u32, backends: &[(u8, u32, &str)], health: &str) -> Desired {
    let mut text = format!(
        "interface = \"eth0\"\n[encap]\nsource_v4 = \"192.0.2.1\"\n[[vip]]\naddress = \
         \"203.0.113.10\"\nport = 80\nprotocol = \"tcp\"\ntable_size = {size}\n"
    );
    if !health.is_empty() {
        text.push_str(&format!("[vip.health]\nkind = \"tcp\"\n{health}\n"));
    }
    for (last, weight, state) in backends {
        text.push_str(&format!(
            "[[vip.backend]]\naddress = \"198.51.100.{last}\"\nweight = {weight}\nstate = \"{state}\"\n"
        ));
    }
    let loaded = Config::from_toml(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    Desired::from_config(&loaded.config, MAC)
}

fn active(lasts: impl IntoIterator<Item = u8>) -> Vec<(u8, u32, &'static str)> {
    lasts.into_iter().map(|l| (l, 1, "active")).collect()
}

fn vip() -> Vip {
    "203.0.113.10:80/tcp".parse().unwrap()
}

fn key(last: u8) -> BackendKey {
    format!("198.51.100.{last}").parse().unwrap()
}

fn started(d: &Desired) -> Controller<FakeDataplane> {
    let mut c = Controller::new(FakeDataplane::new());
    c.apply(d).expect("apply");
    c
}

/// Marks backends `down` unhealthy (and `up` healthy) in one change.
fn health(
    c: &mut Controller<FakeDataplane>,
    down: &[u8],
    up: &[u8],
) -> crate::controller::ApplyReport {
    let changes = down
        .iter()
        .map(|l| (vip(), key(*l), false))
        .chain(up.iter().map(|l| (vip(), key(*l), true)));
    c.set_health(changes.collect::<Vec<_>>())
        .expect("set_health")
}

fn id(c: &Controller<FakeDataplane>, last: u8) -> u32 {
    c.vips()[&vip()].backend_ids[&key(last)]
}

/// Slots per backend (by last address byte) of the installed table.
fn slots(c: &Controller<FakeDataplane>) -> BTreeMap<u8, u32> {
    let applied = &c.vips()[&vip()];
    let table = &c.dataplane().tables[&applied.id];
    let mut out = BTreeMap::new();
    for (k, b) in &applied.backend_ids {
        let n = table.slots.iter().filter(|s| *s == b).count();
        let last = match k.ip() {
            std::net::IpAddr::V4(a) => a.octets()[3],
            std::net::IpAddr::V6(_) => unreachable!(),
        };
        out.insert(last, u32::try_from(n).unwrap());
    }
    out
}

fn state(c: &Controller<FakeDataplane>, last: u8) -> u8 {
    c.dataplane().backends[&id(c, last)].state
}

fn installs(c: &Controller<FakeDataplane>) -> usize {
    c.dataplane()
        .ops
        .iter()
        .filter(|o| matches!(o, Op::InstallTable { .. }))
        .count()
}

#[test]
fn an_unhealthy_backend_leaves_the_table_and_comes_back_with_its_id_and_table() {
    let d = desired(1009, &active(11..=13), "");
    let mut c = started(&d);
    let before = c.vips()[&vip()].table.fingerprint();
    let ids: Vec<u32> = (11..=13).map(|l| id(&c, l)).collect();
    let report = health(&mut c, &[12], &[]);
    assert_eq!(report.tables_changed(), 1);
    assert_eq!(slots(&c)[&12], 0, "no slots while unhealthy");
    assert_eq!(slots(&c).values().sum::<u32>(), 1009);
    assert_eq!(state(&c, 12), BACKEND_DOWN, "its flows are re-picked");
    // Down only after the table swap and a grace period.
    let ops = &c.dataplane().ops;
    let install = ops
        .iter()
        .rposition(|o| matches!(o, Op::InstallTable { .. }))
        .unwrap();
    let down = ops
        .iter()
        .rposition(|o| {
            *o == Op::SetBackend {
                id: ids[1],
                state: BACKEND_DOWN,
            }
        })
        .unwrap();
    let quiesce = ops.iter().rposition(|o| *o == Op::Quiesce).unwrap();
    assert!(install < quiesce && quiesce < down, "{ops:?}");
    assert!(c.is_unhealthy(&vip(), &key(12)));
    // Status: administratively active, down in the data plane.
    let st = &c.vip_statuses()[0];
    let b12 = st
        .backends
        .iter()
        .find(|b| b.address == "198.51.100.12")
        .unwrap();
    assert_eq!(
        (b12.state.as_str(), b12.dataplane_state.as_str()),
        ("active", "down")
    );

    health(&mut c, &[], &[12]);
    assert_eq!(
        c.vips()[&vip()].table.fingerprint(),
        before,
        "the same table"
    );
    assert_eq!(
        (11..=13).map(|l| id(&c, l)).collect::<Vec<_>>(),
        ids,
        "the same ids"
    );
    assert_eq!(state(&c, 12), BACKEND_ACTIVE);
    assert_eq!(c.health_changes(), (2, 2));
}

#[test]
fn fifty_backends_down_in_one_batch_are_one_table_change() {
    let d = desired(65_537, &active(1..=60), "");
    let mut c = started(&d);
    let before = installs(&c);
    let down: Vec<u8> = (1..=50).collect();
    let report = health(&mut c, &down, &[]);
    assert_eq!(report.tables_changed(), 1);
    assert_eq!(
        installs(&c) - before,
        1,
        "one table change for fifty backends"
    );
    let s = slots(&c);
    assert!(down.iter().all(|l| s[l] == 0));
    assert_eq!((51..=60).map(|l| s[&l]).sum::<u32>(), 65_537);
    assert_eq!(c.health_changes(), (1, 1));
    // Nothing changed: nothing applied.
    let again = health(&mut c, &down, &[]);
    assert_eq!(again.operations, 0);
    assert_eq!(c.health_changes(), (1, 1));
}

#[test]
fn unknown_backends_are_ignored_and_a_reload_keeps_health() {
    let d = desired(1009, &active(11..=13), "");
    let mut c = started(&d);
    let r = c
        .set_health([(vip(), key(99), false)])
        .expect("an unknown backend is ignored");
    assert_eq!(r.operations, 0);
    health(&mut c, &[12], &[]);
    // A reload that adds a backend keeps 12 unhealthy.
    let more = desired(1009, &active([11, 12, 13, 14]), "");
    c.apply(&more).unwrap();
    assert_eq!(slots(&c)[&12], 0);
    assert!(slots(&c)[&14] > 0);
    // Removing it forgets its health: re-added, it counts as healthy.
    c.apply(&desired(1009, &active([11, 13, 14]), "")).unwrap();
    c.apply(&more).unwrap();
    assert!(!c.is_unhealthy(&vip(), &key(12)));
    assert!(slots(&c)[&12] > 0);
}

/// BR-09.T1: M = 65,537, B1..B4, health marks B2 and B3 down: the table holds only B1
/// and B4 (32,768 or 32,769 slots each, within 328), and 10,000 new flows go to them.
#[test]
fn br09_t1_two_of_four_down_leave_only_the_other_two() {
    let d = desired(65_537, &active(1..=4), "");
    let mut c = started(&d);
    health(&mut c, &[2, 3], &[]);
    let s = slots(&c);
    assert_eq!((s[&2], s[&3]), (0, 0));
    for last in [1, 4] {
        assert!(s[&last].abs_diff(32_768) <= 328, "{s:?}");
    }
    let applied = &c.vips()[&vip()];
    let (id2, id3) = (id(&c, 2), id(&c, 3));
    let vip_addr: SocketAddr = "203.0.113.10:80".parse().unwrap();
    let seed = d.globals.hash_seed;
    for i in 0..10_000u32 {
        let client: SocketAddr = (
            std::net::Ipv4Addr::from(0xc000_0200 + (i % 200)),
            u16::try_from(1024 + i / 200).unwrap(),
        )
            .into();
        let flow = flow_key(client, vip_addr, 6).unwrap();
        let slot = slot_of(&flow, seed, 65_537).unwrap();
        let backend = u32::from(applied.slots[slot as usize]);
        assert!(
            backend != id2 && backend != id3,
            "flow {client} to a failed backend"
        );
    }
}

/// BR-09.T2: every pair and every triple of four backends down: no slot references a
/// failed backend, and the survivors share the table within 0.5 % of M.
#[test]
fn br09_t2_every_pair_and_triple_down() {
    let d = desired(65_537, &active(1..=4), "");
    for mask in 0u8..16 {
        let down: Vec<u8> = (1..=4).filter(|l| mask & (1 << (l - 1)) != 0).collect();
        if !(2..=3).contains(&down.len()) {
            continue;
        }
        let mut c = started(&d);
        health(&mut c, &down, &[]);
        let s = slots(&c);
        let survivors: Vec<u8> = (1..=4).filter(|l| !down.contains(l)).collect();
        let ideal = 65_537 / u32::try_from(survivors.len()).unwrap();
        for l in &down {
            assert_eq!(s[l], 0, "down {down:?}: {s:?}");
        }
        for l in &survivors {
            assert!(s[l].abs_diff(ideal) <= 328, "down {down:?}: {s:?}");
        }
    }
}

/// BR-09.T3: all four unhealthy. `all_down = "open"` (the default) balances over all of
/// them again (the table with everyone in it, flows kept); `"closed"` empties the table
/// (new flows dropped as `drop_no_backend`) and says so once, naming the VIP.
#[test]
fn br09_t3_all_down_open_and_closed() {
    let open = desired(1009, &active(1..=4), "");
    let mut c = started(&open);
    let full = c.vips()[&vip()].table.fingerprint();
    let report = health(&mut c, &[1, 2, 3, 4], &[]);
    assert_eq!(report.operations, 0, "fail open: the table stays as it is");
    assert_eq!(c.vips()[&vip()].table.fingerprint(), full);
    assert!((1..=4).all(|l| state(&c, l) == BACKEND_ACTIVE));
    assert_eq!(
        report.policy_changes,
        ["VIP 203.0.113.10:80/tcp: multi-failure policy: all backends unhealthy: failing open"]
    );
    assert_eq!(
        c.vip_statuses()[0].policy.as_ref().unwrap().mode,
        "all_down_open"
    );

    let closed = desired(1009, &active(1..=4), "all_down = \"closed\"");
    let mut c = started(&closed);
    let report = health(&mut c, &[1, 2, 3, 4], &[]);
    assert!(slots(&c).values().all(|n| *n == 0), "an empty table");
    assert!(c.vips()[&vip()].slots.iter().all(|s| *s == 0));
    assert!((1..=4).all(|l| state(&c, l) == BACKEND_DOWN));
    assert_eq!(
        report.policy_changes,
        ["VIP 203.0.113.10:80/tcp: multi-failure policy: all backends unhealthy: failing closed"]
    );
    // Logged once: a further change in the same mode says nothing.
    let again = health(&mut c, &[], &[]);
    assert!(again.policy_changes.is_empty());
    let back = health(&mut c, &[], &[3]);
    assert_eq!(
        back.policy_changes,
        ["VIP 203.0.113.10:80/tcp: multi-failure policy: back to normal (healthy backends only)"]
    );
    assert_eq!(slots(&c)[&3], 1009);
}

/// BR-09.T4, the flows a failed backend had: by default they are re-picked (its entry
/// is down, as for a removed backend); a drained backend keeps its flows whether it is
/// healthy or not (drain wins); in panic mode every backend keeps its flows.
#[test]
fn br09_t4_existing_flows_repicked_unless_drained_or_in_panic() {
    let d = desired(
        1009,
        &[
            (1, 1, "active"),
            (2, 1, "active"),
            (3, 1, "drain"),
            (4, 1, "active"),
        ],
        "",
    );
    let mut c = started(&d);
    health(&mut c, &[2, 3], &[]);
    assert_eq!(state(&c, 2), BACKEND_DOWN, "re-picked");
    assert_eq!(state(&c, 3), BACKEND_DRAINING, "drained: its flows stay");
    assert_eq!(slots(&c)[&3], 0);
    let st = &c.vip_statuses()[0];
    let b3 = st
        .backends
        .iter()
        .find(|b| b.address == "198.51.100.3")
        .unwrap();
    assert_eq!(
        (b3.state.as_str(), b3.dataplane_state.as_str()),
        ("drain", "draining")
    );

    let panic = desired(1009, &active(1..=4), "panic_threshold = 50");
    let mut c = started(&panic);
    health(&mut c, &[1, 2, 3], &[]);
    assert!(
        (1..=4).all(|l| state(&c, l) == BACKEND_ACTIVE),
        "panic keeps every flow"
    );
}

/// BR-09.T5 at controller level: ten down/up toggles of one backend, ending healthy,
/// leave the table whose fingerprint is the one of the final health state, and each
/// change installs at most one table.
#[test]
fn br09_t5_toggles_end_on_the_final_states_table() {
    let d = desired(1009, &active(1..=4), "");
    let mut c = started(&d);
    let healthy = c.vips()[&vip()].table.fingerprint();
    let before = installs(&c);
    for i in 0..10 {
        if i % 2 == 0 {
            health(&mut c, &[2], &[]);
        } else {
            health(&mut c, &[], &[2]);
        }
    }
    assert_eq!(installs(&c) - before, 10, "one table per change");
    assert_eq!(c.vips()[&vip()].table.fingerprint(), healthy);
}

/// Panic threshold (Envoy's): below 50 % healthy weight every non-drained backend gets
/// slots again; the share is of weight, not of backends.
#[test]
fn panic_threshold_counts_healthy_weight() {
    let d = desired(
        1009,
        &[
            (1, 10, "active"),
            (2, 1, "active"),
            (3, 1, "active"),
            (4, 1, "active"),
        ],
        "panic_threshold = 50",
    );
    let mut c = started(&d);
    let full = c.vips()[&vip()].table.fingerprint();
    // Three of four backends down but 10 of 13 weight healthy: normal.
    let r = health(&mut c, &[2, 3, 4], &[]);
    assert!(r.policy_changes.is_empty());
    assert_eq!(slots(&c)[&1], 1009);
    // The heavy one down instead: 2 of 13 healthy, below 50 %: panic, everyone back.
    let r = health(&mut c, &[1], &[2, 3]);
    assert_eq!(
        r.policy_changes,
        [
            "VIP 203.0.113.10:80/tcp: multi-failure policy: panic: healthy weight 2 of 13, every backend gets slots"
        ]
    );
    assert_eq!(c.vips()[&vip()].table.fingerprint(), full);
    assert_eq!(c.vip_statuses()[0].policy.as_ref().unwrap().mode, "panic");
}

/// The state history the metrics export: a backend whose probes fail enters
/// `unhealthy` and comes back to `active` when they pass; a drained backend stays
/// `drain` whatever its health.
#[test]
fn health_transitions_are_recorded_in_the_state_history() {
    let d = desired(
        101,
        &[(1, 1, "active"), (2, 1, "active"), (3, 1, "drain")],
        "",
    );
    let mut c = started(&d);
    health(&mut c, &[1, 3], &[]);
    health(&mut c, &[], &[1]);
    let record = |last: u8| {
        c.history()
            .records()
            .find(|((_, k), _)| *k == key(last))
            .map(|(_, r)| r.clone())
            .expect("recorded")
    };
    let one = record(1);
    assert_eq!(one.state, "active");
    assert_eq!(
        one.transitions.into_iter().collect::<Vec<_>>(),
        vec![("active".to_owned(), 2), ("unhealthy".to_owned(), 1)]
    );
    let three = record(3);
    assert_eq!(three.state, "drain");
    assert_eq!(three.transitions.len(), 1, "{:?}", three.transitions);
    assert_eq!(record(2).transitions.len(), 1);
}

#[test]
fn a_backend_added_down_gets_slots_only_when_its_health_says_so() {
    let mut c = started(&desired(1009, &active(11..=12), ""));
    let before = c.vips()[&vip()].table.fingerprint();
    let grown = desired(1009, &active(11..=13), "");
    let report = c
        .apply_new_down(&grown, |v, k| *v == vip() && *k == key(13))
        .expect("apply");
    assert_eq!(report.awaiting_probe, [(vip(), key(13))]);
    assert!(
        report.lines().iter().any(
            |l| l.contains("backend 198.51.100.13 gets slots after its first successful probe")
        ),
        "{:?}",
        report.lines()
    );
    assert_eq!(slots(&c)[&13], 0, "no slots before its first probe");
    assert_eq!(
        c.vips()[&vip()].table.fingerprint(),
        before,
        "the table is unchanged"
    );
    assert_eq!(state(&c, 13), BACKEND_DOWN);
    assert!(c.is_unhealthy(&vip(), &key(13)));
    // A second apply of the same state holds nothing new.
    let again = c.apply_new_down(&grown, |_, _| true).expect("apply");
    assert!(again.awaiting_probe.is_empty());
    // The first successful probe lets it in.
    let up = health(&mut c, &[], &[13]);
    assert_eq!(up.tables_changed(), 1);
    assert!(slots(&c)[&13] > 0);
    assert_eq!(state(&c, 13), BACKEND_ACTIVE);
}

#[test]
fn a_backend_not_selected_or_present_before_is_not_held() {
    // Before the first apply (daemon start) nothing is new.
    let mut c = Controller::new(FakeDataplane::new());
    let report = c
        .apply_new_down(&desired(1009, &active(11..=12), ""), |_, _| true)
        .expect("apply");
    assert!(report.awaiting_probe.is_empty());
    assert!(slots(&c)[&12] > 0);
    // `initial = "up"`: not selected, slots at once.
    let report = c
        .apply_new_down(&desired(1009, &active(11..=13), ""), |_, _| false)
        .expect("apply");
    assert!(report.awaiting_probe.is_empty());
    assert!(slots(&c)[&13] > 0);
}
