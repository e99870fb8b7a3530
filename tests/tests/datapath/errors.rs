//! ICMP errors about VIP flows, sent to the VIP by routers, go to the flow's backend.
//!
//! Failure scenario BR-19 (docs/src/operations/failure-scenarios.md): with direct server return the
//! backends send from the VIP, so a router that cannot forward a large reply tells the
//! VIP, that is the load balancer, which must hand the message to the backend that
//! owns the connection, even when the router quotes only the IP header and 8 bytes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use etherparse::{
    Icmpv4Type, Icmpv6Type, IpNumber, Ipv4Header, Ipv6Header, PacketBuilder, TcpHeader,
    icmpv4::{DestUnreachableHeader, TimeExceededCode},
    icmpv6,
};
use lb_common::{
    stats::Reason,
    types::{PROTO_TCP, PROTO_UDP},
};
use lb_dataplane::Dataplane as _;
use lb_tests::{
    fixture::{Lb, XDP_DROP, XDP_PASS, round_robin},
    packets::{ACK, CLIENT_MAC, CLIENT4, CLIENT6, L4, LB_MAC, SYN, VIP4, VIP6},
};

use super::{expect, expect_forwarded, flow4, flow6};

/// The router on the client path that sends the errors.
const ROUTER4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 200);
const ROUTER6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xc, 0, 0, 0, 0, 0x200);

/// The failure scenario's own frame (70 bytes): "fragmentation needed", next-hop MTU
/// 1400, from 192.0.2.200 to the VIP, quoting a 1,500-byte DF segment from VIP:80 to
/// 192.0.2.10:40000 (sequence number 5001) with its IPv4 header and 8 TCP bytes.
const FRAG_NEEDED_8: &str = "02000000000102000000000a08004500003822220000400159d0c00002c8cb00710a\
                             0304476a00000578450005dc000140003f063806cb00710ac000020a00509c400000\
                             1389";

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

/// `tcp_bytes` of a TCP segment from `vip:vport` to `client:cport` (sequence 5001),
/// behind its IP header: what a router quotes.
fn quote(
    vip: IpAddr,
    vport: u16,
    client: IpAddr,
    cport: u16,
    proto: IpNumber,
    l4: usize,
) -> Vec<u8> {
    let mut segment = Vec::new();
    if proto == IpNumber::TCP {
        let mut tcp = TcpHeader::new(vport, cport, 5001, 64240);
        tcp.ack = true;
        tcp.write(&mut segment).expect("write");
        segment.extend_from_slice(&[0x77; 64]);
    } else {
        segment.extend_from_slice(&vport.to_be_bytes());
        segment.extend_from_slice(&cport.to_be_bytes());
        segment.extend_from_slice(&[0, 72, 0, 0]);
        segment.extend_from_slice(&[0x77; 64]);
    }
    let payload = u16::try_from(1400 - 40).expect("fits");
    let mut out = Vec::new();
    match (vip, client) {
        (IpAddr::V4(v), IpAddr::V4(c)) => {
            let mut h = Ipv4Header::new(payload, 63, proto, v.octets(), c.octets()).expect("ip");
            h.dont_fragment = true;
            h.header_checksum = h.calc_header_checksum();
            h.write(&mut out).expect("write");
        }
        (IpAddr::V6(v), IpAddr::V6(c)) => Ipv6Header {
            traffic_class: 0,
            flow_label: Default::default(),
            payload_length: payload,
            next_header: proto,
            hop_limit: 63,
            source: v.octets(),
            destination: c.octets(),
        }
        .write(&mut out)
        .expect("write"),
        _ => unreachable!(),
    }
    out.extend_from_slice(&segment[..l4]);
    out
}

fn error4(kind: Icmpv4Type, quoted: &[u8]) -> Vec<u8> {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(CLIENT_MAC, LB_MAC)
        .ipv4(ROUTER4.octets(), VIP4.octets(), 64)
        .icmpv4(kind)
        .write(&mut frame, quoted)
        .expect("write");
    frame
}

fn error6(kind: Icmpv6Type, quoted: &[u8]) -> Vec<u8> {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(CLIENT_MAC, LB_MAC)
        .ipv6(ROUTER6.octets(), VIP6.octets(), 64)
        .icmpv6(kind)
        .write(&mut frame, quoted)
        .expect("write");
    frame
}

fn frag_needed(mtu: u16) -> Icmpv4Type {
    Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded {
        next_hop_mtu: mtu,
    })
}

/// Pins `flow` (TCP, VIP id `vip_id`) by its handshake, then points every slot of the
/// VIP's table at another backend: only conntrack still knows the flow's backend.
fn pin_then_move(lb: &mut Lb, vip_id: u32, flow: &lb_tests::packets::Flow, ids: [u32; 2]) -> u32 {
    let owner = lb.predict(vip_id, flow, PROTO_TCP);
    lb.run(&flow.frame(L4::Tcp(SYN), &[]));
    lb.run(&flow.frame(L4::Tcp(ACK), &[]));
    let other = if owner == ids[0] { ids[1] } else { ids[0] };
    lb.table(vip_id, &round_robin(65_537, &[other]));
    owner
}

#[test]
fn frag_needed_quoting_8_bytes_goes_to_the_pinned_backend() {
    // BR-19.T1 with the scenario's exact frame, and T2 with a 64-byte quote.
    let mut lb = Lb::standard();
    let flow = flow4(40000, 80);
    let owner = pin_then_move(&mut lb, 0, &flow, [1, 2]);
    let frame = hex(FRAG_NEEDED_8);
    assert_eq!(frame.len(), 70);
    let sliced = etherparse::SlicedPacket::from_ethernet(&frame).expect("the frame parses");
    assert!(matches!(
        sliced.transport,
        Some(etherparse::TransportSlice::Icmpv4(_))
    ));
    expect_forwarded(&mut lb, &frame, owner, Reason::TxIcmpForward);
    let long = error4(
        frag_needed(1400),
        &quote(VIP4.into(), 80, CLIENT4.into(), 40000, IpNumber::TCP, 64),
    );
    expect_forwarded(&mut lb, &long, owner, Reason::TxIcmpForward);
    let vip = lb.dp.vip_stats(0).expect("stats");
    assert_eq!(vip.drops, 0);
}

#[test]
fn without_conntrack_the_error_goes_where_the_table_sends_the_flow() {
    // BR-19.T3: no pin: the backend a new packet of the reversed flow would get.
    let mut lb = Lb::standard();
    let frame = hex(FRAG_NEEDED_8);
    let id = lb.predict(0, &flow4(40000, 80), PROTO_TCP);
    expect_forwarded(&mut lb, &frame, id, Reason::TxIcmpForward);
    // Time exceeded, and an error about a UDP flow (VIP4:53).
    let ttl = error4(
        Icmpv4Type::TimeExceeded(TimeExceededCode::TtlExceededInTransit),
        &quote(VIP4.into(), 80, CLIENT4.into(), 40001, IpNumber::TCP, 8),
    );
    let id = lb.predict(0, &flow4(40001, 80), PROTO_TCP);
    expect_forwarded(&mut lb, &ttl, id, Reason::TxIcmpForward);
    let udp = error4(
        frag_needed(1400),
        &quote(VIP4.into(), 53, CLIENT4.into(), 50000, IpNumber::UDP, 8),
    );
    let id = lb.predict(1, &flow4(50000, 53), PROTO_UDP);
    expect_forwarded(&mut lb, &udp, id, Reason::TxIcmpForward);
}

#[test]
fn ipv6_packet_too_big_goes_to_the_owning_backend() {
    // BR-19.T4, and the other ICMPv6 errors.
    let mut lb = Lb::standard();
    let flow = flow6(40000, 80);
    let owner = pin_then_move(&mut lb, 2, &flow, [11, 12]);
    let quoted = quote(VIP6.into(), 80, CLIENT6.into(), 40000, IpNumber::TCP, 8);
    for kind in [
        Icmpv6Type::PacketTooBig { mtu: 1400 },
        Icmpv6Type::DestinationUnreachable(icmpv6::DestUnreachableCode::Address),
        Icmpv6Type::TimeExceeded(icmpv6::TimeExceededCode::HopLimitExceeded),
    ] {
        let frame = error6(kind, &quoted);
        expect_forwarded(&mut lb, &frame, owner, Reason::TxIcmpForward);
    }
}

const NEXTHDR_HOP: u8 = 0;
const NEXTHDR_ROUTING: u8 = 43;
const NEXTHDR_FRAGMENT: u8 = 44;
const NEXTHDR_DEST: u8 = 60;

/// `quote` of an IPv6 TCP segment (VIP6:80 to CLIENT6:`cport`) with the 8-byte
/// extension headers `chain` between the IPv6 header and `l4` TCP bytes; a fragment
/// header carries `frag_offset` (8-octet units) and M set.
fn quote_ext(cport: u16, chain: &[u8], frag_offset: u16, l4: usize) -> Vec<u8> {
    let plain = quote(VIP6.into(), 80, CLIENT6.into(), cport, IpNumber::TCP, l4);
    let (ip, tcp) = plain.split_at(40);
    let mut out = ip.to_vec();
    out[6] = chain.first().copied().unwrap_or(PROTO_TCP);
    for (i, kind) in chain.iter().enumerate() {
        let next = chain.get(i + 1).copied().unwrap_or(PROTO_TCP);
        let header: [u8; 8] = match *kind {
            // Next header, length 0 (8 bytes), a PadN option of 4 bytes.
            NEXTHDR_HOP | NEXTHDR_DEST => [next, 0, 1, 4, 0, 0, 0, 0],
            // Next header, length 0, routing type 0, segments left 0.
            NEXTHDR_ROUTING => [next, 0, 0, 0, 0, 0, 0, 0],
            NEXTHDR_FRAGMENT => {
                let [hi, lo] = ((frag_offset << 3) | 1).to_be_bytes();
                [next, 0, hi, lo, 0, 0, 0x12, 0x34]
            }
            other => panic!("no extension header {other}"),
        };
        out.extend_from_slice(&header);
    }
    out.extend_from_slice(tcp);
    out
}

#[test]
fn ipv6_errors_quoting_extension_headers_go_to_the_owning_backend() {
    // Issue 29 item 6: the quoted packet's extension headers are walked as the main
    // parser walks them; before, such an error counted pass_icmp_unmatched.
    let mut lb = Lb::standard();
    let flow = flow6(40000, 80);
    let owner = pin_then_move(&mut lb, 2, &flow, [11, 12]);
    for chain in [
        &[NEXTHDR_HOP][..],
        &[NEXTHDR_ROUTING],
        &[NEXTHDR_DEST],
        &[NEXTHDR_FRAGMENT],
        &[
            NEXTHDR_HOP,
            NEXTHDR_DEST,
            NEXTHDR_ROUTING,
            NEXTHDR_FRAGMENT,
            NEXTHDR_DEST,
        ],
    ] {
        for l4 in [8, 64] {
            let frame = error6(
                Icmpv6Type::PacketTooBig { mtu: 1400 },
                &quote_ext(40000, chain, 0, l4),
            );
            expect_forwarded(&mut lb, &frame, owner, Reason::TxIcmpForward);
        }
    }
    // A quoted later fragment has no ports: the stack's. A quote cut inside the
    // extension headers or before 8 TCP bytes is malformed.
    let later = error6(
        Icmpv6Type::PacketTooBig { mtu: 1400 },
        &quote_ext(40000, &[NEXTHDR_FRAGMENT], 185, 8),
    );
    expect(&mut lb, &later, XDP_PASS, Reason::PassIcmpUnmatched);
    let chain = [NEXTHDR_HOP, NEXTHDR_ROUTING];
    let full = quote_ext(40000, &chain, 0, 8);
    for cut in [44, 56, 62] {
        let short = error6(Icmpv6Type::PacketTooBig { mtu: 1400 }, &full[..cut]);
        expect(&mut lb, &short, XDP_DROP, Reason::DropIcmpMalformed);
    }
    // More extension headers than the main parser walks: the stack's.
    let long = error6(
        Icmpv6Type::PacketTooBig { mtu: 1400 },
        &quote_ext(40000, &[NEXTHDR_DEST; 7], 0, 8),
    );
    expect(&mut lb, &long, XDP_PASS, Reason::PassIcmpUnmatched);
}

#[test]
fn truncated_or_inconsistent_quotes_are_dropped_and_others_pass() {
    // BR-19.T5: never forwarded to an arbitrary backend.
    let mut lb = Lb::standard();
    let short = error4(
        frag_needed(1400),
        &quote(VIP4.into(), 80, CLIENT4.into(), 40000, IpNumber::TCP, 4),
    );
    expect(&mut lb, &short, XDP_DROP, Reason::DropIcmpMalformed);
    let header_only = error4(
        frag_needed(1400),
        &quote(VIP4.into(), 80, CLIENT4.into(), 40000, IpNumber::TCP, 0)[..12],
    );
    expect(&mut lb, &header_only, XDP_DROP, Reason::DropIcmpMalformed);
    // The quoted packet was not sent from the address the error came to.
    let elsewhere = error4(
        frag_needed(1400),
        &quote(
            Ipv4Addr::new(203, 0, 113, 99).into(),
            80,
            CLIENT4.into(),
            40000,
            IpNumber::TCP,
            8,
        ),
    );
    expect(&mut lb, &elsewhere, XDP_DROP, Reason::DropIcmpMalformed);
    let v6_short = error6(
        Icmpv6Type::PacketTooBig { mtu: 1400 },
        &quote(VIP6.into(), 80, CLIENT6.into(), 40000, IpNumber::TCP, 7),
    );
    expect(&mut lb, &v6_short, XDP_DROP, Reason::DropIcmpMalformed);
    // A port that is no service of the VIP: the stack's.
    let unmatched = error4(
        frag_needed(1400),
        &quote(VIP4.into(), 81, CLIENT4.into(), 40000, IpNumber::TCP, 8),
    );
    expect(&mut lb, &unmatched, XDP_PASS, Reason::PassIcmpUnmatched);
}
