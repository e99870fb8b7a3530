//! [`MaglevError`]: every way a table cannot be built, each naming the problem and the
//! offending value.

use super::BackendKey;
#[cfg(doc)]
use super::MAX_TABLE_SIZE;

/// Why a Maglev table, backend or permutation was rejected. The `Display` text names the
/// problem and the value (these texts are part of the operator interface and are
/// tested verbatim).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MaglevError {
    /// The table size is 0 or 1.
    #[error("table_size must be a prime >= 2 (got {size})")]
    TableSizeTooSmall {
        /// The rejected size.
        size: u32,
    },
    /// The table size is above [`MAX_TABLE_SIZE`] (checked before anything is
    /// allocated).
    #[error("table_size {size} exceeds maximum {max}")]
    TableSizeTooLarge {
        /// The rejected size.
        size: u32,
        /// [`MAX_TABLE_SIZE`].
        max: u32,
    },
    /// The table size is not prime (the permutations of section 3.4 need a prime).
    #[error("table_size {size} is not prime (nearest primes: {below} and {above})")]
    TableSizeNotPrime {
        /// The rejected size.
        size: u32,
        /// The largest prime below `size`.
        below: u32,
        /// The smallest prime above `size`, which may exceed [`MAX_TABLE_SIZE`].
        above: u32,
    },
    /// More backends with weight > 0 than slots: some would own no slot.
    #[error("table_size {size} is smaller than backend count {backends}")]
    TableSizeBelowBackendCount {
        /// The table size.
        size: u32,
        /// Backends with weight > 0.
        backends: usize,
    },
    /// Two backends have the same canonical key.
    #[error("duplicate backend {key}")]
    DuplicateBackend {
        /// The key given twice.
        key: BackendKey,
    },
    /// A backend address could not be parsed.
    #[error("invalid backend address {text:?}: expected ADDR, ADDR:PORT or [V6ADDR]:PORT")]
    InvalidAddress {
        /// The text as given.
        text: String,
    },
    /// A backend weight is not an integer in `0..=u32::MAX`.
    #[error(
        "invalid weight {text:?} for backend {backend}: expected an integer from 0 to 4294967295"
    )]
    InvalidWeight {
        /// The backend's address text as given.
        backend: String,
        /// The weight text as given.
        text: String,
    },
    /// An explicit permutation is out of range for the table size.
    #[error(
        "permutation {index} (offset {offset}, skip {skip}) is invalid for table_size {size}: \
         need offset < table_size and 1 <= skip < table_size"
    )]
    InvalidPermutation {
        /// Position of the permutation in the list given.
        index: usize,
        /// The offset given.
        offset: u32,
        /// The skip given.
        skip: u32,
        /// The table size.
        size: u32,
    },
}
