//! Second-chance candidates (issue 31, stage 3; `lb_common::second_chance`): on a VIP
//! with the second chance, a TCP packet that misses conntrack on a dirty slot is sent
//! GUE to the owner with the slot's clean owner as a candidate in the GUE private data,
//! and is not pinned; a clean slot, a conntrack hit, a SYN and a VIP without the second
//! chance carry none, with today's bytes. IPv4 and IPv6 outer headers.

use lb_common::{
    stats::Reason,
    types::{PROTO_TCP, SecondChance},
};
use lb_dataplane::Dataplane as _;
use lb_maglev::flow::slot_of;
use lb_tests::{
    fixture::{Lb, SEED, XDP_TX, flow_key, round_robin, vip_key},
    packets::{ACK, Flow, GW_MAC, L4, LB_MAC, SYN, VIP4, VIP6, encapsulated_with, with_candidates},
};

use super::{
    backend_ip, expect, flow4, flow6,
    gue::{gue_lb, gue_outer},
    too_big::{frag_needed, packet_too_big},
};

/// Table size of the standard set-up.
const M: u32 = 65_537;

/// The slot of TCP `flow` in the standard tables.
fn slot(flow: &Flow) -> usize {
    usize::try_from(slot_of(&flow_key(flow, PROTO_TCP), SEED, M).expect("slot")).expect("fits")
}

/// [`gue_lb`] with `flow`'s slot of VIP `vip_id` (over `ids`) moved from its owner to
/// another backend of `ids`, and the second chance on for that VIP when `on`; returns
/// the set-up, the clean owner and the new owner.
fn moved(vip_id: u32, ids: [u32; 3], flow: &Flow, on: bool) -> (Lb, u32, u32) {
    let mut lb = gue_lb();
    let mut table = round_robin(65_537, &ids);
    let at = slot(flow);
    let clean = table[at];
    let owner = if clean == ids[0] { ids[1] } else { ids[0] };
    table[at] = owner;
    lb.table(vip_id, &table);
    let key = if vip_id < 2 {
        vip_key(VIP4.into(), 80, PROTO_TCP)
    } else {
        vip_key(VIP6.into(), 80, PROTO_TCP)
    };
    lb.dp
        .set_second_chance(&key, vip_id, on)
        .expect("second chance");
    (lb, clean, owner)
}

fn pins(lb: &Lb) -> usize {
    lb.dp.conntrack_len().expect("len").0
}

/// The frame `lb_xdp` sends for `frame` of `flow` to backend `to` over GUE, with
/// `candidate` in the private data if any.
fn sent(frame: &[u8], flow: &Flow, to: u32, candidate: Option<u32>) -> Vec<u8> {
    let plain = encapsulated_with(
        frame,
        backend_ip(to),
        GW_MAC,
        LB_MAC,
        &gue_outer(flow, PROTO_TCP, None),
    );
    match candidate {
        None => plain,
        Some(c) => {
            let sc = SecondChance::new(&[backend_ip(c)]).expect("one candidate");
            with_candidates(&plain, &sc)
        }
    }
}

#[test]
fn a_miss_on_a_dirty_slot_carries_the_clean_owner_and_is_not_pinned() {
    for (vip_id, ids, flow) in [
        (0, [1, 2, 3], flow4(48000, 80)),
        (2, [11, 12, 13], flow6(48001, 80)),
    ] {
        let (mut lb, clean, owner) = moved(vip_id, ids, &flow, true);
        let frame = flow.frame(L4::Tcp(ACK), b"mid-flow");
        for n in 1..=2 {
            let out = expect(&mut lb, &frame, XDP_TX, Reason::TxEncap);
            assert_eq!(out, sent(&frame, &flow, owner, Some(clean)), "{flow:?}");
            assert_eq!(pins(&lb), 0, "no pin: every packet carries the candidate");
            let stats = lb.dp.vip_stats(vip_id).expect("stats");
            assert_eq!((stats.sc_candidates, stats.sc_given_up), (n, 0));
        }
        // The private data as the wire carries it: Hlen, kind 'S', one candidate, none
        // used, then the clean owner's address.
        let out = expect(&mut lb, &frame, XDP_TX, Reason::TxEncap);
        let (gue, width) = if vip_id == 0 { (42, 4) } else { (62, 16) };
        let hlen = if vip_id == 0 { 2 } else { 5 };
        assert_eq!(out[gue], hlen);
        assert_eq!(out[gue + 4..gue + 8], [b'S', 1, 0, 0]);
        let addr = match backend_ip(clean) {
            std::net::IpAddr::V4(a) => a.octets().to_vec(),
            std::net::IpAddr::V6(a) => a.octets().to_vec(),
        };
        assert_eq!(out[gue + 8..gue + 8 + width], addr[..]);
        assert_eq!(
            out[gue + 8 + width..],
            frame[14..],
            "the inner packet untouched"
        );
    }
}

#[test]
fn a_clean_slot_a_conntrack_hit_and_a_syn_carry_none() {
    let flow = flow4(48010, 80);
    let (mut lb, _, owner) = moved(0, [1, 2, 3], &flow, true);
    // A handshake on the dirty slot: the SYN (held) and its ACK (pinned) go to the
    // owner with today's bytes; the next packet, a conntrack hit, too.
    for (l4, body) in [
        (L4::Tcp(SYN), &b""[..]),
        (L4::Tcp(ACK), b"a"),
        (L4::Tcp(ACK), b"b"),
    ] {
        let frame = flow.frame(l4, body);
        let out = expect(&mut lb, &frame, XDP_TX, Reason::TxEncap);
        assert_eq!(out, sent(&frame, &flow, owner, None), "{l4:?}");
    }
    assert_eq!(pins(&lb), 1, "the handshake's pin");
    // A flow on a clean slot: today's bytes, and pinned as today.
    let other = (48100..48200)
        .map(|port| flow4(port, 80))
        .find(|f| slot(f) != slot(&flow))
        .expect("another slot");
    let frame = other.frame(L4::Tcp(ACK), b"x");
    let id = lb.predict(0, &other, PROTO_TCP);
    let out = expect(&mut lb, &frame, XDP_TX, Reason::TxEncap);
    assert_eq!(out, sent(&frame, &other, id, None));
    assert_eq!(pins(&lb), 2);
}

#[test]
fn without_the_second_chance_a_dirty_slot_miss_keeps_todays_bytes_and_pin() {
    for (vip_id, ids, flow) in [
        (0, [1, 2, 3], flow4(48020, 80)),
        (2, [11, 12, 13], flow6(48021, 80)),
    ] {
        let (mut lb, _, owner) = moved(vip_id, ids, &flow, false);
        let frame = flow.frame(L4::Tcp(ACK), b"mid-flow");
        let out = expect(&mut lb, &frame, XDP_TX, Reason::TxEncap);
        assert_eq!(out, sent(&frame, &flow, owner, None));
        assert_eq!(pins(&lb), 1, "today's miss pins the owner");
    }
}

#[test]
fn an_ip_in_ip_owner_or_a_removed_clean_owner_carries_none() {
    // The owner not GUE: IP-in-IP has no room for candidates.
    let flow = flow4(48030, 80);
    let (mut lb, _, owner) = moved(0, [1, 2, 3], &flow, true);
    lb.backend(
        owner,
        lb_tests::packets::backend4(u8::try_from(owner).expect("small")),
        lb_common::types::BACKEND_ACTIVE,
    );
    let frame = flow.frame(L4::Tcp(ACK), b"x");
    let out = expect(&mut lb, &frame, XDP_TX, Reason::TxEncap);
    assert_eq!(
        out,
        encapsulated_with(
            &frame,
            backend_ip(owner),
            GW_MAC,
            LB_MAC,
            &Default::default()
        )
    );
    // The clean owner removed: no candidate to name; the miss is pinned as today.
    let flow = flow4(48031, 80);
    let (mut lb, clean, owner) = moved(0, [1, 2, 3], &flow, true);
    lb.backend(
        clean,
        lb_tests::packets::backend4(u8::try_from(clean).expect("small")),
        lb_common::types::BACKEND_DOWN,
    );
    let frame = flow.frame(L4::Tcp(ACK), b"x");
    let out = expect(&mut lb, &frame, XDP_TX, Reason::TxEncap);
    assert_eq!(out, sent(&frame, &flow, owner, None));
    assert_eq!(pins(&lb), 1);
    let stats = lb.dp.vip_stats(0).expect("stats");
    assert_eq!(
        (stats.sc_candidates, stats.sc_given_up),
        (0, 1),
        "given up (SC5)"
    );
}

#[test]
fn on_the_fast_path_the_miss_goes_to_the_clean_owner_with_none_and_is_pinned() {
    let flow = flow4(48040, 80);
    let (mut lb, clean, _) = moved(0, [1, 2, 3], &flow, true);
    let key = vip_key(VIP4.into(), 80, PROTO_TCP);
    lb.dp.set_fast_path(&key, 0, true).expect("fast path on");
    let frame = flow.frame(L4::Tcp(ACK), b"x");
    let out = expect(&mut lb, &frame, XDP_TX, Reason::TxEncap);
    assert_eq!(out, sent(&frame, &flow, clean, None));
    assert_eq!(pins(&lb), 1, "the cleaning needs the pin (rule C1)");
    // The next packet is a conntrack hit: today's bytes.
    let out = expect(&mut lb, &frame, XDP_TX, Reason::TxEncap);
    assert_eq!(out, sent(&frame, &flow, clean, None));
}

#[test]
fn the_mtu_budget_of_a_packet_with_a_candidate_counts_its_private_data() {
    // IPv4: 1,460 + 20 + 12 + 8 = 1,500 fits; 1,461 gets "fragmentation needed" 1,460.
    let flow = flow4(48050, 80);
    let (mut lb, clean, owner) = moved(0, [1, 2, 3], &flow, true);
    let sized4 = |l3: usize| flow.frame(L4::Tcp(ACK), &vec![0x5a; l3 - 40]);
    let fits = sized4(1460);
    let out = expect(&mut lb, &fits, XDP_TX, Reason::TxEncap);
    assert_eq!(out, sent(&fits, &flow, owner, Some(clean)));
    assert_eq!(out.len(), 14 + 1500);
    let over = sized4(1461);
    let out = expect(&mut lb, &over, XDP_TX, Reason::TxIcmpTooBig);
    assert_eq!(out, frag_needed(&over, 1460));
    // IPv6: 1,428 + 40 + 12 + 20 = 1,500 fits; 1,429 gets "packet too big" 1,428.
    let flow = flow6(48051, 80);
    let (mut lb, clean, owner) = moved(2, [11, 12, 13], &flow, true);
    let sized6 = |l3: usize| flow.frame(L4::Tcp(ACK), &vec![0x5a; l3 - 60]);
    let fits = sized6(1428);
    let out = expect(&mut lb, &fits, XDP_TX, Reason::TxEncap);
    assert_eq!(out, sent(&fits, &flow, owner, Some(clean)));
    assert_eq!(out.len(), 14 + 1500);
    let over = sized6(1429);
    let out = expect(&mut lb, &over, XDP_TX, Reason::TxIcmpTooBig);
    assert_eq!(out, packet_too_big(&over, 1428));
}

/// [`gue_lb`] with the second chance on (VIP `vip_id`, over `ids`) and the rollout's
/// learn phase of a next table that moves `flow`'s slot to another backend of `ids`
/// (`Dataplane::learn_table`); returns the set-up, the owner, the next owner and the
/// next table.
fn learned(vip_id: u32, ids: [u32; 3], flow: &Flow) -> (Lb, u32, u32, Vec<u32>) {
    let mut lb = gue_lb();
    let table = round_robin(65_537, &ids);
    lb.table(vip_id, &table);
    let at = slot(flow);
    let owner = table[at];
    let next_owner = if owner == ids[0] { ids[1] } else { ids[0] };
    let mut next = table.clone();
    next[at] = next_owner;
    let key = if vip_id < 2 {
        vip_key(VIP4.into(), 80, PROTO_TCP)
    } else {
        vip_key(VIP6.into(), 80, PROTO_TCP)
    };
    lb.dp
        .set_second_chance(&key, vip_id, true)
        .expect("second chance");
    let compact: Vec<u16> = next
        .iter()
        .map(|&id| u16::try_from(id).expect("small"))
        .collect();
    assert_eq!(lb.dp.learn_table(vip_id, &compact).expect("learn"), 1);
    (lb, owner, next_owner, next)
}

#[test]
fn a_pending_slot_keeps_its_owner_and_carries_the_next_owner_until_the_switch() {
    for (vip_id, ids, flow) in [
        (0, [1, 2, 3], flow4(48060, 80)),
        (2, [11, 12, 13], flow6(48061, 80)),
    ] {
        let (mut lb, owner, next_owner, next) = learned(vip_id, ids, &flow);
        let state = lb
            .dp
            .slot_state(vip_id, u32::try_from(slot(&flow)).expect("fits"))
            .expect("state")
            .expect("a slot");
        assert_eq!(
            (state.owner(), state.is_dirty(), state.pending()),
            (owner, false, next_owner)
        );
        // Phase 1: a miss goes to the owner with the next owner as candidate, unpinned.
        let frame = flow.frame(L4::Tcp(ACK), b"mid-flow");
        let out = expect(&mut lb, &frame, XDP_TX, Reason::TxEncap);
        assert_eq!(
            out,
            sent(&frame, &flow, owner, Some(next_owner)),
            "{flow:?}"
        );
        assert_eq!(pins(&lb), 0);
        let stats = lb.dp.vip_stats(vip_id).expect("stats");
        assert_eq!((stats.sc_candidates, stats.sc_given_up), (1, 0));
        // Phase 2: the next table published; the slot is dirty, the old owner its
        // clean owner and the candidate, and no longer pending.
        lb.table(vip_id, &next);
        let state = lb
            .dp
            .slot_state(vip_id, u32::try_from(slot(&flow)).expect("fits"))
            .expect("state")
            .expect("a slot");
        assert_eq!(
            (state.owner(), state.clean_owner(), state.pending()),
            (next_owner, owner, 0)
        );
        let out = expect(&mut lb, &frame, XDP_TX, Reason::TxEncap);
        assert_eq!(out, sent(&frame, &flow, next_owner, Some(owner)));
        assert_eq!(pins(&lb), 0);
    }
}

#[test]
fn a_syn_on_a_pending_slot_opens_on_the_owner_with_todays_bytes() {
    let flow = flow4(48065, 80);
    let (mut lb, owner, _, _) = learned(0, [1, 2, 3], &flow);
    let syn = flow.frame(L4::Tcp(SYN), b"");
    let out = expect(&mut lb, &syn, XDP_TX, Reason::TxEncap);
    assert_eq!(
        out,
        sent(&syn, &flow, owner, None),
        "nothing opens on the next owner"
    );
    let ack = flow.frame(L4::Tcp(ACK), b"a");
    let out = expect(&mut lb, &ack, XDP_TX, Reason::TxEncap);
    assert_eq!(out, sent(&ack, &flow, owner, None), "the handshake's ACK");
    assert_eq!(pins(&lb), 1);
}

#[test]
fn a_pending_next_owner_that_keeps_no_flows_is_given_up_and_the_miss_pinned() {
    let flow = flow4(48070, 80);
    let (mut lb, owner, next_owner, _) = learned(0, [1, 2, 3], &flow);
    lb.backend(
        next_owner,
        lb_tests::packets::backend4(u8::try_from(next_owner).expect("small")),
        lb_common::types::BACKEND_DOWN,
    );
    let frame = flow.frame(L4::Tcp(ACK), b"x");
    let out = expect(&mut lb, &frame, XDP_TX, Reason::TxEncap);
    assert_eq!(out, sent(&frame, &flow, owner, None));
    assert_eq!(pins(&lb), 1, "no candidate: pinned as today");
    let stats = lb.dp.vip_stats(0).expect("stats");
    assert_eq!(
        (stats.sc_candidates, stats.sc_given_up),
        (0, 1),
        "the pending candidate given up"
    );
}

#[test]
fn a_learn_against_a_table_of_another_size_is_refused_and_changes_nothing() {
    let flow = flow4(48080, 80);
    let (mut lb, owner, _, _) = learned(0, [1, 2, 3], &flow);
    let err = lb.dp.learn_table(0, &[1, 2, 3]).expect_err("another size");
    assert!(err.to_string().contains("slots"), "{err}");
    assert_eq!(
        lb.dp
            .slot_state(0, u32::try_from(slot(&flow)).expect("fits"))
            .expect("state")
            .map(|s| s.owner()),
        Some(owner)
    );
}
