//! Planning a change: from the applied state and the desired one, the next applied
//! state and the ordered data-plane operations that get there; then running them with
//! an undo log, so that a failure midway puts the previous state back.
//!
//! Ordering rules that keep packets safe while a change is written: no packet may see a
//! table naming a backend entry not yet written, a VIP without a table, or a half-done
//! change (BR-12 in `docs/src/operations/failure-scenarios.md`):
//! 1. the global configuration first;
//! 2. per VIP: backend entries that become *more* usable (new, or down → draining →
//!    active) before the table that references them (all of a change's such entries
//!    together, after their counter resets, in one batch write); then the table,
//!    swapped in one map update; then, for a new VIP, its `VIPS` entry (so no packet
//!    finds a VIP without a table);
//! 3. removed VIPs: the `VIPS` entry first (their packets become non-VIP traffic), then
//!    the table and the allowed source prefixes (a new VIP's prefixes are written
//!    before its entry, so its first packet is already checked);
//! 4. last, after waiting until no packet still reads a replaced table
//!    ([`Dataplane::quiesce`]), backend entries that become *less* usable
//!    (active → draining → down).

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::{Duration, Instant},
};

use lb_common::hash_fields::HashFields;
use lb_common::types::{
    BACKEND_ACTIVE, BACKEND_DOWN, BACKEND_DRAINING, BACKEND_UNUSED, BackendEntry, LbConfig, VipKey,
};

use super::{
    AppliedVip, State,
    desired::{Desired, VipSpec},
    ids::IdError,
    prebuild::{self, TableKey, table_inputs, table_key},
    report::{ApplyReport, TableChange, VipChange},
    table::{self, TableFacts},
};
use crate::config::{BackendState, Vip};
use lb_dataplane::prefix::Prefix;
use lb_dataplane::{CompactImage, Dataplane, DataplaneError};
use lb_maglev::flow::addr_bytes;
use lb_maglev::{BackendKey, MaglevError, MaglevTable};

/// One data-plane operation.
#[derive(Clone, Debug)]
pub(super) enum Op {
    SetConfig(LbConfig),
    SetBackend(u32, BackendEntry),
    ResetBackendStats(u32),
    InstallTable {
        vip_id: u32,
        generation: u32,
        slots: Arc<[u16]>,
    },
    RemoveTable(u32),
    SetVip(VipKey, u32),
    RemoveVip(VipKey),
    SetSources(VipKey, u32, Arc<Vec<Prefix>>),
    SetFastPath(VipKey, u32, bool),
    SetSecondChance(VipKey, u32, bool),
    SetHashFields(VipKey, u32, HashFields),
    Quiesce,
}

impl Op {
    fn describe(&self) -> String {
        match self {
            Op::SetConfig(_) => "writing the global configuration".to_owned(),
            Op::SetBackend(id, e) => format!("writing backend id {id} (state {})", e.state),
            Op::ResetBackendStats(id) => format!("clearing the counters of backend id {id}"),
            Op::InstallTable {
                vip_id, generation, ..
            } => format!("installing table generation {generation} of VIP id {vip_id}"),
            Op::RemoveTable(id) => format!("removing the table of VIP id {id}"),
            Op::SetVip(_, vip_id) => format!("writing VIP id {vip_id}"),
            Op::RemoveVip(_) => "removing a VIP".to_owned(),
            Op::SetSources(_, vip_id, p) => {
                format!(
                    "writing {} allowed source prefixes of VIP id {vip_id}",
                    p.len()
                )
            }
            Op::SetFastPath(_, vip_id, on) => format!(
                "turning the fast path of VIP id {vip_id} {}",
                if *on { "on" } else { "off" }
            ),
            Op::SetSecondChance(_, vip_id, on) => format!(
                "turning the second chance of VIP id {vip_id} {}",
                if *on { "on" } else { "off" }
            ),
            Op::SetHashFields(_, vip_id, h) => format!(
                "writing the hash fields of VIP id {vip_id} ({}, persistence {} s)",
                h.fields.name(),
                h.affinity_secs
            ),
            Op::Quiesce => "waiting for packets to leave the replaced tables".to_owned(),
        }
    }

    fn run<D: Dataplane>(&self, dp: &mut D) -> Result<(), DataplaneError> {
        match self {
            Op::SetConfig(c) => dp.set_config(c),
            Op::SetBackend(id, e) => dp.set_backend(*id, e),
            Op::ResetBackendStats(id) => dp.reset_backend_stats(*id),
            Op::InstallTable {
                vip_id,
                generation,
                slots,
            } => dp.install_compact(
                *vip_id,
                &CompactImage {
                    generation: *generation,
                    slots,
                },
            ),
            Op::RemoveTable(id) => dp.remove_table(*id),
            Op::SetVip(k, vip_id) => dp.set_vip(k, *vip_id),
            Op::RemoveVip(k) => dp.remove_vip(k),
            Op::SetSources(k, vip_id, p) => dp.set_sources(k, *vip_id, p),
            Op::SetFastPath(k, vip_id, on) => dp.set_fast_path(k, *vip_id, *on),
            Op::SetSecondChance(k, vip_id, on) => dp.set_second_chance(k, *vip_id, *on),
            Op::SetHashFields(k, vip_id, h) => dp.set_hash_fields(k, *vip_id, *h),
            Op::Quiesce => dp.quiesce(),
        }
    }
}

/// Why a change could not be applied. The data plane is as it was before the change.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// A table could not be built.
    #[error("VIP {vip}: {error}")]
    Table {
        /// The VIP.
        vip: Vip,
        /// The builder's error.
        error: MaglevError,
    },
    /// Out of ids.
    #[error("{0}")]
    Ids(IdError),
    /// A change the fast path cannot make safely now (see the book's chapter "The
    /// fast path").
    #[error("VIP {vip}: {reason}")]
    FastPath {
        /// The VIP.
        vip: Vip,
        /// Why, and what to do.
        reason: String,
    },
    /// The tables would take more memory than allowed.
    #[error("table memory {need_mib} MiB exceeds limit {limit_mib} MiB")]
    Memory {
        /// Needed, MiB.
        need_mib: u64,
        /// Allowed, MiB.
        limit_mib: u64,
    },
    /// A map write failed; everything done before it was undone.
    #[error("{step} failed: {error}; the previous state is kept{undo}")]
    Dataplane {
        /// The failed step.
        step: String,
        /// The data plane's error.
        error: Box<DataplaneError>,
        /// Empty, or a note that undoing also failed.
        undo: String,
    },
}

/// A backend entry's usability rank: changes that raise it go before the table swap,
/// changes that lower it after.
fn rank(state: u8) -> u8 {
    match state {
        BACKEND_ACTIVE => 3,
        BACKEND_DRAINING => 2,
        BACKEND_DOWN => 1,
        _ => 0,
    }
}

/// The backend entry of `key` in `state`, GUE to `gue_port` (host order; 0: IP-in-IP).
fn entry(key: &BackendKey, state: BackendState, gue_port: u16) -> BackendEntry {
    let (addr, family) = addr_bytes(key.ip());
    BackendEntry {
        addr,
        family,
        state: match state {
            BackendState::Active => BACKEND_ACTIVE,
            BackendState::Drain => BACKEND_DRAINING,
            BackendState::Down => BACKEND_DOWN,
        },
        gue_port: gue_port.to_be(),
    }
}

/// The plan of one change.
pub(super) struct Plan {
    pub(super) next: State,
    pub(super) ops: Vec<Op>,
    pub(super) report: ApplyReport,
}

impl Plan {
    /// The backend entries the plan writes for ids `current` has no entry for (a
    /// backend added), with the entry each gets.
    pub(super) fn new_entries(&self, current: &State) -> Vec<(u32, BackendEntry)> {
        self.ops
            .iter()
            .filter_map(|op| match op {
                Op::SetBackend(id, e) if !current.entries.contains_key(id) => Some((*id, *e)),
                _ => None,
            })
            .collect()
    }
}

/// Computes the next state and the operations from `current` to `desired`.
pub(super) fn plan(current: &State, desired: &Desired) -> Result<Plan, ApplyError> {
    let mut planner = Planner::new(current, desired);
    planner.globals();
    planner.build_ahead();
    let mut vips = BTreeMap::new();
    for (vip, spec) in &desired.vips {
        vips.insert(*vip, planner.vip(*vip, spec)?);
    }
    planner.removed_vips();
    check_memory(&vips, desired.max_table_memory)?;
    Ok(planner.finish(vips))
}

/// Refuses tables that would take more kernel memory than `limit` (bytes).
fn check_memory(vips: &BTreeMap<Vip, AppliedVip>, limit: u64) -> Result<(), ApplyError> {
    let need: u64 = vips
        .values()
        .map(|v| lb_dataplane::table_memory(v.spec.table_size))
        .sum();
    if need > limit {
        return Err(ApplyError::Memory {
            need_mib: need.div_ceil(1 << 20),
            limit_mib: limit >> 20,
        });
    }
    Ok(())
}

/// A plan being built: the next state, and the operations sorted into the phases of
/// the module documentation's ordering rules.
struct Planner<'a> {
    current: &'a State,
    desired: &'a Desired,
    next: State,
    /// Every `BACKENDS` entry as it will be.
    entries: BTreeMap<u32, BackendEntry>,
    report: ApplyReport,
    /// Rule 1: the global configuration.
    config: Vec<Op>,
    /// Rule 2: backend entries that become more usable.
    before_tables: Vec<Op>,
    /// Rules 2 and 3: table swaps, new and removed VIPs.
    tables: Vec<Op>,
    /// Rule 4: backend entries that become less usable.
    after_tables: Vec<Op>,
    /// The change's builds, under way ahead of the planning and shared by the VIPs
    /// with identical inputs ([`prebuild::Builds`], started by
    /// [`Planner::build_ahead`]).
    builds: prebuild::Builds,
}

impl<'a> Planner<'a> {
    fn new(current: &'a State, desired: &'a Desired) -> Self {
        Self {
            current,
            desired,
            next: current.clone(),
            entries: current.entries.clone(),
            report: ApplyReport::default(),
            config: Vec::new(),
            before_tables: Vec::new(),
            tables: Vec::new(),
            after_tables: Vec::new(),
            builds: prebuild::Builds::none(desired.maglev_seed),
        }
    }

    /// The global configuration, when it changed.
    fn globals(&mut self) {
        let config = self.desired.globals.lb_config();
        if self.current.globals.map(|g| g.lb_config()) != Some(config) {
            self.config.push(Op::SetConfig(config));
        }
        self.next.globals = Some(self.desired.globals);
        self.next.maglev_seed = self.desired.maglev_seed;
    }

    /// VIP `vip` as `spec` asks: its backends, its table and, when new, its entry.
    fn vip(&mut self, vip: Vip, spec: &VipSpec) -> Result<AppliedVip, ApplyError> {
        let old = self.current.vips.get(&vip);
        let vip_id = self.next.ids.vip(vip).map_err(ApplyError::Ids)?;
        // Before the VIP's first table: no packet of it is hashed otherwise.
        if spec.hash != old.map_or_else(HashFields::default, |o| o.spec.hash) {
            self.tables
                .push(Op::SetHashFields(vip.key(), vip_id, spec.hash));
        }
        let backend_ids = self.backends(vip, spec, old)?;
        let applied = self.table(vip, vip_id, spec, old, backend_ids)?;
        let old_sources = old.map_or(&[][..], |o| &o.spec.allowed_sources[..]);
        if old_sources != &spec.allowed_sources[..] {
            self.tables.push(Op::SetSources(
                vip.key(),
                vip_id,
                Arc::new(spec.allowed_sources.clone()),
            ));
        }
        if old.is_none() {
            self.tables.push(Op::SetVip(vip.key(), vip_id));
        }
        if spec.fast_path != old.is_some_and(|o| o.spec.fast_path) {
            self.tables
                .push(Op::SetFastPath(vip.key(), vip_id, spec.fast_path));
        }
        if spec.second_chance != old.is_some_and(|o| o.spec.second_chance) {
            self.tables
                .push(Op::SetSecondChance(vip.key(), vip_id, spec.second_chance));
        }
        Ok(applied)
    }

    /// The ids and entries of `vip`'s backends; those `old` had and `spec` has not are
    /// marked down.
    fn backends(
        &mut self,
        vip: Vip,
        spec: &VipSpec,
        old: Option<&AppliedVip>,
    ) -> Result<BTreeMap<BackendKey, u32>, ApplyError> {
        let mut backend_ids = BTreeMap::new();
        for (key, b) in &spec.backends {
            let id = self.next.ids.backend(vip, *key).map_err(ApplyError::Ids)?;
            backend_ids.insert(*key, id);
            self.set_entry(id, entry(key, b.state, spec.gue_port));
        }
        for (key, &id) in old.iter().flat_map(|o| &o.backend_ids) {
            if !spec.backends.contains_key(key) {
                self.next.ids.release_backend(vip, *key);
                self.mark_down(id);
            }
        }
        Ok(backend_ids)
    }

    /// Writes backend entry `id` when it changes: before the tables when it becomes
    /// more usable, after them when less; a new or re-addressed id's counters are
    /// cleared first.
    fn set_entry(&mut self, id: u32, new: BackendEntry) {
        let old = self.entries.get(&id).copied();
        if old == Some(new) {
            return;
        }
        if old.is_none_or(|e| e.state == BACKEND_UNUSED || e.addr != new.addr) {
            self.before_tables.push(Op::ResetBackendStats(id));
        }
        let op = Op::SetBackend(id, new);
        if rank(new.state) > old.map_or(0, |e| rank(e.state)) {
            self.before_tables.push(op);
        } else {
            self.after_tables.push(op);
        }
        self.entries.insert(id, new);
    }

    /// Marks backend entry `id` down, after the tables (it leaves them).
    fn mark_down(&mut self, id: u32) {
        let down = BackendEntry {
            state: BACKEND_DOWN,
            ..self.entries.get(&id).copied().unwrap_or_default()
        };
        self.after_tables.push(Op::SetBackend(id, down));
        self.entries.insert(id, down);
    }

    /// `vip`'s table: the old one when its inputs are unchanged, else a new build
    /// installed as the next generation.
    fn table(
        &mut self,
        vip: Vip,
        vip_id: u32,
        spec: &VipSpec,
        old: Option<&AppliedVip>,
        backend_ids: BTreeMap<BackendKey, u32>,
    ) -> Result<AppliedVip, ApplyError> {
        if let Some(o) = old.filter(|o| self.keeps_table(o, spec)) {
            return Ok(AppliedVip {
                spec: spec.clone(),
                backend_ids,
                ..o.clone()
            });
        }
        let (table, facts, build_ms) = self
            .build(spec)
            .map_err(|error| ApplyError::Table { vip, error })?;
        let slots = table::slots_with_ids(&table, spec.table_size, &backend_ids);
        let generation = old.map_or(1, |o| o.generation.wrapping_add(1).max(1));
        let changed_slots = old.map(|o| {
            if o.slots.len() == slots.len() {
                o.slots
                    .iter()
                    .zip(slots.iter())
                    .filter(|(a, b)| a != b)
                    .count()
            } else {
                slots.len()
            }
        });
        if table.is_empty() {
            self.report.warnings.push(format!(
                "VIP {vip} has no backend with weight > 0: new flows to it are dropped"
            ));
        }
        self.report
            .warnings
            .extend(table.warnings().iter().map(|w| format!("VIP {vip}: {w}")));
        // The builder's own slot array goes here (unless another VIP shares it).
        drop(table);
        self.report.changes.push(VipChange::Table(TableChange {
            vip,
            backends: spec.backends.len(),
            in_table: facts.active_backends(),
            table_size: spec.table_size,
            fingerprint: facts.fingerprint().with_hash_fields(spec.hash),
            generation,
            build_ms,
            changed_slots,
        }));
        self.tables.push(Op::InstallTable {
            vip_id,
            generation,
            slots: Arc::clone(&slots),
        });
        Ok(AppliedVip {
            id: vip_id,
            spec: spec.clone(),
            table: facts,
            slots,
            generation,
            backend_ids,
            unverified: false,
        })
    }

    /// Whether `old`'s table is the one `spec` builds (same inputs, size and seed).
    fn keeps_table(&self, old: &AppliedVip, spec: &VipSpec) -> bool {
        old.spec.table_size == spec.table_size
            && table_inputs(&old.spec) == table_inputs(spec)
            && self.current.maglev_seed == self.desired.maglev_seed
            && !old.unverified
    }

    /// Counts the desired VIPs of each table key, and starts building, on worker
    /// threads, the tables that the desired VIPs need and that no other VIP's build
    /// gives, in the order [`plan`] asks for them.
    fn build_ahead(&mut self) {
        let mut keys: Vec<TableKey> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut wanted: HashMap<TableKey, usize> = HashMap::new();
        for (vip, spec) in &self.desired.vips {
            let key = table_key(spec);
            *wanted.entry(key.clone()).or_default() += 1;
            let kept = self
                .current
                .vips
                .get(vip)
                .is_some_and(|o| self.keeps_table(o, spec));
            if !kept && seen.insert(key.clone()) {
                keys.push(key);
            }
        }
        self.builds = prebuild::Builds::start(keys, wanted, self.desired.maglev_seed);
    }

    /// The table of `spec`, its facts and how long the build took (ms; 0 when another
    /// VIP's build is reused), built once per distinct (inputs, size) in this change.
    fn build(
        &mut self,
        spec: &VipSpec,
    ) -> Result<(Arc<MaglevTable>, Arc<TableFacts>, f64), MaglevError> {
        let taken = self.builds.take(&table_key(spec))?;
        if taken.fresh {
            self.next.builds_total += 1;
        }
        Ok((taken.table, taken.facts, taken.build_ms))
    }

    /// VIPs applied but no longer desired: entry, then table; their backends go down.
    /// Their ids are released only now, so none is reused within this change.
    fn removed_vips(&mut self) {
        for (vip, old) in &self.current.vips {
            if self.desired.vips.contains_key(vip) {
                continue;
            }
            self.tables.push(Op::RemoveVip(vip.key()));
            self.tables.push(Op::RemoveTable(old.id));
            if !old.spec.allowed_sources.is_empty() {
                self.tables
                    .push(Op::SetSources(vip.key(), old.id, Arc::new(Vec::new())));
            }
            self.next.ids.release_vip(vip);
            for (key, &id) in &old.backend_ids {
                self.next.ids.release_backend(*vip, *key);
                self.mark_down(id);
            }
            self.report.changes.push(VipChange::Removed(*vip));
        }
    }

    /// The operations in the order of the module documentation, and the next state.
    fn finish(mut self, vips: BTreeMap<Vip, AppliedVip>) -> Plan {
        let swapped = self
            .tables
            .iter()
            .any(|o| matches!(o, Op::InstallTable { .. }));
        let mut ops = self.config;
        // The counter resets first (each still before its id's entry), so the entries
        // follow one another and are written in one batch ([`execute`]).
        let (mut resets, mut entries): (Vec<Op>, Vec<Op>) = self
            .before_tables
            .into_iter()
            .partition(|op| matches!(op, Op::ResetBackendStats(_)));
        ops.append(&mut resets);
        ops.append(&mut entries);
        ops.append(&mut self.tables);
        if swapped && !self.after_tables.is_empty() {
            // Backends lose usability only once no packet can still be reading a table
            // that references them.
            ops.push(Op::Quiesce);
        }
        ops.append(&mut self.after_tables);
        self.report.operations = ops.len();
        self.next.vips = vips;
        self.next.entries = self.entries;
        Plan {
            next: self.next,
            ops,
            report: self.report,
        }
    }
}

/// What the data plane holds, tracked while a plan runs so every operation's undo is
/// known before it is run.
struct Shadow {
    config: Option<LbConfig>,
    entries: BTreeMap<u32, BackendEntry>,
    tables: HashMap<u32, (u32, Arc<[u16]>)>,
    vips: HashMap<VipKey, u32>,
    /// Allowed source prefixes of VIPs that have them.
    sources: HashMap<VipKey, (u32, Arc<Vec<Prefix>>)>,
    /// The VIPs that take the fast path.
    fast: HashMap<VipKey, u32>,
    /// The VIPs that offer second-chance candidates.
    second_chance: HashMap<VipKey, u32>,
    /// The hash fields of every VIP.
    hash: HashMap<VipKey, HashFields>,
}

impl Shadow {
    fn of(state: &State) -> Self {
        Self {
            config: state.globals.map(|g| g.lb_config()),
            entries: state.entries.clone(),
            tables: state
                .vips
                .values()
                .map(|v| (v.id, (v.generation, Arc::clone(&v.slots))))
                .collect(),
            vips: state
                .vips
                .iter()
                .map(|(vip, v)| (vip.key(), v.id))
                .collect(),
            sources: state
                .vips
                .iter()
                .filter(|(_, v)| !v.spec.allowed_sources.is_empty())
                .map(|(vip, v)| (vip.key(), (v.id, Arc::new(v.spec.allowed_sources.clone()))))
                .collect(),
            fast: state
                .vips
                .iter()
                .filter(|(_, v)| v.spec.fast_path)
                .map(|(vip, v)| (vip.key(), v.id))
                .collect(),
            second_chance: state
                .vips
                .iter()
                .filter(|(_, v)| v.spec.second_chance)
                .map(|(vip, v)| (vip.key(), v.id))
                .collect(),
            hash: state
                .vips
                .iter()
                .map(|(vip, v)| (vip.key(), v.spec.hash))
                .collect(),
        }
    }

    /// The operation that undoes `op`, and the shadow updated as if `op` ran.
    fn undo_of(&self, op: &Op) -> Option<Op> {
        Some(match op {
            Op::SetConfig(_) => Op::SetConfig(self.config.unwrap_or_default()),
            Op::SetBackend(id, _) => {
                Op::SetBackend(*id, self.entries.get(id).copied().unwrap_or_default())
            }
            Op::ResetBackendStats(_) | Op::Quiesce => return None,
            Op::InstallTable { vip_id, .. } | Op::RemoveTable(vip_id) => {
                match self.tables.get(vip_id) {
                    Some((generation, slots)) => Op::InstallTable {
                        vip_id: *vip_id,
                        generation: *generation,
                        slots: Arc::clone(slots),
                    },
                    None => Op::RemoveTable(*vip_id),
                }
            }
            Op::SetVip(key, _) | Op::RemoveVip(key) => match self.vips.get(key) {
                Some(e) => Op::SetVip(*key, *e),
                None => Op::RemoveVip(*key),
            },
            Op::SetSources(key, vip_id, _) => match self.sources.get(key) {
                Some((id, prefixes)) => Op::SetSources(*key, *id, Arc::clone(prefixes)),
                None => Op::SetSources(*key, *vip_id, Arc::new(Vec::new())),
            },
            Op::SetFastPath(key, vip_id, _) => {
                Op::SetFastPath(*key, *vip_id, self.fast.contains_key(key))
            }
            Op::SetSecondChance(key, vip_id, _) => {
                Op::SetSecondChance(*key, *vip_id, self.second_chance.contains_key(key))
            }
            Op::SetHashFields(key, vip_id, _) => Op::SetHashFields(
                *key,
                *vip_id,
                self.hash.get(key).copied().unwrap_or_default(),
            ),
        })
    }

    fn record(&mut self, op: &Op) {
        match op {
            Op::SetConfig(c) => self.config = Some(*c),
            Op::SetBackend(id, e) => {
                self.entries.insert(*id, *e);
            }
            Op::ResetBackendStats(_) | Op::Quiesce => {}
            Op::InstallTable {
                vip_id,
                generation,
                slots,
            } => {
                self.tables
                    .insert(*vip_id, (*generation, Arc::clone(slots)));
            }
            Op::RemoveTable(id) => {
                self.tables.remove(id);
            }
            Op::SetVip(k, e) => {
                self.vips.insert(*k, *e);
            }
            Op::RemoveVip(k) => {
                self.vips.remove(k);
            }
            Op::SetSources(k, id, p) => {
                if p.is_empty() {
                    self.sources.remove(k);
                } else {
                    self.sources.insert(*k, (*id, Arc::clone(p)));
                }
            }
            Op::SetFastPath(k, id, on) => {
                if *on {
                    self.fast.insert(*k, *id);
                } else {
                    self.fast.remove(k);
                }
            }
            Op::SetSecondChance(k, id, on) => {
                if *on {
                    self.second_chance.insert(*k, *id);
                } else {
                    self.second_chance.remove(k);
                }
            }
            Op::SetHashFields(k, _, h) => {
                self.hash.insert(*k, *h);
            }
        }
    }
}

/// What [`execute`] measured.
pub(super) struct Executed {
    /// How long each table install took (ms).
    pub(super) swaps_ms: Vec<f64>,
    /// How long creating the new table buffers took ([`Dataplane::prepare_tables`]).
    pub(super) buffers: Duration,
}

/// Runs `ops` in order; on the first failure runs the undo of everything done, newest
/// first, and reports the failure. Consecutive backend entries are written in one call
/// ([`Dataplane::set_backends`]); when it fails, the undo also rewrites the entries of
/// that batch it may not have reached, with their unchanged values. Returns how long
/// each table install and the buffers' creation took.
pub(super) fn execute<D: Dataplane>(
    dp: &mut D,
    current: &State,
    ops: &[Op],
) -> Result<Executed, ApplyError> {
    let new_tables: Vec<(u32, u32)> = ops
        .iter()
        .filter_map(|op| match op {
            Op::InstallTable { vip_id, slots, .. } => {
                Some((*vip_id, u32::try_from(slots.len()).unwrap_or(u32::MAX)))
            }
            _ => None,
        })
        .collect();
    let preparing = Instant::now();
    if !new_tables.is_empty() {
        // Nothing live changes, so there is nothing to undo if it fails.
        dp.prepare_tables(&new_tables)
            .map_err(|error| ApplyError::Dataplane {
                step: format!("preparing the buffers of {} tables", new_tables.len()),
                error: Box::new(error),
                undo: String::new(),
            })?;
    }
    let buffers = preparing.elapsed();
    let mut shadow = Shadow::of(current);
    let mut undo: Vec<Op> = Vec::with_capacity(ops.len());
    let mut swaps_ms = Vec::new();
    let mut rest = ops;
    while !rest.is_empty() {
        let run = rest
            .iter()
            .take_while(|o| matches!(o, Op::SetBackend(..)))
            .count()
            .max(1);
        let (now, later) = rest.split_at(run);
        rest = later;
        // A batch's undo is logged before the call, as the batch may stop midway; a
        // single operation's only once it succeeded.
        let mut reverse: Vec<Op> = now.iter().filter_map(|o| shadow.undo_of(o)).collect();
        if run > 1 {
            undo.append(&mut reverse);
        }
        let started = Instant::now();
        if let Err(error) = run_step(dp, now) {
            return Err(ApplyError::Dataplane {
                step: describe_run(now),
                error: Box::new(error),
                undo: roll_back(dp, &undo),
            });
        }
        if matches!(now, [Op::InstallTable { .. }]) {
            swaps_ms.push(started.elapsed().as_secs_f64() * 1e3);
        }
        for o in now {
            shadow.record(o);
        }
        undo.append(&mut reverse);
    }
    Ok(Executed { swaps_ms, buffers })
}

/// Runs one operation, or a run of backend entries in one call.
fn run_step<D: Dataplane>(dp: &mut D, run: &[Op]) -> Result<(), DataplaneError> {
    if let [op] = run {
        return op.run(dp);
    }
    let entries: Vec<(u32, BackendEntry)> = run
        .iter()
        .filter_map(|o| match o {
            Op::SetBackend(id, e) => Some((*id, *e)),
            _ => None,
        })
        .collect();
    dp.set_backends(&entries)
}

/// Runs `undo` newest first; returns empty, or a note of the undos that failed too.
fn roll_back<D: Dataplane>(dp: &mut D, undo: &[Op]) -> String {
    let failures: Vec<String> = undo
        .iter()
        .rev()
        .filter_map(|u| u.run(dp).err().map(|e| format!("{}: {e}", u.describe())))
        .collect();
    if failures.is_empty() {
        String::new()
    } else {
        format!(" (undoing also failed: {})", failures.join("; "))
    }
}

/// The step of a failed run of operations: the operation, or the batch of backend
/// entries.
fn describe_run(run: &[Op]) -> String {
    match run {
        [op] => op.describe(),
        _ => format!("writing {} backend entries", run.len()),
    }
}
