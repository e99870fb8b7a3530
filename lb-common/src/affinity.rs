// SPDX-License-Identifier: MIT OR Apache-2.0
//! Client affinity with an idle timeout (lb.toml's `vip.persistence_timeout_secs`; IPVS
//! persistence, `ipvsadm -p`; Kubernetes `sessionAffinity: ClientIP`): which backend a
//! new connection of a client goes to when its VIP keeps clients on their backends.
//!
//! A VIP with affinity hashes a source-keyed field set ([`Fields::Src`] or
//! [`Fields::SrcDport`], [`crate::hash_fields`]). A client is the VIP, the source
//! address cut to the VIP's prefix and, for `src+dport`, the destination port: its
//! [`AffinityKey`] ([`key`]). Its *affinity pin* in `AFFINITY` ([`AffinityEntry`]) names
//! the backend its last new connection went to, and when.
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
//! A client is idle when it opened no new connection for the timeout: a connection
//! that lasts longer keeps its backend (its conntrack pin) but does not refresh the
//! affinity pin (IPVS refreshes its template while it controls connections). Existing
//! connections never read the affinity pin.
//!
//! The XDP program takes this decision for every new connection of an affinity VIP, and
//! `lb flow` takes it in userspace: both call [`decide`] with the same [`key`].

use crate::{
    conntrack::{UdpIdle, udp_idle},
    hash_fields::selected_key,
    types::{AffinityEntry, AffinityKey, FlowKey, VIP_AFFINITY},
};

/// The largest affinity timeout (s) lb.toml accepts: 31 days (Kubernetes caps
/// `timeoutSeconds` at 86,400; IPVS takes any 32-bit value).
pub const MAX_TIMEOUT_SECS: u32 = 31 * 86_400;

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

#[cfg(test)]
mod tests;
