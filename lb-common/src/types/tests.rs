// SPDX-License-Identifier: MIT OR Apache-2.0
//! Tests of the shared types.

use super::{
    FAMILY_V4, FlowKey, PROTO_TCP, SynEntry, VIP_FAST_PATH, VIP_TABLE_B, VipCacheSlot, VipEntry,
    VipInfo, VipKey,
};

fn entry(key: FlowKey, hash: u32, backend_id: u16, epoch: u32, syn_ns: u64) -> SynEntry {
    SynEntry {
        key,
        backend_id,
        vip_id: 0,
        epoch,
        tag: SynEntry::tag_of(hash, backend_id, 0, epoch, syn_ns, 77),
        syn_ns,
        seq: 77,
    }
}

#[test]
fn a_syn_slot_mixing_two_writers_fields_reads_as_empty() {
    let a_key = FlowKey::from_words([1, 0, 0, 0, 0x0400_0600, 9, 0, 0, 0, 40_000]);
    let b_key = FlowKey::from_words([1, 0, 0, 0, 0x0400_0600, 9, 0, 0, 0, 40_001]);
    let (ha, hb) = (0x1234_4000, 0x9876_4000);
    let a = entry(a_key, ha, 2, 7, 1_000_000);
    let b = entry(b_key, hb, 3, 7, 1_000_000);
    assert!(a.holds(&a_key, ha) && b.holds(&b_key, hb));
    // Every mix of a's key with some of b's other fields (and either tag).
    for mask in 1u32..32 {
        let mut m = a;
        if mask & 1 != 0 {
            m.backend_id = b.backend_id;
        }
        if mask & 2 != 0 {
            m.vip_id = b.vip_id;
        }
        if mask & 4 != 0 {
            m.epoch = b.epoch;
        }
        if mask & 8 != 0 {
            m.syn_ns = b.syn_ns;
        }
        if mask & 16 != 0 {
            m.tag = b.tag;
        }
        let same_values = m.backend_id == a.backend_id
            && m.vip_id == a.vip_id
            && m.epoch == a.epoch
            && m.syn_ns == a.syn_ns;
        assert_eq!(
            m.holds(&a_key, ha),
            same_values && m.tag == a.tag,
            "mask {mask:#b}"
        );
    }
    assert!(!a.holds(&b_key, hb), "another flow's key");
}

#[test]
fn a_v4_conntrack_key_widens_back_to_its_flow_key() {
    let key = FlowKey {
        vip: VipKey {
            addr: [10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            port: 80u16.to_be(),
            proto: PROTO_TCP,
            family: FAMILY_V4,
        },
        src: [192, 0, 2, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        sport: 40_000u16.to_be(),
        _pad: [0; 2],
    };
    assert_eq!(key.v4().widen(), key);
}

fn vip_key(last: u8, port: u16) -> VipKey {
    let mut addr = [0; 16];
    addr[..4].copy_from_slice(&[10, 0, 0, last]);
    VipKey {
        addr,
        port: port.to_be(),
        proto: PROTO_TCP,
        family: FAMILY_V4,
    }
}

#[test]
fn a_vip_cache_slot_serves_only_what_vip_info_confirms() {
    let key = vip_key(1, 80);
    let entry = VipEntry {
        vip_id: 3,
        flags: VIP_FAST_PATH | VIP_TABLE_B,
        epoch: 41,
    };
    let slot = VipCacheSlot::of(&entry);
    let info = VipInfo {
        key,
        live: 1,
        epoch: 41,
    };
    let read = |slot: &VipCacheSlot, info: &VipInfo, key: &VipKey| {
        VipCacheSlot::entry_for(slot.vip_id, slot.state, key, info)
    };
    assert_eq!(read(&slot, &info, &key), Some(entry));
    // Another VIP's packet with the same filter bit, or a VIP id no longer live.
    assert_eq!(read(&slot, &info, &vip_key(1, 81)), None);
    assert_eq!(read(&slot, &VipInfo { live: 0, ..info }, &key), None);
    // A table switch in progress: VIP_INFO already names the next epoch.
    assert_eq!(read(&slot, &VipInfo { epoch: 42, ..info }, &key), None);
    // A zeroed slot, against a live VIP id 0 without a table (epoch 0).
    let zero_info = VipInfo {
        key,
        live: 1,
        epoch: 0,
    };
    assert_eq!(read(&VipCacheSlot::default(), &zero_info, &key), None);
    // A slot half-way from another VIP (its id written, its state not yet).
    let other = VipCacheSlot::of(&VipEntry {
        vip_id: 9,
        flags: 0,
        epoch: 17,
    });
    let half = VipCacheSlot { vip_id: 3, ..other };
    assert_eq!(read(&half, &info, &key), None);
}
