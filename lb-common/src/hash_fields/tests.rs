// SPDX-License-Identifier: MIT OR Apache-2.0
//! Tests of the hash fields: which fields count, the prefix cut, the flags encoding.

use super::*;
use crate::types::{FAMILY_V6, PROTO_TCP, PROTO_UDP, VipKey};

const SEED: u32 = 0x6c62_5f31;

fn v4(src: [u8; 4], sport: u16, port: u16) -> FlowKey {
    let mut s = [0u8; 16];
    s[..4].copy_from_slice(&src);
    FlowKey {
        vip: VipKey {
            addr: [203, 0, 113, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            port: port.to_be(),
            proto: PROTO_TCP,
            family: FAMILY_V4,
        },
        src: s,
        sport: sport.to_be(),
        _pad: [0; 2],
    }
}

fn v6(src: [u8; 16], sport: u16) -> FlowKey {
    FlowKey {
        vip: VipKey {
            addr: [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            port: 443u16.to_be(),
            proto: PROTO_TCP,
            family: FAMILY_V6,
        },
        src,
        sport: sport.to_be(),
        _pad: [0; 2],
    }
}

fn flags(fields: Fields, prefix: u8) -> u32 {
    HashFields {
        fields,
        prefix,
        affinity_secs: 0,
    }
    .flags()
}

#[test]
fn the_5_tuple_is_the_flow_hash() {
    let key = v4([192, 0, 2, 10], 40000, 80);
    assert_eq!(table_hash(&key, 0, SEED), flow_hash(&key, SEED));
    // Other VipEntry flags (table buffer, fast path) do not change it.
    assert_eq!(table_hash(&key, 3, SEED), flow_hash(&key, SEED));
    assert_eq!(table_hash_of(&key, 0, SEED, 7), 7);
}

#[test]
fn src_hashes_the_source_address_only() {
    let f = flags(Fields::Src, 0);
    let a = v4([192, 0, 2, 10], 40000, 80);
    let mut b = v4([192, 0, 2, 10], 40001, 81);
    b.vip.addr[3] = 11;
    b.vip.proto = PROTO_UDP;
    assert_eq!(table_hash(&a, f, SEED), table_hash(&b, f, SEED));
    let c = v4([192, 0, 2, 11], 40000, 80);
    assert_ne!(table_hash(&a, f, SEED), table_hash(&c, f, SEED));
    assert_ne!(table_hash(&a, f, SEED), table_hash(&a, f, SEED + 1));
}

#[test]
fn src_dport_adds_the_destination_port() {
    let f = flags(Fields::SrcDport, 0);
    let a = v4([192, 0, 2, 10], 40000, 80);
    assert_eq!(
        table_hash(&a, f, SEED),
        table_hash(&v4([192, 0, 2, 10], 50000, 80), f, SEED)
    );
    assert_ne!(
        table_hash(&a, f, SEED),
        table_hash(&v4([192, 0, 2, 10], 40000, 81), f, SEED)
    );
    assert_ne!(
        table_hash(&a, f, SEED),
        table_hash(&v4([192, 0, 2, 9], 40000, 80), f, SEED)
    );
}

#[test]
fn dport_hashes_the_destination_port_only() {
    let f = flags(Fields::Dport, 0);
    let a = v4([192, 0, 2, 10], 40000, 80);
    assert_eq!(
        table_hash(&a, f, SEED),
        table_hash(&v4([198, 51, 100, 7], 1234, 80), f, SEED)
    );
    assert_ne!(
        table_hash(&a, f, SEED),
        table_hash(&v4([192, 0, 2, 10], 40000, 81), f, SEED)
    );
}

#[test]
fn a_v6_slash_64_client_is_one_client() {
    let f = flags(Fields::Src, 64);
    let mut src = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 1];
    let a = v6(src, 40000);
    src[15] = 0xfe;
    src[8] = 0x80;
    let b = v6(src, 40001);
    assert_eq!(table_hash(&a, f, SEED), table_hash(&b, f, SEED));
    // Bit 63 is inside the prefix.
    src[7] = 6;
    assert_ne!(
        table_hash(&a, f, SEED),
        table_hash(&v6(src, 40000), f, SEED)
    );
    // Without a prefix the whole address counts.
    let whole = flags(Fields::Src, 0);
    assert_ne!(table_hash(&a, whole, SEED), table_hash(&b, whole, SEED));
    assert_eq!(
        table_hash(&a, whole, SEED),
        table_hash(&a, flags(Fields::Src, 128), SEED)
    );
}

#[test]
fn the_selected_key_is_exact() {
    let src = [
        0x20, 0x01, 0x0d, 0xb8, 0xaa, 0xbb, 0xcc, 0xdd, 1, 2, 3, 4, 5, 6, 7, 8,
    ];
    let key = v6(src, 40000);
    let sel = selected_key(&key, flags(Fields::SrcDport, 52));
    let mut want = [0u8; 40];
    want[16..18].copy_from_slice(&443u16.to_be_bytes());
    want[19] = FAMILY_V6;
    want[20..26].copy_from_slice(&src[..6]);
    want[26] = 0xc0; // 52 = 6 bytes and the top 4 bits of 0xcc
    let words = sel.words();
    let mut got = [0u8; 40];
    for (i, w) in words.iter().enumerate() {
        got[4 * i..4 * i + 4].copy_from_slice(&w.to_ne_bytes());
    }
    assert_eq!(got, want);
    // IPv4 /24.
    let v = selected_key(&v4([192, 0, 2, 10], 40000, 80), flags(Fields::Src, 24));
    assert_eq!(v.src[..4], [192, 0, 2, 0]);
    assert_eq!((v.sport, v.vip.port, v.vip.proto), (0, 0, 0));
    assert_eq!(v.vip.family, FAMILY_V4);
}

#[test]
fn the_flags_round_trip() {
    for fields in Fields::ALL {
        assert_eq!(Fields::from_name(fields.name()), Some(fields));
        for prefix in [0u8, 1, 24, 32, 64, 127, 128] {
            let h = HashFields {
                fields,
                prefix,
                affinity_secs: 0,
            };
            assert_eq!(HashFields::of_flags(h.flags() | 3), h);
            assert_eq!(h.flags() & 3, 0, "clear of the table and fast-path bits");
        }
    }
    assert_eq!(
        HashFields::of_flags(7 << VIP_HASH_FIELDS_SHIFT).fields,
        Fields::FiveTuple
    );
    assert_eq!(Fields::from_name("sh"), None);
    assert_eq!((max_prefix(FAMILY_V4), max_prefix(FAMILY_V6)), (32, 128));
}

#[test]
fn a_source_prefix_applies_to_source_fields_within_the_address_length() {
    let ok = |fields, family, prefix| HashFields::with_source_prefix(fields, family, prefix);
    assert_eq!(ok(Fields::Src, FAMILY_V4, 24).map(|h| h.prefix), Ok(24));
    assert_eq!(
        ok(Fields::SrcDport, FAMILY_V6, 64).map(|h| h.prefix),
        Ok(64)
    );
    // The whole address is no cut: stored as 0.
    assert_eq!(ok(Fields::Src, FAMILY_V4, 32).map(|h| h.prefix), Ok(0));
    assert_eq!(ok(Fields::Src, FAMILY_V6, 128).map(|h| h.prefix), Ok(0));
    for bad in [0, 33, 256, u32::MAX] {
        assert_eq!(
            ok(Fields::Src, FAMILY_V4, bad),
            Err(PrefixError::OutOfRange { max: 32 }),
            "/{bad}"
        );
    }
    assert_eq!(
        ok(Fields::Src, FAMILY_V6, 129),
        Err(PrefixError::OutOfRange { max: 128 })
    );
    for fields in [Fields::FiveTuple, Fields::Dport] {
        assert_eq!(ok(fields, FAMILY_V4, 24), Err(PrefixError::NotSource));
    }
}
