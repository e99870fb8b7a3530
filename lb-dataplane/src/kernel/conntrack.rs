//! Inspecting and clearing flows in the conntrack maps, the fast path's exceptions
//! (`EXCEPTIONS`) and the SYN cache: the pin `lb flow` reports, and the deletes and
//! counts tests use.

use aya::maps::{HashMap, MapData, MapError};
use lb_common::{
    conntrack::{self, Decision},
    hash::flow_hash,
    maps::{self, MAX_VIPS},
    stats::VipStats,
    syn_cache,
    types::{BACKEND_ACTIVE, BACKEND_DRAINING, CtEntry, FAMILY_V4, FlowKey, SynEntry},
};

use super::{KernelDataplane, lock};
use crate::{CtTable, DataplaneError, absent_is_ok, map_err};

impl KernelDataplane {
    /// Removes one flow from the `SYN_CACHE` (its slot in every CPU's part) and from its
    /// family's conntrack map (operator tooling and tests). The slots go first: an ACK in
    /// between could otherwise promote one again.
    ///
    /// # Errors
    /// Map failures other than "not found".
    pub fn delete_flow(&mut self, key: &FlowKey) -> Result<(), DataplaneError> {
        for (index, _) in self.held_syns(key)? {
            self.syn_cache
                .set(index, SynEntry::default(), 0)
                .map_err(map_err(maps::SYN_CACHE, "update"))?;
        }
        absent_is_ok(self.exceptions.remove(key)).map_err(map_err(maps::EXCEPTIONS, "delete"))?;
        if key.vip.family == FAMILY_V4 {
            absent_is_ok(self.conntrack_v4.remove(&key.v4()))
                .map_err(map_err(maps::CONNTRACK_V4, "delete"))
        } else {
            absent_is_ok(self.conntrack_v6.remove(key))
                .map_err(map_err(maps::CONNTRACK_V6, "delete"))
        }
    }

    /// Empties both conntrack maps, `EXCEPTIONS` and the `SYN_CACHE`.
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
        flush(&mut self.exceptions, maps::EXCEPTIONS)?;
        flush(&mut self.conntrack_v4, maps::CONNTRACK_V4)?;
        flush(&mut self.conntrack_v6, maps::CONNTRACK_V6)
    }

    /// The number of parts of the `SYN_CACHE`, one per possible CPU up to one per
    /// [`syn_cache::MIN_PART_SLOTS`] slots (`LbConfig::syn_cache_part_bits` as this data
    /// plane writes it): a handshake's ACK finds its SYN only on a CPU of the SYN's part.
    pub fn syn_cache_parts(&self) -> u32 {
        syn_cache::parts_of(self.syn_slots - 1, self.syn_part_bits)
    }

    /// Splits the SYN cache by CPU for `iface` (in the calling thread's network
    /// namespace) when it has receive-side scaling, more than one receive queue
    /// ([`crate::offload::rx_queues`]), which keeps a handshake's packets on one CPU;
    /// otherwise (one queue, as a veth, whose packets each CPU may handle, or a driver
    /// that does not say) keeps one part, shared as before. Rewrites the configuration
    /// if one was written.
    ///
    /// # Errors
    /// When the configuration cannot be written.
    pub(super) fn split_syn_cache_for(&mut self, iface: &str) -> Result<(), DataplaneError> {
        let queues = crate::offload::rx_queues(iface).unwrap_or_else(|e| {
            tracing::warn!(
                "the receive queues of {iface} cannot be read ({e}): one SYN cache part"
            );
            None
        });
        let bits = if queues.is_some_and(|q| q > 1) {
            self.syn_cpu_part_bits
        } else {
            0
        };
        tracing::info!(
            "{iface}: {} receive queues, SYN cache in {} parts",
            queues.map_or_else(|| "unknown".to_owned(), |q| q.to_string()),
            syn_cache::parts_of(self.syn_slots - 1, bits)
        );
        self.syn_part_bits = bits;
        match self.written_config {
            Some(config) => crate::Dataplane::set_config(self, &config),
            None => Ok(()),
        }
    }

    /// Number of the fast path's exceptions (`EXCEPTIONS`).
    ///
    /// # Errors
    /// Map failures.
    pub fn exceptions_len(&self) -> Result<usize, DataplaneError> {
        count(&self.exceptions, maps::EXCEPTIONS)
    }

    /// The fast path's exception of flow `key` (`EXCEPTIONS`), if any.
    ///
    /// # Errors
    /// Map failures other than "not found".
    pub fn exception(&self, key: &FlowKey) -> Result<Option<CtEntry>, DataplaneError> {
        match self.exceptions.get(key, 0) {
            Ok(entry) => Ok(Some(entry)),
            Err(MapError::KeyNotFound) => Ok(None),
            Err(e) => Err(map_err(maps::EXCEPTIONS, "lookup")(e)),
        }
    }

    /// Number of (pins in both conntrack maps, held SYNs in `SYN_CACHE`).
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

    /// The `SYN_CACHE` indices and elements holding a SYN of `key`: the flow's slot in
    /// each CPU's part ([`syn_cache::part_slots`]), since userspace does not know which
    /// CPU saw the SYN (under the hash seed last written, which the daemon never changes
    /// while running). Usually one; one per part that saw a SYN of the flow.
    fn held_syns(&self, key: &FlowKey) -> Result<Vec<(u32, SynEntry)>, DataplaneError> {
        let Some(cfg) = self.written_config.as_ref() else {
            return Ok(Vec::new());
        };
        let hash = flow_hash(key, cfg.hash_seed);
        let mut held = Vec::new();
        for index in syn_cache::part_slots(hash, self.syn_slots - 1, self.syn_part_bits) {
            let slot = self
                .syn_cache
                .get(&index, 0)
                .map_err(map_err(maps::SYN_CACHE, "lookup"))?;
            if u32::from(slot.vip_id) < MAX_VIPS && slot.holds(key, hash) {
                held.push((index, slot));
            }
        }
        Ok(held)
    }

    /// [`crate::Dataplane::lookup_flow`]: the entry the next packet of `key`
    /// would follow, and which map holds it.
    pub(super) fn conntrack_lookup(
        &self,
        key: &FlowKey,
    ) -> Result<Option<(CtTable, CtEntry)>, DataplaneError> {
        // A fast-path VIP's dirty slot reads its exception first, as the program does.
        let found = if let Some(entry) = self.exception(key)? {
            Ok(entry)
        } else if key.vip.family == FAMILY_V4 {
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
            Err((_, MapError::KeyNotFound)) => None,
            Err((name, e)) => return Err(map_err(name, "lookup")(e)),
        };
        // The state the flow's next packet (neither SYN nor RST) follows, decided as the
        // XDP program decides it. Without a configuration or a VIPS entry the program
        // forwards nothing.
        let Some(cfg) = self.written_config else {
            return Ok(None);
        };
        let Some(vip) = lock(&self.tables).vip_entry(&key.vip)? else {
            return Ok(None);
        };
        let mut reads = MapReads {
            dp: self,
            key,
            error: None,
        };
        let decision = conntrack::decide(
            &mut reads,
            key,
            false,
            &vip,
            pinned.as_ref(),
            &cfg,
            &mut VipStats::default(),
        );
        if let Some(error) = reads.error {
            return Err(error);
        }
        Ok(match decision {
            Decision::Pin { .. } => pinned.map(|entry| (CtTable::Established, entry)),
            Decision::HeldSyn { slot: s, .. } => Some((
                CtTable::SynOnly,
                CtEntry {
                    backend_id: u32::from(s.backend_id),
                    vip_id: u32::from(s.vip_id),
                    stamp_ns: s.syn_ns,
                    epoch: s.epoch,
                    isn: s.seq,
                    ..CtEntry::default()
                },
            )),
            Decision::Table { .. } => None,
        })
    }
}

/// The map reads of the conntrack decision (`lb_common::conntrack`) for `lookup_flow`
/// of flow `key`: the clock, `BACKENDS` and `SYN_CACHE`. The first failed read is kept
/// in `error`.
struct MapReads<'a> {
    dp: &'a KernelDataplane,
    key: &'a FlowKey,
    error: Option<DataplaneError>,
}

impl conntrack::PinLookups for MapReads<'_> {
    type Backend = u32;

    fn now_ns(&mut self) -> u64 {
        super::walk::conntrack_now_ns()
    }

    fn keeps_flows(&mut self, id: u32) -> Option<u32> {
        match self.dp.backends.get(&id, 0) {
            Ok(b) => (b.state == BACKEND_ACTIVE || b.state == BACKEND_DRAINING).then_some(id),
            Err(MapError::OutOfBounds { .. }) => None,
            Err(e) => {
                self.error
                    .get_or_insert(map_err(maps::BACKENDS, "lookup")(e));
                None
            }
        }
    }
}

impl conntrack::Lookups for MapReads<'_> {
    type Slot = SynEntry;

    /// The flow's slot in the part of the CPU that saw its SYN: the program reads the
    /// slot of the CPU the packet arrives on, which receive-side scaling makes the SYN's.
    /// Userspace knows no CPU, so it reads the flow's slot in every part and takes the
    /// newest SYN of the flow (`None` when no part holds one); a packet that arrives on
    /// another CPU than that SYN's takes the table instead.
    fn syn_slot(&mut self, hash: u32) -> Option<SynEntry> {
        let (mask, bits) = (self.dp.syn_slots - 1, self.dp.syn_part_bits);
        let mut newest: Option<SynEntry> = None;
        for index in syn_cache::part_slots(hash, mask, bits) {
            match self.dp.syn_cache.get(&index, 0) {
                Ok(slot) if slot.holds(self.key, hash) => {
                    if newest.is_none_or(|n| slot.syn_ns > n.syn_ns) {
                        newest = Some(slot);
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    self.error
                        .get_or_insert(map_err(maps::SYN_CACHE, "lookup")(e));
                    return None;
                }
            }
        }
        newest
    }

    /// Not read: the table only decides whether a pin is re-labelled, which does not
    /// change where the packet goes.
    fn table_slot(&mut self, _hash: u32) -> Option<u32> {
        None
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
