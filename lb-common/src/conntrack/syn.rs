// SPDX-License-Identifier: MIT OR Apache-2.0
//! Which state a TCP SYN (SYN set, ACK and RST clear) follows: the SYN of a connection
//! the load balancer has already seen goes where that connection went; any other SYN
//! opens a connection and takes the VIP's current table.
//!
//! Two kinds of SYN belong to a connection already seen, and both carry its initial
//! sequence number (ISN), which a new connection on the same 4-tuple does not (RFC 9293,
//! section 3.4.1: a new incarnation picks a new ISN):
//! 1. a duplicate SYN of an established connection (a late copy from the network, or a
//!    client that lost the SYN-ACK and the ACK crossed it): the flow's pin, if it was
//!    made from a SYN with that ISN ([`CtEntry::isn`]), decides;
//! 2. a retransmitted SYN of a handshake not yet complete (its SYN-ACK was lost): the
//!    SYN held in the flow's SYN cache slot, if it has that sequence number, decides.
//!
//! Either way the SYN writes nothing, so a table change between the first SYN and its
//! retransmission moves no connection, and a SYN flood still only overwrites held
//! SYNs.
//!
//! The pin is worth reading only within [`DUPLICATE_SYN_WINDOW_NS`] after the VIP's
//! table changed (the XDP program passes none otherwise): a duplicate arrives at most
//! that long after its connection's first SYN, so without a change in between, the
//! connection was picked from the table the SYN would take anyway, and its backend (if
//! it was drained since, that was a table change too) is the table's. A pin made without seeing the SYN (ISN 0: a mid-flow packet after a restart or
//! an eviction) cannot recognise a duplicate; such a SYN takes the table, as a new
//! connection would. A backend that no longer keeps flows (down or removed) is
//! followed by no SYN.

use core::borrow::Borrow;

use super::{Lookups, held_syn};
use crate::types::{CtEntry, FlowKey, LbConfig, SynEntry, VipEntry};

/// How long (ns) after a VIP's table changed a SYN may still be a duplicate of a
/// connection picked from an older table: 180 s, above both the maximum segment
/// lifetime that bounds a network duplicate (2 min, RFC 9293 section 3.4.2) and the
/// span of a client's SYN retransmissions (Linux's default `tcp_syn_retries` of 6:
/// 127 s).
pub const DUPLICATE_SYN_WINDOW_NS: u64 = 180_000_000_000;

/// Which state a TCP SYN follows ([`decide_syn`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SynDecision<B> {
    /// A duplicate SYN of the flow's pinned connection: its backend.
    Pin(B),
    /// A retransmission of the SYN held in the flow's SYN cache slot: its backend.
    HeldSyn(B),
    /// A new connection: the caller picks slot `table % M` of the VIP's live table and
    /// holds the SYN in the SYN cache slot of `hash`.
    Table {
        /// The flow hash ([`crate::hash::flow_hash`]): the SYN cache slot.
        hash: u32,
        /// The table hash ([`crate::hash_fields::table_hash`]): the table slot.
        table: u32,
    },
}

/// Decides which state chooses the backend of TCP SYN `key` with sequence number `seq`
/// (wire bytes as a native `u32`, as [`CtEntry::isn`] and [`SynEntry::seq`] store it)
/// to VIP `vip`; `entry`: the flow's pin, if any. See the module documentation.
///
/// Reads the SYN cache only when the pin does not decide, and the backend only of the
/// state that matches.
#[inline(always)]
pub fn decide_syn<L: Lookups>(
    lookups: &mut L,
    key: &FlowKey,
    seq: u32,
    vip: &VipEntry,
    entry: Option<&CtEntry>,
    cfg: &LbConfig,
) -> SynDecision<L::Backend> {
    if let Some(entry) = entry
        && entry.vip_id == vip.vip_id
        && entry.isn != 0
        && entry.isn == seq
        && let Some(backend) = lookups.keeps_flows(entry.backend_id)
    {
        return SynDecision::Pin(backend);
    }
    let hash = lookups.flow_hash(key, cfg.hash_seed);
    if let Some(slot) = held_syn(lookups, key, hash, vip.vip_id) {
        let syn: &SynEntry = slot.borrow();
        let (held_seq, backend_id) = (syn.seq, u32::from(syn.backend_id));
        if held_seq == seq
            && let Some(backend) = lookups.keeps_flows(backend_id)
        {
            return SynDecision::HeldSyn(backend);
        }
    }
    SynDecision::Table {
        hash,
        table: lookups.table_hash_of(key, vip.flags, cfg.hash_seed, hash),
    }
}
