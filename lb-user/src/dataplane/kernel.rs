//! [`KernelDataplane`]: the XDP program loaded into the kernel with aya, its maps, and
//! `BPF_PROG_TEST_RUN` access for fixtures and benchmarks.

use std::{
    collections::HashMap as StdHashMap,
    sync::{Arc, Mutex},
};

use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, HashMap, MapData, MapError, PerCpuArray, ProgramArray},
    programs::{ProgramError, TestRun as _, TestRunOptions, Xdp, XdpMode, xdp::XdpLinkId},
};
use lb_common::{
    conntrack::{self, Decision},
    hash::{flow_hash, vip_filter_bit},
    maps::{self, MAX_BACKENDS, MAX_TABLE_SIZE, MAX_VIPS},
    stats::{BackendStats, GlobalStats, VipStats},
    types::{
        BACKEND_ACTIVE, BACKEND_DRAINING, BENCH_FRAME_MAX, BackendEntry, BenchFrame, CtEntry,
        FAMILY_V4, FlowKey, FlowKey4, LbConfig, SynEntry, VipAddrKey, VipEntry, VipKey,
    },
};

use super::{
    AttachMode, CtTable, Dataplane, DataplaneError, InstalledTable, TableImage, tables::TableSet,
};

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
            ct_capacity: maps::DEFAULT_CT_CAPACITY,
            ct_syn_capacity: maps::DEFAULT_CT_SYN_CAPACITY,
        }
    }
}

/// Result of one `BPF_PROG_TEST_RUN` invocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestRunOutput {
    /// XDP action returned (`XDP_ABORTED` 0, `XDP_DROP` 1, `XDP_PASS` 2, `XDP_TX` 3,
    /// `XDP_REDIRECT` 4).
    pub action: u32,
    /// The frame as the program left it.
    pub data: Vec<u8>,
    /// Mean run time per repetition in nanoseconds, as measured by the kernel.
    pub duration_ns: u64,
}

/// The program a benchmark run tail-calls after restoring the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchTarget {
    /// The load balancer (`lb_xdp`).
    LoadBalancer,
    /// The empty reference program (`lb_empty`).
    Empty,
}

/// Bytes of headroom a test run's output buffer leaves for headers the program pushes.
const TEST_RUN_OUT_SLACK: usize = 256;

/// The loaded XDP program and its maps.
pub struct KernelDataplane {
    ebpf: Ebpf,
    link: Option<XdpLinkId>,
    config: Array<MapData, LbConfig>,
    vip_addrs: HashMap<MapData, VipAddrKey, u32>,
    vip_filter: Array<MapData, u64>,
    tables: Arc<Mutex<TableSet>>,
    backends: Array<MapData, BackendEntry>,
    conntrack_v4: HashMap<MapData, FlowKey4, CtEntry>,
    conntrack_v6: HashMap<MapData, FlowKey, CtEntry>,
    syn_cache: Array<MapData, SynEntry>,
    /// Slots of `syn_cache`.
    syn_slots: u32,
    /// The configuration last written (its hash seed locates SYN cache slots).
    written_config: Option<LbConfig>,
    global_stats: PerCpuArray<MapData, GlobalStats>,
    vip_stats: PerCpuArray<MapData, VipStats>,
    backend_stats: PerCpuArray<MapData, BackendStats>,
    bench_frame: Array<MapData, BenchFrame>,
    bench_progs: ProgramArray<MapData>,
    /// VIPs written, to keep `VIP_ADDRS` counts exact.
    vip_keys: StdHashMap<VipKey, VipEntry>,
}

fn map_err(map: &'static str, op: &'static str) -> impl FnOnce(MapError) -> DataplaneError {
    move |error| DataplaneError::Map { map, op, error }
}

fn prog_err(program: &'static str) -> impl FnOnce(ProgramError) -> DataplaneError {
    move |error| DataplaneError::Program { program, error }
}

/// Takes map `name` out of the object as the typed map `T`.
fn take<T>(ebpf: &mut Ebpf, name: &'static str) -> Result<T, DataplaneError>
where
    T: TryFrom<aya::maps::Map, Error = MapError>,
{
    let map = ebpf
        .take_map(name)
        .ok_or(DataplaneError::MissingMap(name))?;
    T::try_from(map).map_err(map_err(name, "open"))
}

fn xdp<'a>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut Xdp, DataplaneError> {
    let prog = ebpf.program_mut(name).ok_or(DataplaneError::Program {
        program: name,
        error: ProgramError::NotLoaded,
    })?;
    prog.try_into().map_err(prog_err(name))
}

/// The address key counted in `VIP_ADDRS` for a VIP.
fn addr_key(key: &VipKey) -> VipAddrKey {
    VipAddrKey {
        addr: key.addr,
        family: key.family,
        _pad: [0; 3],
    }
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
        let tables_id = match ebpf.map(maps::TABLES) {
            Some(aya::maps::Map::ArrayOfMaps(data)) => {
                data.info().map_err(map_err(maps::TABLES, "info"))?.id()
            }
            _ => return Err(DataplaneError::MissingMap(maps::TABLES)),
        };
        let tables_raw = MapData::from_id(tables_id).map_err(map_err(maps::TABLES, "reopen"))?;
        let tables = TableSet::new(
            take(&mut ebpf, maps::TABLES)?,
            tables_raw,
            take(&mut ebpf, maps::VIPS)?,
            take(&mut ebpf, maps::VIP_INFO)?,
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
            bench_frame: take(&mut ebpf, maps::BENCH_FRAME)?,
            bench_progs: take(&mut ebpf, maps::BENCH_PROGS)?,
            ebpf,
            link: None,
            vip_keys: StdHashMap::new(),
        })
    }

    /// A second handle on the tables, usable from another thread.
    pub fn table_writer(&self) -> TableWriter {
        TableWriter {
            tables: Arc::clone(&self.tables),
        }
    }

    /// RCU grace periods waited for by table changes so far.
    pub fn grace_periods(&self) -> u64 {
        lock(&self.tables).grace_periods()
    }

    /// Whether the program is attached by this handle.
    pub fn is_attached(&self) -> bool {
        self.link.is_some()
    }

    /// Runs the load balancer once on `frame` with `BPF_PROG_TEST_RUN`.
    ///
    /// # Errors
    /// [`DataplaneError::Program`] when the kernel refuses the run.
    pub fn test_run(&mut self, frame: &[u8]) -> Result<TestRunOutput, DataplaneError> {
        self.test_run_with(frame, None, 1)
    }

    /// Runs the load balancer `repeat` times on `frame`, with the context's ingress
    /// interface set to `ingress_ifindex` (an interface of the calling thread's network
    /// namespace; default: loopback). The kernel reuses one buffer, so from the second
    /// repetition an encapsulating run sees its own output: use [`Self::bench_run`] for
    /// timing.
    ///
    /// # Errors
    /// [`DataplaneError::Program`] when the kernel refuses the run.
    pub fn test_run_with(
        &mut self,
        frame: &[u8],
        ingress_ifindex: Option<u32>,
        repeat: u32,
    ) -> Result<TestRunOutput, DataplaneError> {
        run_program(
            &mut self.ebpf,
            maps::XDP_PROGRAM,
            frame,
            ingress_ifindex,
            repeat,
        )
    }

    /// Times `target` with the benchmark harness: `lb_bench` restores `frame` (exactly
    /// `BENCH_FRAME_MAX` bytes) before every one of `repeat` repetitions, stamps a
    /// counter (continued from the previous run) at `vary_offset` when it is non-zero,
    /// and tail-calls `target`. The
    /// context's ingress interface is `ingress_ifindex` (see [`Self::test_run_with`]).
    ///
    /// # Errors
    /// [`DataplaneError::OutOfRange`] for a frame of another length; program or map
    /// failures.
    pub fn bench_run(
        &mut self,
        target: BenchTarget,
        frame: &[u8],
        vary_offset: u32,
        ingress_ifindex: Option<u32>,
        repeat: u32,
    ) -> Result<TestRunOutput, DataplaneError> {
        let bytes: [u8; BENCH_FRAME_MAX] = frame.try_into().map_err(|_| {
            DataplaneError::OutOfRange(format!(
                "benchmark frames must be exactly {BENCH_FRAME_MAX} bytes, got {}",
                frame.len()
            ))
        })?;
        for name in [maps::EMPTY_PROGRAM, maps::BENCH_PROGRAM] {
            let prog = xdp(&mut self.ebpf, name)?;
            if prog.fd().is_err() {
                prog.load().map_err(prog_err(name))?;
            }
        }
        let target_name = match target {
            BenchTarget::LoadBalancer => maps::XDP_PROGRAM,
            BenchTarget::Empty => maps::EMPTY_PROGRAM,
        };
        let fd = xdp(&mut self.ebpf, target_name)?
            .fd()
            .map_err(prog_err(target_name))?
            .try_clone()
            .map_err(|error| DataplaneError::Syscall {
                op: format!("dup fd of {target_name}"),
                error,
            })?;
        self.bench_progs
            .set(0, &fd, 0)
            .map_err(map_err(maps::BENCH_PROGS, "update"))?;
        // The per-repetition counter continues across runs, so that flows varied by it
        // stay new in every run.
        let counter = self.bench_frame.get(&0, 0).map_or(0, |f| f.counter);
        let frame = BenchFrame {
            vary_offset,
            counter,
            bytes,
        };
        self.bench_frame
            .set(0, frame, 0)
            .map_err(map_err(maps::BENCH_FRAME, "update"))?;
        run_program(
            &mut self.ebpf,
            maps::BENCH_PROGRAM,
            &bytes,
            ingress_ifindex,
            repeat,
        )
    }

    /// Instructions the verifier processed for program `name` (`verified_insns`,
    /// kernel 5.16+).
    ///
    /// # Errors
    /// When the program is unknown or its info cannot be read.
    pub fn verified_instructions(
        &mut self,
        name: &'static str,
    ) -> Result<Option<u32>, DataplaneError> {
        let info = xdp(&mut self.ebpf, name)?.info().map_err(prog_err(name))?;
        Ok(info.verified_instruction_count())
    }

    /// Installs a table map whose entries, header included, are `raw` verbatim, without
    /// any validation: for tests of the data plane's guards against a corrupt table (a
    /// size field of 0 or larger than the map). The controller never calls it.
    ///
    /// # Errors
    /// Failures creating, filling or swapping the map.
    #[doc(hidden)]
    pub fn install_raw_table(&mut self, vip_id: u32, raw: &[u32]) -> Result<(), DataplaneError> {
        check_vip_id(vip_id)?;
        lock(&self.tables).install_raw(vip_id, raw)
    }

    /// Removes one flow from the `SYN_CACHE` and from its family's conntrack map
    /// (operator tooling and tests). The slot goes first: an ACK in between could
    /// otherwise promote it again.
    ///
    /// # Errors
    /// Map failures other than "not found".
    pub fn delete_flow(&mut self, key: &FlowKey) -> Result<(), DataplaneError> {
        if let Some((index, _)) = self.held_syn(key)? {
            self.syn_cache
                .set(index, SynEntry::default(), 0)
                .map_err(map_err(maps::SYN_CACHE, "update"))?;
        }
        let removed = if key.vip.family == FAMILY_V4 {
            self.conntrack_v4
                .remove(&key.v4())
                .map_err(|e| (maps::CONNTRACK_V4, e))
        } else {
            self.conntrack_v6
                .remove(key)
                .map_err(|e| (maps::CONNTRACK_V6, e))
        };
        match removed {
            Ok(()) | Err((_, MapError::KeyNotFound)) => Ok(()),
            Err((_, MapError::SyscallError(e)))
                if e.io_error.raw_os_error() == Some(libc::ENOENT) =>
            {
                Ok(())
            }
            Err((name, e)) => Err(map_err(name, "delete")(e)),
        }
    }

    /// Empties both conntrack maps and the `SYN_CACHE`.
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
        flush(&mut self.conntrack_v4, maps::CONNTRACK_V4)?;
        flush(&mut self.conntrack_v6, maps::CONNTRACK_V6)
    }

    /// Number of (established flows in both conntrack maps, SYN-only flows held in
    /// `SYN_CACHE` slots).
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

    /// The `SYN_CACHE` index and element holding a SYN of `key`, if any (under the hash
    /// seed last written, which the daemon never changes while running).
    fn held_syn(&self, key: &FlowKey) -> Result<Option<(u32, SynEntry)>, DataplaneError> {
        let Some(cfg) = self.written_config.as_ref() else {
            return Ok(None);
        };
        let hash = flow_hash(key, cfg.hash_seed);
        let index = hash & (self.syn_slots - 1);
        let slot = self
            .syn_cache
            .get(&index, 0)
            .map_err(map_err(maps::SYN_CACHE, "lookup"))?;
        Ok((u32::from(slot.vip_id) < MAX_VIPS && slot.holds(key, hash)).then_some((index, slot)))
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
        match map.remove(&key) {
            Ok(()) | Err(MapError::KeyNotFound) => {}
            Err(MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(map_err(name, "delete")(e)),
        }
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

fn nr_cpus() -> Result<usize, DataplaneError> {
    aya::util::nr_cpus().map_err(|(op, error)| DataplaneError::Syscall {
        op: op.to_owned(),
        error,
    })
}

fn per_cpu_values<T: aya::Pod>(
    values: Vec<T>,
) -> Result<aya::maps::PerCpuValues<T>, DataplaneError> {
    aya::maps::PerCpuValues::try_from(values).map_err(|error| DataplaneError::Syscall {
        op: "per-CPU values".to_owned(),
        error,
    })
}

fn run_program(
    ebpf: &mut Ebpf,
    name: &'static str,
    frame: &[u8],
    ingress_ifindex: Option<u32>,
    repeat: u32,
) -> Result<TestRunOutput, DataplaneError> {
    let mut out = vec![0u8; frame.len() + TEST_RUN_OUT_SLACK];
    // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index,
    // egress_ifindex (u32 each); data_end must equal the frame length.
    let ctx: Option<Vec<u8>> = ingress_ifindex.map(|ifindex| {
        let len = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        [0, len, 0, ifindex, 0, 0]
            .iter()
            .flat_map(|v: &u32| v.to_ne_bytes())
            .collect()
    });
    let prog = xdp(ebpf, name)?;
    let mut opts = TestRunOptions::new();
    opts.data_in = Some(frame);
    opts.data_out = Some(&mut out);
    opts.ctx_in = ctx.as_deref();
    opts.repeat = repeat;
    let result = prog.test_run(opts).map_err(prog_err(name))?;
    out.truncate(result.data_size_out as usize);
    Ok(TestRunOutput {
        action: result.return_value,
        data: out,
        duration_ns: u64::try_from(result.duration.as_nanos()).unwrap_or(u64::MAX),
    })
}

/// The empty XDP program (`lb_empty`, returns `XDP_PASS`) attached to an interface,
/// detached on drop. Attached to the veth peer of the load balancer's interface, it gives
/// that peer the NAPI context without which frames sent with `XDP_TX` on a veth are
/// dropped (../shared/cases BR-24).
pub struct PassProgram {
    ebpf: Ebpf,
    link: Option<XdpLinkId>,
}

impl PassProgram {
    /// Loads `lb_empty` (with minimal conntrack maps) and attaches it to `iface` in
    /// native mode.
    ///
    /// # Errors
    /// When loading or attaching fails.
    pub fn attach(iface: &str) -> Result<Self, DataplaneError> {
        let mut ebpf = EbpfLoader::new()
            .map_max_entries(maps::CONNTRACK_V4, 64)
            .map_max_entries(maps::CONNTRACK_V6, 64)
            .map_max_entries(maps::SYN_CACHE, 64)
            .load(crate::EBPF_OBJECT)
            .map_err(DataplaneError::Load)?;
        let prog = xdp(&mut ebpf, maps::EMPTY_PROGRAM)?;
        prog.load().map_err(prog_err(maps::EMPTY_PROGRAM))?;
        let link = prog
            .attach(iface, XdpMode::Driver)
            .map_err(prog_err(maps::EMPTY_PROGRAM))?;
        Ok(Self {
            ebpf,
            link: Some(link),
        })
    }
}

impl Drop for PassProgram {
    fn drop(&mut self) {
        if let (Some(link), Ok(prog)) = (self.link.take(), xdp(&mut self.ebpf, maps::EMPTY_PROGRAM))
        {
            let _ = prog.detach(link);
        }
    }
}

/// A second handle on the tables (shared with the [`KernelDataplane`] it came from),
/// to install tables from another thread while the first runs packets.
pub struct TableWriter {
    tables: Arc<Mutex<TableSet>>,
}

impl TableWriter {
    /// Installs `table` as VIP `vip_id`'s table (see [`Dataplane::install_table`]).
    ///
    /// # Errors
    /// As [`Dataplane::install_table`].
    pub fn install_table(
        &mut self,
        vip_id: u32,
        table: &TableImage<'_>,
    ) -> Result<(), DataplaneError> {
        check_table(vip_id, table)?;
        lock(&self.tables).install(vip_id, table)
    }
}

fn lock(tables: &Mutex<TableSet>) -> std::sync::MutexGuard<'_, TableSet> {
    tables
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn check_table(vip_id: u32, table: &TableImage<'_>) -> Result<(), DataplaneError> {
    check_vip_id(vip_id)?;
    let size = u32::try_from(table.slots.len()).unwrap_or(u32::MAX);
    if size == 0 || size > MAX_TABLE_SIZE {
        return Err(DataplaneError::OutOfRange(format!(
            "table size {size} is outside 1..={MAX_TABLE_SIZE}"
        )));
    }
    Ok(())
}

/// Element `index` of a per-CPU counter array, summed over the CPUs.
fn sum_per_cpu<T: aya::Pod + Default>(
    map: &PerCpuArray<MapData, T>,
    index: u32,
    name: &'static str,
    accumulate: fn(&mut T, &T),
) -> Result<T, DataplaneError> {
    let per_cpu = map.get(&index, 0).map_err(map_err(name, "lookup"))?;
    let mut total = T::default();
    per_cpu.iter().for_each(|v| accumulate(&mut total, v));
    Ok(total)
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

impl Dataplane for KernelDataplane {
    fn attach(&mut self, iface: &str, mode: AttachMode) -> Result<(), DataplaneError> {
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
        let link = self.link.take().ok_or(DataplaneError::NotAttached)?;
        xdp(&mut self.ebpf, maps::XDP_PROGRAM)?
            .detach(link)
            .map_err(prog_err(maps::XDP_PROGRAM))
    }

    fn set_config(&mut self, config: &LbConfig) -> Result<(), DataplaneError> {
        let config = LbConfig {
            syn_cache_mask: self.syn_slots - 1,
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
        self.backends
            .set(id, entry, 0)
            .map_err(map_err(maps::BACKENDS, "update"))
    }

    fn install_table(&mut self, vip_id: u32, table: &TableImage<'_>) -> Result<(), DataplaneError> {
        check_table(vip_id, table)?;
        lock(&self.tables).install(vip_id, table)
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

    fn set_vip(&mut self, key: &VipKey, entry: &VipEntry) -> Result<(), DataplaneError> {
        check_vip_id(entry.vip_id)?;
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
        let written = lock(&self.tables).set_vip(key, entry);
        if let Err(e) = written {
            if is_new {
                // Undo the address count so a failed call changes nothing.
                let _ = self.release_address(&addr);
            }
            return Err(e);
        }
        self.vip_keys.insert(*key, *entry);
        Ok(())
    }

    fn remove_vip(&mut self, key: &VipKey) -> Result<(), DataplaneError> {
        lock(&self.tables).remove_vip(key)?;
        if self.vip_keys.remove(key).is_some() {
            // After the VIPS entry (and its id's info) is gone: the filter bit.
            self.write_filter_word(key, None)?;
            self.release_address(&addr_key(key))?;
        }
        Ok(())
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
        sum_per_cpu(
            &self.backend_stats,
            id,
            maps::BACKEND_STATS,
            BackendStats::accumulate,
        )
    }

    fn reset_backend_stats(&mut self, id: u32) -> Result<(), DataplaneError> {
        check_backend_id(id)?;
        let zeros = per_cpu_values(vec![BackendStats::default(); nr_cpus()?])?;
        self.backend_stats
            .set(id, zeros, 0)
            .map_err(map_err(maps::BACKEND_STATS, "update"))
    }

    fn lookup_flow(&self, key: &FlowKey) -> Result<Option<(CtTable, CtEntry)>, DataplaneError> {
        let found = if key.vip.family == FAMILY_V4 {
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
                },
            )),
            Decision::Table { .. } => None,
        })
    }
}

/// The map reads of the conntrack decision (`lb_common::conntrack`) for `lookup_flow`:
/// the clock, `BACKENDS` and `SYN_CACHE`. The first failed read is kept in `error`.
struct MapReads<'a> {
    dp: &'a KernelDataplane,
    error: Option<DataplaneError>,
}

impl conntrack::PinLookups for MapReads<'_> {
    type Backend = u32;

    fn now_ns(&mut self) -> u64 {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec through a valid pointer; with a
        // clock every Linux kernel has, it cannot fail.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &raw mut now) };
        // The program's clock (bpf_ktime_get_coarse_ns) is CLOCK_MONOTONIC_COARSE.
        u64::try_from(now.tv_sec).unwrap_or(0) * 1_000_000_000
            + u64::try_from(now.tv_nsec).unwrap_or(0)
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

    fn syn_slot(&mut self, hash: u32) -> Option<SynEntry> {
        let index = hash & (self.dp.syn_slots - 1);
        match self.dp.syn_cache.get(&index, 0) {
            Ok(slot) => Some(slot),
            Err(e) => {
                self.error
                    .get_or_insert(map_err(maps::SYN_CACHE, "lookup")(e));
                None
            }
        }
    }

    /// Not read: the table only decides whether a pin is re-labelled, which does not
    /// change where the packet goes.
    fn table_slot(&mut self, _hash: u32) -> Option<u32> {
        None
    }
}

impl KernelDataplane {
    /// Rewrites the `VIP_FILTER` word holding `key`'s bit from the VIPs recorded, plus
    /// `extra` (a VIP about to be written).
    fn write_filter_word(
        &mut self,
        key: &VipKey,
        extra: Option<&VipKey>,
    ) -> Result<(), DataplaneError> {
        let word = vip_filter_bit(key) / 64;
        let value = self
            .vip_keys
            .keys()
            .chain(extra)
            .map(vip_filter_bit)
            .filter(|bit| bit / 64 == word)
            .fold(0u64, |w, bit| w | 1u64 << (bit % 64));
        self.vip_filter
            .set(word, value, 0)
            .map_err(map_err(maps::VIP_FILTER, "update"))
    }

    /// Decrements the `VIP_ADDRS` count of `addr`, deleting it at zero.
    fn release_address(&mut self, addr: &VipAddrKey) -> Result<(), DataplaneError> {
        let count = self.vip_addrs.get(addr, 0).unwrap_or(0);
        if count > 1 {
            self.vip_addrs
                .insert(addr, count - 1, 0)
                .map_err(map_err(maps::VIP_ADDRS, "update"))
        } else {
            match self.vip_addrs.remove(addr) {
                Ok(()) | Err(MapError::KeyNotFound) => Ok(()),
                Err(MapError::SyscallError(e))
                    if e.io_error.raw_os_error() == Some(libc::ENOENT) =>
                {
                    Ok(())
                }
                Err(e) => Err(map_err(maps::VIP_ADDRS, "delete")(e)),
            }
        }
    }
}
