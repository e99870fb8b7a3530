//! Per-CPU arrays whose value grew or shrank by counters appended at its end
//! (`VIP_STATS`: `lb_common::stats::VipStats` only ever appends): each element's
//! per-CPU values are copied into a new map as a prefix, the rest zero. A step uses it
//! whatever this build's size, so later counters need no step of their own while the
//! layout version stays; the test rewinds use it to shrink.

use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};

use super::{Action, Context, MapDef, MapMigration, create_like, def};
use crate::{
    bpf_sys,
    pinned::{PinError, io_err},
};

/// Converts the per-CPU array `name` pinned at `ctx.dir` into this build's definition
/// when its value size differs: each CPU's old bytes are the prefix of its new value.
/// A map absent is created empty; one of this build's size is kept (an earlier step or
/// start converted it).
///
/// # Errors
/// When the map cannot be read, created, filled or pinned.
pub(super) fn per_cpu(ctx: &Context<'_>, name: &str) -> Result<MapMigration, PinError> {
    let path = ctx.dir.map(name);
    let shown = ctx.dir.shown().join("maps").join(name);
    let def = def(ctx, name)?;
    let migration = |action, entries, detail: Option<&str>| MapMigration {
        map: name.to_owned(),
        action,
        entries,
        detail: detail.map(str::to_owned),
    };
    let Some(old) = bpf_sys::open_pinned(&path).map_err(io_err("opening", &shown))? else {
        let new = create_like(def, None).map_err(io_err("creating", &shown))?;
        bpf_sys::pin_replacing(new.as_fd(), &path).map_err(io_err("pinning", &shown))?;
        return Ok(migration(Action::Created, 0, None));
    };
    let info = bpf_sys::map_info(old.as_fd()).map_err(io_err("examining", &shown))?;
    if info.value_size == def.value_size {
        return Ok(migration(
            Action::Kept,
            0,
            Some("converted by an earlier step"),
        ));
    }
    let (new, nonzero) = copy_prefixes(old.as_fd(), def).map_err(io_err("converting", &shown))?;
    bpf_sys::pin_replacing(new.as_fd(), &path).map_err(io_err("pinning", &shown))?;
    Ok(migration(Action::Converted, nonzero, None))
}

/// A new per-CPU array as `def` defines it, holding each element of `old` (whose value
/// size may differ) that is not all zero: per CPU, the first `min(old, new)` bytes of
/// the old value, the rest zero. Returns it and the elements copied.
///
/// # Errors
/// When a map cannot be created, read or written.
pub(super) fn copy_prefixes(old: BorrowedFd<'_>, def: &MapDef) -> std::io::Result<(OwnedFd, u64)> {
    let info = bpf_sys::map_info(old)?;
    let new = create_like(def, None)?;
    let cpus = aya::util::nr_cpus().map_err(|(_, e)| e)?;
    // The kernel rounds each CPU's value up to 8 bytes.
    let old_stride = (info.value_size as usize).next_multiple_of(8);
    let new_stride = (def.value_size as usize).next_multiple_of(8);
    let copied = info.value_size.min(def.value_size) as usize;
    let mut old_value = vec![0u8; old_stride * cpus];
    let mut new_value = vec![0u8; new_stride * cpus];
    let mut nonzero = 0;
    for index in 0..info.max_entries.min(def.max_entries) {
        let key = index.to_ne_bytes();
        if !bpf_sys::lookup(old, &key, &mut old_value)? || old_value.iter().all(|b| *b == 0) {
            continue;
        }
        new_value.fill(0);
        for cpu in 0..cpus {
            let (o, n) = (cpu * old_stride, cpu * new_stride);
            new_value[n..n + copied].copy_from_slice(&old_value[o..o + copied]);
        }
        bpf_sys::update(new.as_fd(), &key, &new_value)?;
        nonzero += 1;
    }
    Ok((new, nonzero))
}

/// Test support: the per-CPU array `name` pinned at `dir` back to `old`'s definition
/// (an older build's, whose value is a prefix of this build's).
///
/// # Errors
/// When the map is not in `old` or not pinned, or cannot be rewritten.
#[cfg(feature = "test-harness")]
pub(super) fn rewind(
    dir: &crate::pinned::PinDir,
    old: &super::Layout,
    name: &str,
) -> std::io::Result<()> {
    let def = old
        .map(name)
        .ok_or_else(|| std::io::Error::other(format!("{name} is not in the old object")))?;
    let cur = bpf_sys::open_pinned(&dir.map(name))?
        .ok_or_else(|| std::io::Error::other(format!("no {name} pinned")))?;
    let (new, _) = copy_prefixes(cur.as_fd(), def)?;
    bpf_sys::pin_replacing(new.as_fd(), &dir.map(name))
}
