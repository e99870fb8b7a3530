// SPDX-License-Identifier: MIT OR Apache-2.0
//! The connection-tracking decision: which state chooses the backend of a VIP packet that
//! does not open a TCP connection, and what the choice writes back.
//!
//! Three states can choose: the flow's conntrack entry (its pin), a SYN of the flow held
//! in the SYN cache, and the VIP's Maglev table. A TCP SYN (SYN set, ACK and RST clear)
//! does not come here: a duplicate or retransmitted SYN follows its connection, any
//! other takes the VIP's current table, and the XDP program remembers that choice in
//! the SYN cache ([`decide_syn`]). For every other packet:
//!
//! 1. A pin holds while its VIP is the packet's and its backend is active or draining;
//!    a UDP pin also expires when idle longer than the timeout ([`udp_idle`]). A pin that
//!    does not hold is re-picked and overwritten.
//! 2. A TCP pin chosen from the VIP's current table (its epoch equals the VIP's) decides
//!    alone: every SYN since was picked from that same table. After a table change, a SYN
//!    may have reused the 4-tuple for a new connection and gone elsewhere. A held SYN
//!    with another initial sequence number, seen no earlier than the pin was made, is
//!    such a connection: its choice decides and replaces the pin. (A late duplicate of
//!    the pinned connection's own SYN carries its ISN and changes nothing.) Otherwise the
//!    pin decides; it is re-labelled with the current epoch when the current table agrees
//!    with it, so that its next packets take the fast path again. A pin whose connection
//!    the client began to close (a FIN or RST seen, `CtEntry::closing`) is checked the
//!    same way whatever its epoch: a new connection on the 4-tuple replaces it with an
//!    open pin, so the live connection counts see it.
//! 3. Without a pin that holds, a TCP flow takes its held SYN's choice: the handshake is
//!    completing, and the choice is promoted into conntrack.
//! 4. Otherwise the table decides, `table[table_hash % M]` (the flow hash, or the hash of
//!    the VIP's hash fields: [`crate::hash_fields`]), and the choice is pinned:
//!    mid-flow TCP after a restart or an eviction, and new UDP flows.
//!
//! A TCP RST is forwarded like any other packet but writes no state.
//!
//! The XDP program takes this decision for every such packet, and `lb flow` takes it in
//! userspace to predict where a flow's next packet goes: both call [`decide`], as both
//! call [`crate::hash::flow_hash`]; the program's established-flow fast path calls
//! [`pin_state`] alone. The decision reads what it needs through [`Lookups`], on demand
//! and in the order above, so the per-packet path makes no lookup it does not need. It
//! writes nothing itself: it returns a [`Decision`] that the caller carries out.

use core::borrow::Borrow;

use crate::{
    hash::flow_hash,
    hash_fields::table_hash_of,
    stats::VipStats,
    types::{CT_OPEN, CtEntry, FlowKey, LbConfig, PROTO_UDP, SynEntry, VipEntry, ct_ticks},
};

mod syn;
#[cfg(test)]
mod tests;

pub use syn::{DUPLICATE_SYN_WINDOW_NS, SynDecision, decide_syn};

/// A UDP pin's time is rewritten at most this often (ns), so that a busy flow does not
/// dirty its pin on every packet.
pub const UDP_REFRESH_NS: u64 = 1_000_000_000;

/// How long a UDP pin has been idle, compared with the timeout ([`udp_idle`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UdpIdle {
    /// The pin holds.
    Fresh,
    /// The pin holds, and its time is to be rewritten to now.
    Refresh,
    /// Idle longer than the timeout: the pin no longer holds.
    Expired,
}

/// The idle state, at `now_ns`, of a UDP pin stamped at `stamp_ns` (both
/// `bpf_ktime_get_coarse_ns`, ns), with idle timeout `timeout_ns`.
///
/// A pin is refreshed once idle longer than a second ([`UDP_REFRESH_NS`]) or half the
/// timeout, whichever is shorter: a busy flow never expires, and its entry is written
/// at most once a second.
#[inline(always)]
#[must_use]
pub fn udp_idle(stamp_ns: u64, now_ns: u64, timeout_ns: u64) -> UdpIdle {
    let idle = now_ns.wrapping_sub(stamp_ns);
    let half = timeout_ns / 2;
    let refresh_ns = if half < UDP_REFRESH_NS {
        half
    } else {
        UDP_REFRESH_NS
    };
    if idle > timeout_ns {
        UdpIdle::Expired
    } else if idle > refresh_ns {
        UdpIdle::Refresh
    } else {
        UdpIdle::Fresh
    }
}

/// What [`pin_state`] reads: the clock and the backends' states.
pub trait PinLookups {
    /// A backend that may keep flows, in the form the caller uses afterwards (the XDP
    /// program: its id and `BACKENDS` entry; `lb flow`: its id).
    type Backend;

    /// The time now, on the clock pins are stamped with
    /// (`bpf_ktime_get_coarse_ns`: CLOCK_MONOTONIC_COARSE, ns).
    fn now_ns(&mut self) -> u64;

    /// Backend `id` if it may keep its flows: active or draining.
    fn keeps_flows(&mut self, id: u32) -> Option<Self::Backend>;
}

/// What [`decide`] reads besides [`PinLookups`]: the flow's SYN cache slot and the VIP's
/// live Maglev table.
pub trait Lookups: PinLookups {
    /// A SYN cache slot, in the form the caller frees it afterwards (the XDP program: a
    /// reference into `SYN_CACHE`).
    type Slot: Borrow<SynEntry>;

    /// The `SYN_CACHE` slot of a flow whose flow hash is `hash`, whatever it holds: the
    /// XDP program's is that of the CPU it runs on ([`crate::syn_cache::slot_index`]).
    /// `lb flow`, which knows no CPU, reads the flow's slot in every part and gives
    /// the newest that holds a SYN of the flow: the decision is the program's for a
    /// packet on that SYN's CPU, where receive-side scaling brings the flow's packets.
    fn syn_slot(&mut self, hash: u32) -> Option<Self::Slot>;

    /// The backend id in slot `hash % M` of the VIP's live Maglev table (0: an empty
    /// slot), `None` when the table cannot be read. Only compared with a pin's backend,
    /// to re-label the pin.
    fn table_slot(&mut self, hash: u32) -> Option<u32>;

    /// The flow hash of `key` with `seed` ([`flow_hash`]; the XDP program calls it out of
    /// line, a function its verifier checks once).
    #[inline(always)]
    fn flow_hash(&mut self, key: &FlowKey, seed: u32) -> u32 {
        flow_hash(key, seed)
    }

    /// The table hash of `key` for VIP flags `flags`, whose flow hash is `flow`
    /// ([`table_hash_of`], which the XDP program calls out of line too).
    #[inline(always)]
    fn table_hash_of(&mut self, key: &FlowKey, flags: u32, seed: u32, flow: u32) -> u32 {
        table_hash_of(key, flags, seed, flow)
    }
}

/// What a flow's pin says ([`pin_state`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PinState<B> {
    /// The pin holds and decides (rules 1 and 2 of the module documentation); `touch` is
    /// what the caller writes back to the entry.
    Holds {
        /// The pinned backend.
        backend: B,
        /// What to write back.
        touch: Touch,
    },
    /// A TCP pin chosen from another table than the VIP's current one, or whose
    /// connection is closing: its backend decides unless a held SYN of a new connection
    /// does (rule 2).
    OlderTable(B),
    /// A UDP pin idle longer than the timeout.
    Expired,
    /// A pin of another VIP, or on a backend that is down or removed.
    Stale,
}

/// What the caller writes back to the entry of a pin that decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Touch {
    /// Nothing.
    Nothing,
    /// The entry's `stamp_ns` becomes this time (a busy UDP flow, [`UdpIdle::Refresh`]).
    Stamp(u64),
    /// The entry's `epoch` becomes this epoch, the VIP's current one, whose table maps
    /// the flow to the same backend. Only the label changes: a reader on another CPU
    /// sees the same backend with either.
    Relabel(u32),
}

impl Touch {
    /// Writes the change into `entry`.
    #[inline(always)]
    pub fn apply(self, entry: &mut CtEntry) {
        match self {
            Touch::Nothing => {}
            Touch::Stamp(now_ns) => entry.stamp_ns = now_ns,
            Touch::Relabel(epoch) => entry.epoch = epoch,
        }
    }
}

/// A pin for the caller to write into conntrack: a whole new entry (one map update, so
/// readers on other CPUs see the old pin or the new one, never a mix of their fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// Overwrite the flow's entry (it has one: stale, expired or superseded). When
    /// false, create the entry only if no other CPU has created it since the lookup;
    /// if one has, that pin wins (two packets of a flow never go to two backends
    /// because they raced).
    pub replace: bool,
    /// [`CtEntry::vip_id`].
    pub vip_id: u32,
    /// [`CtEntry::stamp_ns`]: now.
    pub stamp_ns: u64,
    /// [`CtEntry::epoch`]: that of the table the backend came from (0 for UDP).
    pub epoch: u32,
    /// [`CtEntry::isn`]: the SYN's sequence number when the pin comes from a held SYN,
    /// else 0.
    pub isn: u32,
}

impl Record {
    /// The entry pinning the flow to backend `backend_id`.
    #[inline(always)]
    #[must_use]
    pub fn entry(&self, backend_id: u32) -> CtEntry {
        CtEntry {
            backend_id,
            vip_id: self.vip_id,
            stamp_ns: self.stamp_ns,
            epoch: self.epoch,
            isn: self.isn,
            seen_ticks: ct_ticks(self.stamp_ns),
            closing: CT_OPEN,
            _pad: [0; 3],
        }
    }
}

/// Which state chooses the packet's backend, and what the caller writes afterwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision<B, S> {
    /// The flow's pin decides (rules 1 and 2).
    Pin {
        /// The pinned backend.
        backend: B,
        /// What to write back to the entry.
        touch: Touch,
    },
    /// A SYN held in the SYN cache decides: a new connection on the flow's 4-tuple
    /// (rule 2) or the flow's own handshake completing (rule 3).
    HeldSyn {
        /// The SYN's backend.
        backend: B,
        /// The SYN's slot: the caller frees it once `record` is written.
        slot: S,
        /// The pin to write, pointing at `backend`; `None` for a RST, which leaves the
        /// handshake's choice in place.
        record: Option<Record>,
    },
    /// The VIP's table decides (rule 4): the caller picks slot `hash % M` of the live
    /// table, pins the flow there with `record` (`None` for a RST) and counts a new
    /// flow.
    Table {
        /// The table hash ([`crate::hash_fields::table_hash`]: the flow hash, or the
        /// hash of the VIP's hash fields).
        hash: u32,
        /// The pin to write, pointing at the table's backend.
        record: Option<Record>,
        /// A held SYN of the flow whose backend went away: of no use now, the caller
        /// frees its slot.
        stale_slot: Option<S>,
    },
}

/// What the conntrack `entry` of a packet's flow says, for a packet of the VIP with id
/// `vip_id` whose live table has epoch `epoch` (rules 1 and 2 of the module
/// documentation; `udp`: the flow is UDP, `udp_timeout_ns`: its idle timeout).
///
/// Reads the entry's backend only when the VIP matches, and the clock only for UDP.
#[inline(always)]
pub fn pin_state<L: PinLookups>(
    lookups: &mut L,
    entry: &CtEntry,
    vip_id: u32,
    epoch: u32,
    udp: bool,
    udp_timeout_ns: u64,
) -> PinState<L::Backend> {
    if entry.vip_id != vip_id {
        return PinState::Stale;
    }
    let Some(backend) = lookups.keeps_flows(entry.backend_id) else {
        return PinState::Stale;
    };
    if udp {
        let now = lookups.now_ns();
        match udp_idle(entry.stamp_ns, now, udp_timeout_ns) {
            UdpIdle::Fresh => PinState::Holds {
                backend,
                touch: Touch::Nothing,
            },
            UdpIdle::Refresh => PinState::Holds {
                backend,
                touch: Touch::Stamp(now),
            },
            UdpIdle::Expired => PinState::Expired,
        }
    } else if entry.epoch == epoch && entry.closing == CT_OPEN {
        PinState::Holds {
            backend,
            touch: Touch::Nothing,
        }
    } else {
        PinState::OlderTable(backend)
    }
}

/// Decides which state chooses the backend of a packet of flow `key` to VIP `vip`
/// (its `VIPS` entry), other than a TCP SYN; `rst`: the packet is a TCP RST, `entry`:
/// the flow's pin, if any, `cfg`: the hash seed and the UDP idle timeout.
///
/// Counts `ct_hits`, `ct_udp_expired`, `ct_stale_repicked` and `ct_misses_non_syn` in
/// `stats`; the caller counts `new_flows` once the table's pick succeeds
/// ([`Decision::Table`]). See the module documentation for the rules.
#[inline(always)]
pub fn decide<L: Lookups>(
    lookups: &mut L,
    key: &FlowKey,
    rst: bool,
    vip: &VipEntry,
    entry: Option<&CtEntry>,
    cfg: &LbConfig,
    stats: &mut VipStats,
) -> Decision<L::Backend, L::Slot> {
    let udp = key.vip.proto == PROTO_UDP;
    if let Some(entry) = entry {
        match pin_state(
            lookups,
            entry,
            vip.vip_id,
            vip.epoch,
            udp,
            cfg.udp_timeout_ns,
        ) {
            PinState::Holds { backend, touch } => {
                stats.ct_hits += 1;
                return Decision::Pin { backend, touch };
            }
            PinState::OlderTable(backend) => {
                stats.ct_hits += 1;
                return recheck(lookups, key, rst, vip, entry, cfg, backend);
            }
            PinState::Expired => stats.ct_udp_expired += 1,
            PinState::Stale => stats.ct_stale_repicked += 1,
        }
    }
    let replace = entry.is_some();
    let hash = lookups.flow_hash(key, cfg.hash_seed);
    let mut stale_slot = None;
    if !udp {
        if let Some(slot) = held_syn(lookups, key, hash, vip.vip_id) {
            let syn: &SynEntry = slot.borrow();
            let (backend_id, epoch, isn) = (u32::from(syn.backend_id), syn.epoch, syn.seq);
            if let Some(backend) = lookups.keeps_flows(backend_id) {
                stats.ct_hits += 1;
                let record = (!rst).then(|| Record {
                    replace,
                    vip_id: vip.vip_id,
                    stamp_ns: lookups.now_ns(),
                    epoch,
                    isn,
                });
                return Decision::HeldSyn {
                    backend,
                    slot,
                    record,
                };
            }
            stale_slot = Some(slot);
        } else if !replace {
            stats.ct_misses_non_syn += 1;
        }
    }
    let record = (!rst).then(|| Record {
        replace,
        vip_id: vip.vip_id,
        stamp_ns: lookups.now_ns(),
        epoch: if udp { 0 } else { vip.epoch },
        isn: 0,
    });
    Decision::Table {
        hash: lookups.table_hash_of(key, vip.flags, cfg.hash_seed, hash),
        record,
        stale_slot,
    }
}

/// Rule 2 for a TCP pin from an older table than the VIP's current one (its backend:
/// `backend`): a held SYN of a new connection decides and replaces the pin; otherwise
/// the pin decides, re-labelled when the current table agrees with it.
#[inline(always)]
fn recheck<L: Lookups>(
    lookups: &mut L,
    key: &FlowKey,
    rst: bool,
    vip: &VipEntry,
    entry: &CtEntry,
    cfg: &LbConfig,
    backend: L::Backend,
) -> Decision<L::Backend, L::Slot> {
    let hash = lookups.flow_hash(key, cfg.hash_seed);
    if let Some(slot) = held_syn(lookups, key, hash, vip.vip_id) {
        let syn: &SynEntry = slot.borrow();
        let (backend_id, epoch, isn) = (u32::from(syn.backend_id), syn.epoch, syn.seq);
        if syn.is_new_connection_over(entry)
            && let Some(newer) = lookups.keeps_flows(backend_id)
        {
            let record = (!rst).then(|| Record {
                replace: true,
                vip_id: vip.vip_id,
                stamp_ns: lookups.now_ns(),
                epoch,
                isn,
            });
            return Decision::HeldSyn {
                backend: newer,
                slot,
                record,
            };
        }
    }
    let table = lookups.table_hash_of(key, vip.flags, cfg.hash_seed, hash);
    let touch = if lookups.table_slot(table) == Some(entry.backend_id) {
        Touch::Relabel(vip.epoch)
    } else {
        Touch::Nothing
    };
    Decision::Pin { backend, touch }
}

/// The flow's SYN cache slot if it holds a whole SYN of flow `key` (flow hash `hash`)
/// and VIP `vip_id`: a slot of another flow or VIP, a used one, or one that two writers
/// tore is no SYN of this flow ([`SynEntry::holds`]).
#[inline(always)]
fn held_syn<L: Lookups>(lookups: &mut L, key: &FlowKey, hash: u32, vip_id: u32) -> Option<L::Slot> {
    let slot = lookups.syn_slot(hash)?;
    let syn: &SynEntry = slot.borrow();
    let held = u32::from(syn.vip_id) == vip_id && syn.holds(key, hash);
    held.then_some(slot)
}
