//! [`TableDiff`]: which slots change owner between two tables, and why (the
//! disruption that Maglev's consistency, section 3.4 of the paper, keeps small).

use super::{BackendKey, MaglevTable};

/// What changes when the data plane moves from table `old` to table `new`.
///
/// A backend is *present* in a table when it has weight > 0 there (and so owns at least
/// one slot); *common* backends are present in both tables, *added* ones only in `new`,
/// *removed* ones only in `old` (a drained backend counts as removed). Slot owners are
/// compared by [`BackendKey`], not by index.
///
/// For tables of the same size, slot `s` *changed* when its owner differs (an empty
/// table has no owner). A changed slot is counted in
/// - [`TableDiff::changed_between_common`] when both owners are common backends: the
///   collateral disruption a consistent hash keeps small;
/// - [`TableDiff::gained_by_added`] when the new owner was added;
/// - [`TableDiff::lost_by_removed`] when the old owner was removed;
///
/// the last two overlap when a removed backend's slot goes to an added one.
///
/// When the sizes differ, every flow is rehashed (`hash % M` changes): all `M_new` slots
/// count as changed, `gained_by_added` counts the new table's slots owned by added
/// backends, `changed_between_common` the rest of the new table's slots, and
/// `lost_by_removed` the old table's slots owned by removed backends.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TableDiff {
    /// The new table's size: the denominator of the fractions.
    pub size: u32,
    /// Whether the old table had a different size.
    pub size_changed: bool,
    /// Slots whose owner changed.
    pub changed: u32,
    /// Changed slots whose old and new owners are both common backends.
    pub changed_between_common: u32,
    /// Changed slots now owned by an added backend.
    pub gained_by_added: u32,
    /// Changed slots previously owned by a removed backend.
    pub lost_by_removed: u32,
    /// Backends present only in the new table, in key order.
    pub added: Vec<BackendKey>,
    /// Backends present only in the old table, in key order.
    pub removed: Vec<BackendKey>,
}

impl TableDiff {
    /// Compares `old` with `new` (see the type's documentation). O(M + N).
    #[must_use]
    pub fn between(old: &MaglevTable, new: &MaglevTable) -> Self {
        let old_present = present_in(old, new);
        let new_present = present_in(new, old);
        let added = keys_where(new, &new_present, false);
        let removed = keys_where(old, &old_present, false);
        let mut diff = Self {
            size: new.size(),
            size_changed: old.size() != new.size(),
            changed: 0,
            changed_between_common: 0,
            gained_by_added: 0,
            lost_by_removed: 0,
            added,
            removed,
        };
        if diff.size_changed {
            let in_new = |&s: &u32| new_present[s as usize];
            let gained = new.slots().iter().filter(|s| !in_new(s)).count();
            let lost = old
                .slots()
                .iter()
                .filter(|&&s| !old_present[s as usize])
                .count();
            diff.changed = count(new.slots().len());
            diff.gained_by_added = count(gained);
            diff.changed_between_common = diff.changed - diff.gained_by_added;
            diff.lost_by_removed = count(lost);
            return diff;
        }
        // Map old backend indices to new ones by key (both lists are sorted by key).
        let old_to_new = index_map(old, new);
        for slot in 0..new.size() as usize {
            let before = old.slots().get(slot).map(|&o| o as usize);
            let after = new.slots().get(slot).map(|&n| n as usize);
            let same = match (before, after) {
                (Some(o), Some(n)) => old_to_new[o] == Some(n),
                (None, None) => true,
                _ => false,
            };
            if same {
                continue;
            }
            diff.changed += 1;
            let before_common = before.map(|o| old_present[o]);
            let after_common = after.map(|n| new_present[n]);
            if before_common == Some(true) && after_common == Some(true) {
                diff.changed_between_common += 1;
            }
            if after_common == Some(false) {
                diff.gained_by_added += 1;
            }
            if before_common == Some(false) {
                diff.lost_by_removed += 1;
            }
        }
        diff
    }

    /// [`TableDiff::changed`] as a fraction of [`TableDiff::size`].
    #[must_use]
    pub fn changed_fraction(&self) -> f64 {
        self.fraction(self.changed)
    }

    /// [`TableDiff::changed_between_common`] as a fraction of [`TableDiff::size`].
    #[must_use]
    pub fn changed_between_common_fraction(&self) -> f64 {
        self.fraction(self.changed_between_common)
    }

    /// [`TableDiff::gained_by_added`] as a fraction of [`TableDiff::size`].
    #[must_use]
    pub fn gained_by_added_fraction(&self) -> f64 {
        self.fraction(self.gained_by_added)
    }

    /// [`TableDiff::lost_by_removed`] as a fraction of [`TableDiff::size`].
    #[must_use]
    pub fn lost_by_removed_fraction(&self) -> f64 {
        self.fraction(self.lost_by_removed)
    }

    fn fraction(&self, slots: u32) -> f64 {
        f64::from(slots) / f64::from(self.size.max(1))
    }
}

/// For each backend of `table`: whether it is present (weight > 0) in `table` and in
/// `other`.
fn present_in(table: &MaglevTable, other: &MaglevTable) -> Vec<bool> {
    let other_index = index_map(table, other);
    table
        .backends()
        .iter()
        .zip(other_index)
        .map(|(b, o)| b.weight > 0 && o.is_some_and(|o| other.backends()[o].weight > 0))
        .collect()
}

/// The keys of `table`'s backends with weight > 0 whose `common` flag equals `common`.
fn keys_where(table: &MaglevTable, flags: &[bool], common: bool) -> Vec<BackendKey> {
    table
        .backends()
        .iter()
        .zip(flags)
        .filter(|(b, flag)| b.weight > 0 && **flag == common)
        .map(|(b, _)| b.key)
        .collect()
}

/// For each backend of `from`, the index of the backend with the same key in `to`.
fn index_map(from: &MaglevTable, to: &MaglevTable) -> Vec<Option<usize>> {
    let to_backends = to.backends();
    let mut j = 0;
    from.backends()
        .iter()
        .map(|b| {
            while j < to_backends.len() && to_backends[j].key < b.key {
                j += 1;
            }
            (j < to_backends.len() && to_backends[j].key == b.key).then_some(j)
        })
        .collect()
}

/// A slot count (at most `MAX_TABLE_SIZE`) as `u32`.
fn count(n: usize) -> u32 {
    u32::try_from(n).expect("slot counts fit in u32")
}

#[cfg(test)]
mod tests;
