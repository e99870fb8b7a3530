// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The VIPs' Maglev tables (`TABLES`, `TABLES_STD`): the backend in slot
//! `table_hash % M` of a VIP's live table (Maglev paper, section 3.4). Each inner map
//! holds a header cell (the table size M and its generation), then the M slots, each its
//! owner and its fast-path state (`lb_common::types::TableCell`,
//! `lb_common::maps::TABLE_HEADER_LEN`). The data path reads only the owner; the state
//! is the daemon's until the fast path decides by it.
//!
//! A table of `STD_TABLE_SIZE` slots (the default size) is in `TABLES_STD`, whose inner
//! maps all have that size: the kernel inlines the lookup of its cell and M is a
//! constant, so a packet reads it with no helper call. A table of another size is in
//! `TABLES`: one helper call for the header, one for the cell ([`cell`]).

use lb_common::{
    maps::{MAX_TABLE_SIZE, STD_TABLE_SIZE, TABLE_HEADER_INDEX, TABLE_HEADER_LEN},
    stats::Reason,
    types::{TableCell, VipEntry},
};

use crate::{
    backend::{self, Choice},
    maps::{TABLES, TABLES_STD, TableMap},
};

/// The size M of `table`, when it is within `1..=MAX_TABLE_SIZE` (in BPF a modulo by
/// zero returns the dividend: a slot index out of the table).
#[inline(always)]
pub(crate) fn size(table: &TableMap) -> Option<u32> {
    let size = table.get(TABLE_HEADER_INDEX)?.header().size;
    (size != 0 && size <= MAX_TABLE_SIZE).then_some(size)
}

/// The size M of VIP `vip`'s live table: `STD_TABLE_SIZE` for a table in `TABLES_STD`,
/// else its header's ([`size`]); `None` when the VIP has no valid table. For readers
/// off the packet path (`lb_trace`); [`cell`] makes the same choice inline.
#[inline(always)]
pub(crate) fn live_size(vip: &VipEntry) -> Option<u32> {
    if vip.in_std_tables() {
        return Some(STD_TABLE_SIZE);
    }
    TABLES.get(vip.table_index()).and_then(size)
}

/// The cell of slot `hash % M` of the VIP's live table (the buffer its entry names):
/// in `TABLES_STD` at `hash % STD_TABLE_SIZE` with no header read when the entry has
/// `VIP_TABLE_STD`, else in `TABLES` at `hash` modulo the header's size. The one place
/// that chooses between the two maps.
///
/// `drop_bad_config` when the VIP has no table or its size is 0 or above
/// `MAX_TABLE_SIZE`.
#[inline(always)]
pub(crate) fn cell(vip: &VipEntry, hash: u32) -> Result<*mut TableCell, Reason> {
    if vip.in_std_tables() {
        let table = TABLES_STD
            .get(vip.table_index())
            .ok_or(Reason::DropBadConfig)?;
        return table
            .get_ptr_mut(hash % STD_TABLE_SIZE + TABLE_HEADER_LEN)
            .ok_or(Reason::DropBadConfig);
    }
    let table = TABLES.get(vip.table_index()).ok_or(Reason::DropBadConfig)?;
    let size = size(table).ok_or(Reason::DropBadConfig)?;
    table
        .get_ptr_mut(hash % size + TABLE_HEADER_LEN)
        .ok_or(Reason::DropBadConfig)
}

/// Backend id in slot `hash % M` of the VIP's live Maglev table ([`cell`]); 0 for an
/// empty slot. `drop_bad_config` as [`cell`].
#[inline(always)]
pub(crate) fn slot(vip: &VipEntry, hash: u32) -> Result<u32, Reason> {
    // SAFETY: a successful lookup's element, read once by value.
    Ok(unsafe { *cell(vip, hash)? }.owner())
}

/// The backend in slot `hash % M` of the VIP's live table ([`slot`]);
/// `drop_no_backend` when the slot is empty or its backend is not active.
#[inline(always)]
pub(crate) fn pick(vip: &VipEntry, hash: u32) -> Result<Choice, Reason> {
    let id = slot(vip, hash)?;
    if id == 0 {
        return Err(Reason::DropNoBackend);
    }
    backend::for_new_flow(id)
}
