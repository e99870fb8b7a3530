//! Per-VIP hash fields in the real program, through `BPF_PROG_TEST_RUN`: the fields in
//! a VIP's `VIPS` entry (`lb_common::hash_fields`) decide its table slot, on today's
//! path and on the fast path, and userspace predicts the slot with the same function.

use std::net::{IpAddr, Ipv6Addr};

use lb_common::{
    hash_fields::{Fields, HashFields},
    types::PROTO_TCP,
};
use lb_dataplane::Dataplane as _;
use lb_maglev::flow::table_slot_of;
use lb_tests::{
    fixture::{Lb, SEED, XDP_TX, flow_key, round_robin, vip_key},
    packets::{ACK, CLIENT4, CLIENT6, Flow, L4, SYN, VIP4, VIP6, backend4, backend6},
};

/// Table size: small, so a few clients cover every backend.
const M: usize = 31;

/// [`lb_on`] with the second IPv4 VIP on port 81.
fn lb(fields: HashFields) -> Lb {
    lb_on(fields, 81)
}

/// Backends 1..=3 (IPv4 and, as 11..=13, IPv6); VIP4:80/tcp (id 0) and VIP4:`second`/tcp
/// (id 1) over 1..=3, VIP6:80/tcp (id 2) over 11..=13, round-robin over `M` slots; each
/// VIP hashing `fields`.
fn lb_on(fields: HashFields, second: u16) -> Lb {
    let mut lb = Lb::new();
    lb.backends(3, false);
    for k in 1..=3u8 {
        lb.backend(
            10 + u32::from(k),
            backend6(k),
            lb_common::types::BACKEND_ACTIVE,
        );
    }
    let v4 = round_robin(M, &[1, 2, 3]);
    lb.table(0, &v4);
    lb.table(1, &v4);
    lb.table(2, &round_robin(M, &[11, 12, 13]));
    let vips = [(VIP4.into(), 80), (VIP4.into(), second), (VIP6.into(), 80)];
    for (id, (addr, port)) in (0u32..).zip(vips) {
        let key = vip_key(addr, port, PROTO_TCP);
        // Before the VIP entry exists: stored, then written with it.
        lb.dp
            .set_hash_fields(&key, id, fields)
            .expect("hash fields");
        lb.vip(id, addr, port, PROTO_TCP);
        assert_eq!(lb.dp.hash_fields(id), fields);
    }
    lb
}

fn fields(fields: Fields, prefix: u8) -> HashFields {
    HashFields {
        fields,
        prefix,
        affinity_secs: 0,
    }
}

/// The backend id `frame` went to.
fn sent_to(lb: &mut Lb, frame: &[u8]) -> u32 {
    let (action, dst) = lb.send(frame);
    assert_eq!(action, XDP_TX, "forwarded");
    let dst = dst.expect("an outer destination");
    (1..=3u8)
        .find_map(|k| {
            if dst == IpAddr::from(backend4(k)) {
                Some(u32::from(k))
            } else if dst == IpAddr::from(backend6(k)) {
                Some(10 + u32::from(k))
            } else {
                None
            }
        })
        .expect("one of the backends")
}

/// The backend userspace predicts for `flow` to VIP `vip_id` hashing `h`.
fn predicted(lb: &Lb, vip_id: u32, flow: &Flow, h: HashFields) -> u32 {
    let table = lb.dp.table(vip_id).expect("read").expect("a table");
    let size = u32::try_from(table.slots.len()).expect("fits");
    let slot = table_slot_of(&flow_key(flow, PROTO_TCP), h, SEED, size).expect("slot");
    table.slots[slot as usize]
}

/// The backends the SYNs and then ACKs of connections from `src` ports `ports` to
/// `dst:dport` went to, each checked against the prediction.
fn backends_of(
    lb: &mut Lb,
    vip_id: u32,
    h: HashFields,
    flows: impl Iterator<Item = Flow>,
) -> std::collections::BTreeSet<u32> {
    let mut seen = std::collections::BTreeSet::new();
    for flow in flows {
        let want = predicted(lb, vip_id, &flow, h);
        assert_eq!(
            sent_to(lb, &flow.frame(L4::Tcp(SYN), b"")),
            want,
            "{flow:?}"
        );
        assert_eq!(
            sent_to(lb, &flow.frame(L4::Tcp(ACK), b"x")),
            want,
            "{flow:?}"
        );
        seen.insert(want);
    }
    seen
}

#[test]
fn with_src_every_connection_of_a_client_goes_to_one_backend() {
    let h = fields(Fields::Src, 0);
    for fast in [false, true] {
        let mut lb = lb(h);
        if fast {
            let key = vip_key(VIP4.into(), 80, PROTO_TCP);
            lb.dp.set_fast_path(&key, 0, true).expect("fast path");
        }
        let conns = (40_000..40_030).map(|port| Flow::new(CLIENT4, port, VIP4, 80));
        let one = backends_of(&mut lb, 0, h, conns);
        assert_eq!(one.len(), 1, "fast path {fast}: {one:?}");
        // Other clients take other backends: the source counts.
        let clients = (1..=40u8).map(|last| Flow::new([192, 0, 2, last], 40_000, VIP4, 80));
        let many = backends_of(&mut lb, 0, h, clients);
        assert_eq!(many.len(), 3, "fast path {fast}: {many:?}");
    }
    // The 5-tuple (the default) spreads one client's connections.
    let five = HashFields::default();
    let mut lb = lb(five);
    let conns = (40_000..40_030).map(|port| Flow::new(CLIENT4, port, VIP4, 80));
    assert_eq!(backends_of(&mut lb, 0, five, conns).len(), 3);
}

#[test]
fn with_a_64_bit_source_prefix_a_v6_network_is_one_client() {
    let h = fields(Fields::Src, 64);
    let mut lb = lb(h);
    let base = u128::from(CLIENT6) & !u128::from(u64::MAX);
    let hosts = (0..30u64).map(|i| {
        let addr = Ipv6Addr::from(base | u128::from(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)));
        Flow::new(addr, 40_000 + u16::try_from(i).expect("fits"), VIP6, 80)
    });
    let one = backends_of(&mut lb, 2, h, hosts);
    assert_eq!(one.len(), 1, "{one:?}");
    // Other /64s spread.
    let nets = (0..40u128).map(|i| Flow::new(Ipv6Addr::from(base + (i << 64)), 40_000, VIP6, 80));
    assert_eq!(backends_of(&mut lb, 2, h, nets).len(), 3);
}

#[test]
fn with_dport_the_destination_port_alone_picks_the_backend() {
    let h = fields(Fields::Dport, 0);
    // A second port whose slot has another owner than port 80's in the one table.
    let table = round_robin(M, &[1, 2, 3]);
    let owner = |port: u16| {
        let key = flow_key(&Flow::new(CLIENT4, 1, VIP4, port), PROTO_TCP);
        let m = u32::try_from(M).expect("fits");
        table[table_slot_of(&key, h, SEED, m).expect("slot") as usize]
    };
    let second = (81..200).find(|p| owner(*p) != owner(80)).expect("a port");
    let mut lb = lb_on(h, second);
    let clients = |port: u16| {
        (1..=30u8)
            .map(move |last| Flow::new([192, 0, 2, last], 30_000 + u16::from(last), VIP4, port))
    };
    let on_80 = backends_of(&mut lb, 0, h, clients(80));
    let on_other = backends_of(&mut lb, 1, h, clients(second));
    assert_eq!(
        (on_80.len(), on_other.len()),
        (1, 1),
        "{on_80:?} {on_other:?}"
    );
    assert_ne!(
        on_80, on_other,
        "ports 80 and {second}: other slots of one table"
    );
}

#[test]
fn with_src_dport_one_client_keeps_a_backend_per_port() {
    let h = fields(Fields::SrcDport, 0);
    let mut lb = lb(h);
    for (vip_id, port) in [(0, 80), (1, 81)] {
        let conns = (40_000..40_020).map(|p| Flow::new(CLIENT4, p, VIP4, port));
        assert_eq!(backends_of(&mut lb, vip_id, h, conns).len(), 1);
    }
}
