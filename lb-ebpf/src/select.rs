//! Backend selection: the VIP lookup, connection tracking, and the Maglev table pick.
//!
//! First the cheap tests: [`maybe_vip`] (the `VIP_FILTER` bitmap) lets most non-VIP
//! traffic pass without a hash lookup; [`established`] forwards a conntrack hit whose VIP
//! id still names the packet's VIP (`VIP_INFO`) without the `VIPS` lookup. Everything
//! else takes the full path below.
//!
//! Order for a VIP packet (../shared/DESIGN.md, "Flow semantics"):
//! 1. `CONNTRACK` hit whose backend is active or draining (and, for UDP, not idle longer
//!    than the timeout) wins; a hit on a backend that is down or removed, or of another
//!    VIP generation, is re-picked and overwritten.
//! 2. TCP packets other than a pure SYN: `CONNTRACK_SYN` (flows of which only a SYN was
//!    seen) likewise; a non-SYN packet of such a flow promotes it into `CONNTRACK`.
//! 3. Otherwise `table[flow_hash % M]` of the VIP's current Maglev table. The choice is
//!    recorded: SYN-only TCP in `CONNTRACK_SYN`, other TCP (mid-flow after a restart or
//!    eviction) and UDP in `CONNTRACK`; a TCP RST creates no entry.

#![expect(
    clippy::needless_borrows_for_generic_args,
    reason = "keys and values go to map helpers by reference: passing the 40-byte flow key \
              by value would make another stack copy in the BPF program"
)]

use aya_ebpf::helpers::generated::bpf_ktime_get_coarse_ns;
use lb_common::{
    hash::{flow_hash, vip_filter_bit},
    maps::{MAX_TABLE_SIZE, TABLE_HEADER_LEN, TABLE_SIZE_INDEX},
    stats::{Reason, VipStats},
    types::{
        BACKEND_ACTIVE, BACKEND_DRAINING, BackendEntry, CtEntry, LbConfig, PROTO_UDP, VipAddrKey,
        VipEntry, VipKey,
    },
};

use crate::{
    maps::{BACKENDS, CONNTRACK, CONNTRACK_SYN, TABLES, VIP_ADDRS, VIP_FILTER, VIP_INFO, VIPS},
    parse::{Parsed, TCP_ACK, TCP_RST, TCP_SYN},
};

/// A UDP entry's `last_seen_ns` is rewritten at most this often (ns), so a busy flow
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

/// A conntrack entry of the packet's flow, from one lookup shared by both paths.
pub(crate) type CtHit = Option<*mut CtEntry>;

/// Looks the packet's flow up in `CONNTRACK`.
#[inline(always)]
pub(crate) fn lookup_flow(p: &Parsed) -> CtHit {
    CONNTRACK.get_ptr_mut(&p.key)
}

/// The fast path of an established flow: a conntrack hit whose VIP id still names the
/// packet's VIP (`VIP_INFO`), on a backend that may keep it, and for UDP not idle past
/// the timeout. Returns the VIP id and the backend; `None` sends the packet to the full
/// path (which counts stale and expired entries).
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
        let idle = now.wrapping_sub(entry.last_seen_ns);
        if idle > cfg.udp_timeout_ns {
            return None;
        }
        if idle > UDP_REFRESH_NS {
            entry.last_seen_ns = now;
        }
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

/// Chooses the backend for a VIP packet and maintains connection tracking.
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
    let mut now = 0;
    if let Some(entry) = ct {
        // SAFETY: the pointer comes from a successful lookup and the value is only used
        // within this program run.
        let entry = unsafe { &mut *entry };
        had_entry = true;
        if let Some(choice) = pinned(entry.backend_id, entry.vip_id, vip.vip_id) {
            if !is_udp {
                stats.ct_hits += 1;
                return Ok(choice);
            }
            now = now_coarse_ns();
            let idle = now.wrapping_sub(entry.last_seen_ns);
            if idle <= cfg.udp_timeout_ns {
                if idle > UDP_REFRESH_NS {
                    entry.last_seen_ns = now;
                }
                stats.ct_hits += 1;
                return Ok(choice);
            }
            stats.ct_udp_expired += 1;
        } else {
            stats.ct_stale_repicked += 1;
        }
    }

    let flags = p.tcp_flags;
    let syn_only = flags & (TCP_SYN | TCP_ACK) == TCP_SYN;
    let rst = flags & TCP_RST != 0;
    // A pure SYN skips CONNTRACK_SYN: it re-picks from the current table and overwrites
    // any SYN-only entry (a retransmitted SYN lands on the same backend unless the table
    // changed in between, and then the newest choice is the one recorded). This keeps
    // the new-flow path to one conntrack lookup.
    if !is_udp && !syn_only {
        if let Some(entry) = CONNTRACK_SYN.get_ptr(&p.key) {
            // SAFETY: as above; the 16-byte value is copied out at once.
            let entry = unsafe { *entry };
            if let Some(choice) = pinned(entry.backend_id, entry.vip_id, vip.vip_id) {
                if !rst {
                    // The handshake completed: the flow is established. An LRU insert
                    // only fails on allocation failure; the flow then stays in
                    // CONNTRACK_SYN, which still pins it.
                    let _ = CONNTRACK.insert(&p.key, &entry, 0);
                }
                stats.ct_hits += 1;
                return Ok(choice);
            }
        }
        if !had_entry {
            stats.ct_misses_non_syn += 1;
        }
    }

    let choice = table_pick(p, vip, cfg.hash_seed)?;
    if is_udp {
        if now == 0 {
            now = now_coarse_ns();
        }
        let entry = CtEntry {
            backend_id: choice.id,
            vip_id: vip.vip_id,
            last_seen_ns: now,
        };
        let _ = CONNTRACK.insert(&p.key, &entry, 0);
    } else if !rst {
        let entry = CtEntry {
            backend_id: choice.id,
            vip_id: vip.vip_id,
            last_seen_ns: 0,
        };
        let map_result = if syn_only {
            CONNTRACK_SYN.insert(&p.key, &entry, 0)
        } else {
            CONNTRACK.insert(&p.key, &entry, 0)
        };
        // LRU maps evict instead of refusing inserts; a failed insert only loses the
        // pin, never the packet (../shared/cases BR-16.T2).
        let _ = map_result;
    }
    if !rst {
        stats.new_flows += 1;
    }
    Ok(choice)
}

/// `table[flow_hash % M]` of the VIP's live Maglev table (the buffer its entry names).
///
/// `drop_bad_config` when the VIP has no table or its size is 0 or above
/// `MAX_TABLE_SIZE` (a modulo by zero would return the dividend in BPF; ../shared/cases
/// BR-04.T9); `drop_no_backend` when the slot is empty or its backend is not active.
#[inline(always)]
fn table_pick(p: &Parsed, vip: &VipEntry, seed: u32) -> Result<Choice, Reason> {
    let table = TABLES.get(vip.table_index()).ok_or(Reason::DropBadConfig)?;
    let size = *table.get(TABLE_SIZE_INDEX).ok_or(Reason::DropBadConfig)?;
    if size == 0 || size > MAX_TABLE_SIZE {
        return Err(Reason::DropBadConfig);
    }
    let slot = flow_hash(&p.key, seed) % size;
    let id = *table
        .get(slot + TABLE_HEADER_LEN)
        .ok_or(Reason::DropBadConfig)?;
    if id == 0 {
        return Err(Reason::DropNoBackend);
    }
    let backend = BACKENDS.get(id).ok_or(Reason::DropBadConfig)?;
    if backend.state != BACKEND_ACTIVE {
        return Err(Reason::DropNoBackend);
    }
    Ok(Choice { id, backend })
}
