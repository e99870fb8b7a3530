//! [`MaglevTable`]: a validated, built Maglev lookup table and what operators want to
//! know about it (slot counts, warnings, fingerprint).

use std::{fmt, sync::OnceLock};

use super::{
    Backend, BackendKey, Fingerprint, MaglevError, Permutation, fill, quota, size,
    validate_table_size,
};

/// How many backend keys a warning lists before summarising the rest.
const WARNING_KEYS_LISTED: usize = 3;

/// A Maglev lookup table of `M` slots (Eisenbud et al., NSDI 2016, section 3.4), with
/// exact weighted slot counts.
///
/// The data plane picks a new flow's backend as `backends()[slots()[hash % M]]`.
/// Backends are sorted by [`BackendKey`] order, whatever the input order, so the same
/// set of backends, weights, size and seed gives the same table on every instance.
///
/// A table is *empty* when no backend has weight > 0 (no backends at all, or all
/// drained): then [`MaglevTable::slots`] is an empty slice (not `M` entries) and
/// [`MaglevTable::is_empty`] is true; the data plane must treat the VIP as having no
/// backend: drop and count new flows, never pass them to the host (BR-03.T3, BR-08).
#[derive(Clone)]
pub struct MaglevTable {
    size: u32,
    seed: u64,
    backends: Vec<Backend>,
    slots: Vec<u32>,
    slot_counts: Vec<u32>,
    warnings: Vec<String>,
    fingerprint: OnceLock<Fingerprint>,
}

impl MaglevTable {
    /// Builds the table of `size` slots for `backends` (any order) with hash seed `seed`.
    ///
    /// Each backend with weight > 0 owns a number of slots proportional to its weight
    /// (within one slot of `M * w / sum(w)`, equal weights giving `floor(M/N)` or
    /// `ceil(M/N)`, and at least one slot each; see [`quota`]). Backends
    /// with weight 0 are kept in [`MaglevTable::backends`] with no slots.
    ///
    /// Time: O(N log N) to sort and apportion, then about `M ln(M / 128)` probes plus
    /// O(128²) for the last slots (see [`fill`]): about 0.6 ms for `M = 65,537` on the
    /// project's machines, about a third of the time of the paper's pseudocode measured
    /// in the same run (`cargo xtask bench`).
    /// Memory: O(M + N), at most about 12 bytes per slot during the build (see
    /// [`MAX_TABLE_SIZE`](super::MAX_TABLE_SIZE)), 4 bytes per slot kept.
    ///
    /// # Errors
    /// Checked in this order, nothing being allocated before the size checks pass:
    /// - the table-size errors of [`validate_table_size`] (below 2, above
    ///   [`MAX_TABLE_SIZE`](super::MAX_TABLE_SIZE), not prime);
    /// - [`MaglevError::DuplicateBackend`] when two backends have the same canonical key
    ///   (the first duplicate in key order);
    /// - [`MaglevError::TableSizeBelowBackendCount`] when more backends have weight > 0
    ///   than there are slots.
    ///
    /// Warnings ([`MaglevTable::warnings`]) do not fail the build: a table smaller than
    /// 100 x the backends with weight > 0, backends whose weight is below the table's
    /// resolution, and an empty table.
    pub fn build(backends: &[Backend], size: u32, seed: u64) -> Result<Self, MaglevError> {
        validate_table_size(size)?;
        let mut sorted = backends.to_vec();
        sorted.sort_unstable_by_key(|b| b.key);
        if let Some(pair) = sorted.windows(2).find(|pair| pair[0].key == pair[1].key) {
            return Err(MaglevError::DuplicateBackend { key: pair[0].key });
        }
        let active = sorted.iter().filter(|b| b.weight > 0).count();
        if active > size as usize {
            return Err(MaglevError::TableSizeBelowBackendCount {
                size,
                backends: active,
            });
        }

        let weights: Vec<u32> = sorted.iter().map(|b| b.weight).collect();
        let quotas = quota::apportion(&weights, size);
        let permutations: Vec<Permutation> = sorted
            .iter()
            .map(|b| {
                if b.weight > 0 {
                    Permutation::for_key(&b.key, size, seed)
                } else {
                    // Never used: a drained backend takes no turn.
                    Permutation { offset: 0, skip: 1 }
                }
            })
            .collect();
        let slots = fill::fill_with_quotas(size, &permutations, &quotas.quotas);
        let warnings = warnings(&sorted, size, active, &quotas.raised);
        Ok(Self {
            size,
            seed,
            backends: sorted,
            slots,
            slot_counts: quotas.quotas,
            warnings,
            fingerprint: OnceLock::new(),
        })
    }

    /// The table size `M` (a prime).
    #[must_use]
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The seed of `h1`/`h2` the table was built with.
    #[must_use]
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Every backend given, drained ones included, sorted by key: what
    /// [`MaglevTable::slots`] indexes into.
    #[must_use]
    pub fn backends(&self) -> &[Backend] {
        &self.backends
    }

    /// The slot owners: `M` indices into [`MaglevTable::backends`], or an empty slice
    /// for an empty table.
    #[must_use]
    pub fn slots(&self) -> &[u32] {
        &self.slots
    }

    /// Whether no backend has weight > 0 (then [`MaglevTable::slots`] is empty).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The backend owning slot `slot` (`hash % M`), or `None` for an empty table or a
    /// slot out of range.
    #[must_use]
    pub fn owner(&self, slot: u32) -> Option<&Backend> {
        let index = *self.slots.get(slot as usize)?;
        self.backends.get(index as usize)
    }

    /// Slots owned by each backend, parallel to [`MaglevTable::backends`]
    /// (0 for drained backends); they sum to `M` unless the table is empty.
    #[must_use]
    pub fn slot_counts(&self) -> &[u32] {
        &self.slot_counts
    }

    /// The number of backends with weight > 0 (each owns at least one slot).
    #[must_use]
    pub fn active_backends(&self) -> usize {
        self.backends.iter().filter(|b| b.weight > 0).count()
    }

    /// The smallest and largest slot counts among backends with weight > 0, which show
    /// an operator how far the table is from even (a backend with few slots gets few
    /// flows), `None` for an empty table.
    #[must_use]
    pub fn min_max_slots(&self) -> Option<(u32, u32)> {
        let active = self
            .backends
            .iter()
            .zip(&self.slot_counts)
            .filter(|(b, _)| b.weight > 0)
            .map(|(_, &count)| count);
        let min = active.clone().min()?;
        let max = active.max()?;
        Some((min, max))
    }

    /// The ideal (fractional) slot count of backend `index`, `M * w / sum(w)`; 0 for an
    /// empty table.
    ///
    /// # Panics
    /// If `index` is not an index into [`MaglevTable::backends`].
    #[must_use]
    pub fn ideal_slots(&self, index: usize) -> f64 {
        let total: u64 = self.backends.iter().map(|b| u64::from(b.weight)).sum();
        if total == 0 {
            return 0.0;
        }
        f64::from(self.size) * f64::from(self.backends[index].weight) / total as f64
    }

    /// The table's fingerprint (see [`fingerprint`](super::fingerprint)); computed on
    /// first use (about 1 ms for 65,537 slots), then cached.
    #[must_use]
    pub fn fingerprint(&self) -> Fingerprint {
        *self.fingerprint.get_or_init(|| {
            let keys: Vec<BackendKey> = self.backends.iter().map(|b| b.key).collect();
            Fingerprint::of_slots(&keys, &self.slots)
        })
    }

    /// Advice about the table, one sentence each, e.g.
    /// `table_size 1009 < 100 × backends (64): expect imbalance`.
    #[must_use]
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
}

/// The warnings of a table (see [`MaglevTable::build`]).
fn warnings(sorted: &[Backend], size: u32, active: usize, raised: &[usize]) -> Vec<String> {
    let mut warnings = Vec::new();
    if active == 0 {
        warnings.push(
            "no backend with weight > 0: the table is empty and new flows are dropped".to_owned(),
        );
        return warnings;
    }
    if u64::from(size) < size::ADVISED_SLOTS_PER_BACKEND * active as u64 {
        warnings.push(format!(
            "table_size {size} < {} × backends ({active}): expect imbalance",
            size::ADVISED_SLOTS_PER_BACKEND
        ));
    }
    if !raised.is_empty() {
        let mut listed = raised
            .iter()
            .take(WARNING_KEYS_LISTED)
            .map(|&i| format!("{} (weight {})", sorted[i].key, sorted[i].weight))
            .collect::<Vec<_>>()
            .join(", ");
        if raised.len() > WARNING_KEYS_LISTED {
            listed.push_str(&format!(
                ", and {} more",
                raised.len() - WARNING_KEYS_LISTED
            ));
        }
        let (count, verb) = match raised.len() {
            1 => ("1 backend has".to_owned(), "gets"),
            n => (format!("{n} backends have"), "get"),
        };
        warnings.push(format!(
            "{count} a weight below the resolution of table_size {size} (ideal share \
             < 1 slot) and {verb} 1 slot, more than the weight asks: {listed}"
        ));
    }
    warnings
}

impl fmt::Debug for MaglevTable {
    /// Everything but the slots themselves (`M` entries), which are summarised.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaglevTable")
            .field("size", &self.size)
            .field("seed", &self.seed)
            .field("backends", &self.backends)
            .field("slot_counts", &self.slot_counts)
            .field("slots", &format_args!("[{} slots]", self.slots.len()))
            .field("warnings", &self.warnings)
            .finish_non_exhaustive()
    }
}

impl PartialEq for MaglevTable {
    /// Same size, seed, backends (with weights) and slots.
    fn eq(&self, other: &Self) -> bool {
        self.size == other.size
            && self.seed == other.seed
            && self.backends == other.backends
            && self.slots == other.slots
    }
}

impl Eq for MaglevTable {}

#[cfg(test)]
mod tests;
