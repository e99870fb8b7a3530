//! Planning a change: from the applied state and the desired one, the next applied
//! state and the ordered data-plane operations that get there; then running them with
//! an undo log, so that a failure midway puts the previous state back.
//!
//! Ordering rules that keep packets safe (issue "Controller", ../shared/cases BR-12):
//! 1. the global configuration first;
//! 2. per VIP: backend entries that become *more* usable (new, or down → draining →
//!    active) before the table that references them; then the table, swapped in one
//!    map update; then, for a new VIP, its `VIPS` entry (so no packet finds a VIP
//!    without a table);
//! 3. removed VIPs: the `VIPS` entry first (their packets become non-VIP traffic), then
//!    the table;
//! 4. last, after waiting until no packet still reads a replaced table
//!    ([`Dataplane::quiesce`]), backend entries that become *less* usable
//!    (active → draining → down).

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::Instant,
};

use lb_common::types::{
    BACKEND_ACTIVE, BACKEND_DOWN, BACKEND_DRAINING, BACKEND_UNUSED, BackendEntry, LbConfig, VipKey,
};

use super::{
    AppliedVip, State,
    desired::{Desired, VipSpec},
    ids::IdError,
};
use crate::{
    config::{BackendState, Vip},
    dataplane::{Dataplane, DataplaneError, TableImage},
    flow::addr_bytes,
    maglev::{Backend, BackendKey, MaglevError, MaglevTable},
};

/// One data-plane operation.
#[derive(Clone, Debug)]
pub(super) enum Op {
    SetConfig(LbConfig),
    SetBackend(u32, BackendEntry),
    ResetBackendStats(u32),
    InstallTable {
        vip_id: u32,
        generation: u32,
        slots: Arc<Vec<u32>>,
    },
    RemoveTable(u32),
    SetVip(VipKey, u32),
    RemoveVip(VipKey),
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
            } => dp.install_table(
                *vip_id,
                &TableImage {
                    generation: *generation,
                    slots,
                },
            ),
            Op::RemoveTable(id) => dp.remove_table(*id),
            Op::SetVip(k, vip_id) => dp.set_vip(k, *vip_id),
            Op::RemoveVip(k) => dp.remove_vip(k),
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

/// What a successful change did, for the log.
#[derive(Clone, Debug, Default)]
pub struct ApplyReport {
    /// One line per VIP added, changed or removed.
    pub lines: Vec<String>,
    /// Warnings of the table builder.
    pub warnings: Vec<String>,
    /// Data-plane operations run.
    pub operations: usize,
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

fn entry(key: &BackendKey, state: BackendState) -> BackendEntry {
    let (addr, family) = addr_bytes(key.ip());
    BackendEntry {
        addr,
        family,
        state: match state {
            BackendState::Active => BACKEND_ACTIVE,
            BackendState::Drain => BACKEND_DRAINING,
            BackendState::Down => BACKEND_DOWN,
        },
        _pad: [0; 2],
    }
}

/// Table-builder inputs: the backends with state active, with their weights.
fn table_inputs(spec: &VipSpec) -> Vec<Backend> {
    spec.backends
        .iter()
        .filter(|(_, b)| b.state == BackendState::Active)
        .map(|(k, b)| Backend::new(*k, b.weight))
        .collect()
}

/// The plan of one change.
pub(super) struct Plan {
    pub(super) next: State,
    pub(super) ops: Vec<Op>,
    pub(super) report: ApplyReport,
}

/// Computes the next state and the operations from `current` to `desired`.
pub(super) fn plan(current: &State, desired: &Desired) -> Result<Plan, ApplyError> {
    let mut next = current.clone();
    let mut report = ApplyReport::default();
    let mut before_tables: Vec<Op> = Vec::new();
    let mut tables: Vec<Op> = Vec::new();
    let mut after_tables: Vec<Op> = Vec::new();
    let mut entries = current.entries.clone();

    let config = desired.globals.lb_config();
    let mut ops = Vec::new();
    if current.globals.map(|g| g.lb_config()) != Some(config) {
        ops.push(Op::SetConfig(config));
    }
    next.globals = Some(desired.globals);
    next.maglev_seed = desired.maglev_seed;

    // Tables built in this change, shared by VIPs with identical inputs (BR-10).
    let mut built: HashMap<(Vec<Backend>, u32), Arc<MaglevTable>> = HashMap::new();
    let mut vips = BTreeMap::new();
    for (vip, spec) in &desired.vips {
        let old = current.vips.get(vip);
        let vip_id = next.ids.vip(*vip).map_err(ApplyError::Ids)?;
        let mut backend_ids = BTreeMap::new();
        for (key, b) in &spec.backends {
            let id = next.ids.backend(*vip, *key).map_err(ApplyError::Ids)?;
            backend_ids.insert(*key, id);
            let new_entry = entry(key, b.state);
            let old_entry = entries.get(&id).copied();
            if old_entry != Some(new_entry) {
                let raise = rank(new_entry.state) > old_entry.map_or(0, |e| rank(e.state));
                if old_entry.is_none_or(|e| e.state == BACKEND_UNUSED || e.addr != new_entry.addr) {
                    before_tables.push(Op::ResetBackendStats(id));
                }
                let op = Op::SetBackend(id, new_entry);
                if raise {
                    before_tables.push(op);
                } else {
                    after_tables.push(op);
                }
                entries.insert(id, new_entry);
            }
        }
        if let Some(old) = old {
            for key in old
                .backend_ids
                .keys()
                .filter(|k| !spec.backends.contains_key(k))
            {
                next.ids.release_backend(*vip, *key);
                let id = old.backend_ids[key];
                let down = BackendEntry {
                    state: BACKEND_DOWN,
                    ..entries.get(&id).copied().unwrap_or_default()
                };
                after_tables.push(Op::SetBackend(id, down));
                entries.insert(id, down);
            }
        }

        let unchanged = old.is_some_and(|o| {
            o.spec.table_size == spec.table_size
                && table_inputs(&o.spec) == table_inputs(spec)
                && current.maglev_seed == desired.maglev_seed
        });
        let applied = if let (true, Some(o)) = (unchanged, old) {
            AppliedVip {
                spec: spec.clone(),
                backend_ids,
                ..o.clone()
            }
        } else {
            let inputs = table_inputs(spec);
            let started = Instant::now();
            let cache_key = (inputs, spec.table_size);
            let table = if let Some(t) = built.get(&cache_key) {
                Arc::clone(t)
            } else {
                let t = Arc::new(
                    MaglevTable::build(&cache_key.0, spec.table_size, desired.maglev_seed)
                        .map_err(|error| ApplyError::Table { vip: *vip, error })?,
                );
                next.builds_total += 1;
                built.insert(cache_key, Arc::clone(&t));
                t
            };
            let build_ms = started.elapsed().as_secs_f64() * 1e3;
            let slots: Vec<u32> = if table.is_empty() {
                vec![0; spec.table_size as usize]
            } else {
                let ids: Vec<u32> = table
                    .backends()
                    .iter()
                    .map(|b| backend_ids.get(&b.key).copied().unwrap_or(0))
                    .collect();
                table.slots().iter().map(|&i| ids[i as usize]).collect()
            };
            let generation = old.map_or(1, |o| o.generation.wrapping_add(1).max(1));
            let slots = Arc::new(slots);
            let in_table = table.active_backends();
            let mut line = format!(
                "VIP {vip}: {} backends ({in_table} in the table), table {} slots, fingerprint {}, generation {generation}, built in {build_ms:.2} ms",
                spec.backends.len(),
                spec.table_size,
                table.fingerprint()
            );
            if let Some(o) = old {
                let changed = if o.slots.len() == slots.len() {
                    o.slots
                        .iter()
                        .zip(slots.iter())
                        .filter(|(a, b)| a != b)
                        .count()
                } else {
                    slots.len()
                };
                #[expect(clippy::cast_precision_loss, reason = "a percentage for the log")]
                let pct = 100.0 * changed as f64 / slots.len() as f64;
                line.push_str(&format!("; {changed} slots changed owner ({pct:.2}%)"));
            }
            if table.is_empty() {
                report.warnings.push(format!(
                    "VIP {vip} has no backend with weight > 0: new flows to it are dropped"
                ));
            }
            report
                .warnings
                .extend(table.warnings().iter().map(|w| format!("VIP {vip}: {w}")));
            report.lines.push(line);
            tables.push(Op::InstallTable {
                vip_id,
                generation,
                slots: Arc::clone(&slots),
            });
            AppliedVip {
                id: vip_id,
                spec: spec.clone(),
                table,
                slots,
                generation,
                backend_ids,
            }
        };
        if old.is_none() {
            tables.push(Op::SetVip(vip.key(), vip_id));
        }
        vips.insert(*vip, applied);
    }

    // Removed VIPs: ids are released only now, so none is reused within this change.
    for (vip, old) in &current.vips {
        if desired.vips.contains_key(vip) {
            continue;
        }
        tables.push(Op::RemoveVip(vip.key()));
        tables.push(Op::RemoveTable(old.id));
        next.ids.release_vip(vip);
        for (key, &id) in &old.backend_ids {
            next.ids.release_backend(*vip, *key);
            let down = BackendEntry {
                state: BACKEND_DOWN,
                ..entries.get(&id).copied().unwrap_or_default()
            };
            after_tables.push(Op::SetBackend(id, down));
            entries.insert(id, down);
        }
        report.lines.push(format!("VIP {vip}: removed"));
    }

    let need: u64 = vips
        .values()
        .map(|v| (u64::from(v.spec.table_size) + 2) * 8)
        .sum();
    if need > desired.max_table_memory {
        return Err(ApplyError::Memory {
            need_mib: need.div_ceil(1 << 20),
            limit_mib: desired.max_table_memory >> 20,
        });
    }

    ops.extend(before_tables);
    let swapped = tables.iter().any(|o| matches!(o, Op::InstallTable { .. }));
    ops.extend(tables);
    if swapped && !after_tables.is_empty() {
        // Backends lose usability only once no packet can still be reading a table
        // that references them.
        ops.push(Op::Quiesce);
    }
    ops.extend(after_tables);
    report.operations = ops.len();
    next.vips = vips;
    next.entries = entries;
    Ok(Plan { next, ops, report })
}

/// What the data plane holds, tracked while a plan runs so every operation's undo is
/// known before it is run.
struct Shadow {
    config: Option<LbConfig>,
    entries: BTreeMap<u32, BackendEntry>,
    tables: HashMap<u32, (u32, Arc<Vec<u32>>)>,
    vips: HashMap<VipKey, u32>,
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
        }
    }
}

/// Runs `ops` in order; on the first failure runs the undo of everything done, newest
/// first, and reports the failure.
pub(super) fn execute<D: Dataplane>(
    dp: &mut D,
    current: &State,
    ops: &[Op],
) -> Result<(), ApplyError> {
    let mut shadow = Shadow::of(current);
    let mut undo: Vec<Op> = Vec::with_capacity(ops.len());
    for op in ops {
        let reverse = shadow.undo_of(op);
        if let Err(error) = op.run(dp) {
            let mut failures = Vec::new();
            for u in undo.iter().rev() {
                if let Err(e) = u.run(dp) {
                    failures.push(format!("{}: {e}", u.describe()));
                }
            }
            return Err(ApplyError::Dataplane {
                step: op.describe(),
                error: Box::new(error),
                undo: if failures.is_empty() {
                    String::new()
                } else {
                    format!(" (undoing also failed: {})", failures.join("; "))
                },
            });
        }
        shadow.record(op);
        undo.extend(reverse);
    }
    Ok(())
}
