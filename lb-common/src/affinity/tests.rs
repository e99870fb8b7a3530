// SPDX-License-Identifier: MIT OR Apache-2.0
//! Tests of client affinity: the key's fields, the decision's rules, and a property
//! test of the decision against its statement.

use proptest::prelude::*;

use super::*;
use crate::{
    hash_fields::{Fields, HashFields},
    types::{CT_FIN, CT_RST, FAMILY_V4, FAMILY_V6, PROTO_TCP, VipKey, ct_ticks},
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

#[test]
fn an_open_connection_names_its_client_backend_and_last_packet() {
    let now = 5_000 * SEC;
    let f = flags(Fields::Src, 24);
    let flow = v4([192, 0, 2, 10], 40000, 80);
    let ct = CtEntry {
        backend_id: 7,
        vip_id: 3,
        seen_ticks: ct_ticks(now - 10 * SEC),
        ..CtEntry::default()
    };
    let (k, backend, at) = connection_activity(&flow, &ct, f, now).expect("open");
    assert_eq!((k, backend), (key(&flow, 3, f), 7));
    assert!(at <= now - 10 * SEC && at > now - 10 * SEC - (1 << CT_TICK_SHIFT));
    // Closing connections and VIPs without affinity say nothing.
    for closing in [CT_FIN, CT_RST] {
        let c = CtEntry { closing, ..ct };
        assert_eq!(connection_activity(&flow, &c, f, now), None);
    }
    let plain = HashFields {
        fields: Fields::Src,
        prefix: 24,
        affinity_secs: 0,
    }
    .flags();
    assert_eq!(connection_activity(&flow, &ct, plain, now), None);
}

#[test]
fn a_walk_raises_the_stamp_of_the_same_backend_only() {
    let old = pin(7, 100 * SEC);
    assert_eq!(refreshed(&old, 7, 150 * SEC), Some(pin(7, 150 * SEC)));
    assert_eq!(refreshed(&old, 7, 100 * SEC), None, "not newer");
    assert_eq!(refreshed(&old, 7, 90 * SEC), None, "never lowered");
    assert_eq!(refreshed(&old, 8, 150 * SEC), None, "another backend");
}

#[test]
fn the_smallest_timeout_is_twice_the_walk_plus_the_lag() {
    assert_eq!(min_timeout_secs(10_000), 23);
    assert_eq!(min_timeout_secs(500), 4);
    assert_eq!(min_timeout_secs(100), 4);
    assert_eq!(min_timeout_secs(1_200), 6);
    assert_eq!(min_timeout_secs(3_600_000), 7_203);
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

    /// A connection's recorded time is never later than its last packet and at most
    /// one tick earlier.
    #[test]
    fn the_seen_time_is_a_lower_bound_within_a_tick(
        packet in 1u64 << 31..1 << 50,
        later in 0u64..1 << 40,
    ) {
        let at = seen_ns(ct_ticks(packet), packet + later);
        prop_assert!(at <= packet);
        prop_assert!(packet - at < 1 << CT_TICK_SHIFT);
    }

    /// The guarantee: a walk at `walk` that sees the client's connection to its pinned
    /// backend with a packet at `packet` keeps the pin deciding until `packet` plus the
    /// timeout less a tick, however old the pin was (even expired); a connection to
    /// another backend changes nothing.
    #[test]
    fn a_walk_keeps_a_busy_clients_pin_deciding(
        stamp in 0u64..1 << 40,
        packet in 1u64 << 31..1 << 41,
        to_walk in 0u64..10 * SEC,
        after in 0u64..1 << 40,
        timeout_s in 1u32..=MAX_TIMEOUT_SECS,
        other in 1u32..10,
    ) {
        let timeout = u64::from(timeout_s) * SEC;
        let walk = packet + to_walk;
        let ct = CtEntry {
            backend_id: 3,
            vip_id: 1,
            seen_ticks: ct_ticks(packet),
            ..CtEntry::default()
        };
        let flow = v4([198, 51, 100, 7], 1234, 80);
        let f = flags(Fields::Src, 0);
        let (_, backend, at) = connection_activity(&flow, &ct, f, walk).expect("open");
        let old = pin(3, stamp);
        let new = refreshed(&old, backend, at).unwrap_or(old);
        prop_assert!(new.stamp_ns >= old.stamp_ns);
        let now = new.stamp_ns.max(packet) + after;
        if now + (1 << CT_TICK_SHIFT) <= packet + timeout {
            let got = decide(&mut Active, Some(&new), now, timeout);
            prop_assert!(matches!(got, Affinity::Pinned { backend: 3, .. }), "{got:?}");
        }
        let elsewhere = pin(other.max(4), stamp);
        prop_assert_eq!(refreshed(&elsewhere, backend, at), None);
    }
}
