//! Generic UDP Encapsulation (issue 31, stage 1): a backend entry with a GUE port gets
//! the outer IP header with protocol UDP, a UDP header to that port from a source port
//! in 49152..=65535 taken from the flow hash, checksum 0, and the 4-byte GUE variant 0
//! header naming the inner packet; IPv4, IPv6 and IPv4-in-IPv6 outer as with IP-in-IP,
//! and 12 bytes more in the MTU budget and the "too big" answers.

use std::collections::HashSet;

use lb_common::{
    hash::flow_hash,
    stats::Reason,
    types::{BACKEND_ACTIVE, PROTO_TCP, PROTO_UDP, gue_source_port},
};
use lb_tests::{
    fixture::{Lb, SEED, XDP_TX, flow_key, round_robin},
    packets::{self, ACK, GW_MAC, Gue, L4, LB_MAC, Outer, SYN, encapsulated_with},
};

use super::{
    backend_ip, expect, flow4, flow6,
    too_big::{frag_needed, packet_too_big},
};

/// The GUE port of the fixtures (Katran's default).
pub(super) const PORT: u16 = 6080;

/// The standard set-up with every backend (1..=3 IPv4, 11..=13 IPv6) sent GUE.
pub(super) fn gue_lb() -> Lb {
    let mut lb = Lb::standard();
    for k in 1..=3u8 {
        lb.encap_backend(u32::from(k), packets::backend4(k), BACKEND_ACTIVE, PORT);
        let id = 10 + u32::from(k);
        lb.encap_backend(id, packets::backend6(k), BACKEND_ACTIVE, PORT);
    }
    lb
}

/// The outer fields of `flow` (of protocol `proto`) sent GUE.
pub(super) fn gue_outer(flow: &packets::Flow, proto: u8, flow_label: Option<u32>) -> Outer {
    let hash = flow_hash(&flow_key(flow, proto), SEED);
    Outer {
        src: None,
        flow_label,
        gue: Some(Gue {
            sport: gue_source_port(hash),
            dport: PORT,
        }),
    }
}

#[test]
fn tcp_and_udp_of_both_families_are_sent_gue_with_exact_bytes() {
    let mut lb = gue_lb();
    let cases = [
        (0, flow4(47000, 80), PROTO_TCP, L4::Tcp(SYN)),
        (0, flow4(47000, 80), PROTO_TCP, L4::Tcp(ACK)),
        (1, flow4(47001, 53), PROTO_UDP, L4::Udp),
        (2, flow6(47002, 80), PROTO_TCP, L4::Tcp(SYN)),
        (3, flow6(47003, 53), PROTO_UDP, L4::Udp),
    ];
    for (vip_id, flow, proto, l4) in cases {
        let id = lb.predict(vip_id, &flow, proto);
        let frame = flow.frame(l4, b"payload");
        let out = expect(&mut lb, &frame, XDP_TX, Reason::TxEncap);
        let outer = gue_outer(&flow, proto, None);
        let expected = encapsulated_with(&frame, backend_ip(id), GW_MAC, LB_MAC, &outer);
        assert_eq!(out, expected, "{flow:?} {l4:?}");
        assert_eq!(
            out.len(),
            frame.len() + 12 + if vip_id < 2 { 20 } else { 40 }
        );
    }
}

#[test]
fn the_header_fields_are_those_of_the_draft() {
    let mut lb = gue_lb();
    let flow = flow4(47010, 80);
    let frame = flow.frame(L4::Tcp(SYN), &[]);
    let out = expect(&mut lb, &frame, XDP_TX, Reason::TxEncap);
    assert_eq!(out[14 + 9], 17, "outer protocol: UDP");
    let udp = &out[34..42];
    let sport = u16::from_be_bytes([udp[0], udp[1]]);
    assert!(sport >= 49152, "source port {sport} in the dynamic range");
    assert_eq!(u16::from_be_bytes([udp[2], udp[3]]), PORT);
    let udp_len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    assert_eq!(udp_len, out.len() - 34, "UDP length: to the frame's end");
    assert_eq!(udp[6..8], [0, 0], "no UDP checksum (RFC 768)");
    assert_eq!(
        out[42..46],
        [0, 4, 0, 0],
        "GUE: version 0, Hlen 0, IPv4 inside"
    );
    assert_eq!(out[46..], frame[14..], "the inner packet untouched");
}

#[test]
fn source_ports_are_stable_per_flow_and_spread_over_flows() {
    let mut lb = gue_lb();
    let mut ports = HashSet::new();
    for sport in 47100..47228 {
        let flow = flow4(sport, 80);
        let mut seen = HashSet::new();
        for l4 in [L4::Tcp(SYN), L4::Tcp(ACK)] {
            let out = expect(&mut lb, &flow.frame(l4, &[]), XDP_TX, Reason::TxEncap);
            seen.insert(u16::from_be_bytes([out[34], out[35]]));
        }
        assert_eq!(seen.len(), 1, "one source port per flow");
        ports.extend(seen);
    }
    // 128 flows over 16,384 ports: all but a collision or two have their own.
    assert!(ports.len() >= 124, "{} distinct source ports", ports.len());
}

#[test]
fn an_ipv4_vip_on_ipv6_gue_backends_is_sent_ipv4_in_udp_in_ipv6() {
    let mut lb = Lb::standard();
    lb.encap_backend(1, packets::backend6(1), BACKEND_ACTIVE, PORT);
    lb.table(0, &round_robin(65_537, &[1]));
    let flow = flow4(47300, 80);
    let frame = flow.frame(L4::Tcp(SYN), &[]);
    let out = expect(&mut lb, &frame, XDP_TX, Reason::TxEncap);
    let hash = flow_hash(&flow_key(&flow, PROTO_TCP), SEED);
    let outer = gue_outer(&flow, PROTO_TCP, Some(hash & 0xf_ffff));
    let expected = encapsulated_with(&frame, packets::backend6(1).into(), GW_MAC, LB_MAC, &outer);
    assert_eq!(out, expected);
    assert_eq!(out[14 + 6], 17, "next header: UDP");
    assert_eq!(out[54 + 8..54 + 12], [0, 4, 0, 0], "GUE names IPv4 inside");
}

#[test]
fn ip_in_ip_and_gue_backends_mix_in_one_table() {
    let mut lb = Lb::standard();
    lb.encap_backend(2, packets::backend4(2), BACKEND_ACTIVE, PORT);
    let mut kinds = HashSet::new();
    for sport in 47400..47440 {
        let flow = flow4(sport, 80);
        let id = lb.predict(0, &flow, PROTO_TCP);
        let frame = flow.frame(L4::Tcp(SYN), &[]);
        let out = expect(&mut lb, &frame, XDP_TX, Reason::TxEncap);
        let outer = if id == 2 {
            gue_outer(&flow, PROTO_TCP, None)
        } else {
            Outer::default()
        };
        let expected = encapsulated_with(&frame, backend_ip(id), GW_MAC, LB_MAC, &outer);
        assert_eq!(out, expected, "backend {id}");
        kinds.insert(out[14 + 9]);
    }
    assert_eq!(kinds, HashSet::from([4, 17]), "both encapsulations seen");
}

#[test]
fn the_mtu_budget_counts_the_udp_and_gue_headers() {
    let mut lb = gue_lb();
    // IPv4: 1,468 + 20 + 12 = 1,500 fits; 1,469 gets "fragmentation needed" 1,468.
    let flow = flow4(47500, 80);
    let sized4 = |l3: usize| flow.frame(L4::Tcp(ACK), &vec![0x5a; l3 - 40]);
    let out = expect(&mut lb, &sized4(1468), XDP_TX, Reason::TxEncap);
    assert_eq!(out.len(), 14 + 1500);
    let over = sized4(1469);
    let out = expect(&mut lb, &over, XDP_TX, Reason::TxIcmpTooBig);
    assert_eq!(out, frag_needed(&over, 1468));
    // IPv6: 1,448 + 40 + 12 = 1,500 fits; 1,449 gets "packet too big" 1,448.
    let flow = flow6(47501, 80);
    let sized6 = |l3: usize| flow.frame(L4::Tcp(ACK), &vec![0x5a; l3 - 60]);
    let out = expect(&mut lb, &sized6(1448), XDP_TX, Reason::TxEncap);
    assert_eq!(out.len(), 14 + 1500);
    let over = sized6(1449);
    let out = expect(&mut lb, &over, XDP_TX, Reason::TxIcmpTooBig);
    assert_eq!(out, packet_too_big(&over, 1448));
}
