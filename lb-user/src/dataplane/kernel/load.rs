//! Loading the embedded eBPF object ([`crate::EBPF_OBJECT`]) with the sizes chosen at
//! start, and the privileges that takes.

use std::{
    collections::HashMap as StdHashMap,
    os::fd::AsFd as _,
    sync::{Arc, Mutex},
};

use aya::{
    Ebpf, EbpfLoader,
    maps::{Map, MapData, MapError, ProgramArray},
    sys::SyscallError,
};
use lb_common::{defaults, maps};

use super::{KernelDataplane, prog_err, sources::SourceMaps, xdp};
use crate::dataplane::{DataplaneError, map_err, tables::TableSet};

/// `CAP_NET_ADMIN` (attach XDP), `include/uapi/linux/capability.h`.
const CAP_NET_ADMIN: u32 = 12;
/// `CAP_PERFMON`: the verifier accepts the program's pointer arithmetic only from a
/// perfmon-capable loader (Linux 5.8+).
const CAP_PERFMON: u32 = 38;
/// `CAP_BPF` (load programs, create maps; Linux 5.8+).
const CAP_BPF: u32 = 39;

/// Whether the process runs as root (effective uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether the process may load and attach XDP programs: root, or the effective
/// capabilities `CAP_BPF`, `CAP_PERFMON` and `CAP_NET_ADMIN` (`CapEff` in
/// `/proc/self/status`).
pub fn may_load_xdp() -> bool {
    if is_root() {
        return true;
    }
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| {
            [CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN]
                .iter()
                .all(|cap| caps & (1 << cap) != 0)
        })
}

/// Sizes chosen at load time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    /// Capacity of each established-flow conntrack map, IPv4 and IPv6 (entries).
    pub ct_capacity: u32,
    /// Slots of the SYN cache (`SYN_CACHE`); a power of two.
    pub ct_syn_capacity: u32,
    /// Entries of fragment tracking (`FRAGMENTS`).
    pub frag_capacity: u32,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            ct_capacity: defaults::CT_CAPACITY,
            ct_syn_capacity: defaults::CT_SYN_CAPACITY,
            frag_capacity: defaults::FRAG_CAPACITY,
        }
    }
}

/// Takes map `name` out of the object as the typed map `T`.
fn take<T>(ebpf: &mut Ebpf, name: &'static str) -> Result<T, DataplaneError>
where
    T: TryFrom<Map, Error = MapError>,
{
    let map = ebpf
        .take_map(name)
        .ok_or(DataplaneError::MissingMap(name))?;
    T::try_from(map).map_err(map_err(name, "open"))
}

/// Loads the rare paths' program and puts it in `RARE_PROGS`, which the load balancer
/// tail-calls (`lb_common::maps::RARE_PROGS`). The map stays in `ebpf`, whose open
/// descriptor keeps the entry (the kernel empties a program array when its last
/// descriptor closes).
fn install_rare_paths(ebpf: &mut Ebpf) -> Result<(), DataplaneError> {
    let prog = xdp(ebpf, maps::RARE_PROGRAM)?;
    prog.load().map_err(prog_err(maps::RARE_PROGRAM))?;
    let fd = prog
        .fd()
        .map_err(prog_err(maps::RARE_PROGRAM))?
        .try_clone()
        .map_err(|error| DataplaneError::Syscall {
            op: format!("dup fd of {}", maps::RARE_PROGRAM),
            error,
        })?;
    let progs = ebpf
        .map_mut(maps::RARE_PROGS)
        .ok_or(DataplaneError::MissingMap(maps::RARE_PROGS))?;
    ProgramArray::<&mut MapData>::try_from(progs)
        .map_err(map_err(maps::RARE_PROGS, "open"))?
        .set(0, &fd, 0)
        .map_err(map_err(maps::RARE_PROGS, "update"))
}

impl KernelDataplane {
    /// Loads the embedded object ([`crate::EBPF_OBJECT`]) with the conntrack sizes of
    /// `options`, verifies the load balancer program and its rare paths' program, and
    /// links the second to the first.
    ///
    /// # Errors
    /// [`DataplaneError::Load`] when the object or a map cannot be created (for example
    /// without `CAP_BPF`), [`DataplaneError::Program`] when the verifier rejects it.
    pub fn load(options: LoadOptions) -> Result<Self, DataplaneError> {
        if !options.ct_syn_capacity.is_power_of_two() {
            return Err(DataplaneError::OutOfRange(format!(
                "SYN cache slots {} is not a power of two",
                options.ct_syn_capacity
            )));
        }
        let mut ebpf = EbpfLoader::new()
            .map_max_entries(maps::CONNTRACK_V4, options.ct_capacity)
            .map_max_entries(maps::CONNTRACK_V6, options.ct_capacity)
            .map_max_entries(maps::SYN_CACHE, options.ct_syn_capacity)
            .map_max_entries(maps::FRAGMENTS, options.frag_capacity)
            .load(crate::EBPF_OBJECT)
            .map_err(DataplaneError::Load)?;
        xdp(&mut ebpf, maps::XDP_PROGRAM)?
            .load()
            .map_err(prog_err(maps::XDP_PROGRAM))?;
        install_rare_paths(&mut ebpf)?;
        // A second handle on TABLES, from a duplicate of its fd: reopening it by id
        // (BPF_MAP_GET_FD_BY_ID) would need CAP_SYS_ADMIN, which `lb run` needs for
        // nothing else (dist/systemd/lb.service grants CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON).
        let tables_fd = match ebpf.map(maps::TABLES) {
            Some(Map::ArrayOfMaps(data)) => data
                .fd()
                .as_fd()
                .try_clone_to_owned()
                .map_err(|io_error| {
                    MapError::SyscallError(SyscallError {
                        call: "dup",
                        io_error,
                    })
                })
                .map_err(map_err(maps::TABLES, "duplicate fd"))?,
            _ => return Err(DataplaneError::MissingMap(maps::TABLES)),
        };
        let tables_raw = MapData::from_fd(tables_fd).map_err(map_err(maps::TABLES, "reopen"))?;
        let tables = TableSet::new(
            take(&mut ebpf, maps::TABLES)?,
            tables_raw,
            take(&mut ebpf, maps::VIPS)?,
            take(&mut ebpf, maps::VIP_INFO)?,
        );
        let sources = SourceMaps::new(
            take(&mut ebpf, maps::SOURCE_RANGES)?,
            take(&mut ebpf, maps::SOURCE_FILTER)?,
            take(&mut ebpf, maps::SOURCE_RESTRICTED)?,
        );
        Ok(Self {
            config: take(&mut ebpf, maps::CONFIG)?,
            vip_addrs: take(&mut ebpf, maps::VIP_ADDRS)?,
            vip_filter: take(&mut ebpf, maps::VIP_FILTER)?,
            tables: Arc::new(Mutex::new(tables)),
            backends: take(&mut ebpf, maps::BACKENDS)?,
            conntrack_v4: take(&mut ebpf, maps::CONNTRACK_V4)?,
            conntrack_v6: take(&mut ebpf, maps::CONNTRACK_V6)?,
            syn_cache: take(&mut ebpf, maps::SYN_CACHE)?,
            syn_slots: options.ct_syn_capacity,
            written_config: None,
            global_stats: take(&mut ebpf, maps::GLOBAL_STATS)?,
            vip_stats: take(&mut ebpf, maps::VIP_STATS)?,
            backend_stats: take(&mut ebpf, maps::BACKEND_STATS)?,
            ebpf,
            link: None,
            vip_keys: StdHashMap::new(),
            sources,
        })
    }
}
