//! The IPv6 VIP end to end. 300 TCP connections from 16 IPv6 client
//! addresses to `[2001:db8:f::10]:80` (IPv6-in-IPv6 to the backends' IPv6 addresses,
//! replies straight from the backends), three lines each; every line is answered by
//! the connection's backend, each backend gets a fair part, each connection went
//! where `lb flow` says, and `lb stats` accounts the packets to the IPv6 VIP's
//! backends, none to the IPv4 VIP. A few IPv6 UDP flows are answered too.

use lb_tests::{
    daemon::{DaemonConfig, backend_addr, backend_of, vip_text},
    testbed::{backend_name, vip_tcp, vip_udp},
    traffic::{self, Ports, Tally, UdpFlow},
};

use super::{bed, daemon};

const CONNECTIONS: usize = 300;

#[test]
fn ipv6_vip_serves_tcp_end_to_end() {
    let bed = bed(3);
    let lb = daemon(&bed, &DaemonConfig::equal(1..=3));
    let vip = vip_text(true, true);
    let srcs = traffic::sources(&bed, CONNECTIONS, true, Ports::Kernel);
    let mut greeted = traffic::connect_all(&bed, &srcs, vip_tcp(true)).expect("connections");
    for (j, g) in greeted.iter_mut().enumerate() {
        for i in 0..2 {
            let answer = g
                .conn
                .exchange(&format!("line {i}"))
                .unwrap_or_else(|e| panic!("connection {j}: {e}"));
            assert_eq!(answer, g.backend, "connection {j} moved");
        }
        let src = g.conn.local_addr().expect("local address");
        assert!(src.is_ipv6());
        let flow = lb.flow(&vip, src).expect("lb flow");
        let pinned = flow.pinned.as_ref().map(|p| p.backend.as_str());
        assert_eq!(
            pinned.and_then(backend_of).map(backend_name).as_deref(),
            Some(g.backend.as_str()),
            "{src}: {flow:?}"
        );
        assert!(
            flow.pinned.as_ref().is_some_and(|p| p.established),
            "{flow:?}"
        );
    }
    let tally = Tally::of(greeted.iter().map(|g| g.backend.as_str()));
    eprintln!("IPv6 connections: {tally}");
    for k in 1..=3 {
        // A fair part: at least 20% (the ideal is 33%; 300 draws put 20% about five
        // standard deviations away).
        assert!(tally.share(&backend_name(k)) >= 0.20, "{tally}");
        assert_eq!(
            bed.backend(k).stats().tcp_messages,
            3 * tally.get(&backend_name(k)),
            "b{k}'s server"
        );
    }

    let srcs = traffic::sources(&bed, 30, true, Ports::Kernel);
    let udp = UdpFlow::open_all(&bed, &srcs, vip_udp(true)).expect("UDP sockets");
    for (j, flow) in udp.iter().enumerate() {
        let answer = flow
            .exchange("q")
            .unwrap_or_else(|e| panic!("UDP flow {j}: {e}"));
        assert!(["b1", "b2", "b3"].contains(&answer.as_str()), "{answer}");
    }

    let stats = lb.stats().expect("lb stats");
    let packets =
        |vip: &str, k: u8, v6: bool| stats.backend_packets(vip, &backend_addr(k, v6).to_string());
    for k in 1..=3 {
        // At least SYN, ACK and three data segments per connection.
        let v6 = packets(&vip, k, true);
        assert!(
            v6 >= 5 * tally.get(&backend_name(k)),
            "b{k}: {v6} packets on the IPv6 VIP for {} connections",
            tally.get(&backend_name(k))
        );
        assert_eq!(packets(&vip_text(false, true), k, false), 0);
    }
}
