//! Backend selection for a VIP packet: the pick functions, which the per-concept modules
//! serve ([`vip`](crate::vip), [`conntrack`](crate::conntrack),
//! [`syn_cache`](crate::syn_cache), [`table`](crate::table)).
//!
//! - [`established`]: the fast path of an established flow. A conntrack hit whose VIP id
//!   still names the packet's VIP (`VIP_INFO`) is forwarded without the `VIPS` lookup.
//! - [`pick_syn`]: a TCP SYN (SYN set, ACK and RST clear) opens a connection. It takes
//!   the VIP's current table, `table[flow_hash % M]`, and its choice is remembered in the
//!   SYN cache. It does not consult conntrack, as in Katran: a miss in a large hash map
//!   is a cache and TLB miss, the largest cost of a new flow. A SYN that reuses the
//!   4-tuple of an older connection is a new connection and follows the current table,
//!   so a drained backend gets no new connection through port reuse either.
//! - [`pick_backend`]: every other VIP packet. Its conntrack entry (its pin), a SYN held
//!   in the SYN cache, or the table chooses, as described in the steps below.
//!
//! The steps of [`pick_backend`]:
//! 1. A pin holds while its VIP is the packet's and its backend is active or draining; a
//!    UDP pin also expires when idle longer than the timeout. A pin that does not hold is
//!    re-picked and overwritten.
//! 2. A TCP pin chosen from the VIP's current table (its epoch equals the VIP's) decides
//!    alone: every SYN since was picked from that same table. After a table change, a
//!    SYN may have reused the 4-tuple for a new connection and gone elsewhere. A held SYN
//!    with another initial sequence number, seen no earlier than the pin was made, is
//!    such a connection: its choice wins and replaces the pin. A late duplicate of the
//!    pinned connection's own SYN carries its ISN and changes nothing. Otherwise the pin
//!    decides, and it is re-labelled with the current epoch when the current table agrees
//!    with it; pins that the change moved keep their backend and keep being checked.
//! 3. Without a pin that holds, a TCP flow takes its held SYN's choice: the handshake is
//!    completing, and the choice is promoted into conntrack.
//! 4. Otherwise the flow takes `table[flow_hash % M]` of the current table, recorded in
//!    conntrack: mid-flow TCP after a restart or an eviction, and new UDP flows.
//!
//! A TCP RST is forwarded like other packets but creates no state.

use lb_common::{
    hash::flow_hash,
    stats::{Reason, VipStats},
    types::{CtEntry, LbConfig, PROTO_UDP, VipEntry},
};

use crate::{
    backend::{self, Choice},
    conntrack::{self, CtHit, now_coarse_ns},
    parse::Parsed,
    syn_cache, table, vip,
};

/// A UDP entry's `stamp_ns` is rewritten at most this often (ns), so a busy flow
/// does not dirty its conntrack entry on every packet.
const UDP_REFRESH_NS: u64 = 1_000_000_000;

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
    let info = vip::live_info(entry.vip_id, &p.key.vip)?;
    let choice = backend::keeps_flows(entry.backend_id)?;
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

/// The backend `id` if it may keep a conntrack flow of VIP `vip_id` (entry recorded for
/// the same VIP, backend active or draining).
#[inline(always)]
fn pinned(id: u32, entry_vip: u32, vip_id: u32) -> Option<Choice> {
    if entry_vip != vip_id {
        return None;
    }
    backend::keeps_flows(id)
}

/// Chooses the backend for a TCP SYN from the VIP's current table and remembers the
/// choice in the flow's SYN cache slot.
#[inline(always)]
pub(crate) fn pick_syn(
    p: &Parsed,
    vip: &VipEntry,
    cfg: &LbConfig,
    stats: &mut VipStats,
) -> Result<Choice, Reason> {
    let hash = flow_hash(&p.key, cfg.hash_seed);
    let choice = table::pick(vip, hash)?;
    syn_cache::remember(p, vip, hash, &choice, cfg, stats);
    stats.new_flows += 1;
    Ok(choice)
}

/// Chooses the backend for a VIP packet other than a TCP SYN and maintains connection
/// tracking (the steps of the module documentation).
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
    let rst = p.is_rst();
    let now = now_coarse_ns();
    if !is_udp {
        if let Some(slot) = syn_cache::held(p, vip, hash, cfg) {
            let Some(choice) = backend::keeps_flows(u32::from(slot.backend_id)) else {
                // Useless now (its backend went away): pick from the table below.
                syn_cache::free(slot);
                return pick_new(p, vip, stats, hash, now, had_entry, rst);
            };
            stats.ct_hits += 1;
            if rst {
                // A RST creates no state and leaves the handshake's choice in place.
                return Ok(choice);
            }
            // The handshake completed: the flow is established where its SYN went.
            let entry = pin(choice.id, vip.vip_id, now, slot.epoch, slot.seq);
            let (recorded, choice) = conntrack::pin_flow(&p.key, &entry, choice, had_entry);
            if recorded {
                syn_cache::free(slot);
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
    let choice = table::pick(vip, hash)?;
    if rst {
        return Ok(choice);
    }
    stats.new_flows += 1;
    let epoch = if p.key.vip.proto == PROTO_UDP {
        0
    } else {
        vip.epoch
    };
    Ok(conntrack::pin_flow(
        &p.key,
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
/// it): step 2 of the module documentation. Returns the backend to use: that of a held
/// SYN of a new connection (which replaces the entry), else the entry's own, re-labelled
/// with the current epoch when the current table maps the flow to it, so that its next
/// packets take the fast path again.
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
    if let Some(slot) = syn_cache::held(p, vip, hash, cfg)
        && slot.is_new_connection_over(entry)
        && let Some(newer) = backend::keeps_flows(u32::from(slot.backend_id))
    {
        if p.is_rst() {
            return newer;
        }
        // A whole new entry (one map update): readers on other CPUs see either the old
        // pin or the new one, never a mix of their fields.
        let now = now_coarse_ns();
        let entry = pin(newer.id, vip.vip_id, now, slot.epoch, slot.seq);
        let (recorded, newer) = conntrack::pin_flow(&p.key, &entry, newer, true);
        if recorded {
            syn_cache::free(slot);
        }
        return newer;
    }
    if table::slot(vip, hash) == Ok(entry.backend_id) {
        // Only the epoch changes: a reader sees the same backend with either label.
        entry.epoch = vip.epoch;
    }
    choice
}
