//! Packet builders for fixtures, using etherparse (no hand-written headers).
//!
//! Addresses follow ../shared/cases F-1: client 192.0.2.10 / 2001:db8:c::10, LB MAC
//! 02:00:00:00:00:01, client MAC 02:00:00:00:00:0a.

use etherparse::PacketBuilder;

/// MAC of the load balancer's interface.
pub const LB_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// MAC of the default client.
pub const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];

/// An Ethernet + IPv4 + TCP SYN frame from `src:sport` to `dst:dport` with `payload`.
pub fn tcp4_syn(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16, payload: &[u8]) -> Vec<u8> {
    let builder = PacketBuilder::ethernet2(CLIENT_MAC, LB_MAC)
        .ipv4(src, dst, 64)
        .tcp(sport, dport, 1000, 64240)
        .syn();
    let mut frame = Vec::with_capacity(builder.size(payload.len()));
    builder
        .write(&mut frame, payload)
        .expect("writing to a Vec cannot fail");
    frame
}
