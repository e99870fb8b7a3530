//! Issue 16's paths across restarts that adopt the pinned datapath (issue 18).
//!
//! The rare paths' program, its program array (`RARE_PROGS`), the fragment map and
//! the source-prefix maps are pinned with the rest of the datapath. So:
//! 1. while no daemon runs, the program left on the interface still tail-calls the
//!    rare paths (the pinned program array keeps its entry), and a restarted daemon
//!    that adopts the datapath puts its own rare program in the adopted array: a
//!    fragmented UDP datagram reaches one backend whole, and a router's "fragmentation
//!    needed" about that flow reaches the same backend, before, without and after;
//! 2. a source list narrowed, or removed, in the file while no daemon ran is what the
//!    adopting start enforces: it reads the adopted lists back and writes the change
//!    against them (a stale prefix would let removed clients in, a stale list would
//!    keep refusing everyone else).

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use lb_tests::{
    daemon::{Daemon, DaemonConfig, Stop, vip_text},
    testbed::{CLIENT_IFACE, TestBed, client, vip_udp},
};

use super::{
    daemon,
    pmtu::{counter, learned_mtu, router_frag_needed},
};

/// UDP data bytes of the fragmented datagram: three fragments on the client's
/// 1,480-byte route to the VIPs.
const BIG: usize = 3000;

/// Sends a datagram of [`BIG`] bytes from client address `i` (port `port`) to the
/// UDP VIP, then a router's "fragmentation needed" about the flow; asserts that one
/// backend answered the whole datagram and that the same backend's kernel learned
/// the path MTU to the client. Returns that backend.
fn fragments_and_icmp_reach_the_owner(bed: &TestBed, i: usize, port: u16) -> u8 {
    let src: SocketAddr = (bed.client_addr(i, false), port).into();
    let owner = bed
        .udp_exchange(src, vip_udp(false), &"f".repeat(BIG))
        .expect("the fragmented datagram is answered: every fragment reached one backend");
    let k: u8 = owner
        .strip_prefix('b')
        .and_then(|n| n.parse().ok())
        .expect("a backend name");
    bed.client_ns()
        .enter(|| client::send_frame(CLIENT_IFACE, &router_frag_needed(src)))
        .expect("enter")
        .expect("send the router's ICMP");
    let deadline = Instant::now() + Duration::from_secs(5);
    while learned_mtu(bed.backend_ns(k), src.ip()).is_none() {
        assert!(
            Instant::now() < deadline,
            "backend {k} did not learn the path MTU to {}",
            src.ip()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    k
}

#[test]
fn the_rare_paths_run_without_a_daemon_and_after_an_adopting_restart() {
    let bed = super::bed(3);
    let mut lb = daemon(&bed, &DaemonConfig::equal(1..=3));
    fragments_and_icmp_reach_the_owner(&bed, 0, 43000);
    lb.halt(Stop::Term);
    fragments_and_icmp_reach_the_owner(&bed, 1, 43001);
    lb.resume(&[]).expect("restart");
    assert!(
        lb.log().contains("adopting the datapath"),
        "the restart adopts: {}",
        lb.log()
    );
    fragments_and_icmp_reach_the_owner(&bed, 2, 43002);
    // The counters were adopted too: every round's forwarded ICMP and later fragments.
    assert_eq!(counter(&lb, "tx_icmp_forward"), 3);
    assert!(
        counter(&lb, "tx_fragment") >= 6,
        "two later fragments per datagram"
    );
    assert_eq!(counter(&lb, "drop_fragment"), 0);
}

/// Client address `i` as a /32 in a TOML array.
fn listed(bed: &TestBed, clients: &[usize]) -> String {
    let items: Vec<String> = clients
        .iter()
        .map(|&i| format!("\"{}/32\"", bed.client_addr(i, false)))
        .collect();
    format!("allowed_sources = [{}]", items.join(", "))
}

/// Whether client address `i` gets an answer from the UDP VIP.
fn served(bed: &TestBed, i: usize) -> bool {
    let src = SocketAddr::new(bed.client_addr(i, false), 0);
    bed.udp_exchange(src, vip_udp(false), "hello").is_ok()
}

#[test]
fn a_source_list_changed_while_no_daemon_runs_is_enforced_by_the_adopting_start() {
    let bed = super::bed(2);
    let vip = vip_text(false, false);
    let with_list = |clients: &[usize]| {
        let mut cfg = DaemonConfig::equal(1..=2);
        if !clients.is_empty() {
            cfg.vip_keys.push((vip.clone(), listed(&bed, clients)));
        }
        cfg
    };
    let mut lb: Daemon<'_> = daemon(&bed, &with_list(&[0, 1]));
    assert_eq!(
        [served(&bed, 0), served(&bed, 1), served(&bed, 2)],
        [true, true, false]
    );
    // Narrowed while no daemon runs: client 1 is refused from the adopting start on.
    lb.halt(Stop::Term);
    lb.write_config(&with_list(&[0])).expect("config");
    lb.resume(&[]).expect("restart");
    assert!(lb.log().contains("adopting the datapath"), "{}", lb.log());
    assert_eq!(
        [served(&bed, 0), served(&bed, 1), served(&bed, 2)],
        [true, false, false]
    );
    // Removed: every client is served again.
    lb.halt(Stop::Term);
    lb.write_config(&with_list(&[])).expect("config");
    lb.resume(&[]).expect("restart");
    assert_eq!(
        [served(&bed, 0), served(&bed, 1), served(&bed, 2)],
        [true, true, true]
    );
    assert!(counter(&lb, "drop_source_refused") >= 3);
}
