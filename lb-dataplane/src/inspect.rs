//! [`Inspector`]: read-only access to the maps of a load balancer program already
//! loaded in the kernel (by another process, e.g. a running `lb run`), found by its
//! program id. Tests use it to check that the maps agree with `lb status`; operators can
//! use it when the daemon cannot answer.

use std::os::fd::AsFd as _;

use aya::{
    maps::{Array, ArrayOfMaps, HashMap, Map, MapData, MapError},
    programs::loaded_programs,
};
use lb_common::{
    maps,
    types::{BackendEntry, VipEntry, VipKey},
};

use super::{DataplaneError, InstalledTable, map_err, syscall_err, table_map};

/// The maps of a loaded load balancer program.
pub struct Inspector {
    vips: HashMap<MapData, VipKey, VipEntry>,
    tables: ArrayOfMaps<MapData>,
    /// `TABLES_STD`; absent in a program of a layout before 6.
    tables_std: Option<ArrayOfMaps<MapData>>,
    backends: Array<MapData, BackendEntry>,
}

impl Inspector {
    /// Opens the maps of the loaded program with id `program_id` (as shown by
    /// `ip link` or `bpftool prog`).
    ///
    /// # Errors
    /// No such program, or one without the load balancer's maps.
    pub fn for_program(program_id: u32) -> Result<Self, DataplaneError> {
        let info = loaded_programs()
            .filter_map(Result::ok)
            .find(|p| p.id() == program_id)
            .ok_or_else(|| {
                DataplaneError::OutOfRange(format!("no loaded program with id {program_id}"))
            })?;
        let ids = info
            .map_ids()
            .map_err(|error| DataplaneError::Program {
                program: maps::XDP_PROGRAM,
                error,
            })?
            .unwrap_or_default();
        let (mut vips, mut tables, mut tables_std, mut backends) = (None, None, None, None);
        for id in ids {
            let data = MapData::from_id(id).map_err(map_err("?", "open by id"))?;
            let name = data
                .info()
                .map_err(map_err("?", "info"))?
                .name_as_str()
                .map(ToOwned::to_owned)
                .unwrap_or_default();
            match name.as_str() {
                n if n == maps::VIPS => vips = Some(data),
                n if n == maps::TABLES => tables = Some(data),
                n if n == maps::TABLES_STD => tables_std = Some(data),
                n if n == maps::BACKENDS => backends = Some(data),
                _ => {}
            }
        }
        let vips = vips.ok_or(DataplaneError::MissingMap(maps::VIPS))?;
        let backends = backends.ok_or(DataplaneError::MissingMap(maps::BACKENDS))?;
        Ok(Self {
            vips: HashMap::try_from(Map::from_map_data(vips).map_err(map_err(maps::VIPS, "open"))?)
                .map_err(map_err(maps::VIPS, "open"))?,
            tables: outer(
                maps::TABLES,
                tables.ok_or(DataplaneError::MissingMap(maps::TABLES))?,
            )?,
            tables_std: tables_std
                .map(|data| outer(maps::TABLES_STD, data))
                .transpose()?,
            backends: Array::try_from(
                Map::from_map_data(backends).map_err(map_err(maps::BACKENDS, "open"))?,
            )
            .map_err(map_err(maps::BACKENDS, "open"))?,
        })
    }

    /// Every `VIPS` entry.
    ///
    /// # Errors
    /// When the map cannot be read.
    pub fn vips(&self) -> Result<Vec<(VipKey, VipEntry)>, DataplaneError> {
        self.vips
            .iter()
            .collect::<Result<_, _>>()
            .map_err(map_err(maps::VIPS, "iterate"))
    }

    /// The live table of a VIP entry (the buffer it selects: in `TABLES_STD` when the
    /// entry has `VIP_TABLE_STD`, else in `TABLES`).
    ///
    /// # Errors
    /// When the maps cannot be read.
    pub fn table(&self, entry: &VipEntry) -> Result<Option<InstalledTable>, DataplaneError> {
        let index = entry.table_index();
        let (name, outer) = if entry.in_std_tables() {
            let outer = self.tables_std.as_ref();
            (
                maps::TABLES_STD,
                outer.ok_or(DataplaneError::MissingMap(maps::TABLES_STD))?,
            )
        } else {
            (maps::TABLES, &self.tables)
        };
        let inner: MapData = match outer.get(&index, 0) {
            Ok(inner) => inner,
            Err(MapError::KeyNotFound) => return Ok(None),
            Err(e) => return Err(map_err(name, "lookup")(e)),
        };
        let entries = inner
            .info()
            .map_err(map_err(name, "inner info"))?
            .max_entries() as usize;
        let mapping = table_map::Mapping::new(inner.fd().as_fd(), entries, false)
            .map_err(syscall_err(format!("mapping {name}[{index}]")))?;
        let (generation, slots) = mapping
            .read_table()
            .map_err(syscall_err(format!("reading {name}[{index}]")))?;
        Ok(Some(InstalledTable { generation, slots }))
    }

    /// Backend entry `id`.
    ///
    /// # Errors
    /// When the map cannot be read.
    pub fn backend(&self, id: u32) -> Result<BackendEntry, DataplaneError> {
        self.backends
            .get(&id, 0)
            .map_err(map_err(maps::BACKENDS, "lookup"))
    }
}

/// Outer map `name` of table buffers, opened from `data`.
fn outer(name: &'static str, data: MapData) -> Result<ArrayOfMaps<MapData>, DataplaneError> {
    ArrayOfMaps::try_from(Map::from_map_data(data).map_err(map_err(name, "open"))?)
        .map_err(map_err(name, "open"))
}
