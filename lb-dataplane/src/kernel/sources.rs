//! The allowed source prefixes of VIPs: the maps `SOURCE_RANGES` (an LPM trie of
//! (VIP, client prefix)), `SOURCE_FILTER` (a bitmap indexed like `VIP_FILTER`: some VIP
//! with that bit has a list) and `SOURCE_RESTRICTED` (VIP id → it has a list), and the
//! order in which a change writes them.
//!
//! A change of VIP `v`'s list from `old` to `new` runs, in this order:
//! 1. insert the prefixes of `new` missing from `old` (packets may now match either);
//! 2. if `new` is not empty: mark `v` restricted, then set its filter bit (until the
//!    bit is set nothing checks, so the list is whole before it counts);
//! 3. if `new` is empty: unmark `v` (a trie miss no longer refuses its packets), then
//!    clear the filter bit unless another restricted VIP has it;
//! 4. delete the prefixes of `old` missing from `new`.
//!
//! So a packet is checked against the old list, the new one or their union, never
//! against neither (no client of both is refused on the way, none of neither is let
//! in once step 4 is done). A failed write puts the previous list back.
//!
//! An adopted (pinned) data plane already holds lists: [`SourceMaps::adopt`] reads them
//! back from the trie, so the next change is written against what the maps hold, not
//! against nothing (a prefix removed from the file while no daemon ran is deleted, a
//! list removed whole is lifted).

use std::collections::{HashMap, HashSet};

use aya::maps::{
    Array, MapData,
    lpm_trie::{Key, LpmTrie},
};
use lb_common::{
    hash::{filter_word, vip_filter_bit},
    maps::{self, MAX_SOURCE_RANGES, MAX_VIPS, VIP_FILTER_WORDS},
    types::{FAMILY_V4, SourceData, VIP_KEY_BITS, VipKey},
};

use crate::{DataplaneError, absent_is_ok, map_err, prefix::Prefix};
use lb_maglev::flow::{addr_bytes, ip_of_bytes};

/// The three maps and the lists written, by VIP.
pub(super) struct SourceMaps {
    trie: LpmTrie<MapData, SourceData, u32>,
    filter: Array<MapData, u64>,
    restricted: Array<MapData, u32>,
    lists: HashMap<VipKey, (u32, Vec<Prefix>)>,
}

/// The trie key of `prefix` for VIP `vip`.
fn trie_key(vip: &VipKey, prefix: &Prefix) -> Key<SourceData> {
    let (addr, _) = addr_bytes(prefix.addr());
    Key::new(
        VIP_KEY_BITS + u32::from(prefix.length()),
        SourceData::new(vip, addr),
    )
}

impl SourceMaps {
    /// The maps as loaded (all empty).
    pub(super) fn new(
        trie: LpmTrie<MapData, SourceData, u32>,
        filter: Array<MapData, u64>,
        restricted: Array<MapData, u32>,
    ) -> Self {
        Self {
            trie,
            filter,
            restricted,
            lists: HashMap::new(),
        }
    }

    /// Reads back the lists an adopted data plane holds. `vips` are its `VIPS` entries
    /// (key and VIP id): prefixes of a VIP without one (a change a crash interrupted)
    /// are deleted, and `SOURCE_RESTRICTED` and `SOURCE_FILTER` are made to agree with
    /// the lists where they do not.
    pub(super) fn adopt(&mut self, vips: &HashMap<VipKey, u32>) -> Result<(), DataplaneError> {
        let keys: Vec<Key<SourceData>> = self
            .trie
            .keys()
            .collect::<Result<_, _>>()
            .map_err(map_err(maps::SOURCE_RANGES, "iterate"))?;
        let mut lists: HashMap<VipKey, (u32, Vec<Prefix>)> = HashMap::new();
        for trie_key in keys {
            let data = trie_key.data();
            let vip = VipKey {
                addr: data.vip_addr,
                port: data.vip_port,
                proto: data.vip_proto,
                family: data.vip_family,
            };
            let prefix = trie_key
                .prefix_len()
                .checked_sub(VIP_KEY_BITS)
                .and_then(|len| u8::try_from(len).ok())
                .zip(ip_of_bytes(data.addr, vip.family))
                .and_then(|(len, addr)| Prefix::new(addr, len).ok());
            match (vips.get(&vip), prefix) {
                (Some(id), Some(prefix)) => {
                    lists.entry(vip).or_insert((*id, Vec::new())).1.push(prefix);
                }
                _ => absent_is_ok(self.trie.remove(&trie_key))
                    .map_err(map_err(maps::SOURCE_RANGES, "delete"))?,
            }
        }
        for (_, prefixes) in lists.values_mut() {
            prefixes.sort();
        }
        self.lists = lists;
        let restricted: HashSet<u32> = self.lists.values().map(|(id, _)| *id).collect();
        for id in 0..MAX_VIPS {
            let want = u32::from(restricted.contains(&id));
            let have = self
                .restricted
                .get(&id, 0)
                .map_err(map_err(maps::SOURCE_RESTRICTED, "lookup"))?;
            if have != want {
                self.restricted
                    .set(id, want, 0)
                    .map_err(map_err(maps::SOURCE_RESTRICTED, "update"))?;
            }
        }
        let mut words = vec![0u64; VIP_FILTER_WORDS as usize];
        for key in self.lists.keys() {
            let bit = vip_filter_bit(key);
            words[(bit / 64) as usize] |= 1u64 << (bit % 64);
        }
        for (word, want) in (0u32..).zip(words) {
            let have = self
                .filter
                .get(&word, 0)
                .map_err(map_err(maps::SOURCE_FILTER, "lookup"))?;
            if have != want {
                self.filter
                    .set(word, want, 0)
                    .map_err(map_err(maps::SOURCE_FILTER, "update"))?;
            }
        }
        Ok(())
    }

    /// The lists written, by VIP (prefixes sorted).
    pub(super) fn lists(&self) -> Vec<(VipKey, Vec<Prefix>)> {
        self.lists
            .iter()
            .map(|(k, (_, prefixes))| (*k, prefixes.clone()))
            .collect()
    }

    /// Sets VIP `key`'s list (see the module documentation).
    pub(super) fn set(
        &mut self,
        key: &VipKey,
        vip_id: u32,
        prefixes: &[Prefix],
    ) -> Result<(), DataplaneError> {
        check(key, vip_id, prefixes, &self.lists)?;
        let old = self
            .lists
            .get(key)
            .map(|(_, p)| p.clone())
            .unwrap_or_default();
        if let Err(e) = self.write(key, vip_id, &old, prefixes) {
            // Back to the old list: from whatever was written, the same steps lead there.
            let _ = self.write(key, vip_id, prefixes, &old);
            return Err(e);
        }
        if prefixes.is_empty() {
            self.lists.remove(key);
        } else {
            self.lists.insert(*key, (vip_id, prefixes.to_vec()));
        }
        Ok(())
    }

    /// Steps 1 to 4 of the module documentation, from `old` to `new`.
    fn write(
        &mut self,
        key: &VipKey,
        vip_id: u32,
        old: &[Prefix],
        new: &[Prefix],
    ) -> Result<(), DataplaneError> {
        for p in new.iter().filter(|p| !old.contains(p)) {
            self.trie
                .insert(&trie_key(key, p), 1, 0)
                .map_err(map_err(maps::SOURCE_RANGES, "update"))?;
        }
        let restricted = !new.is_empty();
        if restricted {
            self.restricted
                .set(vip_id, 1, 0)
                .map_err(map_err(maps::SOURCE_RESTRICTED, "update"))?;
            self.write_filter_word(key, true)?;
        } else {
            self.restricted
                .set(vip_id, 0, 0)
                .map_err(map_err(maps::SOURCE_RESTRICTED, "update"))?;
            self.write_filter_word(key, false)?;
        }
        for p in old.iter().filter(|p| !new.contains(p)) {
            absent_is_ok(self.trie.remove(&trie_key(key, p)))
                .map_err(map_err(maps::SOURCE_RANGES, "delete"))?;
        }
        Ok(())
    }

    /// Rewrites the `SOURCE_FILTER` word holding `key`'s bit from the restricted VIPs
    /// recorded (`key` counted as restricted when `with_key`).
    fn write_filter_word(&mut self, key: &VipKey, with_key: bool) -> Result<(), DataplaneError> {
        let restricted = self
            .lists
            .keys()
            .filter(|k| *k != key)
            .chain(with_key.then_some(key));
        let (word, value) = filter_word(key, restricted);
        self.filter
            .set(word, value, 0)
            .map_err(map_err(maps::SOURCE_FILTER, "update"))
    }
}

/// Refuses an id beyond the map, a prefix of another family than the VIP's, and more
/// prefixes in all than the trie holds.
fn check(
    key: &VipKey,
    vip_id: u32,
    prefixes: &[Prefix],
    lists: &HashMap<VipKey, (u32, Vec<Prefix>)>,
) -> Result<(), DataplaneError> {
    if vip_id >= MAX_VIPS {
        return Err(DataplaneError::OutOfRange(format!(
            "VIP id {vip_id} is beyond the map size {MAX_VIPS}"
        )));
    }
    let v4 = key.family == FAMILY_V4;
    if let Some(p) = prefixes.iter().find(|p| p.is_ipv4() != v4) {
        return Err(DataplaneError::OutOfRange(format!(
            "source prefix {p} is not of the VIP's address family"
        )));
    }
    let others: usize = lists
        .iter()
        .filter(|(k, _)| *k != key)
        .map(|(_, (_, p))| p.len())
        .sum();
    if others + prefixes.len() > MAX_SOURCE_RANGES as usize {
        return Err(DataplaneError::OutOfRange(format!(
            "{} source prefixes in all exceed the map size {MAX_SOURCE_RANGES}",
            others + prefixes.len()
        )));
    }
    Ok(())
}
