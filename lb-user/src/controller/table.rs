//! What the controller keeps of a VIP's Maglev table: the table itself once, as the
//! backend id of every slot in `u16`s (the form it is written to the data plane from,
//! see [`CompactImage`](crate::dataplane::CompactImage)), and the builder's facts
//! about it ([`TableFacts`]: backends, slot counts, fingerprint) without the builder's
//! own `u32` slot array, which is dropped once the ids are taken from it.
//!
//! Memory, for M = 65,537: 128 KiB of slots per VIP, where keeping the builder's table
//! beside the written ids took 512 KiB.
//!
//! A restart recognises an installed table by its [`OwnersDigest`], recorded with the
//! facts, instead of building the table again ([`facts_of_installed`]).

use std::{collections::BTreeMap, fmt, sync::Arc};

use sha2::{Digest as _, Sha256};

use crate::maglev::{
    Backend, BackendKey, Fingerprint, MaglevTable,
    fingerprint::{parse_hex, write_hex},
};

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

/// SHA-256 (FIPS 180-4) of a table's slot owners as indices into its key-sorted
/// backends ([`MaglevTable::backends`]), so that a restart can tell whether an installed
/// table is the one a recorded spec builds without building it (about 0.1 ms for
/// M = 65,537 where a build and its fingerprint take about 1.5 ms).
///
/// # Encoding, version 1
/// ```text
/// "lb-table-owners-v1\n", M as u32 little-endian,
/// for each slot 0..M-1, in order: its owner's index as u16 little-endian
/// ```
/// An empty table (no backend with weight > 0) has no owner: the header and M alone.
/// Unlike the [`Fingerprint`], the digest covers the size and does not depend on the
/// keys' texts. It pins nothing across builds: the table algorithm's version is
/// recorded beside it ([`crate::maglev::FINGERPRINT_VERSION`]). `Display` and serde give
/// 64 lowercase hexadecimal digits.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct OwnersDigest([u8; 32]);

/// The first bytes hashed.
const OWNERS_HEADER: &[u8] = b"lb-table-owners-v1\n";

impl OwnersDigest {
    /// The digest of `table`; `None` when an owner's index does not fit in `u16`.
    pub fn of(table: &MaglevTable) -> Option<Self> {
        let mut hasher = OwnersHasher::new(table.size());
        for &owner in table.slots() {
            hasher.push(u16::try_from(owner).ok()?);
        }
        Some(hasher.finish())
    }
}

impl fmt::Display for OwnersDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_hex(f, &self.0)
    }
}

impl fmt::Debug for OwnersDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnersDigest({self})")
    }
}

impl serde::Serialize for OwnersDigest {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for OwnersDigest {
    /// Deserialized from 64 hexadecimal digits (either case).
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        parse_hex(&text)
            .map(Self)
            .ok_or_else(|| serde::de::Error::custom(format!("invalid owners digest {text:?}")))
    }
}

/// [`OwnersDigest`]'s hasher, fed one owner index at a time in 64 KiB blocks.
struct OwnersHasher {
    hasher: Sha256,
    block: Vec<u8>,
}

impl OwnersHasher {
    const BLOCK: usize = 64 * 1024;

    fn new(size: u32) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(OWNERS_HEADER);
        hasher.update(size.to_le_bytes());
        Self {
            hasher,
            block: Vec::with_capacity(Self::BLOCK),
        }
    }

    fn push(&mut self, owner: u16) {
        self.block.extend_from_slice(&owner.to_le_bytes());
        if self.block.len() >= Self::BLOCK {
            self.hasher.update(&self.block);
            self.block.clear();
        }
    }

    /// Owner indices already encoded (u16 little-endian each).
    fn update(&mut self, encoded: &[u8]) {
        self.hasher.update(&self.block);
        self.block.clear();
        self.hasher.update(encoded);
    }

    fn finish(mut self) -> OwnersDigest {
        self.hasher.update(&self.block);
        OwnersDigest(self.hasher.finalize().into())
    }
}

/// What a restart recorded of an installed table: the digest and fingerprint of the
/// table its spec built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Recorded {
    pub(super) owners: OwnersDigest,
    pub(super) fingerprint: Fingerprint,
}

/// Reusable scratch of [`facts_of_installed`]: the owner index of each backend id
/// (`u32::MAX` for none), 256 KiB, cleared after each use.
pub(super) struct OwnerIndex(Vec<u32>);

impl OwnerIndex {
    pub(super) fn new() -> Self {
        Self(vec![u32::MAX; lb_common::maps::MAX_BACKENDS as usize])
    }

    /// Binds `ids[i]` to owner `i`; false when an id is 0, beyond the map, or given
    /// twice (no table of these ids). [`Self::clear`] undoes it either way.
    fn bind(&mut self, ids: &[u32]) -> bool {
        let mut all = true;
        for (i, &id) in (0_u32..).zip(ids) {
            match self.0.get_mut(id as usize) {
                Some(owner) if id != 0 && *owner == u32::MAX => *owner = i,
                _ => all = false,
            }
        }
        all
    }

    fn clear(&mut self, ids: &[u32]) {
        for &id in ids {
            if let Some(owner) = self.0.get_mut(id as usize) {
                *owner = u32::MAX;
            }
        }
    }

    /// The slot counts of `owners` backends and the compact slots of `installed`,
    /// each slot's owner fed to `hasher`; `None` when a slot's id is bound to none.
    /// One pass over the slots into a buffer of owner indices, hashed at once.
    fn count(
        &self,
        installed: &[u32],
        owners: usize,
        hasher: &mut OwnersHasher,
    ) -> Option<(Vec<u32>, Vec<u16>)> {
        let mut slot_counts = vec![0_u32; owners];
        let mut bytes = vec![0_u8; 2 * installed.len()];
        for (pair, &id) in bytes.chunks_exact_mut(2).zip(installed) {
            let owner = *self.0.get(id as usize)?;
            *slot_counts.get_mut(owner as usize)? += 1;
            pair.copy_from_slice(&u16::try_from(owner).ok()?.to_le_bytes());
        }
        hasher.update(&bytes);
        // Every id was found in the index: each is below MAX_BACKENDS (65,536).
        let slots = installed
            .iter()
            .map(|&id| u16::try_from(id).unwrap_or(0))
            .collect();
        Some((slot_counts, slots))
    }
}

/// The facts and compact slots of `installed` (a table read back from the data plane,
/// a backend id per slot) when it is the table that `recorded` describes, built from
/// `inputs` (the active backends with their weights, sorted by key) at `size` slots,
/// with `id_of` giving each backend's id: the same owner in every slot, the size
/// included. `None` when the sizes differ, a backend of a table that is not empty has
/// no id, a slot holds an id of no input, or the digests differ (the caller then
/// treats the table as unknown).
///
/// The facts are those of the build ([`TableFacts::of`]): the backends are the inputs,
/// the slot counts are counted, the fingerprint is the recorded one.
pub(super) fn facts_of_installed(
    installed: &[u32],
    inputs: &[Backend],
    size: u32,
    mut id_of: impl FnMut(&BackendKey) -> Option<u32>,
    recorded: Recorded,
    index: &mut OwnerIndex,
) -> Option<(TableFacts, Arc<[u16]>)> {
    if installed.len() != size as usize || inputs.windows(2).any(|w| w[0].key >= w[1].key) {
        return None;
    }
    let empty = inputs.iter().all(|b| b.weight == 0);
    let mut hasher = OwnersHasher::new(size);
    let (slot_counts, slots) = if empty {
        // As `compact_slots`: an empty table is id 0 in every slot, whatever the ids.
        if installed.iter().any(|&id| id != 0) {
            return None;
        }
        (vec![0; inputs.len()], vec![0; installed.len()])
    } else {
        let ids: Option<Vec<u32>> = inputs.iter().map(|b| id_of(&b.key)).collect();
        let ids = ids?;
        let counted = index
            .bind(&ids)
            .then(|| index.count(installed, inputs.len(), &mut hasher))
            .flatten();
        index.clear(&ids);
        counted?
    };
    if hasher.finish() != recorded.owners {
        return None;
    }
    let facts = TableFacts {
        backends: inputs.to_vec(),
        slot_counts,
        fingerprint: recorded.fingerprint,
        empty,
        owners: Some(recorded.owners),
    };
    Some((facts, slots.into()))
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
    fn the_owners_digest_is_the_documented_encoding() {
        let backends: Vec<Backend> = ["198.51.100.2", "198.51.100.1", "198.51.100.3"]
            .iter()
            .zip([1, 0, 2])
            .map(|(a, w)| Backend::new(a.parse::<BackendKey>().unwrap(), w))
            .collect();
        let table = MaglevTable::build(&backends, 13, 7).unwrap();
        let mut bytes = b"lb-table-owners-v1\n".to_vec();
        bytes.extend_from_slice(&13_u32.to_le_bytes());
        for &owner in table.slots() {
            bytes.extend_from_slice(&u16::try_from(owner).unwrap().to_le_bytes());
        }
        let expected: [u8; 32] = Sha256::digest(&bytes).into();
        assert_eq!(OwnersDigest::of(&table), Some(OwnersDigest(expected)));
        // An empty table: the header and the size alone, so sizes differ.
        let empty = |m: u32| OwnersDigest::of(&MaglevTable::build(&[], m, 7).unwrap());
        let mut header = b"lb-table-owners-v1\n".to_vec();
        header.extend_from_slice(&13_u32.to_le_bytes());
        assert_eq!(
            empty(13),
            Some(OwnersDigest(Sha256::digest(&header).into()))
        );
        assert_ne!(empty(13), empty(11));
        let text = OwnersDigest(expected).to_string();
        let json = serde_json::to_string(&OwnersDigest(expected)).unwrap();
        assert_eq!(json, format!("\"{text}\""));
        assert_eq!(
            serde_json::from_str::<OwnersDigest>(&json).unwrap(),
            OwnersDigest(expected)
        );
        assert!(serde_json::from_str::<OwnersDigest>("\"00\"").is_err());
    }

    #[test]
    fn distinct_ids_of_a_table() {
        assert_eq!(distinct_ids(&[0, 5, 3, 5, 65_535, 3, 0]), [3, 5, 65_535]);
        assert_eq!(distinct_ids(&[70_000, 1, 70_000]), [1, 70_000]);
        assert!(distinct_ids(&[0, 0]).is_empty());
    }
}
