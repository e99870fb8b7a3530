//! `lb stats --json` agrees with what the clients sent, packet for
//! packet, per backend.
//!
//! What the clients sent is counted on the client side, per flow:
//! - TCP: 150 connections, connection `j` exchanging `1 + j % 5` lines, then closed
//!   gracefully ([`traffic::close_counting`]: FIN, wait for the server's FIN, and only
//!   then read `tcpi_segs_out`, which counts every segment the socket put on the wire:
//!   SYN, handshake ACK, data, pure ACKs, FIN, the last ACK, and retransmissions).
//!   Every one of them goes to the VIP, and conntrack keeps a connection on one
//!   backend, so a backend's expected count is the sum over the connections it
//!   answered.
//! - UDP: 100 flows, flow `j` sending `1 + j % 4` datagrams (one packet each).
//!
//! The allowed slack is zero: the daemon is fresh (its counters start at zero with the
//! program), nothing else in the bed sends to a VIP (static neighbours: no ARP/ND to
//! the VIP; IPv6 housekeeping goes to multicast addresses, which the program passes
//! uncounted), and after the last ACK a closed client socket sends nothing more. The
//! only timing is delivery: the last packets may still be on their way through the
//! veth when the client's call returns, so the counters are polled (for at most 3 s)
//! until they match; the final comparison then repeats after a pause, so late extra
//! packets would still fail the test.
//!
//! Cross-checks: each VIP's `packets` counter equals the sum over its backends and
//! nothing was dropped; `new_flows` equals the number of connections/flows (a
//! retransmitted SYN would be re-picked and count again, so this is asserted when no
//! connection retransmitted); and every backend's interface received at least what the
//! load balancer says it forwarded to it (more is possible: the bridge floods IPv6
//! multicast housekeeping to every port).

use std::time::{Duration, Instant};

use lb::control::Stats;
use lb_tests::{
    daemon::{Daemon, DaemonConfig, backend_addr, vip_text},
    testbed::{backend_name, vip_tcp, vip_udp},
    traffic::{self, Ports, Tally, UdpFlow},
};

use super::{bed, daemon};

const CONNECTIONS: usize = 150;
const UDP_FLOWS: usize = 100;

/// Per-backend `packets` of `vip` in `stats`, for backends 1..=3.
fn per_backend(stats: &Stats, vip: &str) -> [u64; 3] {
    assert!(stats.vips.iter().any(|v| v.vip == vip), "{vip} in lb stats");
    [1, 2, 3].map(|k| stats.backend_packets(vip, &backend_addr(k, false).to_string()))
}

fn counter(stats: &Stats, vip: &str, name: &str) -> u64 {
    stats
        .vips
        .iter()
        .find(|v| v.vip == vip)
        .and_then(|v| v.counters.iter().find(|c| c.name == name))
        .map_or_else(|| panic!("{vip} {name} in lb stats"), |c| c.value)
}

/// Polls `lb stats` until both VIPs' per-backend counts equal the expectations or
/// `timeout` passes; returns the last stats.
fn wait_for_counts(lb: &Daemon<'_>, tcp: [u64; 3], udp: [u64; 3], timeout: Duration) -> Stats {
    let (tcp_vip, udp_vip) = (vip_text(false, true), vip_text(false, false));
    let deadline = Instant::now() + timeout;
    loop {
        let stats = lb.stats().expect("lb stats");
        let done = per_backend(&stats, &tcp_vip) == tcp && per_backend(&stats, &udp_vip) == udp;
        if done || Instant::now() > deadline {
            return stats;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn lb_stats_counts_exactly_the_packets_the_clients_sent() {
    let bed = bed(3);
    let lb = daemon(&bed, &DaemonConfig::equal(1..=3));
    let (tcp_vip, udp_vip) = (vip_text(false, true), vip_text(false, false));
    let link_before: Vec<u64> = bed
        .backends()
        .map(|b| b.link_stats().expect("b0").rx_packets)
        .collect();

    let srcs = traffic::sources(&bed, CONNECTIONS, false, Ports::Kernel);
    let greeted = traffic::connect_all(&bed, &srcs, vip_tcp(false)).expect("connections");
    let mut tcp_sent = [0u64; 3];
    let mut retransmissions = 0;
    let mut connections = Tally::default();
    for (j, mut g) in greeted.into_iter().enumerate() {
        for i in 0..j % 5 {
            let answer = g.conn.exchange(&format!("line {i}")).expect("exchange");
            assert_eq!(answer, g.backend);
        }
        let closed = traffic::close_counting(g.conn)
            .unwrap_or_else(|e| panic!("closing connection {j}: {e}"));
        let k = (1..=3)
            .find(|&k| backend_name(k) == g.backend)
            .expect("a known backend");
        tcp_sent[usize::from(k - 1)] += closed.segments;
        retransmissions += closed.retransmissions;
        connections.add(&g.backend, 1);
    }

    let srcs = traffic::sources(&bed, UDP_FLOWS, false, Ports::Kernel);
    let flows = UdpFlow::open_all(&bed, &srcs, vip_udp(false)).expect("UDP sockets");
    let mut udp_sent = [0u64; 3];
    for (j, flow) in flows.iter().enumerate() {
        for i in 0..=j % 4 {
            let answer = flow
                .exchange(&format!("datagram {i}"))
                .expect("UDP exchange");
            let k = (1..=3)
                .find(|&k| backend_name(k) == answer)
                .expect("a known backend");
            udp_sent[usize::from(k - 1)] += 1;
        }
    }
    eprintln!(
        "clients sent: TCP {tcp_sent:?} segments over {connections} connections \
         ({retransmissions} retransmitted), UDP {udp_sent:?} datagrams"
    );

    let stats = wait_for_counts(&lb, tcp_sent, udp_sent, Duration::from_secs(3));
    assert_eq!(per_backend(&stats, &tcp_vip), tcp_sent, "TCP per backend");
    assert_eq!(per_backend(&stats, &udp_vip), udp_sent, "UDP per backend");
    std::thread::sleep(Duration::from_millis(300));
    let stats = lb.stats().expect("lb stats");
    assert_eq!(
        per_backend(&stats, &tcp_vip),
        tcp_sent,
        "TCP per backend, later"
    );
    assert_eq!(
        per_backend(&stats, &udp_vip),
        udp_sent,
        "UDP per backend, later"
    );
    eprintln!("lb stats agrees: TCP {tcp_sent:?}, UDP {udp_sent:?}");

    for (vip, sent, flows) in [
        (&tcp_vip, tcp_sent, CONNECTIONS),
        (&udp_vip, udp_sent, UDP_FLOWS),
    ] {
        assert_eq!(
            counter(&stats, vip, "packets"),
            sent.iter().sum::<u64>(),
            "{vip}"
        );
        assert_eq!(counter(&stats, vip, "drops"), 0, "{vip}");
        let new_flows = counter(&stats, vip, "new_flows");
        let flows = u64::try_from(flows).expect("small");
        if retransmissions == 0 {
            assert_eq!(new_flows, flows, "{vip}");
        } else {
            assert!(new_flows >= flows, "{vip}: {new_flows} new flows");
        }
    }

    for (b, before) in bed.backends().zip(&link_before) {
        let received = b.link_stats().expect("b0").rx_packets - before;
        let i = usize::from(b.k() - 1);
        let forwarded = tcp_sent[i] + udp_sent[i];
        eprintln!(
            "{}: forwarded {forwarded}, interface received {received}",
            b.name()
        );
        assert!(
            received >= forwarded,
            "{}: {received} < {forwarded}",
            b.name()
        );
    }
}
