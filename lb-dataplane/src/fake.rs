//! [`FakeDataplane`]: an in-memory [`Dataplane`] with the kernel implementation's
//! semantics (a failing call changes nothing; a table install replaces the VIP's table
//! whole), an ordered log of every mutating call, and failure injection. Controller
//! logic is unit-tested against it without root.

use std::collections::{BTreeMap, HashMap};

use lb_common::{
    fastpath::SlotState,
    maps::{MAX_BACKENDS, MAX_TABLE_SIZE, MAX_VIPS},
    stats::{BackendStats, GlobalStats, VipStats},
    types::{BackendEntry, CtEntry, FlowKey, LbConfig, VipAddrKey, VipKey},
};

use super::{Adopted, AttachMode, CtTable, Dataplane, DataplaneError, InstalledTable, TableImage};
use crate::prefix::Prefix;

/// One mutating call, as recorded in [`FakeDataplane::ops`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `attach(iface, mode)`.
    Attach(String, AttachMode),
    /// `detach()`.
    Detach,
    /// `set_config(..)`.
    SetConfig,
    /// `set_backend(id, entry)` with the entry's state.
    SetBackend {
        /// Backend id.
        id: u32,
        /// `BackendEntry::state` written.
        state: u8,
    },
    /// `install_table(vip_id, ..)`.
    InstallTable {
        /// VIP id.
        vip_id: u32,
        /// Generation installed.
        generation: u32,
    },
    /// `remove_table(vip_id)`.
    RemoveTable(u32),
    /// `set_second_chance(key, vip_id, on)`: the VIP id and `on`.
    SetSecondChance(u32, bool),
    /// `quiesce()`.
    Quiesce,
    /// `set_vip(key, vip_id)`.
    SetVip(VipKey, u32),
    /// `remove_vip(key)`.
    RemoveVip(VipKey),
    /// `reset_backend_stats(id)`.
    ResetBackendStats(u32),
    /// `set_sources(key, vip_id, prefixes)` with the number of prefixes.
    SetSources(VipKey, u32, usize),
}

/// In-memory data plane. Fields are public so tests can inspect and seed state.
#[derive(Debug, Default)]
pub struct FakeDataplane {
    /// Interface and mode attached to.
    pub attached: Option<(String, AttachMode)>,
    /// Attach modes that fail (to test fallbacks).
    pub refuse_modes: Vec<AttachMode>,
    /// The `CONFIG` element.
    pub config: Option<LbConfig>,
    /// `BACKENDS` entries written.
    pub backends: BTreeMap<u32, BackendEntry>,
    /// Installed tables by VIP id.
    pub tables: BTreeMap<u32, InstalledTable>,
    /// `VIPS`: key → VIP id.
    pub vips: HashMap<VipKey, u32>,
    /// `VIP_ADDRS` counts.
    pub vip_addrs: HashMap<VipAddrKey, u32>,
    /// Conntrack contents (seeded by tests).
    pub conntrack: HashMap<FlowKey, (CtTable, CtEntry)>,
    /// Global counters (seeded by tests).
    pub global: GlobalStats,
    /// Per-VIP counters (seeded by tests).
    pub vip_counters: HashMap<u32, VipStats>,
    /// Per-backend counters (seeded by tests).
    pub backend_counters: HashMap<u32, BackendStats>,
    /// Allowed source prefixes of the VIPs that have them.
    pub sources: HashMap<VipKey, (u32, Vec<Prefix>)>,
    /// Every successful mutating call, in order.
    pub ops: Vec<Op>,
    /// Mutating calls attempted so far (successful or not).
    pub calls: usize,
    /// When set, the mutating call with this index (0-based, counting every attempt)
    /// fails with [`DataplaneError::Injected`] and changes nothing.
    pub fail_at_call: Option<usize>,
    /// The controller's record ([`Dataplane::store_record`]).
    pub record: Option<Vec<u8>>,
    /// Whether [`Dataplane::adopted`] reports what this fake holds (a restarted
    /// daemon's view of a pinned data plane) instead of `None`.
    pub survived: bool,
    /// The VIP ids that take the fast path.
    pub fast: std::collections::BTreeSet<u32>,
    /// The VIP ids that offer second-chance candidates.
    pub second_chance: std::collections::BTreeSet<u32>,
    /// The hash fields of VIP ids other than the 5-tuple.
    pub hash_fields: HashMap<u32, lb_common::hash_fields::HashFields>,
    /// Dirty slots per VIP id (seeded by tests).
    pub dirty: HashMap<u32, u64>,
    /// The slot states of each VIP's table, published as the kernel's buffers publish
    /// them (`SlotState::published`, at time 0).
    pub states: HashMap<u32, Vec<SlotState>>,
    /// Slots that forgot an owner at the installs of each VIP's tables
    /// ([`Dataplane::owners_given_up`]).
    pub owners_given_up: HashMap<u32, u64>,
}

impl FakeDataplane {
    /// A fake with no state.
    pub fn new() -> Self {
        Self::default()
    }

    /// This fake as a restarted daemon finds it: what it holds is reported by
    /// [`Dataplane::adopted`]; the log of calls starts empty.
    pub fn restarted(mut self) -> Self {
        self.survived = true;
        self.ops.clear();
        self
    }

    /// Makes the `n`-th mutating call from now (0 = the next one) fail.
    pub fn fail_after(&mut self, n: usize) {
        self.fail_at_call = Some(self.calls + n);
    }

    /// Counts a mutating call and fails it if injected.
    fn mutate(&mut self, what: &str) -> Result<(), DataplaneError> {
        let index = self.calls;
        self.calls += 1;
        if self.fail_at_call == Some(index) {
            self.fail_at_call = None;
            return Err(DataplaneError::Injected(format!("call {index} ({what})")));
        }
        Ok(())
    }
}

fn addr_key(key: &VipKey) -> VipAddrKey {
    VipAddrKey {
        addr: key.addr,
        family: key.family,
        _pad: [0; 3],
    }
}

impl Dataplane for FakeDataplane {
    fn attach(&mut self, iface: &str, mode: AttachMode) -> Result<(), DataplaneError> {
        self.mutate("attach")?;
        if self.refuse_modes.contains(&mode) {
            return Err(DataplaneError::Injected(format!(
                "attach {iface} in {mode} mode refused"
            )));
        }
        self.attached = Some((iface.to_owned(), mode));
        self.ops.push(Op::Attach(iface.to_owned(), mode));
        Ok(())
    }

    fn detach(&mut self) -> Result<(), DataplaneError> {
        if self.attached.is_none() {
            return Err(DataplaneError::NotAttached);
        }
        self.mutate("detach")?;
        self.attached = None;
        self.ops.push(Op::Detach);
        Ok(())
    }

    fn set_config(&mut self, config: &LbConfig) -> Result<(), DataplaneError> {
        self.mutate("set_config")?;
        self.config = Some(*config);
        self.ops.push(Op::SetConfig);
        Ok(())
    }

    fn set_backend(&mut self, id: u32, entry: &BackendEntry) -> Result<(), DataplaneError> {
        if id == 0 || id >= MAX_BACKENDS {
            return Err(DataplaneError::OutOfRange(format!(
                "backend id {id} is outside 1..{MAX_BACKENDS}"
            )));
        }
        self.mutate("set_backend")?;
        self.backends.insert(id, *entry);
        self.ops.push(Op::SetBackend {
            id,
            state: entry.state,
        });
        Ok(())
    }

    fn learn_table(&mut self, vip_id: u32, next: &[u16]) -> Result<u32, DataplaneError> {
        let live = self.states.get(&vip_id).ok_or_else(|| {
            DataplaneError::OutOfRange(format!("VIP id {vip_id} has no live table"))
        })?;
        if live.len() != next.len() {
            return Err(DataplaneError::OutOfRange(format!(
                "VIP id {vip_id}: the next table has {} slots, the live one {}",
                next.len(),
                live.len()
            )));
        }
        let learned: Vec<SlotState> = live
            .iter()
            .zip(next)
            .map(|(old, &owner)| old.learned(u32::from(owner), 0))
            .collect();
        let pending = learned.iter().filter(|s| s.pending() != 0).count();
        self.mutate("learn_table")?;
        self.states.insert(vip_id, learned);
        Ok(u32::try_from(pending).unwrap_or(u32::MAX))
    }

    fn install_table(&mut self, vip_id: u32, table: &TableImage<'_>) -> Result<(), DataplaneError> {
        let size = table.slots.len();
        if vip_id >= MAX_VIPS || size == 0 || size > MAX_TABLE_SIZE as usize {
            return Err(DataplaneError::OutOfRange(format!(
                "VIP id {vip_id} / table size {size} out of range"
            )));
        }
        self.mutate("install_table")?;
        let live = self.states.get(&vip_id).map(Vec::as_slice);
        let forgotten = lb_common::second_chance::owners_given_up(live, table.slots);
        *self.owners_given_up.entry(vip_id).or_default() += u64::from(forgotten);
        let states = (table.slots.iter().enumerate())
            .map(|(slot, &owner)| SlotState::published(live, size, slot, owner, 0))
            .collect();
        self.states.insert(vip_id, states);
        self.tables.insert(
            vip_id,
            InstalledTable {
                generation: table.generation,
                slots: table.slots.to_vec(),
            },
        );
        self.ops.push(Op::InstallTable {
            vip_id,
            generation: table.generation,
        });
        Ok(())
    }

    fn quiesce(&mut self) -> Result<(), DataplaneError> {
        self.mutate("quiesce")?;
        self.ops.push(Op::Quiesce);
        Ok(())
    }

    fn remove_table(&mut self, vip_id: u32) -> Result<(), DataplaneError> {
        self.mutate("remove_table")?;
        self.tables.remove(&vip_id);
        self.states.remove(&vip_id);
        self.ops.push(Op::RemoveTable(vip_id));
        Ok(())
    }

    fn table(&self, vip_id: u32) -> Result<Option<InstalledTable>, DataplaneError> {
        Ok(self.tables.get(&vip_id).cloned())
    }

    fn set_vip(&mut self, key: &VipKey, vip_id: u32) -> Result<(), DataplaneError> {
        if vip_id >= MAX_VIPS {
            return Err(DataplaneError::OutOfRange(format!(
                "VIP id {vip_id} is beyond the map size {MAX_VIPS}"
            )));
        }
        self.mutate("set_vip")?;
        if self.vips.insert(*key, vip_id).is_none() {
            *self.vip_addrs.entry(addr_key(key)).or_default() += 1;
        }
        self.ops.push(Op::SetVip(*key, vip_id));
        Ok(())
    }

    fn remove_vip(&mut self, key: &VipKey) -> Result<(), DataplaneError> {
        self.mutate("remove_vip")?;
        if self.vips.remove(key).is_some() {
            let addr = addr_key(key);
            if let Some(count) = self.vip_addrs.get_mut(&addr) {
                *count -= 1;
                if *count == 0 {
                    self.vip_addrs.remove(&addr);
                }
            }
        }
        self.ops.push(Op::RemoveVip(*key));
        Ok(())
    }

    fn set_fast_path(
        &mut self,
        _key: &VipKey,
        vip_id: u32,
        on: bool,
    ) -> Result<(), DataplaneError> {
        if vip_id >= MAX_VIPS {
            return Err(DataplaneError::OutOfRange(format!("VIP id {vip_id}")));
        }
        self.mutate("set_fast_path")?;
        if on {
            self.fast.insert(vip_id);
        } else {
            self.fast.remove(&vip_id);
        }
        Ok(())
    }

    fn fast_path(&self, vip_id: u32) -> bool {
        self.fast.contains(&vip_id)
    }

    /// The fake has no `VIP_CACHE`: every VIP with an entry counts as cached.
    fn vip_cached(&self, vip_id: u32) -> bool {
        self.vips.values().any(|id| *id == vip_id)
    }

    fn set_second_chance(
        &mut self,
        _key: &VipKey,
        vip_id: u32,
        on: bool,
    ) -> Result<(), DataplaneError> {
        if vip_id >= MAX_VIPS {
            return Err(DataplaneError::OutOfRange(format!("VIP id {vip_id}")));
        }
        self.mutate("set_second_chance")?;
        if on {
            self.second_chance.insert(vip_id);
        } else {
            self.second_chance.remove(&vip_id);
        }
        self.ops.push(Op::SetSecondChance(vip_id, on));
        Ok(())
    }

    fn second_chance(&self, vip_id: u32) -> bool {
        self.second_chance.contains(&vip_id)
    }

    fn set_hash_fields(
        &mut self,
        _key: &VipKey,
        vip_id: u32,
        fields: lb_common::hash_fields::HashFields,
    ) -> Result<(), DataplaneError> {
        if vip_id >= MAX_VIPS {
            return Err(DataplaneError::OutOfRange(format!("VIP id {vip_id}")));
        }
        self.mutate("set_hash_fields")?;
        if fields == lb_common::hash_fields::HashFields::default() {
            self.hash_fields.remove(&vip_id);
        } else {
            self.hash_fields.insert(vip_id, fields);
        }
        Ok(())
    }

    fn hash_fields(&self, vip_id: u32) -> lb_common::hash_fields::HashFields {
        self.hash_fields.get(&vip_id).copied().unwrap_or_default()
    }

    fn dirty_slots(&self, vip_id: u32) -> Result<u64, DataplaneError> {
        Ok(self.dirty.get(&vip_id).copied().unwrap_or(0))
    }

    fn set_sources(
        &mut self,
        key: &VipKey,
        vip_id: u32,
        prefixes: &[Prefix],
    ) -> Result<(), DataplaneError> {
        if vip_id >= MAX_VIPS {
            return Err(DataplaneError::OutOfRange(format!("VIP id {vip_id}")));
        }
        self.mutate("set_sources")?;
        if prefixes.is_empty() {
            self.sources.remove(key);
        } else {
            self.sources.insert(*key, (vip_id, prefixes.to_vec()));
        }
        self.ops.push(Op::SetSources(*key, vip_id, prefixes.len()));
        Ok(())
    }

    fn global_stats(&self) -> Result<GlobalStats, DataplaneError> {
        Ok(self.global)
    }

    fn vip_stats(&self, vip_id: u32) -> Result<VipStats, DataplaneError> {
        Ok(self.vip_counters.get(&vip_id).copied().unwrap_or_default())
    }

    fn backend_stats(&self, id: u32) -> Result<BackendStats, DataplaneError> {
        Ok(self.backend_counters.get(&id).copied().unwrap_or_default())
    }

    fn reset_backend_stats(&mut self, id: u32) -> Result<(), DataplaneError> {
        self.mutate("reset_backend_stats")?;
        self.backend_counters.remove(&id);
        self.ops.push(Op::ResetBackendStats(id));
        Ok(())
    }

    fn lookup_flow(&self, key: &FlowKey) -> Result<Option<(CtTable, CtEntry)>, DataplaneError> {
        Ok(self.conntrack.get(key).copied())
    }

    fn owners_given_up(&self, vip_id: u32) -> u64 {
        self.owners_given_up.get(&vip_id).copied().unwrap_or(0)
    }

    fn slot_state(&self, vip_id: u32, slot: u32) -> Result<Option<SlotState>, DataplaneError> {
        Ok(self
            .states
            .get(&vip_id)
            .and_then(|s| s.get(slot as usize))
            .copied())
    }

    fn adopted(&self) -> Result<Option<Adopted>, DataplaneError> {
        if !self.survived {
            return Ok(None);
        }
        let mut vips: Vec<(VipKey, u32)> = self.vips.iter().map(|(k, v)| (*k, *v)).collect();
        vips.sort_by_key(|(_, id)| *id);
        Ok(Some(Adopted {
            record: self.record.clone(),
            config: self.config,
            vips,
            sources: self
                .sources
                .iter()
                .map(|(k, (_, prefixes))| {
                    let mut prefixes = prefixes.clone();
                    prefixes.sort();
                    (*k, prefixes)
                })
                .collect(),
        }))
    }

    fn backend(&self, id: u32) -> Result<BackendEntry, DataplaneError> {
        Ok(self.backends.get(&id).copied().unwrap_or_default())
    }

    fn store_record(&mut self, record: &[u8]) -> Result<(), DataplaneError> {
        self.mutate("store_record")?;
        self.record = Some(record.to_vec());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use lb_common::types::{BACKEND_ACTIVE, FAMILY_V4, PROTO_TCP};

    use super::*;

    fn vip(port: u16) -> VipKey {
        VipKey {
            addr: [203, 0, 113, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            port: port.to_be(),
            proto: PROTO_TCP,
            family: FAMILY_V4,
        }
    }

    #[test]
    fn injected_failure_changes_nothing_and_later_calls_succeed() {
        let mut dp = FakeDataplane::new();
        dp.fail_after(1);
        let entry = BackendEntry {
            state: BACKEND_ACTIVE,
            family: FAMILY_V4,
            ..BackendEntry::default()
        };
        dp.set_backend(1, &entry).unwrap();
        let err = dp
            .install_table(
                0,
                &TableImage {
                    generation: 1,
                    slots: &[1, 1, 1],
                },
            )
            .unwrap_err();
        assert!(matches!(err, DataplaneError::Injected(_)), "{err}");
        assert!(dp.tables.is_empty());
        dp.install_table(
            0,
            &TableImage {
                generation: 1,
                slots: &[1, 1, 1],
            },
        )
        .unwrap();
        assert_eq!(dp.ops.len(), 2);
        assert_eq!(dp.table(0).unwrap().unwrap().slots, vec![1, 1, 1]);
    }

    #[test]
    fn vip_addresses_are_reference_counted() {
        let mut dp = FakeDataplane::new();
        dp.set_vip(&vip(80), 0).unwrap();
        dp.set_vip(&vip(443), 1).unwrap();
        dp.set_vip(&vip(443), 1).unwrap();
        assert_eq!(dp.vip_addrs.get(&addr_key(&vip(80))), Some(&2));
        dp.remove_vip(&vip(80)).unwrap();
        assert_eq!(dp.vip_addrs.get(&addr_key(&vip(80))), Some(&1));
        dp.remove_vip(&vip(443)).unwrap();
        assert!(dp.vip_addrs.is_empty());
    }
}
