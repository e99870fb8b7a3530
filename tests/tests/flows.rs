//! Connection-tracking semantics through BPF_PROG_TEST_RUN: what keeps a flow on its
//! backend across table changes, drains and removals, and what does not. Among them,
//! the failure scenarios of `docs/src/operations/failure-scenarios.md` for draining (BR-03.T2), no
//! backend left (BR-08.T3 to T5), changes while packets flow (BR-12.T1, T4), a packet
//! finding no state after a change (BR-13.T1, T2, T4), a flow on another CPU (BR-15.T1)
//! and SYN floods (BR-16.T1, T2).

use std::{net::IpAddr, time::Duration};

use lb_common::{
    stats::Reason,
    types::{BACKEND_ACTIVE, BACKEND_DOWN, BACKEND_DRAINING, CtEntry, PROTO_TCP, PROTO_UDP},
};
use lb_dataplane::{AttachMode, CtTable, Dataplane as _, TableImage};
use lb_tests::{
    fixture::{Lb, SEED, XDP_DROP, XDP_PASS, XDP_TX, default_config, flow_key, round_robin},
    netns::NetNs,
    packets::{self, ACK, CLIENT4, Flow, L4, RST, SYN, VIP4},
};

fn b4(id: u32) -> Option<IpAddr> {
    #[expect(clippy::cast_possible_truncation, reason = "fixture ids are small")]
    Some(packets::backend4(id as u8).into())
}

/// A client port whose flow to VIP4:`dport` the current table of `vip_id` gives to
/// backend `id`.
fn port_landing_on(lb: &Lb, vip_id: u32, dport: u16, id: u32, from: u16) -> u16 {
    (from..u16::MAX)
        .find(|&p| lb.predict(vip_id, &Flow::new(CLIENT4, p, VIP4, dport), PROTO_TCP) == id)
        .expect("some port lands on the backend")
}

/// The conntrack state of TCP `flow` (which table, which entry); panics if none.
fn pin_of(lb: &Lb, flow: &Flow) -> (CtTable, CtEntry) {
    lb.dp
        .lookup_flow(&flow_key(flow, PROTO_TCP))
        .expect("lookup")
        .expect("pinned")
}

/// Opens `flow` with SYN then ACK and returns the backend it went to.
fn establish(lb: &mut Lb, flow: &Flow) -> Option<IpAddr> {
    let (a, first) = lb.send(&flow.frame(L4::Tcp(SYN), &[]));
    assert_eq!(a, XDP_TX);
    let (a, second) = lb.send(&flow.frame(L4::Tcp(ACK), &[]));
    assert_eq!(a, XDP_TX);
    assert_eq!(first, second);
    first
}

#[test]
fn syn_pins_in_the_syn_table_and_the_handshake_promotes_it() {
    let mut lb = Lb::standard();
    let flow = Flow::new(CLIENT4, 44000, VIP4, 80);
    let key = flow_key(&flow, PROTO_TCP);
    lb.send(&flow.frame(L4::Tcp(SYN), &[]));
    let (table, entry) = lb.dp.lookup_flow(&key).expect("lookup").expect("pinned");
    assert_eq!(table, CtTable::SynOnly);
    assert_eq!(entry.backend_id, lb.predict(0, &flow, PROTO_TCP));
    lb.send(&flow.frame(L4::Tcp(ACK), &[]));
    let (table, _) = lb.dp.lookup_flow(&key).expect("lookup").expect("pinned");
    assert_eq!(table, CtTable::Established);
}

#[test]
fn rst_is_forwarded_but_creates_no_state() {
    let mut lb = Lb::standard();
    let flow = Flow::new(CLIENT4, 44001, VIP4, 80);
    let (action, _) = lb.send(&flow.frame(L4::Tcp(RST), &[]));
    assert_eq!(action, XDP_TX);
    assert!(
        lb.dp
            .lookup_flow(&flow_key(&flow, PROTO_TCP))
            .expect("lookup")
            .is_none()
    );
    assert_eq!(lb.dp.vip_stats(0).expect("stats").new_flows, 0);
}

#[test]
fn established_flow_keeps_its_backend_when_the_table_changes() {
    // A new table gives the flow's slot to backend 3: the established flow stays on 2
    // (a conntrack hit), a new flow follows the new table (BR-13.T1).
    let mut lb = Lb::standard();
    let sport = port_landing_on(&lb, 0, 80, 2, 44100);
    let flow = Flow::new(CLIENT4, sport, VIP4, 80);
    assert_eq!(establish(&mut lb, &flow), b4(2));
    lb.table(0, &[3; 65_537]);
    let hits = lb.dp.vip_stats(0).expect("stats").ct_hits;
    assert_eq!(lb.send(&flow.frame(L4::Tcp(ACK), b"data")), (XDP_TX, b4(2)));
    assert_eq!(lb.dp.vip_stats(0).expect("stats").ct_hits, hits + 1);
    // A new flow follows the new table.
    let other = Flow::new(CLIENT4, sport + 1, VIP4, 80);
    assert_eq!(lb.send(&other.frame(L4::Tcp(SYN), &[])), (XDP_TX, b4(3)));
}

#[test]
fn drained_backend_keeps_its_flows_and_gets_no_new_ones() {
    // Backend 2 drains: its established flow stays on it, new flows go to the others,
    // and none is dropped (BR-03.T2).
    let mut lb = Lb::standard();
    let sport = port_landing_on(&lb, 0, 80, 2, 44200);
    let flow = Flow::new(CLIENT4, sport, VIP4, 80);
    assert_eq!(establish(&mut lb, &flow), b4(2));
    lb.backend(2, packets::backend4(2), BACKEND_DRAINING);
    lb.table(0, &round_robin(65_537, &[1, 3]));
    let no_backend = lb.counter(Reason::DropNoBackend);
    assert_eq!(lb.send(&flow.frame(L4::Tcp(ACK), &[])), (XDP_TX, b4(2)));
    for p in 45000..45200 {
        let (action, dst) = lb.send(&Flow::new(CLIENT4, p, VIP4, 80).frame(L4::Tcp(SYN), &[]));
        assert_eq!(action, XDP_TX);
        assert_ne!(dst, b4(2), "new flow on the drained backend");
    }
    assert_eq!(lb.counter(Reason::DropNoBackend), no_backend);
}

#[test]
fn removed_backend_flows_are_repicked_on_the_current_table() {
    let mut lb = Lb::standard();
    let sport = port_landing_on(&lb, 0, 80, 2, 44300);
    let flow = Flow::new(CLIENT4, sport, VIP4, 80);
    assert_eq!(establish(&mut lb, &flow), b4(2));
    lb.table(0, &round_robin(65_537, &[1, 3]));
    lb.backend(2, packets::backend4(2), BACKEND_DOWN);
    let owner = lb.predict(0, &flow, PROTO_TCP);
    assert_eq!(lb.send(&flow.frame(L4::Tcp(ACK), &[])), (XDP_TX, b4(owner)));
    assert_eq!(lb.dp.vip_stats(0).expect("stats").ct_stale_repicked, 1);
    let (_, entry) = pin_of(&lb, &flow);
    assert_eq!(entry.backend_id, owner, "the entry is overwritten");
}

#[test]
fn mid_flow_miss_is_rehashed_on_the_current_table() {
    // The flow's pin is deleted after a table change: its next packet goes to the
    // current table's owner, counts as a mid-flow miss and is pinned there (no second
    // lookup in an older table) (BR-13.T2).
    let mut lb = Lb::standard();
    let sport = port_landing_on(&lb, 0, 80, 2, 44400);
    let flow = Flow::new(CLIENT4, sport, VIP4, 80);
    establish(&mut lb, &flow);
    lb.table(0, &[3; 65_537]);
    lb.dp
        .delete_flow(&flow_key(&flow, PROTO_TCP))
        .expect("delete");
    let misses = lb.dp.vip_stats(0).expect("stats").ct_misses_non_syn;
    assert_eq!(lb.send(&flow.frame(L4::Tcp(ACK), &[])), (XDP_TX, b4(3)));
    assert_eq!(
        lb.dp.vip_stats(0).expect("stats").ct_misses_non_syn,
        misses + 1
    );
    let (table, entry) = pin_of(&lb, &flow);
    assert_eq!((table, entry.backend_id), (CtTable::Established, 3));
}

#[test]
fn last_backend_drained_keeps_established_flows() {
    // The only backend drains, so the table is empty: its established flow still
    // reaches it (conntrack decides before the empty table), a new flow is dropped and
    // counted (BR-08.T3).
    let mut lb = Lb::standard();
    lb.table(0, &[1; 65_537]);
    let flow = Flow::new(CLIENT4, 44500, VIP4, 80);
    assert_eq!(establish(&mut lb, &flow), b4(1));
    lb.backend(1, packets::backend4(1), BACKEND_DRAINING);
    lb.table(0, &[0; 65_537]);
    assert_eq!(lb.send(&flow.frame(L4::Tcp(ACK), &[])), (XDP_TX, b4(1)));
    let other = Flow::new(CLIENT4, 44501, VIP4, 80);
    let before = lb.counter(Reason::DropNoBackend);
    assert_eq!(lb.send(&other.frame(L4::Tcp(SYN), &[])).0, XDP_DROP);
    assert_eq!(lb.counter(Reason::DropNoBackend), before + 1);
}

#[test]
fn removing_the_last_healthy_backend_never_selects_a_down_one() {
    // Backend 2 is down, then backend 1, the last active one, goes too: new flows are
    // dropped, never sent to a down backend (BR-08.T4).
    let mut lb = Lb::standard();
    lb.backend(2, packets::backend4(2), BACKEND_DOWN);
    lb.table(0, &[1; 65_537]);
    lb.backend(1, packets::backend4(1), BACKEND_DOWN);
    lb.table(0, &[0; 65_537]);
    for p in 44600..44700 {
        let (action, _) = lb.send(&Flow::new(CLIENT4, p, VIP4, 80).frame(L4::Tcp(SYN), &[]));
        assert_eq!(action, XDP_DROP);
    }
}

#[test]
fn a_stale_table_slot_pointing_at_a_down_backend_drops() {
    // A table slot naming a backend whose entry is down (a table written before the
    // entry changed): drop, never forward to a backend that is not active (BR-12.T4).
    let mut lb = Lb::standard();
    lb.backend(9, packets::backend4(9), BACKEND_DOWN);
    lb.table(0, &[9; 65_537]);
    let (action, _) = lb.send(&Flow::new(CLIENT4, 44650, VIP4, 80).frame(L4::Tcp(SYN), &[]));
    assert_eq!(action, XDP_DROP);
}

#[test]
fn deleted_vip_stops_forwarding_its_old_flows() {
    // A VIP deleted while conntrack still pins its flows: the packet is no longer for a
    // VIP, so it passes (pass_non_vip) and is never forwarded to the old backend
    // (BR-08.T5).
    let mut lb = Lb::standard();
    let flow = Flow::new(CLIENT4, 44700, VIP4, 80);
    establish(&mut lb, &flow);
    let key = lb_tests::fixture::vip_key(VIP4.into(), 80, PROTO_TCP);
    lb.dp.remove_vip(&key).expect("remove vip");
    let before = lb.counter(Reason::PassNonVip);
    assert_eq!(lb.send(&flow.frame(L4::Tcp(ACK), &[])), (XDP_PASS, None));
    assert_eq!(lb.counter(Reason::PassNonVip), before + 1);
}

#[test]
fn udp_flows_expire_after_the_idle_timeout() {
    // A UDP pin holds within the idle timeout though the table moved the flow's slot;
    // after the timeout the flow follows the current table and is pinned again
    // (BR-13.T4). The timeout is 10 s while the pin must hold (no stall of a loaded
    // machine expires it), then 300 ms, which applies to the pin already made.
    let mut lb = Lb::standard();
    let mut cfg = default_config();
    cfg.udp_timeout_ns = 10_000_000_000;
    lb.dp.set_config(&cfg).expect("config");
    lb.table(1, &[1; 65_537]);
    let flow = Flow::new(CLIENT4, 50000, VIP4, 53);
    let datagram = flow.frame(L4::Udp, b"q");
    assert_eq!(lb.send(&datagram), (XDP_TX, b4(1)));
    lb.table(1, &[3; 65_537]);
    assert_eq!(lb.send(&datagram), (XDP_TX, b4(1)), "within the timeout");
    cfg.udp_timeout_ns = 300_000_000;
    lb.dp.set_config(&cfg).expect("config");
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(lb.send(&datagram), (XDP_TX, b4(3)), "after the timeout");
    assert_eq!(lb.dp.vip_stats(1).expect("stats").ct_udp_expired, 1);
    let (_, entry) = lb
        .dp
        .lookup_flow(&flow_key(&flow, PROTO_UDP))
        .expect("lookup")
        .expect("refreshed");
    assert_eq!(entry.backend_id, 3);
    assert_eq!(lb.send(&datagram), (XDP_TX, b4(3)));
}

#[test]
fn a_flow_keeps_its_backend_on_another_cpu() {
    // Established on CPU 0, then a table change: its ACK on CPU 1 still goes to the
    // pinned backend, because the conntrack map is shared between CPUs (BR-15.T1).
    if !two_cpus() {
        return;
    }
    let mut lb = Lb::standard();
    let sport = port_landing_on(&lb, 0, 80, 2, 44800);
    let flow = Flow::new(CLIENT4, sport, VIP4, 80);
    on_cpu(0, || {
        assert_eq!(establish(&mut lb, &flow), b4(2));
        lb.table(0, &[3; 65_537]);
    });
    assert_eq!(send_on(&mut lb, 1, &flow, ACK, b""), (XDP_TX, b4(2)));
}

#[test]
fn batched_counter_reads_equal_one_read_per_id_summed_over_cpus() {
    // The daemon's stats sample reads the per-CPU counter arrays in batches over the
    // range its ids span: each element summed over the CPUs, as one lookup per id sums
    // it, whatever the ids' order, gaps and span (more than one batch).
    let mut lb = Lb::standard();
    // VIP id 1 (VIP4:53/udp) on backends 1 and 600: 600 lies beyond the first batch
    // of a read from id 1.
    lb.backend(600, packets::backend4(6), BACKEND_ACTIVE);
    lb.table(1, &round_robin(65_537, &[1, 600]));
    let cpus = if two_cpus() { 2 } else { 1 };
    let mut sent = 0;
    for cpu in 0..cpus {
        on_cpu(cpu, || {
            for port in 0..30u16 {
                let flow = Flow::new(CLIENT4, 51_000 + port, VIP4, 53);
                assert_eq!(lb.send(&flow.frame(L4::Udp, b"q")).0, XDP_TX);
            }
        });
        sent += 30;
    }
    let dp = &lb.dp;
    let backends = batched_as_single(&[600, 1, 2, 7, 13, 2_000, 1], |ids| {
        let single = ids.iter().map(|&id| dp.backend_stats(id).expect("one"));
        (dp.backend_stats_of(ids).expect("batched"), single.collect())
    });
    assert_eq!(backends[0].packets + backends[1].packets, sent);
    assert!(
        backends[0].packets > 0 && backends[1].packets > 0,
        "{backends:?}"
    );
    let vips = batched_as_single(&[1, 0, 3], |ids| {
        let single = ids.iter().map(|&id| dp.vip_stats(id).expect("one"));
        (dp.vip_stats_of(ids).expect("batched"), single.collect())
    });
    assert_eq!(vips.iter().map(|s| s.packets).sum::<u64>(), sent);
    assert!(dp.backend_stats_of(&[]).expect("none").is_empty());
}

/// The batched read of `ids` after checking that it equals the reads one by one;
/// `read` gives both.
fn batched_as_single<T: PartialEq + std::fmt::Debug>(
    ids: &[u32],
    read: impl Fn(&[u32]) -> (Vec<T>, Vec<T>),
) -> Vec<T> {
    let (batched, single) = read(ids);
    assert_eq!(batched, single, "ids {ids:?}");
    batched
}

#[test]
fn syn_flood_does_not_evict_established_flows() {
    // 500 established flows, a conntrack map of 4,096 entries and a SYN cache of 1,024
    // slots; 100,000 spoofed SYNs; then the table moves and every established flow
    // still reaches its backend; legitimate SYNs are forwarded throughout (BR-16.T1,
    // T2).
    let mut lb = Lb::with_ct(4_096, 1_024);
    lb.backends(3, false);
    lb.table(0, &round_robin(65_537, &[1, 2, 3]));
    lb.vip(0, VIP4, 80, PROTO_TCP);
    let flows: Vec<Flow> = (0..500u16)
        .map(|i| Flow::new(CLIENT4, 20_000 + i, VIP4, 80))
        .collect();
    let owners: Vec<Option<IpAddr>> = flows.iter().map(|f| establish(&mut lb, f)).collect();
    let mut rng = 0x1234_5678_u32;
    for i in 0..100_000u32 {
        rng ^= rng << 13;
        rng ^= rng >> 17;
        rng ^= rng << 5;
        let src = std::net::Ipv4Addr::from(0xc612_0000 | (rng & 0x0001_ffff)); // 198.18.0.0/15
        let port = u16::try_from(rng >> 16).expect("16 bits") | 1;
        let syn = Flow::new(src, port, VIP4, 80).frame(L4::Tcp(SYN), &[]);
        assert_eq!(lb.send(&syn).0, XDP_TX);
        if i % 10_000 == 0 {
            let n = u16::try_from(i / 10_000).expect("small");
            let legit = Flow::new(CLIENT4, 30_000 + n, VIP4, 80);
            assert_eq!(lb.send(&legit.frame(L4::Tcp(SYN), &[])).0, XDP_TX);
        }
    }
    lb.table(0, &round_robin(65_537, &[3, 1, 2]));
    for (flow, owner) in flows.iter().zip(&owners) {
        assert_eq!(
            lb.send(&flow.frame(L4::Tcp(ACK), &[])),
            (XDP_TX, *owner),
            "{flow:?}"
        );
    }
    let (established, syn_only) = lb.dp.conntrack_len().expect("ct size");
    assert!(established >= 500, "{established}");
    assert!(
        syn_only <= 1_024,
        "the SYN cache keeps its size: {syn_only}"
    );
}

#[test]
fn table_swaps_are_atomic_under_traffic() {
    // While one thread sends packets, another keeps swapping between a 2-backend and a
    // 3-backend table: every packet is forwarded to one of the three, none is dropped or
    // sent to an unset slot (BR-12.T1).
    let mut lb = Lb::standard();
    let old = round_robin(65_537, &[1, 2]);
    let new = round_robin(65_537, &[1, 2, 3]);
    lb.table(0, &old);
    let mut writer = lb.dp.table_writer();
    let frames: Vec<Vec<u8>> = (0..2_000u16)
        .map(|p| Flow::new(CLIENT4, 10_000 + p, VIP4, 80).frame(L4::Tcp(RST), &[]))
        .collect();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut generation = 100;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for slots in [&new, &old] {
                    generation += 1;
                    writer
                        .install_table(0, &TableImage { generation, slots })
                        .expect("swap");
                }
            }
        });
        for _ in 0..5 {
            for frame in &frames {
                let (action, dst) = lb.send(frame);
                assert_eq!(action, XDP_TX);
                assert!([b4(1), b4(2), b4(3)].contains(&dst), "{dst:?}");
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert_eq!(lb.counter(Reason::DropNoBackend), 0);
    assert_eq!(lb.counter(Reason::DropBadConfig), 0);
}

#[test]
fn backend_states_are_honoured_per_state() {
    // Active and draining backends keep their pins; down ones do not; unused ids are
    // never used.
    let mut lb = Lb::standard();
    for (i, state) in [(0u16, BACKEND_ACTIVE), (1, BACKEND_DRAINING)] {
        lb.backend(1, packets::backend4(1), BACKEND_ACTIVE);
        lb.table(0, &round_robin(65_537, &[1, 2, 3]));
        let sport = port_landing_on(&lb, 0, 80, 1, 46000 + 100 * i);
        let flow = Flow::new(CLIENT4, sport, VIP4, 80);
        assert_eq!(establish(&mut lb, &flow), b4(1));
        lb.backend(1, packets::backend4(1), state);
        lb.table(0, &[2; 65_537]);
        assert_eq!(
            lb.send(&flow.frame(L4::Tcp(ACK), &[])),
            (XDP_TX, b4(1)),
            "state {state}"
        );
    }
}

#[test]
fn a_syn_reusing_an_established_4tuple_follows_the_current_table() {
    // A new connection on an old 4-tuple (port reuse) goes where the current table
    // says, and its handshake's ACK follows the SYN, not the old pin.
    let mut lb = Lb::standard();
    let sport = port_landing_on(&lb, 0, 80, 2, 46000);
    let flow = Flow::new(CLIENT4, sport, VIP4, 80);
    assert_eq!(establish(&mut lb, &flow), b4(2));
    lb.table(0, &[3; 65_537]);
    // The old connection keeps its backend...
    assert_eq!(lb.send(&flow.frame(L4::Tcp(ACK), b"old")), (XDP_TX, b4(2)));
    // ...a new one on the same 4-tuple (another ISN, even within the same clock tick)
    // does not.
    assert_eq!(lb.send(&flow.syn_with_isn(2000)), (XDP_TX, b4(3)));
    assert_eq!(lb.send(&flow.frame(L4::Tcp(ACK), &[])), (XDP_TX, b4(3)));
    assert_eq!(lb.send(&flow.frame(L4::Tcp(ACK), b"data")), (XDP_TX, b4(3)));
    let (table, entry) = pin_of(&lb, &flow);
    assert_eq!((table, entry.backend_id), (CtTable::Established, 3));
}

#[test]
fn a_reused_4tuple_follows_its_syn_when_the_table_changes_back() {
    // Epoch order, not backend equality, decides: old entry on 2 (table A), SYN on 3
    // (table B), then a table mapping the flow to 2 again: the handshake stays on 3.
    let mut lb = Lb::standard();
    let sport = port_landing_on(&lb, 0, 80, 2, 46100);
    let flow = Flow::new(CLIENT4, sport, VIP4, 80);
    assert_eq!(establish(&mut lb, &flow), b4(2));
    lb.table(0, &[3; 65_537]);
    assert_eq!(lb.send(&flow.syn_with_isn(2000)), (XDP_TX, b4(3)));
    lb.table(0, &[2; 65_537]);
    assert_eq!(lb.send(&flow.frame(L4::Tcp(ACK), &[])), (XDP_TX, b4(3)));
    assert_eq!(lb.send(&flow.frame(L4::Tcp(ACK), b"data")), (XDP_TX, b4(3)));
}

#[test]
fn a_syn_during_a_handshake_table_change_keeps_the_handshake_together() {
    // SYN picked from table A, table B moves the slot before the ACK: the ACK follows
    // the SYN (its SYN cache slot), and so do later packets.
    let mut lb = Lb::standard();
    let sport = port_landing_on(&lb, 0, 80, 1, 46200);
    let flow = Flow::new(CLIENT4, sport, VIP4, 80);
    assert_eq!(lb.send(&flow.frame(L4::Tcp(SYN), &[])), (XDP_TX, b4(1)));
    lb.table(0, &[3; 65_537]);
    assert_eq!(lb.send(&flow.frame(L4::Tcp(ACK), &[])), (XDP_TX, b4(1)));
    assert_eq!(lb.send(&flow.frame(L4::Tcp(ACK), b"data")), (XDP_TX, b4(1)));
    let (table, _) = pin_of(&lb, &flow);
    assert_eq!(table, CtTable::Established);
}

#[test]
fn an_entry_the_new_table_agrees_with_is_relabelled_and_a_moved_one_is_not() {
    let mut lb = Lb::standard();
    let stays = Flow::new(CLIENT4, port_landing_on(&lb, 0, 80, 1, 46300), VIP4, 80);
    let moves = Flow::new(CLIENT4, port_landing_on(&lb, 0, 80, 2, 46300), VIP4, 80);
    assert_eq!(establish(&mut lb, &stays), b4(1));
    assert_eq!(establish(&mut lb, &moves), b4(2));
    let epoch = |lb: &Lb, f: &Flow| pin_of(lb, f).1.epoch;
    let before = epoch(&lb, &stays);
    assert_eq!(epoch(&lb, &moves), before);
    // Backend 2's slots go to 3; backend 1 keeps its own.
    lb.table(0, &round_robin(65_537, &[1, 3, 3]));
    assert_eq!(lb.predict(0, &stays, PROTO_TCP), 1);
    assert_eq!(lb.predict(0, &moves, PROTO_TCP), 3);
    for _ in 0..2 {
        assert_eq!(lb.send(&stays.frame(L4::Tcp(ACK), &[])), (XDP_TX, b4(1)));
        assert_eq!(lb.send(&moves.frame(L4::Tcp(ACK), &[])), (XDP_TX, b4(2)));
    }
    assert!(
        epoch(&lb, &stays) > before,
        "checked once, then on the fast path"
    );
    assert_eq!(
        epoch(&lb, &moves),
        before,
        "keeps being checked for a newer SYN"
    );
}

#[test]
fn a_syn_taking_another_handshakes_slot_is_counted() {
    // Two flows whose SYN cache slots collide (same flow hash bits under the mask).
    let mut lb = Lb::standard();
    let mask = 4_096 - 1;
    let slot = |p: u16| {
        lb_common::hash::flow_hash(&flow_key(&Flow::new(CLIENT4, p, VIP4, 80), PROTO_TCP), SEED)
            & mask
    };
    let first = 47000;
    let second = (first + 1..u16::MAX)
        .find(|&p| slot(p) == slot(first))
        .expect("a colliding port");
    let a = Flow::new(CLIENT4, first, VIP4, 80);
    let b = Flow::new(CLIENT4, second, VIP4, 80);
    assert_eq!(lb.send(&a.frame(L4::Tcp(SYN), &[])).0, XDP_TX);
    assert_eq!(lb.dp.vip_stats(0).expect("stats").ct_syn_only_evicted, 0);
    // A retransmitted SYN of the same flow is not an eviction.
    assert_eq!(lb.send(&a.frame(L4::Tcp(SYN), &[])).0, XDP_TX);
    assert_eq!(lb.dp.vip_stats(0).expect("stats").ct_syn_only_evicted, 0);
    assert_eq!(lb.send(&b.frame(L4::Tcp(SYN), &[])).0, XDP_TX);
    assert_eq!(lb.dp.vip_stats(0).expect("stats").ct_syn_only_evicted, 1);
    // A completed handshake frees its slot: the next SYN there evicts nothing.
    assert_eq!(lb.send(&b.frame(L4::Tcp(ACK), &[])).0, XDP_TX);
    assert_eq!(lb.send(&a.frame(L4::Tcp(SYN), &[])).0, XDP_TX);
    assert_eq!(lb.dp.vip_stats(0).expect("stats").ct_syn_only_evicted, 1);
    // a's held SYN was lost, and it keeps no stale choice: its ACK follows the
    // table like any miss.
    let expected = lb.predict(0, &a, PROTO_TCP);
    assert_eq!(lb.send(&a.frame(L4::Tcp(ACK), &[])), (XDP_TX, b4(expected)));
}

/// Sends `l4`/`payload` of `flow` from a thread pinned to `cpu`.
fn send_on(
    lb: &mut Lb,
    cpu: usize,
    flow: &Flow,
    l4: packets::TcpFlags,
    payload: &[u8],
) -> (u32, Option<IpAddr>) {
    send_frame_on(lb, cpu, &flow.frame(L4::Tcp(l4), payload))
}

/// Sends `frame` from a thread pinned to `cpu`.
fn send_frame_on(lb: &mut Lb, cpu: usize, frame: &[u8]) -> (u32, Option<IpAddr>) {
    on_cpu(cpu, || lb.send(frame))
}

/// Runs `f` on a thread pinned to `cpu`.
fn on_cpu<R: Send>(cpu: usize, f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|s| {
        s.spawn(|| {
            lb_tests::pin_to_cpu(cpu).expect("pin");
            f()
        })
        .join()
        .expect("pinned thread")
    })
}

/// A flow whose connection was established on backend 2 (CPU 0), then, after a table
/// sending it to 3, reused by a new connection whose SYN (CPU 0) went to 3.
fn reused_after_table_change(lb: &mut Lb, from_port: u16) -> Flow {
    let flow = Flow::new(CLIENT4, port_landing_on(lb, 0, 80, 2, from_port), VIP4, 80);
    assert_eq!(send_on(lb, 0, &flow, SYN, b""), (XDP_TX, b4(2)));
    assert_eq!(send_on(lb, 0, &flow, ACK, b""), (XDP_TX, b4(2)));
    lb.table(0, &[3; 65_537]);
    assert_eq!(
        send_frame_on(lb, 0, &flow.syn_with_isn(2000)),
        (XDP_TX, b4(3))
    );
    flow
}

fn two_cpus() -> bool {
    let n = std::thread::available_parallelism().map_or(1, usize::from);
    if n < 2 {
        eprintln!("single CPU: nothing to check");
    }
    n >= 2
}

/// [`Lb::standard`] on two CPUs, whose SYN cache has a part per CPU (4,096 slots:
/// CPUs 0 and 1 in two parts); `None` on one CPU.
fn standard_with_parts() -> Option<Lb> {
    if !two_cpus() {
        return None;
    }
    let lb = Lb::standard();
    assert!(lb.dp.syn_cache_parts() >= 2, "a SYN cache part per CPU");
    Some(lb)
}

#[test]
fn a_handshake_on_one_cpu_keeps_its_syn_in_that_cpus_part() {
    // Each CPU holds its SYNs in its own part of the SYN cache. A handshake whose SYN
    // and ACK arrive on one CPU (receive-side scaling) follows its SYN across a table
    // change, on either CPU; userspace (`lb flow`, the removal of one flow) finds the
    // held SYN in whichever part holds it.
    for cpu in 0..2 {
        let Some(mut lb) = standard_with_parts() else {
            return;
        };
        let from = 46_400 + 50 * u16::try_from(cpu).expect("cpu");
        let flow = Flow::new(CLIENT4, port_landing_on(&lb, 0, 80, 3, from), VIP4, 80);
        let gone = Flow::new(CLIENT4, port_landing_on(&lb, 0, 80, 2, from), VIP4, 80);
        assert_eq!(send_on(&mut lb, cpu, &flow, SYN, b""), (XDP_TX, b4(3)));
        assert_eq!(send_on(&mut lb, cpu, &gone, SYN, b""), (XDP_TX, b4(2)));
        let (table, entry) = pin_of(&lb, &flow);
        assert_eq!(
            (table, entry.backend_id),
            (CtTable::SynOnly, 3),
            "CPU {cpu}"
        );
        assert_eq!(lb.dp.conntrack_len().expect("count"), (0, 2));
        lb.dp
            .delete_flow(&flow_key(&gone, PROTO_TCP))
            .expect("delete");
        assert_eq!(lb.dp.conntrack_len().expect("count"), (0, 1));
        lb.table(0, &[1; 65_537]);
        assert_eq!(send_on(&mut lb, cpu, &flow, ACK, b""), (XDP_TX, b4(3)));
        assert_eq!(send_on(&mut lb, 1 - cpu, &flow, ACK, b"d"), (XDP_TX, b4(3)));
        let (table, entry) = pin_of(&lb, &flow);
        assert_eq!((table, entry.backend_id), (CtTable::Established, 3));
        // The removed SYN's ACK found no SYN: it took the table.
        assert_eq!(send_on(&mut lb, cpu, &gone, ACK, b""), (XDP_TX, b4(1)));
    }
}

#[test]
fn the_syn_cache_is_split_by_cpu_only_on_an_interface_with_several_receive_queues() {
    // Receive-side scaling keeps a flow on one CPU only with more than one receive
    // queue. On a one-queue veth (packets handled on whichever CPU sent them) the SYN
    // cache stays whole: a handshake split across CPUs still finds its SYN.
    let Some(mut lb) = standard_with_parts() else {
        return;
    };
    let ns = NetNs::create("tb-syncpu-").expect("namespace");
    for (name, queues) in [("one", "1"), ("rss", "2")] {
        let (a, b) = (format!("{name}0"), format!("{name}1"));
        ns.ip(&[
            "link",
            "add",
            &a,
            "numrxqueues",
            queues,
            "numtxqueues",
            queues,
            "type",
            "veth",
            "peer",
            "name",
            &b,
        ])
        .expect("a veth pair");
        ns.ip(&["link", "set", &a, "up"]).expect("up");
    }
    let parts_on = |lb: &mut Lb, iface: &str| {
        ns.enter(|| {
            lb.dp.attach(iface, AttachMode::Skb).expect("attach");
            let parts = lb.dp.syn_cache_parts();
            lb.dp.detach().expect("detach");
            parts
        })
        .expect("enter the namespace")
    };
    assert!(
        parts_on(&mut lb, "rss0") >= 2,
        "two receive queues: a part per CPU"
    );
    assert_eq!(parts_on(&mut lb, "one0"), 1, "one receive queue: one part");
    // The configuration written before the attachment was rewritten with one part.
    let flow = Flow::new(CLIENT4, port_landing_on(&lb, 0, 80, 3, 46_700), VIP4, 80);
    assert_eq!(send_on(&mut lb, 0, &flow, SYN, b""), (XDP_TX, b4(3)));
    lb.table(0, &[1; 65_537]);
    assert_eq!(send_on(&mut lb, 1, &flow, ACK, b""), (XDP_TX, b4(3)));
}

#[test]
fn residual_an_ack_on_another_cpu_than_its_syn_takes_the_table() {
    // An ACK on another CPU than its SYN (no receive-side scaling affinity, or a change
    // of the queue count) finds no SYN in its CPU's part and takes the current table:
    // the SYN's backend while the table is unchanged, another after a change.
    let Some(mut lb) = standard_with_parts() else {
        return;
    };
    let kept = Flow::new(CLIENT4, port_landing_on(&lb, 0, 80, 3, 46_500), VIP4, 80);
    assert_eq!(send_on(&mut lb, 0, &kept, SYN, b""), (XDP_TX, b4(3)));
    assert_eq!(send_on(&mut lb, 1, &kept, ACK, b""), (XDP_TX, b4(3)));
    let split = Flow::new(CLIENT4, port_landing_on(&lb, 0, 80, 3, 46_600), VIP4, 80);
    assert_eq!(send_on(&mut lb, 0, &split, SYN, b""), (XDP_TX, b4(3)));
    lb.table(0, &[1; 65_537]);
    assert_eq!(send_on(&mut lb, 1, &split, ACK, b""), (XDP_TX, b4(1)));
    assert_eq!(send_on(&mut lb, 0, &split, ACK, b"data"), (XDP_TX, b4(1)));
    let (table, entry) = pin_of(&lb, &split);
    assert_eq!((table, entry.backend_id), (CtTable::Established, 1));
}

#[test]
fn a_reused_4tuple_is_followed_on_every_cpu() {
    // Old connection on 2; table to 3; the new connection's SYN (CPU 0) goes to 3;
    // table back to 2; its ACK on CPU 0 (the SYN's) replaces the old pin, and its
    // packets then go to 3 on either CPU.
    let Some(mut lb) = standard_with_parts() else {
        return;
    };
    let flow = reused_after_table_change(&mut lb, 46500);
    lb.table(0, &[2; 65_537]);
    assert_eq!(send_on(&mut lb, 0, &flow, ACK, b""), (XDP_TX, b4(3)));
    assert_eq!(send_on(&mut lb, 1, &flow, ACK, b"x"), (XDP_TX, b4(3)));
    assert_eq!(send_on(&mut lb, 0, &flow, ACK, b"y"), (XDP_TX, b4(3)));
}

#[test]
fn residual_an_ack_on_another_cpu_of_a_reused_4tuple_follows_the_old_pin() {
    // The new connection's SYN is held in CPU 0's part only: its ACK on CPU 1 sees the
    // old connection's pin and no newer SYN, and follows the pin (backend 2), as it did
    // before the held SYN existed.
    let Some(mut lb) = standard_with_parts() else {
        return;
    };
    let flow = reused_after_table_change(&mut lb, 46600);
    assert_eq!(send_on(&mut lb, 1, &flow, ACK, b""), (XDP_TX, b4(2)));
}

#[test]
fn a_retransmitted_syn_never_moves_the_established_connection() {
    // SYN (CPU 1) on 2, table change, the retransmitted SYN (CPU 1, same ISN: receive-
    // side scaling keeps the flow's packets on one CPU, whose part holds its SYN)
    // follows the first one to 2; the handshake's ACK too, and from then on the
    // connection stays put on every CPU.
    let Some(mut lb) = standard_with_parts() else {
        return;
    };
    let flow = Flow::new(CLIENT4, port_landing_on(&lb, 0, 80, 2, 46700), VIP4, 80);
    assert_eq!(send_on(&mut lb, 1, &flow, SYN, b""), (XDP_TX, b4(2)));
    lb.table(0, &[3; 65_537]);
    assert_eq!(send_on(&mut lb, 1, &flow, SYN, b""), (XDP_TX, b4(2)));
    assert_eq!(send_on(&mut lb, 1, &flow, ACK, b""), (XDP_TX, b4(2)));
    for (cpu, payload) in [(1, b"d1"), (0, b"d2"), (1, b"d3"), (0, b"d4")] {
        assert_eq!(send_on(&mut lb, cpu, &flow, ACK, payload), (XDP_TX, b4(2)));
    }
    lb.table(0, &[1; 65_537]);
    for (cpu, payload) in [(0, b"d5"), (1, b"d6")] {
        assert_eq!(send_on(&mut lb, cpu, &flow, ACK, payload), (XDP_TX, b4(2)));
    }
}

#[test]
fn a_retransmitted_syn_follows_its_first_syn_across_table_changes() {
    // The first SYN-ACK is lost and backends change before the client retries: each
    // retransmission (same ISN) goes where the first SYN went, and so does the ACK. A
    // new attempt on the 4-tuple (another ISN) takes the current table.
    let mut lb = Lb::standard();
    let flow = Flow::new(CLIENT4, port_landing_on(&lb, 0, 80, 1, 47_000), VIP4, 80);
    let syn = flow.frame(L4::Tcp(SYN), &[]);
    assert_eq!(lb.send(&syn), (XDP_TX, b4(1)));
    lb.table(0, &[3; 65_537]);
    assert_eq!(lb.send(&syn), (XDP_TX, b4(1)));
    lb.table(0, &[2; 65_537]);
    assert_eq!(lb.send(&syn), (XDP_TX, b4(1)));
    let before = lb.dp.vip_stats(0).expect("stats");
    assert_eq!(lb.send(&flow.frame(L4::Tcp(ACK), &[])), (XDP_TX, b4(1)));
    assert_eq!(lb.send(&flow.frame(L4::Tcp(ACK), b"data")), (XDP_TX, b4(1)));
    assert_eq!(
        lb.dp.vip_stats(0).expect("stats").new_flows,
        before.new_flows
    );
    let other = Flow::new(CLIENT4, 47_100, VIP4, 80);
    assert_eq!(lb.send(&other.frame(L4::Tcp(SYN), &[])), (XDP_TX, b4(2)));
    lb.table(0, &[3; 65_537]);
    assert_eq!(lb.send(&other.syn_with_isn(2000)), (XDP_TX, b4(3)));
    assert_eq!(lb.send(&other.frame(L4::Tcp(ACK), &[])), (XDP_TX, b4(3)));
}

#[test]
fn a_retransmitted_syn_to_a_backend_gone_down_takes_the_current_table() {
    let mut lb = Lb::standard();
    let flow = Flow::new(CLIENT4, port_landing_on(&lb, 0, 80, 1, 47_200), VIP4, 80);
    let syn = flow.frame(L4::Tcp(SYN), &[]);
    assert_eq!(lb.send(&syn), (XDP_TX, b4(1)));
    lb.table(0, &[3; 65_537]);
    lb.backend(1, packets::backend4(1), BACKEND_DOWN);
    assert_eq!(lb.send(&syn), (XDP_TX, b4(3)));
    assert_eq!(lb.send(&flow.frame(L4::Tcp(ACK), &[])), (XDP_TX, b4(3)));
}

#[test]
fn one_cpu_can_use_the_whole_conntrack_capacity() {
    // Per-CPU LRU lists (BPF_F_NO_COMMON_LRU) would keep only capacity / CPUs entries
    // for flows that all arrive on one CPU (here 2,048 of 4,000 with 2 CPUs).
    let mut lb = Lb::with_ct(4_096, 256);
    lb.backends(3, false);
    lb.table(1, &round_robin(65_537, &[1, 2, 3]));
    lb.vip(1, VIP4, 53, PROTO_UDP);
    for p in 0..3_000u16 {
        let flow = Flow::new(CLIENT4, 10_000 + p, VIP4, 53);
        assert_eq!(lb.send(&flow.frame(L4::Udp, b"q")).0, XDP_TX);
    }
    let (established, _) = lb.dp.conntrack_len().expect("ct size");
    assert_eq!(established, 3_000);
}

#[test]
fn a_busy_udp_flow_never_expires_even_with_a_one_second_timeout() {
    let mut lb = Lb::standard();
    let mut cfg = default_config();
    cfg.udp_timeout_ns = 1_000_000_000;
    lb.dp.set_config(&cfg).expect("config");
    lb.table(1, &[1; 65_537]);
    let datagram = Flow::new(CLIENT4, 50_100, VIP4, 53).frame(L4::Udp, b"q");
    assert_eq!(lb.send(&datagram), (XDP_TX, b4(1)));
    lb.table(1, &[3; 65_537]);
    for i in 0..8 {
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(lb.send(&datagram), (XDP_TX, b4(1)), "datagram {i}");
    }
}

#[test]
fn a_late_duplicate_syn_does_not_move_its_established_connection() {
    // The duplicate carries the connection's own ISN: not a new connection. It goes to
    // the connection's backend (the backend ignores or answers it within the
    // connection) and changes no state but the tick the flow was last seen in.
    let mut lb = Lb::standard();
    let flow = Flow::new(CLIENT4, port_landing_on(&lb, 0, 80, 2, 47_400), VIP4, 80);
    assert_eq!(establish(&mut lb, &flow), b4(2));
    let pinned = pin_of(&lb, &flow);
    lb.table(0, &[3; 65_537]);
    assert_eq!(lb.send(&flow.frame(L4::Tcp(SYN), &[])), (XDP_TX, b4(2)));
    let (state, entry) = pin_of(&lb, &flow);
    assert!(entry.seen_ticks >= pinned.1.seen_ticks, "{entry:?}");
    let seen = |mut e: CtEntry| {
        e.seen_ticks = 0;
        e
    };
    assert_eq!((state, seen(entry)), (pinned.0, seen(pinned.1)));
    assert_eq!(lb.send(&flow.frame(L4::Tcp(ACK), b"d")), (XDP_TX, b4(2)));
    // Drained, the backend keeps the connection, duplicates included.
    lb.backend(2, packets::backend4(2), BACKEND_DRAINING);
    assert_eq!(lb.send(&flow.frame(L4::Tcp(SYN), &[])), (XDP_TX, b4(2)));
    assert_eq!(pin_of(&lb, &flow).1.backend_id, 2);
}

#[test]
fn a_syn_reads_conntrack_only_in_the_window_after_a_table_change() {
    // Long after the last table change, a duplicate SYN takes the table without a
    // conntrack lookup: the table it takes is the one its connection was picked from.
    // After a change it follows the pin (a conntrack hit) for the window.
    let mut lb = Lb::standard();
    let flow = Flow::new(CLIENT4, port_landing_on(&lb, 0, 80, 2, 47_460), VIP4, 80);
    assert_eq!(establish(&mut lb, &flow), b4(2));
    lb.dp.age_table_seen(0, 181).expect("age");
    let before = lb.dp.vip_stats(0).expect("stats");
    assert_eq!(lb.send(&flow.frame(L4::Tcp(SYN), &[])), (XDP_TX, b4(2)));
    let after = lb.dp.vip_stats(0).expect("stats");
    assert_eq!(
        (
            after.new_flows - before.new_flows,
            after.ct_hits - before.ct_hits
        ),
        (1, 0)
    );
    lb.table(0, &[3; 65_537]);
    assert_eq!(lb.send(&flow.frame(L4::Tcp(SYN), &[])), (XDP_TX, b4(2)));
    let last = lb.dp.vip_stats(0).expect("stats");
    assert_eq!(
        (
            last.new_flows - after.new_flows,
            last.ct_hits - after.ct_hits
        ),
        (0, 1)
    );
    // 179 s after the change the window still holds.
    lb.dp.age_table_seen(0, 179).expect("age");
    assert_eq!(lb.send(&flow.frame(L4::Tcp(SYN), &[])), (XDP_TX, b4(2)));
    assert_eq!(lb.dp.vip_stats(0).expect("stats").new_flows, last.new_flows);
}

#[test]
fn a_duplicate_syn_on_another_cpu_follows_its_connection() {
    if !two_cpus() {
        return;
    }
    let mut lb = Lb::standard();
    let flow = Flow::new(CLIENT4, port_landing_on(&lb, 0, 80, 3, 47_450), VIP4, 80);
    assert_eq!(send_on(&mut lb, 0, &flow, SYN, b""), (XDP_TX, b4(3)));
    assert_eq!(send_on(&mut lb, 0, &flow, ACK, b""), (XDP_TX, b4(3)));
    lb.table(0, &[1; 65_537]);
    assert_eq!(send_on(&mut lb, 1, &flow, SYN, b""), (XDP_TX, b4(3)));
    assert_eq!(send_on(&mut lb, 1, &flow, ACK, b"d"), (XDP_TX, b4(3)));
}

#[test]
fn a_reused_4tuple_under_the_same_table_is_reported_established() {
    let mut lb = Lb::standard();
    let flow = Flow::new(CLIENT4, port_landing_on(&lb, 0, 80, 2, 47_500), VIP4, 80);
    assert_eq!(establish(&mut lb, &flow), b4(2));
    assert_eq!(lb.send(&flow.syn_with_isn(2000)), (XDP_TX, b4(2)));
    assert_eq!(lb.send(&flow.frame(L4::Tcp(ACK), b"data")), (XDP_TX, b4(2)));
    let (table, entry) = pin_of(&lb, &flow);
    assert_eq!((table, entry.backend_id), (CtTable::Established, 2));
}

#[test]
fn a_rst_between_a_syn_and_its_ack_leaves_the_handshake_together() {
    let mut lb = Lb::standard();
    let flow = Flow::new(CLIENT4, port_landing_on(&lb, 0, 80, 1, 47_600), VIP4, 80);
    assert_eq!(lb.send(&flow.frame(L4::Tcp(SYN), &[])), (XDP_TX, b4(1)));
    lb.table(0, &[3; 65_537]);
    assert_eq!(lb.send(&flow.frame(L4::Tcp(RST), &[])), (XDP_TX, b4(1)));
    assert_eq!(lb.send(&flow.frame(L4::Tcp(ACK), &[])), (XDP_TX, b4(1)));
}

#[test]
fn the_reported_state_is_the_one_the_next_packet_follows() {
    // `lookup_flow`, which `lb flow` shows, takes the program's own decision
    // (lb_common::conntrack): it names the pin or held SYN that the flow's next packet
    // goes by, or nothing when the table decides.
    let mut lb = Lb::standard();
    let reported = |lb: &Lb, flow: &Flow, proto: u8| {
        lb.dp
            .lookup_flow(&flow_key(flow, proto))
            .expect("lookup")
            .map(|(table, entry)| (table, entry.backend_id))
    };

    // A pin on a backend that went down: nothing; the next packet follows the table.
    let stale = Flow::new(CLIENT4, port_landing_on(&lb, 0, 80, 2, 47_700), VIP4, 80);
    assert_eq!(establish(&mut lb, &stale), b4(2));
    lb.table(0, &round_robin(65_537, &[1, 3]));
    lb.backend(2, packets::backend4(2), BACKEND_DOWN);
    assert_eq!(reported(&lb, &stale, PROTO_TCP), None);
    let owner = lb.predict(0, &stale, PROTO_TCP);
    assert_eq!(
        lb.send(&stale.frame(L4::Tcp(ACK), &[])),
        (XDP_TX, b4(owner))
    );
    assert_eq!(
        reported(&lb, &stale, PROTO_TCP),
        Some((CtTable::Established, owner))
    );

    // After a table change, a new connection on a pinned 4-tuple: its held SYN, which
    // the handshake's ACK follows.
    let reused = Flow::new(CLIENT4, port_landing_on(&lb, 0, 80, 1, 47_800), VIP4, 80);
    assert_eq!(establish(&mut lb, &reused), b4(1));
    lb.table(0, &[3; 65_537]);
    assert_eq!(lb.send(&reused.syn_with_isn(2000)), (XDP_TX, b4(3)));
    assert_eq!(
        reported(&lb, &reused, PROTO_TCP),
        Some((CtTable::SynOnly, 3))
    );
    assert_eq!(lb.send(&reused.frame(L4::Tcp(ACK), &[])), (XDP_TX, b4(3)));
    assert_eq!(
        reported(&lb, &reused, PROTO_TCP),
        Some((CtTable::Established, 3))
    );

    // A UDP pin idle past the timeout: nothing; the next datagram follows the table.
    let mut cfg = default_config();
    cfg.udp_timeout_ns = 200_000_000;
    lb.dp.set_config(&cfg).expect("config");
    lb.table(1, &[1; 65_537]);
    let udp = Flow::new(CLIENT4, 50_100, VIP4, 53);
    assert_eq!(lb.send(&udp.frame(L4::Udp, b"q")), (XDP_TX, b4(1)));
    assert_eq!(
        reported(&lb, &udp, PROTO_UDP),
        Some((CtTable::Established, 1))
    );
    lb.table(1, &[3; 65_537]);
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(reported(&lb, &udp, PROTO_UDP), None);
    assert_eq!(lb.send(&udp.frame(L4::Udp, b"q")), (XDP_TX, b4(3)));
}

/// An established TCP flow's packets stamp its pin with the daemon's activity tick
/// while one is written, and with the clock's own tick while the map holds 0 (no daemon
/// has written it); a UDP flow's with the clock's tick, which its idle check reads
/// anyway. The live connection counts read that stamp as the flow's last packet.
#[test]
fn an_established_flows_packet_stamps_its_pin_with_the_activity_tick() {
    let mut lb = Lb::standard();
    let mut clock = lb.dp.take_activity_clock().expect("activity clock");
    for (flow, proto) in [
        (Flow::new(CLIENT4, 44500, VIP4, 80), PROTO_TCP),
        (Flow::new(CLIENT4, 44501, VIP4, 53), PROTO_UDP),
    ] {
        let l4 = |flags| {
            if proto == PROTO_TCP {
                L4::Tcp(flags)
            } else {
                L4::Udp
            }
        };
        let key = flow_key(&flow, proto);
        if proto == PROTO_TCP {
            establish(&mut lb, &flow);
        } else {
            lb.send(&flow.frame(L4::Udp, &[]));
        }
        clock.set(0x00ab_cdef).expect("tick");
        assert_eq!(lb.send(&flow.frame(l4(ACK), b"x")).0, XDP_TX);
        let (_, entry) = lb.dp.lookup_flow(&key).expect("lookup").expect("pinned");
        if proto == PROTO_TCP {
            assert_eq!(entry.seen_ticks, 0x00ab_cdef, "the daemon's tick");
            clock.set(0).expect("tick");
        }
        // UDP always reads the clock (its idle check needs it) and stamps its tick.
        let before = lb_common::types::ct_ticks(lb_dataplane::conntrack_now_ns());
        assert_eq!(lb.send(&flow.frame(l4(ACK), b"y")).0, XDP_TX);
        let (_, entry) = lb.dp.lookup_flow(&key).expect("lookup").expect("pinned");
        let after = lb_common::types::ct_ticks(lb_dataplane::conntrack_now_ns());
        assert!(
            (before..=after).contains(&entry.seen_ticks),
            "the clock's tick without one ({proto}): {} not in {before}..={after}",
            entry.seen_ticks
        );
    }
}
