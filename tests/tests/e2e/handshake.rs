//! A handshake whose first SYN-ACK is lost, with a backend added before the client
//! retries: every backend drops its outgoing SYN-ACKs (an nftables rule on its output)
//! while the clients connect, so each client retransmits its SYN (after about 1 s) and
//! each backend its SYN-ACK; the table changes (`lb backend add`) once every first SYN
//! is half open on its backend and before the clients' first retry, and the rules go
//! only after that retry. Each retransmitted SYN must go where its first SYN went,
//! whose backend holds the half-open connection: every connection then completes there
//! (no reset, no connection on the added backend). Had the retry followed the new
//! table (the behaviour before SYNs consulted their held SYN), the flows whose slot
//! moved would have opened a second connection on the added backend: the client
//! completes with whichever SYN-ACK arrives first, and the other backend's connection
//! is left half-open, or reset by the client's ACK. With that behaviour this test sees
//! about a third of the connections on the added backend.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use lb_tests::{
    daemon::{DaemonConfig, backend_addr, vip_text},
    netns::NetNs,
    testbed::{TestBed, TestBedOptions, backend_name, vip_tcp},
};

use super::{CLIENTS, daemon};

/// Connections opened while the SYN-ACKs are dropped.
const CONNECTIONS: usize = 16;
/// Linux's initial retransmission timeout of a SYN (RFC 6298, section 2.1: 1 s).
const SYN_RTO: Duration = Duration::from_secs(1);

/// An nftables table in a backend's namespace that drops its outgoing SYN-ACKs; deleted
/// on drop.
struct SynAckDrop<'ns> {
    ns: &'ns NetNs,
}

impl<'ns> SynAckDrop<'ns> {
    fn add(ns: &'ns NetNs) -> anyhow::Result<Self> {
        let script = "table inet lbsynack {\n  chain output {\n    type filter hook output priority 0;\n    \
                      tcp flags & (syn | ack) == (syn | ack) drop\n  }\n}\n";
        ns.nft(script)?;
        Ok(Self { ns })
    }
}

impl Drop for SynAckDrop<'_> {
    fn drop(&mut self) {
        let _ = self
            .ns
            .exec("nft", &["delete", "table", "inet", "lbsynack"]);
    }
}

/// The IPv4 connections half open on backends `ks`: the lines of `/proc/net/tcp` in
/// state `03` (`TCP_SYN_RECV`), read from a thread in each namespace (no fork, so the
/// poll stays fast on a loaded machine).
fn half_open(bed: &TestBed, ks: std::ops::Range<u8>) -> usize {
    ks.map(|k| {
        bed.backend_ns(k)
            .enter(|| std::fs::read_to_string("/proc/thread-self/net/tcp"))
            .expect("enter the backend's namespace")
            .expect("read its /proc/net/tcp")
            .lines()
            .skip(1)
            .filter(|l| l.split_whitespace().nth(3) == Some("03"))
            .count()
    })
    .sum()
}

/// Waits until backends `ks` hold `n` half-open connections; panics at `deadline`.
fn wait_half_open(bed: &TestBed, ks: std::ops::Range<u8>, n: usize, deadline: Instant) {
    loop {
        let seen = half_open(bed, ks.clone());
        if seen >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{seen} of {n} first SYNs reached the backends before their retry"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_retransmitted_syn_after_a_backend_is_added_completes_on_its_first_backend() {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    let bed = TestBed::new(TestBedOptions {
        backends: 2,
        clients: CLIENTS,
        // Long enough for the clients' second SYN retransmission (3 s after the first
        // SYN), in case a loaded machine delays the first one past the rules.
        io_timeout: Duration::from_secs(15),
        ..TestBedOptions::default()
    })
    .expect("build the test bed");
    let lb = daemon(&bed, &DaemonConfig::equal(1..=2));
    // The third backend exists (namespace, server) but has no slots yet.
    let added = bed.add_backend().expect("a third backend");
    let mut rules: Vec<SynAckDrop<'_>> = (1..=added)
        .map(|k| SynAckDrop::add(bed.backend_ns(k)).expect("the SYN-ACK drop rule"))
        .collect();
    let vip = vip_tcp(false);
    let results: Vec<anyhow::Result<String>> = std::thread::scope(|s| {
        let started = Instant::now();
        let clients: Vec<_> = (0..CONNECTIONS)
            .map(|i| {
                let src = SocketAddr::new(bed.client_addr(i % CLIENTS, false), 0);
                let bed = &bed;
                s.spawn(move || -> anyhow::Result<String> {
                    let mut conn = bed.tcp_connect(src, vip)?;
                    Ok(conn.exchange("hello")?)
                })
            })
            .collect();
        // Change the table once every first SYN has reached its backend, and before
        // the clients retry: a SYN sent after the change would rightly go to the
        // added backend.
        wait_half_open(&bed, 1..added, CONNECTIONS, started + SYN_RTO);
        let out = lb
            .backend("add", &vip_text(false, true), added, None)
            .expect("lb backend add");
        let changed = started.elapsed();
        eprintln!("lb backend add after {changed:?}: {}", out.trim());
        assert!(
            changed < SYN_RTO,
            "the table changed {changed:?} after the first SYNs, past their first retry"
        );
        let b3 = backend_addr(added, false).to_string();
        let status = lb.status().expect("lb status");
        assert!(
            status
                .vips
                .iter()
                .flat_map(|v| &v.backends)
                .any(|b| b.address == b3 && b.slots > 0),
            "the added backend has no slots: {status:?}"
        );
        // Keep the SYN-ACKs dropping past the clients' first retry.
        let retried = SYN_RTO + Duration::from_millis(600);
        if changed < retried {
            std::thread::sleep(retried - changed);
        }
        rules.clear();
        clients
            .into_iter()
            .map(|c| c.join().expect("client thread"))
            .collect()
    });
    drop(rules);
    let answered: Vec<String> = results
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.unwrap_or_else(|e| panic!("connection {i}: {e:#}")))
        .collect();
    eprintln!("answered by {answered:?}");
    assert!(
        answered.iter().all(|b| *b != backend_name(added)),
        "a connection completed on the added backend: {answered:?}"
    );
    assert_eq!(bed.backend(added).stats().tcp_connections, 0);
}
