//! End-to-end tests of the test bed itself (privileged): real TCP and UDP sockets from
//! the client namespace through the XDP load balancer (driven directly with
//! [`BedLb`], FIB next hop) to backends that decapsulate and answer straight to the
//! client; two beds at once; teardown (also on panic); a backend added at run time;
//! 1,100 concurrent connections; and the veth XDP_TX loss without a peer program
//! (BR-24 in `docs/src/operations/failure-scenarios.md`).

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    process::Command,
    time::{Duration, Instant},
};

use lb_common::stats::Reason;
use lb_dataplane::Dataplane as _;
use lb_tests::testbed::{
    LinkStats, TestBed, TestBedOptions, backend_name, client, lb::BedLb, vip_tcp, vip_udp,
};

fn bed(backends: u8) -> TestBed {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    TestBed::new(TestBedOptions {
        backends,
        ..TestBedOptions::default()
    })
    .expect("build the test bed")
}

/// Listed namespaces (`ip netns list`).
fn netns_list() -> String {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn listed(list: &str, name: &str) -> bool {
    list.lines()
        .any(|l| l.split_whitespace().next() == Some(name))
}

fn delta(after: LinkStats, before: LinkStats) -> (u64, u64) {
    (
        after.rx_packets - before.rx_packets,
        after.tx_packets - before.tx_packets,
    )
}

#[test]
fn ipv4_tcp_flows_spread_over_backends_and_replies_bypass_the_lb() {
    let started = Instant::now();
    let bed = bed(3);
    let lb = BedLb::attach(&bed).expect("attach the load balancer");
    let lb0_before = bed.lb_link_stats().expect("lb0");
    let c0_before = bed.client_link_stats().expect("c0");
    let b0_before: Vec<LinkStats> = bed
        .backends()
        .map(|b| b.link_stats().expect("b0"))
        .collect();
    let encap_before = lb.dp().global_stats().expect("stats").get(Reason::TxEncap);

    const FLOWS: u16 = 200;
    let clients = bed.client_count();
    let timeout = bed.options().io_timeout;
    let answers: Vec<String> = bed
        .client_ns()
        .enter(|| {
            (0..FLOWS)
                .map(|j| {
                    let src = SocketAddr::new(
                        bed.client_addr(usize::from(j) % clients, false),
                        31_000 + j,
                    );
                    client::tcp_exchange(src, vip_tcp(false), "hello", timeout)
                        .unwrap_or_else(|e| panic!("flow {j} from {src}: {e}"))
                })
                .collect()
        })
        .expect("enter the client namespace");

    let mut per_backend: BTreeMap<String, u64> = BTreeMap::new();
    for answer in &answers {
        *per_backend.entry(answer.clone()).or_default() += 1;
    }
    for b in bed.backends() {
        let got = per_backend.get(&b.name()).copied().unwrap_or(0);
        assert!(got > 0, "{} got no flow: {per_backend:?}", b.name());
        let stats = b.stats();
        assert_eq!(stats.tcp_connections, got, "{}: {stats:?}", b.name());
        assert_eq!(stats.tcp_messages, got, "{}: {stats:?}", b.name());
    }
    assert_eq!(per_backend.values().sum::<u64>(), u64::from(FLOWS));

    // Direct server return: lb0 receives only what the client sends (plus a little
    // IPv6 multicast housekeeping of the segment); the client receives what the
    // backends send.
    std::thread::sleep(Duration::from_millis(100));
    let (lb0_rx, lb0_tx) = delta(bed.lb_link_stats().expect("lb0"), lb0_before);
    let (c0_rx, c0_tx) = delta(bed.client_link_stats().expect("c0"), c0_before);
    let backends_tx: u64 = bed
        .backends()
        .zip(&b0_before)
        .map(|(b, before)| delta(b.link_stats().expect("b0"), *before).1)
        .sum();
    let encapsulated = lb.dp().global_stats().expect("stats").get(Reason::TxEncap) - encap_before;
    eprintln!(
        "per backend {per_backend:?}; client tx {c0_tx} rx {c0_rx}; lb0 rx {lb0_rx} \
         tx {lb0_tx}; LB encapsulated {encapsulated}; backends tx {backends_tx}"
    );
    const SLACK: u64 = 30;
    assert!(c0_tx >= 4 * u64::from(FLOWS), "client sent {c0_tx}");
    assert!(
        lb0_rx <= c0_tx + SLACK,
        "lb0 saw {lb0_rx} > client's {c0_tx}"
    );
    assert!(
        encapsulated + SLACK >= c0_tx,
        "LB encapsulated {encapsulated} of {c0_tx}"
    );
    // What lb0 sends is what the program sent back with XDP_TX.
    assert!(lb0_tx <= encapsulated + SLACK, "lb0 sent {lb0_tx}");
    assert!(c0_rx >= 3 * u64::from(FLOWS), "client received {c0_rx}");
    assert!(
        backends_tx + SLACK >= c0_rx,
        "backends sent {backends_tx}, client got {c0_rx}"
    );
    eprintln!("took {:?}", started.elapsed());
}

#[test]
fn ipv4_udp_and_ipv6_tcp_and_udp_are_answered() {
    let bed = bed(3);
    let _lb = BedLb::attach(&bed).expect("attach the load balancer");
    let names: Vec<String> = bed.backends().map(|b| b.name()).collect();
    let mut seen: BTreeMap<&str, BTreeMap<String, u32>> = BTreeMap::new();
    for j in 0..48u16 {
        let i = usize::from(j) % bed.client_count();
        let udp4 = SocketAddr::new(bed.client_addr(i, false), 32_000 + j);
        let udp6 = SocketAddr::new(bed.client_addr(i, true), 32_000 + j);
        let tcp6 = SocketAddr::new(bed.client_addr(i, true), 33_000 + j);
        for (what, answer) in [
            ("udp4", bed.udp_exchange(udp4, vip_udp(false), "q")),
            ("udp6", bed.udp_exchange(udp6, vip_udp(true), "q")),
            ("tcp6", bed.tcp_exchange(tcp6, vip_tcp(true), "q")),
        ] {
            let answer = answer.unwrap_or_else(|e| panic!("{what} {j}: {e:#}"));
            assert!(names.contains(&answer), "{what}: {answer}");
            *seen.entry(what).or_default().entry(answer).or_default() += 1;
        }
    }
    eprintln!("{seen:?}");
    for (what, per_backend) in &seen {
        assert!(
            per_backend.len() >= 2,
            "{what} reached only {per_backend:?}"
        );
    }
    let total: u64 = bed.backends().map(|b| b.stats().udp_messages).sum();
    assert_eq!(total, 96);
}

#[test]
fn two_beds_at_once_work_independently() {
    let a = bed(2);
    let b = bed(3);
    assert!(
        a.namespace_names()
            .iter()
            .all(|n| !b.namespace_names().contains(n))
    );
    let _lb_a = BedLb::attach(&a).expect("attach A");
    let _lb_b = BedLb::attach(&b).expect("attach B");
    for j in 0..30u16 {
        let src = SocketAddr::new(a.client_addr(0, false), 34_000 + j);
        let from_a = a.tcp_exchange(src, vip_tcp(false), "a").expect("A");
        let from_b = b.tcp_exchange(src, vip_tcp(false), "b").expect("B");
        assert!(["b1", "b2"].contains(&from_a.as_str()), "{from_a}");
        assert!(["b1", "b2", "b3"].contains(&from_b.as_str()), "{from_b}");
    }
    let served = |bed: &TestBed| -> u64 { bed.backends().map(|x| x.stats().tcp_messages).sum() };
    assert_eq!(served(&a), 30);
    assert_eq!(served(&b), 30);
    drop(a);
    let src = SocketAddr::new(b.client_addr(1, true), 0);
    b.udp_exchange(src, vip_udp(true), "still there")
        .expect("B works after A is gone");
}

#[test]
fn teardown_removes_every_namespace_also_on_panic() {
    let bed = bed(2);
    let names = bed.namespace_names();
    assert_eq!(names.len(), 5);
    let list = netns_list();
    assert!(
        names.iter().all(|n| listed(&list, n)),
        "{names:?} in {list}"
    );
    drop(bed);
    let list = netns_list();
    assert!(!names.iter().any(|n| listed(&list, n)), "left over: {list}");

    let mut names = Vec::new();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let bed = self::bed(1);
        names = bed.namespace_names();
        bed.add_backend().expect("second backend");
        names = bed.namespace_names();
        panic!("a failing test");
    }));
    assert!(panicked.is_err());
    assert_eq!(names.len(), 5);
    let list = netns_list();
    assert!(!names.iter().any(|n| listed(&list, n)), "left over: {list}");
}

#[test]
fn a_backend_added_at_runtime_takes_new_flows() {
    let bed = bed(3);
    let mut lb = BedLb::attach(&bed).expect("attach the load balancer");
    let src = |j: u16| SocketAddr::new(bed.client_addr(2, false), 35_000 + j);
    let mut conns: Vec<_> = (0..20)
        .map(|j| bed.tcp_connect(src(j), vip_tcp(false)).expect("connect"))
        .collect();
    let before: Vec<String> = conns
        .iter_mut()
        .map(|c| c.exchange("1").expect("first"))
        .collect();

    let k = bed.add_backend().expect("add a backend");
    assert_eq!((k, bed.backend_count()), (4, 4));
    lb.set_backends(&[1, 2, 3, 4]).expect("tables with b4");

    // Established flows stay where they are (conntrack); new ones also reach b4.
    for (conn, first) in conns.iter_mut().zip(&before) {
        assert_eq!(&conn.exchange("2").expect("second"), first);
    }
    let answers: Vec<String> = (100..160)
        .map(|j| {
            bed.tcp_exchange(src(j), vip_tcp(false), "new")
                .expect("new flow")
        })
        .collect();
    assert!(answers.contains(&backend_name(4)), "{answers:?}");
    assert!(bed.backend(4).stats().tcp_connections > 0);
}

#[test]
fn holds_1100_concurrent_connections() {
    let bed = bed(3);
    let _lb = BedLb::attach(&bed).expect("attach the load balancer");
    let clients = bed.client_count();
    let timeout = bed.options().io_timeout;
    let started = Instant::now();
    let mut conns = bed
        .client_ns()
        .enter(|| {
            (0..1100)
                .map(|j| {
                    let src = SocketAddr::new(bed.client_addr(j % clients, j % 2 == 1), 0);
                    client::tcp_connect(src, vip_tcp(j % 2 == 1), timeout)
                        .unwrap_or_else(|e| panic!("connection {j}: {e}"))
                })
                .collect::<Vec<_>>()
        })
        .expect("enter the client namespace");
    let opened = started.elapsed();
    for (j, conn) in conns.iter_mut().enumerate() {
        let name = conn
            .exchange("x")
            .unwrap_or_else(|e| panic!("exchange {j}: {e}"));
        assert!(name.starts_with('b'), "{name}");
    }
    let per_backend: Vec<u64> = bed.backends().map(|b| b.stats().tcp_open).collect();
    eprintln!(
        "opened 1100 in {opened:?}, all answered after {:?}; open per backend {per_backend:?}",
        started.elapsed()
    );
    assert_eq!(per_backend.iter().sum::<u64>(), 1100);
    assert!(per_backend.iter().all(|&n| n > 200), "{per_backend:?}");
}

#[test]
fn without_the_peer_pass_program_xdp_tx_frames_are_lost() {
    // XDP_TX on lb0 hands frames to sw-lb0, which drops them unless it has NAPI (here:
    // no program on it), so nothing reaches the backend (BR-24.T1).
    let bed = TestBed::new(TestBedOptions {
        backends: 1,
        peer_pass_program: false,
        io_timeout: Duration::from_millis(300),
        ..TestBedOptions::default()
    })
    .expect("build the test bed");
    let lb = BedLb::attach(&bed).expect("attach the load balancer");
    let src = SocketAddr::new(bed.client_addr(0, false), 36_000);
    assert!(bed.udp_exchange(src, vip_udp(false), "lost").is_err());
    assert_eq!(bed.backend(1).stats().udp_messages, 0);
    assert!(lb.dp().global_stats().expect("stats").get(Reason::TxEncap) >= 1);
}
