// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The fast path (the book's chapter "The fast path"): for a VIP whose entry carries
//! `VIP_FAST_PATH`, the table decides alone on a clean slot. A packet on a clean slot,
//! a SYN too, goes to the slot's owner with no conntrack lookup and no write (rule T1 of
//! `lb_common::fastpath`). On a dirty slot the pins and held SYNs decide as on today's
//! path; a miss there takes the clean owner (rules M1, M2, [`pick_miss`]), a new SYN
//! within the lead of the slot's change too (rule P2, [`pick_syn`]: a SYN retransmitted
//! across the change follows its first, the simulation's CE1); after the lead, a SYN
//! sent to the owner where a miss would take the clean owner is pinned at once (S4,
//! `select::pin_syn`), since another SYN may overwrite its held one. A pin naming another
//! backend than the owner bumps the slot's epoch (rule P4, [`pin`]), so a cleaning
//! walk that read the slot before cannot commit. A dirty slot's pin goes to conntrack
//! when it names the clean owner (TCP), to `EXCEPTIONS` otherwise (rule M3, [`pin`]),
//! and a dirty slot's packet reads `EXCEPTIONS` first (`conntrack::lookup_fast`).
//!
//! `FAST_FILTER` comes first: a VIP packet whose bit is clear takes today's path with
//! no `VIPS` lookup before its conntrack lookup. A set bit reads the VIP's entry from
//! `VIP_CACHE` (`vip::find_vip_cached`: two inlined array reads instead of the `VIPS`
//! hash-map call), and the clean-slot check inlines the flow hash.

use lb_common::{
    fastpath::{
        DEFAULT_LEAD_NS, Liveness, PinClass, SlotState, miss_backend, pin_class, syn_backend,
        syn_give_up, syn_needs_pin, udp_give_up,
    },
    hash::vip_filter_bit,
    stats::{Reason, VipStats},
    types::{
        BACKEND_DRAINING, CtEntry, FlowKey, LbConfig, PROTO_UDP, TableCell, VIP_FAST_PATH,
        VipEntry, VipKey,
    },
};

use crate::{
    backend::{self, Choice},
    conntrack,
    maps::FAST_FILTER,
    table,
};

/// `key`'s filter bit, when some VIP hashing to it takes the fast path; `None` when
/// none does.
#[inline(always)]
pub(crate) fn fast_bit(key: &VipKey) -> Option<u32> {
    let bit = vip_filter_bit(key);
    FAST_FILTER
        .get(bit / 64)
        .is_some_and(|word| word & (1u64 << (bit % 64)) != 0)
        .then_some(bit)
}

/// Whether VIP `vip` takes the fast path.
#[inline(always)]
pub(crate) fn is_fast(vip: &VipEntry) -> bool {
    vip.flags & VIP_FAST_PATH != 0
}

/// Rule T1: the owner of the packet's slot when the slot is clean and its owner keeps
/// flows (takes new flows, for a `syn`); `None` when the slot is dirty (pins decide) or
/// unreadable (today's path counts it).
#[inline(always)]
pub(crate) fn clean_owner(vip: &VipEntry, hash: u32, syn: bool) -> Option<Choice> {
    let cell = table::cell(vip, hash).ok()?;
    // SAFETY: a successful lookup's element, read once by value.
    let cell = unsafe { *cell };
    if !cell.is_clean() {
        return None;
    }
    if syn {
        backend::for_new_flow(cell.owner()).ok()
    } else {
        backend::keeps_flows(cell.owner())
    }
}

/// Rules P2 and S3: the backend of a new connection's SYN (no pin or held SYN of its
/// own decides) on VIP `vip`'s dirty slot `hash % M` ([`syn_backend`]): within the lead
/// ([`DEFAULT_LEAD_NS`]) of the slot's change, its clean owner if that backend keeps
/// flows, so a SYN retransmitted across the change reaches the backend of its first;
/// otherwise the owner, which must take new flows. Also whether the SYN is pinned at
/// once (rule S4, [`syn_needs_pin`]). Counts in `stats` the give-up it makes
/// ([`syn_give_up`]: `fp_syn_maybe_split` of residual R1, `fp_syn_drained_owner` of
/// R3), unless `noted` (the caller counted another). The count is made where the
/// decision is, so no note is carried through the rest of the program (the verifier
/// would follow each value apart); a SYN to the owner that is then dropped because
/// the owner takes no new flows (a table not yet rebuilt) is counted too.
#[inline(always)]
pub(crate) fn pick_syn(
    vip: &VipEntry,
    hash: u32,
    now_ns: u64,
    stats: &mut VipStats,
    noted: bool,
) -> Result<(Choice, bool), Reason> {
    let mut pin = false;
    let choice = pick_by(vip, hash, |slot, clean| {
        let id = syn_backend(slot, clean, now_ns, DEFAULT_LEAD_NS);
        pin = syn_needs_pin(slot, clean, id);
        if !noted && let Some(note) = syn_give_up(slot, clean, id, now_ns) {
            stats.count(note);
        }
        id
    })?;
    Ok((choice, pin))
}

/// Rules M1 and M2: the backend of a miss (no pin, no held SYN) on VIP `vip`'s slot
/// `hash % M` ([`miss_backend`]): on a dirty slot the clean owner, if it keeps flows
/// (UDP only within the UDP idle timeout of the slot's last change); else the owner,
/// which must take new flows. Counts in `stats` the give-up a UDP miss makes
/// ([`udp_give_up`]: `fp_udp_drained_clean_owner` of residual R3).
#[inline(always)]
pub(crate) fn pick_miss(
    vip: &VipEntry,
    hash: u32,
    udp: bool,
    now_ns: u64,
    cfg: &LbConfig,
    stats: &mut VipStats,
) -> Result<Choice, Reason> {
    pick_by(vip, hash, |slot, clean| {
        let id = miss_backend(slot, udp, clean, now_ns, cfg.udp_timeout_ns);
        if udp && let Some(note) = udp_give_up(slot, clean, id) {
            stats.count(note);
        }
        id
    })
}

/// Reads VIP `vip`'s slot `hash % M` and its clean owner's state, and
/// returns the backend `rule` names from them: the clean owner if it keeps flows, the
/// owner if it takes new flows; `drop_no_backend` otherwise.
#[inline(always)]
fn pick_by(
    vip: &VipEntry,
    hash: u32,
    rule: impl FnOnce(&SlotState, Liveness) -> u32,
) -> Result<Choice, Reason> {
    // SAFETY: a successful lookup's element, read once by value.
    let slot = unsafe { *table::cell(vip, hash)? }.slot();
    let clean = slot.clean_owner();
    let clean_liveness = match backend::keeps_flows(clean) {
        Some(c) if clean != 0 && c.backend.state == BACKEND_DRAINING => Liveness::Draining,
        Some(_) if clean != 0 => Liveness::Active,
        _ => Liveness::Down,
    };
    let id = rule(&slot, clean_liveness);
    if id != slot.owner() {
        return backend::keeps_flows(id).ok_or(Reason::DropNoBackend);
    }
    if id == 0 {
        return Err(Reason::DropNoBackend);
    }
    backend::for_new_flow(id)
}

/// Rules M3 and P4: pins VIP `vip`'s flow `key` on slot `hash % M` with `entry` (its
/// backend: `choice`), replacing the flow's pin when `replace`. On a dirty slot whose
/// owner is another backend the slot's epoch moves first ([`bump`]). A TCP miss's pin
/// naming the clean owner goes to conntrack (LRU: the miss rule gives it again), every
/// other to `EXCEPTIONS`, which never evicts ([`pin_class`]); the flow's pin in the
/// other map, if any, is deleted. Returns as `conntrack::pin_flow`; `None` when
/// `EXCEPTIONS` refused the pin (full: residual R2, which the caller counts by its rule).
#[inline(always)]
pub(crate) fn pin(
    vip: &VipEntry,
    hash: u32,
    key: &FlowKey,
    entry: &CtEntry,
    choice: Choice,
    replace: bool,
) -> Option<(bool, Choice)> {
    let Ok(cell) = table::cell(vip, hash) else {
        return Some(conntrack::pin_flow(key, entry, choice, replace));
    };
    // SAFETY: a successful lookup's element; the read is a plain copy.
    let slot: SlotState = unsafe { *cell }.slot();
    bump(cell, &slot, choice.id);
    let udp = key.vip.proto == PROTO_UDP;
    match pin_class(&slot, udp, choice.id, entry.isn) {
        PinClass::Derivable => {
            if replace {
                conntrack::forget_exception(key);
            }
            Some(conntrack::pin_flow(key, entry, choice, replace))
        }
        PinClass::Exception => conntrack::pin_exception(key, entry, choice, replace),
    }
}

/// Rule P4: a pin naming backend `backend` is about to be made on the slot of cell
/// `cell`, read as `slot`; on a dirty slot whose owner is another backend, the slot's
/// epoch moves first, so a cleaning walk that read the slot before cannot commit. The
/// 64-bit state word is written back with its epoch (low 32 bits) plus one: two 8-byte
/// accesses, which do not tear. The BPF target has no atomic add here; the race is
/// safe. Two CPUs bumping at once may leave one bump, which still fails the walk's
/// compare-and-swap. A walk committing between the read and the write is undone: the
/// slot is written back dirty, and pins decide there again.
#[inline(always)]
fn bump(cell: *mut TableCell, slot: &SlotState, backend: u32) {
    if !slot.is_dirty() || slot.owner() == backend {
        return;
    }
    let bumped = TableCell::of_slot(&slot.bumped()).lo;
    // SAFETY: the state word is the first 8 bytes of the 8-byte aligned cell of a
    // successful lookup; one aligned 8-byte store.
    unsafe { core::ptr::write_volatile(&raw mut (*cell).lo, bumped) };
}
