//! Loading the embedded eBPF object ([`crate::EBPF_OBJECT`]) with the sizes chosen at
//! start, and the privileges that takes.

use std::{
    collections::HashMap as StdHashMap,
    os::fd::AsFd as _,
    sync::{Arc, Mutex},
};

use aya::{
    Ebpf, EbpfLoader,
    maps::{Map, MapData, MapError},
    sys::SyscallError,
};
use lb_common::{defaults, maps};

use super::{KernelDataplane, prog_err, xdp};
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
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            ct_capacity: defaults::CT_CAPACITY,
            ct_syn_capacity: defaults::CT_SYN_CAPACITY,
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

/// A duplicate of the file descriptor of map `name`, for a second handle that does not
/// borrow the object.
fn dup_fd(ebpf: &Ebpf, name: &'static str) -> Result<std::os::fd::OwnedFd, DataplaneError> {
    let Some(
        Map::Array(data) | Map::ArrayOfMaps(data) | Map::HashMap(data) | Map::LruHashMap(data),
    ) = ebpf.map(name)
    else {
        return Err(DataplaneError::MissingMap(name));
    };
    data.fd()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|io_error| {
            MapError::SyscallError(SyscallError {
                call: "dup",
                io_error,
            })
        })
        .map_err(map_err(name, "duplicate fd"))
}

impl KernelDataplane {
    /// Loads the embedded object ([`crate::EBPF_OBJECT`]) with the conntrack sizes of
    /// `options` and verifies the load balancer program.
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
            .load(crate::EBPF_OBJECT)
            .map_err(DataplaneError::Load)?;
        xdp(&mut ebpf, maps::XDP_PROGRAM)?
            .load()
            .map_err(prog_err(maps::XDP_PROGRAM))?;
        super::trace::load_trace_program(&mut ebpf)?;
        // A second handle on TABLES, from a duplicate of its fd: reopening it by id
        // (BPF_MAP_GET_FD_BY_ID) would need CAP_SYS_ADMIN, which `lb run` needs for
        // nothing else (dist/systemd/lb.service grants CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON).
        let tables_fd = dup_fd(&ebpf, maps::TABLES)?;
        let walker = super::ConntrackWalker::new(
            dup_fd(&ebpf, maps::CONNTRACK_V4)?,
            dup_fd(&ebpf, maps::CONNTRACK_V6)?,
            dup_fd(&ebpf, maps::SYN_CACHE)?,
        );
        let tables_raw = MapData::from_fd(tables_fd).map_err(map_err(maps::TABLES, "reopen"))?;
        let tables = TableSet::new(
            take(&mut ebpf, maps::TABLES)?,
            tables_raw,
            take(&mut ebpf, maps::VIPS)?,
            take(&mut ebpf, maps::VIP_INFO)?,
        );
        let trace_reader = Some(super::TraceReader::new(&mut ebpf)?);
        Ok(Self {
            walker: Some(walker),
            trace_filter: take(&mut ebpf, maps::TRACE_FILTER)?,
            tracing: false,
            trace_reader,
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
        })
    }
}
