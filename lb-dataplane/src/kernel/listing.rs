//! Listing connections (`lb conn list`): every entry of both conntrack maps and of the
//! fast path's exceptions map, and the SYN cache's held SYNs, as [`ConnRow`]s, read with the batched walk of
//! [`ConntrackWalker`] and filtered as they are read, so a listing of a few rows out of
//! a million entries allocates for those rows only.
//!
//! The rows carry the raw key and ids; naming them (VIP, backend address) is the
//! daemon's business. Ages come from the entries' clocks: a TCP pin's `stamp_ns` is
//! when it was pinned (its age); a UDP entry's is its last packet, so a UDP row has no
//! age. The idle time is from `seen_ticks` (about 1.07 s resolution).

use std::{
    os::fd::{AsFd as _, OwnedFd},
    str::FromStr,
    time::{Duration, Instant},
};

use aya::maps::{IterableMap as _, MapData};
use lb_common::{
    maps::{self, MAX_VIPS},
    types::{
        CT_TICK_SHIFT, CtEntry, FAMILY_V4, FlowKey, FlowKey4, PROTO_TCP, SynEntry, VipKey, ct_ticks,
    },
};

use super::{
    KernelDataplane,
    walk::{Class, ConntrackWalker, WalkSettings, classify, conntrack_now_ns, for_each},
};
use crate::DataplaneError;

/// The state of a listed connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnState {
    /// Open: TCP without a FIN or RST from the client, UDP within its timeout.
    Established,
    /// TCP: the client sent a FIN or RST (the entry stays until the LRU evicts it).
    Closing,
    /// UDP: idle past the UDP timeout (the next packet re-picks a backend).
    Expired,
    /// A handshake not completed: a SYN held in the SYN cache (younger than
    /// [`WalkSettings::syn_window`]), or a fast-path pin made at the SYN that no later
    /// packet has seen.
    Syn,
}

impl ConnState {
    /// Every state, in the order `lb conn list --help` names them.
    pub const ALL: [Self; 4] = [Self::Established, Self::Closing, Self::Expired, Self::Syn];

    /// The state's name: `established`, `closing`, `expired`, `syn`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Established => "established",
            Self::Closing => "closing",
            Self::Expired => "expired",
            Self::Syn => "syn",
        }
    }
}

impl FromStr for ConnState {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|s| s.name() == text)
            .ok_or_else(|| {
                format!("expected one of established, closing, expired, syn; got {text:?}")
            })
    }
}

/// The map a listed connection was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PinMap {
    /// A conntrack pin (`CONNTRACK_V4` or `CONNTRACK_V6`, LRU).
    Conntrack,
    /// A fast-path exception (`EXCEPTIONS`, never evicted): a pin the table and the
    /// miss rule could not give again.
    Exception,
    /// A SYN held in the SYN cache (`SYN_CACHE`).
    SynCache,
}

/// One listed connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnRow {
    /// The flow (an IPv4 flow in the [`FlowKey`] form: addresses in bytes 0..4).
    pub key: FlowKey,
    /// The backend id it is pinned to (or its SYN was sent to).
    pub backend_id: u32,
    /// Its state.
    pub state: ConnState,
    /// The map it was read from.
    pub pin: PinMap,
    /// Nanoseconds since it was pinned (TCP) or its SYN was seen; `None` for UDP,
    /// whose entries keep only the last packet's time.
    pub age_ns: Option<u64>,
    /// Nanoseconds since its last packet (about 1.07 s resolution for pins).
    pub idle_ns: u64,
}

/// One listing's result.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnListing {
    /// The rows kept, at most the limit asked for, in the maps' order.
    pub rows: Vec<ConnRow>,
    /// Rows that matched the filter (kept or not).
    pub matched: u64,
    /// Entries read: pins of both maps plus held SYNs.
    pub walked: u64,
    /// How long the walk took.
    pub took: Duration,
}

/// The [`FlowKey`] of a `CONNTRACK_V4` key (the inverse of [`FlowKey::v4`]).
pub fn widen(k: &FlowKey4) -> FlowKey {
    let mut key = FlowKey {
        vip: VipKey {
            addr: [0; 16],
            port: k.dport,
            proto: k.proto,
            family: FAMILY_V4,
        },
        src: [0; 16],
        sport: k.sport,
        _pad: [0; 2],
    };
    key.vip.addr[..4].copy_from_slice(&k.dst);
    key.src[..4].copy_from_slice(&k.src);
    key
}

/// The row of pin `e` of flow `key`, read from map `pin`, at `now` (conntrack clock,
/// ns).
fn pin_row(key: FlowKey, e: &CtEntry, pin: PinMap, now: u64, settings: &WalkSettings) -> ConnRow {
    let state = match classify(e, key.vip.proto, now, settings) {
        Class::Established { .. } => ConnState::Established,
        Class::Closing => ConnState::Closing,
        Class::Expired => ConnState::Expired,
        Class::Handshake { .. } => ConnState::Syn,
    };
    let idle = u64::from(ct_ticks(now).wrapping_sub(e.seen_ticks)) << CT_TICK_SHIFT;
    let age = (key.vip.proto == PROTO_TCP).then(|| now.saturating_sub(e.stamp_ns));
    ConnRow {
        key,
        backend_id: e.backend_id,
        state,
        pin,
        age_ns: age,
        // The ticks round to about a second: never more idle than old.
        idle_ns: age.map_or(idle, |a| idle.min(a)),
    }
}

/// The row of SYN cache slot `s` at `now`, if it holds a SYN younger than the window.
fn syn_row(s: &SynEntry, now: u64, settings: &WalkSettings) -> Option<ConnRow> {
    let window = u64::try_from(settings.syn_window.as_nanos()).unwrap_or(u64::MAX);
    let age = now.saturating_sub(s.syn_ns);
    (s.key.vip.family != 0 && u32::from(s.vip_id) < MAX_VIPS && age <= window).then_some(ConnRow {
        key: s.key,
        backend_id: u32::from(s.backend_id),
        state: ConnState::Syn,
        pin: PinMap::SynCache,
        age_ns: Some(age),
        idle_ns: age,
    })
}

/// Keeps the rows `keep` accepts, up to `limit` of them, counting every match.
struct Collector<F> {
    keep: F,
    limit: usize,
    listing: ConnListing,
}

impl<F: FnMut(&ConnRow) -> bool> Collector<F> {
    fn offer(&mut self, row: &ConnRow) {
        self.listing.walked += 1;
        if (self.keep)(row) {
            self.listing.matched += 1;
            if self.listing.rows.len() < self.limit {
                self.listing.rows.push(*row);
            }
        }
    }
}

impl ConntrackWalker {
    /// Lists the connections `keep` accepts (at most `limit` rows; every match is
    /// counted): both conntrack maps, the exceptions map when the walker has it, then,
    /// when `syn` is set, the SYN cache's held SYNs, read in batches
    /// (`BPF_MAP_LOOKUP_BATCH`).
    ///
    /// # Errors
    /// When a batch lookup fails.
    pub fn list(
        &self,
        settings: &WalkSettings,
        syn: bool,
        keep: impl FnMut(&ConnRow) -> bool,
        limit: usize,
    ) -> Result<ConnListing, DataplaneError> {
        let started = Instant::now();
        let now = conntrack_now_ns();
        let mut c = Collector {
            keep,
            limit,
            listing: ConnListing::default(),
        };
        for_each::<FlowKey4, CtEntry>(self.v4(), maps::CONNTRACK_V4, |k, e| {
            c.offer(&pin_row(widen(k), e, PinMap::Conntrack, now, settings));
        })?;
        for_each::<FlowKey, CtEntry>(self.v6(), maps::CONNTRACK_V6, |k, e| {
            c.offer(&pin_row(*k, e, PinMap::Conntrack, now, settings));
        })?;
        if let Some(fd) = self.exceptions() {
            for_each::<FlowKey, CtEntry>(fd, maps::EXCEPTIONS, |k, e| {
                c.offer(&pin_row(*k, e, PinMap::Exception, now, settings));
            })?;
        }
        if syn {
            for_each::<u32, SynEntry>(self.syn(), maps::SYN_CACHE, |_, s| {
                if let Some(row) = syn_row(s, now, settings) {
                    c.offer(&row);
                }
            })?;
        }
        c.listing.took = started.elapsed();
        Ok(c.listing)
    }
}

/// A duplicate of the file descriptor of `map`.
fn dup(map: &MapData, name: &'static str) -> Result<OwnedFd, DataplaneError> {
    map.fd()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|error| DataplaneError::Syscall {
            op: format!("dup of map {name}"),
            error,
        })
}

impl KernelDataplane {
    /// A walker of its own over duplicates of the conntrack maps', the exceptions map's
    /// and the SYN cache's file descriptors, for a listing that runs without holding
    /// the data plane.
    ///
    /// # Errors
    /// When a descriptor cannot be duplicated.
    pub fn conntrack_lister(&self) -> Result<ConntrackWalker, DataplaneError> {
        Ok(ConntrackWalker::new(
            dup(self.conntrack_v4.map(), maps::CONNTRACK_V4)?,
            dup(self.conntrack_v6.map(), maps::CONNTRACK_V6)?,
            dup(self.syn_cache.map(), maps::SYN_CACHE)?,
        )
        .with_exceptions(dup(self.exceptions.map(), maps::EXCEPTIONS)?))
    }
}

#[cfg(test)]
mod tests {
    use lb_common::types::{CT_FIN, PROTO_UDP};

    use super::*;

    const S: WalkSettings = WalkSettings {
        udp_timeout: Duration::from_secs(30),
        idle: Duration::from_secs(60),
        syn_window: WalkSettings::SYN_WINDOW,
    };
    const NOW: u64 = 1_000 * 1_000_000_000;
    const SEC: u64 = 1_000_000_000;

    fn key4(proto: u8) -> FlowKey4 {
        FlowKey4 {
            src: [192, 0, 2, 10],
            dst: [203, 0, 113, 10],
            sport: 40000u16.to_be(),
            dport: 80u16.to_be(),
            proto,
            _pad: [0; 3],
        }
    }

    #[test]
    fn widen_inverts_v4() {
        let k = key4(PROTO_TCP);
        let wide = widen(&k);
        assert_eq!(wide.v4(), k);
        assert_eq!(wide.vip.family, FAMILY_V4);
        assert_eq!(&wide.src[..4], &[192, 0, 2, 10]);
        assert_eq!(wide.src[4..], [0; 12]);
    }

    #[test]
    fn rows_carry_state_age_and_idle() {
        let e = CtEntry {
            backend_id: 7,
            stamp_ns: NOW - 100 * SEC,
            seen_ticks: ct_ticks(NOW - 5 * SEC),
            ..CtEntry::default()
        };
        let tcp = pin_row(widen(&key4(PROTO_TCP)), &e, PinMap::Conntrack, NOW, &S);
        assert_eq!(tcp.state, ConnState::Established);
        assert_eq!(tcp.backend_id, 7);
        assert_eq!(tcp.age_ns, Some(100 * SEC));
        // Ticks are 2^30 ns: the idle time is within one tick of 5 s.
        assert!(
            (4 * SEC..=7 * SEC).contains(&tcp.idle_ns),
            "{}",
            tcp.idle_ns
        );
        let closing = CtEntry {
            closing: CT_FIN,
            ..e
        };
        assert_eq!(
            pin_row(
                widen(&key4(PROTO_TCP)),
                &closing,
                PinMap::Conntrack,
                NOW,
                &S
            )
            .state,
            ConnState::Closing
        );
        // A UDP entry's stamp is its last packet: no age; past the timeout, expired.
        let udp = CtEntry {
            stamp_ns: NOW - 40 * SEC,
            ..e
        };
        let row = pin_row(widen(&key4(PROTO_UDP)), &udp, PinMap::Exception, NOW, &S);
        assert_eq!(
            (row.state, row.pin, row.age_ns),
            (ConnState::Expired, PinMap::Exception, None)
        );
    }

    #[test]
    fn held_syns_are_rows_within_the_window() {
        let slot = SynEntry {
            key: widen(&key4(PROTO_TCP)),
            backend_id: 3,
            vip_id: 1,
            syn_ns: NOW - 2 * SEC,
            ..SynEntry::default()
        };
        let row = syn_row(&slot, NOW, &S).expect("a held SYN");
        assert_eq!((row.state, row.backend_id), (ConnState::Syn, 3));
        assert_eq!(row.age_ns, Some(2 * SEC));
        let old = SynEntry {
            syn_ns: NOW - 61 * SEC,
            ..slot
        };
        assert_eq!(syn_row(&old, NOW, &S), None);
        // A promoted slot (vip_id MAX_VIPS) and an empty one are not rows.
        let promoted = SynEntry {
            vip_id: u16::try_from(MAX_VIPS).unwrap_or(u16::MAX),
            ..slot
        };
        assert_eq!(syn_row(&promoted, NOW, &S), None);
        assert_eq!(syn_row(&SynEntry::default(), NOW, &S), None);
    }

    #[test]
    fn the_collector_counts_every_match_and_keeps_up_to_the_limit() {
        let row = pin_row(
            widen(&key4(PROTO_TCP)),
            &CtEntry::default(),
            PinMap::Conntrack,
            NOW,
            &S,
        );
        let mut c = Collector {
            keep: |r: &ConnRow| r.backend_id == 0,
            limit: 2,
            listing: ConnListing::default(),
        };
        for _ in 0..5 {
            c.offer(&row);
        }
        c.offer(&ConnRow {
            backend_id: 9,
            ..row
        });
        assert_eq!(c.listing.rows.len(), 2);
        assert_eq!((c.listing.matched, c.listing.walked), (5, 6));
    }

    #[test]
    fn states_parse_by_name() {
        for s in ConnState::ALL {
            assert_eq!(s.name().parse::<ConnState>(), Ok(s));
        }
        assert!(
            "open"
                .parse::<ConnState>()
                .unwrap_err()
                .contains("established")
        );
    }
}
