// SPDX-License-Identifier: MIT OR Apache-2.0
//! Tests of client affinity: the key's fields, the decision's rules, and a property
//! test of the decision against its statement.

use proptest::prelude::*;

use super::*;
use crate::{
    hash_fields::{Fields, HashFields},
    types::{FAMILY_V4, FAMILY_V6, PROTO_TCP, VipKey},
};

const SEC: u64 = 1_000_000_000;

fn flow(family: u8, src: [u8; 16], sport: u16, port: u16) -> FlowKey {
    let mut addr = [0u8; 16];
    addr[..4].copy_from_slice(&[203, 0, 113, 10]);
    FlowKey {
        vip: VipKey {
            addr,
            port: port.to_be(),
            proto: PROTO_TCP,
            family,
        },
        src,
        sport: sport.to_be(),
        _pad: [0; 2],
    }
}

fn v4(src: [u8; 4], sport: u16, port: u16) -> FlowKey {
    let mut s = [0u8; 16];
    s[..4].copy_from_slice(&src);
    flow(FAMILY_V4, s, sport, port)
}

fn flags(fields: Fields, prefix: u8) -> u32 {
    HashFields {
        fields,
        prefix,
        affinity_secs: 300,
    }
    .flags()
}

/// Backends 1..=9 take new flows; 10 and above are drained, down or removed.
struct Active;

impl AffinityLookups for Active {
    type Backend = u32;

    fn takes_new_flows(&mut self, id: u32) -> Option<u32> {
        (1..10).contains(&id).then_some(id)
    }
}

#[test]
fn the_key_is_the_vip_and_the_source_prefix_and_for_src_dport_the_port() {
    let f = flags(Fields::Src, 0);
    let a = key(&v4([192, 0, 2, 10], 40000, 80), 3, f);
    assert_eq!(a, key(&v4([192, 0, 2, 10], 40001, 80), 3, f), "source port");
    assert_eq!(
        a,
        key(&v4([192, 0, 2, 10], 40001, 81), 3, f),
        "port, for src"
    );
    assert_ne!(a, key(&v4([192, 0, 2, 11], 40000, 80), 3, f), "address");
    assert_ne!(a, key(&v4([192, 0, 2, 10], 40000, 80), 4, f), "VIP");
    assert_eq!(a.vip_id, 3);
    assert_eq!((a.port, a._pad, a.family), (0, 0, FAMILY_V4));
    assert_eq!(a.src[..4], [192, 0, 2, 10]);
    assert_eq!(a.src[4..], [0; 12]);

    let sd = flags(Fields::SrcDport, 24);
    let b = key(&v4([192, 0, 2, 10], 40000, 80), 3, sd);
    assert_eq!(b, key(&v4([192, 0, 2, 99], 1, 80), 3, sd), "the /24");
    assert_ne!(b, key(&v4([192, 0, 2, 10], 40000, 81), 3, sd), "port");
    assert_eq!(b.port, 80u16.to_be());
    assert_eq!(b.src[..4], [192, 0, 2, 0]);
}

#[test]
fn a_v6_slash_64_client_is_one_client() {
    let f = flags(Fields::Src, 64);
    let mut a = [0u8; 16];
    a[..8].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 2]);
    let mut b = a;
    b[8..].copy_from_slice(&[9, 9, 9, 9, 9, 9, 9, 9]);
    let mut c = a;
    c[7] = 3;
    let ka = key(&flow(FAMILY_V6, a, 1000, 443), 1, f);
    assert_eq!(ka, key(&flow(FAMILY_V6, b, 2000, 443), 1, f));
    assert_ne!(ka, key(&flow(FAMILY_V6, c, 1000, 443), 1, f));
    assert_eq!(ka.src, a);
    assert_eq!(ka.family, FAMILY_V6);
}

#[test]
fn the_flag_says_whether_a_vip_has_affinity() {
    assert!(enabled(flags(Fields::Src, 0)));
    let off = HashFields {
        fields: Fields::Src,
        prefix: 0,
        affinity_secs: 0,
    };
    assert!(!enabled(off.flags()));
    assert_eq!(
        flags(Fields::Src, 24) & !VIP_AFFINITY,
        off.flags() | 24 << 16
    );
}

#[test]
fn a_live_pin_on_an_active_backend_decides_and_is_refreshed_after_a_second() {
    let pin = pin(4, 100 * SEC);
    let t = 300 * SEC;
    assert_eq!(
        decide(&mut Active, Some(&pin), 100 * SEC + SEC / 2, t),
        Affinity::Pinned {
            backend: 4,
            refresh: None
        }
    );
    assert_eq!(
        decide(&mut Active, Some(&pin), 250 * SEC, t),
        Affinity::Pinned {
            backend: 4,
            refresh: Some(250 * SEC)
        }
    );
    assert_eq!(
        decide(&mut Active, Some(&pin), 400 * SEC, t),
        Affinity::Pinned {
            backend: 4,
            refresh: Some(400 * SEC)
        },
        "idle exactly the timeout"
    );
}

#[test]
fn the_table_decides_without_a_pin_after_the_timeout_and_for_a_drained_backend() {
    let t = 300 * SEC;
    let now = 1000 * SEC;
    assert_eq!(
        decide(&mut Active, None, now, t),
        Affinity::Table { now_ns: now }
    );
    let old = pin(4, now - t - 1);
    assert_eq!(
        decide(&mut Active, Some(&old), now, t),
        Affinity::Table { now_ns: now }
    );
    let drained = pin(12, now - SEC);
    assert_eq!(
        decide(&mut Active, Some(&drained), now, t),
        Affinity::Table { now_ns: now }
    );
    assert_eq!(
        pin(7, now),
        AffinityEntry {
            backend_id: 7,
            _pad: 0,
            stamp_ns: now
        }
    );
}

proptest! {
    /// The pin decides exactly when it is idle no longer than the timeout and its
    /// backend takes new flows; it is refreshed exactly when idle over a second or
    /// half the timeout.
    #[test]
    fn the_pin_decides_iff_live_and_active(
        backend in 0u32..16,
        stamp in 0u64..1 << 40,
        idle in 0u64..1 << 40,
        timeout_s in 1u32..=MAX_TIMEOUT_SECS,
    ) {
        let timeout = u64::from(timeout_s) * SEC;
        let now = stamp + idle;
        let got = decide(&mut Active, Some(&pin(backend, stamp)), now, timeout);
        let live = idle <= timeout;
        let active = (1..10).contains(&backend);
        if live && active {
            let refresh = (idle > SEC.min(timeout / 2)).then_some(now);
            prop_assert_eq!(got, Affinity::Pinned { backend, refresh });
        } else {
            prop_assert_eq!(got, Affinity::Table { now_ns: now });
        }
    }

    /// Two flows of one client (any source ports, any VIP address and protocol) have
    /// one key; the key of `src` ignores the port, that of `src+dport` does not.
    #[test]
    fn a_clients_flows_share_its_key(
        src in any::<[u8; 4]>(),
        s1 in any::<u16>(),
        s2 in any::<u16>(),
        p1 in any::<u16>(),
        p2 in any::<u16>(),
        prefix in 0u8..=32,
    ) {
        let s = flags(Fields::Src, prefix);
        prop_assert_eq!(key(&v4(src, s1, p1), 2, s), key(&v4(src, s2, p2), 2, s));
        let sd = flags(Fields::SrcDport, prefix);
        prop_assert_eq!(key(&v4(src, s1, p1), 2, sd) == key(&v4(src, s2, p2), 2, sd), p1 == p2);
    }
}
