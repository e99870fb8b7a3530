//! Flood-proof conntrack through BPF_PROG_TEST_RUN: a flood of TCP ACKs, each from a
//! 4-tuple the load balancer has never seen, sent as fast as the harness can run the
//! program (one `BPF_PROG_TEST_RUN` call repeating the frame, its source address
//! stamped with a new value per repetition). Past the per-CPU rate of new pins, the
//! flood's packets are forwarded by the table without a pin (`tx_unpinned`), so the
//! established flows keep theirs; without the limit the same kind of flood evicts them.

use std::{net::IpAddr, time::Instant};

use lb_common::{
    stats::Reason,
    types::{BENCH_FRAME_MAX, PROTO_TCP},
};
use lb_dataplane::{BenchSpec, BenchTarget, Dataplane as _};
use lb_tests::{
    fixture::{Lb, XDP_TX, default_config, flow_key, round_robin},
    packets::{ACK, CLIENT4, Flow, L4, SYN, VIP4},
};

/// Offset of the IPv4 source address in the frame.
const V4_SRC: u32 = 26;
/// Conntrack capacity of the flood tests: room for the established flows and for
/// what the rate limit lets a flood add (10,000 pins a second: 26 s of flood on a slow
/// machine, where the 4,000,000 packets may take 15 s).
const CT: u32 = 262_144;
/// The tests' rate of new pins per CPU: 10,000 per second (an interval of 100 us), with
/// bursts of 100 ms (1,000 pins).
const INTERVAL_NS: u64 = 100_000;
const BURST_NS: u64 = 100_000_000;

/// A load balancer with VIP4:80/tcp on backends 1..=3 and 1,000 established flows;
/// returns them with the backend each went to.
fn established() -> (Lb, Vec<(Flow, Option<IpAddr>)>) {
    let mut lb = Lb::with_ct(CT, 4_096);
    lb.backends(3, false);
    lb.table(0, &round_robin(65_537, &[1, 2, 3]));
    lb.vip(0, VIP4, 80, PROTO_TCP);
    let flows = (0..1_000u16)
        .map(|i| {
            let flow = Flow::new(CLIENT4, 20_000 + i, VIP4, 80);
            let (a, owner) = lb.send(&flow.frame(L4::Tcp(SYN), &[]));
            assert_eq!(a, XDP_TX);
            assert_eq!(lb.send(&flow.frame(L4::Tcp(ACK), &[])), (XDP_TX, owner));
            (flow, owner)
        })
        .collect();
    (lb, flows)
}

/// Sends `packets` ACKs, each from a new source address (0.0.0.0 counting up), with
/// one `BPF_PROG_TEST_RUN` call.
fn flood(lb: &mut Lb, packets: u32) {
    let flow = Flow::new(CLIENT4, 33_333, VIP4, 80);
    let bare = flow.frame(L4::Tcp(ACK), &[]);
    let frame = flow.frame(L4::Tcp(ACK), &vec![0x61; BENCH_FRAME_MAX - bare.len()]);
    let spec = BenchSpec {
        vary_offset: V4_SRC,
        counter: Some(0),
        ..BenchSpec::default()
    };
    let out = lb
        .dp
        .bench_run_spec(BenchTarget::LoadBalancer, &frame, &spec, None, packets)
        .expect("flood run");
    assert_eq!(out.action, XDP_TX);
}

/// How many of `flows` still have a pin.
fn pinned(lb: &Lb, flows: &[(Flow, Option<IpAddr>)]) -> usize {
    flows
        .iter()
        .filter(|(flow, _)| {
            lb.dp
                .lookup_flow(&flow_key(flow, PROTO_TCP))
                .expect("lookup")
                .is_some()
        })
        .count()
}

#[test]
fn an_ack_flood_from_new_4tuples_leaves_established_flows_pinned() {
    let (mut lb, flows) = established();
    let mut cfg = default_config();
    cfg.new_pin_interval_ns = INTERVAL_NS;
    cfg.new_pin_burst_ns = BURST_NS;
    lb.dp.set_config(&cfg).expect("config");
    let before = lb.global();
    let (entries_before, _) = lb.dp.conntrack_len().expect("ct size");
    let started = Instant::now();
    let packets = 4_000_000;
    flood(&mut lb, packets);
    let elapsed = started.elapsed();
    let (entries, _) = lb.dp.conntrack_len().expect("ct size");
    // The flood added at most the burst and the rate over its duration (a slack of one
    // interval per burst for the coarse clock's steps)...
    let allowed = (BURST_NS + u64::try_from(elapsed.as_nanos()).expect("short")) / INTERVAL_NS + 10;
    let added = u64::try_from(entries - entries_before).expect("fits");
    assert!(
        added <= allowed,
        "{added} pins added in {elapsed:?}, at most {allowed} allowed"
    );
    // ...and forwarded every other packet without a pin.
    let after = lb.global();
    assert_eq!(
        after.get(Reason::TxUnpinned) - before.get(Reason::TxUnpinned) + after.get(Reason::TxEncap)
            - before.get(Reason::TxEncap),
        u64::from(packets)
    );
    assert!(
        after.get(Reason::TxUnpinned) - before.get(Reason::TxUnpinned)
            >= u64::from(packets) - added
    );
    assert_eq!(pinned(&lb, &flows), flows.len());
    // The established flows follow their pins, not the table.
    lb.table(0, &round_robin(65_537, &[3, 1, 2]));
    for (flow, owner) in &flows {
        assert_eq!(
            lb.send(&flow.frame(L4::Tcp(ACK), b"after")),
            (XDP_TX, *owner),
            "{flow:?}"
        );
    }
}

#[test]
fn without_the_rate_limit_a_smaller_flood_evicts_established_flows() {
    // The control: with no limit every flood packet makes a pin, and 800,000 new pins
    // in a 262,144-entry map evict the established flows (least recently used first).
    let (mut lb, flows) = established();
    flood(&mut lb, 800_000);
    let kept = pinned(&lb, &flows);
    assert!(kept < flows.len() / 2, "{kept} of {} kept", flows.len());
}

#[test]
fn a_flow_refused_a_pin_goes_where_the_pin_would_have_pointed() {
    // The burst spent, a mid-flow ACK and a new UDP flow are forwarded without a pin to
    // the table's backend; once the limit allows, the next packet pins them there.
    let mut lb = Lb::standard();
    let mut cfg = default_config();
    // One pin per 10 s while the refusals are checked (no stall of a loaded machine
    // lets a second pin through), then no limit.
    cfg.new_pin_interval_ns = 10_000_000_000;
    cfg.new_pin_burst_ns = 0;
    lb.dp.set_config(&cfg).expect("config");
    let first = Flow::new(CLIENT4, 45_000, VIP4, 80);
    assert_eq!(lb.send(&first.frame(L4::Tcp(ACK), &[])).0, XDP_TX);
    let before = lb.counter(Reason::TxUnpinned);
    let tcp = Flow::new(CLIENT4, 45_001, VIP4, 80);
    let udp = Flow::new(CLIENT4, 45_002, VIP4, 53);
    let owner_tcp = lb.predict(0, &tcp, PROTO_TCP);
    let owner_udp = lb.predict(1, &udp, lb_common::types::PROTO_UDP);
    let b4 = |id: u32| {
        Some(IpAddr::from(lb_tests::packets::backend4(
            u8::try_from(id).expect("small"),
        )))
    };
    assert_eq!(
        lb.send(&tcp.frame(L4::Tcp(ACK), &[])),
        (XDP_TX, b4(owner_tcp))
    );
    assert_eq!(lb.send(&udp.frame(L4::Udp, b"q")), (XDP_TX, b4(owner_udp)));
    assert_eq!(lb.counter(Reason::TxUnpinned), before + 2);
    assert!(
        lb.dp
            .lookup_flow(&flow_key(&tcp, PROTO_TCP))
            .expect("lookup")
            .is_none()
    );
    // The limit lifted (GCRA keeps the 10 s theoretical arrival time of a shorter
    // interval set later, so lowering it would not do).
    cfg.new_pin_interval_ns = 0;
    lb.dp.set_config(&cfg).expect("config");
    assert_eq!(
        lb.send(&tcp.frame(L4::Tcp(ACK), &[])),
        (XDP_TX, b4(owner_tcp))
    );
    assert!(
        lb.dp
            .lookup_flow(&flow_key(&tcp, PROTO_TCP))
            .expect("lookup")
            .is_some()
    );
}
