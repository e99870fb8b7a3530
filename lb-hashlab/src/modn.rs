//! mod-N: the baseline that consistent hashing replaces. A key of hash `h` goes to
//! bucket `h mod N`, bucket `i` being the `i`-th server in list order. Unweighted.
//!
//! Changing `N` to `N + 1` keeps a key only when `h mod N = h mod (N + 1)`, so about
//! `N / (N + 1)` of the keys move (Karger et al., STOC 1997, section 1, give this as the
//! reason for consistent hashing).

/// mod-N over `n` buckets. Memory: the bucket count only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModN {
    buckets: u64,
}

impl ModN {
    /// mod-N over `buckets` buckets; `None` when `buckets` is 0.
    #[must_use]
    pub fn new(buckets: usize) -> Option<Self> {
        let buckets = u64::try_from(buckets).ok().filter(|&n| n > 0)?;
        Some(Self { buckets })
    }

    /// The bucket of a key hash: `hash mod N`, in `0..N`.
    #[must_use]
    pub fn lookup(&self, hash: u64) -> usize {
        // The bucket is below N, which came from a usize.
        usize::try_from(hash % self.buckets).unwrap_or(0)
    }

    /// Bytes the lookup reads: the structure itself.
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        size_of::<Self>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_residues() {
        assert!(ModN::new(0).is_none());
        let m = ModN::new(5).unwrap();
        assert_eq!(m.lookup(12), 2);
        assert_eq!(m.lookup(u64::MAX), usize::try_from(u64::MAX % 5).unwrap());
    }
}
