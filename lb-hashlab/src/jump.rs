//! Jump consistent hash: Lamping and Veach, "A Fast, Minimal Memory, Consistent Hash
//! Algorithm" (2014, arXiv:1406.2294), figure 1, over buckets `0..n`.
//!
//! The 64-bit key is the key's hash (zero-extended when the hash is 32-bit). A linear
//! congruential generator jumps from bucket to bucket; the expected number of steps is
//! `ln n + 1`, the memory none. Going from `n` to `n + 1` buckets moves exactly the keys
//! that land in the new bucket `n` (about `1 / (n + 1)` of them), and going back moves
//! only those: buckets can be added and removed only at the end. Bucket `i` is the
//! `i`-th server in list order; the scheme is unweighted.

/// The LCG multiplier of the paper (`2862933555777941757`).
const MULTIPLIER: u64 = 2_862_933_555_777_941_757;

/// The bucket in `0..buckets` of a 64-bit key (`buckets` >= 1; 0 gives 0).
#[must_use]
pub fn jump_hash(mut key: u64, buckets: u32) -> u32 {
    let buckets = i64::from(buckets);
    let (mut b, mut j) = (-1_i64, 0_i64);
    while j < buckets {
        b = j;
        key = key.wrapping_mul(MULTIPLIER).wrapping_add(1);
        // (b + 1) * 2^31 / ((key >> 33) + 1): key >> 33 < 2^31, so the quotient is at
        // most 2^31 and the product stays far inside i64 and f64's exact range.
        #[expect(
            clippy::cast_possible_truncation,
            reason = "the paper truncates the double to an integer; it is below 2^62"
        )]
        let next = ((b + 1) as f64 * ((1_i64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
        j = next;
    }
    u32::try_from(b.max(0)).unwrap_or(0)
}

/// One loop iteration of [`jump_hash`]: the bucket `b` the key is in, the LCG state
/// after the step, and the next bucket `j` it jumps to (`>= buckets` ends the loop).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct JumpStep {
    /// The bucket the key is in before this jump.
    pub bucket: u32,
    /// The 64-bit LCG state after `key * 2862933555777941757 + 1`.
    pub state: u64,
    /// The next bucket, `floor((b + 1) * 2^31 / ((state >> 33) + 1))`.
    pub next: u64,
}

/// Every loop iteration of [`jump_hash`] for `key` over `buckets` buckets; the last
/// step's `bucket` is the result.
#[must_use]
pub fn jump_steps(mut key: u64, buckets: u32) -> Vec<JumpStep> {
    let mut steps = Vec::new();
    let mut j = 0_u64;
    while j < u64::from(buckets) {
        let b = j;
        key = key.wrapping_mul(MULTIPLIER).wrapping_add(1);
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "as jump_hash: a non-negative double below 2^62"
        )]
        let next = ((b + 1) as f64 * ((1_i64 << 31) as f64 / ((key >> 33) + 1) as f64)) as u64;
        steps.push(JumpStep {
            bucket: u32::try_from(b).unwrap_or(0),
            state: key,
            next,
        });
        j = next;
    }
    steps
}

/// Jump over `n` buckets. Memory: the bucket count only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Jump {
    buckets: u32,
}

impl Jump {
    /// Jump over `buckets` buckets; `None` when `buckets` is 0 or above `u32::MAX`.
    #[must_use]
    pub fn new(buckets: usize) -> Option<Self> {
        let buckets = u32::try_from(buckets).ok().filter(|&n| n > 0)?;
        Some(Self { buckets })
    }

    /// The bucket of a key hash, in `0..n`.
    #[must_use]
    pub fn lookup(&self, hash: u64) -> usize {
        jump_hash(hash, self.buckets) as usize
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
    fn stays_in_range() {
        // Key 0: the first LCG step gives 1, whose jump (to 2^31) is past every n.
        assert_eq!(jump_hash(0, 1), 0);
        assert_eq!(jump_hash(0, 100), 0);
        assert_eq!(jump_hash(u64::MAX, 1), 0);
        for key in [1_u64, 0xdead_beef, u64::MAX] {
            for n in 1..200 {
                assert!(jump_hash(key, n) < n);
            }
        }
    }

    #[test]
    fn the_steps_end_in_the_bucket() {
        for key in [1_u64, 0xdead_beef, 12_345_678] {
            for n in [1_u32, 4, 11, 100] {
                let steps = jump_steps(key, n);
                assert_eq!(steps.last().unwrap().bucket, jump_hash(key, n));
                assert!(steps.last().unwrap().next >= u64::from(n));
            }
        }
    }

    #[test]
    fn growing_moves_keys_only_to_the_new_bucket() {
        for key in (0..10_000_u64).map(|k| k.wrapping_mul(0x9e37_79b9_7f4a_7c15)) {
            for n in 1..40 {
                let (before, after) = (jump_hash(key, n), jump_hash(key, n + 1));
                assert!(after == before || after == n, "key {key} n {n}");
            }
        }
    }
}
