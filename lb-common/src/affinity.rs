// SPDX-License-Identifier: MIT OR Apache-2.0
//! Client affinity with an idle timeout (lb.toml's `vip.persistence_timeout_secs`; IPVS
//! persistence, `ipvsadm -p`; Kubernetes `sessionAffinity: ClientIP`): which backend a
//! new connection of a client goes to when its VIP keeps clients on their backends.
//!
//! A VIP with affinity hashes a source-keyed field set
//! ([`Fields::Src`](crate::hash_fields::Fields::Src) or
//! [`Fields::SrcDport`](crate::hash_fields::Fields::SrcDport), [`crate::hash_fields`]).
//! A client is the VIP, the source address cut to the VIP's prefix and, for
//! `src+dport`, the destination port: its [`AffinityKey`] ([`key`]). Its *affinity pin*
//! in `AFFINITY` ([`AffinityEntry`]) names the backend its last new connection went to,
//! and when.
//!
//! A flow that no conntrack pin or held SYN decides (a new connection: a TCP SYN, a new
//! UDP flow, a TCP flow whose pin was lost) reads the client's affinity pin ([`decide`]):
//! 1. A pin idle no longer than the VIP's timeout whose backend still takes new flows
//!    (active: not draining, down or removed) decides ([`Affinity::Pinned`]); its time
//!    is rewritten at most once a second ([`crate::conntrack::udp_idle`], the one idle
//!    rule of pins), so a busy client never expires.
//! 2. Otherwise the table decides, and the caller (re)writes the pin to the table's
//!    choice, stamped now ([`Affinity::Table`]). A drained backend thus keeps its
//!    clients' existing connections (conntrack) but gets no new one from them.
//!
//! A client is idle when it opened no new connection and none of its connections to the
//! pinned backend carried a packet for the timeout (IPVS keeps its template while it
//! controls connections). The XDP program refreshes the pin only for new connections;
//! the daemon's conntrack walk (every `metrics.connections_interval_ms`, *W*) raises a
//! pin's stamp to the newest activity of the client's open connections (conntrack pins
//! of the VIP without a FIN or RST from the client, whose affinity key is the client's
//! and whose backend is the pin's: [`connection_activity`], [`refreshed`]). Existing
//! connections never read the affinity pin.
//!
//! The guarantee, while the daemon runs: a client keeps its pin as long as one such
//! connection carries a packet at least every *T* − *W* − [`ACTIVITY_LAG_SECS`] seconds
//! (*T* the VIP's timeout). The lag covers the activity tick (`CtEntry::seen_ticks`,
//! 2^30 ns, copied from the daemon's `ACTIVITY_TICK`, written every second: a packet's
//! recorded time is at most about 2.1 s older than the packet) and a walk of under
//! 0.9 s (a full 1M-entry map takes about 0.4 s). lb.toml requires *T* ≥
//! [`min_timeout_secs`]`(W)` = 2*W* + 3 s, so that gap is at least *W*. While no daemon
//! runs, nothing refreshes pins from connections: a pin then lasts *T* from the
//! client's last new connection, as before.
//!
//! The XDP program takes this decision for every new connection of an affinity VIP, and
//! `lb flow` takes it in userspace: both call [`decide`] with the same [`key`]. The ICMP
//! error path calls it too, read-only, for an error about a flow without a conntrack pin.

use crate::{
    conntrack::{UdpIdle, udp_idle},
    hash_fields::selected_key,
    types::{
        AffinityEntry, AffinityKey, CT_OPEN, CT_TICK_SHIFT, CtEntry, FlowKey, VIP_AFFINITY,
        ct_ticks,
    },
};

/// The largest affinity timeout (s) lb.toml accepts: 31 days (Kubernetes caps
/// `timeoutSeconds` at 86,400; IPVS takes any 32-bit value).
pub const MAX_TIMEOUT_SECS: u32 = 31 * 86_400;

/// How much older than a connection's last packet its recorded time can be, plus the
/// walk's own duration (s): see the module documentation.
pub const ACTIVITY_LAG_SECS: u32 = 3;

/// The smallest affinity timeout (s) lb.toml accepts when the conntrack walk runs every
/// `walk_ms` milliseconds: twice the walk period (rounded up to seconds) plus
/// [`ACTIVITY_LAG_SECS`], so a connection with a packet at least once a walk period
/// keeps its client's pin.
#[must_use]
pub const fn min_timeout_secs(walk_ms: u32) -> u32 {
    walk_ms.div_ceil(500) + ACTIVITY_LAG_SECS
}

/// The affinity key of flow `key` to the VIP with id `vip_id` and `VipEntry::flags`
/// `flags`: the VIP id, the family, the source address cut to the VIP's prefix and,
/// for `src+dport`, the destination port (the fields [`selected_key`] keeps).
#[inline(always)]
#[must_use]
pub fn key(key: &FlowKey, vip_id: u32, flags: u32) -> AffinityKey {
    let w = selected_key(key, flags).words();
    AffinityKey::from_words([vip_id, w[4], w[5], w[6], w[7], w[8]])
}

/// Whether a VIP whose `VipEntry::flags` are `flags` keeps clients on their backends.
#[inline(always)]
#[must_use]
pub const fn enabled(flags: u32) -> bool {
    flags & VIP_AFFINITY != 0
}

/// What [`decide`] reads: whether a backend takes new flows.
pub trait AffinityLookups {
    /// A backend that takes new flows, in the form the caller uses afterwards (the XDP
    /// program: its id and `BACKENDS` entry; `lb flow`: its id).
    type Backend;

    /// Backend `id` if it takes new flows (active).
    fn takes_new_flows(&mut self, id: u32) -> Option<Self::Backend>;
}

/// Which state chooses a new connection's backend on a VIP with affinity ([`decide`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Affinity<B> {
    /// The client's affinity pin decides.
    Pinned {
        /// The pinned backend.
        backend: B,
        /// `Some(now)`: rewrite the pin's `stamp_ns` to now (it was idle over a second
        /// or half the timeout).
        refresh: Option<u64>,
    },
    /// The table decides; the caller writes the client's pin to the table's choice,
    /// stamped `now_ns`.
    Table {
        /// The pin's new `stamp_ns`.
        now_ns: u64,
    },
}

/// Decides whether the client's affinity pin `entry` (if any) chooses a new
/// connection's backend at `now_ns` (`bpf_ktime_get_coarse_ns`), for a VIP whose
/// affinity timeout is `timeout_ns`. See the module documentation.
#[inline(always)]
pub fn decide<L: AffinityLookups>(
    lookups: &mut L,
    entry: Option<&AffinityEntry>,
    now_ns: u64,
    timeout_ns: u64,
) -> Affinity<L::Backend> {
    if let Some(entry) = entry {
        let idle = udp_idle(entry.stamp_ns, now_ns, timeout_ns);
        if idle != UdpIdle::Expired
            && let Some(backend) = lookups.takes_new_flows(entry.backend_id)
        {
            let refresh = (idle == UdpIdle::Refresh).then_some(now_ns);
            return Affinity::Pinned { backend, refresh };
        }
    }
    Affinity::Table { now_ns }
}

/// The pin to write after [`Affinity::Table`]: backend `backend_id`, stamped `now_ns`.
#[inline(always)]
#[must_use]
pub fn pin(backend_id: u32, now_ns: u64) -> AffinityEntry {
    AffinityEntry {
        backend_id,
        _pad: 0,
        stamp_ns: now_ns,
    }
}

/// The start of the activity tick `seen_ticks` (`CtEntry::seen_ticks`) on the conntrack
/// clock (ns), read at `now_ns`: no later than the connection's last packet.
#[inline(always)]
#[must_use]
pub fn seen_ns(seen_ticks: u32, now_ns: u64) -> u64 {
    let ago = u64::from(ct_ticks(now_ns).wrapping_sub(seen_ticks)) << CT_TICK_SHIFT;
    now_ns.saturating_sub(ago) & !((1u64 << CT_TICK_SHIFT) - 1)
}

/// What the conntrack pin `entry` of flow `flow` says about its client's affinity at
/// `now_ns`, on a VIP whose `VipEntry::flags` are `flags`: the client's key, the
/// backend and the time of its last packet ([`seen_ns`]); `None` when the VIP has no
/// affinity or the client began to close the connection (FIN or RST).
#[must_use]
pub fn connection_activity(
    flow: &FlowKey,
    entry: &CtEntry,
    flags: u32,
    now_ns: u64,
) -> Option<(AffinityKey, u32, u64)> {
    if !enabled(flags) || entry.closing != CT_OPEN {
        return None;
    }
    let at = seen_ns(entry.seen_ticks, now_ns);
    Some((key(flow, entry.vip_id, flags), entry.backend_id, at))
}

/// The client's pin `entry` once one of its connections to backend `backend_id` was
/// seen active at `active_ns` ([`connection_activity`]): its stamp raised to that time
/// when it names that backend and is older; `None` when nothing changes (another
/// backend: the client moved, and that connection is conntrack's alone).
#[must_use]
pub fn refreshed(entry: &AffinityEntry, backend_id: u32, active_ns: u64) -> Option<AffinityEntry> {
    (entry.backend_id == backend_id && active_ns > entry.stamp_ns).then_some(AffinityEntry {
        stamp_ns: active_ns,
        ..*entry
    })
}

#[cfg(test)]
mod tests;
