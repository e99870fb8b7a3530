//! Inspecting and clearing flows in the conntrack maps and the SYN cache: the pin
//! `lb flow` reports, and the deletes and counts tests use.

use aya::maps::{HashMap, MapData};
use lb_common::{
    hash::flow_hash,
    maps::{self, MAX_VIPS},
    types::{CtEntry, FAMILY_V4, FlowKey, SynEntry},
};

use super::KernelDataplane;
use crate::dataplane::{CtTable, DataplaneError, absent_is_ok, map_err};

impl KernelDataplane {
    /// Removes one flow from the `SYN_CACHE` and from its family's conntrack map
    /// (operator tooling and tests). The slot goes first: an ACK in between could
    /// otherwise promote it again.
    ///
    /// # Errors
    /// Map failures other than "not found".
    pub fn delete_flow(&mut self, key: &FlowKey) -> Result<(), DataplaneError> {
        if let Some((index, _)) = self.held_syn(key)? {
            self.syn_cache
                .set(index, SynEntry::default(), 0)
                .map_err(map_err(maps::SYN_CACHE, "update"))?;
        }
        if key.vip.family == FAMILY_V4 {
            absent_is_ok(self.conntrack_v4.remove(&key.v4()))
                .map_err(map_err(maps::CONNTRACK_V4, "delete"))
        } else {
            absent_is_ok(self.conntrack_v6.remove(key))
                .map_err(map_err(maps::CONNTRACK_V6, "delete"))
        }
    }

    /// Empties both conntrack maps and the `SYN_CACHE`.
    ///
    /// # Errors
    /// Map failures.
    pub fn flush_conntrack(&mut self) -> Result<(), DataplaneError> {
        // SYN slots first, as in `delete_flow`: an ACK in between cannot promote them.
        for index in 0..self.syn_slots {
            self.syn_cache
                .set(index, SynEntry::default(), 0)
                .map_err(map_err(maps::SYN_CACHE, "update"))?;
        }
        flush(&mut self.conntrack_v4, maps::CONNTRACK_V4)?;
        flush(&mut self.conntrack_v6, maps::CONNTRACK_V6)
    }

    /// Number of (established flows in both conntrack maps, SYN-only flows held in
    /// `SYN_CACHE` slots).
    ///
    /// # Errors
    /// Map failures.
    pub fn conntrack_len(&self) -> Result<(usize, usize), DataplaneError> {
        let established = count(&self.conntrack_v4, maps::CONNTRACK_V4)?
            + count(&self.conntrack_v6, maps::CONNTRACK_V6)?;
        let mut syn = 0;
        for index in 0..self.syn_slots {
            let slot = self
                .syn_cache
                .get(&index, 0)
                .map_err(map_err(maps::SYN_CACHE, "lookup"))?;
            syn += usize::from(slot.key.vip.family != 0 && u32::from(slot.vip_id) < MAX_VIPS);
        }
        Ok((established, syn))
    }

    /// The `SYN_CACHE` index and element holding a SYN of `key`, if any (under the hash
    /// seed last written, which the daemon never changes while running).
    fn held_syn(&self, key: &FlowKey) -> Result<Option<(u32, SynEntry)>, DataplaneError> {
        let Some(cfg) = self.written_config.as_ref() else {
            return Ok(None);
        };
        let hash = flow_hash(key, cfg.hash_seed);
        let index = hash & (self.syn_slots - 1);
        let slot = self
            .syn_cache
            .get(&index, 0)
            .map_err(map_err(maps::SYN_CACHE, "lookup"))?;
        Ok((u32::from(slot.vip_id) < MAX_VIPS && slot.holds(key, hash)).then_some((index, slot)))
    }

    /// [`crate::dataplane::Dataplane::lookup_flow`]: the entry the next packet of `key`
    /// would follow, and which map holds it.
    pub(super) fn conntrack_lookup(
        &self,
        key: &FlowKey,
    ) -> Result<Option<(CtTable, CtEntry)>, DataplaneError> {
        let found = if key.vip.family == FAMILY_V4 {
            self.conntrack_v4
                .get(&key.v4(), 0)
                .map_err(|e| (maps::CONNTRACK_V4, e))
        } else {
            self.conntrack_v6
                .get(key, 0)
                .map_err(|e| (maps::CONNTRACK_V6, e))
        };
        let pinned = match found {
            Ok(entry) => Some(entry),
            Err((_, aya::maps::MapError::KeyNotFound)) => None,
            Err((name, e)) => return Err(map_err(name, "lookup")(e)),
        };
        let syn = self.held_syn(key)?;
        // As the data plane decides: a held SYN of another connection, seen no earlier
        // than the pin was made, is a new connection on the 4-tuple, and its choice is
        // the one the next packet takes (when it differs from the pin).
        Ok(match (pinned, syn) {
            (Some(entry), Some((_, s)))
                if !s.is_new_connection_over(&entry)
                    || u32::from(s.backend_id) == entry.backend_id =>
            {
                Some((CtTable::Established, entry))
            }
            (_, Some((_, s))) => Some((
                CtTable::SynOnly,
                CtEntry {
                    backend_id: u32::from(s.backend_id),
                    vip_id: u32::from(s.vip_id),
                    stamp_ns: s.syn_ns,
                    epoch: s.epoch,
                    isn: s.seq,
                },
            )),
            (Some(entry), None) => Some((CtTable::Established, entry)),
            (None, None) => None,
        })
    }
}

/// Deletes every entry of a conntrack map.
fn flush<K: aya::Pod>(
    map: &mut HashMap<MapData, K, CtEntry>,
    name: &'static str,
) -> Result<(), DataplaneError> {
    let keys: Vec<K> = map
        .keys()
        .collect::<Result<_, _>>()
        .map_err(map_err(name, "iterate"))?;
    for key in keys {
        absent_is_ok(map.remove(&key)).map_err(map_err(name, "delete"))?;
    }
    Ok(())
}

/// Number of entries of a conntrack map.
fn count<K: aya::Pod>(
    map: &HashMap<MapData, K, CtEntry>,
    name: &'static str,
) -> Result<usize, DataplaneError> {
    map.keys()
        .try_fold(0usize, |n, k| k.map(|_| n + 1))
        .map_err(map_err(name, "iterate"))
}
