//! [`Fingerprint`]: a digest of a table's slot owners, so operators can compare the
//! tables of several instances: instances behind the same ECMP routers must agree on
//! every slot, or a flow that moves between them changes backend.
//!
//! # Encoding, version 1
//! SHA-256 (FIPS 180-4) over the bytes
//! ```text
//! "lb-maglev-fingerprint-v1\n"
//! for each slot 0..M-1, in order: canonical key text of the slot's owner, then "\n"
//! ```
//! where the canonical key text is the ASCII text of [`BackendKey`]'s `Display`
//! (`198.51.100.11`, `[2001:db8::1]:80`, ...). An empty table (no backend with
//! weight > 0) is the header alone. The seed, the weights and drained backends are not
//! encoded: two tables with the same owner in every slot have the same fingerprint,
//! because the data plane behaves the same with either. The digest can be recomputed
//! outside `lb` from a dump of the owners, e.g. with `sha256sum`.
//!
//! # A VIP's fingerprint: the table and its hash fields
//! The fingerprint a VIP shows (`lb status`, reports, `lb fleet`, `lb table build
//! --hash`) also covers the fields that pick a flow's slot (lb.toml's `vip.hash` and
//! `vip.hash_source_prefix`, [`lb_common::hash_fields`]): two instances with the same
//! table but other hash fields send a flow to different backends.
//! [`Fingerprint::with_hash_fields`] leaves a table's fingerprint unchanged for the
//! default fields, the 5-tuple; for any other fields it is SHA-256 over
//! ```text
//! "lb-maglev-fingerprint-v1+hash\n" || the table's 32 digest bytes || "hash=" name "/" prefix "\n"
//! ```
//! with the fields' lb.toml name (`src`, `src+dport`, `dport`) and the prefix length (0:
//! the whole address; meaningless with `dport`, where it is 0). The affinity timeout is
//! not covered: it changes no flow's slot.
//!
//! The fingerprint of given inputs changes only when the encoding or the table
//! algorithm changes deliberately; either change must bump [`FINGERPRINT_VERSION`] (and
//! the header). A golden test pins it.

use std::{fmt, str::FromStr};

use lb_common::hash_fields::{Fields, HashFields};
use sha2::{Digest as _, Sha256};

use super::{BackendKey, key::MAX_KEY_TEXT_LEN};

/// Version of the fingerprint encoding and of the table algorithm it pins.
pub const FINGERPRINT_VERSION: u32 = 1;

/// The first bytes hashed.
const HEADER: &[u8] = b"lb-maglev-fingerprint-v1\n";
/// The longest line hashed per slot: a key's canonical text and its newline.
const LINE: usize = MAX_KEY_TEXT_LEN + 1;
/// The first bytes hashed for a VIP with hash fields other than the 5-tuple.
const HASH_HEADER: &[u8] = b"lb-maglev-fingerprint-v1+hash\n";

/// A table's SHA-256 fingerprint (32 bytes). `Display` and serde give 64 lowercase
/// hexadecimal digits; [`FromStr`] parses them back (either case).
#[derive(Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Fingerprint(#[serde(with = "hex32")] [u8; 32]);

impl Fingerprint {
    /// The fingerprint of a table whose slot `s` is owned by `keys[slots[s]]`.
    ///
    /// # Panics
    /// If a slot indexes past `keys`.
    #[must_use]
    pub fn of_slots(keys: &[BackendKey], slots: &[u32]) -> Self {
        // Each key's line (its text and "\n") padded to LINE bytes: a slot's line is
        // one copy of a fixed size (the padding is overwritten by the next line or
        // never hashed), not a copy of its length.
        let lines: Vec<([u8; LINE], usize)> = keys
            .iter()
            .map(|key| {
                let text = key.canonical_text();
                let text = text.as_bytes();
                let mut line = [0; LINE];
                line[..text.len()].copy_from_slice(text);
                line[text.len()] = b'\n';
                (line, text.len() + 1)
            })
            .collect();
        let mut hasher = Sha256::new();
        hasher.update(HEADER);
        // Feed the hasher in large blocks rather than one small update per slot.
        const BLOCK: usize = 64 * 1024;
        let mut block = vec![0_u8; BLOCK + LINE];
        let mut filled = 0;
        for &slot in slots {
            let (line, len) = &lines[slot as usize];
            block[filled..filled + LINE].copy_from_slice(line);
            filled += len;
            if filled >= BLOCK {
                hasher.update(&block[..filled]);
                filled = 0;
            }
        }
        hasher.update(&block[..filled]);
        Self(hasher.finalize().into())
    }

    /// The digest's bytes.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The fingerprint of a VIP whose table has fingerprint `self` and whose flows
    /// pick their slot by `hash` (see the module documentation): `self` for the
    /// 5-tuple.
    #[must_use]
    pub fn with_hash_fields(self, hash: HashFields) -> Self {
        if hash.fields == Fields::FiveTuple {
            return self;
        }
        let mut hasher = Sha256::new();
        hasher.update(HASH_HEADER);
        hasher.update(self.0);
        hasher.update(format!("hash={}/{}\n", hash.fields.name(), hash.prefix).as_bytes());
        Self(hasher.finalize().into())
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_hex(f, &self.0)
    }
}

/// Writes the 32 bytes of a SHA-256 digest as 64 lowercase hexadecimal digits.
///
/// # Errors
/// As the formatter's.
pub fn write_hex(f: &mut fmt::Formatter<'_>, digest: &[u8; 32]) -> fmt::Result {
    for byte in digest {
        write!(f, "{byte:02x}")?;
    }
    Ok(())
}

/// The 32 bytes of a SHA-256 digest written as 64 hexadecimal digits (either case);
/// `None` for any other text.
pub(crate) fn parse_hex(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut bytes = [0; 32];
    for (byte, pair) in bytes.iter_mut().zip(text.as_bytes().chunks_exact(2)) {
        *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(bytes)
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

/// A text that is not 64 hexadecimal digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid fingerprint {0:?}: expected 64 hexadecimal digits")]
pub struct ParseFingerprintError(String);

impl FromStr for Fingerprint {
    type Err = ParseFingerprintError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        parse_hex(text)
            .map(Self)
            .ok_or_else(|| ParseFingerprintError(text.to_owned()))
    }
}

/// Serde of a 32-byte digest as 64 hexadecimal digits (lowercase written, either case
/// read), for `#[serde(with = "hex32")]`.
pub mod hex32 {
    use std::fmt;

    /// Serializes `digest` as 64 lowercase hexadecimal digits.
    ///
    /// # Errors
    /// As the serializer's.
    pub fn serialize<S: serde::Serializer>(
        digest: &[u8; 32],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        struct Hex<'a>(&'a [u8; 32]);
        impl fmt::Display for Hex<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                super::write_hex(f, self.0)
            }
        }
        serializer.collect_str(&Hex(digest))
    }

    /// Deserializes 64 hexadecimal digits.
    ///
    /// # Errors
    /// Any other text.
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> Result<[u8; 32], D::Error> {
        let text = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(deserializer)?;
        super::parse_hex(&text).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "invalid digest {text:?}: expected 64 hexadecimal digits"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_is_the_documented_one() {
        let keys: Vec<BackendKey> = ["198.51.100.11", "[2001:db8::1]:80"]
            .iter()
            .map(|t| t.parse().unwrap())
            .collect();
        let mut expected = Sha256::new();
        expected
            .update(b"lb-maglev-fingerprint-v1\n198.51.100.11\n[2001:db8::1]:80\n198.51.100.11\n");
        let expected: [u8; 32] = expected.finalize().into();
        assert_eq!(
            Fingerprint::of_slots(&keys, &[0, 1, 0]).as_bytes(),
            &expected
        );
    }

    #[test]
    fn blocks_do_not_change_the_digest() {
        // The longest text there is (47 bytes) among them: full-width lines cross the
        // blocks' ends too.
        let longest: BackendKey = "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"
            .parse()
            .unwrap();
        assert_eq!(longest.to_string().len(), MAX_KEY_TEXT_LEN);
        let keys: Vec<BackendKey> = (0..50_u8)
            .map(|i| std::net::Ipv4Addr::new(198, 51, 100, i).into())
            .chain([longest])
            .collect();
        let slots: Vec<u32> = (0..20_000).map(|s| s % 51).collect();
        let mut bytes = HEADER.to_vec();
        for &s in &slots {
            bytes.extend_from_slice(keys[s as usize].to_string().as_bytes());
            bytes.push(b'\n');
        }
        let expected: [u8; 32] = Sha256::digest(&bytes).into();
        assert_eq!(Fingerprint::of_slots(&keys, &slots).as_bytes(), &expected);
    }

    #[test]
    fn empty_table_and_sha256_known_answer() {
        // SHA-256 of the header alone, computed independently (FIPS 180-4 known answer
        // for "abc" checks the hash itself).
        let abc: [u8; 32] = Sha256::digest(b"abc").into();
        assert_eq!(
            Fingerprint(abc).to_string(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let empty = Fingerprint::of_slots(&[], &[]);
        assert_eq!(empty, Fingerprint(Sha256::digest(HEADER).into()));
    }

    #[test]
    fn the_hash_fields_are_covered_as_documented() {
        let table = Fingerprint([7; 32]);
        let h = |fields, prefix| HashFields {
            fields,
            prefix,
            affinity_secs: 0,
        };
        assert_eq!(table.with_hash_fields(HashFields::default()), table);
        let src24 = table.with_hash_fields(h(Fields::Src, 24));
        let mut bytes = b"lb-maglev-fingerprint-v1+hash\n".to_vec();
        bytes.extend_from_slice(&[7; 32]);
        bytes.extend_from_slice(b"hash=src/24\n");
        assert_eq!(src24, Fingerprint(Sha256::digest(&bytes).into()));
        let all = [
            src24,
            table,
            table.with_hash_fields(h(Fields::Src, 0)),
            table.with_hash_fields(h(Fields::SrcDport, 24)),
            table.with_hash_fields(h(Fields::Dport, 0)),
            Fingerprint([8; 32]).with_hash_fields(h(Fields::Src, 24)),
        ];
        let distinct: std::collections::HashSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), all.len());
        let mut sticky = h(Fields::Src, 24);
        sticky.affinity_secs = 300;
        assert_eq!(
            table.with_hash_fields(sticky),
            src24,
            "affinity moves no slot"
        );
    }

    #[test]
    fn hex_round_trip() {
        let f = Fingerprint([0xab; 32]);
        let text = f.to_string();
        assert_eq!(text.len(), 64);
        assert_eq!(text.parse::<Fingerprint>().unwrap(), f);
        assert_eq!(text.to_uppercase().parse::<Fingerprint>().unwrap(), f);
        assert!("abc".parse::<Fingerprint>().is_err());
        assert!("g".repeat(64).parse::<Fingerprint>().is_err());
        assert!("+a".repeat(32).parse::<Fingerprint>().is_err());
        assert_eq!(serde_json::to_string(&f).unwrap(), format!("\"{text}\""));
        let back: Fingerprint = serde_json::from_str(&format!("\"{text}\"")).unwrap();
        assert_eq!(back, f);
        assert!(serde_json::from_str::<Fingerprint>("\"ab\"").is_err());
    }
}
