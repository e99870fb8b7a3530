//! [`TableSet`]: the VIPs' double-buffered Maglev tables and the `VIPS` entries that
//! select them (see `lb_common::maps::TABLES` for the layout and the reason).
//!
//! A buffer of `STD_TABLE_SIZE` slots goes into `TABLES_STD` (inner maps of one size,
//! which the program reads without a helper call), a buffer of any other size into
//! `TABLES`, at the same index; the VIP entry's `VIP_TABLE_STD` says which map its
//! live buffer is in. A new buffer that replaces one in the other map (a size change)
//! is inserted into its map, then the other map's entry is deleted: one more grace
//! period, paid only when a VIP's table moves between the sizes. A buffer adopted from
//! before layout 6 stays in `TABLES` whatever its size, until its VIP's next install
//! replaces it.
//!
//! Installing a table for a VIP:
//! 1. pick the buffer that is not live; if it was live until a change that has not yet
//!    been followed by an RCU grace period, wait for one first ([`TableSet::quiesce`]),
//!    so no packet can still be reading it;
//! 2. write the header and slots into it through its mmap (a new map, inserted into
//!    `TABLES`, when the buffer does not exist yet or has another size);
//! 3. give it the next table epoch (a counter over all installs, see
//!    `lb_common::types::VipEntry::epoch`), write that epoch into the VIP's `VIP_INFO`
//!    element, then switch the VIP's `VIPS` entry (buffer and epoch) to it — one
//!    hash-map update, after which new packets read only the new table; the old buffer
//!    becomes stale. `VIP_INFO` goes first so that it never names an older table than
//!    the one packets pick from: the established-flow path trusts a TCP conntrack
//!    entry only when its epoch equals `VIP_INFO`'s.
//!
//! Every `VIPS` entry written is also copied into `VIP_CACHE` (`crate::vip_cache`),
//! after the `VIPS` update; a VIP leaves the cache before its entry goes.
//!
//! A pinned data plane (`super::pinned`) also pins every buffer it creates at
//! `tables/<index>` (the index in `TABLES` or `TABLES_STD`), persists the epoch counter
//! in `meta` before an epoch is used, and at adoption ([`TableSet::adopt`]) reopens the
//! buffers (each into the map its flags and size name), maps them and resumes the
//! counter: a restarted daemon writes the same buffers, and never gives out an epoch a
//! conntrack entry may already carry.
//!
//! The grace period is the kernel's own: re-setting an existing `TABLES` or
//! `TABLES_STD` entry, or deleting one, makes the update wait in `synchronize_rcu()`
//! (`maybe_wait_bpf_programs()` in `kernel/bpf/syscall.c`), and every XDP program runs
//! inside an RCU read-side section.

use std::{
    collections::HashMap as StdHashMap,
    os::fd::{AsFd as _, AsRawFd as _},
    path::PathBuf,
};

use aya::maps::{Array, HashMap, MapData, MapError};
use lb_common::{
    fastpath::SlotState,
    hash_fields::HashFields,
    maps::{self, TABLE_HEADER_LEN},
    types::{
        VIP_AFFINITY, VIP_FAST_PATH, VIP_SECOND_CHANCE, VIP_TABLE_B, VIP_TABLE_STD, VipEntry,
        VipInfo, VipKey,
    },
};

use super::{
    DataplaneError, InstalledTable, TableImage, absent_is_ok, bpf_sys, map_err, pinned::MetaMap,
    syscall_err, table_map, vip_cache::VipCache,
};

/// Where a pinned data plane keeps its table buffers and epoch counter.
pub(crate) struct TablePins {
    /// The `tables/` directory (as this process reaches it).
    pub(crate) dir: PathBuf,
    /// The `meta` map (epoch counter, attach mode).
    pub(crate) meta: MetaMap,
}

/// Table buffers per VIP: the live one, and the one the next change writes (and which
/// the one before it used).
pub(crate) const BUFFERS_PER_VIP: u64 = 2;

/// One table buffer: its map (kept open) and a writable mapping of it.
struct Buffer {
    map: MapData,
    mapping: table_map::Mapping,
    /// Entries of the map (slots + header).
    entries: usize,
    /// Whether it is in `TABLES_STD` (else `TABLES`): a map of that outer map's inner
    /// shape ([`table_map::is_std`]).
    std: bool,
}

impl Buffer {
    /// A new empty buffer of `size` slots for VIP id `vip_id`, with the flags of the
    /// outer map its size belongs in, mapped writable.
    fn create(size: u32, vip_id: u32) -> Result<Self, DataplaneError> {
        let entries = size as usize + TABLE_HEADER_LEN as usize;
        let fd = table_map::create(size).map_err(syscall_err(format!(
            "creating a table map of {size} slots for VIP id {vip_id}"
        )))?;
        let mapping = table_map::Mapping::new(fd.as_fd(), entries, true)
            .map_err(syscall_err(format!("mapping the table of VIP id {vip_id}")))?;
        let std = table_map::std_sized(size);
        let name = if std { maps::TABLES_STD } else { maps::TABLES };
        let map = MapData::from_fd(fd).map_err(map_err(name, "open inner"))?;
        Ok(Self {
            map,
            mapping,
            entries,
            std,
        })
    }

    /// Whether it can hold the next table of `size` slots as it is: the same entries
    /// and the outer map that size belongs in.
    fn fits(&self, size: u32) -> bool {
        let entries = size as usize + TABLE_HEADER_LEN as usize;
        self.entries == entries && self.std == table_map::std_sized(size)
    }
}

/// Buffers created per thread at least before [`create_buffers`] uses a second one.
const BUFFERS_PER_THREAD: usize = 16;

/// Creates the buffers of `missing` (VIP id, buffer index, slots), in its order, on up
/// to `available_parallelism` threads: most of a buffer's creation is the kernel
/// zeroing its pages (1 MiB at M = 65,537), which runs on the calling thread, so a
/// start of many VIPs creates them side by side. The first failure in `missing`'s
/// order is returned; the buffers created are closed again.
fn create_buffers(
    missing: &[(u32, usize, u32)],
) -> Result<Vec<(u32, usize, Buffer)>, DataplaneError> {
    let create = |&(vip_id, target, size): &(u32, usize, u32)| {
        Buffer::create(size, vip_id).map(|b| (vip_id, target, b))
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .min(missing.len() / BUFFERS_PER_THREAD);
    if threads <= 1 {
        return missing.iter().map(create).collect();
    }
    let chunk = missing.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let parts: Vec<_> = missing
            .chunks(chunk)
            .map(|part| scope.spawn(move || part.iter().map(create).collect::<Vec<_>>()))
            .collect();
        let mut created = Vec::with_capacity(missing.len());
        for part in parts {
            match part.join() {
                Ok(buffers) => created.extend(buffers),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        created.into_iter().collect()
    })
}

/// One outer map of table buffers (`TABLES` or `TABLES_STD`), through a handle of its
/// own (a duplicate of the loaded map's fd).
pub(crate) struct Outer {
    name: &'static str,
    map: MapData,
}

impl Outer {
    /// The outer map `name` (a map name of `lb_common::maps`) through `map`.
    pub(crate) fn new(name: &'static str, map: MapData) -> Self {
        Self { name, map }
    }

    /// Sets entry `index` to `inner` (a grace-period wait when it replaces one).
    fn set(&self, index: u32, inner: &MapData) -> Result<(), DataplaneError> {
        let fd = u32::try_from(inner.fd().as_fd().as_raw_fd()).unwrap_or(u32::MAX);
        bpf_sys::update(
            self.map.fd().as_fd(),
            &index.to_ne_bytes(),
            &fd.to_ne_bytes(),
        )
        .map_err(syscall_err(format!("updating {}[{index}]", self.name)))
    }

    /// Deletes entry `index`, absent or not (a grace-period wait).
    fn delete(&self, index: u32) -> Result<(), DataplaneError> {
        match bpf_sys::delete(self.map.fd().as_fd(), &index.to_ne_bytes()) {
            Err(e) if e.raw_os_error() != Some(libc::ENOENT) => {
                Err(syscall_err(format!("deleting {}[{index}]", self.name))(e))
            }
            _ => Ok(()),
        }
    }
}

/// `TABLES` and `TABLES_STD`.
pub(crate) struct Outers {
    /// `TABLES`: buffers of any size.
    pub(crate) any: Outer,
    /// `TABLES_STD`: buffers of `STD_TABLE_SIZE` slots.
    pub(crate) std: Outer,
}

impl Outers {
    /// The map a buffer is in (`std`: `TABLES_STD`).
    fn of(&self, std: bool) -> &Outer {
        if std { &self.std } else { &self.any }
    }

    /// Deletes entry `index` of the map other than `std`'s when the buffer there
    /// (`replaced`: whether it was in `TABLES_STD`) is replaced by one of `std`'s map,
    /// so that an index is in one map at a time.
    fn forget_moved(
        &self,
        index: u32,
        std: bool,
        replaced: Option<bool>,
    ) -> Result<(), DataplaneError> {
        match replaced {
            Some(old) if old != std => self.of(old).delete(index),
            _ => Ok(()),
        }
    }
}

/// A VIP's two buffers.
#[derive(Default)]
struct VipBuffers {
    buffers: [Option<Buffer>; 2],
    /// The buffer the VIP entry selects (or will select once written).
    live: Option<usize>,
    /// Buffers replaced since the last grace period: packets may still read them.
    stale: [bool; 2],
    /// The VIP's key, once its `VIPS` entry exists.
    key: Option<VipKey>,
    /// Epoch of the live buffer's table (0 before the first install).
    epoch: u32,
    /// Whether the VIP takes the fast path (`VIP_FAST_PATH` in its entry).
    fast: bool,
    /// Whether its misses on dirty slots carry second-chance candidates
    /// (`VIP_SECOND_CHANCE` in its entry).
    second_chance: bool,
    /// The VIP's hash fields (their bits in its entry's flags).
    hash: HashFields,
    /// Slots that forgot an owner at this process's installs of its tables (rule SC5,
    /// `lb_common::second_chance::owners_given_up`).
    owners_given_up: u64,
}

impl VipBuffers {
    /// The buffer the VIP entry selects, if it holds a table.
    fn live_buffer(&self) -> Option<&Buffer> {
        self.live.and_then(|l| self.buffers[l].as_ref())
    }
}

/// The `TABLES`, `TABLES_STD` and `VIPS` maps and the buffer bookkeeping.
pub(crate) struct TableSet {
    outers: Outers,
    vips: HashMap<MapData, VipKey, VipEntry>,
    vip_info: Array<MapData, VipInfo>,
    /// `AFFINITY_TIMEOUT`: VIP id → its affinity timeout (ns).
    affinity_timeout: Array<MapData, u64>,
    /// `VIP_CACHE`: a copy of each `VIPS` entry written, for the fast path.
    cache: VipCache,
    by_id: StdHashMap<u32, VipBuffers>,
    /// Grace periods waited for (for tests and benchmarks).
    #[cfg(feature = "test-harness")]
    grace_periods: u64,
    /// Epoch of the latest install (any VIP).
    epoch: u32,
    /// Pins, for a pinned data plane.
    pins: Option<TablePins>,
}

fn index(vip_id: u32, buffer: usize) -> u32 {
    vip_id * 2 + u32::from(buffer == 1)
}

/// The slot states of `vip`'s live buffer (VIP id `vip_id`), if it has one.
fn live_states(vip: &VipBuffers, vip_id: u32) -> Result<Option<Vec<SlotState>>, DataplaneError> {
    let Some(buffer) = vip.live_buffer() else {
        return Ok(None);
    };
    buffer
        .mapping
        .read_states()
        .map(Some)
        .map_err(syscall_err(format!(
            "reading the slot states of VIP id {vip_id}"
        )))
}

impl TableSet {
    pub(crate) fn new(
        outers: Outers,
        vips: HashMap<MapData, VipKey, VipEntry>,
        vip_info: Array<MapData, VipInfo>,
        affinity_timeout: Array<MapData, u64>,
        cache: VipCache,
        pins: Option<TablePins>,
    ) -> Self {
        Self {
            outers,
            vips,
            vip_info,
            affinity_timeout,
            cache,
            by_id: StdHashMap::new(),
            #[cfg(feature = "test-harness")]
            grace_periods: 0,
            epoch: 0,
            pins,
        }
    }

    /// The `meta` map of a pinned data plane.
    pub(crate) fn meta_mut(&mut self) -> Option<&mut MetaMap> {
        self.pins.as_mut().map(|p| &mut p.meta)
    }

    /// The next table epoch: never 0, never reused in practice (2^32 installs); a
    /// pinned data plane records it before it is used.
    fn next_epoch(&mut self) -> Result<u32, DataplaneError> {
        let epoch = self.epoch.wrapping_add(1).max(1);
        if let Some(pins) = &mut self.pins {
            pins.meta
                .update(|m| m.epoch = epoch)
                .map_err(syscall_err("recording the table epoch in meta".into()))?;
        }
        self.epoch = epoch;
        Ok(epoch)
    }

    /// Reopens the buffers of every VIP in `VIPS` from their pins and resumes the
    /// epoch counter (a pinned data plane at adoption). A VIP whose live buffer is not
    /// pinned keeps its entry; its next install creates a new buffer.
    pub(crate) fn adopt(&mut self) -> Result<(), DataplaneError> {
        let Some(dir) = self.pins.as_ref().map(|p| p.dir.clone()) else {
            return Ok(());
        };
        let mut epoch = self.pins.as_ref().map_or(0, |p| p.meta.get().epoch);
        // The cache is filled again from the same walk of `VIPS`.
        self.cache.clear();
        for (key, entry) in self.vip_entries()? {
            self.cache.publish(&key, &entry);
            let mut hash = HashFields::of_flags(entry.flags);
            if entry.flags & VIP_AFFINITY != 0 {
                let ns = self
                    .affinity_timeout
                    .get(&entry.vip_id, 0)
                    .map_err(map_err(maps::AFFINITY_TIMEOUT, "lookup"))?;
                hash.affinity_secs = u32::try_from(ns / 1_000_000_000).unwrap_or(u32::MAX);
            }
            let mut vip = VipBuffers {
                live: Some(usize::from(entry.flags & VIP_TABLE_B != 0)),
                key: Some(key),
                epoch: entry.epoch,
                fast: entry.flags & VIP_FAST_PATH != 0,
                second_chance: entry.flags & VIP_SECOND_CHANCE != 0,
                hash,
                ..VipBuffers::default()
            };
            epoch = epoch.max(entry.epoch);
            for buffer in 0..2 {
                let path = dir.join(index(entry.vip_id, buffer).to_string());
                let what = || format!("reopening table buffer {}", path.display());
                let Some(fd) = bpf_sys::open_pinned(&path).map_err(syscall_err(what()))? else {
                    continue;
                };
                let info = bpf_sys::map_info(fd.as_fd()).map_err(syscall_err(what()))?;
                let entries = info.max_entries as usize;
                let std = table_map::is_std(info.map_flags, entries);
                let mapping = table_map::Mapping::new(fd.as_fd(), entries, true)
                    .map_err(syscall_err(format!("mapping {}", path.display())))?;
                let map =
                    MapData::from_fd(fd).map_err(map_err(maps::TABLES, "open pinned inner"))?;
                vip.buffers[buffer] = Some(Buffer {
                    map,
                    mapping,
                    entries,
                    std,
                });
            }
            self.by_id.insert(entry.vip_id, vip);
        }
        self.epoch = epoch;
        Ok(())
    }

    /// The `VIPS` entries (adoption).
    pub(crate) fn vip_entries(&self) -> Result<Vec<(VipKey, VipEntry)>, DataplaneError> {
        self.vips
            .iter()
            .collect::<Result<_, _>>()
            .map_err(map_err(maps::VIPS, "iterate"))
    }

    /// Pins buffer `index`'s map, replacing the pin of the buffer it replaces.
    fn pin_buffer(&self, index: u32, map: &MapData) -> Result<(), DataplaneError> {
        let Some(pins) = &self.pins else {
            return Ok(());
        };
        let path = pins.dir.join(index.to_string());
        bpf_sys::pin_replacing(map.fd().as_fd(), &path)
            .map_err(syscall_err(format!("pinning {}", path.display())))
    }

    /// Writes VIP `vip_id`'s `VIP_INFO` element (`key` live at `epoch`, or cleared).
    fn write_info(
        &mut self,
        vip_id: u32,
        key: Option<&VipKey>,
        epoch: u32,
    ) -> Result<(), DataplaneError> {
        let info = key.map_or_else(VipInfo::default, |key| VipInfo {
            key: *key,
            live: 1,
            epoch,
        });
        self.vip_info
            .set(vip_id, info, 0)
            .map_err(map_err(maps::VIP_INFO, "update"))
    }

    /// Points VIP `vip_id`'s `VIPS` entry at its live buffer and epoch.
    fn write_vip(&mut self, key: &VipKey, vip_id: u32) -> Result<(), DataplaneError> {
        let vip = self.by_id.entry(vip_id).or_default();
        let table = if vip.live == Some(1) { VIP_TABLE_B } else { 0 };
        let std = if vip.live_buffer().is_some_and(|b| b.std) {
            VIP_TABLE_STD
        } else {
            0
        };
        let fast = if vip.fast { VIP_FAST_PATH } else { 0 };
        let second_chance = if vip.second_chance {
            VIP_SECOND_CHANCE
        } else {
            0
        };
        let entry = VipEntry {
            vip_id,
            flags: table | std | fast | second_chance | vip.hash.flags(),
            epoch: vip.epoch,
        };
        self.vips
            .insert(key, entry, 0)
            .map_err(map_err(maps::VIPS, "update"))?;
        self.cache.publish(key, &entry);
        Ok(())
    }

    /// Waits for an RCU grace period if any buffer is stale; afterwards none is.
    pub(crate) fn quiesce(&mut self) -> Result<(), DataplaneError> {
        if !self.by_id.values().any(|v| v.stale.iter().any(|s| *s)) {
            return Ok(());
        }
        // Re-set an existing entry to itself: the kernel waits for a grace period.
        let Some((vip_id, buffer, b)) = self.by_id.iter().find_map(|(id, v)| {
            v.buffers
                .iter()
                .enumerate()
                .find_map(|(i, b)| b.as_ref().map(|b| (*id, i, b)))
        }) else {
            return Ok(());
        };
        self.outers.of(b.std).set(index(vip_id, buffer), &b.map)?;
        #[cfg(feature = "test-harness")]
        {
            self.grace_periods += 1;
        }
        for v in self.by_id.values_mut() {
            v.stale = [false; 2];
        }
        Ok(())
    }

    /// Grace periods waited for so far.
    #[cfg(feature = "test-harness")]
    pub(crate) fn grace_periods(&self) -> u64 {
        self.grace_periods
    }

    /// Makes `table` VIP `vip_id`'s live table (see the module documentation).
    pub(crate) fn install(
        &mut self,
        vip_id: u32,
        table: &TableImage<'_>,
    ) -> Result<(), DataplaneError> {
        self.install_slots(vip_id, table.generation, table.slots)
    }

    /// [`Self::install`] of `slots` (backend ids of any width) at `generation`.
    pub(crate) fn install_slots<T: Copy + Into<u32>>(
        &mut self,
        vip_id: u32,
        generation: u32,
        slots: &[T],
    ) -> Result<(), DataplaneError> {
        let mut forgotten = 0;
        self.install_with(vip_id, slots.len(), |mapping, live, now_ns| {
            forgotten = lb_common::second_chance::owners_given_up(live, slots);
            mapping.write_table(generation, slots, live, now_ns)
        })?;
        self.by_id.entry(vip_id).or_default().owners_given_up += u64::from(forgotten);
        Ok(())
    }

    /// The slots of VIP `vip_id`'s tables that forgot an owner when this process
    /// installed a table (rule SC5); 0 for a VIP it knows nothing of.
    pub(crate) fn owners_given_up(&self, vip_id: u32) -> u64 {
        self.by_id.get(&vip_id).map_or(0, |v| v.owners_given_up)
    }

    /// Rule R1 (a two-phase rollout's *learn* phase): publishes VIP `vip_id`'s table in
    /// force again, with the slots that `next` (the next table, the same size) moves
    /// marked pending with their next owner ([`table_map::Mapping::write_learned`]),
    /// switched in as an install is. Returns the slots marked pending.
    ///
    /// # Errors
    /// [`DataplaneError::OutOfRange`] when the VIP has no live table or `next` has
    /// another size (a resized table has no clean owner to learn against); failures
    /// as [`Self::install_slots`].
    pub(crate) fn learn_slots<T: Copy + Into<u32>>(
        &mut self,
        vip_id: u32,
        next: &[T],
    ) -> Result<u32, DataplaneError> {
        let vip = self.by_id.get(&vip_id);
        let (live, generation) = match vip.and_then(VipBuffers::live_buffer) {
            Some(buffer) => (
                buffer.mapping.read_states().ok(),
                buffer.mapping.generation(),
            ),
            None => (None, None),
        };
        let (Some(live), Some(generation)) = (live, generation) else {
            return Err(DataplaneError::OutOfRange(format!(
                "VIP id {vip_id} has no readable live table to learn the next one against"
            )));
        };
        if live.len() != next.len() {
            return Err(DataplaneError::OutOfRange(format!(
                "VIP id {vip_id}: the next table has {} slots, the live one {} (a resized \
                 table cannot be learned; publish it)",
                next.len(),
                live.len()
            )));
        }
        let mut pending = 0;
        self.install_with(vip_id, next.len(), |mapping, _, now_ns| {
            pending = mapping.write_learned(generation, &live, next, now_ns)?;
            Ok(())
        })?;
        Ok(pending)
    }

    /// Writes VIP `vip_id`'s idle buffer (of `len` slots) with `write` (given the
    /// mapping, the live table's states and the time) and switches it in.
    fn install_with(
        &mut self,
        vip_id: u32,
        len: usize,
        mut write: impl FnMut(&mut table_map::Mapping, Option<&[SlotState]>, u64) -> std::io::Result<()>,
    ) -> Result<(), DataplaneError> {
        let size = u32::try_from(len).unwrap_or(u32::MAX);
        let target = self
            .by_id
            .get(&vip_id)
            .and_then(|v| v.live)
            .map_or(0, |live| 1 - live);
        if self.by_id.get(&vip_id).is_some_and(|v| v.stale[target]) {
            self.quiesce()?;
        }
        let now_ns = crate::kernel::conntrack_now_ns();
        let vip = self.by_id.entry(vip_id).or_default();
        // A live table whose header is unreadable (corrupt) tells no clean owner: its
        // slots are published as after a new size.
        let live = live_states(vip, vip_id).unwrap_or(Some(Vec::new()));
        if let Some(buffer) = vip.buffers[target].as_mut().filter(|b| b.fits(size)) {
            write(&mut buffer.mapping, live.as_deref(), now_ns)
                .map_err(syscall_err(format!("writing the table of VIP id {vip_id}")))?;
        } else {
            let mut buffer = Buffer::create(size, vip_id)?;
            write(&mut buffer.mapping, live.as_deref(), now_ns)
                .map_err(syscall_err(format!("writing the table of VIP id {vip_id}")))?;
            // Not live yet: the kernel's grace-period wait in this update is the price
            // of a new buffer (first table of a VIP, or a new size).
            self.place(vip_id, target, buffer)?;
            if let Some(Some(buffer)) = self.by_id.get(&vip_id).map(|v| &v.buffers[target]) {
                self.pin_buffer(index(vip_id, target), &buffer.map)?;
            }
        }
        let epoch = self.next_epoch()?;
        let key = self.by_id.get(&vip_id).and_then(|v| v.key);
        if let Some(key) = key {
            self.write_info(vip_id, Some(&key), epoch)?;
        }
        let vip = self.by_id.entry(vip_id).or_default();
        let previous = (vip.live, vip.epoch);
        vip.live = Some(target);
        vip.epoch = epoch;
        if let Some(key) = key {
            // The switch: one element replacement in the VIPS hash map.
            if let Err(e) = self.write_vip(&key, vip_id) {
                let vip = self.by_id.entry(vip_id).or_default();
                (vip.live, vip.epoch) = previous;
                // Best effort: VIP_INFO ahead of VIPS only sends TCP hits of this VIP
                // through the slower check until the next install.
                let _ = self.write_info(vip_id, Some(&key), previous.1);
                return Err(e);
            }
        }
        let vip = self.by_id.entry(vip_id).or_default();
        if let Some(old) = previous.0 {
            vip.stale[old] = true;
        }
        Ok(())
    }

    /// Puts new `buffer` into its outer map as VIP `vip_id`'s buffer `target` (a
    /// grace-period wait when the entry is replaced) and records it; a replaced buffer
    /// of the other outer map loses its entry there (a size change). Not live until a
    /// `VIPS` entry selects it.
    fn place(&mut self, vip_id: u32, target: usize, buffer: Buffer) -> Result<(), DataplaneError> {
        let (at, std) = (index(vip_id, target), buffer.std);
        self.outers.of(std).set(at, &buffer.map)?;
        let slot = &mut self.by_id.entry(vip_id).or_default().buffers[target];
        let replaced = slot.replace(buffer).map(|b| b.std);
        self.outers.forget_moved(at, std, replaced)
    }

    /// Creates the buffers that the next installs of `tables` (VIP id, slots) will write
    /// and that are missing (a VIP's first table, or a new size), and puts them into
    /// `TABLES` and `TABLES_STD` in one batch update each. Each such insert waits for an
    /// RCU grace period (see the module documentation); a batch waits once for all of
    /// them, so a start with 500 VIPs waits for one grace period (two with tables of
    /// both kinds) instead of 500. A prepared buffer is not live (no `VIPS` entry
    /// selects it) until its install switches to it. The batches' grace periods also
    /// end the readers of every buffer replaced before them: none is stale afterwards.
    /// A prepared buffer that replaces one of the other map has that entry deleted
    /// after the batches (a size change: one grace period each).
    pub(crate) fn prepare(&mut self, tables: &[(u32, u32)]) -> Result<(), DataplaneError> {
        let mut missing: Vec<(u32, usize, u32)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for &(vip_id, size) in tables {
            let vip = self.by_id.get(&vip_id);
            let target = vip.and_then(|v| v.live).map_or(0, |live| 1 - live);
            let ready = vip
                .and_then(|v| v.buffers[target].as_ref())
                .is_some_and(|b| b.fits(size));
            if ready || !seen.insert(vip_id) {
                continue;
            }
            missing.push((vip_id, target, size));
        }
        let created = create_buffers(&missing)?;
        if created.is_empty() {
            return Ok(());
        }
        let (std, any): (Vec<_>, Vec<_>) = created.into_iter().partition(|(_, _, b)| b.std);
        let mut inserted = self.insert_batch(any, false)?;
        inserted.extend(self.insert_batch(std, true)?);
        for v in self.by_id.values_mut() {
            v.stale = [false; 2];
        }
        for (at, std, replaced) in inserted {
            self.outers.forget_moved(at, std, replaced)?;
            let (vip_id, target) = (at / 2, (at % 2) as usize);
            if let Some(Some(buffer)) = self.by_id.get(&vip_id).map(|v| &v.buffers[target]) {
                self.pin_buffer(at, &buffer.map)?;
            }
        }
        Ok(())
    }

    /// [`Self::prepare`]'s batch update of `created` (VIP id, buffer, the buffer) into
    /// `TABLES_STD` when `std`, else `TABLES`; the buffers written are recorded even
    /// when the batch fails part-way. Returns each one's index, `std` and whether the
    /// buffer it replaced was in `TABLES_STD` (if there was one).
    fn insert_batch(
        &mut self,
        created: Vec<(u32, usize, Buffer)>,
        std: bool,
    ) -> Result<Vec<(u32, bool, Option<bool>)>, DataplaneError> {
        if created.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<u32> = created
            .iter()
            .map(|(vip_id, target, _)| index(*vip_id, *target))
            .collect();
        let fds: Vec<u32> = created
            .iter()
            .map(|(_, _, b)| u32::try_from(b.map.fd().as_fd().as_raw_fd()).unwrap_or(u32::MAX))
            .collect();
        let outer = self.outers.of(std);
        let result = bpf_sys::update_batch(outer.map.fd().as_fd(), &keys, &fds);
        let written = match &result {
            Ok(n) | Err((n, _)) => *n,
        };
        let mut inserted = Vec::with_capacity(written);
        for (vip_id, target, buffer) in created.into_iter().take(written) {
            let slot = &mut self.by_id.entry(vip_id).or_default().buffers[target];
            inserted.push((index(vip_id, target), std, slot.as_ref().map(|b| b.std)));
            *slot = Some(buffer);
        }
        if let Err((_, error)) = result {
            return Err(syscall_err(format!(
                "inserting {} new table buffers into {}",
                keys.len(),
                self.outers.of(std).name
            ))(error));
        }
        #[cfg(feature = "test-harness")]
        {
            self.grace_periods += 1;
        }
        Ok(inserted)
    }

    /// Installs a header of size `size` and clean `slots`, unchecked, as VIP `vip_id`'s
    /// live buffer (tests of the data plane's guards), in the outer map `slots.len()`
    /// belongs in.
    #[cfg(feature = "test-harness")]
    pub(crate) fn install_raw(
        &mut self,
        vip_id: u32,
        size: u32,
        slots: &[u32],
    ) -> Result<(), DataplaneError> {
        let len = u32::try_from(slots.len()).unwrap_or(u32::MAX);
        let mut buffer = Buffer::create(len, vip_id)?;
        buffer.mapping.write_raw(size, slots);
        let target = self.by_id.get(&vip_id).and_then(|v| v.live).unwrap_or(0);
        self.place(vip_id, target, buffer)?;
        let vip = self.by_id.entry(vip_id).or_default();
        vip.live = Some(target);
        let key = vip.key;
        // The entry names the map the buffer is in (`VIP_TABLE_STD`).
        key.map_or(Ok(()), |key| self.write_vip(&key, vip_id))
    }

    /// Where VIP `vip_id`'s buffers A and B are: (in `TABLES`, in `TABLES_STD`) each,
    /// read from the outer maps (tests of the move between them).
    #[cfg(feature = "test-harness")]
    pub(crate) fn places(&self, vip_id: u32) -> Result<[(bool, bool); 2], DataplaneError> {
        let present = |outer: &Outer, at: u32| {
            let mut id = [0u8; 4];
            bpf_sys::lookup(outer.map.fd().as_fd(), &at.to_ne_bytes(), &mut id)
                .map_err(syscall_err(format!("looking up {}[{at}]", outer.name)))
        };
        let mut places = [(false, false); 2];
        for (buffer, place) in places.iter_mut().enumerate() {
            let at = index(vip_id, buffer);
            *place = (
                present(&self.outers.any, at)?,
                present(&self.outers.std, at)?,
            );
        }
        Ok(places)
    }

    /// Drops both buffers of VIP `vip_id` (after its `VIPS` entry is gone).
    pub(crate) fn remove(&mut self, vip_id: u32) -> Result<(), DataplaneError> {
        let Some(vip) = self.by_id.get(&vip_id) else {
            return Ok(());
        };
        if vip.key.is_some() {
            return Err(DataplaneError::OutOfRange(format!(
                "the table of VIP id {vip_id} is still selected by a VIP entry"
            )));
        }
        for buffer in 0..2 {
            if let Some(b) = &vip.buffers[buffer] {
                self.outers.of(b.std).delete(index(vip_id, buffer))?;
                if let Some(pins) = &self.pins {
                    let _ = std::fs::remove_file(pins.dir.join(index(vip_id, buffer).to_string()));
                }
            }
        }
        self.by_id.remove(&vip_id);
        Ok(())
    }

    /// VIP `vip_id`'s live table.
    pub(crate) fn read(&self, vip_id: u32) -> Result<Option<InstalledTable>, DataplaneError> {
        let Some(buffer) = self.by_id.get(&vip_id).and_then(VipBuffers::live_buffer) else {
            return Ok(None);
        };
        let (generation, slots) = buffer
            .mapping
            .read_table()
            .map_err(syscall_err(format!("reading the table of VIP id {vip_id}")))?;
        Ok(Some(InstalledTable { generation, slots }))
    }

    /// Sets whether VIP `vip_id` takes the fast path, and rewrites its `VIPS` entry if
    /// it has one (the table buffer and epoch unchanged).
    pub(crate) fn set_fast_path(&mut self, vip_id: u32, on: bool) -> Result<(), DataplaneError> {
        let vip = self.by_id.entry(vip_id).or_default();
        let previous = vip.fast;
        vip.fast = on;
        let Some(key) = vip.key else {
            return Ok(());
        };
        let written = self.write_vip(&key, vip_id);
        if written.is_err() {
            self.by_id.entry(vip_id).or_default().fast = previous;
        }
        written
    }

    /// Whether VIP `vip_id`'s entry is in `VIP_CACHE`.
    pub(crate) fn cached(&self, vip_id: u32) -> bool {
        self.by_id
            .get(&vip_id)
            .and_then(|v| v.key)
            .is_some_and(|key| self.cache.holds(&key, vip_id))
    }

    /// Whether VIP `vip_id` takes the fast path.
    pub(crate) fn fast_path(&self, vip_id: u32) -> bool {
        self.by_id.get(&vip_id).is_some_and(|v| v.fast)
    }

    /// Sets whether VIP `vip_id`'s misses on dirty slots carry second-chance candidates,
    /// and rewrites its `VIPS` entry if it has one (the table buffer and epoch
    /// unchanged).
    pub(crate) fn set_second_chance(
        &mut self,
        vip_id: u32,
        on: bool,
    ) -> Result<(), DataplaneError> {
        let vip = self.by_id.entry(vip_id).or_default();
        let previous = vip.second_chance;
        vip.second_chance = on;
        let Some(key) = vip.key else {
            return Ok(());
        };
        let written = self.write_vip(&key, vip_id);
        if written.is_err() {
            self.by_id.entry(vip_id).or_default().second_chance = previous;
        }
        written
    }

    /// Whether VIP `vip_id` offers second-chance candidates.
    pub(crate) fn second_chance(&self, vip_id: u32) -> bool {
        self.by_id.get(&vip_id).is_some_and(|v| v.second_chance)
    }

    /// Sets VIP `vip_id`'s hash fields and affinity timeout (`AFFINITY_TIMEOUT`), and
    /// rewrites its `VIPS` entry if it has one (the table buffer and epoch unchanged).
    pub(crate) fn set_hash_fields(
        &mut self,
        vip_id: u32,
        fields: HashFields,
    ) -> Result<(), DataplaneError> {
        // The timeout first: the entry's `VIP_AFFINITY` never reads a stale one.
        let timeout_ns = u64::from(fields.affinity_secs) * 1_000_000_000;
        self.affinity_timeout
            .set(vip_id, timeout_ns, 0)
            .map_err(map_err(maps::AFFINITY_TIMEOUT, "update"))?;
        let vip = self.by_id.entry(vip_id).or_default();
        let previous = vip.hash;
        vip.hash = fields;
        let Some(key) = vip.key else {
            return Ok(());
        };
        let written = self.write_vip(&key, vip_id);
        if written.is_err() {
            self.by_id.entry(vip_id).or_default().hash = previous;
        }
        written
    }

    /// VIP `vip_id`'s hash fields.
    pub(crate) fn hash_fields(&self, vip_id: u32) -> HashFields {
        self.by_id
            .get(&vip_id)
            .map_or_else(HashFields::default, |v| v.hash)
    }

    /// The slot states of VIP `vip_id`'s live table (owners included).
    pub(crate) fn states(&self, vip_id: u32) -> Result<Option<Vec<SlotState>>, DataplaneError> {
        let vip = self.by_id.get(&vip_id);
        vip.map_or(Ok(None), |vip| live_states(vip, vip_id))
    }

    /// Slot `slot`'s state in VIP `vip_id`'s live table; `None` without a live table or
    /// beyond it.
    pub(crate) fn state(
        &self,
        vip_id: u32,
        slot: u32,
    ) -> Result<Option<SlotState>, DataplaneError> {
        let Some(buffer) = self.by_id.get(&vip_id).and_then(VipBuffers::live_buffer) else {
            return Ok(None);
        };
        buffer
            .mapping
            .read_state(slot as usize)
            .map_err(syscall_err(format!(
                "reading slot {slot} of VIP id {vip_id}"
            )))
    }

    /// Rule C4 on VIP `vip_id`'s live table: slot `slot` turns clean if its state word
    /// still holds `read` ([`table_map::Mapping::commit_clean`]). A table installed
    /// since the read bumped every dirty slot's epoch ([`SlotState::republished`]), so
    /// the commit fails then.
    pub(crate) fn commit_clean(&self, vip_id: u32, slot: usize, read: &SlotState) -> bool {
        self.by_id
            .get(&vip_id)
            .and_then(VipBuffers::live_buffer)
            .is_some_and(|buffer| buffer.mapping.commit_clean(slot, read))
    }

    /// The VIP ids with a live table.
    pub(crate) fn vip_ids(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self
            .by_id
            .iter()
            .filter(|(_, v)| v.live.is_some())
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// The `VIPS` entry of `key` (its id, live buffer and table epoch), if it has one.
    pub(crate) fn vip_entry(&self, key: &VipKey) -> Result<Option<VipEntry>, DataplaneError> {
        match self.vips.get(key, 0) {
            Ok(entry) => Ok(Some(entry)),
            Err(MapError::KeyNotFound) => Ok(None),
            Err(e) => Err(map_err(maps::VIPS, "lookup")(e)),
        }
    }

    /// `key`'s `VIP_CACHE` slot as the program reads it (tests).
    #[cfg(feature = "test-harness")]
    pub(crate) fn cache_slot(&self, key: &VipKey) -> lb_common::types::VipCacheSlot {
        self.cache.slot(key)
    }

    /// Overwrites `key`'s `VIP_CACHE` slot with `slot` (tests of what the program trusts).
    #[cfg(feature = "test-harness")]
    pub(crate) fn write_cache_slot(&mut self, key: &VipKey, slot: &lb_common::types::VipCacheSlot) {
        self.cache.overwrite(key, slot);
    }

    /// Deletes `key`'s `VIPS` entry alone, its cache slot and `VIP_INFO` kept (tests).
    #[cfg(feature = "test-harness")]
    pub(crate) fn delete_vips_entry(&mut self, key: &VipKey) -> Result<(), DataplaneError> {
        self.vips.remove(key).map_err(map_err(maps::VIPS, "delete"))
    }

    /// Writes VIP `vip_id`'s `VIP_INFO` element, then its `VIPS` entry selecting its
    /// live buffer and epoch.
    pub(crate) fn set_vip(&mut self, key: &VipKey, vip_id: u32) -> Result<(), DataplaneError> {
        let epoch = self.by_id.entry(vip_id).or_default().epoch;
        self.write_info(vip_id, Some(key), epoch)?;
        self.write_vip(key, vip_id)?;
        self.by_id.entry(vip_id).or_default().key = Some(*key);
        Ok(())
    }

    /// Removes a `VIPS` entry, then clears its id's `VIP_INFO` element.
    pub(crate) fn remove_vip(&mut self, key: &VipKey) -> Result<(), DataplaneError> {
        let ids: Vec<u32> = self
            .by_id
            .iter()
            .filter(|(_, v)| v.key.as_ref() == Some(key))
            .map(|(id, _)| *id)
            .collect();
        for id in &ids {
            self.cache.withdraw(key, *id);
        }
        absent_is_ok(self.vips.remove(key)).map_err(map_err(maps::VIPS, "delete"))?;
        for id in ids {
            self.write_info(id, None, 0)?;
            if let Some(v) = self.by_id.get_mut(&id) {
                v.key = None;
                v.fast = false;
                v.hash = HashFields::default();
            }
        }
        Ok(())
    }
}
