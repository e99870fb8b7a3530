//! The datapath layout: what a pinned datapath must have for a binary to adopt it, and
//! its stamp.
//!
//! - [`Layout::of_object`] reads every map definition of the eBPF object (name, type,
//!   key and value size, compiled `max_entries`, flags; the inner map template of a
//!   map of maps), so a map that anyone adds to `lb-ebpf/src/maps.rs`, or resizes,
//!   changes the layout without anything to maintain here.
//! - The stamp is `<FORMAT>-<first 12 hex digits of a SHA-256>` over
//!   [`FORMAT`] (how this module lays out the pin directory and its own maps),
//!   `lb_common::maps::LAYOUT_VERSION` (bumped when a key or value changes meaning
//!   without changing size) and every map definition, sorted by name. `lb --version`
//!   prints it.
//! - Sizes chosen at start (the conntrack capacities) are not part of the stamp: they
//!   are compared map by map (`Layout::differences`), so that the refusal names the
//!   setting (`conntrack.capacity: ...`).

use std::fmt::Write as _;

use aya_obj::Object;
use sha2::{Digest as _, Sha256};

/// Version of the pin directory's own layout (meta, owner, record, link, maps/,
/// tables/) and of the meta and record formats. The `programs` pin came later without
/// a new version: a build that does not know it leaves it alone, and the program ids
/// it then names no longer run (see `dataplane::kernel::programs`).
pub const FORMAT: u32 = 1;

/// One map's definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapDef {
    /// Name in the object (the symbol).
    pub name: String,
    /// `BPF_MAP_TYPE_*`.
    pub map_type: u32,
    /// Key size, bytes.
    pub key_size: u32,
    /// Value size, bytes.
    pub value_size: u32,
    /// Entries, as compiled (before start-time overrides).
    pub max_entries: u32,
    /// `BPF_F_*` flags.
    pub flags: u32,
    /// The inner map template of a map of maps: (type, key, value, entries, flags).
    pub inner: Option<[u32; 5]>,
}

/// A start-time size: a map whose `max_entries` a configuration key sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeOverride {
    /// The map.
    pub map: &'static str,
    /// The configuration key that sets it.
    pub key: &'static str,
    /// Its entries.
    pub entries: u32,
}

/// Every map of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Maps sorted by name (section data maps such as `.rodata` excluded: they are
    /// constants of the program, recreated with it; the backend agent's maps,
    /// `lb_common::maps::AGENT_MAP_PREFIX`, excluded: not the load balancer's).
    pub maps: Vec<MapDef>,
    /// SHA-256 of the module documentation's inputs.
    pub digest: [u8; 32],
}

/// Why an object's maps could not be read.
#[derive(Debug, thiserror::Error)]
#[error("reading the map definitions of the eBPF object: {0}")]
pub struct LayoutError(String);

impl Layout {
    /// The layout of the eBPF object `object`.
    ///
    /// # Errors
    /// When the object cannot be parsed.
    pub fn of_object(object: &[u8]) -> Result<Self, LayoutError> {
        Self::of_object_at(object, lb_common::maps::LAYOUT_VERSION)
    }

    /// The layout of the eBPF object `object` of an older build, whose maps' values
    /// have the meaning of layout version `version` (the stamp that build wrote).
    ///
    /// # Errors
    /// When the object cannot be parsed.
    pub fn of_object_at(object: &[u8], version: u32) -> Result<Self, LayoutError> {
        let obj = Object::parse(object).map_err(|e| LayoutError(e.to_string()))?;
        let mut maps: Vec<MapDef> = obj
            .maps
            .iter()
            // Section data (`.rodata`), and the backend agent's maps: `lb run` neither
            // uses nor pins them, so they are no part of its layout.
            .filter(|(name, _)| {
                !name.starts_with('.') && !name.starts_with(lb_common::maps::AGENT_MAP_PREFIX)
            })
            .map(|(name, m)| MapDef {
                name: name.clone(),
                map_type: m.map_type(),
                key_size: m.key_size(),
                value_size: m.value_size(),
                max_entries: m.max_entries(),
                flags: m.map_flags(),
                inner: m.inner().map(|i| {
                    [
                        i.map_type(),
                        i.key_size(),
                        i.value_size(),
                        i.max_entries(),
                        i.map_flags(),
                    ]
                }),
            })
            .collect();
        maps.sort_by(|a, b| a.name.cmp(&b.name));
        let mut hash = Sha256::new();
        hash.update(FORMAT.to_le_bytes());
        hash.update(version.to_le_bytes());
        for m in &maps {
            hash.update((m.name.len() as u64).to_le_bytes());
            hash.update(m.name.as_bytes());
            for v in [m.map_type, m.key_size, m.value_size, m.max_entries, m.flags] {
                hash.update(v.to_le_bytes());
            }
            for v in m.inner.unwrap_or_default() {
                hash.update(v.to_le_bytes());
            }
        }
        Ok(Self {
            maps,
            digest: hash.finalize().into(),
        })
    }

    /// The stamp, `FORMAT-<12 hex digits>`.
    pub fn stamp(&self) -> String {
        stamp_of(&self.digest)
    }

    /// The map named `name`.
    pub fn map(&self, name: &str) -> Option<&MapDef> {
        self.maps.iter().find(|m| m.name == name)
    }

    /// The differences between the maps pinned (`pinned`: name → its facts, as the
    /// kernel reports them) and this layout with `overrides` applied; empty when
    /// compatible. Each names the map and the two values, and the configuration key
    /// for a start-time size.
    pub(crate) fn differences(
        &self,
        pinned: &[(String, super::super::bpf_sys::MapInfo)],
        overrides: &[SizeOverride],
    ) -> Vec<String> {
        let mut out = Vec::new();
        for m in &self.maps {
            let Some((_, info)) = pinned.iter().find(|(n, _)| *n == m.name) else {
                out.push(format!("map {} is new in this build (not pinned)", m.name));
                continue;
            };
            let field = |what: &str, pinned: u32, ours: u32| {
                (pinned != ours).then(|| {
                    format!(
                        "map {}: the pinned map has {what} {pinned}, this build {ours}",
                        m.name
                    )
                })
            };
            out.extend(field("type", info.map_type, m.map_type));
            out.extend(field("key size", info.key_size, m.key_size));
            out.extend(field("value size", info.value_size, m.value_size));
            out.extend(field("flags", info.map_flags, m.flags));
            match overrides.iter().find(|o| o.map == m.name) {
                Some(o) if info.max_entries != o.entries => out.push(format!(
                    "{}: the pinned map {} has {} entries, the configuration asks for {}",
                    o.key, m.name, info.max_entries, o.entries
                )),
                Some(_) => {}
                None => out.extend(field("max_entries", info.max_entries, m.max_entries)),
            }
        }
        for (name, _) in pinned {
            if self.map(name).is_none() {
                out.push(format!("map {name} is pinned but not in this build"));
            }
        }
        out
    }
}

/// The stamp of a digest, `FORMAT-<12 hex digits>`.
pub fn stamp_of(digest: &[u8; 32]) -> String {
    let mut s = format!("{FORMAT}-");
    for b in &digest[..6] {
        let _ = write!(s, "{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf_sys::MapInfo;

    #[test]
    fn the_embedded_object_has_every_named_map_and_a_stable_stamp() {
        let layout = Layout::of_object(crate::EBPF_OBJECT).unwrap();
        for name in [
            lb_common::maps::CONFIG,
            lb_common::maps::VIPS,
            lb_common::maps::TABLES,
            lb_common::maps::TABLES_STD,
            lb_common::maps::CONNTRACK_V4,
            lb_common::maps::CONNTRACK_V6,
            lb_common::maps::SYN_CACHE,
            lb_common::maps::GLOBAL_STATS,
            lb_common::maps::PROBE_STATS,
            // `lb trace`: its filter, the hand-over, the program array of `lb_trace`
            // and aya-log's ring buffer are pinned and stamped like every other map,
            // so an adopted datapath can be traced.
            lb_common::maps::TRACE_FILTER,
            lb_common::maps::TRACE_PACKET,
            lb_common::maps::TRACE_PROGS,
            lb_common::maps::AYA_LOGS,
            // The SYN's conntrack window and the rate of new pins: their state
            // survives a restart with the conntrack it protects.
            lb_common::maps::TABLE_SEEN,
            lb_common::maps::NEW_PIN_RATE,
        ] {
            assert!(layout.map(name).is_some(), "{name}");
        }
        assert!(layout.map(lb_common::maps::TABLES).unwrap().inner.is_some());
        // TABLES_STD's template: cells of the standard size, without BPF_F_INNER_MAP,
        // as `table_map::create` makes them for that size.
        let std = layout
            .map(lb_common::maps::TABLES_STD)
            .unwrap()
            .inner
            .unwrap();
        let size = lb_common::maps::STD_TABLE_SIZE;
        assert_eq!(std[3], size + lb_common::maps::TABLE_HEADER_LEN);
        assert_eq!(std[4], crate::table_map::flags_for(size));
        let again = Layout::of_object(crate::EBPF_OBJECT).unwrap();
        assert_eq!(layout.stamp(), again.stamp());
        assert_eq!(layout.stamp().len(), "1-".len() + 12);
    }

    #[test]
    fn differences_name_the_map_and_the_setting() {
        let layout = Layout::of_object(crate::EBPF_OBJECT).unwrap();
        let info = |m: &MapDef| MapInfo {
            map_type: m.map_type,
            id: 0,
            key_size: m.key_size,
            value_size: m.value_size,
            max_entries: m.max_entries,
            map_flags: m.flags,
        };
        let mut pinned: Vec<(String, MapInfo)> = layout
            .maps
            .iter()
            .map(|m| (m.name.clone(), info(m)))
            .collect();
        assert!(layout.differences(&pinned, &[]).is_empty());
        let ct = SizeOverride {
            map: lb_common::maps::CONNTRACK_V4,
            key: "conntrack.capacity",
            entries: 2_000_000,
        };
        let d = layout.differences(&pinned, &[ct]);
        assert_eq!(
            d,
            [format!(
                "conntrack.capacity: the pinned map CONNTRACK_V4 has {} entries, the configuration asks for 2000000",
                layout.map("CONNTRACK_V4").unwrap().max_entries
            )]
        );
        pinned.retain(|(n, _)| n != "VIPS");
        pinned.push(("OLD_MAP".into(), MapInfo::default()));
        let d = layout.differences(&pinned, &[]);
        assert_eq!(
            d,
            [
                "map VIPS is new in this build (not pinned)".to_owned(),
                "map OLD_MAP is pinned but not in this build".to_owned()
            ]
        );
    }
}
