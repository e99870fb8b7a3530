// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Who may reach a VIP: the allowed client prefixes of VIPs that have a list
//! (`SOURCE_FILTER`, `SOURCE_RANGES`, `SOURCE_RESTRICTED`).
//!
//! The check runs for every packet of such a VIP before any conntrack lookup, so a
//! refused client never creates or uses state, and a list narrowed while flows run
//! stops the established flows of the removed prefixes at their next packet (their
//! conntrack entries stay unused until the LRU evicts them). Without any list in the
//! configuration (`CONFIG_SOURCE_RANGES` clear) nothing here runs; with lists, a
//! packet whose `SOURCE_FILTER` bit is clear costs one array read.

use aya_ebpf::maps::lpm_trie::Key;
use lb_common::{
    hash::vip_filter_bit,
    types::{FlowKey, SOURCE_KEY_BITS, SourceData},
};

use crate::{
    maps::{SCRATCH, SOURCE_FILTER, SOURCE_RANGES, SOURCE_RESTRICTED},
    vip,
};

/// What the check says of a packet.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// Its VIP has no list, or the client is in it (or it may be no VIP at all: the
    /// packet goes on).
    Allowed,
    /// Not for a VIP (found out on the way).
    NotVip,
    /// Its VIP has a list without the client.
    Refused,
}

/// Checks the client of flow `key` against its VIP's list; the trie lookup is a BPF
/// function of its own (the fast path's stack stays small).
#[inline(always)]
pub(crate) fn check(key: &FlowKey) -> Source {
    if listed(key) {
        lookup(key)
    } else {
        Source::Allowed
    }
}

/// As [`check`], all in line: for callers whose stack is deep already (a BPF call chain
/// has 512 bytes in all).
#[inline(always)]
pub(crate) fn check_in_line(key: &FlowKey) -> Source {
    if listed(key) {
        lookup_in_line(key)
    } else {
        Source::Allowed
    }
}

/// Whether `key`'s `SOURCE_FILTER` bit is set.
#[inline(always)]
fn listed(key: &FlowKey) -> bool {
    let bit = vip_filter_bit(&key.vip);
    SOURCE_FILTER
        .get(bit / 64)
        .is_some_and(|word| word & (1u64 << (bit % 64)) != 0)
}

/// The trie lookup below the load balancer's frame: its key is built in the per-CPU
/// `SCRATCH`, not on the stack (the verifier allows 512 bytes for the chain of calls).
#[inline(never)]
fn lookup(key: &FlowKey) -> Source {
    let Some(scratch) = SCRATCH.get_ptr_mut(0) else {
        return Source::Allowed;
    };
    // SAFETY: per-CPU array element, used only by this CPU during this packet.
    let scratch = unsafe { &mut *scratch };
    scratch.source_key = Key::new(SOURCE_KEY_BITS, SourceData::new(&key.vip, key.src));
    if SOURCE_RANGES.get(&scratch.source_key).is_some() {
        return Source::Allowed;
    }
    refused_or_not(key)
}

/// The trie lookup; after a miss, whether the packet's VIP is one with a list (another
/// VIP may share its `SOURCE_FILTER` bit) or any VIP.
#[inline(always)]
fn lookup_in_line(key: &FlowKey) -> Source {
    let trie_key = Key::new(SOURCE_KEY_BITS, SourceData::new(&key.vip, key.src));
    if SOURCE_RANGES.get(&trie_key).is_some() {
        return Source::Allowed;
    }
    refused_or_not(key)
}

/// After a trie miss: whether the packet's VIP is one with a list (another VIP may
/// share its `SOURCE_FILTER` bit), or any VIP.
#[inline(always)]
fn refused_or_not(key: &FlowKey) -> Source {
    match vip::find_vip(&key.vip) {
        None => Source::NotVip,
        Some(v) if SOURCE_RESTRICTED.get(v.vip_id).is_some_and(|r| *r != 0) => Source::Refused,
        Some(_) => Source::Allowed,
    }
}
