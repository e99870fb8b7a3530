// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The VIPs' Maglev tables (`TABLES`): the backend in slot `flow_hash % M` of a VIP's
//! live table (Maglev paper, section 3.4). Each inner map holds the table size M, the
//! table's generation, then the M slots (`lb_common::maps::TABLE_HEADER_LEN`).

use lb_common::{
    maps::{MAX_TABLE_SIZE, TABLE_HEADER_LEN, TABLE_SIZE_INDEX},
    stats::Reason,
    types::VipEntry,
};

use crate::{
    backend::{self, Choice},
    maps::TABLES,
};

/// Backend id in slot `hash % M` of the VIP's live Maglev table (the buffer its entry
/// names); 0 for an empty slot.
///
/// `drop_bad_config` when the VIP has no table or its size is 0 or above
/// `MAX_TABLE_SIZE` (in BPF a modulo by zero returns the dividend: a slot index out of
/// the table).
#[inline(always)]
pub(crate) fn slot(vip: &VipEntry, hash: u32) -> Result<u32, Reason> {
    let table = TABLES.get(vip.table_index()).ok_or(Reason::DropBadConfig)?;
    let size = *table.get(TABLE_SIZE_INDEX).ok_or(Reason::DropBadConfig)?;
    if size == 0 || size > MAX_TABLE_SIZE {
        return Err(Reason::DropBadConfig);
    }
    table
        .get(hash % size + TABLE_HEADER_LEN)
        .copied()
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
