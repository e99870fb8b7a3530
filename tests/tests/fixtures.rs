//! BPF_PROG_TEST_RUN packet fixtures: exact expected action and, where forwarded, exact
//! expected output bytes (built independently with etherparse), plus the verdict
//! counter each packet must move.
//!
//! Set-up ([`Lb::standard`]): VIP4:80/tcp, VIP4:53/udp on backends 1..=3 (IPv4) and
//! VIP6:80/tcp, VIP6:53/udp on backends 11..=13 (IPv6), 65,537-slot tables, gateway
//! next-hop mode (destination MAC 02:..:fe, source 02:..:01), MTU 1500.

use std::net::{IpAddr, Ipv4Addr};

use etherparse::{
    IpAuthHeader, IpHeaders, IpNumber, Ipv4Options, Ipv6Extensions, Ipv6FragmentHeader,
    Ipv6RawExtHeader, Ipv6RoutingExtensions, PacketBuilder,
};
use lb_common::{
    stats::Reason,
    types::{CONFIG_ICMP_TOO_BIG, CONFIG_VALID, PROTO_TCP, PROTO_UDP},
};
use lb_dataplane::Dataplane as _;
use lb_tests::{
    fixture::{Lb, XDP_DROP, XDP_PASS, XDP_TX, default_config, round_robin},
    packets::{
        self, ACK, CLIENT4, CLIENT6, Flow, GW_MAC, L4, LB_MAC, SYN, VIP4, VIP6, encapsulated,
    },
};

fn backend_ip(id: u32) -> IpAddr {
    #[expect(clippy::cast_possible_truncation, reason = "fixture ids are small")]
    let k = id as u8;
    if id > 10 {
        packets::backend6(k - 10).into()
    } else {
        packets::backend4(k).into()
    }
}

/// Asserts `frame` is forwarded to the predicted backend with the exact expected bytes,
/// moving `tx_encap` by one; returns the backend id.
fn assert_forwarded(lb: &mut Lb, vip_id: u32, flow: &Flow, proto: u8, frame: &[u8]) -> u32 {
    let expected_id = lb.predict(vip_id, flow, proto);
    let before = lb.counter(Reason::TxEncap);
    let out = lb.run(frame);
    assert_eq!(out.action, XDP_TX, "global: {:?}", lb.global());
    assert_eq!(
        out.data,
        encapsulated(frame, backend_ip(expected_id), GW_MAC, LB_MAC),
        "encapsulated bytes"
    );
    assert_eq!(lb.counter(Reason::TxEncap), before + 1);
    expected_id
}

/// Asserts `frame` gets `action` with the frame untouched (for PASS) and `reason`
/// counted once.
fn assert_verdict(lb: &mut Lb, frame: &[u8], action: u32, reason: Reason) {
    let before = lb.global();
    let out = lb.run(frame);
    assert_eq!(
        out.action,
        action,
        "reason expected: {reason:?}, global: {:?}",
        lb.global()
    );
    if action == XDP_PASS {
        assert_eq!(out.data, frame, "a passed frame leaves byte-identical");
    }
    let after = lb.global();
    assert_eq!(
        after.get(reason),
        before.get(reason) + 1,
        "{reason:?} counted once"
    );
    assert_eq!(
        after.total(),
        before.total() + 1,
        "exactly one reason per packet"
    );
}

fn flow4(sport: u16, dport: u16) -> Flow {
    Flow::new(CLIENT4, sport, VIP4, dport)
}

fn flow6(sport: u16, dport: u16) -> Flow {
    Flow::new(CLIENT6, sport, VIP6, dport)
}

// ---- forwarded: exact bytes ----

#[test]
fn tcp4_syn_is_encapsulated_ipip_to_the_predicted_backend() {
    let mut lb = Lb::standard();
    let flow = flow4(40000, 80);
    assert_forwarded(&mut lb, 0, &flow, PROTO_TCP, &flow.frame(L4::Tcp(SYN), &[]));
}

#[test]
fn tcp4_ack_with_payload_follows_its_syn() {
    let mut lb = Lb::standard();
    let flow = flow4(40001, 80);
    let first = assert_forwarded(&mut lb, 0, &flow, PROTO_TCP, &flow.frame(L4::Tcp(SYN), &[]));
    let again = assert_forwarded(
        &mut lb,
        0,
        &flow,
        PROTO_TCP,
        &flow.frame(L4::Tcp(ACK), b"GET / HTTP/1.1\r\n\r\n"),
    );
    assert_eq!(first, again);
}

#[test]
fn tcp6_syn_and_ack_are_encapsulated_ip6ip6() {
    let mut lb = Lb::standard();
    let flow = flow6(40000, 80);
    let first = assert_forwarded(&mut lb, 2, &flow, PROTO_TCP, &flow.frame(L4::Tcp(SYN), &[]));
    let again = assert_forwarded(
        &mut lb,
        2,
        &flow,
        PROTO_TCP,
        &flow.frame(L4::Tcp(ACK), b"x"),
    );
    assert_eq!(first, again);
    assert!(first > 10, "an IPv6 VIP uses IPv6 backends");
}

#[test]
fn udp4_and_udp6_are_forwarded() {
    let mut lb = Lb::standard();
    let flow = flow4(50000, 53);
    assert_forwarded(&mut lb, 1, &flow, PROTO_UDP, &flow.frame(L4::Udp, b"query"));
    let flow = flow6(50000, 53);
    assert_forwarded(&mut lb, 3, &flow, PROTO_UDP, &flow.frame(L4::Udp, b"query"));
}

#[test]
fn tos_identification_and_df_are_copied_to_the_outer_header() {
    let mut lb = Lb::standard();
    let flow = flow4(40002, 80);
    let IpHeaders::Ipv4(mut ip, ext) = flow.ip_headers(IpNumber::TCP, 0) else {
        unreachable!()
    };
    ip.dscp = etherparse::IpDscp::try_new(46).expect("dscp");
    ip.ecn = etherparse::IpEcn::Ect0;
    ip.identification = 0xbeef;
    ip.dont_fragment = false;
    let frame = flow.frame_with_ip(IpHeaders::Ipv4(ip, ext), L4::Tcp(SYN), &[]);
    assert_forwarded(&mut lb, 0, &flow, PROTO_TCP, &frame);
}

#[test]
fn ipv4_options_ihl_6_and_15_are_skipped_and_kept() {
    let mut lb = Lb::standard();
    for (sport, options) in [
        (41000, Ipv4Options::from([1u8, 1, 1, 0])),
        (41001, Ipv4Options::from([1u8; 40])),
    ] {
        let flow = flow4(sport, 80);
        let IpHeaders::Ipv4(mut ip, ext) = flow.ip_headers(IpNumber::TCP, 0) else {
            unreachable!()
        };
        ip.options = options;
        let frame = flow.frame_with_ip(IpHeaders::Ipv4(ip, ext), L4::Tcp(SYN), &[]);
        assert_forwarded(&mut lb, 0, &flow, PROTO_TCP, &frame);
    }
}

#[test]
fn ipv6_extension_headers_are_walked() {
    let mut lb = Lb::standard();
    let flow = flow6(41002, 80);
    let IpHeaders::Ipv6(ip, _) = flow.ip_headers(IpNumber::TCP, 0) else {
        unreachable!()
    };
    let raw = |n: u8| Ipv6RawExtHeader::new_raw(IpNumber::TCP, &[n; 14]).expect("ext header");
    let exts = Ipv6Extensions {
        hop_by_hop_options: Some(raw(1)),
        destination_options: Some(raw(2)),
        routing: Some(Ipv6RoutingExtensions {
            routing: Ipv6RawExtHeader::new_raw(IpNumber::TCP, &[0, 0, 0, 0, 0, 0]).expect("rh"),
            final_destination_options: None,
        }),
        fragment: None,
        auth: Some(IpAuthHeader::new(IpNumber::TCP, 7, 1, &[0u8; 12]).expect("ah")),
    };
    let frame = flow.frame_with_ip(IpHeaders::Ipv6(ip, exts), L4::Tcp(SYN), &[]);
    assert_forwarded(&mut lb, 2, &flow, PROTO_TCP, &frame);
}

#[test]
fn the_largest_packet_that_fits_the_mtu_is_forwarded() {
    // The largest packet that still fits once encapsulated: IPv4 total length 1480 + 20
    // outer bytes = 1500 = MTU; IPv6 1460 + 40 (BR-18.T1).
    let mut lb = Lb::standard();
    let flow = flow4(41003, 80);
    let frame = flow.frame(L4::Tcp(ACK), &[0x5a; 1480 - 40]);
    assert_forwarded(&mut lb, 0, &flow, PROTO_TCP, &frame);
    let flow = flow6(41003, 80);
    let frame = flow.frame(L4::Tcp(ACK), &[0x5a; 1500 - 80 - 20]);
    assert_forwarded(&mut lb, 2, &flow, PROTO_TCP, &frame);
}

// ---- passed untouched ----

#[test]
fn non_vip_traffic_passes_byte_identical() {
    let mut lb = Lb::standard();
    let other4 = Flow::new(CLIENT4, 40000, Ipv4Addr::new(203, 0, 113, 99), 80);
    assert_verdict(
        &mut lb,
        &other4.frame(L4::Tcp(SYN), &[]),
        XDP_PASS,
        Reason::PassNonVip,
    );
    let other6 = Flow::new(CLIENT6, 40000, packets::backend6(7), 80);
    assert_verdict(
        &mut lb,
        &other6.frame(L4::Tcp(SYN), &[]),
        XDP_PASS,
        Reason::PassNonVip,
    );
}

#[test]
fn other_port_or_protocol_on_a_vip_address_passes() {
    let mut lb = Lb::standard();
    assert_verdict(
        &mut lb,
        &flow4(40000, 81).frame(L4::Tcp(SYN), &[]),
        XDP_PASS,
        Reason::PassNonVip,
    );
    // UDP to the TCP service's port, TCP to the UDP service's port.
    assert_verdict(
        &mut lb,
        &flow4(40000, 80).frame(L4::Udp, &[]),
        XDP_PASS,
        Reason::PassNonVip,
    );
    assert_verdict(
        &mut lb,
        &flow6(40000, 53).frame(L4::Tcp(SYN), &[]),
        XDP_PASS,
        Reason::PassNonVip,
    );
    // ICMP other than echo requests and errors (here a timestamp request, type 13).
    let mut icmp = Vec::new();
    PacketBuilder::ethernet2(packets::CLIENT_MAC, LB_MAC)
        .ipv4(CLIENT4.octets(), VIP4.octets(), 64)
        .icmpv4_raw(13, 0, [0; 4])
        .write(&mut icmp, &[0; 12])
        .expect("write");
    assert_verdict(&mut lb, &icmp, XDP_PASS, Reason::PassNonVip);
}

#[test]
fn arp_and_ipv6_neighbour_discovery_pass() {
    let mut lb = Lb::standard();
    assert_verdict(
        &mut lb,
        &packets::arp_request(CLIENT4, VIP4),
        XDP_PASS,
        Reason::PassNotIp,
    );
    let mut ns = Vec::new();
    PacketBuilder::ethernet2(packets::CLIENT_MAC, [0x33, 0x33, 0xff, 0, 0, 0x10])
        .ipv6(CLIENT6.octets(), VIP6.octets(), 255)
        .icmpv6(etherparse::Icmpv6Type::Unknown {
            type_u8: 135,
            code_u8: 0,
            bytes5to8: [0; 4],
        })
        .write(&mut ns, &VIP6.octets())
        .expect("write");
    assert_verdict(&mut lb, &ns, XDP_PASS, Reason::PassNonVip);
}

#[test]
fn single_802_1ad_tags_pass_unparsed() {
    // A single 802.1ad (S-VLAN) tag is not parsed at offset 14 (802.1Q tags are
    // balanced: see the datapath tests).
    let mut lb = Lb::standard();
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(packets::CLIENT_MAC, LB_MAC)
        .single_vlan(etherparse::VlanId::try_new(100).expect("vid"))
        .ipv4(CLIENT4.octets(), VIP4.octets(), 64)
        .tcp(40000, 80, 1000, 64240)
        .syn()
        .write(&mut frame, &[])
        .expect("write");
    frame[12..14].copy_from_slice(&[0x88, 0xa8]);
    assert_verdict(&mut lb, &frame, XDP_PASS, Reason::PassVlan);
}

#[test]
fn esp_and_over_long_extension_chains_pass_and_are_counted() {
    let mut lb = Lb::standard();
    let flow = flow6(41004, 80);
    let IpHeaders::Ipv6(mut ip, _) = flow.ip_headers(IpNumber::TCP, 0) else {
        unreachable!()
    };
    // ESP: the program cannot see past it.
    ip.next_header = IpNumber::ENCAPSULATING_SECURITY_PAYLOAD;
    ip.payload_length = 16;
    let mut esp = Vec::new();
    etherparse::Ethernet2Header {
        destination: LB_MAC,
        source: packets::CLIENT_MAC,
        ether_type: etherparse::EtherType::IPV6,
    }
    .write(&mut esp)
    .expect("write");
    ip.write(&mut esp).expect("write");
    esp.extend_from_slice(&[0u8; 16]);
    assert_verdict(&mut lb, &esp, XDP_PASS, Reason::PassIpv6ExtHdr);

    // Seven destination-options headers: one more than the walk allows.
    let mut chain = Vec::new();
    for i in 0..7 {
        let next = if i == 6 {
            IpNumber::TCP
        } else {
            IpNumber::IPV6_DESTINATION_OPTIONS
        };
        chain.extend_from_slice(
            &Ipv6RawExtHeader::new_raw(next, &[0u8; 6])
                .expect("ext")
                .to_bytes(),
        );
    }
    let tcp = etherparse::TcpHeader::new(41004, 80, 1, 1000);
    ip.next_header = IpNumber::IPV6_DESTINATION_OPTIONS;
    ip.payload_length = u16::try_from(chain.len() + tcp.header_len()).expect("fits");
    let mut frame = Vec::new();
    etherparse::Ethernet2Header {
        destination: LB_MAC,
        source: packets::CLIENT_MAC,
        ether_type: etherparse::EtherType::IPV6,
    }
    .write(&mut frame)
    .expect("write");
    ip.write(&mut frame).expect("write");
    frame.extend_from_slice(&chain);
    tcp.write(&mut frame).expect("write");
    assert_verdict(&mut lb, &frame, XDP_PASS, Reason::PassIpv6ExtHdr);
}

// ---- dropped and counted ----

#[test]
fn truncation_at_every_header_boundary_never_aborts() {
    // Every prefix of a v4/v6 TCP SYN and a UDP datagram gets a counted verdict, never
    // XDP_ABORTED (BR-25.T3).
    let mut lb = Lb::standard();
    let frames = [
        flow4(42000, 80).frame(L4::Tcp(SYN), &[]),
        flow6(42000, 80).frame(L4::Tcp(SYN), &[]),
        flow4(42000, 53).frame(L4::Udp, b"abcd"),
    ];
    for frame in &frames {
        for len in 0..frame.len() {
            let before = lb.global();
            let out = lb.dp.test_run(&frame[..len]);
            let Ok(out) = out else {
                // The kernel refuses frames shorter than an Ethernet header itself.
                assert!(len < 14, "test_run refused a {len}-byte frame");
                continue;
            };
            let expected = if len < 14 {
                Reason::DropMalformedL2
            } else {
                Reason::DropMalformedL3
            };
            assert_eq!(out.action, XDP_DROP, "{len}-byte prefix");
            assert_eq!(
                lb.global().get(expected),
                before.get(expected) + 1,
                "{len}-byte prefix"
            );
        }
    }
}

#[test]
fn truncated_l4_header_inside_the_ip_length_is_dropped_for_vips_only() {
    let mut lb = Lb::standard();
    let make = |dst: Ipv4Addr| {
        let flow = Flow::new(CLIENT4, 42001, dst, 80);
        let mut frame = flow.frame(L4::Tcp(SYN), &[]);
        // Keep 10 of the 20 TCP bytes and say so in the IP total length.
        frame.truncate(14 + 20 + 10);
        frame[16..18].copy_from_slice(&30u16.to_be_bytes());
        let IpHeaders::Ipv4(mut ip, _) = IpHeaders::from_slice(&frame[14..]).expect("ip").0 else {
            unreachable!()
        };
        ip.header_checksum = ip.calc_header_checksum();
        frame[14..34].copy_from_slice(&ip.to_bytes());
        frame
    };
    assert_verdict(&mut lb, &make(VIP4), XDP_DROP, Reason::DropMalformedL4);
    assert_verdict(
        &mut lb,
        &make(Ipv4Addr::new(203, 0, 113, 77)),
        XDP_PASS,
        Reason::PassNonVip,
    );
}

#[test]
fn malformed_ipv4_headers_are_dropped() {
    let mut lb = Lb::standard();
    let good = flow4(42002, 80).frame(L4::Tcp(SYN), &[]);
    let mut ihl4 = good.clone();
    ihl4[14] = 0x44;
    assert_verdict(&mut lb, &ihl4, XDP_DROP, Reason::DropMalformedL3);
    let mut version6 = good.clone();
    version6[14] = 0x65;
    assert_verdict(&mut lb, &version6, XDP_DROP, Reason::DropMalformedL3);
    let mut too_long = good;
    too_long[16..18].copy_from_slice(&41u16.to_be_bytes());
    assert_verdict(&mut lb, &too_long, XDP_DROP, Reason::DropMalformedL3);
}

#[test]
fn later_fragments_without_their_first_are_dropped_others_pass() {
    let mut lb = Lb::standard();
    let fragment = |dst: Ipv4Addr, more: bool, offset: u16| {
        let flow = Flow::new(CLIENT4, 42003, dst, 80);
        let IpHeaders::Ipv4(mut ip, ext) = flow.ip_headers(IpNumber::TCP, 0) else {
            unreachable!()
        };
        ip.dont_fragment = false;
        ip.more_fragments = more;
        ip.fragment_offset = etherparse::IpFragOffset::try_new(offset).expect("offset");
        flow.frame_with_ip(IpHeaders::Ipv4(ip, ext), L4::Tcp(SYN), &[0; 16])
    };
    assert_verdict(
        &mut lb,
        &fragment(VIP4, false, 185),
        XDP_DROP,
        Reason::DropFragment,
    );
    assert_verdict(
        &mut lb,
        &fragment(Ipv4Addr::new(203, 0, 113, 77), true, 0),
        XDP_PASS,
        Reason::PassNonVip,
    );
    // IPv6 fragment header.
    let flow = flow6(42003, 80);
    let IpHeaders::Ipv6(ip, _) = flow.ip_headers(IpNumber::TCP, 0) else {
        unreachable!()
    };
    let exts = Ipv6Extensions {
        fragment: Some(Ipv6FragmentHeader::new(
            IpNumber::TCP,
            etherparse::IpFragOffset::try_new(10).expect("offset"),
            false,
            99,
        )),
        ..Default::default()
    };
    let frame = flow.frame_with_ip(IpHeaders::Ipv6(ip, exts), L4::Tcp(SYN), &[0; 16]);
    assert_verdict(&mut lb, &frame, XDP_DROP, Reason::DropFragment);
}

#[test]
fn oversized_after_encapsulation_is_dropped_without_icmp_answers() {
    // BR-18.T2 / T4 with `icmp.too_big = false` (the answers: see the datapath tests).
    let mut lb = Lb::standard();
    let mut cfg = default_config();
    cfg.flags &= !CONFIG_ICMP_TOO_BIG;
    lb.dp.set_config(&cfg).expect("config");
    let frame = flow4(42004, 80).frame(L4::Tcp(ACK), &[0; 1481 - 40]);
    assert_verdict(&mut lb, &frame, XDP_DROP, Reason::DropTooBig);
    let frame = flow6(42004, 80).frame(L4::Tcp(ACK), &[0; 1500 - 80 - 20 + 1]);
    assert_verdict(&mut lb, &frame, XDP_DROP, Reason::DropTooBig);
    // DF clear does not make it fit either: XDP cannot fragment (BR-18.T5).
    let flow = flow4(42005, 80);
    let IpHeaders::Ipv4(mut ip, ext) = flow.ip_headers(IpNumber::TCP, 0) else {
        unreachable!()
    };
    ip.dont_fragment = false;
    let frame = flow.frame_with_ip(IpHeaders::Ipv4(ip, ext), L4::Tcp(ACK), &[0; 1460]);
    assert_verdict(&mut lb, &frame, XDP_DROP, Reason::DropTooBig);
}

#[test]
fn vip_without_backends_drops_and_counts() {
    // A VIP without backends drops and counts its packets: not XDP_PASS (the host would
    // route them on), not XDP_TX (BR-08.T1).
    let mut lb = Lb::standard();
    for vip_id in 0..4 {
        lb.table(vip_id, &[0; 65_537]);
    }
    assert_verdict(
        &mut lb,
        &flow4(42006, 80).frame(L4::Tcp(SYN), &[]),
        XDP_DROP,
        Reason::DropNoBackend,
    );
    assert_verdict(
        &mut lb,
        &flow6(42006, 80).frame(L4::Tcp(SYN), &[]),
        XDP_DROP,
        Reason::DropNoBackend,
    );
    assert_verdict(
        &mut lb,
        &flow4(42006, 53).frame(L4::Udp, &[]),
        XDP_DROP,
        Reason::DropNoBackend,
    );
    assert_eq!(lb.dp.vip_stats(0).expect("stats").drops, 1);
}

#[test]
fn corrupt_or_missing_configuration_drops() {
    let mut lb = Lb::standard();
    let syn = flow4(42007, 80).frame(L4::Tcp(SYN), &[]);
    // A table whose size field is 0 (in BPF a modulo by zero returns the dividend, a
    // slot outside the table) and one larger than its map: dropped as bad configuration
    // (BR-04.T9).
    lb.dp
        .install_raw_table(0, 0, &[1, 1, 1])
        .expect("raw table");
    assert_verdict(&mut lb, &syn, XDP_DROP, Reason::DropBadConfig);
    lb.dp
        .install_raw_table(0, 1000, &[1, 1, 1])
        .expect("raw table");
    assert_verdict(&mut lb, &syn, XDP_DROP, Reason::DropBadConfig);
    lb.table(0, &round_robin(7, &[1, 2, 3]));
    // Configuration not marked valid.
    let mut cfg = default_config();
    cfg.flags &= !CONFIG_VALID;
    lb.dp.set_config(&cfg).expect("config");
    assert_verdict(&mut lb, &syn, XDP_DROP, Reason::DropBadConfig);
    lb.dp.set_config(&default_config()).expect("config");
    // An IPv6 VIP with an IPv4 backend (no IPv6-in-IPv4).
    lb.table(2, &[1; 7]);
    let syn6 = flow6(42007, 80).frame(L4::Tcp(SYN), &[]);
    assert_verdict(&mut lb, &syn6, XDP_DROP, Reason::DropBadConfig);
}

#[test]
fn per_vip_and_per_backend_counters_follow_the_packets() {
    let mut lb = Lb::standard();
    let mut sent_to = std::collections::HashMap::<u32, (u64, u64)>::new();
    for sport in 43000..43100 {
        let flow = flow4(sport, 80);
        let frame = flow.frame(L4::Tcp(SYN), &[]);
        let id = assert_forwarded(&mut lb, 0, &flow, PROTO_TCP, &frame);
        let e = sent_to.entry(id).or_default();
        e.0 += 1;
        e.1 += frame.len() as u64;
    }
    let vip = lb.dp.vip_stats(0).expect("vip stats");
    assert_eq!(
        (vip.packets, vip.new_flows, vip.ct_hits, vip.drops),
        (100, 100, 0, 0)
    );
    assert_eq!(vip.bytes, sent_to.values().map(|v| v.1).sum::<u64>());
    for (id, (packets, bytes)) in sent_to {
        let stats = lb.dp.backend_stats(id).expect("backend stats");
        assert_eq!(
            (stats.packets, stats.bytes),
            (packets, bytes),
            "backend {id}"
        );
    }
}

#[test]
fn clearing_a_backends_counters_clears_what_was_counted_and_nothing_else() {
    // A created data plane skips the clearing of ids never written to `BACKENDS`
    // (their counters are zero): an id that was written and counted must still be
    // cleared, and a neighbour id left alone.
    let mut lb = Lb::standard();
    let mut sent_to = std::collections::HashMap::<u32, u64>::new();
    for sport in 43_200..43_300 {
        let flow = flow4(sport, 80);
        let frame = flow.frame(L4::Tcp(SYN), &[]);
        *sent_to
            .entry(assert_forwarded(&mut lb, 0, &flow, PROTO_TCP, &frame))
            .or_default() += 1;
    }
    let mut ids: Vec<u32> = sent_to.keys().copied().collect();
    ids.sort_unstable();
    let (cleared, kept) = (ids[0], ids[1]);
    assert!(lb.dp.backend_stats(cleared).expect("stats").packets > 0);
    lb.dp.reset_backend_stats(cleared).expect("reset");
    assert_eq!(
        lb.dp.backend_stats(cleared).expect("stats"),
        lb_common::stats::BackendStats::default()
    );
    assert_eq!(
        lb.dp.backend_stats(kept).expect("stats").packets,
        sent_to[&kept]
    );
    // An id never written: zero before and after.
    let unused = 60_000;
    lb.dp.reset_backend_stats(unused).expect("reset");
    assert_eq!(
        lb.dp.backend_stats(unused).expect("stats"),
        lb_common::stats::BackendStats::default()
    );
}

#[test]
fn backend_entries_written_in_one_batch_read_back_as_written() {
    // The controller writes a change's backend entries in one BPF_MAP_UPDATE_BATCH.
    let mut lb = Lb::standard();
    let entries: Vec<(u32, lb_common::types::BackendEntry)> = (0..700_u32)
        .map(|i| {
            let id = 1_000 + i * 7;
            let mut entry = lb.dp.backend(id).expect("backend");
            entry.family = lb_common::types::FAMILY_V4;
            entry.state = if i % 2 == 0 {
                lb_common::types::BACKEND_ACTIVE
            } else {
                lb_common::types::BACKEND_DRAINING
            };
            entry.addr[..4].copy_from_slice(&(0xc633_6400 + i).to_be_bytes());
            (id, entry)
        })
        .collect();
    lb.dp.set_backends(&entries).expect("batch");
    for (id, entry) in &entries {
        assert_eq!(lb.dp.backend(*id).expect("backend"), *entry, "id {id}");
    }
    // A batch-written id counts its packets, and clearing its counters clears them
    // (the created data plane knows the id is no longer untouched).
    let (id, _) = entries[0];
    lb.table(0, &[id; 7]);
    let frame = flow4(43_400, 80).frame(L4::Tcp(SYN), &[]);
    assert_eq!(lb.send(&frame).0, XDP_TX);
    assert_eq!(lb.dp.backend_stats(id).expect("stats").packets, 1);
    lb.dp.reset_backend_stats(id).expect("reset");
    assert_eq!(lb.dp.backend_stats(id).expect("stats").packets, 0);
    assert!(
        lb.dp
            .set_backends(&[(lb_common::maps::MAX_BACKENDS, entries[0].1)])
            .is_err(),
        "an id beyond the map is refused"
    );
}

/// Lets the calling thread run on every CPU of the machine again (undoing
/// [`Lb::new`]'s pin), returning the CPU it was pinned to.
fn unpin() -> usize {
    // SAFETY: sched_getcpu has no preconditions; cpu_set_t is plain data that
    // CPU_SET writes inside and sched_setaffinity reads.
    unsafe {
        let cpu = usize::try_from(libc::sched_getcpu()).unwrap_or(0);
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let cpus = usize::try_from(libc::sysconf(libc::_SC_NPROCESSORS_ONLN)).unwrap_or(1);
        for c in 0..cpus {
            libc::CPU_SET(c, &mut set);
        }
        assert_eq!(
            libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set),
            0,
            "unpin the test thread"
        );
        cpu
    }
}

/// A change of many new VIPs (a start): `prepare_tables` creates their buffers on
/// every CPU the thread may use (`lb-dataplane/src/tables.rs`, `create_buffers`), and
/// each VIP's install then writes its own buffer and reads back its own table.
#[test]
fn many_buffers_created_side_by_side_each_hold_their_vips_table() {
    let mut lb = Lb::new();
    let size = 1_009_u32;
    let vips: Vec<u32> = (10..74).collect();
    let tables: Vec<(u32, u32)> = vips.iter().map(|&v| (v, size)).collect();
    let cpu = unpin();
    lb.dp.prepare_tables(&tables).expect("prepare the buffers");
    lb_tests::pin_to_cpu(cpu).expect("pin the test thread again");
    let table_of = |v: u32| -> Vec<u32> { (0..size).map(|s| 1 + (v + s) % 13).collect() };
    for &v in &vips {
        let table = lb_dataplane::TableImage {
            generation: v,
            slots: &table_of(v),
        };
        lb.dp.install_table(v, &table).expect("install");
    }
    for &v in &vips {
        let read = lb.dp.table(v).expect("read").expect("installed");
        assert_eq!(read.generation, v, "VIP id {v}'s header");
        assert!(read.slots == table_of(v), "VIP id {v}'s slots");
    }
}
