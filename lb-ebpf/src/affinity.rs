// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Client affinity (`AFFINITY`, `AFFINITY_TIMEOUT`): the backend of a new connection of a
//! VIP with a persistence timeout. `lb_common::affinity::decide` decides (as `lb flow`
//! does); this module reads the client's pin and the VIP's timeout for it and writes
//! the pin back. Only a flow that no conntrack pin or held SYN decides comes here, and
//! only for a VIP whose entry has `VIP_AFFINITY`: other VIPs pay one flag test.

use lb_common::{
    affinity::{self, Affinity, AffinityLookups},
    stats::Reason,
    types::{FlowKey, VipEntry},
};

use crate::{
    backend::{self, Choice},
    conntrack::now_coarse_ns,
    maps::{AFFINITY, AFFINITY_TIMEOUT},
};

/// `BPF_ANY`: create or replace.
const BPF_ANY: u64 = 0;

/// What the affinity decision reads: `BACKENDS`.
struct NewFlows;

impl AffinityLookups for NewFlows {
    type Backend = Choice;

    #[inline(always)]
    fn takes_new_flows(&mut self, id: u32) -> Option<Choice> {
        backend::for_new_flow(id).ok()
    }
}

/// The backend the affinity pin of flow `key`'s client names, if that pin is live and
/// its backend active (`lb_common::affinity::decide`'s [`Affinity::Pinned`]), read
/// without writing: for an ICMP error about a flow that has no conntrack pin. `None`
/// for a VIP without affinity.
#[inline(always)]
pub(crate) fn pinned(key: &FlowKey, vip: &VipEntry) -> Option<Choice> {
    if !affinity::enabled(vip.flags) {
        return None;
    }
    let timeout_ns = AFFINITY_TIMEOUT.get(vip.vip_id).copied().unwrap_or(0);
    let client = affinity::key(key, vip.vip_id, vip.flags);
    // SAFETY: the entry is only read, within this program run.
    let entry = unsafe { AFFINITY.get(client) };
    match affinity::decide(&mut NewFlows, entry, now_coarse_ns(), timeout_ns) {
        Affinity::Pinned { backend, .. } => Some(backend),
        Affinity::Table { .. } => None,
    }
}

/// The backend of a new connection of flow `key` to VIP `vip` at `now_ns`: the
/// client's affinity pin's if it is live and its backend active, else `table`'s
/// choice, which becomes the client's pin when `write` (not for a RST). The flag says
/// whether the pin decided. A VIP without affinity takes `table`'s choice.
#[inline(always)]
pub(crate) fn pick(
    key: &FlowKey,
    vip: &VipEntry,
    now_ns: u64,
    write: bool,
    table: impl FnOnce() -> Result<Choice, Reason>,
) -> Result<(Choice, bool), Reason> {
    if !affinity::enabled(vip.flags) {
        return Ok((table()?, false));
    }
    let timeout_ns = AFFINITY_TIMEOUT.get(vip.vip_id).copied().unwrap_or(0);
    let client = affinity::key(key, vip.vip_id, vip.flags);
    let entry = AFFINITY.get_ptr_mut(client);
    // SAFETY: the pointer comes from a successful lookup; the entry is read, and its
    // time rewritten with one aligned store, within this program run.
    let decision = affinity::decide(
        &mut NewFlows,
        entry.map(|e| unsafe { &*e }),
        now_ns,
        timeout_ns,
    );
    match decision {
        Affinity::Pinned { backend, refresh } => {
            if let (Some(now), Some(entry)) = (refresh, entry) {
                // SAFETY: as above.
                unsafe { (*entry).stamp_ns = now };
            }
            Ok((backend, true))
        }
        Affinity::Table { now_ns } => {
            let choice = table()?;
            if write {
                // An allocation failure loses the pin, never the packet.
                let _ = AFFINITY.insert(client, affinity::pin(choice.id, now_ns), BPF_ANY);
            }
            Ok((choice, false))
        }
    }
}
