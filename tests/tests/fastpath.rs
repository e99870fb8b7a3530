//! The fast path in the real maps and program: what a table change publishes beside each
//! slot's owner, the cleaning walk over the real conntrack maps (rules P1-P4 and C1-C5
//! of the book's chapter "The fast path"), and the XDP program's decisions for a VIP
//! with the fast path on, through `BPF_PROG_TEST_RUN` (rules T1, M1, M2, P4, and the
//! simulation's CE1).

use std::{
    net::{IpAddr, Ipv4Addr},
    time::Duration,
};

use lb_common::{
    fastpath::{self, Note},
    hash::vip_filter_bit,
    stats::VipStats,
    types::{BACKEND_DOWN, BACKEND_DRAINING, PROTO_TCP, PROTO_UDP, VipCacheSlot, VipEntry},
};
use lb_dataplane::{ConnState, Dataplane as _, PinMap, WalkSettings};
use lb_maglev::flow::slot_of;
use lb_tests::{
    fixture::{Lb, SEED, XDP_TX, flow_key, round_robin, vip_key},
    packets::{ACK, CLIENT4, Flow, L4, RST, SYN, TcpFlags, VIP4, backend4},
};

/// Table size of these tests: small, so a change moves few, known slots.
const M: usize = 7;
/// [`M`] as the flow hash's modulus.
const M32: u32 = 7;

/// VIP4:80/tcp (id 0) over backends 1..=3, round-robin over `M` slots.
fn small() -> Lb {
    small_in(Lb::new())
}

/// [`small`] in `lb`.
fn small_in(mut lb: Lb) -> Lb {
    lb.backends(3, false);
    lb.table(0, &round_robin(M, &[1, 2, 3]));
    lb.vip(0, VIP4, 80, PROTO_TCP);
    lb
}

fn states(lb: &Lb) -> Vec<fastpath::SlotState> {
    lb.dp.slot_states(0).expect("read").expect("a live table")
}

/// The slot of `flow` in the `M`-slot table.
fn slot(flow: &Flow) -> usize {
    usize::try_from(slot_of(&flow_key(flow, PROTO_TCP), SEED, M32).expect("slot")).expect("fits")
}

/// A flow (from source port 40000 up) whose slot is `want`.
fn flow_on(want: usize) -> Flow {
    other_flow_on(want, 40_000)
}

/// A flow (from source port `from` up) whose slot is `want`.
fn other_flow_on(want: usize, from: u16) -> Flow {
    (from..from + 1_000)
        .map(|port| Flow::new(CLIENT4, port, VIP4, 80))
        .find(|f| slot(f) == want)
        .expect("some port lands on the slot")
}

/// Cleaning times: a quiet time and a TCP idle time of `tcp_idle`.
fn times(tcp_idle: Duration) -> fastpath::Config {
    let ns = u64::try_from(tcp_idle.as_nanos()).expect("fits");
    fastpath::Config {
        quiet_ns: ns,
        tcp_idle_ns: ns,
        ..fastpath::Config::DEFAULT
    }
}

#[test]
fn a_change_publishes_dirty_slots_with_their_clean_owner_and_keeps_the_others() {
    let mut lb = small();
    let first = states(&lb);
    assert!(first.iter().all(|s| !s.is_dirty()), "a new table is clean");
    let mut next = round_robin(M, &[1, 2, 3]);
    next[2] = 1;
    lb.table(0, &next);
    let after = states(&lb);
    for (i, (old, new)) in first.iter().zip(&after).enumerate() {
        assert_eq!(new.owner(), next[i], "slot {i}'s owner");
        if i == 2 {
            assert!(new.is_dirty(), "the moved slot is dirty");
            assert_eq!(
                new.clean_owner(),
                old.owner(),
                "its clean owner is the old owner"
            );
            assert_eq!(new.epoch, old.epoch + 1);
        } else {
            assert_eq!(new, old, "slot {i} did not move: copied as it was");
        }
    }
    // A second change keeps the first clean owner and bumps the dirty slot again.
    next[2] = 2;
    lb.table(0, &next);
    let again = states(&lb);
    assert_eq!(
        (again[2].owner(), again[2].clean_owner()),
        (2, first[2].owner())
    );
    assert_eq!(again[2].epoch, after[2].epoch + 1);
    // A new size: every slot dirty, no clean owner.
    lb.table(0, &round_robin(M + 2, &[1, 2, 3]));
    let resized = lb.dp.slot_states(0).expect("read").expect("table");
    assert!(resized.iter().all(|s| s.is_dirty() && s.clean_owner() == 0));
}

#[test]
fn the_walk_cleans_slots_without_live_foreign_pins_and_then_deletes_the_dead_ones() {
    walk_cleans(true);
}

#[test]
fn on_todays_path_the_walk_cleans_slots_but_keeps_the_pins() {
    walk_cleans(false);
}

/// A pin naming another backend than its slot's owner holds the slot dirty while it is
/// live (C1); once silent past the idle time the slot cleans, and the pin is deleted
/// (C5) when the VIP takes the fast path. On today's path (`fast_path` false) the pin
/// stays: its flow follows it however long it was idle, as before the fast path.
fn walk_cleans(fast_path: bool) {
    let mut lb = small();
    if fast_path {
        let key = vip_key(VIP4.into(), 80, PROTO_TCP);
        lb.dp.set_fast_path(&key, 0, true).expect("fast path on");
    }
    let cleaner = lb.dp.take_cleaner().expect("a cleaner");
    // A flow on slot 2 (owner 3 in the round-robin table). Slots 1 and 2 move to
    // backend 1: both dirty. The flow's pin names the old owner: made by a mid-flow ACK
    // before the change on today's path, by the miss rule (the clean owner) after it on
    // the fast path, where a clean slot pins nothing.
    let flow = flow_on(2);
    let mut next = round_robin(M, &[1, 2, 3]);
    next[1] = 1;
    next[2] = 1;
    if !fast_path {
        assert_eq!(lb.run(&flow.frame(L4::Tcp(ACK), b"x")).action, XDP_TX);
    }
    lb.table(0, &next);
    if fast_path {
        assert_eq!(lb.run(&flow.frame(L4::Tcp(ACK), b"x")).action, XDP_TX);
    }
    assert_eq!(lb.dp.conntrack_len().expect("len").0, 1, "the flow's pin");
    // Within the quiet time nothing is cleaned.
    let walk = cleaner
        .clean(&times(Duration::from_secs(3_600)))
        .expect("walk");
    assert_eq!(
        (walk.cleaned, walk.vips[&0].dirty, walk.vips[&0].recent),
        (0, 2, 2)
    );
    // Past a quiet (and TCP idle) time of 2 s, slot 1 has no pin and turns clean; the
    // flow's pin, refreshed by a packet just now, holds slot 2 dirty (C1).
    std::thread::sleep(Duration::from_millis(3_300));
    assert_eq!(lb.run(&flow.frame(L4::Tcp(ACK), b"y")).action, XDP_TX);
    let two_secs = times(Duration::from_secs(2));
    let walk = cleaner.clean(&two_secs).expect("walk");
    assert_eq!((walk.cleaned, walk.vips[&0].foreign), (1, 1), "{walk:?}");
    assert_eq!(walk.vips[&0].dirty, 1, "{walk:?}");
    // The pin names another backend than its slot's owner, and is live; counted by
    // kind on the fast path only.
    let pins = walk.vips[&0].pins;
    let kinds = (pins.owner, pins.other, pins.other_live);
    let want = if fast_path { (0, 1, 1) } else { (0, 0, 0) };
    assert_eq!(kinds, want, "{walk:?}");
    let s = states(&lb);
    assert!(!s[1].is_dirty() && s[2].is_dirty());
    assert_eq!(
        s[1].clean_owner(),
        1,
        "a clean slot's clean owner is its owner"
    );
    assert_eq!(
        lb.dp.conntrack_len().expect("len").0,
        1,
        "the live pin stays"
    );
    // Silent longer than the idle time, the pin no longer holds the slot: it cleans.
    std::thread::sleep(Duration::from_millis(2_500));
    let walk = cleaner.clean(&two_secs).expect("walk");
    let deleted = u64::from(fast_path);
    assert_eq!((walk.cleaned, walk.pins_deleted), (1, deleted), "{walk:?}");
    let idle = u64::from(fast_path);
    assert_eq!(
        (walk.vips[&0].pins.other, walk.vips[&0].pins.other_live),
        (idle, 0),
        "idle: {walk:?}"
    );
    assert!(states(&lb).iter().all(|s| !s.is_dirty()));
    assert_eq!(
        lb.dp.conntrack_len().expect("len").0 as u64,
        1 - deleted,
        "the pin is deleted on the fast path only"
    );
}

#[test]
fn a_change_after_the_read_makes_the_commit_fail_and_a_later_walk_cleans() {
    let mut lb = small();
    let mut next = round_robin(M, &[1, 2, 3]);
    next[4] = 1;
    lb.table(0, &next);
    let read = states(&lb)[4];
    assert!(read.is_dirty());
    // Another change republishes the dirty slot with its epoch bumped (P4): a commit
    // against the state read before it fails (C4), and the slot stays dirty.
    lb.table(0, &next);
    let now = states(&lb)[4];
    assert_eq!(now.epoch, read.epoch + 1);
    assert_eq!(fastpath::clean_commit(&now, read.epoch), None);
    let cleaner = lb.dp.take_cleaner().expect("a cleaner");
    std::thread::sleep(Duration::from_millis(2_300));
    let walk = cleaner.clean(&times(Duration::ZERO)).expect("walk");
    assert_eq!(walk.cleaned, 1, "a walk that read the new state commits");
}

// ---- stage 3: the data path decides by the slot state ----

/// [`small`] with the fast path on for VIP4:80/tcp.
fn fast() -> Lb {
    let mut lb = small();
    let key = vip_key(VIP4.into(), 80, PROTO_TCP);
    lb.dp.set_fast_path(&key, 0, true).expect("fast path on");
    lb
}

/// Sends `frame`; the backend id (1..=3) it went to.
fn sent_to(lb: &mut Lb, frame: &[u8]) -> u32 {
    let (action, dst) = lb.send(frame);
    assert_eq!(action, XDP_TX, "forwarded");
    let dst = dst.expect("an outer destination");
    (1..=3u8)
        .find(|k| IpAddr::from(backend4(*k)) == dst)
        .map(u32::from)
        .expect("one of the backends")
}

/// Pins in conntrack and in the exceptions map.
fn pins(lb: &Lb) -> usize {
    lru_pins(lb) + exceptions(lb)
}

/// Pins in the conntrack (LRU) maps.
fn lru_pins(lb: &Lb) -> usize {
    lb.dp.conntrack_len().expect("len").0
}

/// Pins in the exceptions map (`EXCEPTIONS`).
fn exceptions(lb: &Lb) -> usize {
    lb.dp.exceptions_len().expect("len")
}

/// The give-up counters that moved from `before` to `after`, by name.
fn give_ups(after: &VipStats, before: &VipStats) -> Vec<(&'static str, u64)> {
    after
        .give_ups()
        .zip(before.give_ups())
        .filter(|((_, a), (_, b))| a != b)
        .map(|((note, a), (_, b))| (note.counter(), a - b))
        .collect()
}

#[test]
fn on_a_clean_slot_a_mid_flow_packet_goes_to_the_owner_with_no_pin() {
    let mut lb = fast();
    let flow = flow_on(2);
    let owner = states(&lb)[2].owner();
    let before = lb.dp.vip_stats(0).expect("stats");
    assert_eq!(sent_to(&mut lb, &flow.frame(L4::Tcp(ACK), b"x")), owner);
    assert_eq!(pins(&lb), 0, "the table decided: no conntrack entry");
    let after = lb.dp.vip_stats(0).expect("stats");
    assert_eq!(after.clean_slot_hits, before.clean_slot_hits + 1);
    assert_eq!(
        after.ct_misses_non_syn, before.ct_misses_non_syn,
        "no lookup missed"
    );
    // Today's path (the fast path off) pins the same packet.
    let key = vip_key(VIP4.into(), 80, PROTO_TCP);
    lb.dp.set_fast_path(&key, 0, false).expect("off");
    assert_eq!(sent_to(&mut lb, &flow.frame(L4::Tcp(ACK), b"x")), owner);
    assert_eq!(pins(&lb), 1);
}

#[test]
fn on_a_dirty_slot_an_unpinned_flow_keeps_its_clean_owner_and_is_pinned() {
    let mut lb = fast();
    let old_flow = flow_on(2);
    let clean_owner = states(&lb)[2].owner();
    assert_eq!(
        sent_to(&mut lb, &old_flow.frame(L4::Tcp(ACK), b"x")),
        clean_owner
    );
    assert_eq!(pins(&lb), 0);
    // Slot 2 moves to another backend: the old flow, which has no pin, stays (M1) and
    // is pinned; the pin names another backend than the owner, so the epoch moves (P4).
    let mut next = round_robin(M, &[1, 2, 3]);
    let new_owner = if clean_owner == 1 { 2 } else { 1 };
    next[2] = new_owner;
    lb.table(0, &next);
    let epoch = states(&lb)[2].epoch;
    assert_eq!(
        sent_to(&mut lb, &old_flow.frame(L4::Tcp(ACK), b"y")),
        clean_owner
    );
    assert_eq!(pins(&lb), 1, "pinned to its clean owner");
    assert_eq!(
        states(&lb)[2].epoch,
        epoch + 1,
        "a foreign pin bumps the epoch"
    );
    // Its next packets follow the pin.
    assert_eq!(
        sent_to(&mut lb, &old_flow.frame(L4::Tcp(ACK), b"z")),
        clean_owner
    );
    // A new connection on the slot, within the lead of the change, goes to the clean
    // owner (P2): SYN held, ACK promoted.
    let new_flow = other_flow_on(2, 41_000);
    assert_eq!(
        sent_to(&mut lb, &new_flow.frame(L4::Tcp(SYN), &[])),
        clean_owner
    );
    assert_eq!(
        sent_to(&mut lb, &new_flow.frame(L4::Tcp(ACK), b"a")),
        clean_owner
    );
    assert_eq!(
        sent_to(&mut lb, &new_flow.frame(L4::Tcp(ACK), b"b")),
        clean_owner
    );
    // Other slots stayed clean: no pin there.
    let elsewhere = flow_on(4);
    let before = pins(&lb);
    sent_to(&mut lb, &elsewhere.frame(L4::Tcp(ACK), b"x"));
    assert_eq!(pins(&lb), before);
}

#[test]
fn a_handshake_on_a_clean_slot_writes_nothing_and_after_the_lead_the_owner_takes_syns() {
    let mut lb = fast();
    let owner = states(&lb)[2].owner();
    let flow = other_flow_on(2, 41_000);
    let before = lb.dp.vip_stats(0).expect("stats");
    assert_eq!(sent_to(&mut lb, &flow.frame(L4::Tcp(SYN), &[])), owner);
    assert_eq!(sent_to(&mut lb, &flow.frame(L4::Tcp(ACK), b"a")), owner);
    let after = lb.dp.vip_stats(0).expect("stats");
    assert_eq!(pins(&lb), 0, "no pin for a handshake on a clean slot");
    assert_eq!(after.clean_slot_hits, before.clean_slot_hits + 2);
    assert_eq!(
        after.new_flows,
        before.new_flows + 1,
        "the SYN is a new flow"
    );
    // The slot moves; past the lead (4 s, rounded up to a tick) a new connection goes
    // to the new owner.
    let new_owner = if owner == 1 { 2 } else { 1 };
    let mut next = round_robin(M, &[1, 2, 3]);
    next[2] = new_owner;
    lb.table(0, &next);
    std::thread::sleep(Duration::from_millis(5_500));
    let late = other_flow_on(2, 43_000);
    let before = lb.dp.vip_stats(0).expect("stats");
    assert_eq!(sent_to(&mut lb, &late.frame(L4::Tcp(SYN), &[])), new_owner);
    // Residual R1: the owner switched less than 180 s ago from a clean owner that
    // keeps flows, so this SYN may repeat one the clean owner got; it is counted.
    let after = lb.dp.vip_stats(0).expect("stats");
    assert_eq!(
        give_ups(&after, &before),
        [(Note::SynMaybeSplit.counter(), 1)]
    );
    assert_eq!(sent_to(&mut lb, &late.frame(L4::Tcp(ACK), b"a")), new_owner);
    // The first connection, silent meanwhile, still reaches its backend (M1).
    assert_eq!(sent_to(&mut lb, &flow.frame(L4::Tcp(ACK), b"b")), owner);
}

#[test]
fn after_the_lead_a_syn_to_the_owner_is_pinned_so_another_syn_cannot_split_its_handshake() {
    // One SYN cache slot, so every held SYN overwrites the last (rule S4 as the data
    // path applies it: the cache is shared with VIPs on today's path).
    let mut lb = small_in(Lb::with_ct(4_096, 1));
    let key = vip_key(VIP4.into(), 80, PROTO_TCP);
    lb.dp.set_fast_path(&key, 0, true).expect("fast path on");
    lb.table(1, &round_robin(M, &[1, 2, 3]));
    lb.vip(1, VIP4, 81, PROTO_TCP);
    let clean_owner = states(&lb)[2].owner();
    let owner = if clean_owner == 1 { 2 } else { 1 };
    let mut next = round_robin(M, &[1, 2, 3]);
    next[2] = owner;
    lb.table(0, &next);
    std::thread::sleep(Duration::from_millis(5_500));
    let flow = other_flow_on(2, 43_000);
    let before = pins(&lb);
    assert_eq!(sent_to(&mut lb, &flow.frame(L4::Tcp(SYN), &[])), owner);
    assert_eq!(pins(&lb), before + 1, "pinned at the SYN");
    // A SYN of the VIP on today's path takes the only SYN cache slot.
    let other = Flow::new(CLIENT4, 50_000, VIP4, 81);
    sent_to(&mut lb, &other.frame(L4::Tcp(SYN), &[]));
    assert_eq!(
        sent_to(&mut lb, &flow.frame(L4::Tcp(ACK), b"a")),
        owner,
        "the ACK follows the pin, not the miss rule's clean owner"
    );
    // The slot moves again: within the lead a SYN goes to the clean owner, where a
    // miss goes too, and is held.
    next[2] = 6 - owner - clean_owner;
    lb.table(0, &next);
    let early = other_flow_on(2, 45_000);
    let before = pins(&lb);
    assert_eq!(
        sent_to(&mut lb, &early.frame(L4::Tcp(SYN), &[])),
        clean_owner
    );
    assert_eq!(pins(&lb), before, "held, not pinned");
}

#[test]
fn a_syn_retransmitted_across_a_change_follows_its_first() {
    // The simulation's CE1: the first SYN on a clean slot goes to the owner with no
    // write, the slot moves, and within the lead (P2) the retransmitted SYN goes to the
    // clean owner and is held: it and the handshake's ACK reach the first SYN's backend.
    let mut lb = fast();
    let flow = flow_on(3);
    let syn = flow.frame(L4::Tcp(SYN), &[]);
    let first = sent_to(&mut lb, &syn);
    let mut next = round_robin(M, &[1, 2, 3]);
    next[3] = if first == 1 { 2 } else { 1 };
    lb.table(0, &next);
    assert_eq!(sent_to(&mut lb, &syn), first, "the retransmission");
    assert_eq!(
        sent_to(&mut lb, &flow.frame(L4::Tcp(ACK), b"x")),
        first,
        "the ACK"
    );
    assert_eq!(sent_to(&mut lb, &flow.frame(L4::Tcp(ACK), b"y")), first);
}

#[test]
fn a_drained_clean_owner_keeps_its_flows_and_a_removed_one_hands_them_to_the_owner() {
    let mut lb = fast();
    let flow = flow_on(5);
    let clean_owner = states(&lb)[5].owner();
    assert_eq!(
        sent_to(&mut lb, &flow.frame(L4::Tcp(ACK), b"x")),
        clean_owner
    );
    // Drain: its slots move (the controller's order), the backend keeps its flows.
    let others: Vec<u32> = [1, 2, 3]
        .into_iter()
        .filter(|b| *b != clean_owner)
        .collect();
    lb.table(0, &round_robin(M, &others));
    lb.backend(
        clean_owner,
        backend4(u8::try_from(clean_owner).expect("small")),
        BACKEND_DRAINING,
    );
    assert_eq!(
        sent_to(&mut lb, &flow.frame(L4::Tcp(ACK), b"y")),
        clean_owner
    );
    // Down: its pin tells nothing (D2) and the clean owner keeps no flows (M2): the
    // owner takes the flow.
    lb.backend(
        clean_owner,
        backend4(u8::try_from(clean_owner).expect("small")),
        BACKEND_DOWN,
    );
    let owner = states(&lb)[5].owner();
    assert_eq!(sent_to(&mut lb, &flow.frame(L4::Tcp(ACK), b"z")), owner);
}

#[test]
fn a_drained_clean_owner_in_the_lead_counts_the_new_flows_it_gets() {
    // Residual R3: within the lead a new connection goes to a draining clean owner,
    // and within the UDP idle timeout of the change a UDP miss does (it may be a new
    // flow); each is counted once, a pinned datagram after it is not.
    let mut lb = fast();
    lb.table(1, &round_robin(M, &[1, 2, 3]));
    lb.vip(1, VIP4, 53, PROTO_UDP);
    let udp_key = vip_key(VIP4.into(), 53, PROTO_UDP);
    lb.dp
        .set_fast_path(&udp_key, 1, true)
        .expect("fast path on");
    let flow = flow_on(2);
    let clean_owner = states(&lb)[2].owner();
    let udp_flow = (40_000..41_000)
        .map(|port| Flow::new(CLIENT4, port, VIP4, 53))
        .find(|f| {
            slot_of(&flow_key(f, PROTO_UDP), SEED, M32).expect("slot") as usize
                == states_of(&lb, 1)
                    .iter()
                    .position(|s| s.owner() == clean_owner)
                    .expect("owned")
        })
        .expect("a UDP flow on a slot of the clean owner");
    assert_eq!(
        sent_to(&mut lb, &udp_flow.frame(L4::Udp, b"q")),
        clean_owner
    );
    // Drain: its slots move (the controller's order), the backend keeps its flows.
    let others: Vec<u32> = [1, 2, 3]
        .into_iter()
        .filter(|b| *b != clean_owner)
        .collect();
    lb.table(0, &round_robin(M, &others));
    lb.table(1, &round_robin(M, &others));
    let address = backend4(u8::try_from(clean_owner).expect("small"));
    lb.backend(clean_owner, address, BACKEND_DRAINING);
    let (tcp_before, udp_before) = (
        lb.dp.vip_stats(0).expect("stats"),
        lb.dp.vip_stats(1).expect("stats"),
    );
    assert_eq!(
        sent_to(&mut lb, &flow.frame(L4::Tcp(SYN), &[])),
        clean_owner
    );
    for payload in [b"r", b"s"] {
        assert_eq!(
            sent_to(&mut lb, &udp_flow.frame(L4::Udp, payload)),
            clean_owner
        );
    }
    let (tcp_after, udp_after) = (
        lb.dp.vip_stats(0).expect("stats"),
        lb.dp.vip_stats(1).expect("stats"),
    );
    assert_eq!(
        give_ups(&tcp_after, &tcp_before),
        [(Note::SynToDraining.counter(), 1)]
    );
    assert_eq!(
        give_ups(&udp_after, &udp_before),
        [(Note::UdpToDraining.counter(), 1)]
    );
}

/// The slot states of VIP `vip`'s live table.
fn states_of(lb: &Lb, vip: u32) -> Vec<fastpath::SlotState> {
    lb.dp.slot_states(vip).expect("read").expect("a live table")
}

#[test]
fn a_syn_over_a_pin_made_by_a_miss_is_counted() {
    // Residual R1: a miss's pin has no ISN, so a SYN on its 4-tuple cannot tell a
    // duplicate of that connection's SYN from a new connection; it is counted once.
    let mut lb = fast();
    let flow = flow_on(2);
    let clean_owner = states(&lb)[2].owner();
    let mut next = round_robin(M, &[1, 2, 3]);
    next[2] = if clean_owner == 1 { 2 } else { 1 };
    lb.table(0, &next);
    assert_eq!(
        sent_to(&mut lb, &flow.frame(L4::Tcp(ACK), b"x")),
        clean_owner
    );
    assert_eq!(pins(&lb), 1, "the miss is pinned");
    let before = lb.dp.vip_stats(0).expect("stats");
    assert_eq!(
        sent_to(&mut lb, &flow.frame(L4::Tcp(SYN), &[])),
        clean_owner,
        "within the lead"
    );
    let after = lb.dp.vip_stats(0).expect("stats");
    assert_eq!(give_ups(&after, &before), [(Note::SynOverPin.counter(), 1)]);
}

/// Slot 2 of VIP4:80/tcp moved away from its clean owner: (clean owner, owner).
fn move_slot_2(lb: &mut Lb) -> (u32, u32) {
    let clean_owner = states(lb)[2].owner();
    let owner = if clean_owner == 1 { 2 } else { 1 };
    let mut next = round_robin(M, &[1, 2, 3]);
    next[2] = owner;
    lb.table(0, &next);
    (clean_owner, owner)
}

#[test]
fn rule_m3_a_pin_naming_the_clean_owner_goes_to_conntrack_every_other_to_exceptions() {
    let mut lb = fast();
    lb.table(1, &round_robin(M, &[1, 2, 3]));
    lb.vip(1, VIP4, 53, PROTO_UDP);
    let udp_key = vip_key(VIP4.into(), 53, PROTO_UDP);
    lb.dp
        .set_fast_path(&udp_key, 1, true)
        .expect("fast path on");
    let old = flow_on(2);
    let udp = (40_000..41_000)
        .map(|port| Flow::new(CLIENT4, port, VIP4, 53))
        .find(|f| slot_of(&flow_key(f, PROTO_UDP), SEED, M32).expect("slot") == 2)
        .expect("a UDP flow on slot 2");
    let (clean_owner, owner) = move_slot_2(&mut lb);
    let mut next = round_robin(M, &[1, 2, 3]);
    next[2] = owner;
    lb.table(1, &next);
    // A TCP miss takes the clean owner (M1), which the miss rule gives again: conntrack.
    assert_eq!(
        sent_to(&mut lb, &old.frame(L4::Tcp(ACK), b"x")),
        clean_owner
    );
    assert_eq!((lru_pins(&lb), exceptions(&lb)), (1, 0));
    // A UDP miss takes the clean owner too, but the UDP miss rule changes with time:
    // an exception.
    assert_eq!(sent_to(&mut lb, &udp.frame(L4::Udp, b"q")), clean_owner);
    assert_eq!((lru_pins(&lb), exceptions(&lb)), (1, 1));
    let udp_pin = lb.dp.exception(&flow_key(&udp, PROTO_UDP)).expect("read");
    assert_eq!(udp_pin.map(|e| e.backend_id), Some(clean_owner));
    // Past the lead a new connection's SYN goes to the owner and is pinned at once (S4):
    // an exception, written unseen; its handshake's ACK marks it seen.
    std::thread::sleep(Duration::from_millis(5_500));
    let new = other_flow_on(2, 43_000);
    assert_eq!(sent_to(&mut lb, &new.frame(L4::Tcp(SYN), &[])), owner);
    assert_eq!((lru_pins(&lb), exceptions(&lb)), (1, 2));
    let key = flow_key(&new, PROTO_TCP);
    let pin = lb.dp.exception(&key).expect("read").expect("an exception");
    assert_eq!(
        (pin.backend_id, pin.seen_ticks),
        (owner, fastpath::UNSEEN_TICKS)
    );
    // A retransmitted SYN follows it and does not mark it seen.
    assert_eq!(sent_to(&mut lb, &new.frame(L4::Tcp(SYN), &[])), owner);
    let pin = lb.dp.exception(&key).expect("read").expect("an exception");
    assert_eq!(pin.seen_ticks, fastpath::UNSEEN_TICKS);
    assert_eq!(sent_to(&mut lb, &new.frame(L4::Tcp(ACK), b"a")), owner);
    let pin = lb.dp.exception(&key).expect("read").expect("an exception");
    assert_ne!(pin.seen_ticks, fastpath::UNSEEN_TICKS, "seen by the ACK");
    // Both keep deciding.
    assert_eq!(sent_to(&mut lb, &new.frame(L4::Tcp(ACK), b"b")), owner);
    assert_eq!(
        sent_to(&mut lb, &old.frame(L4::Tcp(ACK), b"y")),
        clean_owner
    );
    assert_eq!(sent_to(&mut lb, &udp.frame(L4::Udp, b"r")), clean_owner);
    assert_eq!((lru_pins(&lb), exceptions(&lb)), (1, 2));
}

/// [`fast`] with an exceptions map of one entry.
fn fast_with_one_exception() -> Lb {
    let mut lb = small_in(Lb::with_load(lb_dataplane::LoadOptions {
        ct_capacity: 16_384,
        ct_syn_capacity: 4_096,
        exceptions_capacity: 1,
        ..lb_dataplane::LoadOptions::default()
    }));
    let key = vip_key(VIP4.into(), 80, PROTO_TCP);
    lb.dp.set_fast_path(&key, 0, true).expect("fast path on");
    lb
}

#[test]
fn residual_r2_a_full_exceptions_map_drops_the_syn_keeps_the_held_syn_and_forwards_unpinned() {
    let mut lb = fast_with_one_exception();
    let (old, held) = (flow_on(2), other_flow_on(2, 45_000));
    let (clean_owner, owner) = move_slot_2(&mut lb);
    std::thread::sleep(Duration::from_millis(5_500));
    // The first SYN past the lead is pinned at the SYN (S4) and fills the map.
    let first = other_flow_on(2, 43_000);
    assert_eq!(sent_to(&mut lb, &first.frame(L4::Tcp(SYN), &[])), owner);
    assert_eq!(exceptions(&lb), 1);
    // fp_syn_dropped: the next SYN cannot be pinned; it is dropped (its client
    // retransmits).
    let second = other_flow_on(2, first.sport + 1);
    let before = lb.dp.vip_stats(0).expect("stats");
    let (action, _) = lb.send(&second.frame(L4::Tcp(SYN), &[]));
    assert_eq!(action, lb_tests::fixture::XDP_DROP);
    let after = lb.dp.vip_stats(0).expect("stats");
    // It is a new SYN on a slot switched less than 180 s ago, so R1's count too.
    assert_eq!(
        give_ups(&after, &before),
        [
            (Note::SynMaybeSplit.counter(), 1),
            (Note::SynDropped.counter(), 1)
        ]
    );
    // fp_held_kept: the slot moves again, to a third backend; within the new lead a
    // SYN goes to the clean owner and is held, and its ACK's pin (made from a SYN: an
    // exception, rule M3) finds the map full. The held SYN keeps deciding.
    let third = 6 - clean_owner - owner;
    let mut next = round_robin(M, &[1, 2, 3]);
    next[2] = third;
    lb.table(0, &next);
    assert_eq!(
        sent_to(&mut lb, &held.frame(L4::Tcp(SYN), &[])),
        clean_owner
    );
    assert_eq!(lb.dp.conntrack_len().expect("len").1, 1, "held");
    let before = lb.dp.vip_stats(0).expect("stats");
    assert_eq!(
        sent_to(&mut lb, &held.frame(L4::Tcp(ACK), b"a")),
        clean_owner
    );
    assert_eq!(
        sent_to(&mut lb, &held.frame(L4::Tcp(ACK), b"b")),
        clean_owner
    );
    let after = lb.dp.vip_stats(0).expect("stats");
    assert_eq!(give_ups(&after, &before), [(Note::HeldKept.counter(), 2)]);
    assert_eq!((pins(&lb), lb.dp.conntrack_len().expect("len").1), (1, 1));
    // fp_unpinned: the clean owner goes down, so a miss takes the owner (M2), an
    // exception; it is forwarded there without a pin.
    let address = backend4(u8::try_from(clean_owner).expect("small"));
    lb.backend(clean_owner, address, BACKEND_DOWN);
    let before = lb.dp.vip_stats(0).expect("stats");
    assert_eq!(sent_to(&mut lb, &old.frame(L4::Tcp(ACK), b"x")), third);
    let after = lb.dp.vip_stats(0).expect("stats");
    assert_eq!(give_ups(&after, &before), [(Note::Unpinned.counter(), 1)]);
    assert_eq!(pins(&lb), 1, "no pin made");
}

/// What `lb conn list` lists: each connection's map and state, sorted by state name.
fn listed(lb: &Lb) -> Vec<(PinMap, ConnState)> {
    let settings = WalkSettings {
        udp_timeout: Duration::from_secs(30),
        idle: Duration::from_secs(60),
        syn_window: WalkSettings::SYN_WINDOW,
    };
    let listing = lb
        .dp
        .conntrack_lister()
        .expect("lister")
        .list(&settings, true, |_| true, 10)
        .expect("listing");
    let mut rows: Vec<_> = listing.rows.iter().map(|r| (r.pin, r.state)).collect();
    rows.sort_by_key(|(_, state)| state.name());
    rows
}

#[test]
fn the_walk_deletes_a_closed_connections_exception_one_linger_after_its_last_packet() {
    let mut lb = fast();
    let cleaner = lb.dp.take_cleaner().expect("a cleaner");
    let (_, owner) = move_slot_2(&mut lb);
    std::thread::sleep(Duration::from_millis(5_500));
    // Past the lead three connections open to the owner, each pinned at its SYN (S4):
    // exceptions. One stays open; its client closes one with a FIN, one with a RST.
    let (open, fin, rst) = (
        other_flow_on(2, 43_000),
        other_flow_on(2, 45_000),
        other_flow_on(2, 47_000),
    );
    const FIN_ACK: TcpFlags = TcpFlags { fin: true, ..ACK };
    for flow in [open, fin, rst] {
        assert_eq!(sent_to(&mut lb, &flow.frame(L4::Tcp(SYN), &[])), owner);
        assert_eq!(sent_to(&mut lb, &flow.frame(L4::Tcp(ACK), b"a")), owner);
    }
    assert_eq!(sent_to(&mut lb, &fin.frame(L4::Tcp(FIN_ACK), &[])), owner);
    assert_eq!(sent_to(&mut lb, &rst.frame(L4::Tcp(RST), &[])), owner);
    assert_eq!(exceptions(&lb), 3);
    // `lb conn list` reads them from the exceptions map.
    assert_eq!(
        listed(&lb),
        [
            (PinMap::Exception, ConnState::Closing),
            (PinMap::Exception, ConnState::Closing),
            (PinMap::Exception, ConnState::Established),
        ]
    );
    // Within the linger (the default, two minutes) the walk keeps all three; the quiet
    // time (an hour) keeps the slot dirty.
    let hour = times(Duration::from_secs(3_600));
    let walk = cleaner.clean(&hour).expect("walk");
    assert_eq!(
        (walk.cleaned, walk.closed_exceptions_expired),
        (0, 0),
        "{walk:?}"
    );
    assert_eq!(exceptions(&lb), 3);
    // Past a linger of 1 s (C7) the closed connections' exceptions go; the open one
    // stays and keeps deciding.
    std::thread::sleep(Duration::from_millis(2_500));
    let short_linger = fastpath::Config {
        closed_linger_ns: 1_000_000_000,
        ..hour
    };
    let walk = cleaner.clean(&short_linger).expect("walk");
    assert_eq!(
        (walk.cleaned, walk.closed_exceptions_expired),
        (0, 2),
        "{walk:?}"
    );
    assert_eq!(exceptions(&lb), 1);
    assert!(
        lb.dp
            .exception(&flow_key(&open, PROTO_TCP))
            .expect("read")
            .is_some(),
        "the open connection's"
    );
    assert_eq!(sent_to(&mut lb, &open.frame(L4::Tcp(ACK), b"b")), owner);
}

#[test]
fn the_walk_expires_unanswered_syns_exceptions_and_deletes_every_exception_of_a_cleaned_slot() {
    let mut lb = fast();
    let cleaner = lb.dp.take_cleaner().expect("a cleaner");
    let (_, owner) = move_slot_2(&mut lb);
    std::thread::sleep(Duration::from_millis(5_500));
    // Past the lead two SYNs go to the owner, each pinned at the SYN (S4): exceptions
    // naming the owner. One handshake completes; the other never does.
    let (answered, unanswered) = (other_flow_on(2, 43_000), other_flow_on(2, 45_000));
    assert_eq!(sent_to(&mut lb, &answered.frame(L4::Tcp(SYN), &[])), owner);
    assert_eq!(
        sent_to(&mut lb, &unanswered.frame(L4::Tcp(SYN), &[])),
        owner
    );
    assert_eq!(sent_to(&mut lb, &answered.frame(L4::Tcp(ACK), b"a")), owner);
    assert_eq!(exceptions(&lb), 2);
    // The unanswered one is a handshake, not an idle established connection.
    assert_eq!(
        listed(&lb),
        [
            (PinMap::Exception, ConnState::Established),
            (PinMap::Exception, ConnState::Syn),
        ]
    );
    // Past a SYN hold of 1 s (the quiet time not over), the walk deletes the unanswered
    // SYN's exception (S4's expiry, C6) and keeps the answered one.
    std::thread::sleep(Duration::from_millis(1_500));
    let hour = Duration::from_secs(3_600);
    let short_hold = fastpath::Config {
        syn_hold_ns: 1_000_000_000,
        ..times(hour)
    };
    let walk = cleaner.clean(&short_hold).expect("walk");
    assert_eq!((walk.cleaned, walk.syn_pins_expired), (0, 1), "{walk:?}");
    assert_eq!(exceptions(&lb), 1);
    let key = flow_key(&answered, PROTO_TCP);
    assert!(lb.dp.exception(&key).expect("read").is_some(), "answered");
    // Past a quiet time of 2 s the slot cleans: the answered connection's exception
    // names the owner, so it holds nothing (C1), and the walk deletes it with every
    // other exception of the slot (C5). Its packets then take the table (T1).
    let walk = cleaner.clean(&times(Duration::from_secs(2))).expect("walk");
    assert!(walk.cleaned >= 1 && walk.pins_deleted == 1, "{walk:?}");
    assert!(!states(&lb)[2].is_dirty());
    assert_eq!(exceptions(&lb), 0);
    assert_eq!(sent_to(&mut lb, &answered.frame(L4::Tcp(ACK), b"b")), owner);
    assert_eq!(pins(&lb), 0);
}

// ---- tables of the default size: `TABLES_STD` ----

/// Where VIP `vip_id`'s buffers A and B are: (in `TABLES`, in `TABLES_STD`) each.
fn places(lb: &Lb, vip_id: u32) -> [(bool, bool); 2] {
    lb.dp.table_places(vip_id).expect("outer maps")
}

/// Whether `key`'s `VIPS` entry names a buffer in `TABLES_STD`.
fn entry_is_std(lb: &Lb, key: &lb_common::types::VipKey) -> bool {
    let entry = lb.dp.vip_entry(key).expect("VIPS").expect("an entry");
    entry.flags & lb_common::types::VIP_TABLE_STD != 0
}

/// Sends a new TCP flow's SYN (source port `sport`) to VIP4:80; the backend it went to.
fn syn_to(lb: &mut Lb, sport: u16) -> u32 {
    sent_to(
        lb,
        &Flow::new(CLIENT4, sport, VIP4, 80).frame(L4::Tcp(SYN), &[]),
    )
}

/// Sends a UDP datagram of a new flow (source port `sport`) to VIP4:53; the backend it
/// went to.
fn udp_to(lb: &mut Lb, sport: u16) -> u32 {
    sent_to(
        lb,
        &Flow::new(CLIENT4, sport, VIP4, 53).frame(L4::Udp, b"q"),
    )
}

/// A VIP whose table has the default size (65,537 slots) is read from `TABLES_STD`, one
/// of another size from `TABLES`, on today's path and the fast path's clean-slot hit; a
/// VIP whose table changes size forwards by its new table, and the outer map its buffer
/// left no longer holds it.
#[test]
fn default_size_tables_are_read_from_tables_std_and_follow_a_size_change() {
    const STD: usize = lb_common::maps::STD_TABLE_SIZE as usize;
    let mut lb = Lb::new();
    lb.backends(3, false);
    lb.table(0, &vec![1; STD]);
    lb.table(1, &[2; M]);
    let tcp = lb.vip(0, VIP4, 80, PROTO_TCP);
    let udp = lb.vip(1, VIP4, 53, PROTO_UDP);
    assert!(entry_is_std(&lb, &tcp) && !entry_is_std(&lb, &udp));
    assert_eq!(places(&lb, 0), [(false, true), (false, false)]);
    assert_eq!(places(&lb, 1), [(true, false), (false, false)]);
    assert_eq!(syn_to(&mut lb, 41_000), 1);
    assert_eq!(udp_to(&mut lb, 41_001), 2);
    // The fast path's clean-slot hit reads the same cell: no pin.
    lb.dp.set_fast_path(&tcp, 0, true).expect("fast path on");
    let pinned = pins(&lb);
    let ack = Flow::new(CLIENT4, 41_002, VIP4, 80).frame(L4::Tcp(ACK), &[]);
    assert_eq!(sent_to(&mut lb, &ack), 1);
    assert_eq!(pins(&lb), pinned, "a clean slot decides alone");
    lb.dp.set_fast_path(&tcp, 0, false).expect("fast path off");

    // To another size: buffer B in TABLES; A (idle) stays in TABLES_STD.
    lb.table(0, &[3; M]);
    assert!(!entry_is_std(&lb, &tcp));
    assert_eq!(places(&lb, 0), [(false, true), (true, false)]);
    assert_eq!(syn_to(&mut lb, 41_010), 3);
    // A rewritten at that size moves: its TABLES_STD entry is gone.
    lb.table(0, &[2; M]);
    assert_eq!(places(&lb, 0), [(true, false), (true, false)]);
    assert_eq!(syn_to(&mut lb, 41_011), 2);
    // Back to the default size: B moves into TABLES_STD.
    lb.table(0, &vec![3; STD]);
    assert!(entry_is_std(&lb, &tcp));
    assert_eq!(places(&lb, 0), [(true, false), (false, true)]);
    assert_eq!(syn_to(&mut lb, 41_012), 3);

    // The UDP VIP to the default size, twice (both buffers in TABLES_STD at last).
    lb.table(1, &vec![3; STD]);
    assert!(entry_is_std(&lb, &udp));
    assert_eq!(places(&lb, 1), [(true, false), (false, true)]);
    assert_eq!(udp_to(&mut lb, 41_020), 3);
    lb.table(1, &vec![1; STD]);
    assert_eq!(places(&lb, 1), [(false, true), (false, true)]);
    assert_eq!(udp_to(&mut lb, 41_021), 1);
}

#[test]
fn a_fast_path_vip_is_read_from_its_cache_slot_only_as_vip_info_confirms_it() {
    let mut lb = fast();
    let key = vip_key(VIP4.into(), 80, PROTO_TCP);
    let flow = flow_on(2);
    let ack = flow.frame(L4::Tcp(ACK), b"x");
    let entry = lb.dp.vip_entry(&key).expect("read").expect("an entry");
    assert_eq!(lb.dp.vip_cache_slot(&key), VipCacheSlot::of(&entry));
    // A table change moves the slot to the new table's epoch.
    let mut next = round_robin(M, &[1, 2, 3]);
    next[5] = 1;
    lb.table(0, &next);
    let entry = lb.dp.vip_entry(&key).expect("read").expect("an entry");
    assert_eq!(lb.dp.vip_cache_slot(&key), VipCacheSlot::of(&entry));
    let owner = states(&lb)[2].owner();
    // Without its VIPS entry the VIP's packets still take the fast path: from the cache.
    lb.dp.delete_vips_entry(&key).expect("delete");
    assert_eq!(sent_to(&mut lb, &ack), owner);
    // A slot of an older epoch (a table switch in progress) is not trusted: the packet
    // looks VIPS up, which has no entry now, and is not forwarded.
    let stale = VipEntry {
        epoch: entry.epoch - 1,
        ..entry
    };
    lb.dp.write_vip_cache_slot(&key, &VipCacheSlot::of(&stale));
    assert_ne!(lb.send(&ack).0, XDP_TX, "a stale slot is not used");
    // Nor is another VIP id's slot, even at the right epoch.
    let other = VipEntry { vip_id: 1, ..entry };
    lb.dp.write_vip_cache_slot(&key, &VipCacheSlot::of(&other));
    assert_ne!(lb.send(&ack).0, XDP_TX, "another VIP's slot is not used");
    lb.dp.write_vip_cache_slot(&key, &VipCacheSlot::of(&entry));
    assert_eq!(sent_to(&mut lb, &ack), owner, "the confirmed slot again");
}

#[test]
fn of_two_fast_path_vips_with_one_filter_bit_one_is_cached_and_both_forward_by_their_tables() {
    // The filter bit folds a v4 address's two halves by XOR: these two share it.
    let a = Ipv4Addr::new(198, 51, 100, 10);
    let b = Ipv4Addr::new(198, 10, 100, 51);
    let (ka, kb) = (
        vip_key(a.into(), 80, PROTO_TCP),
        vip_key(b.into(), 80, PROTO_TCP),
    );
    assert_eq!(vip_filter_bit(&ka), vip_filter_bit(&kb));
    let mut lb = Lb::new();
    lb.backends(3, false);
    lb.table(0, &round_robin(M, &[1, 2, 3]));
    lb.table(1, &round_robin(M, &[3, 1, 2]));
    lb.vip(0, a, 80, PROTO_TCP);
    lb.vip(1, b, 80, PROTO_TCP);
    lb.dp.set_fast_path(&ka, 0, true).expect("fast path on");
    lb.dp.set_fast_path(&kb, 1, true).expect("fast path on");
    assert!(lb.dp.vip_cached(0), "the first VIP holds the slot");
    assert!(!lb.dp.vip_cached(1), "the second looks VIPS up");
    for port in 40_000..40_020 {
        for (id, addr) in [(0, a), (1, b)] {
            let flow = Flow::new(CLIENT4, port, addr, 80);
            let want = lb.predict(id, &flow, PROTO_TCP);
            assert_eq!(sent_to(&mut lb, &flow.frame(L4::Tcp(ACK), b"x")), want);
        }
    }
    assert_eq!(pins(&lb), 0, "both took the fast path: no pin");
}
