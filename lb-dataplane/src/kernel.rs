//! [`KernelDataplane`]: the XDP program loaded into the kernel with aya, and the
//! [`Dataplane`] implementation over its maps.
//!
//! - `load`: loading the embedded object ([`LoadOptions`]), the privileges it needs,
//!   and the verifier's refusals as errors;
//! - `agent`: the backend agent's program ([`Agent`]), loaded on its own;
//! - `counters`: the per-CPU counter arrays, summed over CPUs, read in batches;
//! - `mend`: watching the pins and the XDP link while the daemon runs, and mending them;
//! - `programs`: keeping the running programs on a restart of the same build;
//! - `probe`: the TC egress program that encapsulates tunnel-mode health probes;
//! - `conntrack`: inspecting and clearing flows (the conntrack pin of `lb flow`, tests);
//! - `walk`, `listing`: batched walks of the conntrack maps (connection counts,
//!   `lb conn list`);
//! - `sources`: the VIPs' allowed source prefixes and the order they are written in;
//! - `harness` (feature `test-harness`): `BPF_PROG_TEST_RUN` runs, the benchmark
//!   harness, raw tables and a second table writer, for the privileged tests and
//!   `lb-bench`;
//! - `pass` (feature `test-harness`): [`PassProgram`], the empty program a test bed
//!   attaches to the load balancer's veth peer.
//!
//! Without the feature neither the code nor the programs and maps it drives are in the
//! `lb` binary (the eBPF object is built without them, see `lb-dataplane/build.rs`).

mod activity;
mod affinity;
mod agent;
mod cleaning;
mod conntrack;
mod counters;
#[cfg(feature = "test-harness")]
mod harness;
mod listing;
mod load;
mod mend;
#[cfg(feature = "test-harness")]
pub mod old_layout;
#[cfg(feature = "test-harness")]
mod pass;
mod pinning;
mod probe;
mod programs;
mod sources;
mod trace;
mod walk;

use std::{
    collections::HashMap as StdHashMap,
    os::fd::AsFd as _,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

pub use activity::ActivityClock;
pub use agent::{Agent, AgentMode, AgentOptions, read_pinned_stats, stats_pin};
use aya::{
    Ebpf,
    maps::{Array, HashMap, IterableMap as _, MapData, PerCpuArray},
    programs::{ProgramError, Xdp, XdpMode, tc::SchedClassifierLinkId, xdp::XdpLinkId},
};
pub use cleaning::{Cleaner, Cleaning, PinCounts, SlotCounts};
use counters::{set_rows, sum_per_cpu, sum_per_cpu_many, sum_rows, sum_rows_many};
#[cfg(feature = "test-harness")]
pub use harness::{BenchRunner, BenchSpec, BenchTarget, TableWriter, TestRunOutput};
use lb_common::{
    hash::filter_word,
    maps::{self, MAX_BACKENDS, MAX_TABLE_SIZE, MAX_VIPS},
    stats::{BackendStats, GlobalStats, VipStats},
    types::{
        AffinityEntry, AffinityKey, BackendEntry, CtEntry, FlowKey, FlowKey4, LbConfig, SynEntry,
        VipAddrKey, VipKey,
    },
};
pub use listing::{ConnListing, ConnRow, ConnState, PinMap, widen};
use load::load_err;
pub use load::{
    LoadOptions, LoadTimes, Opened, Pinning, is_root, may_load_xdp, missing_capabilities,
};
pub use mend::PinCheck;
#[cfg(feature = "test-harness")]
pub use pass::PassProgram;
pub use trace::{TraceReader, TraceRecord};
pub use walk::{Census, ConnectionCounts, ConntrackWalker, WalkSettings, conntrack_now_ns};

use super::{
    Adopted, AffinityPin, AttachMode, CompactImage, CtTable, Dataplane, DataplaneError,
    InstalledTable, TableImage, absent_is_ok, bpf_sys, map_err, pinned::PinDir, pinned::PinLock,
    tables::TableSet,
};
use crate::prefix::Prefix;

/// The pins of a pinned data plane (see `super::pinned`).
#[derive(Debug)]
struct Pinned {
    dir: PinDir,
    lock: PinLock,
    /// Whether the maps were adopted (not created by this process).
    adopted: bool,
    /// The XDP link, pinned at `dir.link()` while attached.
    link: Option<aya::programs::links::PinnedLink>,
    /// SHA-256 of the eBPF object (`programs`).
    object: [u8; 32],
    /// Whether the adopted datapath's programs are kept (this object's, running): then
    /// this handle loaded none.
    kept_programs: bool,
    /// Descriptors of the pins, to pin them again when they go (`mend`).
    keeper: crate::pinned::PinKeeper,
}

/// The loaded XDP program and its maps.
pub struct KernelDataplane {
    ebpf: Ebpf,
    link: Option<XdpLinkId>,
    /// The probe program's egress link, when attached (`probe`).
    probe_link: Option<SchedClassifierLinkId>,
    config: Array<MapData, LbConfig>,
    vip_addrs: HashMap<MapData, VipAddrKey, u32>,
    vip_filter: Array<MapData, u64>,
    /// `FAST_FILTER`: one bit per fast-path VIP, indexed like `VIP_FILTER`.
    fast_filter: Array<MapData, u64>,
    /// The VIPs that take the fast path, to keep `FAST_FILTER` words exact.
    fast_keys: std::collections::HashSet<VipKey>,
    tables: Arc<Mutex<TableSet>>,
    backends: Array<MapData, BackendEntry>,
    conntrack_v4: HashMap<MapData, FlowKey4, CtEntry>,
    conntrack_v6: HashMap<MapData, FlowKey, CtEntry>,
    syn_cache: Array<MapData, SynEntry>,
    /// `EXCEPTIONS`: the fast path's pins the miss rule does not give again.
    exceptions: HashMap<MapData, FlowKey, CtEntry>,
    /// `AFFINITY`: the clients' affinity pins.
    affinity: HashMap<MapData, AffinityKey, AffinityEntry>,
    /// Slots of `syn_cache`, as loaded. This implementation is the only writer of
    /// `LbConfig::syn_cache_mask`: it derives the mask from this size.
    syn_slots: u32,
    /// `LbConfig::syn_cache_part_bits`, of which this implementation is the only writer
    /// too: `syn_cpu_part_bits` until [`Dataplane::attach`], then that for an interface
    /// with receive-side scaling (more than one receive queue), 0 (one part) otherwise.
    syn_part_bits: u8,
    /// [`lb_common::syn_cache::part_bits`] of `syn_slots` and the possible CPUs: a part
    /// per CPU.
    syn_cpu_part_bits: u8,
    /// The configuration last written (its hash seed locates SYN cache slots).
    written_config: Option<LbConfig>,
    global_stats: PerCpuArray<MapData, GlobalStats>,
    vip_stats: PerCpuArray<MapData, VipStats>,
    /// `BACKEND_STATS`: one row per CPU (`lb_common::maps::CPU_ROW_LEN`).
    backend_stats: Array<MapData, BackendStats>,
    /// The backend ids whose counters need no clearing.
    zeroed: counters::ZeroedIds,
    /// VIPs written (key → VIP id), to keep `VIP_ADDRS` counts and `VIP_FILTER` words
    /// exact.
    vip_keys: StdHashMap<VipKey, u32>,
    /// The allowed source prefixes of the VIPs.
    sources: sources::SourceMaps,
    /// `TRACE_FILTER`: which VIP packets `lb trace` records.
    trace_filter: trace::TraceFilterMap,
    /// Whether tracing is on: this data plane is the only writer of `CONFIG_TRACE`.
    tracing: bool,
    /// The reader of the trace records, until the daemon takes it.
    trace_reader: Option<TraceReader>,
    /// The walker of the conntrack maps, until the daemon takes it.
    walker: Option<ConntrackWalker>,
    /// The fast path's cleaning walk, until the daemon takes it.
    cleaner: Option<Cleaner>,
    /// The writer of the activity tick, until the daemon takes it.
    activity: Option<ActivityClock>,
    /// The pins, for a data plane opened with [`KernelDataplane::load_pinned`].
    pinned: Option<Pinned>,
    /// How long [`KernelDataplane::load_pinned`]'s load took (zero otherwise).
    load_times: LoadTimes,
}

fn prog_err(program: &'static str) -> impl FnOnce(ProgramError) -> DataplaneError {
    move |error| DataplaneError::Program { program, error }
}

/// The XDP program `name` of the object.
fn xdp<'a>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut Xdp, DataplaneError> {
    let prog = ebpf.program_mut(name).ok_or(DataplaneError::Program {
        program: name,
        error: ProgramError::NotLoaded,
    })?;
    prog.try_into().map_err(prog_err(name))
}

/// Loads the XDP program `program` of the object (unless it is loaded) and puts it in
/// slot `slot` of the program array `array`, replacing what an adopted (pinned) array
/// held there: the programs the load balancer and the bench harness tail-call.
fn install_tail_call(
    ebpf: &mut Ebpf,
    program: &'static str,
    array: &'static str,
    slot: u32,
) -> Result<(), DataplaneError> {
    let prog = xdp(ebpf, program)?;
    if prog.fd().is_err() {
        prog.load().map_err(prog_err(program))?;
    }
    let fd = prog
        .fd()
        .map_err(prog_err(program))?
        .try_clone()
        .map_err(|error| DataplaneError::Syscall {
            op: format!("dup fd of {program}"),
            error,
        })?;
    let progs = ebpf
        .map_mut(array)
        .ok_or(DataplaneError::MissingMap(array))?;
    aya::maps::ProgramArray::<&mut MapData>::try_from(progs)
        .map_err(map_err(array, "open"))?
        .set(slot, &fd, 0)
        .map_err(map_err(array, "update"))
}

/// The address key counted in `VIP_ADDRS` for a VIP.
fn addr_key(key: &VipKey) -> VipAddrKey {
    VipAddrKey {
        addr: key.addr,
        family: key.family,
        _pad: [0; 3],
    }
}

pub(super) fn lock(tables: &Mutex<TableSet>) -> MutexGuard<'_, TableSet> {
    tables.lock().unwrap_or_else(PoisonError::into_inner)
}

fn check_table(vip_id: u32, table: &TableImage<'_>) -> Result<(), DataplaneError> {
    check_size(vip_id, table.slots.len())
}

/// Checks a VIP id and a table size of `slots` slots.
fn check_size(vip_id: u32, slots: usize) -> Result<(), DataplaneError> {
    check_vip_id(vip_id)?;
    let size = u32::try_from(slots).unwrap_or(u32::MAX);
    if size == 0 || size > MAX_TABLE_SIZE {
        return Err(DataplaneError::OutOfRange(format!(
            "table size {size} is outside 1..={MAX_TABLE_SIZE}"
        )));
    }
    Ok(())
}

fn check_vip_id(vip_id: u32) -> Result<(), DataplaneError> {
    if vip_id >= MAX_VIPS {
        return Err(DataplaneError::OutOfRange(format!(
            "VIP id {vip_id} is beyond the map size {MAX_VIPS}"
        )));
    }
    Ok(())
}

fn check_backend_id(id: u32) -> Result<(), DataplaneError> {
    if id == 0 || id >= MAX_BACKENDS {
        return Err(DataplaneError::OutOfRange(format!(
            "backend id {id} is outside 1..{MAX_BACKENDS}"
        )));
    }
    Ok(())
}

impl KernelDataplane {
    /// The walker that counts live connections ([`ConntrackWalker`]); `None` once
    /// taken.
    pub fn take_conntrack_walker(&mut self) -> Option<ConntrackWalker> {
        self.walker.take()
    }

    /// The slot states of VIP `vip_id`'s live table (owners included), if it has one.
    ///
    /// # Errors
    /// When the table buffer cannot be read.
    pub fn slot_states(
        &self,
        vip_id: u32,
    ) -> Result<Option<Vec<lb_common::fastpath::SlotState>>, DataplaneError> {
        lock(&self.tables).states(vip_id)
    }

    /// The fast path's cleaning walk ([`Cleaner`]); `None` once taken.
    pub fn take_cleaner(&mut self) -> Option<Cleaner> {
        self.cleaner.take()
    }

    /// The writer of the activity tick ([`ActivityClock`]); `None` once taken.
    pub fn take_activity_clock(&mut self) -> Option<ActivityClock> {
        self.activity.take()
    }

    /// Whether the program is attached by this handle.
    pub fn is_attached(&self) -> bool {
        self.link.is_some() || self.pinned.as_ref().is_some_and(|p| p.link.is_some())
    }

    /// Rewrites the `VIP_FILTER` word holding `key`'s bit from the VIPs recorded, plus
    /// `extra` (a VIP about to be written).
    fn write_filter_word(
        &mut self,
        key: &VipKey,
        extra: Option<&VipKey>,
    ) -> Result<(), DataplaneError> {
        let (word, value) = filter_word(key, self.vip_keys.keys().chain(extra));
        self.vip_filter
            .set(word, value, 0)
            .map_err(map_err(maps::VIP_FILTER, "update"))
    }

    /// Rewrites the `FAST_FILTER` word holding `key`'s bit from [`Self::fast_keys`].
    fn write_fast_word(&mut self, key: &VipKey) -> Result<(), DataplaneError> {
        let (word, value) = filter_word(key, self.fast_keys.iter());
        self.fast_filter
            .set(word, value, 0)
            .map_err(map_err(maps::FAST_FILTER, "update"))
    }

    /// Decrements the `VIP_ADDRS` count of `addr`, deleting it at zero.
    fn release_address(&mut self, addr: &VipAddrKey) -> Result<(), DataplaneError> {
        let count = self.vip_addrs.get(addr, 0).unwrap_or(0);
        if count > 1 {
            self.vip_addrs
                .insert(addr, count - 1, 0)
                .map_err(map_err(maps::VIP_ADDRS, "update"))
        } else {
            absent_is_ok(self.vip_addrs.remove(addr)).map_err(map_err(maps::VIP_ADDRS, "delete"))
        }
    }
}

impl Dataplane for KernelDataplane {
    fn attach(&mut self, iface: &str, mode: AttachMode) -> Result<(), DataplaneError> {
        self.split_syn_cache_for(iface)?;
        if self.pinned.is_some() {
            return self.attach_pinned(iface, mode);
        }
        let mode = match mode {
            AttachMode::Native => XdpMode::Driver,
            AttachMode::Skb => XdpMode::Skb,
        };
        let link = xdp(&mut self.ebpf, maps::XDP_PROGRAM)?
            .attach(iface, mode)
            .map_err(prog_err(maps::XDP_PROGRAM))?;
        self.link = Some(link);
        Ok(())
    }

    fn detach(&mut self) -> Result<(), DataplaneError> {
        if self.pinned.is_some() {
            return self.detach_pinned();
        }
        let link = self.link.take().ok_or(DataplaneError::NotAttached)?;
        xdp(&mut self.ebpf, maps::XDP_PROGRAM)?
            .detach(link)
            .map_err(prog_err(maps::XDP_PROGRAM))
    }

    fn set_config(&mut self, config: &LbConfig) -> Result<(), DataplaneError> {
        let config = LbConfig {
            syn_cache_mask: self.syn_slots - 1,
            syn_cache_part_bits: self.syn_part_bits,
            flags: self.trace_flags(config.flags),
            ..*config
        };
        self.config
            .set(0, config, 0)
            .map_err(map_err(maps::CONFIG, "update"))?;
        self.written_config = Some(config);
        Ok(())
    }

    fn set_backend(&mut self, id: u32, entry: &BackendEntry) -> Result<(), DataplaneError> {
        check_backend_id(id)?;
        self.zeroed.lose(id);
        self.backends
            .set(id, entry, 0)
            .map_err(map_err(maps::BACKENDS, "update"))
    }

    fn set_backends(&mut self, entries: &[(u32, BackendEntry)]) -> Result<(), DataplaneError> {
        for (id, _) in entries {
            check_backend_id(*id)?;
            self.zeroed.lose(*id);
        }
        let (ids, values): (Vec<u32>, Vec<BackendEntry>) = entries.iter().copied().unzip();
        let fd = self.backends.map().fd().as_fd();
        bpf_sys::update_batch(fd, &ids, &values)
            .map(|_| ())
            .map_err(|(_, error)| DataplaneError::Syscall {
                op: format!("{}: update batch", maps::BACKENDS),
                error,
            })
    }

    fn install_table(&mut self, vip_id: u32, table: &TableImage<'_>) -> Result<(), DataplaneError> {
        check_table(vip_id, table)?;
        lock(&self.tables).install(vip_id, table)
    }

    fn install_compact(
        &mut self,
        vip_id: u32,
        table: &CompactImage<'_>,
    ) -> Result<(), DataplaneError> {
        check_size(vip_id, table.slots.len())?;
        lock(&self.tables).install_slots(vip_id, table.generation, table.slots)
    }

    fn learn_table(&mut self, vip_id: u32, next: &[u16]) -> Result<u32, DataplaneError> {
        check_size(vip_id, next.len())?;
        lock(&self.tables).learn_slots(vip_id, next)
    }

    fn prepare_tables(&mut self, tables: &[(u32, u32)]) -> Result<(), DataplaneError> {
        for &(vip_id, size) in tables {
            check_size(vip_id, size as usize)?;
        }
        lock(&self.tables).prepare(tables)
    }

    fn quiesce(&mut self) -> Result<(), DataplaneError> {
        lock(&self.tables).quiesce()
    }

    fn remove_table(&mut self, vip_id: u32) -> Result<(), DataplaneError> {
        check_vip_id(vip_id)?;
        lock(&self.tables).remove(vip_id)
    }

    fn table(&self, vip_id: u32) -> Result<Option<InstalledTable>, DataplaneError> {
        check_vip_id(vip_id)?;
        lock(&self.tables).read(vip_id)
    }

    fn set_vip(&mut self, key: &VipKey, vip_id: u32) -> Result<(), DataplaneError> {
        check_vip_id(vip_id)?;
        let addr = addr_key(key);
        let is_new = !self.vip_keys.contains_key(key);
        // Before the VIPS entry: its filter bit (and, in the table set, its id's info),
        // so that neither the filter nor the established-flow path can miss it.
        self.write_filter_word(key, Some(key))?;
        if is_new {
            let count = self.vip_addrs.get(&addr, 0).unwrap_or(0);
            self.vip_addrs
                .insert(addr, count + 1, 0)
                .map_err(map_err(maps::VIP_ADDRS, "update"))?;
        }
        let written = lock(&self.tables).set_vip(key, vip_id);
        if let Err(e) = written {
            if is_new {
                // Undo the address count so a failed call changes nothing.
                let _ = self.release_address(&addr);
            }
            return Err(e);
        }
        self.vip_keys.insert(*key, vip_id);
        Ok(())
    }

    fn set_fast_path(&mut self, key: &VipKey, vip_id: u32, on: bool) -> Result<(), DataplaneError> {
        check_vip_id(vip_id)?;
        // The entry's flag and the filter bit are both needed: either order is safe.
        lock(&self.tables).set_fast_path(vip_id, on)?;
        let changed = if on {
            self.fast_keys.insert(*key)
        } else {
            self.fast_keys.remove(key)
        };
        if changed {
            self.write_fast_word(key)?;
        }
        Ok(())
    }

    fn fast_path(&self, vip_id: u32) -> bool {
        lock(&self.tables).fast_path(vip_id)
    }

    fn vip_cached(&self, vip_id: u32) -> bool {
        lock(&self.tables).cached(vip_id)
    }

    fn set_second_chance(
        &mut self,
        _key: &VipKey,
        vip_id: u32,
        on: bool,
    ) -> Result<(), DataplaneError> {
        check_vip_id(vip_id)?;
        lock(&self.tables).set_second_chance(vip_id, on)
    }

    fn second_chance(&self, vip_id: u32) -> bool {
        lock(&self.tables).second_chance(vip_id)
    }

    fn set_hash_fields(
        &mut self,
        _key: &VipKey,
        vip_id: u32,
        fields: lb_common::hash_fields::HashFields,
    ) -> Result<(), DataplaneError> {
        check_vip_id(vip_id)?;
        lock(&self.tables).set_hash_fields(vip_id, fields)
    }

    fn hash_fields(&self, vip_id: u32) -> lb_common::hash_fields::HashFields {
        lock(&self.tables).hash_fields(vip_id)
    }

    fn dirty_slots(&self, vip_id: u32) -> Result<u64, DataplaneError> {
        check_vip_id(vip_id)?;
        let states = lock(&self.tables).states(vip_id)?;
        Ok(states.map_or(0, |s| s.iter().filter(|s| s.is_dirty()).count() as u64))
    }

    fn remove_vip(&mut self, key: &VipKey) -> Result<(), DataplaneError> {
        if self.fast_keys.remove(key) {
            self.write_fast_word(key)?;
        }
        lock(&self.tables).remove_vip(key)?;
        if self.vip_keys.remove(key).is_some() {
            // After the VIPS entry (and its id's info) is gone: the filter bit.
            self.write_filter_word(key, None)?;
            self.release_address(&addr_key(key))?;
        }
        Ok(())
    }

    fn set_sources(
        &mut self,
        key: &VipKey,
        vip_id: u32,
        prefixes: &[Prefix],
    ) -> Result<(), DataplaneError> {
        self.sources.set(key, vip_id, prefixes)
    }

    fn global_stats(&self) -> Result<GlobalStats, DataplaneError> {
        sum_per_cpu(
            &self.global_stats,
            0,
            maps::GLOBAL_STATS,
            GlobalStats::accumulate,
        )
    }

    fn vip_stats(&self, vip_id: u32) -> Result<VipStats, DataplaneError> {
        check_vip_id(vip_id)?;
        sum_per_cpu(
            &self.vip_stats,
            vip_id,
            maps::VIP_STATS,
            VipStats::accumulate,
        )
    }

    fn backend_stats(&self, id: u32) -> Result<BackendStats, DataplaneError> {
        check_backend_id(id)?;
        sum_rows(
            &self.backend_stats,
            id,
            maps::BACKEND_STATS,
            BackendStats::accumulate,
        )
    }

    fn vip_stats_of(&self, ids: &[u32]) -> Result<Vec<VipStats>, DataplaneError> {
        ids.iter().try_for_each(|&id| check_vip_id(id))?;
        sum_per_cpu_many(&self.vip_stats, ids, maps::VIP_STATS, VipStats::accumulate)
    }

    fn backend_stats_of(&self, ids: &[u32]) -> Result<Vec<BackendStats>, DataplaneError> {
        ids.iter().try_for_each(|&id| check_backend_id(id))?;
        sum_rows_many(
            &self.backend_stats,
            ids,
            maps::BACKEND_STATS,
            BackendStats::accumulate,
        )
    }

    fn reset_backend_stats(&mut self, id: u32) -> Result<(), DataplaneError> {
        check_backend_id(id)?;
        if self.zeroed.holds(id) {
            return Ok(());
        }
        set_rows(
            &mut self.backend_stats,
            id,
            BackendStats::default(),
            maps::BACKEND_STATS,
        )
    }

    fn slot_state(
        &self,
        vip_id: u32,
        slot: u32,
    ) -> Result<Option<lb_common::fastpath::SlotState>, DataplaneError> {
        lock(&self.tables).state(vip_id, slot)
    }

    fn owners_given_up(&self, vip_id: u32) -> u64 {
        lock(&self.tables).owners_given_up(vip_id)
    }

    fn lookup_flow(&self, key: &FlowKey) -> Result<Option<(CtTable, CtEntry)>, DataplaneError> {
        self.conntrack_lookup(key)
    }

    fn lookup_affinity(&self, key: &FlowKey) -> Result<Option<AffinityPin>, DataplaneError> {
        self.affinity_lookup(key)
    }

    fn probe_encap(&self) -> Option<(bool, lb_common::probe::ProbeStats)> {
        Some((
            self.probe_encap_attached(),
            self.probe_stats().unwrap_or_default(),
        ))
    }

    fn adopted(&self) -> Result<Option<Adopted>, DataplaneError> {
        self.adopted_state()
    }

    fn backend(&self, id: u32) -> Result<BackendEntry, DataplaneError> {
        check_backend_id(id)?;
        self.backends
            .get(&id, 0)
            .map_err(map_err(maps::BACKENDS, "lookup"))
    }

    fn store_record(&mut self, record: &[u8]) -> Result<(), DataplaneError> {
        self.write_record(record)
    }
}
