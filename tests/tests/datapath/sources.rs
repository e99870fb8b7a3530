//! Allowed source prefixes per VIP: clients outside are refused before any conntrack
//! work, and a list narrowed while flows run stops the removed prefixes' flows.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use etherparse::{Icmpv4Type, IpNumber, Ipv4Header, PacketBuilder, TcpHeader, icmpv4};
use lb_common::{
    stats::Reason,
    types::{CONFIG_SOURCE_RANGES, PROTO_TCP, PROTO_UDP},
};
use lb_dataplane::Dataplane as _;
use lb_dataplane::prefix::Prefix;
use lb_tests::{
    fixture::{Lb, XDP_DROP, XDP_PASS, flow_key, vip_key},
    packets::{ACK, CLIENT_MAC, Flow, L4, LB_MAC, SYN, VIP4, VIP6},
};

use super::{expect, expect_forwarded};

fn prefixes(texts: &[&str]) -> Vec<Prefix> {
    texts.iter().map(|t| t.parse().expect("prefix")).collect()
}

/// The standard set-up with the check on and VIP4:80/tcp (id 0) and VIP6:80/tcp (id 2)
/// limited to `v4` and `v6`.
fn restricted(v4: &[&str], v6: &[&str]) -> Lb {
    let mut lb = Lb::standard();
    lb.configure(|c| c.flags |= CONFIG_SOURCE_RANGES);
    lb.dp
        .set_sources(&vip_key(VIP4.into(), 80, PROTO_TCP), 0, &prefixes(v4))
        .expect("v4 list");
    lb.dp
        .set_sources(&vip_key(VIP6.into(), 80, PROTO_TCP), 2, &prefixes(v6))
        .expect("v6 list");
    lb
}

fn syn(src: impl Into<IpAddr>, sport: u16, dst: impl Into<IpAddr>, dport: u16) -> (Flow, Vec<u8>) {
    let flow = Flow::new(src, sport, dst, dport);
    let frame = flow.frame(L4::Tcp(SYN), &[]);
    (flow, frame)
}

#[test]
fn clients_inside_the_list_are_served_and_others_refused_v4_and_v6() {
    let mut lb = restricted(&["192.0.2.0/25", "198.18.0.0/15"], &["2001:db8:c::/64"]);
    for (vip_id, src) in [
        (0, IpAddr::from(Ipv4Addr::new(192, 0, 2, 10))),
        (0, Ipv4Addr::new(198, 19, 255, 1).into()),
        (2, "2001:db8:c::10".parse().expect("addr")),
    ] {
        let dst: IpAddr = if src.is_ipv4() {
            VIP4.into()
        } else {
            VIP6.into()
        };
        let (flow, frame) = syn(src, 47000, dst, 80);
        let id = lb.predict(vip_id, &flow, PROTO_TCP);
        expect_forwarded(&mut lb, &frame, id, Reason::TxEncap);
    }
    let before = lb.dp.vip_stats(0).expect("stats");
    for src in [
        IpAddr::from(Ipv4Addr::new(192, 0, 2, 200)),
        Ipv6Addr::new(0x2001, 0xdb8, 0xd, 0, 0, 0, 0, 1).into(),
    ] {
        let dst: IpAddr = if src.is_ipv4() {
            VIP4.into()
        } else {
            VIP6.into()
        };
        let (flow, frame) = syn(src, 47001, dst, 80);
        expect(&mut lb, &frame, XDP_DROP, Reason::DropSourceRefused);
        let key = flow_key(&flow, PROTO_TCP);
        assert_eq!(lb.dp.lookup_flow(&key).expect("lookup"), None, "no state");
    }
    assert_eq!(
        lb.dp.vip_stats(0).expect("stats"),
        before,
        "before any VIP work"
    );
    // A VIP without a list (VIP4:53/udp), and traffic for no VIP, are not affected.
    let udp = Flow::new(Ipv4Addr::new(192, 0, 2, 200), 47002, VIP4, 53);
    let id = lb.predict(1, &udp, PROTO_UDP);
    expect_forwarded(&mut lb, &udp.frame(L4::Udp, b"q"), id, Reason::TxEncap);
    let (_, other) = syn(Ipv4Addr::new(192, 0, 2, 200), 47003, VIP4, 81);
    expect(&mut lb, &other, XDP_PASS, Reason::PassNonVip);
}

#[test]
fn a_narrowed_list_stops_established_flows_of_removed_prefixes() {
    let mut lb = restricted(&["192.0.2.0/24"], &["2001:db8:c::/64"]);
    let kept = Flow::new(Ipv4Addr::new(192, 0, 2, 10), 47100, VIP4, 80);
    let cut = Flow::new(Ipv4Addr::new(192, 0, 2, 200), 47100, VIP4, 80);
    let mut owners = Vec::new();
    for flow in [&kept, &cut] {
        let id = lb.predict(0, flow, PROTO_TCP);
        expect_forwarded(&mut lb, &flow.frame(L4::Tcp(SYN), &[]), id, Reason::TxEncap);
        expect_forwarded(&mut lb, &flow.frame(L4::Tcp(ACK), &[]), id, Reason::TxEncap);
        owners.push(id);
    }
    let key = vip_key(VIP4.into(), 80, PROTO_TCP);
    lb.dp
        .set_sources(&key, 0, &prefixes(&["192.0.2.0/25"]))
        .expect("narrow");
    expect_forwarded(
        &mut lb,
        &kept.frame(L4::Tcp(ACK), b"more"),
        owners[0],
        Reason::TxEncap,
    );
    expect(
        &mut lb,
        &cut.frame(L4::Tcp(ACK), b"more"),
        XDP_DROP,
        Reason::DropSourceRefused,
    );
    // Lifting the list serves the flow again, from its conntrack pin.
    lb.dp.set_sources(&key, 0, &[]).expect("lift");
    expect_forwarded(
        &mut lb,
        &cut.frame(L4::Tcp(ACK), b"again"),
        owners[1],
        Reason::TxEncap,
    );
}

#[test]
fn an_icmp_error_about_a_refused_clients_flow_is_refused_too() {
    let mut lb = restricted(&["192.0.2.0/25"], &["2001:db8:c::/64"]);
    let client = Ipv4Addr::new(192, 0, 2, 200);
    let mut quoted = Vec::new();
    let mut h =
        Ipv4Header::new(1360, 63, IpNumber::TCP, VIP4.octets(), client.octets()).expect("ip");
    h.header_checksum = h.calc_header_checksum();
    h.write(&mut quoted).expect("write");
    TcpHeader::new(80, 47200, 5001, 64240)
        .write(&mut quoted)
        .expect("write");
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(CLIENT_MAC, LB_MAC)
        .ipv4([192, 0, 2, 1], VIP4.octets(), 64)
        .icmpv4(Icmpv4Type::DestinationUnreachable(
            icmpv4::DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: 1400 },
        ))
        .write(&mut frame, &quoted)
        .expect("write");
    expect(&mut lb, &frame, XDP_DROP, Reason::DropSourceRefused);
}
