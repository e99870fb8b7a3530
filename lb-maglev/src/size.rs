//! Table size `M`: the maximum, primality and validation (the default is
//! [`crate::defaults::TABLE_SIZE`]).

use super::MaglevError;

/// The largest accepted table size, a prime. A table of this size keeps 4,000,037 `u32`
/// slots (16 MB); building it needs at most about 12 bytes per slot (48.5 MB: the
/// slots, a bitmap and, for unequal weights, the turn order and one counter per round),
/// which bounds the memory one configuration entry can make the controller allocate: a
/// larger size is refused before anything is allocated (BR-04.T3). It leaves room for 40,000 backends at the paper's advice of
/// `M >= 100 x N`.
pub const MAX_TABLE_SIZE: u32 = 4_000_037;

/// The paper's sizing advice (section 3.4): `M` should be larger than 100 x N so that
/// no backend's share differs much from its ideal. Smaller tables are accepted with a
/// warning.
pub const ADVISED_SLOTS_PER_BACKEND: u64 = 100;

const _: () = assert!(is_prime(crate::defaults::TABLE_SIZE) && is_prime(MAX_TABLE_SIZE));
const _: () = assert!(MAX_TABLE_SIZE >= 1_048_573 && MAX_TABLE_SIZE < u32::MAX / 2);

/// Whether `n` is prime (deterministic trial division by 2, 3 and 6k +/- 1 up to
/// sqrt(n); at most ~22,000 divisions for any `u32`).
#[must_use]
pub const fn is_prime(n: u32) -> bool {
    if n < 4 {
        return n >= 2;
    }
    if n.is_multiple_of(2) || n.is_multiple_of(3) {
        return false;
    }
    let n = n as u64;
    let mut d = 5_u64;
    while d * d <= n {
        if n.is_multiple_of(d) || n.is_multiple_of(d + 2) {
            return false;
        }
        d += 6;
    }
    true
}

/// Checks that `size` can be a table size: a prime in `[2, MAX_TABLE_SIZE]`. Nothing is
/// allocated before this check passes.
///
/// # Errors
/// In this order: [`MaglevError::TableSizeTooSmall`] for 0 and 1,
/// [`MaglevError::TableSizeTooLarge`] above [`MAX_TABLE_SIZE`],
/// [`MaglevError::TableSizeNotPrime`] (with the nearest primes) otherwise.
pub fn validate_table_size(size: u32) -> Result<(), MaglevError> {
    if size < 2 {
        return Err(MaglevError::TableSizeTooSmall { size });
    }
    if size > MAX_TABLE_SIZE {
        return Err(MaglevError::TableSizeTooLarge {
            size,
            max: MAX_TABLE_SIZE,
        });
    }
    if !is_prime(size) {
        // size is in [4, MAX_TABLE_SIZE] here, so a prime exists on both sides and the
        // search terminates within the prime gap (< 200 below 4,000,037).
        let below = (2..size).rev().find(|&n| is_prime(n)).unwrap_or(2);
        let above = (size + 1..).find(|&n| is_prime(n)).unwrap_or(size);
        return Err(MaglevError::TableSizeNotPrime { size, below, above });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primality_matches_a_sieve() {
        const LIMIT: usize = 100_000;
        let mut composite = vec![false; LIMIT];
        for n in 2..LIMIT {
            if !composite[n] {
                for multiple in (n * n..LIMIT).step_by(n) {
                    composite[multiple] = true;
                }
            }
            assert_eq!(
                is_prime(u32::try_from(n).unwrap()),
                !composite[n],
                "n = {n}"
            );
        }
        assert!(!is_prime(0) && !is_prime(1));
        assert!(is_prime(4_294_967_291)); // largest u32 prime
        assert!(!is_prime(u32::MAX));
        assert!(!is_prime(65_521 * 65_519));
    }

    #[test]
    fn validation_messages() {
        let text = |size| validate_table_size(size).unwrap_err().to_string();
        assert_eq!(text(0), "table_size must be a prime >= 2 (got 0)");
        assert_eq!(text(1), "table_size must be a prime >= 2 (got 1)");
        assert_eq!(
            text(65_536),
            "table_size 65536 is not prime (nearest primes: 65521 and 65537)"
        );
        assert_eq!(
            text(4),
            "table_size 4 is not prime (nearest primes: 3 and 5)"
        );
        assert_eq!(
            text(10_000_019),
            "table_size 10000019 exceeds maximum 4000037"
        );
        assert_eq!(
            text(u32::MAX),
            "table_size 4294967295 exceeds maximum 4000037"
        );
        for ok in [2, 3, 7, 1_009, 65_537, 655_373, 1_048_573, MAX_TABLE_SIZE] {
            assert_eq!(validate_table_size(ok), Ok(()), "{ok}");
        }
    }
}
