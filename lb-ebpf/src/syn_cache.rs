// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The SYN cache (`SYN_CACHE`): the backend chosen for each TCP SYN, kept in the flow's
//! slot of this CPU's part (`lb_common::syn_cache::slot_index`) until the handshake's
//! ACK, on the same CPU, promotes it into conntrack. An ACK on another CPU reads that
//! CPU's part, finds no SYN of its flow and takes the table.
//!
//! Each CPU writes only its own part (`LbConfig::syn_cache_part_bits`), unless there are
//! more CPUs than parts or the configuration has one part; slots are written with plain
//! stores, and a slot's tag (`lb_common::types::SynEntry::tag_of`) lets readers ignore
//! a slot that two writers tore.

use aya_ebpf::helpers::generated::bpf_get_smp_processor_id;
use lb_common::{
    maps::MAX_VIPS,
    stats::VipStats,
    syn_cache::slot_index,
    types::{LbConfig, SynEntry, VipEntry},
};

use crate::{backend::Choice, maps::SYN_CACHE, parse::Parsed};

/// `SynEntry::vip_id` of a slot whose SYN was used (no VIP has it). Not `u32::MAX`:
/// LLVM's BPF backend compared a zero-extended 32-bit load with that constant as a
/// 64-bit jump whose immediate is sign-extended (`if r2 == -1`), which is never true.
#[expect(
    clippy::cast_possible_truncation,
    reason = "MAX_VIPS (1,024) fits 16 bits (asserted in lb_common::types)"
)]
const SYN_SLOT_FREE: u16 = MAX_VIPS as u16;

/// A backend or VIP id as stored in a `SynEntry` (both are below 65,536, asserted in
/// `lb_common::types`).
#[inline(always)]
#[expect(
    clippy::cast_possible_truncation,
    reason = "backend ids are below MAX_BACKENDS and VIP ids below MAX_VIPS, both <= 65,536"
)]
fn id16(id: u32) -> u16 {
    id as u16
}

/// The slot of a flow whose flow hash is `hash` in this CPU's part, whatever it holds.
#[inline(always)]
pub(crate) fn slot(hash: u32, cfg: &LbConfig) -> Option<&'static mut SynEntry> {
    // SAFETY: the helper has no preconditions; the program runs with migration disabled,
    // so the CPU stays the same for the rest of the packet.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let index = slot_index(hash, cpu, cfg.syn_cache_mask, cfg.syn_cache_part_bits);
    // SAFETY: an element of the array. CPUs sharing its part (more CPUs than parts, or
    // one part) may write it at the same time; readers detect a torn element by its tag
    // (`SynEntry::holds`).
    SYN_CACHE
        .get_ptr_mut(index)
        .map(|slot| unsafe { &mut *slot })
}

/// Remembers that SYN `p` of VIP `vip` (flow hash `hash`), seen at `now`
/// (`now_coarse_ns`), went to `choice`, in its flow's slot. Counts `ct_syn_only_evicted` when the slot held another flow's SYN
/// whose handshake had not completed.
#[inline(always)]
pub(crate) fn remember(
    p: &Parsed,
    vip: &VipEntry,
    hash: u32,
    choice: &Choice,
    cfg: &LbConfig,
    stats: &mut VipStats,
    now: u64,
) {
    let Some(slot) = slot(hash, cfg) else {
        return;
    };
    if slot.vip_id != SYN_SLOT_FREE && slot.key.vip.family != 0 && !slot.key.same_as(&p.key) {
        stats.ct_syn_only_evicted += 1;
    }
    slot.key = p.key;
    let (backend_id, vip_id) = (id16(choice.id), id16(vip.vip_id));
    slot.backend_id = backend_id;
    slot.vip_id = vip_id;
    slot.epoch = vip.epoch;
    slot.syn_ns = now;
    slot.seq = p.tcp_seq;
    slot.tag = SynEntry::tag_of(hash, backend_id, vip_id, vip.epoch, now, p.tcp_seq);
}

/// Frees a slot whose SYN was promoted into conntrack or is of no use any more.
#[inline(always)]
pub(crate) fn free(slot: &mut SynEntry) {
    slot.vip_id = SYN_SLOT_FREE;
}
