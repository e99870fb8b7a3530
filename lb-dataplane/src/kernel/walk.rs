//! Counting live connections per backend: a walk of both conntrack maps and the SYN
//! cache ([`ConntrackWalker::walk`]), read with `BPF_MAP_LOOKUP_BATCH` (Linux 5.6+:
//! thousands of entries per system call, where aya's map iterators make two calls per
//! entry).
//!
//! What an entry counts as ([`classify`]), per backend id:
//! - `established`: a conntrack entry whose connection is open: TCP without a FIN or
//!   RST seen from the client (`CtEntry::closing`), UDP not idle past the UDP timeout;
//!   of those, `idle` counts the ones without a packet for longer than
//!   [`WalkSettings::idle`] (`CtEntry::seen_ticks`, about 1 s resolution);
//! - `closing`: TCP entries whose client sent a FIN or RST (the entry stays until the
//!   LRU evicts it, so this is a recent-history count, not a connection count);
//! - `syn_only`: a SYN cache slot holding a SYN younger than [`WalkSettings::syn_window`]
//!   whose handshake has not completed.
//!
//! With the affinity maps ([`ConntrackWalker::with_affinity`]), the walk also counts
//! each VIP's live affinity pins (`AFFINITY`): clients whose last new connection is no
//! older than the VIP's timeout (`AFFINITY_TIMEOUT`), the pins that would decide.
//!
//! A draining backend's drain progresses as its `established` count falls. The walker
//! owns duplicates of the maps' file descriptors, so it runs on a thread of its own
//! without holding the data plane.

use std::{
    collections::HashMap,
    os::fd::{AsFd as _, OwnedFd},
    time::{Duration, Instant},
};

use lb_common::{
    maps::{self, MAX_BACKENDS, MAX_VIPS},
    types::{
        AffinityEntry, AffinityKey, CT_OPEN, CT_TICK_SHIFT, CtEntry, FlowKey, FlowKey4, PROTO_UDP,
        SynEntry,
    },
};

use crate::{DataplaneError, bpf_sys};

/// Entries asked for per system call. A hash map's batch returns whole buckets, so a
/// call fails with `ENOSPC` only if one bucket held more entries than this.
const BATCH: u32 = 8_192;

/// What the walk counts as idle, expired or recent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalkSettings {
    /// UDP entries idle longer than this are expired (the data plane's UDP timeout).
    pub udp_timeout: Duration,
    /// Established entries without a packet for longer than this count as idle.
    pub idle: Duration,
    /// SYN cache slots older than this are no longer counted as SYN-only connections.
    pub syn_window: Duration,
}

impl WalkSettings {
    /// The SYN-only window: 60 s, as IPVS's `SYN_RECV` timeout.
    pub const SYN_WINDOW: Duration = Duration::from_secs(60);
}

/// Connections of one backend by state (see the module documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConnectionCounts {
    /// Open connections (TCP without FIN/RST from the client; UDP not expired).
    pub established: u64,
    /// Of those, without a packet for longer than the idle threshold.
    pub idle: u64,
    /// TCP entries whose client sent a FIN or RST.
    pub closing: u64,
    /// SYNs whose handshake has not completed (within the SYN-only window).
    pub syn_only: u64,
}

/// One walk's result.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// Counts per backend id (ids without entries are absent).
    pub backends: HashMap<u32, ConnectionCounts>,
    /// Entries in `CONNTRACK_V4`.
    pub v4_entries: u64,
    /// Entries in `CONNTRACK_V6`.
    pub v6_entries: u64,
    /// Entries in `EXCEPTIONS` (the fast path's exceptions), when the walker reads it.
    pub exceptions_entries: u64,
    /// `SYN_CACHE` slots holding a SYN whose handshake has not completed (any age).
    pub syn_slots_used: u64,
    /// Live affinity pins per VIP id (VIPs without any are absent; empty when the
    /// walker has no affinity maps).
    pub affinity: HashMap<u32, u64>,
    /// How long the walk took.
    pub took: Duration,
}

/// What one conntrack entry counts as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// Open; `idle`: no packet for longer than the idle threshold.
    Established {
        /// Idle longer than the threshold.
        idle: bool,
    },
    /// The client sent a FIN or RST.
    Closing,
    /// A UDP entry idle past the UDP timeout.
    Expired,
}

/// Classifies conntrack entry `entry` of a flow of protocol `proto` at `now_ns` (the
/// conntrack clock, CLOCK_MONOTONIC_COARSE).
pub(crate) fn classify(entry: &CtEntry, proto: u8, now_ns: u64, settings: &WalkSettings) -> Class {
    if entry.closing != CT_OPEN {
        return Class::Closing;
    }
    let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    if proto == PROTO_UDP && now_ns.saturating_sub(entry.stamp_ns) > nanos(settings.udp_timeout) {
        return Class::Expired;
    }
    let now_ticks = lb_common::types::ct_ticks(now_ns);
    let idle_ns = u64::from(now_ticks.wrapping_sub(entry.seen_ticks)) << CT_TICK_SHIFT;
    Class::Established {
        idle: idle_ns > nanos(settings.idle),
    }
}

/// The time on the conntrack clock (`bpf_ktime_get_coarse_ns`: CLOCK_MONOTONIC_COARSE).
pub fn conntrack_now_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer; with a clock
    // every Linux kernel has, it cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &raw mut now) };
    u64::try_from(now.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(now.tv_nsec).unwrap_or(0)
}

/// Reads every entry of map `fd` (keys of `K`, values of `V`) with batch lookups,
/// calling `each` per entry.
pub(super) fn for_each<K: Copy + Default, V: Copy + Default>(
    fd: &OwnedFd,
    name: &'static str,
    mut each: impl FnMut(&K, &V),
) -> Result<(), DataplaneError> {
    let mut keys = vec![K::default(); BATCH as usize];
    let mut values = vec![V::default(); BATCH as usize];
    // The batch token: a bucket index for hash maps, an element index for arrays.
    let (mut token_in, mut token_out) = (0u64, 0u64);
    let mut first = true;
    loop {
        // SAFETY: the buffers hold BATCH keys of K and values of V, the map's sizes
        // (checked by the caller against the map's definition).
        let (n, done) = unsafe {
            bpf_sys::lookup_batch(
                fd.as_fd(),
                (!first).then_some(&token_in),
                &mut token_out,
                keys.as_mut_ptr().cast(),
                values.as_mut_ptr().cast(),
                BATCH,
            )
        }
        .map_err(|error| DataplaneError::Syscall {
            op: format!("BPF_MAP_LOOKUP_BATCH on map {name}"),
            error,
        })?;
        for (k, v) in keys[..n].iter().zip(&values[..n]) {
            each(k, v);
        }
        if done {
            return Ok(());
        }
        token_in = token_out;
        first = false;
    }
}

/// Walks the conntrack maps and the SYN cache of one data plane.
pub struct ConntrackWalker {
    v4: OwnedFd,
    v6: OwnedFd,
    syn: OwnedFd,
    /// `AFFINITY` and `AFFINITY_TIMEOUT`, when the walk counts affinity pins.
    affinity: Option<(OwnedFd, OwnedFd)>,
    /// `EXCEPTIONS`, when the walk counts the fast path's exceptions.
    exceptions: Option<OwnedFd>,
}

impl ConntrackWalker {
    /// A walker over duplicates of the maps' file descriptors.
    pub(super) fn new(v4: OwnedFd, v6: OwnedFd, syn: OwnedFd) -> Self {
        Self {
            v4,
            v6,
            syn,
            affinity: None,
            exceptions: None,
        }
    }

    /// This walker, counting the fast path's exceptions (`EXCEPTIONS`) too: as
    /// connections of their backends, and the map's entries.
    pub(super) fn with_exceptions(mut self, exceptions: OwnedFd) -> Self {
        self.exceptions = Some(exceptions);
        self
    }

    /// This walker, counting the live affinity pins of `pins` (`AFFINITY`) by the
    /// timeouts of `timeouts` (`AFFINITY_TIMEOUT`) too.
    pub(super) fn with_affinity(mut self, pins: OwnedFd, timeouts: OwnedFd) -> Self {
        self.affinity = Some((pins, timeouts));
        self
    }

    /// Live affinity pins per VIP id at `now` (see the module documentation).
    fn affinity_pins(&self, now: u64) -> Result<HashMap<u32, u64>, DataplaneError> {
        let Some((pins, timeouts)) = &self.affinity else {
            return Ok(HashMap::new());
        };
        let mut timeout = vec![0u64; MAX_VIPS as usize];
        for_each::<u32, u64>(timeouts, maps::AFFINITY_TIMEOUT, |id, ns| {
            if let Some(t) = timeout.get_mut(*id as usize) {
                *t = *ns;
            }
        })?;
        let mut live = vec![0u64; MAX_VIPS as usize];
        for_each::<AffinityKey, AffinityEntry>(pins, maps::AFFINITY, |k, e| {
            let i = k.vip_id as usize;
            if let (Some(&t), Some(n)) = (timeout.get(i), live.get_mut(i))
                && t != 0
                && now.saturating_sub(e.stamp_ns) <= t
            {
                *n += 1;
            }
        })?;
        Ok(live
            .into_iter()
            .enumerate()
            .filter(|(_, n)| *n != 0)
            .filter_map(|(id, n)| Some((u32::try_from(id).ok()?, n)))
            .collect())
    }

    /// `CONNTRACK_V4`'s descriptor.
    pub(super) fn v4(&self) -> &OwnedFd {
        &self.v4
    }

    /// `CONNTRACK_V6`'s descriptor.
    pub(super) fn v6(&self) -> &OwnedFd {
        &self.v6
    }

    /// `SYN_CACHE`'s descriptor.
    pub(super) fn syn(&self) -> &OwnedFd {
        &self.syn
    }

    /// Counts every entry (see the module documentation).
    ///
    /// # Errors
    /// When a batch lookup fails.
    pub fn walk(&self, settings: &WalkSettings) -> Result<Census, DataplaneError> {
        let started = Instant::now();
        let now = conntrack_now_ns();
        let mut census = Census::default();
        // Indexed by backend id (below MAX_BACKENDS): no hashing per entry.
        let mut by_id = vec![ConnectionCounts::default(); MAX_BACKENDS as usize];
        let mut count = |e: &CtEntry, proto| {
            let Some(c) = by_id.get_mut(e.backend_id as usize) else {
                return;
            };
            match classify(e, proto, now, settings) {
                Class::Established { idle } => {
                    c.established += 1;
                    c.idle += u64::from(idle);
                }
                Class::Closing => c.closing += 1,
                Class::Expired => {}
            }
        };
        let (mut v4, mut v6) = (0, 0);
        for_each::<FlowKey4, CtEntry>(&self.v4, maps::CONNTRACK_V4, |k, e| {
            v4 += 1;
            count(e, k.proto);
        })?;
        for_each::<FlowKey, CtEntry>(&self.v6, maps::CONNTRACK_V6, |k, e| {
            v6 += 1;
            count(e, k.vip.proto);
        })?;
        let mut exceptions = 0;
        if let Some(fd) = &self.exceptions {
            for_each::<FlowKey, CtEntry>(fd, maps::EXCEPTIONS, |k, e| {
                exceptions += 1;
                count(e, k.vip.proto);
            })?;
        }
        let window = u64::try_from(settings.syn_window.as_nanos()).unwrap_or(u64::MAX);
        let mut used = 0;
        for_each::<u32, SynEntry>(&self.syn, maps::SYN_CACHE, |_, s| {
            if s.key.vip.family != 0 && u32::from(s.vip_id) < MAX_VIPS {
                used += 1;
                if now.saturating_sub(s.syn_ns) <= window
                    && let Some(c) = by_id.get_mut(usize::from(s.backend_id))
                {
                    c.syn_only += 1;
                }
            }
        })?;
        census.backends = by_id
            .into_iter()
            .enumerate()
            .filter(|(_, c)| *c != ConnectionCounts::default())
            .filter_map(|(id, c)| Some((u32::try_from(id).ok()?, c)))
            .collect();
        census.v4_entries = v4;
        census.v6_entries = v6;
        census.exceptions_entries = exceptions;
        census.syn_slots_used = used;
        census.affinity = self.affinity_pins(now)?;
        census.took = started.elapsed();
        Ok(census)
    }
}

#[cfg(test)]
mod tests {
    use lb_common::types::{CT_FIN, CT_RST, PROTO_TCP, ct_ticks};

    use super::*;

    const S: WalkSettings = WalkSettings {
        udp_timeout: Duration::from_secs(30),
        idle: Duration::from_secs(60),
        syn_window: WalkSettings::SYN_WINDOW,
    };
    const NOW: u64 = 1_000 * 1_000_000_000;

    fn seen(secs_ago: u64) -> CtEntry {
        let at = NOW - secs_ago * 1_000_000_000;
        CtEntry {
            stamp_ns: at,
            seen_ticks: ct_ticks(at),
            ..CtEntry::default()
        }
    }

    #[test]
    fn entries_are_established_idle_closing_or_expired() {
        let c = |e: &CtEntry, proto| classify(e, proto, NOW, &S);
        assert_eq!(c(&seen(1), PROTO_TCP), Class::Established { idle: false });
        assert_eq!(c(&seen(120), PROTO_TCP), Class::Established { idle: true });
        for closing in [CT_FIN, CT_RST] {
            let e = CtEntry { closing, ..seen(1) };
            assert_eq!(c(&e, PROTO_TCP), Class::Closing);
        }
        assert_eq!(c(&seen(10), PROTO_UDP), Class::Established { idle: false });
        assert_eq!(c(&seen(31), PROTO_UDP), Class::Expired);
        // The tick is about 1.07 s: 59 s is not yet idle past 60 s, 62 s is.
        assert_eq!(c(&seen(59), PROTO_TCP), Class::Established { idle: false });
        assert_eq!(c(&seen(62), PROTO_TCP), Class::Established { idle: true });
    }
}
