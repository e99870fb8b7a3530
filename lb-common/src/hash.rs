// SPDX-License-Identifier: MIT OR Apache-2.0
//! The flow hash: the one function that maps a flow to a Maglev slot, used by the XDP
//! program to pick a backend and by userspace to predict that pick (`lb flow`).
//!
//! Algorithm: Bob Jenkins' lookup3 `hashword()` (public domain, 2006,
//! <http://burtleburtle.net/bob/c/lookup3.c>; the same function as the Linux kernel's
//! `jhash2()` in `include/linux/jhash.h`), over the 32-bit words of the flow:
//!
//! - IPv4: `[src, dst, ports, proto | family << 8]` (4 words);
//! - IPv6: `[src0..src3, dst0..dst3, ports, proto | family << 8]` (10 words);
//!
//! where an address word is four address bytes in network order read as a little-endian
//! `u32`, and `ports` is the two source-port bytes followed by the two destination-port
//! bytes (wire order) read as a little-endian `u32`. The initial value is the seed
//! ([`crate::types::LbConfig::hash_seed`]). The result does not depend on the host's byte
//! order. The slot of a flow is `flow_hash(key, seed) % M`.

use crate::{
    maps::VIP_FILTER_BITS,
    types::{FAMILY_V4, FlowKey, VipKey},
};

/// The bit of `key` in the `VIP_FILTER` bitmap: the four address words XORed, folded to
/// 16 bits, XORed with the port (wire bytes read little-endian) and the protocol. Any
/// mixing works as long as both sides use this one function; it only has to be cheap
/// and spread VIPs over the bitmap.
#[inline(always)]
pub fn vip_filter_bit(key: &VipKey) -> u32 {
    let w = key.words();
    let a = w[0] ^ w[1] ^ w[2] ^ w[3];
    let p = key.port.to_ne_bytes();
    let port = u32::from_le_bytes([p[0], p[1], 0, 0]);
    (a ^ (a >> 16) ^ port ^ (u32::from(key.proto) << 3)) & (VIP_FILTER_BITS - 1)
}

/// The word of a bitmap indexed like `VIP_FILTER` (`VIP_FILTER`, `FAST_FILTER`,
/// `SOURCE_FILTER`) that holds `key`'s bit: its index, and its value with the bit of each
/// of `keys` that falls in it set ([`vip_filter_bit`]). Userspace rewrites whole words.
#[must_use]
pub fn filter_word<'a>(key: &VipKey, keys: impl Iterator<Item = &'a VipKey>) -> (u32, u64) {
    let word = vip_filter_bit(key) / 64;
    let value = keys
        .map(vip_filter_bit)
        .filter(|bit| bit / 64 == word)
        .fold(0u64, |w, bit| w | 1u64 << (bit % 64));
    (word, value)
}

#[inline(always)]
fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(4);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(6);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(8);
    *b = b.wrapping_add(*a);
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(16);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(19);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(4);
    *b = b.wrapping_add(*a);
}

#[inline(always)]
fn finalize(a: &mut u32, b: &mut u32, c: &mut u32) {
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(14));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(11));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(25));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(16));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(4));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(14));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(24));
}

/// lookup3 `hashword()` over `words` with initial value `seed`.
#[inline(always)]
pub fn hashword(words: &[u32], seed: u32) -> u32 {
    // The length term is in bytes (words << 2) as in lookup3; truncation is part of the
    // algorithm (it hashes at most u32::MAX / 4 words).
    #[expect(
        clippy::cast_possible_truncation,
        reason = "lookup3 defines the length term modulo 2^32"
    )]
    let init = 0xdead_beef_u32
        .wrapping_add((words.len() as u32) << 2)
        .wrapping_add(seed);
    let (mut a, mut b, mut c) = (init, init, init);
    let mut rest = words;
    while rest.len() > 3 {
        a = a.wrapping_add(rest[0]);
        b = b.wrapping_add(rest[1]);
        c = c.wrapping_add(rest[2]);
        mix(&mut a, &mut b, &mut c);
        rest = &rest[3..];
    }
    match rest.len() {
        3 => {
            c = c.wrapping_add(rest[2]);
            b = b.wrapping_add(rest[1]);
            a = a.wrapping_add(rest[0]);
            finalize(&mut a, &mut b, &mut c);
        }
        2 => {
            b = b.wrapping_add(rest[1]);
            a = a.wrapping_add(rest[0]);
            finalize(&mut a, &mut b, &mut c);
        }
        1 => {
            a = a.wrapping_add(rest[0]);
            finalize(&mut a, &mut b, &mut c);
        }
        _ => {}
    }
    c
}

/// The flow hash of `key` with `seed` (see the module documentation for the exact
/// words hashed).
///
/// The words are read from the key as whole aligned `u32` ([`FlowKey::words`]: `0..4`
/// the VIP address, `4` the port, protocol and family, `5..9` the client address, `9`
/// the client port and padding), not byte by byte: the BPF target has no unaligned
/// loads, so LLVM builds a word from bytes with four loads, three shifts and three ORs.
/// `u32::from_le` keeps the documented little-endian reading on any host.
#[inline(always)]
pub fn flow_hash(key: &FlowKey, seed: u32) -> u32 {
    let w = key.words().map(u32::from_le);
    let ports = (w[9] & 0xffff) | (w[4] << 16);
    let tail = w[4] >> 16;
    if key.vip.family == FAMILY_V4 {
        hashword(&[w[5], w[0], ports, tail], seed)
    } else {
        hashword(
            &[w[5], w[6], w[7], w[8], w[0], w[1], w[2], w[3], ports, tail],
            seed,
        )
    }
}

#[cfg(test)]
mod tests;
