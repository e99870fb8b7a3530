//! A backend's preference list over the slots: the (offset, skip) pair of section 3.4 of
//! the Maglev paper, derived from the backend's key by `h1`/`h2`, or given explicitly.
//!
//! # h1 and h2
//! Both come from one call of XXH3-128 (the XXH3 algorithm of the xxHash family,
//! specification `doc/xxhash_spec.md` of the xxHash project, 128-bit variant, with a
//! 64-bit seed; implemented by the `xxhash-rust` crate). Its input is the key's
//! canonical text (ASCII, see [`BackendKey`]), its seed the table's seed:
//! - `h1` = the low 64 bits of the digest, `offset = h1 mod M`;
//! - `h2` = the high 64 bits, `skip = h2 mod (M - 1) + 1`.
//!
//! XXH3 output is fixed by its specification (stable since xxHash 0.8.0) and does not
//! depend on the platform or process; the seed is explicit and defaults to
//! [`crate::defaults::MAGLEV_SEED`]. A golden test pins the result.

use xxhash_rust::xxh3::xxh3_128_with_seed;

use super::{BackendKey, MaglevError};

/// A backend's permutation of the `M` slots: entry `j` (for `j` in `0..M`) is
/// `(offset + j * skip) mod M`. With `M` prime and `1 <= skip < M` every slot appears
/// exactly once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Permutation {
    /// The first preferred slot, in `0..M`.
    pub offset: u32,
    /// The distance between consecutive preferences, in `1..M`.
    pub skip: u32,
}

impl Permutation {
    /// The permutation of `key` in a table of `size` slots with hash seed `seed`
    /// (section 3.4; see the module documentation for `h1`/`h2`).
    ///
    /// # Panics
    /// If `size < 2` (there is no skip in `1..size`); callers validate the size first
    /// ([`validate_table_size`](super::validate_table_size)).
    #[must_use]
    pub fn for_key(key: &BackendKey, size: u32, seed: u64) -> Self {
        assert!(size >= 2, "table_size must be >= 2, got {size}");
        let digest = xxh3_128_with_seed(key.canonical_text().as_bytes(), seed);
        #[expect(
            clippy::cast_possible_truncation,
            reason = "h1 is the low 64 bits of the 128-bit digest"
        )]
        let h1 = digest as u64;
        let h2 = (digest >> 64) as u64;
        let size = u64::from(size);
        // Both results are below size <= u32::MAX.
        #[expect(clippy::cast_possible_truncation, reason = "below size, a u32")]
        let offset = (h1 % size) as u32;
        let skip = (h2 % (size - 1)) as u32 + 1;
        Self { offset, skip }
    }

    /// Whether this permutation is valid for a table of `size` slots:
    /// `offset < size` and `1 <= skip < size`.
    #[must_use]
    pub fn is_valid_for(&self, size: u32) -> bool {
        self.offset < size && self.skip >= 1 && self.skip < size
    }

    /// Checks [`Permutation::is_valid_for`], naming the permutation by `index`.
    ///
    /// # Errors
    /// [`MaglevError::InvalidPermutation`].
    pub fn validate(&self, index: usize, size: u32) -> Result<(), MaglevError> {
        if self.is_valid_for(size) {
            Ok(())
        } else {
            Err(MaglevError::InvalidPermutation {
                index,
                offset: self.offset,
                skip: self.skip,
                size,
            })
        }
    }

    /// Entry `j` of the permutation, `(offset + j * skip) mod size` (reference
    /// formula; the builder walks the entries incrementally instead).
    #[must_use]
    pub fn entry(&self, j: u32, size: u32) -> u32 {
        let value =
            (u64::from(self.offset) + u64::from(j) * u64::from(self.skip)) % u64::from(size);
        // value < size, a u32.
        u32::try_from(value).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::defaults::MAGLEV_SEED;

    #[test]
    fn default_seed_is_documented_value() {
        assert_eq!(MAGLEV_SEED, 0x6c62_6d61_676c_6576);
        assert_eq!(MAGLEV_SEED, 7_809_924_968_928_273_782);
    }

    #[test]
    fn xxh3_matches_reference_vectors() {
        // XXH3-128 of the empty input with seed 0, from the xxHash reference
        // implementation's self-test (xxhsum --bench-all / sanity tests).
        assert_eq!(
            xxh3_128_with_seed(b"", 0),
            0x99aa_06d3_0147_98d8_6001_c324_468d_497f
        );
    }

    #[test]
    fn permutations_are_in_range_and_seeded() {
        let key: BackendKey = "198.51.100.11".parse().unwrap();
        for size in [2, 3, 7, 1_009, 65_537] {
            let p = Permutation::for_key(&key, size, MAGLEV_SEED);
            assert!(p.is_valid_for(size), "{p:?} for {size}");
        }
        let a = Permutation::for_key(&key, 65_537, MAGLEV_SEED);
        let b = Permutation::for_key(&key, 65_537, MAGLEV_SEED + 1);
        assert_ne!(a, b, "the seed changes the permutation");
        assert_eq!(a, Permutation::for_key(&key, 65_537, MAGLEV_SEED));
    }

    #[test]
    fn same_backend_same_permutation_whatever_the_spelling() {
        let a: BackendKey = "2001:db8::1".parse().unwrap();
        let b: BackendKey = "2001:0db8:0:0::1".parse().unwrap();
        assert_eq!(
            Permutation::for_key(&a, 65_537, 7),
            Permutation::for_key(&b, 65_537, 7)
        );
    }

    #[test]
    fn entries_visit_every_slot_once() {
        let size = 101;
        let p = Permutation {
            offset: 17,
            skip: 33,
        };
        let mut seen = vec![false; size as usize];
        for j in 0..size {
            let slot = p.entry(j, size) as usize;
            assert!(!seen[slot]);
            seen[slot] = true;
        }
    }

    #[test]
    fn invalid_permutations_are_named() {
        let err = Permutation { offset: 7, skip: 1 }
            .validate(2, 7)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "permutation 2 (offset 7, skip 1) is invalid for table_size 7: \
             need offset < table_size and 1 <= skip < table_size"
        );
        assert!(Permutation { offset: 0, skip: 0 }.validate(0, 7).is_err());
        assert!(Permutation { offset: 0, skip: 7 }.validate(0, 7).is_err());
        assert!(Permutation { offset: 6, skip: 6 }.validate(0, 7).is_ok());
    }
}
