// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! 802.1Q: a frame with one VLAN tag is handled as the untagged frame inside it and
//! leaves with the same tag.
//!
//! [`strip`] removes a single 802.1Q tag (TPID 0x8100, any VID including the priority
//! tag VID 0) before parsing: the MAC addresses move 4 bytes towards the payload and
//! `bpf_xdp_adjust_head` drops the 4 bytes in front. [`restore`] puts the same tag back
//! in front of whatever the program made of the frame (an encapsulated frame, an ICMP
//! answer, or the original frame when it is passed to the stack), so a tagged frame is
//! never forwarded untagged and the stack sees exactly what arrived. Frames with two
//! tags (802.1ad QinQ or 802.1Q in 802.1Q) and single 802.1ad tags are passed untouched
//! and counted (`pass_vlan`). IEEE 802.1Q-2018 section 9 (tag format).
//!
//! With receive VLAN offload the NIC removes the tag before XDP sees the frame (it is
//! then in the receive descriptor, readable only through the XDP metadata kfunc
//! `bpf_xdp_metadata_rx_vlan_tag`, which aya-ebpf 0.2.1 cannot call): userspace refuses
//! native mode on such an interface (`lb_dataplane::offload`).

use aya_ebpf::{
    bindings::xdp_action, helpers::generated::bpf_xdp_adjust_head, programs::XdpContext,
};
use lb_common::stats::Reason;

use crate::packet::ptr_at;

const ETH_P_8021Q: u16 = 0x8100_u16.to_be();
const ETH_P_8021AD: u16 = 0x88a8_u16.to_be();
/// Length of a VLAN tag (TPID and TCI).
const TAG_LEN: i32 = 4;

/// The VLAN tag of the frame being processed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tag {
    /// No tag.
    None,
    /// One 802.1Q tag, stripped; its TCI in wire order.
    Single(u16),
    /// A tag the program does not handle: the frame passes untouched.
    Unsupported,
}

/// [`Tag::to_word`]: a tag was stripped (its TCI is in the low 16 bits).
const TAG_PRESENT: u32 = 1 << 16;

impl Tag {
    /// The tag as one word, to keep in a map: 0 for none, else `TAG_PRESENT | TCI` (TCI
    /// in wire order). [`Tag::Unsupported`] frames are never kept (they pass at once):
    /// it is 0 too.
    #[inline(always)]
    pub(crate) fn to_word(self) -> u32 {
        match self {
            Tag::Single(tci) => TAG_PRESENT | u32::from(tci),
            Tag::None | Tag::Unsupported => 0,
        }
    }

    /// The tag of a word made by [`Tag::to_word`].
    #[inline(always)]
    pub(crate) fn from_word(word: u32) -> Tag {
        #[expect(
            clippy::cast_possible_truncation,
            reason = "the low 16 bits hold the TCI"
        )]
        if word & TAG_PRESENT != 0 {
            Tag::Single(word as u16)
        } else {
            Tag::None
        }
    }
}

/// The Ethernet header with one VLAN tag: MACs, TPID, TCI, inner EtherType (18 bytes),
/// as 2-byte words.
#[repr(C)]
struct TaggedHdr {
    macs: [u16; 6],
    tpid: u16,
    tci: u16,
    inner: u16,
}

/// Removes a single 802.1Q tag; says what the frame had.
#[inline(always)]
pub(crate) fn strip(ctx: &XdpContext) -> Tag {
    let Some(tpid) = ptr_at::<u16>(ctx, 12) else {
        return Tag::None;
    };
    // SAFETY: ptr_at checked the two bytes.
    let tpid = unsafe { *tpid };
    if tpid != ETH_P_8021Q && tpid != ETH_P_8021AD {
        return Tag::None;
    }
    strip_tag(ctx)
}

#[inline(never)]
fn strip_tag(ctx: &XdpContext) -> Tag {
    let Some(hdr) = ptr_at::<TaggedHdr>(ctx, 0) else {
        return Tag::Unsupported;
    };
    // SAFETY: ptr_at checked the 18 bytes.
    let hdr = unsafe { &mut *hdr };
    if hdr.tpid != ETH_P_8021Q || hdr.inner == ETH_P_8021Q || hdr.inner == ETH_P_8021AD {
        return Tag::Unsupported;
    }
    let (macs, tci) = (hdr.macs, hdr.tci);
    // The MACs go where TPID and TCI were: bytes 4..16, ahead of the inner EtherType.
    let shifted = (hdr as *mut TaggedHdr).cast::<u16>();
    for (i, word) in macs.iter().enumerate() {
        // SAFETY: words 2..8 of the 18 checked bytes.
        unsafe { *shifted.add(2 + i) = *word };
    }
    // SAFETY: ctx is the program's context; the helper checks the delta.
    if unsafe { bpf_xdp_adjust_head(ctx.ctx, TAG_LEN) } != 0 {
        return Tag::Unsupported;
    }
    Tag::Single(tci)
}

/// Puts a stripped tag back in front of the frame the program leaves, unless it is
/// dropped; a frame that cannot get its tag back is dropped (`drop_encap_fail`).
#[inline(always)]
pub(crate) fn restore(ctx: &XdpContext, tag: Tag, verdict: (u32, Reason)) -> (u32, Reason) {
    match tag {
        Tag::Single(tci) if verdict.0 != xdp_action::XDP_DROP => {
            if push_tag(ctx, u32::from(tci)) {
                verdict
            } else {
                (xdp_action::XDP_DROP, Reason::DropEncapFail)
            }
        }
        _ => verdict,
    }
}

/// Pushes the tag with TCI `tci` (wire order, in the low 16 bits); false when the
/// frame has no room.
#[inline(never)]
fn push_tag(ctx: &XdpContext, tci: u32) -> bool {
    #[expect(
        clippy::cast_possible_truncation,
        reason = "a u16 widened by the caller"
    )]
    let tci = tci as u16;
    // SAFETY: ctx is the program's context; the helper checks the delta.
    if unsafe { bpf_xdp_adjust_head(ctx.ctx, -TAG_LEN) } != 0 {
        return false;
    }
    let Some(hdr) = ptr_at::<TaggedHdr>(ctx, 0) else {
        return false;
    };
    let words = hdr.cast::<u16>();
    let mut macs = [0u16; 6];
    for (i, word) in macs.iter_mut().enumerate() {
        // SAFETY: words 2..8 of the 18 checked bytes: the MACs, 4 bytes in.
        *word = unsafe { *words.add(2 + i) };
    }
    // SAFETY: ptr_at checked the 18 bytes; the inner EtherType (bytes 16..18) stays.
    unsafe {
        (*hdr).macs = macs;
        (*hdr).tpid = ETH_P_8021Q;
        (*hdr).tci = tci;
    }
    true
}
