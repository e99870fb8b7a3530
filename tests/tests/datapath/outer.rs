//! Per-flow outer headers (source from a prefix, IPv6 flow label from the flow hash)
//! and IPv4 VIPs on IPv6 backends (IPv4-in-IPv6).
//!
//! Why: with one outer source per family, a backend NIC's receive-side scaling, which
//! hashes the outer addresses of IP-in-IP, puts every tunnel of a VIP on one queue.

use std::{
    collections::HashSet,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use lb_common::{
    hash::flow_hash,
    stats::Reason,
    types::{
        BACKEND_ACTIVE, CONFIG_FLOW_LABEL_HASH, CONFIG_SOURCE_PREFIX_V4, CONFIG_SOURCE_PREFIX_V6,
        PROTO_TCP,
    },
};
use lb_tests::{
    fixture::{Lb, SEED, XDP_TX, flow_key, round_robin},
    packets::{self, ACK, GW_MAC, L4, LB_MAC, Outer, SYN, encapsulated_with},
};

use super::{backend_ip, expect, flow4, flow6};

const PREFIX4: Ipv4Addr = Ipv4Addr::new(172, 16, 0, 0);
const PREFIX6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x1b, 0, 0, 0, 0, 0);

/// Outer sources from 172.16.0.0/16 and 2001:db8:1b::/64, flow labels from the hash.
fn per_flow(lb: &mut Lb) {
    lb.configure(|c| {
        c.flags |= CONFIG_SOURCE_PREFIX_V4 | CONFIG_SOURCE_PREFIX_V6 | CONFIG_FLOW_LABEL_HASH;
        c.src_prefix_v4 = PREFIX4.octets();
        c.src_host_mask_v4 = u32::from_ne_bytes([0, 0, 0xff, 0xff]);
        c.src_prefix_v6 = PREFIX6.octets();
        c.src_host_mask_v6 = u32::MAX;
    });
}

/// The expected outer fields of `flow` (TCP) with [`per_flow`]: the prefix with the
/// flow hash in its host bits, the hash's low 20 bits as flow label.
fn expected_outer(flow: &packets::Flow) -> Outer {
    let hash = flow_hash(&flow_key(flow, PROTO_TCP), SEED);
    let src: IpAddr = match flow.src {
        IpAddr::V4(_) => Ipv4Addr::from(u32::from(PREFIX4) | (hash & 0xffff)).into(),
        IpAddr::V6(_) => Ipv6Addr::from(u128::from(PREFIX6) | u128::from(hash)).into(),
    };
    Outer {
        src: Some(src),
        flow_label: Some(hash & 0xf_ffff),
        gue: None,
    }
}

#[test]
fn outer_sources_are_stable_per_flow_and_spread_over_flows() {
    let mut lb = Lb::standard();
    per_flow(&mut lb);
    let mut sources = HashSet::new();
    for sport in 46000..46064 {
        for (vip_id, flow) in [(0, flow4(sport, 80)), (2, flow6(sport, 80))] {
            let id = lb.predict(vip_id, &flow, PROTO_TCP);
            let outer = expected_outer(&flow);
            for l4 in [L4::Tcp(SYN), L4::Tcp(ACK)] {
                let frame = flow.frame(l4, &[]);
                let out = expect(&mut lb, &frame, XDP_TX, Reason::TxEncap);
                let expected = encapsulated_with(&frame, backend_ip(id), GW_MAC, LB_MAC, &outer);
                assert_eq!(out, expected, "{flow:?} {l4:?}");
            }
            sources.insert(outer.src);
        }
    }
    // 128 flows: all but a hash collision or two have sources of their own.
    assert!(sources.len() >= 124, "{} distinct sources", sources.len());
}

#[test]
fn an_ipv4_vip_on_ipv6_backends_is_sent_ipv4_in_ipv6() {
    let mut lb = Lb::standard();
    lb.backend(1, packets::backend6(1), BACKEND_ACTIVE);
    lb.table(0, &round_robin(65_537, &[1]));
    let flow = flow4(46100, 80);
    let frame = flow.frame(L4::Tcp(SYN), &[]);
    let out = expect(&mut lb, &frame, XDP_TX, Reason::TxEncap);
    // Next header 4, the inner TOS as traffic class, the flow label from the hash
    // (there is none to copy), source the LB's IPv6 address.
    let hash = flow_hash(&flow_key(&flow, PROTO_TCP), SEED);
    let outer = Outer {
        src: None,
        flow_label: Some(hash & 0xf_ffff),
        gue: None,
    };
    let expected = encapsulated_with(&frame, packets::backend6(1).into(), GW_MAC, LB_MAC, &outer);
    assert_eq!(out, expected);
    assert_eq!(out[12..14], [0x86, 0xdd]);
    assert_eq!(out[14 + 6], 4, "next header: IPv4");
    // With per-flow sources, the IPv6 prefix's.
    per_flow(&mut lb);
    let out = expect(&mut lb, &frame, XDP_TX, Reason::TxEncap);
    let outer = Outer {
        src: Some(Ipv6Addr::from(u128::from(PREFIX6) | u128::from(hash)).into()),
        flow_label: Some(hash & 0xf_ffff),
        gue: None,
    };
    let expected = encapsulated_with(&frame, packets::backend6(1).into(), GW_MAC, LB_MAC, &outer);
    assert_eq!(out, expected);
}
