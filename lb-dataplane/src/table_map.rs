//! Inner Maglev table maps, created and filled directly: `BPF_MAP_CREATE` of a
//! `BPF_MAP_TYPE_ARRAY` of 16-byte cells (`lb_common::types::TableCell`) with
//! `lb_common::maps::TABLE_MAP_FLAGS` (`BPF_F_INNER_MAP | BPF_F_MMAPABLE`), or for a
//! table of `STD_TABLE_SIZE` slots `STD_TABLE_MAP_FLAGS` (`BPF_F_MMAPABLE`), then the
//! header and slots written through an `mmap` of the map (kernel doc:
//! `Documentation/bpf/map_array.rst`, "BPF_F_MMAPABLE"). One pass over memory instead
//! of one `bpf_map_update_elem` per slot keeps a 65,537-slot table fill in the tens of
//! microseconds.
//!
//! Each slot carries its owner and its fast-path state (`lb_common::fastpath`). A new
//! table's states follow from the live table's ([`SlotState::republished`]); the
//! cleaning turns a dirty slot clean with a compare-and-swap on its state word, in the
//! live mapping ([`Mapping::commit_clean`]).
//!
//! The kernel stores array elements at a stride of `round_up(value_size, 8)` bytes
//! (`kernel/bpf/arraymap.c`): 16, the cell itself.
//!
//! aya 0.14 can create standalone maps but exposes neither the flags' effect nor an
//! mmap of them: the map is created through [`bpf_sys`] (where every raw BPF definition
//! of the crate lives) and mapped here.

use std::{
    io,
    os::fd::{AsRawFd as _, BorrowedFd, OwnedFd},
    ptr::NonNull,
};

use super::bpf_sys;

use lb_common::{
    fastpath::SlotState,
    maps::{
        STD_TABLE_MAP_FLAGS, STD_TABLE_SIZE, TABLE_HEADER_INDEX, TABLE_HEADER_LEN, TABLE_MAP_FLAGS,
    },
    types::{TableCell, TableHeader},
};

/// Whether a new table of `size` slots goes into `TABLES_STD` (else `TABLES`): it has
/// [`STD_TABLE_SIZE`] slots.
pub(crate) const fn std_sized(size: u32) -> bool {
    size == STD_TABLE_SIZE
}

/// The inner-map flags of a table of `size` slots: [`STD_TABLE_MAP_FLAGS`] for
/// [`STD_TABLE_SIZE`] (its buffer goes into `TABLES_STD`), [`TABLE_MAP_FLAGS`]
/// otherwise (`TABLES`).
pub(crate) const fn flags_for(size: u32) -> u32 {
    if std_sized(size) {
        STD_TABLE_MAP_FLAGS
    } else {
        TABLE_MAP_FLAGS
    }
}

/// Whether a table map of `flags` and `entries` cells belongs in `TABLES_STD`: exactly
/// that map's inner shape. A map of [`STD_TABLE_SIZE`] slots created before layout 6
/// has [`TABLE_MAP_FLAGS`] and stays in `TABLES`.
pub(crate) fn is_std(flags: u32, entries: usize) -> bool {
    flags == STD_TABLE_MAP_FLAGS && entries == (STD_TABLE_SIZE + TABLE_HEADER_LEN) as usize
}

/// Creates an empty table map for `size` slots (`size + TABLE_HEADER_LEN` cells), with
/// the flags of the outer map it belongs in ([`flags_for`]).
pub(crate) fn create(size: u32) -> io::Result<OwnedFd> {
    create_with(size, flags_for(size))
}

/// [`create`] with inner-map flags `flags`.
pub(crate) fn create_with(size: u32, flags: u32) -> io::Result<OwnedFd> {
    let shape = bpf_sys::MapShape {
        map_type: bpf_sys::BPF_MAP_TYPE_ARRAY,
        key_size: 4,
        value_size: CELL_VALUE_SIZE,
        max_entries: size
            .checked_add(TABLE_HEADER_LEN)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?,
        flags,
    };
    bpf_sys::create_map(shape, "lb_table")
}

/// One array element as laid out in the mapping.
type Cell = TableCell;

/// Bytes the kernel stores per entry of a table map (16, a multiple of 8).
pub(crate) const CELL_BYTES: u64 = size_of::<Cell>() as u64;
const _: () = assert!(CELL_BYTES.is_multiple_of(8));
/// The map's value size: one cell (16 bytes).
const CELL_VALUE_SIZE: u32 = 16;
const _: () = assert!(CELL_VALUE_SIZE as u64 == CELL_BYTES);

/// A shared memory mapping of the entries of an mmapable array map (a table map's cells
/// by default; also `VIP_CACHE`'s slots), unmapped on drop. `T`'s size must be a
/// multiple of 8 (the kernel's element stride).
pub(crate) struct Mapping<T = Cell> {
    ptr: NonNull<T>,
    entries: usize,
    len: usize,
}

impl<T> Mapping<T> {
    /// Maps the `entries` entries of the `u32`-keyed array map `fd` (read-write when
    /// `writable`).
    pub(crate) fn new(fd: BorrowedFd<'_>, entries: usize, writable: bool) -> io::Result<Self> {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .map_err(|_| io::Error::last_os_error())?;
        let bytes = entries
            .checked_mul(size_of::<T>())
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let len = bytes.div_ceil(page) * page;
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a fresh shared mapping of an mmapable BPF array; the kernel checks the
        // length against the map's size.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast::<T>())
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidData))?;
        Ok(Self { ptr, entries, len })
    }

    /// The elements.
    pub(crate) fn cells(&self) -> &[T] {
        // SAFETY: the mapping covers `entries` elements and lives as long as self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.entries) }
    }

    /// The elements, writable (only for mappings created writable).
    pub(crate) fn cells_mut(&mut self) -> &mut [T] {
        // SAFETY: as above; &mut self guarantees exclusive access through this mapping.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.entries) }
    }
}

impl Mapping {
    /// The header.
    fn header(&self) -> Option<TableHeader> {
        self.cells()
            .get(TABLE_HEADER_INDEX as usize)
            .map(TableCell::header)
    }

    /// The slot cells of the table the header describes.
    fn slot_cells(&self) -> io::Result<&[Cell]> {
        let invalid = || io::Error::from(io::ErrorKind::InvalidData);
        let size = self.header().ok_or_else(invalid)?.size as usize;
        let header = TABLE_HEADER_LEN as usize;
        self.cells().get(header..header + size).ok_or_else(invalid)
    }

    /// Writes a table: the slots (backend ids, `u32` or the controller's compact `u16`)
    /// with their states, then the header. `live`: the slots of the table in force,
    /// from which the states follow ([`SlotState::republished`]); a table of another
    /// size gives every slot [`SlotState::resized`], no table clean slots. The mapping
    /// must hold exactly `slots.len() + TABLE_HEADER_LEN` cells.
    pub(crate) fn write_table<T: Copy + Into<u32>>(
        &mut self,
        generation: u32,
        slots: &[T],
        live: Option<&[SlotState]>,
        now_ns: u64,
    ) -> io::Result<()> {
        let size =
            u32::try_from(slots.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        if slots.len() + TABLE_HEADER_LEN as usize != self.entries {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        let header = TABLE_HEADER_LEN as usize;
        let cells = &mut self.cells_mut()[header..];
        match live {
            // A VIP's first table (every slot clean, [`SlotState::published`] without
            // a live table): one loop without the per-slot choice, which a start of
            // many VIPs runs over every slot of every table.
            None => {
                for (cell, owner) in cells.iter_mut().zip(slots) {
                    *cell = TableCell::of_slot(&SlotState::clean((*owner).into()));
                }
            }
            Some(_) => {
                for (slot, (cell, owner)) in cells.iter_mut().zip(slots).enumerate() {
                    let owner = (*owner).into();
                    let state = SlotState::published(live, slots.len(), slot, owner, now_ns);
                    *cell = TableCell::of_slot(&state);
                }
            }
        }
        self.cells_mut()[TABLE_HEADER_INDEX as usize] =
            TableCell::of_header(TableHeader { size, generation });
        Ok(())
    }

    /// Rule R1 (a two-phase rollout's *learn* phase, `lb_common::second_chance` SC6):
    /// writes the table in force, `live` (its states, owners included, at `generation`),
    /// with each slot that `next` (the next table's backend ids, of the same size) moves
    /// marked pending with its next owner ([`SlotState::learned`]); the owners do not
    /// change. `InvalidInput` when the sizes differ or the mapping does not hold
    /// `live.len() + TABLE_HEADER_LEN` cells. Returns the slots marked pending.
    pub(crate) fn write_learned<T: Copy + Into<u32>>(
        &mut self,
        generation: u32,
        live: &[SlotState],
        next: &[T],
        now_ns: u64,
    ) -> io::Result<u32> {
        let size =
            u32::try_from(live.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        if live.len() != next.len() || live.len() + TABLE_HEADER_LEN as usize != self.entries {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        let header = TABLE_HEADER_LEN as usize;
        let mut pending = 0;
        let cells = &mut self.cells_mut()[header..];
        for (cell, (old, owner)) in cells.iter_mut().zip(live.iter().zip(next)) {
            let state = old.learned((*owner).into(), now_ns);
            pending += u32::from(state.pending() != 0);
            *cell = TableCell::of_slot(&state);
        }
        self.cells_mut()[TABLE_HEADER_INDEX as usize] =
            TableCell::of_header(TableHeader { size, generation });
        Ok(pending)
    }

    /// The generation in the header; `None` when unreadable.
    pub(crate) fn generation(&self) -> Option<u32> {
        self.header().map(|h| h.generation)
    }

    /// Writes a table carried over from an older map layout
    /// (`crate::pinned::migrate`): every slot keeps its owner, which is also its clean
    /// owner, and is dirty since `now_ns` ([`SlotState::marked`]): the conntrack pins
    /// the older program made may name other backends, and the cleaning walk turns a
    /// slot clean only after the quiet time. The mapping must hold exactly
    /// `owners.len() + TABLE_HEADER_LEN` cells.
    pub(crate) fn write_migrated(
        &mut self,
        generation: u32,
        owners: &[u32],
        now_ns: u64,
    ) -> io::Result<()> {
        let size = u32::try_from(owners.len())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        if owners.len() + TABLE_HEADER_LEN as usize != self.entries {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        let header = TABLE_HEADER_LEN as usize;
        for (cell, owner) in self.cells_mut()[header..].iter_mut().zip(owners) {
            *cell = TableCell::of_slot(&SlotState::clean(*owner).marked(now_ns));
        }
        self.cells_mut()[TABLE_HEADER_INDEX as usize] =
            TableCell::of_header(TableHeader { size, generation });
        Ok(())
    }

    /// Writes a header of size `size` and clean slots owned by `slots`, unchecked (the
    /// data plane's guard tests: a size of 0 or beyond the map).
    #[cfg(feature = "test-harness")]
    pub(crate) fn write_raw(&mut self, size: u32, slots: &[u32]) {
        let header = TABLE_HEADER_LEN as usize;
        for (cell, owner) in self.cells_mut()[header..].iter_mut().zip(slots) {
            *cell = TableCell::of_slot(&SlotState::clean(*owner));
        }
        self.cells_mut()[TABLE_HEADER_INDEX as usize] = TableCell::of_header(TableHeader {
            size,
            generation: 0,
        });
    }

    /// Copies every cell of `from` (a mapping of as many cells) into this mapping (test
    /// support: a table moved into a map of other flags).
    #[cfg(feature = "test-harness")]
    pub(crate) fn copy_from(&mut self, from: &Mapping) -> io::Result<()> {
        if from.entries != self.entries {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        self.cells_mut().copy_from_slice(from.cells());
        Ok(())
    }

    /// Reads (generation, slots' owners) of the table in the mapping.
    pub(crate) fn read_table(&self) -> io::Result<(u32, Vec<u32>)> {
        let generation = self
            .header()
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidData))?
            .generation;
        Ok((
            generation,
            self.slot_cells()?.iter().map(TableCell::owner).collect(),
        ))
    }

    /// Reads slot `slot`'s state (owner included); `None` beyond the table.
    pub(crate) fn read_state(&self, slot: usize) -> io::Result<Option<SlotState>> {
        Ok(self.slot_cells()?.get(slot).map(TableCell::slot))
    }

    /// Reads the slots' states (owner included) of the table in the mapping.
    pub(crate) fn read_states(&self) -> io::Result<Vec<SlotState>> {
        Ok(self.slot_cells()?.iter().map(TableCell::slot).collect())
    }

    /// Rule C4: turns slot `slot` clean when its state word still holds `read` (the
    /// state the walk read), with one atomic compare-and-swap on the word (a concurrent
    /// epoch bump by the XDP program makes it fail). Whether it committed; `false` too
    /// for a slot beyond the table or a state the commit refuses
    /// (`lb_common::fastpath::clean_commit`).
    pub(crate) fn commit_clean(&self, slot: usize, read: &SlotState) -> bool {
        let Some(clean) = lb_common::fastpath::clean_commit(read, read.epoch) else {
            return false;
        };
        let Ok(size) = self.slot_cells().map(<[Cell]>::len) else {
            return false;
        };
        if slot >= size {
            return false;
        }
        let index = TABLE_HEADER_LEN as usize + slot;
        // SAFETY: `index` is within the mapping (checked above); the word is 8-byte
        // aligned (cells are 16-byte, page-aligned mapping) and shared with the kernel,
        // which only ever accesses it atomically or by plain loads.
        let word = unsafe {
            std::sync::atomic::AtomicU64::from_ptr(&raw mut (*self.ptr.as_ptr().add(index)).lo)
        };
        word.compare_exchange(
            TableCell::of_slot(read).lo,
            TableCell::of_slot(&clean).lo,
            std::sync::atomic::Ordering::SeqCst,
            std::sync::atomic::Ordering::SeqCst,
        )
        .is_ok()
    }
}

// SAFETY: the mapping is plain shared memory owned by this value; it has no thread
// affinity, and `&mut self` guards every write.
unsafe impl<T> Send for Mapping<T> {}

impl<T> Drop for Mapping<T> {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the region mapped in `new`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::{AsFd as _, FromRawFd as _};

    use super::*;

    /// A mapping of `entries` cells over a memory file (the same `mmap` as a table
    /// map's, without the kernel's BPF).
    fn memory_mapping(entries: usize) -> Mapping {
        // SAFETY: memfd_create with a NUL-terminated name; the fd is owned below.
        let raw = unsafe { libc::memfd_create(c"lb-table-test".as_ptr(), 0) };
        assert!(raw >= 0, "memfd_create: {}", io::Error::last_os_error());
        // SAFETY: a fresh fd nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let bytes = i64::try_from(entries * size_of::<Cell>()).unwrap();
        // SAFETY: ftruncate of the fd just created.
        assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), bytes) }, 0);
        Mapping::new(fd.as_fd(), entries, true).unwrap()
    }

    #[test]
    fn only_a_table_of_the_standard_size_takes_the_standard_flags() {
        assert_eq!(flags_for(STD_TABLE_SIZE), STD_TABLE_MAP_FLAGS);
        assert_eq!(STD_TABLE_MAP_FLAGS, 0x400, "BPF_F_MMAPABLE only");
        for size in [1, 251, STD_TABLE_SIZE - 2, STD_TABLE_SIZE + 2, 1_048_573] {
            assert_eq!(flags_for(size), TABLE_MAP_FLAGS, "{size}");
        }
        let std_entries = (STD_TABLE_SIZE + TABLE_HEADER_LEN) as usize;
        assert!(is_std(STD_TABLE_MAP_FLAGS, std_entries));
        // A buffer of the standard size made before layout 6 stays in `TABLES`.
        assert!(!is_std(TABLE_MAP_FLAGS, std_entries));
        assert!(!is_std(STD_TABLE_MAP_FLAGS, std_entries - 1));
    }

    #[test]
    fn a_written_table_holds_the_published_states_with_or_without_a_live_one() {
        let owners: Vec<u16> = (0..1_009_u16).map(|s| s % 7 + 1).collect();
        let mut live: Vec<SlotState> = (0..1_009_u32).map(|s| SlotState::clean(s % 5)).collect();
        live[3] = live[3].bumped();
        let now_ns = 5_000_000_000;
        for live in [None, Some(&live[..]), Some(&live[..10])] {
            let mut mapping = memory_mapping(owners.len() + TABLE_HEADER_LEN as usize);
            mapping.write_table(9, &owners, live, now_ns).unwrap();
            let expected: Vec<SlotState> = (0..owners.len())
                .map(|s| SlotState::published(live, owners.len(), s, u32::from(owners[s]), now_ns))
                .collect();
            assert_eq!(mapping.read_states().unwrap(), expected);
            assert_eq!(mapping.generation(), Some(9));
        }
    }
}
