//! Inner Maglev table maps, created and filled directly: `BPF_MAP_CREATE` of a
//! `BPF_MAP_TYPE_ARRAY` of `u32` with `lb_common::maps::TABLE_MAP_FLAGS`
//! (`BPF_F_INNER_MAP | BPF_F_MMAPABLE`), then the header and slots written through an
//! `mmap` of the map (kernel doc: `Documentation/bpf/map_array.rst`, "BPF_F_MMAPABLE").
//! One pass over memory instead of one `bpf_map_update_elem` per slot keeps a
//! 65,537-slot table fill in the tens of microseconds.
//!
//! The kernel stores array elements at a stride of `round_up(value_size, 8)` bytes
//! (`kernel/bpf/arraymap.c`), so in the mapping entry `i` is the first `u32` of the
//! `i`-th 8-byte cell.
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

use lb_common::maps::{
    TABLE_GENERATION_INDEX, TABLE_HEADER_LEN, TABLE_MAP_FLAGS, TABLE_SIZE_INDEX,
};

/// Creates an empty table map for `size` slots (`size + TABLE_HEADER_LEN` entries).
pub(crate) fn create(size: u32) -> io::Result<OwnedFd> {
    let shape = bpf_sys::MapShape {
        map_type: bpf_sys::BPF_MAP_TYPE_ARRAY,
        key_size: 4,
        value_size: 4,
        max_entries: size
            .checked_add(TABLE_HEADER_LEN)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?,
        flags: TABLE_MAP_FLAGS,
    };
    bpf_sys::create_map(shape, "lb_table")
}

/// One array element as laid out in the mapping: the `u32` value, then padding.
type Cell = [u32; 2];

/// Bytes the kernel stores per entry of a table map (`round_up(4, 8)`).
pub(crate) const CELL_BYTES: u64 = size_of::<Cell>() as u64;

/// A shared memory mapping of a table map's entries, unmapped on drop.
pub(crate) struct Mapping {
    ptr: NonNull<Cell>,
    entries: usize,
    len: usize,
}

impl Mapping {
    /// Maps the `entries` entries of the `u32` array map `fd` (read-write when
    /// `writable`).
    pub(crate) fn new(fd: BorrowedFd<'_>, entries: usize, writable: bool) -> io::Result<Self> {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .map_err(|_| io::Error::last_os_error())?;
        let bytes = entries
            .checked_mul(size_of::<Cell>())
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
        let ptr = NonNull::new(ptr.cast::<Cell>())
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidData))?;
        Ok(Self { ptr, entries, len })
    }

    /// The element cells.
    fn cells(&self) -> &[Cell] {
        // SAFETY: the mapping covers `entries` cells and lives as long as self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.entries) }
    }

    /// The element cells, writable (only for mappings created writable).
    fn cells_mut(&mut self) -> &mut [Cell] {
        // SAFETY: as above; &mut self guarantees exclusive access through this mapping.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.entries) }
    }

    /// Entry `i`.
    fn get(&self, i: usize) -> Option<u32> {
        self.cells().get(i).map(|cell| cell[0])
    }

    /// Writes a table: header (size, generation) then the slots (backend ids, `u32` or
    /// the controller's compact `u16`). The mapping must hold exactly
    /// `slots.len() + TABLE_HEADER_LEN` entries.
    pub(crate) fn write_table<T: Copy + Into<u32>>(
        &mut self,
        generation: u32,
        slots: &[T],
    ) -> io::Result<()> {
        let size =
            u32::try_from(slots.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        if slots.len() + TABLE_HEADER_LEN as usize != self.entries {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        self.write(TABLE_HEADER_LEN as usize, slots);
        self.write(TABLE_GENERATION_INDEX as usize, &[generation]);
        self.write(TABLE_SIZE_INDEX as usize, &[size]);
        Ok(())
    }

    /// Writes `entries` verbatim from entry 0 (header included).
    #[cfg(feature = "test-harness")]
    pub(crate) fn write_raw(&mut self, entries: &[u32]) {
        self.write(0, entries);
    }

    /// Reads (generation, slots) of the table in the mapping.
    pub(crate) fn read_table(&self) -> io::Result<(u32, Vec<u32>)> {
        let invalid = || io::Error::from(io::ErrorKind::InvalidData);
        let size = self.get(TABLE_SIZE_INDEX as usize).ok_or_else(invalid)? as usize;
        let generation = self
            .get(TABLE_GENERATION_INDEX as usize)
            .ok_or_else(invalid)?;
        let header = TABLE_HEADER_LEN as usize;
        let cells = self
            .cells()
            .get(header..header + size)
            .ok_or_else(invalid)?;
        Ok((generation, cells.iter().map(|cell| cell[0]).collect()))
    }

    /// Writes `values` into entries `start..start + values.len()`.
    fn write<T: Copy + Into<u32>>(&mut self, start: usize, values: &[T]) {
        for (cell, value) in self.cells_mut()[start..start + values.len()]
            .iter_mut()
            .zip(values)
        {
            cell[0] = (*value).into();
        }
    }
}

// SAFETY: the mapping is plain shared memory owned by this value; it has no thread
// affinity, and `&mut self` guards every write.
unsafe impl Send for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the region mapped in `new`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
