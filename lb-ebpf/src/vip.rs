// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! VIP lookups: the `VIP_FILTER` bitmap, the `VIPS` entry of a VIP, the VIP a VIP id
//! names (`VIP_INFO`), and whether an address carries any VIP (`VIP_ADDRS`).
//!
//! The bitmap comes first for every packet: most non-VIP traffic passes on a clear bit,
//! without a hash-map lookup.

use lb_common::{
    hash::vip_filter_bit,
    types::{FlowKey, VipAddrKey, VipCacheSlot, VipEntry, VipInfo, VipKey},
};

use crate::maps::{VIP_ADDRS, VIP_CACHE, VIP_FILTER, VIP_INFO, VIPS};

/// False when the packet is certainly not for a VIP (its `VIP_FILTER` bit is clear).
#[inline(always)]
pub(crate) fn maybe_vip(key: &VipKey) -> bool {
    let bit = vip_filter_bit(key);
    VIP_FILTER
        .get(bit / 64)
        .is_some_and(|word| word & (1u64 << (bit % 64)) != 0)
}

/// The `VIPS` entry of `key`, if it is a VIP.
#[inline(always)]
pub(crate) fn find_vip(key: &VipKey) -> Option<VipEntry> {
    // SAFETY: the pointer comes from a successful lookup; the 12-byte value is copied
    // out at once.
    VIPS.get_ptr(key).map(|v| unsafe { *v })
}

/// The `VIPS` entry of `key`, whose filter bit is `bit`: from `VIP_CACHE` when
/// `VIP_INFO` confirms the slot ([`VipCacheSlot::entry_for`]), else from `VIPS`. The
/// cache's reads are inlined array loads; a `VIPS` lookup is a call. An entry whose id
/// is beyond `MAX_VIPS` counts as none: both sources then leave the verifier the same
/// id range, so it verifies what follows once instead of once per source.
#[inline(always)]
pub(crate) fn find_vip_cached(key: &VipKey, bit: u32) -> Option<VipEntry> {
    cached(key, bit)
        .or_else(|| find_vip(key))
        .filter(|e| e.vip_id < lb_common::maps::MAX_VIPS)
}

/// `key`'s entry from its `VIP_CACHE` slot `bit`, when `VIP_INFO` confirms it.
#[inline(always)]
fn cached(key: &VipKey, bit: u32) -> Option<VipEntry> {
    let slot = VIP_CACHE.get_ptr(bit)?;
    // SAFETY: a successful lookup's element; each field is read once, the state word
    // with one 8-byte load (userspace changes it with one 8-byte store).
    let (vip_id, state) = unsafe {
        (
            core::ptr::read_volatile(&raw const (*slot).vip_id),
            core::ptr::read_volatile(&raw const (*slot).state),
        )
    };
    let info = VIP_INFO.get(vip_id)?;
    VipCacheSlot::entry_for(vip_id, state, key, info)
}

/// What VIP id `vip_id` names, if it is configured and still names `key` (a conntrack
/// entry's VIP id may have been given to another VIP since).
#[inline(always)]
pub(crate) fn live_info(vip_id: u32, key: &VipKey) -> Option<&'static VipInfo> {
    let info = VIP_INFO.get(vip_id)?;
    (info.live != 0 && info.key.same_as(key)).then_some(info)
}

/// Whether the destination address of flow `key` carries at least one VIP (any port or
/// protocol).
#[inline(always)]
pub(crate) fn is_vip_address(key: &FlowKey) -> bool {
    is_address(key.vip.addr, key.vip.family)
}

/// Whether address `addr` of `family` carries at least one VIP.
#[inline(always)]
#[expect(
    clippy::needless_borrows_for_generic_args,
    reason = "the key goes to the map helper by reference: by value would make another \
              stack copy in the BPF program"
)]
pub(crate) fn is_address(addr: [u8; 16], family: u8) -> bool {
    let addr = VipAddrKey {
        addr,
        family,
        _pad: [0; 3],
    };
    VIP_ADDRS.get_ptr(&addr).is_some()
}
