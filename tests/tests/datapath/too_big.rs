//! "Too big": a VIP packet that does not fit the 1,500-byte MTU once encapsulated.
//!
//! Failure scenario BR-18 (docs/src/operations/failure-scenarios.md): a client segment already at the
//! link MTU leaves no room for the outer header; silently dropping it stalls path-MTU
//! discovery, and a generated ICMP that copies the triggering packet's fragment flags
//! is discarded by receivers.

use etherparse::{
    Icmpv4Type, Icmpv6Type, IpDscp, IpHeaders, IpNumber, Ipv4Header, Ipv4HeaderSlice, Ipv6Header,
    Ipv6HeaderSlice, PacketBuilder, icmpv4::DestUnreachableHeader,
};
use lb_common::{
    stats::Reason,
    types::{BACKEND_ACTIVE, CONFIG_ICMP_TOO_BIG, PROTO_TCP},
};
use lb_dataplane::Dataplane as _;
use lb_tests::{
    fixture::{Lb, XDP_DROP, XDP_TX, round_robin},
    packets::{self, ACK, CLIENT_MAC, L4, LB_MAC},
};

use super::{expect, expect_forwarded, flow4, flow6};

/// Bytes of the invoking packet an ICMP answer quotes: 576 - 20 - 8 (RFC 1812).
const V4_QUOTE: usize = 548;
/// Bytes an ICMPv6 answer quotes: 1280 - 40 - 8 (RFC 4443).
const V6_QUOTE: usize = 1232;

/// The expected answer to `invoking` (an IPv4 frame): "fragmentation needed" with
/// `mtu`, from its destination to its source, TOS 0xc0, identification copied, no
/// fragment flags, TTL 64, quoting 548 bytes.
pub(super) fn frag_needed(invoking: &[u8], mtu: u16) -> Vec<u8> {
    let inner = &invoking[14..];
    let h = Ipv4HeaderSlice::from_slice(inner)
        .expect("IPv4")
        .to_header();
    let mut ip = Ipv4Header::new(0, 64, IpNumber::ICMP, h.destination, h.source).expect("ip");
    ip.dscp = IpDscp::try_new(0xc0 >> 2).expect("dscp");
    ip.identification = h.identification;
    ip.dont_fragment = false;
    let mut out = Vec::new();
    PacketBuilder::ethernet2(LB_MAC, CLIENT_MAC)
        .ip(IpHeaders::Ipv4(ip, Default::default()))
        .icmpv4(Icmpv4Type::DestinationUnreachable(
            DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: mtu },
        ))
        .write(&mut out, &inner[..V4_QUOTE])
        .expect("write");
    out
}

/// The expected ICMPv6 "packet too big" answer to the IPv6 frame `invoking`.
pub(super) fn packet_too_big(invoking: &[u8], mtu: u32) -> Vec<u8> {
    let inner = &invoking[14..];
    let h = Ipv6HeaderSlice::from_slice(inner)
        .expect("IPv6")
        .to_header();
    let ip = Ipv6Header {
        traffic_class: 0,
        flow_label: Default::default(),
        payload_length: 0,
        next_header: IpNumber::IPV6_ICMP,
        hop_limit: 64,
        source: h.destination,
        destination: h.source,
    };
    let mut out = Vec::new();
    PacketBuilder::ethernet2(LB_MAC, CLIENT_MAC)
        .ip(IpHeaders::Ipv6(ip, Default::default()))
        .icmpv6(Icmpv6Type::PacketTooBig { mtu })
        .write(&mut out, &inner[..V6_QUOTE])
        .expect("write");
    out
}

/// An IPv4 TCP ACK of `flow4(sport, 80)` whose IP packet is `l3_len` bytes.
fn ack4(sport: u16, l3_len: usize) -> Vec<u8> {
    flow4(sport, 80).frame(L4::Tcp(ACK), &vec![0x5a; l3_len - 40])
}

#[test]
fn a_df_segment_one_byte_over_gets_fragmentation_needed_with_the_mtu_minus_20() {
    let mut lb = Lb::standard();
    // BR-18.T1: total length 1480 + 20 = 1500 fits.
    let flow = flow4(44000, 80);
    let fits = ack4(44000, 1480);
    let id = lb.predict(0, &flow, PROTO_TCP);
    expect_forwarded(&mut lb, &fits, id, Reason::TxEncap);
    // BR-18.T2: 1481 with DF: answered from the VIP, the next segment fits.
    let over = ack4(44000, 1481);
    let out = expect(&mut lb, &over, XDP_TX, Reason::TxIcmpTooBig);
    assert_eq!(out, frag_needed(&over, 1480), "answer bytes");
    assert_eq!(out.len(), 14 + 576, "an ICMP error of at most 576 bytes");
    let sliced = etherparse::SlicedPacket::from_ethernet(&out).expect("parses");
    let Some(etherparse::TransportSlice::Icmpv4(icmp)) = sliced.transport else {
        panic!("ICMP expected");
    };
    assert_eq!(
        icmp.icmp_type(),
        Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded {
            next_hop_mtu: 1480
        })
    );
    let vip = lb.dp.vip_stats(0).expect("vip stats");
    assert_eq!(
        (vip.packets, vip.drops),
        (2, 1),
        "the big segment itself is not sent"
    );
}

#[test]
fn ipv6_one_byte_over_gets_packet_too_big_with_the_mtu_minus_40() {
    // BR-18.T4: the 1,460-byte packet fits (1,500 with the outer header), 1,461 does not;
    // a 1,500-byte one does not either.
    let mut lb = Lb::standard();
    let flow = flow6(44001, 80);
    let sized = |l3: usize| flow.frame(L4::Tcp(ACK), &vec![0x5a; l3 - 60]);
    let fits = sized(1460);
    let id = lb.predict(2, &flow, PROTO_TCP);
    expect_forwarded(&mut lb, &fits, id, Reason::TxEncap);
    for l3 in [1461, 1500] {
        let over = sized(l3);
        let out = expect(&mut lb, &over, XDP_TX, Reason::TxIcmpTooBig);
        assert_eq!(out, packet_too_big(&over, 1460), "answer to {l3} bytes");
        assert_eq!(out.len(), 14 + 1280, "an ICMPv6 error of the minimum MTU");
    }
}

#[test]
fn the_answer_never_carries_the_invoking_packets_fragment_flags() {
    // BR-18.T3: the invoking packet is a first fragment (MF set, offset 0, 1,500 bytes,
    // and DF): the answer's IPv4 header is its own, MF clear and offset 0.
    let mut lb = Lb::standard();
    let flow = flow4(44002, 80);
    let IpHeaders::Ipv4(mut ip, ext) = flow.ip_headers(IpNumber::TCP, 0) else {
        unreachable!()
    };
    ip.more_fragments = true;
    let frame = flow.frame_with_ip(IpHeaders::Ipv4(ip, ext), L4::Tcp(ACK), &[0x33; 1460]);
    let out = expect(&mut lb, &frame, XDP_TX, Reason::TxIcmpTooBig);
    assert_eq!(out, frag_needed(&frame, 1480));
    let answer = Ipv4HeaderSlice::from_slice(&out[14..]).expect("IPv4");
    assert!(!answer.more_fragments() && answer.fragments_offset().value() == 0);
}

#[test]
fn ipv4_without_df_or_with_answers_off_is_dropped() {
    let mut lb = Lb::standard();
    // BR-18.T5: DF clear: the LB cannot fragment, and the sender does no PMTU discovery.
    let flow = flow4(44003, 80);
    let IpHeaders::Ipv4(mut ip, ext) = flow.ip_headers(IpNumber::TCP, 0) else {
        unreachable!()
    };
    ip.dont_fragment = false;
    let frame = flow.frame_with_ip(IpHeaders::Ipv4(ip, ext), L4::Tcp(ACK), &[0; 1460]);
    expect(&mut lb, &frame, XDP_DROP, Reason::DropTooBig);
    // `icmp.too_big = false`: dropped and counted, v4 and v6.
    lb.configure(|c| c.flags &= !CONFIG_ICMP_TOO_BIG);
    expect(&mut lb, &ack4(44004, 1481), XDP_DROP, Reason::DropTooBig);
    let v6 = flow6(44004, 80).frame(L4::Tcp(ACK), &[0; 1500 - 60]);
    expect(&mut lb, &v6, XDP_DROP, Reason::DropTooBig);
}

#[test]
fn answers_are_rate_limited_per_cpu() {
    // 2 per second with bursts of 2: the third answer in a row is not sent.
    let mut lb = Lb::standard();
    lb.configure(|c| {
        c.icmp_interval_ns = 500_000_000;
        c.icmp_burst_ns = 500_000_000;
    });
    for sport in [44005, 44006] {
        expect(&mut lb, &ack4(sport, 1500), XDP_TX, Reason::TxIcmpTooBig);
    }
    expect(
        &mut lb,
        &ack4(44007, 1500),
        XDP_DROP,
        Reason::DropIcmpRateLimited,
    );
}

#[test]
fn an_ipv4_vip_with_ipv6_backends_announces_the_mtu_minus_40() {
    // IPv4-in-IPv6 adds 40 bytes: 1,460 fits, 1,461 gets "fragmentation needed" 1,460.
    let mut lb = Lb::standard();
    lb.backend(1, packets::backend6(1), BACKEND_ACTIVE);
    lb.table(0, &round_robin(7, &[1]));
    let fits = ack4(44008, 1460);
    let out = expect(&mut lb, &fits, XDP_TX, Reason::TxEncap);
    assert_eq!(out.len(), 14 + 40 + 1460);
    let over = ack4(44008, 1461);
    let out = expect(&mut lb, &over, XDP_TX, Reason::TxIcmpTooBig);
    assert_eq!(out, frag_needed(&over, 1460));
}
