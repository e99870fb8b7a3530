//! Layout 1 to layout 2 (the fast path's slot state).
//!
//! What changed (the objects of the two builds compared map by map, see the tests):
//! - `TABLES`' inner maps, the table buffers: layout 1 has `u32` cells, two header
//!   cells (table size M, generation) then one backend id per slot; layout 2 has
//!   16-byte `TableCell`s, one header cell then one slot state per slot
//!   (`lb_common::types::TableCell`). Every pinned buffer (`tables/<index>`) is
//!   converted into a new buffer at the same `TABLES` index of a new `TABLES`; each
//!   slot keeps its owner, which is also its clean owner, and is dirty from now
//!   (`crate::table_map::Mapping::write_migrated`, and why in the fast path's chapter).
//!   The `VIPS` entries select buffers by index and keep their table epochs, so the
//!   conntrack pins stay valid.
//! - `VIP_STATS` (per CPU): `VipStats` grew from 72 to 80 bytes (`clean_slot_hits`,
//!   appended): each CPU's counters are copied, the new one starts at 0
//!   ([`grow::per_cpu`], which converts to this build's size, that of any later layout).
//! - `FAST_FILTER` is new: created empty (no VIP of layout 1 takes the fast path).

use std::{
    os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, OwnedFd},
    path::Path,
};

use lb_common::maps::{FAST_FILTER, TABLES, VIP_STATS};

use super::{
    Action, Context, MapMigration, Step, create_empty, create_like, def, grow, inner_template,
};
use crate::{
    bpf_sys,
    pinned::{PinError, io_err},
    table_map,
};

/// The step.
pub(super) const STEP: Step = Step {
    from: 1,
    maps: &[TABLES, VIP_STATS, FAST_FILTER],
    convert: Some(run),
};

/// Layout 1's header cells in a table buffer (size, generation).
const V1_HEADER_LEN: u32 = 2;
/// Layout 1's table cell value size, bytes (a `u32`); the kernel's stride is 8.
const V1_CELL_VALUE: u32 = 4;

fn run(ctx: &Context<'_>) -> Result<Vec<MapMigration>, PinError> {
    Ok(vec![
        tables(ctx)?,
        grow::per_cpu(ctx, VIP_STATS)?,
        create_empty(ctx, FAST_FILTER)?,
    ])
}

/// A layout-1 table buffer: (generation, owners).
fn read_v1_buffer(fd: BorrowedFd<'_>, entries: usize) -> std::io::Result<(u32, Vec<u32>)> {
    let invalid = || std::io::Error::from(std::io::ErrorKind::InvalidData);
    // SAFETY: sysconf has no preconditions.
    let page =
        usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).map_err(|_| invalid())?;
    let len = (entries * 8).div_ceil(page) * page;
    // SAFETY: a read-only shared mapping of an mmapable BPF array, unmapped below; the
    // kernel checks the length against the map's size.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the mapping covers `entries` 8-byte cells (the kernel's stride for a
    // 4-byte value), each starting with its `u32`.
    let cells = unsafe { std::slice::from_raw_parts(ptr.cast::<[u32; 2]>(), entries) };
    let size = cells.first().map_or(0, |c| c[0]) as usize;
    let generation = cells.get(1).map_or(0, |c| c[0]);
    let owners = cells
        .get(V1_HEADER_LEN as usize..V1_HEADER_LEN as usize + size)
        .map(|s| s.iter().map(|c| c[0]).collect());
    // SAFETY: unmaps exactly the region mapped above; `cells` is not used after.
    unsafe { libc::munmap(ptr, len) };
    match owners {
        Some(owners) if size > 0 => Ok((generation, owners)),
        _ => Err(invalid()),
    }
}

/// The buffer pinned at `path` in layout 2: converted from layout 1, or reused when an
/// earlier run of this step already converted it. `(fd, slots, converted)`.
fn convert_buffer(path: &Path, fd: OwnedFd) -> std::io::Result<(OwnedFd, u64, bool)> {
    let info = bpf_sys::map_info(fd.as_fd())?;
    if info.value_size != V1_CELL_VALUE {
        let slots = u64::from(info.max_entries.saturating_sub(1));
        return Ok((fd, slots, false));
    }
    let (generation, owners) = read_v1_buffer(fd.as_fd(), info.max_entries as usize)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    let size = u32::try_from(owners.len()).map_err(|_| std::io::ErrorKind::InvalidData)?;
    // `TABLES`' inner flags whatever the size: the `VIPS` entries of layout 1 name
    // buffers in `TABLES` (a buffer moves into `TABLES_STD` at its VIP's next install).
    let new = table_map::create_with(size, lb_common::maps::TABLE_MAP_FLAGS)?;
    let entries = owners.len() + lb_common::maps::TABLE_HEADER_LEN as usize;
    let mut mapping = table_map::Mapping::new(new.as_fd(), entries, true)?;
    mapping.write_migrated(generation, &owners, crate::kernel::conntrack_now_ns())?;
    Ok((new, u64::from(size), true))
}

/// `TABLES` and every pinned buffer: new buffers in a new `TABLES`, pinned in place of
/// the old ones (buffers first, the outer map last).
fn tables(ctx: &Context<'_>) -> Result<MapMigration, PinError> {
    let def = def(ctx, TABLES)?;
    let template = inner_template(def)
        .and_then(|t| t.ok_or_else(|| std::io::Error::other("TABLES has no inner template")))
        .map_err(io_err(
            "creating a table buffer template for",
            &ctx.dir.shown(),
        ))?;
    let outer = create_like(def, Some(template.as_fd())).map_err(io_err(
        "creating",
        &ctx.dir.shown().join("maps").join(TABLES),
    ))?;
    let tables_dir = ctx.dir.path().join("tables");
    let shown_dir = ctx.dir.shown().join("tables");
    let mut buffers = Vec::new();
    let (mut slots, mut converted) = (0, 0);
    for entry in std::fs::read_dir(&tables_dir)
        .map_err(io_err("reading", &shown_dir))?
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(index) = name.parse::<u32>() else {
            continue;
        };
        let shown = shown_dir.join(&name);
        let Some(fd) = bpf_sys::open_pinned(&entry.path()).map_err(io_err("opening", &shown))?
        else {
            continue;
        };
        let (fd, n, was_converted) =
            convert_buffer(&shown, fd).map_err(io_err("converting", &shown))?;
        bpf_sys::update(
            outer.as_fd(),
            &index.to_ne_bytes(),
            &u32::try_from(fd.as_raw_fd()).unwrap_or(0).to_ne_bytes(),
        )
        .map_err(io_err("inserting into the new TABLES", &shown))?;
        slots += n;
        converted += u64::from(was_converted);
        buffers.push((entry.path(), shown, fd));
    }
    for (path, shown, fd) in &buffers {
        bpf_sys::pin_replacing(fd.as_fd(), path).map_err(io_err("pinning", shown))?;
    }
    let path = ctx.dir.map(TABLES);
    bpf_sys::pin_replacing(outer.as_fd(), &path).map_err(io_err(
        "pinning",
        &ctx.dir.shown().join("maps").join(TABLES),
    ))?;
    Ok(MapMigration {
        map: TABLES.into(),
        action: Action::Converted,
        entries: buffers.len() as u64,
        detail: Some(format!(
            "table buffers, {slots} slots, {converted} converted"
        )),
    })
}

/// Test support: turns the maps this build pinned at `ctx.dir` back into what the
/// layout-1 build pinned (`old`: that build's layout), the inverse of [`run`]: table
/// buffers of `u32` cells in a `TABLES` of layout 1's template, the shorter
/// `VIP_STATS`, no `FAST_FILTER`, and `meta` naming layout 1 and its digest. Slot
/// states are dropped (layout 1 has none).
#[cfg(feature = "test-harness")]
pub(super) fn rewind(dir: &crate::pinned::PinDir, old: &super::Layout) -> std::io::Result<()> {
    let outer_def = old
        .map(TABLES)
        .ok_or_else(|| std::io::Error::other("TABLES is not in the layout-1 object"))?;
    let inner = outer_def.inner.unwrap_or_default();
    let template = v1_buffer(inner[3] - V1_HEADER_LEN)?;
    let outer = create_like(outer_def, Some(template.as_fd()))?;
    let mut buffers = Vec::new();
    for entry in std::fs::read_dir(dir.path().join("tables"))?.flatten() {
        let Ok(index) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Some(fd) = bpf_sys::open_pinned(&entry.path())? else {
            continue;
        };
        let entries = bpf_sys::map_info(fd.as_fd())?.max_entries as usize;
        let (generation, owners) =
            table_map::Mapping::new(fd.as_fd(), entries, false)?.read_table()?;
        let size = u32::try_from(owners.len()).map_err(|_| std::io::ErrorKind::InvalidData)?;
        let buffer = v1_buffer(size)?;
        write_v1_buffer(buffer.as_fd(), generation, &owners)?;
        let fd_word = u32::try_from(buffer.as_raw_fd()).unwrap_or(0);
        bpf_sys::update(outer.as_fd(), &index.to_ne_bytes(), &fd_word.to_ne_bytes())?;
        buffers.push((entry.path(), buffer));
    }
    for (path, buffer) in &buffers {
        bpf_sys::pin_replacing(buffer.as_fd(), path)?;
    }
    bpf_sys::pin_replacing(outer.as_fd(), &dir.map(TABLES))?;
    grow::rewind(dir, old, VIP_STATS)?;
    std::fs::remove_file(dir.map(FAST_FILTER))?;
    super::name_layout(dir, 1, old)
}

/// A layout-1 table buffer for `size` slots.
#[cfg(feature = "test-harness")]
fn v1_buffer(size: u32) -> std::io::Result<OwnedFd> {
    bpf_sys::create_map(
        bpf_sys::MapShape {
            map_type: bpf_sys::BPF_MAP_TYPE_ARRAY,
            key_size: 4,
            value_size: V1_CELL_VALUE,
            max_entries: size + V1_HEADER_LEN,
            flags: lb_common::maps::TABLE_MAP_FLAGS,
        },
        "lb_table",
    )
}

/// Writes a layout-1 table (header: size, generation; then the owners) into `fd`.
#[cfg(feature = "test-harness")]
fn write_v1_buffer(fd: BorrowedFd<'_>, generation: u32, owners: &[u32]) -> std::io::Result<()> {
    let size = u32::try_from(owners.len()).map_err(|_| std::io::ErrorKind::InvalidData)?;
    let words = [size, generation].into_iter().chain(owners.iter().copied());
    for (index, word) in (0u32..).zip(words) {
        bpf_sys::update(fd, &index.to_ne_bytes(), &word.to_ne_bytes())?;
    }
    Ok(())
}
