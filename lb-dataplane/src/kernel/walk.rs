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
//!   whose handshake has not completed, or a fast-path pin made at a SYN that young
//!   that no later packet has seen (`Class::Handshake`).
//!
//! With the affinity maps ([`ConntrackWalker::with_affinity`]), the walk also keeps
//! busy clients' affinity pins alive and counts them. It reads each VIP's timeout
//! (`AFFINITY_TIMEOUT`) and flags (`VIPS`) once per walk ([`AffinityVips`]); every open
//! conntrack entry of a VIP with affinity notes its client's newest packet per backend
//! (`lb_common::affinity::connection_activity`); each pin (`AFFINITY`) whose client had
//! a packet on its backend after the pin's stamp gets that time as its stamp
//! (`lb_common::affinity::refreshed`, one map update per pin refreshed), and the pins
//! no older than their VIP's timeout, refreshed or not, are counted live: the pins that
//! would decide. The guarantee this gives is in `lb_common::affinity`.
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
    affinity,
    fastpath::UNSEEN_TICKS,
    maps::{self, MAX_BACKENDS, MAX_VIPS},
    types::{
        AffinityEntry, AffinityKey, CT_OPEN, CT_TICK_SHIFT, CtEntry, FlowKey, FlowKey4, PROTO_UDP,
        SynEntry, VipEntry, VipKey,
    },
};

use super::cleaning::pod_bytes;
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
    /// A TCP pin made at the connection's SYN (an exception of the fast path, rule S4)
    /// that no later packet has seen: the handshake has not completed. `live`: younger
    /// than [`WalkSettings::syn_window`], as a held SYN counts.
    Handshake {
        /// Younger than the SYN window.
        live: bool,
    },
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
    if proto != PROTO_UDP && entry.isn != 0 && entry.seen_ticks == UNSEEN_TICKS {
        return Class::Handshake {
            live: now_ns.saturating_sub(entry.stamp_ns) <= nanos(settings.syn_window),
        };
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

/// The VIPs' affinity settings, read once per walk (indexed by VIP id).
struct AffinityVips {
    /// `AFFINITY_TIMEOUT`: the timeout (ns; 0: none).
    timeout_ns: Vec<u64>,
    /// `VipEntry::flags` of the VIP with the id (0: none).
    flags: Vec<u32>,
}

impl AffinityVips {
    /// The flags of VIP `id` when it has affinity (its flag and a timeout).
    fn flags(&self, id: u32) -> Option<u32> {
        let i = id as usize;
        let flags = *self.flags.get(i)?;
        (affinity::enabled(flags) && self.timeout_ns.get(i).is_some_and(|&t| t != 0))
            .then_some(flags)
    }
}

/// The newest packet of each client's open connections per backend, noted during one
/// walk of conntrack (`lb_common::affinity::connection_activity`).
#[derive(Default)]
struct Activity(HashMap<(AffinityKey, u32), u64>);

impl Activity {
    /// Notes conntrack entry `e` of the flow `flow` gives, at `now`; the flow is only
    /// built for a VIP with affinity.
    fn note(&mut self, vips: &AffinityVips, flow: impl FnOnce() -> FlowKey, e: &CtEntry, now: u64) {
        let Some(flags) = vips.flags(e.vip_id) else {
            return;
        };
        if let Some((key, backend, at)) = affinity::connection_activity(&flow(), e, flags, now) {
            let newest = self.0.entry((key, backend)).or_insert(at);
            *newest = (*newest).max(at);
        }
    }

    /// Pin `e` of client `key` with its stamp raised to the newest activity noted for
    /// its client and backend, when that is newer.
    fn refreshed(&self, key: &AffinityKey, e: &AffinityEntry) -> Option<AffinityEntry> {
        let at = *self.0.get(&(*key, e.backend_id))?;
        affinity::refreshed(e, e.backend_id, at)
    }
}

/// Walks the conntrack maps and the SYN cache of one data plane.
pub struct ConntrackWalker {
    v4: OwnedFd,
    v6: OwnedFd,
    syn: OwnedFd,
    /// `AFFINITY`, `AFFINITY_TIMEOUT` and `VIPS`, when the walk refreshes and counts
    /// affinity pins.
    affinity: Option<(OwnedFd, OwnedFd, OwnedFd)>,
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

    /// This walker, refreshing and counting the affinity pins of `pins` (`AFFINITY`)
    /// too, by the timeouts of `timeouts` (`AFFINITY_TIMEOUT`) and the flags of `vips`
    /// (`VIPS`).
    pub(super) fn with_affinity(mut self, pins: OwnedFd, timeouts: OwnedFd, vips: OwnedFd) -> Self {
        self.affinity = Some((pins, timeouts, vips));
        self
    }

    /// The affinity VIPs' timeouts and flags, read once per walk; `None` when the
    /// walker has no affinity maps.
    fn affinity_vips(&self) -> Result<Option<AffinityVips>, DataplaneError> {
        let Some((_, timeouts, vips)) = &self.affinity else {
            return Ok(None);
        };
        let mut read = AffinityVips {
            timeout_ns: vec![0; MAX_VIPS as usize],
            flags: vec![0; MAX_VIPS as usize],
        };
        for_each::<u32, u64>(timeouts, maps::AFFINITY_TIMEOUT, |id, ns| {
            if let Some(t) = read.timeout_ns.get_mut(*id as usize) {
                *t = *ns;
            }
        })?;
        for_each::<VipKey, VipEntry>(vips, maps::VIPS, |_, v| {
            if let Some(f) = read.flags.get_mut(v.vip_id as usize) {
                *f = v.flags;
            }
        })?;
        Ok(Some(read))
    }

    /// Refreshes the affinity pins of `vips` from `activity` and counts the live ones
    /// per VIP id at `now` (see the module documentation).
    fn affinity_pins(
        &self,
        vips: &AffinityVips,
        activity: &Activity,
        now: u64,
    ) -> Result<HashMap<u32, u64>, DataplaneError> {
        let Some((pins, _, _)) = &self.affinity else {
            return Ok(HashMap::new());
        };
        let mut live = vec![0u64; MAX_VIPS as usize];
        let mut writes = Vec::new();
        for_each::<AffinityKey, AffinityEntry>(pins, maps::AFFINITY, |k, e| {
            let e = match activity.refreshed(k, e) {
                Some(new) => {
                    writes.push((*k, new));
                    new
                }
                None => *e,
            };
            let i = k.vip_id as usize;
            if let (Some(&t), Some(n)) = (vips.timeout_ns.get(i), live.get_mut(i))
                && t != 0
                && now.saturating_sub(e.stamp_ns) <= t
            {
                *n += 1;
            }
        })?;
        // Written after the batch read, not during it. A pin the program rewrote in
        // between (its backend drained or removed) gets the older backend back with a
        // recent stamp; the next new connection finds it inactive and moves it again.
        for (k, e) in &writes {
            bpf_sys::update(pins.as_fd(), pod_bytes(k), pod_bytes(e)).map_err(|error| {
                DataplaneError::Syscall {
                    op: format!("BPF_MAP_UPDATE_ELEM on map {}", maps::AFFINITY),
                    error,
                }
            })?;
        }
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

    /// `EXCEPTIONS`'s descriptor, when the walker reads it.
    pub(super) fn exceptions(&self) -> Option<&OwnedFd> {
        self.exceptions.as_ref()
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
                Class::Handshake { live: true } => c.syn_only += 1,
                Class::Expired | Class::Handshake { live: false } => {}
            }
        };
        let vips = self.affinity_vips()?;
        let mut activity = Activity::default();
        let (mut v4, mut v6) = (0, 0);
        for_each::<FlowKey4, CtEntry>(&self.v4, maps::CONNTRACK_V4, |k, e| {
            v4 += 1;
            count(e, k.proto);
            if let Some(vips) = &vips {
                activity.note(vips, || k.widen(), e, now);
            }
        })?;
        for_each::<FlowKey, CtEntry>(&self.v6, maps::CONNTRACK_V6, |k, e| {
            v6 += 1;
            count(e, k.vip.proto);
            if let Some(vips) = &vips {
                activity.note(vips, || *k, e, now);
            }
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
        if let Some(vips) = &vips {
            census.affinity = self.affinity_pins(vips, &activity, now)?;
        }
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
        // A pin made at a SYN (its ISN kept) that no later packet saw is a handshake,
        // live within the SYN window; once a packet saw it, an established connection.
        let at_syn = |secs_ago| CtEntry {
            isn: 7,
            seen_ticks: UNSEEN_TICKS,
            ..seen(secs_ago)
        };
        assert_eq!(c(&at_syn(5), PROTO_TCP), Class::Handshake { live: true });
        assert_eq!(c(&at_syn(61), PROTO_TCP), Class::Handshake { live: false });
        let answered = CtEntry { isn: 7, ..seen(5) };
        assert_eq!(c(&answered, PROTO_TCP), Class::Established { idle: false });
    }

    /// VIP 1 hashes `src` with affinity; VIP 2 hashes `src` without.
    fn vips() -> AffinityVips {
        let mut v = AffinityVips {
            timeout_ns: vec![0; 4],
            flags: vec![0; 4],
        };
        let h = |affinity_secs| lb_common::hash_fields::HashFields {
            fields: lb_common::hash_fields::Fields::Src,
            prefix: 0,
            affinity_secs,
        };
        v.flags[1] = h(300).flags();
        v.timeout_ns[1] = 300 * 1_000_000_000;
        v.flags[2] = h(0).flags();
        v
    }

    fn flow(src: u8, sport: u16) -> FlowKey {
        FlowKey4 {
            src: [192, 0, 2, src],
            dst: [203, 0, 113, 10],
            sport: sport.to_be(),
            dport: 80u16.to_be(),
            proto: PROTO_TCP,
            _pad: [0; 3],
        }
        .widen()
    }

    #[test]
    fn a_pin_takes_the_newest_packet_of_its_clients_open_connections_to_its_backend() {
        let vips = vips();
        let mut activity = Activity::default();
        let conn = |vip_id, backend_id, secs_ago| CtEntry {
            vip_id,
            backend_id,
            ..seen(secs_ago)
        };
        // Client .7 of VIP 1: two connections to backend 3 (seen 100 s and 20 s ago),
        // one to backend 4 (5 s ago) and a closing one to 3 (1 s ago).
        activity.note(&vips, || flow(7, 1000), &conn(1, 3, 100), NOW);
        activity.note(&vips, || flow(7, 1001), &conn(1, 3, 20), NOW);
        activity.note(&vips, || flow(7, 1002), &conn(1, 4, 5), NOW);
        let closing = CtEntry {
            closing: CT_FIN,
            ..conn(1, 3, 1)
        };
        activity.note(&vips, || flow(7, 1003), &closing, NOW);
        // Client .8 of VIP 2 (no affinity): nothing noted.
        activity.note(&vips, || flow(8, 1000), &conn(2, 3, 1), NOW);
        assert_eq!(activity.0.len(), 2);

        let key = affinity::key(&flow(7, 0), 1, vips.flags[1]);
        let old = affinity::pin(3, NOW - 400 * 1_000_000_000);
        let new = activity.refreshed(&key, &old).expect("refreshed");
        let tick = 1u64 << CT_TICK_SHIFT;
        let twenty = NOW - 20 * 1_000_000_000;
        assert!(
            new.stamp_ns <= twenty && new.stamp_ns > twenty - tick,
            "{new:?}"
        );
        assert_eq!(new.backend_id, 3);
        // A pin newer than every packet, or on a backend without an open connection
        // of the client, is left alone.
        assert_eq!(activity.refreshed(&key, &affinity::pin(3, NOW)), None);
        assert_eq!(activity.refreshed(&key, &affinity::pin(5, 0)), None);
        let other = affinity::key(&flow(9, 0), 1, vips.flags[1]);
        assert_eq!(activity.refreshed(&other, &old), None);
    }
}
