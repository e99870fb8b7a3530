// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The VIPs' Maglev tables (`TABLES`): the backend in slot `table_hash % M` of a VIP's
//! live table (Maglev paper, section 3.4). Each inner map holds a header cell (the table
//! size M and its generation), then the M slots, each its owner and its fast-path state
//! (`lb_common::types::TableCell`, `lb_common::maps::TABLE_HEADER_LEN`). The data path
//! reads only the owner; the state is the daemon's until the fast path decides by it.

use lb_common::{
    maps::{MAX_TABLE_SIZE, TABLE_HEADER_INDEX, TABLE_HEADER_LEN},
    stats::Reason,
    types::VipEntry,
};

use crate::{
    backend::{self, Choice},
    maps::{TABLES, TableMap},
};

/// The size M of `table`, when it is within `1..=MAX_TABLE_SIZE` (in BPF a modulo by
/// zero returns the dividend: a slot index out of the table).
#[inline(always)]
pub(crate) fn size(table: &TableMap) -> Option<u32> {
    let size = table.get(TABLE_HEADER_INDEX)?.header().size;
    (size != 0 && size <= MAX_TABLE_SIZE).then_some(size)
}

/// Backend id in slot `hash % M` of the VIP's live Maglev table (the buffer its entry
/// names); 0 for an empty slot.
///
/// `drop_bad_config` when the VIP has no table or its size is 0 or above
/// `MAX_TABLE_SIZE`.
#[inline(always)]
pub(crate) fn slot(vip: &VipEntry, hash: u32) -> Result<u32, Reason> {
    let table = TABLES.get(vip.table_index()).ok_or(Reason::DropBadConfig)?;
    let size = size(table).ok_or(Reason::DropBadConfig)?;
    table
        .get(hash % size + TABLE_HEADER_LEN)
        .map(|cell| cell.owner())
        .ok_or(Reason::DropBadConfig)
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
