//! Migrating a pinned datapath of an older map layout into this build's, so that an
//! upgrade whose layout differs keeps conntrack, the SYN cache, the counters and the
//! tables, and with them every connection.
//!
//! - A migration is a chain of steps, one per layout version (`from` to `from + 1`),
//!   each a module of its own that knows only its two layouts (`v1_to_v2`,
//!   `v2_to_v3`, `v3_to_v4`, `v4_to_v5`, `v5_to_v6`); a future layout 7 adds one step. A per-CPU
//!   counter array whose value grew at its end is converted by `grow`, to this build's
//!   size whichever step runs it.
//! - A step converts only the maps whose definition or meaning changed, into new maps
//!   it creates, fills and then pins in place of the old ones; every other map (the
//!   conntrack maps, the SYN cache, the VIPs, the backends) is kept as it is pinned, and
//!   the new program reads it. The older program keeps forwarding from the maps it
//!   holds until the new one replaces it through the link
//!   (`crate::Dataplane::attach`), which happens only after [`migrate`] returns:
//!   packets see the old program with the old maps or the new one with complete new
//!   maps, never a partial table.
//! - Before anything is written, every map no step converts must already be this
//!   build's (the sizes chosen at start included): otherwise the start is refused
//!   untouched, as an incompatible layout is.
//! - A step is safe to run again after a crash part-way: a map already in the new
//!   layout is kept, and `meta` names the new version only once every step is done.
//! - A datapath of a newer layout than this build knows is refused
//!   ([`PinError::Newer`]): a downgrade needs `lb run --reset`.

mod grow;
mod v1_to_v2;
mod v2_to_v3;
mod v3_to_v4;
mod v4_to_v5;
mod v5_to_v6;

use std::{
    os::fd::{AsFd, BorrowedFd, OwnedFd},
    time::{Duration, Instant},
};

use super::{Layout, MetaMap, PinDir, PinError, SizeOverride, io_err, layout::MapDef};
use crate::bpf_sys;

/// What a migration did with one map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Kept as pinned: the new program reads it.
    Kept,
    /// Converted into a map of the new layout.
    Converted,
    /// Created (new in the layout), empty.
    Created,
}

impl Action {
    /// The word for logs and `lb status`: `kept`, `converted`, `created`.
    pub fn word(self) -> &'static str {
        match self {
            Action::Kept => "kept",
            Action::Converted => "converted",
            Action::Created => "created",
        }
    }
}

/// One map's part of a migration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapMigration {
    /// The map's name in the object (`TABLES` for the table buffers).
    pub map: String,
    /// What was done with it.
    pub action: Action,
    /// Its entries: the flows of a conntrack map, the held SYNs, the non-zero counter
    /// elements, the table buffers (slots in [`MapMigration::detail`]).
    pub entries: u64,
    /// More, when there is more to say (`196611 slots`).
    pub detail: Option<String>,
}

/// What [`migrate`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Migration {
    /// The pinned datapath's layout version.
    pub from: u32,
    /// This build's.
    pub to: u32,
    /// Every map converted, created or counted as kept.
    pub maps: Vec<MapMigration>,
    /// Wall time of the whole migration.
    pub took: Duration,
}

impl std::fmt::Display for Migration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "layout {} to {} in {:.1} ms:",
            self.from,
            self.to,
            self.took.as_secs_f64() * 1e3
        )?;
        for (i, m) in self.maps.iter().enumerate() {
            let sep = if i == 0 { " " } else { ", " };
            write!(
                f,
                "{sep}{} {} ({} entries",
                m.map,
                m.action.word(),
                m.entries
            )?;
            if let Some(detail) = &m.detail {
                write!(f, ", {detail}")?;
            }
            write!(f, ")")?;
        }
        Ok(())
    }
}

/// What a step works on.
struct Context<'a> {
    dir: &'a PinDir,
    /// This build's layout.
    layout: &'a Layout,
    /// The sizes chosen at start (a map a step creates takes its size from them).
    overrides: &'a [SizeOverride],
}

/// One version step.
struct Step {
    /// The layout version it reads; it writes `from + 1`.
    from: u32,
    /// The maps it converts or creates (every other map must be pinned as this build
    /// defines it).
    maps: &'static [&'static str],
    /// The conversion; `None` for a step that only creates its `maps` empty.
    convert: Option<Convert>,
}

/// A step's conversion of the maps of a context.
type Convert = fn(&Context<'_>) -> Result<Vec<MapMigration>, PinError>;

impl Step {
    /// A step from layout `from` whose only change is `maps`, new and created empty.
    const fn creating(from: u32, maps: &'static [&'static str]) -> Self {
        Self {
            from,
            maps,
            convert: None,
        }
    }

    /// Runs the step on the maps of `ctx`.
    fn run(&self, ctx: &Context<'_>) -> Result<Vec<MapMigration>, PinError> {
        match self.convert {
            Some(convert) => convert(ctx),
            None => self
                .maps
                .iter()
                .map(|name| create_empty(ctx, name))
                .collect(),
        }
    }
}

/// Every step, by the version it reads.
const STEPS: &[Step] = &[
    v1_to_v2::STEP,
    v2_to_v3::STEP,
    v3_to_v4::STEP,
    v4_to_v5::STEP,
    v5_to_v6::STEP,
];

/// The maps kept as they are pinned that a migration reports (by their entries).
const KEPT: [&str; 3] = [
    lb_common::maps::CONNTRACK_V4,
    lb_common::maps::CONNTRACK_V6,
    lb_common::maps::SYN_CACHE,
];

/// Migrates the datapath pinned at `dir` into `layout` (this build's object) when its
/// `meta` names an older layout version; `Ok(None)` when there is nothing to migrate
/// (nothing pinned, the same version, or another pin directory format, which
/// [`PinDir::check`] names).
///
/// # Errors
/// [`PinError::Newer`] for a newer layout; [`PinError::Incompatible`] when no step
/// leads from the pinned version or a map no step converts differs (nothing written);
/// [`PinError::Io`] when a map cannot be created, filled or pinned.
pub fn migrate(
    dir: &PinDir,
    layout: &Layout,
    overrides: &[SizeOverride],
) -> Result<Option<Migration>, PinError> {
    let meta_path = dir.meta();
    let Some(mut meta) = MetaMap::open(&meta_path).map_err(io_err("reading", &meta_path))? else {
        return Ok(None);
    };
    let m = meta.get();
    let ours = lb_common::maps::LAYOUT_VERSION;
    if m.format != super::layout::FORMAT || m.layout_version == ours {
        return Ok(None);
    }
    if m.layout_version > ours {
        return Err(PinError::Newer {
            dir: dir.shown(),
            interface: dir.interface().to_owned(),
            pinned: m.layout_version,
            ours,
        });
    }
    let steps = plan(m.layout_version, ours).map_err(|why| incompatible(dir, vec![why]))?;
    let differences = unconverted_differences(dir, layout, overrides, &steps)?;
    if !differences.is_empty() {
        return Err(incompatible(dir, differences));
    }
    let start = Instant::now();
    let ctx = Context {
        dir,
        layout,
        overrides,
    };
    let mut maps = Vec::new();
    for step in steps {
        maps.extend(step.run(&ctx)?);
    }
    maps.extend(kept(dir)?);
    meta.update(|m| {
        m.layout_version = ours;
        m.digest = layout.digest;
    })
    .map_err(io_err("writing", &dir.shown().join("meta")))?;
    Ok(Some(Migration {
        from: m.layout_version,
        to: ours,
        maps,
        took: start.elapsed(),
    }))
}

/// The steps from version `from` to `to`, or why there is no way.
fn plan(from: u32, to: u32) -> Result<Vec<&'static Step>, String> {
    (from..to)
        .map(|v| {
            STEPS.iter().find(|s| s.from == v).ok_or_else(|| {
                format!(
                    "map value layout version {from} (this build: {to}), and this build cannot migrate from layout {v} to {}",
                    v + 1
                )
            })
        })
        .collect()
}

fn incompatible(dir: &PinDir, differences: Vec<String>) -> PinError {
    PinError::Incompatible {
        dir: dir.shown(),
        interface: dir.interface().to_owned(),
        differences,
    }
}

/// The differences between the pinned maps and `layout` among the maps `steps` leave
/// as they are.
fn unconverted_differences(
    dir: &PinDir,
    layout: &Layout,
    overrides: &[SizeOverride],
    steps: &[&Step],
) -> Result<Vec<String>, PinError> {
    let converted = |name: &str| steps.iter().any(|s| s.maps.contains(&name));
    let mut kept = layout.clone();
    kept.maps.retain(|m| !converted(&m.name));
    let mut pinned = dir.pinned_maps()?;
    pinned.retain(|(name, _)| !converted(name));
    Ok(kept.differences(&pinned, overrides))
}

/// The maps kept as pinned, with their entries.
fn kept(dir: &PinDir) -> Result<Vec<MapMigration>, PinError> {
    KEPT.iter()
        .map(|name| {
            let path = dir.map(name);
            let shown = dir.shown().join("maps").join(name);
            let entries = match bpf_sys::open_pinned(&path).map_err(io_err("opening", &shown))? {
                Some(fd) => {
                    let info =
                        bpf_sys::map_info(fd.as_fd()).map_err(io_err("examining", &shown))?;
                    if info.map_type == bpf_sys::BPF_MAP_TYPE_ARRAY {
                        nonzero_elements(fd.as_fd(), &info)
                    } else {
                        bpf_sys::count_keys(fd.as_fd(), info.key_size)
                    }
                    .map_err(io_err("counting the entries of", &shown))?
                }
                None => 0,
            };
            Ok(MapMigration {
                map: (*name).to_owned(),
                action: Action::Kept,
                entries,
                detail: None,
            })
        })
        .collect()
}

/// The elements of array `fd` that are not all zero (the held SYNs of the SYN cache).
fn nonzero_elements(fd: BorrowedFd<'_>, info: &bpf_sys::MapInfo) -> std::io::Result<u64> {
    let mut value = vec![0u8; info.value_size as usize];
    let mut n = 0;
    for index in 0..info.max_entries {
        if bpf_sys::lookup(fd, &index.to_ne_bytes(), &mut value)? && value.iter().any(|b| *b != 0) {
            n += 1;
        }
    }
    Ok(n)
}

/// Creates an empty map as `def` defines it (a map of maps with `inner` as its
/// elements' template), named like the map the loader creates.
fn create_like(def: &MapDef, inner: Option<BorrowedFd<'_>>) -> std::io::Result<OwnedFd> {
    bpf_sys::create_map_of(
        bpf_sys::MapShape {
            map_type: def.map_type,
            key_size: def.key_size,
            value_size: def.value_size,
            max_entries: def.max_entries,
            flags: def.flags,
        },
        inner,
        &def.name,
    )
}

/// An empty map of the inner map template of map of maps `def` (its elements' shape),
/// for creating `def` (`inner_map_fd`); `None` for a map of another type.
fn inner_template(def: &MapDef) -> std::io::Result<Option<OwnedFd>> {
    let Some(inner) = def.inner else {
        return Ok(None);
    };
    let template = MapDef {
        name: "lb_table".into(),
        map_type: inner[0],
        key_size: inner[1],
        value_size: inner[2],
        max_entries: inner[3],
        flags: inner[4],
        inner: None,
    };
    create_like(&template, None).map(Some)
}

/// Map `name`, new in this build's layout: created empty with this build's definition
/// (and the size chosen at start, for a map sized by the configuration; a map of maps
/// with its inner template) and pinned, unless a run interrupted after pinning it left
/// it there.
fn create_empty(ctx: &Context<'_>, name: &str) -> Result<MapMigration, PinError> {
    let path = ctx.dir.map(name);
    let shown = ctx.dir.shown().join("maps").join(name);
    let action = if bpf_sys::open_pinned(&path)
        .map_err(io_err("opening", &shown))?
        .is_some()
    {
        Action::Kept
    } else {
        let mut shape = def(ctx, name)?.clone();
        if let Some(o) = ctx.overrides.iter().find(|o| o.map == name) {
            shape.max_entries = o.entries;
        }
        let template = inner_template(&shape).map_err(io_err("creating a template for", &shown))?;
        let new = create_like(&shape, template.as_ref().map(AsFd::as_fd))
            .map_err(io_err("creating", &shown))?;
        bpf_sys::pin(new.as_fd(), &path).map_err(io_err("pinning", &shown))?;
        Action::Created
    };
    Ok(MapMigration {
        map: name.into(),
        action,
        entries: 0,
        detail: None,
    })
}

/// This build's definition of map `name`.
fn def<'a>(ctx: &'a Context<'_>, name: &str) -> Result<&'a MapDef, PinError> {
    ctx.layout.map(name).ok_or_else(|| {
        incompatible(
            ctx.dir,
            vec![format!("map {name} is not in this build's object")],
        )
    })
}

/// Test support: turns the datapath this build pinned at `dir` (no daemon running)
/// back into the maps and `meta` the layout-1 build pinned, for the object `old_object`
/// of that build (`tests/data/lb-ebpf-layout1.o`): the 5-to-6, 4-to-5, 3-to-4 and
/// 2-to-3 steps' maps are undone, then the 1-to-2 step's. Its program is attached by
/// `crate::kernel::old_layout`.
///
/// # Errors
/// When the object cannot be read or a map cannot be rewritten.
#[cfg(feature = "test-harness")]
pub fn rewind_to_layout1(dir: &PinDir, old_object: &[u8]) -> std::io::Result<()> {
    let old = Layout::of_object_at(old_object, 1).map_err(std::io::Error::other)?;
    v5_to_v6::strip(dir)?;
    v4_to_v5::strip(dir, &old)?;
    v3_to_v4::strip(dir)?;
    v2_to_v3::strip(dir)?;
    v1_to_v2::rewind(dir, &old)
}

/// Test support: as [`rewind_to_layout1`], back into what the layout-2 build pinned,
/// for its object `old_object` (`tests/data/lb-ebpf-layout2.o`).
///
/// # Errors
/// When the object cannot be read or a map cannot be rewritten.
#[cfg(feature = "test-harness")]
pub fn rewind_to_layout2(dir: &PinDir, old_object: &[u8]) -> std::io::Result<()> {
    let old = Layout::of_object_at(old_object, 2).map_err(std::io::Error::other)?;
    v5_to_v6::strip(dir)?;
    v4_to_v5::strip(dir, &old)?;
    v3_to_v4::strip(dir)?;
    v2_to_v3::rewind(dir, &old)
}

/// Test support: as [`rewind_to_layout1`], back into what the layout-3 build pinned,
/// for its object `old_object` (`tests/data/lb-ebpf-layout3.o`).
///
/// # Errors
/// When the object cannot be read or a map cannot be rewritten.
#[cfg(feature = "test-harness")]
pub fn rewind_to_layout3(dir: &PinDir, old_object: &[u8]) -> std::io::Result<()> {
    let old = Layout::of_object_at(old_object, 3).map_err(std::io::Error::other)?;
    v5_to_v6::strip(dir)?;
    v4_to_v5::strip(dir, &old)?;
    v3_to_v4::rewind(dir, &old)
}

/// Test support: as [`rewind_to_layout1`], back into what the layout-4 build pinned,
/// for its object `old_object` (`tests/data/lb-ebpf-layout4.o`).
///
/// # Errors
/// When the object cannot be read or a map cannot be rewritten.
#[cfg(feature = "test-harness")]
pub fn rewind_to_layout4(dir: &PinDir, old_object: &[u8]) -> std::io::Result<()> {
    let old = Layout::of_object_at(old_object, 4).map_err(std::io::Error::other)?;
    v5_to_v6::strip(dir)?;
    v4_to_v5::rewind(dir, &old)
}

/// Test support: as [`rewind_to_layout1`], back into what the layout-5 build pinned,
/// for its object `old_object` (`tests/data/lb-ebpf-layout5.o`).
///
/// # Errors
/// When the object cannot be read or a map cannot be rewritten.
#[cfg(feature = "test-harness")]
pub fn rewind_to_layout5(dir: &PinDir, old_object: &[u8]) -> std::io::Result<()> {
    let old = Layout::of_object_at(old_object, 5).map_err(std::io::Error::other)?;
    v5_to_v6::rewind(dir, &old)
}

/// Test support: removes the pins of `names` at `dir` (the maps a step adds), those
/// already gone aside.
#[cfg(feature = "test-harness")]
fn remove_pins(dir: &PinDir, names: &[&str]) -> std::io::Result<()> {
    for name in names {
        match std::fs::remove_file(dir.map(name)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// Test support: writes into the `meta` pinned at `dir` the layout `old` of an older
/// build: its version `version` and its digest.
#[cfg(feature = "test-harness")]
fn name_layout(dir: &PinDir, version: u32, old: &Layout) -> std::io::Result<()> {
    let mut meta =
        MetaMap::open(&dir.meta())?.ok_or_else(|| std::io::Error::other("no meta pinned"))?;
    meta.update(|m| {
        m.layout_version = version;
        m.digest = old.digest;
    })
}

#[cfg(test)]
mod tests;
