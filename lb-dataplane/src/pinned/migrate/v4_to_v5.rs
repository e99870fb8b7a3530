//! Layout 4 to layout 5 (the backend id's per-CPU arrays laid out in CPU rows).
//!
//! What changed (the objects of the two builds compared map by map, see the tests):
//! - `BACKEND_STATS` and `NEXTHOP_CACHE`, per-CPU arrays of a backend id's range, became
//!   plain arrays of one row per possible CPU (`lb_common::maps::CPU_ROW_LEN`): the
//!   kernel made one per-CPU allocation per element of a per-CPU array, 65,536 a map
//!   at every first start.
//! - `BACKEND_STATS` is converted: each CPU's counters of each backend id are copied
//!   into that CPU's row (the elements not all zero), so `lb stats` keeps its totals.
//! - `NEXTHOP_CACHE` is created empty: a cache, which the program fills again with one
//!   FIB lookup per backend and CPU.

use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};

use lb_common::maps::{BACKEND_STATS, CPU_ROW_LEN, NEXTHOP_CACHE};

use super::{Action, Context, MapDef, MapMigration, Step, create_like, def};
use crate::{
    bpf_sys,
    pinned::{PinError, io_err},
};

/// The step.
pub(super) const STEP: Step = Step {
    from: 4,
    maps: &[BACKEND_STATS, NEXTHOP_CACHE],
    convert: Some(run),
};

fn run(ctx: &Context<'_>) -> Result<Vec<MapMigration>, PinError> {
    Ok(vec![
        to_rows(ctx, BACKEND_STATS, true)?,
        to_rows(ctx, NEXTHOP_CACHE, false)?,
    ])
}

/// This build's definition of `name`, sized by the start's override (the possible
/// CPUs' rows).
fn sized(ctx: &Context<'_>, name: &str) -> Result<MapDef, PinError> {
    let mut shape = def(ctx, name)?.clone();
    if let Some(o) = ctx.overrides.iter().find(|o| o.map == name) {
        shape.max_entries = o.entries;
    }
    Ok(shape)
}

/// Replaces the per-CPU array `name` pinned at `ctx.dir` by a plain array of CPU rows,
/// with its values copied when `copy` (empty otherwise). A map already of this build's
/// type is kept (a run interrupted after pinning it); one absent is created empty.
fn to_rows(ctx: &Context<'_>, name: &str, copy: bool) -> Result<MapMigration, PinError> {
    let path = ctx.dir.map(name);
    let shown = ctx.dir.shown().join("maps").join(name);
    let shape = sized(ctx, name)?;
    let migration = |action, entries| MapMigration {
        map: name.to_owned(),
        action,
        entries,
        detail: None,
    };
    let old = bpf_sys::open_pinned(&path).map_err(io_err("opening", &shown))?;
    if let Some(old) = &old {
        let info = bpf_sys::map_info(old.as_fd()).map_err(io_err("examining", &shown))?;
        if info.map_type == shape.map_type {
            return Ok(migration(Action::Kept, 0));
        }
    }
    let (new, copied) = match (&old, copy) {
        (Some(old), true) => copy_into_rows(old.as_fd(), &shape),
        _ => create_like(&shape, None).map(|fd| (fd, 0)),
    }
    .map_err(io_err("converting", &shown))?;
    bpf_sys::pin_replacing(new.as_fd(), &path).map_err(io_err("pinning", &shown))?;
    let action = if copy && old.is_some() {
        Action::Converted
    } else {
        Action::Created
    };
    Ok(migration(action, copied))
}

/// A new array of CPU rows as `def` defines it, holding each CPU's value of each
/// element of the per-CPU array `old` that is not all zero, at `cpu * CPU_ROW_LEN +
/// index`. Returns it and the elements copied.
///
/// # Errors
/// When a map cannot be created, read or written.
fn copy_into_rows(old: BorrowedFd<'_>, def: &MapDef) -> std::io::Result<(OwnedFd, u64)> {
    let info = bpf_sys::map_info(old)?;
    let new = create_like(def, None)?;
    let cpus = aya::util::nr_cpus().map_err(|(_, e)| e)?;
    // The kernel rounds each CPU's value up to 8 bytes.
    let stride = (info.value_size as usize).next_multiple_of(8);
    let size = info.value_size as usize;
    let mut values = vec![0u8; stride * cpus];
    let mut copied = 0;
    for index in 0..info.max_entries.min(CPU_ROW_LEN) {
        if !bpf_sys::lookup(old, &index.to_ne_bytes(), &mut values)?
            || values.iter().all(|b| *b == 0)
        {
            continue;
        }
        for (cpu, value) in (0_u32..).zip(values.chunks_exact(stride)) {
            let Some(at) = cpu
                .checked_mul(CPU_ROW_LEN)
                .and_then(|r| r.checked_add(index))
            else {
                break;
            };
            if at < def.max_entries && value.iter().any(|b| *b != 0) {
                bpf_sys::update(new.as_fd(), &at.to_ne_bytes(), &value[..size])?;
            }
        }
        copied += 1;
    }
    Ok((new, copied))
}

/// Test support: turns this build's CPU-row arrays pinned at `dir` back into the
/// per-CPU arrays of `old` (an older build's layout): the counters' rows copied back
/// into their CPUs' values, the cache empty. A map `old` lacks is left alone.
#[cfg(feature = "test-harness")]
pub(super) fn strip(dir: &crate::pinned::PinDir, old: &super::Layout) -> std::io::Result<()> {
    for (name, copy) in [(BACKEND_STATS, true), (NEXTHOP_CACHE, false)] {
        let Some(def) = old.map(name) else { continue };
        let cur = bpf_sys::open_pinned(&dir.map(name))?
            .ok_or_else(|| std::io::Error::other(format!("no {name} pinned")))?;
        let new = create_like(def, None)?;
        if copy {
            copy_from_rows(cur.as_fd(), new.as_fd())?;
        }
        bpf_sys::pin_replacing(new.as_fd(), &dir.map(name))?;
    }
    Ok(())
}

/// Test support: turns the maps this build pinned at `dir` back into what the layout-4
/// build pinned (`old`: that build's layout), the inverse of [`run`] ([`strip`]), and
/// `meta` naming layout 4 and its digest.
#[cfg(feature = "test-harness")]
pub(super) fn rewind(dir: &crate::pinned::PinDir, old: &super::Layout) -> std::io::Result<()> {
    strip(dir, old)?;
    super::name_layout(dir, 4, old)
}

/// Test support: copies the rows of array `rows` into the per-CPU array `per_cpu`
/// (element `index`'s CPU `c` value from `c * CPU_ROW_LEN + index`).
#[cfg(feature = "test-harness")]
fn copy_from_rows(rows: BorrowedFd<'_>, per_cpu: BorrowedFd<'_>) -> std::io::Result<()> {
    let info = bpf_sys::map_info(per_cpu)?;
    let cpus = aya::util::nr_cpus().map_err(|(_, e)| e)?;
    let size = info.value_size as usize;
    let stride = size.next_multiple_of(8);
    let mut value = vec![0u8; size];
    let mut values = vec![0u8; stride * cpus];
    for index in 0..info.max_entries {
        values.fill(0);
        for (cpu, slot) in (0_u32..).zip(values.chunks_exact_mut(stride)) {
            let at = cpu * CPU_ROW_LEN + index;
            if bpf_sys::lookup(rows, &at.to_ne_bytes(), &mut value)? {
                slot[..size].copy_from_slice(&value);
            }
        }
        if values.iter().any(|b| *b != 0) {
            bpf_sys::update(per_cpu, &index.to_ne_bytes(), &values)?;
        }
    }
    Ok(())
}
