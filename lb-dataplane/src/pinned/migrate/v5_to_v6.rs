//! Layout 5 to layout 6 (the outer map of the standard-size table buffers, the VIP
//! cache).
//!
//! What changed (the objects of the two builds compared map by map, see the tests):
//! - `TABLES_STD` (the table buffers of `STD_TABLE_SIZE` slots, inner maps without
//!   `BPF_F_INNER_MAP` that the program reads with no helper call) is new: created empty,
//!   its inner template this build's. The `VIPS` entries of layout 5 have no
//!   `VIP_TABLE_STD`, so the new program reads their buffers in `TABLES`, kept as
//!   pinned; a VIP's buffer moves into `TABLES_STD` at its next table install.
//! - `VIP_CACHE` (copies of the `VIPS` entries that a fast-path packet reads without a
//!   hash-map lookup) is new: created empty. The adopting daemon fills it from `VIPS`
//!   (`crate::tables::TableSet::adopt`); until then packets look `VIPS` up.

use lb_common::maps::{TABLES_STD, VIP_CACHE};

use super::Step;

/// The maps new in layout 6, created empty.
const CREATED: [&str; 2] = [TABLES_STD, VIP_CACHE];

/// The step.
pub(super) const STEP: Step = Step::creating(5, &CREATED);

/// Test support: removes what this step adds that no older rewind knows. The buffers
/// this build put into `TABLES_STD` are copied into maps of `TABLES`' inner flags and
/// put there at the same index (pinned in their place), and the `VIPS` entries lose
/// `VIP_TABLE_STD`, as a layout-5 build left them; then the pins of the maps new in
/// layout 6 go.
#[cfg(feature = "test-harness")]
pub(super) fn strip(dir: &crate::pinned::PinDir) -> std::io::Result<()> {
    move_std_buffers(dir)?;
    clear_std_flags(dir)?;
    super::remove_pins(dir, &CREATED)
}

/// Test support: turns the maps this build pinned at `dir` back into what the layout-5
/// build pinned (`old`: that build's layout), the inverse of [`STEP`] ([`strip`]), and
/// `meta` naming layout 5 and its digest.
#[cfg(feature = "test-harness")]
pub(super) fn rewind(dir: &crate::pinned::PinDir, old: &super::Layout) -> std::io::Result<()> {
    strip(dir)?;
    super::name_layout(dir, 5, old)
}

/// Test support: every pinned buffer of `TABLES_STD`'s shape, copied into a new map of
/// `TABLES`' inner flags, put into `TABLES` at its index and pinned in its place.
#[cfg(feature = "test-harness")]
fn move_std_buffers(dir: &crate::pinned::PinDir) -> std::io::Result<()> {
    use std::os::fd::{AsFd as _, AsRawFd as _};

    use lb_common::maps::{STD_TABLE_SIZE, TABLE_MAP_FLAGS, TABLES};

    use crate::{bpf_sys, table_map};

    let tables = bpf_sys::open_pinned(&dir.map(TABLES))?
        .ok_or_else(|| std::io::Error::other("no TABLES pinned"))?;
    for entry in std::fs::read_dir(dir.path().join("tables"))?.flatten() {
        let Ok(index) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Some(fd) = bpf_sys::open_pinned(&entry.path())? else {
            continue;
        };
        let info = bpf_sys::map_info(fd.as_fd())?;
        let entries = info.max_entries as usize;
        if !table_map::is_std(info.map_flags, entries) {
            continue;
        }
        let from = table_map::Mapping::new(fd.as_fd(), entries, false)?;
        let copy = table_map::create_with(STD_TABLE_SIZE, TABLE_MAP_FLAGS)?;
        table_map::Mapping::new(copy.as_fd(), entries, true)?.copy_from(&from)?;
        let raw = u32::try_from(copy.as_raw_fd()).unwrap_or(u32::MAX);
        bpf_sys::update(tables.as_fd(), &index.to_ne_bytes(), &raw.to_ne_bytes())?;
        bpf_sys::pin_replacing(copy.as_fd(), &entry.path())?;
    }
    Ok(())
}

/// Test support: clears `VIP_TABLE_STD` in every `VIPS` entry pinned at `dir`.
#[cfg(feature = "test-harness")]
fn clear_std_flags(dir: &crate::pinned::PinDir) -> std::io::Result<()> {
    use std::os::fd::AsFd as _;

    use lb_common::{
        maps::VIPS,
        types::{VIP_TABLE_STD, VipEntry, VipKey},
    };

    use crate::bpf_sys;

    let vips = bpf_sys::open_pinned(&dir.map(VIPS))?
        .ok_or_else(|| std::io::Error::other("no VIPS pinned"))?;
    let key_size = u32::try_from(size_of::<VipKey>()).unwrap_or(u32::MAX);
    let keys = bpf_sys::keys(vips.as_fd(), key_size)?;
    for key in keys {
        let mut value = [0u8; size_of::<VipEntry>()];
        if !bpf_sys::lookup(vips.as_fd(), &key, &mut value)? {
            continue;
        }
        let flags = u32::from_ne_bytes([value[4], value[5], value[6], value[7]]);
        value[4..8].copy_from_slice(&(flags & !VIP_TABLE_STD).to_ne_bytes());
        bpf_sys::update(vips.as_fd(), &key, &value)?;
    }
    Ok(())
}
