//! 802.1Q: single-tagged frames are balanced and leave with their tag.
//!
//! Failure scenario BR-23 (docs/src/operations/failure-scenarios.md): a load balancer on a trunk port
//! sees tagged frames; parsed at offset 14 they are garbage, passed to the stack they
//! are not balanced, and sent back untagged they land on the wrong VLAN.

use std::net::Ipv4Addr;

use etherparse::{PacketBuilder, VlanId};
use lb_common::{stats::Reason, types::PROTO_TCP};
use lb_tests::{
    fixture::{Lb, XDP_PASS, XDP_TX},
    packets::{
        ACK, CLIENT_MAC, CLIENT4, Flow, GW_MAC, L4, LB_MAC, SYN, VIP4, arp_request, encapsulated,
        tagged,
    },
};

use super::{backend_ip, expect, flow4, flow6};

#[test]
fn a_tagged_syn_goes_to_the_untagged_ones_backend_and_keeps_its_tag() {
    // BR-23.T2 (VID 100) and T3 (a priority tag: VID 0 with PCP 5, kept as it came).
    let mut lb = Lb::standard();
    for (sport, tci) in [(45000, 100), (45001, 0xa000), (45002, 0x0fff)] {
        let flow = flow4(sport, 80);
        let untagged = flow.frame(L4::Tcp(SYN), &[]);
        let id = lb.predict(0, &flow, PROTO_TCP);
        let out = expect(&mut lb, &tagged(&untagged, tci), XDP_TX, Reason::TxEncap);
        let expected = tagged(
            &encapsulated(&untagged, backend_ip(id), GW_MAC, LB_MAC),
            tci,
        );
        assert_eq!(out, expected, "TCI {tci:#06x}");
    }
    let flow = flow6(45003, 80);
    let untagged = flow.frame(L4::Tcp(SYN), &[]);
    let id = lb.predict(2, &flow, PROTO_TCP);
    let out = expect(&mut lb, &tagged(&untagged, 200), XDP_TX, Reason::TxEncap);
    assert_eq!(
        out,
        tagged(
            &encapsulated(&untagged, backend_ip(id), GW_MAC, LB_MAC),
            200
        )
    );
}

#[test]
fn tagged_frames_for_the_host_pass_exactly_as_they_came() {
    let mut lb = Lb::standard();
    let other = Flow::new(CLIENT4, 45010, Ipv4Addr::new(203, 0, 113, 99), 80);
    expect(
        &mut lb,
        &tagged(&other.frame(L4::Tcp(SYN), &[]), 100),
        XDP_PASS,
        Reason::PassNonVip,
    );
    expect(
        &mut lb,
        &tagged(&arp_request(CLIENT4, VIP4), 100),
        XDP_PASS,
        Reason::PassNotIp,
    );
}

#[test]
fn double_tags_pass_untouched_and_counted() {
    // BR-23.T4: QinQ (802.1ad VID 200, then 802.1Q VID 100), and 802.1Q in 802.1Q.
    let mut lb = Lb::standard();
    let mut qinq = Vec::new();
    PacketBuilder::ethernet2(CLIENT_MAC, LB_MAC)
        .double_vlan(
            VlanId::try_new(200).expect("vid"),
            VlanId::try_new(100).expect("vid"),
        )
        .ipv4(CLIENT4.octets(), VIP4.octets(), 64)
        .tcp(45020, 80, 1000, 64240)
        .syn()
        .write(&mut qinq, &[])
        .expect("write");
    assert_eq!(qinq[12..14], [0x88, 0xa8]);
    expect(&mut lb, &qinq, XDP_PASS, Reason::PassVlan);
    let twice = tagged(
        &tagged(&flow4(45021, 80).frame(L4::Tcp(SYN), &[]), 100),
        300,
    );
    expect(&mut lb, &twice, XDP_PASS, Reason::PassVlan);
}

#[test]
fn a_tagged_segment_too_big_is_answered_on_its_vlan() {
    let mut lb = Lb::standard();
    let big = flow4(45030, 80).frame(L4::Tcp(ACK), &[0; 1460]);
    let untagged_answer = expect(&mut lb, &big, XDP_TX, Reason::TxIcmpTooBig);
    let out = expect(&mut lb, &tagged(&big, 100), XDP_TX, Reason::TxIcmpTooBig);
    assert_eq!(out, tagged(&untagged_answer, 100));
}
