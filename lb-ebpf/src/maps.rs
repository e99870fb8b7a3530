//! The program's maps (names, key/value types and sizes in `lb_common::maps`).
//!
//! All maps are BTF-defined (`#[btf_map]`, section `.maps`); userspace resizes the
//! conntrack maps and the SYN cache at load time.

use aya_ebpf::{
    btf_maps::{Array, ArrayOfMaps, HashMap, LruHashMap, PerCpuArray},
    macros::btf_map,
};
use lb_common::{
    defaults::{CT_CAPACITY, CT_SYN_CAPACITY},
    maps::{
        CT_MAP_FLAGS, MAX_BACKENDS, MAX_VIPS, TABLE_HEADER_LEN, TABLE_MAP_FLAGS, TABLE_SLOTS,
        VIP_FILTER_WORDS,
    },
    stats::{BackendStats, GlobalStats, VipStats},
    types::{
        BackendEntry, CtEntry, FlowKey, FlowKey4, LbConfig, NextHopEntry, SynEntry, VipAddrKey,
        VipEntry, VipInfo, VipKey,
    },
};

const VIPS_MAX: usize = MAX_VIPS as usize;
const BACKENDS_MAX: usize = MAX_BACKENDS as usize;

/// One Maglev table (template of the inner maps of [`TABLES`]): `u32` entries, header
/// first (`lb_common::maps::TABLE_HEADER_LEN`). Real tables have `M + TABLE_HEADER_LEN`
/// entries; `BPF_F_INNER_MAP` lets their size differ from this template's.
pub(crate) type TableMap =
    Array<u32, { TABLE_HEADER_LEN as usize + 1 }, { TABLE_MAP_FLAGS as usize }>;

#[btf_map]
pub(crate) static CONFIG: Array<LbConfig, 1> = Array::new();

#[btf_map]
pub(crate) static VIPS: HashMap<VipKey, VipEntry, VIPS_MAX> = HashMap::new();

#[btf_map]
pub(crate) static VIP_FILTER: Array<u64, { VIP_FILTER_WORDS as usize }> = Array::new();

#[btf_map]
pub(crate) static VIP_INFO: Array<VipInfo, VIPS_MAX> = Array::new();

#[btf_map]
pub(crate) static VIP_ADDRS: HashMap<VipAddrKey, u32, VIPS_MAX> = HashMap::new();

#[btf_map]
pub(crate) static TABLES: ArrayOfMaps<TableMap, { TABLE_SLOTS as usize }> = ArrayOfMaps::new();

#[btf_map]
pub(crate) static BACKENDS: Array<BackendEntry, BACKENDS_MAX> = Array::new();

#[btf_map]
pub(crate) static CONNTRACK_V4: LruHashMap<
    FlowKey4,
    CtEntry,
    { CT_CAPACITY as usize },
    { CT_MAP_FLAGS as usize },
> = LruHashMap::new();

#[btf_map]
pub(crate) static CONNTRACK_V6: LruHashMap<
    FlowKey,
    CtEntry,
    { CT_CAPACITY as usize },
    { CT_MAP_FLAGS as usize },
> = LruHashMap::new();

#[btf_map]
pub(crate) static SYN_CACHE: Array<SynEntry, { CT_SYN_CAPACITY as usize }> = Array::new();

#[btf_map]
pub(crate) static NEXTHOP_CACHE: PerCpuArray<NextHopEntry, BACKENDS_MAX> = PerCpuArray::new();

#[btf_map]
pub(crate) static GLOBAL_STATS: PerCpuArray<GlobalStats, 1> = PerCpuArray::new();

#[btf_map]
pub(crate) static VIP_STATS: PerCpuArray<VipStats, VIPS_MAX> = PerCpuArray::new();

#[btf_map]
pub(crate) static BACKEND_STATS: PerCpuArray<BackendStats, BACKENDS_MAX> = PerCpuArray::new();
