//! What the controller keeps of a VIP's Maglev table: the table itself once, as the
//! backend id of every slot in `u16`s (the form it is written to the data plane from,
//! see [`CompactImage`](lb_dataplane::CompactImage)), and the builder's facts
//! about it ([`TableFacts`]: backends, slot counts, fingerprint) without the builder's
//! own `u32` slot array, which is dropped once the ids are taken from it.
//!
//! Memory, for M = 65,537: 128 KiB of slots per VIP, where keeping the builder's table
//! beside the written ids took 512 KiB.
//!
//! A restart recognises an installed table by its [`OwnersDigest`], recorded with the
//! facts, instead of building the table again (`owners`).

mod owners;

use std::{collections::BTreeMap, sync::Arc};

pub use owners::OwnersDigest;
pub(super) use owners::{OWNERS_VERSION, OwnerIndex, Recorded, facts_of_installed};

use lb_maglev::{Backend, BackendKey, Fingerprint, MaglevTable};

/// The facts of a built table that status and reports show (see
/// [`MaglevTable`]): backends in key order, their slot counts, the fingerprint, and
/// the owners' digest a restart recognises the table by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableFacts {
    backends: Vec<Backend>,
    slot_counts: Vec<u32>,
    fingerprint: Fingerprint,
    empty: bool,
    owners: Option<OwnersDigest>,
}

impl TableFacts {
    /// The facts of `table` (computes its fingerprint, about 1 ms for 65,537 slots,
    /// unless it is cached already, and its owners' digest, about 0.1 ms).
    pub fn of(table: &MaglevTable) -> Self {
        Self {
            backends: table.backends().to_vec(),
            slot_counts: table.slot_counts().to_vec(),
            fingerprint: table.fingerprint(),
            empty: table.is_empty(),
            owners: OwnersDigest::of(table),
        }
    }

    /// As [`MaglevTable::backends`].
    pub fn backends(&self) -> &[Backend] {
        &self.backends
    }

    /// As [`MaglevTable::slot_counts`].
    pub fn slot_counts(&self) -> &[u32] {
        &self.slot_counts
    }

    /// As [`MaglevTable::is_empty`].
    pub fn is_empty(&self) -> bool {
        self.empty
    }

    /// As [`MaglevTable::active_backends`].
    pub fn active_backends(&self) -> usize {
        self.backends.iter().filter(|b| b.weight > 0).count()
    }

    /// As [`MaglevTable::fingerprint`].
    pub fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }

    /// The table's [`OwnersDigest`]; `None` for a table of more than 65,536 backends,
    /// which no VIP can have (backend ids are below 65,536).
    pub fn owners(&self) -> Option<OwnersDigest> {
        self.owners
    }
}

/// The backend id of every slot of `table` (`size` slots of id 0 for an empty
/// table), with `id_of` giving each backend's id; `None` when a backend in the table
/// has none.
///
/// Ids are below `lb_common::maps::MAX_BACKENDS` (65,536), so they fit in `u16`.
pub(super) fn compact_slots(
    table: &MaglevTable,
    size: u32,
    mut id_of: impl FnMut(&BackendKey) -> Option<u32>,
) -> Option<Arc<[u16]>> {
    if table.is_empty() {
        return Some(vec![0_u16; size as usize].into());
    }
    let ids: Option<Vec<u16>> = table
        .backends()
        .iter()
        .map(|b| id_of(&b.key).and_then(|id| u16::try_from(id).ok()))
        .collect();
    let ids = ids?;
    Some(table.slots().iter().map(|&i| ids[i as usize]).collect())
}

/// [`compact_slots`] with the ids of `backend_ids`, 0 for a backend it lacks.
pub(super) fn slots_with_ids(
    table: &MaglevTable,
    size: u32,
    backend_ids: &BTreeMap<BackendKey, u32>,
) -> Arc<[u16]> {
    compact_slots(table, size, |key| {
        Some(backend_ids.get(key).copied().unwrap_or(0))
    })
    .unwrap_or_else(|| vec![0_u16; size as usize].into())
}

/// The distinct backend ids (not 0) of a table read back from the data plane, in
/// increasing order: one pass over a bitmap of ids, not a set insert per slot.
pub(super) fn distinct_ids(slots: &[u32]) -> Vec<u32> {
    let mut seen = vec![0_u64; (lb_common::maps::MAX_BACKENDS as usize).div_ceil(64)];
    let mut beyond = Vec::new();
    for &id in slots {
        match seen.get_mut((id >> 6) as usize) {
            Some(word) => *word |= 1 << (id & 63),
            None => beyond.push(id),
        }
    }
    seen[0] &= !1;
    let mut ids = Vec::new();
    for (w, &word) in (0_u32..).zip(&seen) {
        let mut rest = word;
        while rest != 0 {
            ids.push(w * 64 + rest.trailing_zeros());
            rest &= rest - 1;
        }
    }
    beyond.sort_unstable();
    beyond.dedup();
    ids.extend(beyond);
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_slots_are_the_ids_of_the_owners() {
        let backends: Vec<Backend> = ["198.51.100.1", "198.51.100.2", "198.51.100.3"]
            .iter()
            .map(|a| Backend::new(a.parse::<BackendKey>().unwrap(), 1))
            .collect();
        let table = MaglevTable::build(&backends, 1_009, 7).unwrap();
        let ids: BTreeMap<BackendKey, u32> = backends
            .iter()
            .zip([10, 65_535, 3])
            .map(|(b, id)| (b.key, id))
            .collect();
        let slots = slots_with_ids(&table, 1_009, &ids);
        assert_eq!(slots.len(), 1_009);
        for (s, &owner) in table.slots().iter().enumerate() {
            let key = table.backends()[owner as usize].key;
            assert_eq!(u32::from(slots[s]), ids[&key]);
        }
        assert!(compact_slots(&table, 1_009, |_| Some(65_536)).is_none());
        let empty = MaglevTable::build(&[], 7, 7).unwrap();
        assert_eq!(&*slots_with_ids(&empty, 7, &ids), &[0; 7]);
        let facts = TableFacts::of(&table);
        assert_eq!(facts.fingerprint(), table.fingerprint());
        assert_eq!(facts.slot_counts(), table.slot_counts());
        assert_eq!(facts.active_backends(), 3);
        assert!(!facts.is_empty() && TableFacts::of(&empty).is_empty());
    }

    #[test]
    fn distinct_ids_of_a_table() {
        assert_eq!(distinct_ids(&[0, 5, 3, 5, 65_535, 3, 0]), [3, 5, 65_535]);
        assert_eq!(distinct_ids(&[70_000, 1, 70_000]), [1, 70_000]);
        assert!(distinct_ids(&[0, 0]).is_empty());
    }
}
