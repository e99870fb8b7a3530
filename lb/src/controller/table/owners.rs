//! [`OwnersDigest`]: what a restart recognises an installed table by, and
//! [`facts_of_installed`], which recognises it: the table's owners read back through
//! the recorded backend ids, hashed, and compared with the recorded digest.

use std::{fmt, sync::Arc};

use sha2::{Digest as _, Sha256};

use super::TableFacts;
use lb_maglev::{
    Backend, BackendKey, Fingerprint, MaglevTable,
    fingerprint::{hex32, write_hex},
};

/// Version of the [`OwnersDigest`] encoding; the record keeps it beside the digests,
/// which are compared only under the same one.
pub(in crate::controller) const OWNERS_VERSION: u32 = 1;

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
/// keys' texts. It pins nothing across builds: the record keeps the table algorithm's
/// version ([`lb_maglev::FINGERPRINT_VERSION`]) and this encoding's
/// (`OWNERS_VERSION`) beside it. `Display` and serde give
/// 64 lowercase hexadecimal digits.
#[derive(Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct OwnersDigest(#[serde(with = "hex32")] [u8; 32]);

/// The first bytes hashed.
const OWNERS_HEADER: &[u8] = b"lb-table-owners-v1\n";

impl OwnersDigest {
    /// The digest of `table`; `None` when an owner's index does not fit in `u16`.
    pub fn of(table: &MaglevTable) -> Option<Self> {
        let mut encoded = vec![0_u8; 2 * table.slots().len()];
        for (pair, &owner) in encoded.chunks_exact_mut(2).zip(table.slots()) {
            pair.copy_from_slice(&u16::try_from(owner).ok()?.to_le_bytes());
        }
        Some(Self::of_encoded(table.size(), &encoded))
    }

    /// The digest of a table of `size` slots whose owners are `encoded` (u16
    /// little-endian each; empty for an empty table).
    fn of_encoded(size: u32, encoded: &[u8]) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(OWNERS_HEADER);
        hasher.update(size.to_le_bytes());
        hasher.update(encoded);
        Self(hasher.finalize().into())
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

/// What a restart recorded of an installed table: the digest and fingerprint of the
/// table its spec built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::controller) struct Recorded {
    pub(in crate::controller) owners: OwnersDigest,
    pub(in crate::controller) fingerprint: Fingerprint,
}

/// Reusable scratch of [`facts_of_installed`]: the owner index of each backend id
/// (`u32::MAX` for none), 256 KiB, cleared after each use.
pub(in crate::controller) struct OwnerIndex(Vec<u32>);

impl OwnerIndex {
    pub(in crate::controller) fn new() -> Self {
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

    /// The slot counts of `owners` backends, the owners of `installed` encoded as
    /// [`OwnersDigest`] hashes them, and its compact slots, in one pass; `None` when a
    /// slot's id is bound to none.
    fn count(&self, installed: &[u32], owners: usize) -> Option<(Vec<u32>, Vec<u8>, Vec<u16>)> {
        let mut slot_counts = vec![0_u32; owners];
        let mut encoded = vec![0_u8; 2 * installed.len()];
        for (pair, &id) in encoded.chunks_exact_mut(2).zip(installed) {
            let owner = *self.0.get(id as usize)?;
            *slot_counts.get_mut(owner as usize)? += 1;
            pair.copy_from_slice(&u16::try_from(owner).ok()?.to_le_bytes());
        }
        // Every id was found in the index: each is below MAX_BACKENDS (65,536).
        let slots = installed
            .iter()
            .map(|&id| u16::try_from(id).unwrap_or(0))
            .collect();
        Some((slot_counts, encoded, slots))
    }
}

/// The facts and compact slots of `installed` (a table read back from the data plane,
/// a backend id per slot) when it is the table that `recorded` describes, built from
/// `inputs` (the active backends with their weights, sorted by key) at `size` slots,
/// with `id_of` giving each backend's id: the same owner in every slot, the size
/// included. `None` (the caller then treats the table as unknown) when:
/// - the sizes differ, or `inputs` are not strictly sorted by key;
/// - the table is empty (no input of weight > 0) and a slot holds an id other than 0;
/// - a backend of a table that is not empty has no id, or an id that is 0, beyond
///   `BACKENDS` or another backend's too;
/// - a slot holds an id of no input, or the digests differ.
///
/// The facts are those of the build ([`TableFacts::of`]): the backends are the inputs,
/// the slot counts are counted, the fingerprint is the recorded one.
pub(in crate::controller) fn facts_of_installed(
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
    let (slot_counts, encoded, slots) = if empty {
        // As `compact_slots`: an empty table is id 0 in every slot, whatever the ids.
        if installed.iter().any(|&id| id != 0) {
            return None;
        }
        (vec![0; inputs.len()], Vec::new(), vec![0; installed.len()])
    } else {
        let ids: Option<Vec<u32>> = inputs.iter().map(|b| id_of(&b.key)).collect();
        let ids = ids?;
        let counted = index
            .bind(&ids)
            .then(|| index.count(installed, inputs.len()))
            .flatten();
        index.clear(&ids);
        counted?
    };
    if OwnersDigest::of_encoded(size, &encoded) != recorded.owners {
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

#[cfg(test)]
mod tests {
    use super::*;

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
        // Pinned: a change of the table algorithm or the encoding shows here.
        assert_eq!(
            OwnersDigest(expected).to_string(),
            "5ef287e88d6a7981fc8042b4769cb06aa6aa5463b6dcb8ae90d69e0495ce295a"
        );
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
}
