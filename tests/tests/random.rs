//! Randomised BPF_PROG_TEST_RUN checks with fixed seeds: the outer IPv4 checksum is
//! valid for every input, userspace predicts the data plane's backend choice exactly,
//! and no input makes the program abort.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use etherparse::{IpHeaders, IpNumber, Ipv4HeaderSlice};
use lb_common::{
    stats::Reason,
    types::{PROTO_TCP, PROTO_UDP},
};
use lb_tests::{
    fixture::{Lb, XDP_ABORTED, XDP_DROP, XDP_PASS, XDP_TX},
    packets::{self, CLIENT6, Flow, L4, LB_MAC, SYN, TcpFlags, VIP4, VIP6, encapsulated},
};
use rand::{Rng as _, SeedableRng as _, rngs::StdRng};

#[test]
fn outer_ipv4_checksum_is_valid_for_10000_random_packets() {
    let mut lb = Lb::standard();
    let mut rng = StdRng::seed_from_u64(1);
    for i in 0..10_000 {
        let src = Ipv4Addr::from(rng.random::<u32>());
        let flow = Flow::new(src, rng.random(), VIP4, 80);
        let IpHeaders::Ipv4(mut ip, ext) = flow.ip_headers(IpNumber::TCP, 0) else {
            unreachable!()
        };
        ip.dscp = etherparse::IpDscp::try_new(rng.random_range(0..64)).expect("dscp");
        ip.identification = rng.random();
        ip.dont_fragment = rng.random();
        ip.time_to_live = rng.random();
        let payload = vec![0xa5; rng.random_range(0..1400)];
        let flags = TcpFlags {
            syn: rng.random(),
            ack: rng.random(),
            rst: false,
            fin: false,
        };
        let frame = flow.frame_with_ip(IpHeaders::Ipv4(ip, ext), L4::Tcp(flags), &payload);
        let out = lb.run(&frame);
        assert_eq!(out.action, XDP_TX, "packet {i}");
        let outer = Ipv4HeaderSlice::from_slice(&out.data[14..]).expect("outer header");
        let header = outer.to_header();
        assert_eq!(
            header.header_checksum,
            header.calc_header_checksum(),
            "packet {i}: outer checksum"
        );
        assert_eq!(
            &out.data[34..],
            &frame[14..],
            "packet {i}: inner packet unchanged"
        );
        let dst = packets::outer_destination(&out.data).expect("outer destination");
        assert_eq!(
            out.data,
            encapsulated(&frame, dst, packets::GW_MAC, LB_MAC),
            "packet {i}"
        );
    }
}

#[test]
fn userspace_predicts_the_backend_of_1000_random_flows() {
    let mut lb = Lb::standard();
    let mut rng = StdRng::seed_from_u64(2);
    for i in 0..1_000 {
        let v6 = i % 2 == 1;
        let udp = i % 4 >= 2;
        let (src, dst): (IpAddr, IpAddr) = if v6 {
            (Ipv6Addr::from(rng.random::<u128>()).into(), VIP6.into())
        } else {
            (Ipv4Addr::from(rng.random::<u32>()).into(), VIP4.into())
        };
        let flow = Flow::new(src, rng.random(), dst, if udp { 53 } else { 80 });
        let vip_id = u32::from(v6) * 2 + u32::from(udp);
        let proto = if udp { PROTO_UDP } else { PROTO_TCP };
        let predicted = lb.predict(vip_id, &flow, proto);
        let l4 = if udp { L4::Udp } else { L4::Tcp(SYN) };
        let (action, dst) = lb.send(&flow.frame(l4, &[]));
        assert_eq!(action, XDP_TX, "flow {i}");
        #[expect(clippy::cast_possible_truncation, reason = "fixture ids are small")]
        let expected: IpAddr = if v6 {
            packets::backend6(predicted as u8 - 10).into()
        } else {
            packets::backend4(predicted as u8).into()
        };
        assert_eq!(dst, Some(expected), "flow {i}: {flow:?}");
    }
}

#[test]
fn no_input_aborts() {
    // Random bytes, and valid frames with random bytes flipped, behind Ethernet types
    // the program parses.
    let mut lb = Lb::standard();
    let mut rng = StdRng::seed_from_u64(3);
    let templates = [
        Flow::new(packets::CLIENT4, 1, VIP4, 80).frame(L4::Tcp(SYN), b"x"),
        Flow::new(CLIENT6, 1, VIP6, 80).frame(L4::Tcp(SYN), b"x"),
        Flow::new(packets::CLIENT4, 1, VIP4, 53).frame(L4::Udp, b"x"),
    ];
    let mut actions = [0u64; 5];
    for i in 0..20_000 {
        let frame = if i % 4 == 0 {
            let len = rng.random_range(14..200);
            let mut f: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            let types: [[u8; 2]; 3] = [[0x08, 0x00], [0x86, 0xdd], [0x81, 0x00]];
            f[12..14].copy_from_slice(&types[rng.random_range(0..3)]);
            f
        } else {
            let mut f = templates[i % 3].clone();
            for _ in 0..rng.random_range(1..4) {
                let at = rng.random_range(14..f.len());
                f[at] = rng.random();
            }
            f.truncate(rng.random_range(14..=f.len()));
            f
        };
        let out = lb.run(&frame);
        assert_ne!(out.action, XDP_ABORTED, "frame {frame:02x?}");
        assert!(
            [XDP_DROP, XDP_PASS, XDP_TX].contains(&out.action),
            "unexpected action {}",
            out.action
        );
        actions[out.action as usize] += 1;
    }
    let g = lb.global();
    assert_eq!(g.total(), 20_000, "one reason per packet");
    assert!(actions[XDP_TX as usize] > 0 && actions[XDP_DROP as usize] > 0);
    assert!(g.get(Reason::DropMalformedL3) > 0);
}
