// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The records the programs keep in their own per-CPU maps (`CARRIED`, `RARE_WORK`,
//! `SCRATCH`), which userspace never reads: what `lb_xdp_full` carries through a
//! packet, the work `lb_xdp` hands to `lb_xdp_rare`, and map keys and values built off
//! the stack. The maps shared with userspace take their types from `lb_common::types`.
//!
//! A leaf module: `maps` names these types, and every module uses `maps`. The
//! datagram identification a first fragment carries ([`FragTag`]) is here too, as part
//! of [`Carried`]; parsing produces it.

use lb_common::types::{FlowKey, FragEntry, FragKey, SourceData};

/// The identification of a fragmented datagram, as its first fragment carries it: the
/// rest of its [`FragKey`] (addresses, family) is the first fragment's flow key.
/// `repr(C)`: `lb_xdp_full` keeps one in a map value ([`Carried`]).
#[derive(Clone, Copy)]
#[repr(C)]
pub(crate) struct FragTag {
    /// Identification, wire bytes read as a native `u32` (IPv4: 16 bits).
    pub(crate) id: u32,
    /// IPv4 protocol, or the IPv6 fragment header's next header.
    pub(crate) proto: u8,
}

impl FragTag {
    /// The `FRAGMENTS` key of this datagram between the addresses of `key`.
    #[inline(always)]
    pub(crate) fn datagram(&self, key: &FlowKey) -> FragKey {
        FragKey {
            src: key.src,
            dst: key.vip.addr,
            id: self.id,
            proto: self.proto,
            family: key.vip.family,
            _pad: [0; 2],
        }
    }
}

/// What `lb_xdp_full` carries through one packet (16 bytes: two words, the datagram's
/// identification, its protocol and 3 bytes of padding).
#[repr(C)]
pub(crate) struct Carried {
    /// The stripped VLAN tag, as [`Tag::to_word`](crate::vlan::Tag::to_word) encodes it.
    pub(crate) tag: u32,
    /// 1 while the packet is a first fragment, else 0.
    pub(crate) first_fragment: u32,
    /// The first fragment's datagram (valid while `first_fragment` is 1).
    pub(crate) frag: FragTag,
}

const _: () = assert!(size_of::<Carried>() == 16);

/// What `lb_xdp_rare` is to do.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct RareWork {
    /// [`WORK_FRAGMENT`], [`WORK_ICMP`], [`WORK_TOO_BIG`] or [`WORK_CANDIDATE`].
    pub(crate) kind: u32,
    /// The stripped VLAN tag, as [`Tag::to_word`](crate::vlan::Tag::to_word) encodes it.
    pub(crate) tag: u32,
    /// [`WORK_TOO_BIG`]: the packet's family is IPv4. [`WORK_CANDIDATE`]: its VIP id.
    pub(crate) v4: u32,
    /// [`WORK_TOO_BIG`]: bytes of the outer header its backend needs.
    /// [`WORK_CANDIDATE`]: the backend id it is sent to (low 16 bits) and the
    /// candidate's (high 16 bits).
    pub(crate) overhead: u32,
    /// [`WORK_TOO_BIG`]: length of its IP packet. [`WORK_CANDIDATE`]: its flow hash.
    /// (The record keeps its five words: `RARE_WORK` is part of the pinned layout.)
    pub(crate) l3_len: u32,
}

/// [`RareWork::kind`]: a later IP fragment.
pub(crate) const WORK_FRAGMENT: u32 = 1;
/// [`RareWork::kind`]: an ICMP message.
pub(crate) const WORK_ICMP: u32 = 2;
/// [`RareWork::kind`]: a VIP packet too big for the MTU once encapsulated.
pub(crate) const WORK_TOO_BIG: u32 = 3;
/// [`RareWork::kind`]: a VIP packet to send with a second-chance candidate
/// ([`candidates`](crate::candidates)).
pub(crate) const WORK_CANDIDATE: u32 = 4;

/// Map keys and values built off the stack by the functions the load balancer calls.
#[repr(C)]
pub(crate) struct Scratch {
    /// The `FRAGMENTS` key of the first fragment being recorded.
    pub(crate) frag_key: FragKey,
    /// Its value.
    pub(crate) frag_entry: FragEntry,
    /// The `SOURCE_RANGES` key of the source check.
    pub(crate) source_key: aya_ebpf::maps::lpm_trie::Key<SourceData>,
}
