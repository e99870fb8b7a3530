// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Second-chance candidates (issue 31, stage 3; `lb_common::second_chance`, rules
//! SC1-SC5): a TCP packet of a VIP with `VIP_SECOND_CHANCE` that no pin and no held SYN
//! decides, on a dirty slot, is sent GUE to the backend the miss rule decided with the
//! slot's other possible owner as a candidate, and is not pinned.
//!
//! `lb_xdp` only decides ([`offer`]: one read of the slot's cell and one `BACKENDS`
//! lookup, on conntrack misses of such VIPs alone) and hands the packet to the rare
//! paths' program (`lb_xdp_rare`) by tail call ([`work`], `rare::candidate`), which
//! sends it with the candidate ([`send`]). So the encapsulation with private data is
//! verified once, in that program, and `lb_xdp`'s send paths stay as they were.

use aya_ebpf::programs::XdpContext;
use lb_common::{
    second_chance,
    stats::{Reason, VipStats},
    types::{
        CONFIG_VALID, FAMILY_V4, FAMILY_V6, FlowKey, LbConfig, PROTO_TCP, VIP_FAST_PATH,
        VIP_SECOND_CHANCE, VipEntry,
    },
};

use crate::{
    backend::{self, Choice},
    encap::{ETH_P_IP, IPV6_LEN},
    forward::{self, candidates_len},
    headers::{EthHdr, Ipv4Hdr, Ipv6Hdr},
    maps::{BACKENDS, CONFIG, RARE_WORK},
    packet::{self, ptr_at},
    parse::{ETH_LEN, Parsed},
    records::{RareWork, WORK_CANDIDATE, WORK_TOO_BIG},
    stats, table,
};

/// Rules SC1-SC3: the candidate (backend id) packet `p` of VIP `vip`, on slot `hash % M`,
/// sent to `choice` by the miss rule, carries; 0 for none: a VIP without the second
/// chance or with the fast path (rule SC4), not TCP, a destination without GUE, a
/// clean slot, or a candidate that keeps no flows or is of another family than the
/// destination.
///
/// A slot that names a candidate this packet cannot carry counts `sc_given_up`.
#[inline(always)]
pub(crate) fn offer(
    p: &Parsed,
    vip: &VipEntry,
    hash: u32,
    choice: &Choice,
    stats: &mut VipStats,
) -> u32 {
    if vip.flags & (VIP_SECOND_CHANCE | VIP_FAST_PATH) != VIP_SECOND_CHANCE
        || p.key.vip.proto != PROTO_TCP
        || !choice.backend.gue()
    {
        return 0;
    }
    let Ok(cell) = table::cell(vip, hash) else {
        return 0;
    };
    // SAFETY: a successful lookup's element, read once by value.
    let slot = unsafe { *cell }.slot();
    let id = second_chance::offer(&slot, choice.id).candidate;
    if id == 0 {
        return 0;
    }
    match backend::keeps_flows(id) {
        Some(c) if c.backend.family == choice.backend.family => id,
        _ => {
            stats.sc_given_up += 1;
            0
        }
    }
}

/// The work that sends VIP `vip_id`'s packet `p` to backend `backend` with candidate
/// `candidate` (both backend ids, below 2^16), for the rare paths' program: the VIP id,
/// both ids in one word, and the flow hash (for the outer fields; the rare program
/// does not parse the packet again: parsing and the encapsulation with private data
/// do not fit one BPF function's stack).
#[inline(always)]
pub(crate) fn work(
    p: &Parsed,
    cfg: &LbConfig,
    vip_id: u32,
    backend: u32,
    candidate: u32,
) -> RareWork {
    RareWork {
        kind: WORK_CANDIDATE,
        tag: 0,
        v4: vip_id,
        overhead: backend & 0xffff | candidate << 16,
        l3_len: crate::hashes::flow_hash(&p.key, cfg.hash_seed),
    }
}

/// Sends the packet the work names to its backend with its candidate; returns the
/// reason (as `u32`): `tx_encap` or `redirect_encap`, or why it was dropped (counted as
/// a drop of the VIP). A packet too big once encapsulated returns `drop_too_big` with
/// the work rewritten to [`WORK_TOO_BIG`]'s (family, outer header with the candidate,
/// IP length), which the caller answers in a BPF function of its own.
#[inline(never)]
pub(crate) fn send(ctx: &XdpContext, work: &RareWork) -> u32 {
    let reason = match sent(ctx, work) {
        Ok(reason) => return reason as u32,
        Err(reason) => reason,
    };
    if let Some(vip_stats) = stats::vip(work.v4) {
        vip_stats.drops += 1;
    }
    reason as u32
}

/// The family and IP length of the (untagged) frame's packet, from its EtherType and
/// IP header (the load balancer parsed it before the tail call).
#[inline(always)]
fn packet_of(ctx: &XdpContext) -> Option<Parsed> {
    let eth = ptr_at::<EthHdr>(ctx, 0)?;
    // SAFETY: ptr_at checked the 14 bytes.
    let v4 = unsafe { (*eth).proto } == ETH_P_IP;
    let l3_len = if v4 {
        let ip = ptr_at::<Ipv4Hdr>(ctx, ETH_LEN)?;
        // SAFETY: ptr_at checked the header.
        u32::from(u16::from_be(unsafe { (*ip).tot_len }))
    } else {
        let ip = ptr_at::<Ipv6Hdr>(ctx, ETH_LEN)?;
        // SAFETY: ptr_at checked the header.
        IPV6_LEN + u32::from(u16::from_be(unsafe { (*ip).plen }))
    };
    let mut key = FlowKey::default();
    key.vip.family = if v4 { FAMILY_V4 } else { FAMILY_V6 };
    Some(Parsed {
        key,
        l3_len,
        tcp_flags: 0,
        tcp_seq: 0,
    })
}

/// [`send`] without the drop count.
#[inline(always)]
fn sent(ctx: &XdpContext, work: &RareWork) -> Result<Reason, Reason> {
    let cfg: &LbConfig = CONFIG
        .get(0)
        .filter(|cfg| cfg.flags & CONFIG_VALID != 0)
        .ok_or(Reason::DropBadConfig)?;
    let p = packet_of(ctx).ok_or(Reason::DropMalformedL4)?;
    let bytes = packet::frame_len(ctx) as u64;
    let (id, candidate) = (work.overhead & 0xffff, work.overhead >> 16);
    let backend = BACKENDS.get(id).ok_or(Reason::DropBadConfig)?;
    let candidate = BACKENDS.get(candidate).ok_or(Reason::DropBadConfig)?;
    let hash = Some(work.l3_len);
    match forward::encapsulate_with::<true>(ctx, &p, id, backend, cfg, hash, candidate) {
        Ok(sent) => {
            stats::backend(id, bytes, false);
            if let Some(vip_stats) = stats::vip(work.v4) {
                vip_stats.sc_candidates += 1;
            }
            Ok(sent.reason)
        }
        Err(Reason::DropTooBig) => {
            let overhead =
                forward::overhead(backend) + candidates_len::<true>(backend.family == FAMILY_V4);
            if let Some(slot) = RARE_WORK.get_ptr_mut(0) {
                // SAFETY: per-CPU array element, used only by this CPU during this
                // packet; field stores, no record built on the stack.
                unsafe {
                    (*slot).kind = WORK_TOO_BIG;
                    (*slot).v4 = u32::from(p.key.vip.family == FAMILY_V4);
                    (*slot).overhead = overhead;
                    (*slot).l3_len = p.l3_len;
                }
            }
            Err(Reason::DropTooBig)
        }
        Err(reason) => Err(reason),
    }
}
