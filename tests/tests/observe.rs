//! Observability end to end (issue 11), each test on its own bed with the real `lb run`:
//!
//! - a real Prometheus server, started in the LB namespace and scraping the daemon's
//!   endpoint every second, sees the series with their labels; the increase of each
//!   backend's packet counter between a sample before and one after the traffic equals
//!   the segments the clients sent to it; a backend added at runtime appears, and a
//!   removed one is shown as `removed` with its counter frozen, then its series go after
//!   `metrics.removed_retention_secs`; `promtool check metrics` accepts the exposition;
//!   the added backend removed again, each of its slots (dirty since the add) forgets
//!   it, counted in `lb status` and `lb_vip_second_chance_owners_given_up_total`;
//! - the live connection counts of `lb status` equal the connections the test holds
//!   open per backend, and a drained backend's fall to 0 once its connections close;
//! - `lb trace` shows the decisions of a connection's packets (SYN from the table, the
//!   handshake's ACK from the SYN cache, data by a conntrack hit) and nothing of the
//!   packets its filter excludes (another client, a non-VIP port), and the daemon is
//!   unaffected when the trace ends;
//! - after a daemon is killed during a trace, the next one adopts the pinned datapath
//!   with the trace switched off, and `lb trace` works again through the adopted
//!   program array and log ring: a connection opened before the crash shows as a
//!   conntrack hit;
//! - with `[announce]` on, `lb_vip_announced` of both VIPs of an address goes to 0 when
//!   the operator withdraws the address and back to 1 when it is announced again.
//!
//! Needs the `lb` binary (`cargo build -p lb --bin lb`) and Debian's `prometheus`
//! (`cargo xtask setup`).

use std::{
    io::{BufRead as _, BufReader},
    net::SocketAddr,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use lb::control::{Status, TraceEvent};
use lb_tests::{
    daemon::{Daemon, DaemonConfig, Stop, backend_addr, lb_binary, vip_text},
    prometheus::{Prometheus, get, promtool_check, unix_now},
    testbed::{TestBed, TestBedOptions, backend_name, vip_tcp, vip_udp},
    traffic::{self, Ports},
};

/// The endpoint in the LB namespace (the default address).
const ENDPOINT: &str = "127.0.0.1:9469";

fn bed(backends: u8) -> TestBed {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    TestBed::new(TestBedOptions {
        backends,
        clients: 8,
        ..TestBedOptions::default()
    })
    .expect("build the test bed")
}

fn daemon<'bed>(bed: &'bed TestBed, config: &DaemonConfig) -> Daemon<'bed> {
    Daemon::start(bed, config).unwrap_or_else(|e| panic!("start lb run: {e:#}"))
}

fn endpoint() -> SocketAddr {
    ENDPOINT.parse().expect("an address")
}

/// The labels of backend `k` of the bed's IPv4 TCP VIP, in PromQL.
fn backend_selector(k: u8) -> String {
    format!(
        "vip=\"{}\",backend=\"{}\"",
        vip_text(false, true),
        backend_addr(k, false)
    )
}

#[test]
fn prometheus_sees_the_series_the_traffic_and_the_backend_lifecycle() {
    let bed = bed(3);
    let config = DaemonConfig {
        metrics: "removed_retention_secs = 3\nconnections_interval_ms = 500".into(),
        ..DaemonConfig::equal(1..=3)
    };
    let lb = daemon(&bed, &config);
    let exposition = get(bed.lb_ns(), endpoint(), "/metrics", None).expect("GET /metrics");
    promtool_check(&exposition).expect("promtool accepts the exposition");
    let om = get(
        bed.lb_ns(),
        endpoint(),
        "/metrics",
        Some("application/openmetrics-text; version=1.0.0"),
    )
    .expect("OpenMetrics");
    assert!(om.ends_with("# EOF\n"), "OpenMetrics ends with # EOF");
    let prom = Prometheus::start(bed.lb_ns(), endpoint()).expect("prometheus");
    prom.wait("up{job=\"lb\"}", Duration::from_secs(20), |s| {
        s.first().is_some_and(|s| s.value == 1.0)
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{}", prom.log()));
    let packets = |k: u8| format!("lb_backend_packets_total{{{}}}", backend_selector(k));
    // A sample before the traffic (all zero: the daemon is fresh), taken once scraped.
    prom.wait(&packets(1), Duration::from_secs(10), |s| s.len() == 1)
        .expect("the series exists");
    let before = unix_now();
    std::thread::sleep(Duration::from_millis(1200));

    let srcs = traffic::sources(&bed, 30, false, Ports::Kernel);
    let greeted = traffic::connect_all(&bed, &srcs, vip_tcp(false)).expect("connections");
    let mut sent = [0u64; 4];
    for (j, mut g) in greeted.into_iter().enumerate() {
        for i in 0..j % 3 {
            assert_eq!(
                g.conn.exchange(&format!("line {i}")).expect("line"),
                g.backend
            );
        }
        let k = (1..=3)
            .find(|&k| backend_name(k) == g.backend)
            .expect("a backend");
        sent[usize::from(k)] += traffic::close_counting(g.conn).expect("close").segments;
    }
    for k in 1..=3u8 {
        let expected = f64::from(u32::try_from(sent[usize::from(k)]).expect("small"));
        let samples = prom
            .wait(&packets(k), Duration::from_secs(10), |s| {
                s.first().is_some_and(|s| s.value == expected)
            })
            .unwrap_or_else(|e| panic!("b{k}: {e:#}"));
        let at_start = prom
            .query(&packets(k), Some(before))
            .expect("query at the start");
        let increase = samples[0].value - at_start.first().map_or(0.0, |s| s.value);
        assert_eq!(increase, expected, "b{k}: increase over the traffic");
        eprintln!("b{k}: Prometheus counted {increase} packets, the clients sent {expected}");
    }
    for series in [
        format!("lb_vip_packets_total{{vip=\"{}\"}}", vip_text(false, true)),
        format!(
            "lb_backend_connections{{{},state=\"established\"}}",
            backend_selector(1)
        ),
        format!("lb_table_info{{vip=\"{}\"}}", vip_text(false, true)),
        "lb_verdicts_total{reason=\"tx_encap\",action=\"XDP_TX\"}".to_owned(),
        "lb_conntrack_entries{family=\"ipv4\"}".to_owned(),
        "lb_build_info".to_owned(),
    ] {
        prom.wait(&series, Duration::from_secs(10), |s| !s.is_empty())
            .unwrap_or_else(|e| panic!("{e:#}"));
    }
    // The bed's veth has one receive queue: one SYN cache part, shared by every CPU.
    prom.wait("lb_syn_cache_parts", Duration::from_secs(10), |s| {
        s.first().is_some_and(|s| s.value == 1.0)
    })
    .expect("one SYN cache part on a one-queue veth");

    // A backend added at runtime appears.
    let k = bed.add_backend().expect("a fourth backend");
    lb.backend("add", &vip_text(false, true), k, None)
        .expect("lb backend add");
    prom.wait(
        &format!(
            "lb_backend_state{{{},state=\"active\"}}",
            backend_selector(k)
        ),
        Duration::from_secs(10),
        |s| s.first().is_some_and(|s| s.value == 1.0),
    )
    .expect("the added backend's series");

    // A removed one: shown removed, its counter frozen, then gone after the retention.
    lb.backend("remove", &vip_text(false, true), 3, None)
        .expect("lb backend remove");
    let frozen = f64::from(u32::try_from(sent[3]).expect("small"));
    prom.wait(
        &format!(
            "lb_backend_state{{{},state=\"removed\"}}",
            backend_selector(3)
        ),
        Duration::from_secs(10),
        |s| s.first().is_some_and(|s| s.value == 1.0),
    )
    .expect("removed");
    let still = prom.query(&packets(3), None).expect("query");
    assert_eq!(
        still.first().map(|s| s.value),
        Some(frozen),
        "frozen counter"
    );
    prom.wait(&packets(3), Duration::from_secs(15), <[_]>::is_empty)
        .expect("the removed backend's series go after the retention");
    drop(prom);
    owners_given_up_when_the_added_backend_goes(&bed, &lb, k);
    drop(lb);
}

/// Backend `k`, added at runtime (its slots dirty since), removed again: each of its
/// slots moves on and forgets `k` (rule SC5 of the second chance),
/// counted in `lb status` (JSON and text) and `lb_vip_second_chance_owners_given_up_total`.
fn owners_given_up_when_the_added_backend_goes(bed: &TestBed, lb: &Daemon<'_>, k: u8) {
    let vip = vip_text(false, true);
    let of_vip = |s: &Status| {
        s.vips
            .iter()
            .find(|v| v.vip == vip)
            .cloned()
            .expect("the VIP in lb status")
    };
    let before = of_vip(&lb.status().expect("lb status"));
    let owned = before
        .backends
        .iter()
        .find(|b| b.address == backend_addr(k, false).to_string())
        .map(|b| u64::from(b.slots))
        .expect("the added backend in lb status");
    assert!(owned > 0, "b{k} owns no slot");
    lb.backend("remove", &vip, k, None)
        .expect("lb backend remove");
    let given_up = of_vip(&lb.status().expect("lb status")).owners_given_up;
    // At least b{k}'s slots; also those the add moved between the others and the
    // removal moves again.
    assert!(
        given_up - before.owners_given_up >= owned,
        "every slot of b{k} forgot it: {given_up} given up, {} before, b{k} owned {owned}",
        before.owners_given_up
    );
    let exposition = get(bed.lb_ns(), endpoint(), "/metrics", None).expect("GET /metrics");
    assert_eq!(
        sample(
            &exposition,
            "lb_vip_second_chance_owners_given_up_total",
            &format!("vip=\"{vip}\"")
        ),
        Some(f64::from(u32::try_from(given_up).expect("small"))),
    );
    let text = lb.cli(&["status"]).expect("lb status text");
    assert!(
        text.contains(&format!("second chance: {given_up} slots forgot an owner")),
        "{text}"
    );
}

/// `lb status`'s established connections per backend of `vip` (`u64::MAX` before the
/// first walk).
fn established(status: &Status, vip: &str) -> Vec<(String, u64)> {
    status
        .vips
        .iter()
        .filter(|v| v.vip == vip)
        .flat_map(|v| &v.backends)
        .map(|b| {
            let n = b.connections.map_or(u64::MAX, |c| c.established);
            (b.address.clone(), n)
        })
        .collect()
}

#[test]
fn live_connections_equal_the_open_ones_and_a_drained_backend_falls_to_zero() {
    let bed = bed(2);
    let config = DaemonConfig {
        metrics: "connections_interval_ms = 200".into(),
        ..DaemonConfig::equal(1..=2)
    };
    let lb = daemon(&bed, &config);
    let srcs = traffic::sources(&bed, 24, false, Ports::Kernel);
    let greeted = traffic::connect_all(&bed, &srcs, vip_tcp(false)).expect("connections");
    let mut open = [0u64; 3];
    for g in &greeted {
        let k = (1..=2)
            .find(|&k| backend_name(k) == g.backend)
            .expect("a backend");
        open[usize::from(k)] += 1;
    }
    let want = |open: [u64; 3]| -> Vec<(String, u64)> {
        (1..=2)
            .map(|k| (backend_addr(k, false).to_string(), open[usize::from(k)]))
            .collect()
    };
    let tcp_vip = vip_text(false, true);
    let status = lb
        .wait_status(
            "the open connections counted",
            Duration::from_secs(10),
            |s| established(s, &tcp_vip) == want(open),
        )
        .unwrap_or_else(|e| panic!("{e:#}"));
    eprintln!(
        "lb status counts {:?} open connections",
        established(&status, &tcp_vip)
    );
    lb.backend("drain", &tcp_vip, 1, None).expect("drain b1");
    let (b1, rest): (Vec<_>, Vec<_>) = greeted
        .into_iter()
        .partition(|g| g.backend == backend_name(1));
    for g in b1 {
        traffic::close_counting(g.conn).expect("close");
    }
    let after = [0, 0, open[2]];
    lb.wait_status("b1's connections at 0", Duration::from_secs(10), |s| {
        established(s, &tcp_vip) == want(after)
    })
    .unwrap_or_else(|e| panic!("the drained backend's count did not fall to 0: {e:#}"));
    let text = get(bed.lb_ns(), endpoint(), "/metrics", None).expect("GET /metrics");
    let b1_line = format!(
        "lb_backend_connections{{{},state=\"established\"}} 0",
        backend_selector(1)
    );
    assert!(text.contains(&b1_line), "{b1_line} in\n{text}");
    drop(rest);
}

/// Runs `lb trace --json` with `args` until `count` events (or 10 s); returns them.
fn trace(lb: &Daemon<'_>, args: &[&str], count: usize, traffic: impl FnOnce()) -> Vec<TraceEvent> {
    let mut child = Command::new(lb_binary())
        .arg("trace")
        .args(args)
        .args(["--json", "--count", &count.to_string(), "--socket"])
        .arg(lb.socket_path())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("lb trace");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let header = lines.next().expect("a first line").expect("readable");
    assert!(header.contains("\"vip\""), "{header}");
    let reader = std::thread::spawn(move || {
        lines
            .map_while(Result::ok)
            .map(|l| serde_json::from_str::<TraceEvent>(&l).expect("a JSON event"))
            .collect::<Vec<_>>()
    });
    traffic();
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().expect("wait").is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    reader.join().expect("the reader")
}

#[test]
fn lb_trace_shows_the_decisions_of_a_connection_and_nothing_else() {
    let bed = bed(2);
    let lb = daemon(&bed, &DaemonConfig::equal(1..=2));
    let tcp_vip = vip_text(false, true);
    let client = bed.client_addr(0, false);
    let other = bed.client_addr(1, false);
    let filter = client.to_string();
    let events = trace(&lb, &["--vip", &tcp_vip, "--client", &filter], 3, || {
        // Excluded: another client to the VIP, and this client to the UDP VIP.
        let _ = bed
            .tcp_exchange(SocketAddr::new(other, 0), vip_tcp(false), "x")
            .expect("other client");
        let _ = bed
            .udp_exchange(SocketAddr::new(client, 0), vip_udp(false), "x")
            .expect("UDP");
        let mut conn = bed
            .tcp_connect(SocketAddr::new(client, 0), vip_tcp(false))
            .expect("connect");
        conn.exchange("hello").expect("exchange");
        conn.exchange("again").expect("exchange");
    });
    eprintln!(
        "{}",
        events
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(events.len(), 3, "{events:?}");
    for e in &events {
        assert_eq!(e.vip, tcp_vip);
        assert!(e.client.starts_with(&format!("{client}:")), "{e}");
        assert_eq!(
            (e.reason.as_str(), e.action.as_str()),
            ("tx_encap", "XDP_TX"),
            "{e}"
        );
    }
    assert_eq!(
        (events[0].decision.as_str(), events[0].tcp_flags.as_str()),
        ("syn", "SYN")
    );
    assert!(events[0].slot.is_some() && events[0].backend.is_some());
    assert_eq!(
        (events[1].decision.as_str(), events[1].tcp_flags.as_str()),
        ("syn-cache", "ACK")
    );
    assert_eq!(events[2].decision, "conntrack-hit");
    assert!(
        events.iter().all(|e| e.backend == events[0].backend),
        "one backend"
    );
    // The trace ended with the command; the daemon goes on, and another trace starts.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !lb.log().contains("lb trace stopped") {
        assert!(Instant::now() < deadline, "no stop logged:\n{}", lb.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    lb.status().expect("lb status after the trace");
    let again = trace(&lb, &["--client", &filter], 1, || {
        bed.tcp_exchange(SocketAddr::new(client, 0), vip_tcp(false), "x")
            .expect("exchange");
    });
    assert_eq!(again.len(), 1);
}

#[test]
fn lb_trace_works_after_a_crash_during_a_trace_and_the_adopting_restart() {
    let bed = bed(2);
    let mut lb = daemon(&bed, &DaemonConfig::equal(1..=2));
    let tcp_vip = vip_text(false, true);
    let client = bed.client_addr(0, false);
    let filter = client.to_string();
    let mut conn = bed
        .tcp_connect(SocketAddr::new(client, 0), vip_tcp(false))
        .expect("connect");
    conn.exchange("before").expect("exchange");
    // A trace that is still running when the daemon is killed: the trace flag stays
    // set in the pinned configuration.
    let mut tracing = Command::new(lb_binary())
        .args(["trace", "--json", "--vip", &tcp_vip, "--socket"])
        .arg(lb.socket_path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("lb trace");
    let mut first = String::new();
    BufReader::new(tracing.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("the trace's first line");
    assert!(first.contains("\"vip\""), "{first}");
    lb.restart(Stop::Kill, &[])
        .unwrap_or_else(|e| panic!("restart: {e:#}"));
    let _ = tracing.kill();
    let _ = tracing.wait();
    assert!(lb.log().contains("adopting the datapath"), "{}", lb.log());
    conn.exchange("no trace client")
        .expect("forwarded while nobody traces");
    let events = trace(&lb, &["--vip", &tcp_vip, "--client", &filter], 1, || {
        conn.exchange("after").expect("exchange after the restart");
    });
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].decision, "conntrack-hit", "{}", events[0]);
    assert_eq!(
        (events[0].reason.as_str(), events[0].action.as_str()),
        ("tx_encap", "XDP_TX")
    );
}

/// The value of `name{labels}` in `exposition` (Prometheus text), if it has the sample.
fn sample(exposition: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{name}{{{labels}}} ");
    exposition
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.parse().ok())
}

#[test]
fn the_announced_gauge_follows_the_operators_withdrawal() {
    let bed = bed(2);
    let config = DaemonConfig {
        extra: "\n[announce]\nenabled = true\n".into(),
        ..DaemonConfig::equal(1..=2)
    };
    let lb = daemon(&bed, &config);
    let announced = |tcp: bool| {
        let exposition = get(bed.lb_ns(), endpoint(), "/metrics", None).expect("GET /metrics");
        let labels = format!("vip=\"{}\"", vip_text(false, tcp));
        sample(&exposition, "lb_vip_announced", &labels)
    };
    assert_eq!(announced(true), Some(1.0));
    let vip = vip_text(false, true);
    for (action, want) in [("withdraw", 0.0), ("announce", 1.0)] {
        lb.cli(&["vip", action, "--vip", &vip])
            .unwrap_or_else(|e| panic!("lb vip {action}: {e:#}"));
        // One route serves both VIPs of the address.
        assert_eq!(announced(true), Some(want), "after lb vip {action}");
        assert_eq!(announced(false), Some(want), "after lb vip {action}");
    }
}
