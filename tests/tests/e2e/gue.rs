//! GUE end to end (issue 31, stage 1): every VIP with `encap = "gue"`, every backend
//! decapsulating GUE only (its XDP program passes IP-in-IP frames untouched, and its
//! stack drops them), so a connection that works came by GUE. 150 TCP connections per
//! family, two lines each answered by the connection's backend, each backend a fair
//! part, and UDP flows of both families answered.

use lb_tests::{
    daemon::{DaemonConfig, vip_text},
    testbed::{backend_name, decap::Accept, vip_tcp, vip_udp},
    traffic::{self, Ports, Tally, UdpFlow},
};

use super::{bed, daemon};

const CONNECTIONS: usize = 150;

#[test]
fn gue_vips_serve_tcp_and_udp_through_gue_only_backends() {
    let bed = bed(3);
    let mut config = DaemonConfig::equal(1..=3);
    for v6 in [false, true] {
        for tcp in [true, false] {
            config
                .vip_keys
                .push((vip_text(v6, tcp), "encap = \"gue\"".to_owned()));
        }
    }
    let _lb = daemon(&bed, &config);
    for k in 1..=3 {
        bed.backend(k)
            .set_decap_accepting(Accept::gue_only())
            .expect("GUE-only decapsulation");
    }
    for v6 in [false, true] {
        let srcs = traffic::sources(&bed, CONNECTIONS, v6, Ports::Kernel);
        let mut greeted = traffic::connect_all(&bed, &srcs, vip_tcp(v6)).expect("connections");
        for (j, g) in greeted.iter_mut().enumerate() {
            for i in 0..2 {
                let answer = g
                    .conn
                    .exchange(&format!("line {i}"))
                    .unwrap_or_else(|e| panic!("connection {j} (IPv6: {v6}): {e}"));
                assert_eq!(answer, g.backend, "connection {j} moved");
            }
        }
        let tally = Tally::of(greeted.iter().map(|g| g.backend.as_str()));
        eprintln!("GUE connections (IPv6: {v6}): {tally}");
        for k in 1..=3 {
            // A fair part: at least 20% (the ideal is 33%).
            assert!(tally.share(&backend_name(k)) >= 0.20, "{tally}");
        }
        let srcs = traffic::sources(&bed, 20, v6, Ports::Kernel);
        let udp = UdpFlow::open_all(&bed, &srcs, vip_udp(v6)).expect("UDP sockets");
        for (j, flow) in udp.iter().enumerate() {
            let answer = flow
                .exchange("q")
                .unwrap_or_else(|e| panic!("UDP flow {j} (IPv6: {v6}): {e}"));
            assert!(["b1", "b2", "b3"].contains(&answer.as_str()), "{answer}");
        }
    }
}
