//! Flows as the data plane sees them: building the conntrack key of a client → VIP
//! flow from socket addresses, and predicting the Maglev slot the data plane will pick
//! for it (the same [`lb_common::hash_fields::table_hash`] the XDP program runs).

use std::net::{IpAddr, SocketAddr};

use lb_common::{
    hash::flow_hash,
    hash_fields::{HashFields, table_hash},
    types::{FAMILY_V4, FAMILY_V6, FlowKey, VipKey},
};

/// The 16-byte map form of an address (IPv4 in the first four bytes) and its family.
pub fn addr_bytes(addr: IpAddr) -> ([u8; 16], u8) {
    match addr {
        IpAddr::V4(v4) => {
            let mut bytes = [0u8; 16];
            bytes[..4].copy_from_slice(&v4.octets());
            (bytes, FAMILY_V4)
        }
        IpAddr::V6(v6) => (v6.octets(), FAMILY_V6),
    }
}

/// The address of map bytes `addr` of `family` (the inverse of [`addr_bytes`]);
/// `None` for an unknown family.
pub fn ip_of_bytes(addr: [u8; 16], family: u8) -> Option<IpAddr> {
    match family {
        FAMILY_V4 => Some(IpAddr::from([addr[0], addr[1], addr[2], addr[3]])),
        FAMILY_V6 => Some(IpAddr::from(addr)),
        _ => None,
    }
}

/// The conntrack key of the flow `client` → `vip` over IP protocol `proto`.
///
/// Returns `None` when the two addresses are of different families.
pub fn flow_key(client: SocketAddr, vip: SocketAddr, proto: u8) -> Option<FlowKey> {
    let (src, src_family) = addr_bytes(client.ip());
    let (dst, dst_family) = addr_bytes(vip.ip());
    (src_family == dst_family).then_some(FlowKey {
        vip: VipKey {
            addr: dst,
            port: vip.port().to_be(),
            proto,
            family: dst_family,
        },
        src,
        sport: client.port().to_be(),
        _pad: [0; 2],
    })
}

/// The slot (`0..table_size`) the data plane picks for `key` on a conntrack miss, with
/// hash seed `seed`, for a VIP hashing the 5-tuple (the default hash fields). `None`
/// for a zero table size.
pub fn slot_of(key: &FlowKey, seed: u32, table_size: u32) -> Option<u32> {
    (table_size != 0).then(|| flow_hash(key, seed) % table_size)
}

/// The slot (`0..table_size`) the data plane picks for `key` on a conntrack miss, with
/// hash seed `seed`, for a VIP with hash fields `fields`: `table_hash % table_size`
/// ([`lb_common::hash_fields::table_hash`]). `None` for a zero table size.
pub fn table_slot_of(key: &FlowKey, fields: HashFields, seed: u32, table_size: u32) -> Option<u32> {
    (table_size != 0).then(|| table_hash(key, fields.flags(), seed) % table_size)
}

#[cfg(test)]
mod tests {
    use lb_common::types::PROTO_TCP;

    use super::*;

    #[test]
    fn keys_carry_wire_order_ports_and_family() {
        let key = flow_key(
            "192.0.2.10:40000".parse().unwrap(),
            "203.0.113.10:80".parse().unwrap(),
            PROTO_TCP,
        )
        .unwrap();
        assert_eq!(key.vip.family, FAMILY_V4);
        assert_eq!(key.sport.to_ne_bytes(), 40000u16.to_be_bytes());
        assert_eq!(&key.vip.addr[..4], &[203, 0, 113, 10]);
        assert!(key.vip.addr[4..].iter().all(|b| *b == 0));
        assert!(
            flow_key(
                "192.0.2.10:1".parse().unwrap(),
                "[2001:db8::1]:80".parse().unwrap(),
                PROTO_TCP
            )
            .is_none()
        );
        assert_eq!(slot_of(&key, 0, 0), None);
        assert!(slot_of(&key, 0, 7).unwrap() < 7);
        let five = HashFields::default();
        assert_eq!(table_slot_of(&key, five, 3, 1009), slot_of(&key, 3, 1009));
        let src = HashFields {
            fields: lb_common::hash_fields::Fields::Src,
            prefix: 0,
            affinity_secs: 0,
        };
        let other_port = flow_key(
            "192.0.2.10:40001".parse().unwrap(),
            "203.0.113.10:80".parse().unwrap(),
            PROTO_TCP,
        )
        .unwrap();
        assert_eq!(
            table_slot_of(&key, src, 3, 1009),
            table_slot_of(&other_port, src, 3, 1009)
        );
        assert_eq!(table_slot_of(&key, src, 3, 0), None);
    }
}
