//! Loading the embedded eBPF object ([`crate::EBPF_OBJECT`]) with the sizes chosen at
//! start, the privileges that takes, and the errors of a program the kernel refuses.

use std::{
    collections::HashMap as StdHashMap,
    os::fd::AsFd as _,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use aya::{
    Ebpf, EbpfLoader,
    maps::{Map, MapData, MapError},
    programs::{ProgramError, Xdp},
    sys::SyscallError,
};
use lb_common::{
    defaults, maps,
    types::{CONFIG_TRACE, CONFIG_VALID, LbConfig},
};

use super::{KernelDataplane, Pinned, install_tail_call, prog_err, sources::SourceMaps};
use crate::{
    DataplaneError, map_err,
    pinned::{Layout, Meta, MetaMap, PinDir, PinLock, SizeOverride, layout},
    tables::{Outer, Outers, TablePins, TableSet},
};

/// `CAP_NET_ADMIN` (attach XDP), `include/uapi/linux/capability.h`.
const CAP_NET_ADMIN: u32 = 12;
/// `CAP_PERFMON`: the verifier accepts the program's pointer arithmetic only from a
/// perfmon-capable loader (Linux 5.8+).
const CAP_PERFMON: u32 = 38;
/// `CAP_BPF` (load programs, create maps; Linux 5.8+).
const CAP_BPF: u32 = 39;

/// Lines of a verifier log that [`DataplaneError::Rejected`] keeps: the verifier ends
/// with the instruction it rejected, its reason, and its counts (time, stack depth,
/// instructions processed), which take 4 lines.
const VERIFIER_TAIL_LINES: usize = 6;

/// The error of loading (verifying) program `program`: [`DataplaneError::Rejected`]
/// with the end of the verifier's log when the `BPF_PROG_LOAD` system call failed, the
/// whole log at debug level; [`DataplaneError::Program`] otherwise.
pub(super) fn load_err(program: &'static str) -> impl FnOnce(ProgramError) -> DataplaneError {
    move |error| match error {
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } => {
            let log = verifier_log.to_string();
            tracing::debug!("the verifier's log of {program}:\n{log}");
            DataplaneError::Rejected {
                program,
                error: io_error,
                reason: log_tail(&log),
            }
        }
        error => DataplaneError::Program { program, error },
    }
}

/// The last [`VERIFIER_TAIL_LINES`] non-empty lines of the verifier's `log`, joined
/// by ` / `.
fn log_tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(VERIFIER_TAIL_LINES)..].join(" / ")
}

/// Whether the process runs as root (effective uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether the process may load and attach XDP programs: root, or the effective
/// capabilities `CAP_BPF`, `CAP_PERFMON` and `CAP_NET_ADMIN` (`CapEff` in
/// `/proc/self/status`).
pub fn may_load_xdp() -> bool {
    is_root() || missing_capabilities().is_empty()
}

/// The names of the capabilities `CAP_BPF`, `CAP_PERFMON` and `CAP_NET_ADMIN` that
/// the process's effective set (`CapEff` in `/proc/self/status`) lacks, in that order;
/// all three when the set cannot be read. Root can lack them too (a bounding set, a
/// container), and then the kernel refuses the programs' loads or attachment.
pub fn missing_capabilities() -> Vec<&'static str> {
    let effective = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        })
        .unwrap_or(0);
    [
        (CAP_BPF, "CAP_BPF"),
        (CAP_PERFMON, "CAP_PERFMON"),
        (CAP_NET_ADMIN, "CAP_NET_ADMIN"),
    ]
    .into_iter()
    .filter(|(cap, _)| effective & (1 << cap) == 0)
    .map(|(_, name)| name)
    .collect()
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
    /// Entries of the affinity pins (`AFFINITY`).
    pub affinity_capacity: u32,
    /// Entries of the fast path's exceptions (`EXCEPTIONS`, preallocated; never evicts).
    pub exceptions_capacity: u32,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            ct_capacity: defaults::CT_CAPACITY,
            ct_syn_capacity: defaults::CT_SYN_CAPACITY,
            frag_capacity: defaults::FRAG_CAPACITY,
            affinity_capacity: defaults::AFFINITY_CAPACITY,
            exceptions_capacity: defaults::EXCEPTIONS_CAPACITY,
        }
    }
}

/// How long the two parts of a load took (wall-clock time), for the daemon's start
/// breakdown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadTimes {
    /// Reading the object and creating its maps, or opening the pinned ones
    /// (`EbpfLoader::load`).
    pub maps: Duration,
    /// Verifying the programs and installing the tail-called ones; zero when an
    /// adopted datapath's programs were kept.
    pub programs: Duration,
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

/// Loads the programs the load balancer tail-calls, the rare paths' and the full one
/// (VLAN tags, first fragments), and puts them in their `RARE_PROGS` slots
/// (`lb_common::maps::RARE_PROGS`), replacing the entries an adopted datapath's earlier
/// programs left there. The kernel empties a program array when its last user
/// reference goes: the map's pin holds one (these programs keep running while no daemon
/// runs), the open descriptor in `ebpf` another (an unpinned data plane, as in the
/// tests).
fn install_rare_paths(ebpf: &mut Ebpf) -> Result<(), DataplaneError> {
    install_tail_call(ebpf, maps::RARE_PROGRAM, maps::RARE_PROGS, maps::RARE_SLOT)?;
    install_tail_call(ebpf, maps::FULL_PROGRAM, maps::RARE_PROGS, maps::FULL_SLOT)
}

/// Verifies the load balancer program and the programs it tail-calls, and puts the
/// latter in their program arrays (`RARE_PROGS`, `TRACE_PROGS`, pinned or not).
pub(super) fn load_programs(ebpf: &mut Ebpf) -> Result<(), DataplaneError> {
    verify_at_once(
        ebpf,
        &[
            maps::XDP_PROGRAM,
            maps::FULL_PROGRAM,
            maps::RARE_PROGRAM,
            maps::TRACE_PROGRAM,
        ],
    )?;
    install_rare_paths(ebpf)?;
    super::trace::load_trace_program(ebpf)
}

/// Loads the XDP programs `names` of the object, each on a thread of its own. The
/// kernel verifies a program on the thread that loads it; side by side the
/// verification takes about the longest program's time. The load balancer's four
/// programs took 0.9 s one after another on a 2-vCPU VM under load once their hashes,
/// next hop and send became global functions (4.4 s before: the book's performance
/// chapter, "The verifier's bill").
fn verify_at_once(ebpf: &mut Ebpf, names: &[&'static str]) -> Result<(), DataplaneError> {
    let mut programs: Vec<(&'static str, &mut Xdp)> = Vec::with_capacity(names.len());
    for (found, program) in ebpf.programs_mut() {
        if let Some(name) = names.iter().copied().find(|n| *n == found) {
            programs.push((name, program.try_into().map_err(prog_err(name))?));
        }
    }
    // The object's programs come in hash order; the error reported is the first of
    // `names` that failed, the same on every start.
    programs.sort_by_key(|(name, _)| names.iter().position(|n| n == name));
    if let Some(missing) = names
        .iter()
        .copied()
        .find(|n| !programs.iter().any(|(name, _)| name == n))
    {
        return Err(DataplaneError::Program {
            program: missing,
            error: ProgramError::NotLoaded,
        });
    }
    std::thread::scope(|scope| {
        let loads: Vec<_> = programs
            .into_iter()
            .map(|(name, program)| scope.spawn(move || program.load().map_err(load_err(name))))
            .collect();
        loads.into_iter().try_for_each(|load| {
            load.join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    })
}

/// A handle of its own on map `name` of `ebpf` ([`dup_fd`]).
fn reopen(ebpf: &Ebpf, name: &'static str) -> Result<MapData, DataplaneError> {
    MapData::from_fd(dup_fd(ebpf, name)?).map_err(map_err(name, "reopen"))
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

/// A pinned data plane to open: where, under which lock, and which object.
#[derive(Debug)]
pub struct Pinning {
    /// The interface's pin directory.
    pub dir: PinDir,
    /// Its lock, held by the caller.
    pub lock: PinLock,
    /// The eBPF object to load (the embedded one unless a test gives another build).
    pub object: &'static [u8],
}

/// How [`KernelDataplane::load_pinned`] found the pin directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Opened {
    /// Nothing was pinned: every map was created (and pinned) empty.
    Created {
        /// Pins of an earlier start that failed before describing itself, removed.
        leftovers: u64,
    },
    /// A compatible datapath was pinned: its maps are reused as they are.
    Adopted,
    /// A datapath of an older layout was pinned: it was migrated into this build's
    /// (`crate::pinned::migrate`), then adopted.
    Migrated(crate::pinned::migrate::Migration),
}

impl Opened {
    /// Whether a pinned datapath was adopted (migrated or not).
    pub fn adopted(&self) -> bool {
        matches!(self, Opened::Adopted | Opened::Migrated(_))
    }
}

/// Entries of each map laid out in CPU rows (`lb_common::maps::CPU_ROW_MAPS`): one row
/// per possible CPU (`/sys/devices/system/cpu/possible`).
///
/// # Errors
/// [`DataplaneError::Syscall`] when the possible CPUs cannot be read,
/// [`DataplaneError::OutOfRange`] when their rows overflow a map's size.
pub(crate) fn cpu_rows_entries() -> Result<u32, DataplaneError> {
    let cpus = aya::util::nr_cpus().map_err(|(op, error)| DataplaneError::Syscall {
        op: op.to_owned(),
        error,
    })?;
    u32::try_from(cpus)
        .ok()
        .and_then(maps::cpu_rows_entries)
        .ok_or_else(|| {
            DataplaneError::OutOfRange(format!(
                "{cpus} possible CPUs: their rows of {} elements overflow a map",
                maps::CPU_ROW_LEN
            ))
        })
}

/// The start-time sizes that the pinned maps must have: the configuration's, and the
/// CPU rows' ([`cpu_rows_entries`]).
///
/// # Errors
/// As [`cpu_rows_entries`].
pub(crate) fn size_overrides(options: &LoadOptions) -> Result<Vec<SizeOverride>, DataplaneError> {
    let rows = cpu_rows_entries()?;
    let mut overrides = vec![
        SizeOverride {
            map: maps::CONNTRACK_V4,
            key: "conntrack.capacity",
            entries: options.ct_capacity,
        },
        SizeOverride {
            map: maps::CONNTRACK_V6,
            key: "conntrack.capacity",
            entries: options.ct_capacity,
        },
        SizeOverride {
            map: maps::SYN_CACHE,
            key: "conntrack.syn_capacity",
            entries: options.ct_syn_capacity,
        },
        SizeOverride {
            map: maps::FRAGMENTS,
            key: "conntrack.fragment_capacity",
            entries: options.frag_capacity,
        },
        SizeOverride {
            map: maps::AFFINITY,
            key: "conntrack.persistence_capacity",
            entries: options.affinity_capacity,
        },
        SizeOverride {
            map: maps::EXCEPTIONS,
            key: "conntrack.exceptions_capacity",
            entries: options.exceptions_capacity,
        },
    ];
    overrides.extend(maps::CPU_ROW_MAPS.map(|map| SizeOverride {
        map,
        key: "the possible CPUs (a row each)",
        entries: rows,
    }));
    Ok(overrides)
}

/// Eight random bytes (`getrandom(2)`), for a datapath's instance id.
fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most 8 bytes into `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 8 {
        // No entropy source: the time is unique enough to tell two datapaths apart.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        return u64::try_from(t.as_nanos() & u128::from(u64::MAX)).unwrap_or(0);
    }
    u64::from_le_bytes(b)
}

impl KernelDataplane {
    /// Opens the pinned data plane of `pinning.dir`: adopts it when its layout is this
    /// object's with `options`' sizes (the maps, conntrack and counters included, are
    /// reused; the table buffers and epoch counter resume), creates and pins it when
    /// nothing is pinned, and refuses otherwise, naming the differences and leaving
    /// the pinned datapath untouched. The programs are loaded unless an adopted
    /// datapath runs this object's already (see `super::programs`); they reach the
    /// interface through [`crate::Dataplane::attach`], which replaces the
    /// program of a pinned link atomically.
    ///
    /// # Errors
    /// [`DataplaneError::Pin`] for an incompatible layout or a pin that cannot be used;
    /// load errors as [`Self::load`].
    pub fn load_pinned(
        options: LoadOptions,
        pinning: Pinning,
    ) -> Result<(Self, Opened), DataplaneError> {
        let Pinning { dir, lock, object } = pinning;
        let layout =
            Layout::of_object(object).map_err(|e| DataplaneError::OutOfRange(e.to_string()))?;
        let overrides = size_overrides(&options)?;
        let migration = crate::pinned::migrate::migrate(&dir, &layout, &overrides)?;
        let meta = dir.check(&layout, &overrides)?;
        let mut opened = migration.map_or(Opened::Adopted, Opened::Migrated);
        if meta.is_none() {
            let leftovers = if dir.exists() {
                dir.discard(false)?.pins
            } else {
                0
            };
            opened = Opened::Created { leftovers };
        }
        let digest = super::programs::object_digest(object);
        let mut keep_programs = false;
        if meta.is_some() {
            match super::programs::keeps(&dir, &digest) {
                Ok(()) => keep_programs = true,
                Err(reason) => {
                    tracing::info!("loading the programs, not keeping the running ones: {reason}");
                    super::programs::withdraw(&dir).map_err(|error| DataplaneError::Syscall {
                        op: format!("removing {}", dir.shown().join("programs").display()),
                        error,
                    })?;
                }
            }
        }
        let names: Vec<String> = layout.maps.iter().map(|m| m.name.clone()).collect();
        let paths: Vec<std::path::PathBuf> = names.iter().map(|n| dir.map(n)).collect();
        let mut loader = EbpfLoader::new();
        for (name, path) in names.iter().zip(&paths) {
            loader.map_pin_path(name.as_str(), path.as_path());
        }
        let (ebpf, times) =
            match Self::load_object_timed(&options, &mut loader, object, !keep_programs) {
                Ok(loaded) => loaded,
                Err(e) => {
                    // Maps this start created (and pinned) must not outlive the failure:
                    // two conntrack maps of 1M entries hold about 100 MB of kernel memory.
                    if meta.is_none() {
                        let _ = dir.discard(false);
                    }
                    return Err(e);
                }
            };
        let meta = match meta {
            Some(meta) => meta,
            None => MetaMap::create(
                &dir.meta(),
                Meta {
                    format: layout::FORMAT,
                    layout_version: maps::LAYOUT_VERSION,
                    digest: layout.digest,
                    instance: random_u64(),
                    epoch: 0,
                    attach_mode: 0,
                },
            )
            .map_err(|error| DataplaneError::Syscall {
                op: format!("creating {}", dir.shown().join("meta").display()),
                error,
            })?,
        };
        let pins = TablePins {
            dir: dir.path().join("tables"),
            meta,
        };
        let created = !opened.adopted();
        let mut dp = Self::from_ebpf(ebpf, options, Some(pins), created)?;
        dp.load_times = times;
        if opened.adopted() {
            dp.adopt_maps()?;
        }
        dp.pinned = Some(Pinned {
            adopted: opened.adopted(),
            dir,
            lock,
            link: None,
            object: digest,
            kept_programs: keep_programs,
            keeper: crate::pinned::PinKeeper::default(),
        });
        Ok((dp, opened))
    }

    /// How long [`Self::load_pinned`]'s load took: its maps created or opened, its
    /// programs verified (zero for a data plane loaded otherwise).
    pub fn load_times(&self) -> LoadTimes {
        self.load_times
    }

    /// Opens the datapath pinned at `dir` for reading while no daemon runs (`lb
    /// status`, `lb stats`, `lb flow`, `lb conn list` answering from the pins): every
    /// map is reopened from its pin, no program is loaded, no lock is taken and nothing
    /// is written. The conntrack and SYN cache sizes are the pinned maps'. Only use the
    /// reading methods of the result: a write would change the running datapath.
    ///
    /// # Errors
    /// [`DataplaneError::OutOfRange`] when nothing is pinned at `dir` or a map's pin is
    /// missing; [`DataplaneError::Pin`] for a datapath of another build's layout.
    pub fn open_read_only(dir: PinDir) -> Result<Self, DataplaneError> {
        let object = crate::EBPF_OBJECT;
        let layout =
            Layout::of_object(object).map_err(|e| DataplaneError::OutOfRange(e.to_string()))?;
        let size = |name: &str| -> Result<u32, DataplaneError> {
            let path = dir.map(name);
            let fd = crate::bpf_sys::open_pinned(&path)
                .map_err(crate::syscall_err(format!("opening {}", path.display())))?
                .ok_or_else(|| {
                    DataplaneError::OutOfRange(format!(
                        "no pinned datapath at {} (map {name} is not pinned)",
                        dir.shown().display()
                    ))
                })?;
            let info = crate::bpf_sys::map_info(fd.as_fd())
                .map_err(crate::syscall_err(format!("examining {}", path.display())))?;
            Ok(info.max_entries)
        };
        let options = LoadOptions {
            ct_capacity: size(maps::CONNTRACK_V4)?,
            ct_syn_capacity: size(maps::SYN_CACHE)?,
            frag_capacity: size(maps::FRAGMENTS)?,
            affinity_capacity: size(maps::AFFINITY)?,
            exceptions_capacity: size(maps::EXCEPTIONS)?,
        };
        let meta = dir
            .check(&layout, &size_overrides(&options)?)?
            .ok_or_else(|| {
                DataplaneError::OutOfRange(format!(
                    "no pinned datapath at {} (no meta)",
                    dir.shown().display()
                ))
            })?;
        let mut loader = EbpfLoader::new();
        let paths: Vec<(String, std::path::PathBuf)> = layout
            .maps
            .iter()
            .map(|m| (m.name.clone(), dir.map(&m.name)))
            .collect();
        if let Some((name, _)) = paths.iter().find(|(_, path)| !path.exists()) {
            // The loader would create and pin it: a reader writes nothing.
            return Err(DataplaneError::OutOfRange(format!(
                "the datapath pinned at {} lacks map {name}",
                dir.shown().display()
            )));
        }
        for (name, path) in &paths {
            loader.map_pin_path(name.as_str(), path.as_path());
        }
        let ebpf = Self::load_object(&options, &mut loader, object, false)?;
        let pins = TablePins {
            dir: dir.path().join("tables"),
            meta,
        };
        let mut dp = Self::from_ebpf(ebpf, options, Some(pins), false)?;
        dp.adopt_maps_as(false)?;
        let lock = dir.reader()?;
        dp.pinned = Some(Pinned {
            adopted: true,
            dir,
            lock,
            link: None,
            object: super::programs::object_digest(object),
            kept_programs: true,
            keeper: crate::pinned::PinKeeper::default(),
        });
        Ok(dp)
    }

    /// Reads back what the adopted maps hold that this handle tracks: the table
    /// buffers, the VIPs (for `VIP_FILTER` and `VIP_ADDRS` bookkeeping), the allowed
    /// source prefixes, and the configuration last written, whose trace bit
    /// (`CONFIG_TRACE`, set when the last daemon stopped during an `lb trace`) is
    /// cleared.
    fn adopt_maps(&mut self) -> Result<(), DataplaneError> {
        self.adopt_maps_as(true)
    }

    /// [`Self::adopt_maps`]; a reader (`owner` false) leaves the trace bit alone.
    fn adopt_maps_as(&mut self, owner: bool) -> Result<(), DataplaneError> {
        let entries = {
            let mut tables = super::lock(&self.tables);
            tables.adopt()?;
            tables.vip_entries()?
        };
        self.vip_keys = entries.iter().map(|(k, e)| (*k, e.vip_id)).collect();
        self.fast_keys = entries
            .iter()
            .filter(|(_, e)| e.flags & lb_common::types::VIP_FAST_PATH != 0)
            .map(|(k, _)| *k)
            .collect();
        self.sources.adopt(&self.vip_keys)?;
        let config: LbConfig = self
            .config
            .get(&0, 0)
            .map_err(map_err(maps::CONFIG, "lookup"))?;
        let untraced = LbConfig {
            flags: config.flags & !CONFIG_TRACE,
            ..config
        };
        if owner && untraced != config {
            // The last daemon stopped during an `lb trace` session: no client of this
            // one listens, so the program stops tracing.
            self.config
                .set(0, untraced, 0)
                .map_err(map_err(maps::CONFIG, "update"))?;
        }
        let config = untraced;
        self.written_config = (config.flags & CONFIG_VALID != 0).then_some(config);
        Ok(())
    }

    /// Loads the embedded object ([`crate::EBPF_OBJECT`]) with the conntrack sizes of
    /// `options`, verifies the load balancer program and the programs it tail-calls (the
    /// rare paths, the full program), and links them to it.
    ///
    /// # Errors
    /// [`DataplaneError::Load`] when the object or a map cannot be created (for example
    /// without `CAP_BPF`), [`DataplaneError::Rejected`] when the kernel refuses a program.
    pub fn load(options: LoadOptions) -> Result<Self, DataplaneError> {
        let ebpf = Self::load_object(&options, &mut EbpfLoader::new(), crate::EBPF_OBJECT, true)?;
        Self::from_ebpf(ebpf, options, None, true)
    }

    /// [`Self::load`] of another build of the object (`cargo xtask bench`'s
    /// comparisons of two builds of the program).
    ///
    /// # Errors
    /// As [`Self::load`].
    #[cfg(feature = "test-harness")]
    pub fn load_object_bytes(options: LoadOptions, object: &[u8]) -> Result<Self, DataplaneError> {
        let ebpf = Self::load_object(&options, &mut EbpfLoader::new(), object, true)?;
        Self::from_ebpf(ebpf, options, None, true)
    }

    /// Loads `object` with `loader` (its pins, if any) and the sizes of `options`,
    /// and, with `programs`, its programs ([`load_programs`]).
    pub(super) fn load_object(
        options: &LoadOptions,
        loader: &mut EbpfLoader<'_>,
        object: &[u8],
        programs: bool,
    ) -> Result<Ebpf, DataplaneError> {
        Self::load_object_timed(options, loader, object, programs).map(|(ebpf, _)| ebpf)
    }

    /// [`Self::load_object`], and how long its two parts took.
    fn load_object_timed(
        options: &LoadOptions,
        loader: &mut EbpfLoader<'_>,
        object: &[u8],
        programs: bool,
    ) -> Result<(Ebpf, LoadTimes), DataplaneError> {
        if !options.ct_syn_capacity.is_power_of_two() {
            return Err(DataplaneError::OutOfRange(format!(
                "SYN cache slots {} is not a power of two",
                options.ct_syn_capacity
            )));
        }
        let started = Instant::now();
        let rows = cpu_rows_entries()?;
        for map in maps::CPU_ROW_MAPS {
            loader.map_max_entries(map, rows);
        }
        let mut ebpf = loader
            .map_max_entries(maps::CONNTRACK_V4, options.ct_capacity)
            .map_max_entries(maps::CONNTRACK_V6, options.ct_capacity)
            .map_max_entries(maps::SYN_CACHE, options.ct_syn_capacity)
            .map_max_entries(maps::FRAGMENTS, options.frag_capacity)
            .map_max_entries(maps::AFFINITY, options.affinity_capacity)
            .map_max_entries(maps::EXCEPTIONS, options.exceptions_capacity)
            .load(object)
            .map_err(DataplaneError::Load)?;
        let mut times = LoadTimes {
            maps: started.elapsed(),
            programs: Duration::ZERO,
        };
        if programs {
            let verifying = Instant::now();
            load_programs(&mut ebpf)?;
            times.programs = verifying.elapsed();
        }
        Ok((ebpf, times))
    }

    /// The data plane over a loaded object; `created`: its maps were created by this
    /// load, not adopted.
    fn from_ebpf(
        mut ebpf: Ebpf,
        options: LoadOptions,
        pins: Option<TablePins>,
        created: bool,
    ) -> Result<Self, DataplaneError> {
        // Handles on TABLES and TABLES_STD, from duplicates of their fds: reopening them
        // by id (BPF_MAP_GET_FD_BY_ID) would need CAP_SYS_ADMIN, which `lb run` needs
        // for nothing else (dist/systemd/lb.service grants CAP_BPF, CAP_NET_ADMIN,
        // CAP_PERFMON).
        let outers = Outers {
            any: Outer::new(maps::TABLES, reopen(&ebpf, maps::TABLES)?),
            std: Outer::new(maps::TABLES_STD, reopen(&ebpf, maps::TABLES_STD)?),
        };
        let walker = super::ConntrackWalker::new(
            dup_fd(&ebpf, maps::CONNTRACK_V4)?,
            dup_fd(&ebpf, maps::CONNTRACK_V6)?,
            dup_fd(&ebpf, maps::SYN_CACHE)?,
        )
        .with_affinity(
            dup_fd(&ebpf, maps::AFFINITY)?,
            dup_fd(&ebpf, maps::AFFINITY_TIMEOUT)?,
            dup_fd(&ebpf, maps::VIPS)?,
        )
        .with_exceptions(dup_fd(&ebpf, maps::EXCEPTIONS)?);
        let cleaner_fds = [
            dup_fd(&ebpf, maps::CONNTRACK_V4)?,
            dup_fd(&ebpf, maps::CONNTRACK_V6)?,
            dup_fd(&ebpf, maps::SYN_CACHE)?,
            dup_fd(&ebpf, maps::BACKENDS)?,
            dup_fd(&ebpf, maps::CONFIG)?,
            dup_fd(&ebpf, maps::EXCEPTIONS)?,
        ];
        let vip_cache = crate::vip_cache::VipCache::new(dup_fd(&ebpf, maps::VIP_CACHE)?.as_fd())
            .map_err(crate::syscall_err(format!("mapping {}", maps::VIP_CACHE)))?;
        let tables = TableSet::new(
            outers,
            take(&mut ebpf, maps::VIPS)?,
            take(&mut ebpf, maps::VIP_INFO)?,
            take(&mut ebpf, maps::AFFINITY_TIMEOUT)?,
            vip_cache,
            pins,
        );
        let tables = Arc::new(Mutex::new(tables));
        let cleaner = super::Cleaner::new(Arc::clone(&tables), cleaner_fds);
        let sources = SourceMaps::new(
            take(&mut ebpf, maps::SOURCE_RANGES)?,
            take(&mut ebpf, maps::SOURCE_FILTER)?,
            take(&mut ebpf, maps::SOURCE_RESTRICTED)?,
        );
        let trace_reader = Some(super::TraceReader::new(&mut ebpf)?);
        let activity = super::ActivityClock::new(take(&mut ebpf, maps::ACTIVITY_TICK)?);
        let syn_cpu_part_bits = syn_cache_parts(options.ct_syn_capacity)?;
        Ok(Self {
            walker: Some(walker),
            cleaner: Some(cleaner),
            activity: Some(activity),
            trace_filter: take(&mut ebpf, maps::TRACE_FILTER)?,
            tracing: false,
            trace_reader,
            config: take(&mut ebpf, maps::CONFIG)?,
            vip_addrs: take(&mut ebpf, maps::VIP_ADDRS)?,
            vip_filter: take(&mut ebpf, maps::VIP_FILTER)?,
            fast_filter: take(&mut ebpf, maps::FAST_FILTER)?,
            fast_keys: std::collections::HashSet::new(),
            tables,
            backends: take(&mut ebpf, maps::BACKENDS)?,
            conntrack_v4: take(&mut ebpf, maps::CONNTRACK_V4)?,
            conntrack_v6: take(&mut ebpf, maps::CONNTRACK_V6)?,
            syn_cache: take(&mut ebpf, maps::SYN_CACHE)?,
            exceptions: take(&mut ebpf, maps::EXCEPTIONS)?,
            affinity: take(&mut ebpf, maps::AFFINITY)?,
            syn_slots: options.ct_syn_capacity,
            syn_part_bits: syn_cpu_part_bits,
            syn_cpu_part_bits,
            written_config: None,
            global_stats: take(&mut ebpf, maps::GLOBAL_STATS)?,
            vip_stats: take(&mut ebpf, maps::VIP_STATS)?,
            backend_stats: take(&mut ebpf, maps::BACKEND_STATS)?,
            zeroed: super::counters::ZeroedIds::new(created),
            ebpf,
            link: None,
            probe_link: None,
            vip_keys: StdHashMap::new(),
            sources,
            pinned: None,
            load_times: LoadTimes::default(),
        })
    }
}

/// `LbConfig::syn_cache_part_bits` for a SYN cache of `slots` slots on this machine: one
/// part per possible CPU ([`lb_common::syn_cache::part_bits`]).
///
/// # Errors
/// When the possible CPUs cannot be read (`/sys/devices/system/cpu/possible`).
fn syn_cache_parts(slots: u32) -> Result<u8, DataplaneError> {
    let cpus = super::counters::possible_cpus()?;
    Ok(lb_common::syn_cache::part_bits(
        slots,
        u32::try_from(cpus).unwrap_or(u32::MAX),
    ))
}

#[cfg(test)]
mod tests {
    use super::{VERIFIER_TAIL_LINES, log_tail};

    #[test]
    fn a_verifier_log_keeps_its_reason_and_counts() {
        let mut log: String = (0..5_000).map(|i| format!("{i}: (b7) r0 = 0\n")).collect();
        log.push_str("R0 tried to add from different maps, paths or scalars\n\n");
        log.push_str("verification time 1246 usec\nstack depth 0+80\n");
        log.push_str("processed 50 insns (limit 1000000) max_states_per_insn 1\n");
        let tail = log_tail(&log);
        assert_eq!(tail.split(" / ").count(), VERIFIER_TAIL_LINES);
        assert!(
            tail.starts_with("4998: (b7) r0 = 0 / 4999: (b7) r0 = 0 / R0 tried"),
            "{tail}"
        );
        assert!(tail.ends_with("max_states_per_insn 1"), "{tail}");
        assert_eq!(log_tail(""), "");
        assert_eq!(log_tail("one line\n"), "one line");
    }
}
