// SPDX-License-Identifier: MIT OR Apache-2.0
//! Internet checksum arithmetic the XDP program uses, kept here so that it runs in host
//! tests: the one's-complement sum folded with every carry (RFC 1071) and its
//! incremental update when one 16-bit word changes (RFC 1624).
//!
//! Words are taken in memory order (the 16-bit value of two wire bytes as loaded): the
//! one's-complement sum does not depend on byte order, so a checksum computed this way
//! is stored as it is (RFC 1071 section 2 (B)).
//!
//! # The two zeros
//!
//! One's complement has two zeros, +0 (0x0000) and -0 (0xffff). A sum of words computed
//! from scratch is +0 only when every word is zero, so its checksum (the complement) is
//! 0xffff only for an all-zero message, and 0x0000 when the sum is -0. RFC 1624's
//! equation 3, `~(~HC + ~m + m')` ([`update`]), gives what a computation from scratch
//! gives everywhere except for a message that becomes all zero: there `~HC + ~m` is
//! `x + ~x`, which is -0, and the result is 0x0000 where 0xffff is needed; a receiver
//! summing the message gets +0 instead of -0 and drops it. No incremental formula can
//! do better: an all-zero message and one whose other words sum to -0 have the same old
//! checksum. A checksum of 0xffff is right for both (adding -0 to a non-zero sum changes
//! nothing), so for a message that can become all zero (ICMPv4: no pseudo-header),
//! [`update_nonzero`] writes 0x0000 as 0xffff, as UDP does (RFC 768).

/// `sum` folded to 16 bits with every carry added back (not complemented).
#[inline(always)]
#[must_use]
pub fn fold(mut sum: u64) -> u16 {
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    #[expect(clippy::cast_possible_truncation, reason = "folded to 16 bits above")]
    let folded = sum as u16;
    folded
}

/// The checksum field `check` after one 16-bit word of the covered data changes from
/// `old` to `new`: `~(~check + ~old + new)` (RFC 1624 equation 3). 0x0000 for a message
/// that becomes all zero (see the module's doc): for one that can, [`update_nonzero`].
#[inline(always)]
#[must_use]
pub fn update(check: u16, old: u16, new: u16) -> u16 {
    !fold(u64::from(!check) + u64::from(!old) + u64::from(new))
}

/// [`update`] for a checksum whose covered data may become all zero (ICMPv4): 0x0000
/// is written as 0xffff, which every receiver accepts for any message and is the only
/// checksum of an all-zero one.
#[inline(always)]
#[must_use]
pub fn update_nonzero(check: u16, old: u16, new: u16) -> u16 {
    match update(check, old, new) {
        0 => 0xffff,
        check => check,
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;

    /// The checksum of `words` computed from scratch (RFC 1071).
    fn checksum(words: &[u16]) -> u16 {
        !fold(words.iter().map(|w| u64::from(*w)).sum())
    }

    /// Whether a receiver accepts `words` whose checksum field is `check`: the sum of
    /// everything is -0.
    fn verifies(words: &[u16], check: u16) -> bool {
        fold(words.iter().map(|w| u64::from(*w)).sum::<u64>() + u64::from(check)) == 0xffff
    }

    /// The 16 bits of `x` above its lowest 16.
    fn word(x: u64) -> u16 {
        let b = x.to_le_bytes();
        u16::from_le_bytes([b[2], b[3]])
    }

    /// Small deterministic generator (xorshift64*).
    fn next(state: &mut u64) -> u64 {
        *state ^= *state >> 12;
        *state ^= *state << 25;
        *state ^= *state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    #[test]
    fn an_echo_reply_that_is_all_zero_gets_0xffff() {
        // Katran's fixture: echo request, identifier, sequence and data zero. The type
        // word in memory order (little-endian: type 8 is the low byte) changes to 0.
        let request = [u16::from_ne_bytes([8, 0]), 0, 0, 0, 0];
        let check = checksum(&request);
        assert_eq!(check.to_ne_bytes(), [0xf7, 0xff]);
        let reply = [0u16; 5];
        assert_eq!(checksum(&reply), 0xffff);
        // Equation 3 gives +0 here, which the receiver refuses.
        let eq3 = update(check, request[0], 0);
        assert_eq!(eq3, 0x0000);
        assert!(!verifies(&reply, eq3));
        let fixed = update_nonzero(check, request[0], 0);
        assert_eq!(fixed, 0xffff);
        assert!(verifies(&reply, fixed));
    }

    #[test]
    fn updates_verify_and_match_a_computation_from_scratch() {
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut words = Vec::new();
        for round in 0..200_000_u32 {
            let r = next(&mut state);
            words.clear();
            let len = 1 + usize::from(word(r) % 6);
            for i in 0..len {
                // Mostly zero words, so that all-zero messages and sums of -0 come up.
                let w = next(&mut state);
                words.push(if w.is_multiple_of(3) { word(w) } else { 0 });
                if round.is_multiple_of(7) && i == 0 {
                    words[0] = 0xffff;
                }
            }
            let at = usize::from(word(r >> 8)) % len;
            let new = match (r >> 16) % 4 {
                0 => 0,
                1 => 0xffff,
                _ => word(r >> 32),
            };
            let check = checksum(&words);
            let old = words[at];
            words[at] = new;
            let scratch = checksum(&words);
            let all_zero = words.iter().all(|w| *w == 0);
            let eq3 = update(check, old, new);
            let nonzero = update_nonzero(check, old, new);
            assert!(verifies(&words, nonzero), "{words:x?} {check:#x} {old:#x}");
            if all_zero {
                assert_eq!(nonzero, 0xffff);
            } else {
                // Equation 3 is what a computation from scratch gives.
                assert_eq!(eq3, scratch, "{words:x?} {check:#x} {old:#x}");
                assert!(nonzero == scratch || scratch == 0 && nonzero == 0xffff);
            }
        }
    }
}
