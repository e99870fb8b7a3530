// SPDX-License-Identifier: MIT OR Apache-2.0
//! Tests of the flow hash: lookup3 reference values, and every field of the flow counts.

use super::*;
use crate::types::{FAMILY_V4, FAMILY_V6, PROTO_TCP, VipKey};

/// Reference values of lookup3's `hashword()` computed with the C original
/// (`hashword(k, n, initval)`), which the kernel's `jhash2()` reproduces.
#[test]
fn matches_lookup3_reference_values() {
    // Empty input returns the initial value.
    assert_eq!(hashword(&[], 0), 0xdead_beef);
    assert_eq!(hashword(&[], 7), 0xdead_beef_u32.wrapping_add(7));
    // Known answers of hashword() from lookup3.c (compiled with gcc on x86_64).
    assert_eq!(hashword(&[0x0403_0201], 0), 0x043f_cddd);
    assert_eq!(hashword(&[1, 2, 3, 4], 0), 0x6649_1246);
    assert_eq!(
        hashword(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0x5eed),
        0x0243_a35f
    );
    assert_eq!(hashword(&[0xdead_beef, 0x1234_5678], 99), 0x8c1f_06d6);
    assert_eq!(hashword(&[7, 8, 9], 0), 0xede7_4997);
    assert_eq!(hashword(&[1, 2, 3, 4], 0xffff_ffff), 0xc104_937f);
}

/// The flow hash as the module documentation defines it, byte by byte: the reference
/// of the word-wise implementation.
fn flow_hash_by_bytes(key: &FlowKey, seed: u32) -> u32 {
    let word = |b: &[u8; 16], i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let (sport, dport) = (key.sport.to_ne_bytes(), key.vip.port.to_ne_bytes());
    let ports = u32::from_le_bytes([sport[0], sport[1], dport[0], dport[1]]);
    let tail = u32::from(key.vip.proto) | (u32::from(key.vip.family) << 8);
    let (src, dst) = (&key.src, &key.vip.addr);
    if key.vip.family == FAMILY_V4 {
        return hashword(&[word(src, 0), word(dst, 0), ports, tail], seed);
    }
    let mut words = [0; 10];
    for i in 0..4 {
        words[i] = word(src, 4 * i);
        words[4 + i] = word(dst, 4 * i);
    }
    words[8] = ports;
    words[9] = tail;
    hashword(&words, seed)
}

proptest::proptest! {
    /// The word-wise flow hash equals the byte-wise definition for any key (any
    /// family byte, padding and seed).
    #[test]
    fn reads_the_documented_words(
        addr in proptest::array::uniform16(proptest::num::u8::ANY),
        src in proptest::array::uniform16(proptest::num::u8::ANY),
        port: u16, sport: u16, proto: u8,
        family in proptest::prop_oneof![proptest::strategy::Just(FAMILY_V4), proptest::strategy::Just(FAMILY_V6), proptest::num::u8::ANY],
        pad: [u8; 2], seed: u32,
    ) {
        let key = FlowKey { vip: VipKey { addr, port, proto, family }, src, sport, _pad: pad };
        proptest::prop_assert_eq!(flow_hash(&key, seed), flow_hash_by_bytes(&key, seed));
    }
}

#[test]
fn depends_on_every_field_and_the_seed() {
    let base = FlowKey {
        vip: VipKey {
            addr: [203, 0, 113, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            port: 80u16.to_be(),
            proto: PROTO_TCP,
            family: FAMILY_V4,
        },
        src: [192, 0, 2, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        sport: 40000u16.to_be(),
        _pad: [0; 2],
    };
    let h = flow_hash(&base, 0);
    let mut k = base;
    k.src[3] = 11;
    assert_ne!(flow_hash(&k, 0), h);
    let mut k = base;
    k.sport = 40001u16.to_be();
    assert_ne!(flow_hash(&k, 0), h);
    let mut k = base;
    k.vip.port = 81u16.to_be();
    assert_ne!(flow_hash(&k, 0), h);
    assert_ne!(flow_hash(&base, 1), h);
    let mut k = base;
    k.vip.family = FAMILY_V6;
    assert_ne!(flow_hash(&k, 0), h);
}

#[test]
fn a_filter_word_sets_the_bits_of_the_keys_in_it_only() {
    let key = |port: u16| VipKey {
        addr: [203, 0, 113, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        port: port.to_be(),
        proto: 6,
        family: 4,
    };
    let a = key(80);
    let (word, value) = filter_word(&a, [a].iter());
    assert_eq!(word, vip_filter_bit(&a) / 64);
    assert_eq!(value, 1u64 << (vip_filter_bit(&a) % 64));
    let elsewhere = (1..1000)
        .map(key)
        .find(|k| vip_filter_bit(k) / 64 != word)
        .expect("a key in another word");
    assert_eq!(filter_word(&a, [a, elsewhere].iter()), (word, value));
    assert_eq!(filter_word(&a, [elsewhere].iter()), (word, 0));
}
