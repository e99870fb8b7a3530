//! Issue 10: health checks through the real `lb run` daemon, with backends failing in
//! each way an operator meets (real sockets, real processes, a real firewall rule).
//!
//! Probe timing in every test: interval 200 ms, timeout 100 ms, fall 3, rise 2, so a
//! failure is detected within fall x interval + timeout = 700 ms after the first failed
//! probe, and a recovery within rise x interval = 400 ms; the tests allow 3 s for either
//! (a generous margin for a loaded machine; speed is measured by `cargo xtask bench`).
//! Flap damping is off (`flap_transitions = 0`) unless a test is about it.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    time::{Duration, Instant},
};

use lb::control::{BackendStatus, Status};
use lb_tests::{
    daemon::{Daemon, DaemonConfig, backend_addr, vip_text},
    packets::{VIP4, VIP6},
    testbed::{
        TestBed, client4, client6,
        health::{
            DNS_PROBE_PORT, DnsServer, DropRule, HTTP_PROBE_PORT, HttpServer, PROCESS_PROBE_PORT,
            PortListener, ServerProcess, TCP_PROBE_PORT,
        },
        plumbing, vip_tcp,
    },
    traffic::{self, Ports, Tally},
};

use super::{bed, daemon};

/// Detection and recovery must each happen within this.
const WITHIN: Duration = Duration::from_secs(3);

/// The probe timing of the module documentation, for a TCP probe of `port`.
fn tcp_probe(port: u16) -> String {
    tcp_probe_every(port, 200, 100)
}

/// A TCP probe of `port` every `interval_ms`, timing out after `timeout_ms`.
fn tcp_probe_every(port: u16, interval_ms: u32, timeout_ms: u32) -> String {
    format!(
        "kind = \"tcp\"\nport = {port}\ninterval_ms = {interval_ms}\ntimeout_ms = {timeout_ms}\n\
         rise = 2\nfall = 3\nflap_transitions = 0\n"
    )
}

/// Backend `k` of `vip` in `status`.
fn backend<'a>(status: &'a Status, vip: &str, k: u8) -> &'a BackendStatus {
    let v6 = vip.starts_with('[');
    let addr = backend_addr(k, v6).to_string();
    status
        .vips
        .iter()
        .find(|v| v.vip == vip)
        .and_then(|v| v.backends.iter().find(|b| b.address == addr))
        .unwrap_or_else(|| panic!("no backend {k} in {vip}"))
}

/// Backend `k`'s health label in `vip` (`not probed` without one).
fn label(status: &Status, vip: &str, k: u8) -> String {
    backend(status, vip, k)
        .health
        .as_ref()
        .map_or_else(|| "not probed".to_owned(), |h| h.state.clone())
}

/// Waits until every `(vip, k)` of `which` shows `want`; returns the status and how long
/// each took (from the call).
fn wait_labels(
    lb: &Daemon<'_>,
    which: &[(&str, u8)],
    want: &str,
    within: Duration,
) -> (Status, BTreeMap<(String, u8), Duration>) {
    let started = Instant::now();
    let mut took = BTreeMap::new();
    loop {
        let status = lb.status().expect("lb status");
        for (vip, k) in which {
            if label(&status, vip, *k) == want {
                took.entry(((*vip).to_owned(), *k))
                    .or_insert_with(|| started.elapsed());
            }
        }
        if took.len() == which.len() {
            return (status, took);
        }
        assert!(
            started.elapsed() < within,
            "waited {within:?} for {which:?} to be {want}; got {:?}\ndaemon log:\n{}",
            which
                .iter()
                .map(|(v, k)| label(&status, v, *k))
                .collect::<Vec<_>>(),
            lb.log()
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Waits until `done` holds for `lb status`.
fn wait(lb: &Daemon<'_>, what: &str, done: impl Fn(&Status) -> bool) -> Status {
    lb.wait_status(what, WITHIN, done)
        .unwrap_or_else(|e| panic!("{e:#}"))
}

/// Routes to both VIPs from the LB namespace through the client (standing for the
/// router): tunnel-mode probes are addressed to the VIP, and leave by that route.
fn vip_routes(bed: &TestBed) {
    plumbing::ip_batch(
        bed.lb_ns(),
        &[
            format!("route add {VIP4}/32 via {}", client4(0)),
            format!("route add {VIP6}/128 via {}", client6(0)),
        ],
    )
    .expect("VIP routes in the LB namespace");
}

/// Backends made to fail in each way, all at once: a killed server process, a closed
/// port, HTTP 503, packets silently dropped by a firewall rule, a DNS server answering
/// garbage. Each is detected within fall x interval + timeout (with margin) with its
/// reason, leaves the table, gets none of the new connections, and comes back after
/// rise x interval with the same id and the same table.
#[test]
fn backends_failing_in_each_way_are_detected_avoided_and_recovered() {
    let bed = bed(6);
    let vip = vip_text(false, true);
    let mut listeners: Vec<Option<PortListener>> = bed
        .backends()
        .map(|b| Some(PortListener::open(b.ns(), TCP_PROBE_PORT).expect("listener")))
        .collect();
    let mut process = ServerProcess::http(bed.backend_ns(2), PROCESS_PROBE_PORT).expect("python");
    let http = HttpServer::start(bed.backend_ns(4), HTTP_PROBE_PORT).expect("http");
    let dns = DnsServer::start(bed.backend_ns(6), DNS_PROBE_PORT).expect("dns");
    let config = DaemonConfig::equal(1..=6)
        .with_health(&vip, &tcp_probe(TCP_PROBE_PORT))
        .with_backend_health(
            &vip,
            2,
            &format!("kind = \"http\"\nport = {PROCESS_PROBE_PORT}"),
        )
        .with_backend_health(
            &vip,
            4,
            &format!("kind = \"http\"\nport = {HTTP_PROBE_PORT}\npath = \"/health\""),
        )
        .with_backend_health(
            &vip,
            6,
            &format!("kind = \"dns\"\nport = {DNS_PROBE_PORT}\ndns_name = \"health.example.com\""),
        );
    let lb = daemon(&bed, &config);
    let all: Vec<(&str, u8)> = (1..=6).map(|k| (vip.as_str(), k)).collect();
    let (healthy, _) = wait_labels(&lb, &all, "healthy", WITHIN);
    let fingerprint = healthy
        .vips
        .iter()
        .find(|v| v.vip == vip)
        .unwrap()
        .fingerprint
        .clone();
    let ids: Vec<u32> = (1..=6).map(|k| backend(&healthy, &vip, k).id).collect();

    // Everything fails at once.
    process.kill();
    listeners[2] = None;
    http.set_status(503);
    let drop_rule = DropRule::add(bed.backend_ns(5), TCP_PROBE_PORT).expect("nft drop rule");
    dns.set_garbage(true);
    let failed: Vec<(&str, u8)> = (2..=6).map(|k| (vip.as_str(), k)).collect();
    let (status, took) = wait_labels(&lb, &failed, "unhealthy", WITHIN);
    eprintln!("detection after the failure: {took:?}");
    let reasons = [
        (2, "connection refused"),
        (3, "connection refused"),
        (4, "HTTP 503"),
        (5, "timeout after 100 ms (connect)"),
        (6, "malformed DNS answer"),
    ];
    for (k, reason) in reasons {
        let h = backend(&status, &vip, k).health.clone().unwrap();
        let error = h.last_error.unwrap_or_default();
        assert!(
            error.starts_with(reason),
            "b{k}: {error:?}, expected {reason}"
        );
        assert_eq!(h.went_down, 1, "b{k}");
    }
    assert_eq!(label(&status, &vip, 1), "healthy");
    // Each transition is logged once, with its reason.
    let log = lb.log();
    for (k, reason) in reasons {
        let (what, who) = (
            format!("backend unhealthy: {reason}"),
            format!("backend={}", backend_addr(k, false)),
        );
        let lines = log
            .lines()
            .filter(|l| l.contains(&what) && l.ends_with(&who))
            .count();
        assert_eq!(lines, 1, "{what} ... {who} in:\n{log}");
    }
    let status = wait(&lb, "the failed backends out of the table", |s| {
        (2..=6).all(|k| backend(s, &vip, k).slots == 0)
    });
    for k in 2..=6 {
        assert_eq!(backend(&status, &vip, k).dataplane_state, "down", "b{k}");
        assert_eq!(backend(&status, &vip, k).state, "active", "b{k}");
    }
    let text = lb.cli(&["status"]).expect("lb status");
    assert!(
        text.contains("HEALTH OF") && text.contains("HTTP 503"),
        "{text}"
    );

    // No new connection reaches a failed backend.
    let accepted: Vec<u64> = (2..=6)
        .map(|k| bed.backend(k).stats().tcp_connections)
        .collect();
    let srcs = traffic::sources(&bed, 100, false, Ports::Kernel);
    let answered = traffic::greet_all(&bed, &srcs, vip_tcp(false)).expect("new connections");
    let tally = Tally::of(answered.iter().map(|(_, b)| b.as_str()));
    eprintln!("new connections while b2..b6 are unhealthy: {tally}");
    assert_eq!(tally.get("b1"), 100, "{tally}");
    let after: Vec<u64> = (2..=6)
        .map(|k| bed.backend(k).stats().tcp_connections)
        .collect();
    assert_eq!(
        accepted, after,
        "a failed backend's server accepted a connection"
    );

    // Everything recovers.
    process = ServerProcess::http(bed.backend_ns(2), PROCESS_PROBE_PORT).expect("python again");
    listeners[2] = Some(PortListener::open(bed.backend_ns(3), TCP_PROBE_PORT).expect("listener"));
    http.set_status(200);
    drop(drop_rule);
    dns.set_garbage(false);
    let (_, took) = wait_labels(&lb, &failed, "healthy", WITHIN);
    eprintln!("recovery after the repair: {took:?}");
    let status = wait(&lb, "every backend back in the table", |s| {
        (1..=6).all(|k| backend(s, &vip, k).slots > 0)
    });
    let v = status.vips.iter().find(|v| v.vip == vip).unwrap();
    assert_eq!(v.fingerprint, fingerprint, "the table it had before");
    assert_eq!(
        (1..=6)
            .map(|k| backend(&status, &vip, k).id)
            .collect::<Vec<_>>(),
        ids
    );
    assert!(status.health.table_changes >= 2, "{:?}", status.health);
    drop(process);
}

/// Tunnel mode proves decapsulation and the VIP on the backend; direct mode does not.
/// With the backend's decapsulation program detached, its tunnel-mode probes (to the
/// VIP, IPv4 and IPv6, encapsulated by the TC program) fail, while a direct probe of
/// the same backend (another VIP's, to its own address) keeps passing.
#[test]
fn tunnel_mode_detects_broken_decapsulation_and_direct_mode_does_not() {
    let bed = bed(2);
    vip_routes(&bed);
    let _listeners: Vec<PortListener> = bed
        .backends()
        .map(|b| PortListener::open(b.ns(), TCP_PROBE_PORT).expect("listener"))
        .collect();
    let tunnel = |port: u16| {
        format!(
            "kind = \"tcp\"\nmode = \"tunnel\"\nport = {port}\ninterval_ms = 200\ntimeout_ms = 100\n\
             rise = 2\nfall = 3\nflap_transitions = 0\n"
        )
    };
    let (vip4, vip6, direct) = (
        vip_text(false, true),
        vip_text(true, true),
        vip_text(false, false),
    );
    let config = DaemonConfig::equal(1..=2)
        .with_health(&vip4, &tunnel(80))
        .with_health(&vip6, &tunnel(80))
        // The direct probe must pass every time: a timeout that a loaded machine
        // cannot exceed.
        .with_health(&direct, &tcp_probe_every(TCP_PROBE_PORT, 500, 400));
    let lb = daemon(&bed, &config);
    let every: Vec<(&str, u8)> = [vip4.as_str(), vip6.as_str(), direct.as_str()]
        .iter()
        .flat_map(|v| [(*v, 1), (*v, 2)])
        .collect();
    let (status, _) = wait_labels(&lb, &every, "healthy", WITHIN);
    let target = backend(&status, &vip4, 2)
        .health
        .clone()
        .unwrap()
        .target
        .unwrap();
    assert!(
        target.starts_with("203.0.113.10:80 mark 0x4c42"),
        "{target}"
    );
    assert!(status.health.tunnel.attached);
    let encapsulated = status.health.tunnel.encapsulated;
    assert!(encapsulated > 0, "{:?}", status.health);

    bed.backend(2)
        .set_decap(false)
        .expect("detach b2's decapsulation");
    let broken = [(vip4.as_str(), 2), (vip6.as_str(), 2)];
    let (status, took) = wait_labels(&lb, &broken, "unhealthy", WITHIN);
    eprintln!("tunnel probes detected the broken decapsulation after {took:?}");
    let error = backend(&status, &vip4, 2)
        .health
        .clone()
        .unwrap()
        .last_error
        .unwrap();
    assert!(error.starts_with("timeout"), "{error}");
    // Meanwhile the direct probe of the same backend passed every time.
    let direct_b2 = backend(&status, &direct, 2).health.clone().unwrap();
    assert_eq!(direct_b2.state, "healthy");
    let probes_then = direct_b2.probes;
    std::thread::sleep(Duration::from_millis(1_200));
    let status = lb.status().expect("lb status");
    let direct_b2 = backend(&status, &direct, 2).health.clone().unwrap();
    assert_eq!(
        (
            direct_b2.state.as_str(),
            direct_b2.failed_probes,
            direct_b2.went_down
        ),
        ("healthy", 0, 0),
        "direct mode cannot see the broken decapsulation"
    );
    assert!(direct_b2.probes > probes_then);
    assert_eq!(label(&status, &vip4, 1), "healthy");
    assert_eq!(label(&status, &vip6, 1), "healthy");
    assert!(status.health.tunnel.encapsulated > encapsulated);

    bed.backend(2)
        .set_decap(true)
        .expect("attach b2's decapsulation again");
    wait_labels(&lb, &broken, "healthy", WITHIN);
}

/// The established connections of a backend that becomes unhealthy are re-picked, as a
/// removed backend's are (case BR-09.T4, "existing flows"): their next packet goes to a
/// surviving backend, which has no socket for it and resets it, so each ends at once
/// with ECONNRESET instead of hanging; the other backends' connections go on. A drained
/// backend that fails keeps its connections (drain wins over health).
#[test]
fn an_unhealthy_backends_flows_are_repicked_and_a_drained_ones_kept() {
    let bed = bed(3);
    let vip = vip_text(false, true);
    let mut listeners: Vec<Option<PortListener>> = bed
        .backends()
        .map(|b| Some(PortListener::open(b.ns(), TCP_PROBE_PORT).expect("listener")))
        .collect();
    let lb = daemon(
        &bed,
        &DaemonConfig::equal(1..=3).with_health(&vip, &tcp_probe(TCP_PROBE_PORT)),
    );
    wait_labels(&lb, &[(&vip, 1), (&vip, 2), (&vip, 3)], "healthy", WITHIN);
    let srcs = traffic::sources(&bed, 60, false, Ports::Kernel);
    let mut greeted = traffic::connect_all(&bed, &srcs, vip_tcp(false)).expect("connections");
    let before = Tally::of(greeted.iter().map(|g| g.backend.as_str()));
    eprintln!("live connections: {before}");
    assert!(before.get("b2") > 0 && before.get("b3") > 0, "{before}");
    // b3 is drained first: its connections must stay even when it fails.
    lb.backend("drain", &vip, 3, None)
        .expect("lb backend drain");

    listeners[1] = None;
    listeners[2] = None;
    wait_labels(&lb, &[(&vip, 2), (&vip, 3)], "unhealthy", WITHIN);
    let status = wait(&lb, "b2 down in the data plane", |s| {
        backend(s, &vip, 2).dataplane_state == "down"
    });
    assert_eq!(backend(&status, &vip, 3).dataplane_state, "draining");

    let (mut reset, mut kept) = (0, 0);
    for (j, g) in greeted.iter_mut().enumerate() {
        let result = g.conn.exchange("after the failure");
        if g.backend == "b2" {
            let err = result.expect_err("a connection of the unhealthy b2 still got an answer");
            assert_eq!(
                err.kind(),
                std::io::ErrorKind::ConnectionReset,
                "connection {j}: {err}"
            );
            reset += 1;
        } else {
            let answer = result.unwrap_or_else(|e| panic!("connection {j} of {}: {e}", g.backend));
            assert_eq!(answer, g.backend, "connection {j} moved");
            kept += 1;
        }
    }
    eprintln!(
        "after b2 failed: {reset} of its connections reset, {kept} others kept (b3's drained ones among them)"
    );
    assert_eq!(reset, before.get("b2"));
    let stats = lb.stats().expect("lb stats");
    let repicked = stats
        .vips
        .iter()
        .find(|v| v.vip == vip)
        .and_then(|v| v.counters.iter().find(|c| c.name == "ct_stale_repicked"))
        .map_or(0, |c| c.value);
    assert!(repicked >= before.get("b2"), "ct_stale_repicked {repicked}");
}

/// The multi-failure policy (case BR-09, Envoy's panic threshold): four backends.
/// - B2 and B3 fail (T1): the table holds B1 and B4, about half each, and new
///   connections go only to them.
/// - B1 fails too: 1 of 4 healthy is below `panic_threshold = 50`: panic, every backend
///   has slots again; logged once.
/// - B4 fails (T3, all down): `all_down = "open"` keeps balancing over all of them;
///   the IPv6 VIP with `all_down = "closed"` empties its table and drops new flows
///   (`drop_no_backend`), logged once naming the VIP.
/// - Everyone recovers: both VIPs' tables are the ones they had.
#[test]
fn panic_threshold_and_all_down_open_and_closed() {
    let bed = bed(4);
    let (vip4, vip6) = (vip_text(false, true), vip_text(true, true));
    let mut listeners: Vec<Option<PortListener>> = bed
        .backends()
        .map(|b| Some(PortListener::open(b.ns(), TCP_PROBE_PORT).expect("listener")))
        .collect();
    let config = DaemonConfig::equal(1..=4)
        .with_health(
            &vip4,
            &(tcp_probe(TCP_PROBE_PORT) + "panic_threshold = 50\n"),
        )
        .with_health(
            &vip6,
            &(tcp_probe(TCP_PROBE_PORT) + "all_down = \"closed\"\n"),
        );
    let lb = daemon(&bed, &config);
    let every: Vec<(&str, u8)> = (1..=4)
        .flat_map(|k| [(vip4.as_str(), k), (vip6.as_str(), k)])
        .collect();
    let (status, _) = wait_labels(&lb, &every, "healthy", WITHIN);
    let fingerprints: Vec<String> = [&vip4, &vip6]
        .iter()
        .map(|v| {
            status
                .vips
                .iter()
                .find(|s| &s.vip == *v)
                .unwrap()
                .fingerprint
                .clone()
        })
        .collect();
    let fail = |listeners: &mut Vec<Option<PortListener>>, ks: &[u8]| {
        for k in ks {
            listeners[usize::from(*k) - 1] = None;
        }
        let which: Vec<(&str, u8)> = ks
            .iter()
            .flat_map(|k| [(vip4.as_str(), *k), (vip6.as_str(), *k)])
            .collect();
        wait_labels(&lb, &which, "unhealthy", WITHIN);
    };

    // T1: two of four down.
    fail(&mut listeners, &[2, 3]);
    let status = wait(&lb, "b2 and b3 out of the IPv4 table", |s| {
        backend(s, &vip4, 2).slots == 0 && backend(s, &vip4, 3).slots == 0
    });
    for k in [1, 4] {
        let slots = backend(&status, &vip4, k).slots;
        assert!(slots.abs_diff(32_768) <= 328, "b{k}: {slots} slots");
    }
    let srcs = traffic::sources(&bed, 200, false, Ports::Kernel);
    let answered = traffic::greet_all(&bed, &srcs, vip_tcp(false)).expect("new connections");
    let tally = Tally::of(answered.iter().map(|(_, b)| b.as_str()));
    eprintln!("new connections with b2 and b3 down: {tally}");
    assert_eq!(tally.get("b2") + tally.get("b3"), 0, "{tally}");
    assert_eq!(tally.total(), 200);

    // Panic.
    fail(&mut listeners, &[1]);
    // The labels change when the prober decides; the tables follow in the next health
    // batch, which may hold one VIP's transition and not the other's: wait for both.
    let status = wait(
        &lb,
        "panic on the IPv4 VIP, b1 out of the IPv6 table",
        |s| {
            s.vips
                .iter()
                .any(|v| v.vip == vip4 && v.policy.as_ref().is_some_and(|p| p.mode == "panic"))
                && backend(s, &vip6, 1).slots == 0
        },
    );
    assert!(
        (1..=4).all(|k| backend(&status, &vip4, k).slots > 0),
        "panic: everyone has slots"
    );
    assert!((1..=4).all(|k| backend(&status, &vip4, k).dataplane_state == "active"));
    let v6_only_b4 = backend(&status, &vip6, 4).slots;
    assert_eq!(
        v6_only_b4,
        status
            .vips
            .iter()
            .find(|v| v.vip == vip6)
            .unwrap()
            .table_size,
        "no panic without a threshold"
    );

    // All down.
    fail(&mut listeners, &[4]);
    let status = wait(&lb, "all down on both VIPs", |s| {
        let mode = |vip: &str| {
            s.vips
                .iter()
                .find(|v| v.vip == vip)
                .and_then(|v| v.policy.clone())
                .map(|p| p.mode)
        };
        mode(&vip4).as_deref() == Some("all_down_open")
            && mode(&vip6).as_deref() == Some("all_down_closed")
    });
    assert!(
        (1..=4).all(|k| backend(&status, &vip4, k).slots > 0),
        "open: everyone has slots"
    );
    assert!(
        (1..=4).all(|k| backend(&status, &vip6, k).slots == 0),
        "closed: an empty table"
    );
    let drops = |lb: &Daemon<'_>| {
        lb.stats()
            .expect("lb stats")
            .reasons
            .iter()
            .find(|r| r.name == "drop_no_backend")
            .map_or(0, |r| r.value)
    };
    let before = drops(&lb);
    let refused = bed.client_ns().enter(|| {
        lb_tests::testbed::client::tcp_connect(
            SocketAddr::new(bed.client_addr(0, true), 0),
            vip_tcp(true),
            Duration::from_millis(500),
        )
    });
    assert!(
        refused.expect("enter").is_err(),
        "a connection to the closed VIP succeeded"
    );
    assert!(drops(&lb) > before, "drop_no_backend did not count the SYN");
    let log = lb.log();
    for line in [
        format!("VIP {vip4}: multi-failure policy: panic"),
        format!("VIP {vip4}: multi-failure policy: all backends unhealthy: failing open"),
        format!("VIP {vip6}: multi-failure policy: all backends unhealthy: failing closed"),
    ] {
        assert_eq!(log.matches(&line).count(), 1, "{line} in:\n{log}");
    }

    // Everyone back.
    for (i, l) in listeners.iter_mut().enumerate() {
        *l = Some(
            PortListener::open(bed.backend_ns(u8::try_from(i + 1).unwrap()), TCP_PROBE_PORT)
                .expect("listener"),
        );
    }
    wait_labels(&lb, &every, "healthy", WITHIN);
    // (In all-down-open the IPv4 table already is the full one: wait for the modes.)
    wait(&lb, "both VIPs normal with the tables they had", |s| {
        let normal = s
            .vips
            .iter()
            .all(|v| v.policy.as_ref().is_none_or(|p| p.mode == "normal"));
        normal
            && [&vip4, &vip6]
                .iter()
                .zip(&fingerprints)
                .all(|(v, f)| s.vips.iter().any(|x| &x.vip == *v && &x.fingerprint == f))
    });
    assert_eq!(
        lb.log()
            .matches(&format!("VIP {vip6}: multi-failure policy: back to normal"))
            .count(),
        1
    );
}

/// Fifty of a VIP's sixty backends stop answering at the same moment: their
/// transitions are coalesced and the VIP's table changes once (two at most if a probe
/// round straddles a coalescing window; the count is printed). The sixty backends are
/// local addresses of the LB namespace with a listener each (only their probes matter
/// here, no client traffic is sent).
#[test]
fn fifty_backends_down_at_once_change_the_table_once() {
    let bed = bed(1);
    let vip = vip_text(false, true);
    let ks: Vec<u8> = (91..=150).collect();
    let adds: Vec<String> = ks
        .iter()
        .map(|k| format!("addr add {}/32 dev lo", backend_addr(*k, false)))
        .collect();
    plumbing::ip_batch(bed.lb_ns(), &adds).expect("backend addresses");
    let mut listeners: Vec<PortListener> = ks
        .iter()
        .map(|k| {
            PortListener::open_on(
                bed.lb_ns(),
                SocketAddr::new(backend_addr(*k, false), TCP_PROBE_PORT),
            )
            .expect("listener")
        })
        .collect();
    let lb = daemon(
        &bed,
        &DaemonConfig::equal(ks.iter().copied()).with_health(&vip, &tcp_probe(TCP_PROBE_PORT)),
    );
    let all: Vec<(&str, u8)> = ks.iter().map(|k| (vip.as_str(), *k)).collect();
    let (status, _) = wait_labels(&lb, &all, "healthy", WITHIN);
    let before = status.health.clone();
    listeners.truncate(10); // backends 101..=150 close their port together
    let failed: Vec<(&str, u8)> = (101..=150).map(|k| (vip.as_str(), k)).collect();
    wait_labels(&lb, &failed, "unhealthy", WITHIN);
    let status = wait(&lb, "the fifty out of the table", |s| {
        (101..=150).all(|k| backend(s, &vip, k).slots == 0)
    });
    std::thread::sleep(Duration::from_millis(300));
    let after = lb.status().expect("lb status").health;
    let tables = after.table_changes - before.table_changes;
    eprintln!(
        "50 of 60 backends down at once: {} batches, {tables} table changes",
        after.batches - before.batches
    );
    assert!((1..=2).contains(&tables), "{tables} table changes");
    assert!((91..=100).all(|k| backend(&status, &vip, k).slots > 0));
    assert!(
        lb.log().contains("50 now unhealthy") || tables == 2,
        "{}",
        lb.log()
    );
}

/// A backend whose next hop cannot be resolved is reported as soon as it is added (FIB
/// next-hop mode): a mistyped address on the backends' subnet (nobody answers ARP) and
/// an address without a route. Each is a warning, its `nexthop` in `lb status` and one
/// count of `nexthop_unresolved_total`; the bed's real backends show `resolved`.
#[test]
fn a_backend_whose_next_hop_cannot_be_resolved_is_reported_when_added() {
    let bed = bed(2);
    let lb = daemon(&bed, &DaemonConfig::equal(1..=2));
    let vip = vip_text(false, true);
    for address in ["198.51.100.99", "10.99.0.1"] {
        lb.cli(&["backend", "add", "--vip", &vip, "--backend", address])
            .expect("lb backend add");
    }
    let find = |s: &Status, address: &str| {
        s.vips
            .iter()
            .find(|v| v.vip == vip)
            .and_then(|v| v.backends.iter().find(|b| b.address == address))
            .and_then(|b| b.nexthop.clone())
            .map(|n| n.state)
    };
    let status = lb
        .wait_status("both next hops reported", Duration::from_secs(10), |s| {
            find(s, "198.51.100.99").as_deref() == Some("no neighbour")
                && find(s, "10.99.0.1").as_deref() == Some("no route")
        })
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(
        find(&status, &backend_addr(1, false).to_string()).as_deref(),
        Some("resolved")
    );
    assert_eq!(status.health.nexthop_unresolved, 2);
    assert_eq!(status.health.nexthop_unresolved_total, 2);
    let log = lb.log();
    for address in ["198.51.100.99", "10.99.0.1"] {
        let warned = log
            .lines()
            .filter(|l| {
                l.contains("next hop not resolved") && l.ends_with(&format!("backend={address}"))
            })
            .count();
        assert_eq!(warned, 1, "{address} in:\n{log}");
    }
    let text = lb.cli(&["status"]).expect("lb status");
    assert!(
        text.contains("backend 198.51.100.99: next hop no neighbour"),
        "{text}"
    );
    assert!(
        text.contains("next hops: 2 backends unresolved now"),
        "{text}"
    );
}

/// Flapping (case BR-09.T5 through the daemon): a backend whose port opens and closes
/// every 300 ms, probed every 100 ms with rise = fall = 1, changes state a few times,
/// and then, past the default damping limit (4 changes within 60 s), is held unhealthy
/// for the hold time, logged once, whatever its probes say; each change cost its VIP at
/// most one table change, and the table ends as the one without it.
#[test]
fn a_flapping_backend_is_held_unhealthy() {
    let bed = bed(2);
    let vip = vip_text(false, true);
    let _one = PortListener::open(bed.backend_ns(1), TCP_PROBE_PORT).expect("listener");
    let probe = format!(
        "kind = \"tcp\"\nport = {TCP_PROBE_PORT}\ninterval_ms = 100\ntimeout_ms = 50\nrise = 1\nfall = 1\n"
    );
    // Backend 1 stays up; its lenient probe keeps a slow answer on a loaded machine
    // from changing its state (and the table) too.
    let steady = format!(
        "kind = \"tcp\"\nport = {TCP_PROBE_PORT}\ninterval_ms = 1000\ntimeout_ms = 900\nrise = 1\nfall = 3\n"
    );
    let config = DaemonConfig::equal(1..=2)
        .with_health(&vip, &probe)
        .with_backend_health(&vip, 1, &steady);
    let lb = daemon(&bed, &config);
    let mut two = Some(PortListener::open(bed.backend_ns(2), TCP_PROBE_PORT).expect("listener"));
    wait_labels(&lb, &[(&vip, 1), (&vip, 2)], "healthy", WITHIN);
    let started = Instant::now();
    let mut held = None;
    while started.elapsed() < Duration::from_secs(6) && held.is_none() {
        std::thread::sleep(Duration::from_millis(300));
        two = match two {
            Some(_) => None,
            None => Some(PortListener::open(bed.backend_ns(2), TCP_PROBE_PORT).expect("listener")),
        };
        let status = lb.status().expect("lb status");
        if label(&status, &vip, 2) == "unhealthy (held)" {
            held = Some(status);
        }
    }
    let status = held.unwrap_or_else(|| panic!("never held:\n{}", lb.log()));
    let h = backend(&status, &vip, 2).health.clone().unwrap();
    eprintln!(
        "held after {:?}: {} changes, {} table changes",
        started.elapsed(),
        h.transitions,
        status.health.table_changes
    );
    assert_eq!(h.holds, 1);
    assert!(h.transitions <= 5, "{h:?}");
    let one = backend(&status, &vip, 1).health.clone().unwrap();
    assert_eq!(one.transitions, 0, "backend 1 stayed up: {one:?}");
    assert!(
        status.health.table_changes <= h.transitions,
        "{:?}",
        status.health
    );
    // Its port open for good now: it stays held (unhealthy, out of the table).
    if two.is_none() {
        two = Some(PortListener::open(bed.backend_ns(2), TCP_PROBE_PORT).expect("listener"));
    }
    std::thread::sleep(Duration::from_millis(500));
    let status = wait(&lb, "b2 out of the table", |s| {
        backend(s, &vip, 2).slots == 0
    });
    assert_eq!(label(&status, &vip, 2), "unhealthy (held)");
    let held_lines = lb
        .log()
        .lines()
        .filter(|l| l.contains("held unhealthy"))
        .count();
    assert_eq!(held_lines, 1, "{}", lb.log());
    drop(two);
}
