// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Fragment tracking (`FRAGMENTS`): later fragments of an IP datagram follow its first.
//!
//! Only the first fragment (offset 0) has the ports, so only it can be balanced. It is
//! balanced as any packet of its flow (conntrack, SYN cache, table) and [`record`]
//! notes where it went under its datagram's (source, destination, protocol,
//! identification). A later fragment ([`follow`]) looks its datagram up and is
//! encapsulated to the same backend, with the first fragment's flow hash (so the same
//! per-flow outer source). The program neither reassembles nor holds fragments: a
//! fragment that arrives before its first fragment, or after its datagram's entry was
//! evicted by newer datagrams (the map is an LRU), is dropped and counted
//! (`drop_fragment`) when it is for a VIP address. Later fragments never touch
//! conntrack and are never read as TCP/UDP headers.

#![expect(
    clippy::needless_borrows_for_generic_args,
    reason = "keys and values go to map helpers by reference: by value would make \
              another stack copy in the BPF program"
)]

use aya_ebpf::{bindings::xdp_action, programs::XdpContext};
use lb_common::{
    stats::Reason,
    types::{CONFIG_VALID, FlowKey, FragEntry},
};

use crate::{
    backend,
    forward::{self, Sent},
    maps::{CONFIG, FRAGMENTS, SCRATCH},
    packet::frame_len,
    parse::{FragAt, Parsed, flow_key},
    records::{FragTag, Scratch},
    stats, vip,
};

/// `BPF_ANY`: create or replace (a new datagram with a reused identification replaces
/// the old one).
const BPF_ANY: u64 = 0;

/// Records that the first fragment `key` / `tag` went to backend `backend_id` of VIP
/// `vip_id`, with its flow hash `hash` (the later fragments' outer fields). A failed
/// insert only loses the later fragments. Key and value are built in the per-CPU
/// `SCRATCH` (map helpers take map memory as well as stack), and the insert is a BPF
/// function that keeps nothing across its one helper call: it runs below the load
/// balancer's frame, and the verifier allows 512 bytes of stack for the whole chain.
#[inline(always)]
pub(crate) fn record(key: &FlowKey, tag: &FragTag, backend_id: u32, vip_id: u32, hash: u32) {
    let Some(scratch) = SCRATCH.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: per-CPU array element, used only by this CPU during this packet.
    let scratch = unsafe { &mut *scratch };
    scratch.frag_entry = FragEntry {
        backend_id,
        vip_id,
        hash,
    };
    insert_datagram(scratch, key, tag);
}

/// Writes `key` / `tag`'s datagram into `scratch` and inserts it with `scratch`'s
/// entry.
#[inline(never)]
fn insert_datagram(scratch: &mut Scratch, key: &FlowKey, tag: &FragTag) {
    scratch.frag_key = tag.datagram(key);
    let _ = FRAGMENTS.insert(&scratch.frag_key, &scratch.frag_entry, BPF_ANY);
}

/// Sends the later fragment `at` after its first fragment; returns the verdict.
#[inline(always)]
pub(crate) fn follow(ctx: &XdpContext, at: &FragAt) -> (u32, Reason) {
    // SAFETY: the pointer comes from a successful lookup; the value is copied at once.
    let Some(entry) = FRAGMENTS.get_ptr(&at.key).map(|e| unsafe { *e }) else {
        let reason = if vip::is_address(at.key.dst, at.key.family) {
            Reason::DropFragment
        } else {
            Reason::PassNonVip
        };
        return (reason.action(), reason);
    };
    let Some(cfg) = CONFIG.get(0).filter(|cfg| cfg.flags & CONFIG_VALID != 0) else {
        return (xdp_action::XDP_DROP, Reason::DropBadConfig);
    };
    let Some(vip_stats) = stats::vip(entry.vip_id) else {
        return (xdp_action::XDP_DROP, Reason::DropBadConfig);
    };
    let bytes = frame_len(ctx) as u64;
    vip_stats.packets += 1;
    vip_stats.bytes += bytes;
    let Some(choice) = backend::keeps_flows(entry.backend_id) else {
        vip_stats.drops += 1;
        return (xdp_action::XDP_DROP, Reason::DropNoBackend);
    };
    let k = &at.key;
    let words = |a: &[u8; 16]| crate::headers::addr_words(a);
    let parsed = Parsed {
        key: flow_key(words(&k.dst), words(&k.src), k.proto, k.family),
        l3_len: at.l3_len,
        tcp_flags: 0,
        tcp_seq: 0,
    };
    match forward::encapsulate(
        ctx,
        &parsed,
        choice.id,
        choice.backend,
        cfg,
        Some(entry.hash),
    ) {
        Ok(sent) => {
            stats::backend(choice.id, bytes, false);
            (
                sent.action,
                Sent::relabel(&sent, Reason::TxFragment, Reason::RedirectFragment),
            )
        }
        Err(reason) => {
            vip_stats.drops += 1;
            (reason.action(), reason)
        }
    }
}
