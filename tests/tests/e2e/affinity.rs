//! Client affinity (`persistence_timeout_secs`, issue 32) end to end: every client of a
//! `hash = "src"` VIP opens a connection, a backend is added (`lb backend add`), and
//! the clients whose table slot moved to another backend keep opening all their new
//! connections on their first backend, many connections each, as `lb flow` says they
//! will. Without the timeout the same clients follow the table (checked through `lb
//! flow`'s table prediction, which the test uses to pick the moved clients), so the
//! test cannot pass because nothing moved. `lb status` then counts every client's live
//! affinity pin.
//!
//! A second test keeps one long connection per client busy past the (short) timeout:
//! the daemon's conntrack walk keeps those clients' pins alive, so after a backend is
//! added their new connections still go to their backend, while clients whose only
//! connection closed have lost their pins.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use lb_tests::{
    daemon::{DaemonConfig, vip_text},
    testbed::{TestBed, TestBedOptions, vip_tcp},
    traffic::{self, Greeted, Tally},
};

use super::{daemon, tcp_vip};

/// Client addresses: with four backends a quarter of the slots move to the new one,
/// so among 64 clients some move (all 64 stay with probability 0.75^64, about 1e-8).
const CLIENTS: usize = 64;
/// New connections each moved client opens after the change.
const PER_CLIENT: usize = 12;

#[test]
fn a_clients_connections_stay_on_its_backend_when_a_backend_is_added() {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    let bed = TestBed::new(TestBedOptions {
        backends: 3,
        clients: CLIENTS,
        ..TestBedOptions::default()
    })
    .expect("build the test bed");
    let vip = vip_text(false, true);
    let mut config = DaemonConfig::equal(1..=3);
    config.vip_keys.push((
        vip.clone(),
        "hash = \"src\"\npersistence_timeout_secs = 600".to_owned(),
    ));
    let lb = daemon(&bed, &config);
    let clients: Vec<SocketAddr> = (0..CLIENTS)
        .map(|i| SocketAddr::new(bed.client_addr(i, false), 0))
        .collect();
    let first = traffic::greet_all(&bed, &clients, vip_tcp(false)).expect("first connections");
    let owner: Vec<String> = first.iter().map(|(_, b)| b.clone()).collect();
    eprintln!(
        "first connections: {}",
        Tally::of(owner.iter().map(String::as_str))
    );

    let k = bed.add_backend().expect("a fourth backend");
    assert_eq!(k, 4);
    let out = lb.backend("add", &vip, 4, None).expect("lb backend add");
    eprintln!("lb backend add: {}", out.trim());

    // The clients whose slot the new table gives another backend.
    let mut moved = Vec::new();
    for (i, (src, was)) in first.iter().enumerate() {
        let report = lb.flow(&vip, *src).expect("lb flow");
        let table = report.table_backend.clone().unwrap_or_default();
        let affinity = report.affinity.clone().expect("the VIP has affinity");
        assert_eq!(affinity.timeout_secs, 600);
        assert!(affinity.decides, "client {i}: {report:?}");
        let pinned = affinity.backend.unwrap_or_default();
        if table != backend_ip(was) {
            moved.push((i, was.clone(), pinned, table));
        }
    }
    eprintln!(
        "{} of {CLIENTS} clients moved by the new table",
        moved.len()
    );
    assert!(!moved.is_empty(), "no client's slot moved");

    let b4_before = bed.backend(4).stats().tcp_connections;
    for (i, was, pinned, table) in &moved {
        assert_eq!(
            pinned,
            &backend_ip(was),
            "client {i}: the pin names its backend"
        );
        let srcs = vec![clients[*i]; PER_CLIENT];
        let answered = traffic::greet_all(&bed, &srcs, vip_tcp(false)).expect("new connections");
        let tally = Tally::of(answered.iter().map(|(_, b)| b.as_str()));
        assert_eq!(
            tally.get(was),
            u64::try_from(PER_CLIENT).expect("small"),
            "client {i} (table: {table}) left {was}: {tally}"
        );
    }
    // Clients that moved to b4 by the table did not go there.
    let to_b4 = moved
        .iter()
        .filter(|(_, _, _, table)| *table == backend_ip("b4"))
        .count();
    eprintln!("{to_b4} of them would have gone to b4");
    assert_eq!(bed.backend(4).stats().tcp_connections, b4_before);
    // `lb status` counts every client's live pin at the next conntrack walk.
    let clients = u64::try_from(CLIENTS).expect("small");
    lb.wait_status("the live affinity pins", Duration::from_secs(30), |s| {
        tcp_vip(s).affinity_pins == Some(clients)
    })
    .expect("lb status counts the pinned clients");
}

/// Backend `name`'s (`b<k>`) address as `lb flow` names it.
fn backend_ip(name: &str) -> String {
    let k: u8 = name
        .trim_start_matches('b')
        .parse()
        .unwrap_or_else(|_| panic!("a backend name, not {name:?}"));
    lb_tests::daemon::backend_addr(k, false).to_string()
}

/// The short timeout of the busy-client test (s) and its walk period (ms): lb.toml's
/// minimum for a 500 ms walk is 4 s; 10 s lets a connection go 6.5 s without a packet
/// (`lb_common::affinity`), far more than the test's exchange period.
const SHORT_TIMEOUT: u32 = 10;
const WALK_MS: u32 = 500;
/// Clients with a busy long connection (with four backends, all 48 stay on their slot
/// with probability 0.75^48, about 1e-6) and clients whose connection closed.
const BUSY: usize = 48;
const CLOSED: usize = 8;

/// Long connections that each exchange a line every 250 ms while [`Busy::keep`] runs,
/// each checked to stay on its first backend.
struct Busy(Vec<Greeted>);

impl Busy {
    /// One exchange on every connection.
    fn round(&mut self) {
        for (i, g) in self.0.iter_mut().enumerate() {
            let answer = g.conn.exchange("tick").expect("a busy connection answers");
            assert_eq!(answer, g.backend, "busy connection {i} moved");
        }
    }

    /// Rounds every 250 ms for `d`.
    fn keep(&mut self, d: Duration) {
        let end = Instant::now() + d;
        while Instant::now() < end {
            self.round();
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

#[test]
fn a_busy_clients_pin_outlives_the_timeout_and_keeps_its_new_connections() {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    let bed = TestBed::new(TestBedOptions {
        backends: 3,
        clients: BUSY + CLOSED,
        ..TestBedOptions::default()
    })
    .expect("build the test bed");
    let vip = vip_text(false, true);
    let mut config = DaemonConfig::equal(1..=3);
    config.metrics = format!("connections_interval_ms = {WALK_MS}");
    config.vip_keys.push((
        vip.clone(),
        format!("hash = \"src\"\npersistence_timeout_secs = {SHORT_TIMEOUT}"),
    ));
    let lb = daemon(&bed, &config);
    let addr = |i: usize| SocketAddr::new(bed.client_addr(i, false), 0);
    let srcs: Vec<SocketAddr> = (0..BUSY).map(addr).collect();
    let mut busy = Busy(traffic::connect_all(&bed, &srcs, vip_tcp(false)).expect("connections"));
    let closed: Vec<SocketAddr> = (BUSY..BUSY + CLOSED).map(addr).collect();
    traffic::greet_all(&bed, &closed, vip_tcp(false)).expect("closed connections");

    // Twice the timeout and more without a new connection of any client.
    busy.keep(Duration::from_secs(u64::from(SHORT_TIMEOUT) * 2 + 2));
    let flow = |src: SocketAddr| {
        lb.flow(&vip, SocketAddr::new(src.ip(), 40_000))
            .expect("lb flow")
    };
    for src in &closed {
        let a = flow(*src).affinity.expect("the VIP has affinity");
        assert!(!a.decides, "{src}: a closed client keeps no pin: {a:?}");
    }
    let k = bed.add_backend().expect("a fourth backend");
    let out = lb.backend("add", &vip, k, None).expect("lb backend add");
    eprintln!("lb backend add: {}", out.trim());
    busy.round();

    let mut moved = 0;
    for (i, src) in srcs.iter().enumerate() {
        busy.round();
        let was = busy.0[i].backend.clone();
        let report = flow(*src);
        let a = report.affinity.clone().expect("the VIP has affinity");
        assert!(a.decides, "busy client {i}: its pin lives: {report:?}");
        assert_eq!(
            a.backend.unwrap_or_default(),
            backend_ip(&was),
            "client {i}"
        );
        if report.table_backend.unwrap_or_default() == backend_ip(&was) {
            continue;
        }
        moved += 1;
        let answered = traffic::greet_all(&bed, &[*src], vip_tcp(false)).expect("new one");
        assert_eq!(
            answered[0].1, was,
            "busy client {i}: its new connection left {was}"
        );
    }
    eprintln!("{moved} of {BUSY} busy clients moved by the new table kept their backend");
    assert!(moved > 0, "no busy client's slot moved");
    busy.round();
}
