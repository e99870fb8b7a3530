// SPDX-License-Identifier: MIT OR Apache-2.0
//! Packet tracing (`lb trace`): the filter userspace writes into `TRACE_FILTER` while a
//! trace client is connected, which packets it selects, and the codes of the decision
//! a trace record names.
//!
//! The XDP program traces only while `CONFIG_TRACE` is set in `LbConfig::flags`
//! (`crate::types::CONFIG_TRACE`), and then only VIP packets that [`TraceFilter::matches`];
//! it writes one aya-log record per such packet. Both sides use [`Path`] for the
//! decision and this module's [`TraceFilter::matches`] for the selection, so a test in
//! userspace checks exactly what the kernel selects.

use crate::{impl_pod, types::FlowKey, types::VipKey};

/// [`TraceFilter::fields`]: only packets to [`TraceFilter::vip`].
pub const TRACE_MATCH_VIP: u8 = 1;
/// [`TraceFilter::fields`]: only packets from the client address [`TraceFilter::client`]
/// (of family [`TraceFilter::family`]).
pub const TRACE_MATCH_CLIENT: u8 = 2;
/// [`TraceFilter::fields`]: only packets from client port [`TraceFilter::client_port`].
pub const TRACE_MATCH_PORT: u8 = 4;

/// The single element of the `TRACE_FILTER` array: which VIP packets a trace records.
/// A field is compared only when its bit is set in `fields`; all bits clear selects
/// every VIP packet.
///
/// Layout (40 bytes, 4-byte aligned): `vip` 0..20 (a [`VipKey`]), `client` 20..36
/// (network order; IPv4 in bytes 0..4), `client_port` 36..38 (network order), `family`
/// 38, `fields` 39.
#[repr(C, align(4))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceFilter {
    /// The VIP (with [`TRACE_MATCH_VIP`]).
    pub vip: VipKey,
    /// The client address (with [`TRACE_MATCH_CLIENT`]).
    pub client: [u8; 16],
    /// The client port, network order (with [`TRACE_MATCH_PORT`]).
    pub client_port: u16,
    /// The client address's family ([`crate::types::FAMILY_V4`] or
    /// [`crate::types::FAMILY_V6`], with [`TRACE_MATCH_CLIENT`]).
    pub family: u8,
    /// Bit set of `TRACE_MATCH_*`.
    pub fields: u8,
}
const _: () = assert!(size_of::<TraceFilter>() == 40);

impl TraceFilter {
    /// Whether a packet of flow `key` is selected.
    #[inline(always)]
    #[must_use]
    pub fn matches(&self, key: &FlowKey) -> bool {
        let vip = self.fields & TRACE_MATCH_VIP == 0 || self.vip.same_as(&key.vip);
        let client = self.fields & TRACE_MATCH_CLIENT == 0
            || (self.family == key.vip.family && same16(&self.client, &key.src));
        let port = self.fields & TRACE_MATCH_PORT == 0 || self.client_port == key.sport;
        vip && client && port
    }
}

/// Whether two 16-byte addresses are equal, compared as four words (cheaper in BPF).
#[inline(always)]
fn same16(a: &[u8; 16], b: &[u8; 16]) -> bool {
    let mut diff = 0;
    let mut i = 0;
    while i < 16 {
        diff |= u32::from_ne_bytes([a[i], a[i + 1], a[i + 2], a[i + 3]])
            ^ u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        i += 4;
    }
    diff == 0
}

/// The single element of the per-CPU `TRACE_PACKET` array: a traced packet and its
/// decision, handed from the load balancer to the trace program (`lb_trace`, reached by a
/// tail call with a stack of its own), which logs it, counts its verdict reason and
/// returns its action.
///
/// Layout (64 bytes): `key` 0..40, `tcp_flags` 40, `path` 41, `_pad` 42..44,
/// `backend_id` 44..48, `slot` 48..52, `reason` 52..56, `action` 56..60, `_pad2` 60..64.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TracedPacket {
    /// The flow.
    pub key: FlowKey,
    /// The TCP flags byte (0 for UDP).
    pub tcp_flags: u8,
    /// A [`Path`] code.
    pub path: u8,
    /// Explicit padding, always zero.
    pub _pad: [u8; 2],
    /// The chosen backend (0: none).
    pub backend_id: u32,
    /// The table slot read, `u32::MAX` for none.
    pub slot: u32,
    /// The verdict reason (`crate::stats::Reason` index).
    pub reason: u32,
    /// The XDP action returned.
    pub action: u32,
    /// Explicit padding, always zero.
    pub _pad2: u32,
}
const _: () = assert!(size_of::<TracedPacket>() == 64);

/// [`TracedPacket::slot`] when no table slot was read.
pub const NO_SLOT: u32 = u32::MAX;

/// Which state chose a traced packet's backend (the `via=` field of a trace record).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// The packet's VIP was not found, or it was dropped before any choice.
    None = 0,
    /// Conntrack hit on the established-flow fast path (no `VIPS` lookup).
    CtFast = 1,
    /// Conntrack hit on the full path: the flow's pin decided.
    CtPin = 2,
    /// A TCP SYN: picked from the VIP's table and remembered in the SYN cache.
    Syn = 3,
    /// A held SYN decided (the handshake's ACK, promoted into conntrack).
    SynCache = 4,
    /// Conntrack miss: the VIP's table decided (and the flow was pinned, unless RST).
    Table = 5,
    /// The fast path: a clean slot's owner decided, with no conntrack lookup.
    CleanSlot = 6,
    /// A new connection of a VIP with a persistence timeout: the client's affinity pin
    /// decided (`crate::affinity`).
    Affinity = 7,
}

impl Path {
    /// Every path, by code.
    pub const ALL: [Path; 8] = [
        Path::None,
        Path::CtFast,
        Path::CtPin,
        Path::Syn,
        Path::SynCache,
        Path::Table,
        Path::CleanSlot,
        Path::Affinity,
    ];

    /// The path of code `code`, if any.
    #[must_use]
    pub fn from_code(code: u8) -> Option<Path> {
        Path::ALL.get(usize::from(code)).copied()
    }

    /// Its name in `lb trace` (`conntrack-hit`, `syn`, `syn-cache`, `table`, ...).
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Path::None => "none",
            Path::CtFast => "conntrack-hit",
            Path::CtPin => "conntrack-hit-full",
            Path::Syn => "syn",
            Path::SynCache => "syn-cache",
            Path::Table => "conntrack-miss",
            Path::CleanSlot => "clean-slot",
            Path::Affinity => "affinity",
        }
    }

    /// Whether a table slot was read (the record's `slot=` is meaningful).
    #[must_use]
    pub const fn reads_table(self) -> bool {
        matches!(self, Path::Syn | Path::Table | Path::CleanSlot)
    }
}

impl_pod!(TraceFilter, TracedPacket);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{FAMILY_V4, PROTO_TCP};

    fn key(src: [u8; 4], sport: u16, vport: u16) -> FlowKey {
        let mut k = FlowKey::default();
        k.vip.addr[..4].copy_from_slice(&[203, 0, 113, 10]);
        k.vip.port = vport.to_be();
        k.vip.proto = PROTO_TCP;
        k.vip.family = FAMILY_V4;
        k.src[..4].copy_from_slice(&src);
        k.sport = sport.to_be();
        k
    }

    #[test]
    fn a_filter_compares_only_the_fields_it_names() {
        let k = key([192, 0, 2, 60], 40001, 80);
        assert!(
            TraceFilter::default().matches(&k),
            "no field: every VIP packet"
        );
        let vip = TraceFilter {
            vip: key([0; 4], 0, 80).vip,
            fields: TRACE_MATCH_VIP,
            ..TraceFilter::default()
        };
        assert!(vip.matches(&k));
        assert!(!vip.matches(&key([192, 0, 2, 60], 40001, 443)));
        let mut client = TraceFilter {
            family: FAMILY_V4,
            fields: TRACE_MATCH_CLIENT,
            ..TraceFilter::default()
        };
        client.client[..4].copy_from_slice(&[192, 0, 2, 60]);
        assert!(client.matches(&k));
        assert!(!client.matches(&key([192, 0, 2, 61], 40001, 80)));
        let port = TraceFilter {
            client_port: 40001u16.to_be(),
            fields: TRACE_MATCH_CLIENT | TRACE_MATCH_PORT,
            ..client
        };
        assert!(port.matches(&k));
        assert!(!port.matches(&key([192, 0, 2, 60], 40002, 80)));
    }

    #[test]
    fn path_codes_round_trip() {
        for p in Path::ALL {
            assert_eq!(Path::from_code(p as u8), Some(p));
        }
        let past = u8::try_from(Path::ALL.len()).expect("few paths");
        assert_eq!(Path::from_code(past), None);
    }
}
