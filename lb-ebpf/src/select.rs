//! Backend selection: the VIP lookup, connection tracking, and the Maglev table pick.
//!
//! First the cheap tests: [`maybe_vip`] (the `VIP_FILTER` bitmap) lets most non-VIP
//! traffic pass without a hash lookup; [`established`] forwards a conntrack hit whose VIP
//! id still names the packet's VIP (`VIP_INFO`) without the `VIPS` lookup. Everything
//! else takes the full path below.
//!
//! Order for a VIP packet (../shared/DESIGN.md, "Flow semantics"):
//! 1. A TCP SYN (SYN set, ACK and RST clear) opens a connection: it is picked from the
//!    VIP's current table, `table[flow_hash % M]`, and the choice is written to the
//!    flow's `SYN_CACHE` slot with the time it was seen ([`pick_syn`]). It does not consult conntrack
//!    (as in Katran): a miss in a large hash map is a cache and TLB miss, the largest
//!    cost of a new flow. A SYN that reuses the 4-tuple of an older connection is a new
//!    connection and follows the current table (a drained backend gets no new
//!    connection through port reuse either).
//! 2. Other packets: a conntrack hit (`CONNTRACK_V4` or `CONNTRACK_V6`) whose backend
//!    is active or draining (and, for UDP, not idle longer than the timeout) wins; a hit on a backend that is down or
//!    removed, or of another VIP, is re-picked and overwritten. A TCP entry is trusted
//!    directly only while its epoch equals the VIP's table epoch (`VIP_INFO`): then any
//!    SYN since was picked from the very table that chose the entry's backend. After a
//!    table change, [`pick_backend`] checks whether the slot holds a SYN of the 4-tuple
//!    with another initial sequence number, seen no earlier than the entry was pinned (a
//!    new connection: its choice wins and replaces the entry; a late duplicate of the
//!    pinned connection's own SYN carries its ISN and changes nothing), and re-labels the entry with the current epoch when the current table
//!    agrees with it; entries that the change moved keep their backend and keep being
//!    checked.
//! 3. A TCP miss takes the SYN's choice from `SYN_CACHE` (the handshake completing: it
//!    is promoted into conntrack); otherwise, and for UDP, `table[flow_hash % M]` of
//!    the current table, recorded in conntrack (mid-flow TCP after a restart or an
//!    eviction, new UDP flows). A TCP RST creates no entry.

#![expect(
    clippy::needless_borrows_for_generic_args,
    reason = "keys and values go to map helpers by reference: passing the 40-byte flow key \
              by value would make another stack copy in the BPF program"
)]

use aya_ebpf::{cty::c_int, helpers::generated::bpf_ktime_get_coarse_ns};
use lb_common::{
    hash::{flow_hash, vip_filter_bit},
    maps::{MAX_TABLE_SIZE, MAX_VIPS, TABLE_HEADER_LEN, TABLE_SIZE_INDEX},
    stats::{Reason, VipStats},
    types::{
        BACKEND_ACTIVE, BACKEND_DRAINING, BackendEntry, CtEntry, FAMILY_V4, LbConfig, PROTO_TCP,
        PROTO_UDP, SynEntry, VipAddrKey, VipEntry, VipKey,
    },
};

use crate::{
    maps::{
        BACKENDS, CONNTRACK_V4, CONNTRACK_V6, SYN_CACHE, TABLES, VIP_ADDRS, VIP_FILTER, VIP_INFO,
        VIPS,
    },
    parse::{Parsed, TCP_ACK, TCP_RST, TCP_SYN},
};

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

/// A UDP entry's `stamp_ns` is rewritten at most this often (ns), so a busy flow
/// does not dirty its conntrack entry on every packet.
const UDP_REFRESH_NS: u64 = 1_000_000_000;

/// The backend chosen for a packet.
pub(crate) struct Choice {
    /// Backend id (index into `BACKENDS` and `BACKEND_STATS`).
    pub(crate) id: u32,
    /// Its entry.
    pub(crate) backend: &'static BackendEntry,
}

/// False when the packet is certainly not for a VIP (its `VIP_FILTER` bit is clear).
#[inline(always)]
pub(crate) fn maybe_vip(key: &VipKey) -> bool {
    let bit = vip_filter_bit(key);
    VIP_FILTER
        .get(bit / 64)
        .is_some_and(|word| word & (1u64 << (bit % 64)) != 0)
}

/// Whether the packet opens a TCP connection: SYN set, ACK and RST clear.
#[inline(always)]
pub(crate) fn is_syn(p: &Parsed) -> bool {
    p.key.vip.proto == PROTO_TCP && p.tcp_flags & (TCP_SYN | TCP_ACK | TCP_RST) == TCP_SYN
}

/// A conntrack entry of the packet's flow, from one lookup shared by both paths.
pub(crate) type CtHit = Option<*mut CtEntry>;

/// Looks the packet's flow up in its family's conntrack map.
#[inline(always)]
pub(crate) fn lookup_flow(p: &Parsed) -> CtHit {
    if p.key.vip.family == FAMILY_V4 {
        CONNTRACK_V4.get_ptr_mut(&p.key.v4())
    } else {
        CONNTRACK_V6.get_ptr_mut(&p.key)
    }
}

/// `BPF_ANY`: create or replace.
const BPF_ANY: u64 = 0;
/// `BPF_NOEXIST`: create only.
const BPF_NOEXIST: u64 = 1;
/// `-EEXIST`, the helper's answer to a `BPF_NOEXIST` insert of an existing key.
const NEG_EEXIST: c_int = -17;

/// Records the packet's flow in its family's conntrack map with update `flags`. LRU
/// maps evict instead of refusing inserts; an error (allocation failure) only loses the
/// pin, never the packet (../shared/cases BR-16.T2).
#[inline(always)]
fn record_flow(p: &Parsed, entry: &CtEntry, flags: u64) -> Result<(), c_int> {
    if p.key.vip.family == FAMILY_V4 {
        CONNTRACK_V4.insert(&p.key.v4(), entry, flags)
    } else {
        CONNTRACK_V6.insert(&p.key, entry, flags)
    }
}

/// Pins a flow that had no usable entry: replaces the stale one (`replace`), or
/// creates one unless another CPU pinned the flow since the lookup, in which case that
/// pin wins (two packets of one flow never go to two backends because they raced).
/// Returns whether `entry` was recorded, and the backend to use.
#[inline(always)]
fn pin_flow(p: &Parsed, entry: &CtEntry, choice: Choice, replace: bool) -> (bool, Choice) {
    let flags = if replace { BPF_ANY } else { BPF_NOEXIST };
    match record_flow(p, entry, flags) {
        Ok(()) => (true, choice),
        Err(NEG_EEXIST) => {
            let winner = lookup_flow(p)
                // SAFETY: the pointer comes from a successful lookup; the id is copied.
                .map(|e| unsafe { (*e).backend_id })
                .and_then(keeps_flows);
            (false, winner.unwrap_or(choice))
        }
        Err(_) => (false, choice),
    }
}

/// How long a UDP entry may idle before its time is rewritten: at most once a second,
/// and at least twice per timeout, so that a busy flow never expires.
#[inline(always)]
fn udp_refresh_ns(cfg: &LbConfig) -> u64 {
    let half = cfg.udp_timeout_ns / 2;
    if half < UDP_REFRESH_NS {
        half
    } else {
        UDP_REFRESH_NS
    }
}

/// The fast path of an established flow: a conntrack hit whose VIP id still names the
/// packet's VIP (`VIP_INFO`), on a backend that may keep it; for UDP not idle past the
/// timeout, for TCP labelled with the VIP's current table epoch. Returns the VIP id and
/// the backend; `None` sends the packet to the full path (which counts stale and
/// expired entries and re-checks older TCP entries).
#[inline(always)]
pub(crate) fn established(p: &Parsed, ct: CtHit, cfg: &LbConfig) -> Option<(u32, Choice)> {
    // SAFETY: the pointer comes from a successful lookup and the value is only used
    // within this program run.
    let entry = unsafe { &mut *ct? };
    let info = VIP_INFO.get(entry.vip_id)?;
    if info.live == 0 || !info.key.same_as(&p.key.vip) {
        return None;
    }
    let choice = keeps_flows(entry.backend_id)?;
    if p.key.vip.proto == PROTO_UDP {
        let now = now_coarse_ns();
        let idle = now.wrapping_sub(entry.stamp_ns);
        if idle > cfg.udp_timeout_ns {
            return None;
        }
        if idle > udp_refresh_ns(cfg) {
            entry.stamp_ns = now;
        }
    } else if entry.epoch != info.epoch {
        return None;
    }
    Some((entry.vip_id, choice))
}

/// The VIP the packet is addressed to, if any.
#[inline(always)]
pub(crate) fn find_vip(p: &Parsed) -> Option<VipEntry> {
    // SAFETY: the pointer comes from a successful lookup; the 8-byte value is copied out
    // at once.
    VIPS.get_ptr(&p.key.vip).map(|v| unsafe { *v })
}

/// Whether `addr` carries at least one VIP (any port or protocol).
#[inline(always)]
pub(crate) fn is_vip_address(addr: &VipAddrKey) -> bool {
    VIP_ADDRS.get_ptr(addr).is_some()
}

/// The backend `id` if it may keep a conntrack flow of VIP `vip_id` (entry recorded for
/// the same VIP, backend active or draining).
#[inline(always)]
fn pinned(id: u32, entry_vip: u32, vip_id: u32) -> Option<Choice> {
    if entry_vip != vip_id {
        return None;
    }
    keeps_flows(id)
}

/// Backend `id` if it may keep its conntrack flows (active or draining).
#[inline(always)]
fn keeps_flows(id: u32) -> Option<Choice> {
    let backend = BACKENDS.get(id)?;
    (backend.state == BACKEND_ACTIVE || backend.state == BACKEND_DRAINING)
        .then_some(Choice { id, backend })
}

#[inline(always)]
fn now_coarse_ns() -> u64 {
    // SAFETY: bpf_ktime_get_coarse_ns takes no arguments and cannot fail.
    unsafe { bpf_ktime_get_coarse_ns() }
}

/// Chooses the backend for a TCP SYN from the VIP's current table and records the
/// choice in the flow's `SYN_CACHE` slot (step 1 of the module documentation).
#[inline(always)]
pub(crate) fn pick_syn(
    p: &Parsed,
    vip: &VipEntry,
    cfg: &LbConfig,
    stats: &mut VipStats,
) -> Result<Choice, Reason> {
    let hash = flow_hash(&p.key, cfg.hash_seed);
    let choice = table_pick(vip, hash)?;
    if let Some(slot) = SYN_CACHE.get_ptr_mut(hash & cfg.syn_cache_mask) {
        // SAFETY: an element of the shared array. Other CPUs may write it at the same
        // time; readers detect a torn element by its tag (`SynEntry::holds`).
        let slot = unsafe { &mut *slot };
        if slot.vip_id != SYN_SLOT_FREE && slot.key.vip.family != 0 && !slot.key.same_as(&p.key) {
            stats.ct_syn_only_evicted += 1;
        }
        let now = now_coarse_ns();
        slot.key = p.key;
        let (backend_id, vip_id) = (id16(choice.id), id16(vip.vip_id));
        slot.backend_id = backend_id;
        slot.vip_id = vip_id;
        slot.epoch = vip.epoch;
        slot.syn_ns = now;
        slot.seq = p.tcp_seq;
        slot.tag = SynEntry::tag_of(hash, backend_id, vip_id, vip.epoch, now, p.tcp_seq);
    }
    stats.new_flows += 1;
    Ok(choice)
}

/// The flow's `SYN_CACHE` slot if it holds a whole SYN entry of this flow and VIP.
#[inline(always)]
fn syn_slot(
    p: &Parsed,
    vip: &VipEntry,
    hash: u32,
    cfg: &LbConfig,
) -> Option<&'static mut SynEntry> {
    let slot = SYN_CACHE.get_ptr_mut(hash & cfg.syn_cache_mask)?;
    // SAFETY: as in `pick_syn`.
    let slot = unsafe { &mut *slot };
    (u32::from(slot.vip_id) == vip.vip_id && slot.holds(&p.key, hash)).then_some(slot)
}

/// Chooses the backend for a VIP packet other than a TCP SYN and maintains connection
/// tracking (steps 2 and 3 of the module documentation).
#[inline(always)]
pub(crate) fn pick_backend(
    p: &Parsed,
    vip: &VipEntry,
    cfg: &LbConfig,
    stats: &mut VipStats,
    ct: CtHit,
) -> Result<Choice, Reason> {
    let is_udp = p.key.vip.proto == PROTO_UDP;
    let mut had_entry = false;
    if let Some(entry) = ct {
        // SAFETY: the pointer comes from a successful lookup and the value is only used
        // within this program run.
        let entry = unsafe { &mut *entry };
        had_entry = true;
        if let Some(choice) = pinned(entry.backend_id, entry.vip_id, vip.vip_id) {
            if !is_udp {
                stats.ct_hits += 1;
                return Ok(recheck_tcp(p, vip, cfg, entry, choice));
            }
            let now = now_coarse_ns();
            let idle = now.wrapping_sub(entry.stamp_ns);
            if idle <= cfg.udp_timeout_ns {
                if idle > udp_refresh_ns(cfg) {
                    entry.stamp_ns = now;
                }
                stats.ct_hits += 1;
                return Ok(choice);
            }
            stats.ct_udp_expired += 1;
        } else {
            stats.ct_stale_repicked += 1;
        }
    }

    let hash = flow_hash(&p.key, cfg.hash_seed);
    let rst = p.tcp_flags & TCP_RST != 0;
    let now = now_coarse_ns();
    if !is_udp {
        if let Some(slot) = syn_slot(p, vip, hash, cfg) {
            let Some(choice) = keeps_flows(u32::from(slot.backend_id)) else {
                // Useless now (its backend went away): pick from the table below.
                slot.vip_id = SYN_SLOT_FREE;
                return pick_new(p, vip, stats, hash, now, had_entry, rst);
            };
            stats.ct_hits += 1;
            if rst {
                // A RST creates no state and leaves the handshake's choice in place.
                return Ok(choice);
            }
            // The handshake completed: the flow is established where its SYN went.
            let entry = pin(choice.id, vip.vip_id, now, slot.epoch, slot.seq);
            let (recorded, choice) = pin_flow(p, &entry, choice, had_entry);
            if recorded {
                slot.vip_id = SYN_SLOT_FREE;
            }
            return Ok(choice);
        }
        if !had_entry {
            stats.ct_misses_non_syn += 1;
        }
    }
    pick_new(p, vip, stats, hash, now, had_entry, rst)
}

/// A flow without a usable pin: `table[flow_hash % M]`, recorded in conntrack (not for
/// a TCP RST).
#[inline(always)]
fn pick_new(
    p: &Parsed,
    vip: &VipEntry,
    stats: &mut VipStats,
    hash: u32,
    now: u64,
    had_entry: bool,
    rst: bool,
) -> Result<Choice, Reason> {
    let choice = table_pick(vip, hash)?;
    if rst {
        return Ok(choice);
    }
    stats.new_flows += 1;
    let epoch = if p.key.vip.proto == PROTO_UDP {
        0
    } else {
        vip.epoch
    };
    Ok(pin_flow(
        p,
        &pin(choice.id, vip.vip_id, now, epoch, 0),
        choice,
        had_entry,
    )
    .1)
}

/// A conntrack entry pinning a flow of VIP `vip_id` to backend `backend_id` at time
/// `now` (coarse ns), chosen from the table of `epoch` (0 for UDP), for the TCP
/// connection whose initial sequence number is `isn` (0: not seen).
#[inline(always)]
fn pin(backend_id: u32, vip_id: u32, now: u64, epoch: u32, isn: u32) -> CtEntry {
    CtEntry {
        backend_id,
        vip_id,
        stamp_ns: now,
        epoch,
        isn,
    }
}

/// A TCP conntrack hit whose epoch is not the VIP's current one (the fast path declined
/// it): the VIP changed tables since the entry's backend was chosen, so a SYN since
/// may have reused the 4-tuple for a new connection and gone elsewhere. Returns the
/// backend to use: that SYN's choice when its slot holds a SYN of another connection
/// seen no earlier than the entry was pinned (it replaces the entry), else the entry's
/// own. The entry is re-labelled
/// with the current epoch when no such SYN is held and the current table maps the flow
/// to its backend, so that its next packets take the fast path again.
#[inline(always)]
fn recheck_tcp(
    p: &Parsed,
    vip: &VipEntry,
    cfg: &LbConfig,
    entry: &mut CtEntry,
    choice: Choice,
) -> Choice {
    if entry.epoch == vip.epoch {
        // `VIP_INFO` already names the next table while `VIPS` still selects this one.
        return choice;
    }
    let hash = flow_hash(&p.key, cfg.hash_seed);
    if let Some(slot) = syn_slot(p, vip, hash, cfg)
        && slot.is_new_connection_over(entry)
        && let Some(newer) = keeps_flows(u32::from(slot.backend_id))
    {
        if p.tcp_flags & TCP_RST != 0 {
            return newer;
        }
        // A whole new entry (one map update): readers on other CPUs see either the old
        // pin or the new one, never a mix of their fields.
        let now = now_coarse_ns();
        let entry = pin(newer.id, vip.vip_id, now, slot.epoch, slot.seq);
        if record_flow(p, &entry, BPF_ANY).is_ok() {
            slot.vip_id = SYN_SLOT_FREE;
        }
        return newer;
    }
    if table_slot(vip, hash) == Ok(entry.backend_id) {
        // Only the epoch changes: a reader sees the same backend with either label.
        entry.epoch = vip.epoch;
    }
    choice
}

/// Backend id in slot `hash % M` of the VIP's live Maglev table (the buffer its entry
/// names); 0 for an empty slot.
///
/// `drop_bad_config` when the VIP has no table or its size is 0 or above
/// `MAX_TABLE_SIZE` (a modulo by zero would return the dividend in BPF; ../shared/cases
/// BR-04.T9).
#[inline(always)]
fn table_slot(vip: &VipEntry, hash: u32) -> Result<u32, Reason> {
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

/// The backend in slot `hash % M` of the VIP's live table ([`table_slot`]);
/// `drop_no_backend` when the slot is empty or its backend is not active.
#[inline(always)]
fn table_pick(vip: &VipEntry, hash: u32) -> Result<Choice, Reason> {
    let id = table_slot(vip, hash)?;
    if id == 0 {
        return Err(Reason::DropNoBackend);
    }
    let backend = BACKENDS.get(id).ok_or(Reason::DropBadConfig)?;
    if backend.state != BACKEND_ACTIVE {
        return Err(Reason::DropNoBackend);
    }
    Ok(Choice { id, backend })
}
