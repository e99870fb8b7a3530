// SPDX-License-Identifier: MIT OR Apache-2.0
//! The backend agent's configuration (`AGENT_CONFIG`) and the second-chance candidates:
//! a GUE private data block (draft-ietf-intarea-gue, section 3.3 "Private data" of
//! draft 09: the bytes after the extension fields that Hlen still covers, for the
//! implementation's own use) that lists the backends a packet may be handed to when the
//! backend it reached holds no socket for it.
//!
//! # Wire layout
//!
//! A GUE variant 0 header with no flags (no extension fields) whose Hlen counts the
//! private data in 32-bit words; the private data is:
//!
//! ```text
//!  0        1        2        3
//! +--------+--------+--------+--------+
//! | kind   | count  | used   | 0      |   SecondChanceHdr (4 bytes)
//! +--------+--------+--------+--------+
//! | candidate 0 (4 bytes in an IPv4 outer header, 16 in IPv6)   |
//! | ...                                                         |
//! | candidate count-1                                           |
//! +-------------------------------------------------------------+
//! ```
//!
//! - `kind` [`SECOND_CHANCE_KIND`] (ASCII `S`): private data of another kind is refused;
//! - `count` 1 to [`SECOND_CHANCE_MAX`] candidates carried;
//! - `used` 0 to `count`: candidates already consumed; the next one is
//!   `candidate[used]`. A backend agent that forwards the packet to a candidate
//!   increments `used` and leaves everything else of the GUE header as it came, so a
//!   packet visits each candidate at most once and the chain ends when `used == count`;
//! - the candidates are backend addresses of the outer header's family, network order.
//!
//! So Hlen is `1 + count` words (IPv4 outer) or `1 + 4 * count` (IPv6 outer), at most
//! 4 (16 bytes) or 13 (52 bytes): with the base header, UDP and the outer IP header a
//! second-chance packet carries 48 (IPv4) or 104 (IPv6) bytes of outer headers at most.

use core::net::IpAddr;

use crate::impl_pod;

/// `AgentConfig::flags`: the configuration is written (until then every frame passes
/// untouched).
pub const AGENT_VALID: u32 = 1 << 0;
/// `AgentConfig::flags`: decapsulate IP-in-IP (IPv4-in-IPv4, IPv6-in-IPv6,
/// IPv4-in-IPv6, IPv6-in-IPv4).
pub const AGENT_IPIP: u32 = 1 << 1;
/// `AgentConfig::flags`: decapsulate GUE to `AgentConfig::gue_port`.
pub const AGENT_GUE: u32 = 1 << 2;

/// The single element of the `AGENT_CONFIG` array.
///
/// Layout (8 bytes): `flags` 0..4 (host order), `gue_port` 4..6 (network order),
/// padding 6..8 (zero).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AgentConfig {
    /// [`AGENT_VALID`], [`AGENT_IPIP`], [`AGENT_GUE`].
    pub flags: u32,
    /// The GUE UDP destination port, network order (the LB's `encap.gue_port`).
    pub gue_port: u16,
    /// Padding, zero.
    pub _pad: u16,
}
const _: () = assert!(size_of::<AgentConfig>() == 8);
impl_pod!(AgentConfig);

/// `SecondChanceHdr::kind`: ASCII `S`.
pub const SECOND_CHANCE_KIND: u8 = b'S';
/// The most candidates one packet carries: the slot's current owner is the outer
/// destination; the candidates are its earlier owners (the clean owner, and owners a
/// slot had while it was dirty), so three allow two changes in a row plus one spare.
pub const SECOND_CHANCE_MAX: usize = 3;
/// Bytes of the private data's header.
pub const SECOND_CHANCE_HDR_LEN: usize = 4;
/// The most bytes of private data: the header and three IPv6 candidates.
pub const SECOND_CHANCE_MAX_LEN: usize = SECOND_CHANCE_HDR_LEN + 16 * SECOND_CHANCE_MAX;

/// The first four bytes of the second-chance private data (see the module
/// documentation).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SecondChanceHdr {
    /// [`SECOND_CHANCE_KIND`].
    pub kind: u8,
    /// Candidates carried, 1 to [`SECOND_CHANCE_MAX`].
    pub count: u8,
    /// Candidates consumed, 0 to `count`.
    pub used: u8,
    /// Zero.
    pub reserved: u8,
}
const _: () = assert!(size_of::<SecondChanceHdr>() == SECOND_CHANCE_HDR_LEN);

/// The GUE header length field (Hlen, 32-bit words of optional fields) of private data
/// with `count` candidates in an outer header of family IPv4 (`v4`) or IPv6.
#[inline(always)]
pub const fn second_chance_hlen(count: u8, v4: bool) -> u8 {
    1 + if v4 { count } else { 4 * count }
}

/// Why candidates cannot be built or read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecondChanceError {
    /// No candidate, or more than [`SECOND_CHANCE_MAX`].
    Count,
    /// Candidates of both families, or of another family than the outer header's.
    Family,
    /// The buffer is too short, or Hlen disagrees with `count`.
    Length,
    /// Not second-chance private data (`kind`), `used` beyond `count`, or a reserved
    /// byte set.
    Invalid,
}

/// Second-chance candidates, as built by the load balancer and read by the agent and
/// the tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SecondChance {
    /// The candidates' family: IPv4 (else IPv6); the outer header's.
    pub v4: bool,
    /// Candidates carried.
    pub count: u8,
    /// Candidates consumed.
    pub used: u8,
    /// The candidates, network order (an IPv4 address in the first four bytes); the
    /// entries from `count` on are zero.
    pub candidates: [[u8; 16]; SECOND_CHANCE_MAX],
}

impl SecondChance {
    /// Candidates `addrs`, in the order they are tried, none consumed.
    ///
    /// # Errors
    /// [`SecondChanceError::Count`] for none or more than [`SECOND_CHANCE_MAX`],
    /// [`SecondChanceError::Family`] for mixed families.
    pub fn new(addrs: &[IpAddr]) -> Result<Self, SecondChanceError> {
        let first = addrs.first().ok_or(SecondChanceError::Count)?;
        if addrs.len() > SECOND_CHANCE_MAX {
            return Err(SecondChanceError::Count);
        }
        let v4 = first.is_ipv4();
        let mut candidates = [[0u8; 16]; SECOND_CHANCE_MAX];
        for (slot, addr) in candidates.iter_mut().zip(addrs) {
            match addr {
                IpAddr::V4(a) if v4 => slot[..4].copy_from_slice(&a.octets()),
                IpAddr::V6(a) if !v4 => *slot = a.octets(),
                _ => return Err(SecondChanceError::Family),
            }
        }
        Ok(Self {
            v4,
            #[expect(clippy::cast_possible_truncation, reason = "at most 3")]
            count: addrs.len() as u8,
            used: 0,
            candidates,
        })
    }

    /// The GUE Hlen of this private data.
    pub const fn hlen(&self) -> u8 {
        second_chance_hlen(self.count, self.v4)
    }

    /// Bytes of the private data (`4 * hlen`).
    pub const fn len(&self) -> usize {
        4 * self.hlen() as usize
    }

    /// Never empty: the header is always there (for clippy's `len_without_is_empty`).
    pub const fn is_empty(&self) -> bool {
        false
    }

    /// Candidate `i` as an address.
    pub fn candidate(&self, i: usize) -> Option<IpAddr> {
        let c = self
            .candidates
            .get(i)
            .filter(|_| i < usize::from(self.count))?;
        Some(if self.v4 {
            IpAddr::from([c[0], c[1], c[2], c[3]])
        } else {
            IpAddr::from(*c)
        })
    }

    /// The next candidate to try (`candidate[used]`), if any is left.
    pub fn next(&self) -> Option<IpAddr> {
        self.candidate(usize::from(self.used))
    }

    /// Writes the private data into `out`; returns its length.
    ///
    /// # Errors
    /// [`SecondChanceError::Length`] when `out` is shorter than [`Self::len`].
    pub fn write(&self, out: &mut [u8]) -> Result<usize, SecondChanceError> {
        let len = self.len();
        let out = out.get_mut(..len).ok_or(SecondChanceError::Length)?;
        out[..4].copy_from_slice(&[SECOND_CHANCE_KIND, self.count, self.used, 0]);
        let width = if self.v4 { 4 } else { 16 };
        for (chunk, c) in out[4..].chunks_exact_mut(width).zip(&self.candidates) {
            chunk.copy_from_slice(&c[..width]);
        }
        Ok(len)
    }

    /// Writes the whole GUE header (variant 0, C 0, Hlen, Proto/ctype `inner_proto`:
    /// 4 for IPv4 inside, 41 for IPv6; flags 0) followed by the private data into
    /// `out`; returns its length (`4 + 4 * hlen`).
    ///
    /// # Errors
    /// As [`Self::write`].
    pub fn write_gue(&self, inner_proto: u8, out: &mut [u8]) -> Result<usize, SecondChanceError> {
        let (head, rest) = out
            .split_at_mut_checked(4)
            .ok_or(SecondChanceError::Length)?;
        head.copy_from_slice(&[self.hlen(), inner_proto, 0, 0]);
        Ok(4 + self.write(rest)?)
    }

    /// Reads private data `data` (exactly Hlen words, as the GUE header delimits it)
    /// of an outer header of family IPv4 (`v4`) or IPv6.
    ///
    /// # Errors
    /// [`SecondChanceError::Invalid`] for another kind, a reserved byte set or `used`
    /// beyond `count`; [`SecondChanceError::Count`] for 0 or more than
    /// [`SECOND_CHANCE_MAX`] candidates; [`SecondChanceError::Length`] when `data` is
    /// not as long as `count` candidates take.
    pub fn parse(data: &[u8], v4: bool) -> Result<Self, SecondChanceError> {
        let [kind, count, used, reserved] =
            *data.first_chunk::<4>().ok_or(SecondChanceError::Length)?;
        if kind != SECOND_CHANCE_KIND || reserved != 0 || used > count {
            return Err(SecondChanceError::Invalid);
        }
        if count == 0 || usize::from(count) > SECOND_CHANCE_MAX {
            return Err(SecondChanceError::Count);
        }
        if data.len() != 4 * usize::from(second_chance_hlen(count, v4)) {
            return Err(SecondChanceError::Length);
        }
        let width = if v4 { 4 } else { 16 };
        let mut candidates = [[0u8; 16]; SECOND_CHANCE_MAX];
        for (slot, chunk) in candidates.iter_mut().zip(data[4..].chunks_exact(width)) {
            slot[..width].copy_from_slice(chunk);
        }
        Ok(Self {
            v4,
            count,
            used,
            candidates,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn candidates_round_trip_with_the_documented_bytes() {
        let a = IpAddr::from(Ipv4Addr::new(10, 0, 0, 2));
        let b = IpAddr::from(Ipv4Addr::new(10, 0, 0, 3));
        let sc = SecondChance::new(&[a, b]).unwrap();
        assert_eq!(sc.hlen(), 3);
        let mut buf = [0u8; 64];
        let n = sc.write_gue(4, &mut buf).unwrap();
        assert_eq!(
            &buf[..n],
            &[3, 4, 0, 0, b'S', 2, 0, 0, 10, 0, 0, 2, 10, 0, 0, 3]
        );
        let back = SecondChance::parse(&buf[4..n], true).unwrap();
        assert_eq!(back, sc);
        assert_eq!(back.next(), Some(a));
        let consumed = SecondChance { used: 2, ..back };
        assert_eq!(consumed.next(), None);

        let v6 = IpAddr::from(Ipv6Addr::LOCALHOST);
        let sc6 = SecondChance::new(&[v6]).unwrap();
        assert_eq!((sc6.hlen(), sc6.len()), (5, 20));
        let n = sc6.write(&mut buf).unwrap();
        assert_eq!(
            SecondChance::parse(&buf[..n], false).unwrap().next(),
            Some(v6)
        );
        // Max: 3 IPv6 candidates fit the constant and Hlen's 5 bits.
        let max = SecondChance::new(&[v6; 3]).unwrap();
        assert_eq!(max.len(), SECOND_CHANCE_MAX_LEN);
    }

    #[test]
    fn bad_candidates_are_refused_with_their_reason() {
        let a = IpAddr::from(Ipv4Addr::new(10, 0, 0, 2));
        let v6 = IpAddr::from(Ipv6Addr::LOCALHOST);
        assert_eq!(SecondChance::new(&[]), Err(SecondChanceError::Count));
        assert_eq!(SecondChance::new(&[a; 4]), Err(SecondChanceError::Count));
        assert_eq!(SecondChance::new(&[a, v6]), Err(SecondChanceError::Family));
        let ok = [b'S', 1, 0, 0, 10, 0, 0, 2];
        assert!(SecondChance::parse(&ok, true).is_ok());
        assert_eq!(
            SecondChance::parse(&ok, false),
            Err(SecondChanceError::Length)
        );
        let cases = [
            ([b'X', 1, 0, 0, 10, 0, 0, 2], SecondChanceError::Invalid),
            ([b'S', 1, 2, 0, 10, 0, 0, 2], SecondChanceError::Invalid),
            ([b'S', 1, 0, 1, 10, 0, 0, 2], SecondChanceError::Invalid),
            ([b'S', 0, 0, 0, 10, 0, 0, 2], SecondChanceError::Count),
            ([b'S', 2, 0, 0, 10, 0, 0, 2], SecondChanceError::Length),
        ];
        for (bytes, err) in cases {
            assert_eq!(SecondChance::parse(&bytes, true), Err(err), "{bytes:?}");
        }
        assert_eq!(
            SecondChance::new(&[a]).unwrap().write(&mut [0u8; 7]),
            Err(SecondChanceError::Length)
        );
    }
}
