//! The key hashes of the lab: what turns a key, a ring point name (`NAME#i`) or a
//! rendezvous pair (`KEY|NAME`) into the integer every scheme works on.
//!
//! Three choices ([`KeyHash`]):
//! - `fnv1a32-fmix32`: 32-bit FNV-1a (Fowler, Noll, Vo; offset basis 2166136261, prime
//!   16777619, <http://www.isthe.com/chongo/tech/comp/fnv/>) over the bytes, then the
//!   `fmix32` finaliser of MurmurHash3 (Austin Appleby, public domain) so that the low
//!   bits mix too. Unseeded: a common teaching choice.
//! - `flow`: the data plane's own flow hash, [`lb_common::hash::flow_hash`] (lookup3, 32
//!   bits), with a seed. A key written as a client endpoint `ADDR:PORT` (`192.0.2.7:40001`,
//!   `[2001:db8::7]:40001`) of the VIP's family is the TCP flow from that client to the
//!   VIP and hashes exactly as the XDP program picks its slot, by the VIP's hash fields
//!   ([`lb_common::hash_fields::table_hash`]), so `table[hash mod M]` of the lab's
//!   Maglev scheme is the slot `lb flow` predicts. Any other text (point names,
//!   rendezvous pairs, keys that are not endpoints) goes through the same lookup3
//!   `hashword` over the words `[byte length, bytes...]`, the bytes packed four to a
//!   little-endian word and the last word zero-padded.
//! - `xxh3`: XXH3-64 of the `xxhash-rust` crate (Yann Collet's XXH3, 64 bits), seeded.
//! - `value`: for worked examples, a key is its own hash: `HASH` or `NAME=HASH`, the hash
//!   a decimal integer below 2^32 (the tutorial's keys at 5, 20, 38, ...). Text that is
//!   not such a key (ring point names, rendezvous pairs) hashes as `fnv1a32-fmix32`.
//!
//! 32-bit results are zero-extended to `u64`; [`KeyHash::bits`] says which width a
//! hash fills (the ring's positions, jump's key and rendezvous' `u` depend on it).

use std::net::SocketAddr;

use lb_common::{
    hash::hashword,
    hash_fields::{HashFields, table_hash},
    types::PROTO_TCP,
};

use lb_maglev::flow::flow_key;

/// The VIP of `flow` keys when none is given: TCP port 80 of 203.0.113.10 (TEST-NET-3).
pub const DEFAULT_FLOW_VIP: &str = "203.0.113.10:80";

/// Words hashed on the stack by the `flow` byte form before it allocates.
const STACK_WORDS: usize = 64;

/// A key hash with its seed. Pure and deterministic on every platform (fixed-width
/// arithmetic, byte-order independent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyHash {
    /// 32-bit FNV-1a then MurmurHash3 `fmix32`, unseeded.
    Fnv1a32Fmix32,
    /// The data plane's table hash (32 bits) with `seed`; endpoint keys are flows to
    /// `vip`, hashed by the VIP's hash fields `fields`.
    Flow {
        /// The `hash_seed` of the data plane.
        seed: u32,
        /// The VIP endpoint keys connect to (TCP).
        vip: SocketAddr,
        /// The VIP's hash fields (`vip.hash`, `vip.hash_source_prefix`): the table
        /// hash of an endpoint key is [`lb_common::hash_fields::table_hash`], the flow
        /// hash itself for the default 5-tuple.
        fields: HashFields,
    },
    /// XXH3-64 with `seed`.
    Xxh3 {
        /// The XXH3 seed.
        seed: u64,
    },
    /// A key is its own hash (`HASH` or `NAME=HASH`); other text as `Fnv1a32Fmix32`.
    Value,
}

/// The names `--hash` accepts, in the order they are documented.
pub const HASH_NAMES: [&str; 4] = ["fnv1a32-fmix32", "flow", "xxh3", "value"];

/// The hash a `value` key gives itself: `HASH` or `NAME=HASH`, `HASH` a decimal integer
/// below 2^32; `None` for any other text.
#[must_use]
pub fn given_value(key: &str) -> Option<u64> {
    let digits = key.rsplit_once('=').map_or(key, |(_, value)| value);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u32>().ok().map(u64::from)
}

impl KeyHash {
    /// The hash's name as `--hash` spells it.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Self::Fnv1a32Fmix32 => HASH_NAMES[0],
            Self::Flow { .. } => HASH_NAMES[1],
            Self::Xxh3 { .. } => HASH_NAMES[2],
            Self::Value => HASH_NAMES[3],
        }
    }

    /// The seed, `None` for the unseeded FNV-1a.
    #[must_use]
    pub fn seed(&self) -> Option<u64> {
        match *self {
            Self::Fnv1a32Fmix32 | Self::Value => None,
            Self::Flow { seed, .. } => Some(u64::from(seed)),
            Self::Xxh3 { seed } => Some(seed),
        }
    }

    /// The width of the result in bits: 32 or 64.
    #[must_use]
    pub fn bits(&self) -> u32 {
        match self {
            Self::Fnv1a32Fmix32 | Self::Flow { .. } | Self::Value => 32,
            Self::Xxh3 { .. } => 64,
        }
    }

    /// The hash of a key: for `flow`, an endpoint key hashes as its flow to the VIP;
    /// for `value`, a key `HASH` or `NAME=HASH` is `HASH` ([`given_value`]); otherwise
    /// the same as [`KeyHash::bytes`].
    #[must_use]
    pub fn key(&self, text: &str) -> u64 {
        if let Self::Value = self
            && let Some(value) = given_value(text)
        {
            return value;
        }
        if let Self::Flow { seed, vip, fields } = *self
            && let Ok(client) = text.parse::<SocketAddr>()
            && let Some(flow) = flow_key(client, vip, PROTO_TCP)
        {
            return u64::from(table_hash(&flow, fields.flags(), seed));
        }
        self.bytes(text.as_bytes())
    }

    /// The hash of any byte string (ring point names, rendezvous pairs).
    #[must_use]
    pub fn bytes(&self, bytes: &[u8]) -> u64 {
        match *self {
            Self::Fnv1a32Fmix32 | Self::Value => u64::from(fmix32(fnv1a32(bytes))),
            Self::Flow { seed, .. } => u64::from(lookup3_bytes(bytes, seed)),
            Self::Xxh3 { seed } => xxhash_rust::xxh3::xxh3_64_with_seed(bytes, seed),
        }
    }
}

/// 32-bit FNV-1a over `bytes`.
#[must_use]
pub fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5, |hash: u32, &byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    })
}

/// MurmurHash3's 32-bit finaliser (`fmix32`): every input bit affects every output bit.
#[must_use]
pub fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// lookup3 `hashword` over `[len, bytes packed little-endian, zero-padded]` with `seed`.
#[must_use]
pub fn lookup3_bytes(bytes: &[u8], seed: u32) -> u32 {
    let count = 1 + bytes.len().div_ceil(4);
    let mut stack = [0u32; STACK_WORDS];
    let mut heap = Vec::new();
    let words: &mut [u32] = if count <= STACK_WORDS {
        &mut stack[..count]
    } else {
        heap.resize(count, 0);
        &mut heap
    };
    // A key longer than 4 GiB wraps its length word: lookup3 itself hashes lengths
    // modulo 2^32.
    #[expect(
        clippy::cast_possible_truncation,
        reason = "the length word is the byte length modulo 2^32"
    )]
    let length = bytes.len() as u32;
    words[0] = length;
    for (word, chunk) in words[1..].iter_mut().zip(bytes.chunks(4)) {
        let mut buf = [0u8; 4];
        buf[..chunk.len()].copy_from_slice(chunk);
        *word = u32::from_le_bytes(buf);
    }
    hashword(words, seed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lb_maglev::flow::{slot_of, table_slot_of};

    #[test]
    fn fnv1a32_matches_the_published_vectors() {
        // From the FNV reference test suite.
        assert_eq!(fnv1a32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a32(b"foobar"), 0xbf9c_f968);
        assert_eq!(fmix32(0), 0);
        assert_ne!(fmix32(1), 1);
    }

    #[test]
    fn flow_keys_hash_as_the_data_plane_does() {
        let vip: SocketAddr = DEFAULT_FLOW_VIP.parse().unwrap();
        let hash = KeyHash::Flow {
            seed: 7,
            vip,
            fields: HashFields::default(),
        };
        let client: SocketAddr = "192.0.2.7:40001".parse().unwrap();
        let flow = flow_key(client, vip, PROTO_TCP).unwrap();
        let slot = slot_of(&flow, 7, 65_537).unwrap();
        assert_eq!(hash.key("192.0.2.7:40001") % 65_537, u64::from(slot));
        // With the VIP's hash fields, the slot the data plane picks by them.
        let src = HashFields {
            fields: lb_common::hash_fields::Fields::Src,
            prefix: 24,
            affinity_secs: 0,
        };
        let by_src = KeyHash::Flow {
            seed: 7,
            vip,
            fields: src,
        };
        let slot = table_slot_of(&flow, src, 7, 65_537).unwrap();
        assert_eq!(by_src.key("192.0.2.7:40001") % 65_537, u64::from(slot));
        assert_eq!(by_src.key("192.0.2.7:40001"), by_src.key("192.0.2.99:1"));
        assert_ne!(hash.key("192.0.2.7:40001"), hash.key("192.0.2.7:40002"));
        // Not an endpoint, or of the other family: the byte form.
        assert_eq!(hash.key("user-17"), hash.bytes(b"user-17"));
        assert_eq!(hash.key("[2001:db8::7]:1"), hash.bytes(b"[2001:db8::7]:1"));
    }

    #[test]
    fn the_byte_form_includes_the_length() {
        assert_ne!(lookup3_bytes(b"ab", 0), lookup3_bytes(b"ab\0", 0));
        assert_ne!(lookup3_bytes(b"ab", 0), lookup3_bytes(b"ab", 1));
        let long = vec![7u8; 4 * STACK_WORDS + 3];
        assert_eq!(lookup3_bytes(&long, 3), lookup3_bytes(&long.clone(), 3));
    }

    #[test]
    fn value_keys_are_their_own_hash() {
        assert_eq!(KeyHash::Value.key("38"), 38);
        assert_eq!(KeyHash::Value.key("k3=38"), 38);
        assert_eq!(given_value("user:42"), None);
        assert_eq!(given_value("4294967296"), None);
        assert_eq!(
            KeyHash::Value.key("S0#1"),
            KeyHash::Fnv1a32Fmix32.key("S0#1")
        );
    }

    #[test]
    fn widths() {
        assert!(KeyHash::Fnv1a32Fmix32.key("x") <= u64::from(u32::MAX));
        assert_eq!(KeyHash::Xxh3 { seed: 0 }.bits(), 64);
        assert_eq!(
            KeyHash::Xxh3 { seed: 0 }.key("x"),
            xxhash_rust::xxh3::xxh3_64(b"x")
        );
    }
}
