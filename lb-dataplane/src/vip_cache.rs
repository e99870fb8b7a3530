//! `VIP_CACHE` from userspace: which VIP holds each slot, and the slots' writes through
//! the map's mmap (`lb_common::maps::VIP_CACHE`, `lb_common::types::VipCacheSlot`).
//!
//! A VIP's slot is its key's filter bit (`lb_common::hash::vip_filter_bit`). The first
//! VIP to want a slot holds it until its entry is removed; another VIP with the same bit
//! is not cached, and its packets look `VIPS` up. Each write is one aligned store (the
//! id, then the flags and epoch as one 8-byte word). A packet trusts a slot only when
//! `VIP_INFO` confirms it (`VipCacheSlot::entry_for`), so no order of these stores
//! against the program's loads can give a packet another VIP's or a half-written entry.

use std::{
    collections::HashMap,
    io,
    os::fd::BorrowedFd,
    sync::atomic::{AtomicU32, AtomicU64, Ordering},
};

use lb_common::{
    hash::vip_filter_bit,
    maps::VIP_CACHE_SLOTS,
    types::{VipCacheSlot, VipEntry, VipKey},
};

use crate::table_map::Mapping;

/// The writable mapping of `VIP_CACHE` and the slots' holders.
pub(crate) struct VipCache {
    mapping: Mapping<VipCacheSlot>,
    /// Slot → the VIP id that holds it.
    holders: HashMap<u32, u32>,
}

impl VipCache {
    /// Maps the `VIP_CACHE` array `fd` (of `VIP_CACHE_SLOTS` slots), writable.
    ///
    /// # Errors
    /// When the map cannot be mapped (not mmapable, or smaller).
    pub(crate) fn new(fd: BorrowedFd<'_>) -> io::Result<Self> {
        Ok(Self {
            mapping: Mapping::new(fd, VIP_CACHE_SLOTS as usize, true)?,
            holders: HashMap::new(),
        })
    }

    /// Caches `entry` (the `VIPS` entry of `key`, just written) in `key`'s slot, unless
    /// another VIP holds the slot. Returns whether it is cached.
    pub(crate) fn publish(&mut self, key: &VipKey, entry: &VipEntry) -> bool {
        let bit = vip_filter_bit(key);
        let holder = *self.holders.entry(bit).or_insert(entry.vip_id);
        if holder != entry.vip_id {
            return false;
        }
        self.store(bit, &VipCacheSlot::of(entry));
        true
    }

    /// Empties `key`'s slot if VIP id `vip_id` holds it (its `VIPS` entry is about to go).
    pub(crate) fn withdraw(&mut self, key: &VipKey, vip_id: u32) {
        let bit = vip_filter_bit(key);
        if self.holders.get(&bit) == Some(&vip_id) {
            self.holders.remove(&bit);
            self.store(bit, &VipCacheSlot::default());
        }
    }

    /// Whether VIP id `vip_id` holds `key`'s slot.
    pub(crate) fn holds(&self, key: &VipKey, vip_id: u32) -> bool {
        self.holders.get(&vip_filter_bit(key)) == Some(&vip_id)
    }

    /// Empties every slot (adoption: the entries are cached again from `VIPS`).
    pub(crate) fn clear(&mut self) {
        self.holders.clear();
        for bit in 0..VIP_CACHE_SLOTS {
            self.store(bit, &VipCacheSlot::default());
        }
    }

    /// VIPs cached.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.holders.len()
    }

    /// `key`'s slot as the program reads it (tests).
    #[cfg(feature = "test-harness")]
    pub(crate) fn slot(&self, key: &VipKey) -> VipCacheSlot {
        self.mapping.cells()[vip_filter_bit(key) as usize]
    }

    /// Writes `slot` into `key`'s slot, whoever holds it (tests).
    #[cfg(feature = "test-harness")]
    pub(crate) fn overwrite(&mut self, key: &VipKey, slot: &VipCacheSlot) {
        self.store(vip_filter_bit(key), slot);
    }

    /// Writes slot `bit` with two aligned stores: the id, then the state word.
    fn store(&mut self, bit: u32, slot: &VipCacheSlot) {
        let Some(cell) = self.mapping.cells_mut().get_mut(bit as usize) else {
            return;
        };
        // SAFETY: both fields are naturally aligned within the 8-byte aligned slot of a
        // live shared mapping; the program only loads them.
        unsafe {
            AtomicU32::from_ptr(&raw mut cell.vip_id).store(slot.vip_id, Ordering::Relaxed);
            AtomicU64::from_ptr(&raw mut cell.state).store(slot.state, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use lb_common::types::{FAMILY_V4, PROTO_TCP};

    use super::*;

    fn key(v4: [u8; 4]) -> VipKey {
        let mut addr = [0; 16];
        addr[..4].copy_from_slice(&v4);
        VipKey {
            addr,
            port: 80u16.to_be(),
            proto: PROTO_TCP,
            family: FAMILY_V4,
        }
    }

    /// Two keys with the same filter bit (the bit folds the address's halves by XOR).
    fn colliding() -> (VipKey, VipKey) {
        let (a, b) = (key([10, 0, 0, 1]), key([0, 0, 10, 1]));
        assert_eq!(vip_filter_bit(&a), vip_filter_bit(&b));
        (a, b)
    }

    fn entry(vip_id: u32, epoch: u32) -> VipEntry {
        VipEntry {
            vip_id,
            flags: 2,
            epoch,
        }
    }

    /// A memfd of the map's size stands in for the map (same layout, no kernel).
    fn cache() -> VipCache {
        use std::os::fd::{AsFd as _, FromRawFd as _, OwnedFd};
        let bytes = VIP_CACHE_SLOTS as usize * size_of::<VipCacheSlot>();
        // SAFETY: creates a new memfd, owned below.
        let raw = unsafe { libc::memfd_create(c"vip_cache".as_ptr(), 0) };
        assert!(raw >= 0, "memfd_create");
        // SAFETY: `raw` is a new descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let file = std::fs::File::from(fd);
        file.set_len(bytes as u64).expect("size the memfd");
        VipCache::new(file.as_fd()).expect("map")
    }

    #[test]
    fn the_first_vip_of_a_slot_holds_it_until_withdrawn() {
        let (a, b) = colliding();
        let mut cache = cache();
        let bit = vip_filter_bit(&a) as usize;
        assert!(cache.publish(&a, &entry(1, 5)));
        assert!(!cache.publish(&b, &entry(2, 6)), "b collides with a");
        assert_eq!(cache.mapping.cells()[bit], VipCacheSlot::of(&entry(1, 5)));
        // A table switch rewrites the holder's slot.
        assert!(cache.publish(&a, &entry(1, 7)));
        assert_eq!(cache.mapping.cells()[bit].state >> 32, 7);
        // Another VIP's withdrawal leaves it; the holder's empties it.
        cache.withdraw(&b, 2);
        assert_eq!(cache.len(), 1);
        cache.withdraw(&a, 1);
        assert_eq!(cache.mapping.cells()[bit], VipCacheSlot::default());
        assert!(cache.publish(&b, &entry(2, 8)), "free again");
        cache.clear();
        assert_eq!(cache.len(), 0);
        assert!(
            cache
                .mapping
                .cells()
                .iter()
                .all(|s| *s == VipCacheSlot::default())
        );
    }
}
