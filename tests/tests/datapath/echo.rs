//! Echo requests to VIP addresses: answered by the load balancer, from the VIP.

use std::net::Ipv4Addr;

use etherparse::{
    IcmpEchoHeader, Icmpv4Header, Icmpv4Type, Icmpv6Header, Icmpv6Type, IpHeaders, Ipv4Header,
    Ipv6Header, PacketBuilder, SlicedPacket,
};
use lb_common::{stats::Reason, types::CONFIG_ICMP_ECHO};
use lb_tests::{
    fixture::{Lb, XDP_DROP, XDP_PASS, XDP_TX},
    packets::{CLIENT_MAC, CLIENT4, CLIENT6, LB_MAC, VIP4, VIP6, tagged},
};

use super::expect;

const PAYLOAD: &[u8] = b"ping the VIP";

fn request4(dst: Ipv4Addr, seq: u16) -> Vec<u8> {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(CLIENT_MAC, LB_MAC)
        .ipv4(CLIENT4.octets(), dst.octets(), 61)
        .icmpv4_echo_request(0x1234, seq)
        .write(&mut frame, PAYLOAD)
        .expect("write");
    frame
}

fn request6(seq: u16) -> Vec<u8> {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(CLIENT_MAC, LB_MAC)
        .ipv6(CLIENT6.octets(), VIP6.octets(), 61)
        .icmpv6_echo_request(0x1234, seq)
        .write(&mut frame, PAYLOAD)
        .expect("write");
    frame
}

/// The expected reply to the IPv4 request `frame`: addresses swapped, TTL 64, the
/// request's other IP fields, type 0 with its identifier, sequence number and data.
fn reply4(frame: &[u8]) -> Vec<u8> {
    let sliced = SlicedPacket::from_ethernet(frame).expect("request parses");
    let Some(etherparse::NetSlice::Ipv4(ip)) = sliced.net else {
        panic!("IPv4 request")
    };
    let mut h: Ipv4Header = ip.header().to_header();
    std::mem::swap(&mut h.source, &mut h.destination);
    h.time_to_live = 64;
    let Some(etherparse::TransportSlice::Icmpv4(icmp)) = sliced.transport else {
        panic!("ICMP request")
    };
    let Icmpv4Type::EchoRequest(echo) = icmp.icmp_type() else {
        panic!("echo request")
    };
    let mut out = Vec::new();
    PacketBuilder::ethernet2(LB_MAC, CLIENT_MAC)
        .ip(IpHeaders::Ipv4(h, Default::default()))
        .icmpv4(Icmpv4Type::EchoReply(echo))
        .write(&mut out, icmp.payload())
        .expect("write");
    out
}

fn reply6(seq: u16) -> Vec<u8> {
    let ip = Ipv6Header {
        traffic_class: 0,
        flow_label: Default::default(),
        payload_length: 0,
        next_header: etherparse::IpNumber::IPV6_ICMP,
        hop_limit: 64,
        source: VIP6.octets(),
        destination: CLIENT6.octets(),
    };
    let mut out = Vec::new();
    PacketBuilder::ethernet2(LB_MAC, CLIENT_MAC)
        .ip(IpHeaders::Ipv6(ip, Default::default()))
        .icmpv6(Icmpv6Type::EchoReply(IcmpEchoHeader { id: 0x1234, seq }))
        .write(&mut out, PAYLOAD)
        .expect("write");
    out
}

#[test]
fn echo_requests_to_a_vip_are_answered_from_the_vip() {
    let mut lb = Lb::standard();
    let request = request4(VIP4, 1);
    let out = expect(&mut lb, &request, XDP_TX, Reason::TxIcmpEchoReply);
    assert_eq!(out, reply4(&request), "IPv4 reply bytes");
    // The checksums, recomputed by etherparse, are those the program wrote.
    let sliced = SlicedPacket::from_ethernet(&out).expect("reply parses");
    let Some(etherparse::TransportSlice::Icmpv4(icmp)) = sliced.transport else {
        panic!("ICMP reply")
    };
    let header: Icmpv4Header = icmp.header();
    assert_eq!(
        header.checksum,
        Icmpv4Header::with_checksum(header.icmp_type.clone(), icmp.payload()).checksum
    );
    let request = request6(2);
    let out = expect(&mut lb, &request, XDP_TX, Reason::TxIcmpEchoReply);
    assert_eq!(out, reply6(2), "IPv6 reply bytes");
    let sliced = SlicedPacket::from_ethernet(&out).expect("reply parses");
    let Some(etherparse::TransportSlice::Icmpv6(icmp)) = sliced.transport else {
        panic!("ICMPv6 reply")
    };
    let header: Icmpv6Header = icmp.header();
    assert_eq!(
        header.checksum,
        Icmpv6Header::with_checksum(
            header.icmp_type,
            VIP6.octets(),
            CLIENT6.octets(),
            icmp.payload()
        )
        .expect("checksum")
        .checksum
    );
}

/// An echo request whose identifier, sequence number and data are all zero (Katran's
/// fixture): its reply is all zero but for the checksum, which must be 0xffff (the
/// complement of +0, the sum of all-zero words; RFC 1071). 0x0000, what RFC 1624's
/// equation 3 gives here (it never gives 0xffff), fails the client's verification.
#[test]
fn an_all_zero_echo_reply_carries_checksum_0xffff() {
    let mut lb = Lb::standard();
    let request = {
        let mut frame = Vec::new();
        PacketBuilder::ethernet2(CLIENT_MAC, LB_MAC)
            .ipv4(CLIENT4.octets(), VIP4.octets(), 61)
            .icmpv4_echo_request(0, 0)
            .write(&mut frame, &[0; 16])
            .expect("write");
        frame
    };
    // Type 8, code 0, checksum 0xf7ff, identifier 0, sequence 0, 16 zero bytes.
    let icmp = 14 + 20;
    assert_eq!(request[icmp..icmp + 4], [8, 0, 0xf7, 0xff]);
    assert!(request[icmp + 4..].iter().all(|b| *b == 0));
    let out = expect(&mut lb, &request, XDP_TX, Reason::TxIcmpEchoReply);
    assert_eq!(out.len(), request.len());
    assert_eq!(
        out[icmp..icmp + 4],
        [0, 0, 0xff, 0xff],
        "type 0, checksum 0xffff"
    );
    assert!(out[icmp + 4..].iter().all(|b| *b == 0));
    assert_eq!(out, reply4(&request), "IPv4 reply bytes");
}

#[test]
fn a_tagged_echo_request_is_answered_on_its_vlan() {
    let mut lb = Lb::standard();
    let request = request4(VIP4, 3);
    let out = expect(
        &mut lb,
        &tagged(&request, 100),
        XDP_TX,
        Reason::TxIcmpEchoReply,
    );
    assert_eq!(out, tagged(&reply4(&request), 100));
}

#[test]
fn echo_off_other_addresses_and_the_rate_limit() {
    let mut lb = Lb::standard();
    // Not a VIP address: the host's own business.
    let other = request4(Ipv4Addr::new(203, 0, 113, 99), 1);
    expect(&mut lb, &other, XDP_PASS, Reason::PassNonVip);
    // Rate limit: one per second, no burst.
    lb.configure(|c| {
        c.icmp_interval_ns = 1_000_000_000;
        c.icmp_burst_ns = 0;
    });
    expect(&mut lb, &request4(VIP4, 2), XDP_TX, Reason::TxIcmpEchoReply);
    expect(
        &mut lb,
        &request4(VIP4, 3),
        XDP_DROP,
        Reason::DropIcmpRateLimited,
    );
    // `icmp.echo = false`: the request passes to the stack, as before.
    lb.configure(|c| c.flags &= !CONFIG_ICMP_ECHO);
    expect(&mut lb, &request4(VIP4, 4), XDP_PASS, Reason::PassNonVip);
    expect(&mut lb, &request6(4), XDP_PASS, Reason::PassNonVip);
}
