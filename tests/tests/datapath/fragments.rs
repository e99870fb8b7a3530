//! Fragment tracking: later fragments follow their datagram's first fragment.
//!
//! Failure scenario BR-22 (docs/src/operations/failure-scenarios.md): later fragments carry no ports,
//! so they cannot be balanced by the flow; a tracking table can lose entries; and a
//! later fragment's payload must never be read as a TCP header.

use std::net::{IpAddr, Ipv4Addr};

use etherparse::{
    EtherType, Ethernet2Header, IpFragOffset, IpHeaders, IpNumber, Ipv4Header, Ipv6Extensions,
    Ipv6FragmentHeader, Ipv6Header, PacketBuilder,
};
use lb_common::{
    stats::Reason,
    types::{PROTO_TCP, PROTO_UDP},
};
use lb_dataplane::{Dataplane as _, LoadOptions};
use lb_tests::{
    fixture::{Lb, XDP_DROP, XDP_PASS, XDP_TX},
    packets::{CLIENT_MAC, CLIENT4, Flow, GW_MAC, L4, LB_MAC, SYN, VIP4, encapsulated, tagged},
};

use super::{backend_ip, expect, expect_forwarded, flow4, flow6};

/// An Ethernet header from the client to the LB.
fn eth(ether_type: EtherType) -> Vec<u8> {
    let mut frame = Vec::new();
    Ethernet2Header {
        destination: LB_MAC,
        source: CLIENT_MAC,
        ether_type,
    }
    .write(&mut frame)
    .expect("write");
    frame
}

/// The MTU of these tests: room for 1,500-byte fragments and their outer header.
const MTU: u16 = 1600;

/// The three fragments of a UDP datagram of 3,000 data bytes from `sport` to VIP4:53 with
/// identification `id` (BR-22): 1,500, 1,500 and 68 bytes, offsets 0, 185 and 370.
fn udp_fragments(sport: u16, id: u16, dst: Ipv4Addr) -> [Vec<u8>; 3] {
    let mut whole = Vec::new();
    PacketBuilder::ipv4(CLIENT4.octets(), dst.octets(), 64)
        .udp(sport, 53)
        .write(&mut whole, &[0x42; 3000])
        .expect("write");
    let payload = &whole[20..];
    assert_eq!(payload.len(), 3008);
    let piece = |offset_units: u16, len: usize, more: bool| {
        let start = usize::from(offset_units) * 8;
        let data = &payload[start..start + len];
        let mut ip = Ipv4Header::new(
            u16::try_from(len).expect("fits"),
            64,
            IpNumber::UDP,
            CLIENT4.octets(),
            dst.octets(),
        )
        .expect("ip");
        ip.identification = id;
        ip.more_fragments = more;
        ip.fragment_offset = IpFragOffset::try_new(offset_units).expect("offset");
        ip.header_checksum = ip.calc_header_checksum();
        let mut frame = eth(EtherType::IPV4);
        ip.write(&mut frame).expect("write");
        frame.extend_from_slice(data);
        frame
    };
    [
        piece(0, 1480, true),
        piece(185, 1480, true),
        piece(370, 48, false),
    ]
}

fn lb_with_room() -> Lb {
    let mut lb = Lb::standard();
    lb.configure(|c| c.mtu = MTU);
    lb
}

#[test]
fn fragments_in_order_all_go_to_the_first_fragments_backend() {
    // BR-22.T1, order F1, F2, F3.
    let mut lb = lb_with_room();
    let [f1, f2, f3] = udp_fragments(50000, 0x4242, VIP4);
    let id = lb.predict(1, &flow4(50000, 53), PROTO_UDP);
    expect_forwarded(&mut lb, &f1, id, Reason::TxEncap);
    expect_forwarded(&mut lb, &f2, id, Reason::TxFragment);
    expect_forwarded(&mut lb, &f3, id, Reason::TxFragment);
    let vip = lb.dp.vip_stats(1).expect("stats");
    assert_eq!((vip.packets, vip.drops), (3, 0));
}

#[test]
fn tagged_fragments_follow_their_first_and_keep_their_tag() {
    // A datagram on VLAN 300 between the fragments of an untagged one: the tagged first
    // fragment records its datagram, and every fragment of each leaves encapsulated to
    // its first fragment's backend, the tagged ones with their tag.
    let mut lb = lb_with_room();
    let untagged = udp_fragments(50010, 0x4343, VIP4);
    let untagged_id = lb.predict(1, &flow4(50010, 53), PROTO_UDP);
    expect_forwarded(&mut lb, &untagged[0], untagged_id, Reason::TxEncap);
    let [f1, f2, f3] = udp_fragments(50011, 0x4444, VIP4);
    let id = lb.predict(1, &flow4(50011, 53), PROTO_UDP);
    for (frame, reason) in [
        (&f1, Reason::TxEncap),
        (&f2, Reason::TxFragment),
        (&f3, Reason::TxFragment),
    ] {
        let out = expect(&mut lb, &tagged(frame, 300), XDP_TX, reason);
        let want = tagged(&encapsulated(frame, backend_ip(id), GW_MAC, LB_MAC), 300);
        assert_eq!(out, want, "tagged fragment to backend {id}");
    }
    expect_forwarded(&mut lb, &untagged[1], untagged_id, Reason::TxFragment);
}

#[test]
fn fragments_before_their_first_are_dropped_and_counted() {
    // BR-22.T1, orders F3, F2, F1 and F2, F3, F1: the program holds no fragments, so
    // the ones before the first cannot be placed; documented and counted.
    let mut lb = lb_with_room();
    let id = lb.predict(1, &flow4(50001, 53), PROTO_UDP);
    let [f1, f2, f3] = udp_fragments(50001, 0x4243, VIP4);
    expect(&mut lb, &f3, XDP_DROP, Reason::DropFragment);
    expect(&mut lb, &f2, XDP_DROP, Reason::DropFragment);
    expect_forwarded(&mut lb, &f1, id, Reason::TxEncap);
    let [f1, f2, f3] = udp_fragments(50001, 0x4244, VIP4);
    expect(&mut lb, &f2, XDP_DROP, Reason::DropFragment);
    expect(&mut lb, &f3, XDP_DROP, Reason::DropFragment);
    expect_forwarded(&mut lb, &f1, id, Reason::TxEncap);
    // Fragments to an address without VIPs are the host's.
    let [_, f2, _] = udp_fragments(50001, 0x4245, Ipv4Addr::new(203, 0, 113, 77));
    expect(&mut lb, &f2, XDP_PASS, Reason::PassNonVip);
}

#[test]
fn an_evicted_datagram_loses_its_later_fragments_only() {
    // BR-22.T2: 1,000 datagrams in flight through a 256-entry tracking map.
    let mut lb = Lb::with_load(LoadOptions {
        ct_capacity: 16_384,
        ct_syn_capacity: 4_096,
        frag_capacity: 256,
        ..LoadOptions::default()
    });
    lb.backends(3, false);
    lb.table(1, &lb_tests::fixture::round_robin(65_537, &[1, 2, 3]));
    lb.vip(1, VIP4, 53, PROTO_UDP);
    lb.configure(|c| c.mtu = MTU);
    let datagrams: Vec<[Vec<u8>; 3]> = (0..1000u16)
        .map(|i| udp_fragments(51000 + i, i, VIP4))
        .collect();
    for d in &datagrams {
        lb.run(&d[0]);
    }
    expect(&mut lb, &datagrams[0][1], XDP_DROP, Reason::DropFragment);
    let last = &datagrams[999];
    let id = lb.predict(1, &flow4(51999, 53), PROTO_UDP);
    expect_forwarded(&mut lb, &last[1], id, Reason::TxFragment);
    expect_forwarded(&mut lb, &last[2], id, Reason::TxFragment);
}

#[test]
fn a_later_fragment_is_never_read_as_tcp() {
    // BR-22.T3: offset 185, MF clear, payload bytes 12..14 like a TCP header with SYN.
    let mut lb = lb_with_room();
    let flow = flow4(42100, 80);
    let IpHeaders::Ipv4(mut ip, _) = flow.ip_headers(IpNumber::TCP, 20) else {
        unreachable!()
    };
    ip.dont_fragment = false;
    ip.fragment_offset = IpFragOffset::try_new(185).expect("offset");
    ip.header_checksum = ip.calc_header_checksum();
    let mut payload = [0u8; 20];
    payload[0..2].copy_from_slice(&42100u16.to_be_bytes());
    payload[2..4].copy_from_slice(&80u16.to_be_bytes());
    payload[12] = 0x50;
    payload[13] = 0x02;
    let mut frame = eth(EtherType::IPV4);
    ip.write(&mut frame).expect("write");
    frame.extend_from_slice(&payload);
    let before = lb.dp.vip_stats(0).expect("stats");
    expect(&mut lb, &frame, XDP_DROP, Reason::DropFragment);
    let after = lb.dp.vip_stats(0).expect("stats");
    assert_eq!(after, before, "no VIP counter moved: not a SYN, not a flow");
    let key = lb_tests::fixture::flow_key(&flow, PROTO_TCP);
    assert_eq!(lb.dp.lookup_flow(&key).expect("lookup"), None, "no state");
}

/// An IPv6 frame of `flow` with a fragment header (identification `id`, `offset` in
/// 8-octet units, M `more`) whose fragmentable part is `data`.
fn ipv6_fragment(flow: &Flow, id: u32, offset: u16, more: bool, data: &[u8]) -> Vec<u8> {
    let (IpAddr::V6(src), IpAddr::V6(dst)) = (flow.src, flow.dst) else {
        unreachable!()
    };
    let frag = Ipv6FragmentHeader::new(
        IpNumber::TCP,
        IpFragOffset::try_new(offset).expect("offset"),
        more,
        id,
    );
    let ip = Ipv6Header {
        traffic_class: 0,
        flow_label: Default::default(),
        payload_length: u16::try_from(8 + data.len()).expect("fits"),
        next_header: IpNumber::IPV6_FRAGMENTATION_HEADER,
        hop_limit: 64,
        source: src.octets(),
        destination: dst.octets(),
    };
    let mut frame = eth(EtherType::IPV6);
    ip.write(&mut frame).expect("write");
    frame.extend_from_slice(&frag.to_bytes());
    frame.extend_from_slice(data);
    frame
}

#[test]
fn ipv6_fragments_follow_their_first_and_atomic_fragments_are_whole_packets() {
    // BR-22.T4.
    let mut lb = lb_with_room();
    let flow = flow6(42200, 80);
    let id = lb.predict(2, &flow, PROTO_TCP);
    // The TCP SYN of the flow, with 300 data bytes, split after 160 bytes.
    let whole = flow.frame(L4::Tcp(SYN), &[0x61; 300]);
    let segment = &whole[14 + 40..];
    let first = ipv6_fragment(&flow, 0x0bad_cafe, 0, true, &segment[..160]);
    let later = ipv6_fragment(&flow, 0x0bad_cafe, 20, false, &segment[160..]);
    expect(&mut lb, &later, XDP_DROP, Reason::DropFragment);
    expect_forwarded(&mut lb, &first, id, Reason::TxEncap);
    expect_forwarded(&mut lb, &later, id, Reason::TxFragment);
    // An atomic fragment (offset 0, M clear, RFC 6946): the whole packet, balanced by
    // its 5-tuple like the unfragmented SYN, forwarded unchanged.
    let flow = flow6(42201, 80);
    let IpHeaders::Ipv6(ip, _) = flow.ip_headers(IpNumber::TCP, 0) else {
        unreachable!()
    };
    let exts = Ipv6Extensions {
        fragment: Some(Ipv6FragmentHeader::new(
            IpNumber::TCP,
            IpFragOffset::ZERO,
            false,
            7,
        )),
        ..Default::default()
    };
    let atomic = flow.frame_with_ip(IpHeaders::Ipv6(ip, exts), L4::Tcp(SYN), &[]);
    let id = lb.predict(2, &flow, PROTO_TCP);
    expect_forwarded(&mut lb, &atomic, id, Reason::TxEncap);
    expect_forwarded(&mut lb, &flow.frame(L4::Tcp(SYN), &[]), id, Reason::TxEncap);
}
