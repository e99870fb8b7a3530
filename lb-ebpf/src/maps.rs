// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The program's maps, one line each; `lb_common::maps` says why each is shaped as it is
//! and gives the names and limits userspace shares.
//!
//! All maps are BTF-defined (`#[btf_map]`, section `.maps`); userspace resizes the
//! conntrack maps and the SYN cache at load time. The values of the maps userspace never
//! reads are in [`records`](crate::records); this module uses only `lb_common` and that
//! leaf module.

use aya_ebpf::{
    btf_maps::{Array, ArrayOfMaps, HashMap, LpmTrie, LruHashMap, PerCpuArray, ProgramArray},
    helpers::generated::bpf_get_smp_processor_id,
    macros::btf_map,
};
use lb_common::{
    agent::AgentStats,
    defaults::{
        AFFINITY_CAPACITY, CT_CAPACITY, CT_SYN_CAPACITY, EXCEPTIONS_CAPACITY, FRAG_CAPACITY,
    },
    maps::{
        CPU_ROW_LEN, CT_MAP_FLAGS, ICMP_RATE_KINDS, MAX_BACKENDS, MAX_SOURCE_RANGES, MAX_VIPS,
        STD_TABLE_MAP_FLAGS, STD_TABLE_SIZE, TABLE_HEADER_LEN, TABLE_MAP_FLAGS, TABLE_SLOTS,
        VIP_CACHE_FLAGS, VIP_CACHE_SLOTS, VIP_FILTER_WORDS,
    },
    probe::ProbeStats,
    stats::{BackendStats, GlobalStats, VipStats},
    trace::{TraceFilter, TracedPacket},
    types::{
        AffinityEntry, AffinityKey, AgentConfig, BackendEntry, CtEntry, FlowKey, FlowKey4,
        FragEntry, FragKey, LbConfig, NextHopEntry, SourceData, SynEntry, TableCell, VipAddrKey,
        VipCacheSlot, VipEntry, VipInfo, VipKey,
    },
};

use crate::records::{Carried, RareWork, Scratch};

const VIPS_MAX: usize = MAX_VIPS as usize;
const BACKENDS_MAX: usize = MAX_BACKENDS as usize;

/// One Maglev table (template of the inner maps of [`TABLES`]): 16-byte cells, header
/// first (`lb_common::maps::TABLE_HEADER_LEN`). Real tables have `M + TABLE_HEADER_LEN`
/// cells; `BPF_F_INNER_MAP` lets their size differ from this template's.
pub(crate) type TableMap =
    Array<TableCell, { TABLE_HEADER_LEN as usize + 1 }, { TABLE_MAP_FLAGS as usize }>;

/// One Maglev table of `STD_TABLE_SIZE` slots (template of the inner maps of
/// [`TABLES_STD`]): the header cell, then the slots. Without `BPF_F_INNER_MAP` every
/// inner map has exactly this size, and the kernel inlines the lookup of a cell.
pub(crate) type StdTableMap = Array<
    TableCell,
    { (STD_TABLE_SIZE + TABLE_HEADER_LEN) as usize },
    { STD_TABLE_MAP_FLAGS as usize },
>;

/// The global settings (one element).
#[btf_map]
pub(crate) static CONFIG: Array<LbConfig, 1> = Array::new();

/// VIP key → its id, live table buffer and table epoch.
#[btf_map]
pub(crate) static VIPS: HashMap<VipKey, VipEntry, VIPS_MAX> = HashMap::new();

/// Bitmap with one bit set per VIP: a clear bit passes a packet without a lookup.
#[btf_map]
pub(crate) static VIP_FILTER: Array<u64, { VIP_FILTER_WORDS as usize }> = Array::new();

/// Bitmap indexed like [`VIP_FILTER`]: a set bit means some VIP there takes the fast
/// path.
#[btf_map]
pub(crate) static FAST_FILTER: Array<u64, { VIP_FILTER_WORDS as usize }> = Array::new();

/// Filter bit → a copy of one VIP's `VIPS` entry, for the fast path (no hash-map call).
#[btf_map]
pub(crate) static VIP_CACHE: Array<
    VipCacheSlot,
    { VIP_CACHE_SLOTS as usize },
    { VIP_CACHE_FLAGS as usize },
> = Array::new();

/// VIP id → the VIP it names, whether it is live, and its table epoch.
#[btf_map]
pub(crate) static VIP_INFO: Array<VipInfo, VIPS_MAX> = Array::new();

/// VIP address → number of VIPs on it (read for packets whose ports are unreadable).
#[btf_map]
pub(crate) static VIP_ADDRS: HashMap<VipAddrKey, u32, VIPS_MAX> = HashMap::new();

/// Two Maglev table buffers per VIP (inner maps shaped like [`TableMap`]).
#[btf_map]
pub(crate) static TABLES: ArrayOfMaps<TableMap, { TABLE_SLOTS as usize }> = ArrayOfMaps::new();

/// The table buffers of `STD_TABLE_SIZE` slots, indexed as [`TABLES`] (inner maps
/// shaped like [`StdTableMap`]), for the VIPs whose entry has `VIP_TABLE_STD`.
#[btf_map]
pub(crate) static TABLES_STD: ArrayOfMaps<StdTableMap, { TABLE_SLOTS as usize }> =
    ArrayOfMaps::new();

/// Backend id → address, family and state.
#[btf_map]
pub(crate) static BACKENDS: Array<BackendEntry, BACKENDS_MAX> = Array::new();

/// IPv4 flow (16-byte key) → its pin: backend, VIP, time, table epoch, ISN.
#[btf_map]
pub(crate) static CONNTRACK_V4: LruHashMap<
    FlowKey4,
    CtEntry,
    { CT_CAPACITY as usize },
    { CT_MAP_FLAGS as usize },
> = LruHashMap::new();

/// IPv6 flow (40-byte key) → its pin.
#[btf_map]
pub(crate) static CONNTRACK_V6: LruHashMap<
    FlowKey,
    CtEntry,
    { CT_CAPACITY as usize },
    { CT_MAP_FLAGS as usize },
> = LruHashMap::new();

/// The fast path's exceptions (flow → its pin, both families): pins on dirty slots the
/// miss rule does not give again; never evicts (`fast`).
#[btf_map]
pub(crate) static EXCEPTIONS: HashMap<FlowKey, CtEntry, { EXCEPTIONS_CAPACITY as usize }> =
    HashMap::new();

/// Direct-mapped slots of TCP SYNs whose handshake has not completed.
#[btf_map]
pub(crate) static SYN_CACHE: Array<SynEntry, { CT_SYN_CAPACITY as usize }> = Array::new();

/// The maps laid out in CPU rows ([`cpu_row_element`]), in a module of their own so
/// that their names stay the maps' (the object's symbols and BTF variables) while this
/// module's names of the same spelling give each CPU its row.
mod rows {
    use aya_ebpf::{btf_maps::Array, macros::btf_map};
    use lb_common::{stats::BackendStats, types::NextHopEntry};

    use super::CPU_ROWS;

    /// Per CPU, backend id → its next hop found by `bpf_fib_lookup`, with an expiry:
    /// one row per CPU.
    #[btf_map]
    pub(super) static NEXTHOP_CACHE: Array<NextHopEntry, CPU_ROWS> = Array::new();

    /// Per CPU, backend id → packets and bytes forwarded to it: one row per CPU.
    #[btf_map]
    pub(super) static BACKEND_STATS: Array<BackendStats, CPU_ROWS> = Array::new();
}

/// `NEXTHOP_CACHE` as its readers see it: this CPU's element of a backend id.
pub(crate) const NEXTHOP_CACHE: NextHopCache = NextHopCache;

/// The elements of one row of an array laid out in CPU rows: a backend id's range.
const CPU_ROWS: usize = CPU_ROW_LEN as usize;
const _: () = assert!(CPU_ROWS == BACKENDS_MAX);

/// An array laid out as one plain array of rows, one row of [`CPU_ROWS`]
/// elements per CPU: CPU `c`'s element `i` is element `c * CPU_ROWS + i`, and userspace
/// sizes the map to `CPU_ROWS` times the possible CPUs at load
/// (`lb_common::maps::cpu_rows_entries`). The kernel creates a `PERCPU_ARRAY` with one
/// per-CPU allocation per element (65,536 for a backend id's range, about 60 ms a map
/// at start); a plain array is one allocation. A row is contiguous, so two CPUs share a
/// cache line only where their rows meet. An element out of the map (userspace did not
/// size it) reads as missing.
#[inline(always)]
fn cpu_row_element<T, const N: usize>(rows: &Array<T, N>, index: u32) -> Option<*mut T> {
    if index >= CPU_ROW_LEN {
        return None;
    }
    // SAFETY: bpf_get_smp_processor_id takes no arguments and cannot fail; XDP programs
    // run with migration disabled, so the CPU stays the same for the whole run.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    rows.get_ptr_mut(cpu.checked_mul(CPU_ROW_LEN)?.checked_add(index)?)
}

/// This CPU's row of `NEXTHOP_CACHE` ([`cpu_row_element`]).
pub(crate) struct NextHopCache;

impl NextHopCache {
    /// This CPU's element of backend id `index`, used by this CPU only.
    #[inline(always)]
    pub(crate) fn get_ptr_mut(&self, index: u32) -> Option<*mut NextHopEntry> {
        cpu_row_element(&rows::NEXTHOP_CACHE, index)
    }
}

/// VIP id → the epoch of its table the program last saw and when (`table_seen`).
#[btf_map]
pub(crate) static TABLE_SEEN: Array<u64, VIPS_MAX> = Array::new();

/// Per CPU, the rate limit of new conntrack pins (`new_pin_rate`).
#[btf_map]
pub(crate) static NEW_PIN_RATE: PerCpuArray<u64, 1> = PerCpuArray::new();
/// (VIP id, client's affinity fields) → its affinity pin: backend and last new
/// connection (LRU; `affinity`).
#[btf_map]
pub(crate) static AFFINITY: LruHashMap<AffinityKey, AffinityEntry, { AFFINITY_CAPACITY as usize }> =
    LruHashMap::new();

/// VIP id → its affinity timeout (ns; 0: none).
#[btf_map]
pub(crate) static AFFINITY_TIMEOUT: Array<u64, VIPS_MAX> = Array::new();

/// First fragment of a recent datagram → its backend and VIP (LRU).
#[btf_map]
pub(crate) static FRAGMENTS: LruHashMap<FragKey, FragEntry, { FRAG_CAPACITY as usize }> =
    LruHashMap::new();

/// (VIP, client prefix) → 1: the allowed source prefixes of the VIPs that have a list.
#[btf_map]
pub(crate) static SOURCE_RANGES: LpmTrie<SourceData, u32, { MAX_SOURCE_RANGES as usize }> =
    LpmTrie::new();

/// Bitmap indexed like [`VIP_FILTER`]: a set bit means some VIP there has a list.
#[btf_map]
pub(crate) static SOURCE_FILTER: Array<u64, { VIP_FILTER_WORDS as usize }> = Array::new();

/// VIP id → 1 while the VIP has allowed source prefixes.
#[btf_map]
pub(crate) static SOURCE_RESTRICTED: Array<u32, VIPS_MAX> = Array::new();

/// Per CPU, the rate limiters of generated ICMP (too big, echo replies).
#[btf_map]
pub(crate) static ICMP_RATE: PerCpuArray<u64, { ICMP_RATE_KINDS as usize }> = PerCpuArray::new();

/// The rare paths' program (`lb_xdp_rare`) and the full one (`lb_xdp_full`), reached by
/// tail call.
#[btf_map]
pub(crate) static RARE_PROGS: ProgramArray<2> = ProgramArray::new();

/// Per CPU, one [`Scratch`].
#[btf_map]
pub(crate) static SCRATCH: PerCpuArray<Scratch, 1> = PerCpuArray::new();

/// Per CPU, what `lb_xdp_full` carries through a packet (`full_path`).
#[btf_map]
pub(crate) static CARRIED: PerCpuArray<Carried, 1> = PerCpuArray::new();

/// Per CPU, the work `lb_xdp` hands to `lb_xdp_rare`.
#[btf_map]
pub(crate) static RARE_WORK: PerCpuArray<RareWork, 1> = PerCpuArray::new();

/// The current tick of the conntrack clock, written by the daemon (`conntrack`).
#[btf_map]
pub(crate) static ACTIVITY_TICK: Array<u32, 1> = Array::new();

/// Per CPU, one packet counter per verdict reason.
#[btf_map]
pub(crate) static GLOBAL_STATS: PerCpuArray<GlobalStats, 1> = PerCpuArray::new();

/// Per CPU, VIP id → its counters.
#[btf_map]
pub(crate) static VIP_STATS: PerCpuArray<VipStats, VIPS_MAX> = PerCpuArray::new();

/// This CPU's counters of backend id `index` in `BACKEND_STATS` (one row per CPU,
/// [`cpu_row_element`]), used by this CPU only.
#[inline(always)]
pub(crate) fn backend_stats(index: u32) -> Option<*mut BackendStats> {
    cpu_row_element(&rows::BACKEND_STATS, index)
}

/// Which VIP packets `lb trace` records while `CONFIG_TRACE` is set (one element).
#[btf_map]
pub(crate) static TRACE_FILTER: Array<TraceFilter, 1> = Array::new();

/// Per CPU, the traced packet handed to the trace program.
#[btf_map]
pub(crate) static TRACE_PACKET: PerCpuArray<TracedPacket, 1> = PerCpuArray::new();

/// The trace program `lb_trace`, tail-called for a traced packet.
#[btf_map]
pub(crate) static TRACE_PROGS: ProgramArray<1> = ProgramArray::new();

/// Per CPU, what the probe program (`probe`) did with marked packets.
#[btf_map]
pub(crate) static PROBE_STATS: PerCpuArray<ProbeStats, 1> = PerCpuArray::new();

/// The backend agent's settings (one element, `lb_common::types::AgentConfig`).
#[btf_map]
pub(crate) static AGENT_CONFIG: Array<AgentConfig, 1> = Array::new();

/// Per CPU, the backend agent's verdict counters (`lb_common::agent`).
#[btf_map]
pub(crate) static AGENT_STATS: PerCpuArray<AgentStats, 1> = PerCpuArray::new();
