//! The data-plane interface: everything the controller does to the XDP program's maps,
//! behind the [`Dataplane`] trait.
//!
//! - [`kernel`]: the real implementation over aya — the only code of the workspace that
//!   touches aya or BPF syscalls — with its double-buffered tables (`tables`,
//!   `table_map`); with the `test-harness` feature also the test and benchmark access;
//! - [`fake`]: an in-memory implementation with the same semantics and failure
//!   injection, so controller logic is unit-tested without root;
//! - [`inspect`]: read-only access to the maps of a program another process loaded;
//! - [`offload`]: the interface's receive VLAN offload, which native XDP cannot see
//!   through.
//! - [`pinned`]: the pinned datapath in bpffs (directory, layout stamp, lock, removal),
//!   which outlives the daemon and which a restarted one adopts;
//! - [`prefix`]: IP prefixes (the outer source prefixes, allowed sources);
//! - [`routes`]: the kernel routing table of the VIP announcements, through iproute2;
//! - [`EBPF_OBJECT`]: the XDP object `build.rs` builds from `lb-ebpf`, embedded.
//!
//! Ordering contract the controller relies on: every call is applied completely or not
//! at all, and a table installed by [`Dataplane::install_table`] replaces the VIP's
//! previous table in one map update (a packet sees the whole old or the whole new table).

mod bpf_sys;
pub mod fake;
pub mod inspect;
pub mod kernel;
pub mod offload;
pub mod pinned;
pub mod prefix;
pub mod routes;
mod table_map;
mod tables;
mod vip_cache;

use aya::maps::MapError;

use crate::prefix::Prefix;
use lb_common::{
    probe::ProbeStats,
    stats::{BackendStats, GlobalStats, VipStats},
    types::{BackendEntry, CtEntry, FlowKey, LbConfig, VipKey},
};

pub use fake::FakeDataplane;
pub use inspect::Inspector;
pub use kernel::{
    ActivityClock, Agent, AgentMode, AgentOptions, Census, Cleaner, Cleaning, ConnListing, ConnRow,
    ConnState, ConnectionCounts, ConntrackWalker, KernelDataplane, LoadOptions, LoadTimes, Opened,
    PinCheck, PinCounts, PinMap, Pinning, SlotCounts, TraceReader, TraceRecord, WalkSettings,
    conntrack_now_ns, is_root, may_load_xdp, missing_capabilities,
};
/// The backend agent's counters pinned by another process, and where they are pinned.
pub mod agent {
    pub use crate::kernel::{read_pinned_stats, stats_pin};
}
#[cfg(feature = "test-harness")]
pub use kernel::{BenchRunner, BenchSpec, BenchTarget, PassProgram, TableWriter, TestRunOutput};

/// Errors of the data-plane interface. Each names the object (map, program, interface)
/// and the operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum DataplaneError {
    /// The embedded object could not be parsed or its maps created.
    #[error("loading the eBPF object: {}", chain(.0))]
    Load(aya::EbpfError),
    /// A program operation (verify, attach, detach, test run) failed.
    #[error("program {program}: {}", chain(.error))]
    Program {
        /// Program name in the object.
        program: &'static str,
        /// What aya reported.
        error: aya::programs::ProgramError,
    },
    /// The kernel refused to load a program: the verifier rejected it or the process
    /// lacks a capability the kernel asks of it (`CAP_BPF`, `CAP_PERFMON`,
    /// `CAP_NET_ADMIN` for XDP). The verifier's whole log, which can run to many
    /// kilobytes, is logged at debug level; the error keeps its last lines, where the
    /// verifier states the reason and its counts.
    #[error(
        "program {program}: the kernel refused to load it ({error}); the verifier's last lines: {reason}"
    )]
    Rejected {
        /// Program name in the object.
        program: &'static str,
        /// The `BPF_PROG_LOAD` system call's error (`EACCES`, `EPERM`, `EINVAL`, ...).
        error: std::io::Error,
        /// The log's last non-empty lines, joined by ` / `; empty when the kernel wrote
        /// no log.
        reason: String,
    },
    /// A map lookup or update failed.
    #[error("map {map}: {op}: {}", chain(.error))]
    Map {
        /// Map name in the object.
        map: &'static str,
        /// The operation (`update`, `lookup`, `delete`, ...).
        op: &'static str,
        /// What aya reported.
        error: MapError,
    },
    /// A BPF system call or mmap made directly (table maps) failed.
    #[error("{op}: {error}")]
    Syscall {
        /// The operation.
        op: String,
        /// The kernel's error.
        error: std::io::Error,
    },
    /// A map the program must define is missing from the object.
    #[error("map {0} is missing from the eBPF object")]
    MissingMap(&'static str),
    /// An argument is out of the range the maps can hold.
    #[error("{0}")]
    OutOfRange(String),
    /// The program is not attached, so it cannot be detached.
    #[error("the program is not attached")]
    NotAttached,
    /// A failure injected by the in-memory fake.
    #[error("injected failure at {0}")]
    Injected(String),
    /// The pinned datapath cannot be used (incompatible, held, unreachable).
    #[error(transparent)]
    Pin(#[from] pinned::PinError),
}

impl DataplaneError {
    /// The kernel's error number when a program operation's system call failed (a test
    /// run refused with `EPERM`, an attach with `EBUSY`, ...); `None` for other errors.
    #[must_use]
    pub fn program_errno(&self) -> Option<i32> {
        match self {
            Self::Program {
                error: aya::programs::ProgramError::SyscallError(e),
                ..
            } => e.io_error.raw_os_error(),
            _ => None,
        }
    }
}

/// The error of operation `op` (`update`, `lookup`, `delete`, ...) on map `map`.
pub(crate) fn map_err(
    map: &'static str,
    op: &'static str,
) -> impl FnOnce(MapError) -> DataplaneError {
    move |error| DataplaneError::Map { map, op, error }
}

/// The error of a system call made directly (table maps), described by `op`.
pub(crate) fn syscall_err(op: String) -> impl FnOnce(std::io::Error) -> DataplaneError {
    move |error| DataplaneError::Syscall { op, error }
}

/// `Ok` for a delete of a key that was absent: aya reports that as
/// [`MapError::KeyNotFound`] for some maps and as the system call's `ENOENT` for others.
pub(crate) fn absent_is_ok(result: Result<(), MapError>) -> Result<(), MapError> {
    match result {
        Err(MapError::KeyNotFound) => Ok(()),
        Err(MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        other => other,
    }
}

/// An error and its causes on one line, `outer: inner: ...` (the data-plane errors
/// carry aya's errors as text, not as `source()`, so that `{:#}` does not repeat them).
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let next = e.to_string();
        if !text.ends_with(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        cause = e.source();
    }
    text
}

/// How to attach the XDP program (kernel doc: `Documentation/networking/xdp-*` and
/// `XDP_FLAGS_*` in `include/uapi/linux/if_link.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttachMode {
    /// Native (driver) XDP, `XDP_FLAGS_DRV_MODE`.
    Native,
    /// Generic XDP in the kernel stack, `XDP_FLAGS_SKB_MODE`.
    Skb,
}

impl std::fmt::Display for AttachMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AttachMode::Native => "native",
            AttachMode::Skb => "skb",
        })
    }
}

/// Kernel memory (bytes) a VIP's tables of `table_size` slots take: both of its
/// buffers — once the VIP's table has changed, the live one and the previous one — each
/// of `table_size + TABLE_HEADER_LEN` 16-byte cells, a slot's owner and fast-path state
/// (`tables`, `table_map`). The kernel's page rounding of mmapable maps, under one page
/// per buffer, is not counted. A 65,537-slot table takes just over 2 MiB.
pub fn table_memory(table_size: u32) -> u64 {
    let entries = u64::from(table_size) + u64::from(lb_common::maps::TABLE_HEADER_LEN);
    tables::BUFFERS_PER_VIP * entries * table_map::CELL_BYTES
}

/// One complete Maglev table as the data plane stores it.
#[derive(Clone, Copy, Debug)]
pub struct TableImage<'a> {
    /// Generation number (low 32 bits), stored in the table's header; increases with
    /// every table the controller installs for a VIP.
    pub generation: u32,
    /// Backend id of every slot (`0` = no backend), length M (the table size, at most
    /// `lb_common::maps::MAX_TABLE_SIZE`).
    pub slots: &'a [u32],
}

/// One complete Maglev table in the controller's compact form: backend ids as `u16`,
/// which holds every id (`lb_common::maps::MAX_BACKENDS` = 65,536), at half the memory
/// of [`TableImage`]'s `u32`s.
#[derive(Clone, Copy, Debug)]
pub struct CompactImage<'a> {
    /// As [`TableImage::generation`].
    pub generation: u32,
    /// Backend id of every slot (`0` = no backend), length M.
    pub slots: &'a [u16],
}

const _: () = assert!(lb_common::maps::MAX_BACKENDS <= 1 << 16);

/// A table as read back from the data plane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstalledTable {
    /// Generation from the table's header.
    pub generation: u32,
    /// Backend id of every slot.
    pub slots: Vec<u32>,
}

/// A client's affinity pin, as [`Dataplane::lookup_affinity`] reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AffinityPin {
    /// The pinned backend's id.
    pub backend_id: u32,
    /// How long since the client last opened a connection (ns; the pin's time is
    /// rewritten at most once a second, so up to a second more).
    pub idle_ns: u64,
    /// The VIP's affinity timeout (s).
    pub timeout_secs: u32,
    /// Whether the pin decides the client's next new connection
    /// (`lb_common::affinity::decide`): it is live and its backend active.
    pub decides: bool,
}

/// Which state holds a flow: a pin or a held SYN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CtTable {
    /// A pin (`CONNTRACK_V4`, `CONNTRACK_V6`).
    Established,
    /// A held SYN: a TCP flow of which only the SYN was seen (its `SYN_CACHE` slot).
    SynOnly,
}

/// What an adopted data plane (one a previous daemon left pinned) holds, for the
/// controller to rebuild its state from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Adopted {
    /// The controller's record, as last stored ([`Dataplane::store_record`]).
    pub record: Option<Vec<u8>>,
    /// The `CONFIG` element, when one was written.
    pub config: Option<LbConfig>,
    /// The `VIPS` entries: key and VIP id.
    pub vips: Vec<(VipKey, u32)>,
    /// The allowed source prefixes written, by VIP (sorted; VIPs without a list are
    /// absent).
    pub sources: Vec<(VipKey, Vec<Prefix>)>,
}

/// Operations the controller performs on the data plane.
pub trait Dataplane {
    /// Attaches the XDP program to `iface` in `mode`.
    ///
    /// # Errors
    /// When the interface does not exist or the kernel refuses the mode.
    fn attach(&mut self, iface: &str, mode: AttachMode) -> Result<(), DataplaneError>;

    /// Detaches the program.
    ///
    /// # Errors
    /// [`DataplaneError::NotAttached`] if it is not attached.
    fn detach(&mut self) -> Result<(), DataplaneError>;

    /// Writes the global configuration. `config.syn_cache_mask` is not the caller's: the
    /// data plane sized `SYN_CACHE` when it loaded and writes the mask of that size.
    ///
    /// # Errors
    /// When the map update fails.
    fn set_config(&mut self, config: &LbConfig) -> Result<(), DataplaneError>;

    /// Writes backend `id` (`1..MAX_BACKENDS`).
    ///
    /// # Errors
    /// [`DataplaneError::OutOfRange`] for id 0 or beyond the map; map update failures.
    fn set_backend(&mut self, id: u32, entry: &BackendEntry) -> Result<(), DataplaneError>;

    /// Writes backends `entries` (id, entry) in order, as [`Self::set_backend`] one
    /// after another; the kernel data plane writes them in one system call
    /// (`BPF_MAP_UPDATE_BATCH`).
    ///
    /// # Errors
    /// [`DataplaneError::OutOfRange`] for an id 0 or beyond the map (nothing written by
    /// the kernel data plane); a map update failure, after which any of the entries may
    /// have been written.
    fn set_backends(&mut self, entries: &[(u32, BackendEntry)]) -> Result<(), DataplaneError> {
        entries
            .iter()
            .try_for_each(|(id, entry)| self.set_backend(*id, entry))
    }

    /// Installs `table` as VIP `vip_id`'s Maglev table, replacing the previous one in a
    /// single map update.
    ///
    /// # Errors
    /// [`DataplaneError::OutOfRange`] for an empty or oversized table or a VIP id beyond
    /// the map; failures creating, filling or swapping the table map (the previous table
    /// then stays in force).
    fn install_table(&mut self, vip_id: u32, table: &TableImage<'_>) -> Result<(), DataplaneError>;

    /// A two-phase rollout's *learn* phase for VIP `vip_id` (rule R1 of
    /// `lb_common::fastpath::SlotState::learned`, SC6 of `lb_common::second_chance`):
    /// the live table is published again with every slot that `next` (the next table
    /// in the controller's compact form, the same size) moves marked pending with its
    /// next owner; the owners do not change. The next [`Self::install_table`] (the
    /// *switch*) ends it. Returns the slots marked pending.
    ///
    /// # Errors
    /// [`DataplaneError::OutOfRange`] without a live table or for another size;
    /// failures as [`Self::install_table`] (the table in force then stays).
    fn learn_table(&mut self, vip_id: u32, next: &[u16]) -> Result<u32, DataplaneError>;

    /// [`Self::install_table`] of a table in the controller's compact form (`u16` backend
    /// ids). The default widens it into a temporary `u32` copy; the kernel data plane
    /// writes it into the table buffer directly.
    ///
    /// # Errors
    /// As [`Self::install_table`].
    fn install_compact(
        &mut self,
        vip_id: u32,
        table: &CompactImage<'_>,
    ) -> Result<(), DataplaneError> {
        let slots: Vec<u32> = table.slots.iter().map(|&id| u32::from(id)).collect();
        self.install_table(
            vip_id,
            &TableImage {
                generation: table.generation,
                slots: &slots,
            },
        )
    }

    /// Gets ready for installs of `tables` ((VIP id, table size) pairs) that follow in
    /// the same change: the kernel data plane creates the table buffers they need in one
    /// batch, so that a change of many VIPs waits for one RCU grace period rather than
    /// one per new buffer. Nothing becomes live. The default does nothing.
    ///
    /// # Errors
    /// When a buffer cannot be created or inserted (nothing that was live changed).
    fn prepare_tables(&mut self, tables: &[(u32, u32)]) -> Result<(), DataplaneError> {
        let _ = tables;
        Ok(())
    }

    /// Waits until no packet can still be using a table replaced by
    /// [`Self::install_table`] (an RCU grace period in the kernel). The controller calls
    /// it before changes that must come after every packet sees the new tables (marking
    /// a backend drained or down).
    ///
    /// # Errors
    /// When the wait cannot be started.
    fn quiesce(&mut self) -> Result<(), DataplaneError>;

    /// Removes VIP `vip_id`'s table (after its VIP entry is gone).
    ///
    /// # Errors
    /// When the map update fails.
    fn remove_table(&mut self, vip_id: u32) -> Result<(), DataplaneError>;

    /// Reads VIP `vip_id`'s installed table, if any.
    ///
    /// # Errors
    /// When the maps cannot be read.
    fn table(&self, vip_id: u32) -> Result<Option<InstalledTable>, DataplaneError>;

    /// Adds VIP `key` with id `vip_id` (`0..MAX_VIPS`), or gives it that id, and counts
    /// its address in `VIP_ADDRS`. Its `VIPS` entry selects the live buffer and epoch of
    /// the id's table: the data plane keeps those.
    ///
    /// # Errors
    /// [`DataplaneError::OutOfRange`] for an id beyond the map; a failed map update
    /// (nothing is changed then).
    fn set_vip(&mut self, key: &VipKey, vip_id: u32) -> Result<(), DataplaneError>;

    /// Removes a VIP (and uncounts its address).
    ///
    /// # Errors
    /// When a map update fails.
    fn remove_vip(&mut self, key: &VipKey) -> Result<(), DataplaneError>;

    /// Sets whether VIP `key` (id `vip_id`) takes the fast path
    /// (`lb_common::types::VIP_FAST_PATH` in its `VIPS` entry, and its `FAST_FILTER`
    /// bit): a packet other than a SYN on a clean slot goes to the slot's owner with no
    /// conntrack lookup, and a miss on a dirty slot to the clean owner.
    ///
    /// # Errors
    /// [`DataplaneError::OutOfRange`] for an id beyond the map; a failed map update
    /// (the previous setting stays).
    fn set_fast_path(&mut self, key: &VipKey, vip_id: u32, on: bool) -> Result<(), DataplaneError>;

    /// Whether VIP `vip_id` takes the fast path ([`Self::set_fast_path`]).
    fn fast_path(&self, vip_id: u32) -> bool;

    /// Whether VIP `vip_id`'s entry is in `VIP_CACHE`, where a fast-path packet reads
    /// it without the `VIPS` lookup (`lb_common::maps::VIP_CACHE`): false when another
    /// VIP with the same filter bit holds the slot, or the VIP has no entry.
    fn vip_cached(&self, vip_id: u32) -> bool;

    /// Sets whether VIP `key` (id `vip_id`) offers the backends' agent second-chance
    /// candidates (`lb_common::types::VIP_SECOND_CHANCE` in its `VIPS` entry,
    /// `lb_common::second_chance`): a TCP packet that misses conntrack on a dirty slot
    /// names the slot's other possible owner and is not pinned.
    ///
    /// # Errors
    /// [`DataplaneError::OutOfRange`] for an id beyond the map; a failed map update
    /// (the previous setting stays).
    fn set_second_chance(
        &mut self,
        key: &VipKey,
        vip_id: u32,
        on: bool,
    ) -> Result<(), DataplaneError>;

    /// Whether VIP `vip_id` offers second-chance candidates
    /// ([`Self::set_second_chance`]).
    fn second_chance(&self, vip_id: u32) -> bool;

    /// Sets the hash fields of VIP `key` (id `vip_id`): which fields of a flow pick its
    /// table slot (`lb_common::hash_fields`, carried in the flags of its `VIPS` entry).
    /// Set before the VIP's first table, so that no packet hashes otherwise.
    ///
    /// # Errors
    /// [`DataplaneError::OutOfRange`] for an id beyond the map; a failed map update
    /// (the previous setting stays).
    fn set_hash_fields(
        &mut self,
        key: &VipKey,
        vip_id: u32,
        fields: lb_common::hash_fields::HashFields,
    ) -> Result<(), DataplaneError>;

    /// VIP `vip_id`'s hash fields ([`Self::set_hash_fields`]; the default, the 5-tuple,
    /// for an unknown id).
    fn hash_fields(&self, vip_id: u32) -> lb_common::hash_fields::HashFields;

    /// Dirty slots of VIP `vip_id`'s live table (0 without one): slots whose owner
    /// changed since they were last clean (`lb_common::fastpath`).
    ///
    /// # Errors
    /// When the table cannot be read.
    fn dirty_slots(&self, vip_id: u32) -> Result<u64, DataplaneError>;

    /// Sets the client prefixes allowed to reach VIP `key` (id `vip_id`), all of the
    /// VIP's family; empty: every client. The data plane checks them for every packet
    /// of the VIP before any conntrack lookup, so a narrowed list stops the removed
    /// prefixes' established flows too. While the list changes, a packet is checked
    /// against the old list, the new one, or their union; never against neither.
    ///
    /// # Errors
    /// [`DataplaneError::OutOfRange`] for an id beyond the map, too many prefixes in
    /// all, or a prefix of another family; a failed map update (the previous list
    /// is put back).
    fn set_sources(
        &mut self,
        key: &VipKey,
        vip_id: u32,
        prefixes: &[Prefix],
    ) -> Result<(), DataplaneError>;

    /// Global counters summed over CPUs.
    ///
    /// # Errors
    /// When the map cannot be read.
    fn global_stats(&self) -> Result<GlobalStats, DataplaneError>;

    /// Counters of VIP `vip_id` summed over CPUs.
    ///
    /// # Errors
    /// When the map cannot be read.
    fn vip_stats(&self, vip_id: u32) -> Result<VipStats, DataplaneError>;

    /// Counters of backend `id` summed over CPUs.
    ///
    /// # Errors
    /// When the map cannot be read.
    fn backend_stats(&self, id: u32) -> Result<BackendStats, DataplaneError>;

    /// [`Self::vip_stats`] of every VIP id of `ids`, in their order. The kernel data
    /// plane reads the range the ids span in batches, not one system call per id.
    ///
    /// # Errors
    /// When the map cannot be read.
    fn vip_stats_of(&self, ids: &[u32]) -> Result<Vec<VipStats>, DataplaneError> {
        ids.iter().map(|&id| self.vip_stats(id)).collect()
    }

    /// [`Self::backend_stats`] of every backend id of `ids`, in their order, read as
    /// [`Self::vip_stats_of`] reads.
    ///
    /// # Errors
    /// When the map cannot be read.
    fn backend_stats_of(&self, ids: &[u32]) -> Result<Vec<BackendStats>, DataplaneError> {
        ids.iter().map(|&id| self.backend_stats(id)).collect()
    }

    /// Clears the counters of a backend id before it is given to a new backend.
    ///
    /// # Errors
    /// When the map update fails.
    fn reset_backend_stats(&mut self, id: u32) -> Result<(), DataplaneError>;

    /// The state (pin or held SYN) the flow's next packet follows, as the data plane
    /// decides it (`lb_common::conntrack::decide`), and which map holds it; `None` when
    /// the next packet is picked from the table.
    ///
    /// # Errors
    /// When the maps cannot be read.
    fn lookup_flow(&self, key: &FlowKey) -> Result<Option<(CtTable, CtEntry)>, DataplaneError>;

    /// The affinity pin of the client of flow `key` (`AFFINITY`, keyed by its VIP's
    /// affinity fields, `lb_common::affinity::key`) and whether it decides the client's
    /// next new connection; `None` when the VIP has no affinity or the client no pin.
    /// The in-memory fake keeps no pins.
    ///
    /// # Errors
    /// When the maps cannot be read.
    fn lookup_affinity(&self, key: &FlowKey) -> Result<Option<AffinityPin>, DataplaneError> {
        let _ = key;
        Ok(None)
    }

    /// Slot `slot`'s fast-path state in VIP `vip_id`'s live table: its owner, clean or
    /// dirty, and clean owner (`lb_common::fastpath::SlotState`); `None` without a live
    /// table or beyond it.
    ///
    /// # Errors
    /// When the table buffer cannot be read.
    fn slot_state(
        &self,
        vip_id: u32,
        slot: u32,
    ) -> Result<Option<lb_common::fastpath::SlotState>, DataplaneError>;

    /// Rule SC5 of `lb_common::second_chance`: the slots of VIP `vip_id`'s tables that
    /// forgot an owner (a dirty slot's owner in between, neither its clean owner nor
    /// its new one) when a table was installed, counted since this data plane was
    /// opened ([`lb_common::second_chance::owners_given_up`] at each install of a table
    /// of the same size); 0 for a VIP it knows nothing of.
    fn owners_given_up(&self, vip_id: u32) -> u64;

    /// The tunnel-probe program: whether it is attached, and its counters (zero when
    /// they cannot be read); `None` for a data plane without one (the fake).
    fn probe_encap(&self) -> Option<(bool, ProbeStats)> {
        None
    }
    /// What this data plane held before this process opened it; `None` when it was
    /// created empty (nothing to adopt).
    ///
    /// # Errors
    /// When the maps or the record cannot be read.
    fn adopted(&self) -> Result<Option<Adopted>, DataplaneError>;

    /// The `BACKENDS` entry of `id` (state [`lb_common::types::BACKEND_UNUSED`] when
    /// never written).
    ///
    /// # Errors
    /// An id out of range, or a failed read.
    fn backend(&self, id: u32) -> Result<BackendEntry, DataplaneError>;

    /// Stores the controller's record (its ids and applied state, opaque bytes) with
    /// the data plane, replacing the previous one whole; a data plane that does not
    /// outlive the process keeps nothing.
    ///
    /// # Errors
    /// When it cannot be written (the previous record then stays).
    fn store_record(&mut self, record: &[u8]) -> Result<(), DataplaneError>;
}

/// The XDP object built from `lb-ebpf` by `build.rs`, embedded in the binary
/// (ELF, BPF little-endian, 8-byte aligned as aya requires).
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/lb-ebpf"));

/// The upgrade tests' variant of the XDP object (feature `test-harness` only): built
/// from `lb-ebpf` with its `upgrade-variant` feature, so its program differs from the
/// `lb` binary's while every map is the same; `lb run --object FILE` loads it.
#[cfg(feature = "test-harness")]
pub static UPGRADE_VARIANT_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/variant/lb-ebpf"));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_print_their_causes_once() {
        let io = std::io::Error::from_raw_os_error(libc::EOPNOTSUPP);
        let e = DataplaneError::Syscall {
            op: "creating a table map".into(),
            error: io,
        };
        assert_eq!(
            e.to_string(),
            "creating a table map: Operation not supported (os error 95)"
        );
        assert!(
            std::error::Error::source(&e).is_none(),
            "no source: {{:#}} prints it once"
        );
        let nested = std::io::Error::other(DataplaneError::NotAttached);
        assert_eq!(chain(&nested), "the program is not attached");
    }
}
