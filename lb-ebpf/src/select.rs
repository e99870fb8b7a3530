// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Backend selection for a VIP packet: the pick functions, which the per-concept modules
//! serve ([`vip`](crate::vip), [`conntrack`](crate::conntrack),
//! [`syn_cache`](crate::syn_cache), [`table`](crate::table)).
//!
//! - [`established`]: the fast path of an established flow. A conntrack hit whose VIP id
//!   still names the packet's VIP (`VIP_INFO`) and whose pin holds is forwarded without
//!   the `VIPS` lookup.
//! - [`pick_syn`]: a TCP SYN (SYN set, ACK and RST clear). A duplicate SYN of the
//!   flow's pinned connection, or a retransmission of the SYN held in its SYN cache
//!   slot, goes where that connection went (`lb_common::conntrack::decide_syn`: both
//!   carry its ISN). Any other SYN opens a connection: it takes the VIP's current
//!   table, `table[table_hash % M]`, and its choice is remembered in the SYN cache. A
//!   SYN that reuses the 4-tuple of an older connection (another ISN) is a new
//!   connection and follows the current table, so a drained backend gets no new
//!   connection through port reuse either. No SYN writes conntrack, and only a SYN in
//!   the window after its VIP's table changed reads it ([`table_seen`](crate::table_seen)):
//!   before that window, a duplicate's connection was picked from the table the SYN
//!   takes anyway, and a miss in a large hash map is the largest cost of a new flow.
//! - [`pick_backend`]: every other VIP packet. Its pin, a SYN held in the SYN cache, or
//!   the table chooses, by the rules of `lb_common::conntrack` (which `lb flow` applies
//!   too); this module reads the maps for that decision and carries it out. A new pin
//!   is made only within the CPU's rate of new pins ([`new_pin_rate`](crate::new_pin_rate)).
//!
//! On a VIP with a persistence timeout, the client's affinity pin chooses before the
//! table wherever the table would choose for a new connection: a SYN's, and that of a
//! packet no pin or held SYN decides ([`affinity`](crate::affinity)).

use lb_common::{
    conntrack::{
        Decision, Lookups, PinLookups, PinState, Record, SynDecision, decide, decide_syn, pin_state,
    },
    fastpath::{Note, OnFull, UNSEEN_TICKS},
    stats::{Reason, VipStats},
    trace::Path,
    types::{CtEntry, FlowKey, LbConfig, PROTO_UDP, SynEntry, VipEntry},
};

use crate::{
    affinity,
    backend::{self, Choice},
    candidates,
    conntrack::{self, CtHit, now_coarse_ns},
    fast, hashes, new_pin_rate,
    parse::Parsed,
    syn_cache, table, table_seen,
    trace::Decision as Traced,
    vip,
};

/// What the fast path's check of a pin reads: `BACKENDS`, and the clock, which only a
/// UDP pin's idle check needs (read once, a helper call; 0 for TCP).
struct Backends {
    now_ns: u64,
}

impl PinLookups for Backends {
    type Backend = Choice;

    #[inline(always)]
    fn now_ns(&mut self) -> u64 {
        self.now_ns
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
        now_coarse_ns()
    }

    #[inline(always)]
    fn keeps_flows(&mut self, id: u32) -> Option<Choice> {
        backend::keeps_flows(id)
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
        let slot = table::slot(self.vip, hash);
        // The owner is 0 on the unreadable path, not left undefined, and opaque to
        // LLVM: it compares the payload of a `None` too (`== Some(id)` as two tests
        // joined), and the verifier refuses a read of a register no path wrote
        // (`R1 !read_ok`). A pin's re-check only, not the conntrack hit's path.
        let id = core::hint::black_box(slot.unwrap_or(0));
        slot.is_ok().then_some(id)
    }

    #[inline(always)]
    fn flow_hash(&mut self, key: &FlowKey, seed: u32) -> u32 {
        hashes::flow_hash(key, seed)
    }

    #[inline(always)]
    fn table_hash_of(&mut self, key: &FlowKey, flags: u32, seed: u32, flow: u32) -> u32 {
        hashes::table_hash_of(key, flags, seed, flow)
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
    let now_ns = if udp { now_coarse_ns() } else { 0 };
    match pin_state(
        &mut Backends { now_ns },
        entry,
        entry.vip_id,
        info.epoch,
        udp,
        cfg.udp_timeout_ns,
    ) {
        PinState::Holds { backend, touch } => {
            touch.apply(entry);
            conntrack::note_activity(entry, p, now_ns);
            Some((entry.vip_id, backend))
        }
        PinState::OlderTable(_) | PinState::Expired | PinState::Stale => None,
    }
}

/// Chooses the backend for a TCP SYN (`lb_common::conntrack::decide_syn`, with the
/// flow's pin if the VIP's table changed recently): its connection's, for a duplicate
/// or a retransmission; else the VIP's current table's, remembered in the flow's SYN
/// cache slot.
#[inline(always)]
pub(crate) fn pick_syn(
    p: &Parsed,
    vip: &VipEntry,
    cfg: &LbConfig,
    stats: &mut VipStats,
    traced: &mut Traced,
) -> Result<Choice, Reason> {
    traced.set(Path::Syn, 0);
    let now = now_coarse_ns();
    let ct = if !table_seen::table_changed(vip, now) {
        None
    } else if fast::is_fast(vip) {
        conntrack::lookup_fast(&p.key)
    } else {
        conntrack::lookup_flow(&p.key)
    };
    // SAFETY: the pointer comes from a successful lookup and the entry is only read
    // within this program run.
    let entry = ct.map(|entry| unsafe { &*entry });
    let (hash, table) = match decide_syn(&mut Maps { vip, cfg }, &p.key, p.tcp_seq, vip, entry, cfg)
    {
        SynDecision::Pin(backend) => {
            traced.set(Path::CtPin, 0);
            stats.ct_hits += 1;
            // A duplicate SYN is the flow's packet too: the cleaning sees it live. Not a
            // pin made at a SYN that no later packet saw (rule S4's expiry): a SYN shows
            // no completed handshake.
            if let Some(entry) = ct
                // SAFETY: the pointer comes from a successful lookup; one field read.
                && unsafe { (*entry).seen_ticks } != UNSEEN_TICKS
            {
                // SAFETY: the pointer comes from a successful lookup; one field store.
                conntrack::note_activity(unsafe { &mut *entry }, p, now);
            }
            return Ok(backend);
        }
        SynDecision::HeldSyn(backend) => {
            traced.set(Path::SynCache, 0);
            stats.ct_hits += 1;
            return Ok(backend);
        }
        SynDecision::Table { hash, table } => (hash, table),
    };
    let (choice, pin) = if fast::is_fast(vip) {
        let over_pin = syn_over_pin(stats, entry, vip.vip_id);
        fast::pick_syn(vip, table, now, stats, over_pin)?
    } else {
        let (choice, pinned) = affinity::pick(&p.key, vip, now, true, || table::pick(vip, table))?;
        if pinned {
            traced.set(Path::Affinity, 0);
        }
        (choice, false)
    };
    stats.new_flows += 1;
    traced.new_flow = true;
    if pin && new_pin_rate::may_pin(cfg, now) {
        return pin_syn(p, vip, table, choice, now, stats);
    }
    syn_cache::remember(p, vip, hash, &choice, cfg, stats, now);
    Ok(choice)
}

/// Counts `fp_syn_over_pin` (R1) for a new connection's SYN to fast-path VIP `vip_id`
/// when the flow's pin (read only in the window after a table change) was made without
/// a SYN (ISN 0) and its backend keeps flows: the SYN may duplicate that connection's.
/// Returns whether it did: the SYN then counts no other give-up, as
/// `fastpath::decide` notes one.
#[inline(always)]
fn syn_over_pin(stats: &mut VipStats, pin: Option<&CtEntry>, vip_id: u32) -> bool {
    let over_pin = pin.is_some_and(|pin| {
        pin.vip_id == vip_id && pin.isn == 0 && backend::keeps_flows(pin.backend_id).is_some()
    });
    if over_pin {
        stats.count(Note::SynOverPin);
    }
    over_pin
}

/// Rule S4 as the data path applies it (`lb_common::fastpath::syn_needs_pin`): pins a
/// new connection's SYN `p` on fast-path VIP `vip`'s slot `hash % M`, sent to `choice`
/// at `now`, at once instead of holding it. The pin names the owner, not the clean
/// owner, so it is an exception (rule M3, [`fast::pin`]); it is written unseen
/// (`fastpath::UNSEEN_TICKS`), so the cleaning deletes it past the SYN hold if no
/// later packet comes. A pin of the 4-tuple made meanwhile, or one the SYN did not read
/// (outside the window after a change), wins if its backend keeps flows: a SYN never
/// moves a pin. With `EXCEPTIONS` full the SYN is dropped (`drop_no_backend`) and
/// counted (`fp_syn_dropped`, residual R2): its client retransmits.
#[inline(always)]
fn pin_syn(
    p: &Parsed,
    vip: &VipEntry,
    hash: u32,
    choice: Choice,
    now: u64,
    stats: &mut VipStats,
) -> Result<Choice, Reason> {
    if let Some(winner) = conntrack::lookup_flow(&p.key)
        // SAFETY: the pointer comes from a successful lookup; the id is copied.
        .map(|e| unsafe { (*e).backend_id })
        .and_then(backend::keeps_flows)
    {
        return Ok(winner);
    }
    let record = Record {
        replace: false,
        vip_id: vip.vip_id,
        stamp_ns: now,
        epoch: vip.epoch,
        isn: p.tcp_seq,
    };
    let entry = CtEntry {
        seen_ticks: UNSEEN_TICKS,
        ..record.entry(choice.id)
    };
    match fast::pin(vip, hash, &p.key, &entry, choice, false) {
        Some((_, winner)) => Ok(winner),
        None => {
            stats.count(OnFull::Drop.note());
            Err(Reason::DropNoBackend)
        }
    }
}

/// What [`pick_backend`] reports besides the backend.
pub(crate) struct Out<'a> {
    /// A new pin was over the CPU's rate and not made.
    pub(crate) unpinned: &'a mut bool,
    /// The second-chance candidate the packet carries (backend id), 0 for none
    /// ([`candidates::offer`]); such a packet is not pinned.
    pub(crate) candidate: &'a mut u32,
}

/// Chooses the backend for a VIP packet other than a TCP SYN
/// (`lb_common::conntrack::decide`) and writes what the decision asks: the pin's new
/// time or label, a new pin, a freed SYN cache slot. A new pin over the CPU's rate
/// ([`new_pin_rate::may_pin`]) is not made: the packet goes where it would have pointed and
/// `out.unpinned` is set. A miss that carries a second-chance candidate is not pinned
/// either (rule SC4 of `lb_common::second_chance`): `out.candidate` names it.
#[inline(always)]
pub(crate) fn pick_backend(
    p: &Parsed,
    vip: &VipEntry,
    cfg: &LbConfig,
    stats: &mut VipStats,
    ct: CtHit,
    traced: &mut Traced,
    out: Out<'_>,
) -> Result<Choice, Reason> {
    let unpinned = out.unpinned;
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
                conntrack::note_activity(entry, p, 0);
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
            if !record.replace && !new_pin_rate::may_pin(cfg, record.stamp_ns) {
                *unpinned = true;
                return Ok(backend);
            }
            let pin = record.entry(backend.id);
            let written = if fast::is_fast(vip) {
                let hash = hashes::table_hash(&p.key, vip.flags, cfg.hash_seed);
                fast::pin(vip, hash, &p.key, &pin, backend, record.replace)
            } else {
                Some(conntrack::pin_flow(&p.key, &pin, backend, record.replace))
            };
            let Some((recorded, choice)) = written else {
                // Residual R2: `EXCEPTIONS` is full; the held SYN stays and decides.
                stats.count(OnFull::KeepHeld.note());
                return Ok(backend);
            };
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
            let fast = fast::is_fast(vip);
            let choice = if fast {
                let udp = p.key.vip.proto == PROTO_UDP;
                fast::pick_miss(vip, hash, udp, now_coarse_ns(), cfg, stats)?
            } else {
                let now = record.map_or_else(now_coarse_ns, |r| r.stamp_ns);
                let write = record.is_some();
                let (choice, pinned) =
                    affinity::pick(&p.key, vip, now, write, || table::pick(vip, hash))?;
                if pinned {
                    traced.set(Path::Affinity, 0);
                }
                choice
            };
            *out.candidate = candidates::offer(p, vip, hash, &choice, stats);
            if *out.candidate != 0 {
                return Ok(choice);
            }
            let Some(record) = record else {
                return Ok(choice);
            };
            if !record.replace && !new_pin_rate::may_pin(cfg, record.stamp_ns) {
                *unpinned = true;
                return Ok(choice);
            }
            stats.new_flows += 1;
            traced.new_flow = true;
            let pin = record.entry(choice.id);
            if !fast {
                return Ok(conntrack::pin_flow(&p.key, &pin, choice, record.replace).1);
            }
            match fast::pin(vip, hash, &p.key, &pin, choice, record.replace) {
                Some((_, choice)) => Ok(choice),
                None => {
                    // Residual R2: `EXCEPTIONS` is full; forwarded unpinned.
                    stats.count(OnFull::Forward.note());
                    Ok(choice)
                }
            }
        }
    }
}
