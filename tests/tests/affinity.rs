//! Client affinity (`vip.persistence_timeout_secs`, IPVS persistence) in the real
//! program, through `BPF_PROG_TEST_RUN`, with exact output bytes: a client's new
//! connections stay on its backend across a table change until it is idle for the
//! timeout; a drained backend keeps its connections but gets no new affinity client;
//! an IPv6 /64 is one client; `lb flow`'s reading of the pin agrees with the program;
//! the daemon's conntrack walk keeps a busy client's pin alive past the timeout; an ICMP
//! error about a client's flow without a conntrack pin follows the client's pin.

use std::net::{IpAddr, Ipv6Addr};

use etherparse::{
    Icmpv4Type, IpNumber, Ipv4Header, PacketBuilder, TcpHeader, icmpv4::DestUnreachableHeader,
};

use lb_common::{
    hash_fields::{Fields, HashFields},
    stats::Reason,
    types::{BACKEND_ACTIVE, BACKEND_DRAINING, PROTO_TCP, PROTO_UDP},
};
use lb_dataplane::{Dataplane as _, WalkSettings};
use lb_maglev::flow::table_slot_of;
use lb_tests::{
    fixture::{Lb, SEED, XDP_TX, flow_key, round_robin, vip_key},
    packets::{
        ACK, CLIENT_MAC, CLIENT4, CLIENT6, Flow, GW_MAC, L4, LB_MAC, RST, SYN, VIP4, VIP6,
        backend4, backend6, encapsulated,
    },
};

/// Table size: small, so a rotation of the owners moves every slot.
const M: usize = 31;
/// The VIPs' affinity timeout (s).
const TIMEOUT: u32 = 300;

/// VIP4:80/tcp (id 0) and VIP4:53/udp (id 1) over backends 1..=3, VIP6:80/tcp (id 2)
/// over 11..=13 (IPv6), round-robin over `M` slots; each hashing `src` (IPv6: the /64)
/// with affinity timeout `secs` (0: none).
fn lb(secs: u32) -> Lb {
    let mut lb = Lb::new();
    lb.backends(3, false);
    for k in 1..=3u8 {
        lb.backend(10 + u32::from(k), backend6(k), BACKEND_ACTIVE);
    }
    lb.table(0, &round_robin(M, &[1, 2, 3]));
    lb.table(1, &round_robin(M, &[1, 2, 3]));
    lb.table(2, &round_robin(M, &[11, 12, 13]));
    let vips = [
        (IpAddr::from(VIP4), 80, PROTO_TCP, 0),
        (IpAddr::from(VIP4), 53, PROTO_UDP, 0),
        (IpAddr::from(VIP6), 80, PROTO_TCP, 64),
    ];
    for (id, (addr, port, proto, prefix)) in (0u32..).zip(vips) {
        let h = HashFields {
            fields: Fields::Src,
            prefix,
            affinity_secs: secs,
        };
        lb.dp
            .set_hash_fields(&vip_key(addr, port, proto), id, h)
            .expect("hash fields");
        lb.vip(id, addr, port, proto);
        assert_eq!(lb.dp.hash_fields(id), h);
    }
    lb
}

fn backend_ip(id: u32) -> IpAddr {
    let k = u8::try_from(id % 10).expect("small");
    if id > 10 {
        backend6(k).into()
    } else {
        backend4(k).into()
    }
}

/// The backend the VIP's current table gives `flow` (hash fields `src`, `prefix`).
fn table_choice(lb: &Lb, vip_id: u32, flow: &Flow, proto: u8, prefix: u8) -> u32 {
    let table = lb.dp.table(vip_id).expect("read").expect("a table");
    let size = u32::try_from(table.slots.len()).expect("fits");
    let h = HashFields {
        fields: Fields::Src,
        prefix,
        affinity_secs: 0,
    };
    let slot = table_slot_of(&flow_key(flow, proto), h, SEED, size).expect("slot");
    table.slots[slot as usize]
}

/// Sends `frame` and checks it leaves for backend `id` with exactly the expected bytes.
fn forwarded_to(lb: &mut Lb, frame: &[u8], id: u32) {
    let out = lb.run(frame);
    assert_eq!(out.action, XDP_TX, "global: {:?}", lb.global());
    assert_eq!(
        out.data,
        encapsulated(frame, backend_ip(id), GW_MAC, LB_MAC),
        "to backend {id}"
    );
}

/// Opens a connection (SYN, then the handshake's ACK) of `flow`, checking both go to `id`.
fn connect(lb: &mut Lb, flow: &Flow, id: u32) {
    forwarded_to(lb, &flow.frame(L4::Tcp(SYN), b""), id);
    forwarded_to(lb, &flow.frame(L4::Tcp(ACK), b"x"), id);
}

/// A table of `M` slots over `ids` in which `flow`'s slot is not owned by `not`.
fn table_moving(flow: &Flow, proto: u8, prefix: u8, ids: &[u32], not: u32) -> Vec<u32> {
    let h = HashFields {
        fields: Fields::Src,
        prefix,
        affinity_secs: 0,
    };
    let m = u32::try_from(M).expect("fits");
    let slot = table_slot_of(&flow_key(flow, proto), h, SEED, m).expect("slot") as usize;
    (0..ids.len())
        .map(|r| {
            let mut rotated = ids.to_vec();
            rotated.rotate_left(r);
            round_robin(M, &rotated)
        })
        .find(|t| t[slot] != not)
        .expect("a rotation moves the slot")
}

#[test]
fn a_clients_new_connections_stay_on_its_backend_across_a_table_change() {
    let mut lb = lb(TIMEOUT);
    let first = Flow::new(CLIENT4, 40_000, VIP4, 80);
    let b = table_choice(&lb, 0, &first, PROTO_TCP, 0);
    connect(&mut lb, &first, b);
    let pin = lb
        .dp
        .lookup_affinity(&flow_key(&first, PROTO_TCP))
        .expect("read")
        .expect("the client has a pin");
    assert_eq!(
        (pin.backend_id, pin.decides, pin.timeout_secs),
        (b, true, TIMEOUT)
    );

    lb.table(0, &table_moving(&first, PROTO_TCP, 0, &[1, 2, 3], b));
    let moved = Flow::new(CLIENT4, 40_001, VIP4, 80);
    assert_ne!(
        table_choice(&lb, 0, &moved, PROTO_TCP, 0),
        b,
        "the table moved it"
    );
    let new_flows = lb.dp.vip_stats(0).expect("stats").new_flows;
    for port in 40_001..40_020 {
        connect(&mut lb, &Flow::new(CLIENT4, port, VIP4, 80), b);
    }
    assert_eq!(
        lb.dp.vip_stats(0).expect("stats").new_flows,
        new_flows + 19,
        "each is a new flow"
    );
    // The first connection keeps its pin, as before.
    forwarded_to(&mut lb, &first.frame(L4::Tcp(ACK), b"y"), b);
    // Another client follows the new table.
    let other = Flow::new([192, 0, 2, 77], 40_000, VIP4, 80);
    let want = table_choice(&lb, 0, &other, PROTO_TCP, 0);
    connect(&mut lb, &other, want);
}

#[test]
fn without_a_timeout_the_table_change_moves_the_clients_new_connections() {
    let mut lb = lb(0);
    let first = Flow::new(CLIENT4, 40_000, VIP4, 80);
    let b = table_choice(&lb, 0, &first, PROTO_TCP, 0);
    connect(&mut lb, &first, b);
    assert_eq!(
        lb.dp
            .lookup_affinity(&flow_key(&first, PROTO_TCP))
            .expect("read"),
        None
    );
    lb.table(0, &table_moving(&first, PROTO_TCP, 0, &[1, 2, 3], b));
    let next = Flow::new(CLIENT4, 40_001, VIP4, 80);
    let c = table_choice(&lb, 0, &next, PROTO_TCP, 0);
    assert_ne!(c, b);
    connect(&mut lb, &next, c);
}

#[test]
fn after_the_timeout_the_client_follows_the_table_and_is_pinned_there() {
    let mut lb = lb(TIMEOUT);
    let first = Flow::new(CLIENT4, 40_000, VIP4, 80);
    let b = table_choice(&lb, 0, &first, PROTO_TCP, 0);
    connect(&mut lb, &first, b);
    let original = round_robin(M, &[1, 2, 3]);
    lb.table(0, &table_moving(&first, PROTO_TCP, 0, &[1, 2, 3], b));
    connect(&mut lb, &Flow::new(CLIENT4, 40_001, VIP4, 80), b);

    // Idle one second short of the timeout: still pinned.
    assert_eq!(lb.dp.age_affinity(TIMEOUT - 1).expect("age"), 1);
    connect(&mut lb, &Flow::new(CLIENT4, 40_002, VIP4, 80), b);
    // The connection refreshed the pin (idle over a second): another TIMEOUT - 1.
    lb.dp.age_affinity(TIMEOUT - 1).expect("age");
    connect(&mut lb, &Flow::new(CLIENT4, 40_003, VIP4, 80), b);

    // Idle past the timeout: the table decides, and the pin follows it.
    lb.dp.age_affinity(TIMEOUT + 1).expect("age");
    let stale = lb
        .dp
        .lookup_affinity(&flow_key(&first, PROTO_TCP))
        .expect("read")
        .expect("a pin");
    assert!(!stale.decides, "{stale:?}");
    let next = Flow::new(CLIENT4, 40_004, VIP4, 80);
    let c = table_choice(&lb, 0, &next, PROTO_TCP, 0);
    assert_ne!(c, b);
    connect(&mut lb, &next, c);
    // Back to the first table: the client stays on its new backend.
    lb.table(0, &original);
    connect(&mut lb, &Flow::new(CLIENT4, 40_005, VIP4, 80), c);
    let pin = lb
        .dp
        .lookup_affinity(&flow_key(&next, PROTO_TCP))
        .expect("read")
        .expect("a pin");
    assert_eq!((pin.backend_id, pin.decides), (c, true));
}

#[test]
fn a_drained_backend_keeps_its_connections_but_gets_no_new_affinity_client() {
    let mut lb = lb(TIMEOUT);
    let first = Flow::new(CLIENT4, 40_000, VIP4, 80);
    let b = table_choice(&lb, 0, &first, PROTO_TCP, 0);
    connect(&mut lb, &first, b);
    // Drain b: no slots, its pins hold.
    lb.backend(
        b,
        backend4(u8::try_from(b).expect("small")),
        BACKEND_DRAINING,
    );
    let rest: Vec<u32> = (1..=3).filter(|&id| id != b).collect();
    lb.table(0, &round_robin(M, &rest));
    forwarded_to(&mut lb, &first.frame(L4::Tcp(ACK), b"y"), b);
    let pin = lb
        .dp
        .lookup_affinity(&flow_key(&first, PROTO_TCP))
        .expect("read")
        .expect("a pin");
    assert_eq!((pin.backend_id, pin.decides), (b, false));

    let next = Flow::new(CLIENT4, 40_001, VIP4, 80);
    let c = table_choice(&lb, 0, &next, PROTO_TCP, 0);
    assert_ne!(c, b);
    connect(&mut lb, &next, c);
    // Undrained, b gets its slots back, but the client is now c's.
    lb.backend(b, backend4(u8::try_from(b).expect("small")), BACKEND_ACTIVE);
    lb.table(0, &round_robin(M, &[1, 2, 3]));
    connect(&mut lb, &Flow::new(CLIENT4, 40_002, VIP4, 80), c);
    assert_eq!(lb.counter(Reason::DropNoBackend), 0);
}

#[test]
fn a_v6_slash_64_is_one_client_and_another_64_is_another() {
    let mut lb = lb(TIMEOUT);
    let net = u128::from(CLIENT6) & !u128::from(u64::MAX);
    let host = |i: u64, port: u16| {
        let addr = Ipv6Addr::from(net | u128::from(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)));
        Flow::new(addr, port, VIP6, 80)
    };
    let first = host(1, 40_000);
    let b = table_choice(&lb, 2, &first, PROTO_TCP, 64);
    connect(&mut lb, &first, b);
    lb.table(2, &table_moving(&first, PROTO_TCP, 64, &[11, 12, 13], b));
    for i in 2..12u64 {
        let flow = host(i, 41_000 + u16::try_from(i).expect("small"));
        assert_ne!(table_choice(&lb, 2, &flow, PROTO_TCP, 64), b);
        connect(&mut lb, &flow, b);
    }
    // Another /64 has no pin: the table decides.
    let other = Flow::new(Ipv6Addr::from(net + (1u128 << 64)), 40_000, VIP6, 80);
    let want = table_choice(&lb, 2, &other, PROTO_TCP, 64);
    connect(&mut lb, &other, want);
}

#[test]
fn a_udp_clients_new_flows_stay_on_its_backend_too() {
    let mut lb = lb(TIMEOUT);
    let first = Flow::new(CLIENT4, 5_000, VIP4, 53);
    let b = table_choice(&lb, 1, &first, PROTO_UDP, 0);
    forwarded_to(&mut lb, &first.frame(L4::Udp, b"q"), b);
    lb.table(1, &table_moving(&first, PROTO_UDP, 0, &[1, 2, 3], b));
    for port in 5_001..5_010 {
        forwarded_to(
            &mut lb,
            &Flow::new(CLIENT4, port, VIP4, 53).frame(L4::Udp, b"q"),
            b,
        );
    }
}

#[test]
fn the_conntrack_walk_keeps_a_busy_clients_pin_alive_past_the_timeout() {
    let mut lb = lb(TIMEOUT);
    let busy = Flow::new(CLIENT4, 40_000, VIP4, 80);
    let b = table_choice(&lb, 0, &busy, PROTO_TCP, 0);
    connect(&mut lb, &busy, b);
    // Another client whose connection is closed (RST from the client).
    let closed = Flow::new([192, 0, 2, 77], 40_000, VIP4, 80);
    let c = table_choice(&lb, 0, &closed, PROTO_TCP, 0);
    connect(&mut lb, &closed, c);
    forwarded_to(&mut lb, &closed.frame(L4::Tcp(RST), b""), c);
    // Both opened their last connection longer ago than the timeout; the busy one's
    // connection carries a packet now.
    assert_eq!(lb.dp.age_affinity(TIMEOUT + 1).expect("age"), 2);
    forwarded_to(&mut lb, &busy.frame(L4::Tcp(ACK), b"y"), b);
    let decides = |lb: &Lb, flow: &Flow| {
        let pin = lb
            .dp
            .lookup_affinity(&flow_key(flow, PROTO_TCP))
            .expect("read")
            .expect("a pin");
        pin.decides
    };
    assert!(!decides(&lb, &busy), "expired before the walk");

    let walker = lb.dp.take_conntrack_walker().expect("the walker");
    let settings = WalkSettings {
        udp_timeout: std::time::Duration::from_secs(30),
        idle: std::time::Duration::from_secs(60),
        syn_window: WalkSettings::SYN_WINDOW,
    };
    let census = walker.walk(&settings).expect("walk");
    assert_eq!(
        census.affinity.get(&0),
        Some(&1),
        "the busy client's pin is live again, the closed one's is not"
    );
    assert!(decides(&lb, &busy));
    assert!(!decides(&lb, &closed));

    // A table change that moves the busy client's slot: its next connection still
    // goes to its backend, the closed client's follows the table.
    lb.table(0, &table_moving(&busy, PROTO_TCP, 0, &[1, 2, 3], b));
    let next = Flow::new(CLIENT4, 40_001, VIP4, 80);
    assert_ne!(table_choice(&lb, 0, &next, PROTO_TCP, 0), b);
    connect(&mut lb, &next, b);
    let again = Flow::new([192, 0, 2, 77], 40_001, VIP4, 80);
    let want = table_choice(&lb, 0, &again, PROTO_TCP, 0);
    connect(&mut lb, &again, want);
}

/// A router's "fragmentation needed" (next-hop MTU 1400) about a 1,500-byte DF segment
/// from VIP4:80 to `CLIENT4:cport`, quoting its IPv4 header and 8 TCP bytes.
fn frag_needed_about(cport: u16) -> Vec<u8> {
    let mut quoted = Vec::new();
    let mut ip =
        Ipv4Header::new(1480, 63, IpNumber::TCP, VIP4.octets(), CLIENT4.octets()).expect("ip");
    ip.dont_fragment = true;
    ip.header_checksum = ip.calc_header_checksum();
    ip.write(&mut quoted).expect("write");
    let mut tcp = Vec::new();
    TcpHeader::new(80, cport, 5001, 64240)
        .write(&mut tcp)
        .expect("write");
    quoted.extend_from_slice(&tcp[..8]);
    let kind = Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded {
        next_hop_mtu: 1400,
    });
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(CLIENT_MAC, LB_MAC)
        .ipv4([192, 0, 2, 200], VIP4.octets(), 64)
        .icmpv4(kind)
        .write(&mut frame, &quoted)
        .expect("write");
    frame
}

#[test]
fn an_icmp_error_about_a_flow_without_a_pin_follows_the_clients_pin() {
    let mut lb = lb(TIMEOUT);
    let first = Flow::new(CLIENT4, 40_000, VIP4, 80);
    let b = table_choice(&lb, 0, &first, PROTO_TCP, 0);
    connect(&mut lb, &first, b);
    lb.table(0, &table_moving(&first, PROTO_TCP, 0, &[1, 2, 3], b));
    // A flow of the client that conntrack does not know (its pin lost, say).
    let lost = Flow::new(CLIENT4, 40_050, VIP4, 80);
    assert_ne!(
        table_choice(&lb, 0, &lost, PROTO_TCP, 0),
        b,
        "the table moved it"
    );
    assert!(
        lb.dp
            .lookup_flow(&flow_key(&lost, PROTO_TCP))
            .expect("read")
            .is_none()
    );
    let frame = frag_needed_about(40_050);
    forwarded_to(&mut lb, &frame, b);
    assert_eq!(lb.counter(Reason::TxIcmpForward), 1);

    // Past the timeout the pin no longer decides: the table's backend gets the error.
    lb.dp.age_affinity(TIMEOUT + 1).expect("age");
    let want = table_choice(&lb, 0, &lost, PROTO_TCP, 0);
    forwarded_to(&mut lb, &frame, want);
}
