// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Backend selection for a VIP packet: the pick functions, which the per-concept modules
//! serve ([`vip`](crate::vip), [`conntrack`](crate::conntrack),
//! [`syn_cache`](crate::syn_cache), [`table`](crate::table)).
//!
//! - [`established`]: the fast path of an established flow. A conntrack hit whose VIP id
//!   still names the packet's VIP (`VIP_INFO`) and whose pin holds is forwarded without
//!   the `VIPS` lookup.
//! - [`pick_syn`]: a TCP SYN (SYN set, ACK and RST clear) opens a connection. It takes
//!   the VIP's current table, `table[flow_hash % M]`, and its choice is remembered in the
//!   SYN cache. It does not consult conntrack, as in Katran: a miss in a large hash map
//!   is a cache and TLB miss, the largest cost of a new flow. A SYN that reuses the
//!   4-tuple of an older connection is a new connection and follows the current table,
//!   so a drained backend gets no new connection through port reuse either.
//! - [`pick_backend`]: every other VIP packet. Its pin, a SYN held in the SYN cache, or
//!   the table chooses, by the rules of `lb_common::conntrack` (which `lb flow` applies
//!   too); this module reads the maps for that decision and carries it out.

use lb_common::{
    conntrack::{Decision, Lookups, PinLookups, PinState, decide, pin_state},
    hash::flow_hash,
    stats::{Reason, VipStats},
    trace::Path,
    types::{LbConfig, PROTO_UDP, SynEntry, VipEntry},
};

use crate::{
    backend::{self, Choice},
    conntrack::{self, CtHit, now_coarse_ns},
    parse::Parsed,
    syn_cache, table,
    trace::Decision as Traced,
    vip,
};

/// What the fast path's check of a pin reads: the clock and `BACKENDS`.
struct Backends;

impl PinLookups for Backends {
    type Backend = Choice;

    #[inline(always)]
    fn now_ns(&mut self) -> u64 {
        now_coarse_ns()
    }

    #[inline(always)]
    fn keeps_flows(&mut self, id: u32) -> Option<Choice> {
        backend::keeps_flows(id)
    }
}

/// What the conntrack decision reads for a packet of VIP `vip`: the clock, `BACKENDS`,
/// `SYN_CACHE` and the VIP's live table.
struct Maps<'a> {
    vip: &'a VipEntry,
    cfg: &'a LbConfig,
}

impl PinLookups for Maps<'_> {
    type Backend = Choice;

    #[inline(always)]
    fn now_ns(&mut self) -> u64 {
        Backends.now_ns()
    }

    #[inline(always)]
    fn keeps_flows(&mut self, id: u32) -> Option<Choice> {
        Backends.keeps_flows(id)
    }
}

impl Lookups for Maps<'_> {
    type Slot = &'static mut SynEntry;

    #[inline(always)]
    fn syn_slot(&mut self, hash: u32) -> Option<&'static mut SynEntry> {
        syn_cache::slot(hash, self.cfg)
    }

    #[inline(always)]
    fn table_slot(&mut self, hash: u32) -> Option<u32> {
        table::slot(self.vip, hash).ok()
    }
}

/// The fast path of an established flow: a conntrack hit whose VIP id still names the
/// packet's VIP (`VIP_INFO`) and whose pin holds at that VIP's current table epoch
/// (`lb_common::conntrack::pin_state`). Returns the VIP id and the backend; `None` sends
/// the packet to the full path, which counts stale and expired entries and re-checks
/// TCP pins from older tables.
#[inline(always)]
pub(crate) fn established(p: &Parsed, ct: CtHit, cfg: &LbConfig) -> Option<(u32, Choice)> {
    // SAFETY: the pointer comes from a successful lookup and the value is only used
    // within this program run.
    let entry = unsafe { &mut *ct? };
    let info = vip::live_info(entry.vip_id, &p.key.vip)?;
    let udp = p.key.vip.proto == PROTO_UDP;
    match pin_state(
        &mut Backends,
        entry,
        entry.vip_id,
        info.epoch,
        udp,
        cfg.udp_timeout_ns,
    ) {
        PinState::Holds { backend, touch } => {
            touch.apply(entry);
            conntrack::note_activity(entry, p);
            Some((entry.vip_id, backend))
        }
        PinState::OlderTable(_) | PinState::Expired | PinState::Stale => None,
    }
}

/// Chooses the backend for a TCP SYN from the VIP's current table and remembers the
/// choice in the flow's SYN cache slot.
#[inline(always)]
pub(crate) fn pick_syn(
    p: &Parsed,
    vip: &VipEntry,
    cfg: &LbConfig,
    stats: &mut VipStats,
    traced: &mut Traced,
) -> Result<Choice, Reason> {
    traced.set(Path::Syn, 0);
    let hash = flow_hash(&p.key, cfg.hash_seed);
    let choice = table::pick(vip, hash)?;
    syn_cache::remember(p, vip, hash, &choice, cfg, stats);
    stats.new_flows += 1;
    traced.new_flow = true;
    Ok(choice)
}

/// Chooses the backend for a VIP packet other than a TCP SYN
/// (`lb_common::conntrack::decide`) and writes what the decision asks: the pin's new
/// time or label, a new pin, a freed SYN cache slot.
#[inline(always)]
pub(crate) fn pick_backend(
    p: &Parsed,
    vip: &VipEntry,
    cfg: &LbConfig,
    stats: &mut VipStats,
    ct: CtHit,
    traced: &mut Traced,
) -> Result<Choice, Reason> {
    // SAFETY: the pointer comes from a successful lookup and the value is only used
    // within this program run.
    let entry = ct.map(|entry| unsafe { &mut *entry });
    let decision = decide(
        &mut Maps { vip, cfg },
        &p.key,
        p.is_rst(),
        vip,
        entry.as_deref(),
        cfg,
        stats,
    );
    match decision {
        Decision::Pin { backend, touch } => {
            traced.set(Path::CtPin, 0);
            if let Some(entry) = entry {
                touch.apply(entry);
                conntrack::note_activity(entry, p);
            }
            Ok(backend)
        }
        Decision::HeldSyn {
            backend,
            slot,
            record,
        } => {
            traced.set(Path::SynCache, 0);
            let Some(record) = record else {
                return Ok(backend);
            };
            let pin = record.entry(backend.id);
            let (recorded, choice) = conntrack::pin_flow(&p.key, &pin, backend, record.replace);
            if recorded {
                syn_cache::free(slot);
            }
            Ok(choice)
        }
        Decision::Table {
            hash,
            record,
            stale_slot,
        } => {
            traced.set(Path::Table, 0);
            if let Some(slot) = stale_slot {
                syn_cache::free(slot);
            }
            let choice = table::pick(vip, hash)?;
            let Some(record) = record else {
                return Ok(choice);
            };
            stats.new_flows += 1;
            traced.new_flow = true;
            let pin = record.entry(choice.id);
            Ok(conntrack::pin_flow(&p.key, &pin, choice, record.replace).1)
        }
    }
}
