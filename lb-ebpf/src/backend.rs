// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Backends (`BACKENDS`): the backend chosen for a packet, and which backends may take
//! new flows or keep the flows they have.

use lb_common::{
    stats::Reason,
    types::{BACKEND_ACTIVE, BACKEND_DRAINING, BackendEntry},
};

use crate::maps::BACKENDS;

/// The backend chosen for a packet.
#[derive(Clone, Copy)]
pub(crate) struct Choice {
    /// Backend id (index into `BACKENDS` and `BACKEND_STATS`).
    pub(crate) id: u32,
    /// Its entry.
    pub(crate) backend: &'static BackendEntry,
}

/// Backend `id` if it may keep its conntrack flows (active or draining).
#[inline(always)]
pub(crate) fn keeps_flows(id: u32) -> Option<Choice> {
    let backend = BACKENDS.get(id)?;
    (backend.state == BACKEND_ACTIVE || backend.state == BACKEND_DRAINING)
        .then_some(Choice { id, backend })
}

/// Backend `id` (a table slot's, non-zero) for a new flow: `drop_no_backend` unless it is
/// active, `drop_bad_config` when the id is out of range.
#[inline(always)]
pub(crate) fn for_new_flow(id: u32) -> Result<Choice, Reason> {
    let backend = BACKENDS.get(id).ok_or(Reason::DropBadConfig)?;
    if backend.state != BACKEND_ACTIVE {
        return Err(Reason::DropNoBackend);
    }
    Ok(Choice { id, backend })
}
